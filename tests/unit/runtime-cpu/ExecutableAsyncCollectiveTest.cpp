//===- ExecutableAsyncCollectiveTest.cpp - collectives off the thunk loop -===//
//
// The CPU Executable runs Collective thunks on a communication thread and
// lets later thunks go on unless they touch the collective's bytes. A fake
// communicator whose all-reduce does not finish until the independent
// kernel after it has run (waiting for it, with a long bound that only
// keeps a broken build from hanging) shows the overlap by the order of
// events both threads record, not by timing: the independent kernel runs
// before the all-reduce completes, while a kernel that reads its result
// and one that writes over its operand's bytes run only after it. With
// asyncCollectives off the same package runs in thunk order with the same
// results; a failing collective fails the step with its message, and the
// thunks that needed its result do not run.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Executable.h"
#include "runtime/dist/Communicator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace kiln::runtime::cpu {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// What happened, in order, on either thread.
class EventLog {
public:
  void add(const std::string &event) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      events_.push_back(event);
    }
    changed_.notify_all();
  }
  // Waits until |event| was recorded; false after |bound| (a hang guard).
  bool waitFor(const std::string &event, std::chrono::seconds bound) {
    std::unique_lock<std::mutex> lock(mutex_);
    return changed_.wait_for(lock, bound, [&] {
      return std::find(events_.begin(), events_.end(), event) != events_.end();
    });
  }
  std::vector<std::string> events() {
    std::lock_guard<std::mutex> lock(mutex_);
    return events_;
  }
  // Position of |event|, or -1.
  int position(const std::string &event) {
    std::vector<std::string> all = events();
    auto it = std::find(all.begin(), all.end(), event);
    return it == all.end() ? -1 : static_cast<int>(it - all.begin());
  }
  void clear() {
    std::lock_guard<std::mutex> lock(mutex_);
    events_.clear();
  }

private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::string> events_;
};

EventLog eventLog;

constexpr int64_t kElements = 16;

// y = x + 1: touches nothing the all-reduce does.
void independentKernel(void **buffers, int64_t, int64_t) {
  auto *x = static_cast<const float *>(buffers[0]);
  auto *y = static_cast<float *>(buffers[1]);
  for (int64_t i = 0; i < kElements; ++i)
    y[i] = x[i] + 1;
  eventLog.add("independent");
}

// w = -x, where w's bytes are the all-reduce's operand's (an arena buffer
// reused once its last reader, the collective, was issued).
void overwriteKernel(void **buffers, int64_t, int64_t) {
  auto *x = static_cast<const float *>(buffers[0]);
  auto *w = static_cast<float *>(buffers[1]);
  for (int64_t i = 0; i < kElements; ++i)
    w[i] = -x[i];
  eventLog.add("overwrite");
}

// z = r + 1, r the all-reduce's result.
void consumeKernel(void **buffers, int64_t, int64_t) {
  auto *r = static_cast<const float *>(buffers[0]);
  auto *z = static_cast<float *>(buffers[1]);
  for (int64_t i = 0; i < kElements; ++i)
    z[i] = r[i] + 1;
  eventLog.add("consume");
}

class MapLoader : public KernelLoader {
public:
  StatusOr<KernelFn> load(const PackageKernel &kernel, size_t) override {
    static const std::map<std::string, KernelFn> functions = {
        {"independent", independentKernel},
        {"overwrite", overwriteKernel},
        {"consume", consumeKernel}};
    auto it = functions.find(kernel.name);
    if (it == functions.end())
      return Status::error("no test kernel " + kernel.name);
    return it->second;
  }
};

// A sum all-reduce over two ranks that hold the same values (out = 2 in)
// that, when |holdUntilIndependent|, does not finish before the
// independent kernel has run; or fails with |failure|.
class SlowCommunicator : public dist::Communicator {
public:
  bool holdUntilIndependent = true;
  Status failure;

  int rank() const override { return 0; }
  int worldSize() const override { return 2; }
  Status allReduce(const void *in, void *out, int64_t count, PkgDType,
                   PkgReduceKind) override {
    eventLog.add("all_reduce begins");
    if (holdUntilIndependent &&
        !eventLog.waitFor("independent", std::chrono::seconds(60)))
      eventLog.add("all_reduce gave up waiting");
    if (!failure.isOk())
      return failure;
    for (int64_t i = 0; i < count; ++i)
      static_cast<float *>(out)[i] = 2 * static_cast<const float *>(in)[i];
    eventLog.add("all_reduce ends");
    return Status::ok();
  }
  Status reduceScatter(const void *, void *, int64_t, PkgDType,
                       PkgReduceKind) override {
    return Status::error("not used");
  }
  Status allGather(const void *, void *, int64_t, PkgDType) override {
    return Status::error("not used");
  }
  Status broadcast(const void *, void *, int64_t, PkgDType, int) override {
    return Status::error("not used");
  }
  Status barrier() override { return Status::ok(); }
};

uint32_t addBuffer(LoadedPackage &p, const std::string &name,
                   int64_t offset = -1) {
  PackageBuffer b;
  b.name = name;
  b.dtype = PkgDType::F32;
  b.shape = {kElements};
  b.size = kElements * 4;
  b.offset = offset >= 0 ? offset : (p.arenaSize + 63) / 64 * 64;
  p.arenaSize = std::max<uint64_t>(p.arenaSize, b.offset + b.size);
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

void addLaunch(LoadedPackage &p, const std::string &kernel, uint32_t in,
               uint32_t out) {
  PackageKernel k;
  k.kind = KernelKind::LlvmBitcode;
  k.name = kernel;
  k.entryPoint = "kiln_kernel";
  p.kernels.push_back(k);
  PackageThunk t;
  t.kind = ThunkKind::KernelLaunch;
  t.kernel = p.kernels.size() - 1;
  t.operands = {in};
  t.results = {out};
  p.thunks.push_back(t);
}

// Thunks: r = all_reduce(g); y = independent(x); w = overwrite(x), w in
// g's bytes; z = consume(r).
LoadedPackage overlapPackage() {
  LoadedPackage p;
  uint32_t g = addBuffer(p, "g");
  uint32_t x = addBuffer(p, "x");
  uint32_t r = addBuffer(p, "r");
  uint32_t y = addBuffer(p, "y");
  uint32_t z = addBuffer(p, "z");
  uint32_t w = addBuffer(p, "w", p.buffers[g].offset);
  addSignature(p.inputs, p, g);
  addSignature(p.inputs, p, x);
  PackageThunk allReduce;
  allReduce.kind = ThunkKind::Collective;
  allReduce.hasCollective = true;
  allReduce.collective.kind = CollectiveKind::AllReduce;
  allReduce.collective.reduction = PkgReduceKind::Sum;
  allReduce.operands = {g};
  allReduce.results = {r};
  p.thunks.push_back(allReduce);
  addLaunch(p, "independent", x, y);
  addLaunch(p, "overwrite", x, w);
  addLaunch(p, "consume", r, z);
  addSignature(p.outputs, p, r);
  addSignature(p.outputs, p, y);
  addSignature(p.outputs, p, z);
  p.metadata.strategy = Strategy::DataParallel;
  p.metadata.worldSize = 2;
  return p;
}

std::unique_ptr<Executable> create(SlowCommunicator &comm, bool async) {
  MapLoader loader;
  ExecutableOptions options;
  options.threads = 1;
  options.communicator = &comm;
  options.asyncCollectives = async;
  auto exe = Executable::create(overlapPackage(), loader, options);
  EXPECT_TRUE(exe.isOk()) << exe.status().message();
  if (!exe.isOk())
    return nullptr;
  float *g = static_cast<float *>(exe.value()->input(0));
  float *x = static_cast<float *>(exe.value()->input(1));
  for (int64_t i = 0; i < kElements; ++i) {
    g[i] = 0.5f * i - 3;
    x[i] = 10.0f + i;
  }
  return std::move(exe.value());
}

// The results against the arithmetic done here: r = 2 g (g as it was
// before w overwrote its bytes), y = x + 1, z = r + 1; w = -x in g's bytes.
void expectResults(Executable &exe) {
  auto *g = static_cast<const float *>(exe.input(0));
  auto *r = static_cast<const float *>(exe.output(0));
  auto *y = static_cast<const float *>(exe.output(1));
  auto *z = static_cast<const float *>(exe.output(2));
  for (int64_t i = 0; i < kElements; ++i) {
    float original = 0.5f * i - 3, x = 10.0f + i;
    EXPECT_EQ(r[i], 2 * original) << i;
    EXPECT_EQ(y[i], x + 1) << i;
    EXPECT_EQ(z[i], 2 * original + 1) << i;
    EXPECT_EQ(g[i], -x) << i;
  }
}

TEST(ExecutableAsyncCollectives, IndependentThunkOverlapsConflictingOnesWait) {
  SlowCommunicator comm;
  std::unique_ptr<Executable> exe = create(comm, /*async=*/true);
  ASSERT_TRUE(exe);
  eventLog.clear();
  Status s = exe->run();
  ASSERT_TRUE(s.isOk()) << s.message();
  int independent = eventLog.position("independent");
  int ends = eventLog.position("all_reduce ends");
  ASSERT_GE(independent, 0);
  ASSERT_GE(ends, 0) << "the all-reduce did not complete";
  EXPECT_EQ(eventLog.position("all_reduce gave up waiting"), -1);
  // The kernel after the collective ran while it was in flight...
  EXPECT_LT(independent, ends);
  // ...the one overwriting its operand and the one reading its result
  // waited for it, and ran in thunk order.
  EXPECT_GT(eventLog.position("overwrite"), ends);
  EXPECT_GT(eventLog.position("consume"), eventLog.position("overwrite"));
  expectResults(*exe);
}

TEST(ExecutableAsyncCollectives, InThunkOrderWhenOff) {
  SlowCommunicator comm;
  comm.holdUntilIndependent = false;
  std::unique_ptr<Executable> exe = create(comm, /*async=*/false);
  ASSERT_TRUE(exe);
  eventLog.clear();
  Status s = exe->run();
  ASSERT_TRUE(s.isOk()) << s.message();
  EXPECT_THAT(eventLog.events(),
              ElementsAre("all_reduce begins", "all_reduce ends",
                          "independent", "overwrite", "consume"));
  expectResults(*exe);
}

TEST(ExecutableAsyncCollectives, SecondStepOverlapsToo) {
  SlowCommunicator comm;
  std::unique_ptr<Executable> exe = create(comm, /*async=*/true);
  ASSERT_TRUE(exe);
  ASSERT_TRUE(exe->run().isOk());
  // Step 2 reads g = -x (step 1's overwrite): r = -2 x.
  eventLog.clear();
  ASSERT_TRUE(exe->run().isOk());
  EXPECT_LT(eventLog.position("independent"), eventLog.position("all_reduce ends"));
  EXPECT_GT(eventLog.position("consume"), eventLog.position("all_reduce ends"));
  auto *r = static_cast<const float *>(exe->output(0));
  for (int64_t i = 0; i < kElements; ++i)
    EXPECT_EQ(r[i], -2 * (10.0f + i)) << i;
}

TEST(ExecutableAsyncCollectives, FailureIsTheStepsErrorAndStopsDependents) {
  SlowCommunicator comm;
  comm.failure = Status::error(
      "rank 1 is gone: its connection closed during all_reduce #1");
  std::unique_ptr<Executable> exe = create(comm, /*async=*/true);
  ASSERT_TRUE(exe);
  eventLog.clear();
  Status s = exe->run();
  ASSERT_FALSE(s.isOk());
  EXPECT_THAT(s.message(),
              HasSubstr("thunk 0 (all_reduce): rank 1 is gone: its "
                        "connection closed during all_reduce #1"));
  EXPECT_GE(eventLog.position("independent"), 0);
  EXPECT_EQ(eventLog.position("overwrite"), -1);
  EXPECT_EQ(eventLog.position("consume"), -1);
}

} // namespace
} // namespace kiln::runtime::cpu
