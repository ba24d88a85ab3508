//===- CommunicatorTest.cpp - the Gloo communicator, several ranks --------===//
//
// Several ranks in one test: threads of this process for the collectives
// (each with its own communicator, Gloo device and store connection), and
// forked processes where a rank has to die or hang. The store listens on
// 127.0.0.1 at an ephemeral port that rank 0's server reports, so nothing
// guesses a free port. Every collective and dtype is checked against the
// same reduction done directly on the ranks' inputs; failures must come
// within the timeout and name the rank at fault.
//
//===----------------------------------------------------------------------===//

#include "runtime/dist/GlooCommunicator.h"
#include "runtime/dist/Sigpipe.h"
#include "tests/unit/runtime-dist/ElementBytes.h"

#include "runtime/Half.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <thread>

namespace kiln::runtime::dist {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using Clock = std::chrono::steady_clock;

// Runs |body(rank, comm)| on |world| ranks as threads, each with its own
// communicator; returns each rank's creation or body error ("" when ok).
std::vector<std::string>
runThreads(int world, double timeout,
           const std::function<std::string(int, Communicator &)> &body) {
  auto server = TcpStoreServer::start("127.0.0.1", 0, world);
  EXPECT_TRUE(server.isOk()) << server.status().message();
  if (!server.isOk())
    return std::vector<std::string>(world, "no server");
  int port = server.value()->port();
  std::vector<std::string> errors(world);
  std::vector<std::thread> threads;
  std::unique_ptr<TcpStoreServer> owned = std::move(server.value());
  for (int r = 0; r < world; ++r) {
    std::unique_ptr<TcpStoreServer> mine = r == 0 ? std::move(owned) : nullptr;
    threads.emplace_back([&, r, mine = std::move(mine)]() mutable {
      DistEnv env;
      env.rank = r;
      env.worldSize = world;
      env.localRank = r;
      env.localWorldSize = world;
      env.masterAddr = "127.0.0.1";
      env.masterPort = port;
      CommOptions options;
      options.timeoutSeconds = timeout;
      auto comm = createGlooCommunicator(env, options, std::move(mine));
      if (!comm.isOk()) {
        errors[r] = "create: " + comm.status().message();
        return;
      }
      errors[r] = body(r, *comm.value());
    });
  }
  for (std::thread &t : threads)
    t.join();
  return errors;
}

void expectAllOk(const std::vector<std::string> &errors) {
  for (size_t r = 0; r < errors.size(); ++r)
    EXPECT_EQ(errors[r], "") << "rank " << r;
}

//===----------------------------------------------------------------------===//
// Element types: storage, conversion from double, and the direct reduction
//===----------------------------------------------------------------------===//

struct TypeCase {
  PkgDType dtype;
  const char *name;
};

using test::bytesOf;
using test::get;
using test::isFloat;
using test::put;

// Rank |rank|'s input element |i|: small integers for the integer and half
// types (so any summation order is exact), random values for f32 and f64.
double inputValue(PkgDType dtype, int rank, size_t i) {
  std::mt19937_64 rng(1000 * rank + i);
  if (dtype == PkgDType::F32 || dtype == PkgDType::F64)
    return std::uniform_real_distribution<double>(-4, 4)(rng);
  return static_cast<double>(static_cast<int64_t>(rng() % 17) - 8);
}

// The reduction of element |i| over the ranks, in rank order, in double.
double reduceDirect(PkgDType dtype, PkgReduceKind op, int world, size_t i,
                    size_t stride = 0) {
  double acc = 0;
  for (int r = 0; r < world; ++r) {
    std::vector<uint8_t> one(bytesOf(dtype));
    put(dtype, one, 0, inputValue(dtype, r, i + stride));
    double v = get(dtype, one, 0);
    if (r == 0)
      acc = v;
    else if (op == PkgReduceKind::Max)
      acc = std::max(acc, v);
    else if (op == PkgReduceKind::Min)
      acc = std::min(acc, v);
    else
      acc += v;
  }
  if (op == PkgReduceKind::Mean) {
    if (isFloat(dtype)) {
      // Divided in the dtype (f16/bf16 in f32), rounded once.
      std::vector<uint8_t> one(bytesOf(dtype));
      double q = dtype == PkgDType::F64 ? acc / world
                                        : static_cast<float>(acc) / world;
      put(dtype, one, 0, q);
      return get(dtype, one, 0);
    }
    acc = std::trunc(acc / world);
  }
  return acc;
}

// Tolerance: exact except for f32/f64 sums, whose order Gloo's ring picks.
double tolerance(PkgDType dtype, PkgReduceKind op, int world) {
  if (op == PkgReduceKind::Max || op == PkgReduceKind::Min)
    return 0;
  if (dtype == PkgDType::F32)
    return 4 * world * 8 * 1.2e-7;
  if (dtype == PkgDType::F64)
    return 4 * world * 8 * 2.3e-16;
  return 0;
}

const PkgDType kDtypes[] = {PkgDType::F32, PkgDType::F64, PkgDType::BF16,
                            PkgDType::F16, PkgDType::I32, PkgDType::I64};
const PkgReduceKind kOps[] = {PkgReduceKind::Sum, PkgReduceKind::Max,
                              PkgReduceKind::Min, PkgReduceKind::Mean};

std::string describeCase(PkgDType d, PkgReduceKind op) {
  static const char *dn[] = {"f64", "f32", "f16", "bf16", "i64", "i32", "i8", "i1"};
  static const char *on[] = {"sum", "max", "min", "mean"};
  return std::string(dn[static_cast<int>(d)]) + " " + on[static_cast<int>(op)];
}

//===----------------------------------------------------------------------===//
// Collectives on threads
//===----------------------------------------------------------------------===//

class Collectives : public ::testing::TestWithParam<int> {};

TEST_P(Collectives, AllReduceEveryDtypeAndOp) {
  int world = GetParam();
  // Large enough for several ring segments per rank for f64.
  const size_t count = 1000;
  auto errors = runThreads(world, 20, [&](int rank, Communicator &comm) {
    std::string failures;
    EXPECT_EQ(comm.rank(), rank);
    EXPECT_EQ(comm.worldSize(), world);
    for (PkgDType d : kDtypes)
      for (PkgReduceKind op : kOps) {
        std::vector<uint8_t> in(count * bytesOf(d)), out(in.size());
        for (size_t i = 0; i < count; ++i)
          put(d, in, i, inputValue(d, rank, i));
        // Out of place on even elements of the loop, in place otherwise.
        bool inPlace = (static_cast<int>(d) + static_cast<int>(op)) % 2;
        Status s = inPlace ? comm.allReduce(in.data(), in.data(), count, d, op)
                           : comm.allReduce(in.data(), out.data(), count, d, op);
        if (!s.isOk())
          return describeCase(d, op) + ": " + s.message();
        const std::vector<uint8_t> &result = inPlace ? in : out;
        double tol = tolerance(d, op, world);
        for (size_t i = 0; i < count; ++i) {
          double want = reduceDirect(d, op, world, i), got = get(d, result, i);
          if (std::fabs(got - want) > tol * std::max(1.0, std::fabs(want))) {
            failures += describeCase(d, op) + " element " + std::to_string(i) +
                        ": " + std::to_string(got) + " != " +
                        std::to_string(want) + "\n";
            break;
          }
        }
      }
    return failures;
  });
  expectAllOk(errors);
}

TEST_P(Collectives, AllReduceResultsAreIdenticalOnEveryRank) {
  int world = GetParam();
  const size_t count = 300000; // several 1 MB ring segments
  std::vector<std::vector<float>> results(world);
  auto errors = runThreads(world, 20, [&](int rank, Communicator &comm) {
    std::vector<float> data(count);
    for (size_t i = 0; i < count; ++i)
      data[i] = inputValue(PkgDType::F32, rank, i % 977) * (1 + i % 13);
    Status s = comm.allReduce(data.data(), data.data(), count, PkgDType::F32,
                              PkgReduceKind::Sum);
    results[rank] = std::move(data);
    return s.isOk() ? "" : s.message();
  });
  expectAllOk(errors);
  for (int r = 1; r < world; ++r)
    EXPECT_EQ(0, std::memcmp(results[0].data(), results[r].data(),
                             count * sizeof(float)))
        << "rank " << r << " differs from rank 0";
  for (size_t i = 0; i < count; i += 9973) {
    double want = 0;
    for (int r = 0; r < world; ++r)
      want += static_cast<float>(inputValue(PkgDType::F32, r, i % 977) *
                                 (1 + i % 13));
    EXPECT_NEAR(results[0][i], want, 1e-5 * std::max(1.0, std::fabs(want)));
  }
}

TEST_P(Collectives, ReduceScatterEveryDtypeAndOp) {
  int world = GetParam();
  const size_t perRank = 37;
  auto errors = runThreads(world, 20, [&](int rank, Communicator &comm) {
    std::string failures;
    for (PkgDType d : kDtypes)
      for (PkgReduceKind op : kOps) {
        std::vector<uint8_t> in(world * perRank * bytesOf(d)),
            out(perRank * bytesOf(d));
        for (size_t i = 0; i < world * perRank; ++i)
          put(d, in, i, inputValue(d, rank, i));
        Status s = comm.reduceScatter(in.data(), out.data(), perRank, d, op);
        if (!s.isOk())
          return describeCase(d, op) + ": " + s.message();
        for (size_t i = 0; i < perRank; ++i) {
          // Reduced in rank order, as done directly: exact for every dtype
          // but the f32 mean's division (in f32 on both sides, so exact too).
          double want = reduceDirect(d, op, world, i, rank * perRank);
          double got = get(d, out, i);
          double tol = d == PkgDType::F32 ? 1e-6 : 1e-12;
          if (std::fabs(got - want) > tol * std::max(1.0, std::fabs(want))) {
            failures += describeCase(d, op) + " element " + std::to_string(i) +
                        ": " + std::to_string(got) + " != " +
                        std::to_string(want) + "\n";
            break;
          }
        }
      }
    return failures;
  });
  expectAllOk(errors);
}

TEST_P(Collectives, AllGatherBroadcastBarrier) {
  int world = GetParam();
  const size_t perRank = 53;
  auto errors = runThreads(world, 20, [&](int rank, Communicator &comm) {
    std::string failures;
    for (PkgDType d : {PkgDType::F32, PkgDType::F64, PkgDType::BF16,
                       PkgDType::I8, PkgDType::I1}) {
      std::vector<uint8_t> in(perRank * bytesOf(d)),
          out(world * perRank * bytesOf(d));
      for (size_t i = 0; i < perRank; ++i)
        put(d, in, i, d == PkgDType::I1 ? (rank + i) % 2 : inputValue(d, rank, i));
      if (Status s = comm.allGather(in.data(), out.data(), perRank, d); !s.isOk())
        return s.message();
      for (int r = 0; r < world; ++r)
        for (size_t i = 0; i < perRank; ++i) {
          std::vector<uint8_t> one(bytesOf(d));
          put(d, one, 0, d == PkgDType::I1 ? (r + i) % 2 : inputValue(d, r, i));
          if (std::memcmp(out.data() + (r * perRank + i) * bytesOf(d),
                          one.data(), bytesOf(d)) != 0) {
            failures += "all_gather: rank " + std::to_string(r) + "'s element " +
                        std::to_string(i) + " is wrong\n";
            r = world;
            break;
          }
        }
      // In place: the input already sits in this rank's block.
      std::vector<uint8_t> inPlace(out.size());
      std::memcpy(inPlace.data() + rank * in.size(), in.data(), in.size());
      if (Status s = comm.allGather(inPlace.data() + rank * in.size(),
                                    inPlace.data(), perRank, d);
          !s.isOk())
        return s.message();
      if (inPlace != out)
        failures += "in-place all_gather differs\n";
    }
    for (int root = 0; root < world; ++root) {
      std::vector<double> in(perRank), out(perRank, -1);
      for (size_t i = 0; i < perRank; ++i)
        in[i] = inputValue(PkgDType::F64, rank, i);
      if (Status s = comm.broadcast(in.data(), out.data(), perRank,
                                    PkgDType::F64, root);
          !s.isOk())
        return s.message();
      for (size_t i = 0; i < perRank; ++i)
        if (out[i] != inputValue(PkgDType::F64, root, i)) {
          failures += "broadcast from " + std::to_string(root) + " is wrong\n";
          break;
        }
    }
    if (Status s = comm.barrier(); !s.isOk())
      return s.message();
    // Zero elements: nothing to do, on every rank.
    if (Status s = comm.allReduce(nullptr, nullptr, 0, PkgDType::F32,
                                  PkgReduceKind::Sum);
        !s.isOk())
      return s.message();
    return failures;
  });
  expectAllOk(errors);
}

INSTANTIATE_TEST_SUITE_P(Ranks, Collectives, ::testing::Values(2, 3, 4),
                         [](const auto &info) {
                           return std::to_string(info.param) + "Ranks";
                         });

TEST(Communicator, BadArgumentsAreErrors) {
  auto errors = runThreads(2, 20, [&](int rank, Communicator &comm) {
    float x[4] = {};
    Status s = comm.allReduce(x, x, 4, PkgDType::I1, PkgReduceKind::Sum);
    if (s.isOk() || s.message().find("not supported") == std::string::npos)
      return std::string("i1 all_reduce: ") + s.message();
    s = comm.broadcast(x, x, 4, PkgDType::F32, 2);
    if (s.isOk() || s.message().find("root") == std::string::npos)
      return std::string("broadcast root 2: ") + s.message();
    s = comm.allReduce(x, x, -1, PkgDType::F32, PkgReduceKind::Sum);
    if (s.isOk() || s.message().find("negative") == std::string::npos)
      return std::string("negative count: ") + s.message();
    // The communicator still works after refused arguments.
    x[0] = rank + 1;
    s = comm.allReduce(x, x, 4, PkgDType::F32, PkgReduceKind::Sum);
    if (!s.isOk() || x[0] != 3)
      return std::string("all_reduce after refusals: ") + s.message();
    return std::string();
  });
  expectAllOk(errors);
}

TEST(Communicator, WorldOfOneCopies) {
  DistEnv env; // rank 0 of 1: no store, no sockets
  auto comm = createGlooCommunicator(env, CommOptions());
  ASSERT_TRUE(comm.isOk()) << comm.status().message();
  float in[3] = {1, 2, 3}, out[3] = {};
  ASSERT_TRUE(comm.value()->allReduce(in, out, 3, PkgDType::F32,
                                      PkgReduceKind::Mean).isOk());
  EXPECT_EQ(out[2], 3);
  EXPECT_TRUE(comm.value()->barrier().isOk());
}

TEST(Communicator, MissingRankIsNamedAtRendezvous) {
  auto server = TcpStoreServer::start("127.0.0.1", 0, 3);
  ASSERT_TRUE(server.isOk()) << server.status().message();
  DistEnv env;
  env.worldSize = 3;
  env.masterPort = server.value()->port();
  CommOptions options;
  options.timeoutSeconds = 0.5;
  auto start = Clock::now();
  auto comm = createGlooCommunicator(env, options, std::move(server.value()));
  double seconds =
      std::chrono::duration<double>(Clock::now() - start).count();
  ASSERT_FALSE(comm.isOk());
  EXPECT_THAT(comm.status().message(),
              HasSubstr("ranks 1, 2 never arrived (world size 3)"));
  EXPECT_LT(seconds, 5);
}

TEST(Communicator, NoStoreIsAnErrorWithinTheTimeout) {
  // A port nobody listens on: one a server just released.
  int port;
  {
    auto server = TcpStoreServer::start("127.0.0.1", 0, 1);
    ASSERT_TRUE(server.isOk());
    port = server.value()->port();
  }
  DistEnv env;
  env.rank = 1;
  env.worldSize = 2;
  env.masterPort = port;
  CommOptions options;
  options.timeoutSeconds = 0.3;
  auto comm = createGlooCommunicator(env, options);
  ASSERT_FALSE(comm.isOk());
  EXPECT_THAT(comm.status().message(),
              HasSubstr("cannot reach the store at 127.0.0.1:" +
                        std::to_string(port)));
}

TEST(Communicator, BadTimeoutOrRankIsAnError) {
  DistEnv env;
  env.worldSize = 2;
  env.rank = 2;
  EXPECT_THAT(createGlooCommunicator(env, CommOptions()).status().message(),
              HasSubstr("rank 2 is not a rank of the world size 2"));
  env.rank = 0;
  CommOptions options;
  options.timeoutSeconds = 0;
  EXPECT_THAT(createGlooCommunicator(env, options).status().message(),
              HasSubstr("expected a positive number of seconds"));
}

//===----------------------------------------------------------------------===//
// Failing ranks, as forked processes
//===----------------------------------------------------------------------===//

// What a forked rank does once its communicator exists: returns the text
// it reports, or exits (the child then writes nothing).
using RankBody = std::function<std::string(int rank, Communicator &comm,
                                           int holdFd)>;

struct RankReport {
  std::string text;
  bool reported = false;
  int exitStatus = 0; // as waitpid gives it
};

// Forks |world| ranks; rank 0 starts the store on an ephemeral port and
// passes it to the others through a pipe. Each rank's report comes back
// through its own pipe. |holdFd| in the body is the read end of a pipe the
// parent closes once every other rank has reported (a rank that must hang
// blocks on it). Every wait here is bounded.
std::vector<RankReport>
runForked(int world, double timeout, RankBody body,
          const std::string &masterAddr = "127.0.0.1",
          const std::function<bool(int rank)> &setup = nullptr) {
  int portPipe[2], holdPipe[2];
  EXPECT_EQ(pipe(portPipe), 0);
  EXPECT_EQ(pipe(holdPipe), 0);
  std::vector<int> reportFds(world);
  std::vector<pid_t> pids(world);
  for (int r = 0; r < world; ++r) {
    int reportPipe[2];
    EXPECT_EQ(pipe(reportPipe), 0);
    pid_t pid = fork();
    if (pid == 0) {
      close(reportPipe[0]);
      close(holdPipe[1]);
      if (setup && !setup(r)) {
        std::string text = "setup failed";
        (void)!write(reportPipe[1], text.data(), text.size());
        _exit(12);
      }
      std::unique_ptr<TcpStoreServer> server;
      int port = 0;
      if (r == 0) {
        auto s = TcpStoreServer::start(masterAddr, 0, world);
        if (!s.isOk())
          _exit(10);
        server = std::move(s.value());
        port = server->port();
        for (int i = 1; i < world; ++i)
          (void)!write(portPipe[1], &port, sizeof(port));
      } else {
        pollfd p{portPipe[0], POLLIN, 0};
        if (poll(&p, 1, 20000) != 1 ||
            read(portPipe[0], &port, sizeof(port)) != sizeof(port))
          _exit(11);
      }
      DistEnv env;
      env.rank = r;
      env.worldSize = world;
      env.masterPort = port;
      env.masterAddr = masterAddr;
      CommOptions options;
      options.timeoutSeconds = timeout;
      auto comm = createGlooCommunicator(env, options, std::move(server));
      std::string text = comm.isOk()
                             ? body(r, *comm.value(), holdPipe[0])
                             : "create: " + comm.status().message();
      (void)!write(reportPipe[1], text.data(), text.size());
      close(reportPipe[1]);
      // Ends the communicator (rank 0 keeps the store up until the others
      // leave or drop), then the process.
      comm = Status::error("done");
      _exit(0);
    }
    close(reportPipe[1]);
    reportFds[r] = reportPipe[0];
    pids[r] = pid;
  }
  close(portPipe[0]);
  close(portPipe[1]);
  close(holdPipe[0]);

  // Read every report to its end; give up after a minute.
  std::vector<RankReport> reports(world);
  std::vector<bool> open(world, true);
  auto deadline = Clock::now() + std::chrono::seconds(60);
  int openCount = world;
  while (openCount > 0 && Clock::now() < deadline) {
    std::vector<pollfd> fds;
    for (int r = 0; r < world; ++r)
      if (open[r])
        fds.push_back({reportFds[r], POLLIN, 0});
    if (poll(fds.data(), fds.size(), 1000) <= 0)
      continue;
    for (const pollfd &p : fds) {
      if (!p.revents)
        continue;
      int r = std::find(reportFds.begin(), reportFds.end(), p.fd) -
              reportFds.begin();
      char buffer[4096];
      ssize_t n = read(p.fd, buffer, sizeof(buffer));
      if (n > 0) {
        reports[r].text.append(buffer, n);
        reports[r].reported = true;
      } else {
        open[r] = false;
        --openCount;
      }
    }
    // The hanging rank is released once every other rank has reported.
    int reported = 0;
    for (int r = 0; r < world; ++r)
      reported += !open[r] || reports[r].reported;
    if (reported >= world - 1 && holdPipe[1] >= 0) {
      close(holdPipe[1]);
      holdPipe[1] = -1;
    }
  }
  if (holdPipe[1] >= 0)
    close(holdPipe[1]);
  for (int r = 0; r < world; ++r) {
    close(reportFds[r]);
    if (open[r]) {
      ADD_FAILURE() << "rank " << r << " did not finish within a minute";
      kill(pids[r], SIGKILL);
    }
    int status = 0;
    waitpid(pids[r], &status, 0);
    reports[r].exitStatus = status;
    if (WIFSIGNALED(status))
      reports[r].text += " (killed by signal " +
                         std::to_string(WTERMSIG(status)) + ")";
  }
  return reports;
}

// The elapsed seconds a report ends with ("... in 1.23 s").
std::string timed(const std::function<Status()> &f) {
  auto start = Clock::now();
  Status s = f();
  double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return (s.isOk() ? std::string("ok") : s.message()) + " @" +
         std::to_string(seconds);
}
double elapsedOf(const std::string &report) {
  size_t at = report.rfind(" @");
  return at == std::string::npos ? 1e9 : std::atof(report.c_str() + at + 2);
}

// A SIGPIPE handler like the one llvm::InitLLVM installs in `kiln`: the
// process exits with 74 (EX_IOERR), saying nothing.
void exitOnSigpipe(int) { _exit(74); }
bool installExitOnSigpipe(int) {
  struct sigaction a {};
  a.sa_handler = exitOnSigpipe;
  return sigaction(SIGPIPE, &a, nullptr) == 0;
}

TEST(CommunicatorFailure, DeadRankIsNamedBySurvivorsWithinTheTimeout) {
  const double timeout = 3;
  // Each rank has kiln's SIGPIPE handler: a survivor whose write reaches
  // the dead rank's socket must fail with an error, not exit 74.
  auto reports = runForked(3, timeout, [](int rank, Communicator &comm, int) {
    float x[1024] = {};
    // A first collective that succeeds, so the failure is #2.
    if (Status s = comm.allReduce(x, x, 1024, PkgDType::F32, PkgReduceKind::Sum);
        !s.isOk())
      return "first all_reduce: " + s.message();
    if (rank == 2)
      _exit(3); // dies before the second collective
    return timed([&] {
      return comm.allReduce(x, x, 1024, PkgDType::F32, PkgReduceKind::Sum);
    });
  }, "127.0.0.1", installExitOnSigpipe);
  EXPECT_FALSE(reports[2].reported);
  for (int r : {0, 1}) {
    SCOPED_TRACE("rank " + std::to_string(r) + ": " + reports[r].text);
    EXPECT_THAT(reports[r].text, HasSubstr("rank 2 exited (its connection to "
                                           "the store dropped) after "
                                           "collective #1"));
    EXPECT_THAT(reports[r].text, HasSubstr("(collective #2) failed"));
    EXPECT_THAT(reports[r].text, Not(HasSubstr("rank 1 ")));
    EXPECT_LT(elapsedOf(reports[r].text), timeout);
  }
}

// The mechanism itself (Sigpipe.h), in a child with kiln's SIGPIPE handler:
// a write to a socket whose peer closed fails with EPIPE inside the scope,
// in the scope's thread and in a thread started inside it (Gloo's event
// loop), and nothing is delivered when the scope ends; outside it the
// handler runs (so this test can fail).
// The mechanism test's handler: 74 only for the last, unblocked write; a
// SIGPIPE delivered earlier (one a scope failed to consume) exits 20.
volatile sig_atomic_t lastWrite = 0;
void exitOnSigpipeAtTheEnd(int) { _exit(lastWrite ? 74 : 20); }

TEST(Sigpipe, BlockedWritesToAClosedPeerFailWithEpipe) {
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    struct sigaction a {};
    a.sa_handler = exitOnSigpipeAtTheEnd;
    sigaction(SIGPIPE, &a, nullptr);
    int fds[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0)
      _exit(10);
    close(fds[1]);
    char byte = 1;
    std::thread inherited;
    bool threadGotEpipe = false;
    {
      ScopedSigpipeBlock block;
      if (write(fds[0], &byte, 1) != -1 || errno != EPIPE)
        _exit(11);
      inherited = std::thread([&] {
        threadGotEpipe = write(fds[0], &byte, 1) == -1 && errno == EPIPE;
      });
    }
    inherited.join(); // the thread keeps the block after the scope
    if (!threadGotEpipe)
      _exit(12);
    {
      // Nested in a caller's own block: its pending signal stays its own.
      ScopedSigpipeBlock outer;
      { ScopedSigpipeBlock inner; (void)!write(fds[0], &byte, 1); }
      sigset_t pending;
      if (sigpending(&pending) != 0 || sigismember(&pending, SIGPIPE) != 1)
        _exit(13);
    } // consumed here
    lastWrite = 1;
    (void)!write(fds[0], &byte, 1); // unblocked: the handler exits 74
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 74)
      << "10-13: the blocked writes misbehaved; 20: a SIGPIPE got through "
         "a scope; 0: the last write did not reach the handler";
}

TEST(CommunicatorFailure, HungRankIsNamedAfterTheTimeout) {
  const double timeout = 2;
  auto reports =
      runForked(3, timeout, [&](int rank, Communicator &comm, int holdFd) {
        float x[256] = {};
        if (rank == 1) {
          // Alive and connected, but never reaches the collective until the
          // others have reported.
          pollfd p{holdFd, POLLIN, 0};
          poll(&p, 1, 60000);
          return std::string("held");
        }
        return timed([&] {
          return comm.allReduce(x, x, 256, PkgDType::F32, PkgReduceKind::Sum);
        });
      });
  for (int r : {0, 2}) {
    SCOPED_TRACE("rank " + std::to_string(r) + ": " + reports[r].text);
    EXPECT_THAT(reports[r].text,
                HasSubstr("(collective #1) failed after 2"));
    EXPECT_THAT(reports[r].text,
                HasSubstr("rank 1 did not reach it (it reached no collective)"));
    double elapsed = elapsedOf(reports[r].text);
    EXPECT_GE(elapsed, timeout * 0.9);
    EXPECT_LT(elapsed, timeout + 5);
  }
  EXPECT_EQ(reports[1].text, "held");
}

TEST(CommunicatorFailure, DeadStoreRankIsNamed) {
  const double timeout = 3;
  auto reports = runForked(2, timeout, [](int rank, Communicator &comm, int) {
    double x[8] = {};
    if (Status s = comm.barrier(); !s.isOk())
      return "barrier: " + s.message();
    if (rank == 0)
      _exit(3); // the rank that serves the store dies
    return timed([&] {
      return comm.allReduce(x, x, 8, PkgDType::F64, PkgReduceKind::Sum);
    });
  });
  SCOPED_TRACE(reports[1].text);
  EXPECT_THAT(reports[1].text, HasSubstr("rank 0 is unreachable"));
  EXPECT_LT(elapsedOf(reports[1].text), timeout);
}

// Two network namespaces joined by a veth pair, as two hosts
// (10.77.0.1 and 10.77.0.2); removed on destruction.
class TwoHosts {
public:
  TwoHosts() {
    std::string tag = std::to_string(getpid());
    a_ = "kiln-dist-a-" + tag;
    b_ = "kiln-dist-b-" + tag;
    std::string va = "kva" + tag, vb = "kvb" + tag;
    if (va.size() > 15)
      va.resize(15), vb.resize(15);
    std::string script =
        "set -e; exec >/dev/null 2>&1; ip netns add " + a_ + "; ip netns add " +
        b_ + "; ip link add " + va + " netns " + a_ + " type veth peer name " +
        vb + " netns " + b_ + "; ip -n " + a_ + " addr add 10.77.0.1/24 dev " +
        va + "; ip -n " + b_ + " addr add 10.77.0.2/24 dev " + vb +
        "; for n in " + a_ + " " + b_ + "; do ip -n $n link set lo up; done" +
        "; ip -n " + a_ + " link set " + va + " up; ip -n " + b_ +
        " link set " + vb + " up";
    ok_ = std::system(script.c_str()) == 0;
  }
  ~TwoHosts() {
    std::string script = "exec >/dev/null 2>&1; ip netns del " + a_ +
                         "; ip netns del " + b_;
    (void)!std::system(script.c_str());
  }
  bool ok() const { return ok_; }
  // Moves the calling process into host |i|'s namespace.
  bool enter(int i) const {
    int fd = open(("/run/netns/" + (i ? b_ : a_)).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
      return false;
    bool entered = setns(fd, CLONE_NEWNET) == 0;
    close(fd);
    return entered;
  }

private:
  std::string a_, b_;
  bool ok_ = false;
};

TEST(CommunicatorTwoHosts, AllReduceAcrossNetworkNamespaces) {
  TwoHosts hosts;
  if (!hosts.ok())
    GTEST_SKIP() << "cannot create network namespaces and a veth pair here "
                    "(needs root and ip netns); the two-host test is skipped";
  // Ranks 0, 1 on host a (10.77.0.1, the master), ranks 2, 3 on host b.
  auto reports = runForked(
      4, 20,
      [](int rank, Communicator &comm, int) {
        std::vector<double> x(100000);
        for (size_t i = 0; i < x.size(); ++i)
          x[i] = rank * 1000.0 + i;
        if (Status s = comm.allReduce(x.data(), x.data(), x.size(),
                                      PkgDType::F64, PkgReduceKind::Sum);
            !s.isOk())
          return s.message();
        for (size_t i = 0; i < x.size(); ++i)
          if (x[i] != 6000.0 + 4.0 * i)
            return "element " + std::to_string(i) + " is " +
                   std::to_string(x[i]);
        return std::string("ok");
      },
      "10.77.0.1", [&](int rank) { return hosts.enter(rank / 2); });
  for (int r = 0; r < 4; ++r)
    EXPECT_EQ(reports[r].text, "ok") << "rank " << r;
}

//===----------------------------------------------------------------------===//
// The environment
//===----------------------------------------------------------------------===//

class Env : public ::testing::Test {
protected:
  void SetUp() override { clear(); }
  void TearDown() override { clear(); }
  static void clear() {
    for (const char *v : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                          "MASTER_ADDR", "MASTER_PORT", "TF_CONFIG"})
      unsetenv(v);
  }
};

TEST_F(Env, AbsentMeansOneProcess) {
  auto env = distEnvFromEnvironment();
  ASSERT_TRUE(env.isOk()) << env.status().message();
  EXPECT_EQ(env->rank, 0);
  EXPECT_EQ(env->worldSize, 1);
  EXPECT_EQ(env->localWorldSize, 1);
}

TEST_F(Env, TorchrunVariables) {
  setenv("RANK", "5", 1);
  setenv("WORLD_SIZE", "8", 1);
  setenv("LOCAL_RANK", "1", 1);
  setenv("LOCAL_WORLD_SIZE", "4", 1);
  setenv("MASTER_ADDR", "10.0.0.7", 1);
  setenv("MASTER_PORT", "1234", 1);
  auto env = distEnvFromEnvironment();
  ASSERT_TRUE(env.isOk()) << env.status().message();
  EXPECT_EQ(env->rank, 5);
  EXPECT_EQ(env->worldSize, 8);
  EXPECT_EQ(env->localRank, 1);
  EXPECT_EQ(env->localWorldSize, 4);
  EXPECT_EQ(env->masterAddr, "10.0.0.7");
  EXPECT_EQ(env->masterPort, 1234);
}

TEST_F(Env, BadValuesAreNamed) {
  setenv("RANK", "two", 1);
  setenv("WORLD_SIZE", "4", 1);
  EXPECT_THAT(distEnvFromEnvironment().status().message(),
              HasSubstr("RANK='two': expected an integer"));
  setenv("RANK", "4", 1);
  EXPECT_THAT(distEnvFromEnvironment().status().message(),
              HasSubstr("RANK=4 is not below WORLD_SIZE=4"));
  setenv("RANK", "1", 1);
  setenv("MASTER_PORT", "70000", 1);
  EXPECT_THAT(distEnvFromEnvironment().status().message(),
              HasSubstr("MASTER_PORT='70000': expected an integer in [1, 65535]"));
  unsetenv("MASTER_PORT");
  unsetenv("WORLD_SIZE");
  EXPECT_THAT(distEnvFromEnvironment().status().message(),
              HasSubstr("RANK is set but WORLD_SIZE is not"));
}

TEST_F(Env, TfConfig) {
  setenv("TF_CONFIG",
         R"({"cluster": {"worker": ["hostA:2222", "hostA:2223", "hostB:2222"]},
             "task": {"type": "worker", "index": 2}})",
         1);
  auto env = distEnvFromEnvironment();
  ASSERT_TRUE(env.isOk()) << env.status().message();
  EXPECT_EQ(env->rank, 2);
  EXPECT_EQ(env->worldSize, 3);
  EXPECT_EQ(env->masterAddr, "hostA");
  EXPECT_EQ(env->masterPort, 2222);
  EXPECT_EQ(env->localRank, 0);
  EXPECT_EQ(env->localWorldSize, 1);

  auto second = distEnvFromTfConfig(
      R"({"cluster": {"chief": ["c:1"], "worker": ["c:2", "w:3"]},
          "task": {"type": "worker", "index": 0}})");
  ASSERT_TRUE(second.isOk()) << second.status().message();
  EXPECT_EQ(second->rank, 1); // after the chief
  EXPECT_EQ(second->masterAddr, "c");
  EXPECT_EQ(second->masterPort, 1);
  EXPECT_EQ(second->localRank, 1);
  EXPECT_EQ(second->localWorldSize, 2);

  // torchrun's variables win over TF_CONFIG.
  setenv("RANK", "0", 1);
  setenv("WORLD_SIZE", "2", 1);
  EXPECT_EQ(distEnvFromEnvironment()->worldSize, 2);
}

TEST_F(Env, BadTfConfigIsNamed) {
  EXPECT_THAT(distEnvFromTfConfig("{").status().message(),
              HasSubstr("TF_CONFIG: "));
  EXPECT_THAT(distEnvFromTfConfig(R"({"cluster": {}, "task": {}})")
                  .status()
                  .message(),
              HasSubstr("cluster has no \"worker\""));
  EXPECT_THAT(distEnvFromTfConfig(
                  R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "ps"}})")
                  .status()
                  .message(),
              HasSubstr("task.type"));
  EXPECT_THAT(
      distEnvFromTfConfig(
          R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 1}})")
          .status()
          .message(),
      HasSubstr("task.index 1 is not below the 1 worker entries"));
  EXPECT_THAT(
      distEnvFromTfConfig(
          R"({"cluster": {"worker": ["a"]}, "task": {"type": "worker", "index": 0}})")
          .status()
          .message(),
      HasSubstr("'a': expected host:port"));
}

} // namespace
} // namespace kiln::runtime::dist
