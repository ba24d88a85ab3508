//===- DynamicLibrary.h - finding CUDA's shared libraries at run time -*- C++ -*-===//
//
// The GPU runtime, device discovery and NCCL never link CUDA's libraries:
// they dlopen them, so a kiln built with the toolkit starts on a machine
// without it and says what it looked for. This is the one place that knows
// where to look: an environment variable naming the library (then only that
// one), else the sonames of the supported major versions through the
// loader's search path, then the toolkit directory this kiln was built
// against.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_DYNAMICLIBRARY_H
#define KILN_RUNTIME_DYNAMICLIBRARY_H

#include <initializer_list>
#include <string>
#include <vector>

namespace kiln::runtime {

struct DynamicLibrary {
  void *handle = nullptr; // dlopen's; null when nothing loaded
  std::string path;       // the name that loaded
  std::string tried;      // "name (dlerror); ..." of every name tried
  // dlsym of |symbol|, null when absent or nothing loaded.
  void *symbol(const char *symbol) const;
};

// Where to look for |stem| ("libcudart"), in order: $|envVar| alone when it
// is set and not empty; else stem + each of |versions| (".so.13"), then the
// same in the build's CUDA toolkit library directory (when there was one).
std::vector<std::string>
cudaLibraryCandidates(const char *stem, const char *envVar,
                      std::initializer_list<const char *> versions = {
                          ".so.13", ".so.12", ".so"});

// dlopens the first of |names| that loads (RTLD_NOW | RTLD_LOCAL).
DynamicLibrary openFirstLibrary(const std::vector<std::string> &names);

// The two together; the message of a failure is
// "<what>: tried <tried> (set <envVar> to the library's path)".
DynamicLibrary openCudaLibrary(
    const char *stem, const char *envVar,
    std::initializer_list<const char *> versions = {".so.13", ".so.12", ".so"});
std::string describeLoadFailure(const DynamicLibrary &library,
                                const char *envVar);

} // namespace kiln::runtime

#endif // KILN_RUNTIME_DYNAMICLIBRARY_H
