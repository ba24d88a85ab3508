//===- DynamicLibrary.cpp - finding CUDA's shared libraries at run time ---===//
//
// See DynamicLibrary.h. KILN_CUDA_LIBRARY_DIR is the toolkit's library
// directory when the build found one (runtime/CMakeLists.txt).
//
//===----------------------------------------------------------------------===//

#include "runtime/DynamicLibrary.h"

#include <dlfcn.h>

#include <cstdlib>

namespace kiln::runtime {

void *DynamicLibrary::symbol(const char *name) const {
  return handle ? dlsym(handle, name) : nullptr;
}

std::vector<std::string>
cudaLibraryCandidates(const char *stem, const char *envVar,
                      std::initializer_list<const char *> versions) {
  if (const char *env = std::getenv(envVar); env && *env)
    return {env};
  std::vector<std::string> names;
  for (const char *version : versions)
    names.push_back(std::string(stem) + version);
#ifdef KILN_CUDA_LIBRARY_DIR
  for (const char *version : versions)
    names.push_back(std::string(KILN_CUDA_LIBRARY_DIR) + "/" + stem + version);
#endif
  return names;
}

DynamicLibrary openFirstLibrary(const std::vector<std::string> &names) {
  DynamicLibrary library;
  for (const std::string &name : names) {
    if (void *handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)) {
      library.handle = handle;
      library.path = name;
      return library;
    }
    const char *why = dlerror();
    library.tried += (library.tried.empty() ? "" : "; ") + name + " (" +
                     (why ? why : "not found") + ")";
  }
  return library;
}

DynamicLibrary openCudaLibrary(const char *stem, const char *envVar,
                               std::initializer_list<const char *> versions) {
  return openFirstLibrary(cudaLibraryCandidates(stem, envVar, versions));
}

std::string describeLoadFailure(const DynamicLibrary &library,
                                const char *envVar) {
  return "tried " + library.tried + " (set " + envVar +
         " to the library's path)";
}

} // namespace kiln::runtime
