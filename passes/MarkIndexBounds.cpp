//===- MarkIndexBounds.cpp - the bounds integer data is read under --------===//
//
// A token id indexes an embedding table's rows, a label a cross-entropy's
// classes. The generated kernels clamp an index they cannot use (memory
// safe, but silently the wrong row), so the runtime checks data against the
// bound instead, when it opens the data. That bound is a fact of the graph
// as written, before fusion hides the uses; this pass records it on the
// argument (kiln.index_bound), where every later pass keeps it and the
// package builder finds it.
//
//===----------------------------------------------------------------------===//

#include "ir/KilnOps.h"
#include "passes/Passes.h"

#include "llvm/ADT/SmallPtrSet.h"

#define DEBUG_TYPE "kiln-mark-index-bounds"

namespace kiln {
#define GEN_PASS_DEF_KILNMARKINDEXBOUNDS
#include "passes/Passes.h.inc"

std::optional<int64_t> indexBound(mlir::func::FuncOp func, unsigned argIndex) {
  llvm::SmallVector<mlir::Value> worklist{func.getArgument(argIndex)};
  llvm::SmallPtrSet<mlir::Operation *, 8> seen;
  std::optional<int64_t> bound;
  auto bind = [&](int64_t rows) { bound = bound ? std::min(*bound, rows) : rows; };
  while (!worklist.empty()) {
    mlir::Value v = worklist.pop_back_val();
    for (mlir::OpOperand &use : v.getUses()) {
      mlir::Operation *user = use.getOwner();
      if (!seen.insert(user).second)
        continue;
      if (auto gather = mlir::dyn_cast<GatherOp>(user)) {
        if (use.getOperandNumber() == 1)
          bind(gather.getTable().getType().getDimSize(0));
      } else if (auto scatter = mlir::dyn_cast<ScatterAddOp>(user)) {
        if (use.getOperandNumber() == 1)
          bind(scatter.getOperand().getType().getDimSize(0));
      } else if (auto xent = mlir::dyn_cast<SoftmaxCrossEntropyOp>(user)) {
        if (use.getOperandNumber() == 1)
          bind(xent.getLogits().getType().getDimSize(1));
      } else if (mlir::isa<ReshapeOp, TransposeOp, BroadcastInDimOp, ConvertOp,
                           SliceOp, ConcatenateOp>(user)) {
        worklist.push_back(user->getResult(0));
      }
    }
  }
  return bound;
}

std::optional<int64_t> argumentIndexBound(mlir::func::FuncOp func,
                                          unsigned argIndex) {
  std::optional<int64_t> bound = indexBound(func, argIndex);
  // A zero-row table bounds nothing a value could take.
  if (bound && *bound < 1)
    bound.reset();
  if (auto given = func.getArgAttrOfType<mlir::IntegerAttr>(
          argIndex, KilnDialect::kIndexBoundAttrName))
    bound = bound ? std::min(*bound, given.getInt()) : given.getInt();
  return bound;
}

void markIndexBounds(mlir::func::FuncOp func) {
  mlir::Builder b(func.getContext());
  for (unsigned i = 0, e = func.getNumArguments(); i < e; ++i) {
    auto role = func.getArgAttrOfType<RoleAttr>(i, KilnDialect::kRoleAttrName);
    auto type = llvm::dyn_cast<mlir::ShapedType>(func.getArgument(i).getType());
    if (!role || !type || !llvm::isa<mlir::IntegerType>(type.getElementType()) ||
        (role.getValue() != Role::input && role.getValue() != Role::label))
      continue;
    if (std::optional<int64_t> bound = argumentIndexBound(func, i))
      func.setArgAttr(i, KilnDialect::kIndexBoundAttrName,
                      b.getI64IntegerAttr(*bound));
  }
}

namespace {

struct MarkIndexBoundsPass : impl::KilnMarkIndexBoundsBase<MarkIndexBoundsPass> {
  void runOnOperation() override {
    for (auto func : getOperation().getOps<mlir::func::FuncOp>())
      if (!func.isPrivate() && !func.isExternal())
        markIndexBounds(func);
  }
};

} // namespace
} // namespace kiln
