//===- LinalgGradTest.cpp - gradients of dot_general, convs and pools -----===//
//
// dot_general with random batching, contracting and free dimensions in
// random positions; conv2d with random strides, padding, dilation and
// groups; both pools with random windows; and the gradient ops themselves
// (second-order gradients), each against finite differences.
//
//===----------------------------------------------------------------------===//

#include "tests/unit/gradients/GradientCheck.h"

#include <gtest/gtest.h>

namespace kiln::gradtest {
namespace {

TEST(LinalgGradient, DotGeneral) {
  trials([](Random &r) {
    int64_t nb = r.integer(0, 2), nc = r.integer(0, 2);
    int64_t nlf = r.integer(0, 2), nrf = r.integer(0, 2);
    Shape batch = r.shape(nb, 1, 3), contract = r.shape(nc, 1, 3);
    Shape lhsFree = r.shape(nlf, 1, 3), rhsFree = r.shape(nrf, 1, 3);
    // Place each group's dimensions at random positions of each operand.
    std::vector<int64_t> lp = r.permutation(nb + nc + nlf);
    std::vector<int64_t> rp = r.permutation(nb + nc + nrf);
    Shape lhs(lp.size()), rhs(rp.size());
    std::vector<int64_t> lb, rb, lc, rc;
    for (int64_t i = 0; i < nb; ++i) {
      lb.push_back(lp[i]);
      rb.push_back(rp[i]);
      lhs[lp[i]] = rhs[rp[i]] = batch[i];
    }
    for (int64_t i = 0; i < nc; ++i) {
      lc.push_back(lp[nb + i]);
      rc.push_back(rp[nb + i]);
      lhs[lp[nb + i]] = rhs[rp[nb + i]] = contract[i];
    }
    std::vector<int64_t> lf(lp.begin() + nb + nc, lp.end());
    std::vector<int64_t> rf(rp.begin() + nb + nc, rp.end());
    for (int64_t i = 0; i < nlf; ++i)
      lhs[lf[i]] = lhsFree[i];
    for (int64_t i = 0; i < nrf; ++i)
      rhs[rf[i]] = rhsFree[i];
    // Result: batch (lhs order), lhs free, rhs free, each increasing.
    std::sort(lf.begin(), lf.end());
    std::sort(rf.begin(), rf.end());
    Shape result = batch;
    for (int64_t d : lf)
      result.push_back(lhs[d]);
    for (int64_t d : rf)
      result.push_back(rhs[d]);
    Case c;
    c.args = {{"a", r.uniform(lhs, -2, 2)}, {"b", r.uniform(rhs, -2, 2)}};
    c.body = "  %y = kiln.dot_general %a, %b, batch = " + list(lb) + " x " +
             list(rb) + ", contract = " + list(lc) + " x " + list(rc) + " : (" +
             tensorType(lhs) + ", " + tensorType(rhs) + ") -> " +
             tensorType(result);
    c.resultShape = result;
    return c;
  });
}

// A random valid conv2d configuration.
struct Conv {
  Shape input, filter, output;
  std::string attrs;
};

Conv randomConv(Random &r) {
  int64_t groups = r.integer(1, 2);
  int64_t n = r.integer(1, 2), c = groups * r.integer(1, 2),
          o = groups * r.integer(1, 2);
  int64_t kh = r.integer(1, 3), kw = r.integer(1, 3);
  std::vector<int64_t> strides = {r.integer(1, 2), r.integer(1, 2)};
  std::vector<int64_t> dilation = {r.integer(1, 2), r.integer(1, 2)};
  std::vector<int64_t> padding = {r.integer(0, 2), r.integer(0, 2),
                                  r.integer(0, 2), r.integer(0, 2)};
  auto extent = [&](int64_t k, int64_t dil, int64_t padTotal) {
    int64_t minimum = std::max<int64_t>(1, dil * (k - 1) + 1 - padTotal);
    return r.integer(minimum, minimum + 4);
  };
  int64_t h = extent(kh, dilation[0], padding[0] + padding[1]);
  int64_t w = extent(kw, dilation[1], padding[2] + padding[3]);
  int64_t oh = (h + padding[0] + padding[1] - dilation[0] * (kh - 1) - 1) / strides[0] + 1;
  int64_t ow = (w + padding[2] + padding[3] - dilation[1] * (kw - 1) - 1) / strides[1] + 1;
  Conv conv;
  conv.input = {n, c, h, w};
  conv.filter = {o, c / groups, kh, kw};
  conv.output = {n, o, oh, ow};
  conv.attrs = "strides = " + list(strides) + ", padding = " + list(padding) +
               ", dilation = " + list(dilation) +
               ", groups = " + std::to_string(groups);
  return conv;
}

TEST(LinalgGradient, Conv2D) {
  trials([](Random &r) {
    Conv conv = randomConv(r);
    Case c;
    c.args = {{"x", r.uniform(conv.input, -2, 2)}, {"k", r.uniform(conv.filter, -2, 2)}};
    c.body = "  %y = kiln.conv2d %x, %k, " + conv.attrs + " : (" +
             tensorType(conv.input) + ", " + tensorType(conv.filter) + ") -> " +
             tensorType(conv.output);
    c.resultShape = conv.output;
    return c;
  });
}

TEST(LinalgGradient, Conv2DInputGrad) {
  trials([](Random &r) {
    Conv conv = randomConv(r);
    Case c;
    c.args = {{"dy", r.uniform(conv.output, -2, 2)},
              {"k", r.uniform(conv.filter, -2, 2)}};
    c.body = "  %y = kiln.conv2d_input_grad %dy, %k, " + conv.attrs + " : (" +
             tensorType(conv.output) + ", " + tensorType(conv.filter) + ") -> " +
             tensorType(conv.input);
    c.resultShape = conv.input;
    return c;
  });
}

TEST(LinalgGradient, Conv2DFilterGrad) {
  trials([](Random &r) {
    Conv conv = randomConv(r);
    Case c;
    c.args = {{"x", r.uniform(conv.input, -2, 2)},
              {"dy", r.uniform(conv.output, -2, 2)}};
    c.body = "  %y = kiln.conv2d_filter_grad %x, %dy, " + conv.attrs + " : (" +
             tensorType(conv.input) + ", " + tensorType(conv.output) + ") -> " +
             tensorType(conv.filter);
    c.resultShape = conv.filter;
    return c;
  });
}

// A random valid pooling configuration; padding stays below the window so
// every window holds an input element.
struct Pool {
  Shape input, output;
  std::string attrs;
};

Pool randomPool(Random &r) {
  std::vector<int64_t> window = {r.integer(1, 3), r.integer(1, 3)};
  std::vector<int64_t> strides = {r.integer(1, 3), r.integer(1, 3)};
  std::vector<int64_t> padding = {r.integer(0, window[0] - 1), r.integer(0, window[0] - 1),
                                  r.integer(0, window[1] - 1), r.integer(0, window[1] - 1)};
  int64_t h = r.integer(std::max<int64_t>(1, window[0] - padding[0] - padding[1]), 6);
  int64_t w = r.integer(std::max<int64_t>(1, window[1] - padding[2] - padding[3]), 6);
  int64_t n = r.integer(1, 2), c = r.integer(1, 2);
  Pool pool;
  pool.input = {n, c, h, w};
  pool.output = {n, c, (h + padding[0] + padding[1] - window[0]) / strides[0] + 1,
                 (w + padding[2] + padding[3] - window[1]) / strides[1] + 1};
  pool.attrs = "window = " + list(window) + ", strides = " + list(strides) +
               ", padding = " + list(padding);
  return pool;
}

TEST(LinalgGradient, MaxPool2D) {
  trials([](Random &r) {
    Pool pool = randomPool(r);
    Case c;
    c.args = {{"x", r.distinct(pool.input)}};
    c.body = "  %y = kiln.max_pool2d %x, " + pool.attrs + " : " +
             tensorType(pool.input) + " -> " + tensorType(pool.output);
    c.resultShape = pool.output;
    return c;
  });
}

TEST(LinalgGradient, AvgPool2D) {
  trials([](Random &r) {
    Pool pool = randomPool(r);
    Case c;
    c.args = {{"x", r.uniform(pool.input, -2, 2)}};
    c.body = "  %y = kiln.avg_pool2d %x, " + pool.attrs + " : " +
             tensorType(pool.input) + " -> " + tensorType(pool.output);
    c.resultShape = pool.output;
    return c;
  });
}

TEST(LinalgGradient, MaxPool2DGrad) {
  // Distinct inputs: the routing does not change within the step, so the
  // finite differences in x are zero, as the rule says.
  trials([](Random &r) {
    Pool pool = randomPool(r);
    Case c;
    c.args = {{"x", r.distinct(pool.input)}, {"dy", r.uniform(pool.output, -2, 2)}};
    c.body = "  %y = kiln.max_pool2d_grad %x, %dy, " + pool.attrs + " : " +
             tensorType(pool.input) + ", " + tensorType(pool.output);
    c.resultShape = pool.input;
    return c;
  });
}

TEST(LinalgGradient, MaxPool2DGradWithTies) {
  // x as an input with many ties (values 0 and 1): the function is linear
  // in dy, so the finite differences are exact and check that the rule picks
  // the same window element as the op (the first maximum in row-major order).
  trials([](Random &r) {
    Pool pool = randomPool(r);
    HostTensor x(DType::f64, pool.input);
    for (double &v : x.values())
      v = static_cast<double>(r.integer(0, 1));
    Case c;
    c.args = {{"x", x, /*parameter=*/false}, {"dy", r.uniform(pool.output, -2, 2)}};
    c.body = "  %y = kiln.max_pool2d_grad %x, %dy, " + pool.attrs + " : " +
             tensorType(pool.input) + ", " + tensorType(pool.output);
    c.resultShape = pool.input;
    return c;
  });
}

TEST(LinalgGradient, AvgPool2DGrad) {
  trials([](Random &r) {
    Pool pool = randomPool(r);
    Case c;
    c.args = {{"dy", r.uniform(pool.output, -2, 2)}};
    c.body = "  %y = kiln.avg_pool2d_grad %dy, " + pool.attrs + " : " +
             tensorType(pool.output) + " -> " + tensorType(pool.input);
    c.resultShape = pool.input;
    return c;
  });
}

} // namespace
} // namespace kiln::gradtest
