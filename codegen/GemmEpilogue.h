//===- GemmEpilogue.h - GEMM fusions as a library GEMM plus a kernel -*- C++ -*-===//
//
// A `gemm` kiln.fusion is a dot_general (the body's first op) followed by an
// elementwise epilogue (bias add, residual add, relu or tanh-gelu; possibly
// several results). Neither CPU nor CUDA code generation writes the GEMM
// itself: the dot_general goes to a library (OpenBLAS, cuBLAS), writing its
// result into a scratch buffer, and the epilogue becomes an ordinary loop
// kernel that reads that buffer as one more input. splitGemmFusion builds
// that epilogue as a kiln.fusion of kind `loop` (one result) or
// `multi_output` in a scratch module, so the kernel model and every backend
// compile it as they compile any other fusion.
//
// Library GEMMs want each operand as [batch..., rows, contract] or
// [batch..., contract, rows]; other layouts are packed first.
// buildTransposeFusion makes the packing kernel: a loop fusion holding one
// kiln.transpose. buildSingleOpFusion does the same for any top-level op the
// kernel model can express, so it too becomes a kernel.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_CODEGEN_GEMMEPILOGUE_H
#define KILN_CODEGEN_GEMMEPILOGUE_H

#include "ir/KilnOps.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/ADT/SmallVector.h"

namespace kiln {

struct GemmFusionSplit {
  // The dot_general inside the gemm fusion.
  DotGeneralOp dot;
  // Indices into the gemm fusion's inputs of the dot's lhs and rhs.
  unsigned lhsInput = 0, rhsInput = 0;
  // A module holding `func.func @epilogue` whose body is one kiln.fusion
  // (|epilogue|) and its return. The epilogue fusion has the gemm fusion's
  // results, in order, and reads the gemm fusion inputs its body uses
  // (other than through the dot) in their order, then the dot's result last.
  mlir::OwningOpRef<mlir::ModuleOp> module;
  FusionOp epilogue;
  // For each epilogue input: the index of the gemm fusion input it is, or
  // -1 for the dot's result.
  llvm::SmallVector<int64_t> inputSources;
};

// Splits |fusion| (kind `gemm`). Fails with a diagnostic on the fusion when
// its body does not start with a dot_general on two of its block arguments,
// or holds a second dot_general.
mlir::FailureOr<GemmFusionSplit> splitGemmFusion(FusionOp fusion);

// A module holding `func.func @transpose` whose body is one loop kiln.fusion
// computing kiln.transpose of an |operand|-typed input by |permutation|
// (result dimension i is operand dimension permutation[i]), returned in
// |fusion|. Fails with a diagnostic at |loc| when |permutation| is not a
// permutation of the operand's dimensions.
mlir::FailureOr<mlir::OwningOpRef<mlir::ModuleOp>>
buildTransposeFusion(mlir::Location loc, mlir::RankedTensorType operand,
                     llvm::ArrayRef<int64_t> permutation, FusionOp &fusion);

// A module holding `func.func @single` whose body is one kiln.fusion of
// kind `loop` (one result) or `multi_output` wrapping a copy of |op| (a
// top-level op outside any fusion: a pooling op, gather, scatter_add, a
// constant, a reshape that is not a view), so the kernel model compiles it
// like any fusion; the fusion's inputs are |op|'s operands in order. Fails
// with a diagnostic on |op| when it has regions or non-tensor operands or
// results.
mlir::FailureOr<mlir::OwningOpRef<mlir::ModuleOp>>
buildSingleOpFusion(mlir::Operation *op, FusionOp &fusion);

} // namespace kiln

#endif // KILN_CODEGEN_GEMMEPILOGUE_H
