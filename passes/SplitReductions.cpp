//===- SplitReductions.cpp - column reductions in two stages ----------------===//
//
// kiln-split-reductions rewrites a float kiln.reduce over the leading
// dimensions of its operand (a column reduction: a layer norm's scale and
// shift gradients sum [B, T, C] over B and T) that has few results and many
// rows into two reductions:
//
//   reduce(x [R..., K...], dims [0, j))
//     -> reduce(reduce(reshape(x, [R1, R2, K...]), dims [1]), dims [0])
//
// A generated CUDA kernel computes a column reduction with one thread per
// result, each summing its column's R rows in order (codegen/cuda/
// CudaEmitter.h): with K = 768 results that is 768 threads, three blocks,
// streaming R = 8192 rows each, which leaves the GPU idle and waits on
// memory latency row after row (a load's latency per few rows: about a
// millisecond for 8192 rows, where the bytes alone would take 10 us).
// Split, the first stage has R1 * K partial results (at least
// target-partials threads' worth of work, R2 rows each) and the second sums
// R1 partials per result: both chains are short (R1 = 256 and R2 = 32 for
// the GPT's 8192 x 768; the second stage, with few results, takes a warp
// per result, codegen/cuda/CudaEmitter.h's cudaColumnReductionLanes). R1 is the smallest power of two dividing R that
// reaches target-partials with R2 <= max-rows (keeping R2 >= 16).
// Reductions with at least target-partials results have threads enough.
// Operands of f16 or bf16 are converted to f32 first and the result back,
// so the partials are not rounded: the result is rounded once, as before;
// only the order of the additions changes (mean: the mean of equal-sized
// groups' means). Integer reductions, reductions over other dimensions,
// those with at least target-partials results or fewer than min-reduced
// rows, and bias gradients that kiln-fuse hands to a GEMM's
// cuBLASLt epilogue (keep-bias-gradients) are left as they are.
//
// A reduction over leading dimensions and the trailing ones with
// dimensions kept between them (a convolution's bias gradient, a batch
// norm's statistics: [N, C, H, W] over N, H and W) is first split into
// the trailing reduction (N x C row reductions) and then the leading one
// (a column reduction, split as above where it is long):
//
//   reduce(x [L..., K..., T...], dims L + T)
//     -> reduce(reduce(x, dims T), dims L)
//
//===----------------------------------------------------------------------===//

#include "ir/KilnOps.h"
#include "ir/gradients/GradientUtils.h"
#include "passes/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/TypeUtilities.h"
#include "llvm/ADT/STLExtras.h"

namespace kiln {
#define GEN_PASS_DEF_KILNSPLITREDUCTIONS
#include "passes/Passes.h.inc"
} // namespace kiln

using namespace mlir;

namespace kiln {
namespace {

// Whether |op| sums the rhs of a weight gradient dot_general over the rows
// it contracts: kiln-fuse gives such a bias gradient to the GEMM's
// cuBLASLt epilogue (passes/Fuse.cpp formBiasGradients), which computes it
// in parallel already.
bool isBiasGradient(ReduceOp op, ArrayRef<int64_t> dims) {
  if (op.getKind() != ReduceKind::sum)
    return false;
  Value x = op.getOperand();
  for (Operation *user : x.getUsers()) {
    auto dot = dyn_cast<DotGeneralOp>(user);
    if (!dot || dot.getRhs() != x || !dot.getRhsBatchingDimensions().empty())
      continue;
    SmallVector<int64_t> contract(dot.getRhsContractingDimensions());
    llvm::sort(contract);
    if (ArrayRef<int64_t>(contract) == dims)
      return true;
  }
  return false;
}

struct SplitReductionsPass : impl::KilnSplitReductionsBase<SplitReductionsPass> {
  using Base::Base;

  void runOnOperation() override {
    SmallVector<ReduceOp> reduces;
    getOperation().walk([&](ReduceOp op) {
      // Not inside fusions: kiln-fuse has not run yet in the pipeline, and
      // a fusion body is a kernel already.
      if (!op->getParentOfType<FusionOp>())
        reduces.push_back(op);
    });
    for (ReduceOp op : reduces)
      split(op);
  }

  void split(ReduceOp op) {
    auto type = cast<RankedTensorType>(op.getOperand().getType());
    if (!isa<FloatType>(type.getElementType()))
      return;
    SmallVector<int64_t> dims(op.getDimensions());
    llvm::sort(dims);
    int64_t leading = 0;
    while (leading < int64_t(dims.size()) && dims[leading] == leading)
      ++leading;
    if (leading == 0 || leading >= type.getRank())
      return;
    if (leading < int64_t(dims.size())) {
      splitChannels(op, dims, leading);
      return;
    }
    ArrayRef<int64_t> shape = type.getShape();
    int64_t rows = 1, results = 1;
    for (int64_t i = 0; i < type.getRank(); ++i)
      (i < leading ? rows : results) *= shape[i];
    if (rows < minReduced || results >= targetPartials)
      return;
    if (keepBiasGradients && isBiasGradient(op, dims))
      return;
    // Enough partials to keep the GPU's memory busy, and no chain of more
    // than max-rows rows; never groups of fewer than 16 rows.
    int64_t groups = 1;
    while ((groups * results < targetPartials || rows / groups > maxRows) &&
           rows % (2 * groups) == 0 && rows / (2 * groups) >= 16)
      groups *= 2;
    if (groups == 1)
      return;

    SmallVector<int64_t> grouped = {groups, rows / groups};
    grouped.append(shape.begin() + leading, shape.end());
    replaceInStages(op, [&](OpBuilder &b, Location loc, Value x) {
      x = grad::reshape(
          b, loc, x,
          RankedTensorType::get(grouped, getElementTypeOrSelf(x.getType())));
      Value partial = grad::reduce(b, loc, op.getKind(), x, {1});
      return grad::reduce(b, loc, op.getKind(), partial, {0});
    });
  }

  // Replaces |op| by what |stages| builds from its operand: f16 and bf16
  // widened to f32 first, so the partials are not rounded, and the result
  // rounded back once. Returns |stages|' value (before that rounding).
  Value replaceInStages(
      ReduceOp op,
      llvm::function_ref<Value(OpBuilder &, Location, Value)> stages) {
    OpBuilder b(op);
    Location loc = op.getLoc();
    Type element = getElementTypeOrSelf(op.getOperand().getType());
    Type accumulate = element.isF16() || element.isBF16()
                          ? Type(b.getF32Type())
                          : element;
    Value x = op.getOperand();
    if (accumulate != element)
      x = grad::convert(b, loc, x, accumulate);
    Value staged = stages(b, loc, x);
    Value result =
        accumulate != element ? grad::convert(b, loc, staged, element) : staged;
    op.getResult().replaceAllUsesWith(result);
    op.erase();
    ++numSplit;
    return staged;
  }

  // A reduction over leading dimensions [0, |leading|) and the trailing
  // ones, with dimensions kept between them (a convolution's bias
  // gradient or a batch norm's statistics: [N, C, H, W] over N, H and W):
  // the trailing dimensions first, a row reduction with N x C results
  // (a warp or block each), then the leading ones, a column reduction of C
  // results that split() may split again:
  //
  //   reduce(x [L..., K..., T...], dims L + T)
  //     -> reduce(reduce(x, dims T), dims L)
  //
  // Without it a generated kernel gives each of the C results one block
  // whose threads walk all N x H x W elements (LeNet-5's first bias
  // gradient: 6 blocks of 392 steps on a GPU of 132 multiprocessors).
  // f16 and bf16 are summed in f32 and rounded once; a mean is the mean of
  // equal-sized groups' means. Reductions whose leading or trailing part
  // is a single element, or that split() would leave alone for their size
  // (fewer than min-reduced elements, at least target-partials results),
  // stay as they are.
  void splitChannels(ReduceOp op, ArrayRef<int64_t> dims, int64_t leading) {
    auto type = cast<RankedTensorType>(op.getOperand().getType());
    ArrayRef<int64_t> shape = type.getShape();
    int64_t rank = type.getRank();
    ArrayRef<int64_t> trailing = dims.drop_front(leading);
    // The trailing reduced dimensions must end the shape, contiguous.
    for (auto [i, d] : llvm::enumerate(trailing))
      if (d != rank - int64_t(trailing.size()) + int64_t(i))
        return;
    int64_t rows = 1, results = 1, inner = 1, outer = 1;
    for (int64_t i = 0; i < rank; ++i) {
      bool reduced = llvm::is_contained(dims, i);
      (reduced ? rows : results) *= shape[i];
      if (reduced)
        (i < leading ? outer : inner) *= shape[i];
    }
    if (rows < minReduced || results >= targetPartials || inner < 2 ||
        outer < 2)
      return;
    SmallVector<int64_t> leadingDims;
    for (int64_t i = 0; i < leading; ++i)
      leadingDims.push_back(i);
    Value columns =
        replaceInStages(op, [&](OpBuilder &b, Location loc, Value x) {
          Value partial = grad::reduce(b, loc, op.getKind(), x, trailing);
          return grad::reduce(b, loc, op.getKind(), partial, leadingDims);
        });
    // The column stage: [L..., K...] over L, split again where it is long.
    if (auto reduce = columns.getDefiningOp<ReduceOp>())
      split(reduce);
  }
};

} // namespace
} // namespace kiln
