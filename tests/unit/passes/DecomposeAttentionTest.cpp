//===- DecomposeAttentionTest.cpp - decomposed attention vs the whole op --===//
//
// kiln-decompose expands kiln.attention and kiln.attention_grad into
// primitives computed in f32 (f64 for f64). On random data, the decomposed
// functions run by the reference interpreter must agree with the whole ops
// run by it: in f64 to 1e-12 (tests/lit/passes/decompose-attention.mlir
// checks bit equality on fixed data), in f32, bf16 and f16 to one unit in
// the last place of the result type plus what f32 intermediates lose
// (1e-5 relative). With attention=false the ops stay.
//
// Both versions of attention_grad get the whole forward's out and lse. Fed
// each its own forward's, they may differ by far more than that bound: an
// f16 out one unit apart moves rowsum(dout * out) by about 1e-3, and dq, a
// sum of terms near 1 that cancel to near 1e-3, moves by as much (one seed
// in a hundred found such a case).
//
//===----------------------------------------------------------------------===//

#include "tests/unit/AttentionText.h"
#include "tests/unit/CollectDiagnostics.h"
#include "tests/unit/TestSeed.h"

#include "ir/Interpreter.h"
#include "ir/KilnDialect.h"
#include "ir/KilnOps.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <sstream>
#include <string>

namespace {

using namespace mlir;
using namespace kiln;

using Dims = test::AttentionDims;
using test::tensorType;
using test::ulp;

class DecomposeAttentionTest : public ::testing::Test {
protected:
  DecomposeAttentionTest() {
    context.loadDialect<KilnDialect, func::FuncDialect>();
    handler = test::collectDiagnostics(context, diagnostics);
  }

  // @f: attention, then attention_grad of its results, returning all five;
  // @grad: attention_grad alone.
  OwningOpRef<ModuleOp> parse(const Dims &n, const char *element, double scale,
                              bool causal) {
    std::string src = test::attentionFunction(n, element, scale, causal) +
                      test::attentionGradFunction(n, element, scale, causal);
    OwningOpRef<ModuleOp> module =
        parseSourceString<ModuleOp>(src, &context, "attention.mlir");
    EXPECT_TRUE(module) << src << diagnostics;
    return module;
  }

  bool decompose(ModuleOp module, bool attention) {
    PassManager pm(&context);
    KilnDecomposeOptions options;
    options.attention = attention;
    pm.addPass(createKilnDecompose(options));
    return succeeded(pm.run(module));
  }

  static int count(ModuleOp module, StringRef name) {
    int n = 0;
    module.walk([&](Operation *op) { n += op->getName().getStringRef() == name; });
    return n;
  }

  HostTensor random(DType dtype, std::vector<int64_t> shape, double lo,
                    double hi) {
    return test::randomTensor(engine, dtype, std::move(shape), lo, hi);
  }

  void check(const Dims &n, DType dtype, double scale, bool causal) {
    SCOPED_TRACE(std::string(dtypeName(dtype)) + (causal ? " causal" : "") +
                 " Tq=" + std::to_string(n.tq) + " Tk=" + std::to_string(n.tk) +
                 " D=" + std::to_string(n.d) + " Dv=" + std::to_string(n.dv));
    OwningOpRef<ModuleOp> whole = parse(n, dtypeName(dtype), scale, causal);
    ASSERT_TRUE(whole);
    OwningOpRef<ModuleOp> parts(cast<ModuleOp>((*whole)->clone()));
    ASSERT_TRUE(decompose(*parts, /*attention=*/true)) << diagnostics;
    EXPECT_EQ(count(*parts, "kiln.attention"), 0);
    EXPECT_EQ(count(*parts, "kiln.attention_grad"), 0);
    // One mask in the forward, one in each of the two gradients.
    EXPECT_EQ(count(*parts, "kiln.select"), causal ? 3 : 0);

    std::vector<HostTensor> args = {random(dtype, {n.b, n.h, n.tq, n.d}, -2, 2),
                                    random(dtype, {n.b, n.h, n.tk, n.d}, -2, 2),
                                    random(dtype, {n.b, n.h, n.tk, n.dv}, -2, 2),
                                    random(dtype, {n.b, n.h, n.tq, n.dv}, -1, 1)};
    Interpreter interpreter;
    auto run = [&](ModuleOp m, StringRef name,
                   const std::vector<HostTensor> &operands) {
      return interpreter.run(m.lookupSymbol<func::FuncOp>(name), operands);
    };
    FailureOr<SmallVector<HostTensor>> want = run(*whole, "f", args),
                                       got = run(*parts, "f", args);
    ASSERT_TRUE(succeeded(want) && succeeded(got)) << diagnostics;
    expectClose(dtype, {(*got)[0], (*got)[1]}, {(*want)[0], (*want)[1]},
                {"out", "lse"});

    // q, k, v, the whole forward's out and lse, and the output's gradient.
    std::vector<HostTensor> gradArgs = {args[0],    args[1],    args[2],
                                        (*want)[0], (*want)[1], args[3]};
    FailureOr<SmallVector<HostTensor>> wantGrad = run(*whole, "grad", gradArgs),
                                       gotGrad = run(*parts, "grad", gradArgs);
    ASSERT_TRUE(succeeded(wantGrad) && succeeded(gotGrad)) << diagnostics;
    expectClose(dtype, *gotGrad, *wantGrad, {"dq", "dk", "dv"});
    // The decomposed @f wires its own forward into its gradient: its dq, dk
    // and dv are the decomposed @grad's of its out and lse.
    FailureOr<SmallVector<HostTensor>> chained =
        run(*parts, "grad",
            {args[0], args[1], args[2], (*got)[0], (*got)[1], args[3]});
    ASSERT_TRUE(succeeded(chained)) << diagnostics;
    expectClose(dtype, {(*got)[2], (*got)[3], (*got)[4]}, *chained,
                {"chained dq", "chained dk", "chained dv"});
  }

  // |got| within one unit in the last place of |want|'s type plus 1e-5
  // relative (1e-12 and no ulp in f64), element by element.
  static void expectClose(DType dtype, ArrayRef<HostTensor> got,
                          ArrayRef<HostTensor> want,
                          std::vector<const char *> names) {
    double relative = dtype == DType::f64 ? 1e-12 : 1e-5;
    double oneUlp = dtype == DType::f64 ? 0 : 1;
    for (size_t r = 0; r < got.size(); ++r) {
      const HostTensor &a = got[r], &b = want[r];
      ASSERT_EQ(a.dtype(), b.dtype()) << names[r];
      ASSERT_EQ(a.size(), b.size()) << names[r];
      for (int64_t i = 0; i < a.size(); ++i)
        ASSERT_LE(std::abs(a[i] - b[i]),
                  oneUlp * ulp(b.dtype(), b[i]) + relative * (1 + std::abs(b[i])))
            << names[r] << "[" << i << "]: decomposed " << a[i] << ", whole "
            << b[i];
    }
  }

  MLIRContext context;
  std::string diagnostics;
  std::unique_ptr<ScopedDiagnosticHandler> handler;
  std::mt19937_64 engine{test::announcedSeed("KILN_DECOMPOSE_SEED")};
};

TEST_F(DecomposeAttentionTest, MatchesTheWholeOps) {
  for (bool causal : {false, true}) {
    check({2, 2, 5, 7, 4, 3}, DType::f64, 0.5, causal);
    check({1, 3, 7, 4, 3, 5}, DType::f64, 0.3, causal);
    check({2, 2, 5, 7, 4, 3}, DType::f32, 0.5, causal);
    check({1, 3, 7, 4, 8, 5}, DType::f32, 1 / std::sqrt(8.0), causal);
    check({2, 2, 6, 6, 4, 4}, DType::bf16, 0.5, causal);
    check({1, 2, 7, 3, 4, 6}, DType::bf16, 0.5, causal);
    check({1, 2, 4, 6, 4, 3}, DType::f16, 0.5, causal);
  }
}

TEST_F(DecomposeAttentionTest, AttentionFalseKeepsTheOps) {
  OwningOpRef<ModuleOp> module = parse({1, 1, 2, 2, 2, 2}, "bf16", 0.5, true);
  ASSERT_TRUE(module);
  ASSERT_TRUE(decompose(*module, /*attention=*/false)) << diagnostics;
  EXPECT_EQ(count(*module, "kiln.attention"), 1);
  EXPECT_EQ(count(*module, "kiln.attention_grad"), 2); // @f and @grad
  EXPECT_EQ(count(*module, "kiln.dot_general"), 0);
}

} // namespace
