//===- PackageBuilder.h - a planned step as a .kpkg package ---------*- C++
//-*-===//
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
#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/raw_ostream.h"

#include <functional>
#include <string>

namespace kiln::cli {

// Builds the package of the planned |module| and writes it to |outputPath|.
// |sourceBytes| is the input file's text (hashed into the metadata with
// FNV-1a 64), |flags| the compile flags as given. Prints the first problem
// to |errs| (prefixed with |command|) and fails.
// A non-CPU target (CUDA: tools/kiln/lib/CudaCompile.h): the package's
// target, and how a kernel fusion (never `gemm`) becomes |kernel| (which
// arrives with its name set; fill kind, entry point, code and launch
// shape). compileKernel returns false with |error| set on failure.
struct PackageTargetHooks {
  runtime::PackageTarget target;
  std::function<bool(FusionOp fusion, const std::string &name,
                     runtime::PackageKernel &kernel, std::string &error)>
      compileKernel;
  // Told, instead of compileKernel, of kernel |name| whose fusion computes
  // what kernel |sameAs|'s did: the package gives it that kernel's code
  // (fusionKey in codegen/KernelModel.h). May be empty.
  std::function<void(const std::string &name, const std::string &sameAs)>
      reuseKernel;
};

// Builds the package of a planned step (see PackageBuilder.cpp) for the
// CPU, or for |targetHooks|'s target when given.
mlir::LogicalResult
buildStepPackage(mlir::ModuleOp module, llvm::StringRef modelName,
                 llvm::StringRef sourceBytes, llvm::ArrayRef<std::string> flags,
                 llvm::StringRef command, llvm::raw_ostream &errs,
                 runtime::LoadedPackage &result,
                 const PackageTargetHooks *targetHooks = nullptr);

// buildStepPackage, then writes the package to |outputPath|.
mlir::LogicalResult
writeStepPackage(mlir::ModuleOp module, llvm::StringRef modelName,
                 llvm::StringRef sourceBytes, llvm::ArrayRef<std::string> flags,
                 const std::string &outputPath, llvm::StringRef command,
                 llvm::raw_ostream &errs,
                 const PackageTargetHooks *targetHooks = nullptr);

} // namespace kiln::cli

#endif // KILN_TOOLS_KILN_LIB_PACKAGEBUILDER_H
