//===- RuntimeKernels.cpp - the runtime's own CUDA kernels, via NVRTC -----===//
//
// See RuntimeKernels.h.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/RuntimeKernels.h"
#include "runtime/cuda/CubinCache.h"

#include <chrono>
#include <cstdio>
#include <functional>
#include <mutex>

namespace kiln::runtime::cuda {

namespace {

// The process-wide cache of compiled kernel sets: one cubin per set, table,
// architecture and source.
struct CachedCubin {
  std::string source; // what was compiled (a hash collision recompiles)
  std::vector<uint8_t> cubin;
};
std::mutex cacheMutex;
std::map<std::string, CachedCubin> &cubinCache() {
  static std::map<std::string, CachedCubin> cache;
  return cache;
}

// The most parameters a runtime kernel takes.
constexpr size_t kMaxKernelArgs = 32;

} // namespace

void RuntimeKernels::clearProcessCache() {
  std::lock_guard<std::mutex> lock(cacheMutex);
  cubinCache().clear();
}

RuntimeKernels::~RuntimeKernels() {
  if (module_)
    api_.moduleUnload(module_);
}

Status RuntimeKernels::load(const std::string &source, unsigned arch) {
  std::string key = program_ + " " + api_.describe() + " sm_" +
                    std::to_string(arch) + " " +
                    std::to_string(std::hash<std::string>()(source));
  std::vector<uint8_t> cubin;
  {
    std::lock_guard<std::mutex> lock(cacheMutex);
    auto found = cubinCache().find(key);
    if (found != cubinCache().end() && found->second.source == source)
      cubin = found->second.cubin;
  }
  // Compiled by NVRTC, or read from the disk cache (CubinCache.h);
  // |refresh| compiles whatever the disk holds.
  bool fromDisk = false;
  origin_ = "compiled earlier in this process";
  auto compile = [&](bool refresh) {
    std::string log;
    auto start = std::chrono::steady_clock::now();
    Status s = nvrtcCompileCached(api_, source, program_, arch, cubin, log,
                                  &fromDisk, refresh);
    std::string dir = api_.nvrtcIdentity().empty() ? "" : cubinCacheDirectory();
    char seconds[32];
    std::snprintf(seconds, sizeof(seconds), "%.2f",
                  std::chrono::duration<double>(
                      std::chrono::steady_clock::now() - start)
                      .count());
    origin_ = fromDisk ? "read from the cubin cache (" + dir + ")"
                       : std::string("compiled by NVRTC in ") + seconds +
                             " s" + (dir.empty() ? "" : " (kept in " + dir + ")");
    if (!s.isOk())
      return Status::error("the " + what_ + " kernels (NVRTC for sm_" +
                           std::to_string(arch) + "): " + s.message() +
                           (log.empty() ? "" : "\n" + log));
    std::lock_guard<std::mutex> lock(cacheMutex);
    cubinCache()[key] = {source, cubin};
    return Status::ok();
  };
  if (cubin.empty())
    if (Status s = compile(false); !s.isOk())
      return s;
  if (module_) {
    api_.moduleUnload(module_);
    module_ = nullptr;
    functions_.clear();
  }
  Status loaded = api_.moduleLoadData(&module_, cubin.data(), cubin.size());
  // A cubin from the disk that does not load (a damaged file, a driver
  // that refuses it): NVRTC's own, once.
  if (!loaded.isOk() && fromDisk) {
    if (Status s = compile(true); !s.isOk())
      return s;
    loaded = api_.moduleLoadData(&module_, cubin.data(), cubin.size());
  }
  if (!loaded.isOk()) {
    module_ = nullptr;
    return Status::error("the " + what_ + " kernels: " + loaded.message());
  }
  return Status::ok();
}

StatusOr<CudaFunction> RuntimeKernels::function(const std::string &entry) {
  auto found = functions_.find(entry);
  if (found != functions_.end())
    return found->second;
  CudaFunction fn = nullptr;
  if (Status s = api_.moduleGetFunction(&fn, module_, entry.c_str()); !s.isOk())
    return Status::error("the " + what_ + " kernel " + entry + ": " +
                         s.message());
  functions_[entry] = fn;
  return fn;
}

Status RuntimeKernels::launch(const KernelLaunch &launch, CudaStream stream) {
  if (launch.args.size() > kMaxKernelArgs)
    return Status::error(std::to_string(launch.args.size()) +
                         " parameters, expected at most " +
                         std::to_string(kMaxKernelArgs));
  // The table reads each parameter through its address.
  void *values[kMaxKernelArgs], *params[kMaxKernelArgs];
  for (size_t i = 0; i < launch.args.size(); ++i) {
    values[i] = launch.args[i];
    params[i] = &values[i];
  }
  return api_.launchKernel(launch.function, {launch.grid, 1, 1},
                           {launch.block, 1, 1}, launch.sharedBytes, stream,
                           params, launch.args.size());
}

} // namespace kiln::runtime::cuda
