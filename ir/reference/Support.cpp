//===- Support.cpp - shared helpers for reference semantics ---------------===//
//
// See ir/reference/Support.h.
//
//===----------------------------------------------------------------------===//

#include "ir/reference/Support.h"

#include "ir/Interpreter.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"

#include <sstream>

using namespace mlir;

namespace kiln::reference {

namespace {

// "tensor<3x2xf32>": the shape and element type of |t|, written as a type.
std::string describe(const HostTensor &t) {
  std::string text = "tensor<";
  for (int64_t d : t.shape())
    text += std::to_string(d) + "x";
  return text + dtypeName(t.dtype()) + ">";
}

} // namespace

LogicalResult checkOperands(Operation *op, ArrayRef<HostTensor> operands) {
  if (operands.size() != op->getNumOperands())
    return op->emitOpError() << "takes " << op->getNumOperands()
                             << " operands, but the reference interpreter got "
                             << operands.size();
  for (auto [i, type] : llvm::enumerate(op->getOperandTypes())) {
    DType dtype;
    if (!dtypeOfTensor(type, dtype))
      return op->emitOpError() << "operand " << i << " has type " << type
                               << ", which the reference interpreter does not "
                                  "support";
    if (dtype != operands[i].dtype() ||
        cast<ShapedType>(type).getShape() != operands[i].shape())
      return op->emitOpError() << "operand " << i << " must be " << type
                               << ", but the reference interpreter got "
                               << describe(operands[i]);
  }
  return success();
}

FailureOr<HostTensor> makeResult(Operation *op, unsigned index) {
  Type type = op->getResult(index).getType();
  DType dtype;
  auto shaped = dyn_cast<RankedTensorType>(type);
  if (!shaped || !shaped.hasStaticShape() || !dtypeOfTensor(type, dtype))
    return op->emitOpError() << "result " << index << " has type " << type
                             << ", which the reference interpreter does not "
                                "support";
  return HostTensor(dtype, shaped.getShape());
}

double fromWrapped(DType dtype, uint64_t bits) {
  switch (dtype) {
  case DType::i32:
    return static_cast<int32_t>(static_cast<uint32_t>(bits));
  case DType::i8:
    return static_cast<int8_t>(static_cast<uint8_t>(bits));
  case DType::i1:
    return (bits & 1) != 0;
  default:
    return static_cast<double>(static_cast<int64_t>(bits));
  }
}

llvm::SmallVector<int64_t, 4> stridesOf(ArrayRef<int64_t> shape) {
  llvm::SmallVector<int64_t, 4> s(shape.size(), 1);
  for (int64_t d = static_cast<int64_t>(shape.size()) - 2; d >= 0; --d)
    s[d] = s[d + 1] * shape[d + 1];
  return s;
}

std::string formatIndex(ArrayRef<int64_t> index) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < index.size(); ++i)
    os << (i ? ", " : "") << index[i];
  os << "]";
  return os.str();
}

llvm::SmallVector<int64_t, 4> unravel(int64_t linear, ArrayRef<int64_t> shape) {
  llvm::SmallVector<int64_t, 4> index(shape.size(), 0);
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    if (shape[d] == 0)
      continue;
    index[d] = linear % shape[d];
    linear /= shape[d];
  }
  return index;
}

AroundDim splitAround(ArrayRef<int64_t> shape, int64_t dim) {
  AroundDim r;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    if (d < dim)
      r.outer *= shape[d];
    else if (d == dim)
      r.size = shape[d];
    else
      r.inner *= shape[d];
  }
  return r;
}

} // namespace kiln::reference
