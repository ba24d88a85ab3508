//===- Initializers.cpp - parameter initialization ------------------------===//

#include "runtime/Initializers.h"

#include <cmath>
#include <random>

namespace kiln::runtime {
namespace {

// Uniform on [0, 1) from the top 53 bits.
double uniform01(std::mt19937_64 &rng) {
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

// Standard normal by Box-Muller (one value per pair of uniforms, so the
// sequence does not depend on how many values were drawn before).
double standardNormal(std::mt19937_64 &rng) {
  double u1 = uniform01(rng);
  double u2 = uniform01(rng);
  return std::sqrt(-2.0 * std::log1p(-u1)) * std::cos(2.0 * M_PI * u2);
}

} // namespace

void fans(const std::vector<int64_t> &shape, double &fanIn, double &fanOut) {
  if (shape.empty()) {
    fanIn = fanOut = 1;
  } else if (shape.size() == 1) {
    fanIn = fanOut = static_cast<double>(shape[0]);
  } else if (shape.size() == 2) {
    fanIn = static_cast<double>(shape[0]);
    fanOut = static_cast<double>(shape[1]);
  } else if (shape.size() == 4) {
    double receptive = static_cast<double>(shape[2] * shape[3]);
    fanIn = static_cast<double>(shape[1]) * receptive;
    fanOut = static_cast<double>(shape[0]) * receptive;
  } else {
    fanIn = 1;
    for (size_t i = 0; i + 1 < shape.size(); ++i)
      fanIn *= static_cast<double>(shape[i]);
    fanOut = static_cast<double>(shape.back());
  }
}

std::vector<double> initialize(const InitSpec &spec, const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  std::vector<double> out(n, 0.0);
  std::mt19937_64 rng(spec.seed);
  double fanIn, fanOut;
  fans(shape, fanIn, fanOut);
  switch (spec.kind) {
  case InitKind::zeros:
    break;
  case InitKind::ones:
    std::fill(out.begin(), out.end(), 1.0);
    break;
  case InitKind::constant:
    std::fill(out.begin(), out.end(), spec.value);
    break;
  case InitKind::normal:
    for (double &v : out)
      v = spec.value + spec.scale * standardNormal(rng);
    break;
  case InitKind::uniform:
    for (double &v : out)
      v = spec.value + spec.scale * (2.0 * uniform01(rng) - 1.0);
    break;
  case InitKind::glorot_uniform: {
    double limit = spec.scale * std::sqrt(6.0 / (fanIn + fanOut));
    for (double &v : out)
      v = limit * (2.0 * uniform01(rng) - 1.0);
    break;
  }
  case InitKind::kaiming_normal: {
    double std = spec.scale * std::sqrt(2.0 / fanIn);
    for (double &v : out)
      v = std * standardNormal(rng);
    break;
  }
  }
  return out;
}

} // namespace kiln::runtime
