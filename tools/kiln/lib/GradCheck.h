//===- GradCheck.h - `kiln gradcheck` ------------------------------*- C++ -*-===//
//
// Checks every parameter gradient that kiln-autodiff builds against central
// finite differences. The step is rewritten to f64
// (kiln-convert-floats-to-f64) and run on the reference interpreter with
// random inputs and parameters, so both sides are accurate to ~1e-10 and
// any real error in a gradient rule shows.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TOOLS_KILN_LIB_GRADCHECK_H
#define KILN_TOOLS_KILN_LIB_GRADCHECK_H

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::cli {

struct GradCheckOptions {
  uint64_t seed = 0;
  int64_t samples = 8;     // elements checked per parameter
  double tolerance = 1e-6; // largest accepted relative error
};

struct ParameterCheck {
  std::string name;
  int64_t checked = 0;
  double maxRelativeError = 0;
};

// Runs the check on (a clone of) |module|. Emits diagnostics and fails when
// the step cannot be built or run.
mlir::FailureOr<std::vector<ParameterCheck>>
gradCheck(mlir::ModuleOp module, const GradCheckOptions &options);

} // namespace kiln::cli

#endif // KILN_TOOLS_KILN_LIB_GRADCHECK_H
