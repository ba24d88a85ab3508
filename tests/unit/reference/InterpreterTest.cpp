//===- InterpreterTest.cpp - reference semantics through the interpreter --===//
//
// What the lit tests (argument-free functions folded by kiln-test-interpret)
// cannot reach: functions with host-tensor arguments, operands that do not
// match an op's types at run time (reported on the op, never asserted),
// value-dependent errors with their source location, and the speed of the
// contraction loops on an MLP-sized matmul.
//
//===----------------------------------------------------------------------===//

#include "tests/unit/TestSeed.h"

#include "ir/Interpreter.h"
#include "ir/KilnOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <random>

namespace {

using namespace mlir;
using namespace kiln;
using ::testing::HasSubstr;

class InterpreterTest : public ::testing::Test {
protected:
  InterpreterTest() {
    context.loadDialect<KilnDialect, func::FuncDialect>();
    handler = std::make_unique<ScopedDiagnosticHandler>(&context, [this](Diagnostic &d) {
      std::string text;
      llvm::raw_string_ostream os(text);
      os << d.getLocation() << ": " << d;
      diagnostics.push_back(os.str());
      return success();
    });
  }

  func::FuncOp parse(const char *source, const char *name = "f") {
    module = parseSourceString<ModuleOp>(source, &context, "test.mlir");
    EXPECT_TRUE(module) << "the test module does not parse";
    return module ? module->lookupSymbol<func::FuncOp>(name) : func::FuncOp();
  }

  std::string allDiagnostics() const {
    std::string all;
    for (const std::string &d : diagnostics)
      all += d + "\n";
    return all;
  }

  MLIRContext context;
  OwningOpRef<ModuleOp> module;
  std::vector<std::string> diagnostics;
  std::unique_ptr<ScopedDiagnosticHandler> handler;
};

// An MLP layer's matmul: every 37th output against a direct double sum,
// and well under a second of interpretation (a few tens of milliseconds
// when the loops run on contiguous rows; seconds when they do not).
TEST_F(InterpreterTest, MatmulOfAnMlpLayerIsRightAndFast) {
  func::FuncOp f = parse(R"mlir(
    func.func @f(%a: tensor<128x784xf32>, %b: tensor<784x512xf32>) -> tensor<128x512xf32> {
      %c = kiln.dot_general %a, %b, batch = [] x [], contract = [1] x [0]
             : (tensor<128x784xf32>, tensor<784x512xf32>) -> tensor<128x512xf32>
      return %c : tensor<128x512xf32>
    })mlir");
  ASSERT_TRUE(f);
  std::mt19937_64 gen(test::announcedSeed("KILN_REFERENCE_SEED"));
  std::uniform_real_distribution<double> dist(-1, 1);
  HostTensor a(DType::f32, {128, 784}), b(DType::f32, {784, 512});
  for (double &v : a.values())
    v = roundTo(DType::f32, dist(gen));
  for (double &v : b.values())
    v = roundTo(DType::f32, dist(gen));

  Interpreter interpreter;
  auto start = std::chrono::steady_clock::now();
  FailureOr<SmallVector<HostTensor>> results = interpreter.run(f, {a, b});
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(succeeded(results)) << allDiagnostics();
  const HostTensor &c = (*results)[0];
  ASSERT_EQ(c.dtype(), DType::f32);
  ASSERT_THAT(c.shape(), ::testing::ElementsAre(128, 512));
  for (int64_t idx = 0; idx < c.size(); idx += 37) {
    int64_t i = idx / 512, j = idx % 512;
    double sum = 0;
    for (int64_t k = 0; k < 784; ++k)
      sum += a[i * 784 + k] * b[k * 512 + j];
    ASSERT_EQ(c[idx], roundTo(DType::f32, sum)) << "at [" << i << ", " << j << "]";
  }
  std::printf("128x784 x 784x512 f32 matmul: %.3f s\n", seconds);
  // The bound leaves room for a loaded machine; the loops take ~0.05 s.
  EXPECT_LT(seconds, 2.0);
}

// Dropout's counter is a run-time operand: the same counter gives the same
// mask, another counter another one.
TEST_F(InterpreterTest, DropoutMaskFollowsTheCounterArgument) {
  func::FuncOp f = parse(R"mlir(
    func.func @f(%x: tensor<1024xf32>, %step: tensor<i64>) -> tensor<1024xf32> {
      %y = kiln.dropout %x, %step, rate = 2.500000e-01, seed = 5 : tensor<1024xf32>
      return %y : tensor<1024xf32>
    })mlir");
  ASSERT_TRUE(f);
  HostTensor x(DType::f32, {1024}, 3.0);
  Interpreter interpreter;
  auto run = [&](double step) {
    FailureOr<SmallVector<HostTensor>> r =
        interpreter.run(f, {x, HostTensor(DType::i64, {}, step)});
    EXPECT_TRUE(succeeded(r)) << allDiagnostics();
    return succeeded(r) ? (*r)[0].values() : std::vector<double>();
  };
  std::vector<double> first = run(10), again = run(10), other = run(11);
  EXPECT_EQ(first, again);
  EXPECT_NE(first, other);
  int kept = 0;
  for (double v : first) {
    ASSERT_TRUE(v == 0.0 || v == 4.0) << v; // 3 / (1 - 0.25)
    kept += v != 0.0;
  }
  EXPECT_NEAR(kept / 1024.0, 0.75, 0.07);
}

// onResults sees each op of the block with its operands and results, in
// order, and the ops after it read what it leaves there.
TEST_F(InterpreterTest, OnResultsSeesEachOpAndLaterOpsReadItsChanges) {
  func::FuncOp f = parse(R"mlir(
    func.func @f(%x: tensor<3xf32>) -> tensor<3xf32> {
      %e = kiln.exp %x : tensor<3xf32>
      %c = kiln.constant dense<1.000000e+00> : tensor<3xf32>
      %y = kiln.add %e, %c : tensor<3xf32>
      return %y : tensor<3xf32>
    })mlir");
  ASSERT_TRUE(f);
  HostTensor x(DType::f32, {3}, {0.0, 1.0, -1.0});
  Interpreter interpreter;
  std::vector<std::string> seen;
  interpreter.onResults = [&](Operation *op, ArrayRef<HostTensor> operands,
                              MutableArrayRef<HostTensor> results) {
    seen.push_back(op->getName().getStringRef().str() + "/" +
                   std::to_string(operands.size()) + "/" +
                   std::to_string(results.size()));
    if (isa<ExpOp>(op)) {
      EXPECT_EQ(operands[0].values(), x.values());
      EXPECT_EQ(results[0][0], 1.0);
      results[0][1] = 10.0;
    }
  };
  FailureOr<SmallVector<HostTensor>> r = interpreter.run(f, {x});
  ASSERT_TRUE(succeeded(r)) << allDiagnostics();
  EXPECT_EQ(seen, (std::vector<std::string>{"kiln.exp/1/1", "kiln.constant/0/1",
                                            "kiln.add/2/1"}));
  EXPECT_EQ((*r)[0][0], 2.0);
  EXPECT_EQ((*r)[0][1], 11.0);
  EXPECT_NEAR((*r)[0][2], std::exp(-1.0) + 1.0, 1e-6);
}

// A value-dependent error names the op and points at its line.
TEST_F(InterpreterTest, GatherIndexOutOfRangeNamesOpAndLocation) {
  func::FuncOp f = parse(R"mlir(
    func.func @f(%t: tensor<4x2xf32>, %i: tensor<3xi64>) -> tensor<3x2xf32> {
      %g = kiln.gather %t, %i : (tensor<4x2xf32>, tensor<3xi64>) -> tensor<3x2xf32>
      return %g : tensor<3x2xf32>
    })mlir");
  ASSERT_TRUE(f);
  HostTensor table(DType::f32, {4, 2}, 1.0);
  HostTensor indices(DType::i64, {3}, std::vector<double>{0, 3, 4});
  Interpreter interpreter;
  EXPECT_TRUE(failed(interpreter.run(f, {table, indices})));
  EXPECT_THAT(allDiagnostics(),
              HasSubstr("loc(\"test.mlir\":3:12): 'kiln.gather' op index 4 at position [2] of "
                        "indices is out of range: the table has 4 rows, so indices "
                        "must lie in [0, 4)"));
}

// Handed host tensors that do not match its operand types, an op reports
// what it expected and what it got instead of reading out of bounds.
TEST_F(InterpreterTest, MismatchedOperandsAreReportedOnTheOp) {
  func::FuncOp f = parse(R"mlir(
    func.func @f(%a: tensor<2x3xf32>) -> tensor<3x2xf32> {
      %t = kiln.transpose %a, permutation = [1, 0] : tensor<2x3xf32> -> tensor<3x2xf32>
      return %t : tensor<3x2xf32>
    })mlir");
  ASSERT_TRUE(f);
  Operation *transpose = &f.getBody().front().front();
  Interpreter interpreter;
  SmallVector<HostTensor> results;

  HostTensor wrongShape(DType::f32, {3, 2});
  EXPECT_TRUE(failed(interpreter.evaluate(transpose, {wrongShape}, results)));
  EXPECT_THAT(allDiagnostics(),
              HasSubstr("loc(\"test.mlir\":3:12): 'kiln.transpose' op operand 0 must "
                        "be 'tensor<2x3xf32>', but the reference interpreter got "
                        "tensor<3x2xf32>"));

  diagnostics.clear();
  HostTensor wrongType(DType::f64, {2, 3});
  EXPECT_TRUE(failed(interpreter.evaluate(transpose, {wrongType}, results)));
  EXPECT_THAT(allDiagnostics(), HasSubstr("got tensor<2x3xf64>"));

  diagnostics.clear();
  EXPECT_TRUE(failed(interpreter.evaluate(transpose, {}, results)));
  EXPECT_THAT(allDiagnostics(),
              HasSubstr("'kiln.transpose' op takes 1 operands, but the reference "
                        "interpreter got 0"));
  EXPECT_TRUE(results.empty());
}

// Every non-elementwise op is evaluated through ReferenceEvaluable; a
// whole small network (conv, pool, matmul, loss) runs and gives a finite,
// positive loss.
TEST_F(InterpreterTest, SmallConvNetRuns) {
  func::FuncOp f = parse(R"mlir(
    func.func @f(%x: tensor<2x1x6x6xf32>, %w: tensor<3x1x3x3xf32>, %v: tensor<12x4xf32>,
                 %y: tensor<2xi32>) -> tensor<f32> {
      %c = kiln.conv2d %x, %w, strides = [1, 1], padding = [1, 1, 1, 1], dilation = [1, 1], groups = 1
             : (tensor<2x1x6x6xf32>, tensor<3x1x3x3xf32>) -> tensor<2x3x6x6xf32>
      %r = kiln.relu %c : tensor<2x3x6x6xf32>
      %p = kiln.max_pool2d %r, window = [3, 3], strides = [3, 3], padding = [0, 0, 0, 0]
             : tensor<2x3x6x6xf32> -> tensor<2x3x2x2xf32>
      %h = kiln.reshape %p : tensor<2x3x2x2xf32> -> tensor<2x12xf32>
      %l = kiln.dot_general %h, %v, batch = [] x [], contract = [1] x [0]
             : (tensor<2x12xf32>, tensor<12x4xf32>) -> tensor<2x4xf32>
      %e = kiln.softmax_cross_entropy %l, %y : (tensor<2x4xf32>, tensor<2xi32>) -> tensor<2xf32>
      %m = kiln.reduce mean %e, dims = [0] : tensor<2xf32> -> tensor<f32>
      return %m : tensor<f32>
    })mlir");
  ASSERT_TRUE(f);
  std::mt19937 gen(3);
  std::normal_distribution<double> dist;
  auto random = [&](ArrayRef<int64_t> shape) {
    HostTensor t(DType::f32, shape);
    for (double &v : t.values())
      v = roundTo(DType::f32, dist(gen));
    return t;
  };
  Interpreter interpreter;
  FailureOr<SmallVector<HostTensor>> r = interpreter.run(
      f, {random({2, 1, 6, 6}), random({3, 1, 3, 3}), random({12, 4}),
          HostTensor(DType::i32, {2}, std::vector<double>{1, 3})});
  ASSERT_TRUE(succeeded(r)) << allDiagnostics();
  double loss = (*r)[0][0];
  EXPECT_TRUE(std::isfinite(loss));
  EXPECT_GT(loss, 0.0);
}

} // namespace
