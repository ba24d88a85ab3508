//===- CudaDevice.h - CUDA device discovery through cudart ---------*- C++ -*-===//
//
// The first piece of the CUDA runtime (issue 7): finds the CUDA runtime
// library at run time (dlopen of libcudart.so.13, .12, libcudart.so, then
// the toolkit's library directory known at build time, or the file named by
// $KILN_CUDART) and asks it for the devices: count, name, compute
// capability and multiprocessor count (which the kernels' launch rule,
// codegen/cuda/CudaEmitter.h, needs) and the shared memory a block may opt
// in to (what a kernel's row cache may take). Nothing links libcudart or libcuda:
// a machine without them, or without a GPU or driver, gets a Status whose
// message says which (no library, cudart's error name and text), so the
// caller can print it and fall back to the CPU. Plain C++17 and <dlfcn.h>.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_CUDA_CUDADEVICE_H
#define KILN_RUNTIME_CUDA_CUDADEVICE_H

#include "runtime/Status.h"

#include <string>
#include <vector>

namespace kiln::runtime::cuda {

struct CudaDeviceInfo {
  int index = 0;
  std::string name;
  int major = 0, minor = 0; // compute capability (9.0 for an H200)
  int multiprocessors = 0;
  // Shared memory (static plus dynamic) one block may use once its kernel
  // opts in (cudaDevAttrMaxSharedMemoryPerBlockOptin: 232448 on sm_90);
  // 0 when unknown.
  int maxSharedMemoryPerBlockOptin = 0;
  unsigned smArch() const { return unsigned(major * 10 + minor); }
};

struct CudaRuntimeInfo {
  std::string library;   // the cudart file that was loaded
  int runtimeVersion = 0; // 13000 for CUDA 13.0
  int driverVersion = 0;  // 0 when no driver is installed
  std::vector<CudaDeviceInfo> devices;
};

// Loads cudart (once per process) and lists the devices. An error names
// what is missing: the library (and the names tried), or the cudart call
// that failed with its error name and text (cudaErrorNoDevice,
// cudaErrorInsufficientDriver, ...).
StatusOr<CudaRuntimeInfo> discoverCudaDevices();

// One line for `kiln train` and tools: "CUDA: N device(s): 0: NAME (sm_90,
// 132 SMs) ..." or "CUDA: no device (REASON)".
std::string describeCudaDevices();

} // namespace kiln::runtime::cuda

#endif // KILN_RUNTIME_CUDA_CUDADEVICE_H
