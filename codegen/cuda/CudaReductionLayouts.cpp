//===- CudaReductionLayouts.cpp - a warp or a block per unit --------------===//
//
// The row and element layouts (CudaEmitter.h): a nest whose results use a
// reduction over their operand's last dimension gets a warp, or a block for
// long rows, per unit (an output element, or a row); the reduction's
// innermost loop is split over the unit's lanes (CudaHooks::reductionLanes)
// and combined with shuffles. A block-scope unit reads a fusion input's row
// from global memory once when several passes over the row need it (the row
// cache), and a horizontal fusion's independent groups of results get units
// of their own.
//
//===----------------------------------------------------------------------===//

#include "codegen/cuda/CudaLayouts.h"

#include "mlir/Dialect/SCF/IR/SCF.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallPtrSet.h"

#include <map>

using namespace mlir;

namespace kiln {

SmallVector<SmallVector<unsigned, 2>>
cudaResultGroups(FusionOp fusion, ArrayRef<unsigned> results) {
  SmallVector<SmallVector<unsigned, 2>> groups;
  if (fusion.getKind() != FusionKind::horizontal) {
    groups.emplace_back(results.begin(), results.end());
    return groups;
  }
  auto yield = cast<YieldOp>(fusion.getBody().front().getTerminator());
  // Union-find over the results, through the reduces they reach.
  SmallVector<unsigned> parent(results.size());
  for (unsigned i = 0; i < parent.size(); ++i)
    parent[i] = i;
  auto find = [&](unsigned i) {
    while (parent[i] != i)
      i = parent[i] = parent[parent[i]];
    return i;
  };
  llvm::DenseMap<Operation *, unsigned> owner; // reduce -> a result reaching it
  for (auto [i, result] : llvm::enumerate(results)) {
    llvm::SmallPtrSet<Operation *, 16> seen;
    SmallVector<Value> work = {yield.getOperand(result)};
    while (!work.empty()) {
      Operation *op = work.pop_back_val().getDefiningOp();
      if (!op || !seen.insert(op).second)
        continue;
      if (isa<ReduceOp>(op)) {
        auto [it, inserted] = owner.try_emplace(op, i);
        if (!inserted)
          parent[find(i)] = find(it->second);
      }
      for (Value operand : op->getOperands())
        work.push_back(operand);
    }
  }
  llvm::DenseMap<unsigned, unsigned> groupOf; // root -> group, in result order
  for (unsigned i = 0; i < parent.size(); ++i) {
    auto [it, inserted] = groupOf.try_emplace(find(i), groups.size());
    if (inserted)
      groups.emplace_back();
    groups[it->second].push_back(results[i]);
  }
  return groups;
}

namespace cuda_emitter {

namespace {

// Whether two index values are the same index: one value, or constants
// with one value (a hoisted reduction rebuilds its constant indices).
bool sameIndex(Value a, Value b) {
  if (a == b)
    return true;
  auto ca = a.getDefiningOp<arith::ConstantIndexOp>();
  auto cb = b.getDefiningOp<arith::ConstantIndexOp>();
  return ca && cb && ca.value() == cb.value();
}

// The row cache of one block-scope nest (CudaEmitter.h): |unitBody| holds
// the unit's passes over the row, each an scf.for from |lane| to the row's
// length stepping by |laneCount| (a cooperative reduction, or the row
// layout's lane loop). Inputs of shape |unitShape| + [columns] loaded at
// (|outer|..., the pass's column) in more than one pass get a slot of
// dynamic shared memory at the kernel's dynamicSharedBytes (while the slots
// fit its rowCacheBytes): before the first pass the block stages the
// input's row into the slot (`kiln.stage_row`: 16-byte vector copies
// between two barriers), and every pass loads from the slot. A slot is a
// `kiln.shared_row` call (the printer's typed pointer into the kernel's
// dynamic shared memory).
void cacheRows(CudaKernelBuilder &k, Block *unitBody,
               ArrayRef<int64_t> unitShape, ArrayRef<Value> outer, Value lane,
               Value laneCount) {
  const KernelModel &model = k.model;
  ValueRange inputs = k.inputs();
  CudaKernelSource &kernel = k.kernel;
  // The passes, in program order.
  SmallVector<scf::ForOp> passes;
  for (Operation &op : *unitBody) {
    auto loop = dyn_cast<scf::ForOp>(&op);
    if (!loop || loop.getLowerBound() != lane || loop.getStep() != laneCount ||
        !loop.getUpperBound().getDefiningOp<arith::ConstantIndexOp>())
      continue;
    passes.push_back(loop);
  }
  if (passes.size() < 2)
    return;
  // Per input, its loads at the row's own indices, with their pass.
  std::map<unsigned, SmallVector<std::pair<unsigned, memref::LoadOp>>> byInput;
  for (unsigned p = 0; p < passes.size(); ++p) {
    scf::ForOp pass = passes[p];
    int64_t columns =
        pass.getUpperBound().getDefiningOp<arith::ConstantIndexOp>().value();
    Value column = pass.getInductionVar();
    pass.walk([&](memref::LoadOp load) {
      auto arg = dyn_cast<BlockArgument>(load.getMemRef());
      if (!arg || arg.getOwner() != k.entry ||
          arg.getArgNumber() >= inputs.size())
        return;
      unsigned input = arg.getArgNumber();
      ArrayRef<int64_t> shape = model.inputs[input].getShape();
      ValueRange indices = load.getIndices();
      if (shape.size() != unitShape.size() + 1 ||
          shape.drop_back() != unitShape || shape.back() != columns ||
          indices.back() != column)
        return;
      for (size_t d = 0; d < outer.size(); ++d)
        if (!sameIndex(indices[d], outer[d]))
          return;
      byInput[input].push_back({p, load});
    });
  }
  for (auto &[input, loads] : byInput) {
    unsigned first = loads.front().first;
    if (llvm::all_of(loads, [&](auto &l) { return l.first == first; }))
      continue; // one pass: nothing to reuse
    Type element = model.inputs[input].getElementType();
    int64_t columns = model.inputs[input].getShape().back();
    int64_t offset = (int64_t(kernel.dynamicSharedBytes) + 15) / 16 * 16;
    int64_t end = offset + columns * storedBytes(element);
    if (end > k.rowCacheBytes)
      continue;
    kernel.dynamicSharedBytes = static_cast<uint32_t>(end);
    if (!llvm::is_contained(kernel.cachedInputs, input))
      kernel.cachedInputs.push_back(input);
    Location loc = passes.front().getLoc();
    OpBuilder b = OpBuilder::atBlockBegin(k.entry);
    Value slot = k.intrinsics.call(
        b, loc, "kiln.shared_row",
        {b.create<arith::ConstantIndexOp>(loc, offset)},
        {MemRefType::get({columns}, element)})[0];
    // The row's first element, (outer..., 0) in row-major order.
    b.setInsertionPoint(passes.front());
    ArrayRef<int64_t> shape = model.inputs[input].getShape();
    Value base = b.create<arith::ConstantIndexOp>(loc, 0);
    for (size_t d = 0; d < outer.size(); ++d)
      base = b.create<arith::AddIOp>(
          loc,
          b.create<arith::MulIOp>(
              loc, base, b.create<arith::ConstantIndexOp>(loc, shape[d])),
          outer[d]);
    base = b.create<arith::MulIOp>(
        loc, base, b.create<arith::ConstantIndexOp>(loc, columns));
    k.intrinsics.call(b, loc, "kiln.stage_row",
                      {slot, inputs[input], base,
                       b.create<arith::ConstantIndexOp>(loc, columns)},
                      {});
    for (auto &[p, load] : loads) {
      b.setInsertionPoint(load);
      Value cached = b.create<memref::LoadOp>(
          load.getLoc(), slot, ValueRange{load.getIndices().back()});
      load.getResult().replaceAllUsesWith(cached);
      load.erase();
    }
  }
}

} // namespace

SmallVector<int> inRowPartners(const KernelModel &model,
                               ArrayRef<NestUses> uses) {
  SmallVector<int> partner(model.nests.size(), -1);
  SmallVector<bool> taken(model.nests.size(), false);
  for (auto [r, row] : llvm::enumerate(model.nests)) {
    const NestUses &ru = uses[r];
    if (ru.elementReduce || ru.rowReduce < kBlockRowElements)
      continue;
    for (auto [e, element] : llvm::enumerate(model.nests)) {
      const NestUses &eu = uses[e];
      if (taken[e] || eu.elementReduce != ru.rowReduce || eu.rowReduce ||
          ArrayRef<int64_t>(element.shape) !=
              ArrayRef<int64_t>(row.shape).drop_back())
        continue;
      partner[r] = e;
      taken[e] = true;
      break;
    }
  }
  return partner;
}

void buildReductionLayout(CudaKernelBuilder &k, const LoopNest &nest,
                          const NestUses &uses, const LoopNest *inRow) {
  OpBuilder &b = k.b;
  Location loc = k.loc;
  Intrinsics &intrinsics = k.intrinsics;
  ArrayRef<int64_t> shape = nest.shape;
  YieldOp yield = k.yield;
  bool perElement = uses.elementReduce != 0;
  int64_t count = std::max(uses.elementReduce, uses.rowReduce);
  bool blockScope = count >= kBlockRowElements;
  ArrayRef<int64_t> unitShape = perElement ? shape : shape.drop_back();
  int64_t units = product(unitShape);
  // Independent groups of results (a horizontal fusion's reductions): unit
  // u builds group u / units at element u % units.
  SmallVector<SmallVector<unsigned, 2>> groups =
      perElement ? cudaResultGroups(k.fusion, nest.results)
                 : SmallVector<SmallVector<unsigned, 2>>{
                       SmallVector<unsigned, 2>(nest.results)};
  int64_t numGroups = groups.size();
  Value unit =
      intrinsics.index(b, loc, blockScope ? "kiln.block" : "kiln.warp");
  Value unitCount =
      intrinsics.index(b, loc, blockScope ? "kiln.blocks" : "kiln.warps");
  Value lane = intrinsics.index(b, loc, blockScope ? "kiln.tid" : "kiln.lane");
  Value laneCount =
      blockScope ? intrinsics.index(b, loc, "kiln.block_threads")
                 : b.create<arith::ConstantIndexOp>(loc, 32).getResult();
  auto loop = b.create<scf::ForOp>(
      loc, unit, b.create<arith::ConstantIndexOp>(loc, units * numGroups),
      unitCount);
  Block *unitBody = loop.getBody();
  if (llvm::all_of(unitShape, [](int64_t d) { return d == 1; })) {
    // One unit (rank 0, or a single row such as a batch of one's [1, C]
    // logits): no index depends on the unit loop (extents of 1 index with
    // the constant 0), so the emitter would hoist the values and reductions
    // out of it, and out of the lanes' cooperation: every thread would walk
    // the whole row alone. It hoists only through scf.for and scf.if, so an
    // scf.execute_region (a plain block in the source) stops it.
    OpBuilder ub = OpBuilder::atBlockTerminator(unitBody);
    auto region = ub.create<scf::ExecuteRegionOp>(loc, TypeRange{});
    unitBody = &region.getRegion().emplaceBlock();
    OpBuilder::atBlockEnd(unitBody).create<scf::YieldOp>(loc);
  }
  OpBuilder nb = OpBuilder::atBlockTerminator(unitBody);
  k.hooks.setCooperative(unitBody, lane, laneCount, blockScope);
  SmallVector<Value, 4> outer;
  if (numGroups == 1)
    outer = delinearizeIndex(nb, loc, loop.getInductionVar(), unitShape);
  // Independent reductions of the same elements (a layer norm's backward
  // pass sums dy * gamma and dy * gamma * xhat over the row) share one
  // pass over the row (ElementEmitter::enableSiblingReductions), so its
  // elements are read once for all of them.
  ElementEmitter emitter(k.model, k.hooks, nb);
  {
    SmallVector<unsigned> results(nest.results.begin(), nest.results.end());
    if (inRow)
      results.append(inRow->results.begin(), inRow->results.end());
    emitter.enableSiblingReductions(results);
  }
  // |results| built by every lane with |eb| at |at|; lane 0 stores.
  auto storeFromLaneZero = [&](OpBuilder &sb, ElementEmitter &eb,
                               ArrayRef<Value> at, ArrayRef<unsigned> results) {
    SmallVector<Value> values;
    for (unsigned result : results)
      values.push_back(eb.emit(yield.getOperand(result), at));
    Value first = sb.create<arith::CmpIOp>(
        loc, arith::CmpIPredicate::eq, lane,
        sb.create<arith::ConstantIndexOp>(loc, 0));
    auto ifOp = sb.create<scf::IfOp>(loc, first, /*withElseRegion=*/false);
    OpBuilder ib = ifOp.getThenBodyBuilder();
    for (auto [result, v] : llvm::zip(results, values))
      k.store(ib, loc, result, v, at);
  };
  if (perElement && numGroups > 1) {
    // One scf.if per group; the warp's (block's) lanes share the unit, so
    // they take the same branch and their shuffles stay converged. Each
    // group has its own emitter: values built in one branch do not dominate
    // the next (the reductions are not hoisted out of an scf.if; rank-0
    // values go before the unit loop as usual).
    Value unitsValue = nb.create<arith::ConstantIndexOp>(loc, units);
    Value group =
        nb.create<arith::DivUIOp>(loc, loop.getInductionVar(), unitsValue);
    Value element =
        nb.create<arith::RemUIOp>(loc, loop.getInductionVar(), unitsValue);
    for (auto [g, results] : llvm::enumerate(groups)) {
      Value taken = nb.create<arith::CmpIOp>(
          loc, arith::CmpIPredicate::eq, group,
          nb.create<arith::ConstantIndexOp>(loc, g));
      auto branch = nb.create<scf::IfOp>(loc, taken, /*withElseRegion=*/false);
      OpBuilder gb = branch.getThenBodyBuilder();
      k.hooks.setCooperative(branch.thenBlock(), lane, laneCount, blockScope);
      SmallVector<Value, 4> at = delinearizeIndex(gb, loc, element, unitShape);
      ElementEmitter groupEmitter(k.model, k.hooks, gb);
      groupEmitter.enableSiblingReductions(results);
      storeFromLaneZero(gb, groupEmitter, at, results);
    }
  } else if (perElement) {
    storeFromLaneZero(nb, emitter, outer, nest.results);
  } else {
    // The element nest's results at the row's indices.
    if (inRow)
      storeFromLaneZero(nb, emitter, outer, inRow->results);
    auto lanes = nb.create<scf::ForOp>(
        loc, lane, nb.create<arith::ConstantIndexOp>(loc, shape.back()),
        laneCount);
    SmallVector<Value, 4> ivs(outer);
    ivs.push_back(lanes.getInductionVar());
    // The emitter builds at the lane loop; reductions that do not depend on
    // its variable are hoisted before it (into the row), where those the
    // element nest built are found in its cache.
    OpBuilder::InsertionGuard guard(nb);
    nb.setInsertionPoint(lanes.getBody()->getTerminator());
    for (unsigned result : nest.results)
      k.store(nb, loc, result, emitter.emit(yield.getOperand(result), ivs),
              ivs);
  }
  if (blockScope)
    cacheRows(k, unitBody, unitShape, outer, lane, laneCount);
  SmallVectorImpl<std::string> &layouts = k.kernel.layouts;
  layouts.push_back(
      std::string(perElement ? "element." : "row.") +
      (blockScope ? "block" : "warp") +
      (numGroups > 1 ? ".groups=" + std::to_string(numGroups) : ""));
  if (inRow)
    layouts.push_back("element.block.in-row");
  CudaLaunchRule &launch = k.kernel.launch;
  const unsigned warpsPerBlock = kCudaBlockThreads / 32;
  launch.maxBlocks = std::max<uint64_t>(
      launch.maxBlocks, blockScope
                            ? units * numGroups
                            : ceilDiv(units * numGroups, warpsPerBlock));
  // Each unit's lanes share its reductions: a lane walks its share.
  uint64_t lanes = blockScope ? kCudaBlockThreads : 32;
  k.recordChain(ceilDiv(count, lanes), uint64_t(units * numGroups) * lanes);
}

} // namespace cuda_emitter

} // namespace kiln
