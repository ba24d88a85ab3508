//===- CudaApi.cpp - the parts of the CUDA table that need no CUDA ---------===//
//
// See CudaApi.h. The row-major to column-major mapping of GEMMs and the
// checks of a GemmDesc; the dlopen'ed table is CudaApiLoader.cpp (built
// with the toolkit's headers) or CudaApiMissing.cpp.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudaApi.h"

#include <cstdio>
#include <string>

namespace kiln::runtime::cuda {

CudaApi::~CudaApi() = default;

Status CudaApi::memGetInfo(size_t *, size_t *) {
  return Status::error("cudaMemGetInfo is not available in " + describe());
}

const char *gemmEpilogueName(GemmEpilogue epilogue) {
  switch (epilogue) {
  case GemmEpilogue::None: return "none";
  case GemmEpilogue::Bias: return "bias";
  case GemmEpilogue::Relu: return "relu";
  case GemmEpilogue::BiasRelu: return "bias+relu";
  case GemmEpilogue::Gelu: return "gelu";
  case GemmEpilogue::BiasGelu: return "bias+gelu";
  case GemmEpilogue::BiasGradient: return "bias-gradient";
  case GemmEpilogue::GeluAux: return "gelu+aux";
  case GemmEpilogue::BiasGeluAux: return "bias+gelu+aux";
  case GemmEpilogue::DGelu: return "dgelu";
  }
  return "unknown";
}

GemmEpilogue gemmEpilogueOf(PkgGemmEpilogue epilogue) {
  switch (epilogue) {
  case PkgGemmEpilogue::None:
    return GemmEpilogue::None;
  case PkgGemmEpilogue::Bias:
    return GemmEpilogue::Bias;
  case PkgGemmEpilogue::Relu:
    return GemmEpilogue::Relu;
  case PkgGemmEpilogue::BiasRelu:
    return GemmEpilogue::BiasRelu;
  case PkgGemmEpilogue::Gelu:
    return GemmEpilogue::Gelu;
  case PkgGemmEpilogue::BiasGelu:
    return GemmEpilogue::BiasGelu;
  case PkgGemmEpilogue::BiasGradient:
    return GemmEpilogue::BiasGradient;
  case PkgGemmEpilogue::Residual:
    return GemmEpilogue::None;
  case PkgGemmEpilogue::BiasResidual:
    return GemmEpilogue::Bias;
  case PkgGemmEpilogue::GeluAux:
    return GemmEpilogue::GeluAux;
  case PkgGemmEpilogue::BiasGeluAux:
    return GemmEpilogue::BiasGeluAux;
  case PkgGemmEpilogue::DGelu:
    return GemmEpilogue::DGelu;
  }
  return GemmEpilogue::None;
}

bool gemmEpilogueReadsBias(GemmEpilogue e) {
  return e == GemmEpilogue::Bias || e == GemmEpilogue::BiasRelu ||
         e == GemmEpilogue::BiasGelu || e == GemmEpilogue::BiasGeluAux;
}

bool gemmEpilogueWritesAux(GemmEpilogue e) {
  return e == GemmEpilogue::GeluAux || e == GemmEpilogue::BiasGeluAux;
}

bool gemmEpilogueReadsAux(GemmEpilogue e) { return e == GemmEpilogue::DGelu; }

std::string gemmLtRefusal(const GemmDesc &desc) {
  if ((gemmEpilogueWritesAux(desc.epilogue) ||
       gemmEpilogueReadsAux(desc.epilogue)) &&
      desc.params.n % 8 != 0)
    return std::string("the ") + gemmEpilogueName(desc.epilogue) +
           " epilogue's aux leading dimension " +
           std::to_string(desc.params.n) +
           " is not a multiple of 8 elements (CUBLASLT_MATMUL_DESC_EPILOGUE_"
           "AUX_LD)";
  return std::string();
}

LtGemm lowerGemmToLt(const GemmParams &p) {
  LtGemm lt;
  uint64_t m = p.m, n = p.n, k = p.k;
  // D^T (n x m, leading dimension n) = op(rhs)^T (n x k) . op(lhs)^T (k x m).
  lt.rows = n;
  lt.cols = m;
  lt.inner = k;
  lt.ldd = n;
  // rhs row-major [k, n] is column-major n x k: A as it is. Transposed,
  // rhs [n, k] is column-major k x n: A transposed.
  lt.transA = p.transposeRhs;
  lt.aRows = p.transposeRhs ? k : n;
  lt.aCols = p.transposeRhs ? n : k;
  lt.lda = lt.aRows;
  // lhs row-major [m, k] is column-major k x m: B as it is. Transposed,
  // lhs [k, m] is column-major m x k: B transposed.
  lt.transB = p.transposeLhs;
  lt.bRows = p.transposeLhs ? m : k;
  lt.bCols = p.transposeLhs ? k : m;
  lt.ldb = lt.bRows;
  lt.strideA = static_cast<int64_t>(k * n);
  lt.strideB = static_cast<int64_t>(m * k);
  lt.strideD = static_cast<int64_t>(m * n);
  lt.batch = static_cast<int>(p.batch);
  return lt;
}

uint32_t gemmAlignmentOf(const void *address) {
  auto v = reinterpret_cast<uintptr_t>(address);
  uint32_t a = 256;
  while (a > 1 && v % a)
    a /= 2;
  return a;
}

std::string gemmDescKey(const GemmDesc &d, size_t workspaceBytes) {
  auto exact = [](double v) {
    char text[40];
    std::snprintf(text, sizeof(text), "%.17g", v);
    return std::string(text);
  };
  const GemmParams &q = d.params;
  return std::string(pkgDTypeName(d.dtype)) + " m=" + std::to_string(q.m) +
         " n=" + std::to_string(q.n) + " k=" + std::to_string(q.k) +
         " batch=" + std::to_string(q.batch) +
         (q.transposeLhs ? " lhs^T" : "") + (q.transposeRhs ? " rhs^T" : "") +
         " alpha=" + exact(q.alpha) + " beta=" + exact(q.beta) +
         (d.residual ? " C" : "") + " epilogue=" + gemmEpilogueName(d.epilogue) +
         (d.auxIsOutput ? " aux=D" : "") +
         (d.allowTf32 ? " tf32" : "") + (d.f32Output ? " out=f32" : "") +
         " align=" + std::to_string(d.alignmentBytes) +
         " workspace=" + std::to_string(workspaceBytes);
}

PkgDType gemmOutputDType(const GemmDesc &desc) {
  return desc.f32Output ? PkgDType::F32 : desc.dtype;
}

Status checkGemmDesc(const GemmDesc &desc) {
  const GemmParams &p = desc.params;
  if (p.m < 1 || p.n < 1 || p.k < 1 || p.batch < 1 || p.batch > INT32_MAX)
    return Status::error("gemm: m, n, k and batch must be positive (batch "
                         "below 2^31), but they are " +
                         std::to_string(p.m) + ", " + std::to_string(p.n) +
                         ", " + std::to_string(p.k) + ", " +
                         std::to_string(p.batch));
  switch (desc.dtype) {
  case PkgDType::F32:
  case PkgDType::F64:
  case PkgDType::F16:
  case PkgDType::BF16:
    break;
  default:
    return Status::error(std::string("gemm: expected f64, f32, f16 or bf16, "
                                     "found ") +
                         pkgDTypeName(desc.dtype));
  }
  // An f32 result of half inputs: the plain product (and beta times it).
  if (desc.f32Output &&
      ((desc.dtype != PkgDType::F16 && desc.dtype != PkgDType::BF16) ||
       desc.epilogue != GemmEpilogue::None || desc.residual))
    return Status::error(std::string("gemm: an f32 result goes with f16 or "
                                     "bf16 operands, no epilogue and no C, "
                                     "not ") +
                         pkgDTypeName(desc.dtype) + " operands" +
                         (desc.epilogue != GemmEpilogue::None
                              ? std::string(", the ") +
                                    gemmEpilogueName(desc.epilogue) + " epilogue"
                              : std::string()) +
                         (desc.residual ? ", a C input" : ""));
  // An epilogue's beta scales C (residual), never the result in place.
  if (desc.epilogue != GemmEpilogue::None &&
      (p.batch != 1 || (p.beta != 0.0 && !desc.residual) ||
       desc.dtype == PkgDType::F64))
    return Status::error(std::string("gemm: the ") +
                         gemmEpilogueName(desc.epilogue) +
                         " epilogue needs batch 1, beta 0 (unless it reads a "
                         "C) and f32, f16 or bf16");
  // A C input goes with no epilogue or the bias (the residual adds the
  // packages carry; CudaEpilogue's fallback covers exactly those).
  if (desc.residual && desc.epilogue != GemmEpilogue::None &&
      desc.epilogue != GemmEpilogue::Bias)
    return Status::error(std::string("gemm: a C (residual) input goes with "
                                     "no epilogue or bias, not ") +
                         gemmEpilogueName(desc.epilogue));
  return Status::ok();
}

} // namespace kiln::runtime::cuda
