//===- BitcodeCache.cpp - optimized CPU kernel bitcode kept on disk ------===//
//
// See BitcodeCache.h. KILN_CPU_REWRITES_HASH (codegen/CMakeLists.txt, in
// the generated CpuRewritesHash.h) is the SHA-256 of LowerToLLVM.cpp at
// configure time; CMake configures again when that file changes.
//
//===----------------------------------------------------------------------===//

#include "codegen/cpu/BitcodeCache.h"

#include "CpuRewritesHash.h"
#include "codegen/cpu/LowerToLLVM.h"
#include "runtime/Files.h"

#include "llvm/Bitcode/BitcodeWriter.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/raw_ostream.h"

#include <mutex>

namespace kiln {

namespace {

constexpr const char *kMagic = "kiln-cpu-bitcode 1\n";

std::string bitcodeOf(const llvm::Module &module) {
  std::string bytes;
  llvm::raw_string_ostream os(bytes);
  llvm::WriteBitcodeToFile(module, os);
  os.flush();
  return bytes;
}

// Everything optimizeKernelIR's result depends on besides the module: ""
// when the host cannot be described (nothing is cached then).
const std::string &identity() {
  static std::once_flag once;
  static std::string text;
  std::call_once(once, [] {
    auto machine = llvm::orc::JITTargetMachineBuilder::detectHost();
    if (!machine) {
      llvm::consumeError(machine.takeError());
      return;
    }
    text = "triple=" + machine->getTargetTriple().str() +
           " cpu=" + machine->getCPU() +
           " features=" + machine->getFeatures().getString() +
           " opt=3 llvm=" LLVM_VERSION_STRING
           " rewrites=" KILN_CPU_REWRITES_HASH;
  });
  return text;
}

} // namespace

llvm::Expected<OptimizedKernelBitcode>
optimizeKernelBitcode(llvm::Module &module) {
  OptimizedKernelBitcode result;
  std::string directory = runtime::kilnCacheDirectory("cpu-bitcode");
  const std::string &key = identity();
  std::string input, path;
  if (!directory.empty() && !key.empty()) {
    input = bitcodeOf(module);
    path = directory + "/" + runtime::fnv1aHex(key + "\n" + input);
    if (runtime::readKeyedCacheEntry(path, kMagic, key, input,
                                     result.bitcode)) {
      result.fromCache = true;
      return result;
    }
  }
  if (llvm::Error error = optimizeKernelIR(module))
    return std::move(error);
  result.bitcode = bitcodeOf(module);
  // The cache is an optimization: an entry that cannot be written is a
  // miss next time, never an error.
  if (!path.empty())
    (void)runtime::writeFileAtomically(
        path, runtime::keyedCacheEntry(kMagic, key, input, result.bitcode));
  return result;
}

} // namespace kiln
