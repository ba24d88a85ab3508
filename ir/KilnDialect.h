//===- KilnDialect.h - the kiln dialect ----------------------------*- C++ -*-===//
//
// The dialect, its enums and attributes. Include ir/KilnOps.h for the ops.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_IR_KILNDIALECT_H
#define KILN_IR_KILNDIALECT_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"

#include <string>

#include "ir/KilnDialect.h.inc"
#include "ir/KilnEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "ir/KilnAttrs.h.inc"

namespace kiln {
// Why |type|, a statically shaped tensor of numbers, breaks the limits of a
// kiln tensor (ir/ShapeRules.h, shape::checkLimits); empty when it keeps
// them or is another type.
std::string tensorLimitsError(mlir::Type type);
// Checks every operand and result of |op| with tensorLimitsError.
mlir::LogicalResult verifyTensorLimits(mlir::Operation *op);

// Kiln_TensorsWithinLimits: verifyTensorLimits, for every kiln op.
template <typename ConcreteType>
class TensorsWithinLimits
    : public mlir::OpTrait::TraitBase<ConcreteType, TensorsWithinLimits> {
public:
  static mlir::LogicalResult verifyTrait(mlir::Operation *op) {
    return verifyTensorLimits(op);
  }
};
} // namespace kiln

#endif // KILN_IR_KILNDIALECT_H
