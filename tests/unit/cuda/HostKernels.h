//===- HostKernels.h - CUDA kernel sources built for the host -----*- C++ -*-===//
//
// buildHostKernels compiles CUDA C++ (an emitted step's kernels, or one of
// the runtime's own kernel sources) for the host under
// codegen/cuda/CudaEmulation.h with KILN_HOST_CXX (both macros from CMake),
// loads the shared library and returns entry point -> its NAME_host
// function, as FakeCudaApi::hostKernels takes them. No LLVM: tests that link
// only the runtime use it too. In a build under AddressSanitizer
// (KILN_HOST_SANITIZE, from CMake) the kernels are instrumented with the
// same sanitizers as the test that loads them, so a kernel's access outside
// its buffers, its shared arrays or its stack is reported where it happens.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TESTS_UNIT_CUDA_HOSTKERNELS_H
#define KILN_TESTS_UNIT_CUDA_HOSTKERNELS_H

#include <dlfcn.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

namespace kiln::runtime::cuda::testing {

// A kernel on the host: the emulation's NAME_host(buffers, grid, block)
// (as FakeCudaApi.h declares it).
using HostKernel = void (*)(void **buffers, unsigned grid, unsigned block);

namespace detail {
// FNV-1a, 64 bits, continuing from |hash|.
inline uint64_t fnv1a(const std::string &text, uint64_t hash = 14695981039346656037ull) {
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  return hash;
}

// An exclusive flock(2) on a file, held until release() or destruction;
// one that cannot be taken (no such directory) is not held, and the build
// goes on without it.
class BuildLock {
public:
  BuildLock() = default;
  BuildLock(const BuildLock &) = delete;
  BuildLock &operator=(const BuildLock &) = delete;
  ~BuildLock() { release(); }
  void acquire(const std::string &path) {
    release();
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0)
      return;
    while (::flock(fd_, LOCK_EX) != 0) {
      if (errno != EINTR) {
        release();
        return;
      }
    }
  }
  void release() {
    if (fd_ >= 0)
      ::close(fd_); // drops the lock
    fd_ = -1;
  }

private:
  int fd_ = -1;
};

inline std::string readFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
}

inline std::string hexName(uint64_t hash) {
  char name[32];
  std::snprintf(name, sizeof(name), "/%016llx", static_cast<unsigned long long>(hash));
  return name;
}

// The cache's path for |hash| with |suffix| (".so", ".pch"), with |lock|
// held on the hash's lock file, so that a process that wants the same entry
// waits for the one building it; empty without a cache.
inline std::string cacheEntry(uint64_t hash, const std::string &suffix,
                              BuildLock &lock) {
#ifdef KILN_HOST_KERNEL_CACHE
  std::error_code ec;
  std::filesystem::create_directories(KILN_HOST_KERNEL_CACHE, ec);
  std::string base = std::string(KILN_HOST_KERNEL_CACHE) + hexName(hash);
  lock.acquire(base + suffix + ".lock");
  return base + suffix;
#else
  (void)hash, (void)suffix, (void)lock;
  return "";
#endif
}

// A name next to |entry| for this process to write it under before
// publish() moves it into place.
inline std::string partialName(const std::string &entry) {
  return entry + "." + std::to_string(getpid()) + ".partial";
}

// Moves |partial| to |entry| by rename, so that processes running side by
// side see a whole file or none (the rename is atomic within one file
// system, hence a partial file next to the entry); false, with |partial|
// removed, when that fails.
inline bool publish(const std::string &partial, const std::string &entry) {
  std::error_code ec;
  std::filesystem::rename(partial, entry, ec);
  if (ec)
    std::filesystem::remove(partial, ec);
  return !ec;
}

// The emulation header precompiled with |flags| (the host build's, less
// -shared and the input), in the cache under a hash of the compiler, the
// flags and the header, built once per build tree like the libraries (under
// a lock of its own, entering the cache by rename); empty without a cache
// or when the build fails (the caller then includes the header itself).
// Parsing the header was about 0.8 s of every host build (1.2 s of a
// kernel's, 1.5 s of a small GPT step's 18; 2.2 s of that step's under
// ASan), and ctest and the ASan run each make about 90 libraries.
// -fno-pch-timestamp: the header's modification time is not checked (a
// checkout that touches it without changing it would fail every build);
// its content is in the hash.
// |header| is the header's text.
inline std::string precompiledHeader(const std::string &flags,
                                     const std::string &header) {
  uint64_t hash = fnv1a(std::string(KILN_HOST_CXX) + flags + " pch");
  BuildLock lock;
  std::string pch = cacheEntry(fnv1a(header, hash), ".pch", lock);
  if (pch.empty() || std::filesystem::exists(pch))
    return pch;
  std::string partial = partialName(pch);
  std::string command = std::string(KILN_HOST_CXX) + flags +
                        " -Xclang -fno-pch-timestamp -x c++-header " +
                        KILN_CUDA_EMULATION_HEADER + " -o " + partial + " > /dev/null 2>&1";
  if (std::system(command.c_str()) != 0) {
    std::error_code ec;
    std::filesystem::remove(partial, ec);
    return "";
  }
  return publish(partial, pch) ? pch : "";
}
} // namespace detail

// Builds |source| for the host and returns the NAME_host functions of
// |entries|. |what| names the build in file names and errors. |error| is
// empty on success, else says what failed (with the start of the
// compiler's log, which stays in the temporary directory it names). The
// library stays loaded for the process.
//
// Built libraries are kept in KILN_HOST_KERNEL_CACHE (a directory of the
// build tree, from CMake) under a hash of the compile command, the
// emulation header and the source (not |what|: two tests that emit the same
// kernels share one build), so the runtime's own kernels
// (RuntimeHostKernels.h), which every test process that runs attention or
// a convolution needs, are compiled once per build rather than once per
// test. A library enters the cache by rename, whole or not at all, so
// processes running side by side never load half of one; and a process
// holds the hash's lock file while it builds, so one that wants the same
// library meanwhile (ctest and scripts/sanitize.sh run suites side by side,
// and the attention kernels take a minute under ASan) waits for that build
// instead of repeating it.
// The emulation header itself is precompiled there once per set of flags
// (detail::precompiledHeader), and each build includes that.
//
// |level| is the build's optimization level. An emitted step's kernels are
// built at -O0 (the default): a test runs them on small shapes once or
// twice, and the compile is most of their cost (under ASan, with every
// host build at -O0, the step-emulation suite took 133 s instead of 203 s
// and the emulation suite 93 s instead of 145 s). The runtime's own
// kernels (RuntimeHostKernels.h) are built at -O1: built once per build
// tree, they run in every attention, convolution and epilogue test, and
// at -O0 the attention suite under ASan took 825 s instead of 280 s.
enum class HostOptLevel { O0, O1 };

inline std::map<std::string, HostKernel>
buildHostKernels(const std::string &source, const std::vector<std::string> &entries,
                 const std::string &what, std::string &error,
                 HostOptLevel level = HostOptLevel::O0) {
  std::map<std::string, HostKernel> kernels;
  error.clear();
  std::string flags = std::string(level == HostOptLevel::O0 ? " -O0" : " -O1") +
                      " -std=c++20 -w -fPIC -fno-strict-aliasing "
#ifdef KILN_HOST_SANITIZE
                      KILN_HOST_SANITIZE " "
#endif
                      "-DKILN_CUDA_EMULATION";
  detail::BuildLock lock;
  std::string header = detail::readFile(KILN_CUDA_EMULATION_HEADER);
  uint64_t hash = detail::fnv1a(std::string(KILN_HOST_CXX) + flags);
  hash = detail::fnv1a(source, detail::fnv1a(header, hash));
  std::string cached = detail::cacheEntry(hash, ".so", lock);
  std::string dir;
  if (cached.empty() || !std::filesystem::exists(cached)) {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "kiln-cuda-host-XXXXXX").string();
    if (!mkdtemp(pattern.data())) {
      error = "cannot create a temporary directory for " + what;
      return kernels;
    }
    dir = pattern;
    std::string cu = dir + "/" + what + ".cpp", so = dir + "/" + what + ".so",
                log = dir + "/clang.log";
    {
      std::ofstream os(cu);
      os << source;
      if (!os) {
        error = "cannot write " + cu;
        return kernels;
      }
    }
    auto command = [&](const std::string &header) {
      return std::string(KILN_HOST_CXX) + flags + " -shared" + header + " -x c++ " + cu +
             " -o " + so + " -lpthread > " + log + " 2>&1";
    };
    std::string include = std::string(" -include ") + KILN_CUDA_EMULATION_HEADER;
    std::string pch = detail::precompiledHeader(flags, header);
    // A precompiled header the compiler refuses (one from another version
    // of it at the same path) costs a second try with the header itself.
    if ((pch.empty() || std::system(command(" -include-pch " + pch).c_str()) != 0) &&
        std::system(command(include).c_str()) != 0) {
      error = "host build of " + what + " failed (" + cu + "; log " + log +
              "):\n" + detail::readFile(log).substr(0, 4000);
      return kernels;
    }
    if (!cached.empty()) {
      // Copied next to its place first: the temporary directory may be on
      // another file system.
      std::string partial = detail::partialName(cached);
      std::error_code ec;
      std::filesystem::copy_file(so, partial,
                                 std::filesystem::copy_options::overwrite_existing, ec);
      if (ec || !detail::publish(partial, cached)) {
        std::filesystem::remove(partial, ec);
        cached = so; // not cached: load the temporary build
      }
    } else {
      cached = so;
    }
  }
  lock.release();
  void *library = dlopen(cached.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!library) {
    error = dlerror();
    return kernels;
  }
  for (const std::string &entry : entries) {
    void *fn = dlsym(library, (entry + "_host").c_str());
    if (!fn) {
      error = "no " + entry + "_host in the host build of " + what;
      return kernels;
    }
    kernels[entry] = reinterpret_cast<HostKernel>(fn);
  }
  if (!dir.empty()) {
    std::error_code ignored; // the loaded library outlives its file
    std::filesystem::remove_all(dir, ignored);
  }
  return kernels;
}

} // namespace kiln::runtime::cuda::testing

#endif // KILN_TESTS_UNIT_CUDA_HOSTKERNELS_H
