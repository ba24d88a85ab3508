//===- CudaGpuTest.cpp - the GPU runtime on a real GPU (ctest label gpu) --===//
//
// Skips, saying why, where loadCudaApi() or device discovery finds no GPU.
// On a GPU: cuBLASLt GEMMs through the real table (CudaApiLoader.cpp), every
// epilogue and both transposes, f32 / bf16 / fp16, against the host GEMM of
// HostGemm.h on random data; an NVRTC-compiled kernel through the
// driver's module load and cuLaunchKernel; and a CUDA package prepared on
// the CPU machine ($KILN_CUDA_TEST_PACKAGE, bench/gpu/prepare.sh's MLP)
// loaded and stepped, its loss finite and falling; and golden steps
// ($KILN_CUDA_GOLDEN_DIR, written on the CPU machine by
// kiln-cuda-step-emulation-tests: small mlp and gpt steps in f32 and bf16,
// whose kernels cover every fusion kind, with the reference interpreter's
// outputs) run once through CudaExecutable and compared output by output;
// and every algorithm the GEMM autotuner may choose against the host GEMM
// and the tuner timing them (Autotune.h);
// and the three convolutions (CudaConv.h, f32, bf16 and f16: half
// operands on tensor cores with an f32 result) against their definitions,
// and such GEMMs on their own; and
// the fused attention (CudaAttention.h: forward and backward, tensor-core
// and CUDA-core kernels, both layouts) against its definition in double
// precision; and what the fake says CUDA refuses (CudaRules.h): a
// capture's forbidden calls, launch shapes past CUDA's limits.
//
//===----------------------------------------------------------------------===//

#include "runtime/Half.h"
#include "runtime/cuda/CudaExecutable.h"
#include "tests/unit/cuda/AttentionPackage.h"
#include "tests/unit/cuda/CudaRules.h"
#include "tests/unit/cuda/ConvPackage.h"
#include "tests/unit/cuda/HostGemm.h"
#include "tests/unit/cuda/GpuTest.h"
#include "tests/unit/cuda/PkgBuffers.h"
#include "tests/unit/cuda/ScopedEnv.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <dirent.h>
#include <dlfcn.h>
#include <fstream>
#include <random>
#include <set>

namespace {

using namespace kiln::runtime;
using namespace kiln::runtime::cuda;

using CudaGpuTest = kiln::runtime::cuda::testing::GpuTest;

using kiln::runtime::cuda::testing::CaptureRule;
using kiln::runtime::cuda::testing::captureRules;
using kiln::runtime::cuda::testing::checkCaptureRule;
using kiln::runtime::cuda::testing::LaunchShape;
using kiln::runtime::cuda::testing::refusedLaunchShapes;
using kiln::runtime::cuda::testing::randomBuffer;
using kiln::runtime::cuda::testing::valueAt;

// A GEMM's buffers on the device: lhs, rhs and bias copied in (on
// |stream|), room for the result, a cuBLASLt workspace; freed when it goes.
struct DeviceGemm {
  DeviceGemm(CudaApi &api, CudaStream stream, const std::vector<uint8_t> &lhs,
             const std::vector<uint8_t> &rhs, const std::vector<uint8_t> &bias,
             size_t outBytes)
      : api(api) {
    const std::pair<void **, size_t> all[] = {{&l, lhs.size()},
                                              {&r, rhs.size()},
                                              {&out, outBytes},
                                              {&b, bias.size()},
                                              {&ws, wsBytes}};
    for (auto [ptr, bytes] : all)
      ok = ok && api.malloc(ptr, bytes).isOk();
    const std::pair<void *, const std::vector<uint8_t> *> copies[] = {
        {l, &lhs}, {r, &rhs}, {b, &bias}};
    for (auto [to, from] : copies)
      ok = ok && api.memcpyAsync(to, from->data(), from->size(),
                                 CopyKind::HostToDevice, stream)
                     .isOk();
  }
  ~DeviceGemm() {
    for (void *ptr : {l, r, out, b, ws})
      if (ptr)
        api.free(ptr);
  }
  CudaApi &api;
  void *l = nullptr, *r = nullptr, *out = nullptr, *b = nullptr, *ws = nullptr;
  size_t wsBytes = 32u << 20;
  bool ok = true; // every allocation and copy was queued
};

TEST_F(CudaGpuTest, CublasLtGemmsWithEveryEpilogueMatchTheHost) {
  for (PkgDType dtype : {PkgDType::F32, PkgDType::BF16, PkgDType::F16})
    for (GemmEpilogue epilogue :
         {GemmEpilogue::None, GemmEpilogue::Bias, GemmEpilogue::Relu,
          GemmEpilogue::BiasRelu, GemmEpilogue::Gelu, GemmEpilogue::BiasGelu,
          GemmEpilogue::BiasGradient})
      for (bool tl : {false, true})
        for (bool tr : {false, true}) {
          GemmDesc desc;
          desc.dtype = dtype;
          desc.epilogue = epilogue;
          desc.params.m = 64;
          desc.params.n = 96;
          desc.params.k = 128;
          desc.params.transposeLhs = tl;
          desc.params.transposeRhs = tr;
          const GemmParams &p = desc.params;
          std::string what = std::string(pkgDTypeName(dtype)) + " " +
                             gemmEpilogueName(epilogue) + " tl=" +
                             std::to_string(tl) + " tr=" + std::to_string(tr);
          auto lhs = randomBuffer(dtype, p.m * p.k, 1);
          auto rhs = randomBuffer(dtype, p.k * p.n, 2);
          auto bias = randomBuffer(dtype, p.n, 3);
          std::vector<uint8_t> want(p.m * p.n * pkgBytesPerElement(dtype));
          std::vector<uint8_t> wantGrad(p.n * pkgBytesPerElement(dtype));
          kiln::runtime::cuda::testing::hostGemm(desc, lhs.data(), rhs.data(),
                                         want.data(), bias.data(),
                                         wantGrad.data());
          DeviceGemm d(*api, stream, lhs, rhs, bias, want.size());
          ASSERT_TRUE(d.ok) << what;
          GemmPlan plan = nullptr;
          Status s = api->gemmPlan(&plan, desc, d.wsBytes);
          if (!s.isOk() && epilogue != GemmEpilogue::None &&
              (s.message().find("NOT_SUPPORTED") != std::string::npos ||
               s.message().find("found no algorithm") != std::string::npos)) {
            // cuBLASLt supports some epilogues (BGRADA above all) only for
            // some layouts and types; plain GEMMs must always plan.
            std::printf("note: %s: unsupported: %s\n", what.c_str(),
                        s.message().c_str());
          } else {
            ASSERT_TRUE(s.isOk()) << what << ": " << s.message();
            bool grad = epilogue == GemmEpilogue::BiasGradient;
            s = api->gemmRun(plan, d.l, d.r, d.out, grad ? nullptr : d.b,
                             grad ? d.b : nullptr, d.ws, d.wsBytes, stream);
            ASSERT_TRUE(s.isOk()) << what << ": " << s.message();
            std::vector<uint8_t> got(want.size()), gotGrad(bias.size());
            api->memcpyAsync(got.data(), d.out, got.size(), CopyKind::DeviceToHost,
                             stream);
            api->memcpyAsync(gotGrad.data(), d.b, gotGrad.size(),
                             CopyKind::DeviceToHost, stream);
            ASSERT_TRUE(api->streamSynchronize(stream).isOk()) << what;
            double tol = dtype == PkgDType::F32 ? 1e-4 : 2e-2;
            for (int64_t i = 0; i < p.m * p.n; ++i) {
              double e = valueAt(dtype, want, i), a = valueAt(dtype, got, i);
              ASSERT_LE(std::fabs(e - a), tol * std::max(1.0, std::fabs(e)) * 8)
                  << what << " element " << i;
            }
            if (grad)
              for (int64_t j = 0; j < p.n; ++j) {
                double e = valueAt(dtype, wantGrad, j), a = valueAt(dtype, gotGrad, j);
                ASSERT_LE(std::fabs(e - a), tol * std::max(1.0, std::fabs(e)) * 8)
                    << what << " bias gradient " << j;
              }
            api->gemmDestroy(plan);
          }
        }
}

// Half operands with an f32 result (GemmDesc::f32Output, the convolutions'
// GEMMs): A and B 16-bit, C and D f32, both transposes, batched, and beta 1
// adding to the f32 result already there, against the host GEMM.
TEST_F(CudaGpuTest, HalfGemmsWithAnF32ResultMatchTheHost) {
  for (PkgDType dtype : {PkgDType::BF16, PkgDType::F16})
    for (bool tl : {false, true})
      for (bool tr : {false, true})
        for (double beta : {0.0, 1.0}) {
          GemmDesc desc;
          desc.dtype = dtype;
          desc.f32Output = true;
          desc.params.m = 48;
          desc.params.n = 72;
          desc.params.k = 200;
          desc.params.batch = 2;
          desc.params.beta = beta;
          desc.params.transposeLhs = tl;
          desc.params.transposeRhs = tr;
          const GemmParams &p = desc.params;
          std::string what = std::string(pkgDTypeName(dtype)) +
                             " f32 result tl=" + std::to_string(tl) +
                             " tr=" + std::to_string(tr) +
                             " beta=" + std::to_string(beta);
          auto lhs = randomBuffer(dtype, p.batch * p.m * p.k, 1);
          auto rhs = randomBuffer(dtype, p.batch * p.k * p.n, 2);
          // The result's earlier f32 values, which beta 1 adds to.
          auto before = randomBuffer(PkgDType::F32, p.batch * p.m * p.n, 3);
          std::vector<uint8_t> want = before;
          kiln::runtime::cuda::testing::hostGemm(desc, lhs.data(), rhs.data(),
                                                 want.data(), nullptr, nullptr);
          DeviceGemm d(*api, stream, lhs, rhs, randomBuffer(dtype, 8, 4), want.size());
          ASSERT_TRUE(d.ok) << what;
          ASSERT_TRUE(api->memcpyAsync(d.out, before.data(), before.size(),
                                       CopyKind::HostToDevice, stream)
                          .isOk());
          GemmPlan plan = nullptr;
          Status s = api->gemmPlan(&plan, desc, d.wsBytes);
          ASSERT_TRUE(s.isOk()) << what << ": " << s.message();
          s = api->gemmRun(plan, d.l, d.r, d.out, nullptr, nullptr, d.ws,
                           d.wsBytes, stream);
          ASSERT_TRUE(s.isOk()) << what << ": " << s.message();
          std::vector<uint8_t> got(want.size());
          api->memcpyAsync(got.data(), d.out, got.size(), CopyKind::DeviceToHost,
                           stream);
          ASSERT_TRUE(api->streamSynchronize(stream).isOk()) << what;
          api->gemmDestroy(plan);
          // Exact products summed in f32 in another order: f32's bound,
          // not the 16-bit type's (a result rounded to it would fail).
          for (int64_t i = 0; i < p.batch * p.m * p.n; ++i) {
            double e = valueAt(PkgDType::F32, want, i);
            double a = valueAt(PkgDType::F32, got, i);
            ASSERT_LE(std::fabs(e - a), 1e-4 * std::max(1.0, std::fabs(e)))
                << what << " element " << i;
          }
        }
}

// What the autotuner (Autotune.h) may choose: every algorithm a plan
// holds computes the same GEMM (within the dtype's bound) as the host; the
// ids differ; the tuner times them all and keeps one.
TEST_F(CudaGpuTest, EveryAlgorithmTheAutotunerMayChooseMatchesTheHost) {
  for (PkgDType dtype : {PkgDType::F32, PkgDType::BF16})
    for (GemmEpilogue epilogue : {GemmEpilogue::None, GemmEpilogue::BiasGelu}) {
      GemmDesc desc;
      desc.dtype = dtype;
      desc.epilogue = epilogue;
      desc.params.m = 256;
      desc.params.n = 384;
      desc.params.k = 512;
      desc.params.transposeRhs = true;
      desc.algorithms = 8;
      const GemmParams &p = desc.params;
      std::string what = std::string(pkgDTypeName(dtype)) + " " +
                         gemmEpilogueName(epilogue);
      auto lhs = randomBuffer(dtype, p.m * p.k, 11);
      auto rhs = randomBuffer(dtype, p.k * p.n, 12);
      auto bias = randomBuffer(dtype, p.n, 13);
      std::vector<uint8_t> want(p.m * p.n * pkgBytesPerElement(dtype));
      kiln::runtime::cuda::testing::hostGemm(
          desc, lhs.data(), rhs.data(), want.data(), bias.data(), nullptr);
      DeviceGemm d(*api, stream, lhs, rhs, bias, want.size());
      ASSERT_TRUE(d.ok) << what;
      GemmPlan plan = nullptr;
      Status s = api->gemmPlan(&plan, desc, d.wsBytes);
      ASSERT_TRUE(s.isOk()) << what << ": " << s.message();
      int count = api->gemmAlgorithmCount(plan);
      ASSERT_GE(count, 1) << what;
      std::set<std::string> ids;
      double tol = dtype == PkgDType::F32 ? 1e-4 : 2e-2;
      for (int a = 0; a < count; ++a) {
        StatusOr<GemmAlgorithm> info = api->gemmAlgorithm(plan, a);
        ASSERT_TRUE(info.isOk()) << info.status().message();
        ids.insert(info.value().id);
        std::printf("note: %s algorithm %d: %s\n", what.c_str(), a,
                    info.value().description.c_str());
        // Every configuration attribute was read ("?" where a read failed).
        EXPECT_EQ(info.value().description.find('?'), std::string::npos)
            << info.value().description;
        ASSERT_TRUE(api->gemmSelectAlgorithm(plan, a).isOk());
        ASSERT_EQ(api->gemmSelectedAlgorithm(plan), a);
        api->memsetAsync(d.out, 0, want.size(), stream);
        s = api->gemmRun(plan, d.l, d.r, d.out, d.b, nullptr, d.ws, d.wsBytes,
                         stream);
        ASSERT_TRUE(s.isOk()) << what << " algorithm " << a << ": " << s.message();
        std::vector<uint8_t> got(want.size());
        api->memcpyAsync(got.data(), d.out, got.size(), CopyKind::DeviceToHost,
                         stream);
        ASSERT_TRUE(api->streamSynchronize(stream).isOk()) << what;
        for (int64_t i = 0; i < p.m * p.n; ++i) {
          double e = valueAt(dtype, want, i), g = valueAt(dtype, got, i);
          ASSERT_LE(std::fabs(e - g), tol * std::max(1.0, std::fabs(e)) * 8)
              << what << " algorithm " << a << " element " << i;
        }
      }
      EXPECT_EQ(int(ids.size()), count) << what << ": two algorithms share an id";
      EXPECT_FALSE(api->gemmSelectAlgorithm(plan, count).isOk());
      // The tuner on the device: every algorithm timed, one kept.
      Autotuner tuner(*api, api->deviceInfo(0).value(), {});
      StatusOr<Tuning> tuned = tuner.tune(
          "gemm " + what, api->gemmLibraryVersion(), gemmCandidates(*api, plan),
          [&](CudaStream st) {
            return api->gemmRun(plan, d.l, d.r, d.out, d.b, nullptr, d.ws,
                                d.wsBytes, st);
          },
          stream);
      ASSERT_TRUE(tuned.isOk()) << tuned.status().message();
      if (count > 1) {
        ASSERT_EQ(int(tuned.value().ms.size()), count);
        for (double ms : tuned.value().ms)
          EXPECT_GT(ms, 0) << what;
        std::printf("note: %s tuned: algorithm %d of %d\n", what.c_str(),
                    tuned.value().chosen, count);
      }
      EXPECT_EQ(api->gemmSelectedAlgorithm(plan), tuned.value().chosen);
      api->gemmDestroy(plan);
    }
}

// The fake's capture rules (CudaRules.h, FakeCudaApi.h) on the real
// table: each call the fake refuses during a capture fails here with the
// same CUDA code and invalidates the capture, and the stream works again
// after it; the capture that breaks no rule replays. After each failure
// cudart's last error is clear (CudaApiLoader.cpp resets it), so a
// library that checks cudaGetLastError after its own launches does not
// take an error already reported for its own.
TEST_F(CudaGpuTest, CaptureRefusesWhatTheFakeRefuses) {
  using LastError = int (*)();
  LastError lastError = nullptr;
  for (const char *name : {"libcudart.so.13", "libcudart.so.12", "libcudart.so"})
    if (void *lib = dlopen(name, RTLD_LAZY | RTLD_NOLOAD)) {
      lastError = reinterpret_cast<LastError>(dlsym(lib, "cudaGetLastError"));
      dlclose(lib);
      break;
    }
  for (const CaptureRule &rule : captureRules()) {
    SCOPED_TRACE(rule.forbidden);
    std::string ended = checkCaptureRule(*api, rule);
    if (!ended.empty())
      std::printf("capture rule %s: %s\n", rule.forbidden, ended.c_str());
    if (lastError)
      EXPECT_EQ(lastError(), 0) << "cudart kept an error after " << rule.forbidden;
  }
  if (!lastError)
    std::printf("note: cudart not found by its name: its last error was not "
                "checked\n");
}

// The launch shapes the fake refuses (CudaRules.h) on the real driver:
// each fails as the fake says, and does not break the context (a launch
// within the limits runs after them).
TEST_F(CudaGpuTest, LaunchShapesTheFakeRefusesAreRefused) {
  const char *source =
      "extern \"C\" __global__ void kiln_mark(int *flag) { *flag = 7; }\n";
  std::vector<uint8_t> cubin;
  std::string log;
  Status s = api->nvrtcCompile(source, "kiln_mark", device.smArch(), cubin, log);
  ASSERT_TRUE(s.isOk()) << s.message();
  CudaModule module = nullptr;
  CudaFunction fn = nullptr;
  ASSERT_TRUE(api->moduleLoadData(&module, cubin.data(), cubin.size()).isOk());
  ASSERT_TRUE(api->moduleGetFunction(&fn, module, "kiln_mark").isOk());
  void *flag = nullptr;
  ASSERT_TRUE(api->malloc(&flag, 4).isOk());
  ASSERT_TRUE(api->memsetAsync(flag, 0, 4, stream).isOk());
  void *params[] = {&flag};
  for (const LaunchShape &shape : refusedLaunchShapes()) {
    SCOPED_TRACE(shape.text());
    Status launched =
        api->launchKernel(fn, shape.grid, shape.block, 0, stream, params, 1);
    EXPECT_EQ(launched.message().find(
                  "cuLaunchKernel failed: CUDA_ERROR_INVALID_VALUE (1)"),
              0u)
        << launched.message();
  }
  ASSERT_TRUE(
      api->launchKernel(fn, {1, 1, 1}, {1, 1, 1}, 0, stream, params, 1).isOk());
  int value = 0;
  ASSERT_TRUE(
      api->memcpyAsync(&value, flag, 4, CopyKind::DeviceToHost, stream).isOk());
  ASSERT_TRUE(api->streamSynchronize(stream).isOk());
  EXPECT_EQ(value, 7);
  api->free(flag);
  api->moduleUnload(module);
}

TEST_F(CudaGpuTest, NvrtcKernelLaunchesThroughTheDriver) {
  const char *source =
      "extern \"C\" __global__ void kiln_axpy(const float *x, float *y) {\n"
      "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
      "  if (i < 1000) y[i] = 2.0f * x[i] + y[i];\n"
      "}\n";
  CudaDeviceInfo device = api->deviceInfo(0).value();
  std::vector<uint8_t> cubin;
  std::string log;
  Status s = api->nvrtcCompile(source, "kiln_axpy", device.smArch(), cubin, log);
  ASSERT_TRUE(s.isOk()) << s.message();
  CudaModule module = nullptr;
  ASSERT_TRUE(api->moduleLoadData(&module, cubin.data(), cubin.size()).isOk());
  CudaFunction fn = nullptr;
  ASSERT_TRUE(api->moduleGetFunction(&fn, module, "kiln_axpy").isOk());
  std::vector<float> x(1000), y(1000);
  for (int i = 0; i < 1000; ++i) {
    x[i] = float(i);
    y[i] = 1.0f;
  }
  void *dx, *dy;
  ASSERT_TRUE(api->malloc(&dx, 4000).isOk());
  ASSERT_TRUE(api->malloc(&dy, 4000).isOk());
  api->memcpyAsync(dx, x.data(), 4000, CopyKind::HostToDevice, stream);
  api->memcpyAsync(dy, y.data(), 4000, CopyKind::HostToDevice, stream);
  void *params[] = {&dx, &dy};
  ASSERT_TRUE(api->launchKernel(fn, {4, 1, 1}, {256, 1, 1}, 0, stream, params, 2)
                  .isOk());
  api->memcpyAsync(y.data(), dy, 4000, CopyKind::DeviceToHost, stream);
  ASSERT_TRUE(api->streamSynchronize(stream).isOk());
  for (int i = 0; i < 1000; ++i)
    ASSERT_EQ(y[i], 2.0f * i + 1.0f) << i;
  api->free(dx);
  api->free(dy);
  api->moduleUnload(module);
}

TEST_F(CudaGpuTest, PreparedPackageStepsWithFallingLoss) {
  const char *path = std::getenv("KILN_CUDA_TEST_PACKAGE");
  if (!path)
    GTEST_SKIP() << "set KILN_CUDA_TEST_PACKAGE to a CUDA package "
                    "(bench/gpu/prepare.sh writes mlp.kpkg)";
  StatusOr<LoadedPackage> pkg = loadPackage(path);
  ASSERT_TRUE(pkg.isOk()) << pkg.status().message();
  StatusOr<std::unique_ptr<CudaExecutable>> exec =
      CudaExecutable::create(std::move(pkg.value()), *api);
  ASSERT_TRUE(exec.isOk()) << exec.status().message();
  CudaExecutable &e = *exec.value();
  ASSERT_TRUE(e.initialize().isOk());
  int loss = -1;
  for (size_t i = 0; i < e.numOutputs(); ++i)
    if (e.package().outputs[i].role == PkgRole::Loss)
      loss = static_cast<int>(i);
  ASSERT_GE(loss, 0);
  ASSERT_EQ(e.package().outputs[loss].dtype, PkgDType::F32);
  // One fixed batch, so the loss must fall as the step overfits it.
  std::mt19937 rng(0);
  for (size_t i = 0; i < e.numInputs(); ++i) {
    const SignatureEntry &in = e.package().inputs[i];
    if (in.role != PkgRole::Input && in.role != PkgRole::Label)
      continue;
    std::vector<uint8_t> data(e.package().buffers[in.buffer].size);
    int64_t n = data.size() / pkgBytesPerElement(in.dtype);
    for (int64_t j = 0; j < n; ++j) {
      if (in.dtype == PkgDType::I32)
        reinterpret_cast<int32_t *>(data.data())[j] = rng() % 10;
      else if (in.dtype == PkgDType::F32)
        reinterpret_cast<float *>(data.data())[j] = float(rng() % 1000) / 1000;
    }
    ASSERT_TRUE(e.writeInput(i, data.data()).isOk());
  }
  float first = 0, last = 0;
  for (int step = 0; step < 30; ++step) {
    Status s = e.run();
    ASSERT_TRUE(s.isOk()) << s.message();
    float value = 0;
    ASSERT_TRUE(e.readOutput(loss, &value).isOk());
    ASSERT_TRUE(std::isfinite(value)) << "step " << step;
    (step == 0 ? first : last) = value;
  }
  EXPECT_LT(last, first);
  std::printf("note: loss %g -> %g over 30 steps, graphs %s\n", first, last,
              e.usingGraph() ? "on" : e.graphFallbackReason().c_str());
}

// |path|'s bytes (empty when unreadable).
std::vector<uint8_t> readFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

double nativeAt(const std::vector<uint8_t> &b, size_t offset, PkgDType dtype,
                int64_t i) {
  const uint8_t *p = b.data() + offset + i * pkgBytesPerElement(dtype);
  switch (dtype) {
  case PkgDType::F32: { float v; std::memcpy(&v, p, 4); return v; }
  case PkgDType::F64: { double v; std::memcpy(&v, p, 8); return v; }
  case PkgDType::F16: { uint16_t h; std::memcpy(&h, p, 2); return f16ToFloat(h); }
  case PkgDType::BF16: { uint16_t h; std::memcpy(&h, p, 2); return bf16ToFloat(h); }
  case PkgDType::I32: { int32_t v; std::memcpy(&v, p, 4); return v; }
  case PkgDType::I64: { int64_t v; std::memcpy(&v, p, 8); return double(v); }
  case PkgDType::I8: return double(int8_t(*p));
  case PkgDType::I1: return *p != 0;
  }
  return 0;
}

TEST_F(CudaGpuTest, GoldenStepsMatchTheInterpreter) {
  const char *dir = std::getenv("KILN_CUDA_GOLDEN_DIR");
  if (!dir)
    GTEST_SKIP() << "set KILN_CUDA_GOLDEN_DIR (bench/gpu/prepare.sh writes it)";
  std::vector<std::string> names;
  if (DIR *d = opendir(dir)) {
    while (dirent *e = readdir(d)) {
      std::string n = e->d_name;
      if (n.size() > 5 && n.compare(n.size() - 5, 5, ".kpkg") == 0)
        names.push_back(n.substr(0, n.size() - 5));
    }
    closedir(d);
  }
  ASSERT_FALSE(names.empty()) << dir << ": expected NAME.kpkg files";
  for (const std::string &name : names) {
    std::string base = std::string(dir) + "/" + name;
    StatusOr<LoadedPackage> pkg = loadPackage(base + ".kpkg");
    ASSERT_TRUE(pkg.isOk()) << pkg.status().message();
    StatusOr<std::unique_ptr<CudaExecutable>> made =
        CudaExecutable::create(pkg.value(), *api);
    ASSERT_TRUE(made.isOk()) << name << ": " << made.status().message();
    CudaExecutable &e = *made.value();
    std::vector<uint8_t> inputs = readFile(base + ".inputs");
    std::vector<uint8_t> expected = readFile(base + ".expected");
    size_t offset = 0;
    for (size_t i = 0; i < e.numInputs(); ++i) {
      size_t bytes = e.package().buffers[e.package().inputs[i].buffer].size;
      ASSERT_LE(offset + bytes, inputs.size()) << name << ": short .inputs";
      ASSERT_TRUE(e.writeInput(i, inputs.data() + offset).isOk());
      offset += bytes;
    }
    Status s = e.run();
    ASSERT_TRUE(s.isOk()) << name << ": " << s.message();
    offset = 0;
    int checked = 0;
    for (size_t i = 0; i < e.numOutputs(); ++i) {
      const SignatureEntry &out = e.package().outputs[i];
      size_t bytes = e.package().buffers[out.buffer].size;
      ASSERT_LE(offset + bytes, expected.size()) << name << ": short .expected";
      std::vector<uint8_t> got(bytes);
      ASSERT_TRUE(e.readOutput(i, got.data()).isOk());
      double rel = out.dtype == PkgDType::F32 ? 1e-3 : 5e-2;
      int64_t n = int64_t(bytes / pkgBytesPerElement(out.dtype));
      int bad = 0;
      for (int64_t j = 0; j < n && bad < 3; ++j) {
        double want = nativeAt(expected, offset, out.dtype, j);
        double have = nativeAt(got, 0, out.dtype, j);
        if (!(std::fabs(want - have) <=
              rel * std::max({1.0, std::fabs(want), std::fabs(have)}))) {
          ADD_FAILURE() << name << " output '" << out.name << "' element " << j
                        << ": interpreter " << want << ", GPU " << have;
          ++bad;
        }
      }
      offset += bytes;
      ++checked;
    }
    std::printf("note: golden %s: %d outputs, %zu kernels (%s)\n", name.c_str(),
                checked, e.kernelCode().size(),
                e.kernelCode().empty() ? "-" : kernelCodeName(e.kernelCode()[0]));
  }
}

// The three convolutions through CudaExecutable (CudaConv.h: NVRTC-compiled
// im2col / col2im kernels and batched cuBLASLt GEMMs) on random data,
// against their definitions on the host in double precision: LeNet-5's
// shapes and a strided, padded, dilated, grouped one, f32 and bf16. The
// bound per element is relative to sum |a| |b| over its terms (1e-4: f32
// sums of up to 6272 terms, TF32 off), plus one bf16 ulp of the result for
// bf16; an indexing error is of the order of that sum.
TEST_F(CudaGpuTest, ConvolutionsMatchTheirDefinition) {
  using namespace kiln::runtime::cuda::testing;
  std::vector<ConvParams> shapes = {
      convParams({8, 1, 28, 28}, {6, 1, 5, 5}, {1, 1}, {2, 2, 2, 2}, {1, 1}, 1),
      convParams({8, 6, 14, 14}, {16, 6, 5, 5}, {1, 1}, {0, 0, 0, 0}, {1, 1}, 1),
      convParams({3, 4, 12, 11}, {6, 2, 3, 2}, {2, 1}, {1, 0, 2, 1}, {2, 1}, 2)};
  unsigned seed = 1;
  for (PkgDType dtype : {PkgDType::F32, PkgDType::BF16, PkgDType::F16})
    for (const ConvParams &p : shapes)
      for (LibraryKind kind : {LibraryKind::Conv2D, LibraryKind::Conv2DInputGrad,
                               LibraryKind::Conv2DFilterGrad}) {
        SCOPED_TRACE(std::string(pkgDTypeName(dtype)) + " kind " +
                     std::to_string(int(kind)) + " input channels " +
                     std::to_string(p.inputShape[1]));
        std::vector<std::vector<int64_t>> s = convShapes(kind, p);
        std::vector<uint8_t> a = randomBuffer(dtype, numel(s[0]), seed++);
        std::vector<uint8_t> b = randomBuffer(dtype, numel(s[1]), seed++);
        std::vector<double> av(numel(s[0])), bv(numel(s[1]));
        for (size_t i = 0; i < av.size(); ++i)
          av[i] = valueAt(dtype, a, i);
        for (size_t i = 0; i < bv.size(); ++i)
          bv[i] = valueAt(dtype, b, i);
        std::vector<double> want = hostConv(kind, p, av, bv);
        for (double &v : av)
          v = std::fabs(v);
        for (double &v : bv)
          v = std::fabs(v);
        std::vector<double> scale = hostConv(kind, p, av, bv);
        StatusOr<std::unique_ptr<CudaExecutable>> made =
            CudaExecutable::create(convPackage(kind, p, dtype), *api);
        ASSERT_TRUE(made.isOk()) << made.status().message();
        CudaExecutable &e = *made.value();
        ASSERT_TRUE(e.writeInput(0, a.data()).isOk());
        ASSERT_TRUE(e.writeInput(1, b.data()).isOk());
        Status run = e.run();
        ASSERT_TRUE(run.isOk()) << run.message();
        std::vector<uint8_t> got(e.package().buffers[2].size);
        ASSERT_TRUE(e.readOutput(0, got.data()).isOk());
        double rel = dtype == PkgDType::BF16  ? 0x1p-7
                     : dtype == PkgDType::F16 ? 0x1p-10
                                              : 0;
        int bad = 0;
        for (size_t i = 0; i < want.size() && bad < 5; ++i) {
          double have = valueAt(dtype, got, i);
          double bound = 1e-4 * scale[i] + rel * std::fabs(want[i]) + 1e-30;
          if (!(std::fabs(have - want[i]) <= bound)) {
            ADD_FAILURE() << "element " << i << ": host " << want[i]
                          << ", GPU " << have << " (bound " << bound << ")";
            ++bad;
          }
        }
      }
}

// The fused attention on the GPU (NVRTC for the device, tensor cores for
// bf16 and f16 at head dims 64, 128, 256 and multiples of 8 between, CUDA
// cores for f32 and head dim 24): an Attention then an AttentionGrad
// thunk, twice (the second step a graph replay, the same bits), against
// the definition in double precision, the backward from the step's own out
// and lse; GPT-2's head dim and a causal sequence of 256 included.
TEST_F(CudaGpuTest, AttentionMatchesItsDefinition) {
  using namespace kiln::runtime::cuda::testing;
  struct Case {
    PkgDType dtype;
    AttentionParams params;
    double bound;
  };
  std::vector<Case> cases = {
      {PkgDType::BF16, attentionParams(2, 3, 256, 256, 64, 64, true), 1.6e-2},
      {PkgDType::BF16, attentionParams(2, 2, 70, 33, 64, 64, false), 1.6e-2},
      {PkgDType::F16, attentionParams(2, 2, 33, 70, 64, 64, true), 2e-3},
      {PkgDType::BF16, attentionParams(1, 2, 100, 100, 128, 128, true), 1.6e-2},
      {PkgDType::F16, attentionParams(1, 2, 150, 150, 80, 128, false), 2e-3},
      {PkgDType::BF16, attentionParams(2, 2, 77, 77, 40, 40, true), 1.6e-2},
      {PkgDType::F16, attentionParams(1, 2, 90, 60, 120, 72, false), 2e-3},
      {PkgDType::BF16, attentionParams(1, 2, 130, 130, 256, 256, true), 1.6e-2},
      {PkgDType::F32, attentionParams(2, 2, 70, 33, 24, 24, true), 2e-6},
      {PkgDType::F32, attentionParams(2, 2, 65, 65, 64, 64, false), 2e-6},
      {PkgDType::F64, attentionParams(1, 2, 33, 70, 24, 24, true), 1e-12}};
  std::mt19937_64 gen(7);
  for (const Case &c : cases) {
    const AttentionParams &a = c.params;
    SCOPED_TRACE(std::string(pkgDTypeName(c.dtype)) + " Tq=" +
                 std::to_string(a.qLen) + " Tk=" + std::to_string(a.kvLen) +
                 " D=" + std::to_string(a.headDim) +
                 (a.causal ? " causal" : ""));
    StatusOr<std::unique_ptr<CudaExecutable>> made =
        CudaExecutable::create(attentionPackage(a, c.dtype), *api);
    ASSERT_TRUE(made.isOk()) << made.status().message();
    CudaExecutable &e = *made.value();
    const LoadedPackage &pkg = e.package();
    std::vector<std::vector<uint8_t>> in(4);
    for (int i = 0; i < 4; ++i) {
      in[i] = randomTyped(c.dtype, pkg.buffers[i].size / pkgBytesPerElement(c.dtype), gen);
      ASSERT_TRUE(e.writeInput(i, in[i].data()).isOk());
    }
    std::vector<std::vector<uint8_t>> got[2];
    for (int step = 0; step < 2; ++step) {
      Status run = e.run();
      ASSERT_TRUE(run.isOk()) << run.message();
      got[step].resize(5);
      for (int o = 0; o < 5; ++o) {
        got[step][o].resize(pkg.buffers[4 + o].size);
        ASSERT_TRUE(e.readOutput(o, got[step][o].data()).isOk());
      }
    }
    for (int o = 0; o < 5; ++o)
      EXPECT_EQ(got[0][o], got[1][o]) << "output " << o << " differs between steps";
    PkgDType lseType = c.dtype == PkgDType::F64 ? PkgDType::F64 : PkgDType::F32;
    std::vector<double> out = typedValues(c.dtype, got[0][0]),
                        lse = typedValues(lseType, got[0][1]);
    AttentionReference want = attentionReference(
        a, typedValues(c.dtype, in[0]), typedValues(c.dtype, in[1]),
        typedValues(c.dtype, in[2]), typedValues(c.dtype, in[3]), &out, &lse);
    double errLse = 0;
    for (size_t i = 0; i < want.lse.size(); ++i)
      errLse = std::max(errLse, std::fabs(lse[i] - want.lse[i]) / (1 + std::fabs(want.lse[i])));
    double errs[4] = {relativeError(out, want.out),
                      relativeError(typedValues(c.dtype, got[0][2]), want.dq),
                      relativeError(typedValues(c.dtype, got[0][3]), want.dk),
                      relativeError(typedValues(c.dtype, got[0][4]), want.dv)};
    std::printf("attention %s Tq=%lld Tk=%lld D=%lld%s: out %.2e lse %.2e dq %.2e "
                "dk %.2e dv %.2e\n",
                pkgDTypeName(c.dtype), (long long)a.qLen, (long long)a.kvLen,
                (long long)a.headDim, a.causal ? " causal" : "", errs[0], errLse,
                errs[1], errs[2], errs[3]);
    EXPECT_LE(errLse, c.dtype == PkgDType::F64 ? 1e-12 : 1e-5);
    const char *names[4] = {"out", "dq", "dk", "dv"};
    for (int i = 0; i < 4; ++i)
      EXPECT_LE(errs[i], c.bound) << names[i];
  }
}

// The packed layout on the GPU (qkv [B,T,3,H,D], out and dout [B,T,H,D],
// dqkv): each step twice (the second a graph replay, the same bits), its
// results rearranged to [B,H,T,D] against the definition on the rearranged
// inputs, and bit for bit against the BHTD package's step on them (the
// same kernels, tiles and order).
TEST_F(CudaGpuTest, PackedAttentionMatchesBhtdAndItsDefinition) {
  using namespace kiln::runtime::cuda::testing;
  struct Case {
    PkgDType dtype;
    AttentionParams params;
    double bound;
  };
  std::vector<Case> cases = {
      {PkgDType::BF16, attentionParams(2, 3, 256, 256, 64, 64, true), 1.6e-2},
      {PkgDType::F16, attentionParams(2, 2, 70, 70, 64, 64, false), 2e-3},
      {PkgDType::F32, attentionParams(2, 3, 65, 65, 20, 20, true), 2e-6}};
  std::mt19937_64 gen(11);
  // Two steps of |pkg| on |in|; the first step's outputs.
  auto steps = [&](const LoadedPackage &pkg,
                   const std::vector<std::vector<uint8_t>> &in,
                   std::vector<std::vector<uint8_t>> &out) {
    StatusOr<std::unique_ptr<CudaExecutable>> made =
        CudaExecutable::create(pkg, *api);
    ASSERT_TRUE(made.isOk()) << made.status().message();
    CudaExecutable &e = *made.value();
    for (size_t i = 0; i < in.size(); ++i)
      ASSERT_TRUE(e.writeInput(i, in[i].data()).isOk());
    std::vector<std::vector<uint8_t>> got[2];
    for (int step = 0; step < 2; ++step) {
      Status run = e.run();
      ASSERT_TRUE(run.isOk()) << run.message();
      for (const SignatureEntry &o : pkg.outputs) {
        got[step].emplace_back(pkg.buffers[o.buffer].size);
        ASSERT_TRUE(e.readOutput(got[step].size() - 1, got[step].back().data()).isOk());
      }
    }
    for (size_t o = 0; o < got[0].size(); ++o)
      EXPECT_EQ(got[0][o], got[1][o]) << "output " << o << " differs between steps";
    out = got[0];
  };
  for (const Case &c : cases) {
    const AttentionParams &a = c.params;
    SCOPED_TRACE(std::string("packed ") + pkgDTypeName(c.dtype) + " T=" +
                 std::to_string(a.qLen) + " D=" + std::to_string(a.headDim) +
                 (a.causal ? " causal" : ""));
    LoadedPackage packed = packedAttentionPackage(a, c.dtype);
    std::vector<std::vector<uint8_t>> in(2), got, bhtd;
    for (int i = 0; i < 2; ++i)
      in[i] = randomTyped(c.dtype, packed.buffers[i].size / pkgBytesPerElement(c.dtype), gen);
    ASSERT_NO_FATAL_FAILURE(steps(packed, in, got));
    ASSERT_EQ(got.size(), 3u);
    std::vector<std::vector<uint8_t>> heads = {
        unpackQkv(a, c.dtype, in[0], 0), unpackQkv(a, c.dtype, in[0], 1),
        unpackQkv(a, c.dtype, in[0], 2), unpackRows(a, c.dtype, in[1])};
    std::vector<std::vector<uint8_t>> mine = {
        unpackRows(a, c.dtype, got[0]), got[1], unpackQkv(a, c.dtype, got[2], 0),
        unpackQkv(a, c.dtype, got[2], 1), unpackQkv(a, c.dtype, got[2], 2)};
    ASSERT_NO_FATAL_FAILURE(steps(attentionPackage(a, c.dtype), heads, bhtd));
    ASSERT_EQ(bhtd.size(), 5u);
    const char *names[5] = {"out", "lse", "dq", "dk", "dv"};
    for (int o = 0; o < 5; ++o)
      EXPECT_TRUE(mine[o] == bhtd[o]) << names[o] << " differs from the BHTD step's";
    std::vector<double> out = typedValues(c.dtype, mine[0]),
                        lse = typedValues(PkgDType::F32, mine[1]);
    AttentionReference want = attentionReference(
        a, typedValues(c.dtype, heads[0]), typedValues(c.dtype, heads[1]),
        typedValues(c.dtype, heads[2]), typedValues(c.dtype, heads[3]), &out, &lse);
    double errLse = 0;
    for (size_t i = 0; i < want.lse.size(); ++i)
      errLse = std::max(errLse, std::fabs(lse[i] - want.lse[i]) / (1 + std::fabs(want.lse[i])));
    double errs[4] = {relativeError(out, want.out),
                      relativeError(typedValues(c.dtype, mine[2]), want.dq),
                      relativeError(typedValues(c.dtype, mine[3]), want.dk),
                      relativeError(typedValues(c.dtype, mine[4]), want.dv)};
    std::printf("packed attention %s T=%lld D=%lld%s: out %.2e lse %.2e dq %.2e "
                "dk %.2e dv %.2e\n",
                pkgDTypeName(c.dtype), (long long)a.qLen, (long long)a.headDim,
                a.causal ? " causal" : "", errs[0], errLse, errs[1], errs[2],
                errs[3]);
    EXPECT_LE(errLse, 1e-5);
    const char *errNames[4] = {"out", "dq", "dk", "dv"};
    for (int i = 0; i < 4; ++i)
      EXPECT_LE(errs[i], c.bound) << errNames[i];
  }
}

// dQ from the dS tiles dK/dV stores ("ds", KILN_CUDA_ATTENTION=stored)
// against dQ computing S and dP again (the first variant, nothing tuned):
// the same bits, as on the emulated device, if mma.sync sums an element's
// products the same way whichever operand is A (dK/dV's S^T = K Q^T is
// dQ's S = Q K^T transposed). A difference here is that assumption
// failing, not a wrong result: AttentionMatchesItsDefinition checks the
// variant against the definition with =stored.
TEST_F(CudaGpuTest, AttentionDqFromStoredScoresGivesTheSameBits) {
  using namespace kiln::runtime::cuda::testing;
  std::mt19937_64 gen(13);
  for (auto [dtype, a] :
       {std::pair<PkgDType, AttentionParams>{PkgDType::BF16,
                                             attentionParams(2, 3, 256, 256, 64, 64, true)},
        {PkgDType::F16, attentionParams(1, 2, 150, 100, 64, 64, false)}}) {
    SCOPED_TRACE(std::string(pkgDTypeName(dtype)) + " Tq=" + std::to_string(a.qLen) +
                 (a.causal ? " causal" : ""));
    LoadedPackage pkg = attentionPackage(a, dtype);
    std::vector<std::vector<uint8_t>> in(4);
    for (int i = 0; i < 4; ++i)
      in[i] = randomTyped(dtype, pkg.buffers[i].size / pkgBytesPerElement(dtype), gen);
    std::vector<std::vector<uint8_t>> got[2];
    for (int stored = 0; stored < 2; ++stored) {
      ScopedEnv env("KILN_CUDA_ATTENTION", stored ? "stored" : "mma");
      CudaOptions options;
      options.autotune = false;
      StatusOr<std::unique_ptr<CudaExecutable>> made =
          CudaExecutable::create(pkg, *api, options);
      ASSERT_TRUE(made.isOk()) << made.status().message();
      CudaExecutable &e = *made.value();
      for (int i = 0; i < 4; ++i)
        ASSERT_TRUE(e.writeInput(i, in[i].data()).isOk());
      Status run = e.run();
      ASSERT_TRUE(run.isOk()) << run.message();
      got[stored].resize(5);
      for (int o = 0; o < 5; ++o) {
        got[stored][o].resize(e.package().buffers[4 + o].size);
        ASSERT_TRUE(e.readOutput(o, got[stored][o].data()).isOk());
      }
    }
    const char *names[5] = {"out", "lse", "dq", "dk", "dv"};
    for (int o = 0; o < 5; ++o)
      EXPECT_TRUE(got[0][o] == got[1][o]) << names[o] << " differs with dQ from stored dS";
  }
}

} // namespace
