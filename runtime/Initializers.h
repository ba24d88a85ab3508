//===- Initializers.h - parameter initialization ------------------*- C++ -*-===//
//
// The distributions behind #kiln.init (ir/KilnAttrs.td), in plain C++: the
// runtime initializes parameters from a package with them, and the
// compiler's tools (gradcheck, the reference trainer) share them. Random
// numbers come from std::mt19937_64, whose sequence the C++ standard fixes,
// turned into uniforms and normals by the formulas below (not std::
// distributions, which differ between standard libraries), so a seed gives
// the same parameters everywhere.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_INITIALIZERS_H
#define KILN_RUNTIME_INITIALIZERS_H

#include <cstdint>
#include <vector>

namespace kiln::runtime {

enum class InitKind {
  zeros,
  ones,
  constant,
  normal,
  uniform,
  glorot_uniform,
  kaiming_normal
};

struct InitSpec {
  InitKind kind = InitKind::zeros;
  double value = 0.0; // constant value, or normal mean, or uniform centre
  double scale = 1.0; // normal std, uniform half-width, or glorot/kaiming gain
  uint64_t seed = 0;
};

// fan_in and fan_out of a parameter of |shape|: [in, out] for rank 2,
// OIHW filters (fan_in = I*H*W, fan_out = O*H*W) for rank 4, the size for
// rank 1, and (product of all but the last, last) otherwise.
void fans(const std::vector<int64_t> &shape, double &fanIn, double &fanOut);

// The values of a parameter of |shape| in row-major order.
std::vector<double> initialize(const InitSpec &spec, const std::vector<int64_t> &shape);

} // namespace kiln::runtime

#endif // KILN_RUNTIME_INITIALIZERS_H
