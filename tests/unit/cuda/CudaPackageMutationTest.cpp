//===- CudaPackageMutationTest.cpp - corrupted library calls on the GPU ---===//
//
// The GPU runtime trusts a package's library-call parameters to size what
// cuBLASLt, the convolution and the attention read and write: a GEMM's
// m, n, k and batch, a convolution's shapes, an attention's dimensions.
// A corrupted package must never make them run past a buffer (on a GPU,
// an illegal-address fault that kills the context, or a neighbour silently
// overwritten). Each test here takes small valid CUDA packages (a GEMM with
// every epilogue, a batched transposed GEMM, the three convolutions, the
// attention in both layouts and its gradient) and mutates one field of one
// library call or one of its buffers at a time: every integer to 0, 1, -1,
// its neighbours, its double and half, its negation, and values whose
// products wrap 64 bits (2^31, 2^32 + v, 2^62, INT64_MAX, INT64_MIN);
// every enum to each of its values and one past them; every flag flipped;
// every operand and result to each buffer id; and so on. Each mutant is
//   - refused by checkPackage or CudaExecutable::create with a message, or
//   - accepted, and then every library call's extents, computed here from
//     the documented contract (Package.h) in 128-bit arithmetic, fit its
//     buffers, and two steps (the second a CUDA Graph replay) run on the
//     fake table, whose copies and GEMMs fail and note it when they run
//     past an allocation (FakeCudaApi::outOfBounds), with nothing noted.
// Links no LLVM or MLIR.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudaExecutable.h"
#include "tests/unit/cuda/AttentionPackage.h"
#include "tests/unit/cuda/ConvPackage.h"
#include "tests/unit/cuda/CudaMutantBackend.h"
#include "tests/unit/cuda/FakeCudaApi.h"
#include "tests/unit/package/PackageMutants.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

namespace {

using namespace kiln::runtime;
using namespace kiln::runtime::cuda;
namespace ct = kiln::runtime::cuda::testing;
using ct::FakeCudaApi;
using kiln::runtime::testing::checkConvolutionMutants;
using kiln::runtime::testing::checkMutants;
using kiln::runtime::testing::expectEveryOutcome;
using kiln::runtime::testing::gemmPackage;
using kiln::runtime::testing::MutantOutcome;
using ct::CudaBackend;

TEST(CudaPackageMutation, GemmsStayInTheirBuffers) {
  CudaBackend backend;
  MutantOutcome all;
  for (unsigned ep = 0; ep <= unsigned(PkgGemmEpilogue::DGelu); ++ep) {
    auto epilogue = static_cast<PkgGemmEpilogue>(ep);
    all.add(checkMutants(std::string("gemm ") + pkgGemmEpilogueName(epilogue),
                         gemmPackage(TargetKind::Cuda, epilogue, PkgDType::BF16),
                         backend));
    if (HasFailure())
      return;
  }
  all.add(checkMutants("batched transposed f32 gemm",
                       gemmPackage(TargetKind::Cuda, PkgGemmEpilogue::None,
                                   PkgDType::F32, 3, true, true),
                       backend));
  expectEveryOutcome(all);
}

TEST(CudaPackageMutation, ConvolutionsStayInTheirBuffers) {
  CudaBackend backend;
  ConvParams params = ct::convParams({2, 4, 7, 6}, {6, 2, 3, 2}, {2, 1},
                                     {1, 0, 1, 1}, {1, 2}, 2);
  expectEveryOutcome(checkConvolutionMutants(
      "", [&](LibraryKind kind, PkgDType dtype) {
        return ct::convPackage(kind, params, dtype);
      },
      backend));
}

TEST(CudaPackageMutation, AttentionStaysInItsBuffers) {
  CudaBackend backend;
  AttentionParams a = ct::attentionParams(1, 2, 8, 8, 16, 16, true);
  MutantOutcome all = checkMutants(
      "attention bhtd", ct::attentionPackage(a, PkgDType::BF16), backend);
  if (HasFailure())
    return;
  all.add(checkMutants("attention packed",
                       ct::packedAttentionPackage(a, PkgDType::F16), backend));
  EXPECT_GT(all.refusedByCheck, 0u);
  EXPECT_GT(all.accepted, 0u);
}

// The case the mutants found: m = 2^62 makes the lhs' 2^62 x 16 x 4 bytes
// and the result's 2^62 x 8 x 4 wrap 64 bits to 0, so the 256-byte lhs and
// 128-byte result looked large enough and cuBLASLt would have been handed
// 2^62 rows. Refused at load, naming the sizes.
TEST(CudaPackageMutation, GemmSizesThatWrapAreRefused) {
  LoadedPackage pkg =
      gemmPackage(TargetKind::Cuda, PkgGemmEpilogue::None, PkgDType::F32);
  pkg.thunks[0].gemm.m = int64_t(1) << 62;
  ASSERT_TRUE(checkPackage(pkg).isOk());
  FakeCudaApi api;
  CudaOptions options;
  options.log = [](const std::string &) {};
  auto made = CudaExecutable::create(pkg, api, options);
  ASSERT_FALSE(made.isOk());
  EXPECT_NE(made.status().message().find("thunk 0"), std::string::npos)
      << made.status().message();
  EXPECT_NE(made.status().message().find("lhs would span more than 2^64 bytes"),
            std::string::npos)
      << made.status().message();
  EXPECT_TRUE(api.outOfBounds.empty());
}

// Buffers sit at multiples of the package's alignment from the arena's
// base, which cudaMalloc aligns to 256 bytes: a larger alignment cannot be
// kept and is refused (checkPackage refuses misaligned offsets).
TEST(CudaPackageMutation, ArenaAlignmentPastCudaMallocsIsRefused) {
  LoadedPackage pkg =
      gemmPackage(TargetKind::Cuda, PkgGemmEpilogue::None, PkgDType::F32);
  pkg.arenaAlignment = 512;
  for (size_t i = 0; i < pkg.buffers.size(); ++i)
    pkg.buffers[i].offset = 512 * i;
  pkg.arenaSize = 512 * pkg.buffers.size();
  ASSERT_TRUE(checkPackage(pkg).isOk());
  FakeCudaApi api;
  auto made = CudaExecutable::create(pkg, api);
  ASSERT_FALSE(made.isOk());
  EXPECT_EQ(made.status().message(),
            "the arena: the package asks for 512-byte alignment, cudaMalloc "
            "gives 256");
  pkg.arenaAlignment = 256;
  EXPECT_TRUE(CudaExecutable::create(pkg, api).isOk());
}

} // namespace
