//===- ConvGeometry.h - A CPU convolution's sizes, for its kernels -*- C++ -*-===//
//
// What runtime/cpu/Blas.cpp (im2col) and runtime/cpu/DirectConv.cpp read
// of a kiln.conv2d's ConvParams (already checked by pkgCheckConvParams):
// NCHW input, OIHW filter, NCHW output, strides, the top and left padding,
// dilation and groups.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_CPU_CONVGEOMETRY_H
#define KILN_RUNTIME_CPU_CONVGEOMETRY_H

#include "runtime/package/Package.h"

#include <cstdint>

namespace kiln::runtime::cpu {

struct ConvGeometry {
  int64_t n, c, h, w, o, kh, kw, oh, ow, groups;
  int64_t sh, sw, pt, pl, dh, dw;
  int64_t cg() const { return c / groups; }
  int64_t og() const { return o / groups; }
  // The im2col matrix of one image and group: [cg * kh * kw, oh * ow] (its
  // rows are a group's filter taps, the GEMM's K).
  int64_t colRows() const { return cg() * kh * kw; }
  int64_t colCols() const { return oh * ow; }
};

inline ConvGeometry convGeometry(const ConvParams &p) {
  ConvGeometry g;
  g.n = p.inputShape[0], g.c = p.inputShape[1], g.h = p.inputShape[2];
  g.w = p.inputShape[3];
  g.o = p.filterShape[0], g.kh = p.filterShape[2], g.kw = p.filterShape[3];
  g.oh = p.outputShape[2], g.ow = p.outputShape[3];
  g.groups = p.groups;
  g.sh = p.strides[0], g.sw = p.strides[1];
  g.pt = p.padding[0], g.pl = p.padding[2];
  g.dh = p.dilation[0], g.dw = p.dilation[1];
  return g;
}

// ceil(a / b) and floor(a / b) for b > 0 and any a.
inline int64_t ceilDiv(int64_t a, int64_t b) {
  return a >= 0 ? (a + b - 1) / b : -((-a) / b);
}
inline int64_t floorDiv(int64_t a, int64_t b) {
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}

} // namespace kiln::runtime::cpu

#endif // KILN_RUNTIME_CPU_CONVGEOMETRY_H
