//===- GeluGradTest.cpp - kiln.gelu_grad's reference semantics ------------===//
//
// kiln.gelu_grad through kiln::Interpreter, both approximations, against
// two independent references:
//  - a direct double computation of dy * gelu'(x) written here from the
//    formulas of ir/KilnOps.td, arranged differently from
//    ir/ScalarSemantics.cpp (the erf form through erfc, the tanh form
//    through 1 / cosh^2);
//  - central finite differences of kiln.gelu itself, evaluated by the
//    interpreter in f64.
// Bounds: f64 within 1e-13 (relative to the terms' size); f32 computes in
// f32 step by step (about 20 roundings of terms at most ~1.2 |dy| in
// size); bf16 and f16 compute in f32 and round once, so they lie within
// half an ulp of their type of the exact value plus the f32 allowance.
//
//===----------------------------------------------------------------------===//

#include "ir/Interpreter.h"
#include "ir/KilnOps.h"
#include "tests/unit/AttentionText.h"
#include "tests/unit/CollectDiagnostics.h"
#include "tests/unit/TestSeed.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>

namespace {

using namespace mlir;
using namespace kiln;

// gelu'(x) in double, straight from the definitions.
double geluPrime(bool tanhForm, double x) {
  if (!tanhForm) {
    // Phi(x) + x phi(x).
    double cdf = 0.5 * std::erfc(-x / std::sqrt(2.0));
    double pdf = std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI);
    return cdf + x * pdf;
  }
  const double k = std::sqrt(2.0 / M_PI), c = 0.044715;
  double u = k * (x + c * x * x * x);
  double sech = 1.0 / std::cosh(u);
  return 0.5 * (1.0 + std::tanh(u)) +
         0.5 * x * sech * sech * k * (1.0 + 3.0 * c * x * x);
}

// The size of the terms gelu'(x) sums (what rounding errors scale with).
double termSize(double x) { return 1.0 + std::abs(x); }

class GeluGradReferenceTest : public ::testing::Test {
protected:
  GeluGradReferenceTest() {
    context.loadDialect<KilnDialect, func::FuncDialect>();
    handler = test::collectDiagnostics(context, diagnostics);
  }

  // @grad(%x, %dy) = kiln.gelu_grad; @gelu(%x) = kiln.gelu.
  ModuleOp parse(const char *form, const char *element, int64_t n) {
    std::string t = test::tensorType({n}, element);
    std::string src = std::string("func.func @grad(%x: ") + t + ", %dy: " + t +
                      ") -> " + t + " {\n  %r = kiln.gelu_grad " + form +
                      ", %x, %dy : " + t + "\n  return %r : " + t +
                      "\n}\nfunc.func @gelu(%x: " + t + ") -> " + t +
                      " {\n  %r = kiln.gelu " + form + ", %x : " + t +
                      "\n  return %r : " + t + "\n}\n";
    module = parseSourceString<ModuleOp>(src, &context, "gelu_grad.mlir");
    EXPECT_TRUE(module) << src << diagnostics;
    return module ? *module : ModuleOp();
  }

  HostTensor run(const char *name, ArrayRef<HostTensor> args) {
    auto f = module->lookupSymbol<func::FuncOp>(name);
    Interpreter interpreter;
    FailureOr<SmallVector<HostTensor>> r = interpreter.run(f, args);
    EXPECT_TRUE(succeeded(r)) << diagnostics;
    return succeeded(r) ? (*r)[0] : HostTensor();
  }

  // Random x on [-6, 6) (both tails and the minimum near -0.75) and dy on
  // [-2, 2), rounded to |dtype|, plus fixed points: 0, +-1e-3, the tails.
  void inputs(DType dtype, int64_t n, HostTensor &x, HostTensor &dy) {
    x = test::randomTensor(engine, dtype, {n}, -6, 6);
    dy = test::randomTensor(engine, dtype, {n}, -2, 2);
    const double fixed[] = {0.0, 1e-3, -1e-3, -0.75, 5.5, -5.5, 3.0, -3.0};
    for (int64_t i = 0; i < 8 && i < n; ++i)
      x[i] = roundTo(dtype, fixed[i]);
  }

  void checkDirect(const char *form, DType dtype) {
    SCOPED_TRACE(std::string(form) + " " + dtypeName(dtype));
    const int64_t n = 512;
    ASSERT_TRUE(parse(form, dtypeName(dtype), n));
    HostTensor x, dy;
    inputs(dtype, n, x, dy);
    HostTensor got = run("grad", {x, dy});
    ASSERT_EQ(got.dtype(), dtype);
    ASSERT_EQ(got.size(), n);
    bool tanhForm = std::string(form) == "tanh";
    for (int64_t i = 0; i < n; ++i) {
      double want = dy[i] * geluPrime(tanhForm, x[i]);
      double scale = std::abs(dy[i]) * termSize(x[i]);
      double bound = dtype == DType::f64 ? 1e-13 * scale
                                         : 4e-6 * scale; // f32 arithmetic
      if (dtype == DType::bf16 || dtype == DType::f16)
        bound += 0.5 * test::ulp(dtype, want);
      ASSERT_LE(std::abs(got[i] - want), bound)
          << "x = " << x[i] << ", dy = " << dy[i] << ": got " << got[i]
          << ", expected " << want;
    }
  }

  MLIRContext context;
  OwningOpRef<ModuleOp> module;
  std::string diagnostics;
  std::unique_ptr<ScopedDiagnosticHandler> handler;
  std::mt19937_64 engine{test::announcedSeed("KILN_REFERENCE_SEED")};
};

TEST_F(GeluGradReferenceTest, MatchesTheDirectComputation) {
  for (const char *form : {"erf", "tanh"})
    for (DType dtype : {DType::f64, DType::f32, DType::bf16, DType::f16})
      checkDirect(form, dtype);
}

// In f64, gelu_grad(x, 1) is the slope of kiln.gelu: central differences
// with h = 1e-5 (truncation ~h^2 |gelu'''| / 6, cancellation ~1e-16 / h).
TEST_F(GeluGradReferenceTest, MatchesFiniteDifferencesOfGelu) {
  for (const char *form : {"erf", "tanh"}) {
    SCOPED_TRACE(form);
    const int64_t n = 256;
    ASSERT_TRUE(parse(form, "f64", n));
    HostTensor x, dy;
    inputs(DType::f64, n, x, dy);
    const double h = 1e-5;
    HostTensor plus = x, minus = x;
    for (int64_t i = 0; i < n; ++i) {
      plus[i] = x[i] + h;
      minus[i] = x[i] - h;
    }
    HostTensor gPlus = run("gelu", {plus}), gMinus = run("gelu", {minus});
    HostTensor got = run("grad", {x, dy});
    ASSERT_EQ(got.size(), n);
    for (int64_t i = 0; i < n; ++i) {
      double slope = (gPlus[i] - gMinus[i]) / (plus[i] - minus[i]);
      ASSERT_NEAR(got[i], dy[i] * slope, 1e-8 * std::abs(dy[i]) * termSize(x[i]))
          << "x = " << x[i] << ", dy = " << dy[i];
    }
  }
}

// Exact points: gelu'(0) = 1/2 in both forms; far in the tails the slope
// is 1 (right) and 0 (left) to f32 precision.
TEST_F(GeluGradReferenceTest, KnownValues) {
  for (const char *form : {"erf", "tanh"}) {
    SCOPED_TRACE(form);
    ASSERT_TRUE(parse(form, "f32", 3));
    HostTensor x(DType::f32, {3}, {0.0, 12.0, -12.0});
    HostTensor dy(DType::f32, {3}, {3.0, -2.0, 5.0});
    HostTensor got = run("grad", {x, dy});
    ASSERT_EQ(got.size(), 3);
    EXPECT_EQ(got[0], 1.5);
    EXPECT_EQ(got[1], -2.0);
    EXPECT_NEAR(got[2], 0.0, 1e-20);
  }
}

// The verifier: float tensors only, one type for x, dy and the result.
TEST_F(GeluGradReferenceTest, BadOperandsAreRejected) {
  auto parseFails = [&](const std::string &body, const char *expected) {
    diagnostics.clear();
    std::string src = "func.func @f(%x: tensor<4xi32>, %y: tensor<4xf32>, "
                      "%z: tensor<2xf32>) {\n" + body + "\n  return\n}\n";
    OwningOpRef<ModuleOp> bad =
        parseSourceString<ModuleOp>(src, &context, "bad.mlir");
    EXPECT_FALSE(bad) << body;
    EXPECT_NE(diagnostics.find(expected), std::string::npos)
        << body << "\n" << diagnostics;
  };
  parseFails("  %r = kiln.gelu_grad tanh, %x, %x : tensor<4xi32>",
             "'kiln.gelu_grad' op operand #0 must be");
  parseFails("  %r = kiln.gelu_grad erf, %y, %z : tensor<4xf32>",
             "expects different type than prior uses");
  parseFails("  %r = \"kiln.gelu_grad\"(%y, %z) <{approximate = 1 "
             ": i32}> : (tensor<4xf32>, tensor<2xf32>) "
             "-> tensor<4xf32>",
             "'kiln.gelu_grad' op all non-scalar operands/results must have "
             "the same shape");
}

} // namespace
