//===- SharedArena.cpp - one step run in another step's memory ------------===//

#include "runtime/package/SharedArena.h"

#include "runtime/Units.h"

#include <algorithm>

namespace kiln::runtime {
namespace {

uint64_t alignUp(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

struct Range {
  uint64_t begin = 0, end = 0;
  bool overlaps(uint64_t b, uint64_t e) const { return b < end && begin < e; }
  bool holds(uint64_t b, uint64_t e) const { return begin <= b && e <= end; }
};

Range rangeOf(const PackageBuffer &b) { return {b.offset, b.offset + b.size}; }

std::string inputName(const LoadedPackage &pkg, size_t input) {
  return "input " + std::to_string(input) + " ('" + pkg.inputs[input].name +
         "')";
}

} // namespace

StatusOr<SharedArenaPlan>
planSharedArena(const LoadedPackage &host, const LoadedPackage &guest,
                const std::vector<InputBinding> &bindings) {
  const uint64_t alignment =
      std::max(host.arenaAlignment, guest.arenaAlignment);
  SharedArenaPlan plan;
  plan.buffers.resize(guest.buffers.size());

  // The bindings: each guest input to the host input of its dtype and shape.
  std::vector<int64_t> boundTo(guest.inputs.size(), -1);
  std::vector<bool> hostBound(host.inputs.size(), false);
  for (const InputBinding &b : bindings) {
    if (b.guest >= guest.inputs.size() || b.host >= host.inputs.size())
      return Status::error("binding guest input " + std::to_string(b.guest) +
                           " to host input " + std::to_string(b.host) +
                           ": the steps have " +
                           std::to_string(guest.inputs.size()) + " and " +
                           std::to_string(host.inputs.size()) + " inputs");
    if (boundTo[b.guest] >= 0 || hostBound[b.host])
      return Status::error("guest " + inputName(guest, b.guest) + " or host " +
                           inputName(host, b.host) + " is bound twice");
    const SignatureEntry &g = guest.inputs[b.guest], &h = host.inputs[b.host];
    if (g.dtype != h.dtype || g.shape != h.shape)
      return Status::error(
          "guest " + inputName(guest, b.guest) + " cannot be read from host " +
          inputName(host, b.host) + ": expected the same dtype and shape");
    boundTo[b.guest] = static_cast<int64_t>(b.host);
    hostBound[b.host] = true;
  }

  // Each guest input's range; a bound one must not be written.
  std::vector<Range> inputRange(guest.inputs.size());
  for (size_t i = 0; i < guest.inputs.size(); ++i)
    inputRange[i] = rangeOf(guest.buffers[guest.inputs[i].buffer]);
  for (size_t t = 0; t < guest.thunks.size(); ++t)
    for (uint32_t r : guest.thunks[t].results) {
      Range written = rangeOf(guest.buffers[r]);
      for (size_t i = 0; i < guest.inputs.size(); ++i)
        if (boundTo[i] >= 0 &&
            inputRange[i].overlaps(written.begin, written.end))
          return Status::error(
              "guest " + inputName(guest, i) + " cannot be read from host " +
              inputName(host, boundTo[i]) + ": thunk " + std::to_string(t) +
              " writes buffer " + std::to_string(r) + " ('" +
              guest.buffers[r].name + "') over it");
    }

  // Buffers within an input's range go with it: into the host's buffer
  // (bound), or the guest's own memory (unbound: its value must outlive
  // the host's steps). The rest form pieces.
  std::vector<int64_t> ownInputOffset(guest.inputs.size(), -1);
  struct Piece {
    uint64_t begin = 0, end = 0;
    std::vector<uint32_t> members;
  };
  std::vector<std::pair<Range, uint32_t>> loose;
  for (uint32_t id = 0; id < guest.buffers.size(); ++id) {
    Range r = rangeOf(guest.buffers[id]);
    if (r.begin == r.end) { // nothing to place
      plan.buffers[id] = {SharedArenaPlan::Memory::Host, 0};
      continue;
    }
    int64_t within = -1;
    for (size_t i = 0; i < guest.inputs.size() && within < 0; ++i) {
      if (inputRange[i].holds(r.begin, r.end))
        within = static_cast<int64_t>(i);
      else if (inputRange[i].overlaps(r.begin, r.end))
        return Status::error("guest buffer " + std::to_string(id) + " ('" +
                             guest.buffers[id].name + "') overlaps " +
                             inputName(guest, i) + " without lying within it");
    }
    if (within < 0) {
      loose.push_back({r, id});
      continue;
    }
    uint64_t inside = r.begin - inputRange[within].begin;
    if (boundTo[within] >= 0) {
      const PackageBuffer &hb =
          host.buffers[host.inputs[boundTo[within]].buffer];
      plan.buffers[id] = {SharedArenaPlan::Memory::Bound, hb.offset + inside};
      if (id == guest.inputs[within].buffer)
        plan.boundBytes += hb.size;
      continue;
    }
    if (ownInputOffset[within] < 0) {
      uint64_t at = alignUp(plan.ownBytes, alignment);
      ownInputOffset[within] = static_cast<int64_t>(at);
      uint64_t bytes = inputRange[within].end - inputRange[within].begin;
      plan.ownBytes = at + bytes;
      plan.ownRanges.push_back({at, bytes});
    }
    plan.buffers[id] = {SharedArenaPlan::Memory::Own,
                        uint64_t(ownInputOffset[within]) + inside};
  }

  // Pieces: buffers whose ranges overlap (the plan reuses memory between
  // them) keep their relative offsets.
  std::sort(loose.begin(), loose.end(), [](const auto &a, const auto &b) {
    return a.first.begin < b.first.begin;
  });
  std::vector<Piece> pieces;
  for (const auto &[r, id] : loose) {
    if (pieces.empty() || r.begin >= pieces.back().end)
      pieces.push_back({r.begin, r.end, {}});
    pieces.back().end = std::max(pieces.back().end, r.end);
    pieces.back().members.push_back(id);
  }

  // The host's free space: its arena less its inputs' buffers.
  std::vector<Range> taken;
  for (const SignatureEntry &e : host.inputs)
    taken.push_back(rangeOf(host.buffers[e.buffer]));
  std::sort(taken.begin(), taken.end(),
            [](const Range &a, const Range &b) { return a.begin < b.begin; });
  std::vector<Range> holes;
  uint64_t cursor = 0;
  auto addHole = [&](uint64_t begin, uint64_t end) {
    begin = alignUp(begin, alignment);
    if (begin < end) {
      holes.push_back({begin, end});
      plan.hostFreeBytes += end - begin;
    }
  };
  for (const Range &r : taken) {
    if (r.begin > cursor)
      addHole(cursor, r.begin);
    cursor = std::max(cursor, r.end);
  }
  if (host.arenaSize > cursor)
    addHole(cursor, host.arenaSize);

  // Largest piece first, each into the smallest hole that holds it.
  std::sort(pieces.begin(), pieces.end(), [](const Piece &a, const Piece &b) {
    return a.end - a.begin > b.end - b.begin;
  });
  for (const Piece &p : pieces) {
    uint64_t extent = p.end - p.begin;
    Range *best = nullptr;
    for (Range &h : holes)
      if (h.end - h.begin >= extent &&
          (!best || h.end - h.begin < best->end - best->begin))
        best = &h;
    SharedArenaPlan::Memory memory;
    uint64_t at;
    if (best) {
      memory = SharedArenaPlan::Memory::Host;
      at = best->begin;
      best->begin = std::min(best->end, alignUp(at + extent, alignment));
      plan.sharedBytes += extent;
      plan.hostRanges.push_back({at, extent});
    } else {
      memory = SharedArenaPlan::Memory::Own;
      at = alignUp(plan.ownBytes, alignment);
      plan.ownBytes = at + extent;
      plan.ownRanges.push_back({at, extent});
      ++plan.piecesOwn;
    }
    for (uint32_t id : p.members)
      plan.buffers[id] = {memory, at + (guest.buffers[id].offset - p.begin)};
  }

  plan.hostOverwrites.assign(guest.buffers.size(), false);
  for (size_t id = 0; id < guest.buffers.size(); ++id)
    plan.hostOverwrites[id] =
        plan.buffers[id].memory == SharedArenaPlan::Memory::Host &&
        guest.buffers[id].size > 0;
  plan.guestOverwrites.assign(host.buffers.size(), false);
  for (size_t id = 0; id < host.buffers.size(); ++id) {
    Range r = rangeOf(host.buffers[id]);
    for (auto [offset, bytes] : plan.hostRanges)
      if (r.overlaps(offset, offset + bytes))
        plan.guestOverwrites[id] = true;
  }
  return plan;
}

void SharedArenaRuns::join(SharedArenaRuns &host, SharedArenaRuns &guest,
                           const SharedArenaPlan &plan) {
  guest.overwritable_ = plan.hostOverwrites;
  host.overwritable_.resize(plan.guestOverwrites.size(), false);
  for (size_t id = 0; id < plan.guestOverwrites.size(); ++id)
    if (plan.guestOverwrites[id])
      host.overwritable_[id] = true;
  if (!host.lastRun_)
    host.lastRun_ = std::make_shared<const void *>(nullptr);
  guest.lastRun_ = host.lastRun_;
}

std::string describeSharedArena(const SharedArenaPlan &plan,
                                const std::string &hostName) {
  std::string text = "runs in " + formatBytes(plan.sharedBytes) + " of the " +
                     hostName + "'s " + formatBytes(plan.hostFreeBytes) +
                     " free between its steps";
  if (plan.boundBytes)
    text +=
        ", reading " + formatBytes(plan.boundBytes) + " of its inputs there";
  if (plan.piecesOwn)
    text += "; " + std::to_string(plan.piecesOwn) +
            (plan.piecesOwn == 1 ? " piece" : " pieces") +
            " of its plan found no room there";
  return text;
}

} // namespace kiln::runtime
