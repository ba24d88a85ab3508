//===- KilnInterfaces.td - kiln op interfaces ---------------*- tablegen -*-===//
//
// Per-op knowledge reached through the op: its cost, its scalar semantics
// (elementwise ops), its reference semantics (the rest) and its gradient.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_INTERFACES_TD
#define KILN_INTERFACES_TD

include "mlir/IR/OpBase.td"

def Kiln_CostInterface : OpInterface<"CostInterface"> {
  let cppNamespace = "::kiln";
  let description = [{
    The arithmetic cost of one execution of an op, in floating-point
    operations (a fused multiply-add counts as two). Data movement (reshape,
    transpose, slice, ...) costs zero FLOPs. `kiln inspect` and the fusion cost
    model sum these.
  }];
  let methods = [
    InterfaceMethod<"Returns the FLOPs one execution of this op performs.",
      "int64_t", "getFlops", (ins), [{}], [{
        // Elementwise default: one operation per result element.
        int64_t total = 0;
        for (mlir::Type t : $_op->getResultTypes())
          if (auto shaped = llvm::dyn_cast<mlir::ShapedType>(t))
            total += shaped.getNumElements();
        return total;
      }]>,
  ];
}

def Kiln_ScalarSemanticsInterface : OpInterface<"ScalarSemantics"> {
  let cppNamespace = "::kiln";
  let description = [{
    The computation of an elementwise op on one element, built from upstream
    `arith` and `math` ops. This is the op's single definition of what it
    computes: the reference interpreter evaluates it, the CPU backend lowers
    it to LLVM and the CUDA backend prints it as CUDA C++.

    Each operand scalar has the *compute type* of its operand's element type
    (f32 for f16 and bf16, the element type otherwise); the result has the
    compute type of the result element type. Callers widen narrow floats
    before and round after (see ir/ScalarSemantics.h).
  }];
  let methods = [
    InterfaceMethod<"Builds the scalar computation of one element.",
      "::mlir::Value", "buildScalar",
      (ins "::mlir::OpBuilder &":$b, "::mlir::Location":$loc,
           "::mlir::ValueRange":$operands)>,
  ];
}

def Kiln_ReferenceInterface : OpInterface<"ReferenceEvaluable"> {
  let cppNamespace = "::kiln";
  let description = [{
    Tensor-level reference semantics of an op that is not elementwise
    (reductions, contractions, data movement, ...), on host tensors. The
    reference interpreter (ir/Interpreter.h) calls it; results must be
    rounded to their element types (HostTensor::roundAll). Errors that
    depend on values (an index out of range) are emitted on the op.
  }];
  let methods = [
    InterfaceMethod<"Evaluates the op on host tensors.",
      "::mlir::LogicalResult", "evaluate",
      (ins "::llvm::ArrayRef<::kiln::HostTensor>":$operands,
           "::llvm::SmallVectorImpl<::kiln::HostTensor> &":$results)>,
  ];
}

def Kiln_DifferentiableInterface : OpInterface<"Differentiable"> {
  let cppNamespace = "::kiln";
  let description = [{
    The op's reverse-mode gradient rule, as kiln IR. Given the gradient of
    the loss with respect to each result (a null Value where none flows),
    builds at the builder's insertion point the gradient with respect to
    each operand, pushing one Value per operand onto `operandGrads` (null
    where no gradient flows: integer operands, stop_gradient, comparisons).
    The op's own operands and results may be used by the rule.
  }];
  let methods = [
    InterfaceMethod<"Builds the gradients of the operands.",
      "::mlir::LogicalResult", "buildGradients",
      (ins "::mlir::OpBuilder &":$b,
           "::llvm::ArrayRef<::mlir::Value>":$resultGrads,
           "::llvm::SmallVectorImpl<::mlir::Value> &":$operandGrads)>,
  ];
}

#endif // KILN_INTERFACES_TD
