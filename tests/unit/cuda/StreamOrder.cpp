//===- StreamOrder.cpp - CUDA's stream order, and races against it --------===//
//
// See StreamOrder.h.
//
//===----------------------------------------------------------------------===//

#include "tests/unit/cuda/StreamOrder.h"

#include <algorithm>

namespace kiln::runtime::cuda::testing {

void StreamOrder::join(Clock &into, const Clock &from) {
  if (into.size() < from.size())
    into.resize(from.size(), 0);
  for (size_t i = 0; i < from.size(); ++i)
    into[i] = std::max(into[i], from[i]);
}

size_t StreamOrder::stream(CudaStream stream) {
  auto [it, added] = agents_.try_emplace(stream, agents_.size() + 1);
  return it->second;
}

StreamOrder::Clock &StreamOrder::clock(size_t agent) {
  if (clocks_.size() <= agent)
    clocks_.resize(agent + 1);
  Clock &c = clocks_[agent];
  if (c.size() <= agent)
    c.resize(agent + 1, 0); // its own entry, at least
  return c;
}

std::string StreamOrder::queue(CudaStream s,
                               const std::vector<DeviceAccess> &accesses,
                               const FakeDeviceMemory &memory) {
  size_t me = stream(s);
  Clock &c = clock(me);
  join(c, clock(0));
  uint64_t epoch = ++c[me];
  // Whether |t| happened before this work (so cannot race it).
  auto before = [&](const Touch &t) {
    return t.agent < c.size() && c[t.agent] >= t.epoch;
  };
  for (const DeviceAccess &a : accesses) {
    std::optional<FakeDeviceMemory::Allocation> allocation =
        a.at && a.bytes ? memory.allocationOf(a.at) : std::nullopt;
    if (!allocation)
      continue; // pageable host memory, or nothing
    uint64_t begin = uint64_t(static_cast<const char *>(a.at) - allocation->begin);
    uint64_t end = std::min<uint64_t>(begin + a.bytes, allocation->bytes);
    std::vector<Touch> &history = history_[allocation->begin];
    for (const Touch &t : history) {
      if (before(t) || t.end <= begin || end <= t.begin || !(t.write || a.write))
        continue;
      return t.what + " on stream " + std::to_string(t.agent) + " and " +
             a.what + " on stream " + std::to_string(me) + ", bytes " +
             std::to_string(std::max(begin, t.begin)) + ".." +
             std::to_string(std::min(end, t.end)) + " of a " +
             std::to_string(allocation->bytes) +
             "-byte allocation: nothing orders them";
    }
    // What this access covers and follows needs no keeping: a later
    // access unordered with it is unordered with this one too.
    history.erase(std::remove_if(history.begin(), history.end(),
                                 [&](const Touch &t) {
                                   return before(t) && begin <= t.begin &&
                                          t.end <= end && (a.write || !t.write);
                                 }),
                  history.end());
    history.push_back({begin, end, me, epoch, a.write, a.what});
  }
  return "";
}

StreamOrder::Clock StreamOrder::record(CudaStream s) {
  Clock &c = clock(stream(s));
  join(c, clock(0));
  return c;
}

void StreamOrder::streamWaits(CudaStream s, const Clock &recorded) {
  join(clock(stream(s)), recorded);
}

void StreamOrder::hostWaits(const Clock &recorded) { join(clock(0), recorded); }

void StreamOrder::hostWaits(CudaStream s) { join(clock(0), clock(stream(s))); }

void StreamOrder::hostWaitsForAll() {
  for (const auto &[s, agent] : agents_)
    join(clock(0), clock(agent));
}

void StreamOrder::forget(const void *allocation) {
  history_.erase(static_cast<const char *>(allocation));
}

} // namespace kiln::runtime::cuda::testing
