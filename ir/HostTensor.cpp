//===- HostTensor.cpp - tensors on the host -------------------------------===//

#include "ir/HostTensor.h"

#include <cmath>
#include <limits>
#include <sstream>

namespace kiln {
namespace {

// Rounds |x| to a binary float format with |precision| significand bits
// (including the implicit bit), smallest normal exponent |minExp| and
// largest finite value |maxFinite|: round-to-nearest-even, subnormals kept,
// overflow to infinity. Computed directly from the double, so there is no
// double rounding through f32.
double roundBinary(double x, int precision, int minExp, double maxFinite) {
  if (!std::isfinite(x) || x == 0.0)
    return x;
  int exp2;
  std::frexp(x, &exp2); // x = m * 2^exp2 with 0.5 <= |m| < 1
  int lead = exp2 - 1;  // exponent of the leading bit
  int quantum = std::max(lead, minExp) - (precision - 1);
  double y = std::ldexp(std::nearbyint(std::ldexp(x, -quantum)), quantum);
  if (std::fabs(y) > maxFinite)
    return std::copysign(std::numeric_limits<double>::infinity(), x);
  return y;
}

} // namespace

const char *dtypeName(DType dtype) {
  switch (dtype) {
  case DType::f64: return "f64";
  case DType::f32: return "f32";
  case DType::f16: return "f16";
  case DType::bf16: return "bf16";
  case DType::i64: return "i64";
  case DType::i32: return "i32";
  case DType::i8: return "i8";
  case DType::i1: return "i1";
  }
  return "?";
}

bool isFloat(DType dtype) {
  return dtype == DType::f64 || dtype == DType::f32 || dtype == DType::f16 ||
         dtype == DType::bf16;
}

int64_t byteWidth(DType dtype) {
  switch (dtype) {
  case DType::f64: case DType::i64: return 8;
  case DType::f32: case DType::i32: return 4;
  case DType::f16: case DType::bf16: return 2;
  case DType::i8: case DType::i1: return 1;
  }
  return 0;
}

double roundTo(DType dtype, double v) {
  switch (dtype) {
  case DType::f64:
    return v;
  case DType::f32:
    return static_cast<double>(static_cast<float>(v));
  case DType::f16:
    return roundBinary(v, 11, -14, 65504.0);
  case DType::bf16:
    return roundBinary(v, 8, -126, 3.38953138925153547590470800371487866880e+38);
  case DType::i64:
    return std::isfinite(v) ? std::trunc(v) : 0.0;
  case DType::i32:
    return std::isfinite(v) ? static_cast<double>(static_cast<int32_t>(
                                  static_cast<uint32_t>(static_cast<int64_t>(v))))
                            : 0.0;
  case DType::i8:
    return std::isfinite(v) ? static_cast<double>(static_cast<int8_t>(
                                  static_cast<uint8_t>(static_cast<int64_t>(v))))
                            : 0.0;
  case DType::i1:
    return v != 0.0 ? 1.0 : 0.0;
  }
  return v;
}

HostTensor::HostTensor(DType dtype, llvm::ArrayRef<int64_t> shape, double fill)
    : dtype_(dtype), shape_(shape.begin(), shape.end()) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  values_.assign(n, roundTo(dtype, fill));
}

HostTensor::HostTensor(DType dtype, llvm::ArrayRef<int64_t> shape,
                       std::vector<double> values)
    : dtype_(dtype), shape_(shape.begin(), shape.end()),
      values_(std::move(values)) {}

llvm::SmallVector<int64_t, 4> HostTensor::strides() const {
  llvm::SmallVector<int64_t, 4> s(shape_.size(), 1);
  for (int64_t d = static_cast<int64_t>(shape_.size()) - 2; d >= 0; --d)
    s[d] = s[d + 1] * shape_[d + 1];
  return s;
}

void HostTensor::roundAll() {
  for (double &v : values_)
    v = roundTo(dtype_, v);
}

std::string HostTensor::str(int64_t maxElements) const {
  std::ostringstream os;
  os << "tensor<";
  for (int64_t d : shape_)
    os << d << "x";
  os << dtypeName(dtype_) << "> [";
  for (int64_t i = 0; i < size() && i < maxElements; ++i)
    os << (i ? ", " : "") << values_[i];
  if (size() > maxElements)
    os << ", ...";
  os << "]";
  return os.str();
}

} // namespace kiln
