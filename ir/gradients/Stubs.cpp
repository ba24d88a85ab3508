//===- Stubs.cpp - gradient rules not yet written -----===//
//
// Placeholder gradient rules; replaced op family by op family.
//
//===----------------------------------------------------------------------===//

#include "ir/KilnOps.h"

using namespace mlir;

namespace kiln {

LogicalResult AbsOp::buildGradients(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) {
  return emitOpError("has no gradient rule yet");
}

LogicalResult AddOp::buildGradients(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) {
  return emitOpError("has no gradient rule yet");
}

LogicalResult ArgmaxOp::buildGradients(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) {
  return emitOpError("has no gradient rule yet");
}

LogicalResult AvgPool2DGradOp::buildGradients(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) {
  return emitOpError("has no gradient rule yet");
}

LogicalResult AvgPool2DOp::buildGradients(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) {
  return emitOpError("has no gradient rule yet");
}

LogicalResult BroadcastInDimOp::buildGradients(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) {
  return emitOpError("has no gradient rule yet");
}

LogicalResult CompareOp::buildGradients(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) {
  return emitOpError("has no gradient rule yet");
}

LogicalResult ConcatenateOp::buildGradients(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) {
  return emitOpError("has no gradient rule yet");
}

LogicalResult ConstantOp::buildGradients(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) {
  return emitOpError("has no gradient rule yet");
}

LogicalResult Conv2DFilterGradOp::buildGradients(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) {
  return emitOpError("has no gradient rule yet");
}

LogicalResult Conv2DInputGradOp::buildGradients(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) {
  return emitOpError("has no gradient rule yet");
}

LogicalResult Conv2DOp::buildGradients(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) {
  return emitOpError("has no gradient rule yet");
}

LogicalResult ConvertOp::buildGradients(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) {
  return emitOpError("has no gradient rule yet");
}

LogicalResult CosOp::buildGradients(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) {
  return emitOpError("has no gradient rule yet");
}

LogicalResult DivOp::buildGradients(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) {
  return emitOpError("has no gradient rule yet");
}

LogicalResult DotGeneralOp::buildGradients(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) {
  return emitOpError("has no gradient rule yet");
}

LogicalResult DropoutOp::buildGradients(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) {
  return emitOpError("has no gradient rule yet");
}

LogicalResult ErfOp::buildGradients(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) {
  return emitOpError("has no gradient rule yet");
}

LogicalResult ExpOp::buildGradients(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) {
  return emitOpError("has no gradient rule yet");
}

LogicalResult GatherOp::buildGradients(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) {
  return emitOpError("has no gradient rule yet");
}

LogicalResult GeluOp::buildGradients(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) {
  return emitOpError("has no gradient rule yet");
}

LogicalResult IotaOp::buildGradients(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) {
  return emitOpError("has no gradient rule yet");
}

LogicalResult LayerNormOp::buildGradients(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) {
  return emitOpError("has no gradient rule yet");
}

LogicalResult Log1pOp::buildGradients(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) {
  return emitOpError("has no gradient rule yet");
}

LogicalResult LogOp::buildGradients(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) {
  return emitOpError("has no gradient rule yet");
}

LogicalResult LogSoftmaxOp::buildGradients(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) {
  return emitOpError("has no gradient rule yet");
}

LogicalResult MaxOp::buildGradients(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) {
  return emitOpError("has no gradient rule yet");
}

LogicalResult MaxPool2DGradOp::buildGradients(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) {
  return emitOpError("has no gradient rule yet");
}

LogicalResult MaxPool2DOp::buildGradients(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) {
  return emitOpError("has no gradient rule yet");
}

LogicalResult MinOp::buildGradients(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) {
  return emitOpError("has no gradient rule yet");
}

LogicalResult MulOp::buildGradients(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) {
  return emitOpError("has no gradient rule yet");
}

LogicalResult NegOp::buildGradients(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) {
  return emitOpError("has no gradient rule yet");
}

LogicalResult PadOp::buildGradients(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) {
  return emitOpError("has no gradient rule yet");
}

LogicalResult PowOp::buildGradients(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) {
  return emitOpError("has no gradient rule yet");
}

LogicalResult ReciprocalOp::buildGradients(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) {
  return emitOpError("has no gradient rule yet");
}

LogicalResult ReduceOp::buildGradients(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) {
  return emitOpError("has no gradient rule yet");
}

LogicalResult ReluOp::buildGradients(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) {
  return emitOpError("has no gradient rule yet");
}

LogicalResult ReshapeOp::buildGradients(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) {
  return emitOpError("has no gradient rule yet");
}

LogicalResult RsqrtOp::buildGradients(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) {
  return emitOpError("has no gradient rule yet");
}

LogicalResult ScatterAddOp::buildGradients(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) {
  return emitOpError("has no gradient rule yet");
}

LogicalResult SelectOp::buildGradients(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) {
  return emitOpError("has no gradient rule yet");
}

LogicalResult SigmoidOp::buildGradients(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) {
  return emitOpError("has no gradient rule yet");
}

LogicalResult SinOp::buildGradients(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) {
  return emitOpError("has no gradient rule yet");
}

LogicalResult SliceOp::buildGradients(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) {
  return emitOpError("has no gradient rule yet");
}

LogicalResult SoftmaxCrossEntropyOp::buildGradients(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) {
  return emitOpError("has no gradient rule yet");
}

LogicalResult SoftmaxOp::buildGradients(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) {
  return emitOpError("has no gradient rule yet");
}

LogicalResult SqrtOp::buildGradients(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) {
  return emitOpError("has no gradient rule yet");
}

LogicalResult StopGradientOp::buildGradients(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) {
  return emitOpError("has no gradient rule yet");
}

LogicalResult SubOp::buildGradients(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) {
  return emitOpError("has no gradient rule yet");
}

LogicalResult TanhOp::buildGradients(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) {
  return emitOpError("has no gradient rule yet");
}

LogicalResult TransposeOp::buildGradients(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) {
  return emitOpError("has no gradient rule yet");
}

} // namespace kiln
