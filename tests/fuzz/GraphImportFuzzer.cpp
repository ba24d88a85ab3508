//===- GraphImportFuzzer.cpp - libFuzzer target for importGraph -----------===//
//
// Feeds arbitrary bytes to kiln::importGraph. Besides crashes, hangs and
// AddressSanitizer reports, it checks one property of every input the
// importer accepts: the module verifies, exports, and the exported file
// imports again into a module that prints the same (the round trip is
// exact). Any violation traps, so libFuzzer saves the input.
//
// Diagnostics are swallowed: malformed input is the normal case here. The
// context is rebuilt every kContextLifetime inputs so the attributes and
// types it uniques for random names and shapes do not grow without bound.
//
// Build and run: see tests/fuzz/README.md.
//
//===----------------------------------------------------------------------===//

#include "ir/KilnDialect.h"
#include "serialize/GraphExport.h"
#include "serialize/GraphImport.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace {

constexpr unsigned kContextLifetime = 20000;

std::unique_ptr<mlir::MLIRContext> makeContext() {
  mlir::DialectRegistry registry;
  registry.insert<kiln::KilnDialect, mlir::func::FuncDialect>();
  auto context = std::make_unique<mlir::MLIRContext>(
      registry, mlir::MLIRContext::Threading::DISABLED);
  context->loadAllAvailableDialects();
  return context;
}

std::string print(mlir::ModuleOp module) {
  std::string text;
  llvm::raw_string_ostream os(text);
  module.print(os);
  return text;
}

void fail(const char *what) {
  llvm::errs() << "property violated: " << what << "\n";
  __builtin_trap();
}

} // namespace

// LLVM's BumpPtrAllocator poisons the free part of its slabs when built
// with AddressSanitizer. The kiln sources here are instrumented but libMLIR
// is not, so an allocator slab poisoned by our inline copy of the allocator
// is then carved up by libMLIR's uninstrumented copy, which never unpoisons:
// every later read of such an attribute is a false "use-after-poison".
// Ignoring manual poisoning keeps every real heap, stack and global check.
extern "C" const char *__asan_default_options() {
  return "allow_user_poisoning=0";
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static std::unique_ptr<mlir::MLIRContext> context;
  static unsigned uses = 0;
  if (!context || ++uses == kContextLifetime) {
    context.reset();
    context = makeContext();
    uses = 0;
  }
  mlir::ScopedDiagnosticHandler quiet(context.get(),
                                      [](mlir::Diagnostic &) { return mlir::success(); });

  llvm::StringRef bytes(reinterpret_cast<const char *>(data), size);
  mlir::OwningOpRef<mlir::ModuleOp> module =
      kiln::importGraph(bytes, "fuzz.kiln", context.get());
  if (!module)
    return 0;

  if (mlir::failed(mlir::verify(*module)))
    fail("an imported module does not verify");
  std::vector<uint8_t> exported;
  if (mlir::failed(kiln::exportGraph(*module, exported)))
    fail("an imported module does not export");
  llvm::StringRef again(reinterpret_cast<const char *>(exported.data()),
                        exported.size());
  mlir::OwningOpRef<mlir::ModuleOp> reimported =
      kiln::importGraph(again, "fuzz.kiln", context.get());
  if (!reimported)
    fail("an exported graph does not import");
  if (print(*module) != print(*reimported))
    fail("graph -> MLIR -> graph -> MLIR is not exact");
  return 0;
}
