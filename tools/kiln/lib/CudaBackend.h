//===- CudaBackend.h - `kiln train --device=cuda[:N]` --------------*- C++ -*-===//
//
// The training step on a GPU: the model compiled with --target=cuda (the
// device's sm_NN) into step.kpkg (and eval.kpkg), run by the GPU runtime
// (runtime/cuda/CudaExecutable.h) through the dlopen'ed CUDA table. A
// CUDA .kpkg is loaded as it is. Batches go through the executable's pinned
// staging (converted to the inputs' element types on the host); the loss
// and checkpointed state are read back.
//
// chooseTrainDevice decides where `kiln train` runs when --device is not
// given: a GPU when one is present and this kiln can compile CUDA kernels
// (or the input is a CUDA package), else the CPU; the line it returns says
// which and why.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TOOLS_KILN_LIB_CUDABACKEND_H
#define KILN_TOOLS_KILN_LIB_CUDABACKEND_H

#include "tools/kiln/lib/TrainBackend.h"

#include <functional>

namespace kiln::runtime {
struct LoadedPackage;
} // namespace kiln::runtime

namespace kiln::runtime::cuda {
class CudaApi;
} // namespace kiln::runtime::cuda

namespace kiln::cli {

struct CudaBackendOptions {
  int device = 0;
  bool graphs = true; // CUDA Graph capture after the warm-up step
  // cuBLASLt's algorithms (the convolutions' GEMMs too) and the attention's
  // kernel variants timed per shape at load (Autotune.h).
  bool autotune = true;
  // Programmatic dependent launch of the generated kernels (sm_90 on).
  bool programmaticLaunch = true;
  // f32 GEMMs and convolutions in TF32 on tensor cores (--tf32).
  bool tf32 = false;
  // Tests: the CUDA table to use (not owned; null: runtime::cuda::loadCudaApi)
  // and whether compiled packages carry PTX and cubins (false: source only,
  // which the runtime compiles through the table's NVRTC at load).
  runtime::cuda::CudaApi *api = nullptr;
  bool cubins = true;
  // Tests: called with each package the backend loads (the step's, the
  // eval's), before its executable is created on |api|: a fake table
  // learns from it what each kernel may touch.
  std::function<void(const runtime::LoadedPackage &)> loaded;
};

// A CUDA step package (and its eval package) as a backend, on the device
// |cudaOptions| names: what createCudaBackend builds, and what a packed
// trainer (`kiln pack --target=cuda`) runs. No MLIR.
struct CudaPackageOptions {
  std::string input;     // what messages name: the model or package given
  std::string trainPath; // the step package
  std::string evalPath;  // its eval package; empty: no eval
  // The packages' bytes when they are in memory; empty: read the paths.
  std::string trainBytes, evalBytes;
  runtime::dist::Communicator *communicator = nullptr; // not owned
  // A model: called once the device is open with its architecture, to
  // write the packages and set the paths (and a temporary directory the
  // backend removes); prints the problem and fails. Null: the paths or
  // bytes above hold them.
  std::function<bool(unsigned arch, std::string &trainPath,
                     std::string &evalPath, std::string &tempDir)>
      compile;
};
std::unique_ptr<TrainBackend>
createCudaPackageBackend(CudaPackageOptions options,
                         const CudaBackendOptions &cudaOptions,
                         llvm::StringRef command, llvm::raw_ostream &outs,
                         llvm::raw_ostream &errs);

struct TrainPackages;
// The step and eval packages of options.input for sm_|arch| (with PTX and
// cubins when |cubins| and this kiln has NVRTC), as `kiln train
// --device=cuda` compiles them (TrainCompile.h).
bool compileCudaTrainPackages(const BackendOptions &options, unsigned arch,
                              bool cubins, llvm::StringRef command,
                              llvm::raw_ostream &outs, llvm::raw_ostream &errs,
                              TrainPackages &packages);

std::unique_ptr<TrainBackend>
createCudaBackend(const BackendOptions &options,
                  const CudaBackendOptions &cudaOptions, llvm::StringRef command,
                  llvm::raw_ostream &outs, llvm::raw_ostream &errs);

// Whether |input| should train on the GPU by default, and the line
// `kiln train` prints about it ("backend cuda, device 0: NAME (sm_90)" or
// "backend cpu (REASON)").
bool chooseCudaByDefault(const std::string &input, std::string &line);

// Checks that CUDA device |device| can be used; false with |reason|
// ("no CUDA device (...)").
bool cudaDeviceUsable(int device, std::string &reason);

// How many CUDA devices this process sees (|names|: describeCudaDevices'
// line); 0 with |reason| when none.
int cudaDeviceCount(std::string &reason, std::string &names);

} // namespace kiln::cli

#endif // KILN_TOOLS_KILN_LIB_CUDABACKEND_H
