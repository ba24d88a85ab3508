//===- Blas.cpp - GEMMs and convolutions on the CPU through OpenBLAS ------===//
//
// dot_general: plan (which dims are batch, free and contracting; whether each
// operand can be read in place), pack what cannot, then one cblas call per
// batch element. Convolutions (those runtime/cpu/DirectConv does not take
// in f32): per image and group, im2col into a
// [C/groups * KH * KW, OH * OW] matrix, then a GEMM against the group's
// filter rows; the input gradient multiplies by the transposed filter and
// scatters back with col2im; the filter gradient accumulates over images.
// f16 and bf16 (mixed precision) run as f32 on widened copies of the
// operands, and the result is rounded once, as the reference interpreter
// rounds an op's result: the f32 GEMM accumulates in f32.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Blas.h"

#include "runtime/cpu/ConvGeometry.h"
#include "runtime/cpu/DirectConv.h"

#include "runtime/Half.h"

#include <cblas.h>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <dlfcn.h>
#include <strings.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <sstream>
#include <tuple>

namespace kiln::runtime::cpu {
namespace {

Status unsupportedDtype(const char *what, PkgDType dtype) {
  return Status::error(std::string(what) + ": element type must be f32, f64, f16 or bf16, but it is " +
                       pkgDTypeName(dtype));
}

std::string listStr(const std::vector<int64_t> &v) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < v.size(); ++i)
    os << (i ? ", " : "") << v[i];
  os << "]";
  return os.str();
}

int64_t product(const std::vector<int64_t> &v) {
  return std::accumulate(v.begin(), v.end(), int64_t(1), std::multiplies<int64_t>());
}

// cblas_?gemm, overloaded on the element type.
void cblasGemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
               const float *a, int64_t lda, const float *b, int64_t ldb,
               float beta, float *c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
void cblasGemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha,
               const double *a, int64_t lda, const double *b, int64_t ldb,
               double beta, double *c, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// C[m, n] = alpha * op(A) op(B) + beta * C with row-major, densely packed
// operands (ldc may exceed n). Handles the empty cases cblas rejects.
template <typename T>
void gemmOne(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha,
             const T *a, const T *b, T beta, T *c, int64_t ldc) {
  if (m == 0 || n == 0)
    return;
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        c[i * ldc + j] = beta == T(0) ? T(0) : beta * c[i * ldc + j];
    return;
  }
  int64_t lda = ta ? m : k, ldb = tb ? k : n;
  cblasGemm(ta, tb, m, n, k, alpha, a, std::max<int64_t>(lda, 1), b,
            std::max<int64_t>(ldb, 1), beta, c, std::max<int64_t>(ldc, 1));
}

template <typename T>
void stridedGemm(const GemmParams &p, const T *lhs, const T *rhs, T *out) {
  for (int64_t b = 0; b < p.batch; ++b)
    gemmOne<T>(p.transposeLhs, p.transposeRhs, p.m, p.n, p.k, T(p.alpha),
               lhs + b * p.m * p.k, rhs + b * p.k * p.n, T(p.beta), out + b * p.m * p.n, p.n);
}

// dst = src transposed by |perm| (dst dim i is src dim perm[i]).
template <typename T>
void transpose(const T *src, const std::vector<int64_t> &shape,
               const std::vector<int64_t> &perm, T *dst) {
  size_t rank = shape.size();
  int64_t total = product(shape);
  if (total == 0)
    return;
  std::vector<int64_t> srcStrides(rank, 1);
  for (size_t i = rank; i-- > 1;)
    srcStrides[i - 1] = srcStrides[i] * shape[i];
  std::vector<int64_t> dstShape(rank), stride(rank);
  for (size_t i = 0; i < rank; ++i) {
    dstShape[i] = shape[perm[i]];
    stride[i] = srcStrides[perm[i]];
  }
  if (rank == 0) {
    dst[0] = src[0];
    return;
  }
  // Walk dst in order; the innermost dimension is a strided read.
  std::vector<int64_t> index(rank, 0);
  int64_t inner = dstShape[rank - 1], innerStride = stride[rank - 1];
  int64_t offset = 0;
  for (int64_t done = 0; done < total; done += inner) {
    const T *s = src + offset;
    for (int64_t j = 0; j < inner; ++j)
      dst[done + j] = s[j * innerStride];
    for (size_t d = rank - 1; d-- > 0;) {
      offset += stride[d];
      if (++index[d] < dstShape[d])
        break;
      offset -= stride[d] * dstShape[d];
      index[d] = 0;
    }
  }
}

bool isIdentity(const std::vector<int64_t> &perm) {
  for (size_t i = 0; i < perm.size(); ++i)
    if (perm[i] != int64_t(i))
      return false;
  return true;
}

std::vector<int64_t> concat(std::initializer_list<const std::vector<int64_t> *> parts) {
  std::vector<int64_t> all;
  for (const std::vector<int64_t> *p : parts)
    all.insert(all.end(), p->begin(), p->end());
  return all;
}

// Checks that |dims| are distinct and within |rank|; marks them in |used|.
Status checkDims(const char *what, const std::vector<int64_t> &dims, size_t rank,
                 std::vector<bool> &used) {
  for (int64_t d : dims) {
    if (d < 0 || d >= int64_t(rank))
      return Status::error(std::string("gemm: ") + what + " " + listStr(dims) +
                           " must lie in [0, " + std::to_string(rank) + "), but has " +
                           std::to_string(d));
    if (used[d])
      return Status::error(std::string("gemm: dimension ") + std::to_string(d) + " of " +
                           what + " " + listStr(dims) + " is listed twice");
    used[d] = true;
  }
  return Status::ok();
}

template <typename T>
Status runGemm(const GemmSpec &spec, const GemmPlan &plan, const void *lhsData,
               const void *rhsData, void *outData) {
  const T *lhs = static_cast<const T *>(lhsData);
  const T *rhs = static_cast<const T *>(rhsData);
  std::vector<T> lhsPacked, rhsPacked;
  if (!plan.lhsPermutation.empty()) {
    lhsPacked.resize(product(spec.lhsShape));
    transpose(lhs, spec.lhsShape, plan.lhsPermutation, lhsPacked.data());
    lhs = lhsPacked.data();
  }
  if (!plan.rhsPermutation.empty()) {
    rhsPacked.resize(product(spec.rhsShape));
    transpose(rhs, spec.rhsShape, plan.rhsPermutation, rhsPacked.data());
    rhs = rhsPacked.data();
  }
  stridedGemm<T>(plan.params, lhs, rhs, static_cast<T *>(outData));
  return Status::ok();
}

//===----------------------------------------------------------------------===//
// Convolutions
//===----------------------------------------------------------------------===//

// The output columns x in [begin, end) whose input column
// x * sw - pl + j * dw, for kernel column |j|, lies inside the image's
// |g.w| columns; the others read padding. Found once per kernel column, so
// the loops over a row need no test per element (and, with stride 1, are a
// contiguous copy or sum that the compiler vectorizes): im2col was most of
// LeNet-5's first convolution (bench/RESULTS.md, thirty-fifth session).
struct ColumnRange {
  int64_t begin, end;
};
ColumnRange insideColumns(const ConvGeometry &g, int64_t j) {
  int64_t first = -g.pl + j * g.dw; // the input column of output column 0
  int64_t begin = std::clamp<int64_t>(ceilDiv(-first, g.sw), 0, g.ow);
  int64_t end = std::clamp<int64_t>(ceilDiv(g.w - first, g.sw), begin, g.ow);
  return {begin, end};
}

// col[(c, i, j), (y, x)] = image[c, y * sh - pt + i * dh, x * sw - pl + j * dw]
// for the |g.cg()| channels at |image|, zero outside the image; a row of
// |col| starts |ld| elements after the one before (0: colCols).
template <typename T>
void im2col(const ConvGeometry &g, const T *image, T *col, int64_t ld = 0) {
  int64_t cols = ld ? ld : g.colCols();
  for (int64_t c = 0; c < g.cg(); ++c)
    for (int64_t i = 0; i < g.kh; ++i)
      for (int64_t j = 0; j < g.kw; ++j) {
        T *row = col + ((c * g.kh + i) * g.kw + j) * cols;
        const T *plane = image + c * g.h * g.w;
        ColumnRange inside = insideColumns(g, j);
        int64_t first = -g.pl + j * g.dw;
        for (int64_t y = 0; y < g.oh; ++y) {
          int64_t iy = y * g.sh - g.pt + i * g.dh;
          T *dst = row + y * g.ow;
          if (iy < 0 || iy >= g.h) {
            std::fill(dst, dst + g.ow, T(0));
            continue;
          }
          // Only pointers into the image are formed: first + x * sw is one
          // of its columns for every x in the inside range.
          const T *src = plane + iy * g.w;
          std::fill(dst, dst + inside.begin, T(0));
          if (g.sw == 1)
            std::copy(src + (first + inside.begin), src + (first + inside.end),
                      dst + inside.begin);
          else
            for (int64_t x = inside.begin; x < inside.end; ++x)
              dst[x] = src[first + x * g.sw];
          std::fill(dst + inside.end, dst + g.ow, T(0));
        }
      }
}

// The adjoint of im2col: image[c, iy, ix] += col[(c, i, j), (y, x)].
template <typename T>
void col2im(const ConvGeometry &g, const T *col, T *image) {
  int64_t cols = g.colCols();
  for (int64_t c = 0; c < g.cg(); ++c)
    for (int64_t i = 0; i < g.kh; ++i)
      for (int64_t j = 0; j < g.kw; ++j) {
        const T *row = col + ((c * g.kh + i) * g.kw + j) * cols;
        T *plane = image + c * g.h * g.w;
        ColumnRange inside = insideColumns(g, j);
        int64_t first = -g.pl + j * g.dw;
        for (int64_t y = 0; y < g.oh; ++y) {
          int64_t iy = y * g.sh - g.pt + i * g.dh;
          if (iy < 0 || iy >= g.h)
            continue;
          T *dst = plane + iy * g.w;
          const T *src = row + y * g.ow;
          if (g.sw == 1) {
            T *out = dst + (first + inside.begin);
            const T *in = src + inside.begin;
            for (int64_t x = 0, n = inside.end - inside.begin; x < n; ++x)
              out[x] += in[x];
          } else {
            for (int64_t x = inside.begin; x < inside.end; ++x)
              dst[first + x * g.sw] += src[x];
          }
        }
      }
}

template <typename T>
void convForward(const ConvGeometry &g, const T *input, const T *filter, T *output) {
  std::vector<T> col(g.colRows() * g.colCols());
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t gr = 0; gr < g.groups; ++gr) {
      im2col(g, input + (n * g.c + gr * g.cg()) * g.h * g.w, col.data());
      gemmOne<T>(false, false, g.og(), g.colCols(), g.colRows(), T(1),
                 filter + gr * g.og() * g.colRows(), col.data(), T(0),
                 output + (n * g.o + gr * g.og()) * g.colCols(), g.colCols());
    }
}

template <typename T>
void convInputGrad(const ConvGeometry &g, const T *gradOutput, const T *filter,
                   T *gradInput) {
  std::fill(gradInput, gradInput + g.n * g.c * g.h * g.w, T(0));
  std::vector<T> col(g.colRows() * g.colCols());
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t gr = 0; gr < g.groups; ++gr) {
      // col = W_g^T [colRows, og] x dy [og, colCols]
      gemmOne<T>(true, false, g.colRows(), g.colCols(), g.og(), T(1),
                 filter + gr * g.og() * g.colRows(),
                 gradOutput + (n * g.o + gr * g.og()) * g.colCols(), T(0), col.data(),
                 g.colCols());
      col2im(g, col.data(), gradInput + (n * g.c + gr * g.cg()) * g.h * g.w);
    }
}

// The filter gradient's GEMM contracts over output positions, colCols()
// per image. When an image has few (LeNet-5's second convolution: 100),
// one GEMM per image is too short for OpenBLAS to run well, so the columns
// of several images are laid side by side (and their output gradients
// beside each other) until a GEMM contracts over at least this many;
// at most 16 images (bench/RESULTS.md, thirty-sixth session).
constexpr int64_t kFilterGradContraction = 512;

int64_t filterGradImagesPerGemm(const ConvGeometry &g) {
  if (g.colCols() == 0 || g.colCols() >= kFilterGradContraction)
    return 1;
  return std::clamp<int64_t>(ceilDiv(kFilterGradContraction, g.colCols()), 1,
                             std::min<int64_t>(16, std::max<int64_t>(g.n, 1)));
}

template <typename T>
void convFilterGrad(const ConvGeometry &g, const T *input, const T *gradOutput,
                    T *gradFilter) {
  std::fill(gradFilter, gradFilter + g.o * g.colRows(), T(0));
  // |chunk| images at a time: col [colRows, chunk * colCols] and, for more
  // than one, their output gradients gathered into dy [og, chunk * colCols];
  // image j's columns at j * colCols.
  int64_t chunk = filterGradImagesPerGemm(g);
  int64_t ld = chunk * g.colCols();
  std::vector<T> col(g.colRows() * ld), dy(chunk > 1 ? g.og() * ld : 0);
  for (int64_t first = 0; first < g.n; first += chunk) {
    int64_t images = std::min(chunk, g.n - first);
    for (int64_t gr = 0; gr < g.groups; ++gr) {
      for (int64_t j = 0; j < images; ++j)
        im2col(g, input + ((first + j) * g.c + gr * g.cg()) * g.h * g.w,
               col.data() + j * g.colCols(), ld);
      const T *dyBlock = gradOutput + (first * g.o + gr * g.og()) * g.colCols();
      if (chunk > 1) {
        for (int64_t j = 0; j < images; ++j)
          for (int64_t o = 0; o < g.og(); ++o) {
            const T *src =
                gradOutput + ((first + j) * g.o + gr * g.og() + o) * g.colCols();
            std::copy(src, src + g.colCols(), dy.data() + o * ld + j * g.colCols());
          }
        dyBlock = dy.data();
      }
      // dW_g [og, colRows] += dy [og, k] x col^T [k, colRows]; one image's
      // dy is its own rows (ld colCols). Nothing to add when k is 0.
      int64_t k = images * g.colCols();
      if (g.og() > 0 && g.colRows() > 0 && k > 0)
        cblasGemm(false, true, g.og(), g.colRows(), k, T(1), dyBlock,
                  chunk > 1 ? ld : g.colCols(), col.data(), ld, T(1),
                  gradFilter + gr * g.og() * g.colRows(), g.colRows());
    }
  }
}

} // namespace

//===----------------------------------------------------------------------===//
// dot_general
//===----------------------------------------------------------------------===//

StatusOr<GemmPlan> planGemm(const GemmSpec &spec) {
  if (spec.lhsBatch.size() != spec.rhsBatch.size())
    return Status::error("gemm: lhs has " + std::to_string(spec.lhsBatch.size()) +
                         " batching dimensions but rhs has " +
                         std::to_string(spec.rhsBatch.size()));
  if (spec.lhsContract.size() != spec.rhsContract.size())
    return Status::error("gemm: lhs has " + std::to_string(spec.lhsContract.size()) +
                         " contracting dimensions but rhs has " +
                         std::to_string(spec.rhsContract.size()));
  size_t lr = spec.lhsShape.size(), rr = spec.rhsShape.size();
  for (int64_t d : spec.lhsShape)
    if (d < 0)
      return Status::error("gemm: lhs shape " + listStr(spec.lhsShape) + " has a negative size");
  for (int64_t d : spec.rhsShape)
    if (d < 0)
      return Status::error("gemm: rhs shape " + listStr(spec.rhsShape) + " has a negative size");
  std::vector<bool> lhsUsed(lr, false), rhsUsed(rr, false);
  if (Status s = checkDims("lhs batching dimensions", spec.lhsBatch, lr, lhsUsed); !s.isOk())
    return s;
  if (Status s = checkDims("lhs contracting dimensions", spec.lhsContract, lr, lhsUsed); !s.isOk())
    return s;
  if (Status s = checkDims("rhs batching dimensions", spec.rhsBatch, rr, rhsUsed); !s.isOk())
    return s;
  if (Status s = checkDims("rhs contracting dimensions", spec.rhsContract, rr, rhsUsed); !s.isOk())
    return s;
  for (size_t i = 0; i < spec.lhsBatch.size(); ++i)
    if (spec.lhsShape[spec.lhsBatch[i]] != spec.rhsShape[spec.rhsBatch[i]])
      return Status::error("gemm: batching dimension pair " + std::to_string(i) +
                           " has sizes " + std::to_string(spec.lhsShape[spec.lhsBatch[i]]) +
                           " (lhs) and " + std::to_string(spec.rhsShape[spec.rhsBatch[i]]) +
                           " (rhs); they must match");
  for (size_t i = 0; i < spec.lhsContract.size(); ++i)
    if (spec.lhsShape[spec.lhsContract[i]] != spec.rhsShape[spec.rhsContract[i]])
      return Status::error("gemm: contracting dimension pair " + std::to_string(i) +
                           " has sizes " +
                           std::to_string(spec.lhsShape[spec.lhsContract[i]]) + " (lhs) and " +
                           std::to_string(spec.rhsShape[spec.rhsContract[i]]) +
                           " (rhs); they must match");

  std::vector<int64_t> lhsFree, rhsFree;
  for (size_t d = 0; d < lr; ++d)
    if (!lhsUsed[d])
      lhsFree.push_back(d);
  for (size_t d = 0; d < rr; ++d)
    if (!rhsUsed[d])
      rhsFree.push_back(d);

  // The pairs' order is free: try lhs memory order, then rhs memory order.
  std::vector<size_t> pairs(spec.lhsContract.size());
  std::iota(pairs.begin(), pairs.end(), 0);
  auto ordered = [&](bool byLhs) {
    std::vector<size_t> order = pairs;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return byLhs ? spec.lhsContract[a] < spec.lhsContract[b]
                   : spec.rhsContract[a] < spec.rhsContract[b];
    });
    std::vector<int64_t> l, r;
    for (size_t i : order) {
      l.push_back(spec.lhsContract[i]);
      r.push_back(spec.rhsContract[i]);
    }
    return std::make_pair(l, r);
  };

  GemmPlan best;
  int bestPacks = 3;
  for (bool byLhs : {true, false}) {
    auto [lc, rc] = ordered(byLhs);
    GemmPlan plan;
    int packs = 0;
    std::vector<int64_t> lhsRows = concat({&spec.lhsBatch, &lhsFree, &lc});
    std::vector<int64_t> lhsCols = concat({&spec.lhsBatch, &lc, &lhsFree});
    if (isIdentity(lhsRows)) {
      plan.params.transposeLhs = false;
    } else if (isIdentity(lhsCols)) {
      plan.params.transposeLhs = true;
    } else {
      plan.lhsPermutation = lhsRows;
      ++packs;
    }
    std::vector<int64_t> rhsCols = concat({&spec.rhsBatch, &rc, &rhsFree});
    std::vector<int64_t> rhsRows = concat({&spec.rhsBatch, &rhsFree, &rc});
    if (isIdentity(rhsCols)) {
      plan.params.transposeRhs = false;
    } else if (isIdentity(rhsRows)) {
      plan.params.transposeRhs = true;
    } else {
      plan.rhsPermutation = rhsCols;
      ++packs;
    }
    if (packs < bestPacks) {
      best = plan;
      bestPacks = packs;
    }
  }
  auto sizes = [](const std::vector<int64_t> &shape, const std::vector<int64_t> &dims) {
    int64_t p = 1;
    for (int64_t d : dims)
      p *= shape[d];
    return p;
  };
  best.params.batch = sizes(spec.lhsShape, spec.lhsBatch);
  best.params.m = sizes(spec.lhsShape, lhsFree);
  best.params.k = sizes(spec.lhsShape, spec.lhsContract);
  best.params.n = sizes(spec.rhsShape, rhsFree);
  best.params.alpha = spec.alpha;
  best.params.beta = spec.beta;
  return best;
}

bool isHalfDtype(PkgDType dtype) {
  return dtype == PkgDType::F16 || dtype == PkgDType::BF16;
}

void widenToF32(PkgDType dtype, const void *in, float *out, int64_t n) {
  const auto *h = static_cast<const uint16_t *>(in);
  if (dtype == PkgDType::BF16)
    for (int64_t i = 0; i < n; ++i)
      out[i] = bf16ToFloat(h[i]);
  else
    for (int64_t i = 0; i < n; ++i)
      out[i] = f16ToFloat(h[i]);
}

void narrowFromF32(PkgDType dtype, const float *in, void *out, int64_t n) {
  auto *h = static_cast<uint16_t *>(out);
  if (dtype == PkgDType::BF16)
    for (int64_t i = 0; i < n; ++i)
      h[i] = floatToBf16(in[i]);
  else
    for (int64_t i = 0; i < n; ++i)
      h[i] = floatToF16(in[i]);
}

namespace {

// Runs |call| on f32 copies of two half-precision operands of |lhsCount|
// and |rhsCount| elements into an f32 result of |outCount| elements (which
// starts as the widened |out| when |readOut|), then rounds it into |out|.
template <typename Call>
Status viaF32(PkgDType dtype, const void *lhs, int64_t lhsCount, const void *rhs,
              int64_t rhsCount, void *out, int64_t outCount, bool readOut,
              Call call) {
  std::vector<float> a(lhsCount), b(rhsCount), c(outCount, 0.0f);
  widenToF32(dtype, lhs, a.data(), lhsCount);
  widenToF32(dtype, rhs, b.data(), rhsCount);
  if (readOut)
    widenToF32(dtype, out, c.data(), outCount);
  if (Status s = call(a.data(), b.data(), c.data()); !s.isOk())
    return s;
  narrowFromF32(dtype, c.data(), out, outCount);
  return Status::ok();
}

} // namespace

Status gemm(const GemmSpec &spec, const void *lhs, const void *rhs, void *out) {
  if (isHalfDtype(spec.dtype)) {
    StatusOr<GemmPlan> plan = planGemm(spec);
    if (!plan.isOk())
      return plan.status();
    const GemmParams &p = plan.value().params;
    GemmSpec wide = spec;
    wide.dtype = PkgDType::F32;
    return viaF32(spec.dtype, lhs, product(spec.lhsShape), rhs,
                  product(spec.rhsShape), out, p.batch * p.m * p.n, spec.beta != 0,
                  [&](const float *a, const float *b, float *c) {
                    return gemm(wide, a, b, c);
                  });
  }
  if (spec.dtype != PkgDType::F32 && spec.dtype != PkgDType::F64)
    return unsupportedDtype("gemm", spec.dtype);
  StatusOr<GemmPlan> plan = planGemm(spec);
  if (!plan.isOk())
    return plan.status();
  if (spec.dtype == PkgDType::F32)
    return runGemm<float>(spec, plan.value(), lhs, rhs, out);
  return runGemm<double>(spec, plan.value(), lhs, rhs, out);
}

Status gemm(PkgDType dtype, const GemmParams &params, const void *lhs, const void *rhs,
            void *out) {
  if (isHalfDtype(dtype)) {
    const GemmParams &p = params;
    if (p.m < 0 || p.n < 0 || p.k < 0 || p.batch < 1)
      return gemm(PkgDType::F32, p, lhs, rhs, out); // reports the sizes
    return viaF32(dtype, lhs, p.batch * p.m * p.k, rhs, p.batch * p.k * p.n,
                  out, p.batch * p.m * p.n, p.beta != 0,
                  [&](const float *a, const float *b, float *c) {
                    return gemm(PkgDType::F32, p, a, b, c);
                  });
  }
  if (dtype != PkgDType::F32 && dtype != PkgDType::F64)
    return unsupportedDtype("gemm", dtype);
  if (params.m < 0 || params.n < 0 || params.k < 0 || params.batch < 1)
    return Status::error("gemm: m, n, k must be non-negative and batch positive, but they are " +
                         std::to_string(params.m) + ", " + std::to_string(params.n) + ", " +
                         std::to_string(params.k) + ", " + std::to_string(params.batch));
  if (dtype == PkgDType::F32)
    stridedGemm<float>(params, static_cast<const float *>(lhs),
                       static_cast<const float *>(rhs), static_cast<float *>(out));
  else
    stridedGemm<double>(params, static_cast<const double *>(lhs),
                        static_cast<const double *>(rhs), static_cast<double *>(out));
  return Status::ok();
}

//===----------------------------------------------------------------------===//
// Convolutions
//===----------------------------------------------------------------------===//


namespace {

// pkgCheckConvParams, its message after the call's name.
Status checkConv(const char *name, const ConvParams &params) {
  if (Status s = pkgCheckConvParams(params); !s.isOk())
    return Status::error(std::string(name) + ": " + s.message());
  return Status::ok();
}

} // namespace

Status conv2d(PkgDType dtype, const ConvParams &params, const void *input,
              const void *filter, void *output) {
  if (isHalfDtype(dtype)) {
    if (Status s = checkConv("conv2d", params); !s.isOk())
      return s;
    return viaF32(dtype, input, product(params.inputShape), filter, product(params.filterShape), output,
                  product(params.outputShape), false,
                  [&](const float *a, const float *b, float *c) {
                    return conv2d(PkgDType::F32, params, a, b, c);
                  });
  }
  if (dtype != PkgDType::F32 && dtype != PkgDType::F64)
    return unsupportedDtype("conv2d", dtype);
  if (Status s = checkConv("conv2d", params); !s.isOk())
    return s;
  if (dtype == PkgDType::F32 && directConvPreferred(ConvKind::Forward, params) &&
      directConv2d(params, static_cast<const float *>(input),
                   static_cast<const float *>(filter), static_cast<float *>(output)))
    return Status::ok();
  ConvGeometry g = convGeometry(params);
  if (dtype == PkgDType::F32)
    convForward<float>(g, static_cast<const float *>(input),
                       static_cast<const float *>(filter), static_cast<float *>(output));
  else
    convForward<double>(g, static_cast<const double *>(input),
                        static_cast<const double *>(filter), static_cast<double *>(output));
  return Status::ok();
}

Status conv2dInputGrad(PkgDType dtype, const ConvParams &params, const void *gradOutput,
                       const void *filter, void *gradInput) {
  if (isHalfDtype(dtype)) {
    if (Status s = checkConv("conv2d_input_grad", params); !s.isOk())
      return s;
    return viaF32(dtype, gradOutput, product(params.outputShape), filter, product(params.filterShape), gradInput,
                  product(params.inputShape), false,
                  [&](const float *a, const float *b, float *c) {
                    return conv2dInputGrad(PkgDType::F32, params, a, b, c);
                  });
  }
  if (dtype != PkgDType::F32 && dtype != PkgDType::F64)
    return unsupportedDtype("conv2d_input_grad", dtype);
  if (Status s = checkConv("conv2d_input_grad", params); !s.isOk())
    return s;
  if (dtype == PkgDType::F32 && directConvPreferred(ConvKind::InputGrad, params) &&
      directConv2dInputGrad(params, static_cast<const float *>(gradOutput),
                            static_cast<const float *>(filter),
                            static_cast<float *>(gradInput)))
    return Status::ok();
  ConvGeometry g = convGeometry(params);
  if (dtype == PkgDType::F32)
    convInputGrad<float>(g, static_cast<const float *>(gradOutput),
                         static_cast<const float *>(filter), static_cast<float *>(gradInput));
  else
    convInputGrad<double>(g, static_cast<const double *>(gradOutput),
                          static_cast<const double *>(filter),
                          static_cast<double *>(gradInput));
  return Status::ok();
}

Status conv2dFilterGrad(PkgDType dtype, const ConvParams &params, const void *input,
                        const void *gradOutput, void *gradFilter) {
  if (isHalfDtype(dtype)) {
    if (Status s = checkConv("conv2d_filter_grad", params); !s.isOk())
      return s;
    return viaF32(dtype, input, product(params.inputShape), gradOutput, product(params.outputShape), gradFilter,
                  product(params.filterShape), false,
                  [&](const float *a, const float *b, float *c) {
                    return conv2dFilterGrad(PkgDType::F32, params, a, b, c);
                  });
  }
  if (dtype != PkgDType::F32 && dtype != PkgDType::F64)
    return unsupportedDtype("conv2d_filter_grad", dtype);
  if (Status s = checkConv("conv2d_filter_grad", params); !s.isOk())
    return s;
  if (dtype == PkgDType::F32 && directConvPreferred(ConvKind::FilterGrad, params) &&
      directConv2dFilterGrad(params, static_cast<const float *>(input),
                             static_cast<const float *>(gradOutput),
                             static_cast<float *>(gradFilter)))
    return Status::ok();
  ConvGeometry g = convGeometry(params);
  if (dtype == PkgDType::F32)
    convFilterGrad<float>(g, static_cast<const float *>(input),
                          static_cast<const float *>(gradOutput),
                          static_cast<float *>(gradFilter));
  else
    convFilterGrad<double>(g, static_cast<const double *>(input),
                           static_cast<const double *>(gradOutput),
                           static_cast<double *>(gradFilter));
  return Status::ok();
}

void setBlasThreads(int threads) { openblas_set_num_threads(std::max(threads, 1)); }

int blasThreads() { return openblas_get_num_threads(); }

//===----------------------------------------------------------------------===//
// OpenBLAS's kernels
//===----------------------------------------------------------------------===//

X86Features x86Features() {
  X86Features f;
#if defined(__x86_64__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx))
    return f;
  bool osxsave = ecx & bit_OSXSAVE;
  f.fma = ecx & bit_FMA;
  f.ssse3 = ecx & bit_SSSE3;
  f.sse42 = ecx & bit_SSE4_2;
  f.popcnt = ecx & bit_POPCNT;
  f.cx16 = ecx & bit_CMPXCHG16B;
  f.avx = ecx & bit_AVX;
  f.f16c = ecx & bit_F16C;
  f.movbe = ecx & bit_MOVBE;
  unsigned eax8 = 0, ebx8 = 0, ecx8 = 0, edx8 = 0;
  if (__get_cpuid(0x80000001, &eax8, &ebx8, &ecx8, &edx8))
    f.lzcnt = ecx8 & bit_LZCNT;
  if (osxsave) {
    unsigned lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    // XMM and YMM (bits 1, 2); opmask, ZMM0-15 upper halves and ZMM16-31
    // (bits 5, 6, 7).
    f.ymmState = (lo & 0x6) == 0x6;
    f.zmmState = (lo & 0xe6) == 0xe6;
  }
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx))
    return f;
  f.avx2 = ebx & bit_AVX2;
  f.bmi1 = ebx & bit_BMI;
  f.bmi2 = ebx & bit_BMI2;
  f.avx512cd = ebx & bit_AVX512CD;
  f.avx512f = ebx & bit_AVX512F;
  f.avx512dq = ebx & bit_AVX512DQ;
  f.avx512bw = ebx & bit_AVX512BW;
  f.avx512vl = ebx & bit_AVX512VL;
#endif
  return f;
}

bool x86LevelSupported(const X86Features &f, const std::string &level) {
  bool v2 = f.ssse3 && f.sse42 && f.popcnt && f.cx16;
  bool v3 = v2 && f.ymmState && f.avx && f.avx2 && f.fma && f.bmi1 && f.bmi2 &&
            f.f16c && f.movbe && f.lzcnt;
  bool v4 = v3 && f.zmmState && f.avx512f && f.avx512bw && f.avx512cd &&
            f.avx512dq && f.avx512vl;
#if defined(__x86_64__)
  if (level == "x86-64")
    return true;
#endif
  return level == "x86-64-v2" ? v2
         : level == "x86-64-v3" ? v3
         : level == "x86-64-v4" ? v4
                                : false;
}

const char *openBlasCoreFor(const X86Features &f) {
  if (f.zmmState && f.avx512f && f.avx512dq && f.avx512bw && f.avx512vl)
    return "SkylakeX";
  if (f.ymmState && f.avx2 && f.fma)
    return "Haswell";
  return nullptr;
}

namespace {
const char *coreChosen = nullptr;

// Whether OpenBLAS's kernels |core| use the vector width |wanted| has.
bool coreMatches(const std::string &core, const char *wanted) {
  auto any = [&](std::initializer_list<const char *> names) {
    for (const char *n : names)
      if (strcasecmp(core.c_str(), n) == 0)
        return true;
    return false;
  };
  if (strcmp(wanted, "SkylakeX") == 0)
    return any({"SkylakeX", "Cooperlake", "SapphireRapids"});
  return any({"Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids"});
}

// OpenBLAS chose its kernels in its constructor, which runs before this
// program's; before any BLAS call, choose again where its choice lacks the
// CPU's vectors: set OPENBLAS_CORETYPE and rerun its selection
// (gotoblas_dynamic_quit, then _init, which reads the variable; a
// DYNAMIC_ARCH build exports both, others have neither and keep theirs).
// OpenBLAS's thread pool has run nothing yet, and its buffers are sized
// for every core it holds.
void chooseOpenBlasCore() {
  if (std::getenv("OPENBLAS_CORETYPE"))
    return;
  const char *wanted = openBlasCoreFor(x86Features());
  if (!wanted || coreMatches(openBlasCoreName(), wanted))
    return;
  auto quit = reinterpret_cast<void (*)()>(dlsym(RTLD_DEFAULT, "gotoblas_dynamic_quit"));
  auto init = reinterpret_cast<void (*)()>(dlsym(RTLD_DEFAULT, "gotoblas_dynamic_init"));
  if (!quit || !init || setenv("OPENBLAS_CORETYPE", wanted, /*overwrite=*/0) != 0)
    return;
  quit();
  init();
  coreChosen = wanted;
}

// Before main: this archive member is linked into every program that makes
// a library call on the CPU.
const bool kOpenBlasCoreChosen = (chooseOpenBlasCore(), true);
} // namespace

const char *openBlasCoreChosen() { return coreChosen; }

std::string openBlasCoreName() {
  const char *name = openblas_get_corename();
  return name ? name : "";
}

} // namespace kiln::runtime::cpu
