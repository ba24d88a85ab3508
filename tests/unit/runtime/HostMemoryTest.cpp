//===- HostMemoryTest.cpp - /proc/meminfo read into bytes -----------------===//

#include "runtime/HostMemory.h"

#include <gtest/gtest.h>

using namespace kiln::runtime;

namespace {

TEST(HostMemory, MeminfoSizesAreKibibytes) {
  std::optional<HostMemory> m = parseMeminfo("MemTotal:       24575384 kB\n"
                                             "MemFree:         1204996 kB\n"
                                             "MemAvailable:   20123456 kB\n"
                                             "Buffers:          123456 kB\n"
                                             "SwapTotal:       2097148 kB\n"
                                             "SwapFree:        2097000 kB\n"
                                             "HugePages_Total:       0\n"
                                             "Hugepagesize:       2048 kB\n");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->total, 24575384ull * 1024);
  EXPECT_EQ(m->available, 20123456ull * 1024);
  EXPECT_EQ(m->swapFree, 2097000ull * 1024);
}

TEST(HostMemory, WithoutTotalOrAvailableNothingIsKnown) {
  // Kernels before 3.14 had no MemAvailable: no check rather than a wrong one.
  EXPECT_FALSE(parseMeminfo("MemTotal: 1000 kB\nMemFree: 500 kB\n"));
  EXPECT_FALSE(parseMeminfo("MemAvailable: 1000 kB\n"));
  EXPECT_FALSE(parseMeminfo(""));
  EXPECT_FALSE(parseMeminfo("MemTotal: lots\nMemAvailable: 5 kB\n"));
  // No swap line: none free.
  std::optional<HostMemory> m =
      parseMeminfo("MemTotal: 8 kB\nMemAvailable: 4 kB\n");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->swapFree, 0u);
}

TEST(HostMemory, ThisMachineHasSome) {
  // Linux has /proc/meminfo; its MemAvailable is at most its MemTotal.
  std::optional<HostMemory> m = hostMemory();
  ASSERT_TRUE(m);
  EXPECT_GT(m->total, 0u);
  EXPECT_LE(m->available, m->total);
}

} // namespace
