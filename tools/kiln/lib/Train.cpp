//===- Train.cpp - `kiln train` -------------------------------------------===//
//
// `kiln train FILE [--backend=cpu|reference] --data=SPEC ...` trains a
// model: the training step runs on a TrainBackend (TrainBackend.h: the CPU
// runtime by default, or the reference interpreter), and everything around
// it lives here, shared by both.
//
// Data comes from runtime/data (--data=SPEC through openDataset, batches
// sharded and shuffled per epoch by DistributedSampler, rank 0 of 1 for
// now, and assembled ahead by the Prefetcher). After each epoch (and at the
// end) an eval pass runs the forward model on --eval-data; when the loss
// comes from kiln.softmax_cross_entropy its logits give the accuracy.
// Checkpoints (runtime/checkpoint) hold parameters, optimizer state, step,
// seed, epoch and data position, so --resume continues exactly where a run
// stopped; each is written to a temporary file and renamed, and the
// `latest` pointer is replaced the same way, so a failed write (a full
// disk) leaves the earlier checkpoints and the pointer as they were.
//
//===----------------------------------------------------------------------===//

#include "tools/kiln/lib/AmpFlags.h"
#include "tools/kiln/lib/CudaBackend.h"
#include "tools/kiln/lib/Diagnostics.h"
#include "tools/kiln/lib/DistFlags.h"
#include "tools/kiln/lib/Driver.h"
#include "tools/kiln/lib/Flags.h"
#include "tools/kiln/lib/Mirrored.h"
#include "tools/kiln/lib/ModuleLoader.h"
#include "tools/kiln/lib/OptimizerFlags.h"
#include "tools/kiln/lib/TrainBackend.h"

#include "passes/LossScale.h"
#include "passes/Pipelines.h"
#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/checkpoint/Sharded.h"
#include "runtime/cuda/CudaDevice.h"
#include "runtime/data/DataSpec.h"
#include "runtime/data/Sampler.h"
#include "runtime/dist/Communicator.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <numeric>
#include <set>
#include <thread>

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
  std::string backend = "cpu";
  int64_t threads = 0; // 0: all cores
  PipelineOptions pipeline;
};

std::string jsonNumber(double v) {
  if (!std::isfinite(v))
    return "null";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

struct EvalResult {
  double loss = NAN;
  double accuracy = NAN; // NaN when the model exposes no logits
  int64_t samples = 0;
};

} // namespace

bool dataSpecsOf(const std::vector<DataArgument> &args, llvm::StringRef input,
                 llvm::StringRef command, std::vector<runtime::TensorSpec> &specs,
                 int64_t &batch, llvm::raw_ostream &errs) {
  specs.clear();
  if (args.empty()) {
    printError(errs, command, input.str() + ": the model has no input argument");
    return false;
  }
  const DataArgument &first = args.front();
  if (first.shape.empty()) {
    printError(errs, command,
               input.str() + ": input '" + first.name +
                   "' is a scalar: expected a batch dimension first");
    return false;
  }
  batch = first.shape[0];
  for (const DataArgument &arg : args) {
    if (arg.shape.empty() || arg.shape[0] != batch) {
      printError(errs, command,
                 input.str() + ": data argument '" + arg.name +
                     "' does not have the batch dimension " +
                     std::to_string(batch) + " of '" + first.name + "' first");
      return false;
    }
    runtime::TensorSpec spec;
    spec.name = arg.name;
    spec.type = arg.isFloat ? runtime::ElementType::f32 : runtime::ElementType::i32;
    spec.shape.assign(arg.shape.begin() + 1, arg.shape.end());
    spec.classes = arg.classes;
    specs.push_back(std::move(spec));
  }
  return true;
}

int runTrain(llvm::ArrayRef<std::string> args, llvm::raw_ostream &outs,
             llvm::raw_ostream &errs) {
  TrainOptions options;
  std::string backend, device, data, evalData, maxSteps, epochs, batchSize,
      subset, evalSubset, logEvery, seed, checkpointEvery, threads, collectiveTimeout,
      devices;
  OptimizerFlags optimizerFlags;
  AmpFlags ampFlags;
  DistFlags distFlags;
  FlagParser parser(
      kCommand.str(), "FILE [--backend=cpu] [--data=SPEC] [options]",
      "Compiles the training step of a model (graph file or .mlir) into a\n"
      "package and trains it on the CPU runtime, or trains a compiled package\n"
      "(.kpkg) as it is. --backend=reference runs every step on the reference\n"
      "interpreter instead (slow; for checking a backend). --dump-dir keeps\n"
      "the IR dumps and the compiled step.kpkg and eval.kpkg. The input\n"
      "arguments get one sample per row of their first dimension, the label\n"
      "argument the classes. Under `kiln launch` each process is one rank\n"
      "(--strategy=data-parallel, or zero1/zero2/zero3, which shard the\n"
      "optimizer state, gradients and parameters and write one checkpoint\n"
      "file per rank plus an index); see docs/training.md and\n"
      "docs/distributed.md.");
  parser.setEpilogue(
      "Strategies under a launcher (WORLD_SIZE=N ranks), memory per rank for\n"
      "P parameter elements with Adam (2 state slots; docs/distributed.md):\n"
      "  strategy       parameters         gradients          optimizer state\n"
      "  data-parallel  P                  P                  2P\n"
      "  zero1          P + P/N shards     P                  2P/N\n"
      "  zero2          P + P/N shards     one bucket + P/N   2P/N\n"
      "  zero3          P/N (+ gathered)   one bucket + P/N   2P/N\n"
      "ZeRO checkpoints: DIR/step-K.rank-R-of-N.safetensors per rank (its\n"
      "shards; rank 0 also the full parameters) and DIR/step-K.index.json\n"
      "(world size, files, each bucket's parameters with offsets and shapes),\n"
      "named by DIR/latest; --resume rebuilds the full state from them, so\n"
      "another world size or strategy can continue (keep the global batch).");
  parser.addPositional("FILE", &options.input,
                       "a graph file (.kiln), MLIR text (.mlir) or, for the "
                       "cpu backend, a package (.kpkg)");
  parser.addValue("backend", &backend, "NAME",
                  "cpu, cuda or reference (default: cuda when a GPU is "
                  "present, else cpu)");
  parser.addValue("device", &device, "DEVICE",
                  "cpu or cuda[:N] (default: cuda:0 when a GPU is present and "
                  "this kiln compiles CUDA, else cpu; the choice is printed)");
  std::string cudaGraphs;
  parser.addValue("cuda-graphs", &cudaGraphs, "on|off",
                  "cuda: capture the step into a CUDA Graph after the warm-up "
                  "step (default on)");
  parser.addValue("threads", &threads, "N",
                  "CPU threads (default: all cores, shared out among the "
                  "ranks of one machine; under --strategy=mirrored N is "
                  "shared out among the devices)");
  parser.addValue("devices", &devices, "N",
                  "--strategy=mirrored: N CPU device instances in this "
                  "process, each a rank with its own step, its share of the "
                  "threads and a batch of the compiled size (global batch: N "
                  "times it); default: one per core");
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
  parser.addValue("dump-dir", &options.pipeline.dumpDir, "DIR",
                  "write the IR after every pass, and (cpu) the compiled "
                  "packages, here");
  parser.addValue("collective-timeout", &collectiveTimeout, "S",
                  "with several ranks: give up on the rendezvous or a "
                  "collective after S seconds, naming the missing rank "
                  "(default 300)");
  addDistFlags(parser, distFlags,
               "number of ranks (default: WORLD_SIZE from the launcher, else "
               "1); must agree with the launcher");
  addAmpFlags(parser, ampFlags);
  addOptimizerFlags(parser, optimizerFlags);
  switch (parser.parse(args, outs, errs)) {
  case ParseResult::help:
    return kExitOk;
  case ParseResult::usageError:
    return kExitUsage;
  case ParseResult::ok:
    break;
  }
  if (!backend.empty())
    options.backend = backend;
  CudaBackendOptions cudaOptions;
  if (!device.empty()) {
    llvm::StringRef d(device), index;
    bool cuda = d == "cuda" || (d.starts_with("cuda:") &&
                                !(index = d.drop_front(5)).empty() &&
                                llvm::all_of(index, llvm::isDigit));
    if (d != "cpu" && !cuda) {
      printError(errs, kCommand,
                 "--device=" + device + ": expected cpu or cuda[:N], found '" +
                     device + "'");
      return kExitError;
    }
    unsigned cudaIndex = 0;
    if (cuda && !index.empty() && index.getAsInteger(10, cudaIndex)) {
      printError(errs, kCommand, "--device=" + device + ": the index is too large");
      return kExitError;
    }
    cudaOptions.device = static_cast<int>(cudaIndex);
    if (cuda || backend.empty())
      options.backend = cuda ? "cuda" : "cpu";
  }
  if (options.backend != "cpu" && options.backend != "reference" &&
      options.backend != "cuda") {
    printError(errs, kCommand,
               "--backend=" + options.backend + ": expected cpu, cuda or reference");
    return kExitError;
  }
  if (cudaGraphs != "" && cudaGraphs != "on" && cudaGraphs != "off") {
    printError(errs, kCommand, "--cuda-graphs=" + cudaGraphs + ": expected on or off");
    return kExitError;
  }
  cudaOptions.graphs = cudaGraphs != "off";
  if (options.backend == "cuda") {
    std::string reason;
    if (!cudaDeviceUsable(cudaOptions.device, reason)) {
      printError(errs, kCommand,
                 (device.empty() ? std::string("--backend=cuda") : "--device=" + device) +
                     ": " + reason + "; use --device=cpu");
      return kExitError;
    }
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
      !integer(threads, "threads", 1, options.threads) ||
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
  if (!parseAmpFlags(kCommand, ampFlags, options.pipeline, errs))
    return kExitError;

  // Where this process stands in the job: RANK, WORLD_SIZE, ... as `kiln
  // launch` or torchrun set them; absent, rank 0 of 1.
  runtime::StatusOr<runtime::dist::DistEnv> distEnv =
      runtime::dist::distEnvFromEnvironment();
  if (!distEnv.isOk()) {
    printError(errs, kCommand, distEnv.status().message());
    return kExitError;
  }
  runtime::dist::DistEnv env = distEnv.value();
  if (!parseDistFlags(kCommand, distFlags, options.pipeline, errs))
    return kExitError;
  // --strategy=mirrored (or a package compiled for it, or --devices with
  // a package): the devices are threads of this process, each running this
  // function as one rank (Mirrored.h).
  const MirroredReplica *replica = currentReplica();
  bool kpkg = llvm::sys::path::extension(options.input) == ".kpkg";
  if (kpkg && devices.empty() && !replica && env.worldSize == 1)
    if (int n = mirroredPackageDevices(options.input))
      devices = std::to_string(n);
  bool mirrored = options.pipeline.strategy == Strategy::mirrored ||
                  (!devices.empty() && kpkg);
  if (!devices.empty() && !mirrored) {
    printError(errs, kCommand,
               "--devices=" + devices + " needs --strategy=mirrored");
    return kExitError;
  }
  if (mirrored && !replica) {
    if (env.worldSize > 1) {
      printError(errs, kCommand,
                 "--strategy=mirrored runs its devices in one process, but "
                 "the launcher started " + std::to_string(env.worldSize) +
                     " processes: use --strategy=data-parallel under a "
                     "launcher");
      return kExitError;
    }
    return runMirrored(args, {devices, distFlags.worldSize, threads,
                              collectiveTimeout, backend},
                       outs, errs);
  }
  if (replica) {
    env.rank = env.localRank = replica->rank;
    env.worldSize = env.localWorldSize = replica->devices;
  }
  if (!distFlags.worldSize.empty() && options.pipeline.worldSize != env.worldSize) {
    printError(errs, kCommand,
               "--world-size=" + distFlags.worldSize +
                   ": the launcher started " + std::to_string(env.worldSize) +
                   " rank(s) (WORLD_SIZE" +
                   (std::getenv("WORLD_SIZE") ? "=" + std::string(std::getenv("WORLD_SIZE"))
                                              : std::string(" not set")) +
                   "); drop --world-size or launch that many ranks");
    return kExitError;
  }
  options.pipeline.worldSize = env.worldSize;
  bool distributed = env.worldSize > 1;
  // A package has its strategy and world size compiled in (the Executable
  // checks the world size against the communicator's).
  bool isPackage = llvm::sys::path::extension(options.input) == ".kpkg";
  if (isPackage && (!distFlags.strategy.empty() || !distFlags.bucketMb.empty() ||
                    !distFlags.gradAccum.empty() ||
                    !distFlags.gradCompression.empty())) {
    printError(errs, kCommand,
               options.input + ": a package has its strategy compiled in; "
                               "drop --strategy, --bucket-mb, --grad-accum and "
                               "--grad-compression or train the .kiln file");
    return kExitError;
  }
  if (distributed && !isPackage &&
      options.pipeline.strategy == Strategy::none) {
    printError(errs, kCommand,
               "the launcher started " + std::to_string(env.worldSize) +
                   " ranks but no --strategy was given: pass "
                   "--strategy=data-parallel (each rank trains on its share "
                   "of the data and the gradients are averaged)");
    return kExitError;
  }
  if (!distributed && options.pipeline.strategy != Strategy::none) {
    if (std::string problem = checkPipelineOptions(options.pipeline);
        !problem.empty()) {
      printError(errs, kCommand, problem);
      return kExitError;
    }
    // One rank. The reference interpreter runs the distributed step as it
    // is (its collectives are identities at world size 1, which checks the
    // step's IR); the cpu backend compiles the step without collectives,
    // which would need a communicator of one.
    if (options.backend != "reference") {
      outs << "kiln train: one rank: --strategy="
           << stringifyStrategy(options.pipeline.strategy)
           << " adds no collectives\n";
      options.pipeline.strategy = Strategy::none;
    }
  }
  if (distributed && !isPackage) {
    if (std::string problem = checkPipelineOptions(options.pipeline);
        !problem.empty()) {
      printError(errs, kCommand, problem);
      return kExitError;
    }
  }
  // Only rank 0 prints progress, eval lines and the summary, and writes
  // checkpoints and metrics: under data-parallel every rank holds the same
  // parameters and optimizer state. Errors are printed by every rank.
  bool leader = env.rank == 0;
  double timeoutSeconds = 300;
  if (!collectiveTimeout.empty()) {
    std::optional<double> t =
        parsePositiveReal(kCommand, "collective-timeout", collectiveTimeout, errs);
    if (!t)
      return kExitError;
    timeoutSeconds = *t;
  }
  llvm::raw_ostream &userOuts = outs;
  llvm::raw_null_ostream quiet;
  llvm::raw_ostream &console = leader ? userOuts : quiet;
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
    // A ZeRO checkpoint's pointer names its index (one file per rank):
    // loaded and consolidated into full parameters and optimizer state.
    runtime::StatusOr<runtime::TrainingState> state =
        runtime::isShardIndexName(name)
            ? runtime::loadShardedCheckpoint(options.checkpointDir + "/" + name)
            : runtime::loadCheckpoint(options.checkpointDir + "/" + name);
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

  BackendOptions backendOptions;
  backendOptions.input = options.input;
  backendOptions.pipeline = options.pipeline;
  // Eval runs on rank 0 alone (its result is printed there).
  backendOptions.wantEval = evalSpec.has_value() && leader;
  backendOptions.packageDir = options.pipeline.dumpDir;
  if (distributed && !options.pipeline.dumpDir.empty()) {
    // Every rank compiles the same step; each writes its own copy.
    backendOptions.pipeline.dumpDir += "/rank-" + std::to_string(env.rank);
    backendOptions.packageDir = backendOptions.pipeline.dumpDir;
  }
  backendOptions.threads = static_cast<int>(options.threads);
  if (!options.threads && env.localWorldSize > 1) {
    // Ranks on one machine share its cores (torchrun sets
    // OMP_NUM_THREADS=1 for the same reason): each gets its share.
    unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    backendOptions.threads =
        std::max(1, static_cast<int>(cores) / env.localWorldSize);
  }
  if (replica && options.threads)
    backendOptions.threads = replica->threads; // --threads is the process's
  for (const std::string *flag :
       {&optimizerFlags.optimizer, &optimizerFlags.lr, &optimizerFlags.momentum,
        &optimizerFlags.nesterov, &optimizerFlags.weightDecay,
        &optimizerFlags.clipNorm, &optimizerFlags.beta1, &optimizerFlags.beta2,
        &optimizerFlags.epsilon, &optimizerFlags.schedule,
        &optimizerFlags.warmupSteps, &optimizerFlags.totalSteps})
    backendOptions.optimizerFlagsGiven |= !flag->empty();
  if (!ampFlags.amp.empty() &&
      llvm::sys::path::extension(options.input) == ".kpkg") {
    printError(errs, kCommand,
               options.input + ": a package has its precision compiled in; "
                               "drop --amp or train the .kiln file");
    return kExitError;
  }
  if (options.backend == "reference" &&
      llvm::sys::path::extension(options.input) == ".kpkg") {
    printError(errs, kCommand,
               options.input + ": the reference backend needs the model "
                               "(.kiln or .mlir), not a compiled package");
    return kExitUsage;
  }
  // The communicator: every rank meets the others at MASTER_ADDR:MASTER_PORT
  // before compiling, so a missing rank is reported before any work.
  std::unique_ptr<runtime::dist::Communicator> communicator;
  if (distributed && replica) {
    backendOptions.communicator = replica->communicator;
  } else if (distributed) {
    if (options.backend == "reference") {
      printError(errs, kCommand,
                 "--backend=" + options.backend +
                     ": runs one rank (the reference interpreter has no "
                     "collectives across processes); use --backend=cpu under "
                     "the launcher");
      return kExitError;
    }
#ifdef KILN_HAVE_GLOO
    runtime::dist::CommOptions commOptions;
    commOptions.timeoutSeconds = timeoutSeconds;
    runtime::StatusOr<std::unique_ptr<runtime::dist::Communicator>> created =
        runtime::dist::createGlooCommunicator(env, commOptions);
    if (!created.isOk()) {
      // The communicator's errors already start with "rank R".
      printError(errs, kCommand, created.status().message());
      return kExitError;
    }
    communicator = std::move(created.value());
    backendOptions.communicator = communicator.get();
#else
    (void)timeoutSeconds;
    printError(errs, kCommand,
               "WORLD_SIZE=" + std::to_string(env.worldSize) +
                   ": this kiln was built without the Gloo communicator "
                   "(KilnRuntimeDist), so it runs one rank only");
    return kExitError;
#endif
  }
  // Mirrored replicas compile and load their steps one at a time.
  static std::mutex compileMutex;
  std::unique_lock<std::mutex> compiling(compileMutex, std::defer_lock);
  if (replica)
    compiling.lock();
  // Under a launcher, --device=cuda means this rank's GPU (LOCAL_RANK); its
  // collectives run through the communicator on host copies.
  if (distributed && options.backend == "cuda" &&
      (device.empty() || device == "cuda"))
    cudaOptions.device = env.localRank;
  // Without --device or --backend: the GPU when there is one (one process).
  if (device.empty() && backend.empty() && !distributed) {
    std::string line;
    if (chooseCudaByDefault(options.input, line))
      options.backend = "cuda";
    else
      console << "kiln train: " << line << "\n";
  }
  std::unique_ptr<TrainBackend> backendImpl =
      options.backend == "cuda"
          ? createCudaBackend(backendOptions, cudaOptions, kCommand, console, errs)
      : options.backend == "cpu"
          ? createCpuBackend(backendOptions, kCommand, console, errs)
          : createReferenceBackend(backendOptions, kCommand, errs);
  if (compiling.owns_lock())
    compiling.unlock();
  if (replica && replica->compiled)
    replica->compiled(); // every replica's step is ready (Mirrored.h)
  if (!backendImpl)
    return kExitError;
  TrainBackend &model = *backendImpl;
  // The step reads |batch| rows per rank: with --grad-accum=K that is K
  // micro-batches of the model's batch (kiln-accumulate-gradients), and
  // --batch-size names the micro-batch, as in PyTorch.
  int64_t batch = model.batch();
  int64_t microBatches = isPackage ? 1 : options.pipeline.gradAccum;
  int64_t microBatch = batch / microBatches;
  if (options.batchSize && options.batchSize != microBatch) {
    printError(errs, kCommand,
               "--batch-size=" + std::to_string(options.batchSize) + ": " +
                   options.input + " was built for batch " +
                   std::to_string(microBatch) + "; rebuild the model or pass "
                   "--batch-size=" + std::to_string(microBatch));
    return kExitError;
  }

  runtime::DataOptions dataOptions;
  dataOptions.seed = options.seed;
  dataOptions.syntheticSize = std::max<int64_t>(1024, batch);
  runtime::StatusOr<std::unique_ptr<runtime::Dataset>> dataset =
      runtime::openDataset(spec.value(), model.dataSpecs(), dataOptions);
  if (!dataset.isOk()) {
    printError(errs, kCommand,
               "--data=" + options.data + ": " + dataset.status().message());
    return kExitError;
  }
  int64_t trainSize = dataset.value()->size();
  if (options.subset > 0)
    trainSize = std::min(trainSize, options.subset);
  // Each rank visits its share of every epoch's permutation (the same on
  // every rank: same seed): rank r takes positions r, r + N, r + 2N, ...
  runtime::SamplerOptions samplerOptions;
  samplerOptions.rank = env.rank;
  samplerOptions.worldSize = env.worldSize;
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

  // The eval data.
  std::unique_ptr<runtime::Dataset> evalDataset;
  if (evalSpec && model.hasEval()) {
    runtime::DataOptions evalOptions = dataOptions;
    evalOptions.split = "test";
    runtime::StatusOr<std::unique_ptr<runtime::Dataset>> opened =
        runtime::openDataset(*evalSpec, model.evalSpecs(), evalOptions);
    if (!opened.isOk()) {
      printError(errs, kCommand, "--eval-data: " + opened.status().message());
      return kExitError;
    }
    evalDataset = std::move(opened.value());
  }
  // Runs the forward model over the first eval samples, in order. With
  // logits every sample counts for the accuracy: a last partial batch is
  // padded with copies of its last sample, whose rows are not counted. The
  // loss is the mean over whole batches (the step's loss is a batch mean,
  // which padding would skew), so without logits a partial batch is dropped.
  auto evaluate = [&]() -> std::optional<EvalResult> {
    // The eval step is the forward model: one micro-batch of rows.
    const int64_t batch = microBatch;
    EvalResult result;
    int64_t n = evalDataset->size();
    if (options.evalSubset)
      n = std::min(n, options.evalSubset);
    std::vector<int64_t> indices(n);
    std::iota(indices.begin(), indices.end(), 0);
    bool padLast = model.evalHasLogits();
    runtime::Prefetcher batches(*evalDataset, indices, batch,
                                /*dropPartial=*/!padLast);
    double lossSum = 0;
    int64_t correct = 0, batchesSeen = 0, rowsCounted = 0;
    bool counted = false; // logits of one row per label were compared
    // The labels are the last data tensor.
    std::optional<size_t> labelTensor;
    for (size_t t = 0; t < model.evalSpecs().size(); ++t)
      if (model.evalSpecs()[t].type == runtime::ElementType::i32)
        labelTensor = t;
    runtime::Batch b;
    EvalOutput out;
    while (true) {
      runtime::StatusOr<bool> more = batches.next(b);
      if (!more.isOk()) {
        printError(errs, kCommand, "--eval-data: " + more.status().message());
        return std::nullopt;
      }
      if (!more.value())
        break;
      int64_t valid = static_cast<int64_t>(b.samples.size());
      if (valid < batch) {
        // Pad every tensor to |batch| rows with its last row.
        for (runtime::BatchTensor &t : b.tensors) {
          auto pad = [&](auto &v) {
            size_t rowSize = v.size() / valid;
            for (int64_t r = valid; r < batch; ++r)
              v.insert(v.end(), v.end() - rowSize, v.end());
          };
          if (t.type == runtime::ElementType::f32)
            pad(t.f32);
          else
            pad(t.i32);
          t.shape[0] = batch;
        }
      }
      if (!model.evaluate(b, out, errs))
        return std::nullopt;
      if (valid == batch) {
        lossSum += out.loss;
        ++batchesSeen;
      }
      if (!out.logits.empty() && labelTensor && out.classes > 0) {
        const std::vector<int32_t> &labels = b.tensors[*labelTensor].i32;
        int64_t rows = static_cast<int64_t>(out.logits.size()) / out.classes;
        if (rows != static_cast<int64_t>(labels.size()))
          continue;
        counted = true;
        rowsCounted += valid;
        for (int64_t r = 0; r < valid; ++r) {
          const float *row = out.logits.data() + r * out.classes;
          int64_t best = 0;
          for (int64_t c = 1; c < out.classes; ++c)
            if (row[c] > row[best])
              best = c;
          correct += best == labels[r];
        }
      }
    }
    result.samples = counted ? rowsCounted : batchesSeen * batch;
    if (batchesSeen)
      result.loss = lossSum / batchesSeen;
    if (counted && rowsCounted)
      result.accuracy = static_cast<double>(correct) / rowsCounted;
    return result;
  };

  // The resumed state. Optimizer state "P.SLOT" of parameter P is slot SLOT
  // of P; anything else is slot "state" under its own name.
  const std::vector<StateEntry> &stateEntries = model.state();
  std::set<std::string> parameterNames;
  for (const StateEntry &e : stateEntries)
    if (e.parameter)
      parameterNames.insert(e.name);
  auto stateKey = [&](const std::string &name) -> std::pair<std::string, std::string> {
    for (const std::string &param : parameterNames)
      if (name.size() > param.size() + 1 && name.compare(0, param.size(), param) == 0 &&
          name[param.size()] == '.')
        return {name.substr(param.size() + 1), param};
    return {"state", name};
  };
  // ZeRO: the shard entries (zero.bucketK and its optimizer slots) by name.
  std::map<std::string, const runtime::ShardLayout *> shardLayouts;
  for (const runtime::ShardLayout &l : model.shards())
    shardLayouts[l.name] = &l;
  auto bucketOf = [](const runtime::ShardLayout &l) {
    runtime::ShardedBucket b;
    b.name = l.name;
    b.length = l.length;
    for (const runtime::ShardSlot &slot : l.slots)
      b.params.push_back({slot.name, slot.offset, slot.shape});
    return b;
  };
  int64_t stepsDone = 0, epoch = 0, position = 0;
  if (resumed) {
    std::map<std::string, const runtime::NamedTensor *> params;
    for (const runtime::NamedTensor &t : resumed->parameters)
      params[t.name] = &t;
    for (size_t i = 0; i < stateEntries.size(); ++i) {
      const StateEntry &e = stateEntries[i];
      const runtime::NamedTensor *found = nullptr;
      std::string what;
      auto [shardSlot, shardName] = stateKey(e.name);
      auto layout = shardLayouts.find(e.parameter ? e.name : shardName);
      if (layout != shardLayouts.end()) {
        // This rank's block of the bucket, cut from the full tensors.
        const std::map<std::string, std::vector<runtime::NamedTensor>>::const_iterator
            slot = resumed->optimizer.find(shardSlot);
        runtime::StatusOr<std::vector<float>> block = runtime::shardBlock(
            bucketOf(*layout->second), env.rank, env.worldSize,
            [&](const std::string &name) -> const runtime::NamedTensor * {
              if (e.parameter) {
                auto it = params.find(name);
                return it == params.end() ? nullptr : it->second;
              }
              if (slot == resumed->optimizer.end())
                return nullptr;
              for (const runtime::NamedTensor &t : slot->second)
                if (t.name == name)
                  return &t;
              return nullptr;
            },
            e.parameter ? "the checkpoint's parameters"
                        : "the checkpoint's optimizer state '" + shardSlot + "'");
        std::string error;
        if (!block.isOk() || !model.writeState(i, block.value(), error)) {
          printError(errs, kCommand,
                     "--resume: " + (block.isOk() ? "shard '" + e.name + "' " + error
                                                  : block.status().message()));
          return kExitError;
        }
        continue;
      }
      if (e.parameter) {
        auto it = params.find(e.name);
        if (it == params.end()) {
          printError(errs, kCommand, "--resume: the checkpoint has no parameter '" +
                                         e.name + "'");
          return kExitError;
        }
        found = it->second;
        what = "parameter '" + e.name + "'";
      } else {
        auto [slot, name] = stateKey(e.name);
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
        what = "optimizer state '" + e.name + "'";
      }
      std::string error;
      if (!model.writeState(i, found->values, error)) {
        printError(errs, kCommand, "--resume: " + what + " " + error);
        return kExitError;
      }
    }
    stepsDone = resumed->step;
    epoch = resumed->epoch;
    position = resumed->position;
    model.setStepCounter(stepsDone);
  }

  // ZeRO checkpoints are sharded (runtime/checkpoint/Sharded.h): every rank
  // writes its shards to step-K.rank-R-of-N.safetensors, rank 0 also the
  // replicated state and the full parameters (zero3: gathered for it), and,
  // once every rank has written, step-K.index.json and then `latest`.
  bool sharded = !shardLayouts.empty();
  std::set<std::string> stateNames;
  for (const StateEntry &e : stateEntries)
    stateNames.insert(e.name);
  // zero3: the parameters of shard entry |i| are not state anywhere; every
  // rank all-gathers its shard and gets them (|out|: name, values). Nothing
  // to do (true, |out| empty) for the other entries and strategies.
  auto gatherParameters =
      [&](size_t i, std::vector<runtime::NamedTensor> &out) -> bool {
    out.clear();
    const StateEntry &e = stateEntries[i];
    auto l = shardLayouts.find(e.name);
    if (!communicator || !e.parameter || l == shardLayouts.end() ||
        llvm::all_of(l->second->slots, [&](const runtime::ShardSlot &s) {
          return stateNames.count(s.name) != 0;
        }))
      return true;
    std::vector<float> shard = model.readState(i);
    std::vector<float> flat(shard.size() * env.worldSize);
    runtime::Status g = communicator->allGather(
        shard.data(), flat.data(), static_cast<int64_t>(shard.size()),
        runtime::PkgDType::F32);
    if (!g.isOk()) {
      printError(errs, kCommand, g.message());
      return false;
    }
    for (const runtime::ShardSlot &slot : l->second->slots) {
      runtime::NamedTensor full;
      full.name = slot.name;
      full.shape = slot.shape;
      int64_t n = 1;
      for (int64_t d : slot.shape)
        n *= d;
      full.values.assign(flat.begin() + slot.offset,
                         flat.begin() + slot.offset + n);
      out.push_back(std::move(full));
    }
    return true;
  };
  auto writeCheckpoint = [&]() -> bool {
    runtime::TrainingState state;
    for (size_t i = 0; i < stateEntries.size(); ++i) {
      const StateEntry &e = stateEntries[i];
      bool shardEntry =
          shardLayouts.count(e.parameter ? e.name : stateKey(e.name).second);
      if (sharded && !leader && !shardEntry)
        continue;
      // zero3: the full parameters, gathered for rank 0's file.
      std::vector<runtime::NamedTensor> full;
      if (!gatherParameters(i, full))
        return false;
      if (leader)
        for (runtime::NamedTensor &t : full)
          state.parameters.push_back(std::move(t));
      runtime::NamedTensor t;
      t.shape = e.shape;
      t.values = model.readState(i);
      if (e.parameter) {
        t.name = e.name;
        state.parameters.push_back(std::move(t));
      } else {
        auto [slot, name] = stateKey(e.name);
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
    std::string name =
        sharded ? runtime::shardFileName(stepsDone, env.rank, env.worldSize)
                : "step-" + std::to_string(stepsDone) + ".safetensors";
    runtime::Status saved =
        runtime::saveCheckpoint(options.checkpointDir + "/" + name, state);
    if (!saved.isOk())
      printError(errs, kCommand, "checkpoint at step " + std::to_string(stepsDone) +
                                     ": " + saved.message() +
                                     " (earlier checkpoints are kept)");
    if (sharded) {
      // Every rank's file is on disk before the index names them: the
      // ranks count their failures together (a collective, so also a
      // barrier).
      float failed = saved.isOk() ? 0.0f : 1.0f, failures = failed;
      if (communicator) {
        runtime::Status s = communicator->allReduce(
            &failed, &failures, 1, runtime::PkgDType::F32,
            runtime::PkgReduceKind::Sum);
        if (!s.isOk()) {
          printError(errs, kCommand, "checkpoint: " + s.message());
          return false;
        }
      }
      if (failures > 0) {
        if (leader && saved.isOk())
          printError(errs, kCommand,
                     "checkpoint at step " + std::to_string(stepsDone) + ": " +
                         llvm::formatv("{0}", failures).str() +
                         " rank(s) could not write their file; no index "
                         "written (earlier checkpoints are kept)");
        return false;
      }
      if (!leader)
        return true;
      runtime::ShardedIndex index;
      index.step = stepsDone;
      index.worldSize = env.worldSize;
      for (int r = 0; r < env.worldSize; ++r)
        index.files.push_back(runtime::shardFileName(stepsDone, r, env.worldSize));
      for (const runtime::ShardLayout &l : model.shards())
        index.buckets.push_back(bucketOf(l));
      name = runtime::shardIndexFileName(stepsDone);
      runtime::Status written = runtime::writeFileAtomically(
          options.checkpointDir + "/" + name, runtime::writeShardIndex(index));
      if (!written.isOk()) {
        printError(errs, kCommand, "checkpoint at step " +
                                       std::to_string(stepsDone) + ": " +
                                       written.message() +
                                       " (earlier checkpoints are kept)");
        return false;
      }
    } else if (!saved.isOk()) {
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
    console << "kiln train: checkpoint " << options.checkpointDir << "/" << name << "\n";
    return true;
  };

  std::unique_ptr<llvm::raw_fd_ostream> metrics;
  if (!options.metricsFile.empty() && leader) {
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

  console << "kiln train: backend " << model.name() << ", " << options.data << ", batch " << batch;
  if (microBatches > 1)
    console << " (" << microBatches << " micro-batches of " << microBatch
            << ", --grad-accum)";
  console << ", " << totalSteps << " steps";
  if (distributed) {
    console << " (";
    if (!isPackage)
      console << stringifyStrategy(options.pipeline.strategy) << ", ";
    console << env.worldSize << " ranks, global batch " << batch * env.worldSize
            << ")";
  }
  if (resumed)
    console << " (resumed at step " << stepsDone << ", epoch " << epoch << ", batch "
         << position << ")";
  console << "\n";
  if (evalDataset && !model.evalHasLogits())
    console << "kiln train: eval reports the loss only (the loss does not come "
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
    // zero3: rank 0's eval step reads the parameters every rank gathers.
    if (evalSpec && !isPackage)
      for (size_t i = 0; i < stateEntries.size(); ++i) {
        std::vector<runtime::NamedTensor> full;
        if (!gatherParameters(i, full))
          return false;
        for (const runtime::NamedTensor &t : full) {
          std::string error;
          if (evalDataset && !model.setEvalParameter(t.name, t.values, error)) {
            printError(errs, kCommand, "eval: parameter '" + t.name + "' " + error);
            return false;
          }
        }
      }
    if (evalDataset) {
      eval = evaluate();
      if (!eval)
        return false;
      console << "eval epoch " << epochNumber << " step " << stepsDone << " loss "
           << llvm::format("%.6f", eval->loss);
      if (std::isfinite(eval->accuracy))
        console << " accuracy " << llvm::format("%.4f", eval->accuracy);
      console << " (" << eval->samples << " samples)\n";
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

  // Throughput counts every rank's samples (the global batch).
  int64_t globalBatch = batch * env.worldSize;
  // On a terminal a progress bar; plain lines otherwise (and in logs).
  bool progress = console.is_displayed();
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
      double loss = 0;
      if (!model.step(b, loss, errs))
        return kExitError;
      if (!std::isfinite(loss)) {
        printError(errs, kCommand,
                   "step " + std::to_string(stepsDone + 1) + ": the loss is not finite");
        return kExitError;
      }
      losses.push_back(loss);
      epochLosses.push_back(loss);
      ++stepsDone;
      ++position;
      samplesSince += globalBatch;
      if (position == stepsPerEpoch) {
        epochDone = true;
      }
      if (progress) {
        // A one-line progress bar, redrawn in place; cleared before any
        // other line.
        double seconds = std::chrono::duration<double>(Clock::now() - runStart).count();
        double rate =
            seconds > 0 ? (stepsDone - firstStep) * globalBatch / seconds : 0;
        double eta = rate > 0 ? (totalSteps - stepsDone) * globalBatch / rate : 0;
        int filled = static_cast<int>(20 * stepsDone / totalSteps);
        console << "\r[" << std::string(filled, '#') << std::string(20 - filled, '.')
             << "] step " << stepsDone << "/" << totalSteps << " loss "
             << llvm::format("%.4f", loss) << ", "
             << llvm::format("%.0f", rate) << " samples/s, ETA "
             << llvm::format("%.0f", eta) << "s\033[K";
        console.flush();
      }
      if (stepsDone % options.logEvery == 0 || stepsDone == totalSteps) {
        if (progress)
          console << "\r\033[K";
        console << "step " << stepsDone << " loss " << llvm::format("%.6f", loss) << "\n";
      }
      if (epochDone) {
        if (!report(epoch + 1))
          return kExitError;
        ++epoch;
        position = 0;
      }
      bool atEnd = stepsDone == totalSteps;
      if (!options.checkpointDir.empty() && (leader || sharded) &&
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
  console << "kiln train: mean loss of the first " << k << " steps "
       << llvm::format("%.6f", firstMean) << ", of the last " << k << " steps "
       << llvm::format("%.6f", lastMean) << "\n";
  // fp16 mixed precision: where the dynamic loss scale ended.
  int scaleEntry = -1, skippedEntry = -1;
  for (size_t i = 0; i < stateEntries.size(); ++i) {
    if (stateEntries[i].parameter)
      continue;
    if (stateEntries[i].name == kLossScaleName)
      scaleEntry = static_cast<int>(i);
    if (stateEntries[i].name == kLossScaleSkippedStepsName)
      skippedEntry = static_cast<int>(i);
  }
  if (scaleEntry >= 0 && skippedEntry >= 0) {
    std::vector<float> scale = model.readState(scaleEntry);
    std::vector<float> skipped = model.readState(skippedEntry);
    if (!scale.empty() && !skipped.empty())
      console << "kiln train: fp16 loss scale " << llvm::format("%g", scale[0]) << ", "
           << llvm::format("%.0f", skipped[0])
           << " steps skipped in all (inf or NaN gradients)\n";
  }
  return kExitOk;
}

} // namespace kiln::cli
