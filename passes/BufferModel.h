//===- BufferModel.h - the buffers of a function body, for planning -------===//
//
// What kiln-plan-buffers plans and kiln-schedule measures: the buffers a
// function body needs when its top-level ops (kernels) run in a given order.
// Each op result gets an arena buffer, except results that live in an
// argument's buffer: an update (kiln.updates = i) written over argument i
// when that is safe, and reshapes of arguments. A reshape is a view of its
// operand's buffer (planner::Buffer::mustAlias); an elementwise kernel may
// write a result over an operand of the same size that dies there
// (planner::Buffer::mayReuse).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_PASSES_BUFFERMODEL_H
#define KILN_PASSES_BUFFERMODEL_H

#include "passes/BufferLiveness.h"
#include "passes/BufferPlanner.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Support/LogicalResult.h"

#include <vector>

namespace kiln {

struct BufferModel {
  /// The arena buffers, in order of their first step.
  std::vector<planner::Buffer> buffers;
  /// The arena buffer of each op result that has one.
  llvm::DenseMap<mlir::Value, int64_t> bufferOf;
  /// Per op of the order, per result: the index of the argument whose
  /// buffer the result lives in, or -1.
  llvm::SmallVector<llvm::SmallVector<int64_t>> aliases;
  /// Bytes of all the function's arguments.
  int64_t argumentBytes = 0;
};

/// The buffers of |func|'s body (one block) with its ops in |liveness|'s
/// order, each arena buffer aligned to |alignment|. Fails when a value
/// cannot be sized. With |diagnose|, emits a remark on each update that
/// cannot be written in place, saying why, and an error before failing;
/// without, it is silent.
mlir::FailureOr<BufferModel> buildBufferModel(mlir::func::FuncOp func,
                                              const BlockLiveness &liveness,
                                              int64_t alignment, bool diagnose);

/// Whether |op| reads operand |operandIndex| only at the element it writes
/// of result |resultIndex|, so that the result may overwrite the operand.
bool readsElementwise(mlir::Operation *op, unsigned operandIndex,
                      unsigned resultIndex);

} // namespace kiln

#endif // KILN_PASSES_BUFFERMODEL_H
