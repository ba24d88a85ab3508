//===- ShapeRulesTest.cpp - shape rules on plain shapes -------------------===//
//
// Every rule in ir/ShapeRules.h, on valid shapes (the result shape is
// asserted, worked out by hand from the op's description in
// ir/KilnOps.td) and on each kind of invalid input (the message must say what
// was expected and what was found). The lit tests reach the same rules
// through the ops; these pin down the edge cases cheaply.
//
//===----------------------------------------------------------------------===//

#include "ir/ShapeRules.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>

using namespace kiln::shape;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

namespace {

// Shape arguments are ArrayRefs; these keep the call sites short.
using Dims = llvm::SmallVector<int64_t, 4>;

#define EXPECT_SHAPE(rule, ...)                                                \
  do {                                                                         \
    ShapeOr r_ = (rule);                                                       \
    ASSERT_TRUE(r_.ok()) << r_.error();                                        \
    EXPECT_THAT(r_.shape(), __VA_ARGS__);                                      \
  } while (0)

#define EXPECT_RULE_ERROR(rule, text)                                          \
  do {                                                                         \
    ShapeOr r_ = (rule);                                                       \
    ASSERT_FALSE(r_.ok()) << "expected an error, got " << str(r_.shape());     \
    EXPECT_THAT(r_.error(), HasSubstr(text));                                  \
  } while (0)

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

TEST(ShapeRules, Str) {
  EXPECT_EQ(str({}), "[]");
  EXPECT_EQ(str({7}), "[7]");
  EXPECT_EQ(str({2, 3, 4}), "[2, 3, 4]");
}

TEST(ShapeRules, NumElements) {
  EXPECT_EQ(numElements({}), 1);
  EXPECT_EQ(numElements({5}), 5);
  EXPECT_EQ(numElements({2, 3, 4}), 24);
  EXPECT_EQ(numElements({3, 0, 4}), 0);
}

TEST(ShapeRules, Limits) {
  EXPECT_THAT(checkLimits({}, 4), IsEmpty());
  EXPECT_THAT(checkLimits({128, 784}, 4), IsEmpty());
  // Exactly 2^48 bytes, and the same count of 1-byte elements.
  EXPECT_THAT(checkLimits({int64_t(1) << 46}, 4), IsEmpty());
  EXPECT_THAT(checkLimits({int64_t(1) << 24, int64_t(1) << 24}, 1), IsEmpty());
  EXPECT_THAT(checkLimits({(int64_t(1) << 46) + 1}, 4),
              HasSubstr("shape [70368744177665] of 4-byte elements holds more "
                        "than 2^48 bytes (256 TiB)"));
  // The product is checked as it grows, so it never overflows, whatever the
  // order of the dimensions; zero dimensions do not hide the others.
  int64_t huge = int64_t(1) << 62;
  EXPECT_THAT(checkLimits({huge, huge, huge}, 8), HasSubstr("more than 2^48 bytes"));
  EXPECT_THAT(checkLimits({0, huge}, 4), HasSubstr("more than 2^48 bytes"));
  EXPECT_THAT(checkLimits({huge, 0}, 4), HasSubstr("more than 2^48 bytes"));
  EXPECT_THAT(checkLimits({0, 1024}, 4), IsEmpty());
  EXPECT_THAT(checkLimits({3, -2}, 4),
              HasSubstr("dimension 1 is -2, expected a size >= 0"));
  EXPECT_THAT(checkLimits(Dims(kMaxRank, 1), 4), IsEmpty());
  EXPECT_THAT(checkLimits(Dims(kMaxRank + 1, 1), 4),
              HasSubstr("rank 65 is above the limit of 64"));
}

TEST(ShapeRules, ShapeOrCarriesShapeOrError) {
  ShapeOr good(Shape{1, 2});
  EXPECT_TRUE(good.ok());
  EXPECT_THAT(good.shape(), ElementsAre(1, 2));
  EXPECT_THAT(good.error(), IsEmpty());
  ShapeOr bad = ShapeOr::error("boom");
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(bad.error(), "boom");
  EXPECT_THAT(bad.shape(), IsEmpty());
}

//===----------------------------------------------------------------------===//
// Generators and shape manipulation
//===----------------------------------------------------------------------===//

TEST(ShapeRules, Iota) {
  EXPECT_SHAPE(iota({2, 3}, 1), ElementsAre(2, 3));
  EXPECT_SHAPE(iota({5}, 0), ElementsAre(5));
}

TEST(ShapeRules, IotaDimensionOutOfRange) {
  ShapeOr r = iota({2, 3}, 2);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(),
            "dimension must lie in [0, 2) for a result of rank 2, but is 2");
  EXPECT_RULE_ERROR(iota({2, 3}, -1), "but is -1");
  EXPECT_RULE_ERROR(iota({}, 0), "for a result of rank 0");
}

TEST(ShapeRules, BroadcastInDim) {
  // [10] into [32, 10] along dimension 1 (a bias).
  EXPECT_SHAPE(broadcastInDim({10}, {1}, {32, 10}), ElementsAre(32, 10));
  // Size-1 dimensions stretch.
  EXPECT_SHAPE(broadcastInDim({1, 3}, {0, 2}, {4, 5, 3}), ElementsAre(4, 5, 3));
  // A scalar goes anywhere.
  EXPECT_SHAPE(broadcastInDim({}, {}, {2, 2}), ElementsAre(2, 2));
}

TEST(ShapeRules, BroadcastInDimErrors) {
  EXPECT_RULE_ERROR(broadcastInDim({3}, {0, 1}, {2, 3}),
                    "broadcast_dimensions must have one entry per operand "
                    "dimension (1), but has 2");
  EXPECT_RULE_ERROR(broadcastInDim({3}, {2}, {2, 3}),
                    "broadcast_dimensions [2] must lie in [0, 2), but contains 2");
  EXPECT_RULE_ERROR(broadcastInDim({3}, {-1}, {2, 3}), "but contains -1");
  EXPECT_RULE_ERROR(broadcastInDim({3, 2}, {1, 0}, {2, 3}),
                    "broadcast_dimensions [1, 0] must be strictly increasing, "
                    "but entry 1 (0) follows 1");
  EXPECT_RULE_ERROR(broadcastInDim({3, 3}, {1, 1}, {3, 3}),
                    "must be strictly increasing, but entry 1 (1) follows 1");
  EXPECT_RULE_ERROR(broadcastInDim({2}, {1}, {4, 3}),
                    "operand dimension 0 of size 2 must be 1 or match result "
                    "dimension 1 of size 3");
}

TEST(ShapeRules, Reshape) {
  EXPECT_SHAPE(reshape({2, 3}, {6}), ElementsAre(6));
  EXPECT_SHAPE(reshape({6}, {3, 1, 2}), ElementsAre(3, 1, 2));
  EXPECT_SHAPE(reshape({1}, {}), IsEmpty());
  EXPECT_RULE_ERROR(reshape({2, 3}, {7}),
                    "result shape [7] must have as many elements as the "
                    "operand shape [2, 3] (6), but has 7");
}

TEST(ShapeRules, Transpose) {
  EXPECT_SHAPE(transpose({2, 3}, {1, 0}), ElementsAre(3, 2));
  // result.dim(i) = operand.dim(permutation[i]).
  EXPECT_SHAPE(transpose({2, 3, 4}, {2, 0, 1}), ElementsAre(4, 2, 3));
  EXPECT_SHAPE(transpose({2, 3, 4}, {0, 1, 2}), ElementsAre(2, 3, 4));
}

TEST(ShapeRules, TransposeErrors) {
  EXPECT_RULE_ERROR(transpose({2, 3}, {1}),
                    "permutation must have 2 entries, but has 1 ([1])");
  EXPECT_RULE_ERROR(transpose({2, 3}, {0, 2}),
                    "permutation [0, 2] must lie in [0, 2), but contains 2");
  EXPECT_RULE_ERROR(transpose({2, 3}, {1, 1}),
                    "permutation [1, 1] must not repeat a dimension, but 1 "
                    "appears twice");
}

TEST(ShapeRules, Slice) {
  EXPECT_SHAPE(slice({2, 4}, {0, 1}, {2, 3}, {1, 1}), ElementsAre(2, 2));
  // ceil((5 - 0) / 2) = 3: indices 0, 2, 4.
  EXPECT_SHAPE(slice({5}, {0}, {5}, {2}), ElementsAre(3));
  // ceil((4 - 1) / 3) = 1: index 1.
  EXPECT_SHAPE(slice({4}, {1}, {4}, {3}), ElementsAre(1));
  // An empty slice is allowed.
  EXPECT_SHAPE(slice({4}, {2}, {2}, {1}), ElementsAre(0));
  // A stride as large as int64_t goes takes the first element only (the
  // rule's arithmetic does not overflow).
  EXPECT_SHAPE(slice({8}, {2}, {8}, {INT64_MAX}), ElementsAre(1));
  EXPECT_SHAPE(slice({8}, {8}, {8}, {INT64_MAX}), ElementsAre(0));
}

TEST(ShapeRules, SliceErrors) {
  EXPECT_RULE_ERROR(slice({2, 4}, {0}, {2, 3}, {1, 1}),
                    "start_indices must have 2 entries, but has 1 ([0])");
  EXPECT_RULE_ERROR(slice({2, 4}, {0, 0}, {2}, {1, 1}),
                    "limit_indices must have 2 entries, but has 1 ([2])");
  EXPECT_RULE_ERROR(slice({2, 4}, {0, 0}, {2, 2}, {1}),
                    "strides must have 2 entries, but has 1 ([1])");
  EXPECT_RULE_ERROR(slice({2, 4}, {0, 0}, {2, 2}, {1, 0}),
                    "strides must be positive, but dimension 1 has 0");
  EXPECT_RULE_ERROR(slice({2, 4}, {0, -1}, {2, 2}, {1, 1}),
                    "dimension 1 needs 0 <= start <= limit <= 4, but start is "
                    "-1 and limit is 2");
  EXPECT_RULE_ERROR(slice({2, 4}, {0, 3}, {2, 2}, {1, 1}),
                    "but start is 3 and limit is 2");
  EXPECT_RULE_ERROR(slice({2, 4}, {0, 0}, {3, 2}, {1, 1}),
                    "dimension 0 needs 0 <= start <= limit <= 2, but start is "
                    "0 and limit is 3");
}

TEST(ShapeRules, Concatenate) {
  Dims a{1, 3}, b{2, 3}, c{4, 3};
  EXPECT_SHAPE(concatenate({a, b, c}, 0), ElementsAre(7, 3));
  Dims d{2, 1}, e{2, 5};
  EXPECT_SHAPE(concatenate({d, e}, 1), ElementsAre(2, 6));
  EXPECT_SHAPE(concatenate({b}, 0), ElementsAre(2, 3));
}

TEST(ShapeRules, ConcatenateErrors) {
  EXPECT_RULE_ERROR(concatenate({}, 0), "needs at least one input");
  Dims a{2, 3}, b{2, 4}, c{6};
  EXPECT_RULE_ERROR(concatenate({a, a}, 2), "dimension must lie in [0, 2), but is 2");
  EXPECT_RULE_ERROR(concatenate({a, c}, 0),
                    "input 1 must have rank 2 like input 0, but has rank 1");
  EXPECT_RULE_ERROR(concatenate({a, a, b}, 0),
                    "input 2 must match input 0 in dimension 1 (3), but has 4");
}

TEST(ShapeRules, Pad) {
  EXPECT_SHAPE(pad({2, 3}, {0, 1}, {2, 1}), ElementsAre(4, 5));
  EXPECT_SHAPE(pad({2}, {kMaxTensorBytes}, {0}), ElementsAre(kMaxTensorBytes + 2));
  EXPECT_RULE_ERROR(pad({2}, {1}, {INT64_MAX}),
                    "padding must be at most 2^48, but dimension 0 has low 1 "
                    "and high 9223372036854775807");
  EXPECT_SHAPE(pad({2}, {0}, {0}), ElementsAre(2));
  EXPECT_SHAPE(pad({}, {}, {}), IsEmpty());
}

TEST(ShapeRules, PadErrors) {
  EXPECT_RULE_ERROR(pad({2, 3}, {1}, {0, 0}),
                    "edge_padding_low must have 2 entries, but has 1 ([1])");
  EXPECT_RULE_ERROR(pad({2, 3}, {0, 0}, {0}),
                    "edge_padding_high must have 2 entries, but has 1 ([0])");
  EXPECT_RULE_ERROR(pad({2, 3}, {0, -1}, {0, 0}),
                    "padding must be non-negative, but dimension 1 has low -1 "
                    "and high 0");
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

TEST(ShapeRules, Reduce) {
  EXPECT_SHAPE(reduce({4, 5}, {1}), ElementsAre(4));
  EXPECT_SHAPE(reduce({4, 5, 6}, {0, 2}), ElementsAre(5));
  // Order of the list does not matter; the result keeps operand order.
  EXPECT_SHAPE(reduce({4, 5, 6}, {2, 0}), ElementsAre(5));
  EXPECT_SHAPE(reduce({4, 5}, {0, 1}), IsEmpty());
  // An empty list is the identity.
  EXPECT_SHAPE(reduce({4, 5}, {}), ElementsAre(4, 5));
}

TEST(ShapeRules, ReduceErrors) {
  EXPECT_RULE_ERROR(reduce({4, 5}, {2}),
                    "dimensions [2] must lie in [0, 2), but contains 2");
  EXPECT_RULE_ERROR(reduce({4, 5}, {0, 0}),
                    "dimensions [0, 0] must not repeat a dimension, but 0 "
                    "appears twice");
}

TEST(ShapeRules, Argmax) {
  EXPECT_SHAPE(argmax({32, 10}, 1), ElementsAre(32));
  EXPECT_SHAPE(argmax({32, 10}, 0), ElementsAre(10));
  EXPECT_SHAPE(argmax({7}, 0), IsEmpty());
  EXPECT_RULE_ERROR(argmax({32, 10}, 2), "dimension must lie in [0, 2), but is 2");
  EXPECT_RULE_ERROR(argmax({32, 0}, 1),
                    "operand dimension 1 must have at least one element to take "
                    "the argmax of, but has size 0");
}

//===----------------------------------------------------------------------===//
// Linear algebra and convolution
//===----------------------------------------------------------------------===//

TEST(ShapeRules, DotGeneralMatmul) {
  EXPECT_SHAPE(dotGeneral({4, 8}, {8, 3}, {}, {}, {1}, {0}), ElementsAre(4, 3));
}

TEST(ShapeRules, DotGeneralBatched) {
  // Batch first, then lhs free, then rhs free.
  EXPECT_SHAPE(dotGeneral({8, 32, 64}, {8, 64, 16}, {0}, {0}, {2}, {1}),
               ElementsAre(8, 32, 16));
  // Batch dimensions in lhs order even when they are not leading.
  EXPECT_SHAPE(dotGeneral({32, 8, 64}, {64, 16, 8}, {1}, {2}, {2}, {0}),
               ElementsAre(8, 32, 16));
}

TEST(ShapeRules, DotGeneralOtherForms) {
  // Matrix-vector.
  EXPECT_SHAPE(dotGeneral({4, 8}, {8}, {}, {}, {1}, {0}), ElementsAre(4));
  // Full contraction to a scalar.
  EXPECT_SHAPE(dotGeneral({4, 8}, {4, 8}, {}, {}, {0, 1}, {0, 1}), IsEmpty());
  // Outer product: nothing contracted.
  EXPECT_SHAPE(dotGeneral({3}, {5}, {}, {}, {}, {}), ElementsAre(3, 5));
  // x^T y with the contraction on the leading dimension.
  EXPECT_SHAPE(dotGeneral({8, 4}, {8, 3}, {}, {}, {0}, {0}), ElementsAre(4, 3));
}

TEST(ShapeRules, DotGeneralCountMismatch) {
  EXPECT_RULE_ERROR(dotGeneral({2, 4, 8}, {2, 8, 3}, {0}, {}, {2}, {1}),
                    "lhs and rhs must have as many batching dimensions, but "
                    "have 1 and 0");
  EXPECT_RULE_ERROR(dotGeneral({4, 8}, {8, 3}, {}, {}, {1}, {0, 1}),
                    "lhs and rhs must have as many contracting dimensions, but "
                    "have 1 and 2");
}

TEST(ShapeRules, DotGeneralBadDimensions) {
  EXPECT_RULE_ERROR(dotGeneral({4, 8}, {8, 3}, {}, {}, {2}, {0}),
                    "lhs batching and contracting dimensions [2] must lie in "
                    "[0, 2), but contains 2");
  EXPECT_RULE_ERROR(dotGeneral({8, 8}, {8, 8, 3}, {0}, {0}, {0}, {1}),
                    "lhs batching and contracting dimensions [0, 0] must not "
                    "repeat a dimension, but 0 appears twice");
  EXPECT_RULE_ERROR(dotGeneral({4, 8}, {8, 3}, {}, {}, {1}, {-1}),
                    "rhs batching and contracting dimensions [-1] must lie in "
                    "[0, 2), but contains -1");
  EXPECT_RULE_ERROR(dotGeneral({8, 8}, {8, 3}, {}, {}, {0, 1}, {0, 0}),
                    "rhs batching and contracting dimensions [0, 0] must not "
                    "repeat a dimension");
}

TEST(ShapeRules, DotGeneralSizeMismatch) {
  EXPECT_RULE_ERROR(dotGeneral({2, 4, 8}, {3, 8, 5}, {0}, {0}, {2}, {1}),
                    "batching dimension pair 0 must have equal sizes, but lhs "
                    "dimension 0 is 2 and rhs dimension 0 is 3");
  EXPECT_RULE_ERROR(dotGeneral({4, 8}, {7, 3}, {}, {}, {1}, {0}),
                    "contracting dimension pair 0 must have equal sizes, but "
                    "lhs dimension 1 is 8 and rhs dimension 0 is 7");
}

TEST(ShapeRules, Conv2D) {
  // LeNet's first layer: 28 + 2 + 2 - 5 + 1 = 28.
  EXPECT_SHAPE(conv2d({8, 1, 28, 28}, {6, 1, 5, 5}, {1, 1}, {2, 2, 2, 2},
                      {1, 1}, 1),
               ElementsAre(8, 6, 28, 28));
  // No padding: 28 - 5 + 1 = 24.
  EXPECT_SHAPE(conv2d({8, 1, 28, 28}, {6, 1, 5, 5}, {1, 1}, {0, 0, 0, 0},
                      {1, 1}, 1),
               ElementsAre(8, 6, 24, 24));
  // Stride 2, asymmetric padding: rows (9 + 1 + 0 - 3) / 2 + 1 = 4,
  // columns (9 + 0 + 1 - 3) / 2 + 1 = 4.
  EXPECT_SHAPE(conv2d({1, 2, 9, 9}, {4, 2, 3, 3}, {2, 2}, {1, 0, 0, 1},
                      {1, 1}, 1),
               ElementsAre(1, 4, 4, 4));
  // Dilation 2 spans 2 * (3 - 1) + 1 = 5: rows (9 + 1 - 5) / 2 + 1 = 3.
  // Groups 2: 4 input channels, filter sees 2.
  EXPECT_SHAPE(conv2d({2, 4, 9, 9}, {6, 2, 3, 3}, {2, 2}, {1, 0, 0, 1},
                      {2, 2}, 2),
               ElementsAre(2, 6, 3, 3));
  // Different strides and dilations per axis: rows (10 - 3) / 1 + 1 = 8,
  // columns span 3 * (3 - 1) + 1 = 7, (10 - 7) / 3 + 1 = 2.
  EXPECT_SHAPE(conv2d({1, 1, 10, 10}, {1, 1, 3, 3}, {1, 3}, {0, 0, 0, 0},
                      {1, 3}, 1),
               ElementsAre(1, 1, 8, 2));
  // Depthwise: groups = channels.
  EXPECT_SHAPE(conv2d({1, 8, 5, 5}, {8, 1, 3, 3}, {1, 1}, {1, 1, 1, 1},
                      {1, 1}, 8),
               ElementsAre(1, 8, 5, 5));
}

TEST(ShapeRules, Conv2DRankErrors) {
  EXPECT_RULE_ERROR(conv2d({1, 8, 8}, {2, 1, 3, 3}, {1, 1}, {0, 0, 0, 0},
                           {1, 1}, 1),
                    "input must be rank 4 [N, C, H, W], but has rank 3");
  EXPECT_RULE_ERROR(conv2d({1, 1, 8, 8}, {2, 3, 3}, {1, 1}, {0, 0, 0, 0},
                           {1, 1}, 1),
                    "filter must be rank 4 [O, C/groups, KH, KW], but has rank 3");
}

TEST(ShapeRules, Conv2DAttributeErrors) {
  Dims x{1, 1, 8, 8}, w{2, 1, 3, 3};
  EXPECT_RULE_ERROR(conv2d(x, w, {1}, {0, 0, 0, 0}, {1, 1}, 1),
                    "strides must have 2 entries, but has 1 ([1])");
  EXPECT_RULE_ERROR(conv2d(x, w, {1, 1}, {0, 0}, {1, 1}, 1),
                    "padding ([top, bottom, left, right]) must have 4 entries, "
                    "but has 2 ([0, 0])");
  EXPECT_RULE_ERROR(conv2d(x, w, {1, 1}, {0, 0, 0, 0}, {1}, 1),
                    "dilation must have 2 entries, but has 1 ([1])");
  EXPECT_RULE_ERROR(conv2d(x, w, {0, 1}, {0, 0, 0, 0}, {1, 1}, 1),
                    "strides must be positive, but are [0, 1]");
  EXPECT_RULE_ERROR(conv2d(x, w, {1, 1}, {0, 0, 0, 0}, {1, -1}, 1),
                    "dilation must be positive, but is [1, -1]");
  EXPECT_RULE_ERROR(conv2d(x, w, {1, 1}, {0, 0, -2, 0}, {1, 1}, 1),
                    "padding must be non-negative, but is [0, 0, -2, 0]");
  EXPECT_RULE_ERROR(conv2d(x, w, {1, 1}, {0, 0, 0, 0}, {1, 1}, 0),
                    "groups must be positive, but is 0");
}

TEST(ShapeRules, Conv2DChannelErrors) {
  EXPECT_RULE_ERROR(conv2d({1, 4, 8, 8}, {3, 2, 3, 3}, {1, 1}, {0, 0, 0, 0},
                           {1, 1}, 2),
                    "input channels (4) and output channels (3) must be "
                    "divisible by groups (2)");
  EXPECT_RULE_ERROR(conv2d({1, 3, 8, 8}, {4, 1, 3, 3}, {1, 1}, {0, 0, 0, 0},
                           {1, 1}, 2),
                    "input channels (3) and output channels (4)");
  EXPECT_RULE_ERROR(conv2d({1, 4, 8, 8}, {2, 4, 3, 3}, {1, 1}, {0, 0, 0, 0},
                           {1, 1}, 2),
                    "filter dimension 1 must be input channels / groups (2), "
                    "but is 4");
}

TEST(ShapeRules, Conv2DWindowErrors) {
  EXPECT_RULE_ERROR(conv2d({1, 1, 8, 8}, {2, 1, 3, 0}, {1, 1}, {0, 0, 0, 0},
                           {1, 1}, 1),
                    "the filter window must be at least 1x1, but is [3, 0]");
  // Dilation 2 makes the 3x3 window span 5 > 4.
  EXPECT_RULE_ERROR(conv2d({1, 1, 4, 4}, {2, 1, 3, 3}, {1, 1}, {0, 0, 0, 0},
                           {2, 2}, 1),
                    "the filter window [3, 3] (dilation [2, 2]) must fit the "
                    "padded input [4, 4] with padding [0, 0, 0, 0]");
  // Padding can make it fit: 4 + 1 = 5.
  EXPECT_SHAPE(conv2d({1, 1, 4, 4}, {2, 1, 3, 3}, {1, 1}, {1, 0, 1, 0},
                      {2, 2}, 1),
               ElementsAre(1, 2, 1, 1));
}

TEST(ShapeRules, Conv2DAttributesAsLargeAsInt64) {
  // A dilation as large as int64_t goes: the window's span is worked out
  // without overflowing, and does not fit.
  EXPECT_RULE_ERROR(conv2d({1, 1, 8, 8}, {2, 1, 3, 3}, {1, 1}, {0, 0, 0, 0},
                           {INT64_MAX, 1}, 1),
                    "the filter window [3, 3] (dilation [9223372036854775807, 1]) "
                    "must fit the padded input [8, 8]");
  // Padding as large: an output dimension past what any tensor within the
  // limits can have, given as one more than 2^48 (no result type matches).
  EXPECT_SHAPE(conv2d({1, 1, 8, 8}, {2, 1, 3, 3}, {1, 1},
                      {INT64_MAX, INT64_MAX, 0, 0}, {1, 1}, 1),
               ElementsAre(1, 2, kMaxTensorBytes + 1, 6));
  // Groups as large: channels are not divisible (and filter[1] * groups is
  // never formed).
  EXPECT_RULE_ERROR(conv2d({1, 1, 8, 8}, {2, 1, 3, 3}, {1, 1}, {0, 0, 0, 0},
                           {1, 1}, INT64_MAX),
                    "must be divisible by groups (9223372036854775807)");
  // A window as large, with padding one less on each side: the padded
  // input (2^64 + 4) holds the window at more than 2^63 offsets.
  EXPECT_SHAPE(pool2d({1, 1, 8, 8}, {INT64_MAX, 2}, {1, 2},
                      {INT64_MAX - 1, INT64_MAX - 1, 0, 0}),
               ElementsAre(1, 1, kMaxTensorBytes + 1, 4));
}

TEST(ShapeRules, Pool2D) {
  EXPECT_SHAPE(pool2d({8, 6, 28, 28}, {2, 2}, {2, 2}, {0, 0, 0, 0}),
               ElementsAre(8, 6, 14, 14));
  // Overlapping windows with padding: (5 + 1 + 1 - 3) / 2 + 1 = 3.
  EXPECT_SHAPE(pool2d({1, 2, 5, 5}, {3, 3}, {2, 2}, {1, 1, 1, 1}),
               ElementsAre(1, 2, 3, 3));
  // Rows (7 - 2) / 2 + 1 = 3 (the last row is dropped); columns
  // (6 - 3) / 1 + 1 = 4.
  EXPECT_SHAPE(pool2d({1, 1, 7, 6}, {2, 3}, {2, 1}, {0, 0, 0, 0}),
               ElementsAre(1, 1, 3, 4));
}

TEST(ShapeRules, Pool2DErrors) {
  Dims x{1, 3, 8, 8};
  EXPECT_RULE_ERROR(pool2d({3, 8, 8}, {2, 2}, {2, 2}, {0, 0, 0, 0}),
                    "input must be rank 4 [N, C, H, W], but has rank 3");
  EXPECT_RULE_ERROR(pool2d(x, {2}, {2, 2}, {0, 0, 0, 0}),
                    "window must have 2 entries, but has 1 ([2])");
  EXPECT_RULE_ERROR(pool2d(x, {2, 2}, {2, 2, 2}, {0, 0, 0, 0}),
                    "strides must have 2 entries, but has 3 ([2, 2, 2])");
  EXPECT_RULE_ERROR(pool2d(x, {2, 2}, {2, 2}, {0, 0, 0}),
                    "padding ([top, bottom, left, right]) must have 4 entries");
  EXPECT_RULE_ERROR(pool2d(x, {2, 2}, {2, 0}, {0, 0, 0, 0}),
                    "strides must be positive, but are [2, 0]");
  EXPECT_RULE_ERROR(pool2d(x, {2, 2}, {2, 2}, {0, -1, 0, 0}),
                    "padding must be non-negative, but is [0, -1, 0, 0]");
  EXPECT_RULE_ERROR(pool2d(x, {0, 2}, {2, 2}, {0, 0, 0, 0}),
                    "window must be positive, but is [0, 2]");
  EXPECT_RULE_ERROR(pool2d(x, {2, 2}, {2, 2}, {0, 0, 0, 2}),
                    "padding [0, 0, 0, 2] must be smaller than the window [2, 2]");
  EXPECT_RULE_ERROR(pool2d({1, 3, 2, 8}, {3, 3}, {1, 1}, {0, 0, 0, 0}),
                    "the window [3, 3] must fit the padded input [2, 8]");
}

//===----------------------------------------------------------------------===//
// Neural-network composites
//===----------------------------------------------------------------------===//

TEST(ShapeRules, AlongDimension) {
  EXPECT_SHAPE(alongDimension({32, 10}, 1), ElementsAre(32, 10));
  EXPECT_SHAPE(alongDimension({32, 10}, 0), ElementsAre(32, 10));
  EXPECT_RULE_ERROR(alongDimension({32, 10}, 2),
                    "dimension must lie in [0, 2), but is 2");
  EXPECT_RULE_ERROR(alongDimension({}, 0), "dimension must lie in [0, 0)");
}

TEST(ShapeRules, LayerNorm) {
  EXPECT_SHAPE(layerNorm({4, 16, 64}, {64}, 2), ElementsAre(4, 16, 64));
  EXPECT_SHAPE(layerNorm({4, 16, 64}, {16, 64}, 1), ElementsAre(4, 16, 64));
  EXPECT_SHAPE(layerNorm({4, 16, 64}, {4, 16, 64}, 0), ElementsAre(4, 16, 64));
}

TEST(ShapeRules, LayerNormErrors) {
  EXPECT_RULE_ERROR(layerNorm({4, 64}, {64}, 2), "axis must lie in [0, 2), but is 2");
  EXPECT_RULE_ERROR(layerNorm({4, 16, 64}, {64}, 1),
                    "scale and bias must have the normalized shape [16, 64], "
                    "but have [64]");
  EXPECT_RULE_ERROR(layerNorm({4, 64}, {32}, 1),
                    "normalized shape [64], but have [32]");
}

TEST(ShapeRules, Gather) {
  // [V, D] table, [B, T] tokens -> [B, T, D].
  EXPECT_SHAPE(gather({1000, 64}, {4, 16}), ElementsAre(4, 16, 64));
  // A rank-1 table gives the index shape.
  EXPECT_SHAPE(gather({10}, {3}), ElementsAre(3));
  // Scalar indices pick one row.
  EXPECT_SHAPE(gather({10, 4, 2}, {}), ElementsAre(4, 2));
  EXPECT_RULE_ERROR(gather({}, {3}),
                    "table must have rank at least 1, but is a scalar");
}

TEST(ShapeRules, ScatterAdd) {
  EXPECT_SHAPE(scatterAdd({1000, 64}, {4, 16}, {4, 16, 64}),
               ElementsAre(1000, 64));
  EXPECT_SHAPE(scatterAdd({10}, {3}, {3}), ElementsAre(10));
}

TEST(ShapeRules, ScatterAddErrors) {
  ShapeOr r = scatterAdd({}, {3}, {3});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(), "operand must have rank at least 1, but is a scalar");
  EXPECT_RULE_ERROR(scatterAdd({10, 4}, {3}, {4, 3}),
                    "updates must have shape indices ++ operand[1:] = [3, 4], "
                    "but have [4, 3]");
  EXPECT_RULE_ERROR(scatterAdd({10, 4}, {3}, {3}),
                    "= [3, 4], but have [3]");
}

TEST(ShapeRules, SoftmaxCrossEntropy) {
  EXPECT_SHAPE(softmaxCrossEntropy({32, 10}, {32}), ElementsAre(32));
  EXPECT_SHAPE(softmaxCrossEntropy({1, 1}, {1}), ElementsAre(1));
}

TEST(ShapeRules, SoftmaxCrossEntropyErrors) {
  EXPECT_RULE_ERROR(softmaxCrossEntropy({32}, {32}),
                    "logits must be rank 2 [N, C], but have rank 1");
  EXPECT_RULE_ERROR(softmaxCrossEntropy({32, 10}, {16}),
                    "labels must have shape [32], but have [16]");
  EXPECT_RULE_ERROR(softmaxCrossEntropy({32, 10}, {32, 10}),
                    "labels must have shape [32], but have [32, 10]");
  EXPECT_RULE_ERROR(softmaxCrossEntropy({32, 0}, {32}),
                    "logits must have at least one class, but dimension 1 has "
                    "size 0");
}

//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

TEST(ShapeRules, ShardOf) {
  // reduce_scatter: full operand, shard result.
  EXPECT_SHAPE(shardOf({1024}, {512}, 0), ElementsAre(512));
  EXPECT_SHAPE(shardOf({4, 1024}, {4, 256}, 1), ElementsAre(4, 256));
  // One shard is the whole.
  EXPECT_SHAPE(shardOf({8}, {8}, 0), ElementsAre(8));
}

TEST(ShapeRules, ShardOfErrors) {
  EXPECT_RULE_ERROR(shardOf({8}, {4}, 1), "dimension must lie in [0, 1), but is 1");
  EXPECT_RULE_ERROR(shardOf({8}, {2, 2}, 0),
                    "the full and shard shapes must have the same rank, but are "
                    "[8] and [2, 2]");
  EXPECT_RULE_ERROR(shardOf({8}, {3}, 0),
                    "the shard size along dimension 0 (3) must divide the full "
                    "size (8)");
  EXPECT_RULE_ERROR(shardOf({8}, {0}, 0),
                    "the shard size along dimension 0 (0) must divide");
  EXPECT_RULE_ERROR(shardOf({4, 8}, {2, 4}, 1),
                    "the full and shard shapes must agree outside dimension 1, "
                    "but are [4, 8] and [2, 4]");
}

TEST(ShapeRules, RankGroups) {
  EXPECT_SHAPE(rankGroups({2, 2}, {0, 1, 2, 3}), ElementsAre(2, 2));
  EXPECT_SHAPE(rankGroups({1, 3}, {5, 0, 9}), ElementsAre(1, 3));
  EXPECT_SHAPE(rankGroups({0, 2}, {}), ElementsAre(0, 2));
}

TEST(ShapeRules, RankGroupsErrors) {
  EXPECT_RULE_ERROR(rankGroups({4}, {0, 1, 2, 3}),
                    "groups must be a 2-D tensor [groups, ranks per group], but "
                    "has shape [4]");
  EXPECT_RULE_ERROR(rankGroups({1, 2}, {0, -1}),
                    "groups must hold non-negative ranks, but hold -1");
  EXPECT_RULE_ERROR(rankGroups({2, 2}, {0, 1, 1, 2}),
                    "groups must name each rank at most once, but rank 1 "
                    "appears twice");
}

TEST(ShapeRules, Attention) {
  // out is [B, H, Tq, Dv]: Tq from q, Dv from v.
  EXPECT_SHAPE(attention({2, 12, 5, 64}, {2, 12, 7, 64}, {2, 12, 7, 32}),
               ElementsAre(2, 12, 5, 32));
  EXPECT_SHAPE(attention({1, 1, 0, 4}, {1, 1, 3, 4}, {1, 1, 3, 4}),
               ElementsAre(1, 1, 0, 4));
}

TEST(ShapeRules, AttentionErrors) {
  EXPECT_RULE_ERROR(attention({12, 5, 64}, {2, 12, 7, 64}, {2, 12, 7, 64}),
                    "q must be rank 4 [B, H, Tq, D], but has rank 3");
  EXPECT_RULE_ERROR(attention({2, 12, 5, 64}, {2, 12, 7}, {2, 12, 7, 64}),
                    "k must be rank 4 [B, H, Tk, D], but has rank 3");
  EXPECT_RULE_ERROR(attention({2, 12, 5, 64}, {2, 12, 7, 64}, {2, 12, 7, 64, 1}),
                    "v must be rank 4 [B, H, Tk, Dv], but has rank 5");
  EXPECT_RULE_ERROR(attention({2, 12, 5, 64}, {2, 12, 7, 32}, {2, 12, 7, 64}),
                    "k must have q's batch, heads and head size [2, 12, Tk, 64], "
                    "but has shape [2, 12, 7, 32]");
  EXPECT_RULE_ERROR(attention({2, 12, 5, 64}, {2, 6, 7, 64}, {2, 12, 7, 64}),
                    "k must have q's batch, heads and head size");
  EXPECT_RULE_ERROR(attention({2, 12, 5, 64}, {2, 12, 7, 64}, {2, 12, 8, 64}),
                    "v must have q's batch and heads and k's length [2, 12, 7, "
                    "Dv], but has shape [2, 12, 8, 64]");
  EXPECT_RULE_ERROR(attention({2, 12, 5, 64}, {2, 12, 7, 64}, {1, 12, 7, 64}),
                    "v must have q's batch and heads");
  EXPECT_RULE_ERROR(attention({2, 12, 5, 64}, {2, 12, 0, 64}, {2, 12, 0, 64}),
                    "k and v must hold at least one key, but Tk is 0");
}

} // namespace
