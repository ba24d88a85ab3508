//===- ReductionKernelTest.cpp - CPU reduction kernels against the interpreter ===//
//
// Compiles fusions holding kiln.reduce (and multi-result fusions) to native
// code (codegen/cpu/LowerToLLVM.h), runs them on random inputs and compares
// with the reference interpreter's evaluation of the same fusion op: random
// reduction fusions built here (elementwise producers, a reduce of each kind
// over random dimensions, elementwise consumers of the result broadcast
// back, sometimes the reduction itself as a second result of another shape)
// in f64 and f32, and every reduction, multi_output and horizontal fusion of
// the zoo's compiled training steps. f64 must agree to 1e-12 relative; f32
// to 1e-5 relative scaled by max(1, |x|), since the kernel accumulates in f32
// in loop order and the interpreter in f64, or within the element's
// rounding spread (KernelTestSupport.h) where a result cancels after a
// sum. Set KILN_CODEGEN_SEED to rerun one seed (each failure prints it).
//
//===----------------------------------------------------------------------===//

#include "codegen/cpu/LowerToLLVM.h"
#include "tests/unit/codegen/KernelTestSupport.h"

#include "ir/Interpreter.h"
#include "ir/KilnDialect.h"
#include "ir/KilnOps.h"
#include "passes/Pipelines.h"
#include "tools/kiln/lib/Zoo.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"

#include <regex>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <random>

namespace {

using namespace mlir;
using namespace kiln;
using codegen_test::baseSeed;
using codegen_test::printed;
using codegen_test::randomTensor;

// The default tolerance: f32 within 1e-5 of max(1, |value|).
class ReductionKernelTest : public codegen_test::KernelTestBase {};

// The loads in |kernel| of its function's argument |index|.
int loadsOf(ModuleOp kernel, unsigned index) {
  auto func = *kernel.getOps<func::FuncOp>().begin();
  int loads = 0;
  kernel.walk([&](memref::LoadOp load) {
    loads += load.getMemRef() == func.getArgument(index);
  });
  return loads;
}

// The constant trip count of the loop around the loop that holds |op| (a
// column tile's rows, around its lanes); -1 where there is none.
int64_t rowsAroundLanes(Operation *op) {
  auto lanes = op->getParentOfType<scf::ForOp>();
  auto rows = lanes ? lanes->getParentOfType<scf::ForOp>() : scf::ForOp();
  auto bound =
      rows ? rows.getUpperBound().getDefiningOp<arith::ConstantIndexOp>()
           : arith::ConstantIndexOp();
  return bound ? bound.value() : -1;
}

// Builds one random reduction fusion of element type |element| in a @main.
class RandomReductionBuilder {
public:
  RandomReductionBuilder(MLIRContext *context, uint64_t seed, Type element)
      : b_(context), loc_(b_.getUnknownLoc()), rng_(seed), element_(element) {}

  OwningOpRef<ModuleOp> build() {
    OwningOpRef<ModuleOp> module = ModuleOp::create(loc_);
    // f32 sums accumulate in f32: at most 64 elements keep their rounding
    // error within the 1e-5 tolerance.
    bool narrow = element_.isF32();
    int rank = pick(1, narrow ? 3 : 4);
    for (int i = 0; i < rank; ++i)
      shape_.push_back(pick(1, narrow ? 4 : 7));
    int numInputs = pick(1, 3);
    SmallVector<Type> inputTypes(numInputs, type());

    b_.setInsertionPointToEnd(module->getBody());
    auto func = b_.create<func::FuncOp>(loc_, "main",
                                        b_.getFunctionType(inputTypes, {}));
    Block *entry = func.addEntryBlock();
    auto body = std::make_unique<Block>();
    for (Type t : inputTypes)
      body->addArgument(t, loc_);
    b_.setInsertionPointToStart(body.get());
    for (int i = 0; i < numInputs; ++i)
      pool_.push_back(body->getArgument(i));

    // Producers, then one or two reduce -> broadcast -> consumer rounds
    // (the second reduces something that depends on the first, as softmax
    // does).
    for (int i = pick(0, 3); i > 0; --i)
      pool_.push_back(elementwise());
    SmallVector<Value> reductions;
    for (int round = pick(1, 2); round > 0; --round) {
      SmallVector<int64_t> dims, kept;
      for (int64_t d = 0; d < rank; ++d)
        (pick(0, 2) ? dims : kept).push_back(d);
      SmallVector<int64_t> resultShape;
      for (int64_t d : kept)
        resultShape.push_back(shape_[d]);
      auto kind = static_cast<ReduceKind>(pick(0, 4));
      Value operand = pool_.back();
      // A product's factors in (0.875, 1.125), 1 + tanh(x) / 8: up to 2401
      // of them stay within f64's range, and no partial product overflows
      // where another underflows.
      if (kind == ReduceKind::prod) {
        auto splat = [&](double v) -> Value {
          return b_.create<ConstantOp>(
              loc_, type(),
              DenseElementsAttr::get(type(), b_.getFloatAttr(element_, v)));
        };
        operand = b_.create<AddOp>(
            loc_, splat(1.0),
            b_.create<MulOp>(loc_, b_.create<TanhOp>(loc_, operand),
                             splat(0.125)));
      }
      Value reduced = b_.create<ReduceOp>(
          loc_, RankedTensorType::get(resultShape, element_), kind, operand,
          b_.getDenseI64ArrayAttr(dims));
      reductions.push_back(reduced);
      Value back = b_.create<BroadcastInDimOp>(loc_, type(), reduced,
                                               b_.getDenseI64ArrayAttr(kept));
      Value x = any();
      switch (pick(0, 2)) {
      case 0: pool_.push_back(b_.create<SubOp>(loc_, x, back)); break;
      case 1: pool_.push_back(b_.create<MulOp>(loc_, x, back)); break;
      default: pool_.push_back(b_.create<ExpOp>(loc_, b_.create<SubOp>(loc_, x, back))); break;
      }
      if (pick(0, 1))
        pool_.push_back(elementwise());
    }
    SmallVector<Value> results{pool_.back()};
    if (pick(0, 1))
      results.push_back(reductions[pick(0, reductions.size() - 1)]);
    if (pick(0, 2) == 0)
      results.push_back(any());
    b_.create<YieldOp>(loc_, results);

    b_.setInsertionPointToStart(entry);
    SmallVector<Type> resultTypes;
    for (Value r : results)
      resultTypes.push_back(r.getType());
    auto fusion = b_.create<FusionOp>(
        loc_, resultTypes,
        results.size() > 1 ? FusionKind::multi_output : FusionKind::reduction,
        entry->getArguments());
    fusion.getBody().push_back(body.release());
    b_.create<func::ReturnOp>(loc_);
    return module;
  }

private:
  int pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  RankedTensorType type() { return RankedTensorType::get(shape_, element_); }
  Value any() { return pool_[pick(0, pool_.size() - 1)]; }

  Value elementwise() {
    Value x = any();
    switch (pick(0, 8)) {
    case 0: return b_.create<NegOp>(loc_, x);
    case 1: return b_.create<TanhOp>(loc_, x);
    case 2: return b_.create<MulOp>(loc_, x, any());
    case 3: return b_.create<AddOp>(loc_, x, any());
    case 4: return b_.create<MaxOp>(loc_, x, any());
    case 5: return b_.create<SigmoidOp>(loc_, x);
    case 6: return b_.create<AbsOp>(loc_, x);
    // NaN for negative x: max and min must propagate it.
    case 7: return b_.create<SqrtOp>(loc_, x);
    default: return b_.create<ExpOp>(loc_, b_.create<TanhOp>(loc_, x));
    }
  }

  OpBuilder b_;
  Location loc_;
  std::mt19937_64 rng_;
  Type element_;
  SmallVector<int64_t> shape_;
  SmallVector<Value> pool_;
};

TEST_F(ReductionKernelTest, RandomF64ReductionsMatchTheInterpreter) {
  checkRandomFusions<RandomReductionBuilder>(Float64Type::get(&context), 60, 4);
}

TEST_F(ReductionKernelTest, RandomF32ReductionsMatchTheInterpreter) {
  checkRandomFusions<RandomReductionBuilder>(Float32Type::get(&context), 60, 4);
}

// Integer reductions accumulate in i64; an integer mean truncates toward 0;
// a product wraps in 64 bits and keeps the result's low 32 bits (thirty
// factors of up to 7 in size reach 2e25, past 2^64).
TEST_F(ReductionKernelTest, IntegerReductions) {
  const char *text = R"mlir(
    func.func @main(%a: tensor<3x5xi32>, %b: tensor<3x30xi32>) -> (tensor<3xi32>, tensor<5xi32>, tensor<3xi32>, tensor<5xi32>, tensor<3xi32>, tensor<5xi32>) {
      %r:6 = kiln.fusion multi_output (%a, %b) : (tensor<3x5xi32>, tensor<3x30xi32>)
          -> (tensor<3xi32>, tensor<5xi32>, tensor<3xi32>, tensor<5xi32>, tensor<3xi32>, tensor<5xi32>) {
      ^bb0(%x: tensor<3x5xi32>, %w: tensor<3x30xi32>):
        %c = kiln.constant dense<-3> : tensor<3x5xi32>
        %y = kiln.add %x, %c : tensor<3x5xi32>
        %s = kiln.reduce sum %y, dims = [1] : tensor<3x5xi32> -> tensor<3xi32>
        %m = kiln.reduce mean %y, dims = [0] : tensor<3x5xi32> -> tensor<5xi32>
        %h = kiln.reduce max %y, dims = [1] : tensor<3x5xi32> -> tensor<3xi32>
        %l = kiln.reduce min %y, dims = [0] : tensor<3x5xi32> -> tensor<5xi32>
        %p = kiln.reduce prod %w, dims = [1] : tensor<3x30xi32> -> tensor<3xi32>
        %q = kiln.reduce prod %y, dims = [0] : tensor<3x5xi32> -> tensor<5xi32>
        kiln.yield %s, %m, %h, %l, %p, %q : tensor<3xi32>, tensor<5xi32>, tensor<3xi32>, tensor<5xi32>, tensor<3xi32>, tensor<5xi32>
      }
      return %r#0, %r#1, %r#2, %r#3, %r#4, %r#5 : tensor<3xi32>, tensor<5xi32>, tensor<3xi32>, tensor<5xi32>, tensor<3xi32>, tensor<5xi32>
    })mlir";
  FusionOp fusion = parseFusion(text);
  ASSERT_TRUE(fusion) << diagnostics;
  for (uint64_t seed = baseSeed(), i = 0; i < 5; ++i, ++seed)
    EXPECT_EQ(check(fusion, seed, 7), "") << "seed " << seed;
}

// roundingSpread, by which check() lets an element differ: 1/sqrt(v + s^2)
// for a sum s of 12 terms, where column 0's v is drawn just above -s^2 (as
// Adam's second moment 0.999 v + 0.001 g^2 may come out on random inputs)
// and column 1's v is 1. The sum added in f32 forward, backward and in
// pairs moves column 0 by what 1e-5 of the result need not cover, and the
// spread covers each order; column 1's spread stays within the tolerance,
// so a result off by twice the tolerance there still fails.
TEST_F(ReductionKernelTest, RoundingSpreadCoversACancellationAfterASum) {
  const char *text = R"mlir(
    func.func @main(%g: tensor<12x2xf32>, %v: tensor<2xf32>) -> tensor<2xf32> {
      %r = kiln.fusion reduction (%g, %v) : (tensor<12x2xf32>, tensor<2xf32>) -> tensor<2xf32> {
      ^bb0(%a: tensor<12x2xf32>, %b: tensor<2xf32>):
        %s = kiln.reduce sum %a, dims = [0] : tensor<12x2xf32> -> tensor<2xf32>
        %q = kiln.mul %s, %s : tensor<2xf32>
        %w = kiln.add %b, %q : tensor<2xf32>
        %y = kiln.rsqrt %w : tensor<2xf32>
        kiln.yield %y : tensor<2xf32>
      }
      return %r : tensor<2xf32>
    })mlir";
  FusionOp fusion = parseFusion(text);
  ASSERT_TRUE(fusion) << diagnostics;
  uint64_t seed = baseSeed();
  std::mt19937_64 rng(seed);
  HostTensor g = randomTensor(
      RankedTensorType::get({12, 2}, Float32Type::get(&context)), rng, 1);
  double exact = 0;
  for (int i = 0; i < 12; ++i)
    exact += g[i * 2];
  HostTensor v(DType::f32, {2}, {-exact * exact * (1 - 1e-4), 1.0});
  v.roundAll();
  Interpreter interpreter;
  SmallVector<HostTensor> expected;
  ASSERT_TRUE(succeeded(interpreter.evaluate(fusion, {g, v}, expected)))
      << diagnostics;
  std::vector<HostTensor> spread;
  ASSERT_EQ(codegen_test::roundingSpread(fusion.getBody().front(), {g, v},
                                         expected, tolerance, seed, spread),
            "");
  // Each column's sum added in f32 in three orders, then the update in f32.
  auto forward = [](std::vector<float> t) {
    float sum = 0;
    for (float x : t)
      sum += x;
    return sum;
  };
  auto backward = [&](std::vector<float> t) {
    std::reverse(t.begin(), t.end());
    return forward(t);
  };
  auto pairwise = [](std::vector<float> t) {
    while (t.size() > 1) {
      std::vector<float> next;
      for (size_t i = 0; i + 1 < t.size(); i += 2)
        next.push_back(t[i] + t[i + 1]);
      if (t.size() % 2)
        next.push_back(t.back());
      t = next;
    }
    return t.front();
  };
  for (int column = 0; column < 2; ++column) {
    std::vector<float> terms;
    for (int i = 0; i < 12; ++i)
      terms.push_back(float(g[i * 2 + column]));
    for (float sum : {forward(terms), backward(terms), pairwise(terms)}) {
      float w = float(v[column]) + sum * sum;
      double update = float(1 / std::sqrt(double(w)));
      EXPECT_LE(std::fabs(update - expected[0][column]), spread[0][column])
          << "column " << column << " seed " << seed;
    }
  }
  EXPECT_GT(spread[0][0], 1e-5 * std::fabs(expected[0][0])) << "seed " << seed;
  double bound = tolerance.bound(DType::f32, expected[0][1], expected[0][1], 0);
  EXPECT_LT(spread[0][1], bound) << "seed " << seed;
  HostTensor wrong = expected[0];
  wrong[1] += 2 * bound;
  EXPECT_NE(codegen_test::compareWithin(expected[0], wrong, tolerance, nullptr,
                                        &spread[0]),
            "");
}

// max and min propagate NaN (sqrt of the negative inputs) as the
// interpreter does, rather than skipping it as maxnum would.
TEST_F(ReductionKernelTest, MaxAndMinPropagateNaN) {
  const char *text = R"mlir(
    func.func @main(%a: tensor<4x6xf32>) -> (tensor<4xf32>, tensor<6xf32>) {
      %r:2 = kiln.fusion multi_output (%a) : (tensor<4x6xf32>) -> (tensor<4xf32>, tensor<6xf32>) {
      ^bb0(%x: tensor<4x6xf32>):
        %s = kiln.sqrt %x : tensor<4x6xf32>
        %h = kiln.reduce max %s, dims = [1] : tensor<4x6xf32> -> tensor<4xf32>
        %l = kiln.reduce min %s, dims = [0] : tensor<4x6xf32> -> tensor<6xf32>
        kiln.yield %h, %l : tensor<4xf32>, tensor<6xf32>
      }
      return %r#0, %r#1 : tensor<4xf32>, tensor<6xf32>
    })mlir";
  FusionOp fusion = parseFusion(text);
  ASSERT_TRUE(fusion) << diagnostics;
  for (uint64_t seed = baseSeed(), i = 0; i < 5; ++i, ++seed)
    EXPECT_EQ(check(fusion, seed, 7), "") << "seed " << seed;
}

// A softmax's row max and row sum are built once per row: each reduction
// loop (an scf.for with an accumulator) sits directly in the row loop, not
// in the column loop.
TEST_F(ReductionKernelTest, RowReductionsAreHoistedOutOfTheColumnLoop) {
  const char *text = R"mlir(
    func.func @main(%a: tensor<4x64xf32>) -> tensor<4x64xf32> {
      %r = kiln.fusion reduction (%a) : (tensor<4x64xf32>) -> tensor<4x64xf32> {
      ^bb0(%x: tensor<4x64xf32>):
        %m = kiln.reduce max %x, dims = [1] : tensor<4x64xf32> -> tensor<4xf32>
        %mb = kiln.broadcast_in_dim %m, dims = [0] : tensor<4xf32> -> tensor<4x64xf32>
        %d = kiln.sub %x, %mb : tensor<4x64xf32>
        %e = kiln.exp %d : tensor<4x64xf32>
        %s = kiln.reduce sum %e, dims = [1] : tensor<4x64xf32> -> tensor<4xf32>
        %sb = kiln.broadcast_in_dim %s, dims = [0] : tensor<4xf32> -> tensor<4x64xf32>
        %y = kiln.div %e, %sb : tensor<4x64xf32>
        kiln.yield %y : tensor<4x64xf32>
      }
      return %r : tensor<4x64xf32>
    })mlir";
  FusionOp fusion = parseFusion(text);
  ASSERT_TRUE(fusion) << diagnostics;
  FailureOr<OwningOpRef<ModuleOp>> kernel = buildLoopKernelModule(fusion);
  ASSERT_TRUE(succeeded(kernel)) << diagnostics;
  // A row's loop steps by the 16 partial results it keeps (their loop is
  // inside it).
  int reductionLoops = 0;
  (*kernel)->walk([&](scf::ForOp loop) {
    if (getConstantIntValue(loop.getStep()) != 16)
      return;
    ++reductionLoops;
    int enclosing = 0;
    for (Operation *p = loop->getParentOp(); p; p = p->getParentOp())
      enclosing += isa<scf::ForOp>(p);
    EXPECT_EQ(enclosing, 1) << printed(kernel->get());
  });
  EXPECT_EQ(reductionLoops, 2) << printed(kernel->get());
  EXPECT_EQ(check(fusion, baseSeed(), 4), "");
}

// An attention's masked softmax (scale, causal mask from two iotas, row
// max, exp, row sum; GPT-2's at 12 x 1024 x 1024 took 42 ms a layer on one
// thread): each row's partial results vectorize whole. With 16 scalar
// partials in the loop body, the SLP vectorizer paired them (<2 x float>
// beside scalar loads: the mask's i64 compares were too wide for it).
// The check is on the loop's multiply, so that it holds on AVX2 and
// AVX-512 hosts alike.
TEST_F(ReductionKernelTest, MaskedSoftmaxRowsVectorizeWhole) {
  const char *text = R"mlir(
    func.func @main(%a: tensor<2x64x64xf32>) -> tensor<2x64x64xf32> {
      %r = kiln.fusion reduction (%a) : (tensor<2x64x64xf32>) -> tensor<2x64x64xf32> {
      ^bb0(%x: tensor<2x64x64xf32>):
        %qi = kiln.iota dim = 0 : tensor<64x64xi32>
        %ki = kiln.iota dim = 1 : tensor<64x64xi32>
        %keep = kiln.compare ge, %qi, %ki : tensor<64x64xi32>
        %kb = kiln.broadcast_in_dim %keep, dims = [1, 2] : tensor<64x64xi1> -> tensor<2x64x64xi1>
        %ninf = kiln.constant dense<0xFF800000> : tensor<2x64x64xf32>
        %c = kiln.constant dense<1.250000e-01> : tensor<2x64x64xf32>
        %xs = kiln.mul %x, %c : tensor<2x64x64xf32>
        %xm = kiln.select %kb, %xs, %ninf : tensor<2x64x64xi1>, tensor<2x64x64xf32>
        %m = kiln.reduce max %xm, dims = [2] : tensor<2x64x64xf32> -> tensor<2x64xf32>
        %mb = kiln.broadcast_in_dim %m, dims = [0, 1] : tensor<2x64xf32> -> tensor<2x64x64xf32>
        %d = kiln.sub %xm, %mb : tensor<2x64x64xf32>
        %e = kiln.exp %d : tensor<2x64x64xf32>
        %s = kiln.reduce sum %e, dims = [2] : tensor<2x64x64xf32> -> tensor<2x64xf32>
        %sb = kiln.broadcast_in_dim %s, dims = [0, 1] : tensor<2x64xf32> -> tensor<2x64x64xf32>
        %y = kiln.div %e, %sb : tensor<2x64x64xf32>
        kiln.yield %y : tensor<2x64x64xf32>
      }
      return %r : tensor<2x64x64xf32>
    })mlir";
  FusionOp fusion = parseFusion(text);
  ASSERT_TRUE(fusion) << diagnostics;
  std::string llvmText = optimizedKernelText(fusion);
  ASSERT_FALSE(llvmText.empty());
  // The row loop scales whole vectors of the row (8 lanes with AVX2, 16
  // with AVX-512), never pairs. (After the loop, combining the 16
  // partials may use pairs on an AVX2 host: that is not the loop.)
  bool wide = llvmText.find("fmul <8 x float>") != std::string::npos ||
              llvmText.find("fmul <16 x float>") != std::string::npos;
  EXPECT_TRUE(wide) << llvmText;
  EXPECT_EQ(llvmText.find("fmul <2 x float>"), std::string::npos) << llvmText;
  for (uint64_t seed = baseSeed(), i = 0; i < 3; ++i, ++seed)
    EXPECT_EQ(check(fusion, seed, 4), "") << "seed " << seed;
}

// Reductions over a long contiguous last dimension keep 16 partial results
// (so they vectorize), combine them pairwise and add the remainder: rows of
// 77 (a remainder of 13) and 32 (none), every kind, f32 and f64, still match
// the interpreter, NaN included; a softmax's two row reductions use lanes.
TEST_F(ReductionKernelTest, LongRowReductionsUseLanes) {
  const char *text = R"mlir(
    func.func @main(%a: tensor<3x77xf32>, %b: tensor<5x32xf64>)
        -> (tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<5xf64>, tensor<5xf64>) {
      %r:6 = kiln.fusion multi_output (%a, %b) : (tensor<3x77xf32>, tensor<5x32xf64>)
          -> (tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<5xf64>, tensor<5xf64>) {
      ^bb0(%x: tensor<3x77xf32>, %y: tensor<5x32xf64>):
        %q = kiln.sqrt %x : tensor<3x77xf32>
        %s = kiln.reduce sum %x, dims = [1] : tensor<3x77xf32> -> tensor<3xf32>
        %h = kiln.reduce max %q, dims = [1] : tensor<3x77xf32> -> tensor<3xf32>
        %l = kiln.reduce min %x, dims = [1] : tensor<3x77xf32> -> tensor<3xf32>
        %m = kiln.reduce mean %x, dims = [1] : tensor<3x77xf32> -> tensor<3xf32>
        %t = kiln.reduce sum %y, dims = [1] : tensor<5x32xf64> -> tensor<5xf64>
        %u = kiln.reduce max %y, dims = [1] : tensor<5x32xf64> -> tensor<5xf64>
        kiln.yield %s, %h, %l, %m, %t, %u : tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<5xf64>, tensor<5xf64>
      }
      return %r#0, %r#1, %r#2, %r#3, %r#4, %r#5 : tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<5xf64>, tensor<5xf64>
    })mlir";
  FusionOp fusion = parseFusion(text);
  ASSERT_TRUE(fusion) << diagnostics;
  for (uint64_t seed = baseSeed(), i = 0; i < 5; ++i, ++seed)
    EXPECT_EQ(check(fusion, seed, 4), "") << "seed " << seed;

  // A per-row value (the broadcast label, as in a cross-entropy) read in
  // both the lanes loop and the remainder loop.
  const char *perRow = R"mlir(
    func.func @main(%a: tensor<4x50xf32>, %l: tensor<4xi32>) -> tensor<4xf32> {
      %r = kiln.fusion reduction (%a, %l) : (tensor<4x50xf32>, tensor<4xi32>) -> tensor<4xf32> {
      ^bb0(%x: tensor<4x50xf32>, %y: tensor<4xi32>):
        %i = kiln.iota dim = 1 : tensor<4x50xi32>
        %yb = kiln.broadcast_in_dim %y, dims = [0] : tensor<4xi32> -> tensor<4x50xi32>
        %hit = kiln.compare eq, %i, %yb : tensor<4x50xi32>
        %z = kiln.constant dense<0.0> : tensor<4x50xf32>
        %p = kiln.select %hit, %x, %z : tensor<4x50xi1>, tensor<4x50xf32>
        %s = kiln.reduce sum %p, dims = [1] : tensor<4x50xf32> -> tensor<4xf32>
        kiln.yield %s : tensor<4xf32>
      }
      return %r : tensor<4xf32>
    })mlir";
  OwningOpRef<ModuleOp> perRowModule = parseSourceString<ModuleOp>(perRow, &context);
  ASSERT_TRUE(perRowModule) << diagnostics;
  perRowModule->walk([&](FusionOp f) { fusion = f; });
  EXPECT_EQ(check(fusion, baseSeed(), 50), "");

  const char *softmax = R"mlir(
    func.func @main(%a: tensor<8x128xf32>) -> tensor<8x128xf32> {
      %r = kiln.fusion reduction (%a) : (tensor<8x128xf32>) -> tensor<8x128xf32> {
      ^bb0(%x: tensor<8x128xf32>):
        %m = kiln.reduce max %x, dims = [1] : tensor<8x128xf32> -> tensor<8xf32>
        %mb = kiln.broadcast_in_dim %m, dims = [0] : tensor<8xf32> -> tensor<8x128xf32>
        %d = kiln.sub %x, %mb : tensor<8x128xf32>
        %e = kiln.exp %d : tensor<8x128xf32>
        %s = kiln.reduce sum %e, dims = [1] : tensor<8x128xf32> -> tensor<8xf32>
        %sb = kiln.broadcast_in_dim %s, dims = [0] : tensor<8xf32> -> tensor<8x128xf32>
        %y = kiln.div %e, %sb : tensor<8x128xf32>
        kiln.yield %y : tensor<8x128xf32>
      }
      return %r : tensor<8x128xf32>
    })mlir";
  OwningOpRef<ModuleOp> softmaxModule = parseSourceString<ModuleOp>(softmax, &context);
  ASSERT_TRUE(softmaxModule) << diagnostics;
  softmaxModule->walk([&](FusionOp f) { fusion = f; });
  // Both row reductions (max, sum) keep 16 partial results in a stack
  // array allocated once, at the kernel's entry (KernelHooks::
  // partialResults), and combine each step of the row with them in a loop
  // over the 16 (what LLVM's loop vectorizer makes one vector operation);
  // the -O3 code is vectorized.
  FailureOr<OwningOpRef<ModuleOp>> kernel = buildLoopKernelModule(fusion);
  ASSERT_TRUE(succeeded(kernel)) << diagnostics;
  int laneLoops = 0, arrays = 0;
  (*kernel)->walk([&](scf::ForOp loop) {
    bool lanes = getConstantIntValue(loop.getLowerBound()) == 0 &&
                 getConstantIntValue(loop.getUpperBound()) == 16 &&
                 getConstantIntValue(loop.getStep()) == 1 &&
                 loop.getInitArgs().empty();
    bool stores = false;
    loop.getBody()->walk([&](memref::StoreOp store) {
      stores |= isa_and_nonnull<memref::AllocaOp>(store.getMemRef().getDefiningOp());
    });
    laneLoops += lanes && stores;
  });
  (*kernel)->walk([&](memref::AllocaOp alloca) {
    ++arrays;
    EXPECT_TRUE(isa<func::FuncOp>(alloca->getParentOp())) << printed(kernel->get());
    EXPECT_EQ(alloca.getType().getShape(), ArrayRef<int64_t>{16});
  });
  EXPECT_EQ(laneLoops, 2) << printed(kernel->get());
  EXPECT_EQ(arrays, 2) << printed(kernel->get());
  std::string llvmText = optimizedKernelText(fusion);
  ASSERT_FALSE(llvmText.empty());
  // Vectorized at the host's width (<16 x float> with AVX-512, <8 x
  // float> with AVX2).
  EXPECT_NE(llvmText.find(" x float>"), std::string::npos) << llvmText;
  EXPECT_EQ(check(fusion, baseSeed(), 4), "");
}

// A column reduction (a bias gradient: the sum over rows, keeping the
// contiguous last dimension) accumulates a tile of consecutive columns at
// once into a stack buffer: the input is read in a loop over the tile's
// lanes inside the loop over rows, so the reads are contiguous. Each column
// still sums its rows in order, so the result is the interpreter's.
TEST_F(ReductionKernelTest, ColumnReductionsAccumulateTilesOfLanes) {
  const char *text = R"mlir(
    func.func @main(%a: tensor<64x300xf32>) -> (tensor<300xf32>, tensor<300xf32>) {
      %r:2 = kiln.fusion reduction (%a) : (tensor<64x300xf32>) -> (tensor<300xf32>, tensor<300xf32>) {
      ^bb0(%x: tensor<64x300xf32>):
        %s = kiln.reduce sum %x, dims = [0] : tensor<64x300xf32> -> tensor<300xf32>
        %t = kiln.tanh %s : tensor<300xf32>
        kiln.yield %s, %t : tensor<300xf32>, tensor<300xf32>
      }
      return %r#0, %r#1 : tensor<300xf32>, tensor<300xf32>
    })mlir";
  FusionOp fusion = parseFusion(text);
  ASSERT_TRUE(fusion) << diagnostics;
  FailureOr<OwningOpRef<ModuleOp>> kernel = buildLoopKernelModule(fusion);
  ASSERT_TRUE(succeeded(kernel)) << diagnostics;
  int allocas = 0;
  (*kernel)->walk([&](memref::AllocaOp) { ++allocas; });
  auto func = *(*kernel)->getOps<func::FuncOp>().begin();
  (*kernel)->walk([&](memref::LoadOp load) {
    if (load.getMemRef() != func.getArgument(0))
      return;
    auto lanes = load->getParentOfType<scf::ForOp>();
    ASSERT_TRUE(lanes);
    EXPECT_FALSE(lanes.getUpperBound().getDefiningOp<arith::ConstantIndexOp>())
        << printed(kernel->get());
    EXPECT_EQ(rowsAroundLanes(load), 64) << printed(kernel->get());
  });
  EXPECT_EQ(allocas, 1) << printed(kernel->get());
  EXPECT_EQ(loadsOf(**kernel, 0), 1) << printed(kernel->get());
  EXPECT_EQ(check(fusion, baseSeed(), 4), "");
}

// A multi-output fusion that stores a gradient [N, C] and sums it over N (a
// ReLU's gradient beside its bias gradient, as every MLP layer's backward
// pass fuses them) reads its inputs once: the gradient's nest rides on the
// column reduction's tiles, which store each element where they build it.
// Each input is loaded in one place, inside the tile's lanes loop, and the
// gradient is stored there too. A third result of the operand's shape that
// reads a reduction of its own (the rows' max) cannot ride and keeps its
// nest (and its own loads).
TEST_F(ReductionKernelTest,
       ElementResultsRideOnTheColumnReductionOfTheirElements) {
  const char *text = R"mlir(
    func.func @main(%h: tensor<48x300xf32>, %dy: tensor<48x300xf32>)
        -> (tensor<48x300xf32>, tensor<300xf32>, tensor<300xf32>) {
      %r:3 = kiln.fusion multi_output (%h, %dy) : (tensor<48x300xf32>, tensor<48x300xf32>) -> (tensor<48x300xf32>, tensor<300xf32>, tensor<300xf32>) {
      ^bb0(%x: tensor<48x300xf32>, %g: tensor<48x300xf32>):
        %zero = kiln.constant dense<0.0> : tensor<48x300xf32>
        %pos = kiln.compare gt, %x, %zero : tensor<48x300xf32>
        %dx = kiln.select %pos, %g, %zero : tensor<48x300xi1>, tensor<48x300xf32>
        %db = kiln.reduce sum %dx, dims = [0] : tensor<48x300xf32> -> tensor<300xf32>
        %t = kiln.tanh %db : tensor<300xf32>
        kiln.yield %dx, %db, %t : tensor<48x300xf32>, tensor<300xf32>, tensor<300xf32>
      }
      return %r#0, %r#1, %r#2 : tensor<48x300xf32>, tensor<300xf32>, tensor<300xf32>
    })mlir";
  FusionOp fusion = parseFusion(text);
  ASSERT_TRUE(fusion) << diagnostics;
  FailureOr<OwningOpRef<ModuleOp>> kernel = buildLoopKernelModule(fusion);
  ASSERT_TRUE(succeeded(kernel)) << diagnostics;
  auto func = *(*kernel)->getOps<func::FuncOp>().begin();
  int gradientStores = 0;
  (*kernel)->walk([&](memref::StoreOp store) {
    if (store.getMemRef() != func.getArgument(2))
      return;
    ++gradientStores;
    // Inside the lanes loop, inside the loop over the 48 rows.
    EXPECT_EQ(rowsAroundLanes(store), 48) << printed(kernel->get());
  });
  EXPECT_EQ(loadsOf(**kernel, 0), 1) << printed(kernel->get());
  EXPECT_EQ(loadsOf(**kernel, 1), 1) << printed(kernel->get());
  EXPECT_EQ(gradientStores, 1) << printed(kernel->get());
  EXPECT_EQ(check(fusion, baseSeed(), 4), "");

  const char *withRowMax = R"mlir(
    func.func @main(%h: tensor<48x300xf32>, %dy: tensor<48x300xf32>)
        -> (tensor<48x300xf32>, tensor<300xf32>) {
      %r:2 = kiln.fusion multi_output (%h, %dy) : (tensor<48x300xf32>, tensor<48x300xf32>) -> (tensor<48x300xf32>, tensor<300xf32>) {
      ^bb0(%x: tensor<48x300xf32>, %g: tensor<48x300xf32>):
        %p = kiln.mul %x, %g : tensor<48x300xf32>
        %db = kiln.reduce sum %p, dims = [0] : tensor<48x300xf32> -> tensor<300xf32>
        %m = kiln.reduce max %x, dims = [1] : tensor<48x300xf32> -> tensor<48xf32>
        %mb = kiln.broadcast_in_dim %m, dims = [0] : tensor<48xf32> -> tensor<48x300xf32>
        %s = kiln.sub %p, %mb : tensor<48x300xf32>
        kiln.yield %s, %db : tensor<48x300xf32>, tensor<300xf32>
      }
      return %r#0, %r#1 : tensor<48x300xf32>, tensor<300xf32>
    })mlir";
  FusionOp second = parseFusion(withRowMax);
  ASSERT_TRUE(second) << diagnostics;
  FailureOr<OwningOpRef<ModuleOp>> apart = buildLoopKernelModule(second);
  ASSERT_TRUE(succeeded(apart)) << diagnostics;
  EXPECT_GE(loadsOf(**apart, 0), 2) << printed(apart->get());
  EXPECT_EQ(check(second, baseSeed(), 4), "");
}

// A nest whose elements read a reduction through a broadcast (a batch norm's
// per-channel mean spread over [N, C, H, W]) loops over the channels
// outermost, so each channel's sum is built once rather than once per image:
// the outermost loop (split into parts) runs over C = 4, not N = 8. A
// ResNet-8's layer-3 batch norm took 26 of the step's 120 ms the other way.
TEST_F(ReductionKernelTest, BroadcastReductionsLoopOutermost) {
  const char *text = R"mlir(
    func.func @main(%a: tensor<8x4x5x5xf32>) -> tensor<8x4x5x5xf32> {
      %r = kiln.fusion reduction (%a) : (tensor<8x4x5x5xf32>) -> tensor<8x4x5x5xf32> {
      ^bb0(%x: tensor<8x4x5x5xf32>):
        %s = kiln.reduce mean %x, dims = [0, 2, 3] : tensor<8x4x5x5xf32> -> tensor<4xf32>
        %b = kiln.broadcast_in_dim %s, dims = [1] : tensor<4xf32> -> tensor<8x4x5x5xf32>
        %c = kiln.sub %x, %b : tensor<8x4x5x5xf32>
        kiln.yield %c : tensor<8x4x5x5xf32>
      }
      return %r : tensor<8x4x5x5xf32>
    })mlir";
  FusionOp fusion = parseFusion(text);
  ASSERT_TRUE(fusion) << diagnostics;
  FailureOr<OwningOpRef<ModuleOp>> kernel = buildLoopKernelModule(fusion);
  ASSERT_TRUE(succeeded(kernel)) << diagnostics;
  auto func = *(*kernel)->getOps<func::FuncOp>().begin();
  auto loops = func.getBody().front().getOps<scf::ForOp>();
  ASSERT_FALSE(loops.empty()) << printed(kernel->get());
  scf::ForOp outer = *loops.begin();
  // ub = extent * (part + 1) / parts.
  auto div = outer.getUpperBound().getDefiningOp<arith::DivUIOp>();
  ASSERT_TRUE(div) << printed(kernel->get());
  auto mul = div.getLhs().getDefiningOp<arith::MulIOp>();
  ASSERT_TRUE(mul) << printed(kernel->get());
  auto extent = mul.getLhs().getDefiningOp<arith::ConstantIndexOp>();
  ASSERT_TRUE(extent) << printed(kernel->get());
  EXPECT_EQ(extent.value(), 4) << printed(kernel->get());
  EXPECT_EQ(check(fusion, baseSeed(), 4), "");
}

// A batch norm's backward pass: two sums of the same elements (over N, H
// and W) and a max of different ones. The two sums are built in one loop
// nest (sibling reductions) with the mean of the same elements, the max on
// its own; each is right. The variance's sum of squared deviations needs
// that mean first, so it is built after it, in a nest of its own. With W = 7 the sums keep 16 partial results over
// all their elements (chunks of the row), and with parts = 3 the kernel's
// channels split over parts, each sum the same in every part.
TEST_F(ReductionKernelTest, SiblingSumsShareOneLoopNest) {
  const char *text = R"mlir(
    func.func @main(%a: tensor<6x5x7x7xf32>, %g: tensor<6x5x7x7xf32>, %h: tensor<6x5x9x7xf32>) -> (tensor<5xf32>, tensor<5xf32>, tensor<5xf32>, tensor<5xf32>) {
      %r:4 = kiln.fusion reduction (%a, %g, %h) : (tensor<6x5x7x7xf32>, tensor<6x5x7x7xf32>, tensor<6x5x9x7xf32>) -> (tensor<5xf32>, tensor<5xf32>, tensor<5xf32>, tensor<5xf32>) {
      ^bb0(%x: tensor<6x5x7x7xf32>, %dy: tensor<6x5x7x7xf32>, %z: tensor<6x5x9x7xf32>):
        %p = kiln.mul %x, %dy : tensor<6x5x7x7xf32>
        %s1 = kiln.reduce sum %p, dims = [0, 2, 3] : tensor<6x5x7x7xf32> -> tensor<5xf32>
        %s2 = kiln.reduce sum %dy, dims = [0, 2, 3] : tensor<6x5x7x7xf32> -> tensor<5xf32>
        %s3 = kiln.reduce max %z, dims = [0, 2, 3] : tensor<6x5x9x7xf32> -> tensor<5xf32>
        %m = kiln.reduce mean %x, dims = [0, 2, 3] : tensor<6x5x7x7xf32> -> tensor<5xf32>
        %mb = kiln.broadcast_in_dim %m, dims = [1] : tensor<5xf32> -> tensor<6x5x7x7xf32>
        %d = kiln.sub %x, %mb : tensor<6x5x7x7xf32>
        %d2 = kiln.mul %d, %d : tensor<6x5x7x7xf32>
        %v = kiln.reduce mean %d2, dims = [0, 2, 3] : tensor<6x5x7x7xf32> -> tensor<5xf32>
        kiln.yield %s1, %s2, %s3, %v : tensor<5xf32>, tensor<5xf32>, tensor<5xf32>, tensor<5xf32>
      }
      return %r#0, %r#1, %r#2, %r#3 : tensor<5xf32>, tensor<5xf32>, tensor<5xf32>, tensor<5xf32>
    })mlir";
  FusionOp fusion = parseFusion(text);
  ASSERT_TRUE(fusion) << diagnostics;
  for (int64_t parts : {1, 3})
    EXPECT_EQ(check(fusion, baseSeed() + parts, 4), "") << parts << " parts";
  // The nest over the 5 channels holds one loop over N per group built:
  // s1, s2 and the mean; s3; the variance (reading the mean built before
  // it): 3. Built one at a time, 5.
  FailureOr<OwningOpRef<ModuleOp>> kernel = buildLoopKernelModule(fusion);
  ASSERT_TRUE(succeeded(kernel)) << diagnostics;
  int overN = 0;
  (*kernel)->walk([&](scf::ForOp loop) {
    auto extent = loop.getUpperBound().getDefiningOp<arith::ConstantIndexOp>();
    if (extent && extent.value() == 6)
      ++overN;
  });
  EXPECT_EQ(overN, 3) << printed(kernel->get());
}

// A long f32 sum accumulates in f64 on the CPU (KernelHooks::wideSums): a
// channel's sum over batch and positions of [64, 28, 28] elements of 0.1f
// keeps 16 partial sums (element w of each row of 28 in partial w mod 16),
// partial 0 adding 3584 elements; added in order in f32, such a sum is off
// by about 3e-5 of itself, past the 1e-5 tolerance. The kernel's
// accumulators are doubles. A short sum (the 4-element one) stays in f32.
TEST_F(ReductionKernelTest, LongSumsAccumulateInF64) {
  const char *text = R"mlir(
    func.func @main(%a: tensor<64x4x28x28xf32>) -> (tensor<4xf32>, tensor<64x28x28xf32>) {
      %r:2 = kiln.fusion reduction (%a) : (tensor<64x4x28x28xf32>) -> (tensor<4xf32>, tensor<64x28x28xf32>) {
      ^bb0(%x: tensor<64x4x28x28xf32>):
        %zero = kiln.constant dense<0.0> : tensor<64x4x28x28xf32>
        %tenth = kiln.constant dense<0.1> : tensor<64x4x28x28xf32>
        %m = kiln.mul %x, %zero : tensor<64x4x28x28xf32>
        %v = kiln.add %m, %tenth : tensor<64x4x28x28xf32>
        %s = kiln.reduce sum %v, dims = [0, 2, 3] : tensor<64x4x28x28xf32> -> tensor<4xf32>
        %t = kiln.reduce sum %v, dims = [1] : tensor<64x4x28x28xf32> -> tensor<64x28x28xf32>
        kiln.yield %s, %t : tensor<4xf32>, tensor<64x28x28xf32>
      }
      return %r#0, %r#1 : tensor<4xf32>, tensor<64x28x28xf32>
    })mlir";
  FusionOp fusion = parseFusion(text);
  ASSERT_TRUE(fusion) << diagnostics;
  EXPECT_EQ(check(fusion, baseSeed(), 4), "");
  std::string llvmText = optimizedKernelText(fusion);
  ASSERT_FALSE(llvmText.empty());
  // The long sum's 16 partial results are vector lanes (keepsChunkLanes:
  // each row of 28 is added in chunks of 16 and 12); the short sum's adds
  // may be scalar or vector.
  EXPECT_TRUE(std::regex_search(llvmText, std::regex("fadd <[0-9]+ x double>")))
      << llvmText;
  EXPECT_TRUE(std::regex_search(llvmText, std::regex("fadd (<[0-9]+ x )?float")))
      << llvmText;
}

// A dot_general inside a non-gemm fusion is named in the diagnostic.
TEST_F(ReductionKernelTest, RejectsDotGeneralInside) {
  const char *text = R"mlir(
    func.func @main(%a: tensor<2x3xf32>, %b: tensor<3x4xf32>) -> tensor<2xf32> {
      %r = kiln.fusion reduction (%a, %b) : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2xf32> {
      ^bb0(%x: tensor<2x3xf32>, %y: tensor<3x4xf32>):
        %d = kiln.dot_general %x, %y, batch = [] x [], contract = [1] x [0] : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
        %s = kiln.reduce sum %d, dims = [1] : tensor<2x4xf32> -> tensor<2xf32>
        kiln.yield %s : tensor<2xf32>
      }
      return %r : tensor<2xf32>
    })mlir";
  FusionOp fusion = parseFusion(text);
  ASSERT_TRUE(fusion) << diagnostics;
  EXPECT_TRUE(failed(compileLoopFusion(fusion)));
  EXPECT_NE(diagnostics.find("kiln.dot_general"), std::string::npos) << diagnostics;
}

// Every reduction, multi_output and horizontal fusion of a zoo model's
// compiled training step.
class ZooReductionKernelTest : public ReductionKernelTest {
protected:
  void checkModel(OwningOpRef<ModuleOp> model, int64_t intBound, size_t minFusions) {
    checkZooFusions(std::move(model), intBound, minFusions, [](FusionOp f) {
      return f.getKind() != FusionKind::loop && f.getKind() != FusionKind::gemm;
    });
  }
};

TEST_F(ZooReductionKernelTest, Mlp) {
  cli::MlpOptions options;
  options.layers = {64, 32, 10};
  options.batch = 8;
  checkModel(cli::buildMlp(&context, options), 10, 1);
}

TEST_F(ZooReductionKernelTest, LeNet5) {
  cli::LeNet5Options options;
  options.batch = 2;
  checkModel(cli::buildLeNet5(&context, options), 10, 1);
}

// The batch norms' backward passes sum products over batch and positions
// (784 to 3136 elements) that cancel on random data: each product's f32
// rounding, which the interpreter's f64 does not make, then moves an element
// of a sum by up to ~2e-5 of its value, so these fusions are also checked
// against the tensor's largest element (5e-5 of it).
TEST_F(ZooReductionKernelTest, ResNet) {
  cli::ResNetOptions options;
  options.width = 4;
  options.batch = 4;
  tolerance.f32Normwise = 5e-5;
  checkModel(cli::buildResNet(&context, options), 10, 1);
}

// Two micro-batches per step: other fusions (no sibling fusion, each
// micro-batch's own kernels). Their long sums over batch and positions
// accumulate in f64 (KernelHooks::wideSums): summed in f32 in order, a
// 3136-element sum was off by up to 3e-4 of its value, which the batch
// norms' backward passes turned into gradients off by 2% of their update.
TEST_F(ZooReductionKernelTest, ResNetGradAccum) {
  cli::ResNetOptions options;
  options.width = 4;
  options.batch = 4;
  gradAccum = 2;
  tolerance.f32Normwise = 5e-5;
  checkModel(cli::buildResNet(&context, options), 10, 1);
}

TEST_F(ZooReductionKernelTest, SmallGpt) {
  cli::GptOptions options;
  options.layers = 2;
  options.hidden = 16;
  options.heads = 2;
  options.seq = 6;
  options.vocab = 20;
  options.batch = 2;
  checkModel(cli::buildGpt(&context, options), 20, 1);
}

} // namespace
