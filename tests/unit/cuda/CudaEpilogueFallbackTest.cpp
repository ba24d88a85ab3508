//===- CudaEpilogueFallbackTest.cpp - GEMM epilogues cuBLASLt refuses ------===//
//
// When cuBLASLt's heuristic has no algorithm for a GEMM thunk's epilogue on
// the device, CudaExecutable plans the plain GEMM and runs the epilogue as
// runtime/cuda/CudaEpilogue.h's kernels right after it. Checked without a
// GPU on FakeCudaApi.h, whose refusedEpilogues makes gemmPlan answer "not
// supported", with the epilogue kernels built for the host under
// codegen/cuda/CudaEmulation.h:
//
//   - each kernel (bias, ReLU, GELU and their bias forms; the bias gradient
//     with and without a transposed rhs, several chunks, grid-stride
//     blocks) against its definition computed in double, f32, bf16, fp16;
//   - whole MLP and small GPT training steps (f32 and bf16, compiled as
//     CudaStepEmulationTest compiles them, bias gradients on) with every
//     epilogue refused, or only the bias gradient, run two steps (the
//     second as a replayed CUDA Graph) and match the reference interpreter
//     within CudaStepEmulationTest's bounds; one note names the thunks;
//   - a gemmPlan failure that is not "unsupported" still fails create,
//     naming the thunk;
//   - with the toolkit, the kernels compile through NVRTC and ptxas for
//     sm_90 without spills, and through the runtime's real table.
//
//===----------------------------------------------------------------------===//

#include "codegen/cuda/CudaEmitter.h"
#include "tests/unit/cuda/FakeCudaApi.h"

#include "ir/Interpreter.h"
#include "passes/Pipelines.h"
#include "runtime/Half.h"
#include "runtime/cuda/CudaConv.h"
#include "runtime/cuda/CudaEpilogue.h"
#include "runtime/cuda/CudaExecutable.h"
#include "tools/kiln/lib/ModuleLoader.h"
#include "tools/kiln/lib/PackageBuilder.h"
#include "tools/kiln/lib/ReferenceStep.h"
#include "tools/kiln/lib/Zoo.h"

#if KILN_HAVE_NVRTC
#include "codegen/cuda/Nvrtc.h"
#endif

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <dlfcn.h>

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
using ::testing::HasSubstr;

// Builds |source| for the host under the emulation header and returns its
// NAME_host functions for |entries| (empty |error| on success).
std::map<std::string, HostKernel> buildForHost(const std::string &source,
                                               const std::vector<std::string> &entries,
                                               const std::string &what,
                                               std::string &error) {
  std::map<std::string, HostKernel> kernels;
  llvm::SmallString<128> dir;
  if (llvm::sys::fs::createUniqueDirectory("kiln-cuda-epilogue", dir)) {
    error = "cannot create a temporary directory";
    return kernels;
  }
  std::string cu = (dir + "/" + what + ".cpp").str(),
              so = (dir + "/" + what + ".so").str(),
              log = (dir + "/clang.log").str();
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(cu, ec);
    if (ec) {
      error = ec.message();
      return kernels;
    }
    os << source;
  }
  std::vector<llvm::StringRef> argv = {
      KILN_HOST_CXX, "-std=c++20", "-O1", "-w", "-shared", "-fPIC",
      "-DKILN_CUDA_EMULATION", "-include", KILN_CUDA_EMULATION_HEADER,
      "-x", "c++", cu, "-o", so, "-lpthread"};
  std::optional<llvm::StringRef> redirects[] = {std::nullopt, llvm::StringRef(log),
                                                llvm::StringRef(log)};
  if (llvm::sys::ExecuteAndWait(KILN_HOST_CXX, argv, std::nullopt, redirects) != 0) {
    error = "host build of " + what + " failed; see " + log;
    return kernels;
  }
  void *library = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!library) {
    error = dlerror();
    return kernels;
  }
  for (const std::string &entry : entries) {
    void *fn = dlsym(library, (entry + "_host").c_str());
    if (!fn) {
      error = "no " + entry + "_host in the host build of " + what;
      return kernels;
    }
    kernels[entry] = reinterpret_cast<HostKernel>(fn);
  }
  return kernels;
}

// The epilogue kernels for the host, built once per process.
const std::map<std::string, HostKernel> &hostEpilogueKernels(std::string &error) {
  static std::string failure;
  static const std::map<std::string, HostKernel> kernels =
      buildForHost(rt::cuda::epilogueKernelSource(),
                   rt::cuda::epilogueKernelEntryPoints(), "epilogue", failure);
  error = failure;
  return kernels;
}

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
      size_t width = rt::pkgBytesPerElement(dtype);
      std::vector<uint8_t> out(m * n * width), bias(n * width);
      std::mt19937 rng(7);
      std::uniform_real_distribution<float> dist(-3, 3);
      for (int64_t i = 0; i < m * n; ++i)
        storeAs(dtype, out, i, dist(rng));
      for (int64_t j = 0; j < n; ++j)
        storeAs(dtype, bias, j, dist(rng));
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
          v = 0.5 * v *
              (1 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
        double have = loadAs(dtype, got, i);
        // One rounding to the type, plus f32 arithmetic (a few ulps of f32).
        double bound = unitRoundoff(dtype) * std::fabs(v) + 1e-6 * (std::fabs(v) + 1);
        if (!(std::fabs(have - v) <= bound) && bad++ < 3)
          ADD_FAILURE() << "element " << i << ": " << have << ", expected " << v;
      }
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
        size_t width = rt::pkgBytesPerElement(dtype);
        std::vector<uint8_t> rhs(k * n * width), grad(n * width, 0);
        std::mt19937 rng(11 + k);
        std::uniform_real_distribution<float> dist(-1, 1);
        for (int64_t i = 0; i < k * n; ++i)
          storeAs(dtype, rhs, i, dist(rng));
        void *dRhs = deviceCopy(api, rhs), *dGrad = deviceCopy(api, grad);
        rt::GemmParams p;
        p.m = 5, p.n = n, p.k = k;
        p.transposeRhs = transposed;
        uint64_t ws =
            rt::cuda::epilogueWorkspaceBytes(GemmEpilogue::BiasGradient, p);
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
  EXPECT_FALSE(made.value()->run(3, nullptr).isOk());
}

// NVRTC and ptxas for sm_90: every kernel, its registers, no spills.
TEST(CudaEpilogueKernelTest, KernelsCompileForSm90WithoutSpills) {
#if KILN_HAVE_NVRTC
  setenv("KILN_CACHE_DIR", "off", 1); // ptxas's report, not a cached one
  kiln::NvrtcResult result;
  std::string error;
  ASSERT_TRUE(kiln::compileCudaSource(rt::cuda::epilogueKernelSource(),
                                      "kiln_epilogue", {90}, result, error))
      << error;
  ASSERT_EQ(result.cubins.size(), 1u);
  const kiln::CubinResult &cubin = result.cubins[0];
  ASSERT_GE(cubin.image.size(), 4u);
  EXPECT_EQ(std::memcmp(cubin.image.data(), "\x7f" "ELF", 4), 0);
  const std::string &log = cubin.log;
  for (const std::string &entry : rt::cuda::epilogueKernelEntryPoints()) {
    size_t at = log.find("Compiling entry function '" + entry + "'");
    ASSERT_NE(at, std::string::npos) << entry << " missing from ptxas's log:\n"
                                     << log;
    size_t spill = log.find("bytes spill stores", at);
    size_t used = log.find("Used ", at);
    ASSERT_NE(spill, std::string::npos) << log;
    ASSERT_NE(used, std::string::npos) << log;
    int spillBytes = std::atoi(log.c_str() + log.rfind(',', spill) + 1);
    int registers = std::atoi(log.c_str() + used + 5);
    std::printf("%-34s sm_90: %3d registers, %d bytes spill stores\n",
                entry.c_str(), registers, spillBytes);
    ::testing::Test::RecordProperty(entry + "_registers", registers);
    EXPECT_EQ(spillBytes, 0) << entry;
    EXPECT_GT(registers, 0) << entry;
    EXPECT_LE(registers, 255) << entry;
  }
#else
  GTEST_SKIP() << "built without the CUDA toolkit (no NVRTC)";
#endif
}

// The runtime's own path: the real table's NVRTC (no driver needed).
TEST(CudaEpilogueKernelTest, TheRealTableCompilesTheKernels) {
  rt::StatusOr<std::unique_ptr<rt::cuda::CudaApi>> api =
      rt::cuda::loadCudaApi(/*requireDriver=*/false);
  if (!api.isOk())
    GTEST_SKIP() << "no CUDA table: " << api.status().message();
  std::vector<uint8_t> cubin;
  std::string log;
  rt::Status s = api.value()->nvrtcCompile(rt::cuda::epilogueKernelSource(),
                                           "kiln_epilogue", 90, cubin, log);
  if (!s.isOk() && s.message().find("NVRTC is not available") != std::string::npos)
    GTEST_SKIP() << s.message();
  ASSERT_TRUE(s.isOk()) << s.message();
  ASSERT_GE(cubin.size(), 4u);
  EXPECT_EQ(std::memcmp(cubin.data(), "\x7f" "ELF", 4), 0);
}

std::vector<uint8_t> toNative(const HostTensor &t) {
  int64_t width = byteWidth(t.dtype());
  std::vector<uint8_t> out(t.size() * width);
  for (int64_t i = 0; i < t.size(); ++i) {
    uint8_t *p = out.data() + i * width;
    double v = t[i];
    switch (t.dtype()) {
    case DType::f64: std::memcpy(p, &v, 8); break;
    case DType::f32: { float f = v; std::memcpy(p, &f, 4); break; }
    case DType::f16: { uint16_t h = rt::floatToF16(v); std::memcpy(p, &h, 2); break; }
    case DType::bf16: { uint16_t h = rt::floatToBf16(v); std::memcpy(p, &h, 2); break; }
    case DType::i64: { int64_t x = v; std::memcpy(p, &x, 8); break; }
    case DType::i32: { int32_t x = v; std::memcpy(p, &x, 4); break; }
    case DType::i8: { int8_t x = v; std::memcpy(p, &x, 1); break; }
    case DType::i1: *p = v != 0; break;
    }
  }
  return out;
}

double nativeAt(const std::vector<uint8_t> &b, DType dtype, int64_t i) {
  const uint8_t *p = b.data() + i * byteWidth(dtype);
  switch (dtype) {
  case DType::f64: { double v; std::memcpy(&v, p, 8); return v; }
  case DType::f32: { float v; std::memcpy(&v, p, 4); return v; }
  case DType::f16: { uint16_t h; std::memcpy(&h, p, 2); return rt::f16ToFloat(h); }
  case DType::bf16: { uint16_t h; std::memcpy(&h, p, 2); return rt::bf16ToFloat(h); }
  case DType::i64: { int64_t v; std::memcpy(&v, p, 8); return double(v); }
  case DType::i32: { int32_t v; std::memcpy(&v, p, 4); return v; }
  case DType::i8: { int8_t v; std::memcpy(&v, p, 1); return v; }
  case DType::i1: return *p != 0;
  }
  return 0;
}

const std::set<GemmEpilogue> kEveryEpilogue = {
    GemmEpilogue::Bias, GemmEpilogue::Relu, GemmEpilogue::BiasRelu,
    GemmEpilogue::Gelu, GemmEpilogue::BiasGelu, GemmEpilogue::BiasGradient};

class CudaEpilogueFallbackStepTest : public ::testing::Test {
protected:
  CudaEpilogueFallbackStepTest() {
    DialectRegistry registry;
    cli::registerKilnDialects(registry);
    context.appendDialectRegistry(registry);
    context.loadAllAvailableDialects();
    context.getDiagEngine().registerHandler([this](Diagnostic &d) {
      diagnostics += d.str() + "\n";
      return success();
    });
  }

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
    cli::PackageTargetHooks hooks;
    hooks.target.kind = rt::TargetKind::Cuda;
    hooks.target.smArchs = {90};
    int count = 0;
    hooks.compileKernel = [&](FusionOp fusion, const std::string &name,
                              rt::PackageKernel &kernel, std::string &error) {
      std::string entry = "kiln_k" + std::to_string(count++);
      FailureOr<CudaKernelSource> source = emitCudaKernel(fusion, entry);
      if (failed(source)) {
        error = name + ": " + diagnostics;
        return false;
      }
      kernel.kind = rt::KernelKind::Cuda;
      kernel.entryPoint = entry;
      kernel.source = source->source;
      kernel.block = {source->launch.blockThreads, 1, 1};
      kernel.grid = {static_cast<uint32_t>(source->launch.maxBlocks), 1, 1};
      sources += source->source + "\n";
      return true;
    };
    std::string errors;
    llvm::raw_string_ostream errs(errors);
    ASSERT_TRUE(succeeded(cli::buildStepPackage(*model, "model", "", {}, "test",
                                                errs, pkg, &hooks)))
        << errs.str() << diagnostics;
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
    std::vector<std::string> entries;
    for (const rt::PackageKernel &k : pkg.kernels)
      entries.push_back(k.entryPoint);
    std::map<std::string, HostKernel> stepKernels =
        buildForHost(sources, entries, name, error);
    ASSERT_TRUE(error.empty()) << error;
    const auto &epilogueKernels = hostEpilogueKernels(error);
    ASSERT_TRUE(error.empty()) << error;

    FakeCudaApi api;
    api.device.multiprocessors = 2; // grids of at most 16 blocks
    api.hostKernels = stepKernels;
    api.hostKernels.insert(epilogueKernels.begin(), epilogueKernels.end());
    api.refusedEpilogues = refused;
    std::vector<std::string> notes;
    rt::cuda::CudaOptions cudaOptions;
    cudaOptions.log = [&](const std::string &n) { notes.push_back(n); };
    rt::StatusOr<std::unique_ptr<rt::cuda::CudaExecutable>> made =
        rt::cuda::CudaExecutable::create(pkg, api, cudaOptions);
    ASSERT_TRUE(made.isOk()) << made.status().message();
    rt::cuda::CudaExecutable &exec = *made.value();

    // Which thunks fall back: those whose epilogue was refused.
    std::vector<size_t> fallbacks;
    int epilogueLaunches = 0;
    for (size_t i = 0; i < pkg.thunks.size(); ++i) {
      const rt::PackageThunk &t = pkg.thunks[i];
      if (!t.hasGemm || t.gemm.epilogue == rt::PkgGemmEpilogue::None)
        continue;
      GemmEpilogue e = toEpilogue(t.gemm.epilogue);
      if (!refused.count(e))
        continue;
      fallbacks.push_back(i);
      epilogueLaunches += e == GemmEpilogue::BiasGradient ? 2 : 1;
      ++fallbackKinds[e];
    }
    ASSERT_FALSE(fallbacks.empty()) << "nothing to fall back in " << name;
    // One note for the executable, naming every thunk that fell back.
    ASSERT_EQ(notes.size(), 1u);
    EXPECT_THAT(notes[0], HasSubstr("cuBLASLt offers no algorithm"));
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
    // Every plan made has an epilogue cuBLASLt did not refuse.
    for (const rt::cuda::GemmDesc &d : api.plans)
      EXPECT_EQ(refused.count(d.epilogue), 0u) << rt::cuda::gemmEpilogueName(d.epilogue);

    std::vector<cli::ArgumentInfo> args = cli::describeArguments(func);
    std::vector<cli::ResultInfo> results = cli::describeResults(func);
    ASSERT_EQ(args.size(), pkg.inputs.size());
    std::mt19937_64 rng(5);
    std::vector<HostTensor> values;
    for (const cli::ArgumentInfo &a : args) {
      bool data = a.role == Role::input || a.role == Role::label;
      values.push_back(data ? cli::randomData(func, a, rng) : cli::initialValue(a));
      std::vector<uint8_t> native = toNative(values.back());
      ASSERT_EQ(native.size(), pkg.buffers[pkg.inputs[a.index].buffer].size);
      ASSERT_TRUE(exec.writeInput(a.index, native.data()).isOk());
    }
    Interpreter interpreter;
    double worst = 0;
    for (int step = 0; step < 2; ++step) {
      size_t launchesBefore = api.launches.size();
      FailureOr<SmallVector<HostTensor>> expected = interpreter.run(func, values);
      ASSERT_TRUE(succeeded(expected)) << diagnostics;
      rt::Status s = exec.run();
      ASSERT_TRUE(s.isOk()) << s.message();
      int ran = 0;
      for (size_t i = launchesBefore; i < api.launches.size(); ++i)
        ran += api.launches[i].entry.rfind("kiln_epilogue_", 0) == 0;
      // The second step is captured: its launches are recorded once.
      EXPECT_EQ(ran, epilogueLaunches) << "step " << step;
      for (const cli::ResultInfo &r : results) {
        const HostTensor &e = (*expected)[r.index];
        std::vector<uint8_t> got(pkg.buffers[pkg.outputs[r.index].buffer].size);
        ASSERT_TRUE(exec.readOutput(r.index, got.data()).isOk());
        double magnitude = 0;
        for (int64_t i = 0; i < e.size(); ++i)
          magnitude = std::max(magnitude, std::fabs(e[i]));
        double rel = relativeBound(amp);
        double allowance =
            r.role == Role::parameter ? 2 * kLearningRate * (step + 1) : 0;
        int bad = 0;
        for (int64_t i = 0; i < e.size(); ++i) {
          double want = e[i], have = nativeAt(got, e.dtype(), i);
          double err = std::max(std::fabs(want - have) - allowance, 0.0) /
                       std::max(magnitude, 1e-30);
          worst = std::max(worst, err == err ? err : HUGE_VAL);
          if (!(err <= rel) && bad++ < 3)
            ADD_FAILURE() << name << " step " << step << " output '" << r.name
                          << "' element " << i << ": interpreter " << want
                          << ", CudaExecutable " << have << " (magnitude "
                          << magnitude << ", bound " << rel << ")";
        }
      }
      for (const cli::ResultInfo &r : results)
        if (r.updates)
          values[*r.updates] = (*expected)[r.index];
    }
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
    }
    return GemmEpilogue::None;
  }

  // CudaStepEmulationTest's bounds (of the output's largest magnitude).
  static constexpr double kLearningRate = 1e-3;
  static double relativeBound(AmpMode amp) {
    switch (amp) {
    case AmpMode::off: return std::ldexp(1.0, -16);
    case AmpMode::bf16: return 4 * std::ldexp(1.0, -7);
    case AmpMode::fp16: return 4 * std::ldexp(1.0, -10);
    }
    return 0;
  }

  static cli::GptOptions smallGpt() {
    cli::GptOptions options;
    options.layers = 1;
    options.hidden = 40;
    options.heads = 2;
    options.seq = 6;
    options.vocab = 36;
    options.batch = 2;
    return options;
  }

  MLIRContext context;
  OwningOpRef<ModuleOp> module;
  std::string diagnostics;
  std::map<GemmEpilogue, int> fallbackKinds;
};

TEST_F(CudaEpilogueFallbackStepTest, MlpF32EveryEpilogueRefused) {
  cli::MlpOptions options;
  options.layers = {40, 24, 10};
  options.batch = 37;
  check(cli::buildMlp(&context, options), AmpMode::off, "mlp-f32",
        kEveryEpilogue);
  EXPECT_EQ(fallbackKinds[GemmEpilogue::BiasGradient], 2);
  EXPECT_EQ(fallbackKinds[GemmEpilogue::Bias], 1);
}

TEST_F(CudaEpilogueFallbackStepTest, MlpBF16EveryEpilogueRefused) {
  cli::MlpOptions options;
  options.layers = {40, 24, 10};
  options.batch = 16;
  check(cli::buildMlp(&context, options), AmpMode::bf16, "mlp-bf16",
        kEveryEpilogue);
  EXPECT_EQ(fallbackKinds[GemmEpilogue::BiasGradient], 2);
}

TEST_F(CudaEpilogueFallbackStepTest, GptF32EveryEpilogueRefused) {
  check(cli::buildGpt(&context, smallGpt()), AmpMode::off, "gpt-f32",
        kEveryEpilogue);
  EXPECT_GE(fallbackKinds[GemmEpilogue::BiasGradient], 4);
  EXPECT_GE(fallbackKinds[GemmEpilogue::Bias], 1);
}

TEST_F(CudaEpilogueFallbackStepTest, GptBF16EveryEpilogueRefused) {
  check(cli::buildGpt(&context, smallGpt()), AmpMode::bf16, "gpt-bf16",
        kEveryEpilogue);
  EXPECT_GE(fallbackKinds[GemmEpilogue::BiasGradient], 4);
  EXPECT_GE(fallbackKinds[GemmEpilogue::Bias], 1);
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
  cli::MlpOptions options;
  options.layers = {40, 24, 10};
  options.batch = 16;
  rt::LoadedPackage pkg;
  std::string sources;
  func::FuncOp func;
  compile(cli::buildMlp(&context, options), AmpMode::off, pkg, sources, func);
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
