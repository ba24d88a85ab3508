//===- Files.cpp - atomic writes and Kiln's cache directories -------------===//
//
// See Files.h.
//
//===----------------------------------------------------------------------===//

#include "runtime/Files.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

namespace kiln::runtime {

Status writeFileAtomically(const std::string &path, const std::string &text) {
  static std::atomic<uint64_t> writers{0};
  std::string temp = path + ".tmp." + std::to_string(::getpid()) + "." +
                     std::to_string(writers.fetch_add(1));
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    if (!out)
      return Status::error(temp + ": cannot open for writing: " +
                           std::strerror(errno));
    out.write(text.data(), std::streamsize(text.size()));
    if (!out.flush()) {
      std::remove(temp.c_str());
      return Status::error(temp + ": write failed");
    }
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    std::string message =
        path + ": rename from " + temp + " failed: " + std::strerror(errno);
    std::remove(temp.c_str());
    return Status::error(message);
  }
  return Status::ok();
}

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

std::string fnv1aHex(const std::string &text) {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx",
                static_cast<unsigned long long>(fnv1a(text)));
  return hex;
}

std::string cacheEntry(const std::string &magic,
                       const std::vector<std::string> &fields) {
  std::string out = magic;
  for (const std::string &field : fields) {
    for (int i = 0; i < 8; ++i)
      out.push_back(char((uint64_t(field.size()) >> (8 * i)) & 0xff));
    out += field;
  }
  return out;
}

bool parseCacheEntry(const std::string &text, const std::string &magic,
                     std::vector<std::string> &fields) {
  fields.clear();
  if (text.compare(0, magic.size(), magic) != 0)
    return false;
  size_t at = magic.size();
  while (at < text.size()) {
    if (text.size() - at < 8)
      return false;
    uint64_t n = 0;
    for (int i = 0; i < 8; ++i)
      n |= uint64_t(static_cast<unsigned char>(text[at + i])) << (8 * i);
    at += 8;
    if (n > text.size() - at)
      return false;
    fields.push_back(text.substr(at, n));
    at += n;
  }
  return true;
}

bool readCacheEntry(const std::string &path, const std::string &magic,
                    std::vector<std::string> &fields) {
  fields.clear();
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return false;
  std::string text((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  return parseCacheEntry(text, magic, fields);
}

std::string keyedCacheEntry(const std::string &magic,
                            const std::string &identity,
                            const std::string &input,
                            const std::string &output) {
  return cacheEntry(magic, {identity, input, output, fnv1aHex(output)});
}

bool readKeyedCacheEntry(const std::string &path, const std::string &magic,
                         const std::string &identity, const std::string &input,
                         std::string &output) {
  std::vector<std::string> fields;
  if (!readCacheEntry(path, magic, fields) || fields.size() != 4 ||
      fields[0] != identity || fields[1] != input || fields[2].empty() ||
      fnv1aHex(fields[2]) != fields[3])
    return false;
  output = std::move(fields[2]);
  return true;
}

} // namespace kiln::runtime
