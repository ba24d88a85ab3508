//===- ScalarSemantics.h - elementwise ops as scalar arith/math ----*- C++ -*-===//
//
// Helpers around kiln::ScalarSemantics (ir/KilnInterfaces.td): the compute
// type of an element type, and building an op's computation on scalars of
// the stored element types (widen, compute, round back), which is what the
// interpreter and both backends need.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_IR_SCALARSEMANTICS_H
#define KILN_IR_SCALARSEMANTICS_H

#include "ir/KilnOps.h"

namespace kiln {

// f16 and bf16 compute in f32; every other element type computes as itself.
mlir::Type computeType(mlir::Type elementType);

// Converts scalar |value| to |to| (float/int widening or narrowing, int to
// float and back with C semantics: float -> int truncates toward zero, any
// nonzero -> i1 true).
mlir::Value convertScalar(mlir::OpBuilder &b, mlir::Location loc,
                          mlir::Value value, mlir::Type to);

// Builds |op|'s computation from scalars of the operands' element types and
// returns a scalar of the result's element type.
mlir::Value buildStoredScalar(ScalarSemantics op, mlir::OpBuilder &b,
                              mlir::Location loc, mlir::ValueRange operands);

} // namespace kiln

#endif // KILN_IR_SCALARSEMANTICS_H
