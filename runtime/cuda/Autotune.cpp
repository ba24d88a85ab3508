//===- Autotune.cpp - timing the candidates of a GEMM or an attention -----===//
//
// See Autotune.h.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/Autotune.h"
#include "runtime/cuda/CubinCache.h"

#include <algorithm>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>

namespace kiln::runtime::cuda {

namespace {

constexpr const char *kCacheVersion = "kiln autotune 1";

} // namespace

std::string autotuneCacheDirectory() { return kilnCacheDirectory("autotune"); }

Autotuner::~Autotuner() {
  for (CudaEvent e : {start_, end_})
    if (e)
      api_.eventDestroy(e);
}

std::string Autotuner::cacheKey(const std::string &shape,
                                const std::string &library, int count) const {
  return std::string(kCacheVersion) + "\ndevice " + device_.name + " sm_" +
         std::to_string(device_.smArch()) + "\nlibrary " + library +
         "\ncandidates " + std::to_string(count) + "\nshape " + shape + "\n";
}

std::string Autotuner::cachePath(const std::string &key) const {
  return options_.cacheDir + "/" + fnv1aHex(key) + ".txt";
}

int Autotuner::readCache(const AutotuneCandidates &candidates,
                         const std::string &key) const {
  if (options_.cacheDir.empty())
    return -1;
  std::ifstream in(cachePath(key), std::ios::binary);
  if (!in)
    return -1;
  std::string text((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  if (text.compare(0, key.size(), key) != 0)
    return -1;
  std::istringstream rest(text.substr(key.size()));
  std::string word, id;
  if (!(rest >> word >> id) || word != "chosen")
    return -1;
  for (int i = 0; i < candidates.count; ++i) {
    StatusOr<std::string> candidate = candidates.id(i);
    if (candidate.isOk() && candidate.value() == id)
      return i;
  }
  return -1;
}

void Autotuner::writeCache(const std::string &key, const std::string &id,
                           const Tuning &tuning) const {
  if (options_.cacheDir.empty())
    return;
  std::ostringstream out;
  out << key << "chosen " << id << "\n";
  out << "# " << tuning.description << "\n# ms";
  for (double ms : tuning.ms)
    out << " " << ms;
  out << "\n";
  // The cache is an optimization: a read-only one is no error.
  (void)writeFileAtomically(cachePath(key), out.str());
}

AutotuneCandidates gemmCandidates(CudaApi &api, GemmPlan plan) {
  AutotuneCandidates c;
  c.count = api.gemmAlgorithmCount(plan);
  c.select = [&api, plan](int i) { return api.gemmSelectAlgorithm(plan, i); };
  c.id = [&api, plan](int i) -> StatusOr<std::string> {
    StatusOr<GemmAlgorithm> a = api.gemmAlgorithm(plan, i);
    if (!a.isOk())
      return a.status();
    return a.value().id;
  };
  c.description = [&api, plan](int i) {
    StatusOr<GemmAlgorithm> a = api.gemmAlgorithm(plan, i);
    return a.isOk() ? a.value().description : a.status().message();
  };
  return c;
}

StatusOr<Tuning> Autotuner::tune(const std::string &shape,
                                 const std::string &library,
                                 const AutotuneCandidates &candidates,
                                 const std::function<Status(CudaStream)> &run,
                                 CudaStream stream) {
  Tuning t;
  t.shape = shape;
  t.candidates = candidates.count;
  auto select = [&](int index) -> StatusOr<Tuning> {
    t.chosen = index;
    if (Status s = candidates.select(index); !s.isOk())
      return s;
    t.description = candidates.description(index);
    return t;
  };
  if (t.candidates < 2)
    return select(0);
  std::string key = cacheKey(shape, library, t.candidates);
  if (int cached = readCache(candidates, key); cached >= 0) {
    t.cached = true;
    return select(cached);
  }

  for (CudaEvent *e : {&start_, &end_})
    if (!*e)
      if (Status s = api_.eventCreate(e); !s.isOk())
        return s;
  std::string where = "autotuning the " + shape + ": ";
  t.ms.assign(t.candidates, -1.0);
  for (int i = 0; i < t.candidates; ++i) {
    if (Status s = candidates.select(i); !s.isOk())
      return Status::error(where + s.message());
    // The warm-up run: one that cannot be queued is skipped.
    if (Status s = run(stream); !s.isOk()) {
      if (t.error.empty())
        t.error = "candidate " + std::to_string(i) + ": " + s.message();
      continue;
    }
    double best = std::numeric_limits<double>::infinity();
    for (int trial = 0; trial < std::max(options_.trials, 1); ++trial) {
      if (Status s = api_.eventRecord(start_, stream); !s.isOk())
        return Status::error(where + s.message());
      Status queued;
      for (int r = 0; r < std::max(options_.runs, 1) && queued.isOk(); ++r)
        queued = run(stream);
      if (Status s = api_.eventRecord(end_, stream); !s.isOk())
        return Status::error(where + s.message());
      // An error the device reports here is sticky: the step could not
      // run either, so it fails the executable.
      if (Status s = api_.eventSynchronize(end_); !s.isOk())
        return Status::error(where + "candidate " + std::to_string(i) + ": " +
                             s.message());
      if (!queued.isOk()) {
        if (t.error.empty())
          t.error = "candidate " + std::to_string(i) + ": " + queued.message();
        best = std::numeric_limits<double>::infinity();
        break;
      }
      float ms = 0;
      if (Status s = api_.eventElapsedMs(&ms, start_, end_); !s.isOk())
        return Status::error(where + s.message());
      best = std::min(best, double(ms) / std::max(options_.runs, 1));
    }
    if (best != std::numeric_limits<double>::infinity())
      t.ms[i] = best;
  }
  int fastest = -1;
  for (int i = 0; i < t.candidates; ++i)
    if (t.ms[i] >= 0 && (fastest < 0 || t.ms[i] < t.ms[fastest]))
      fastest = i;
  if (fastest < 0)
    return Status::error(where + "every candidate failed (" + t.error + ")");
  int chosen = fastest;
  if (t.ms[0] >= 0 && t.ms[0] <= t.ms[fastest] * (1 + options_.keepFirstWithin))
    chosen = 0;
  StatusOr<Tuning> done = select(chosen);
  if (!done.isOk())
    return done;
  if (StatusOr<std::string> id = candidates.id(chosen); id.isOk())
    writeCache(key, id.value(), t);
  return done;
}

} // namespace kiln::runtime::cuda
