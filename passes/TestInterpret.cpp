//===- TestInterpret.cpp - fold functions through the interpreter ---------===//
//
// Test-only: evaluates each argument-free function with the reference
// interpreter and replaces its body with constants of the results. lit tests
// use it to check the interpreter's numbers in IR, as StableHLO's
// interpreter tests do.
//
//===----------------------------------------------------------------------===//

#include "ir/Interpreter.h"
#include "ir/KilnOps.h"
#include "passes/Passes.h"

#include "mlir/IR/Builders.h"

#define DEBUG_TYPE "kiln-test-interpret"

namespace kiln {
#define GEN_PASS_DEF_KILNTESTINTERPRET
#include "passes/Passes.h.inc"

namespace {

struct TestInterpretPass : impl::KilnTestInterpretBase<TestInterpretPass> {
  void runOnOperation() override {
    for (auto func : llvm::make_early_inc_range(
             getOperation().getOps<mlir::func::FuncOp>())) {
      if (func.isExternal() || func.getNumArguments() != 0)
        continue;
      Interpreter interpreter;
      auto results = interpreter.run(func, {});
      if (mlir::failed(results))
        return signalPassFailure();
      mlir::Block &body = func.getBody().front();
      auto ret = body.getTerminator();
      mlir::OpBuilder b(ret);
      llvm::SmallVector<mlir::Value> constants;
      for (auto [tensor, type] : llvm::zip(*results, func.getResultTypes()))
        constants.push_back(b.create<ConstantOp>(
            ret->getLoc(),
            attrFromHostTensor(tensor, llvm::cast<mlir::ShapedType>(type))));
      ret->setOperands(constants);
      // Drop everything the constants replaced, users before producers.
      // (Erasing while walking a reverse iterator would leave it pointing at
      // the erased op, so collect first.)
      llvm::SmallVector<mlir::Operation *> ops;
      for (mlir::Operation &op : llvm::reverse(body.without_terminator()))
        ops.push_back(&op);
      for (mlir::Operation *op : ops)
        if (op->use_empty())
          op->erase();
    }
  }
};

} // namespace
} // namespace kiln
