//===- FuzzSupport.h - what the libFuzzer targets share ---------*- C++ -*-===//
//
// Included by exactly one source of each fuzzer (it defines
// __asan_default_options): a property failure that libFuzzer saves, and an
// MLIR context rebuilt every |lifetime| inputs so the attributes and types
// it uniques for random names and shapes do not grow without bound.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TESTS_FUZZ_FUZZSUPPORT_H
#define KILN_TESTS_FUZZ_FUZZSUPPORT_H

#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/Support/raw_ostream.h"

#include <memory>

// LLVM's BumpPtrAllocator poisons the free part of its slabs when built
// with AddressSanitizer. The kiln sources in a fuzzer are instrumented but
// libMLIR is not, so an allocator slab poisoned by our inline copy of the
// allocator is then carved up by libMLIR's uninstrumented copy, which never
// unpoisons: every later read of such an attribute is a false
// "use-after-poison". Ignoring manual poisoning keeps every real heap,
// stack and global check.
extern "C" const char *__asan_default_options() {
  return "allow_user_poisoning=0";
}

namespace kiln::fuzz {

// Reports a violated property and traps, so libFuzzer saves the input.
[[noreturn]] inline void fail(const char *what) {
  llvm::errs() << "property violated: " << what << "\n";
  __builtin_trap();
}

// The fuzzer's context: made by |make| on first use and again every
// |lifetime| inputs (each call is one input).
inline mlir::MLIRContext *
contextFor(unsigned lifetime,
           llvm::function_ref<void(mlir::DialectRegistry &)> registerDialects) {
  static std::unique_ptr<mlir::MLIRContext> context;
  static unsigned uses = 0;
  if (!context || ++uses == lifetime) {
    context.reset();
    mlir::DialectRegistry registry;
    registerDialects(registry);
    context = std::make_unique<mlir::MLIRContext>(
        registry, mlir::MLIRContext::Threading::DISABLED);
    context->loadAllAvailableDialects();
    uses = 0;
  }
  return context.get();
}

} // namespace kiln::fuzz

#endif // KILN_TESTS_FUZZ_FUZZSUPPORT_H
