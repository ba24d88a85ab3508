//===- CudaPrinter.h - the CUDA C++ text of a kernel module --------*- C++ -*-===//
//
// Internal to codegen/cuda: what the kernel builders (CudaEmitter.cpp and
// the layouts of CudaLayouts.h, which build a kernel as MLIR) and
// CudaPrinter.cpp (which writes that MLIR as CUDA C++) share.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_CODEGEN_CUDA_CUDAPRINTER_H
#define KILN_CODEGEN_CUDA_CUDAPRINTER_H

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>

namespace kiln {

// The kernel's function in the module buildCudaKernelModule builds.
constexpr llvm::StringLiteral kCudaKernelFunc = "kernel";

// The prelude every kernel source starts with (guarded, so several kernels
// concatenate into one translation unit): element types, NaN-propagating
// min/max, vector accesses, warp/block reductions, the row cache's staging
// and the scatter rows' position lists.
extern const char *const kCudaPrelude;

// A kiln.* intrinsic's name without its declaration's ".N" suffix (one
// declaration per name and signature).
llvm::StringRef cudaIntrinsicName(llvm::StringRef symbol);

// Writes |module|'s kernel function as `extern "C" __global__ void
// __launch_bounds__(|blockThreads|) |name|(inputs..., outputs...)` (its
// last |numOutputs| arguments are the outputs), with |dynamicSharedBytes|
// of dynamic shared memory declared when non-zero, and the host entry
// point the emulation defines. Fails with
// a diagnostic naming an op or type outside the printer's subset.
mlir::LogicalResult printCudaKernel(mlir::ModuleOp module, llvm::StringRef name,
                                    unsigned numOutputs,
                                    uint32_t dynamicSharedBytes,
                                    unsigned blockThreads,
                                    llvm::raw_ostream &os);

} // namespace kiln

#endif // KILN_CODEGEN_CUDA_CUDAPRINTER_H
