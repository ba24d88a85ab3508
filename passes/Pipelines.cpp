//===- Pipelines.cpp - the compile pipeline, built from options -----------===//
//
// One function decides which passes run for a set of options, so `kiln
// compile`, the tests and later `kiln train` run the same pipeline. Stage
// dumps are a pass instrumentation: they see the IR after each pass without
// the passes knowing.
//
//===----------------------------------------------------------------------===//

#include "passes/Pipelines.h"

#include "passes/Passes.h"
#include "passes/Rematerialize.h"
#include "runtime/Units.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Pass/PassInstrumentation.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Regex.h"
#include "llvm/Support/ToolOutputFile.h"

#include <iterator>
#include <limits>

namespace kiln {

using runtime::formatBytes;

namespace {

struct StrategyName {
  Strategy strategy;
  llvm::StringLiteral name;
};
constexpr StrategyName kStrategies[] = {
    {Strategy::none, "none"},
    {Strategy::mirrored, "mirrored"},
    {Strategy::dataParallel, "data-parallel"},
    {Strategy::zero1, "zero1"},
    {Strategy::zero2, "zero2"},
    {Strategy::zero3, "zero3"},
    {Strategy::parameterServer, "parameter-server"},
    {Strategy::pipeline, "pipeline"},
    {Strategy::tensorParallel, "tensor-parallel"},
};

} // namespace

std::optional<TargetKind> parseTarget(llvm::StringRef text, int64_t &cudaArch) {
  cudaArch = 0;
  if (text == "cpu")
    return TargetKind::cpu;
  if (text == "cuda")
    return TargetKind::cuda;
  llvm::StringRef arch;
  if (text.starts_with("cuda:sm_")) {
    arch = text.drop_front(llvm::StringRef("cuda:sm_").size());
    int64_t value;
    if (!arch.empty() && !arch.getAsInteger(10, value) && value >= 50 &&
        value <= 999) {
      cudaArch = value;
      return TargetKind::cuda;
    }
  }
  return std::nullopt;
}

std::string stringifyTarget(TargetKind target, int64_t cudaArch) {
  switch (target) {
  case TargetKind::none:
    return "none";
  case TargetKind::cpu:
    return "cpu";
  case TargetKind::cuda:
    return cudaArch ? "cuda:sm_" + std::to_string(cudaArch) : "cuda";
  }
  return "none";
}

std::optional<Strategy> parseStrategy(llvm::StringRef text) {
  for (const StrategyName &s : kStrategies)
    if (s.name == text)
      return s.strategy;
  return std::nullopt;
}

llvm::StringRef stringifyStrategy(Strategy strategy) {
  for (const StrategyName &s : kStrategies)
    if (s.strategy == strategy)
      return s.name;
  return "none";
}

std::optional<AmpMode> parseAmp(llvm::StringRef text) {
  if (text == "off")
    return AmpMode::off;
  if (text == "bf16")
    return AmpMode::bf16;
  if (text == "fp16")
    return AmpMode::fp16;
  return std::nullopt;
}

llvm::StringRef stringifyAmp(AmpMode amp) {
  switch (amp) {
  case AmpMode::off:
    return "off";
  case AmpMode::bf16:
    return "bf16";
  case AmpMode::fp16:
    return "fp16";
  }
  return "off";
}

std::string checkPipelineOptions(const PipelineOptions &options) {
  // The pipeline is target-neutral except for kiln-fuse-attention (CUDA);
  // the targets' code generators run after it (tools/kiln/lib).
  if (options.target == TargetKind::cpu)
    return "--target=cpu: not supported yet as a pipeline option (the CPU "
           "package is the default without --target)";
  switch (options.strategy) {
  case Strategy::none:
  case Strategy::dataParallel:
  case Strategy::mirrored: // data-parallel's collectives, ranks in-process
    break;
  case Strategy::zero1:
  case Strategy::zero2:
  case Strategy::zero3:
    if (!options.gradCompression.empty() && options.gradCompression != "none")
      return "--grad-compression=" + options.gradCompression +
             ": not supported with --strategy=" +
             stringifyStrategy(options.strategy).str() +
             " (only with data-parallel)";
    break;
  default:
    return "--strategy=" + stringifyStrategy(options.strategy).str() +
           ": not supported yet (only none and data-parallel)";
  }
  if (options.worldSize < 1)
    return "--world-size=" + std::to_string(options.worldSize) +
           ": expected at least 1";
  if (options.strategy == Strategy::none && options.worldSize != 1)
    return "--world-size=" + std::to_string(options.worldSize) +
           ": needs a --strategy (data-parallel); without one the step runs "
           "on one rank";
  if (!(options.bucketMb > 0))
    return "--bucket-mb: expected a positive size in MB";
  if (options.gradAccum < 1)
    return "--grad-accum=" + std::to_string(options.gradAccum) +
           ": expected at least 1 micro-batch per step";
  if (!options.gradCompression.empty() && options.gradCompression != "none" &&
      options.strategy == Strategy::none)
    return "--grad-compression=" + options.gradCompression +
           ": needs a --strategy (data-parallel): there is no all-reduce "
           "without one";
  if (std::string problem = checkRematOptions(options.remat, options.rematScope);
      !problem.empty())
    return problem;
  if (options.memoryBudget < 0)
    return "--memory-budget: expected a positive size, found " +
           std::to_string(options.memoryBudget) + " bytes";
  if (options.memoryBudget > 0 && options.remat == "off")
    return "--memory-budget needs a --remat policy to choose from (dots or "
           "full, the default with a budget), not --remat=off";
  if (options.rematLimit < -1)
    return "remat-limit=" + std::to_string(options.rematLimit) +
           ": expected -1 (every candidate) or a count of 0 or more";
  if (options.syncBatchNorm && options.strategy == Strategy::none)
    return "--sync-batch-norm: needs a --strategy (data-parallel, mirrored "
           "or zero1-3): with one rank the batch statistics are already the "
           "whole batch's";
  if (options.amp == AmpMode::off &&
      (!options.ampAllow.empty() || !options.ampDeny.empty() ||
       !options.ampInfer.empty()))
    return "--amp-allow, --amp-deny and --amp-infer need --amp=bf16 or "
           "--amp=fp16";
  if (!options.dumpAfter.empty()) {
    if (options.dumpDir.empty())
      return "--dump-after needs --dump-dir (where to write the dumps)";
    std::string error;
    if (!llvm::Regex(options.dumpAfter).isValid(error))
      return "--dump-after=" + options.dumpAfter +
             ": expected a regular expression over pass names: " + error;
  }
  return "";
}

std::string checkRematOptions(llvm::StringRef remat, llvm::StringRef scope) {
  if (remat != "off" && remat != "dots" && remat != "full")
    return ("--remat=" + remat + ": expected off, dots or full, found '" + remat +
            "'")
        .str();
  if (scope.empty())
    return "";
  if (remat == "off")
    return "--remat-scope needs --remat=dots or --remat=full";
  std::string error;
  if (!llvm::Regex(scope).isValid(error))
    return ("--remat-scope=" + scope +
            ": expected a regular expression over node names: " + error)
        .str();
  return "";
}

void buildCompilePipeline(mlir::OpPassManager &pm, const PipelineOptions &options) {
  pm.addPass(createKilnVerifyRoles());
  // On the model graph, whose kiln.mode_select ops say which values are
  // batch statistics (passes/SyncBatchNorm.cpp); the eval step keeps none.
  if (options.syncBatchNorm && options.trainingStep) {
    KilnSyncBatchNormOptions sync;
    sync.worldSize = options.worldSize;
    pm.addPass(createKilnSyncBatchNorm(sync));
  }
  // A training step, or what PyTorch's eval() computes: no dropout, running
  // statistics read but not updated (passes/ResolveMode.cpp).
  KilnResolveModeOptions mode;
  mode.mode = options.trainingStep ? "train" : "eval";
  pm.addPass(createKilnResolveMode(mode));
  // On the graph as written: the bounds integer data is read under, which
  // the package records (fusion later hides the uses).
  pm.addPass(createKilnMarkIndexBounds());
  pm.addPass(mlir::createCanonicalizerPass());
  if (options.target == TargetKind::cuda && options.fuseAttention) {
    // First, on the forward graph: mixed precision then casts q, k and v,
    // and autodiff differentiates the fused op (kiln.attention_grad).
    pm.addPass(createKilnFuseAttention());
  }
  if (options.amp != AmpMode::off) {
    // On the forward graph, so autodiff differentiates through the casts
    // (passes/AutoMixedPrecision.cpp says why).
    KilnAutoMixedPrecisionOptions amp;
    amp.amp = stringifyAmp(options.amp).str();
    amp.lossScaling = options.trainingStep;
    amp.allow = options.ampAllow; // copied by the pass when created
    amp.deny = options.ampDeny;
    amp.infer = options.ampInfer;
    pm.addPass(createKilnAutoMixedPrecision(amp));
  }
  if (options.trainingStep) {
    KilnAutodiffOptions autodiff;
    autodiff.remat = options.remat;
    autodiff.rematScope = options.rematScope;
    autodiff.rematLimit = options.rematLimit;
    pm.addPass(createKilnAutodiff(autodiff));
    if (options.gradAccum > 1) {
      // K micro-batches summed before any collective sees the gradients
      // (passes/AccumulateGradients.cpp).
      KilnAccumulateGradientsOptions accumulate;
      accumulate.gradAccum = options.gradAccum;
      pm.addPass(createKilnAccumulateGradients(accumulate));
    }
    if (options.strategy != Strategy::none) {
      // Before the optimizer, which then updates with the reduced
      // gradients (passes/Distribute.cpp says why).
      KilnDistributeOptions distribute;
      distribute.strategy = stringifyStrategy(options.strategy).str();
      distribute.worldSize = options.worldSize;
      distribute.bucketMb = options.bucketMb;
      distribute.gradAccum = options.gradAccum;
      distribute.gradCompression =
          options.gradCompression.empty() ? "none" : options.gradCompression;
      pm.addPass(createKilnDistribute(distribute));
    }
    pm.addPass(createKilnApplyOptimizer(options.optimizer));
    // ZeRO-1/2 keep the full parameters: refreshed from the updated shards.
    if (options.strategy == Strategy::zero1 ||
        options.strategy == Strategy::zero2)
      pm.addPass(createKilnGatherShards());
    // Mixed precision: the optimizer writes the parameters' bf16/f16 copies
    // (passes/ParameterCopies.cpp), so no kernel converts them every step.
    if (options.amp != AmpMode::off && options.parameterCopies)
      pm.addPass(createKilnParameterCopies());
    pm.addPass(mlir::createCanonicalizerPass());
    pm.addPass(mlir::createCSEPass());
  }
  // A forward graph (trainingStep off) is optimized too when asked: that is
  // how `kiln train` builds its eval step.
  if (!options.optimize)
    return;
  // kiln.attention stays whole for CUDA's fused kernel; elsewhere it becomes
  // primitives the CPU backend compiles.
  KilnDecomposeOptions decompose;
  decompose.attention = options.target != TargetKind::cuda;
  pm.addPass(createKilnDecompose(decompose));
  pm.addPass(mlir::createCanonicalizerPass());
  pm.addPass(mlir::createCSEPass());
  if (options.target == TargetKind::cuda && options.fuseAttention) {
    // The fused kernels read q, k and v from the qkv projection and write
    // its gradient in place (passes/PackAttention.cpp).
    pm.addPass(createKilnPackAttention());
    pm.addPass(mlir::createCanonicalizerPass());
  }
  if (options.target == TargetKind::cuda && options.splitReductions) {
    // A generated kernel sums a column reduction with one thread per
    // result: wide ones go in two stages (passes/SplitReductions.cpp).
    // Bias gradients stay whole only where the GEMM's epilogue computes
    // them (kiln-fuse's bias-gradient-epilogues).
    KilnSplitReductionsOptions split;
    split.keepBiasGradients = options.gemmBiasGradients;
    if (options.splitMinRows > 0)
      split.minReduced = options.splitMinRows;
    pm.addPass(createKilnSplitReductions(split));
  }
  if (options.gradAccum > 1) {
    // The micro-batches' kernels that read the same parameter (a position
    // embedding, a causal mask) would be merged as siblings, which computes
    // every micro-batch's activations at once: no sibling fusion then
    // (passes/AccumulateGradients.cpp says what else keeps them apart).
    KilnFuseOptions fuse;
    fuse.siblingMinBytes = std::numeric_limits<int64_t>::max();
    fuse.biasGradientEpilogues = options.gemmBiasGradients;
    fuse.geluGradEpilogues = options.target == TargetKind::cuda;
    fuse.horizontalReductions = options.target == TargetKind::cuda;
    fuse.rowGroupPartials =
        options.target == TargetKind::cuda && options.rowGroupPartials;
    if (options.fuseSharedMemoryBytes > 0)
      fuse.sharedMemoryBytes = options.fuseSharedMemoryBytes;
    pm.addPass(createKilnFuse(fuse));
  } else {
    KilnFuseOptions fuse;
    fuse.biasGradientEpilogues = options.gemmBiasGradients;
    fuse.geluGradEpilogues = options.target == TargetKind::cuda;
    fuse.horizontalReductions = options.target == TargetKind::cuda;
    fuse.rowGroupPartials =
        options.target == TargetKind::cuda && options.rowGroupPartials;
    if (options.fuseSharedMemoryBytes > 0)
      fuse.sharedMemoryBytes = options.fuseSharedMemoryBytes;
    pm.addPass(createKilnFuse(fuse));
  }
  pm.addPass(createKilnSchedule());
  pm.addPass(createKilnPlanBuffers());
}

namespace {

// Writes the IR to |dir|/NN-<name>.mlir after every pass whose argument
// matches |filter|. Remembers the first write failure for the caller.
class StageDumper : public mlir::PassInstrumentation {
public:
  StageDumper(std::string dir, llvm::StringRef filter, bool &failed)
      : dir(std::move(dir)), filter(filter.empty() ? ".*" : filter.str()),
        failed(failed) {}

  void runAfterPass(mlir::Pass *pass, mlir::Operation *op) override {
    if (filter.match(pass->getArgument()))
      dump(op, pass->getArgument());
  }

  void dump(mlir::Operation *op, llvm::StringRef name) {
    llvm::SmallString<256> path(dir);
    std::string file;
    llvm::raw_string_ostream(file)
        << llvm::format("%02u-", index++) << name << ".mlir";
    llvm::sys::path::append(path, file);
    std::error_code error;
    auto out = std::make_unique<llvm::ToolOutputFile>(path, error,
                                                      llvm::sys::fs::OF_None);
    if (error) {
      failed = true;
      mlir::emitError(op->getLoc()) << "cannot write the IR dump '" << path
                                    << "': " << error.message();
      return;
    }
    op->print(out->os());
    out->os() << "\n";
    out->keep();
  }

private:
  std::string dir;
  llvm::Regex filter;
  bool &failed;
  unsigned index = 0;
};

} // namespace


namespace {

// The planned peak of a compiled module: the largest kiln.peak_bytes of its
// functions (a pipeline stage's, a step's); -1 when none has a plan.
int64_t plannedPeak(mlir::ModuleOp module) {
  int64_t peak = -1;
  module.walk([&](mlir::func::FuncOp func) {
    if (auto bytes = func->getAttrOfType<mlir::IntegerAttr>(
            KilnDialect::kPeakBytesAttrName))
      peak = std::max(peak, bytes.getInt());
  });
  return peak;
}

// The most candidates kiln-autodiff recorded (kiln.remat_candidates).
int64_t rematCandidates(mlir::ModuleOp module) {
  int64_t candidates = 0;
  module.walk([&](mlir::func::FuncOp func) {
    if (auto count = func->getAttrOfType<mlir::IntegerAttr>(
            kRematCandidatesAttrName))
      candidates = std::max(candidates, count.getInt());
  });
  return candidates;
}

// The runtime's workspaces beside |module|'s plan
// (PipelineOptions::runtimeWorkspaceBytes; 0 without).
int64_t runtimeWorkspaces(mlir::ModuleOp module,
                          const PipelineOptions &options) {
  if (!options.runtimeWorkspaceBytes)
    return 0;
  return std::max<int64_t>(0, options.runtimeWorkspaceBytes(module));
}

// Compiles a copy of |module| under |options| with every diagnostic
// silenced; fills |peak| (what the budget bounds: the planned peak and the
// runtime's workspaces, |workspaces|; -1: the pipeline failed or planned
// nothing) and |candidates|.
void trialCompile(mlir::ModuleOp module, const PipelineOptions &options,
                  int64_t &peak, int64_t &workspaces, int64_t &candidates) {
  mlir::OwningOpRef<mlir::ModuleOp> copy = module.clone();
  mlir::ScopedDiagnosticHandler silence(
      module.getContext(), [](mlir::Diagnostic &) { return mlir::success(); });
  mlir::PassManager pm(module.getContext());
  buildCompilePipeline(pm, options);
  peak = -1;
  workspaces = 0;
  candidates = 0;
  if (mlir::failed(pm.run(*copy)))
    return;
  peak = plannedPeak(*copy);
  if (peak >= 0) {
    workspaces = runtimeWorkspaces(*copy, options);
    peak += workspaces;
  }
  candidates = rematCandidates(*copy);
}

// Under options.memoryBudget: the least remat-limit whose planned peak fits
// (a binary search between none and every candidate, each step a compile
// of a copy; the plan need not shrink monotonically with the limit, so
// the result is the least limit seen to fit, which the search checked).
// Under `full`, when every candidate does not fit, `dots`, whose recomputed
// values `full` allows too, is searched as well: keeping the matmul outputs
// (and a convolution's, read by its batch norm twice) can plan less than
// recomputing them. Sets options.remat and options.rematLimit to the
// choice (runCompilePipeline reads the plan of the compile it then makes);
// fails with a diagnostic when nothing fits.
mlir::LogicalResult searchRematLimit(mlir::ModuleOp module,
                                     PipelineOptions &options,
                                     MemoryBudgetOutcome &outcome) {
  outcome.searched = true;
  PipelineOptions trial = options;
  trial.dumpDir.clear();
  int64_t peak, workspaces, candidates;
  auto compile = [&](int64_t k) {
    trial.rematLimit = k;
    trialCompile(module, trial, peak, workspaces, candidates);
    ++outcome.compiles;
  };
  compile(0);
  outcome.peakWithout = peak - workspaces;
  outcome.workspaces = workspaces;
  outcome.candidates = candidates;
  outcome.policy = options.remat;
  if (peak < 0) { // the real compile reports what failed
    outcome.searched = false;
    return mlir::success();
  }
  if (peak <= options.memoryBudget) {
    options.rematLimit = 0;
    return mlir::success();
  }
  compile(candidates);
  if (peak < 0) {
    outcome.searched = false;
    return mlir::success();
  }
  int64_t least = peak, leastWorkspaces = workspaces;
  if (peak > options.memoryBudget && options.remat == "full") {
    trial.remat = "dots";
    compile(-1);
    if (peak >= 0 && peak <= options.memoryBudget) {
      outcome.policy = "dots";
      outcome.candidates = candidates;
    } else {
      if (peak >= 0 && peak < least) {
        least = peak;
        leastWorkspaces = workspaces;
      }
      peak = least;
      trial.remat = "full";
    }
  }
  if (peak > options.memoryBudget) {
    mlir::InFlightDiagnostic error =
        module.emitError() << "--memory-budget="
                           << formatBytes(options.memoryBudget)
                           << ": the training step's planned memory is "
                           << formatBytes(outcome.peakWithout)
                           << ", and at least "
                           << formatBytes(least - leastWorkspaces)
                           << " with recomputation (--remat=" << options.remat
                           << "'s " << outcome.candidates << " values)";
    if (leastWorkspaces > 0)
      error << ", and the runtime's workspaces take "
            << formatBytes(leastWorkspaces) << " beside it";
    return error << "; a smaller batch (or --grad-accum), --amp=bf16, a "
                    "ZeRO strategy or more memory would fit it";
  }
  int64_t fits = candidates, misses = 0;
  while (fits - misses > 1) {
    int64_t mid = misses + (fits - misses) / 2;
    compile(mid);
    if (peak >= 0 && peak <= options.memoryBudget)
      fits = mid;
    else
      misses = mid;
  }
  options.remat = trial.remat;
  options.rematLimit = fits;
  outcome.recomputed = fits;
  return mlir::success();
}

} // namespace

mlir::LogicalResult runCompilePipeline(mlir::ModuleOp module,
                                       const PipelineOptions &givenOptions,
                                       mlir::TimingScope *timing,
                                       MemoryBudgetOutcome *outcome) {
  if (std::string problem = checkPipelineOptions(givenOptions);
      !problem.empty())
    return module.emitError() << problem;
  PipelineOptions options = givenOptions;
  MemoryBudgetOutcome budget;
  if (options.memoryBudget > 0 && options.trainingStep && options.optimize) {
    std::optional<mlir::TimingScope> search;
    if (timing)
      search.emplace(timing->nest("memory-budget search (compiles of copies)"));
    if (mlir::failed(searchRematLimit(module, options, budget)))
      return mlir::failure();
    ++budget.compiles; // the compile below
  }

  mlir::PassManager pm(module.getContext());
  buildCompilePipeline(pm, options);

  bool dumpFailed = false;
  if (!options.dumpDir.empty()) {
    if (std::error_code ec =
            llvm::sys::fs::create_directories(options.dumpDir))
      return module.emitError() << "cannot create the dump directory '"
                                << options.dumpDir << "': " << ec.message();
    auto dumper = std::make_unique<StageDumper>(options.dumpDir,
                                                options.dumpAfter, dumpFailed);
    dumper->dump(module, "input");
    pm.addInstrumentation(std::move(dumper));
  }
  if (timing)
    pm.enableTiming(*timing);
  if (mlir::failed(pm.run(module)) || dumpFailed)
    return mlir::failure();
  if (budget.searched) {
    budget.peak = plannedPeak(module);
    budget.workspaces = runtimeWorkspaces(module, options);
    if (budget.peak + budget.workspaces > options.memoryBudget)
      return module.emitError()
             << "internal error: --memory-budget="
             << formatBytes(options.memoryBudget) << ": the search chose "
             << options.rematLimit << " values of --remat=" << options.remat
             << " to recompute for a plan of " << formatBytes(budget.peak)
             << " and workspaces of " << formatBytes(budget.workspaces)
             << ", over the budget";
  }
  if (outcome)
    *outcome = budget;
  return mlir::success();
}

} // namespace kiln
