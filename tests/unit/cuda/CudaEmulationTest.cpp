//===- CudaEmulationTest.cpp - generated CUDA kernels run on the host -----===//
//
// Proof of the CUDA kernels' arithmetic and indexing without a GPU: every
// kernel of the zoo's compiled training steps (small sizes; f32, and with
// --amp=bf16 / --amp=fp16), collected exactly as `kiln compile
// --target=cuda` collects them (PackageBuilder.h's hooks: fusions, gemm
// epilogues, packing transposes and one-op kernels), is emitted as CUDA
// C++ (codegen/cuda/CudaEmitter.h), all of a step's kernels compiled in one
// translation unit for the host with clang++ under
// codegen/cuda/CudaEmulation.h, and run there (threads of a block as host
// threads: grid-stride loops, warp shuffles, block barriers) on random
// inputs; the results are compared with the reference interpreter's
// evaluation of the same fusion. Kernels run with 64-thread blocks and at
// most 3 blocks, so the grid-stride loops wrap. Hand-written fusions cover
// the block-per-row layouts (rows of 2048+ elements) the small zoo steps do
// not reach, and their row cache in dynamic shared memory (each emulated
// block gets its own array, filled with NaN bytes). Random graphs
// (tests/unit/passes/RandomGraph.h) and their training steps reach the
// combinations neither does: odd extents up to 6000, transposes and slices
// inside reductions, one-row nests; their kernels also go through NVRTC
// and ptxas for sm_90. Set KILN_CODEGEN_SEED to rerun one seed. The
// harness (adding, running and comparing kernels) is EmulationHarness.h.
//
//===----------------------------------------------------------------------===//

#include "codegen/cuda/CudaEmitter.h"
#include "tests/unit/codegen/KernelTestSupport.h"
#include "tests/unit/cuda/AddressSanitizer.h"
#include "tests/unit/cuda/EmulationHarness.h"
#include "tests/unit/cuda/StepPackage.h"
#include "tests/unit/passes/RandomGraph.h"

#include "ir/Interpreter.h"
#include "ir/KilnDialect.h"
#include "ir/KilnOps.h"
#include "passes/Pipelines.h"
#include "tools/kiln/lib/PackageBuilder.h"
#include "tools/kiln/lib/Zoo.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <optional>
#include <random>

namespace {

using namespace mlir;
using namespace kiln;
using codegen_test::baseSeed;
using codegen_test::randomTensor;
using cuda_emulation::EmulatedKernel;
using cuda_emulation::KernelBuffer;

class CudaEmulationTest : public cuda_emulation::EmulationHarness {
protected:
  // Every kernel of a zoo model's step as `kiln compile --target=cuda`
  // collects them.
  void checkModel(OwningOpRef<ModuleOp> model, AmpMode amp, int64_t intBound,
                  size_t minKernels) {
    ASSERT_TRUE(model) << diagnostics;
    PipelineOptions options;
    options.amp = amp;
    uint64_t seed = firstSeed();
    addPackaged(*model, options, seed, intBound);
    if (HasFatalFailure())
      return;
    EXPECT_GE(kernels.size(), minKernels);
    runAll();
    RecordProperty("kernels", static_cast<int>(ran));
    EXPECT_EQ(ran, kernels.size()) << "seed " << seed;
  }

  // |count| random graphs (tests/unit/passes/RandomGraph.h) of
  // |floatType|, extents up to 6000, compiled as `kiln compile
  // --target=cuda --forward-only` would optimize them (kiln-decompose,
  // kiln-split-reductions, kiln-fuse with the CUDA target's options) or,
  // with |training|, made models (makeRandomModel, f32) and compiled as
  // their training steps (kiln-autodiff, the optimizer, |*training| mixed
  // precision, then the same): every kernel of their packages run on the
  // host against the interpreter, its chain checked, and all of them
  // assembled for sm_90.
  void checkRandom(DType floatType, std::optional<AmpMode> training, int count) {
    // Under ASan (scripts/sanitize.sh, after ctest ran them all) half as
    // many: every layout still comes up, in half the time.
    if (KILN_TEST_HAS_ASAN)
      count = (count + 1) / 2;
    uint64_t seed = firstSeed();
    checkChains = true;
    test::RandomGraphOptions graph;
    graph.collectives = false;
    graph.roundingSteps = false;
    graph.gathers = true;
    graph.floatType = floatType;
    graph.longExtent = 6000;
    graph.longChance = 0.3;
    graph.maxElements = 1 << 15;
    std::string what = training ? "random model" : "random graph";
    for (int i = 0; i < count; ++i) {
      uint64_t s = seed + i;
      SCOPED_TRACE(what + " of seed " + std::to_string(s));
      diagnostics.clear();
      OwningOpRef<ModuleOp> module = test::buildRandomGraph(&context, s, graph);
      ASSERT_TRUE(succeeded(verify(*module)))
          << "built invalid IR: " << diagnostics << codegen_test::printed(*module);
      PipelineOptions options;
      options.target = TargetKind::cuda;
      options.gemmBiasGradients = true;
      if (training) {
        test::makeRandomModel(*module, s);
        options.amp = *training;
      } else {
        auto main = module->lookupSymbol<func::FuncOp>("main");
        for (unsigned a = 0; a < main.getNumArguments(); ++a)
          main.setArgAttr(a, KilnDialect::kRoleAttrName,
                          RoleAttr::get(&context, Role::input));
        options.trainingStep = false;
      }
      std::string text = codegen_test::printed(*module);
      size_t before = kernels.size();
      addPackaged(*module, options, s * 1000, /*intBound=*/4);
      if (HasFatalFailure()) {
        ADD_FAILURE() << text;
        return;
      }
      for (size_t k = before; k < kernels.size(); ++k)
        kernels[k].fusionText = "of the " + what + " of seed " +
                                std::to_string(s) + ":\n" + kernels[k].fusionText;
    }
    runAll();
    // NVRTC and ptxas (uninstrumented) say nothing about Kiln's memory:
    // under ASan (scripts/sanitize.sh) only the kernels' accesses are the
    // point, and ctest's run assembles them.
    if (KILN_TEST_HAS_ASAN)
      std::printf("not assembled for sm_90 under AddressSanitizer\n");
    else
      assembleAllForSm90();
    RecordProperty("kernels", static_cast<int>(ran));
    EXPECT_EQ(ran, kernels.size()) << "seed " << seed;
    std::string reached;
    for (const auto &[layout, n] : layouts)
      reached += " " + layout + " x" + std::to_string(n);
    std::printf("%zu kernels of %d %ss; layouts:%s\n", ran, count,
                what.c_str(), reached.c_str());
  }
};

// Rows longer than a warp (40 features) and an odd batch.
cli::MlpOptions smallMlp() { return cuda_step_test::smallMlp(37); }
using cuda_step_test::smallGpt;

TEST_F(CudaEmulationTest, MlpF32) {
  // 7: in f32 the last layer's bias add is the GEMM's cuBLASLt epilogue
  // (kiln-cuda-step-emulation-tests runs it), not a kernel of its own.
  checkModel(cli::buildMlp(&context, smallMlp()), AmpMode::off, 4, 7);
  // The step has elementwise (vectorized), per-row and per-element
  // reductions.
  EXPECT_GT(layouts["elementwise.v4"], 0);
  EXPECT_GT(layouts["row.warp"] + layouts["element.warp"], 0);
}

TEST_F(CudaEmulationTest, MlpBF16) {
  // 7, as in f32: bf16 GEMMs take their cuBLASLt bias epilogue too.
  checkModel(cli::buildMlp(&context, smallMlp()), AmpMode::bf16, 4, 7);
}

TEST_F(CudaEmulationTest, MlpF16) {
  checkModel(cli::buildMlp(&context, smallMlp()), AmpMode::fp16, 4, 8);
}

TEST_F(CudaEmulationTest, LeNet5F32) {
  cli::LeNet5Options options;
  options.batch = 2;
  checkModel(cli::buildLeNet5(&context, options), AmpMode::off, 10, 8);
}

TEST_F(CudaEmulationTest, LeNet5BF16) {
  cli::LeNet5Options options;
  options.batch = 2;
  checkModel(cli::buildLeNet5(&context, options), AmpMode::bf16, 10, 8);
}

TEST_F(CudaEmulationTest, SmallGptF32) {
  checkModel(cli::buildGpt(&context, smallGpt()), AmpMode::off, 20, 10);
}

TEST_F(CudaEmulationTest, SmallGptBF16) {
  checkModel(cli::buildGpt(&context, smallGpt()), AmpMode::bf16, 20, 10);
}

TEST_F(CudaEmulationTest, SmallGptF16) {
  checkModel(cli::buildGpt(&context, smallGpt()), AmpMode::fp16, 20, 10);
}

// Long rows take a block per row (shared-memory combine), a full sum a
// block per element; an odd last extent stays scalar.
TEST_F(CudaEmulationTest, BlockRowsAndLongReductions) {
  const char *text = R"mlir(
func.func @main(%x: tensor<3x2500xf32>, %y: tensor<4100xf32>, %z: tensor<2x2100xbf16>)
    -> (tensor<3x2500xf32>, tensor<f32>, tensor<2xf32>) {
  %s = kiln.fusion reduction (%x) : (tensor<3x2500xf32>) -> tensor<3x2500xf32> {
  ^bb0(%a: tensor<3x2500xf32>):
    %m = kiln.reduce max %a, dims = [1] : tensor<3x2500xf32> -> tensor<3xf32>
    %mb = kiln.broadcast_in_dim %m, dims = [0] : tensor<3xf32> -> tensor<3x2500xf32>
    %d = kiln.sub %a, %mb : tensor<3x2500xf32>
    %e = kiln.exp %d : tensor<3x2500xf32>
    %t = kiln.reduce sum %e, dims = [1] : tensor<3x2500xf32> -> tensor<3xf32>
    %tb = kiln.broadcast_in_dim %t, dims = [0] : tensor<3xf32> -> tensor<3x2500xf32>
    %r = kiln.div %e, %tb : tensor<3x2500xf32>
    kiln.yield %r : tensor<3x2500xf32>
  }
  %t = kiln.fusion reduction (%y) : (tensor<4100xf32>) -> tensor<f32> {
  ^bb0(%a: tensor<4100xf32>):
    %m = kiln.reduce mean %a, dims = [0] : tensor<4100xf32> -> tensor<f32>
    kiln.yield %m : tensor<f32>
  }
  %u = kiln.fusion reduction (%z) : (tensor<2x2100xbf16>) -> tensor<2xf32> {
  ^bb0(%a: tensor<2x2100xbf16>):
    %c = kiln.convert %a : tensor<2x2100xbf16> -> tensor<2x2100xf32>
    %m = kiln.reduce sum %c, dims = [1] : tensor<2x2100xf32> -> tensor<2xf32>
    kiln.yield %m : tensor<2xf32>
  }
  return %s, %t, %u : tensor<3x2500xf32>, tensor<f32>, tensor<2xf32>
}
)mlir";
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(text, &context);
  ASSERT_TRUE(module) << diagnostics;
  uint64_t seed = firstSeed();
  addFusions(*module, "k", seed);
  EXPECT_EQ(layouts["row.block"], 1);
  EXPECT_EQ(layouts["element.block"], 2);
  runAll();
  EXPECT_EQ(ran, 3u) << "seed " << seed;
}

// Independent reductions of the same elements share one pass over the row
// (ElementEmitter::enableSiblingReductions): a layer norm's backward row
// sums (dy * w and dy * w * xhat) beside a sum that depends on one of
// them (which needs a pass of its own), with rows of a warp (200
// columns) and of a block (3000, no row cache, so every pass reads global
// memory). Each pass loads dy (in0) once; the sums match the interpreter.
TEST_F(CudaEmulationTest, IndependentRowSumsShareOnePass) {
  uint64_t seed = firstSeed();
  int i = 0;
  for (auto [columns, layout] :
       {std::pair<int64_t, const char *>{200, "element.warp"},
        std::pair<int64_t, const char *>{3000, "element.block"}}) {
    SCOPED_TRACE(layout);
    std::string full = "tensor<6x" + std::to_string(columns) + "xf32>";
    std::string col = "tensor<" + std::to_string(columns) + "xf32>";
    std::string text =
        "func.func @main(%dy: " + full + ", %x: " + full + ", %w: " + col +
        ", %m: tensor<6xf32>)\n"
        "    -> (tensor<6xf32>, tensor<6xf32>, tensor<6xf32>) {\n"
        "  %r:3 = kiln.fusion multi_output (%dy, %x, %w, %m) : (" +
        full + ", " + full + ", " + col +
        ", tensor<6xf32>) -> (tensor<6xf32>, "
        "tensor<6xf32>, tensor<6xf32>) {\n"
        "  ^bb0(%ady: " +
        full + ", %ax: " + full + ", %aw: " + col +
        ", %am: tensor<6xf32>):\n"
        "    %mb = kiln.broadcast_in_dim %am, dims = [0] : tensor<6xf32> -> " +
        full +
        "\n"
        "    %xh = kiln.sub %ax, %mb : " +
        full +
        "\n"
        "    %wb = kiln.broadcast_in_dim %aw, dims = [1] : " +
        col + " -> " + full +
        "\n"
        "    %g = kiln.mul %ady, %wb : " +
        full +
        "\n"
        "    %s1 = kiln.reduce sum %g, dims = [1] : " +
        full +
        " -> tensor<6xf32>\n"
        "    %gx = kiln.mul %g, %xh : " +
        full +
        "\n"
        "    %s2 = kiln.reduce sum %gx, dims = [1] : " +
        full +
        " -> tensor<6xf32>\n"
        "    %s1b = kiln.broadcast_in_dim %s1, dims = [0] : tensor<6xf32> -> " +
        full +
        "\n"
        "    %d = kiln.sub %g, %s1b : " +
        full +
        "\n"
        "    %dd = kiln.mul %d, %d : " +
        full +
        "\n"
        "    %s3 = kiln.reduce sum %dd, dims = [1] : " +
        full +
        " -> tensor<6xf32>\n"
        "    kiln.yield %s1, %s2, %s3 : tensor<6xf32>, tensor<6xf32>, "
        "tensor<6xf32>\n"
        "  }\n"
        "  return %r#0, %r#1, %r#2 : tensor<6xf32>, tensor<6xf32>, "
        "tensor<6xf32>\n"
        "}\n";
    OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(text, &context);
    ASSERT_TRUE(module) << diagnostics;
    FusionOp fusion;
    module->walk([&](FusionOp f) { fusion = f; });
    ASSERT_TRUE(fusion);
    FailureOr<CudaKernelSource> source = emitCudaKernel(fusion, "probe", 0);
    ASSERT_TRUE(succeeded(source)) << diagnostics;
    EXPECT_EQ(source->layouts, SmallVector<std::string>({layout}));
    // Two passes: s1 with s2, then s3 (from s1); x (in1) only in the first.
    EXPECT_EQ(StringRef(source->source).count("in0["), 2u) << source->source;
    EXPECT_EQ(StringRef(source->source).count("in1["), 1u) << source->source;
    EXPECT_EQ(
        add(fusion, "siblings_" + std::to_string(columns), seed + i, 4, 0), "");
    ++i;
  }
  runAll();
  EXPECT_EQ(ran, 2u) << "seed " << seed;
}

// kiln.dropout's mask (Philox-4x32-10 on each element's row-major index,
// its 32-bit products through __umulhi) is the interpreter's bit for bit:
// f32 alone, bf16 fused with a ReLU and a transpose (each element's index
// is its index in the dropout's own result, not the kernel's), and f16,
// whose kept values round from f64 once (through f32 rounded to odd). The
// kernels also go through NVRTC and ptxas for sm_90.
TEST_F(CudaEmulationTest, DropoutMasksMatchTheInterpreter) {
  const char *text = R"mlir(
func.func @main(%x: tensor<5x300xf32>, %n: tensor<i64>, %y: tensor<7x33xbf16>,
                %z: tensor<9x40xf16>)
    -> (tensor<5x300xf32>, tensor<33x7xbf16>, tensor<9x40xf16>) {
  %a = kiln.fusion loop (%x, %n) : (tensor<5x300xf32>, tensor<i64>) -> tensor<5x300xf32> {
  ^bb0(%v: tensor<5x300xf32>, %c: tensor<i64>):
    %d = kiln.dropout %v, %c, rate = 2.500000e-01, seed = -3 : tensor<5x300xf32>
    kiln.yield %d : tensor<5x300xf32>
  }
  %b = kiln.fusion loop (%y, %n) : (tensor<7x33xbf16>, tensor<i64>) -> tensor<33x7xbf16> {
  ^bb0(%v: tensor<7x33xbf16>, %c: tensor<i64>):
    %r = kiln.relu %v : tensor<7x33xbf16>
    %d = kiln.dropout %r, %c, rate = 6.000000e-01, seed = 123456789012 : tensor<7x33xbf16>
    %t = kiln.transpose %d, permutation = [1, 0] : tensor<7x33xbf16> -> tensor<33x7xbf16>
    kiln.yield %t : tensor<33x7xbf16>
  }
  %c = kiln.fusion loop (%z, %n) : (tensor<9x40xf16>, tensor<i64>) -> tensor<9x40xf16> {
  ^bb0(%v: tensor<9x40xf16>, %k: tensor<i64>):
    %d = kiln.dropout %v, %k, rate = 1.000000e-01, seed = 5 : tensor<9x40xf16>
    kiln.yield %d : tensor<9x40xf16>
  }
  return %a, %b, %c : tensor<5x300xf32>, tensor<33x7xbf16>, tensor<9x40xf16>
}
)mlir";
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(text, &context);
  ASSERT_TRUE(module) << diagnostics;
  uint64_t seed = firstSeed();
  addFusions(*module, "dropout", seed);
  runAll();
  EXPECT_EQ(ran, 3u) << "seed " << seed;
  if (!KILN_TEST_HAS_ASAN)
    assembleAllForSm90();
}

// kiln.random_uniform's numbers are the interpreter's bit for bit: f32
// added to data (each element's index is its index in the op's own result),
// bf16 rounded from f64 once, and a normal drawn from two of them by
// Box-Muller (log, cos, sqrt) beside a reduction of it. The kernels also go
// through NVRTC and ptxas for sm_90.
TEST_F(CudaEmulationTest, RandomUniformMatchesTheInterpreter) {
  const char *text = R"mlir(
func.func @main(%x: tensor<5x300xf32>, %n: tensor<i64>)
    -> (tensor<300x5xf32>, tensor<7x33xbf16>, tensor<6xf32>) {
  %a = kiln.fusion loop (%x, %n) : (tensor<5x300xf32>, tensor<i64>) -> tensor<300x5xf32> {
  ^bb0(%v: tensor<5x300xf32>, %c: tensor<i64>):
    %u = kiln.random_uniform %c, seed = -3 : tensor<5x300xf32>
    %s = kiln.add %v, %u : tensor<5x300xf32>
    %t = kiln.transpose %s, permutation = [1, 0] : tensor<5x300xf32> -> tensor<300x5xf32>
    kiln.yield %t : tensor<300x5xf32>
  }
  %b = kiln.fusion loop (%n) : (tensor<i64>) -> tensor<7x33xbf16> {
  ^bb0(%c: tensor<i64>):
    %u = kiln.random_uniform %c, seed = 123456789012 : tensor<7x33xbf16>
    kiln.yield %u : tensor<7x33xbf16>
  }
  %r = kiln.fusion reduction (%n) : (tensor<i64>) -> tensor<6xf32> {
  ^bb0(%c: tensor<i64>):
    %u1 = kiln.random_uniform %c, seed = 5 : tensor<6x40xf32>
    %u2 = kiln.random_uniform %c, seed = 6 : tensor<6x40xf32>
    %one = kiln.constant dense<1.0> : tensor<6x40xf32>
    %open = kiln.sub %one, %u1 : tensor<6x40xf32>
    %l = kiln.log %open : tensor<6x40xf32>
    %m2 = kiln.constant dense<-2.0> : tensor<6x40xf32>
    %r2 = kiln.mul %l, %m2 : tensor<6x40xf32>
    %radius = kiln.sqrt %r2 : tensor<6x40xf32>
    %tau = kiln.constant dense<6.28318548> : tensor<6x40xf32>
    %angle = kiln.mul %u2, %tau : tensor<6x40xf32>
    %cos = kiln.cos %angle : tensor<6x40xf32>
    %z = kiln.mul %radius, %cos : tensor<6x40xf32>
    %sum = kiln.reduce sum %z, dims = [1] : tensor<6x40xf32> -> tensor<6xf32>
    kiln.yield %sum : tensor<6xf32>
  }
  return %a, %b, %r : tensor<300x5xf32>, tensor<7x33xbf16>, tensor<6xf32>
}
)mlir";
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(text, &context);
  ASSERT_TRUE(module) << diagnostics;
  uint64_t seed = firstSeed();
  addFusions(*module, "random", seed);
  runAll();
  EXPECT_EQ(ran, 3u) << "seed " << seed;
  if (!KILN_TEST_HAS_ASAN)
    assembleAllForSm90();
}

// The vector loads and stores of an elementwise.v4 kernel take only
// addresses aligned to the vector (kiln_vec_at in the prelude): aligned,
// the kernel computes the interpreter's values; handed an input or an
// output one element past an aligned address, the emulation ends naming
// the access, as a GPU faults with a misaligned address (x86 would load
// it, and a wrong vector index would pass unseen).
TEST_F(CudaEmulationTest, VectorAccessesTakeOnlyAlignedAddresses) {
  const char *text = R"mlir(
func.func @main(%x: tensor<256xf32>, %y: tensor<256xf32>) -> tensor<256xf32> {
  %s = kiln.fusion loop (%x, %y) : (tensor<256xf32>, tensor<256xf32>) -> tensor<256xf32> {
  ^bb0(%a: tensor<256xf32>, %b: tensor<256xf32>):
    %m = kiln.mul %a, %b : tensor<256xf32>
    %r = kiln.add %m, %a : tensor<256xf32>
    kiln.yield %r : tensor<256xf32>
  }
  return %s : tensor<256xf32>
}
)mlir";
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(text, &context);
  ASSERT_TRUE(module) << diagnostics;
  uint64_t seed = firstSeed();
  addFusions(*module, "v", seed);
  ASSERT_EQ(layouts["elementwise.v4"], 1);
  runAll();
  ASSERT_EQ(ran, 1u);
  runtime::cuda::testing::HostKernel host = hosts.at("v0");
  // Aligned, with room for one element more.
  KernelBuffer x(257 * 4), y(257 * 4), out(257 * 4);
  float *xs = reinterpret_cast<float *>(x.data()),
        *ys = reinterpret_cast<float *>(y.data()),
        *outs = reinterpret_cast<float *>(out.data());
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  void *loads[] = {xs + 1, ys, outs};
  EXPECT_DEATH(host(loads, 1, 64),
               "vector load address .* is not 16-byte aligned "
               "\\(a GPU faults: misaligned address\\)");
  void *stores[] = {xs, ys, outs + 1};
  EXPECT_DEATH(host(stores, 1, 64),
               "vector store address .* is not 16-byte aligned");
}

// A body too deep for vector lanes (over 512 ops per element) runs an
// element per thread: 8 copies of it would only multiply the code NVRTC
// and ptxas compile (an unrolled GRU's backward was 28,700 lines at 8
// lanes, 34 s). A shallow kernel beside it keeps its 8 bf16 lanes; both
// compute the interpreter's values.
TEST_F(CudaEmulationTest, DeepBodiesRunAnElementPerThread) {
  std::string body;
  std::string last = "%a";
  for (int i = 0; i < 200; ++i) {
    std::string sum = "%s" + std::to_string(i), next = "%t" + std::to_string(i);
    body += "    " + sum + " = kiln.add " + last + ", %b : tensor<1024xbf16>\n";
    body += "    " + next + " = kiln.tanh " + sum + " : tensor<1024xbf16>\n";
    last = next;
  }
  std::string text = R"mlir(
func.func @main(%x: tensor<1024xbf16>, %y: tensor<1024xbf16>) -> (tensor<1024xbf16>, tensor<1024xbf16>) {
  %deep = kiln.fusion loop (%x, %y) : (tensor<1024xbf16>, tensor<1024xbf16>) -> tensor<1024xbf16> {
  ^bb0(%a: tensor<1024xbf16>, %b: tensor<1024xbf16>):
)mlir" + body + "    kiln.yield " +
                     last + R"mlir( : tensor<1024xbf16>
  }
  %shallow = kiln.fusion loop (%x, %y) : (tensor<1024xbf16>, tensor<1024xbf16>) -> tensor<1024xbf16> {
  ^bb0(%a: tensor<1024xbf16>, %b: tensor<1024xbf16>):
    %s = kiln.add %a, %b : tensor<1024xbf16>
    %t = kiln.tanh %s : tensor<1024xbf16>
    kiln.yield %t : tensor<1024xbf16>
  }
  return %deep, %shallow : tensor<1024xbf16>, tensor<1024xbf16>
}
)mlir";
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(text, &context);
  ASSERT_TRUE(module) << diagnostics;
  uint64_t seed = firstSeed();
  addFusions(*module, "deep", seed);
  EXPECT_EQ(layouts["elementwise"], 1);
  EXPECT_EQ(layouts["elementwise.v8"], 1);
  runAll();
  EXPECT_EQ(ran, 2u) << "seed " << seed;
}

// Few column reductions of a few rows each (kiln-split-reductions' second
// stage: a layer norm's 768 scale gradients from 64 partials, here 24 from
// 64 and a bf16 max over 40 rows with an Adam-like update after it): a warp
// per result, the lanes splitting the rows (element.warp). Longer columns
// and many results keep a thread per result (elementwise).
TEST_F(CudaEmulationTest, ColumnReductionsOfFewResultsShareAWarp) {
  const char *text = R"mlir(
func.func @main(%p: tensor<64x24xf32>, %w: tensor<24xf32>, %q: tensor<40x3x5xbf16>,
                %long: tensor<3000x4xf32>)
    -> (tensor<24xf32>, tensor<24xf32>, tensor<3x5xbf16>, tensor<4xf32>) {
  %g:2 = kiln.fusion multi_output (%p, %w) : (tensor<64x24xf32>, tensor<24xf32>) -> (tensor<24xf32>, tensor<24xf32>) {
  ^bb0(%a: tensor<64x24xf32>, %b: tensor<24xf32>):
    %s = kiln.reduce sum %a, dims = [0] : tensor<64x24xf32> -> tensor<24xf32>
    %h = kiln.constant dense<0.5> : tensor<24xf32>
    %t = kiln.mul %s, %h : tensor<24xf32>
    %u = kiln.sub %b, %t : tensor<24xf32>
    kiln.yield %s, %u : tensor<24xf32>, tensor<24xf32>
  }
  %m = kiln.fusion reduction (%q) : (tensor<40x3x5xbf16>) -> tensor<3x5xbf16> {
  ^bb0(%a: tensor<40x3x5xbf16>):
    %r = kiln.reduce max %a, dims = [0] : tensor<40x3x5xbf16> -> tensor<3x5xbf16>
    kiln.yield %r : tensor<3x5xbf16>
  }
  %l = kiln.fusion reduction (%long) : (tensor<3000x4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<3000x4xf32>):
    %r = kiln.reduce sum %a, dims = [0] : tensor<3000x4xf32> -> tensor<4xf32>
    kiln.yield %r : tensor<4xf32>
  }
  return %g#0, %g#1, %m, %l : tensor<24xf32>, tensor<24xf32>, tensor<3x5xbf16>, tensor<4xf32>
}
)mlir";
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(text, &context);
  ASSERT_TRUE(module) << diagnostics;
  uint64_t seed = firstSeed();
  addFusions(*module, "c", seed);
  EXPECT_EQ(layouts["element.warp"], 2);
  EXPECT_EQ(layouts["elementwise"], 1); // 3000 rows: a thread per result
  runAll();
  EXPECT_EQ(ran, 3u) << "seed " << seed;
}

// A long column sum that one thread builds alone accumulates in f64, as the
// CPU's do (ReductionEmitter.cpp): the sum of 16085 copies of one f32 value,
// added in order in f32, was off by 1.8e-4 of itself, past the tolerance
// (the random model of CudaEmulationTest.RandomModelsF32, seed 1717154157).
TEST_F(CudaEmulationTest, OneThreadLongSumsAccumulateInF64) {
  const char *text = R"mlir(
func.func @main(%v: tensor<3xf32>) -> (tensor<16085x1x3xf32>, tensor<1x3xf32>) {
  %r:2 = kiln.fusion reduction (%v) : (tensor<3xf32>) -> (tensor<16085x1x3xf32>, tensor<1x3xf32>) {
  ^bb0(%a: tensor<3xf32>):
    %b = kiln.broadcast_in_dim %a, dims = [2] : tensor<3xf32> -> tensor<16085x1x3xf32>
    %s = kiln.reduce sum %b, dims = [0] : tensor<16085x1x3xf32> -> tensor<1x3xf32>
    kiln.yield %b, %s : tensor<16085x1x3xf32>, tensor<1x3xf32>
  }
  return %r#0, %r#1 : tensor<16085x1x3xf32>, tensor<1x3xf32>
}
)mlir";
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(text, &context);
  ASSERT_TRUE(module) << diagnostics;
  uint64_t seed = firstSeed();
  addFusions(*module, "l", seed);
  runAll();
  EXPECT_EQ(ran, 1u) << "seed " << seed;
}

// Reductions over several dimensions with a middle one kept (a
// convolution's bias gradient or a batch norm's statistics: [N, C, H, W]
// reduced over N, H and W): the lanes of a warp (210 elements per channel)
// or a block (2448) split the flattened reduced index, not only the short
// innermost dimension (6 and 17 columns here, 28 in LeNet-5), so every
// lane walks count / lanes elements. A sum with an update after it, a bf16
// max and a mean, against the interpreter.
TEST_F(CudaEmulationTest, ChannelReductionsSplitEveryReducedDimension) {
  const char *text = R"mlir(
func.func @main(%x: tensor<5x3x7x6xf32>, %p: tensor<3xf32>, %y: tensor<9x2x16x17xbf16>,
                %z: tensor<4x2x40x30xf32>)
    -> (tensor<3xf32>, tensor<3xf32>, tensor<2xbf16>, tensor<2xf32>) {
  %g:2 = kiln.fusion multi_output (%x, %p) : (tensor<5x3x7x6xf32>, tensor<3xf32>) -> (tensor<3xf32>, tensor<3xf32>) {
  ^bb0(%a: tensor<5x3x7x6xf32>, %b: tensor<3xf32>):
    %s = kiln.reduce sum %a, dims = [0, 2, 3] : tensor<5x3x7x6xf32> -> tensor<3xf32>
    %h = kiln.constant dense<0.25> : tensor<3xf32>
    %t = kiln.mul %s, %h : tensor<3xf32>
    %u = kiln.sub %b, %t : tensor<3xf32>
    kiln.yield %s, %u : tensor<3xf32>, tensor<3xf32>
  }
  %m = kiln.fusion reduction (%y) : (tensor<9x2x16x17xbf16>) -> tensor<2xbf16> {
  ^bb0(%a: tensor<9x2x16x17xbf16>):
    %r = kiln.reduce max %a, dims = [0, 2, 3] : tensor<9x2x16x17xbf16> -> tensor<2xbf16>
    kiln.yield %r : tensor<2xbf16>
  }
  %n = kiln.fusion reduction (%z) : (tensor<4x2x40x30xf32>) -> tensor<2xf32> {
  ^bb0(%a: tensor<4x2x40x30xf32>):
    %r = kiln.reduce mean %a, dims = [0, 2, 3] : tensor<4x2x40x30xf32> -> tensor<2xf32>
    kiln.yield %r : tensor<2xf32>
  }
  return %g#0, %g#1, %m, %n : tensor<3xf32>, tensor<3xf32>, tensor<2xbf16>, tensor<2xf32>
}
)mlir";
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(text, &context);
  ASSERT_TRUE(module) << diagnostics;
  uint64_t seed = firstSeed();
  addFusions(*module, "n", seed);
  EXPECT_EQ(layouts["element.warp"], 1);
  EXPECT_EQ(layouts["element.block"], 2);
  // Each reduction is one lane-strided loop over its flattened elements.
  ASSERT_EQ(kernels.size(), 3u);
  EXPECT_NE(kernels[0].source.find("< (kiln_index)210LL"), std::string::npos)
      << kernels[0].source;
  EXPECT_NE(kernels[1].source.find("< (kiln_index)2448LL"), std::string::npos)
      << kernels[1].source;
  EXPECT_NE(kernels[2].source.find("< (kiln_index)4800LL"), std::string::npos)
      << kernels[2].source;
  runAll();
  EXPECT_EQ(ran, 3u) << "seed " << seed;
}

// Scatter rows (an embedding's gradient): a block per result row lists the
// index positions naming its row chunk by chunk (64-thread blocks: chunks
// of 512 positions, so 900 and 1400 positions take several, with rows
// named up to ~40 times) and adds their updates in position order. f32
// rows of 70 columns (two passes of 64, the second partly out of range),
// rows no index names (indices below 30 of 37 rows), a bf16 rank-3 result
// over i64 indices with a zero operand and an epilogue in the fusion, and
// rows of 600 columns (three columns per thread and pass). Against the
// interpreter; each kernel lists positions with kiln_scatter_collect
// instead of scanning every index per element.
TEST_F(CudaEmulationTest, ScatterRowsListTheirPositions) {
  const char *text = R"mlir(
func.func @main(%o: tensor<37x70xf32>, %i: tensor<3x300xi32>, %u: tensor<3x300x70xf32>,
                %j: tensor<2x700xi64>, %v: tensor<2x700x3x40xbf16>,
                %w: tensor<5x600xf32>, %k: tensor<1400xi32>, %x: tensor<1400x600xf32>)
    -> (tensor<37x70xf32>, tensor<30x3x40xbf16>, tensor<5x600xf32>) {
  %a = kiln.fusion loop (%o, %i, %u) : (tensor<37x70xf32>, tensor<3x300xi32>, tensor<3x300x70xf32>) -> tensor<37x70xf32> {
  ^bb0(%oa: tensor<37x70xf32>, %ia: tensor<3x300xi32>, %ua: tensor<3x300x70xf32>):
    %s = kiln.scatter_add %oa, %ia, %ua : (tensor<37x70xf32>, tensor<3x300xi32>, tensor<3x300x70xf32>) -> tensor<37x70xf32>
    kiln.yield %s : tensor<37x70xf32>
  }
  %b = kiln.fusion loop (%j, %v) : (tensor<2x700xi64>, tensor<2x700x3x40xbf16>) -> tensor<30x3x40xbf16> {
  ^bb0(%ja: tensor<2x700xi64>, %va: tensor<2x700x3x40xbf16>):
    %z = kiln.constant dense<0.0> : tensor<30x3x40xf32>
    %vf = kiln.convert %va : tensor<2x700x3x40xbf16> -> tensor<2x700x3x40xf32>
    %s = kiln.scatter_add %z, %ja, %vf : (tensor<30x3x40xf32>, tensor<2x700xi64>, tensor<2x700x3x40xf32>) -> tensor<30x3x40xf32>
    %h = kiln.constant dense<0.25> : tensor<30x3x40xf32>
    %m = kiln.mul %s, %h : tensor<30x3x40xf32>
    %c = kiln.convert %m : tensor<30x3x40xf32> -> tensor<30x3x40xbf16>
    kiln.yield %c : tensor<30x3x40xbf16>
  }
  %c = kiln.fusion loop (%w, %k, %x) : (tensor<5x600xf32>, tensor<1400xi32>, tensor<1400x600xf32>) -> tensor<5x600xf32> {
  ^bb0(%wa: tensor<5x600xf32>, %ka: tensor<1400xi32>, %xa: tensor<1400x600xf32>):
    %s = kiln.scatter_add %wa, %ka, %xa : (tensor<5x600xf32>, tensor<1400xi32>, tensor<1400x600xf32>) -> tensor<5x600xf32>
    kiln.yield %s : tensor<5x600xf32>
  }
  return %a, %b, %c : tensor<37x70xf32>, tensor<30x3x40xbf16>, tensor<5x600xf32>
}
)mlir";
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(text, &context);
  ASSERT_TRUE(module) << diagnostics;
  uint64_t seed = firstSeed();
  addFusions(*module, "s", seed, {30, 30, 5});
  ASSERT_EQ(kernels.size(), 3u);
  EXPECT_EQ(layouts["scatter.block"], 3);
  for (const EmulatedKernel &k : kernels)
    EXPECT_EQ(StringRef(k.source).count("kiln_scatter_collect(in"), 1u) << k.source;
  runAll();
  EXPECT_EQ(ran, 3u) << "seed " << seed;
}

// combine = max and min: scatter rows whose block keeps the largest of its
// row and the updates listed for it (f32 rows of 70 columns), and a rank-1
// result whose elements each scan the indices and keep the smallest (with
// an epilogue). Against the interpreter.
TEST_F(CudaEmulationTest, ScatterMaxAndMin) {
  const char *text = R"mlir(
func.func @main(%o: tensor<37x70xf32>, %i: tensor<3x300xi32>, %u: tensor<3x300x70xf32>,
                %p: tensor<30xf32>, %j: tensor<500xi64>, %v: tensor<500xf32>)
    -> (tensor<37x70xf32>, tensor<30xf32>) {
  %a = kiln.fusion loop (%o, %i, %u) : (tensor<37x70xf32>, tensor<3x300xi32>, tensor<3x300x70xf32>) -> tensor<37x70xf32> {
  ^bb0(%oa: tensor<37x70xf32>, %ia: tensor<3x300xi32>, %ua: tensor<3x300x70xf32>):
    %s = kiln.scatter_add %oa, %ia, %ua combine = max : (tensor<37x70xf32>, tensor<3x300xi32>, tensor<3x300x70xf32>) -> tensor<37x70xf32>
    kiln.yield %s : tensor<37x70xf32>
  }
  %b = kiln.fusion loop (%p, %j, %v) : (tensor<30xf32>, tensor<500xi64>, tensor<500xf32>) -> tensor<30xf32> {
  ^bb0(%pa: tensor<30xf32>, %ja: tensor<500xi64>, %va: tensor<500xf32>):
    %s = kiln.scatter_add %pa, %ja, %va combine = min : (tensor<30xf32>, tensor<500xi64>, tensor<500xf32>) -> tensor<30xf32>
    %t = kiln.tanh %s : tensor<30xf32>
    kiln.yield %t : tensor<30xf32>
  }
  return %a, %b : tensor<37x70xf32>, tensor<30xf32>
}
)mlir";
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(text, &context);
  ASSERT_TRUE(module) << diagnostics;
  uint64_t seed = firstSeed();
  addFusions(*module, "m", seed, {37, 30});
  ASSERT_EQ(kernels.size(), 2u);
  runAll();
  EXPECT_EQ(ran, 2u) << "seed " << seed;
}

// A scatter read through a pad and slices (found by the random models,
// seed 190583443): the rows' layout seeds each row's sums at the indices it
// stores, and the pad and reshapes compute other index values for the
// same element, so every thread scanned all 1199 positions again while
// the kernel reported the rows' chain (302). Such a scatter does not take
// the rows' layout (its chain is then the scan's, as reported); one read
// by elementwise ops still does. Against the interpreter, chains checked.
TEST_F(CudaEmulationTest, ScatterReadThroughAPadIsNotAScatterRowsKernel) {
  const char *text = R"mlir(
func.func @main(%i: tensor<1199xi32>, %u: tensor<1199x1x1xf32>, %o: tensor<4x1x1xf32>)
    -> (tensor<4x1x1xf32>, tensor<4x1x1xf32>) {
  %a = kiln.fusion loop (%i, %u) : (tensor<1199xi32>, tensor<1199x1x1xf32>) -> tensor<4x1x1xf32> {
  ^bb0(%ia: tensor<1199xi32>, %ua: tensor<1199x1x1xf32>):
    %z = kiln.constant dense<0.0> : tensor<4x1x1xf32>
    %s = kiln.scatter_add %z, %ia, %ua : (tensor<4x1x1xf32>, tensor<1199xi32>, tensor<1199x1x1xf32>) -> tensor<4x1x1xf32>
    %r = kiln.reshape %s : tensor<4x1x1xf32> -> tensor<4x1x1x1x1x1xf32>
    %p = kiln.pad %r, low = [0, 0, 0, 0, 0, 0], high = [0, 0, 0, 1, 0, 1], value = 0.0 : tensor<4x1x1x1x1x1xf32> -> tensor<4x1x1x2x1x2xf32>
    %q = kiln.reshape %p : tensor<4x1x1x2x1x2xf32> -> tensor<4x2x2xf32>
    %t = kiln.slice %q, start = [0, 0, 0], limit = [4, 1, 1], strides = [1, 1, 1] : tensor<4x2x2xf32> -> tensor<4x1x1xf32>
    kiln.yield %t : tensor<4x1x1xf32>
  }
  %b = kiln.fusion loop (%o, %i, %u) : (tensor<4x1x1xf32>, tensor<1199xi32>, tensor<1199x1x1xf32>) -> tensor<4x1x1xf32> {
  ^bb0(%oa: tensor<4x1x1xf32>, %ib: tensor<1199xi32>, %ub: tensor<1199x1x1xf32>):
    %s = kiln.scatter_add %oa, %ib, %ub : (tensor<4x1x1xf32>, tensor<1199xi32>, tensor<1199x1x1xf32>) -> tensor<4x1x1xf32>
    %e = kiln.exp %s : tensor<4x1x1xf32>
    %m = kiln.mul %e, %s : tensor<4x1x1xf32>
    kiln.yield %m : tensor<4x1x1xf32>
  }
  return %a, %b : tensor<4x1x1xf32>, tensor<4x1x1xf32>
}
)mlir";
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(text, &context);
  ASSERT_TRUE(module) << diagnostics;
  uint64_t seed = firstSeed();
  checkChains = true;
  addFusions(*module, "p", seed, {4, 4});
  ASSERT_EQ(kernels.size(), 2u);
  EXPECT_EQ(layouts["scatter.block"], 1);
  EXPECT_EQ(StringRef(kernels[0].source).count("kiln_scatter_collect(in"), 0u)
      << kernels[0].source;
  EXPECT_EQ(StringRef(kernels[1].source).count("kiln_scatter_collect(in"), 1u)
      << kernels[1].source;
  runAll();
  EXPECT_EQ(ran, 2u) << "seed " << seed;
}

// A horizontal fusion of independent reductions with epilogues (what
// kiln-fuse's horizontal-reductions packs: the layer norms' split scale
// and bias gradients with their Adam updates): every group of results that
// shares a reduce gets units of its own (element.warp.groups=N), each unit
// building only its group under an if. Groups: an Adam-like update after a
// column sum of 64 partials (three results, one reduce, a rank-0 step
// read by every group), a bf16 column max over 40 rows, and a row sum of
// 100 elements with two results sharing it. 3 groups x 7 results = 21
// units over the 6 warps of the emulated grid (3 blocks of 64 threads):
// the grid-stride loop wraps unevenly. A second fusion has results of
// shape 3x5 (the group's element index delinearized) and 2 groups, a
// third two scalar reductions (one unit per group), a fourth two row
// reductions of 2048+ elements (a block per unit: the block's barriers
// inside one group's branch, which every thread of the block takes).
TEST_F(CudaEmulationTest, HorizontalReductionsGetUnitsPerGroup) {
  const char *text = R"mlir(
func.func @main(%p: tensor<64x7xf32>, %m: tensor<7xf32>, %w: tensor<7xf32>, %t: tensor<f32>,
                %q: tensor<40x7xbf16>, %r: tensor<7x100xf32>,
                %a: tensor<50x3x5xf32>, %b: tensor<3x5x90xf32>, %c: tensor<300xf32>,
                %d: tensor<4x70xf32>, %e: tensor<2x3000xf32>, %f: tensor<2x2500xbf16>)
    -> (tensor<7xf32>, tensor<7xf32>, tensor<7xf32>, tensor<7xbf16>, tensor<7xf32>, tensor<7xf32>,
        tensor<3x5xf32>, tensor<3x5xf32>, tensor<f32>, tensor<f32>, tensor<2xf32>, tensor<2xbf16>) {
  %h:6 = kiln.fusion horizontal (%p, %m, %w, %t, %q, %r) : (tensor<64x7xf32>, tensor<7xf32>, tensor<7xf32>, tensor<f32>, tensor<40x7xbf16>, tensor<7x100xf32>) -> (tensor<7xf32>, tensor<7xf32>, tensor<7xf32>, tensor<7xbf16>, tensor<7xf32>, tensor<7xf32>) {
  ^bb0(%ap: tensor<64x7xf32>, %am: tensor<7xf32>, %aw: tensor<7xf32>, %at: tensor<f32>, %aq: tensor<40x7xbf16>, %ar: tensor<7x100xf32>):
    %g = kiln.reduce sum %ap, dims = [0] : tensor<64x7xf32> -> tensor<7xf32>
    %beta = kiln.constant dense<0.9> : tensor<7xf32>
    %mb = kiln.mul %am, %beta : tensor<7xf32>
    %mn = kiln.add %mb, %g : tensor<7xf32>
    %te = kiln.exp %at : tensor<f32>
    %tb = kiln.broadcast_in_dim %te, dims = [] : tensor<f32> -> tensor<7xf32>
    %sq = kiln.mul %g, %g : tensor<7xf32>
    %den = kiln.add %sq, %tb : tensor<7xf32>
    %st = kiln.div %mn, %den : tensor<7xf32>
    %wn = kiln.sub %aw, %st : tensor<7xf32>
    %mx = kiln.reduce max %aq, dims = [0] : tensor<40x7xbf16> -> tensor<7xbf16>
    %rs = kiln.reduce sum %ar, dims = [1] : tensor<7x100xf32> -> tensor<7xf32>
    %re = kiln.exp %rs : tensor<7xf32>
    kiln.yield %g, %mn, %wn, %mx, %rs, %re : tensor<7xf32>, tensor<7xf32>, tensor<7xf32>, tensor<7xbf16>, tensor<7xf32>, tensor<7xf32>
  }
  %k:2 = kiln.fusion horizontal (%a, %b) : (tensor<50x3x5xf32>, tensor<3x5x90xf32>) -> (tensor<3x5xf32>, tensor<3x5xf32>) {
  ^bb0(%aa: tensor<50x3x5xf32>, %ab: tensor<3x5x90xf32>):
    %ca = kiln.reduce sum %aa, dims = [0] : tensor<50x3x5xf32> -> tensor<3x5xf32>
    %cb = kiln.reduce max %ab, dims = [2] : tensor<3x5x90xf32> -> tensor<3x5xf32>
    kiln.yield %ca, %cb : tensor<3x5xf32>, tensor<3x5xf32>
  }
  %s:2 = kiln.fusion horizontal (%c, %d) : (tensor<300xf32>, tensor<4x70xf32>) -> (tensor<f32>, tensor<f32>) {
  ^bb0(%ac: tensor<300xf32>, %ad: tensor<4x70xf32>):
    %sc = kiln.reduce sum %ac, dims = [0] : tensor<300xf32> -> tensor<f32>
    %sd = kiln.reduce max %ad, dims = [0, 1] : tensor<4x70xf32> -> tensor<f32>
    kiln.yield %sc, %sd : tensor<f32>, tensor<f32>
  }
  %l:2 = kiln.fusion horizontal (%e, %f) : (tensor<2x3000xf32>, tensor<2x2500xbf16>) -> (tensor<2xf32>, tensor<2xbf16>) {
  ^bb0(%ae: tensor<2x3000xf32>, %af: tensor<2x2500xbf16>):
    %le = kiln.reduce sum %ae, dims = [1] : tensor<2x3000xf32> -> tensor<2xf32>
    %lf = kiln.reduce max %af, dims = [1] : tensor<2x2500xbf16> -> tensor<2xbf16>
    kiln.yield %le, %lf : tensor<2xf32>, tensor<2xbf16>
  }
  return %h#0, %h#1, %h#2, %h#3, %h#4, %h#5, %k#0, %k#1, %s#0, %s#1, %l#0, %l#1 : tensor<7xf32>, tensor<7xf32>, tensor<7xf32>, tensor<7xbf16>, tensor<7xf32>, tensor<7xf32>, tensor<3x5xf32>, tensor<3x5xf32>, tensor<f32>, tensor<f32>, tensor<2xf32>, tensor<2xbf16>
}
)mlir";
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(text, &context);
  ASSERT_TRUE(module) << diagnostics;
  uint64_t seed = firstSeed();
  addFusions(*module, "h", seed);
  std::vector<uint64_t> maxBlocks;
  module->walk([&](FusionOp fusion) {
    FailureOr<CudaKernelSource> source = emitCudaKernel(fusion, "again");
    ASSERT_TRUE(succeeded(source));
    maxBlocks.push_back(source->launch.maxBlocks);
  });
  EXPECT_EQ(layouts["element.warp.groups=3"], 1);
  EXPECT_EQ(layouts["element.warp.groups=2"], 2);
  EXPECT_EQ(layouts["element.block.groups=2"], 1);
  // A warp per unit, 8 warps per 256-thread block: 21, 30 and 2 units; a
  // block per unit for rows of 2048+ elements: 2 groups x 2 rows.
  EXPECT_EQ(maxBlocks, (std::vector<uint64_t>{3, 4, 1, 4}));
  ASSERT_EQ(kernels.size(), 4u);
  // Every group's reduction is shared by its unit's lanes (built in its
  // branch, not hoisted out of it for one thread to build alone).
  EXPECT_EQ(StringRef(kernels[0].source).count(", kiln_sum());"), 2u);
  EXPECT_EQ(StringRef(kernels[0].source).count(", kiln_max());"), 1u);
  EXPECT_EQ(StringRef(kernels[2].source).count(", kiln_sum());"), 1u);
  EXPECT_EQ(StringRef(kernels[2].source).count(", kiln_max());"), 1u);
  EXPECT_EQ(StringRef(kernels[3].source).count("= kiln_block_allreduce("), 2u);
  runAll();
  EXPECT_EQ(ran, 4u) << "seed " << seed;
}

// A softmax cross-entropy's loss and logits gradient (the GPT's loss, rows
// of 5000 classes standing in for its 50304) in one multi-output fusion:
// one kernel, the loss built in the gradient's row (a block per row), and
// every pass over a row (the max, the sum of exp, the picked logit, the
// gradient) reads the logits from the row cache in dynamic shared memory,
// which the block fills once per row (kiln_stage_row), so the source reads
// them from global memory in one place.
// Against the interpreter in f32 and bf16, and with no cache budget (the
// kernel then reads the logits in every pass, as before).
std::string crossEntropyFusion(const std::string &t) {
  std::string x = "tensor<4x5000x" + t + ">";
  std::string text =
      "func.func @main(%x: " + x + ", %l: tensor<4xi64>, %g: tensor<4xf32>)\n"
      "    -> (tensor<4xf32>, " + x + ") {\n"
      "  %r:2 = kiln.fusion multi_output (%x, %l, %g) : (" + x +
      ", tensor<4xi64>, tensor<4xf32>) -> (tensor<4xf32>, " + x + ") {\n"
      "  ^bb0(%xa: " + x + ", %la: tensor<4xi64>, %ga: tensor<4xf32>):\n";
  if (t == "f32")
    text += "    %a = kiln.add %xa, %xa : tensor<4x5000xf32>\n";
  else
    text += "    %a = kiln.convert %xa : " + x + " -> tensor<4x5000xf32>\n";
  text += R"mlir(    %m = kiln.reduce max %a, dims = [1] : tensor<4x5000xf32> -> tensor<4xf32>
    %mb = kiln.broadcast_in_dim %m, dims = [0] : tensor<4xf32> -> tensor<4x5000xf32>
    %d = kiln.sub %a, %mb : tensor<4x5000xf32>
    %e = kiln.exp %d : tensor<4x5000xf32>
    %s = kiln.reduce sum %e, dims = [1] : tensor<4x5000xf32> -> tensor<4xf32>
    %ls = kiln.log %s : tensor<4xf32>
    %lse = kiln.add %m, %ls : tensor<4xf32>
    %io = kiln.iota dim = 1 : tensor<4x5000xi64>
    %lb = kiln.broadcast_in_dim %la, dims = [0] : tensor<4xi64> -> tensor<4x5000xi64>
    %eq = kiln.compare eq, %io, %lb : tensor<4x5000xi64>
    %z = kiln.constant dense<0.0> : tensor<4x5000xf32>
    %pk = kiln.select %eq, %a, %z : tensor<4x5000xi1>, tensor<4x5000xf32>
    %ps = kiln.reduce sum %pk, dims = [1] : tensor<4x5000xf32> -> tensor<4xf32>
    %loss = kiln.sub %lse, %ps : tensor<4xf32>
    %sb = kiln.broadcast_in_dim %s, dims = [0] : tensor<4xf32> -> tensor<4x5000xf32>
    %p = kiln.div %e, %sb : tensor<4x5000xf32>
    %one = kiln.constant dense<1.0> : tensor<4x5000xf32>
    %oh = kiln.select %eq, %one, %z : tensor<4x5000xi1>, tensor<4x5000xf32>
    %gp = kiln.sub %p, %oh : tensor<4x5000xf32>
    %gb = kiln.broadcast_in_dim %ga, dims = [0] : tensor<4xf32> -> tensor<4x5000xf32>
    %dl = kiln.mul %gp, %gb : tensor<4x5000xf32>
)mlir";
  if (t == "f32") {
    text += "    kiln.yield %loss, %dl : tensor<4xf32>, " + x + "\n";
  } else {
    text += "    %dlo = kiln.convert %dl : tensor<4x5000xf32> -> " + x + "\n";
    text += "    kiln.yield %loss, %dlo : tensor<4xf32>, " + x + "\n";
  }
  text += "  }\n  return %r#0, %r#1 : tensor<4xf32>, " + x + "\n}\n";
  return text;
}


// A layer norm's backward (dx: two row reductions over C columns) beside
// its scale and bias gradients' first stage, sums over groups of S rows
// (kiln-split-reductions' reshape to [G, S, C]) with an elementwise
// epilogue: the rowgroup.block layout (kiln-fuse's row-group-partials).
// Leading dims [3, 40] (G = 24 of 5 rows), [4, 16] (G = 2 of 32, or 4 of
// 16 with |direct|) and [2, 25] (G = 2 of 25, |direct|);
// C = 70, 200, 300 and 1100 (blocks of 256, 256, 320 and 1024 threads:
// one column per thread, two for 1100); the emulation runs 64-thread
// blocks, so 2, 4, 5 and 9 passes over the columns, the last clamped);
// f32 and bf16 (rows of 1100 in bf16: in f32, dx's cancellation after
// 1100-element sums in another order than the interpreter's can exceed
// the f32 bound). Grid 3: the group loop wraps. Groups of 32 rows are
// built two rows per iteration, groups of 5 one.
// With |groupedInput| (f32), the bias gradient's partials sum a fusion
// input of shape [G, S, C] (as when kiln-fuse leaves the reshape of an
// argument outside), read at the group's indices. With |direct| (S = T),
// the partials sum the row-shaped values [B, T, C] over T themselves, no
// reshape (kiln-split-reductions' reshape of [B, T, C] to [G, S, C] = [B,
// T, C] folds away).
std::string rowGroupFusion(int64_t b, int64_t t, int64_t c, int64_t s,
                           const std::string &dt, bool groupedInput = false,
                           bool direct = false) {
  int64_t g = b * t / s;
  std::string row = std::to_string(b) + "x" + std::to_string(t);
  std::string full = "tensor<" + row + "x" + std::to_string(c) + "xf32>";
  std::string fullIn = "tensor<" + row + "x" + std::to_string(c) + "x" + dt + ">";
  std::string rows = "tensor<" + row + "xf32>";
  std::string col = "tensor<" + std::to_string(c) + "xf32>";
  std::string grouped = "tensor<" + std::to_string(g) + "x" + std::to_string(s) +
                        "x" + std::to_string(c) + "xf32>";
  std::string part = "tensor<" + std::to_string(g) + "x" + std::to_string(c) + "xf32>";
  std::string partOut = "tensor<" + std::to_string(g) + "x" + std::to_string(c) + "x" + dt + ">";
  std::string text;
  llvm::raw_string_ostream os(text);
  std::string extraArg = groupedInput ? ", %dyg: " + grouped : "";
  std::string extraOperand = groupedInput ? ", %dyg" : "";
  std::string extraType = groupedInput ? ", " + grouped : "";
  std::string extraBlockArg = groupedInput ? ", %adyg: " + grouped : "";
  os << "func.func @main(%x: " << fullIn << ", %mean: " << rows << ", %rstd: " << rows
     << ", %w: " << col << ", %dy: " << fullIn << extraArg << ") -> (" << fullIn << ", " << part
     << ", " << partOut << ") {\n"
     << "  %r:3 = kiln.fusion multi_output (%x, %mean, %rstd, %w, %dy" << extraOperand << ") : (" << fullIn
     << ", " << rows << ", " << rows << ", " << col << ", " << fullIn << extraType << ") -> ("
     << fullIn << ", " << part << ", " << partOut << ") {\n"
     << "  ^bb0(%ax: " << fullIn << ", %am: " << rows << ", %ar: " << rows
     << ", %aw: " << col << ", %ady: " << fullIn << extraBlockArg << "):\n"
     << "    %xf = kiln.convert %ax : " << fullIn << " -> " << full << "\n"
     << "    %mb = kiln.broadcast_in_dim %am, dims = [0, 1] : " << rows << " -> " << full << "\n"
     << "    %xc = kiln.sub %xf, %mb : " << full << "\n"
     << "    %rb = kiln.broadcast_in_dim %ar, dims = [0, 1] : " << rows << " -> " << full << "\n"
     << "    %xh = kiln.mul %xc, %rb : " << full << "\n"
     << "    %dyf = kiln.convert %ady : " << fullIn << " -> " << full << "\n"
     << "    %wb = kiln.broadcast_in_dim %aw, dims = [2] : " << col << " -> " << full << "\n"
     << "    %g = kiln.mul %dyf, %wb : " << full << "\n"
     << "    %s1 = kiln.reduce sum %g, dims = [2] : " << full << " -> " << rows << "\n"
     << "    %s1b = kiln.broadcast_in_dim %s1, dims = [0, 1] : " << rows << " -> " << full << "\n"
     << "    %gx = kiln.mul %g, %xh : " << full << "\n"
     << "    %s2 = kiln.reduce sum %gx, dims = [2] : " << full << " -> " << rows << "\n"
     << "    %s2b = kiln.broadcast_in_dim %s2, dims = [0, 1] : " << rows << " -> " << full << "\n"
     << "    %d1 = kiln.sub %g, %s1b : " << full << "\n"
     << "    %d2 = kiln.mul %xh, %s2b : " << full << "\n"
     << "    %d3 = kiln.sub %d1, %d2 : " << full << "\n"
     << "    %dx = kiln.mul %rb, %d3 : " << full << "\n"
     << "    %dxo = kiln.convert %dx : " << full << " -> " << fullIn << "\n"
     << (groupedInput || direct
             ? ""
             : "    %gr = kiln.reshape %dyf : " + full + " -> " + grouped + "\n")
     << "    %pb = kiln.reduce sum "
     << (groupedInput ? "%adyg" : direct ? "%dyf" : "%gr")
     << ", dims = [1] : " << grouped << " -> " << part << "\n"
     << "    %dxh = kiln.mul %dyf, %xh : " << full << "\n"
     << (direct ? ""
                : "    %gw = kiln.reshape %dxh : " + full + " -> " + grouped + "\n")
     << "    %pw = kiln.reduce sum " << (direct ? "%dxh" : "%gw")
     << ", dims = [1] : " << grouped << " -> " << part << "\n"
     << "    %pe = kiln.exp %pw : " << part << "\n"
     << "    %pc = kiln.convert %pe : " << part << " -> " << partOut << "\n"
     << "    kiln.yield %dxo, %pb, %pc : " << fullIn << ", " << part << ", " << partOut << "\n"
     << "  }\n"
     << "  return %r#0, %r#1, %r#2 : " << fullIn << ", " << part << ", " << partOut << "\n"
     << "}\n";
  return os.str();
}

TEST_F(CudaEmulationTest, RowGroupPartialsBesideTheirRows) {
  struct Case {
    int64_t b, t, c, s;
    const char *dt;
    uint64_t groups;
    unsigned blockThreads;
    bool groupedInput = false;
    bool direct = false;
  };
  const Case cases[] = {{3, 40, 70, 5, "f32", 24, 256},
                        {3, 40, 200, 5, "bf16", 24, 256},
                        {4, 16, 200, 32, "f32", 2, 256},
                        {4, 16, 300, 32, "bf16", 2, 320},
                        {3, 40, 1100, 5, "bf16", 24, 1024},
                        {3, 40, 300, 5, "f32", 24, 320, true},
                        {4, 16, 300, 32, "f32", 2, 320, true},
                        {4, 16, 300, 16, "f32", 4, 320, false, true},
                        {2, 25, 200, 25, "bf16", 2, 256, false, true}};
  uint64_t seed = firstSeed();
  std::vector<OwningOpRef<ModuleOp>> modules;
  int i = 0;
  for (const Case &c : cases) {
    modules.push_back(parseSourceString<ModuleOp>(
        rowGroupFusion(c.b, c.t, c.c, c.s, c.dt, c.groupedInput, c.direct),
        &context));
    ASSERT_TRUE(modules.back()) << diagnostics;
    modules.back()->walk([&](FusionOp fusion) {
      EXPECT_EQ(add(fusion, "rg" + std::to_string(i), seed + i, 4), "");
      FailureOr<CudaKernelSource> source = emitCudaKernel(fusion, "again");
      ASSERT_TRUE(succeeded(source));
      EXPECT_EQ(source->launch.maxBlocks, c.groups);
      EXPECT_EQ(source->launch.blockThreads, c.blockThreads);
      EXPECT_EQ(source->layouts, (SmallVector<std::string, 2>{"rowgroup.block"}));
      // A block makes its S rows in order, two per iteration when S is
      // even; per iteration, the elements at the thread's columns of each
      // of its rows (loaded once for both row reductions, dx and the
      // partials) plus the two barriers of the allreduce they all share.
      uint64_t perThread = (c.c + c.blockThreads - 1) / c.blockThreads;
      uint64_t unroll = c.s % 2 == 0 ? 2 : 1;
      EXPECT_EQ(source->serialSteps,
                uint64_t(c.s) / unroll * (unroll * perThread + 2));
      EXPECT_EQ(source->serialThreads, c.groups * c.blockThreads);
    });
    ++i;
  }
  ASSERT_EQ(kernels.size(), std::size(cases));
  for (auto [k, c] : llvm::zip(kernels, cases)) {
    // The two row reductions, block-scope, once each per row of an
    // iteration, in one allreduce of all of them (what used the earlier
    // ones waits for the last).
    size_t unroll = c.s % 2 == 0 ? 2 : 1;
    EXPECT_EQ(StringRef(k.source).count("= kiln_block_allreduce("), 0u) << k.source;
    EXPECT_EQ(StringRef(k.source).count("= kiln_block_allreduce_n("), 1u) << k.source;
    EXPECT_EQ(StringRef(k.source).count(
                  "kiln_tuple<float, " + std::to_string(2 * unroll) + ">{{"),
              1u)
        << k.source;
    // Per row of an iteration, dy (in4) and x (in0) are loaded once per
    // column of the thread for the row's reductions, its results and the
    // partials together (ElementEmitter::setLaneColumns).
    size_t perThread = (c.c + c.blockThreads - 1) / c.blockThreads;
    EXPECT_EQ(StringRef(k.source).count("= in4["), unroll * perThread)
        << k.source;
    // The grouped input (in5), at the group's indices once per column.
    EXPECT_EQ(StringRef(k.source).count("= in5["),
              c.groupedInput ? unroll * perThread : 0)
        << k.source;
    EXPECT_EQ(StringRef(k.source).count("= in0["), unroll * perThread)
        << k.source;
  }
  runAll();
  EXPECT_EQ(ran, std::size(cases)) << "seed " << seed;
}

TEST_F(CudaEmulationTest, WideRowCrossEntropyReadsEachLogitOnce) {
  uint64_t seed = firstSeed();
  int i = 0;
  for (const char *type : {"f32", "bf16"}) {
    SCOPED_TRACE(type);
    OwningOpRef<ModuleOp> module =
        parseSourceString<ModuleOp>(crossEntropyFusion(type), &context);
    ASSERT_TRUE(module) << diagnostics;
    FusionOp fusion;
    module->walk([&](FusionOp f) { fusion = f; });
    ASSERT_TRUE(fusion);
    int64_t elementBytes = std::string(type) == "f32" ? 4 : 2;

    FailureOr<CudaKernelSource> cached = emitCudaKernel(fusion, "probe");
    ASSERT_TRUE(succeeded(cached)) << diagnostics;
    // One slot: the logits' row, in their stored type.
    EXPECT_EQ(cached->dynamicSharedBytes, uint32_t(5000 * elementBytes));
    EXPECT_EQ(cached->cachedInputs, SmallVector<unsigned>({0u}));
    EXPECT_EQ(cached->layouts,
              SmallVector<std::string>({"row.block", "element.block.in-row"}));
    EXPECT_EQ(StringRef(cached->source).count("extern __shared__"), 1u);
    // The logits are read from global memory once per row, by the block's
    // staging copy (kiln_stage_row); every pass loads them from the slot.
    EXPECT_EQ(StringRef(cached->source).count("kiln_stage_row(v"), 1u)
        << cached->source;
    EXPECT_EQ(StringRef(cached->source).count("in0["), 0u) << cached->source;

    // No budget: no cache, every pass loads the logits: three passes, since
    // the row max and the label's pick (independent reductions of the same
    // elements) share one, then the sum of exponentials, then the gradient.
    FailureOr<CudaKernelSource> plain = emitCudaKernel(fusion, "probe", 0);
    ASSERT_TRUE(succeeded(plain)) << diagnostics;
    EXPECT_EQ(plain->dynamicSharedBytes, 0u);
    EXPECT_EQ(StringRef(plain->source).count("__shared__ __align__"), 0u);
    EXPECT_EQ(StringRef(plain->source).count("in0["), 3u) << plain->source;

    // Both run against the interpreter (labels in [0, 5000)).
    EXPECT_EQ(add(fusion, "xent_cached_" + std::string(type), seed + i, 5000), "");
    EXPECT_EQ(add(fusion, "xent_plain_" + std::string(type), seed + i, 5000, 0), "");
    ++i;
  }
  runAll();
  EXPECT_EQ(ran, 4u) << "seed " << seed;
}

// A random layer-norm model shaped like a transformer's: h = x W1 (x an
// input [R..., K], W1 a parameter), through a tanh half the time,
// normalized over its C columns by a layer norm whose scale and bias are
// parameters (one of them an input instead, a third of the time each),
// projected by a parameter W2 to D columns; the loss is the mean of
// z * z * u (u an input), so that the backward pass of the layer norm
// starts from a GEMM's output that depends on the forward one, as in a
// transformer. Rows R = S * 2^k (S from 16 to 32, k from 1 to 4), as one
// or two dimensions, so that kiln-split-reductions sums the scale's and
// bias's gradients in groups of S to 32 rows; C log-uniform from
// 4096 / R (at least 2) to 3000: rows narrower than a warp and wider than
// a block. |what| says which.
std::string randomLayerNormModel(std::mt19937_64 &rng, std::string &what) {
  auto pick = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  int64_t rows = pick(16, 32) << pick(1, 4);
  // At least 4096 elements: kiln-fuse makes siblings of kernels that share
  // an input of 4 KiB or more (sibling-min-bytes; bf16 under mixed
  // precision), and the layer norm's dx and its partials are siblings.
  int64_t minC = std::max<int64_t>(2, (4096 + rows - 1) / rows);
  int64_t c = std::llround(std::exp(std::uniform_real_distribution<double>(
      std::log(double(minC)), std::log(3000.0))(rng)));
  int64_t k = pick(2, 8), d = pick(2, 8);
  SmallVector<int64_t> lead = {rows};
  if (pick(0, 1) && rows % 4 == 0) {
    int64_t b = int64_t(2) << pick(0, 1);
    lead = {b, rows / b};
  }
  bool tanh = pick(0, 1);
  int64_t inputSide = pick(0, 2); // 1: the scale an input, 2: the bias
  int64_t rank = lead.size() + 1;
  auto tensor = [&](ArrayRef<int64_t> leading, int64_t last) {
    std::string t = "tensor<";
    for (int64_t e : leading)
      t += std::to_string(e) + "x";
    return t + std::to_string(last) + "xf32>";
  };
  std::string xType = tensor(lead, k), full = tensor(lead, c), out = tensor(lead, d);
  std::string col = tensor({}, c), w1 = tensor({k}, c), w2 = tensor({c}, d);
  auto param = [](int seed) {
    return "{kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = "
           "uniform, seed = " + std::to_string(seed) + ">}";
  };
  std::string input = "{kiln.role = #kiln.role<input>}";
  std::string all;
  for (int64_t i = 0; i < rank; ++i)
    all += (i ? ", " : "") + std::to_string(i);
  std::string last = std::to_string(rank - 1);
  std::string text;
  llvm::raw_string_ostream os(text);
  os << "module {\n  func.func @main(%x: " << xType << " " << input
     << ", %u: " << out << " " << input << ", %w1: " << w1 << " " << param(1)
     << ", %w2: " << w2 << " " << param(2)
     << ", %s: " << col << " " << (inputSide == 1 ? input : param(3))
     << ", %b: " << col << " " << (inputSide == 2 ? input : param(4))
     << ") -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {\n"
     << "    %h0 = kiln.dot_general %x, %w1, batch = [] x [], contract = ["
     << last << "] x [0] : (" << xType << ", " << w1 << ") -> " << full << "\n"
     << "    %h = kiln." << (tanh ? "tanh" : "neg") << " %h0 : " << full << "\n"
     << "    %y = kiln.layer_norm %h, %s, %b, axis = " << last
     << ", epsilon = 1.000000e-05 : " << full << ", " << col << "\n"
     << "    %z = kiln.dot_general %y, %w2, batch = [] x [], contract = ["
     << last << "] x [0] : (" << full << ", " << w2 << ") -> " << out << "\n"
     << "    %zz = kiln.mul %z, %z : " << out << "\n"
     << "    %e = kiln.mul %zz, %u : " << out << "\n"
     << "    %l = kiln.reduce mean %e, dims = [" << all << "] : " << out
     << " -> tensor<f32>\n"
     << "    return %l : tensor<f32>\n  }\n}\n";
  what = "layer norm over " + full + (tanh ? " after a tanh" : "") +
         (inputSide == 1   ? ", its scale an input"
          : inputSide == 2 ? ", its bias an input"
                           : "");
  return os.str();
}

// Random layer-norm models' training steps, in f32 and with bf16 mixed
// precision: the layer norm's dx kernel sums the scale's and the bias's
// gradients over groups of rows beside its own rows (the rowgroup.block
// layout, kiln-fuse's row-group partials), on shapes the zoo's models and
// the hand-written fusion above do not have. Every kernel of each step
// runs against the interpreter; the chains are checked.
TEST_F(CudaEmulationTest, RandomLayerNormStepsMakeRowGroups) {
  uint64_t seed = firstSeed();
  std::mt19937_64 rng(seed);
  checkChains = true;
  const int count = KILN_TEST_HAS_ASAN ? 4 : 8;
  for (int i = 0; i < count; ++i) {
    std::string what;
    std::string text = randomLayerNormModel(rng, what);
    AmpMode amp = i % 2 ? AmpMode::bf16 : AmpMode::off;
    what += amp == AmpMode::off ? ", f32" : ", bf16";
    SCOPED_TRACE(what);
    OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(text, &context);
    ASSERT_TRUE(module) << diagnostics << text;
    PipelineOptions options;
    options.target = TargetKind::cuda;
    options.gemmBiasGradients = true;
    options.splitMinRows = 32;
    options.amp = amp;
    int before = layouts["rowgroup.block"];
    addPackaged(*module, options, seed + 100 * i, /*intBound=*/4);
    if (HasFatalFailure())
      return;
    EXPECT_EQ(layouts["rowgroup.block"], before + 1) << what;
  }
  runAll();
  if (KILN_TEST_HAS_ASAN)
    std::printf("not assembled for sm_90 under AddressSanitizer\n");
  else
    assembleAllForSm90();
  EXPECT_EQ(ran, kernels.size()) << "seed " << seed;
  std::string reached;
  for (const auto &[layout, n] : layouts)
    reached += " " + layout + " x" + std::to_string(n);
  std::printf("%zu kernels of %d layer-norm steps; layouts:%s\n", ran, count,
              reached.c_str());
}

// Random graphs: every fusion kind kiln-fuse forms for CUDA from chains,
// diamonds, broadcasts, transposes, slices, pads and reductions over any
// dimensions of odd extents (rows wider than a warp and than a block).
TEST_F(CudaEmulationTest, RandomGraphsF64) { checkRandom(DType::f64, std::nullopt, 20); }

TEST_F(CudaEmulationTest, RandomGraphsF32) { checkRandom(DType::f32, std::nullopt, 20); }

// Their training steps: the kernels autodiff and the optimizer produce
// (gradients of broadcasts, slices, pads, transposes, reductions, layer
// norms; Adam's updates), in f32 and with bf16 mixed precision.
TEST_F(CudaEmulationTest, RandomModelsF32) { checkRandom(DType::f32, AmpMode::off, 10); }

TEST_F(CudaEmulationTest, RandomModelsBF16) { checkRandom(DType::f32, AmpMode::bf16, 10); }

} // namespace
