//===- kiln_step.cpp - kiln-bench-step: time a package's training step ----===//
//
//   kiln-bench-step STEP.kpkg [--steps N] [--warmup N] [--threads T]
//                   [--label-range R] [--seed S] [--profile]
//                   [--gemm pool|blas]
//
// Loads the package, compiles its kernels (ORC), initializes the parameters,
// fills the data inputs once with random values (floats uniform on [0, 1),
// integer inputs and labels uniform on [0, R)), runs --warmup steps, then
// times --steps steps one by one and prints one JSON line:
//   {"ms_per_step": mean, "steps": N, "threads": T, "min_ms": ...,
//    "median_ms": ..., "loss": last loss}
// --profile adds a per-thunk table on stderr (total and share of the timed
// steps, slowest first), timed in separate profiled steps after the timed
// ones so the timing itself is not disturbed. --gemm picks how GEMMs use
// the threads (runtime/cpu/Executable.h's GemmThreading; default pool).
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Executable.h"
#include "runtime/cpu/jit/OrcKernelLoader.h"
#include "runtime/package/Package.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

using namespace kiln::runtime;
using namespace kiln::runtime::cpu;

namespace {

int usage(const char *message) {
  std::fprintf(stderr,
               "kiln-bench-step: %s\nusage: kiln-bench-step STEP.kpkg [--steps "
               "N] [--warmup N] [--threads T] [--label-range R] [--seed S] "
               "[--profile] [--gemm pool|blas]\n",
               message);
  return 2;
}

bool parseInt(const char *text, long long min, long long &out) {
  char *end = nullptr;
  long long v = std::strtoll(text, &end, 10);
  if (!*text || *end || v < min)
    return false;
  out = v;
  return true;
}

std::string describeThunk(const LoadedPackage &p, size_t i) {
  const PackageThunk &t = p.thunks[i];
  char text[256];
  switch (t.kind) {
  case ThunkKind::KernelLaunch:
    std::snprintf(text, sizeof text, "kernel %s", p.kernels[t.kernel].name.c_str());
    break;
  case ThunkKind::LibraryCall:
    if (t.library == LibraryKind::Gemm)
      std::snprintf(text, sizeof text, "gemm m=%lld n=%lld k=%lld%s%s%s",
                    (long long)t.gemm.m, (long long)t.gemm.n,
                    (long long)t.gemm.k, t.gemm.transposeLhs ? " lhsT" : "",
                    t.gemm.transposeRhs ? " rhsT" : "",
                    t.gemm.batch > 1 ? " batched" : "");
    else
      std::snprintf(text, sizeof text, "conv (library %d)", int(t.library));
    break;
  case ThunkKind::Copy:
    std::snprintf(text, sizeof text, "copy %llu bytes",
                  (unsigned long long)p.buffers[t.results[0]].size);
    break;
  case ThunkKind::Collective:
    std::snprintf(text, sizeof text, "collective");
    break;
  }
  return text;
}

} // namespace

int main(int argc, char **argv) {
  std::string path;
  long long steps = 50, warmup = 5, threads = 0, labelRange = 10, seed = 0;
  bool profile = false;
  GemmThreading gemmThreading = GemmThreading::Pool;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&](long long min, long long &out) {
      if (i + 1 >= argc || !parseInt(argv[i + 1], min, out))
        return false;
      ++i;
      return true;
    };
    if (arg == "--steps") {
      if (!value(1, steps))
        return usage("--steps needs a number >= 1");
    } else if (arg == "--warmup") {
      if (!value(0, warmup))
        return usage("--warmup needs a number >= 0");
    } else if (arg == "--threads") {
      if (!value(0, threads))
        return usage("--threads needs a number >= 0 (0: all cores)");
    } else if (arg == "--label-range") {
      if (!value(1, labelRange))
        return usage("--label-range needs a number >= 1");
    } else if (arg == "--seed") {
      if (!value(0, seed))
        return usage("--seed needs a number >= 0");
    } else if (arg == "--gemm") {
      std::string mode = i + 1 < argc ? argv[++i] : "";
      if (mode == "pool")
        gemmThreading = GemmThreading::Pool;
      else if (mode == "blas")
        gemmThreading = GemmThreading::Blas;
      else
        return usage("--gemm needs pool or blas");
    } else if (arg == "--profile") {
      profile = true;
    } else if (arg == "-h" || arg == "--help") {
      std::printf("kiln-bench-step STEP.kpkg [--steps N] [--warmup N] "
                  "[--threads T] [--label-range R] [--seed S] [--profile] "
                  "[--gemm pool|blas]\n"
                  "Times a package's training step; prints one JSON line.\n");
      return 0;
    } else if (!arg.empty() && arg[0] == '-') {
      return usage(("unknown option " + arg).c_str());
    } else if (path.empty()) {
      path = arg;
    } else {
      return usage("more than one package given");
    }
  }
  if (path.empty())
    return usage("no package given");

  StatusOr<LoadedPackage> package = loadPackage(path);
  if (!package.isOk()) {
    std::fprintf(stderr, "kiln-bench-step: %s\n", package.status().message().c_str());
    return 1;
  }
  auto loader = createOrcKernelLoader();
  if (!loader.isOk()) {
    std::fprintf(stderr, "kiln-bench-step: %s\n", loader.status().message().c_str());
    return 1;
  }
  ExecutableOptions options;
  options.threads = static_cast<int>(threads);
  options.gemmThreading = gemmThreading;
  auto created = Executable::create(std::move(package.value()), *loader.value(), options);
  if (!created.isOk()) {
    std::fprintf(stderr, "kiln-bench-step: %s: %s\n", path.c_str(),
                 created.status().message().c_str());
    return 1;
  }
  Executable &exe = *created.value();
  if (Status s = exe.initialize(); !s.isOk()) {
    std::fprintf(stderr, "kiln-bench-step: %s\n", s.message().c_str());
    return 1;
  }

  // Data inputs, once.
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::uniform_int_distribution<int64_t> label(0, labelRange - 1);
  int lossOutput = -1;
  const LoadedPackage &p = exe.package();
  for (size_t i = 0; i < p.outputs.size(); ++i)
    if (p.outputs[i].role == PkgRole::Loss && lossOutput < 0)
      lossOutput = static_cast<int>(i);
  for (size_t i = 0; i < exe.numInputs(); ++i) {
    const SignatureEntry &in = p.inputs[i];
    if (in.role != PkgRole::Input && in.role != PkgRole::Label)
      continue;
    int64_t n = 1;
    for (int64_t d : in.shape)
      n *= d;
    void *data = exe.input(i);
    for (int64_t e = 0; e < n; ++e) {
      switch (in.dtype) {
      case PkgDType::F64: static_cast<double *>(data)[e] = unit(rng); break;
      case PkgDType::F32: static_cast<float *>(data)[e] = float(unit(rng)); break;
      case PkgDType::I64: static_cast<int64_t *>(data)[e] = label(rng); break;
      case PkgDType::I32: static_cast<int32_t *>(data)[e] = int32_t(label(rng)); break;
      case PkgDType::I8: static_cast<int8_t *>(data)[e] = int8_t(label(rng)); break;
      default:
        std::fprintf(stderr,
                     "kiln-bench-step: input %zu (\"%s\"): cannot make random "
                     "data of this element type (f16/bf16/i1)\n",
                     i, in.name.c_str());
        return 1;
      }
    }
  }

  for (long long s = 0; s < warmup; ++s)
    if (Status st = exe.run(); !st.isOk()) {
      std::fprintf(stderr, "kiln-bench-step: %s\n", st.message().c_str());
      return 1;
    }
  std::vector<double> ms;
  ms.reserve(steps);
  for (long long s = 0; s < steps; ++s) {
    auto start = std::chrono::steady_clock::now();
    Status st = exe.run();
    auto end = std::chrono::steady_clock::now();
    if (!st.isOk()) {
      std::fprintf(stderr, "kiln-bench-step: %s\n", st.message().c_str());
      return 1;
    }
    ms.push_back(std::chrono::duration<double, std::milli>(end - start).count());
  }
  double loss = NAN;
  if (lossOutput >= 0 && p.outputs[lossOutput].dtype == PkgDType::F32)
    loss = *static_cast<const float *>(exe.output(lossOutput));
  std::vector<double> sorted = ms;
  std::sort(sorted.begin(), sorted.end());
  double mean = std::accumulate(ms.begin(), ms.end(), 0.0) / ms.size();
  double median = sorted.size() % 2
                      ? sorted[sorted.size() / 2]
                      : 0.5 * (sorted[sorted.size() / 2 - 1] + sorted[sorted.size() / 2]);
  std::printf("{\"ms_per_step\": %.4f, \"steps\": %lld, \"threads\": %d, "
              "\"min_ms\": %.4f, \"median_ms\": %.4f, \"loss\": %.6g}\n",
              mean, steps, exe.threads(), sorted.front(), median, loss);
  std::fflush(stdout);

  if (profile) {
    exe.setProfiling(true);
    for (long long s = 0; s < steps; ++s)
      if (Status st = exe.run(); !st.isOk()) {
        std::fprintf(stderr, "kiln-bench-step: %s\n", st.message().c_str());
        return 1;
      }
    const std::vector<ThunkProfile> &prof = exe.profile();
    double total = 0;
    for (const ThunkProfile &t : prof)
      total += t.totalNs;
    std::vector<size_t> order(prof.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return prof[a].totalNs > prof[b].totalNs;
    });
    std::fprintf(stderr, "per-thunk time over %lld profiled steps (thunks sum to %.3f ms/step):\n",
                 steps, total / 1e6 / steps);
    std::fprintf(stderr, "%6s %10s %6s  %s\n", "thunk", "us/step", "share", "what");
    for (size_t i : order)
      std::fprintf(stderr, "%6zu %10.1f %5.1f%%  %s\n", i,
                   prof[i].totalNs / 1e3 / steps,
                   total > 0 ? 100.0 * prof[i].totalNs / total : 0.0,
                   describeThunk(p, i).c_str());
  }
  return 0;
}
