//===- TrainBackend.h - what `kiln train` runs a step on ----------*- C++ -*-===//
//
// `kiln train` (Train.cpp) owns everything a backend does not: flags, data,
// shuffling, prefetch, the loop, progress, checkpoints, metrics and the eval
// loop. A TrainBackend owns the compiled step and its state: it feeds one
// batch and runs one step, and reads and writes the checkpointed tensors
// (parameters and optimizer state) by name. Two exist:
//
//   reference  the step on the reference interpreter (ReferenceBackend.cpp)
//   cpu        the step compiled into a package and run by the CPU runtime
//              (CpuBackend.cpp); the default
//
// Both see the same data tensors in the same order (the step's inputs, then
// its labels) and the same state names, so a checkpoint written by one
// resumes on the other.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TOOLS_KILN_LIB_TRAINBACKEND_H
#define KILN_TOOLS_KILN_LIB_TRAINBACKEND_H

#include "passes/Pipelines.h"

#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/data/Dataset.h"
#include "runtime/data/Sampler.h"
#include "runtime/metrics/ThunkProfile.h"
#include "runtime/package/Package.h"

#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kiln::runtime::dist {
class Communicator;
} // namespace kiln::runtime::dist
namespace kiln::runtime::cpu {
class KernelLoader;
} // namespace kiln::runtime::cpu

namespace kiln::cli {

// A checkpointed tensor: a parameter, model state (a batch norm's running
// statistics) or optimizer state.
struct StateEntry {
  std::string name;
  // A tensor of the model (PyTorch's state_dict: a parameter or model
  // state), checkpointed, resumed and --init-from'd with the parameters;
  // false: optimizer state.
  bool parameter = true;
  std::vector<int64_t> shape;
  // A parameter the optimizer trains; false for model state.
  bool trained = true;
};

// One eval batch's forward result.
struct EvalOutput {
  double loss = 0;
  // When the loss comes from kiln.softmax_cross_entropy, the class its
  // logits rank first in each of their rows (one per sample for a
  // classifier, one per position for a sequence model), computed by the
  // eval step (exposeCrossEntropyPredictions); empty otherwise.
  std::vector<int32_t> predictions;
};

// A thunk's times over the profiled steps (kiln train --profile).
using runtime::ThunkTime;

class TrainBackend {
public:
  virtual ~TrainBackend();

  virtual const char *name() const = 0;
  // The batch dimension the step was compiled for.
  virtual int64_t batch() const = 0;
  // The training data tensors (inputs, then labels), as the dataset opens
  // them; the eval model's, when it has one.
  virtual const std::vector<runtime::TensorSpec> &dataSpecs() const = 0;
  virtual const std::vector<runtime::TensorSpec> &evalSpecs() const = 0;
  virtual bool hasEval() const = 0;
  // Whether the eval output has predictions (so accuracy can be counted).
  virtual bool evalHasPredictions() const = 0;

  virtual const std::vector<StateEntry> &state() const = 0;
  // The entry's values: f64 when the step holds it in f64, else f32 (f16
  // and bf16 state widened).
  virtual runtime::TensorValues readState(size_t entry) const = 0;
  // Rounds |values| to the entry's element type. Fails with a message in
  // |error| when the size does not match.
  virtual bool writeState(size_t entry, const runtime::TensorValues &values,
                          std::string &error) = 0;
  // Sets the step counter argument (kiln.role step), if the step has one.
  virtual void setStepCounter(int64_t step) = 0;
  // zero3: sets parameter |name| of the eval step, which the training step
  // holds only as shards. Fails with a message in |error|.
  virtual bool setEvalParameter(const std::string &name,
                                const runtime::TensorValues &values,
                                std::string &error) {
    error = "cannot be set on this backend";
    return false;
  }
  // ZeRO (zero1/2/3): the step's sharded inputs, whose state entries hold
  // this rank's block; empty otherwise.
  virtual const std::vector<runtime::ShardLayout> &shards() const {
    static const std::vector<runtime::ShardLayout> none;
    return none;
  }

  // Feeds |batch| and runs one step; |loss| is the step's loss. Prints the
  // problem to |errs| and fails.
  virtual bool step(const runtime::Batch &batch, double &loss,
                    llvm::raw_ostream &errs) = 0;
  // Runs the forward model on |batch| with the current parameters.
  virtual bool evaluate(const runtime::Batch &batch, EvalOutput &out,
                        llvm::raw_ostream &errs) = 0;

  // Times each thunk of the training step's runs from now on (on a GPU
  // with events around each, which stops CUDA Graph launches meanwhile);
  // turning it on clears what was gathered. A backend without thunks (the
  // reference interpreter) fails with a message in |error|.
  virtual bool setProfiling(bool on, std::string &error) {
    error = "the " + std::string(name()) + " backend has no thunks to time";
    return false;
  }
  // One entry per thunk of the training step, in order.
  virtual std::vector<ThunkTime> profile() const { return {}; }
  // Where the last profiled step's thunk timeline starts (ThunkTime's
  // lastStartMs count from it) on the host's steady clock.
  virtual std::chrono::steady_clock::time_point profileStepStart() const {
    return {};
  }
};

// A data argument of the step as the backend sees it: its full shape
// (batch first) and its element type. |indexLimit|:
// the bound the graph reads the integers under as indices (a table's rows,
// a cross-entropy's classes), which data files are checked against and
// synthetic data is drawn below (runtime::TensorSpec); 0 when not known
// (a package from before format 1.6, or an integer no index use bounds:
// synthetic integers are then 0 or 1).
struct DataArgument {
  std::string name;
  std::vector<int64_t> shape;
  // f32 for f32, f16 and bf16 data; f64 for f64 data; i32 for integers.
  runtime::ElementType type = runtime::ElementType::f32;
  int64_t indexLimit = 0;
};

// The dataset's tensor specs and the batch size of |args| (inputs, then
// labels): each must have the batch dimension of the first one first.
// Prints the problem (naming |input|) and fails.
bool dataSpecsOf(const std::vector<DataArgument> &args, llvm::StringRef input,
                 llvm::StringRef command, std::vector<runtime::TensorSpec> &specs,
                 int64_t &batch, llvm::raw_ostream &errs);

// What the backends are built from.
struct BackendOptions {
  std::string input; // .kiln, .mlir or (cpu) .kpkg
  PipelineOptions pipeline;
  bool wantEval = false;
  // cpu: where the compiled packages go (empty: a temporary directory that
  // is removed) and the thread count (0: all cores).
  std::string packageDir;
  int threads = 0;
  // Whether the optimizer flags were given (a .kpkg has them compiled in).
  bool optimizerFlagsGiven = false;
  // cpu: runs the training step's Collective thunks (not owned; null on one
  // rank).
  runtime::dist::Communicator *communicator = nullptr;
};

// Each prints what went wrong to |errs| (prefixed with |command|) and
// returns null.
std::unique_ptr<TrainBackend> createReferenceBackend(const BackendOptions &options,
                                                     llvm::StringRef command,
                                                     llvm::raw_ostream &errs);
// A CPU step package (and its eval package) as a backend: what
// createCpuBackend builds once the model is compiled, and what a packed
// trainer (`kiln pack`) runs. No MLIR.
struct CpuPackageOptions {
  std::string input;     // what messages name: the model or package given
  std::string trainPath; // the step package
  std::string evalPath;  // its eval package; empty: no eval
  // The packages' bytes when they are in memory (a packed trainer's);
  // empty: read the paths.
  std::string trainBytes, evalBytes;
  int threads = 0;       // 0: all cores
  runtime::dist::Communicator *communicator = nullptr; // not owned
  std::unique_ptr<runtime::cpu::KernelLoader> loader;  // kept by the backend
  std::string tempDir; // removed with the backend when not empty
};
std::unique_ptr<TrainBackend>
createCpuPackageBackend(CpuPackageOptions options, llvm::StringRef command,
                        llvm::raw_ostream &errs);

std::unique_ptr<TrainBackend> createCpuBackend(const BackendOptions &options,
                                               llvm::StringRef command,
                                               llvm::raw_ostream &outs,
                                               llvm::raw_ostream &errs);

} // namespace kiln::cli

#endif // KILN_TOOLS_KILN_LIB_TRAINBACKEND_H
