//===- CpuPackageBackend.cpp - a training step package on the CPU ---------===//
//
// The TrainBackend of a CPU step package (and its eval package): what
// `kiln train --backend=cpu` runs once CpuBackend.cpp has compiled the model
// (or as it is, for a .kpkg), and what the trainer `kiln pack` writes runs.
// The runtime (runtime/cpu/Executable.h) allocates each package's arena
// once; parameters start from the package's initializers. Batches are
// copied into the data inputs' buffers, converted to their element types.
// No MLIR: the kernels come from the KernelLoader it is given.
//
//===----------------------------------------------------------------------===//

#include "tools/kiln/lib/Diagnostics.h"
#include "tools/kiln/lib/Flags.h"
#include "tools/kiln/lib/StepSignature.h"

#include "runtime/package/PackageData.h"
#include "tools/kiln/lib/TrainBackend.h"

#include "runtime/Initializers.h"
#include "runtime/checkpoint/Sharded.h"
#include "runtime/dist/Communicator.h"
#include "runtime/cpu/Executable.h"
#include "runtime/package/Package.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <cstring>
#include <map>

namespace kiln::cli {
namespace {

using runtime::PkgDType;


// A loaded package, its executable and where its data goes.
struct Step : StepSignature {
  std::unique_ptr<runtime::cpu::Executable> exec;

  const runtime::LoadedPackage &package() const { return exec->package(); }

  // Fills in the data inputs, the loss and the step counter.
  bool describe(llvm::StringRef path, llvm::raw_ostream &errs,
                llvm::StringRef command) {
    const runtime::LoadedPackage &pkg = package();
    StepSignature::describe(pkg);
    if (loss < 0) {
      printError(errs, command,
                 path.str() + ": expected an output with role loss, found none");
      return false;
    }
    if (pkg.outputs[loss].shape.size() != 0) {
      printError(errs, command, path.str() + ": expected a scalar loss");
      return false;
    }
    return true;
  }

  bool feed(const runtime::Batch &batch, llvm::raw_ostream &errs,
            llvm::StringRef command) {
    return copyBatch(
        package(), batch,
        [&](size_t input) -> runtime::StatusOr<void *> { return exec->input(input); },
        errs, command);
  }

  double output(int index) const {
    const runtime::SignatureEntry &e = package().outputs[index];
    return runtime::readElement(exec->output(index), e.dtype, 0);
  }
};

class CpuBackend : public TrainBackend {
public:
  ~CpuBackend() override {
    if (!tempDir_.empty())
      llvm::sys::fs::remove_directories(tempDir_);
  }

  const char *name() const override { return "cpu"; }
  int64_t batch() const override { return batch_; }
  const std::vector<runtime::TensorSpec> &dataSpecs() const override {
    return specs_;
  }
  const std::vector<runtime::TensorSpec> &evalSpecs() const override {
    return evalSpecs_;
  }
  bool hasEval() const override { return eval_.exec != nullptr; }
  bool evalHasPredictions() const override { return eval_.predictions >= 0; }
  const std::vector<StateEntry> &state() const override { return state_; }

  runtime::TensorValues readState(size_t entry) const override {
    const runtime::SignatureEntry &e = train_.package().inputs[stateInputs_[entry]];
    return runtime::readValues(train_.exec->input(stateInputs_[entry]), e.dtype,
                               runtime::elementCount(e.shape));
  }

  bool writeState(size_t entry, const runtime::TensorValues &values,
                  std::string &error) override {
    const runtime::SignatureEntry &e = train_.package().inputs[stateInputs_[entry]];
    void *data = train_.exec->input(stateInputs_[entry]);
    if (!valuesFit(e, values, error))
      return false;
    runtime::writeValues(data, e.dtype, values);
    // The step reads the parameter's copies, not the parameter.
    for (size_t copy : runtime::pkgParameterCopiesOf(train_.package(),
                                                     stateInputs_[entry]))
      runtime::pkgFillParameterCopy(train_.package(), copy, data,
                                    train_.exec->input(copy));
    evalStale_ = true;
    return true;
  }

  const std::vector<runtime::ShardLayout> &shards() const override {
    return train_.package().metadata.shards;
  }

  bool setEvalParameter(const std::string &name,
                        const runtime::TensorValues &values,
                        std::string &error) override {
    int input = eval_.exec ? eval_.exec->findInput(name) : -1;
    if (input < 0) {
      error = "is not an input of the eval step";
      return false;
    }
    const runtime::SignatureEntry &e = eval_.package().inputs[input];
    if (!valuesFit(e, values, error))
      return false;
    runtime::writeValues(eval_.exec->input(input), e.dtype, values);
    return true;
  }

  void setStepCounter(int64_t step) override {
    if (train_.stepCounter < 0)
      return;
    const runtime::SignatureEntry &e = train_.package().inputs[train_.stepCounter];
    runtime::writeElement(train_.exec->input(train_.stepCounter), e.dtype, 0,
                          static_cast<double>(step));
  }

  bool step(const runtime::Batch &batch, double &loss,
            llvm::raw_ostream &errs) override {
    if (!train_.feed(batch, errs, command_))
      return false;
    runtime::Status s = train_.exec->run();
    if (!s.isOk()) {
      printError(errs, command_, "step: " + s.message());
      return false;
    }
    loss = train_.output(train_.loss);
    evalStale_ = true;
    return true;
  }

  bool setProfiling(bool on, std::string &error) override {
    train_.exec->setProfiling(on);
    return true;
  }
  std::chrono::steady_clock::time_point profileStepStart() const override {
    return train_.exec->profileStepStart();
  }
  std::vector<ThunkTime> profile() const override {
    return train_.exec->thunkTimes();
  }

  bool evaluate(const runtime::Batch &batch, EvalOutput &out,
                llvm::raw_ostream &errs) override {
    if (evalStale_ && !eval_.exec->sharedArena()) {
      // The eval step's parameters are the trained ones, by name (read in
      // place where it runs in the training step's memory).
      for (auto [evalInput, trainInput] : evalParameters_) {
        const runtime::PackageBuffer &b =
            train_.package().buffers[train_.package().inputs[trainInput].buffer];
        std::memcpy(eval_.exec->input(evalInput),
                    train_.exec->input(trainInput), b.size);
      }
      evalStale_ = false;
    }
    if (!eval_.feed(batch, errs, command_))
      return false;
    runtime::Status s = eval_.exec->run();
    if (!s.isOk()) {
      printError(errs, command_, "eval: " + s.message());
      return false;
    }
    out.loss = eval_.output(eval_.loss);
    out.predictions.clear();
    if (eval_.predictions >= 0) {
      const runtime::SignatureEntry &e =
          eval_.package().outputs[eval_.predictions];
      const void *data = eval_.exec->output(eval_.predictions);
      for (int64_t i = 0; i < runtime::elementCount(e.shape); ++i)
        out.predictions.push_back(
            static_cast<int32_t>(runtime::readElement(data, e.dtype, i)));
    }
    return true;
  }

  bool init(CpuPackageOptions options, llvm::StringRef command,
            llvm::raw_ostream &errs);

private:
  bool initShards(int rank, int worldSize, llvm::raw_ostream &errs);
  // |bytes|: the package in memory, else null (read from |path|);
  // messages name it |name| (the model or package the user gave). With
  // |train|, the package is its eval step: its parameters are matched to
  // the training step's (evalParameters_), and it runs in the training
  // step's memory, reading them in place, where it can.
  bool load(const std::string &path, const std::string &name,
            const std::string *bytes, int threads, Step &step,
            llvm::raw_ostream &errs,
            runtime::dist::Communicator *communicator = nullptr,
            Step *train = nullptr);

  std::string command_;
  std::string tempDir_;
  std::unique_ptr<runtime::cpu::KernelLoader> loader_;
  Step train_, eval_;
  std::vector<runtime::TensorSpec> specs_, evalSpecs_;
  int64_t batch_ = 0;
  std::vector<StateEntry> state_;
  std::vector<size_t> stateInputs_;
  std::vector<std::pair<size_t, size_t>> evalParameters_; // eval <- train
  bool evalStale_ = true;
};

bool CpuBackend::load(const std::string &path, const std::string &name,
                      const std::string *bytes, int threads, Step &step,
                      llvm::raw_ostream &errs,
                      runtime::dist::Communicator *communicator, Step *train) {
  runtime::StatusOr<runtime::LoadedPackage> pkg =
      bytes ? runtime::loadPackageFromBytes(
                  reinterpret_cast<const uint8_t *>(bytes->data()), bytes->size())
            : runtime::loadPackage(path);
  if (!pkg.isOk()) {
    printError(errs, command_, pkg.status().message());
    return false;
  }
  if (pkg->target.kind != runtime::TargetKind::Cpu) {
    printError(errs, command_,
               name + ": the package targets CUDA: expected a CPU package "
                      "(compile it with --target=cpu)");
    return false;
  }
  runtime::cpu::ExecutableOptions execOptions;
  execOptions.threads = threads;
  execOptions.communicator = communicator;
  std::string why;
  if (train && !bindEvalInputs(train->package(), pkg.value(), evalParameters_,
                               execOptions.boundInputs, why, command_, errs))
    return false;
  if (train && why.empty())
    execOptions.shareMemoryWith = train->exec.get();
  else if (train)
    errs << command_ << ": note: " << name
         << " runs in memory of its own, with a copy of the parameters: " << why
         << "\n";
  runtime::StatusOr<std::unique_ptr<runtime::cpu::Executable>> exec =
      runtime::cpu::Executable::create(std::move(pkg.value()), *loader_,
                                       execOptions);
  if (!exec.isOk()) {
    printError(errs, command_, name + ": " + exec.status().message());
    return false;
  }
  step.exec = std::move(exec.value());
  runtime::Status init = step.exec->initialize();
  if (!init.isOk()) {
    printError(errs, command_, name + ": " + init.message());
    return false;
  }
  return step.describe(name, errs, command_);
}

bool CpuBackend::init(CpuPackageOptions options, llvm::StringRef command,
                      llvm::raw_ostream &errs) {
  command_ = command.str();
  tempDir_ = std::move(options.tempDir);
  loader_ = std::move(options.loader);
  // Only the training step has collectives; eval runs on one rank.
  if (!load(options.trainPath, options.input,
            options.trainBytes.empty() ? nullptr : &options.trainBytes,
            options.threads, train_, errs, options.communicator))
    return false;
  if (!dataSpecsOf(train_.data, options.input, command_, specs_, batch_, errs))
    return false;
  const runtime::LoadedPackage &pkg = train_.package();
  collectState(pkg, state_, stateInputs_);
  if (!pkg.metadata.shards.empty() &&
      !initShards(options.communicator ? options.communicator->rank() : 0,
                  options.communicator ? options.communicator->worldSize() : 1,
                  errs))
    return false;
  if (options.evalPath.empty())
    return true;

  if (!load(options.evalPath, options.input + " (its eval step)",
            options.evalBytes.empty() ? nullptr : &options.evalBytes,
            options.threads, eval_, errs, nullptr, &train_))
    return false;
  int64_t evalBatch = 0;
  if (!dataSpecsOf(eval_.data, options.input, command_, evalSpecs_, evalBatch,
                   errs))
    return false;
  findEvalPredictions(eval_.package(), eval_);
  return true;
}

bool CpuBackend::initShards(int rank, int worldSize, llvm::raw_ostream &errs) {
  const runtime::LoadedPackage &pkg = train_.package();
  return initShardInputs(
      pkg, rank, worldSize,
      [&](size_t input) {
        const runtime::SignatureEntry &e = pkg.inputs[input];
        return runtime::readValues(train_.exec->input(input), e.dtype,
                                   runtime::elementCount(e.shape));
      },
      [&](size_t input, const runtime::TensorValues &values, std::string &) {
        runtime::writeValues(train_.exec->input(input), pkg.inputs[input].dtype,
                             values);
        return true;
      },
      command_, errs);
}

} // namespace

std::unique_ptr<TrainBackend>
createCpuPackageBackend(CpuPackageOptions options, llvm::StringRef command,
                        llvm::raw_ostream &errs) {
  auto backend = std::make_unique<CpuBackend>();
  if (!backend->init(std::move(options), command, errs))
    return nullptr;
  return backend;
}

} // namespace kiln::cli
