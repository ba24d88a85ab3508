//===- Bf16Libcall.h - __truncsfbf2 for JIT-compiled kernels --------------===//
//
// LLVM compiles a conversion of f32 to bf16 on x86-64 without AVX512-BF16
// (and a bf16 value it holds as an f32, such as a bf16 function argument)
// to a call of __truncsfbf2, a compiler-rt/libgcc routine that GCC 12's
// libgcc lacks, so a kernel JIT-compiled in this process could not find it.
// Kiln's kernels keep bf16 values as their bits (codegen/cpu/LowerToLLVM.cpp,
// bf16AsBits), so this is a fallback for what that misses: the CPU JITs
// (the compiler's and the runtime's ORC kernel loader) define the symbol
// as kiln_truncsfbf2. Header-only: the runtime must not link the compiler.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_CPU_JIT_BF16LIBCALL_H
#define KILN_RUNTIME_CPU_JIT_BF16LIBCALL_H

#include "runtime/Half.h"

#include "llvm/ExecutionEngine/Orc/Core.h"
#include "llvm/ExecutionEngine/Orc/Mangling.h"

namespace kiln::runtime::cpu {

// Whether this host's JIT-compiled code calls __truncsfbf2 with the ABI
// kiln_truncsfbf2 implements (x86-64: the f32 in xmm0, the bf16 returned
// in xmm0's low 16 bits).
#if defined(__x86_64__)
constexpr bool kHasBf16Libcall = true;
#else
constexpr bool kHasBf16Libcall = false;
#endif

// f32 -> bf16 as runtime/Half.h's floatToBf16 (round to nearest even, a
// NaN kept quiet), returned as x86-64 returns a bf16: in the low 16 bits
// of xmm0, here the bits of the returned float.
inline float kiln_truncsfbf2(float x) {
  return bitsFloat(floatToBf16(x));
}

// The symbols a CPU JIT defines for its kernels: __truncsfbf2 as
// kiln_truncsfbf2 where kHasBf16Libcall, else none.
inline llvm::orc::SymbolMap bf16Libcalls(llvm::orc::MangleAndInterner intern) {
  llvm::orc::SymbolMap libcalls;
  if (kHasBf16Libcall)
    libcalls[intern("__truncsfbf2")] = {
        llvm::orc::ExecutorAddr::fromPtr(&kiln_truncsfbf2),
        llvm::JITSymbolFlags::Exported | llvm::JITSymbolFlags::Callable};
  return libcalls;
}

} // namespace kiln::runtime::cpu

#endif // KILN_RUNTIME_CPU_JIT_BF16LIBCALL_H
