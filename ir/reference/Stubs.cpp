//===- Stubs.cpp - reference semantics not yet written -----===//
//
// Placeholder reference semantics; replaced op family by op family.
//
//===----------------------------------------------------------------------===//

#include "ir/KilnOps.h"

using namespace mlir;

namespace kiln {

LogicalResult AllGatherOp::evaluate(ArrayRef<HostTensor>, SmallVectorImpl<HostTensor> &) {
  return emitOpError("has no reference semantics yet");
}

LogicalResult AllReduceOp::evaluate(ArrayRef<HostTensor>, SmallVectorImpl<HostTensor> &) {
  return emitOpError("has no reference semantics yet");
}

LogicalResult ArgmaxOp::evaluate(ArrayRef<HostTensor>, SmallVectorImpl<HostTensor> &) {
  return emitOpError("has no reference semantics yet");
}

LogicalResult AvgPool2DGradOp::evaluate(ArrayRef<HostTensor>, SmallVectorImpl<HostTensor> &) {
  return emitOpError("has no reference semantics yet");
}

LogicalResult AvgPool2DOp::evaluate(ArrayRef<HostTensor>, SmallVectorImpl<HostTensor> &) {
  return emitOpError("has no reference semantics yet");
}

LogicalResult BroadcastInDimOp::evaluate(ArrayRef<HostTensor>, SmallVectorImpl<HostTensor> &) {
  return emitOpError("has no reference semantics yet");
}

LogicalResult CollectiveBroadcastOp::evaluate(ArrayRef<HostTensor>, SmallVectorImpl<HostTensor> &) {
  return emitOpError("has no reference semantics yet");
}

LogicalResult ConcatenateOp::evaluate(ArrayRef<HostTensor>, SmallVectorImpl<HostTensor> &) {
  return emitOpError("has no reference semantics yet");
}

LogicalResult ConstantOp::evaluate(ArrayRef<HostTensor>, SmallVectorImpl<HostTensor> &) {
  return emitOpError("has no reference semantics yet");
}

LogicalResult Conv2DFilterGradOp::evaluate(ArrayRef<HostTensor>, SmallVectorImpl<HostTensor> &) {
  return emitOpError("has no reference semantics yet");
}

LogicalResult Conv2DInputGradOp::evaluate(ArrayRef<HostTensor>, SmallVectorImpl<HostTensor> &) {
  return emitOpError("has no reference semantics yet");
}

LogicalResult Conv2DOp::evaluate(ArrayRef<HostTensor>, SmallVectorImpl<HostTensor> &) {
  return emitOpError("has no reference semantics yet");
}

LogicalResult DotGeneralOp::evaluate(ArrayRef<HostTensor>, SmallVectorImpl<HostTensor> &) {
  return emitOpError("has no reference semantics yet");
}

LogicalResult DropoutOp::evaluate(ArrayRef<HostTensor>, SmallVectorImpl<HostTensor> &) {
  return emitOpError("has no reference semantics yet");
}

LogicalResult FusionOp::evaluate(ArrayRef<HostTensor>, SmallVectorImpl<HostTensor> &) {
  return emitOpError("has no reference semantics yet");
}

LogicalResult GatherOp::evaluate(ArrayRef<HostTensor>, SmallVectorImpl<HostTensor> &) {
  return emitOpError("has no reference semantics yet");
}

LogicalResult IotaOp::evaluate(ArrayRef<HostTensor>, SmallVectorImpl<HostTensor> &) {
  return emitOpError("has no reference semantics yet");
}

LogicalResult LayerNormOp::evaluate(ArrayRef<HostTensor>, SmallVectorImpl<HostTensor> &) {
  return emitOpError("has no reference semantics yet");
}

LogicalResult LogSoftmaxOp::evaluate(ArrayRef<HostTensor>, SmallVectorImpl<HostTensor> &) {
  return emitOpError("has no reference semantics yet");
}

LogicalResult MaxPool2DGradOp::evaluate(ArrayRef<HostTensor>, SmallVectorImpl<HostTensor> &) {
  return emitOpError("has no reference semantics yet");
}

LogicalResult MaxPool2DOp::evaluate(ArrayRef<HostTensor>, SmallVectorImpl<HostTensor> &) {
  return emitOpError("has no reference semantics yet");
}

LogicalResult PadOp::evaluate(ArrayRef<HostTensor>, SmallVectorImpl<HostTensor> &) {
  return emitOpError("has no reference semantics yet");
}

LogicalResult RecvOp::evaluate(ArrayRef<HostTensor>, SmallVectorImpl<HostTensor> &) {
  return emitOpError("has no reference semantics yet");
}

LogicalResult ReduceOp::evaluate(ArrayRef<HostTensor>, SmallVectorImpl<HostTensor> &) {
  return emitOpError("has no reference semantics yet");
}

LogicalResult ReduceScatterOp::evaluate(ArrayRef<HostTensor>, SmallVectorImpl<HostTensor> &) {
  return emitOpError("has no reference semantics yet");
}

LogicalResult ReshapeOp::evaluate(ArrayRef<HostTensor>, SmallVectorImpl<HostTensor> &) {
  return emitOpError("has no reference semantics yet");
}

LogicalResult ScatterAddOp::evaluate(ArrayRef<HostTensor>, SmallVectorImpl<HostTensor> &) {
  return emitOpError("has no reference semantics yet");
}

LogicalResult SendOp::evaluate(ArrayRef<HostTensor>, SmallVectorImpl<HostTensor> &) {
  return emitOpError("has no reference semantics yet");
}

LogicalResult SliceOp::evaluate(ArrayRef<HostTensor>, SmallVectorImpl<HostTensor> &) {
  return emitOpError("has no reference semantics yet");
}

LogicalResult SoftmaxCrossEntropyOp::evaluate(ArrayRef<HostTensor>, SmallVectorImpl<HostTensor> &) {
  return emitOpError("has no reference semantics yet");
}

LogicalResult SoftmaxOp::evaluate(ArrayRef<HostTensor>, SmallVectorImpl<HostTensor> &) {
  return emitOpError("has no reference semantics yet");
}

LogicalResult TransposeOp::evaluate(ArrayRef<HostTensor>, SmallVectorImpl<HostTensor> &) {
  return emitOpError("has no reference semantics yet");
}

} // namespace kiln
