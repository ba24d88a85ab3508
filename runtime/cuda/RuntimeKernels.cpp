//===- RuntimeKernels.cpp - the runtime's own CUDA kernels, via NVRTC -----===//
//
// See RuntimeKernels.h.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/RuntimeKernels.h"
#include "runtime/cuda/CubinCache.h"

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
  // From the process cache, else NVRTC's or the disk cache's
  // (nvrtcCompileAndLoad: a cached cubin the driver refuses is compiled
  // again, once).
  auto unloadOld = [&] {
    if (module_) {
      api_.moduleUnload(module_);
      module_ = nullptr;
      functions_.clear();
    }
  };
  Status loaded = Status::ok();
  if (!cubin.empty()) {
    origin_ = "compiled earlier in this process";
    unloadOld();
    loaded = api_.moduleLoadData(&module_, cubin.data(), cubin.size());
  } else {
    std::string log;
    CubinOrigin origin;
    Status s = nvrtcCompileAndLoad(
        api_, source, program_, arch, log,
        [&](const std::vector<uint8_t> &compiled) {
          {
            std::lock_guard<std::mutex> lock(cacheMutex);
            cubinCache()[key] = {source, compiled};
          }
          unloadOld();
          loaded = api_.moduleLoadData(&module_, compiled.data(), compiled.size());
          return loaded.isOk();
        },
        &origin);
    if (!s.isOk())
      return Status::error("the " + what_ + " kernels (NVRTC for sm_" +
                           std::to_string(arch) + "): " + s.message() +
                           (log.empty() ? "" : "\n" + log));
    char seconds[32];
    std::snprintf(seconds, sizeof(seconds), "%.2f", origin.compileSeconds);
    origin_ = origin.fromDisk
                  ? "read from the cubin cache (" + origin.directory + ")"
                  : std::string("compiled by NVRTC in ") + seconds + " s" +
                        (origin.directory.empty()
                             ? ""
                             : " (kept in " + origin.directory + ")");
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
