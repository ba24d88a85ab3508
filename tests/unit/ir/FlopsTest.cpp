// FLOP counts (ir/Flops.h) against hand-computed values.
#include "ir/Flops.h"

#include <gtest/gtest.h>

TEST(Flops, Matmul) {
  // [128, 784] x [784, 512]: 2 * 128 * 512 * 784 multiply-adds.
  EXPECT_EQ(kiln::flops::dotGeneral({128, 784}, {1}, {128, 512}),
            2LL * 128 * 512 * 784);
}
