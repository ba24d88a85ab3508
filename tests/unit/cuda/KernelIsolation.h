//===- KernelIsolation.h - a host kernel on copies of its arguments -*- C++ -*-===//
//
// How FakeCudaApi catches a kernel that writes where it must not: the
// kernel runs on copies of its arguments' extents, each between guard
// bytes, and the copies are compared afterwards. A GPU would fault there,
// or silently corrupt a neighbouring buffer.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TESTS_UNIT_CUDA_KERNELISOLATION_H
#define KILN_TESTS_UNIT_CUDA_KERNELISOLATION_H

#include "tests/unit/cuda/FakeDeviceMemory.h"

#include <string>
#include <vector>

namespace kiln::runtime::cuda::testing {

// A kernel on the host: the emulation's NAME_host(buffers, grid, block).
using HostKernel = void (*)(void **buffers, unsigned grid, unsigned block);

// Runs |kernel| (entry point |entry|) on copies of |args|' |extents|
// (one per argument; zero bytes: not a pointer, passed as it is).
// Arguments whose extents overlap (an update in place passes one buffer
// as an operand and a result) share one copy. Each copy keeps its
// original's alignment (up to 256 bytes) and sits between guard bytes
// (none under AddressSanitizer, whose redzones are exact, so a read past
// a copy is reported too). Afterwards the written copies go back, and
// each changed guard or changed read-only copy is appended to |faults|:
// "kiln_fusion3 wrote 4 byte(s) after argument 2 (1024 bytes)",
// "... wrote argument 0 (64 bytes), which it only reads".
void runIsolated(const std::string &entry, HostKernel kernel,
                 const std::vector<void *> &args,
                 const std::vector<KernelExtent> &extents, unsigned grid,
                 unsigned block, std::vector<std::string> &faults);

} // namespace kiln::runtime::cuda::testing

#endif // KILN_TESTS_UNIT_CUDA_KERNELISOLATION_H
