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

} // namespace kiln::runtime
