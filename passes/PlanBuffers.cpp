//===- PlanBuffers.cpp - in-place decisions and arena offsets -------------===//
//
// Every top-level op of a function body is one kernel writing its results'
// buffers. Over the current op order (kiln-schedule's), passes/BufferModel.h
// decides which results live in an argument's buffer (in-place updates,
// reshapes of arguments; a remark says why an update could not be) and which
// may write over a dying operand; the rest get offsets in one arena from
// passes/BufferPlanner.h, whose independent checker must accept them, or the
// pass fails. The plan is written into the IR as attributes (see
// Passes.td), which the buffer-assignment report (passes/BufferReport.h)
// and later stages read.
//
//===----------------------------------------------------------------------===//

#include "ir/KilnOps.h"
#include "passes/BufferModel.h"
#include "passes/BufferReport.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"

#define DEBUG_TYPE "kiln-plan-buffers"

namespace kiln {
#define GEN_PASS_DEF_KILNPLANBUFFERS
#include "passes/Passes.h.inc"

namespace {

using mlir::Value;

struct PlanBuffersPass : impl::KilnPlanBuffersBase<PlanBuffersPass> {
  using KilnPlanBuffersBase::KilnPlanBuffersBase;

  void runOnOperation() override {
    int64_t bytes = alignment;
    if (bytes <= 0 || (bytes & (bytes - 1)) != 0) {
      getOperation().emitError()
          << "kiln-plan-buffers: alignment must be a power of two, but is "
          << bytes;
      return signalPassFailure();
    }
    for (auto func : getOperation().getOps<mlir::func::FuncOp>()) {
      if (func.isExternal())
        continue;
      if (mlir::failed(planFunction(func)))
        return signalPassFailure();
      if (report)
        writeBufferReport(func, llvm::errs());
    }
  }

  mlir::LogicalResult planFunction(mlir::func::FuncOp func);
};

mlir::LogicalResult PlanBuffersPass::planFunction(mlir::func::FuncOp func) {
  if (!func.getBody().hasOneBlock())
    return func.emitError() << "kiln-plan-buffers expects the body of @"
                            << func.getName() << " to be one block, but it has "
                            << func.getBody().getBlocks().size();
  BlockLiveness liveness(func.front());
  mlir::FailureOr<BufferModel> model =
      buildBufferModel(func, liveness, alignment, /*diagnose=*/true);
  if (mlir::failed(model))
    return mlir::failure();
  std::vector<planner::Buffer> &buffers = model->buffers;
  llvm::DenseMap<Value, int64_t> &bufferOf = model->bufferOf;
  int64_t argumentBytes = model->argumentBytes;

  planner::Plan plan;
  std::string error;
  if (!planner::planBuffers(buffers, plan, error))
    return func.emitError() << "internal error: kiln-plan-buffers built an "
                               "invalid planner input for @"
                            << func.getName() << ": " << error;
  planner::CheckResult check =
      planner::checkNoOverlap(buffers, plan.offsets, plan.arenaBytes);
  if (!check.ok)
    return func.emitError()
           << "internal error: the buffer plan of @" << func.getName()
           << " failed the overlap check: " << check.message;

  mlir::Builder builder(func.getContext());
  for (auto [op, opAliases] : llvm::zip(liveness.getOps(), model->aliases)) {
    llvm::SmallVector<int64_t> offsets;
    bool anyAlias = false;
    for (auto [result, alias] : llvm::zip(op->getResults(), opAliases)) {
      anyAlias |= alias >= 0;
      offsets.push_back(alias >= 0 ? -1
                                   : plan.offsets[bufferOf.lookup(result)]);
    }
    op->setAttr(KilnDialect::kBufferOffsetsAttrName,
                builder.getDenseI64ArrayAttr(offsets));
    if (anyAlias)
      op->setAttr(KilnDialect::kAliasesAttrName,
                  builder.getDenseI64ArrayAttr(opAliases));
    else
      op->removeAttr(KilnDialect::kAliasesAttrName);
  }
  func->setAttr(KilnDialect::kArenaBytesAttrName,
                builder.getI64IntegerAttr(plan.arenaBytes));
  func->setAttr(KilnDialect::kPeakBytesAttrName,
                builder.getI64IntegerAttr(argumentBytes + plan.arenaBytes));
  func->setAttr(
      KilnDialect::kLowerBoundBytesAttrName,
      builder.getI64IntegerAttr(argumentBytes + planner::lowerBound(buffers)));
  return mlir::success();
}

} // namespace
} // namespace kiln
