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
// This library (KilnRuntimeCpuJit) is the only part of the runtime that
// links LLVM; its header needs no LLVM include. The loader owns the compiled
// code: keep it alive as long as any Executable that loaded kernels from it.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_CPU_JIT_ORCKERNELLOADER_H
#define KILN_RUNTIME_CPU_JIT_ORCKERNELLOADER_H

#include "runtime/Status.h"
#include "runtime/cpu/Executable.h"

#include <memory>

namespace kiln::runtime::cpu {

// A loader for the host CPU; fails when LLVM cannot target the host.
StatusOr<std::unique_ptr<KernelLoader>> createOrcKernelLoader();

} // namespace kiln::runtime::cpu

#endif // KILN_RUNTIME_CPU_JIT_ORCKERNELLOADER_H
