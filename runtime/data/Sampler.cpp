//===- Sampler.cpp - sharding, shuffling and prefetching batches -----------===//

#include "runtime/data/Sampler.h"

#include <algorithm>
#include <random>

namespace kiln::runtime {

std::vector<int64_t> shuffledRange(int64_t n, uint64_t seed) {
  std::vector<int64_t> out(n);
  for (int64_t i = 0; i < n; ++i)
    out[i] = i;
  std::mt19937_64 rng(seed);
  for (int64_t i = n - 1; i > 0; --i) {
    // Unbiased draw from [0, i] by rejection (not std::uniform_int_
    // distribution, whose algorithm differs between standard libraries).
    uint64_t bound = uint64_t(i) + 1;
    uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
    uint64_t r;
    do
      r = rng();
    while (r >= limit);
    std::swap(out[i], out[int64_t(r % bound)]);
  }
  return out;
}

StatusOr<DistributedSampler>
DistributedSampler::create(int64_t datasetSize, SamplerOptions options) {
  if (datasetSize < 0)
    return Status::error("sampler: dataset size " +
                         std::to_string(datasetSize) + ": expected >= 0");
  if (options.worldSize < 1)
    return Status::error("sampler: world size " +
                         std::to_string(options.worldSize) +
                         ": expected at least 1");
  if (options.rank < 0 || options.rank >= options.worldSize)
    return Status::error("sampler: rank " + std::to_string(options.rank) +
                         ": expected a rank in [0, " +
                         std::to_string(options.worldSize) + ")");
  if (datasetSize == 0 && !options.dropLast)
    return Status::error("sampler: the dataset is empty: nothing to pad "
                         "the ranks' shares with");
  DistributedSampler s;
  s.datasetSize_ = datasetSize;
  s.options_ = options;
  int64_t w = options.worldSize;
  if (options.dropLast && datasetSize % w != 0)
    // math.ceil((len - w) / w), which is 0 when len < w.
    s.numSamples_ = datasetSize < w ? 0 : (datasetSize - w + w - 1) / w;
  else
    s.numSamples_ = (datasetSize + w - 1) / w;
  return s;
}

std::vector<int64_t> DistributedSampler::indices(int64_t epoch) const {
  std::vector<int64_t> all;
  if (options_.shuffle) {
    all = shuffledRange(datasetSize_, options_.seed + uint64_t(epoch));
  } else {
    all.resize(datasetSize_);
    for (int64_t i = 0; i < datasetSize_; ++i)
      all[i] = i;
  }
  int64_t total = totalSize();
  if (!options_.dropLast) {
    // Pad by repeating from the start, as often as needed.
    for (int64_t i = 0; int64_t(all.size()) < total; ++i)
      all.push_back(all[i % datasetSize_]);
  } else {
    all.resize(total);
  }
  std::vector<int64_t> mine;
  mine.reserve(numSamples_);
  for (int64_t i = options_.rank; i < total; i += options_.worldSize)
    mine.push_back(all[i]);
  return mine;
}

int64_t batchCount(int64_t sampleCount, int64_t batchSize, bool dropPartial) {
  if (batchSize <= 0)
    return 0;
  return dropPartial ? sampleCount / batchSize
                     : (sampleCount + batchSize - 1) / batchSize;
}

int64_t BatchTensor::elementCount() const {
  switch (type) {
  case ElementType::f32:
    return static_cast<int64_t>(f32.size());
  case ElementType::f64:
    return static_cast<int64_t>(f64.size());
  case ElementType::i32:
    return static_cast<int64_t>(i32.size());
  }
  return 0;
}

void *BatchTensor::data() {
  return const_cast<void *>(static_cast<const BatchTensor *>(this)->data());
}

const void *BatchTensor::data() const {
  switch (type) {
  case ElementType::f32:
    return f32.data();
  case ElementType::f64:
    return f64.data();
  case ElementType::i32:
    return i32.data();
  }
  return nullptr;
}

double BatchTensor::element(int64_t i) const {
  switch (type) {
  case ElementType::f32:
    return f32[i];
  case ElementType::f64:
    return f64[i];
  case ElementType::i32:
    return i32[i];
  }
  return 0;
}

StatusOr<Batch> assembleBatch(const Dataset &dataset,
                              const std::vector<int64_t> &indices) {
  Batch batch;
  batch.samples = indices;
  int64_t n = int64_t(indices.size());
  for (size_t t = 0; t < dataset.specs().size(); ++t) {
    const TensorSpec &spec = dataset.specs()[t];
    BatchTensor tensor;
    tensor.name = spec.name;
    tensor.type = spec.type;
    tensor.shape.push_back(n);
    tensor.shape.insert(tensor.shape.end(), spec.shape.begin(),
                        spec.shape.end());
    int64_t per = spec.elementCount();
    if (spec.type == ElementType::f32)
      tensor.f32.resize(n * per);
    else if (spec.type == ElementType::f64)
      tensor.f64.resize(n * per);
    else
      tensor.i32.resize(n * per);
    for (int64_t i = 0; i < n; ++i) {
      void *dst = static_cast<char *>(tensor.data()) +
                  i * per * elementTypeBytes(spec.type);
      Status s = dataset.copySample(indices[i], t, dst);
      if (!s.isOk())
        return s;
    }
    batch.tensors.push_back(std::move(tensor));
  }
  return batch;
}

Prefetcher::Prefetcher(const Dataset &dataset, std::vector<int64_t> indices,
                       int64_t batchSize, bool dropPartial, size_t depth,
                       int64_t firstBatch)
    : dataset_(dataset), indices_(std::move(indices)), batchSize_(batchSize),
      firstBatch_(firstBatch), depth_(depth == 0 ? 1 : depth) {
  batches_ = batchCount(int64_t(indices_.size()), batchSize_, dropPartial);
  if (batchSize_ <= 0) {
    error_ = Status::error("prefetcher: batch size " +
                           std::to_string(batchSize_) +
                           ": expected at least 1");
    finished_ = true;
    return;
  }
  if (firstBatch_ < 0 || firstBatch_ > batches_) {
    error_ = Status::error("prefetcher: start position " +
                           std::to_string(firstBatch_) +
                           ": expected a batch in [0, " +
                           std::to_string(batches_) + "]");
    finished_ = true;
    return;
  }
  worker_ = std::thread([this] { run(); });
}

Prefetcher::~Prefetcher() { stop(); }

void Prefetcher::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  if (worker_.joinable())
    worker_.join();
}

void Prefetcher::run() {
  for (int64_t b = firstBatch_; b < batches_; ++b) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [&] { return stopping_ || queue_.size() < depth_; });
      if (stopping_)
        break;
    }
    int64_t begin = b * batchSize_;
    int64_t end = std::min<int64_t>(begin + batchSize_, indices_.size());
    std::vector<int64_t> slice(indices_.begin() + begin,
                               indices_.begin() + end);
    StatusOr<Batch> batch = assembleBatch(dataset_, slice);
    std::lock_guard<std::mutex> lock(mutex_);
    if (!batch.isOk()) {
      error_ = Status::error("prefetcher: batch " + std::to_string(b) + ": " +
                             batch.status().message());
      break;
    }
    batch->position = b;
    queue_.push_back(std::move(batch.value()));
    changed_.notify_all();
  }
  std::lock_guard<std::mutex> lock(mutex_);
  finished_ = true;
  changed_.notify_all();
}

StatusOr<bool> Prefetcher::next(Batch &out) {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return !queue_.empty() || finished_ || stopping_; });
  if (!queue_.empty()) {
    out = std::move(queue_.front());
    queue_.pop_front();
    changed_.notify_all();
    return true;
  }
  if (!error_.isOk())
    return error_;
  return false;
}

} // namespace kiln::runtime
