//===- DirectConv.cpp - f32 convolutions without im2col on AVX-512 --------===//
//
// The phase planes, the offset tables and the three loops over them; the
// AVX-512 code is one template, tile<MR, NV, PackedA, ShiftedB>, compiled
// for avx512f through a target attribute (the rest of the runtime stays
// generic x86-64) and only called where directConvAvailable().
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/DirectConv.h"

#include "runtime/cpu/Blas.h"
#include "runtime/cpu/ConvGeometry.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace kiln::runtime::cpu {

#if defined(__x86_64__)
namespace {

#define KILN_AVX512 __attribute__((target("avx512f")))

//===----------------------------------------------------------------------===//
// Phase planes
//===----------------------------------------------------------------------===//

// The planes of one image's group of channels: channel c's phase (py, px)
// is plane (c * sh + py) * sw + px, hq rows of wq floats, holding input
// pixel (sh * yq + py - pt, sw * xq + px - pl) at [yq, xq] (zero outside
// the image). Output position (y, x) is column y * wq + x of the GEMM, and
// tap (c, i, j) reads it at offset(c, i, j) + y * wq + x: a pixel of row
// y + dh * i / sh and column x + dw * j / sw of phase plane
// (c, dh * i % sh, dw * j % sw), which is input pixel
// (sh * y + dh * i - pt, sw * x + dw * j - pl).
struct Planes {
  int64_t hq, wq, count; // rows, columns, planes
  int64_t columns;       // the GEMM's columns: oh * wq
  int64_t floats;        // all planes and a row of slack
};

Planes planesFor(const ConvGeometry &g) {
  Planes p;
  // Row y + dh * i / sh and column x + dw * j / sw, for every output
  // (y, x < ow) and tap, lie inside a plane.
  p.hq = g.oh + g.dh * (g.kh - 1) / g.sh;
  p.wq = g.ow + g.dw * (g.kw - 1) / g.sw;
  p.count = g.cg() * g.sh * g.sw;
  p.columns = g.oh * p.wq;
  // Dropped columns x in [ow, wq) of the last rows read up to
  // dw * (kw - 1) / sw floats past the last plane: a row of slack.
  p.floats = p.count * p.hq * p.wq + p.wq;
  return p;
}

// The im2col row of tap k = (c, i, j): its offset in the planes.
std::vector<int64_t> tapOffsets(const ConvGeometry &g, const Planes &p) {
  std::vector<int64_t> offsets(g.colRows());
  for (int64_t c = 0; c < g.cg(); ++c)
    for (int64_t i = 0; i < g.kh; ++i)
      for (int64_t j = 0; j < g.kw; ++j) {
        int64_t plane = (c * g.sh + g.dh * i % g.sh) * g.sw + g.dw * j % g.sw;
        offsets[(c * g.kh + i) * g.kw + j] = plane * p.hq * p.wq +
                                             g.dh * i / g.sh * p.wq +
                                             g.dw * j / g.sw;
      }
  return offsets;
}


// dst[0, n) = src[0, n), inline: the rows copied here are short (7 to 30
// floats in the zoo's models), where a call to memmove costs more than the copy.
KILN_AVX512 inline void copyRow(const float *src, float *dst, int64_t n) {
  for (; n >= 16; n -= 16, src += 16, dst += 16)
    _mm512_storeu_ps(dst, _mm512_loadu_ps(src));
  if (n > 0) {
    __mmask16 mask = static_cast<__mmask16>((1u << n) - 1);
    _mm512_mask_storeu_ps(dst, mask, _mm512_maskz_loadu_ps(mask, src));
  }
}

// dst[x] = src[2 x] for x in [0, n): one phase of a stride-2 row, 16 at a
// time from two loads and a permute (reading only src[0, 2 n - 1]).
KILN_AVX512 inline void copyEvenElements(const float *src, float *dst, int64_t n) {
  const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12,
                                        10, 8, 6, 4, 2, 0);
  for (; n > 0; n -= 16, src += 32, dst += 16) {
    int64_t inputs = std::min<int64_t>(32, 2 * n - 1);
    __mmask16 lo = static_cast<__mmask16>((1u << std::min<int64_t>(16, inputs)) - 1);
    __mmask16 hi = static_cast<__mmask16>(
        (1u << std::max<int64_t>(0, inputs - 16)) - 1);
    __m512 v = _mm512_permutex2var_ps(_mm512_maskz_loadu_ps(lo, src), even,
                                      _mm512_maskz_loadu_ps(hi, src + 16));
    __mmask16 out = static_cast<__mmask16>((1u << std::min<int64_t>(16, n)) - 1);
    _mm512_mask_storeu_ps(dst, out, v);
  }
}

// Whether some tap reads phase |phase| of a dimension with kernel size k,
// dilation d and stride s (a 1x1 convolution with stride 2 reads only
// phase 0 of each dimension).
bool phaseRead(int64_t phase, int64_t k, int64_t d, int64_t s) {
  for (int64_t i = 0; i < k; ++i)
    if (d * i % s == phase)
      return true;
  return false;
}

// Fills the planes that taps read (p.floats; the others are never written,
// so they keep the zeros the caller allocated) from the g.cg() channels at
// |image|.
KILN_AVX512 void buildPlanes(const ConvGeometry &g, const Planes &p, const float *image,
                             float *planes) {
  for (int64_t c = 0; c < g.cg(); ++c)
    for (int64_t py = 0; py < g.sh; ++py)
      for (int64_t px = 0; px < g.sw; ++px) {
        if (!phaseRead(py, g.kh, g.dh, g.sh) || !phaseRead(px, g.kw, g.dw, g.sw))
          continue;
        float *plane = planes + ((c * g.sh + py) * g.sw + px) * p.hq * p.wq;
        const float *channel = image + c * g.h * g.w;
        // Columns xq with 0 <= sw * xq + px - pl < w.
        int64_t first = px - g.pl;
        int64_t begin = std::clamp<int64_t>(ceilDiv(-first, g.sw), 0, p.wq);
        int64_t end = std::clamp<int64_t>(ceilDiv(g.w - first, g.sw), begin, p.wq);
        for (int64_t yq = 0; yq < p.hq; ++yq) {
          float *row = plane + yq * p.wq;
          int64_t iy = g.sh * yq + py - g.pt;
          if (iy < 0 || iy >= g.h) {
            std::fill(row, row + p.wq, 0.0f);
            continue;
          }
          const float *src = channel + iy * g.w;
          std::fill(row, row + begin, 0.0f);
          if (g.sw == 1)
            copyRow(src + first + begin, row + begin, end - begin);
          else if (g.sw == 2)
            copyEvenElements(src + 2 * begin + first, row + begin, end - begin);
          else
            for (int64_t xq = begin; xq < end; ++xq)
              row[xq] = src[g.sw * xq + first];
          std::fill(row + end, row + p.wq, 0.0f);
        }
      }
  std::fill(planes + p.count * p.hq * p.wq, planes + p.floats, 0.0f);
}

//===----------------------------------------------------------------------===//
// The kernel
//===----------------------------------------------------------------------===//

// c[m, 16 v + l] (+)= sum_k a_m(k) * b_k[16 v + l] for m < MR, v < NV, the
// last vector's lanes limited to |last|. a_m(k) is a[k * MR + m] (PackedA)
// or aRows[m][k]; b_k starts at b + bOff[k] (ShiftedB) or b + k * bStride.
// The MR x NV accumulators stay in registers (at most 24 of the 32).
template <int MR, int NV, bool PackedA, bool ShiftedB>
KILN_AVX512 void tile(int64_t kc, const float *a, const float *const *aRows,
                      const float *b, const int64_t *bOff, int64_t bStride,
                      uint16_t last, float *c, int64_t ldc, bool accumulate) {
  __m512 acc[MR][NV];
  for (int m = 0; m < MR; ++m)
    for (int v = 0; v < NV; ++v)
      acc[m][v] = _mm512_setzero_ps();
  const float *rows[MR];
  if constexpr (!PackedA)
    for (int m = 0; m < MR; ++m)
      rows[m] = aRows[m];
  for (int64_t k = 0; k < kc; ++k) {
    const float *bk = ShiftedB ? b + bOff[k] : b + k * bStride;
    __m512 bv[NV];
    for (int v = 0; v < NV; ++v)
      bv[v] = v == NV - 1 ? _mm512_maskz_loadu_ps(last, bk + 16 * v)
                          : _mm512_loadu_ps(bk + 16 * v);
    for (int m = 0; m < MR; ++m) {
      __m512 am = _mm512_set1_ps(PackedA ? a[k * MR + m] : rows[m][k]);
      for (int v = 0; v < NV; ++v)
        acc[m][v] = _mm512_fmadd_ps(am, bv[v], acc[m][v]);
    }
  }
  for (int m = 0; m < MR; ++m)
    for (int v = 0; v < NV; ++v) {
      __mmask16 mask = v == NV - 1 ? last : 0xffff;
      float *out = c + m * ldc + 16 * v;
      __m512 sum = acc[m][v];
      if (accumulate)
        sum = _mm512_add_ps(sum, _mm512_maskz_loadu_ps(mask, out));
      _mm512_mask_storeu_ps(out, mask, sum);
    }
}

using TileFn = void (*)(int64_t, const float *, const float *const *,
                        const float *, const int64_t *, int64_t, uint16_t,
                        float *, int64_t, bool);

constexpr int kMaxRows = 8;    // MR
constexpr int kMaxVectors = 3; // NV: 48 columns

template <bool PackedA, bool ShiftedB, int MR>
TileFn tileWithVectors(int nv) {
  switch (nv) {
  case 1: return tile<MR, 1, PackedA, ShiftedB>;
  case 2: return tile<MR, 2, PackedA, ShiftedB>;
  default: return tile<MR, 3, PackedA, ShiftedB>;
  }
}

template <bool PackedA, bool ShiftedB>
TileFn tileFor(int64_t mr, int64_t nv) {
  switch (mr) {
  case 1: return tileWithVectors<PackedA, ShiftedB, 1>(nv);
  case 2: return tileWithVectors<PackedA, ShiftedB, 2>(nv);
  case 3: return tileWithVectors<PackedA, ShiftedB, 3>(nv);
  case 4: return tileWithVectors<PackedA, ShiftedB, 4>(nv);
  case 5: return tileWithVectors<PackedA, ShiftedB, 5>(nv);
  case 6: return tileWithVectors<PackedA, ShiftedB, 6>(nv);
  case 7: return tileWithVectors<PackedA, ShiftedB, 7>(nv);
  default: return tileWithVectors<PackedA, ShiftedB, 8>(nv);
  }
}

// The vectors and last-vector lanes of |columns| (at most 48) columns.
struct Columns {
  int64_t vectors;
  uint16_t last;
};
Columns columnsOf(int64_t columns) {
  int64_t vectors = (columns + 15) / 16;
  int64_t lanes = columns - 16 * (vectors - 1);
  return {vectors, static_cast<uint16_t>((1u << lanes) - 1)};
}

// out[m, n] = sum_k A[m, k] planes[offsets[k] + n] for m < rows, n < N
// (out's rows N apart): A packed per tile of kMaxRows rows (tile t, rows
// [8t, 8t + mr), at t * 8 * K as [K][mr]), the planes' runs as the vector
// operand, 48 columns by 8 rows a tile.
void multiplyRows(int64_t rows, int64_t K, const float *packed,
                  const float *planes, const int64_t *offsets, int64_t N,
                  float *out) {
  for (int64_t n0 = 0; n0 < N; n0 += 16 * kMaxVectors) {
    Columns cols = columnsOf(std::min<int64_t>(16 * kMaxVectors, N - n0));
    for (int64_t m0 = 0; m0 < rows; m0 += kMaxRows) {
      int64_t mr = std::min<int64_t>(kMaxRows, rows - m0);
      tileFor<true, true>(mr, cols.vectors)(K, packed + m0 * K, nullptr,
                                             planes + n0, offsets, 0, cols.last,
                                             out + m0 * N + n0, N, false);
    }
  }
}

//===----------------------------------------------------------------------===//
// The three convolutions
//===----------------------------------------------------------------------===//

// out = conv(input, filter) for all of g's images.
KILN_AVX512 void forward(const ConvGeometry &g, const float *input, const float *filter, float *output) {
  Planes p = planesFor(g);
  std::vector<int64_t> offsets = tapOffsets(g, p);
  int64_t K = g.colRows(), og = g.og(), N = p.columns;
  // The group's filter rows packed per tile of up to 8: tile t (rows
  // [8t, 8t + mr)) at t * 8 * K, [K][mr].
  std::vector<float> packed(og * K);
  std::vector<float> planes(p.floats);
  // Where wq is ow the GEMM's columns are the output's.
  bool direct = p.wq == g.ow;
  std::vector<float> result(direct ? 0 : og * N);
  for (int64_t gr = 0; gr < g.groups; ++gr) {
    const float *w = filter + gr * og * K;
    for (int64_t o0 = 0; o0 < og; o0 += kMaxRows) {
      int64_t mr = std::min<int64_t>(kMaxRows, og - o0);
      for (int64_t k = 0; k < K; ++k)
        for (int64_t m = 0; m < mr; ++m)
          packed[o0 * K + k * mr + m] = w[(o0 + m) * K + k];
    }
    for (int64_t n = 0; n < g.n; ++n) {
      buildPlanes(g, p, input + (n * g.c + gr * g.cg()) * g.h * g.w, planes.data());
      float *out = output + (n * g.o + gr * og) * g.oh * g.ow;
      float *c = direct ? out : result.data();
      multiplyRows(og, K, packed.data(), planes.data(), offsets.data(), N, c);
      if (!direct)
        for (int64_t o = 0; o < og; ++o)
          for (int64_t y = 0; y < g.oh; ++y) {
            const float *src = result.data() + o * N + y * p.wq;
            copyRow(src, out + (o * g.oh + y) * g.ow, g.ow);
          }
    }
  }
}

// Transposes the 16 rows r[0..16) in place (r[l][x] becomes r[x][l]).
KILN_AVX512 void transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    r[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
    t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xdd);
    t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
    t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xdd);
  }
  for (int i = 0; i < 8; ++i) {
    r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd);
  }
}

// dyT[y * wq + x, o] = dy[o, y, x] for the g.og() channels at |dy|, zero
// for the dropped columns x in [ow, wq): 16 x 16 blocks transposed in
// registers (a scalar loop was a quarter of the filter gradient's time
// where the filter has few taps).
KILN_AVX512 void transposeOutputGrad(const ConvGeometry &g, const Planes &p, const float *dy,
                                     float *dyT) {
  int64_t og = g.og(), plane = g.oh * g.ow;
  __m512 r[16];
  for (int64_t y = 0; y < g.oh; ++y) {
    for (int64_t x0 = 0; x0 < g.ow; x0 += 16) {
      int64_t xs = std::min<int64_t>(16, g.ow - x0);
      __mmask16 xMask = static_cast<__mmask16>((1u << xs) - 1);
      for (int64_t o0 = 0; o0 < og; o0 += 16) {
        int64_t os = std::min<int64_t>(16, og - o0);
        __mmask16 oMask = static_cast<__mmask16>((1u << os) - 1);
        const float *src = dy + o0 * plane + y * g.ow + x0;
        for (int64_t l = 0; l < 16; ++l)
          r[l] = l < os ? _mm512_maskz_loadu_ps(xMask, src + l * plane)
                        : _mm512_setzero_ps();
        transpose16(r);
        float *dst = dyT + (y * p.wq + x0) * og + o0;
        for (int64_t x = 0; x < xs; ++x)
          _mm512_mask_storeu_ps(dst + x * og, oMask, r[x]);
      }
    }
    std::fill(dyT + (y * p.wq + g.ow) * og, dyT + (y + 1) * p.wq * og, 0.0f);
  }
}

// The input gradient of a strided convolution, one GEMM per stride phase
// of dx (a sub-pixel decomposition). Along one axis (stride s, dilation d,
// kernel k, padding p), dx row iy takes dy row y from tap i where
// s y = iy + p - d i. Rows with (iy + p) mod s = rho form a class; only the
// taps with d i mod s = rho reach it, each from dy row Q - a(i), where
// Q = (iy + p - rho) / s and a(i) = (d i - rho) / s. So a class of rows and
// columns is a stride-1 correlation of dy with those taps at offsets
// -a(i): the forward kernel over a zero-padded copy of dy, its result
// scattered to the class's pixels of dx.
struct PhaseClass {
  int64_t rho = 0, q0 = 0, q1 = -1; // Q in [q0, q1] (empty when q1 < q0)
  std::vector<int64_t> taps, shifts; // i and a(i)
};

struct PhaseAxis {
  std::vector<PhaseClass> classes;
  int64_t pad = 0;  // max over taps of d i / s: rows of zeros before dy
  int64_t base = 0; // the least q0 of a non-empty class
  int64_t extent = 0; // the padded copy's rows (or columns)
};

PhaseAxis phaseAxis(int64_t s, int64_t d, int64_t k, int64_t p, int64_t in) {
  PhaseAxis axis;
  int64_t qMax = 0;
  bool any = false;
  for (int64_t i = 0; i < k; ++i)
    axis.pad = std::max(axis.pad, d * i / s);
  for (int64_t rho = 0; rho < s; ++rho) {
    PhaseClass c;
    c.rho = rho;
    c.q0 = ceilDiv(p - rho, s);
    c.q1 = floorDiv(in - 1 + p - rho, s);
    for (int64_t i = 0; i < k; ++i)
      if (d * i % s == rho) {
        c.taps.push_back(i);
        c.shifts.push_back((d * i - rho) / s);
      }
    if (c.q1 >= c.q0) {
      axis.base = any ? std::min(axis.base, c.q0) : c.q0;
      qMax = any ? std::max(qMax, c.q1) : c.q1;
      any = true;
    }
    axis.classes.push_back(std::move(c));
  }
  // Row Q - a(i) of dy is row Q - a(i) - base + pad of the copy.
  axis.extent = any ? qMax - axis.base + axis.pad + 1 : 0;
  return axis;
}

KILN_AVX512 void inputGradStrided(const ConvGeometry &g, const float *gradOutput,
                                  const float *filter, float *gradInput) {
  int64_t og = g.og(), cg = g.cg(), taps = g.kh * g.kw;
  PhaseAxis ay = phaseAxis(g.sh, g.dh, g.kh, g.pt, g.h);
  PhaseAxis ax = phaseAxis(g.sw, g.dw, g.kw, g.pl, g.w);
  int64_t hq = ay.extent, wq = ax.extent;
  std::fill(gradInput, gradInput + g.n * g.c * g.h * g.w, 0.0f);
  if (hq == 0 || wq == 0)
    return;
  // dy's og channels, zero-padded: copy[o][r][t] = dy[o][r + base - pad]
  // [t + base - pad] (and a row of slack: dropped columns read past it).
  int64_t planeSize = hq * wq;
  std::vector<float> copy(og * planeSize + wq, 0.0f);
  struct Gemm {
    const PhaseClass *y, *x;
    std::vector<float> packed;   // [K][mr] per tile of 8 rows of dx's channels
    std::vector<int64_t> offsets; // per k = (o, tap i, tap j)
    int64_t k = 0, columns = 0;
  };
  std::vector<std::vector<Gemm>> gemms(g.groups);
  int64_t most = 0;
  for (int64_t gr = 0; gr < g.groups; ++gr)
    for (const PhaseClass &cy : ay.classes)
      for (const PhaseClass &cx : ax.classes) {
        if (cy.q1 < cy.q0 || cx.q1 < cx.q0 || cy.taps.empty() || cx.taps.empty())
          continue; // no pixels, or no tap reaches them (dx stays 0)
        Gemm m;
        m.y = &cy, m.x = &cx;
        m.k = og * cy.taps.size() * cx.taps.size();
        m.columns = (cy.q1 - cy.q0 + 1) * wq;
        most = std::max(most, cg * m.columns);
        for (int64_t o = 0; o < og; ++o)
          for (size_t ti = 0; ti < cy.taps.size(); ++ti)
            for (size_t tj = 0; tj < cx.taps.size(); ++tj)
              m.offsets.push_back(o * planeSize +
                                  (cy.q0 - ay.base + ay.pad - cy.shifts[ti]) * wq +
                                  (cx.q0 - ax.base + ax.pad - cx.shifts[tj]));
        m.packed.resize(cg * m.k);
        for (int64_t c0 = 0; c0 < cg; c0 += kMaxRows) {
          int64_t mr = std::min<int64_t>(kMaxRows, cg - c0);
          for (int64_t m0 = 0; m0 < mr; ++m0) {
            int64_t k = 0;
            for (int64_t o = 0; o < og; ++o)
              for (int64_t i : cy.taps)
                for (int64_t j : cx.taps)
                  m.packed[c0 * m.k + k++ * mr + m0] =
                      filter[((gr * og + o) * cg + c0 + m0) * taps + i * g.kw + j];
          }
        }
        gemms[gr].push_back(std::move(m));
      }
  std::vector<float> result(most);
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t gr = 0; gr < g.groups; ++gr) {
      const float *dy = gradOutput + (n * g.o + gr * og) * g.oh * g.ow;
      // Copy rows r with dy row r + base - pad in [0, oh); columns alike.
      int64_t first = ax.base - ax.pad; // the dy column of copy column 0
      int64_t begin = std::clamp<int64_t>(-first, 0, wq);
      int64_t end = std::clamp<int64_t>(g.ow - first, begin, wq);
      for (int64_t o = 0; o < og; ++o)
        for (int64_t r = 0; r < hq; ++r) {
          int64_t y = r + ay.base - ay.pad;
          if (y < 0 || y >= g.oh)
            continue; // zeros from the allocation, never written
          copyRow(dy + (o * g.oh + y) * g.ow + first + begin,
                  copy.data() + o * planeSize + r * wq + begin, end - begin);
        }
      float *dx = gradInput + (n * g.c + gr * cg) * g.h * g.w;
      for (const Gemm &m : gemms[gr]) {
        int64_t N = m.columns;
        multiplyRows(cg, m.k, m.packed.data(), copy.data(), m.offsets.data(), N,
                     result.data());
        // Scatter: column (Qy - q0) wq + (Qx - q0x) is pixel
        // (sh Qy + rho_y - pt, sw Qx + rho_x - pl).
        for (int64_t c = 0; c < cg; ++c)
          for (int64_t qy = m.y->q0; qy <= m.y->q1; ++qy) {
            int64_t iy = g.sh * qy + m.y->rho - g.pt;
            const float *src = result.data() + c * N + (qy - m.y->q0) * wq;
            float *row = dx + (c * g.h + iy) * g.w;
            for (int64_t qx = m.x->q0; qx <= m.x->q1; ++qx)
              row[g.sw * qx + m.x->rho - g.pl] = src[qx - m.x->q0];
          }
      }
    }
}

// gradFilter = sum over images of dy (x) planes, computed transposed:
// dW^T[k, o] += sum_n row_k[n] dy^T[n, o], the output gradient's O values
// the vector operand and the planes' rows broadcast.
void filterGrad(const ConvGeometry &g, const float *input, const float *gradOutput,
                float *gradFilter) {
  Planes p = planesFor(g);
  std::vector<int64_t> offsets = tapOffsets(g, p);
  int64_t K = g.colRows(), og = g.og(), N = p.columns;
  // Columns per pass: a pass's dy^T block (chunk x og floats) stays in L1
  // while every tap's rows stream past it.
  int64_t chunk = std::max<int64_t>(16, 6144 / std::max<int64_t>(og, 1));
  std::vector<float> planes(p.floats), dyT(N * og), wT(K * og);
  std::vector<const float *> rows(kMaxRows);
  for (int64_t gr = 0; gr < g.groups; ++gr) {
    std::fill(wT.begin(), wT.end(), 0.0f);
    for (int64_t n = 0; n < g.n; ++n) {
      buildPlanes(g, p, input + (n * g.c + gr * g.cg()) * g.h * g.w, planes.data());
      transposeOutputGrad(g, p, gradOutput + (n * g.o + gr * og) * g.oh * g.ow,
                          dyT.data());
      for (int64_t n0 = 0; n0 < N; n0 += chunk) {
        int64_t nc = std::min(chunk, N - n0);
        for (int64_t k0 = 0; k0 < K; k0 += kMaxRows) {
          int64_t mr = std::min<int64_t>(kMaxRows, K - k0);
          for (int64_t m = 0; m < mr; ++m)
            rows[m] = planes.data() + offsets[k0 + m] + n0;
          for (int64_t o0 = 0; o0 < og; o0 += 16 * kMaxVectors) {
            Columns cols = columnsOf(std::min<int64_t>(16 * kMaxVectors, og - o0));
            tileFor<false, false>(mr, cols.vectors)(
                nc, nullptr, rows.data(), dyT.data() + n0 * og + o0, nullptr, og,
                cols.last, wT.data() + k0 * og + o0, og, true);
          }
        }
      }
    }
    float *dw = gradFilter + gr * og * K;
    for (int64_t o = 0; o < og; ++o)
      for (int64_t k = 0; k < K; ++k)
        dw[o * K + k] = wT[k * og + o];
  }
}

bool available() {
  X86Features f = x86Features();
  return f.avx512f && f.zmmState;
}

} // namespace

bool directConvAvailable() {
  static const bool yes = available();
  return yes;
}

bool directConvEnabled() {
  const char *choice = std::getenv("KILN_CPU_CONV");
  return directConvAvailable() && !(choice && std::strcmp(choice, "im2col") == 0);
}

bool directConvPreferred(ConvKind kind, const ConvParams &params) {
  // Input channels per group: [N, C, H, W] over groups.
  return kind != ConvKind::InputGrad || params.inputShape[1] / params.groups >= 8;
}

bool directConv2d(const ConvParams &params, const float *input,
                  const float *filter, float *output) {
  if (!directConvEnabled())
    return false;
  forward(convGeometry(params), input, filter, output);
  return true;
}

bool directConv2dInputGrad(const ConvParams &params, const float *gradOutput,
                           const float *filter, float *gradInput) {
  if (!directConvEnabled())
    return false;
  ConvGeometry g = convGeometry(params);
  if (g.sh != 1 || g.sw != 1) {
    inputGradStrided(g, gradOutput, filter, gradInput);
    return true;
  }
  // dx[c, y, x] = sum_{o, i, j} W[o, c, i, j] dy[o, y + pt - dh i, x + pl - dw j]:
  // with i' = kh - 1 - i, a stride-1 convolution of dy by the flipped,
  // transposed filter W'[c, o, i', j'] = W[o, c, kh-1-i', kw-1-j'], padded
  // by dh (kh - 1) - pt above and dw (kw - 1) - pl on the left (negative
  // padding crops; the planes read only inside dy).
  ConvGeometry t = g;
  t.c = g.o, t.h = g.oh, t.w = g.ow;
  t.o = g.c, t.oh = g.h, t.ow = g.w;
  t.pt = g.dh * (g.kh - 1) - g.pt, t.pl = g.dw * (g.kw - 1) - g.pl;
  int64_t cg = g.cg(), og = g.og(), taps = g.kh * g.kw;
  std::vector<float> flipped(g.o * cg * taps);
  for (int64_t gr = 0; gr < g.groups; ++gr)
    for (int64_t c = 0; c < cg; ++c)
      for (int64_t o = 0; o < og; ++o)
        for (int64_t i = 0; i < g.kh; ++i)
          for (int64_t j = 0; j < g.kw; ++j)
            flipped[(((gr * cg + c) * og + o) * g.kh + i) * g.kw + j] =
                filter[(((gr * og + o) * cg + c) * g.kh + (g.kh - 1 - i)) * g.kw +
                       (g.kw - 1 - j)];
  forward(t, gradOutput, flipped.data(), gradInput);
  return true;
}

bool directConv2dFilterGrad(const ConvParams &params, const float *input,
                            const float *gradOutput, float *gradFilter) {
  if (!directConvEnabled())
    return false;
  filterGrad(convGeometry(params), input, gradOutput, gradFilter);
  return true;
}

#else // !__x86_64__

bool directConvPreferred(ConvKind, const ConvParams &) { return false; }

bool directConvAvailable() { return false; }
bool directConvEnabled() { return false; }
bool directConv2d(const ConvParams &, const float *, const float *, float *) {
  return false;
}
bool directConv2dInputGrad(const ConvParams &, const float *, const float *,
                           float *) {
  return false;
}
bool directConv2dFilterGrad(const ConvParams &, const float *, const float *,
                            float *) {
  return false;
}

#endif

} // namespace kiln::runtime::cpu
