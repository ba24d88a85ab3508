//===- TrainLoop.h - the training loop of `kiln train` ------------*- C++ -*-===//
//
// What `kiln train` does once its step is built, on any TrainBackend: open
// the data (sharded and shuffled per epoch by the DistributedSampler, each
// rank taking its share, assembled ahead by the Prefetcher), run the steps,
// print progress, eval after each epoch, write checkpoints, --metrics-file
// and --tensorboard-dir. Train.cpp (a model or a package) and the packed
// trainer of `kiln pack` (PackedTrainer.cpp) both run it; it needs no MLIR.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TOOLS_KILN_LIB_TRAINLOOP_H
#define KILN_TOOLS_KILN_LIB_TRAINLOOP_H

#include "tools/kiln/lib/TrainBackend.h"
#include "tools/kiln/lib/TrainFlags.h"

#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/checkpoint/Weights.h"
#include "runtime/data/DataSpec.h"
#include "runtime/dist/Communicator.h"

#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace kiln::cli {

// The run around the step: the flags, where this rank stands, and what was
// decided before the step was built.
struct TrainRun {
  explicit TrainRun(const TrainOptions &options) : options(options) {}

  const TrainOptions &options;
  runtime::dist::DistEnv env;
  // Runs the step's collectives (not owned; null on one rank).
  runtime::dist::Communicator *communicator = nullptr;
  // A compiled package: its strategy and micro-batches are compiled in.
  bool isPackage = false;
  // --grad-accum: the step reads this many micro-batches of --batch-size.
  int64_t microBatches = 1;
  // The strategy's name for the start line; empty for a package.
  std::string strategy;
  runtime::DataSpec spec;
  std::optional<runtime::DataSpec> evalSpec;
  // The checkpoint --resume continues from.
  std::optional<runtime::TrainingState> resumed;
  // The parameters' first values (--init-from).
  std::optional<runtime::WeightsFile> initial;
};

// The threads of this rank's step: |threads| (--threads) when given, else
// all cores, or this rank's share of them when several ranks share the
// machine (env.localWorldSize; torchrun sets OMP_NUM_THREADS=1 for the
// same reason); 0 means all cores.
int rankThreads(int64_t threads, const runtime::dist::DistEnv &env);

// --collective-timeout in seconds (300 when not given); prints a bad value
// (prefixed with |command|) and returns std::nullopt.
std::optional<double> collectiveTimeoutSeconds(const TrainOptions &options,
                                               llvm::StringRef command,
                                               llvm::raw_ostream &errs);

// This rank's communicator among env.worldSize ranks, which meet at
// MASTER_ADDR:MASTER_PORT: NCCL on CUDA device |cudaDevice| (the unique id
// through the store; the step's collectives run on device memory inside
// its CUDA Graph) when |cuda|, else Gloo over TCP. Either gives up on the
// rendezvous or a collective after |timeoutSeconds|, naming the missing
// rank.
runtime::StatusOr<std::unique_ptr<runtime::dist::Communicator>>
createRankCommunicator(const runtime::dist::DistEnv &env, double timeoutSeconds,
                       bool cuda, int cudaDevice);

// Trains |model| as |run| says; rank 0 prints to |console|. Returns the
// exit code (kExitOk, or kExitError after printing the problem to |errs|).
int runTrainLoop(TrainBackend &model, const TrainRun &run,
                 llvm::raw_ostream &console, llvm::raw_ostream &errs);

} // namespace kiln::cli

#endif // KILN_TOOLS_KILN_LIB_TRAINLOOP_H
