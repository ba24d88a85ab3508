//===- GradientCheck.h - autodiff against finite differences -----*- C++ -*-===//
//
// The harness behind the per-op gradient tests. A case is one op (or a few
// ops) applied to random arguments; the harness builds
//   f(params) = sum(op(params...) * w)
// with a random weight tensor w, runs kiln-autodiff, evaluates the gradients
// with the reference interpreter and compares a random sample of their
// elements with central finite differences of f, in f64.
//
// Finite differences: central differences at steps h and h/2 combined by
// Richardson extrapolation ((4 D(h/2) - D(h)) / 3, error O(h^4)), with h a
// power of two near 1e-4 * max(1, |x|). Each difference is taken per output
// element before the weighted sum, so elements the perturbation does not
// touch cancel exactly and the rounding error stays near 1e-11 absolute.
// The tests assert |autodiff - fd| / max(|autodiff|, |fd|, 1e-4) < 1e-6:
// relative for ordinary elements, absolute (1e-10) for tiny ones, a margin
// over the rounding noise. Cases keep inputs further than h from kinks and
// ties.
//
// Each test draws a fresh seed, printed on failure; KILN_GRAD_SEED=<n>
// reruns a failure.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TESTS_UNIT_GRADIENTS_GRADIENTCHECK_H
#define KILN_TESTS_UNIT_GRADIENTS_GRADIENTCHECK_H

#include "ir/HostTensor.h"

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace kiln::gradtest {

using Shape = std::vector<int64_t>;

// One argument of the checked function, bound to %<name>.
struct Arg {
  std::string name;
  HostTensor value;
  bool parameter = true; // differentiated (else an input: indices, labels...)
};

struct Case {
  std::vector<Arg> args;
  // Ops computing %y from the arguments (one per line).
  std::string body;
  // The shape of %y, an f64 tensor.
  Shape resultShape;
  // The gradient must be exactly zero (stop_gradient, comparisons), and is
  // not compared with finite differences.
  bool expectZeroGradient = false;
};

// Random values and shapes for the cases.
class Random {
public:
  explicit Random(uint64_t seed) : engine_(seed) {}

  int64_t integer(int64_t lo, int64_t hi); // inclusive
  double uniform(double lo, double hi);
  bool coin() { return integer(0, 1) == 1; }
  Shape shape(int64_t rank, int64_t lo = 1, int64_t hi = 4);
  // A random subset of [0, n) in increasing order, of size in [lo, hi].
  std::vector<int64_t> subset(int64_t n, int64_t lo, int64_t hi);
  std::vector<int64_t> permutation(int64_t n);

  HostTensor uniform(const Shape &shape, double lo, double hi,
                     DType dtype = DType::f64);
  // |x| in [lo, hi] with a random sign: away from kinks at zero.
  HostTensor awayFromZero(const Shape &shape, double lo, double hi);
  // Pairwise distinct values at least |gap| apart (a shuffled ladder with
  // jitter): no ties for max, min, argmax or pooling.
  HostTensor distinct(const Shape &shape, double gap = 0.1);
  // Integers in [0, bound).
  HostTensor indices(const Shape &shape, int64_t bound, DType dtype = DType::i32);
  HostTensor bools(const Shape &shape);

  std::mt19937_64 &engine() { return engine_; }

private:
  std::mt19937_64 engine_;
};

// "tensor<2x3xf64>" for |shape| and |element|.
std::string tensorType(const Shape &shape, const std::string &element = "f64");
std::string tensorType(const HostTensor &tensor);
// "[1, 2, 3]".
std::string list(const std::vector<int64_t> &values);

// A fresh seed (or KILN_GRAD_SEED) for one test.
uint64_t testSeed();

// Runs the check; reports failures through GoogleTest.
void check(const Case &c, Random &random);

// Checks |count| cases drawn by |make| from one fresh seed, printed (with
// how to rerun it) on failure.
void trials(const std::function<Case(Random &)> &make, int count = 3);

} // namespace kiln::gradtest

#endif // KILN_TESTS_UNIT_GRADIENTS_GRADIENTCHECK_H
