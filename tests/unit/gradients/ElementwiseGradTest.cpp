//===- ElementwiseGradTest.cpp - gradients of elementwise ops -------------===//
//
// Every elementwise op's gradient against finite differences on random
// shapes (rank 0 to 3) and values in the op's smooth domain. Non-smooth ops
// (abs, relu, max, min) get inputs further from their kinks than the finite
// difference step; compare, stop_gradient and integer paths must give
// exactly zero.
//
//===----------------------------------------------------------------------===//

#include "tests/unit/gradients/GradientCheck.h"

#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <functional>

namespace kiln::gradtest {
namespace {

Shape anyShape(Random &r) { return r.shape(r.integer(0, 3)); }

// %y = kiln.<op> %x on values drawn by |values|.
Case unary(Random &r, const std::string &op,
           const std::function<HostTensor(const Shape &)> &values) {
  Shape s = anyShape(r);
  Case c;
  c.args = {{"x", values(s)}};
  c.body = "  %y = kiln." + op + " %x : " + tensorType(s);
  c.resultShape = s;
  return c;
}

#define UNARY_TEST(Name, op, lo, hi)                                         \
  TEST(ElementwiseGradient, Name) {                                          \
    trials([](Random &r) {                                                   \
      return unary(r, op, [&](const Shape &s) { return r.uniform(s, lo, hi); }); \
    });                                                                      \
  }

UNARY_TEST(Neg, "neg", -2.0, 2.0)
UNARY_TEST(Exp, "exp", -2.0, 2.0)
UNARY_TEST(Log, "log", 0.5, 3.0)
UNARY_TEST(Log1p, "log1p", -0.5, 2.0)
UNARY_TEST(Sqrt, "sqrt", 0.5, 3.0)
UNARY_TEST(Rsqrt, "rsqrt", 0.5, 3.0)
UNARY_TEST(Tanh, "tanh", -2.0, 2.0)
UNARY_TEST(Sigmoid, "sigmoid", -3.0, 3.0)
UNARY_TEST(Erf, "erf", -2.0, 2.0)
UNARY_TEST(Sin, "sin", -3.0, 3.0)
UNARY_TEST(Cos, "cos", -3.0, 3.0)
UNARY_TEST(Atan, "atan", -4.0, 4.0)

TEST(ElementwiseGradient, Abs) {
  trials([](Random &r) {
    return unary(r, "abs", [&](const Shape &s) { return r.awayFromZero(s, 0.05, 2.0); });
  });
}

TEST(ElementwiseGradient, Relu) {
  trials([](Random &r) {
    return unary(r, "relu", [&](const Shape &s) { return r.awayFromZero(s, 0.05, 2.0); });
  });
}

TEST(ElementwiseGradient, Reciprocal) {
  trials([](Random &r) {
    return unary(r, "reciprocal",
                 [&](const Shape &s) { return r.awayFromZero(s, 0.5, 2.0); });
  });
}

// kiln.gelu (x) or kiln.gelu_grad (x, dy) in |form|, erf or tanh: x in
// [-3, 3] and dy in [-2, 2].
Case gelu(Random &r, const std::string &op, const std::string &form) {
  Shape s = anyShape(r);
  Case c;
  c.args = {{"x", r.uniform(s, -3.0, 3.0)}};
  std::string operands = "%x";
  if (op == "gelu_grad") {
    c.args.push_back({"dy", r.uniform(s, -2.0, 2.0)});
    operands += ", %dy";
  }
  c.body = "  %y = kiln." + op + " " + form + ", " + operands + " : " +
           tensorType(s);
  c.resultShape = s;
  return c;
}

TEST(ElementwiseGradient, GeluErf) {
  trials([](Random &r) { return gelu(r, "gelu", "erf"); });
}

TEST(ElementwiseGradient, GeluTanh) {
  trials([](Random &r) { return gelu(r, "gelu", "tanh"); });
}

// gelu_grad(x, dy) = dy gelu'(x): its own gradient needs gelu''(x) for x
// and gelu'(x) for dy (a second-order use: the gradient of a gradient).
TEST(ElementwiseGradient, GeluGradErf) {
  trials([](Random &r) { return gelu(r, "gelu_grad", "erf"); });
}

TEST(ElementwiseGradient, GeluGradTanh) {
  trials([](Random &r) { return gelu(r, "gelu_grad", "tanh"); });
}

TEST(ElementwiseGradient, StopGradient) {
  // stop_gradient is the identity going forward, so finite differences see
  // a slope; autodiff must see none.
  trials([](Random &r) {
    Case c = unary(r, "stop_gradient",
                   [&](const Shape &s) { return r.uniform(s, -2.0, 2.0); });
    c.expectZeroGradient = true;
    return c;
  });
}

TEST(ElementwiseGradient, FloorCeilRound) {
  // Flat between their steps: autodiff sees no slope, and neither do
  // finite differences at a quarter from an integer (and from a half).
  for (const char *op : {"floor", "ceil", "round"})
    trials([&](Random &r) {
      Case c = unary(r, op, [&](const Shape &s) {
        HostTensor x = r.uniform(s, -3.0, 3.0);
        for (double &v : x.values())
          v = std::floor(v) + (v - std::floor(v) < 0.5 ? 0.25 : 0.75);
        return x;
      });
      c.expectZeroGradient = true;
      return c;
    });
}

TEST(ElementwiseGradient, ConvertF32ToF64) {
  // Values and finite-difference steps are exact in f32 (multiples of
  // 2^-12), so the f32 parameter is perturbed without rounding.
  trials([](Random &r) {
    Shape s = anyShape(r);
    HostTensor x(DType::f32, s);
    for (double &v : x.values())
      v = static_cast<double>(r.integer(-8192, 8192)) / 4096.0;
    Case c;
    c.args = {{"x", x}};
    c.body = "  %y = kiln.convert %x : " + tensorType(s, "f32") + " -> " +
             tensorType(s);
    c.resultShape = s;
    return c;
  });
}

// %y = kiln.<op> %a, %b with both operands parameters.
Case binary(Random &r, const std::string &op, const HostTensor &a,
            const HostTensor &b) {
  Case c;
  c.args = {{"a", a}, {"b", b}};
  c.body = "  %y = kiln." + op + " %a, %b : " + tensorType(a);
  c.resultShape = Shape(a.shape().begin(), a.shape().end());
  return c;
}

TEST(ElementwiseGradient, Add) {
  trials([](Random &r) {
    Shape s = anyShape(r);
    return binary(r, "add", r.uniform(s, -2, 2), r.uniform(s, -2, 2));
  });
}

TEST(ElementwiseGradient, Sub) {
  trials([](Random &r) {
    Shape s = anyShape(r);
    return binary(r, "sub", r.uniform(s, -2, 2), r.uniform(s, -2, 2));
  });
}

TEST(ElementwiseGradient, Mul) {
  trials([](Random &r) {
    Shape s = anyShape(r);
    return binary(r, "mul", r.uniform(s, -2, 2), r.uniform(s, -2, 2));
  });
}

TEST(ElementwiseGradient, Div) {
  trials([](Random &r) {
    Shape s = anyShape(r);
    return binary(r, "div", r.uniform(s, -2, 2), r.awayFromZero(s, 0.5, 2.0));
  });
}

// Quotients x / y at least 0.2 from an integer: no step of trunc(x / y)
// within the finite differences' reach.
TEST(ElementwiseGradient, Rem) {
  trials([](Random &r) {
    Shape s = anyShape(r);
    HostTensor y = r.awayFromZero(s, 0.5, 2.0);
    HostTensor whole = r.uniform(s, -3.0, 3.0), part = r.uniform(s, 0.2, 0.8);
    HostTensor x = y;
    for (int64_t i = 0; i < x.size(); ++i)
      x[i] = (std::floor(whole[i]) + part[i]) * y[i];
    return binary(r, "rem", x, y);
  });
}

TEST(ElementwiseGradient, Pow) {
  trials([](Random &r) {
    Shape s = anyShape(r);
    return binary(r, "pow", r.uniform(s, 0.5, 2.0), r.uniform(s, -2.0, 2.0));
  });
}

// Operands at least 0.05 apart: no ties within the step.
std::pair<HostTensor, HostTensor> separated(Random &r, const Shape &s) {
  HostTensor a = r.uniform(s, -2.0, 2.0);
  HostTensor b = a;
  HostTensor offset = r.awayFromZero(s, 0.05, 1.0);
  for (int64_t i = 0; i < b.size(); ++i)
    b[i] += offset[i];
  return {a, b};
}

TEST(ElementwiseGradient, Max) {
  trials([](Random &r) {
    auto [a, b] = separated(r, anyShape(r));
    return binary(r, "max", a, b);
  });
}

TEST(ElementwiseGradient, Min) {
  trials([](Random &r) {
    auto [a, b] = separated(r, anyShape(r));
    return binary(r, "min", a, b);
  });
}

TEST(ElementwiseGradient, Select) {
  trials([](Random &r) {
    Shape s = anyShape(r);
    Case c;
    c.args = {{"p", r.bools(s), /*parameter=*/false},
              {"a", r.uniform(s, -2, 2)},
              {"b", r.uniform(s, -2, 2)}};
    c.body = "  %y = kiln.select %p, %a, %b : " + tensorType(s, "i1") + ", " +
             tensorType(s);
    c.resultShape = s;
    return c;
  });
}

TEST(ElementwiseGradient, Compare) {
  // The i1 result carries no gradient: f is piecewise constant.
  trials([](Random &r) {
    Shape s = anyShape(r);
    auto [a, b] = separated(r, s);
    Case c;
    c.args = {{"a", a}, {"b", b}};
    c.body = "  %p = kiln.compare lt, %a, %b : " + tensorType(s) +
             "\n  %y = kiln.convert %p : " + tensorType(s, "i1") + " -> " +
             tensorType(s);
    c.resultShape = s;
    c.expectZeroGradient = true;
    return c;
  });
}

TEST(ElementwiseGradient, CompareHasZeroSlope) {
  // The same function, checked against finite differences: zero both ways.
  trials([](Random &r) {
    Shape s = anyShape(r);
    auto [a, b] = separated(r, s);
    Case c;
    c.args = {{"a", a}, {"b", b}};
    c.body = "  %p = kiln.compare ge, %a, %b : " + tensorType(s) +
             "\n  %y = kiln.convert %p : " + tensorType(s, "i1") + " -> " +
             tensorType(s);
    c.resultShape = s;
    return c;
  });
}

TEST(ElementwiseGradient, ConstantAndIota) {
  // Constants and iota have no operands; the parameter's gradient passes
  // through the add and mul around them.
  trials([](Random &r) {
    Shape s = r.shape(r.integer(1, 3));
    int64_t dim = r.integer(0, static_cast<int64_t>(s.size()) - 1);
    double k = r.uniform(-2.0, 2.0);
    std::string t = tensorType(s);
    Case c;
    c.args = {{"x", r.uniform(s, -2, 2)}};
    c.body = "  %i = kiln.iota dim = " + std::to_string(dim) + " : " + t +
             "\n  %k = kiln.constant dense<" + std::to_string(k) + "> : " + t +
             "\n  %s = kiln.add %x, %i : " + t + "\n  %y = kiln.mul %s, %k : " + t;
    c.resultShape = s;
    return c;
  });
}

TEST(ElementwiseGradient, FanOutAccumulates) {
  // x feeds three ops; its gradient is the sum of three contributions.
  trials([](Random &r) {
    Shape s = anyShape(r);
    std::string t = tensorType(s);
    Case c;
    c.args = {{"x", r.uniform(s, -2, 2)}};
    c.body = "  %a = kiln.mul %x, %x : " + t + "\n  %b = kiln.sin %x : " + t +
             "\n  %c = kiln.add %a, %b : " + t + "\n  %y = kiln.mul %c, %x : " + t;
    c.resultShape = s;
    return c;
  });
}

} // namespace
} // namespace kiln::gradtest

namespace kiln::gradtest {
namespace {

TEST(GradientHarness, DetectsAWrongGradient) {
  // stop_gradient's zero gradient disagrees with the finite differences of
  // the identity it computes: the harness must report it.
  Random r(testSeed());
  Case c;
  Shape s = {2, 2};
  c.args = {{"x", r.uniform(s, -2, 2)}};
  c.body = "  %y = kiln.stop_gradient %x : " + tensorType(s);
  c.resultShape = s;
  ::testing::TestPartResultArray failures;
  {
    ::testing::ScopedFakeTestPartResultReporter reporter(
        ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD,
        &failures);
    check(c, r);
  }
  ASSERT_EQ(failures.size(), 4) << "one failure per element of x";
  for (int i = 0; i < failures.size(); ++i)
    EXPECT_NE(std::string(failures.GetTestPartResult(i).message())
                  .find("finite differences"),
              std::string::npos);
}

} // namespace
} // namespace kiln::gradtest
