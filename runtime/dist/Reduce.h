//===- Reduce.h - element-wise reductions shared by the communicators -*- C++ -*-===//
//
// The element-wise combine of two buffers that every communicator's
// reductions use, so that Gloo's ring, the in-process communicator
// (LocalCommunicator.h) and any other produce the same bits for the same
// order of operands: floats combined in their own precision, f16 and bf16
// in f32 and rounded to nearest even once per combine, NaN winning max and
// min (as in the interpreter's reductions), integers wrapping. Mean is a
// sum followed by divideBy (integers truncate). Header-only: the core
// runtime and KilnRuntimeDist both use it.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_DIST_REDUCE_H
#define KILN_RUNTIME_DIST_REDUCE_H

#include "runtime/Half.h"
#include "runtime/package/Package.h"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace kiln::runtime::dist {

inline const char *reduceName(PkgReduceKind op) {
  switch (op) {
  case PkgReduceKind::Sum: return "sum";
  case PkgReduceKind::Max: return "max";
  case PkgReduceKind::Min: return "min";
  case PkgReduceKind::Mean: return "mean";
  }
  return "unknown";
}

// out[i] = a[i] (op) b[i] for n elements; |out| may alias |a| or |b|.
using ReduceFn = void (*)(void *out, const void *a, const void *b, size_t n);

namespace detail {

template <typename T> T combine(PkgReduceKind op, T a, T b) {
  if constexpr (std::is_floating_point_v<T>)
    if (std::isnan(a) || std::isnan(b))
      return op == PkgReduceKind::Max || op == PkgReduceKind::Min ? (std::isnan(a) ? a : b)
                                                                  : a + b;
  switch (op) {
  case PkgReduceKind::Max: return a < b ? b : a;
  case PkgReduceKind::Min: return b < a ? b : a;
  default: return static_cast<T>(a + b); // Sum, and Mean's sum
  }
}

template <typename T, PkgReduceKind Op>
void reduceNative(void *out, const void *a, const void *b, size_t n) {
  T *o = static_cast<T *>(out);
  const T *x = static_cast<const T *>(a), *y = static_cast<const T *>(b);
  for (size_t i = 0; i < n; ++i)
    o[i] = combine<T>(Op, x[i], y[i]);
}

template <float (*Load)(uint16_t), uint16_t (*Store)(float), PkgReduceKind Op>
void reduceHalf(void *out, const void *a, const void *b, size_t n) {
  uint16_t *o = static_cast<uint16_t *>(out);
  const uint16_t *x = static_cast<const uint16_t *>(a),
                 *y = static_cast<const uint16_t *>(b);
  for (size_t i = 0; i < n; ++i)
    o[i] = Store(combine<float>(Op, Load(x[i]), Load(y[i])));
}

template <PkgReduceKind Op> ReduceFn reduceFor(PkgDType dtype) {
  switch (dtype) {
  case PkgDType::F64: return reduceNative<double, Op>;
  case PkgDType::F32: return reduceNative<float, Op>;
  case PkgDType::F16: return reduceHalf<f16ToFloat, floatToF16, Op>;
  case PkgDType::BF16: return reduceHalf<bf16ToFloat, floatToBf16, Op>;
  case PkgDType::I64: return reduceNative<int64_t, Op>;
  case PkgDType::I32: return reduceNative<int32_t, Op>;
  case PkgDType::I8: return reduceNative<int8_t, Op>;
  case PkgDType::I1: return nullptr;
  }
  return nullptr;
}

} // namespace detail

// The combine for |dtype| and |op| (Mean: the sum); null for i1.
inline ReduceFn reduceFunction(PkgDType dtype, PkgReduceKind op) {
  switch (op) {
  case PkgReduceKind::Max: return detail::reduceFor<PkgReduceKind::Max>(dtype);
  case PkgReduceKind::Min: return detail::reduceFor<PkgReduceKind::Min>(dtype);
  case PkgReduceKind::Sum:
  case PkgReduceKind::Mean: return detail::reduceFor<PkgReduceKind::Sum>(dtype);
  }
  return nullptr;
}

// Mean's division by the world size, in place (integers truncate).
inline void divideBy(PkgDType dtype, void *data, size_t n, int world) {
  auto each = [&](auto *p) {
    for (size_t i = 0; i < n; ++i)
      p[i] = static_cast<std::remove_reference_t<decltype(p[i])>>(p[i] / world);
  };
  switch (dtype) {
  case PkgDType::F64: return each(static_cast<double *>(data));
  case PkgDType::F32: return each(static_cast<float *>(data));
  case PkgDType::I64: return each(static_cast<int64_t *>(data));
  case PkgDType::I32: return each(static_cast<int32_t *>(data));
  case PkgDType::I8: return each(static_cast<int8_t *>(data));
  case PkgDType::F16:
  case PkgDType::BF16: {
    uint16_t *p = static_cast<uint16_t *>(data);
    bool f16 = dtype == PkgDType::F16;
    for (size_t i = 0; i < n; ++i) {
      float v = (f16 ? f16ToFloat(p[i]) : bf16ToFloat(p[i])) / world;
      p[i] = f16 ? floatToF16(v) : floatToBf16(v);
    }
    return;
  }
  case PkgDType::I1: return;
  }
}

} // namespace kiln::runtime::dist

#endif // KILN_RUNTIME_DIST_REDUCE_H
