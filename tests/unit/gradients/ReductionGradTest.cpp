//===- ReductionGradTest.cpp - gradients of reductions --------------------===//
//
// kiln.reduce of every kind over random subsets of dimensions (the empty set
// included), and argmax, whose integer result carries no gradient. max and
// min get pairwise distinct inputs, so no tie is within the step. A product
// is linear in each element, so central differences are exact up to
// rounding even at a zero: fibres with one zero and with several are
// checked against them.
//
//===----------------------------------------------------------------------===//

#include "tests/unit/gradients/GradientCheck.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace kiln::gradtest {
namespace {

Case reduceCase(Random &r, const std::string &kind, bool distinct) {
  Shape operand = r.shape(r.integer(1, 3), 1, 4);
  std::vector<int64_t> dims = r.subset(operand.size(), 0, operand.size());
  Shape result;
  for (int64_t d = 0; d < static_cast<int64_t>(operand.size()); ++d)
    if (std::find(dims.begin(), dims.end(), d) == dims.end())
      result.push_back(operand[d]);
  // Reduced dimensions are listed in a random order.
  std::vector<int64_t> order = r.permutation(dims.size());
  std::vector<int64_t> shuffled;
  for (int64_t i : order)
    shuffled.push_back(dims[i]);
  Case c;
  c.args = {{"x", distinct ? r.distinct(operand) : r.uniform(operand, -2, 2)}};
  c.body = "  %y = kiln.reduce " + kind + " %x, dims = " + list(shuffled) + " : " +
           tensorType(operand) + " -> " + tensorType(result);
  c.resultShape = result;
  return c;
}

TEST(ReductionGradient, Sum) {
  trials([](Random &r) { return reduceCase(r, "sum", false); });
}

TEST(ReductionGradient, Mean) {
  trials([](Random &r) { return reduceCase(r, "mean", false); });
}

TEST(ReductionGradient, Max) {
  trials([](Random &r) { return reduceCase(r, "max", true); });
}

TEST(ReductionGradient, Min) {
  trials([](Random &r) { return reduceCase(r, "min", true); });
}

TEST(ReductionGradient, Prod) {
  trials([](Random &r) { return reduceCase(r, "prod", false); });
}

// About a third of the elements exactly 0, so fibres hold none, one (the
// gradient there is the product of the rest, 0 elsewhere) or several (0
// everywhere).
TEST(ReductionGradient, ProdWithZeros) {
  trials(
      [](Random &r) {
        Case c = reduceCase(r, "prod", false);
        for (double &v : c.args[0].value.values())
          if (r.integer(0, 2) == 0)
            v = 0;
        return c;
      },
      /*count=*/24);
}

Case argmaxCase(Random &r) {
  Shape operand = r.shape(r.integer(1, 3), 1, 4);
  int64_t dim = r.integer(0, operand.size() - 1);
  Shape result = operand;
  result.erase(result.begin() + dim);
  Case c;
  c.args = {{"x", r.distinct(operand)}};
  c.body = "  %i = kiln.argmax %x, dim = " + std::to_string(dim) + " : " +
           tensorType(operand) + " -> " + tensorType(result, "i64") +
           "\n  %y = kiln.convert %i : " + tensorType(result, "i64") + " -> " +
           tensorType(result);
  c.resultShape = result;
  return c;
}

TEST(ReductionGradient, Argmax) {
  trials([](Random &r) {
    Case c = argmaxCase(r);
    c.expectZeroGradient = true;
    return c;
  });
}

TEST(ReductionGradient, ArgmaxHasZeroSlope) {
  trials(argmaxCase);
}

} // namespace
} // namespace kiln::gradtest
