//===- RuntimeHostKernels.h - the runtime's kernels built for the host -*- C++ -*-===//
//
// The CUDA C++ the runtime keeps as source (runtime/cuda/CudaAttention.h's
// attentionKernelSource(90), CudaConv.h's convKernelSource(),
// CudaEpilogue.h's epilogueKernelSource()) built once per process for the
// host (HostKernels.h) and loaded: entry point -> its NAME_host function,
// for FakeCudaApi::hostKernels. Tests that run a package holding
// attention, convolution or fallback-epilogue thunks on the fake table add
// these to the generated kernels' host functions. Each returns the same
// map on every call; |error| is empty on success, else says what failed.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TESTS_UNIT_CUDA_RUNTIMEHOSTKERNELS_H
#define KILN_TESTS_UNIT_CUDA_RUNTIMEHOSTKERNELS_H

#include "runtime/cuda/CudaAttention.h"
#include "runtime/cuda/CudaConv.h"
#include "runtime/cuda/CudaEpilogue.h"
#include "tests/unit/cuda/HostKernels.h"

namespace kiln::runtime::cuda::testing {

inline const std::map<std::string, HostKernel> &
hostAttentionKernels(std::string &error) {
  static std::string failure;
  static const std::map<std::string, HostKernel> kernels = buildHostKernels(
      attentionKernelSource(90), attentionKernelEntryPoints(90), "attention",
      failure);
  error = failure;
  return kernels;
}

inline const std::map<std::string, HostKernel> &hostConvKernels(std::string &error) {
  static std::string failure;
  static const std::map<std::string, HostKernel> kernels = buildHostKernels(
      convKernelSource(), convKernelEntryPoints(), "conv", failure);
  error = failure;
  return kernels;
}

inline const std::map<std::string, HostKernel> &
hostEpilogueKernels(std::string &error) {
  static std::string failure;
  static const std::map<std::string, HostKernel> kernels = buildHostKernels(
      epilogueKernelSource(), epilogueKernelEntryPoints(), "epilogue", failure);
  error = failure;
  return kernels;
}

} // namespace kiln::runtime::cuda::testing

#endif // KILN_TESTS_UNIT_CUDA_RUNTIMEHOSTKERNELS_H
