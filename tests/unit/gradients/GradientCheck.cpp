//===- GradientCheck.cpp - autodiff against finite differences ------------===//
//
// See GradientCheck.h. The checked function is written as MLIR text and
// parsed, so each case reads like the IR it tests; a private @fwd holds the
// same body returning the op's result for the finite differences.
//
//===----------------------------------------------------------------------===//

#include "tests/unit/gradients/GradientCheck.h"
#include "tests/unit/TestSeed.h"

#include "ir/Interpreter.h"
#include "ir/KilnDialect.h"
#include "ir/KilnOps.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <sstream>

namespace kiln::gradtest {

//===----------------------------------------------------------------------===//
// Random values
//===----------------------------------------------------------------------===//

int64_t Random::integer(int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(engine_);
}

double Random::uniform(double lo, double hi) {
  return std::uniform_real_distribution<double>(lo, hi)(engine_);
}

Shape Random::shape(int64_t rank, int64_t lo, int64_t hi) {
  Shape s;
  for (int64_t i = 0; i < rank; ++i)
    s.push_back(integer(lo, hi));
  return s;
}

std::vector<int64_t> Random::subset(int64_t n, int64_t lo, int64_t hi) {
  std::vector<int64_t> all = permutation(n);
  all.resize(integer(lo, std::min(hi, n)));
  std::sort(all.begin(), all.end());
  return all;
}

std::vector<int64_t> Random::permutation(int64_t n) {
  std::vector<int64_t> p(n);
  std::iota(p.begin(), p.end(), 0);
  std::shuffle(p.begin(), p.end(), engine_);
  return p;
}

HostTensor Random::uniform(const Shape &shape, double lo, double hi, DType dtype) {
  HostTensor t(dtype, shape);
  for (double &v : t.values())
    v = roundTo(dtype, uniform(lo, hi));
  return t;
}

HostTensor Random::awayFromZero(const Shape &shape, double lo, double hi) {
  HostTensor t(DType::f64, shape);
  for (double &v : t.values())
    v = (coin() ? 1.0 : -1.0) * uniform(lo, hi);
  return t;
}

HostTensor Random::distinct(const Shape &shape, double gap) {
  HostTensor t(DType::f64, shape);
  int64_t n = t.size();
  std::vector<int64_t> order = permutation(n);
  for (int64_t i = 0; i < n; ++i)
    t[i] = (static_cast<double>(order[i]) - 0.5 * n) * gap +
           uniform(-0.2 * gap, 0.2 * gap);
  return t;
}

HostTensor Random::indices(const Shape &shape, int64_t bound, DType dtype) {
  HostTensor t(dtype, shape);
  for (double &v : t.values())
    v = static_cast<double>(integer(0, bound - 1));
  return t;
}

HostTensor Random::bools(const Shape &shape) {
  HostTensor t(DType::i1, shape);
  for (double &v : t.values())
    v = coin() ? 1.0 : 0.0;
  return t;
}

std::string tensorType(const Shape &shape, const std::string &element) {
  std::string s = "tensor<";
  for (int64_t d : shape)
    s += std::to_string(d) + "x";
  return s + element + ">";
}

std::string tensorType(const HostTensor &tensor) {
  return tensorType(Shape(tensor.shape().begin(), tensor.shape().end()),
                    dtypeName(tensor.dtype()));
}

std::string list(const std::vector<int64_t> &values) {
  std::string s = "[";
  for (size_t i = 0; i < values.size(); ++i)
    s += (i ? ", " : "") + std::to_string(values[i]);
  return s + "]";
}

uint64_t testSeed() { return test::seedFrom("KILN_GRAD_SEED"); }

//===----------------------------------------------------------------------===//
// The check
//===----------------------------------------------------------------------===//

namespace {

constexpr double kTolerance = 1e-6;
// The denominator's floor: below it the check is absolute (1e-10), a margin
// over the finite differences' own rounding error (about 1e-11 for these
// cases), so a gradient element that happens to be tiny does not turn
// rounding noise into a relative error.
constexpr double kMagnitudeFloor = 1e-4;
constexpr int64_t kSamplesPerParameter = 20;

std::string moduleText(const Case &c) {
  std::string y = tensorType(c.resultShape);
  std::vector<int64_t> all(c.resultShape.size());
  std::iota(all.begin(), all.end(), 0);
  std::ostringstream os, plainArgs;
  os << "func.func @f(";
  for (size_t i = 0; i < c.args.size(); ++i) {
    const Arg &a = c.args[i];
    std::string sep = i ? ", " : "";
    os << sep << "%" << a.name << ": " << tensorType(a.value);
    plainArgs << sep << "%" << a.name << ": " << tensorType(a.value);
    if (a.parameter)
      os << " {kiln.role = #kiln.role<parameter>, kiln.init = "
            "#kiln.init<kind = zeros>, kiln.name = \""
         << a.name << "\"}";
    else
      os << " {kiln.role = #kiln.role<input>}";
  }
  os << (c.args.empty() ? "" : ", ") << "%gc_w: " << y
     << " {kiln.role = #kiln.role<input>}) -> (tensor<f64> {kiln.role = "
        "#kiln.role<loss>}) {\n"
     << c.body << "\n"
     << "  %gc_prod = kiln.mul %y, %gc_w : " << y << "\n"
     << "  %gc_loss = kiln.reduce sum %gc_prod, dims = " << list(all) << " : "
     << y << " -> tensor<f64>\n"
     << "  return %gc_loss : tensor<f64>\n}\n";
  os << "func.func private @fwd(" << plainArgs.str() << ") -> " << y << " {\n"
     << c.body << "\n  return %y : " << y << "\n}\n";
  return os.str();
}

// The largest power of two not above 1e-4 * max(1, |x|): x +- h and
// x +- h/2 stay exact for values with a few bits to spare (f32 cases).
// Small enough that (h / L)^4 is negligible for the shortest length scale L
// the cases have (layer_norm's sqrt(epsilon) >= 3e-3), large enough that
// rounding stays near 1e-11.
double stepFor(double x) {
  double target = 1e-4 * std::max(1.0, std::fabs(x));
  return std::ldexp(1.0, static_cast<int>(std::floor(std::log2(target))));
}

} // namespace

void check(const Case &c, Random &random) {
  std::string text = moduleText(c);
  SCOPED_TRACE("module:\n" + text);

  mlir::MLIRContext ctx;
  ctx.loadDialect<KilnDialect, mlir::func::FuncDialect>();
  std::string diagnostics;
  mlir::ScopedDiagnosticHandler handler(&ctx, [&](mlir::Diagnostic &d) {
    if (d.getSeverity() == mlir::DiagnosticSeverity::Error)
      diagnostics += d.str() + "\n";
    return mlir::success();
  });
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceString<mlir::ModuleOp>(text, mlir::ParserConfig(&ctx));
  ASSERT_TRUE(module) << "the case does not parse:\n" << diagnostics;
  mlir::PassManager pm(&ctx);
  pm.addPass(createKilnAutodiff());
  ASSERT_TRUE(mlir::succeeded(pm.run(*module)))
      << "kiln-autodiff failed:\n" << diagnostics;

  auto f = module->lookupSymbol<mlir::func::FuncOp>("f");
  auto fwd = module->lookupSymbol<mlir::func::FuncOp>("fwd");
  ASSERT_TRUE(f && fwd);

  std::vector<HostTensor> args;
  for (const Arg &a : c.args)
    args.push_back(a.value);
  HostTensor w = random.awayFromZero(c.resultShape, 0.5, 1.5);
  std::vector<HostTensor> fArgs = args;
  fArgs.push_back(w);

  Interpreter interpreter;
  auto results = interpreter.run(f, fArgs);
  ASSERT_TRUE(mlir::succeeded(results))
      << "interpreting the gradient function failed:\n" << diagnostics;

  size_t next = 1; // results: the loss, then one gradient per parameter
  int reported = 0;
  for (size_t p = 0; p < c.args.size(); ++p) {
    if (!c.args[p].parameter)
      continue;
    ASSERT_LT(next, results->size()) << "missing gradient of %" << c.args[p].name;
    const HostTensor &grad = (*results)[next++];
    ASSERT_EQ(grad.shape(), args[p].shape()) << "gradient of %" << c.args[p].name;

    if (c.expectZeroGradient) {
      for (int64_t i = 0; i < grad.size(); ++i)
        ASSERT_EQ(grad[i], 0.0) << "gradient of %" << c.args[p].name
                                << " must be zero, element " << i;
      continue;
    }

    std::vector<int64_t> sample(grad.size());
    std::iota(sample.begin(), sample.end(), 0);
    if (grad.size() > kSamplesPerParameter) {
      std::shuffle(sample.begin(), sample.end(), random.engine());
      sample.resize(kSamplesPerParameter);
    }
    for (int64_t i : sample) {
      double x0 = args[p][i];
      // The derivative along element i by central differences of step h.
      auto central = [&](double h) -> double {
        args[p][i] = x0 + h;
        auto plus = interpreter.run(fwd, args);
        args[p][i] = x0 - h;
        auto minus = interpreter.run(fwd, args);
        args[p][i] = x0;
        if (mlir::failed(plus) || mlir::failed(minus))
          return std::nan("");
        double sum = 0.0;
        for (int64_t k = 0; k < w.size(); ++k)
          sum += w[k] * ((*plus)[0][k] - (*minus)[0][k]);
        return sum / (2.0 * h);
      };
      double h = stepFor(x0);
      double estimate = (4.0 * central(h / 2) - central(h)) / 3.0;
      ASSERT_FALSE(std::isnan(estimate))
          << "interpreting the forward function failed:\n" << diagnostics;
      double analytic = grad[i];
      double denominator =
          std::max({std::fabs(analytic), std::fabs(estimate), kMagnitudeFloor});
      double error = std::fabs(analytic - estimate) / denominator;
      if (!(error < kTolerance) && reported++ < 5)
        ADD_FAILURE() << "gradient of %" << c.args[p].name << " element " << i
                      << " (value " << x0 << "): autodiff " << analytic
                      << ", finite differences " << estimate
                      << ", relative error " << error;
    }
  }
  EXPECT_EQ(next, results->size()) << "unexpected extra results";
}

} // namespace kiln::gradtest

namespace kiln::gradtest {

void trials(const std::function<Case(Random &)> &make, int count) {
  uint64_t seed = testSeed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (rerun with KILN_GRAD_SEED=" +
               std::to_string(seed) + ")");
  Random random(seed);
  for (int t = 0; t < count; ++t) {
    Case c = make(random);
    check(c, random);
    if (::testing::Test::HasFatalFailure())
      return;
  }
}

} // namespace kiln::gradtest
