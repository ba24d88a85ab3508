//===- Interpreter.h - the reference interpreter ------------------*- C++ -*-===//
//
// Evaluates kiln functions on host tensors, op by op: elementwise ops through
// their ScalarSemantics (built as arith/math and run by ScalarProgram), all
// others through ReferenceEvaluable. It is the oracle every backend is
// tested against. f64 and f32 follow IEEE; f16 and bf16 are rounded to
// nearest even after every op, as hardware storing them would.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_IR_INTERPRETER_H
#define KILN_IR_INTERPRETER_H

#include "ir/HostTensor.h"
#include "ir/ScalarProgram.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/DenseMap.h"

#include <functional>
#include <memory>

namespace kiln {

// The DType of a tensor type's elements; false for unsupported types.
bool dtypeOfTensor(mlir::Type type, DType &dtype);
// The host tensor held by a dense elements attribute.
HostTensor hostTensorFromAttr(mlir::DenseElementsAttr attr);
// A dense elements attribute of |type| holding |tensor|.
mlir::DenseElementsAttr attrFromHostTensor(const HostTensor &tensor,
                                           mlir::ShapedType type);

class Interpreter {
public:
  // Evaluates |func| on |args| (one per argument, of matching shapes and
  // element types). On error emits a diagnostic naming the op and its
  // location and fails.
  mlir::FailureOr<llvm::SmallVector<HostTensor>>
  run(mlir::func::FuncOp func, llvm::ArrayRef<HostTensor> args);

  // Evaluates the ops of |block| with |args| bound to its arguments; the
  // terminator's operands are the results.
  mlir::LogicalResult runBlock(mlir::Block &block, llvm::ArrayRef<HostTensor> args,
                               llvm::SmallVectorImpl<HostTensor> &results);

  // Evaluates one op.
  mlir::LogicalResult evaluate(mlir::Operation *op,
                               llvm::ArrayRef<HostTensor> operands,
                               llvm::SmallVectorImpl<HostTensor> &results);

  // When set, runBlock calls it with each op of the block it runs (not the
  // ops inside a fusion's body), the op's operands and its results, before
  // later ops read them; it may change the results. The kernel tests move
  // them by their rounding errors to see how far each result of a fusion
  // depends on rounding (KernelTestSupport.h, roundingSpread).
  std::function<void(mlir::Operation *op, llvm::ArrayRef<HostTensor> operands,
                     llvm::MutableArrayRef<HostTensor> results)>
      onResults;

private:
  mlir::FailureOr<const ScalarProgram *> scalarProgram(mlir::Operation *op);

  llvm::DenseMap<mlir::Operation *, std::unique_ptr<ScalarProgram>> programs_;
};

} // namespace kiln

#endif // KILN_IR_INTERPRETER_H
