//===- BufferLiveness.h - steps, sizes and last uses of a block's values -===//
//
// What kiln-schedule, kiln-plan-buffers and the buffer-assignment report
// share: the byte size of a tensor, and the liveness of the values of a
// function body in which every top-level op is one kernel (a kiln.fusion
// region or a single op) writing its results' buffers. Top-level op i runs
// at step i and the terminator at the last step, so a returned value lives
// to the end; a use inside a region counts as a use by its top-level op.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_PASSES_BUFFERLIVENESS_H
#define KILN_PASSES_BUFFERLIVENESS_H

#include "mlir/IR/Block.h"
#include "mlir/IR/Operation.h"
#include "mlir/IR/Value.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallVector.h"

#include <cstdint>
#include <optional>

namespace kiln {

/// Bytes of a statically shaped tensor of integers or floats (an i1 element
/// takes one byte, as in memory); nullopt for any other type.
std::optional<int64_t> getTensorBytes(mlir::Type type);

/// Steps and last uses of the values defined in one block.
class BlockLiveness {
public:
  explicit BlockLiveness(mlir::Block &block);
  /// The liveness |block| would have if its ops (all but the terminator)
  /// ran in |order| instead.
  BlockLiveness(mlir::Block &block, llvm::ArrayRef<mlir::Operation *> order);

  /// The block's ops without the terminator, in order: op i runs at step i.
  llvm::ArrayRef<mlir::Operation *> getOps() const { return ops; }
  /// The terminator's step: one past the last op.
  int64_t getEndStep() const { return ops.size(); }
  /// The step of top-level op |op|; -1 for an op not in the block.
  int64_t getStep(mlir::Operation *op) const;
  /// The step of the top-level op that defines |value|; -1 for a block
  /// argument.
  int64_t getDefStep(mlir::Value value) const;
  /// The last step that reads |value| (getEndStep() when the terminator
  /// does); -1 when nothing reads it.
  int64_t getLastUse(mlir::Value value) const;
  /// The top-level op at |step| that reads |value| last; null if none (or
  /// the terminator).
  mlir::Operation *getLastUser(mlir::Value value) const;

private:
  void computeLastUses();

  mlir::Block &block;
  llvm::SmallVector<mlir::Operation *> ops;
  llvm::DenseMap<mlir::Operation *, int64_t> steps;
  llvm::DenseMap<mlir::Value, int64_t> lastUses;
};

/// Appends the names in |loc| (NameLoc names, through fused and call-site
/// locations), without repeats; the graph importer names each op after its
/// node, and passes fuse the locations of what they merge.
void collectLocNames(mlir::Location loc,
                     llvm::SmallVectorImpl<std::string> &names);

} // namespace kiln

#endif // KILN_PASSES_BUFFERLIVENESS_H
