//===- BufferReport.h - the buffer-assignment report ----------------------===//
//
// A readable summary of the plan kiln-plan-buffers wrote into a function,
// like XLA's buffer-assignment dump: the arena's size against the largest
// sum of simultaneously live bytes (the lower bound), the step's planned
// peak with its arguments, the in-place decisions, and the largest buffers
// named by their op and the graph nodes in its location.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_PASSES_BUFFERREPORT_H
#define KILN_PASSES_BUFFERREPORT_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/Support/raw_ostream.h"

namespace kiln {

/// Writes the buffer-assignment report of |func| to |os|, listing its
/// |largest| largest arena buffers. A function without a plan gets one line
/// that says so.
void writeBufferReport(mlir::func::FuncOp func, llvm::raw_ostream &os,
                       unsigned largest = 10);

} // namespace kiln

#endif // KILN_PASSES_BUFFERREPORT_H
