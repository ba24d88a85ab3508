//===- DataSpec.h - --data=SPEC to a Dataset ----------------------*- C++ -*-===//
//
// The CLI's data specs (DESIGN.md): "fashion-mnist[:DIR]" (the IDX files,
// Debian's directory by default), "npy:DIR" (one .npy per graph input,
// named after it), "tokens:FILE" (uint16 tokens, next-token labels) and
// "synthetic" (random data of the inputs' shapes). openDataset builds the
// Dataset for a step's graph inputs, given in the order the step takes
// them, and checks the data fits them.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_DATA_DATASPEC_H
#define KILN_RUNTIME_DATA_DATASPEC_H

#include "runtime/Status.h"
#include "runtime/data/Dataset.h"

#include <memory>
#include <string>
#include <vector>

namespace kiln::runtime {

struct DataSpec {
  enum class Kind { fashionMnist, npy, tokens, synthetic };
  Kind kind = Kind::synthetic;
  std::string path; // directory or file; empty for synthetic
};

StatusOr<DataSpec> parseDataSpec(const std::string &spec);

struct DataOptions {
  std::string split = "train";     // fashion-mnist
  int64_t syntheticSize = 1024;    // synthetic
  uint64_t seed = 0;               // synthetic
};

// |inputs|: the step's data inputs (per-sample shapes, no batch dimension).
// fashion-mnist and tokens need exactly two (data, label); their names are
// used for the tensors.
StatusOr<std::unique_ptr<Dataset>>
openDataset(const DataSpec &spec, const std::vector<TensorSpec> &inputs,
            const DataOptions &options = {});

} // namespace kiln::runtime

#endif // KILN_RUNTIME_DATA_DATASPEC_H
