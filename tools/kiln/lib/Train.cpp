//===- Train.cpp - `kiln train` -------------------------------------------===//
//
// `kiln train FILE [--backend=cpu|reference] --data=SPEC ...` trains a
// model: the training step runs on a TrainBackend (TrainBackend.h: the CPU
// runtime by default, the CUDA runtime, or the reference interpreter), and
// everything around it lives in this file and its neighbours, shared by
// all of them:
//
//   TrainFlags.cpp       the flags, their --help and checks
//                        (TrainLoopFlags.cpp: the loop's, which a packed
//                        trainer of `kiln pack` shares)
//   TrainCheckpoint.cpp  --resume and checkpoints (ZeRO's sharded ones too)
//   TrainEval.cpp        the eval pass and the metrics records
//   TrainLoop.cpp        the data, the steps, progress, checkpoints,
//                        --metrics-file and --tensorboard-dir (TrainLoop.h)
//   Train.cpp            the rank's place in the job (launcher, mirrored
//                        replicas, the communicator), the device and the
//                        backend, then the loop
//
// TrainLoop.cpp, TrainLoopFlags.cpp, TrainCheckpoint.cpp, TrainEval.cpp and
// CpuPackageBackend.cpp need no MLIR (the KilnTrainLoop library): the
// trainer stub of `kiln pack` (tools/kiln-trainer) runs them as they are.
//
//===----------------------------------------------------------------------===//

#include "tools/kiln/lib/CudaBackend.h"
#include "tools/kiln/lib/Diagnostics.h"
#include "tools/kiln/lib/Driver.h"
#include "tools/kiln/lib/Mirrored.h"
#include "tools/kiln/lib/TrainBackend.h"
#include "tools/kiln/lib/TrainCheckpoint.h"
#include "tools/kiln/lib/TrainFlags.h"
#include "tools/kiln/lib/TrainLoop.h"

#include "passes/Pipelines.h"
#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/data/DataSpec.h"
#include "runtime/dist/Communicator.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cstdlib>
#include <mutex>

namespace kiln::cli {

int runTrain(llvm::ArrayRef<std::string> args, llvm::raw_ostream &outs,
             llvm::raw_ostream &errs) {
  TrainOptions options;
  if (std::optional<int> exit = parseTrainFlags(args, options, outs, errs))
    return *exit;
  const std::string &backend = options.backendFlag, &device = options.device,
                    &threads = options.threadsFlag,
                    &collectiveTimeout = options.collectiveTimeout;
  std::string &devices = options.devices;
  const OptimizerFlags &optimizerFlags = options.optimizerFlags;
  const AmpFlags &ampFlags = options.ampFlags;
  const DistFlags &distFlags = options.distFlags;
  CudaBackendOptions &cudaOptions = options.cuda;

  // Where this process stands in the job: RANK, WORLD_SIZE, ... as `kiln
  // launch` or torchrun set them; absent, rank 0 of 1.
  runtime::StatusOr<runtime::dist::DistEnv> distEnv =
      runtime::dist::distEnvFromEnvironment();
  if (!distEnv.isOk()) {
    printError(errs, trainCommand(), distEnv.status().message());
    return kExitError;
  }
  runtime::dist::DistEnv env = distEnv.value();
  if (!parseDistFlags(trainCommand(), distFlags, options.pipeline, errs))
    return kExitError;
  // Without --device or --backend: cuda when there is a GPU and the input
  // runs on it (chooseCudaByDefault), else the CPU, saying why.
  auto chooseDefaultBackend = [&](llvm::raw_ostream &os) {
    std::string line;
    if (chooseCudaByDefault(options.input, line))
      options.backend = "cuda";
    else
      os << "kiln train: " << line << "\n";
  };
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
    printError(errs, trainCommand(),
               "--devices=" + devices + " needs --strategy=mirrored");
    return kExitError;
  }
  if (mirrored && !replica) {
    if (env.worldSize > 1) {
      printError(errs, trainCommand(),
                 "--strategy=mirrored runs its devices in one process, but "
                 "the launcher started " + std::to_string(env.worldSize) +
                     " processes: use --strategy=data-parallel under a "
                     "launcher");
      return kExitError;
    }
    // The replicas are GPUs 0..N-1 with --device=cuda (or --backend=cuda),
    // and by default when there is a GPU, as MirroredStrategy() takes every
    // GPU; else CPU device instances.
    if (device.empty() && backend.empty())
      chooseDefaultBackend(outs);
    bool cuda = options.backend == "cuda";
    if (cuda && device != "" && device != "cuda") {
      printError(errs, trainCommand(),
                 "--device=" + device +
                     ": --strategy=mirrored runs one replica on each of CUDA "
                     "devices 0 to N-1 (--devices=N); use --device=cuda, and "
                     "CUDA_VISIBLE_DEVICES to choose the GPUs");
      return kExitError;
    }
    return runMirrored(args,
                       {devices, distFlags.worldSize, threads,
                        collectiveTimeout, options.backend, cuda},
                       runTrain, outs, errs);
  }
  if (replica) {
    env.rank = env.localRank = replica->rank;
    env.worldSize = env.localWorldSize = replica->devices;
    if (replica->cuda)
      options.backend = "cuda"; // CUDA device |rank| (below)
  }
  if (!distFlags.worldSize.empty() && options.pipeline.worldSize != env.worldSize) {
    printError(errs, trainCommand(),
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
                    !distFlags.gradCompression.empty() ||
                    distFlags.syncBatchNorm)) {
    printError(errs, trainCommand(),
               options.input + ": a package has its strategy compiled in; "
                               "drop --strategy, --bucket-mb, --grad-accum, "
                               "--grad-compression and --sync-batch-norm or "
                               "train the .kiln file");
    return kExitError;
  }
  if (distributed && !isPackage &&
      options.pipeline.strategy == Strategy::none) {
    printError(errs, trainCommand(),
               "the launcher started " + std::to_string(env.worldSize) +
                   " ranks but no --strategy was given: pass "
                   "--strategy=data-parallel (each rank trains on its share "
                   "of the data and the gradients are averaged)");
    return kExitError;
  }
  if (!distributed && options.pipeline.strategy != Strategy::none) {
    if (std::string problem = checkPipelineOptions(options.pipeline);
        !problem.empty()) {
      printError(errs, trainCommand(), problem);
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
      // One rank's batch statistics are the whole batch's.
      options.pipeline.syncBatchNorm = false;
    }
  }
  if (distributed && !isPackage) {
    if (std::string problem = checkPipelineOptions(options.pipeline);
        !problem.empty()) {
      printError(errs, trainCommand(), problem);
      return kExitError;
    }
  }
  // Only rank 0 prints progress, eval lines and the summary, and writes
  // checkpoints and metrics: under data-parallel every rank holds the same
  // parameters and optimizer state. Errors are printed by every rank.
  bool leader = env.rank == 0;
  std::optional<double> timeoutSeconds =
      collectiveTimeoutSeconds(options, trainCommand(), errs);
  if (!timeoutSeconds)
    return kExitError;
  llvm::raw_ostream &userOuts = outs;
  llvm::raw_null_ostream quiet;
  llvm::raw_ostream &console = leader ? userOuts : quiet;
  runtime::DataSpec spec;
  std::optional<runtime::DataSpec> evalSpec;
  if (!parseTrainData(options, spec, evalSpec, errs))
    return kExitError;

  // Resume state, read before anything is compiled so a bad checkpoint
  // fails fast.
  std::optional<runtime::TrainingState> resumed;
  if (options.resume && !readResumeState(options, resumed, errs))
    return kExitError;
  std::optional<runtime::WeightsFile> initial;
  if (!readInitialWeights(options, initial, errs))
    return kExitError;

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
  // Ranks on one machine share its cores: each gets its share.
  backendOptions.threads = rankThreads(options.threads, env);
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
    printError(errs, trainCommand(),
               options.input + ": a package has its precision compiled in; "
                               "drop --amp or train the .kiln file");
    return kExitError;
  }
  if ((!ampFlags.remat.empty() || !ampFlags.rematScope.empty() ||
       !ampFlags.memoryBudget.empty()) &&
      llvm::sys::path::extension(options.input) == ".kpkg") {
    printError(errs, trainCommand(),
               options.input + ": a package has its recomputation and memory "
                               "plan compiled in; drop --remat, --remat-scope "
                               "and --memory-budget or train the .kiln file");
    return kExitError;
  }
  if (options.backend == "reference" &&
      llvm::sys::path::extension(options.input) == ".kpkg") {
    printError(errs, trainCommand(),
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
      printError(errs, trainCommand(),
                 "--backend=" + options.backend +
                     ": runs one rank (the reference interpreter has no "
                     "collectives across processes); use --backend=cpu under "
                     "the launcher");
      return kExitError;
    }
    // GPUs: NCCL on this rank's device (LOCAL_RANK, or --device=cuda:N).
    bool cuda = options.backend == "cuda";
    int cudaDevice = device.empty() || device == "cuda" ? env.localRank
                                                        : cudaOptions.device;
    runtime::StatusOr<std::unique_ptr<runtime::dist::Communicator>> created =
        createRankCommunicator(env, *timeoutSeconds, cuda, cudaDevice);
    if (!created.isOk()) {
      // The communicator's errors already start with "rank R".
      printError(errs, trainCommand(), created.status().message());
      return kExitError;
    }
    communicator = std::move(created.value());
    backendOptions.communicator = communicator.get();
  }
  // Mirrored replicas compile and load their steps one at a time.
  static std::mutex compileMutex;
  std::unique_lock<std::mutex> compiling(compileMutex, std::defer_lock);
  if (replica)
    compiling.lock();
  // Under a launcher, --device=cuda means this rank's GPU (LOCAL_RANK); its
  // collectives run through NCCL (above) on that GPU. A mirrored replica's
  // GPU is its rank's, its NCCL communicator made by runMirrored.
  if ((distributed || replica) && options.backend == "cuda" &&
      (device.empty() || device == "cuda"))
    cudaOptions.device = env.localRank;
  // Without --device or --backend: the GPU when there is one (one process).
  if (device.empty() && backend.empty() && !distributed)
    chooseDefaultBackend(console);
  std::unique_ptr<TrainBackend> backendImpl =
      options.backend == "cuda"
          ? createCudaBackend(backendOptions, cudaOptions, trainCommand(), console, errs)
      : options.backend == "cpu"
          ? createCpuBackend(backendOptions, trainCommand(), console, errs)
          : createReferenceBackend(backendOptions, trainCommand(), errs);
  if (compiling.owns_lock())
    compiling.unlock();
  if (replica && replica->compiled)
    replica->compiled(); // every replica's step is ready (Mirrored.h)
  if (!backendImpl)
    return kExitError;
  TrainBackend &model = *backendImpl;
  TrainRun run(options);
  run.env = env;
  run.communicator = communicator.get();
  run.isPackage = isPackage;
  run.microBatches = isPackage ? 1 : options.pipeline.gradAccum;
  if (!isPackage)
    run.strategy = stringifyStrategy(options.pipeline.strategy).str();
  run.spec = spec;
  run.evalSpec = evalSpec;
  run.resumed = resumed;
  run.initial = std::move(initial);
  return runTrainLoop(model, run, console, errs);
}

} // namespace kiln::cli
