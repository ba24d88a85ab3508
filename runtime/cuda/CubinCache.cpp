//===- CubinCache.cpp - NVRTC's cubins for the runtime, kept on disk -----===//
//
// See CubinCache.h.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CubinCache.h"

#include <chrono>

namespace kiln::runtime::cuda {

namespace {

constexpr const char kMagic[] = "kiln cubin cache 1\n";

std::string cubinKey(CudaApi &api, const std::string &name, unsigned arch) {
  std::string identity = api.nvrtcIdentity();
  if (identity.empty())
    return "";
  return identity + "\nprogram " + name + "\nsm_" + std::to_string(arch) +
         "\n";
}

// The cached cubin of |key| and |source| at |path|, or false.
bool readEntry(const std::string &path, const std::string &key,
               const std::string &source, std::vector<uint8_t> &cubin) {
  std::vector<std::string> fields;
  if (!readCacheEntry(path, kMagic, fields) || fields.size() != 3 ||
      fields[0] != key || fields[1] != source || fields[2].empty())
    return false;
  cubin.assign(fields[2].begin(), fields[2].end());
  return true;
}

} // namespace

std::string cubinCacheDirectory() { return kilnCacheDirectory("cubin"); }

Status nvrtcCompileCached(CudaApi &api, const std::string &source,
                          const std::string &name, unsigned arch,
                          std::vector<uint8_t> &cubin, std::string &log,
                          CubinOrigin *origin, bool refresh) {
  CubinOrigin unused;
  CubinOrigin &o = origin ? *origin : unused;
  std::string key = cubinKey(api, name, arch);
  o = CubinOrigin();
  o.directory = key.empty() ? "" : cubinCacheDirectory();
  std::string path = o.directory.empty()
                         ? ""
                         : o.directory + "/" + fnv1aHex(key + '\0' + source) + ".cubin";
  if (!path.empty() && !refresh && readEntry(path, key, source, cubin)) {
    log.clear();
    o.fromDisk = true;
    return Status::ok();
  }
  auto start = std::chrono::steady_clock::now();
  if (Status s = api.nvrtcCompile(source, name, arch, cubin, log); !s.isOk())
    return s;
  o.compileSeconds = std::chrono::duration<double>(
                         std::chrono::steady_clock::now() - start)
                         .count();
  if (!path.empty()) {
    std::string entry = cacheEntry(
        kMagic, {key, source, std::string(cubin.begin(), cubin.end())});
    (void)writeFileAtomically(path, entry); // a cache that cannot be written: a miss
  }
  return Status::ok();
}

Status nvrtcCompileAndLoad(CudaApi &api, const std::string &source,
                           const std::string &name, unsigned arch,
                           std::string &log,
                           const std::function<bool(const std::vector<uint8_t> &)> &load,
                           CubinOrigin *origin) {
  CubinOrigin unused;
  CubinOrigin &o = origin ? *origin : unused;
  std::vector<uint8_t> cubin;
  if (Status s = nvrtcCompileCached(api, source, name, arch, cubin, log, &o);
      !s.isOk())
    return s;
  if (load(cubin) || !o.fromDisk)
    return Status::ok();
  if (Status s = nvrtcCompileCached(api, source, name, arch, cubin, log, &o,
                                    /*refresh=*/true);
      !s.isOk())
    return s;
  load(cubin);
  return Status::ok();
}

} // namespace kiln::runtime::cuda
