//===- Train.cpp - `kiln train` -------------------------------------------===//
//
// `kiln train FILE --backend=reference --data=SPEC ...` compiles the
// training step (kiln-autodiff, kiln-apply-optimizer) and runs it on the
// reference interpreter: slow, but the definition of what every backend
// must compute, and so the tool for debugging one. Parameters start from
// their #kiln.init, optimizer state and the step from zeros; after each
// step every result marked kiln.updates replaces the argument it names.
//
// Data comes from runtime/data (--data=SPEC through openDataset, batches
// sharded and shuffled per epoch by DistributedSampler, rank 0 of 1 for
// now, and assembled ahead by the Prefetcher). After each epoch (and at the
// end) an eval pass runs the forward model, compiled separately, on
// --eval-data; when the loss comes from kiln.softmax_cross_entropy its
// logits are returned too, for accuracy. Checkpoints (runtime/checkpoint)
// hold parameters, optimizer state, step, seed, epoch and data position,
// so --resume continues exactly where a run stopped.
//
//===----------------------------------------------------------------------===//

#include "tools/kiln/lib/Diagnostics.h"
#include "tools/kiln/lib/Driver.h"
#include "tools/kiln/lib/Flags.h"
#include "tools/kiln/lib/ModuleLoader.h"
#include "tools/kiln/lib/OptimizerFlags.h"
#include "tools/kiln/lib/ReferenceStep.h"

#include "ir/Interpreter.h"
#include "passes/Pipelines.h"
#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/data/DataSpec.h"
#include "runtime/data/Sampler.h"

#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <numeric>

using namespace mlir;

namespace kiln::cli {
namespace {

constexpr llvm::StringLiteral kCommand = "kiln train";

struct TrainOptions {
  std::string input;
  std::string data = "fashion-mnist";
  std::string evalData; // "" : the default, "none": no eval
  int64_t maxSteps = 0; // 0: not given
  int64_t epochs = 0;   // 0: not given
  int64_t batchSize = 0;
  int64_t subset = 0; // 0: the whole training split
  int64_t evalSubset = 0;
  int64_t logEvery = 1;
  int64_t checkpointEvery = 0;
  uint64_t seed = 0;
  bool noShuffle = false;
  bool resume = false;
  std::string checkpointDir;
  std::string metricsFile;
  PipelineOptions pipeline;
};

// The step's data arguments (inputs, then labels) as the dataset sees them.
struct DataArgs {
  std::vector<unsigned> args; // argument index per dataset tensor
  std::vector<runtime::TensorSpec> specs;
};

DataArgs dataArguments(func::FuncOp func, const std::vector<ArgumentInfo> &info) {
  DataArgs out;
  for (Role role : {Role::input, Role::label})
    for (const ArgumentInfo &arg : info) {
      if (arg.role != role)
        continue;
      runtime::TensorSpec spec;
      spec.name = arg.name;
      spec.type = isa<FloatType>(arg.type.getElementType())
                      ? runtime::ElementType::f32
                      : runtime::ElementType::i32;
      for (int64_t d = 1; d < arg.type.getRank(); ++d)
        spec.shape.push_back(arg.type.getDimSize(d));
      if (spec.type == runtime::ElementType::i32)
        spec.classes = integerRange(func, arg.index);
      out.args.push_back(arg.index);
      out.specs.push_back(spec);
    }
  return out;
}

// Copies a batch into the step's argument values.
void feedBatch(const runtime::Batch &batch, const DataArgs &data,
               const std::vector<ArgumentInfo> &info,
               llvm::SmallVectorImpl<HostTensor> &values) {
  for (size_t t = 0; t < batch.tensors.size(); ++t) {
    const runtime::BatchTensor &src = batch.tensors[t];
    HostTensor &dst = values[data.args[t]];
    if (dst.size() == 0)
      dst = initialValue(info[data.args[t]]);
    if (src.type == runtime::ElementType::f32)
      for (size_t i = 0; i < src.f32.size(); ++i)
        dst[i] = src.f32[i];
    else
      for (size_t i = 0; i < src.i32.size(); ++i)
        dst[i] = src.i32[i];
    dst.roundAll();
  }
}

std::string jsonNumber(double v) {
  if (!std::isfinite(v))
    return "null";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

// The forward model for eval: its step function, and the index of the
// logits result (appended after the loss) when the loss is a
// kiln.softmax_cross_entropy.
struct EvalModel {
  OwningOpRef<ModuleOp> module;
  func::FuncOp func;
  std::vector<ArgumentInfo> args;
  unsigned lossIndex = 0;
  std::optional<unsigned> logitsIndex;
};

void exposeLogits(EvalModel &model) {
  func::FuncOp func = model.func;
  auto ret = cast<func::ReturnOp>(func.getBody().front().getTerminator());
  Value loss = ret.getOperand(model.lossIndex);
  Operation *def = loss.getDefiningOp();
  // The loss may be a reduction of the per-sample cross entropy.
  Operation *ce = nullptr;
  for (int depth = 0; def && depth < 4 && !ce; ++depth) {
    if (def->getName().getStringRef() == "kiln.softmax_cross_entropy") {
      ce = def;
      break;
    }
    if (def->getNumOperands() == 0)
      break;
    def = def->getOperand(0).getDefiningOp();
  }
  if (!ce)
    return;
  Value logits = ce->getOperand(0);
  auto type = dyn_cast<RankedTensorType>(logits.getType());
  if (!type || type.getRank() != 2)
    return;
  unsigned index = func.getNumResults();
  func.insertResult(index, type, DictionaryAttr::get(func.getContext()));
  ret->insertOperands(index, logits);
  model.logitsIndex = index;
}

struct EvalResult {
  double loss = NAN;
  double accuracy = NAN; // NaN when the model exposes no logits
  int64_t samples = 0;
};

} // namespace

int runTrain(llvm::ArrayRef<std::string> args, llvm::raw_ostream &outs,
             llvm::raw_ostream &errs) {
  TrainOptions options;
  std::string backend, data, evalData, maxSteps, epochs, batchSize, subset,
      evalSubset, logEvery, seed, checkpointEvery;
  OptimizerFlags optimizerFlags;
  FlagParser parser(
      kCommand.str(), "FILE --backend=reference [--data=SPEC] [options]",
      "Compiles the training step of a model (graph file or .mlir) and trains\n"
      "it. --backend=reference runs every step on the reference interpreter\n"
      "(slow; for checking a backend). The input arguments get one sample per\n"
      "row of their first dimension, the label argument the classes.");
  parser.addPositional("FILE", &options.input, "a graph file (.kiln) or MLIR text (.mlir)");
  parser.addValue("backend", &backend, "NAME", "reference (cpu and cuda: not supported yet)");
  parser.addValue("data", &data, "SPEC",
                  "fashion-mnist[:DIR], npy:DIR, tokens:FILE or synthetic "
                  "(default fashion-mnist)");
  parser.addValue("eval-data", &evalData, "SPEC",
                  "eval data after each epoch (default: fashion-mnist's test "
                  "split for fashion-mnist, none otherwise; none: no eval)");
  parser.addValue("epochs", &epochs, "N", "passes over the training data");
  parser.addValue("max-steps", &maxSteps, "N",
                  "stop after N steps in all (default 20 without --epochs)");
  parser.addValue("batch-size", &batchSize, "B",
                  "must equal the compiled step's batch dimension");
  parser.addValue("train-subset", &subset, "N",
                  "use only the first N training samples (default: all)");
  parser.addValue("eval-subset", &evalSubset, "N",
                  "evaluate only the first N eval samples (default: all)");
  parser.addSwitch("no-shuffle", &options.noShuffle, "keep the data in file order");
  parser.addValue("log-every", &logEvery, "N", "print the loss every N steps (default 1)");
  parser.addValue("seed", &seed, "S", "shuffling and synthetic-data seed (default 0)");
  parser.addValue("checkpoint-dir", &options.checkpointDir, "DIR",
                  "write step-N.safetensors and a 'latest' pointer here");
  parser.addValue("checkpoint-every", &checkpointEvery, "N",
                  "checkpoint every N steps (and always at the end)");
  parser.addSwitch("resume", &options.resume,
                   "continue from the checkpoint --checkpoint-dir's 'latest' names");
  parser.addValue("metrics-file", &options.metricsFile, "F.jsonl",
                  "append one JSON object per eval");
  addOptimizerFlags(parser, optimizerFlags);
  switch (parser.parse(args, outs, errs)) {
  case ParseResult::help:
    return kExitOk;
  case ParseResult::usageError:
    return kExitUsage;
  case ParseResult::ok:
    break;
  }
  if (!backend.empty() && backend != "reference") {
    printError(errs, kCommand,
               "--backend=" + backend +
                   ": not supported yet (only the reference interpreter runs "
                   "training so far; use --backend=reference)");
    return kExitError;
  }
  if (backend.empty()) {
    printError(errs, kCommand,
               "--backend is required: only --backend=reference exists so far");
    return kExitUsage;
  }
  auto integer = [&](const std::string &text, llvm::StringRef flag, int64_t min,
                     int64_t &out) {
    if (text.empty())
      return true;
    std::optional<int64_t> v = parseInteger(kCommand, flag, text, min, errs);
    if (v)
      out = *v;
    return v.has_value();
  };
  int64_t seedValue = 0;
  if (!integer(maxSteps, "max-steps", 1, options.maxSteps) ||
      !integer(epochs, "epochs", 1, options.epochs) ||
      !integer(batchSize, "batch-size", 1, options.batchSize) ||
      !integer(subset, "train-subset", 1, options.subset) ||
      !integer(evalSubset, "eval-subset", 1, options.evalSubset) ||
      !integer(logEvery, "log-every", 1, options.logEvery) ||
      !integer(checkpointEvery, "checkpoint-every", 1, options.checkpointEvery) ||
      !integer(seed, "seed", 0, seedValue))
    return kExitError;
  options.seed = static_cast<uint64_t>(seedValue);
  if (options.maxSteps == 0 && options.epochs == 0)
    options.maxSteps = 20;
  if ((options.resume || options.checkpointEvery) && options.checkpointDir.empty()) {
    printError(errs, kCommand,
               std::string(options.resume ? "--resume" : "--checkpoint-every") +
                   " needs --checkpoint-dir=DIR");
    return kExitUsage;
  }
  if (!parseOptimizerFlags(kCommand, optimizerFlags, options.pipeline.optimizer,
                           errs))
    return kExitError;
  if (!data.empty())
    options.data = data;
  runtime::StatusOr<runtime::DataSpec> spec = runtime::parseDataSpec(options.data);
  if (!spec.isOk()) {
    printError(errs, kCommand, spec.status().message());
    return kExitError;
  }
  std::optional<runtime::DataSpec> evalSpec;
  if (evalData.empty()) {
    if (spec.value().kind == runtime::DataSpec::Kind::fashionMnist)
      evalSpec = spec.value();
  } else if (evalData != "none") {
    runtime::StatusOr<runtime::DataSpec> parsed = runtime::parseDataSpec(evalData);
    if (!parsed.isOk()) {
      printError(errs, kCommand,
                 "--eval-data: " + parsed.status().message());
      return kExitError;
    }
    evalSpec = parsed.value();
  }

  // Resume state, read before anything is compiled so a bad checkpoint
  // fails fast.
  std::optional<runtime::TrainingState> resumed;
  if (options.resume) {
    std::string latestPath = options.checkpointDir + "/latest";
    std::ifstream latest(latestPath);
    std::string name;
    if (!latest || !std::getline(latest, name) || name.empty()) {
      printError(errs, kCommand,
                 "--resume: " + latestPath +
                     ": expected a file naming the latest checkpoint");
      return kExitError;
    }
    runtime::StatusOr<runtime::TrainingState> state =
        runtime::loadCheckpoint(options.checkpointDir + "/" + name);
    if (!state.isOk()) {
      printError(errs, kCommand, "--resume: " + state.status().message());
      return kExitError;
    }
    resumed = std::move(state.value());
    if (!seed.empty() && options.seed != resumed->seed) {
      printError(errs, kCommand,
                 "--seed=" + seed + ": the checkpoint " + name +
                     " was trained with seed " + std::to_string(resumed->seed) +
                     "; resume without --seed or with --seed=" +
                     std::to_string(resumed->seed));
      return kExitError;
    }
    options.seed = resumed->seed;
  }

  DialectRegistry registry;
  registerKilnDialects(registry);
  MLIRContext context(registry);
  DiagnosticPrinter diagnostics(&context, errs);
  OwningOpRef<ModuleOp> module = loadModule(options.input, &context, diagnostics);
  // The eval model is the same file's forward graph, compiled on its own.
  EvalModel evalModel;
  if (module && evalSpec)
    evalModel.module = OwningOpRef<ModuleOp>(cast<ModuleOp>((*module)->clone()));
  // The same pipeline as `kiln compile` builds the training step.
  if (!module || failed(runCompilePipeline(*module, options.pipeline)))
    return kExitError;
  func::FuncOp step = findModelFunction(*module);
  if (!step)
    return kExitError;

  std::vector<ArgumentInfo> argInfo = describeArguments(step);
  std::vector<ResultInfo> resultInfo = describeResults(step);
  DataArgs dataArgs = dataArguments(step, argInfo);
  if (dataArgs.args.empty()) {
    printError(errs, kCommand, options.input + ": the model has no input argument");
    return kExitError;
  }
  const ArgumentInfo &first = argInfo[dataArgs.args.front()];
  if (first.type.getRank() == 0) {
    printError(errs, kCommand,
               options.input + ": input '" + first.name +
                   "' is a scalar: expected a batch dimension first");
    return kExitError;
  }
  int64_t batch = first.type.getDimSize(0);
  for (unsigned a : dataArgs.args)
    if (argInfo[a].type.getRank() == 0 || argInfo[a].type.getDimSize(0) != batch) {
      printError(errs, kCommand,
                 options.input + ": data argument '" + argInfo[a].name +
                     "' does not have the batch dimension " +
                     std::to_string(batch) + " of '" + first.name + "' first");
      return kExitError;
    }
  if (options.batchSize && options.batchSize != batch) {
    printError(errs, kCommand,
               "--batch-size=" + std::to_string(options.batchSize) + ": " +
                   options.input + " was built for batch " +
                   std::to_string(batch) + " (input '" + first.name +
                   "' is " + std::to_string(batch) +
                   " x ...); rebuild the model or pass --batch-size=" +
                   std::to_string(batch));
    return kExitError;
  }

  runtime::DataOptions dataOptions;
  dataOptions.seed = options.seed;
  dataOptions.syntheticSize = std::max<int64_t>(1024, batch);
  runtime::StatusOr<std::unique_ptr<runtime::Dataset>> dataset =
      runtime::openDataset(spec.value(), dataArgs.specs, dataOptions);
  if (!dataset.isOk()) {
    printError(errs, kCommand,
               "--data=" + options.data + ": " + dataset.status().message());
    return kExitError;
  }
  int64_t trainSize = dataset.value()->size();
  if (options.subset > 0)
    trainSize = std::min(trainSize, options.subset);
  runtime::SamplerOptions samplerOptions;
  samplerOptions.shuffle = !options.noShuffle;
  samplerOptions.seed = options.seed;
  runtime::StatusOr<runtime::DistributedSampler> sampler =
      runtime::DistributedSampler::create(trainSize, samplerOptions);
  if (!sampler.isOk()) {
    printError(errs, kCommand, "--data=" + options.data + ": " +
                                   sampler.status().message());
    return kExitError;
  }
  int64_t stepsPerEpoch =
      runtime::batchCount(sampler.value().numSamples(), batch, /*dropPartial=*/true);
  if (stepsPerEpoch == 0) {
    printError(errs, kCommand,
               "--data=" + options.data + ": " + std::to_string(trainSize) +
                   " samples make no full batch of " + std::to_string(batch));
    return kExitError;
  }
  int64_t totalSteps = options.maxSteps;
  if (options.epochs)
    totalSteps = options.maxSteps ? std::min(options.maxSteps,
                                             options.epochs * stepsPerEpoch)
                                  : options.epochs * stepsPerEpoch;

  // The eval data and forward model.
  std::unique_ptr<runtime::Dataset> evalDataset;
  Interpreter interpreter;
  if (evalSpec) {
    PipelineOptions forward = options.pipeline;
    forward.trainingStep = false;
    forward.dumpDir.clear();
    // Unoptimized, so the loss's kiln.softmax_cross_entropy (and its
    // logits) is still there to find.
    forward.optimize = false;
    if (failed(runCompilePipeline(*evalModel.module, forward)))
      return kExitError;
    evalModel.func = findModelFunction(*evalModel.module);
    if (!evalModel.func)
      return kExitError;
    evalModel.args = describeArguments(evalModel.func);
    for (const ResultInfo &r : describeResults(evalModel.func))
      if (r.role == Role::loss)
        evalModel.lossIndex = r.index;
    exposeLogits(evalModel);
    runtime::DataOptions evalOptions = dataOptions;
    evalOptions.split = "test";
    DataArgs evalArgs = dataArguments(evalModel.func, evalModel.args);
    runtime::StatusOr<std::unique_ptr<runtime::Dataset>> opened =
        runtime::openDataset(*evalSpec, evalArgs.specs, evalOptions);
    if (!opened.isOk()) {
      printError(errs, kCommand, "--eval-data: " + opened.status().message());
      return kExitError;
    }
    evalDataset = std::move(opened.value());
  }
  // Runs the forward model over the first eval samples, in order.
  auto evaluate = [&](const llvm::SmallVectorImpl<HostTensor> &trained)
      -> std::optional<EvalResult> {
    EvalResult result;
    int64_t n = evalDataset->size();
    if (options.evalSubset)
      n = std::min(n, options.evalSubset);
    std::vector<int64_t> indices(n);
    std::iota(indices.begin(), indices.end(), 0);
    llvm::SmallVector<HostTensor> values;
    std::map<std::string, const HostTensor *> byName;
    for (const ArgumentInfo &a : argInfo)
      byName[a.name] = &trained[a.index];
    for (const ArgumentInfo &a : evalModel.args) {
      auto it = byName.find(a.name);
      values.push_back(it != byName.end() ? *it->second : initialValue(a));
    }
    DataArgs evalArgs = dataArguments(evalModel.func, evalModel.args);
    runtime::Prefetcher batches(*evalDataset, indices, batch, /*dropPartial=*/true);
    double lossSum = 0;
    int64_t correct = 0, batchesSeen = 0;
    bool counted = false; // logits of one row per label were compared
    std::optional<unsigned> labelArg;
    for (const ArgumentInfo &a : evalModel.args)
      if (a.role == Role::label)
        labelArg = a.index;
    runtime::Batch b;
    while (true) {
      runtime::StatusOr<bool> more = batches.next(b);
      if (!more.isOk()) {
        printError(errs, kCommand, "--eval-data: " + more.status().message());
        return std::nullopt;
      }
      if (!more.value())
        break;
      feedBatch(b, evalArgs, evalModel.args, values);
      FailureOr<SmallVector<HostTensor>> out = interpreter.run(evalModel.func, values);
      if (failed(out))
        return std::nullopt;
      lossSum += (*out)[evalModel.lossIndex][0];
      ++batchesSeen;
      if (evalModel.logitsIndex && labelArg &&
          (*out)[*evalModel.logitsIndex].dim(0) == values[*labelArg].size()) {
        const HostTensor &logits = (*out)[*evalModel.logitsIndex];
        counted = true;
        int64_t classes = logits.dim(1);
        for (int64_t r = 0; r < logits.dim(0); ++r) {
          int64_t best = 0;
          for (int64_t c = 1; c < classes; ++c)
            if (logits[r * classes + c] > logits[r * classes + best])
              best = c;
          correct += best == static_cast<int64_t>(values[*labelArg][r]);
        }
      }
    }
    result.samples = batchesSeen * batch;
    if (batchesSeen) {
      result.loss = lossSum / batchesSeen;
      if (counted)
        result.accuracy = static_cast<double>(correct) / result.samples;
    }
    return result;
  };

  // Initial values, or the resumed state.
  llvm::SmallVector<HostTensor> values;
  std::map<std::string, unsigned> parameterArg;
  std::optional<unsigned> stepArg;
  for (const ArgumentInfo &arg : argInfo) {
    values.push_back(initialValue(arg));
    if (arg.role == Role::parameter)
      parameterArg[arg.name] = arg.index;
    if (arg.role == Role::step)
      stepArg = arg.index;
  }
  // Optimizer state "P.SLOT" of parameter P is slot SLOT of P; anything
  // else is slot "state" under its own name.
  auto stateKey = [&](const std::string &name) -> std::pair<std::string, std::string> {
    for (const auto &[param, index] : parameterArg)
      if (name.size() > param.size() + 1 && name.compare(0, param.size(), param) == 0 &&
          name[param.size()] == '.')
        return {name.substr(param.size() + 1), param};
    return {"state", name};
  };
  int64_t stepsDone = 0, epoch = 0, position = 0;
  if (resumed) {
    auto restore = [&](const runtime::NamedTensor &t, unsigned arg,
                       const std::string &what) {
      HostTensor &dst = values[arg];
      if (static_cast<int64_t>(t.values.size()) != dst.size()) {
        printError(errs, kCommand,
                   "--resume: " + what + " holds " + std::to_string(t.values.size()) +
                       " values: expected " + std::to_string(dst.size()) +
                       " for argument '" + argInfo[arg].name + "'");
        return false;
      }
      for (size_t i = 0; i < t.values.size(); ++i)
        dst[i] = t.values[i];
      return true;
    };
    std::map<std::string, const runtime::NamedTensor *> params;
    for (const runtime::NamedTensor &t : resumed->parameters)
      params[t.name] = &t;
    for (const ArgumentInfo &arg : argInfo) {
      if (arg.role == Role::parameter) {
        auto it = params.find(arg.name);
        if (it == params.end()) {
          printError(errs, kCommand, "--resume: the checkpoint has no parameter '" +
                                         arg.name + "'");
          return kExitError;
        }
        if (!restore(*it->second, arg.index, "parameter '" + arg.name + "'"))
          return kExitError;
      } else if (arg.role == Role::optimizer_state) {
        auto [slot, name] = stateKey(arg.name);
        const runtime::NamedTensor *found = nullptr;
        auto s = resumed->optimizer.find(slot);
        if (s != resumed->optimizer.end())
          for (const runtime::NamedTensor &t : s->second)
            if (t.name == name)
              found = &t;
        if (!found) {
          printError(errs, kCommand, "--resume: the checkpoint has no optimizer state '" +
                                         slot + "' of '" + name + "'");
          return kExitError;
        }
        if (!restore(*found, arg.index, "optimizer state '" + arg.name + "'"))
          return kExitError;
      }
    }
    stepsDone = resumed->step;
    epoch = resumed->epoch;
    position = resumed->position;
    if (stepArg)
      values[*stepArg][0] = static_cast<double>(stepsDone);
  }

  auto writeCheckpoint = [&]() -> bool {
    runtime::TrainingState state;
    for (const ArgumentInfo &arg : argInfo) {
      if (arg.role != Role::parameter && arg.role != Role::optimizer_state)
        continue;
      runtime::NamedTensor t;
      t.shape.assign(arg.type.getShape().begin(), arg.type.getShape().end());
      t.values.assign(values[arg.index].values().begin(),
                      values[arg.index].values().end());
      if (arg.role == Role::parameter) {
        t.name = arg.name;
        state.parameters.push_back(std::move(t));
      } else {
        auto [slot, name] = stateKey(arg.name);
        t.name = name;
        state.optimizer[slot].push_back(std::move(t));
      }
    }
    state.step = stepsDone;
    state.seed = options.seed;
    state.epoch = epoch;
    state.position = position;
    std::error_code ec = llvm::sys::fs::create_directories(options.checkpointDir);
    if (ec) {
      printError(errs, kCommand, "--checkpoint-dir=" + options.checkpointDir +
                                     ": cannot create it: " + ec.message());
      return false;
    }
    std::string name = "step-" + std::to_string(stepsDone) + ".safetensors";
    runtime::Status saved =
        runtime::saveCheckpoint(options.checkpointDir + "/" + name, state);
    if (!saved.isOk()) {
      printError(errs, kCommand, "checkpoint at step " + std::to_string(stepsDone) +
                                     ": " + saved.message() +
                                     " (earlier checkpoints are kept)");
      return false;
    }
    // The pointer is replaced atomically: a temp file, then rename.
    std::string latest = options.checkpointDir + "/latest";
    std::string temp = latest + ".tmp";
    {
      std::error_code wec;
      llvm::raw_fd_ostream out(temp, wec);
      if (!wec) {
        out << name << "\n";
        out.close();
        wec = out.error();
      }
      if (wec || llvm::sys::fs::rename(temp, latest)) {
        printError(errs, kCommand, latest + ": cannot write the pointer to " + name +
                                       (wec ? ": " + wec.message() : std::string()));
        return false;
      }
    }
    outs << "kiln train: checkpoint " << options.checkpointDir << "/" << name << "\n";
    return true;
  };

  std::unique_ptr<llvm::raw_fd_ostream> metrics;
  if (!options.metricsFile.empty()) {
    std::error_code ec;
    metrics = std::make_unique<llvm::raw_fd_ostream>(
        options.metricsFile, ec,
        options.resume ? llvm::sys::fs::OF_Append : llvm::sys::fs::OF_None);
    if (ec) {
      printError(errs, kCommand, "--metrics-file=" + options.metricsFile + ": " +
                                     ec.message());
      return kExitError;
    }
  }

  unsigned lossIndex = 0;
  for (const ResultInfo &r : resultInfo)
    if (r.role == Role::loss)
      lossIndex = r.index;

  outs << "kiln train: backend reference, " << options.data << ", batch " << batch
       << ", " << totalSteps << " steps";
  if (resumed)
    outs << " (resumed at step " << stepsDone << ", epoch " << epoch << ", batch "
         << position << ")";
  outs << "\n";
  if (evalSpec && !evalModel.logitsIndex)
    outs << "kiln train: eval reports the loss only (the loss does not come "
            "from kiln.softmax_cross_entropy, so there are no logits)\n";

  using Clock = std::chrono::steady_clock;
  Clock::time_point since = Clock::now();
  int64_t samplesSince = 0;
  std::vector<double> losses, epochLosses;
  // After an epoch (or the run): eval, a line and a metrics record.
  auto report = [&](int64_t epochNumber) -> bool {
    double seconds = std::chrono::duration<double>(Clock::now() - since).count();
    double rate = seconds > 0 ? samplesSince / seconds : 0;
    double trainLoss = epochLosses.empty()
                           ? NAN
                           : std::accumulate(epochLosses.begin(), epochLosses.end(), 0.0) /
                                 epochLosses.size();
    std::optional<EvalResult> eval;
    if (evalDataset) {
      eval = evaluate(values);
      if (!eval)
        return false;
      outs << "eval epoch " << epochNumber << " step " << stepsDone << " loss "
           << llvm::format("%.6f", eval->loss);
      if (std::isfinite(eval->accuracy))
        outs << " accuracy " << llvm::format("%.4f", eval->accuracy);
      outs << " (" << eval->samples << " samples)\n";
    }
    if (metrics) {
      *metrics << "{\"step\": " << stepsDone << ", \"epoch\": " << epochNumber
               << ", \"loss\": " << jsonNumber(eval ? eval->loss : trainLoss)
               << ", \"test_accuracy\": "
               << jsonNumber(eval ? eval->accuracy : NAN)
               << ", \"train_loss\": " << jsonNumber(trainLoss)
               << ", \"eval\": " << (eval ? "true" : "false")
               << ", \"samples_per_second\": " << jsonNumber(rate) << "}\n";
      metrics->flush();
    }
    epochLosses.clear();
    samplesSince = 0;
    since = Clock::now();
    return true;
  };

  // On a terminal a progress bar; plain lines otherwise (and in logs).
  bool progress = outs.is_displayed();
  Clock::time_point runStart = Clock::now();
  int64_t firstStep = stepsDone;
  while (stepsDone < totalSteps) {
    runtime::Prefetcher batches(*dataset.value(), sampler.value().indices(epoch),
                                batch, /*dropPartial=*/true, 2, position);
    runtime::Batch b;
    bool epochDone = false;
    while (stepsDone < totalSteps) {
      runtime::StatusOr<bool> more = batches.next(b);
      if (!more.isOk()) {
        printError(errs, kCommand, "--data=" + options.data + ": " +
                                       more.status().message());
        return kExitError;
      }
      if (!more.value()) { // the epoch ran out of full batches
        if (!report(epoch + 1))
          return kExitError;
        ++epoch;
        position = 0;
        epochDone = true;
        break;
      }
      feedBatch(b, dataArgs, argInfo, values);
      FailureOr<SmallVector<HostTensor>> results = interpreter.run(step, values);
      if (failed(results))
        return kExitError;
      double loss = (*results)[lossIndex][0];
      if (!std::isfinite(loss)) {
        printError(errs, kCommand,
                   "step " + std::to_string(stepsDone + 1) + ": the loss is not finite");
        return kExitError;
      }
      losses.push_back(loss);
      epochLosses.push_back(loss);
      for (const ResultInfo &r : resultInfo)
        if (r.updates)
          values[*r.updates] = std::move((*results)[r.index]);
      ++stepsDone;
      ++position;
      samplesSince += batch;
      if (position == stepsPerEpoch) {
        epochDone = true;
      }
      if (progress) {
        // A one-line progress bar, redrawn in place; cleared before any
        // other line.
        double seconds = std::chrono::duration<double>(Clock::now() - runStart).count();
        double rate = seconds > 0 ? (stepsDone - firstStep) * batch / seconds : 0;
        double eta = rate > 0 ? (totalSteps - stepsDone) * batch / rate : 0;
        int filled = static_cast<int>(20 * stepsDone / totalSteps);
        outs << "\r[" << std::string(filled, '#') << std::string(20 - filled, '.')
             << "] step " << stepsDone << "/" << totalSteps << " loss "
             << llvm::format("%.4f", loss) << ", "
             << llvm::format("%.0f", rate) << " samples/s, ETA "
             << llvm::format("%.0f", eta) << "s\033[K";
        outs.flush();
      }
      if (stepsDone % options.logEvery == 0 || stepsDone == totalSteps) {
        if (progress)
          outs << "\r\033[K";
        outs << "step " << stepsDone << " loss " << llvm::format("%.6f", loss) << "\n";
      }
      if (epochDone) {
        if (!report(epoch + 1))
          return kExitError;
        ++epoch;
        position = 0;
      }
      bool atEnd = stepsDone == totalSteps;
      if (!options.checkpointDir.empty() &&
          (atEnd || (options.checkpointEvery &&
                     stepsDone % options.checkpointEvery == 0)))
        if (!writeCheckpoint())
          return kExitError;
      if (epochDone)
        break;
    }
    if (!epochDone)
      break;
  }
  // A run that stops inside an epoch still reports where it got to.
  if (position != 0 && !epochLosses.empty())
    if (!report(epoch + 1))
      return kExitError;
  if (losses.empty())
    return kExitOk;
  int64_t k = std::max<int64_t>(1, static_cast<int64_t>(losses.size()) / 4);
  double firstMean = std::accumulate(losses.begin(), losses.begin() + k, 0.0) / k;
  double lastMean = std::accumulate(losses.end() - k, losses.end(), 0.0) / k;
  outs << "kiln train: mean loss of the first " << k << " steps "
       << llvm::format("%.6f", firstMean) << ", of the last " << k << " steps "
       << llvm::format("%.6f", lastMean) << "\n";
  return kExitOk;
}

} // namespace kiln::cli
