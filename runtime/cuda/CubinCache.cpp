//===- CubinCache.cpp - NVRTC's cubins for the runtime, kept on disk -----===//
//
// See CubinCache.h.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CubinCache.h"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>

namespace kiln::runtime::cuda {

namespace {

constexpr const char kMagic[] = "kiln cubin cache 1\n";

// |n| as eight little-endian bytes, and back.
void putSize(std::string &out, uint64_t n) {
  for (int i = 0; i < 8; ++i)
    out.push_back(char((n >> (8 * i)) & 0xff));
}
bool getSize(const std::string &in, size_t &at, uint64_t &n) {
  if (in.size() - at < 8)
    return false;
  n = 0;
  for (int i = 0; i < 8; ++i)
    n |= uint64_t(static_cast<unsigned char>(in[at + i])) << (8 * i);
  at += 8;
  return true;
}
// A length-prefixed field at |at|, within |in|.
bool getField(const std::string &in, size_t &at, std::string &field) {
  uint64_t n = 0;
  if (!getSize(in, at, n) || n > in.size() - at)
    return false;
  field = in.substr(at, n);
  at += n;
  return true;
}

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
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return false;
  std::string text((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  size_t magic = sizeof(kMagic) - 1, at = magic;
  std::string fileKey, fileSource, image;
  if (text.compare(0, magic, kMagic) != 0 || !getField(text, at, fileKey) ||
      !getField(text, at, fileSource) || !getField(text, at, image) ||
      at != text.size() || fileKey != key || fileSource != source ||
      image.empty())
    return false;
  cubin.assign(image.begin(), image.end());
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
  char file[32];
  std::snprintf(file, sizeof(file), "%016llx.cubin",
                static_cast<unsigned long long>(fnv1a(key + '\0' + source)));
  std::string path = o.directory.empty() ? "" : o.directory + "/" + file;
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
    std::string entry = kMagic;
    putSize(entry, key.size());
    entry += key;
    putSize(entry, source.size());
    entry += source;
    putSize(entry, cubin.size());
    entry.append(cubin.begin(), cubin.end());
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
