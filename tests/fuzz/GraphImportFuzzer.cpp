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

#include "tests/fuzz/FuzzSupport.h"

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

void registerDialects(mlir::DialectRegistry &registry) {
  registry.insert<kiln::KilnDialect, mlir::func::FuncDialect>();
}

std::string print(mlir::ModuleOp module) {
  std::string text;
  llvm::raw_string_ostream os(text);
  module.print(os);
  return text;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  mlir::MLIRContext *context =
      kiln::fuzz::contextFor(kContextLifetime, registerDialects);
  mlir::ScopedDiagnosticHandler quiet(
      context, [](mlir::Diagnostic &) { return mlir::success(); });

  llvm::StringRef bytes(reinterpret_cast<const char *>(data), size);
  mlir::OwningOpRef<mlir::ModuleOp> module =
      kiln::importGraph(bytes, "fuzz.kiln", context);
  if (!module)
    return 0;

  if (mlir::failed(mlir::verify(*module)))
    kiln::fuzz::fail("an imported module does not verify");
  std::vector<uint8_t> exported;
  if (mlir::failed(kiln::exportGraph(*module, exported)))
    kiln::fuzz::fail("an imported module does not export");
  llvm::StringRef again(reinterpret_cast<const char *>(exported.data()),
                        exported.size());
  mlir::OwningOpRef<mlir::ModuleOp> reimported =
      kiln::importGraph(again, "fuzz.kiln", context);
  if (!reimported)
    kiln::fuzz::fail("an exported graph does not import");
  if (print(*module) != print(*reimported))
    kiln::fuzz::fail("graph -> MLIR -> graph -> MLIR is not exact");
  return 0;
}
