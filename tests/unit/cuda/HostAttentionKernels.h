//===- HostAttentionKernels.h - the attention kernels built for the host -*- C++ -*-===//
//
// runtime/cuda/CudaAttention.h's kernels (attentionKernelSource(90))
// compiled once per process for the host under codegen/cuda/CudaEmulation.h
// (KILN_HOST_CXX, KILN_CUDA_EMULATION_HEADER from CMake) and loaded: entry
// point -> its NAME_host function, for FakeCudaApi::hostKernels. Tests that
// run a package holding Attention / AttentionGrad thunks on the fake table
// add these to the generated kernels' host functions.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TESTS_UNIT_CUDA_HOSTATTENTIONKERNELS_H
#define KILN_TESTS_UNIT_CUDA_HOSTATTENTIONKERNELS_H

#include "runtime/cuda/CudaAttention.h"
#include "tests/unit/cuda/FakeCudaApi.h"

#include <dlfcn.h>
#include <stdlib.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <string>

namespace kiln::runtime::cuda::testing {

// |error| is empty on success, else says what failed (the compiler's log
// stays in the temporary directory it names).
inline const std::map<std::string, HostKernel> &
hostAttentionKernels(std::string &error) {
  static std::map<std::string, HostKernel> kernels;
  static std::string failure;
  static bool built = false;
  if (!built) {
    built = true;
    char dir[] = "/tmp/kiln-cuda-attention-XXXXXX";
    if (!mkdtemp(dir)) {
      failure = "cannot create a temporary directory";
    } else {
      std::string cu = std::string(dir) + "/attention.cpp",
                  so = std::string(dir) + "/attention.so",
                  log = std::string(dir) + "/clang.log";
      std::ofstream(cu) << attentionKernelSource(90);
      std::string command = std::string(KILN_HOST_CXX) +
                            " -std=c++20 -O1 -w -shared -fPIC -fno-strict-aliasing "
                            "-DKILN_CUDA_EMULATION -include " +
                            KILN_CUDA_EMULATION_HEADER + " -x c++ " + cu +
                            " -o " + so + " -lpthread > " + log + " 2>&1";
      if (std::system(command.c_str()) != 0) {
        failure = "host build of the attention kernels failed; see " + log;
      } else if (void *library = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL)) {
        for (const std::string &entry : attentionKernelEntryPoints(90)) {
          void *fn = dlsym(library, (entry + "_host").c_str());
          if (!fn) {
            failure = "no " + entry + "_host in the host build";
            break;
          }
          kernels[entry] = reinterpret_cast<HostKernel>(fn);
        }
      } else {
        failure = dlerror();
      }
    }
  }
  error = failure;
  return kernels;
}

} // namespace kiln::runtime::cuda::testing

#endif // KILN_TESTS_UNIT_CUDA_HOSTATTENTIONKERNELS_H
