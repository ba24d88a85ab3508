//===- BufferModel.cpp - the buffers of a function body, for planning -----===//
//
// The in-place decisions are made here, from the liveness of the order:
// an update goes over its argument when the argument is last read before the
// op that writes the update, or by that op itself reading it elementwise; a
// result may go over a dying operand of its size when the op reads that
// operand elementwise.
//
//===----------------------------------------------------------------------===//

#include "passes/BufferModel.h"

#include "ir/KilnOps.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/Support/FormatVariadic.h"

namespace kiln {

using mlir::Operation;
using mlir::Value;

namespace {

// The value whose bytes |value| names: through reshapes, which are views.
Value getStorageRoot(Value value) {
  while (auto reshape = value.getDefiningOp<ReshapeOp>())
    value = reshape.getOperand();
  return value;
}

bool sameShape(mlir::Type a, mlir::Type b) {
  auto sa = mlir::dyn_cast<mlir::ShapedType>(a);
  auto sb = mlir::dyn_cast<mlir::ShapedType>(b);
  return sa && sb && sa.getShape() == sb.getShape();
}

} // namespace

// Whether |op| reads operand |operandIndex| only at the element it writes of
// result |resultIndex|, so that the result may overwrite the operand: an
// elementwise op, an all_reduce or collective_broadcast (which the
// collective libraries run in place), or a fusion in which the input reaches
// anything only through elementwise ops of its shape, the result among them.
// (Every element of the result is then computed where the same element of
// the input is read, and nothing else reads the input.)
bool readsElementwise(Operation *op, unsigned operandIndex,
                      unsigned resultIndex) {
  Value operand = op->getOperand(operandIndex);
  if (!sameShape(operand.getType(), op->getResult(resultIndex).getType()))
    return false;
  if (op->hasTrait<mlir::OpTrait::Elementwise>())
    return op->getNumRegions() == 0;
  // NCCL and Gloo all-reduce and broadcast in place (send buffer = receive
  // buffer).
  if (mlir::isa<AllReduceOp, CollectiveBroadcastOp>(op))
    return true;
  auto fusion = mlir::dyn_cast<FusionOp>(op);
  if (!fusion || fusion.getBody().empty())
    return false;
  mlir::Block &body = fusion.getBody().front();
  if (operandIndex >= body.getNumArguments())
    return false;
  llvm::SmallVector<Value> work{body.getArgument(operandIndex)};
  llvm::DenseSet<Operation *> seen;
  bool reachesResult = false;
  while (!work.empty()) {
    Value value = work.pop_back_val();
    for (mlir::OpOperand &use : value.getUses()) {
      Operation *user = use.getOwner();
      if (mlir::isa<YieldOp>(user)) {
        reachesResult |= use.getOperandNumber() == resultIndex;
        continue;
      }
      if (user->getBlock() != &body ||
          !user->hasTrait<mlir::OpTrait::Elementwise>() ||
          user->getNumRegions() != 0)
        return false;
      for (Value result : user->getResults())
        if (!sameShape(result.getType(), operand.getType()))
          return false;
      if (seen.insert(user).second)
        work.append(user->result_begin(), user->result_end());
    }
  }
  return reachesResult;
}

namespace {

// Whether |op| may write result |resultIndex| over the bytes of |root|, which
// it may read at the same step: every read of those bytes (|root| or a view
// of it) is an operand that |op| reads elementwise for that result.
bool canOverwrite(Operation *op, Value root, unsigned resultIndex) {
  bool nestedRead = false;
  op->walk([&](Operation *nested) {
    if (nested == op)
      return;
    for (Value operand : nested->getOperands())
      if (getStorageRoot(operand) == root)
        nestedRead = true;
  });
  if (nestedRead)
    return false;
  for (auto [index, operand] : llvm::enumerate(op->getOperands()))
    if (getStorageRoot(operand) == root &&
        !readsElementwise(op, index, resultIndex))
      return false;
  return true;
}

std::string describeOp(Operation *op, int64_t step) {
  llvm::SmallVector<std::string> names;
  collectLocNames(op->getLoc(), names);
  std::string text =
      llvm::formatv("'{0}' at step {1}", op->getName().getStringRef(), step);
  if (!names.empty())
    text += " (" + names.front() + ")";
  return text;
}

} // namespace

mlir::FailureOr<BufferModel> buildBufferModel(mlir::func::FuncOp func,
                                              const BlockLiveness &liveness,
                                              int64_t alignment,
                                              bool diagnose) {
  BufferModel model;
  mlir::Block &block = func.front();
  Operation *terminator = block.getTerminator();
  int64_t endStep = liveness.getEndStep();

  // The last step that reads each storage root's bytes (through any view).
  llvm::DenseMap<Value, int64_t> rootEnd;
  auto noteReads = [&](Value value) {
    Value root = getStorageRoot(value);
    int64_t last = liveness.getLastUse(value);
    if (last < 0)
      last = liveness.getDefStep(value);
    int64_t &end = rootEnd.try_emplace(root, -1).first->second;
    end = std::max(end, last);
  };
  for (Value arg : block.getArguments())
    noteReads(arg);
  for (Operation *op : liveness.getOps())
    for (Value result : op->getResults())
      noteReads(result);

  for (mlir::BlockArgument arg : block.getArguments()) {
    std::optional<int64_t> bytes = getTensorBytes(arg.getType());
    if (!bytes && !diagnose)
      return mlir::failure();
    if (!bytes)
      return func.emitError()
             << "kiln-plan-buffers cannot size argument " << arg.getArgNumber()
             << " of @" << func.getName()
             << ": expected a statically shaped tensor of integers or floats, "
                "but it is "
             << arg.getType();
    model.argumentBytes += *bytes;
  }

  // Updates in place: the storage root of the update -> argument index.
  llvm::DenseMap<Value, int64_t> inArgument;
  for (unsigned j = 0, e = func.getNumResults(); j < e; ++j) {
    auto updates = func.getResultAttrOfType<mlir::IntegerAttr>(
        j, KilnDialect::kUpdatesAttrName);
    if (!updates)
      continue;
    int64_t i = updates.getInt();
    mlir::BlockArgument arg = block.getArgument(i);
    Value update = terminator->getOperand(j);
    if (update == arg)
      continue; // returned unchanged: already in its buffer
    std::string argument = llvm::formatv("argument {0}", i);
    if (auto name = func.getArgAttrOfType<mlir::StringAttr>(
            i, KilnDialect::kNameAttrName))
      argument += " ('" + name.getValue().str() + "')";
    // Why the update cannot go over its argument, said on |at|.
    auto refuse = [&](Operation *at, const llvm::Twine &why) {
      if (diagnose)
        at->emitRemark() << llvm::formatv(
                                "result {0} of @{1} (kiln.updates = {2})", j,
                                func.getName(), i)
                         << " is not updated in place: " << why;
    };
    Value root = getStorageRoot(update);
    if (auto other = mlir::dyn_cast<mlir::BlockArgument>(root)) {
      refuse(func, llvm::formatv("it is argument {0}{1}, whose buffer stays "
                                 "the caller's",
                                 other.getArgNumber(),
                                 root == update ? "" : " reshaped"));
      continue;
    }
    Operation *producer = block.findAncestorOpInBlock(*root.getDefiningOp());
    int64_t step = liveness.getStep(producer);
    if (inArgument.count(root)) {
      refuse(producer, llvm::formatv("the same value already updates "
                                     "argument {0} in place",
                                     inArgument.lookup(root)));
      continue;
    }
    int64_t updateBytes = getTensorBytes(root.getType()).value_or(-1);
    int64_t argBytes = getTensorBytes(arg.getType()).value_or(-1);
    if (updateBytes != argBytes) {
      refuse(producer, llvm::formatv("its buffer has {0} bytes but {1} has {2}",
                                     updateBytes, argument, argBytes));
      continue;
    }
    int64_t readEnd = rootEnd.lookup(arg);
    if (readEnd > step) {
      std::string reader =
          readEnd >= endStep
              ? std::string("is returned by the function as well")
              : "is still read by " +
                    describeOp(liveness.getOps()[readEnd], readEnd);
      refuse(producer, argument + " " + reader +
                           ", after this op writes the update at step " +
                           llvm::Twine(step));
      continue;
    }
    unsigned resultIndex = mlir::cast<mlir::OpResult>(root).getResultNumber();
    if (readEnd == step && !canOverwrite(producer, arg, resultIndex)) {
      refuse(producer, "this op reads " + argument +
                           " while it writes the update, and not only "
                           "elementwise");
      continue;
    }
    inArgument[root] = i;
  }

  // Arena buffers for the rest.
  std::vector<planner::Buffer> &buffers = model.buffers;
  llvm::DenseMap<Value, int64_t> &bufferOf = model.bufferOf;
  auto &aliases = model.aliases;
  for (auto [stepIndex, op] : llvm::enumerate(liveness.getOps())) {
    int64_t step = stepIndex;
    llvm::SmallVector<int64_t> &opAliases = aliases.emplace_back();
    llvm::DenseSet<int64_t> claimed;
    for (Value result : op->getResults()) {
      unsigned k = mlir::cast<mlir::OpResult>(result).getResultNumber();
      Value root = getStorageRoot(result);
      if (auto arg = mlir::dyn_cast<mlir::BlockArgument>(root)) {
        opAliases.push_back(arg.getArgNumber());
        continue;
      }
      if (inArgument.count(root)) {
        opAliases.push_back(inArgument.lookup(root));
        continue;
      }
      opAliases.push_back(-1);
      std::optional<int64_t> bytes = getTensorBytes(result.getType());
      if (!bytes && !diagnose)
        return mlir::failure();
      if (!bytes)
        return op->emitError()
               << "kiln-plan-buffers cannot size result " << k
               << ": expected a statically shaped tensor of integers or "
                  "floats, but it is "
               << result.getType();
      planner::Buffer buffer;
      buffer.name = llvm::formatv("result {0} of {1}", k, describeOp(op, step));
      buffer.size = *bytes;
      buffer.alignment = alignment;
      buffer.start = step;
      int64_t last = liveness.getLastUse(result);
      buffer.end = last < 0 ? step : last;
      if (auto reshape = mlir::dyn_cast<ReshapeOp>(op)) {
        buffer.mustAlias = bufferOf.lookup(reshape.getOperand());
      } else {
        for (auto [index, operand] : llvm::enumerate(op->getOperands())) {
          auto found = bufferOf.find(operand);
          if (found == bufferOf.end() || claimed.contains(found->second) ||
              buffers[found->second].size != buffer.size ||
              rootEnd.lookup(getStorageRoot(operand)) != step ||
              !canOverwrite(op, getStorageRoot(operand), k))
            continue;
          buffer.mayReuse = found->second;
          claimed.insert(found->second);
          break;
        }
      }
      bufferOf[result] = buffers.size();
      buffers.push_back(std::move(buffer));
    }
  }

  return model;
}

} // namespace kiln
