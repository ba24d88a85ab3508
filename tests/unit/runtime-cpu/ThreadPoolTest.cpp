//===- ThreadPoolTest.cpp - runtime/ThreadPool -----------------------------===//
//
// Every index runs exactly once, for sizes around the pool's size and far
// past it, over many back-to-back calls (the pattern of a training step),
// with pools of 1 to 4 threads; the caller takes part; nested calls run
// inline; a pool is destroyed cleanly whether or not it was used.
//
//===----------------------------------------------------------------------===//

#include "runtime/ThreadPool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <numeric>
#include <set>
#include <thread>
#include <vector>

namespace kiln::runtime {
namespace {

TEST(ThreadPool, SizeCountsTheCaller) {
  EXPECT_EQ(ThreadPool(1).size(), 1);
  EXPECT_EQ(ThreadPool(3).size(), 3);
  EXPECT_EQ(ThreadPool(0).size(),
            static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
}

TEST(ThreadPool, EveryIndexRunsOnceForManySizes) {
  for (int threads : {1, 2, 3, 4}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 2, 3, 4, 5, 7, 8, 16, 63, 64, 1000, 4099}) {
      std::vector<std::atomic<int>> hits(n);
      for (auto &h : hits)
        h.store(0);
      pool.parallelFor(n, [&](int64_t i) { hits[i].fetch_add(1); });
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(hits[i].load(), 1)
            << "index " << i << " of " << n << " with " << threads
            << " threads";
    }
  }
}

TEST(ThreadPool, RepeatedCallsComputeTheRightSums) {
  ThreadPool pool(4);
  // Each call writes its own partial sums; the caller checks them right
  // after the call returns, so a call that returned early shows up.
  std::vector<int64_t> partial(8);
  for (int call = 0; call < 5000; ++call) {
    int64_t n = 1 + call % 8;
    std::fill(partial.begin(), partial.end(), -1);
    pool.parallelFor(n, [&](int64_t i) {
      int64_t s = 0;
      for (int64_t j = 0; j <= i * 100 + call % 17; ++j)
        s += j;
      partial[i] = s;
    });
    for (int64_t i = 0; i < n; ++i) {
      int64_t last = i * 100 + call % 17;
      ASSERT_EQ(partial[i], last * (last + 1) / 2) << "call " << call;
    }
    for (int64_t i = n; i < 8; ++i)
      ASSERT_EQ(partial[i], -1) << "call " << call << " wrote past n";
  }
}

TEST(ThreadPool, CallerAndWorkersShareTheWork) {
  ThreadPool pool(3);
  std::mutex mutex;
  std::set<std::thread::id> seen;
  // Parts that wait for each other can only finish when all three threads
  // run one each at the same time.
  std::atomic<int> arrived{0};
  pool.parallelFor(3, [&](int64_t) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      seen.insert(std::this_thread::get_id());
    }
    arrived.fetch_add(1);
    while (arrived.load() < 3)
      std::this_thread::yield();
  });
  EXPECT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen.count(std::this_thread::get_id()), 1u);
}

TEST(ThreadPool, NestedCallsRunInline) {
  ThreadPool pool(2);
  std::atomic<int64_t> total{0};
  pool.parallelFor(4, [&](int64_t i) {
    pool.parallelFor(10, [&](int64_t j) { total.fetch_add(i * 10 + j); });
  });
  EXPECT_EQ(total.load(), 39 * 40 / 2);
}

TEST(ThreadPool, ConcurrentCallersTakeTurns) {
  ThreadPool pool(3);
  std::atomic<int64_t> total{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 3; ++c)
    callers.emplace_back([&] {
      for (int k = 0; k < 200; ++k)
        pool.parallelFor(5, [&](int64_t i) { total.fetch_add(i + 1); });
    });
  for (std::thread &t : callers)
    t.join();
  EXPECT_EQ(total.load(), 3 * 200 * 15);
}

TEST(ThreadPool, DestroyedWithoutUse) {
  for (int i = 0; i < 20; ++i)
    ThreadPool pool(4);
}

} // namespace
} // namespace kiln::runtime
