//===- BufferLiveness.cpp - steps, sizes and last uses of a block's values ===//
//
// One walk over the block records, for every value it reads, the last step
// whose top-level op (or an op nested in it) reads it.
//
//===----------------------------------------------------------------------===//

#include "passes/BufferLiveness.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Location.h"
#include "llvm/ADT/STLExtras.h"

using namespace mlir;

namespace kiln {

std::optional<int64_t> getTensorBytes(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor || !tensor.hasStaticShape())
    return std::nullopt;
  Type element = tensor.getElementType();
  if (!element.isIntOrFloat())
    return std::nullopt;
  int64_t elementBytes = (element.getIntOrFloatBitWidth() + 7) / 8;
  return tensor.getNumElements() * elementBytes;
}

BlockLiveness::BlockLiveness(Block &block) : block(block) {
  for (Operation &op : block.without_terminator()) {
    steps[&op] = ops.size();
    ops.push_back(&op);
  }
  computeLastUses();
}

BlockLiveness::BlockLiveness(Block &block, ArrayRef<Operation *> order)
    : block(block), ops(order) {
  for (auto [step, op] : llvm::enumerate(ops))
    steps[op] = step;
  computeLastUses();
}

void BlockLiveness::computeLastUses() {
  auto record = [&](int64_t step, Operation *reader) {
    reader->walk([&](Operation *nested) {
      for (Value operand : nested->getOperands()) {
        int64_t &last = lastUses.try_emplace(operand, -1).first->second;
        last = std::max(last, step);
      }
    });
  };
  for (auto [step, op] : llvm::enumerate(ops))
    record(step, op);
  if (block.mightHaveTerminator())
    record(getEndStep(), block.getTerminator());
}

int64_t BlockLiveness::getStep(Operation *op) const {
  auto it = steps.find(op);
  return it == steps.end() ? -1 : it->second;
}

int64_t BlockLiveness::getDefStep(Value value) const {
  Operation *def = value.getDefiningOp();
  if (!def)
    return -1;
  Operation *top = block.findAncestorOpInBlock(*def);
  return top ? getStep(top) : -1;
}

int64_t BlockLiveness::getLastUse(Value value) const {
  auto it = lastUses.find(value);
  return it == lastUses.end() ? -1 : it->second;
}

Operation *BlockLiveness::getLastUser(Value value) const {
  int64_t step = getLastUse(value);
  if (step < 0 || step >= getEndStep())
    return nullptr;
  return ops[step];
}

void collectLocNames(Location loc, SmallVectorImpl<std::string> &names) {
  loc->walk([&](Location inner) {
    if (auto name = dyn_cast<NameLoc>(inner)) {
      std::string text = name.getName().str();
      if (!llvm::is_contained(names, text))
        names.push_back(text);
    }
    return WalkResult::advance();
  });
}

} // namespace kiln
