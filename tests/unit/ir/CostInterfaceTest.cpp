//===- CostInterfaceTest.cpp - CostInterface::getFlops on built ops -------===//
//
// Builds kiln ops with mlir::OpBuilder, the way passes and importers do, and
// checks that result types are inferred and that CostInterface::getFlops
// reached through the op (not through ir/Flops.h directly) gives the
// hand-computed count: dot_general and conv2d, elementwise ops (one
// operation per result element; gelu_grad the operations of its scalar
// formula), data movement (zero) and fusions (the sum of their body).
//
//===----------------------------------------------------------------------===//

#include "ir/KilnOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace {

using namespace mlir;
using namespace kiln;
using ::testing::ElementsAre;

// A module with one function whose arguments have the given f32 shapes; ops
// are built at the end of its body.
class CostTest : public ::testing::Test {
protected:
  CostTest() : builder(&context) {
    context.loadDialect<KilnDialect, func::FuncDialect>();
    loc = builder.getUnknownLoc();
    module = ModuleOp::create(loc);
  }

  // Starts @f with arguments of |shapes| and returns them.
  SmallVector<Value> startFunction(ArrayRef<SmallVector<int64_t, 4>> shapes) {
    SmallVector<Type> types;
    for (const auto &s : shapes)
      types.push_back(tensor(s));
    builder.setInsertionPointToEnd(module->getBody());
    auto func = builder.create<func::FuncOp>(loc, "f",
                                             builder.getFunctionType(types, {}));
    Block *entry = func.addEntryBlock();
    builder.setInsertionPointToStart(entry);
    return SmallVector<Value>(entry->getArguments());
  }

  // Ends @f and verifies the module, so every op built is a valid one.
  void finishAndVerify() {
    builder.create<func::ReturnOp>(loc);
    EXPECT_TRUE(succeeded(verify(*module)));
  }

  RankedTensorType tensor(ArrayRef<int64_t> shape) {
    return RankedTensorType::get(shape, builder.getF32Type());
  }

  static int64_t flopsOf(Operation *op) {
    auto cost = dyn_cast<CostInterface>(op);
    EXPECT_TRUE(cost) << "op does not implement CostInterface";
    return cost ? cost.getFlops() : -1;
  }

  static ArrayRef<int64_t> shapeOf(Value v) {
    return cast<RankedTensorType>(v.getType()).getShape();
  }

  MLIRContext context;
  OpBuilder builder;
  Location loc = UnknownLoc::get(&context);
  OwningOpRef<ModuleOp> module;
};

TEST_F(CostTest, DotGeneralMatmul) {
  auto args = startFunction({{128, 784}, {784, 512}});
  auto dot = builder.create<DotGeneralOp>(loc, args[0], args[1],
                                          ArrayRef<int64_t>{},
                                          ArrayRef<int64_t>{},
                                          ArrayRef<int64_t>{1},
                                          ArrayRef<int64_t>{0});
  EXPECT_THAT(shapeOf(dot), ElementsAre(128, 512));
  // 2 * (128 * 512) * 784.
  EXPECT_EQ(flopsOf(dot), 102760448);
  finishAndVerify();
}

TEST_F(CostTest, DotGeneralBatched) {
  auto args = startFunction({{8, 32, 64}, {8, 64, 16}});
  auto dot = builder.create<DotGeneralOp>(loc, args[0], args[1],
                                          ArrayRef<int64_t>{0},
                                          ArrayRef<int64_t>{0},
                                          ArrayRef<int64_t>{2},
                                          ArrayRef<int64_t>{1});
  EXPECT_THAT(shapeOf(dot), ElementsAre(8, 32, 16));
  // 2 * (8 * 32 * 16) * 64.
  EXPECT_EQ(flopsOf(dot), 524288);
  finishAndVerify();
}

TEST_F(CostTest, Conv2D) {
  auto args = startFunction({{8, 1, 28, 28}, {6, 1, 5, 5}});
  auto conv = builder.create<Conv2DOp>(
      loc, args[0], args[1], ArrayRef<int64_t>{1, 1},
      ArrayRef<int64_t>{2, 2, 2, 2}, ArrayRef<int64_t>{1, 1}, /*groups=*/1);
  EXPECT_THAT(shapeOf(conv), ElementsAre(8, 6, 28, 28));
  // 2 * (8 * 6 * 28 * 28) * (1 * 5 * 5).
  EXPECT_EQ(flopsOf(conv), 1881600);
  finishAndVerify();
}

TEST_F(CostTest, Conv2DStridedGrouped) {
  auto args = startFunction({{2, 4, 9, 9}, {6, 2, 3, 3}});
  auto conv = builder.create<Conv2DOp>(
      loc, args[0], args[1], ArrayRef<int64_t>{2, 2},
      ArrayRef<int64_t>{1, 0, 0, 1}, ArrayRef<int64_t>{2, 2}, /*groups=*/2);
  // (9 + 1 - 5) / 2 + 1 = 3 in both directions.
  EXPECT_THAT(shapeOf(conv), ElementsAre(2, 6, 3, 3));
  // 2 * 108 outputs * (2 * 3 * 3).
  EXPECT_EQ(flopsOf(conv), 3888);
  finishAndVerify();
}

TEST_F(CostTest, ElementwiseCountsOnePerResultElement) {
  auto args = startFunction({{4, 8}, {4, 8}});
  auto add = builder.create<AddOp>(loc, args[0], args[1]);
  auto relu = builder.create<ReluOp>(loc, add);
  auto cmp = builder.create<CompareOp>(loc, CompareDirection::lt, args[0],
                                       args[1]);
  auto sel = builder.create<SelectOp>(loc, cmp, add, relu);
  EXPECT_THAT(shapeOf(cmp), ElementsAre(4, 8));
  EXPECT_TRUE(cast<RankedTensorType>(cmp.getType()).getElementType().isInteger(1));
  EXPECT_EQ(flopsOf(add), 32);
  EXPECT_EQ(flopsOf(relu), 32);
  EXPECT_EQ(flopsOf(cmp), 32);
  EXPECT_EQ(flopsOf(sel), 32);
  finishAndVerify();
}

TEST_F(CostTest, DataMovementIsFree) {
  auto args = startFunction({{2, 3}, {3}});
  auto t = builder.create<TransposeOp>(loc, args[0], ArrayRef<int64_t>{1, 0});
  EXPECT_THAT(shapeOf(t), ElementsAre(3, 2));
  auto r = builder.create<ReshapeOp>(loc, tensor({6}), t);
  auto b = builder.create<BroadcastInDimOp>(loc, tensor({4, 3}), args[1],
                                            ArrayRef<int64_t>{1});
  auto s = builder.create<SliceOp>(loc, args[0], ArrayRef<int64_t>{0, 1},
                                   ArrayRef<int64_t>{2, 3},
                                   ArrayRef<int64_t>{1, 1});
  EXPECT_THAT(shapeOf(s), ElementsAre(2, 2));
  EXPECT_EQ(flopsOf(t), 0);
  EXPECT_EQ(flopsOf(r), 0);
  EXPECT_EQ(flopsOf(b), 0);
  EXPECT_EQ(flopsOf(s), 0);
  finishAndVerify();
}

TEST_F(CostTest, ReduceAndSoftmax) {
  auto args = startFunction({{4, 5}});
  auto sum = builder.create<ReduceOp>(loc, ReduceKind::sum, args[0],
                                      ArrayRef<int64_t>{1});
  EXPECT_THAT(shapeOf(sum), ElementsAre(4));
  // One operation per input element.
  EXPECT_EQ(flopsOf(sum), 20);
  auto sm = builder.create<SoftmaxOp>(loc, args[0], /*dimension=*/1);
  // 5 per element.
  EXPECT_EQ(flopsOf(sm), 100);
  finishAndVerify();
}

// kiln.gelu_grad counts the operations its scalar formula
// (ScalarSemantics::buildScalar) performs per element, constants aside:
// built into a scratch function and counted here, in both forms.
TEST_F(CostTest, GeluGradCountsItsScalarFormula) {
  auto args = startFunction({{4, 8}, {4, 8}});
  for (GeluApproximation form : {GeluApproximation::tanh, GeluApproximation::erf}) {
    auto grad = builder.create<GeluGradOp>(loc, args[0].getType(), form,
                                           args[0], args[1]);
    OpBuilder scratch(&context);
    Block block;
    Type f32 = scratch.getF32Type();
    block.addArguments({f32, f32}, {loc, loc});
    scratch.setInsertionPointToStart(&block);
    cast<ScalarSemantics>(grad.getOperation())
        .buildScalar(scratch, loc, block.getArguments());
    int64_t ops = 0;
    for (Operation &op : block)
      if (!op.hasTrait<OpTrait::ConstantLike>())
        ++ops;
    EXPECT_EQ(flopsOf(grad), 32 * ops)
        << stringifyGeluApproximation(form).str();
    EXPECT_EQ(flopsOf(grad),
              32 * (form == GeluApproximation::tanh ? 18 : 11));
  }
  finishAndVerify();
}

TEST_F(CostTest, FusionSumsItsBody) {
  auto args = startFunction({{4}, {4}});
  // outer(a, b) { inner(a, b) { add } ; relu } : the inner fusion holds 4
  // FLOPs and the relu 4 more. Counting the inner add again would give 12.
  auto outer = builder.create<FusionOp>(loc, TypeRange{tensor({4})},
                                        FusionKind::loop, ValueRange(args));
  Block *outerBody = new Block();
  outer.getBody().push_back(outerBody);
  outerBody->addArguments({tensor({4}), tensor({4})}, {loc, loc});
  OpBuilder::InsertionGuard guard(builder);
  builder.setInsertionPointToStart(outerBody);
  auto inner = builder.create<FusionOp>(
      loc, TypeRange{tensor({4})}, FusionKind::loop,
      ValueRange(outerBody->getArguments()));
  Block *innerBody = new Block();
  inner.getBody().push_back(innerBody);
  innerBody->addArguments({tensor({4}), tensor({4})}, {loc, loc});
  {
    OpBuilder::InsertionGuard innerGuard(builder);
    builder.setInsertionPointToStart(innerBody);
    auto add = builder.create<AddOp>(loc, innerBody->getArgument(0),
                                     innerBody->getArgument(1));
    builder.create<YieldOp>(loc, ValueRange{add});
  }
  auto relu = builder.create<ReluOp>(loc, inner.getResult(0));
  builder.create<YieldOp>(loc, ValueRange{relu});

  EXPECT_EQ(flopsOf(inner), 4);
  EXPECT_EQ(flopsOf(outer), 8);
  builder.setInsertionPointAfter(outer);
  finishAndVerify();
}

TEST_F(CostTest, InferenceRejectsBadShapes) {
  // A failed shape rule in inference reports the rule's message.
  auto args = startFunction({{4, 8}, {7, 3}});
  std::string message;
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diag) {
    message = diag.str();
    return success();
  });
  SmallVector<Type> inferred;
  DotGeneralOp::Properties props;
  props.setLhsBatchingDimensions(builder.getDenseI64ArrayAttr({}));
  props.setRhsBatchingDimensions(builder.getDenseI64ArrayAttr({}));
  props.setLhsContractingDimensions(builder.getDenseI64ArrayAttr({1}));
  props.setRhsContractingDimensions(builder.getDenseI64ArrayAttr({0}));
  DotGeneralOp::Adaptor adaptor(ValueRange{args[0], args[1]}, nullptr, props);
  EXPECT_TRUE(failed(
      DotGeneralOp::inferReturnTypes(&context, loc, adaptor, inferred)));
  EXPECT_EQ(message, "'kiln.dot_general' op contracting dimension pair 0 must "
                     "have equal sizes, but lhs dimension 1 is 8 and rhs "
                     "dimension 0 is 7");
  finishAndVerify();
}

TEST_F(CostTest, InferenceRejectsDynamicOperands) {
  // Builders infer before anything is verified, so inference itself names
  // the operand that is not static.
  auto args = startFunction({{ShapedType::kDynamic, 3}});
  std::string message;
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diag) {
    message = diag.str();
    return success();
  });
  SmallVector<Type> inferred;
  TransposeOp::Properties props;
  props.setPermutation(builder.getDenseI64ArrayAttr({1, 0}));
  TransposeOp::Adaptor adaptor(ValueRange{args[0]}, nullptr, props);
  EXPECT_TRUE(failed(
      TransposeOp::inferReturnTypes(&context, loc, adaptor, inferred)));
  EXPECT_EQ(message, "'kiln.transpose' op operand #0 must be a statically "
                     "shaped tensor, but is 'tensor<?x3xf32>'");
  builder.create<func::ReturnOp>(loc);
}

TEST_F(CostTest, ConstantInferenceNeedsValue) {
  // A constant's type is its value's; without one, inference says so
  // instead of crashing.
  startFunction({});
  std::string message;
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diag) {
    message = diag.str();
    return success();
  });
  SmallVector<Type> inferred;
  ConstantOp::Adaptor empty(ValueRange{}, nullptr, ConstantOp::Properties{});
  EXPECT_TRUE(failed(ConstantOp::inferReturnTypes(&context, loc, empty, inferred)));
  EXPECT_EQ(message, "'kiln.constant' op requires a 'value' attribute holding "
                     "the constant");

  // With one, the result type is the value's type, and a constant is free.
  auto value = DenseElementsAttr::get(tensor({2}), ArrayRef<float>{1.0f, 2.0f});
  auto constant = builder.create<ConstantOp>(loc, value);
  EXPECT_EQ(constant.getType(), tensor({2}));
  EXPECT_EQ(flopsOf(constant), 0);
  finishAndVerify();
}

// The (q, k, v, scale, causal) builders infer out [B, H, Tq, Dv] and lse
// [B, H, Tq] (f32 here), and attention_grad's results take q's, k's and v's
// types; the costs are ir/Flops.h's.
TEST_F(CostTest, AttentionBuildersAndCost) {
  auto args = startFunction({{2, 4, 16, 8}, {2, 4, 32, 8}, {2, 4, 32, 6},
                             {2, 4, 16, 6}});
  auto fwd = builder.create<AttentionOp>(loc, args[0], args[1], args[2],
                                         /*scale=*/0.125, /*causal=*/true);
  EXPECT_THAT(shapeOf(fwd.getOut()), ElementsAre(2, 4, 16, 6));
  EXPECT_THAT(shapeOf(fwd.getLse()), ElementsAre(2, 4, 16));
  EXPECT_TRUE(fwd.getLse().getType().getElementType().isF32());
  EXPECT_EQ(fwd.getScale().convertToDouble(), 0.125);
  EXPECT_TRUE(fwd.getCausal());
  // 2 * 8 heads * (16 * 32 / 2 pairs) * (8 + 6).
  EXPECT_EQ(flopsOf(fwd), 57344);
  auto bwd = builder.create<AttentionGradOp>(loc, args[0], args[1], args[2],
                                             fwd.getOut(), fwd.getLse(),
                                             args[3], 0.125, true);
  EXPECT_EQ(bwd.getDq().getType(), args[0].getType());
  EXPECT_EQ(bwd.getDk().getType(), args[1].getType());
  EXPECT_EQ(bwd.getDv().getType(), args[2].getType());
  // 2 * 8 * 256 * (3 * 8 + 2 * 6).
  EXPECT_EQ(flopsOf(bwd), 147456);
  EXPECT_EQ(attentionLseElementType(builder.getF64Type()), builder.getF64Type());
  EXPECT_EQ(attentionLseElementType(builder.getBF16Type()), builder.getF32Type());
  finishAndVerify();
}

} // namespace
