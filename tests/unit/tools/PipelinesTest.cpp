//===- PipelinesTest.cpp - compile pipeline options and runs ----------------===//
//
// Every option spelling of the CLI contract parses; the values the pipeline
// cannot honour yet are refused with a reason; the pipeline runs
// kiln-verify-roles and canonicalize and applies the optimizer override.
//
//===----------------------------------------------------------------------===//

#include "passes/Pipelines.h"

#include "tools/kiln/lib/ModuleLoader.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace kiln {
namespace {

using ::testing::HasSubstr;

TEST(PipelinesTest, ParsesEverySpelling) {
  int64_t arch = -1;
  EXPECT_EQ(parseTarget("cpu", arch), TargetKind::cpu);
  EXPECT_EQ(parseTarget("cuda", arch), TargetKind::cuda);
  EXPECT_EQ(arch, 0);
  EXPECT_EQ(parseTarget("cuda:sm_90", arch), TargetKind::cuda);
  EXPECT_EQ(arch, 90);
  EXPECT_FALSE(parseTarget("cuda:sm_", arch));
  EXPECT_FALSE(parseTarget("cuda:sm_9x", arch));
  EXPECT_FALSE(parseTarget("tpu", arch));

  for (llvm::StringRef name :
       {"none", "mirrored", "data-parallel", "zero1", "zero2", "zero3",
        "parameter-server", "pipeline", "tensor-parallel"}) {
    std::optional<Strategy> s = parseStrategy(name);
    ASSERT_TRUE(s) << name.str();
    EXPECT_EQ(stringifyStrategy(*s), name);
  }
  EXPECT_FALSE(parseStrategy("zero4"));
  EXPECT_EQ(parseAmp("off"), AmpMode::off);
  EXPECT_EQ(parseAmp("bf16"), AmpMode::bf16);
  EXPECT_EQ(parseAmp("fp16"), AmpMode::fp16);
  EXPECT_FALSE(parseAmp("fp8"));
}

TEST(PipelinesTest, RefusesWhatIsNotSupportedYet) {
  PipelineOptions options;
  EXPECT_EQ(checkPipelineOptions(options), "");
  options.strategy = Strategy::pipeline;
  EXPECT_THAT(checkPipelineOptions(options),
              HasSubstr("--strategy=pipeline: not supported yet"));
  options.strategy = Strategy::zero3;
  EXPECT_EQ(checkPipelineOptions(options), "");
  options.gradCompression = "bf16";
  EXPECT_THAT(checkPipelineOptions(options),
              HasSubstr("--grad-compression=bf16: not supported with "
                        "--strategy=zero3 (only with data-parallel)"));
  options = {};
  options.worldSize = 4;
  EXPECT_THAT(checkPipelineOptions(options),
              HasSubstr("--world-size=4: needs a --strategy (data-parallel)"));
  options.strategy = Strategy::dataParallel;
  EXPECT_EQ(checkPipelineOptions(options), "");
  options = {};
  options.amp = AmpMode::fp16;
  EXPECT_EQ(checkPipelineOptions(options), "");
  options.amp = AmpMode::off;
  options.ampDeny = {"exp"};
  EXPECT_THAT(checkPipelineOptions(options),
              HasSubstr("--amp-deny and --amp-infer need --amp=bf16"));
  options = {};
  options.target = TargetKind::cuda; // kiln-fuse-attention
  options.cudaArch = 90;
  EXPECT_EQ(checkPipelineOptions(options), "");
  options.target = TargetKind::cpu;
  EXPECT_THAT(checkPipelineOptions(options),
              HasSubstr("--target=cpu: not supported yet"));
  options = {};
  options.dumpAfter = "canon";
  EXPECT_THAT(checkPipelineOptions(options), HasSubstr("needs --dump-dir"));
  options.dumpDir = "/tmp";
  options.dumpAfter = "(";
  EXPECT_THAT(checkPipelineOptions(options),
              HasSubstr("expected a regular expression"));
}

class PipelineRunTest : public ::testing::Test {
protected:
  PipelineRunTest() {
    mlir::DialectRegistry registry;
    cli::registerKilnDialects(registry);
    context.appendDialectRegistry(registry);
    context.printOpOnDiagnostic(false);
  }
  mlir::MLIRContext context;
};

TEST_F(PipelineRunTest, CanonicalizesAndOverridesTheOptimizer) {
  auto module = mlir::parseSourceString<mlir::ModuleOp>(R"mlir(
    module attributes {kiln.training = #kiln.training<optimizer = adam, learning_rate = 2.5e-01>} {
      func.func @main(%x: tensor<2x3xf32> {kiln.role = #kiln.role<input>}) -> tensor<2x3xf32> {
        %r = kiln.reshape %x : tensor<2x3xf32> -> tensor<2x3xf32>
        return %r : tensor<2x3xf32>
      }
    })mlir", &context);
  ASSERT_TRUE(module);
  PipelineOptions options;
  options.optimizer.optimizer = "momentum";
  ASSERT_TRUE(mlir::succeeded(runCompilePipeline(*module, options)));

  auto main = *module->getOps<mlir::func::FuncOp>().begin();
  EXPECT_TRUE(main.getBody().front().front().hasTrait<mlir::OpTrait::IsTerminator>())
      << "the no-op reshape is folded away";
  auto training =
      (*module)->getAttrOfType<TrainingAttr>(KilnDialect::kTrainingAttrName);
  ASSERT_TRUE(training);
  EXPECT_EQ(training.getOptimizer(), OptimizerKind::momentum);
  EXPECT_EQ(training.getLearningRate().convertToDouble(), 0.25);
  EXPECT_EQ(training.getMomentum().convertToDouble(), 0.9);
}

TEST_F(PipelineRunTest, VerifyRolesRuns) {
  auto module = mlir::parseSourceString<mlir::ModuleOp>(R"mlir(
    func.func @main(%w: tensor<3xf32> {kiln.role = #kiln.role<parameter>}) -> tensor<3xf32> {
      return %w : tensor<3xf32>
    })mlir", &context);
  ASSERT_TRUE(module);
  std::string message;
  mlir::ScopedDiagnosticHandler handler(&context, [&](mlir::Diagnostic &d) {
    message = d.str();
    return mlir::success();
  });
  EXPECT_TRUE(mlir::failed(runCompilePipeline(*module, PipelineOptions{})));
  EXPECT_THAT(message, HasSubstr("needs a kiln.init"));

  // Options the pipeline cannot honour fail before any pass runs.
  PipelineOptions distributed;
  distributed.strategy = Strategy::pipeline;
  EXPECT_TRUE(mlir::failed(runCompilePipeline(*module, distributed)));
  EXPECT_THAT(message, HasSubstr("--strategy=pipeline: not supported yet"));
}

} // namespace
} // namespace kiln
