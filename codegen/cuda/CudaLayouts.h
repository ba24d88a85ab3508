//===- CudaLayouts.h - the nest layouts of a CUDA kernel -----------*- C++ -*-===//
//
// Internal to codegen/cuda. buildCudaKernelModule (CudaEmitter.cpp) picks a
// layout for each loop nest of the kernel model from what the nest's results
// reach (NestUses) and hands the nest to that layout's builder; the layouts
// are described in CudaEmitter.h. The builders live by family:
//   - CudaEmitter.cpp: the elementwise layout and the choice;
//   - CudaReductionLayouts.cpp: the row and element layouts (a warp or a
//     block per unit, cooperative reductions) and their row cache;
//   - CudaBlockLayouts.cpp: the layouts that walk a row's columns in passes
//     with a block per unit, scatter rows and row groups, and the merging of
//     a row group's independent block allreduces.
// Every builder appends its phase to the kernel function at
// CudaKernelBuilder::b and records its layout word, grid and serial chain in
// CudaKernelBuilder::kernel.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_CODEGEN_CUDA_CUDALAYOUTS_H
#define KILN_CODEGEN_CUDA_CUDALAYOUTS_H

#include "codegen/KernelModel.h"
#include "codegen/cuda/CudaEmitter.h"
#include "codegen/cuda/CudaHooks.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"

#include <cstdint>
#include <optional>
#include <utility>

namespace kiln::cuda_emitter {

inline int64_t product(llvm::ArrayRef<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

inline uint64_t ceilDiv(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

// Bytes of one stored element (i1 as one byte).
inline int64_t storedBytes(mlir::Type type) {
  if (type.isInteger(1))
    return 1;
  return (type.getIntOrFloatBitWidth() + 7) / 8;
}

// What a nest's results reach in the fusion body.
struct NestUses {
  // Largest element count of a reduction over its operand's last
  // dimension whose result is the nest's shape (element layout) or the
  // nest's shape without its last dimension (row layout); 0 if none.
  int64_t elementReduce = 0, rowReduce = 0;
  bool loops = false; // any reduce, scatter_add or pooling op
  // The most elements any reduce it reaches sums (what one thread walks
  // where the layout does not share the reduce among lanes).
  int64_t reduced = 0;
  // The scatter_adds it reaches (the scatter-rows layout takes one).
  llvm::SmallVector<ScatterAddOp, 1> scatters;
};

NestUses usesOf(const LoopNest &nest, YieldOp yield);

// One kernel being built: the fusion, its kernel model, the kernel function
// (its entry block, whose arguments are the inputs then the outputs) and
// the builder at its end, where each layout appends its phase.
struct CudaKernelBuilder {
  FusionOp fusion;
  const KernelModel &model;
  YieldOp yield;
  mlir::OpBuilder &b;
  mlir::Location loc;
  mlir::Block *entry;
  Intrinsics &intrinsics;
  CudaHooks &hooks;
  CudaKernelSource &kernel;
  int64_t rowCacheBytes; // the row cache's budget (CudaEmitter.h)

  mlir::ValueRange args() const { return entry->getArguments(); }
  unsigned numInputs() const { return model.inputs.size(); }
  mlir::ValueRange inputs() const { return args().take_front(numInputs()); }

  mlir::Value constant(mlir::OpBuilder &cb, int64_t v) const {
    return cb.create<mlir::arith::ConstantIndexOp>(loc, v);
  }
  // Stores |v| as the fusion's result |result| at |ivs|.
  void store(mlir::OpBuilder &sb, mlir::Location sloc, unsigned result,
             mlir::Value v, mlir::ValueRange ivs) const {
    sb.create<mlir::memref::StoreOp>(sloc, v, args()[numInputs() + result],
                                     ivs);
  }
  // Keeps the kernel's longest chain of dependent loads per thread (the
  // longest of its nests'; on a tie, the one fewer threads make).
  void recordChain(uint64_t steps, uint64_t threads) {
    if (steps > kernel.serialSteps ||
        (steps == kernel.serialSteps && steps &&
         threads < kernel.serialThreads)) {
      kernel.serialSteps = steps;
      kernel.serialThreads = threads;
    }
  }
};

//===----------------------------------------------------------------------===//
// Elementwise (CudaEmitter.cpp)
//===----------------------------------------------------------------------===//

void buildElementwiseLayout(CudaKernelBuilder &k, const LoopNest &nest,
                            const NestUses &uses);

//===----------------------------------------------------------------------===//
// Row and element layouts (CudaReductionLayouts.cpp)
//===----------------------------------------------------------------------===//

// Per nest, the element nest built in its rows (CudaEmitter.h: a
// block-scope element nest whose units are the rows of a block-scope row
// nest), or -1.
llvm::SmallVector<int> inRowPartners(const KernelModel &model,
                                     llvm::ArrayRef<NestUses> uses);

// A warp or a block per unit of |nest| (an output element, or a row), which
// uses a reduction over its last dimension (|uses|.elementReduce or
// rowReduce); a row nest also builds |inRow|'s results (inRowPartners) per
// row when given.
void buildReductionLayout(CudaKernelBuilder &k, const LoopNest &nest,
                          const NestUses &uses, const LoopNest *inRow);

//===----------------------------------------------------------------------===//
// Block layouts: scatter rows and row groups (CudaBlockLayouts.cpp)
//===----------------------------------------------------------------------===//

// The scatter_add |nest| builds in the scatter-rows layout, and the fusion
// input holding its indices; a null op when the nest takes another layout.
std::pair<ScatterAddOp, unsigned>
scatterRowsOf(const LoopNest &nest, const NestUses &uses, FusionOp fusion);

void buildScatterRowsLayout(CudaKernelBuilder &k, const LoopNest &nest,
                            ScatterAddOp scatter, unsigned indicesInput);

// The row-group layout's plan (CudaEmitter.h): a kernel of two nests, the
// rows [R..., C] of row reductions over C and the partials [G, C], whose
// results reach only reduce sums of reshape(v, [G, S, C]) over S (v of the
// row shape, or v itself when the rows are [G, S, C]) and elementwise ops
// of [G, C].
struct RowGroupPlan {
  unsigned rowNest = 0, partialNest = 0;
  int64_t groups = 0, rowsPerGroup = 0, columns = 0;
  llvm::SmallVector<ReduceOp, 2> partials;
};

std::optional<RowGroupPlan> rowGroupPlanOf(const KernelModel &model,
                                           llvm::ArrayRef<NestUses> uses,
                                           YieldOp yield);

// Both nests of |plan|, one phase.
void buildRowGroupLayout(CudaKernelBuilder &k, const RowGroupPlan &plan);

} // namespace kiln::cuda_emitter

#endif // KILN_CODEGEN_CUDA_CUDALAYOUTS_H
