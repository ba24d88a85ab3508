//===- AttentionPackage.h - an attention package and its definition -*- C++ -*-===//
//
// For the fused attention tests (CudaAttentionTest.cpp on the fake table,
// CudaGpuTest.cpp on a GPU): a CUDA package with an Attention thunk (q, k,
// v -> out, lse) followed by an AttentionGrad thunk (q, k, v, out, lse,
// dout -> dq, dk, dv), and the same in the packed layout (qkv -> out, lse;
// qkv, out, lse, dout -> dqkv) with the rearrangements between the two;
// typed buffers to and from doubles; and the operations by their
// definition (docs: the attention contract), naively, in double precision:
// scores, causal mask (key j visible to query i when j <= i), lse, out,
// and the backward from given out and lse.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TESTS_UNIT_CUDA_ATTENTIONPACKAGE_H
#define KILN_TESTS_UNIT_CUDA_ATTENTIONPACKAGE_H

#include "runtime/Half.h"
#include "runtime/package/Package.h"
#include "tests/unit/package/PackageMutants.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace kiln::runtime::cuda::testing {

// The buffers of a test package (tests/unit/package/PackageMutants.h).
using AttentionBufferSpec = kiln::runtime::testing::BufferSpec;
inline void addAttentionBuffers(LoadedPackage &pkg,
                                const std::vector<AttentionBufferSpec> &specs) {
  kiln::runtime::testing::addBuffers(pkg, specs);
}

// Buffers: 0 q, 1 k, 2 v, 3 dout (inputs); 4 out, 5 lse, 6 dq, 7 dk, 8 dv
// (outputs, in this order).
inline LoadedPackage attentionPackage(const AttentionParams &a, PkgDType dtype) {
  LoadedPackage pkg;
  pkg.target.kind = TargetKind::Cuda;
  pkg.target.smArchs = {90};
  PkgDType lse = dtype == PkgDType::F64 ? PkgDType::F64 : PkgDType::F32;
  std::vector<int64_t> q{a.batch, a.heads, a.qLen, a.headDim},
      k{a.batch, a.heads, a.kvLen, a.headDim},
      v{a.batch, a.heads, a.kvLen, a.valueDim},
      o{a.batch, a.heads, a.qLen, a.valueDim}, l{a.batch, a.heads, a.qLen};
  addAttentionBuffers(pkg, {{"q", q, dtype, true},
                           {"k", k, dtype, true},
                           {"v", v, dtype, true},
                           {"dout", o, dtype, true},
                           {"out", o, dtype, false},
                           {"lse", l, lse, false},
                           {"dq", q, dtype, false},
                           {"dk", k, dtype, false},
                           {"dv", v, dtype, false}});
  PackageThunk fwd;
  fwd.kind = ThunkKind::LibraryCall;
  fwd.library = LibraryKind::Attention;
  fwd.hasAttention = true;
  fwd.attention = a;
  fwd.operands = {0, 1, 2};
  fwd.results = {4, 5};
  PackageThunk bwd = fwd;
  bwd.library = LibraryKind::AttentionGrad;
  bwd.operands = {0, 1, 2, 4, 5, 3};
  bwd.results = {6, 7, 8};
  pkg.thunks = {fwd, bwd};
  return pkg;
}

// The packed layout (AttentionLayout::PackedBTHD; |a| has Tq == Tk = T and
// D == Dv). Buffers: 0 qkv [B,T,3,H,D], 1 dout [B,T,H,D] (inputs); 2 out
// [B,T,H,D], 3 lse [B,H,T], 4 dqkv [B,T,3,H,D] (outputs, in this order).
inline LoadedPackage packedAttentionPackage(AttentionParams a, PkgDType dtype) {
  a.layout = AttentionLayout::PackedBTHD;
  LoadedPackage pkg;
  pkg.target.kind = TargetKind::Cuda;
  pkg.target.smArchs = {90};
  PkgDType lse = dtype == PkgDType::F64 ? PkgDType::F64 : PkgDType::F32;
  const int64_t B = a.batch, T = a.qLen, H = a.heads, D = a.headDim;
  addAttentionBuffers(pkg, {{"qkv", {B, T, 3, H, D}, dtype, true},
                           {"dout", {B, T, H, D}, dtype, true},
                           {"out", {B, T, H, D}, dtype, false},
                           {"lse", {B, H, T}, lse, false},
                           {"dqkv", {B, T, 3, H, D}, dtype, false}});
  PackageThunk fwd;
  fwd.kind = ThunkKind::LibraryCall;
  fwd.library = LibraryKind::Attention;
  fwd.hasAttention = true;
  fwd.attention = a;
  fwd.operands = {0};
  fwd.results = {2, 3};
  PackageThunk bwd = fwd;
  bwd.library = LibraryKind::AttentionGrad;
  bwd.operands = {0, 2, 3, 1};
  bwd.results = {4};
  pkg.thunks = {fwd, bwd};
  return pkg;
}

// Element (b, h, t, d) of a [B,H,T,D] tensor is element |at|(b, t, h, d)
// of |from|: copies it there, element by element (|bytes| each).
template <class At>
std::vector<uint8_t> toHeadsFirst(const AttentionParams &a, size_t bytes,
                                  const std::vector<uint8_t> &from, At at) {
  const int64_t B = a.batch, H = a.heads, T = a.qLen, D = a.headDim;
  std::vector<uint8_t> to(size_t(B * H * T * D) * bytes);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t d = 0; d < D; ++d)
          std::memcpy(to.data() + size_t(((b * H + h) * T + t) * D + d) * bytes,
                      from.data() + size_t(at(b, t, h, d)) * bytes, bytes);
  return to;
}

// Part |which| (0 q, 1 k, 2 v) of a packed [B,T,3,H,D] tensor as [B,H,T,D].
inline std::vector<uint8_t> unpackQkv(const AttentionParams &a, PkgDType dtype,
                                      const std::vector<uint8_t> &qkv,
                                      int which) {
  const int64_t T = a.qLen, H = a.heads, D = a.headDim;
  return toHeadsFirst(a, pkgBytesPerElement(dtype), qkv,
                      [&](int64_t b, int64_t t, int64_t h, int64_t d) {
                        return (((b * T + t) * 3 + which) * H + h) * D + d;
                      });
}

// A [B,T,H,D] tensor (packed out, dout) as [B,H,T,D].
inline std::vector<uint8_t> unpackRows(const AttentionParams &a, PkgDType dtype,
                                       const std::vector<uint8_t> &bthd) {
  const int64_t T = a.qLen, H = a.heads, D = a.headDim;
  return toHeadsFirst(a, pkgBytesPerElement(dtype), bthd,
                      [&](int64_t b, int64_t t, int64_t h, int64_t d) {
                        return ((b * T + t) * H + h) * D + d;
                      });
}

inline double typedAt(PkgDType dtype, const std::vector<uint8_t> &b, int64_t i) {
  switch (dtype) {
  case PkgDType::F64: { double v; std::memcpy(&v, b.data() + 8 * i, 8); return v; }
  case PkgDType::F32: { float v; std::memcpy(&v, b.data() + 4 * i, 4); return v; }
  case PkgDType::BF16: { uint16_t h; std::memcpy(&h, b.data() + 2 * i, 2); return bf16ToFloat(h); }
  default: { uint16_t h; std::memcpy(&h, b.data() + 2 * i, 2); return f16ToFloat(h); }
  }
}

inline std::vector<double> typedValues(PkgDType dtype, const std::vector<uint8_t> &b) {
  std::vector<double> out(b.size() / pkgBytesPerElement(dtype));
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = typedAt(dtype, b, i);
  return out;
}

// |n| uniform values in [-1, 1] of |dtype|.
inline std::vector<uint8_t> randomTyped(PkgDType dtype, int64_t n, std::mt19937_64 &gen) {
  std::uniform_real_distribution<double> dist(-1, 1);
  std::vector<uint8_t> out(n * pkgBytesPerElement(dtype));
  for (int64_t i = 0; i < n; ++i) {
    double v = dist(gen);
    switch (dtype) {
    case PkgDType::F64: std::memcpy(out.data() + 8 * i, &v, 8); break;
    case PkgDType::F32: { float f = float(v); std::memcpy(out.data() + 4 * i, &f, 4); break; }
    case PkgDType::BF16: { uint16_t h = floatToBf16(float(v)); std::memcpy(out.data() + 2 * i, &h, 2); break; }
    default: { uint16_t h = floatToF16(float(v)); std::memcpy(out.data() + 2 * i, &h, 2); break; }
    }
  }
  return out;
}

struct AttentionReference {
  std::vector<double> out, lse, dq, dk, dv;
};

// The definition, per (b, h): s_ij = scale q_i . k_j over the visible j;
// lse_i = log sum exp s_ij; p = exp(s - lse); out_i = sum_j p_ij v_j. The
// backward uses the given |outIn| and |lseIn| (attention_grad's operands).
inline AttentionReference attentionReference(const AttentionParams &a,
                                             const std::vector<double> &q,
                                             const std::vector<double> &k,
                                             const std::vector<double> &v,
                                             const std::vector<double> &dout,
                                             const std::vector<double> *outIn,
                                             const std::vector<double> *lseIn) {
  int64_t BH = a.batch * a.heads, Tq = a.qLen, Tk = a.kvLen, D = a.headDim,
          DV = a.valueDim;
  AttentionReference r;
  r.out.assign(BH * Tq * DV, 0.0);
  r.lse.assign(BH * Tq, 0.0);
  r.dq.assign(BH * Tq * D, 0.0);
  r.dk.assign(BH * Tk * D, 0.0);
  r.dv.assign(BH * Tk * DV, 0.0);
  const std::vector<double> &outB = outIn ? *outIn : r.out;
  const std::vector<double> &lseB = lseIn ? *lseIn : r.lse;
  std::vector<double> s(Tk);
  for (int64_t bh = 0; bh < BH; ++bh) {
    auto Q = [&](int64_t i, int64_t d) { return q[(bh * Tq + i) * D + d]; };
    auto K = [&](int64_t j, int64_t d) { return k[(bh * Tk + j) * D + d]; };
    auto V = [&](int64_t j, int64_t e) { return v[(bh * Tk + j) * DV + e]; };
    auto visible = [&](int64_t i, int64_t j) { return !a.causal || j <= i; };
    for (int64_t i = 0; i < Tq; ++i) {
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < Tk; ++j) {
        s[j] = 0;
        for (int64_t d = 0; d < D; ++d)
          s[j] += Q(i, d) * K(j, d);
        s[j] *= a.scale;
        if (visible(i, j))
          m = std::max(m, s[j]);
      }
      double sum = 0;
      for (int64_t j = 0; j < Tk; ++j)
        if (visible(i, j))
          sum += std::exp(s[j] - m);
      r.lse[bh * Tq + i] = m + std::log(sum);
      for (int64_t j = 0; j < Tk; ++j) {
        if (!visible(i, j))
          continue;
        double p = std::exp(s[j] - r.lse[bh * Tq + i]);
        for (int64_t e = 0; e < DV; ++e)
          r.out[(bh * Tq + i) * DV + e] += p * V(j, e);
      }
    }
    // Backward from the given out and lse.
    for (int64_t i = 0; i < Tq; ++i) {
      double Di = 0;
      for (int64_t e = 0; e < DV; ++e)
        Di += dout[(bh * Tq + i) * DV + e] * outB[(bh * Tq + i) * DV + e];
      for (int64_t j = 0; j < Tk; ++j) {
        if (!visible(i, j))
          continue;
        double sij = 0;
        for (int64_t d = 0; d < D; ++d)
          sij += Q(i, d) * K(j, d);
        double p = std::exp(a.scale * sij - lseB[bh * Tq + i]);
        double dp = 0;
        for (int64_t e = 0; e < DV; ++e)
          dp += dout[(bh * Tq + i) * DV + e] * V(j, e);
        double ds = p * (dp - Di);
        for (int64_t d = 0; d < D; ++d) {
          r.dq[(bh * Tq + i) * D + d] += a.scale * ds * K(j, d);
          r.dk[(bh * Tk + j) * D + d] += a.scale * ds * Q(i, d);
        }
        for (int64_t e = 0; e < DV; ++e)
          r.dv[(bh * Tk + j) * DV + e] += p * dout[(bh * Tq + i) * DV + e];
      }
    }
  }
  return r;
}

inline AttentionParams attentionParams(int64_t b, int64_t h, int64_t tq,
                                       int64_t tk, int64_t d, int64_t dv,
                                       bool causal) {
  AttentionParams a;
  a.batch = b, a.heads = h, a.qLen = tq, a.kvLen = tk, a.headDim = d;
  a.valueDim = dv, a.causal = causal;
  a.scale = 1.0 / std::sqrt(double(d));
  return a;
}

// max_i |got_i - want_i| / max_i |want_i| (0 when both are zero).
inline double relativeError(const std::vector<double> &got,
                            const std::vector<double> &want) {
  double err = 0, scale = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    double g = i < got.size() ? got[i] : NAN;
    err = std::isnan(g) ? INFINITY : std::max(err, std::fabs(g - want[i]));
    scale = std::max(scale, std::fabs(want[i]));
  }
  return scale > 0 ? err / scale : err;
}

} // namespace kiln::runtime::cuda::testing

#endif // KILN_TESTS_UNIT_CUDA_ATTENTIONPACKAGE_H
