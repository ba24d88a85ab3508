//===- Fusion.cpp - reference semantics of kiln.fusion --------------------===//
//
// A fusion computes exactly what its body computes: the body runs op by op
// on the fusion's inputs, each op rounded to its element type as it would
// be unfused. The oracle therefore says what a fused kernel must match; a
// backend that keeps intermediates wider than their stored type is checked
// against it with a tolerance, not exactly. Errors inside the body are
// reported on the inner op, with its location.
//
//===----------------------------------------------------------------------===//

#include "ir/Interpreter.h"
#include "ir/KilnOps.h"
#include "ir/reference/Support.h"

using namespace mlir;

namespace kiln {
using namespace reference;

LogicalResult FusionOp::evaluate(ArrayRef<HostTensor> operands,
                                 SmallVectorImpl<HostTensor> &results) {
  if (failed(checkOperands(*this, operands)))
    return failure();
  Interpreter interpreter;
  SmallVector<HostTensor> bodyResults;
  if (failed(interpreter.runBlock(getBody().front(), operands, bodyResults)))
    return failure();
  if (bodyResults.size() != getNumResults())
    return emitOpError() << "body yields " << bodyResults.size()
                         << " values, but the fusion has " << getNumResults()
                         << " results";
  results.append(bodyResults.begin(), bodyResults.end());
  return success();
}

} // namespace kiln
