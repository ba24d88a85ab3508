//===- KilnOps.cpp - kiln operations --------------------------------------===//
//
// Verifiers, result-type inference, folders and costs. Shape logic is in
// ir/ShapeRules.cpp; this file adapts it to MLIR types and diagnostics, and
// checks element types.
//
//===----------------------------------------------------------------------===//

#include "ir/KilnOps.h"

#include "ir/Flops.h"
#include "ir/ShapeRules.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/STLExtras.h"

#include <cmath>

using namespace mlir;
using namespace kiln;

namespace {

ArrayRef<int64_t> shapeOf(Value v) {
  return cast<ShapedType>(v.getType()).getShape();
}
ArrayRef<int64_t> shapeOf(Type t) { return cast<ShapedType>(t).getShape(); }
Type elementOf(Value v) { return cast<ShapedType>(v.getType()).getElementType(); }
Type elementOf(Type t) { return cast<ShapedType>(t).getElementType(); }

// Reports a failed shape rule from result-type inference, prefixed like an
// op error so the message reads the same as a verifier's.
LogicalResult inferError(std::optional<Location> loc, StringRef opName,
                         const std::string &message) {
  return emitOptionalError(loc, "'", opName, "' op ", message);
}

// Checks that every operand of an inference is a statically shaped ranked
// tensor, as the shape rules need. In the verifier the operand type
// constraints run first and report this; the message here is for builders
// and parsers, which infer before anything is verified.
LogicalResult checkStatic(std::optional<Location> loc, StringRef opName,
                          ValueRange values) {
  for (auto [i, v] : llvm::enumerate(values)) {
    auto type = dyn_cast<RankedTensorType>(v.getType());
    if (!type || !type.hasStaticShape()) {
      std::string msg;
      llvm::raw_string_ostream os(msg);
      os << "operand #" << i << " must be a statically shaped tensor, but is '"
         << v.getType() << "'";
      return inferError(loc, opName, os.str());
    }
  }
  return success();
}

// Turns a shape rule's result into one inferred tensor type.
LogicalResult inferFrom(const shape::ShapeOr &rule, Type elementType,
                        std::optional<Location> loc, StringRef opName,
                        SmallVectorImpl<Type> &inferred) {
  if (!rule.ok())
    return inferError(loc, opName, rule.error());
  inferred.push_back(RankedTensorType::get(rule.shape(), elementType));
  return success();
}

// Checks a shape rule in a verifier.
LogicalResult check(Operation *op, const shape::ShapeOr &rule) {
  if (!rule.ok())
    return op->emitOpError() << rule.error();
  return success();
}

LogicalResult checkSameElement(Operation *op, StringRef a, Type ta, StringRef b,
                               Type tb) {
  if (elementOf(ta) != elementOf(tb))
    return op->emitOpError() << "requires " << a << " and " << b
                             << " to have the same element type, but they are "
                             << elementOf(ta) << " and " << elementOf(tb);
  return success();
}

// The inference-time twin of checkSameElement: operands |a| and |b| of an op
// being built must share their element type.
LogicalResult inferSameElement(std::optional<Location> loc, StringRef opName,
                               StringRef a, Value va, StringRef b, Value vb) {
  if (elementOf(va) == elementOf(vb))
    return success();
  std::string msg;
  llvm::raw_string_ostream os(msg);
  os << "requires " << a << " and " << b
     << " to have the same element type, but they are '" << elementOf(va)
     << "' and '" << elementOf(vb) << "'";
  return inferError(loc, opName, os.str());
}

LogicalResult checkResultShape(Operation *op, const shape::ShapeOr &rule,
                               Type resultType) {
  if (failed(check(op, rule)))
    return failure();
  if (ArrayRef<int64_t>(rule.shape()) != shapeOf(resultType))
    return op->emitOpError() << "result shape must be " << shape::str(rule.shape())
                             << ", but is " << shape::str(shapeOf(resultType));
  return success();
}

LogicalResult checkGroups(Operation *op, std::optional<DenseIntElementsAttr> groups) {
  if (!groups)
    return success();
  SmallVector<int64_t> ranks;
  for (const APInt &v : groups->getValues<APInt>())
    ranks.push_back(v.getSExtValue());
  return check(op, shape::rankGroups(groups->getType().getShape(), ranks));
}

} // namespace

//===----------------------------------------------------------------------===//
// ConstantOp
//===----------------------------------------------------------------------===//

LogicalResult ConstantOp::inferReturnTypes(MLIRContext *,
                                           std::optional<Location> loc,
                                           Adaptor adaptor,
                                           SmallVectorImpl<Type> &inferred) {
  // Inference can run before the verifier has seen the attribute.
  if (!adaptor.getValue())
    return inferError(loc, getOperationName(),
                      "requires a 'value' attribute holding the constant");
  inferred.push_back(cast<TypedAttr>(adaptor.getValue()).getType());
  return success();
}

LogicalResult ConstantOp::verify() {
  auto type = dyn_cast<RankedTensorType>(getValue().getType());
  if (!type || !type.hasStaticShape())
    return emitOpError() << "value must be a statically shaped tensor, but has "
                            "type "
                         << getValue().getType();
  return success();
}

OpFoldResult ConstantOp::fold(FoldAdaptor) { return getValue(); }

//===----------------------------------------------------------------------===//
// Generators, conversions, shape manipulation
//===----------------------------------------------------------------------===//

LogicalResult IotaOp::verify() {
  return check(*this, shape::iota(shapeOf(getType()), getDimension()));
}

OpFoldResult ConvertOp::fold(FoldAdaptor) {
  if (getOperand().getType() == getType())
    return getOperand();
  return {};
}

LogicalResult BroadcastInDimOp::verify() {
  if (failed(checkSameElement(*this, "operand", getOperand().getType(), "result",
                              getType())))
    return failure();
  return check(*this, shape::broadcastInDim(shapeOf(getOperand()),
                                            getBroadcastDimensions(),
                                            shapeOf(getType())));
}

OpFoldResult BroadcastInDimOp::fold(FoldAdaptor) {
  if (getOperand().getType() != getType())
    return {};
  for (auto [i, d] : llvm::enumerate(getBroadcastDimensions()))
    if (static_cast<int64_t>(i) != d)
      return {};
  return getOperand();
}

LogicalResult ReshapeOp::verify() {
  if (failed(checkSameElement(*this, "operand", getOperand().getType(), "result",
                              getType())))
    return failure();
  return check(*this, shape::reshape(shapeOf(getOperand()), shapeOf(getType())));
}

OpFoldResult ReshapeOp::fold(FoldAdaptor) {
  if (getOperand().getType() == getType())
    return getOperand();
  // reshape(reshape(x)) -> reshape(x)
  if (auto inner = getOperand().getDefiningOp<ReshapeOp>()) {
    getOperandMutable().assign(inner.getOperand());
    return getResult();
  }
  return {};
}

LogicalResult TransposeOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &inferred) {
  if (failed(checkStatic(loc, getOperationName(), adaptor.getOperands())))
    return failure();
  return inferFrom(shape::transpose(shapeOf(adaptor.getOperand()),
                                    adaptor.getPermutation()),
                   elementOf(adaptor.getOperand()), loc, getOperationName(),
                   inferred);
}

OpFoldResult TransposeOp::fold(FoldAdaptor) {
  for (auto [i, p] : llvm::enumerate(getPermutation()))
    if (static_cast<int64_t>(i) != p)
      return {};
  return getOperand();
}

LogicalResult SliceOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                        Adaptor adaptor,
                                        SmallVectorImpl<Type> &inferred) {
  if (failed(checkStatic(loc, getOperationName(), adaptor.getOperands())))
    return failure();
  return inferFrom(shape::slice(shapeOf(adaptor.getOperand()),
                                adaptor.getStartIndices(),
                                adaptor.getLimitIndices(), adaptor.getStrides()),
                   elementOf(adaptor.getOperand()), loc, getOperationName(),
                   inferred);
}

LogicalResult ConcatenateOp::inferReturnTypes(MLIRContext *,
                                              std::optional<Location> loc,
                                              Adaptor adaptor,
                                              SmallVectorImpl<Type> &inferred) {
  if (failed(checkStatic(loc, getOperationName(), adaptor.getOperands())))
    return failure();
  if (adaptor.getInputs().empty())
    return inferError(loc, getOperationName(), "needs at least one input");
  Type element = elementOf(adaptor.getInputs()[0]);
  SmallVector<ArrayRef<int64_t>> shapes;
  for (auto [i, v] : llvm::enumerate(adaptor.getInputs())) {
    if (elementOf(v) != element) {
      std::string msg;
      llvm::raw_string_ostream os(msg);
      os << "input " << i << " must have element type '" << element
         << "' like input 0, but has '" << elementOf(v) << "'";
      return inferError(loc, getOperationName(), os.str());
    }
    shapes.push_back(shapeOf(v));
  }
  return inferFrom(shape::concatenate(shapes, adaptor.getDimension()), element,
                   loc, getOperationName(), inferred);
}

LogicalResult PadOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                      Adaptor adaptor,
                                      SmallVectorImpl<Type> &inferred) {
  if (failed(checkStatic(loc, getOperationName(), adaptor.getOperands())))
    return failure();
  return inferFrom(shape::pad(shapeOf(adaptor.getOperand()),
                              adaptor.getEdgePaddingLow(),
                              adaptor.getEdgePaddingHigh()),
                   elementOf(adaptor.getOperand()), loc, getOperationName(),
                   inferred);
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

LogicalResult ReduceOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &inferred) {
  if (failed(checkStatic(loc, getOperationName(), adaptor.getOperands())))
    return failure();
  return inferFrom(shape::reduce(shapeOf(adaptor.getOperand()),
                                 adaptor.getDimensions()),
                   elementOf(adaptor.getOperand()), loc, getOperationName(),
                   inferred);
}

LogicalResult ArgmaxOp::verify() {
  return checkResultShape(*this,
                          shape::argmax(shapeOf(getOperand()), getDimension()),
                          getType());
}

//===----------------------------------------------------------------------===//
// Linear algebra, convolution, pooling
//===----------------------------------------------------------------------===//

LogicalResult DotGeneralOp::inferReturnTypes(MLIRContext *,
                                             std::optional<Location> loc,
                                             Adaptor adaptor,
                                             SmallVectorImpl<Type> &inferred) {
  if (failed(checkStatic(loc, getOperationName(), adaptor.getOperands())))
    return failure();
  Type lhsElement = elementOf(adaptor.getLhs());
  if (failed(inferSameElement(loc, getOperationName(), "lhs", adaptor.getLhs(),
                              "rhs", adaptor.getRhs())))
    return failure();
  return inferFrom(
      shape::dotGeneral(shapeOf(adaptor.getLhs()), shapeOf(adaptor.getRhs()),
                        adaptor.getLhsBatchingDimensions(),
                        adaptor.getRhsBatchingDimensions(),
                        adaptor.getLhsContractingDimensions(),
                        adaptor.getRhsContractingDimensions()),
      lhsElement, loc, getOperationName(), inferred);
}

LogicalResult Conv2DOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &inferred) {
  if (failed(checkStatic(loc, getOperationName(), adaptor.getOperands())))
    return failure();
  Type element = elementOf(adaptor.getInput());
  if (failed(inferSameElement(loc, getOperationName(), "input",
                              adaptor.getInput(), "filter", adaptor.getFilter())))
    return failure();
  return inferFrom(shape::conv2d(shapeOf(adaptor.getInput()),
                                 shapeOf(adaptor.getFilter()),
                                 adaptor.getStrides(), adaptor.getPadding(),
                                 adaptor.getDilation(), adaptor.getGroups()),
                   element, loc, getOperationName(), inferred);
}

LogicalResult Conv2DInputGradOp::verify() {
  if (failed(checkSameElement(*this, "grad_output", getGradOutput().getType(),
                              "filter", getFilter().getType())) ||
      failed(checkSameElement(*this, "grad_output", getGradOutput().getType(),
                              "result", getType())))
    return failure();
  shape::ShapeOr forward =
      shape::conv2d(shapeOf(getType()), shapeOf(getFilter()), getStrides(),
                    getPadding(), getDilation(), getGroups());
  if (!forward.ok())
    return emitOpError() << "the forward conv2d of the result shape is invalid: "
                         << forward.error();
  if (ArrayRef<int64_t>(forward.shape()) != shapeOf(getGradOutput()))
    return emitOpError() << "grad_output must have the forward conv2d's output "
                            "shape "
                         << shape::str(forward.shape()) << ", but has "
                         << shape::str(shapeOf(getGradOutput()));
  return success();
}

LogicalResult Conv2DFilterGradOp::verify() {
  if (failed(checkSameElement(*this, "input", getInput().getType(),
                              "grad_output", getGradOutput().getType())) ||
      failed(checkSameElement(*this, "input", getInput().getType(), "result",
                              getType())))
    return failure();
  shape::ShapeOr forward =
      shape::conv2d(shapeOf(getInput()), shapeOf(getType()), getStrides(),
                    getPadding(), getDilation(), getGroups());
  if (!forward.ok())
    return emitOpError() << "the forward conv2d with a filter of the result "
                            "shape is invalid: "
                         << forward.error();
  if (ArrayRef<int64_t>(forward.shape()) != shapeOf(getGradOutput()))
    return emitOpError() << "grad_output must have the forward conv2d's output "
                            "shape "
                         << shape::str(forward.shape()) << ", but has "
                         << shape::str(shapeOf(getGradOutput()));
  return success();
}

LogicalResult MaxPool2DOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &inferred) {
  if (failed(checkStatic(loc, getOperationName(), adaptor.getOperands())))
    return failure();
  return inferFrom(shape::pool2d(shapeOf(adaptor.getInput()), adaptor.getWindow(),
                                 adaptor.getStrides(), adaptor.getPadding()),
                   elementOf(adaptor.getInput()), loc, getOperationName(),
                   inferred);
}

LogicalResult AvgPool2DOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &inferred) {
  if (failed(checkStatic(loc, getOperationName(), adaptor.getOperands())))
    return failure();
  return inferFrom(shape::pool2d(shapeOf(adaptor.getInput()), adaptor.getWindow(),
                                 adaptor.getStrides(), adaptor.getPadding()),
                   elementOf(adaptor.getInput()), loc, getOperationName(),
                   inferred);
}

namespace {
// A pooling gradient: |gradOutput| has the forward pool's output shape for
// an input of type |inputType|.
LogicalResult verifyPoolGrad(Operation *op, Type inputType, Value gradOutput,
                             ArrayRef<int64_t> window, ArrayRef<int64_t> strides,
                             ArrayRef<int64_t> padding) {
  if (failed(checkSameElement(op, "grad_output", gradOutput.getType(), "result",
                              inputType)))
    return failure();
  shape::ShapeOr forward =
      shape::pool2d(shapeOf(inputType), window, strides, padding);
  if (!forward.ok())
    return op->emitOpError() << "the forward pooling is invalid: "
                             << forward.error();
  if (ArrayRef<int64_t>(forward.shape()) != shapeOf(gradOutput))
    return op->emitOpError() << "grad_output must have the forward pooling's "
                                "output shape "
                             << shape::str(forward.shape()) << ", but has "
                             << shape::str(shapeOf(gradOutput));
  return success();
}
} // namespace

LogicalResult MaxPool2DGradOp::verify() {
  return verifyPoolGrad(*this, getType(), getGradOutput(), getWindow(),
                        getStrides(), getPadding());
}

LogicalResult AvgPool2DGradOp::verify() {
  return verifyPoolGrad(*this, getType(), getGradOutput(), getWindow(),
                        getStrides(), getPadding());
}

//===----------------------------------------------------------------------===//
// Neural-network composites
//===----------------------------------------------------------------------===//

LogicalResult SoftmaxOp::verify() {
  return check(*this, shape::alongDimension(shapeOf(getType()), getDimension()));
}

LogicalResult LogSoftmaxOp::verify() {
  return check(*this, shape::alongDimension(shapeOf(getType()), getDimension()));
}

LogicalResult LayerNormOp::verify() {
  if (failed(checkSameElement(*this, "input", getInput().getType(), "scale",
                              getScale().getType())))
    return failure();
  // Written so that NaN is rejected too.
  if (!(getEpsilon().convertToDouble() >= 0))
    return emitOpError() << "epsilon must be non-negative, but is "
                         << getEpsilon().convertToDouble();
  return check(*this, shape::layerNorm(shapeOf(getInput()), shapeOf(getScale()),
                                       getAxis()));
}

LogicalResult GatherOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &inferred) {
  if (failed(checkStatic(loc, getOperationName(), adaptor.getOperands())))
    return failure();
  return inferFrom(shape::gather(shapeOf(adaptor.getTable()),
                                 shapeOf(adaptor.getIndices())),
                   elementOf(adaptor.getTable()), loc, getOperationName(),
                   inferred);
}

LogicalResult ScatterAddOp::inferReturnTypes(MLIRContext *,
                                             std::optional<Location> loc,
                                             Adaptor adaptor,
                                             SmallVectorImpl<Type> &inferred) {
  if (failed(checkStatic(loc, getOperationName(), adaptor.getOperands())))
    return failure();
  Type element = elementOf(adaptor.getOperand());
  if (failed(inferSameElement(loc, getOperationName(), "operand",
                              adaptor.getOperand(), "updates",
                              adaptor.getUpdates())))
    return failure();
  return inferFrom(shape::scatterAdd(shapeOf(adaptor.getOperand()),
                                     shapeOf(adaptor.getIndices()),
                                     shapeOf(adaptor.getUpdates())),
                   element, loc, getOperationName(), inferred);
}

LogicalResult ScatterAddOp::verify() {
  if (getCombineKind() == ReduceKind::mean)
    return emitOpError() << "combine must be sum, max, min or prod, not mean";
  return success();
}

LogicalResult DropoutOp::verify() {
  double rate = getRate().convertToDouble();
  if (!(rate >= 0.0 && rate < 1.0))
    return emitOpError() << "rate must lie in [0, 1), but is " << rate;
  return success();
}

LogicalResult SoftmaxCrossEntropyOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
    SmallVectorImpl<Type> &inferred) {
  if (failed(checkStatic(loc, getOperationName(), adaptor.getOperands())))
    return failure();
  return inferFrom(shape::softmaxCrossEntropy(shapeOf(adaptor.getLogits()),
                                              shapeOf(adaptor.getLabels())),
                   elementOf(adaptor.getLogits()), loc, getOperationName(),
                   inferred);
}

LogicalResult CompareOp::inferReturnTypes(MLIRContext *context,
                                          std::optional<Location> loc,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &inferred) {
  if (failed(checkStatic(loc, getOperationName(), adaptor.getOperands())))
    return failure();
  inferred.push_back(RankedTensorType::get(shapeOf(adaptor.getLhs()),
                                           IntegerType::get(context, 1)));
  return success();
}

//===----------------------------------------------------------------------===//
// Attention
//===----------------------------------------------------------------------===//

Type kiln::attentionLseElementType(Type element) {
  MLIRContext *ctx = element.getContext();
  return element.isF64() ? Type(Float64Type::get(ctx)) : Type(Float32Type::get(ctx));
}

bool kiln::fitsFusedAttention(Value q, Value v) {
  auto fits = [](Value x) {
    auto type = dyn_cast<RankedTensorType>(x.getType());
    return type && type.getRank() == 4 && !type.isDynamicDim(3) &&
           type.getDimSize(3) <= kMaxFusedAttentionHeadDim;
  };
  return fits(q) && fits(v);
}

namespace {
// Checks q, k and v of an attention op being built or verified: static
// shapes, one element type, and the shape rule. Sets |outShape|.
LogicalResult inferAttention(std::optional<Location> loc, StringRef opName,
                             Value q, Value k, Value v, shape::Shape &outShape) {
  if (failed(checkStatic(loc, opName, ValueRange{q, k, v})))
    return failure();
  if (failed(inferSameElement(loc, opName, "q", q, "k", k)) ||
      failed(inferSameElement(loc, opName, "q", q, "v", v)))
    return failure();
  shape::ShapeOr rule = shape::attention(shapeOf(q), shapeOf(k), shapeOf(v));
  if (!rule.ok())
    return inferError(loc, opName, rule.error());
  outShape = rule.shape();
  return success();
}

// An attention gradient's forward results and dout have the forward's
// types: |outType| for out and dout, |lseType| for lse.
LogicalResult checkForwardResults(Operation *op, Type outType, Type lseType,
                                  Value out, Value lse, Value dout) {
  if (out.getType() != outType)
    return op->emitOpError() << "out must be the forward result " << outType
                             << ", but is " << out.getType();
  if (lse.getType() != lseType)
    return op->emitOpError() << "lse must be the forward result " << lseType
                             << ", but is " << lse.getType();
  if (dout.getType() != outType)
    return op->emitOpError() << "dout must have out's type " << outType
                             << ", but is " << dout.getType();
  return success();
}

// Written so that NaN is rejected too.
LogicalResult checkScale(Operation *op, double scale) {
  if (!std::isfinite(scale))
    return op->emitOpError() << "scale must be finite, but is " << scale;
  return success();
}
} // namespace

LogicalResult AttentionOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &inferred) {
  shape::Shape out;
  if (failed(inferAttention(loc, getOperationName(), adaptor.getQ(),
                            adaptor.getK(), adaptor.getV(), out)))
    return failure();
  Type element = elementOf(adaptor.getQ());
  inferred.push_back(RankedTensorType::get(out, element));
  inferred.push_back(RankedTensorType::get(ArrayRef<int64_t>(out).drop_back(),
                                           attentionLseElementType(element)));
  return success();
}

void AttentionOp::build(OpBuilder &b, OperationState &state, Value q, Value k,
                        Value v, double scale, bool causal) {
  build(b, state, q, k, v, b.getF64FloatAttr(scale), b.getBoolAttr(causal));
}

LogicalResult AttentionOp::verify() {
  return checkScale(*this, getScale().convertToDouble());
}

LogicalResult AttentionGradOp::inferReturnTypes(MLIRContext *,
                                                std::optional<Location> loc,
                                                Adaptor adaptor,
                                                SmallVectorImpl<Type> &inferred) {
  shape::Shape out;
  if (failed(inferAttention(loc, getOperationName(), adaptor.getQ(),
                            adaptor.getK(), adaptor.getV(), out)))
    return failure();
  inferred.push_back(adaptor.getQ().getType());
  inferred.push_back(adaptor.getK().getType());
  inferred.push_back(adaptor.getV().getType());
  return success();
}

void AttentionGradOp::build(OpBuilder &b, OperationState &state, Value q,
                            Value k, Value v, Value out, Value lse, Value dout,
                            double scale, bool causal) {
  build(b, state, q, k, v, out, lse, dout, b.getF64FloatAttr(scale),
        b.getBoolAttr(causal));
}

LogicalResult AttentionGradOp::verify() {
  if (failed(checkScale(*this, getScale().convertToDouble())))
    return failure();
  shape::ShapeOr rule =
      shape::attention(shapeOf(getQ()), shapeOf(getK()), shapeOf(getV()));
  if (failed(check(*this, rule)))
    return failure();
  Type element = elementOf(getQ());
  auto outType = RankedTensorType::get(rule.shape(), element);
  auto lseType =
      RankedTensorType::get(ArrayRef<int64_t>(rule.shape()).drop_back(),
                            attentionLseElementType(element));
  return checkForwardResults(*this, outType, lseType, getOut(), getLse(),
                             getDout());
}

namespace {
// The [B, T, H, D] out and [B, H, T] lse of a packed attention over |qkv|
// ([B, T, 3, H, D], static); an error naming the operand otherwise.
LogicalResult inferPackedAttention(std::optional<Location> loc, StringRef opName,
                                   Value qkv, RankedTensorType &out,
                                   RankedTensorType &lse) {
  if (failed(checkStatic(loc, opName, ValueRange{qkv})))
    return failure();
  ArrayRef<int64_t> s = shapeOf(qkv);
  if (s.size() != 5 || s[2] != 3) {
    std::string text;
    llvm::raw_string_ostream os(text);
    os << "qkv must be [B, T, 3, H, D] (q, k and v packed along dimension 2), "
          "but is '"
       << qkv.getType() << "'";
    return inferError(loc, opName, os.str());
  }
  Type element = elementOf(qkv);
  out = RankedTensorType::get({s[0], s[1], s[3], s[4]}, element);
  lse = RankedTensorType::get({s[0], s[3], s[1]}, attentionLseElementType(element));
  return success();
}
} // namespace

LogicalResult AttentionQkvOp::inferReturnTypes(MLIRContext *,
                                               std::optional<Location> loc,
                                               Adaptor adaptor,
                                               SmallVectorImpl<Type> &inferred) {
  RankedTensorType out, lse;
  if (failed(inferPackedAttention(loc, getOperationName(), adaptor.getQkv(), out, lse)))
    return failure();
  inferred.append({out, lse});
  return success();
}

void AttentionQkvOp::build(OpBuilder &b, OperationState &state, Value qkv,
                           double scale, bool causal) {
  build(b, state, qkv, b.getF64FloatAttr(scale), b.getBoolAttr(causal));
}

LogicalResult AttentionQkvOp::verify() {
  return checkScale(*this, getScale().convertToDouble());
}

LogicalResult AttentionQkvGradOp::inferReturnTypes(MLIRContext *,
                                                   std::optional<Location> loc,
                                                   Adaptor adaptor,
                                                   SmallVectorImpl<Type> &inferred) {
  RankedTensorType out, lse;
  if (failed(inferPackedAttention(loc, getOperationName(), adaptor.getQkv(), out, lse)))
    return failure();
  inferred.push_back(adaptor.getQkv().getType());
  return success();
}

void AttentionQkvGradOp::build(OpBuilder &b, OperationState &state, Value qkv,
                               Value out, Value lse, Value dout, double scale,
                               bool causal) {
  build(b, state, qkv, out, lse, dout, b.getF64FloatAttr(scale),
        b.getBoolAttr(causal));
}

LogicalResult AttentionQkvGradOp::verify() {
  if (failed(checkScale(*this, getScale().convertToDouble())))
    return failure();
  RankedTensorType outType, lseType;
  if (failed(inferPackedAttention(getLoc(), getOperationName(), getQkv(), outType,
                                  lseType)))
    return failure();
  return checkForwardResults(*this, outType, lseType, getOut(), getLse(),
                             getDout());
}

//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

// The collective libraries' reductions are sum, max, min and mean (a sum
// divided by the group's size); kiln's runtime implements no others.
template <typename OpT> static LogicalResult checkCollectiveKind(OpT op) {
  if (op.getReduction() == ReduceKind::prod)
    return op.emitOpError()
           << "reduction must be sum, max, min or mean, not prod (a collective "
              "does not multiply)";
  return success();
}

LogicalResult AllReduceOp::verify() {
  if (failed(checkCollectiveKind(*this)))
    return failure();
  return checkGroups(*this, getGroups());
}

LogicalResult ReduceScatterOp::verify() {
  if (failed(checkCollectiveKind(*this)))
    return failure();
  if (failed(checkSameElement(*this, "operand", getOperand().getType(), "result",
                              getType())))
    return failure();
  if (failed(check(*this, shape::shardOf(shapeOf(getOperand()), shapeOf(getType()),
                                         getDimension()))))
    return failure();
  return checkGroups(*this, getGroups());
}

LogicalResult AllGatherOp::verify() {
  if (failed(checkSameElement(*this, "operand", getOperand().getType(), "result",
                              getType())))
    return failure();
  if (failed(check(*this, shape::shardOf(shapeOf(getType()), shapeOf(getOperand()),
                                         getDimension()))))
    return failure();
  return checkGroups(*this, getGroups());
}

// I64Attr getters return uint64_t, so a negative rank would pass a `< 0`
// test on them; the verifiers read the attributes as signed values.

LogicalResult CollectiveBroadcastOp::verify() {
  int64_t root = getRootAttr().getInt();
  if (root < 0)
    return emitOpError() << "root must be a non-negative rank, but is " << root;
  if (failed(checkGroups(*this, getGroups())))
    return failure();
  if (auto groups = getGroups()) {
    SmallVector<int64_t> ranks = llvm::to_vector(llvm::map_range(
        groups->getValues<APInt>(), [](const APInt &v) { return v.getSExtValue(); }));
    int64_t perGroup = groups->getType().getDimSize(1);
    for (int64_t g = 0, e = groups->getType().getDimSize(0); g < e; ++g) {
      ArrayRef<int64_t> row = ArrayRef<int64_t>(ranks).slice(g * perGroup, perGroup);
      if (!llvm::is_contained(row, root))
        return emitOpError() << "root " << root << " must be a rank of "
                             << "every group, but group " << g << " is "
                             << shape::str(row);
    }
  }
  return success();
}

namespace {
// Checks the peer rank and channel of a send or recv.
LogicalResult checkPeer(Operation *op, IntegerAttr peer, IntegerAttr channel) {
  if (peer.getInt() < 0 || channel.getInt() < 0)
    return op->emitOpError() << "peer and channel must be non-negative, but are "
                             << peer.getInt() << " and " << channel.getInt();
  return success();
}
} // namespace

LogicalResult SendOp::verify() {
  return checkPeer(*this, getPeerAttr(), getChannelAttr());
}

LogicalResult RecvOp::verify() {
  return checkPeer(*this, getPeerAttr(), getChannelAttr());
}

//===----------------------------------------------------------------------===//
// FusionOp
//===----------------------------------------------------------------------===//

LogicalResult FusionOp::verify() {
  Block &body = getBody().front();
  if (body.getNumArguments() != getInputs().size())
    return emitOpError() << "body must have one argument per input ("
                         << getInputs().size() << "), but has "
                         << body.getNumArguments();
  for (auto [i, pair] :
       llvm::enumerate(llvm::zip(body.getArgumentTypes(), getInputs().getTypes())))
    if (std::get<0>(pair) != std::get<1>(pair))
      return emitOpError() << "body argument " << i << " must have the type of "
                           << "input " << i << " (" << std::get<1>(pair)
                           << "), but has " << std::get<0>(pair);
  auto yield = cast<YieldOp>(body.getTerminator());
  if (yield.getValues().getTypes() != getResultTypes())
    return emitOpError() << "kiln.yield must return the fusion's result types ("
                         << getResultTypes() << "), but returns "
                         << yield.getValues().getTypes();
  return success();
}

//===----------------------------------------------------------------------===//
// Costs (see ir/Flops.h)
//===----------------------------------------------------------------------===//

#define KILN_ZERO_FLOPS(OP)                                                    \
  int64_t OP::getFlops() { return 0; }
KILN_ZERO_FLOPS(ConstantOp)
KILN_ZERO_FLOPS(IotaOp)
KILN_ZERO_FLOPS(ConvertOp)
KILN_ZERO_FLOPS(BroadcastInDimOp)
KILN_ZERO_FLOPS(ReshapeOp)
KILN_ZERO_FLOPS(TransposeOp)
KILN_ZERO_FLOPS(SliceOp)
KILN_ZERO_FLOPS(ConcatenateOp)
KILN_ZERO_FLOPS(PadOp)
KILN_ZERO_FLOPS(GatherOp)
KILN_ZERO_FLOPS(SendOp)
KILN_ZERO_FLOPS(RecvOp)
KILN_ZERO_FLOPS(AllGatherOp)
KILN_ZERO_FLOPS(CollectiveBroadcastOp)
KILN_ZERO_FLOPS(ModeSelectOp)
#undef KILN_ZERO_FLOPS

int64_t ReduceOp::getFlops() {
  return flops::reduce(shape::numElements(shapeOf(getOperand())));
}
int64_t ArgmaxOp::getFlops() {
  return flops::reduce(shape::numElements(shapeOf(getOperand())));
}
int64_t DotGeneralOp::getFlops() {
  return flops::dotGeneral(shapeOf(getLhs()), getLhsContractingDimensions(),
                           shapeOf(getType()));
}
int64_t Conv2DOp::getFlops() {
  return flops::conv2d(shapeOf(getFilter()), shapeOf(getType()));
}
int64_t Conv2DInputGradOp::getFlops() {
  // Same multiply-adds as the forward convolution producing grad_output.
  return flops::conv2d(shapeOf(getFilter()), shapeOf(getGradOutput()));
}
int64_t Conv2DFilterGradOp::getFlops() {
  return flops::conv2d(shapeOf(getType()), shapeOf(getGradOutput()));
}
int64_t MaxPool2DOp::getFlops() {
  return flops::pool2d(getWindow(), shapeOf(getType()));
}
int64_t AvgPool2DOp::getFlops() {
  return flops::pool2d(getWindow(), shapeOf(getType()));
}
int64_t MaxPool2DGradOp::getFlops() {
  return flops::pool2d(getWindow(), shapeOf(getGradOutput()));
}
int64_t AvgPool2DGradOp::getFlops() {
  return flops::pool2d(getWindow(), shapeOf(getGradOutput()));
}
int64_t SoftmaxOp::getFlops() {
  return flops::softmax(shape::numElements(shapeOf(getType())));
}
int64_t LogSoftmaxOp::getFlops() {
  return flops::softmax(shape::numElements(shapeOf(getType())));
}
int64_t LayerNormOp::getFlops() {
  return flops::layerNorm(shape::numElements(shapeOf(getType())));
}
int64_t ScatterAddOp::getFlops() {
  return shape::numElements(shapeOf(getUpdates()));
}
int64_t DropoutOp::getFlops() {
  return flops::dropout(shape::numElements(shapeOf(getType())));
}
int64_t RandomUniformOp::getFlops() {
  return flops::dropout(shape::numElements(shapeOf(getType())));
}
int64_t GeluGradOp::getFlops() {
  return flops::geluGrad(shape::numElements(shapeOf(getType())),
                         getApproximate() == GeluApproximation::tanh);
}
int64_t SoftmaxCrossEntropyOp::getFlops() {
  return flops::softmax(shape::numElements(shapeOf(getLogits())));
}
int64_t AttentionOp::getFlops() {
  ArrayRef<int64_t> q = shapeOf(getQ()), v = shapeOf(getV());
  return flops::attention(q[0], q[1], q[2], shapeOf(getK())[2], q[3], v[3],
                          getCausal());
}
int64_t AttentionGradOp::getFlops() {
  ArrayRef<int64_t> q = shapeOf(getQ()), v = shapeOf(getV());
  return flops::attentionGrad(q[0], q[1], q[2], shapeOf(getK())[2], q[3], v[3],
                              getCausal());
}
int64_t AttentionQkvOp::getFlops() {
  ArrayRef<int64_t> s = shapeOf(getQkv());
  return flops::attention(s[0], s[3], s[1], s[1], s[4], s[4], getCausal());
}
int64_t AttentionQkvGradOp::getFlops() {
  ArrayRef<int64_t> s = shapeOf(getQkv());
  return flops::attentionGrad(s[0], s[3], s[1], s[1], s[4], s[4], getCausal());
}
int64_t AllReduceOp::getFlops() {
  return shape::numElements(shapeOf(getOperand()));
}
int64_t ReduceScatterOp::getFlops() {
  return shape::numElements(shapeOf(getOperand()));
}
int64_t FusionOp::getFlops() {
  // Only the body's own ops: a nested fusion already counts what it holds,
  // so walking into it would count that twice.
  int64_t total = 0;
  for (Operation &op : getBody().front())
    if (auto cost = dyn_cast<CostInterface>(&op))
      total = flops::add(total, cost.getFlops());
  return total;
}

#include "ir/KilnInterfaces.cpp.inc"

#define GET_OP_CLASSES
#include "ir/KilnOps.cpp.inc"
