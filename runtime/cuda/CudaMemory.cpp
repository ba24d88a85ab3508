//===- CudaMemory.cpp - a CUDA step's device memory, by part --------------===//

#include "runtime/cuda/CudaMemory.h"

#include "runtime/Units.h"
#include "runtime/cuda/CudaAttention.h"
#include "runtime/cuda/CudaConv.h"
#include "runtime/cuda/CudaEpilogue.h"

namespace kiln::runtime::cuda {

CudaStepMemory cudaStepMemory(const LoadedPackage &package,
                              const CudaDeviceInfo &device,
                              uint64_t gemmWorkspaceBytes, bool attentionMma) {
  CudaStepMemory m;
  m.arena = package.arenaSize;
  // cuBLASLt's workspace comes with the first GEMM or convolution.
  for (const PackageThunk &t : package.thunks)
    if ((t.kind == ThunkKind::LibraryCall && t.library == LibraryKind::Gemm) ||
        isConvThunk(t)) {
      m.gemmWorkspace = gemmWorkspaceBytes;
      break;
    }
  m.attention = attentionWorkspaceBytes(package, device, attentionMma);
  m.convolution = convWorkspaceBytes(package);
  m.epilogueFallback = epilogueWorkspaceBytes(package);
  return m;
}

std::string describeWorkspaces(const CudaStepMemory &memory) {
  std::string text;
  auto part = [&](uint64_t bytes, const char *name) {
    if (bytes)
      text += std::string(text.empty() ? "" : ", ") + name + " " +
              formatBytes(bytes);
  };
  part(memory.gemmWorkspace, "cuBLASLt workspace");
  part(memory.attention, "attention workspace");
  part(memory.convolution, "convolution workspace");
  return text;
}

std::string describeStepMemory(const CudaStepMemory &memory) {
  std::string text = (memory.sharedArena ? "own memory " : "arena ") +
                     formatBytes(memory.arena);
  if (std::string workspaces = describeWorkspaces(memory); !workspaces.empty())
    text += ", " + workspaces;
  return text;
}

} // namespace kiln::runtime::cuda
