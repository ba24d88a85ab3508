//===- PackageBuilder.h - a planned step as a .kpkg package -----*- C++ -*-===//
//
// `kiln compile --emit=package`: maps the compile pipeline's planned step
// (buffer offsets, fusions, argument and result attributes) onto the plain
// structs of runtime/package/Package.h and writes them with
// serialize/PackageWriter.h. Fusions of kind loop, reduction, multi_output
// and horizontal become LLVM bitcode kernels with a KernelLaunch thunk; a
// dot_general becomes a Gemm LibraryCall (runtime/cpu/Blas.h's planGemm),
// after transpose kernels for operands that need packing; a gemm fusion
// becomes that Gemm into a scratch buffer plus an epilogue kernel; conv2d
// and its gradients Conv2D* LibraryCalls with ConvParams; any other
// top-level op becomes a one-op kernel when the kernel model expresses it
// (max pooling, gather, scatter_add, constants, reshapes that are not
// views) and is refused with an error naming it otherwise.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TOOLS_KILN_LIB_PACKAGEBUILDER_H
#define KILN_TOOLS_KILN_LIB_PACKAGEBUILDER_H

#include "ir/KilnOps.h"
#include "runtime/package/Package.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/Timing.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/raw_ostream.h"

#include <functional>
#include <string>

namespace kiln::cli {

// Builds the package of the planned |module| and writes it to |outputPath|.
// |sourceBytes| is the input file's text (hashed into the metadata with
// FNV-1a 64), |flags| the compile flags as given. Prints the first problem
// to |errs| (prefixed with |command|) and fails.

// What is left of a kernel's compilation once its fusion has been read:
// the part that needs no MLIR (LLVM's -O3 for the CPU; NVRTC and ptxas for
// CUDA), most of the time a kernel takes. The builder runs every kernel's
// finish after its walk of the step, up to PackageBuildOptions::jobs of
// them at once on threads, each on its own kernel's data: it completes
// |kernel| (the one compileKernel filled) or returns false with |error|
// set. The first failure in kernel order is the one reported, whatever the
// threads' order.
using KernelFinish =
    std::function<bool(runtime::PackageKernel &kernel, std::string &error)>;

// A non-CPU target (CUDA: tools/kiln/lib/CudaCompile.h): the package's
// target, and how a kernel fusion (never `gemm`) becomes |kernel| (which
// arrives with its name set; fill kind, entry point, code and launch
// shape, or leave the code to |finish|). compileKernel returns false with
// |error| set on failure.
struct PackageTargetHooks {
  runtime::PackageTarget target;
  std::function<bool(FusionOp fusion, const std::string &name,
                     runtime::PackageKernel &kernel, KernelFinish &finish,
                     std::string &error)>
      compileKernel;
  // Told, instead of compileKernel, of kernel |name| whose fusion computes
  // what kernel |sameAs|'s did: the package gives it that kernel's code
  // (fusionKey in codegen/KernelModel.h). May be empty.
  std::function<void(const std::string &name, const std::string &sameAs)>
      reuseKernel;
};

// How long one distinct kernel's finish took (kiln compile --timing lists
// the slowest): its name in the package, the graph nodes it computes
// (package.fbs source_nodes: the first, and how many more), its wall
// time in seconds, and whether a CPU kernel's bitcode came from the cache
// (codegen/cpu/BitcodeCache.h) instead of -O3.
struct KernelFinishTime {
  std::string kernel;
  std::string nodes;
  double seconds = 0;
  bool fromCache = false;
};

struct PackageBuildOptions {
  // A non-CPU target's hooks; null builds the CPU package.
  const PackageTargetHooks *targetHooks = nullptr;
  // How many kernels are finished at once (KernelFinish), on threads; 0
  // means one per hardware thread. The package is the same for every value.
  unsigned jobs = 0;
  // When given (kiln compile --timing), the kernels' two phases are timed
  // under it.
  mlir::TimingScope *timing = nullptr;
  // When given, each distinct kernel's finish is timed and appended, in
  // kernel order.
  std::vector<KernelFinishTime> *finishTimes = nullptr;
};

// Builds the package of a planned step (see PackageBuilder.cpp) for the
// CPU, or for |options.targetHooks|'s target when given.
mlir::LogicalResult
buildStepPackage(mlir::ModuleOp module, llvm::StringRef modelName,
                 llvm::StringRef sourceBytes, llvm::ArrayRef<std::string> flags,
                 llvm::StringRef command, llvm::raw_ostream &errs,
                 runtime::LoadedPackage &result,
                 const PackageBuildOptions &options = {});

// buildStepPackage, then writes the package to |outputPath|.
mlir::LogicalResult
writeStepPackage(mlir::ModuleOp module, llvm::StringRef modelName,
                 llvm::StringRef sourceBytes, llvm::ArrayRef<std::string> flags,
                 const std::string &outputPath, llvm::StringRef command,
                 llvm::raw_ostream &errs,
                 const PackageBuildOptions &options = {});

} // namespace kiln::cli

#endif // KILN_TOOLS_KILN_LIB_PACKAGEBUILDER_H
