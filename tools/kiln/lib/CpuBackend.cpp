//===- CpuBackend.cpp - `kiln train --backend=cpu` ------------------------===//
//
// The training step as the CPU runtime runs it: a .kpkg is loaded as it is;
// a .kiln or .mlir model is compiled by the same pipeline and package
// builder as `kiln compile --emit=package` into step.kpkg (and, for eval,
// its forward graph with the cross-entropy's logits as a second result into
// eval.kpkg), written to --dump-dir when given or a temporary directory,
// and loaded back (CpuPackageBackend.cpp), so what trains is exactly what a
// shipped package runs. Kernels are compiled by LLVM ORC at load
// (runtime/cpu/jit/OrcKernelLoader.h).
//
// A .kpkg holds only the training step: it trains without an eval pass, and
// its optimizer and learning rate are the ones compiled in.
//
//===----------------------------------------------------------------------===//

#include "tools/kiln/lib/Flags.h"
#include "tools/kiln/lib/PackageBuilder.h"
#include "tools/kiln/lib/TrainBackend.h"
#include "tools/kiln/lib/TrainCompile.h"

#include "runtime/cpu/jit/OrcKernelLoader.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

using namespace mlir;

namespace kiln::cli {

std::unique_ptr<TrainBackend> createCpuBackend(const BackendOptions &options,
                                               llvm::StringRef command,
                                               llvm::raw_ostream &outs,
                                               llvm::raw_ostream &errs) {
  CpuPackageOptions package;
  package.input = options.input;
  package.threads = options.threads;
  package.communicator = options.communicator;
  runtime::StatusOr<std::unique_ptr<runtime::cpu::KernelLoader>> loader =
      runtime::cpu::createOrcKernelLoader();
  if (!loader.isOk()) {
    printError(errs, command, loader.status().message());
    return nullptr;
  }
  package.loader = std::move(loader.value());

  package.trainPath = options.input;
  bool isPackage = llvm::sys::path::extension(options.input) == ".kpkg";
  if (isPackage) {
    if (options.optimizerFlagsGiven) {
      printError(errs, command,
                 options.input + ": a package has its optimizer compiled in; "
                                 "drop the optimizer flags or train the .kiln "
                                 "file");
      return nullptr;
    }
    if (options.wantEval)
      outs << "kiln train: " << options.input
           << " holds only the training step: no eval pass (train the .kiln "
              "file for one)\n";
  } else {
    TrainPackages packages;
    bool compiled = compileTrainPackages(
        options, command, "kiln-train",
        [&](ModuleOp module, llvm::StringRef model, llvm::StringRef source,
            llvm::ArrayRef<std::string> flags, const std::string &path) {
          return writeStepPackage(module, model, source, flags, path, command,
                                  errs);
        },
        outs, errs, packages);
    if (!compiled) {
      if (!packages.tempDir.empty())
        llvm::sys::fs::remove_directories(packages.tempDir);
      return nullptr;
    }
    package.tempDir = packages.tempDir; // the backend removes it
    package.trainPath = packages.trainPath;
    package.evalPath = packages.evalPath;
  }
  return createCpuPackageBackend(std::move(package), command, errs);
}

} // namespace kiln::cli
