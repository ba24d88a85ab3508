//===- Autodiff.cpp - reverse-mode automatic differentiation --------------===//
//
// Turns a function that returns a scalar loss into one that also returns the
// gradient of the loss with respect to every parameter argument. The rules
// live with the ops (the Differentiable interface, ir/gradients/); this pass
// only decides which ops need one, calls them in reverse order and adds up
// the gradients of values used more than once. The result is plain kiln IR,
// so every later pass (fusion, scheduling, distribution) treats the backward
// pass like the forward one.
//
// Only values that depend on a parameter and are float tensors carry
// gradients ("varied" values); ops that read no varied value are skipped, so
// an input pipeline or a constant subgraph needs no gradient rules.
//
//===----------------------------------------------------------------------===//

#include "ir/KilnOps.h"
#include "passes/LossScale.h"
#include "passes/Passes.h"
#include "passes/Rematerialize.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

#define DEBUG_TYPE "kiln-autodiff"

namespace kiln {
#define GEN_PASS_DEF_KILNAUTODIFF
#include "passes/Passes.h.inc"

namespace {

using namespace mlir;

bool isFloatTensor(Value value) {
  auto type = dyn_cast<RankedTensorType>(value.getType());
  return type && isa<FloatType>(type.getElementType());
}

bool hasRole(func::FuncOp func, unsigned result, Role role) {
  auto attr = func.getResultAttrOfType<RoleAttr>(result, KilnDialect::kRoleAttrName);
  return attr && attr.getValue() == role;
}

// A zero-filled constant of |type|.
Value zeros(OpBuilder &b, Location loc, RankedTensorType type) {
  Type element = type.getElementType();
  Attribute zero = isa<FloatType>(element)
                       ? Attribute(b.getFloatAttr(element, 0.0))
                       : Attribute(b.getIntegerAttr(element, 0));
  return b.create<ConstantOp>(loc, type,
                              DenseElementsAttr::get(type, ArrayRef<Attribute>{zero}));
}

struct AutodiffPass : impl::KilnAutodiffBase<AutodiffPass> {
  using KilnAutodiffBase::KilnAutodiffBase;

  void runOnOperation() override {
    for (auto func : getOperation().getOps<func::FuncOp>()) {
      if (func.isPrivate() || func.isExternal())
        continue;
      if (failed(differentiate(func)))
        return signalPassFailure();
    }
  }

  LogicalResult differentiate(func::FuncOp func) {
    // Find the loss.
    std::optional<unsigned> lossIndex;
    for (unsigned i = 0, e = func.getNumResults(); i < e; ++i) {
      if (hasRole(func, i, Role::gradient))
        return func.emitError() << "@" << func.getName() << " already returns "
                                << "gradients (result " << i
                                << "); kiln-autodiff runs once";
      if (!hasRole(func, i, Role::loss))
        continue;
      if (lossIndex)
        return func.emitError() << "@" << func.getName()
                                << " marks results " << *lossIndex << " and " << i
                                << " as the loss; expected one loss result";
      lossIndex = i;
    }
    if (!lossIndex)
      return success();
    auto lossType =
        dyn_cast<RankedTensorType>(func.getFunctionType().getResult(*lossIndex));
    if (!lossType || lossType.getRank() != 0 ||
        !isa<FloatType>(lossType.getElementType()))
      return func.emitError() << "loss result " << *lossIndex << " of @"
                              << func.getName()
                              << " must be a 0-d float tensor, but is "
                              << func.getFunctionType().getResult(*lossIndex);
    if (!func.getBody().hasOneBlock())
      return func.emitError() << "@" << func.getName() << " has "
                              << func.getBlocks().size()
                              << " blocks; kiln-autodiff expects one";
    Block &body = func.getBody().front();
    auto ret = dyn_cast<func::ReturnOp>(body.getTerminator());
    if (!ret)
      return func.emitError() << "@" << func.getName()
                              << " must end in func.return";

    SmallVector<unsigned> params;
    for (unsigned i = 0, e = func.getNumArguments(); i < e; ++i) {
      auto role = func.getArgAttrOfType<RoleAttr>(i, KilnDialect::kRoleAttrName);
      if (role && role.getValue() == Role::parameter)
        params.push_back(i);
    }

    // Forward: which values depend on a parameter.
    llvm::DenseSet<Value> varied;
    for (unsigned i : params)
      if (isFloatTensor(func.getArgument(i)))
        varied.insert(func.getArgument(i));
    for (Operation &op : body.without_terminator()) {
      if (llvm::none_of(op.getOperands(),
                        [&](Value v) { return varied.contains(v); }))
        continue;
      for (Value result : op.getResults())
        if (isFloatTensor(result))
          varied.insert(result);
    }

    // Backward: gradients flow from the loss, in reverse program order.
    OpBuilder b(ret);
    llvm::DenseMap<Value, Value> grads;
    Value loss = ret.getOperand(*lossIndex);
    if (varied.contains(loss)) {
      // With fp16 loss scaling (passes/LossScale.h) the backward pass starts
      // from the scale: every gradient comes out multiplied by it.
      int scaleArg = findStateArgument(func, kLossScaleName);
      if (scaleArg >= 0) {
        Value scale = func.getArgument(scaleArg);
        if (scale.getType() != lossType)
          scale = b.create<ConvertOp>(loss.getLoc(), lossType, scale);
        grads[loss] = scale;
      } else {
        auto one = DenseElementsAttr::get(
            lossType,
            ArrayRef<Attribute>{b.getFloatAttr(lossType.getElementType(), 1.0)});
        grads[loss] = b.create<ConstantOp>(loss.getLoc(), lossType, one);
      }
    }
    // The rules insert before the return, so list the forward ops first.
    SmallVector<Operation *> forward;
    for (Operation &op : body.without_terminator())
      forward.push_back(&op);
    for (Operation *opPtr : llvm::reverse(forward)) {
      Operation &op = *opPtr;
      SmallVector<Value> resultGrads;
      bool anyGrad = false;
      for (Value result : op.getResults()) {
        resultGrads.push_back(grads.lookup(result));
        anyGrad |= resultGrads.back() != nullptr;
      }
      if (!anyGrad || llvm::none_of(op.getOperands(), [&](Value v) {
            return varied.contains(v);
          }))
        continue;
      auto differentiable = dyn_cast<Differentiable>(&op);
      if (!differentiable)
        return op.emitOpError()
               << "is on a path from a parameter to the loss of @"
               << func.getName()
               << " but has no gradient rule (it does not implement the "
                  "Differentiable interface)";
      SmallVector<Value> operandGrads;
      if (failed(differentiable.buildGradients(b, resultGrads, operandGrads)))
        return failure();
      if (operandGrads.size() != op.getNumOperands())
        return op.emitOpError() << "gradient rule produced "
                                << operandGrads.size()
                                << " operand gradients, expected "
                                << op.getNumOperands();
      for (auto [i, operand, grad] :
           llvm::enumerate(op.getOperands(), operandGrads)) {
        if (!grad || !varied.contains(operand))
          continue;
        if (grad.getType() != operand.getType())
          return op.emitOpError()
                 << "gradient rule produced a gradient of type " << grad.getType()
                 << " for operand " << i << " of type " << operand.getType();
        Value &slot = grads[operand];
        slot = slot ? b.create<AddOp>(op.getLoc(), operand.getType(), slot, grad)
                          .getResult()
                    : grad;
      }
    }

    // Append one gradient result per parameter.
    MLIRContext *ctx = func.getContext();
    SmallVector<Value> results(ret.getOperands());
    for (unsigned i : params) {
      Value arg = func.getArgument(i);
      auto name = func.getArgAttrOfType<StringAttr>(i, KilnDialect::kNameAttrName);
      Value grad = grads.lookup(arg);
      if (!grad) {
        auto type = dyn_cast<RankedTensorType>(arg.getType());
        if (!type)
          return func.emitError() << "parameter argument " << i << " of @"
                                  << func.getName()
                                  << " must be a ranked tensor, but is "
                                  << arg.getType();
        emitWarning(arg.getLoc()) << "parameter argument " << i
                          << (name ? " ('" + name.getValue().str() + "')" : "")
                          << " of @" << func.getName()
                          << " receives no gradient from the loss; its gradient "
                             "is zero";
        grad = zeros(b, func.getLoc(), type);
      }
      results.push_back(grad);
      NamedAttrList attrs;
      attrs.append(KilnDialect::kRoleAttrName, RoleAttr::get(ctx, Role::gradient));
      if (name)
        attrs.append(KilnDialect::kNameAttrName, name);
      attrs.append(KilnDialect::kGradOfAttrName,
                   IntegerAttr::get(IntegerType::get(ctx, 64), i));
      func.insertResult(func.getNumResults(), arg.getType(),
                        attrs.getDictionary(ctx));
    }
    ret->setOperands(results);
    FailureOr<RematStats> remat =
        rematerialize(func, forward, this->remat, this->rematScope,
                      this->rematLimit);
    if (failed(remat))
      return failure();
    if (this->remat != "off")
      func.emitRemark() << "kiln-autodiff: remat=" << this->remat << ": the "
                        << "backward pass of @" << func.getName()
                        << " recomputes " << remat->values
                        << " forward values (" << remat->ops << " ops)"
                        << (this->rematLimit >= 0
                                ? " of " + std::to_string(remat->candidates) +
                                      " candidates (remat-limit=" +
                                      std::to_string(this->rematLimit) + ")"
                                : std::string());
    return success();
  }
};

} // namespace
} // namespace kiln
