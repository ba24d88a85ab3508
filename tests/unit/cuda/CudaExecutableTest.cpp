//===- CudaExecutableTest.cpp - the GPU runtime against a fake CUDA -------===//
//
// runtime/cuda/CudaExecutable.h driven through FakeCudaApi.h (host memory,
// recorded calls): the arena and its offsets, each thunk as the expected
// launch / cuBLASLt / copy call in order with the right pointers and
// launch shapes, the values a step computes (host kernels stand in for the
// CUDA ones; the GEMM against a direct triple loop), cubin / PTX / NVRTC
// selection by architecture, failures that name the call and the kernel,
// CUDA Graph capture after the warm-up step and its fallback, input
// staging (on the fake's stream order: no copy races a step, and each of
// the staging's synchronizations is needed), refusals (a convolution whose
// shapes disagree, collectives without a communicator), and the row-major
// to cuBLASLt column-major mapping of GEMMs checked against a column-major
// GEMM written from cuBLASLt's definition (the fake itself:
// FakeCudaApiTest.cpp). Links no LLVM or MLIR, so it runs on the GPU
// machine too.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudaExecutable.h"
#include "runtime/Initializers.h"
#include "tests/unit/cuda/FakeCudaApi.h"
#include "tests/unit/cuda/FakeNvtxLog.h"
#include "tests/unit/cuda/PkgBuffers.h"
#include "tests/unit/cuda/ScopedEnv.h"
#include "tests/unit/package/PackageMutants.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <thread>

namespace {

using namespace kiln::runtime;
using namespace kiln::runtime::cuda;
using kiln::runtime::cuda::testing::f32Buffer;
using kiln::runtime::cuda::testing::gemmThunk;
using kiln::runtime::cuda::testing::ScopedEnv;
using kiln::runtime::cuda::testing::signatureEntry;
using kiln::runtime::cuda::testing::FakeCudaApi;
using kiln::runtime::cuda::testing::randomFloats;

constexpr int M = 4, K = 8, N = 16;

PackageKernel kernel(const char *name, const char *entry, uint32_t grid,
                     std::vector<unsigned> archs, unsigned ptxArch) {
  PackageKernel k;
  k.kind = KernelKind::Cuda;
  k.name = name;
  k.entryPoint = entry;
  k.source = std::string("// CUDA source of ") + entry;
  if (ptxArch)
    k.ptx = ".version 8.0\n.target sm_" + std::to_string(ptxArch) +
            "\n// PTX of " + entry;
  for (unsigned a : archs) {
    Cubin c;
    c.arch = a;
    std::string image = "CUBIN sm_" + std::to_string(a) + " " + entry;
    c.image.assign(image.begin(), image.end());
    c.image.push_back(0);
    k.cubins.push_back(c);
  }
  k.block = {256, 1, 1};
  k.grid = {grid, 1, 1};
  return k;
}

// y = relu(x . w); w_new = w * 0.5 (updates w); y_copy = y.
LoadedPackage mlpPackage(std::vector<unsigned> archs = {80, 90},
                         unsigned ptxArch = 80) {
  LoadedPackage p;
  p.target.kind = TargetKind::Cuda;
  p.target.smArchs = archs;
  p.buffers = {f32Buffer("x", PkgRole::Input, {M, K}, 0),
               f32Buffer("w", PkgRole::Parameter, {K, N}, 128),
               f32Buffer("dot", PkgRole::None, {M, N}, 640),
               f32Buffer("y", PkgRole::Output, {M, N}, 896),
               f32Buffer("w_new", PkgRole::Output, {K, N}, 1152, 1),
               f32Buffer("y_copy", PkgRole::Output, {M, N}, 1664)};
  p.arenaSize = 1920;
  p.kernels = {kernel("relu", "kiln_relu", 5000, archs, ptxArch),
               kernel("sgd", "kiln_sgd", 3, archs, ptxArch)};
  PackageThunk gemm = gemmThunk(M, N, K, 0, 1, 2);
  PackageThunk relu;
  relu.kernel = 0;
  relu.operands = {2};
  relu.results = {3};
  PackageThunk sgd;
  sgd.kernel = 1;
  sgd.operands = {1};
  sgd.results = {4};
  PackageThunk copy;
  copy.kind = ThunkKind::Copy;
  copy.operands = {3};
  copy.results = {5};
  p.thunks = {gemm, relu, sgd, copy};
  ParameterInit init;
  init.buffer = 1;
  init.kind = PkgInitKind::Normal;
  init.scale = 1.0;
  init.seed = 7;
  p.parameterInits = {init};
  auto entry = [&](const char *name, PkgRole role, uint32_t id) {
    return signatureEntry(p, name, role, id);
  };
  p.inputs = {entry("x", PkgRole::Input, 0), entry("w", PkgRole::Parameter, 1)};
  p.outputs = {entry("y", PkgRole::Output, 3), entry("w_new", PkgRole::Output, 4),
               entry("y_copy", PkgRole::Output, 5)};
  return p;
}

// The host stand-ins for the package's kernels (the emulation's ABI).
void reluHost(void **b, unsigned, unsigned) {
  for (int i = 0; i < M * N; ++i) {
    float v = static_cast<float *>(b[0])[i];
    static_cast<float *>(b[1])[i] = v > 0 ? v : 0;
  }
}
void sgdHost(void **b, unsigned, unsigned) {
  for (int i = 0; i < K * N; ++i)
    static_cast<float *>(b[1])[i] = static_cast<float *>(b[0])[i] * 0.5f;
}

class CudaExecutableTest : public ::testing::Test {
protected:
  FakeCudaApi api;
  std::vector<std::string> notes;
  CudaOptions options;

  void SetUp() override {
    api.hostKernels["kiln_relu"] = reluHost;
    api.hostKernels["kiln_sgd"] = sgdHost;
    options.log = [this](const std::string &n) { notes.push_back(n); };
  }

  std::unique_ptr<CudaExecutable> make(LoadedPackage p) {
    api.learnPackage(p);
    StatusOr<std::unique_ptr<CudaExecutable>> e =
        CudaExecutable::create(std::move(p), api, options);
    EXPECT_TRUE(e.isOk()) << e.status().message();
    return e.isOk() ? std::move(e.value()) : nullptr;
  }

  // The message of create()'s refusal of |p| (a test failure, and "", if
  // it loads).
  std::string refusal(LoadedPackage p) {
    StatusOr<std::unique_ptr<CudaExecutable>> e =
        CudaExecutable::create(std::move(p), api, options);
    EXPECT_FALSE(e.isOk()) << "the package loaded";
    return e.isOk() ? std::string() : e.status().message();
  }

  // The calls that do a step's work, in order.
  std::vector<std::string> work(size_t from = 0) const {
    std::vector<std::string> out;
    for (size_t i = from; i < api.calls.size(); ++i) {
      const std::string &c = api.calls[i];
      if (c.rfind("cuLaunchKernel", 0) == 0 || c.rfind("cublasLtMatmul ", 0) == 0 ||
          c == "cublasLtMatmul" || c.rfind("cudaMemcpyAsync D2D", 0) == 0 ||
          c.rfind("cudaGraph", 0) == 0 ||
          (c.rfind("cudaStream", 0) == 0 && c.find("Capture") != std::string::npos))
        out.push_back(c);
    }
    return out;
  }

  // initialize(), one step on random x, y checked against relu(x . w):
  // the calls that did the step's work.
  std::vector<std::string> stepChecked(CudaExecutable &exec);
};

std::vector<float> expectedY(const std::vector<float> &x,
                             const std::vector<float> &w) {
  std::vector<float> y(M * N);
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double acc = 0;
      for (int l = 0; l < K; ++l)
        acc += double(x[i * K + l]) * w[l * N + j];
      y[i * N + j] = acc > 0 ? float(acc) : 0.f;
    }
  return y;
}

// Expects |y| to be relu(x . w) within 1e-5 (|what| names it).
void expectY(const std::vector<float> &y, const std::vector<float> &x,
             const std::vector<float> &w, const std::string &what) {
  std::vector<float> want = expectedY(x, w);
  for (int i = 0; i < M * N; ++i)
    EXPECT_NEAR(y[i], want[i], 1e-5) << what << "[" << i << "]";
}

std::vector<std::string> CudaExecutableTest::stepChecked(CudaExecutable &exec) {
  EXPECT_TRUE(exec.initialize().isOk());
  std::vector<float> x = randomFloats(M * K, 1);
  EXPECT_TRUE(exec.writeInput(0, x.data()).isOk());
  std::vector<float> w(K * N);
  EXPECT_TRUE(exec.readBuffer(1, w.data()).isOk());
  size_t before = api.calls.size();
  EXPECT_TRUE(exec.run().isOk());
  std::vector<std::string> calls = work(before);
  std::vector<float> y(M * N);
  EXPECT_TRUE(exec.readOutput(0, y.data()).isOk());
  expectY(y, x, w, "y");
  return calls;
}

TEST_F(CudaExecutableTest, ArenaIsOneAllocationAtThePlannedOffsets) {
  auto exec = make(mlpPackage());
  ASSERT_TRUE(exec);
  EXPECT_EQ(api.count("cudaMalloc 1920"), 1u);
  // One arena plus cuBLASLt's workspace, nothing else.
  EXPECT_EQ(api.count("cudaMalloc "), 2u);
  auto *base = static_cast<uint8_t *>(exec->deviceBuffer(0));
  for (uint32_t i = 0; i < exec->package().buffers.size(); ++i)
    EXPECT_EQ(static_cast<uint8_t *>(exec->deviceBuffer(i)) - base,
              static_cast<ptrdiff_t>(exec->package().buffers[i].offset))
        << exec->package().buffers[i].name;
  EXPECT_EQ(exec->deviceBuffer(99), nullptr);
}

// A step that needs more memory than the device has free (its arena and
// the workspaces the runtime gives its libraries) is refused at load,
// before any allocation, with the sizes and what would fit it (kiln
// compile --memory-budget); so is a package the device cannot hold.
TEST_F(CudaExecutableTest, StepOverTheFreeMemoryIsRefusedWithWhatWouldFit) {
  using kiln::runtime::cuda::testing::FakeDeviceMemory;
  const uint64_t workspace = options.gemmWorkspaceBytes;
  ASSERT_EQ(workspace, uint64_t(32) << 20);
  // Room for the arena (1920 bytes) but not for cuBLASLt's workspace too.
  api.usedElsewhere = FakeDeviceMemory::kDeviceMemoryBytes - workspace;
  LoadedPackage p = mlpPackage();
  api.learnPackage(p);
  std::string m = refusal(std::move(p));
  EXPECT_EQ(m, "the step needs 32.00 MiB on the device (arena 1.88 KiB, "
               "cuBLASLt workspace 32.00 MiB; the arena holds the parameters, "
               "optimizer state, batch and activations) and CUDA device 0 (" +
                   api.deviceInfo(0)->name +
                   ") has 32.00 MiB free of 2.00 GiB; compile the model again "
                   "with --memory-budget=SIZE under what is free (kiln "
                   "recomputes activations to fit), a smaller batch or "
                   "--grad-accum, --amp=bf16 or a ZeRO strategy");
  EXPECT_EQ(api.count("cudaMalloc "), 0u);

  // With room for both, the same package loads, and the executable's
  // account of its memory is what it allocated.
  api.usedElsewhere = FakeDeviceMemory::kDeviceMemoryBytes - workspace - 4096;
  {
    auto exec = make(mlpPackage());
    ASSERT_TRUE(exec);
    EXPECT_EQ(exec->memory().arena, 1920u);
    EXPECT_EQ(exec->memory().gemmWorkspace, workspace);
    EXPECT_EQ(exec->memory().total(), 1920u + workspace);
    EXPECT_EQ(api.count("cudaMalloc 1920"), 1u);
    EXPECT_EQ(api.count("cudaMalloc " + std::to_string(workspace)), 1u);
  }

  // More than the device has at all: refused before cudaMalloc as well.
  api.usedElsewhere = 0;
  LoadedPackage huge = mlpPackage();
  huge.arenaSize = FakeDeviceMemory::kDeviceMemoryBytes + 256;
  std::string hm = refusal(std::move(huge));
  EXPECT_NE(hm.find("arena 2.00 GiB"), std::string::npos) << hm;
  EXPECT_NE(hm.find("--memory-budget=SIZE"), std::string::npos);
}

TEST_F(CudaExecutableTest, ThunksBecomeTheExpectedCallsInOrder) {
  options.graphs = false;
  auto exec = make(mlpPackage());
  ASSERT_TRUE(exec);
  ASSERT_TRUE(exec->initialize().isOk());
  std::vector<float> x = randomFloats(M * K, 1);
  ASSERT_TRUE(exec->writeInput(0, x.data()).isOk());
  std::vector<float> w(K * N);
  ASSERT_TRUE(exec->readBuffer(1, w.data()).isOk());
  size_t before = api.calls.size();
  ASSERT_TRUE(exec->run().isOk());
  // 132 SMs * (2048 / 256) = 1056 blocks at most; the sgd kernel has 3.
  EXPECT_EQ(work(before),
            (std::vector<std::string>{"cublasLtMatmul",
                                      "cuLaunchKernel kiln_relu grid=1056 block=256",
                                      "cuLaunchKernel kiln_sgd grid=3 block=256",
                                      "cudaMemcpyAsync D2D 256",
                                      "cudaMemcpyAsync D2D 512"}));
  ASSERT_EQ(api.gemms.size(), 1u);
  EXPECT_EQ(api.gemms[0].lhs, exec->deviceBuffer(0));
  EXPECT_EQ(api.gemms[0].rhs, exec->deviceBuffer(1));
  EXPECT_EQ(api.gemms[0].out, exec->deviceBuffer(2));
  EXPECT_EQ(api.gemms[0].desc.params.m, M);
  EXPECT_EQ(api.gemms[0].desc.params.n, N);
  EXPECT_EQ(api.gemms[0].desc.params.k, K);
  EXPECT_EQ(api.gemms[0].desc.dtype, PkgDType::F32);
  EXPECT_FALSE(api.gemms[0].desc.allowTf32);
  EXPECT_EQ(api.gemms[0].desc.alignmentBytes, 128u); // offsets 0, 128, 640
  ASSERT_EQ(api.launches.size(), 2u);
  EXPECT_EQ(api.launches[0].args,
            (std::vector<void *>{exec->deviceBuffer(2), exec->deviceBuffer(3)}));
  EXPECT_EQ(api.launches[1].args,
            (std::vector<void *>{exec->deviceBuffer(1), exec->deviceBuffer(4)}));
  // The step's values: y = relu(x . w), w halved by the updates copy.
  std::vector<float> y(M * N), yCopy(M * N), w2(K * N);
  ASSERT_TRUE(exec->readOutput(0, y.data()).isOk());
  ASSERT_TRUE(exec->readOutput(2, yCopy.data()).isOk());
  ASSERT_TRUE(exec->readBuffer(1, w2.data()).isOk());
  std::vector<float> want = expectedY(x, w);
  for (int i = 0; i < M * N; ++i) {
    EXPECT_NEAR(y[i], want[i], 1e-5) << i;
    EXPECT_EQ(yCopy[i], y[i]) << i;
  }
  for (int i = 0; i < K * N; ++i)
    EXPECT_EQ(w2[i], w[i] * 0.5f) << i;
}

TEST_F(CudaExecutableTest, InitializeWritesThePackageInitializers) {
  auto exec = make(mlpPackage());
  ASSERT_TRUE(exec);
  ASSERT_TRUE(exec->initialize().isOk());
  std::vector<float> w(K * N), x(M * K);
  ASSERT_TRUE(exec->readBuffer(1, w.data()).isOk());
  ASSERT_TRUE(exec->readBuffer(0, x.data()).isOk());
  InitSpec spec;
  spec.kind = InitKind::normal;
  spec.scale = 1.0;
  spec.seed = 7;
  std::vector<double> want = initialize(spec, {K, N});
  for (int i = 0; i < K * N; ++i)
    EXPECT_EQ(w[i], static_cast<float>(want[i])) << i;
  for (float v : x)
    EXPECT_EQ(v, 0.f); // inputs without an initializer are zeroed
}

TEST_F(CudaExecutableTest, CodeSelectionFollowsTheDeviceArchitecture) {
  {
    auto exec = make(mlpPackage({80, 90}, 80));
    ASSERT_TRUE(exec);
    EXPECT_EQ(api.loadedImages[0], "CUBIN sm_90 kiln_relu");
    EXPECT_EQ(exec->kernelCode()[0], KernelCode::Cubin);
  }
  {
    // A package for sm_80 on an sm_90 device: its PTX through the driver.
    api.loadedImages.clear();
    auto exec = make(mlpPackage({80}, 80));
    ASSERT_TRUE(exec);
    EXPECT_EQ(api.loadedImages[0].rfind(".version 8.0\n.target sm_80", 0), 0u);
    EXPECT_EQ(exec->kernelCode()[0], KernelCode::Ptx);
    EXPECT_TRUE(api.nvrtcArchs.empty());
  }
  {
    // Without PTX (or with PTX for a newer GPU) the source is re-JITted by
    // NVRTC for sm_90.
    api.loadedImages.clear();
    auto exec = make(mlpPackage({80}, 0));
    ASSERT_TRUE(exec);
    EXPECT_EQ(exec->kernelCode()[0], KernelCode::Nvrtc);
    EXPECT_EQ(api.loadedImages[0].rfind("NVRTC sm_90 kiln_relu", 0), 0u);
    LoadedPackage newer = mlpPackage({100}, 100);
    auto exec2 = make(std::move(newer));
    ASSERT_TRUE(exec2);
    EXPECT_EQ(exec2->kernelCode()[1], KernelCode::Nvrtc);
    EXPECT_EQ(api.nvrtcArchs, (std::vector<unsigned>{90, 90, 90, 90}));
  }
  {
    // With an NVRTC the disk cache knows (CubinCache.h), a second
    // executable of the package takes the re-JITted cubins from the disk.
    std::string dir = ::testing::TempDir() + "kiln-rejit-cache-" +
                      std::to_string(::getpid());
    std::filesystem::remove_all(dir);
    ScopedEnv cacheDir("KILN_CACHE_DIR", dir);
    api.nvrtcIdentityText = "fake NVRTC 1.0";
    api.nvrtcArchs.clear();
    api.loadedImages.clear();
    auto first = make(mlpPackage({80}, 0));
    ASSERT_TRUE(first);
    size_t compiled = api.nvrtcArchs.size();
    EXPECT_GE(compiled, 1u);
    auto second = make(mlpPackage({80}, 0));
    ASSERT_TRUE(second);
    EXPECT_EQ(api.nvrtcArchs.size(), compiled); // nothing compiled again
    EXPECT_EQ(second->kernelCode()[0], KernelCode::Nvrtc);
    ASSERT_EQ(api.loadedImages.size(), 2 * compiled);
    for (size_t i = 0; i < compiled; ++i)
      EXPECT_EQ(api.loadedImages[compiled + i], api.loadedImages[i]);
    api.nvrtcIdentityText.clear();
    std::filesystem::remove_all(dir);
  }
  {
    // An sm_80 device takes the sm_80 cubin.
    api.device.major = 8;
    api.device.minor = 0;
    api.loadedImages.clear();
    auto exec = make(mlpPackage({80, 90}, 80));
    ASSERT_TRUE(exec);
    EXPECT_EQ(api.loadedImages[0], "CUBIN sm_80 kiln_relu");
  }
}

// Kernels whose code is the same (a repeated fusion gets its first
// kernel's code) share one module and function; a kernel with the same
// entry point but other code loads its own. Here y_copy is relu(dot) by a
// repeat of relu with a launch shape of its own, and y_other by a relu of
// other code (another cubin).
TEST_F(CudaExecutableTest, KernelsWithTheSameCodeShareAModule) {
  options.graphs = false;
  LoadedPackage p = mlpPackage({90}, 0);
  PackageKernel again = p.kernels[0];
  again.name = "relu_again";
  again.grid = {7, 1, 1};
  PackageKernel other = p.kernels[0];
  other.name = "relu_other";
  other.cubins[0].image.insert(other.cubins[0].image.begin(), 'X');
  p.kernels.push_back(again);
  p.kernels.push_back(other);
  p.buffers.push_back(f32Buffer("y_other", PkgRole::Output, {M, N}, 1920));
  p.arenaSize = 2176;
  p.outputs.push_back(signatureEntry(p, "y_other", PkgRole::Output, 6));
  PackageThunk &copy = p.thunks[3];
  copy = p.thunks[1];
  copy.kernel = 2;
  copy.results = {5};
  PackageThunk launch = p.thunks[1];
  launch.kernel = 3;
  launch.results = {6};
  p.thunks.push_back(launch);
  api.hostKernelsByImage["XCUBIN sm_90 kiln_relu"] = reluHost;
  auto exec = make(std::move(p));
  ASSERT_TRUE(exec);
  EXPECT_EQ(api.loadedImages,
            (std::vector<std::string>{"CUBIN sm_90 kiln_relu", "CUBIN sm_90 kiln_sgd",
                                      "XCUBIN sm_90 kiln_relu"}));
  std::vector<std::string> calls = stepChecked(*exec);
  EXPECT_EQ(std::count(calls.begin(), calls.end(),
                       "cuLaunchKernel kiln_relu grid=7 block=256"),
            1);
  ASSERT_EQ(api.launches.size(), 4u);
  EXPECT_EQ(api.launches[2].args,
            (std::vector<void *>{exec->deviceBuffer(2), exec->deviceBuffer(5)}));
  std::vector<float> y(M * N), again2(M * N), other2(M * N);
  ASSERT_TRUE(exec->readOutput(0, y.data()).isOk());
  ASSERT_TRUE(exec->readOutput(2, again2.data()).isOk());
  ASSERT_TRUE(exec->readOutput(3, other2.data()).isOk());
  EXPECT_EQ(again2, y);
  EXPECT_EQ(other2, y);
}

TEST_F(CudaExecutableTest, NoLoadableCodeNamesTheKernelAndWhatWasTried) {
  LoadedPackage p = mlpPackage({100}, 100);
  for (PackageKernel &k : p.kernels)
    k.source.clear();
  std::string m = refusal(std::move(p));
  EXPECT_NE(m.find("kernel 0 'relu' (kiln_relu)"), std::string::npos) << m;
  EXPECT_NE(m.find("sm_90"), std::string::npos) << m;
  EXPECT_NE(m.find("ptx: for sm_100"), std::string::npos) << m;
}

TEST_F(CudaExecutableTest, LaunchFailureNamesTheCallAndTheKernel) {
  options.graphs = false;
  auto exec = make(mlpPackage());
  ASSERT_TRUE(exec);
  api.failCall = "cuLaunchKernel";
  api.failAt = 1; // the second launch: sgd
  Status s = exec->run();
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("thunk 2 (kernel 'sgd', kiln_sgd)"),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("cuLaunchKernel failed: CUDA_ERROR_LAUNCH_FAILED"),
            std::string::npos)
      << s.message();
}

// A kernel with a row cache over 48 KiB (CudaEmitter.h): the executable
// opts in once at load (cuFuncSetAttribute, after cuModuleGetFunction)
// and every launch passes the bytes; a kernel within 48 KiB needs no
// opt-in. The fake refuses a launch over 48 KiB without the opt-in, as
// CUDA does.
TEST_F(CudaExecutableTest, DynamicSharedMemoryOverTheDefaultOptsInAtLoad) {
  options.graphs = false;
  LoadedPackage p = mlpPackage();
  p.kernels[0].sharedMemoryBytes = 100608; // the GPT's bf16 logits row
  p.kernels[1].sharedMemoryBytes = 20000;
  auto exec = make(std::move(p));
  ASSERT_TRUE(exec);
  EXPECT_EQ(api.count("cuFuncSetAttribute kiln_relu "
                      "MAX_DYNAMIC_SHARED_SIZE_BYTES=100608"),
            1u);
  EXPECT_EQ(api.count("cuFuncSetAttribute"), 1u);
  auto get = std::find(api.calls.begin(), api.calls.end(),
                       "cuModuleGetFunction kiln_relu");
  auto set = std::find(api.calls.begin(), api.calls.end(),
                       "cuFuncSetAttribute kiln_relu "
                       "MAX_DYNAMIC_SHARED_SIZE_BYTES=100608");
  EXPECT_LT(get, set);
  ASSERT_TRUE(exec->run().isOk());
  ASSERT_EQ(api.launches.size(), 2u);
  EXPECT_EQ(api.launches[0].entry, "kiln_relu");
  EXPECT_EQ(api.launches[0].sharedMemoryBytes, 100608u);
  EXPECT_EQ(api.launches[1].sharedMemoryBytes, 20000u);
}

TEST_F(CudaExecutableTest, DynamicSharedMemoryBeyondTheDeviceIsRefusedByName) {
  api.device.major = 8;
  api.device.minor = 6;
  api.device.maxSharedMemoryPerBlockOptin = 101376; // sm_86: 99 KiB
  LoadedPackage p = mlpPackage({86}, 86);
  p.kernels[1].sharedMemoryBytes = 200000;
  std::string m = refusal(std::move(p));
  EXPECT_NE(m.find("kernel 1 'sgd' (kiln_sgd)"), std::string::npos) << m;
  EXPECT_NE(m.find("needs 200000 bytes of dynamic shared memory"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("allows at most 101376"), std::string::npos) << m;
  EXPECT_NE(m.find("--target=cuda:sm_86"), std::string::npos) << m;
  EXPECT_EQ(api.count("cuFuncSetAttribute"), 0u);
}

TEST_F(CudaExecutableTest, FailedSharedMemoryOptInNamesTheCallAndTheKernel) {
  LoadedPackage p = mlpPackage();
  p.kernels[0].sharedMemoryBytes = 100608;
  api.failCall = "cuFuncSetAttribute";
  std::string m = refusal(std::move(p));
  EXPECT_NE(m.find("kernel 0 'relu' (kiln_relu)"), std::string::npos) << m;
  EXPECT_NE(m.find("cuFuncSetAttribute failed"), std::string::npos) << m;
}

TEST_F(CudaExecutableTest, GemmFailureNamesCublasLt) {
  api.failCall = "cublasLtMatmulAlgoGetHeuristic";
  std::string m = refusal(mlpPackage());
  EXPECT_NE(m.find("thunk 0 (gemm m=4 n=16 k=8 batch=1): "
                   "cublasLtMatmulAlgoGetHeuristic failed"),
            std::string::npos)
      << m;
}

TEST_F(CudaExecutableTest, GraphIsCapturedAfterTheWarmUpStep) {
  auto exec = make(mlpPackage());
  ASSERT_TRUE(exec);
  ASSERT_TRUE(exec->initialize().isOk());
  std::vector<float> x = randomFloats(M * K, 2);
  ASSERT_TRUE(exec->writeInput(0, x.data()).isOk());
  std::vector<float> w(K * N);
  ASSERT_TRUE(exec->readBuffer(1, w.data()).isOk());

  size_t mark = api.calls.size();
  ASSERT_TRUE(exec->run().isOk()); // warm-up: plain launches
  EXPECT_EQ(api.count("cudaStreamBeginCapture"), 0u);
  EXPECT_FALSE(exec->usingGraph());
  EXPECT_EQ(work(mark).size(), 5u);

  mark = api.calls.size();
  ASSERT_TRUE(exec->run().isOk()); // captured, then launched
  EXPECT_EQ(work(mark),
            (std::vector<std::string>{"cudaStreamBeginCapture",
                                      "cublasLtMatmul",
                                      "cuLaunchKernel kiln_relu grid=1056 block=256",
                                      "cuLaunchKernel kiln_sgd grid=3 block=256",
                                      "cudaMemcpyAsync D2D 256",
                                      "cudaMemcpyAsync D2D 512",
                                      "cudaStreamEndCapture",
                                      "cudaGraphInstantiate", "cudaGraphLaunch"}));
  EXPECT_TRUE(exec->usingGraph());

  mark = api.calls.size();
  ASSERT_TRUE(exec->run().isOk()); // one graph launch
  EXPECT_EQ(work(mark), (std::vector<std::string>{"cudaGraphLaunch"}));
  // Three steps ran (the graph replays the work): w was halved three times.
  std::vector<float> w3(K * N), y(M * N);
  ASSERT_TRUE(exec->readBuffer(1, w3.data()).isOk());
  for (int i = 0; i < K * N; ++i)
    EXPECT_EQ(w3[i], w[i] * 0.125f) << i;
  ASSERT_TRUE(exec->readOutput(0, y.data()).isOk());
  std::vector<float> w2(K * N);
  for (int i = 0; i < K * N; ++i)
    w2[i] = w[i] * 0.25f; // the third step read the twice-halved w
  expectY(y, x, w2, "y");
  EXPECT_TRUE(notes.empty());
}

// Nsight Systems' view (NVTX ranges, on the fake tool): each thunk is a
// range named as the runtime's messages name it while it is enqueued; the
// capture is one range holding them; a graph launch is one range.
TEST_F(CudaExecutableTest, ThunksAreNvtxRangesAndAGraphLaunchIsOne) {
  if (!kiln::testing::fakeNvtxInstalled())
    GTEST_SKIP() << "the fake NVTX tool is not at " KILN_FAKE_NVTX;
  LoadedPackage p = mlpPackage();
  std::vector<std::string> thunks;
  for (size_t i = 0; i < p.thunks.size(); ++i)
    thunks.push_back("push kiln: " + pkgDescribeThunk(p, i));
  auto exec = make(std::move(p));
  ASSERT_TRUE(exec);
  auto step = [&] {
    std::vector<std::string> lines =
        kiln::testing::nvtxRanges([&] { ASSERT_TRUE(exec->run().isOk()); });
    for (std::string &l : lines)
      l = l.substr(l.find(' ') + 1); // one thread
    return lines;
  };
  std::vector<std::string> plain;
  for (const std::string &t : thunks) {
    plain.push_back(t);
    plain.push_back("pop kiln");
  }
  EXPECT_EQ(step(), plain); // warm-up: plain launches
  std::vector<std::string> captured = {
      "push kiln: capturing the step into a CUDA Graph"};
  captured.insert(captured.end(), plain.begin(), plain.end());
  captured.push_back("pop kiln");
  std::vector<std::string> launch = {"push kiln: graph launch: the step's " +
                                         std::to_string(thunks.size()) +
                                         " thunks",
                                     "pop kiln"};
  captured.insert(captured.end(), launch.begin(), launch.end());
  EXPECT_EQ(step(), captured);
  EXPECT_EQ(step(), launch);
  EXPECT_EQ(thunks.size(), 4u); // the GEMM, ReLU, SGD and a copy
  EXPECT_EQ(thunks[0].rfind("push kiln: gemm m=", 0), 0u) << thunks[0];
}

TEST_F(CudaExecutableTest, FailedCaptureFallsBackToPlainLaunches) {
  auto exec = make(mlpPackage());
  ASSERT_TRUE(exec);
  api.failCall = "cudaStreamEndCapture";
  ASSERT_TRUE(exec->run().isOk());
  ASSERT_TRUE(exec->run().isOk());
  ASSERT_TRUE(exec->run().isOk());
  EXPECT_FALSE(exec->usingGraph());
  EXPECT_EQ(api.count("cudaGraphLaunch"), 0u);
  EXPECT_EQ(api.count("cudaStreamBeginCapture"), 1u); // tried once
  EXPECT_EQ(api.count("cuLaunchKernel kiln_relu"), 3u + 1u); // +1 captured
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("cudaStreamEndCapture failed"), std::string::npos)
      << notes[0];
  EXPECT_EQ(exec->graphFallbackReason().find("capturing the step"), 0u);
}

TEST_F(CudaExecutableTest, GraphsOffMeansNoCapture) {
  options.graphs = false;
  auto exec = make(mlpPackage());
  ASSERT_TRUE(exec);
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(exec->run().isOk());
  EXPECT_EQ(api.count("cudaStreamBeginCapture"), 0u);
  EXPECT_EQ(api.count("cuLaunchKernel kiln_relu"), 3u);
}

TEST_F(CudaExecutableTest, StagedInputsAreCopiedBeforeTheNextStep) {
  options.graphs = false;
  auto exec = make(mlpPackage());
  ASSERT_TRUE(exec);
  ASSERT_TRUE(exec->initialize().isOk());
  std::vector<float> w(K * N);
  ASSERT_TRUE(exec->readBuffer(1, w.data()).isOk());
  size_t initialCopies = api.count("cudaMemcpyAsync H2D 128");
  for (unsigned step = 0; step < 3; ++step) {
    std::vector<float> x = randomFloats(M * K, 10 + step);
    StatusOr<void *> staged = exec->hostInput(0);
    ASSERT_TRUE(staged.isOk()) << staged.status().message();
    std::memcpy(staged.value(), x.data(), x.size() * 4);
    ASSERT_TRUE(exec->submitInputs().isOk());
    ASSERT_TRUE(exec->run().isOk());
    std::vector<float> y(M * N);
    ASSERT_TRUE(exec->readOutput(0, y.data()).isOk());
    std::vector<float> want = expectedY(x, w);
    for (int i = 0; i < M * N; ++i)
      ASSERT_NEAR(y[i], want[i], 1e-5) << "step " << step << " element " << i;
    for (float &v : w)
      v *= 0.5f;
  }
  // Two pinned slots, allocated once.
  EXPECT_EQ(api.count("cudaMallocHost"), 2u);
  EXPECT_EQ(api.count("cudaMemcpyAsync H2D 128") - initialCopies, 3u);
}

// acc_new = acc + x (updates acc): a step that sums every batch it is
// fed, so the sum read at the end says whether each batch reached exactly
// one step.
constexpr int kAccumulated = 64;
LoadedPackage accumulatorPackage() {
  LoadedPackage p;
  p.target.kind = TargetKind::Cuda;
  p.target.smArchs = {90};
  p.buffers = {f32Buffer("x", PkgRole::Input, {kAccumulated}, 0),
               f32Buffer("acc", PkgRole::Parameter, {kAccumulated}, 256),
               f32Buffer("acc_new", PkgRole::Output, {kAccumulated}, 512, 1)};
  p.arenaSize = 768;
  p.kernels = {kernel("add", "kiln_add", 1, {90}, 0)};
  PackageThunk add;
  add.kernel = 0;
  add.operands = {1, 0};
  add.results = {2};
  p.thunks = {add};
  p.inputs = {signatureEntry(p, "x", PkgRole::Input, 0),
              signatureEntry(p, "acc", PkgRole::Parameter, 1)};
  p.outputs = {signatureEntry(p, "acc_new", PkgRole::Output, 2)};
  return p;
}
void addHost(void **b, unsigned, unsigned) {
  for (int i = 0; i < kAccumulated; ++i)
    static_cast<float *>(b[2])[i] =
        static_cast<float *>(b[0])[i] + static_cast<float *>(b[1])[i];
}

// Batch |step| of the accumulator: small integers, so every sum is exact.
std::vector<float> accumulatorBatch(int step) {
  std::vector<float> x(kAccumulated);
  for (int i = 0; i < kAccumulated; ++i)
    x[i] = float((step * 7 + i * 3) % 23 + 1);
  return x;
}

// Feeds |steps| batches through the pinned staging and runs a step after
// each, reading nothing until the end (the host runs ahead of the GPU as
// far as the two staging slots let it), then reads acc_new. "" when it
// holds the sum of the batches; else what went wrong.
std::string accumulate(FakeCudaApi &api, CudaOptions options, int steps,
                       std::function<void()> afterInitialize = {}) {
  // Outlives the executable: its copy may still be queued when a test has
  // dropped the wait for it (the executable's cudaFree runs it).
  std::vector<float> got(kAccumulated, -1.0f);
  api.hostKernels["kiln_add"] = addHost;
  LoadedPackage package = accumulatorPackage();
  api.learnPackage(package);
  StatusOr<std::unique_ptr<CudaExecutable>> made =
      CudaExecutable::create(std::move(package), api, options);
  if (!made.isOk())
    return made.status().message();
  CudaExecutable &exec = *made.value();
  if (Status s = exec.initialize(); !s.isOk())
    return s.message();
  if (afterInitialize)
    afterInitialize();
  std::vector<float> want(kAccumulated, 0.0f);
  for (int step = 0; step < steps; ++step) {
    std::vector<float> x = accumulatorBatch(step);
    for (int i = 0; i < kAccumulated; ++i)
      want[i] += x[i];
    StatusOr<void *> staged = exec.hostInput(0);
    if (!staged.isOk())
      return staged.status().message();
    std::memcpy(staged.value(), x.data(), x.size() * 4);
    if (Status s = exec.submitInputs(); !s.isOk())
      return "step " + std::to_string(step) + ": " + s.message();
    if (Status s = exec.run(); !s.isOk())
      return "step " + std::to_string(step) + ": " + s.message();
  }
  if (Status s = exec.readOutput(0, got.data()); !s.isOk())
    return s.message();
  for (int i = 0; i < kAccumulated; ++i)
    if (got[i] != want[i])
      return "acc_new[" + std::to_string(i) + "] is " + std::to_string(got[i]) +
             ", the batches sum to " + std::to_string(want[i]);
  return "";
}

// The staging's two streams on a fake that orders them as CUDA does and
// runs each stream's work only when the host waits for it: eight batches,
// with the step as plain launches and as a CUDA Graph, reach exactly one
// step each, and no copy races a step.
TEST_F(CudaExecutableTest, StagedInputsOverlapStepsWithoutARace) {
  for (bool graphs : {false, true}) {
    SCOPED_TRACE(graphs ? "graphs" : "plain launches");
    FakeCudaApi fake;
    ASSERT_TRUE(fake.asyncStreams);
    options.graphs = graphs;
    EXPECT_EQ(accumulate(fake, options, 8), "");
    EXPECT_EQ(fake.races, std::vector<std::string>());
    EXPECT_EQ(fake.count("cudaGraphLaunch"), graphs ? 7u : 0u);
    // The host waited for a slot's previous copy before refilling it.
    EXPECT_EQ(fake.count("cudaEventSynchronize"), 8u);
  }
}

// Each synchronization the staging makes is needed: without any one of
// them a copy races a step (the fake's stream order says so) or a batch
// is lost (the fake runs work late, as a GPU may).
TEST_F(CudaExecutableTest, EverySynchronizationOfTheStagingIsNeeded) {
  struct Drop {
    const char *what, *call;
    int parity; // drop the calls of this parity (-1: all)
    const char *expect; // in the failure
  };
  // submitInputs' wait (the copy stream after the previous step) and
  // run()'s (the step after the copies) alternate.
  for (const Drop &d :
       {Drop{"the copies' wait for the previous step", "cudaStreamWaitEvent",
             0, "a race: cuLaunchKernel kiln_add argument 1 on stream 1 and "
                "cudaMemcpyAsync H2D destination on stream 2"},
        Drop{"the step's wait for the copies", "cudaStreamWaitEvent", 1,
             "a race: cudaMemcpyAsync H2D destination on stream 2 and "
             "cuLaunchKernel kiln_add argument 1 on stream 1"},
        Drop{"hostInput's wait for the slot's last copy",
             "cudaEventSynchronize", -1, "the batches sum to"},
        Drop{"readOutput's wait for the step", "cudaStreamSynchronize", -1,
             "acc_new[0] is -1"}}) {
    for (bool graphs : {false, true}) {
      SCOPED_TRACE(std::string(d.what) + (graphs ? ", graphs" : ""));
      FakeCudaApi fake;
      options.graphs = graphs;
      std::string failure = accumulate(fake, options, 8, [&] {
        fake.dropSync = [&](const std::string &call, int nth) {
          return call == d.call && (d.parity < 0 || nth % 2 == d.parity);
        };
      });
      EXPECT_NE(failure.find(d.expect), std::string::npos) << failure;
      EXPECT_EQ(fake.races.empty(), failure.find("a race") == std::string::npos);
      EXPECT_GT(fake.count(std::string(d.call) + " (dropped)"), 0u);
    }
  }
}

TEST_F(CudaExecutableTest, AnotherThreadMakesTheDeviceCurrentOnce) {
  options.graphs = false;
  auto exec = make(mlpPackage());
  ASSERT_TRUE(exec);
  EXPECT_EQ(api.count("cudaSetDevice"), 1u);
  ASSERT_TRUE(exec->run().isOk());
  EXPECT_EQ(api.count("cudaSetDevice"), 1u); // create()'s thread
  std::thread other([&] {
    EXPECT_TRUE(exec->run().isOk());
    EXPECT_TRUE(exec->run().isOk());
  });
  other.join();
  EXPECT_EQ(api.count("cudaSetDevice"), 2u);
}

TEST_F(CudaExecutableTest, GemmsOfOneShapeShareAPlan) {
  options.graphs = false;
  LoadedPackage p = mlpPackage();
  PackageThunk again = p.thunks[0]; // the same GEMM once more
  p.thunks.push_back(again);
  PackageThunk other = p.thunks[0];
  other.gemm.alpha = 2.0; // a different one
  p.thunks.push_back(other);
  // Another, whose alpha differs from the first's past six digits.
  PackageThunk close = p.thunks[0];
  close.gemm.alpha = 1.0 + 1e-9;
  p.thunks.push_back(close);
  auto exec = make(std::move(p));
  ASSERT_TRUE(exec);
  EXPECT_EQ(api.count("cublasLtMatmulAlgoGetHeuristic"), 3u);
  ASSERT_TRUE(exec->run().isOk());
  ASSERT_EQ(api.gemms.size(), 4u);
  EXPECT_EQ(api.gemms[2].desc.params.alpha, 2.0);
  EXPECT_EQ(api.gemms[1].desc.params.alpha, 1.0);
  EXPECT_EQ(api.gemms[3].desc.params.alpha, 1.0 + 1e-9);
}

// Convolutions run (CudaConvTest.cpp); one whose output shape disagrees
// with its parameters is refused at load, naming the op and the shape.
TEST_F(CudaExecutableTest, ConvolutionWithBadShapesIsRefusedByName) {
  LoadedPackage p = mlpPackage();
  PackageThunk conv;
  conv.kind = ThunkKind::LibraryCall;
  conv.library = LibraryKind::Conv2DFilterGrad;
  conv.hasConv = true;
  conv.conv.inputShape = {1, 1, 4, 8};
  conv.conv.filterShape = {1, 1, 1, 1};
  conv.conv.outputShape = {1, 1, 4, 7};
  conv.conv.strides = {1, 1};
  conv.conv.padding = {0, 0, 0, 0};
  conv.conv.dilation = {1, 1};
  conv.operands = {0, 0};
  conv.results = {5};
  p.thunks.push_back(conv);
  std::string m = refusal(std::move(p));
  EXPECT_NE(m.find("conv2d_filter_grad"), std::string::npos) << m;
  EXPECT_NE(m.find("output shape must be [1, 1, 4, 8], but is [1, 1, 4, 7]"),
            std::string::npos)
      << m;
}

// Kiln's kernels are 1-D: a block of 1 to 1024 threads in x, and a grid
// they loop over in x. Anything else is refused at load, naming the
// kernel, rather than failing at the first launch or being ignored.
TEST_F(CudaExecutableTest, LaunchShapesKernelsDoNotUseAreRefusedByName) {
  LoadedPackage p = mlpPackage();
  p.kernels[0].block = {2048, 1, 1};
  std::string m = refusal(p);
  EXPECT_NE(m.find("thunk 1 (kernel 'relu', kiln_relu): "
                   "expected a block of 1 to 1024 threads "
                   "in x, found (2048, 1, 1)"),
            std::string::npos)
      << m;
  p = mlpPackage();
  p.kernels[1].grid = {3, 1, 2};
  m = refusal(p);
  EXPECT_NE(m.find("thunk 2 (kernel 'sgd', kiln_sgd): "
                   "expected a grid in x only, found "
                   "(3, 1, 2)"),
            std::string::npos)
      << m;
}

// A launch passes one pointer per operand and result; where the driver
// says what the kernel takes (cuFuncGetParamInfo), anything else is
// refused at load, naming the kernel, instead of the kernel reading its
// parameters from garbage.
TEST_F(CudaExecutableTest, KernelParametersMustBeTheThunksBuffers) {
  api.paramSizes["kiln_relu"] = {8};
  std::string m = refusal(mlpPackage());
  EXPECT_NE(m.find("thunk 1 (kernel 'relu', kiln_relu): the kernel takes 1 "
                   "parameter(s) of 8 bytes, but the thunk passes 2 buffer "
                   "pointers (1 operands, 1 results)"),
            std::string::npos)
      << m;
  api.paramSizes["kiln_relu"] = {8, 4};
  m = refusal(mlpPackage());
  EXPECT_NE(m.find("takes 2 parameter(s) of 8, 4 bytes"), std::string::npos)
      << m;
  api.paramSizes["kiln_relu"] = {8, 8};
  api.paramSizes["kiln_sgd"] = {8, 8};
  StatusOr<std::unique_ptr<CudaExecutable>> e =
      CudaExecutable::create(mlpPackage(), api, options);
  ASSERT_TRUE(e.isOk()) << e.status().message();
  EXPECT_EQ(e.value()->checkedKernelParameters(), std::make_pair(size_t(2), size_t(2)));
  // kiln_relu's three loads and kiln_sgd's last were answered (the fake
  // knows nothing of the package's cubins by itself).
  EXPECT_EQ(api.paramSizesKnown, 4);
  api.paramSizes.erase("kiln_sgd");
  e = CudaExecutable::create(mlpPackage(), api, options);
  ASSERT_TRUE(e.isOk()) << e.status().message();
  EXPECT_EQ(e.value()->checkedKernelParameters(), std::make_pair(size_t(1), size_t(2)));
}

// A DGelu GEMM whose result the planner put over its dying aux (as the
// compiled GPT's are) is planned without split-K algorithms that reduce in
// D (GemmDesc::auxIsOutput), which would overwrite aux before cuBLASLt's
// epilogue reads it; with aux elsewhere, every algorithm is allowed. The
// step computes the same either way.
TEST_F(CudaExecutableTest, DGeluWithAuxInPlaceExcludesReductionInD) {
  using kiln::runtime::testing::gemmPackage;
  for (bool inPlace : {false, true}) {
    SCOPED_TRACE(inPlace ? "aux is the result" : "aux apart");
    LoadedPackage p =
        gemmPackage(TargetKind::Cuda, PkgGemmEpilogue::DGelu, PkgDType::F32);
    PackageThunk &t = p.thunks[0];
    ASSERT_EQ(t.operands.size(), 3u);
    uint32_t aux = t.operands[2], out = t.results[0];
    if (inPlace)
      t.operands[2] = out;
    ASSERT_TRUE(checkPackage(p).isOk());
    FakeCudaApi fake;
    auto e = CudaExecutable::create(p, fake, options);
    ASSERT_TRUE(e.isOk()) << e.status().message();
    ASSERT_EQ(fake.plans.size(), 1u);
    EXPECT_EQ(fake.plans[0].auxIsOutput, inPlace);
    EXPECT_EQ(gemmDescKey(fake.plans[0], 0).find(" aux=D") != std::string::npos,
              inPlace);
    // One step on known values: result = (lhs . rhs) * gelu'(aux).
    CudaExecutable &exec = *e.value();
    std::vector<float> lhs = randomFloats(4 * 16, 3), rhs = randomFloats(16 * 8, 4),
                       pre = randomFloats(4 * 8, 5);
    ASSERT_TRUE(exec.writeBuffer(0, lhs.data()).isOk());
    ASSERT_TRUE(exec.writeBuffer(1, rhs.data()).isOk());
    ASSERT_TRUE(exec.writeBuffer(inPlace ? out : aux, pre.data()).isOk());
    ASSERT_TRUE(exec.run().isOk());
    std::vector<float> got(4 * 8);
    ASSERT_TRUE(exec.readBuffer(out, got.data()).isOk());
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 8; ++j) {
        double dot = 0;
        for (int l = 0; l < 16; ++l)
          dot += double(lhs[i * 16 + l]) * rhs[l * 8 + j];
        double x = pre[i * 8 + j], k = 0.7978845608028654, c = 0.044715;
        double th = std::tanh(k * (x + c * x * x * x));
        double dg = 0.5 * (1 + th) + 0.5 * x * (1 - th * th) * k * (1 + 3 * c * x * x);
        EXPECT_NEAR(got[i * 8 + j], dot * dg, 1e-5) << i << "," << j;
      }
    EXPECT_TRUE(fake.outOfBounds.empty());
  }
}

TEST_F(CudaExecutableTest, CollectivesNeedACommunicator) {
  LoadedPackage p = mlpPackage();
  p.metadata.worldSize = 2;
  PackageThunk ar;
  ar.kind = ThunkKind::Collective;
  ar.hasCollective = true;
  ar.operands = {3};
  ar.results = {3};
  p.thunks.push_back(ar);
  std::string m = refusal(std::move(p));
  EXPECT_NE(m.find("thunk 4 (all_reduce): the package has "
                   "collectives: expected a communicator"),
            std::string::npos)
      << m;
}

// A step compiled for one rank (`kiln compile --strategy=data-parallel`
// without --world-size) runs without a communicator: each collective is
// the identity, a device copy into a result of its own (y_copy here, where
// the package copied), nothing in place.
TEST_F(CudaExecutableTest, CollectivesOfOneRankAreIdentities) {
  LoadedPackage p = mlpPackage();
  ASSERT_EQ(p.metadata.worldSize, 1u);
  PackageThunk ar;
  ar.kind = ThunkKind::Collective;
  ar.hasCollective = true;
  ar.collective.kind = CollectiveKind::AllReduce;
  ar.collective.reduction = PkgReduceKind::Mean;
  ar.operands = {3};
  ar.results = {5};
  p.thunks[3] = ar; // the copy of y into y_copy
  ar.results = {3};
  p.thunks.push_back(ar); // y in place
  auto exec = make(std::move(p));
  ASSERT_TRUE(exec);
  ASSERT_TRUE(exec->initialize().isOk());
  std::vector<float> x = randomFloats(M * K, 5), w(K * N), y(M * N),
                     yCopy(M * N);
  ASSERT_TRUE(exec->readBuffer(1, w.data()).isOk());
  ASSERT_TRUE(exec->writeInput(0, x.data()).isOk());
  size_t d2d = api.count("cudaMemcpyAsync D2D");
  ASSERT_TRUE(exec->run().isOk());
  // The identity's copy into y_copy and the update of w; none in place.
  EXPECT_EQ(api.count("cudaMemcpyAsync D2D"), d2d + 2);
  ASSERT_TRUE(exec->readOutput(0, y.data()).isOk());
  ASSERT_TRUE(exec->readOutput(2, yCopy.data()).isOk());
  expectY(y, x, w, "y");
  EXPECT_EQ(yCopy, y);
}

TEST_F(CudaExecutableTest, CpuPackagesAreRefused) {
  LoadedPackage p = mlpPackage();
  p.target.kind = TargetKind::Cpu;
  std::string m = refusal(std::move(p));
  EXPECT_NE(m.find("expected a CUDA package"), std::string::npos);
}

TEST_F(CudaExecutableTest, ProfileTimesEveryThunk) {
  auto exec = make(mlpPackage());
  ASSERT_TRUE(exec);
  exec->setProfiling(true);
  ASSERT_TRUE(exec->run().isOk());
  ASSERT_TRUE(exec->run().isOk());
  ASSERT_TRUE(exec->collectProfile().isOk());
  ASSERT_EQ(exec->profile().size(), 4u);
  for (const CudaThunkProfile &p : exec->profile()) {
    EXPECT_EQ(p.calls, 2u);
    EXPECT_FLOAT_EQ(p.totalMs, 1.0f); // the fake's 0.5 ms per pair
  }
  EXPECT_EQ(api.count("cudaStreamBeginCapture"), 0u); // no graphs while profiling
}

// The MLP package with kernels whose code waits for the kernel before it
// (PackageKernel::programmaticLaunch), and thunk 4: relu again after the
// copy.
LoadedPackage programmaticPackage(std::vector<unsigned> archs = {80, 90},
                                  unsigned ptxArch = 80) {
  LoadedPackage p = mlpPackage(archs, ptxArch);
  for (PackageKernel &k : p.kernels)
    k.programmaticLaunch = true;
  p.thunks.push_back(p.thunks[1]);
  return p;
}

// Programmatic dependent launch: a waiting kernel after a GEMM or a kernel
// starts early (cuLaunchKernelEx); after a copy, or as the step's first
// thunk, it does not; the step's values stay the same.
TEST_F(CudaExecutableTest, ProgrammaticLaunchFollowsKernelsAndGemms) {
  options.graphs = false;
  auto exec = make(programmaticPackage());
  ASSERT_TRUE(exec);
  EXPECT_FALSE(exec->programmaticLaunch(0)); // the GEMM
  EXPECT_TRUE(exec->programmaticLaunch(1));  // relu after the GEMM
  EXPECT_TRUE(exec->programmaticLaunch(2));  // sgd after relu
  EXPECT_FALSE(exec->programmaticLaunch(3)); // the copy
  EXPECT_FALSE(exec->programmaticLaunch(4)); // relu after the copy
  EXPECT_EQ(stepChecked(*exec),
            (std::vector<std::string>{"cublasLtMatmul",
                                      "cuLaunchKernelEx kiln_relu grid=1056 block=256",
                                      "cuLaunchKernelEx kiln_sgd grid=3 block=256",
                                      "cudaMemcpyAsync D2D 256",
                                      "cuLaunchKernel kiln_relu grid=1056 block=256",
                                      "cudaMemcpyAsync D2D 512"}));
  // Profiling launches plainly (events sit between the thunks).
  exec->setProfiling(true);
  size_t before = api.calls.size();
  ASSERT_TRUE(exec->run().isOk());
  ASSERT_TRUE(exec->collectProfile().isOk());
  for (const std::string &c : work(before))
    EXPECT_EQ(c.rfind("cuLaunchKernelEx", 0), std::string::npos) << c;
}

// A driver that refuses the launch attribute: that kernel and every later
// one launch plainly, with one note; the values stay right.
TEST_F(CudaExecutableTest, RefusedProgrammaticLaunchFallsBackToPlainLaunches) {
  options.graphs = false;
  api.failCall = "cuLaunchKernelEx";
  auto exec = make(programmaticPackage());
  ASSERT_TRUE(exec);
  EXPECT_EQ(stepChecked(*exec),
            (std::vector<std::string>{"cublasLtMatmul",
                                      "cuLaunchKernelEx kiln_relu grid=1056 block=256",
                                      "cuLaunchKernel kiln_relu grid=1056 block=256",
                                      "cuLaunchKernel kiln_sgd grid=3 block=256",
                                      "cudaMemcpyAsync D2D 256",
                                      "cuLaunchKernel kiln_relu grid=1056 block=256",
                                      "cudaMemcpyAsync D2D 512"}));
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("programmatic dependent launch failed at thunk 1 "
                          "(kernel 'relu', kiln_relu) (cuLaunchKernelEx failed"),
            std::string::npos)
      << notes[0];
  EXPECT_EQ(exec->programmaticFallbackReason(), notes[0].substr(11));
  EXPECT_FALSE(exec->programmaticLaunch(1));
  ASSERT_TRUE(exec->run().isOk());
  EXPECT_EQ(api.count("cuLaunchKernelEx"), 1u);
  EXPECT_EQ(notes.size(), 1u);
}

TEST_F(CudaExecutableTest, ProgrammaticLaunchNeedsWaitingCodeForSm90) {
  options.graphs = false;
  auto launchedEarly = [&](std::unique_ptr<CudaExecutable> exec) {
    std::vector<size_t> early;
    for (size_t i = 0; exec && i < exec->package().thunks.size(); ++i)
      if (exec->programmaticLaunch(i))
        early.push_back(i);
    return early;
  };
  const std::vector<size_t> both{1, 2};
  // The step's first thunk never starts early.
  LoadedPackage first = programmaticPackage();
  std::swap(first.thunks[0], first.thunks[2]); // sgd, relu, gemm, copy, relu
  EXPECT_EQ(launchedEarly(make(std::move(first))), (std::vector<size_t>{1}));
  // The NVRTC path compiles for the device (sm_90): its code waits.
  LoadedPackage source = programmaticPackage({}, 0);
  EXPECT_EQ(launchedEarly(make(std::move(source))), both);
  // sm_80 code (PTX JIT-compiled for the sm_90 device) has no wait.
  EXPECT_TRUE(launchedEarly(make(programmaticPackage({80}, 80))).empty());
  // Kernels whose code does not say it waits (a 1.4 package).
  EXPECT_TRUE(launchedEarly(make(mlpPackage())).empty());
  // Off.
  options.programmaticLaunch = false;
  EXPECT_TRUE(launchedEarly(make(programmaticPackage())).empty());
  options.programmaticLaunch = true;
  // An sm_80 device has no programmatic dependent launch.
  api.device.major = 8;
  EXPECT_TRUE(launchedEarly(make(programmaticPackage())).empty());
}

// cuBLASLt's definition, column-major: D[r + c*ldd] = sum_l opA(r, l) *
// opB(l, c), op(X)(i, j) = X[i + j*ld] or, transposed, X[j + i*ld].
void columnMajorGemm(const LtGemm &lt, const float *a, const float *b, float *d) {
  for (int bt = 0; bt < lt.batch; ++bt)
    for (uint64_t r = 0; r < lt.rows; ++r)
      for (uint64_t c = 0; c < lt.cols; ++c) {
        double acc = 0;
        for (uint64_t l = 0; l < lt.inner; ++l) {
          const float *ab = a + bt * lt.strideA, *bb = b + bt * lt.strideB;
          float av = lt.transA ? ab[l + r * lt.lda] : ab[r + l * lt.lda];
          float bv = lt.transB ? bb[c + l * lt.ldb] : bb[l + c * lt.ldb];
          acc += double(av) * bv;
        }
        d[bt * lt.strideD + r + c * lt.ldd] = float(acc);
      }
}

// An eval step for mlpPackage's: y2 = relu(x2 . w), laid out its own way
// (its temporaries first, its batch and w after them).
LoadedPackage evalPackage() {
  LoadedPackage p;
  p.target.kind = TargetKind::Cuda;
  p.target.smArchs = {80, 90};
  p.buffers = {f32Buffer("dot2", PkgRole::None, {M, N}, 0),
               f32Buffer("y2", PkgRole::Output, {M, N}, 256),
               f32Buffer("x2", PkgRole::Input, {M, K}, 512),
               f32Buffer("w", PkgRole::Parameter, {K, N}, 640)};
  p.arenaSize = 1152;
  p.kernels = {kernel("relu", "kiln_relu", 5000, {80, 90}, 80)};
  PackageThunk relu;
  relu.kernel = 0;
  relu.operands = {0};
  relu.results = {1};
  p.thunks = {gemmThunk(M, N, K, 2, 3, 0), relu};
  p.inputs = {signatureEntry(p, "x2", PkgRole::Input, 2),
              signatureEntry(p, "w", PkgRole::Parameter, 3)};
  p.outputs = {signatureEntry(p, "y2", PkgRole::Output, 1)};
  return p;
}

// The eval step in the training step's memory (SharedArena.h): it reads w
// from the training step's buffer (the updated values, never copied), its
// temporaries take the training step's free space and its batch memory of
// its own, on the training step's stream and cuBLASLt workspace; each
// step's outputs the other's run wrote over are refused until it runs
// again, and the training step's parameters survive the eval step's load
// (its autotuning fills only its own buffers) and its initialize().
TEST_F(CudaExecutableTest, EvalStepRunsInTheTrainingStepsMemory) {
  api.gemmAlgorithms = 2; // the eval step's load autotunes its GEMM
  api.gemmAlgorithmMs = [](const GemmDesc &, int algorithm) {
    return 1.0 + algorithm;
  };
  options.autotuneCache = "off";
  auto train = make(mlpPackage());
  ASSERT_TRUE(train);
  ASSERT_TRUE(train->initialize().isOk());
  std::vector<float> w0(K * N);
  ASSERT_TRUE(train->readBuffer(1, w0.data()).isOk());

  size_t mallocs = api.count("cudaMalloc "),
         streams = api.count("cudaStreamCreate");
  options.shareMemoryWith = train.get();
  options.boundInputs = {{1, 1}};
  auto eval = make(evalPackage());
  ASSERT_TRUE(eval);
  // Its own memory holds x2 alone; no arena, workspace or step stream.
  EXPECT_EQ(api.count("cudaMalloc ") - mallocs, 1u);
  EXPECT_EQ(api.count("cudaMalloc 128"), 1u);
  EXPECT_EQ(api.count("cudaStreamCreate") - streams, 1u); // its copy stream
  EXPECT_EQ(eval->memory().arena, 128u);
  EXPECT_EQ(eval->memory().gemmWorkspace, 0u);
  EXPECT_EQ(eval->memory().sharedArena, 512u);
  EXPECT_EQ(describeStepMemory(eval->memory()), "own memory 128 B");
  auto *base = static_cast<uint8_t *>(train->deviceBuffer(0));
  EXPECT_EQ(eval->deviceBuffer(3), train->deviceBuffer(1)); // w, in place
  EXPECT_EQ(static_cast<uint8_t *>(eval->deviceBuffer(0)) - base, 640);
  EXPECT_EQ(static_cast<uint8_t *>(eval->deviceBuffer(1)) - base, 896);
  const SharedArenaPlan *plan = eval->sharedArena();
  ASSERT_NE(plan, nullptr);
  EXPECT_EQ(plan->hostFreeBytes, 1280u);
  EXPECT_EQ(plan->boundBytes, 512u);
  EXPECT_EQ(describeSharedArena(*plan, "training step"),
            "runs in 512 B of the training step's 1.25 KiB free between its "
            "steps, reading 512 B of its inputs there");
  ASSERT_TRUE(eval->initialize().isOk());
  std::vector<float> w(K * N);
  ASSERT_TRUE(train->readBuffer(1, w.data()).isOk());
  EXPECT_EQ(w, w0) << "the eval step's load or initialize() wrote over w";
  EXPECT_FALSE(eval->writeBuffer(3, w.data()).isOk());

  std::vector<float> x = randomFloats(M * K, 3), x2 = randomFloats(M * K, 4);
  std::vector<float> y(M * N), yCopy(M * N), y2(M * N);
  for (int round = 0; round < 3; ++round) {
    ASSERT_TRUE(train->writeInput(0, x.data()).isOk());
    ASSERT_TRUE(train->readBuffer(1, w.data()).isOk());
    ASSERT_TRUE(train->run().isOk());
    ASSERT_TRUE(train->readOutput(0, y.data()).isOk());
    expectY(y, x, w, "round " + std::to_string(round) + " y");
    // The step halved w; the eval step reads the new values.
    for (float &v : w)
      v *= 0.5f;
    ASSERT_TRUE(eval->writeInput(0, x2.data()).isOk());
    ASSERT_TRUE(eval->run().isOk());
    ASSERT_TRUE(eval->readOutput(0, y2.data()).isOk());
    expectY(y2, x2, w, "round " + std::to_string(round) + " y2");
    // Its temporaries took y's bytes, not y_copy's.
    Status stale = train->readOutput(0, y.data());
    EXPECT_FALSE(stale.isOk());
    EXPECT_NE(stale.message().find("reading buffer 'y': the step that shares "
                                   "this one's memory ran after this one's "
                                   "last step and wrote over it"),
              std::string::npos)
        << stale.message();
    ASSERT_TRUE(train->readOutput(2, yCopy.data()).isOk());
    EXPECT_EQ(yCopy, y) << "y_copy, which the eval step left alone";
    ASSERT_TRUE(train->run().isOk());
    EXPECT_FALSE(eval->readOutput(0, y2.data()).isOk());
    ASSERT_TRUE(train->readOutput(0, y.data()).isOk());
    x = randomFloats(M * K, 10 + round);
  }
  // The second and later eval steps ran as a graph, on the training
  // step's stream.
  EXPECT_TRUE(eval->usingGraph());
  // A step in the eval step's memory would be placed against the wrong
  // layout: refused.
  options.shareMemoryWith = eval.get();
  options.boundInputs = {};
  std::string chained = refusal(evalPackage());
  EXPECT_NE(chained.find("that step runs in another step's memory itself"),
            std::string::npos)
      << chained;
  // The training step's arena, stream and workspace outlive it while the
  // eval step runs in them (the fake refuses a freed pointer).
  ASSERT_TRUE(train->readBuffer(1, w.data()).isOk());
  size_t frees = api.count("cudaFree");
  train.reset();
  EXPECT_EQ(api.count("cudaFree"), frees) << "freed under the eval step";
  ASSERT_TRUE(eval->writeInput(0, x2.data()).isOk());
  ASSERT_TRUE(eval->run().isOk());
  ASSERT_TRUE(eval->readOutput(0, y2.data()).isOk());
  expectY(y2, x2, w, "after the training step: y2");
  eval.reset();
  // Its own memory, then the arena and the workspace.
  EXPECT_EQ(api.count("cudaFree"), frees + 3);
}

// An eval step in memory of its own (the fallback) takes the trained
// parameters device to device: copyBuffer waits for the training step's
// stream, copies on the device and never through the host; mismatched
// sizes, a bound input and an overwritten source are refused by name.
TEST_F(CudaExecutableTest, ParametersCopyBetweenStepsOnTheDevice) {
  auto train = make(mlpPackage());
  ASSERT_TRUE(train);
  ASSERT_TRUE(train->initialize().isOk());
  std::vector<float> x = randomFloats(M * K, 3), x2 = randomFloats(M * K, 4);
  ASSERT_TRUE(train->writeInput(0, x.data()).isOk());
  ASSERT_TRUE(train->run().isOk()); // w <- w / 2 on its stream
  auto eval = make(evalPackage());
  ASSERT_TRUE(eval);
  size_t d2d = api.count("cudaMemcpyAsync D2D 512"),
         d2h = api.count("cudaMemcpyAsync D2H"),
         h2d = api.count("cudaMemcpyAsync H2D");
  ASSERT_TRUE(eval->copyBuffer(3, *train, 1).isOk());
  EXPECT_EQ(api.count("cudaMemcpyAsync D2D 512"), d2d + 1);
  EXPECT_EQ(api.count("cudaMemcpyAsync D2H"), d2h);
  EXPECT_EQ(api.count("cudaMemcpyAsync H2D"), h2d);
  std::vector<float> w(K * N), w2(K * N), y2(M * N);
  ASSERT_TRUE(train->readBuffer(1, w.data()).isOk());
  ASSERT_TRUE(eval->readBuffer(3, w2.data()).isOk());
  EXPECT_EQ(w2, w);
  ASSERT_TRUE(eval->writeInput(0, x2.data()).isOk());
  ASSERT_TRUE(eval->run().isOk());
  ASSERT_TRUE(eval->readOutput(0, y2.data()).isOk());
  expectY(y2, x2, w, "y2");

  Status sizes = eval->copyBuffer(2, *train, 1);
  EXPECT_FALSE(sizes.isOk());
  EXPECT_EQ(sizes.message(),
            "copying buffer 'w' into 'x2': 512 bytes into 128");
  EXPECT_FALSE(eval->copyBuffer(9, *train, 1).isOk());
  EXPECT_FALSE(eval->copyBuffer(3, *train, 9).isOk());
  // Into a bound input of a step in the training step's memory.
  options.shareMemoryWith = train.get();
  options.boundInputs = {{1, 1}};
  auto shared = make(evalPackage());
  ASSERT_TRUE(shared);
  Status bound = shared->copyBuffer(3, *train, 1);
  EXPECT_FALSE(bound.isOk());
  EXPECT_NE(bound.message().find("'w' is read in place from the buffer of "
                                 "the step this one shares memory with"),
            std::string::npos)
      << bound.message();
  // From a training step's output the shared eval step wrote over.
  ASSERT_TRUE(shared->writeInput(0, x2.data()).isOk());
  ASSERT_TRUE(shared->run().isOk());
  Status stale = eval->copyBuffer(1, *train, 3);
  EXPECT_FALSE(stale.isOk());
  EXPECT_NE(stale.message().find("copying buffer 'y' into 'y2': the step "
                                 "that shares the source's memory ran after "
                                 "its last step"),
            std::string::npos)
      << stale.message();
}

// What cannot run in another step's memory is refused, by name.
TEST_F(CudaExecutableTest, EvalStepThatCannotShareIsRefusedByName) {
  auto train = make(mlpPackage());
  ASSERT_TRUE(train);
  options.shareMemoryWith = train.get();
  options.boundInputs = {{1, 1}};
  // A bound input the eval step writes.
  LoadedPackage writes = evalPackage();
  writes.thunks[1].results = {3};
  writes.buffers[3].shape = {M, N};
  writes.buffers[3].size = 4 * M * N;
  writes.inputs[1].shape = {M, N};
  std::string m = refusal(writes);
  EXPECT_NE(m.find("running in another step's memory: guest input 1 ('w') "
                   "cannot be read from host input 1 ('w'): expected the same "
                   "dtype and shape"),
            std::string::npos)
      << m;
  writes = evalPackage();
  writes.thunks[1].results = {3};
  m = refusal(writes);
  EXPECT_NE(m.find("thunk 1 writes buffer 3 ('w') over it"), std::string::npos)
      << m;
  // A collective.
  LoadedPackage collective = evalPackage();
  PackageThunk ar;
  ar.kind = ThunkKind::Collective;
  ar.hasCollective = true;
  ar.operands = {1};
  ar.results = {1};
  collective.thunks.push_back(ar);
  m = refusal(collective);
  EXPECT_NE(m.find("thunk 2 (all_reduce): a step with collectives runs in "
                   "memory of its own"),
            std::string::npos)
      << m;
}

TEST(LowerGemmToLt, RowMajorGemmsAreColumnMajorProductsOfTheSwappedOperands) {
  for (bool tl : {false, true})
    for (bool tr : {false, true}) {
      GemmDesc desc;
      desc.params.m = 3;
      desc.params.n = 5;
      desc.params.k = 7;
      desc.params.batch = 2;
      desc.params.transposeLhs = tl;
      desc.params.transposeRhs = tr;
      std::vector<float> lhs = randomFloats(2 * 3 * 7, 3);
      std::vector<float> rhs = randomFloats(2 * 7 * 5, 4);
      std::vector<float> want(2 * 3 * 5), got(2 * 3 * 5);
      kiln::runtime::cuda::testing::hostGemm(desc, lhs.data(), rhs.data(),
                                             want.data(), nullptr, nullptr);
      LtGemm lt = lowerGemmToLt(desc.params);
      EXPECT_EQ(lt.transA, tr);
      EXPECT_EQ(lt.transB, tl);
      EXPECT_EQ(lt.aRows * lt.aCols, 35u);
      EXPECT_EQ(lt.bRows * lt.bCols, 21u);
      // A is the rhs, B the lhs.
      columnMajorGemm(lt, rhs.data(), lhs.data(), got.data());
      for (size_t i = 0; i < want.size(); ++i)
        EXPECT_NEAR(got[i], want[i], 1e-5) << "transposeLhs " << tl
                                           << " transposeRhs " << tr << " " << i;
    }
}

TEST(CheckGemmDesc, RefusesWhatCublasLtCannotRun) {
  GemmDesc desc;
  desc.params.m = 2;
  desc.params.n = 2;
  desc.params.k = 0;
  EXPECT_FALSE(checkGemmDesc(desc).isOk());
  desc.params.k = 2;
  EXPECT_TRUE(checkGemmDesc(desc).isOk());
  desc.dtype = PkgDType::I32;
  EXPECT_NE(checkGemmDesc(desc).message().find("found i32"), std::string::npos);
  desc.dtype = PkgDType::BF16;
  desc.epilogue = GemmEpilogue::BiasGelu;
  desc.params.batch = 2;
  EXPECT_NE(checkGemmDesc(desc).message().find("bias+gelu epilogue needs batch 1"),
            std::string::npos);
  // An f32 result: half operands, no epilogue, no C; the plan's key says so.
  desc.epilogue = GemmEpilogue::None;
  desc.f32Output = true;
  EXPECT_TRUE(checkGemmDesc(desc).isOk());
  EXPECT_EQ(gemmOutputDType(desc), PkgDType::F32);
  EXPECT_NE(gemmDescKey(desc, 0).find(" out=f32"), std::string::npos);
  desc.f32Output = false;
  EXPECT_EQ(gemmOutputDType(desc), PkgDType::BF16);
  EXPECT_EQ(gemmDescKey(desc, 0).find("out="), std::string::npos);
  desc.f32Output = true;
  desc.epilogue = GemmEpilogue::Bias;
  desc.params.batch = 1;
  EXPECT_NE(checkGemmDesc(desc).message().find(
                "an f32 result goes with f16 or bf16 operands, no epilogue and "
                "no C, not bf16 operands, the bias epilogue"),
            std::string::npos)
      << checkGemmDesc(desc).message();
  desc.epilogue = GemmEpilogue::None;
  desc.residual = true;
  EXPECT_NE(checkGemmDesc(desc).message().find("a C input"), std::string::npos);
  desc.residual = false;
  desc.dtype = PkgDType::F32;
  EXPECT_NE(checkGemmDesc(desc).message().find("not f32 operands"),
            std::string::npos);
}

} // namespace

namespace {

// The real table on this machine, driver or not: NVRTC needs no GPU, so its
// half of the table is checked wherever the toolkit's libraries are.
TEST(RealCudaApiTest, NvrtcCompilesWithoutADriver) {
  StatusOr<std::unique_ptr<CudaApi>> loaded = loadCudaApi(/*requireDriver=*/false);
  if (!loaded.isOk())
    GTEST_SKIP() << "no CUDA runtime library: " << loaded.status().message();
  CudaApi &api = *loaded.value();
  const char *source =
      "#include <cuda_bf16.h>\n"
      "extern \"C\" __global__ void kiln_scale(const __nv_bfloat16 *x, float *y) {\n"
      "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
      "  y[i] = 2.0f * __bfloat162float(x[i]);\n"
      "}\n";
  std::vector<uint8_t> cubin;
  std::string log;
  Status s = api.nvrtcCompile(source, "kiln_scale", 90, cubin, log);
  if (!s.isOk() && s.message().find("NVRTC is not available") != std::string::npos)
    GTEST_SKIP() << s.message();
  ASSERT_TRUE(s.isOk()) << s.message();
  ASSERT_GT(cubin.size(), 4u);
  EXPECT_EQ(std::string(cubin.begin(), cubin.begin() + 4), "\x7f" "ELF");
  // A compile error names the call and carries NVRTC's log.
  s = api.nvrtcCompile("extern \"C\" __global__ void k() { undeclared(); }", "k",
                       90, cubin, log);
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("nvrtcCompileProgram for sm_90 failed"),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("undeclared"), std::string::npos) << s.message();
  if (!api.deviceInfo(0).isOk()) {
    // No driver here: the driver's calls say so, naming the call.
    CudaModule module = nullptr;
    s = api.moduleLoadData(&module, cubin.data(), cubin.size());
    ASSERT_FALSE(s.isOk());
    EXPECT_EQ(s.message().find("cuModuleLoadData: no CUDA driver ("), 0u)
        << s.message();
  }
  EXPECT_NE(api.describe().find("libcublasLt"), std::string::npos) << api.describe();
  // cuBLASLt's symbols all resolved: a plan fails (if at all) inside
  // cuBLASLt, not for a missing library.
  GemmDesc desc;
  desc.params.m = desc.params.n = desc.params.k = 16;
  GemmPlan plan = nullptr;
  s = api.gemmPlan(&plan, desc, 1 << 20);
  if (s.isOk())
    api.gemmDestroy(plan);
  else
    EXPECT_EQ(s.message().find("cuBLASLt is not available"), std::string::npos)
        << s.message();
  std::printf("note: cuBLASLt plan without a GPU: %s\n",
              s.isOk() ? "ok" : s.message().c_str());
}

} // namespace
