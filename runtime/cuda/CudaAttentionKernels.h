//===- CudaAttentionKernels.h - the attention kernels' templates -*- C++ -*-===//
//
// Internal to runtime/cuda: the attention kernels' CUDA C++ templates
// (CudaAttentionKernels.cpp), one guarded translation unit without entry
// points; attentionKernelSource() (CudaAttention.cpp) appends one
// KILN_ATTN_KERNEL line per kernel it instantiates.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_CUDA_CUDAATTENTIONKERNELS_H
#define KILN_RUNTIME_CUDA_CUDAATTENTIONKERNELS_H

namespace kiln::runtime::cuda {

extern const char *const kAttentionKernelTemplates;

} // namespace kiln::runtime::cuda

#endif // KILN_RUNTIME_CUDA_CUDAATTENTIONKERNELS_H
