//===- TrainFlags.h - `kiln train`'s options -----------------------*- C++ -*-===//
//
// What `kiln train` (Train.cpp) runs with: TrainOptions holds the checked
// values of its flags, and the flags' text where a later step needs to know
// whether one was given (the device choice, --seed against a resumed
// checkpoint, the mirrored replicas' flags). TrainFlags.cpp declares the
// flags, prints --help, and checks the values; the checks that need the
// launcher's environment (ranks, strategy) stay in Train.cpp.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TOOLS_KILN_LIB_TRAINFLAGS_H
#define KILN_TOOLS_KILN_LIB_TRAINFLAGS_H

#include "tools/kiln/lib/AmpFlags.h"
#include "tools/kiln/lib/CudaBackend.h"
#include "tools/kiln/lib/DistFlags.h"
#include "tools/kiln/lib/OptimizerFlags.h"

#include "passes/Pipelines.h"
#include "runtime/data/DataSpec.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <optional>
#include <string>

namespace kiln::cli {

class FlagParser;

// The command name every `kiln train` message starts with.
// The name the training loop's messages and lines start with: "kiln train",
// or a packed trainer's own name, set once at its start (TrainLoopFlags.cpp).
llvm::StringRef trainCommand();
void setTrainCommand(llvm::StringRef name);

struct TrainOptions {
  std::string input;
  std::string data = "fashion-mnist";
  std::string evalData; // "" : the default, "none": no eval
  int64_t maxSteps = 0; // 0: not given
  int64_t epochs = 0;   // 0: not given
  int64_t batchSize = 0;
  int64_t subset = 0; // 0: the whole training split
  int64_t evalSubset = 0;
  int64_t evalEvery = 0; // --eval-every: also every N steps (0: epochs only)
  int64_t logEvery = 1;
  int64_t checkpointEvery = 0;
  uint64_t seed = 0;
  bool noShuffle = false;
  bool resume = false;
  // --init-from: the parameters' first values; --init-strict=off lets the
  // file lack parameters (they keep their initializers) and hold others.
  std::string initFrom;
  bool initStrict = true;
  std::string checkpointDir;
  // --checkpoint-async: checkpoints written on a thread while the steps go
  // on (TrainState::setAsync).
  bool checkpointAsync = false;
  // --keep-checkpoints: the newest N checkpoints are kept (0: all).
  int64_t keepCheckpoints = 0;
  // --checkpoint-best: after each eval that beats the lowest eval loss so
  // far, its step's checkpoint and DIR/best.json naming it.
  bool checkpointBest = false;
  std::string metricsFile;
  std::string tensorboardDir; // --tensorboard-dir; empty: none
  // --profile: the training step's thunk times over --profile-steps steps
  // after two warm-up steps, as CSV; empty: none.
  std::string profileFile;
  int64_t profileSteps = 5;
  std::string backend = "cpu";
  int64_t threads = 0; // 0: all cores
  PipelineOptions pipeline;
  // --device's index and --cuda-graphs.
  CudaBackendOptions cuda;

  // The flags' text; empty means "not given".
  std::string backendFlag, device, seedFlag, threadsFlag, devices,
      collectiveTimeout;
  OptimizerFlags optimizerFlags;
  AmpFlags ampFlags;
  // Checked by parseDistFlags once the launcher's environment is read.
  DistFlags distFlags;
};

// Parses |args| into |options| and checks every flag that needs nothing but
// the flags (the device, the numbers, the optimizer and precision). Returns
// std::nullopt to go on, or the exit code to return now: kExitOk after
// --help, kExitUsage or kExitError after printing the problem to |errs|.
std::optional<int> parseTrainFlags(llvm::ArrayRef<std::string> args,
                                   TrainOptions &options,
                                   llvm::raw_ostream &outs,
                                   llvm::raw_ostream &errs);

// The text of the training loop's flags, checked by applyTrainLoopFlags.
struct TrainLoopFlagText {
  std::string data, maxSteps, epochs, batchSize, subset, evalSubset, logEvery,
      checkpointEvery, keepCheckpoints, evalEvery, initStrict, profileSteps;
};

// Declares the flags of the training loop (TrainLoopFlags.cpp), which every
// trainer has: --threads, --data, --eval-data, --epochs, --max-steps,
// --batch-size, --train-subset, --eval-subset, --no-shuffle, --log-every,
// --seed, --checkpoint-dir, --checkpoint-every, --resume, --init-from,
// --init-strict, --metrics-file, --tensorboard-dir, --profile,
// --profile-steps and --collective-timeout.
void addTrainLoopFlags(FlagParser &parser, TrainOptions &options,
                       TrainLoopFlagText &text);
// Checks them into |options|; std::nullopt to go on, else the exit code
// after printing the problem.
std::optional<int> applyTrainLoopFlags(const TrainLoopFlagText &text,
                                       TrainOptions &options,
                                       llvm::raw_ostream &errs);

// Parses --data into |spec| and --eval-data into |evalSpec| (the default:
// fashion-mnist's test split for fashion-mnist, none otherwise). Prints the
// problem and fails.
bool parseTrainData(const TrainOptions &options, runtime::DataSpec &spec,
                    std::optional<runtime::DataSpec> &evalSpec,
                    llvm::raw_ostream &errs);

} // namespace kiln::cli

#endif // KILN_TOOLS_KILN_LIB_TRAINFLAGS_H
