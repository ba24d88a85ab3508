//===- Linalg.cpp - reference semantics of contractions and windows -------===//
//
// dot_general, conv2d and its two gradients, max/avg pooling and their
// gradients, as ir/KilnOps.td describes them. All accumulate in double.
//
// dot_general packs both operands into contiguous [batch, free, contract]
// and [batch, contract, free] matrices first, then runs an i-k-j loop on
// contiguous rows, so a [128, 784] x [784, 512] product takes tens of
// milliseconds, not seconds. The three convolutions share one walk over
// every (input, filter, output) tap of the forward convolution and differ
// only in which of the three they accumulate into; the pooling ops share one
// walk over each window's in-bounds elements (padding never contributes: it
// is -infinity for max and zero for the count_include_pad average).
//
//===----------------------------------------------------------------------===//

#include "ir/KilnOps.h"
#include "ir/reference/Support.h"

#include <cmath>

using namespace mlir;

namespace kiln {
using namespace reference;

namespace {

// Copies |t| into a contiguous buffer whose dimensions are |t|'s in the
// order |order| (a permutation of its dimensions).
std::vector<double> packed(const HostTensor &t, ArrayRef<int64_t> order) {
  SmallVector<int64_t, 4> strides = stridesOf(t.shape());
  SmallVector<int64_t, 4> shape, readStrides;
  for (int64_t d : order) {
    shape.push_back(t.dim(d));
    readStrides.push_back(strides[d]);
  }
  std::vector<double> out(t.size());
  const double *in = t.values().data();
  forEachStrided(shape, 0, readStrides, 0, stridesOf(shape),
                 [&](int64_t src, int64_t dst) { out[dst] = in[src]; });
  return out;
}

// The dimensions of a rank-|rank| operand listed in neither |a| nor |b|, in
// increasing order.
SmallVector<int64_t, 4> freeDims(int64_t rank, ArrayRef<int64_t> a,
                                 ArrayRef<int64_t> b) {
  SmallVector<int64_t, 4> free;
  for (int64_t d = 0; d < rank; ++d)
    if (!llvm::is_contained(a, d) && !llvm::is_contained(b, d))
      free.push_back(d);
  return free;
}

int64_t product(const HostTensor &t, ArrayRef<int64_t> dims) {
  int64_t p = 1;
  for (int64_t d : dims)
    p *= t.dim(d);
  return p;
}

// The geometry of one conv2d: input [N, C, H, W], filter [O, C/groups, KH,
// KW], output [N, O, OH, OW].
struct ConvGeometry {
  int64_t n, c, h, w, o, cg, kh, kw, oh, ow;
  int64_t strideH, strideW, padTop, padLeft, dilH, dilW, groups;
};

ConvGeometry convGeometry(ArrayRef<int64_t> input, ArrayRef<int64_t> filter,
                          ArrayRef<int64_t> output, ArrayRef<int64_t> strides,
                          ArrayRef<int64_t> padding, ArrayRef<int64_t> dilation,
                          int64_t groups) {
  return ConvGeometry{input[0],   input[1],   input[2],  input[3],
                      filter[0],  filter[1],  filter[2], filter[3],
                      output[2],  output[3],  strides[0], strides[1],
                      padding[0], padding[2], dilation[0], dilation[1],
                      groups};
}

// Calls |fn(inputOffset, filterOffset, outputOffset)| for every product
// input * filter that the forward convolution adds into an output element.
template <typename Fn>
void forEachConvTap(const ConvGeometry &g, Fn fn) {
  int64_t outPerGroup = g.o / g.groups;
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t o = 0; o < g.o; ++o) {
      int64_t group = o / outPerGroup;
      for (int64_t cg = 0; cg < g.cg; ++cg) {
        int64_t c = group * g.cg + cg;
        for (int64_t kh = 0; kh < g.kh; ++kh)
          for (int64_t kw = 0; kw < g.kw; ++kw) {
            int64_t filterOffset = ((o * g.cg + cg) * g.kh + kh) * g.kw + kw;
            for (int64_t oh = 0; oh < g.oh; ++oh) {
              int64_t ih = oh * g.strideH - g.padTop + kh * g.dilH;
              if (ih < 0 || ih >= g.h)
                continue;
              int64_t inputRow = ((n * g.c + c) * g.h + ih) * g.w;
              int64_t outputRow = ((n * g.o + o) * g.oh + oh) * g.ow;
              for (int64_t ow = 0; ow < g.ow; ++ow) {
                int64_t iw = ow * g.strideW - g.padLeft + kw * g.dilW;
                if (iw < 0 || iw >= g.w)
                  continue;
                fn(inputRow + iw, filterOffset, outputRow + ow);
              }
            }
          }
      }
    }
}

// The geometry of one 2-D pooling: input [N, C, H, W], output [N, C, OH, OW].
struct PoolGeometry {
  int64_t planes, h, w, oh, ow, kh, kw, strideH, strideW, padTop, padLeft;
};

PoolGeometry poolGeometry(ArrayRef<int64_t> input, ArrayRef<int64_t> output,
                          ArrayRef<int64_t> window, ArrayRef<int64_t> strides,
                          ArrayRef<int64_t> padding) {
  return PoolGeometry{input[0] * input[1], input[2],   input[3],
                      output[2],           output[3],  window[0],
                      window[1],           strides[0], strides[1],
                      padding[0],          padding[2]};
}

// Calls |fn(outputOffset, inputOffset)| for every in-bounds input element of
// every window, windows in row-major output order and elements in row-major
// order within each window.
template <typename Fn>
void forEachWindowElement(const PoolGeometry &g, Fn fn) {
  for (int64_t p = 0; p < g.planes; ++p)
    for (int64_t oh = 0; oh < g.oh; ++oh)
      for (int64_t ow = 0; ow < g.ow; ++ow) {
        int64_t out = (p * g.oh + oh) * g.ow + ow;
        for (int64_t kh = 0; kh < g.kh; ++kh) {
          int64_t ih = oh * g.strideH - g.padTop + kh;
          if (ih < 0 || ih >= g.h)
            continue;
          for (int64_t kw = 0; kw < g.kw; ++kw) {
            int64_t iw = ow * g.strideW - g.padLeft + kw;
            if (iw < 0 || iw >= g.w)
              continue;
            fn(out, (p * g.h + ih) * g.w + iw);
          }
        }
      }
}

// For every window, the input offset of its maximum: the first one in
// row-major order on ties, the first NaN if there is one. Padding is
// -infinity and so never strictly wins; the shape rule keeps at least one
// in-bounds element in every window.
std::vector<int64_t> windowArgmax(const HostTensor &input, const PoolGeometry &g) {
  std::vector<int64_t> best(g.planes * g.oh * g.ow, -1);
  const double *in = input.values().data();
  forEachWindowElement(g, [&](int64_t out, int64_t offset) {
    int64_t &b = best[out];
    if (b < 0 || (!std::isnan(in[b]) && (std::isnan(in[offset]) || in[offset] > in[b])))
      b = offset;
  });
  return best;
}

} // namespace

LogicalResult DotGeneralOp::evaluate(ArrayRef<HostTensor> operands,
                                     SmallVectorImpl<HostTensor> &results) {
  if (failed(checkOperands(*this, operands)))
    return failure();
  FailureOr<HostTensor> result = makeResult(*this);
  if (failed(result))
    return failure();
  const HostTensor &lhs = operands[0], &rhs = operands[1];
  ArrayRef<int64_t> lb = getLhsBatchingDimensions(),
                    rb = getRhsBatchingDimensions(),
                    lc = getLhsContractingDimensions(),
                    rc = getRhsContractingDimensions();
  SmallVector<int64_t, 4> lf = freeDims(lhs.rank(), lb, lc);
  SmallVector<int64_t, 4> rf = freeDims(rhs.rank(), rb, rc);
  int64_t batch = product(lhs, lb), m = product(lhs, lf), k = product(lhs, lc),
          n = product(rhs, rf);

  // a is [batch, m, k] and b is [batch, k, n], both contiguous; the result's
  // dimension order (batch, lhs free, rhs free) is already [batch, m, n].
  SmallVector<int64_t, 8> lhsOrder(lb), rhsOrder(rb);
  lhsOrder.append(lf.begin(), lf.end());
  lhsOrder.append(lc.begin(), lc.end());
  rhsOrder.append(rc.begin(), rc.end());
  rhsOrder.append(rf.begin(), rf.end());
  std::vector<double> a = packed(lhs, lhsOrder), b = packed(rhs, rhsOrder);
  double *c = result->values().data();
  for (int64_t p = 0; p < batch; ++p)
    for (int64_t i = 0; i < m; ++i) {
      double *cRow = c + (p * m + i) * n;
      const double *aRow = a.data() + (p * m + i) * k;
      for (int64_t q = 0; q < k; ++q) {
        double av = aRow[q];
        const double *bRow = b.data() + (p * k + q) * n;
        for (int64_t j = 0; j < n; ++j)
          cRow[j] += av * bRow[j];
      }
    }
  results.push_back(std::move(*result));
  return success();
}

LogicalResult Conv2DOp::evaluate(ArrayRef<HostTensor> operands,
                                 SmallVectorImpl<HostTensor> &results) {
  if (failed(checkOperands(*this, operands)))
    return failure();
  FailureOr<HostTensor> result = makeResult(*this);
  if (failed(result))
    return failure();
  ConvGeometry g = convGeometry(operands[0].shape(), operands[1].shape(),
                                result->shape(), getStrides(), getPadding(),
                                getDilation(), getGroups());
  const double *x = operands[0].values().data(), *f = operands[1].values().data();
  double *y = result->values().data();
  forEachConvTap(g, [&](int64_t xi, int64_t fi, int64_t yi) { y[yi] += x[xi] * f[fi]; });
  results.push_back(std::move(*result));
  return success();
}

LogicalResult Conv2DInputGradOp::evaluate(ArrayRef<HostTensor> operands,
                                          SmallVectorImpl<HostTensor> &results) {
  if (failed(checkOperands(*this, operands)))
    return failure();
  FailureOr<HostTensor> result = makeResult(*this);
  if (failed(result))
    return failure();
  ConvGeometry g = convGeometry(result->shape(), operands[1].shape(),
                                operands[0].shape(), getStrides(), getPadding(),
                                getDilation(), getGroups());
  const double *dy = operands[0].values().data(), *f = operands[1].values().data();
  double *dx = result->values().data();
  forEachConvTap(g, [&](int64_t xi, int64_t fi, int64_t yi) { dx[xi] += dy[yi] * f[fi]; });
  results.push_back(std::move(*result));
  return success();
}

LogicalResult Conv2DFilterGradOp::evaluate(ArrayRef<HostTensor> operands,
                                           SmallVectorImpl<HostTensor> &results) {
  if (failed(checkOperands(*this, operands)))
    return failure();
  FailureOr<HostTensor> result = makeResult(*this);
  if (failed(result))
    return failure();
  ConvGeometry g = convGeometry(operands[0].shape(), result->shape(),
                                operands[1].shape(), getStrides(), getPadding(),
                                getDilation(), getGroups());
  const double *x = operands[0].values().data(), *dy = operands[1].values().data();
  double *df = result->values().data();
  forEachConvTap(g, [&](int64_t xi, int64_t fi, int64_t yi) { df[fi] += x[xi] * dy[yi]; });
  results.push_back(std::move(*result));
  return success();
}

LogicalResult MaxPool2DOp::evaluate(ArrayRef<HostTensor> operands,
                                    SmallVectorImpl<HostTensor> &results) {
  if (failed(checkOperands(*this, operands)))
    return failure();
  FailureOr<HostTensor> result = makeResult(*this);
  if (failed(result))
    return failure();
  PoolGeometry g = poolGeometry(operands[0].shape(), result->shape(),
                                getWindow(), getStrides(), getPadding());
  std::vector<int64_t> best = windowArgmax(operands[0], g);
  for (int64_t i = 0; i < result->size(); ++i)
    (*result)[i] = best[i] < 0 ? -INFINITY : operands[0][best[i]];
  results.push_back(std::move(*result));
  return success();
}

LogicalResult AvgPool2DOp::evaluate(ArrayRef<HostTensor> operands,
                                    SmallVectorImpl<HostTensor> &results) {
  if (failed(checkOperands(*this, operands)))
    return failure();
  FailureOr<HostTensor> result = makeResult(*this);
  if (failed(result))
    return failure();
  PoolGeometry g = poolGeometry(operands[0].shape(), result->shape(),
                                getWindow(), getStrides(), getPadding());
  const double *in = operands[0].values().data();
  double *out = result->values().data();
  forEachWindowElement(g, [&](int64_t o, int64_t i) { out[o] += in[i]; });
  double windowSize = static_cast<double>(g.kh * g.kw);
  for (double &v : result->values())
    v /= windowSize;
  results.push_back(std::move(*result));
  return success();
}

LogicalResult MaxPool2DGradOp::evaluate(ArrayRef<HostTensor> operands,
                                        SmallVectorImpl<HostTensor> &results) {
  if (failed(checkOperands(*this, operands)))
    return failure();
  FailureOr<HostTensor> result = makeResult(*this);
  if (failed(result))
    return failure();
  const HostTensor &input = operands[0], &dy = operands[1];
  PoolGeometry g = poolGeometry(input.shape(), dy.shape(), getWindow(),
                                getStrides(), getPadding());
  std::vector<int64_t> best = windowArgmax(input, g);
  for (int64_t i = 0; i < dy.size(); ++i)
    if (best[i] >= 0)
      (*result)[best[i]] += dy[i];
  results.push_back(std::move(*result));
  return success();
}

LogicalResult AvgPool2DGradOp::evaluate(ArrayRef<HostTensor> operands,
                                        SmallVectorImpl<HostTensor> &results) {
  if (failed(checkOperands(*this, operands)))
    return failure();
  FailureOr<HostTensor> result = makeResult(*this);
  if (failed(result))
    return failure();
  const HostTensor &dy = operands[0];
  PoolGeometry g = poolGeometry(result->shape(), dy.shape(), getWindow(),
                                getStrides(), getPadding());
  double windowSize = static_cast<double>(g.kh * g.kw);
  const double *in = dy.values().data();
  double *out = result->values().data();
  forEachWindowElement(g, [&](int64_t o, int64_t i) { out[i] += in[o] / windowSize; });
  results.push_back(std::move(*result));
  return success();
}

} // namespace kiln
