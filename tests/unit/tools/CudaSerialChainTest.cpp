//===- CudaSerialChainTest.cpp - the chains a CUDA kernel's threads walk ----===//
//
// The chain the CUDA emitter reports for the layouts it chose
// (CudaKernelSource::serialSteps and serialThreads,
// codegen/cuda/CudaEmitter.h), which kiln inspect --roofline prices by
// memory latency, against chains worked out by hand: a column reduction
// gives one thread per result all its rows; a row reduction is shared by
// a warp's 32 lanes, or a block's 256 threads from 2048 elements on; the
// longest chain of a step's kernels wins; a horizontal fusion's
// independent groups each bring threads of their own; and, for every
// kernel of the zoo's steps, against the chain read off its loops.
//
//===----------------------------------------------------------------------===//

#include "codegen/cuda/CudaEmitter.h"
#include "tests/unit/cuda/LoopChain.h"
#include "passes/Pipelines.h"
#include "tools/kiln/lib/ModuleLoader.h"
#include "tools/kiln/lib/Zoo.h"

#include "ir/KilnOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

namespace kiln::cli {
namespace {

class CudaSerialChainTest : public ::testing::Test {
protected:
  CudaSerialChainTest() {
    mlir::DialectRegistry registry;
    registerKilnDialects(registry);
    context.appendDialectRegistry(registry);
  }
  // The longest chain of element loads one thread of |fusion|'s kernel
  // makes in order, and how many threads make such chains; {0, 0} without
  // reductions or scatters.
  static std::pair<uint64_t, uint64_t> chainOfFusion(FusionOp fusion) {
    CudaKernelSource kernel;
    EXPECT_TRUE(mlir::succeeded(
        buildCudaKernelModule(fusion, kernel, /*rowCacheBytes=*/0)));
    return {kernel.serialSteps, kernel.serialThreads};
  }
  // The longest chain of the module's fusions (on a tie, the one fewer
  // threads make).
  std::pair<uint64_t, uint64_t> chainOf(const char *body) {
    module = mlir::parseSourceString<mlir::ModuleOp>(body, &context);
    EXPECT_TRUE(module);
    std::pair<uint64_t, uint64_t> longest{0, 0};
    if (module)
      module->walk([&](FusionOp fusion) {
        auto chain = chainOfFusion(fusion);
        if (chain.first > longest.first ||
            (chain.first == longest.first && chain.second < longest.second))
          longest = chain;
      });
    return longest;
  }
  mlir::MLIRContext context;
  mlir::OwningOpRef<mlir::ModuleOp> module;
};

TEST_F(CudaSerialChainTest, ColumnReductionIsOneThreadPerResult) {
  // A layer norm's scale gradient: 768 threads, 8192 rows each.
  auto [steps, threads] = chainOf(R"mlir(
    func.func @f(%x: tensor<8x1024x768xf32>) -> tensor<768xf32> {
      %r = kiln.fusion reduction (%x) : (tensor<8x1024x768xf32>) -> tensor<768xf32> {
      ^bb0(%a: tensor<8x1024x768xf32>):
        %s = kiln.reduce sum %a, dims = [0, 1] : tensor<8x1024x768xf32> -> tensor<768xf32>
        kiln.yield %s : tensor<768xf32>
      }
      return %r : tensor<768xf32>
    })mlir");
  EXPECT_EQ(steps, 8192u);
  EXPECT_EQ(threads, 768u);
}

TEST_F(CudaSerialChainTest, SplitStagesAreShort) {
  // kiln-split-reductions' stages, two kernels: 64 x 768 threads over 128
  // rows, then a warp per result over 64 partials (2 loads a lane); the
  // longer chain is the first's.
  auto [steps, threads] = chainOf(R"mlir(
    func.func @f(%x: tensor<64x128x768xf32>) -> tensor<768xf32> {
      %p = kiln.fusion reduction (%x) : (tensor<64x128x768xf32>) -> tensor<64x768xf32> {
      ^bb0(%a: tensor<64x128x768xf32>):
        %s = kiln.reduce sum %a, dims = [1] : tensor<64x128x768xf32> -> tensor<64x768xf32>
        kiln.yield %s : tensor<64x768xf32>
      }
      %r = kiln.fusion reduction (%p) : (tensor<64x768xf32>) -> tensor<768xf32> {
      ^bb0(%a: tensor<64x768xf32>):
        %s = kiln.reduce sum %a, dims = [0] : tensor<64x768xf32> -> tensor<768xf32>
        kiln.yield %s : tensor<768xf32>
      }
      return %r : tensor<768xf32>
    })mlir");
  EXPECT_EQ(steps, 128u);
  EXPECT_EQ(threads, 64u * 768u);
}

TEST_F(CudaSerialChainTest, RowReductionsAreShared) {
  // A warp per 768-element row: 24 steps per lane. A block per 50304-
  // element row (the logits): 197 steps per thread, 256 threads per row.
  auto [warpSteps, warpThreads] = chainOf(R"mlir(
    func.func @f(%x: tensor<8192x768xf32>) -> tensor<8192xf32> {
      %r = kiln.fusion reduction (%x) : (tensor<8192x768xf32>) -> tensor<8192xf32> {
      ^bb0(%a: tensor<8192x768xf32>):
        %m = kiln.reduce max %a, dims = [1] : tensor<8192x768xf32> -> tensor<8192xf32>
        kiln.yield %m : tensor<8192xf32>
      }
      return %r : tensor<8192xf32>
    })mlir");
  EXPECT_EQ(warpSteps, 24u);
  EXPECT_EQ(warpThreads, 8192u * 32u);
  auto [blockSteps, blockThreads] = chainOf(R"mlir(
    func.func @f(%x: tensor<16x50304xbf16>) -> tensor<16xf32> {
      %r = kiln.fusion reduction (%x) : (tensor<16x50304xbf16>) -> tensor<16xf32> {
      ^bb0(%a: tensor<16x50304xbf16>):
        %c = kiln.convert %a : tensor<16x50304xbf16> -> tensor<16x50304xf32>
        %s = kiln.reduce sum %c, dims = [1] : tensor<16x50304xf32> -> tensor<16xf32>
        kiln.yield %s : tensor<16xf32>
      }
      return %r : tensor<16xf32>
    })mlir");
  EXPECT_EQ(blockSteps, (50304u + 255u) / 256u);
  EXPECT_EQ(blockThreads, 16u * 256u);
}

TEST_F(CudaSerialChainTest, HorizontalGroupsHaveThreadsOfTheirOwn) {
  // kiln-fuse's horizontal-reductions: independent second stages of split
  // scale gradients in one horizontal fusion, each group a warp per
  // result (cudaColumnReductionLanes: 768 results, 256 or 64 rows). The
  // longest chain is 256 / 32 = 8 loads; every group's warps run at once:
  // three groups of 768 x 32 threads (the two results of the first share
  // one reduce: one group). The same body as a multi_output fusion is one
  // group: one reduction's threads.
  const char *body = R"mlir(
    func.func @f(%a: tensor<256x768xf32>, %b: tensor<256x768xf32>, %c: tensor<64x768xf32>)
        -> (tensor<768xf32>, tensor<768xf32>, tensor<768xf32>, tensor<768xf32>) {
      %r:4 = kiln.fusion KIND (%a, %b, %c) : (tensor<256x768xf32>, tensor<256x768xf32>, tensor<64x768xf32>) -> (tensor<768xf32>, tensor<768xf32>, tensor<768xf32>, tensor<768xf32>) {
      ^bb0(%x: tensor<256x768xf32>, %y: tensor<256x768xf32>, %z: tensor<64x768xf32>):
        %s = kiln.reduce sum %x, dims = [0] : tensor<256x768xf32> -> tensor<768xf32>
        %e = kiln.exp %s : tensor<768xf32>
        %t = kiln.reduce sum %y, dims = [0] : tensor<256x768xf32> -> tensor<768xf32>
        %u = kiln.reduce max %z, dims = [0] : tensor<64x768xf32> -> tensor<768xf32>
        kiln.yield %s, %e, %t, %u : tensor<768xf32>, tensor<768xf32>, tensor<768xf32>, tensor<768xf32>
      }
      return %r#0, %r#1, %r#2, %r#3 : tensor<768xf32>, tensor<768xf32>, tensor<768xf32>, tensor<768xf32>
    })mlir";
  auto chainOfKind = [&](const std::string &kind) {
    std::string text = body;
    text.replace(text.find("KIND"), 4, kind);
    module = mlir::parseSourceString<mlir::ModuleOp>(text, &context);
    EXPECT_TRUE(module);
    std::pair<uint64_t, uint64_t> chain;
    if (module)
      module->walk([&](FusionOp fusion) { chain = chainOfFusion(fusion); });
    return chain;
  };
  auto [steps, threads] = chainOfKind("horizontal");
  EXPECT_EQ(steps, 8u);
  EXPECT_EQ(threads, 3u * 768u * 32u);
  auto [oneSteps, oneThreads] = chainOfKind("multi_output");
  EXPECT_EQ(oneSteps, 8u);
  EXPECT_EQ(oneThreads, 768u * 32u);
}

TEST_F(CudaSerialChainTest, ScatterRowsScanInChunks) {
  // An embedding's gradient, 8192 positions into 50304 rows: a block per
  // row, two steps per chunk of 2048 positions (4 chunks) plus the row's
  // matches (8192 / 50304: 1). A rank-1 scatter takes no row layout: every
  // element's thread scans all 8192 positions.
  auto [steps, threads] = chainOf(R"mlir(
    func.func @f(%i: tensor<8x1024xi32>, %u: tensor<8x1024x768xf32>) -> tensor<50304x768xf32> {
      %r = kiln.fusion loop (%i, %u) : (tensor<8x1024xi32>, tensor<8x1024x768xf32>) -> tensor<50304x768xf32> {
      ^bb0(%a: tensor<8x1024xi32>, %b: tensor<8x1024x768xf32>):
        %z = kiln.constant dense<0.0> : tensor<50304x768xf32>
        %s = kiln.scatter_add %z, %a, %b : (tensor<50304x768xf32>, tensor<8x1024xi32>, tensor<8x1024x768xf32>) -> tensor<50304x768xf32>
        kiln.yield %s : tensor<50304x768xf32>
      }
      return %r : tensor<50304x768xf32>
    })mlir");
  EXPECT_EQ(steps, 2u * 4u + 1u);
  EXPECT_EQ(threads, 50304u * 256u);
  auto [flatSteps, flatThreads] = chainOf(R"mlir(
    func.func @f(%i: tensor<8192xi32>, %u: tensor<8192xf32>) -> tensor<1000xf32> {
      %r = kiln.fusion loop (%i, %u) : (tensor<8192xi32>, tensor<8192xf32>) -> tensor<1000xf32> {
      ^bb0(%a: tensor<8192xi32>, %b: tensor<8192xf32>):
        %z = kiln.constant dense<0.0> : tensor<1000xf32>
        %s = kiln.scatter_add %z, %a, %b : (tensor<1000xf32>, tensor<8192xi32>, tensor<8192xf32>) -> tensor<1000xf32>
        kiln.yield %s : tensor<1000xf32>
      }
      return %r : tensor<1000xf32>
    })mlir");
  EXPECT_EQ(flatSteps, 8192u);
  EXPECT_EQ(flatThreads, 1000u);
}

// Every kernel of the zoo's steps as `kiln compile --target=cuda:sm_90`
// builds them (LeNet-5 at its batch of 128, the MLP at 128 and at 1, a
// small GPT; f32 and bf16): the chain its loops walk is never longer than the chain recorded
// for the roofline, and for the warp and block layouts, whose lanes
// share each unit's reductions, it is the recorded chain exactly. (The
// scatter-rows and row-group layouts record barrier steps besides their
// loads; an elementwise thread's unrolled row sums keep several
// independent chains.) LeNet-5's bias gradients once split only their
// innermost dimension (28 columns) over a block's 256 threads: 3584
// steps a thread against the 392 recorded.
TEST_F(CudaSerialChainTest, TheLoopsWalkTheChainsRecorded) {
  GptOptions gpt;
  gpt.layers = 2;
  gpt.hidden = 128;
  gpt.heads = 2;
  gpt.seq = 128;
  gpt.vocab = 4096; // the loss rows take a block each
  gpt.batch = 4;
  // A batch of one: the loss is one row, [1, 10], which its warp's lanes
  // still share (its indices are all constant, and the emitter once hoisted
  // its reductions out of the unit loop: every thread walked the row).
  MlpOptions single;
  single.batch = 1;
  int checkedShared = 0, checked = 0;
  for (AmpMode amp : {AmpMode::off, AmpMode::bf16})
    for (int model = 0; model < 4; ++model) {
      mlir::OwningOpRef<mlir::ModuleOp> m =
          model == 0   ? buildLeNet5(&context, LeNet5Options())
          : model == 1 ? buildMlp(&context, MlpOptions())
          : model == 2 ? buildGpt(&context, gpt)
                       : buildMlp(&context, single);
      ASSERT_TRUE(m);
      PipelineOptions options;
      options.amp = amp;
      options.target = kiln::TargetKind::cuda;
      options.cudaArch = 90;
      ASSERT_TRUE(mlir::succeeded(runCompilePipeline(*m, options)));
      m->walk([&](FusionOp fusion) {
        if (fusion.getKind() == FusionKind::gemm)
          return;
        CudaKernelSource kernel;
        auto built = buildCudaKernelModule(fusion, kernel, /*rowCacheBytes=*/0);
        ASSERT_TRUE(mlir::succeeded(built));
        uint64_t walked = test::loopChain(**built, kernel.launch.blockThreads);
        std::string layouts = llvm::join(kernel.layouts, ",");
        std::string what = "model " + std::to_string(model) + " amp " +
                           std::to_string(int(amp)) + " layouts " + layouts;
        EXPECT_LE(walked, std::max<uint64_t>(kernel.serialSteps, 1)) << what;
        bool shared = test::lanesShareEveryUnit(kernel.layouts);
        if (shared) {
          EXPECT_EQ(walked, kernel.serialSteps) << what;
          ++checkedShared;
        }
        ++checked;
      });
    }
  EXPECT_GT(checked, 40);
  EXPECT_GT(checkedShared, 8);
}

TEST_F(CudaSerialChainTest, NoReductionNoChain) {
  auto [steps, threads] = chainOf(R"mlir(
    func.func @f(%x: tensor<8192x768xf32>) -> tensor<8192x768xf32> {
      %y = kiln.fusion loop (%x) : (tensor<8192x768xf32>) -> tensor<8192x768xf32> {
      ^bb0(%a: tensor<8192x768xf32>):
        %e = kiln.exp %a : tensor<8192x768xf32>
        kiln.yield %e : tensor<8192x768xf32>
      }
      return %y : tensor<8192x768xf32>
    })mlir");
  EXPECT_EQ(steps, 0u);
  EXPECT_EQ(threads, 0u);
}

} // namespace
} // namespace kiln::cli
