//===- FakeCudaApiTest.cpp - the fake CUDA table itself -------------------===//
//
// tests/unit/cuda/FakeCudaApi.h is the GPU every runtime test runs on, so
// its own rules are tested against their definitions: its streams order
// work as CUDA does (events, host waits, races named, work that runs only
// once waited for), and its cuBLASLt rounds as cuBLASLt does.
//
//===----------------------------------------------------------------------===//

#include "runtime/Half.h"
#include "runtime/cuda/CudaApi.h"
#include "tests/unit/cuda/FakeCudaApi.h"
#include "tests/unit/cuda/PkgBuffers.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

namespace {

using namespace kiln::runtime;
using namespace kiln::runtime::cuda;
using kiln::runtime::cuda::testing::FakeCudaApi;
using kiln::runtime::cuda::testing::randomFloats;

// The fake's stream order itself: unordered accesses on two streams
// race when one writes, an event or a host synchronization orders them,
// and work runs only once the host waits for it.
TEST(FakeStreams, OrderAsCudaDoes) {
  FakeCudaApi api;
  void *dev = nullptr, *pinned = nullptr;
  ASSERT_TRUE(api.malloc(&dev, 1024).isOk());
  ASSERT_TRUE(api.mallocHost(&pinned, 1024).isOk());
  std::memset(pinned, 7, 1024);
  CudaStream a = nullptr, b = nullptr;
  CudaEvent e = nullptr;
  ASSERT_TRUE(api.streamCreate(&a).isOk());
  ASSERT_TRUE(api.streamCreate(&b).isOk());
  ASSERT_TRUE(api.eventCreate(&e).isOk());
  char *d = static_cast<char *>(dev);
  ASSERT_TRUE(api.memcpyAsync(d, pinned, 512, CopyKind::HostToDevice, a).isOk());
  // Reading what stream a writes, unordered: a race (the call fails).
  EXPECT_FALSE(
      api.memcpyAsync(d + 512, d + 256, 256, CopyKind::DeviceToDevice, b).isOk());
  ASSERT_EQ(api.races.size(), 1u);
  EXPECT_EQ(api.races[0],
            "cudaMemcpyAsync H2D destination on stream 1 and cudaMemcpyAsync "
            "D2D source on stream 2, bytes 256..512 of a 1024-byte "
            "allocation: nothing orders them");
  // Other bytes do not race.
  EXPECT_TRUE(api.memsetAsync(d + 512, 0, 512, b).isOk());
  // An event orders stream b after a's work so far.
  ASSERT_TRUE(api.eventRecord(e, a).isOk());
  ASSERT_TRUE(api.streamWaitEvent(b, e).isOk());
  EXPECT_TRUE(api.memcpyAsync(d + 256, d, 256, CopyKind::DeviceToDevice, b).isOk());
  // Two streams reading the same bytes do not race.
  EXPECT_TRUE(api.memcpyAsync(pinned, d, 16, CopyKind::DeviceToHost, a).isOk());
  EXPECT_EQ(api.races.size(), 1u);
  // Nothing has run yet: the host has not waited.
  EXPECT_NE(d[0], 7);
  // Waiting for b runs a's work up to the event first, then b's.
  ASSERT_TRUE(api.streamSynchronize(b).isOk());
  EXPECT_EQ(d[0], 7);
  EXPECT_EQ(d[300], 7);
  EXPECT_EQ(d[600], 0);
  // The host has waited for b: new work on a is ordered after b's.
  EXPECT_TRUE(api.memsetAsync(d + 512, 1, 512, a).isOk());
  // Without that wait, b's write would race a's.
  EXPECT_FALSE(api.memsetAsync(d + 512, 2, 16, b).isOk());
  ASSERT_EQ(api.races.size(), 2u);
  EXPECT_EQ(api.races[1].find("cudaMemsetAsync on stream 1 and cudaMemsetAsync "
                              "on stream 2, bytes 512..528"),
            0u)
      << api.races[1];
  ASSERT_TRUE(api.free(dev).isOk()); // waits for everything
  EXPECT_EQ(static_cast<char *>(pinned)[0], 7);
  ASSERT_TRUE(api.freeHost(pinned).isOk());
}

// The fake's cuBLASLt as cuBLASLt defines it, on bf16: BGRADA writes, for
// each row r of D (row-major: each column n of the result), the sum over
// k of A(r, k), A being the column-major view of the rhs (lowerGemmToLt),
// accumulated in f32 and rounded once to bf16; a bias+ReLU result is the
// f32 product plus the bias, then ReLU, rounded once.
TEST(FakeCublasLt, BgradaAndEpiloguesRoundOnceFromF32) {
  GemmDesc desc;
  desc.dtype = PkgDType::BF16;
  desc.params.m = 6;
  desc.params.n = 5;
  desc.params.k = 9;
  desc.params.transposeLhs = true; // dW = X^T dY: lhs X [k, m], rhs dY [k, n]
  auto toBf16 = [](const std::vector<float> &v) {
    std::vector<uint16_t> out;
    for (float x : v)
      out.push_back(floatToBf16(x));
    return out;
  };
  std::vector<uint16_t> lhs = toBf16(randomFloats(9 * 6, 11));
  std::vector<uint16_t> rhs = toBf16(randomFloats(9 * 5, 12));
  std::vector<uint16_t> bias = toBf16(randomFloats(5, 13));
  LtGemm lt = lowerGemmToLt(desc.params);
  ASSERT_FALSE(lt.transA);
  ASSERT_EQ(lt.rows, 5u);

  desc.epilogue = GemmEpilogue::BiasGradient;
  std::vector<uint16_t> out(6 * 5), grad(5, 0xffff);
  FakeCudaApi::hostGemm(desc, lhs.data(), rhs.data(), out.data(), nullptr,
                        grad.data());
  for (uint64_t r = 0; r < lt.rows; ++r) {
    float sum = 0;
    for (uint64_t l = 0; l < lt.inner; ++l)
      sum += bf16ToFloat(rhs[r + l * lt.lda]);
    EXPECT_EQ(grad[r], floatToBf16(sum)) << "bias gradient " << r;
  }

  desc.epilogue = GemmEpilogue::BiasRelu;
  FakeCudaApi::hostGemm(desc, lhs.data(), rhs.data(), out.data(), bias.data(),
                        nullptr);
  int roundedTwiceDiffers = 0;
  for (int64_t i = 0; i < 6; ++i)
    for (int64_t j = 0; j < 5; ++j) {
      float acc = 0;
      for (int64_t l = 0; l < 9; ++l)
        acc += bf16ToFloat(lhs[l * 6 + i]) * bf16ToFloat(rhs[l * 5 + j]);
      float once = std::max(acc + bf16ToFloat(bias[j]), 0.0f);
      EXPECT_EQ(out[i * 5 + j], floatToBf16(once)) << i << ", " << j;
      // What the step's IR computes: the product rounded, then the sum.
      float twice = std::max(
          bf16ToFloat(floatToBf16(bf16ToFloat(floatToBf16(acc)) +
                                  bf16ToFloat(bias[j]))),
          0.0f);
      roundedTwiceDiffers += floatToBf16(twice) != floatToBf16(once);
    }
  // The data is such that the two roundings show (the test would not see
  // a fake that rounds the product first otherwise).
  EXPECT_GT(roundedTwiceDiffers, 0);
}

} // namespace
