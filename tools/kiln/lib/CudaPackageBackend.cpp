//===- CudaPackageBackend.cpp - a training step package on a GPU ----------===//
//
// The TrainBackend of a CUDA step package (and its eval package), run by
// runtime/cuda/CudaExecutable.h: what `kiln train --device=cuda` runs once
// CudaBackend.cpp has compiled the model for the device's architecture (or
// as it is, for a .kpkg), and what a trainer `kiln pack --target=cuda`
// writes runs. No MLIR: the CUDA libraries are dlopened by the runtime.
//
//===----------------------------------------------------------------------===//

#include "tools/kiln/lib/CudaBackend.h"

#include "tools/kiln/lib/Flags.h"
#include "tools/kiln/lib/StepSignature.h"

#include "runtime/Units.h"
#include "runtime/package/PackageData.h"

#include "runtime/cuda/CudaApi.h"
#include "runtime/cuda/CudaDevice.h"
#include "runtime/cuda/CudaExecutable.h"
#include "runtime/dist/Communicator.h"
#include "runtime/package/Package.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <map>

namespace kiln::cli {
namespace {

using runtime::PkgDType;


// One loaded package on the GPU and where its data goes.
struct GpuStep : StepSignature {
  std::unique_ptr<runtime::cuda::CudaExecutable> exec;

  const runtime::LoadedPackage &package() const { return exec->package(); }

  bool describe(const std::string &path, llvm::raw_ostream &errs,
                llvm::StringRef command) {
    const runtime::LoadedPackage &pkg = package();
    StepSignature::describe(pkg);
    if (loss < 0 || !pkg.outputs[loss].shape.empty()) {
      printError(errs, command,
                 path + ": expected a scalar output with role loss");
      return false;
    }
    return true;
  }

  // Converts |batch| into the pinned staging buffers and queues the copies.
  bool feed(const runtime::Batch &batch, llvm::raw_ostream &errs,
            llvm::StringRef command) {
    if (!copyBatch(
            package(), batch,
            [&](size_t input) { return exec->hostInput(input); }, errs, command))
      return false;
    runtime::Status s = exec->submitInputs();
    if (!s.isOk()) {
      printError(errs, command, s.message());
      return false;
    }
    return true;
  }

  // Output |index| (all of it) on the host, as doubles.
  bool read(int index, std::vector<double> &out, std::string &error) const {
    const runtime::SignatureEntry &e = package().outputs[index];
    std::vector<uint8_t> bytes(package().buffers[e.buffer].size);
    runtime::Status s = exec->readOutput(index, bytes.data());
    if (!s.isOk()) {
      error = s.message();
      return false;
    }
    int64_t n = runtime::elementCount(e.shape);
    out.resize(n);
    for (int64_t i = 0; i < n; ++i)
      out[i] = runtime::readElement(bytes.data(), e.dtype, i);
    return true;
  }
};

class CudaBackend : public TrainBackend {
public:
  ~CudaBackend() override {
    // The eval step runs in the training step's memory and on its stream.
    eval_.exec.reset();
    train_.exec.reset();
    if (!tempDir_.empty())
      llvm::sys::fs::remove_directories(tempDir_);
  }

  const char *name() const override { return "cuda"; }
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
    return readInput(stateInputs_[entry]);
  }

  bool writeState(size_t entry, const runtime::TensorValues &values,
                  std::string &error) override {
    std::vector<uint8_t> bytes;
    if (!writeInput(train_, stateInputs_[entry], values, error, &bytes))
      return false;
    runtime::Status s;
    // The step reads the parameter's copies, not the parameter.
    for (size_t copy : runtime::pkgParameterCopiesOf(train_.package(),
                                                     stateInputs_[entry])) {
      if (!s.isOk())
        break;
      const runtime::SignatureEntry &c = train_.package().inputs[copy];
      std::vector<uint8_t> copyBytes(train_.package().buffers[c.buffer].size);
      runtime::pkgFillParameterCopy(train_.package(), copy, bytes.data(),
                                    copyBytes.data());
      s = train_.exec->writeBuffer(c.buffer, copyBytes.data());
    }
    if (!s.isOk()) {
      error = s.message();
      return false;
    }
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
    return writeInput(eval_, input, values, error);
  }

  void setStepCounter(int64_t step) override {
    if (train_.stepCounter < 0)
      return;
    const runtime::SignatureEntry &e = train_.package().inputs[train_.stepCounter];
    std::vector<uint8_t> bytes(train_.package().buffers[e.buffer].size);
    runtime::writeElement(bytes.data(), e.dtype, 0, double(step));
    train_.exec->writeBuffer(e.buffer, bytes.data());
  }

  bool step(const runtime::Batch &batch, double &loss,
            llvm::raw_ostream &errs) override {
    if (!train_.feed(batch, errs, command_))
      return false;
    runtime::Status s = train_.exec->run();
    if (s.isOk() && train_.exec->profiling())
      s = train_.exec->collectProfile(); // this step's events
    std::vector<double> value;
    std::string error;
    if (!s.isOk() || !train_.read(train_.loss, value, error)) {
      printError(errs, command_, "step: " + (s.isOk() ? error : s.message()));
      return false;
    }
    loss = value[0];
    evalStale_ = true;
    return true;
  }

  bool setProfiling(bool on, std::string &error) override {
    train_.exec->setProfiling(on);
    if (on && !train_.exec->profiling()) {
      error = "cannot create the CUDA events that time the thunks";
      return false;
    }
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
      // place where it runs in the training step's memory), copied on the
      // device.
      for (auto [evalInput, trainInput] : evalParameters_) {
        uint32_t from = train_.package().inputs[trainInput].buffer;
        uint32_t to = eval_.package().inputs[evalInput].buffer;
        runtime::Status s = eval_.exec->copyBuffer(to, *train_.exec, from);
        if (!s.isOk()) {
          printError(errs, command_, "eval: " + s.message());
          return false;
        }
      }
      evalStale_ = false;
    }
    if (!eval_.feed(batch, errs, command_))
      return false;
    runtime::Status s = eval_.exec->run();
    std::vector<double> value;
    std::string error;
    if (!s.isOk() || !eval_.read(eval_.loss, value, error)) {
      printError(errs, command_, "eval: " + (s.isOk() ? error : s.message()));
      return false;
    }
    out.loss = value[0];
    out.predictions.clear();
    if (eval_.predictions >= 0) {
      if (!eval_.read(eval_.predictions, value, error)) {
        printError(errs, command_, "eval: " + error);
        return false;
      }
      for (double v : value)
        out.predictions.push_back(static_cast<int32_t>(v));
    }
    return true;
  }

  bool init(CudaPackageOptions options, const CudaBackendOptions &cuda,
            llvm::StringRef command, llvm::raw_ostream &outs,
            llvm::raw_ostream &errs);

private:
  // Training step input |input|'s values (zeros after a device error, which
  // the next step reports).
  runtime::TensorValues readInput(size_t input) const {
    const runtime::SignatureEntry &e = train_.package().inputs[input];
    std::vector<uint8_t> bytes(train_.package().buffers[e.buffer].size);
    int64_t n = runtime::elementCount(e.shape);
    if (!train_.exec->readBuffer(e.buffer, bytes.data()).isOk())
      return runtime::TensorValues::zeros(e.dtype == PkgDType::F64, n);
    return runtime::readValues(bytes.data(), e.dtype, n);
  }
  // Writes |values| (rounded to its dtype) into input |input| of |step|;
  // |written| (when given) receives the bytes written.
  static bool writeInput(GpuStep &step, size_t input,
                         const runtime::TensorValues &values,
                         std::string &error,
                         std::vector<uint8_t> *written = nullptr) {
    const runtime::LoadedPackage &pkg = step.package();
    const runtime::SignatureEntry &e = pkg.inputs[input];
    if (!valuesFit(e, values, error))
      return false;
    std::vector<uint8_t> bytes(pkg.buffers[e.buffer].size);
    runtime::writeValues(bytes.data(), e.dtype, values);
    runtime::Status s = step.exec->writeBuffer(e.buffer, bytes.data());
    if (written)
      *written = std::move(bytes);
    if (!s.isOk())
      error = s.message();
    return s.isOk();
  }

  // |bytes|: the package in memory, else null (read from |path|);
  // messages name it |name| (the model or package the user gave). With
  // |train|, the package is its eval step: its parameters are matched to
  // the training step's (evalParameters_), and it runs in the training
  // step's memory, reading them in place, where it can.
  bool load(const std::string &path, const std::string &name,
            const std::string *bytes, GpuStep &step, llvm::raw_ostream &errs,
            runtime::dist::Communicator *communicator,
            GpuStep *train = nullptr);

  std::string command_, tempDir_;
  std::unique_ptr<runtime::cuda::CudaApi> ownedApi_;
  runtime::cuda::CudaApi *api_ = nullptr;
  std::function<void(const runtime::LoadedPackage &)> loaded_;
  runtime::cuda::CudaOptions runOptions_;
  GpuStep train_, eval_;
  std::vector<runtime::TensorSpec> specs_, evalSpecs_;
  int64_t batch_ = 0;
  std::vector<StateEntry> state_;
  std::vector<size_t> stateInputs_;
  std::vector<std::pair<size_t, size_t>> evalParameters_;
  bool evalStale_ = true;
};

bool CudaBackend::load(const std::string &path, const std::string &name,
                       const std::string *bytes, GpuStep &step,
                       llvm::raw_ostream &errs,
                       runtime::dist::Communicator *communicator,
                       GpuStep *train) {
  runtime::StatusOr<runtime::LoadedPackage> pkg =
      bytes ? runtime::loadPackageFromBytes(
                  reinterpret_cast<const uint8_t *>(bytes->data()), bytes->size())
            : runtime::loadPackage(path);
  if (!pkg.isOk()) {
    printError(errs, command_, pkg.status().message());
    return false;
  }
  if (loaded_)
    loaded_(pkg.value());
  runtime::cuda::CudaOptions options = runOptions_;
  options.communicator = communicator;
  std::string why;
  if (train && !bindEvalInputs(train->package(), pkg.value(), evalParameters_,
                               options.boundInputs, why, command_, errs))
    return false;
  if (train && why.empty())
    options.shareMemoryWith = train->exec.get();
  else if (train)
    runOptions_.log(command_ + ": note: " + name +
                    " runs in memory of its own, with a copy of the "
                    "parameters: " +
                    why);
  runtime::StatusOr<std::unique_ptr<runtime::cuda::CudaExecutable>> exec =
      runtime::cuda::CudaExecutable::create(std::move(pkg.value()), *api_,
                                            options);
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

bool CudaBackend::init(CudaPackageOptions options,
                       const CudaBackendOptions &cuda, llvm::StringRef command,
                       llvm::raw_ostream &outs, llvm::raw_ostream &errs) {
  command_ = command.str();
  api_ = cuda.api;
  loaded_ = cuda.loaded;
  if (!api_) {
    runtime::StatusOr<std::unique_ptr<runtime::cuda::CudaApi>> api =
        runtime::cuda::loadCudaApi();
    if (!api.isOk()) {
      printError(errs, command_,
                 "--device=cuda:" + std::to_string(cuda.device) + ": " +
                     api.status().message() + " (use --device=cpu)");
      return false;
    }
    ownedApi_ = std::move(api.value());
    api_ = ownedApi_.get();
  }
  runtime::StatusOr<runtime::cuda::CudaDeviceInfo> device =
      api_->deviceInfo(cuda.device);
  if (!device.isOk()) {
    printError(errs, command_,
               "--device=cuda:" + std::to_string(cuda.device) + ": " +
                   device.status().message() + " (use --device=cpu)");
    return false;
  }
  runOptions_.device = cuda.device;
  runOptions_.graphs = cuda.graphs;
  runOptions_.autotune = cuda.autotune;
  runOptions_.programmaticLaunch = cuda.programmaticLaunch;
  runOptions_.allowTf32 = cuda.tf32;
  runOptions_.log = [&outs](const std::string &note) { outs << note << "\n"; };
  outs << command_ << ": backend cuda, device " << cuda.device << ": "
       << device->name << " (sm_" << device->smArch() << ", "
       << device->multiprocessors << " SMs)"
       << (cuda.tf32 ? ", f32 matmuls in TF32" : "") << "\n";

  if (options.compile &&
      !options.compile(device->smArch(), options.trainPath, options.evalPath,
                       tempDir_))
    return false;
  const std::string &trainPath = options.trainPath, &evalPath = options.evalPath;
  if (!load(trainPath, options.input,
            options.trainBytes.empty() ? nullptr : &options.trainBytes, train_,
            errs, options.communicator))
    return false;
  if (!dataSpecsOf(train_.data, options.input, command_, specs_, batch_, errs))
    return false;
  const runtime::LoadedPackage &pkg = train_.package();
  // What the step took on the device (runtime/cuda/CudaMemory.h).
  const runtime::cuda::CudaStepMemory &memory = train_.exec->memory();
  outs << command_ << ": device memory " << runtime::formatBytes(memory.total())
       << " (" << runtime::cuda::describeStepMemory(memory) << ")\n";
  // What nvidia-smi shows beside it: the device as cudaMemGetInfo sees it.
  if (auto used = train_.exec->deviceMemoryInUse(); used.isOk()) {
    auto [inUse, total] = used.value();
    outs << command_ << ": the device has " << runtime::formatBytes(inUse)
         << " in use of " << runtime::formatBytes(total);
    if (inUse > memory.total())
      outs << ", " << runtime::formatBytes(inUse - memory.total())
           << " of it outside the step (the CUDA context, the modules, "
              "cuBLASLt's and NCCL's state, other processes)";
    outs << "\n";
  }
  collectState(pkg, state_, stateInputs_);
  // ZeRO: each rank's shards start as its block of the bucket's first
  // values (StepSignature.h).
  runtime::dist::Communicator *comm = options.communicator;
  if (!pkg.metadata.shards.empty() &&
      !initShardInputs(
          pkg, comm ? comm->rank() : 0, comm ? comm->worldSize() : 1,
          [&](size_t input) { return readInput(input); },
          [&](size_t input, const runtime::TensorValues &values,
              std::string &error) {
            return writeInput(train_, input, values, error);
          },
          command_, errs))
    return false;
  if (evalPath.empty())
    return true;
  if (!load(evalPath, options.input + " (its eval step)",
            options.evalBytes.empty() ? nullptr : &options.evalBytes, eval_,
            errs, nullptr, &train_))
    return false;
  // The eval step runs in the training step's memory (SharedArena.h): what
  // it takes beyond it (its own memory, its workspaces but cuBLASLt's).
  const runtime::cuda::CudaStepMemory &evalMemory = eval_.exec->memory();
  outs << command_ << ": eval step's device memory "
       << runtime::formatBytes(evalMemory.total()) << " ("
       << runtime::cuda::describeStepMemory(evalMemory);
  if (const runtime::SharedArenaPlan *shared = eval_.exec->sharedArena())
    outs << "; it " << runtime::describeSharedArena(*shared, "training step");
  outs << ")\n";
  int64_t evalBatch = 0;
  if (!dataSpecsOf(eval_.data, options.input, command_, evalSpecs_, evalBatch,
                   errs))
    return false;
  findEvalPredictions(eval_.package(), eval_);
  return true;
}

} // namespace

std::unique_ptr<TrainBackend>
createCudaPackageBackend(CudaPackageOptions options,
                         const CudaBackendOptions &cudaOptions,
                         llvm::StringRef command, llvm::raw_ostream &outs,
                         llvm::raw_ostream &errs) {
  auto backend = std::make_unique<CudaBackend>();
  if (!backend->init(std::move(options), cudaOptions, command, outs, errs))
    return nullptr;
  return backend;
}

int cudaDeviceCount(std::string &reason, std::string &names) {
  runtime::StatusOr<runtime::cuda::CudaRuntimeInfo> info =
      runtime::cuda::discoverCudaDevices();
  if (!info.isOk()) {
    reason = "no CUDA device (" + info.status().message() + ")";
    return 0;
  }
  names = runtime::cuda::describeCudaDevices();
  return static_cast<int>(info->devices.size());
}

bool cudaDeviceUsable(int device, std::string &reason) {
  runtime::StatusOr<runtime::cuda::CudaRuntimeInfo> info =
      runtime::cuda::discoverCudaDevices();
  if (!info.isOk()) {
    reason = "no CUDA device (" + info.status().message() + ")";
    return false;
  }
  if (device >= int(info->devices.size())) {
    reason = "no CUDA device " + std::to_string(device) + " (" +
             runtime::cuda::describeCudaDevices() + ")";
    return false;
  }
  return true;
}

} // namespace kiln::cli
