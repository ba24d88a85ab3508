//===- TrainCheckpoint.h - `kiln train`'s checkpoints ---------------*- C++ -*-===//
//
// Checkpoints of `kiln train` (runtime/checkpoint): reading the one --resume
// continues from, writing the model's state back from it, and writing new
// ones. A checkpoint holds the parameters, the optimizer state (entry
// "P.SLOT" of parameter P is slot SLOT of P; any other entry is slot
// "state"), the step, seed, epoch and data position.
//
// Under ZeRO (zero1/2/3) the step holds shards (TrainBackend::shards()) and
// checkpoints are sharded (runtime/checkpoint/Sharded.h): every rank writes
// step-K.rank-R-of-N.safetensors, rank 0 also the replicated state and the
// full parameters, then step-K.index.json, and then `latest`. Resuming cuts
// each rank's block out of the full tensors, so any strategy and world size
// can continue.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TOOLS_KILN_LIB_TRAINCHECKPOINT_H
#define KILN_TOOLS_KILN_LIB_TRAINCHECKPOINT_H

#include "tools/kiln/lib/TrainBackend.h"
#include "tools/kiln/lib/TrainFlags.h"

#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/checkpoint/Weights.h"
#include "runtime/dist/Communicator.h"

#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace kiln::cli {

// --resume: reads the checkpoint --checkpoint-dir's `latest` names (a ZeRO
// index is consolidated into the full state) into |resumed| and takes its
// seed into |options| (a different --seed is an error). Read before anything
// is compiled, so a bad checkpoint fails fast. Prints the problem and fails.
bool readResumeState(TrainOptions &options,
                     std::optional<runtime::TrainingState> &resumed,
                     llvm::raw_ostream &errs);

// --init-from: reads the file's parameters into |initial| (runtime/checkpoint/
// Weights.h), before anything is compiled. Prints the problem and fails.
bool readInitialWeights(const TrainOptions &options,
                        std::optional<runtime::WeightsFile> &initial,
                        llvm::raw_ostream &errs);

// --checkpoint-best: DIR/best.json, the checkpoint of the lowest eval loss
// (Keras' ModelCheckpoint(save_best_only=True), Hugging Face's
// best_model_checkpoint): {"checkpoint": "step-K.safetensors", "step": K,
// "eval_loss": L}.
struct BestCheckpoint {
  std::string checkpoint;
  int64_t step = 0;
  double evalLoss = 0;
};
// Writes it atomically and says so. Prints the problem and fails.
bool writeBestCheckpoint(const std::string &dir, const BestCheckpoint &best,
                         llvm::raw_ostream &console, llvm::raw_ostream &errs);
// DIR/best.json, or nothing when there is none. A file that is there but
// not one is printed as a warning and ignored.
std::optional<BestCheckpoint> readBestCheckpoint(const std::string &dir,
                                                 llvm::raw_ostream &errs);

// Where the training loop stands, as a checkpoint records it.
struct TrainPosition {
  int64_t step = 0;
  int64_t epoch = 0;
  int64_t position = 0; // batches done in the epoch
};

// The model's checkpointed state on this rank: restores it, gathers zero3's
// parameters and writes checkpoints.
class TrainState {
public:
  // |communicator| is the process's own (null on one rank and in mirrored
  // replicas): zero3's gathers and the sharded checkpoint's barrier run
  // through it.
  TrainState(TrainBackend &model, const runtime::dist::DistEnv &env,
             runtime::dist::Communicator *communicator);
  // Waits for a write in flight.
  ~TrainState();

  // Whether checkpoints are sharded (the step holds ZeRO shards).
  bool sharded() const { return !shardLayouts_.empty(); }
  size_t size() const { return entries_.size(); }

  // Writes |resumed|'s parameters and optimizer state into the model (a
  // shard entry gets this rank's block). Prints what is missing or of the
  // wrong size and fails.
  bool restore(const runtime::TrainingState &resumed, llvm::raw_ostream &errs);

  // --init-from: writes |weights|' tensors into the parameters of the same
  // names (a shard entry gets this rank's block of them); the optimizer
  // state keeps its initial values. |strict|: every parameter must be in
  // the file and every tensor of the file a parameter. A wrong shape or
  // dtype is always an error. Sets |summary| to what was taken, for the
  // start line. Prints the problem and fails.
  bool initialize(const runtime::WeightsFile &weights, const std::string &path,
                  bool strict, std::string &summary, llvm::raw_ostream &errs);

  // zero3: the parameters of shard entry |i| are not state anywhere; every
  // rank all-gathers its shard and gets them (|out|: name, values). Nothing
  // to do (true, |out| empty) for the other entries and strategies.
  bool gatherParameters(size_t i, std::vector<runtime::NamedTensor> &out,
                        llvm::raw_ostream &errs);

  // Writes the checkpoint of |at| to |dir| and points `latest` at it; a
  // failed write keeps the earlier checkpoints and the pointer. Every rank
  // calls it when sharded, else rank 0 alone. Prints the problem and fails.
  bool writeCheckpoint(const std::string &dir, const TrainPosition &at,
                       uint64_t seed, llvm::raw_ostream &console,
                       llvm::raw_ostream &errs);

  // --checkpoint-async (PyTorch DCP's async_save, Orbax's asynchronous
  // checkpointing): writeCheckpoint copies the state out (the device's
  // values read, zero3's parameters gathered) and a thread writes the file
  // while the steps go on; on one rank it then moves `latest`. One write is
  // in flight at a time: the next writeCheckpoint waits for it first.
  void setAsync(bool async) { async_ = async; }
  // --keep-checkpoints (Orbax's max_to_keep, Hugging Face's
  // save_total_limit): once a checkpoint is whole and `latest` names it,
  // rank 0 deletes the checkpoints of older steps beyond the newest |n|
  // (a sharded one's index and every rank's file). 0 keeps all.
  void setKeep(int64_t n) { keep_ = n; }
  // --checkpoint-best: the step whose checkpoint DIR/best.json names, which
  // --keep-checkpoints never deletes.
  void setBest(int64_t step) { best_ = step; }
  // The same once DIR/best.json names |step|'s checkpoint, the newest:
  // --keep-checkpoints then deletes the earlier best if it is beyond them.
  void moveBest(const std::string &dir, int64_t step,
                llvm::raw_ostream &console, llvm::raw_ostream &errs) {
    best_ = step;
    prune(dir, step, console, errs);
  }
  // The name `latest` gives the checkpoint of |step|: step-K.safetensors,
  // or a sharded one's step-K.index.json.
  std::string checkpointName(int64_t step) const;
  // Whether the write in flight is done and can be reported at once by
  // finishCheckpoint (one rank: a sharded checkpoint is committed where
  // every rank calls finishCheckpoint).
  bool checkpointWritten() const;
  // Waits for the write in flight and reports it; a sharded one is
  // committed then (the ranks' files counted, the index and `latest`
  // written on rank 0), so every rank calls it at the same point. True
  // when there is none.
  bool finishCheckpoint(llvm::raw_ostream &console, llvm::raw_ostream &errs);

private:
  // (slot, parameter) of optimizer state entry |name|; ("state", name) for
  // state of no parameter.
  std::pair<std::string, std::string> stateKey(const std::string &name) const;
  // After the file |name| of step |stepsDone| was written (|saved|): a
  // sharded checkpoint's count of failures and index, then `latest` (or
  // |pointer|, the background writer's result), and the line (ending in
  // |how|). Prints the problem and fails.
  bool commit(const std::string &dir, int64_t stepsDone, std::string name,
              const runtime::Status &saved,
              const std::optional<runtime::Status> &pointer,
              const std::string &how, llvm::raw_ostream &console,
              llvm::raw_ostream &errs);

  TrainBackend &model_;
  runtime::dist::DistEnv env_;
  runtime::dist::Communicator *communicator_;
  const std::vector<StateEntry> &entries_;
  std::set<std::string> parameterNames_, stateNames_;
  // ZeRO: the shard entries (zero.bucketK and its optimizer slots) by name.
  std::map<std::string, const runtime::ShardLayout *> shardLayouts_;
  bool async_ = false;
  int64_t keep_ = 0;
  int64_t best_ = -1;
  // --keep-checkpoints after the checkpoint of step |step| in |dir|.
  void prune(const std::string &dir, int64_t step, llvm::raw_ostream &console,
             llvm::raw_ostream &errs);
  struct Pending;
  std::unique_ptr<Pending> pending_;
};

} // namespace kiln::cli

#endif // KILN_TOOLS_KILN_LIB_TRAINCHECKPOINT_H
