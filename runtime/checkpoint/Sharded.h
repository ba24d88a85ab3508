//===- Sharded.h - ZeRO checkpoints: one file per rank and an index -*- C++ -*-===//
//
// Under ZeRO (kiln-distribute zero1/2/3) each rank holds block `rank` of
// every flat parameter bucket (its shard) and the optimizer state of that
// block. A checkpoint at step K is then
//   step-K.rank-R-of-N.safetensors  one per rank (Checkpoint.h's format):
//                                   the rank's shards ("zero.bucketB" as a
//                                   parameter, its optimizer slots under the
//                                   same name); rank 0's file also holds the
//                                   replicated state (the full parameters
//                                   when the strategy keeps or gathers
//                                   them, the loss scale, ...)
//   step-K.index.json               written by rank 0 once every rank's file
//                                   is on disk: the world size, the files,
//                                   and each bucket's parameters with their
//                                   offsets and shapes.
// Loading reads the index and every file it names, rebuilds each flat
// bucket from the ranks' blocks and cuts it into the parameters: the result
// is an ordinary TrainingState (full parameters, per-parameter optimizer
// state), independent of the world size. A run with any world size or
// strategy then takes what it needs (shardBlock gives a rank its block), so
// resharding happens per parameter and a different --bucket-mb is fine.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_CHECKPOINT_SHARDED_H
#define KILN_RUNTIME_CHECKPOINT_SHARDED_H

#include "runtime/Status.h"
#include "runtime/checkpoint/Checkpoint.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace kiln::runtime {

constexpr const char *kShardedCheckpointFormat = "kiln-sharded-checkpoint-1";

// One parameter of a bucket: where it starts in the flat bucket.
struct ShardedParam {
  std::string name;
  int64_t offset = 0;
  std::vector<int64_t> shape;
};

// A flat bucket of |length| elements (padded to a multiple of the world
// size when sharded), named as its shard tensors are.
struct ShardedBucket {
  std::string name;
  int64_t length = 0;
  std::vector<ShardedParam> params;
};

struct ShardedIndex {
  int64_t step = 0;
  int worldSize = 1;
  std::vector<std::string> files; // one per rank, relative to the index
  std::vector<ShardedBucket> buckets;
};

std::string shardFileName(int64_t step, int rank, int worldSize);
std::string shardIndexFileName(int64_t step);
bool isShardIndexName(const std::string &name);

// Elements per rank of a bucket of |length| over |worldSize| ranks.
int64_t shardLength(int64_t length, int worldSize);

std::string writeShardIndex(const ShardedIndex &index);
// |path| names the file in errors.
StatusOr<ShardedIndex> parseShardIndex(const std::string &text,
                                       const std::string &path);

// Block |rank| of |bucket| over |worldSize| ranks, the flat bucket being the
// tensors |find| returns for its parameters (zeros as padding). Fails
// naming |what| and the parameter |find| has no tensor for (null) or whose
// size differs. With |base| (the block as it stands), the block starts
// from it and a parameter |find| has no tensor for keeps its values there.
// The block is f64 when |base| or any tensor it is cut from is.
StatusOr<TensorValues>
shardBlock(const ShardedBucket &bucket, int rank, int worldSize,
           const std::function<const NamedTensor *(const std::string &)> &find,
           const std::string &what, const TensorValues *base = nullptr);

// The full state from the index and each rank's state (in rank order):
// buckets cut into their parameters, the other entries of rank 0 as they
// are. Errors name |indexPath| and what is missing or the wrong size.
StatusOr<TrainingState> consolidateShards(const ShardedIndex &index,
                                          const std::vector<TrainingState> &ranks,
                                          const std::string &indexPath);

// Reads the index at |indexPath| and every rank file it names.
StatusOr<TrainingState> loadShardedCheckpoint(const std::string &indexPath);

} // namespace kiln::runtime

#endif // KILN_RUNTIME_CHECKPOINT_SHARDED_H
