//===- FlopsTest.cpp - FLOP counts against hand-computed values -----------===//
//
// Every counting rule in ir/Flops.h on shapes whose cost is worked out by
// hand in the comment beside each check. A multiply-add counts as 2.
//
//===----------------------------------------------------------------------===//

#include "ir/Flops.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

namespace {

using namespace kiln;

TEST(Flops, DotGeneralMatmul) {
  // [128, 784] x [784, 512]: 128 * 512 outputs, each 784 multiply-adds:
  // 2 * 65,536 * 784 = 102,760,448.
  EXPECT_EQ(flops::dotGeneral({128, 784}, {1}, {128, 512}), 102760448);
}

TEST(Flops, DotGeneralBatched) {
  // [8, 32, 64] x [8, 64, 16] -> [8, 32, 16] = 4,096 outputs, 64 each:
  // 2 * 4,096 * 64 = 524,288.
  EXPECT_EQ(flops::dotGeneral({8, 32, 64}, {2}, {8, 32, 16}), 524288);
}

TEST(Flops, DotGeneralContractionOnLeadingDimension) {
  // x^T y with x [8, 4], y [8, 3]: 12 outputs, 8 each: 2 * 12 * 8 = 192.
  EXPECT_EQ(flops::dotGeneral({8, 4}, {0}, {4, 3}), 192);
}

TEST(Flops, DotGeneralFullContraction) {
  // <x, y> over [4, 8]: one output, 32 multiply-adds: 64.
  EXPECT_EQ(flops::dotGeneral({4, 8}, {0, 1}, {}), 64);
}

TEST(Flops, DotGeneralOuterProduct) {
  // [3] x [5] with nothing contracted: 15 products, counted as 2 each.
  EXPECT_EQ(flops::dotGeneral({3}, {}, {3, 5}), 30);
}

TEST(Flops, DotGeneralEmpty) {
  EXPECT_EQ(flops::dotGeneral({0, 8}, {1}, {0, 3}), 0);
}

TEST(Flops, Conv2D) {
  // LeNet's first layer: filter [6, 1, 5, 5], output [8, 6, 28, 28].
  // 8 * 6 * 28 * 28 = 37,632 outputs, each 1 * 5 * 5 = 25 multiply-adds:
  // 2 * 37,632 * 25 = 1,881,600.
  EXPECT_EQ(flops::conv2d({6, 1, 5, 5}, {8, 6, 28, 28}), 1881600);
}

TEST(Flops, Conv2DGrouped) {
  // Filter [6, 2, 3, 3] (2 input channels per group), output [2, 6, 3, 3]:
  // 108 outputs, each 2 * 3 * 3 = 18 multiply-adds: 2 * 108 * 18 = 3,888.
  EXPECT_EQ(flops::conv2d({6, 2, 3, 3}, {2, 6, 3, 3}), 3888);
}

TEST(Flops, Conv2DPointwise) {
  // 1x1 convolution, 64 -> 128 channels on [1, 64, 7, 7]:
  // 128 * 49 = 6,272 outputs, 64 each: 2 * 6,272 * 64 = 802,816.
  EXPECT_EQ(flops::conv2d({128, 64, 1, 1}, {1, 128, 7, 7}), 802816);
}

TEST(Flops, Pool2D) {
  // 2x2 windows onto [8, 6, 14, 14] = 9,408 outputs: 4 each = 37,632.
  EXPECT_EQ(flops::pool2d({2, 2}, {8, 6, 14, 14}), 37632);
  // 3x2 windows onto [1, 2, 3, 3] = 18 outputs: 6 each = 108.
  EXPECT_EQ(flops::pool2d({3, 2}, {1, 2, 3, 3}), 108);
}

TEST(Flops, Reduce) {
  // One operation per input element.
  EXPECT_EQ(flops::reduce(20), 20);
  EXPECT_EQ(flops::reduce(0), 0);
}

TEST(Flops, Softmax) {
  // [32, 10]: 320 elements, 5 operations each.
  EXPECT_EQ(flops::softmax(320), 1600);
}

TEST(Flops, LayerNorm) {
  // [4, 16, 64]: 4,096 elements, 7 operations each = 28,672.
  EXPECT_EQ(flops::layerNorm(4096), 28672);
}

TEST(Flops, Dropout) {
  // Compare and scale: 2 per element.
  EXPECT_EQ(flops::dropout(100), 200);
}

TEST(Flops, GeluGrad) {
  // The operations of dy * gelu'(x) per element: 18 for tanh, 11 for erf.
  EXPECT_EQ(flops::geluGrad(100, /*tanh=*/true), 1800);
  EXPECT_EQ(flops::geluGrad(100, /*tanh=*/false), 1100);
  EXPECT_EQ(flops::geluGrad(0, true), 0);
}

TEST(Flops, Attention) {
  // B=2, H=12, Tq=Tk=128, D=Dv=64: two GEMMs of 2 * 128 * 128 * 64 each per
  // head, 2 * 24 * 16384 * 128 = 100,663,296.
  EXPECT_EQ(flops::attention(2, 12, 128, 128, 64, 64, false), 100663296);
  // Causal keeps half the query-key pairs.
  EXPECT_EQ(flops::attention(2, 12, 128, 128, 64, 64, true), 50331648);
  // Tq=3, Tk=5, D=4, Dv=6: 2 * 15 * 10 = 300.
  EXPECT_EQ(flops::attention(1, 1, 3, 5, 4, 6, false), 300);
}

TEST(Flops, AttentionGrad) {
  // Five GEMMs (scores, dV, dP, dQ, dK): 2 * pairs * (3 D + 2 Dv); with
  // D = Dv that is 2.5 times the forward.
  EXPECT_EQ(flops::attentionGrad(2, 12, 128, 128, 64, 64, false), 251658240);
  EXPECT_EQ(flops::attentionGrad(2, 12, 128, 128, 64, 64, true), 125829120);
  // Tq=3, Tk=5, D=4, Dv=6: 2 * 15 * (12 + 12) = 720.
  EXPECT_EQ(flops::attentionGrad(1, 1, 3, 5, 4, 6, false), 720);
}

TEST(Flops, CountsSaturateInsteadOfOverflowing) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(flops::add(kMax - 1, 1), kMax);
  EXPECT_EQ(flops::add(kMax, kMax), kMax);
  EXPECT_EQ(flops::mul(int64_t(1) << 32, int64_t(1) << 31), kMax); // 2^63
  EXPECT_EQ(flops::mul(int64_t(1) << 31, int64_t(1) << 31), int64_t(1) << 62);
  // Two 2^23 x 2^23 f32 matrices are 2^48 bytes each, within a kiln
  // tensor's limits; their product is 2 * 2^46 * 2^23 = 2^70 operations.
  int64_t n = int64_t(1) << 23;
  EXPECT_EQ(flops::dotGeneral({n, n}, {1}, {n, n}), kMax);
  // One below: 2 * 2^40 * 2^20 = 2^61, exact.
  int64_t m = int64_t(1) << 20;
  EXPECT_EQ(flops::dotGeneral({m, m}, {1}, {m, m}), int64_t(1) << 61);
  // A convolution and a pool window past int64_t, and attention over 2^40
  // query-key pairs with 2^24-wide heads.
  EXPECT_EQ(flops::conv2d({1, n, 1, n}, {1, 1, n, 1}), kMax);
  EXPECT_EQ(flops::pool2d({n, n}, {1, 1, n, 1}), kMax);
  EXPECT_EQ(flops::attention(1, 1, m, m, n, n, false), kMax);
  EXPECT_EQ(flops::attentionGrad(1, 1, m, m, n, n, true), kMax);
}

} // namespace
