//===- CpuPackageMutationTest.cpp - corrupted library calls on the CPU ----===//
//
// The CPU runtime's side of tests/unit/cuda/CudaPackageMutationTest.cpp:
// every single-field mutant of a GEMM (plain, and batched with both
// operands transposed) and of the three convolutions (f32 and bf16) in a
// CPU package, and of the buffers they name (tests/unit/package/
// PackageMutants.h), is refused by checkPackage or Executable::create with
// a message, or is accepted with every extent the contract gives inside
// its buffer and runs two steps. The step runs OpenBLAS and the
// convolution on the host arena, so a call that ran past its buffer would
// corrupt the heap or crash here (and shows under a sanitizer build).
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Executable.h"
#include "tests/unit/cuda/ConvPackage.h"
#include "tests/unit/package/PackageMutants.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

namespace kiln::runtime::cpu {
namespace {

using kiln::runtime::testing::checkConvolutionMutants;
using kiln::runtime::testing::checkMutants;
using kiln::runtime::testing::expectEveryOutcome;
using kiln::runtime::testing::gemmPackage;
using kiln::runtime::testing::MutantOutcome;

// These packages have no kernels: a load is a test bug.
class NoKernels : public KernelLoader {
public:
  StatusOr<KernelFn> load(const PackageKernel &kernel, size_t index) override {
    return Status::error("kernel " + std::to_string(index) +
                         ": this test's packages have none");
  }
};

// An Executable on two threads per package (GEMMs split into blocks).
class CpuBackend : public kiln::runtime::testing::MutantBackend {
public:
  Status create(const LoadedPackage &package) override {
    exec_.reset();
    ExecutableOptions options;
    options.threads = 2;
    auto made = Executable::create(package, loader_, options);
    if (!made.isOk())
      return made.status();
    exec_ = std::move(made.value());
    return Status::ok();
  }
  Status step() override { return exec_->run(); }

private:
  NoKernels loader_;
  std::unique_ptr<Executable> exec_;
};

TEST(CpuPackageMutation, GemmsStayInTheirBuffers) {
  CpuBackend backend;
  MutantOutcome all =
      checkMutants("cpu gemm", gemmPackage(TargetKind::Cpu, PkgGemmEpilogue::None,
                                           PkgDType::F32),
                   backend);
  if (HasFailure())
    return;
  all.add(checkMutants("cpu batched transposed bf16 gemm",
                       gemmPackage(TargetKind::Cpu, PkgGemmEpilogue::None,
                                   PkgDType::BF16, 3, true, true),
                       backend));
  expectEveryOutcome(all);
}

TEST(CpuPackageMutation, ConvolutionsStayInTheirBuffers) {
  CpuBackend backend;
  ConvParams params = cuda::testing::convParams({2, 4, 7, 6}, {6, 2, 3, 2},
                                                {2, 1}, {1, 0, 1, 1}, {1, 2}, 2);
  expectEveryOutcome(checkConvolutionMutants(
      "cpu ", [&](LibraryKind kind, PkgDType dtype) {
        // ConvPackage.h makes CUDA packages; the CPU's differ only in target.
        LoadedPackage pkg = cuda::testing::convPackage(kind, params, dtype);
        pkg.target = PackageTarget{};
        return pkg;
      },
      backend));
}

} // namespace
} // namespace kiln::runtime::cpu
