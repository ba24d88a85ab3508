//===- LossScaleTest.cpp - fp16 dynamic loss scaling on the interpreter ---===//
//
// The compile pipeline with --amp=fp16 builds a training step with dynamic
// loss scaling (kiln-auto-mixed-precision, kiln-autodiff's scaled seed,
// kiln-apply-optimizer's unscale, check and update). The steps run on the
// reference interpreter, which rounds fp16 as stored, and are checked
// against the update computed here by hand: a finite step applies SGD with
// the unscaled gradient, an overflowing step (a huge input) keeps the
// parameter bit for bit, halves the scale and counts the skip, and 2000
// finite steps in a row double the scale.
//
//===----------------------------------------------------------------------===//

#include "ir/Interpreter.h"
#include "ir/KilnOps.h"
#include "passes/LossScale.h"
#include "passes/Pipelines.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>

namespace kiln {
namespace {

using namespace mlir;

// loss = mean(x . w) over a 2x2 result; dloss/dw[k][j] = (x[0][k] + x[1][k]) / 4.
constexpr const char *kModel = R"mlir(
module attributes {kiln.training = #kiln.training<optimizer = sgd, learning_rate = 5.000000e-01>} {
  func.func @main(%x: tensor<2x3xf32> {kiln.role = #kiln.role<input>, kiln.name = "x"},
                  %w: tensor<3x2xf32> {kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = zeros>, kiln.name = "w"})
      -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
    %d = kiln.dot_general %x, %w, batch = [] x [], contract = [1] x [0] : (tensor<2x3xf32>, tensor<3x2xf32>) -> tensor<2x2xf32>
    %l = kiln.reduce mean %d, dims = [0, 1] : tensor<2x2xf32> -> tensor<f32>
    return %l : tensor<f32>
  }
}
)mlir";

class LossScaleTest : public ::testing::Test {
protected:
  void SetUp() override {
    context.loadDialect<KilnDialect, func::FuncDialect>();
    module = parseSourceString<ModuleOp>(kModel, &context);
    ASSERT_TRUE(module);
    PipelineOptions options;
    options.amp = AmpMode::fp16;
    options.optimize = false;
    ASSERT_TRUE(succeeded(runCompilePipeline(*module, options)));
    func = module->lookupSymbol<func::FuncOp>("main");
    ASSERT_TRUE(func);
    for (unsigned i = 0; i < func.getNumArguments(); ++i) {
      auto name = func.getArgAttrOfType<StringAttr>(i, KilnDialect::kNameAttrName);
      ASSERT_TRUE(name) << "argument " << i << " has no name";
      argIndex[name.str()] = i;
      DType dtype;
      ASSERT_TRUE(dtypeOfTensor(func.getArgument(i).getType(), dtype));
      auto type = cast<RankedTensorType>(func.getArgument(i).getType());
      args.emplace_back(dtype, type.getShape());
    }
    for (const char *name : {"x", "w", "step", "loss_scale",
                             "loss_scale.good_steps", "loss_scale.skipped_steps"})
      ASSERT_TRUE(argIndex.count(name)) << "no argument '" << name << "'";
    // The scale starts at 2^16 by its initializer.
    auto init = func.getArgAttrOfType<InitializerAttr>(argIndex["loss_scale"],
                                                       KilnDialect::kInitAttrName);
    ASSERT_TRUE(init);
    EXPECT_EQ(init.getKind(), InitKind::constant);
    EXPECT_EQ(init.getValue().convertToDouble(), 65536.0);
    arg("loss_scale")[0] = 65536.0;
    std::vector<double> w = {0.5, -0.25, 1.0, 0.75, -1.5, 0.125};
    arg("w").values() = w;
  }

  HostTensor &arg(const std::string &name) { return args[argIndex.at(name)]; }

  // Runs one step and feeds every update back into its argument; returns
  // the loss.
  double step() {
    FailureOr<SmallVector<HostTensor>> results = interpreter.run(func, args);
    EXPECT_TRUE(succeeded(results));
    if (failed(results))
      return NAN;
    double loss = NAN;
    for (unsigned i = 0; i < func.getNumResults(); ++i) {
      auto updates = func.getResultAttrOfType<IntegerAttr>(i, KilnDialect::kUpdatesAttrName);
      if (updates)
        args[updates.getInt()] = (*results)[i];
      else
        loss = (*results)[i][0];
    }
    return loss;
  }

  MLIRContext context;
  OwningOpRef<ModuleOp> module;
  func::FuncOp func;
  std::map<std::string, unsigned> argIndex;
  SmallVector<HostTensor> args;
  Interpreter interpreter;
};

TEST_F(LossScaleTest, FiniteStepAppliesTheUnscaledGradient) {
  // Inputs exact in fp16, so the scaled gradients are exact too.
  std::vector<double> x = {0.5, 0.25, -0.5, 0.125, 1.0, 0.75};
  arg("x").values() = x;
  std::vector<double> w0 = arg("w").values();
  step();
  for (int k = 0; k < 3; ++k)
    for (int j = 0; j < 2; ++j) {
      double grad = (x[k] + x[3 + k]) / 4.0;
      float expected = static_cast<float>(w0[k * 2 + j]) -
                       static_cast<float>(0.5 * grad);
      EXPECT_EQ(arg("w")[k * 2 + j], expected) << "w[" << k << "][" << j << "]";
    }
  EXPECT_EQ(arg("loss_scale")[0], 65536.0);
  EXPECT_EQ(arg("loss_scale.good_steps")[0], 1.0);
  EXPECT_EQ(arg("loss_scale.skipped_steps")[0], 0.0);
  EXPECT_EQ(arg("step")[0], 1.0);
}

TEST_F(LossScaleTest, OverflowSkipsTheUpdateAndHalvesTheScale) {
  // 60000 fits fp16, but 60000 * 2^16 / 4 does not: the gradient is inf.
  arg("x").values() = {60000.0, 0.25, -0.5, 0.125, 1.0, 0.75};
  arg("loss_scale.good_steps")[0] = 7.0;
  std::vector<double> w0 = arg("w").values();
  step();
  EXPECT_EQ(arg("w").values(), w0);
  EXPECT_EQ(arg("loss_scale")[0], 32768.0);
  EXPECT_EQ(arg("loss_scale.good_steps")[0], 0.0);
  EXPECT_EQ(arg("loss_scale.skipped_steps")[0], 1.0);
  // The step counter advances on a skipped step (documented).
  EXPECT_EQ(arg("step")[0], 1.0);

  // A NaN gradient is skipped too, and the count goes on.
  arg("x").values() = {NAN, 0.25, -0.5, 0.125, 1.0, 0.75};
  step();
  EXPECT_EQ(arg("w").values(), w0);
  EXPECT_EQ(arg("loss_scale")[0], 16384.0);
  EXPECT_EQ(arg("loss_scale.skipped_steps")[0], 2.0);

  // Then a finite step applies the update again, unscaled by the new scale.
  std::vector<double> x = {0.5, 0.25, -0.5, 0.125, 1.0, 0.75};
  arg("x").values() = x;
  step();
  for (int k = 0; k < 3; ++k)
    for (int j = 0; j < 2; ++j) {
      double grad = (x[k] + x[3 + k]) / 4.0;
      EXPECT_EQ(arg("w")[k * 2 + j],
                static_cast<float>(w0[k * 2 + j]) - static_cast<float>(0.5 * grad));
    }
  EXPECT_EQ(arg("loss_scale")[0], 16384.0);
  EXPECT_EQ(arg("loss_scale.good_steps")[0], 1.0);
}

TEST_F(LossScaleTest, TwoThousandFiniteStepsDoubleTheScale) {
  arg("x").values() = {0.5, 0.25, -0.5, 0.125, 1.0, 0.75};
  for (int i = 1; i < 2000; ++i) {
    step();
    ASSERT_EQ(arg("loss_scale")[0], 65536.0) << "after step " << i;
    ASSERT_EQ(arg("loss_scale.good_steps")[0], i) << "after step " << i;
  }
  step();
  EXPECT_EQ(arg("loss_scale")[0], 131072.0);
  EXPECT_EQ(arg("loss_scale.good_steps")[0], 0.0);
  EXPECT_EQ(arg("loss_scale.skipped_steps")[0], 0.0);
  EXPECT_EQ(arg("step")[0], 2000.0);
}

} // namespace
} // namespace kiln
