//===- NN.cpp - gradient rules of the neural-network composites -----------===//
//
// The composites' gradients are written with primitive kiln ops, so later
// passes fuse and lower them like any other code:
//   softmax:      dx = y * (g - sum(g * y))
//   log_softmax:  dx = g - exp(y) * sum(g)
//   layer_norm:   with xhat = (x - m) * rstd recomputed from the input,
//                 dbias = sum(g), dscale = sum(g * xhat) over the leading dims,
//                 dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))
//                 where dxhat = g * scale
//   gather:       scatter_add of g into zeros of the table's shape
//   scatter_add:  operand gets g, updates get gather(g, indices); with
//                 combine = max or min the winners share g; with prod each
//                 factor gets g times the product of the others
//   dropout:      dropout of g with the same seed, counter and rate (the same
//                 mask and scale)
//   softmax_cross_entropy: (softmax(logits) - one_hot(labels)) * g
//   attention:    kiln.attention_grad of q, k, v, out, lse and g (the lse
//                 result carries no gradient; one flowing into it is an
//                 error, and attention_grad itself is not differentiable)
// Indices, labels and the dropout counter carry no gradient.
//
//===----------------------------------------------------------------------===//

#include "ir/gradients/GradientUtils.h"

using namespace mlir;
using namespace kiln::grad;

namespace kiln {

LogicalResult SoftmaxOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                        SmallVectorImpl<Value> &operandGrads) {
  Value g = floatResultGrad(*this, resultGrads);
  if (!g)
    return noGradients(*this, operandGrads);
  Location loc = getLoc();
  Value y = getResult();
  int64_t dim = getDimension();
  Value gy = mul(b, loc, g, y);
  Value total = reduce(b, loc, ReduceKind::sum, gy, {dim});
  Value spread = broadcastBack(b, loc, total, typeOf(y), {dim});
  operandGrads.push_back(mul(b, loc, y, sub(b, loc, g, spread)));
  return success();
}

LogicalResult LogSoftmaxOp::buildGradients(OpBuilder &b,
                                           ArrayRef<Value> resultGrads,
                                           SmallVectorImpl<Value> &operandGrads) {
  Value g = floatResultGrad(*this, resultGrads);
  if (!g)
    return noGradients(*this, operandGrads);
  Location loc = getLoc();
  Value y = getResult();
  int64_t dim = getDimension();
  Value softmax = b.create<ExpOp>(loc, y.getType(), y);
  Value total = reduce(b, loc, ReduceKind::sum, g, {dim});
  Value spread = broadcastBack(b, loc, total, typeOf(y), {dim});
  operandGrads.push_back(sub(b, loc, g, mul(b, loc, softmax, spread)));
  return success();
}

LogicalResult LayerNormOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                          SmallVectorImpl<Value> &operandGrads) {
  Value g = floatResultGrad(*this, resultGrads);
  if (!g)
    return noGradients(*this, operandGrads);
  Location loc = getLoc();
  Value x = getInput();
  RankedTensorType xType = typeOf(x);
  int64_t axis = getAxis(), rank = xType.getRank();
  SmallVector<int64_t> normDims = range(axis, rank), leadDims = range(0, axis);

  // Recompute the statistics as the forward op defines them.
  Value mean = reduce(b, loc, ReduceKind::mean, x, normDims);
  Value centered = sub(b, loc, x, broadcastBack(b, loc, mean, xType, normDims));
  Value variance =
      reduce(b, loc, ReduceKind::mean, mul(b, loc, centered, centered), normDims);
  Value rstd = b.create<RsqrtOp>(
      loc, variance.getType(),
      add(b, loc, variance, splatLike(b, loc, variance, getEpsilon().convertToDouble())));
  Value rstdFull = broadcastBack(b, loc, rstd, xType, normDims);
  Value xhat = mul(b, loc, centered, rstdFull);

  Value dBias = reduce(b, loc, ReduceKind::sum, g, leadDims);
  Value dScale = reduce(b, loc, ReduceKind::sum, mul(b, loc, g, xhat), leadDims);

  Value scaleFull = broadcast(b, loc, getScale(), normDims, xType);
  Value dxhat = mul(b, loc, g, scaleFull);
  Value meanDxhat = broadcastBack(
      b, loc, reduce(b, loc, ReduceKind::mean, dxhat, normDims), xType, normDims);
  Value meanDxhatXhat = broadcastBack(
      b, loc, reduce(b, loc, ReduceKind::mean, mul(b, loc, dxhat, xhat), normDims),
      xType, normDims);
  Value dx = mul(b, loc, rstdFull,
                 sub(b, loc, sub(b, loc, dxhat, meanDxhat),
                     mul(b, loc, xhat, meanDxhatXhat)));
  operandGrads.append({dx, dScale, dBias});
  return success();
}

LogicalResult GatherOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                       SmallVectorImpl<Value> &operandGrads) {
  Value g = floatResultGrad(*this, resultGrads);
  if (!g)
    return noGradients(*this, operandGrads);
  Location loc = getLoc();
  RankedTensorType tableType = typeOf(getTable());
  Value zeros = splat(b, loc, tableType, 0.0);
  Value dTable =
      b.create<ScatterAddOp>(loc, tableType, zeros, getIndices(), g);
  operandGrads.append({dTable, Value()});
  return success();
}

// Added updates: the result's gradient, and gathered back for the updates.
// Combined by max or min: each result element's gradient goes to the
// elements equal to it (the operand's and the updates written to it),
// split evenly among ties, as the gradient of a max reduction (and
// PyTorch's scatter_reduce "amax"): the ties counted by the scatter of the
// updates' hits onto the operand's.
// combine = prod: each row's factors are its own element and the updates
// written to it; each factor's gradient is g times the product of the
// others (productOfOthers), from the count of zero factors (a scatter that
// adds) and the product of the nonzero ones (a scatter that multiplies),
// gathered back for the updates.
static LogicalResult
scatterProductGradients(OpBuilder &b, ScatterAddOp op, Value g,
                        SmallVectorImpl<Value> &operandGrads) {
  Location loc = op.getLoc();
  Value t = op.getOperand(), u = op.getUpdates(), indices = op.getIndices();
  RankedTensorType tType = typeOf(t), uType = typeOf(u);
  Type element = tType.getElementType();
  Value tZero, uZero;
  Value tNonzero = nonzeroFactors(b, loc, t, tZero);
  Value uNonzero = nonzeroFactors(b, loc, u, uZero);
  Value zeros =
      b.create<ScatterAddOp>(loc, tType, convert(b, loc, tZero, element),
                             indices, convert(b, loc, uZero, element));
  Value rest = b.create<ScatterAddOp>(loc, tType, tNonzero, indices, uNonzero,
                                      ReduceKind::prod);
  Value dT =
      mul(b, loc, g, productOfOthers(b, loc, tNonzero, tZero, zeros, rest));
  auto gathered = [&](Value v) -> Value {
    return b.create<GatherOp>(loc, uType, v, indices);
  };
  Value dU = mul(b, loc, gathered(g),
                 productOfOthers(b, loc, uNonzero, uZero, gathered(zeros),
                                 gathered(rest)));
  operandGrads.append({dT, Value(), dU});
  return success();
}

LogicalResult ScatterAddOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                           SmallVectorImpl<Value> &operandGrads) {
  Value g = floatResultGrad(*this, resultGrads);
  if (!g)
    return noGradients(*this, operandGrads);
  Location loc = getLoc();
  auto updatesType = cast<RankedTensorType>(getUpdates().getType());
  if (getCombineKind() == ReduceKind::sum) {
    Value dUpdates = b.create<GatherOp>(loc, updatesType, g, getIndices());
    operandGrads.append({g, Value(), dUpdates});
    return success();
  }
  if (getCombineKind() == ReduceKind::prod)
    return scatterProductGradients(b, *this, g, operandGrads);
  Type element = updatesType.getElementType();
  Value result = getResult();
  Value atRow = b.create<GatherOp>(loc, updatesType, result, getIndices());
  Value selfHit = convert(
      b, loc, compare(b, loc, CompareDirection::eq, getOperand(), result),
      element);
  Value updateHit = convert(
      b, loc, compare(b, loc, CompareDirection::eq, getUpdates(), atRow),
      element);
  Value hits = b.create<ScatterAddOp>(loc, result.getType(), selfHit,
                                      getIndices(), updateHit);
  // A NaN result equals nothing: no element takes its gradient.
  Value share =
      div(b, loc, g, b.create<MaxOp>(loc, hits, splatLike(b, loc, hits, 1.0)));
  Value dOperand = mul(b, loc, selfHit, share);
  Value dUpdates =
      mul(b, loc, updateHit,
          b.create<GatherOp>(loc, updatesType, share, getIndices()));
  operandGrads.append({dOperand, Value(), dUpdates});
  return success();
}

LogicalResult DropoutOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                        SmallVectorImpl<Value> &operandGrads) {
  Value g = floatResultGrad(*this, resultGrads);
  if (!g)
    return noGradients(*this, operandGrads);
  Value dx = b.create<DropoutOp>(getLoc(), g.getType(), g, getCounter(),
                                 getRateAttr(), getSeedAttr());
  operandGrads.append({dx, Value()});
  return success();
}

LogicalResult
RandomUniformOp::buildGradients(OpBuilder &, ArrayRef<Value>,
                                SmallVectorImpl<Value> &operandGrads) {
  return noGradients(*this, operandGrads);
}

LogicalResult SoftmaxCrossEntropyOp::buildGradients(
    OpBuilder &b, ArrayRef<Value> resultGrads,
    SmallVectorImpl<Value> &operandGrads) {
  Value g = floatResultGrad(*this, resultGrads);
  if (!g)
    return noGradients(*this, operandGrads);
  Location loc = getLoc();
  Value logits = getLogits(), labels = getLabels();
  RankedTensorType logitsType = typeOf(logits);
  auto indexType = RankedTensorType::get(logitsType.getShape(),
                                         typeOf(labels).getElementType());
  Value probabilities = b.create<SoftmaxOp>(loc, logitsType, logits,
                                            b.getI64IntegerAttr(1));
  // one_hot(labels)[n, c] = (c == labels[n]).
  Value classes = b.create<IotaOp>(loc, indexType, b.getI64IntegerAttr(1));
  Value labelsFull = broadcast(b, loc, labels, {0}, indexType);
  Value oneHot = convert(b, loc,
                         compare(b, loc, CompareDirection::eq, classes, labelsFull),
                         logitsType.getElementType());
  Value gFull = broadcast(b, loc, g, {0}, logitsType);
  operandGrads.append(
      {mul(b, loc, sub(b, loc, probabilities, oneHot), gFull), Value()});
  return success();
}

// The gradient of an attention's out result (either form): null when none
// reaches it; an error when one reaches lse.
static FailureOr<Value> attentionOutGrad(Operation *op,
                                         ArrayRef<Value> resultGrads) {
  if (resultGrads.size() > 1 && resultGrads[1])
    return op->emitOpError()
           << "has a gradient flowing into its lse result (#1), which is not "
              "differentiable: only the out result (#0) may reach the loss";
  return resultGrads.empty() ? Value() : resultGrads[0];
}

// Neither form of attention's gradient is differentiable itself.
static LogicalResult attentionGradNotDifferentiable(Operation *op) {
  return op->emitOpError()
         << "is not differentiable: a gradient flows through it to the loss "
            "(second-order gradients of attention are not supported)";
}

LogicalResult AttentionOp::buildGradients(OpBuilder &b,
                                          ArrayRef<Value> resultGrads,
                                          SmallVectorImpl<Value> &operandGrads) {
  FailureOr<Value> g = attentionOutGrad(*this, resultGrads);
  if (failed(g))
    return failure();
  if (!*g)
    return noGradients(*this, operandGrads);
  auto grad = b.create<AttentionGradOp>(getLoc(), getQ(), getK(), getV(),
                                        getOut(), getLse(), *g, getScaleAttr(),
                                        getCausalAttr());
  operandGrads.append({grad.getDq(), grad.getDk(), grad.getDv()});
  return success();
}

LogicalResult AttentionGradOp::buildGradients(OpBuilder &,
                                              ArrayRef<Value>,
                                              SmallVectorImpl<Value> &) {
  return attentionGradNotDifferentiable(*this);
}

LogicalResult AttentionQkvOp::buildGradients(OpBuilder &b,
                                             ArrayRef<Value> resultGrads,
                                             SmallVectorImpl<Value> &operandGrads) {
  FailureOr<Value> g = attentionOutGrad(*this, resultGrads);
  if (failed(g))
    return failure();
  if (!*g)
    return noGradients(*this, operandGrads);
  auto grad = b.create<AttentionQkvGradOp>(getLoc(), getQkv(), getOut(), getLse(),
                                           *g, getScaleAttr(), getCausalAttr());
  operandGrads.push_back(grad.getDqkv());
  return success();
}

LogicalResult AttentionQkvGradOp::buildGradients(OpBuilder &, ArrayRef<Value>,
                                                 SmallVectorImpl<Value> &) {
  return attentionGradNotDifferentiable(*this);
}

} // namespace kiln
