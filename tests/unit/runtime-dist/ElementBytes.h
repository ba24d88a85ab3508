//===- ElementBytes.h - typed elements in byte buffers for the collective tests -*- C++ -*-===//
//
// The communicator tests (CommunicatorTest, LocalCommunicatorTest) fill and
// read their buffers an element at a time as a package dtype lays it out
// (f16 and bf16 through runtime/Half.h, i1 one byte).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TESTS_UNIT_RUNTIME_DIST_ELEMENTBYTES_H
#define KILN_TESTS_UNIT_RUNTIME_DIST_ELEMENTBYTES_H

#include "runtime/Half.h"
#include "runtime/package/Package.h"

#include <cstdint>
#include <cstring>
#include <vector>

namespace kiln::runtime::dist::test {

inline size_t bytesOf(PkgDType dtype) { return pkgBytesPerElement(dtype); }

// Stores |v| as |dtype| at element |i| of |data|.
inline void put(PkgDType dtype, std::vector<uint8_t> &data, size_t i, double v) {
  uint8_t *p = data.data() + i * bytesOf(dtype);
  switch (dtype) {
  case PkgDType::F64: std::memcpy(p, &v, 8); break;
  case PkgDType::F32: { float f = v; std::memcpy(p, &f, 4); break; }
  case PkgDType::F16: { uint16_t h = floatToF16(v); std::memcpy(p, &h, 2); break; }
  case PkgDType::BF16: { uint16_t h = floatToBf16(v); std::memcpy(p, &h, 2); break; }
  case PkgDType::I64: { int64_t x = v; std::memcpy(p, &x, 8); break; }
  case PkgDType::I32: { int32_t x = v; std::memcpy(p, &x, 4); break; }
  case PkgDType::I8: { int8_t x = v; std::memcpy(p, &x, 1); break; }
  case PkgDType::I1: *p = v != 0; break;
  }
}

// Element |i| of |data| as |dtype|.
inline double get(PkgDType dtype, const std::vector<uint8_t> &data, size_t i) {
  const uint8_t *p = data.data() + i * bytesOf(dtype);
  switch (dtype) {
  case PkgDType::F64: { double v; std::memcpy(&v, p, 8); return v; }
  case PkgDType::F32: { float v; std::memcpy(&v, p, 4); return v; }
  case PkgDType::F16: { uint16_t h; std::memcpy(&h, p, 2); return f16ToFloat(h); }
  case PkgDType::BF16: { uint16_t h; std::memcpy(&h, p, 2); return bf16ToFloat(h); }
  case PkgDType::I64: { int64_t v; std::memcpy(&v, p, 8); return v; }
  case PkgDType::I32: { int32_t v; std::memcpy(&v, p, 4); return v; }
  case PkgDType::I8: { int8_t v; std::memcpy(&v, p, 1); return v; }
  case PkgDType::I1: return *p;
  }
  return 0;
}

inline bool isFloat(PkgDType d) {
  return d == PkgDType::F64 || d == PkgDType::F32 || d == PkgDType::F16 ||
         d == PkgDType::BF16;
}

} // namespace kiln::runtime::dist::test

#endif // KILN_TESTS_UNIT_RUNTIME_DIST_ELEMENTBYTES_H
