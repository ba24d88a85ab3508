//===- CudaBlockLayouts.cpp - scatter rows and row groups -----------------===//
//
// The two layouts that give a block one unit of rows and walk the row's
// columns in passes, every thread making the same passes (barriers inside
// need that): scatter rows (an embedding's gradient: a block per table row
// lists the index positions naming it) and row groups (a layer norm's dx
// beside its scale and bias gradients' partial sums: a block per group of
// rows). CudaEmitter.h describes both; this file builds them.
//
//===----------------------------------------------------------------------===//

#include "codegen/cuda/CudaLayouts.h"
#include "codegen/cuda/CudaPrinter.h"

#include "ir/ScalarSemantics.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SmallPtrSet.h"

#include <algorithm>

using namespace mlir;

namespace kiln::cuda_emitter {

namespace {

// The most columns a thread of a block layout (scatter rows, row groups)
// keeps per pass over a row: its registers per column are the layout's
// accumulators.
constexpr int64_t kBlockMaxColumnsPerThread = 4;

// Rows of a group the row-group layout builds per iteration when the
// group's rows divide by it.
constexpr int64_t kRowGroupRowsPerStep = 2;

// The most values one kiln.allreduce_n call reduces (its shared memory:
// kMaxMergedAllreduces x 32 accumulators).
constexpr int64_t kMaxMergedAllreduces = 8;

// A block's passes over a row of |columns| columns, the same passes in
// every thread (layouts with barriers inside need that): per pass p
// (stepping by |threads| x |perThread|), thread |tid| keeps the columns
// p + l x |threads| + |tid| for l < |perThread|, clamped to the last
// (columns, valid to load at) and whether each is in the row (inRange:
// store only then). The values are built at the start of the pass body.
struct ColumnPasses {
  scf::ForOp pass;
  SmallVector<Value, 4> columns, inRange;
};

ColumnPasses buildColumnPasses(OpBuilder &b, Location loc, Value threads,
                               Value tid, int64_t columns, int64_t perThread) {
  auto constant = [&](OpBuilder &cb, int64_t v) -> Value {
    return cb.create<arith::ConstantIndexOp>(loc, v);
  };
  ColumnPasses passes;
  passes.pass = b.create<scf::ForOp>(
      loc, constant(b, 0), constant(b, columns),
      b.create<arith::MulIOp>(loc, threads, constant(b, perThread)));
  OpBuilder pb = OpBuilder::atBlockTerminator(passes.pass.getBody());
  for (int64_t l = 0; l < perThread; ++l) {
    Value column = pb.create<arith::AddIOp>(
        loc, passes.pass.getInductionVar(),
        pb.create<arith::AddIOp>(
            loc, pb.create<arith::MulIOp>(loc, threads, constant(pb, l)), tid));
    passes.inRange.push_back(pb.create<arith::CmpIOp>(
        loc, arith::CmpIPredicate::slt, column, constant(pb, columns)));
    passes.columns.push_back(
        pb.create<arith::MinSIOp>(loc, column, constant(pb, columns - 1)));
  }
  return passes;
}

// The block layouts' loop over their units (a scatter's table rows, a
// row-group layout's groups): a block per unit, striding by the grid
// (every thread of a block makes every iteration, as the barriers inside
// need), with the thread's index in its block and the block's threads.
struct BlockUnits {
  scf::ForOp loop;
  Value tid, threads;
};

BlockUnits buildBlockUnits(OpBuilder &b, Location loc, Intrinsics &intrinsics,
                           int64_t units) {
  BlockUnits u;
  Value unit = intrinsics.index(b, loc, "kiln.block");
  Value unitCount = intrinsics.index(b, loc, "kiln.blocks");
  u.tid = intrinsics.index(b, loc, "kiln.tid");
  u.threads = intrinsics.index(b, loc, "kiln.block_threads");
  u.loop = b.create<scf::ForOp>(
      loc, unit, b.create<arith::ConstantIndexOp>(loc, units), unitCount);
  return u;
}

// Merges, in |body| (its own ops, not nested ones), runs of consecutive
// block allreduces of one kind and type, none of whose operands depends on
// an earlier one's result, into one kiln.allreduce_n call at the last one's
// place (up to kMaxMergedAllreduces values behind one pair of barriers,
// each reduced exactly as kiln_block_allreduce reduces it); what used an
// earlier result before the last moves after the call. Returns the block
// allreduce calls left.
int64_t mergeBlockAllreduces(Block *body, Intrinsics &intrinsics) {
  constexpr StringLiteral prefix = "kiln.allreduce.block.";
  SmallVector<func::CallOp> calls;
  for (Operation &op : *body)
    if (auto call = dyn_cast<func::CallOp>(op))
      if (cudaIntrinsicName(call.getCallee()).starts_with(prefix))
        calls.push_back(call);
  auto kindOf = [&](func::CallOp call) {
    return cudaIntrinsicName(call.getCallee()).drop_front(prefix.size());
  };
  // |op|'s ancestor among |body|'s own ops is in |set|.
  auto within = [&](Operation *op, const DenseSet<Operation *> &set) {
    Operation *top = op ? body->findAncestorOpInBlock(*op) : nullptr;
    return top && set.contains(top);
  };
  int64_t left = calls.size();
  for (size_t i = 0; i < calls.size();) {
    func::CallOp first = calls[i];
    StringRef kind = kindOf(first);
    Type type = first.getResult(0).getType();
    SmallVector<func::CallOp> group = {first};
    // The ops after the first that depend on a member's result, in order;
    // |movedBefore| of them lie before the last member taken.
    DenseSet<Operation *> dependent{first.getOperation()};
    SmallVector<Operation *> moved;
    size_t movedBefore = 0;
    size_t j = i + 1;
    Operation *op = first->getNextNode();
    for (; j < calls.size() && int64_t(group.size()) < kMaxMergedAllreduces;
         ++j) {
      func::CallOp next = calls[j];
      for (; op != next.getOperation(); op = op->getNextNode()) {
        bool uses = false;
        op->walk([&](Operation *inner) {
          for (Value v : inner->getOperands())
            uses |= within(v.getDefiningOp(), dependent);
        });
        if (uses) {
          dependent.insert(op);
          moved.push_back(op);
        }
      }
      if (kindOf(next) != kind || next.getResult(0).getType() != type ||
          within(next.getOperand(0).getDefiningOp(), dependent))
        break;
      group.push_back(next);
      dependent.insert(next.getOperation());
      movedBefore = moved.size();
      op = next->getNextNode();
    }
    i += group.size();
    if (group.size() < 2)
      continue;
    func::CallOp last = group.back();
    SmallVector<Value> operands;
    for (func::CallOp call : group)
      operands.push_back(call.getOperand(0));
    OpBuilder b(last);
    SmallVector<Value> results = intrinsics.call(
        b, last.getLoc(), ("kiln.allreduce_n.block." + kind).str(), operands,
        SmallVector<Type>(group.size(), type));
    for (auto [call, result] : llvm::zip(group, results))
      call.getResult(0).replaceAllUsesWith(result);
    Operation *after = results.front().getDefiningOp();
    for (Operation *m : ArrayRef<Operation *>(moved).take_front(movedBefore)) {
      m->moveAfter(after);
      after = m;
    }
    for (func::CallOp call : group)
      call.erase();
    left -= group.size() - 1;
  }
  return left;
}

// The row-group layout's block: kCudaBlockThreads, or as many threads as
// the row has columns (rounded up to a warp) up to 1024.
unsigned rowGroupBlockThreads(int64_t columns) {
  if (columns <= int64_t(kCudaBlockThreads))
    return kCudaBlockThreads;
  return unsigned(std::min<int64_t>(1024, (columns + 31) / 32 * 32));
}

} // namespace

//===----------------------------------------------------------------------===//
// Scatter rows
//===----------------------------------------------------------------------===//

// Whether every use of |scatter| inside the fusion, up to the yield, is an
// elementwise op: those read it at the indices they are evaluated at, where
// the layout seeds the row's sums. A reshape, pad, slice or transpose
// computes other index values, and the element emitter would evaluate the
// scatter there again by scanning every position in each thread.
static bool readAtItsOwnIndices(ScatterAddOp scatter) {
  SmallVector<Value> work{scatter.getResult()};
  llvm::SmallPtrSet<Operation *, 8> seen;
  while (!work.empty()) {
    Value v = work.pop_back_val();
    for (Operation *user : v.getUsers()) {
      if (isa<YieldOp>(user))
        continue;
      if (!isa<ScalarSemantics>(user) || user->getNumResults() != 1 ||
          cast<ShapedType>(user->getResult(0).getType()).getShape() !=
              cast<ShapedType>(scatter.getType()).getShape())
        return false;
      if (seen.insert(user).second)
        work.push_back(user->getResult(0));
    }
  }
  return true;
}

// The nest must reach exactly one scatter_add, of rank >= 2 and of the
// nest's shape, read only by elementwise ops, and no reduction the element
// or row layout would take; the indices must be a fusion input of integers
// (the block scans them in memory), fewer than 2^32 of them (list slots
// are 32-bit).
std::pair<ScatterAddOp, unsigned>
scatterRowsOf(const LoopNest &nest, const NestUses &uses, FusionOp fusion) {
  if (uses.scatters.size() != 1 || uses.elementReduce || uses.rowReduce)
    return {};
  ScatterAddOp scatter = uses.scatters.front();
  if (!readAtItsOwnIndices(scatter))
    return {};
  auto type = cast<RankedTensorType>(scatter.getType());
  auto indices = dyn_cast<BlockArgument>(scatter.getIndices());
  if (!ElementEmitter::isTiledScatter(scatter) ||
      type.getShape() != ArrayRef<int64_t>(nest.shape) || !indices ||
      indices.getOwner() != &fusion.getBody().front() ||
      cast<RankedTensorType>(indices.getType()).getNumElements() >=
          (int64_t(1) << 32))
    return {};
  return {scatter, indices.getArgNumber()};
}

void buildScatterRowsLayout(CudaKernelBuilder &k, const LoopNest &nest,
                            ScatterAddOp scatter, unsigned indicesInput) {
  // A block per row of the result (all but its last dimension); per pass
  // over the row's columns, each thread keeps |perThread| columns (clamped
  // to the last; stores only in range) and the block lists, chunk by chunk,
  // the index positions naming the row (kiln.scatter_collect), whose
  // updates every thread adds.
  OpBuilder &b = k.b;
  Location loc = k.loc;
  ArrayRef<int64_t> shape = nest.shape;
  ArrayRef<int64_t> unitShape = shape.drop_back();
  int64_t units = product(unitShape), columns = shape.back();
  int64_t perThread = std::clamp<int64_t>(
      ceilDiv(columns, kCudaBlockThreads), 1, kBlockMaxColumnsPerThread);
  BlockUnits rows = buildBlockUnits(b, loc, k.intrinsics, units);
  Value tid = rows.tid, threads = rows.threads;
  scf::ForOp loop = rows.loop;
  OpBuilder ub = OpBuilder::atBlockTerminator(loop.getBody());
  SmallVector<Value, 4> outer =
      delinearizeIndex(ub, loc, loop.getInductionVar(), unitShape);
  // Every thread makes the same passes (the chunk loop's barriers).
  ColumnPasses passes =
      buildColumnPasses(ub, loc, threads, tid, columns, perThread);
  OpBuilder nb = OpBuilder::atBlockTerminator(passes.pass.getBody());
  ArrayRef<Value> cols = passes.columns, inRange = passes.inRange;
  int64_t positions =
      cast<RankedTensorType>(scatter.getIndices().getType()).getNumElements();
  Value target = outer.front();
  Value indicesBuffer = k.args()[indicesInput];
  ElementEmitter emitter(k.model, k.hooks, nb);
  SmallVector<Value, 4> sums = emitter.emitScatterRows(
      scatter, outer, cols, k.intrinsics.index(nb, loc, "kiln.scatter_chunk"),
      [&](OpBuilder &cb, Location cl, Value chunk) {
        return k.intrinsics.call(
            cb, cl, "kiln.scatter_collect",
            {indicesBuffer, chunk, k.constant(cb, positions), target},
            {cb.getIndexType()})[0];
      },
      [&](OpBuilder &cb, Location cl, Value position) {
        return k.intrinsics.call(cb, cl, "kiln.scatter_match", {position},
                                 {cb.getIndexType()})[0];
      });
  for (int64_t l = 0; l < perThread; ++l) {
    SmallVector<Value, 4> ivs(outer);
    ivs.push_back(cols[l]);
    emitter.seedScatterValue(scatter, ivs, sums[l]);
    SmallVector<Value> values;
    for (unsigned result : nest.results)
      values.push_back(emitter.emit(k.yield.getOperand(result), ivs));
    auto ifOp = nb.create<scf::IfOp>(loc, inRange[l], /*withElseRegion=*/false);
    OpBuilder ib = ifOp.getThenBodyBuilder();
    for (auto [result, v] : llvm::zip(nest.results, values))
      k.store(ib, loc, result, v, ivs);
  }
  k.kernel.layouts.push_back("scatter.block");
  CudaLaunchRule &launch = k.kernel.launch;
  launch.maxBlocks = std::max<uint64_t>(launch.maxBlocks, units);
  // A row's chain: per chunk of positions, the index loads, then the
  // matches' update loads (on average positions / rows per row).
  uint64_t chunk = uint64_t(kCudaBlockThreads) * 8;
  k.recordChain(2 * ceilDiv(positions, chunk) +
                    ceilDiv(positions, std::max<int64_t>(shape.front(), 1)),
                uint64_t(units) * kCudaBlockThreads);
}

//===----------------------------------------------------------------------===//
// Row groups
//===----------------------------------------------------------------------===//

// The value of the row shape |rows| that a row-group partial sums: the
// operand of its reshape to [G, S, C], or its operand itself when that has
// the row shape (rows [G, S, C]); null for any other operand.
static Value rowShapedOperand(ReduceOp partial, ArrayRef<int64_t> rows) {
  Value operand = partial.getOperand();
  if (auto reshape = operand.getDefiningOp<ReshapeOp>())
    operand = reshape.getOperand();
  if (cast<RankedTensorType>(operand.getType()).getShape() == rows)
    return operand;
  return nullptr;
}

std::optional<RowGroupPlan> rowGroupPlanOf(const KernelModel &model,
                                           ArrayRef<NestUses> uses,
                                           YieldOp yield) {
  if (model.nests.size() != 2)
    return std::nullopt;
  for (unsigned r = 0; r < 2; ++r) {
    const LoopNest &rows = model.nests[r], &parts = model.nests[1 - r];
    if (!uses[r].rowReduce || uses[r].elementReduce ||
        !uses[r].scatters.empty() || rows.shape.size() < 2 ||
        parts.shape.size() != 2 || parts.shape[1] != rows.shape.back())
      continue;
    RowGroupPlan plan;
    plan.rowNest = r;
    plan.partialNest = 1 - r;
    plan.groups = parts.shape[0];
    plan.columns = parts.shape[1];
    int64_t rowCount = product(ArrayRef<int64_t>(rows.shape).drop_back());
    // Everything the partial results reach: the partials, elementwise ops
    // of [G, C] after them, and whatever the partials' operands read.
    bool ok = true;
    llvm::SmallPtrSet<Operation *, 16> seen;
    SmallVector<Value> work;
    for (unsigned result : parts.results)
      work.push_back(yield.getOperand(result));
    while (ok && !work.empty()) {
      Value v = work.pop_back_val();
      Operation *op = v.getDefiningOp();
      if (!op || !seen.insert(op).second)
        continue;
      if (auto reduce = dyn_cast<ReduceOp>(op)) {
        ArrayRef<int64_t> s =
            cast<RankedTensorType>(reduce.getOperand().getType()).getShape();
        if (reduce.getKind() != ReduceKind::sum ||
            reduce.getDimensions() != ArrayRef<int64_t>{1} || s.size() != 3 ||
            s[0] != plan.groups || s[2] != plan.columns ||
            s[0] * s[1] != rowCount ||
            !isa<FloatType>(reduce.getType().getElementType()) ||
            (plan.rowsPerGroup && plan.rowsPerGroup != s[1])) {
          ok = false;
          break;
        }
        plan.rowsPerGroup = s[1];
        if (!llvm::is_contained(plan.partials, reduce))
          plan.partials.push_back(reduce);
        // A value of the row shape (reshaped to [G, S, C], or itself when
        // the rows are [G, S, C]: kiln-split-reductions' reshape then
        // folds away) is built at the rows' indices; any other operand (a
        // fusion input, the reshape of an argument kiln-fuse left outside)
        // at the group's.
        if (rowShapedOperand(reduce, rows.shape))
          continue;
        work.push_back(reduce.getOperand());
        continue;
      }
      if (isa<BlockArgument>(v) || !op)
        continue;
      auto type = dyn_cast<RankedTensorType>(v.getType());
      if (!isa<ScalarSemantics>(op) || !type ||
          type.getShape() != ArrayRef<int64_t>(parts.shape)) {
        ok = false;
        break;
      }
      for (Value operand : op->getOperands())
        work.push_back(operand);
    }
    // The rows reach only row reductions (over their last dimension).
    seen.clear();
    for (unsigned result : rows.results)
      work.push_back(yield.getOperand(result));
    while (ok && !work.empty()) {
      Operation *op = work.pop_back_val().getDefiningOp();
      if (!op || !seen.insert(op).second)
        continue;
      if (auto reduce = dyn_cast<ReduceOp>(op)) {
        int64_t rank =
            cast<RankedTensorType>(reduce.getOperand().getType()).getRank();
        if (reduce.getDimensions() != ArrayRef<int64_t>{rank - 1})
          ok = false;
      }
      for (Value operand : op->getOperands())
        work.push_back(operand);
    }
    if (!ok || plan.partials.empty() ||
        ceilDiv(plan.columns, rowGroupBlockThreads(plan.columns)) >
            uint64_t(kBlockMaxColumnsPerThread))
      continue;
    return plan;
  }
  return std::nullopt;
}

void buildRowGroupLayout(CudaKernelBuilder &k, const RowGroupPlan &plan) {
  // A block per group g of S rows; per pass over the columns each thread
  // keeps |perThread| columns (clamped to the last, stored only in range)
  // and an accumulator per (partial, column); for each row of the group in
  // order, the row reductions (block-scope, cooperative), then the row's
  // results at the thread's columns and the partials' operand elements
  // there, one emitter for both so each input element is loaded once;
  // after the rows, the partial nest's results from the accumulators.
  OpBuilder &b = k.b;
  Location loc = k.loc;
  const KernelModel &model = k.model;
  const LoopNest &nest = model.nests[plan.rowNest];
  const LoopNest &parts = model.nests[plan.partialNest];
  ArrayRef<int64_t> shape = nest.shape;
  ArrayRef<int64_t> rowShape = shape.drop_back();
  int64_t columns = plan.columns;
  // Blocks as wide as the row (up to 1024 threads, the most a block has):
  // one column per thread, a block's share of each row reduction one
  // element per thread, and G blocks fill the device (GPT-2: 256 blocks of
  // 768 threads).
  unsigned blockThreads = rowGroupBlockThreads(columns);
  CudaLaunchRule &launch = k.kernel.launch;
  launch.blockThreads = blockThreads;
  launch.blocksPerSm = std::max(1u, 2048u / blockThreads);
  int64_t perThread = std::clamp<int64_t>(ceilDiv(columns, blockThreads), 1,
                                          kBlockMaxColumnsPerThread);
  BlockUnits groups = buildBlockUnits(b, loc, k.intrinsics, plan.groups);
  Value tid = groups.tid, threads = groups.threads;
  scf::ForOp loop = groups.loop;
  OpBuilder gb = OpBuilder::atBlockTerminator(loop.getBody());
  Value group = loop.getInductionVar();
  // Every thread makes the same passes and rows (the barriers).
  ColumnPasses passes =
      buildColumnPasses(gb, loc, threads, tid, columns, perThread);
  OpBuilder pb = OpBuilder::atBlockTerminator(passes.pass.getBody());
  ArrayRef<Value> cols = passes.columns, inRange = passes.inRange;
  // Accumulators: partial p's column l at p * perThread + l.
  SmallVector<Value> init;
  for (ReduceOp partial : plan.partials) {
    Type acc = ElementEmitter::reductionAccumulatorType(partial);
    for (int64_t l = 0; l < perThread; ++l)
      init.push_back(
          pb.create<arith::ConstantOp>(loc, pb.getFloatAttr(acc, 0.0)));
  }
  // Rows per iteration: two when the group's rows pair up, so both rows'
  // reductions share one allreduce (one pair of barriers for two rows) and
  // the chain per row is shorter.
  int64_t unroll = plan.rowsPerGroup % kRowGroupRowsPerStep == 0
                       ? kRowGroupRowsPerStep
                       : 1;
  auto rowLoop = pb.create<scf::ForOp>(loc, k.constant(pb, 0),
                                       k.constant(pb, plan.rowsPerGroup),
                                       k.constant(pb, unroll), init);
  int64_t allreduces = 0; // block allreduce calls per iteration
  {
    Block *rowBody = rowLoop.getBody();
    OpBuilder rb = OpBuilder::atBlockEnd(rowBody);
    k.hooks.setCooperative(rowBody, tid, threads, /*blockScope=*/true);
    // The accumulators, each row's element added in row order (the
    // interpreter's sum order).
    SmallVector<Value> acc(rowBody->getArguments().drop_front());
    for (int64_t u = 0; u < unroll; ++u) {
      Value inGroup = rb.create<arith::AddIOp>(loc, rowLoop.getInductionVar(),
                                               k.constant(rb, u));
      Value row = rb.create<arith::AddIOp>(
          loc,
          rb.create<arith::MulIOp>(loc, group,
                                   k.constant(rb, plan.rowsPerGroup)),
          inGroup);
      SmallVector<Value, 4> outer = delinearizeIndex(rb, loc, row, rowShape);
      ElementEmitter emitter(model, k.hooks, rb);
      // The row sums from the elements at the thread's columns (one pass
      // covers the row: perThread x blockThreads >= columns), which dx and
      // the partials then find in the emitter's cache.
      emitter.setLaneColumns(cols, inRange, columns);
      SmallVector<SmallVector<Value, 4>> ivsOf;
      for (int64_t l = 0; l < perThread; ++l) {
        SmallVector<Value, 4> ivs(outer);
        ivs.push_back(cols[l]);
        ivsOf.push_back(ivs);
      }
      for (auto [p, constPartial] : llvm::enumerate(plan.partials)) {
        ReduceOp partial = constPartial;
        Value rowShaped = rowShapedOperand(partial, shape);
        Type accType = ElementEmitter::reductionAccumulatorType(partial);
        for (int64_t l = 0; l < perThread; ++l) {
          SmallVector<Value, 3> grouped = {group, inGroup, cols[l]};
          Value element = convertScalar(
              rb, loc,
              rowShaped ? emitter.emit(rowShaped, ivsOf[l])
                        : emitter.emit(partial.getOperand(), grouped),
              accType);
          Value &sum = acc[p * perThread + l];
          sum = rb.create<arith::AddFOp>(loc, sum, element);
        }
      }
      for (int64_t l = 0; l < perThread; ++l) {
        SmallVector<Value> values;
        for (unsigned result : nest.results)
          values.push_back(emitter.emit(k.yield.getOperand(result), ivsOf[l]));
        auto ifOp =
            rb.create<scf::IfOp>(loc, inRange[l], /*withElseRegion=*/false);
        OpBuilder ib = ifOp.getThenBodyBuilder();
        for (auto [result, v] : llvm::zip(nest.results, values))
          k.store(ib, loc, result, v, ivsOf[l]);
      }
    }
    rb.create<scf::YieldOp>(loc, acc);
    allreduces = mergeBlockAllreduces(rowBody, k.intrinsics);
  }
  k.hooks.reset();
  {
    ElementEmitter emitter(model, k.hooks, pb);
    for (int64_t l = 0; l < perThread; ++l) {
      SmallVector<Value, 2> ivs = {group, cols[l]};
      for (auto [p, constPartial] : llvm::enumerate(plan.partials)) {
        ReduceOp partial = constPartial;
        Value sum = rowLoop.getResult(p * perThread + l);
        emitter.seedReduction(
            partial, ivs, sum,
            [](OpBuilder &, Location, Value lane) { return lane; });
      }
      SmallVector<Value> values;
      for (unsigned result : parts.results)
        values.push_back(emitter.emit(k.yield.getOperand(result), ivs));
      auto ifOp =
          pb.create<scf::IfOp>(loc, inRange[l], /*withElseRegion=*/false);
      OpBuilder ib = ifOp.getThenBodyBuilder();
      for (auto [result, v] : llvm::zip(parts.results, values))
        k.store(ib, loc, result, v, ivs);
    }
  }
  k.kernel.layouts.push_back("rowgroup.block");
  launch.maxBlocks = std::max<uint64_t>(launch.maxBlocks, plan.groups);
  // A block makes its group's rows in order, |unroll| per iteration; an
  // iteration's chain is each of its rows' elements at the thread's
  // columns (loaded once for all of the row's reductions and results)
  // plus two barriers per block allreduce (independent reductions share
  // one).
  uint64_t perIteration = uint64_t(unroll) * ceilDiv(columns, blockThreads) +
                          2 * uint64_t(allreduces);
  uint64_t steps = ceilDiv(columns, uint64_t(blockThreads) * perThread) *
                   uint64_t(plan.rowsPerGroup / unroll) * perIteration;
  k.recordChain(steps, uint64_t(plan.groups) * blockThreads);
}

} // namespace kiln::cuda_emitter
