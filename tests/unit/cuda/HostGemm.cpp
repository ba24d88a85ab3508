//===- HostGemm.cpp - GEMMs on the host as cuBLASLt computes them ---------===//
//
// See HostGemm.h.
//
//===----------------------------------------------------------------------===//

#include "tests/unit/cuda/HostGemm.h"

#include "runtime/Half.h"

#include <cmath>
#include <cstdint>

namespace kiln::runtime::cuda::testing {
namespace {

template <typename Compute>
void hostGemmIn(const GemmDesc &desc, const void *lhs, const void *rhs,
                void *out, const void *bias, void *biasGrad, const void *c,
                void *aux) {
  const GemmParams &p = desc.params;
  // Operands in desc.dtype; the result, C and aux in gemmOutputDType.
  auto getAs = [](PkgDType type, const void *base, int64_t i) -> Compute {
    switch (type) {
    case PkgDType::F64:
      return Compute(static_cast<const double *>(base)[i]);
    case PkgDType::F16:
      return f16ToFloat(static_cast<const uint16_t *>(base)[i]);
    case PkgDType::BF16:
      return bf16ToFloat(static_cast<const uint16_t *>(base)[i]);
    default:
      return static_cast<const float *>(base)[i];
    }
  };
  auto get = [&](const void *base, int64_t i) {
    return getAs(desc.dtype, base, i);
  };
  const PkgDType outType = gemmOutputDType(desc);
  auto put = [&](void *base, int64_t i, Compute v) {
    switch (outType) {
    case PkgDType::F64:
      static_cast<double *>(base)[i] = double(v);
      break;
    case PkgDType::F16:
      static_cast<uint16_t *>(base)[i] = floatToF16(float(v));
      break;
    case PkgDType::BF16:
      static_cast<uint16_t *>(base)[i] = floatToBf16(float(v));
      break;
    default:
      static_cast<float *>(base)[i] = float(v);
      break;
    }
  };
  GemmEpilogue e = desc.epilogue;
  bool addBias = gemmEpilogueReadsBias(e);
  bool gelu = e == GemmEpilogue::Gelu || e == GemmEpilogue::BiasGelu ||
              gemmEpilogueWritesAux(e);
  const void *cIn = desc.residual ? c : out;
  const Compute alpha = Compute(p.alpha), beta = Compute(p.beta);
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t i = 0; i < p.m; ++i)
      for (int64_t j = 0; j < p.n; ++j) {
        Compute acc = 0;
        for (int64_t l = 0; l < p.k; ++l) {
          int64_t li =
              b * p.m * p.k + (p.transposeLhs ? l * p.m + i : i * p.k + l);
          int64_t ri =
              b * p.k * p.n + (p.transposeRhs ? j * p.k + l : l * p.n + j);
          acc += get(lhs, li) * get(rhs, ri);
        }
        int64_t oi = b * p.m * p.n + i * p.n + j;
        Compute v =
            alpha * acc +
            (p.beta != 0 ? beta * getAs(outType, cIn, oi) : Compute(0));
        if (addBias)
          v += get(bias, j);
        if (gemmEpilogueWritesAux(e))
          put(aux, oi, v);
        if (e == GemmEpilogue::DGelu) {
          // The product times gelu'(x), x the stored pre-activation.
          const Compute k = Compute(0.7978845608028654), c = Compute(0.044715);
          Compute x = getAs(outType, aux, oi);
          Compute t = std::tanh(k * (x + c * x * x * x));
          v *= Compute(0.5) * (Compute(1) + t) +
               Compute(0.5) * x * (Compute(1) - t * t) * k *
                   (Compute(1) + Compute(3) * c * x * x);
        }
        if (e == GemmEpilogue::Relu || e == GemmEpilogue::BiasRelu)
          v = v > 0 ? v : Compute(0);
        if (gelu)
          v = Compute(0.5) * v *
              (Compute(1) + std::tanh(Compute(0.7978845608028654) *
                                      (v + Compute(0.044715) * v * v * v)));
        put(out, oi, v);
      }
  if (e == GemmEpilogue::BiasGradient)
    for (int64_t j = 0; j < p.n; ++j) {
      Compute sum = 0;
      for (int64_t l = 0; l < p.k; ++l)
        sum += get(rhs, p.transposeRhs ? j * p.k + l : l * p.n + j);
      put(biasGrad, j, sum);
    }
}

} // namespace

void hostGemm(const GemmDesc &desc, const void *lhs, const void *rhs, void *out,
              const void *bias, void *biasGrad, const void *c, void *aux) {
  if (desc.dtype == PkgDType::F64)
    hostGemmIn<double>(desc, lhs, rhs, out, bias, biasGrad, c, aux);
  else
    hostGemmIn<float>(desc, lhs, rhs, out, bias, biasGrad, c, aux);
}

} // namespace kiln::runtime::cuda::testing
