//===- NativeTensor.h - HostTensors as device buffers, for tests --*- C++ -*-===//
//
// A HostTensor in its dtype's memory layout (what CudaExecutable's inputs
// and outputs hold), one element of such a buffer or all of it read back.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TESTS_UNIT_CUDA_NATIVETENSOR_H
#define KILN_TESTS_UNIT_CUDA_NATIVETENSOR_H

#include "ir/HostTensor.h"
#include "runtime/Half.h"

#include <cstdint>
#include <cstring>
#include <vector>

namespace kiln::cuda_step_test {

namespace rt = kiln::runtime;

// |t| in its dtype's memory layout (bf16 and f16 rounded to nearest even).
inline std::vector<uint8_t> toNative(const HostTensor &t) {
  int64_t width = byteWidth(t.dtype());
  std::vector<uint8_t> out(t.size() * width);
  for (int64_t i = 0; i < t.size(); ++i) {
    uint8_t *p = out.data() + i * width;
    double v = t[i];
    switch (t.dtype()) {
    case DType::f64: std::memcpy(p, &v, 8); break;
    case DType::f32: { float f = v; std::memcpy(p, &f, 4); break; }
    case DType::f16: { uint16_t h = rt::floatToF16(v); std::memcpy(p, &h, 2); break; }
    case DType::bf16: { uint16_t h = rt::floatToBf16(v); std::memcpy(p, &h, 2); break; }
    case DType::i64: { int64_t x = v; std::memcpy(p, &x, 8); break; }
    case DType::i32: { int32_t x = v; std::memcpy(p, &x, 4); break; }
    case DType::i8: { int8_t x = v; std::memcpy(p, &x, 1); break; }
    case DType::i1: *p = v != 0; break;
    }
  }
  return out;
}

// Element |i| of a buffer of |dtype|.
inline double nativeAt(const std::vector<uint8_t> &b, DType dtype, int64_t i) {
  const uint8_t *p = b.data() + i * byteWidth(dtype);
  switch (dtype) {
  case DType::f64: { double v; std::memcpy(&v, p, 8); return v; }
  case DType::f32: { float v; std::memcpy(&v, p, 4); return v; }
  case DType::f16: { uint16_t h; std::memcpy(&h, p, 2); return rt::f16ToFloat(h); }
  case DType::bf16: { uint16_t h; std::memcpy(&h, p, 2); return rt::bf16ToFloat(h); }
  case DType::i64: { int64_t v; std::memcpy(&v, p, 8); return double(v); }
  case DType::i32: { int32_t v; std::memcpy(&v, p, 4); return v; }
  case DType::i8: { int8_t v; std::memcpy(&v, p, 1); return v; }
  case DType::i1: return *p != 0;
  }
  return 0;
}

// A buffer of |dtype| and |shape| (toNative's layout) as a HostTensor.
inline HostTensor fromNative(const std::vector<uint8_t> &b, DType dtype,
                             llvm::ArrayRef<int64_t> shape) {
  HostTensor t(dtype, shape);
  for (int64_t i = 0; i < t.size(); ++i)
    t[i] = nativeAt(b, dtype, i);
  return t;
}

} // namespace kiln::cuda_step_test

#endif // KILN_TESTS_UNIT_CUDA_NATIVETENSOR_H
