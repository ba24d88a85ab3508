//===- Pipelines.h - the compile pipeline, built from options -----*- C++ -*-===//
//
// `kiln compile` (and later `kiln train`) describe what they want in
// PipelineOptions; this file turns that into the pass pipeline and runs it.
// Every option the CLI accepts is represented here even when the passes it
// needs do not exist yet: checkPipelineOptions then says so ("not supported
// yet"), so no option is ever silently ignored.
//
// The pipeline today: kiln-verify-roles, canonicalize; for a CUDA target
// (unless fuseAttention is off) kiln-fuse-attention; with amp on,
// kiln-auto-mixed-precision; then (unless only
// the forward model is asked for) kiln-autodiff, kiln-distribute (with a
// strategy: the collectives on the gradients) and kiln-apply-optimizer,
// which turn the model into its training step, canonicalize and cse; then
// kiln-decompose, canonicalize, cse, kiln-fuse (kernels), kiln-schedule and
// kiln-plan-buffers (the arena plan).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_PASSES_PIPELINES_H
#define KILN_PASSES_PIPELINES_H

#include "ir/KilnDialect.h"
#include "passes/Passes.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/Timing.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace kiln {

enum class TargetKind { none, cpu, cuda };
enum class Strategy {
  none,
  mirrored,
  dataParallel,
  zero1,
  zero2,
  zero3,
  parameterServer,
  pipeline,
  tensorParallel,
};
enum class AmpMode { off, bf16, fp16 };

struct PipelineOptions {
  TargetKind target = TargetKind::none;
  int64_t cudaArch = 0; // 90 for cuda:sm_90; 0 when not given
  // With target cuda: rewrite primitive attention into kiln.attention
  // (kiln-fuse-attention, first, on the forward graph), a fused library
  // call there. No effect on other targets.
  bool fuseAttention = true;
  // With target cuda: sum wide column reductions in two stages
  // (kiln-split-reductions), for the GPU's parallelism.
  bool splitReductions = true;
  // kiln-split-reductions' min-reduced, the fewest rows a column reduction
  // it splits sums; 0 keeps the pass's default (1024). The emulation tests
  // lower it so that small random models reach the two-stage sums and the
  // row-group kernels they make.
  int64_t splitMinRows = 0;
  // With target cuda: a row kernel also sums groups of its rows (kiln-fuse
  // row-group-partials: a layer norm's dx and its scale/bias gradients'
  // first stage in one kernel, CUDA layout rowgroup.block).
  bool rowGroupPartials = true;
  // With amp: keep each converted f32 parameter's low-precision copy as step
  // state that the optimizer update writes (kiln-parameter-copies).
  bool parameterCopies = true;
  Strategy strategy = Strategy::none;
  int64_t worldSize = 1;
  // kiln-distribute's options (with a strategy other than none): the bucket
  // cap after the first 1 MB bucket, micro-batches per step, and the
  // all-reduce precision ("" or none: the gradients' own).
  double bucketMb = 25;
  int64_t gradAccum = 1;
  std::string gradCompression;
  // Batch norm statistics over the global batch (kiln-sync-batch-norm,
  // PyTorch's SyncBatchNorm); needs a strategy other than none.
  bool syncBatchNorm = false;
  AmpMode amp = AmpMode::off;
  // Activation checkpointing (kiln-autodiff's remat): off, dots or full.
  std::string remat = "off";
  // With remat: only ops whose node name matches (a regex; empty: all).
  std::string rematScope;
  // With remat: recompute only this many of the policy's candidates, the
  // cheapest per byte (kiln-autodiff's remat-limit); -1: all of them.
  int64_t rematLimit = -1;
  // When positive: the most bytes the training step's planned memory (its
  // arguments and arena, kiln.peak_bytes) may take. runCompilePipeline then
  // searches the least remat-limit under the remat policy (dots or full;
  // full also tries dots' values) whose plan fits, and fails, saying what
  // the step needs, when even the whole policy does not fit.
  int64_t memoryBudget = 0;
  // With memoryBudget: the bytes the target's runtime allocates beside a
  // planned step (its libraries' workspaces), given the module compiled up
  // to its plan; the budget bounds the planned peak plus them. Negative or
  // unset: none.
  std::function<int64_t(mlir::ModuleOp)> runtimeWorkspaceBytes;
  // kiln-fuse's bias-gradient-epilogues: a weight gradient's GEMM also
  // computes the bias gradient (cuBLASLt BGRADA); CUDA packages only.
  bool gemmBiasGradients = false;
  // kiln-fuse's shared-memory-bytes, the on-chip bytes for the rows a
  // reduction kernel reads again after reducing them; 0 keeps kiln-fuse's
  // default (49152). CUDA packages: the dynamic shared memory one block may
  // take on every target architecture (codegen/cuda/CudaEmitter.h
  // cudaRowCacheBytes), where the kernel caches those rows.
  int64_t fuseSharedMemoryBytes = 0;
  // Op names moved into kiln-auto-mixed-precision's allow, deny and infer
  // lists (only with amp on).
  std::vector<std::string> ampAllow, ampDeny, ampInfer;
  // Build the training step (gradients and optimizer updates); false keeps
  // the forward model.
  bool trainingStep = true;
  // Decompose, fuse, schedule and plan buffers after building the step (or
  // after verifying the forward model).
  bool optimize = true;
  // Overrides of the module's #kiln.training: each option that is set
  // (a non-empty string, a non-negative number) replaces one field.
  KilnApplyOptimizerOptions optimizer;
  // When not empty, the IR is written to this directory before the pipeline
  // (00-input.mlir) and after every pass whose argument matches |dumpAfter|
  // (an extended regex; empty matches every pass) as NN-<pass>.mlir.
  std::string dumpDir;
  std::string dumpAfter;
};

// Parsers for the option spellings; nullopt for an unknown spelling.
// Targets: cpu, cuda, cuda:sm_NN.
std::optional<TargetKind> parseTarget(llvm::StringRef text, int64_t &cudaArch);
// none, mirrored, data-parallel, zero1, zero2, zero3, parameter-server,
// pipeline, tensor-parallel.
std::optional<Strategy> parseStrategy(llvm::StringRef text);
// off, bf16, fp16.
std::optional<AmpMode> parseAmp(llvm::StringRef text);
std::string stringifyTarget(TargetKind target, int64_t cudaArch);
llvm::StringRef stringifyStrategy(Strategy strategy);
llvm::StringRef stringifyAmp(AmpMode amp);

// "" when the pipeline can honour |options|; otherwise what it cannot do yet
// or what is inconsistent, naming the flag.
std::string checkPipelineOptions(const PipelineOptions &options);
// "" for a valid --remat policy (off, dots or full) and --remat-scope (a
// regular expression, only with a policy); otherwise what is wrong, naming
// the flag. checkPipelineOptions and the command-line flags share it.
std::string checkRematOptions(llvm::StringRef remat, llvm::StringRef scope);

// What runCompilePipeline's search under a memory budget found.
struct MemoryBudgetOutcome {
  bool searched = false;     // a budget applied (a training step, optimized)
  int64_t peakWithout = 0;   // the planned peak without recomputation
  int64_t peak = 0;          // the planned peak compiled
  int64_t workspaces = 0;    // the runtime's beside it (runtimeWorkspaceBytes)
  std::string policy;        // the remat policy chosen from (dots or full)
  int64_t recomputed = 0;    // candidates recomputed (remat-limit)
  int64_t candidates = 0;    // the policy's candidates
  int64_t compiles = 0;      // pipeline runs the search took, the last included
};

// Adds the compile pipeline's passes to |pm| (a module pass manager). The
// options must have passed checkPipelineOptions.
void buildCompilePipeline(mlir::OpPassManager &pm,
                          const PipelineOptions &options);

// Applies the option overrides to |module| (the optimizer of its
// #kiln.training, which is created with defaults when absent), then builds
// and runs the pipeline, with IR dumps when asked. Emits diagnostics and
// fails on any problem, including options checkPipelineOptions rejects.
// With |timing|, each pass's time is recorded in a scope nested in it
// (MLIR's pass timing: `kiln compile --timing`). Under a memory budget (a
// training step that is optimized), the search's compiles run on copies
// with their diagnostics silenced, then the chosen one on |module|; what it
// found goes to |outcome| when given.
mlir::LogicalResult runCompilePipeline(mlir::ModuleOp module,
                                       const PipelineOptions &options,
                                       mlir::TimingScope *timing = nullptr,
                                       MemoryBudgetOutcome *outcome = nullptr);


} // namespace kiln

#endif // KILN_PASSES_PIPELINES_H
