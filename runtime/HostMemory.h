//===- HostMemory.h - the machine's memory ----------------------*- C++ -*-===//
//
// What the kernel says of the machine's memory (/proc/meminfo): the CPU
// executable checks a step's arena against it before allocating, as the
// CUDA executable checks the device's free memory, so a step that cannot
// fit is refused with what would fit it rather than stopped by the
// out-of-memory killer while its arena is zeroed.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_HOSTMEMORY_H
#define KILN_RUNTIME_HOSTMEMORY_H

#include <cstdint>
#include <optional>
#include <string_view>

namespace kiln::runtime {

struct HostMemory {
  // MemTotal.
  uint64_t total = 0;
  // MemAvailable: what can be allocated without swapping.
  uint64_t available = 0;
  // SwapFree.
  uint64_t swapFree = 0;
};

// /proc/meminfo's text ("MemTotal:       24575384 kB" lines) in bytes;
// std::nullopt without a MemTotal and a MemAvailable line.
std::optional<HostMemory> parseMeminfo(std::string_view text);

// This machine's, from /proc/meminfo; std::nullopt where it cannot be read
// (then nothing is checked).
std::optional<HostMemory> hostMemory();

} // namespace kiln::runtime

#endif // KILN_RUNTIME_HOSTMEMORY_H
