//===- FusionCostModel.h - what a kernel costs, how many a step runs -*- C++ -*-===//
//
// The cost model behind kiln-fuse, after XLA's GPU performance model in its
// simplest form: a kernel costs one launch plus the longer of moving its
// bytes through memory and doing its arithmetic. Bytes are what the kernel
// reads (each distinct input once) and writes (each result once); data
// movement inside a fusion (broadcasts, transposes, slices) is index
// arithmetic and moves nothing of its own. A merge of kernels is worth the
// modelled time it saves.
//
// The same model counts kernels in a function (countKernels): what a fused
// step launches per training step and the bytes it moves, for `kiln compile
// --report`, the benchmarks and later passes.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_PASSES_FUSIONCOSTMODEL_H
#define KILN_PASSES_FUSIONCOSTMODEL_H

#include "ir/KilnOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <cstdint>

namespace kiln {

// The machine the model assumes. Defaults are an H100/H200-class GPU: HBM
// bandwidth, a kernel launch plus its tail, and non-tensor-core f32 peak.
struct CostModelOptions {
  double bandwidthGBps = 3350.0;
  double launchUs = 2.0;
  double peakGflops = 60000.0;
};

// Bytes a tensor of |type| occupies (an i1 element takes one byte); 0 for a
// type that is not a ranked tensor.
int64_t tensorBytes(mlir::Type type);

class FusionCostModel {
public:
  explicit FusionCostModel(const CostModelOptions &options = {})
      : options_(options) {}

  // Modelled microseconds of one kernel that moves |bytes| and does |flops|:
  // launch + max(bytes / bandwidth, flops / peak).
  double kernelTimeUs(int64_t bytes, int64_t flops) const;
  // The time of moving |bytes| alone, no launch.
  double transferUs(int64_t bytes) const;
  const CostModelOptions &options() const { return options_; }

private:
  CostModelOptions options_;
};

// Op classes that kiln-fuse and the kernel count share.
// GEMMs, convolutions and fused attention (and their gradients): calls
// into cuBLAS(Lt), cuDNN, OpenBLAS or the runtime's attention kernels,
// never generated kernels. (kiln.attention exists only for CUDA targets;
// kiln-decompose expands it elsewhere.)
bool isLibraryOp(mlir::Operation *op);
// Cross-rank communication (all_reduce, reduce_scatter, all_gather,
// collective_broadcast, send, recv).
bool isCollectiveOp(mlir::Operation *op);
// Ops that launch nothing: constants, and reshapes (a row-major reshape is a
// bitcast of its operand's buffer).
bool isFreeOp(mlir::Operation *op);
// Ops a generated loop or reduction kernel can hold: elementwise ops (those
// with ScalarSemantics), data movement that is an index map of its operand
// (broadcast_in_dim, transpose, slice, pad, reshape, iota, constant) and
// kiln.reduce.
bool isFusibleOp(mlir::Operation *op);

// What a function launches when it runs once.
struct KernelStats {
  // fusions + libraryCalls + unfusedOps.
  int64_t kernels = 0;
  int64_t fusions = 0;
  // Fusions per kind, indexed by FusionKind.
  int64_t fusionsByKind[5] = {0, 0, 0, 0, 0};
  // Library ops left outside fusions.
  int64_t libraryCalls = 0;
  // Other compute ops outside fusions (not constants, reshapes or
  // collectives): each is a kernel of its own.
  int64_t unfusedOps = 0;
  // Collectives are counted apart; they are not kernels of the step.
  int64_t collectives = 0;
  // Modelled bytes the kernels read (each distinct operand once per kernel)
  // and write (every result).
  int64_t bytesRead = 0;
  int64_t bytesWritten = 0;
  // Modelled time of all kernels, one after another.
  double modeledUs = 0.0;
};

// Counts the kernels of |func|'s body (its top-level ops).
KernelStats countKernels(mlir::func::FuncOp func,
                         const CostModelOptions &options = {});

} // namespace kiln

#endif // KILN_PASSES_FUSIONCOSTMODEL_H
