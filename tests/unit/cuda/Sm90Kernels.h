//===- Sm90Kernels.h - kernel sources through NVRTC for sm_90 -----*- C++ -*-===//
//
// Checks shared by the tests of the CUDA C++ the runtime keeps as source
// (attention, convolutions, GEMM epilogues) and of generated kernels: the
// source compiles through NVRTC and assembles with ptxas for sm_90, with
// ptxas's registers and spills per entry function (without spills, for
// the runtime's kernels)
// (codegen/cuda/Nvrtc.h, where the build has the toolkit:
// KILN_HAVE_NVRTC), and the runtime's real table (loadCudaApi without a
// driver) compiles it with NVRTC as the runtime does. Each sets |skip| to
// why it could not check (the caller skips) and leaves it empty otherwise.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TESTS_UNIT_CUDA_SM90KERNELS_H
#define KILN_TESTS_UNIT_CUDA_SM90KERNELS_H

#include "runtime/cuda/CudaApi.h"
#ifdef KILN_HAVE_NVRTC
#include "codegen/cuda/Nvrtc.h"
#endif

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace kiln::runtime::cuda::testing {

// What ptxas reported of one entry function.
struct Sm90Report {
  int registers = 0;
  int spillBytes = 0;
};

// NVRTC and ptxas for sm_90 (no cache: ptxas's own report): an ELF cubin
// and, in |reports|, ptxas's report of each of |entries| (in order).
inline void assembleForSm90(const std::string &source, const std::string &name,
                            const std::vector<std::string> &entries,
                            std::vector<Sm90Report> &reports, std::string &skip) {
  skip.clear();
  reports.clear();
#ifdef KILN_HAVE_NVRTC
  setenv("KILN_CACHE_DIR", "off", 1); // ptxas's report, not a cached one
  kiln::NvrtcResult result;
  std::string error;
  ASSERT_TRUE(kiln::compileCudaSource(source, name, {90}, result, error)) << error;
  ASSERT_EQ(result.cubins.size(), 1u);
  const kiln::CubinResult &cubin = result.cubins[0];
  ASSERT_GE(cubin.image.size(), 4u);
  EXPECT_EQ(std::memcmp(cubin.image.data(), "\x7f" "ELF", 4), 0);
  // ptxas -v: per entry function, its registers and spills.
  const std::string &log = cubin.log;
  for (const std::string &entry : entries) {
    size_t at = log.find("Compiling entry function '" + entry + "'");
    ASSERT_NE(at, std::string::npos) << entry << " missing from ptxas's log:\n"
                                     << log;
    size_t spill = log.find("bytes spill stores", at);
    size_t used = log.find("Used ", at);
    ASSERT_NE(spill, std::string::npos) << log;
    ASSERT_NE(used, std::string::npos) << log;
    Sm90Report report;
    report.spillBytes = std::atoi(log.c_str() + log.rfind(',', spill) + 1);
    report.registers = std::atoi(log.c_str() + used + 5);
    EXPECT_GT(report.registers, 0) << entry;
    EXPECT_LE(report.registers, 255) << entry;
    reports.push_back(report);
  }
#else
  (void)source, (void)name, (void)entries;
  skip = "built without the CUDA toolkit (no NVRTC)";
#endif
}

// assembleForSm90, and each of |entries| with no spill stores (printed;
// recorded as ENTRY_registers and ENTRY_spill_bytes).
inline void expectSm90WithoutSpills(const std::string &source,
                                    const std::string &name,
                                    const std::vector<std::string> &entries,
                                    std::string &skip) {
  std::vector<Sm90Report> reports;
  assembleForSm90(source, name, entries, reports, skip);
  if (!skip.empty() || ::testing::Test::HasFatalFailure())
    return;
  ASSERT_EQ(reports.size(), entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    const std::string &entry = entries[i];
    std::printf("%-34s sm_90: %3d registers, %d bytes spill stores\n",
                entry.c_str(), reports[i].registers, reports[i].spillBytes);
    ::testing::Test::RecordProperty(entry + "_registers", reports[i].registers);
    ::testing::Test::RecordProperty(entry + "_spill_bytes", reports[i].spillBytes);
    EXPECT_EQ(reports[i].spillBytes, 0) << entry;
  }
}

// The runtime's own path: the real table's NVRTC (no driver needed)
// compiles |source| for sm_90 to an ELF cubin.
inline void expectRealTableCompiles(const std::string &source,
                                    const std::string &name, std::string &skip) {
  skip.clear();
  StatusOr<std::unique_ptr<CudaApi>> api = loadCudaApi(/*requireDriver=*/false);
  if (!api.isOk()) {
    skip = "no CUDA table: " + api.status().message();
    return;
  }
  std::vector<uint8_t> cubin;
  std::string log;
  Status s = api.value()->nvrtcCompile(source, name, 90, cubin, log);
  if (!s.isOk() && s.message().find("NVRTC is not available") != std::string::npos) {
    skip = s.message();
    return;
  }
  ASSERT_TRUE(s.isOk()) << s.message() << log;
  ASSERT_GE(cubin.size(), 4u);
  EXPECT_EQ(std::memcmp(cubin.data(), "\x7f" "ELF", 4), 0);
}

} // namespace kiln::runtime::cuda::testing

#endif // KILN_TESTS_UNIT_CUDA_SM90KERNELS_H
