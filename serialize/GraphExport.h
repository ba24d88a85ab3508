//===- GraphExport.h - kiln module -> .kiln graph file ------------*- C++ -*-===//
//
// Writes a verified kiln module as a graph file. The module holds one public
// func.func (the model); every op must be a kiln op the graph format knows,
// else an error names the op and nothing is written.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_SERIALIZE_GRAPHEXPORT_H
#define KILN_SERIALIZE_GRAPHEXPORT_H

#include "mlir/IR/BuiltinOps.h"

#include <cstdint>
#include <vector>

namespace kiln {

// Serializes |module| into |bytes|. Emits diagnostics and fails on an op or
// attribute the format cannot hold.
mlir::LogicalResult exportGraph(mlir::ModuleOp module,
                                std::vector<uint8_t> &bytes);

} // namespace kiln

#endif // KILN_SERIALIZE_GRAPHEXPORT_H
