//===- RuntimeKernels.h - the runtime's own CUDA kernels, via NVRTC -*- C++ -*-===//
//
// The runtime's library calls that run their own kernels (CudaConv.h,
// CudaAttention.h, CudaEpilogue.h) keep them as CUDA C++ source and build
// them the same way: NVRTC through the CudaApi table compiles a kernel set
// once per process (the cubin is cached, keyed by the set's name, the
// table, the architecture and the source's hash), each executable loads it
// as one module, looks its entry points up by name (once each) and unloads
// it when it goes. RuntimeKernels is that piece; KernelLaunch is one
// planned launch of one of its kernels.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_CUDA_RUNTIMEKERNELS_H
#define KILN_RUNTIME_CUDA_RUNTIMEKERNELS_H

#include "runtime/Status.h"
#include "runtime/cuda/CudaApi.h"

#include <map>
#include <string>
#include <vector>

namespace kiln::runtime::cuda {

// One kernel launch, planned at load: a 1-D grid of |grid| blocks of
// |block| threads, with |sharedBytes| of dynamic shared memory (past 48
// KiB the function must have opted in).
struct KernelLaunch {
  CudaFunction function = nullptr;
  std::string entry;
  uint32_t grid = 1, block = 1;
  uint32_t sharedBytes = 0;
  std::vector<void *> args; // the parameters' values (pointers, integers)
};

class RuntimeKernels {
public:
  // A kernel set compiled as NVRTC program |program| (e.g. "kiln_conv");
  // errors name "the |what| kernels" (e.g. "the convolution kernels") and
  // "the |what| kernel ENTRY".
  RuntimeKernels(CudaApi &api, std::string program, std::string what)
      : api_(api), program_(std::move(program)), what_(std::move(what)) {}
  // Unloads the module.
  ~RuntimeKernels();
  RuntimeKernels(const RuntimeKernels &) = delete;
  RuntimeKernels &operator=(const RuntimeKernels &) = delete;

  // Compiles |source| for sm_|arch| (or takes it from the process cache,
  // else from the disk cache: CubinCache.h) and loads it. A cubin from the
  // disk that does not load is compiled again, once.
  Status load(const std::string &source, unsigned arch);
  // Empties the process cache (tests: the next load reads the disk cache
  // or compiles).
  static void clearProcessCache();
  bool loaded() const { return module_ != nullptr; }
  // Where the loaded cubin came from, for a note: "compiled by NVRTC in
  // 5.43 s (kept in DIR)", "read from the cubin cache (DIR)" or "compiled
  // earlier in this process"; "" before a load.
  const std::string &origin() const { return origin_; }

  // The loaded module's entry point |entry| (looked up once).
  StatusOr<CudaFunction> function(const std::string &entry);

  // Queues |launch| on |stream|; the table's status as it is (the caller
  // names the kernel).
  Status launch(const KernelLaunch &launch, CudaStream stream);

private:
  CudaApi &api_;
  std::string program_, what_;
  std::string origin_;
  CudaModule module_ = nullptr;
  std::map<std::string, CudaFunction> functions_;
};

} // namespace kiln::runtime::cuda

#endif // KILN_RUNTIME_CUDA_RUNTIMEKERNELS_H
