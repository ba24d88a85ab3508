//===- GraphOps.h - graph file op codes and attribute tables ------*- C++ -*-===//
//
// Everything the graph file knows about individual kiln ops: which op an
// OpCode stands for, which attribute table its nodes carry, and how that
// table maps to the op's attributes in both directions. The importer and the
// exporter (GraphImport.cpp, GraphExport.cpp) only handle the graph around
// the ops and go through these functions for anything op-specific.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_SERIALIZE_GRAPHOPS_H
#define KILN_SERIALIZE_GRAPHOPS_H

#include "serialize/GraphSchema.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Operation.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/StringRef.h"

#include <vector>

namespace kiln::graph {

// The registered op name ("kiln.add") for |code|; empty for an unknown code.
llvm::StringRef opNameOf(fbs::OpCode code);

// The attribute table nodes with |code| carry (Attrs::NONE for ops without
// attributes). Only meaningful for a known code.
fbs::Attrs attrsTableOf(fbs::OpCode code);

// Whether a node with |code| may also carry no attribute table (its
// attributes then take their defaults): ScatterAdd, whose ScatterAttrs came
// in format 1.7.
bool attrsTableOptional(fbs::OpCode code);

// Every op code the format defines, in numeric order.
std::vector<fbs::OpCode> allOpCodes();

// Sets the attributes of |op| (created from a node with |code|, its operands
// and result types already in place) from |node|'s attribute table, whose
// type the caller has checked against attrsTableOf(code). |error| starts a
// diagnostic that names the node.
mlir::LogicalResult
importNodeAttrs(fbs::OpCode code, const fbs::Node &node, mlir::Operation *op,
                llvm::function_ref<mlir::InFlightDiagnostic()> error);

struct ExportedOp {
  fbs::OpCode code;
  fbs::Attrs attrsType;
  flatbuffers::Offset<void> attrs; // null for Attrs::NONE
};

// The op code and serialized attribute table of |op|. Fails, with an error at
// |op|, when the graph format cannot hold it (a non-kiln op, kiln.fusion, or
// an attribute value the format has no room for).
mlir::FailureOr<ExportedOp> exportOp(mlir::Operation *op,
                                     flatbuffers::FlatBufferBuilder &fbb);

} // namespace kiln::graph

#endif // KILN_SERIALIZE_GRAPHOPS_H
