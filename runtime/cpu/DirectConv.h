//===- DirectConv.h - f32 convolutions without im2col on AVX-512 -*- C++ -*-===//
//
// kiln.conv2d and its two gradients in f32, as GEMMs whose rows are read
// straight from a copy of the input instead of from an im2col matrix nine
// times its size.
//
// Each image's channels are copied once into zero-padded "phase planes":
// for stride s, s * s planes per channel, plane (py, px) holding the input
// pixels (s * yq + py - padTop, s * xq + px - padLeft). In those planes the
// pixels a filter tap (i, j) reads for the output positions y * Wq + x (Wq
// the planes' width, at least the output's) are one contiguous run that
// starts at a fixed offset, so the im2col matrix's row for (c, i, j) is
// that run: an offset table stands in for the matrix. Output columns
// x >= OW are computed and dropped (forward), or multiplied by zeros (the
// filter gradient), which costs (Wq - OW) / Wq of the arithmetic.
//
// The arithmetic is a register-blocked AVX-512 kernel (up to 8 rows by 48
// columns of f32 accumulators, FMAs with a broadcast operand):
//   forward      out[o, n] = sum_k W[o, k] row_k[n]      (W packed per
//                8 rows, rows of the planes as the vector operand);
//   filter grad  dW[o, k] = sum_n dy[o, n] row_k[n]     (computed as dW^T,
//                dy transposed so its O values are the vector operand,
//                the planes broadcast);
//   input grad   for stride 1, the forward kernel on dy with the filter
//                flipped and transposed (a "full" convolution); for larger
//                strides, one such GEMM per stride phase of dx over the
//                taps that reach it (a sub-pixel decomposition).
// On LeNet-5's and ResNet-8's convolutions this runs at about twice the
// speed of im2col plus OpenBLAS (bench/RESULTS.md, thirty-ninth session).
//
// Each function computes what Blas.h's conv2d, conv2dInputGrad and
// conv2dFilterGrad compute for f32 on |params| (already checked by
// pkgCheckConvParams), single-threaded, overwriting its result. It returns
// false, having written nothing, where it is not enabled (a CPU without
// AVX-512F, an OS that does not save its registers, or
// KILN_CPU_CONV=im2col).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_CPU_DIRECTCONV_H
#define KILN_RUNTIME_CPU_DIRECTCONV_H

#include "runtime/package/Package.h"

namespace kiln::runtime::cpu {

// Whether this CPU runs the direct convolutions (AVX-512F, and the OS saves
// the ZMM and mask registers).
bool directConvAvailable();
// Whether f32 convolutions take them: available, and the environment's
// KILN_CPU_CONV is not "im2col" (the im2col path on request, for comparing
// the two; the CPU executable refuses any value but "direct" and "im2col").
bool directConvEnabled();

// Whether the direct kernels beat im2col plus OpenBLAS on |params|' shapes,
// as measured on one thread (bench/RESULTS.md, thirty-ninth session): yes
// but for the input gradient with fewer than 8 input channels per group
// (LeNet-5's second convolution, 6), where the GEMM's rows are that few and
// the direct kernel's tiles run with as few accumulators (1.2 to 1.9 times
// slower than im2col for 1 to 6 channels, 1.5 times faster for 8).
enum class ConvKind { Forward, InputGrad, FilterGrad };
bool directConvPreferred(ConvKind kind, const ConvParams &params);

bool directConv2d(const ConvParams &params, const float *input,
                  const float *filter, float *output);
bool directConv2dInputGrad(const ConvParams &params, const float *gradOutput,
                           const float *filter, float *gradInput);
bool directConv2dFilterGrad(const ConvParams &params, const float *input,
                            const float *gradOutput, float *gradFilter);

} // namespace kiln::runtime::cpu

#endif // KILN_RUNTIME_CPU_DIRECTCONV_H
