//===- DataMovementGradTest.cpp - gradients of data-movement ops ----------===//
//
// broadcast_in_dim, reshape, transpose, slice (strided), concatenate and pad
// on random shapes and attributes: their gradients are exact adjoints, so
// any misplaced element shows up against the finite differences.
//
//===----------------------------------------------------------------------===//

#include "tests/unit/gradients/GradientCheck.h"

#include <gtest/gtest.h>

namespace kiln::gradtest {
namespace {

TEST(DataMovementGradient, BroadcastInDim) {
  trials([](Random &r) {
    Shape result = r.shape(r.integer(1, 3), 1, 4);
    std::vector<int64_t> dims =
        r.subset(static_cast<int64_t>(result.size()), 0, result.size());
    Shape operand;
    for (int64_t d : dims)
      operand.push_back(r.integer(0, 2) == 0 ? 1 : result[d]);
    Case c;
    c.args = {{"x", r.uniform(operand, -2, 2)}};
    c.body = "  %y = kiln.broadcast_in_dim %x, dims = " + list(dims) + " : " +
             tensorType(operand) + " -> " + tensorType(result);
    c.resultShape = result;
    return c;
  });
}

TEST(DataMovementGradient, Reshape) {
  trials([](Random &r) {
    Shape operand = r.shape(r.integer(1, 3), 1, 4);
    int64_t n = 1;
    for (int64_t d : operand)
      n *= d;
    // Split n into random factors.
    Shape result;
    while (n > 1 && result.size() < 3) {
      std::vector<int64_t> divisors;
      for (int64_t k = 1; k <= n; ++k)
        if (n % k == 0)
          divisors.push_back(k);
      int64_t k = divisors[r.integer(0, divisors.size() - 1)];
      result.push_back(k);
      n /= k;
    }
    if (n > 1 || result.empty())
      result.push_back(n);
    if (r.coin())
      result.insert(result.begin() + r.integer(0, result.size()), 1);
    Case c;
    c.args = {{"x", r.uniform(operand, -2, 2)}};
    c.body = "  %y = kiln.reshape %x : " + tensorType(operand) + " -> " +
             tensorType(result);
    c.resultShape = result;
    return c;
  });
}

TEST(DataMovementGradient, Transpose) {
  trials([](Random &r) {
    Shape operand = r.shape(r.integer(1, 4), 1, 4);
    std::vector<int64_t> perm = r.permutation(operand.size());
    Shape result;
    for (int64_t p : perm)
      result.push_back(operand[p]);
    Case c;
    c.args = {{"x", r.uniform(operand, -2, 2)}};
    c.body = "  %y = kiln.transpose %x, permutation = " + list(perm) + " : " +
             tensorType(operand) + " -> " + tensorType(result);
    c.resultShape = result;
    return c;
  });
}

TEST(DataMovementGradient, Slice) {
  trials([](Random &r) {
    Shape operand = r.shape(r.integer(1, 3), 1, 7);
    std::vector<int64_t> start, limit, strides;
    Shape result;
    for (int64_t d : operand) {
      start.push_back(r.integer(0, d - 1));
      limit.push_back(r.integer(start.back() + 1, d));
      strides.push_back(r.integer(1, 3));
      result.push_back((limit.back() - start.back() + strides.back() - 1) /
                       strides.back());
    }
    Case c;
    c.args = {{"x", r.uniform(operand, -2, 2)}};
    c.body = "  %y = kiln.slice %x, start = " + list(start) + ", limit = " +
             list(limit) + ", strides = " + list(strides) + " : " +
             tensorType(operand) + " -> " + tensorType(result);
    c.resultShape = result;
    return c;
  });
}

TEST(DataMovementGradient, Concatenate) {
  // Written in the generic form, which kiln-opt also accepts.
  trials([](Random &r) {
    Shape base = r.shape(r.integer(1, 3), 1, 4);
    int64_t dim = r.integer(0, base.size() - 1);
    int64_t inputs = r.integer(1, 3);
    Case c;
    std::string operands, types;
    Shape result = base;
    result[dim] = 0;
    for (int64_t i = 0; i < inputs; ++i) {
      Shape s = base;
      s[dim] = r.integer(1, 3);
      result[dim] += s[dim];
      std::string name = "x" + std::to_string(i);
      c.args.push_back({name, r.uniform(s, -2, 2)});
      operands += (i ? ", %" : "%") + name;
      types += (i ? ", " : "") + tensorType(s);
    }
    c.body = "  %y = \"kiln.concatenate\"(" + operands + ") <{dimension = " +
             std::to_string(dim) + " : i64}> : (" + types + ") -> " +
             tensorType(result);
    c.resultShape = result;
    return c;
  });
}

TEST(DataMovementGradient, Pad) {
  trials([](Random &r) {
    Shape operand = r.shape(r.integer(1, 3), 1, 4);
    std::vector<int64_t> low, high;
    Shape result;
    for (int64_t d : operand) {
      low.push_back(r.integer(0, 2));
      high.push_back(r.integer(0, 2));
      result.push_back(d + low.back() + high.back());
    }
    Case c;
    c.args = {{"x", r.uniform(operand, -2, 2)}};
    c.body = "  %y = kiln.pad %x, low = " + list(low) + ", high = " + list(high) +
             ", value = " + std::to_string(r.uniform(-1, 1)) + " : " +
             tensorType(operand) + " -> " + tensorType(result);
    c.resultShape = result;
    return c;
  });
}

} // namespace
} // namespace kiln::gradtest
