//===- Interpreter.cpp - the reference interpreter ------------------------===//

#include "ir/Interpreter.h"

#include "ir/KilnOps.h"
#include "ir/ScalarSemantics.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/APFloat.h"

using namespace mlir;

namespace kiln {

bool dtypeOfTensor(Type type, DType &dtype) {
  auto shaped = dyn_cast<RankedTensorType>(type);
  return shaped && dtypeOf(shaped.getElementType(), dtype);
}

HostTensor hostTensorFromAttr(DenseElementsAttr attr) {
  DType dtype = DType::f32;
  dtypeOf(attr.getElementType(), dtype);
  HostTensor t(dtype, attr.getType().getShape());
  int64_t i = 0;
  if (isFloat(dtype)) {
    for (const APFloat &v : attr.getValues<APFloat>()) {
      APFloat d = v;
      bool lost;
      d.convert(APFloat::IEEEdouble(), APFloat::rmNearestTiesToEven, &lost);
      t[i++] = d.convertToDouble();
    }
  } else {
    bool isBool = dtype == DType::i1;
    for (const APInt &v : attr.getValues<APInt>())
      t[i++] = isBool ? static_cast<double>(v.getZExtValue())
                      : static_cast<double>(v.getSExtValue());
  }
  return t;
}

DenseElementsAttr attrFromHostTensor(const HostTensor &tensor, ShapedType type) {
  Type element = type.getElementType();
  if (auto floatType = dyn_cast<FloatType>(element)) {
    SmallVector<APFloat> values;
    values.reserve(tensor.size());
    for (double v : tensor.values()) {
      APFloat f(v);
      bool lost;
      f.convert(floatType.getFloatSemantics(), APFloat::rmNearestTiesToEven, &lost);
      values.push_back(f);
    }
    return DenseElementsAttr::get(type, values);
  }
  unsigned width = element.getIntOrFloatBitWidth();
  SmallVector<APInt> values;
  values.reserve(tensor.size());
  for (double v : tensor.values())
    values.push_back(APInt(width, static_cast<int64_t>(v), /*isSigned=*/true));
  return DenseElementsAttr::get(type, values);
}

FailureOr<const ScalarProgram *> Interpreter::scalarProgram(Operation *op) {
  auto it = programs_.find(op);
  if (it != programs_.end())
    return it->second.get();
  auto semantics = cast<ScalarSemantics>(op);
  // Build the scalar computation in a detached block, compile, discard.
  auto block = std::make_unique<Block>();
  SmallVector<Value> args;
  for (Type t : op->getOperandTypes())
    args.push_back(block->addArgument(cast<ShapedType>(t).getElementType(),
                                      op->getLoc()));
  OpBuilder b(op->getContext());
  b.setInsertionPointToStart(block.get());
  Value result = buildStoredScalar(semantics, b, op->getLoc(), args);
  FailureOr<ScalarProgram> program = ScalarProgram::compile(*block, result);
  if (failed(program))
    return op->emitOpError("has scalar semantics the reference evaluator "
                           "cannot run");
  auto owned = std::make_unique<ScalarProgram>(std::move(*program));
  const ScalarProgram *raw = owned.get();
  programs_[op] = std::move(owned);
  return raw;
}

LogicalResult Interpreter::evaluate(Operation *op, ArrayRef<HostTensor> operands,
                                    SmallVectorImpl<HostTensor> &results) {
  if (isa<ScalarSemantics>(op)) {
    FailureOr<const ScalarProgram *> program = scalarProgram(op);
    if (failed(program))
      return failure();
    DType dtype;
    if (!dtypeOfTensor(op->getResult(0).getType(), dtype))
      return op->emitOpError("has a result type the reference interpreter "
                             "does not support");
    HostTensor out(dtype, cast<ShapedType>(op->getResult(0).getType()).getShape());
    SmallVector<double, 4> inputs(operands.size());
    for (int64_t i = 0, e = out.size(); i < e; ++i) {
      for (size_t k = 0; k < operands.size(); ++k)
        inputs[k] = operands[k][i];
      out[i] = roundTo(dtype, (*program)->run(inputs.data()));
    }
    results.push_back(std::move(out));
    return success();
  }
  if (auto reference = dyn_cast<ReferenceEvaluable>(op)) {
    if (failed(reference.evaluate(operands, results)))
      return failure();
    for (HostTensor &t : results)
      t.roundAll();
    return success();
  }
  return op->emitOpError("has no reference semantics (neither ScalarSemantics "
                         "nor ReferenceEvaluable)");
}

LogicalResult Interpreter::runBlock(Block &block, ArrayRef<HostTensor> args,
                                    SmallVectorImpl<HostTensor> &results) {
  llvm::DenseMap<Value, HostTensor> values;
  for (auto [arg, tensor] : llvm::zip(block.getArguments(), args))
    values[arg] = tensor;
  for (Operation &op : block) {
    if (op.hasTrait<OpTrait::IsTerminator>()) {
      for (Value v : op.getOperands())
        results.push_back(values[v]);
      return success();
    }
    SmallVector<HostTensor> operands;
    for (Value v : op.getOperands()) {
      auto it = values.find(v);
      if (it == values.end())
        return op.emitOpError("uses a value the interpreter has not computed");
      operands.push_back(it->second);
    }
    SmallVector<HostTensor> outs;
    if (failed(evaluate(&op, operands, outs)))
      return failure();
    if (outs.size() != op.getNumResults())
      return op.emitOpError("reference semantics produced ")
             << outs.size() << " results, expected " << op.getNumResults();
    if (onResults)
      onResults(&op, operands, outs);
    for (auto [result, tensor] : llvm::zip(op.getResults(), outs))
      values[result] = std::move(tensor);
  }
  return block.getParentOp()->emitOpError("body has no terminator");
}

FailureOr<SmallVector<HostTensor>> Interpreter::run(func::FuncOp func,
                                                    ArrayRef<HostTensor> args) {
  if (func.isExternal())
    return func.emitOpError("has no body to interpret");
  if (args.size() != func.getNumArguments())
    return func.emitOpError("takes ")
           << func.getNumArguments() << " arguments, but the interpreter got "
           << args.size();
  for (auto [i, type] : llvm::enumerate(func.getArgumentTypes())) {
    DType dtype;
    auto shaped = dyn_cast<RankedTensorType>(type);
    if (!dtypeOfTensor(type, dtype) || dtype != args[i].dtype() ||
        shaped.getShape() != args[i].shape())
      return func.emitOpError("argument ")
             << i << " must be " << type << ", but the interpreter got "
             << args[i].str(0);
  }
  SmallVector<HostTensor> results;
  if (failed(runBlock(func.getBody().front(), args, results)))
    return failure();
  return results;
}

} // namespace kiln
