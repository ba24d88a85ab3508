//===- Reduction.cpp - reference semantics of reductions ------------------===//
//
// kiln.reduce (sum, max, min, mean, prod) and kiln.argmax. Floating sums
// and products accumulate in double whatever the element type (the
// description asks for at least f32; the oracle takes the most exact
// choice) and are rounded once, when the interpreter rounds the result. max
// and min propagate NaN, as kiln.max and kiln.min do
// (arith.maximumf/minimumf). Integer means truncate toward zero, like
// integer division; integer products wrap in 64 bits, as the kernels' i64
// accumulators do, and the result keeps its type's low bits.
//
//===----------------------------------------------------------------------===//

#include "ir/KilnOps.h"
#include "ir/reference/Support.h"

#include <cmath>
#include <limits>

using namespace mlir;

namespace kiln {
using namespace reference;

LogicalResult ReduceOp::evaluate(ArrayRef<HostTensor> operands,
                                 SmallVectorImpl<HostTensor> &results) {
  if (failed(checkOperands(*this, operands)))
    return failure();
  FailureOr<HostTensor> result = makeResult(*this);
  if (failed(result))
    return failure();
  const HostTensor &operand = operands[0];
  ArrayRef<int64_t> dims = getDimensions();

  // Each operand dimension writes with the stride of the result dimension it
  // becomes, or 0 when it is reduced away.
  SmallVector<int64_t, 4> resultStrides = stridesOf(result->shape());
  SmallVector<int64_t, 4> writeStrides;
  int64_t count = 1;
  for (int64_t d = 0, r = 0; d < operand.rank(); ++d) {
    if (llvm::is_contained(dims, d)) {
      writeStrides.push_back(0);
      count *= operand.dim(d);
    } else {
      writeStrides.push_back(resultStrides[r++]);
    }
  }

  ReduceKind kind = getKind();
  constexpr double inf = std::numeric_limits<double>::infinity();
  double init = kind == ReduceKind::max    ? -inf
                : kind == ReduceKind::min  ? inf
                : kind == ReduceKind::prod ? 1.0
                                           : 0.0;
  std::vector<double> &acc = result->values();
  std::fill(acc.begin(), acc.end(), init);
  const double *in = operand.values().data();
  if (kind == ReduceKind::prod && !isFloat(result->dtype())) {
    std::vector<uint64_t> wrapped(acc.size(), 1);
    forEachStrided(
        operand.shape(), 0, stridesOf(operand.shape()), 0, writeStrides,
        [&](int64_t src, int64_t dst) { wrapped[dst] *= toWrapped(in[src]); });
    for (size_t i = 0; i < acc.size(); ++i)
      acc[i] = fromWrapped(result->dtype(), wrapped[i]);
    results.push_back(std::move(*result));
    return success();
  }
  auto reduceInto = [&](auto combine) {
    forEachStrided(operand.shape(), 0, stridesOf(operand.shape()), 0,
                   writeStrides, [&](int64_t src, int64_t dst) {
                     acc[dst] = combine(acc[dst], in[src]);
                   });
  };
  switch (kind) {
  case ReduceKind::sum:
  case ReduceKind::mean:
    reduceInto([](double a, double x) { return a + x; });
    break;
  case ReduceKind::prod:
    reduceInto([](double a, double x) { return a * x; });
    break;
  case ReduceKind::max:
    reduceInto([](double a, double x) {
      return std::isnan(a) || std::isnan(x) ? std::nan("") : std::max(a, x);
    });
    break;
  case ReduceKind::min:
    reduceInto([](double a, double x) {
      return std::isnan(a) || std::isnan(x) ? std::nan("") : std::min(a, x);
    });
    break;
  }
  if (kind == ReduceKind::mean) {
    // A mean over nothing is 0/0: NaN, as in NumPy.
    for (double &v : acc)
      v = v / static_cast<double>(count);
    if (!isFloat(result->dtype()))
      for (double &v : acc)
        v = std::isfinite(v) ? std::trunc(v) : 0.0;
  }
  results.push_back(std::move(*result));
  return success();
}

LogicalResult ArgmaxOp::evaluate(ArrayRef<HostTensor> operands,
                                 SmallVectorImpl<HostTensor> &results) {
  if (failed(checkOperands(*this, operands)))
    return failure();
  FailureOr<HostTensor> result = makeResult(*this);
  if (failed(result))
    return failure();
  const HostTensor &operand = operands[0];
  AroundDim split = splitAround(operand.shape(), getDimension());
  const double *in = operand.values().data();
  double *out = result->values().data();
  for (int64_t o = 0; o < split.outer; ++o) {
    for (int64_t i = 0; i < split.inner; ++i) {
      const double *line = in + o * split.size * split.inner + i;
      // The first maximum wins; the first NaN beats everything.
      int64_t best = 0;
      double bestValue = line[0];
      for (int64_t k = 1; k < split.size && !std::isnan(bestValue); ++k) {
        double v = line[k * split.inner];
        if (std::isnan(v) || v > bestValue) {
          best = k;
          bestValue = v;
        }
      }
      out[o * split.inner + i] = static_cast<double>(best);
    }
  }
  results.push_back(std::move(*result));
  return success();
}

} // namespace kiln
