//===- TrainLoopFlags.cpp - the flags of the training loop ----------------===//
//
// The flags every trainer has, `kiln train` and a packed trainer of
// `kiln pack` alike: the data, the steps, checkpoints, metrics, threads
// (TrainFlags.h). No MLIR.
//
//===----------------------------------------------------------------------===//

#include "tools/kiln/lib/TrainFlags.h"

#include "tools/kiln/lib/Driver.h"
#include "tools/kiln/lib/Flags.h"

namespace kiln::cli {
namespace {

std::string &trainCommandName() {
  static std::string name = "kiln train";
  return name;
}

} // namespace

llvm::StringRef trainCommand() { return trainCommandName(); }

void setTrainCommand(llvm::StringRef name) { trainCommandName() = name.str(); }

void addTrainLoopFlags(FlagParser &parser, TrainOptions &options,
                       TrainLoopFlagText &text) {
  std::string &seed = options.seedFlag, &threads = options.threadsFlag,
              &collectiveTimeout = options.collectiveTimeout;
  std::string &evalData = options.evalData;
  std::string &data = text.data, &maxSteps = text.maxSteps,
              &epochs = text.epochs, &batchSize = text.batchSize,
              &subset = text.subset, &evalSubset = text.evalSubset,
              &logEvery = text.logEvery, &checkpointEvery = text.checkpointEvery;
  parser.addValue("threads", &threads, "N",
                  "CPU threads (default: all cores, shared out among the "
                  "ranks of one machine; under --strategy=mirrored N is "
                  "shared out among the devices)");
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
                  "per rank (with --grad-accum, the micro-batch); must "
                  "equal the model's batch dimension");
  parser.addValue("train-subset", &subset, "N",
                  "use only the first N training samples (default: all)");
  parser.addValue("eval-subset", &evalSubset, "N",
                  "evaluate only the first N eval samples (default: all)");
  parser.addValue("eval-every", &text.evalEvery, "N",
                  "also evaluate every N steps inside an epoch (Hugging "
                  "Face's eval_steps; default: after each epoch only)");
  parser.addSwitch("no-shuffle", &options.noShuffle, "keep the data in file order");
  parser.addValue("log-every", &logEvery, "N", "print the loss every N steps (default 1)");
  parser.addValue("seed", &seed, "S", "shuffling and synthetic-data seed (default 0)");
  parser.addValue("checkpoint-dir", &options.checkpointDir, "DIR",
                  "write step-N.safetensors and a 'latest' pointer here");
  parser.addValue("checkpoint-every", &checkpointEvery, "N",
                  "checkpoint every N steps (and always at the end)");
  parser.addSwitch("checkpoint-async", &options.checkpointAsync,
                   "write checkpoints on a thread of their own while the "
                   "steps go on (the state is copied out first; one write "
                   "at a time; a failed write stops the run at the next "
                   "checkpoint or at the end)");
  parser.addValue("keep-checkpoints", &text.keepCheckpoints, "N",
                  "keep the newest N checkpoints of --checkpoint-dir and "
                  "delete the older ones once a new one is written "
                  "(default: keep all)");
  parser.addSwitch("checkpoint-best", &options.checkpointBest,
                   "after each eval with the lowest eval loss so far, "
                   "checkpoint its step and name it in DIR/best.json "
                   "(--keep-checkpoints keeps it)");
  parser.addSwitch("resume", &options.resume,
                   "continue from the checkpoint --checkpoint-dir's 'latest' names");
  parser.addValue("init-from", &options.initFrom, "FILE",
                  "start the parameters from the tensors of the same names "
                  "in FILE instead of their initializers, the optimizer "
                  "state and the step from zero (fine-tuning): a safetensors "
                  "file (F32, F64, F16 or BF16 tensors, as "
                  "safetensors.torch.save_file writes a state dict), a kiln "
                  "checkpoint or a ZeRO checkpoint's index.json");
  parser.addValue("init-strict", &text.initStrict, "on|off",
                  "with --init-from: on (default) refuses a FILE that lacks "
                  "a parameter or holds a tensor that is none; off keeps "
                  "the missing parameters' initializers and ignores the "
                  "other tensors, as load_state_dict(strict=False)");
  parser.addValue("metrics-file", &options.metricsFile, "F.jsonl",
                  "append one JSON object per eval");
  parser.addValue("tensorboard-dir", &options.tensorboardDir, "DIR",
                  "write a TensorBoard event file here: train/loss at each "
                  "logged step; eval/loss, eval/accuracy, train/epoch_loss "
                  "and train/samples_per_second after each epoch (view with "
                  "tensorboard --logdir DIR)");
  parser.addValue("profile", &options.profileFile, "FILE",
                  "time every thunk of the training step (kernels, GEMMs, "
                  "collectives; on a GPU with CUDA events) over "
                  "--profile-steps steps after two warm-up steps, print "
                  "where the step's time goes and write each thunk's "
                  "milliseconds per step here (thunk,ms,calls,kind,what; "
                  "kiln inspect STEP.kpkg --roofline --measured=FILE reads "
                  "it), or for FILE.json the last step's timeline as a "
                  "Chrome trace (chrome://tracing, Perfetto)");
  parser.addValue("profile-steps", &text.profileSteps, "N",
                  "with --profile: the steps timed (default 5)");
  parser.addValue("collective-timeout", &collectiveTimeout, "S",
                  "with several ranks: give up on the rendezvous or a "
                  "collective after S seconds, naming the missing rank "
                  "(default 300)");
}

std::optional<int> applyTrainLoopFlags(const TrainLoopFlagText &text,
                                       TrainOptions &options,
                                       llvm::raw_ostream &errs) {
  const std::string &seed = options.seedFlag, &threads = options.threadsFlag;
  const std::string &maxSteps = text.maxSteps, &epochs = text.epochs,
                    &batchSize = text.batchSize, &subset = text.subset,
                    &evalSubset = text.evalSubset, &logEvery = text.logEvery,
                    &checkpointEvery = text.checkpointEvery;
  auto integer = [&](const std::string &text, llvm::StringRef flag, int64_t min,
                     int64_t &out) {
    if (text.empty())
      return true;
    std::optional<int64_t> v = parseInteger(trainCommand(), flag, text, min, errs);
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
      !integer(checkpointEvery, "checkpoint-every", 1,
               options.checkpointEvery) ||
      !integer(threads, "threads", 1, options.threads) ||
      !integer(text.profileSteps, "profile-steps", 1, options.profileSteps) ||
      !integer(text.keepCheckpoints, "keep-checkpoints", 1,
               options.keepCheckpoints) ||
      !integer(text.evalEvery, "eval-every", 1, options.evalEvery) ||
      !integer(seed, "seed", 0, seedValue))
    return kExitError;
  options.seed = static_cast<uint64_t>(seedValue);
  if (options.maxSteps == 0 && options.epochs == 0)
    options.maxSteps = 20;
  if ((options.resume || options.checkpointEvery || options.checkpointAsync ||
       options.keepCheckpoints || options.checkpointBest) &&
      options.checkpointDir.empty()) {
    printError(errs, trainCommand(),
               std::string(options.resume            ? "--resume"
                           : options.checkpointEvery ? "--checkpoint-every"
                           : options.checkpointAsync ? "--checkpoint-async"
                           : options.keepCheckpoints ? "--keep-checkpoints"
                                                     : "--checkpoint-best") +
                   " needs --checkpoint-dir=DIR");
    return kExitUsage;
  }
  if (!text.profileSteps.empty() && options.profileFile.empty()) {
    printError(errs, trainCommand(), "--profile-steps needs --profile=FILE");
    return kExitUsage;
  }
  if (!text.initStrict.empty()) {
    if (options.initFrom.empty()) {
      printError(errs, trainCommand(), "--init-strict needs --init-from=FILE");
      return kExitUsage;
    }
    if (text.initStrict != "on" && text.initStrict != "off") {
      printError(errs, trainCommand(),
                 "--init-strict=" + text.initStrict + ": expected on or off");
      return kExitUsage;
    }
    options.initStrict = text.initStrict == "on";
  }
  if (!options.initFrom.empty() && options.resume) {
    printError(errs, trainCommand(),
               "--init-from and --resume: a resumed run takes its parameters "
               "from the checkpoint; drop --init-from");
    return kExitUsage;
  }
  if (!text.data.empty())
    options.data = text.data;
  return std::nullopt;
}

bool parseTrainData(const TrainOptions &options, runtime::DataSpec &spec,
                    std::optional<runtime::DataSpec> &evalSpec,
                    llvm::raw_ostream &errs) {
  const std::string &evalData = options.evalData;
  runtime::StatusOr<runtime::DataSpec> parsedSpec =
      runtime::parseDataSpec(options.data);
  if (!parsedSpec.isOk()) {
    printError(errs, trainCommand(), parsedSpec.status().message());
    return false;
  }
  spec = parsedSpec.value();
  evalSpec.reset();
  if (evalData.empty()) {
    if (spec.kind == runtime::DataSpec::Kind::fashionMnist)
      evalSpec = spec;
  } else if (evalData != "none") {
    runtime::StatusOr<runtime::DataSpec> parsed = runtime::parseDataSpec(evalData);
    if (!parsed.isOk()) {
      printError(errs, trainCommand(),
                 "--eval-data: " + parsed.status().message());
      return false;
    }
    evalSpec = parsed.value();
  }
  return true;
}

} // namespace kiln::cli
