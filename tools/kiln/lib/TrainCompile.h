//===- TrainCompile.h - a model's step and eval packages for `kiln train` -*- C++ -*-===//
//
// What kiln train's compiled backends (CpuBackend.cpp, CudaBackend.cpp) do
// with a model (.kiln or .mlir) before loading it: the training step
// through the compile pipeline into DIR/step.kpkg and, when an eval pass is
// wanted, the forward model (its cross-entropy's logits exposed as a result)
// into DIR/eval.kpkg, DIR being BackendOptions::packageDir or a new
// temporary directory. The backends differ only in how a compiled module
// becomes a package (the CPU package writer or the CUDA one).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TOOLS_KILN_LIB_TRAINCOMPILE_H
#define KILN_TOOLS_KILN_LIB_TRAINCOMPILE_H

#include "tools/kiln/lib/TrainBackend.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LogicalResult.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <functional>
#include <map>
#include <string>

namespace kiln::cli {

// Writes compiled |module| (of model |modelName|, read from |sourceBytes|)
// as the package |outputPath| with package flags |flags| ("train" or
// "eval"); prints what went wrong and fails.
using TrainPackageWriter = std::function<mlir::LogicalResult(
    mlir::ModuleOp module, llvm::StringRef modelName,
    llvm::StringRef sourceBytes, llvm::ArrayRef<std::string> flags,
    const std::string &outputPath)>;

// The packages compileTrainPackages wrote.
struct TrainPackages {
  std::string trainPath;
  std::string evalPath; // empty without options.wantEval
  // The temporary directory created for them ("" with a packageDir); the
  // backend removes it when it is done.
  std::string tempDir;
};

// Compiles options.input into |packages| through |write|; a temporary
// directory is named after |tempPrefix|. With a packageDir, prints
// "kiln train: compiled step PATH" to |outs|. Prints what went wrong to
// |errs| (prefixed with |command|) and fails.
bool compileTrainPackages(const BackendOptions &options, llvm::StringRef command,
                          llvm::StringRef tempPrefix,
                          const TrainPackageWriter &write,
                          llvm::raw_ostream &outs, llvm::raw_ostream &errs,
                          TrainPackages &packages);

} // namespace kiln::cli

#endif // KILN_TOOLS_KILN_LIB_TRAINCOMPILE_H
