//===- PackageFuzzer.cpp - libFuzzer target for the package loader --------===//
//
// Feeds arbitrary bytes to the step package loader (runtime/package/
// Package.h loadPackageFromBytes: the FlatBuffers verifier, then
// checkPackage), as `kiln train STEP.kpkg`, `kiln inspect` and a packed
// trainer do, and every package it accepts to what reads a package before
// any kernel runs:
//
//   - the device memory of a CUDA step (runtime/cuda/CudaMemory.h), for an
//     sm_80 and an sm_90 device, with the attention kernels in both forms:
//     it indexes buffers by the thunks' operands and sizes workspaces from
//     their shapes;
//   - the update copies after the step (pkgUpdateCopies);
//   - the parameters' initial values (runtime/package/PackageData.h
//     writeInitialValue), for buffers of at most 1 MiB, each written into
//     a vector of the buffer's size;
//   - the writer: an accepted package writes (serialize/PackageWriter.h),
//     and the bytes load back into a package that writes the same bytes.
//
// Besides crashes, hangs and AddressSanitizer reports, a loader refusal
// without a message and a violated property trap, so libFuzzer saves the
// input. Build and run: see tests/fuzz/README.md.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudaMemory.h"
#include "runtime/package/Package.h"
#include "runtime/package/PackageData.h"
#include "serialize/PackageWriter.h"

#include <cstdint>
#include <cstdio>
#include <vector>

namespace {

namespace rt = kiln::runtime;

[[noreturn]] void fail(const char *what) {
  std::fprintf(stderr, "property violated: %s\n", what);
  __builtin_trap();
}

rt::cuda::CudaDeviceInfo device(int major, int optIn) {
  rt::cuda::CudaDeviceInfo d;
  d.name = "fuzz";
  d.major = major;
  d.minor = 0;
  d.multiprocessors = 132;
  d.maxSharedMemoryPerBlockOptin = optIn;
  return d;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  rt::StatusOr<rt::LoadedPackage> loaded = rt::loadPackageFromBytes(data, size);
  if (!loaded.isOk()) {
    if (loaded.status().message().empty())
      fail("the loader refused a package without saying why");
    return 0;
  }
  const rt::LoadedPackage &pkg = loaded.value();

  for (const rt::cuda::CudaDeviceInfo &d :
       {device(8, 163 * 1024), device(9, 227 * 1024)})
    for (bool mma : {true, false}) {
      rt::cuda::CudaStepMemory m =
          rt::cuda::cudaStepMemory(pkg, d, uint64_t(32) << 20, mma);
      if (m.arena != pkg.arenaSize || m.total() < m.arena)
        fail("the device memory does not hold the arena");
      (void)rt::cuda::describeStepMemory(m);
    }

  (void)rt::pkgUpdateCopies(pkg);

  for (const rt::ParameterInit &init : pkg.parameterInits) {
    const rt::PackageBuffer &b = pkg.buffers[init.buffer];
    if (b.size > (1u << 20))
      continue;
    // The buffer's bytes alone, so a write past them is an ASan report.
    std::vector<uint8_t> bytes(b.size);
    rt::writeInitialValue(b, init, bytes.data());
  }

  rt::StatusOr<std::vector<uint8_t>> written =
      kiln::serialize::writePackage(pkg);
  if (!written.isOk())
    fail("an accepted package does not write");
  rt::StatusOr<rt::LoadedPackage> again =
      rt::loadPackageFromBytes(written.value().data(), written.value().size());
  if (!again.isOk())
    fail("a written package does not load");
  rt::StatusOr<std::vector<uint8_t>> rewritten =
      kiln::serialize::writePackage(again.value());
  if (!rewritten.isOk() || rewritten.value() != written.value())
    fail("a written package does not write the same bytes again");
  return 0;
}
