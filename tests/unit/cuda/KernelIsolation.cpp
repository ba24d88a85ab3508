//===- KernelIsolation.cpp - a host kernel on copies of its arguments -----===//
//
// See KernelIsolation.h.
//
//===----------------------------------------------------------------------===//

#include "tests/unit/cuda/KernelIsolation.h"

#include "tests/unit/cuda/AddressSanitizer.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace kiln::runtime::cuda::testing {

void runIsolated(const std::string &entry, HostKernel kernel,
                 const std::vector<void *> &args,
                 const std::vector<KernelExtent> &extents, unsigned grid,
                 unsigned block, std::vector<std::string> &faults) {
  constexpr size_t kGuard = KILN_TEST_HAS_ASAN ? 0 : 256;
  constexpr unsigned char kGuardByte = 0xa5;
  struct Region {
    char *begin, *end;
    bool written;
    std::vector<size_t> args;
    void *block = nullptr;
    char *copy = nullptr;
  };
  std::vector<size_t> order;
  for (size_t i = 0; i < args.size(); ++i)
    if (extents[i].bytes)
      order.push_back(i);
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return args[a] < args[b]; });
  std::vector<Region> regions;
  for (size_t i : order) {
    char *b = static_cast<char *>(args[i]), *e = b + extents[i].bytes;
    if (regions.empty() || b >= regions.back().end) {
      regions.push_back({b, e, extents[i].written, {i}});
      continue;
    }
    Region &r = regions.back();
    r.end = std::max(r.end, e);
    r.written |= extents[i].written;
    r.args.push_back(i);
  }
  std::vector<void *> copies = args;
  for (Region &r : regions) {
    auto at = reinterpret_cast<uintptr_t>(r.begin);
    size_t align =
        std::max<size_t>(sizeof(void *), std::min<size_t>(256, at & (~at + 1)));
    size_t slack = at % align, bytes = size_t(r.end - r.begin);
    if (posix_memalign(&r.block, align, kGuard + slack + bytes + kGuard) != 0) {
      r.block = nullptr;
      for (Region &allocated : regions)
        std::free(allocated.block);
      faults.push_back("no host memory to copy " + std::to_string(bytes) +
                       " bytes of " + entry + "'s arguments");
      return;
    }
    auto *block8 = static_cast<char *>(r.block);
    std::memset(block8, kGuardByte, kGuard + slack);
    r.copy = block8 + kGuard + slack;
    std::memcpy(r.copy, r.begin, bytes);
    std::memset(r.copy + bytes, kGuardByte, kGuard);
    for (size_t i : r.args)
      copies[i] = r.copy + (static_cast<char *>(args[i]) - r.begin);
  }
  kernel(copies.data(), grid, block);
  for (Region &r : regions) {
    size_t bytes = size_t(r.end - r.begin);
    auto *block8 = static_cast<const unsigned char *>(r.block);
    size_t before = 0, after = 0;
    for (const unsigned char *p = block8;
         p < reinterpret_cast<const unsigned char *>(r.copy); ++p)
      before += *p != kGuardByte;
    for (size_t k = 0; k < kGuard; ++k)
      after += static_cast<unsigned char>(r.copy[bytes + k]) != kGuardByte;
    std::string what = "argument" + std::string(r.args.size() > 1 ? "s" : "");
    for (size_t i : r.args)
      what += " " + std::to_string(i);
    what += " (" + std::to_string(bytes) + " bytes)";
    if (before)
      faults.push_back(entry + " wrote " + std::to_string(before) +
                       " byte(s) before " + what);
    if (after)
      faults.push_back(entry + " wrote " + std::to_string(after) +
                       " byte(s) after " + what);
    if (r.written)
      std::memcpy(r.begin, r.copy, bytes);
    else if (std::memcmp(r.begin, r.copy, bytes) != 0)
      faults.push_back(entry + " wrote " + what + ", which it only reads");
    std::free(r.block);
  }
}

} // namespace kiln::runtime::cuda::testing
