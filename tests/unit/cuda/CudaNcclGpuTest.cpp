//===- CudaNcclGpuTest.cpp - NCCL collectives inside CudaExecutable, on GPUs -===//
//
// Label gpu: CudaExecutable with the real CUDA table and a real NCCL
// communicator, one rank per GPU (threads of this process, rank r on device
// r; one rank on a single GPU). The package: a sum all-reduce of a f32
// buffer into an output that updates it, so after S steps every element is
// its start times worldSize^S. The first step runs plain, the second is
// captured into a CUDA Graph with the NCCL call in it, the third replays
// the graph: the values prove the replay ran the collective. The ranks'
// communicators as torchrun's processes make them, and as a mirrored run
// makes them in one process. Skips, saying why, without CUDA, NCCL or a
// GPU. Links no LLVM or MLIR, so
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

constexpr int64_t kN = 1 << 20;
constexpr int kSteps = 3;

// One rank's run: what failed (""), its buffer after kSteps, and whether
// it replayed a CUDA Graph.
struct RankRun {
  std::string failure;
  std::vector<float> final;
  bool graph = false;
};

// Rank |rank| of |world| steps the all-reduce package kSteps times on
// device |rank| with |comm|.
RankRun stepRank(int rank, int world, dist::Communicator &comm) {
  RankRun out;
  StatusOr<std::unique_ptr<CudaApi>> api = loadCudaApi();
  if (!api.isOk()) {
    out.failure = api.status().message();
    return out;
  }
  CudaOptions cudaOptions;
  cudaOptions.device = rank;
  cudaOptions.communicator = &comm;
  cudaOptions.log = [&](const std::string &n) { out.failure += "note: " + n; };
  auto exec = CudaExecutable::create(allReducePackage(kN, world), *api.value(),
                                     cudaOptions);
  if (!exec.isOk()) {
    out.failure = exec.status().message();
    return out;
  }
  std::vector<float> x(kN);
  for (int64_t i = 0; i < kN; ++i)
    x[i] = float((i % 7) + rank) * 0.25f;
  if (Status s = exec.value()->writeInput(0, x.data()); !s.isOk()) {
    out.failure = s.message();
    return out;
  }
  for (int step = 0; step < kSteps; ++step)
    if (Status s = exec.value()->run(); !s.isOk()) {
      out.failure = s.message();
      return out;
    }
  out.final.resize(kN);
  if (Status s = exec.value()->readBuffer(0, out.final.data()); !s.isOk())
    out.failure = s.message();
  out.graph = exec.value()->usingGraph();
  return out;
}

void expectSums(const std::vector<RankRun> &runs) {
  int world = static_cast<int>(runs.size());
  for (int rank = 0; rank < world; ++rank) {
    ASSERT_EQ(runs[rank].failure, "") << "rank " << rank;
    EXPECT_TRUE(runs[rank].graph) << "rank " << rank;
    for (int64_t i = 0; i < kN; i += 4099) {
      double sum = 0;
      for (int r = 0; r < world; ++r)
        sum += ((i % 7) + r) * 0.25;
      // Step 1 sums the ranks' values; each later step multiplies by world.
      double want = sum * std::pow(world, kSteps - 1);
      ASSERT_NEAR(runs[rank].final[i], want, 1e-5 * std::max(1.0, want))
          << "rank " << rank << " element " << i;
    }
  }
}

// The GPUs this test uses (at most 2), or 0 after GTEST_SKIP's message.
int gpusOrSkip(std::string &why) {
  StatusOr<CudaRuntimeInfo> devices = discoverCudaDevices();
  if (!devices.isOk() || devices.value().devices.empty()) {
    why = "no GPU: " +
          (devices.isOk() ? "no device" : devices.status().message());
    return 0;
  }
  StatusOr<dist::NcclLibraryInfo> nccl = dist::loadNcclLibraries();
  if (!nccl.isOk()) {
    why = "no NCCL: " + nccl.status().message();
    return 0;
  }
  return static_cast<int>(std::min<size_t>(devices.value().devices.size(), 2));
}

// Ranks as torchrun's processes would make them: each its own rendezvous.
TEST(CudaNcclGpu, AllReduceInsideTheStepGraph) {
  std::string why;
  int world = gpusOrSkip(why);
  if (!world)
    GTEST_SKIP() << why;
  int port = freePort();
  std::vector<RankRun> runs(world);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank)
    threads.emplace_back([&, rank] {
      dist::DistEnv env;
      env.rank = env.localRank = rank;
      env.worldSize = env.localWorldSize = world;
      env.masterPort = port;
      dist::CommOptions options;
      options.timeoutSeconds = 60;
      auto comm = dist::createNcclCommunicator(env, options);
      if (!comm.isOk())
        runs[rank].failure = comm.status().message();
      else
        runs[rank] = stepRank(rank, world, *comm.value());
    });
  for (std::thread &t : threads)
    t.join();
  expectSums(runs);
}

// Ranks as `kiln train --strategy=mirrored --device=cuda` makes them: every
// communicator by one call (createLocalNcclCommunicators, rank r on device
// r), each then stepped and closed on a replica thread of its own.
TEST(CudaNcclGpu, MirroredReplicasAllReduceInsideTheStepGraph) {
  std::string why;
  int world = gpusOrSkip(why);
  if (!world)
    GTEST_SKIP() << why;
  dist::CommOptions options;
  options.timeoutSeconds = 60;
  auto comms = dist::createLocalNcclCommunicators(world, options);
  ASSERT_TRUE(comms.isOk()) << comms.status().message();
  std::vector<RankRun> runs(world);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank)
    threads.emplace_back([&, rank] {
      runs[rank] = stepRank(rank, world, *comms.value()[rank]);
      comms.value()[rank].reset();
    });
  for (std::thread &t : threads)
    t.join();
  expectSums(runs);
}

} // namespace
