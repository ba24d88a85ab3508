//===- CudaEmitter.h - CUDA C++ kernels for loop fusions ------------*- C++ -*-===//
//
// The CUDA side of the kernel model. Design: the kernel is built as MLIR
// exactly as the CPU kernel is (codegen/KernelModel.h's ElementEmitter
// builds every element as arith/math/scf ops, reading inputs through
// KernelHooks), only the loop structure around the elements and the hooks
// differ; then a small printer writes that op subset (arith, math, scf.for,
// scf.if, memref.load/store/get_global, func.call of the `kiln.*` thread
// intrinsics below) as CUDA C++. So the CPU and CUDA backends share the
// element semantics (the ScalarSemantics op table, index mapping of data
// movement, reductions, gather/scatter/pooling) and differ only in
// CudaHooks, the nest shapes and the printer. The printer refuses any op
// outside its subset with a diagnostic naming it.
//
// Each loop nest of the model (KernelModel.h) becomes one phase of the
// kernel, in one of three layouts (every loop is grid-stride, so any grid
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
// Column reductions (bias gradients) stay one thread per output element,
// summing over rows in order: consecutive threads read consecutive
// columns. f16 and bf16 are stored as __half / __nv_bfloat16 (cuda_fp16.h,
// cuda_bf16.h) and computed in f32 (the model's compute type), reductions
// accumulating in f32 (f64 for f64, i64 for integers). Indices are 64-bit.
//
// Launch: every kernel runs with kCudaBlockThreads threads per block; the
// grid is CudaLaunchRule::gridFor(the device's multiprocessor count), the
// blocks needed to give every thread work, capped at blocksPerSm per
// multiprocessor (the grid-stride loops cover the rest). Entry point:
//   extern "C" __global__ void NAME(const T *in0, ..., T *out0, ...)
// with the fusion's inputs then outputs. The source is one self-contained
// translation unit (a guarded prelude, constants, the kernel); compiled
// with -DKILN_CUDA_EMULATION and codegen/cuda/CudaEmulation.h it also
// defines `extern "C" void NAME_host(void **buffers, unsigned grid,
// unsigned block)`, which runs the kernel on host threads (tests).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_CODEGEN_CUDA_CUDAEMITTER_H
#define KILN_CODEGEN_CUDA_CUDAEMITTER_H

#include "ir/KilnOps.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <string>

namespace kiln {

constexpr unsigned kCudaBlockThreads = 256;
// Rows reduced by a whole block (rather than a warp) from this many
// elements on.
constexpr int64_t kBlockRowElements = 2048;

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
  // "row.block", "element.warp", "element.block" (for reports and tests).
  llvm::SmallVector<std::string, 2> layouts;
};

// Builds the kernel of |fusion| (not `gemm`) as an MLIR module holding
// `func.func @kernel` (memref arguments: inputs then outputs) and the
// declarations of the kiln.* intrinsics it calls. Fails with a diagnostic
// on the fusion or the op the kernel model cannot express.
mlir::FailureOr<mlir::OwningOpRef<mlir::ModuleOp>>
buildCudaKernelModule(FusionOp fusion, CudaLaunchRule &launch,
                      llvm::SmallVectorImpl<std::string> &layouts);

// The kernel of |fusion| as CUDA C++ with entry point |name| (a C
// identifier). Fails with a diagnostic as above, or naming an op the
// printer does not support.
mlir::FailureOr<CudaKernelSource> emitCudaKernel(FusionOp fusion,
                                                 llvm::StringRef name);

} // namespace kiln

#endif // KILN_CODEGEN_CUDA_CUDAEMITTER_H
