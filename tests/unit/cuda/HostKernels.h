//===- HostKernels.h - CUDA kernel sources built for the host -----*- C++ -*-===//
//
// buildHostKernels compiles CUDA C++ (an emitted step's kernels, or one of
// the runtime's own kernel sources) for the host under
// codegen/cuda/CudaEmulation.h with KILN_HOST_CXX (both macros from CMake),
// loads the shared library and returns entry point -> its NAME_host
// function, as FakeCudaApi::hostKernels takes them. No LLVM: tests that link
// only the runtime use it too.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TESTS_UNIT_CUDA_HOSTKERNELS_H
#define KILN_TESTS_UNIT_CUDA_HOSTKERNELS_H

#include <dlfcn.h>
#include <stdlib.h>

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

// Builds |source| for the host and returns the NAME_host functions of
// |entries|. |what| names the build in file names and errors. |error| is
// empty on success, else says what failed (with the start of the
// compiler's log, which stays in the temporary directory it names). The
// library stays loaded for the process.
inline std::map<std::string, HostKernel>
buildHostKernels(const std::string &source, const std::vector<std::string> &entries,
                 const std::string &what, std::string &error) {
  std::map<std::string, HostKernel> kernels;
  error.clear();
  std::string pattern =
      (std::filesystem::temp_directory_path() / "kiln-cuda-host-XXXXXX").string();
  if (!mkdtemp(pattern.data())) {
    error = "cannot create a temporary directory for " + what;
    return kernels;
  }
  std::string dir = pattern, cu = dir + "/" + what + ".cpp",
              so = dir + "/" + what + ".so", log = dir + "/clang.log";
  {
    std::ofstream os(cu);
    os << source;
    if (!os) {
      error = "cannot write " + cu;
      return kernels;
    }
  }
  std::string command = std::string(KILN_HOST_CXX) +
                        " -std=c++20 -O1 -w -shared -fPIC -fno-strict-aliasing "
                        "-DKILN_CUDA_EMULATION -include " +
                        KILN_CUDA_EMULATION_HEADER + " -x c++ " + cu + " -o " +
                        so + " -lpthread > " + log + " 2>&1";
  if (std::system(command.c_str()) != 0) {
    std::ifstream in(log);
    std::string text((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
    error = "host build of " + what + " failed (" + cu + "; log " + log +
            "):\n" + text.substr(0, 4000);
    return kernels;
  }
  void *library = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
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
  std::error_code ignored; // the loaded library outlives its file
  std::filesystem::remove_all(dir, ignored);
  return kernels;
}

} // namespace kiln::runtime::cuda::testing

#endif // KILN_TESTS_UNIT_CUDA_HOSTKERNELS_H
