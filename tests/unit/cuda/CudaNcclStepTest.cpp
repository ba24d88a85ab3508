//===- CudaNcclStepTest.cpp - data-parallel CUDA steps over NCCL, no GPU ---===//
//
// Two ranks (threads of this process) each run a data-parallel MLP training
// step, compiled for CUDA as `kiln compile --target=cuda --strategy=
// data-parallel --world-size=2` compiles it, through CudaExecutable on
// their own FakeCudaApi.h table (kernels built for the host under
// codegen/cuda/CudaEmulation.h), with a NcclCommunicator whose NCCL and
// cudart are FakeNccl.cpp (loaded through KILN_NCCL/KILN_CUDART, as the real
// libraries are): the rendezvous and the unique id go through the TCP store,
// and the step's all-reduces are enqueued on the executable's stream on
// device pointers (no host copies), captured with the kernels into the
// step's CUDA Graph at the second step and replayed by the fake at the
// third. After three steps each rank's parameters equal those of the
// reference interpreter running the undistributed step on the two ranks'
// batches together (mean all-reduce of per-rank mean gradients = the
// gradient of the whole batch's mean loss).
//
// CudaNcclGpu* (label gpu) runs the same two-rank all-reduce through the
// real NCCL and CudaApi on one GPU per rank and skips without two GPUs.
//
//===----------------------------------------------------------------------===//

#include "tests/unit/cuda/FakeCudaApi.h"
#include "tests/unit/cuda/HostKernels.h"
#include "tests/unit/cuda/StepPackage.h"
#include "tests/unit/runtime-dist/FreePort.h"

#include "runtime/dist/NcclCommunicator.h"

#include <gtest/gtest.h>

#include <dlfcn.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>

namespace {

using namespace mlir;
using namespace kiln;
namespace rt = kiln::runtime;
namespace dist = kiln::runtime::dist;
using rt::cuda::testing::FakeCudaApi;

// Before anything loads the libraries.
const bool kFakeLoaded = [] {
  setenv("KILN_NCCL", KILN_FAKE_NCCL, 1);
  setenv("KILN_CUDART", KILN_FAKE_NCCL, 1);
  return true;
}();

// The fake table of the rank running on this thread: FakeNccl hands it a
// collective enqueued on one of its streams (run now, or recorded into the
// graph being captured).
thread_local FakeCudaApi *rankApi = nullptr;

void streamHook(void *stream, void (*fn)(void *), void *arg) {
  rankApi->hostWork(stream, [fn, arg] { fn(arg); });
}

using kiln::runtime::testing::freePort;

std::vector<float> toF32(const HostTensor &t) {
  std::vector<float> out(t.size());
  for (int64_t i = 0; i < t.size(); ++i)
    out[i] = static_cast<float>(t[i]);
  return out;
}

using kiln::cuda_step_test::toNative;

// Rows [begin, begin + rows) of |t| (dimension 0).
HostTensor rowsOf(const HostTensor &t, int64_t begin, int64_t rows) {
  std::vector<int64_t> shape(t.shape().begin(), t.shape().end());
  int64_t rowSize = t.size() / shape[0];
  shape[0] = rows;
  HostTensor out(t.dtype(), shape);
  for (int64_t i = 0; i < rows * rowSize; ++i)
    out[i] = t[begin * rowSize + i];
  return out;
}

using CudaNcclStepTest = cuda_step_test::StepTest;

TEST_F(CudaNcclStepTest, TwoRanksDataParallelMlpMatchesTheWholeBatch) {
  constexpr int kWorld = 2, kSteps = 3;
  constexpr int64_t kBatch = 12; // per rank
  cli::MlpOptions mlp;
  mlp.layers = {20, 16, 6};
  // SGD, as the equivalence tests of docs/distributed.md (Adam's update
  // magnifies a gradient's rounding where the gradient is near zero).
  mlp.training.optimizer = kiln::OptimizerKind::sgd;
  mlp.training.learningRate = 0.1;

  // The data-parallel step for CUDA, per rank batch B.
  mlp.batch = kBatch;
  OwningOpRef<ModuleOp> model = cli::buildMlp(&context, mlp);
  ASSERT_TRUE(model) << diagnostics;
  PipelineOptions options;
  options.strategy = Strategy::dataParallel;
  options.worldSize = kWorld;
  ASSERT_TRUE(succeeded(runCompilePipeline(*model, options))) << diagnostics;
  func::FuncOp func = cli::findModelFunction(*model);
  ASSERT_TRUE(func) << diagnostics;

  std::string sources;
  cli::PackageTargetHooks hooks = cuda_step_test::cudaPackageHooks(diagnostics, &sources);
  rt::LoadedPackage pkg;
  std::string errors;
  ASSERT_TRUE(cuda_step_test::packageStep(*model, &hooks, pkg, errors))
      << errors << diagnostics;
  ASSERT_EQ(pkg.metadata.worldSize, uint32_t(kWorld));
  size_t collectives = 0;
  for (const rt::PackageThunk &t : pkg.thunks)
    collectives += t.kind == rt::ThunkKind::Collective;
  ASSERT_GE(collectives, 1u) << "expected the gradients' all-reduce";

  // The undistributed step on both ranks' rows: the reference.
  mlp.batch = kWorld * kBatch;
  OwningOpRef<ModuleOp> whole = cli::buildMlp(&context, mlp);
  ASSERT_TRUE(whole) << diagnostics;
  ASSERT_TRUE(succeeded(runCompilePipeline(*whole, PipelineOptions())))
      << diagnostics;
  func::FuncOp wholeFunc = cli::findModelFunction(*whole);
  ASSERT_TRUE(wholeFunc);

  // Kernels for the host.
  std::string error;
  std::map<std::string, rt::cuda::testing::HostKernel> hostKernels =
      rt::cuda::testing::buildHostKernels(
          sources, cuda_step_test::kernelEntries(pkg), "kernels", error);
  ASSERT_TRUE(error.empty()) << error;
  void *fakeNccl = dlopen(KILN_FAKE_NCCL, RTLD_NOW | RTLD_LOCAL);
  ASSERT_TRUE(fakeNccl) << dlerror();
  auto setHook = reinterpret_cast<void (*)(decltype(&streamHook))>(
      dlsym(fakeNccl, "fakeNcclSetStreamHook"));
  ASSERT_TRUE(setHook);
  setHook(&streamHook);

  // Values: parameters from their initializers, data random per step.
  std::vector<cli::ArgumentInfo> args = cli::describeArguments(func);
  std::vector<cli::ArgumentInfo> wholeArgs = cli::describeArguments(wholeFunc);
  std::vector<cli::ResultInfo> wholeResults = cli::describeResults(wholeFunc);
  ASSERT_EQ(args.size(), wholeArgs.size());
  std::mt19937_64 rng(11);
  std::vector<HostTensor> wholeValues;
  for (const cli::ArgumentInfo &a : wholeArgs)
    wholeValues.push_back(cli::initialValue(a));
  std::vector<std::vector<HostTensor>> batches(kSteps); // per step, per arg
  for (int step = 0; step < kSteps; ++step)
    for (const cli::ArgumentInfo &a : wholeArgs)
      batches[step].push_back(a.role == Role::input || a.role == Role::label
                                  ? cli::randomData(wholeFunc, a, rng)
                                  : HostTensor());

  // The reference: kSteps undistributed steps on the whole batch.
  Interpreter interpreter;
  for (int step = 0; step < kSteps; ++step) {
    for (const cli::ArgumentInfo &a : wholeArgs)
      if (a.role == Role::input || a.role == Role::label)
        wholeValues[a.index] = batches[step][a.index];
    FailureOr<SmallVector<HostTensor>> out =
        interpreter.run(wholeFunc, wholeValues);
    ASSERT_TRUE(succeeded(out)) << diagnostics;
    for (const cli::ResultInfo &r : wholeResults)
      if (r.updates)
        wholeValues[*r.updates] = (*out)[r.index];
  }

  // The ranks.
  int port = freePort();
  std::vector<std::string> failures(kWorld);
  std::vector<std::map<std::string, std::vector<float>>> parameters(kWorld);
  std::vector<bool> graphs(kWorld, false);
  std::vector<size_t> hostCopiesInSteps(kWorld, 0);
  std::mutex kernelLock;
  std::vector<std::thread> threads;
  for (int rank = 0; rank < kWorld; ++rank)
    threads.emplace_back([&, rank] {
      std::string &failure = failures[rank];
      FakeCudaApi api;
      api.device.multiprocessors = 2;
      api.kernelLock = &kernelLock;
      rankApi = &api;
      api.hostKernels = hostKernels;
      api.learnPackage(pkg);
      dist::DistEnv env;
      env.rank = env.localRank = rank;
      env.worldSize = env.localWorldSize = kWorld;
      env.masterPort = port;
      dist::CommOptions commOptions;
      commOptions.timeoutSeconds = 60;
      auto comm = dist::createNcclCommunicator(env, commOptions);
      if (!comm.isOk()) {
        failure = comm.status().message();
        return;
      }
      rt::cuda::CudaOptions cudaOptions;
      cudaOptions.communicator = comm.value().get();
      cudaOptions.log = [&](const std::string &n) { failure += "note: " + n; };
      auto made = rt::cuda::CudaExecutable::create(pkg, api, cudaOptions);
      if (!made.isOk()) {
        failure = made.status().message();
        return;
      }
      rt::cuda::CudaExecutable &exec = *made.value();
      for (const cli::ArgumentInfo &a : args)
        if (a.role != Role::input && a.role != Role::label)
          if (rt::Status s = exec.writeInput(
                  a.index, toNative(cli::initialValue(a)).data());
              !s.isOk()) {
            failure = s.message();
            return;
          }
      for (int step = 0; step < kSteps; ++step) {
        for (const cli::ArgumentInfo &a : args)
          if (a.role == Role::input || a.role == Role::label) {
            HostTensor mine =
                rowsOf(batches[step][a.index], rank * kBatch, kBatch);
            if (rt::Status s = exec.writeInput(a.index, toNative(mine).data());
                !s.isOk()) {
              failure = s.message();
              return;
            }
          }
        size_t before = api.count("cudaMemcpyAsync D2H");
        if (rt::Status s = exec.run(); !s.isOk()) {
          failure = "step " + std::to_string(step) + ": " + s.message();
          return;
        }
        if (rt::Status s = exec.synchronize(); !s.isOk()) {
          failure = s.message();
          return;
        }
        hostCopiesInSteps[rank] += api.count("cudaMemcpyAsync D2H") - before;
      }
      graphs[rank] = exec.usingGraph();
      for (const cli::ArgumentInfo &a : args)
        if (a.role == Role::parameter) {
          const rt::PackageBuffer &b =
              pkg.buffers[pkg.inputs[a.index].buffer];
          std::vector<float> v(b.size / 4);
          if (rt::Status s = exec.readBuffer(pkg.inputs[a.index].buffer, v.data());
              !s.isOk()) {
            failure = s.message();
            return;
          }
          parameters[rank][a.name] = v;
        }
      made.value().reset();
    });
  for (std::thread &t : threads)
    t.join();
  setHook(nullptr);

  for (int rank = 0; rank < kWorld; ++rank) {
    ASSERT_EQ(failures[rank], "") << "rank " << rank;
    EXPECT_TRUE(graphs[rank]) << "rank " << rank << ": expected the step in a "
                                                    "CUDA Graph";
    EXPECT_EQ(hostCopiesInSteps[rank], 0u)
        << "rank " << rank << ": collectives went through host copies";
  }
  size_t checked = 0;
  for (const cli::ArgumentInfo &a : wholeArgs) {
    if (a.role != Role::parameter)
      continue;
    std::vector<float> want = toF32(wholeValues[a.index]);
    for (int rank = 0; rank < kWorld; ++rank) {
      ASSERT_TRUE(parameters[rank].count(a.name)) << a.name;
      const std::vector<float> &have = parameters[rank][a.name];
      ASSERT_EQ(have.size(), want.size()) << a.name;
      int bad = 0;
      for (size_t i = 0; i < want.size() && bad < 3; ++i)
        if (!(std::fabs(want[i] - have[i]) <=
              1e-5 * std::max({1.0f, std::fabs(want[i]), std::fabs(have[i])}))) {
          ADD_FAILURE() << "rank " << rank << " parameter '" << a.name
                        << "' element " << i << ": whole batch " << want[i]
                        << ", 2 ranks over NCCL " << have[i];
          ++bad;
        }
      ++checked;
    }
  }
  EXPECT_EQ(checked, size_t(kWorld) * (mlp.layers.size() - 1) * 2);
}

} // namespace
