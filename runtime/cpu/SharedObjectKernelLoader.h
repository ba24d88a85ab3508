//===- SharedObjectKernelLoader.h - kernels compiled ahead of time -*- C++ -*-===//
//
// The KernelLoader of a trainer `kiln pack` wrote: every kernel of its
// packages was compiled ahead of time into one shared library (the
// "kernel library"), each entry point under the name packedKernelSymbol()
// gives it, so loading needs neither LLVM nor a compiler. The library's
// bytes travel inside the trainer; they are handed to the dynamic loader
// through an anonymous memory file (memfd_create; a temporary file, removed
// at once, where that is missing), so nothing is left on disk.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_CPU_SHAREDOBJECTKERNELLOADER_H
#define KILN_RUNTIME_CPU_SHAREDOBJECTKERNELLOADER_H

#include "runtime/Status.h"
#include "runtime/cpu/Executable.h"

#include <memory>
#include <string>

namespace kiln::runtime::cpu {

// The kernel library's symbol for |kernel|: its entry point and code
// hashed (kernels with the same code share it, as the Executable's loads
// do).
std::string packedKernelSymbol(const PackageKernel &kernel);

// Loads the kernel library |image| (ELF bytes); |what| names it in errors.
StatusOr<std::unique_ptr<KernelLoader>>
createSharedObjectKernelLoader(const std::string &image, const std::string &what);

} // namespace kiln::runtime::cpu

#endif // KILN_RUNTIME_CPU_SHAREDOBJECTKERNELLOADER_H
