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
#include "mlir/Parser/Parser.h"

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

  // Attention as PyTorch's ONNX exporters write scaled_dot_product_attention
  // (kiln import): sqrt(scale) computed from constants on q and on the keys
  // (here sqrt(1 / sqrt(16)), so the scale is 1/4)
  // given as kT [B, H, D, Tk] (a transpose of the heads' reshape; with
  // |dynamoKeys|, the torch.export exporter's reshape, 3-D transpose and
  // reshape), and a causal mask added to the scores: -inf (TorchScript) or
  // the float's lowest value (torch.export) above the diagonal.
  OwningOpRef<ModuleOp> exportedAttention(bool dynamoKeys) {
    std::string masked = dynamoKeys ? "-3.40282347E+38" : "0xFF800000";
    std::string mask = "[";
    for (int i = 0; i < 5; ++i) {
      mask += i ? ", [" : "[";
      for (int j = 0; j < 5; ++j)
        mask += std::string(j ? ", " : "") + (j <= i ? "0.0" : masked);
      mask += "]";
    }
    mask += "]";
    std::string keys =
        dynamoKeys
            ? R"mlir(
    %kh = kiln.transpose %k0, permutation = [0, 2, 1, 3] : tensor<2x5x2x4xf32> -> tensor<2x2x5x4xf32>
    %k3 = kiln.reshape %kh : tensor<2x2x5x4xf32> -> tensor<4x5x4xf32>
    %k3t = kiln.transpose %k3, permutation = [0, 2, 1] : tensor<4x5x4xf32> -> tensor<4x4x5xf32>
    %kt0 = kiln.reshape %k3t : tensor<4x4x5xf32> -> tensor<2x2x4x5xf32>)mlir"
            : R"mlir(
    %kt0 = kiln.transpose %k0, permutation = [0, 2, 3, 1] : tensor<2x5x2x4xf32> -> tensor<2x2x4x5xf32>)mlir";
    std::string source = R"mlir(
module {
  func.func @main(%q0: tensor<2x2x5x4xf32> {kiln.name = "q", kiln.role = #kiln.role<parameter>},
                  %k0: tensor<2x5x2x4xf32> {kiln.name = "k", kiln.role = #kiln.role<parameter>},
                  %v: tensor<2x2x5x4xf32> {kiln.name = "v", kiln.role = #kiln.role<parameter>})
      -> (tensor<f32> {kiln.name = "loss", kiln.role = #kiln.role<loss>}) {
    %d = kiln.constant dense<16.0> : tensor<1xf32>
    %sd = kiln.sqrt %d : tensor<1xf32>
    %one = kiln.constant dense<1.0> : tensor<1xf32>
    %inv = kiln.div %one, %sd : tensor<1xf32>
    %c = kiln.sqrt %inv : tensor<1xf32>
    %cq = kiln.broadcast_in_dim %c, dims = [3] : tensor<1xf32> -> tensor<2x2x5x4xf32>
    %q = kiln.mul %q0, %cq : tensor<2x2x5x4xf32>)mlir" +
                         keys + R"mlir(
    %ck = kiln.broadcast_in_dim %c, dims = [3] : tensor<1xf32> -> tensor<2x2x4x5xf32>
    %kt = kiln.mul %kt0, %ck : tensor<2x2x4x5xf32>
    %s = kiln.dot_general %q, %kt, batch = [0, 1] x [0, 1], contract = [3] x [2] : (tensor<2x2x5x4xf32>, tensor<2x2x4x5xf32>) -> tensor<2x2x5x5xf32>
    %m = kiln.constant dense<)mlir" + mask +
                         R"mlir(> : tensor<5x5xf32>
    %mb = kiln.broadcast_in_dim %m, dims = [2, 3] : tensor<5x5xf32> -> tensor<2x2x5x5xf32>
    %sm = kiln.add %s, %mb : tensor<2x2x5x5xf32>
    %p = kiln.softmax %sm, dim = 3 : tensor<2x2x5x5xf32>
    %o = kiln.dot_general %p, %v, batch = [0, 1] x [0, 1], contract = [3] x [2] : (tensor<2x2x5x5xf32>, tensor<2x2x5x4xf32>) -> tensor<2x2x5x4xf32>
    %sq = kiln.mul %o, %o : tensor<2x2x5x4xf32>
    %loss = kiln.reduce sum %sq, dims = [0, 1, 2, 3] : tensor<2x2x5x4xf32> -> tensor<f32>
    return %loss : tensor<f32>
  }
}
)mlir";
    return parseSourceString<ModuleOp>(source, &context, "exported.mlir");
  }

  void checkStep(bool f64, double tolerance) {
    checkStep(smallGpt(), /*attentions=*/2, f64, tolerance);
  }

  void checkStep(OwningOpRef<ModuleOp> unfused, int64_t attentions, bool f64,
                 double tolerance) {
    ASSERT_TRUE(unfused) << diagnostics;
    // The exact step: the unfused one in f64 (itself when |f64|).
    OwningOpRef<ModuleOp> exact = f64 ? nullptr : cloneModule(*unfused);
    OwningOpRef<ModuleOp> fused = cloneModule(*unfused);
    ASSERT_TRUE(run(*fused, [](PassManager &pm) {
      pm.addPass(createKilnFuseAttention());
    })) << diagnostics;
    Counts forward = countOps(*fused);
    EXPECT_EQ(forward.attention, attentions) << print(*fused);
    EXPECT_EQ(forward.softmax, 0) << "a block's softmax was left";
    ASSERT_TRUE(lossAndGradients(*unfused, f64)) << diagnostics;
    ASSERT_TRUE(lossAndGradients(*fused, f64)) << diagnostics;
    if (exact)
      ASSERT_TRUE(lossAndGradients(*exact, /*f64=*/true)) << diagnostics;
    ASSERT_TRUE(succeeded(verify(*fused))) << diagnostics;
    Counts step = countOps(*fused);
    EXPECT_EQ(step.attention, attentions);
    EXPECT_EQ(step.attentionGrad, attentions) << print(*fused);
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

// The exporters' form (kiln import of torch.onnx.export): one
// kiln.attention with scale sqrt(1/sqrt(16)) squared = 1/4 (exact in f32,
// so the f64 steps differ only in rounding order) and the keys transposed
// back, whose step matches the primitives' in f64.
TEST_F(FuseAttentionTest, ExportedAttentionLossAndGradientsF64) {
  for (bool dynamo : {false, true}) {
    SCOPED_TRACE(dynamo ? "torch.export keys and mask" : "TorchScript keys and mask");
    OwningOpRef<ModuleOp> module = exportedAttention(dynamo);
    ASSERT_TRUE(module) << diagnostics;
    OwningOpRef<ModuleOp> fused = cloneModule(*module);
    ASSERT_TRUE(run(*fused, [](PassManager &pm) { pm.addPass(createKilnFuseAttention()); }))
        << diagnostics;
    int64_t seen = 0;
    fused->walk([&](AttentionOp op) {
      ++seen;
      EXPECT_TRUE(op.getCausal());
      EXPECT_EQ(op.getScale().convertToDouble(), 0.25);
    });
    EXPECT_EQ(seen, 1) << print(*fused);
    checkStep(std::move(module), /*attentions=*/1, /*f64=*/true, 1e-9);
  }
}

// A mask that is not causal (a bias of 1 below the diagonal, or a masked
// diagonal) leaves the exported form as it is.
TEST_F(FuseAttentionTest, ExportedAttentionWithAnotherMaskStays) {
  OwningOpRef<ModuleOp> module = exportedAttention(false);
  ASSERT_TRUE(module);
  module->walk([&](ConstantOp constant) {
    auto dense = dyn_cast<DenseElementsAttr>(constant.getValue());
    if (!dense || dense.getType().getRank() != 2)
      return;
    // Row 1, column 0 (visible) becomes 1: a bias, not a mask.
    SmallVector<float> values(dense.getValues<float>());
    values[5] = 1.0f;
    constant.setValueAttr(DenseElementsAttr::get(dense.getType(), ArrayRef<float>(values)));
  });
  ASSERT_TRUE(run(*module, [](PassManager &pm) { pm.addPass(createKilnFuseAttention()); }));
  EXPECT_EQ(countOps(*module).attention, 0) << print(*module);
  EXPECT_EQ(countOps(*module).softmax, 1);
}

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
