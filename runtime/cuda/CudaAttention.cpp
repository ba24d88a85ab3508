//===- CudaAttention.cpp - fused scaled-dot-product attention on the GPU --===//
//
// See CudaAttention.h. The kernels' templates are in
// CudaAttentionKernels.cpp (shared, CUDA-core and wmma) and
// CudaAttentionMmaKernels.cpp (mma.sync); the entry points are
// instantiated per dtype and head-dim bucket by attentionKernelSource(),
// which appends one KILN_ATTN_KERNEL line per kernel. This file chooses each shape's
// configuration and plans and queues each thunk's launches (planned at
// load, so a step only queues them).
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudaAttention.h"
#include "runtime/cuda/CubinCache.h"
#include "runtime/cuda/CudaAttentionKernels.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <set>

namespace kiln::runtime::cuda {

namespace {

struct TypeInfo {
  const char *suffix, *type, *acc;
  int bytes, accBytes;
};

const TypeInfo *typeInfo(PkgDType dtype) {
  static const TypeInfo f32{"f32", "float", "float", 4, 4};
  static const TypeInfo f64{"f64", "double", "double", 8, 8};
  static const TypeInfo f16{"f16", "__half", "float", 2, 4};
  static const TypeInfo bf16{"bf16", "__nv_bfloat16", "float", 2, 4};
  switch (dtype) {
  case PkgDType::F32: return &f32;
  case PkgDType::F64: return &f64;
  case PkgDType::F16: return &f16;
  case PkgDType::BF16: return &bf16;
  default: return nullptr;
  }
}

int round32(int bytes) { return (bytes + 31) / 32 * 32; }

// The kernels' shared memory (the same sums as their constexpr offsets).
void sharedBytes(AttentionConfig &c, int s, int a) {
  int bq = c.blockQ, bk = c.blockK, dm = c.dmax, pb = c.tensorCores ? bq * bk : 0;
  c.forwardShared = round32(bq * bk * a) + round32(bq * dm * a) +
                    3 * round32(bq * a) + round32(bq * dm * s) +
                    2 * round32(bk * dm * s) + round32(pb * s);
  c.dkdvShared = 2 * round32(bq * bk * a) + 2 * round32(bk * dm * a) +
                 2 * round32(bq * a) + 2 * round32(bk * dm * s) +
                 2 * round32(bq * dm * s) + round32(pb * s);
  c.dqShared = 2 * round32(bq * bk * a) + round32(bq * dm * a) +
               2 * round32(bq * a) + 2 * round32(bq * dm * s) +
               2 * round32(bk * dm * s) + round32(pb * s);
}

constexpr int kSharedLimit = 49152;

// The register-fragment kernels' tiles (a warp per 16 rows of the side a
// block keeps: 64 query rows and 64-key tiles for the forward and dQ, the
// reverse for dK/dV) and the largest head dim whose dK/dV kernel keeps
// K's and V's fragments, both accumulators and two score tiles in one
// warp's registers without spilling. Past it, dK/dV runs on warp pairs
// (kiln_attn_bwd_dkdv_mma_pairs: twice the threads, each warp one side)
// walking query tiles of kMmaPairsTileQ rows, beside which the hand-over
// of P^T (kMmaTile x kMmaPairsTileQ floats) fits. dQ keeps Q's and dO's
// fragments and its accumulator in one warp up to kMmaSingleWarpDqMaxDim;
// past it (256) on warp pairs too (kiln_attn_bwd_dq_mma_pairs), and there
// the forward and dQ walk key tiles of kMmaWideTileK rows (one stage of
// K and V, 33792 bytes in 16 bits, beside dQ's hand-over).
constexpr int kMmaRows = 16 * (kAttentionThreads / 32), kMmaTile = 64;

// Shared memory of |tile| bytes per stage, two stages where both fit
// |limit| (kiln_attn_stages), for two tiles (K and V, or Q and dO).
int staged(int tile, int limit) { return (4 * tile <= limit ? 2 : 1) * 2 * tile; }
constexpr int kMmaSingleWarpMaxDim = 64, kMmaPairsTileQ = 32;
constexpr int kMmaSingleWarpDqMaxDim = 128, kMmaWideTileK = 32;
// The "q128" forward and dQ: a warp per 16 of 128 query rows, up to head
// dim 64 (where dQ's Q and dO, 128 rows each, stage through the two
// stages of K and V tiles).
constexpr int kMmaWideRows = 128, kMmaWideRowsMaxDim = 64;
// The "occupancy" variants' warps per SM, up to head dim 64: the forward
// (152 registers by default: 3 blocks of 4 warps in 64K registers, or 1 of
// 8) compiled for 16 (at most 128 registers; NVRTC's ptxas needs 124
// without spilling), dQ on 64 rows (193: 2 blocks of 4) for 12 (at most
// 168; it needs 166). dQ on 128 rows stays at one block: capped at 128
// registers for two, it spills.
constexpr int kOccupancyForwardWarps = 16, kOccupancyDqWarps = 12;
constexpr int kOccupancyMaxDim = 64;

AttentionConfig onWarpPairs(AttentionConfig c, const TypeInfo &t);
AttentionConfig withWideRows(AttentionConfig c);
AttentionConfig withOccupancy(AttentionConfig c);
AttentionConfig inTwoStages(AttentionConfig c, const TypeInfo &t);

// The largest tiles (query rows x key rows) whose kernels fit in 48 KiB;
// with |mma|, the register-fragment kernels (their own tiles).
AttentionConfig chooseTiles(const TypeInfo &t, bool wmma, int dmax, bool mma) {
  static const int candidates[][2] = {{32, 32}, {32, 16}, {16, 16}, {16, 8},
                                      {8, 8},   {8, 4},   {4, 4},   {4, 2}};
  AttentionConfig c;
  c.tensorCores = wmma;
  c.dmax = dmax;
  for (const auto &tile : candidates) {
    if (wmma && (tile[0] % 16 || tile[1] % 16))
      continue;
    c.blockQ = tile[0], c.blockK = tile[1];
    sharedBytes(c, wmma ? t.bytes : t.accBytes, t.accBytes);
    if (std::max({c.forwardShared, c.dkdvShared, c.dqShared}) <= kSharedLimit)
      break;
  }
  std::string tag = std::string(t.suffix) + (wmma ? "_wmma" : "_simt") +
                    std::to_string(dmax);
  c.forward = "kiln_attn_fwd_" + tag;
  c.dkdv = "kiln_attn_bwd_dkdv_" + tag;
  c.dq = "kiln_attn_bwd_dq_" + tag;
  c.forwardBlockQ = c.blockQ, c.forwardBlockK = c.blockK;
  if (mma) {
    // Shared memory: two tiles (K and V, or Q and dO) of rows padded by 8
    // (and dK/dV's lse and D_i of its query rows), twice when that fits
    // (kiln_attn_stages: two stages where both fit |limit|), and the warp
    // pairs' hand-over.
    std::string mmaTag = std::string(t.suffix) + "_mma" + std::to_string(dmax);
    int keys = dmax <= kMmaSingleWarpDqMaxDim ? kMmaTile : kMmaWideTileK;
    int tile = keys * (dmax + 8) * t.bytes;
    c.forwardMma = true;
    c.forward = "kiln_attn_fwd_" + mmaTag;
    c.forwardBlockQ = kMmaRows, c.forwardBlockK = keys;
    c.forwardShared = staged(tile, kSharedLimit);
    c.backwardMma = true;
    c.dkdv = "kiln_attn_bwd_dkdv_" + mmaTag;
    c.dq = "kiln_attn_bwd_dq_" + mmaTag;
    c.blockQ = c.blockK = kMmaTile;
    if (dmax <= kMmaSingleWarpDqMaxDim) {
      c.dqShared = staged(tile, kSharedLimit);
    } else {
      int hand = kMmaRows * keys * 4;
      c.dqPairs = true;
      c.dqThreads = 2 * kAttentionThreads;
      c.dqShared = staged(tile, kSharedLimit - hand) + hand;
    }
    if (dmax <= kMmaSingleWarpMaxDim)
      c.dkdvShared = staged(tile + kMmaTile * 4, kSharedLimit);
    else
      c = onWarpPairs(c, t);
  }
  c.dot = std::string("kiln_attn_bwd_dot_") + t.suffix;
  return c;
}

// |c| with dK/dV on warp pairs (kiln_attn_bwd_dkdv_mma_pairs): walking
// query tiles of kMmaPairsTileQ rows beside the hand-over of P^T. Past
// head dim 64 the only mma dK/dV; up to 64 an alternative to the
// single-warp kernel (twice the warps per block, 128 registers a thread
// against 232), its entry point marked "p".
AttentionConfig onWarpPairs(AttentionConfig c, const TypeInfo &t) {
  int hand = kMmaTile * kMmaPairsTileQ * 4;
  if (c.dmax <= kMmaSingleWarpMaxDim)
    c.dkdv += "p";
  c.dkdvPairs = true;
  c.dkdvThreads = 2 * kAttentionThreads;
  c.dkdvShared = staged(kMmaPairsTileQ * ((c.dmax + 8) * t.bytes + 4),
                        kSharedLimit - hand) +
                 hand;
  return c;
}

// |c| (single-warp dQ, up to head dim 64) with the forward and dQ keeping
// 128 query rows per block, 8 warps ("q128"): each K and V tile they walk
// is read from global memory and staged once for twice the rows. The
// shared memory is the same (Q, and dQ's dO, stage through the tiles).
AttentionConfig withWideRows(AttentionConfig c) {
  c.wideRows = true;
  c.forward += "q128";
  c.forwardBlockQ = kMmaWideRows;
  c.forwardThreads = 2 * kMmaWideRows;
  c.dq += "q128";
  c.blockQ = kMmaWideRows;
  c.dqThreads = 2 * kMmaWideRows;
  return c;
}

bool hasWideRows(const AttentionConfig &c) {
  return c.forwardMma && c.backwardMma && !c.dqPairs &&
         c.dmax <= kMmaWideRowsMaxDim;
}

// |c| (up to head dim 64, on mma.sync) with the forward, and dQ on 64
// rows, compiled for more blocks per SM (kOccupancyForwardWarps,
// kOccupancyDqWarps): "b" and the count after their names. The same PTX;
// only ptxas's register allocation differs.
AttentionConfig withOccupancy(AttentionConfig c) {
  c.forwardMinBlocks = kOccupancyForwardWarps * 32 / c.forwardThreads;
  c.forward += "b" + std::to_string(c.forwardMinBlocks);
  if (!c.wideRows) {
    c.dqMinBlocks = kOccupancyDqWarps * 32 / c.dqThreads;
    c.dq += "b" + std::to_string(c.dqMinBlocks);
  }
  return c;
}

bool hasOccupancy(const AttentionConfig &c) {
  return c.forwardMma && c.backwardMma && !c.dqPairs &&
         c.dmax <= kOccupancyMaxDim;
}

// |c| (dK/dV on one warp, dQ on 64 rows, up to head dim 64) with dK/dV
// storing dS and dQ reading it ("ds"; AttentionConfig::storedScores).
// dQ's static shared memory: two stages of a K tile and a dS^T tile, rows
// padded as the other tiles' (BQ <= DM: a dS^T row fits one).
AttentionConfig withStoredScores(AttentionConfig c, const TypeInfo &t) {
  c.storedScores = true;
  c.dkdv += "ds";
  c.dq += "ds";
  c.dqShared = staged(kMmaTile * (c.dmax + 8) * t.bytes, kSharedLimit);
  c.dqDynamic = 0;
  c.dqMinBlocks = 1;
  return c;
}

bool hasStoredScores(const AttentionConfig &c) {
  return c.forwardMma && c.backwardMma && !c.dkdvPairs && !c.dqPairs &&
         !c.wideRows && c.dmax == kMmaTile && c.blockQ == kMmaTile &&
         c.blockK == kMmaTile;
}

// The mma variants up to head dim 64, from |c| (dK/dV on one warp): dK/dV
// on one warp and on warp pairs, each with the forward and dQ on 64 query
// rows then on 128, all of those compiled for one block per SM then for
// more; and dQ from the dS tiles dK/dV stores. c first; none past head dim
// 64.
std::vector<AttentionConfig> smallHeadVariants(const AttentionConfig &c,
                                               const TypeInfo &t) {
  std::vector<AttentionConfig> v{c};
  if (!c.backwardMma || c.dkdvPairs)
    return v;
  v.push_back(onWarpPairs(c, t));
  if (hasWideRows(c))
    for (size_t i = 0, n = v.size(); i < n; ++i)
      v.push_back(withWideRows(v[i]));
  if (hasOccupancy(c))
    for (size_t i = 0, n = v.size(); i < n; ++i)
      v.push_back(withOccupancy(v[i]));
  if (hasStoredScores(c))
    v.push_back(withStoredScores(c, t));
  return v;
}

// The mma tiles' bytes (K's or V's rows of the forward, padded by 8).
int mmaTileBytes(const AttentionConfig &c, const TypeInfo &t) {
  return c.forwardBlockK * (c.dmax + 8) * t.bytes;
}

// |c| with the forward, dK/dV and dQ walking two stages of tiles in
// dynamic shared memory where static memory holds one (beside the warp
// pairs' hand-over): the next tiles' copies in flight while the current
// ones are multiplied. Entry points marked "s2"; |c| unchanged where all
// already have two stages.
AttentionConfig inTwoStages(AttentionConfig c, const TypeInfo &t) {
  int tile = mmaTileBytes(c, t);
  if (c.forwardShared < 4 * tile) {
    c.forward += "s2";
    c.forwardShared = c.forwardDynamic = 4 * tile;
  }
  if (!c.dqPairs && c.dqShared < 4 * tile) {
    c.dq += "s2";
    c.dqShared = c.dqDynamic = 4 * tile;
  }
  if (c.dqPairs) {
    int hand = kMmaRows * c.forwardBlockK * 4;
    if (c.dqShared < 4 * tile + hand) {
      c.dq += "s2";
      c.dqShared = c.dqDynamic = 4 * tile + hand;
    }
  }
  if (c.dkdvPairs) {
    int hand = kMmaTile * kMmaPairsTileQ * 4;
    int rows = kMmaPairsTileQ * ((c.dmax + 8) * t.bytes + 4);
    if (c.dkdvShared < 4 * rows + hand) {
      c.dkdv += "s2";
      c.dkdvShared = c.dkdvDynamic = 4 * rows + hand;
    }
  }
  return c;
}

bool hasTensorCores(PkgDType dtype, unsigned arch) {
  return (dtype == PkgDType::F16 && arch >= 70) ||
         (dtype == PkgDType::BF16 && arch >= 80);
}

// ldmatrix and mma.sync m16n8k16 for f16 and bf16: sm_80 on.
bool hasMma(unsigned arch) { return arch >= 80; }

// Every configuration the source instantiates for |arch| (|mma|: the
// register-fragment kernels where the architecture has them).
std::vector<std::pair<PkgDType, AttentionConfig>> allConfigs(unsigned arch,
                                                             bool mma) {
  std::vector<std::pair<PkgDType, AttentionConfig>> all;
  for (PkgDType dtype : {PkgDType::F32, PkgDType::F64, PkgDType::F16,
                         PkgDType::BF16}) {
    const TypeInfo &t = *typeInfo(dtype);
    for (int dmax : {64, 128, 256})
      all.push_back({dtype, chooseTiles(t, false, dmax, false)});
    if (hasTensorCores(dtype, arch))
      for (int dmax : {64, 128}) {
        all.push_back({dtype, chooseTiles(t, true, dmax, mma && hasMma(arch))});
        // Up to head dim 64, dK/dV on warp pairs as well, and the forward
        // and dQ on 128 query rows and for more blocks per SM
        // (smallHeadVariants); past it, two stages in dynamic shared
        // memory (the autotuner times them).
        AttentionConfig c = all.back().second;
        std::vector<AttentionConfig> small = smallHeadVariants(c, t);
        for (size_t i = 1; i < small.size(); ++i)
          all.push_back({dtype, small[i]});
        AttentionConfig staged2 = inTwoStages(c, t);
        if (c.forwardMma && (staged2.forwardDynamic || staged2.dkdvDynamic ||
                             staged2.dqDynamic))
          all.push_back({dtype, staged2});
      }
    // Head dims past 128: the mma kernels only (wmma's stay within 128).
    if (hasTensorCores(dtype, arch) && mma && hasMma(arch)) {
      all.push_back({dtype, chooseTiles(t, true, 256, true)});
      AttentionConfig staged2 = inTwoStages(all.back().second, t);
      if (staged2.forwardDynamic || staged2.dkdvDynamic || staged2.dqDynamic)
        all.push_back({dtype, staged2});
    }
  }
  return all;
}

} // namespace

AttentionTiles attentionTiles(const AttentionConfig &c) {
  AttentionTiles tiles;
  tiles.forward = {c.forwardBlockQ, c.forwardBlockK};
  if (c.dkdvPairs)
    tiles.dkdv = {kMmaPairsTileQ, kMmaTile};
  else if (c.backwardMma)
    tiles.dkdv = {kMmaTile, kMmaTile};
  else
    tiles.dkdv = {c.blockQ, c.blockK};
  if (c.dqPairs)
    tiles.dq = {kMmaRows, c.forwardBlockK};
  else
    tiles.dq = {c.blockQ, c.blockK};
  return tiles;
}

namespace {
using u128 = unsigned __int128;

// sum over i in [0, n) of floor((a i + b) / m), m > 0, in O(log m)
// (AtCoder Library's floor_sum): no loop over the tiles, however long the
// sequence a package names.
u128 floorSum(u128 n, u128 m, u128 a, u128 b) {
  u128 sum = 0;
  while (true) {
    if (a >= m) {
      sum += (n % 2 == 0 ? n / 2 * (n - 1) : (n - 1) / 2 * n) * (a / m);
      a %= m;
    }
    if (b >= m) {
      sum += n * (b / m);
      b %= m;
    }
    u128 top = a * n + b;
    if (top < m)
      return sum;
    n = top / m;
    b = top % m;
    std::swap(m, a);
  }
}
} // namespace

double attentionTilePairs(AttentionTile tile, int64_t qLen, int64_t kvLen,
                          bool causal) {
  if (tile.queryRows <= 0 || tile.keyRows <= 0 || qLen <= 0 || kvLen <= 0)
    return 0;
  const int64_t bq = tile.queryRows, bk = tile.keyRows;
  const int64_t queryTiles = qLen / bq + (qLen % bq != 0);
  const int64_t keyTiles = kvLen / bk + (kvLen % bk != 0);
  double tiles = double(queryTiles) * double(keyTiles);
  if (causal) {
    // Query tile i sees key tiles up to row i bq + bq - 1: floor((i bq +
    // bq - 1) / bk) + 1 of them, all keyTiles from the first i with
    // i bq + bq - 1 >= (keyTiles - 1) bk.
    __int128 full = __int128(keyTiles - 1) * bk - (bq - 1);
    __int128 first = full <= 0 ? 0 : full / bq + (full % bq != 0);
    int64_t cut = int64_t(std::min<__int128>(queryTiles, first));
    tiles = double(floorSum(u128(cut), u128(bk), u128(bq), u128(bq - 1))) +
            double(cut) + double(queryTiles - cut) * double(keyTiles);
  }
  return tiles * double(bq) * double(bk);
}

namespace {
// |bytes| as a byte count, saturating: sizes a mutated package names may
// not fit (an allocation of UINT64_MAX then fails, naming the bytes).
uint64_t saturatedBytes(long double bytes) {
  constexpr long double most = (long double)UINT64_MAX;
  return bytes >= most ? UINT64_MAX : uint64_t(bytes);
}

bool validSizes(const AttentionParams &p) {
  return p.batch >= 0 && p.heads >= 0 && p.qLen >= 0 && p.kvLen >= 0;
}
} // namespace

uint64_t attentionStoredScoresBytes(const AttentionConfig &c,
                                    const AttentionParams &p, PkgDType dtype) {
  const TypeInfo *t = typeInfo(dtype);
  if (!c.storedScores || !t || !validSizes(p))
    return 0;
  // kiln_attn_ds_tile's layout.
  return saturatedBytes((long double)p.batch * p.heads *
                        attentionTilePairs(attentionTiles(c).dq, p.qLen,
                                           p.kvLen, p.causal) *
                        t->bytes);
}

uint64_t attentionWorkspaceBytes(const AttentionConfig &c,
                                 const AttentionParams &p, PkgDType dtype) {
  const TypeInfo *t = typeInfo(dtype);
  if (!t || !validSizes(p))
    return 0;
  long double bytes = (long double)p.batch * p.heads * p.qLen * t->accBytes;
  if (c.storedScores)
    bytes = std::ceil(bytes / 256) * 256 + attentionStoredScoresBytes(c, p, dtype);
  return saturatedBytes(bytes);
}

bool attentionVariantFits(const AttentionConfig &c, const AttentionParams &p,
                          PkgDType dtype) {
  return !c.storedScores ||
         attentionStoredScoresBytes(c, p, dtype) <= kMaxStoredScoresBytes;
}

StatusOr<AttentionConfig> attentionConfig(PkgDType dtype, int64_t headDim,
                                          int64_t valueDim, unsigned arch,
                                          bool mma) {
  const TypeInfo *t = typeInfo(dtype);
  if (!t)
    return Status::error(std::string("attention: expected f32, f64, f16 or "
                                     "bf16, found ") +
                         pkgDTypeName(dtype));
  if (headDim < 1 || headDim > 256 || valueDim < 1 || valueDim > 256)
    return Status::error("attention: head dims " + std::to_string(headDim) +
                         " and " + std::to_string(valueDim) +
                         ": expected 1 to 256");
  int64_t most = std::max(headDim, valueDim);
  // wmma takes 16 x 16 x 16 tiles, up to head dim 128; the mma kernels' k
  // steps (16 wide) may end half-way, on zeros (kiln_attn_clear), and
  // their stores write 8 columns at a time, up to 256.
  bool wmma = hasTensorCores(dtype, arch) && headDim % 16 == 0 &&
              valueDim % 16 == 0 && most <= 128;
  bool useMma = mma && hasTensorCores(dtype, arch) && hasMma(arch) &&
                headDim % 8 == 0 && valueDim % 8 == 0;
  int dmax = most <= 64 ? 64 : most <= 128 ? 128 : 256;
  return chooseTiles(*t, wmma || useMma, dmax, useMma);
}

StatusOr<std::vector<AttentionConfig>>
attentionConfigVariants(PkgDType dtype, int64_t headDim, int64_t valueDim,
                        unsigned arch, bool mma, int maxSharedPerBlock) {
  StatusOr<AttentionConfig> c =
      attentionConfig(dtype, headDim, valueDim, arch, mma);
  if (!c.isOk())
    return c.status();
  const TypeInfo &t = *typeInfo(dtype);
  std::vector<AttentionConfig> variants = smallHeadVariants(c.value(), t);
  if (c.value().forwardMma) {
    AttentionConfig staged2 = inTwoStages(c.value(), t);
    int most = std::max({staged2.forwardDynamic, staged2.dkdvDynamic,
                         staged2.dqDynamic});
    if (most && most <= std::max(maxSharedPerBlock, kSharedLimit))
      variants.push_back(staged2);
  }
  return variants;
}

std::string attentionKernelSource(unsigned arch,
                                  const std::set<std::string> &only,
                                  bool mma) {
  // The instantiations; the mma.sync templates only where one uses them.
  std::string lines;
  bool mmaKernels = false;
  std::set<std::string> emitted; // variants share their other kernels
  // Entry point |name| running fn<targs> with |threads| per block, its
  // shared memory static or, with |dynamic| bytes, dynamic (then fn's last
  // template argument); each entry point instantiated once.
  auto instantiate = [&](const std::string &name, int threads, int dynamic,
                         const char *fn, const std::string &targs,
                         int minBlocks = 1) {
    if (!emitted.insert(name).second)
      return;
    if (minBlocks > 1 && !dynamic)
      lines += "KILN_ATTN_KERNEL_NB(" + name + ", " + std::to_string(threads) +
               ", " + std::to_string(minBlocks) + ", " + fn + ", " + targs +
               ")\n";
    else if (dynamic)
      lines += "KILN_ATTN_KERNEL_DYN(" + name + ", " + std::to_string(threads) +
               ", " + std::to_string(dynamic) + ", " + fn + ", " + targs +
               ", " + std::to_string(dynamic) + ")\n";
    else if (threads != int(kAttentionThreads))
      lines += "KILN_ATTN_KERNEL_N(" + name + ", " + std::to_string(threads) +
               ", " + fn + ", " + targs + ")\n";
    else
      lines += "KILN_ATTN_KERNEL(" + name + ", " + fn + ", " + targs + ")\n";
  };
  for (const auto &entry : allConfigs(arch, mma)) {
    const AttentionConfig &c = entry.second;
    if (!only.empty() && !only.count(c.forward))
      continue;
    const TypeInfo &t = *typeInfo(entry.first);
    mmaKernels |= c.forwardMma;
    // Template arguments: the CUDA-core and wmma kernels' (type,
    // accumulator, tensor cores, bucket, tiles), the mma kernels' (type,
    // bucket, the rows a block keeps, the rows it walks).
    std::string targs = std::string(t.type) + ", " + t.acc + ", " +
                        (c.tensorCores ? "true" : "false") + ", " +
                        std::to_string(c.dmax) + ", " +
                        std::to_string(c.blockQ) + ", " +
                        std::to_string(c.blockK);
    auto mmaArgs = [&](int keep, int walk) {
      return std::string(t.type) + ", " + std::to_string(c.dmax) + ", " +
             std::to_string(keep) + ", " + std::to_string(walk);
    };
    const int threads = kAttentionThreads;
    const AttentionTiles tiles = attentionTiles(c);
    auto mmaTile = [&](AttentionTile tile) {
      return mmaArgs(tile.queryRows, tile.keyRows);
    };
    if (c.forwardMma)
      instantiate(c.forward, c.forwardThreads, c.forwardDynamic, "kiln_attn_fwd_mma",
                  mmaTile(tiles.forward), c.forwardMinBlocks);
    else
      instantiate(c.forward, threads, 0, "kiln_attn_fwd", targs);
    if (c.dkdvPairs)
      instantiate(c.dkdv, c.dkdvThreads, c.dkdvDynamic,
                  "kiln_attn_bwd_dkdv_mma_pairs", mmaTile(tiles.dkdv));
    else if (c.backwardMma)
      instantiate(c.dkdv, threads, 0, "kiln_attn_bwd_dkdv_mma",
                  mmaTile(tiles.dkdv) + (c.storedScores ? ", true" : ""));
    else
      instantiate(c.dkdv, threads, 0, "kiln_attn_bwd_dkdv", targs);
    if (c.dqPairs)
      instantiate(c.dq, c.dqThreads, c.dqDynamic, "kiln_attn_bwd_dq_mma_pairs",
                  mmaTile(tiles.dq));
    else if (c.storedScores)
      instantiate(c.dq, c.dqThreads, 0, "kiln_attn_bwd_dq_ds_mma",
                  mmaTile(tiles.dq));
    else if (c.backwardMma)
      instantiate(c.dq, c.dqThreads, c.dqDynamic, "kiln_attn_bwd_dq_mma",
                  mmaTile(tiles.dq), c.dqMinBlocks);
    else
      instantiate(c.dq, threads, 0, "kiln_attn_bwd_dq", targs);
    instantiate(c.dot, threads, 0, "kiln_attn_bwd_dot",
                std::string(t.type) + ", " + t.acc);
  }
  return std::string(kAttentionKernelTemplates) +
         (mmaKernels ? kAttentionMmaKernelTemplates : "") + lines;
}

std::vector<std::string> attentionKernelEntryPoints(unsigned arch, bool mma,
                                                    const std::set<std::string> &only) {
  std::vector<std::string> entries;
  for (const auto &[dtype, c] : allConfigs(arch, mma)) {
    if (!only.empty() && !only.count(c.forward))
      continue;
    for (const std::string *e : {&c.forward, &c.dkdv, &c.dq, &c.dot})
      if (std::find(entries.begin(), entries.end(), *e) == entries.end())
        entries.push_back(*e);
  }
  return entries;
}

namespace {

// KILN_CUDA_ATTENTION's value as a request: unset, empty, "mma" or "wmma"
// ask for no trait; otherwise each comma-separated word must name one.
StatusOr<AttentionRequest> parseAttentionRequest(const char *value) {
  AttentionRequest r;
  if (!value || !*value || std::strcmp(value, "mma") == 0 ||
      std::strcmp(value, "wmma") == 0)
    return r;
  std::string list = value;
  for (size_t start = 0; start <= list.size();) {
    size_t end = std::min(list.find(',', start), list.size());
    std::string word = list.substr(start, end - start);
    bool *trait = word == "pairs"       ? &r.pairs
                  : word == "stages"    ? &r.stages
                  : word == "q128"      ? &r.q128
                  : word == "occupancy" ? &r.occupancy
                  : word == "stored"    ? &r.stored
                                        : nullptr;
    if (!trait)
      return Status::error(std::string("KILN_CUDA_ATTENTION=") + value +
                           ": expected mma, wmma, or a comma-separated list "
                           "of pairs, stages, q128, occupancy and stored");
    *trait = true;
    start = end + 1;
  }
  return r;
}

} // namespace

StatusOr<bool> attentionMmaFromEnv() {
  const char *value = std::getenv("KILN_CUDA_ATTENTION");
  StatusOr<AttentionRequest> request = parseAttentionRequest(value);
  if (!request.isOk())
    return request.status();
  return !(value && std::strcmp(value, "wmma") == 0);
}

StatusOr<AttentionRequest> attentionRequestFromEnv() {
  return parseAttentionRequest(std::getenv("KILN_CUDA_ATTENTION"));
}

bool attentionVariantRequested(const AttentionRequest &request,
                               const AttentionConfig &c, bool grad) {
  if (!request.any())
    return true;
  // The traits that matter to the thunk, each as |c| has it.
  bool stages = grad ? c.dkdvDynamic || c.dqDynamic : c.forwardDynamic > 0;
  bool occupancy = grad ? c.dqMinBlocks > 1 : c.forwardMinBlocks > 1;
  bool pairs = grad && c.dkdvPairs && c.dmax <= kMmaSingleWarpMaxDim;
  return stages == request.stages && c.wideRows == request.q128 &&
         occupancy == request.occupancy &&
         (!grad || (pairs == request.pairs &&
                    c.storedScores == request.stored));
}

uint64_t attentionWorkspaceBytes(const LoadedPackage &package,
                                 const CudaDeviceInfo &device, bool mma) {
  uint64_t bytes = 0;
  for (const PackageThunk &t : package.thunks) {
    if (t.kind != ThunkKind::LibraryCall ||
        t.library != LibraryKind::AttentionGrad || !t.hasAttention ||
        t.operands.empty())
      continue;
    const AttentionParams &p = t.attention;
    PkgDType dtype = package.buffers[t.operands[0]].dtype;
    StatusOr<std::vector<AttentionConfig>> configs =
        attentionConfigVariants(dtype, p.headDim, p.valueDim, device.smArch(),
                                mma, device.maxSharedMemoryPerBlockOptin);
    // D_i, and the dS tiles of a "ds" variant within the cap.
    if (configs.isOk())
      for (const AttentionConfig &c : configs.value())
        if (attentionVariantFits(c, p, dtype))
          bytes = std::max(bytes, attentionWorkspaceBytes(c, p, dtype));
  }
  return bytes;
}

StatusOr<std::unique_ptr<CudaAttention>>
CudaAttention::create(const LoadedPackage &package, CudaApi &api,
                      const CudaDeviceInfo &device) {
  StatusOr<bool> mma = attentionMmaFromEnv();
  if (!mma.isOk())
    return mma.status();
  std::unique_ptr<CudaAttention> attention(new CudaAttention(package, api, device));
  attention->mma_ = mma.value();
  StatusOr<AttentionRequest> request = attentionRequestFromEnv();
  if (!request.isOk())
    return request.status();
  attention->request_ = request.value();
  std::set<std::string> used; // the sets of kernels the thunks use
  for (size_t i = 0; i < package.thunks.size(); ++i) {
    const PackageThunk &t = package.thunks[i];
    if (t.kind != ThunkKind::LibraryCall ||
        (t.library != LibraryKind::Attention &&
         t.library != LibraryKind::AttentionGrad))
      continue;
    if (!t.hasAttention)
      return Status::error("thunk " + std::to_string(i) + " (" +
                           pkgLibraryKindName(t.library) +
                           "): expected attention parameters");
    const AttentionParams &p = t.attention;
    if (t.operands.empty())
      continue; // plan() says what is wrong
    PkgDType dtype = package.buffers[t.operands[0]].dtype;
    StatusOr<std::vector<AttentionConfig>> configs = attentionConfigVariants(
        dtype, p.headDim, p.valueDim, device.smArch(), attention->mma_,
        device.maxSharedMemoryPerBlockOptin);
    if (configs.isOk())
      for (const AttentionConfig &c : configs.value())
        used.insert(c.forward);
  }
  uint64_t bytes = attentionWorkspaceBytes(package, device, attention->mma_);
  // No kernels to run (no thunk with a supported shape): nothing to load.
  if (!used.empty()) {
    unsigned arch = device.smArch();
    std::string source = attentionKernelSource(arch, used, attention->mma_);
    if (Status s = attention->kernels_.load(source, arch); !s.isOk())
      return s;
    // The kernels' identity for the autotuning cache: another Kiln may time
    // differently.
    char text[48];
    std::snprintf(text, sizeof(text), "kiln attention kernels %016llx",
                  static_cast<unsigned long long>(fnv1a(source)));
    attention->library_ = text;
  }
  if (bytes) {
    if (Status s = api.malloc(&attention->workspace_, bytes); !s.isOk())
      return Status::error("the attention workspace (" + std::to_string(bytes) +
                           " bytes): " + s.message());
    attention->workspaceBytes_ = bytes;
  }
  return attention;
}

CudaAttention::~CudaAttention() {
  if (workspace_)
    api_.free(workspace_);
}

Status CudaAttention::plan(size_t index, const std::vector<void *> &args) {
  const PackageThunk &t = package_.thunks[index];
  bool grad = t.library == LibraryKind::AttentionGrad;
  const char *name = pkgLibraryKindName(t.library);
  bool packed = t.hasAttention &&
                t.attention.layout == AttentionLayout::PackedBTHD;
  // BHTD: q, k, v (grad: then out, lse, dout); results out, lse (grad: dq,
  // dk, dv). PackedBTHD: qkv (grad: then out, lse, dout); results out, lse
  // (grad: dqkv).
  size_t operands = packed ? (grad ? 4 : 1) : (grad ? 6 : 3);
  size_t results = packed ? (grad ? 1 : 2) : (grad ? 3 : 2);
  if (!t.hasAttention || t.operands.size() != operands ||
      t.results.size() != results || args.size() != operands + results)
    return Status::error(std::string(name) + ": expected " +
                         std::to_string(operands) + " operands and " +
                         std::to_string(results) + " results with parameters");
  const AttentionParams &p = t.attention;
  if (packed && (p.headDim != p.valueDim || p.qLen != p.kvLen))
    return Status::error(std::string(name) + ": the packed layout needs "
                         "head_dim == value_dim and q_len == kv_len");
  PkgDType dtype = package_.buffers[t.operands[0]].dtype;
  StatusOr<std::vector<AttentionConfig>> all = attentionConfigVariants(
      dtype, p.headDim, p.valueDim, device_.smArch(), mma_,
      device_.maxSharedMemoryPerBlockOptin);
  if (!all.isOk())
    return all.status();
  // The variants that differ for this thunk: a forward's forward kernel, a
  // backward's dK/dV and dQ kernels (with KILN_CUDA_ATTENTION's traits:
  // only those it asks for, where there are such).
  auto forced = [&](const AttentionConfig &c) {
    return attentionVariantRequested(request_, c, grad);
  };
  bool anyForced = std::any_of(all.value().begin(), all.value().end(), forced);
  std::vector<AttentionConfig> configs;
  std::set<std::string> seen;
  for (const AttentionConfig &c : all.value()) {
    if (anyForced && !forced(c))
      continue;
    // A "ds" variant whose dS tiles would pass kMaxStoredScoresBytes is
    // not offered (create() did not size the workspace for it).
    if (grad && !attentionVariantFits(c, p, dtype))
      continue;
    if (seen.insert(grad ? c.dkdv + " " + c.dq : c.forward).second)
      configs.push_back(c);
  }
  if (configs.empty())
    return Status::error(std::string(name) +
                         ": KILN_CUDA_ATTENTION asks for the \"ds\" variant, "
                         "whose dS tiles would take more than " +
                         std::to_string(kMaxStoredScoresBytes) +
                         " bytes of workspace for this shape");
  int64_t bh = p.batch * p.heads;
  if (p.batch < 0 || p.heads < 0 || p.qLen < 0 || p.kvLen < 0)
    return Status::error(std::string(name) + ": negative sizes");

  auto scalar = [](int64_t v) { return reinterpret_cast<void *>(v); };
  void *scaleBits = nullptr;
  std::memcpy(&scaleBits, &p.scale, sizeof(double));
  // The kernels' parameters (KILN_ATTN_PARAMS): q, k, v, out, lse, dout,
  // r0, r1, r2, work, BH, Tq, Tk, D, DV, scale, causal, H, then the batch,
  // head and row strides (elements) of q, k, v and out.
  std::vector<void *> common(30, nullptr);
  const int64_t H = p.heads, D = p.headDim, DV = p.valueDim;
  if (!packed) {
    for (int i = 0; i < 3; ++i)
      common[i] = args[i];
    if (grad) {
      common[3] = args[3], common[4] = args[4], common[5] = args[5];
      common[6] = args[6], common[7] = args[7], common[8] = args[8];
    } else {
      common[6] = args[3], common[7] = args[4];
    }
    const int64_t Tq = p.qLen, Tk = p.kvLen;
    const int64_t strides[12] = {H * Tq * D,  Tq * D,  D,   // q, dq
                                 H * Tk * D,  Tk * D,  D,   // k, dk
                                 H * Tk * DV, Tk * DV, DV,  // v, dv
                                 H * Tq * DV, Tq * DV, DV}; // out, dout
    for (int i = 0; i < 12; ++i)
      common[18 + i] = scalar(strides[i]);
  } else {
    // q, k and v are the thirds of each qkv row [3, H, D] (likewise dq, dk
    // and dv of dqkv's); out and dout rows are [H, D].
    auto third = [&](void *base, int i) {
      return reinterpret_cast<void *>(reinterpret_cast<uintptr_t>(base) +
                                      uint64_t(i * H * D) *
                                          pkgBytesPerElement(dtype));
    };
    for (int i = 0; i < 3; ++i)
      common[i] = third(args[0], i);
    if (grad) {
      common[3] = args[1], common[4] = args[2], common[5] = args[3];
      for (int i = 0; i < 3; ++i)
        common[6 + i] = third(args[4], i);
    } else {
      common[6] = args[1], common[7] = args[2];
    }
    const int64_t row = 3 * H * D, T = p.qLen;
    const int64_t strides[12] = {T * row,   D, row,    // q, dq
                                 T * row,   D, row,    // k, dk
                                 T * row,   D, row,    // v, dv
                                 T * H * D, D, H * D}; // out, dout
    for (int i = 0; i < 12; ++i)
      common[18 + i] = scalar(strides[i]);
  }
  if (grad)
    common[9] = workspace_;
  common[10] = scalar(bh), common[11] = scalar(p.qLen);
  common[12] = scalar(p.kvLen), common[13] = scalar(p.headDim);
  common[14] = scalar(p.valueDim), common[15] = scaleBits;
  common[16] = scalar(p.causal ? 1 : 0), common[17] = scalar(H);

  std::vector<std::vector<KernelLaunch>> variants;
  std::vector<KernelLaunch> launches;
  Status failed = Status::ok();
  auto launch = [&](const std::string &entry, uint64_t blocks,
                    uint32_t threads, int dynamicBytes = 0) {
    if (!failed.isOk() || blocks == 0)
      return; // an empty grid: nothing to compute
    if (blocks > 0x7fffffffu) {
      failed = Status::error(std::string(name) + ": " + std::to_string(blocks) +
                             " blocks for " + entry + " exceed the grid");
      return;
    }
    StatusOr<CudaFunction> fn = kernels_.function(entry);
    if (!fn.isOk()) {
      failed = fn.status();
      return;
    }
    // Past 48 KiB of shared memory the function opts in, once.
    if (dynamicBytes > kSharedLimit && optedIn_.insert(entry).second)
      if (Status s = api_.funcSetMaxDynamicSharedMemory(fn.value(),
                                                        uint32_t(dynamicBytes));
          !s.isOk()) {
        failed = Status::error("kernel " + entry + ": " + s.message());
        return;
      }
    KernelLaunch l;
    l.function = fn.value();
    l.entry = entry;
    l.grid = static_cast<uint32_t>(blocks);
    l.block = threads;
    l.sharedBytes = uint32_t(dynamicBytes);
    l.args = common;
    launches.push_back(std::move(l));
  };
  for (const AttentionConfig &c : configs) {
    uint64_t qBlocks = uint64_t(bh) * ((p.qLen + c.blockQ - 1) / c.blockQ);
    uint64_t forwardBlocks =
        uint64_t(bh) * ((p.qLen + c.forwardBlockQ - 1) / c.forwardBlockQ);
    uint64_t kBlocks = uint64_t(bh) * ((p.kvLen + c.blockK - 1) / c.blockK);
    if (!grad) {
      launch(c.forward, forwardBlocks, c.forwardThreads, c.forwardDynamic);
    } else {
      uint64_t rows = uint64_t(bh) * p.qLen;
      uint64_t cap = uint64_t(std::max(device_.multiprocessors, 1)) *
                     (2048 / kAttentionThreads);
      launch(c.dot, std::min<uint64_t>((rows + kAttentionThreads - 1) /
                                           kAttentionThreads,
                                       cap),
             kAttentionThreads);
      launch(c.dkdv, kBlocks, c.dkdvThreads, c.dkdvDynamic);
      launch(c.dq, qBlocks, c.dqThreads, c.dqDynamic);
    }
    if (!failed.isOk())
      return failed;
    variants.push_back(std::move(launches));
    launches.clear();
  }
  Plan &plan = plans_[index];
  plan.variants = std::move(variants);
  plan.names.clear();
  for (const AttentionConfig &c : configs)
    plan.names.push_back(grad ? c.dkdv + " + " + c.dq : c.forward);
  plan.selected = 0;
  return Status::ok();
}

int CudaAttention::variantCount(size_t index) const {
  auto found = plans_.find(index);
  return found == plans_.end() ? 0 : int(found->second.variants.size());
}

std::string CudaAttention::variantName(size_t index, int variant) const {
  auto found = plans_.find(index);
  if (found == plans_.end() || variant < 0 ||
      variant >= int(found->second.names.size()))
    return "";
  return found->second.names[variant];
}

std::string CudaAttention::shapeKey(size_t index) const {
  const PackageThunk &t = package_.thunks[index];
  const AttentionParams &a = t.attention;
  char scale[40];
  std::snprintf(scale, sizeof(scale), "%.17g", a.scale);
  return std::string(t.library == LibraryKind::Attention ? "attention forward "
                                                         : "attention backward ") +
         pkgDTypeName(package_.buffers[t.operands[0]].dtype) +
         " batch=" + std::to_string(a.batch) +
         " heads=" + std::to_string(a.heads) + " q=" + std::to_string(a.qLen) +
         " kv=" + std::to_string(a.kvLen) + " d=" + std::to_string(a.headDim) +
         " dv=" + std::to_string(a.valueDim) + (a.causal ? " causal" : "") +
         (a.layout == AttentionLayout::PackedBTHD ? " packed" : "") +
         " scale=" + scale;
}

Status CudaAttention::selectVariant(size_t index, int variant) {
  auto found = plans_.find(index);
  if (found == plans_.end() || variant < 0 ||
      variant >= int(found->second.variants.size()))
    return Status::error("attention: thunk " + std::to_string(index) +
                         " has no variant " + std::to_string(variant));
  found->second.selected = variant;
  return Status::ok();
}

Status CudaAttention::run(size_t index, CudaStream stream) {
  auto found = plans_.find(index);
  if (found == plans_.end())
    return Status::error("the attention was not planned");
  for (const KernelLaunch &l :
       found->second.variants[found->second.selected]) {
    Status s = kernels_.launch(l, stream);
    if (!s.isOk())
      return Status::error("kernel " + l.entry + ": " + s.message());
  }
  return Status::ok();
}

} // namespace kiln::runtime::cuda
