//===- FuseAttentionTest.cpp - fused attention trains as primitives do ----===//
//
// kiln-fuse-attention on the zoo GPT (2 blocks, hidden 32, 2 heads,
// sequence 16): every block's attention becomes one kiln.attention, and
// autodiff then writes one kiln.attention_grad per block. The training
// step's loss and every parameter gradient, run on the reference
// interpreter, must match the step built from the primitives (fusion off)
// on the same random batch: in f64 to 1e-9 of each tensor's largest
// magnitude (the two differ only in rounding order), in f32 within 2e-3
// of the exact (f64) step. The
// compile pipeline fuses only for a CUDA target and with fuseAttention on,
// and under --amp=bf16 computes attention in bf16 with an f32 lse.
//
//===----------------------------------------------------------------------===//

#include "tests/unit/AsF64.h"
#include "tests/unit/passes/PassTestSupport.h"
#include "tests/unit/passes/RandomGraph.h"

#include "ir/Interpreter.h"
#include "ir/KilnOps.h"
#include "passes/Passes.h"
#include "passes/Pipelines.h"
#include "tools/kiln/lib/Zoo.h"

#include "mlir/IR/Verifier.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

namespace {

using namespace mlir;
using namespace kiln;

struct Counts {
  int64_t attention = 0, attentionGrad = 0, softmax = 0;
};

Counts countOps(ModuleOp module) {
  Counts c;
  module.walk([&](Operation *op) {
    c.attention += isa<AttentionOp>(op);
    c.attentionGrad += isa<AttentionGradOp>(op);
    c.softmax += isa<SoftmaxOp>(op);
  });
  return c;
}

class FuseAttentionTest : public test::PassTestBase {
protected:
  OwningOpRef<ModuleOp> smallGpt() {
    cli::GptOptions options;
    options.layers = 2;
    options.hidden = 32;
    options.heads = 2;
    options.seq = 16;
    options.vocab = 24;
    options.batch = 2;
    return cli::buildGpt(&context, options);
  }

  // Loss and gradients (autodiff, no optimizer), optionally in f64.
  bool lossAndGradients(ModuleOp module, bool f64) {
    return run(module, [f64](PassManager &pm) {
      pm.addPass(createKilnAutodiff());
      pm.addPass(createCanonicalizerPass());
      pm.addPass(createCSEPass());
      if (f64)
        pm.addPass(createKilnConvertFloatsToF64());
    });
  }

  // "" when every result of @main in |actual| on |actualArgs| agrees
  // within |tolerance| times the largest magnitude of that result in
  // |expected| on |expectedArgs| (with the same dtype when |sameTypes|; the
  // exact f64 step is compared with an f32 one); else the first difference.
  std::string compare(ModuleOp expected, ArrayRef<HostTensor> expectedArgs,
                      ModuleOp actual, ArrayRef<HostTensor> actualArgs,
                      double tolerance, bool sameTypes) {
    auto f = expected.lookupSymbol<func::FuncOp>("main");
    auto g = actual.lookupSymbol<func::FuncOp>("main");
    Interpreter a, b;
    auto want = a.run(f, expectedArgs);
    if (failed(want))
      return "the unfused step does not run: " + diagnostics;
    auto got = b.run(g, actualArgs);
    if (failed(got))
      return "the fused step does not run: " + diagnostics;
    if (want->size() != got->size())
      return "result counts differ";
    for (size_t r = 0; r < want->size(); ++r) {
      const HostTensor &x = (*want)[r], &y = (*got)[r];
      if (x.shape() != y.shape() || (sameTypes && x.dtype() != y.dtype()))
        return "result " + std::to_string(r) + " changed type";
      double scale = 0.0;
      for (double v : x.values())
        scale = std::max(scale, std::fabs(v));
      for (int64_t i = 0; i < x.size(); ++i)
        if (!(std::fabs(x[i] - y[i]) <= tolerance * scale))
          return "result " + std::to_string(r) + " element " +
                 std::to_string(i) + ": expected " + std::to_string(x[i]) +
                 ", got " + std::to_string(y[i]) + " (largest magnitude " +
                 std::to_string(scale) + ")";
    }
    return "";
  }

  void checkStep(bool f64, double tolerance) {
    OwningOpRef<ModuleOp> unfused = smallGpt();
    ASSERT_TRUE(unfused) << diagnostics;
    // The exact step: the unfused one in f64 (itself when |f64|).
    OwningOpRef<ModuleOp> exact = f64 ? nullptr : cloneModule(*unfused);
    OwningOpRef<ModuleOp> fused = cloneModule(*unfused);
    ASSERT_TRUE(run(*fused, [](PassManager &pm) {
      pm.addPass(createKilnFuseAttention());
    })) << diagnostics;
    Counts forward = countOps(*fused);
    EXPECT_EQ(forward.attention, 2) << print(*fused);
    EXPECT_EQ(forward.softmax, 0) << "a block's softmax was left";
    ASSERT_TRUE(lossAndGradients(*unfused, f64)) << diagnostics;
    ASSERT_TRUE(lossAndGradients(*fused, f64)) << diagnostics;
    if (exact)
      ASSERT_TRUE(lossAndGradients(*exact, /*f64=*/true)) << diagnostics;
    ASSERT_TRUE(succeeded(verify(*fused))) << diagnostics;
    Counts step = countOps(*fused);
    EXPECT_EQ(step.attention, 2);
    EXPECT_EQ(step.attentionGrad, 2) << print(*fused);
    EXPECT_EQ(countOps(*unfused).attention, 0);

    uint64_t seed = test::baseSeed("KILN_FUSE_SEED");
    SCOPED_TRACE("argument seed " + std::to_string(seed) +
                 " (rerun with KILN_FUSE_SEED=" + std::to_string(seed) + ")");
    std::vector<HostTensor> args = test::randomArguments(
        unfused->lookupSymbol<func::FuncOp>("main"), seed, /*intBound=*/24);
    if (f64) {
      EXPECT_EQ(compare(*unfused, args, *fused, args, tolerance,
                        /*sameTypes=*/true),
                "");
      return;
    }
    EXPECT_EQ(compare(*exact, asF64(args), *fused, args, tolerance,
                      /*sameTypes=*/false),
              "");
  }
};

// Same arithmetic: in f64 the fused and unfused steps agree to 1e-9.
TEST_F(FuseAttentionTest, GptLossAndGradientsF64) { checkStep(true, 1e-9); }

// In f32 the fused step is checked against the exact (f64) step, not the
// unfused f32 one: with random weights up to 2 both round their own way
// (over 300 seeds the fused step's worst error was 4.3e-4 of a result's
// magnitude, the unfused step's 1.0e-3; they were 1e-4 apart for 1 seed
// in 75), while a wrong mask, scale or layout is off by far more.
TEST_F(FuseAttentionTest, GptLossAndGradientsF32) { checkStep(false, 2e-3); }

// The pipeline fuses only for a CUDA target with the option on.
TEST_F(FuseAttentionTest, PipelineFusesOnlyForCuda) {
  struct Case {
    TargetKind target;
    bool fuse;
    int64_t attention;
  } cases[] = {{TargetKind::cuda, true, 2},
               {TargetKind::cuda, false, 0},
               {TargetKind::none, true, 0}};
  for (const Case &c : cases) {
    SCOPED_TRACE("target " + stringifyTarget(c.target, 0) +
                 (c.fuse ? ", fuse on" : ", fuse off"));
    OwningOpRef<ModuleOp> model = smallGpt();
    ASSERT_TRUE(model);
    PipelineOptions options;
    options.target = c.target;
    options.fuseAttention = c.fuse;
    options.optimize = false;
    ASSERT_TRUE(succeeded(runCompilePipeline(*model, options))) << diagnostics;
    Counts counts = countOps(*model);
    EXPECT_EQ(counts.attention, c.attention);
    EXPECT_EQ(counts.attentionGrad, c.attention);
    // The blocks' two, unless fused, and the one the loss's gradient
    // (softmax_cross_entropy) computes.
    EXPECT_EQ(counts.softmax, c.attention ? 1 : 3);
  }
}

// --amp=bf16: q, k, v and out in bf16, lse in f32; the gradient's operands
// follow, and dq, dk, dv are bf16. The loss stays near the unfused bf16
// step's (both round to bf16 at different places).
TEST_F(FuseAttentionTest, MixedPrecisionKeepsLseInF32) {
  OwningOpRef<ModuleOp> fused = smallGpt();
  ASSERT_TRUE(fused);
  OwningOpRef<ModuleOp> unfused = cloneModule(*fused);
  PipelineOptions options;
  options.target = TargetKind::cuda;
  options.amp = AmpMode::bf16;
  options.optimize = false;
  ASSERT_TRUE(succeeded(runCompilePipeline(*fused, options))) << diagnostics;
  options.fuseAttention = false;
  ASSERT_TRUE(succeeded(runCompilePipeline(*unfused, options))) << diagnostics;
  Type bf16 = BFloat16Type::get(&context), f32 = Float32Type::get(&context);
  auto element = [](Value v) {
    return cast<RankedTensorType>(v.getType()).getElementType();
  };
  int64_t attention = 0, grads = 0;
  fused->walk([&](AttentionOp op) {
    ++attention;
    EXPECT_EQ(element(op.getQ()), bf16);
    EXPECT_EQ(element(op.getK()), bf16);
    EXPECT_EQ(element(op.getV()), bf16);
    EXPECT_EQ(element(op.getOut()), bf16);
    EXPECT_EQ(element(op.getLse()), f32);
  });
  fused->walk([&](AttentionGradOp op) {
    ++grads;
    EXPECT_EQ(element(op.getLse()), f32);
    for (Value v : op->getOperands())
      if (v != op.getLse())
        EXPECT_EQ(element(v), bf16);
    for (Value v : op->getResults())
      EXPECT_EQ(element(v), bf16);
  });
  EXPECT_EQ(attention, 2);
  EXPECT_EQ(grads, 2);

  // Both steps see the same batch and initial parameters.
  auto main = fused->lookupSymbol<func::FuncOp>("main");
  unsigned loss = main.getNumResults();
  for (unsigned i = 0; i < main.getNumResults(); ++i)
    if (auto role = main.getResultAttrOfType<RoleAttr>(i, KilnDialect::kRoleAttrName);
        role && role.getValue() == Role::loss)
      loss = i;
  ASSERT_LT(loss, main.getNumResults()) << "no loss result";
  uint64_t seed = test::baseSeed("KILN_FUSE_SEED");
  SCOPED_TRACE("argument seed " + std::to_string(seed));
  std::vector<HostTensor> args = test::randomArguments(
      unfused->lookupSymbol<func::FuncOp>("main"), seed, /*intBound=*/24);
  Interpreter a, b;
  auto want = a.run(unfused->lookupSymbol<func::FuncOp>("main"), args);
  auto got = b.run(fused->lookupSymbol<func::FuncOp>("main"), args);
  ASSERT_TRUE(succeeded(want) && succeeded(got)) << diagnostics;
  double lossWant = (*want)[loss][0], lossGot = (*got)[loss][0];
  EXPECT_TRUE(std::isfinite(lossGot));
  EXPECT_NEAR(lossGot, lossWant, 2e-2 * std::fabs(lossWant));
}

} // namespace
