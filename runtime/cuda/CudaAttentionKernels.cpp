//===- CudaAttentionKernels.cpp - the fused attention kernels' CUDA C++ ---===//
//
// The attention kernels' shared CUDA C++ (CudaAttention.h describes the
// kernels): the prelude, tile loads, the parameters and heads, the
// CUDA-core and wmma kernels, and the entry-point macros. The mma.sync
// kernels are in CudaAttentionMmaKernels.cpp, appended after this text
// where a set uses them. attentionKernelSource() (CudaAttention.cpp)
// instantiates them per dtype and head-dim bucket and NVRTC compiles them
// at load; under -DKILN_CUDA_EMULATION and codegen/cuda/CudaEmulation.h the
// same text builds for the host (tests).
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudaAttentionKernels.h"

namespace kiln::runtime::cuda {

// Each kernel's shared memory is a sum of constexpr offsets here; the byte
// counts attentionConfig() reports (CudaAttention.cpp) are the same
// expressions, kept in step by the static_asserts.
const char *const kAttentionKernelTemplates = R"cuda(// Kiln fused attention kernels (runtime/cuda/CudaAttentionKernels.cpp).
#ifndef KILN_CUDA_EMULATION
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <mma.h>
#endif
typedef long long kiln_index;
#define KILN_ATTN_THREADS 128
#define KILN_ATTN_WARPS 4
#define KILN_ATTN_SHARED_LIMIT 49152

// A kernel's shared memory, |bytes| of it: static up to 48 KiB, else the
// launch's dynamic shared memory (the runtime opts the kernel in; the
// emulation gives each block the host wrapper's bytes,
// KILN_ATTN_KERNEL_DYN).
#ifndef KILN_CUDA_EMULATION
#define KILN_ATTN_SMEM(name, bytes)                                            \
  __shared__ __align__(16) unsigned char name##_static[(bytes) <= KILN_ATTN_SHARED_LIMIT ? (bytes) : 16]; \
  extern __shared__ __align__(16) unsigned char kiln_attn_dynamic[];           \
  unsigned char *const name = (bytes) <= KILN_ATTN_SHARED_LIMIT ? name##_static : kiln_attn_dynamic;
#else
#define KILN_ATTN_SMEM(name, bytes)                                            \
  __shared__ __align__(16) unsigned char name##_static[(bytes) <= KILN_ATTN_SHARED_LIMIT ? (bytes) : 16]; \
  unsigned char *const name = (bytes) <= KILN_ATTN_SHARED_LIMIT ? name##_static : kiln_emulation_dynamic_shared();
#endif

template <bool C, class X, class Y> struct kiln_attn_if { typedef X type; };
template <class X, class Y> struct kiln_attn_if<false, X, Y> { typedef Y type; };

__host__ __device__ constexpr int kiln_attn_round(int bytes) { return (bytes + 31) / 32 * 32; }

// Global loads widen to the accumulation type, stores round once.
static __device__ __forceinline__ float kiln_attn_load(const float *p, kiln_index i) { return p[i]; }
static __device__ __forceinline__ double kiln_attn_load(const double *p, kiln_index i) { return p[i]; }
static __device__ __forceinline__ float kiln_attn_load(const __half *p, kiln_index i) { return __half2float(p[i]); }
static __device__ __forceinline__ float kiln_attn_load(const __nv_bfloat16 *p, kiln_index i) { return __bfloat162float(p[i]); }
static __device__ __forceinline__ void kiln_attn_set(float *p, kiln_index i, float v) { p[i] = v; }
static __device__ __forceinline__ void kiln_attn_set(float *p, kiln_index i, double v) { p[i] = (float)v; }
static __device__ __forceinline__ void kiln_attn_set(double *p, kiln_index i, double v) { p[i] = v; }
static __device__ __forceinline__ void kiln_attn_set(__half *p, kiln_index i, float v) { p[i] = __float2half_rn(v); }
static __device__ __forceinline__ void kiln_attn_set(__nv_bfloat16 *p, kiln_index i, float v) { p[i] = __float2bfloat16_rn(v); }
// A shared tile element from a global one: 16-bit tiles (tensor cores)
// copy, the others widen.
static __device__ __forceinline__ void kiln_attn_put(__half *s, int x, const __half *g, kiln_index i) { s[x] = g[i]; }
static __device__ __forceinline__ void kiln_attn_put(__nv_bfloat16 *s, int x, const __nv_bfloat16 *g, kiln_index i) { s[x] = g[i]; }
template <class S, class T>
static __device__ __forceinline__ void kiln_attn_put(S *s, int x, const T *g, kiln_index i) { s[x] = kiln_attn_load(g, i); }

static __device__ __forceinline__ float kiln_attn_exp(float x) { return expf(x); }
static __device__ __forceinline__ double kiln_attn_exp(double x) { return exp(x); }
static __device__ __forceinline__ float kiln_attn_log(float x) { return logf(x); }
static __device__ __forceinline__ double kiln_attn_log(double x) { return log(x); }
static __device__ __forceinline__ void kiln_attn_ninf(float &x) { x = -__int_as_float(0x7f800000); }
static __device__ __forceinline__ void kiln_attn_ninf(double &x) { x = -__longlong_as_double(0x7ff0000000000000LL); }

struct __align__(16) kiln_attn_chunk {
  unsigned int w[4];
};

// s[r][d] (row stride ld) = g[(row0 + r) * ldg + d] for rows < n, zero
// for the rows past it; columns d < width (ldg, the global row stride in
// elements, is width for the BHTD layout, 3 H D for packed q/k/v). A tile
// stored as loaded (same element size) whose rows are whole 16-byte chunks
// at 16-byte aligned addresses (g and ldg both) moves in 16-byte loads and
// stores (the shared rows, ld >= 64 elements, are aligned); otherwise
// element by element, widening. NT: the block's threads.
template <int NT = KILN_ATTN_THREADS, class S, class T>
static __device__ __forceinline__ void kiln_attn_tile(S *s, int ld, const T *g, kiln_index ldg, kiln_index row0, kiln_index n, int rows, int width) {
  if (sizeof(S) == sizeof(T) && (width * (int)sizeof(T)) % 16 == 0 &&
      (ldg * (kiln_index)sizeof(T)) % 16 == 0 &&
      (unsigned long long)g % 16 == 0) {
    const int per = 16 / (int)sizeof(T), chunks = width / per;
    for (int e = threadIdx.x; e < rows * chunks; e += NT) {
      int r = e / chunks, c = e % chunks;
      kiln_attn_chunk v = {{0u, 0u, 0u, 0u}};
      if (row0 + r < n)
        v = *(const kiln_attn_chunk *)(g + (row0 + r) * ldg + c * per);
      *(kiln_attn_chunk *)(s + r * ld + c * per) = v;
    }
    return;
  }
  for (int e = threadIdx.x; e < rows * width; e += NT) {
    int r = e / width, d = e % width;
    if (row0 + r < n)
      kiln_attn_put(s, r * ld + d, g, (row0 + r) * ldg + d);
    else
      kiln_attn_set(s, r * ld + d, 0.0f);
  }
}

// c[M x N] (ldc) = (acc ? c : 0) + op(x)[M x K] . op(y)[K x N], x stored
// [K][M] when XT, y stored [N][K] when YT. Tensor cores: each warp takes
// 16x16 tiles of c (M, N, K multiples of 16); else one element per thread.
template <bool W, bool XT, bool YT, class S, class A>
static __device__ __forceinline__ void kiln_attn_mm(A *c, int ldc, const S *x, int ldx, const S *y, int ldy, int M, int N, int K, bool acc) {
  if constexpr (W) {
    using namespace nvcuda;
    typedef typename kiln_attn_if<XT, wmma::col_major, wmma::row_major>::type LX;
    typedef typename kiln_attn_if<YT, wmma::col_major, wmma::row_major>::type LY;
    int warp = threadIdx.x / 32, tilesN = N / 16;
    for (int t = warp; t < (M / 16) * tilesN; t += KILN_ATTN_WARPS) {
      int r0 = t / tilesN * 16, c0 = t % tilesN * 16;
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> f;
      if (acc)
        wmma::load_matrix_sync(f, c + r0 * ldc + c0, ldc, wmma::mem_row_major);
      else
        wmma::fill_fragment(f, 0.0f);
      for (int k0 = 0; k0 < K; k0 += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, S, LX> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, S, LY> b;
        wmma::load_matrix_sync(a, XT ? x + k0 * ldx + r0 : x + r0 * ldx + k0, ldx);
        wmma::load_matrix_sync(b, YT ? y + c0 * ldy + k0 : y + k0 * ldy + c0, ldy);
        wmma::mma_sync(f, a, b, f);
      }
      wmma::store_matrix_sync(c + r0 * ldc + c0, f, ldc, wmma::mem_row_major);
    }
  } else {
    for (int e = threadIdx.x; e < M * N; e += KILN_ATTN_THREADS) {
      int r = e / N, col = e % N;
      A s = 0;
      for (int k = 0; k < K; ++k)
        s += (XT ? x[k * ldx + r] : x[r * ldx + k]) * (YT ? y[col * ldy + k] : y[k * ldy + col]);
      c[r * ldc + col] = acc ? c[r * ldc + col] + s : s;
    }
  }
}

// Every kernel's parameters. r0_, r1_, r2_ are the results (out, lse; or
// dq, dk, dv), work_ the backward's D_i. q, k, v and their gradients are
// addressed through strides in elements: element (b, h, t, d) of q (and
// of dq) is q_[b * qB + h * qH + t * qT + d], likewise k with kB, kH, kT
// and v with vB, vH, vT; out and dout share oB, oH, oT. lse and D_i are
// [B, H, Tq] contiguous. H splits b*h (blockIdx) into b and h.
#define KILN_ATTN_PARAMS                                                       \
  const void *q_, const void *k_, const void *v_, const void *o_,              \
      const void *lse_, const void *do_, void *r0_, void *r1_, void *r2_,      \
      void *work_, kiln_index BH, kiln_index Tq, kiln_index Tk, kiln_index D,  \
      kiln_index DV, double scale, kiln_index causal, kiln_index H,            \
      kiln_index qB, kiln_index qH, kiln_index qT, kiln_index kB,              \
      kiln_index kH, kiln_index kT, kiln_index vB, kiln_index vH,              \
      kiln_index vT, kiln_index oB, kiln_index oH, kiln_index oT
#define KILN_ATTN_ARGS                                                         \
  q_, k_, v_, o_, lse_, do_, r0_, r1_, r2_, work_, BH, Tq, Tk, D, DV, scale,   \
      causal, H, qB, qH, qT, kB, kH, kT, vB, vH, vT, oB, oH, oT

// The offset of head |bh| (= b * H + h) of a tensor with batch stride |sb|
// and head stride |sh|.
static __device__ __forceinline__ kiln_index kiln_attn_head(kiln_index bh, kiln_index H, kiln_index sb, kiln_index sh) {
  return bh / H * sb + bh % H * sh;
}

// The key blocks the query block at q0 sees (causal: up to the diagonal).
template <int BQ, int BK>
static __device__ __forceinline__ kiln_index kiln_attn_key_blocks(kiln_index q0, kiln_index Tk, kiln_index causal) {
  kiln_index nKB = (Tk + BK - 1) / BK;
  if (causal && (q0 + BQ - 1) / BK + 1 < nKB)
    nKB = (q0 + BQ - 1) / BK + 1;
  return nKB;
}

// A dK/dV block's key rows (BK of them from k0, of head bh: blockIdx's)
// and its head's q, k, v, dout, lse and D_i (of type A: the
// accumulation type).
template <class T, int BK, class A = float>
struct kiln_attn_key_rows {
  kiln_index bh, k0, kAt, vAt;
  const T *q, *k, *v, *dout;
  const A *lse, *dot;

  __device__ __forceinline__ kiln_attn_key_rows(KILN_ATTN_PARAMS) {
    kiln_index nKB = (Tk + BK - 1) / BK;
    bh = blockIdx.x / nKB, k0 = (blockIdx.x % nKB) * BK;
    kAt = kiln_attn_head(bh, H, kB, kH), vAt = kiln_attn_head(bh, H, vB, vH);
    q = (const T *)q_ + kiln_attn_head(bh, H, qB, qH), k = (const T *)k_ + kAt;
    v = (const T *)v_ + vAt, dout = (const T *)do_ + kiln_attn_head(bh, H, oB, oH);
    lse = (const A *)lse_ + bh * Tq, dot = (const A *)work_ + bh * Tq;
  }
};

// A dQ block's query rows (BQ of them from q0, of head bh: blockIdx's)
// and its head's q, k, v, dout, lse and D_i (of type A: the
// accumulation type).
template <class T, int BQ, class A = float>
struct kiln_attn_query_rows {
  kiln_index bh, q0, qAt;
  const T *q, *k, *v, *dout;
  const A *lse, *dot;

  __device__ __forceinline__ kiln_attn_query_rows(KILN_ATTN_PARAMS) {
    kiln_index nQB = (Tq + BQ - 1) / BQ;
    bh = blockIdx.x / nQB, q0 = (blockIdx.x % nQB) * BQ;
    qAt = kiln_attn_head(bh, H, qB, qH);
    q = (const T *)q_ + qAt, k = (const T *)k_ + kiln_attn_head(bh, H, kB, kH);
    v = (const T *)v_ + kiln_attn_head(bh, H, vB, vH);
    dout = (const T *)do_ + kiln_attn_head(bh, H, oB, oH);
    lse = (const A *)lse_ + bh * Tq, dot = (const A *)work_ + bh * Tq;
  }
};

// Forward: out, lse (r0_, r1_). One block per (query block, b*h).
template <class T, class A, bool W, int DM, int BQ, int BK>
static __device__ __forceinline__ void kiln_attn_fwd(KILN_ATTN_PARAMS) {
  typedef typename kiln_attn_if<W, T, A>::type S;
  constexpr int PB = W ? BQ * BK : 0;
  constexpr int oS = 0, oO = oS + kiln_attn_round(BQ * BK * sizeof(A));
  constexpr int oM = oO + kiln_attn_round(BQ * DM * sizeof(A));
  constexpr int oL = oM + kiln_attn_round(BQ * sizeof(A));
  constexpr int oAl = oL + kiln_attn_round(BQ * sizeof(A));
  constexpr int oQ = oAl + kiln_attn_round(BQ * sizeof(A));
  constexpr int oK = oQ + kiln_attn_round(BQ * DM * sizeof(S));
  constexpr int oV = oK + kiln_attn_round(BK * DM * sizeof(S));
  constexpr int oP = oV + kiln_attn_round(BK * DM * sizeof(S));
  constexpr int total = oP + kiln_attn_round(PB * sizeof(S));
  static_assert(total <= KILN_ATTN_SHARED_LIMIT, "attention forward: shared memory");
  constexpr int G = KILN_ATTN_THREADS / BQ; // threads per row in the softmax
  static_assert(G * BQ == KILN_ATTN_THREADS && G <= 32, "attention forward: rows");
  __shared__ __align__(32) unsigned char smem[total];
  A *sS = (A *)(smem + oS), *sO = (A *)(smem + oO), *sM = (A *)(smem + oM);
  A *sL = (A *)(smem + oL), *sAl = (A *)(smem + oAl);
  S *sQ = (S *)(smem + oQ), *sK = (S *)(smem + oK), *sV = (S *)(smem + oV);
  S *sP = (S *)(smem + oP);
  const int d = (int)D, dv = (int)DV;
  kiln_index nQB = (Tq + BQ - 1) / BQ;
  kiln_index bh = blockIdx.x / nQB, q0 = (blockIdx.x % nQB) * BQ;
  const T *q = (const T *)q_ + kiln_attn_head(bh, H, qB, qH);
  const T *k = (const T *)k_ + kiln_attn_head(bh, H, kB, kH);
  const T *v = (const T *)v_ + kiln_attn_head(bh, H, vB, vH);
  T *out = (T *)r0_ + kiln_attn_head(bh, H, oB, oH);
  A *lse = (A *)r1_ + bh * Tq;
  A ninf;
  kiln_attn_ninf(ninf);
  const A sc = (A)scale;
  kiln_attn_tile(sQ, DM, q, qT, q0, Tq, BQ, d);
  for (int e = threadIdx.x; e < BQ * dv; e += KILN_ATTN_THREADS)
    sO[e / dv * DM + e % dv] = 0;
  for (int r = threadIdx.x; r < BQ; r += KILN_ATTN_THREADS)
    sM[r] = ninf, sL[r] = 0;
  kiln_index nKB = kiln_attn_key_blocks<BQ, BK>(q0, Tk, causal);
  for (kiln_index kb = 0; kb < nKB; ++kb) {
    kiln_index k0 = kb * BK;
    __syncthreads();
    kiln_attn_tile(sK, DM, k, kT, k0, Tk, BK, d);
    kiln_attn_tile(sV, DM, v, vT, k0, Tk, BK, dv);
    __syncthreads();
    kiln_attn_mm<W, false, true>(sS, BK, sQ, DM, sK, DM, BQ, BK, d, false);
    __syncthreads();
    // Online softmax: G threads per row (a power of two within a warp),
    // combined by shuffles in a fixed order.
    {
      int r = threadIdx.x / G, g = threadIdx.x % G;
      kiln_index i = q0 + r;
      A mOld = sM[r], m = mOld;
      for (int c = g; c < BK; c += G) {
        kiln_index j = k0 + c;
        A s = ninf;
        if (j < Tk && (!causal || j <= i))
          s = sc * sS[r * BK + c];
        sS[r * BK + c] = s;
        m = s > m ? s : m;
      }
      for (int o = G / 2; o > 0; o /= 2) {
        A other = __shfl_xor_sync(0xffffffffu, m, o);
        m = other > m ? other : m;
      }
      A alpha = m == ninf ? (A)1 : kiln_attn_exp(mOld - m), sum = 0;
      for (int c = g; c < BK; c += G) {
        A s = sS[r * BK + c];
        A p = s == ninf ? (A)0 : kiln_attn_exp(s - m);
        sS[r * BK + c] = p;
        sum += p;
      }
      for (int o = G / 2; o > 0; o /= 2)
        sum += __shfl_xor_sync(0xffffffffu, sum, o);
      if (g == 0) {
        sL[r] = sL[r] * alpha + sum;
        sM[r] = m;
        sAl[r] = alpha;
      }
    }
    __syncthreads();
    for (int e = threadIdx.x; e < BQ * dv; e += KILN_ATTN_THREADS)
      sO[e / dv * DM + e % dv] *= sAl[e / dv];
    if constexpr (W)
      for (int e = threadIdx.x; e < BQ * BK; e += KILN_ATTN_THREADS)
        kiln_attn_set(sP, e, sS[e]);
    __syncthreads();
    if constexpr (W)
      kiln_attn_mm<W, false, false>(sO, DM, sP, BK, sV, DM, BQ, dv, BK, true);
    else
      kiln_attn_mm<W, false, false>(sO, DM, sS, BK, sV, DM, BQ, dv, BK, true);
  }
  __syncthreads();
  for (int e = threadIdx.x; e < BQ * dv; e += KILN_ATTN_THREADS) {
    int r = e / dv, c = e % dv;
    if (q0 + r < Tq) {
      A l = sL[r];
      kiln_attn_set(out, (q0 + r) * oT + c, l > 0 ? sO[r * DM + c] / l : (A)0);
    }
  }
  for (int r = threadIdx.x; r < BQ; r += KILN_ATTN_THREADS)
    if (q0 + r < Tq)
      lse[q0 + r] = sL[r] > 0 ? sM[r] + kiln_attn_log(sL[r]) : ninf;
}

// Backward, first: work[i] = D_i = sum_e dout_ie out_ie (grid-stride over
// the rows i = bh * Tq + t).
template <class T, class A>
static __device__ __forceinline__ void kiln_attn_bwd_dot(KILN_ATTN_PARAMS) {
  const T *out = (const T *)o_, *dout = (const T *)do_;
  A *work = (A *)work_;
  for (kiln_index i = (kiln_index)blockIdx.x * KILN_ATTN_THREADS + threadIdx.x;
       i < BH * Tq; i += (kiln_index)gridDim.x * KILN_ATTN_THREADS) {
    kiln_index row = kiln_attn_head(i / Tq, H, oB, oH) + i % Tq * oT;
    A s = 0;
    for (kiln_index e = 0; e < DV; ++e)
      s += (A)kiln_attn_load(dout, row + e) * (A)kiln_attn_load(out, row + e);
    work[i] = s;
  }
}

// lse and D_i of the query rows q0.. into shared memory (0 past Tq).
template <int BQ, int NT = KILN_ATTN_THREADS, class A>
static __device__ __forceinline__ void kiln_attn_rows(A *sLse, A *sDot, const A *lse, const A *dot, kiln_index q0, kiln_index Tq) {
  for (int r = threadIdx.x; r < BQ; r += NT) {
    bool in = q0 + r < Tq;
    sLse[r] = in ? lse[q0 + r] : (A)0;
    sDot[r] = in ? dot[q0 + r] : (A)0;
  }
}

// For the tile at (q0, k0): S = Q K^T into sS and dP = dO V^T into sD, then
// P (into sS) and dS = P (dP - D_i) (into sD).
template <class A, bool W, int DM, int BQ, int BK, class S>
static __device__ __forceinline__ void kiln_attn_ds(A *sS, A *sD, const S *sQ, const S *sK, const S *sdO, const S *sV, const A *sLse, const A *sDot, kiln_index q0, kiln_index k0, kiln_index Tq, kiln_index Tk, int d, int dv, A sc, kiln_index causal) {
  kiln_attn_mm<W, false, true>(sS, BK, sQ, DM, sK, DM, BQ, BK, d, false);
  kiln_attn_mm<W, false, true>(sD, BK, sdO, DM, sV, DM, BQ, BK, dv, false);
  __syncthreads();
  for (int e = threadIdx.x; e < BQ * BK; e += KILN_ATTN_THREADS) {
    int r = e / BK, c = e % BK;
    kiln_index i = q0 + r, j = k0 + c;
    A p = 0;
    if (i < Tq && j < Tk && (!causal || j <= i))
      p = kiln_attn_exp(sc * sS[e] - sLse[r]);
    sS[e] = p;
    sD[e] = p * (sD[e] - sDot[r]);
  }
}

// c += op(p) . y for a [BQ, BK] tile p of A that the block has just written
// (hence the barrier first): the tensor cores multiply its copy in S (sP),
// the CUDA cores p itself.
template <bool W, bool XT, int BQ, int BK, class S, class A>
static __device__ __forceinline__ void kiln_attn_mm_p(A *c, int ldc, const A *p, S *sP, const S *y, int ldy, int M, int N, int K) {
  __syncthreads();
  if constexpr (W) {
    for (int e = threadIdx.x; e < BQ * BK; e += KILN_ATTN_THREADS)
      kiln_attn_set(sP, e, p[e]);
    __syncthreads();
    kiln_attn_mm<W, XT, false>(c, ldc, sP, BK, y, ldy, M, N, K, true);
  } else {
    kiln_attn_mm<W, XT, false>(c, ldc, p, BK, y, ldy, M, N, K, true);
  }
}

// Backward, dK and dV (r1_, r2_): one block per (key block, b*h), walking
// the query blocks that see it.
template <class T, class A, bool W, int DM, int BQ, int BK>
static __device__ __forceinline__ void kiln_attn_bwd_dkdv(KILN_ATTN_PARAMS) {
  typedef typename kiln_attn_if<W, T, A>::type S;
  constexpr int PB = W ? BQ * BK : 0;
  constexpr int oS = 0, oD = oS + kiln_attn_round(BQ * BK * sizeof(A));
  constexpr int odK = oD + kiln_attn_round(BQ * BK * sizeof(A));
  constexpr int odV = odK + kiln_attn_round(BK * DM * sizeof(A));
  constexpr int oLse = odV + kiln_attn_round(BK * DM * sizeof(A));
  constexpr int oDot = oLse + kiln_attn_round(BQ * sizeof(A));
  constexpr int oK = oDot + kiln_attn_round(BQ * sizeof(A));
  constexpr int oV = oK + kiln_attn_round(BK * DM * sizeof(S));
  constexpr int oQ = oV + kiln_attn_round(BK * DM * sizeof(S));
  constexpr int odO = oQ + kiln_attn_round(BQ * DM * sizeof(S));
  constexpr int oP = odO + kiln_attn_round(BQ * DM * sizeof(S));
  constexpr int total = oP + kiln_attn_round(PB * sizeof(S));
  static_assert(total <= KILN_ATTN_SHARED_LIMIT, "attention dK/dV: shared memory");
  __shared__ __align__(32) unsigned char smem[total];
  A *sS = (A *)(smem + oS), *sD = (A *)(smem + oD), *sdK = (A *)(smem + odK);
  A *sdV = (A *)(smem + odV), *sLse = (A *)(smem + oLse), *sDot = (A *)(smem + oDot);
  S *sK = (S *)(smem + oK), *sV = (S *)(smem + oV), *sQ = (S *)(smem + oQ);
  S *sdO = (S *)(smem + odO), *sP = (S *)(smem + oP);
  const int d = (int)D, dv = (int)DV;
  const kiln_attn_key_rows<T, BK, A> at(KILN_ATTN_ARGS);
  const kiln_index k0 = at.k0;
  const T *q = at.q, *k = at.k, *v = at.v, *dout = at.dout;
  const A *lse = at.lse, *dot = at.dot;
  T *dk = (T *)r1_ + at.kAt, *dvOut = (T *)r2_ + at.vAt;
  const A sc = (A)scale;
  kiln_attn_tile(sK, DM, k, kT, k0, Tk, BK, d);
  kiln_attn_tile(sV, DM, v, vT, k0, Tk, BK, dv);
  for (int e = threadIdx.x; e < BK * DM; e += KILN_ATTN_THREADS)
    sdK[e] = 0, sdV[e] = 0;
  kiln_index nQB = (Tq + BQ - 1) / BQ;
  for (kiln_index qb = causal ? k0 / BQ : 0; qb < nQB; ++qb) {
    kiln_index q0 = qb * BQ;
    __syncthreads();
    kiln_attn_tile(sQ, DM, q, qT, q0, Tq, BQ, d);
    kiln_attn_tile(sdO, DM, dout, oT, q0, Tq, BQ, dv);
    kiln_attn_rows<BQ>(sLse, sDot, lse, dot, q0, Tq);
    __syncthreads();
    kiln_attn_ds<A, W, DM, BQ, BK>(sS, sD, sQ, sK, sdO, sV, sLse, sDot, q0, k0, Tq, Tk, d, dv, sc, causal);
    kiln_attn_mm_p<W, true, BQ, BK>(sdV, DM, sS, sP, sdO, DM, BK, dv, BQ);
    kiln_attn_mm_p<W, true, BQ, BK>(sdK, DM, sD, sP, sQ, DM, BK, d, BQ);
  }
  __syncthreads();
  for (int e = threadIdx.x; e < BK * d; e += KILN_ATTN_THREADS)
    if (k0 + e / d < Tk)
      kiln_attn_set(dk, (k0 + e / d) * kT + e % d, sc * sdK[e / d * DM + e % d]);
  for (int e = threadIdx.x; e < BK * dv; e += KILN_ATTN_THREADS)
    if (k0 + e / dv < Tk)
      kiln_attn_set(dvOut, (k0 + e / dv) * vT + e % dv, sdV[e / dv * DM + e % dv]);
}

// Backward, dQ (r0_): one block per (query block, b*h), walking the key
// blocks it sees.
template <class T, class A, bool W, int DM, int BQ, int BK>
static __device__ __forceinline__ void kiln_attn_bwd_dq(KILN_ATTN_PARAMS) {
  typedef typename kiln_attn_if<W, T, A>::type S;
  constexpr int PB = W ? BQ * BK : 0;
  constexpr int oS = 0, oD = oS + kiln_attn_round(BQ * BK * sizeof(A));
  constexpr int odQ = oD + kiln_attn_round(BQ * BK * sizeof(A));
  constexpr int oLse = odQ + kiln_attn_round(BQ * DM * sizeof(A));
  constexpr int oDot = oLse + kiln_attn_round(BQ * sizeof(A));
  constexpr int oQ = oDot + kiln_attn_round(BQ * sizeof(A));
  constexpr int odO = oQ + kiln_attn_round(BQ * DM * sizeof(S));
  constexpr int oK = odO + kiln_attn_round(BQ * DM * sizeof(S));
  constexpr int oV = oK + kiln_attn_round(BK * DM * sizeof(S));
  constexpr int oP = oV + kiln_attn_round(BK * DM * sizeof(S));
  constexpr int total = oP + kiln_attn_round(PB * sizeof(S));
  static_assert(total <= KILN_ATTN_SHARED_LIMIT, "attention dQ: shared memory");
  __shared__ __align__(32) unsigned char smem[total];
  A *sS = (A *)(smem + oS), *sD = (A *)(smem + oD), *sdQ = (A *)(smem + odQ);
  A *sLse = (A *)(smem + oLse), *sDot = (A *)(smem + oDot);
  S *sQ = (S *)(smem + oQ), *sdO = (S *)(smem + odO), *sK = (S *)(smem + oK);
  S *sV = (S *)(smem + oV), *sP = (S *)(smem + oP);
  const int d = (int)D, dv = (int)DV;
  const kiln_attn_query_rows<T, BQ, A> at(KILN_ATTN_ARGS);
  const kiln_index q0 = at.q0;
  const T *q = at.q, *k = at.k, *v = at.v, *dout = at.dout;
  const A *lse = at.lse, *dot = at.dot;
  T *dq = (T *)r0_ + at.qAt;
  const A sc = (A)scale;
  kiln_attn_tile(sQ, DM, q, qT, q0, Tq, BQ, d);
  kiln_attn_tile(sdO, DM, dout, oT, q0, Tq, BQ, dv);
  kiln_attn_rows<BQ>(sLse, sDot, lse, dot, q0, Tq);
  for (int e = threadIdx.x; e < BQ * DM; e += KILN_ATTN_THREADS)
    sdQ[e] = 0;
  kiln_index nKB = kiln_attn_key_blocks<BQ, BK>(q0, Tk, causal);
  for (kiln_index kb = 0; kb < nKB; ++kb) {
    kiln_index k0 = kb * BK;
    __syncthreads();
    kiln_attn_tile(sK, DM, k, kT, k0, Tk, BK, d);
    kiln_attn_tile(sV, DM, v, vT, k0, Tk, BK, dv);
    __syncthreads();
    kiln_attn_ds<A, W, DM, BQ, BK>(sS, sD, sQ, sK, sdO, sV, sLse, sDot, q0, k0, Tq, Tk, d, dv, sc, causal);
    kiln_attn_mm_p<W, false, BQ, BK>(sdQ, DM, sD, sP, sK, DM, BQ, d, BK);
  }
  __syncthreads();
  for (int e = threadIdx.x; e < BQ * d; e += KILN_ATTN_THREADS)
    if (q0 + e / d < Tq)
      kiln_attn_set(dq, (q0 + e / d) * qT + e % d, sc * sdQ[e / d * DM + e % d]);
}

#ifdef KILN_CUDA_EMULATION
static inline double kiln_attn_bits(void *p) {
  double d;
  std::memcpy(&d, &p, sizeof d);
  return d;
}
#define KILN_ATTN_HOST(name) KILN_ATTN_HOST_DYN(name, 0)
#define KILN_ATTN_HOST_DYN(name, bytes)                                        \
  extern "C" void name##_host(void **b, unsigned grid, unsigned block) {       \
    kiln_emulate(grid, block, [&] {                                            \
      name(b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9],         \
           (kiln_index)b[10], (kiln_index)b[11], (kiln_index)b[12],            \
           (kiln_index)b[13], (kiln_index)b[14], kiln_attn_bits(b[15]),        \
           (kiln_index)b[16], (kiln_index)b[17], (kiln_index)b[18],            \
           (kiln_index)b[19], (kiln_index)b[20], (kiln_index)b[21],            \
           (kiln_index)b[22], (kiln_index)b[23], (kiln_index)b[24],            \
           (kiln_index)b[25], (kiln_index)b[26], (kiln_index)b[27],            \
           (kiln_index)b[28], (kiln_index)b[29]);                              \
    }, (bytes));                                                               \
  }
#else
#define KILN_ATTN_HOST(name)
#define KILN_ATTN_HOST_DYN(name, bytes)
#endif

// An entry point |name| running fn<...> with |threads| per block,
// compiled for |blocks| blocks per SM (ptxas caps its registers so that
// many fit; 1: no cap); KILN_ATTN_KERNEL_N with one block, and
// KILN_ATTN_KERNEL with KILN_ATTN_THREADS too.
#define KILN_ATTN_KERNEL_NB(name, threads, blocks, fn, ...)                    \
  extern "C" __global__ void __launch_bounds__(threads, blocks)                \
      name(KILN_ATTN_PARAMS) {                                                 \
    fn<__VA_ARGS__>(KILN_ATTN_ARGS);                                           \
  }                                                                            \
  KILN_ATTN_HOST(name)
#define KILN_ATTN_KERNEL_N(name, threads, fn, ...)                             \
  KILN_ATTN_KERNEL_NB(name, threads, 1, fn, __VA_ARGS__)
#define KILN_ATTN_KERNEL(name, fn, ...)                                        \
  KILN_ATTN_KERNEL_N(name, KILN_ATTN_THREADS, fn, __VA_ARGS__)
// One whose shared memory, |bytes|, is past 48 KiB: launched with that
// much dynamic shared memory (fn's last template argument is |bytes|).
#define KILN_ATTN_KERNEL_DYN(name, threads, bytes, fn, ...)                    \
  extern "C" __global__ void __launch_bounds__(threads, 1)                     \
      name(KILN_ATTN_PARAMS) {                                                 \
    fn<__VA_ARGS__>(KILN_ATTN_ARGS);                                           \
  }                                                                            \
  KILN_ATTN_HOST_DYN(name, bytes)

)cuda";

} // namespace kiln::runtime::cuda
