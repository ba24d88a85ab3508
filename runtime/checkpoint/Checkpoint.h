//===- Checkpoint.h - training state in a safetensors file ------*- C++ -*-===//
//
// What a training checkpoint holds and how it maps onto safetensors:
//   - each parameter under its own name (fc1.weight), so the file loads as
//     a state dict in PyTorch: F64 for state the step holds in f64, F32
//     for the rest (f16 and bf16 state is widened);
//   - optimizer state as "optimizer/<slot>/<parameter>" (slot: adam.m, ...);
//   - the RNG state as the I64 tensor "rng/state";
//   - step, seed, epoch and position (the next batch of the epoch) as
//     decimal strings in __metadata__, with "format" = "kiln-checkpoint-1".
// Saving is atomic (runtime/checkpoint/Safetensors.h); loading verifies the
// file and then that the metadata is complete and numeric.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_CHECKPOINT_CHECKPOINT_H
#define KILN_RUNTIME_CHECKPOINT_CHECKPOINT_H

#include "runtime/Status.h"

#include <cstdint>
#include <initializer_list>
#include <map>
#include <string>
#include <vector>

namespace kiln::runtime {

// The values of a checkpointed tensor at the precision it is kept in:
// f32, or f64 for a model that trains in f64 (narrowing it would lose what
// a resumed run needs to continue bit for bit). Reading converts to double;
// writing rounds to the values' own precision.
class TensorValues {
public:
  TensorValues() = default;
  TensorValues(std::vector<float> values) : f32_(std::move(values)) {}
  TensorValues(std::vector<double> values)
      : f64_(std::move(values)), wide_(true) {}
  TensorValues(std::initializer_list<float> values) : f32_(values) {}
  // |n| zeros, f64 when |wide|.
  static TensorValues zeros(bool wide, int64_t n);

  // Whether the values are f64.
  bool wide() const { return wide_; }
  int64_t size() const {
    return wide_ ? static_cast<int64_t>(f64_.size())
                 : static_cast<int64_t>(f32_.size());
  }
  int64_t elementBytes() const { return wide_ ? 8 : 4; }
  double operator[](int64_t i) const { return wide_ ? f64_[i] : f32_[i]; }
  void set(int64_t i, double value) {
    if (wide_)
      f64_[i] = value;
    else
      f32_[i] = static_cast<float>(value);
  }
  // The elements as stored (float or double).
  void *data() {
    return wide_ ? static_cast<void *>(f64_.data())
                 : static_cast<void *>(f32_.data());
  }
  const void *data() const {
    return wide_ ? static_cast<const void *>(f64_.data())
                 : static_cast<const void *>(f32_.data());
  }
  const std::vector<float> &f32() const { return f32_; }
  const std::vector<double> &f64() const { return f64_; }
  // All values as doubles.
  std::vector<double> toDoubles() const;
  // Values [begin, begin + count), at this precision.
  TensorValues slice(int64_t begin, int64_t count) const;
  // Copies values [from, from + count) of |source| to [at, at + count),
  // rounding to this precision.
  void copyFrom(const TensorValues &source, int64_t from, int64_t count,
                int64_t at);

private:
  std::vector<float> f32_;
  std::vector<double> f64_;
  bool wide_ = false;
};

struct NamedTensor {
  std::string name;
  std::vector<int64_t> shape;
  TensorValues values;
};

struct TrainingState {
  std::vector<NamedTensor> parameters;
  // slot -> one tensor per parameter (named after the parameter).
  std::map<std::string, std::vector<NamedTensor>> optimizer;
  std::vector<uint64_t> rngState;
  int64_t step = 0;
  uint64_t seed = 0;
  int64_t epoch = 0;
  int64_t position = 0;
};

constexpr const char *kCheckpointFormat = "kiln-checkpoint-1";

Status saveCheckpoint(const std::string &path, const TrainingState &state);
StatusOr<TrainingState> loadCheckpoint(const std::string &path);

} // namespace kiln::runtime

#endif // KILN_RUNTIME_CHECKPOINT_CHECKPOINT_H
