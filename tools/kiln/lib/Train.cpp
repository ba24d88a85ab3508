//===- Train.cpp - `kiln train` -------------------------------------------===//
//
// `kiln train FILE --backend=reference --data=SPEC ...` compiles the
// training step (kiln-autodiff, kiln-apply-optimizer) and runs it on the
// reference interpreter: slow, but the definition of what every backend
// must compute, and so the tool for debugging one. Parameters start from
// their #kiln.init, optimizer state and the step from zeros; after each
// step every result marked kiln.updates replaces the argument it names.
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
#include "runtime/data/FashionMnist.h"

#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/Format.h"

#include <algorithm>
#include <numeric>
#include <random>

using namespace mlir;

namespace kiln::cli {
namespace {

constexpr llvm::StringLiteral kCommand = "kiln train";

struct TrainOptions {
  std::string input;
  std::string backend = "reference";
  std::string data = "fashion-mnist";
  int64_t maxSteps = 20;
  int64_t subset = 0; // 0: the whole training split
  int64_t logEvery = 1;
  uint64_t seed = 0;
  PipelineOptions pipeline;
};

// Where the training samples come from: Fashion-MNIST or random data.
struct DataSource {
  bool synthetic = true;
  runtime::ImageDataset images;
  std::vector<int64_t> order; // sample order of the current epoch
  int64_t position = 0;
  int64_t epoch = 0;
};

void reshuffle(DataSource &data, uint64_t seed) {
  std::mt19937_64 rng(seed * 1000003ULL + static_cast<uint64_t>(data.epoch));
  for (int64_t i = static_cast<int64_t>(data.order.size()) - 1; i > 0; --i)
    std::swap(data.order[i], data.order[rng() % static_cast<uint64_t>(i + 1)]);
}

} // namespace

int runTrain(llvm::ArrayRef<std::string> args, llvm::raw_ostream &outs,
             llvm::raw_ostream &errs) {
  TrainOptions options;
  std::string backend, data, maxSteps, subset, logEvery, seed;
  OptimizerFlags optimizerFlags;
  FlagParser parser(
      kCommand.str(), "FILE --backend=reference [--data=SPEC] [options]",
      "Compiles the training step of a model (graph file or .mlir) and trains\n"
      "it. --backend=reference runs every step on the reference interpreter\n"
      "(slow; for checking a backend). The input argument gets one sample per\n"
      "row of its first dimension, the label argument the classes.");
  parser.addPositional("FILE", &options.input, "a graph file (.kiln) or MLIR text (.mlir)");
  parser.addValue("backend", &backend, "NAME", "reference (cpu and cuda: not supported yet)");
  parser.addValue("data", &data, "SPEC",
                  "fashion-mnist, fashion-mnist:DIR or synthetic (default fashion-mnist)");
  parser.addValue("max-steps", &maxSteps, "N", "training steps (default 20)");
  parser.addValue("train-subset", &subset, "N",
                  "use only the first N training samples (default: all)");
  parser.addValue("log-every", &logEvery, "N", "print the loss every N steps (default 1)");
  parser.addValue("seed", &seed, "S", "shuffling and synthetic-data seed (default 0)");
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
      !integer(subset, "train-subset", 1, options.subset) ||
      !integer(logEvery, "log-every", 1, options.logEvery) ||
      !integer(seed, "seed", 0, seedValue))
    return kExitError;
  options.seed = static_cast<uint64_t>(seedValue);
  if (!parseOptimizerFlags(kCommand, optimizerFlags, options.pipeline.optimizer,
                           errs))
    return kExitError;

  DataSource source;
  if (!data.empty())
    options.data = data;
  llvm::StringRef spec = options.data;
  if (spec == "synthetic") {
    source.synthetic = true;
  } else if (spec == "fashion-mnist" || spec.starts_with("fashion-mnist:")) {
    std::string dir = spec == "fashion-mnist"
                          ? std::string(runtime::kFashionMnistDir)
                          : spec.drop_front(strlen("fashion-mnist:")).str();
    runtime::StatusOr<runtime::ImageDataset> loaded =
        runtime::loadFashionMnist(dir, "train");
    if (!loaded.isOk()) {
      printError(errs, kCommand, "--data=" + options.data + ": " +
                                     loaded.status().message());
      return kExitError;
    }
    source.synthetic = false;
    source.images = std::move(loaded.value());
    int64_t count = source.images.count;
    if (options.subset > 0)
      count = std::min(count, options.subset);
    source.order.resize(count);
    std::iota(source.order.begin(), source.order.end(), 0);
    reshuffle(source, options.seed);
  } else {
    printError(errs, kCommand,
               "--data=" + options.data +
                   ": expected fashion-mnist, fashion-mnist:DIR or synthetic");
    return kExitError;
  }

  DialectRegistry registry;
  registerKilnDialects(registry);
  MLIRContext context(registry);
  DiagnosticPrinter diagnostics(&context, errs);
  OwningOpRef<ModuleOp> module = loadModule(options.input, &context, diagnostics);
  // The same pipeline as `kiln compile` builds the training step.
  if (!module || failed(runCompilePipeline(*module, options.pipeline)))
    return kExitError;
  func::FuncOp step = findModelFunction(*module);
  if (!step)
    return kExitError;

  std::vector<ArgumentInfo> argInfo = describeArguments(step);
  std::vector<ResultInfo> resultInfo = describeResults(step);
  llvm::SmallVector<HostTensor> values;
  std::optional<unsigned> inputArg, labelArg;
  for (const ArgumentInfo &arg : argInfo) {
    values.push_back(initialValue(arg));
    if (arg.role == Role::input) {
      if (inputArg) {
        printError(errs, kCommand,
                   "the model has more than one input argument ('" +
                       argInfo[*inputArg].name + "' and '" + arg.name +
                       "'); image data sets feed exactly one");
        return kExitError;
      }
      inputArg = arg.index;
    } else if (arg.role == Role::label) {
      labelArg = arg.index;
    }
  }
  if (!inputArg) {
    printError(errs, kCommand, options.input + ": the model has no input argument");
    return kExitError;
  }
  const ArgumentInfo &input = argInfo[*inputArg];
  int64_t batch = input.type.getRank() > 0 ? input.type.getDimSize(0) : 1;
  int64_t perSample = input.type.getNumElements() / std::max<int64_t>(batch, 1);
  if (!source.synthetic) {
    if (perSample != source.images.imageSize()) {
      printError(errs, kCommand,
                 options.input + ": input '" + input.name + "' holds " +
                     std::to_string(perSample) + " values per sample, but " +
                     options.data + " images have " +
                     std::to_string(source.images.imageSize()) + " (" +
                     std::to_string(source.images.rows) + "x" +
                     std::to_string(source.images.cols) + ")");
      return kExitError;
    }
    if (!labelArg || argInfo[*labelArg].type.getNumElements() != batch) {
      printError(errs, kCommand,
                 options.input + ": an image data set needs a label argument of " +
                     std::to_string(batch) + " class indices");
      return kExitError;
    }
  }
  unsigned lossIndex = 0;
  for (const ResultInfo &r : resultInfo)
    if (r.role == Role::loss)
      lossIndex = r.index;

  outs << "kiln train: backend reference, " << options.data << ", batch " << batch
       << ", " << options.maxSteps << " steps\n";
  std::mt19937_64 rng(options.seed);
  Interpreter interpreter;
  std::vector<double> losses;
  for (int64_t s = 0; s < options.maxSteps; ++s) {
    if (source.synthetic) {
      values[*inputArg] = randomData(step, input, rng);
      if (labelArg)
        values[*labelArg] = randomData(step, argInfo[*labelArg], rng);
    } else {
      HostTensor &x = values[*inputArg];
      HostTensor &y = values[*labelArg];
      for (int64_t b = 0; b < batch; ++b) {
        if (source.position == static_cast<int64_t>(source.order.size())) {
          source.position = 0;
          ++source.epoch;
          reshuffle(source, options.seed);
        }
        int64_t sample = source.order[source.position++];
        const uint8_t *pixels =
            source.images.pixels.data() + sample * source.images.imageSize();
        for (int64_t j = 0; j < perSample; ++j)
          x[b * perSample + j] = pixels[j] / 255.0;
        y[b] = source.images.labels[sample];
      }
      x.roundAll();
    }
    FailureOr<SmallVector<HostTensor>> results = interpreter.run(step, values);
    if (failed(results))
      return kExitError;
    double loss = (*results)[lossIndex][0];
    if (!std::isfinite(loss)) {
      printError(errs, kCommand,
                 "step " + std::to_string(s) + ": the loss is not finite");
      return kExitError;
    }
    losses.push_back(loss);
    for (const ResultInfo &r : resultInfo)
      if (r.updates)
        values[*r.updates] = std::move((*results)[r.index]);
    if ((s + 1) % options.logEvery == 0 || s + 1 == options.maxSteps)
      outs << "step " << (s + 1) << " loss " << llvm::format("%.6f", loss) << "\n";
  }
  int64_t k = std::max<int64_t>(1, static_cast<int64_t>(losses.size()) / 4);
  double first = std::accumulate(losses.begin(), losses.begin() + k, 0.0) / k;
  double last = std::accumulate(losses.end() - k, losses.end(), 0.0) / k;
  outs << "kiln train: mean loss of the first " << k << " steps "
       << llvm::format("%.6f", first) << ", of the last " << k << " steps "
       << llvm::format("%.6f", last) << "\n";
  return kExitOk;
}

} // namespace kiln::cli
