//===- Decompose.cpp - composite ops into fusible primitives --------------===//
//
// kiln-decompose rewrites the composite ops (softmax, log_softmax,
// layer_norm, softmax_cross_entropy, reduce mean, attention and
// attention_grad unless asked to keep them, and gelu on request) into
// elementwise ops, broadcast_in_dim and reduce sum/max, so that kiln-fuse
// can put their pieces into the kernels of their neighbours: a softmax
// becomes part of the reduction kernel that also computes its input, a
// layer_norm takes the residual add before it. GEMMs and convolutions stay
// whole: they go to the libraries. Attention stays whole only where a fused
// library kernel runs it (CUDA); elsewhere it becomes two GEMMs and a
// softmax (backward: five GEMMs).
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
#include "ir/gradients/GradientUtils.h"
#include "passes/Passes.h"
#include "passes/Rematerialize.h"

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

// The index of the first maximum along |dim| (the first NaN where there is
// one, as the reference takes it): the row's max (NaN when any element is),
// the positions holding it (or, when the max is NaN, the NaNs: x != x),
// and the least of their indices (the others stand for |size|, past every
// index). Integers have no NaN: the positions holding the max. The kernel
// models have no index-carrying reduction; these are ops every backend's
// kernels already build.
struct DecomposeArgmax : OpRewritePattern<ArgmaxOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(ArgmaxOp op, PatternRewriter &r) const override {
    auto type = dyn_cast<RankedTensorType>(op.getOperand().getType());
    auto resultType = dyn_cast<RankedTensorType>(op.getType());
    if (!type || !type.hasStaticShape() || !resultType ||
        type.getElementType().isInteger(1))
      return r.notifyMatchFailure(op, "needs a static numeric operand");
    bool isFloat = isa<FloatType>(type.getElementType());
    Location loc = op.getLoc();
    int64_t dim = op.getDimension();
    int64_t dims[] = {dim};
    Value x = op.getOperand();
    Value max = reduce(r, loc, ReduceKind::max, x, dims);
    Value atMax = r.create<CompareOp>(loc, CompareDirection::eq, x,
                                      broadcastBack(r, loc, max, type, dims));
    Value top = atMax;
    if (isFloat) {
      Value isNan = r.create<CompareOp>(loc, CompareDirection::ne, x, x);
      auto predicate = RankedTensorType::get(type.getShape(), r.getI1Type());
      top =
          r.create<SelectOp>(loc, atMax, splat(r, loc, predicate, 1.0), isNan);
    }
    auto indexType = RankedTensorType::get(type.getShape(), resultType.getElementType());
    Value indices = r.create<IotaOp>(loc, indexType, dim);
    Value candidates = r.create<SelectOp>(
        loc, top, indices, splat(r, loc, indexType, double(type.getDimSize(dim))));
    r.replaceOp(op, reduce(r, loc, ReduceKind::min, candidates, dims));
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

// Average pooling (padded elements counted, count_include_pad) is a
// depthwise convolution with a constant filter: every channel's own [kh, kw]
// window weighted 1 / (kh kw). Its gradient is that convolution's input
// gradient. The backends run both as convolutions (OpenBLAS, cuBLASLt).
Value averagingFilter(OpBuilder &b, Location loc, Type element, int64_t channels,
                      ArrayRef<int64_t> window) {
  auto type = RankedTensorType::get({channels, 1, window[0], window[1]}, element);
  return splat(b, loc, type, 1.0 / double(window[0] * window[1]));
}

// kiln.avg_pool2d as kiln.conv2d, kiln.avg_pool2d_grad as
// kiln.conv2d_input_grad: operand 0 (the input, or the output gradient)
// against the averaging filter, with the pooling's strides and padding and
// a group per channel (dimension 1 of the result in both).
template <typename PoolOp, typename ConvOp>
struct DecomposeAveragePooling : OpRewritePattern<PoolOp> {
  using OpRewritePattern<PoolOp>::OpRewritePattern;
  LogicalResult matchAndRewrite(PoolOp op, PatternRewriter &r) const override {
    auto type = cast<RankedTensorType>(op.getType());
    int64_t channels = type.getDimSize(1);
    Value filter = averagingFilter(r, op.getLoc(), type.getElementType(), channels,
                                   op.getWindow());
    r.replaceOpWithNewOp<ConvOp>(op, type, op->getOperand(0), filter,
                                 op.getStridesAttr(), op.getPaddingAttr(),
                                 r.getDenseI64ArrayAttr({1, 1}),
                                 r.getI64IntegerAttr(channels));
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

// kiln.attention and kiln.attention_grad, computed as the reference
// semantics (ir/reference/NN.cpp) describe, in the compute type C of the
// lse result (f32 for f16, bf16 and f32; f64 for f64) as a fused kernel
// would, converting q, k, v (and out, dout) to C first and the results back:
//   s = scale * (q . k)           dot_general, batch [0, 1], contract [3] x [3]
//   s = select(j <= i, s, -inf)   causal only: iota i (dim 2) >= iota j (dim 3)
//   m = max_j s; lse = m + log(sum_j exp(s - m)); p = exp(s - lse)
//   out = p . v                   contract p[3] x v[2]
// Backward, with p recomputed from lse as above:
//   dv = p . dout (contract p[2] x dout[2]); dp = dout . v (contract [3] x [3])
//   D = sum_e dout * out; ds = scale * (p * (dp - D))
//   dq = ds . k (contract ds[3] x k[2]); dk = ds . q (contract ds[2] x q[2])
// In f64 this is the reference's arithmetic in its order, apart from masked
// keys, which contribute exact zeros instead of being skipped.
class AttentionBuilder {
public:
  AttentionBuilder(PatternRewriter &r, Location loc, Value q, Value k, Value v,
                   double scale, bool causal)
      : r(r), loc(loc), scale(scale), causal(causal) {
    auto qType = cast<RankedTensorType>(q.getType());
    compute = cast<FloatType>(attentionLseElementType(qType.getElementType()));
    this->q = toCompute(q);
    this->k = toCompute(k);
    this->v = toCompute(v);
  }

  // |x| converted to the compute type (|x| itself when it has it).
  Value toCompute(Value x) { return convert(x, compute); }
  // |x| converted to the element type |element|.
  Value convert(Value x, Type element) {
    auto type = cast<RankedTensorType>(x.getType());
    if (type.getElementType() == element)
      return x;
    return r.create<ConvertOp>(loc, type.clone(element), x);
  }

  Value dot(Value lhs, Value rhs, int64_t lhsContract, int64_t rhsContract) {
    int64_t batch[] = {0, 1};
    return r.create<DotGeneralOp>(loc, lhs, rhs, batch, batch,
                                  ArrayRef<int64_t>{lhsContract},
                                  ArrayRef<int64_t>{rhsContract});
  }

  // The scaled, masked scores [B, H, Tq, Tk].
  Value scores() {
    Value s = dot(q, k, 3, 3);
    auto type = cast<RankedTensorType>(s.getType());
    s = r.create<MulOp>(loc, s, splat(r, loc, type, scale));
    if (!causal)
      return s;
    // Key j is visible to query i when j <= i: one [Tq, Tk] mask, broadcast.
    auto indexType = RankedTensorType::get(type.getShape().take_back(2),
                                           r.getI64Type());
    Value rows = r.create<IotaOp>(loc, indexType, 0);
    Value cols = r.create<IotaOp>(loc, indexType, 1);
    Value visible = r.create<CompareOp>(loc, CompareDirection::ge, rows, cols);
    Value mask = r.create<BroadcastInDimOp>(
        loc, type.clone(r.getI1Type()), visible, ArrayRef<int64_t>{2, 3});
    return r.create<SelectOp>(loc, mask, s, splat(r, loc, type, -INFINITY));
  }

  // p = exp(s - lse) for scores |s| and lse [B, H, Tq].
  Value probabilities(Value s, Value lse) {
    auto type = cast<RankedTensorType>(s.getType());
    int64_t keyDim[] = {3};
    return r.create<ExpOp>(
        loc, r.create<SubOp>(loc, s, broadcastBack(r, loc, lse, type, keyDim)));
  }

  // out (in C) and lse.
  std::pair<Value, Value> forward() {
    Value s = scores();
    auto type = cast<RankedTensorType>(s.getType());
    int64_t keyDim[] = {3};
    Value max = reduce(r, loc, ReduceKind::max, s, keyDim);
    Value shifted = r.create<SubOp>(loc, s, broadcastBack(r, loc, max, type, keyDim));
    Value sum = reduce(r, loc, ReduceKind::sum, r.create<ExpOp>(loc, shifted), keyDim);
    Value lse = r.create<AddOp>(loc, max, r.create<LogOp>(loc, sum));
    Value out = dot(probabilities(s, lse), v, 3, 2);
    return {out, lse};
  }

  // dq, dk, dv (in C).
  std::tuple<Value, Value, Value> backward(Value out, Value lse, Value dout) {
    out = toCompute(out);
    lse = toCompute(lse);
    dout = toCompute(dout);
    Value s = scores();
    auto type = cast<RankedTensorType>(s.getType());
    Value p = probabilities(s, lse);
    Value dv = dot(p, dout, 2, 2);
    Value dp = dot(dout, v, 3, 3);
    int64_t valueDim[] = {3};
    Value rowD =
        reduce(r, loc, ReduceKind::sum, r.create<MulOp>(loc, dout, out), valueDim);
    Value ds = r.create<MulOp>(
        loc, p, r.create<SubOp>(loc, dp, broadcastBack(r, loc, rowD, type, valueDim)));
    ds = r.create<MulOp>(loc, splat(r, loc, type, scale), ds);
    Value dq = dot(ds, k, 3, 2);
    Value dk = dot(ds, q, 2, 2);
    return {dq, dk, dv};
  }

private:
  PatternRewriter &r;
  Location loc;
  double scale;
  bool causal;
  FloatType compute;
  Value q, k, v;
};

// |wideOnly|: only an attention the fused kernels cannot run (head dims
// past kMaxFusedAttentionHeadDim), for a target that keeps the rest whole.
struct DecomposeAttention : OpRewritePattern<AttentionOp> {
  DecomposeAttention(MLIRContext *context, bool wideOnly)
      : OpRewritePattern(context), wideOnly(wideOnly) {}
  bool wideOnly;
  LogicalResult matchAndRewrite(AttentionOp op, PatternRewriter &r) const override {
    if (wideOnly && fitsFusedAttention(op.getQ(), op.getV()))
      return r.notifyMatchFailure(op, "the fused attention kernels run it");
    AttentionBuilder b(r, op.getLoc(), op.getQ(), op.getK(), op.getV(),
                       op.getScale().convertToDouble(), op.getCausal());
    auto [out, lse] = b.forward();
    Type element = op.getOut().getType().getElementType();
    r.replaceOp(op, {b.convert(out, element), lse});
    return success();
  }
};

struct DecomposeAttentionGrad : OpRewritePattern<AttentionGradOp> {
  DecomposeAttentionGrad(MLIRContext *context, bool wideOnly)
      : OpRewritePattern(context), wideOnly(wideOnly) {}
  bool wideOnly;
  LogicalResult matchAndRewrite(AttentionGradOp op,
                                PatternRewriter &r) const override {
    if (wideOnly && fitsFusedAttention(op.getQ(), op.getV()))
      return r.notifyMatchFailure(op, "the fused attention kernels run it");
    AttentionBuilder b(r, op.getLoc(), op.getQ(), op.getK(), op.getV(),
                       op.getScale().convertToDouble(), op.getCausal());
    auto [dq, dk, dv] = b.backward(op.getOut(), op.getLse(), op.getDout());
    auto elementOf = [](Value x) {
      return cast<RankedTensorType>(x.getType()).getElementType();
    };
    r.replaceOp(op, {b.convert(dq, elementOf(op.getDq())),
                     b.convert(dk, elementOf(op.getDk())),
                     b.convert(dv, elementOf(op.getDv()))});
    return success();
  }
};

// The packed forms: kiln.attention over the [B, H, T, D] parts of qkv
// (packedAttentionPart), out and the gradients moved back to [B, T, H, D]
// (then expanded further when the target wants the primitives).
struct DecomposeAttentionQkv : OpRewritePattern<AttentionQkvOp> {
  DecomposeAttentionQkv(MLIRContext *context, bool wideOnly)
      : OpRewritePattern(context), wideOnly(wideOnly) {}
  bool wideOnly;
  LogicalResult matchAndRewrite(AttentionQkvOp op, PatternRewriter &r) const override {
    if (wideOnly && fitsFusedAttention(op.getOut(), op.getOut()))
      return r.notifyMatchFailure(op, "the fused attention kernels run it");
    Location loc = op.getLoc();
    auto part = [&](int64_t p) { return packedAttentionPart(r, loc, op.getQkv(), p); };
    auto attention = r.create<AttentionOp>(loc, part(0), part(1), part(2),
                                           op.getScaleAttr(), op.getCausalAttr());
    r.replaceOp(op, {grad::transpose(r, loc, attention.getOut(), {0, 2, 1, 3}),
                     attention.getLse()});
    return success();
  }
};

struct DecomposeAttentionQkvGrad : OpRewritePattern<AttentionQkvGradOp> {
  DecomposeAttentionQkvGrad(MLIRContext *context, bool wideOnly)
      : OpRewritePattern(context), wideOnly(wideOnly) {}
  bool wideOnly;
  LogicalResult matchAndRewrite(AttentionQkvGradOp op,
                                PatternRewriter &r) const override {
    if (wideOnly && fitsFusedAttention(op.getOut(), op.getOut()))
      return r.notifyMatchFailure(op, "the fused attention kernels run it");
    Location loc = op.getLoc();
    auto part = [&](int64_t p) { return packedAttentionPart(r, loc, op.getQkv(), p); };
    auto g = r.create<AttentionGradOp>(
        loc, part(0), part(1), part(2),
        grad::transpose(r, loc, op.getOut(), {0, 2, 1, 3}), op.getLse(),
        grad::transpose(r, loc, op.getDout(), {0, 2, 1, 3}), op.getScaleAttr(),
        op.getCausalAttr());
    auto type = cast<RankedTensorType>(op.getQkv().getType());
    ArrayRef<int64_t> s = type.getShape();
    auto partType =
        RankedTensorType::get({s[0], s[1], 1, s[3], s[4]}, type.getElementType());
    SmallVector<Value, 3> parts;
    for (Value d : {g.getDq(), g.getDk(), g.getDv()})
      parts.push_back(
          grad::reshape(r, loc, grad::transpose(r, loc, d, {0, 2, 1, 3}), partType));
    r.replaceOpWithNewOp<ConcatenateOp>(op, type, parts, /*dimension=*/2);
    return success();
  }
};

// Passes kiln.remat (kiln-autodiff's recomputed clones) on from an op to
// the ops a pattern expands it into, so that CSE keeps those apart from the
// forward pass's expansion of the same op: the ops inserted since the last
// replacement are the replacing op's.
struct RematMarker : RewriterBase::Listener {
  llvm::SetVector<Operation *> inserted;
  void notifyOperationInserted(Operation *op, OpBuilder::InsertPoint) override {
    inserted.insert(op);
  }
  void notifyOperationErased(Operation *op) override { inserted.remove(op); }
  void notifyOperationReplaced(Operation *op, ValueRange) override {
    if (op->hasAttr(kRematAttrName))
      for (Operation *n : inserted)
        n->setAttr(kRematAttrName, UnitAttr::get(op->getContext()));
    inserted.clear();
  }
};

struct DecomposePass : impl::KilnDecomposeBase<DecomposePass> {
  using Base::Base;
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    DecomposeOptions options;
    options.gelu = gelu;
    options.attention = attention;
    populateDecomposePatterns(patterns, options);
    RematMarker marker;
    GreedyRewriteConfig config;
    config.listener = &marker;
    if (failed(applyPatternsAndFoldGreedily(getOperation(), std::move(patterns),
                                            config)))
      return signalPassFailure();
  }
};

} // namespace

Value packedAttentionPart(OpBuilder &b, Location loc, Value qkv, int64_t part) {
  auto type = cast<RankedTensorType>(qkv.getType());
  ArrayRef<int64_t> s = type.getShape();
  Value slice = grad::slice(b, loc, qkv, {0, 0, part, 0, 0},
                            {s[0], s[1], part + 1, s[3], s[4]}, {1, 1, 1, 1, 1});
  Value heads = grad::reshape(
      b, loc, slice, RankedTensorType::get({s[0], s[1], s[3], s[4]}, type.getElementType()));
  return grad::transpose(b, loc, heads, {0, 2, 1, 3});
}

void populateDecomposePatterns(RewritePatternSet &patterns,
                               const DecomposeOptions &options) {
  MLIRContext *context = patterns.getContext();
  patterns.add<DecomposeSoftmax<SoftmaxOp, false>,
               DecomposeSoftmax<LogSoftmaxOp, true>, DecomposeLayerNorm,
               DecomposeSoftmaxCrossEntropy, DecomposeReduceMean, DecomposeArgmax,
               DecomposeAveragePooling<AvgPool2DOp, Conv2DOp>,
               DecomposeAveragePooling<AvgPool2DGradOp, Conv2DInputGradOp>>(context);
  if (options.gelu)
    patterns.add<DecomposeGelu>(context);
  // Kept whole (options.attention off), an attention still decomposes when
  // its head dims are past what the fused kernels take.
  patterns.add<DecomposeAttention, DecomposeAttentionGrad, DecomposeAttentionQkv,
               DecomposeAttentionQkvGrad>(context, /*wideOnly=*/!options.attention);
}

} // namespace kiln
