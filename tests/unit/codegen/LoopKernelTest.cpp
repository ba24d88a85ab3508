//===- LoopKernelTest.cpp - CPU loop kernels against the interpreter ------===//
//
// Compiles `loop` fusions to native code (codegen/cpu/LowerToLLVM.h), runs
// them on random inputs and compares with the reference interpreter's
// evaluation of the same fusion op: random fusions built here (chains of
// elementwise ops with broadcasts, transposes, reshapes, converts, iotas and
// constants, f32 and f64) and every loop fusion of the zoo's compiled
// training steps. Set KILN_CODEGEN_SEED to rerun one seed.
//
//===----------------------------------------------------------------------===//

#include "codegen/KernelModel.h"
#include "codegen/cpu/LowerToLLVM.h"
#include "tests/unit/codegen/KernelTestSupport.h"

#include "ir/Interpreter.h"
#include "ir/KilnDialect.h"
#include "ir/KilnOps.h"
#include "passes/Pipelines.h"
#include "tools/kiln/lib/Zoo.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>

namespace {

using namespace mlir;
using namespace kiln;
using codegen_test::baseSeed;
using codegen_test::printed;
using codegen_test::randomTensor;

int64_t numElements(ArrayRef<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

// Elementwise chains: f32 within 1e-6 of max(1, |value|).
class LoopKernelTest : public codegen_test::KernelTestBase {
protected:
  LoopKernelTest() { tolerance.f32 = 1e-6; }
};

// Builds one random loop fusion of element type |element| in a @main.
class RandomFusionBuilder {
public:
  RandomFusionBuilder(MLIRContext *context, uint64_t seed, Type element)
      : b_(context), loc_(b_.getUnknownLoc()), rng_(seed), element_(element) {}

  OwningOpRef<ModuleOp> build() {
    OwningOpRef<ModuleOp> module = ModuleOp::create(loc_);
    // The shape every value in the body is brought to.
    int rank = pick(0, 4);
    for (int i = 0; i < rank; ++i)
      shape_.push_back(pick(1, 7));

    // Inputs and how each reaches |shape_|.
    int numInputs = pick(1, 4);
    enum Kind { same, broadcast, transpose, reshape };
    SmallVector<Kind> kinds;
    SmallVector<Type> inputTypes;
    SmallVector<SmallVector<int64_t>> aux; // dims or permutation
    for (int i = 0; i < numInputs; ++i) {
      Kind kind = static_cast<Kind>(pick(0, 3));
      SmallVector<int64_t> inputShape, extra;
      if (kind == broadcast) {
        for (int64_t d = 0; d < rank; ++d)
          if (pick(0, 1)) {
            extra.push_back(d);
            inputShape.push_back(pick(0, 2) == 0 ? 1 : shape_[d]);
          }
      } else if (kind == transpose) {
        extra = permutation(rank);
        // The input is shape_ permuted by the inverse: transposing by
        // |extra| gives shape_.
        inputShape.resize(rank);
        for (int64_t d = 0; d < rank; ++d)
          inputShape[extra[d]] = shape_[d];
      } else if (kind == reshape) {
        inputShape = otherShape(shape_);
      } else {
        inputShape = shape_;
      }
      kinds.push_back(kind);
      aux.push_back(extra);
      inputTypes.push_back(RankedTensorType::get(inputShape, element_));
    }

    b_.setInsertionPointToEnd(module->getBody());
    auto func = b_.create<func::FuncOp>(loc_, "main",
                                        b_.getFunctionType(inputTypes, {}));
    Block *entry = func.addEntryBlock();

    auto body = std::make_unique<Block>();
    for (Type t : inputTypes)
      body->addArgument(t, loc_);
    b_.setInsertionPointToStart(body.get());
    for (int i = 0; i < numInputs; ++i) {
      Value arg = body->getArgument(i);
      switch (kinds[i]) {
      case same: pool_.push_back(arg); break;
      case broadcast:
        pool_.push_back(b_.create<BroadcastInDimOp>(loc_, type(), arg,
                                                    b_.getDenseI64ArrayAttr(aux[i])));
        break;
      case transpose:
        pool_.push_back(b_.create<TransposeOp>(loc_, arg,
                                               b_.getDenseI64ArrayAttr(aux[i])));
        break;
      case reshape: pool_.push_back(b_.create<ReshapeOp>(loc_, type(), arg)); break;
      }
    }
    int steps = pick(1, 10);
    for (int i = 0; i < steps; ++i)
      pool_.push_back(step());

    SmallVector<Value> results{pool_.back()};
    if (pick(0, 1))
      results.push_back(pool_[pick(0, pool_.size() - 1)]);
    if (pick(0, 1))
      results.push_back(b_.create<ReshapeOp>(
          loc_, RankedTensorType::get(otherShape(shape_), element_), pool_.back()));
    b_.create<YieldOp>(loc_, results);

    b_.setInsertionPointToStart(entry);
    SmallVector<Type> resultTypes;
    for (Value r : results)
      resultTypes.push_back(r.getType());
    auto fusion = b_.create<FusionOp>(loc_, resultTypes, FusionKind::loop,
                                      entry->getArguments());
    fusion.getBody().push_back(body.release());
    b_.create<func::ReturnOp>(loc_);
    return module;
  }

private:
  int pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  RankedTensorType type() { return RankedTensorType::get(shape_, element_); }
  Value any() { return pool_[pick(0, pool_.size() - 1)]; }

  SmallVector<int64_t> permutation(int64_t rank) {
    SmallVector<int64_t> perm;
    for (int64_t d = 0; d < rank; ++d)
      perm.push_back(d);
    std::shuffle(perm.begin(), perm.end(), rng_);
    return perm;
  }

  // Another shape with the same element count: factors moved around, with
  // unit dimensions sprinkled in.
  SmallVector<int64_t> otherShape(ArrayRef<int64_t> shape) {
    SmallVector<int64_t> factors;
    for (int64_t d : shape)
      for (int64_t n = d, f = 2; n > 1;)
        if (n % f == 0) {
          factors.push_back(f);
          n /= f;
        } else {
          ++f;
        }
    std::shuffle(factors.begin(), factors.end(), rng_);
    SmallVector<int64_t> result;
    for (int64_t f : factors) {
      if (!result.empty() && pick(0, 1))
        result.back() *= f;
      else
        result.push_back(f);
      if (pick(0, 4) == 0)
        result.push_back(1);
    }
    if (numElements(result) != numElements(shape))
      result = SmallVector<int64_t>(shape);
    return result;
  }

  Value constant() {
    if (pick(0, 1)) {
      double v = std::uniform_real_distribution<double>(-2, 2)(rng_);
      return b_.create<ConstantOp>(
          loc_, type(), DenseElementsAttr::get(type(), b_.getFloatAttr(element_, v)));
    }
    SmallVector<Attribute> values;
    for (int64_t i = 0; i < numElements(shape_); ++i)
      values.push_back(b_.getFloatAttr(
          element_, std::uniform_real_distribution<double>(-2, 2)(rng_)));
    return b_.create<ConstantOp>(loc_, type(), DenseElementsAttr::get(type(), values));
  }

  Value step() {
    Value x = any();
    switch (pick(0, 23)) {
    case 22: {
      // A window padded back to the full shape.
      SmallVector<int64_t> start, limit, ones, low, high;
      for (int64_t extent : shape_) {
        int64_t lo = pick(0, extent - 1);
        int64_t hi = pick(0, extent - 1 - lo);
        start.push_back(lo);
        limit.push_back(extent - hi);
        ones.push_back(1);
        low.push_back(lo);
        high.push_back(hi);
      }
      Value window = b_.create<SliceOp>(loc_, x, b_.getDenseI64ArrayAttr(start),
                                        b_.getDenseI64ArrayAttr(limit),
                                        b_.getDenseI64ArrayAttr(ones));
      return b_.create<PadOp>(loc_, type(), window, b_.getDenseI64ArrayAttr(low),
                              b_.getDenseI64ArrayAttr(high),
                              b_.getF64FloatAttr(pick(-2, 2) * 0.5));
    }
    case 23: {
      // Every other element of x along one dimension, then the front of
      // another value: the two halves concatenate back to the full shape.
      if (shape_.empty())
        return x;
      int64_t dim = pick(0, shape_.size() - 1);
      int64_t extent = shape_[dim];
      SmallVector<int64_t> start(shape_.size(), 0), limit(shape_), strides(shape_.size(), 1);
      strides[dim] = 2;
      Value evens = b_.create<SliceOp>(loc_, x, b_.getDenseI64ArrayAttr(start),
                                       b_.getDenseI64ArrayAttr(limit),
                                       b_.getDenseI64ArrayAttr(strides));
      strides[dim] = 1;
      limit[dim] = extent - (extent + 1) / 2;
      Value front = b_.create<SliceOp>(loc_, any(), b_.getDenseI64ArrayAttr(start),
                                       b_.getDenseI64ArrayAttr(limit),
                                       b_.getDenseI64ArrayAttr(strides));
      return b_.create<ConcatenateOp>(loc_, type(), ValueRange{evens, front},
                                      static_cast<uint64_t>(dim));
    }
    case 0: return b_.create<NegOp>(loc_, x);
    case 1: return b_.create<AbsOp>(loc_, x);
    case 2: return b_.create<ExpOp>(loc_, b_.create<TanhOp>(loc_, x));
    case 3: return b_.create<TanhOp>(loc_, x);
    case 4: return b_.create<SigmoidOp>(loc_, x);
    case 5: return b_.create<ReluOp>(loc_, x);
    case 6: return b_.create<SqrtOp>(loc_, b_.create<AbsOp>(loc_, x));
    case 7: return b_.create<Log1pOp>(loc_, b_.create<AbsOp>(loc_, x));
    case 8: return b_.create<ErfOp>(loc_, x);
    case 9: return b_.create<SinOp>(loc_, x);
    case 10: return b_.create<AddOp>(loc_, x, any());
    case 11: return b_.create<SubOp>(loc_, x, any());
    case 12: return b_.create<MulOp>(loc_, x, any());
    case 13: return b_.create<MaxOp>(loc_, x, any());
    case 14: {
      Value y = any();
      Value isLess = b_.create<CompareOp>(loc_, CompareDirection::lt, x, y);
      return b_.create<SelectOp>(loc_, isLess, x, y);
    }
    case 15: {
      Value one = b_.create<ConstantOp>(
          loc_, type(), DenseElementsAttr::get(type(), b_.getFloatAttr(element_, 1.0)));
      Value y = any();
      return b_.create<DivOp>(loc_, x, b_.create<AddOp>(loc_, one, b_.create<AbsOp>(loc_, y)));
    }
    case 16: return b_.create<AddOp>(loc_, x, constant());
    case 17: {
      // Through the other float type and back.
      Type other = element_.isF32() ? Type(b_.getF64Type()) : Type(b_.getF32Type());
      Value there = b_.create<ConvertOp>(loc_, RankedTensorType::get(shape_, other), x);
      return b_.create<ConvertOp>(loc_, type(), there);
    }
    case 18: {
      if (shape_.empty())
        return x;
      int64_t dim = pick(0, shape_.size() - 1);
      Value iota = b_.create<IotaOp>(loc_, type(), static_cast<uint64_t>(dim));
      return b_.create<MulOp>(loc_, x, iota);
    }
    case 19: {
      // Transposed and back.
      SmallVector<int64_t> perm = permutation(shape_.size());
      Value t = b_.create<TransposeOp>(loc_, x, b_.getDenseI64ArrayAttr(perm));
      SmallVector<int64_t> inverse(perm.size());
      for (auto [i, p] : llvm::enumerate(perm))
        inverse[p] = i;
      return b_.create<TransposeOp>(loc_, t, b_.getDenseI64ArrayAttr(inverse));
    }
    case 20: {
      // Reshaped and back.
      Value r = b_.create<ReshapeOp>(
          loc_, RankedTensorType::get(otherShape(shape_), element_), x);
      return b_.create<ReshapeOp>(loc_, type(), r);
    }
    default: return b_.create<MinOp>(loc_, x, any());
    }
  }

  OpBuilder b_;
  Location loc_;
  std::mt19937_64 rng_;
  Type element_;
  SmallVector<int64_t> shape_;
  SmallVector<Value> pool_;
};

TEST_F(LoopKernelTest, RandomF64FusionsMatchTheInterpreter) {
  checkRandomFusions<RandomFusionBuilder>(Float64Type::get(&context), 60, 4);
}

TEST_F(LoopKernelTest, RandomF32FusionsMatchTheInterpreter) {
  checkRandomFusions<RandomFusionBuilder>(Float32Type::get(&context), 60, 4);
}

// Stored narrow, computed in f32, rounded after every op as the interpreter
// does; a transcendental's last f32 bit may still round either way.
TEST_F(LoopKernelTest, RandomBF16FusionsMatchTheInterpreter) {
  checkRandomFusions<RandomFusionBuilder>(BFloat16Type::get(&context), 40, 4);
}

TEST_F(LoopKernelTest, RandomF16FusionsMatchTheInterpreter) {
  checkRandomFusions<RandomFusionBuilder>(Float16Type::get(&context), 40, 4);
}

TEST_F(LoopKernelTest, RejectsGemmFusions) {
  OwningOpRef<ModuleOp> module =
      RandomFusionBuilder(&context, 1, Float32Type::get(&context)).build();
  FusionOp fusion;
  module->walk([&](FusionOp f) { fusion = f; });
  fusion.setKind(FusionKind::gemm);
  EXPECT_TRUE(failed(compileLoopFusion(fusion)));
  EXPECT_NE(diagnostics.find("found `gemm`"), std::string::npos) << diagnostics;
}

TEST_F(LoopKernelTest, RunChecksBufferSignatures) {
  OwningOpRef<ModuleOp> module =
      RandomFusionBuilder(&context, 2, Float32Type::get(&context)).build();
  FusionOp fusion;
  module->walk([&](FusionOp f) { fusion = f; });
  FailureOr<CompiledKernel> kernel = compileLoopFusion(fusion);
  ASSERT_TRUE(succeeded(kernel)) << diagnostics;
  HostTensor wrong(DType::f64, {3, 5, 7, 11, 13});
  std::string error;
  SmallVector<const HostTensor *> inputs(kernel->inputs().size(), &wrong);
  SmallVector<HostTensor *> outputs(kernel->outputs().size(), &wrong);
  EXPECT_TRUE(failed(kernel->run(inputs, outputs, &error)));
  EXPECT_NE(error.find("expected tensor<"), std::string::npos) << error;
}

// The innermost loop walks the contiguous last dimension, so LLVM
// vectorizes a plain elementwise kernel (sqrt included: it lowers to an
// intrinsic, not a libm call).
TEST_F(LoopKernelTest, ElementwiseKernelsVectorize) {
  const char *text = R"mlir(
    func.func @main(%a: tensor<64x64xf32>, %b: tensor<64xf32>) -> tensor<64x64xf32> {
      %r = kiln.fusion loop (%a, %b) : (tensor<64x64xf32>, tensor<64xf32>) -> tensor<64x64xf32> {
      ^bb0(%x: tensor<64x64xf32>, %y: tensor<64xf32>):
        %yb = kiln.broadcast_in_dim %y, dims = [1] : tensor<64xf32> -> tensor<64x64xf32>
        %m = kiln.mul %x, %yb : tensor<64x64xf32>
        %n = kiln.abs %m : tensor<64x64xf32>
        %s = kiln.sqrt %n : tensor<64x64xf32>
        %t = kiln.add %s, %x : tensor<64x64xf32>
        kiln.yield %t : tensor<64x64xf32>
      }
      return %r : tensor<64x64xf32>
    })mlir";
  FusionOp fusion = parseFusion(text);
  ASSERT_TRUE(fusion) << diagnostics;
  std::string printed = optimizedKernelText(fusion);
  ASSERT_FALSE(printed.empty());
  EXPECT_NE(printed.find(" x float>"), std::string::npos) << printed;
  EXPECT_EQ(printed.find("@sqrtf"), std::string::npos) << printed;
  EXPECT_EQ(check(fusion, baseSeed(), 4), "");
}

// A value the inner loops do not index is built before them
// (KernelHooks::hoistLoopInvariants): a batch norm's per-channel scale,
// rsqrt(var + eps) * gamma, once per channel in the loop over C, not once
// per element of [N, C, H, W] four loops deep.
TEST_F(LoopKernelTest, PerChannelValuesAreBuiltOncePerChannel) {
  const char *text = R"mlir(
    func.func @main(%a: tensor<3x4x5x6xf32>, %v: tensor<4xf32>, %g: tensor<4xf32>) -> tensor<3x4x5x6xf32> {
      %r = kiln.fusion loop (%a, %v, %g) : (tensor<3x4x5x6xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<3x4x5x6xf32> {
      ^bb0(%x: tensor<3x4x5x6xf32>, %var: tensor<4xf32>, %gamma: tensor<4xf32>):
        %eps = kiln.constant dense<1.0e-5> : tensor<4xf32>
        %ve = kiln.add %var, %eps : tensor<4xf32>
        %r = kiln.rsqrt %ve : tensor<4xf32>
        %k = kiln.mul %r, %gamma : tensor<4xf32>
        %kb = kiln.broadcast_in_dim %k, dims = [1] : tensor<4xf32> -> tensor<3x4x5x6xf32>
        %y = kiln.mul %x, %kb : tensor<3x4x5x6xf32>
        kiln.yield %y : tensor<3x4x5x6xf32>
      }
      return %r : tensor<3x4x5x6xf32>
    })mlir";
  FusionOp fusion = parseFusion(text);
  ASSERT_TRUE(fusion) << diagnostics;
  EXPECT_EQ(check(fusion, baseSeed(), 4), "");
  FailureOr<OwningOpRef<ModuleOp>> kernel = buildLoopKernelModule(fusion);
  ASSERT_TRUE(succeeded(kernel)) << diagnostics;
  int rsqrts = 0;
  (*kernel)->walk([&](Operation *op) {
    if (op->getName().getStringRef() != "math.rsqrt")
      return;
    ++rsqrts;
    int depth = 0;
    for (Operation *p = op->getParentOp(); p; p = p->getParentOp())
      depth += isa<scf::ForOp>(p);
    EXPECT_EQ(depth, 2) << "the rsqrt is " << depth << " loops deep (N, C: 2)\n"
                        << printed(kernel->get());
  });
  EXPECT_EQ(rsqrts, 1) << printed(kernel->get());
}

// i1 buffers are bytes in memory (the kernel ABI) and the kernels read and
// write them as bytes: as i1 memory ops LLVM moved them one element at a
// time, which kept a ReLU mask's loads out of the vector loop.
TEST_F(LoopKernelTest, BooleanBuffersMoveAsBytes) {
  const char *text = R"mlir(
    func.func @main(%a: tensor<4x64xf32>, %m: tensor<4x64xi1>) -> (tensor<4x64xf32>, tensor<4x64xi1>) {
      %r:2 = kiln.fusion loop (%a, %m) : (tensor<4x64xf32>, tensor<4x64xi1>) -> (tensor<4x64xf32>, tensor<4x64xi1>) {
      ^bb0(%x: tensor<4x64xf32>, %mask: tensor<4x64xi1>):
        %zero = kiln.constant dense<0.0> : tensor<4x64xf32>
        %s = kiln.select %mask, %x, %zero : tensor<4x64xi1>, tensor<4x64xf32>
        %c = kiln.compare gt, %x, %zero : tensor<4x64xf32>
        kiln.yield %s, %c : tensor<4x64xf32>, tensor<4x64xi1>
      }
      return %r#0, %r#1 : tensor<4x64xf32>, tensor<4x64xi1>
    })mlir";
  FusionOp fusion = parseFusion(text);
  ASSERT_TRUE(fusion) << diagnostics;
  EXPECT_EQ(check(fusion, baseSeed(), 4), "");
  std::string ir = optimizedKernelText(fusion);
  ASSERT_FALSE(ir.empty());
  EXPECT_EQ(ir.find("load i1"), std::string::npos) << ir;
  EXPECT_EQ(ir.find("store i1"), std::string::npos) << ir;
  EXPECT_NE(ir.find(" x i8>"), std::string::npos) << ir;
}

// A head transpose moves 64-element rows whole (GPT-2's attention heads,
// tensor<1x12x1024x64> to <1x1024x12x64>): the row loop is vectorized, not
// fully unrolled first into 64 scalar copies under a loop striding by 64
// elements, which -O3 took seconds over and left scalar (768 float loads
// and stores; markInnermostLoopsParallel in codegen/cpu/LowerToLLVM.cpp).
TEST_F(LoopKernelTest, HeadTransposesCopyRowsAsVectors) {
  const char *text = R"mlir(
    func.func @main(%a: tensor<1x12x1024x64xf32>) -> tensor<1x1024x12x64xf32> {
      %r = kiln.fusion loop (%a) : (tensor<1x12x1024x64xf32>) -> tensor<1x1024x12x64xf32> {
      ^bb0(%x: tensor<1x12x1024x64xf32>):
        %t = kiln.transpose %x, permutation = [0, 2, 1, 3] : tensor<1x12x1024x64xf32> -> tensor<1x1024x12x64xf32>
        kiln.yield %t : tensor<1x1024x12x64xf32>
      }
      return %r : tensor<1x1024x12x64xf32>
    })mlir";
  FusionOp fusion = parseFusion(text);
  ASSERT_TRUE(fusion) << diagnostics;
  std::string printed = optimizedKernelText(fusion);
  ASSERT_FALSE(printed.empty());
  auto count = [&](llvm::StringRef what) {
    size_t n = 0;
    for (size_t at = 0; (at = printed.find(what.str(), at)) != std::string::npos;
         at += what.size())
      ++n;
    return n;
  };
  EXPECT_GT(count(" x float>, ptr"), 0u) << printed;
  EXPECT_EQ(count("load float,"), 0u) << printed;
  EXPECT_EQ(count("store float "), 0u) << printed;
  EXPECT_EQ(check(fusion, baseSeed(), 4), "");
}

// f32 exp, log, log1p, tanh, erf and tanh-gelu become polynomial
// approximations that vectorize: no libm call and no scalarized intrinsic
// is left, and the results still match the interpreter.
TEST_F(LoopKernelTest, TranscendentalsVectorize) {
  const char *text = R"mlir(
    func.func @main(%a: tensor<32x64xf32>) -> (tensor<32x64xf32>, tensor<32x64xf32>) {
      %r:2 = kiln.fusion loop (%a) : (tensor<32x64xf32>) -> (tensor<32x64xf32>, tensor<32x64xf32>) {
      ^bb0(%x: tensor<32x64xf32>):
        %e = kiln.exp %x : tensor<32x64xf32>
        %l = kiln.log %e : tensor<32x64xf32>
        %p = kiln.log1p %e : tensor<32x64xf32>
        %t = kiln.tanh %x : tensor<32x64xf32>
        %f = kiln.erf %x : tensor<32x64xf32>
        %g = kiln.gelu tanh, %x : tensor<32x64xf32>
        %at = kiln.atan %e : tensor<32x64xf32>
        %s = kiln.add %l, %p : tensor<32x64xf32>
        %u = kiln.add %t, %f : tensor<32x64xf32>
        %w = kiln.add %u, %g : tensor<32x64xf32>
        %v = kiln.add %w, %at : tensor<32x64xf32>
        kiln.yield %s, %v : tensor<32x64xf32>, tensor<32x64xf32>
      }
      return %r#0, %r#1 : tensor<32x64xf32>, tensor<32x64xf32>
    })mlir";
  FusionOp fusion = parseFusion(text);
  ASSERT_TRUE(fusion) << diagnostics;
  std::string printed = optimizedKernelText(fusion);
  ASSERT_FALSE(printed.empty());
  EXPECT_NE(printed.find(" x float>"), std::string::npos) << printed;
  for (const char *call : {"@expf", "@logf", "@log1pf", "@tanhf", "@erff",
                           "@atanf", "@llvm.exp.", "@llvm.log."})
    EXPECT_EQ(printed.find(call), std::string::npos) << call << "\n" << printed;
  for (uint64_t seed = baseSeed(), i = 0; i < 3; ++i, ++seed)
    EXPECT_EQ(check(fusion, seed, 4), "") << "seed " << seed;
}

// kiln.gelu_grad in both forms inside a fusion (a broadcast bias added to
// x, x scaled by 3 to reach both tails on [-6, 6)), in f64, f32, bf16 and
// f16, against the interpreter; in f32 it vectorizes without libm calls.
// The f32 bound is 1e-5 (relative to max(1, |value|)), not 1e-6: the tanh
// form's 0.5 x (1 - t^2) du/dx term multiplies the error of f32 tanh by
// 2 |x| du/dx (about 28 at |x| = 6), and the kernel's polynomial tanh, erf
// and exp are a few ulp off where the interpreter's are correctly rounded.
class GeluGradKernelTest : public LoopKernelTest {
protected:
  GeluGradKernelTest() { tolerance.f32 = 1e-5; }
};

TEST_F(GeluGradKernelTest, MatchesTheInterpreter) {
  for (const char *element : {"f64", "f32", "bf16", "f16"}) {
    SCOPED_TRACE(element);
    std::string t = std::string("tensor<16x40x") + element + ">";
    std::string b = std::string("tensor<40x") + element + ">";
    std::string text = R"mlir(
    func.func @main(%a: T, %g: T, %c: B) -> (T, T) {
      %r:2 = kiln.fusion loop (%a, %g, %c) : (T, T, B) -> (T, T) {
      ^bb0(%x: T, %dy: T, %bias: B):
        %three = kiln.constant dense<3.0> : T
        %s = kiln.mul %x, %three : T
        %bb = kiln.broadcast_in_dim %bias, dims = [1] : B -> T
        %h = kiln.add %s, %bb : T
        %e = kiln.gelu_grad erf, %h, %dy : T
        %n = kiln.gelu_grad tanh, %h, %dy : T
        kiln.yield %e, %n : T, T
      }
      return %r#0, %r#1 : T, T
    })mlir";
    for (auto [from, to] : {std::pair{std::string("T"), t}, {std::string("B"), b}})
      for (size_t at = 0; (at = text.find(from, at)) != std::string::npos;) {
        bool word = (at == 0 || !isalnum(text[at - 1])) &&
                    (at + 1 == text.size() || !isalnum(text[at + 1]));
        if (word) {
          text.replace(at, 1, to);
          at += to.size();
        } else {
          ++at;
        }
      }
    FusionOp fusion = parseFusion(text);
    ASSERT_TRUE(fusion) << text << diagnostics;
    for (uint64_t seed = baseSeed(), i = 0; i < 3; ++i, ++seed)
      EXPECT_EQ(check(fusion, seed, 4), "") << "seed " << seed;
    if (std::string(element) != "f32")
      continue;
    std::string printed = optimizedKernelText(fusion);
    ASSERT_FALSE(printed.empty());
    EXPECT_NE(printed.find(" x float>"), std::string::npos) << printed;
    for (const char *call : {"@expf", "@tanhf", "@erff"})
      EXPECT_EQ(printed.find(call), std::string::npos) << call << "\n" << printed;
  }
}

// f32 sin and cos (codegen/cpu/LowerToLLVM.cpp's AccurateSinCos): relative
// accuracy next to every zero and extremum, which MLIR's polynomial
// approximation lacks (sin of x = -2.8e-4 came out 2.4e-4 relative off):
// x = k pi/2 + d for k in [-40, 40] and d from 0 to 0.7 either way, and
// tiny and subnormal x, against std::sin/std::cos of the same f32 value in
// double, within 4 ulp of the result plus 1e-12.
TEST_F(LoopKernelTest, SinCosAccurateNearZeros) {
  const char *text = R"mlir(
    func.func @main(%a: tensor<1458xf32>) -> (tensor<1458xf32>, tensor<1458xf32>) {
      %r:2 = kiln.fusion loop (%a) : (tensor<1458xf32>) -> (tensor<1458xf32>, tensor<1458xf32>) {
      ^bb0(%x: tensor<1458xf32>):
        %s = kiln.sin %x : tensor<1458xf32>
        %c = kiln.cos %x : tensor<1458xf32>
        kiln.yield %s, %c : tensor<1458xf32>, tensor<1458xf32>
      }
      return %r#0, %r#1 : tensor<1458xf32>, tensor<1458xf32>
    })mlir";
  FusionOp fusion = parseFusion(text);
  ASSERT_TRUE(fusion) << diagnostics;
  FailureOr<CompiledKernel> kernel = compileLoopFusion(fusion);
  ASSERT_TRUE(succeeded(kernel)) << diagnostics;
  std::vector<float> xs;
  for (int k = -40; k <= 40; ++k)
    for (double d : {0.0, 1e-7, 1e-6, 2.8e-4, 1e-3, 0.1, 0.3, 0.7, 0.78})
      for (double sign : {1.0, -1.0})
        xs.push_back(static_cast<float>(k * 1.5707963267948966 + sign * d));
  for (float tiny : {1e-30f, -1e-30f, 1e-40f, -3e-39f, 0.0f, -0.0f})
    xs.push_back(tiny);
  xs.resize(1458, 0.5f);
  HostTensor in(DType::f32, {1458});
  for (size_t i = 0; i < xs.size(); ++i)
    in[i] = xs[i];
  HostTensor sinOut(DType::f32, {1458}, std::nan("")),
      cosOut(DType::f32, {1458}, std::nan(""));
  std::string error;
  ASSERT_TRUE(succeeded(kernel->run({&in}, {&sinOut, &cosOut}, &error))) << error;
  int bad = 0;
  for (size_t i = 0; i < xs.size() && bad < 5; ++i) {
    double x = xs[i];
    for (auto [what, got, want] :
         {std::tuple<const char *, double, double>{"sin", sinOut[i], std::sin(x)},
          {"cos", cosOut[i], std::cos(x)}}) {
      double tol = 4 * std::ldexp(std::fabs(want), -24) + 1e-12;
      if (!(std::fabs(got - want) <= tol)) {
        ADD_FAILURE() << what << "(" << x << ") = " << got << ", expected "
                      << want << " (tolerance " << tol << ")";
        ++bad;
      }
    }
  }
}

// floor, ceil and round (halves to even) in f32 and f64: on halves, on
// values next to integers, on integers, on magnitudes past the last
// fraction bit, on signed zeros, infinities and NaN; exactly what
// std::floor, std::ceil and std::nearbyint give, signs of zeros included.
TEST_F(LoopKernelTest, RoundingOpsMatchTheCLibrary) {
  for (const char *type : {"f32", "f64"}) {
    SCOPED_TRACE(type);
    bool f32 = std::string(type) == "f32";
    std::string tensor = std::string("tensor<64x") + type + ">";
    std::string text =
        "func.func @main(%a: " + tensor + ") -> (" + tensor + ", " + tensor +
        ", " + tensor + ") {\n  %r:3 = kiln.fusion loop (%a) : (" + tensor +
        ") -> (" + tensor + ", " + tensor + ", " + tensor +
        ") {\n  ^bb0(%x: " + tensor + "):\n    %f = kiln.floor %x : " + tensor +
        "\n    %c = kiln.ceil %x : " + tensor +
        "\n    %r = kiln.round %x : " + tensor +
        "\n    kiln.yield %f, %c, %r : " + tensor + ", " + tensor + ", " +
        tensor + "\n  }\n  return %r#0, %r#1, %r#2 : " + tensor + ", " +
        tensor + ", " + tensor + "\n}\n";
    FusionOp fusion = parseFusion(text.c_str());
    ASSERT_TRUE(fusion) << diagnostics;
    FailureOr<CompiledKernel> kernel = compileLoopFusion(fusion);
    ASSERT_TRUE(succeeded(kernel)) << diagnostics;
    double big =
        f32 ? 8388608.0 : 4503599627370496.0; // 2^23, 2^52: no fraction bits
    double ulpOfOne = f32 ? 1.0 / 8388608 : 1.0 / 4503599627370496;
    std::vector<double> xs = {-2.5,
                              -1.5,
                              -0.5,
                              0.5,
                              1.5,
                              2.5,
                              3.5,
                              4.5,
                              -0.0,
                              0.0,
                              1.0,
                              -1.0,
                              7.0,
                              0.49999997,
                              -0.49999997,
                              1.0 - ulpOfOne / 2,
                              -1.0 + ulpOfOne / 2,
                              1.0 + 2 * ulpOfOne,
                              big - 0.5,
                              -(big - 0.5),
                              big + 1,
                              -(big + 2),
                              3e9,
                              -1e30,
                              std::numeric_limits<double>::infinity(),
                              -std::numeric_limits<double>::infinity(),
                              std::nan("")};
    while (xs.size() < 64)
      xs.push_back(
          std::ldexp(static_cast<double>(xs.size()) - 40.0, -2)); // quarters
    DType dtype = f32 ? DType::f32 : DType::f64;
    HostTensor in(dtype, {64});
    for (size_t i = 0; i < xs.size(); ++i)
      in[i] = f32 ? static_cast<double>(static_cast<float>(xs[i])) : xs[i];
    HostTensor floorOut(dtype, {64}, 0.5), ceilOut(dtype, {64}, 0.5),
        roundOut(dtype, {64}, 0.5);
    std::string error;
    ASSERT_TRUE(
        succeeded(kernel->run({&in}, {&floorOut, &ceilOut, &roundOut}, &error)))
        << error;
    int bad = 0;
    for (int64_t i = 0; i < 64 && bad < 6; ++i) {
      double x = in[i];
      for (auto [what, got, want] :
           {std::tuple<const char *, double, double>{"floor", floorOut[i],
                                                     std::floor(x)},
            {"ceil", ceilOut[i], std::ceil(x)},
            {"round", roundOut[i], std::nearbyint(x)}}) {
        bool same = std::isnan(want) ? std::isnan(got)
                                     : got == want && std::signbit(got) ==
                                                          std::signbit(want);
        if (!same) {
          ADD_FAILURE() << what << "(" << x << ") = " << got << ", expected "
                        << want;
          ++bad;
        }
      }
    }
  }
}

// atan in f32 (AccurateAtan) and f64 (libm): within 2 ulp of std::atan
// (rounded to the type) across magnitudes from denormals to
// 1e30, at the reduction's switch points (1, tan(pi/8) and their
// neighbours), on signed zeros (kept), infinities (+-pi/2) and NaN.
TEST_F(LoopKernelTest, AtanMatchesTheCLibrary) {
  for (const char *type : {"f32", "f64"}) {
    SCOPED_TRACE(type);
    bool f32 = std::string(type) == "f32";
    std::string tensor = std::string("tensor<2048x") + type + ">";
    std::string text = "func.func @main(%a: " + tensor + ") -> " + tensor +
                       " {\n  %r = kiln.fusion loop (%a) : (" + tensor +
                       ") -> " + tensor + " {\n  ^bb0(%x: " + tensor +
                       "):\n    %t = kiln.atan %x : " + tensor +
                       "\n    kiln.yield %t : " + tensor +
                       "\n  }\n  return %r : " + tensor + "\n}\n";
    FusionOp fusion = parseFusion(text.c_str());
    ASSERT_TRUE(fusion) << diagnostics;
    FailureOr<CompiledKernel> kernel = compileLoopFusion(fusion);
    ASSERT_TRUE(succeeded(kernel)) << diagnostics;
    std::vector<double> xs = {0.0,
                              -0.0,
                              1e-40,
                              -1e-38,
                              1e-30,
                              1e-8,
                              1.0,
                              -1.0,
                              0.41421356,
                              2.41421356,
                              1e30,
                              -1e30,
                              std::numeric_limits<double>::infinity(),
                              -std::numeric_limits<double>::infinity(),
                              std::nan("")};
    for (double at : {1.0, 0.41421356237309503, 2.414213562373095})
      for (int k = 1; k <= 8; ++k)
        for (double sign : {1.0, -1.0})
          xs.push_back(sign * at * (1 + k * (f32 ? 6e-8 : 1.2e-16)));
    // Then a sweep of magnitudes from 2^-20 to 2^20, both signs.
    while (xs.size() < 2048) {
      double u = static_cast<double>(xs.size()) / 2048;
      double magnitude =
          std::ldexp(1.0 + 0.37 * u, static_cast<int>(xs.size() % 41) - 20);
      xs.push_back(xs.size() % 2 ? -magnitude : magnitude);
    }
    DType dtype = f32 ? DType::f32 : DType::f64;
    HostTensor in(dtype, {2048});
    for (size_t i = 0; i < xs.size(); ++i)
      in[i] = f32 ? static_cast<double>(static_cast<float>(xs[i])) : xs[i];
    HostTensor out(dtype, {2048}, 0.5);
    std::string error;
    ASSERT_TRUE(succeeded(kernel->run({&in}, {&out}, &error))) << error;
    int bad = 0;
    double worst = 0;
    for (int64_t i = 0; i < 2048 && bad < 6; ++i) {
      double x = in[i], got = out[i], want = std::atan(x);
      if (f32)
        want = static_cast<float>(want);
      double ulp = std::ldexp(std::fabs(want), f32 ? -23 : -52);
      bool same = std::isnan(want)
                      ? std::isnan(got)
                      : std::fabs(got - want) <= 2 * ulp + (f32 ? 1e-45 : 0) &&
                            std::signbit(got) == std::signbit(want);
      if (!std::isnan(want) && want != 0)
        worst = std::max(worst, std::fabs(got - want) / ulp);
      if (!same) {
        ADD_FAILURE() << "atan(" << x << ") = " << got << ", expected " << want;
        ++bad;
      }
    }
    std::printf("%s atan: at most %.2f ulp from std::atan\n", type, worst);
  }
}

// rem in f32 and f64 (LLVM's frem: fmod, exact) and in i32 (srem):
// what std::fmod gives, the dividend's sign and signed zeros included,
// on quotients from below 1 to past 2^24, and NaN for a zero divisor or
// an infinite dividend; the integers on every sign combination.
TEST_F(LoopKernelTest, RemMatchesTheCLibrary) {
  for (const char *type : {"f32", "f64", "i32"}) {
    SCOPED_TRACE(type);
    std::string t(type);
    std::string tensor = "tensor<64x" + t + ">";
    std::string text =
        "func.func @main(%a: " + tensor + ", %b: " + tensor + ") -> " + tensor +
        " {\n  %r = kiln.fusion loop (%a, %b) : (" + tensor + ", " + tensor +
        ") -> " + tensor + " {\n  ^bb0(%x: " + tensor + ", %y: " + tensor +
        "):\n    %m = kiln.rem %x, %y : " + tensor +
        "\n    kiln.yield %m : " + tensor + "\n  }\n  return %r : " + tensor +
        "\n}\n";
    FusionOp fusion = parseFusion(text.c_str());
    ASSERT_TRUE(fusion) << diagnostics;
    FailureOr<CompiledKernel> kernel = compileLoopFusion(fusion);
    ASSERT_TRUE(succeeded(kernel)) << diagnostics;
    bool integer = t == "i32";
    std::vector<std::pair<double, double>> pairs;
    if (integer) {
      for (double x : {7.0, -7.0, 6.0, -6.0, 0.0, 123456.0, -99999.0})
        for (double y : {3.0, -3.0, 1.0, 7.0, -1000.0})
          pairs.push_back({x, y});
    } else {
      double inf = std::numeric_limits<double>::infinity();
      pairs = {{5.5, 2.0},     {-5.5, 2.0},  {5.5, -2.0}, {-5.5, -2.0},
               {0.3, 0.1},     {1e7, 0.1},   {3e8, 0.7},  {-0.0, 1.5},
               {0.0, -1.5},    {1.0, 0.0},   {inf, 2.0},  {2.0, inf},
               {-2.5, inf},    {0.25, 0.75}, {4.0, 2.0},  {-4.0, 2.0},
               {1e-30, 3e-31}, {7.0, 1e-3}};
      for (int k = 0; pairs.size() < 64; ++k)
        pairs.push_back(
            {std::ldexp(1.0 + 0.173 * k, k % 30 - 5) * (k % 2 ? -1 : 1),
             std::ldexp(1.0 + 0.091 * k, k % 7 - 3)});
    }
    pairs.resize(64, {1.0, 1.0});
    DType dtype = t == "f32"   ? DType::f32
                  : t == "f64" ? DType::f64
                               : DType::i32;
    HostTensor x(dtype, {64}), y(dtype, {64});
    for (size_t i = 0; i < 64; ++i) {
      bool f32 = t == "f32";
      x[i] = f32 ? double(float(pairs[i].first)) : pairs[i].first;
      y[i] = f32 ? double(float(pairs[i].second)) : pairs[i].second;
    }
    HostTensor out(dtype, {64}, 0.5);
    std::string error;
    ASSERT_TRUE(succeeded(kernel->run({&x, &y}, {&out}, &error))) << error;
    int bad = 0;
    for (int64_t i = 0; i < 64 && bad < 6; ++i) {
      double want = std::fmod(x[i], y[i]), got = out[i];
      if (t == "f32")
        want = static_cast<float>(std::fmod(float(x[i]), float(y[i])));
      bool same = std::isnan(want)
                      ? std::isnan(got)
                      : got == want && (integer || std::signbit(got) ==
                                                       std::signbit(want));
      if (!same) {
        ADD_FAILURE() << "rem(" << x[i] << ", " << y[i] << ") = " << got
                      << ", expected " << want;
        ++bad;
      }
    }
  }
}

// Integer and boolean element types: i1 results of compare, i32 and i64
// arithmetic, conversions between them and floats, iota in i32, and
// non-splat integer constants.
TEST_F(LoopKernelTest, IntegerAndBooleanKernels) {
  const char *text = R"mlir(
    func.func @main(%a: tensor<3x5xi32>, %b: tensor<3x5xf32>, %c: tensor<5xi1>)
        -> (tensor<3x5xi1>, tensor<3x5xi64>, tensor<5x3xf32>) {
      %r:3 = kiln.fusion loop (%a, %b, %c)
          : (tensor<3x5xi32>, tensor<3x5xf32>, tensor<5xi1>)
          -> (tensor<3x5xi1>, tensor<3x5xi64>, tensor<5x3xf32>) {
      ^bb0(%x: tensor<3x5xi32>, %y: tensor<3x5xf32>, %z: tensor<5xi1>):
        %i = kiln.iota dim = 1 : tensor<3x5xi32>
        %k = kiln.constant dense<[[1, -2, 3, -4, 5], [0, 7, -8, 9, 2], [3, 3, -1, 0, 4]]> : tensor<3x5xi32>
        %s = kiln.add %x, %i : tensor<3x5xi32>
        %m = kiln.mul %s, %k : tensor<3x5xi32>
        %yi = kiln.convert %y : tensor<3x5xf32> -> tensor<3x5xi32>
        %p = kiln.compare lt, %m, %yi : tensor<3x5xi32>
        %zb = kiln.broadcast_in_dim %z, dims = [1] : tensor<5xi1> -> tensor<3x5xi1>
        %q = kiln.select %zb, %p, %zb : tensor<3x5xi1>, tensor<3x5xi1>
        %w = kiln.convert %m : tensor<3x5xi32> -> tensor<3x5xi64>
        %f = kiln.convert %q : tensor<3x5xi1> -> tensor<3x5xf32>
        %g = kiln.add %f, %y : tensor<3x5xf32>
        %t = kiln.transpose %g, permutation = [1, 0] : tensor<3x5xf32> -> tensor<5x3xf32>
        kiln.yield %q, %w, %t : tensor<3x5xi1>, tensor<3x5xi64>, tensor<5x3xf32>
      }
      return %r#0, %r#1, %r#2 : tensor<3x5xi1>, tensor<3x5xi64>, tensor<5x3xf32>
    })mlir";
  FusionOp fusion = parseFusion(text);
  ASSERT_TRUE(fusion) << diagnostics;
  for (uint64_t seed = baseSeed(), i = 0; i < 5; ++i, ++seed)
    EXPECT_EQ(check(fusion, seed, 7), "") << "seed " << seed;
}

// Every loop fusion of a zoo model's compiled training step.
class ZooLoopKernelTest : public LoopKernelTest {
protected:
  void checkModel(OwningOpRef<ModuleOp> model, int64_t intBound,
                  size_t minLoopFusions) {
    checkZooFusions(std::move(model), intBound, minLoopFusions, [](FusionOp f) {
      return f.getKind() == FusionKind::loop;
    });
  }
};

TEST_F(ZooLoopKernelTest, Mlp) {
  cli::MlpOptions options;
  options.layers = {12, 8, 6, 4};
  options.batch = 5;
  checkModel(cli::buildMlp(&context, options), 4, 0);
}

TEST_F(ZooLoopKernelTest, LeNet5) {
  cli::LeNet5Options options;
  options.batch = 2;
  checkModel(cli::buildLeNet5(&context, options), 10, 0);
}

TEST_F(ZooLoopKernelTest, ResNetGradAccum) {
  cli::ResNetOptions options;
  options.width = 4;
  options.batch = 4;
  gradAccum = 2;
  checkModel(cli::buildResNet(&context, options), 10, 1);
}

TEST_F(ZooLoopKernelTest, SmallGpt) {
  cli::GptOptions options;
  options.layers = 2;
  options.hidden = 16;
  options.heads = 2;
  options.seq = 6;
  options.vocab = 20;
  options.batch = 2;
  checkModel(cli::buildGpt(&context, options), 20, 6);
}

} // namespace

namespace {

// fusionKey: the same kernel whatever the fusion's location, discardable
// attributes (kiln-plan-buffers' offsets) and operands outside it; another
// key when an op's operands are swapped, an attribute or a constant
// differs, an input's type or the fusion's kind does.
TEST(FusionKeyTest, SameComputationSameKey) {
  MLIRContext context;
  context.loadDialect<KilnDialect, func::FuncDialect>();
  const char *text = R"mlir(
func.func @main(%x: tensor<4xf32>, %y: tensor<4xf32>, %z: tensor<4xf64>) {
  %a = kiln.fusion loop (%x, %y) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%p: tensor<4xf32>, %q: tensor<4xf32>):
    %c = kiln.constant dense<2.0> : tensor<4xf32>
    %s = kiln.sub %p, %q : tensor<4xf32>
    %m = kiln.mul %s, %c : tensor<4xf32>
    kiln.yield %m : tensor<4xf32>
  } loc("first")
  %b = kiln.fusion loop (%y, %a) {kiln.buffer_offsets = array<i64: 192>} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%p: tensor<4xf32>, %q: tensor<4xf32>):
    %c = kiln.constant dense<2.0> : tensor<4xf32> loc("elsewhere")
    %s = kiln.sub %p, %q : tensor<4xf32>
    %m = kiln.mul %s, %c : tensor<4xf32>
    kiln.yield %m : tensor<4xf32>
  } loc("second")
  %swapped = kiln.fusion loop (%x, %y) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%p: tensor<4xf32>, %q: tensor<4xf32>):
    %c = kiln.constant dense<2.0> : tensor<4xf32>
    %s = kiln.sub %q, %p : tensor<4xf32>
    %m = kiln.mul %s, %c : tensor<4xf32>
    kiln.yield %m : tensor<4xf32>
  }
  %constant = kiln.fusion loop (%x, %y) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%p: tensor<4xf32>, %q: tensor<4xf32>):
    %c = kiln.constant dense<3.0> : tensor<4xf32>
    %s = kiln.sub %p, %q : tensor<4xf32>
    %m = kiln.mul %s, %c : tensor<4xf32>
    kiln.yield %m : tensor<4xf32>
  }
  %kind = kiln.fusion multi_output (%x, %y) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%p: tensor<4xf32>, %q: tensor<4xf32>):
    %c = kiln.constant dense<2.0> : tensor<4xf32>
    %s = kiln.sub %p, %q : tensor<4xf32>
    %m = kiln.mul %s, %c : tensor<4xf32>
    kiln.yield %m : tensor<4xf32>
  }
  %typed = kiln.fusion loop (%z) : (tensor<4xf64>) -> tensor<4xf64> {
  ^bb0(%p: tensor<4xf64>):
    %c = kiln.constant dense<2.0> : tensor<4xf64>
    %s = kiln.sub %p, %p : tensor<4xf64>
    %m = kiln.mul %s, %c : tensor<4xf64>
    kiln.yield %m : tensor<4xf64>
  }
  return
}
)mlir";
  std::string diagnostics;
  auto handler = test::collectDiagnostics(context, diagnostics);
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(text, &context);
  ASSERT_TRUE(module) << diagnostics;
  SmallVector<std::string> keys;
  module->walk([&](FusionOp f) { keys.push_back(fusionKey(f)); });
  ASSERT_EQ(keys.size(), 6u);
  EXPECT_EQ(keys[0], keys[1]);
  for (size_t i = 2; i < keys.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      EXPECT_NE(keys[i], keys[j]) << "fusions " << j << " and " << i;
}

} // namespace
