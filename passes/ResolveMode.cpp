//===- ResolveMode.cpp - a model graph as a training or an eval step ------===//
//
// A model graph is its training forward pass. An eval step differs in three
// ways, as a PyTorch module in eval() mode does: kiln.mode_select takes its
// eval value, dropout keeps every element unscaled, and model state (a batch
// norm's running statistics) is read but not updated.
//
//===----------------------------------------------------------------------===//

#include "ir/KilnOps.h"
#include "passes/Passes.h"

#include "mlir/Interfaces/SideEffectInterfaces.h"

#define DEBUG_TYPE "kiln-resolve-mode"

namespace kiln {
#define GEN_PASS_DEF_KILNRESOLVEMODE
#include "passes/Passes.h.inc"

namespace {

struct ResolveModePass : impl::KilnResolveModeBase<ResolveModePass> {
  using KilnResolveModeBase::KilnResolveModeBase;

  void runOnOperation() override {
    if (mode != "train" && mode != "eval") {
      getOperation().emitError()
          << "kiln-resolve-mode: mode=" << mode << ": expected train or eval";
      return signalPassFailure();
    }
    bool eval = mode == "eval";
    for (auto func : getOperation().getOps<mlir::func::FuncOp>()) {
      if (func.isExternal())
        continue;
      func.walk([&](ModeSelectOp op) {
        op.replaceAllUsesWith(eval ? op.getEval() : op.getTraining());
        op.erase();
      });
      if (!eval)
        continue;
      func.walk([&](DropoutOp op) {
        op.replaceAllUsesWith(op.getOperand());
        op.erase();
      });
      dropModelStateUpdates(func);
      // The batch statistics, the masks' counters: what only the dropped
      // values read.
      for (mlir::Block &block : func.getBody()) {
        llvm::SmallVector<mlir::Operation *> ops;
        for (mlir::Operation &op : block.without_terminator())
          ops.push_back(&op);
        for (mlir::Operation *op : llvm::reverse(ops))
          if (mlir::isOpTriviallyDead(op))
            op->erase();
      }
    }
  }

  // Removes the results with #kiln.role<model_state> from |func|.
  void dropModelStateUpdates(mlir::func::FuncOp func) {
    llvm::BitVector drop(func.getNumResults());
    for (unsigned i = 0, e = func.getNumResults(); i < e; ++i) {
      auto role = func.getResultAttrOfType<RoleAttr>(i, KilnDialect::kRoleAttrName);
      if (role && role.getValue() == Role::model_state)
        drop.set(i);
    }
    if (drop.none())
      return;
    func.walk([&](mlir::func::ReturnOp ret) {
      llvm::SmallVector<mlir::Value> kept;
      for (unsigned i = 0, e = ret.getNumOperands(); i < e; ++i)
        if (!drop.test(i))
          kept.push_back(ret.getOperand(i));
      ret->setOperands(kept);
    });
    (void)func.eraseResults(drop);
  }
};

} // namespace
} // namespace kiln
