//===- CubinCache.cpp - NVRTC's cubins for the runtime, kept on disk -----===//
//
// See CubinCache.h.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CubinCache.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
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

std::string kilnCacheDirectory(const std::string &sub) {
  std::string dir;
  if (const char *env = std::getenv("KILN_CACHE_DIR")) {
    if (std::string(env) == "off" || !*env)
      return "";
    dir = env;
  } else if (const char *home = std::getenv("HOME")) {
    dir = std::string(home) + "/.cache/kiln";
  } else {
    return "";
  }
  dir += "/" + sub;
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  return std::filesystem::is_directory(dir, error) ? dir : "";
}

uint64_t fnv1a(const std::string &text) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

bool writeFileAtomically(const std::string &path, const std::string &bytes) {
  // Unique per process and per writer within it (executables of several
  // devices may write at once in one process).
  static std::atomic<uint64_t> writers{0};
  std::string temp = path + ".tmp." + std::to_string(::getpid()) + "." +
                     std::to_string(writers.fetch_add(1));
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    if (!out)
      return false;
    out.write(bytes.data(), std::streamsize(bytes.size()));
    if (!out.flush()) {
      std::remove(temp.c_str());
      return false;
    }
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    std::remove(temp.c_str());
    return false;
  }
  return true;
}

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
    writeFileAtomically(path, entry); // a cache that cannot be written: a miss
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
