//===- FusionLegality.cpp - which clusters form one kernel ----------------===//
//
// FusionPlan's legality rules (see FusionPlan.h): those of the kernels the
// code generators write. A loop kernel iterates over one output shape; a
// reduction kernel works row by row over one shape and one set of reduced
// dimensions; a scatter kernel stores its updates where its indices say.
//
//===----------------------------------------------------------------------===//

#include "passes/FusionPlan.h"

#include "ir/KilnOps.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallPtrSet.h"

#include <algorithm>

namespace kiln::fusion {

using namespace mlir;

namespace {

ArrayRef<int64_t> shapeOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getShape();
}

int64_t elementsOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getNumElements();
}

} // namespace

bool FusionPlan::legal(int c) const {
  const Cluster &cluster = clusters_[c];
  // kiln-autodiff's recomputed clones (kiln.remat) join only later ops'
  // kernels: with an op before them (a forward sibling, a GEMM) they would
  // be computed in the forward pass again and kept, as without remat.
  bool plain = false;
  if (anyRemat_)
    examined_ += cluster.ops.size();
  for (Operation *op : anyRemat_ ? ArrayRef<Operation *>(cluster.ops)
                                 : ArrayRef<Operation *>()) { // in block order
    if (homeOf(op) != c)
      continue; // a copy of a cheap producer, computed here anyway
    bool remat = infoOf(op).remat;
    if (remat && plain)
      return false;
    plain |= !remat;
  }
  if (cluster.cls != ClusterClass::Fusible)
    return true;
  ++pricings_;
  int64_t inputs = readsOf(c).values;
  SmallVector<Value> exports = exportsOf(c);
  if (inputs > limits_.maxInputs ||
      static_cast<int64_t>(exports.size()) > limits_.maxOutputs)
    return false;
  // A kernel that writes an argument's update may read that argument only
  // elementwise, element by element as it writes it; otherwise (a broadcast
  // of the argument, a transpose, a reduce) one thread would read what
  // another has already overwritten, and kiln-plan-buffers would give the
  // update a buffer of its own and a copy after every step.
  SmallVector<Value> updated;
  for (Value v : exports)
    if (Value arg = updates_.lookup(v);
        arg && !llvm::is_contained(updated, arg))
      updated.push_back(arg);
  if (!updated.empty()) {
    // Values of the kernel that hold element j of an updated argument at
    // element j, and which arguments: the argument itself, and what
    // elementwise ops of its size make of it. One walk for all of them.
    DenseMap<Value, SmallVector<Value, 1>> aligned;
    for (Value arg : updated)
      aligned[arg] = {arg};
    examined_ += cluster.ops.size();
    for (Operation *op : cluster.ops) { // in block order
      SmallVector<Value, 1> reads;
      for (Value operand : op->getOperands()) {
        auto it = aligned.find(traceReshapes(operand));
        if (it == aligned.end())
          continue;
        for (Value arg : it->second)
          if (!llvm::is_contained(reads, arg))
            reads.push_back(arg);
      }
      if (reads.empty())
        continue;
      if (!op->hasTrait<OpTrait::Elementwise>())
        return false;
      for (Value arg : reads) {
        int64_t count = cast<ShapedType>(arg.getType()).getNumElements();
        if (!llvm::all_of(op->getResultTypes(), [&](Type t) {
              auto shaped = dyn_cast<ShapedType>(t);
              return shaped && shaped.getNumElements() == count;
            }))
          return false;
      }
      for (Value result : op->getResults())
        aligned[result] = reads;
    }
  }
  ArrayRef<Operation *> reduces = summaryOf(c).reduces;
  if (!legalScatter(c, !reduces.empty()))
    return false;
  if (!reduces.empty())
    return legalReduction(c, reduces);
  // A loop kernel iterates over its results: they have one element count.
  // A horizontal kernel runs each part over its own.
  if (cluster.horizontal || exports.empty())
    return true;
  int64_t count = elementsOf(exports.front());
  return llvm::all_of(exports, [&](Value v) { return elementsOf(v) == count; });
}

// A scatter_add kernel works a result row at a time, listing the index
// positions that name the row (the CUDA scatter-rows layout; the CPU tiles
// rows the same way): at most one scatter_add, in a kernel without
// reduces; its indices and updates come from outside the kernel (computing
// them inside would redo them for every row), its operand too or a splat
// constant; and what the kernel makes of its result is elementwise ops of
// the result's shape, each element read at its own indices (no broadcast,
// transpose or copy of the rows elsewhere).
bool FusionPlan::legalScatter(int c, bool hasReduces) const {
  const Cluster &cluster = clusters_[c];
  ArrayRef<Operation *> scatters = summaryOf(c).scatters;
  if (scatters.empty())
    return true;
  if (scatters.size() > 1 || hasReduces)
    return false;
  auto scatter = cast<ScatterAddOp>(scatters.front());
  if (internal(scatter.getIndices(), c) || internal(scatter.getUpdates(), c))
    return false;
  if (internal(scatter.getOperand(), c) &&
      !isSmallConstant(traceReshapes(scatter.getOperand()).getDefiningOp()))
    return false;
  ArrayRef<int64_t> shape = shapeOf(scatter.getResult());
  SmallPtrSet<Operation *, 16> after{scatter};
  examined_ += cluster.ops.size();
  for (Operation *op : cluster.ops) { // in block order
    if (op == scatter.getOperation())
      continue;
    bool reads = llvm::any_of(op->getOperands(), [&](Value v) {
      return after.contains(v.getDefiningOp());
    });
    if (!reads)
      continue;
    if (!isa<ScalarSemantics>(op) ||
        llvm::any_of(op->getResults(),
                     [&](Value r) { return shapeOf(r) != shape; }))
      return false;
    after.insert(op);
  }
  return true;
}

// The row-group partials of a reduction kernel (Limits::rowGroupPartials):
// the sums reduce(reshape(v, [G, S, C]), dims=[1]) with S <= 32 whose |v|
// (through reshapes) has the kernel's row shape |full| = [R..., C], its
// rows reduced over their last dimension (a layer norm's dx kernel beside
// its scale and bias gradients' first stage after kiln-split-reductions),
// or reduce(v, dims=[1]) of such a |v| itself when the rows are [G, S, C]
// (kiln-split-reductions' reshape of [B, T, C] to [B, T, C] folds away).
// Partition |reduces| into the row reduces and such partials; the partials
// are empty unless every reduce that is not one shares one operand shape
// and reduced dimensions, the last only.
static void splitRowGroupPartials(ArrayRef<Operation *> reduces,
                                  SmallVectorImpl<Operation *> &rows,
                                  SmallVectorImpl<Operation *> &partials) {
  auto isCandidate = [](ReduceOp reduce) {
    ArrayRef<int64_t> s = shapeOf(reduce.getOperand());
    return reduce.getKind() == ReduceKind::sum && s.size() == 3 && s[1] <= 32 &&
           reduce.getDimensions() == ArrayRef<int64_t>{1};
  };
  for (Operation *op : reduces)
    (isCandidate(cast<ReduceOp>(op)) ? partials : rows).push_back(op);
  auto keepAll = [&] {
    rows.assign(reduces.begin(), reduces.end());
    partials.clear();
  };
  if (rows.empty() || partials.empty())
    return keepAll();
  auto first = cast<ReduceOp>(rows.front());
  ArrayRef<int64_t> full = shapeOf(first.getOperand());
  int64_t rank = full.size();
  if (rank < 2 || first.getDimensions() != ArrayRef<int64_t>{rank - 1})
    return keepAll();
  int64_t rowCount = 1;
  for (int64_t d : full.drop_back())
    rowCount *= d;
  for (Operation *op : partials) {
    auto reduce = cast<ReduceOp>(op);
    ArrayRef<int64_t> s = shapeOf(reduce.getOperand());
    if (shapeOf(traceReshapes(reduce.getOperand())) != full ||
        s[2] != full.back() || s[0] * s[1] != rowCount)
      return keepAll();
  }
}

// A reduction kernel works row by row: every reduce has the same operand
// shape F and reduced dimensions R, leaving the kept shape K (besides
// row-group partials, when enabled: results of shape [G, C], see
// splitRowGroupPartials, and elementwise ops of that shape after them,
// which depend on no other reduce). Ops before the
// reduces are index maps and elementwise ops of any shape; ops after them
// work on K, or on F after a broadcast of a K value along the kept
// dimensions (the row is then read again after its reduction: the rows of
// the kernel's inputs of shape F, which a CUDA kernel caches in shared
// memory, must fit the shared-memory budget together). Results have shape
// F or K.
bool FusionPlan::legalReduction(int c, ArrayRef<Operation *> allReduces) const {
  SmallVector<Operation *> reduces, partials;
  if (limits_.rowGroupPartials)
    splitRowGroupPartials(allReduces, reduces, partials);
  else
    reduces.assign(allReduces.begin(), allReduces.end());
  SmallVector<int64_t> partialShape;
  if (!partials.empty())
    partialShape.assign(shapeOf(partials.front()->getResult(0)).begin(),
                        shapeOf(partials.front()->getResult(0)).end());
  for (Operation *op : partials)
    if (shapeOf(op->getResult(0)) != ArrayRef<int64_t>(partialShape))
      return false;
  auto first = cast<ReduceOp>(reduces.front());
  SmallVector<int64_t> full(shapeOf(first.getOperand()));
  SmallVector<int64_t> dims(first.getDimensions());
  llvm::sort(dims);
  for (Operation *op : ArrayRef<Operation *>(reduces).drop_front()) {
    auto reduce = cast<ReduceOp>(op);
    SmallVector<int64_t> other(reduce.getDimensions());
    llvm::sort(other);
    if (shapeOf(reduce.getOperand()) != ArrayRef<int64_t>(full) ||
        other != dims)
      return false;
  }
  SmallVector<int64_t> kept, keptDims;
  int64_t rowElements = 1;
  for (int64_t d = 0, e = full.size(); d < e; ++d) {
    if (llvm::is_contained(dims, d)) {
      rowElements *= full[d];
    } else {
      kept.push_back(full[d]);
      keptDims.push_back(d);
    }
  }
  auto isRowShape = [&](Value v) {
    ArrayRef<int64_t> s = shapeOf(v);
    return s == ArrayRef<int64_t>(full) || s == ArrayRef<int64_t>(kept);
  };
  auto isPartialShape = [&](Value v) {
    return !partials.empty() && shapeOf(v) == ArrayRef<int64_t>(partialShape);
  };
  for (Value v : exportsOf(c))
    if (!isRowShape(v) && !isPartialShape(v))
      return false;

  const Cluster &cluster = clusters_[c];
  // Ops that depend on a reduce in the kernel.
  SmallPtrSet<Operation *, 16> after;
  // Ops that depend on a row-group partial (partials included).
  SmallPtrSet<Operation *, 8> afterPartial(partials.begin(), partials.end());
  bool rowReused = false;
  // The bytes of one row of every input of shape F (each input once).
  llvm::SmallDenseSet<Value, 8> rowInputs;
  int64_t rowBytes = 0;
  examined_ += cluster.ops.size();
  for (Operation *op : cluster.ops) {
    const NodeInfo &info = infoOf(op);
    for (const Operand &operand : info.operands) {
      Value v = operand.value;
      if (internal(operand, c) || shapeOf(v) != ArrayRef<int64_t>(full) ||
          !rowInputs.insert(operand.source).second)
        continue;
      rowBytes += rowElements * (tensorBytes(v.getType()) /
                                 std::max<int64_t>(1, elementsOf(v)));
    }
    if (isa<ReduceOp>(op) && afterPartial.contains(op)) {
      // A partial: its rows are built beside the kernel's rows, before
      // their reductions are known.
      Operation *def = info.operands[0].sourceOp;
      if (def && (isa<ReduceOp>(def) || after.contains(def)))
        return false;
      continue;
    }
    bool dependsOnReduce = false, dependsOnPartial = false;
    for (const Operand &operand : info.operands) {
      if (!internal(operand, c))
        continue;
      Value v = operand.value;
      Operation *def = operand.sourceOp;
      if (afterPartial.contains(def)) {
        dependsOnPartial = true;
        if (v.getDefiningOp() != def)
          return false;
        continue;
      }
      if (!isa<ReduceOp>(def) && !after.contains(def))
        continue;
      dependsOnReduce = true;
      if (v.getDefiningOp() != def) // a reshape of a reduced value
        return false;
    }
    if (dependsOnPartial) {
      // An elementwise epilogue of the partials, of their shape.
      if (dependsOnReduce || !isa<ScalarSemantics>(op) ||
          !llvm::all_of(op->getResults(), isPartialShape))
        return false;
      afterPartial.insert(op);
      continue;
    }
    if (!dependsOnReduce)
      continue;
    after.insert(op);
    if (isa<ReduceOp>(op))
      continue;
    if (!isRowShape(op->getResult(0)))
      return false;
    if (auto broadcast = dyn_cast<BroadcastInDimOp>(op)) {
      if (shapeOf(broadcast.getOperand()) != ArrayRef<int64_t>(kept) ||
          shapeOf(broadcast.getResult()) != ArrayRef<int64_t>(full) ||
          broadcast.getBroadcastDimensions() != ArrayRef<int64_t>(keptDims))
        return false;
      rowReused = true;
      continue;
    }
    if (!isa<ScalarSemantics>(op))
      return false;
  }
  return !rowReused || rowBytes <= limits_.sharedMemoryBytes;
}

} // namespace kiln::fusion
