//===- CudaAttentionKernels.h - the attention kernels' templates -*- C++ -*-===//
//
// Internal to runtime/cuda: the attention kernels' CUDA C++ templates,
// without entry points: kAttentionKernelTemplates (CudaAttentionKernels.cpp:
// the shared helpers, the CUDA-core and wmma kernels, the entry-point
// macros) and kAttentionMmaKernelTemplates (CudaAttentionMmaKernels.cpp:
// the mma.sync kernels, which use those helpers and so follow them).
// attentionKernelSource() (CudaAttention.cpp) joins them and appends one
// KILN_ATTN_KERNEL line per kernel it instantiates.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_CUDA_CUDAATTENTIONKERNELS_H
#define KILN_RUNTIME_CUDA_CUDAATTENTIONKERNELS_H

namespace kiln::runtime::cuda {

extern const char *const kAttentionKernelTemplates;
extern const char *const kAttentionMmaKernelTemplates;

} // namespace kiln::runtime::cuda

#endif // KILN_RUNTIME_CUDA_CUDAATTENTIONKERNELS_H
