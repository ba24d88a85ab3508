//===- FakeNvtxLog.h - the NVTX ranges a piece of code pushes ---*- C++ -*-===//
//
// Installs tests/unit/cuda/FakeNvtx.cpp as the process's NVTX tool
// (NVTX_INJECTION64_PATH, set during static initialization, before NVTX's
// first call loads a tool) and reads back what it wrote down. Where the
// library is not at its build path (binaries carried to another machine),
// nothing is installed and fakeNvtxInstalled() says so.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TESTS_UNIT_CUDA_FAKENVTXLOG_H
#define KILN_TESTS_UNIT_CUDA_FAKENVTXLOG_H

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

namespace kiln::testing {

inline const bool kFakeNvtxInstalled = [] {
  if (access(KILN_FAKE_NVTX, R_OK) != 0)
    return false;
  setenv("NVTX_INJECTION64_PATH", KILN_FAKE_NVTX, 1);
  return true;
}();

inline bool fakeNvtxInstalled() { return kFakeNvtxInstalled; }

// The ranges |body| pushes and pops, a line each ("T push kiln: MESSAGE",
// "T pop kiln"; T numbers the threads).
inline std::vector<std::string> nvtxRanges(const std::function<void()> &body) {
  std::string path = "/tmp/kiln-nvtx-" + std::to_string(getpid()) + ".log";
  std::remove(path.c_str());
  setenv("FAKE_NVTX_LOG", path.c_str(), 1);
  body();
  unsetenv("FAKE_NVTX_LOG");
  std::vector<std::string> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);)
    lines.push_back(line);
  std::remove(path.c_str());
  return lines;
}

} // namespace kiln::testing

#endif // KILN_TESTS_UNIT_CUDA_FAKENVTXLOG_H
