//===- FuseEquivalenceTest.cpp - fused steps compute what unfused ones do ===//
//
// kiln-decompose and kiln-fuse against the reference interpreter: random
// graphs (a fresh seed every run, printed on failure; KILN_FUSE_SEED=N
// reruns one) and the zoo's training steps in f64 must give bit-identical
// results before and after each pass: decomposition performs the composite
// ops' reference arithmetic in the same order, and a fusion's body is
// interpreted op by op. Alongside, the invariants the passes promise: no
// dot_general, convolution or reduce is duplicated, no collective is
// fused, the operand limits hold, and fusion never adds kernels.
//
//===----------------------------------------------------------------------===//

#include "tests/unit/passes/PassTestSupport.h"
#include "tests/unit/passes/RandomGraph.h"

#include "ir/Interpreter.h"
#include "ir/KilnOps.h"
#include "passes/FusionCostModel.h"
#include "passes/Passes.h"
#include "tools/kiln/lib/Zoo.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>

namespace {

using namespace mlir;
using namespace kiln;

struct OpCounts {
  int64_t dots = 0, convolutions = 0, reduces = 0, collectives = 0,
          collectivesInFusions = 0, fusions = 0, widestFusionInputs = 0,
          widestFusionResults = 0;
};

OpCounts countOps(ModuleOp module) {
  OpCounts counts;
  module.walk([&](Operation *op) {
    bool inFusion = op->getParentOfType<FusionOp>() != nullptr;
    if (isa<DotGeneralOp>(op))
      ++counts.dots;
    if (isa<Conv2DOp, Conv2DInputGradOp, Conv2DFilterGradOp>(op))
      ++counts.convolutions;
    if (isa<ReduceOp>(op))
      ++counts.reduces;
    if (isCollectiveOp(op)) {
      ++counts.collectives;
      counts.collectivesInFusions += inFusion;
    }
    if (auto fusion = dyn_cast<FusionOp>(op)) {
      ++counts.fusions;
      counts.widestFusionInputs =
          std::max<int64_t>(counts.widestFusionInputs, fusion.getInputs().size());
      counts.widestFusionResults =
          std::max<int64_t>(counts.widestFusionResults, fusion.getNumResults());
    }
  });
  return counts;
}

class FuseEquivalenceTest : public test::PassTestBase {
protected:
  // "" when @main of both modules gives the same values, bit for bit (NaN
  // equals NaN), on |args|; else the first difference.
  std::string compare(ModuleOp expected, ModuleOp actual,
                      ArrayRef<HostTensor> args) {
    auto f = expected.lookupSymbol<func::FuncOp>("main");
    auto g = actual.lookupSymbol<func::FuncOp>("main");
    Interpreter interpreter;
    auto want = interpreter.run(f, args);
    if (failed(want))
      return "the reference module does not run: " + diagnostics;
    Interpreter other;
    auto got = other.run(g, args);
    if (failed(got))
      return "the transformed module does not run: " + diagnostics;
    if (want->size() != got->size())
      return "result counts differ";
    for (size_t r = 0; r < want->size(); ++r) {
      const HostTensor &a = (*want)[r], &b = (*got)[r];
      if (a.shape() != b.shape() || a.dtype() != b.dtype())
        return "result " + std::to_string(r) + " changed type";
      for (int64_t i = 0; i < a.size(); ++i) {
        bool same = (std::isnan(a[i]) && std::isnan(b[i])) ||
                    std::memcmp(&a.values()[i], &b.values()[i], sizeof(double)) == 0;
        if (!same)
          return "result " + std::to_string(r) + " element " + std::to_string(i) +
                 ": expected " + std::to_string(a[i]) + ", got " + std::to_string(b[i]);
      }
    }
    return "";
  }

  // The invariants of fusing |before| into |after|.
  void expectFusionInvariants(ModuleOp before, ModuleOp after) {
    OpCounts b = countOps(before), a = countOps(after);
    EXPECT_EQ(a.dots, b.dots) << "a dot_general was duplicated or lost";
    EXPECT_EQ(a.convolutions, b.convolutions);
    EXPECT_EQ(a.reduces, b.reduces) << "a reduce was duplicated or lost";
    EXPECT_EQ(a.collectives, b.collectives);
    EXPECT_EQ(a.collectivesInFusions, 0);
    EXPECT_LE(a.widestFusionInputs, 32);
    EXPECT_LE(a.widestFusionResults, 32);
    auto f = before.lookupSymbol<func::FuncOp>("main");
    auto g = after.lookupSymbol<func::FuncOp>("main");
    EXPECT_LE(countKernels(g).kernels, countKernels(f).kernels);
    EXPECT_LE(countKernels(g).modeledUs, countKernels(f).modeledUs + 1e-9);
  }
};

TEST_F(FuseEquivalenceTest, RandomGraphsKeepTheirResults) {
  uint64_t seed = test::baseSeed("KILN_FUSE_SEED");
  for (uint64_t i = 0; i < 250; ++i) {
    uint64_t s = seed + i;
    SCOPED_TRACE("random graph seed " + std::to_string(s) +
                 " (rerun this one with KILN_FUSE_SEED=" + std::to_string(s) + ")");
    diagnostics.clear();
    OwningOpRef<ModuleOp> original = test::buildRandomGraph(&context, s);
    ASSERT_TRUE(succeeded(verify(*original))) << diagnostics << print(*original);
    OwningOpRef<ModuleOp> decomposed = cloneModule(*original);
    ASSERT_TRUE(run(*decomposed, [](PassManager &pm) {
      pm.addPass(createKilnDecompose());
      pm.addPass(createCanonicalizerPass());
      pm.addPass(createCSEPass());
    })) << diagnostics;
    // With verify-caches: every answer kiln-fuse keeps between moves (and
    // a producer's time a merge keeps) is checked against a fresh one.
    OwningOpRef<ModuleOp> fused = cloneModule(*decomposed);
    ASSERT_TRUE(run(*fused,
                    [](PassManager &pm) {
                      KilnFuseOptions fuse;
                      fuse.verifyCaches = true;
                      pm.addPass(createKilnFuse(fuse));
                    }))
        << diagnostics << print(*decomposed);
    ASSERT_TRUE(succeeded(verify(*fused))) << diagnostics << print(*fused);

    std::vector<HostTensor> args = test::randomArguments(
        original->lookupSymbol<func::FuncOp>("main"), s, /*intBound=*/2);
    std::string decomposeDiff = compare(*original, *decomposed, args);
    EXPECT_EQ(decomposeDiff, "") << print(*original);
    std::string fuseDiff = compare(*decomposed, *fused, args);
    EXPECT_EQ(fuseDiff, "") << print(*decomposed) << print(*fused);
    expectFusionInvariants(*decomposed, *fused);
    if (::testing::Test::HasFailure())
      return;
  }
}

// Tighter operand limits on the same kind of graphs: still the same
// results, and no fusion over the limits.
TEST_F(FuseEquivalenceTest, RandomGraphsUnderTightLimits) {
  uint64_t seed = test::baseSeed("KILN_FUSE_SEED") ^ 0x5eed;
  for (uint64_t i = 0; i < 60; ++i) {
    uint64_t s = seed + i;
    SCOPED_TRACE("random graph seed " + std::to_string(s));
    diagnostics.clear();
    test::RandomGraphOptions options;
    options.composites = false;
    OwningOpRef<ModuleOp> original = test::buildRandomGraph(&context, s, options);
    OwningOpRef<ModuleOp> fused = cloneModule(*original);
    ASSERT_TRUE(run(*fused, [](PassManager &pm) {
      KilnFuseOptions fuseOptions;
      fuseOptions.maxInputs = 3;
      fuseOptions.maxOutputs = 2;
      pm.addPass(createKilnFuse(fuseOptions));
    })) << diagnostics;
    OpCounts counts = countOps(*fused);
    EXPECT_LE(counts.widestFusionInputs, 3);
    EXPECT_LE(counts.widestFusionResults, 2);
    std::vector<HostTensor> args = test::randomArguments(
        original->lookupSymbol<func::FuncOp>("main"), s, 2);
    EXPECT_EQ(compare(*original, *fused, args), "") << print(*fused);
    if (::testing::Test::HasFailure())
      return;
  }
}

// The zoo's training steps in f64: the step as autodiff and the optimizer
// write it, against the decomposed and fused step.
class ZooStepTest : public FuseEquivalenceTest {
protected:
  void checkStep(OwningOpRef<ModuleOp> model, int64_t intBound) {
    ASSERT_TRUE(model) << diagnostics;
    ASSERT_TRUE(run(*model, [](PassManager &pm) {
      pm.addPass(createKilnAutodiff());
      pm.addPass(createKilnApplyOptimizer());
      pm.addPass(createCanonicalizerPass());
      pm.addPass(createCSEPass());
      pm.addPass(createKilnConvertFloatsToF64());
    })) << diagnostics;
    OwningOpRef<ModuleOp> fused = cloneModule(*model);
    ASSERT_TRUE(run(*fused, decomposeAndFuse)) << diagnostics;
    ASSERT_TRUE(succeeded(verify(*fused)));
    uint64_t seed = test::baseSeed("KILN_FUSE_SEED");
    SCOPED_TRACE("argument seed " + std::to_string(seed));
    std::vector<HostTensor> args = test::randomArguments(
        model->lookupSymbol<func::FuncOp>("main"), seed, intBound);
    EXPECT_EQ(compare(*model, *fused, args), "");
    OwningOpRef<ModuleOp> decomposed = cloneModule(*model);
    ASSERT_TRUE(run(*decomposed, [](PassManager &pm) {
      pm.addPass(createKilnDecompose());
      pm.addPass(createCanonicalizerPass());
      pm.addPass(createCSEPass());
    }));
    expectFusionInvariants(*decomposed, *fused);
    // Every fusion names the source nodes it came from.
    fused->walk([&](FusionOp fusion) {
      std::string text;
      llvm::raw_string_ostream os(text);
      fusion.getLoc().print(os);
      EXPECT_NE(text.find('"'), std::string::npos) << "an unnamed fusion: " << text;
    });
  }
};

TEST_F(ZooStepTest, Mlp) {
  cli::MlpOptions options;
  options.layers = {12, 8, 6, 4};
  options.batch = 5;
  checkStep(cli::buildMlp(&context, options), 4);
}

TEST_F(ZooStepTest, LeNet5) {
  cli::LeNet5Options options;
  options.batch = 2;
  checkStep(cli::buildLeNet5(&context, options), 10);
}

TEST_F(ZooStepTest, SmallGpt) {
  cli::GptOptions options;
  options.layers = 2;
  options.hidden = 16;
  options.heads = 2;
  options.seq = 6;
  options.vocab = 20;
  options.batch = 2;
  checkStep(cli::buildGpt(&context, options), 20);
}

} // namespace
