//===- Inspect.cpp - `kiln inspect`: summarize a model --------------------===//
//
// `kiln inspect FILE [--dot]` loads a model (graph file or .mlir), and prints
// its summary (tools/kiln/lib/Summary.h) or, with --dot, a Graphviz graph of
// its ops.
//
//===----------------------------------------------------------------------===//

#include "tools/kiln/lib/Driver.h"

#include "tools/kiln/lib/Diagnostics.h"
#include "tools/kiln/lib/Flags.h"
#include "tools/kiln/lib/ModuleLoader.h"
#include "tools/kiln/lib/Summary.h"

#include "mlir/IR/MLIRContext.h"

namespace kiln::cli {

int runInspect(llvm::ArrayRef<std::string> args, llvm::raw_ostream &outs,
               llvm::raw_ostream &errs) {
  std::string input;
  bool dot = false;
  FlagParser parser(
      "kiln inspect", "FILE [--dot]",
      "Prints a model's inputs and outputs (name, role, shape, dtype), its\n"
      "parameters (count and bytes), the FLOPs of one forward step (summed\n"
      "from every op's cost) and a histogram of its ops.");
  parser.addPositional("FILE", &input, "a graph file (.kiln) or MLIR text (.mlir)");
  parser.addSwitch("dot", &dot, "print a Graphviz graph of the ops instead");
  switch (parser.parse(args, outs, errs)) {
  case ParseResult::help:
    return kExitOk;
  case ParseResult::usageError:
    return kExitUsage;
  case ParseResult::ok:
    break;
  }

  mlir::DialectRegistry registry;
  registerKilnDialects(registry);
  mlir::MLIRContext context(registry);
  DiagnosticPrinter diagnostics(&context, errs);

  mlir::OwningOpRef<mlir::ModuleOp> module =
      loadModule(input, &context, diagnostics);
  if (!module)
    return kExitError;

  ModelSummary summary = summarizeModule(*module);
  if (summary.functions.empty()) {
    mlir::emitError(mlir::FileLineColLoc::get(&context, input, 0, 0))
        << "expected a public func.func (the model), found none";
    return kExitError;
  }
  if (dot)
    printDot(*module, outs);
  else
    printSummary(summary, input, outs);
  return kExitOk;
}

} // namespace kiln::cli
