//===- CudaNcclGpuTest.cpp - NCCL collectives inside CudaExecutable, on GPUs -===//
//
// Label gpu: CudaExecutable with the real CUDA table and a real NCCL
// communicator, one rank per GPU (threads of this process, rank r on device
// r; one rank on a single GPU). The package: a sum all-reduce of a f32
// buffer into an output that updates it, so after S steps every element is
// its start times worldSize^S. The first step runs plain, the second is
// captured into a CUDA Graph with the NCCL call in it, the third replays
// the graph: the values prove the replay ran the collective. Skips, saying
// why, without CUDA, NCCL or a GPU. Links no LLVM or MLIR, so
// bench/gpu/check.sh can run it on the GPU machine.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudaDevice.h"
#include "runtime/cuda/CudaExecutable.h"
#include "runtime/dist/NcclCommunicator.h"
#include "tests/unit/runtime-dist/FreePort.h"

#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <thread>

namespace {

using namespace kiln::runtime;
using namespace kiln::runtime::cuda;

using kiln::runtime::testing::freePort;

// x [n] f32 -> all_reduce sum -> y, y updates x.
LoadedPackage allReducePackage(int64_t n, int world) {
  LoadedPackage p;
  p.target.kind = TargetKind::Cuda;
  p.target.smArchs = {90};
  p.metadata.worldSize = static_cast<uint32_t>(world);
  p.metadata.strategy = Strategy::DataParallel;
  for (const char *name : {"x", "y"}) {
    PackageBuffer b;
    b.name = name;
    b.dtype = PkgDType::F32;
    b.shape = {n};
    b.size = n * 4;
    b.offset = p.arenaSize;
    p.arenaSize += (b.size + 255) / 256 * 256;
    p.buffers.push_back(b);
  }
  p.buffers[1].updates = 0;
  SignatureEntry in;
  in.name = "x";
  in.role = PkgRole::Parameter;
  in.dtype = PkgDType::F32;
  in.shape = {n};
  in.buffer = 0;
  p.inputs.push_back(in);
  SignatureEntry out = in;
  out.name = "y";
  out.buffer = 1;
  p.outputs.push_back(out);
  PackageThunk t;
  t.kind = ThunkKind::Collective;
  t.hasCollective = true;
  t.collective.kind = CollectiveKind::AllReduce;
  t.collective.reduction = PkgReduceKind::Sum;
  t.operands = {0};
  t.results = {1};
  p.thunks.push_back(t);
  return p;
}

TEST(CudaNcclGpu, AllReduceInsideTheStepGraph) {
  StatusOr<CudaRuntimeInfo> devices = discoverCudaDevices();
  if (!devices.isOk() || devices.value().devices.empty())
    GTEST_SKIP() << "no GPU: "
                 << (devices.isOk() ? "no device" : devices.status().message());
  StatusOr<dist::NcclLibraryInfo> nccl = dist::loadNcclLibraries();
  if (!nccl.isOk())
    GTEST_SKIP() << "no NCCL: " << nccl.status().message();
  int world = static_cast<int>(std::min<size_t>(devices.value().devices.size(), 2));
  constexpr int64_t kN = 1 << 20;
  constexpr int kSteps = 3;
  int port = freePort();
  std::vector<std::string> failures(world);
  std::vector<std::vector<float>> finals(world);
  std::vector<bool> graphs(world, false);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank)
    threads.emplace_back([&, rank] {
      std::string &failure = failures[rank];
      StatusOr<std::unique_ptr<CudaApi>> api = loadCudaApi();
      if (!api.isOk()) {
        failure = api.status().message();
        return;
      }
      dist::DistEnv env;
      env.rank = env.localRank = rank;
      env.worldSize = env.localWorldSize = world;
      env.masterPort = port;
      dist::CommOptions options;
      options.timeoutSeconds = 60;
      auto comm = dist::createNcclCommunicator(env, options);
      if (!comm.isOk()) {
        failure = comm.status().message();
        return;
      }
      CudaOptions cudaOptions;
      cudaOptions.device = rank;
      cudaOptions.communicator = comm.value().get();
      cudaOptions.log = [&](const std::string &n) { failure += "note: " + n; };
      auto exec = CudaExecutable::create(allReducePackage(kN, world),
                                         *api.value(), cudaOptions);
      if (!exec.isOk()) {
        failure = exec.status().message();
        return;
      }
      std::vector<float> x(kN);
      for (int64_t i = 0; i < kN; ++i)
        x[i] = float((i % 7) + rank) * 0.25f;
      for (Status s : {exec.value()->writeInput(0, x.data())})
        if (!s.isOk()) {
          failure = s.message();
          return;
        }
      for (int step = 0; step < kSteps; ++step)
        if (Status s = exec.value()->run(); !s.isOk()) {
          failure = s.message();
          return;
        }
      finals[rank].resize(kN);
      if (Status s = exec.value()->readBuffer(0, finals[rank].data()); !s.isOk())
        failure = s.message();
      graphs[rank] = exec.value()->usingGraph();
      exec.value().reset();
    });
  for (std::thread &t : threads)
    t.join();
  for (int rank = 0; rank < world; ++rank) {
    ASSERT_EQ(failures[rank], "") << "rank " << rank;
    EXPECT_TRUE(graphs[rank]) << "rank " << rank;
    for (int64_t i = 0; i < kN; i += 4099) {
      double sum = 0;
      for (int r = 0; r < world; ++r)
        sum += ((i % 7) + r) * 0.25;
      // Step 1 sums the ranks' values; each later step multiplies by world.
      double want = sum * std::pow(world, kSteps - 1);
      ASSERT_NEAR(finals[rank][i], want, 1e-5 * std::max(1.0, want))
          << "rank " << rank << " element " << i;
    }
  }
}

} // namespace
