//===- CudaEpilogue.h - GEMM epilogues cuBLASLt refuses, as kernels -*- C++ -*-===//
//
// A CUDA package's GEMM thunk may carry a cuBLASLt epilogue (CudaApi.h's
// GemmEpilogue: bias, ReLU, bias+ReLU, tanh-GELU, bias+GELU, the bias
// gradient, tanh-GELU with its pre-activation as aux, with or without
// the bias; the GELU gradient reading it back). When cuBLASLt's heuristic offers no algorithm for one on the
// device (gemmPlan reports it as unsupported), CudaExecutable plans the
// plain GEMM instead and runs the epilogue right after it on the same
// stream, as XLA and PyTorch do, with these kernels:
//
//   bias / activation:  out[r, j] = act(out[r, j] + bias[j]) in place over
//                       the GEMM's [m, n] result (f32 arithmetic, one
//                       rounding to the output type);
//   gelu + aux:         pre = aux[r, j] (+ bias[j]), the plain GEMM having
//                       written its product into the aux buffer; aux = pre
//                       and out = gelu(pre), each rounded once;
//   dgelu:              out = product * gelu'(aux), aux the forward's
//                       pre-activation (tanh approximation, f32, one
//                       rounding); the product is out itself, or the
//                       workspace when aux is on out's bytes;
//   bias gradient:      grad[j] = the sum over l < k of rhs[l, j] (rhs
//                       [k, n], or [n, k] when transposed), in two passes
//                       with no atomics: per chunk of 256 rows a partial
//                       sum in f32 into a workspace (each block sums its
//                       rows in a fixed order and combines its warps in
//                       shared memory in a fixed order), then the chunks in
//                       order, rounded once to the output type. So the
//                       result is the same bits on every run.
//
// The GEMM then rounds its product to the output type before the epilogue
// (as the step's IR and the reference interpreter do), where cuBLASLt's
// fused epilogue keeps the f32 product: for bf16 and fp16 the two differ by
// about one rounding, within the bounds the step tests use.
//
// The kernels are CUDA C++ kept as source here (epilogueKernelSource()),
// compiled once per process and architecture through the CudaApi table's
// NVRTC (cached) and loaded per executable, like CudaConv.h's; they take
// pointers and 64-bit integers only, so tests run them on the host under
// codegen/cuda/CudaEmulation.h (each NAME has a NAME_host wrapper there).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_CUDA_CUDAEPILOGUE_H
#define KILN_RUNTIME_CUDA_CUDAEPILOGUE_H

#include "runtime/Status.h"
#include "runtime/cuda/CudaApi.h"
#include "runtime/cuda/RuntimeKernels.h"
#include "runtime/package/Package.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace kiln::runtime::cuda {

// The kernels' CUDA C++ (all of them, one translation unit).
const std::string &epilogueKernelSource();
// Every entry point epilogueKernelSource() defines.
std::vector<std::string> epilogueKernelEntryPoints();

// The workspace bytes the bias gradient of a GEMM with |params| needs (its
// f32 partial sums), or DGELU's (room for its product, [m, n] in the
// result's |dtype|, for when the aux input is the result's own buffer), 0
// for other epilogues.
uint64_t epilogueWorkspaceBytes(GemmEpilogue epilogue, const GemmParams &params,
                                PkgDType dtype);
// The workspace CudaExecutable gives CudaEpilogue once cuBLASLt declines
// one of |package|'s GEMM epilogues: the largest of its GEMMs' (one for
// every bias gradient's partial sums and every DGELU product that cannot
// go to its result).
uint64_t epilogueWorkspaceBytes(const LoadedPackage &package);

class CudaEpilogue {
public:
  // Compiles (or takes from the process cache) and loads the kernels for
  // |device|, and allocates |workspaceBytes| of device workspace (the
  // largest epilogueWorkspaceBytes of the GEMMs it will run).
  static StatusOr<std::unique_ptr<CudaEpilogue>>
  create(CudaApi &api, const CudaDeviceInfo &device, uint64_t workspaceBytes);
  ~CudaEpilogue();
  CudaEpilogue(const CudaEpilogue &) = delete;
  CudaEpilogue &operator=(const CudaEpilogue &) = delete;

  // Plans |epilogue| for thunk |index|, whose plain GEMM (|params|, batch
  // 1, elements of |dtype|: f32, f16 or bf16) writes |out|: the Bias*
  // epilogues read |bias| [n], BiasGradient reads |rhs| and writes
  // |biasGrad| [n], the *Aux ones read the product from |aux| and write
  // |aux| and |out|, DGelu scales |out| by gelu'(|aux|). (A residual GEMM's C is the plain GEMM's: cuBLASLt
  // reads it, and the kernel adds the bias.)
  Status plan(size_t index, GemmEpilogue epilogue, PkgDType dtype,
              const GemmParams &params, void *out, const void *bias,
              const void *rhs, void *biasGrad, void *aux = nullptr);
  // Queues thunk |index|'s epilogue kernels on |stream| (after its GEMM).
  Status run(size_t index, CudaStream stream);
  // Where thunk |index|'s plain GEMM writes its product: |out|, |aux| for
  // the *Aux epilogues, or the workspace for DGelu when |aux| overlaps
  // |out| (the planner puts the GELU gradient on its input's bytes; the
  // product must not overwrite the pre-activation before the kernel reads
  // it).
  void *gemmTarget(size_t index) const;

  // The launches planned for thunk |index| (entry points, for tests).
  std::vector<std::string> entries(size_t index) const;

  // Its kernel set and where the cubin came from (RuntimeKernels::origin).
  const RuntimeKernels &kernels() const { return kernels_; }

private:
  CudaEpilogue(CudaApi &api, const CudaDeviceInfo &device)
      : api_(api), device_(device), kernels_(api, "kiln_epilogue", "GEMM epilogue") {}

  CudaApi &api_;
  CudaDeviceInfo device_;
  RuntimeKernels kernels_;
  void *workspace_ = nullptr;
  uint64_t workspaceBytes_ = 0;
  // Each thunk's launches (pointers and 64-bit integers), in order, and
  // where its plain GEMM writes.
  std::map<size_t, std::vector<KernelLaunch>> plans_;
  std::map<size_t, void *> gemmTargets_;
};

} // namespace kiln::runtime::cuda

#endif // KILN_RUNTIME_CUDA_CUDAEPILOGUE_H
