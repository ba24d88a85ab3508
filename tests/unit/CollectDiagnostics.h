//===- CollectDiagnostics.h - MLIR diagnostics into a string for tests -*- C++ -*-===//
//
// The test fixtures that run passes or compile kernels (codegen's
// KernelTestSupport.h, passes' PassTestSupport.h) keep their context's
// diagnostics as text, one "LOCATION: message" line each, to print when an
// expectation fails.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TESTS_UNIT_COLLECTDIAGNOSTICS_H
#define KILN_TESTS_UNIT_COLLECTDIAGNOSTICS_H

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/raw_ostream.h"

#include <memory>
#include <string>

namespace kiln::test {

// Appends every diagnostic of |context| to |into| while the handler lives.
inline std::unique_ptr<mlir::ScopedDiagnosticHandler>
collectDiagnostics(mlir::MLIRContext &context, std::string &into) {
  return std::make_unique<mlir::ScopedDiagnosticHandler>(
      &context, [&into](mlir::Diagnostic &d) {
        std::string text;
        llvm::raw_string_ostream os(text);
        os << d.getLocation() << ": " << d;
        into += os.str() + "\n";
        return mlir::success();
      });
}

} // namespace kiln::test

#endif // KILN_TESTS_UNIT_COLLECTDIAGNOSTICS_H
