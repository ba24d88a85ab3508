//===- SamplerTest.cpp - DistributedSampler semantics and the prefetcher ---===//
//
// The expected index lists are worked out by hand from PyTorch's
// DistributedSampler (torch/utils/data/distributed.py).
//
//===----------------------------------------------------------------------===//

#include "runtime/data/Sampler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <numeric>

using namespace kiln::runtime;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

namespace {

std::vector<int64_t> rankIndices(int64_t n, int64_t rank, int64_t world,
                                 bool dropLast, bool shuffle = false,
                                 uint64_t seed = 0, int64_t epoch = 0) {
  auto s = DistributedSampler::create(n, {rank, world, shuffle, seed, dropLast});
  EXPECT_TRUE(s.isOk()) << s.status().message();
  return s.isOk() ? s->indices(epoch) : std::vector<int64_t>{};
}

// Sample i has x = [i, i + 0.5] and label i; fails on |failAt|; counts
// copies so tests can see the worker run ahead.
class CountingDataset : public Dataset {
public:
  explicit CountingDataset(int64_t n, int64_t failAt = -1)
      : n_(n), failAt_(failAt),
        specs_{{"x", ElementType::f32, {2}, 0},
               {"label", ElementType::i32, {}, 100}} {}
  int64_t size() const override { return n_; }
  const std::vector<TensorSpec> &specs() const override { return specs_; }
  Status copySample(int64_t index, size_t tensor, void *dst) const override {
    ++copies;
    if (index == failAt_)
      return Status::error("sample " + std::to_string(index) + " is broken");
    if (tensor == 0) {
      static_cast<float *>(dst)[0] = float(index);
      static_cast<float *>(dst)[1] = float(index) + 0.5f;
    } else {
      *static_cast<int32_t *>(dst) = int32_t(index);
    }
    return Status::ok();
  }
  mutable std::atomic<int64_t> copies{0};

private:
  int64_t n_, failAt_;
  std::vector<TensorSpec> specs_;
};

} // namespace

TEST(DistributedSampler, PadsByRepeatingFromTheStart) {
  EXPECT_THAT(rankIndices(10, 0, 3, false), ElementsAre(0, 3, 6, 9));
  EXPECT_THAT(rankIndices(10, 1, 3, false), ElementsAre(1, 4, 7, 0));
  EXPECT_THAT(rankIndices(10, 2, 3, false), ElementsAre(2, 5, 8, 1));
}

TEST(DistributedSampler, DropLastCutsTheTail) {
  // num_samples = ceil((10 - 3) / 3) = 3, total 9.
  EXPECT_THAT(rankIndices(10, 0, 3, true), ElementsAre(0, 3, 6));
  EXPECT_THAT(rankIndices(10, 1, 3, true), ElementsAre(1, 4, 7));
  EXPECT_THAT(rankIndices(10, 2, 3, true), ElementsAre(2, 5, 8));
  // 11 samples, 4 ranks: ceil(7 / 4) = 2 each.
  EXPECT_THAT(rankIndices(11, 3, 4, true), ElementsAre(3, 7));
  // Fewer samples than ranks: nothing.
  EXPECT_TRUE(rankIndices(2, 0, 3, true).empty());
}

TEST(DistributedSampler, PadsMoreThanOnceWhenRanksOutnumberSamples) {
  // indices [0, 1] + ([0, 1] * 2)[:3] = [0, 1, 0, 1, 0].
  EXPECT_THAT(rankIndices(2, 0, 5, false), ElementsAre(0));
  EXPECT_THAT(rankIndices(2, 1, 5, false), ElementsAre(1));
  EXPECT_THAT(rankIndices(2, 2, 5, false), ElementsAre(0));
  EXPECT_THAT(rankIndices(2, 3, 5, false), ElementsAre(1));
  EXPECT_THAT(rankIndices(2, 4, 5, false), ElementsAre(0));
}

TEST(DistributedSampler, EvenSplitIsTheSameWithOrWithoutDropLast) {
  for (bool drop : {false, true}) {
    EXPECT_THAT(rankIndices(8, 1, 4, drop), ElementsAre(1, 5));
    EXPECT_THAT(rankIndices(8, 3, 4, drop), ElementsAre(3, 7));
  }
}

TEST(DistributedSampler, ShuffleIsAPermutationSharedByRanks) {
  const int64_t n = 40, world = 4;
  std::vector<int64_t> all;
  for (int64_t r = 0; r < world; ++r) {
    auto mine = rankIndices(n, r, world, false, true, 7, 3);
    EXPECT_EQ(mine.size(), 10u);
    all.insert(all.end(), mine.begin(), mine.end());
  }
  std::vector<int64_t> sorted = all;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> expected(n);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(sorted, expected);
  std::vector<int64_t> identity;
  for (int64_t i = 0; i < n; i += world)
    identity.push_back(i);
  EXPECT_NE(rankIndices(n, 0, world, false, true, 7, 3), identity);
}

TEST(DistributedSampler, ShuffleSeedsWithSeedPlusEpoch) {
  auto e0 = rankIndices(50, 0, 1, false, true, 5, 0);
  auto e1 = rankIndices(50, 0, 1, false, true, 5, 1);
  EXPECT_NE(e0, e1);
  EXPECT_EQ(e0, rankIndices(50, 0, 1, false, true, 5, 0));
  EXPECT_EQ(e1, rankIndices(50, 0, 1, false, true, 4, 2));
  EXPECT_EQ(e0, shuffledRange(50, 5));
}

TEST(DistributedSampler, RejectsBadRankAndWorld) {
  auto bad = DistributedSampler::create(10, {3, 3, false, 0, false});
  ASSERT_FALSE(bad.isOk());
  EXPECT_THAT(bad.status().message(), HasSubstr("expected a rank in [0, 3)"));
  EXPECT_FALSE(DistributedSampler::create(10, {0, 0, false, 0, false}).isOk());
  EXPECT_FALSE(DistributedSampler::create(0, {0, 1, false, 0, false}).isOk());
}

TEST(Prefetcher, DeliversBatchesInOrderWithAPartialLastBatch) {
  CountingDataset ds(10);
  std::vector<int64_t> order = {9, 8, 7, 6, 5, 4, 3, 2, 1, 0};
  Prefetcher p(ds, order, 3, false, 1);
  EXPECT_EQ(p.batches(), 4);
  std::vector<std::vector<int64_t>> seen;
  Batch b;
  while (true) {
    auto more = p.next(b);
    ASSERT_TRUE(more.isOk()) << more.status().message();
    if (!more.value())
      break;
    EXPECT_EQ(b.position, int64_t(seen.size()));
    ASSERT_EQ(b.tensors.size(), 2u);
    EXPECT_EQ(b.tensors[0].shape, (std::vector<int64_t>{int64_t(b.samples.size()), 2}));
    for (size_t i = 0; i < b.samples.size(); ++i) {
      EXPECT_EQ(b.tensors[0].f32[2 * i], float(b.samples[i]));
      EXPECT_EQ(b.tensors[0].f32[2 * i + 1], float(b.samples[i]) + 0.5f);
      EXPECT_EQ(b.tensors[1].i32[i], b.samples[i]);
    }
    seen.push_back(b.samples);
  }
  EXPECT_THAT(seen, ElementsAre(ElementsAre(9, 8, 7), ElementsAre(6, 5, 4),
                                ElementsAre(3, 2, 1), ElementsAre(0)));
  auto again = p.next(b);
  ASSERT_TRUE(again.isOk());
  EXPECT_FALSE(again.value());
}

TEST(Prefetcher, DropsPartialBatchAndResumesFromAPosition) {
  CountingDataset ds(10);
  std::vector<int64_t> order(10);
  std::iota(order.begin(), order.end(), 0);
  Prefetcher p(ds, order, 3, true, 2, 2);
  EXPECT_EQ(p.batches(), 3);
  Batch b;
  ASSERT_TRUE(p.next(b).value());
  EXPECT_EQ(b.position, 2);
  EXPECT_THAT(b.samples, ElementsAre(6, 7, 8));
  EXPECT_FALSE(p.next(b).value());
  Prefetcher bad(ds, order, 3, true, 2, 4);
  EXPECT_FALSE(bad.next(b).isOk());
  Prefetcher zero(ds, order, 0);
  EXPECT_FALSE(zero.next(b).isOk());
}

TEST(Prefetcher, WorksAheadOnItsOwnThread) {
  CountingDataset ds(100);
  std::vector<int64_t> order(100);
  std::iota(order.begin(), order.end(), 0);
  Prefetcher p(ds, order, 10, false, 2);
  // Without calling next(), the worker fills the queue: 2 batches of 10
  // samples, 2 tensors each.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (ds.copies < 40 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(ds.copies, 40);
  // ... and no further, since the queue is bounded.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(ds.copies, 40);
}

TEST(Prefetcher, StopsCleanlyWithAFullQueue) {
  CountingDataset ds(1000);
  std::vector<int64_t> order(1000);
  std::iota(order.begin(), order.end(), 0);
  {
    Prefetcher p(ds, order, 10, false, 1);
    Batch b;
    ASSERT_TRUE(p.next(b).value());
    p.stop();
    auto after = p.next(b); // may still hand out a queued batch
    ASSERT_TRUE(after.isOk());
  } // destructor after stop(): joins nothing twice
  {
    Prefetcher p(ds, order, 10, false, 1); // destroyed while blocked
  }
  EXPECT_LT(ds.copies, 2000);
}

TEST(Prefetcher, PropagatesDatasetErrorsAfterEarlierBatches) {
  CountingDataset ds(10, 7);
  std::vector<int64_t> order(10);
  std::iota(order.begin(), order.end(), 0);
  Prefetcher p(ds, order, 3);
  Batch b;
  ASSERT_TRUE(p.next(b).value());
  ASSERT_TRUE(p.next(b).value());
  auto failed = p.next(b);
  ASSERT_FALSE(failed.isOk());
  EXPECT_THAT(failed.status().message(), HasSubstr("batch 2"));
  EXPECT_THAT(failed.status().message(), HasSubstr("sample 7 is broken"));
}
