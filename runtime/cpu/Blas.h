//===- Blas.h - GEMMs and convolutions on the CPU through OpenBLAS -*- C++ -*-===//
//
// The CPU backend's library calls (the package's LibraryCall thunks): a
// kiln.dot_general becomes one cblas_{s,d}gemm per batch element, and the
// three convolutions become im2col (col2im for the input gradient) plus
// GEMMs, one per image and group, except where runtime/cpu/DirectConv.h's
// AVX-512 kernels take f32 ones (directConvPreferred). f32 and f64, and
// f16 and bf16 computed in
// f32 (operands widened, the result rounded once); anything else comes back
// as an error Status that names the dtype.
//
// A dot_general whose operands already sit as [batch..., rows, contract] or
// [batch..., contract, rows] in memory maps onto the package's GemmParams
// (m, n, k, batch, transpose flags) with no copy; any other layout is first
// packed (transposed) into a scratch buffer. Contracting pairs may be listed
// in any order: the sum does not depend on it, so they are reordered to
// match memory before deciding whether to pack.
//
// Threads: OpenBLAS's own pool; setBlasThreads sets its size.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_CPU_BLAS_H
#define KILN_RUNTIME_CPU_BLAS_H

#include "runtime/Status.h"
#include "runtime/package/Package.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::runtime::cpu {

// A kiln.dot_general on dense row-major operands of |dtype|. The result is
// [batch dims (lhs order), lhs free dims, rhs free dims], and the call writes
// out = alpha * dot + beta * out.
struct GemmSpec {
  PkgDType dtype = PkgDType::F32;
  std::vector<int64_t> lhsShape, rhsShape;
  std::vector<int64_t> lhsBatch, rhsBatch, lhsContract, rhsContract;
  double alpha = 1.0, beta = 0.0;
};

// How a GemmSpec runs: the strided GEMM (lhs [batch, m, k] or, transposed,
// [batch, k, m]; rhs [batch, k, n] or [batch, n, k]; out [batch, m, n]) and,
// for an operand that must be packed first, the permutation of its
// dimensions that gives that layout (empty when it is used in place).
struct GemmPlan {
  GemmParams params;
  std::vector<int64_t> lhsPermutation, rhsPermutation;
};

// Checks |spec| (ranks, dimension lists, paired sizes) and plans it.
StatusOr<GemmPlan> planGemm(const GemmSpec &spec);

// The dot_general of |spec|: |lhs| and |rhs| hold spec.lhsShape and
// spec.rhsShape elements, |out| the result's.
Status gemm(const GemmSpec &spec, const void *lhs, const void *rhs, void *out);

// The package's strided GEMM form, as a LibraryCall thunk describes it.
Status gemm(PkgDType dtype, const GemmParams &params, const void *lhs,
            const void *rhs, void *out);

// kiln.conv2d: |params| holds the forward convolution's NCHW input, OIHW
// filter and NCHW output shapes, strides [h, w], padding [top, bottom, left,
// right], dilation [h, w] and groups.
Status conv2d(PkgDType dtype, const ConvParams &params, const void *input,
              const void *filter, void *output);
// kiln.conv2d_input_grad: |gradInput| (params.inputShape) from |gradOutput|
// (params.outputShape) and |filter|.
Status conv2dInputGrad(PkgDType dtype, const ConvParams &params,
                       const void *gradOutput, const void *filter,
                       void *gradInput);
// kiln.conv2d_filter_grad: |gradFilter| (params.filterShape) from |input|
// and |gradOutput|.
Status conv2dFilterGrad(PkgDType dtype, const ConvParams &params,
                        const void *input, const void *gradOutput,
                        void *gradFilter);

// f16 and bf16 (round to nearest even) to and from f32, for callers that
// split half-precision library calls themselves.
bool isHalfDtype(PkgDType dtype);
void widenToF32(PkgDType dtype, const void *in, float *out, int64_t n);
void narrowFromF32(PkgDType dtype, const float *in, void *out, int64_t n);

// OpenBLAS's thread count (at least 1), and the current one.
void setBlasThreads(int threads);
int blasThreads();

// OpenBLAS's kernels. Debian's OpenBLAS (built with DYNAMIC_ARCH) picks them
// when it loads, from the CPU's vendor, family and model; a model it does
// not know (0.3.21 and a Sapphire Rapids, or a VM's "Intel Xeon Processor")
// gets Prescott's SSE3 kernels, 3.6 times slower than its AVX-512 ones on
// the zoo MLP's step. So before main, in every program that links this
// file, Kiln checks OpenBLAS's choice against the CPU's features and, where
// it lacks them, sets OPENBLAS_CORETYPE and has OpenBLAS choose again:
// SkylakeX with AVX-512 (F, DQ, BW, VL) and the OS saving its state,
// Haswell with AVX2 and FMA, nothing otherwise (nor off x86-64, nor when
// OPENBLAS_CORETYPE is set already: the user's choice stands).
struct X86Features {
  bool avx2 = false, fma = false;
  bool avx512f = false, avx512dq = false, avx512bw = false, avx512vl = false;
  // The rest of the x86-64 levels' features (x86-64-v2: ssse3, sse4.2,
  // popcnt, cx16; v3: also AVX, AVX2, FMA, BMI1/2, F16C, MOVBE, LZCNT; v4:
  // also AVX-512 F, BW, CD, DQ, VL).
  bool ssse3 = false, sse42 = false, popcnt = false, cx16 = false;
  bool avx = false, bmi1 = false, bmi2 = false, f16c = false, movbe = false,
       lzcnt = false, avx512cd = false;
  bool ymmState = false, zmmState = false; // XCR0: the OS saves them
};
// This CPU's (all false off x86-64).
X86Features x86Features();
// Whether |f| runs code compiled for x86-64 level |level| ("x86-64",
// "x86-64-v2", "x86-64-v3", "x86-64-v4"; AVX and AVX-512 only where the
// OS saves their registers).
bool x86LevelSupported(const X86Features &f, const std::string &level);
// The OPENBLAS_CORETYPE for |features|, or nullptr for OpenBLAS's own choice.
const char *openBlasCoreFor(const X86Features &features);
// The kernels Kiln had OpenBLAS choose again at start (OPENBLAS_CORETYPE),
// or nullptr when it kept its own choice.
const char *openBlasCoreChosen();
// The kernels OpenBLAS runs (openblas_get_corename: "SkylakeX", "Haswell").
std::string openBlasCoreName();

} // namespace kiln::runtime::cpu

#endif // KILN_RUNTIME_CPU_BLAS_H
