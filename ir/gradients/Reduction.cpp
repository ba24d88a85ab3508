//===- Reduction.cpp - gradient rules of reductions -----------------------===//
//
// sum: the gradient of each reduced element is broadcast back over its
// fibre; mean: the same divided by the fibre's size; max and min: the
// gradient goes to the elements equal to the extremum, split evenly among
// ties (as JAX does), so the rule is symmetric and the total is preserved;
// prod: each element's gradient is the product of the others, as PyTorch's
// prod gradient: with no zero in the fibre the product over the element;
// with one zero, the product of the rest at the zero and 0 elsewhere; with
// more, 0. Integer reductions and argmax carry no gradient.
//
//===----------------------------------------------------------------------===//

#include "ir/gradients/GradientUtils.h"

using namespace mlir;
using namespace kiln::grad;

namespace kiln {

LogicalResult ReduceOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                       SmallVectorImpl<Value> &operandGrads) {
  Value g = floatResultGrad(*this, resultGrads);
  if (!g)
    return noGradients(*this, operandGrads);
  Location loc = getLoc();
  Value x = getOperand();
  RankedTensorType xType = typeOf(x);
  ArrayRef<int64_t> dims = getDimensions();
  if (dims.empty()) {
    operandGrads.push_back(g);
    return success();
  }
  switch (getKind()) {
  case ReduceKind::sum:
    operandGrads.push_back(broadcastBack(b, loc, g, xType, dims));
    break;
  case ReduceKind::mean: {
    int64_t count = 1;
    for (int64_t d : dims)
      count *= xType.getDimSize(d);
    Value spread = broadcastBack(b, loc, g, xType, dims);
    operandGrads.push_back(scale(b, loc, spread, 1.0 / static_cast<double>(count)));
    break;
  }
  case ReduceKind::max:
  case ReduceKind::min: {
    Value extremum = broadcastBack(b, loc, getResult(), xType, dims);
    Value hit = convert(b, loc, compare(b, loc, CompareDirection::eq, x, extremum),
                        xType.getElementType());
    Value hits = reduce(b, loc, ReduceKind::sum, hit, dims);
    Value share = div(b, loc, g, hits);
    operandGrads.push_back(mul(b, loc, hit, broadcastBack(b, loc, share, xType, dims)));
    break;
  }
  case ReduceKind::prod: {
    Value isZero;
    Value nonzero = nonzeroFactors(b, loc, x, isZero);
    Value zeros = reduce(b, loc, ReduceKind::sum,
                         convert(b, loc, isZero, xType.getElementType()), dims);
    Value rest = reduce(b, loc, ReduceKind::prod, nonzero, dims);
    Value others = productOfOthers(b, loc, nonzero, isZero,
                                   broadcastBack(b, loc, zeros, xType, dims),
                                   broadcastBack(b, loc, rest, xType, dims));
    operandGrads.push_back(
        mul(b, loc, broadcastBack(b, loc, g, xType, dims), others));
    break;
  }
  }
  return success();
}

LogicalResult ArgmaxOp::buildGradients(OpBuilder &, ArrayRef<Value>,
                                       SmallVectorImpl<Value> &operandGrads) {
  return noGradients(*this, operandGrads);
}

} // namespace kiln
