//===- LocalCommunicatorTest.cpp - ranks as threads of one process --------===//
//
// createLocalCommunicators (mirrored's communicator): every collective and
// dtype against the reduction computed directly here, in the ring order
// the communicator documents; the same inputs through the Gloo
// communicator (threads, TCP on 127.0.0.1) give the same bits; a rank that
// never arrives is named after the timeout, one that left is named at once,
// ranks that disagree are told so, and a failed group stays failed.
//
//===----------------------------------------------------------------------===//

#include "runtime/dist/GlooCommunicator.h"
#include "runtime/dist/LocalCommunicator.h"
#include "tests/unit/runtime-dist/ElementBytes.h"

#include "runtime/Half.h"
#include "runtime/dist/Reduce.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <thread>

namespace kiln::runtime::dist {
namespace {

using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;
using Bytes = std::vector<uint8_t>;

using test::bytesOf;
using test::get;
using test::isFloat;
using test::put;

// Rank |rank|'s element |i|: random reals for floats (so the order of the
// sum shows in the bits), small integers otherwise.
Bytes inputOf(PkgDType dtype, int rank, size_t count) {
  Bytes b(count * bytesOf(dtype));
  std::mt19937_64 rng(7919 * rank + 13);
  for (size_t i = 0; i < count; ++i)
    put(dtype, b, i,
        isFloat(dtype) ? std::uniform_real_distribution<double>(-4, 4)(rng)
                       : static_cast<double>(static_cast<int64_t>(rng() % 17) - 8));
  return b;
}

// One combine in the dtype's arithmetic (f16/bf16 in f32, rounded once).
double combine(PkgDType dtype, PkgReduceKind op, double a, double b) {
  double r;
  if (op == PkgReduceKind::Max)
    r = std::max(a, b);
  else if (op == PkgReduceKind::Min)
    r = std::min(a, b);
  else if (dtype == PkgDType::F64)
    r = a + b;
  else if (isFloat(dtype))
    r = static_cast<float>(a) + static_cast<float>(b);
  else
    r = a + b;
  Bytes one(bytesOf(dtype));
  put(dtype, one, 0, r);
  return get(dtype, one, 0);
}

double divide(PkgDType dtype, double v, int world) {
  Bytes one(bytesOf(dtype));
  if (dtype == PkgDType::F64)
    put(dtype, one, 0, v / world);
  else if (isFloat(dtype))
    put(dtype, one, 0, static_cast<float>(v) / world);
  else
    put(dtype, one, 0, std::trunc(v / world));
  return get(dtype, one, 0);
}

// Element |i| of an all-reduce in the documented ring order: the part
// that ends on rank j is x_j + (x_{j+1} + (... + x_{j-1})). |owner| is the
// rank whose part holds element i.
double ringReduce(PkgDType dtype, PkgReduceKind op,
                  const std::vector<Bytes> &inputs, size_t i, int owner) {
  int world = static_cast<int>(inputs.size());
  double acc = get(dtype, inputs[(owner + world - 1) % world], i);
  for (int t = 2; t <= world; ++t)
    acc = combine(dtype, op, get(dtype, inputs[(owner + world - t) % world], i), acc);
  return op == PkgReduceKind::Mean ? divide(dtype, acc, world) : acc;
}

// Which rank's ring part element |i| of |count| lies in (Gloo: at least 2
// segments per rank, at most 1 MiB each, rounded up to whole elements).
int ringOwner(size_t count, size_t e, int world, size_t i) {
  size_t total = count * e, maxSeg = e * std::max<size_t>(1, (1 << 20) / e);
  size_t segs = std::max((total + maxSeg - 1) / maxSeg, size_t(2 * world));
  segs = (segs + world - 1) / world * world;
  size_t segBytes = ((total + segs - 1) / segs + e - 1) / e * e;
  return static_cast<int>(i * e / (segBytes * (segs / world)));
}

// Runs |body(rank, comm)| on threads, one per communicator.
std::vector<std::string>
onThreads(std::vector<std::unique_ptr<Communicator>> &comms,
          const std::function<std::string(int, Communicator &)> &body) {
  std::vector<std::string> errors(comms.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < comms.size(); ++r)
    threads.emplace_back([&, r] { errors[r] = body(static_cast<int>(r), *comms[r]); });
  for (std::thread &t : threads)
    t.join();
  return errors;
}

std::vector<std::unique_ptr<Communicator>> local(int world, double timeout = 60) {
  CommOptions options;
  options.timeoutSeconds = timeout;
  auto comms = createLocalCommunicators(world, options);
  EXPECT_TRUE(comms.isOk()) << comms.status().message();
  return comms.isOk() ? std::move(comms.value())
                      : std::vector<std::unique_ptr<Communicator>>();
}

void expectAllOk(const std::vector<std::string> &errors) {
  for (size_t r = 0; r < errors.size(); ++r)
    EXPECT_EQ(errors[r], "") << "rank " << r;
}

const PkgDType kDtypes[] = {PkgDType::F64, PkgDType::F32, PkgDType::F16,
                            PkgDType::BF16, PkgDType::I64, PkgDType::I32,
                            PkgDType::I8};
const PkgReduceKind kOps[] = {PkgReduceKind::Sum, PkgReduceKind::Max,
                              PkgReduceKind::Min, PkgReduceKind::Mean};

class LocalCollectives : public ::testing::TestWithParam<int> {};

TEST_P(LocalCollectives, AllReduceEveryDtypeAndOpInTheRingOrder) {
  int world = GetParam();
  for (PkgDType dtype : kDtypes)
    for (PkgReduceKind op : kOps) {
      // 70001 f64 are 560 kB: several segments; odd, so the last is short.
      size_t count = dtype == PkgDType::I8 ? 1001 : 70001;
      std::vector<Bytes> in(world), out(world);
      for (int r = 0; r < world; ++r)
        in[r] = inputOf(dtype, r, count);
      auto comms = local(world);
      expectAllOk(onThreads(comms, [&](int r, Communicator &c) {
        // Odd ranks reduce in place.
        out[r] = r % 2 ? in[r] : Bytes(in[r].size());
        Status s = c.allReduce(r % 2 ? out[r].data() : in[r].data(),
                               out[r].data(), count, dtype, op);
        return s.isOk() ? std::string() : s.message();
      }));
      for (size_t i = 0; i < count; ++i) {
        double want = ringReduce(dtype, op, in, i,
                                 ringOwner(count, bytesOf(dtype), world, i));
        for (int r = 0; r < world; ++r)
          ASSERT_EQ(get(dtype, out[r], i), want)
              << pkgDTypeName(dtype) << " " << reduceName(op) << " rank " << r
              << " element " << i;
      }
    }
}

TEST_P(LocalCollectives, ReduceScatterAllGatherBroadcastBarrier) {
  int world = GetParam();
  for (PkgDType dtype : kDtypes) {
    size_t per = 37, e = bytesOf(dtype);
    std::vector<Bytes> in(world), out(world, Bytes(per * e)),
        gathered(world, Bytes(world * per * e)), cast(world, Bytes(world * per * e));
    for (int r = 0; r < world; ++r)
      in[r] = inputOf(dtype, r, world * per);
    for (PkgReduceKind op : kOps) {
      auto comms = local(world);
      expectAllOk(onThreads(comms, [&](int r, Communicator &c) {
        Status s = c.reduceScatter(in[r].data(), out[r].data(), per, dtype, op);
        return s.isOk() ? std::string() : s.message();
      }));
      for (int r = 0; r < world; ++r)
        for (size_t i = 0; i < per; ++i) {
          // Rank order, left to right, as Gloo's reduce-scatter.
          size_t k = r * per + i;
          double acc = get(dtype, in[0], k);
          for (int q = 1; q < world; ++q)
            acc = combine(dtype, op, acc, get(dtype, in[q], k));
          if (op == PkgReduceKind::Mean)
            acc = divide(dtype, acc, world);
          ASSERT_EQ(get(dtype, out[r], i), acc)
              << pkgDTypeName(dtype) << " " << reduceName(op) << " rank " << r;
        }
    }
    auto comms = local(world);
    int root = world - 1;
    expectAllOk(onThreads(comms, [&](int r, Communicator &c) {
      // Rank r's block of |in| is its all-gather input (in place on odd
      // ranks: already in its block of the output).
      Bytes &g = gathered[r];
      const uint8_t *mine = in[r].data() + r * per * e;
      if (r % 2)
        std::memcpy(g.data() + r * per * e, mine, per * e);
      Status s = c.allGather(r % 2 ? g.data() + r * per * e : mine, g.data(),
                             per, dtype);
      if (s.isOk())
        s = c.broadcast(in[r].data(), cast[r].data(), world * per, dtype, root);
      if (s.isOk())
        s = c.barrier();
      return s.isOk() ? std::string() : s.message();
    }));
    for (int r = 0; r < world; ++r) {
      for (int q = 0; q < world; ++q)
        EXPECT_EQ(0, std::memcmp(gathered[r].data() + q * per * e,
                                 in[q].data() + q * per * e, per * e))
            << "all_gather " << pkgDTypeName(dtype) << " rank " << r
            << " block " << q;
      EXPECT_EQ(cast[r], in[root]) << "broadcast " << pkgDTypeName(dtype)
                                   << " rank " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, LocalCollectives, ::testing::Values(1, 2, 3, 4),
                         [](const auto &info) {
                           return std::to_string(info.param) + "ranks";
                         });

// The same inputs through Gloo (threads, TCP on 127.0.0.1): the same bits.
TEST(LocalCommunicator, BitIdenticalToGloo) {
  for (int world : {3, 4}) {
    for (PkgDType dtype : {PkgDType::F32, PkgDType::BF16, PkgDType::F16}) {
      // 300007 f32 are 1.2 MB: more than two 1 MiB-capped segments per
      // rank at 3 ranks; 1001 elements: one short segment each.
      for (size_t count : {size_t(1001), size_t(300007)}) {
        size_t e = bytesOf(dtype), per = count / world;
        std::vector<Bytes> in(world);
        for (int r = 0; r < world; ++r)
          in[r] = inputOf(dtype, r, count);
        // Every collective in turn, results appended.
        auto body = [&](int r, Communicator &c, Bytes &result) -> std::string {
          for (PkgReduceKind op : {PkgReduceKind::Sum, PkgReduceKind::Mean,
                                   PkgReduceKind::Max}) {
            Bytes o(count * e), s(per * e);
            Status st = c.allReduce(in[r].data(), o.data(), count, dtype, op);
            if (st.isOk())
              st = c.reduceScatter(in[r].data(), s.data(), per, dtype, op);
            if (!st.isOk())
              return st.message();
            result.insert(result.end(), o.begin(), o.end());
            result.insert(result.end(), s.begin(), s.end());
          }
          Bytes g(world * per * e), b(count * e);
          Status st = c.allGather(in[r].data(), g.data(), per, dtype);
          if (st.isOk())
            st = c.broadcast(in[r].data(), b.data(), count, dtype, 1);
          if (!st.isOk())
            return st.message();
          result.insert(result.end(), g.begin(), g.end());
          result.insert(result.end(), b.begin(), b.end());
          return "";
        };
        std::vector<Bytes> mine(world), gloo(world);
        auto comms = local(world);
        expectAllOk(onThreads(comms, [&](int r, Communicator &c) {
          return body(r, c, mine[r]);
        }));
        auto server = TcpStoreServer::start("127.0.0.1", 0, world);
        ASSERT_TRUE(server.isOk()) << server.status().message();
        int port = server.value()->port();
        std::unique_ptr<TcpStoreServer> owned = std::move(server.value());
        std::vector<std::string> errors(world);
        std::vector<std::thread> threads;
        for (int r = 0; r < world; ++r) {
          std::unique_ptr<TcpStoreServer> s = r == 0 ? std::move(owned) : nullptr;
          threads.emplace_back([&, r, s = std::move(s)]() mutable {
            DistEnv env;
            env.rank = r;
            env.worldSize = env.localWorldSize = world;
            env.localRank = r;
            env.masterAddr = "127.0.0.1";
            env.masterPort = port;
            CommOptions options;
            options.timeoutSeconds = 60;
            auto comm = createGlooCommunicator(env, options, std::move(s));
            errors[r] = comm.isOk() ? body(r, *comm.value(), gloo[r])
                                    : comm.status().message();
          });
        }
        for (std::thread &t : threads)
          t.join();
        expectAllOk(errors);
        for (int r = 0; r < world; ++r) {
          ASSERT_EQ(mine[r].size(), gloo[r].size());
          size_t differ = 0;
          for (size_t i = 0; i < mine[r].size(); ++i)
            differ += mine[r][i] != gloo[r][i];
          EXPECT_EQ(differ, 0u) << world << " ranks, " << pkgDTypeName(dtype)
                                << ", " << count << " elements, rank " << r;
        }
        // The sums depend on the order (else the test would prove little):
        // the f32 sum differs from a left-to-right one somewhere.
        if (dtype == PkgDType::F32 && count > 1001) {
          size_t differ = 0;
          for (size_t i = 0; i < count; ++i) {
            float left = get(dtype, in[0], i);
            for (int q = 1; q < world; ++q)
              left += static_cast<float>(get(dtype, in[q], i));
            differ += left != static_cast<float>(get(dtype, mine[0], i));
          }
          EXPECT_GT(differ, 0u);
        }
      }
    }
  }
}

TEST(LocalCommunicator, MissingRankIsNamedAfterTheTimeout) {
  auto comms = local(3, /*timeout=*/0.3);
  Clock::time_point start = Clock::now();
  auto errors = onThreads(comms, [&](int r, Communicator &c) {
    float x[4] = {1, 2, 3, 4};
    Status s = c.allReduce(x, x, 4, PkgDType::F32, PkgReduceKind::Sum);
    if (!s.isOk() || r == 2)
      return s.isOk() ? std::string() : s.message();
    // Ranks 0 and 1 go on to a second collective; rank 2 never does.
    s = c.allReduce(x, x, 4, PkgDType::F32, PkgReduceKind::Mean);
    return s.isOk() ? std::string("no error") : s.message();
  });
  double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_LT(elapsed, 10.0);
  EXPECT_EQ(errors[2], "");
  for (int r : {0, 1}) {
    EXPECT_THAT(errors[r], HasSubstr("rank " + std::to_string(r) +
                                     ": all_reduce mean of 4 f32 (collective #2) failed after"));
    EXPECT_THAT(errors[r], HasSubstr("rank 2 did not reach it (its last collective was #1)"));
  }
  // The group stays failed.
  float y = 1;
  Status later = comms[0]->allReduce(&y, &y, 1, PkgDType::F32, PkgReduceKind::Sum);
  EXPECT_THAT(later.message(), HasSubstr("the ranks failed earlier"));
}

TEST(LocalCommunicator, RankThatLeftIsNamedAtOnce) {
  auto comms = local(2, /*timeout=*/120);
  comms[1].reset(); // rank 1's replica stopped
  Clock::time_point start = Clock::now();
  float x = 1;
  Status s = comms[0]->allReduce(&x, &x, 1, PkgDType::F32, PkgReduceKind::Sum);
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 5.0);
  EXPECT_THAT(s.message(),
              HasSubstr("rank 1 left (its communicator was destroyed) before any collective"));
}

TEST(LocalCommunicator, RanksThatDisagreeAreTold) {
  auto comms = local(2);
  auto errors = onThreads(comms, [&](int r, Communicator &c) {
    float x[5] = {};
    Status s = c.allReduce(x, x, 4 + r, PkgDType::F32, PkgReduceKind::Sum);
    return s.isOk() ? std::string("no error") : s.message();
  });
  for (const std::string &e : errors)
    EXPECT_THAT(e, HasSubstr("the ranks disagree: rank 0 issued all_reduce sum "
                             "of 4 f32 but rank 1 issued all_reduce sum of 5 f32"));
}

TEST(LocalCommunicator, BadArgumentsAreErrors) {
  CommOptions options;
  EXPECT_THAT(createLocalCommunicators(0, options).status().message(),
              HasSubstr("world size 0: expected at least 1 device"));
  options.timeoutSeconds = 0;
  EXPECT_THAT(createLocalCommunicators(2, options).status().message(),
              HasSubstr("expected a positive number of seconds"));
  auto comms = local(2);
  uint8_t b = 0;
  EXPECT_THAT(comms[0]->allReduce(&b, &b, 1, PkgDType::I1, PkgReduceKind::Sum).message(),
              HasSubstr("all_reduce sum of 1 i1: not supported for this dtype"));
  EXPECT_THAT(comms[0]->broadcast(&b, &b, 1, PkgDType::I8, 2).message(),
              HasSubstr("the root is not a rank of the world size 2"));
  EXPECT_THAT(comms[0]->allGather(&b, &b, -1, PkgDType::I8).message(),
              HasSubstr("negative element count -1"));
}

} // namespace
} // namespace kiln::runtime::dist
