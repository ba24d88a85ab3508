//===- DataMovement.cpp - reference semantics of data-movement ops --------===//
//
// constant, iota, broadcast_in_dim, reshape, transpose, slice, concatenate,
// pad and gather, exactly as their descriptions in ir/KilnOps.td state.
// Each is a strided copy: the result is walked in row-major order with
// forEachStrided and each element read from its operand offset, so no op
// carries index arithmetic of its own beyond its strides. Values are copied,
// never computed, so no rounding happens here.
//
//===----------------------------------------------------------------------===//

#include "ir/Interpreter.h"
#include "ir/KilnOps.h"
#include "ir/reference/Support.h"

#include <algorithm>

using namespace mlir;

namespace kiln {
using namespace reference;

LogicalResult ConstantOp::evaluate(ArrayRef<HostTensor> operands,
                                   SmallVectorImpl<HostTensor> &results) {
  // makeResult only checks that the interpreter supports the result type.
  if (failed(checkOperands(*this, operands)) || failed(makeResult(*this)))
    return failure();
  auto dense = dyn_cast<DenseElementsAttr>(getValue());
  if (!dense)
    return emitOpError() << "holds a value the reference interpreter cannot "
                            "read: expected dense elements, but found "
                         << getValue();
  results.push_back(hostTensorFromAttr(dense));
  return success();
}

LogicalResult IotaOp::evaluate(ArrayRef<HostTensor> operands,
                               SmallVectorImpl<HostTensor> &results) {
  if (failed(checkOperands(*this, operands)))
    return failure();
  FailureOr<HostTensor> result = makeResult(*this);
  if (failed(result))
    return failure();
  AroundDim split = splitAround(result->shape(), getDimension());
  double *out = result->values().data();
  for (int64_t o = 0; o < split.outer; ++o)
    for (int64_t k = 0; k < split.size; ++k)
      for (int64_t i = 0; i < split.inner; ++i)
        out[(o * split.size + k) * split.inner + i] = static_cast<double>(k);
  results.push_back(std::move(*result));
  return success();
}

LogicalResult BroadcastInDimOp::evaluate(ArrayRef<HostTensor> operands,
                                         SmallVectorImpl<HostTensor> &results) {
  if (failed(checkOperands(*this, operands)))
    return failure();
  FailureOr<HostTensor> result = makeResult(*this);
  if (failed(result))
    return failure();
  const HostTensor &operand = operands[0];
  // Each result dimension reads the operand with the stride of the operand
  // dimension mapped to it, or 0 where it is new or broadcast from size 1.
  SmallVector<int64_t, 4> readStrides(result->rank(), 0);
  SmallVector<int64_t, 4> operandStrides = stridesOf(operand.shape());
  for (auto [i, d] : llvm::enumerate(getBroadcastDimensions()))
    if (operand.dim(i) != 1)
      readStrides[d] = operandStrides[i];
  const double *in = operand.values().data();
  double *out = result->values().data();
  forEachStrided(result->shape(), 0, readStrides, 0, stridesOf(result->shape()),
                 [&](int64_t src, int64_t dst) { out[dst] = in[src]; });
  results.push_back(std::move(*result));
  return success();
}

LogicalResult ReshapeOp::evaluate(ArrayRef<HostTensor> operands,
                                  SmallVectorImpl<HostTensor> &results) {
  if (failed(checkOperands(*this, operands)))
    return failure();
  FailureOr<HostTensor> result = makeResult(*this);
  if (failed(result))
    return failure();
  if (result->size() != operands[0].size())
    return emitOpError() << "cannot reshape " << operands[0].size()
                         << " elements into " << result->size();
  result->values() = operands[0].values();
  results.push_back(std::move(*result));
  return success();
}

LogicalResult TransposeOp::evaluate(ArrayRef<HostTensor> operands,
                                    SmallVectorImpl<HostTensor> &results) {
  if (failed(checkOperands(*this, operands)))
    return failure();
  FailureOr<HostTensor> result = makeResult(*this);
  if (failed(result))
    return failure();
  // result[r] = operand[o] with o[perm[i]] = r[i]: result dimension i steps
  // through operand dimension perm[i].
  SmallVector<int64_t, 4> operandStrides = stridesOf(operands[0].shape());
  SmallVector<int64_t, 4> readStrides;
  for (int64_t p : getPermutation())
    readStrides.push_back(operandStrides[p]);
  const double *in = operands[0].values().data();
  double *out = result->values().data();
  forEachStrided(result->shape(), 0, readStrides, 0, stridesOf(result->shape()),
                 [&](int64_t src, int64_t dst) { out[dst] = in[src]; });
  results.push_back(std::move(*result));
  return success();
}

LogicalResult SliceOp::evaluate(ArrayRef<HostTensor> operands,
                                SmallVectorImpl<HostTensor> &results) {
  if (failed(checkOperands(*this, operands)))
    return failure();
  FailureOr<HostTensor> result = makeResult(*this);
  if (failed(result))
    return failure();
  SmallVector<int64_t, 4> operandStrides = stridesOf(operands[0].shape());
  SmallVector<int64_t, 4> readStrides;
  int64_t base = 0;
  for (auto [d, start] : llvm::enumerate(getStartIndices())) {
    base += start * operandStrides[d];
    readStrides.push_back(getStrides()[d] * operandStrides[d]);
  }
  const double *in = operands[0].values().data();
  double *out = result->values().data();
  forEachStrided(result->shape(), base, readStrides, 0,
                 stridesOf(result->shape()),
                 [&](int64_t src, int64_t dst) { out[dst] = in[src]; });
  results.push_back(std::move(*result));
  return success();
}

LogicalResult ConcatenateOp::evaluate(ArrayRef<HostTensor> operands,
                                      SmallVectorImpl<HostTensor> &results) {
  if (failed(checkOperands(*this, operands)))
    return failure();
  FailureOr<HostTensor> result = makeResult(*this);
  if (failed(result))
    return failure();
  int64_t dim = getDimension();
  SmallVector<int64_t, 4> resultStrides = stridesOf(result->shape());
  double *out = result->values().data();
  // Each input is written at its running offset along |dim|.
  int64_t offset = 0;
  for (const HostTensor &input : operands) {
    const double *in = input.values().data();
    forEachStrided(input.shape(), 0, stridesOf(input.shape()),
                   offset * resultStrides[dim], resultStrides,
                   [&](int64_t src, int64_t dst) { out[dst] = in[src]; });
    offset += input.dim(dim);
  }
  results.push_back(std::move(*result));
  return success();
}

LogicalResult PadOp::evaluate(ArrayRef<HostTensor> operands,
                              SmallVectorImpl<HostTensor> &results) {
  if (failed(checkOperands(*this, operands)))
    return failure();
  FailureOr<HostTensor> result = makeResult(*this);
  if (failed(result))
    return failure();
  std::fill(result->values().begin(), result->values().end(),
            getPaddingValue().convertToDouble());
  SmallVector<int64_t, 4> resultStrides = stridesOf(result->shape());
  int64_t base = 0;
  for (auto [d, low] : llvm::enumerate(getEdgePaddingLow()))
    base += low * resultStrides[d];
  const double *in = operands[0].values().data();
  double *out = result->values().data();
  forEachStrided(operands[0].shape(), 0, stridesOf(operands[0].shape()), base,
                 resultStrides,
                 [&](int64_t src, int64_t dst) { out[dst] = in[src]; });
  results.push_back(std::move(*result));
  return success();
}

LogicalResult GatherOp::evaluate(ArrayRef<HostTensor> operands,
                                 SmallVectorImpl<HostTensor> &results) {
  if (failed(checkOperands(*this, operands)))
    return failure();
  FailureOr<HostTensor> result = makeResult(*this);
  if (failed(result))
    return failure();
  const HostTensor &table = operands[0], &indices = operands[1];
  int64_t rows = table.dim(0);
  int64_t rowSize = 1;
  for (int64_t d : table.shape().drop_front())
    rowSize *= d;
  for (int64_t s = 0; s < indices.size(); ++s) {
    int64_t index = static_cast<int64_t>(indices[s]);
    if (index < 0 || index >= rows)
      return emitOpError() << "index " << index << " at position "
                           << formatIndex(unravel(s, indices.shape()))
                           << " of indices is out of range: the table has "
                           << rows << " rows, so indices must lie in [0, "
                           << rows << ")";
    std::copy_n(table.values().data() + index * rowSize, rowSize,
                result->values().data() + s * rowSize);
  }
  results.push_back(std::move(*result));
  return success();
}

// The graph as written is a training step: the training value.
LogicalResult ModeSelectOp::evaluate(ArrayRef<HostTensor> operands,
                                     SmallVectorImpl<HostTensor> &results) {
  if (failed(checkOperands(*this, operands)))
    return failure();
  results.push_back(operands[0]);
  return success();
}

} // namespace kiln
