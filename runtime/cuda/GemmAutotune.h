//===- GemmAutotune.h - timing cuBLASLt's algorithms per GEMM shape -*- C++ -*-===//
//
// cuBLASLt's heuristic ranks its algorithms for a GEMM by a model of the
// device; its first is usually good and sometimes not the fastest (a
// GELU+aux epilogue, a skinny weight gradient, a split-k choice). XLA's
// GPU autotuner and cudnn.benchmark time the candidates on the device
// instead; so does Kiln, once per GEMM shape, when an executable is made
// (CudaOptions::gemmAutotune, on by default; `kiln train
// --gemm-autotune=off` and `kiln-cuda-run --gemm-autotune=off` turn it off):
//
//   - the plan keeps the heuristic's first GemmDesc::algorithms (8);
//   - each is run once (a warm-up; one that fails to queue is skipped and
//     its error kept), then |trials| times |runs| runs between two events;
//     its time is the fastest trial's mean;
//   - the fastest is selected, unless the heuristic's first is within
//     |keepFirstWithin| of it (timing noise does not move a GEMM off the
//     library's own choice);
//   - the choice is written to the cache, DIR/gemm-autotune/HASH.txt, DIR
//     being $KILN_CACHE_DIR, else $HOME/.cache/kiln (KILN_CACHE_DIR=off: no
//     cache). The file holds its whole key (device name and sm_NN, the
//     library and its version, how many algorithms, the GEMM: dtype,
//     sizes, transposes, alpha, beta, epilogue, TF32, alignment,
//     workspace) and the chosen algorithm's identity (the bytes of
//     cublasLtMatmulAlgo_t). A later executable with the same key selects
//     that algorithm without timing anything; a file whose key differs
//     (a hash collision) or whose algorithm the heuristic no longer offers
//     is timed again and rewritten. Files are written to a temporary name
//     and renamed, so ranks tuning at once never read half a file.
//
// The runs write the GEMM's own result buffers with the arena's contents
// (set to finite values first), before initialize(): nothing of the step is
// lost. Algorithms differ in summation order, so the choice can change a
// result's last bits; the cache keeps a machine's runs the same, and
// --gemm-autotune=off keeps every machine on the heuristic's first.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_CUDA_GEMMAUTOTUNE_H
#define KILN_RUNTIME_CUDA_GEMMAUTOTUNE_H

#include "runtime/Status.h"
#include "runtime/cuda/CudaApi.h"

#include <functional>
#include <string>
#include <vector>

namespace kiln::runtime::cuda {

struct GemmAutotuneOptions {
  int runs = 3, trials = 3;
  // The heuristic's first stays when the fastest beats it by less than
  // this fraction.
  double keepFirstWithin = 0.02;
  // Where the choices are kept ("": nowhere).
  std::string cacheDir;
};

// One GEMM shape's tuning.
struct GemmTuning {
  std::string gemm;           // the shape (CudaExecutable's GEMM key)
  std::vector<size_t> thunks; // the thunks that run it
  int algorithms = 0;         // the plan's
  int chosen = 0;             // the index selected (0: the heuristic's first)
  // Per algorithm, one run's time in ms (-1: it failed, see |error|);
  // empty when the choice came from the cache.
  std::vector<double> ms;
  bool cached = false;
  std::string description; // the chosen algorithm's (GemmAlgorithm)
  std::string error;       // the first algorithm that failed, and why
};

// $KILN_CACHE_DIR/gemm-autotune, else $HOME/.cache/kiln/gemm-autotune,
// created; "" when KILN_CACHE_DIR is "off" or the directory cannot be made.
std::string gemmAutotuneCacheDirectory();

class GemmAutotuner {
public:
  GemmAutotuner(CudaApi &api, const CudaDeviceInfo &device,
                GemmAutotuneOptions options)
      : api_(api), device_(device), options_(std::move(options)) {}
  ~GemmAutotuner();
  GemmAutotuner(const GemmAutotuner &) = delete;
  GemmAutotuner &operator=(const GemmAutotuner &) = delete;

  // Selects |plan|'s algorithm for the shape |gemm| (its key, which must
  // say everything the plan depends on), from the cache or by timing
  // |run| (which queues one run of the GEMM with its plan on the stream it
  // is given) on |stream|. Fails when every algorithm fails, or when the
  // device reports an error while timing.
  StatusOr<GemmTuning> tune(GemmPlan plan, const std::string &gemm,
                            const std::function<Status(CudaStream)> &run,
                            CudaStream stream);

private:
  std::string cacheKey(const std::string &gemm, int algorithms) const;
  std::string cachePath(const std::string &key) const;
  // The cached algorithm's index in |plan|, or -1.
  int readCache(GemmPlan plan, const std::string &key) const;
  void writeCache(const std::string &key, const std::string &id,
                  const GemmTuning &tuning) const;

  CudaApi &api_;
  CudaDeviceInfo device_;
  GemmAutotuneOptions options_;
  CudaEvent start_ = nullptr, end_ = nullptr;
};

} // namespace kiln::runtime::cuda

#endif // KILN_RUNTIME_CUDA_GEMMAUTOTUNE_H
