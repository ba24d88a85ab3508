//===- GradientUtils.h - shared builders for gradient rules -------*- C++ -*-===//
//
// Small builders the per-op gradient rules (ir/gradients/*.cpp) share: splat
// constants, elementwise arithmetic with the types spelled out, reductions
// and the broadcasts that undo them. Every builder creates kiln ops at the
// builder's insertion point and states result types explicitly, so a rule
// never depends on type inference succeeding inside a pass.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_IR_GRADIENTS_GRADIENTUTILS_H
#define KILN_IR_GRADIENTS_GRADIENTUTILS_H

#include "ir/KilnOps.h"

#include "mlir/IR/Builders.h"

namespace kiln::grad {

// The ranked tensor type of |value|.
inline mlir::RankedTensorType typeOf(mlir::Value value) {
  return llvm::cast<mlir::RankedTensorType>(value.getType());
}

// True when |value| is a tensor of floating-point elements: only those carry
// gradients.
bool isFloatTensor(mlir::Value value);

// The gradient of the single result of |op| when one flows and the result
// is a float tensor; null otherwise (the rule then pushes no gradients).
mlir::Value floatResultGrad(mlir::Operation *op,
                            llvm::ArrayRef<mlir::Value> resultGrads);

// Pushes a null gradient for every operand of |op|.
mlir::LogicalResult noGradients(mlir::Operation *op,
                                llvm::SmallVectorImpl<mlir::Value> &operandGrads);

// A kiln.constant of |type| with every element |value|.
mlir::Value splat(mlir::OpBuilder &b, mlir::Location loc,
                  mlir::RankedTensorType type, double value);
// A splat of |like|'s type.
mlir::Value splatLike(mlir::OpBuilder &b, mlir::Location loc, mlir::Value like,
                      double value);
// A kiln.constant i1 tensor of |shape| with every element |value|.
mlir::Value splatBool(mlir::OpBuilder &b, mlir::Location loc,
                      llvm::ArrayRef<int64_t> shape, bool value);

// Elementwise ops on operands of one type; the result has that type.
mlir::Value add(mlir::OpBuilder &b, mlir::Location loc, mlir::Value x, mlir::Value y);
mlir::Value sub(mlir::OpBuilder &b, mlir::Location loc, mlir::Value x, mlir::Value y);
mlir::Value mul(mlir::OpBuilder &b, mlir::Location loc, mlir::Value x, mlir::Value y);
mlir::Value div(mlir::OpBuilder &b, mlir::Location loc, mlir::Value x, mlir::Value y);
mlir::Value neg(mlir::OpBuilder &b, mlir::Location loc, mlir::Value x);
// |x| times the scalar |factor| (as a splat of x's type).
mlir::Value scale(mlir::OpBuilder &b, mlir::Location loc, mlir::Value x,
                  double factor);
// An i1 tensor: |lhs| <direction> |rhs|.
mlir::Value compare(mlir::OpBuilder &b, mlir::Location loc,
                    CompareDirection direction, mlir::Value lhs, mlir::Value rhs);
// |pred| ? |onTrue| : |onFalse|.
mlir::Value select(mlir::OpBuilder &b, mlir::Location loc, mlir::Value pred,
                   mlir::Value onTrue, mlir::Value onFalse);
// Converts |x| to a tensor of the same shape with element type |element|.
mlir::Value convert(mlir::OpBuilder &b, mlir::Location loc, mlir::Value x,
                    mlir::Type element);

// kiln.reduce |kind| of |x| over |dims| (any order); the identity when
// |dims| is empty.
mlir::Value reduce(mlir::OpBuilder &b, mlir::Location loc, ReduceKind kind,
                   mlir::Value x, llvm::ArrayRef<int64_t> dims);
// kiln.broadcast_in_dim of |x| to |type|, mapping operand dimension i to
// result dimension dims[i]; |x| itself when the types already match.
mlir::Value broadcast(mlir::OpBuilder &b, mlir::Location loc, mlir::Value x,
                      llvm::ArrayRef<int64_t> dims, mlir::RankedTensorType type);
// Broadcasts |reduced|, the result of reducing a tensor of |full| type over
// |reducedDims|, back to |full| (each reduced element fills its fibre).
mlir::Value broadcastBack(mlir::OpBuilder &b, mlir::Location loc,
                          mlir::Value reduced, mlir::RankedTensorType full,
                          llvm::ArrayRef<int64_t> reducedDims);
// The adjoint of broadcast_in_dim: sums |grad| (of the broadcast's result
// type) over the broadcast dimensions and reshapes to |operandType|.
mlir::Value sumToShape(mlir::OpBuilder &b, mlir::Location loc, mlir::Value grad,
                       mlir::RankedTensorType operandType,
                       llvm::ArrayRef<int64_t> broadcastDims);
// kiln.reshape of |x| to |type|; |x| itself when the types match.
mlir::Value reshape(mlir::OpBuilder &b, mlir::Location loc, mlir::Value x,
                    mlir::RankedTensorType type);
// kiln.transpose of |x| by |permutation| (result dim i is x's dim
// permutation[i]); |x| itself for the identity.
mlir::Value transpose(mlir::OpBuilder &b, mlir::Location loc, mlir::Value x,
                      llvm::ArrayRef<int64_t> permutation);
// kiln.slice with explicit bounds and strides.
mlir::Value slice(mlir::OpBuilder &b, mlir::Location loc, mlir::Value x,
                  llvm::ArrayRef<int64_t> start, llvm::ArrayRef<int64_t> limit,
                  llvm::ArrayRef<int64_t> strides);
// kiln.pad with |low| and |high| edge padding filled with |value|; |x|
// itself when there is no padding.
mlir::Value pad(mlir::OpBuilder &b, mlir::Location loc, mlir::Value x,
                llvm::ArrayRef<int64_t> low, llvm::ArrayRef<int64_t> high,
                double value);

// |x| with its zeros replaced by ones, and whether each element is 0.
mlir::Value nonzeroFactors(mlir::OpBuilder &b, mlir::Location loc,
                           mlir::Value x, mlir::Value &isZero);
// For each factor x of a product, given as nonzeroFactors gives it
// (|nonzero|, |isZero|): the product of the product's other factors, from
// |zeros| (how many of its factors are 0) and |rest| (the product of its
// nonzero factors), both spread to x's shape. That is rest / x where no
// factor is 0; at the one zero, rest, and 0 elsewhere; 0 everywhere with
// more zeros (PyTorch's prod gradient). Never divides by 0, even in a
// branch a select drops.
mlir::Value productOfOthers(mlir::OpBuilder &b, mlir::Location loc,
                            mlir::Value nonzero, mlir::Value isZero,
                            mlir::Value zeros, mlir::Value rest);

// The dimensions [begin, end).
llvm::SmallVector<int64_t> range(int64_t begin, int64_t end);

} // namespace kiln::grad

#endif // KILN_IR_GRADIENTS_GRADIENTUTILS_H
