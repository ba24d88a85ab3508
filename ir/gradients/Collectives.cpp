//===- Collectives.cpp - gradient rules of collectives --------------------===//
//
// all_reduce sum: every rank's result is the sum of every rank's operand, so
// the gradient of rank r's operand sums the gradients of every rank's
// result: the same all-reduce of the result gradients. A mean's is the mean
// of them (each operand counts 1/N in every result). That is the backward
// collective of a forward all-reduce, such as kiln-sync-batch-norm's
// (passes/SyncBatchNorm.cpp). max and min carry no rule: their gradient
// would go to whichever rank holds the extremum, which no collective here
// expresses.
//
// all_gather: block r of every rank's result is rank r's operand, so rank
// r's operand gradient is the sum over ranks of block r of their result
// gradients: a reduce_scatter sum along the same dimension (JAX's
// all_gather transposes to psum_scatter the same way).
//
//===----------------------------------------------------------------------===//

#include "ir/gradients/GradientUtils.h"

using namespace mlir;
using namespace kiln::grad;

namespace kiln {

LogicalResult AllReduceOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                          SmallVectorImpl<Value> &operandGrads) {
  Value g = floatResultGrad(*this, resultGrads);
  if (!g)
    return noGradients(*this, operandGrads);
  ReduceKind kind = getReduction();
  if (kind != ReduceKind::sum && kind != ReduceKind::mean)
    return emitOpError() << "is on a path to the loss, but only a sum or mean "
                            "all-reduce has a gradient rule (found "
                         << stringifyReduceKind(kind) << ")";
  operandGrads.push_back(b.create<AllReduceOp>(getLoc(), g.getType(), kind, g,
                                               getGroupsAttr()));
  return success();
}

LogicalResult AllGatherOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                          SmallVectorImpl<Value> &operandGrads) {
  Value g = floatResultGrad(*this, resultGrads);
  if (!g)
    return noGradients(*this, operandGrads);
  operandGrads.push_back(b.create<ReduceScatterOp>(
      getLoc(), getOperand().getType(), ReduceKind::sum, g, getDimension(),
      getGroupsAttr()));
  return success();
}

} // namespace kiln
