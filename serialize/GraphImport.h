//===- GraphImport.h - .kiln graph file -> kiln module ------------*- C++ -*-===//
//
// Reads a graph file (serialize/schema/graph.fbs). The buffer is checked by
// the FlatBuffers verifier first, then every semantic rule (version, ids in
// range, enums known, acyclic, shapes and dtypes agree with each op's shape
// rule), and only then is a kiln module built and verified. Every error is
// reported through the context's diagnostic engine at a location that names
// the file and the node, and the result is null: never a crash.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_SERIALIZE_GRAPHIMPORT_H
#define KILN_SERIALIZE_GRAPHIMPORT_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/ADT/StringRef.h"

namespace kiln {

// Imports the graph file held in |bytes|; |filename| names it in locations
// and diagnostics. Returns null after emitting diagnostics on any error.
mlir::OwningOpRef<mlir::ModuleOp> importGraph(llvm::StringRef bytes,
                                              llvm::StringRef filename,
                                              mlir::MLIRContext *context);

// True when |bytes| starts like a graph file (its file identifier matches).
bool looksLikeGraphFile(llvm::StringRef bytes);

} // namespace kiln

#endif // KILN_SERIALIZE_GRAPHIMPORT_H
