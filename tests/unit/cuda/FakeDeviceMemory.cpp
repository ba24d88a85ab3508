//===- FakeDeviceMemory.cpp - device memory of the fake CUDA table --------===//
//
// See FakeDeviceMemory.h.
//
//===----------------------------------------------------------------------===//

#include "tests/unit/cuda/FakeDeviceMemory.h"

#include <algorithm>
#include <cstdlib>

namespace kiln::runtime::cuda::testing {

FakeDeviceMemory::~FakeDeviceMemory() {
  for (auto &[p, bytes] : live_)
    std::free(const_cast<char *>(p));
}

void *FakeDeviceMemory::allocate(size_t bytes) {
  void *p = nullptr;
  if (bytes > kDeviceMemoryBytes ||
      posix_memalign(&p, 256, std::max<size_t>(bytes, 1)) != 0)
    return nullptr;
  live_[static_cast<const char *>(p)] = bytes;
  return p;
}

bool FakeDeviceMemory::release(void *ptr) {
  if (!ptr)
    return true;
  if (!live_.erase(static_cast<const char *>(ptr)))
    return false;
  std::free(ptr);
  return true;
}

size_t FakeDeviceMemory::liveBytes() const {
  size_t bytes = 0;
  for (const auto &[begin, size] : live_)
    bytes += size;
  return bytes;
}

std::optional<FakeDeviceMemory::Allocation>
FakeDeviceMemory::allocationOf(const void *p) const {
  const char *at = static_cast<const char *>(p);
  auto it = live_.upper_bound(at);
  if (it == live_.begin() || (--it, at >= it->first + it->second))
    return std::nullopt;
  return Allocation{it->first, it->second};
}

std::string FakeDeviceMemory::outOfBounds(const std::string &what,
                                          const void *p, uint64_t bytes) const {
  std::optional<Allocation> a = allocationOf(p);
  if (!a)
    return what + ": " + std::to_string(bytes) +
           " bytes at an address outside every allocation";
  size_t offset = size_t(static_cast<const char *>(p) - a->begin);
  if (bytes > a->bytes - offset)
    return what + ": " + std::to_string(bytes) + " bytes at offset " +
           std::to_string(offset) + " of a " + std::to_string(a->bytes) +
           "-byte allocation";
  return "";
}

void FakeDeviceMemory::learnArena(uint64_t arenaSize,
                                  const std::vector<PackageBuffer> &buffers) {
  std::vector<std::pair<uint64_t, uint64_t>> &spans =
      arenas_[std::max<uint64_t>(arenaSize, 1)];
  for (const PackageBuffer &b : buffers)
    if (b.size)
      spans.push_back({b.offset, b.offset + b.size});
}

std::vector<KernelExtent>
FakeDeviceMemory::extentsByAddress(const std::vector<void *> &args) const {
  std::vector<KernelExtent> out(args.size());
  bool inArena = false;
  for (size_t i = 0; i < args.size(); ++i) {
    std::optional<Allocation> a = allocationOf(args[i]);
    if (!a)
      continue; // an integer
    uint64_t at = uint64_t(static_cast<const char *>(args[i]) - a->begin);
    uint64_t end = a->bytes;
    if (auto arena = arenas_.find(a->bytes); arena != arenas_.end()) {
      uint64_t bufferEnd = 0;
      for (const auto &[begin, stop] : arena->second)
        if (begin <= at && at < stop)
          bufferEnd = std::max(bufferEnd, stop);
      if (bufferEnd) {
        end = bufferEnd;
        inArena = true;
      }
    }
    out[i] = {size_t(end - at), true};
  }
  return inArena ? out : std::vector<KernelExtent>();
}

} // namespace kiln::runtime::cuda::testing
