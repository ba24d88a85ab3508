//===- PartitionedKernelTest.cpp - the CPU kernel ABI's part/parts split ----===//
//
// Every CPU kernel runs a share of its work per call: `kiln_kernel(buffers,
// part, parts)` (codegen/cpu/LowerToLLVM.h). For fusions of each kind
// (elementwise loop, row and column reductions, a multi_output fusion with a
// rank-0 result, a horizontal fusion) and parts in {1, 2, 3, 5}, running
// every part gives outputs bit-identical to one call with parts = 1, which
// in turn matches the reference interpreter (f32 to 1e-5 relative scaled by
// max(1, |x|)). Extents are chosen so that some parts get empty ranges
// (extent 3 split 5 ways) and others uneven ones. Parts run in reverse order
// so that no part can rely on an earlier one. Set KILN_CODEGEN_SEED to rerun
// one seed.
//
//===----------------------------------------------------------------------===//

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
using codegen_test::randomTensor;

std::vector<float> toFloats(const HostTensor &t) {
  std::vector<float> out(t.size());
  for (int64_t i = 0; i < t.size(); ++i)
    out[i] = static_cast<float>(t[i]);
  return out;
}

class PartitionedKernelTest : public codegen_test::KernelTestBase {
protected:
  // Checks the f32 fusion in |text| against the interpreter (parts = 1) and
  // every split against parts = 1.
  void checkSplits(const char *text) {
    FusionOp fusion = parseFusion(text);
    ASSERT_TRUE(fusion) << diagnostics;
    ASSERT_TRUE(fusion);
    uint64_t seed = baseSeed();
    ASSERT_EQ(check(fusion, seed, 4), "") << "seed " << seed;

    FailureOr<CompiledKernel> kernel = compileLoopFusion(fusion);
    ASSERT_TRUE(succeeded(kernel)) << diagnostics;
    std::mt19937_64 rng(seed);
    std::vector<std::vector<float>> inputs;
    for (Value input : fusion.getInputs())
      inputs.push_back(toFloats(
          randomTensor(cast<RankedTensorType>(input.getType()), rng, 4)));
    auto runSplit = [&](int64_t parts) {
      std::vector<std::vector<float>> outputs;
      for (Type type : fusion.getResultTypes())
        outputs.emplace_back(cast<RankedTensorType>(type).getNumElements(),
                             std::nanf(""));
      std::vector<void *> buffers;
      for (std::vector<float> &in : inputs)
        buffers.push_back(in.data());
      for (std::vector<float> &out : outputs)
        buffers.push_back(out.data());
      for (int64_t part = parts; part-- > 0;)
        kernel->runRaw(buffers, part, parts);
      return outputs;
    };
    std::vector<std::vector<float>> whole = runSplit(1);
    for (int64_t parts : {2, 3, 5}) {
      std::vector<std::vector<float>> split = runSplit(parts);
      for (size_t r = 0; r < whole.size(); ++r)
        EXPECT_EQ(std::memcmp(whole[r].data(), split[r].data(),
                              whole[r].size() * sizeof(float)),
                  0)
            << "result " << r << " differs with parts = " << parts
            << " (seed " << seed << ")";
    }
    // A part outside [0, parts) writes nothing.
    std::vector<std::vector<float>> outputs;
    std::vector<void *> buffers;
    for (std::vector<float> &in : inputs)
      buffers.push_back(in.data());
    for (Type type : fusion.getResultTypes())
      outputs.emplace_back(cast<RankedTensorType>(type).getNumElements(), 7.0f);
    for (std::vector<float> &out : outputs)
      buffers.push_back(out.data());
    kernel->runRaw(buffers, 3, 3);
    kernel->runRaw(buffers, -1, 3);
    kernel->runRaw(buffers, 0, 0);
    for (const std::vector<float> &out : outputs)
      for (float v : out)
        ASSERT_EQ(v, 7.0f);
  }
};

TEST_F(PartitionedKernelTest, Elementwise) {
  checkSplits(R"mlir(
    func.func @main(%a: tensor<7x13xf32>, %b: tensor<13xf32>) -> tensor<7x13xf32> {
      %r = kiln.fusion loop (%a, %b) : (tensor<7x13xf32>, tensor<13xf32>) -> tensor<7x13xf32> {
      ^bb0(%x: tensor<7x13xf32>, %y: tensor<13xf32>):
        %yb = kiln.broadcast_in_dim %y, dims = [1] : tensor<13xf32> -> tensor<7x13xf32>
        %m = kiln.mul %x, %yb : tensor<7x13xf32>
        %e = kiln.exp %m : tensor<7x13xf32>
        kiln.yield %e : tensor<7x13xf32>
      }
      return %r : tensor<7x13xf32>
    })mlir");
}

// A softmax: row reductions hoisted out of the column loop, inside the
// partitioned row loop.
TEST_F(PartitionedKernelTest, RowReduction) {
  checkSplits(R"mlir(
    func.func @main(%a: tensor<11x37xf32>) -> tensor<11x37xf32> {
      %r = kiln.fusion reduction (%a) : (tensor<11x37xf32>) -> tensor<11x37xf32> {
      ^bb0(%x: tensor<11x37xf32>):
        %m = kiln.reduce max %x, dims = [1] : tensor<11x37xf32> -> tensor<11xf32>
        %mb = kiln.broadcast_in_dim %m, dims = [0] : tensor<11xf32> -> tensor<11x37xf32>
        %d = kiln.sub %x, %mb : tensor<11x37xf32>
        %e = kiln.exp %d : tensor<11x37xf32>
        %s = kiln.reduce sum %e, dims = [1] : tensor<11x37xf32> -> tensor<11xf32>
        %sb = kiln.broadcast_in_dim %s, dims = [0] : tensor<11xf32> -> tensor<11x37xf32>
        %y = kiln.div %e, %sb : tensor<11x37xf32>
        kiln.yield %y : tensor<11x37xf32>
      }
      return %r : tensor<11x37xf32>
    })mlir");
}

// A bias gradient: the sum over the batch, split over the columns; extent 3
// leaves two of five parts empty.
TEST_F(PartitionedKernelTest, ColumnReduction) {
  checkSplits(R"mlir(
    func.func @main(%a: tensor<19x3xf32>) -> tensor<3xf32> {
      %r = kiln.fusion reduction (%a) : (tensor<19x3xf32>) -> tensor<3xf32> {
      ^bb0(%x: tensor<19x3xf32>):
        %s = kiln.reduce sum %x, dims = [0] : tensor<19x3xf32> -> tensor<3xf32>
        kiln.yield %s : tensor<3xf32>
      }
      return %r : tensor<3xf32>
    })mlir");
}

// Three nests of different shapes, one of rank 0 (run by part 0 only).
TEST_F(PartitionedKernelTest, MultiOutput) {
  checkSplits(R"mlir(
    func.func @main(%a: tensor<9x4x6xf32>) -> (tensor<9x4x6xf32>, tensor<6xf32>, tensor<f32>) {
      %r:3 = kiln.fusion multi_output (%a) : (tensor<9x4x6xf32>) -> (tensor<9x4x6xf32>, tensor<6xf32>, tensor<f32>) {
      ^bb0(%x: tensor<9x4x6xf32>):
        %t = kiln.tanh %x : tensor<9x4x6xf32>
        %c = kiln.reduce mean %t, dims = [0, 1] : tensor<9x4x6xf32> -> tensor<6xf32>
        %q = kiln.mul %t, %t : tensor<9x4x6xf32>
        %s = kiln.reduce sum %q, dims = [0, 1, 2] : tensor<9x4x6xf32> -> tensor<f32>
        kiln.yield %t, %c, %s : tensor<9x4x6xf32>, tensor<6xf32>, tensor<f32>
      }
      return %r#0, %r#1, %r#2 : tensor<9x4x6xf32>, tensor<6xf32>, tensor<f32>
    })mlir");
}

// Independent updates of different shapes, as fuse-horizontal makes them.
TEST_F(PartitionedKernelTest, Horizontal) {
  checkSplits(R"mlir(
    func.func @main(%w: tensor<17x5xf32>, %g: tensor<17x5xf32>, %v: tensor<4xf32>, %h: tensor<4xf32>)
        -> (tensor<17x5xf32>, tensor<4xf32>) {
      %r:2 = kiln.fusion horizontal (%w, %g, %v, %h) : (tensor<17x5xf32>, tensor<17x5xf32>, tensor<4xf32>, tensor<4xf32>)
          -> (tensor<17x5xf32>, tensor<4xf32>) {
      ^bb0(%a: tensor<17x5xf32>, %b: tensor<17x5xf32>, %c: tensor<4xf32>, %d: tensor<4xf32>):
        %lr = kiln.constant dense<0.01> : tensor<f32>
        %l1 = kiln.broadcast_in_dim %lr, dims = [] : tensor<f32> -> tensor<17x5xf32>
        %u1 = kiln.mul %b, %l1 : tensor<17x5xf32>
        %n1 = kiln.sub %a, %u1 : tensor<17x5xf32>
        %l2 = kiln.broadcast_in_dim %lr, dims = [] : tensor<f32> -> tensor<4xf32>
        %u2 = kiln.mul %d, %l2 : tensor<4xf32>
        %n2 = kiln.sub %c, %u2 : tensor<4xf32>
        kiln.yield %n1, %n2 : tensor<17x5xf32>, tensor<4xf32>
      }
      return %r#0, %r#1 : tensor<17x5xf32>, tensor<4xf32>
    })mlir");
}

} // namespace
