//===- TrainLoop.cpp - the training loop of `kiln train` ------------------===//
//
// See TrainLoop.h.
//
//===----------------------------------------------------------------------===//

#include "tools/kiln/lib/TrainLoop.h"

#include "tools/kiln/lib/Driver.h"
#include "tools/kiln/lib/Flags.h"
#include "tools/kiln/lib/Mirrored.h"
#include "tools/kiln/lib/StopSignals.h"
#include "tools/kiln/lib/TrainCheckpoint.h"
#include "tools/kiln/lib/TrainEval.h"

#include "passes/LossScale.h"
#include "runtime/Files.h"
#include "runtime/data/Sampler.h"
#include "runtime/dist/NcclCommunicator.h"
#include "runtime/metrics/EventFile.h"
#include "runtime/metrics/Nvtx.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <numeric>
#include <thread>

namespace kiln::cli {

TrainBackend::~TrainBackend() = default;

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
  if (batch < 1) {
    printError(errs, command,
               input.str() + ": input '" + first.name +
                   "' has a batch dimension of 0: no sample fits a batch");
    return false;
  }
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
    spec.type = arg.type;
    spec.shape.assign(arg.shape.begin() + 1, arg.shape.end());
    if (arg.type == runtime::ElementType::i32)
      spec.classes = arg.indexLimit > 0 ? arg.indexLimit : 2;
    spec.indexLimit = arg.indexLimit;
    specs.push_back(std::move(spec));
  }
  return true;
}

int rankThreads(int64_t threads, const runtime::dist::DistEnv &env) {
  if (threads || env.localWorldSize <= 1)
    return static_cast<int>(threads);
  unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  return std::max(1, static_cast<int>(cores) / env.localWorldSize);
}

std::optional<double> collectiveTimeoutSeconds(const TrainOptions &options,
                                               llvm::StringRef command,
                                               llvm::raw_ostream &errs) {
  if (options.collectiveTimeout.empty())
    return 300.0;
  return parsePositiveReal(command, "collective-timeout", options.collectiveTimeout,
                           errs);
}

runtime::StatusOr<std::unique_ptr<runtime::dist::Communicator>>
createRankCommunicator(const runtime::dist::DistEnv &env, double timeoutSeconds,
                       bool cuda, int cudaDevice) {
  runtime::dist::CommOptions commOptions;
  commOptions.timeoutSeconds = timeoutSeconds;
  if (cuda) {
    runtime::dist::NcclOptions nccl;
    nccl.device = cudaDevice;
    return runtime::dist::createNcclCommunicator(env, commOptions, nccl);
  }
#ifdef KILN_HAVE_GLOO
  return runtime::dist::createGlooCommunicator(env, commOptions);
#else
  return runtime::Status::error(
      "WORLD_SIZE=" + std::to_string(env.worldSize) +
      ": this kiln was built without the Gloo communicator "
      "(KilnRuntimeDist), so it runs one rank only on the CPU");
#endif
}

namespace {

// --profile: the steps before the timed ones (the first, which loads and
// warms up, and the one a GPU captures into its CUDA Graph).
constexpr int64_t kProfileWarmupSteps = 2;

// The host's side of the profiled steps, on the steady clock: waiting for
// each batch, and the step's call (staging the batch, running the step,
// reading the loss).
struct HostProfile {
  using Clock = std::chrono::steady_clock;
  double batchMs = 0, callMs = 0; // over the profiled steps
  int64_t steps = 0;
  // The last profiled step's.
  Clock::time_point batchStart, callStart, callEnd;
  Clock::time_point thunksStart; // the runtime's timeline zero

  double ms(Clock::time_point a, Clock::time_point b) const {
    return std::chrono::duration<double, std::milli>(b - a).count();
  }
};

// Writes |rows| (steps |first| to |last|) to |path|, as a Chrome trace of
// step |last| for a .json path and as CSV otherwise, and prints where the
// step's time went: the thunks against the host's time, by thunk kind,
// then the slowest thunks.
bool writeProfile(const std::vector<ThunkTime> &rows, const HostProfile &host,
                  const std::string &path, int64_t first, int64_t last,
                  llvm::raw_ostream &console, llvm::raw_ostream &errs) {
  double stepMs = 0;
  std::map<std::string, double> byKind;
  for (const ThunkTime &t : rows) {
    stepMs += t.msPerStep();
    byKind[t.kind] += t.msPerStep();
  }
  bool trace = runtime::isThunkTracePath(path);
  std::vector<runtime::HostSpan> spans = {
      {"batch", 0, host.ms(host.batchStart, host.callStart)},
      {"step " + std::to_string(last), host.ms(host.batchStart, host.callStart),
       host.ms(host.callStart, host.callEnd)}};
  if (runtime::Status s = runtime::writeFileAtomically(
          path,
          trace ? runtime::thunkProfileTrace(
                      rows,
                      trainCommand().str() + ": step " + std::to_string(last),
                      spans,
                      host.ms(host.batchStart,
                              std::max(host.thunksStart, host.callStart)))
                : runtime::thunkProfileCsv(rows));
      !s.isOk()) {
    printError(errs, trainCommand(), "--profile=" + path + ": " + s.message());
    return false;
  }
  auto share = [&](double ms) {
    return llvm::formatv("{0:f3} ms ({1:f1}%)", ms,
                         stepMs > 0 ? 100 * ms / stepMs : 0.0)
        .str();
  };
  console << trainCommand() << ": profile of step"
          << (first == last ? " " : "s ") << first
          << (first == last ? "" : "-" + std::to_string(last)) << ": "
          << llvm::formatv("{0:f3}", stepMs) << " ms per step in "
          << rows.size() << " thunks ("
          << (trace ? "step " + std::to_string(last) + "'s timeline"
                    : std::string("each thunk's time"))
          << " in " << path << ")\n";
  // The host's time per step: what the thunks leave is staging the batch,
  // launching (on a GPU, the gaps between kernels), the collectives'
  // waits and reading the loss.
  double steps = double(std::max<int64_t>(host.steps, 1));
  double batchMs = host.batchMs / steps, wallMs = batchMs + host.callMs / steps;
  auto ofWall = [&](double ms, const char *what = "") {
    return llvm::formatv("{0:f3} ms ({1:f1}%{2})", ms,
                         wallMs > 0 ? 100 * ms / wallMs : 0.0, what)
        .str();
  };
  console << "  host: " << llvm::formatv("{0:f3}", wallMs)
          << " ms per step from asking for the batch to reading the loss: "
             "thunks "
          << ofWall(stepMs) << ", waiting for the batch " << ofWall(batchMs)
          << ", the rest "
          << ofWall(std::max(0.0, wallMs - batchMs - stepMs),
                    ": staging, launches, reading the loss")
          << "\n";
  std::vector<std::pair<double, std::string>> kinds;
  for (const auto &[kind, ms] : byKind)
    kinds.push_back({ms, kind});
  std::sort(kinds.rbegin(), kinds.rend());
  console << "  by kind:";
  for (size_t i = 0; i < kinds.size(); ++i)
    console << (i ? ", " : " ") << kinds[i].second << " "
            << share(kinds[i].first);
  console << "\n";
  std::vector<std::pair<double, size_t>> slow;
  for (size_t i = 0; i < rows.size(); ++i)
    slow.push_back({rows[i].msPerStep(), i});
  std::sort(slow.begin(), slow.end(), [](const auto &a, const auto &b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  for (size_t i = 0; i < std::min<size_t>(5, slow.size()); ++i)
    console << "  thunk " << slow[i].second << " (" << rows[slow[i].second].what
            << "): " << share(slow[i].first) << "\n";
  return true;
}

} // namespace

int runTrainLoop(TrainBackend &model, const TrainRun &run,
                 llvm::raw_ostream &console, llvm::raw_ostream &errs) {
  const TrainOptions &options = run.options;
  const runtime::dist::DistEnv &env = run.env;
  bool isPackage = run.isPackage;
  bool distributed = env.worldSize > 1;
  bool leader = env.rank == 0;
  const runtime::DataSpec &spec = run.spec;
  const std::optional<runtime::DataSpec> &evalSpec = run.evalSpec;
  const std::optional<runtime::TrainingState> &resumed = run.resumed;
  // The step reads |batch| rows per rank: with --grad-accum=K that is K
  // micro-batches of the model's batch (kiln-accumulate-gradients), and
  // --batch-size names the micro-batch, as in PyTorch.
  int64_t batch = model.batch();
  int64_t microBatches = run.microBatches;
  int64_t microBatch = batch / microBatches;
  if (options.batchSize && options.batchSize != microBatch) {
    printError(errs, trainCommand(),
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
      runtime::openDataset(spec, model.dataSpecs(), dataOptions);
  if (!dataset.isOk()) {
    printError(errs, trainCommand(),
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
    printError(errs, trainCommand(), "--data=" + options.data + ": " +
                                   sampler.status().message());
    return kExitError;
  }
  int64_t stepsPerEpoch =
      runtime::batchCount(sampler.value().numSamples(), batch, /*dropPartial=*/true);
  if (stepsPerEpoch == 0) {
    printError(errs, trainCommand(),
               "--data=" + options.data + ": " + std::to_string(trainSize) +
                   " samples make no full batch of " + std::to_string(batch));
    return kExitError;
  }
  int64_t totalSteps = options.maxSteps;
  if (options.epochs)
    totalSteps = options.maxSteps ? std::min(options.maxSteps,
                                             options.epochs * stepsPerEpoch)
                                  : options.epochs * stepsPerEpoch;

  if (options.checkpointBest && !evalSpec) {
    printError(errs, trainCommand(),
               "--checkpoint-best needs an eval to rank the checkpoints: "
               "give --eval-data=SPEC");
    return kExitUsage;
  }
  // The eval data.
  std::unique_ptr<runtime::Dataset> evalDataset;
  if (evalSpec && model.hasEval()) {
    runtime::DataOptions evalOptions = dataOptions;
    evalOptions.split = "test";
    runtime::StatusOr<std::unique_ptr<runtime::Dataset>> opened =
        runtime::openDataset(*evalSpec, model.evalSpecs(), evalOptions);
    if (!opened.isOk()) {
      printError(errs, trainCommand(), "--eval-data: " + opened.status().message());
      return kExitError;
    }
    evalDataset = std::move(opened.value());
  }

  // The resumed state.
  TrainState state(model, env, run.communicator);
  state.setAsync(options.checkpointAsync);
  state.setKeep(options.keepCheckpoints);
  int64_t stepsDone = 0, epoch = 0, position = 0;
  if (resumed) {
    if (!state.restore(*resumed, errs))
      return kExitError;
    stepsDone = resumed->step;
    epoch = resumed->epoch;
    position = resumed->position;
    model.setStepCounter(stepsDone);
  }
  std::string initialized;
  if (run.initial && !state.initialize(*run.initial, options.initFrom,
                                       options.initStrict, initialized, errs))
    return kExitError;
  // ZeRO checkpoints are sharded (TrainCheckpoint.h): every rank writes one.
  bool sharded = state.sharded();

  std::unique_ptr<llvm::raw_fd_ostream> metrics;
  if (!options.metricsFile.empty() && leader) {
    std::error_code ec;
    metrics = std::make_unique<llvm::raw_fd_ostream>(
        options.metricsFile, ec,
        options.resume ? llvm::sys::fs::OF_Append : llvm::sys::fs::OF_None);
    if (ec) {
      printError(errs, trainCommand(), "--metrics-file=" + options.metricsFile + ": " +
                                     ec.message());
      return kExitError;
    }
  }

  // --tensorboard-dir: rank 0's TensorBoard event file (EventFile.h),
  // flushed at each logged step so a running TensorBoard follows along.
  std::unique_ptr<runtime::EventFileWriter> events;
  if (!options.tensorboardDir.empty() && leader) {
    runtime::StatusOr<std::unique_ptr<runtime::EventFileWriter>> created =
        runtime::EventFileWriter::create(options.tensorboardDir);
    if (!created.isOk()) {
      printError(errs, trainCommand(), "--tensorboard-dir=" + options.tensorboardDir +
                                          ": " + created.status().message());
      return kExitError;
    }
    events = std::move(created.value());
    // Resumed: TensorBoard hides what earlier event files logged past the
    // checkpoint (the interrupted run's last steps), as SummaryWriter's
    // purge_step does.
    if (resumed)
      events->addSessionStart(stepsDone + 1);
  }
  auto flushEvents = [&]() {
    if (!events)
      return true;
    if (runtime::Status s = events->flush(); !s.isOk()) {
      printError(errs, trainCommand(),
                 "--tensorboard-dir=" + options.tensorboardDir + ": " + s.message());
      return false;
    }
    return true;
  };

  console << trainCommand() << ": backend " << model.name() << ", " << options.data << ", batch " << batch;
  if (microBatches > 1)
    console << " (" << microBatches << " micro-batches of " << microBatch
            << ", --grad-accum)";
  console << ", " << totalSteps << " steps";
  if (distributed) {
    console << " (";
    if (!run.strategy.empty())
      console << run.strategy << ", ";
    console << env.worldSize << " ranks, global batch " << batch * env.worldSize
            << ")";
  }
  if (resumed)
    console << " (resumed at step " << stepsDone << ", epoch " << epoch << ", batch "
         << position << ")";
  console << "\n";
  if (!initialized.empty())
    console << trainCommand() << ": parameters from " << initialized << "\n";
  if (evalDataset && !model.evalHasPredictions())
    console << trainCommand() << ": eval reports the loss only (the loss does not come "
            "from kiln.softmax_cross_entropy, so there are no logits)\n";

  // --profile (rank 0): steps profileFrom+1 .. profileTo are timed.
  bool profile = !options.profileFile.empty() && leader, profiling = false;
  int64_t profileFrom = stepsDone + kProfileWarmupSteps,
          profileTo = std::min(totalSteps, profileFrom + options.profileSteps);
  if (profile) {
    std::string error;
    if (!model.setProfiling(false, error)) {
      printError(errs, trainCommand(), "--profile: " + error);
      return kExitError;
    }
    // Where it goes must take it, before any step runs.
    llvm::StringRef dir = llvm::sys::path::parent_path(options.profileFile);
    if (dir.empty())
      dir = ".";
    if (!llvm::sys::fs::is_directory(dir) ||
        llvm::sys::fs::access(dir, llvm::sys::fs::AccessMode::Write)) {
      printError(errs, trainCommand(),
                 "--profile=" + options.profileFile + ": " + dir.str() +
                     (llvm::sys::fs::is_directory(dir)
                          ? " is not writable"
                          : " is not a directory"));
      return kExitError;
    }
    if (profileTo <= profileFrom) {
      printError(errs, trainCommand(),
                 "--profile: this run has " +
                     std::to_string(totalSteps - stepsDone) +
                     " step(s); the profile times the steps after the first " +
                     std::to_string(kProfileWarmupSteps) +
                     " (warm-up and, on a GPU, CUDA Graph capture): run more "
                     "steps");
      return kExitError;
    }
  }

  using Clock = std::chrono::steady_clock;
  Clock::time_point since = Clock::now();
  int64_t samplesSince = 0;
  std::vector<double> losses, epochLosses;
  // On a terminal a progress bar; plain lines otherwise (and in logs),
  // cleared before any other line.
  bool progress = console.is_displayed();
  auto clearProgress = [&] {
    if (progress)
      console << "\r\033[K";
  };
  // The checkpoint of the step just done (its epoch and data position),
  // unless it was written already: at --checkpoint-every, for
  // --checkpoint-best and when a signal stops the run.
  int64_t checkpointed = -1; // the step of the last checkpoint written
  auto checkpointHere = [&]() -> bool {
    if (checkpointed == stepsDone)
      return true;
    runtime::nvtx::Range range("checkpoint at step " +
                               std::to_string(stepsDone));
    clearProgress();
    if (!state.writeCheckpoint(options.checkpointDir,
                               {stepsDone, epoch, position}, options.seed,
                               console, errs))
      return false;
    checkpointed = stepsDone;
    return true;
  };
  // --checkpoint-best: the lowest eval loss so far (DIR/best.json's when
  // resuming), and whether the last eval beat it (saveBest writes it).
  double bestLoss = INFINITY;
  bool bestPending = false;
  if (options.checkpointBest && resumed) {
    std::optional<BestCheckpoint> best =
        readBestCheckpoint(options.checkpointDir, errs);
    if (best) {
      bestLoss = best->evalLoss;
      state.setBest(best->step);
    }
  }
  // --eval-every: the step of the last eval and what it gave, so that an
  // epoch that ends there does not evaluate the same parameters again.
  int64_t evaluatedAt = -1;
  std::optional<EvalResult> lastEval;
  // After an epoch (or the run; |epochEnd| false: every --eval-every steps
  // inside one): eval, a line and a metrics record.
  auto report = [&](int64_t epochNumber, bool epochEnd = true) -> bool {
    double seconds = std::chrono::duration<double>(Clock::now() - since).count();
    double rate = seconds > 0 ? samplesSince / seconds : 0;
    double trainLoss = epochLosses.empty()
                           ? NAN
                           : std::accumulate(epochLosses.begin(), epochLosses.end(), 0.0) /
                                 epochLosses.size();
    std::optional<EvalResult> eval;
    bool again = evaluatedAt == stepsDone; // --eval-every evaluated this step
    if (again)
      eval = lastEval;
    // zero3: rank 0's eval step reads the parameters every rank gathers.
    if (!again && evalSpec && !isPackage &&
        !gatherEvalParameters(model, state, evalDataset != nullptr, errs))
      return false;
    if (evalDataset && !again) {
      // The eval step is the forward model: one micro-batch of rows.
      runtime::nvtx::Range range("eval after step " +
                                 std::to_string(stepsDone));
      eval = evaluate(model, *evalDataset, microBatch, options.evalSubset,
                      errs);
      if (!eval)
        return false;
      console << "eval epoch " << epochNumber << " step " << stepsDone << " loss "
           << llvm::format("%.6f", eval->loss);
      if (std::isfinite(eval->accuracy))
        console << " accuracy " << llvm::format("%.4f", eval->accuracy);
      if (eval->perToken)
        console << " perplexity " << llvm::format("%.4f", eval->perplexity());
      console << " (" << eval->samples << " samples)\n";
      evaluatedAt = stepsDone;
      lastEval = eval;
    }
    if (options.checkpointBest && !again) {
      // Rank 0 evaluates; under ZeRO every rank writes its part of the
      // checkpoint, so it hears whether the eval was the best.
      float improved = eval && eval->loss < bestLoss ? 1.0f : 0.0f;
      if (eval && improved)
        bestLoss = eval->loss;
      if (sharded && run.communicator) {
        runtime::Status s = run.communicator->broadcast(
            &improved, &improved, 1, runtime::PkgDType::F32, 0);
        if (!s.isOk()) {
          printError(errs, trainCommand(), "--checkpoint-best: " + s.message());
          return false;
        }
      }
      bestPending = improved > 0;
    }
    if (metrics)
      writeMetricsRecord(*metrics, stepsDone, epochNumber, eval, trainLoss, rate);
    if (events) {
      if (eval && !again) {
        events->addScalar("eval/loss", eval->loss, stepsDone);
        if (std::isfinite(eval->accuracy))
          events->addScalar("eval/accuracy", eval->accuracy, stepsDone);
        if (eval->perToken)
          events->addScalar("eval/perplexity", eval->perplexity(), stepsDone);
      }
      if (std::isfinite(trainLoss) && epochEnd)
        events->addScalar("train/epoch_loss", trainLoss, stepsDone);
      events->addScalar("train/samples_per_second", rate, stepsDone);
      if (!flushEvents())
        return false;
    }
    if (epochEnd)
      epochLosses.clear();
    samplesSince = 0;
    since = Clock::now();
    return true;
  };

  // --checkpoint-best: after an eval that beat the best, its step's
  // checkpoint (written now unless it was) and DIR/best.json naming it.
  auto saveBest = [&]() -> bool {
    if (!bestPending)
      return true;
    bestPending = false;
    if (!checkpointHere())
      return false;
    // best.json names a whole file: a write in flight first.
    if (!state.finishCheckpoint(console, errs))
      return false;
    // The earlier best is kept until best.json names the new one.
    if (leader && !writeBestCheckpoint(
                      options.checkpointDir,
                      {state.checkpointName(stepsDone), stepsDone, bestLoss},
                      console, errs))
      return false;
    state.moveBest(options.checkpointDir, stepsDone, console, errs);
    return true;
  };

  // Throughput counts every rank's samples (the global batch).
  int64_t globalBatch = batch * env.worldSize;
  Clock::time_point runStart = Clock::now();
  int64_t firstStep = stepsDone;
  HostProfile hostProfile;
  // SIGTERM or SIGINT: stop after a step and checkpoint it (StopSignals.h),
  // in one process (one rank, or mirrored replicas).
  const MirroredReplica *replica = currentReplica();
  int replicas = replica ? replica->devices : 1;
  StopSignals signals(replica || !distributed);
  int stoppedBy = 0;
  while (stepsDone < totalSteps) {
    runtime::Prefetcher batches(*dataset.value(), sampler.value().indices(epoch),
                                batch, /*dropPartial=*/true, 2, position);
    runtime::Batch b;
    bool epochDone = false;
    while (stepsDone < totalSteps) {
      Clock::time_point batchStart = Clock::now();
      runtime::nvtx::push("batch");
      runtime::StatusOr<bool> more = batches.next(b);
      runtime::nvtx::pop();
      if (!more.isOk()) {
        printError(errs, trainCommand(), "--data=" + options.data + ": " +
                                       more.status().message());
        return kExitError;
      }
      if (!more.value()) { // the epoch ran out of full batches
        if (!report(epoch + 1))
          return kExitError;
        ++epoch;
        position = 0;
        epochDone = true;
        if (!saveBest())
          return kExitError;
        break;
      }
      if (profile && !profiling && stepsDone == profileFrom) {
        std::string error;
        if (!model.setProfiling(true, error)) {
          printError(errs, trainCommand(), "--profile: " + error);
          return kExitError;
        }
        profiling = true;
      }
      double loss = 0;
      Clock::time_point callStart = Clock::now();
      {
        runtime::nvtx::Range range("step " + std::to_string(stepsDone + 1));
        if (!model.step(b, loss, errs))
          return kExitError;
      }
      if (profiling) {
        HostProfile &h = hostProfile;
        h.batchStart = batchStart;
        h.callStart = callStart;
        h.callEnd = Clock::now();
        h.batchMs += h.ms(batchStart, callStart);
        h.callMs += h.ms(callStart, h.callEnd);
        ++h.steps;
      }
      if (profiling && stepsDone + 1 == profileTo) {
        std::vector<ThunkTime> rows = model.profile();
        hostProfile.thunksStart = model.profileStepStart();
        std::string error;
        (void)model.setProfiling(false, error);
        profiling = false;
        clearProgress();
        if (!writeProfile(rows, hostProfile, options.profileFile,
                          profileFrom + 1, profileTo, console, errs))
          return kExitError;
      }
      // --checkpoint-async: a write that finished is reported.
      if (state.checkpointWritten()) {
        clearProgress();
        if (!state.finishCheckpoint(console, errs))
          return kExitError;
      }
      if (!std::isfinite(loss)) {
        printError(errs, trainCommand(),
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
        clearProgress();
        console << "step " << stepsDone << " loss " << llvm::format("%.6f", loss) << "\n";
        if (events) {
          events->addScalar("train/loss", loss, stepsDone);
          if (!flushEvents())
            return kExitError;
        }
      }
      if (epochDone) {
        if (!report(epoch + 1))
          return kExitError;
        ++epoch;
        position = 0;
      } else if (options.evalEvery && stepsDone % options.evalEvery == 0 &&
                 stepsDone != totalSteps) {
        // Inside an epoch (the run's end reports below); its train loss so
        // far.
        clearProgress();
        if (!report(epoch + 1, /*epochEnd=*/false))
          return kExitError;
      }
      bool atEnd = stepsDone == totalSteps;
      if (!options.checkpointDir.empty() && (leader || sharded) &&
          (atEnd || (options.checkpointEvery &&
                     stepsDone % options.checkpointEvery == 0))) {
        if (!checkpointHere())
          return kExitError;
      }
      if (!saveBest())
        return kExitError;
      // (A signal during the last step ends nothing: the run is done.)
      if (stepsDone < totalSteps &&
          (stoppedBy = signals.stopAfter(stepsDone, replicas)))
        break;
      if (epochDone)
        break;
    }
    if (!epochDone || stoppedBy)
      break;
  }
  if (stoppedBy) {
    // The step that finished is checkpointed (unless it just was), and
    // the run ends as the signal would have ended it.
    clearProgress();
    bool save = !options.checkpointDir.empty() && (leader || sharded);
    if (save && !checkpointHere())
      return kExitError;
    if (!state.finishCheckpoint(console, errs))
      return kExitError;
    if (leader)
      console << trainCommand() << ": stopped by " << stopSignalName(stoppedBy)
              << " after step " << stepsDone
              << (save ? "; --resume continues from its checkpoint"
                       : " (no --checkpoint-dir: nothing was saved)")
              << "\n";
    return 128 + stoppedBy;
  }
  // --checkpoint-async: the last write is waited for.
  if (!state.finishCheckpoint(console, errs))
    return kExitError;
  // A run that stops inside an epoch still reports where it got to.
  if (position != 0 && !epochLosses.empty())
    if (!report(epoch + 1) || !saveBest())
      return kExitError;
  if (losses.empty())
    return kExitOk;
  int64_t k = std::max<int64_t>(1, static_cast<int64_t>(losses.size()) / 4);
  double firstMean = std::accumulate(losses.begin(), losses.begin() + k, 0.0) / k;
  double lastMean = std::accumulate(losses.end() - k, losses.end(), 0.0) / k;
  console << trainCommand() << ": mean loss of the first " << k << " steps "
       << llvm::format("%.6f", firstMean) << ", of the last " << k << " steps "
       << llvm::format("%.6f", lastMean) << "\n";
  // fp16 mixed precision: where the dynamic loss scale ended.
  const std::vector<StateEntry> &stateEntries = model.state();
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
    runtime::TensorValues scale = model.readState(scaleEntry);
    runtime::TensorValues skipped = model.readState(skippedEntry);
    if (scale.size() > 0 && skipped.size() > 0)
      console << trainCommand() << ": fp16 loss scale " << llvm::format("%g", scale[0]) << ", "
           << llvm::format("%.0f", skipped[0])
           << " steps skipped in all (inf or NaN gradients)\n";
  }
  return kExitOk;
}

} // namespace kiln::cli
