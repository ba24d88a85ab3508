//===- Diagnostics.cpp - how the kiln CLI prints MLIR diagnostics ---------===//
//
// Text inputs get upstream's caret display; everything else (graph files,
// modules built in memory by the model zoo) gets one line that names the file
// and the node.
//
//===----------------------------------------------------------------------===//

#include "tools/kiln/lib/Diagnostics.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Location.h"
#include "mlir/IR/MLIRContext.h"

namespace kiln::cli {

DiagnosticPrinter::DiagnosticPrinter(mlir::MLIRContext *context,
                                     llvm::raw_ostream &os)
    : mlir::SourceMgrDiagnosticHandler(ownedSourceMgr, context, os), out(os) {
  // The CLI's messages say what is wrong; a dump of the op in generic form
  // ("see current operation: ...") would only bury them.
  context->printOpOnDiagnostic(false);
  // Replaces the handler the base class registered.
  setHandler([this](mlir::Diagnostic &diag) { return handle(diag); });
}

bool DiagnosticPrinter::isTextLocation(mlir::Location loc) {
  auto fileLoc = loc->findInstanceOf<mlir::FileLineColLoc>();
  if (!fileLoc || fileLoc.getLine() == 0)
    return false;
  // Only files this command loaded as text: never let the base class open a
  // binary graph file to show a "source line".
  llvm::StringRef name = fileLoc.getFilename().getValue();
  for (unsigned i = 1, e = mgr.getNumBuffers(); i <= e; ++i)
    if (mgr.getMemoryBuffer(i)->getBufferIdentifier() == name)
      return true;
  return false;
}

static llvm::StringRef severityName(mlir::DiagnosticSeverity severity) {
  switch (severity) {
  case mlir::DiagnosticSeverity::Error:
    return "error";
  case mlir::DiagnosticSeverity::Warning:
    return "warning";
  case mlir::DiagnosticSeverity::Note:
    return "note";
  case mlir::DiagnosticSeverity::Remark:
    return "remark";
  }
  return "error";
}

void DiagnosticPrinter::printPlain(mlir::Location loc,
                                   const llvm::Twine &message,
                                   mlir::DiagnosticSeverity severity) {
  std::string file = currentFile;
  if (auto fileLoc = loc->findInstanceOf<mlir::FileLineColLoc>())
    file = fileLoc.getFilename().getValue().str();
  std::string node;
  if (auto nameLoc = loc->findInstanceOf<mlir::NameLoc>(); nameLoc && !importing)
    node = nameLoc.getName().getValue().str();

  if (!file.empty())
    out << file << ": ";
  out << severityName(severity) << ": ";
  if (!node.empty())
    out << "node '" << node << "': ";
  out << message << "\n";
}

mlir::LogicalResult DiagnosticPrinter::handle(mlir::Diagnostic &diag) {
  if (diag.getSeverity() == mlir::DiagnosticSeverity::Error)
    ++errors;
  if (diag.getSeverity() == mlir::DiagnosticSeverity::Remark && !showRemarks)
    return mlir::success();
  if (isTextLocation(diag.getLocation())) {
    emitDiagnostic(diag);
    return mlir::success();
  }
  printPlain(diag.getLocation(), diag.str(), diag.getSeverity());
  for (mlir::Diagnostic &note : diag.getNotes()) {
    if (isTextLocation(note.getLocation()))
      emitDiagnostic(note.getLocation(), note.str(), note.getSeverity());
    else
      printPlain(note.getLocation(), note.str(), note.getSeverity());
  }
  return mlir::success();
}

} // namespace kiln::cli
