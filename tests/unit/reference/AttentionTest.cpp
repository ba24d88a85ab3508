//===- AttentionTest.cpp - kiln.attention's reference semantics -----------===//
//
// kiln.attention and kiln.attention_grad through kiln::Interpreter against a
// direct double computation written here from the formulas of
// ir/KilnOps.td, organised differently from ir/reference/NN.cpp: the full
// [Tq, Tk] score matrix with -infinity at masked keys, a softmax normalised
// by its sum, lse as log(sum(exp(s))). Shapes have Tq != Tk both ways and
// Dv != D, with and without the causal mask, in f64, f32, bf16 and f16.
//
// Rounding: every result must be the double result rounded once to its
// type, so it lies within half a unit in the last place of the exact value
// (plus a 1e-13 allowance for the two double computations' own rounding).
// lse is f32 for f32, bf16 and f16 operands (f64 for f64): an lse rounded to
// bf16 on the way would miss that bound by far.
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

#include <algorithm>
#include <cmath>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace {

using namespace mlir;
using namespace kiln;

using Dims = test::AttentionDims;

// Half a unit in the last place of |x| in |dtype| (subnormals included).
double halfUlp(DType dtype, double x) { return 0.5 * test::ulp(dtype, x); }

// The direct computation, all in double, on one (batch, head).
struct Expected {
  std::vector<double> out, lse, dq, dk, dv;
};

Expected directAttention(const Dims &n, double scale, bool causal,
                         const HostTensor &q, const HostTensor &k,
                         const HostTensor &v, const HostTensor &dout,
                         const HostTensor &outGiven, const HostTensor &lseGiven) {
  Expected e;
  e.out.assign(n.b * n.h * n.tq * n.dv, 0);
  e.lse.assign(n.b * n.h * n.tq, 0);
  e.dq.assign(n.b * n.h * n.tq * n.d, 0);
  e.dk.assign(n.b * n.h * n.tk * n.d, 0);
  e.dv.assign(n.b * n.h * n.tk * n.dv, 0);
  for (int64_t bh = 0; bh < n.b * n.h; ++bh) {
    auto Q = [&](int64_t i, int64_t x) { return q[(bh * n.tq + i) * n.d + x]; };
    auto K = [&](int64_t j, int64_t x) { return k[(bh * n.tk + j) * n.d + x]; };
    auto V = [&](int64_t j, int64_t x) { return v[(bh * n.tk + j) * n.dv + x]; };
    auto G = [&](int64_t i, int64_t x) { return dout[(bh * n.tq + i) * n.dv + x]; };
    // Scores with -inf at masked keys.
    std::vector<std::vector<double>> s(n.tq, std::vector<double>(n.tk));
    for (int64_t i = 0; i < n.tq; ++i)
      for (int64_t j = 0; j < n.tk; ++j) {
        double dot = 0;
        for (int64_t x = 0; x < n.d; ++x)
          dot += Q(i, x) * K(j, x);
        s[i][j] = (causal && j > i) ? -INFINITY : scale * dot;
      }
    for (int64_t i = 0; i < n.tq; ++i) {
      double sum = 0;
      for (int64_t j = 0; j < n.tk; ++j)
        sum += std::exp(s[i][j]);
      e.lse[bh * n.tq + i] = std::log(sum);
      for (int64_t x = 0; x < n.dv; ++x) {
        double acc = 0;
        for (int64_t j = 0; j < n.tk; ++j)
          acc += std::exp(s[i][j]) / sum * V(j, x);
        e.out[(bh * n.tq + i) * n.dv + x] = acc;
      }
    }
    // The backward pass from the operands it is given: p from the given
    // lse, D from the given out.
    for (int64_t i = 0; i < n.tq; ++i) {
      double rowD = 0;
      for (int64_t x = 0; x < n.dv; ++x)
        rowD += G(i, x) * outGiven[(bh * n.tq + i) * n.dv + x];
      for (int64_t j = 0; j < n.tk; ++j) {
        double p = std::exp(s[i][j] - lseGiven[bh * n.tq + i]);
        double dp = 0;
        for (int64_t x = 0; x < n.dv; ++x)
          dp += G(i, x) * V(j, x);
        double ds = p * (dp - rowD);
        for (int64_t x = 0; x < n.d; ++x) {
          e.dq[(bh * n.tq + i) * n.d + x] += scale * ds * K(j, x);
          e.dk[(bh * n.tk + j) * n.d + x] += scale * ds * Q(i, x);
        }
        for (int64_t x = 0; x < n.dv; ++x)
          e.dv[(bh * n.tk + j) * n.dv + x] += p * G(i, x);
      }
    }
  }
  return e;
}

class AttentionReferenceTest : public ::testing::Test {
protected:
  AttentionReferenceTest() {
    context.loadDialect<KilnDialect, func::FuncDialect>();
    handler = test::collectDiagnostics(context, diagnostics);
  }

  // attention then attention_grad of its results, returning all five.
  func::FuncOp parse(const Dims &n, const char *element, double scale,
                     bool causal) {
    std::string src = test::attentionFunction(n, element, scale, causal);
    module = parseSourceString<ModuleOp>(src, &context, "attention.mlir");
    EXPECT_TRUE(module) << src << diagnosticsText();
    return module ? module->lookupSymbol<func::FuncOp>("f") : func::FuncOp();
  }

  std::string diagnosticsText() const { return diagnostics; }

  HostTensor random(DType dtype, std::vector<int64_t> shape, double lo,
                    double hi) {
    return test::randomTensor(engine, dtype, std::move(shape), lo, hi);
  }

  // Runs one case and compares every element of the five results.
  void check(const Dims &n, DType dtype, double scale, bool causal) {
    SCOPED_TRACE(std::string(dtypeName(dtype)) + (causal ? " causal" : "") +
                 " B=" + std::to_string(n.b) + " H=" + std::to_string(n.h) +
                 " Tq=" + std::to_string(n.tq) + " Tk=" + std::to_string(n.tk) +
                 " D=" + std::to_string(n.d) + " Dv=" + std::to_string(n.dv));
    func::FuncOp f = parse(n, dtypeName(dtype), scale, causal);
    ASSERT_TRUE(f);
    HostTensor q = random(dtype, {n.b, n.h, n.tq, n.d}, -2, 2);
    HostTensor k = random(dtype, {n.b, n.h, n.tk, n.d}, -2, 2);
    HostTensor v = random(dtype, {n.b, n.h, n.tk, n.dv}, -2, 2);
    HostTensor g = random(dtype, {n.b, n.h, n.tq, n.dv}, -1, 1);
    Interpreter interpreter;
    FailureOr<SmallVector<HostTensor>> r = interpreter.run(f, {q, k, v, g});
    ASSERT_TRUE(succeeded(r)) << diagnosticsText();
    const HostTensor &out = (*r)[0], &lse = (*r)[1];
    DType lseType = dtype == DType::f64 ? DType::f64 : DType::f32;
    ASSERT_EQ(out.dtype(), dtype);
    ASSERT_EQ(lse.dtype(), lseType);
    Expected e = directAttention(n, scale, causal, q, k, v, g, out, lse);

    auto compare = [&](const char *what, const HostTensor &got,
                       const std::vector<double> &want, DType type) {
      ASSERT_EQ(got.dtype(), type) << what;
      ASSERT_EQ(got.size(), static_cast<int64_t>(want.size())) << what;
      for (int64_t i = 0; i < got.size(); ++i)
        ASSERT_LE(std::abs(got[i] - want[i]),
                  halfUlp(type, want[i]) * (1 + 1e-9) + 1e-13)
            << what << "[" << i << "]: got " << got[i] << ", expected "
            << want[i] << " rounded once to " << dtypeName(type);
    };
    compare("out", out, e.out, dtype);
    compare("lse", lse, e.lse, lseType);
    compare("dq", (*r)[2], e.dq, dtype);
    compare("dk", (*r)[3], e.dk, dtype);
    compare("dv", (*r)[4], e.dv, dtype);

    if (causal) {
      // Query 0 sees key 0 only: its output is v's first row, exactly
      // (after rounding); keys past the last query get no gradient.
      for (int64_t bh = 0; bh < n.b * n.h; ++bh)
        for (int64_t x = 0; x < n.dv; ++x)
          ASSERT_EQ(out[bh * n.tq * n.dv + x], v[bh * n.tk * n.dv + x]);
      for (int64_t bh = 0; bh < n.b * n.h; ++bh)
        for (int64_t j = n.tq; j < n.tk; ++j)
          for (int64_t x = 0; x < n.d; ++x)
            ASSERT_EQ((*r)[3][(bh * n.tk + j) * n.d + x], 0.0);
    }
  }

  MLIRContext context;
  OwningOpRef<ModuleOp> module;
  std::string diagnostics;
  std::unique_ptr<ScopedDiagnosticHandler> handler;
  std::mt19937_64 engine{test::announcedSeed("KILN_REFERENCE_SEED")};
};

TEST_F(AttentionReferenceTest, F64MatchesTheDirectComputation) {
  for (bool causal : {false, true}) {
    check({2, 3, 5, 7, 4, 6}, DType::f64, 0.5, causal);
    check({1, 2, 6, 3, 8, 2}, DType::f64, 0.35, causal);
  }
}

TEST_F(AttentionReferenceTest, F32RoundsOnce) {
  for (bool causal : {false, true}) {
    check({2, 2, 5, 7, 4, 6}, DType::f32, 0.5, causal);
    check({1, 3, 6, 3, 8, 2}, DType::f32, 1.0 / std::sqrt(8.0), causal);
  }
}

TEST_F(AttentionReferenceTest, Bf16RoundsOnceWithAnF32Lse) {
  for (bool causal : {false, true}) {
    check({2, 2, 5, 7, 4, 6}, DType::bf16, 0.5, causal);
    check({1, 3, 6, 3, 8, 2}, DType::bf16, 0.25, causal);
  }
}

TEST_F(AttentionReferenceTest, F16RoundsOnceWithAnF32Lse) {
  check({1, 2, 4, 9, 4, 3}, DType::f16, 0.5, true);
  check({1, 2, 9, 4, 4, 3}, DType::f16, 0.5, false);
}

// A causal row whose scores are far from 0 (large logits): the maximum is
// subtracted first, so nothing overflows, and lse is still log(sum(exp)).
TEST_F(AttentionReferenceTest, LargeScoresDoNotOverflow) {
  func::FuncOp f = parse({1, 1, 2, 2, 1, 1}, "f64", 1.0, true);
  ASSERT_TRUE(f);
  HostTensor q(DType::f64, {1, 1, 2, 1}, {1.0, 1.0});
  HostTensor k(DType::f64, {1, 1, 2, 1}, {1000.0, 1001.0});
  HostTensor v(DType::f64, {1, 1, 2, 1}, {2.0, 4.0});
  HostTensor g(DType::f64, {1, 1, 2, 1}, {1.0, 1.0});
  Interpreter interpreter;
  FailureOr<SmallVector<HostTensor>> r = interpreter.run(f, {q, k, v, g});
  ASSERT_TRUE(succeeded(r)) << diagnosticsText();
  const HostTensor &out = (*r)[0], &lse = (*r)[1];
  EXPECT_EQ(out[0], 2.0);
  EXPECT_EQ(lse[0], 1000.0);
  double p1 = 1.0 / (1.0 + std::exp(-1.0)); // weight of key 1 for query 1
  // exp(s - lse) with s and lse near 1000 loses about 1000 ulp of 1.
  EXPECT_NEAR(out[1], 2.0 * (1 - p1) + 4.0 * p1, 1e-12);
  EXPECT_NEAR(lse[1], 1001.0 + std::log1p(std::exp(-1.0)), 1e-12);
}

} // namespace
