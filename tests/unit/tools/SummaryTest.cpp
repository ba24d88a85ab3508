//===- SummaryTest.cpp - what kiln inspect reports --------------------------===//
//
// The summary of hand-written modules: FLOPs summed through CostInterface
// (a fusion's body counted once, ops without a cost listed), parameter
// bytes by element type, names and roles, the histogram order.
//
//===----------------------------------------------------------------------===//

#include "tools/kiln/lib/ModuleLoader.h"
#include "tools/kiln/lib/Summary.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace kiln::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

class SummaryTest : public ::testing::Test {
protected:
  SummaryTest() {
    mlir::DialectRegistry registry;
    registerKilnDialects(registry);
    context.appendDialectRegistry(registry);
  }
  mlir::OwningOpRef<mlir::ModuleOp> parse(llvm::StringRef text) {
    return mlir::parseSourceString<mlir::ModuleOp>(text, &context);
  }
  mlir::MLIRContext context;
};

constexpr llvm::StringLiteral kModel = R"mlir(
module attributes {kiln.training = #kiln.training<optimizer = sgd, learning_rate = 1.0e-01>} {
  func.func @main(%x: tensor<4x8xf32> {kiln.role = #kiln.role<input>, kiln.name = "x"},
                  %y: tensor<4xi32> {kiln.role = #kiln.role<label>},
                  %w: tensor<8x3xf32> {kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = zeros>, kiln.name = "w"},
                  %s: tensor<3xbf16> {kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = ones>, kiln.name = "s"},
                  %m: tensor<5xi1> {kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = zeros>})
      -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
    %d = kiln.dot_general %x, %w, batch = [] x [], contract = [1] x [0] : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
    %e = kiln.fusion loop (%d, %d) : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32> {
    ^bb0(%a: tensor<4x3xf32>, %c: tensor<4x3xf32>):
      %t = kiln.add %a, %c : tensor<4x3xf32>
      %u = kiln.tanh %t : tensor<4x3xf32>
      kiln.yield %u : tensor<4x3xf32>
    }
    %f = kiln.exp %e : tensor<4x3xf32>
    %g = kiln.exp %f : tensor<4x3xf32>
    %l = kiln.softmax_cross_entropy %g, %y : (tensor<4x3xf32>, tensor<4xi32>) -> tensor<4xf32>
    %r = kiln.reduce mean %l, dims = [0] : tensor<4xf32> -> tensor<f32>
    return %r : tensor<f32>
  }
  func.func private @unused(%a: tensor<2xf32>) -> tensor<2xf32> {
    return %a : tensor<2xf32>
  }
}
)mlir";

TEST_F(SummaryTest, CountsFlopsParametersAndOps) {
  auto module = parse(kModel);
  ASSERT_TRUE(module);
  ModelSummary summary = summarizeModule(*module);
  ASSERT_EQ(summary.functions.size(), 1u) << "private functions are not models";
  const FunctionSummary &f = summary.functions.front();
  EXPECT_EQ(f.name, "main");

  // dot 2*4*3*8, fusion add + tanh 2*12, exp twice 2*12, cross-entropy 5*12,
  // mean 4.
  EXPECT_EQ(f.flops, 192 + 24 + 24 + 60 + 4);
  EXPECT_TRUE(f.uncosted.empty());

  // f32 4 bytes, bf16 2, i1 1 byte per element.
  EXPECT_EQ(f.parameterElements, 24 + 3 + 5);
  EXPECT_EQ(f.parameterBytes, 24 * 4 + 3 * 2 + 5 * 1);
  ASSERT_EQ(f.parameters.size(), 3u);
  EXPECT_EQ(f.parameters[1].dtype, "bf16");
  EXPECT_EQ(f.parameters[2].name, "arg4") << "unnamed arguments get arg<i>";

  ASSERT_EQ(f.inputs.size(), 2u);
  EXPECT_EQ(f.inputs[1].name, "arg1");
  EXPECT_EQ(f.inputs[1].role, "label");
  // The labels are read below the cross-entropy's 3 classes; floats have
  // no bound.
  EXPECT_EQ(f.inputs[1].indexBound, 3);
  EXPECT_EQ(f.inputs[0].indexBound, 0);
  EXPECT_EQ(f.outputs[0].name, "result0");
  EXPECT_EQ(f.outputs[0].role, "loss");

  // Nested ops count in the histogram; terminators do not.
  EXPECT_EQ(f.opCount, 8);
  EXPECT_THAT(f.histogram,
              ElementsAre(Pair("kiln.exp", 2), Pair("kiln.add", 1),
                          Pair("kiln.dot_general", 1), Pair("kiln.fusion", 1),
                          Pair("kiln.reduce", 1),
                          Pair("kiln.softmax_cross_entropy", 1),
                          Pair("kiln.tanh", 1)));
  EXPECT_THAT(summary.training, HasSubstr("optimizer = sgd"));
}

// An integer input's bound as kiln-mark-index-bounds sets it: from the
// uses, a smaller stated one kept, a stated one alone taken as it is; none
// for an integer nothing reads as indices. inspect prints it.
TEST_F(SummaryTest, IntegerInputsShowTheBoundTheyAreReadUnder) {
  auto module = parse(R"mlir(
    func.func @main(%t: tensor<4xi32> {kiln.role = #kiln.role<input>, kiln.name = "tokens"},
                    %u: tensor<4xi32> {kiln.role = #kiln.role<input>, kiln.index_bound = 6 : i64},
                    %v: tensor<4xi32> {kiln.role = #kiln.role<input>, kiln.index_bound = 7 : i64},
                    %n: tensor<4xi32> {kiln.role = #kiln.role<input>},
                    %e: tensor<9x2xf32> {kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = zeros>})
        -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
      %a = kiln.gather %e, %t : (tensor<9x2xf32>, tensor<4xi32>) -> tensor<4x2xf32>
      %b = kiln.gather %e, %u : (tensor<9x2xf32>, tensor<4xi32>) -> tensor<4x2xf32>
      %s = kiln.add %a, %b : tensor<4x2xf32>
      %r = kiln.reduce sum %s, dims = [0, 1] : tensor<4x2xf32> -> tensor<f32>
      return %r : tensor<f32>
    })mlir");
  ASSERT_TRUE(module);
  const FunctionSummary f = summarizeModule(*module).functions.front();
  ASSERT_EQ(f.inputs.size(), 4u);
  EXPECT_EQ(f.inputs[0].indexBound, 9);
  EXPECT_EQ(f.inputs[1].indexBound, 6);
  EXPECT_EQ(f.inputs[2].indexBound, 7);
  EXPECT_EQ(f.inputs[3].indexBound, 0);
  std::string text;
  llvm::raw_string_ostream os(text);
  printSummary(summarizeModule(*module), "m.mlir", os);
  EXPECT_THAT(text, HasSubstr("tokens  input      4      i32  indices below 9\n"));
  EXPECT_THAT(text, HasSubstr("arg3    input      4      i32\n"));
}

TEST_F(SummaryTest, OpsWithoutACostAreListed) {
  auto module = parse(R"mlir(
    func.func private @helper(%a: tensor<2xf32>) -> tensor<2xf32>
    func.func @main(%a: tensor<2xf32>) -> tensor<2xf32> {
      %b = kiln.neg %a : tensor<2xf32>
      %c = func.call @helper(%b) : (tensor<2xf32>) -> tensor<2xf32>
      return %c : tensor<2xf32>
    })mlir");
  ASSERT_TRUE(module);
  FunctionSummary f = summarizeModule(*module).functions.front();
  EXPECT_EQ(f.flops, 2);
  EXPECT_THAT(f.uncosted, ElementsAre("func.call"));
  EXPECT_EQ(f.inputs[0].role, "-");
}

TEST_F(SummaryTest, PrintsShapesAndDot) {
  EXPECT_EQ(formatShape({}), "scalar");
  EXPECT_EQ(formatShape({128, 784}), "128x784");

  auto module = parse(kModel);
  ASSERT_TRUE(module);
  std::string text;
  llvm::raw_string_ostream os(text);
  printSummary(summarizeModule(*module), "m.mlir", os);
  EXPECT_THAT(text, HasSubstr("FLOPs per forward step: 304\n"));
  EXPECT_THAT(text, HasSubstr("parameters: 3 tensors, 32 values, 107 bytes\n"));

  std::string dot;
  llvm::raw_string_ostream dotOs(dot);
  printDot(*module, dotOs);
  EXPECT_THAT(dot, HasSubstr("digraph kiln {"));
  EXPECT_THAT(dot, HasSubstr("f0_arg0 -> f0_op0;"));
  EXPECT_THAT(dot, HasSubstr("f0_op0 -> f0_op1;"));
  EXPECT_THAT(dot, ::testing::Not(HasSubstr("kiln.tanh")))
      << "a fusion is one node";
  EXPECT_THAT(dot, ::testing::Not(HasSubstr("unused")));
}

} // namespace
} // namespace kiln::cli
