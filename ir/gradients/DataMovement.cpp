//===- DataMovement.cpp - gradient rules of data-movement ops -------------===//
//
// Each data-movement op's gradient is its adjoint: the op that puts every
// element of the result's gradient back where the element came from, and
// sums where one operand element fed several result elements.
//   broadcast_in_dim -> reduce sum over the broadcast dims, then reshape;
//   reshape -> reshape back; transpose -> the inverse permutation;
//   slice -> zero padding (strided slices spread the gradient out with a
//            reshape/pad/reshape first, since kiln.pad has no interior padding);
//   concatenate -> one slice per input; pad -> the slice of the interior.
// Constants and iota have no operands and so push nothing.
//
//===----------------------------------------------------------------------===//

#include "ir/gradients/GradientUtils.h"

using namespace mlir;
using namespace kiln::grad;

namespace kiln {

LogicalResult ConstantOp::buildGradients(OpBuilder &, ArrayRef<Value>,
                                         SmallVectorImpl<Value> &operandGrads) {
  return noGradients(*this, operandGrads);
}

LogicalResult IotaOp::buildGradients(OpBuilder &, ArrayRef<Value>,
                                     SmallVectorImpl<Value> &operandGrads) {
  return noGradients(*this, operandGrads);
}

LogicalResult BroadcastInDimOp::buildGradients(OpBuilder &b,
                                               ArrayRef<Value> resultGrads,
                                               SmallVectorImpl<Value> &operandGrads) {
  Value g = floatResultGrad(*this, resultGrads);
  if (!g)
    return noGradients(*this, operandGrads);
  operandGrads.push_back(sumToShape(b, getLoc(), g, typeOf(getOperand()),
                                    getBroadcastDimensions()));
  return success();
}

LogicalResult ReshapeOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                        SmallVectorImpl<Value> &operandGrads) {
  Value g = floatResultGrad(*this, resultGrads);
  if (!g)
    return noGradients(*this, operandGrads);
  operandGrads.push_back(reshape(b, getLoc(), g, typeOf(getOperand())));
  return success();
}

LogicalResult TransposeOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                          SmallVectorImpl<Value> &operandGrads) {
  Value g = floatResultGrad(*this, resultGrads);
  if (!g)
    return noGradients(*this, operandGrads);
  ArrayRef<int64_t> permutation = getPermutation();
  SmallVector<int64_t> inverse(permutation.size());
  for (auto [i, p] : llvm::enumerate(permutation))
    inverse[p] = i;
  operandGrads.push_back(transpose(b, getLoc(), g, inverse));
  return success();
}

LogicalResult SliceOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                      SmallVectorImpl<Value> &operandGrads) {
  Value g = floatResultGrad(*this, resultGrads);
  if (!g)
    return noGradients(*this, operandGrads);
  Location loc = getLoc();
  RankedTensorType operandType = typeOf(getOperand());
  RankedTensorType gradType = typeOf(g);
  Type element = gradType.getElementType();
  ArrayRef<int64_t> start = getStartIndices(), strides = getStrides();
  int64_t rank = operandType.getRank();
  if (gradType.getNumElements() == 0) {
    operandGrads.push_back(splat(b, loc, operandType, 0.0));
    return success();
  }

  // Spread a strided gradient out: element k of dimension d moves to k * s_d
  // by viewing [n_d] as [n_d, 1], padding it to [n_d, s_d] and viewing that
  // as [n_d * s_d], then dropping the s_d - 1 trailing zeros.
  Value spread = g;
  SmallVector<int64_t> spreadShape(gradType.getShape());
  if (llvm::any_of(strides, [](int64_t s) { return s > 1; })) {
    SmallVector<int64_t> interleaved, zeros(2 * rank, 0), high, flat, limit;
    for (int64_t d = 0; d < rank; ++d) {
      int64_t n = gradType.getDimSize(d);
      interleaved.append({n, 1});
      high.append({0, strides[d] - 1});
      flat.push_back(n * strides[d]);
      limit.push_back((n - 1) * strides[d] + 1);
    }
    spread = reshape(b, loc, g, RankedTensorType::get(interleaved, element));
    spread = pad(b, loc, spread, zeros, high, 0.0);
    spread = reshape(b, loc, spread, RankedTensorType::get(flat, element));
    spread = slice(b, loc, spread, SmallVector<int64_t>(rank, 0), limit,
                   SmallVector<int64_t>(rank, 1));
    spreadShape = limit;
  }
  SmallVector<int64_t> high;
  for (int64_t d = 0; d < rank; ++d)
    high.push_back(operandType.getDimSize(d) - start[d] - spreadShape[d]);
  operandGrads.push_back(pad(b, loc, spread, start, high, 0.0));
  return success();
}

LogicalResult ConcatenateOp::buildGradients(OpBuilder &b,
                                            ArrayRef<Value> resultGrads,
                                            SmallVectorImpl<Value> &operandGrads) {
  Value g = floatResultGrad(*this, resultGrads);
  if (!g)
    return noGradients(*this, operandGrads);
  Location loc = getLoc();
  RankedTensorType gradType = typeOf(g);
  int64_t dim = getDimension();
  int64_t rank = gradType.getRank();
  int64_t offset = 0;
  for (Value input : getInputs()) {
    int64_t size = typeOf(input).getDimSize(dim);
    SmallVector<int64_t> start(rank, 0), limit(gradType.getShape());
    start[dim] = offset;
    limit[dim] = offset + size;
    operandGrads.push_back(
        slice(b, loc, g, start, limit, SmallVector<int64_t>(rank, 1)));
    offset += size;
  }
  return success();
}

LogicalResult PadOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  Value g = floatResultGrad(*this, resultGrads);
  if (!g)
    return noGradients(*this, operandGrads);
  RankedTensorType operandType = typeOf(getOperand());
  ArrayRef<int64_t> low = getEdgePaddingLow();
  SmallVector<int64_t> limit;
  for (int64_t d = 0, e = operandType.getRank(); d < e; ++d)
    limit.push_back(low[d] + operandType.getDimSize(d));
  operandGrads.push_back(slice(b, getLoc(), g, low, limit,
                               SmallVector<int64_t>(operandType.getRank(), 1)));
  return success();
}

// The graph as written is a training step (kiln.mode_select says why): the
// gradient flows to the training value only.
LogicalResult ModeSelectOp::buildGradients(OpBuilder &, ArrayRef<Value> resultGrads,
                                           SmallVectorImpl<Value> &operandGrads) {
  Value g = floatResultGrad(*this, resultGrads);
  operandGrads.append({g, Value()});
  return success();
}

} // namespace kiln
