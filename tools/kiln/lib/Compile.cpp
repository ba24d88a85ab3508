//===- Compile.cpp - `kiln compile`: run the compile pipeline -------------===//
//
// `kiln compile FILE [--emit=mlir] [-o OUT] [...]` loads a model, runs the
// compile pipeline (passes/Pipelines.h) and prints or writes the result.
// Every flag of the design's CLI contract is accepted and stored; a value
// the compiler cannot honour yet is an error that says so.
//
//===----------------------------------------------------------------------===//

#include "tools/kiln/lib/Driver.h"

#include "tools/kiln/lib/AmpFlags.h"
#include "tools/kiln/lib/DistFlags.h"
#include "tools/kiln/lib/CompileReport.h"
#include "tools/kiln/lib/CudaCompile.h"
#include "tools/kiln/lib/Diagnostics.h"
#include "tools/kiln/lib/Flags.h"
#include "tools/kiln/lib/ModuleLoader.h"
#include "tools/kiln/lib/OptimizerFlags.h"
#include "tools/kiln/lib/PackageBuilder.h"

#include "codegen/cuda/CudaEmitter.h"
#include "passes/Pipelines.h"

#include "mlir/IR/MLIRContext.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <algorithm>

namespace kiln::cli {

namespace {

constexpr llvm::StringLiteral kCommand = "kiln compile";

// --timing: the three distinct kernels that took longest to finish (LLVM's
// -O3 and the bitcode; CUDA: NVRTC and ptxas), slowest first, on |errs|.
void printSlowestKernels(std::vector<KernelFinishTime> times, bool cuda,
                         llvm::raw_ostream &errs) {
  if (times.empty())
    return;
  std::stable_sort(times.begin(), times.end(),
                   [](const KernelFinishTime &a, const KernelFinishTime &b) {
                     return a.seconds > b.seconds;
                   });
  errs << "slowest kernels to finish (" << (cuda ? "NVRTC and ptxas" : "LLVM -O3")
       << ", " << times.size() << " distinct";
  if (!cuda)
    errs << ", "
         << llvm::count_if(times, [](const KernelFinishTime &t) { return t.fromCache; })
         << " from the cache";
  errs << "):\n";
  for (size_t i = 0; i < std::min<size_t>(3, times.size()); ++i)
    errs << llvm::format("  %8.4f s  ", times[i].seconds) << times[i].kernel
         << ": " << times[i].nodes << "\n";
}

enum class EmitKind { mlir, cuda, ptx, package };

// Everything `kiln compile` was asked for.
struct CompileOptions {
  std::string input;
  std::string output; // empty: stdout
  EmitKind emit = EmitKind::mlir;
  PipelineOptions pipeline;
  // --target=cuda[:sm_NN,...]: CUDA kernels (CudaCompile.h). The pipeline
  // then gets target cuda, for kiln-fuse-attention; the rest of it is
  // target-neutral.
  bool cuda = false;
  CudaCompileOptions cudaOptions;
  // --jobs: kernels compiled at once (0: one per hardware thread).
  unsigned jobs = 0;
};

// The flags' raw text; empty means "not given".
struct RawFlags {
  std::string input, output, emit, target, dumpDir, dumpAfter, fuseAttention,
      splitReductions, rowGroups, jobs;
  AmpFlags amp;
  DistFlags dist;
  bool forwardOnly = false;
  bool noOptimize = false;
  bool report = false;
  bool remarks = false;
  bool timing = false;
  OptimizerFlags optimizer;
};

void valueError(llvm::raw_ostream &errs, llvm::StringRef flag,
                llvm::StringRef value, llvm::StringRef expected) {
  printError(errs, kCommand,
             "--" + flag + "=" + value + ": expected " + expected +
                 ", found '" + value + "'");
}

// Turns |raw| into |options|; prints the first bad value and returns false.
bool interpret(const RawFlags &raw, CompileOptions &options,
               llvm::raw_ostream &errs) {
  options.input = raw.input;
  options.output = raw.output;
  PipelineOptions &p = options.pipeline;

  std::string emit = raw.emit;
  if (emit.empty())
    // The design's main use is `-o step.kpkg`; text is the default otherwise.
    emit = raw.output.empty() || isTextPath(raw.output) ? "mlir" : "package";
  if (emit == "mlir")
    options.emit = EmitKind::mlir;
  else if (emit == "cuda")
    options.emit = EmitKind::cuda;
  else if (emit == "ptx")
    options.emit = EmitKind::ptx;
  else if (emit == "package")
    options.emit = EmitKind::package;
  else {
    valueError(errs, "emit", emit, "mlir, cuda, ptx or package");
    return false;
  }

  if (!raw.jobs.empty()) {
    std::optional<int64_t> jobs = parseInteger(kCommand, "jobs", raw.jobs, 1, errs);
    if (!jobs)
      return false;
    options.jobs = static_cast<unsigned>(std::min<int64_t>(*jobs, 1024));
  }
  options.cudaOptions.jobs = options.jobs;
  if (llvm::StringRef(raw.target).starts_with("cuda")) {
    std::string error;
    if (!parseCudaTarget(raw.target, options.cudaOptions.archs, error)) {
      valueError(errs, "target", raw.target,
                 "cpu, cuda or cuda:sm_NN[,sm_MM...]");
      return false;
    }
    options.cuda = true;
  } else if (!raw.target.empty()) {
    std::optional<TargetKind> target = parseTarget(raw.target, p.cudaArch);
    if (!target) {
      valueError(errs, "target", raw.target, "cpu, cuda or cuda:sm_NN");
      return false;
    }
    p.target = *target;
  }
  if (!applyOnOff(kCommand, "fuse-attention", raw.fuseAttention,
                  p.fuseAttention, errs) ||
      !applyOnOff(kCommand, "split-reductions", raw.splitReductions,
                  p.splitReductions, errs) ||
      !applyOnOff(kCommand, "row-groups", raw.rowGroups, p.rowGroupPartials,
                  errs))
    return false;
  if (!parseDistFlags(kCommand, raw.dist, p, errs))
    return false;
  if (!parseAmpFlags(kCommand, raw.amp, p, errs))
    return false;
  if (!parseOptimizerFlags(kCommand, raw.optimizer, p.optimizer, errs))
    return false;
  p.trainingStep = !raw.forwardOnly;
  // --forward-only stops after the first two passes.
  p.optimize = !raw.noOptimize && !raw.forwardOnly;
  p.dumpDir = raw.dumpDir;
  p.dumpAfter = raw.dumpAfter;

  bool kernelFiles =
      options.emit == EmitKind::cuda || options.emit == EmitKind::ptx;
  if (kernelFiles) {
    // --emit=cuda|ptx implies a CUDA target (sm_90 unless --target says).
    options.cuda = true;
    if (options.output.empty()) {
      printError(errs, kCommand,
                 "--emit=" + emit + ": expected -o DIR (one file per kernel), "
                 "found no -o");
      return false;
    }
    if (raw.forwardOnly || raw.noOptimize) {
      printError(errs, kCommand,
                 "--emit=" + emit + ": expected a planned step, found " +
                     std::string(raw.forwardOnly ? "--forward-only"
                                                 : "--no-optimize"));
      return false;
    }
  }
  // cuBLASLt computes a weight gradient's bias gradient beside it (BGRADA).
  p.gemmBiasGradients = options.cuda;
  // A reduction kernel's reused rows are cached in dynamic shared memory:
  // kiln-fuse's budget for them is what every target architecture allows.
  if (options.cuda)
    p.fuseSharedMemoryBytes = cudaRowCacheBytes(
        llvm::ArrayRef<unsigned>(options.cudaOptions.archs));
  // --memory-budget holds the runtime's workspaces (cuBLASLt's, the
  // attention's, the convolutions') beside the plan.
  if (options.cuda)
    p.runtimeWorkspaceBytes =
        [archs = options.cudaOptions.archs](mlir::ModuleOp module) {
          return cudaRuntimeWorkspaceBytes(module, archs);
        };
  if (options.cuda && !haveNvrtc() &&
      (options.emit == EmitKind::ptx || options.emit == EmitKind::package)) {
    printError(errs, kCommand,
               "--emit=" + emit + " --target=cuda: compiling CUDA kernels "
               "needs NVRTC, and this kiln was built without the CUDA toolkit "
               "(use --emit=cuda for the sources)");
    return false;
  }
  if (options.cuda)
    p.target = kiln::TargetKind::cuda;
  // NVRTC runs for PTX and packages, and for --report's register counts.
  options.cudaOptions.nvrtc =
      haveNvrtc() && (options.emit != EmitKind::cuda || raw.report);
  if (options.emit == EmitKind::package && options.output.empty()) {
    printError(errs, kCommand,
               "--emit=package: expected -o FILE (a package is binary and is "
               "not written to stdout), found no -o");
    return false;
  }
  if (options.emit == EmitKind::package && (raw.forwardOnly || raw.noOptimize)) {
    printError(errs, kCommand,
               "--emit=package: expected a planned step, found " +
                   std::string(raw.forwardOnly ? "--forward-only"
                                               : "--no-optimize"));
    return false;
  }
  if (std::string problem = checkPipelineOptions(p); !problem.empty()) {
    printError(errs, kCommand, problem);
    return false;
  }
  return true;
}

} // namespace

int runCompile(llvm::ArrayRef<std::string> args, llvm::raw_ostream &outs,
               llvm::raw_ostream &errs) {
  RawFlags raw;
  FlagParser parser(
      kCommand.str(), "FILE [--emit=mlir] [-o OUT] [options]",
      "Loads a model (graph file or .mlir), verifies it, runs the compile\n"
      "pipeline and prints the result or writes it to OUT. The pipeline turns\n"
      "the model into its training step: kiln-verify-roles, canonicalize,\n"
      "kiln-autodiff, [kiln-accumulate-gradients with --grad-accum=K > 1,]\n"
      "[kiln-distribute with a --strategy,]\n"
      "kiln-apply-optimizer, [kiln-gather-shards with zero1/zero2,]\n"
      "canonicalize, cse; then\n"
      "kiln-decompose, canonicalize, cse, kiln-fuse, kiln-schedule and\n"
      "kiln-plan-buffers. --forward-only stops after the first two passes,\n"
      "--no-optimize before kiln-decompose. Without --emit, OUT ending in\n"
      ".mlir (or no OUT) means --emit=mlir and any other OUT means\n"
      "--emit=package. --report prints kernels per step, modelled bytes and\n"
      "the planned peak instead of the IR (which -o still writes); with\n"
      "--amp, also the planned bytes saved against --amp=off. --amp=bf16|fp16\n"
      "runs kiln-auto-mixed-precision before kiln-autodiff. --target=cuda runs\n"
      "kiln-fuse-attention first: causal attention written as matmul, scale,\n"
      "mask, softmax and matmul becomes one kiln.attention (its gradient\n"
      "kiln.attention_grad), a fused library call; --fuse-attention=off keeps\n"
      "the primitives. kiln-pack-attention then lets it read its qkv\n"
      "projection in place. --target=cuda also runs kiln-split-reductions\n"
      "before kiln-fuse (--split-reductions=off does not): wide column\n"
      "reductions sum in two stages, for the GPU's parallelism; a row kernel\n"
      "then also sums the first stage's groups of its rows (a layer norm's\n"
      "dx and its scale/bias gradients in one kernel; --row-groups=off\n"
      "keeps two). --sync-batch-norm runs kiln-sync-batch-norm before\n"
      "everything, on the model graph: batch norm statistics over the\n"
      "global batch. --remat=dots|full makes kiln-autodiff recompute\n"
      "forward values in the backward pass instead of keeping them\n"
      "(activation checkpointing); --memory-budget=SIZE recomputes the\n"
      "fewest of them, cheapest per byte first, whose planned step fits\n"
      "SIZE (a search of compiles).");
  parser.addPositional("FILE", &raw.input,
                       "a graph file (.kiln) or MLIR text (.mlir)");
  parser.addValue("output", &raw.output, "OUT",
                  "where to write the result (default: stdout)", 'o');
  parser.addValue("emit", &raw.emit, "KIND",
                  "mlir, package, cuda or ptx (cuda, ptx: one file per kernel in -o DIR)");
  parser.addValue("target", &raw.target, "TARGET",
                  "cpu, cuda or cuda:sm_NN[,sm_MM...] (CUDA kernels; sm_90 by default)");
  parser.addValue("fuse-attention", &raw.fuseAttention, "on|off",
                  "--target=cuda: rewrite attention into fused kiln.attention "
                  "library calls (default on; no effect on other targets)");
  parser.addValue("split-reductions", &raw.splitReductions, "on|off",
                  "--target=cuda: sum wide column reductions in two stages "
                  "(kiln-split-reductions; default on; no effect on other "
                  "targets)");
  parser.addValue("row-groups", &raw.rowGroups, "on|off",
                  "--target=cuda: a row kernel also sums groups of its rows "
                  "(kiln-fuse row-group-partials; default on; no effect on "
                  "other targets)");
  addDistFlags(parser, raw.dist,
               "number of ranks the step is compiled for (default 1; more "
               "needs a --strategy)");
  addAmpFlags(parser, raw.amp);
  parser.addValue("dump-dir", &raw.dumpDir, "DIR",
                  "write the IR before the pipeline and after passes to DIR");
  parser.addValue("dump-after", &raw.dumpAfter, "REGEX",
                  "only dump after passes whose name matches (default: all)");
  parser.addSwitch("forward-only", &raw.forwardOnly,
                   "only verify and canonicalize the model; do not build its "
                   "training step");
  parser.addSwitch("no-optimize", &raw.noOptimize,
                   "build the training step but do not decompose, fuse, "
                   "schedule or plan it");
  parser.addSwitch("report", &raw.report,
                   "print kernels per step, modelled bytes and the planned "
                   "peak against its lower bound");
  parser.addSwitch("remarks", &raw.remarks,
                   "also print the passes' remarks (why an update is not in "
                   "place, the schedule's peaks, ...); errors and warnings "
                   "always print");
  parser.addValue("jobs", &raw.jobs, "N",
                  "compile N kernels at once, on threads (LLVM's -O3 for the "
                  "CPU, NVRTC and ptxas for CUDA; default: one per hardware "
                  "thread); the output does not depend on N", 'j');
  parser.addSwitch("timing", &raw.timing,
                   "print to stderr the wall time of each pass and of the "
                   "kernels' code generation (MLIR's timing report), after "
                   "the three kernels slowest to finish");
  addOptimizerFlags(parser, raw.optimizer);
  if (std::optional<int> exit = parser.parseOrExit(args, outs, errs))
    return *exit;

  CompileOptions options;
  if (!interpret(raw, options, errs))
    return kExitError;

  mlir::DialectRegistry registry;
  registerKilnDialects(registry);
  mlir::MLIRContext context(registry);
  DiagnosticPrinter diagnostics(&context, errs);
  diagnostics.setShowRemarks(raw.remarks);

  // --timing: the report prints when |timingManager| goes, after every
  // scope below (declared after it) has stopped.
  mlir::DefaultTimingManager timingManager;
  timingManager.setEnabled(raw.timing);
  mlir::TimingScope timing = timingManager.getRootScope();

  mlir::OwningOpRef<mlir::ModuleOp> module;
  {
    mlir::TimingScope load = timing.nest("load " + options.input);
    module = loadModule(options.input, &context, diagnostics);
  }
  if (!module)
    return kExitError;
  // --report with --amp compares the planned memory with the same step
  // compiled at --amp=off.
  mlir::OwningOpRef<mlir::ModuleOp> baseline;
  bool compareAmp = raw.report && options.pipeline.amp != AmpMode::off &&
                    options.pipeline.optimize;
  if (compareAmp)
    baseline = module->clone();
  {
    mlir::TimingScope pipeline = timing.nest("pipeline");
    MemoryBudgetOutcome budget;
    if (mlir::failed(runCompilePipeline(*module, options.pipeline, &pipeline,
                                        &budget)))
      return kExitError;
    if (std::string line = describeMemoryBudget(options.pipeline, budget);
        !line.empty())
      errs << "kiln compile: " << line << "\n";
  }
  if (compareAmp) {
    mlir::TimingScope baselineScope = timing.nest("pipeline at --amp=off");
    PipelineOptions off = options.pipeline;
    off.amp = AmpMode::off;
    off.ampAllow.clear();
    off.ampDeny.clear();
    off.ampInfer.clear();
    off.dumpDir.clear();
    off.dumpAfter.clear();
    // The step's recomputation under a budget was chosen for its own
    // precision: the baseline has none (the report says so).
    if (off.memoryBudget > 0) {
      off.memoryBudget = 0;
      off.remat = "off";
      off.rematScope.clear();
    }
    if (mlir::failed(runCompilePipeline(*baseline, off, &baselineScope)))
      return kExitError;
  }
  // The kernels' code generation and what writes them (CUDA: emission,
  // NVRTC and ptxas; CPU: MLIR to -O3 LLVM bitcode).
  mlir::TimingScope codegen = timing.nest("kernels and output");
  options.cudaOptions.timing = raw.timing ? &codegen : nullptr;
  // --timing also names the kernels that took longest to finish (LLVM's
  // -O3; NVRTC and ptxas), just before the report: one slow kernel can be
  // most of a compile (bench/RESULTS.md, thirty-third session).
  std::vector<KernelFinishTime> finishTimes;
  options.cudaOptions.finishTimes = raw.timing ? &finishTimes : nullptr;
  auto slowest = llvm::make_scope_exit(
      [&] { printSlowestKernels(finishTimes, options.cuda, errs); });
  // The flags a package records: --jobs changes how it is built, not what
  // it holds, so a package is the same for every --jobs.
  std::vector<std::string> recorded;
  for (size_t i = 0; i < args.size(); ++i) {
    llvm::StringRef word = args[i];
    if (word.starts_with("--jobs="))
      continue;
    if ((word == "--jobs" || word == "-j") && i + 1 < args.size()) {
      ++i;
      continue;
    }
    recorded.push_back(args[i]);
  }

  if (!options.pipeline.dumpDir.empty() &&
      mlir::failed(writeCompileDumps(*module, options.pipeline.dumpDir)))
    return kExitError;
  if (raw.report) {
    // A CUDA step's workspaces, from its package without kernels.
    std::optional<ReportWorkspaces> workspaces;
    if (options.cuda && options.pipeline.optimize) {
      unsigned arch = 0;
      if (std::optional<runtime::cuda::CudaStepMemory> memory =
              cudaPlanMemory(*module, options.cudaOptions.archs, &arch))
        workspaces =
            ReportWorkspaces{int64_t(memory->workspaces()), arch,
                             runtime::cuda::describeWorkspaces(*memory)};
    }
    printCompileReport(
        *module, options.input, outs, baseline ? *baseline : mlir::ModuleOp(),
        stringifyAmp(options.pipeline.amp),
        options.pipeline.memoryBudget > 0 ? "--memory-budget's recomputation"
                                          : "",
        workspaces ? &*workspaces : nullptr);
  }
  if (options.cuda && options.pipeline.optimize &&
      (options.output.empty() || options.emit == EmitKind::mlir)) {
    // --target=cuda without a CUDA output: the kernels for --report only.
    std::vector<CudaKernelReport> reports;
    if (raw.report) {
      if (mlir::failed(compileCudaKernels(*module, options.cudaOptions,
                                          kCommand, errs, reports)))
        return kExitError;
      printCudaReport(reports, outs);
    }
  }
  if (options.output.empty()) {
    if (raw.report)
      return kExitOk;
    module->print(outs);
    outs << "\n";
    return kExitOk;
  }
  if (options.emit == EmitKind::cuda || options.emit == EmitKind::ptx) {
    std::vector<CudaKernelReport> reports;
    if (mlir::failed(writeCudaKernelFiles(
            *module, llvm::sys::path::stem(options.input), options.output,
            options.emit == EmitKind::ptx, options.cudaOptions, kCommand, errs,
            reports)))
      return kExitError;
    if (raw.report)
      printCudaReport(reports, outs);
    return kExitOk;
  }
  if (options.emit == EmitKind::package) {
    // The package records the model file's hash.
    auto source = llvm::MemoryBuffer::getFile(options.input);
    if (!source) {
      printError(errs, kCommand,
                 options.input + ": cannot read it again to hash it: " +
                     source.getError().message());
      return kExitError;
    }
    llvm::StringRef stem = llvm::sys::path::stem(options.input);
    if (!options.cuda)
      return mlir::failed(writeStepPackage(
                 *module, stem, (*source)->getBuffer(), recorded,
                 options.output, kCommand, errs,
                 {nullptr, options.jobs, options.cudaOptions.timing,
                  options.cudaOptions.finishTimes}))
                 ? kExitError
                 : kExitOk;
    std::vector<CudaKernelReport> reports;
    if (mlir::failed(writeCudaPackage(*module, stem, (*source)->getBuffer(),
                                      recorded, options.output, options.cudaOptions,
                                      kCommand, errs, reports)))
      return kExitError;
    if (raw.report)
      printCudaReport(reports, outs);
    return kExitOk;
  }
  // --emit=mlir: MLIR text whatever OUT is called (-o /dev/null, -o
  // step.txt); a graph file cannot hold a compiled step's fusions anyway.
  if (mlir::failed(writeModuleText(*module, options.output)))
    return kExitError;
  return kExitOk;
}

} // namespace kiln::cli
