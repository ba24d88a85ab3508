//===- ExecutableCollectiveTest.cpp - Collective thunks through Gloo ------===//
//
// Hand-built packages whose thunks are collectives, run by the CPU
// Executable with a Gloo communicator on 2 ranks (threads): a mean
// all-reduce, and a reduce-scatter followed by an all-gather (together a
// sum all-reduce) and a broadcast, checked against the ranks' inputs
// combined directly; and create()'s refusals of collectives the
// communicator cannot run.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Executable.h"
#include "runtime/dist/GlooCommunicator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>

namespace kiln::runtime {
namespace {

using ::testing::HasSubstr;
using cpu::Executable;
using cpu::ExecutableOptions;
using cpu::KernelLoader;
using cpu::KernelFn;

class NoKernels : public KernelLoader {
public:
  StatusOr<KernelFn> load(const PackageKernel &, size_t) override {
    return Status::error("no kernels here");
  }
};

uint32_t addBuffer(LoadedPackage &p, const std::string &name, PkgDType dtype,
                   std::vector<int64_t> shape) {
  PackageBuffer b;
  b.name = name;
  b.dtype = dtype;
  b.shape = shape;
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  b.size = n * pkgBytesPerElement(dtype);
  b.offset = (p.arenaSize + 63) / 64 * 64;
  p.arenaSize = b.offset + b.size;
  p.buffers.push_back(b);
  return p.buffers.size() - 1;
}

void addSignature(std::vector<SignatureEntry> &list, const LoadedPackage &p,
                  uint32_t id) {
  SignatureEntry e;
  e.name = p.buffers[id].name;
  e.dtype = p.buffers[id].dtype;
  e.shape = p.buffers[id].shape;
  e.buffer = id;
  list.push_back(e);
}

void addCollective(LoadedPackage &p, CollectiveKind kind, PkgReduceKind op,
                   uint32_t in, uint32_t out, int64_t root = 0) {
  PackageThunk t;
  t.kind = ThunkKind::Collective;
  t.hasCollective = true;
  t.collective.kind = kind;
  t.collective.reduction = op;
  t.collective.root = root;
  t.operands = {in};
  t.results = {out};
  p.thunks.push_back(t);
}

// g [6,2] f32 -> mean all-reduce -> m; g -> reduce-scatter (sum) -> s [3,2]
// -> all-gather -> a [6,2]; b [3] f64 -> broadcast from rank 1 -> c.
LoadedPackage collectivePackage(uint32_t worldSize) {
  LoadedPackage p;
  uint32_t g = addBuffer(p, "g", PkgDType::F32, {6, 2});
  uint32_t m = addBuffer(p, "m", PkgDType::F32, {6, 2});
  uint32_t s = addBuffer(p, "s", PkgDType::F32, {6 / worldSize, 2});
  uint32_t a = addBuffer(p, "a", PkgDType::F32, {6, 2});
  uint32_t b = addBuffer(p, "b", PkgDType::F64, {3});
  uint32_t c = addBuffer(p, "c", PkgDType::F64, {3});
  addSignature(p.inputs, p, g);
  addSignature(p.inputs, p, b);
  addCollective(p, CollectiveKind::AllReduce, PkgReduceKind::Mean, g, m);
  addCollective(p, CollectiveKind::ReduceScatter, PkgReduceKind::Sum, g, s);
  addCollective(p, CollectiveKind::AllGather, PkgReduceKind::Sum, s, a);
  addCollective(p, CollectiveKind::Broadcast, PkgReduceKind::Sum, b, c, 1);
  addSignature(p.outputs, p, m);
  addSignature(p.outputs, p, a);
  addSignature(p.outputs, p, c);
  p.metadata.strategy = Strategy::DataParallel;
  p.metadata.worldSize = worldSize;
  return p;
}

float gradient(int rank, int i) { return 0.25f * (i + 1) * (rank + 1) - rank; }

TEST(ExecutableCollectives, TwoRanksRunAllReduceScatterGatherBroadcast) {
  const int world = 2;
  auto server = dist::TcpStoreServer::start("127.0.0.1", 0, world);
  ASSERT_TRUE(server.isOk()) << server.status().message();
  int port = server.value()->port();
  std::unique_ptr<dist::TcpStoreServer> owned = std::move(server.value());
  std::vector<std::string> errors(world);
  std::vector<std::vector<float>> means(world), sums(world);
  std::vector<std::vector<double>> broadcasts(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    std::unique_ptr<dist::TcpStoreServer> mine = r ? nullptr : std::move(owned);
    threads.emplace_back([&, r, mine = std::move(mine)]() mutable {
      dist::DistEnv env;
      env.rank = r;
      env.worldSize = world;
      env.masterPort = port;
      dist::CommOptions options;
      options.timeoutSeconds = 20;
      auto comm = dist::createGlooCommunicator(env, options, std::move(mine));
      if (!comm.isOk()) {
        errors[r] = comm.status().message();
        return;
      }
      NoKernels loader;
      ExecutableOptions exeOptions;
      exeOptions.threads = 1;
      exeOptions.communicator = comm.value().get();
      auto exe = Executable::create(collectivePackage(world), loader, exeOptions);
      if (!exe.isOk()) {
        errors[r] = exe.status().message();
        return;
      }
      float *g = static_cast<float *>(exe.value()->input(0));
      double *b = static_cast<double *>(exe.value()->input(1));
      for (int i = 0; i < 12; ++i)
        g[i] = gradient(r, i);
      for (int i = 0; i < 3; ++i)
        b[i] = 100 * r + i + 0.5;
      // Two steps: the second sees the same inputs and gives the same.
      for (int step = 0; step < 2; ++step)
        if (Status s = exe.value()->run(); !s.isOk()) {
          errors[r] = s.message();
          return;
        }
      auto *m = static_cast<const float *>(exe.value()->output(0));
      auto *a = static_cast<const float *>(exe.value()->output(1));
      auto *c = static_cast<const double *>(exe.value()->output(2));
      means[r].assign(m, m + 12);
      sums[r].assign(a, a + 12);
      broadcasts[r].assign(c, c + 3);
    });
  }
  for (std::thread &t : threads)
    t.join();
  for (int r = 0; r < world; ++r) {
    ASSERT_EQ(errors[r], "") << "rank " << r;
    for (int i = 0; i < 12; ++i) {
      float sum = gradient(0, i) + gradient(1, i);
      EXPECT_EQ(means[r][i], sum / 2) << "rank " << r << " element " << i;
      EXPECT_EQ(sums[r][i], sum) << "rank " << r << " element " << i;
    }
    for (int i = 0; i < 3; ++i)
      EXPECT_EQ(broadcasts[r][i], 100 + i + 0.5);
  }
}

// collectivePackage for world size 1 (broadcast from rank 0).
LoadedPackage oneRankPackage() {
  LoadedPackage p = collectivePackage(1);
  p.thunks[3].collective.root = 0;
  return p;
}

// A step compiled for one rank (`kiln compile --strategy=data-parallel`
// without --world-size) runs without a communicator, each collective the
// identity: the mean, the scatter then gather and the broadcast of one
// rank give back its inputs.
TEST(ExecutableCollectives, OneRankRunsWithoutACommunicator) {
  NoKernels loader;
  ExecutableOptions options;
  options.threads = 1;
  auto exe = Executable::create(oneRankPackage(), loader, options);
  ASSERT_TRUE(exe.isOk()) << exe.status().message();
  float *g = static_cast<float *>(exe.value()->input(0));
  double *b = static_cast<double *>(exe.value()->input(1));
  for (int i = 0; i < 12; ++i)
    g[i] = gradient(1, i);
  for (int i = 0; i < 3; ++i)
    b[i] = i + 0.5;
  ASSERT_TRUE(exe.value()->run().isOk());
  auto *m = static_cast<const float *>(exe.value()->output(0));
  auto *a = static_cast<const float *>(exe.value()->output(1));
  auto *c = static_cast<const double *>(exe.value()->output(2));
  for (int i = 0; i < 12; ++i) {
    EXPECT_EQ(m[i], gradient(1, i)) << "mean, element " << i;
    EXPECT_EQ(a[i], gradient(1, i)) << "scatter then gather, element " << i;
  }
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(c[i], i + 0.5) << "broadcast, element " << i;
}

// A communicator that only says its world size (create() checks only).
class FakeCommunicator : public dist::Communicator {
public:
  explicit FakeCommunicator(int world) : world_(world) {}
  int rank() const override { return 0; }
  int worldSize() const override { return world_; }
  Status allReduce(const void *, void *, int64_t, PkgDType,
                   PkgReduceKind) override {
    return Status::ok();
  }
  Status reduceScatter(const void *, void *, int64_t, PkgDType,
                       PkgReduceKind) override {
    return Status::ok();
  }
  Status allGather(const void *, void *, int64_t, PkgDType) override {
    return Status::ok();
  }
  Status broadcast(const void *, void *, int64_t, PkgDType, int) override {
    return Status::ok();
  }
  Status barrier() override { return Status::ok(); }

private:
  int world_;
};

std::string createError(LoadedPackage p, dist::Communicator *comm) {
  NoKernels loader;
  ExecutableOptions options;
  options.threads = 1;
  options.communicator = comm;
  auto exe = Executable::create(std::move(p), loader, options);
  return exe.isOk() ? "(created)" : exe.status().message();
}

TEST(ExecutableCollectives, CreateRefusesWhatTheCommunicatorCannotRun) {
  FakeCommunicator two(2), three(3);
  EXPECT_EQ(createError(collectivePackage(2), &two), "(created)");
  // A step compiled for one rank runs without one (below).
  EXPECT_EQ(createError(oneRankPackage(), nullptr), "(created)");
  EXPECT_THAT(createError(collectivePackage(2), nullptr),
              HasSubstr("thunk 0: collectives need a distributed strategy's "
                        "communicator (kiln launch), which this executable has "
                        "not (thunk kind: all_reduce)"));
  EXPECT_THAT(createError(collectivePackage(2), &three),
              HasSubstr("thunk 0: the package was compiled for world size 2, "
                        "but the communicator has 3 ranks"));
  {
    LoadedPackage p = collectivePackage(2);
    p.metadata.worldSize = 1; // not recorded: only the shapes are checked
    FakeCommunicator four(4);
    EXPECT_THAT(createError(p, &four),
                HasSubstr("thunk 1: reduce_scatter: dimension 0 of the operand "
                          "is 6, expected a multiple of the world size 4"));
  }
  {
    LoadedPackage p = collectivePackage(2);
    p.buffers[p.thunks[1].results[0]].shape = {2, 2};
    p.buffers[p.thunks[1].results[0]].size = 16;
    EXPECT_THAT(createError(p, &two),
                HasSubstr("thunk 1: reduce_scatter of 12 elements at world size "
                          "2 yields 6 elements, but the result holds 4"));
  }
  {
    LoadedPackage p = collectivePackage(2);
    p.thunks[2].collective.dimension = 1;
    EXPECT_THAT(createError(p, &two),
                HasSubstr("thunk 2: all_gather along dimension 1; the CPU "
                          "executable splits dimension 0 only"));
  }
  {
    LoadedPackage p = collectivePackage(2);
    p.thunks[3].collective.root = 2;
    EXPECT_THAT(createError(p, &two),
                HasSubstr("thunk 3: collective_broadcast root 2 is not a rank "
                          "of the world size 2"));
  }
  {
    LoadedPackage p = collectivePackage(2);
    p.thunks[0].collective.groups = {1, 0};
    p.thunks[0].collective.groupsShape = {1, 2};
    EXPECT_THAT(createError(p, &two),
                HasSubstr("thunk 0: all_reduce over replica groups other than "
                          "all 2 ranks in order is not supported"));
    p.thunks[0].collective.groups = {0, 1};
    EXPECT_EQ(createError(p, &two), "(created)");
  }
  {
    LoadedPackage p = collectivePackage(2);
    p.thunks[0].operands.push_back(0);
    EXPECT_THAT(createError(p, &two),
                HasSubstr("thunk 0: all_reduce takes 1 operand and 1 result, "
                          "found 2 and 1"));
  }
  {
    LoadedPackage p = collectivePackage(2);
    p.buffers[p.thunks[3].results[0]].dtype = PkgDType::I64;
    p.outputs[2].dtype = PkgDType::I64;
    EXPECT_THAT(createError(p, &two),
                HasSubstr("thunk 3: collective_broadcast from f64 to i64: "
                          "dtypes differ"));
  }
  {
    LoadedPackage p = collectivePackage(2);
    p.thunks[0].collective.kind = CollectiveKind::Send;
    EXPECT_THAT(createError(p, &two),
                HasSubstr("thunk 0: send is not supported by the CPU executable"));
  }
}

} // namespace
} // namespace kiln::runtime
