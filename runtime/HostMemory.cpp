//===- HostMemory.cpp - the machine's memory ------------------------------===//
//
// See HostMemory.h.
//
//===----------------------------------------------------------------------===//

#include "runtime/HostMemory.h"

#include <fstream>
#include <sstream>
#include <string>

namespace kiln::runtime {

std::optional<HostMemory> parseMeminfo(std::string_view text) {
  HostMemory memory;
  bool total = false, available = false;
  std::istringstream lines{std::string(text)};
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    std::string key, unit;
    uint64_t value = 0;
    if (!(fields >> key >> value))
      continue;
    fields >> unit;
    // Every size in the file is in kB (KiB); a line without a unit is a
    // count (HugePages_*).
    if (unit != "kB" || value > UINT64_MAX / 1024)
      continue;
    value *= 1024;
    if (key == "MemTotal:") {
      memory.total = value;
      total = true;
    } else if (key == "MemAvailable:") {
      memory.available = value;
      available = true;
    } else if (key == "SwapFree:") {
      memory.swapFree = value;
    }
  }
  if (!total || !available)
    return std::nullopt;
  return memory;
}

std::optional<HostMemory> hostMemory() {
  std::ifstream file("/proc/meminfo");
  if (!file)
    return std::nullopt;
  std::ostringstream text;
  text << file.rdbuf();
  return parseMeminfo(text.str());
}

} // namespace kiln::runtime
