//===- CudaEmulationOpsTest.cpp - elementwise ops in emulated CUDA --------===//
//
// Hand-written fusions of single ops whose CUDA C++ calls a library
// function or a combiner of its own (floor, ceil, rint, atanf, fmodf, %,
// kiln_prod),
// emitted, compiled for the host under codegen/cuda/CudaEmulation.h and
// run against the reference interpreter on random inputs (the harness:
// EmulationHarness.h; the zoo's steps and the random graphs:
// CudaEmulationTest.cpp). Set KILN_CODEGEN_SEED to rerun one seed.
//
//===----------------------------------------------------------------------===//

#include "tests/unit/cuda/AddressSanitizer.h"
#include "tests/unit/cuda/EmulationHarness.h"

#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

namespace {

using namespace mlir;
using namespace kiln;

class CudaEmulationOpsTest : public cuda_emulation::EmulationHarness {
protected:
  // Every fusion of |text| (two here) on random inputs, the i-th on seed
  // firstSeed() + i with integers in [0, intBounds[i]).
  void runFusions(const char *text, const std::string &prefix,
                  ArrayRef<int64_t> intBounds) {
    OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(text, &context);
    ASSERT_TRUE(module) << diagnostics;
    uint64_t seed = firstSeed();
    addFusions(*module, prefix, seed, intBounds);
    ASSERT_EQ(kernels.size(), 2u);
    runAll();
    EXPECT_EQ(ran, 2u) << "seed " << seed;
  }
};

// floor, ceil and round (halves to even) in f32 and bf16, through CUDA's
// floor, ceil and rint, against the interpreter: on random floats, and on
// quarters and eighths made from random integers, so that halves (and
// integers) come up often. (Negative halves: the CPU kernel test.)
TEST_F(CudaEmulationOpsTest, RoundingOps) {
  const char *text = R"mlir(
func.func @main(%x: tensor<33x65xf32>, %n: tensor<33x65xi32>, %m: tensor<1000xi32>)
    -> (tensor<33x65xf32>, tensor<33x65xf32>, tensor<33x65xf32>, tensor<33x65xf32>, tensor<1000xbf16>) {
  %a:4 = kiln.fusion loop (%x, %n) : (tensor<33x65xf32>, tensor<33x65xi32>) -> (tensor<33x65xf32>, tensor<33x65xf32>, tensor<33x65xf32>, tensor<33x65xf32>) {
  ^bb0(%xa: tensor<33x65xf32>, %na: tensor<33x65xi32>):
    %quarter = kiln.constant dense<0.25> : tensor<33x65xf32>
    %nf = kiln.convert %na : tensor<33x65xi32> -> tensor<33x65xf32>
    %q = kiln.mul %nf, %quarter : tensor<33x65xf32>
    %f = kiln.floor %q : tensor<33x65xf32>
    %c = kiln.ceil %q : tensor<33x65xf32>
    %r = kiln.round %q : tensor<33x65xf32>
    %rx = kiln.round %xa : tensor<33x65xf32>
    kiln.yield %f, %c, %r, %rx : tensor<33x65xf32>, tensor<33x65xf32>, tensor<33x65xf32>, tensor<33x65xf32>
  }
  %b = kiln.fusion loop (%m) : (tensor<1000xi32>) -> tensor<1000xbf16> {
  ^bb0(%ma: tensor<1000xi32>):
    %eighth = kiln.constant dense<0.125> : tensor<1000xbf16>
    %mf = kiln.convert %ma : tensor<1000xi32> -> tensor<1000xbf16>
    %q = kiln.mul %mf, %eighth : tensor<1000xbf16>
    %r = kiln.round %q : tensor<1000xbf16>
    %f = kiln.floor %q : tensor<1000xbf16>
    %c = kiln.ceil %q : tensor<1000xbf16>
    %s = kiln.add %r, %f : tensor<1000xbf16>
    %t = kiln.mul %s, %c : tensor<1000xbf16>
    kiln.yield %t : tensor<1000xbf16>
  }
  return %a#0, %a#1, %a#2, %a#3, %b : tensor<33x65xf32>, tensor<33x65xf32>, tensor<33x65xf32>, tensor<33x65xf32>, tensor<1000xbf16>
}
)mlir";
  // Integers in [0, 40): quarters in [0, 10), eighths in [0, 5); the
  // floats in [-2, 2).
  runFusions(text, "rounding", {40, 40});
}

// atan through CUDA's atanf (f32, and bf16 computed in f32) against the
// interpreter, on [-2, 2), its eightfold (past tan(3 pi/8), where the
// reductions switch) and its reciprocal (large magnitudes); with the
// gradient's 1 / (1 + x^2) in the same kernel.
TEST_F(CudaEmulationOpsTest, Atan) {
  const char *text = R"mlir(
func.func @main(%x: tensor<33x65xf32>, %h: tensor<1000xbf16>)
    -> (tensor<33x65xf32>, tensor<33x65xf32>, tensor<33x65xf32>, tensor<1000xbf16>) {
  %a:3 = kiln.fusion loop (%x) : (tensor<33x65xf32>) -> (tensor<33x65xf32>, tensor<33x65xf32>, tensor<33x65xf32>) {
  ^bb0(%xa: tensor<33x65xf32>):
    %eight = kiln.constant dense<8.0> : tensor<33x65xf32>
    %one = kiln.constant dense<1.0> : tensor<33x65xf32>
    %wide = kiln.mul %xa, %eight : tensor<33x65xf32>
    %inverse = kiln.reciprocal %xa : tensor<33x65xf32>
    %t = kiln.atan %xa : tensor<33x65xf32>
    %tw = kiln.atan %wide : tensor<33x65xf32>
    %ti = kiln.atan %inverse : tensor<33x65xf32>
    %square = kiln.mul %xa, %xa : tensor<33x65xf32>
    %denominator = kiln.add %one, %square : tensor<33x65xf32>
    %slope = kiln.div %one, %denominator : tensor<33x65xf32>
    %u = kiln.add %tw, %slope : tensor<33x65xf32>
    kiln.yield %t, %u, %ti : tensor<33x65xf32>, tensor<33x65xf32>, tensor<33x65xf32>
  }
  %b = kiln.fusion loop (%h) : (tensor<1000xbf16>) -> tensor<1000xbf16> {
  ^bb0(%ha: tensor<1000xbf16>):
    %t = kiln.atan %ha : tensor<1000xbf16>
    kiln.yield %t : tensor<1000xbf16>
  }
  return %a#0, %a#1, %a#2, %b : tensor<33x65xf32>, tensor<33x65xf32>, tensor<33x65xf32>, tensor<1000xbf16>
}
)mlir";
  runFusions(text, "atan", {4});
}

// rem through CUDA's fmodf (f32, exact) and % (i32; the divisor kept
// away from 0) against the interpreter.
TEST_F(CudaEmulationOpsTest, Rem) {
  const char *text = R"mlir(
func.func @main(%x: tensor<33x65xf32>, %y: tensor<33x65xf32>, %i: tensor<1000xi32>, %j: tensor<1000xi32>)
    -> (tensor<33x65xf32>, tensor<1000xi32>) {
  %a = kiln.fusion loop (%x, %y) : (tensor<33x65xf32>, tensor<33x65xf32>) -> tensor<33x65xf32> {
  ^bb0(%xa: tensor<33x65xf32>, %ya: tensor<33x65xf32>):
    %ten = kiln.constant dense<10.0> : tensor<33x65xf32>
    %wide = kiln.mul %xa, %ten : tensor<33x65xf32>
    %r = kiln.rem %wide, %ya : tensor<33x65xf32>
    kiln.yield %r : tensor<33x65xf32>
  }
  %b = kiln.fusion loop (%i, %j) : (tensor<1000xi32>, tensor<1000xi32>) -> tensor<1000xi32> {
  ^bb0(%ia: tensor<1000xi32>, %ja: tensor<1000xi32>):
    %five = kiln.constant dense<5> : tensor<1000xi32>
    %shifted = kiln.sub %ia, %five : tensor<1000xi32>
    %nine = kiln.constant dense<9> : tensor<1000xi32>
    %divisor = kiln.sub %ja, %nine : tensor<1000xi32>
    %one = kiln.constant dense<1> : tensor<1000xi32>
    %nonzero = kiln.max %divisor, %one : tensor<1000xi32>
    %negated = kiln.neg %nonzero : tensor<1000xi32>
    %zero = kiln.constant dense<0> : tensor<1000xi32>
    %below = kiln.compare lt, %divisor, %zero : tensor<1000xi32>
    %d = kiln.select %below, %negated, %nonzero : tensor<1000xi1>, tensor<1000xi32>
    %r = kiln.rem %shifted, %d : tensor<1000xi32>
    kiln.yield %r : tensor<1000xi32>
  }
  return %a, %b : tensor<33x65xf32>, tensor<1000xi32>
}
)mlir";
  // Integers in [0, 20): dividends in [-5, 15), divisors +-1..10.
  runFusions(text, "rem", {20, 20});
}

// kiln.reduce prod: each product of a long f32 row takes a block
// (kiln_block_allreduce with kiln_prod), of 2500 factors exp(x / 1000) near
// 1; rows of 40 i32 factors in [-2, 2] take a warp each and multiply in 64
// bits, beside columns of 6 bf16 values converted to f32. Both kernels
// also go through NVRTC and ptxas for sm_90.
TEST_F(CudaEmulationOpsTest, Products) {
  const char *text = R"mlir(
func.func @main(%x: tensor<3x2500xf32>, %i: tensor<4x40xi32>, %z: tensor<6x70xbf16>)
    -> (tensor<3xf32>, tensor<4xi32>, tensor<70xf32>) {
  %a = kiln.fusion reduction (%x) : (tensor<3x2500xf32>) -> tensor<3xf32> {
  ^bb0(%xa: tensor<3x2500xf32>):
    %milli = kiln.constant dense<0.001> : tensor<3x2500xf32>
    %s = kiln.mul %xa, %milli : tensor<3x2500xf32>
    %e = kiln.exp %s : tensor<3x2500xf32>
    %p = kiln.reduce prod %e, dims = [1] : tensor<3x2500xf32> -> tensor<3xf32>
    kiln.yield %p : tensor<3xf32>
  }
  %b:2 = kiln.fusion multi_output (%i, %z) : (tensor<4x40xi32>, tensor<6x70xbf16>) -> (tensor<4xi32>, tensor<70xf32>) {
  ^bb0(%ia: tensor<4x40xi32>, %za: tensor<6x70xbf16>):
    %two = kiln.constant dense<2> : tensor<4x40xi32>
    %shifted = kiln.sub %ia, %two : tensor<4x40xi32>
    %p = kiln.reduce prod %shifted, dims = [1] : tensor<4x40xi32> -> tensor<4xi32>
    %c = kiln.convert %za : tensor<6x70xbf16> -> tensor<6x70xf32>
    %q = kiln.reduce prod %c, dims = [0] : tensor<6x70xf32> -> tensor<70xf32>
    kiln.yield %p, %q : tensor<4xi32>, tensor<70xf32>
  }
  return %a, %b#0, %b#1 : tensor<3xf32>, tensor<4xi32>, tensor<70xf32>
}
)mlir";
  runFusions(text, "prod", {1, 5});
  EXPECT_EQ(layouts["element.block"], 1);
  EXPECT_EQ(layouts["element.warp"], 1);
  bool blockProduct = false;
  for (const auto &k : kernels)
    blockProduct |= StringRef(k.source).contains("kiln_prod()");
  EXPECT_TRUE(blockProduct) << "no kernel combines with kiln_prod";
  // NVRTC and ptxas take kiln_prod's integer and float instances.
  if (!KILN_TEST_HAS_ASAN)
    assembleAllForSm90();
}

// combine = prod: scatter rows whose block multiplies its row by the
// updates listed for it (f32 rows of 70 columns, about 24 factors each),
// and a rank-1 i32 result whose elements each scan the indices.
TEST_F(CudaEmulationOpsTest, ScatterProducts) {
  const char *text = R"mlir(
func.func @main(%o: tensor<37x70xf32>, %i: tensor<3x300xi32>, %u: tensor<3x300x70xf32>,
                %p: tensor<30xi32>, %j: tensor<500xi64>, %v: tensor<500xi32>)
    -> (tensor<37x70xf32>, tensor<30xi32>) {
  %a = kiln.fusion loop (%o, %i, %u) : (tensor<37x70xf32>, tensor<3x300xi32>, tensor<3x300x70xf32>) -> tensor<37x70xf32> {
  ^bb0(%oa: tensor<37x70xf32>, %ia: tensor<3x300xi32>, %ua: tensor<3x300x70xf32>):
    %s = kiln.scatter_add %oa, %ia, %ua combine = prod : (tensor<37x70xf32>, tensor<3x300xi32>, tensor<3x300x70xf32>) -> tensor<37x70xf32>
    kiln.yield %s : tensor<37x70xf32>
  }
  %b = kiln.fusion loop (%p, %j, %v) : (tensor<30xi32>, tensor<500xi64>, tensor<500xi32>) -> tensor<30xi32> {
  ^bb0(%pa: tensor<30xi32>, %ja: tensor<500xi64>, %va: tensor<500xi32>):
    %s = kiln.scatter_add %pa, %ja, %va combine = prod : (tensor<30xi32>, tensor<500xi64>, tensor<500xi32>) -> tensor<30xi32>
    kiln.yield %s : tensor<30xi32>
  }
  return %a, %b : tensor<37x70xf32>, tensor<30xi32>
}
)mlir";
  runFusions(text, "scatter_prod", {37, 30});
  if (!KILN_TEST_HAS_ASAN)
    assembleAllForSm90();
}

// i32 sums, differences and products that wrap past 2^31, as arith's two's
// complement integers and the interpreter's do: the CUDA C++ computes them
// unsigned, where C++'s signed overflow would be undefined (UBSan stops
// the sanitizer build's run on one). Beside them, a row sum of 40 such
// values, which accumulates in i64 and keeps the low 32 bits.
TEST_F(CudaEmulationOpsTest, WrappingIntegers) {
  const char *text = R"mlir(
func.func @main(%i: tensor<1000xi32>, %j: tensor<1000xi32>, %k: tensor<4x40xi32>)
    -> (tensor<1000xi32>, tensor<1000xi32>, tensor<1000xi32>, tensor<4xi32>) {
  %a:3 = kiln.fusion loop (%i, %j) : (tensor<1000xi32>, tensor<1000xi32>) -> (tensor<1000xi32>, tensor<1000xi32>, tensor<1000xi32>) {
  ^bb0(%ia: tensor<1000xi32>, %ja: tensor<1000xi32>):
    %big = kiln.constant dense<2147483000> : tensor<1000xi32>
    %sum = kiln.add %ia, %big : tensor<1000xi32>
    %low = kiln.neg %big : tensor<1000xi32>
    %difference = kiln.sub %low, %ja : tensor<1000xi32>
    %factor = kiln.constant dense<3000007> : tensor<1000xi32>
    %product = kiln.mul %ia, %factor : tensor<1000xi32>
    kiln.yield %sum, %difference, %product : tensor<1000xi32>, tensor<1000xi32>, tensor<1000xi32>
  }
  %b = kiln.fusion reduction (%k) : (tensor<4x40xi32>) -> tensor<4xi32> {
  ^bb0(%ka: tensor<4x40xi32>):
    %big = kiln.constant dense<2147483000> : tensor<4x40xi32>
    %shifted = kiln.add %ka, %big : tensor<4x40xi32>
    %r = kiln.reduce sum %shifted, dims = [1] : tensor<4x40xi32> -> tensor<4xi32>
    kiln.yield %r : tensor<4xi32>
  }
  return %a#0, %a#1, %a#2, %b : tensor<1000xi32>, tensor<1000xi32>, tensor<1000xi32>, tensor<4xi32>
}
)mlir";
  // Integers in [0, 2000): about two thirds of the sums and differences
  // wrap, and every product past 716.
  runFusions(text, "wrap", {2000, 2000});
  int unsignedSums = 0;
  for (const auto &k : kernels)
    unsignedSums += StringRef(k.source).count("(unsigned)");
  EXPECT_GE(unsignedSums, 6) << "the i32 arithmetic is not computed unsigned";
}

} // namespace
