//===- PhiloxTest.cpp - the generator behind kiln.dropout -----------------===//
//
// Philox-4x32-10 against the known-answer vectors of Random123
// (kat_vectors), and the properties of the dropout uniform that backends
// rely on: exact multiples of 2^-24 in [0, 1), every word of seed, counter
// and element index taking part.
//
//===----------------------------------------------------------------------===//

#include "ir/reference/Philox.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <set>

namespace {

using kiln::philox::Counter;
using kiln::philox::dropoutUniform;
using kiln::philox::Key;
using kiln::philox::philox4x32_10;
using ::testing::ElementsAre;

TEST(Philox, KnownAnswerZeros) {
  EXPECT_THAT(philox4x32_10(Counter{0, 0, 0, 0}, Key{0, 0}),
              ElementsAre(0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u));
}

TEST(Philox, KnownAnswerOnes) {
  EXPECT_THAT(philox4x32_10(Counter{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
                            Key{0xffffffffu, 0xffffffffu}),
              ElementsAre(0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu));
}

TEST(Philox, KnownAnswerPi) {
  EXPECT_THAT(philox4x32_10(Counter{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
                            Key{0xa4093822u, 0x299f31d0u}),
              ElementsAre(0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u));
}

// u is the top 24 bits of output word 0 of Philox(counter, key) with the
// words laid out as Philox.h documents.
TEST(Philox, DropoutUniformFollowsTheRecipe) {
  int64_t seed = 0x0123456789abcdefLL, counter = 0x00000005deadbeefLL, index = 0x100000007LL;
  uint32_t word = philox4x32_10(Counter{0xdeadbeefu, 0x5u, 0x7u, 0x1u},
                                Key{0x89abcdefu, 0x01234567u})[0];
  EXPECT_EQ(dropoutUniform(seed, counter, index), (word >> 8) / 16777216.0);
}

TEST(Philox, DropoutUniformIsAMultipleOfTwoToTheMinus24InUnitInterval) {
  for (int64_t i = 0; i < 10000; ++i) {
    double u = dropoutUniform(-3, 42, i);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    ASSERT_EQ(u * 16777216.0, std::floor(u * 16777216.0));
  }
}

// The high words of seed, counter and index all change the stream.
TEST(Philox, EveryWordMatters) {
  auto stream = [](int64_t seed, int64_t counter, int64_t base) {
    std::vector<double> v;
    for (int64_t i = 0; i < 64; ++i)
      v.push_back(dropoutUniform(seed, counter, base + i));
    return v;
  };
  std::vector<double> reference = stream(1, 1, 0);
  EXPECT_NE(reference, stream(1 + (int64_t(1) << 32), 1, 0));
  EXPECT_NE(reference, stream(1, 1 + (int64_t(1) << 32), 0));
  EXPECT_NE(reference, stream(1, 1, int64_t(1) << 32));
  EXPECT_NE(reference, stream(2, 1, 0));
  EXPECT_NE(reference, stream(1, 2, 0));
  EXPECT_EQ(reference, stream(1, 1, 0));
}

// Means of many uniforms are near 1/2 (a gross bias check, 6 sigma).
TEST(Philox, DropoutUniformIsRoughlyUniform) {
  const int n = 200000;
  double sum = 0;
  int below = 0;
  for (int i = 0; i < n; ++i) {
    double u = dropoutUniform(7, 0, i);
    sum += u;
    below += u < 0.1;
  }
  EXPECT_NEAR(sum / n, 0.5, 6 * std::sqrt(1.0 / 12 / n));
  EXPECT_NEAR(below / double(n), 0.1, 6 * std::sqrt(0.09 / n));
}

} // namespace
