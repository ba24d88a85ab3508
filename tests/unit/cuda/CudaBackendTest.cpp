//===- CudaBackendTest.cpp - `kiln train --device=cuda` without a GPU -----===//
//
// The CUDA training backend (tools/kiln/lib/CudaBackend.h) end to end on a
// fake CUDA table whose NVRTC compiles each kernel's source for the host
// under codegen/cuda/CudaEmulation.h: the backend compiles the model for
// CUDA (source-only packages, so every kernel reaches the runtime through
// NVRTC), feeds batches through the pinned staging, reads the loss, reads
// and writes the checkpointed state and runs the eval package. Compared
// with the reference backend (the interpreter) on the same synthetic
// batches: losses, state after the steps, eval loss and logits; and
// LeNet-5 (convolutions through runtime/cuda/CudaConv.h) step by step.
//
//===----------------------------------------------------------------------===//

#include "tests/unit/cuda/FakeCudaApi.h"
#include "tests/unit/cuda/HostKernels.h"

#include "runtime/cuda/CudaConv.h"
#include "runtime/data/Dataset.h"
#include "runtime/data/Sampler.h"
#include "tools/kiln/lib/CudaBackend.h"
#include "tools/kiln/lib/ModuleLoader.h"
#include "tools/kiln/lib/Zoo.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

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
    // Two packages (the step and eval) may both have a kiln_fusion0.
    std::string unique = name + "." + std::to_string(++compiles_);
    // The convolutions' module (runtime/cuda/CudaConv.h) has many kernels:
    // found by name.
    bool conv = name == "kiln_conv";
    std::string error;
    std::map<std::string, rt::cuda::testing::HostKernel> built =
        rt::cuda::testing::buildHostKernels(
            source,
            conv ? rt::cuda::convKernelEntryPoints() : std::vector<std::string>{name},
            unique, error);
    if (!error.empty())
      return rt::Status::error(error);
    if (conv) {
      hostKernels.insert(built.begin(), built.end());
      return FakeCudaApi::nvrtcCompile(source, name, arch, cubin, log);
    }
    if (rt::Status s = FakeCudaApi::nvrtcCompile(source, name, arch, cubin, log);
        !s.isOk())
      return s;
    std::string image = "HOST " + unique;
    cubin.assign(image.begin(), image.end());
    cubin.push_back(0);
    hostKernelsByImage[image] = built.at(name);
    return rt::Status::ok();
  }

private:
  int compiles_ = 0;
};

std::string diffState(cli::TrainBackend &a, cli::TrainBackend &b, double rel) {
  if (a.state().size() != b.state().size())
    return "state sizes differ";
  for (size_t i = 0; i < a.state().size(); ++i) {
    std::vector<float> x = a.readState(i), y = b.readState(i);
    if (x.size() != y.size())
      return a.state()[i].name + ": sizes differ";
    for (size_t j = 0; j < x.size(); ++j)
      if (!(std::fabs(x[j] - y[j]) <=
            rel * std::max({1e-2f, std::fabs(x[j]), std::fabs(y[j])})))
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

// The CUDA backend of |options| on |api| (one SM, kernels through its
// NVRTC) and the reference backend, with the same initial parameters.
void createBackends(const cli::BackendOptions &options, HostNvrtcFake &api,
                    llvm::raw_ostream &outs, llvm::raw_string_ostream &errs,
                    std::unique_ptr<cli::TrainBackend> &gpu,
                    std::unique_ptr<cli::TrainBackend> &ref) {
  api.device.multiprocessors = 1;
  cli::CudaBackendOptions cuda;
  cuda.api = &api;
  cuda.cubins = false;
  gpu = cli::createCudaBackend(options, cuda, "test", outs, errs);
  ASSERT_TRUE(gpu) << errs.str();
  ref = cli::createReferenceBackend(options, "test", errs);
  ASSERT_TRUE(ref) << errs.str();
  EXPECT_EQ(diffState(*gpu, *ref, 1e-6), "") << "initial parameters";
}

// |steps| training steps of both backends, step i on the rows
// |rows(i)| of |data|: the same loss each step.
void stepBoth(cli::TrainBackend &gpu, cli::TrainBackend &ref,
              const rt::Dataset &data, int steps,
              const std::function<std::vector<int64_t>(int)> &rows,
              llvm::raw_string_ostream &errs) {
  for (int step = 0; step < steps; ++step) {
    rt::StatusOr<rt::Batch> batch = rt::assembleBatch(data, rows(step));
    ASSERT_TRUE(batch.isOk());
    gpu.setStepCounter(step);
    ref.setStepCounter(step);
    double gpuLoss = 0, refLoss = 0;
    ASSERT_TRUE(gpu.step(batch.value(), gpuLoss, errs)) << errs.str();
    ASSERT_TRUE(ref.step(batch.value(), refLoss, errs)) << errs.str();
    EXPECT_NEAR(gpuLoss, refLoss, 1e-5 * std::max(1.0, std::fabs(refLoss)))
        << "step " << step;
  }
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

TEST(CudaBackendTest, TrainsLikeTheReferenceBackend) {
  llvm::SmallString<128> dir;
  cli::BackendOptions options;
  mlpOptions(dir, options);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  options.wantEval = true;
  std::string errors;
  llvm::raw_string_ostream errs(errors), outs(errors);

  HostNvrtcFake api;
  std::unique_ptr<cli::TrainBackend> gpu, ref;
  createBackends(options, api, outs, errs, gpu, ref);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  EXPECT_NE(errs.str().find("kiln train: backend cuda, device 0: Fake H200 "
                            "(sm_90, 1 SMs)"),
            std::string::npos)
      << errs.str();
  EXPECT_STREQ(gpu->name(), "cuda");
  ASSERT_EQ(gpu->batch(), 8);
  ASSERT_TRUE(gpu->hasEval());
  ASSERT_TRUE(gpu->evalHasLogits());

  auto data = rt::SyntheticDataset::create(gpu->dataSpecs(), 64, 3);
  ASSERT_TRUE(data.isOk()) << data.status().message();
  stepBoth(*gpu, *ref, *data.value(), 4, [](int step) {
    std::vector<int64_t> indices;
    for (int i = 0; i < 8; ++i)
      indices.push_back(step * 8 + i);
    return indices;
  }, errs);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  EXPECT_EQ(diffState(*gpu, *ref, 1e-4), "") << "after 4 steps";

  // Writing the state (a resume) is read back and trained from.
  for (size_t i = 0; i < gpu->state().size(); ++i) {
    std::vector<float> v = ref->readState(i);
    for (float &x : v)
      x *= 0.5f;
    std::string error;
    ASSERT_TRUE(gpu->writeState(i, v, error)) << error;
    ASSERT_TRUE(ref->writeState(i, v, error)) << error;
  }
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
  ASSERT_EQ(gpuOut.logits.size(), refOut.logits.size());
  EXPECT_EQ(gpuOut.classes, 10);
  for (size_t i = 0; i < refOut.logits.size(); ++i)
    EXPECT_NEAR(gpuOut.logits[i], refOut.logits[i], 1e-4) << i;
  // Every kernel came through NVRTC; staged inputs used pinned memory.
  EXPECT_GT(api.nvrtcArchs.size(), 0u);
  EXPECT_GT(api.count("cudaMallocHost"), 0u);
  EXPECT_GT(api.count("cudaGraphLaunch"), 0u);
  gpu.reset();
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
  std::string errors;
  llvm::raw_string_ostream errs(errors), outs(errors);
  HostNvrtcFake api;
  std::unique_ptr<cli::TrainBackend> gpu, ref;
  createBackends(options, api, outs, errs, gpu, ref);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());

  auto data = rt::SyntheticDataset::create(gpu->dataSpecs(), 64, 3);
  ASSERT_TRUE(data.isOk()) << data.status().message();
  auto loss = [&](cli::TrainBackend &backend, int step) {
    std::vector<int64_t> rows;
    for (int i = 0; i < 8; ++i)
      rows.push_back(step * 8 + i);
    rt::StatusOr<rt::Batch> batch = rt::assembleBatch(*data.value(), rows);
    EXPECT_TRUE(batch.isOk());
    backend.setStepCounter(step);
    double l = 0;
    EXPECT_TRUE(backend.step(batch.value(), l, errs)) << errs.str();
    return l;
  };
  // bf16 rounds at other places on the two backends (docs/training.md).
  auto close = [](double a, double b) {
    return std::fabs(a - b) <= 1e-2 * std::max(1.0, std::fabs(b));
  };
  for (int step = 0; step < 2; ++step) {
    double g = loss(*gpu, step), r = loss(*ref, step);
    EXPECT_TRUE(close(g, r)) << "step " << step << ": " << g << " vs " << r;
  }
  for (size_t i = 0; i < gpu->state().size(); ++i) {
    std::vector<float> v = ref->readState(i);
    for (float &x : v)
      x *= 3.0f;
    std::string error;
    ASSERT_TRUE(gpu->writeState(i, v, error)) << error;
    ASSERT_TRUE(ref->writeState(i, v, error)) << error;
  }
  double g = loss(*gpu, 2), r = loss(*ref, 2);
  EXPECT_TRUE(close(g, r)) << "after the write: " << g << " vs " << r;
  gpu.reset();
  llvm::sys::fs::remove_directories(dir);
}

// LeNet-5 through the CUDA backend: its convolutions (forward and both
// gradients) run as CudaConv's kernels and GEMMs; three steps' losses and
// the parameters and Adam state after them match the reference backend.
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
  std::string errors;
  llvm::raw_string_ostream errs(errors), outs(errors);
  HostNvrtcFake api;
  std::unique_ptr<cli::TrainBackend> gpu, ref;
  createBackends(options, api, outs, errs, gpu, ref);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  auto data = rt::SyntheticDataset::create(gpu->dataSpecs(), 16, 3);
  ASSERT_TRUE(data.isOk()) << data.status().message();
  stepBoth(*gpu, *ref, *data.value(), 3, [](int step) {
    return std::vector<int64_t>{2 * step, 2 * step + 1};
  }, errs);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  EXPECT_EQ(diffState(*gpu, *ref, 1e-4), "") << "after 3 steps";
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

} // namespace
