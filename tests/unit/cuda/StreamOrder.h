//===- StreamOrder.h - CUDA's stream order, and races against it -*- C++ -*-===//
//
// FakeCudaApi's race check. Every stream is ordered as CUDA orders it,
// with a vector clock per stream and one for the host (agent 0; streams
// are numbered from 1 in the order they are first seen): work queued on a
// stream comes after the stream's earlier work and after whatever the
// host has waited for; a stream that waits for an event comes after the
// event's record; a host that synchronizes a stream or an event, or frees
// memory, comes after the work it waited for.
//
// Each piece of work names the bytes it reads and writes (DeviceAccess).
// Two accesses of one live allocation from different streams that
// overlap, where one writes and neither is ordered before the other, are
// a race on a GPU: queue() says which two. The history keeps, per
// allocation, only the accesses a later one could still race with.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TESTS_UNIT_CUDA_STREAMORDER_H
#define KILN_TESTS_UNIT_CUDA_STREAMORDER_H

#include "runtime/cuda/CudaApi.h"
#include "tests/unit/cuda/FakeDeviceMemory.h"

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

namespace kiln::runtime::cuda::testing {

// Bytes a call reads or writes: |what| names them in a race report
// ("cudaMemcpyAsync H2D destination", "cuLaunchKernel kiln_relu argument
// 0").
struct DeviceAccess {
  std::string what;
  const void *at;
  uint64_t bytes;
  bool write;
};

class StreamOrder {
public:
  // By agent: how much of each agent's work is ordered before.
  using Clock = std::vector<uint64_t>;

  // Gives |stream| its number (from 1) if it has none yet.
  size_t stream(CudaStream stream);
  // Orders new work on |stream| after the stream's earlier work and what
  // the host has waited for, and checks |accesses| against the earlier
  // accesses of the same allocations in |memory| (bytes outside every
  // allocation, pageable host memory, are not tracked). Returns the
  // first race ("A on stream 2 and B on stream 1, bytes 0..128 of a
  // 4096-byte allocation: nothing orders them"), or "" when there is none.
  std::string queue(CudaStream stream, const std::vector<DeviceAccess> &accesses,
                    const FakeDeviceMemory &memory);
  // An event recorded on |stream| now: what waiting for it orders after.
  Clock record(CudaStream stream);
  // cudaStreamWaitEvent: |stream| waits for an event's |recorded| clock.
  void streamWaits(CudaStream stream, const Clock &recorded);
  // cudaEventSynchronize: the host waits for an event's |recorded| clock.
  void hostWaits(const Clock &recorded);
  // cudaStreamSynchronize: the host waits for |stream|'s work so far.
  void hostWaits(CudaStream stream);
  // cudaFree, cudaFreeHost: the host waits for every stream.
  void hostWaitsForAll();
  // Drops the history of the allocation starting at |allocation| (freed).
  void forget(const void *allocation);

private:
  // One access as the history keeps it: bytes [begin, end) of the
  // allocation, by |agent| at its clock |epoch|.
  struct Touch {
    uint64_t begin, end;
    size_t agent;
    uint64_t epoch;
    bool write;
    std::string what;
  };
  static void join(Clock &into, const Clock &from);
  Clock &clock(size_t agent);

  // Each agent's clock (a deque: growing it keeps the references clock()
  // gave out), the streams' agents, and each allocation's accesses that
  // may still race.
  std::deque<Clock> clocks_{Clock(1, 0)};
  std::map<CudaStream, size_t> agents_;
  std::map<const char *, std::vector<Touch>> history_;
};

} // namespace kiln::runtime::cuda::testing

#endif // KILN_TESTS_UNIT_CUDA_STREAMORDER_H
