//===- CudaAttentionMmaKernels.cpp - the mma.sync attention kernels ------===//
//
// The register-fragment attention kernels (sm_80+; CudaAttention.h
// describes them): their PTX primitives (ldmatrix, mma.sync m16n8k16,
// cp.async, emulated on the host by codegen/cuda/CudaEmulation.h), the
// fragment helpers, and the forward, dQ and dK/dV templates, single-warp
// and on warp pairs. CUDA C++ kept as source: attentionKernelSource()
// (CudaAttention.cpp) appends it to kAttentionKernelTemplates, whose
// helpers it uses, when a set it instantiates runs on mma.sync.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudaAttentionKernels.h"

namespace kiln::runtime::cuda {

const char *const kAttentionMmaKernelTemplates = R"cuda(
// The register-fragment path (sm_80+): ldmatrix .x4 and mma.sync
// m16n8k16 with f32 accumulation, through inline PTX on a GPU and
// CudaEmulation.h's emulation of the same instructions on the host. A
// 16-bit pair packs the first element in the low half.
#ifdef KILN_CUDA_EMULATION
static inline void kiln_attn_cp16(void *dst, const void *src, bool valid) { kiln_emulation_cp_async(dst, src, 16, valid ? 16 : 0); }
static inline void kiln_attn_cp_commit() { kiln_emulation_cp_async_commit(); }
template <int N> static inline void kiln_attn_cp_wait() { kiln_emulation_cp_async_wait(N); }
static inline void kiln_attn_ldsm_x4(unsigned r[4], const void *row) { kiln_emulation_ldmatrix_x4(r, row, false); }
static inline void kiln_attn_ldsm_x4_trans(unsigned r[4], const void *row) { kiln_emulation_ldmatrix_x4(r, row, true); }
template <class T>
static inline void kiln_attn_mma(float d[4], const unsigned a[4], unsigned b0, unsigned b1) {
  const unsigned b[2] = {b0, b1};
  kiln_emulation_mma_m16n8k16<T>(d, a, b, d);
}
#else
// 16 bytes from global to shared memory without the registers (sm_80
// cp.async, L2 only); zeros when !valid.
static __device__ __forceinline__ void kiln_attn_cp16(void *dst, const void *src, bool valid) {
  unsigned s = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(valid ? 16 : 0) : "memory");
}
static __device__ __forceinline__ void kiln_attn_cp_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> static __device__ __forceinline__ void kiln_attn_cp_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }
static __device__ __forceinline__ void kiln_attn_ldsm_x4(unsigned r[4], const void *row) {
  unsigned s = (unsigned)__cvta_generic_to_shared(row);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s) : "memory");
}
static __device__ __forceinline__ void kiln_attn_ldsm_x4_trans(unsigned r[4], const void *row) {
  unsigned s = (unsigned)__cvta_generic_to_shared(row);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s) : "memory");
}
template <class T> struct kiln_attn_mma_op;
template <> struct kiln_attn_mma_op<__half> {
  static __device__ __forceinline__ void run(float d[4], const unsigned a[4], unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};
template <> struct kiln_attn_mma_op<__nv_bfloat16> {
  static __device__ __forceinline__ void run(float d[4], const unsigned a[4], unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};
template <class T>
static __device__ __forceinline__ void kiln_attn_mma(float d[4], const unsigned a[4], unsigned b0, unsigned b1) {
  kiln_attn_mma_op<T>::run(d, a, b0, b1);
}
#endif
// kiln_attn_tile through cp.async where its rows move in 16-byte chunks
// (rows past n zero-filled by the copy itself): the copies land by the
// caller's kiln_attn_cp_wait; otherwise kiln_attn_tile's own stores.
template <int NT = KILN_ATTN_THREADS, class T>
static __device__ __forceinline__ void kiln_attn_tile_async(T *s, int ld, const T *g, kiln_index ldg, kiln_index row0, kiln_index n, int rows, int width) {
  if ((width * (int)sizeof(T)) % 16 == 0 && (ldg * (kiln_index)sizeof(T)) % 16 == 0 &&
      (unsigned long long)g % 16 == 0) {
    const int per = 16 / (int)sizeof(T), chunks = width / per;
    for (int e = threadIdx.x; e < rows * chunks; e += NT) {
      int r = e / chunks, c = e % chunks;
      bool in = row0 + r < n;
      kiln_attn_cp16(s + r * ld + c * per, in ? g + (row0 + r) * ldg + c * per : g, in);
    }
    return;
  }
  kiln_attn_tile<NT>(s, ld, g, ldg, row0, n, rows, width);
}

static __device__ __forceinline__ unsigned kiln_attn_pack(const __half *, float lo, float hi) {
  return (unsigned)__half_as_ushort(__float2half_rn(lo)) | (unsigned)__half_as_ushort(__float2half_rn(hi)) << 16;
}
static __device__ __forceinline__ unsigned kiln_attn_pack(const __nv_bfloat16 *, float lo, float hi) {
  return (unsigned)__bfloat16_as_ushort(__float2bfloat16_rn(lo)) | (unsigned)__bfloat16_as_ushort(__float2bfloat16_rn(hi)) << 16;
}

// The register-fragment kernels (sm_80+), FlashAttention-2 style: a block
// of 4 warps takes 64 rows of its walk's other side fixed (query rows for
// the forward and dQ, key rows for dK/dV), each warp 16 of them, and keeps
// everything about its rows in registers: their fragments (loaded once),
// the products of a tile (mma.sync f32 accumulators), the softmax state,
// and the results' accumulators. A product's f32 accumulators, rounded to
// T, are the next product's A fragments in place (the m16n8 accumulator
// layout is the m16k16 A layout), so P and dS never leave the registers.
// Only the tiles the block walks go through shared memory, rows padded by
// 8 elements so the 8 rows one ldmatrix reads fall in distinct banks. A
// warp's lane holds rows g = lane / 4 and g + 8 of its 16, columns c =
// 2 (lane % 4) and c + 1 of each 8-column tile.

// The A fragments of one 16 x 16 step from two 16 x 8 accumulator tiles.
template <class T>
static __device__ __forceinline__ void kiln_attn_afrag(unsigned a[4], const float x[4], const float y[4]) {
  const T *tag = nullptr;
  a[0] = kiln_attn_pack(tag, x[0], x[1]);
  a[1] = kiln_attn_pack(tag, x[2], x[3]);
  a[2] = kiln_attn_pack(tag, y[0], y[1]);
  a[3] = kiln_attn_pack(tag, y[2], y[3]);
}

// The A fragments of the 16 rows at |s| (row stride LD), the first k
// columns (16 per step; matrix m of a step: rows (m % 2) x 8, columns
// (m / 2) x 8).
template <int KS, int LD, class T>
static __device__ __forceinline__ void kiln_attn_arows(unsigned af[][4], const T *s, int k) {
  const int lane = threadIdx.x % 32, lr = lane % 8, lm = lane / 8;
#pragma unroll
  for (int kk = 0; kk < KS; ++kk)
    if (kk * 16 < k)
      kiln_attn_ldsm_x4(af[kk], s + ((lm % 2) * 8 + lr) * LD + kk * 16 + (lm / 2) * 8);
}

// acc (16 x N) += A (16 x k: af) . B where B's columns are |s|'s N rows as
// stored (B = s^T; s has k columns): ldmatrix, two 8-column tiles per
// call (matrix m: rows (m / 2) x 8, columns (m % 2) x 8).
template <int KS, int N, int LD, class T>
static __device__ __forceinline__ void kiln_attn_mm_t(float acc[][4], const unsigned af[][4], const T *s, int k) {
  const int lane = threadIdx.x % 32, lr = lane % 8, lm = lane / 8;
#pragma unroll
  for (int kk = 0; kk < KS; ++kk) {
    if (kk * 16 >= k)
      break;
#pragma unroll
    for (int j = 0; j < N / 16; ++j) {
      unsigned b[4];
      kiln_attn_ldsm_x4(b, s + (j * 16 + (lm / 2) * 8 + lr) * LD + kk * 16 + (lm % 2) * 8);
      kiln_attn_mma<T>(acc[2 * j], af[kk], b[0], b[1]);
      kiln_attn_mma<T>(acc[2 * j + 1], af[kk], b[2], b[3]);
    }
  }
}

// acc (16 x n) += A (16 x 16: af) . B where B is |s|'s 16 rows as stored
// (the first n columns): ldmatrix.trans (matrix m: rows (m % 2) x 8,
// columns (m / 2) x 8).
template <int NMAX, int LD, class T>
static __device__ __forceinline__ void kiln_attn_mm_n_step(float acc[][4], const unsigned af[4], const T *s, int n) {
  const int lane = threadIdx.x % 32, lr = lane % 8, lm = lane / 8;
#pragma unroll
  for (int j = 0; j < NMAX / 16; ++j) {
    if (j * 16 >= n)
      break;
    unsigned b[4];
    kiln_attn_ldsm_x4_trans(b, s + ((lm % 2) * 8 + lr) * LD + j * 16 + (lm / 2) * 8);
    kiln_attn_mma<T>(acc[2 * j], af, b[0], b[1]);
    kiln_attn_mma<T>(acc[2 * j + 1], af, b[2], b[3]);
  }
}

// acc (16 x n) += P (16 x 16 KS) . B where P is the accumulator tiles |p|
// (16 x 8 each) rounded to T, taken as A fragments in place (afrag), and B
// is |s|'s rows as stored (16 KS rows, the first n columns).
template <int KS, int NMAX, int LD, class T>
static __device__ __forceinline__ void kiln_attn_mm_n(float acc[][4], const float p[][4], const T *s, int n) {
#pragma unroll
  for (int kk = 0; kk < KS; ++kk) {
    unsigned af[4];
    kiln_attn_afrag<T>(af, p[2 * kk], p[2 * kk + 1]);
    kiln_attn_mm_n_step<NMAX, LD>(acc, af, s + kk * 16 * LD, n);
  }
}

// Writes the warp's 16 x n accumulator tile |acc| to |dst| (row stride
// |stride|): the lane's rows row0 and row0 + 8 where below |rows|, its
// columns c and c + 1 of each 8-column tile, each value v of row half h
// as value(h, v).
template <int DM, class T, class F>
static __device__ __forceinline__ void kiln_attn_store(T *dst, kiln_index stride, kiln_index row0, kiln_index rows, int n, const float acc[][4], F value) {
  const int c = 2 * (threadIdx.x % 4);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    kiln_index i = row0 + h * 8;
    if (i >= rows)
      continue;
#pragma unroll
    for (int nt = 0; nt < DM / 8; ++nt)
      if (nt * 8 < n)
        for (int e = 0; e < 2; ++e)
          kiln_attn_set(dst, i * stride + nt * 8 + c + e, value(h, acc[nt][2 * h + e]));
  }
}

// A head dim (or value dim) that is a multiple of 8 but not of 16 ends
// half-way through a 16-wide k step, whose upper half then multiplies
// whatever the tiles hold past it. The kernels clear their shared memory
// first (a barrier after), and the tiles' loads and copies write only a
// row's first d (or dv) elements, so those columns are zero in both
// operands. NT: the block's threads.
template <int NT>
static __device__ __forceinline__ void kiln_attn_clear(unsigned char *smem, int bytes) {
  for (int i = threadIdx.x; i < bytes / 16; i += NT)
    *(kiln_attn_chunk *)(smem + 16 * i) = kiln_attn_chunk{{0u, 0u, 0u, 0u}};
  __syncthreads();
}

template <int N>
static __device__ __forceinline__ void kiln_attn_zero(float acc[][4]) {
#pragma unroll
  for (int t = 0; t < N / 8; ++t)
    acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.0f;
}

// The tiles a block walks come in stages: with two (when both fit the
// shared memory), tile i + 1's copies (cp.async, one group per tile pair)
// are in flight while tile i is multiplied. Stage s's two tiles are
// at |base| + 2 s tile elements and after it.
template <int TILE, int LIMIT>
struct kiln_attn_stages {
  static constexpr int count = 4 * TILE <= LIMIT ? 2 : 1;
};

// |v| clamped to [0, n], as an int (the tiles' masks compare 32-bit column
// offsets against a bound per row and tile).
static __device__ __forceinline__ int kiln_attn_clamp(kiln_index v, int n) {
  return v < 0 ? 0 : v > n ? n : (int)v;
}

// Issues rows row0.. of two tiles (|a| from |ga| with |wa| columns, |b|
// from |gb| with |wb|) as one group of copies (NT: the block's threads).
template <int NT = KILN_ATTN_THREADS, class T>
static __device__ __forceinline__ void kiln_attn_issue(T *a, const T *ga, kiln_index lda, int wa, T *b, const T *gb, kiln_index ldb, int wb, int ld, kiln_index row0, kiln_index n, int rows) {
  kiln_attn_tile_async<NT>(a, ld, ga, lda, row0, n, rows, wa);
  kiln_attn_tile_async<NT>(b, ld, gb, ldb, row0, n, rows, wb);
  kiln_attn_cp_commit();
}

// The forward's and dQ's walk over the key tiles: the stage holding tile
// kb (K at the pointer returned, V after it) with its copies landed (wait
// and barrier); with two stages, tile kb + 1's copies are issued first.
// Tile 0 is issued before the walk (kiln_attn_issue into stage 0). NT: the
// block's threads.
template <int STAGES, int BK, int LD, int NT = KILN_ATTN_THREADS, class T>
static __device__ __forceinline__ T *kiln_attn_key_stage(T *tiles, kiln_index kb, kiln_index nKB, const T *k, kiln_index kT, int d, const T *v, kiln_index vT, int dv, kiln_index Tk) {
  T *sK = tiles + 2 * (STAGES == 2 ? kb % 2 : 0) * BK * LD;
  if (STAGES == 1 && kb > 0)
    kiln_attn_issue<NT>(sK, k, kT, d, sK + BK * LD, v, vT, dv, LD, kb * BK, Tk, BK);
  if (STAGES == 2 && kb + 1 < nKB) {
    T *nK = tiles + 2 * ((kb + 1) % 2) * BK * LD;
    kiln_attn_issue<NT>(nK, k, kT, d, nK + BK * LD, v, vT, dv, LD, (kb + 1) * BK, Tk, BK);
    kiln_attn_cp_wait<1>();
  } else {
    kiln_attn_cp_wait<0>();
  }
  __syncthreads();
  return sK;
}

// The warp-pair kernels' fragments: warp w of a pair (side 0: w < NT /
// 64) loads the A fragments of its pair's 16 rows of |g0| (side 0, |w0|
// columns) or |g1| (side 1, |w1| columns), ROWS rows of each from row0
// (zeros past n), staged one after the other through |tiles| (ROWS rows at
// its start). Where a width is no multiple of 16, the block's shared
// memory (|smem|, |bytes|) is cleared first (kiln_attn_clear); where the
// widths also differ, again between and after the rounds, so no operand's
// columns past its width hold the other's values (they would multiply the
// other side's cleared columns, zeros, but an infinite input times zero
// is still NaN).
template <int NT, int ROWS, int DM, int LD, class T>
static __device__ __forceinline__ void kiln_attn_pair_frags(unsigned f[][4], T *tiles, unsigned char *smem, int bytes, const T *g0, kiln_index ld0, int w0, const T *g1, kiln_index ld1, int w1, kiln_index row0, kiln_index n) {
  const int pair = (threadIdx.x / 32) % (NT / 64);
  const bool side = threadIdx.x / 32 >= NT / 64;
  const bool mixed = (w0 | w1) % 16 && w0 != w1;
  if ((w0 | w1) % 16)
    kiln_attn_clear<NT>(smem, bytes);
  kiln_attn_tile<NT>(tiles, LD, g0, ld0, row0, n, ROWS, w0);
  __syncthreads();
  if (!side)
    kiln_attn_arows<DM / 16, LD>(f, tiles + pair * 16 * LD, w0);
  __syncthreads();
  if (mixed)
    kiln_attn_clear<NT>(smem, bytes);
  kiln_attn_tile<NT>(tiles, LD, g1, ld1, row0, n, ROWS, w1);
  __syncthreads();
  if (side)
    kiln_attn_arows<DM / 16, LD>(f, tiles + pair * 16 * LD, w1);
  __syncthreads();
  if (mixed)
    kiln_attn_clear<NT>(smem, bytes);
}

// The single-warp kernels' fragments: each warp loads the A fragments of
// its 16 rows of both |g0| (|w0| columns, into |f0|) and |g1| (|w1|
// columns, into |f1|), ROWS rows of each from row0 (zeros past n), staged
// together through |tiles|, g1's ROWS1 rows after g0's. NT: the block's
// threads.
template <int ROWS, int ROWS1, int DM, int LD, int NT = KILN_ATTN_THREADS, class T>
static __device__ __forceinline__ void kiln_attn_warp_frags(unsigned f0[][4], unsigned f1[][4], T *tiles, const T *g0, kiln_index ld0, int w0, const T *g1, kiln_index ld1, int w1, kiln_index row0, kiln_index n) {
  kiln_attn_tile<NT>(tiles, LD, g0, ld0, row0, n, ROWS, w0);
  kiln_attn_tile<NT>(tiles + ROWS1 * LD, LD, g1, ld1, row0, n, ROWS, w1);
  __syncthreads();
  const int mine = (threadIdx.x / 32) * 16 * LD; // the warp's rows
  kiln_attn_arows<DM / 16, LD>(f0, tiles + mine, w0);
  kiln_attn_arows<DM / 16, LD>(f1, tiles + ROWS1 * LD + mine, w1);
  __syncthreads();
}

// A lane's 4 values of one 16 x 8 accumulator tile, as the warp pairs hand
// them over through shared memory (each lane its own, 16 bytes).
struct __align__(16) kiln_attn_four {
  float x[4];
};

// lse and D_i of the lane's query rows row0 and row0 + 8 (0 past Tq).
static __device__ __forceinline__ void kiln_attn_row_stats(float rowLse[2], float rowDot[2], const float *lse, const float *dot, kiln_index row0, kiln_index Tq) {
  for (int h = 0; h < 2; ++h) {
    bool in = row0 + h * 8 < Tq;
    rowLse[h] = in ? lse[row0 + h * 8] : 0.0f;
    rowDot[h] = in ? dot[row0 + h * 8] : 0.0f;
  }
}

// P = exp(scale s - lse) as the backward kernels recompute it, in the log2
// domain as the forward computes it: |sl2| is scale x log2 e
// (kiln_attn_scale_log2), and lse (natural, as the forward writes it) is
// turned to log2 units in one multiply, so P costs a multiply, an fma and
// ex2 where expf takes a range reduction besides. Every kernel that
// computes P computes it here, so dK/dV's P and dQ's are the same bits
// (the "ds" variants' dS equals the recomputed one).
static __device__ __forceinline__ float kiln_attn_scale_log2(double scale) {
  return (float)(scale * 1.4426950408889634);
}
static __device__ __forceinline__ float kiln_attn_p(float sl2, float s, float lse) {
  const float lse2 = 1.4426950408889634f * lse;
  return exp2f(fmaf(sl2, s, -lse2));
}

// Whether every score of a tile is visible to the lane (a tile off the
// diagonal, away from the sequences' ends: most of them): body(w) runs
// with decltype(w)::value true then, so the mask tests written as
// `decltype(w)::value || test` fold away, and false otherwise. One loop,
// compiled for both; the values are the same either way.
template <bool WHOLE>
struct kiln_attn_whole {
  static constexpr bool value = WHOLE;
};
template <class F>
static __device__ __forceinline__ void kiln_attn_by_mask(bool whole, F body) {
  if (whole)
    body(kiln_attn_whole<true>());
  else
    body(kiln_attn_whole<false>());
}

// The keys the lane's query rows i = row0 and row0 + 8 see in the BK-key
// tile at k0 (columns below hi[h]): those before Tk (causal: up to i);
// none for a row past Tq.
template <int BK>
static __device__ __forceinline__ void kiln_attn_key_bounds(int hi[2], kiln_index row0, kiln_index Tq, kiln_index Tk, kiln_index k0, kiln_index causal) {
  for (int h = 0; h < 2; ++h) {
    kiln_index i = row0 + h * 8;
    hi[h] = i < Tq ? kiln_attn_clamp(causal && i + 1 < Tk ? i + 1 - k0 : Tk - k0, BK) : 0;
  }
}

// dK/dV's walk over the query tiles that see key rows |at| (qFirst ..
// nQB - 1; causal: from the tile of the first key row): stage s holds Q
// and dO at tiles + 2 s BQ LD, lse and D_i at rows + 2 s BQ. Constructing
// it issues tile qFirst; stage(qb) returns the stage holding tile qb with
// its copies landed (wait and barrier), with two stages issuing tile qb +
// 1's copies first. NT: the block's threads.
template <int STAGES, int BQ, int LD, int NT, class T>
struct kiln_attn_query_walk {
  T *tiles;
  float *rows;
  const T *q, *dout;
  const float *lse, *dot;
  kiln_index qT, oT, Tq, qFirst, nQB;
  int d, dv;

  template <int BK>
  __device__ __forceinline__ kiln_attn_query_walk(T *tiles_, float *rows_, const kiln_attn_key_rows<T, BK> &at, kiln_index qT_, kiln_index oT_, kiln_index Tq_, kiln_index causal, int d_, int dv_)
      : tiles(tiles_), rows(rows_), q(at.q), dout(at.dout), lse(at.lse), dot(at.dot), qT(qT_), oT(oT_), Tq(Tq_),
        qFirst(causal ? at.k0 / BQ : 0), nQB((Tq_ + BQ - 1) / BQ), d(d_), dv(dv_) {
    if (qFirst < nQB)
      issue(0, qFirst);
  }

  __device__ __forceinline__ void issue(int s, kiln_index qb) {
    T *sQ = tiles + 2 * s * BQ * LD;
    float *sLse = rows + 2 * s * BQ;
    kiln_attn_issue<NT>(sQ, q, qT, d, sQ + BQ * LD, dout, oT, dv, LD, qb * BQ, Tq, BQ);
    kiln_attn_rows<BQ, NT>(sLse, sLse + BQ, lse, dot, qb * BQ, Tq);
  }
  // Q at the pointer returned, dO after it; lse at |sLse|, D_i after it.
  __device__ __forceinline__ T *stage(kiln_index qb, float *&sLse) {
    const int s = STAGES == 2 ? (int)((qb - qFirst) % 2) : 0;
    if (STAGES == 1 && qb > qFirst)
      issue(0, qb);
    if (STAGES == 2 && qb + 1 < nQB) {
      issue(1 - s, qb + 1);
      kiln_attn_cp_wait<1>();
    } else {
      kiln_attn_cp_wait<0>();
    }
    __syncthreads();
    sLse = rows + 2 * s * BQ;
    return tiles + 2 * s * BQ * LD;
  }
};

// Forward: out, lse (r0_, r1_). One block per (BQ query rows, b*h), a
// warp per 16 of them (64 rows: 4 warps; 128: 8, the "q128" variant, which
// reads each K and V tile once for twice the rows); it
// walks the key blocks (causal: up to the diagonal) with an online softmax
// per row (a row's values in the 4 lanes of a quad, combined by shuffles).
// Scores are kept in the log2 domain (scale x log2 e in one multiply,
// exp2f); lse = m ln 2 + log(l), what the other forwards write.
// LIMIT: the shared memory it may take (past 48 KiB, dynamic: two stages
// where static memory fits one; KILN_ATTN_SMEM).
template <class T, int DM, int BQ, int BK, int LIMIT = KILN_ATTN_SHARED_LIMIT>
static __device__ __forceinline__ void kiln_attn_fwd_mma(KILN_ATTN_PARAMS) {
  constexpr int LD = DM + 8, TILE = BK * LD * (int)sizeof(T);
  constexpr int STAGES = kiln_attn_stages<TILE, LIMIT>::count;
  constexpr int total = 2 * STAGES * TILE, NT = 2 * BQ; // a warp per 16 rows
  static_assert(BQ % 16 == 0 && NT <= 1024, "attention forward (mma): a warp per 16 rows");
  static_assert(BQ <= 2 * STAGES * BK && BK % 16 == 0 && DM % 16 == 0, "attention forward (mma): tiles");
  static_assert(total <= LIMIT, "attention forward (mma): shared memory");
  KILN_ATTN_SMEM(smem, total)
  T *const tiles = (T *)smem;
  const int d = (int)D, dv = (int)DV;
  kiln_index nQB = (Tq + BQ - 1) / BQ;
  kiln_index bh = blockIdx.x / nQB, q0 = (blockIdx.x % nQB) * BQ;
  const T *q = (const T *)q_ + kiln_attn_head(bh, H, qB, qH);
  const T *k = (const T *)k_ + kiln_attn_head(bh, H, kB, kH);
  const T *v = (const T *)v_ + kiln_attn_head(bh, H, vB, vH);
  T *out = (T *)r0_ + kiln_attn_head(bh, H, oB, oH);
  float *lse = (float *)r1_ + bh * Tq;
  const int lane = threadIdx.x % 32, g = lane / 4, c = 2 * (lane % 4);
  float ninf;
  kiln_attn_ninf(ninf);
  const float sc = kiln_attn_scale_log2(scale); // x log2 e
  if ((d | dv) % 16)
    kiln_attn_clear<NT>(smem, total);
  // Q's fragments, staged once through the first stage's tiles.
  kiln_attn_tile<NT>(tiles, LD, q, qT, q0, Tq, BQ, d);
  __syncthreads();
  unsigned qf[DM / 16][4];
  kiln_attn_arows<DM / 16, LD>(qf, tiles + (threadIdx.x / 32) * 16 * LD, d);
  __syncthreads();
  float o[DM / 8][4];
  kiln_attn_zero<DM>(o);
  // Rows g and g + 8: their maxima (log2 domain) and sums.
  float m[2] = {ninf, ninf}, l[2] = {0.0f, 0.0f};
  const kiln_index row0 = q0 + (threadIdx.x / 32) * 16 + g;
  kiln_index nKB = kiln_attn_key_blocks<BQ, BK>(q0, Tk, causal);
  if (nKB > 0)
    kiln_attn_issue<NT>(tiles, k, kT, d, tiles + BK * LD, v, vT, dv, LD, 0, Tk, BK);
  for (kiln_index kb = 0; kb < nKB; ++kb) {
    kiln_index k0 = kb * BK;
    T *sK = kiln_attn_key_stage<STAGES, BK, LD, NT>(tiles, kb, nKB, k, kT, d, v, vT, dv, Tk);
    T *sV = sK + BK * LD;
    float s[BK / 8][4];
    kiln_attn_zero<BK>(s);
    kiln_attn_mm_t<DM / 16, BK, LD>(s, qf, sK, d);
    // Scale and mask (keys past Tk; causal: past the row), the maxima.
    int hi[2];
    for (int h = 0; h < 2; ++h)
      hi[h] = kiln_attn_clamp(causal && row0 + h * 8 + 1 < Tk ? row0 + h * 8 + 1 - k0 : Tk - k0, BK);
    float mNew[2] = {m[0], m[1]};
    kiln_attn_by_mask(hi[0] == BK && hi[1] == BK, [&](auto whole) {
#pragma unroll
      for (int nt = 0; nt < BK / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float x = ninf;
          if (decltype(whole)::value || nt * 8 + c + (e & 1) < hi[e / 2])
            x = sc * s[nt][e];
          s[nt][e] = x;
          mNew[e / 2] = x > mNew[e / 2] ? x : mNew[e / 2];
        }
    });
    // mSub: the maximum P subtracts, 0 for a row that sees no key yet (its
    // scores all -inf), so that a masked score's P is exp2f(-inf) = 0
    // without a test per element (the same bits as testing each).
    float alpha[2], sum[2] = {0.0f, 0.0f}, mSub[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      for (int off = 1; off < 4; off *= 2) {
        float other = __shfl_xor_sync(0xffffffffu, mNew[h], off);
        mNew[h] = other > mNew[h] ? other : mNew[h];
      }
      alpha[h] = mNew[h] == ninf ? 1.0f : exp2f(m[h] - mNew[h]);
      mSub[h] = mNew[h] == ninf ? 0.0f : mNew[h];
    }
#pragma unroll
    for (int nt = 0; nt < BK / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float p = exp2f(s[nt][e] - mSub[e / 2]);
        s[nt][e] = p;
        sum[e / 2] += p;
      }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      for (int off = 1; off < 4; off *= 2)
        sum[h] += __shfl_xor_sync(0xffffffffu, sum[h], off);
      l[h] = l[h] * alpha[h] + sum[h];
      m[h] = mNew[h];
    }
#pragma unroll
    for (int nt = 0; nt < DM / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        o[nt][e] *= alpha[e / 2];
    // O += P V.
    kiln_attn_mm_n<BK / 16, DM, LD>(o, s, sV, dv);
    __syncthreads(); // the stage is read: the next issue may refill it
  }
  kiln_attn_store<DM>(out, oT, row0, Tq, dv, o,
                      [&](int h, float v) { return l[h] > 0 ? v / l[h] : 0.0f; });
  for (int h = 0; h < 2; ++h)
    if (c == 0 && row0 + h * 8 < Tq)
      lse[row0 + h * 8] = l[h] > 0 ? m[h] * 0.6931471805599453f + kiln_attn_log(l[h]) : ninf;
}

// Backward, dQ (r0_): one block per (BQ query rows, b*h), a warp per 16
// of them (64: 4 warps; 128: 8, the "q128" variant), walking the key
// blocks they see: S = Q K^T and dP = dO V^T (Q's and dO's fragments
// loaded once, staged through the tiles: Q's rows, then dO's from row
// max(BQ, BK)), P and dS in place, dQ += dS K.
template <class T, int DM, int BQ, int BK, int LIMIT = KILN_ATTN_SHARED_LIMIT>
static __device__ __forceinline__ void kiln_attn_bwd_dq_mma(KILN_ATTN_PARAMS) {
  constexpr int LD = DM + 8, TILE = BK * LD * (int)sizeof(T);
  constexpr int STAGES = kiln_attn_stages<TILE, LIMIT>::count;
  constexpr int total = 2 * STAGES * TILE, NT = 2 * BQ; // a warp per 16 rows
  constexpr int ROWS1 = BQ > BK ? BQ : BK; // dO's staged rows
  static_assert(BQ % 16 == 0 && NT <= 1024, "attention dQ (mma): a warp per 16 rows");
  static_assert(BQ + ROWS1 <= 2 * STAGES * BK && BK % 16 == 0 && DM % 16 == 0, "attention dQ (mma): tiles");
  static_assert(total <= LIMIT, "attention dQ (mma): shared memory");
  KILN_ATTN_SMEM(smem, total)
  T *const tiles = (T *)smem;
  const int d = (int)D, dv = (int)DV;
  const kiln_attn_query_rows<T, BQ> at(KILN_ATTN_ARGS);
  const kiln_index q0 = at.q0;
  T *dq = (T *)r0_ + at.qAt;
  const int lane = threadIdx.x % 32, g = lane / 4, c = 2 * (lane % 4);
  const float sc = (float)scale;
  const float sl2 = kiln_attn_scale_log2(scale); // P's exponent (kiln_attn_p)
  if ((d | dv) % 16)
    kiln_attn_clear<NT>(smem, total);
  // Q's and dO's fragments, staged once through the first K and V tiles.
  unsigned qf[DM / 16][4], df[DM / 16][4];
  kiln_attn_warp_frags<BQ, ROWS1, DM, LD, NT>(qf, df, tiles, at.q, qT, d, at.dout, oT, dv, q0, Tq);
  const kiln_index row0 = q0 + (threadIdx.x / 32) * 16 + g;
  float rowLse[2], rowDot[2];
  kiln_attn_row_stats(rowLse, rowDot, at.lse, at.dot, row0, Tq);
  float acc[DM / 8][4];
  kiln_attn_zero<DM>(acc);
  kiln_index nKB = kiln_attn_key_blocks<BQ, BK>(q0, Tk, causal);
  if (nKB > 0)
    kiln_attn_issue<NT>(tiles, at.k, kT, d, tiles + BK * LD, at.v, vT, dv, LD, 0, Tk, BK);
  for (kiln_index kb = 0; kb < nKB; ++kb) {
    kiln_index k0 = kb * BK;
    T *sK = kiln_attn_key_stage<STAGES, BK, LD, NT>(tiles, kb, nKB, at.k, kT, d, at.v, vT, dv, Tk);
    T *sV = sK + BK * LD;
    float s[BK / 8][4], dp[BK / 8][4];
    kiln_attn_zero<BK>(s);
    kiln_attn_zero<BK>(dp);
    kiln_attn_mm_t<DM / 16, BK, LD>(s, qf, sK, d);
    kiln_attn_mm_t<DM / 16, BK, LD>(dp, df, sV, dv);
    int hi[2];
    kiln_attn_key_bounds<BK>(hi, row0, Tq, Tk, k0, causal);
    kiln_attn_by_mask(hi[0] == BK && hi[1] == BK, [&](auto whole) {
#pragma unroll
      for (int nt = 0; nt < BK / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float p = 0.0f;
          if (decltype(whole)::value || nt * 8 + c + (e & 1) < hi[e / 2])
            p = kiln_attn_p(sl2, s[nt][e], rowLse[e / 2]);
          s[nt][e] = p * (dp[nt][e] - rowDot[e / 2]);
        }
    });
    kiln_attn_mm_n<BK / 16, DM, LD>(acc, s, sK, d);
    __syncthreads(); // the stage is read: the next issue may refill it
  }
  kiln_attn_store<DM>(dq, qT, row0, Tq, d, acc, [&](int, float x) { return sc * x; });
}

// P^T in place of the warp's S^T tile |s| (its 16 key rows from key0
// against the BQ queries from q0): kiln_attn_p(sl2, s, lse) where the query sees
// the key (query before Tq; causal: from the key on; no query for a key
// past Tk), else 0; then each(nt, e, r) for the element (tile nt, value
// e, query r of the tile).
template <int BQ, class F>
static __device__ __forceinline__ void kiln_attn_pt(float s[][4], kiln_index key0, kiln_index q0, kiln_index Tq, kiln_index Tk, kiln_index causal, float sl2, const float *sLse, F each) {
  const int c = 2 * (threadIdx.x % 4);
  int lo[2], hi[2];
  for (int h = 0; h < 2; ++h) {
    kiln_index j = key0 + h * 8;
    lo[h] = causal ? kiln_attn_clamp(j - q0, BQ) : 0;
    hi[h] = j < Tk ? kiln_attn_clamp(Tq - q0, BQ) : 0;
  }
  kiln_attn_by_mask(lo[0] == 0 && lo[1] == 0 && hi[0] == BQ && hi[1] == BQ, [&](auto whole) {
#pragma unroll
    for (int nt = 0; nt < BQ / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        int r = nt * 8 + c + (e & 1);
        s[nt][e] = decltype(whole)::value || (lo[e / 2] <= r && r < hi[e / 2]) ? kiln_attn_p(sl2, s[nt][e], sLse[r]) : 0.0f;
        each(nt, e, r);
      }
  });
}

// The stored dS tiles ("ds" variants: kiln_attn_bwd_dkdv_mma with DS
// writes them, kiln_attn_bwd_dq_ds_mma reads them): after the workspace's
// D_i (BH x Tq floats, rounded up to 256 bytes), for each head the B x B
// tiles (query tile qb, key tile kb) that the kernels visit (those with a
// key at or before one of their queries under a causal mask, else all), in
// order of qb then kb. A tile holds dS^T rounded to T: its B key rows,
// each of B queries. The tile (qb, kb) of head bh.
template <class T, int B>
static __device__ __forceinline__ T *kiln_attn_ds_tile(void *work, kiln_index BH, kiln_index Tq, kiln_index Tk, kiln_index causal, kiln_index bh, kiln_index qb, kiln_index kb) {
  const kiln_index nQ = (Tq + B - 1) / B, nK = (Tk + B - 1) / B;
  // The tiles of the query tiles before qi.
  auto before = [&](kiln_index qi) -> kiln_index {
    if (!causal)
      return qi * nK;
    return qi <= nK ? qi * (qi + 1) / 2 : nK * (nK + 1) / 2 + (qi - nK) * nK;
  };
  T *tiles = (T *)((char *)work + (BH * Tq * (kiln_index)sizeof(float) + 255) / 256 * 256);
  return tiles + (bh * before(nQ) + before(qb) + kb) * B * B;
}

// Backward, dK and dV (r1_, r2_): one block per (64 key rows, b*h),
// walking the query blocks that see them: S^T = K Q^T and dP^T = V dO^T
// (K's and V's fragments loaded once), P^T and dS^T in place, dV += P^T dO
// and dK += dS^T Q. With DS ("ds" variants), dS^T rounded to T is also
// stored, tile by tile, for kiln_attn_bwd_dq_ds_mma (kiln_attn_ds_tile).
template <class T, int DM, int BQ, int BK, bool DS = false>
static __device__ __forceinline__ void kiln_attn_bwd_dkdv_mma(KILN_ATTN_PARAMS) {
  constexpr int LD = DM + 8, TILE = BQ * LD * (int)sizeof(T);
  constexpr int STAGES =
      kiln_attn_stages<TILE + BQ * (int)sizeof(float), KILN_ATTN_SHARED_LIMIT>::count;
  constexpr int oRows = 2 * STAGES * TILE;
  constexpr int total = oRows + 2 * STAGES * BQ * (int)sizeof(float);
  static_assert(BK == 16 * KILN_ATTN_WARPS, "attention dK/dV (mma): a warp per 16 rows");
  static_assert(BK <= BQ && BQ % 16 == 0 && DM % 16 == 0, "attention dK/dV (mma): tiles");
  static_assert(!DS || BQ == BK, "attention dK/dV (mma): stored dS tiles are square");
  static_assert(total <= KILN_ATTN_SHARED_LIMIT, "attention dK/dV (mma): shared memory");
  __shared__ __align__(16) unsigned char smem[total];
  T *const tiles = (T *)smem;
  float *const rows = (float *)(smem + oRows); // kiln_attn_query_walk's
  const int d = (int)D, dv = (int)DV;
  const kiln_attn_key_rows<T, BK> at(KILN_ATTN_ARGS);
  const kiln_index k0 = at.k0;
  T *dk = (T *)r1_ + at.kAt, *dvOut = (T *)r2_ + at.vAt;
  const int g = threadIdx.x % 32 / 4;
  const float sc = (float)scale;
  const float sl2 = kiln_attn_scale_log2(scale); // P's exponent (kiln_attn_p)
  if ((d | dv) % 16)
    kiln_attn_clear<KILN_ATTN_THREADS>(smem, total);
  // K's and V's fragments, staged once through the first Q and dO tiles.
  unsigned kf[DM / 16][4], vf[DM / 16][4];
  kiln_attn_warp_frags<BK, BQ, DM, LD>(kf, vf, tiles, at.k, kT, d, at.v, vT, dv, k0, Tk);
  const kiln_index key0 = k0 + (threadIdx.x / 32) * 16 + g;
  float accK[DM / 8][4], accV[DM / 8][4];
  kiln_attn_zero<DM>(accK);
  kiln_attn_zero<DM>(accV);
  kiln_attn_query_walk<STAGES, BQ, LD, KILN_ATTN_THREADS, T> walk(tiles, rows, at, qT, oT, Tq, causal, d, dv);
  for (kiln_index qb = walk.qFirst; qb < walk.nQB; ++qb) {
    float *sLse;
    T *sQ = walk.stage(qb, sLse), *sdO = sQ + BQ * LD;
    const float *sDot = sLse + BQ;
    float st[BQ / 8][4], dpt[BQ / 8][4];
    kiln_attn_zero<BQ>(st);
    kiln_attn_zero<BQ>(dpt);
    kiln_attn_mm_t<DM / 16, BQ, LD>(st, kf, sQ, d);
    kiln_attn_mm_t<DM / 16, BQ, LD>(dpt, vf, sdO, dv);
    // P^T, then dS^T = P^T (dP^T - D_i).
    kiln_attn_pt<BQ>(st, key0, qb * BQ, Tq, Tk, causal, sl2, sLse, [&](int nt, int e, int r) {
      dpt[nt][e] = st[nt][e] * (dpt[nt][e] - sDot[r]);
    });
    if (DS) {
      // The warp's 16 key rows of the tile, as dK's A fragments round them.
      T *tile = kiln_attn_ds_tile<T, BQ>(work_, BH, Tq, Tk, causal, at.bh, qb, k0 / BK) +
                (key0 - k0) * BQ + 2 * (threadIdx.x % 4);
      const T *tag = nullptr;
#pragma unroll
      for (int nt = 0; nt < BQ / 8; ++nt)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          *(unsigned *)(tile + h * 8 * BQ + nt * 8) = kiln_attn_pack(tag, dpt[nt][2 * h], dpt[nt][2 * h + 1]);
    }
    kiln_attn_mm_n<BQ / 16, DM, LD>(accV, st, sdO, dv);
    kiln_attn_mm_n<BQ / 16, DM, LD>(accK, dpt, sQ, d);
    __syncthreads(); // the stage is read: the next issue may refill it
  }
  kiln_attn_store<DM>(dk, kT, key0, Tk, d, accK, [&](int, float x) { return sc * x; });
  kiln_attn_store<DM>(dvOut, vT, key0, Tk, dv, accV, [](int, float x) { return x; });
}

// Backward, dQ from the stored dS tiles (r0_; the "ds" variants, after
// kiln_attn_bwd_dkdv_mma with DS): one block per (BQ query rows, b*h), a
// warp per 16 of them, walking the key tiles they see: each K tile and its
// dS^T tile staged together (as the other dQ stages K and V), dS's A
// fragments by ldmatrix.trans, dQ += dS K. S and dP are not computed
// again, so the block does one product per tile where the other dQ does
// three; the same A fragments and products in the same order, so the same
// bits.
template <class T, int DM, int BQ, int BK, int LIMIT = KILN_ATTN_SHARED_LIMIT>
static __device__ __forceinline__ void kiln_attn_bwd_dq_ds_mma(KILN_ATTN_PARAMS) {
  constexpr int LD = DM + 8, TILE = BK * LD * (int)sizeof(T);
  constexpr int STAGES = kiln_attn_stages<TILE, LIMIT>::count;
  constexpr int total = 2 * STAGES * TILE, NT = 2 * BQ; // a warp per 16 rows
  static_assert(BQ == BK && BQ <= DM && BQ % 16 == 0 && DM % 16 == 0, "attention dQ (stored dS): square tiles within a row of the stage");
  static_assert(total <= LIMIT, "attention dQ (stored dS): shared memory");
  KILN_ATTN_SMEM(smem, total)
  T *const tiles = (T *)smem;
  const int d = (int)D;
  const kiln_attn_query_rows<T, BQ> at(KILN_ATTN_ARGS);
  const kiln_index q0 = at.q0;
  T *dq = (T *)r0_ + at.qAt;
  const int lane = threadIdx.x % 32, lr = lane % 8, lm = lane / 8, w = threadIdx.x / 32;
  const float sc = (float)scale;
  if (d % 16)
    kiln_attn_clear<NT>(smem, total);
  // This query tile's dS^T tiles: key rows (kb BK + r) at BQ apart.
  const T *ds = kiln_attn_ds_tile<T, BQ>(work_, BH, Tq, Tk, causal, at.bh, q0 / BQ, 0);
  const kiln_index row0 = q0 + w * 16 + lane / 4;
  float acc[DM / 8][4];
  kiln_attn_zero<DM>(acc);
  kiln_index nKB = kiln_attn_key_blocks<BQ, BK>(q0, Tk, causal);
  if (nKB > 0)
    kiln_attn_issue<NT>(tiles, at.k, kT, d, tiles + BK * LD, ds, (kiln_index)BQ, BQ, LD, 0, Tk, BK);
  for (kiln_index kb = 0; kb < nKB; ++kb) {
    T *sK = kiln_attn_key_stage<STAGES, BK, LD, NT>(tiles, kb, nKB, at.k, kT, d, ds, (kiln_index)BQ, BQ, Tk);
    const T *sDs = sK + BK * LD;
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk) {
      // A = dS (the warp's 16 queries x 16 keys) from dS^T's rows: matrix
      // m holds queries (m % 2) x 8, keys (m / 2) x 8.
      unsigned af[4];
      kiln_attn_ldsm_x4_trans(af, sDs + (kk * 16 + (lm / 2) * 8 + lr) * LD + w * 16 + (lm % 2) * 8);
      kiln_attn_mm_n_step<DM, LD>(acc, af, sK + kk * 16 * LD, d);
    }
    __syncthreads(); // the stage is read: the next issue may refill it
  }
  kiln_attn_store<DM>(dq, qT, row0, Tq, d, acc, [&](int, float x) { return sc * x; });
}

// Backward, dK and dV for the head dims whose kiln_attn_bwd_dkdv_mma would
// spill (a warp there holds K's and V's fragments, both accumulators and
// two score tiles: at 128, 255 registers and more): a block of 8 warps
// takes 64 key rows, two warps per 16 of them, each holding one side.
// Warp w < 4 keeps K's fragments of its rows, computes S^T = K Q^T and
// P^T, hands P^T to its partner w + 4 and accumulates dV += P^T dO; the
// partner keeps V's fragments, computes dP^T = V dO^T, dS^T = P^T (dP^T -
// D_i) and accumulates dK += dS^T Q. Both partners lay out a 16 x BQ tile
// the same way, so P^T passes through shared memory as each lane's own
// values (16 bytes a lane and tile, as computed: the dK side multiplies
// the same f32 P as kiln_attn_bwd_dkdv_mma). The query tiles walked are BQ
// rows, in two stages where they fit beside the hand-over.
template <class T, int DM, int BQ, int BK, int LIMIT = KILN_ATTN_SHARED_LIMIT>
static __device__ __forceinline__ void kiln_attn_bwd_dkdv_mma_pairs(KILN_ATTN_PARAMS) {
  constexpr int NT = 2 * 32 * (BK / 16); // threads
  constexpr int LD = DM + 8, TILE = BQ * LD * (int)sizeof(T);
  constexpr int HANDOVER = BK * BQ * (int)sizeof(float);
  constexpr int STAGES =
      kiln_attn_stages<TILE + BQ * (int)sizeof(float), LIMIT - HANDOVER>::count;
  constexpr int oRows = 2 * STAGES * TILE;
  constexpr int oHand = oRows + 2 * STAGES * BQ * (int)sizeof(float);
  constexpr int total = oHand + HANDOVER;
  static_assert(BK % 16 == 0 && BQ % 16 == 0 && DM % 16 == 0, "attention dK/dV (mma pairs): tiles");
  static_assert(BK <= 2 * STAGES * BQ, "attention dK/dV (mma pairs): K and V staged through the tiles");
  static_assert(total <= LIMIT, "attention dK/dV (mma pairs): shared memory");
  KILN_ATTN_SMEM(smem, total)
  T *const tiles = (T *)smem;
  float *const rows = (float *)(smem + oRows); // kiln_attn_query_walk's
  const int d = (int)D, dv = (int)DV;
  const kiln_attn_key_rows<T, BK> at(KILN_ATTN_ARGS);
  const kiln_index k0 = at.k0;
  const int lane = threadIdx.x % 32, g = lane / 4, c = 2 * (lane % 4);
  const int pair = (threadIdx.x / 32) % (BK / 16);
  const bool dK = threadIdx.x / 32 >= BK / 16; // the partner accumulating dK
  const float sc = (float)scale;
  const float sl2 = kiln_attn_scale_log2(scale); // P's exponent (kiln_attn_p)
  // K's fragments (the dV side), then V's, staged through the query tiles.
  unsigned f[DM / 16][4];
  kiln_attn_pair_frags<NT, BK, DM, LD>(f, tiles, smem, total, at.k, kT, d, at.v, vT, dv, k0, Tk);
  // The lane's hand-over slots: tile nt's 4 values at hand[nt * 32].
  kiln_attn_four *hand = (kiln_attn_four *)(smem + oHand) + pair * (BQ / 8) * 32 + lane;
  const kiln_index key0 = k0 + pair * 16 + g;
  float acc[DM / 8][4];
  kiln_attn_zero<DM>(acc);
  kiln_attn_query_walk<STAGES, BQ, LD, NT, T> walk(tiles, rows, at, qT, oT, Tq, causal, d, dv);
  for (kiln_index qb = walk.qFirst; qb < walk.nQB; ++qb) {
    float *sLse;
    T *sQ = walk.stage(qb, sLse), *sdO = sQ + BQ * LD;
    const float *sDot = sLse + BQ;
    // S^T = K Q^T, or dP^T = V dO^T.
    float s[BQ / 8][4];
    kiln_attn_zero<BQ>(s);
    kiln_attn_mm_t<DM / 16, BQ, LD>(s, f, dK ? sdO : sQ, dK ? dv : d);
    if (!dK) {
      kiln_attn_pt<BQ>(s, key0, qb * BQ, Tq, Tk, causal, sl2, sLse, [](int, int, int) {});
#pragma unroll
      for (int nt = 0; nt < BQ / 8; ++nt)
        hand[nt * 32] = {{s[nt][0], s[nt][1], s[nt][2], s[nt][3]}};
    }
    __syncthreads(); // P^T handed over
    if (dK) {
      // dS^T = P^T (dP^T - D_i).
#pragma unroll
      for (int nt = 0; nt < BQ / 8; ++nt) {
        const kiln_attn_four p = hand[nt * 32];
#pragma unroll
        for (int e = 0; e < 4; ++e)
          s[nt][e] = p.x[e] * (s[nt][e] - sDot[nt * 8 + c + (e & 1)]);
      }
    }
    // dV += P^T dO, or dK += dS^T Q.
    kiln_attn_mm_n<BQ / 16, DM, LD>(acc, s, dK ? sQ : sdO, dK ? d : dv);
    __syncthreads(); // the stage and the hand-over are read
  }
  if (dK)
    kiln_attn_store<DM>((T *)r1_ + at.kAt, kT, key0, Tk, d, acc, [&](int, float x) { return sc * x; });
  else
    kiln_attn_store<DM>((T *)r2_ + at.vAt, vT, key0, Tk, dv, acc, [](int, float x) { return x; });
}

// Backward, dQ (r0_) for the head dims whose kiln_attn_bwd_dq_mma would
// spill (256: Q's and dO's fragments alone take 128 registers, dQ's
// accumulator 128 more): a block of 8 warps takes 64 query rows, two warps
// per 16 of them. Warp w < 4 keeps Q's fragments and computes S = Q K^T
// and P, which it hands to its partner w + 4; the partner keeps dO's,
// computes dP = dO V^T and dS = P (dP - D_i), which it hands back. Each
// accumulates half of dQ += dS K: the head dim's first DM / 2 columns
// (w < 4) or the rest. The key tiles walked are BK rows.
template <class T, int DM, int BQ, int BK, int LIMIT = KILN_ATTN_SHARED_LIMIT>
static __device__ __forceinline__ void kiln_attn_bwd_dq_mma_pairs(KILN_ATTN_PARAMS) {
  constexpr int NT = 2 * 32 * (BQ / 16); // threads
  constexpr int LD = DM + 8, TILE = BK * LD * (int)sizeof(T);
  constexpr int HANDOVER = BQ * BK * (int)sizeof(float);
  constexpr int STAGES = kiln_attn_stages<TILE, LIMIT - HANDOVER>::count;
  constexpr int oHand = 2 * STAGES * TILE;
  constexpr int total = oHand + HANDOVER;
  static_assert(BK % 16 == 0 && BQ % 16 == 0 && DM % 32 == 0, "attention dQ (mma pairs): tiles");
  static_assert(BQ <= 2 * STAGES * BK, "attention dQ (mma pairs): Q and dO staged through the tiles");
  static_assert(total <= LIMIT, "attention dQ (mma pairs): shared memory");
  KILN_ATTN_SMEM(smem, total)
  T *const tiles = (T *)smem;
  const int d = (int)D, dv = (int)DV;
  const kiln_attn_query_rows<T, BQ> at(KILN_ATTN_ARGS);
  const kiln_index q0 = at.q0;
  const int lane = threadIdx.x % 32, g = lane / 4, c = 2 * (lane % 4);
  const int pair = (threadIdx.x / 32) % (BQ / 16);
  const bool dS = threadIdx.x / 32 >= BQ / 16; // the partner computing dP and dS
  const float sc = (float)scale;
  const float sl2 = kiln_attn_scale_log2(scale); // P's exponent (kiln_attn_p)
  // Q's fragments (the S side), then dO's, staged through the key tiles.
  unsigned f[DM / 16][4];
  kiln_attn_pair_frags<NT, BQ, DM, LD>(f, tiles, smem, total, at.q, qT, d, at.dout, oT, dv, q0, Tq);
  kiln_attn_four *hand = (kiln_attn_four *)(smem + oHand) + pair * (BK / 8) * 32 + lane;
  const kiln_index row0 = q0 + pair * 16 + g;
  float rowLse[2], rowDot[2];
  kiln_attn_row_stats(rowLse, rowDot, at.lse, at.dot, row0, Tq);
  // The partner's half of dQ's columns: from |half|, |n| of them.
  const int half = dS ? DM / 2 : 0;
  const int n = kiln_attn_clamp(d - half, DM / 2);
  float acc[DM / 16][4];
  kiln_attn_zero<DM / 2>(acc);
  kiln_index nKB = kiln_attn_key_blocks<BQ, BK>(q0, Tk, causal);
  if (nKB > 0)
    kiln_attn_issue<NT>(tiles, at.k, kT, d, tiles + BK * LD, at.v, vT, dv, LD, 0, Tk, BK);
  for (kiln_index kb = 0; kb < nKB; ++kb) {
    kiln_index k0 = kb * BK;
    T *sK = kiln_attn_key_stage<STAGES, BK, LD, NT>(tiles, kb, nKB, at.k, kT, d, at.v, vT, dv, Tk);
    T *sV = sK + BK * LD;
    // S = Q K^T, or dP = dO V^T.
    float s[BK / 8][4];
    kiln_attn_zero<BK>(s);
    kiln_attn_mm_t<DM / 16, BK, LD>(s, f, dS ? sV : sK, dS ? dv : d);
    if (!dS) {
      // P.
      int hi[2];
      kiln_attn_key_bounds<BK>(hi, row0, Tq, Tk, k0, causal);
#pragma unroll
      for (int nt = 0; nt < BK / 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e)
          s[nt][e] = nt * 8 + c + (e & 1) < hi[e / 2] ? kiln_attn_p(sl2, s[nt][e], rowLse[e / 2]) : 0.0f;
        hand[nt * 32] = {{s[nt][0], s[nt][1], s[nt][2], s[nt][3]}};
      }
    }
    __syncthreads(); // P handed over
    if (dS) {
      // dS = P (dP - D_i), handed back in P's place.
#pragma unroll
      for (int nt = 0; nt < BK / 8; ++nt) {
        const kiln_attn_four p = hand[nt * 32];
#pragma unroll
        for (int e = 0; e < 4; ++e)
          s[nt][e] = p.x[e] * (s[nt][e] - rowDot[e / 2]);
        hand[nt * 32] = {{s[nt][0], s[nt][1], s[nt][2], s[nt][3]}};
      }
    }
    __syncthreads(); // dS handed back
    if (!dS) {
#pragma unroll
      for (int nt = 0; nt < BK / 8; ++nt) {
        const kiln_attn_four x = hand[nt * 32];
        s[nt][0] = x.x[0], s[nt][1] = x.x[1], s[nt][2] = x.x[2], s[nt][3] = x.x[3];
      }
    }
    // The half's dQ += dS K.
    kiln_attn_mm_n<BK / 16, DM / 2, LD>(acc, s, sK + half, n);
    __syncthreads(); // the stage and the hand-over are read
  }
  kiln_attn_store<DM / 2>((T *)r0_ + at.qAt + half, qT, row0, Tq, n, acc, [&](int, float x) { return sc * x; });
}
)cuda";

} // namespace kiln::runtime::cuda
