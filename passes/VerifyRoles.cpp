//===- VerifyRoles.cpp - check the roles of a model's arguments -----------===//
//
// A model module must say what each function argument is: a data input, a
// label, a parameter (with its initializer), and which result is the loss.
// Later passes (autodiff, the optimizer, distribution) depend on it, so the
// check runs first and names the argument at fault.
//
//===----------------------------------------------------------------------===//

#include "ir/KilnOps.h"
#include "passes/Passes.h"

#define DEBUG_TYPE "kiln-verify-roles"

namespace kiln {
#define GEN_PASS_DEF_KILNVERIFYROLES
#include "passes/Passes.h.inc"

namespace {

struct VerifyRolesPass : impl::KilnVerifyRolesBase<VerifyRolesPass> {
  void runOnOperation() override {
    for (auto func : getOperation().getOps<mlir::func::FuncOp>()) {
      if (func.isPrivate() || func.isExternal())
        continue;
      if (mlir::failed(verifyFunction(func)))
        return signalPassFailure();
    }
  }

  mlir::LogicalResult verifyFunction(mlir::func::FuncOp func) {
    for (unsigned i = 0, e = func.getNumArguments(); i < e; ++i) {
      auto role = func.getArgAttrOfType<RoleAttr>(i, KilnDialect::kRoleAttrName);
      if (!role)
        return func.emitError() << "argument " << i << " of @" << func.getName()
                                << " needs a kiln.role (input, label, parameter, "
                                   "...)";
      bool hasInit = func.getArgAttr(i, KilnDialect::kInitAttrName) != nullptr;
      if (role.getValue() == Role::parameter && !hasInit)
        return func.emitError() << "parameter argument " << i << " of @"
                                << func.getName() << " needs a kiln.init";
      bool initialized = role.getValue() == Role::parameter ||
                         role.getValue() == Role::optimizer_state ||
                         role.getValue() == Role::step;
      if (!initialized && hasInit)
        return func.emitError() << "argument " << i << " of @" << func.getName()
                                << " has a kiln.init but its role is "
                                << stringifyRole(role.getValue())
                                << " (only parameters, optimizer state and the "
                                   "step are initialized)";
    }
    for (unsigned i = 0, e = func.getNumResults(); i < e; ++i) {
      auto role =
          func.getResultAttrOfType<RoleAttr>(i, KilnDialect::kRoleAttrName);
      if (!role || role.getValue() != Role::loss)
        continue;
      auto type = llvm::dyn_cast<mlir::RankedTensorType>(
          func.getFunctionType().getResult(i));
      if (!type || type.getRank() != 0 ||
          !llvm::isa<mlir::FloatType>(type.getElementType()))
        return func.emitError() << "loss result " << i << " of @" << func.getName()
                                << " must be a 0-d float tensor, but is "
                                << func.getFunctionType().getResult(i);
    }
    return mlir::success();
  }
};

} // namespace
} // namespace kiln
