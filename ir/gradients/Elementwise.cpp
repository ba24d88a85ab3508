//===- Elementwise.cpp - gradient rules of elementwise ops ----------------===//
//
// Reverse-mode rules for the elementwise kiln ops. Each multiplies the
// incoming gradient by the op's derivative, written with kiln ops; where the
// result is cheaper than the operand to reuse (exp, tanh, sigmoid, sqrt) the
// rule uses it. Integer and boolean tensors carry no gradient, nor do
// compare and stop_gradient.
//
// Conventions at points where the derivative does not exist:
// - abs: sign(x), so 0 at x = 0;
// - relu: 0 at x = 0 (the gradient flows only where x > 0);
// - max: a tie sends the whole gradient to lhs; min likewise;
// - pow: the rhs gradient is taken as 0 where lhs = 0 (y * log(lhs) with
//   log(0) replaced by 0), as JAX does.
//
//===----------------------------------------------------------------------===//

#include "ir/gradients/GradientUtils.h"

#include "mlir/IR/Builders.h"

#include <cmath>

using namespace mlir;
using namespace kiln::grad;

namespace kiln {

namespace {

// Pushes |grad| as the single operand's gradient, or null when no gradient
// flows.
LogicalResult unary(Operation *op, ArrayRef<Value> resultGrads,
                    SmallVectorImpl<Value> &operandGrads,
                    llvm::function_ref<Value(Value g, Location loc)> rule) {
  Value g = floatResultGrad(op, resultGrads);
  if (!g)
    return noGradients(op, operandGrads);
  operandGrads.push_back(rule(g, op->getLoc()));
  return success();
}

} // namespace

//===----------------------------------------------------------------------===//
// Unary
//===----------------------------------------------------------------------===//

LogicalResult NegOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  return unary(*this, resultGrads, operandGrads,
               [&](Value g, Location loc) { return neg(b, loc, g); });
}

LogicalResult AbsOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  return unary(*this, resultGrads, operandGrads, [&](Value g, Location loc) {
    Value x = getOperand();
    Value zero = splatLike(b, loc, x, 0.0);
    Value negative = select(b, loc, compare(b, loc, CompareDirection::lt, x, zero),
                            neg(b, loc, g), zero);
    return select(b, loc, compare(b, loc, CompareDirection::gt, x, zero), g,
                  negative);
  });
}

LogicalResult ExpOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  return unary(*this, resultGrads, operandGrads, [&](Value g, Location loc) {
    return mul(b, loc, g, getResult());
  });
}

LogicalResult LogOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  return unary(*this, resultGrads, operandGrads, [&](Value g, Location loc) {
    return div(b, loc, g, getOperand());
  });
}

LogicalResult Log1pOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                      SmallVectorImpl<Value> &operandGrads) {
  return unary(*this, resultGrads, operandGrads, [&](Value g, Location loc) {
    Value x = getOperand();
    return div(b, loc, g, add(b, loc, splatLike(b, loc, x, 1.0), x));
  });
}

LogicalResult SqrtOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                     SmallVectorImpl<Value> &operandGrads) {
  // d sqrt(x) = 1 / (2 sqrt(x)).
  return unary(*this, resultGrads, operandGrads, [&](Value g, Location loc) {
    return div(b, loc, scale(b, loc, g, 0.5), getResult());
  });
}

LogicalResult RsqrtOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                      SmallVectorImpl<Value> &operandGrads) {
  // d x^(-1/2) = -1/2 x^(-3/2) = -1/2 y / x.
  return unary(*this, resultGrads, operandGrads, [&](Value g, Location loc) {
    Value yOverX = div(b, loc, getResult(), getOperand());
    return mul(b, loc, scale(b, loc, g, -0.5), yOverX);
  });
}

LogicalResult TanhOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                     SmallVectorImpl<Value> &operandGrads) {
  // d tanh(x) = 1 - y^2.
  return unary(*this, resultGrads, operandGrads, [&](Value g, Location loc) {
    Value y = getResult();
    Value oneMinusY2 = sub(b, loc, splatLike(b, loc, y, 1.0), mul(b, loc, y, y));
    return mul(b, loc, g, oneMinusY2);
  });
}

LogicalResult SigmoidOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                        SmallVectorImpl<Value> &operandGrads) {
  // d sigmoid(x) = y (1 - y).
  return unary(*this, resultGrads, operandGrads, [&](Value g, Location loc) {
    Value y = getResult();
    Value oneMinusY = sub(b, loc, splatLike(b, loc, y, 1.0), y);
    return mul(b, loc, g, mul(b, loc, y, oneMinusY));
  });
}

LogicalResult ReluOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                     SmallVectorImpl<Value> &operandGrads) {
  return unary(*this, resultGrads, operandGrads, [&](Value g, Location loc) {
    Value x = getOperand();
    Value zero = splatLike(b, loc, x, 0.0);
    return select(b, loc, compare(b, loc, CompareDirection::gt, x, zero), g, zero);
  });
}

LogicalResult ErfOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  // d erf(x) = 2 / sqrt(pi) e^(-x^2).
  return unary(*this, resultGrads, operandGrads, [&](Value g, Location loc) {
    Value x = getOperand();
    Value e = b.create<ExpOp>(loc, x.getType(), neg(b, loc, mul(b, loc, x, x)));
    return mul(b, loc, scale(b, loc, g, 2.0 / std::sqrt(M_PI)), e);
  });
}

LogicalResult SinOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  return unary(*this, resultGrads, operandGrads, [&](Value g, Location loc) {
    Value x = getOperand();
    return mul(b, loc, g, b.create<CosOp>(loc, x.getType(), x));
  });
}

LogicalResult CosOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  return unary(*this, resultGrads, operandGrads, [&](Value g, Location loc) {
    Value x = getOperand();
    return neg(b, loc, mul(b, loc, g, b.create<SinOp>(loc, x.getType(), x)));
  });
}

LogicalResult AtanOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                     SmallVectorImpl<Value> &operandGrads) {
  // d atan(x) = 1 / (1 + x^2).
  return unary(*this, resultGrads, operandGrads, [&](Value g, Location loc) {
    Value x = getOperand();
    Value onePlusX2 = add(b, loc, splatLike(b, loc, x, 1.0), mul(b, loc, x, x));
    return div(b, loc, g, onePlusX2);
  });
}

LogicalResult ReciprocalOp::buildGradients(OpBuilder &b,
                                           ArrayRef<Value> resultGrads,
                                           SmallVectorImpl<Value> &operandGrads) {
  // d (1/x) = -1/x^2 = -y^2.
  return unary(*this, resultGrads, operandGrads, [&](Value g, Location loc) {
    Value y = getResult();
    return neg(b, loc, mul(b, loc, g, mul(b, loc, y, y)));
  });
}

// stop_gradient passes nothing back; floor, ceil and round are flat
// between their steps: no gradient (zero), as in XLA and PyTorch.
#define KILN_NO_GRADIENT(OP)                                                   \
  LogicalResult OP::buildGradients(OpBuilder &, ArrayRef<Value>,               \
                                   SmallVectorImpl<Value> &operandGrads) {     \
    return noGradients(*this, operandGrads);                                   \
  }
KILN_NO_GRADIENT(StopGradientOp)
KILN_NO_GRADIENT(FloorOp)
KILN_NO_GRADIENT(CeilOp)
KILN_NO_GRADIENT(RoundOp)
#undef KILN_NO_GRADIENT

LogicalResult GeluOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                     SmallVectorImpl<Value> &operandGrads) {
  // One kiln.gelu_grad, so the backward stays one op (a GEMM epilogue).
  return unary(*this, resultGrads, operandGrads, [&](Value g, Location loc) {
    Value x = getOperand();
    return b.create<GeluGradOp>(loc, x.getType(), getApproximate(), x, g)
        .getResult();
  });
}

LogicalResult GeluGradOp::buildGradients(OpBuilder &b,
                                         ArrayRef<Value> resultGrads,
                                         SmallVectorImpl<Value> &operandGrads) {
  // result = dy * gelu'(x): d/d(dy) = gelu'(x), d/dx = dy * gelu''(x).
  Value g = floatResultGrad(*this, resultGrads);
  if (!g)
    return noGradients(*this, operandGrads);
  Location loc = getLoc();
  Value x = getX();
  Type type = x.getType();
  Value second;
  if (getApproximate() == GeluApproximation::erf) {
    // gelu''(x) = phi(x) (2 - x^2), phi(x) = e^(-x^2 / 2) / sqrt(2 pi).
    Value x2 = mul(b, loc, x, x);
    Value pdf = scale(b, loc, b.create<ExpOp>(loc, type, scale(b, loc, x2, -0.5)),
                      0.5 * M_2_SQRTPI * M_SQRT1_2);
    second = mul(b, loc, pdf, sub(b, loc, splatLike(b, loc, x, 2.0), x2));
  } else {
    // u = k (x + c x^3), t = tanh(u), u' = k (1 + 3 c x^2), u'' = 6 k c x:
    // gelu''(x) = (1 - t^2) (u' + 0.5 x u'' - x t u'^2)
    //           = (1 - t^2) (u' + 3 k c x^2 - x t u'^2).
    const double k = std::sqrt(2.0 / M_PI), c = 0.044715;
    Value one = splatLike(b, loc, x, 1.0);
    Value x2 = mul(b, loc, x, x);
    Value inner = add(b, loc, x, scale(b, loc, mul(b, loc, x2, x), c));
    Value t = b.create<TanhOp>(loc, type, scale(b, loc, inner, k));
    Value sech2 = sub(b, loc, one, mul(b, loc, t, t));
    Value du = scale(b, loc, add(b, loc, one, scale(b, loc, x2, 3.0 * c)), k);
    Value xt = mul(b, loc, x, t);
    Value sum = sub(b, loc, add(b, loc, du, scale(b, loc, x2, 3.0 * k * c)),
                    mul(b, loc, xt, mul(b, loc, du, du)));
    second = mul(b, loc, sech2, sum);
  }
  operandGrads.push_back(mul(b, loc, mul(b, loc, g, getDy()), second));
  operandGrads.push_back(
      b.create<GeluGradOp>(loc, type, getApproximate(), x, g).getResult());
  return success();
}

LogicalResult ConvertOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                        SmallVectorImpl<Value> &operandGrads) {
  // Only float-to-float conversions are differentiable; the gradient is
  // converted back to the operand's precision.
  Value g = floatResultGrad(*this, resultGrads);
  if (!g || !isFloatTensor(getOperand()))
    return noGradients(*this, operandGrads);
  operandGrads.push_back(
      convert(b, getLoc(), g, typeOf(getOperand()).getElementType()));
  return success();
}

//===----------------------------------------------------------------------===//
// Binary and ternary
//===----------------------------------------------------------------------===//

LogicalResult AddOp::buildGradients(OpBuilder &, ArrayRef<Value> resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  Value g = floatResultGrad(*this, resultGrads);
  if (!g)
    return noGradients(*this, operandGrads);
  operandGrads.append({g, g});
  return success();
}

LogicalResult SubOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  Value g = floatResultGrad(*this, resultGrads);
  if (!g)
    return noGradients(*this, operandGrads);
  operandGrads.append({g, neg(b, getLoc(), g)});
  return success();
}

LogicalResult MulOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  Value g = floatResultGrad(*this, resultGrads);
  if (!g)
    return noGradients(*this, operandGrads);
  Location loc = getLoc();
  operandGrads.append({mul(b, loc, g, getRhs()), mul(b, loc, g, getLhs())});
  return success();
}

LogicalResult DivOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  // d(l/r)/dl = 1/r, d(l/r)/dr = -l/r^2 = -y/r.
  Value g = floatResultGrad(*this, resultGrads);
  if (!g)
    return noGradients(*this, operandGrads);
  Location loc = getLoc();
  Value dl = div(b, loc, g, getRhs());
  Value dr = neg(b, loc, mul(b, loc, dl, getResult()));
  operandGrads.append({dl, dr});
  return success();
}

LogicalResult RemOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  // rem(l, r) = l - trunc(l / r) r, the quotient flat between its steps:
  // d/dl = 1, d/dr = -trunc(l / r) = -(l - y) / r (PyTorch's fmod
  // gradient).
  Value g = floatResultGrad(*this, resultGrads);
  if (!g)
    return noGradients(*this, operandGrads);
  Location loc = getLoc();
  Value quotient = div(b, loc, sub(b, loc, getLhs(), getResult()), getRhs());
  operandGrads.append({g, neg(b, loc, mul(b, loc, g, quotient))});
  return success();
}

namespace {
// max/min: the gradient goes to lhs where |direction|(lhs, rhs) holds (ties
// included), to rhs elsewhere.
LogicalResult chooserGradients(OpBuilder &b, Operation *op,
                               ArrayRef<Value> resultGrads,
                               SmallVectorImpl<Value> &operandGrads,
                               CompareDirection direction) {
  Value g = floatResultGrad(op, resultGrads);
  if (!g)
    return noGradients(op, operandGrads);
  Location loc = op->getLoc();
  Value lhs = op->getOperand(0), rhs = op->getOperand(1);
  Value zero = splatLike(b, loc, g, 0.0);
  Value toLhs = compare(b, loc, direction, lhs, rhs);
  operandGrads.append({select(b, loc, toLhs, g, zero), select(b, loc, toLhs, zero, g)});
  return success();
}
} // namespace

LogicalResult MaxOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  return chooserGradients(b, *this, resultGrads, operandGrads,
                          CompareDirection::ge);
}

LogicalResult MinOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  return chooserGradients(b, *this, resultGrads, operandGrads,
                          CompareDirection::le);
}

LogicalResult PowOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  // d(l^r)/dl = r l^(r-1); d(l^r)/dr = y ln(l), taken as 0 where l = 0.
  Value g = floatResultGrad(*this, resultGrads);
  if (!g)
    return noGradients(*this, operandGrads);
  Location loc = getLoc();
  Value lhs = getLhs(), rhs = getRhs(), y = getResult();
  Type type = lhs.getType();
  Value one = splatLike(b, loc, lhs, 1.0);
  Value powMinusOne = b.create<PowOp>(loc, type, lhs, sub(b, loc, rhs, one));
  Value dl = mul(b, loc, g, mul(b, loc, rhs, powMinusOne));
  Value isZero = compare(b, loc, CompareDirection::eq, lhs,
                         splatLike(b, loc, lhs, 0.0));
  Value safeLhs = select(b, loc, isZero, one, lhs);
  Value dr = mul(b, loc, g, mul(b, loc, y, b.create<LogOp>(loc, type, safeLhs)));
  operandGrads.append({dl, dr});
  return success();
}

LogicalResult CompareOp::buildGradients(OpBuilder &, ArrayRef<Value>,
                                        SmallVectorImpl<Value> &operandGrads) {
  return noGradients(*this, operandGrads);
}

LogicalResult SelectOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                       SmallVectorImpl<Value> &operandGrads) {
  Value g = floatResultGrad(*this, resultGrads);
  if (!g)
    return noGradients(*this, operandGrads);
  Location loc = getLoc();
  Value zero = splatLike(b, loc, g, 0.0);
  operandGrads.append({Value(), select(b, loc, getPred(), g, zero),
                       select(b, loc, getPred(), zero, g)});
  return success();
}

} // namespace kiln
