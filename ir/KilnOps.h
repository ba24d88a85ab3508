//===- KilnOps.h - kiln operations --------------------------------*- C++ -*-===//

#ifndef KILN_IR_KILNOPS_H
#define KILN_IR_KILNOPS_H

#include "ir/KilnDialect.h"

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/ControlFlowInterfaces.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "ir/HostTensor.h"
#include "ir/KilnInterfaces.h.inc"

#define GET_OP_CLASSES
#include "ir/KilnOps.h.inc"

namespace kiln {
// The element type of kiln.attention's lse result for operands of element
// type |element|: f64 for f64, f32 otherwise.
mlir::Type attentionLseElementType(mlir::Type element);
} // namespace kiln

#endif // KILN_IR_KILNOPS_H
