//===- OnnxImportFuzzer.cpp - libFuzzer target for kiln import ------------===//
//
// Feeds arbitrary bytes to what `kiln import` runs on a file: the ONNX
// parser (serialize/OnnxModel.h) and, for every model it accepts, the
// importer (tools/kiln/lib/OnnxImport.h) with the default options. Besides
// crashes, hangs and AddressSanitizer reports, it checks one property: a
// model the importer accepts gives a module that verifies and a weights
// file that encodes (distinct names, each tensor's bytes its shape's).
// Any violation traps, so libFuzzer saves the input.
//
// Error messages are swallowed: malformed input is the normal case here.
// The context is rebuilt every kContextLifetime inputs so the attributes
// and types it uniques for random names and shapes do not grow without
// bound.
//
// Build and run: see tests/fuzz/README.md.
//
//===----------------------------------------------------------------------===//

#include "serialize/OnnxModel.h"
#include "tools/kiln/lib/ModuleLoader.h"
#include "tools/kiln/lib/OnnxImport.h"

#include "runtime/checkpoint/Safetensors.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <memory>
#include <string>

namespace {

constexpr unsigned kContextLifetime = 5000;

std::unique_ptr<mlir::MLIRContext> makeContext() {
  mlir::DialectRegistry registry;
  kiln::cli::registerKilnDialects(registry);
  auto context = std::make_unique<mlir::MLIRContext>(
      registry, mlir::MLIRContext::Threading::DISABLED);
  context->loadAllAvailableDialects();
  return context;
}

void fail(const char *what) {
  llvm::errs() << "property violated: " << what << "\n";
  __builtin_trap();
}

} // namespace

// As in GraphImportFuzzer.cpp: libMLIR's uninstrumented allocator carves
// slabs that our instrumented inline copy poisoned.
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
  std::string error;
  std::optional<kiln::onnx::Model> model = kiln::onnx::parseModel(
      std::string(reinterpret_cast<const char *>(data), size), error);
  if (!model)
    return 0;
  kiln::cli::OnnxImportOptions options;
  kiln::cli::OnnxImport imported;
  if (!kiln::cli::importOnnx(*model, "fuzz.onnx", options, context.get(),
                             imported, "kiln import", llvm::nulls()))
    return 0;
  if (!imported.module || mlir::failed(mlir::verify(*imported.module)))
    fail("an imported model does not verify");
  if (!kiln::runtime::encodeSafetensors(imported.weights).isOk())
    fail("an imported model's weights do not make a safetensors file");
  return 0;
}
