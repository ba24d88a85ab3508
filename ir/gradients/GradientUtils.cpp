//===- GradientUtils.cpp - shared builders for gradient rules -------------===//
//
// See GradientUtils.h. Result types are computed here from the operands so
// that a rule's IR is well typed by construction; the op verifiers check it
// again when the pass finishes.
//
//===----------------------------------------------------------------------===//

#include "ir/gradients/GradientUtils.h"

#include "llvm/ADT/STLExtras.h"

using namespace mlir;

namespace kiln::grad {

bool isFloatTensor(Value value) {
  auto type = dyn_cast<RankedTensorType>(value.getType());
  return type && isa<FloatType>(type.getElementType());
}

Value floatResultGrad(Operation *op, ArrayRef<Value> resultGrads) {
  if (resultGrads.empty() || !resultGrads[0] || op->getNumResults() != 1 ||
      !isFloatTensor(op->getResult(0)))
    return nullptr;
  return resultGrads[0];
}

LogicalResult noGradients(Operation *op, SmallVectorImpl<Value> &operandGrads) {
  operandGrads.append(op->getNumOperands(), Value());
  return success();
}

Value splat(OpBuilder &b, Location loc, RankedTensorType type, double value) {
  Type element = type.getElementType();
  Attribute scalar;
  if (isa<FloatType>(element))
    scalar = b.getFloatAttr(element, value);
  else
    scalar = b.getIntegerAttr(element, static_cast<int64_t>(value));
  auto attr = DenseElementsAttr::get(type, ArrayRef<Attribute>{scalar});
  return b.create<ConstantOp>(loc, type, attr);
}

Value splatLike(OpBuilder &b, Location loc, Value like, double value) {
  return splat(b, loc, typeOf(like), value);
}

Value splatBool(OpBuilder &b, Location loc, ArrayRef<int64_t> shape, bool value) {
  auto type = RankedTensorType::get(shape, b.getI1Type());
  auto attr = DenseElementsAttr::get(type, ArrayRef<bool>{value});
  return b.create<ConstantOp>(loc, type, attr);
}

Value add(OpBuilder &b, Location loc, Value x, Value y) {
  return b.create<AddOp>(loc, x.getType(), x, y);
}
Value sub(OpBuilder &b, Location loc, Value x, Value y) {
  return b.create<SubOp>(loc, x.getType(), x, y);
}
Value mul(OpBuilder &b, Location loc, Value x, Value y) {
  return b.create<MulOp>(loc, x.getType(), x, y);
}
Value div(OpBuilder &b, Location loc, Value x, Value y) {
  return b.create<DivOp>(loc, x.getType(), x, y);
}
Value neg(OpBuilder &b, Location loc, Value x) {
  return b.create<NegOp>(loc, x.getType(), x);
}

Value scale(OpBuilder &b, Location loc, Value x, double factor) {
  return mul(b, loc, x, splatLike(b, loc, x, factor));
}

Value compare(OpBuilder &b, Location loc, CompareDirection direction, Value lhs,
              Value rhs) {
  auto type = RankedTensorType::get(typeOf(lhs).getShape(), b.getI1Type());
  return b.create<CompareOp>(loc, type,
                             CompareDirectionAttr::get(b.getContext(), direction),
                             lhs, rhs);
}

Value select(OpBuilder &b, Location loc, Value pred, Value onTrue, Value onFalse) {
  return b.create<SelectOp>(loc, onTrue.getType(), pred, onTrue, onFalse);
}

Value convert(OpBuilder &b, Location loc, Value x, Type element) {
  auto type = RankedTensorType::get(typeOf(x).getShape(), element);
  if (type == x.getType())
    return x;
  return b.create<ConvertOp>(loc, type, x);
}

Value reduce(OpBuilder &b, Location loc, ReduceKind kind, Value x,
             ArrayRef<int64_t> dims) {
  if (dims.empty())
    return x;
  RankedTensorType type = typeOf(x);
  SmallVector<int64_t> shape;
  for (int64_t d = 0, e = type.getRank(); d < e; ++d)
    if (!llvm::is_contained(dims, d))
      shape.push_back(type.getDimSize(d));
  auto resultType = RankedTensorType::get(shape, type.getElementType());
  return b.create<ReduceOp>(loc, resultType,
                            ReduceKindAttr::get(b.getContext(), kind), x,
                            b.getDenseI64ArrayAttr(dims));
}

Value broadcast(OpBuilder &b, Location loc, Value x, ArrayRef<int64_t> dims,
                RankedTensorType type) {
  if (x.getType() == type)
    return x;
  return b.create<BroadcastInDimOp>(loc, type, x, b.getDenseI64ArrayAttr(dims));
}

Value broadcastBack(OpBuilder &b, Location loc, Value reduced,
                    RankedTensorType full, ArrayRef<int64_t> reducedDims) {
  SmallVector<int64_t> kept;
  for (int64_t d = 0, e = full.getRank(); d < e; ++d)
    if (!llvm::is_contained(reducedDims, d))
      kept.push_back(d);
  auto type = RankedTensorType::get(full.getShape(),
                                    typeOf(reduced).getElementType());
  return broadcast(b, loc, reduced, kept, type);
}

Value sumToShape(OpBuilder &b, Location loc, Value grad,
                 RankedTensorType operandType, ArrayRef<int64_t> broadcastDims) {
  RankedTensorType resultType = typeOf(grad);
  // Sum over the result dimensions no operand dimension maps to, and over
  // those a size-1 operand dimension was stretched along.
  SmallVector<int64_t> sumDims;
  for (int64_t d = 0, e = resultType.getRank(); d < e; ++d) {
    const auto *it = llvm::find(broadcastDims, d);
    if (it == broadcastDims.end()) {
      sumDims.push_back(d);
      continue;
    }
    int64_t operandDim = it - broadcastDims.begin();
    if (operandType.getDimSize(operandDim) == 1 && resultType.getDimSize(d) != 1)
      sumDims.push_back(d);
  }
  Value summed = reduce(b, loc, ReduceKind::sum, grad, sumDims);
  // The summed size-1 dimensions are gone; put them back.
  return reshape(b, loc, summed,
                 RankedTensorType::get(operandType.getShape(),
                                       resultType.getElementType()));
}

Value reshape(OpBuilder &b, Location loc, Value x, RankedTensorType type) {
  if (x.getType() == type)
    return x;
  return b.create<ReshapeOp>(loc, type, x);
}

Value transpose(OpBuilder &b, Location loc, Value x,
                ArrayRef<int64_t> permutation) {
  bool identity = true;
  for (auto [i, p] : llvm::enumerate(permutation))
    identity &= static_cast<int64_t>(i) == p;
  if (identity)
    return x;
  RankedTensorType type = typeOf(x);
  SmallVector<int64_t> shape;
  for (int64_t p : permutation)
    shape.push_back(type.getDimSize(p));
  return b.create<TransposeOp>(
      loc, RankedTensorType::get(shape, type.getElementType()), x,
      b.getDenseI64ArrayAttr(permutation));
}

Value slice(OpBuilder &b, Location loc, Value x, ArrayRef<int64_t> start,
            ArrayRef<int64_t> limit, ArrayRef<int64_t> strides) {
  RankedTensorType type = typeOf(x);
  SmallVector<int64_t> shape;
  for (size_t d = 0; d < start.size(); ++d)
    shape.push_back(llvm::divideCeil(limit[d] - start[d], strides[d]));
  auto resultType = RankedTensorType::get(shape, type.getElementType());
  if (resultType == type)
    return x;
  return b.create<SliceOp>(loc, resultType, x, b.getDenseI64ArrayAttr(start),
                           b.getDenseI64ArrayAttr(limit),
                           b.getDenseI64ArrayAttr(strides));
}

Value pad(OpBuilder &b, Location loc, Value x, ArrayRef<int64_t> low,
          ArrayRef<int64_t> high, double value) {
  if (llvm::all_of(low, [](int64_t v) { return v == 0; }) &&
      llvm::all_of(high, [](int64_t v) { return v == 0; }))
    return x;
  RankedTensorType type = typeOf(x);
  SmallVector<int64_t> shape;
  for (int64_t d = 0, e = type.getRank(); d < e; ++d)
    shape.push_back(type.getDimSize(d) + low[d] + high[d]);
  return b.create<PadOp>(loc, RankedTensorType::get(shape, type.getElementType()),
                         x, b.getDenseI64ArrayAttr(low),
                         b.getDenseI64ArrayAttr(high), b.getF64FloatAttr(value));
}

Value nonzeroFactors(OpBuilder &b, Location loc, Value x, Value &isZero) {
  isZero = compare(b, loc, CompareDirection::eq, x, splatLike(b, loc, x, 0.0));
  return select(b, loc, isZero, splatLike(b, loc, x, 1.0), x);
}

Value productOfOthers(OpBuilder &b, Location loc, Value nonzero, Value isZero,
                      Value zeros, Value rest) {
  Value zero = splatLike(b, loc, nonzero, 0.0),
        one = splatLike(b, loc, nonzero, 1.0);
  return select(
      b, loc, isZero,
      select(b, loc, compare(b, loc, CompareDirection::eq, zeros, one), rest,
             zero),
      select(b, loc, compare(b, loc, CompareDirection::eq, zeros, zero),
             div(b, loc, rest, nonzero), zero));
}

SmallVector<int64_t> range(int64_t begin, int64_t end) {
  SmallVector<int64_t> dims;
  for (int64_t d = begin; d < end; ++d)
    dims.push_back(d);
  return dims;
}

} // namespace kiln::grad
