//===- CudaEmulation.h - run generated CUDA kernels on host threads -*- C++ -*-===//
//
// Lets the generated kernels (CudaEmitter.h) compile as plain C++ (clang++
// -std=c++20 -DKILN_CUDA_EMULATION -include this file) so that tests can
// execute their arithmetic and indexing on a machine without a GPU:
// threadIdx/blockIdx/blockDim/gridDim, __syncthreads (a block barrier),
// __shfl_xor_sync and __shfl_up_sync (lanes exchange through memory
// between two warp barriers), __half and __nv_bfloat16 (16-bit storage, conversions rounded
// to nearest even), __int_as_float and friends. kiln_emulate(grid, block,
// body) runs the grid's blocks one after another, each block's threads
// concurrently on std::threads (block must be a multiple of 32 and at most
// 1024), so barriers and shuffles behave as on a GPU; __shared__ variables
// are statics, which is right because only one block runs at a time.
// Dynamic shared memory (a generated kernel's row cache, which reaches it
// through kiln_emulation_dynamic_shared() where the GPU source declares
// `extern __shared__`): kiln_emulate's last argument is its size per
// block, and each block gets an array of its own, filled with 0xff bytes
// (a NaN in every float type), so a kernel that reads a cached element
// before its block wrote it computes NaN instead of a stale row.
// nvcuda::wmma (mma.h) is emulated for 16x16x16 tiles: every lane holds the
// whole tile (load_matrix_sync reads it all, mma_sync multiplies it with
// f32 accumulation in k order, store_matrix_sync writes it; the 32 lanes of
// a warp write the same values), so a kernel that touches fragments only
// through the wmma calls runs as on a GPU, whatever the lane mapping. Like
// the hardware's, load_matrix_sync and store_matrix_sync are warp-wide: each
// starts at a warp barrier, so no lane stores a tile before every lane has
// loaded what it read earlier (an accumulator loaded, multiplied into and
// stored back is not added twice).
// Only what the generated kernels use is provided; it is a test device, not
// a performance model.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_CODEGEN_CUDA_CUDAEMULATION_H
#define KILN_CODEGEN_CUDA_CUDAEMULATION_H

#include <barrier>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <type_traits>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))

struct kiln_dim3 {
  unsigned x = 1, y = 1, z = 1;
};
inline thread_local kiln_dim3 threadIdx, blockIdx;
inline kiln_dim3 blockDim, gridDim;

namespace kiln_emulation {
inline std::unique_ptr<std::barrier<>> block;
inline std::vector<std::unique_ptr<std::barrier<>>> warps;
inline uint64_t slots[1024];
// The running block's dynamic shared memory (kiln_emulate).
inline std::unique_ptr<std::max_align_t[]> dynamicShared;
} // namespace kiln_emulation

inline unsigned char *kiln_emulation_dynamic_shared() {
  return reinterpret_cast<unsigned char *>(kiln_emulation::dynamicShared.get());
}

inline void __syncthreads() { kiln_emulation::block->arrive_and_wait(); }

// Every lane of the warp publishes |value|, then reads lane |source|'s
// (between two warp barriers, so no lane overwrites a slot still read).
template <class T> T kiln_emulation_shuffle(T value, unsigned source) {
  static_assert(sizeof(T) <= 8, "shuffle of at most 8 bytes");
  unsigned t = threadIdx.x;
  std::barrier<> &warp = *kiln_emulation::warps[t / 32];
  std::memcpy(&kiln_emulation::slots[t], &value, sizeof(T));
  warp.arrive_and_wait();
  T result;
  std::memcpy(&result, &kiln_emulation::slots[source], sizeof(T));
  warp.arrive_and_wait();
  return result;
}

template <class T> T __shfl_xor_sync(unsigned, T value, int laneMask) {
  unsigned t = threadIdx.x;
  return kiln_emulation_shuffle(value, (t & ~31u) | ((t & 31u) ^ unsigned(laneMask)));
}

// Lane t gets lane t - delta's value (its own below delta).
template <class T> T __shfl_up_sync(unsigned, T value, unsigned delta) {
  unsigned t = threadIdx.x;
  return kiln_emulation_shuffle(value, (t & 31u) >= delta ? t - delta : t);
}

template <class Body>
void kiln_emulate(unsigned grid, unsigned block, Body body,
                  size_t dynamicSharedBytes = 0) {
  gridDim = {grid, 1, 1};
  blockDim = {block, 1, 1};
  for (unsigned b = 0; b < grid; ++b) {
    size_t words = (dynamicSharedBytes + sizeof(std::max_align_t) - 1) /
                   sizeof(std::max_align_t);
    kiln_emulation::dynamicShared =
        std::make_unique<std::max_align_t[]>(words ? words : 1);
    std::memset(kiln_emulation::dynamicShared.get(), 0xff,
                (words ? words : 1) * sizeof(std::max_align_t));
    kiln_emulation::block = std::make_unique<std::barrier<>>(block);
    kiln_emulation::warps.clear();
    for (unsigned w = 0; w < (block + 31) / 32; ++w)
      kiln_emulation::warps.push_back(std::make_unique<std::barrier<>>(32));
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < block; ++t)
      threads.emplace_back([&, b, t] {
        blockIdx = {b, 1, 1};
        threadIdx = {t, 1, 1};
        body();
      });
    for (std::thread &thread : threads)
      thread.join();
  }
}

inline float __int_as_float(int bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
inline double __longlong_as_double(long long bits) {
  double d;
  std::memcpy(&d, &bits, 8);
  return d;
}
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
using std::erf, std::erff, std::expm1, std::log1p, std::tanh, std::fmax,
    std::fmin;

// 16-bit floats: storage plus conversions (round to nearest even).
struct __half_raw {
  unsigned short x;
};
struct __half {
  unsigned short x = 0;
  __half() = default;
  explicit __half(__half_raw r) : x(r.x) {}
};
struct __nv_bfloat16_raw {
  unsigned short x;
};
struct __nv_bfloat16 {
  unsigned short x = 0;
  __nv_bfloat16() = default;
  __nv_bfloat16(__nv_bfloat16_raw r) : x(r.x) {}
};

// IEEE binary16 by bit manipulation (not every host compiler has _Float16).
inline unsigned short kiln_emulation_to_half(double v) {
  unsigned short sign = std::signbit(v) ? 0x8000 : 0;
  double a = std::fabs(v);
  if (std::isnan(v))
    return sign | 0x7e00;
  if (a < 0x1p-14) // subnormal (or zero): units of 2^-24, rounded to even
    return sign | static_cast<unsigned short>(std::nearbyint(a * 0x1p24));
  int e;
  double m = std::frexp(a, &e); // a = m * 2^e, m in [0.5, 1)
  double q = std::nearbyint(m * 2048.0); // 1024..2048
  int exponent = e - 1 + 15;
  if (q == 2048.0) {
    q = 1024.0;
    ++exponent;
  }
  if (exponent >= 31)
    return sign | 0x7c00;
  return sign | static_cast<unsigned short>((exponent << 10) | (static_cast<int>(q) - 1024));
}
inline float __half2float(__half h) {
  int exponent = (h.x >> 10) & 0x1f, mantissa = h.x & 0x3ff;
  float magnitude = exponent == 0 ? std::ldexp(float(mantissa), -24)
                    : exponent == 31
                        ? (mantissa ? std::nanf("") : INFINITY)
                        : std::ldexp(float(mantissa | 0x400), exponent - 25);
  return (h.x & 0x8000) ? -magnitude : magnitude;
}
inline __half __float2half_rn(float v) {
  __half h;
  h.x = kiln_emulation_to_half(v);
  return h;
}
inline __half __double2half(double v) {
  __half h;
  h.x = kiln_emulation_to_half(v);
  return h;
}
inline float __bfloat162float(__nv_bfloat16 h) {
  uint32_t bits = uint32_t(h.x) << 16;
  return __int_as_float(static_cast<int>(bits));
}
inline __nv_bfloat16 __float2bfloat16_rn(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  __nv_bfloat16 h;
  if (std::isnan(v)) {
    h.x = static_cast<unsigned short>((bits >> 16) | 0x40);
    return h;
  }
  uint32_t rounding = 0x7fff + ((bits >> 16) & 1);
  h.x = static_cast<unsigned short>((bits + rounding) >> 16);
  return h;
}
inline __nv_bfloat16 __double2bfloat16(double v) {
  return __float2bfloat16_rn(static_cast<float>(v));
}

// nvcuda::wmma for 16x16x16 tiles (see the header comment).
inline float kiln_wmma_float(float v) { return v; }
inline float kiln_wmma_float(__half v) { return __half2float(v); }
inline float kiln_wmma_float(__nv_bfloat16 v) { return __bfloat162float(v); }

namespace nvcuda::wmma {
inline void kiln_wmma_sync() {
  kiln_emulation::warps[threadIdx.x / 32]->arrive_and_wait();
}
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment {
  static constexpr int rows = std::is_same_v<Use, matrix_b> ? K : M;
  static constexpr int cols = std::is_same_v<Use, matrix_a> ? K : N;
  static constexpr int num_elements = rows * cols;
  T x[num_elements];
};

template <class Use, int M, int N, int K, class T, class Layout, class V>
void fill_fragment(fragment<Use, M, N, K, T, Layout> &f, const V &value) {
  for (T &e : f.x)
    e = value;
}

// matrix_a / matrix_b: the layout is the fragment's.
template <class Use, int M, int N, int K, class T, class Layout>
void load_matrix_sync(fragment<Use, M, N, K, T, Layout> &f, const T *p,
                      unsigned ldm) {
  using F = fragment<Use, M, N, K, T, Layout>;
  kiln_wmma_sync();
  for (int r = 0; r < F::rows; ++r)
    for (int c = 0; c < F::cols; ++c)
      f.x[r * F::cols + c] = std::is_same_v<Layout, col_major>
                                 ? p[size_t(c) * ldm + r]
                                 : p[size_t(r) * ldm + c];
}

template <int M, int N, int K, class T>
void load_matrix_sync(fragment<accumulator, M, N, K, T> &f, const T *p,
                      unsigned ldm, layout_t layout) {
  kiln_wmma_sync();
  for (int r = 0; r < M; ++r)
    for (int c = 0; c < N; ++c)
      f.x[r * N + c] = layout == mem_col_major ? p[size_t(c) * ldm + r]
                                               : p[size_t(r) * ldm + c];
}

template <int M, int N, int K, class T>
void store_matrix_sync(T *p, const fragment<accumulator, M, N, K, T> &f,
                       unsigned ldm, layout_t layout) {
  kiln_wmma_sync();
  for (int r = 0; r < M; ++r)
    for (int c = 0; c < N; ++c)
      (layout == mem_col_major ? p[size_t(c) * ldm + r]
                               : p[size_t(r) * ldm + c]) = f.x[r * N + c];
}

template <int M, int N, int K, class TA, class LA, class TB, class LB>
void mma_sync(fragment<accumulator, M, N, K, float> &d,
              const fragment<matrix_a, M, N, K, TA, LA> &a,
              const fragment<matrix_b, M, N, K, TB, LB> &b,
              const fragment<accumulator, M, N, K, float> &c) {
  float out[M * N];
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      float sum = c.x[i * N + j];
      for (int k = 0; k < K; ++k)
        sum += kiln_wmma_float(a.x[i * K + k]) * kiln_wmma_float(b.x[k * N + j]);
      out[i * N + j] = sum;
    }
  std::memcpy(d.x, out, sizeof(out));
}
} // namespace nvcuda::wmma

#endif // KILN_CODEGEN_CUDA_CUDAEMULATION_H
