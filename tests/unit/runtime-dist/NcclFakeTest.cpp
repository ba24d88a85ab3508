//===- NcclFakeTest.cpp - NcclCommunicator's logic without a GPU -----------===//
//
// NcclCommunicator against FakeNccl.cpp (NCCL and cudart stand-ins that
// share host memory between ranks that are threads of this process, loaded
// through KILN_NCCL and KILN_CUDART as the real libraries would be): the
// rendezvous and the unique id through the store, the polled non-blocking
// init, every collective's results, a rank that never reaches a collective
// named after the timeout, one that left named at once, an init that never
// completes bounded and explained, and NCCL's error codes named.
//
//===----------------------------------------------------------------------===//

#include "runtime/dist/NcclCommunicator.h"
#include "tests/unit/runtime-dist/FreePort.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <dlfcn.h>
#include <cstdlib>
#include <functional>
#include <future>
#include <memory>
#include <thread>

namespace kiln::runtime::dist {
namespace {

using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

// Before anything loads the libraries.
const bool kFakeLoaded = [] {
  setenv("KILN_NCCL", KILN_FAKE_NCCL, 1);
  setenv("KILN_CUDART", KILN_FAKE_NCCL, 1);
  return true;
}();

using kiln::runtime::testing::freePort;

// Runs |body| on |world| ranks (threads); |ranks| limits which create a
// communicator; |closed| (if set) is called with a rank once its
// communicator is destroyed. Each rank's error ("" if none).
std::vector<std::string>
run(int world, double timeout,
    const std::function<std::string(int, Communicator &)> &body,
    int ranks = -1, const std::function<void(int)> &closed = {}) {
  int port = freePort();
  std::vector<std::string> errors(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < (ranks < 0 ? world : ranks); ++r)
    threads.emplace_back([&, r] {
      DistEnv env;
      env.rank = env.localRank = r;
      env.worldSize = env.localWorldSize = world;
      env.masterAddr = "127.0.0.1";
      env.masterPort = port;
      CommOptions options;
      options.timeoutSeconds = timeout;
      {
        auto comm = createNcclCommunicator(env, options);
        errors[r] =
            comm.isOk() ? body(r, *comm.value()) : comm.status().message();
      }
      if (closed)
        closed(r);
    });
  for (std::thread &t : threads)
    t.join();
  return errors;
}

std::string text(const Status &s) { return s.isOk() ? "" : s.message(); }

TEST(NcclFake, LoadsTheFakeLibraries) {
  StatusOr<NcclLibraryInfo> info = loadNcclLibraries();
  ASSERT_TRUE(info.isOk()) << info.status().message();
  EXPECT_EQ(info.value().ncclPath, KILN_FAKE_NCCL);
  EXPECT_EQ(info.value().ncclVersion, 22809);
}

// Rank |r|'s part of every collective on two ranks; "" or what went wrong.
std::string everyCollective(int r, Communicator &c) {
  // "Device" buffers from the fake cudart (host memory here).
  std::vector<float> in = {1.0f + r, 2.0f + r, 3.0f + r, 4.0f + r}, out(8);
  auto dIn = ncclDeviceAlloc(r, 16), dOut = ncclDeviceAlloc(r, 32);
  if (!dIn.isOk() || !dOut.isOk())
    return "alloc";
  std::string e = text(ncclDeviceCopy(dIn.value(), in.data(), 16));
  auto expect = [&](const char *what, std::vector<float> want) {
    if (!e.empty())
      return;
    e = text(ncclDeviceCopy(out.data(), dOut.value(), 4 * want.size()));
    for (size_t i = 0; e.empty() && i < want.size(); ++i)
      if (out[i] != want[i])
        e = std::string(what) + " element " + std::to_string(i) + ": " +
            std::to_string(out[i]);
  };
  if (e.empty())
    e = text(c.allReduce(dIn.value(), dOut.value(), 4, PkgDType::F32,
                         PkgReduceKind::Sum));
  expect("all_reduce sum", {3, 5, 7, 9});
  if (e.empty())
    e = text(c.allReduce(dIn.value(), dOut.value(), 4, PkgDType::F32,
                         PkgReduceKind::Mean));
  expect("all_reduce mean", {1.5, 2.5, 3.5, 4.5});
  if (e.empty())
    e = text(c.reduceScatter(dIn.value(), dOut.value(), 2, PkgDType::F32,
                             PkgReduceKind::Max));
  expect("reduce_scatter max",
         r == 0 ? std::vector<float>{2, 3} : std::vector<float>{4, 5});
  if (e.empty())
    e = text(c.allGather(dIn.value(), dOut.value(), 4, PkgDType::F32));
  expect("all_gather", {1, 2, 3, 4, 2, 3, 4, 5});
  if (e.empty())
    e = text(c.broadcast(dIn.value(), dOut.value(), 4, PkgDType::F32, 1));
  expect("broadcast", {2, 3, 4, 5});
  if (e.empty())
    e = text(c.barrier());
  (void)ncclDeviceFree(dIn.value());
  (void)ncclDeviceFree(dOut.value());
  return e;
}

TEST(NcclFake, TwoRanksRunEveryCollective) {
  auto errors = run(2, 30, everyCollective);
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
}

// --strategy=mirrored on GPUs: one call makes every rank's communicator,
// rank r on device r, meeting through a store on an ephemeral port; the
// ranks then run their collectives on threads of their own.
TEST(NcclFake, OneProcessMakesEveryRanksCommunicator) {
  CommOptions options;
  options.timeoutSeconds = 30;
  auto comms = createLocalNcclCommunicators(2, options);
  ASSERT_TRUE(comms.isOk()) << comms.status().message();
  ASSERT_EQ(comms.value().size(), 2u);
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    Communicator &c = *comms.value()[r];
    EXPECT_EQ(c.rank(), r);
    EXPECT_EQ(c.worldSize(), 2);
    EXPECT_NE(c.deviceCollectives(), nullptr); // on-device collectives
  }
  for (int r = 0; r < 2; ++r) {
    // Each rank's thread closes its communicator, as a replica does.
    threads.emplace_back([&, r] {
      errors[r] = everyCollective(r, *comms.value()[r]);
      comms.value()[r].reset();
    });
  }
  for (std::thread &t : threads)
    t.join();
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
}

TEST(NcclFake, OneProcessNeedsADevicePerRank) {
  CommOptions options;
  options.timeoutSeconds = 30;
  // The fake cudart has two devices.
  auto comms = createLocalNcclCommunicators(3, options);
  ASSERT_FALSE(comms.isOk());
  EXPECT_EQ(comms.status().message(),
            "NCCL: 3 ranks need as many CUDA devices, 2 found");
  options.timeoutSeconds = -1;
  EXPECT_FALSE(createLocalNcclCommunicators(2, options).isOk());
  EXPECT_FALSE(createLocalNcclCommunicators(0, {}).isOk());
}

// A mirrored replica that stops with an error aborts its communicator: the
// other's next collective fails at once naming it, long before the
// timeout, and neither rank's destruction waits for the other.
TEST(NcclFake, OneProcessRankThatAbortsIsNamedAtOnce) {
  CommOptions options;
  options.timeoutSeconds = 60;
  auto comms = createLocalNcclCommunicators(2, options);
  ASSERT_TRUE(comms.isOk()) << comms.status().message();
  Clock::time_point start = Clock::now();
  std::promise<void> left;
  std::string error0, error1;
  std::thread rank1([&] {
    Communicator &c = *comms.value()[1];
    c.abort();
    std::vector<float> mine(4, 1.0f);
    error1 = text(c.allReduce(mine.data(), mine.data(), 4, PkgDType::F32,
                              PkgReduceKind::Sum));
    comms.value()[1].reset();
    left.set_value();
  });
  std::thread rank0([&] {
    left.get_future().wait();
    std::vector<float> mine(4, 1.0f);
    error0 = text(comms.value()[0]->allReduce(
        mine.data(), mine.data(), 4, PkgDType::F32, PkgReduceKind::Sum));
    comms.value()[0].reset();
  });
  rank1.join();
  rank0.join();
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 20.0);
  EXPECT_THAT(error1, HasSubstr("rank 1 stopped"));
  EXPECT_THAT(error0, HasSubstr("rank 1 had already closed its communicator"));
}

// A rank of one process that fails to connect (its device unusable, or
// its NCCL init failing) ends the others' rendezvous at once: the error is
// its own, long before the 60 s timeout, whichever rank it is.
TEST(NcclFake, OneProcessRankThatCannotConnectEndsTheRendezvous) {
  struct Case {
    const char *variable, *value, *expected;
  } cases[] = {
      {"FAKE_CUDA_FAIL_DEVICE", "1",
       "rank 1 of 2: NCCL rendezvous at 127.0.0.1:"},
      {"FAKE_CUDA_FAIL_DEVICE", "0",
       "rank 0 of 2: NCCL rendezvous at 127.0.0.1:"},
      {"FAKE_NCCL_FAIL_INIT_RANK", "1",
       "rank 1 of 2: NCCL rendezvous at 127.0.0.1:"},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(std::string(c.variable) + "=" + c.value);
    setenv(c.variable, c.value, 1);
    CommOptions options;
    options.timeoutSeconds = 60;
    Clock::time_point start = Clock::now();
    auto comms = createLocalNcclCommunicators(2, options);
    double seconds =
        std::chrono::duration<double>(Clock::now() - start).count();
    unsetenv(c.variable);
    ASSERT_FALSE(comms.isOk());
    EXPECT_LT(seconds, 10.0);
    EXPECT_THAT(comms.status().message(), HasSubstr(c.expected));
    EXPECT_THAT(comms.status().message(),
                HasSubstr(std::string(c.variable) == "FAKE_CUDA_FAIL_DEVICE"
                              ? "cudaSetDevice"
                              : "ncclCommInitRankConfig"));
    EXPECT_THAT(comms.status().message(),
                ::testing::Not(HasSubstr("another rank")));
  }
  // Afterwards the process makes communicators as before.
  CommOptions options;
  options.timeoutSeconds = 30;
  auto comms = createLocalNcclCommunicators(2, options);
  ASSERT_TRUE(comms.isOk()) << comms.status().message();
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] { comms.value()[r].reset(); });
  for (std::thread &t : threads)
    t.join();
}

TEST(NcclFake, RankThatNeverArrivesIsNamedAfterTheTimeout) {
  std::vector<float> buf(4, 1.0f);
  Clock::time_point start = Clock::now();
  std::atomic<bool> rank0Done{false};
  auto errors = run(2, 0.5, [&](int r, Communicator &c) -> std::string {
    std::vector<float> mine(4, 1.0f);
    Status s = c.allReduce(mine.data(), mine.data(), 4, PkgDType::F32,
                           PkgReduceKind::Sum);
    if (!s.isOk() || r == 1) {
      // Rank 1 stays connected but never issues collective #2.
      while (r == 1 && !rank0Done)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      return text(s);
    }
    s = c.allReduce(mine.data(), mine.data(), 4, PkgDType::F32,
                    PkgReduceKind::Sum);
    Status later = c.barrier();
    rank0Done = true;
    return text(s) + " | " + text(later);
  });
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 20.0);
  EXPECT_EQ(errors[1], "");
  EXPECT_THAT(errors[0], HasSubstr("rank 0: all_reduce sum of 4 f32 "
                                   "(collective #2) timed out after"));
  EXPECT_THAT(errors[0], HasSubstr("rank 1 did not reach it (its last "
                                   "collective was #1)"));
  EXPECT_THAT(errors[0], HasSubstr("| rank 0: barrier: the communicator "
                                   "failed earlier"));
}

TEST(NcclFake, RankThatLeftIsNamedBeforeTheTimeout) {
  Clock::time_point start = Clock::now();
  std::promise<void> left;
  std::shared_future<void> rank1Left = left.get_future().share();
  auto errors = run(
      2, 60,
      [&](int r, Communicator &c) -> std::string {
        std::vector<float> mine(4, 1.0f);
        Status s = c.allReduce(mine.data(), mine.data(), 4, PkgDType::F32,
                               PkgReduceKind::Sum);
        if (!s.isOk() || r == 1)
          return text(s); // rank 1's communicator is destroyed: it left
        rank1Left.wait();
        return text(c.allReduce(mine.data(), mine.data(), 4, PkgDType::F32,
                                PkgReduceKind::Sum));
      },
      -1,
      [&](int r) {
        if (r == 1)
          left.set_value();
      });
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 20.0);
  EXPECT_THAT(errors[0], HasSubstr("(collective #2) failed after"));
  EXPECT_THAT(errors[0], HasSubstr("rank 1 had already closed its "
                                   "communicator"));
}

// DeviceCollectives (CudaExecutable's path): a collective enqueued on a
// caller's stream; its values are there once waitStream returns; and
// waitStream names a rank that left before reaching the collective, long
// before the timeout.
TEST(NcclFake, EnqueuedCollectivesAreWaitedForOnTheStream) {
  void *fake = dlopen(KILN_FAKE_NCCL, RTLD_NOW | RTLD_LOCAL);
  ASSERT_TRUE(fake) << dlerror();
  auto createStream = reinterpret_cast<int (*)(void **, unsigned)>(
      dlsym(fake, "cudaStreamCreateWithFlags"));
  ASSERT_TRUE(createStream);
  auto destroyStream =
      reinterpret_cast<int (*)(void *)>(dlsym(fake, "cudaStreamDestroy"));
  ASSERT_TRUE(destroyStream);
  Clock::time_point start = Clock::now();
  std::vector<std::vector<float>> values(2);
  std::promise<void> left;
  std::shared_future<void> rank1Left = left.get_future().share();
  auto body = [&](int r, Communicator &c) -> std::string {
    DeviceCollectives *dc = c.deviceCollectives();
    if (!dc)
      return "no device collectives";
    void *stream = nullptr;
    createStream(&stream, 1);
    std::unique_ptr<void, int (*)(void *)> destroy(stream, destroyStream);
    std::vector<float> &mine = values[r];
    mine.assign(4, float(r + 1));
    Status s = dc->enqueueAllReduce(mine.data(), mine.data(), 4, PkgDType::F32,
                                    PkgReduceKind::Sum, stream);
    if (!s.isOk())
      return text(s);
    if (Status w = dc->waitStream(stream); !w.isOk())
      return text(w);
    if (r == 1)
      return ""; // leaves
    // Rank 0 again, once rank 1 has closed its communicator: rank 1 never
    // enqueues this one.
    rank1Left.wait();
    s = dc->enqueueAllReduce(mine.data(), mine.data(), 4, PkgDType::F32,
                             PkgReduceKind::Sum, stream);
    if (!s.isOk())
      return "enqueue: " + text(s);
    return text(dc->waitStream(stream));
  };
  auto errors = run(2, 60, body, -1, [&](int r) {
    if (r == 1)
      left.set_value();
  });
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 20.0);
  EXPECT_EQ(errors[1], "");
  EXPECT_EQ(values[1], std::vector<float>(4, 3.0f));
  EXPECT_THAT(errors[0], HasSubstr("waiting for the step's collectives"));
  EXPECT_THAT(errors[0], HasSubstr("rank 1 had already closed its "
                                   "communicator"));
}

TEST(NcclFake, RendezvousNamesARankThatNeverArrives) {
  auto errors = run(2, 0.5, [](int, Communicator &) { return std::string(); },
                    /*ranks=*/1);
  EXPECT_THAT(errors[0], HasSubstr("rank 0 of 2: NCCL rendezvous at "
                                   "127.0.0.1:"));
  EXPECT_THAT(errors[0], HasSubstr("rank(s) 1 never arrived"));
}

TEST(NcclFake, InitThatNeverCompletesIsBoundedAndExplained) {
  setenv("FAKE_NCCL_HANG_INIT_RANK", "1", 1);
  Clock::time_point start = Clock::now();
  auto errors = run(2, 0.5, [](int, Communicator &) { return std::string(); });
  unsetenv("FAKE_NCCL_HANG_INIT_RANK");
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 20.0);
  // The first rank to give up finds every rank there; the other may find
  // that one gone already.
  int explained = 0;
  for (const std::string &e : errors) {
    EXPECT_THAT(e, HasSubstr("ncclCommInitRankConfig did not complete within "
                             "0.5 s"));
    explained += e.find("every rank entered ncclCommInitRank and is "
                        "connected to the store") != std::string::npos;
  }
  EXPECT_GE(explained, 1) << errors[0] << "\n" << errors[1];
}

TEST(NcclFake, NcclErrorsAreNamed) {
  auto errors = run(2, 30, [](int, Communicator &c) -> std::string {
    std::vector<double> mine(4, 1.0);
    return text(c.allReduce(mine.data(), mine.data(), 4, PkgDType::F64,
                            PkgReduceKind::Sum));
  });
  for (int r = 0; r < 2; ++r)
    EXPECT_THAT(errors[r],
                HasSubstr("rank " + std::to_string(r) +
                          ": all_reduce sum of 4 f64 (collective #1): "
                          "ncclAllReduce failed: ncclInvalidArgument (4): "
                          "fake NCCL error"));
  auto i1 = run(2, 30, [](int, Communicator &c) -> std::string {
    bool b[2] = {};
    return text(c.allReduce(b, b, 2, PkgDType::I1, PkgReduceKind::Sum));
  });
  EXPECT_THAT(i1[0], HasSubstr("all_reduce sum of 2 i1: not supported for "
                               "this dtype"));
}

} // namespace
} // namespace kiln::runtime::dist
