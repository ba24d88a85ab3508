//===- CudaAttention.h - fused scaled-dot-product attention on the GPU -*- C++ -*-===//
//
// The GPU side of the Attention and AttentionGrad library calls
// (runtime/package/Package.h AttentionParams; q [B,H,Tq,D], k [B,H,Tk,D],
// v [B,H,Tk,Dv], out [B,H,Tq,Dv], lse [B,H,Tq]), FlashAttention-2 style:
// the [Tq, Tk] scores never reach global memory.
//
// Layouts: the kernels address q, k, v, out, dout and the gradients
// through batch, head and row strides (lse and the D_i workspace stay
// [B,H,Tq] contiguous), so one set of kernels serves both of
// AttentionLayout's: BHTD (the shapes above, rows of D contiguous) and
// PackedBTHD, where q, k and v are the thirds of each [3,H,D] row of one
// qkv [B,T,3,H,D] buffer (k at qkv + H*D elements, v at qkv + 2*H*D; dq, dk
// and dv likewise of dqkv) and out and dout are [B,T,H,D], as the qkv
// GEMM writes them and the projection GEMM reads them: no transposes
// around the attention. The same tiles in the same order either way, so
// the two layouts give the same bits. 16-byte loads wherever the row
// stride and the base are 16-byte aligned (packed D=64 bf16 is).
//
//   forward:  one block per (query block, b*h); it walks the key blocks
//             (causal: only up to the diagonal), keeps the running row
//             maximum and sum (online softmax) and the output tile, and
//             writes out and lse = m + log(l). On tensor cores from sm_80
//             (kiln_attn_fwd_mma) each warp keeps its 16 query rows' Q
//             fragments, scores, softmax state and output in registers
//             (ldmatrix, mma.sync m16n8k16; P never leaves the registers),
//             64-key tiles (32 past head dim 128) arriving by cp.async, the
//             next in flight while the current is multiplied where two
//             stages fit in 48 KiB (past head dim 64, a variant the
//             autotuner times takes two stages in dynamic shared memory,
//             "s2", and so do dQ and, past 128, dK/dV); otherwise the
//             state lives in shared memory.
//   backward: three kernels, no atomics, so every run gives the same bits
//             (on tensor cores from sm_80, dkdv and dq keep their 64 rows'
//             fragments and accumulators in registers as the mma forward
//             does; past head dim 64, dkdv on warp pairs, one warp of a
//             pair accumulating dV and the other dK, P^T handed over
//             through shared memory, and up to 64 as a variant the
//             autotuner times against the single-warp kernel; past 128,
//             dq too):
//             dot  D_i = sum_e dout_ie out_ie into a workspace;
//             dkdv one block per (key block, b*h) walks the query blocks,
//                  recomputing P from lse, accumulating dV += P^T dO and
//                  dK += dS^T Q (dS = P (dO V^T - D));
//             dq   one block per (query block, b*h) walks the key blocks,
//                  accumulating dQ += dS K (computing S and dP again for
//                  dS; up to head dim 64, a variant the autotuner times,
//                  "ds", has dkdv store dS tile by tile in the workspace
//                  and dq read it: AttentionConfig::storedScores).
//
// f16 and bf16 multiply their tiles on tensor cores: through mma.sync from
// sm_80 (head and value dims multiples of 8, up to 256), else through
// nvcuda::wmma (multiples of 16 up to 128; f16 from sm_70, bf16 from
// sm_80) with f32 accumulation, softmax in f32; every other case (f32, f64,
// other head dims up to 256) multiplies on CUDA cores, in f32 (f64 for
// f64). Tiles are chosen per head dim so that a block's static shared
// memory stays within 48 KiB (attentionConfig()). The kernels are CUDA C++
// kept as source here (attentionKernelSource()); the sets a package uses
// are compiled once per process, architecture and set through the CudaApi
// table's NVRTC (cached) and loaded per executable; every kernel takes the
// same parameters (pointers, 64-bit integers and the scale as a double), so
// tests run them on the host under codegen/cuda/CudaEmulation.h (each NAME
// has a NAME_host wrapper there; the emulation provides ldmatrix and
// mma.sync with their PTX lane mappings).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_CUDA_CUDAATTENTION_H
#define KILN_RUNTIME_CUDA_CUDAATTENTION_H

#include "runtime/Status.h"
#include "runtime/cuda/CudaApi.h"
#include "runtime/cuda/RuntimeKernels.h"
#include "runtime/package/Package.h"

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace kiln::runtime::cuda {

// Threads per block of every attention kernel but those on warp pairs
// and the "q128" forward and dQ (AttentionConfig's forwardThreads,
// dkdvThreads, dqThreads).
constexpr uint32_t kAttentionThreads = 128;

// The kernels and tiles one attention shape uses.
struct AttentionConfig {
  bool tensorCores = false; // through mma.sync (forwardMma) or wmma
  int dmax = 0;             // the head-dim bucket (64, 128, 256)
  int blockQ = 0, blockK = 0;
  // The forward and the backward (dK/dV and dQ) on mma.sync register
  // fragments (tensor cores from sm_80), and the forward's tiles (blockQ x
  // blockK, the backward's, unless the forward is mma; then forwardBlockK
  // is also the key tile dQ walks).
  bool forwardMma = false, backwardMma = false;
  int forwardBlockQ = 0, forwardBlockK = 0;
  // dK/dV on warp pairs (the mma backward past head dim 64: one warp of a
  // pair accumulates dV, the other dK), and dQ (past 128: one warp of a
  // pair computes P, the other dS, each accumulates half of dQ's columns),
  // with their threads per block.
  bool dkdvPairs = false, dqPairs = false;
  int dkdvThreads = kAttentionThreads, dqThreads = kAttentionThreads;
  // The forward's threads: 128 (a warp per 16 of its 64 query rows) or,
  // in the "q128" variant (wideRows; dQ too, its blockQ 128), 256.
  int forwardThreads = kAttentionThreads;
  bool wideRows = false;
  // The blocks per SM the forward and dQ are compiled for
  // (__launch_bounds__'s second argument): 1, or in the "occupancy"
  // variants ("...b4", "...b2", "...b3") as many as 16 forward warps and
  // 12 dQ warps make, which caps their registers (ptxas fits them without
  // spilling up to head dim 64).
  int forwardMinBlocks = 1, dqMinBlocks = 1;
  // The "ds" variant (up to head dim 64, dK/dV on one warp, dQ on 64
  // rows): dK/dV also stores dS, rounded to the input type, tile by tile
  // in the workspace after D_i (attentionWorkspaceBytes), and dQ reads
  // it, dQ += dS K, instead of computing S and dP again: one product per
  // tile in place of three, for the tiles' bytes written and read.
  bool storedScores = false;
  std::string forward, dot, dkdv, dq; // entry points
  // Static shared memory of each kernel, in bytes.
  int forwardShared = 0, dkdvShared = 0, dqShared = 0;
  // The forward, dK/dV and dQ kernels' shared memory when it is dynamic
  // (past 48 KiB: two stages where static memory fits one; the "s2"
  // variants), else 0.
  int forwardDynamic = 0, dkdvDynamic = 0, dqDynamic = 0;
};

// The tiles each of a configuration's kernels multiplies, query rows x key
// rows (the kernels' template arguments BQ and BK): the forward's and
// dQ's (a block keeps BQ query rows and walks BK-row key tiles), and
// dK/dV's (a block keeps BK key rows and walks BQ-row query tiles).
struct AttentionTile {
  int queryRows = 0, keyRows = 0;
};
struct AttentionTiles {
  AttentionTile forward, dkdv, dq;
};
AttentionTiles attentionTiles(const AttentionConfig &c);

// The query x key pairs a kernel on |tile| multiplies over a |qLen| x
// |kvLen| score matrix, per batch and head: whole tiles (the last ones
// padded past qLen or kvLen, their rows masked), and with a causal mask
// only the tiles that hold a key at or before one of their query rows
// (the bound of the forward's and dQ's key walk, and of dK/dV's query
// walk). A tile the diagonal cuts is multiplied whole.
double attentionTilePairs(AttentionTile tile, int64_t qLen, int64_t kvLen,
                          bool causal);

// The dS tiles a "ds" variant |c| stores for an AttentionGrad thunk with
// |p| in |dtype|: one per tile the kernels visit (attentionTiles(c).dq's
// rows x keys, in |dtype|); 0 for any other configuration or a type the
// kernels do not take. Saturates rather than wrapping.
uint64_t attentionStoredScoresBytes(const AttentionConfig &c,
                                    const AttentionParams &p, PkgDType dtype);
// The workspace such a thunk needs under |c|: D_i (an f32 per query row of
// each head; f64 for f64), and for a "ds" variant after it, rounded up to
// 256 bytes, its dS tiles. 0 for a type the kernels do not take.
uint64_t attentionWorkspaceBytes(const AttentionConfig &c,
                                 const AttentionParams &p, PkgDType dtype);
// The most a "ds" variant may ask of the workspace for its dS tiles: past
// it (long sequences, many heads), the variant is not offered.
constexpr uint64_t kMaxStoredScoresBytes = uint64_t(1) << 30;
// Whether |c| is offered for |p| in |dtype|: every configuration but a
// "ds" variant whose dS tiles would pass kMaxStoredScoresBytes.
bool attentionVariantFits(const AttentionConfig &c, const AttentionParams &p,
                          PkgDType dtype);
// The workspace CudaAttention::create allocates for |package| on |device|
// (the kernels' tensor-core form when |mma|): the largest of its attention
// backward thunks' over the variants each may run. 0 without one.
uint64_t attentionWorkspaceBytes(const LoadedPackage &package,
                                 const CudaDeviceInfo &device, bool mma);

// The configuration for |dtype| and head dims |headDim| / |valueDim| on
// sm_|arch| (attentionConfigVariants' first); fails for a type other than f32, f64, f16, bf16, or a head
// dim outside 1..256. |mma| false: the wmma kernels even where mma.sync
// kernels exist (KILN_CUDA_ATTENTION=wmma).
StatusOr<AttentionConfig> attentionConfig(PkgDType dtype, int64_t headDim,
                                          int64_t valueDim, unsigned arch,
                                          bool mma = true);
// Every way to run that shape, the default first; CudaExecutable's
// autotuner times them (Autotune.h). On mma.sync: up to head dim 64, dK/dV
// on one warp per 16 key rows and on warp pairs ("..._mma64p"), each with
// the forward and dQ on 64 query rows per block (4 warps) and on 128 (8
// warps, "...q128": each K and V tile read once for twice the rows), and
// each of those compiled for one block per SM and for more ("...bN": the
// forward 16 warps per SM, dQ on 64 rows 12, in fewer registers); past it,
// the forward, dQ and (past 128) dK/dV walking one stage of tiles in
// static shared memory and two stages in dynamic shared memory ("...s2",
// over 48 KiB) where the device allows that much per block
// (|maxSharedPerBlock|, 0: 48 KiB).
StatusOr<std::vector<AttentionConfig>>
attentionConfigVariants(PkgDType dtype, int64_t headDim, int64_t valueDim,
                        unsigned arch, bool mma = true,
                        int maxSharedPerBlock = 232448);

// The kernels' CUDA C++ for sm_|arch| (the tensor-core kernels only where
// the architecture has them), one translation unit; with |only|, just the
// configurations whose forward entry point it names (and their backward
// kernels): CudaAttention compiles the sets its package uses.
std::string attentionKernelSource(unsigned arch,
                                  const std::set<std::string> &only = {},
                                  bool mma = true);
// Every entry point attentionKernelSource(|arch|, |only|, |mma|) defines.
std::vector<std::string>
attentionKernelEntryPoints(unsigned arch, bool mma = true,
                           const std::set<std::string> &only = {});

// KILN_CUDA_ATTENTION from the environment: unset, empty or "mma" (the
// register-fragment kernels where the device has them: true); "wmma" (the
// wmma kernels there instead: false, to compare the two or to step past a
// problem in one); or a comma-separated list of the mma variants' traits
// (true; AttentionRequest): "pairs" (dK/dV on warp pairs), "stages" (two
// stages in dynamic shared memory), "q128" (the forward and dQ on 128
// query rows per block), "occupancy" (the forward and dQ compiled for more
// blocks per SM), "stored" (dQ from the dS tiles dK/dV stores). Anything
// else is an error naming the variable.
StatusOr<bool> attentionMmaFromEnv();

// The variants KILN_CUDA_ATTENTION asks for, untimed (to check each on a
// GPU whichever the autotuner would keep): those with exactly the traits
// it names, among the traits that matter to the thunk (a forward's: its
// kernel's stages, rows and occupancy; a backward's: those of dK/dV and
// dQ, and dK/dV on warp pairs where that is a choice, up to head dim 64).
struct AttentionRequest {
  bool pairs = false, stages = false, q128 = false, occupancy = false;
  bool stored = false; // "stored": the "ds" variant (storedScores)
  bool any() const { return pairs || stages || q128 || occupancy || stored; }
};
// Fails on a list with another word (attentionMmaFromEnv's message).
StatusOr<AttentionRequest> attentionRequestFromEnv();
// Whether |c| is a variant |request| asks for in a forward thunk (|grad|
// false) or a backward one. Where no variant of a shape is, the thunk keeps
// them all (and the autotuner times them).
bool attentionVariantRequested(const AttentionRequest &request,
                               const AttentionConfig &c, bool grad);

class CudaAttention {
public:
  // Compiles (or takes from the process cache) and loads the kernels for
  // |device| and allocates the backward's workspace (D_i) for the largest
  // AttentionGrad thunk of |package|.
  static StatusOr<std::unique_ptr<CudaAttention>>
  create(const LoadedPackage &package, CudaApi &api, const CudaDeviceInfo &device);
  ~CudaAttention();
  CudaAttention(const CudaAttention &) = delete;
  CudaAttention &operator=(const CudaAttention &) = delete;

  // Plans thunk |index| (Attention or AttentionGrad, either layout) with
  // |args|, its operands' then its results' device addresses (BHTD: 3 + 2
  // or 6 + 3; PackedBTHD: 1 + 2 or 4 + 1).
  Status plan(size_t index, const std::vector<void *> &args);
  // Queues thunk |index| on |stream|.
  Status run(size_t index, CudaStream stream);

  // The ways thunk |index| can run (attentionConfigVariants: those that
  // differ for it), each named by its kernels (a forward's entry point;
  // a backward's dK/dV and dQ ones, "DKDV + DQ"), and which one run()
  // uses (0 unless selected).
  int variantCount(size_t index) const;
  std::string variantName(size_t index, int variant) const;
  Status selectVariant(size_t index, int variant);
  // Thunk |index|'s shape, everything its variants depend on ("attention
  // forward bf16 batch=8 heads=12 q=1024 kv=1024 d=64 dv=64 causal packed
  // scale=0.125"), for the autotuner.
  std::string shapeKey(size_t index) const;
  // The loaded kernels' identity ("kiln attention kernels HASH" of their
  // source), for the autotuning cache.
  const std::string &library() const { return library_; }
  // Its kernel set (loaded() false when no thunk has kernels to run), and
  // where the cubin came from (RuntimeKernels::origin).
  const RuntimeKernels &kernels() const { return kernels_; }

private:
  CudaAttention(const LoadedPackage &package, CudaApi &api,
                const CudaDeviceInfo &device)
      : package_(package), api_(api), device_(device),
        kernels_(api, "kiln_attention", "attention") {}

  const LoadedPackage &package_;
  CudaApi &api_;
  CudaDeviceInfo device_;
  RuntimeKernels kernels_; // loaded only when a thunk has kernels to run
  bool mma_ = true;        // attentionMmaFromEnv()
  AttentionRequest request_; // attentionRequestFromEnv()
  void *workspace_ = nullptr;
  size_t workspaceBytes_ = 0;
  // Each thunk's launches (30 values: pointers, integers, the scale's bits,
  // strides; KILN_ATTN_PARAMS in CudaAttentionKernels.cpp), per variant.
  struct Plan {
    std::vector<std::vector<KernelLaunch>> variants;
    std::vector<std::string> names; // each variant's (variantName)
    int selected = 0;
  };
  std::map<size_t, Plan> plans_;
  std::string library_;
  std::set<std::string> optedIn_; // kernels past 48 KiB of shared memory
};

} // namespace kiln::runtime::cuda

#endif // KILN_RUNTIME_CUDA_CUDAATTENTION_H
