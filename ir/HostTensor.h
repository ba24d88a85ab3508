//===- HostTensor.h - tensors on the host for the reference interpreter -*- C++ -*-===//
//
// A dense row-major tensor whose elements are held as doubles, tagged with
// the element type it stands for. Every value is kept rounded to that type
// (IEEE round-to-nearest-even for f32, f16 and bf16; two's-complement wrap
// for integers; 0 or 1 for i1), so a computation in doubles followed by
// roundAll() gives what hardware storing that type would hold. Integers are
// exact up to 2^53, which covers indices, labels and step counters.
// No MLIR dependency: tests and tools share it.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_IR_HOSTTENSOR_H
#define KILN_IR_HOSTTENSOR_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

enum class DType : uint8_t { f64, f32, f16, bf16, i64, i32, i8, i1 };

const char *dtypeName(DType dtype);
bool isFloat(DType dtype);
// Bytes one element takes in memory (i1 takes one byte).
int64_t byteWidth(DType dtype);
// Rounds |value| to the nearest value of |dtype| (see the file comment).
double roundTo(DType dtype, double value);

class HostTensor {
public:
  HostTensor() = default;
  HostTensor(DType dtype, llvm::ArrayRef<int64_t> shape, double fill = 0.0);
  HostTensor(DType dtype, llvm::ArrayRef<int64_t> shape,
             std::vector<double> values);

  DType dtype() const { return dtype_; }
  llvm::ArrayRef<int64_t> shape() const { return shape_; }
  int64_t rank() const { return shape_.size(); }
  int64_t size() const { return values_.size(); }
  int64_t dim(int64_t d) const { return shape_[d]; }
  // Row-major strides in elements.
  llvm::SmallVector<int64_t, 4> strides() const;

  std::vector<double> &values() { return values_; }
  const std::vector<double> &values() const { return values_; }
  double &operator[](int64_t i) { return values_[i]; }
  double operator[](int64_t i) const { return values_[i]; }

  // Rounds every element to the element type.
  void roundAll();
  // A short printable form: "tensor<2x3xf32> [1, 2, 3, ...]".
  std::string str(int64_t maxElements = 8) const;

private:
  DType dtype_ = DType::f32;
  llvm::SmallVector<int64_t, 4> shape_;
  std::vector<double> values_;
};

} // namespace kiln

#endif // KILN_IR_HOSTTENSOR_H
