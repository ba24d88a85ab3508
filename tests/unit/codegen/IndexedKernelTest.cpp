//===- IndexedKernelTest.cpp - gather, scatter_add and max pooling kernels -===//
//
// CPU kernels of kiln.gather, kiln.scatter_add (adding, max and min),
// kiln.max_pool2d and kiln.max_pool2d_grad (codegen/IndexedEmitter.cpp),
// each as the one-op
// fusion a package builds for a top-level op (buildSingleOpFusion), against
// the reference interpreter. Inputs are drawn from few values so that
// pooling windows hold ties (the first maximum in row-major order wins) and
// indices repeat (scatter_add accumulates); some pooling inputs hold NaN and
// -inf, and windows overlap or reach into the padding. Each kernel also runs
// split into 3 parts, which must give the same bytes. f32 must agree to
// 1e-5 relative scaled by max(1, |x|), f64 to 1e-12; NaN must stay NaN. Set
// KILN_CODEGEN_SEED to rerun one seed.
//
//===----------------------------------------------------------------------===//

#include "codegen/GemmEpilogue.h"
#include "codegen/cpu/LowerToLLVM.h"
#include "tests/unit/codegen/KernelTestSupport.h"

#include "ir/Interpreter.h"
#include "ir/KilnOps.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

namespace {

using namespace mlir;
using namespace kiln;
using codegen_test::baseSeed;

class IndexedKernelTest : public codegen_test::KernelTestBase {
protected:
  // Inputs: floats from {-1, 0, 1, 2} (and, with |specials|, some NaN and
  // -inf), integers in [0, |intBound|).
  HostTensor input(RankedTensorType type, std::mt19937_64 &rng,
                   int64_t intBound, bool specials) {
    DType dtype;
    EXPECT_TRUE(dtypeOfTensor(type, dtype));
    HostTensor t(dtype, type.getShape());
    std::uniform_int_distribution<int> pick(0, 39);
    std::uniform_int_distribution<int64_t> integer(0, intBound - 1);
    for (double &v : t.values()) {
      if (!isFloat(dtype)) {
        v = integer(rng);
        continue;
      }
      int p = pick(rng);
      v = specials && p == 0   ? std::nan("")
          : specials && p == 1 ? -INFINITY
                               : p % 4 - 1;
    }
    return t;
  }

  // The first op of @main in |text|, wrapped into a fusion and compiled,
  // against the interpreter.
  void checkOp(const char *text, int64_t intBound, bool specials) {
    OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(text, &context);
    ASSERT_TRUE(module) << diagnostics;
    Operation *op = nullptr;
    module->walk([&](Operation *o) {
      if (!op && o->getDialect() && o->getDialect()->getNamespace() == "kiln")
        op = o;
    });
    ASSERT_TRUE(op);
    FusionOp fusion;
    FailureOr<OwningOpRef<ModuleOp>> wrapped = buildSingleOpFusion(op, fusion);
    ASSERT_TRUE(succeeded(wrapped)) << diagnostics;
    FailureOr<CompiledKernel> kernel = compileLoopFusion(fusion);
    ASSERT_TRUE(succeeded(kernel)) << diagnostics;
    for (uint64_t seed = baseSeed(), i = 0; i < 4; ++i, ++seed) {
      std::mt19937_64 rng(seed);
      std::vector<HostTensor> inputs;
      for (Value operand : op->getOperands())
        inputs.push_back(input(cast<RankedTensorType>(operand.getType()), rng,
                               intBound, specials));
      llvm::SmallVector<HostTensor> expected;
      Interpreter interpreter;
      ASSERT_TRUE(succeeded(interpreter.evaluate(op, inputs, expected)))
          << diagnostics;
      HostTensor actual(expected[0].dtype(), expected[0].shape(), 12345.0);
      llvm::SmallVector<const HostTensor *> inputPtrs;
      for (const HostTensor &t : inputs)
        inputPtrs.push_back(&t);
      std::string error;
      HostTensor *out = &actual;
      ASSERT_TRUE(succeeded(kernel->run(inputPtrs, {out}, &error))) << error;
      EXPECT_EQ(compare(expected[0], actual), "") << "seed " << seed;

      // Parts: raw f32 buffers, 3 parts against 1.
      if (expected[0].dtype() != DType::f32)
        continue;
      std::vector<std::vector<float>> raw;
      std::vector<std::vector<int32_t>> rawInts;
      std::vector<void *> buffers;
      raw.reserve(inputs.size() + 2);
      rawInts.reserve(inputs.size());
      for (const HostTensor &t : inputs) {
        if (t.dtype() == DType::f32) {
          raw.emplace_back(t.values().begin(), t.values().end());
          buffers.push_back(raw.back().data());
        } else {
          ASSERT_EQ(t.dtype(), DType::i32);
          rawInts.emplace_back(t.values().begin(), t.values().end());
          buffers.push_back(rawInts.back().data());
        }
      }
      std::vector<float> whole(actual.size(), 7.0f), split(actual.size(), 9.0f);
      buffers.push_back(whole.data());
      kernel->runRaw(buffers, 0, 1);
      buffers.back() = split.data();
      for (int64_t part = 0; part < 3; ++part)
        kernel->runRaw(buffers, part, 3);
      EXPECT_EQ(std::memcmp(whole.data(), split.data(), whole.size() * 4), 0)
          << "seed " << seed;
    }
  }
};

TEST_F(IndexedKernelTest, Gather) {
  checkOp(R"mlir(
    func.func @main(%t: tensor<7x3x5xf32>, %i: tensor<4x6xi32>) -> tensor<4x6x3x5xf32> {
      %r = kiln.gather %t, %i : (tensor<7x3x5xf32>, tensor<4x6xi32>) -> tensor<4x6x3x5xf32>
      return %r : tensor<4x6x3x5xf32>
    })mlir", 7, false);
}

TEST_F(IndexedKernelTest, GatherF64) {
  checkOp(R"mlir(
    func.func @main(%t: tensor<9x4xf64>, %i: tensor<11xi64>) -> tensor<11x4xf64> {
      %r = kiln.gather %t, %i : (tensor<9x4xf64>, tensor<11xi64>) -> tensor<11x4xf64>
      return %r : tensor<11x4xf64>
    })mlir", 9, false);
}

// 24 indices into 5 rows: most rows get several updates.
TEST_F(IndexedKernelTest, ScatterAddAccumulatesRepeatedIndices) {
  checkOp(R"mlir(
    func.func @main(%o: tensor<5x8xf32>, %i: tensor<4x6xi32>, %u: tensor<4x6x8xf32>) -> tensor<5x8xf32> {
      %r = kiln.scatter_add %o, %i, %u : (tensor<5x8xf32>, tensor<4x6xi32>, tensor<4x6x8xf32>) -> tensor<5x8xf32>
      return %r : tensor<5x8xf32>
    })mlir", 5, false);
}

// combine = max and min over repeated indices, with ties, NaN (which wins)
// and -inf among the values: rows of a rank-2 result (the tiled scatter)
// and elements of a rank-1 one (each scanning every index).
TEST_F(IndexedKernelTest, ScatterMaxAndMin) {
  checkOp(R"mlir(
    func.func @main(%o: tensor<5x8xf32>, %i: tensor<4x6xi32>, %u: tensor<4x6x8xf32>) -> tensor<5x8xf32> {
      %r = kiln.scatter_add %o, %i, %u combine = max : (tensor<5x8xf32>, tensor<4x6xi32>, tensor<4x6x8xf32>) -> tensor<5x8xf32>
      return %r : tensor<5x8xf32>
    })mlir",
          5, true);
  checkOp(R"mlir(
    func.func @main(%o: tensor<5x8xf32>, %i: tensor<4x6xi32>, %u: tensor<4x6x8xf32>) -> tensor<5x8xf32> {
      %r = kiln.scatter_add %o, %i, %u combine = min : (tensor<5x8xf32>, tensor<4x6xi32>, tensor<4x6x8xf32>) -> tensor<5x8xf32>
      return %r : tensor<5x8xf32>
    })mlir",
          5, true);
  checkOp(R"mlir(
    func.func @main(%o: tensor<7xf64>, %i: tensor<12xi64>, %u: tensor<12xf64>) -> tensor<7xf64> {
      %r = kiln.scatter_add %o, %i, %u combine = max : (tensor<7xf64>, tensor<12xi64>, tensor<12xf64>) -> tensor<7xf64>
      return %r : tensor<7xf64>
    })mlir",
          7, true);
  checkOp(R"mlir(
    func.func @main(%o: tensor<7xf32>, %i: tensor<3x4xi32>, %u: tensor<3x4xf32>) -> tensor<7xf32> {
      %r = kiln.scatter_add %o, %i, %u combine = min : (tensor<7xf32>, tensor<3x4xi32>, tensor<3x4xf32>) -> tensor<7xf32>
      return %r : tensor<7xf32>
    })mlir",
          7, true);
}

// combine = prod over repeated indices: rows of a rank-2 result (the tiled
// scatter) in f32 and elements of a rank-1 i32 one (about 7 factors in
// [0, 9) each, so some products are 0 and others not).
TEST_F(IndexedKernelTest, ScatterProd) {
  checkOp(R"mlir(
    func.func @main(%o: tensor<5x8xf32>, %i: tensor<4x6xi32>, %u: tensor<4x6x8xf32>) -> tensor<5x8xf32> {
      %r = kiln.scatter_add %o, %i, %u combine = prod : (tensor<5x8xf32>, tensor<4x6xi32>, tensor<4x6x8xf32>) -> tensor<5x8xf32>
      return %r : tensor<5x8xf32>
    })mlir",
          5, false);
  checkOp(R"mlir(
    func.func @main(%o: tensor<9xi32>, %i: tensor<60xi64>, %u: tensor<60xi32>) -> tensor<9xi32> {
      %r = kiln.scatter_add %o, %i, %u combine = prod : (tensor<9xi32>, tensor<60xi64>, tensor<60xi32>) -> tensor<9xi32>
      return %r : tensor<9xi32>
    })mlir",
          9, false);
}

TEST_F(IndexedKernelTest, MaxPool) {
  checkOp(R"mlir(
    func.func @main(%x: tensor<2x3x8x8xf32>) -> tensor<2x3x4x4xf32> {
      %r = kiln.max_pool2d %x, window = [2, 2], strides = [2, 2], padding = [0, 0, 0, 0] : tensor<2x3x8x8xf32> -> tensor<2x3x4x4xf32>
      return %r : tensor<2x3x4x4xf32>
    })mlir", 1, true);
}

// Overlapping 3x3 windows, stride 2 by 1, asymmetric padding.
TEST_F(IndexedKernelTest, MaxPoolOverlappingPadded) {
  checkOp(R"mlir(
    func.func @main(%x: tensor<2x2x7x6xf32>) -> tensor<2x2x4x6xf32> {
      %r = kiln.max_pool2d %x, window = [3, 3], strides = [2, 1], padding = [1, 1, 2, 0] : tensor<2x2x7x6xf32> -> tensor<2x2x4x6xf32>
      return %r : tensor<2x2x4x6xf32>
    })mlir", 1, true);
}

TEST_F(IndexedKernelTest, MaxPoolGrad) {
  checkOp(R"mlir(
    func.func @main(%x: tensor<2x3x8x8xf32>, %dy: tensor<2x3x4x4xf32>) -> tensor<2x3x8x8xf32> {
      %r = kiln.max_pool2d_grad %x, %dy, window = [2, 2], strides = [2, 2], padding = [0, 0, 0, 0] : tensor<2x3x8x8xf32>, tensor<2x3x4x4xf32>
      return %r : tensor<2x3x8x8xf32>
    })mlir", 1, false);
  // Windows that tile the input (stride = window) with padding, and a last
  // row and column that no window covers.
  checkOp(R"mlir(
    func.func @main(%x: tensor<2x2x7x9xf32>, %dy: tensor<2x2x4x4xf32>) -> tensor<2x2x7x9xf32> {
      %r = kiln.max_pool2d_grad %x, %dy, window = [2, 2], strides = [2, 2], padding = [1, 0, 0, 0] : tensor<2x2x7x9xf32>, tensor<2x2x4x4xf32>
      return %r : tensor<2x2x7x9xf32>
    })mlir", 1, true);
}

// Windows inside the input and no larger than 16 elements are written out
// element by element (codegen/IndexedEmitter.cpp): tiling 2x2 and 4x4
// windows with NaN and -inf (the first NaN, else the first maximum), and a
// 5x5 one (25 elements: the loops) beside them.
TEST_F(IndexedKernelTest, MaxPoolWindowsInsideTheInput) {
  checkOp(R"mlir(
    func.func @main(%x: tensor<2x3x6x10xf32>, %dy: tensor<2x3x3x5xf32>) -> tensor<2x3x6x10xf32> {
      %r = kiln.max_pool2d_grad %x, %dy, window = [2, 2], strides = [2, 2], padding = [0, 0, 0, 0] : tensor<2x3x6x10xf32>, tensor<2x3x3x5xf32>
      return %r : tensor<2x3x6x10xf32>
    })mlir", 1, true);
  checkOp(R"mlir(
    func.func @main(%x: tensor<2x2x8x12xf32>) -> tensor<2x2x2x3xf32> {
      %r = kiln.max_pool2d %x, window = [4, 4], strides = [4, 4], padding = [0, 0, 0, 0] : tensor<2x2x8x12xf32> -> tensor<2x2x2x3xf32>
      return %r : tensor<2x2x2x3xf32>
    })mlir", 1, true);
  checkOp(R"mlir(
    func.func @main(%x: tensor<2x2x8x12xf32>, %dy: tensor<2x2x2x3xf32>) -> tensor<2x2x8x12xf32> {
      %r = kiln.max_pool2d_grad %x, %dy, window = [4, 4], strides = [4, 4], padding = [0, 0, 0, 0] : tensor<2x2x8x12xf32>, tensor<2x2x2x3xf32>
      return %r : tensor<2x2x8x12xf32>
    })mlir", 1, true);
  checkOp(R"mlir(
    func.func @main(%x: tensor<1x2x11x10xf32>, %dy: tensor<1x2x2x2xf32>) -> tensor<1x2x11x10xf32> {
      %r = kiln.max_pool2d_grad %x, %dy, window = [5, 5], strides = [5, 5], padding = [0, 0, 0, 0] : tensor<1x2x11x10xf32>, tensor<1x2x2x2xf32>
      return %r : tensor<1x2x11x10xf32>
    })mlir", 1, true);
}

// LeNet-5's first pooling gradient (2x2 windows tiling 28x28): one select
// per window element and no branch, which LLVM vectorizes; with the window
// loops and the branch of the general form it ran 7x slower (bench/
// RESULTS.md, thirty-fifth session).
TEST_F(IndexedKernelTest, TiledMaxPoolGradVectorizes) {
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(R"mlir(
    func.func @main(%x: tensor<2x6x28x28xf32>, %dy: tensor<2x6x14x14xf32>) -> tensor<2x6x28x28xf32> {
      %r = kiln.max_pool2d_grad %x, %dy, window = [2, 2], strides = [2, 2], padding = [0, 0, 0, 0] : tensor<2x6x28x28xf32>, tensor<2x6x14x14xf32>
      return %r : tensor<2x6x28x28xf32>
    })mlir", &context);
  ASSERT_TRUE(module) << diagnostics;
  Operation *op = nullptr;
  module->walk([&](MaxPool2DGradOp o) { op = o; });
  ASSERT_TRUE(op);
  FusionOp fusion;
  FailureOr<OwningOpRef<ModuleOp>> wrapped = buildSingleOpFusion(op, fusion);
  ASSERT_TRUE(succeeded(wrapped)) << diagnostics;
  std::string llvmText = optimizedKernelText(fusion);
  ASSERT_FALSE(llvmText.empty());
  EXPECT_NE(llvmText.find(" x float>"), std::string::npos) << llvmText;
}

// Overlapping windows: one input position can be the maximum of several
// windows, whose gradients add up; ties and NaN pick the first.
TEST_F(IndexedKernelTest, MaxPoolGradOverlappingPadded) {
  checkOp(R"mlir(
    func.func @main(%x: tensor<2x2x7x6xf64>, %dy: tensor<2x2x4x6xf64>) -> tensor<2x2x7x6xf64> {
      %r = kiln.max_pool2d_grad %x, %dy, window = [3, 3], strides = [2, 1], padding = [1, 1, 2, 0] : tensor<2x2x7x6xf64>, tensor<2x2x4x6xf64>
      return %r : tensor<2x2x7x6xf64>
    })mlir", 1, true);
  checkOp(R"mlir(
    func.func @main(%x: tensor<1x2x9x5xf32>, %dy: tensor<1x2x4x4xf32>) -> tensor<1x2x9x5xf32> {
      %r = kiln.max_pool2d_grad %x, %dy, window = [3, 2], strides = [2, 1], padding = [0, 0, 0, 0] : tensor<1x2x9x5xf32>, tensor<1x2x4x4xf32>
      return %r : tensor<1x2x9x5xf32>
    })mlir", 1, true);
}

} // namespace
