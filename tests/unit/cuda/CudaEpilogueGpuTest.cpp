//===- CudaEpilogueGpuTest.cpp - the epilogue fallback on a real GPU (gpu) -===//
//
// Skips, saying why, without a GPU. On one, for f32 / bf16 / fp16, every
// epilogue and both transposes: the plain cuBLASLt GEMM followed by
// runtime/cuda/CudaEpilogue.h's kernels (NVRTC, driver launch) against the
// host definition (HostGemm.h's GEMM, then the epilogue in double on
// the rounded product); where cuBLASLt plans the fused epilogue, the two
// agree; where it does not, gemmPlan must say "unsupported" (else
// CudaExecutable::create would fail instead of falling back) and the test
// prints which combinations fell back. Also the residual (cuBLASLt's C,
// separate or in place) and GELU's aux output against HostGemm.h's
// definition, the aux through the fallback kernel where cuBLASLt refuses
// it. Part of kiln-cuda-runtime-tests
// (no MLIR), run by bench/gpu/check.sh.
//
//===----------------------------------------------------------------------===//

#include "runtime/Half.h"
#include "runtime/cuda/CudaEpilogue.h"
#include "tests/unit/cuda/HostGemm.h"
#include "tests/unit/cuda/GpuTest.h"
#include "tests/unit/cuda/PkgBuffers.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>

namespace {

using namespace kiln::runtime;
using namespace kiln::runtime::cuda;

using kiln::runtime::cuda::testing::randomBuffer;
using kiln::runtime::cuda::testing::valueAt;

using CudaGpuEpilogueTest = kiln::runtime::cuda::testing::GpuTest;

TEST_F(CudaGpuEpilogueTest, FallbackKernelsMatchTheDefinitionAndCublasLt) {
  CudaApi &api = *this->api;
  const int64_t m = 64, n = 96, k = 300; // two bias-gradient chunks
  GemmParams shape;
  shape.m = m, shape.n = n, shape.k = k;
  uint64_t epilogueWorkspace =
      epilogueWorkspaceBytes(GemmEpilogue::BiasGradient, shape, PkgDType::F32);
  StatusOr<std::unique_ptr<CudaEpilogue>> made =
      CudaEpilogue::create(api, device, epilogueWorkspace);
  ASSERT_TRUE(made.isOk()) << made.status().message();
  CudaEpilogue &epilogue = *made.value();
  size_t wsBytes = 32u << 20;
  void *ws = nullptr;
  ASSERT_TRUE(api.malloc(&ws, wsBytes).isOk());
  size_t index = 0;
  int refused = 0;
  for (PkgDType dtype : {PkgDType::F32, PkgDType::BF16, PkgDType::F16})
    for (GemmEpilogue e : {GemmEpilogue::Bias, GemmEpilogue::Relu,
                           GemmEpilogue::BiasRelu, GemmEpilogue::Gelu,
                           GemmEpilogue::BiasGelu, GemmEpilogue::BiasGradient})
      for (bool tl : {false, true})
        for (bool tr : {false, true}) {
          GemmDesc desc;
          desc.dtype = dtype;
          desc.params = shape;
          desc.params.transposeLhs = tl;
          desc.params.transposeRhs = tr;
          std::string what = std::string(pkgDTypeName(dtype)) + " " +
                             gemmEpilogueName(e) + " tl=" + std::to_string(tl) +
                             " tr=" + std::to_string(tr);
          size_t width = pkgBytesPerElement(dtype);
          auto lhs = randomBuffer(dtype, m * k, 1), rhs = randomBuffer(dtype, k * n, 2),
               bias = randomBuffer(dtype, n, 3);
          // The host: the plain GEMM rounded to the type, then the
          // epilogue in double, as the fallback computes it.
          std::vector<uint8_t> plain(m * n * width);
          cuda::testing::hostGemm(desc, lhs.data(), rhs.data(),
                                         plain.data(), nullptr, nullptr);
          void *dl, *dr, *dout, *dfused, *dbias, *dgrad;
          for (void **p : {&dl, &dr, &dout, &dfused})
            ASSERT_TRUE(api.malloc(p, std::max(lhs.size(), std::max(rhs.size(),
                                                                   plain.size())))
                            .isOk());
          ASSERT_TRUE(api.malloc(&dbias, bias.size()).isOk());
          ASSERT_TRUE(api.malloc(&dgrad, bias.size()).isOk());
          api.memcpyAsync(dl, lhs.data(), lhs.size(), CopyKind::HostToDevice, stream);
          api.memcpyAsync(dr, rhs.data(), rhs.size(), CopyKind::HostToDevice, stream);
          api.memcpyAsync(dbias, bias.data(), bias.size(), CopyKind::HostToDevice,
                          stream);
          // The fallback: the plain GEMM, then the kernels.
          GemmPlan plainPlan = nullptr;
          Status s = api.gemmPlan(&plainPlan, desc, wsBytes);
          ASSERT_TRUE(s.isOk()) << what << ": " << s.message();
          ASSERT_TRUE(api.gemmRun(plainPlan, dl, dr, dout, nullptr, nullptr, ws,
                                  wsBytes, stream)
                          .isOk())
              << what;
          bool grad = e == GemmEpilogue::BiasGradient;
          s = epilogue.plan(index, e, dtype, desc.params, dout, grad ? nullptr : dbias,
                            dr, grad ? dgrad : nullptr);
          ASSERT_TRUE(s.isOk()) << what << ": " << s.message();
          s = epilogue.run(index++, stream);
          ASSERT_TRUE(s.isOk()) << what << ": " << s.message();
          std::vector<uint8_t> got(plain.size()), gotGrad(bias.size());
          api.memcpyAsync(got.data(), dout, got.size(), CopyKind::DeviceToHost, stream);
          api.memcpyAsync(gotGrad.data(), dgrad, gotGrad.size(),
                          CopyKind::DeviceToHost, stream);
          ASSERT_TRUE(api.streamSynchronize(stream).isOk()) << what;
          double tol = dtype == PkgDType::F32 ? 1e-4 : 2e-2;
          bool addBias = e == GemmEpilogue::Bias || e == GemmEpilogue::BiasRelu ||
                         e == GemmEpilogue::BiasGelu;
          for (int64_t i = 0; i < m * n && !grad; ++i) {
            double v = valueAt(dtype, plain, i);
            if (addBias)
              v += valueAt(dtype, bias, i % n);
            if (e == GemmEpilogue::Relu || e == GemmEpilogue::BiasRelu)
              v = std::max(v, 0.0);
            if (e == GemmEpilogue::Gelu || e == GemmEpilogue::BiasGelu)
              v = 0.5 * v *
                  (1 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
            ASSERT_LE(std::fabs(v - valueAt(dtype, got, i)),
                      tol * std::max(1.0, std::fabs(v)) * 8)
                << what << " element " << i;
          }
          if (grad)
            for (int64_t j = 0; j < n; ++j) {
              double sum = 0;
              for (int64_t l = 0; l < k; ++l)
                sum += valueAt(dtype, rhs, tr ? j * k + l : l * n + j);
              ASSERT_LE(std::fabs(sum - valueAt(dtype, gotGrad, j)),
                        tol * std::max(1.0, std::fabs(sum)) * 8)
                  << what << " bias gradient " << j;
            }
          // cuBLASLt's fused epilogue: the same within the bound, or
          // refused as unsupported (never another failure).
          desc.epilogue = e;
          GemmPlan fused = nullptr;
          bool unsupported = false;
          s = api.gemmPlan(&fused, desc, wsBytes, &unsupported);
          if (!s.isOk()) {
            EXPECT_TRUE(unsupported) << what << ": " << s.message();
            std::printf("note: %s: cuBLASLt refuses it, the fallback runs: %s\n",
                        what.c_str(), s.message().c_str());
            ++refused;
          } else {
            void *fusedGrad = dbias; // BGRADA writes over a copy of the bias
            ASSERT_TRUE(api.gemmRun(fused, dl, dr, dfused, grad ? nullptr : dbias,
                                    grad ? fusedGrad : nullptr, ws, wsBytes,
                                    stream)
                            .isOk())
                << what;
            std::vector<uint8_t> fusedOut(plain.size()), fusedGradOut(bias.size());
            api.memcpyAsync(fusedOut.data(), dfused, fusedOut.size(),
                            CopyKind::DeviceToHost, stream);
            api.memcpyAsync(fusedGradOut.data(), fusedGrad, fusedGradOut.size(),
                            CopyKind::DeviceToHost, stream);
            ASSERT_TRUE(api.streamSynchronize(stream).isOk()) << what;
            for (int64_t i = 0; i < m * n && !grad; ++i)
              ASSERT_LE(std::fabs(valueAt(dtype, fusedOut, i) - valueAt(dtype, got, i)),
                        tol * std::max(1.0, std::fabs(valueAt(dtype, got, i))) * 8)
                  << what << ": fused vs fallback, element " << i;
            for (int64_t j = 0; j < n && grad; ++j)
              ASSERT_LE(std::fabs(valueAt(dtype, fusedGradOut, j) - valueAt(dtype, gotGrad, j)),
                        tol * std::max(1.0, std::fabs(valueAt(dtype, gotGrad, j))) * 8)
                  << what << ": fused vs fallback, bias gradient " << j;
            api.gemmDestroy(fused);
          }
          api.gemmDestroy(plainPlan);
          for (void *p : {dl, dr, dout, dfused, dbias, dgrad})
            api.free(p);
        }
  std::printf("cuBLASLt refused %d of %zu epilogue combinations\n", refused, index);
  RecordProperty("refused", refused);
  api.free(ws);
}

// The residual (cuBLASLt's C: a separate buffer, and the result's own
// buffer in place) and GELU's aux (the pre-activation as a second output)
// on the real cuBLASLt against HostGemm.h's definition (f32 compute,
// one rounding of each output), and DGELU reading a pre-activation back,
// for f32 / bf16 / fp16 and both transposes.
// Where cuBLASLt refuses the aux epilogue (it must say "unsupported"; n = 90
// is no multiple of 8, which it refuses everywhere), the fallback runs: the
// plain GEMM into aux, then CudaEpilogue's kernel, within one rounding.
TEST_F(CudaGpuEpilogueTest, ResidualAndGeluAuxMatchTheDefinition) {
  CudaApi &api = *this->api;
  StatusOr<std::unique_ptr<CudaEpilogue>> made =
      CudaEpilogue::create(api, device, 0);
  ASSERT_TRUE(made.isOk()) << made.status().message();
  CudaEpilogue &epilogue = *made.value();
  size_t wsBytes = 32u << 20;
  void *ws = nullptr;
  ASSERT_TRUE(api.malloc(&ws, wsBytes).isOk());
  struct Kind {
    const char *name;
    GemmEpilogue epilogue;
    bool residual, inPlace;
  };
  // DGelu reads aux (a random pre-activation) rather than writing it.
  const Kind kinds[] = {{"residual", GemmEpilogue::None, true, false},
                        {"residual in place", GemmEpilogue::None, true, true},
                        {"bias+residual", GemmEpilogue::Bias, true, false},
                        {"bias+residual in place", GemmEpilogue::Bias, true, true},
                        {"gelu+aux", GemmEpilogue::GeluAux, false, false},
                        {"bias+gelu+aux", GemmEpilogue::BiasGeluAux, false, false},
                        {"dgelu", GemmEpilogue::DGelu, false, false}};
  size_t index = 0;
  int fellBack = 0;
  for (int64_t n : {96, 90})
    for (PkgDType dtype : {PkgDType::F32, PkgDType::BF16, PkgDType::F16})
      for (const Kind &kind : kinds)
        for (bool tl : {false, true})
          for (bool tr : {false, true}) {
            const int64_t m = 64, k = 300;
            GemmDesc desc;
            desc.dtype = dtype;
            desc.params.m = m, desc.params.n = n, desc.params.k = k;
            desc.params.transposeLhs = tl;
            desc.params.transposeRhs = tr;
            desc.params.beta = kind.residual ? 1.0 : 0.0;
            desc.epilogue = kind.epilogue;
            desc.residual = kind.residual;
            bool aux = gemmEpilogueWritesAux(kind.epilogue);
            bool auxIn = gemmEpilogueReadsAux(kind.epilogue);
            std::string what = std::string(pkgDTypeName(dtype)) + " " +
                               kind.name + " n=" + std::to_string(n) +
                               " tl=" + std::to_string(tl) +
                               " tr=" + std::to_string(tr);
            auto lhs = randomBuffer(dtype, m * k, 1),
                 rhs = randomBuffer(dtype, k * n, 2),
                 bias = randomBuffer(dtype, n, 3),
                 c = randomBuffer(dtype, m * n, 4),
                 pre = randomBuffer(dtype, m * n, 5);
            size_t outBytes = c.size();
            // The definition.
            std::vector<uint8_t> want(outBytes),
                wantAux = auxIn ? pre : std::vector<uint8_t>(outBytes);
            cuda::testing::hostGemm(
                desc, lhs.data(), rhs.data(), want.data(), bias.data(), nullptr,
                c.data(), wantAux.data());
            void *dl, *dr, *dbias, *dc, *dout, *daux;
            ASSERT_TRUE(api.malloc(&dl, lhs.size()).isOk());
            ASSERT_TRUE(api.malloc(&dr, rhs.size()).isOk());
            ASSERT_TRUE(api.malloc(&dbias, bias.size()).isOk());
            ASSERT_TRUE(api.malloc(&dc, outBytes).isOk());
            ASSERT_TRUE(api.malloc(&dout, outBytes).isOk());
            ASSERT_TRUE(api.malloc(&daux, outBytes).isOk());
            api.memcpyAsync(dl, lhs.data(), lhs.size(), CopyKind::HostToDevice, stream);
            api.memcpyAsync(dr, rhs.data(), rhs.size(), CopyKind::HostToDevice, stream);
            api.memcpyAsync(dbias, bias.data(), bias.size(), CopyKind::HostToDevice,
                            stream);
            api.memcpyAsync(dc, c.data(), outBytes, CopyKind::HostToDevice, stream);
            if (auxIn)
              api.memcpyAsync(daux, pre.data(), outBytes, CopyKind::HostToDevice,
                              stream);
            if (kind.inPlace)
              api.memcpyAsync(dout, c.data(), outBytes, CopyKind::HostToDevice,
                              stream);
            const void *cIn = !kind.residual ? nullptr : kind.inPlace ? dout : dc;
            const void *biasIn = gemmEpilogueReadsBias(kind.epilogue) ? dbias : nullptr;
            GemmPlan plan = nullptr;
            bool unsupported = false;
            Status s = api.gemmPlan(&plan, desc, wsBytes, &unsupported);
            if (s.isOk()) {
              s = api.gemmRun(plan, dl, dr, dout, biasIn, nullptr, cIn,
                              aux || auxIn ? daux : nullptr, ws, wsBytes, stream);
              ASSERT_TRUE(s.isOk()) << what << ": " << s.message();
              api.gemmDestroy(plan);
            } else {
              // Only an aux epilogue may be refused, and only as unsupported.
              ASSERT_TRUE((aux || auxIn) && unsupported)
                  << what << ": " << s.message();
              std::printf("note: %s: cuBLASLt refuses it, the fallback runs: %s\n",
                          what.c_str(), s.message().c_str());
              ++fellBack;
              GemmDesc plain = desc;
              plain.epilogue = GemmEpilogue::None;
              ASSERT_TRUE(api.gemmPlan(&plan, plain, wsBytes).isOk()) << what;
              ASSERT_TRUE(api.gemmRun(plan, dl, dr, auxIn ? dout : daux, nullptr,
                                      nullptr, ws, wsBytes, stream)
                              .isOk())
                  << what;
              api.gemmDestroy(plan);
              s = epilogue.plan(index, kind.epilogue, dtype, desc.params, dout,
                                biasIn, dr, nullptr, daux);
              ASSERT_TRUE(s.isOk()) << what << ": " << s.message();
              s = epilogue.run(index++, stream);
              ASSERT_TRUE(s.isOk()) << what << ": " << s.message();
            }
            std::vector<uint8_t> got(outBytes), gotAux(outBytes);
            api.memcpyAsync(got.data(), dout, outBytes, CopyKind::DeviceToHost, stream);
            api.memcpyAsync(gotAux.data(), daux, outBytes, CopyKind::DeviceToHost,
                            stream);
            ASSERT_TRUE(api.streamSynchronize(stream).isOk()) << what;
            // Summation order (and TF32 off: plain f32) plus a rounding or
            // two of the type.
            double tol = dtype == PkgDType::F32 ? 1e-4 : 2e-2;
            for (int64_t i = 0; i < m * n; ++i) {
              double w = valueAt(dtype, want, i), g = valueAt(dtype, got, i);
              ASSERT_LE(std::fabs(w - g), tol * std::max(1.0, std::fabs(w)) * 2)
                  << what << " element " << i;
              if (!aux)
                continue;
              double wa = valueAt(dtype, wantAux, i), ga = valueAt(dtype, gotAux, i);
              ASSERT_LE(std::fabs(wa - ga), tol * std::max(1.0, std::fabs(wa)) * 2)
                  << what << " aux element " << i;
            }
            for (void *p : {dl, dr, dbias, dc, dout, daux})
              api.free(p);
          }
  // n = 90: every aux combination (3 kinds x 3 types x 4 transposes).
  EXPECT_GE(fellBack, 36);
  std::printf("%d aux combinations fell back to the kernel\n", fellBack);
  RecordProperty("fell_back", fellBack);
  api.free(ws);
}

} // namespace
