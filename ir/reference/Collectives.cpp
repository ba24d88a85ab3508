//===- Collectives.cpp - reference semantics of collectives, one rank -----===//
//
// The reference interpreter runs one process: world size 1, rank 0. There,
// every collective's group is {0}, so all_reduce of any kind (mean included:
// the mean of one value is that value), collective_broadcast from root 0,
// and all_gather or reduce_scatter whose result shape equals the operand
// shape all return their operand. A program written for more ranks (groups
// naming other ranks, a shard or gather factor above 1, a root other than 0,
// send/recv to a peer) cannot run here and is reported on the op rather than
// given made-up numbers; multi-rank collectives are tested against the
// runtime's engines (NCCL, Gloo) instead.
//
//===----------------------------------------------------------------------===//

#include "ir/KilnOps.h"
#include "ir/reference/Support.h"

using namespace mlir;

namespace kiln {
using namespace reference;

namespace {

// Fails unless |groups| is absent or names rank 0 alone.
LogicalResult checkOneRankGroups(Operation *op,
                                 std::optional<DenseIntElementsAttr> groups) {
  if (!groups)
    return success();
  SmallVector<int64_t> ranks;
  for (const APInt &v : groups->getValues<APInt>())
    ranks.push_back(v.getSExtValue());
  if (ranks.size() == 1 && ranks[0] == 0)
    return success();
  return op->emitOpError() << "has groups naming ranks " << formatIndex(ranks)
                           << ", but the reference interpreter runs one rank "
                              "(rank 0 of a world of size 1)";
}

// The identity: the one rank's result is its own operand.
LogicalResult identity(Operation *op, ArrayRef<HostTensor> operands,
                       SmallVectorImpl<HostTensor> &results) {
  FailureOr<HostTensor> result = makeResult(op);
  if (failed(result))
    return failure();
  if (result->shape() != operands[0].shape())
    return op->emitOpError()
           << "has result shape " << formatIndex(result->shape())
           << " but operand shape " << formatIndex(operands[0].shape())
           << ", which takes more than one rank; the reference interpreter "
              "runs one rank (rank 0 of a world of size 1)";
  result->values() = operands[0].values();
  results.push_back(std::move(*result));
  return success();
}

} // namespace

LogicalResult AllReduceOp::evaluate(ArrayRef<HostTensor> operands,
                                    SmallVectorImpl<HostTensor> &results) {
  if (failed(checkOperands(*this, operands)) ||
      failed(checkOneRankGroups(*this, getGroups())))
    return failure();
  return identity(*this, operands, results);
}

LogicalResult ReduceScatterOp::evaluate(ArrayRef<HostTensor> operands,
                                        SmallVectorImpl<HostTensor> &results) {
  if (failed(checkOperands(*this, operands)) ||
      failed(checkOneRankGroups(*this, getGroups())))
    return failure();
  return identity(*this, operands, results);
}

LogicalResult AllGatherOp::evaluate(ArrayRef<HostTensor> operands,
                                    SmallVectorImpl<HostTensor> &results) {
  if (failed(checkOperands(*this, operands)) ||
      failed(checkOneRankGroups(*this, getGroups())))
    return failure();
  return identity(*this, operands, results);
}

LogicalResult CollectiveBroadcastOp::evaluate(ArrayRef<HostTensor> operands,
                                              SmallVectorImpl<HostTensor> &results) {
  if (failed(checkOperands(*this, operands)) ||
      failed(checkOneRankGroups(*this, getGroups())))
    return failure();
  if (getRoot() != 0)
    return emitOpError() << "broadcasts from root rank " << getRoot()
                         << ", but the reference interpreter runs one rank "
                            "(rank 0 of a world of size 1)";
  return identity(*this, operands, results);
}

LogicalResult SendOp::evaluate(ArrayRef<HostTensor>, SmallVectorImpl<HostTensor> &) {
  return emitOpError() << "needs a peer rank (" << getPeer()
                       << "), but the reference interpreter runs one rank "
                          "(rank 0 of a world of size 1)";
}

LogicalResult RecvOp::evaluate(ArrayRef<HostTensor>, SmallVectorImpl<HostTensor> &) {
  return emitOpError() << "needs a peer rank (" << getPeer()
                       << "), but the reference interpreter runs one rank "
                          "(rank 0 of a world of size 1)";
}

} // namespace kiln
