//===- Trainer.cpp - the trainer stub of `kiln pack` ----------------------===//
//
// The executable `kiln pack` copies and appends a compiled model to
// (tools/kiln/lib/PackedTrainer.h). Run as such a trainer it reads its own
// file (/proc/self/exe), checks that this CPU runs the kernels, loads the
// kernel library and the packages from memory and trains with
// `kiln train`'s loop and flags (TrainLoop.h), on the CPU runtime; under
// `kiln launch` (or torchrun) each process is a rank and the collectives
// go through Gloo, and a step packed for mirrored replicas runs them as
// threads of this process (Mirrored.h), as kiln train does. A CUDA trainer
// (`kiln pack --target=cuda`) runs its packages on a GPU through the CUDA
// libraries the runtime dlopens, its collectives through NCCL. It links neither
// MLIR nor LLVM's code generator: only LLVM's support library, statically.
//
//===----------------------------------------------------------------------===//

#include "tools/kiln/lib/CudaBackend.h"
#include "tools/kiln/lib/Driver.h"
#include "tools/kiln/lib/Flags.h"
#include "tools/kiln/lib/Mirrored.h"
#include "tools/kiln/lib/PackedTrainer.h"
#include "tools/kiln/lib/TrainBackend.h"
#include "tools/kiln/lib/TrainCheckpoint.h"
#include "tools/kiln/lib/TrainFlags.h"
#include "tools/kiln/lib/TrainLoop.h"

#include "runtime/cpu/SharedObjectKernelLoader.h"
#include "runtime/dist/Communicator.h"

#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <string>
#include <vector>

using namespace kiln;
using namespace kiln::cli;

namespace {

int train(const std::string &self, const std::string &name,
          llvm::ArrayRef<std::string> args, llvm::raw_ostream &outs,
          llvm::raw_ostream &errs) {
  // The training loop's lines and errors carry the trainer's name.
  setTrainCommand(name);
  runtime::StatusOr<PackedTrainer> packed = readPackedTrainer(self);
  if (!packed.isOk()) {
    std::string message = packed.status().message();
    if (message.find(kNoPayload) != std::string::npos)
      message = name + " is the trainer stub of `kiln pack` and trains nothing by "
                       "itself: write a trainer with `kiln pack MODEL -o TRAINER`";
    printError(errs, name, message);
    return kExitError;
  }
  PackedTrainer &trainer = packed.value();
  const std::string model = trainer.manifest["model"];
  const std::string cpu = trainer.manifest["cpu"];
  const bool cuda = trainer.manifest["target"] == "cuda";
  const std::string kernels =
      cuda ? "CUDA kernels (" + trainer.manifest["cuda"] + ")"
           : "kernels compiled ahead of time for " + cpu + " CPUs";

  TrainOptions options;
  TrainLoopFlagText loopFlags;
  FlagParser parser(
      name, "[--data=SPEC] [options]",
      "Trains " + model + " (packed by `kiln pack` from " +
          trainer.manifest["source"] +
          (trainer.manifest["flags"].empty()
               ? std::string()
               : " with " + trainer.manifest["flags"]) +
          (cuda ? ") on a GPU" : ") on the CPU") +
          ", as `kiln train` would: the same data, eval,\n"
          "checkpoints (--resume), metrics and TensorBoard files. It holds " +
          kernels + "; " +
          (trainer.eval.empty() ? "it has no eval step (a package was packed)."
                                : "it evaluates after each epoch.") +
          (trainer.manifest["strategy"] == "mirrored"
               ? "\nIts step was packed for " + trainer.manifest["world-size"] +
                     " mirrored replicas, threads of this process: " +
                     (cuda ? "GPUs 0 to N-1, the collectives through NCCL."
                           : "CPU device instances sharing --threads.")
               : "\nIts step was compiled for " +
                     trainer.manifest["world-size"] +
                     " rank(s); under `kiln launch` each process is one "
                     "rank."));
  addTrainLoopFlags(parser, options, loopFlags);
  std::string device, cudaGraphs, autotune, cudaPdl, tf32;
  if (cuda) {
    parser.addValue("device", &device, "N",
                    "the CUDA device (default 0; under kiln launch, each "
                    "rank's LOCAL_RANK)");
    parser.addValue("cuda-graphs", &cudaGraphs, "on|off",
                    "capture the step into a CUDA Graph after the warm-up step "
                    "(default on)");
    parser.addValue("autotune", &autotune, "on|off",
                    "time cuBLASLt's algorithms and the attention's variants "
                    "at load and keep the choices (default on)");
    parser.addValue("cuda-pdl", &cudaPdl, "on|off",
                    "programmatic dependent launch on sm_90 and newer "
                    "(default on)");
    parser.addValue("tf32", &tf32, "on|off",
                    "f32 matmuls and convolutions in TF32 on tensor cores "
                    "(default off)");
  }
  if (std::optional<int> exit = parser.parseOrExit(args, outs, errs))
    return *exit;
  CudaBackendOptions cudaOptions;
  if (!applyOnOff(name, "cuda-graphs", cudaGraphs, cudaOptions.graphs, errs) ||
      !applyOnOff(name, "autotune", autotune, cudaOptions.autotune, errs) ||
      !applyOnOff(name, "cuda-pdl", cudaPdl, cudaOptions.programmaticLaunch,
                  errs) ||
      !applyOnOff(name, "tf32", tf32, cudaOptions.tf32, errs))
    return kExitError;
  if (std::optional<int> exit = applyTrainLoopFlags(loopFlags, options, errs))
    return *exit;
  options.input = model;

  if (!cuda && !cpuSupportsLevel(cpu)) {
    printError(errs, name,
               "its kernels were compiled for " + cpu +
                   " CPUs and this CPU lacks some of their instructions: pack "
                   "the model again with `kiln pack --cpu=...` for this machine");
    return kExitError;
  }
  runtime::StatusOr<runtime::dist::DistEnv> distEnv =
      runtime::dist::distEnvFromEnvironment();
  if (!distEnv.isOk()) {
    printError(errs, name, distEnv.status().message());
    return kExitError;
  }
  runtime::dist::DistEnv env = distEnv.value();
  // A step packed for mirrored replicas: one process, a replica per GPU (or
  // CPU device instance), each a thread running this function (Mirrored.h).
  const MirroredReplica *replica = currentReplica();
  if (trainer.manifest["strategy"] == "mirrored" && !replica) {
    const std::string &replicas = trainer.manifest["world-size"];
    if (env.worldSize > 1) {
      printError(errs, name,
                 "its step was packed for " + replicas +
                     " mirrored replicas in one process, and the launcher "
                     "started " +
                     std::to_string(env.worldSize) +
                     ": run it without a launcher (or pack with "
                     "--strategy=data-parallel for kiln launch)");
      return kExitError;
    }
    if (!device.empty()) {
      printError(errs, name,
                 "--device=" + device + ": its " + replicas +
                     " mirrored replicas run on CUDA devices 0 to " +
                     std::to_string(std::stoi(replicas) - 1) +
                     " (CUDA_VISIBLE_DEVICES chooses them)");
      return kExitError;
    }
    if (cuda) {
      std::string reason, gpus;
      int count = cudaDeviceCount(reason, gpus);
      if (count < std::stoi(replicas)) {
        printError(errs, name,
                   "its step was packed for " + replicas +
                       " mirrored replicas, one per GPU, and this machine "
                       "has " +
                       (count ? gpus : reason));
        return kExitError;
      }
    }
    return runMirrored(
        args,
        {replicas, "", options.threadsFlag, options.collectiveTimeout,
         cuda ? "cuda" : "cpu", cuda},
        [&](llvm::ArrayRef<std::string> replicaArgs, llvm::raw_ostream &o,
            llvm::raw_ostream &e) {
          return train(self, name, replicaArgs, o, e);
        },
        outs, errs);
  }
  if (replica) {
    env.rank = env.localRank = replica->rank;
    env.worldSize = env.localWorldSize = replica->devices;
  }
  cudaOptions.device = env.localRank;
  if (!device.empty()) {
    std::optional<int64_t> index = parseInteger(name, "device", device, 0, errs);
    if (!index)
      return kExitError;
    cudaOptions.device = static_cast<int>(*index);
  }
  if (std::to_string(env.worldSize) != trainer.manifest["world-size"]) {
    printError(errs, name,
               "its step was compiled for " + trainer.manifest["world-size"] +
                   " rank(s) and " + std::to_string(env.worldSize) +
                   " started (WORLD_SIZE): start it with `kiln launch "
                   "--nproc-per-node=" + trainer.manifest["world-size"] +
                   " -- " + name + " ...`, or pack for this world size");
    return kExitError;
  }
  bool leader = env.rank == 0;
  llvm::raw_null_ostream quiet;
  llvm::raw_ostream &console = leader ? outs : quiet;

  TrainRun run(options);
  run.env = env;
  run.isPackage = true;
  if (!parseTrainData(options, run.spec, run.evalSpec, errs))
    return kExitError;
  if (options.resume && !readResumeState(options, run.resumed, errs))
    return kExitError;
  if (!readInitialWeights(options, run.initial, errs))
    return kExitError;

  std::unique_ptr<runtime::dist::Communicator> communicator;
  if (replica) {
    run.communicator = replica->communicator; // null for one replica
  } else if (env.worldSize > 1) {
    std::optional<double> timeout = collectiveTimeoutSeconds(options, name, errs);
    if (!timeout)
      return kExitError;
    runtime::StatusOr<std::unique_ptr<runtime::dist::Communicator>> created =
        createRankCommunicator(env, *timeout, cuda, cudaOptions.device);
    if (!created.isOk()) {
      printError(errs, name, created.status().message());
      return kExitError;
    }
    communicator = std::move(created.value());
    run.communicator = communicator.get();
  }

  // The packages, from memory; the eval step only where eval runs (rank 0).
  auto fill = [&](auto &package) {
    package.input = model;
    package.trainPath = name + ":step";
    package.trainBytes = std::move(trainer.step);
    if (run.evalSpec && leader && !trainer.eval.empty()) {
      package.evalPath = name + ":eval";
      package.evalBytes = std::move(trainer.eval);
    }
    package.communicator = run.communicator;
  };
  std::unique_ptr<TrainBackend> backend;
  if (cuda) {
    if (std::string reason; !cudaDeviceUsable(cudaOptions.device, reason)) {
      printError(errs, name,
                 reason + ": this trainer runs its step on a GPU (pack the "
                          "model without --target=cuda for the CPU)");
      return kExitError;
    }
    CudaPackageOptions package;
    fill(package);
    backend = createCudaPackageBackend(std::move(package), cudaOptions, name,
                                       console, errs);
  } else {
    CpuPackageOptions package;
    fill(package);
    package.threads = rankThreads(options.threads, env);
    if (replica && options.threads)
      package.threads = replica->threads; // --threads is the process's
    runtime::StatusOr<std::unique_ptr<runtime::cpu::KernelLoader>> loader =
        runtime::cpu::createSharedObjectKernelLoader(trainer.kernels,
                                                     name + "'s kernel library");
    if (!loader.isOk()) {
      printError(errs, name, loader.status().message());
      return kExitError;
    }
    package.loader = std::move(loader.value());
    backend = createCpuPackageBackend(std::move(package), name, errs);
  }
  if (replica && replica->compiled)
    replica->compiled(); // every replica's step is loaded (Mirrored.h)
  if (!backend)
    return kExitError;
  console << name << ": " << model << ", packed with " << kernels << "\n";
  return runTrainLoop(*backend, run, console, errs);
}

} // namespace

int main(int argc, char **argv) {
  std::string name = argc > 0 ? argv[0] : "trainer";
  size_t slash = name.rfind('/');
  if (slash != std::string::npos)
    name = name.substr(slash + 1);
  std::vector<std::string> args(argv + 1, argv + argc);
  int code = train("/proc/self/exe", name, args, llvm::outs(), llvm::errs());
  llvm::outs().flush();
  return code;
}
