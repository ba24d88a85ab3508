//===- RuntimeHostKernels.h - the runtime's kernels built for the host -*- C++ -*-===//
//
// The CUDA C++ the runtime keeps as source (runtime/cuda/CudaAttention.h's
// attentionKernelSource(arch), CudaConv.h's convKernelSource(),
// CudaEpilogue.h's epilogueKernelSource()) built once per process for the
// host (HostKernels.h) and loaded: entry point -> its NAME_host function,
// for FakeCudaApi::hostKernels. Tests that run a package holding
// attention, convolution or fallback-epilogue thunks on the fake table add
// these to the generated kernels' host functions. They are built at -O1
// (HostKernels.h says why). Each returns the same
// map on every call; |error| is empty on success, else says what failed.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TESTS_UNIT_CUDA_RUNTIMEHOSTKERNELS_H
#define KILN_TESTS_UNIT_CUDA_RUNTIMEHOSTKERNELS_H

#include "runtime/cuda/CudaAttention.h"
#include "runtime/cuda/CudaConv.h"
#include "runtime/cuda/CudaEpilogue.h"
#include "tests/unit/cuda/HostKernels.h"

#include <set>
#include <tuple>

namespace kiln::runtime::cuda::testing {

// The attention kernels of sm_|arch| (90: the mma.sync kernels; 75: the
// wmma kernels f16 keeps before sm_80; |mma| false: wmma's at any
// architecture), built once per architecture and choice; with |only|, just
// the sets whose forward entry points it names (attentionKernelSource).
inline const std::map<std::string, HostKernel> &
hostAttentionKernels(std::string &error, unsigned arch = 90, bool mma = true,
                     const std::set<std::string> &only = {}) {
  struct Built {
    std::string failure;
    std::map<std::string, HostKernel> kernels;
  };
  static std::map<std::tuple<unsigned, bool, std::set<std::string>>, Built> built;
  auto [it, inserted] = built.try_emplace({arch, mma, only});
  if (inserted)
    it->second.kernels = buildHostKernels(
        attentionKernelSource(arch, only, mma),
        attentionKernelEntryPoints(arch, mma, only),
        "attention_sm" + std::to_string(arch) + (mma ? "" : "_wmma"),
        it->second.failure, HostOptLevel::O1);
  error = it->second.failure;
  return it->second.kernels;
}

inline const std::map<std::string, HostKernel> &hostConvKernels(std::string &error) {
  static std::string failure;
  static const std::map<std::string, HostKernel> kernels = buildHostKernels(
      convKernelSource(), convKernelEntryPoints(), "conv", failure,
      HostOptLevel::O1);
  error = failure;
  return kernels;
}

inline const std::map<std::string, HostKernel> &
hostEpilogueKernels(std::string &error) {
  static std::string failure;
  static const std::map<std::string, HostKernel> kernels = buildHostKernels(
      epilogueKernelSource(), epilogueKernelEntryPoints(), "epilogue", failure,
      HostOptLevel::O1);
  error = failure;
  return kernels;
}

} // namespace kiln::runtime::cuda::testing

#endif // KILN_TESTS_UNIT_CUDA_RUNTIMEHOSTKERNELS_H
