//===- Decompose.cpp - composite ops into fusible primitives --------------===//
//
// kiln-decompose rewrites the composite ops (softmax, log_softmax,
// layer_norm, softmax_cross_entropy, reduce mean, and gelu on request) into
// elementwise ops, broadcast_in_dim and reduce sum/max, so that kiln-fuse
// can put their pieces into the kernels of their neighbours: a softmax
// becomes part of the reduction kernel that also computes its input, a
// layer_norm takes the residual add before it. GEMMs and convolutions stay
// whole: they go to the libraries.
//
// Each decomposition performs the arithmetic of the op's reference semantics
// (ir/reference/NN.cpp, ir/reference/Reduction.cpp, the ScalarSemantics of
// gelu) in the same order: the maximum is subtracted before exp, sums run
// along the reduced dimensions in order, a mean divides the sum by the
// count. In f64 the decomposed ops therefore give bit-identical results on
// the interpreter; in narrower types they round after every op, as any
// unfused kernel sequence would. One difference in behaviour: a label out of
// range in softmax_cross_entropy is an error on the whole op but picks
// nothing (0) once decomposed.
//
//===----------------------------------------------------------------------===//

#include "passes/Decompose.h"

#include "ir/KilnOps.h"
#include "passes/Passes.h"

#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#include <cmath>

#define DEBUG_TYPE "kiln-decompose"

namespace kiln {
#define GEN_PASS_DEF_KILNDECOMPOSE
#include "passes/Passes.h.inc"

namespace {

using namespace mlir;

// A constant of |type| with every element |value|.
Value splat(OpBuilder &b, Location loc, RankedTensorType type, double value) {
  Type element = type.getElementType();
  Attribute scalar = isa<FloatType>(element)
                         ? Attribute(b.getFloatAttr(element, value))
                         : Attribute(b.getIntegerAttr(element, static_cast<int64_t>(value)));
  return b.create<ConstantOp>(loc, type, DenseElementsAttr::get(type, scalar));
}

// The same constant, shaped like |like|.
Value splatLike(OpBuilder &b, Location loc, Value like, double value) {
  return splat(b, loc, cast<RankedTensorType>(like.getType()), value);
}

Value reduce(OpBuilder &b, Location loc, ReduceKind kind, Value operand,
             ArrayRef<int64_t> dims) {
  return b.create<ReduceOp>(loc, kind, operand, dims);
}

// Broadcasts |reduced| (|full| without the dimensions |dims|) back to |full|.
Value broadcastBack(OpBuilder &b, Location loc, Value reduced,
                    RankedTensorType full, ArrayRef<int64_t> dims) {
  SmallVector<int64_t> kept;
  for (int64_t d = 0; d < full.getRank(); ++d)
    if (!llvm::is_contained(dims, d))
      kept.push_back(d);
  return b.create<BroadcastInDimOp>(loc, full, reduced, kept);
}

int64_t countAlong(RankedTensorType type, ArrayRef<int64_t> dims) {
  int64_t count = 1;
  for (int64_t d : dims)
    count *= type.getDimSize(d);
  return count;
}

// softmax: exp(x - max) / sum(exp(x - max)); log_softmax: (x - max) -
// log(sum(exp(x - max))).
template <typename OpTy, bool isLog>
struct DecomposeSoftmax : OpRewritePattern<OpTy> {
  using OpRewritePattern<OpTy>::OpRewritePattern;
  LogicalResult matchAndRewrite(OpTy op, PatternRewriter &r) const override {
    auto type = dyn_cast<RankedTensorType>(op.getType());
    if (!type || !type.hasStaticShape())
      return r.notifyMatchFailure(op, "needs a static shape");
    Location loc = op.getLoc();
    int64_t dims[] = {static_cast<int64_t>(op.getDimension())};
    Value x = op.getOperand();
    Value max = reduce(r, loc, ReduceKind::max, x, dims);
    Value shifted = r.create<SubOp>(loc, x, broadcastBack(r, loc, max, type, dims));
    Value exp = r.create<ExpOp>(loc, shifted);
    Value sum = reduce(r, loc, ReduceKind::sum, exp, dims);
    Value result;
    if (isLog) {
      Value logSum = r.create<LogOp>(loc, sum);
      result = r.create<SubOp>(loc, shifted, broadcastBack(r, loc, logSum, type, dims));
    } else {
      result = r.create<DivOp>(loc, exp, broadcastBack(r, loc, sum, type, dims));
    }
    r.replaceOp(op, result);
    return success();
  }
};

// (x - mean) * rsqrt(var + eps) * scale + bias, with the mean and the
// biased variance of the centred values over dimensions axis..rank.
struct DecomposeLayerNorm : OpRewritePattern<LayerNormOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(LayerNormOp op, PatternRewriter &r) const override {
    auto type = dyn_cast<RankedTensorType>(op.getType());
    if (!type || !type.hasStaticShape())
      return r.notifyMatchFailure(op, "needs a static shape");
    int64_t axis = op.getAxis();
    SmallVector<int64_t> dims, normalized;
    for (int64_t d = axis; d < type.getRank(); ++d) {
      dims.push_back(d);
      normalized.push_back(d);
    }
    int64_t count = countAlong(type, dims);
    if (count == 0)
      return r.notifyMatchFailure(op, "normalizes over no elements");
    Location loc = op.getLoc();
    Value x = op.getInput();
    Value sum = reduce(r, loc, ReduceKind::sum, x, dims);
    Value mean = r.create<DivOp>(loc, sum, splatLike(r, loc, sum, count));
    Value centred = r.create<SubOp>(loc, x, broadcastBack(r, loc, mean, type, dims));
    Value squares = r.create<MulOp>(loc, centred, centred);
    Value squareSum = reduce(r, loc, ReduceKind::sum, squares, dims);
    Value variance = r.create<DivOp>(loc, squareSum, splatLike(r, loc, squareSum, count));
    Value shiftedVariance = r.create<AddOp>(
        loc, variance,
        splatLike(r, loc, variance, op.getEpsilon().convertToDouble()));
    Value invStd = r.create<RsqrtOp>(loc, shiftedVariance);
    Value normal = r.create<MulOp>(loc, centred, broadcastBack(r, loc, invStd, type, dims));
    Value scale = r.create<BroadcastInDimOp>(loc, type, op.getScale(), normalized);
    Value bias = r.create<BroadcastInDimOp>(loc, type, op.getBias(), normalized);
    Value scaled = r.create<MulOp>(loc, normal, scale);
    r.replaceOp(op, r.create<AddOp>(loc, scaled, bias).getResult());
    return success();
  }
};

// logsumexp(logits[n, :]) - logits[n, labels[n]]; the picked logit is a
// select of the logits where iota == label, summed (every other term is 0).
struct DecomposeSoftmaxCrossEntropy : OpRewritePattern<SoftmaxCrossEntropyOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(SoftmaxCrossEntropyOp op,
                                PatternRewriter &r) const override {
    auto type = dyn_cast<RankedTensorType>(op.getLogits().getType());
    auto labelType = dyn_cast<RankedTensorType>(op.getLabels().getType());
    if (!type || !type.hasStaticShape() || !labelType)
      return r.notifyMatchFailure(op, "needs static shapes");
    Location loc = op.getLoc();
    int64_t dims[] = {1};
    Value logits = op.getLogits();
    Value max = reduce(r, loc, ReduceKind::max, logits, dims);
    Value shifted = r.create<SubOp>(loc, logits, broadcastBack(r, loc, max, type, dims));
    Value sum = reduce(r, loc, ReduceKind::sum, r.create<ExpOp>(loc, shifted), dims);
    Value logSumExp = r.create<AddOp>(loc, max, r.create<LogOp>(loc, sum));

    auto indexType = RankedTensorType::get(type.getShape(), labelType.getElementType());
    Value classes = r.create<IotaOp>(loc, indexType, 1);
    Value labels = broadcastBack(r, loc, op.getLabels(), indexType, dims);
    Value isLabel = r.create<CompareOp>(loc, CompareDirection::eq, classes, labels);
    Value picked = r.create<SelectOp>(loc, isLabel, logits, splat(r, loc, type, 0.0));
    Value pickedSum = reduce(r, loc, ReduceKind::sum, picked, dims);
    r.replaceOp(op, r.create<SubOp>(loc, logSumExp, pickedSum).getResult());
    return success();
  }
};

// mean = sum / count (the division the reference performs; integer means
// truncate toward zero like integer division).
struct DecomposeReduceMean : OpRewritePattern<ReduceOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(ReduceOp op, PatternRewriter &r) const override {
    if (op.getKind() != ReduceKind::mean)
      return r.notifyMatchFailure(op, "not a mean");
    auto type = dyn_cast<RankedTensorType>(op.getOperand().getType());
    if (!type || !type.hasStaticShape())
      return r.notifyMatchFailure(op, "needs a static shape");
    int64_t count = countAlong(type, op.getDimensions());
    if (count == 0)
      return r.notifyMatchFailure(op, "a mean over no elements stays whole");
    Location loc = op.getLoc();
    Value sum = reduce(r, loc, ReduceKind::sum, op.getOperand(), op.getDimensions());
    if (count == 1) {
      r.replaceOp(op, sum);
      return success();
    }
    r.replaceOp(op, r.create<DivOp>(loc, sum, splatLike(r, loc, sum, count)).getResult());
    return success();
  }
};

// GeluOp's scalar formula (ir/ScalarSemantics.cpp) with tensor ops:
// erf:  (0.5 x) (1 + erf(x sqrt(1/2)))
// tanh: (0.5 x) (1 + tanh(sqrt(2/pi) (x + 0.044715 (x x) x)))
struct DecomposeGelu : OpRewritePattern<GeluOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(GeluOp op, PatternRewriter &r) const override {
    auto type = dyn_cast<RankedTensorType>(op.getType());
    if (!type || !type.hasStaticShape())
      return r.notifyMatchFailure(op, "needs a static shape");
    Location loc = op.getLoc();
    Value x = op.getOperand();
    auto c = [&](double v) { return splat(r, loc, type, v); };
    Value inner;
    if (op.getApproximate() == GeluApproximation::erf) {
      inner = r.create<ErfOp>(loc, r.create<MulOp>(loc, x, c(M_SQRT1_2)));
    } else {
      Value cube = r.create<MulOp>(loc, r.create<MulOp>(loc, x, x), x);
      Value poly = r.create<AddOp>(loc, x, r.create<MulOp>(loc, c(0.044715), cube));
      inner = r.create<TanhOp>(
          loc, r.create<MulOp>(loc, c(std::sqrt(2.0 / M_PI)), poly));
    }
    Value halfX = r.create<MulOp>(loc, c(0.5), x);
    Value onePlus = r.create<AddOp>(loc, c(1.0), inner);
    r.replaceOp(op, r.create<MulOp>(loc, halfX, onePlus).getResult());
    return success();
  }
};

struct DecomposePass : impl::KilnDecomposeBase<DecomposePass> {
  using Base::Base;
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    DecomposeOptions options;
    options.gelu = gelu;
    populateDecomposePatterns(patterns, options);
    if (failed(applyPatternsAndFoldGreedily(getOperation(), std::move(patterns))))
      return signalPassFailure();
  }
};

} // namespace

void populateDecomposePatterns(RewritePatternSet &patterns,
                               const DecomposeOptions &options) {
  MLIRContext *context = patterns.getContext();
  patterns.add<DecomposeSoftmax<SoftmaxOp, false>,
               DecomposeSoftmax<LogSoftmaxOp, true>, DecomposeLayerNorm,
               DecomposeSoftmaxCrossEntropy, DecomposeReduceMean>(context);
  if (options.gelu)
    patterns.add<DecomposeGelu>(context);
}

} // namespace kiln
