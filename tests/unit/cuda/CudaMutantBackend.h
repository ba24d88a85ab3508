//===- CudaMutantBackend.h - CudaExecutable for the mutation tests -*- C++ -*-===//
//
// The CUDA runtime as tests/unit/package/PackageMutants.h drives it: each
// package gets a fresh FakeCudaApi (no host kernels: launches are only
// recorded; GEMMs, copies and memsets run on the host and are checked
// against their allocations) and a CudaExecutable with a small cuBLASLt
// workspace and no autotuning cache on disk.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TESTS_UNIT_CUDA_CUDAMUTANTBACKEND_H
#define KILN_TESTS_UNIT_CUDA_CUDAMUTANTBACKEND_H

#include "runtime/cuda/CudaExecutable.h"
#include "tests/unit/cuda/FakeCudaApi.h"
#include "tests/unit/package/PackageMutants.h"

#include <memory>
#include <string>

namespace kiln::runtime::cuda::testing {

// CudaExecutable on a fresh fake table per package.
class CudaBackend : public kiln::runtime::testing::MutantBackend {
public:
  Status create(const LoadedPackage &package) override {
    exec_.reset();
    api_ = std::make_unique<FakeCudaApi>();
    CudaOptions options;
    options.log = [](const std::string &) {};
    options.autotuneCache = "off";
    options.gemmWorkspaceBytes = 1 << 16;
    auto made = CudaExecutable::create(package, *api_, options);
    if (!made.isOk())
      return made.status();
    exec_ = std::move(made.value());
    return Status::ok();
  }
  Status step() override { return exec_->run(); }
  std::string outOfBounds() override {
    return api_->outOfBounds.empty() ? "" : api_->outOfBounds.front();
  }

private:
  // Declared first: the executable is destroyed before its table.
  std::unique_ptr<FakeCudaApi> api_;
  std::unique_ptr<CudaExecutable> exec_;
};

} // namespace kiln::runtime::cuda::testing

#endif // KILN_TESTS_UNIT_CUDA_CUDAMUTANTBACKEND_H
