//===- NvtxTest.cpp - Kiln's NVTX ranges reach a tool ---------------------===//
//
// runtime/metrics/Nvtx.h against FakeNvtx.cpp loaded as the NVTX tool, as
// Nsight Systems would be: ranges arrive in the "kiln" domain with their
// text (registered or not), nested and popped in order, each thread's on
// its own.
//
//===----------------------------------------------------------------------===//

#include "runtime/metrics/Nvtx.h"
#include "tests/unit/cuda/FakeNvtxLog.h"

#include <gtest/gtest.h>

#include <thread>

namespace kiln::runtime::nvtx {
namespace {

using kiln::testing::fakeNvtxInstalled;
using kiln::testing::nvtxRanges;

TEST(Nvtx, RangesReachTheToolInTheKilnDomain) {
  if (!fakeNvtxInstalled())
    GTEST_SKIP() << "the fake NVTX tool is not at " KILN_FAKE_NVTX;
  Message thunk = registerMessage("kernel 'fusion0', kiln_fusion0");
  std::vector<std::string> lines = nvtxRanges([&] {
    Range step("step 3");
    push(thunk);
    pop();
    { Range inner(thunk); }
  });
  // One thread's ranges (its number is the fake's count of threads so far).
  std::vector<std::string> ranges;
  for (const std::string &line : lines) {
    EXPECT_EQ(line.substr(0, line.find(' ')),
              lines[0].substr(0, lines[0].find(' ')));
    ranges.push_back(line.substr(line.find(' ') + 1));
  }
  EXPECT_EQ(ranges, (std::vector<std::string>{
                        "push kiln: step 3",
                        "push kiln: kernel 'fusion0', kiln_fusion0",
                        "pop kiln",
                        "push kiln: kernel 'fusion0', kiln_fusion0",
                        "pop kiln",
                        "pop kiln",
                    }));
  EXPECT_NE(thunk.handle, nullptr) << "the tool registers strings";
}

TEST(Nvtx, EachThreadHasItsOwnRanges) {
  if (!fakeNvtxInstalled())
    GTEST_SKIP() << "the fake NVTX tool is not at " KILN_FAKE_NVTX;
  std::vector<std::string> lines = nvtxRanges([] {
    Range outer("main");
    std::thread([] { Range r("worker"); }).join();
  });
  ASSERT_EQ(lines.size(), 4u);
  auto thread = [&](size_t i) {
    return lines[i].substr(0, lines[i].find(' '));
  };
  auto text = [&](size_t i) { return lines[i].substr(lines[i].find(' ') + 1); };
  EXPECT_EQ(text(0), "push kiln: main");
  EXPECT_EQ(text(1), "push kiln: worker");
  EXPECT_EQ(text(2), "pop kiln");
  EXPECT_EQ(text(3), "pop kiln");
  EXPECT_NE(thread(1), thread(0)) << "the worker's thread is another";
  EXPECT_EQ(thread(2), thread(1));
  EXPECT_EQ(thread(3), thread(0));
}

} // namespace
} // namespace kiln::runtime::nvtx
