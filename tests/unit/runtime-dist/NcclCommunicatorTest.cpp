//===- NcclCommunicatorTest.cpp - NCCL through dlopen ----------------------===//
//
// Without a GPU: NCCL and cudart load and every entry point resolves (when
// the toolkit's libraries are installed), a library that is not there is
// named with where it was looked for, and a communicator on a machine
// without a CUDA device fails at once saying so. NcclGpu* (ctest label gpu)
// need devices and skip without them: one rank through the store on one
// GPU, and two processes on two GPUs, against values computed here.
//
//===----------------------------------------------------------------------===//

#include "runtime/dist/NcclCommunicator.h"
#include "tests/unit/runtime-dist/FreePort.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace kiln::runtime::dist {
namespace {

using ::testing::HasSubstr;

using kiln::runtime::testing::freePort;

// The CUDA device count, asked in a child process (so that this process
// never initializes CUDA and may fork ranks): -1 without NCCL or cudart.
int deviceCountInChild() {
  pid_t pid = fork();
  if (pid == 0) {
    if (!loadNcclLibraries().isOk())
      _exit(255);
    StatusOr<void *> p = ncclDeviceAlloc(0, 4); // fails without a device
    if (!p.isOk())
      _exit(0);
    (void)ncclDeviceFree(p.value());
    for (int d = 1; d < 8; ++d) {
      StatusOr<void *> q = ncclDeviceAlloc(d, 4);
      if (!q.isOk())
        _exit(d);
      (void)ncclDeviceFree(q.value());
    }
    _exit(8);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  int code = WIFEXITED(status) ? WEXITSTATUS(status) : 255;
  return code == 255 ? -1 : code;
}

TEST(NcclLibrary, LoadsEveryEntryPoint) {
  StatusOr<NcclLibraryInfo> info = loadNcclLibraries();
  if (!info.isOk())
    GTEST_SKIP() << "NCCL or cudart is not installed here: "
                 << info.status().message();
  EXPECT_THAT(info.value().ncclPath, HasSubstr("libnccl.so.2"));
  EXPECT_THAT(info.value().cudartPath, HasSubstr("libcudart.so"));
  // 2.x: major * 10000 + minor * 100 + patch, and new enough for the
  // non-blocking init.
  EXPECT_GE(info.value().ncclVersion, 21400);
  EXPECT_LT(info.value().ncclVersion, 30000);
}

TEST(NcclLibrary, MissingLibraryIsNamed) {
  GTEST_FLAG_SET(death_test_style, "threadsafe"); // a fresh process
  EXPECT_EXIT(
      {
        setenv("KILN_NCCL", "/nonexistent/libnccl.so.2", 1);
        StatusOr<NcclLibraryInfo> info = loadNcclLibraries();
        DistEnv env;
        env.worldSize = 2;
        auto comm = createNcclCommunicator(env, CommOptions());
        std::fprintf(stderr, "[%s] [%s]\n", info.status().message().c_str(),
                     comm.status().message().c_str());
        std::_Exit(info.isOk() || comm.isOk() ? 0 : 3);
      },
      ::testing::ExitedWithCode(3),
      "\\[cannot load NCCL: tried /nonexistent/libnccl.so.2 \\(.*\\) \\(set "
      "KILN_NCCL to the library's path\\)\\] \\[rank 0: NCCL: cannot load "
      "NCCL: tried /nonexistent/libnccl.so.2");
}

TEST(NcclCommunicator, NoDeviceIsAClearErrorBeforeAnyRendezvous) {
  if (!loadNcclLibraries().isOk())
    GTEST_SKIP() << "NCCL or cudart is not installed here";
  if (deviceCountInChild() > 0)
    GTEST_SKIP() << "a CUDA device is present (NcclGpu* test it)";
  DistEnv env;
  env.rank = 1;
  env.worldSize = 2;
  env.masterPort = freePort(); // nobody serves it: no rendezvous happens
  auto start = std::chrono::steady_clock::now();
  auto comm = createNcclCommunicator(env, CommOptions());
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                          start).count(), 10.0);
  ASSERT_FALSE(comm.isOk());
  EXPECT_THAT(comm.status().message(),
              HasSubstr("rank 1: NCCL: no CUDA device: "));
  // The CUDA error is named (cudaErrorNoDevice, cudaErrorInsufficientDriver,
  // ...) with its number.
  EXPECT_THAT(comm.status().message(), ::testing::ContainsRegex(
                                           "cuda[A-Za-z]+ \\([0-9]+\\)|found none"));
}

TEST(NcclCommunicator, BadArgumentsAreErrors) {
  DistEnv env;
  env.rank = 2;
  env.worldSize = 2;
  EXPECT_THAT(createNcclCommunicator(env, CommOptions()).status().message(),
              HasSubstr("rank 2 is not a rank of the world size 2"));
  env.rank = 0;
  CommOptions bad;
  bad.timeoutSeconds = -1;
  EXPECT_THAT(createNcclCommunicator(env, bad).status().message(),
              HasSubstr("expected a positive number of seconds"));
}

// One rank in a child process; "" when every check held.
std::string oneRank(const DistEnv &env, int count) {
  CommOptions options;
  options.timeoutSeconds = 60;
  auto comm = createNcclCommunicator(env, options);
  if (!comm.isOk())
    return comm.status().message();
  Communicator &c = *comm.value();
  int world = env.worldSize;
  std::vector<float> host(count), back(count * world);
  for (int i = 0; i < count; ++i)
    host[i] = static_cast<float>(env.rank + 1) * 0.5f + i;
  StatusOr<void *> in = ncclDeviceAlloc(env.localRank, count * 4);
  StatusOr<void *> out = ncclDeviceAlloc(env.localRank, count * 4 * world);
  if (!in.isOk() || !out.isOk())
    return "alloc: " + (in.isOk() ? out : in).status().message();
  auto check = [&](Status s) { return s.isOk() ? std::string() : s.message(); };
  std::string e = check(ncclDeviceCopy(in.value(), host.data(), count * 4));
  // Sum over ranks r of (r + 1) * 0.5 + i: exact in f32 for small counts.
  if (e.empty())
    e = check(c.allReduce(in.value(), out.value(), count, PkgDType::F32,
                          PkgReduceKind::Sum));
  if (e.empty())
    e = check(ncclDeviceCopy(back.data(), out.value(), count * 4));
  for (int i = 0; e.empty() && i < count; ++i) {
    float want = world * (world + 1) * 0.25f + world * static_cast<float>(i);
    if (back[i] != want)
      e = "all_reduce element " + std::to_string(i) + ": " +
          std::to_string(back[i]) + ", expected " + std::to_string(want);
  }
  if (e.empty())
    e = check(c.allGather(in.value(), out.value(), count, PkgDType::F32));
  if (e.empty())
    e = check(ncclDeviceCopy(back.data(), out.value(), count * 4 * world));
  for (int r = 0; e.empty() && r < world; ++r)
    if (back[r * count + 1] != (r + 1) * 0.5f + 1)
      e = "all_gather block " + std::to_string(r);
  if (e.empty())
    e = check(c.broadcast(in.value(), out.value(), count, PkgDType::F32, 0));
  if (e.empty())
    e = check(ncclDeviceCopy(back.data(), out.value(), count * 4));
  if (e.empty() && back[2] != 0.5f + 2)
    e = "broadcast: " + std::to_string(back[2]);
  if (e.empty())
    e = check(c.barrier());
  (void)ncclDeviceFree(in.value());
  (void)ncclDeviceFree(out.value());
  return e;
}

// Runs |world| ranks as forked processes; each one's error, "" if none.
std::vector<std::string> forkRanks(int world, int count) {
  int port = freePort();
  std::vector<pid_t> pids;
  std::vector<int> pipes;
  for (int r = 0; r < world; ++r) {
    int fds[2];
    if (pipe(fds) != 0)
      return {"pipe failed"};
    pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      DistEnv env;
      env.rank = env.localRank = r;
      env.worldSize = env.localWorldSize = world;
      env.masterAddr = "127.0.0.1";
      env.masterPort = port;
      std::string e = oneRank(env, count);
      (void)!write(fds[1], e.data(), e.size());
      std::_Exit(e.empty() ? 0 : 1);
    }
    close(fds[1]);
    pids.push_back(pid);
    pipes.push_back(fds[0]);
  }
  std::vector<std::string> errors(world);
  for (int r = 0; r < world; ++r) {
    char buf[4096];
    ssize_t n;
    while ((n = read(pipes[r], buf, sizeof buf)) > 0)
      errors[r].append(buf, n);
    close(pipes[r]);
    int status = 0;
    waitpid(pids[r], &status, 0);
    if (errors[r].empty() && !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
      errors[r] = "exited abnormally";
  }
  return errors;
}

TEST(NcclGpu, OneRankThroughTheStore) {
  int devices = deviceCountInChild();
  if (devices < 1)
    GTEST_SKIP() << "needs a CUDA device and NCCL; "
                 << (devices < 0 ? "NCCL or cudart is not installed"
                                 : "no CUDA device here");
  std::vector<std::string> errors = forkRanks(1, 1000);
  EXPECT_EQ(errors[0], "");
}

TEST(NcclGpu, TwoProcessesOnTwoDevices) {
  int devices = deviceCountInChild();
  if (devices < 2)
    GTEST_SKIP() << "needs 2 CUDA devices and NCCL (one device per rank); "
                 << (devices < 0 ? std::string("NCCL or cudart is not installed")
                                 : "found " + std::to_string(devices));
  std::vector<std::string> errors = forkRanks(2, 100000);
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
}

} // namespace
} // namespace kiln::runtime::dist
