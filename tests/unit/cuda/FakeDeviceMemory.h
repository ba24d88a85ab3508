//===- FakeDeviceMemory.h - device memory of the fake CUDA table -*- C++ -*-===//
//
// The allocations FakeCudaApi hands out (device memory and pinned host
// memory, both host memory here) and what it knows of their layout: which
// live allocation an address falls in, whether a copy, memset or GEMM
// stays inside one, and, for the arenas of the packages a test told it of
// (learnArena), where each of the package's buffers ends. The runtime's
// own kernels (attention, convolutions, epilogue fallbacks) take pointers
// and integers in an order of the runtime's; extentsByAddress tells their
// pointers from their integers and bounds each pointer by the buffer it
// points into.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TESTS_UNIT_CUDA_FAKEDEVICEMEMORY_H
#define KILN_TESTS_UNIT_CUDA_FAKEDEVICEMEMORY_H

#include "runtime/package/Package.h"

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kiln::runtime::cuda::testing {

// What a kernel's pointer argument may touch: |bytes| from the pointer,
// and whether the kernel may write them. Zero bytes: not a pointer.
struct KernelExtent {
  size_t bytes = 0;
  bool written = false;
};

class FakeDeviceMemory {
public:
  // The fake H200's memory: a larger allocation fails (out of memory).
  static constexpr size_t kDeviceMemoryBytes = size_t(2) << 30;

  FakeDeviceMemory() = default;
  FakeDeviceMemory(const FakeDeviceMemory &) = delete;
  FakeDeviceMemory &operator=(const FakeDeviceMemory &) = delete;
  // Frees what the test left allocated.
  ~FakeDeviceMemory();

  // |bytes| of host memory, 256-byte aligned as cudaMalloc's, live until
  // release(); null past the fake H200's memory or the host's. Exactly
  // |bytes|, not rounded up as a GPU's allocator rounds: under
  // AddressSanitizer (scripts/sanitize.sh) an access past what was asked
  // for is reported, even where a GPU would not fault.
  void *allocate(size_t bytes);
  // Frees an allocation of allocate(); false (and nothing freed) for a
  // pointer that is no live allocation's start, as cudaFree refuses it.
  // Null is nothing to free.
  bool release(void *ptr);
  // The bytes of the live allocations.
  size_t liveBytes() const;

  struct Allocation {
    const char *begin;
    size_t bytes;
  };
  // The live allocation |p| points into.
  std::optional<Allocation> allocationOf(const void *p) const;
  // Why [p, p + bytes) does not lie in one live allocation ("what: 4096
  // bytes at offset 256 of a 2048-byte allocation"), or "" when it does.
  std::string outOfBounds(const std::string &what, const void *p,
                          uint64_t bytes) const;

  // Remembers the buffers of a package whose arena has |arenaSize| bytes:
  // an allocation of that size is taken to be such an arena.
  void learnArena(uint64_t arenaSize, const std::vector<PackageBuffer> &buffers);
  // For a runtime kernel's parameters |args|: a parameter that points into
  // a learned arena may touch up to the end of the buffer(s) it points
  // into, one into another allocation (a workspace) up to that
  // allocation's end, both taken as written; other values are integers
  // (zero bytes). Empty when no parameter points into a learned arena.
  std::vector<KernelExtent> extentsByAddress(const std::vector<void *> &args) const;

private:
  // Live allocations: start -> bytes asked for.
  std::map<const char *, size_t> live_;
  // Learned arenas: by size, their buffers' [offset, end).
  std::map<uint64_t, std::vector<std::pair<uint64_t, uint64_t>>> arenas_;
};

} // namespace kiln::runtime::cuda::testing

#endif // KILN_TESTS_UNIT_CUDA_FAKEDEVICEMEMORY_H
