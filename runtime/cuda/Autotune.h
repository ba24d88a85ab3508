//===- Autotune.h - timing the candidates of a GEMM or an attention -*- C++ -*-===//
//
// Where a library or a kernel set offers several ways to compute one thing,
// their order on a device is often not knowable ahead of time: cuBLASLt's
// heuristic ranks its algorithms with a model of the device, and its first
// is usually good but not always the fastest (a GELU+aux epilogue, a skinny
// weight gradient, a split-k choice); the fused attention's dK/dV kernel at
// head dims up to 64 can run on one warp per 16 key rows or on warp pairs
// (twice the warps per SM, a hand-over through shared memory), and past 64
// its forward and dQ on one stage of tiles in static shared memory or two
// in dynamic shared memory (CudaAttention.h). XLA's GPU
// autotuner and cudnn.benchmark time the candidates on the device; so does
// Kiln, once per shape, when an executable is made (CudaOptions::autotune,
// on by default; `kiln train --autotune=off`, `kiln-cuda-run
// --autotune=off`):
//
//   - each candidate is selected and run once (a warm-up; one that fails
//     to queue is skipped and its error kept), then |trials| times |runs|
//     runs between two events; its time is the fastest trial's mean;
//   - the fastest is selected, unless the first (the library's own choice,
//     or the kernel set's default) is within |keepFirstWithin| of it, so
//     timing noise does not move a shape off it;
//   - the choice is written to the cache, DIR/autotune/HASH.txt, DIR
//     being $KILN_CACHE_DIR, else $HOME/.cache/kiln (KILN_CACHE_DIR=off: no
//     cache). The file holds its whole key (the device's name and sm_NN,
//     the library and its version, how many candidates, and the shape
//     with everything its candidates depend on) and the chosen
//     candidate's identity (for a GEMM, the bytes of cublasLtMatmulAlgo_t).
//     A later executable with the same key selects that candidate without
//     timing anything; a file whose key differs (a hash collision) or
//     whose candidate is no longer offered is timed again and rewritten.
//     Files are written to a temporary name and renamed, so ranks tuning at
//     once never read half a file.
//
// The runs read and write the step's own buffers in the arena (set to
// finite values first), before initialize(): nothing of the step is lost.
// Candidates differ in summation order, so the choice can change a result's
// last bits; the cache keeps a machine's runs the same, and --autotune=off
// keeps every machine on the first candidates.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_CUDA_AUTOTUNE_H
#define KILN_RUNTIME_CUDA_AUTOTUNE_H

#include "runtime/Status.h"
#include "runtime/cuda/CudaApi.h"

#include <functional>
#include <string>
#include <vector>

namespace kiln::runtime::cuda {

struct AutotuneOptions {
  int runs = 3, trials = 3;
  // The first candidate stays when the fastest beats it by less than this
  // fraction.
  double keepFirstWithin = 0.02;
  // Where the choices are kept ("": nowhere).
  std::string cacheDir;
};

// What one shape can choose among.
struct AutotuneCandidates {
  int count = 1;
  std::function<Status(int)> select;
  // A stable identity of candidate i (kept in the cache) and its
  // description for people.
  std::function<StatusOr<std::string>(int)> id;
  std::function<std::string(int)> description;
};

// One shape's tuning.
struct Tuning {
  std::string shape;          // what was tuned ("gemm bf16 m=... ")
  std::vector<size_t> thunks; // the thunks that run it
  int candidates = 0;
  int chosen = 0; // the index selected (0: the first)
  // Per candidate, one run's time in ms (-1: it failed, see |error|);
  // empty when the choice came from the cache.
  std::vector<double> ms;
  bool cached = false;
  std::string description; // the chosen candidate's
  std::string error;       // the first candidate that failed, and why
};

// $KILN_CACHE_DIR/autotune, else $HOME/.cache/kiln/autotune, created; ""
// when KILN_CACHE_DIR is "off" or the directory cannot be made.
std::string autotuneCacheDirectory();

class Autotuner {
public:
  // |library| names what offers the candidates and its version, for the
  // cache key (CudaApi::gemmLibraryVersion(), or the kernel set's).
  Autotuner(CudaApi &api, const CudaDeviceInfo &device, AutotuneOptions options)
      : api_(api), device_(device), options_(std::move(options)) {}
  ~Autotuner();
  Autotuner(const Autotuner &) = delete;
  Autotuner &operator=(const Autotuner &) = delete;

  // Selects one of |candidates| for |shape| (a key that says everything
  // the candidates depend on, |library| included), from the cache or by
  // timing |run| (which queues one run of the shape with the selected
  // candidate on the stream it is given) on |stream|. Fails when every
  // candidate fails, or when the device reports an error while timing.
  StatusOr<Tuning> tune(const std::string &shape, const std::string &library,
                        const AutotuneCandidates &candidates,
                        const std::function<Status(CudaStream)> &run,
                        CudaStream stream);

private:
  std::string cacheKey(const std::string &shape, const std::string &library,
                       int count) const;
  std::string cachePath(const std::string &key) const;
  // The cached candidate's index, or -1.
  int readCache(const AutotuneCandidates &candidates,
                const std::string &key) const;
  void writeCache(const std::string &key, const std::string &id,
                  const Tuning &tuning) const;

  CudaApi &api_;
  CudaDeviceInfo device_;
  AutotuneOptions options_;
  CudaEvent start_ = nullptr, end_ = nullptr;
};

// A GEMM plan's algorithms as candidates (CudaApi::gemmAlgorithm).
AutotuneCandidates gemmCandidates(CudaApi &api, GemmPlan plan);

} // namespace kiln::runtime::cuda

#endif // KILN_RUNTIME_CUDA_AUTOTUNE_H
