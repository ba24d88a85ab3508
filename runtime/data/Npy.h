//===- Npy.h - NumPy .npy files and the npy:DIR dataset -----------*- C++ -*-===//
//
// A small reader for NumPy's .npy format (format versions 1.0, 2.0 and 3.0:
// magic, version, header length, a Python dict literal with 'descr',
// 'fortran_order' and 'shape', then the raw data). It reads the dtypes a
// training set needs ('<f4' '<f8' '<i4' '<i8' '|u1' '<u2') in C order and
// rejects anything else with an error naming the file and what it found.
//
// NpyDataset is --data=npy:DIR: one DIR/<input>.npy per graph input, all
// with the same leading (sample) dimension.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_DATA_NPY_H
#define KILN_RUNTIME_DATA_NPY_H

#include "runtime/Status.h"
#include "runtime/data/Dataset.h"

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace kiln::runtime {

struct NpyArray {
  std::string descr;           // as in the file, e.g. "<f4"
  std::vector<int64_t> shape;  // C order
  std::vector<uint8_t> data;   // raw little-endian elements
  int64_t itemSize = 0;

  int64_t elementCount() const;
  bool isFloat() const { return descr[1] == 'f'; }
  // Element |i| converted; values of '<i8' outside int32 are an error.
  double asDouble(int64_t i) const;
  StatusOr<int32_t> asInt32(int64_t i) const;
};

// Parses the bytes of a .npy file; |name| is used in error messages.
StatusOr<NpyArray> parseNpy(const std::vector<uint8_t> &bytes,
                            const std::string &name);
StatusOr<NpyArray> readNpy(const std::string &path);

class NpyDataset : public Dataset {
public:
  // Loads DIR/<name>.npy for each (name, type) of |inputs|; with no inputs,
  // every *.npy file in |dir| (sorted by name) with its natural type: float
  // dtypes as f32, integer dtypes as i32. Integer files may feed f32
  // inputs; float files cannot feed i32 inputs.
  static StatusOr<std::unique_ptr<NpyDataset>>
  open(const std::string &dir,
       const std::vector<std::pair<std::string, ElementType>> &inputs = {});

  int64_t size() const override { return count_; }
  const std::vector<TensorSpec> &specs() const override { return specs_; }
  Status copySample(int64_t index, size_t tensor, void *dst) const override;

private:
  std::vector<TensorSpec> specs_;
  std::vector<std::vector<float>> f32_;   // per tensor, when f32
  std::vector<std::vector<int32_t>> i32_; // per tensor, when i32
  std::vector<std::vector<double>> f64_;  // per tensor, when f64
  int64_t count_ = 0;
};

} // namespace kiln::runtime

#endif // KILN_RUNTIME_DATA_NPY_H
