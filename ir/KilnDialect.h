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

#include "ir/KilnDialect.h.inc"
#include "ir/KilnEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "ir/KilnAttrs.h.inc"

#endif // KILN_IR_KILNDIALECT_H
