//===- AttentionText.h - kiln.attention test functions as text ---*- C++ -*-===//
//
// What the tests of kiln.attention's reference semantics
// (reference/AttentionTest.cpp) and of its decomposition
// (passes/DecomposeAttentionTest.cpp) share: the shapes of a case, the
// function @f that runs kiln.attention then kiln.attention_grad of its
// results and returns all five (lse in f32, f64 for f64), random operands
// rounded to their type, and one unit in the last place of a value.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TESTS_UNIT_ATTENTIONTEXT_H
#define KILN_TESTS_UNIT_ATTENTIONTEXT_H

#include "ir/HostTensor.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace kiln::test {

// Batch, heads, query and key lengths, head dims of Q/K and of V.
struct AttentionDims {
  int64_t b, h, tq, tk, d, dv;
};

inline std::string tensorType(std::vector<int64_t> shape, const char *element) {
  std::ostringstream os;
  os << "tensor<";
  for (int64_t s : shape)
    os << s << "x";
  os << element << ">";
  return os.str();
}

// One unit in the last place of |x| in |dtype| (subnormals included).
inline double ulp(DType dtype, double x) {
  int mantissa = dtype == DType::f64    ? 52
                 : dtype == DType::f32  ? 23
                 : dtype == DType::f16  ? 10
                                        : 7; // bf16
  int minExponent = dtype == DType::f64   ? -1022
                    : dtype == DType::f16 ? -14
                                          : -126; // f32, bf16
  int exponent = x == 0 ? minExponent : std::max(std::ilogb(x), minExponent);
  return std::ldexp(1.0, exponent - mantissa);
}

// The operand types of a case (lse in f32, f64 for f64) and the attribute
// dictionary both ops take.
struct AttentionText {
  std::string tq, tk, tv, to, tl, attrs;

  AttentionText(const AttentionDims &n, const char *element, double scale,
                bool causal)
      : tq(tensorType({n.b, n.h, n.tq, n.d}, element)),
        tk(tensorType({n.b, n.h, n.tk, n.d}, element)),
        tv(tensorType({n.b, n.h, n.tk, n.dv}, element)),
        to(tensorType({n.b, n.h, n.tq, n.dv}, element)),
        tl(tensorType({n.b, n.h, n.tq},
                      std::string(element) == "f64" ? "f64" : "f32")) {
    std::ostringstream os;
    os.precision(17);
    os << "{scale = " << std::scientific << scale
       << " : f64, causal = " << (causal ? "true" : "false") << "}";
    attrs = os.str();
  }

  // kiln.attention_grad of %q, %k, %v, %o, %l, %g into %dq, %dk, %dv.
  std::string grad() const {
    return "  %dq, %dk, %dv = kiln.attention_grad %q, %k, %v, %o, %l, %g " +
           attrs + " : (" + tq + ", " + tk + ", " + tv + ", " + to + ", " + tl +
           ", " + to + ") -> (" + tq + ", " + tk + ", " + tv + ")\n";
  }
};

// func.func @f(%q, %k, %v, %g) -> (out, lse, dq, dk, dv): kiln.attention
// of %q, %k, %v, then kiln.attention_grad with %g as the output's gradient.
inline std::string attentionFunction(const AttentionDims &n, const char *element,
                                     double scale, bool causal) {
  AttentionText t(n, element, scale, causal);
  return "func.func @f(%q: " + t.tq + ", %k: " + t.tk + ", %v: " + t.tv +
         ", %g: " + t.to + ") -> (" + t.to + ", " + t.tl + ", " + t.tq + ", " +
         t.tk + ", " + t.tv + ") {\n  %o, %l = kiln.attention %q, %k, %v " +
         t.attrs + " : (" + t.tq + ", " + t.tk + ", " + t.tv + ") -> (" + t.to +
         ", " + t.tl + ")\n" + t.grad() +
         "  return %o, %l, %dq, %dk, %dv : " + t.to + ", " + t.tl + ", " +
         t.tq + ", " + t.tk + ", " + t.tv + "\n}\n";
}

// func.func @grad(%q, %k, %v, %o, %l, %g) -> (dq, dk, dv): kiln.attention_grad
// alone, so that two versions of it can run on the same forward results.
inline std::string attentionGradFunction(const AttentionDims &n,
                                         const char *element, double scale,
                                         bool causal) {
  AttentionText t(n, element, scale, causal);
  return "func.func @grad(%q: " + t.tq + ", %k: " + t.tk + ", %v: " + t.tv +
         ", %o: " + t.to + ", %l: " + t.tl + ", %g: " + t.to + ") -> (" + t.tq +
         ", " + t.tk + ", " + t.tv + ") {\n" + t.grad() +
         "  return %dq, %dk, %dv : " + t.tq + ", " + t.tk + ", " + t.tv +
         "\n}\n";
}

// A tensor of |shape| with values uniform on [lo, hi), rounded to |dtype|.
inline HostTensor randomTensor(std::mt19937_64 &engine, DType dtype,
                               std::vector<int64_t> shape, double lo, double hi) {
  std::uniform_real_distribution<double> dist(lo, hi);
  HostTensor t(dtype, shape);
  for (double &x : t.values())
    x = roundTo(dtype, dist(engine));
  return t;
}

} // namespace kiln::test

#endif // KILN_TESTS_UNIT_ATTENTIONTEXT_H
