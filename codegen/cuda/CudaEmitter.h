//===- CudaEmitter.h - CUDA C++ kernels for loop fusions ------------*- C++ -*-===//
//
// The CUDA side of the kernel model. Design: the kernel is built as MLIR
// exactly as the CPU kernel is (codegen/KernelModel.h's ElementEmitter
// builds every element as arith/math/scf ops, reading inputs through
// KernelHooks), only the loop structure around the elements and the hooks
// differ; then a small printer (CudaPrinter.cpp) writes that op subset
// (arith, math, scf.for, scf.if, memref.load/store/get_global, func.call of
// the `kiln.*` thread intrinsics below) as CUDA C++. So the CPU and CUDA
// backends share the element semantics (the ScalarSemantics op table, index
// mapping of data movement, reductions, gather/scatter/pooling) and differ
// only in CudaHooks (CudaHooks.h), the nest layouts (CudaLayouts.h: one
// builder per layout, in CudaEmitter.cpp, CudaReductionLayouts.cpp and
// CudaBlockLayouts.cpp) and the printer. The printer refuses any op outside
// its subset with a diagnostic naming it.
//
// Each loop nest of the model (KernelModel.h) becomes one phase of the
// kernel, in one of five layouts (every loop is grid-stride, so any grid
// computes every element exactly once, and the nests read only inputs):
//   - elementwise: a grid-stride loop over the flattened nest, each thread
//     taking V consecutive elements per step when the element count is a
//     multiple of V = 16 bytes / the widest output element: outputs are
//     stored with one 16-byte (or narrower) vector store, and inputs of the
//     nest's shape read at the element's own indices with one vector load
//     (kiln.vload / kiln.vstore). Buffers must be 16-byte aligned (the
//     package's arena is 64-byte aligned).
//   - row: the nest uses a reduction over its operand's last dimension whose
//     result is the nest's shape without its last dimension (a softmax's row
//     max and sum): a warp per row (or a block per row when the reduced rows
//     have at least kBlockRowElements elements); the reduction is built
//     once per row with its innermost loop split over the lanes
//     (KernelHooks::reductionLanes) and combined with warp shuffles (a block
//     adds a shared-memory step: kiln_block_allreduce), then the lanes
//     stride over the row's last dimension writing the results.
//   - element: the nest's results are such reductions themselves (a row
//     sum, a loss): a warp (or block) per output element, lane 0 stores.
//     In a `horizontal` fusion (independent reduction kernels packed by
//     kiln-fuse's horizontal-reductions) each independent group of the
//     nest's results (cudaResultGroups) has units of its own: the unit
//     loop runs over groups x elements, unit u building group u / elements
//     at element u % elements under one scf.if per group (a warp's lanes
//     share the unit, so they take the same branch and their shuffles stay
//     converged); the layout word is "element.warp.groups=N".
//     A block-scope element nest whose elements are the rows of a
//     block-scope row nest (a loss per row beside its logits gradient) is
//     built in that nest's unit body, before the lane loop, so the
//     reductions both use are built once and share the row cache below.
//   - scatter rows: the nest is a scatter_add's result of rank >= 2 (an
//     embedding's gradient) whose indices are a fusion input: a block per
//     row of the result (all but the last dimension). Thread t keeps up to
//     four columns t, t + blockDim, ... per pass over the row (every thread
//     makes the same passes), starting from the operand's elements; the
//     block then walks the index positions in chunks of blockDim x 8:
//     kiln_scatter_collect (prelude) has each thread test 8 consecutive
//     positions against the row, and a warp scan of the hit counts plus
//     the warps' totals give each hit its slot in a shared-memory list
//     (kiln_scatter_list, 8 KiB), in increasing position order, between
//     two barriers; every thread then adds the listed positions' updates
//     for its columns. So each row reads the indices once per pass (from
//     L1/L2) and only its own updates, where a thread per element would
//     scan every index for every element (8192 x 38.6M tests for GPT-2's
//     token embedding); the sum order is the interpreter's (operand, then
//     positions in order), and no atomics are needed.
//   - row groups ("rowgroup.block"): a kernel of two nests, rows [R..., C]
//     that reduce over C (a layer norm's dx) and partials [G, C] whose
//     results are reduce sums of reshape(v, [G, S, C]) over S rows (v of
//     the row shape, or v itself when the rows are [G, S, C]; kiln-fuse's
//     row-group-partials: the scale and bias
//     gradients' first stage after kiln-split-reductions) and elementwise
//     ops of [G, C]: a block per group; per pass over the columns (one
//     pass when C <= 4 x blockDim) each thread keeps up to four columns
//     c_l = l x blockDim + tid (clamped to C - 1, stored only in range) and
//     an f32 accumulator per (partial, column); for each of the group's S
//     rows in order, two rows per iteration when S is even, it builds the
//     row reductions as block allreduces, then at each column the rows'
//     results and the partials' operand elements with one emitter, so each
//     input element of the row is loaded once for both; after the rows,
//     the partial results from the accumulators (the interpreter's sum
//     order: row order). Blocks are as wide as the row
//     (CudaLaunchRule::blockThreads up to 1024; the kernel's
//     __launch_bounds__), and an iteration's row reductions that do not
//     depend on each other share one kiln_block_allreduce_n (one pair of
//     barriers for both rows). The serial chain
//     (CudaKernelSource::serialSteps): per iteration, per row reduction of
//     each of its rows C / blockDim loads, plus two barrier steps per
//     allreduce.
// Row cache (block-scope row and element layouts): a fusion input whose
// shape is the unit's shape plus the row (the logits of a softmax
// cross-entropy) and that is read at the row's own indices (unit, column)
// by more than one pass over the row (the row max, the sum of exp(x - max),
// the lane loop writing the gradient) is read from global memory once per
// row: before the first pass the block copies the row into dynamic shared
// memory (`extern __shared__`, in its stored type; kiln_stage_row: 16-byte
// vector loads when the row is 16-byte aligned, which keeps enough bytes in
// flight at the low occupancy such a block has, between two barriers: the
// first waits for the previous row's readers, the second publishes the
// row), and every pass loads from there. The passes are recognized as the
// unit body's loops from the thread's lane stepping by the block's threads
// (checked by value); each cached input of each nest has its own
// 16-byte-aligned slot. Inputs are cached in order while their rows fit the
// budget given to emitCudaKernel (cudaRowCacheBytes of the target
// architectures); the rest keep today's global loads. The kernel's dynamic
// shared bytes are CudaKernelSource::dynamicSharedBytes: the launch must
// pass them (and, over 48 KiB, the function must allow them first:
// cuFuncSetAttribute with CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES).
// Column reductions (bias gradients) stay one thread per output element,
// summing over rows in order: consecutive threads read consecutive
// columns; except a nest whose results are few column reductions of a few
// rows each (cudaColumnReductionLanes), which takes the element layout, a
// warp per result, the lanes splitting the rows (a chain of 8192 rows is
// kiln-split-reductions' to shorten first). f16 and bf16 are stored as
// __half / __nv_bfloat16 (cuda_fp16.h, cuda_bf16.h) and computed in f32 (the
// model's compute type), reductions accumulating in f32 (f64 for f64, i64
// for integers). Indices are 64-bit.
//
// Launch: a kernel runs with CudaLaunchRule::blockThreads threads per block
// (kCudaBlockThreads, except the row-group layout's blocks as wide as the
// row); the grid is CudaLaunchRule::gridFor(the device's multiprocessor count), the
// blocks needed to give every thread work, capped at blocksPerSm per
// multiprocessor (the grid-stride loops cover the rest). Entry point:
//   extern "C" __global__ void NAME(const T *in0, ..., T *out0, ...)
// with the fusion's inputs then outputs. The source is one self-contained
// translation unit (a guarded prelude, constants, the kernel); compiled
// with -DKILN_CUDA_EMULATION and codegen/cuda/CudaEmulation.h it also
// defines `extern "C" void NAME_host(void **buffers, unsigned grid,
// unsigned block)`, which runs the kernel on the host (tests; a block's
// threads as fibers).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_CODEGEN_CUDA_CUDAEMITTER_H
#define KILN_CODEGEN_CUDA_CUDAEMITTER_H

#include "ir/KilnOps.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <string>

namespace kiln {

constexpr unsigned kCudaBlockThreads = 256;
// Rows reduced by a whole block (rather than a warp) from this many
// elements on.
constexpr int64_t kBlockRowElements = 2048;

// Lanes that share one result of a column reduction (a reduce that keeps
// its operand's last dimension): a warp's 32 when the nest's results are
// few (at most 4096) and each has 32 to kBlockRowElements - 1 rows (the
// lanes split the rows, then shuffle; a layer norm's scale gradient after
// kiln-split-reductions), else 1, a thread per result walking its rows in
// order (coalesced across the threads).
inline int64_t cudaColumnReductionLanes(int64_t results, int64_t reduced) {
  return results <= 4096 && reduced >= 32 && reduced < kBlockRowElements ? 32 : 1;
}

struct CudaLaunchRule {
  unsigned blockThreads = kCudaBlockThreads;
  // Blocks beyond this many would find no work.
  uint64_t maxBlocks = 1;
  // The occupancy cap: at most this many blocks per multiprocessor.
  unsigned blocksPerSm = 8;
  unsigned gridFor(unsigned multiprocessors) const {
    uint64_t cap = uint64_t(multiprocessors ? multiprocessors : 1) * blocksPerSm;
    uint64_t grid = maxBlocks < cap ? maxBlocks : cap;
    return static_cast<unsigned>(grid ? grid : 1);
  }
};

struct CudaKernelSource {
  std::string name;   // the entry point
  std::string source; // a complete CUDA C++ translation unit
  CudaLaunchRule launch;
  // One word per nest: "elementwise", "elementwise.v4", "row.warp",
  // "row.block", "element.warp", "element.block", "element.warp.groups=N"
  // (or .block.) for an element nest of N independent groups,
  // "scatter.block", "rowgroup.block" (the rows and the row-group
  // partials, one word for both nests), or
  // "element.block.in-row" for an element nest built in the rows of the
  // row.block nest before it (for reports and tests).
  llvm::SmallVector<std::string, 2> layouts;
  // Dynamic shared memory the kernel needs per block (its row cache; 0
  // when it caches no row): the launch's sharedMemBytes.
  uint32_t dynamicSharedBytes = 0;
  // The inputs whose rows it caches (for reports and tests).
  llvm::SmallVector<unsigned, 2> cachedInputs;
  // The longest chain of dependent loads one thread makes, and how many
  // threads make one (kiln inspect --roofline prices it by latency), from
  // the layouts chosen: a warp's or block's lanes share a unit's reductions
  // (each walks its share), an elementwise thread walks its elements'
  // reductions alone (a column reduction's rows), a scatter-rows block
  // makes two steps per chunk of positions plus the matches of its row, a
  // scatter in an elementwise nest scans every position; a horizontal
  // fusion's groups add their threads. 0 without reductions or scatters.
  uint64_t serialSteps = 0, serialThreads = 0;
  // The kernel's code for sm_90 and newer begins by waiting for the kernel
  // before it on the stream (griddepcontrol.wait, before any global memory
  // access) and then lets the next one start its blocks
  // (griddepcontrol.launch_dependents): it may be launched with
  // programmatic stream serialization (PDL; the package kernel's
  // programmatic_launch). Every printed kernel does.
  bool programmaticLaunch = true;
};

// Static shared memory a generated kernel may use besides its row cache
// (kiln_block_allreduce's partial results, one array per accumulator type).
constexpr int64_t kCudaStaticSharedReserve = 1024;

// The shared memory one block may opt in to on sm_|arch|
// (cudaDevAttrMaxSharedMemoryPerBlockOptin: sm_90 227 KiB, sm_80/87 163
// KiB, sm_86/89/120 99 KiB, sm_75 64 KiB, sm_70 96 KiB, 48 KiB before),
// for when no device is at hand.
int64_t cudaSharedMemoryOptinBytes(unsigned arch);

// The dynamic shared memory one block may take on sm_|arch| after
// cuFuncSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES):
// cudaSharedMemoryOptinBytes less kCudaStaticSharedReserve. For several
// architectures, the smallest.
int64_t cudaRowCacheBytes(unsigned arch);
int64_t cudaRowCacheBytes(llvm::ArrayRef<unsigned> archs);

// The independent groups among |results| (indices of |fusion|'s results)
// that the element layout gives units of their own: in a `horizontal`
// fusion, results joined when they reach a common kiln.reduce (a result
// reaching none is a group of its own), in result order; in any other
// fusion, one group of all of them.
llvm::SmallVector<llvm::SmallVector<unsigned, 2>>
cudaResultGroups(FusionOp fusion, llvm::ArrayRef<unsigned> results);

// Builds the kernel of |fusion| (not `gemm`) as an MLIR module holding
// `func.func @kernel` (memref arguments: inputs then outputs) and the
// declarations of the kiln.* intrinsics it calls. Fails with a diagnostic
// on the fusion or the op the kernel model cannot express.
// |kernel| gets the launch rule, the layouts, the dynamic shared bytes and
// the cached inputs; rows are cached within |rowCacheBytes| (0: none).
mlir::FailureOr<mlir::OwningOpRef<mlir::ModuleOp>>
buildCudaKernelModule(FusionOp fusion, CudaKernelSource &kernel,
                      int64_t rowCacheBytes);

// The kernel of |fusion| as CUDA C++ with entry point |name| (a C
// identifier), its row cache within |rowCacheBytes| of dynamic shared
// memory (the default: sm_90's). Fails with a diagnostic as above, or
// naming an op the printer does not support.
mlir::FailureOr<CudaKernelSource>
emitCudaKernel(FusionOp fusion, llvm::StringRef name,
               int64_t rowCacheBytes = cudaRowCacheBytes(90u));

} // namespace kiln

#endif // KILN_CODEGEN_CUDA_CUDAEMITTER_H
