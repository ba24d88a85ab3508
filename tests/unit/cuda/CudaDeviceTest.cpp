//===- CudaDeviceTest.cpp - CUDA device discovery -------------------------===//
//
// runtime/cuda/CudaDevice.h: discovery never crashes and, on a machine
// without a GPU (or without cudart or a driver), says why; on a machine
// with one, every device has a compute capability and multiprocessors.
// The GpuPresent test carries the ctest label `gpu` and skips with a
// message where no device is found.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudaDevice.h"

#include <gtest/gtest.h>

#include <cstdio>

namespace {

using namespace kiln::runtime::cuda;

TEST(CudaDeviceTest, DiscoveryListsDevicesOrSaysWhy) {
  auto info = discoverCudaDevices();
  std::string line = describeCudaDevices();
  ASSERT_EQ(line.rfind("CUDA: ", 0), 0u) << line;
  if (!info.isOk()) {
    const std::string &message = info.status().message();
    // Either the library is missing (and the names tried are listed) or a
    // cudart call failed (and is named with its error).
    EXPECT_TRUE(message.find("no CUDA runtime library found: tried ") == 0 ||
                message.find("cudaGetDeviceCount failed: cuda") == 0)
        << message;
    EXPECT_NE(line.find(message), std::string::npos) << line;
    return;
  }
  for (const CudaDeviceInfo &d : info.value().devices) {
    EXPECT_GE(d.smArch(), 50u) << d.name;
    EXPECT_GT(d.multiprocessors, 0) << d.name;
  }
}

TEST(CudaDeviceGpuTest, GpuPresent) {
  auto info = discoverCudaDevices();
  if (!info.isOk() || info.value().devices.empty())
    GTEST_SKIP() << "no CUDA device: " << describeCudaDevices();
  EXPECT_GT(info.value().runtimeVersion, 0);
  EXPECT_GT(info.value().driverVersion, 0);
  EXPECT_FALSE(info.value().devices.front().name.empty());
  // What bench/gpu/check.sh prints of the machine.
  std::printf("%s\n", describeCudaDevices().c_str());
}

} // namespace
