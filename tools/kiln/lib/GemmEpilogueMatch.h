//===- GemmEpilogueMatch.h - gemm fusions as cuBLASLt epilogues ---*- C++ -*-===//
//
// Which gemm fusions of a CUDA step are one cuBLASLt GEMM with one of its
// epilogues (bias, ReLU, GELU, a residual as C, GELU keeping its
// pre-activation as aux, gelu' reading it, a bias gradient), so that the
// package builder (PackageBuilder.cpp) writes one Gemm thunk instead of a
// GEMM and an epilogue kernel.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TOOLS_KILN_LIB_GEMMEPILOGUEMATCH_H
#define KILN_TOOLS_KILN_LIB_GEMMEPILOGUEMATCH_H

#include "ir/KilnOps.h"
#include "runtime/package/Package.h"

#include <optional>

namespace kiln::cli {

// A gemm fusion's epilogue as one cuBLASLt epilogue: its kind and where
// its extra buffers come from (fusion input and result indices).
struct GemmEpilogueMatch {
  runtime::PkgGemmEpilogue kind = runtime::PkgGemmEpilogue::None;
  std::optional<unsigned> biasInput, cInput, auxResult, auxInput;
  unsigned outResult = 0;
};

// For a CUDA package: whether |fusion|'s epilogue after |dotOp| is exactly
// one cuBLASLt epilogue, with nothing else in the body and every value
// read once:
//  - one result: |dotOp|'s result plus a [n] bias broadcast along the last
//    dimension (Bias), max(., 0) (Relu), tanh-GELU (Gelu), or a bias then
//    one of those; or the product (plus a bias) plus a residual C, a
//    fusion input of the result's type read only there (Residual,
//    BiasResidual: cuBLASLt's beta * C);
//  - two results (training's forward keeps the pre-activation for the
//    backward): the pre-activation (the product, plus a bias) and tanh-GELU
//    of it (GeluAux, BiasGeluAux: the pre-activation is cuBLASLt's aux).
//  - the backward's tanh gelu_grad(x, dot), x a fusion input (DGelu: x,
//    the forward's pre-activation, is cuBLASLt's aux input). cuBLASLt keeps
//    the product in f32 through gelu' where the IR rounds it first, so the
//    bf16 steps are closer to exact arithmetic than the interpreter's and
//    are checked against both (CudaStepEmulationTest, docs/cuda.md).
// The new epilogues take an unbatched product only (the runtime's
// epilogues need batch 1).
std::optional<GemmEpilogueMatch> matchGemmEpilogue(FusionOp fusion,
                                                   DotGeneralOp dotOp);

// For a CUDA package: whether |fusion| is |dotOp| plus the reduce-sum of
// its rhs over the rhs's contracting dimensions (kiln-fuse's
// bias-gradient-epilogues), nothing else: cuBLASLt's BiasGradient epilogue
// (BGRADA) computes both. |dotResult| and |gradResult| get the fusion
// results holding the product and the sum.
bool matchBiasGradient(FusionOp fusion, DotGeneralOp dotOp, unsigned &dotResult,
                       unsigned &gradResult);

} // namespace kiln::cli

#endif // KILN_TOOLS_KILN_LIB_GEMMEPILOGUEMATCH_H
