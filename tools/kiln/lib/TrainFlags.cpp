//===- TrainFlags.cpp - `kiln train`'s flags -------------------------------===//
//
// Declares `kiln train`'s flags (its --help), parses them into TrainOptions
// and checks what the flags alone decide: the backend and device (a CUDA
// device must be usable), --cuda-graphs, the counts, --resume's checkpoint
// directory, the optimizer and the precision; and the data specs.
//
//===----------------------------------------------------------------------===//

#include "tools/kiln/lib/TrainFlags.h"

#include "tools/kiln/lib/Diagnostics.h"
#include "tools/kiln/lib/Driver.h"
#include "tools/kiln/lib/Flags.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"

namespace kiln::cli {

std::optional<int> parseTrainFlags(llvm::ArrayRef<std::string> args,
                                   TrainOptions &options,
                                   llvm::raw_ostream &outs,
                                   llvm::raw_ostream &errs) {
  std::string &backend = options.backendFlag, &device = options.device,
              &devices = options.devices;
  TrainLoopFlagText loopFlags;
  OptimizerFlags &optimizerFlags = options.optimizerFlags;
  AmpFlags &ampFlags = options.ampFlags;
  DistFlags &distFlags = options.distFlags;
  FlagParser parser(
      trainCommand().str(), "FILE [--backend=cpu] [--data=SPEC] [options]",
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
      "  zero3          P/N (+ 2 buckets)  one bucket + P/N   2P/N\n"
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
                  "this kiln compiles CUDA, else cpu; the choice is printed); "
                  "under kiln launch, cuda is each rank's LOCAL_RANK GPU and "
                  "the collectives go through NCCL");
  std::string cudaGraphs, fuseAttention, autotune, cudaPdl, tf32;
  parser.addValue("cuda-graphs", &cudaGraphs, "on|off",
                  "cuda: capture the step into a CUDA Graph after the warm-up "
                  "step (default on)");
  parser.addValue("cuda-pdl", &cudaPdl, "on|off",
                  "cuda: launch each generated kernel that follows a kernel "
                  "or GEMM with programmatic dependent launch on sm_90 and "
                  "newer, its blocks starting while that one finishes "
                  "(default on)");
  parser.addValue("autotune", &autotune, "on|off",
                  "cuda: at load, time cuBLASLt's first 8 algorithms for "
                  "each GEMM shape (the convolutions' too) and the "
                  "attention's kernel variants, run the fastest and keep the choices in $KILN_CACHE_DIR "
                  "(default on; off: the first of each, the same on every "
                  "machine)");
  parser.addValue("tf32", &tf32, "on|off",
                  "cuda: f32 matmuls and convolutions on tensor cores in "
                  "TF32 (10-bit mantissa inputs, f32 accumulation), as "
                  "torch.backends.cuda.matmul.allow_tf32 (default off: "
                  "full f32; bf16 and fp16 matmuls are unaffected)");
  parser.addValue("fuse-attention", &fuseAttention, "on|off",
                  "cuda: compile attention into fused kiln.attention library "
                  "calls (default on; no effect on the cpu and reference "
                  "backends)");
  addTrainLoopFlags(parser, options, loopFlags);
  parser.addValue("devices", &devices, "N",
                  "--strategy=mirrored: N replicas in this process, each a "
                  "rank with its own step and a batch of the compiled size "
                  "(global batch: N times it): GPUs 0 to N-1 with "
                  "--device=cuda (and by default when there is a GPU; their "
                  "collectives through NCCL), else CPU device instances "
                  "with their share of the threads; default: every GPU, "
                  "else one per core");
  parser.addValue("dump-dir", &options.pipeline.dumpDir, "DIR",
                  "write the IR after every pass, and (cpu) the compiled "
                  "packages, here");
  addDistFlags(parser, distFlags,
               "number of ranks (default: WORLD_SIZE from the launcher, else "
               "1); must agree with the launcher");
  addAmpFlags(parser, ampFlags);
  addOptimizerFlags(parser, optimizerFlags);
  if (std::optional<int> exit = parser.parseOrExit(args, outs, errs))
    return *exit;
  if (!backend.empty())
    options.backend = backend;
  CudaBackendOptions &cudaOptions = options.cuda;
  if (!device.empty()) {
    llvm::StringRef d(device), index;
    bool cuda = d == "cuda" || (d.starts_with("cuda:") &&
                                !(index = d.drop_front(5)).empty() &&
                                llvm::all_of(index, llvm::isDigit));
    if (d != "cpu" && !cuda) {
      printError(errs, trainCommand(),
                 "--device=" + device + ": expected cpu or cuda[:N], found '" +
                     device + "'");
      return kExitError;
    }
    unsigned cudaIndex = 0;
    if (cuda && !index.empty() && index.getAsInteger(10, cudaIndex)) {
      printError(errs, trainCommand(), "--device=" + device + ": the index is too large");
      return kExitError;
    }
    cudaOptions.device = static_cast<int>(cudaIndex);
    if (cuda || backend.empty())
      options.backend = cuda ? "cuda" : "cpu";
  }
  if (options.backend != "cpu" && options.backend != "reference" &&
      options.backend != "cuda") {
    printError(errs, trainCommand(),
               "--backend=" + options.backend + ": expected cpu, cuda or reference");
    return kExitError;
  }
  if (cudaGraphs != "" && cudaGraphs != "on" && cudaGraphs != "off") {
    printError(errs, trainCommand(), "--cuda-graphs=" + cudaGraphs + ": expected on or off");
    return kExitError;
  }
  cudaOptions.graphs = cudaGraphs != "off";
  if (!applyOnOff(trainCommand(), "autotune", autotune, cudaOptions.autotune,
                  errs) ||
      !applyOnOff(trainCommand(), "cuda-pdl", cudaPdl,
                  cudaOptions.programmaticLaunch, errs) ||
      !applyOnOff(trainCommand(), "tf32", tf32, cudaOptions.tf32, errs))
    return kExitError;
  if (!applyOnOff(trainCommand(), "fuse-attention", fuseAttention,
                  options.pipeline.fuseAttention, errs))
    return kExitError;
  if (options.backend == "cuda") {
    std::string reason;
    if (!cudaDeviceUsable(cudaOptions.device, reason)) {
      printError(errs, trainCommand(),
                 (device.empty() ? std::string("--backend=cuda") : "--device=" + device) +
                     ": " + reason + "; use --device=cpu");
      return kExitError;
    }
  }
  if (std::optional<int> exit = applyTrainLoopFlags(loopFlags, options, errs))
    return *exit;
  if (!parseOptimizerFlags(trainCommand(), optimizerFlags, options.pipeline.optimizer,
                           errs))
    return kExitError;
  if (!parseAmpFlags(trainCommand(), ampFlags, options.pipeline, errs))
    return kExitError;
  return std::nullopt;
}

} // namespace kiln::cli
