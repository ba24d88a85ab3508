//===- KilnInterfaces.td - kiln op interfaces ---------------*- tablegen -*-===//
//
// Per-op knowledge reached through the op: its cost. (Gradient rules and
// scalar semantics join here as the compiler grows.)
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

#endif // KILN_INTERFACES_TD
