//===- PkgBuffers.h - f32, bf16 and f16 buffers for GPU tests ------*- C++ -*-===//
//
// Host buffers of a package dtype (f32, bf16 or f16) for the tests that run
// kernels and GEMMs on a GPU or the fake table: random values, and one
// element read back as a double; f32 package buffers, GEMM thunks and
// signature entries for packages built by hand. No LLVM.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TESTS_UNIT_CUDA_PKGBUFFERS_H
#define KILN_TESTS_UNIT_CUDA_PKGBUFFERS_H

#include "runtime/Half.h"
#include "runtime/package/Package.h"

#include <cstdint>
#include <random>
#include <vector>

namespace kiln::runtime::cuda::testing {

// |n| values uniform on [-1, 1) (seeded by |seed|), rounded to |dtype|.
inline std::vector<uint8_t> randomBuffer(PkgDType dtype, int64_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1, 1);
  std::vector<uint8_t> out(n * pkgBytesPerElement(dtype));
  for (int64_t i = 0; i < n; ++i) {
    float v = d(rng);
    if (dtype == PkgDType::F32)
      reinterpret_cast<float *>(out.data())[i] = v;
    else if (dtype == PkgDType::BF16)
      reinterpret_cast<uint16_t *>(out.data())[i] = floatToBf16(v);
    else
      reinterpret_cast<uint16_t *>(out.data())[i] = floatToF16(v);
  }
  return out;
}

// Element |i| of a buffer of |dtype| (f32, bf16 or f16).
inline double valueAt(PkgDType dtype, const std::vector<uint8_t> &b, int64_t i) {
  if (dtype == PkgDType::F32)
    return reinterpret_cast<const float *>(b.data())[i];
  uint16_t h = reinterpret_cast<const uint16_t *>(b.data())[i];
  return dtype == PkgDType::BF16 ? bf16ToFloat(h) : f16ToFloat(h);
}

// An f32 package buffer of |shape| at arena offset |offset| (its size
// from the shape), for packages built by hand.
inline PackageBuffer f32Buffer(const char *name, PkgRole role,
                               std::vector<int64_t> shape, uint64_t offset,
                               int32_t updates = -1) {
  PackageBuffer b;
  b.name = name;
  b.role = role;
  b.shape = shape;
  b.offset = offset;
  b.size = 4;
  for (int64_t d : shape)
    b.size *= d;
  b.updates = updates;
  return b;
}

// A plain GEMM thunk out = lhs . rhs ([m, k] x [k, n]), for packages
// built by hand.
inline PackageThunk gemmThunk(int64_t m, int64_t n, int64_t k, uint32_t lhs,
                              uint32_t rhs, uint32_t out) {
  PackageThunk t;
  t.kind = ThunkKind::LibraryCall;
  t.library = LibraryKind::Gemm;
  t.hasGemm = true;
  t.gemm.m = m;
  t.gemm.n = n;
  t.gemm.k = k;
  t.operands = {lhs, rhs};
  t.results = {out};
  return t;
}

// The signature entry |name| of |role| for buffer |id| of |p| (its shape).
inline SignatureEntry signatureEntry(const LoadedPackage &p, const char *name,
                                     PkgRole role, uint32_t id) {
  SignatureEntry e;
  e.name = name;
  e.role = role;
  e.shape = p.buffers[id].shape;
  e.buffer = id;
  return e;
}

// |n| floats uniform on [-1, 1), seeded by |seed|.
inline std::vector<float> randomFloats(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1, 1);
  std::vector<float> v(n);
  for (float &x : v)
    x = d(rng);
  return v;
}

} // namespace kiln::runtime::cuda::testing

#endif // KILN_TESTS_UNIT_CUDA_PKGBUFFERS_H
