// Shape rules of kiln ops on plain shapes (ir/ShapeRules.h).
#include "ir/ShapeRules.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

using namespace kiln::shape;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ShapeRules, DotGeneralMatmul) {
  ShapeOr r = dotGeneral({4, 8}, {8, 3}, {}, {}, {1}, {0});
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_THAT(r.shape(), ElementsAre(4, 3));
}

TEST(ShapeRules, DotGeneralContractingMismatch) {
  ShapeOr r = dotGeneral({4, 8}, {7, 3}, {}, {}, {1}, {0});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.error(), HasSubstr("lhs dimension 1 is 8 and rhs dimension 0 is 7"));
}
