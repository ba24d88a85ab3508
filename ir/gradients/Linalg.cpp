//===- Linalg.cpp - gradient rules of contractions, convolutions, pools ---===//
//
// dot_general: each operand's gradient is another dot_general of the
// result's gradient with the other operand, contracting the other operand's
// free dimensions, followed by a transpose into the operand's layout.
//
// conv2d and the pools have dedicated gradient ops. Those are linear in
// their gradient operand, so their own gradients are adjoints again:
//   conv2d_input_grad(dy, w)  -> dy: conv2d(G, w), w: conv2d_filter_grad(G, dy)
//   conv2d_filter_grad(x, dy) -> x: conv2d_input_grad(dy, G), dy: conv2d(x, G)
//   avg_pool2d_grad(dy)       -> dy: avg_pool2d(G)
//   max_pool2d_grad(x, dy)    -> dy: G read back at each window's first
//                                maximum; x: none (the routing is piecewise
//                                constant in x)
// where G is the incoming gradient. Second-order gradients of the models
// therefore work without extra ops.
//
//===----------------------------------------------------------------------===//

#include "ir/gradients/GradientUtils.h"

#include <limits>

using namespace mlir;
using namespace kiln::grad;

namespace kiln {

namespace {

// The dimensions of a rank-|rank| operand that are neither batching nor
// contracting, in increasing order.
SmallVector<int64_t> freeDims(int64_t rank, ArrayRef<int64_t> batch,
                              ArrayRef<int64_t> contract) {
  SmallVector<int64_t> dims;
  for (int64_t d = 0; d < rank; ++d)
    if (!llvm::is_contained(batch, d) && !llvm::is_contained(contract, d))
      dims.push_back(d);
  return dims;
}

// The gradient of one dot_general operand ("mine"), given the other operand
// ("other"). The result's gradient g is laid out [batch, lhs free, rhs free];
// |otherFreeInG| are the positions of the other operand's free dimensions in
// g. Contracting them with the other operand's free dimensions gives my
// batch and free dimensions and the other's contracting dimensions, which
// pair with mine; a transpose puts the product into my layout. The product
// is built as dot(g, other) or dot(other, g), whichever needs no transpose
// (dot(other, g) gives the familiar x^T g for the rhs of a matmul).
Value dotOperandGrad(OpBuilder &b, Location loc, Value g, Value other,
                     RankedTensorType myType, ArrayRef<int64_t> myBatch,
                     ArrayRef<int64_t> myContract, ArrayRef<int64_t> myFree,
                     ArrayRef<int64_t> otherBatch, ArrayRef<int64_t> otherContract,
                     ArrayRef<int64_t> otherFree, ArrayRef<int64_t> otherFreeInG) {
  int64_t nb = myBatch.size();
  // My dimensions that the other operand's contracting dimensions (in
  // increasing order, as the product lists them) pair with.
  SmallVector<int64_t> otherContractSorted(otherContract);
  llvm::sort(otherContractSorted);
  SmallVector<int64_t> pairedWithOther;
  for (int64_t oc : otherContractSorted) {
    auto pos = llvm::find(otherContract, oc) - otherContract.begin();
    pairedWithOther.push_back(myContract[pos]);
  }
  // Which of my dimensions each product dimension stands for, either order.
  SmallVector<int64_t> gFirst(myBatch), otherFirst(myBatch);
  gFirst.append(myFree.begin(), myFree.end());
  gFirst.append(pairedWithOther.begin(), pairedWithOther.end());
  otherFirst.append(pairedWithOther.begin(), pairedWithOther.end());
  otherFirst.append(myFree.begin(), myFree.end());
  auto isIdentity = [](ArrayRef<int64_t> dims) {
    for (auto [i, d] : llvm::enumerate(dims))
      if (static_cast<int64_t>(i) != d)
        return false;
    return true;
  };
  bool useOtherFirst = !isIdentity(gFirst) && isIdentity(otherFirst);
  ArrayRef<int64_t> source = useOtherFirst ? otherFirst : gFirst;

  SmallVector<int64_t> shape;
  for (int64_t d : source)
    shape.push_back(myType.getDimSize(d));
  auto productType = RankedTensorType::get(shape, typeOf(g).getElementType());
  SmallVector<int64_t> gBatch = range(0, nb);
  Value product =
      useOtherFirst
          ? b.create<DotGeneralOp>(loc, productType, other, g,
                                   b.getDenseI64ArrayAttr(otherBatch),
                                   b.getDenseI64ArrayAttr(gBatch),
                                   b.getDenseI64ArrayAttr(otherFree),
                                   b.getDenseI64ArrayAttr(otherFreeInG))
          : b.create<DotGeneralOp>(loc, productType, g, other,
                                   b.getDenseI64ArrayAttr(gBatch),
                                   b.getDenseI64ArrayAttr(otherBatch),
                                   b.getDenseI64ArrayAttr(otherFreeInG),
                                   b.getDenseI64ArrayAttr(otherFree));
  SmallVector<int64_t> permutation(source.size());
  for (auto [pos, d] : llvm::enumerate(source))
    permutation[d] = pos;
  return transpose(b, loc, product, permutation);
}

} // namespace

LogicalResult DotGeneralOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                           SmallVectorImpl<Value> &operandGrads) {
  Value g = floatResultGrad(*this, resultGrads);
  if (!g)
    return noGradients(*this, operandGrads);
  Location loc = getLoc();
  RankedTensorType lhsType = typeOf(getLhs()), rhsType = typeOf(getRhs());
  ArrayRef<int64_t> lb = getLhsBatchingDimensions(), rb = getRhsBatchingDimensions();
  ArrayRef<int64_t> lc = getLhsContractingDimensions(),
                    rc = getRhsContractingDimensions();
  SmallVector<int64_t> lf = freeDims(lhsType.getRank(), lb, lc);
  SmallVector<int64_t> rf = freeDims(rhsType.getRank(), rb, rc);
  int64_t nb = lb.size();
  SmallVector<int64_t> lhsFreeInG = range(nb, nb + lf.size());
  SmallVector<int64_t> rhsFreeInG = range(nb + lf.size(), nb + lf.size() + rf.size());
  operandGrads.push_back(dotOperandGrad(b, loc, g, getRhs(), lhsType, lb, lc, lf,
                                        rb, rc, rf, rhsFreeInG));
  operandGrads.push_back(dotOperandGrad(b, loc, g, getLhs(), rhsType, rb, rc, rf,
                                        lb, lc, lf, lhsFreeInG));
  return success();
}

//===----------------------------------------------------------------------===//
// Convolution
//===----------------------------------------------------------------------===//

LogicalResult Conv2DOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                       SmallVectorImpl<Value> &operandGrads) {
  Value g = floatResultGrad(*this, resultGrads);
  if (!g)
    return noGradients(*this, operandGrads);
  Location loc = getLoc();
  Value dx = b.create<Conv2DInputGradOp>(
      loc, getInput().getType(), g, getFilter(), getStridesAttr(),
      getPaddingAttr(), getDilationAttr(), getGroupsAttr());
  Value dw = b.create<Conv2DFilterGradOp>(
      loc, getFilter().getType(), getInput(), g, getStridesAttr(),
      getPaddingAttr(), getDilationAttr(), getGroupsAttr());
  operandGrads.append({dx, dw});
  return success();
}

LogicalResult Conv2DInputGradOp::buildGradients(OpBuilder &b,
                                                ArrayRef<Value> resultGrads,
                                                SmallVectorImpl<Value> &operandGrads) {
  // The result is the adjoint of conv2d in its input: <G, dx(dy, w)> =
  // <conv2d(G, w), dy>.
  Value g = floatResultGrad(*this, resultGrads);
  if (!g)
    return noGradients(*this, operandGrads);
  Location loc = getLoc();
  Value dGradOutput = b.create<Conv2DOp>(
      loc, getGradOutput().getType(), g, getFilter(), getStridesAttr(),
      getPaddingAttr(), getDilationAttr(), getGroupsAttr());
  Value dFilter = b.create<Conv2DFilterGradOp>(
      loc, getFilter().getType(), g, getGradOutput(), getStridesAttr(),
      getPaddingAttr(), getDilationAttr(), getGroupsAttr());
  operandGrads.append({dGradOutput, dFilter});
  return success();
}

LogicalResult Conv2DFilterGradOp::buildGradients(OpBuilder &b,
                                                 ArrayRef<Value> resultGrads,
                                                 SmallVectorImpl<Value> &operandGrads) {
  // <G, dw(x, dy)> = <conv2d(x, G), dy>.
  Value g = floatResultGrad(*this, resultGrads);
  if (!g)
    return noGradients(*this, operandGrads);
  Location loc = getLoc();
  Value dInput = b.create<Conv2DInputGradOp>(
      loc, getInput().getType(), getGradOutput(), g, getStridesAttr(),
      getPaddingAttr(), getDilationAttr(), getGroupsAttr());
  Value dGradOutput = b.create<Conv2DOp>(
      loc, getGradOutput().getType(), getInput(), g, getStridesAttr(),
      getPaddingAttr(), getDilationAttr(), getGroupsAttr());
  operandGrads.append({dInput, dGradOutput});
  return success();
}

//===----------------------------------------------------------------------===//
// Pooling
//===----------------------------------------------------------------------===//

LogicalResult MaxPool2DOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                          SmallVectorImpl<Value> &operandGrads) {
  Value g = floatResultGrad(*this, resultGrads);
  if (!g)
    return noGradients(*this, operandGrads);
  operandGrads.push_back(b.create<MaxPool2DGradOp>(
      getLoc(), getInput().getType(), getInput(), g, getWindowAttr(),
      getStridesAttr(), getPaddingAttr()));
  return success();
}

LogicalResult AvgPool2DOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                          SmallVectorImpl<Value> &operandGrads) {
  Value g = floatResultGrad(*this, resultGrads);
  if (!g)
    return noGradients(*this, operandGrads);
  operandGrads.push_back(b.create<AvgPool2DGradOp>(
      getLoc(), getInput().getType(), g, getWindowAttr(), getStridesAttr(),
      getPaddingAttr()));
  return success();
}

LogicalResult AvgPool2DGradOp::buildGradients(OpBuilder &b,
                                              ArrayRef<Value> resultGrads,
                                              SmallVectorImpl<Value> &operandGrads) {
  // <G, avg_pool2d_grad(dy)> = <avg_pool2d(G), dy>.
  Value g = floatResultGrad(*this, resultGrads);
  if (!g)
    return noGradients(*this, operandGrads);
  operandGrads.push_back(b.create<AvgPool2DOp>(
      getLoc(), getGradOutput().getType(), g, getWindowAttr(), getStridesAttr(),
      getPaddingAttr()));
  return success();
}

LogicalResult MaxPool2DGradOp::buildGradients(OpBuilder &b,
                                              ArrayRef<Value> resultGrads,
                                              SmallVectorImpl<Value> &operandGrads) {
  // Output element o of the forward pool received dy[o] at its window's
  // first maximum p(o), so d<G, result>/d dy[o] = G[p(o)]. Visit the window
  // offsets in row-major order; at each, a strided slice of the (padded)
  // input lines up one window element with every output position, and the
  // first offset whose element equals the maximum takes G's element there.
  Value g = floatResultGrad(*this, resultGrads);
  if (!g)
    return noGradients(*this, operandGrads);
  Location loc = getLoc();
  Value x = getInput(), dy = getGradOutput();
  RankedTensorType dyType = typeOf(dy);
  ArrayRef<int64_t> window = getWindow(), strides = getStrides(),
                    padding = getPadding();
  SmallVector<int64_t> low = {0, 0, padding[0], padding[2]};
  SmallVector<int64_t> high = {0, 0, padding[1], padding[3]};
  Value paddedX =
      pad(b, loc, x, low, high, -std::numeric_limits<double>::infinity());
  Value paddedG = pad(b, loc, g, low, high, 0.0);
  Value maximum = b.create<MaxPool2DOp>(loc, dyType, x, getWindowAttr(),
                                        getStridesAttr(), getPaddingAttr());
  Value zero = splat(b, loc, dyType, 0.0);
  Value falseValue = splatBool(b, loc, dyType.getShape(), false);
  Value trueValue = splatBool(b, loc, dyType.getShape(), true);
  // |taken|: the window already met its maximum at an earlier offset.
  Value sum, taken;
  int64_t n = dyType.getDimSize(0), c = dyType.getDimSize(1);
  int64_t oh = dyType.getDimSize(2), ow = dyType.getDimSize(3);
  SmallVector<int64_t> sliceStrides = {1, 1, strides[0], strides[1]};
  for (int64_t i = 0; i < window[0]; ++i) {
    for (int64_t j = 0; j < window[1]; ++j) {
      SmallVector<int64_t> start = {0, 0, i, j};
      SmallVector<int64_t> limit = {n, c, i + (oh - 1) * strides[0] + 1,
                                    j + (ow - 1) * strides[1] + 1};
      Value xs = slice(b, loc, paddedX, start, limit, sliceStrides);
      Value gs = slice(b, loc, paddedG, start, limit, sliceStrides);
      Value isMax = compare(b, loc, CompareDirection::eq, xs, maximum);
      if (!sum) {
        sum = select(b, loc, isMax, gs, zero);
        taken = isMax;
        continue;
      }
      Value first = select(b, loc, taken, falseValue, isMax);
      sum = add(b, loc, sum, select(b, loc, first, gs, zero));
      taken = select(b, loc, isMax, trueValue, taken);
    }
  }
  operandGrads.append({Value(), sum});
  return success();
}

} // namespace kiln
