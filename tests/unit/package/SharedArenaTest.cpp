//===- SharedArenaTest.cpp - placing one step in another's memory ---------===//
//
// runtime/package/SharedArena.h on hand-built packages: bound inputs land
// on the host's buffers (views of them too), unbound inputs in the guest's
// own memory, the rest in the host's free space as pieces that keep the
// guest's overlaps, largest first into the smallest hole, and what no hole
// holds in the guest's own memory; the refusals, one per message. Then, on
// random plans, the properties the executables rely on: no guest buffer
// placed in the host's memory touches a host input, buffers that overlap
// in the guest's plan overlap the same way, buffers that do not never do,
// and every address keeps the packages' alignment.
//
//===----------------------------------------------------------------------===//

#include "runtime/package/SharedArena.h"

#include <gtest/gtest.h>

#include <random>

namespace kiln::runtime {
namespace {

using Memory = SharedArenaPlan::Memory;

uint32_t buffer(LoadedPackage &p, const std::string &name, uint64_t offset,
                uint64_t bytes) {
  PackageBuffer b;
  b.name = name;
  b.dtype = PkgDType::F32;
  b.shape = {int64_t(bytes / 4)};
  b.size = bytes;
  b.offset = offset;
  p.buffers.push_back(b);
  p.arenaSize = std::max(p.arenaSize, offset + bytes);
  return p.buffers.size() - 1;
}

size_t input(LoadedPackage &p, uint32_t id, PkgRole role) {
  SignatureEntry e;
  e.name = p.buffers[id].name;
  e.role = role;
  e.dtype = p.buffers[id].dtype;
  e.shape = p.buffers[id].shape;
  e.buffer = id;
  p.inputs.push_back(e);
  return p.inputs.size() - 1;
}

// A training step: its temporaries in [0, 1024), then its batch x, its
// parameter w and its optimizer state m, then scratch.
LoadedPackage hostPackage() {
  LoadedPackage p;
  buffer(p, "act", 0, 512);
  buffer(p, "grad", 512, 512);
  input(p, buffer(p, "x", 1024, 128), PkgRole::Input);
  input(p, buffer(p, "w", 1152, 256), PkgRole::Parameter);
  input(p, buffer(p, "m", 1408, 256), PkgRole::OptimizerState);
  buffer(p, "scratch", 1664, 192);
  return p;
}

// An eval step: temporaries a and b overlap (their lives do not), c
// apart; then its batch and w (and a view of w's second half).
LoadedPackage guestPackage() {
  LoadedPackage p;
  buffer(p, "a", 0, 256);
  buffer(p, "b", 128, 256);
  buffer(p, "c", 384, 128);
  input(p, buffer(p, "x2", 512, 64), PkgRole::Input);
  input(p, buffer(p, "w", 576, 256), PkgRole::Parameter);
  buffer(p, "w_half", 704, 128);
  PackageThunk t;
  t.operands = {3, 4};
  t.results = {0, 1, 2};
  p.thunks.push_back(t);
  return p;
}

TEST(SharedArena, PlacesBoundInputsPiecesAndOwnMemory) {
  LoadedPackage host = hostPackage(), guest = guestPackage();
  StatusOr<SharedArenaPlan> made = planSharedArena(host, guest, {{1, 1}});
  ASSERT_TRUE(made.isOk()) << made.status().message();
  const SharedArenaPlan &plan = made.value();
  ASSERT_EQ(plan.buffers.size(), guest.buffers.size());
  // w and its view, on the host's w.
  EXPECT_EQ(plan.buffers[4].memory, Memory::Bound);
  EXPECT_EQ(plan.buffers[4].offset, 1152u);
  EXPECT_EQ(plan.buffers[5].memory, Memory::Bound);
  EXPECT_EQ(plan.buffers[5].offset, 1152u + 128);
  EXPECT_EQ(plan.boundBytes, 256u);
  // x2 keeps its value across the host's steps: its own memory.
  EXPECT_EQ(plan.buffers[3].memory, Memory::Own);
  EXPECT_EQ(plan.buffers[3].offset, 0u);
  EXPECT_EQ(plan.ownBytes, 64u);
  // The free space: [0, 1024) and the scratch [1664, 1856). a and b (one
  // piece, 384 bytes) go first, into the smallest hole that holds them
  // ([0, 1024)); c (128 bytes) into the smallest then ([1664, 1856)).
  EXPECT_EQ(plan.hostFreeBytes, 1024u + 192);
  EXPECT_EQ(plan.buffers[0].memory, Memory::Host);
  EXPECT_EQ(plan.buffers[0].offset, 0u);
  EXPECT_EQ(plan.buffers[1].offset, 128u) << "b keeps its overlap with a";
  EXPECT_EQ(plan.buffers[2].memory, Memory::Host);
  EXPECT_EQ(plan.buffers[2].offset, 1664u);
  EXPECT_EQ(plan.sharedBytes, 384u + 128);
  EXPECT_EQ(plan.piecesOwn, 0u);
  EXPECT_EQ(plan.hostRanges.size(), 2u);
  // A host run may write over a, b and c; a guest run over the host's act
  // (under a and b) and scratch (under c), not grad or the inputs.
  EXPECT_EQ(plan.hostOverwrites,
            (std::vector<bool>{true, true, true, false, false, false}));
  EXPECT_EQ(plan.guestOverwrites,
            (std::vector<bool>{true, false, false, false, false, true}));
  EXPECT_EQ(describeSharedArena(plan, "training step"),
            "runs in 512 B of the training step's 1.19 KiB free between its "
            "steps, reading 256 B of its inputs there");
}

TEST(SharedArena, PiecesNoHoleHoldsGoToOwnMemory) {
  LoadedPackage host = hostPackage(), guest = guestPackage();
  // The host's temporaries (256 bytes) are smaller than the guest's
  // a-and-b piece (384); c fits its scratch.
  host.buffers[0].size = 128;
  host.buffers[1].offset = 128;
  host.buffers[1].size = 128;
  for (PackageBuffer &b : host.buffers)
    if (b.offset >= 1024)
      b.offset -= 1024 - 256;
  host.arenaSize -= 1024 - 256;
  StatusOr<SharedArenaPlan> made = planSharedArena(host, guest, {{1, 1}});
  ASSERT_TRUE(made.isOk()) << made.status().message();
  const SharedArenaPlan &plan = made.value();
  EXPECT_EQ(plan.buffers[0].memory, Memory::Own);
  EXPECT_EQ(plan.buffers[1].memory, Memory::Own);
  EXPECT_EQ(plan.buffers[1].offset - plan.buffers[0].offset, 128u);
  EXPECT_EQ(plan.buffers[2].memory, Memory::Host);
  EXPECT_EQ(plan.buffers[2].offset, 896u);
  EXPECT_EQ(plan.piecesOwn, 1u);
  EXPECT_EQ(plan.ownBytes, 64u + 384);
  EXPECT_NE(describeSharedArena(plan, "training step")
                .find("; 1 piece of its plan found no room there"),
            std::string::npos);
}

TEST(SharedArena, RefusesWhatCannotBeShared) {
  LoadedPackage host = hostPackage();
  auto error = [&](const LoadedPackage &guest,
                   const std::vector<InputBinding> &bindings) {
    StatusOr<SharedArenaPlan> made = planSharedArena(host, guest, bindings);
    return made.isOk() ? std::string("(placed)") : made.status().message();
  };
  EXPECT_EQ(error(guestPackage(), {{1, 0}}),
            "guest input 1 ('w') cannot be read from host input 0 ('x'): "
            "expected the same dtype and shape");
  EXPECT_EQ(error(guestPackage(), {{1, 1}, {1, 2}}),
            "guest input 1 ('w') or host input 2 ('m') is bound twice");
  EXPECT_EQ(error(guestPackage(), {{2, 1}}),
            "binding guest input 2 to host input 1: the steps have 2 and 3 "
            "inputs");
  LoadedPackage writes = guestPackage();
  writes.thunks[0].results.push_back(5);
  EXPECT_EQ(error(writes, {{1, 1}}),
            "guest input 1 ('w') cannot be read from host input 1 ('w'): "
            "thunk 0 writes buffer 5 ('w_half') over it");
  LoadedPackage straddles = guestPackage();
  straddles.buffers[2].size = 256; // c runs into x2
  EXPECT_EQ(error(straddles, {}),
            "guest buffer 2 ('c') overlaps input 0 ('x2') without lying "
            "within it");
  // Unbound, the same guest places (w in its own memory).
  StatusOr<SharedArenaPlan> alone = planSharedArena(host, guestPackage(), {});
  ASSERT_TRUE(alone.isOk());
  EXPECT_EQ(alone->buffers[4].memory, Memory::Own);
  EXPECT_EQ(alone->buffers[5].offset - alone->buffers[4].offset, 128u);
  EXPECT_EQ(alone->ownBytes, 64u + 256);
}

// Random hosts and guests (inputs, then temporaries that the guest's plan
// packs with overlaps): the placement's invariants.
TEST(SharedArena, RandomPlansKeepTheirInvariants) {
  std::mt19937_64 rng(2026);
  auto pick = [&](uint64_t lo, uint64_t hi) {
    return std::uniform_int_distribution<uint64_t>(lo, hi)(rng);
  };
  for (int trial = 0; trial < 300; ++trial) {
    const uint64_t alignment = 64;
    LoadedPackage host, guest;
    host.arenaAlignment = guest.arenaAlignment = alignment;
    // The host: temporaries and inputs interleaved.
    uint64_t at = 0;
    int hostInputs = 0;
    for (int i = 0, n = int(pick(2, 12)); i < n; ++i) {
      uint64_t bytes = 4 * pick(1, 200);
      uint32_t id = buffer(host, "h" + std::to_string(i), at, bytes);
      if (pick(0, 2) == 0) {
        input(host, id, PkgRole::Parameter);
        ++hostInputs;
      }
      at = (at + bytes + alignment - 1) / alignment * alignment;
      at += alignment * pick(0, 2);
    }
    // The guest: inputs (some bound to a host input of their shape) at
    // random, temporaries overlapping one another at random.
    std::vector<InputBinding> bindings;
    std::vector<bool> hostUsed(host.inputs.size(), false);
    at = 0;
    for (int i = 0, n = int(pick(1, 14)); i < n; ++i) {
      uint64_t bytes = 4 * pick(1, 200);
      int bindTo = -1;
      if (hostInputs && pick(0, 2) == 0) {
        size_t h = pick(0, host.inputs.size() - 1);
        if (!hostUsed[h]) {
          bindTo = int(h);
          bytes = host.buffers[host.inputs[h].buffer].size;
          hostUsed[h] = true;
        }
      }
      bool isInput = bindTo >= 0 || pick(0, 3) == 0;
      uint64_t offset = at;
      if (!isInput && at && pick(0, 1) == 0) // overlap an earlier temporary
        offset = pick(0, at / alignment - 1) * alignment;
      uint32_t id = buffer(guest, "g" + std::to_string(i), offset, bytes);
      if (isInput) {
        size_t in = input(guest, id, PkgRole::Parameter);
        if (bindTo >= 0)
          bindings.push_back({in, size_t(bindTo)});
      }
      at = std::max(at,
                    (offset + bytes + alignment - 1) / alignment * alignment);
    }
    // Drop temporaries that overlap an input (the compiler never plans so).
    std::vector<bool> isInputBuffer(guest.buffers.size(), false);
    for (const SignatureEntry &e : guest.inputs)
      isInputBuffer[e.buffer] = true;
    bool clash = false;
    for (size_t i = 0; i < guest.buffers.size(); ++i)
      for (const SignatureEntry &e : guest.inputs) {
        const PackageBuffer &b = guest.buffers[i],
                            &in = guest.buffers[e.buffer];
        if (!isInputBuffer[i] && b.offset < in.offset + in.size &&
            in.offset < b.offset + b.size)
          clash = true;
      }
    if (clash)
      continue;

    StatusOr<SharedArenaPlan> made = planSharedArena(host, guest, bindings);
    ASSERT_TRUE(made.isOk())
        << "trial " << trial << ": " << made.status().message();
    const SharedArenaPlan &plan = made.value();
    auto where = [&](size_t i) {
      return std::make_pair(plan.buffers[i].memory == Memory::Own,
                            plan.buffers[i].offset);
    };
    for (size_t i = 0; i < guest.buffers.size(); ++i) {
      const PackageBuffer &b = guest.buffers[i];
      EXPECT_EQ(plan.buffers[i].offset % alignment, 0u) << "trial " << trial;
      if (plan.buffers[i].memory == Memory::Host) {
        EXPECT_LE(plan.buffers[i].offset + b.size, host.arenaSize);
        for (const SignatureEntry &e : host.inputs) {
          const PackageBuffer &h = host.buffers[e.buffer];
          EXPECT_FALSE(plan.buffers[i].offset < h.offset + h.size &&
                       h.offset < plan.buffers[i].offset + b.size)
              << "trial " << trial << ": " << b.name << " on host input "
              << h.name;
        }
      } else if (plan.buffers[i].memory == Memory::Own) {
        EXPECT_LE(plan.buffers[i].offset + b.size, plan.ownBytes);
      }
      for (size_t j = 0; j < i; ++j) {
        const PackageBuffer &c = guest.buffers[j];
        if (!b.size || !c.size || plan.buffers[i].memory == Memory::Bound ||
            plan.buffers[j].memory == Memory::Bound)
          continue;
        bool overlapped =
            b.offset < c.offset + c.size && c.offset < b.offset + b.size;
        auto [ownI, offI] = where(i);
        auto [ownJ, offJ] = where(j);
        bool overlaps =
            ownI == ownJ && offI < offJ + c.size && offJ < offI + b.size;
        if (overlapped) {
          EXPECT_EQ(ownI, ownJ) << "trial " << trial;
          EXPECT_EQ(int64_t(offI) - int64_t(offJ),
                    int64_t(b.offset) - int64_t(c.offset))
              << "trial " << trial << ": " << b.name << " and " << c.name;
        } else {
          EXPECT_FALSE(overlaps) << "trial " << trial << ": " << b.name
                                 << " and " << c.name << " now overlap";
        }
      }
    }
  }
}

} // namespace
} // namespace kiln::runtime
