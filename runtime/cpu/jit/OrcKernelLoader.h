//===- OrcKernelLoader.h - package kernels compiled by LLVM ORC ---*- C++ -*-===//
//
// The CPU backend's KernelLoader: one LLJIT for the host CPU (codegen at
// CodeGenOptLevel::Aggressive) in which every package kernel gets its own
// JITDylib, so each kernel's `kiln_kernel` and its private globals stay
// apart without renaming. LLVM bitcode (KernelKind::LlvmBitcode) is parsed
// into a ThreadSafeModule; CPU object code (KernelKind::CpuObject) is added
// as an object file. Symbols the kernels call but do not define (libm's exp,
// log1p, tanh, erf, ...; memcpy and memset) resolve against the running
// process.
//
// Compiling bitcode is most of what loading a package costs (a small MLP's
// training step: 0.3 s of 0.45 s), and every process that loads the same
// package compiles the same kernels: each rank of `kiln launch`, every
// `kiln train` of one model. So each kernel's object code is kept on disk,
// as JAX's persistent compilation cache and Kiln's NVRTC caches keep theirs:
//
//   $KILN_CACHE_DIR/cpu/HASH.o (default ~/.cache/kiln/cpu;
//   KILN_CACHE_DIR=off disables it)
//
// A file holds its whole key (the host's triple, CPU and features, the
// code generator's optimization level, LLVM's version, and the kernel's
// bitcode), compared in full on read, and a checksum of its object: a
// collision, another CPU, another LLVM or a damaged file compiles again
// and rewrites the file. Files are written under a name unique to the
// writer, then renamed, so processes may share the directory. The cache
// is an optimization: a directory that cannot be written is a miss, never
// an error.
//
// Before an Executable loads a package's kernels it hands the loader the
// distinct ones (KernelLoader::prefetch): those neither in the disk cache
// nor compiled already are compiled to objects side by side, one per
// hardware thread, each in an LLVMContext and with a TargetMachine of its
// own; load() then links the object (and writes the cache file) instead of
// compiling. A 12-block GPT's 40 distinct kernels with an empty cache:
// 2.7 s -> 1.9 s on two cores.
//
// This library (KilnRuntimeCpuJit) is the only part of the runtime that
// links LLVM; its header needs no LLVM include. The loader owns the compiled
// code: keep it alive as long as any Executable that loaded kernels from it.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_CPU_JIT_ORCKERNELLOADER_H
#define KILN_RUNTIME_CPU_JIT_ORCKERNELLOADER_H

#include "runtime/Status.h"
#include "runtime/cpu/Executable.h"

#include <cstddef>
#include <memory>
#include <string>

namespace kiln::runtime::cpu {

// What a loader's disk cache did.
struct OrcKernelCacheStats {
  std::string directory; // "" when nothing is cached
  size_t hits = 0;       // objects read from the disk
  size_t misses = 0;     // kernels compiled (no file, or one not theirs)
  size_t written = 0;    // objects written
  size_t ahead = 0;      // of the misses, those prefetch() compiled ahead
};

// A loader for the host CPU; fails when LLVM cannot target the host.
// |stats|, when given, must outlive the loader; it counts what the cache
// did.
StatusOr<std::unique_ptr<KernelLoader>>
createOrcKernelLoader(OrcKernelCacheStats *stats = nullptr);

} // namespace kiln::runtime::cpu

#endif // KILN_RUNTIME_CPU_JIT_ORCKERNELLOADER_H
