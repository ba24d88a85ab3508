//===- ModuleLoader.h - read and write model files ----------------*- C++ -*-===//
//
// Every kiln command reads its input through loadModule and writes through
// writeModule, so the file formats are decided in one place:
//   - `.mlir`         MLIR text (parsed and verified by mlir::parseSourceFile);
//   - anything else   a graph file (serialize/GraphImport.h), whose importer
//                     verifies the bytes before it builds anything.
// When writing, `.mlir` and `-` (stdout) get MLIR text and any other path gets
// a graph file (serialize/GraphExport.h).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TOOLS_KILN_LIB_MODULELOADER_H
#define KILN_TOOLS_KILN_LIB_MODULELOADER_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/OwningOpRef.h"

namespace kiln::cli {

class DiagnosticPrinter;

// The dialects a kiln model file may use.
void registerKilnDialects(mlir::DialectRegistry &registry);

// True when |path| is written or read as MLIR text.
bool isTextPath(llvm::StringRef path);

// Reads, parses and verifies the model at |path|. Text inputs are added to
// |diagnostics|' source manager so that diagnostics can show their lines, and
// |path| becomes its current file. On any error
// (missing or unreadable file, bad syntax, a malformed graph file, a verifier
// failure) emits diagnostics that name |path| and returns null.
mlir::OwningOpRef<mlir::ModuleOp> loadModule(llvm::StringRef path,
                                             mlir::MLIRContext *context,
                                             DiagnosticPrinter &diagnostics);

// Writes |module| to |path|, choosing the format by the path (see above).
// Emits a diagnostic naming |path| when it cannot be written.
mlir::LogicalResult writeModule(mlir::ModuleOp module, llvm::StringRef path);

// Writes |module| to |path| as MLIR text whatever |path| is called.
mlir::LogicalResult writeModuleText(mlir::ModuleOp module, llvm::StringRef path);

// Writes |text| to |path| (`-` is stdout).
mlir::LogicalResult writeTextFile(mlir::MLIRContext *context,
                                  llvm::StringRef path, llvm::StringRef text);

} // namespace kiln::cli

#endif // KILN_TOOLS_KILN_LIB_MODULELOADER_H
