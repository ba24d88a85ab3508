//===- VerifyRoles.cpp - check the roles of a model's arguments -----------===//
//
// A model module must say what each function argument is: a data input, a
// label, a parameter or model state (with its initializer), and which result
// is the loss; a result that updates model state names its argument.
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
      if (role.getValue() == Role::model_state && !hasInit)
        return func.emitError() << "model_state argument " << i << " of @"
                                << func.getName() << " needs a kiln.init";
      bool initialized = role.getValue() == Role::parameter ||
                         role.getValue() == Role::model_state ||
                         role.getValue() == Role::optimizer_state ||
                         role.getValue() == Role::step;
      if (!initialized && hasInit)
        return func.emitError() << "argument " << i << " of @" << func.getName()
                                << " has a kiln.init but its role is "
                                << stringifyRole(role.getValue())
                                << " (only parameters, model state, optimizer "
                                   "state and the step are initialized)";
    }
    // Model state: each result that updates one names a model_state argument
    // of its type, and no argument is updated twice.
    llvm::SmallVector<int> updatedBy(func.getNumArguments(), -1);
    for (unsigned i = 0, e = func.getNumResults(); i < e; ++i) {
      auto role =
          func.getResultAttrOfType<RoleAttr>(i, KilnDialect::kRoleAttrName);
      if (!role || role.getValue() != Role::model_state)
        continue;
      auto updates = func.getResultAttrOfType<mlir::IntegerAttr>(
          i, KilnDialect::kUpdatesAttrName);
      if (!updates)
        return func.emitError() << "model_state result " << i << " of @"
                                << func.getName()
                                << " needs kiln.updates, the index of the "
                                   "model_state argument it updates";
      int64_t arg = updates.getInt();
      auto argRole =
          arg >= 0 && arg < func.getNumArguments()
              ? func.getArgAttrOfType<RoleAttr>(arg, KilnDialect::kRoleAttrName)
              : RoleAttr();
      if (!argRole || argRole.getValue() != Role::model_state)
        return func.emitError() << "model_state result " << i << " of @"
                                << func.getName() << " updates argument " << arg
                                << ", which is not a model_state argument";
      if (func.getArgument(arg).getType() != func.getFunctionType().getResult(i))
        return func.emitError()
               << "model_state result " << i << " of @" << func.getName()
               << " is " << func.getFunctionType().getResult(i)
               << ", but the argument " << arg << " it updates is "
               << func.getArgument(arg).getType();
      if (updatedBy[arg] >= 0)
        return func.emitError() << "model_state argument " << arg << " of @"
                                << func.getName() << " is updated by results "
                                << updatedBy[arg] << " and " << i;
      updatedBy[arg] = i;
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
