//===- NNGradTest.cpp - gradients of the neural-network composites --------===//
//
// softmax and log_softmax along a random dimension, layer_norm over random
// trailing dimensions (input, scale and bias), gather and scatter_add with
// repeated indices (adding, and combining by max and min), dropout (the mask is
// fixed by seed and counter, so the op is linear in its operand),
// softmax_cross_entropy, and attention (q, k and v through kiln.attention_grad;
// causal or not, Tq != Tk, Dv != D).
//
//===----------------------------------------------------------------------===//

#include "tests/unit/gradients/GradientCheck.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace kiln::gradtest {
namespace {

Case softmaxLike(Random &r, const std::string &op) {
  Shape s = r.shape(r.integer(1, 3), 1, 5);
  int64_t dim = r.integer(0, s.size() - 1);
  Case c;
  c.args = {{"x", r.uniform(s, -3, 3)}};
  c.body = "  %y = kiln." + op + " %x, dim = " + std::to_string(dim) + " : " +
           tensorType(s);
  c.resultShape = s;
  return c;
}

TEST(NNGradient, Softmax) {
  trials([](Random &r) { return softmaxLike(r, "softmax"); });
}

TEST(NNGradient, LogSoftmax) {
  trials([](Random &r) { return softmaxLike(r, "log_softmax"); });
}

TEST(NNGradient, LayerNorm) {
  trials([](Random &r) {
    Shape s = r.shape(r.integer(1, 3), 2, 4);
    int64_t axis = r.integer(0, s.size() - 1);
    Shape param(s.begin() + axis, s.end());
    double epsilon = r.coin() ? 1e-5 : 1e-3;
    Case c;
    c.args = {{"x", r.uniform(s, -2, 2)},
              {"g", r.uniform(param, 0.5, 1.5)},
              {"b", r.uniform(param, -1, 1)}};
    c.body = "  %y = kiln.layer_norm %x, %g, %b, axis = " + std::to_string(axis) +
             ", epsilon = " + std::to_string(epsilon) + " : " + tensorType(s) +
             ", " + tensorType(param);
    c.resultShape = s;
    return c;
  });
}

TEST(NNGradient, Gather) {
  trials([](Random &r) {
    int64_t rows = r.integer(1, 5);
    Shape table = {rows};
    Shape rowShape = r.shape(r.integer(0, 2), 1, 3);
    table.insert(table.end(), rowShape.begin(), rowShape.end());
    Shape indices = r.shape(r.integer(0, 2), 1, 4);
    Shape result = indices;
    result.insert(result.end(), rowShape.begin(), rowShape.end());
    DType indexType = r.coin() ? DType::i32 : DType::i64;
    Case c;
    c.args = {{"t", r.uniform(table, -2, 2)},
              {"i", r.indices(indices, rows, indexType), /*parameter=*/false}};
    c.body = "  %y = kiln.gather %t, %i : (" + tensorType(table) + ", " +
             tensorType(indices, dtypeName(indexType)) + ") -> " +
             tensorType(result);
    c.resultShape = result;
    return c;
  });
}

// A scatter of |indices| (1 to 4 per dimension, up to rank 2) into |rows|
// rows of an operand whose rows are up to rank 2; with |combine| max or
// min the operand's and the updates' values are pairwise distinct (one
// ladder split in two), so no tie is within the step, and the gradient
// reaches the operand's elements that stay and the updates that win their
// rows.
Case scatterCase(Random &r, const std::string &combine) {
  int64_t rows = r.integer(1, 5);
  Shape operand = {rows};
  Shape rowShape = r.shape(r.integer(0, 2), 1, 3);
  operand.insert(operand.end(), rowShape.begin(), rowShape.end());
  Shape indices = r.shape(r.integer(0, 2), 1, 4);
  Shape updates = indices;
  updates.insert(updates.end(), rowShape.begin(), rowShape.end());
  HostTensor t = r.uniform(operand, -2, 2), u = r.uniform(updates, -2, 2);
  if (combine == "max" || combine == "min") {
    HostTensor ladder = r.distinct({t.size() + u.size()});
    std::copy_n(ladder.values().begin(), t.size(), t.values().begin());
    std::copy(ladder.values().begin() + t.size(), ladder.values().end(),
              u.values().begin());
  }
  Case c;
  c.args = {
      {"t", t}, {"i", r.indices(indices, rows), /*parameter=*/false}, {"u", u}};
  c.body = "  %y = kiln.scatter_add %t, %i, %u" +
           (combine.empty() ? std::string() : " combine = " + combine) +
           " : (" + tensorType(operand) + ", " + tensorType(indices, "i32") +
           ", " + tensorType(updates) + ") -> " + tensorType(operand);
  c.resultShape = operand;
  return c;
}

TEST(NNGradient, ScatterAdd) {
  trials([](Random &r) { return scatterCase(r, ""); });
}

TEST(NNGradient, ScatterMax) {
  trials([](Random &r) { return scatterCase(r, "max"); });
}

TEST(NNGradient, ScatterMin) {
  trials([](Random &r) { return scatterCase(r, "min"); });
}

// combine = prod is linear in each factor, so central differences are exact
// up to rounding, at zeros too: about a third of the operand's and the
// updates' elements are exactly 0, so rows hold no zero factor, one, or
// several.
TEST(NNGradient, ScatterProd) {
  trials([](Random &r) { return scatterCase(r, "prod"); });
}

TEST(NNGradient, ScatterProdWithZeros) {
  trials(
      [](Random &r) {
        Case c = scatterCase(r, "prod");
        for (Arg &arg : c.args)
          if (arg.parameter)
            for (double &v : arg.value.values())
              if (r.integer(0, 2) == 0)
                v = 0;
        return c;
      },
      /*count=*/24);
}

TEST(NNGradient, Dropout) {
  trials([](Random &r) {
    Shape s = r.shape(r.integer(1, 3), 1, 6);
    HostTensor counter(DType::i64, {}, static_cast<double>(r.integer(0, 1000)));
    Case c;
    c.args = {{"x", r.uniform(s, -2, 2)}, {"step", counter, /*parameter=*/false}};
    c.body = "  %y = kiln.dropout %x, %step, rate = " +
             std::to_string(r.uniform(0.1, 0.6)) +
             ", seed = " + std::to_string(r.integer(0, 1 << 20)) + " : " +
             tensorType(s);
    c.resultShape = s;
    return c;
  });
}

TEST(NNGradient, SoftmaxCrossEntropy) {
  trials([](Random &r) {
    int64_t n = r.integer(1, 5), classes = r.integer(1, 6);
    DType labelType = r.coin() ? DType::i32 : DType::i64;
    Case c;
    c.args = {{"logits", r.uniform({n, classes}, -3, 3)},
              {"labels", r.indices({n}, classes, labelType), /*parameter=*/false}};
    c.body = "  %y = kiln.softmax_cross_entropy %logits, %labels : (" +
             tensorType({n, classes}) + ", " +
             tensorType({n}, dtypeName(labelType)) + ") -> " + tensorType({n});
    c.resultShape = {n};
    return c;
  });
}

TEST(NNGradient, SmallModel) {
  // A one-layer classifier end to end: dot_general, broadcast bias, gelu,
  // layer_norm, softmax_cross_entropy and a mean, every parameter checked.
  trials([](Random &r) {
    // layer_norm over two features gives +-1 whatever its input, which would
    // starve the earlier parameters of gradient: use three or more.
    int64_t n = r.integer(1, 4), in = r.integer(1, 4), out = r.integer(3, 5);
    Case c;
    c.args = {{"x", r.uniform({n, in}, -1, 1), /*parameter=*/false},
              {"w", r.uniform({in, out}, -1, 1)},
              {"b", r.uniform({out}, -1, 1)},
              {"g", r.uniform({out}, 0.5, 1.5)},
              {"beta", r.uniform({out}, -1, 1)},
              {"labels", r.indices({n}, out), /*parameter=*/false}};
    std::string h = tensorType({n, out});
    c.body =
        "  %d = kiln.dot_general %x, %w, batch = [] x [], contract = [1] x [0] : (" +
        tensorType({n, in}) + ", " + tensorType({in, out}) + ") -> " + h +
        "\n  %bb = kiln.broadcast_in_dim %b, dims = [1] : " + tensorType({out}) +
        " -> " + h + "\n  %s = kiln.add %d, %bb : " + h +
        "\n  %a = kiln.gelu tanh, %s : " + h +
        "\n  %ln = kiln.layer_norm %a, %g, %beta, axis = 1, epsilon = 1.0e-05 : " +
        h + ", " + tensorType({out}) +
        "\n  %l = kiln.softmax_cross_entropy %ln, %labels : (" + h + ", " +
        tensorType({n}, "i32") + ") -> " + tensorType({n}) +
        "\n  %y = kiln.reduce mean %l, dims = [0] : " + tensorType({n}) +
        " -> tensor<f64>";
    c.resultShape = {};
    return c;
  });
}

// attention's out in q, k and v, through kiln.attention_grad; lse is left
// unused (no gradient may flow into it).
Case attention(Random &r, bool causal) {
  int64_t b = r.integer(1, 2), h = r.integer(1, 2), tq = r.integer(1, 4),
          tk = r.integer(1, 4), d = r.integer(1, 3), dv = r.integer(1, 3);
  if (causal && tq == 1)
    tq = 3; // more than one visible key somewhere
  double scale = r.uniform(0.3, 1.2);
  Shape qs = {b, h, tq, d}, ks = {b, h, tk, d}, vs = {b, h, tk, dv},
        os = {b, h, tq, dv}, ls = {b, h, tq};
  Case c;
  c.args = {{"q", r.uniform(qs, -1.5, 1.5)},
            {"k", r.uniform(ks, -1.5, 1.5)},
            {"v", r.uniform(vs, -1.5, 1.5)}};
  c.body = "  %y, %lse = kiln.attention %q, %k, %v {scale = " +
           std::to_string(scale) + " : f64, causal = " +
           (causal ? "true" : "false") + "} : (" + tensorType(qs) + ", " +
           tensorType(ks) + ", " + tensorType(vs) + ") -> (" + tensorType(os) +
           ", " + tensorType(ls) + ")";
  c.resultShape = os;
  return c;
}

TEST(NNGradient, Attention) {
  trials([](Random &r) { return attention(r, /*causal=*/false); }, 4);
}

TEST(NNGradient, CausalAttention) {
  trials([](Random &r) { return attention(r, /*causal=*/true); }, 4);
}

} // namespace
} // namespace kiln::gradtest
