//===- BitcodeCache.h - optimized CPU kernel bitcode kept on disk --*- C++ -*-===//
//
// The second half of a CPU kernel's compile, LLVM's -O3 (optimizeKernelIR
// in LowerToLLVM.h) and the bitcode a package carries, through Kiln's
// persistent cache, as NVRTC's cubins go through theirs
// (codegen/cuda/Nvrtc.h) and the runtime's object code through its own
// (runtime/cpu/jit/OrcKernelLoader.h):
//
//   $KILN_CACHE_DIR/cpu-bitcode/HASH (default ~/.cache/kiln/cpu-bitcode;
//   KILN_CACHE_DIR=off disables it)
//
// A file holds its whole key, compared in full on read: the host's triple,
// CPU and features (what -O3 optimizes for), LLVM's version, a hash of
// LowerToLLVM.cpp (Kiln's own rewrites around -O3, so that a Kiln whose
// rewrites changed reads none of an older one's entries) and the kernel's
// unoptimized bitcode; then the optimized bitcode and its checksum. HASH is
// FNV-1a of the key, so a collision is a miss. Another host, another LLVM,
// another Kiln or a damaged file is optimized again and rewritten. Files
// are written under a name unique to the writer, then renamed, so
// compilers on threads or in processes side by side may share the
// directory; a file that cannot be written is a miss next time, never an
// error.
//
// `kiln compile` of a model it compiled before (or of another model with
// some of the same kernels) then skips -O3 for those kernels: the package
// is the same byte for byte.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_CODEGEN_CPU_BITCODECACHE_H
#define KILN_CODEGEN_CPU_BITCODECACHE_H

#include "llvm/Support/Error.h"

#include <string>

namespace llvm {
class Module;
} // namespace llvm

namespace kiln {

struct OptimizedKernelBitcode {
  std::string bitcode;
  bool fromCache = false; // read from the cache, -O3 not run
};

// The bitcode of kernelIR module |module| after optimizeKernelIR, from the
// cache when a file there has its key; otherwise |module| is optimized in
// place, written as bitcode and the entry stored. On a hit |module| is left
// as it came.
llvm::Expected<OptimizedKernelBitcode>
optimizeKernelBitcode(llvm::Module &module);

} // namespace kiln

#endif // KILN_CODEGEN_CPU_BITCODECACHE_H
