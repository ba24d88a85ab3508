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

#include "tests/fuzz/FuzzSupport.h"

#include "serialize/OnnxModel.h"
#include "tools/kiln/lib/ModuleLoader.h"
#include "tools/kiln/lib/OnnxImport.h"

#include "runtime/checkpoint/Safetensors.h"

#include "mlir/IR/Verifier.h"

#include <cstdint>
#include <string>

namespace {
constexpr unsigned kContextLifetime = 5000;
} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  mlir::MLIRContext *context =
      kiln::fuzz::contextFor(kContextLifetime, kiln::cli::registerKilnDialects);
  std::string error;
  std::optional<kiln::onnx::Model> model = kiln::onnx::parseModel(
      std::string(reinterpret_cast<const char *>(data), size), error);
  if (!model)
    return 0;
  kiln::cli::OnnxImportOptions options;
  kiln::cli::OnnxImport imported;
  if (!kiln::cli::importOnnx(*model, "fuzz.onnx", options, context, imported,
                             "kiln import", llvm::nulls()))
    return 0;
  if (!imported.module || mlir::failed(mlir::verify(*imported.module)))
    kiln::fuzz::fail("an imported model does not verify");
  if (!kiln::runtime::encodeSafetensors(imported.weights).isOk())
    kiln::fuzz::fail(
        "an imported model's weights do not make a safetensors file");
  return 0;
}
