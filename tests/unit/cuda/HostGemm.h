//===- HostGemm.h - GEMMs on the host as cuBLASLt computes them -*- C++ -*-===//
//
// The reference the CUDA tests hold cuBLASLt to: FakeCudaApi runs every
// GEMM it is given through hostGemm, and the GPU tests compare the real
// cuBLASLt with it.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TESTS_UNIT_CUDA_HOSTGEMM_H
#define KILN_TESTS_UNIT_CUDA_HOSTGEMM_H

#include "runtime/cuda/CudaApi.h"

namespace kiln::runtime::cuda::testing {

// The row-major GEMM of |desc| with its epilogue as cuBLASLt computes
// it: f64 in double; f32, f16 and bf16 with CUBLAS_COMPUTE_32F (the
// product accumulated in float, alpha, beta, the bias and the activation
// applied in float) and one rounding to the output type at the end.
// A residual desc reads beta * C from |c| (cuBLASLt's C, which may be
// |out|: each element is read before it is written) instead of |out|,
// the bias added after it. The *Aux epilogues write the pre-activation
// (the product plus the bias, still in the compute type) rounded once
// into |aux| (the output's type, EPILOGUE_AUX_DATA_TYPE's default) and
// gelu of that same unrounded value into |out|; DGelu multiplies the
// product by gelu'(aux) in the compute type. BiasGradient (BGRADA:
// the row-major rhs is cuBLASLt's A) sums the rhs over k in the compute
// type and rounds that once into biasGrad[n], which has the output's
// type (CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE's default).
void hostGemm(const GemmDesc &desc, const void *lhs, const void *rhs, void *out,
              const void *bias, void *biasGrad, const void *c = nullptr,
              void *aux = nullptr);

} // namespace kiln::runtime::cuda::testing

#endif // KILN_TESTS_UNIT_CUDA_HOSTGEMM_H
