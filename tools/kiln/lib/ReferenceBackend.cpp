//===- ReferenceBackend.cpp - `kiln train --backend=reference` ------------===//
//
// The training step (kiln-autodiff, kiln-apply-optimizer, the same pipeline
// as `kiln compile`) run on the reference interpreter: slow, but the
// definition of what every backend must compute, and so the tool for
// debugging one. Parameters start from their #kiln.init, optimizer state and
// the step from zeros; after each step every result marked kiln.updates
// replaces the argument it names. The eval model is the same file's forward
// graph, compiled without optimization so its kiln.softmax_cross_entropy
// (and so its logits) is still there to find.
//
//===----------------------------------------------------------------------===//

#include "tools/kiln/lib/Diagnostics.h"
#include "tools/kiln/lib/Flags.h"
#include "tools/kiln/lib/ModuleLoader.h"
#include "tools/kiln/lib/ReferenceStep.h"
#include "tools/kiln/lib/TrainBackend.h"

#include "ir/Interpreter.h"

#include "mlir/IR/MLIRContext.h"

#include <map>

using namespace mlir;

namespace kiln::cli {


namespace {

// The step's data arguments (inputs, then labels).
std::vector<unsigned> dataArgumentIndices(const std::vector<ArgumentInfo> &info) {
  std::vector<unsigned> out;
  for (Role role : {Role::input, Role::label})
    for (const ArgumentInfo &arg : info)
      if (arg.role == role)
        out.push_back(arg.index);
  return out;
}

std::vector<DataArgument> describeData(const std::vector<ArgumentInfo> &info,
                                       const std::map<std::string, int64_t> &classes) {
  std::vector<DataArgument> out;
  for (unsigned index : dataArgumentIndices(info)) {
    const ArgumentInfo &arg = info[index];
    DataArgument d;
    d.name = arg.name;
    d.shape.assign(arg.type.getShape().begin(), arg.type.getShape().end());
    mlir::Type element = arg.type.getElementType();
    d.type = element.isF64()           ? runtime::ElementType::f64
             : isa<FloatType>(element) ? runtime::ElementType::f32
                                       : runtime::ElementType::i32;
    if (d.type == runtime::ElementType::i32) {
      auto it = classes.find(arg.name);
      d.indexLimit = it != classes.end() ? it->second : 0;
    }
    out.push_back(std::move(d));
  }
  return out;
}

// Copies a batch into the step's argument values.
void feedBatch(const runtime::Batch &batch, const std::vector<unsigned> &args,
               const std::vector<ArgumentInfo> &info,
               llvm::SmallVectorImpl<HostTensor> &values) {
  for (size_t t = 0; t < batch.tensors.size() && t < args.size(); ++t) {
    const runtime::BatchTensor &src = batch.tensors[t];
    HostTensor &dst = values[args[t]];
    if (dst.size() == 0)
      dst = initialValue(info[args[t]]);
    for (int64_t i = 0; i < src.elementCount(); ++i)
      dst[i] = src.element(i);
    dst.roundAll();
  }
}

class ReferenceBackend : public TrainBackend {
public:
  const char *name() const override { return "reference"; }
  int64_t batch() const override { return batch_; }
  const std::vector<runtime::TensorSpec> &dataSpecs() const override {
    return specs_;
  }
  const std::vector<runtime::TensorSpec> &evalSpecs() const override {
    return evalSpecs_;
  }
  bool hasEval() const override { return static_cast<bool>(evalModule_); }
  bool evalHasPredictions() const override {
    return predictionsIndex_.has_value();
  }
  const std::vector<StateEntry> &state() const override { return state_; }

  runtime::TensorValues readState(size_t entry) const override {
    const HostTensor &t = values_[stateArgs_[entry]];
    if (t.dtype() == DType::f64)
      return runtime::TensorValues(t.values());
    return runtime::TensorValues(
        std::vector<float>(t.values().begin(), t.values().end()));
  }

  bool writeState(size_t entry, const runtime::TensorValues &values,
                  std::string &error) override {
    HostTensor &dst = values_[stateArgs_[entry]];
    if (values.size() != dst.size()) {
      error = "holds " + std::to_string(values.size()) + " values: expected " +
              std::to_string(dst.size());
      return false;
    }
    for (int64_t i = 0; i < values.size(); ++i)
      dst[i] = values[i];
    dst.roundAll();
    // The step reads the parameter's copies, not the parameter.
    for (const ArgumentInfo &arg : argInfo_)
      if (arg.copyOf == stateArgs_[entry])
        values_[arg.index] = parameterCopyValue(arg, dst);
    return true;
  }

  void setStepCounter(int64_t step) override {
    if (stepArg_)
      values_[*stepArg_][0] = static_cast<double>(step);
  }

  bool step(const runtime::Batch &batch, double &loss,
            llvm::raw_ostream &) override {
    feedBatch(batch, dataArgs_, argInfo_, values_);
    FailureOr<SmallVector<HostTensor>> results = interpreter_.run(step_, values_);
    if (failed(results))
      return false;
    loss = (*results)[lossIndex_][0];
    for (const ResultInfo &r : resultInfo_)
      if (r.updates)
        values_[*r.updates] = std::move((*results)[r.index]);
    return true;
  }

  bool evaluate(const runtime::Batch &batch, EvalOutput &out,
                llvm::raw_ostream &errs) override {
    if (!evalFunc_) {
      printError(errs, command_, "eval: the backend has no eval model");
      return false;
    }
    // The eval model's parameters are the trained ones, by name.
    std::map<std::string, unsigned> byName;
    for (const ArgumentInfo &a : argInfo_)
      byName[a.name] = a.index;
    for (const ArgumentInfo &a : evalArgInfo_) {
      auto it = byName.find(a.name);
      if (it != byName.end() && a.role != Role::input && a.role != Role::label)
        evalValues_[a.index] = values_[it->second];
    }
    feedBatch(batch, evalDataArgs_, evalArgInfo_, evalValues_);
    FailureOr<SmallVector<HostTensor>> results =
        interpreter_.run(evalFunc_, evalValues_);
    if (failed(results))
      return false;
    out.loss = (*results)[evalLossIndex_][0];
    out.predictions.clear();
    if (predictionsIndex_)
      for (double v : (*results)[*predictionsIndex_].values())
        out.predictions.push_back(static_cast<int32_t>(v));
    return true;
  }

  bool init(const BackendOptions &options, llvm::StringRef command,
            llvm::raw_ostream &errs);

private:
  void exposePredictions();

  std::string command_;
  DialectRegistry registry_;
  std::unique_ptr<MLIRContext> context_;
  std::unique_ptr<DiagnosticPrinter> diagnostics_;
  OwningOpRef<ModuleOp> module_;
  func::FuncOp step_;
  std::vector<ArgumentInfo> argInfo_;
  std::vector<ResultInfo> resultInfo_;
  std::vector<unsigned> dataArgs_;
  std::vector<runtime::TensorSpec> specs_;
  int64_t batch_ = 0;
  unsigned lossIndex_ = 0;
  std::optional<unsigned> stepArg_;
  std::vector<StateEntry> state_;
  std::vector<unsigned> stateArgs_;
  llvm::SmallVector<HostTensor> values_;
  Interpreter interpreter_;

  OwningOpRef<ModuleOp> evalModule_;
  func::FuncOp evalFunc_;
  std::vector<ArgumentInfo> evalArgInfo_;
  std::vector<unsigned> evalDataArgs_;
  std::vector<runtime::TensorSpec> evalSpecs_;
  llvm::SmallVector<HostTensor> evalValues_;
  unsigned evalLossIndex_ = 0;
  std::optional<unsigned> predictionsIndex_;
};

// Appends the predictions of the loss's kiln.softmax_cross_entropy (the
// loss may be a reduction of it) to the eval model's results.
void ReferenceBackend::exposePredictions() {
  predictionsIndex_ = exposeCrossEntropyPredictions(evalFunc_, evalLossIndex_);
}

bool ReferenceBackend::init(const BackendOptions &options,
                            llvm::StringRef command, llvm::raw_ostream &errs) {
  command_ = command.str();
  registerKilnDialects(registry_);
  context_ = std::make_unique<MLIRContext>(registry_);
  diagnostics_ = std::make_unique<DiagnosticPrinter>(context_.get(), errs);
  diagnostics_->setShowRemarks(false);
  module_ = loadModule(options.input, context_.get(), *diagnostics_);
  if (!module_)
    return false;
  if (options.wantEval)
    evalModule_ = OwningOpRef<ModuleOp>(cast<ModuleOp>((*module_)->clone()));
  std::map<std::string, int64_t> classes = labelRanges(*module_);
  if (failed(runCompilePipeline(*module_, options.pipeline)))
    return false;
  step_ = findModelFunction(*module_);
  if (!step_ || failed(checkInterpreterMemory(step_)))
    return false;
  argInfo_ = describeArguments(step_);
  resultInfo_ = describeResults(step_);
  dataArgs_ = dataArgumentIndices(argInfo_);
  if (!dataSpecsOf(describeData(argInfo_, classes), options.input, command,
                   specs_, batch_, errs))
    return false;
  for (const ResultInfo &r : resultInfo_)
    if (r.role == Role::loss)
      lossIndex_ = r.index;
  for (const ArgumentInfo &arg : argInfo_) {
    values_.push_back(initialValue(arg));
    // ZeRO on the one rank the reference runs: a shard argument holds its
    // whole bucket, its parameters' first values one after another.
    if (auto shard =
            step_.getArgAttrOfType<DictionaryAttr>(arg.index, "kiln.shard"))
      if (auto params = shard.getAs<ArrayAttr>("params"))
        for (Attribute a : params) {
          auto d = dyn_cast<DictionaryAttr>(a);
          auto shape = d ? d.getAs<DenseI64ArrayAttr>("shape") : nullptr;
          auto offset = d ? d.getAs<IntegerAttr>("offset") : nullptr;
          if (!shape || !offset)
            continue;
          ArgumentInfo param;
          param.type = RankedTensorType::get(shape.asArrayRef(),
                                             arg.type.getElementType());
          param.init = d.getAs<InitializerAttr>("init");
          HostTensor first = initialValue(param);
          for (size_t i = 0; i < first.values().size(); ++i)
            if (offset.getInt() + static_cast<int64_t>(i) <
                static_cast<int64_t>(values_.back().values().size()))
              values_.back()[offset.getInt() + i] = first[i];
        }
    if (arg.role == Role::step)
      stepArg_ = arg.index;
    if (arg.role == Role::parameter || arg.role == Role::model_state ||
        arg.role == Role::optimizer_state) {
      StateEntry e;
      e.name = arg.name;
      e.parameter = arg.role != Role::optimizer_state;
      e.trained = arg.role == Role::parameter;
      e.shape.assign(arg.type.getShape().begin(), arg.type.getShape().end());
      state_.push_back(std::move(e));
      stateArgs_.push_back(arg.index);
    }
  }
  fillParameterCopies(argInfo_, values_);

  if (!evalModule_)
    return true;
  PipelineOptions forward = options.pipeline;
  forward.trainingStep = false;
  forward.optimize = false;
  forward.dumpDir.clear();
  if (failed(runCompilePipeline(*evalModule_, forward)))
    return false;
  evalFunc_ = findModelFunction(*evalModule_);
  if (!evalFunc_)
    return false;
  evalArgInfo_ = describeArguments(evalFunc_);
  for (const ResultInfo &r : describeResults(evalFunc_))
    if (r.role == Role::loss)
      evalLossIndex_ = r.index;
  exposePredictions();
  evalDataArgs_ = dataArgumentIndices(evalArgInfo_);
  int64_t evalBatch = 0;
  if (!dataSpecsOf(describeData(evalArgInfo_, classes), options.input,
                   command, evalSpecs_, evalBatch, errs))
    return false;
  for (const ArgumentInfo &arg : evalArgInfo_)
    evalValues_.push_back(initialValue(arg));
  return true;
}

} // namespace

std::unique_ptr<TrainBackend> createReferenceBackend(const BackendOptions &options,
                                                     llvm::StringRef command,
                                                     llvm::raw_ostream &errs) {
  auto backend = std::make_unique<ReferenceBackend>();
  if (!backend->init(options, command, errs))
    return nullptr;
  return backend;
}

} // namespace kiln::cli
