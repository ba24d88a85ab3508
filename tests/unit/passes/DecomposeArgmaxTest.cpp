//===- DecomposeArgmaxTest.cpp - decomposed argmax vs the whole op --------===//
//
// kiln-decompose expands kiln.argmax (which no kernel model builds) into a
// max, compares, an iota, selects and a min. On data full of ties and with
// NaNs, the decomposed function run by the reference interpreter must give
// exactly the whole op's indices: the first maximum, or the first NaN.
//
//===----------------------------------------------------------------------===//

#include "tests/unit/CollectDiagnostics.h"

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

#include <cmath>
#include <random>

namespace {

using namespace mlir;
using namespace kiln;

TEST(DecomposeArgmaxTest, FirstMaximumOrFirstNanAlongEitherDimension) {
  MLIRContext context;
  context.loadDialect<KilnDialect, func::FuncDialect>();
  std::string diagnostics;
  auto handler = test::collectDiagnostics(context, diagnostics);
  const char *source = R"mlir(
func.func @main(%x: tensor<6x7xf32>) -> (tensor<6xi32>, tensor<7xi64>) {
  %rows = kiln.argmax %x, dim = 1 : tensor<6x7xf32> -> tensor<6xi32>
  %columns = kiln.argmax %x, dim = 0 : tensor<6x7xf32> -> tensor<7xi64>
  return %rows, %columns : tensor<6xi32>, tensor<7xi64>
}
)mlir";
  OwningOpRef<ModuleOp> whole = parseSourceString<ModuleOp>(source, &context, "argmax.mlir");
  ASSERT_TRUE(whole) << diagnostics;
  OwningOpRef<ModuleOp> decomposed = cast<ModuleOp>((*whole)->clone());
  PassManager pm(&context);
  pm.addPass(createKilnDecompose());
  ASSERT_TRUE(succeeded(pm.run(*decomposed))) << diagnostics;
  int argmaxes = 0;
  decomposed->walk([&](ArgmaxOp) { ++argmaxes; });
  EXPECT_EQ(argmaxes, 0);

  std::mt19937_64 engine(20261205);
  std::uniform_int_distribution<int> small(-2, 2);
  for (int trial = 0; trial < 20; ++trial) {
    SCOPED_TRACE("trial " + std::to_string(trial));
    // Values from five integers, so rows and columns tie often; NaNs in a
    // few places (two in row 2, one in row 4 and column 6).
    HostTensor x(DType::f32, {6, 7});
    for (int64_t i = 0; i < x.size(); ++i)
      x[i] = small(engine);
    if (trial % 2) {
      x[2 * 7 + 3] = std::nan("");
      x[2 * 7 + 5] = std::nan("");
      x[4 * 7 + 6] = std::nan("");
    }
    Interpreter a, b;
    auto want = a.run((*whole).lookupSymbol<func::FuncOp>("main"), {x});
    auto got = b.run((*decomposed).lookupSymbol<func::FuncOp>("main"), {x});
    ASSERT_TRUE(succeeded(want) && succeeded(got)) << diagnostics;
    for (size_t r = 0; r < 2; ++r)
      for (int64_t i = 0; i < (*want)[r].size(); ++i)
        EXPECT_EQ((*want)[r][i], (*got)[r][i]) << "result " << r << " element " << i;
    if (trial % 2) {
      EXPECT_EQ((*got)[0][2], 3) << "row 2's first NaN";
      EXPECT_EQ((*got)[1][6], 4) << "column 6's NaN";
    }
  }
}

} // namespace
