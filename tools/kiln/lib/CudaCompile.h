//===- CudaCompile.h - kiln compile for a CUDA target --------------*- C++ -*-===//
//
// `kiln compile --target=cuda[:sm_NN[,sm_MM...]]`: the planned step's
// kernels become CUDA C++ (codegen/cuda/CudaEmitter.h), compiled by NVRTC
// to PTX and one cubin per architecture (codegen/cuda/Nvrtc.h, cached;
// once every kernel is emitted, several kernels at once on threads);
// GEMMs, convolutions and attention are LibraryCall thunks as in the CPU
// package (cuBLASLt GEMMs with their epilogues, PackageBuilder.cpp).
// `--emit=cuda|ptx -o DIR` writes one NAME.cu (or
// NAME.ptx, for the lowest architecture) per kernel and DIR/kernels.index,
// one line per kernel: name, entry point, block, blocks with work, nest
// layouts and, per architecture, registers and spill bytes from ptxas.
// `--emit=package` writes a package of target kind Cuda whose kernels
// carry source, PTX and cubins, block = (256, 1, 1) and grid.x = the blocks
// that have work; the runtime launches min(grid.x, multiprocessors *
// (2048 / block.x)) blocks (every kernel loops grid-stride).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TOOLS_KILN_LIB_CUDACOMPILE_H
#define KILN_TOOLS_KILN_LIB_CUDACOMPILE_H

#include "runtime/cuda/CudaDevice.h"
#include "runtime/cuda/CudaMemory.h"
#include "tools/kiln/lib/PackageBuilder.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/Timing.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kiln::cli {

// Whether this build can compile CUDA C++ (NVRTC found at build time).
bool haveNvrtc();

// "cuda" -> {90}; "cuda:sm_80,sm_90" -> {80, 90}. False with |error| when
// |text| names no CUDA target or a bad architecture.
bool parseCudaTarget(const std::string &text, std::vector<unsigned> &archs,
                     std::string &error);

struct CudaArchStats {
  unsigned arch = 0;
  int registers = -1, spillStoreBytes = -1, spillLoadBytes = -1;
  bool fromCache = false;
};

struct CudaKernelReport {
  std::string name, entryPoint;
  // The earlier kernel whose code this one has (the same fusion: nothing
  // compiled for it), or "".
  std::string sameAs;
  std::vector<std::string> layouts;
  uint64_t maxBlocks = 0;
  std::vector<CudaArchStats> archs;
};

struct CudaCompileOptions {
  std::vector<unsigned> archs = {90};
  bool nvrtc = true; // compile to PTX and cubins (needs haveNvrtc())
  // Kernels compiled at once by NVRTC and ptxas (PackageBuildOptions::jobs;
  // 0: one per hardware thread), and where --timing times them.
  unsigned jobs = 0;
  mlir::TimingScope *timing = nullptr;
  // Each distinct kernel's NVRTC and ptxas time (PackageBuildOptions).
  std::vector<KernelFinishTime> *finishTimes = nullptr;
};

// A device of architecture sm_|arch| as the runtime would see it, for
// sizing without one: its opt-in shared memory (cudaSharedMemoryOptinBytes);
// no multiprocessor count.
runtime::cuda::CudaDeviceInfo cudaDeviceOfArch(unsigned arch);

// What CUDA package |pkg| takes on a device of each of its architectures
// with the runtime's defaults (runtime/cuda/CudaMemory.h): the largest,
// and in |arch| when given, its architecture.
runtime::cuda::CudaStepMemory
cudaPackageMemory(const runtime::LoadedPackage &pkg, unsigned *arch = nullptr);

// What the step of |module| (compiled up to its buffer plan) takes on a
// device of each of |archs|, as cudaPackageMemory counts it for the
// package built from it without compiling its kernels (so in no time);
// std::nullopt when no package could be built.
std::optional<runtime::cuda::CudaStepMemory>
cudaPlanMemory(mlir::ModuleOp module, llvm::ArrayRef<unsigned> archs,
               unsigned *arch = nullptr);

// Its workspaces, the bytes the runtime allocates beside the plan (-1
// without a package): PipelineOptions::runtimeWorkspaceBytes for
// --memory-budget.
int64_t cudaRuntimeWorkspaceBytes(mlir::ModuleOp module,
                                  llvm::ArrayRef<unsigned> archs);

// Compiles every kernel of a planned step (for --report) without writing
// anything.
mlir::LogicalResult compileCudaKernels(mlir::ModuleOp module,
                                       const CudaCompileOptions &options,
                                       llvm::StringRef command,
                                       llvm::raw_ostream &errs,
                                       std::vector<CudaKernelReport> &reports);

// Writes the CUDA package of a planned step to |outputPath|.
mlir::LogicalResult
writeCudaPackage(mlir::ModuleOp module, llvm::StringRef modelName,
                 llvm::StringRef sourceBytes, llvm::ArrayRef<std::string> flags,
                 const std::string &outputPath, const CudaCompileOptions &options,
                 llvm::StringRef command, llvm::raw_ostream &errs,
                 std::vector<CudaKernelReport> &reports);

// Writes the kernels as DIR/NAME.cu (|ptx| false) or DIR/NAME.ptx, and
// DIR/kernels.index.
mlir::LogicalResult
writeCudaKernelFiles(mlir::ModuleOp module, llvm::StringRef modelName,
                     const std::string &dir, bool ptx,
                     const CudaCompileOptions &options, llvm::StringRef command,
                     llvm::raw_ostream &errs,
                     std::vector<CudaKernelReport> &reports);

// The --report section for CUDA kernels: counts, layouts, registers and
// spills per architecture.
void printCudaReport(llvm::ArrayRef<CudaKernelReport> reports,
                     llvm::raw_ostream &os);

} // namespace kiln::cli

#endif // KILN_TOOLS_KILN_LIB_CUDACOMPILE_H
