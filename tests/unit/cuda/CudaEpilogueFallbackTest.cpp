//===- CudaEpilogueFallbackTest.cpp - GEMM epilogues cuBLASLt refuses ------===//
//
// When cuBLASLt's heuristic has no algorithm for a GEMM thunk's epilogue on
// the device, CudaExecutable plans the plain GEMM and runs the epilogue as
// runtime/cuda/CudaEpilogue.h's kernels right after it. Checked without a
// GPU on FakeCudaApi.h, whose refusedEpilogues makes gemmPlan answer "not
// supported", with the epilogue kernels built for the host under
// codegen/cuda/CudaEmulation.h:
//
//   - each kernel (bias, ReLU, GELU and their bias forms; GELU keeping its
//     pre-activation as aux, with and without the bias; the bias gradient
//     with and without a transposed rhs, several chunks, grid-stride
//     blocks) against its definition computed in double, f32, bf16, fp16;
//   - whole MLP and small GPT training steps (f32, bf16 and fp16, compiled
//     as CudaStepEmulationTest compiles them, bias gradients on) with every
//     epilogue refused, only the bias gradient, only GELU+aux, or nothing
//     but an aux leading dimension cuBLASLt refuses anywhere, run two steps
//     (the second as a replayed CUDA Graph) and match the reference
//     interpreter within CudaStepEmulationTest's bounds; one note names the
//     thunks; a residual GEMM whose bias falls back stays one GEMM reading
//     its C (the result's own buffer or not) before the bias kernel;
//   - a gemmPlan failure that is not "unsupported" still fails create,
//     naming the thunk;
//   - with the toolkit, the kernels compile through NVRTC and ptxas for
//     sm_90 without spills, and through the runtime's real table.
//
//===----------------------------------------------------------------------===//

#include "tests/unit/cuda/FakeCudaApi.h"
#include "tests/unit/cuda/HostKernels.h"
#include "tests/unit/cuda/RuntimeHostKernels.h"
#include "tests/unit/cuda/Sm90Kernels.h"
#include "tests/unit/cuda/StepPackage.h"

#include "runtime/Half.h"
#include "runtime/cuda/CudaEpilogue.h"
#include "runtime/cuda/CudaExecutable.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <set>

namespace {

using namespace mlir;
using namespace kiln;
namespace rt = kiln::runtime;
using rt::cuda::GemmEpilogue;
using rt::cuda::testing::FakeCudaApi;
using rt::cuda::testing::HostKernel;
using rt::cuda::testing::hostEpilogueKernels;
using namespace kiln::cuda_step_test;
using ::testing::HasSubstr;

float loadAs(rt::PkgDType dtype, const std::vector<uint8_t> &b, int64_t i) {
  switch (dtype) {
  case rt::PkgDType::F16: {
    uint16_t h;
    std::memcpy(&h, b.data() + 2 * i, 2);
    return rt::f16ToFloat(h);
  }
  case rt::PkgDType::BF16: {
    uint16_t h;
    std::memcpy(&h, b.data() + 2 * i, 2);
    return rt::bf16ToFloat(h);
  }
  default: {
    float f;
    std::memcpy(&f, b.data() + 4 * i, 4);
    return f;
  }
  }
}

void storeAs(rt::PkgDType dtype, std::vector<uint8_t> &b, int64_t i, float v) {
  switch (dtype) {
  case rt::PkgDType::F16: {
    uint16_t h = rt::floatToF16(v);
    std::memcpy(b.data() + 2 * i, &h, 2);
    break;
  }
  case rt::PkgDType::BF16: {
    uint16_t h = rt::floatToBf16(v);
    std::memcpy(b.data() + 2 * i, &h, 2);
    break;
  }
  default:
    std::memcpy(b.data() + 4 * i, &v, 4);
    break;
  }
}

// Half an ulp of 1 in |dtype| (a rounding's relative error).
double unitRoundoff(rt::PkgDType dtype) {
  switch (dtype) {
  case rt::PkgDType::F16: return std::ldexp(1.0, -11);
  case rt::PkgDType::BF16: return std::ldexp(1.0, -8);
  default: return std::ldexp(1.0, -24);
  }
}

// One rounding of |v| to |dtype| after f32 arithmetic (a few ulps of f32).
double roundingBound(rt::PkgDType dtype, double v) {
  return unitRoundoff(dtype) * std::fabs(v) + 1e-6 * (std::fabs(v) + 1);
}

// tanh-GELU, in double.
double geluTanh(double x) {
  return 0.5 * x *
         (1 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

// |count| values of |dtype| drawn uniformly from [-range, range].
std::vector<uint8_t> randomValues(rt::PkgDType dtype, int64_t count,
                                  std::mt19937 &rng, float range) {
  std::uniform_real_distribution<float> dist(-range, range);
  std::vector<uint8_t> values(count * rt::pkgBytesPerElement(dtype));
  for (int64_t i = 0; i < count; ++i)
    storeAs(dtype, values, i, dist(rng));
  return values;
}

// Device memory on the fake (host memory it frees).
void *deviceCopy(FakeCudaApi &api, const std::vector<uint8_t> &host) {
  void *p = nullptr;
  EXPECT_TRUE(api.malloc(&p, std::max<size_t>(host.size(), 1)).isOk());
  std::memcpy(p, host.data(), host.size());
  return p;
}

TEST(CudaEpilogueKernelTest, BiasAndActivationsMatchTheirDefinition) {
  std::string error;
  const auto &kernels = hostEpilogueKernels(error);
  ASSERT_TRUE(error.empty()) << error;
  const int64_t m = 37, n = 45;
  for (rt::PkgDType dtype :
       {rt::PkgDType::F32, rt::PkgDType::BF16, rt::PkgDType::F16}) {
    for (GemmEpilogue e : {GemmEpilogue::Bias, GemmEpilogue::Relu,
                           GemmEpilogue::BiasRelu, GemmEpilogue::Gelu,
                           GemmEpilogue::BiasGelu}) {
      SCOPED_TRACE(std::string(rt::pkgDTypeName(dtype)) + " " +
                   rt::cuda::gemmEpilogueName(e));
      FakeCudaApi api;
      api.device.multiprocessors = 1; // 8 blocks: grid-stride loops
      api.hostKernels = kernels;
      std::mt19937 rng(7);
      std::vector<uint8_t> out = randomValues(dtype, m * n, rng, 3),
                           bias = randomValues(dtype, n, rng, 3);
      void *dOut = deviceCopy(api, out), *dBias = deviceCopy(api, bias);
      rt::StatusOr<std::unique_ptr<rt::cuda::CudaEpilogue>> made =
          rt::cuda::CudaEpilogue::create(api, api.device, 0);
      ASSERT_TRUE(made.isOk()) << made.status().message();
      rt::GemmParams p;
      p.m = m, p.n = n, p.k = 3;
      ASSERT_TRUE(
          made.value()->plan(0, e, dtype, p, dOut, dBias, nullptr, nullptr).isOk());
      rt::Status s = made.value()->run(0, nullptr);
      ASSERT_TRUE(s.isOk()) << s.message();
      ASSERT_TRUE(api.streamSynchronize(nullptr).isOk());
      ASSERT_EQ(api.launches.size(), 1u);
      EXPECT_LE(api.launches[0].grid[0], 8u);
      std::vector<uint8_t> got(out.size());
      std::memcpy(got.data(), dOut, got.size());
      bool addBias = e == GemmEpilogue::Bias || e == GemmEpilogue::BiasRelu ||
                     e == GemmEpilogue::BiasGelu;
      int bad = 0;
      for (int64_t i = 0; i < m * n; ++i) {
        double v = loadAs(dtype, out, i);
        if (addBias)
          v += loadAs(dtype, bias, i % n);
        if (e == GemmEpilogue::Relu || e == GemmEpilogue::BiasRelu)
          v = std::max(v, 0.0);
        if (e == GemmEpilogue::Gelu || e == GemmEpilogue::BiasGelu)
          v = geluTanh(v);
        double have = loadAs(dtype, got, i);
        if (!(std::fabs(have - v) <= roundingBound(dtype, v)) && bad++ < 3)
          ADD_FAILURE() << "element " << i << ": " << have << ", expected " << v;
      }
    }
  }
}

// The aux epilogues' kernel: the plain GEMM's product is in aux; after it
// aux holds the pre-activation (plus the bias) and out its tanh-GELU, each
// rounded once from the same f32 value. n = 45: not a multiple of 8 (the
// aux leading dimension cuBLASLt refuses, so this kernel runs it).
TEST(CudaEpilogueKernelTest, GeluAuxMatchesItsDefinition) {
  std::string error;
  const auto &kernels = hostEpilogueKernels(error);
  ASSERT_TRUE(error.empty()) << error;
  const int64_t m = 37, n = 45;
  for (rt::PkgDType dtype :
       {rt::PkgDType::F32, rt::PkgDType::BF16, rt::PkgDType::F16}) {
    for (GemmEpilogue e : {GemmEpilogue::GeluAux, GemmEpilogue::BiasGeluAux}) {
      SCOPED_TRACE(std::string(rt::pkgDTypeName(dtype)) + " " +
                   rt::cuda::gemmEpilogueName(e));
      FakeCudaApi api;
      api.device.multiprocessors = 1; // 8 blocks: grid-stride loops
      api.hostKernels = kernels;
      std::mt19937 rng(13);
      std::vector<uint8_t> product = randomValues(dtype, m * n, rng, 3),
                           bias = randomValues(dtype, n, rng, 3),
                           out(product.size(), 0);
      void *dAux = deviceCopy(api, product), *dBias = deviceCopy(api, bias),
           *dOut = deviceCopy(api, out);
      rt::StatusOr<std::unique_ptr<rt::cuda::CudaEpilogue>> made =
          rt::cuda::CudaEpilogue::create(api, api.device, 0);
      ASSERT_TRUE(made.isOk()) << made.status().message();
      rt::GemmParams p;
      p.m = m, p.n = n, p.k = 3;
      bool addBias = e == GemmEpilogue::BiasGeluAux;
      rt::Status planned =
          made.value()->plan(0, e, dtype, p, dOut, addBias ? dBias : nullptr,
                             nullptr, nullptr, dAux);
      ASSERT_TRUE(planned.isOk()) << planned.message();
      EXPECT_EQ(made.value()->entries(0),
                std::vector<std::string>{std::string("kiln_epilogue_") +
                                         (addBias ? "bias_" : "") + "gelu_aux_" +
                                         rt::pkgDTypeName(dtype)});
      rt::Status s = made.value()->run(0, nullptr);
      ASSERT_TRUE(s.isOk()) << s.message();
      ASSERT_TRUE(api.streamSynchronize(nullptr).isOk());
      std::vector<uint8_t> gotAux(product.size()), gotOut(out.size());
      std::memcpy(gotAux.data(), dAux, gotAux.size());
      std::memcpy(gotOut.data(), dOut, gotOut.size());
      int bad = 0;
      for (int64_t i = 0; i < m * n; ++i) {
        double pre = loadAs(dtype, product, i);
        if (addBias)
          pre += loadAs(dtype, bias, i % n);
        double gelu = geluTanh(pre);
        double haveAux = loadAs(dtype, gotAux, i),
               haveOut = loadAs(dtype, gotOut, i);
        if (!(std::fabs(haveAux - pre) <= roundingBound(dtype, pre)) &&
            bad++ < 3)
          ADD_FAILURE() << "aux " << i << ": " << haveAux << ", expected " << pre;
        if (!(std::fabs(haveOut - gelu) <= roundingBound(dtype, gelu)) &&
            bad++ < 3)
          ADD_FAILURE() << "out " << i << ": " << haveOut << ", expected " << gelu;
      }
    }
  }
}

// The DGELU kernel: out = the plain GEMM's product * gelu'(aux), aux the
// forward's pre-activation (tanh approximation), in f32 and rounded once.
// With aux a separate buffer the GEMM writes out and the kernel scales it
// in place; with aux on out's bytes (as the planner places the GELU
// gradient) the GEMM writes the workspace (gemmTarget) and the kernel
// reads the pre-activation before it overwrites it.
TEST(CudaEpilogueKernelTest, DGeluMatchesItsDefinition) {
  std::string error;
  const auto &kernels = hostEpilogueKernels(error);
  ASSERT_TRUE(error.empty()) << error;
  const int64_t m = 37, n = 45;
  for (rt::PkgDType dtype :
       {rt::PkgDType::F32, rt::PkgDType::BF16, rt::PkgDType::F16}) {
    for (bool inPlace : {false, true}) {
      SCOPED_TRACE(std::string(rt::pkgDTypeName(dtype)) +
                   (inPlace ? " aux = out" : ""));
      FakeCudaApi api;
      api.device.multiprocessors = 1;
      api.hostKernels = kernels;
      std::mt19937 rng(17);
      std::vector<uint8_t> product = randomValues(dtype, m * n, rng, 4),
                           pre = randomValues(dtype, m * n, rng, 4);
      void *dAux = deviceCopy(api, pre);
      void *dOut = inPlace ? dAux : deviceCopy(api, product);
      rt::GemmParams p;
      p.m = m, p.n = n, p.k = 3;
      // Room for the product in the result's type, and no more: the plan
      // with the aux on the result's bytes takes exactly that.
      uint64_t ws =
          rt::cuda::epilogueWorkspaceBytes(GemmEpilogue::DGelu, p, dtype);
      EXPECT_EQ(ws, uint64_t(m * n) * rt::pkgBytesPerElement(dtype));
      rt::StatusOr<std::unique_ptr<rt::cuda::CudaEpilogue>> made =
          rt::cuda::CudaEpilogue::create(api, api.device, inPlace ? ws : 0);
      ASSERT_TRUE(made.isOk()) << made.status().message();
      rt::cuda::CudaEpilogue &epilogue = *made.value();
      rt::Status s = epilogue.plan(0, GemmEpilogue::DGelu, dtype, p, dOut,
                                   nullptr, nullptr, nullptr, dAux);
      ASSERT_TRUE(s.isOk()) << s.message();
      void *target = epilogue.gemmTarget(0);
      if (inPlace) {
        ASSERT_NE(target, dOut);
        std::memcpy(target, product.data(), product.size()); // the "GEMM"
      } else {
        EXPECT_EQ(target, dOut);
      }
      ASSERT_TRUE(epilogue.run(0, nullptr).isOk());
      ASSERT_TRUE(api.streamSynchronize(nullptr).isOk());
      std::vector<uint8_t> got(product.size());
      std::memcpy(got.data(), dOut, got.size());
      int bad = 0;
      for (int64_t i = 0; i < m * n; ++i) {
        double x = loadAs(dtype, pre, i), dy = loadAs(dtype, product, i);
        const double k = std::sqrt(2.0 / M_PI), c = 0.044715;
        double t = std::tanh(k * (x + c * x * x * x));
        double want = dy * (0.5 * (1 + t) +
                            0.5 * x * (1 - t * t) * k * (1 + 3 * c * x * x));
        double have = loadAs(dtype, got, i);
        double bound =
            unitRoundoff(dtype) * std::fabs(want) + 1e-5 * (std::fabs(dy) + 1);
        if (!(std::fabs(have - want) <= bound) && bad++ < 3)
          ADD_FAILURE() << "element " << i << ": " << have << ", expected "
                        << want;
      }
      // Without the pre-activation, or without room for the product when
      // it is on the result's bytes, there is nothing to plan.
      EXPECT_THAT(epilogue
                      .plan(1, GemmEpilogue::DGelu, dtype, p, dOut, nullptr,
                            nullptr, nullptr, nullptr)
                      .message(),
                  HasSubstr("needs the aux input"));
      if (!inPlace)
        EXPECT_THAT(epilogue
                        .plan(1, GemmEpilogue::DGelu, dtype, p, dAux, nullptr,
                              nullptr, nullptr, dAux)
                        .message(),
                    HasSubstr("bytes of workspace for the product"));
    }
  }
}

TEST(CudaEpilogueKernelTest, BiasGradientIsTheDeterministicColumnSum) {
  std::string error;
  const auto &kernels = hostEpilogueKernels(error);
  ASSERT_TRUE(error.empty()) << error;
  const int64_t n = 45;
  for (rt::PkgDType dtype :
       {rt::PkgDType::F32, rt::PkgDType::BF16, rt::PkgDType::F16}) {
    for (bool transposed : {false, true}) {
      for (int64_t k : {1, 300, 700}) { // one chunk, two, three (partial)
        SCOPED_TRACE(std::string(rt::pkgDTypeName(dtype)) + " k=" +
                     std::to_string(k) + (transposed ? " rhs^T" : ""));
        FakeCudaApi api;
        api.device.multiprocessors = 2; // 16 blocks: grid-stride over tiles
        api.hostKernels = kernels;
        std::mt19937 rng(11 + k);
        std::vector<uint8_t> rhs = randomValues(dtype, k * n, rng, 1),
                             grad(n * rt::pkgBytesPerElement(dtype), 0);
        void *dRhs = deviceCopy(api, rhs), *dGrad = deviceCopy(api, grad);
        rt::GemmParams p;
        p.m = 5, p.n = n, p.k = k;
        p.transposeRhs = transposed;
        uint64_t ws = rt::cuda::epilogueWorkspaceBytes(
            GemmEpilogue::BiasGradient, p, dtype);
        EXPECT_EQ(ws, uint64_t((k + 255) / 256 * n * 4));
        rt::StatusOr<std::unique_ptr<rt::cuda::CudaEpilogue>> made =
            rt::cuda::CudaEpilogue::create(api, api.device, ws);
        ASSERT_TRUE(made.isOk()) << made.status().message();
        rt::cuda::CudaEpilogue &epilogue = *made.value();
        ASSERT_TRUE(epilogue
                        .plan(0, GemmEpilogue::BiasGradient, dtype, p, nullptr,
                              nullptr, dRhs, dGrad)
                        .isOk());
        EXPECT_EQ(epilogue.entries(0),
                  (std::vector<std::string>{
                      std::string("kiln_epilogue_bgrad_partial_") +
                          rt::pkgDTypeName(dtype),
                      std::string("kiln_epilogue_bgrad_final_") +
                          rt::pkgDTypeName(dtype)}));
        ASSERT_TRUE(epilogue.run(0, nullptr).isOk());
        ASSERT_TRUE(api.streamSynchronize(nullptr).isOk());
        std::vector<uint8_t> first(grad.size());
        std::memcpy(first.data(), dGrad, first.size());
        for (int64_t j = 0; j < n; ++j) {
          double sum = 0, abs = 0;
          for (int64_t l = 0; l < k; ++l) {
            double x = loadAs(dtype, rhs, transposed ? j * k + l : l * n + j);
            sum += x;
            abs += std::fabs(x);
          }
          double have = loadAs(dtype, first, j);
          // f32 sums (k roundings at most) and one rounding to the type.
          double bound = unitRoundoff(dtype) * std::fabs(sum) +
                         k * std::ldexp(1.0, -24) * abs + 1e-7;
          EXPECT_LE(std::fabs(have - sum), bound) << "column " << j;
        }
        // The same bits again (no atomics, a fixed order).
        std::memset(dGrad, 0x5a, grad.size());
        ASSERT_TRUE(epilogue.run(0, nullptr).isOk());
        ASSERT_TRUE(api.streamSynchronize(nullptr).isOk());
        EXPECT_EQ(std::memcmp(first.data(), dGrad, first.size()), 0);
      }
    }
  }
}

TEST(CudaEpilogueKernelTest, PlanRefusesWhatItCannotRun) {
  FakeCudaApi api;
  rt::StatusOr<std::unique_ptr<rt::cuda::CudaEpilogue>> made =
      rt::cuda::CudaEpilogue::create(api, api.device, 0);
  ASSERT_TRUE(made.isOk()) << made.status().message();
  rt::GemmParams p;
  p.m = 4, p.n = 300, p.k = 600;
  int x = 0;
  rt::Status s = made.value()->plan(0, GemmEpilogue::Bias, rt::PkgDType::F64, p,
                                    &x, &x, nullptr, nullptr);
  EXPECT_THAT(s.message(), HasSubstr("expected f32, f16 or bf16, found f64"));
  s = made.value()->plan(0, GemmEpilogue::BiasGradient, rt::PkgDType::F32, p,
                         &x, nullptr, &x, &x);
  EXPECT_THAT(s.message(), HasSubstr("needs 3600 bytes of workspace, found 0"));
  s = made.value()->plan(0, GemmEpilogue::Bias, rt::PkgDType::F32, p, &x,
                         nullptr, nullptr, nullptr);
  EXPECT_THAT(s.message(), HasSubstr("needs a bias"));
  s = made.value()->plan(0, GemmEpilogue::GeluAux, rt::PkgDType::F32, p, &x,
                         nullptr, nullptr, nullptr, nullptr);
  EXPECT_THAT(s.message(), HasSubstr("gelu+aux epilogue kernel needs an aux"));
  EXPECT_FALSE(made.value()->run(3, nullptr).isOk());
}

// A package's DGelu GEMM (package 1.1; the package builder does not emit it
// yet, docs/cuda.md) through CudaExecutable on the fake: out = (x . w) *
// gelu'(pre), by the fake cuBLASLt and, with DGELU refused, by the plain
// GEMM and the dgelu kernel; pre a separate buffer or on out's bytes (as
// the planner places a GELU gradient, which the fallback must not
// overwrite before reading). Against the definition in double.
TEST(CudaEpilogueDGeluPackageTest, RunsOnCublasLtAndAsAKernel) {
  std::string error;
  const auto &kernels = hostEpilogueKernels(error);
  ASSERT_TRUE(error.empty()) << error;
  const int64_t m = 24, n = 40, k = 16;
  auto buffer = [](const char *name, std::vector<int64_t> shape,
                   uint64_t offset) {
    rt::PackageBuffer b;
    b.name = name;
    b.dtype = rt::PkgDType::F32;
    b.shape = std::move(shape);
    b.offset = offset;
    b.size = 4 * uint64_t(b.shape[0] * b.shape[1]);
    return b;
  };
  std::mt19937 rng(23);
  std::uniform_real_distribution<float> dist(-2, 2);
  std::vector<float> x(m * k), w(k * n), pre(m * n);
  for (std::vector<float> *v : {&x, &w, &pre})
    for (float &e : *v)
      e = dist(rng);
  for (bool refused : {false, true}) {
    for (bool inPlace : {false, true}) {
      SCOPED_TRACE(std::string(refused ? "refused" : "cuBLASLt") +
                   (inPlace ? ", pre on out's bytes" : ""));
      rt::LoadedPackage pkg;
      pkg.target.kind = rt::TargetKind::Cuda;
      pkg.target.smArchs = {90};
      pkg.buffers = {buffer("x", {m, k}, 0), buffer("w", {k, n}, 1536),
                     buffer("pre", {m, n}, 4096),
                     buffer("out", {m, n}, inPlace ? 4096 : 8192)};
      pkg.arenaSize = 12288;
      rt::PackageThunk t;
      t.kind = rt::ThunkKind::LibraryCall;
      t.library = rt::LibraryKind::Gemm;
      t.hasGemm = true;
      t.gemm.m = m, t.gemm.n = n, t.gemm.k = k;
      t.gemm.epilogue = rt::PkgGemmEpilogue::DGelu;
      t.operands = {0, 1, 2};
      t.results = {3};
      pkg.thunks = {t};
      ASSERT_TRUE(rt::checkPackage(pkg).isOk());
      FakeCudaApi api;
      api.hostKernels = kernels;
      if (refused)
        api.refusedEpilogues = {GemmEpilogue::DGelu};
      rt::cuda::CudaOptions options;
      options.graphs = false;
      std::vector<std::string> notes;
      options.log = [&](const std::string &note) { notes.push_back(note); };
      api.learnPackage(pkg);
      auto made = rt::cuda::CudaExecutable::create(pkg, api, options);
      ASSERT_TRUE(made.isOk()) << made.status().message();
      rt::cuda::CudaExecutable &exec = *made.value();
      ASSERT_TRUE(exec.writeBuffer(0, x.data()).isOk());
      ASSERT_TRUE(exec.writeBuffer(1, w.data()).isOk());
      ASSERT_TRUE(exec.writeBuffer(2, pre.data()).isOk());
      ASSERT_TRUE(exec.run().isOk());
      ASSERT_TRUE(exec.synchronize().isOk());
      std::vector<float> got(m * n);
      ASSERT_TRUE(exec.readBuffer(3, got.data()).isOk());
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double dot = 0;
          for (int64_t l = 0; l < k; ++l)
            dot += double(x[i * k + l]) * w[l * n + j];
          double v = pre[i * n + j];
          const double kk = std::sqrt(2.0 / M_PI), c = 0.044715;
          double th = std::tanh(kk * (v + c * v * v * v));
          double want = dot * (0.5 * (1 + th) + 0.5 * v * (1 - th * th) * kk *
                                                   (1 + 3 * c * v * v));
          ASSERT_NEAR(got[i * n + j], want, 1e-5 * (std::fabs(dot) + 1))
              << i << ", " << j;
        }
      ASSERT_EQ(api.gemms.size(), 1u);
      if (refused) {
        EXPECT_EQ(api.gemms[0].desc.epilogue, GemmEpilogue::None);
        ASSERT_EQ(api.launches.size(), 1u);
        EXPECT_EQ(api.launches[0].entry, "kiln_epilogue_dgelu_f32");
        // The product went to the workspace when pre is on out's bytes.
        EXPECT_EQ(api.gemms[0].out == exec.deviceBuffer(3), !inPlace);
        ASSERT_EQ(notes.size(), 1u);
        EXPECT_THAT(notes[0], HasSubstr("dgelu, f32, m=24 n=40 k=16"));
      } else {
        EXPECT_EQ(api.gemms[0].desc.epilogue, GemmEpilogue::DGelu);
        EXPECT_EQ(api.gemms[0].aux, exec.deviceBuffer(2));
        EXPECT_TRUE(api.launches.empty());
      }
    }
  }
}

// NVRTC and ptxas for sm_90: every kernel, its registers, no spills.
TEST(CudaEpilogueKernelTest, KernelsCompileForSm90WithoutSpills) {
  std::string skip;
  rt::cuda::testing::expectSm90WithoutSpills(rt::cuda::epilogueKernelSource(),
                                             "kiln_epilogue",
                                             rt::cuda::epilogueKernelEntryPoints(),
                                             skip);
  if (!skip.empty())
    GTEST_SKIP() << skip;
}

// The runtime's own path: the real table's NVRTC (no driver needed).
TEST(CudaEpilogueKernelTest, TheRealTableCompilesTheKernels) {
  std::string skip;
  rt::cuda::testing::expectRealTableCompiles(rt::cuda::epilogueKernelSource(),
                                             "kiln_epilogue", skip);
  if (!skip.empty())
    GTEST_SKIP() << skip;
}

const std::set<GemmEpilogue> kEveryEpilogue = {
    GemmEpilogue::Bias,        GemmEpilogue::Relu,
    GemmEpilogue::BiasRelu,    GemmEpilogue::Gelu,
    GemmEpilogue::BiasGelu,    GemmEpilogue::BiasGradient,
    GemmEpilogue::GeluAux,     GemmEpilogue::BiasGeluAux,
    GemmEpilogue::DGelu};

class CudaEpilogueFallbackStepTest : public StepTest {
protected:
  // |model|'s step packaged as `kiln compile --target=cuda` packages it
  // (bias gradients on), with its kernels' sources.
  void compile(OwningOpRef<ModuleOp> model, AmpMode amp, rt::LoadedPackage &pkg,
               std::string &sources, func::FuncOp &func) {
    ASSERT_TRUE(model) << diagnostics;
    PipelineOptions options;
    options.amp = amp;
    options.gemmBiasGradients = true;
    options.optimizer.learningRate = kLearningRate;
    ASSERT_TRUE(succeeded(runCompilePipeline(*model, options))) << diagnostics;
    func = cli::findModelFunction(*model);
    ASSERT_TRUE(func) << diagnostics;
    cli::PackageTargetHooks hooks = cudaPackageHooks(diagnostics, &sources);
    std::string errors;
    ASSERT_TRUE(packageStep(*model, &hooks, pkg, errors)) << errors << diagnostics;
    module = std::move(model);
  }

  // Compiles |model|, refuses |refused| in the fake cuBLASLt, runs two
  // steps through CudaExecutable and compares them with the interpreter.
  void check(OwningOpRef<ModuleOp> model, AmpMode amp, const std::string &name,
             const std::set<GemmEpilogue> &refused) {
    rt::LoadedPackage pkg;
    std::string sources;
    func::FuncOp func;
    compile(std::move(model), amp, pkg, sources, func);
    if (HasFatalFailure())
      return;
    std::string error;
    std::map<std::string, HostKernel> stepKernels =
        rt::cuda::testing::buildHostKernels(sources, kernelEntries(pkg), name, error);
    ASSERT_TRUE(error.empty()) << error;
    const auto &epilogueKernels = hostEpilogueKernels(error);
    ASSERT_TRUE(error.empty()) << error;

    FakeCudaApi api;
    api.device.multiprocessors = 2; // grids of at most 16 blocks
    api.hostKernels = stepKernels;
    api.hostKernels.insert(epilogueKernels.begin(), epilogueKernels.end());
    api.refusedEpilogues = refused;
    api.learnPackage(pkg);
    std::vector<std::string> notes;
    rt::StatusOr<std::unique_ptr<rt::cuda::CudaExecutable>> made =
        createExecutable(pkg, api, notes);
    ASSERT_TRUE(made.isOk()) << made.status().message();
    rt::cuda::CudaExecutable &exec = *made.value();

    // Which thunks fall back: those whose epilogue was refused, or that
    // cuBLASLt refuses anywhere (an aux leading dimension that is no
    // multiple of 8).
    std::vector<size_t> fallbacks;
    int epilogueLaunches = 0;
    bool refusedByName = false;
    for (size_t i = 0; i < pkg.thunks.size(); ++i) {
      const rt::PackageThunk &t = pkg.thunks[i];
      GemmEpilogue e = t.hasGemm ? toEpilogue(t.gemm.epilogue)
                                 : GemmEpilogue::None;
      if (e == GemmEpilogue::None)
        continue;
      rt::cuda::GemmDesc desc;
      desc.params = t.gemm;
      desc.epilogue = e;
      bool anywhere = !rt::cuda::gemmLtRefusal(desc).empty();
      if (!refused.count(e) && !anywhere)
        continue;
      refusedByName = refusedByName || refused.count(e);
      fallbacks.push_back(i);
      epilogueLaunches += e == GemmEpilogue::BiasGradient ? 2 : 1;
      ++fallbackKinds[e];
      if (rt::pkgGemmEpilogueBuffers(t.gemm.epilogue).c)
        ++residualFallbacks;
    }
    ASSERT_FALSE(fallbacks.empty()) << "nothing to fall back in " << name;
    // One note for the executable, naming every thunk that fell back.
    ASSERT_EQ(notes.size(), 1u);
    EXPECT_THAT(notes[0], HasSubstr("cuBLASLt offers no algorithm"));
    if (refusedByName)
      EXPECT_THAT(notes[0], HasSubstr("CUBLAS_STATUS_NOT_SUPPORTED"));
    for (size_t i : fallbacks) {
      std::string epilogueName =
          rt::cuda::gemmEpilogueName(toEpilogue(pkg.thunks[i].gemm.epilogue));
      EXPECT_THAT(notes[0], HasSubstr(epilogueName));
      EXPECT_TRUE(notes[0].find(" " + std::to_string(i) + " (") !=
                      std::string::npos ||
                  notes[0].find(" " + std::to_string(i) + ",") !=
                      std::string::npos)
          << "thunk " << i << " in: " << notes[0];
    }
    // Every plan made has an epilogue cuBLASLt did not refuse; a residual
    // GEMM that fell back is still one (cuBLASLt reads its C).
    for (const rt::cuda::GemmDesc &d : api.plans)
      EXPECT_EQ(refused.count(d.epilogue), 0u) << rt::cuda::gemmEpilogueName(d.epilogue);
    int residualPlans = 0;
    for (const rt::cuda::GemmDesc &d : api.plans)
      residualPlans += d.residual;
    int residualThunks = countThunks(pkg, [](const rt::PackageThunk &t) {
      return t.hasGemm && rt::pkgGemmEpilogueBuffers(t.gemm.epilogue).c;
    });
    EXPECT_EQ(residualPlans > 0, residualThunks > 0);

    double worst = 0;
    size_t launchesBefore = 0;
    StepHooks hooks;
    hooks.before = [&](int) { launchesBefore = api.launches.size(); };
    hooks.after = [&](int step, const std::vector<HostTensor> &,
                      llvm::ArrayRef<HostTensor>) {
      int ran = 0;
      for (size_t i = launchesBefore; i < api.launches.size(); ++i)
        ran += api.launches[i].entry.rfind("kiln_epilogue_", 0) == 0;
      // The second step is captured: its launches are recorded once.
      EXPECT_EQ(ran, epilogueLaunches) << "step " << step;
    };
    runStepsAgainstInterpreter(func, pkg, exec, amp, name, diagnostics, worst,
                               hooks);
    if (HasFatalFailure())
      return;
    EXPECT_TRUE(exec.usingGraph()) << exec.graphFallbackReason();
    EXPECT_EQ(notes.size(), 1u); // nothing more per step
    std::printf("%s: %zu GEMM thunks fell back; worst error %.3g of the "
                "output's magnitude (bound %.3g)\n",
                name.c_str(), fallbacks.size(), worst, relativeBound(amp));
    RecordProperty("fallback_thunks", static_cast<int>(fallbacks.size()));
    RecordProperty("worst_relative_error", std::to_string(worst));
  }

  static GemmEpilogue toEpilogue(rt::PkgGemmEpilogue e) {
    switch (e) {
    case rt::PkgGemmEpilogue::None: return GemmEpilogue::None;
    case rt::PkgGemmEpilogue::Bias: return GemmEpilogue::Bias;
    case rt::PkgGemmEpilogue::Relu: return GemmEpilogue::Relu;
    case rt::PkgGemmEpilogue::BiasRelu: return GemmEpilogue::BiasRelu;
    case rt::PkgGemmEpilogue::Gelu: return GemmEpilogue::Gelu;
    case rt::PkgGemmEpilogue::BiasGelu: return GemmEpilogue::BiasGelu;
    case rt::PkgGemmEpilogue::BiasGradient: return GemmEpilogue::BiasGradient;
    // The residual is cuBLASLt's C, not an epilogue: only the bias can
    // fall back.
    case rt::PkgGemmEpilogue::Residual: return GemmEpilogue::None;
    case rt::PkgGemmEpilogue::BiasResidual: return GemmEpilogue::Bias;
    case rt::PkgGemmEpilogue::GeluAux: return GemmEpilogue::GeluAux;
    case rt::PkgGemmEpilogue::BiasGeluAux: return GemmEpilogue::BiasGeluAux;
    case rt::PkgGemmEpilogue::DGelu: return GemmEpilogue::DGelu;
    }
    return GemmEpilogue::None;
  }

  OwningOpRef<ModuleOp> module;
  std::map<GemmEpilogue, int> fallbackKinds;
  // Thunks with a residual C whose bias fell back to the kernel.
  int residualFallbacks = 0;
};

TEST_F(CudaEpilogueFallbackStepTest, MlpF32EveryEpilogueRefused) {
  check(cli::buildMlp(&context, smallMlp(37)), AmpMode::off, "mlp-f32",
        kEveryEpilogue);
  EXPECT_EQ(fallbackKinds[GemmEpilogue::BiasGradient], 2);
  EXPECT_EQ(fallbackKinds[GemmEpilogue::Bias], 1);
}

TEST_F(CudaEpilogueFallbackStepTest, MlpBF16EveryEpilogueRefused) {
  check(cli::buildMlp(&context, smallMlp(16)), AmpMode::bf16, "mlp-bf16",
        kEveryEpilogue);
  EXPECT_EQ(fallbackKinds[GemmEpilogue::BiasGradient], 2);
}

// One block: qkv is a bias, the attention and MLP projections a bias plus
// the residual, the MLP's first layer a bias+GELU keeping its aux.
TEST_F(CudaEpilogueFallbackStepTest, GptF32EveryEpilogueRefused) {
  check(cli::buildGpt(&context, smallGpt()), AmpMode::off, "gpt-f32",
        kEveryEpilogue);
  EXPECT_GE(fallbackKinds[GemmEpilogue::BiasGradient], 4);
  EXPECT_EQ(fallbackKinds[GemmEpilogue::Bias], 3);
  EXPECT_EQ(residualFallbacks, 2);
  EXPECT_EQ(fallbackKinds[GemmEpilogue::BiasGeluAux], 1);
}

TEST_F(CudaEpilogueFallbackStepTest, GptBF16EveryEpilogueRefused) {
  check(cli::buildGpt(&context, smallGpt()), AmpMode::bf16, "gpt-bf16",
        kEveryEpilogue);
  EXPECT_GE(fallbackKinds[GemmEpilogue::BiasGradient], 4);
  EXPECT_EQ(fallbackKinds[GemmEpilogue::Bias], 3);
  EXPECT_EQ(residualFallbacks, 2);
  EXPECT_EQ(fallbackKinds[GemmEpilogue::BiasGeluAux], 1);
}

TEST_F(CudaEpilogueFallbackStepTest, GptFP16EveryEpilogueRefused) {
  check(cli::buildGpt(&context, smallGpt()), AmpMode::fp16, "gpt-fp16",
        kEveryEpilogue);
  EXPECT_EQ(residualFallbacks, 2);
  EXPECT_EQ(fallbackKinds[GemmEpilogue::BiasGeluAux], 1);
}

// Only the aux epilogues refused: the residual GEMMs keep their bias
// epilogue on cuBLASLt, the MLP's first layer runs its GELU as a kernel.
TEST_F(CudaEpilogueFallbackStepTest, GptBF16OnlyGeluAuxRefused) {
  check(cli::buildGpt(&context, smallGpt()), AmpMode::bf16, "gpt-bf16-aux",
        {GemmEpilogue::BiasGeluAux});
  EXPECT_EQ(fallbackKinds[GemmEpilogue::BiasGeluAux], 1);
  EXPECT_EQ(fallbackKinds.count(GemmEpilogue::Bias), 0u);
}

// Hidden 21: the MLP's width 84 is no multiple of 8, so cuBLASLt refuses
// the aux leading dimension on any device and the GELU runs as a kernel
// with nothing refused by name.
TEST_F(CudaEpilogueFallbackStepTest, GptF32AuxLeadingDimensionFallsBack) {
  cli::GptOptions options = smallGpt();
  options.hidden = 21;
  options.heads = 3;
  check(cli::buildGpt(&context, options), AmpMode::off, "gpt-f32-aux-ld", {});
  EXPECT_EQ(fallbackKinds[GemmEpilogue::BiasGeluAux], 1);
  EXPECT_EQ(fallbackKinds.size(), 1u);
}

// The least certain combination on a real cuBLASLt: BGRADA with a bf16
// bias. Only it falls back; the bias epilogues stay on cuBLASLt.
TEST_F(CudaEpilogueFallbackStepTest, GptBF16OnlyBiasGradientRefused) {
  check(cli::buildGpt(&context, smallGpt()), AmpMode::bf16,
        "gpt-bf16-bgrad", {GemmEpilogue::BiasGradient});
  EXPECT_GE(fallbackKinds[GemmEpilogue::BiasGradient], 4);
  EXPECT_EQ(fallbackKinds.count(GemmEpilogue::Bias), 0u);
}

// A gemmPlan failure other than "no algorithm" fails create, naming the
// thunk, as before; so does the plain GEMM's plan after a refusal.
TEST_F(CudaEpilogueFallbackStepTest, OtherPlanFailuresStillFailCreate) {
  rt::LoadedPackage pkg;
  std::string sources;
  func::FuncOp func;
  compile(cli::buildMlp(&context, smallMlp(16)), AmpMode::off, pkg, sources, func);
  ASSERT_FALSE(HasFatalFailure());
  size_t firstGemm = pkg.thunks.size();
  for (size_t i = 0; i < pkg.thunks.size() && firstGemm == pkg.thunks.size(); ++i)
    if (pkg.thunks[i].hasGemm)
      firstGemm = i;
  ASSERT_LT(firstGemm, pkg.thunks.size());
  {
    FakeCudaApi api;
    api.refusedEpilogues = kEveryEpilogue;
    api.failCall = "cublasLtMatmulAlgoGetHeuristic";
    api.failAt = 0;
    auto made = rt::cuda::CudaExecutable::create(pkg, api);
    ASSERT_FALSE(made.isOk());
    EXPECT_THAT(made.status().message(),
                HasSubstr("thunk " + std::to_string(firstGemm) + " (gemm m="));
    EXPECT_THAT(made.status().message(),
                HasSubstr("cublasLtMatmulAlgoGetHeuristic failed: "
                          "CUDA_ERROR_LAUNCH_FAILED"));
  }
  // The plain GEMM's plan fails after cuBLASLt refused the epilogue.
  class PlainPlanFails : public FakeCudaApi {
  public:
    using FakeCudaApi::gemmPlan;
    rt::Status gemmPlan(rt::cuda::GemmPlan *plan, const rt::cuda::GemmDesc &desc,
                        size_t bytes, bool *unsupported) override {
      if (refusedOnce && desc.epilogue == GemmEpilogue::None) {
        *unsupported = false;
        return rt::Status::error("cublasLtMatmulAlgoGetHeuristic failed: "
                                 "CUBLAS_STATUS_INTERNAL_ERROR (14)");
      }
      rt::Status s = FakeCudaApi::gemmPlan(plan, desc, bytes, unsupported);
      refusedOnce = refusedOnce || (unsupported && *unsupported);
      return s;
    }
    bool refusedOnce = false;
  } api;
  api.refusedEpilogues = kEveryEpilogue;
  auto made = rt::cuda::CudaExecutable::create(pkg, api);
  ASSERT_FALSE(made.isOk());
  EXPECT_THAT(made.status().message(), HasSubstr("thunk "));
  EXPECT_THAT(made.status().message(), HasSubstr("(gemm m="));
  EXPECT_THAT(made.status().message(), HasSubstr("epilogue ("));
  EXPECT_THAT(made.status().message(),
              HasSubstr("and the plain GEMM: cublasLtMatmulAlgoGetHeuristic "
                        "failed: CUBLAS_STATUS_INTERNAL_ERROR"));
}

} // namespace
