//===- ScalarSemantics.cpp - elementwise ops as scalar arith/math ---------===//
//
// The single definition of what every elementwise kiln op computes, as
// upstream arith/math ops on one element (see ScalarSemantics in
// ir/KilnInterfaces.td). Operands arrive in their compute types.
//
//===----------------------------------------------------------------------===//

#include "ir/ScalarSemantics.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"

#include <cmath>

using namespace mlir;

namespace kiln {

Type computeType(Type elementType) {
  if (elementType.isF16() || elementType.isBF16())
    return Float32Type::get(elementType.getContext());
  return elementType;
}

Value convertScalar(OpBuilder &b, Location loc, Value value, Type to) {
  Type from = value.getType();
  if (from == to)
    return value;
  auto fromFloat = dyn_cast<FloatType>(from);
  auto toFloat = dyn_cast<FloatType>(to);
  if (fromFloat && toFloat) {
    if (fromFloat.getWidth() < toFloat.getWidth())
      return b.create<arith::ExtFOp>(loc, to, value);
    return b.create<arith::TruncFOp>(loc, to, value);
  }
  if (fromFloat) {
    if (to.isInteger(1)) {
      Value zero = b.create<arith::ConstantOp>(loc, b.getFloatAttr(from, 0.0));
      return b.create<arith::CmpFOp>(loc, arith::CmpFPredicate::UNE, value, zero);
    }
    return b.create<arith::FPToSIOp>(loc, to, value);
  }
  if (toFloat) {
    if (from.isInteger(1))
      return b.create<arith::UIToFPOp>(loc, to, value);
    return b.create<arith::SIToFPOp>(loc, to, value);
  }
  // Integer to integer.
  unsigned fromWidth = from.getIntOrFloatBitWidth();
  unsigned toWidth = to.getIntOrFloatBitWidth();
  if (toWidth == 1) {
    Value zero = b.create<arith::ConstantOp>(loc, b.getIntegerAttr(from, 0));
    return b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ne, value, zero);
  }
  if (fromWidth == 1)
    return b.create<arith::ExtUIOp>(loc, to, value);
  if (fromWidth < toWidth)
    return b.create<arith::ExtSIOp>(loc, to, value);
  return b.create<arith::TruncIOp>(loc, to, value);
}

Value buildStoredScalar(ScalarSemantics op, OpBuilder &b, Location loc,
                        ValueRange operands) {
  SmallVector<Value> widened;
  for (Value v : operands)
    widened.push_back(convertScalar(b, loc, v, computeType(v.getType())));
  Value result = op.buildScalar(b, loc, widened);
  Type stored = cast<ShapedType>(op->getResult(0).getType()).getElementType();
  return convertScalar(b, loc, result, stored);
}

namespace {

Value floatConst(OpBuilder &b, Location loc, Type type, double v) {
  return b.create<arith::ConstantOp>(loc, b.getFloatAttr(type, v));
}

Value intConst(OpBuilder &b, Location loc, Type type, int64_t v) {
  return b.create<arith::ConstantOp>(loc, b.getIntegerAttr(type, v));
}

bool isFloatValue(Value v) { return isa<FloatType>(v.getType()); }

// Builds FloatOp for floats and IntOp for integers.
template <typename FloatOp, typename IntOp>
Value floatOrInt(OpBuilder &b, Location loc, Value lhs, Value rhs) {
  if (isFloatValue(lhs))
    return b.create<FloatOp>(loc, lhs, rhs);
  return b.create<IntOp>(loc, lhs, rhs);
}

} // namespace

//===----------------------------------------------------------------------===//
// Unary
//===----------------------------------------------------------------------===//

Value NegOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  Value x = operands[0];
  if (isFloatValue(x))
    return b.create<arith::NegFOp>(loc, x);
  return b.create<arith::SubIOp>(loc, intConst(b, loc, x.getType(), 0), x);
}

Value AbsOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  Value x = operands[0];
  if (isFloatValue(x))
    return b.create<math::AbsFOp>(loc, x);
  return b.create<math::AbsIOp>(loc, x);
}

Value ExpOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  return b.create<math::ExpOp>(loc, operands[0]);
}
Value LogOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  return b.create<math::LogOp>(loc, operands[0]);
}
Value Log1pOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  return b.create<math::Log1pOp>(loc, operands[0]);
}
Value SqrtOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  return b.create<math::SqrtOp>(loc, operands[0]);
}
Value RsqrtOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  return b.create<math::RsqrtOp>(loc, operands[0]);
}
Value TanhOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  return b.create<math::TanhOp>(loc, operands[0]);
}
Value ErfOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  return b.create<math::ErfOp>(loc, operands[0]);
}
Value SinOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  return b.create<math::SinOp>(loc, operands[0]);
}
Value CosOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  return b.create<math::CosOp>(loc, operands[0]);
}
Value AtanOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  return b.create<math::AtanOp>(loc, operands[0]);
}
Value FloorOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  return b.create<math::FloorOp>(loc, operands[0]);
}
Value CeilOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  return b.create<math::CeilOp>(loc, operands[0]);
}
Value RoundOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  return b.create<math::RoundEvenOp>(loc, operands[0]);
}

Value SigmoidOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  // 1 / (1 + e^-x)
  Value x = operands[0];
  Type t = x.getType();
  Value e = b.create<math::ExpOp>(loc, b.create<arith::NegFOp>(loc, x));
  Value one = floatConst(b, loc, t, 1.0);
  return b.create<arith::DivFOp>(loc, one, b.create<arith::AddFOp>(loc, one, e));
}

Value ReluOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  Value x = operands[0];
  if (isFloatValue(x))
    return b.create<arith::MaximumFOp>(loc, x, floatConst(b, loc, x.getType(), 0.0));
  return b.create<arith::MaxSIOp>(loc, x, intConst(b, loc, x.getType(), 0));
}

Value ReciprocalOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  Value x = operands[0];
  return b.create<arith::DivFOp>(loc, floatConst(b, loc, x.getType(), 1.0), x);
}

Value StopGradientOp::buildScalar(OpBuilder &, Location, ValueRange operands) {
  return operands[0];
}

Value GeluOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  Value x = operands[0];
  Type t = x.getType();
  Value half = floatConst(b, loc, t, 0.5);
  Value one = floatConst(b, loc, t, 1.0);
  Value inner;
  if (getApproximate() == GeluApproximation::erf) {
    // 0.5 x (1 + erf(x / sqrt(2)))
    Value scaled = b.create<arith::MulFOp>(loc, x, floatConst(b, loc, t, M_SQRT1_2));
    inner = b.create<math::ErfOp>(loc, scaled);
  } else {
    // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    Value x3 = b.create<arith::MulFOp>(loc, b.create<arith::MulFOp>(loc, x, x), x);
    Value poly = b.create<arith::AddFOp>(
        loc, x, b.create<arith::MulFOp>(loc, floatConst(b, loc, t, 0.044715), x3));
    Value arg = b.create<arith::MulFOp>(
        loc, floatConst(b, loc, t, std::sqrt(2.0 / M_PI)), poly);
    inner = b.create<math::TanhOp>(loc, arg);
  }
  Value halfX = b.create<arith::MulFOp>(loc, half, x);
  return b.create<arith::MulFOp>(loc, halfX, b.create<arith::AddFOp>(loc, one, inner));
}

Value GeluGradOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  // dy * gelu'(x); the operation count is flops::geluGrad's (ir/Flops.h).
  Value x = operands[0], dy = operands[1];
  Type t = x.getType();
  auto mulf = [&](Value l, Value r) { return b.create<arith::MulFOp>(loc, l, r).getResult(); };
  auto addf = [&](Value l, Value r) { return b.create<arith::AddFOp>(loc, l, r).getResult(); };
  Value half = floatConst(b, loc, t, 0.5);
  Value one = floatConst(b, loc, t, 1.0);
  Value derivative;
  if (getApproximate() == GeluApproximation::erf) {
    // Phi(x) + x phi(x): 0.5 (1 + erf(x / sqrt(2))) + x e^(-x^2/2) / sqrt(2 pi).
    Value scaled = mulf(x, floatConst(b, loc, t, M_SQRT1_2));
    Value cdf = mulf(half, addf(one, b.create<math::ErfOp>(loc, scaled)));
    Value pdf = b.create<math::ExpOp>(
        loc, mulf(mulf(x, x), floatConst(b, loc, t, -0.5)));
    Value xScaled = mulf(x, floatConst(b, loc, t, 0.5 * M_2_SQRTPI * M_SQRT1_2));
    derivative = addf(cdf, mulf(xScaled, pdf));
  } else {
    // u = k (x + c x^3), t = tanh(u), du/dx = k (1 + 3 c x^2):
    // 0.5 (1 + t) + 0.5 x (1 - t^2) du/dx.
    const double k = std::sqrt(2.0 / M_PI), c = 0.044715;
    Value x2 = mulf(x, x);
    Value poly = addf(x, mulf(floatConst(b, loc, t, c), mulf(x2, x)));
    Value th = b.create<math::TanhOp>(loc, mulf(floatConst(b, loc, t, k), poly));
    Value left = mulf(half, addf(one, th));
    Value sech2 = b.create<arith::SubFOp>(loc, one, mulf(th, th));
    Value du = mulf(floatConst(b, loc, t, k),
                    addf(one, mulf(floatConst(b, loc, t, 3.0 * c), x2)));
    Value right = mulf(mulf(mulf(half, x), sech2), du);
    derivative = addf(left, right);
  }
  return mulf(dy, derivative);
}

Value ConvertOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  Type to = computeType(getType().getElementType());
  return convertScalar(b, loc, operands[0], to);
}

//===----------------------------------------------------------------------===//
// Binary and ternary
//===----------------------------------------------------------------------===//

Value AddOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  return floatOrInt<arith::AddFOp, arith::AddIOp>(b, loc, operands[0], operands[1]);
}
Value SubOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  return floatOrInt<arith::SubFOp, arith::SubIOp>(b, loc, operands[0], operands[1]);
}
Value MulOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  return floatOrInt<arith::MulFOp, arith::MulIOp>(b, loc, operands[0], operands[1]);
}
Value DivOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  return floatOrInt<arith::DivFOp, arith::DivSIOp>(b, loc, operands[0], operands[1]);
}
Value MaxOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  return floatOrInt<arith::MaximumFOp, arith::MaxSIOp>(b, loc, operands[0], operands[1]);
}
Value MinOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  return floatOrInt<arith::MinimumFOp, arith::MinSIOp>(b, loc, operands[0], operands[1]);
}
Value RemOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  return floatOrInt<arith::RemFOp, arith::RemSIOp>(b, loc, operands[0],
                                                   operands[1]);
}
Value PowOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  return b.create<math::PowFOp>(loc, operands[0], operands[1]);
}

Value CompareOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  Value lhs = operands[0], rhs = operands[1];
  if (isFloatValue(lhs)) {
    arith::CmpFPredicate pred;
    switch (getDirection()) {
    case CompareDirection::eq: pred = arith::CmpFPredicate::OEQ; break;
    case CompareDirection::ne: pred = arith::CmpFPredicate::UNE; break;
    case CompareDirection::lt: pred = arith::CmpFPredicate::OLT; break;
    case CompareDirection::le: pred = arith::CmpFPredicate::OLE; break;
    case CompareDirection::gt: pred = arith::CmpFPredicate::OGT; break;
    case CompareDirection::ge: pred = arith::CmpFPredicate::OGE; break;
    }
    return b.create<arith::CmpFOp>(loc, pred, lhs, rhs);
  }
  // i1 compares as unsigned (false < true); wider integers as signed.
  bool isBool = lhs.getType().isInteger(1);
  arith::CmpIPredicate pred;
  switch (getDirection()) {
  case CompareDirection::eq: pred = arith::CmpIPredicate::eq; break;
  case CompareDirection::ne: pred = arith::CmpIPredicate::ne; break;
  case CompareDirection::lt: pred = isBool ? arith::CmpIPredicate::ult : arith::CmpIPredicate::slt; break;
  case CompareDirection::le: pred = isBool ? arith::CmpIPredicate::ule : arith::CmpIPredicate::sle; break;
  case CompareDirection::gt: pred = isBool ? arith::CmpIPredicate::ugt : arith::CmpIPredicate::sgt; break;
  case CompareDirection::ge: pred = isBool ? arith::CmpIPredicate::uge : arith::CmpIPredicate::sge; break;
  }
  return b.create<arith::CmpIOp>(loc, pred, lhs, rhs);
}

Value SelectOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  return b.create<arith::SelectOp>(loc, operands[0], operands[1], operands[2]);
}

} // namespace kiln
