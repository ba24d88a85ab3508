//===- CudaBackendTest.cpp - `kiln train --device=cuda` without a GPU -----===//
//
// The CUDA training backend (tools/kiln/lib/CudaBackend.h) end to end on a
// fake CUDA table whose NVRTC compiles each kernel's source for the host
// under codegen/cuda/CudaEmulation.h: the backend compiles the model for
// CUDA (source-only packages, so every kernel reaches the runtime through
// NVRTC), feeds batches through the pinned staging, reads the loss, reads
// and writes the checkpointed state and runs the eval package. Compared
// with the reference backend (the interpreter) on the same synthetic
// batches: losses, state after the steps, eval loss and predictions; and
// LeNet-5 (convolutions through runtime/cuda/CudaConv.h) step by step.
//
//===----------------------------------------------------------------------===//

#include "tests/unit/cuda/FakeCudaApi.h"
#include "tests/unit/cuda/HostKernels.h"
#include "tests/unit/cuda/RuntimeHostKernels.h"

#include "runtime/Units.h"
#include "runtime/cuda/CudaConv.h"
#include "runtime/data/Dataset.h"
#include "runtime/data/Sampler.h"
#include "runtime/dist/LocalCommunicator.h"
#include "serialize/PackageWriter.h"
#include "tools/kiln/lib/CudaBackend.h"
#include "tools/kiln/lib/ModuleLoader.h"
#include "tools/kiln/lib/Zoo.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <mutex>
#include <thread>

#include <cmath>

namespace {

using namespace kiln;
namespace rt = kiln::runtime;

// A fake whose NVRTC builds the kernel for the host (HostKernels.h).
class HostNvrtcFake : public rt::cuda::testing::FakeCudaApi {
public:
  rt::Status nvrtcCompile(const std::string &source, const std::string &name,
                          unsigned arch, std::vector<uint8_t> &cubin,
                          std::string &log) override {
    // The attention's module (runtime/cuda/CudaAttention.h): its kernels
    // built for the host once per process.
    if (name == "kiln_attention") {
      std::string error;
      const auto &kernels = rt::cuda::testing::hostAttentionKernels(error);
      if (!error.empty())
        return rt::Status::error(error);
      hostKernels.insert(kernels.begin(), kernels.end());
      return FakeCudaApi::nvrtcCompile(source, name, arch, cubin, log);
    }
    // The convolutions' module (runtime/cuda/CudaConv.h) has many kernels:
    // found by name.
    bool conv = name == "kiln_conv";
    std::string error;
    std::map<std::string, rt::cuda::testing::HostKernel> built =
        rt::cuda::testing::buildHostKernels(
            source,
            conv ? rt::cuda::convKernelEntryPoints() : std::vector<std::string>{name},
            name, error);
    if (!error.empty())
      return rt::Status::error(error);
    if (conv) {
      hostKernels.insert(built.begin(), built.end());
      return FakeCudaApi::nvrtcCompile(source, name, arch, cubin, log);
    }
    if (rt::Status s = FakeCudaApi::nvrtcCompile(source, name, arch, cubin, log);
        !s.isOk())
      return s;
    // The fake's image (its text, up to the NUL) names this compile alone.
    hostKernelsByImage[reinterpret_cast<const char *>(cubin.data())] =
        built.at(name);
    return rt::Status::ok();
  }
};

std::string diffState(cli::TrainBackend &a, cli::TrainBackend &b, double rel) {
  if (a.state().size() != b.state().size())
    return "state sizes differ";
  for (size_t i = 0; i < a.state().size(); ++i) {
    std::vector<double> x = a.readState(i).toDoubles(),
                        y = b.readState(i).toDoubles();
    if (x.size() != y.size())
      return a.state()[i].name + ": sizes differ";
    for (size_t j = 0; j < x.size(); ++j)
      if (!(std::fabs(x[j] - y[j]) <=
            rel * std::max({1e-2, std::fabs(x[j]), std::fabs(y[j])})))
        return a.state()[i].name + "[" + std::to_string(j) +
               "]: " + std::to_string(x[j]) + " vs " + std::to_string(y[j]);
  }
  return "";
}

// |build|'s module for a fresh context, printed to |path|.
void writeModel(const std::string &path,
                const std::function<mlir::OwningOpRef<mlir::ModuleOp>(
                    mlir::MLIRContext *)> &build) {
  mlir::DialectRegistry registry;
  cli::registerKilnDialects(registry);
  mlir::MLIRContext context(registry);
  context.loadAllAvailableDialects();
  mlir::OwningOpRef<mlir::ModuleOp> module = build(&context);
  ASSERT_TRUE(module);
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec);
  ASSERT_FALSE(ec);
  module->print(os);
}

// A CUDA backend on a fake device (one SM, kernels through its NVRTC) and
// the reference backend, and where they write their messages.
struct Backends {
  std::string errors;
  llvm::raw_string_ostream errs{errors}, outs{errors};
  HostNvrtcFake api;
  std::unique_ptr<cli::TrainBackend> gpu, ref;
};

// Both backends of |options| in |b|, with the same initial parameters;
// |tf32| for the CUDA one's f32 matmuls.
void createBackends(const cli::BackendOptions &options, Backends &b,
                    bool tf32 = false) {
  b.api.device.multiprocessors = 1;
  cli::CudaBackendOptions cuda;
  cuda.tf32 = tf32;
  cuda.api = &b.api;
  cuda.cubins = false;
  // Each kernel then runs on copies of its arguments: a store outside them
  // is a fault that fails the step (FakeCudaApi::kernelArgs).
  cuda.loaded = [&b](const rt::LoadedPackage &pkg) { b.api.learnPackage(pkg); };
  b.gpu = cli::createCudaBackend(options, cuda, "test", b.outs, b.errs);
  ASSERT_TRUE(b.gpu) << b.errs.str();
  b.ref = cli::createReferenceBackend(options, "test", b.errs);
  ASSERT_TRUE(b.ref) << b.errs.str();
  EXPECT_EQ(diffState(*b.gpu, *b.ref, 1e-6), "") << "initial parameters";
}

// Training steps |first| .. |first| + |count| - 1 of both backends of |b|,
// step i on the rows |rows(i)| of |data|: the same loss each step, within
// |tolerance| of the reference's (relative, at least 1 in magnitude).
void stepBoth(Backends &b, const rt::Dataset &data, int first, int count,
              const std::function<std::vector<int64_t>(int)> &rows,
              double tolerance = 1e-5) {
  cli::TrainBackend &gpu = *b.gpu, &ref = *b.ref;
  llvm::raw_string_ostream &errs = b.errs;
  for (int step = first; step < first + count; ++step) {
    rt::StatusOr<rt::Batch> batch = rt::assembleBatch(data, rows(step));
    ASSERT_TRUE(batch.isOk());
    gpu.setStepCounter(step);
    ref.setStepCounter(step);
    double gpuLoss = 0, refLoss = 0;
    ASSERT_TRUE(gpu.step(batch.value(), gpuLoss, errs)) << errs.str();
    ASSERT_TRUE(ref.step(batch.value(), refLoss, errs)) << errs.str();
    EXPECT_NEAR(gpuLoss, refLoss, tolerance * std::max(1.0, std::fabs(refLoss)))
        << "step " << step;
  }
}

// Writes every state entry of the reference backend times |factor| into
// both backends of |b| (as a resume writes a checkpoint's).
void scaleState(Backends &b, float factor) {
  for (size_t i = 0; i < b.gpu->state().size(); ++i) {
    runtime::TensorValues v = b.ref->readState(i);
    for (int64_t j = 0; j < v.size(); ++j)
      v.set(j, v[j] * factor);
    std::string error;
    ASSERT_TRUE(b.gpu->writeState(i, v, error)) << error;
    ASSERT_TRUE(b.ref->writeState(i, v, error)) << error;
  }
}

// The zoo MLP's batch of step |step|: rows 8 x step .. 8 x step + 7.
std::vector<int64_t> mlpRows(int step) {
  std::vector<int64_t> indices;
  for (int i = 0; i < 8; ++i)
    indices.push_back(step * 8 + i);
  return indices;
}

// Writes a 24-16-10 MLP (batch 8) into a new directory |dir| and returns
// the backend options that train it, with packages in |dir| too.
void mlpOptions(llvm::SmallString<128> &dir, cli::BackendOptions &options) {
  ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("kiln-cuda-backend", dir));
  std::string model = (dir + "/mlp.mlir").str();
  writeModel(model, [](mlir::MLIRContext *context) {
    cli::MlpOptions mlp;
    mlp.layers = {24, 16, 10};
    mlp.batch = 8;
    return cli::buildMlp(context, mlp);
  });
  options.input = model;
  options.packageDir = (dir + "/packages").str();
}

// --tf32=on reaches every f32 GEMM the steps run (cuBLASLt's compute
// type is then CUBLAS_COMPUTE_32F_FAST_TF32) and the backend's first line
// says so; off (the default, as PyTorch's), none.
TEST(CudaBackendTest, Tf32FlagReachesEveryF32Gemm) {
  for (bool tf32 : {false, true}) {
    llvm::SmallString<128> dir;
    cli::BackendOptions options;
    mlpOptions(dir, options);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    options.wantEval = true;
    Backends b;
    createBackends(options, b, tf32);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    EXPECT_EQ(b.errs.str().find("test: backend cuda, device 0: Fake H200 "
                                "(sm_90, 1 SMs), f32 matmuls in TF32\n") !=
                  std::string::npos,
              tf32)
        << b.errs.str();
    auto data = rt::SyntheticDataset::create(b.gpu->dataSpecs(), 16, 3);
    auto evalData = rt::SyntheticDataset::create(b.gpu->evalSpecs(), 16, 4);
    ASSERT_TRUE(data.isOk() && evalData.isOk());
    rt::StatusOr<rt::Batch> batch =
        rt::assembleBatch(*data.value(), mlpRows(0));
    rt::StatusOr<rt::Batch> evalBatch =
        rt::assembleBatch(*evalData.value(), mlpRows(1));
    ASSERT_TRUE(batch.isOk() && evalBatch.isOk());
    double loss = 0;
    ASSERT_TRUE(b.gpu->step(batch.value(), loss, b.errs)) << b.errs.str();
    cli::EvalOutput out;
    ASSERT_TRUE(b.gpu->evaluate(evalBatch.value(), out, b.errs))
        << b.errs.str();
    size_t f32Gemms = 0;
    for (const auto &gemm : b.api.gemms)
      if (gemm.desc.dtype == rt::PkgDType::F32) {
        ++f32Gemms;
        EXPECT_EQ(gemm.desc.allowTf32, tf32);
      }
    // The step's forward and backward GEMMs and the eval step's forward.
    EXPECT_GE(f32Gemms, 5u);
    b.gpu.reset();
    llvm::sys::fs::remove_directories(dir);
  }
}

// kiln train --profile on a GPU: every thunk of the step timed by its
// events once per profiled step (graph launches stop meanwhile), named as
// the package names it, and placed on the last step's timeline; turning it
// off clears the times, and the steps' losses stay the reference
// backend's. The fake's clock advances 1 ms per kernel and 2 ms per GEMM.
TEST(CudaBackendTest, ProfileTimesEveryThunkOfTheStep) {
  llvm::SmallString<128> dir;
  cli::BackendOptions options;
  mlpOptions(dir, options);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  Backends b;
  b.api.launchMs = [](const std::string &) { return 1.0; };
  b.api.gemmAlgorithmMs = [](const rt::cuda::GemmDesc &, int) { return 2.0; };
  createBackends(options, b);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  auto data = rt::SyntheticDataset::create(b.gpu->dataSpecs(), 64, 3);
  ASSERT_TRUE(data.isOk());
  stepBoth(b, *data.value(), 0, 2, mlpRows); // the plain step, the capture
  std::string error;
  ASSERT_TRUE(b.gpu->setProfiling(true, error)) << error;
  stepBoth(b, *data.value(), 2, 2, mlpRows);
  // The timeline's zero is the host's time the last step began enqueueing.
  auto before = std::chrono::steady_clock::now();
  stepBoth(b, *data.value(), 4, 1, mlpRows);
  auto after = std::chrono::steady_clock::now();
  EXPECT_GE(b.gpu->profileStepStart(), before);
  EXPECT_LE(b.gpu->profileStepStart(), after);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  std::vector<cli::ThunkTime> rows = b.gpu->profile();
  rt::StatusOr<rt::LoadedPackage> step =
      rt::loadPackage(options.packageDir + "/step.kpkg");
  ASSERT_TRUE(step.isOk()) << step.status().message();
  ASSERT_EQ(rows.size(), step->thunks.size());
  size_t gemms = 0;
  double start = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i].calls, 3u) << "thunk " << i;
    EXPECT_EQ(rows[i].kind, rt::pkgThunkKindName(step.value(), i));
    EXPECT_EQ(rows[i].what, rt::pkgDescribeThunk(step.value(), i));
    double cost = rows[i].kind == "kernel" ? 1 : rows[i].kind == "gemm" ? 2 : 0;
    EXPECT_DOUBLE_EQ(rows[i].ms, 3 * cost) << "thunk " << i;
    EXPECT_DOUBLE_EQ(rows[i].lastMs, cost) << "thunk " << i;
    EXPECT_DOUBLE_EQ(rows[i].lastStartMs, start) << "thunk " << i;
    start += cost;
    gemms += rows[i].kind == "gemm";
  }
  EXPECT_GE(gemms, 4u) << "the MLP's forward and backward GEMMs";
  ASSERT_TRUE(b.gpu->setProfiling(false, error)) << error;
  EXPECT_TRUE(b.gpu->profile().empty() || b.gpu->profile().front().calls == 0);
  stepBoth(b, *data.value(), 5, 1, mlpRows);
  b.gpu.reset();
  llvm::sys::fs::remove_directories(dir);
}

// What nvidia-smi shows beside the step's own memory: the device as
// cudaMemGetInfo sees it, and what of it is outside the step (on the fake,
// exactly what another process holds).
TEST(CudaBackendTest, DeviceMemoryLineSaysWhatIsOutsideTheStep) {
  llvm::SmallString<128> dir;
  cli::BackendOptions options;
  mlpOptions(dir, options);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  Backends b;
  b.api.usedElsewhere = size_t(300) << 20;
  createBackends(options, b);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  std::string text = b.errs.str();
  size_t line = text.find("test: the device has ");
  ASSERT_NE(line, std::string::npos) << text;
  std::string got = text.substr(line, text.find('\n', line) - line);
  // The step's allocations, then 300 MiB more of the fake's 2 GiB.
  size_t free = 0, total = 0;
  ASSERT_TRUE(b.api.memGetInfo(&free, &total).isOk());
  std::string inUse = rt::formatBytes(total - free);
  EXPECT_EQ(got, "test: the device has " + inUse +
                     " in use of 2.00 GiB, "
                     "300.00 MiB of it outside the step (the CUDA context, the "
                     "modules, cuBLASLt's and NCCL's state, other processes)");
  b.gpu.reset();
  llvm::sys::fs::remove_directories(dir);
}

TEST(CudaBackendTest, TrainsLikeTheReferenceBackend) {
  llvm::SmallString<128> dir;
  cli::BackendOptions options;
  mlpOptions(dir, options);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  options.wantEval = true;
  Backends b;
  createBackends(options, b);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  std::unique_ptr<cli::TrainBackend> &gpu = b.gpu, &ref = b.ref;
  llvm::raw_string_ostream &errs = b.errs;
  HostNvrtcFake &api = b.api;
  EXPECT_NE(errs.str().find("test: backend cuda, device 0: Fake H200 "
                            "(sm_90, 1 SMs)"),
            std::string::npos)
      << errs.str();
  // What the training step took on the device, by part.
  EXPECT_NE(errs.str().find("test: device memory 32.0"), std::string::npos)
      << errs.str();
  EXPECT_NE(errs.str().find(" (arena "), std::string::npos);
  EXPECT_NE(errs.str().find(", cuBLASLt workspace 32.00 MiB)\n"),
            std::string::npos)
      << errs.str();
  // The eval step (wantEval) runs in the training step's memory: its
  // batch in memory of its own, the trained parameters read in place, its
  // temporaries in the training step's free space and its GEMMs on the
  // training step's cuBLASLt workspace.
  EXPECT_NE(errs.str().find("test: eval step's device memory 800 B (own "
                            "memory 800 B; it runs in "),
            std::string::npos)
      << errs.str();
  EXPECT_NE(errs.str().find(" of the training step's "), std::string::npos);
  EXPECT_NE(errs.str().find(" free between its steps, reading 2.23 KiB of "
                            "its inputs there)\n"),
            std::string::npos)
      << errs.str();
  EXPECT_EQ(api.count("cudaMalloc 33554432"), 1u) << "one cuBLASLt workspace";
  EXPECT_STREQ(gpu->name(), "cuda");
  ASSERT_EQ(gpu->batch(), 8);
  ASSERT_TRUE(gpu->hasEval());
  ASSERT_TRUE(gpu->evalHasPredictions());

  auto data = rt::SyntheticDataset::create(gpu->dataSpecs(), 64, 3);
  ASSERT_TRUE(data.isOk()) << data.status().message();
  stepBoth(b, *data.value(), 0, 4, mlpRows);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  EXPECT_EQ(diffState(*gpu, *ref, 1e-4), "") << "after 4 steps";

  // Writing the state (a resume) is read back and trained from.
  scaleState(b, 0.5f);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  EXPECT_EQ(diffState(*gpu, *ref, 0), "") << "written state";

  std::vector<int64_t> indices;
  for (int i = 0; i < gpu->batch(); ++i)
    indices.push_back(40 + i);
  auto evalData = rt::SyntheticDataset::create(gpu->evalSpecs(), 64, 4);
  ASSERT_TRUE(evalData.isOk());
  rt::StatusOr<rt::Batch> batch = rt::assembleBatch(*evalData.value(), indices);
  ASSERT_TRUE(batch.isOk());
  cli::EvalOutput gpuOut, refOut;
  ASSERT_TRUE(gpu->evaluate(batch.value(), gpuOut, errs)) << errs.str();
  ASSERT_TRUE(ref->evaluate(batch.value(), refOut, errs)) << errs.str();
  EXPECT_NEAR(gpuOut.loss, refOut.loss, 1e-5 * std::max(1.0, refOut.loss));
  // Each row's class, computed by the eval step on the device.
  EXPECT_EQ(gpuOut.predictions.size(), 8u);
  EXPECT_EQ(gpuOut.predictions, refOut.predictions);
  // Every kernel came through NVRTC; staged inputs used pinned memory.
  EXPECT_GT(api.nvrtcArchs.size(), 0u);
  EXPECT_GT(api.count("cudaMallocHost"), 0u);
  EXPECT_GT(api.count("cudaGraphLaunch"), 0u);
  gpu.reset();
  llvm::sys::fs::remove_directories(dir);
}

// A trainer of `kiln pack --target=cuda` hands the packages to the backend
// as bytes (createCudaPackageBackend): they train exactly as the backend
// that compiled and wrote them, and evaluate the same.
TEST(CudaBackendTest, PackagesGivenAsBytesTrainLikeTheCompiledModel) {
  llvm::SmallString<128> dir;
  cli::BackendOptions options;
  mlpOptions(dir, options);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  options.wantEval = true;
  Backends b;
  createBackends(options, b);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  auto read = [](const std::string &path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  cli::CudaPackageOptions package;
  package.input = "packed";
  package.trainPath = "packed:step";
  package.evalPath = "packed:eval";
  package.trainBytes = read(options.packageDir + "/step.kpkg");
  package.evalBytes = read(options.packageDir + "/eval.kpkg");
  ASSERT_FALSE(package.trainBytes.empty());
  ASSERT_FALSE(package.evalBytes.empty());
  // The packages are gone from disk: only the bytes remain.
  llvm::sys::fs::remove_directories(options.packageDir);
  HostNvrtcFake api;
  api.device.multiprocessors = 1;
  cli::CudaBackendOptions cuda;
  cuda.api = &api;
  cuda.loaded = [&api](const rt::LoadedPackage &pkg) { api.learnPackage(pkg); };
  cli::CudaPackageOptions alone = package; // for the eval step below
  std::unique_ptr<cli::TrainBackend> packed = cli::createCudaPackageBackend(
      std::move(package), cuda, "packed", b.outs, b.errs);
  ASSERT_TRUE(packed) << b.errs.str();
  ASSERT_TRUE(packed->hasEval());
  EXPECT_EQ(diffState(*packed, *b.gpu, 0), "") << "initial parameters";

  auto data = rt::SyntheticDataset::create(packed->dataSpecs(), 64, 3);
  ASSERT_TRUE(data.isOk()) << data.status().message();
  for (int step = 0; step < 4; ++step) {
    rt::StatusOr<rt::Batch> batch = rt::assembleBatch(*data.value(), mlpRows(step));
    ASSERT_TRUE(batch.isOk());
    packed->setStepCounter(step);
    b.gpu->setStepCounter(step);
    double packedLoss = 0, gpuLoss = 0;
    ASSERT_TRUE(packed->step(batch.value(), packedLoss, b.errs)) << b.errs.str();
    ASSERT_TRUE(b.gpu->step(batch.value(), gpuLoss, b.errs)) << b.errs.str();
    EXPECT_EQ(packedLoss, gpuLoss) << "step " << step;
  }
  EXPECT_EQ(diffState(*packed, *b.gpu, 0), "") << "after 4 steps";
  rt::StatusOr<rt::Batch> batch = rt::assembleBatch(*data.value(), mlpRows(5));
  ASSERT_TRUE(batch.isOk());
  cli::EvalOutput packedOut, gpuOut;
  ASSERT_TRUE(packed->evaluate(batch.value(), packedOut, b.errs)) << b.errs.str();
  ASSERT_TRUE(b.gpu->evaluate(batch.value(), gpuOut, b.errs)) << b.errs.str();
  EXPECT_EQ(packedOut.loss, gpuOut.loss);
  EXPECT_EQ(packedOut.predictions, gpuOut.predictions);

  // An eval step that writes a parameter (here a copy of it onto itself,
  // which changes nothing) cannot read it in place: it runs in memory of
  // its own, after a note, with the parameters copied before an eval, and
  // evaluates the same.
  rt::StatusOr<rt::LoadedPackage> evalPkg = rt::loadPackageFromBytes(
      reinterpret_cast<const uint8_t *>(alone.evalBytes.data()),
      alone.evalBytes.size());
  ASSERT_TRUE(evalPkg.isOk());
  int w = -1; // its first parameter
  for (size_t i = 0; i < evalPkg->inputs.size() && w < 0; ++i)
    if (evalPkg->inputs[i].role == rt::PkgRole::Parameter)
      w = int(i);
  ASSERT_GE(w, 0);
  const std::string name = evalPkg->inputs[w].name;
  rt::PackageThunk self;
  self.kind = rt::ThunkKind::Copy;
  self.operands = {evalPkg->inputs[w].buffer};
  self.results = {evalPkg->inputs[w].buffer};
  evalPkg->thunks.insert(evalPkg->thunks.begin(), self);
  rt::StatusOr<std::vector<uint8_t>> rewritten =
      serialize::writePackage(evalPkg.value());
  ASSERT_TRUE(rewritten.isOk()) << rewritten.status().message();
  alone.evalBytes.assign(rewritten->begin(), rewritten->end());
  std::string notes;
  llvm::raw_string_ostream notesOut(notes);
  std::unique_ptr<cli::TrainBackend> separate = cli::createCudaPackageBackend(
      std::move(alone), cuda, "alone", notesOut, b.errs);
  ASSERT_TRUE(separate) << b.errs.str();
  EXPECT_NE(notes.find("alone: note: packed (its eval step) runs in memory "
                       "of its own, with a copy of the parameters: guest "
                       "input "),
            std::string::npos)
      << notes;
  EXPECT_NE(notes.find("('" + name + "'): thunk 0 writes buffer "),
            std::string::npos)
      << notes;
  EXPECT_NE(notes.find("eval step's device memory 32.0"), std::string::npos)
      << notes;
  for (size_t i = 0; i < separate->state().size(); ++i) {
    std::string error;
    ASSERT_TRUE(separate->writeState(i, packed->readState(i), error)) << error;
  }
  cli::EvalOutput separateOut;
  ASSERT_TRUE(separate->evaluate(batch.value(), separateOut, b.errs))
      << b.errs.str();
  EXPECT_EQ(separateOut.loss, gpuOut.loss);
  EXPECT_EQ(separateOut.predictions, gpuOut.predictions);
  separate.reset();
  packed.reset();
  b.gpu.reset();
  llvm::sys::fs::remove_directories(dir);
}

// --amp=bf16: the step reads the parameters' bf16 copies, which the CUDA
// backend refills whenever it writes a parameter (a resume): after the
// state is tripled, the next step's loss is the reference backend's from
// the tripled parameters (stale copies would give another loss).
TEST(CudaBackendTest, WrittenParametersRefillTheirBF16Copies) {
  llvm::SmallString<128> dir;
  cli::BackendOptions options;
  mlpOptions(dir, options);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  options.pipeline.amp = AmpMode::bf16;
  Backends b;
  createBackends(options, b);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());

  auto data = rt::SyntheticDataset::create(b.gpu->dataSpecs(), 64, 3);
  ASSERT_TRUE(data.isOk()) << data.status().message();
  // bf16 rounds at other places on the two backends (docs/training.md).
  constexpr double kBF16Tolerance = 1e-2;
  stepBoth(b, *data.value(), 0, 2, mlpRows, kBF16Tolerance);
  scaleState(b, 3.0f);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  SCOPED_TRACE("after the write");
  stepBoth(b, *data.value(), 2, 1, mlpRows, kBF16Tolerance);
  b.gpu.reset();
  llvm::sys::fs::remove_directories(dir);
}

// LeNet-5 through the CUDA backend: its convolutions (forward and both
// gradients) run as CudaConv's kernels and GEMMs; three steps' losses and
// the parameters and Adam state after them match the reference backend,
// and so do the eval step's loss and predictions. The eval step, which
// runs in the training step's memory, also uses its convolution
// workspace: one allocation for both.
TEST(CudaBackendTest, LeNet5TrainsLikeTheReferenceBackend) {
  llvm::SmallString<128> dir;
  ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("kiln-cuda-backend", dir));
  std::string model = (dir + "/lenet5.mlir").str();
  writeModel(model, [](mlir::MLIRContext *context) {
    cli::LeNet5Options options;
    options.batch = 2;
    return cli::buildLeNet5(context, options);
  });
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  cli::BackendOptions options;
  options.input = model;
  options.packageDir = (dir + "/packages").str();
  options.wantEval = true;
  Backends b;
  createBackends(options, b);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  std::unique_ptr<cli::TrainBackend> &gpu = b.gpu, &ref = b.ref;
  HostNvrtcFake &api = b.api;
  auto data = rt::SyntheticDataset::create(gpu->dataSpecs(), 16, 3);
  ASSERT_TRUE(data.isOk()) << data.status().message();
  stepBoth(b, *data.value(), 0, 3, [](int step) {
    return std::vector<int64_t>{2 * step, 2 * step + 1};
  });
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  EXPECT_EQ(diffState(*gpu, *ref, 1e-4), "") << "after 3 steps";
  // The eval step, on the training step's convolution workspace.
  auto evalData = rt::SyntheticDataset::create(gpu->evalSpecs(), 16, 4);
  ASSERT_TRUE(evalData.isOk());
  rt::StatusOr<rt::Batch> batch = rt::assembleBatch(*evalData.value(), {5, 9});
  ASSERT_TRUE(batch.isOk());
  cli::EvalOutput gpuOut, refOut;
  ASSERT_TRUE(gpu->evaluate(batch.value(), gpuOut, b.errs)) << b.errs.str();
  ASSERT_TRUE(ref->evaluate(batch.value(), refOut, b.errs)) << b.errs.str();
  EXPECT_NEAR(gpuOut.loss, refOut.loss, 1e-4 * std::max(1.0, refOut.loss));
  EXPECT_EQ(gpuOut.predictions, refOut.predictions);
  rt::StatusOr<rt::LoadedPackage> step =
      rt::loadPackage(options.packageDir + "/step.kpkg");
  rt::StatusOr<rt::LoadedPackage> eval =
      rt::loadPackage(options.packageDir + "/eval.kpkg");
  ASSERT_TRUE(step.isOk() && eval.isOk());
  uint64_t stepBytes = rt::cuda::convWorkspaceBytes(step.value()),
           evalBytes = rt::cuda::convWorkspaceBytes(eval.value());
  ASSERT_GT(evalBytes, 0u);
  ASSERT_GE(stepBytes, evalBytes);
  EXPECT_EQ(api.count("cudaMalloc " + std::to_string(stepBytes)), 1u);
  if (evalBytes != stepBytes)
    EXPECT_EQ(api.count("cudaMalloc " + std::to_string(evalBytes)), 0u);
  std::string lines = b.errs.str();
  size_t evalLine = lines.find("test: eval step's device memory");
  ASSERT_NE(evalLine, std::string::npos) << lines;
  std::string evalMemory =
      lines.substr(evalLine, lines.find('\n', evalLine) - evalLine);
  EXPECT_EQ(evalMemory.find("convolution workspace"), std::string::npos)
      << evalMemory;
  EXPECT_NE(lines.find("convolution workspace"), std::string::npos) << lines;
  // The convolutions ran: im2col, col2im and the layout swaps.
  size_t im2col = 0, col2im = 0;
  for (const auto &l : api.launches) {
    im2col += l.entry == "kiln_conv_im2col_f32";
    col2im += l.entry == "kiln_conv_col2im_f32";
  }
  EXPECT_GT(im2col, 0u);
  EXPECT_GT(col2im, 0u);
  gpu.reset();
  llvm::sys::fs::remove_directories(dir);
}

// ZeRO-3 over two ranks (threads, their collectives through the
// in-process communicator, so through the CUDA executable's host staging)
// on the CUDA backend against the CPU backend on the same two-rank job:
// each rank's parameter and optimizer shards start as its block of the
// bucket (before, the CUDA backend left them at zero), the losses of three
// steps and every shard after them agree; and rank 0's eval step, given
// the full parameters by name (what the ranks gather before an eval),
// evaluates as the reference interpreter does with them.
TEST(CudaBackendTest, Zero3ShardsStartAndTrainAsOnTheCpu) {
  llvm::SmallString<128> dir;
  cli::BackendOptions options;
  mlpOptions(dir, options);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  cli::BackendOptions reference = options;
  reference.packageDir = (dir + "/reference").str();
  reference.wantEval = true;
  options.pipeline.strategy = kiln::Strategy::zero3;
  options.pipeline.worldSize = 2;
  options.wantEval = true;
  auto cudaComms = rt::dist::createLocalCommunicators(2, {});
  auto cpuComms = rt::dist::createLocalCommunicators(2, {});
  ASSERT_TRUE(cudaComms.isOk() && cpuComms.isOk());
  std::mutex kernelLock; // the emulation's kernels, one at a time
  std::string errors;
  llvm::raw_string_ostream errs(errors);
  HostNvrtcFake api[2];
  std::unique_ptr<cli::TrainBackend> gpu[2], cpu[2];
  for (int rank = 0; rank < 2; ++rank) {
    api[rank].device.multiprocessors = 1;
    api[rank].kernelLock = &kernelLock;
    cli::CudaBackendOptions cuda;
    cuda.api = &api[rank];
    cuda.cubins = false;
    cuda.loaded = [&api, rank](const rt::LoadedPackage &pkg) {
      api[rank].learnPackage(pkg);
    };
    cli::BackendOptions mine = options;
    mine.packageDir = (dir + "/cuda" + llvm::Twine(rank)).str();
    mine.communicator = cudaComms.value()[rank].get();
    gpu[rank] = cli::createCudaBackend(mine, cuda, "test", errs, errs);
    ASSERT_TRUE(gpu[rank]) << errs.str();
    mine.packageDir = (dir + "/cpu" + llvm::Twine(rank)).str();
    mine.communicator = cpuComms.value()[rank].get();
    mine.threads = 1;
    cpu[rank] = cli::createCpuBackend(mine, "test", errs, errs);
    ASSERT_TRUE(cpu[rank]) << errs.str();
    EXPECT_FALSE(gpu[rank]->shards().empty());
    EXPECT_EQ(diffState(*gpu[rank], *cpu[rank], 0), "")
        << "rank " << rank << "'s first shards";
  }

  auto data = rt::SyntheticDataset::create(gpu[0]->dataSpecs(), 64, 3);
  ASSERT_TRUE(data.isOk()) << data.status().message();
  double losses[2][2][3] = {};
  std::string failures[2];
  auto run = [&](int rank) {
    for (int step = 0; step < 3; ++step) {
      std::vector<int64_t> rows;
      for (int i = 0; i < 8; ++i)
        rows.push_back(16 * step + 8 * rank + i);
      rt::StatusOr<rt::Batch> batch = rt::assembleBatch(*data.value(), rows);
      std::string out;
      llvm::raw_string_ostream os(out);
      for (int backend = 0; backend < 2; ++backend) {
        cli::TrainBackend &b = backend ? *cpu[rank] : *gpu[rank];
        b.setStepCounter(step);
        if (!batch.isOk() ||
            !b.step(batch.value(), losses[rank][backend][step], os))
          failures[rank] += "step " + std::to_string(step) + ": " + out;
      }
    }
  };
  std::thread other(run, 1);
  run(0);
  other.join();
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_EQ(failures[rank], "") << "rank " << rank;
    for (int step = 0; step < 3; ++step)
      EXPECT_NEAR(losses[rank][0][step], losses[rank][1][step],
                  1e-5 * std::max(1.0, std::fabs(losses[rank][1][step])))
          << "rank " << rank << " step " << step;
    EXPECT_EQ(diffState(*gpu[rank], *cpu[rank], 1e-4), "")
        << "rank " << rank << " after 3 steps";
  }

  // Rank 0's eval step reads parameters the training step holds only as
  // shards: given them (here the reference's first ones), it evaluates
  // as the interpreter does.
  std::unique_ptr<cli::TrainBackend> ref =
      cli::createReferenceBackend(reference, "test", errs);
  ASSERT_TRUE(ref) << errs.str();
  ASSERT_TRUE(gpu[0]->hasEval());
  for (size_t i = 0; i < ref->state().size(); ++i) {
    if (!ref->state()[i].parameter)
      continue;
    std::string error;
    ASSERT_TRUE(gpu[0]->setEvalParameter(ref->state()[i].name,
                                         ref->readState(i), error))
        << ref->state()[i].name << ": " << error;
  }
  std::string error;
  EXPECT_FALSE(gpu[0]->setEvalParameter("nope", ref->readState(0), error));
  EXPECT_EQ(error, "is not an input of the eval step");
  rt::StatusOr<rt::Batch> batch = rt::assembleBatch(*data.value(), mlpRows(6));
  ASSERT_TRUE(batch.isOk());
  cli::EvalOutput gpuOut, refOut;
  ASSERT_TRUE(gpu[0]->evaluate(batch.value(), gpuOut, errs)) << errs.str();
  ASSERT_TRUE(ref->evaluate(batch.value(), refOut, errs)) << errs.str();
  EXPECT_NEAR(gpuOut.loss, refOut.loss, 1e-5 * std::max(1.0, refOut.loss));
  EXPECT_EQ(gpuOut.predictions, refOut.predictions);
  for (int rank = 0; rank < 2; ++rank) {
    gpu[rank].reset();
    cpu[rank].reset();
  }
  llvm::sys::fs::remove_directories(dir);
}

// A small GPT with its eval step through the CUDA backend: the eval step
// runs in the training step's memory (its attention, layer norms and
// GEMMs on buffers placed in the training step's free space, the
// parameters read in place), and its loss and predictions after two training
// steps match the reference backend's; a third step after the eval (which
// wrote over the training step's temporaries) still matches.
TEST(CudaBackendTest, GptEvalStepRunsInTheTrainingStepsMemory) {
  llvm::SmallString<128> dir;
  ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("kiln-cuda-backend", dir));
  std::string model = (dir + "/gpt.mlir").str();
  writeModel(model, [](mlir::MLIRContext *context) {
    cli::GptOptions gpt;
    gpt.layers = 1;
    gpt.hidden = 32;
    gpt.heads = 2;
    gpt.seq = 16;
    gpt.vocab = 32;
    gpt.batch = 2;
    return cli::buildGpt(context, gpt);
  });
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  cli::BackendOptions options;
  options.input = model;
  options.packageDir = (dir + "/packages").str();
  options.wantEval = true;
  Backends b;
  createBackends(options, b);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  EXPECT_NE(b.errs.str().find("test: eval step's device memory "),
            std::string::npos)
      << b.errs.str();
  EXPECT_NE(b.errs.str().find("; it runs in "), std::string::npos)
      << b.errs.str();
  EXPECT_EQ(b.errs.str().find("found no room"), std::string::npos)
      << b.errs.str();
  ASSERT_TRUE(b.gpu->hasEval());
  auto data = rt::SyntheticDataset::create(b.gpu->dataSpecs(), 16, 5);
  ASSERT_TRUE(data.isOk()) << data.status().message();
  auto rows = [](int step) {
    return std::vector<int64_t>{2 * step, 2 * step + 1};
  };
  stepBoth(b, *data.value(), 0, 2, rows);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  auto evalData = rt::SyntheticDataset::create(b.gpu->evalSpecs(), 16, 6);
  ASSERT_TRUE(evalData.isOk());
  for (int round = 0; round < 2; ++round) {
    rt::StatusOr<rt::Batch> batch =
        rt::assembleBatch(*evalData.value(), rows(round + 3));
    ASSERT_TRUE(batch.isOk());
    cli::EvalOutput gpuOut, refOut;
    ASSERT_TRUE(b.gpu->evaluate(batch.value(), gpuOut, b.errs)) << b.errs.str();
    ASSERT_TRUE(b.ref->evaluate(batch.value(), refOut, b.errs)) << b.errs.str();
    EXPECT_NEAR(gpuOut.loss, refOut.loss, 1e-5 * std::max(1.0, refOut.loss))
        << "round " << round;
    // One per position of the two sequences.
    ASSERT_EQ(refOut.predictions.size(), 32u);
    EXPECT_EQ(gpuOut.predictions, refOut.predictions) << "round " << round;
    stepBoth(b, *data.value(), 2 + round, 1, rows);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
  }
  // The key projection's bias has a gradient of zero in exact arithmetic
  // (softmax ignores a constant added to a query's scores), so Adam turns
  // either backend's rounding there into steps of about 1e-6.
  EXPECT_EQ(diffState(*b.gpu, *b.ref, 1e-3), "") << "after the evals";
  EXPECT_TRUE(b.api.kernelFaults.empty()) << b.api.kernelFaults.front();
  b.gpu.reset();
  llvm::sys::fs::remove_directories(dir);
}

} // namespace
