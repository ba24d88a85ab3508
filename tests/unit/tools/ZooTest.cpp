//===- ZooTest.cpp - the model zoo's builders ------------------------------===//
//
// Each zoo model verifies, has the documented arguments, and has the
// parameter count and forward FLOPs computed here by hand from its sizes
// (independently of the builder and of kiln inspect).
//
//===----------------------------------------------------------------------===//

#include "tools/kiln/lib/Summary.h"
#include "tools/kiln/lib/Zoo.h"
#include "tools/kiln/lib/ModuleLoader.h"

#include "ir/KilnOps.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace kiln::cli {
namespace {

using ::testing::ElementsAre;

class ZooTest : public ::testing::Test {
protected:
  ZooTest() {
    mlir::DialectRegistry registry;
    registerKilnDialects(registry);
    context.appendDialectRegistry(registry);
    context.loadAllAvailableDialects();
  }

  // Summary of the one public function of |module|.
  static FunctionSummary summarize(mlir::ModuleOp module) {
    ModelSummary summary = summarizeModule(module);
    EXPECT_EQ(summary.functions.size(), 1u);
    return summary.functions.front();
  }

  static std::vector<std::string> names(const std::vector<TensorInfo> &tensors) {
    std::vector<std::string> out;
    for (const TensorInfo &t : tensors)
      out.push_back(t.name);
    return out;
  }

  mlir::MLIRContext context;
};

TEST_F(ZooTest, MlpDefaultSizes) {
  auto module = buildMlp(&context, MlpOptions{});
  ASSERT_TRUE(module);
  EXPECT_TRUE(mlir::succeeded(mlir::verify(*module)));
  FunctionSummary f = summarize(*module);

  // 784-512-256-10: weights in*out plus biases out.
  const int64_t params = 784 * 512 + 512 + 512 * 256 + 256 + 256 * 10 + 10;
  EXPECT_EQ(f.parameterElements, params);
  EXPECT_EQ(f.parameterBytes, 4 * params);
  EXPECT_THAT(names(f.parameters),
              ElementsAre("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias",
                          "fc3.weight", "fc3.bias"));
  EXPECT_THAT(f.parameters[0].shape, ElementsAre(784, 512));
  EXPECT_EQ(f.parameters[0].init, "uniform");

  ASSERT_EQ(f.inputs.size(), 2u);
  EXPECT_EQ(f.inputs[0].name, "x");
  EXPECT_EQ(f.inputs[0].role, "input");
  EXPECT_THAT(f.inputs[0].shape, ElementsAre(128, 784));
  EXPECT_EQ(f.inputs[1].name, "labels");
  EXPECT_EQ(f.inputs[1].role, "label");
  EXPECT_EQ(f.inputs[1].dtype, "i32");
  ASSERT_EQ(f.outputs.size(), 1u);
  EXPECT_EQ(f.outputs[0].role, "loss");
  EXPECT_TRUE(f.outputs[0].shape.empty());

  // Matmuls 2*B*sum(in*out); bias adds B*out per layer; ReLU B*out on the
  // hidden layers; cross-entropy 5 per logit; the mean one per example.
  const int64_t B = 128;
  const int64_t matmuls = 2 * B * (784 * 512 + 512 * 256 + 256 * 10);
  EXPECT_EQ(matmuls, 136970240);
  const int64_t elementwise =
      B * (512 + 256 + 10) + B * (512 + 256) + 5 * B * 10 + B;
  EXPECT_EQ(f.flops, matmuls + elementwise);
  EXPECT_TRUE(f.uncosted.empty());
}

TEST_F(ZooTest, MlpCustomLayersAndTraining) {
  MlpOptions options;
  options.layers = {20, 7, 5, 3};
  options.batch = 9;
  options.training.optimizer = OptimizerKind::sgd;
  options.training.learningRate = 0.5;
  options.training.seed = 100;
  auto module = buildMlp(&context, options);
  ASSERT_TRUE(module);
  FunctionSummary f = summarize(*module);
  EXPECT_EQ(f.parameterElements, 20 * 7 + 7 + 7 * 5 + 5 + 5 * 3 + 3);
  EXPECT_EQ(f.parameters.size(), 6u);

  auto training = (*module)->getAttrOfType<TrainingAttr>(
      KilnDialect::kTrainingAttrName);
  ASSERT_TRUE(training);
  EXPECT_EQ(training.getOptimizer(), OptimizerKind::sgd);
  EXPECT_EQ(training.getLearningRate().convertToDouble(), 0.5);

  // Seeds count up from the given one; bounds are 1/sqrt(fan_in).
  auto main = *(*module).getOps<mlir::func::FuncOp>().begin();
  auto init = main.getArgAttrOfType<InitializerAttr>(2, KilnDialect::kInitAttrName);
  ASSERT_TRUE(init);
  EXPECT_EQ(init.getSeed(), 100);
  EXPECT_DOUBLE_EQ(init.getScale().convertToDouble(), 1.0 / std::sqrt(20.0));
  auto last = main.getArgAttrOfType<InitializerAttr>(7, KilnDialect::kInitAttrName);
  ASSERT_TRUE(last);
  EXPECT_EQ(last.getSeed(), 105);
}

TEST_F(ZooTest, LeNet5) {
  LeNet5Options options;
  options.batch = 4;
  auto module = buildLeNet5(&context, options);
  ASSERT_TRUE(module);
  EXPECT_TRUE(mlir::succeeded(mlir::verify(*module)));
  FunctionSummary f = summarize(*module);

  // The classic 61,706 parameters.
  const int64_t params = (6 * 1 * 25 + 6) + (16 * 6 * 25 + 16) +
                         (400 * 120 + 120) + (120 * 84 + 84) + (84 * 10 + 10);
  EXPECT_EQ(params, 61706);
  EXPECT_EQ(f.parameterElements, params);
  EXPECT_THAT(names(f.parameters),
              ElementsAre("conv1.weight", "conv1.bias", "conv2.weight",
                          "conv2.bias", "fc1.weight", "fc1.bias", "fc2.weight",
                          "fc2.bias", "fc3.weight", "fc3.bias"));
  EXPECT_THAT(f.parameters[2].shape, ElementsAre(16, 6, 5, 5));
  EXPECT_THAT(f.inputs[0].shape, ElementsAre(4, 1, 28, 28));

  const int64_t B = 4;
  const int64_t conv1 = 2 * B * 6 * 28 * 28 * (1 * 5 * 5);
  const int64_t conv2 = 2 * B * 16 * 10 * 10 * (6 * 5 * 5);
  const int64_t biasRelu = 2 * B * (6 * 28 * 28 + 16 * 10 * 10);
  const int64_t pools = 4 * B * (6 * 14 * 14 + 16 * 5 * 5);
  const int64_t fcs = 2 * B * (400 * 120 + 120 * 84 + 84 * 10) +
                      2 * B * (120 + 84) + B * 10;
  const int64_t loss = 5 * B * 10 + B;
  EXPECT_EQ(f.flops, conv1 + conv2 + biasRelu + pools + fcs + loss);
}

// Parameters of a GPT with tied embeddings, from its sizes.
int64_t gptParameters(const GptOptions &o) {
  int64_t h = o.hidden;
  int64_t block = 2 * h                   // ln1
                  + h * 3 * h + 3 * h     // attn.qkv
                  + h * h + h             // attn.proj
                  + 2 * h                 // ln2
                  + h * 4 * h + 4 * h     // mlp.fc
                  + 4 * h * h + h;        // mlp.proj
  return o.vocab * h + o.seq * h + o.layers * block + 2 * h;
}

TEST_F(ZooTest, GptParametersAndNames) {
  GptOptions options;
  options.layers = 3;
  options.hidden = 32;
  options.heads = 4;
  options.seq = 8;
  options.vocab = 50;
  options.batch = 2;
  auto module = buildGpt(&context, options);
  ASSERT_TRUE(module);
  EXPECT_TRUE(mlir::succeeded(mlir::verify(*module)));
  FunctionSummary f = summarize(*module);
  EXPECT_EQ(f.parameterElements, gptParameters(options));
  EXPECT_EQ(f.parameters.size(), 2u + 3u * 12u + 2u);
  EXPECT_EQ(f.parameters.front().name, "wte.weight");
  EXPECT_EQ(f.parameters[1].name, "wpe.weight");
  EXPECT_EQ(f.parameters[4].name, "blocks.0.attn.qkv.weight");
  EXPECT_THAT(f.parameters[4].shape, ElementsAre(32, 96));
  EXPECT_EQ(f.parameters.back().name, "ln_f.bias");
  EXPECT_EQ(f.inputs[0].name, "tokens");
  EXPECT_EQ(f.inputs[1].name, "targets");
  EXPECT_THAT(f.inputs[1].shape, ElementsAre(2, 8));
}

TEST_F(ZooTest, GptFlops) {
  GptOptions o;
  o.layers = 2;
  o.hidden = 64;
  o.heads = 4;
  o.seq = 16;
  o.vocab = 100;
  o.batch = 2;
  auto module = buildGpt(&context, o);
  ASSERT_TRUE(module);
  FunctionSummary f = summarize(*module);

  const int64_t B = o.batch, T = o.seq, H = o.hidden, NH = o.heads,
                HD = H / NH, V = o.vocab;
  const int64_t bth = B * T * H, scores = B * NH * T * T;
  const int64_t layerNorm = 7 * bth;
  int64_t block = layerNorm                      // ln1
                  + 2 * bth * 3 * H + 3 * bth    // qkv matmul + bias
                  + 2 * scores * HD              // q k^T
                  + scores + scores              // scale, mask select
                  + 5 * scores                   // softmax
                  + 2 * scores * HD              // probs v
                  + 2 * bth * H + bth            // proj matmul + bias
                  + bth                          // residual
                  + layerNorm                    // ln2
                  + 2 * bth * 4 * H + 4 * bth    // fc matmul + bias
                  + 4 * bth                      // gelu
                  + 2 * bth * 4 * H + bth        // proj matmul + bias
                  + bth;                         // residual
  int64_t total = bth       // embedding add
                  + T * T   // mask compare
                  + o.layers * block + layerNorm // ln_f
                  + 2 * bth * V                  // tied logits
                  + 5 * B * T * V + B * T;       // cross-entropy, mean
  EXPECT_EQ(f.flops, total);
}

TEST_F(ZooTest, BadOptionsAreRejectedWithAReason) {
  GptOptions gpt;
  gpt.hidden = 30;
  gpt.heads = 4;
  EXPECT_EQ(checkOptions(gpt), "--hidden=30: expected a multiple of --heads=4");
  MlpOptions mlp;
  mlp.layers = {10};
  EXPECT_THAT(checkOptions(mlp), ::testing::HasSubstr("at least two sizes"));
  mlp.layers = {10, 1};
  EXPECT_THAT(checkOptions(mlp), ::testing::HasSubstr("at least 2"));
  LeNet5Options lenet;
  lenet.batch = 0;
  EXPECT_THAT(checkOptions(lenet), ::testing::HasSubstr("--batch=0"));

  // The builders refuse too, with a diagnostic rather than a crash.
  std::string message;
  mlir::ScopedDiagnosticHandler handler(&context, [&](mlir::Diagnostic &d) {
    message = d.str();
    return mlir::success();
  });
  EXPECT_FALSE(buildGpt(&context, gpt));
  EXPECT_THAT(message, ::testing::HasSubstr("cannot build model 'gpt'"));
}

} // namespace
} // namespace kiln::cli
