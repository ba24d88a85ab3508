//===- Sampler.h - sharding, shuffling and prefetching batches ----*- C++ -*-===//
//
// DistributedSampler follows PyTorch's torch.utils.data.DistributedSampler:
// each of worldSize ranks gets numSamples() indices; without dropLast the
// index list is padded by repeating it from the start so every rank gets
// the same count, with dropLast the tail is cut instead; rank r takes
// indices r, r + worldSize, ... The shuffle is a Fisher-Yates permutation
// seeded with seed + epoch, so every rank computes the same permutation
// (it is not torch.randperm's sequence).
//
// Prefetcher assembles the batches of one epoch on a background thread into
// a bounded queue, so the next batch is ready while a step runs. Errors from
// the dataset arrive through next() as a Status; destroying the prefetcher
// stops and joins the worker, even when the queue is full.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_DATA_SAMPLER_H
#define KILN_RUNTIME_DATA_SAMPLER_H

#include "runtime/Status.h"
#include "runtime/data/Dataset.h"

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

namespace kiln::runtime {

struct SamplerOptions {
  int64_t rank = 0;
  int64_t worldSize = 1;
  bool shuffle = true;
  uint64_t seed = 0;
  bool dropLast = false;
};

class DistributedSampler {
public:
  static StatusOr<DistributedSampler> create(int64_t datasetSize,
                                             SamplerOptions options);
  // Indices this rank visits in |epoch|, numSamples() of them.
  std::vector<int64_t> indices(int64_t epoch) const;
  int64_t numSamples() const { return numSamples_; }
  int64_t totalSize() const { return numSamples_ * options_.worldSize; }
  const SamplerOptions &options() const { return options_; }

private:
  int64_t datasetSize_ = 0;
  int64_t numSamples_ = 0;
  SamplerOptions options_;
};

// A permutation of [0, n) from |seed|, identical on every platform.
std::vector<int64_t> shuffledRange(int64_t n, uint64_t seed);

// One batch: a tensor per dataset spec with the batch dimension first.
struct BatchTensor {
  std::string name;
  ElementType type = ElementType::f32;
  std::vector<int64_t> shape; // [batch, spec shape...]
  std::vector<float> f32;     // when type == f32
  std::vector<int32_t> i32;   // when type == i32
  std::vector<double> f64;    // when type == f64

  int64_t elementCount() const;
  // The elements, of |type|.
  void *data();
  const void *data() const;
  // Element |i| as a double.
  double element(int64_t i) const;
};

struct Batch {
  int64_t position = 0;         // index of this batch in the epoch
  std::vector<int64_t> samples; // dataset indices it holds
  std::vector<BatchTensor> tensors;
};

// Copies the samples |indices| of |dataset| into one batch.
StatusOr<Batch> assembleBatch(const Dataset &dataset,
                              const std::vector<int64_t> &indices);

// Number of batches |sampleCount| samples make.
int64_t batchCount(int64_t sampleCount, int64_t batchSize,
                   bool dropPartial);

class Prefetcher {
public:
  // Batches |indices| (one rank's epoch) in groups of |batchSize|, starting
  // at batch |firstBatch| (to resume from a checkpoint's data position); a
  // last partial batch is dropped when |dropPartial|. At most |depth|
  // batches wait in the queue. |dataset| must outlive the prefetcher.
  Prefetcher(const Dataset &dataset, std::vector<int64_t> indices,
             int64_t batchSize, bool dropPartial = false, size_t depth = 2,
             int64_t firstBatch = 0);
  ~Prefetcher();
  Prefetcher(const Prefetcher &) = delete;
  Prefetcher &operator=(const Prefetcher &) = delete;

  // Waits for the next batch: true with |out| filled, false at the end of
  // the epoch, or the error that stopped the worker.
  StatusOr<bool> next(Batch &out);
  // Stops the worker and joins it; next() then reports the end.
  void stop();
  int64_t batches() const { return batches_; }

private:
  void run();

  const Dataset &dataset_;
  std::vector<int64_t> indices_;
  int64_t batchSize_;
  int64_t batches_ = 0;
  int64_t firstBatch_;
  size_t depth_;

  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Batch> queue_;
  bool stopping_ = false;
  bool finished_ = false; // the worker produced its last batch or failed
  Status error_;
  std::thread worker_;
};

} // namespace kiln::runtime

#endif // KILN_RUNTIME_DATA_SAMPLER_H
