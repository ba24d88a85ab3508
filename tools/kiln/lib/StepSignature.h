//===- StepSignature.h - a step package's signature -------------*- C++ -*-===//
//
// What kiln train's compiled backends (CpuBackend.cpp, CudaBackend.cpp) read
// from a loaded step or eval package's signature, whichever runtime runs
// it: the data inputs (inputs, then labels), the loss, the step counter,
// the parameters and optimizer state, and how the eval step's logits and
// parameters match the training step's.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TOOLS_KILN_LIB_STEPSIGNATURE_H
#define KILN_TOOLS_KILN_LIB_STEPSIGNATURE_H

#include "tools/kiln/lib/TrainBackend.h"

#include "runtime/data/Sampler.h"
#include "runtime/package/Package.h"
#include "runtime/package/SharedArena.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/raw_ostream.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace kiln::cli {

// Where a loaded package's data goes and where its results are.
struct StepSignature {
  std::vector<size_t> dataInputs; // signature inputs: inputs, then labels
  std::vector<DataArgument> data;
  int loss = -1;   // signature output
  int predictions = -1; // signature output (eval)
  int stepCounter = -1;

  // Fills in the data inputs (with the index bounds the package records:
  // SignatureEntry::indexBound, 0 unknown), the step counter and the loss
  // (-1 when no output has role loss; the backends say what they expected).
  void describe(const runtime::LoadedPackage &pkg);

  // Copies |batch| (the data tensors, in dataInputs' order) into the host
  // buffer |hostInput| gives for each data input of |pkg| (its signature
  // index). Prints the problem (prefixed with |command|) and fails.
  bool copyBatch(const runtime::LoadedPackage &pkg, const runtime::Batch &batch,
                 const std::function<runtime::StatusOr<void *>(size_t input)> &hostInput,
                 llvm::raw_ostream &errs, llvm::StringRef command) const;
};

// Whether |values| hold as many elements as signature entry |e|; else
// |error| says how many ("holds 3 values: expected 4").
bool valuesFit(const runtime::SignatureEntry &e,
               const runtime::TensorValues &values, std::string &error);

// The training step's parameters and optimizer state, in signature order,
// and their signature inputs.
void collectState(const runtime::LoadedPackage &pkg,
                  std::vector<StateEntry> &state,
                  std::vector<size_t> &stateInputs);

// Sets |parameters| to the (eval input, training input) pairs of
// |evalPkg| and |trainPkg| of the same name (the eval step's inputs other
// than data: its parameters and model state), and |bindings| to the same
// pairs (SharedArena.h's InputBinding) when the eval step can run in the
// training step's memory, reading them in place; else to none, and |why|
// says why not (the backend then runs it in memory of its own and copies
// the parameters before an eval). Prints an input whose type differs
// (prefixed with |command|) and fails.
bool bindEvalInputs(const runtime::LoadedPackage &trainPkg,
                    const runtime::LoadedPackage &evalPkg,
                    std::vector<std::pair<size_t, size_t>> &parameters,
                    std::vector<runtime::InputBinding> &bindings,
                    std::string &why, llvm::StringRef command,
                    llvm::raw_ostream &errs);

// ZeRO: gives each sharded input of |pkg| (its metadata's ShardLayouts) its
// first value, block |rank| of |worldSize| of its bucket's parameters'
// first values, the same on every rank: the full parameters' inputs where
// the step has them (zero1/2, through |readInput|), else their
// initializers (zero3). |writeInput| stores a block (false and its error
// on failure). Prints the problem (a layout for another world size, a
// missing input; prefixed with |command|) and fails.
bool initShardInputs(
    const runtime::LoadedPackage &pkg, int rank, int worldSize,
    const std::function<runtime::TensorValues(size_t input)> &readInput,
    const std::function<bool(size_t input, const runtime::TensorValues &,
                             std::string &error)> &writeInput,
    llvm::StringRef command, llvm::raw_ostream &errs);

// Sets eval.predictions to the last integer output of |evalPkg| of rank 1
// (exposeCrossEntropyPredictions'), -1 when it has none.
void findEvalPredictions(const runtime::LoadedPackage &evalPkg,
                         StepSignature &eval);

} // namespace kiln::cli

#endif // KILN_TOOLS_KILN_LIB_STEPSIGNATURE_H
