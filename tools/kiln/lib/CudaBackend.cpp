//===- CudaBackend.cpp - `kiln train --device=cuda[:N]` -------------------===//
//
// See CudaBackend.h. The compile half is CpuBackend.cpp's
// (compileTrainPackages in TrainCompile.h: the step and eval packages
// written to --dump-dir or a temporary directory and loaded back), with the
// CUDA package writer for the device's architecture; the run half is
// CudaPackageBackend.cpp (runtime/cuda/CudaExecutable.h).
//
//===----------------------------------------------------------------------===//

#include "tools/kiln/lib/CudaBackend.h"

#include "tools/kiln/lib/CudaCompile.h"
#include "tools/kiln/lib/Flags.h"
#include "tools/kiln/lib/TrainCompile.h"

#include "codegen/cuda/CudaEmitter.h"
#include "runtime/package/Package.h"

#include "llvm/Support/Path.h"

using namespace mlir;

namespace kiln::cli {

bool compileCudaTrainPackages(const BackendOptions &options, unsigned arch,
                              bool cubins, llvm::StringRef command,
                              llvm::raw_ostream &outs, llvm::raw_ostream &errs,
                              TrainPackages &packages) {
  CudaCompileOptions cudaCompile;
  cudaCompile.archs = {arch};
  // Without NVRTC in this build the package holds source only and the
  // runtime compiles it at load.
  cudaCompile.nvrtc = cubins && haveNvrtc();
  // cuBLASLt computes a weight gradient's bias gradient beside it (BGRADA).
  BackendOptions cudaOptions = options;
  cudaOptions.pipeline.gemmBiasGradients = true;
  // A CUDA target's pipeline: kiln-fuse-attention unless
  // --fuse-attention=off.
  cudaOptions.pipeline.target = kiln::TargetKind::cuda;
  cudaOptions.pipeline.cudaArch = arch;
  // Reused rows of reduction kernels go to dynamic shared memory.
  cudaOptions.pipeline.fuseSharedMemoryBytes = cudaRowCacheBytes(arch);
  // --memory-budget holds the runtime's workspaces beside the plan.
  cudaOptions.pipeline.runtimeWorkspaceBytes = [arch](ModuleOp module) {
    return cudaRuntimeWorkspaceBytes(module, {arch});
  };
  return compileTrainPackages(
      cudaOptions, command, "kiln-train-cuda",
      [&](ModuleOp module, llvm::StringRef model, llvm::StringRef source,
          llvm::ArrayRef<std::string> flags, const std::string &path) {
        std::vector<CudaKernelReport> reports;
        return writeCudaPackage(module, model, source, flags, path, cudaCompile,
                                command, errs, reports);
      },
      outs, errs, packages);
}

std::unique_ptr<TrainBackend>
createCudaBackend(const BackendOptions &options,
                  const CudaBackendOptions &cudaOptions, llvm::StringRef command,
                  llvm::raw_ostream &outs, llvm::raw_ostream &errs) {
  CudaPackageOptions package;
  package.input = options.input;
  package.trainPath = options.input;
  package.communicator = options.communicator;
  if (llvm::sys::path::extension(options.input) == ".kpkg") {
    if (options.optimizerFlagsGiven) {
      printError(errs, command,
                 options.input + ": a package has its optimizer compiled in; "
                                 "drop the optimizer flags or train the .kiln "
                                 "file");
      return nullptr;
    }
  } else {
    // Compiled once the device is open, for its architecture.
    package.compile = [&, command = command.str()](
                          unsigned arch, std::string &trainPath,
                          std::string &evalPath, std::string &tempDir) {
      TrainPackages packages;
      bool compiled = compileCudaTrainPackages(options, arch, cudaOptions.cubins,
                                               command, outs, errs, packages);
      tempDir = packages.tempDir; // removed by the backend, even after a failure
      trainPath = packages.trainPath;
      evalPath = packages.evalPath;
      return compiled;
    };
  }
  return createCudaPackageBackend(std::move(package), cudaOptions, command, outs,
                                  errs);
}

bool chooseCudaByDefault(const std::string &input, std::string &line) {
  std::string reason;
  if (!cudaDeviceUsable(0, reason)) {
    line = "backend cpu (" + reason + ")";
    return false;
  }
  if (llvm::sys::path::extension(input) == ".kpkg") {
    runtime::StatusOr<runtime::LoadedPackage> pkg = runtime::loadPackage(input);
    if (pkg.isOk() && pkg->target.kind == runtime::TargetKind::Cpu) {
      line = "backend cpu (" + input + " holds CPU kernels)";
      return false;
    }
    return true;
  }
  if (!haveNvrtc()) {
    line = "backend cpu (this kiln was built without NVRTC: it cannot compile "
           "CUDA kernels)";
    return false;
  }
  return true;
}

} // namespace kiln::cli
