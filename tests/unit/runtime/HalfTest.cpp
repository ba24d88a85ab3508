//===- HalfTest.cpp - runtime/Half.h against a direct computation ---------===//
//
// Decoding is checked on every bit pattern against the format's formula
// (sign, exponent, mantissa through std::ldexp). Encoding is checked against
// a brute-force nearest search over all finite values of the format (ties to
// the even bit pattern, overflow past the largest value plus half an ulp to
// infinity), on random floats of every magnitude and on the exact midpoints.
//
//===----------------------------------------------------------------------===//

#include "runtime/Half.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace kiln::runtime {
namespace {

// The value of |bits| in a format with |exponentBits| and |mantissaBits|.
double decode(uint16_t bits, int exponentBits, int mantissaBits) {
  int sign = bits >> 15;
  int exponent = (bits >> mantissaBits) & ((1 << exponentBits) - 1);
  int mantissa = bits & ((1 << mantissaBits) - 1);
  int bias = (1 << (exponentBits - 1)) - 1;
  double v;
  if (exponent == (1 << exponentBits) - 1)
    v = mantissa ? std::numeric_limits<double>::quiet_NaN()
                 : std::numeric_limits<double>::infinity();
  else if (exponent == 0)
    v = std::ldexp(mantissa, 1 - bias - mantissaBits);
  else
    v = std::ldexp(mantissa + (1 << mantissaBits), exponent - bias - mantissaBits);
  return sign ? -v : v;
}

// Nearest representable value by search over the non-negative finite bit
// patterns (which are ordered like their values).
uint16_t nearest(float x, int exponentBits, int mantissaBits) {
  uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  double a = std::fabs(static_cast<double>(x));
  uint16_t maxFinite = static_cast<uint16_t>(
      (((1 << exponentBits) - 1) << mantissaBits) - 1);
  double top = decode(maxFinite, exponentBits, mantissaBits);
  double ulp = top - decode(maxFinite - 1, exponentBits, mantissaBits);
  if (a >= top + ulp / 2) // rounds past the largest finite value
    return sign | static_cast<uint16_t>(maxFinite + 1);
  uint16_t lo = 0, hi = maxFinite;
  while (lo < hi) { // first pattern with value >= a
    uint16_t mid = (lo + hi) / 2;
    if (decode(mid, exponentBits, mantissaBits) < a)
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo == 0)
    return sign;
  double above = decode(lo, exponentBits, mantissaBits);
  double below = decode(lo - 1, exponentBits, mantissaBits);
  if (a - below < above - a)
    return sign | (lo - 1);
  if (above - a < a - below)
    return sign | lo;
  return sign | ((lo & 1) ? lo - 1 : lo); // a tie: the even pattern
}

TEST(HalfTest, DecodesEveryF16AndBf16Pattern) {
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    double f16 = decode(bits, 5, 10), bf16 = decode(bits, 8, 7);
    if (std::isnan(f16))
      EXPECT_TRUE(std::isnan(f16ToFloat(bits))) << bits;
    else
      EXPECT_EQ(static_cast<double>(f16ToFloat(bits)), f16) << bits;
    if (std::isnan(bf16))
      EXPECT_TRUE(std::isnan(bf16ToFloat(bits))) << bits;
    else
      EXPECT_EQ(static_cast<double>(bf16ToFloat(bits)), bf16) << bits;
  }
}

TEST(HalfTest, EncodesToNearestEven) {
  std::mt19937 rng(1234);
  std::vector<float> values = {0.0f, -0.0f, 1.0f, 65504.0f, 65519.0f, 65520.0f,
                               1e-8f, 2.9802322e-8f, 5.9604645e-8f, 6.1035156e-5f,
                               std::numeric_limits<float>::infinity(),
                               -std::numeric_limits<float>::infinity(),
                               std::numeric_limits<float>::max()};
  // Random bit patterns cover every exponent; midpoints between neighbours
  // check the ties.
  for (int i = 0; i < 200000; ++i) {
    uint32_t u = rng();
    float f = bitsFloat(u);
    if (!std::isnan(f))
      values.push_back(f);
  }
  for (uint32_t bits = 0; bits < 0x7c00; bits += 7) {
    double mid = (decode(bits, 5, 10) + decode(bits + 1, 5, 10)) / 2;
    values.push_back(static_cast<float>(mid));
  }
  for (uint32_t bits = 0; bits < 0x7f80; bits += 5) {
    double mid = (decode(bits, 8, 7) + decode(bits + 1, 8, 7)) / 2;
    values.push_back(static_cast<float>(mid));
  }
  for (float f : values) {
    EXPECT_EQ(floatToF16(f), nearest(f, 5, 10)) << f;
    EXPECT_EQ(floatToBf16(f), nearest(f, 8, 7)) << f;
  }
}

TEST(HalfTest, KeepsNaN) {
  float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(f16ToFloat(floatToF16(nan))));
  EXPECT_TRUE(std::isnan(bf16ToFloat(floatToBf16(nan))));
  // A signalling NaN whose payload sits in the low bits stays a NaN.
  float snan = bitsFloat(0x7f800001u);
  EXPECT_TRUE(std::isnan(bf16ToFloat(floatToBf16(snan))));
  EXPECT_TRUE(std::isnan(f16ToFloat(floatToF16(snan))));
}

} // namespace
} // namespace kiln::runtime
