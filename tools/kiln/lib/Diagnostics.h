//===- Diagnostics.h - how the kiln CLI prints MLIR diagnostics ---*- C++ -*-===//
//
// One handler per command, installed on the command's MLIRContext. A
// diagnostic in an .mlir file prints as `FILE:LINE:COL: error: ...` with the
// source line and a caret (upstream's SourceMgrDiagnosticHandler). A
// diagnostic in a graph file has no line: it prints as
// `FILE: error: node 'NAME': ...`, the form kiln-translate uses, naming the
// node from the location's NameLoc (the importer gives every op
// NameLoc(node, FILE)). While a graph file is being imported, the importer's
// own messages already start with the node, tensor or "graph:" they are
// about (serialize/GraphImport.cpp), so no name is added then. Notes print
// the same way.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TOOLS_KILN_LIB_DIAGNOSTICS_H
#define KILN_TOOLS_KILN_LIB_DIAGNOSTICS_H

#include "mlir/IR/Diagnostics.h"
#include "llvm/Support/SourceMgr.h"

#include <string>

namespace kiln::cli {

namespace detail {
// Constructed before the handler base class that keeps a reference to it.
struct SourceMgrHolder {
  llvm::SourceMgr ownedSourceMgr;
};
} // namespace detail

class DiagnosticPrinter : private detail::SourceMgrHolder,
                          public mlir::SourceMgrDiagnosticHandler {
public:
  DiagnosticPrinter(mlir::MLIRContext *context, llvm::raw_ostream &os);

  // The source manager that .mlir inputs are loaded into, so their
  // diagnostics can show the offending line.
  llvm::SourceMgr &sourceMgr() { return ownedSourceMgr; }

  // The file a diagnostic is attributed to when its location names no file
  // (a graph file's node locations may carry only the node name).
  void setCurrentFile(llvm::StringRef path) { currentFile = path.str(); }

  // While set, messages are printed as they are, without a node name added
  // (the graph importer names the node itself). ModuleLoader sets it.
  void setImporting(bool importing) { this->importing = importing; }

  // Whether remarks (the passes' explanations: what was not fused, not
  // updated in place, ...) are printed; on by default. `kiln train` turns
  // them off: they belong to `kiln compile`.
  void setShowRemarks(bool show) { showRemarks = show; }

  // Number of errors printed so far.
  unsigned errorCount() const { return errors; }

private:
  mlir::LogicalResult handle(mlir::Diagnostic &diag);
  void printPlain(mlir::Location loc, const llvm::Twine &message,
                  mlir::DiagnosticSeverity severity);
  bool isTextLocation(mlir::Location loc);

  llvm::raw_ostream &out;
  std::string currentFile;
  bool showRemarks = true;
  bool importing = false;
  unsigned errors = 0;
};

} // namespace kiln::cli

#endif // KILN_TOOLS_KILN_LIB_DIAGNOSTICS_H
