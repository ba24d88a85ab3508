//===- OnnxImportActivations.cpp - elementwise activations ----------------===//
//
// The importer's activations (OnnxImporter.h): the unary ONNX ops, each as
// the kiln op of the same name or a few elementwise kiln ops (compare and
// select for the piecewise ones, Sign, IsNaN and IsInf), and Clip and
// PRelu, whose bounds and slope are inputs.
//
//===----------------------------------------------------------------------===//

#include "tools/kiln/lib/OnnxImporter.h"

#include <limits>

namespace kiln::cli::onnx_import {

bool Importer::unary(const std::string &op) {
  mlir::Value x;
  if (!value(0, x))
    return false;
  mlir::Location l = loc();
  mlir::Type t = x.getType();
  mlir::Value y;
  if (op == "Relu")
    y = b_.create<kiln::ReluOp>(l, t, x);
  else if (op == "Tanh")
    y = b_.create<kiln::TanhOp>(l, t, x);
  else if (op == "Sigmoid")
    y = b_.create<kiln::SigmoidOp>(l, t, x);
  else if (op == "Exp")
    y = b_.create<kiln::ExpOp>(l, t, x);
  else if (op == "Log")
    y = b_.create<kiln::LogOp>(l, t, x);
  else if (op == "Neg")
    y = b_.create<kiln::NegOp>(l, t, x);
  else if (op == "Abs")
    y = b_.create<kiln::AbsOp>(l, t, x);
  else if (op == "Sqrt")
    y = b_.create<kiln::SqrtOp>(l, t, x);
  else if (op == "Reciprocal")
    y = b_.create<kiln::ReciprocalOp>(l, t, x);
  else if (op == "Erf")
    y = b_.create<kiln::ErfOp>(l, t, x);
  else if (op == "Sin")
    y = b_.create<kiln::SinOp>(l, t, x);
  else if (op == "Cos")
    y = b_.create<kiln::CosOp>(l, t, x);
  else if (op == "Atan")
    y = b_.create<kiln::AtanOp>(l, t, x);
  else if (op == "Floor" || op == "Ceil" || op == "Round") {
    if (!mlir::isa<mlir::FloatType>(element(x)))
      return fail("the input is not a float tensor (" + op +
                  " takes FLOAT, DOUBLE, FLOAT16 or BFLOAT16)");
    if (op == "Floor")
      y = b_.create<kiln::FloorOp>(l, t, x);
    else if (op == "Ceil")
      y = b_.create<kiln::CeilOp>(l, t, x);
    else
      y = b_.create<kiln::RoundOp>(l, t, x); // halves to even, as ONNX asks
  } else if (op == "Sign") {
    // 1 above 0, -1 below, else x itself (0, or NaN for a float NaN).
    mlir::Type predicate = type(shape(x), b_.getI1Type());
    mlir::Value zero = splat(0.0, element(x), shape(x));
    mlir::Value above = b_.create<kiln::CompareOp>(
        loc(".above"), predicate, kiln::CompareDirection::gt, x, zero);
    mlir::Value below = b_.create<kiln::CompareOp>(
        loc(".below"), predicate, kiln::CompareDirection::lt, x, zero);
    y = b_.create<kiln::SelectOp>(
        l, t, above, splat(1.0, element(x), shape(x)),
        b_.create<kiln::SelectOp>(loc(".below"), t, below,
                                  splat(-1.0, element(x), shape(x)), x));
  } else if (op == "IsNaN" || op == "IsInf") {
    if (!mlir::isa<mlir::FloatType>(element(x)))
      return fail("the input is not a float tensor (" + op +
                  " takes FLOAT, DOUBLE, FLOAT16 or BFLOAT16)");
    mlir::Type predicate = type(shape(x), b_.getI1Type());
    if (op == "IsNaN") {
      // The one value that differs from itself.
      y = b_.create<kiln::CompareOp>(l, predicate, kiln::CompareDirection::ne,
                                     x, x);
    } else {
      bool positive = intAttr("detect_positive", 1) != 0;
      bool negative = intAttr("detect_negative", 1) != 0;
      double inf = std::numeric_limits<double>::infinity();
      auto equals = [&](double v, const std::string &at) -> mlir::Value {
        return b_.create<kiln::CompareOp>(loc(at), predicate,
                                          kiln::CompareDirection::eq, x,
                                          splat(v, element(x), shape(x)));
      };
      if (positive && negative)
        y = b_.create<kiln::CompareOp>(
            l, predicate, kiln::CompareDirection::eq,
            b_.create<kiln::AbsOp>(loc(".abs"), t, x),
            splat(inf, element(x), shape(x)));
      else if (positive || negative)
        y = equals(positive ? inf : -inf, "");
      else // neither asked for: all false
        y = b_.create<kiln::CompareOp>(l, predicate, kiln::CompareDirection::ne,
                                       splat(0.0, element(x), shape(x)),
                                       splat(0.0, element(x), shape(x)));
    }
  } else if (op == "Gelu") {
    std::string approximate = stringAttr("approximate", "none");
    if (approximate != "none" && approximate != "tanh")
      return fail("approximate is '" + approximate + "': expected none or tanh");
    y = b_.create<kiln::GeluOp>(l, t,
                                approximate == "tanh" ? kiln::GeluApproximation::tanh
                                                      : kiln::GeluApproximation::erf,
                                x);
  } else if (op == "LeakyRelu") {
    // x if x > 0, else alpha * x.
    double alpha = floatAttr("alpha", 0.01);
    mlir::Value scaled = b_.create<kiln::MulOp>(
        loc(".scaled"), t, x, splat(alpha, element(x), shape(x)));
    y = positiveElse(x, scaled, l);
  } else if (op == "HardSigmoid" || op == "HardSwish") {
    // max(0, min(1, alpha * x + beta)); HardSwish is x times that with
    // alpha 1/6 and beta 1/2.
    bool swish = op == "HardSwish";
    double alpha = swish ? 1.0 / 6.0 : floatAttr("alpha", 0.2);
    double beta = swish ? 0.5 : floatAttr("beta", 0.5);
    mlir::Value scaled = b_.create<kiln::MulOp>(loc(".scaled"), t, x,
                                                splat(alpha, element(x), shape(x)));
    mlir::Value shifted = b_.create<kiln::AddOp>(loc(".shifted"), t, scaled,
                                                 splat(beta, element(x), shape(x)));
    mlir::Value upper = b_.create<kiln::MinOp>(loc(".upper"), t, shifted,
                                               splat(1.0, element(x), shape(x)));
    y = b_.create<kiln::MaxOp>(swish ? loc(".gate") : l, t, upper,
                               splat(0.0, element(x), shape(x)));
    if (swish)
      y = b_.create<kiln::MulOp>(l, t, x, y);
  } else if (op == "Softplus" || op == "Mish") {
    // log(1 + exp(x)) as max(x, 0) + log1p(exp(-|x|)), which neither
    // overflows nor loses the small values; Mish is x * tanh(softplus(x)).
    mlir::Value zero = splat(0.0, element(x), shape(x));
    mlir::Value positive = b_.create<kiln::MaxOp>(loc(".positive"), t, x, zero);
    mlir::Value magnitude = b_.create<kiln::AbsOp>(loc(".abs"), t, x);
    mlir::Value decay = b_.create<kiln::ExpOp>(
        loc(".exp"), t, b_.create<kiln::NegOp>(loc(".neg"), t, magnitude));
    mlir::Value tail = b_.create<kiln::Log1pOp>(loc(".log1p"), t, decay);
    y = b_.create<kiln::AddOp>(op == "Mish" ? loc(".softplus") : l, t, positive, tail);
    if (op == "Mish")
      y = b_.create<kiln::MulOp>(l, t, x, b_.create<kiln::TanhOp>(loc(".tanh"), t, y));
  } else if (op == "Swish") {
    // x * sigmoid(alpha * x) (opset 24; SiLU for alpha 1).
    double alpha = floatAttr("alpha", 1.0);
    mlir::Value scaled =
        alpha == 1.0f
            ? x
            : b_.create<kiln::MulOp>(loc(".scaled"), t, x,
                                     splat(alpha, element(x), shape(x)))
                  .getResult();
    y = b_.create<kiln::MulOp>(
        l, t, x, b_.create<kiln::SigmoidOp>(loc(".sigmoid"), t, scaled));
  } else if (op == "Elu") {
    // x if x > 0, else alpha * (exp(x) - 1).
    double alpha = floatAttr("alpha", 1.0);
    mlir::Value decay = b_.create<kiln::SubOp>(loc(".expm1"), t,
                                               b_.create<kiln::ExpOp>(loc(".exp"), t, x),
                                               splat(1.0, element(x), shape(x)));
    mlir::Value scaled = b_.create<kiln::MulOp>(
        loc(".scaled"), t, decay, splat(alpha, element(x), shape(x)));
    y = positiveElse(x, scaled, l);
  } else if (op == "Selu" || op == "Celu") {
    // Selu: gamma * (x if x > 0 else alpha * (exp(x) - 1)); Celu: max(0, x)
    // + min(0, alpha * (exp(x / alpha) - 1)).
    bool selu = op == "Selu";
    // SELU's constants (Klambauer et al.; PyTorch's) in double: ONNX's
    // defaults and the exporters' attributes are their f32 roundings, which
    // an f64 model would otherwise compute with.
    const double seluAlpha = 1.6732632423543772848,
                 seluGamma = 1.0507009873554804934;
    double alpha = floatAttr("alpha", selu ? seluAlpha : 1.0);
    double gamma = floatAttr("gamma", seluGamma);
    if (selu && static_cast<float>(alpha) == static_cast<float>(seluAlpha))
      alpha = seluAlpha;
    if (selu && static_cast<float>(gamma) == static_cast<float>(seluGamma))
      gamma = seluGamma;
    mlir::Value zero = splat(0.0, element(x), shape(x));
    mlir::Value inner = selu ? x
                             : b_.create<kiln::DivOp>(loc(".scaled_input"), t, x,
                                                      splat(alpha, element(x), shape(x)))
                                   .getResult();
    mlir::Value decay = b_.create<kiln::MulOp>(
        loc(".decay"), t,
        b_.create<kiln::SubOp>(loc(".expm1"), t, b_.create<kiln::ExpOp>(loc(".exp"), t, inner),
                               splat(1.0, element(x), shape(x))),
        splat(alpha, element(x), shape(x)));
    if (selu) {
      y = b_.create<kiln::MulOp>(l, t, positiveElse(x, decay, loc(".select")),
                                 splat(gamma, element(x), shape(x)));
    } else {
      y = b_.create<kiln::AddOp>(l, t, b_.create<kiln::MaxOp>(loc(".positive"), t, x, zero),
                                 b_.create<kiln::MinOp>(loc(".negative"), t, decay, zero));
    }
  } else if (op == "ThresholdedRelu" || op == "Shrink") {
    // ThresholdedRelu: x where x > alpha, else 0. Shrink: x - bias where
    // x > lambd, x + bias where x < -lambd, else 0 (PyTorch's hardshrink,
    // bias 0, and softshrink, bias lambd).
    mlir::Value zero = splat(0.0, element(x), shape(x));
    mlir::Type predicate = type(shape(x), b_.getI1Type());
    if (op == "ThresholdedRelu") {
      mlir::Value above = b_.create<kiln::CompareOp>(
          loc(".above"), predicate, kiln::CompareDirection::gt, x,
          splat(floatAttr("alpha", 1.0), element(x), shape(x)));
      y = b_.create<kiln::SelectOp>(l, t, above, x, zero);
    } else {
      double lambd = floatAttr("lambd", 0.5), bias = floatAttr("bias", 0.0);
      mlir::Value above = b_.create<kiln::CompareOp>(
          loc(".above"), predicate, kiln::CompareDirection::gt, x,
          splat(lambd, element(x), shape(x)));
      mlir::Value below = b_.create<kiln::CompareOp>(
          loc(".below"), predicate, kiln::CompareDirection::lt, x,
          splat(-lambd, element(x), shape(x)));
      mlir::Value lowered = b_.create<kiln::SubOp>(loc(".lowered"), t, x,
                                                   splat(bias, element(x), shape(x)));
      mlir::Value raised = b_.create<kiln::AddOp>(loc(".raised"), t, x,
                                                  splat(bias, element(x), shape(x)));
      y = b_.create<kiln::SelectOp>(
          l, t, above, lowered,
          b_.create<kiln::SelectOp>(loc(".low"), t, below, raised, zero));
    }
  } else if (op == "Tan" || op == "Asin" || op == "Acos" || op == "Sinh" ||
             op == "Cosh" || op == "Asinh" || op == "Acosh" || op == "Atanh") {
    if (!mlir::isa<mlir::FloatType>(element(x)))
      return fail("the input is not a float tensor (" + op +
                  " takes FLOAT, DOUBLE, FLOAT16 or BFLOAT16)");
    y = hyperbolic(op, x);
  } else if (op == "Softsign") {
    // x / (1 + |x|).
    mlir::Value denominator = b_.create<kiln::AddOp>(
        loc(".denominator"), t, b_.create<kiln::AbsOp>(loc(".abs"), t, x),
        splat(1.0, element(x), shape(x)));
    y = b_.create<kiln::DivOp>(l, t, x, denominator);
  } else {
    // Identity.
    y = x;
  }
  setOutput(0, y);
  return true;
}

// Clip: min and max are inputs 1 and 2 from opset 11 (each optional, a
// static scalar), attributes before.
bool Importer::clip() {
  mlir::Value x;
  if (!value(0, x))
    return false;
  std::optional<double> low, high;
  // Bounds computed from data (torch.clamp with tensor bounds): one
  // element, broadcast; the gradient reaches the bound where it binds.
  mlir::Value lowValue, highValue;
  if (opset_ >= 11) {
    for (size_t i : {1, 2}) {
      if (!hasInput(i))
        continue;
      std::string what = i == 1 ? "min" : "max";
      if (!statics_.count(node_->inputs[i])) {
        mlir::Value bound;
        if (!value(i, bound))
          return false;
        if (product(shape(bound)) != 1 || element(bound) != element(x))
          return fail(what + " is " + shapeText(shape(bound)) +
                      ": expected one element of X's type");
        (i == 1 ? lowValue : highValue) = g_.broadcast(
            nodeName_ + "." + what + "_broadcast",
            g_.reshape(nodeName_ + "." + what, bound, {}), {}, shape(x));
        continue;
      }
      const Static *s = staticInput(i);
      if (!s)
        return false;
      if (s->values.size() != 1)
        return fail(what + " is not a scalar");
      (i == 1 ? low : high) = s->values[0];
    }
  } else {
    if (const onnx::Attribute *a = node_->attribute("min"))
      low = decimalOf(a->f);
    if (const onnx::Attribute *a = node_->attribute("max"))
      high = decimalOf(a->f);
  }
  mlir::Type t = x.getType();
  if (low)
    lowValue = splat(*low, element(x), shape(x));
  if (high)
    highValue = splat(*high, element(x), shape(x));
  mlir::Value y = x;
  if (lowValue)
    y = b_.create<kiln::MaxOp>(highValue ? loc(".min") : loc(), t, y, lowValue);
  if (highValue)
    y = b_.create<kiln::MinOp>(loc(), t, y, highValue);
  setOutput(0, y);
  return true;
}

// PRelu: x if x > 0, else slope * x, the slope (a parameter in PyTorch's
// export, [C, 1, 1] for channels) broadcast to X.
bool Importer::prelu() {
  mlir::Value x, slope;
  if (!value(0, x) || !value(1, slope))
    return false;
  llvm::SmallVector<int64_t> dims;
  if (!broadcastShapes(shape(x), shape(slope), dims))
    return false;
  if (dims != shape(x))
    return fail("slope " + shapeText(shape(slope)) + " does not broadcast to X " +
                shapeText(shape(x)));
  mlir::Value scaled = b_.create<kiln::MulOp>(loc(".scaled"), x.getType(), x,
                                              broadcastTo(slope, shape(x)));
  setOutput(0, positiveElse(x, scaled, loc()));
  return true;
}

// Tan, Asin and Acos, and the hyperbolic functions and their inverses, from
// kiln's elementwise ops in forms that keep their relative accuracy: no
// difference of nearly equal terms near 0 (sinh from tanh there; the
// inverses through log1p), no overflow before the true result overflows
// (e^(|x| - ln 2) for the halves of cosh and sinh, ln 2|x| for the inverse
// functions of large |x|). Where two forms split the range, each reads x
// only on its own side (the other side gets a harmless 1), so that the
// branch not taken has no infinite or NaN gradient to multiply by zero.
mlir::Value Importer::hyperbolic(const std::string &op, mlir::Value x) {
  mlir::Type t = x.getType(), e = element(x),
             flags = type(shape(x), b_.getI1Type());
  llvm::ArrayRef<int64_t> sx = shape(x);
  auto c = [&](double v) { return splat(v, e, sx); };
  auto unary = [&](auto tag, mlir::Value a,
                   const std::string &at) -> mlir::Value {
    return b_.create<decltype(tag)>(loc(at), t, a);
  };
  auto below = [&](mlir::Value a, double v,
                   const std::string &at) -> mlir::Value {
    return b_.create<kiln::CompareOp>(loc(at), flags,
                                      kiln::CompareDirection::lt, a, c(v));
  };
  auto select = [&](mlir::Value cond, mlir::Value a, mlir::Value b,
                    const std::string &at) -> mlir::Value {
    return b_.create<kiln::SelectOp>(loc(at), t, cond, a, b);
  };
  const double ln2 = 0.69314718055994531;
  if (op == "Tan")
    return div(unary(kiln::SinOp(), x, ".sin"), unary(kiln::CosOp(), x, ".cos"),
               "");
  if (op == "Asin") {
    // atan(x / sqrt((1 - x)(1 + x))): 1 - x and 1 + x are exact near 1 and
    // -1, where 1 - x^2 would lose the digits; at |x| = 1 the ratio is an
    // infinity and atan gives +-pi/2; past it the root is NaN.
    mlir::Value root = unary(kiln::SqrtOp(),
                             mul(sub(c(1.0), x, ".one_minus"),
                                 add(c(1.0), x, ".one_plus"), ".product"),
                             ".root");
    return unary(kiln::AtanOp(), div(x, root, ".ratio"), "");
  }
  if (op == "Acos")
    // 2 atan(sqrt((1 - x) / (1 + x))): small results near x = 1 keep their
    // relative accuracy (pi/2 - asin(x) would cancel); pi at x = -1.
    return mul(unary(kiln::AtanOp(),
                     unary(kiln::SqrtOp(),
                           div(sub(c(1.0), x, ".one_minus"),
                               add(c(1.0), x, ".one_plus"), ".ratio"),
                           ".root"),
                     ".atan"),
               c(2.0), "");
  mlir::Value ax = unary(kiln::AbsOp(), x, ".abs");
  // e^(|x| - ln 2) and e^(-|x| - ln 2): the halves of e^|x| and e^-|x|.
  auto halves = [&](mlir::Value a) {
    mlir::Value up = unary(kiln::ExpOp(), sub(a, c(ln2), ".up_arg"), ".up");
    mlir::Value down = unary(
        kiln::ExpOp(),
        sub(unary(kiln::NegOp(), a, ".neg_abs"), c(ln2), ".down_arg"), ".down");
    return std::make_pair(up, down);
  };
  if (op == "Cosh") {
    auto [up, down] = halves(ax);
    return add(up, down, "");
  }
  mlir::Value negative = below(x, 0.0, ".negative");
  auto withSign = [&](mlir::Value magnitude) {
    return select(negative, unary(kiln::NegOp(), magnitude, ".neg"), magnitude,
                  "");
  };
  if (op == "Sinh") {
    // |x| < 1: 2 tanh(|x|/2) / (1 - tanh(|x|/2)^2); else the halves'
    // difference.
    mlir::Value small = below(ax, 1.0, ".small");
    mlir::Value near = select(small, ax, c(1.0), ".near_arg");
    mlir::Value far = select(small, c(1.0), ax, ".far_arg");
    mlir::Value th = unary(kiln::TanhOp(), mul(near, c(0.5), ".half"), ".tanh");
    mlir::Value nearValue =
        div(mul(th, c(2.0), ".twice"),
            sub(c(1.0), mul(th, th, ".tanh_squared"), ".denominator"), ".near");
    auto [up, down] = halves(far);
    return withSign(
        select(small, nearValue, sub(up, down, ".far"), ".magnitude"));
  }
  if (op == "Atanh")
    // log1p(2x / (1 - x)) / 2.
    return mul(unary(kiln::Log1pOp(),
                     div(mul(x, c(2.0), ".twice"), sub(c(1.0), x, ".one_minus"),
                         ".ratio"),
                     ".log1p"),
               c(0.5), "");
  // Asinh and Acosh: ln 2|x| past 1e4 (their other terms are below f32's
  // precision there; for Acosh, x past 1e4); below it, log1p of what
  // exceeds 1.
  mlir::Value large = b_.create<kiln::CompareOp>(
      loc(".large"), flags, kiln::CompareDirection::gt, op == "Asinh" ? ax : x,
      c(1e4));
  mlir::Value moderate = select(large, c(1.0), ax, ".moderate_arg");
  mlir::Value asymptote =
      add(unary(kiln::LogOp(), select(large, ax, c(1.0), ".large_arg"), ".log"),
          c(ln2), ".asymptote");
  if (op == "Asinh") {
    // |x| + x^2 / (1 + sqrt(1 + x^2)), of which log1p.
    mlir::Value square = mul(moderate, moderate, ".square");
    mlir::Value root =
        unary(kiln::SqrtOp(), add(c(1.0), square, ".one_plus"), ".root");
    mlir::Value excess = add(
        moderate, div(square, add(c(1.0), root, ".denominator"), ".fraction"),
        ".excess");
    return withSign(select(large, asymptote,
                           unary(kiln::Log1pOp(), excess, ".log1p"),
                           ".magnitude"));
  }
  // Acosh (x >= 1; below it the root is NaN): (x - 1) + sqrt((x - 1)(x + 1)).
  mlir::Value m = select(large, c(1.0), x, ".moderate_arg_signed");
  mlir::Value less = sub(m, c(1.0), ".minus_one");
  mlir::Value excess =
      add(less,
          unary(kiln::SqrtOp(),
                mul(less, add(m, c(1.0), ".plus_one"), ".product"), ".root"),
          ".excess");
  return select(large, asymptote, unary(kiln::Log1pOp(), excess, ".log1p"), "");
}

mlir::Value Importer::positiveElse(mlir::Value x, mlir::Value otherwise,
                                   mlir::Location at) {
  mlir::Value positive = b_.create<kiln::CompareOp>(
      loc(".positive"), type(shape(x), b_.getI1Type()), kiln::CompareDirection::gt, x,
      splat(0.0, element(x), shape(x)));
  return b_.create<kiln::SelectOp>(at, x.getType(), positive, x, otherwise);
}

} // namespace kiln::cli::onnx_import
