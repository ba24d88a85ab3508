//===- LossScale.h - the dynamic loss scale's state arguments -----*- C++ -*-===//
//
// fp16 mixed precision scales the loss so that small gradients survive in
// fp16 (passes/AutoMixedPrecision.cpp). Three passes share the state: the
// mixed-precision pass adds it as optimizer-state arguments, kiln-autodiff
// seeds the backward pass with the scale instead of 1, and
// kiln-apply-optimizer divides the gradients by it, skips the update when a
// gradient is not finite and updates the scale. The state is found by role
// (#kiln.role<optimizer_state>) and name, so it is checkpointed and resumed
// by name like any other optimizer state; all three are 0-d f32 tensors
// (counts are exact in f32 far beyond any run's length).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_PASSES_LOSSSCALE_H
#define KILN_PASSES_LOSSSCALE_H

#include "ir/KilnOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/StringRef.h"

namespace kiln {

// The scale that multiplies the loss before the backward pass.
constexpr llvm::StringLiteral kLossScaleName = "loss_scale";
// Consecutive steps with finite gradients since the last change of scale.
constexpr llvm::StringLiteral kLossScaleGoodStepsName = "loss_scale.good_steps";
// Steps skipped in all because a gradient was inf or NaN.
constexpr llvm::StringLiteral kLossScaleSkippedStepsName =
    "loss_scale.skipped_steps";

// torch.cuda.amp.GradScaler's defaults: start at 2^16, double after 2000
// finite steps, halve on an overflow. The scale never grows past 2^24, so
// doubling can never overflow f32 into a scale that only ever skips.
constexpr double kInitialLossScale = 65536.0;
constexpr double kLossScaleGrowthInterval = 2000.0;
constexpr double kMaxLossScale = 16777216.0;

// The index of |func|'s optimizer-state argument named |name|, or -1.
inline int findStateArgument(mlir::func::FuncOp func, llvm::StringRef name) {
  for (unsigned i = 0, e = func.getNumArguments(); i < e; ++i) {
    auto role = func.getArgAttrOfType<RoleAttr>(i, KilnDialect::kRoleAttrName);
    auto n = func.getArgAttrOfType<mlir::StringAttr>(i, KilnDialect::kNameAttrName);
    if (role && role.getValue() == Role::optimizer_state && n &&
        n.getValue() == name)
      return static_cast<int>(i);
  }
  return -1;
}

} // namespace kiln

#endif // KILN_PASSES_LOSSSCALE_H
