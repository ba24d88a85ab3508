//===- Checkpoint.h - training state in a safetensors file --------*- C++ -*-===//
//
// What a training checkpoint holds and how it maps onto safetensors:
//   - each parameter under its own name (fc1.weight), F32, so the file
//     loads as a state dict in PyTorch;
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
#include <map>
#include <string>
#include <vector>

namespace kiln::runtime {

struct NamedTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;
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
