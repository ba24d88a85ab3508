//===- GpuTest.h - a fixture for tests on a real GPU --------------*- C++ -*-===//
//
// The runtime's real CUDA table (loadCudaApi) on device 0 with one stream,
// for the tests labelled gpu (CudaGpuTest.cpp, CudaEpilogueGpuTest.cpp);
// skips, saying why, where there is no CUDA or no GPU. No LLVM.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TESTS_UNIT_CUDA_GPUTEST_H
#define KILN_TESTS_UNIT_CUDA_GPUTEST_H

#include "runtime/cuda/CudaApi.h"

#include <gtest/gtest.h>

#include <memory>

namespace kiln::runtime::cuda::testing {

class GpuTest : public ::testing::Test {
protected:
  std::unique_ptr<CudaApi> api;
  CudaDeviceInfo device;
  CudaStream stream = nullptr;

  void SetUp() override {
    StatusOr<std::unique_ptr<CudaApi>> loaded = loadCudaApi();
    if (!loaded.isOk())
      GTEST_SKIP() << "no CUDA: " << loaded.status().message();
    StatusOr<CudaDeviceInfo> info = loaded.value()->deviceInfo(0);
    if (!info.isOk())
      GTEST_SKIP() << "no GPU: " << info.status().message();
    device = info.value();
    api = std::move(loaded.value());
    ASSERT_TRUE(api->setDevice(0).isOk());
    ASSERT_TRUE(api->streamCreate(&stream).isOk());
  }
  void TearDown() override {
    if (api && stream)
      api->streamDestroy(stream);
  }
};

} // namespace kiln::runtime::cuda::testing

#endif // KILN_TESTS_UNIT_CUDA_GPUTEST_H
