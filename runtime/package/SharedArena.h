//===- SharedArena.h - one step run in another step's memory ----*- C++ -*-===//
//
// kiln train's eval step runs between training steps, never beside one, so
// it need not hold memory of its own: between two steps the training
// step's arena holds only its inputs (the parameters, optimizer state and
// batch); the rest (activations, gradients, GEMM scratch) is free. As JAX
// runs an eval function on the training state's arrays, with its
// temporaries in the memory the training step's have given back, a guest
// step (the eval step) runs in a host step's arena (the training step's):
//
//   - a bound input of the guest (a parameter: guest input g bound to host
//     input h, the same dtype and shape) is read in place from the host's
//     buffer: no copy of the trained parameters, and no second copy of
//     them in memory. The guest must not write it (no thunk's result
//     overlaps it; an eval step updates nothing);
//   - the guest's other inputs (its batch, and any state the host lacks)
//     keep their values across host steps, so they live in memory of the
//     guest's own;
//   - the guest's other buffers (activations, logits, scratch) go into the
//     host's free space: its arena less its inputs' buffers. Buffers the
//     guest's plan overlaps (their lives never do) move together, as one
//     piece at the alignment of both packages; pieces are placed largest
//     first, each into the smallest hole that holds it; a piece no hole
//     holds goes into the guest's own memory.
//
// So each step's outputs other than the host's updates (the loss, the
// logits) are overwritten by a run of the other: read them before running
// the other step. The executables check that (CudaExecutable::readOutput,
// cpu::Executable::output), and both run on one stream, so the order of
// their runs is the order of the GPU's work.
//
// planSharedArena only computes the placement; the executables
// (ExecutableOptions::shareMemoryWith, CudaOptions::shareMemoryWith) use it.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_PACKAGE_SHAREDARENA_H
#define KILN_RUNTIME_PACKAGE_SHAREDARENA_H

#include "runtime/Status.h"
#include "runtime/package/Package.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace kiln::runtime {

// Guest input |guest| is read in place from host input |host|.
struct InputBinding {
  size_t guest = 0, host = 0;
};

// Where each guest buffer lives.
struct SharedArenaPlan {
  // Host: in the host's free space; Bound: within a bound input's host
  // buffer (read in place); Own: in the guest's own memory.
  enum class Memory : uint8_t { Host, Bound, Own };
  struct Location {
    Memory memory = Memory::Own;
    uint64_t offset = 0; // in the host's arena (Host, Bound) or the guest's
  };
  std::vector<Location> buffers; // one per guest buffer
  // The guest's own memory (its unbound inputs, and pieces no hole held).
  uint64_t ownBytes = 0;
  // The host's free space between steps, and how much of it the guest's
  // pieces take (their extents, alignment included).
  uint64_t hostFreeBytes = 0;
  uint64_t sharedBytes = 0;
  // The guest's bound inputs, read in place from the host's buffers.
  uint64_t boundBytes = 0;
  // Pieces that found no hole in the host's free space (their bytes are in
  // ownBytes).
  size_t piecesOwn = 0;
  // The ranges (offset, bytes) the guest's pieces take in the host's arena
  // and in its own memory: where the guest may write.
  std::vector<std::pair<uint64_t, uint64_t>> hostRanges, ownRanges;
  // What a run of one step may write over of the other's: per guest buffer,
  // whether a host run may (it lies in the host's free space); per host
  // buffer, whether a guest run may (a guest piece overlaps it).
  std::vector<bool> hostOverwrites, guestOverwrites;

  // Whether guest buffer |id| is (or lies within) a bound input.
  bool bound(uint32_t id) const {
    return id < buffers.size() && buffers[id].memory == Memory::Bound;
  }
};

// What each of two executables sharing memory keeps at run time (both
// runtimes hold one): per buffer of its own, whether the other's run may
// write over it, and, shared by both, which of them started a run last.
class SharedArenaRuns {
public:
  // The host's and guest's states once |plan| placed the guest.
  static void join(SharedArenaRuns &host, SharedArenaRuns &guest,
                   const SharedArenaPlan &plan);
  // |step| (its executable) starts a run: from its first thunk on, it
  // writes over the free space it lends or borrows.
  void started(const void *step) {
    if (lastRun_)
      *lastRun_ = step;
  }
  // Whether buffer |id| of |step| may have been written over by the other
  // executable's run since |step|'s last one.
  bool overwritten(const void *step, uint32_t id) const {
    return lastRun_ && *lastRun_ && *lastRun_ != step &&
           id < overwritable_.size() && overwritable_[id];
  }

private:
  std::vector<bool> overwritable_;
  std::shared_ptr<const void *> lastRun_;
};

// Places |guest|'s buffers in |host|'s arena with |bindings| (each guest
// and host input at most once). An error names the binding or buffer that
// cannot be placed: a bound input whose dtype or shape differ, one a thunk
// of the guest writes, or a buffer that overlaps a bound input without
// lying within it.
StatusOr<SharedArenaPlan>
planSharedArena(const LoadedPackage &host, const LoadedPackage &guest,
                const std::vector<InputBinding> &bindings);

// "runs in 2.35 GiB of the training step's 8.38 GiB free between its
// steps, reading 474.84 MiB of its inputs there": |plan|, the host named
// |hostName| (and how many pieces found no room, if any did).
std::string describeSharedArena(const SharedArenaPlan &plan,
                                const std::string &hostName);

} // namespace kiln::runtime

#endif // KILN_RUNTIME_PACKAGE_SHAREDARENA_H
