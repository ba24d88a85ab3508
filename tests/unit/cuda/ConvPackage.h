//===- ConvPackage.h - one-convolution CUDA packages for tests -----*- C++ -*-===//
//
// A CUDA package whose step is one convolution library call (Conv2D,
// Conv2DInputGrad or Conv2DFilterGrad): inputs "a" and "b" (the thunk's
// operands), output "r" (its result), all of one dtype, 256-byte aligned
// in the arena; and a direct host evaluation of the three convolutions in
// double precision from their definitions (loops over every output and
// filter tap), for tests without the interpreter (the GPU machine).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TESTS_UNIT_CUDA_CONVPACKAGE_H
#define KILN_TESTS_UNIT_CUDA_CONVPACKAGE_H

#include "runtime/package/Package.h"

#include <vector>

namespace kiln::runtime::cuda::testing {

// |p| with its output shape computed from the others.
inline ConvParams convParams(std::vector<int64_t> in, std::vector<int64_t> filter,
                             std::vector<int64_t> strides,
                             std::vector<int64_t> padding,
                             std::vector<int64_t> dilation, int64_t groups) {
  ConvParams p;
  p.inputShape = in, p.filterShape = filter, p.strides = strides;
  p.padding = padding, p.dilation = dilation, p.groups = groups;
  p.outputShape = {in[0], filter[0], 0, 0};
  for (int i = 0; i < 2; ++i)
    p.outputShape[2 + i] = (in[2 + i] + padding[2 * i] + padding[2 * i + 1] -
                            dilation[i] * (filter[2 + i] - 1) - 1) /
                               strides[i] +
                           1;
  return p;
}

// The operand and result shapes of |kind|: (x, w) -> y, (dy, w) -> dx,
// (x, dy) -> dw.
inline std::vector<std::vector<int64_t>> convShapes(LibraryKind kind,
                                                    const ConvParams &p) {
  switch (kind) {
  case LibraryKind::Conv2D: return {p.inputShape, p.filterShape, p.outputShape};
  case LibraryKind::Conv2DInputGrad:
    return {p.outputShape, p.filterShape, p.inputShape};
  default: return {p.inputShape, p.outputShape, p.filterShape};
  }
}

inline int64_t numel(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

inline LoadedPackage convPackage(LibraryKind kind, const ConvParams &p,
                                 PkgDType dtype) {
  LoadedPackage pkg;
  pkg.target.kind = TargetKind::Cuda;
  pkg.target.smArchs = {90};
  std::vector<std::vector<int64_t>> shapes = convShapes(kind, p);
  const char *names[3] = {"a", "b", "r"};
  uint64_t offset = 0;
  for (int i = 0; i < 3; ++i) {
    PackageBuffer b;
    b.name = names[i];
    b.dtype = dtype;
    b.shape = shapes[i];
    b.offset = offset;
    b.size = uint64_t(numel(shapes[i])) * pkgBytesPerElement(dtype);
    b.role = i < 2 ? PkgRole::Input : PkgRole::Output;
    offset += (b.size + 255) / 256 * 256;
    pkg.buffers.push_back(b);
    SignatureEntry e;
    e.name = names[i];
    e.role = b.role;
    e.dtype = dtype;
    e.shape = shapes[i];
    e.buffer = static_cast<uint32_t>(i);
    (i < 2 ? pkg.inputs : pkg.outputs).push_back(e);
  }
  pkg.arenaSize = offset;
  PackageThunk t;
  t.kind = ThunkKind::LibraryCall;
  t.library = kind;
  t.hasConv = true;
  t.conv = p;
  t.operands = {0, 1};
  t.results = {2};
  pkg.thunks = {t};
  return pkg;
}

// The convolution |kind| of |a| and |b| (convShapes' operands), by its
// definition, in double precision.
inline std::vector<double> hostConv(LibraryKind kind, const ConvParams &p,
                                    const std::vector<double> &a,
                                    const std::vector<double> &b) {
  int64_t N = p.inputShape[0], C = p.inputShape[1], H = p.inputShape[2],
          W = p.inputShape[3], O = p.filterShape[0], KH = p.filterShape[2],
          KW = p.filterShape[3], OH = p.outputShape[2], OW = p.outputShape[3];
  int64_t G = p.groups, cg = C / G, og = O / G;
  std::vector<double> r(numel(convShapes(kind, p)[2]), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t y = 0; y < OH; ++y)
        for (int64_t x = 0; x < OW; ++x)
          for (int64_t c = 0; c < cg; ++c)
            for (int64_t i = 0; i < KH; ++i)
              for (int64_t j = 0; j < KW; ++j) {
                int64_t iy = y * p.strides[0] - p.padding[0] + i * p.dilation[0];
                int64_t ix = x * p.strides[1] - p.padding[2] + j * p.dilation[1];
                if (iy < 0 || iy >= H || ix < 0 || ix >= W)
                  continue;
                int64_t ci = (o / og) * cg + c;
                int64_t xi = ((n * C + ci) * H + iy) * W + ix;
                int64_t wi = ((o * cg + c) * KH + i) * KW + j;
                int64_t yi = ((n * O + o) * OH + y) * OW + x;
                switch (kind) {
                case LibraryKind::Conv2D: r[yi] += a[xi] * b[wi]; break;
                case LibraryKind::Conv2DInputGrad: r[xi] += a[yi] * b[wi]; break;
                default: r[wi] += a[xi] * b[yi]; break;
                }
              }
  return r;
}

} // namespace kiln::runtime::cuda::testing

#endif // KILN_TESTS_UNIT_CUDA_CONVPACKAGE_H
