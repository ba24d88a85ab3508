//===- Models.cpp - `kiln models`: write a model from the zoo -------------===//
//
// `kiln models NAME [--key=value ...] -o FILE` builds one of the zoo models
// (tools/kiln/lib/Zoo.h) and writes it: a graph file, or MLIR text when FILE
// ends in .mlir. `kiln models --help` lists every model's size flags;
// `kiln models NAME --help` only that model's. A size flag that belongs to
// another model is a usage error, never silently ignored.
//
//===----------------------------------------------------------------------===//

#include "tools/kiln/lib/Driver.h"

#include "tools/kiln/lib/Diagnostics.h"
#include "tools/kiln/lib/Flags.h"
#include "tools/kiln/lib/ModuleLoader.h"
#include "tools/kiln/lib/OptimizerFlags.h"
#include "tools/kiln/lib/Zoo.h"

#include "mlir/IR/MLIRContext.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/Format.h"

namespace kiln::cli {

namespace {

constexpr llvm::StringLiteral kCommand = "kiln models";

struct ModelInfo {
  llvm::StringLiteral name;
  llvm::StringLiteral summary;
  // The size flags this model takes (the common flags are always allowed).
  llvm::ArrayRef<llvm::StringLiteral> flags;
};

constexpr llvm::StringLiteral kMlpFlags[] = {"layers", "batch"};
constexpr llvm::StringLiteral kLeNetFlags[] = {"batch"};
constexpr llvm::StringLiteral kResNetFlags[] = {"blocks", "width", "batch"};
constexpr llvm::StringLiteral kGptFlags[] = {"layers", "hidden", "heads", "seq",
                                             "vocab",  "batch",  "dropout"};

const ModelInfo kModels[] = {
    {"mlp", "fully connected layers with ReLU, softmax cross-entropy",
     kMlpFlags},
    {"lenet5", "LeNet-5 for 1x28x28 images, 10 classes", kLeNetFlags},
    {"resnet", "ResNet (batch norm, residual blocks) for 1x28x28 images, 10 classes",
     kResNetFlags},
    {"gpt", "GPT-2 style decoder, causal attention, next-token loss",
     kGptFlags},
};

const ModelInfo *findModel(llvm::StringRef name) {
  for (const ModelInfo &m : kModels)
    if (m.name == name)
      return &m;
  return nullptr;
}

// Every flag's raw text; empty means "use the model's default".
struct RawFlags {
  std::string model, output, layers, batch, hidden, heads, seq, vocab, dropout,
      blocks, width;
  TrainingFlagText training;
};

// A parser for |model| (or for all models when null), storing into |raw|.
FlagParser makeParser(const ModelInfo *model, RawFlags &raw) {
  std::string description =
      "Writes a model of the built-in zoo with its loss and a training "
      "section.\nFILE ending in .mlir gets MLIR text; any other name gets a "
      "graph file.\n";
  if (!model) {
    description += "\nModels:\n";
    for (const ModelInfo &m : kModels)
      description += "  " + m.name.str() +
                     std::string(8 - std::min<size_t>(8, m.name.size()), ' ') +
                     " " + m.summary.str() + "\n";
  }
  FlagParser parser(kCommand.str(),
                    model ? (model->name + " [--key=value ...] -o FILE").str()
                          : "MODEL [--key=value ...] -o FILE",
                    description);
  parser.addPositional("MODEL", &raw.model, "mlp, lenet5, resnet or gpt");
  if (model)
    parser.setHelpCommand((kCommand + " " + model->name).str());
  parser.addValue("output", &raw.output, "FILE",
                  "where to write the model (.kiln graph file or .mlir text)",
                  'o');
  addTrainingSectionFlags(parser, raw.training);

  if (!model || model->name == "mlp") {
    parser.addGroup("mlp sizes");
    parser.addValue("layers", &raw.layers, "N,N,...",
                    "layer sizes, inputs first and classes last (default "
                    "784,512,256,10)");
    parser.addValue("batch", &raw.batch, "N", "batch size (default 128)");
  }
  if (!model || model->name == "lenet5") {
    parser.addGroup("lenet5 sizes");
    parser.addValue("batch", &raw.batch, "N", "batch size (default 128)");
  }
  if (!model || model->name == "resnet") {
    parser.addGroup("resnet sizes");
    parser.addValue("blocks", &raw.blocks, "N",
                    "basic blocks per stage (default 1: ResNet-8; 3: ResNet-20)");
    parser.addValue("width", &raw.width, "N",
                    "channels of the first stage, doubled at each of the "
                    "other two (default 16)");
    parser.addValue("batch", &raw.batch, "N", "batch size (default 128)");
  }
  if (!model || model->name == "gpt") {
    parser.addGroup("gpt sizes");
    parser.addValue("layers", &raw.layers, "N", "transformer blocks (default 4)");
    parser.addValue("hidden", &raw.hidden, "N", "model width (default 256)");
    parser.addValue("heads", &raw.heads, "N",
                    "attention heads, dividing --hidden (default 4)");
    parser.addValue("seq", &raw.seq, "N", "sequence length (default 128)");
    parser.addValue("vocab", &raw.vocab, "N", "vocabulary size (default 256)");
    parser.addValue("batch", &raw.batch, "N", "batch size (default 16)");
    parser.addValue("dropout", &raw.dropout, "P",
                    "dropout on the embeddings and each block's residual "
                    "branches, as GPT-2's 0.1 (default 0: none)");
  }
  parser.setEpilogue(
      "Parameters are named like PyTorch's state_dict keys (fc1.weight, "
      "blocks.0.attn.qkv.weight);\nmlp and lenet5 use PyTorch's default "
      "initialization, resnet torchvision's, gpt GPT-2's (normal 0.02).");
  return parser;
}


// Parses |text| into |out| when the flag was given.
bool setInteger(llvm::StringRef flag, const std::string &text, int64_t &out,
                llvm::raw_ostream &errs) {
  if (text.empty())
    return true;
  std::optional<int64_t> v = parseInteger(kCommand, flag, text, 1, errs);
  if (v)
    out = *v;
  return v.has_value();
}

// Builds the module for |model| from |raw|; null after printing an error.
mlir::OwningOpRef<mlir::ModuleOp> buildModel(const ModelInfo &model,
                                             const RawFlags &raw,
                                             mlir::MLIRContext *context,
                                             llvm::raw_ostream &errs) {
  TrainingOptions training;
  if (!parseTrainingSection(kCommand, raw.training, training, errs))
    return nullptr;
  auto reject = [&](const std::string &problem) {
    printError(errs, kCommand, problem);
    return nullptr;
  };

  if (model.name == "mlp") {
    MlpOptions options;
    options.training = training;
    if (!raw.layers.empty()) {
      auto layers = parseIntegerList(kCommand, "layers", raw.layers, 1, errs);
      if (!layers)
        return nullptr;
      options.layers = *layers;
    }
    if (!setInteger("batch", raw.batch, options.batch, errs))
      return nullptr;
    if (std::string problem = checkOptions(options); !problem.empty())
      return reject(problem);
    return buildMlp(context, options);
  }
  if (model.name == "lenet5") {
    LeNet5Options options;
    options.training = training;
    if (!setInteger("batch", raw.batch, options.batch, errs))
      return nullptr;
    if (std::string problem = checkOptions(options); !problem.empty())
      return reject(problem);
    return buildLeNet5(context, options);
  }
  if (model.name == "resnet") {
    ResNetOptions options;
    options.training = training;
    if (!setInteger("blocks", raw.blocks, options.blocks, errs) ||
        !setInteger("width", raw.width, options.width, errs) ||
        !setInteger("batch", raw.batch, options.batch, errs))
      return nullptr;
    if (std::string problem = checkOptions(options); !problem.empty())
      return reject(problem);
    return buildResNet(context, options);
  }
  GptOptions options;
  options.training = training;
  if (!setInteger("layers", raw.layers, options.layers, errs) ||
      !setInteger("hidden", raw.hidden, options.hidden, errs) ||
      !setInteger("heads", raw.heads, options.heads, errs) ||
      !setInteger("seq", raw.seq, options.seq, errs) ||
      !setInteger("vocab", raw.vocab, options.vocab, errs) ||
      !setInteger("batch", raw.batch, options.batch, errs))
    return nullptr;
  if (!raw.dropout.empty() && raw.dropout != "0") {
    std::optional<double> p = parsePositiveReal(kCommand, "dropout", raw.dropout, errs);
    if (!p)
      return nullptr;
    options.dropout = *p;
  }
  if (std::string problem = checkOptions(options); !problem.empty())
    return reject(problem);
  return buildGpt(context, options);
}

} // namespace

void addTrainingSectionFlags(FlagParser &parser, TrainingFlagText &text) {
  parser.addValue("optimizer", &text.optimizer, "NAME",
                  "sgd, momentum, adam or adamw (default adam)");
  parser.addValue("lr", &text.lr, "RATE", "learning rate (default 0.001)");
  parser.addValue("seed", &text.seed, "N",
                  "seed of the first parameter's initializer (default 0)");
}

bool parseTrainingSection(llvm::StringRef command, const TrainingFlagText &text,
                          TrainingOptions &training, llvm::raw_ostream &errs) {
  if (!text.optimizer.empty()) {
    std::optional<kiln::OptimizerKind> kind =
        parseOptimizerKind(command, text.optimizer, errs);
    if (!kind)
      return false;
    training.optimizer = *kind;
  }
  if (!text.lr.empty()) {
    std::optional<double> lr = parsePositiveReal(command, "lr", text.lr, errs);
    if (!lr)
      return false;
    training.learningRate = *lr;
  }
  if (!text.seed.empty()) {
    std::optional<int64_t> seed = parseInteger(command, "seed", text.seed, 0, errs);
    if (!seed)
      return false;
    training.seed = *seed;
  }
  return true;
}

int runModels(llvm::ArrayRef<std::string> args, llvm::raw_ostream &outs,
              llvm::raw_ostream &errs) {
  // The model named on the command line decides which size flags exist.
  const ModelInfo *named = nullptr;
  for (const std::string &word : args)
    if ((named = findModel(word)))
      break;

  RawFlags raw;
  FlagParser parser = makeParser(named, raw);
  if (std::optional<int> exit = parser.parseOrExit(args, outs, errs))
    return *exit;

  const ModelInfo *model = findModel(raw.model);
  if (!model) {
    printError(errs, kCommand,
               "unknown model '" + raw.model + "' (expected mlp, lenet5, resnet or gpt)");
    return kExitError;
  }
  if (raw.output.empty()) {
    printError(errs, kCommand, "missing -o FILE (where to write the model)");
    parser.printUsage(errs);
    return kExitUsage;
  }

  mlir::DialectRegistry registry;
  registerKilnDialects(registry);
  mlir::MLIRContext context(registry);
  DiagnosticPrinter diagnostics(&context, errs);

  mlir::OwningOpRef<mlir::ModuleOp> module =
      buildModel(*model, raw, &context, errs);
  if (!module)
    return kExitError;
  if (mlir::failed(writeModule(*module, raw.output)))
    return kExitError;
  if (raw.output != "-")
    outs << "wrote " << model->name << " to " << raw.output << "\n";
  return kExitOk;
}

} // namespace kiln::cli
