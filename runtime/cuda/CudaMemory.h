//===- CudaMemory.h - a CUDA step's device memory, by part ------*- C++ -*-===//
//
// What CudaExecutable allocates on the device for a package, by part: the
// arena the compiler planned (the parameters, optimizer state, batch,
// gradients and activations; its size is the package's), and the
// workspaces of the libraries its thunks call, which the runtime sizes at
// load from the thunks' shapes:
//
//   cuBLASLt        CudaOptions::gemmWorkspaceBytes, once a GEMM or a
//                   convolution runs (the convolutions' GEMMs share it);
//   attention       the largest attention backward's D_i and, where a
//                   "ds" variant is offered, its dS tiles (CudaAttention.h);
//   convolution     the largest convolution's column buffer and swapped
//                   operands, one chunk of images (CudaConv.h).
//
// One more workspace exists only on some devices: where cuBLASLt declines
// a GEMM's bias-gradient or GELU-gradient epilogue, Kiln's kernel applies
// it from a workspace (CudaEpilogue.h) allocated then. It is reported on
// its own, outside total().
//
// The executable checks total() against the device's free memory before
// allocating anything; `kiln inspect` prints it for a package's
// architectures, and `kiln compile --memory-budget` fits it, not the arena
// alone. Not counted: the CUDA context, NCCL's buffers, and the pinned host
// memory of the batch staging.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_CUDA_CUDAMEMORY_H
#define KILN_RUNTIME_CUDA_CUDAMEMORY_H

#include "runtime/cuda/CudaDevice.h"
#include "runtime/package/Package.h"

#include <cstdint>
#include <string>

namespace kiln::runtime::cuda {

struct CudaStepMemory {
  uint64_t arena = 0;
  uint64_t gemmWorkspace = 0;
  uint64_t attention = 0;
  uint64_t convolution = 0;
  // Allocated only where cuBLASLt declines a GEMM epilogue; not in total().
  uint64_t epilogueFallback = 0;
  // Running in another step's memory (CudaOptions::shareMemoryWith):
  // arena is this step's own memory, and this the bytes of the other's
  // arena it uses (not in total()).
  uint64_t sharedArena = 0;

  uint64_t workspaces() const {
    return gemmWorkspace + attention + convolution;
  }
  uint64_t total() const { return arena + workspaces(); }
};

// The parts for |package| on |device| with |gemmWorkspaceBytes| for
// cuBLASLt and the attention kernels' tensor-core form when
// |attentionMma| (the runtime's defaults: 32 MiB, true).
CudaStepMemory cudaStepMemory(const LoadedPackage &package,
                              const CudaDeviceInfo &device,
                              uint64_t gemmWorkspaceBytes, bool attentionMma);

// "arena 5.45 GiB, cuBLASLt workspace 32.00 MiB, attention workspace
// 102.00 MiB": each part that is not 0 ("own memory 64.00 KiB" for the
// arena of a step in another's memory); describeWorkspaces, the same
// without the arena ("" when no workspace is).
std::string describeStepMemory(const CudaStepMemory &memory);
std::string describeWorkspaces(const CudaStepMemory &memory);

} // namespace kiln::runtime::cuda

#endif // KILN_RUNTIME_CUDA_CUDAMEMORY_H
