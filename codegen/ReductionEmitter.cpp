//===- ReductionEmitter.cpp - kiln.reduce elements in the kernel model -------===//
//
// The element of a kiln.reduce at result indices: scf.for loops over the
// reduced operand dimensions (innermost over the last one, so a reduction
// over the contiguous dimension walks memory in order) carrying the
// accumulator as iter_arg, the operand's element at the combined index read
// through the emitter. Floats accumulate in their compute type (f32 for
// f16/bf16 and f32, f64 for f64; f64 for long f32 sums where the target
// asks, KernelHooks::wideSums), integers in i64; sums start at 0, max at
// -inf and min at +inf (the integer extremes for integers); max and min use
// arith.maximumf/minimumf, which propagate NaN as the interpreter does; a
// mean divides by the element count (NaN for an empty float mean, 0 for an
// empty integer mean, as the interpreter gives).
//
// Column reductions (the operand's last, contiguous dimension kept, as a
// bias gradient sums over the batch) read memory with a stride when each
// element loops on its own. A target can instead compute a tile of
// consecutive elements together (emitReductionTile): the reduced loops
// outside, a loop over the tile's lanes inside, accumulators in a buffer the
// target provides; seedReduction then hands each lane's value to the
// element's emission. Each element still sums in the same order.
//
//===----------------------------------------------------------------------===//

#include "codegen/KernelModel.h"

#include "ir/ScalarSemantics.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "llvm/ADT/APFloat.h"
#include "llvm/ADT/ScopeExit.h"

#include <limits>

using namespace mlir;

namespace kiln {

Type accumulatorType(Type element) {
  if (isa<FloatType>(element))
    return computeType(element);
  return IntegerType::get(element.getContext(), 64);
}

Value combineAccumulated(OpBuilder &b, Location loc, ReduceKind kind, Value acc,
                         Value x) {
  bool isFloat = isa<FloatType>(acc.getType());
  switch (kind) {
  case ReduceKind::sum:
  case ReduceKind::mean:
    return isFloat ? b.create<arith::AddFOp>(loc, acc, x).getResult()
                   : b.create<arith::AddIOp>(loc, acc, x).getResult();
  case ReduceKind::prod:
    return isFloat ? b.create<arith::MulFOp>(loc, acc, x).getResult()
                   : b.create<arith::MulIOp>(loc, acc, x).getResult();
  case ReduceKind::max:
    return isFloat ? b.create<arith::MaximumFOp>(loc, acc, x).getResult()
                   : b.create<arith::MaxSIOp>(loc, acc, x).getResult();
  case ReduceKind::min:
    return isFloat ? b.create<arith::MinimumFOp>(loc, acc, x).getResult()
                   : b.create<arith::MinSIOp>(loc, acc, x).getResult();
  }
  return acc;
}

namespace {

// Partial results of a reduction over the contiguous last dimension.
constexpr int64_t kRowLanes = 16;

// Whether a one-thread reduction of |reduce| keeps kRowLanes partial results
// over its rows (emitReduceHere): it reduces the contiguous last dimension,
// of at least 2 * kRowLanes elements.
bool keepsRowLanes(ReduceOp reduce) {
  auto operandType = cast<RankedTensorType>(reduce.getOperand().getType());
  int64_t rank = operandType.getRank();
  return llvm::is_contained(reduce.getDimensions(), rank - 1) &&
         operandType.getDimSize(rank - 1) >= 2 * kRowLanes;
}

// Whether it keeps kRowLanes partial results over all its elements instead
// (where the target gives them an array, KernelHooks::partialResults): it
// reduces a shorter last dimension (2 to 2 * kRowLanes - 1 elements) and
// other dimensions too, at least 2 * kRowLanes elements in all. Each row
// of the last dimension is added in chunks of kRowLanes, element w to
// partial w mod kRowLanes. (Without them a batch norm's sum over [N, H, W]
// with W = 28 was one serial chain of f64 adds: 1.3 ms a pass over [128,
// 16, 28, 28] on one thread.)
bool keepsChunkLanes(ReduceOp reduce) {
  auto operandType = cast<RankedTensorType>(reduce.getOperand().getType());
  int64_t rank = operandType.getRank();
  int64_t last = operandType.getDimSize(rank - 1);
  if (!llvm::is_contained(reduce.getDimensions(), rank - 1) || last < 2 ||
      last >= 2 * kRowLanes)
    return false;
  int64_t count = 1;
  for (int64_t d : reduce.getDimensions())
    count *= operandType.getDimSize(d);
  return count > last && count >= 2 * kRowLanes;
}

// A sum whose accumulator adds at least this many f32 elements accumulates
// in f64 where the target asks (KernelHooks::wideSums).
constexpr int64_t kWideSumCount = 64;

// The identity of |kind| in the accumulator type |acc|.
Value initialValue(OpBuilder &b, Location loc, ReduceKind kind, Type acc) {
  if (auto floatType = dyn_cast<FloatType>(acc)) {
    const llvm::fltSemantics &semantics = floatType.getFloatSemantics();
    llvm::APFloat value = llvm::APFloat::getZero(semantics);
    if (kind == ReduceKind::max || kind == ReduceKind::min)
      value = llvm::APFloat::getInf(semantics,
                                    /*Negative=*/kind == ReduceKind::max);
    else if (kind == ReduceKind::prod)
      value = llvm::APFloat::getOne(semantics);
    return b.create<arith::ConstantOp>(loc, b.getFloatAttr(acc, value));
  }
  int64_t value = 0;
  if (kind == ReduceKind::max)
    value = std::numeric_limits<int64_t>::min();
  else if (kind == ReduceKind::min)
    value = std::numeric_limits<int64_t>::max();
  else if (kind == ReduceKind::prod)
    value = 1;
  return b.create<arith::ConstantOp>(loc, b.getIntegerAttr(acc, value));
}

// |partials| (a power of two of them) combined pairwise: (0, 1), (2, 3),
// ..., then the pairs' results the same way, a fixed order.
Value combinePairwise(OpBuilder &b, Location loc, ReduceKind kind,
                      SmallVector<Value> partials) {
  while (partials.size() > 1) {
    SmallVector<Value> pairs;
    for (size_t j = 0; j + 1 < partials.size(); j += 2)
      pairs.push_back(
          combineAccumulated(b, loc, kind, partials[j], partials[j + 1]));
    partials = std::move(pairs);
  }
  return partials.front();
}

// The reduce's value from its accumulated |result| over |count| elements:
// a mean divides, then the result is stored in the reduce's element type.
Value finishReduce(OpBuilder &b, Location loc, ReduceOp reduce, Value result,
                   int64_t count) {
  Type acc = result.getType();
  Type resultElement = cast<RankedTensorType>(reduce.getType()).getElementType();
  if (reduce.getKind() == ReduceKind::mean) {
    if (isa<FloatType>(acc)) {
      Value n = b.create<arith::ConstantOp>(
          loc, b.getFloatAttr(acc, static_cast<double>(count)));
      result = b.create<arith::DivFOp>(loc, result, n);
    } else if (count == 0) {
      result = b.create<arith::ConstantOp>(loc, b.getIntegerAttr(acc, 0));
    } else {
      Value n = b.create<arith::ConstantOp>(loc, b.getIntegerAttr(acc, count));
      result = b.create<arith::DivSIOp>(loc, result, n);
    }
  }
  return convertScalar(b, loc, result, resultElement);
}

} // namespace

void ElementEmitter::enableSiblingReductions(ArrayRef<unsigned> results) {
  siblingCandidates_.clear();
  llvm::DenseSet<Operation *> seen;
  FusionOp fusion = model_.fusion;
  auto yield = cast<YieldOp>(fusion.getBody().front().getTerminator());
  SmallVector<Value> work;
  for (unsigned result : results)
    work.push_back(yield.getOperand(result));
  while (!work.empty()) {
    Operation *def = work.pop_back_val().getDefiningOp();
    if (!def || !seen.insert(def).second)
      continue;
    if (auto reduce = dyn_cast<ReduceOp>(def))
      siblingCandidates_.push_back(reduce);
    work.append(def->operand_begin(), def->operand_end());
  }
  // Body order, so a group is the same on every build of the kernel.
  llvm::sort(siblingCandidates_, [](ReduceOp a, ReduceOp b) {
    return a->isBeforeInBlock(b);
  });
}

// Whether |value| is computed (within the fusion body) from |op|'s results.
static bool computedFrom(Value value, Operation *op,
                         llvm::DenseMap<Operation *, bool> &memo) {
  Operation *def = value.getDefiningOp();
  if (!def)
    return false;
  if (def == op)
    return true;
  auto it = memo.find(def);
  if (it != memo.end())
    return it->second;
  memo[def] = false; // a DAG: no cycles, but shared operands
  bool found = llvm::any_of(def->getOperands(), [&](Value operand) {
    return computedFrom(operand, op, memo);
  });
  memo[def] = found;
  return found;
}

SmallVector<ReduceOp> ElementEmitter::reductionGroup(ReduceOp reduce,
                                                     ValueRange indices) {
  SmallVector<ReduceOp> group = {reduce};
  if (siblingCandidates_.empty() || !llvm::is_contained(siblingCandidates_, reduce))
    return group;
  auto operandType = reduce.getOperand().getType();
  for (ReduceOp candidate : siblingCandidates_) {
    if (candidate == reduce || candidate.getOperand().getType() != operandType ||
        candidate.getDimensions() != reduce.getDimensions())
      continue;
    // Built already at these indices: nothing to share.
    std::vector<void *> key;
    key.push_back(candidate.getResult().getAsOpaquePointer());
    for (Value index : indices)
      key.push_back(index.getAsOpaquePointer());
    if (cache_.count(key))
      continue;
    // One pass builds the group, so no member may be computed from another
    // (a variance's sum of squared deviations from the mean).
    bool independent = llvm::all_of(group, [&](ReduceOp member) {
      llvm::DenseMap<Operation *, bool> memoA, memoB;
      return !computedFrom(candidate.getOperand(), member, memoA) &&
             !computedFrom(member.getOperand(), candidate, memoB);
    });
    if (independent)
      group.push_back(candidate);
  }
  return group;
}

Value ElementEmitter::emitReduce(ReduceOp reduce, ValueRange indices) {
  // Reductions of the same elements (operand type and dimensions) that the
  // nest also needs are built in the same loops (reductionGroup), each
  // summing in its own order as alone, and their values are cached for
  // these indices: a batch norm's backward pass reads its operands once for
  // its two or three sums rather than once per sum.
  // A target's cooperating lanes build the group together too: each lane
  // accumulates its share of every member in one loop, then the members'
  // partials meet in combineLanes one after another.
  SmallVector<ReduceOp> group = reductionGroup(reduce, indices);
  auto seedSiblings = [&](ArrayRef<Value> values) {
    for (size_t i = 1; i < group.size(); ++i) {
      std::vector<void *> key;
      key.push_back(group[i].getResult().getAsOpaquePointer());
      for (Value index : indices)
        key.push_back(index.getAsOpaquePointer());
      cache_[key] = values[i];
    }
    return values.front();
  };
  // Hoist out of every enclosing scf.for whose induction variable the
  // indices do not depend on (a softmax's row max is built once per row, not
  // once per element).
  Operation *hoistBefore = hoistPoint(indices);
  if (!hoistBefore)
    return seedSiblings(emitReduceHere(group, indices));
  SmallVector<Value> results;
  buildBefore(hoistBefore, indices, [&](ValueRange hoisted) {
    results = emitReduceHere(group, hoisted);
  });
  return seedSiblings(results);
}

SmallVector<Value> ElementEmitter::emitReduceHere(ArrayRef<ReduceOp> group,
                                                  ValueRange indices) {
  ReduceOp first = group.front();
  Location loc = first.getLoc();
  auto operandType = cast<RankedTensorType>(first.getOperand().getType());
  ArrayRef<int64_t> dims = first.getDimensions();
  size_t members = group.size();
  // Lanes that build this reduction together (KernelHooks): they split
  // the reduced loop (the flattened one of several dimensions), then
  // combine each member's partial results.
  std::optional<KernelHooks::ReductionLanes> coop = hooks_.reductionLanes(b_);
  // Long f32 sums that one thread adds in order accumulate in f64 on every
  // target (KernelHooks::wideSums says why): a CUDA thread's column sum of
  // 16085 elements in f32 was off by 1.8e-4 of itself, past the emulation
  // tests' tolerance (CudaEmulationTest.RandomModelsF32, seed 1717154157).
  // Lanes that share a reduction keep the target's choice: each sums a
  // short run, and their partials meet in the target's combineLanes.
  bool wide = hooks_.wideSums() || !coop;
  SmallVector<Type> accs;
  SmallVector<ReduceKind> kinds;
  for (ReduceOp reduce : group) {
    accs.push_back(reductionAccumulatorType(reduce, wide));
    kinds.push_back(reduce.getKind());
  }

  // The combined operand index: result indices for kept dimensions, loop
  // induction variables (or 0 for unit extents) for reduced ones.
  SmallVector<Value, 4> combined(operandType.getRank());
  SmallVector<int64_t, 4> looped; // reduced dimensions with extent != 1
  int64_t count = 1;
  for (int64_t d = 0, r = 0; d < operandType.getRank(); ++d) {
    if (!llvm::is_contained(dims, d)) {
      combined[d] = indices[r++];
      continue;
    }
    int64_t extent = operandType.getDimSize(d);
    count *= extent;
    if (extent == 1)
      combined[d] = indexConstant(loc, 0);
    else
      looped.push_back(d);
  }
  // Member |i|'s operand element at |combined|, in its accumulator type.
  auto element = [&](size_t i) {
    return convertScalar(b_, loc,
                         emit(ReduceOp(group[i]).getOperand(), combined), accs[i]);
  };

  SmallVector<Value> results(members);
  int64_t rank = operandType.getRank();
  if (coop && !laneColumns_.empty() && dims == ArrayRef<int64_t>{rank - 1} &&
      operandType.getDimSize(rank - 1) == laneColumnsExtent_) {
    // A row whose elements this lane holds at its columns
    // (setLaneColumns): the elements are built here, outside any loop, so
    // what the nest builds at the same indices afterwards finds them in
    // the cache. Columns lane, lane + count, ... in order, as the lanes'
    // loop below would add them.
    for (size_t i = 0; i < members; ++i)
      results[i] = initialValue(b_, loc, kinds[i], accs[i]);
    for (auto [column, valid] : llvm::zip(laneColumns_, laneColumnsValid_)) {
      combined[rank - 1] = column;
      for (size_t i = 0; i < members; ++i)
        results[i] = b_.create<arith::SelectOp>(
            loc, valid,
            combineAccumulated(b_, loc, kinds[i], results[i], element(i)),
            results[i]);
    }
    for (size_t i = 0; i < members; ++i)
      results[i] = hooks_.combineLanes(b_, loc, kinds[i], results[i]);
  } else if (looped.empty()) {
    for (size_t i = 0; i < members; ++i)
      results[i] = element(i);
  } else {
    SmallVector<Value> inits;
    for (size_t i = 0; i < members; ++i)
      inits.push_back(initialValue(b_, loc, kinds[i], accs[i]));
    // Values built inside the loops do not dominate what follows them.
    std::map<std::vector<void *>, Value> savedCache = cache_;
    llvm::DenseMap<int64_t, Value> savedConstants = indexConstants_;
    Value zero = indexConstant(loc, 0);
    Value one = indexConstant(loc, 1);
    SmallVector<scf::ForOp, 4> loops;
    SmallVector<Value> carried = inits;
    SmallVector<Value> chunkPartialsOut;
    {
      OpBuilder::InsertionGuard guard(b_);
      // A reduction over the contiguous last dimension keeps kRowLanes
      // partial results (lane k takes elements k, k + kRowLanes, ...), so
      // the chains are independent and vectorize; they are combined
      // pairwise, then the remainder is added in order. The order is fixed,
      // so every element's result is the same on every run and part, and
      // whether the partials are scalars or the target's array
      // (KernelHooks::partialResults).
      int64_t lastExtent = operandType.getDimSize(rank - 1);
      bool lanes = !coop && keepsRowLanes(first);
      // Partial results over all the elements (keepsChunkLanes): arrays
      // filled before the reduced loops, combined after them.
      SmallVector<Value> chunkPartials;
      if (!coop && keepsChunkLanes(first)) {
        for (size_t i = 0; i < members; ++i)
          if (Value array = hooks_.partialResults(b_, loc, accs[i], kRowLanes))
            chunkPartials.push_back(array);
        if (chunkPartials.size() != members)
          chunkPartials.clear();
      }
      bool chunks = !chunkPartials.empty();
      chunkPartialsOut = chunkPartials;
      for (size_t i = 0; i < chunkPartials.size(); ++i)
        for (int64_t k = 0; k < kRowLanes; ++k)
          b_.create<memref::StoreOp>(
              loc, inits[i], chunkPartials[i],
              ValueRange{b_.create<arith::ConstantIndexOp>(loc, k)});
      SmallVector<int64_t, 4> outerLooped(looped);
      if (lanes || chunks)
        outerLooped.pop_back();
      // Lanes that share a reduction over several dimensions (a channel's
      // sum over batch, height and width) split the reduced elements as
      // one flattened index, row-major over those dimensions, rather than
      // only the innermost one: 28 columns would leave most of a block's
      // 256 threads idle and walk 128 x 28 steps in each of the others.
      if (coop && looped.size() > 1) {
        SmallVector<int64_t, 4> extents;
        int64_t flat = 1;
        for (int64_t d : looped) {
          extents.push_back(operandType.getDimSize(d));
          flat *= extents.back();
        }
        auto loop = b_.create<scf::ForOp>(
            loc, coop->lane, b_.create<arith::ConstantIndexOp>(loc, flat),
            coop->count, carried);
        loops.push_back(loop);
        carried.assign(loop.getRegionIterArgs().begin(),
                       loop.getRegionIterArgs().end());
        b_.setInsertionPointToStart(loop.getBody());
        SmallVector<Value, 4> at =
            delinearizeIndex(b_, loc, loop.getInductionVar(), extents);
        for (auto [d, index] : llvm::zip(looped, at))
          combined[d] = index;
        outerLooped = {};
      }
      for (int64_t d : outerLooped) {
        Value extent = b_.create<arith::ConstantIndexOp>(
            loc, operandType.getDimSize(d));
        bool split = coop && d == looped.back();
        auto loop = b_.create<scf::ForOp>(loc, split ? coop->lane : zero,
                                          extent, split ? coop->count : one,
                                          carried);
        loops.push_back(loop);
        combined[d] = loop.getInductionVar();
        carried.assign(loop.getRegionIterArgs().begin(),
                       loop.getRegionIterArgs().end());
        b_.setInsertionPointToStart(loop.getBody());
      }
      SmallVector<Value> next(members);
      if (chunks) {
        // Element w of the row goes to partial w mod kRowLanes: a loop over
        // the lanes per chunk of the row, which vectorizes (consecutive
        // elements, no index arithmetic between them).
        for (int64_t start = 0; start < lastExtent; start += kRowLanes) {
          int64_t width = std::min(kRowLanes, lastExtent - start);
          auto lanesLoop = b_.create<scf::ForOp>(
              loc, zero, b_.create<arith::ConstantIndexOp>(loc, width), one);
          std::map<std::vector<void *>, Value> outerCache = cache_;
          llvm::DenseMap<int64_t, Value> outerConstants = indexConstants_;
          {
            OpBuilder::InsertionGuard inner(b_);
            b_.setInsertionPointToStart(lanesLoop.getBody());
            Value lane = lanesLoop.getInductionVar();
            combined[rank - 1] = b_.create<arith::AddIOp>(
                loc, b_.create<arith::ConstantIndexOp>(loc, start), lane);
            for (size_t i = 0; i < members; ++i) {
              Value x = element(i);
              Value partial =
                  b_.create<memref::LoadOp>(loc, chunkPartials[i], lane);
              b_.create<memref::StoreOp>(
                  loc, combineAccumulated(b_, loc, kinds[i], partial, x),
                  chunkPartials[i], lane);
            }
          }
          cache_ = std::move(outerCache);
          indexConstants_ = std::move(outerConstants);
        }
        next = carried;
      } else if (!lanes) {
        for (size_t i = 0; i < members; ++i)
          next[i] =
              combineAccumulated(b_, loc, kinds[i], carried[i], element(i));
      } else {
        int64_t mainEnd = lastExtent / kRowLanes * kRowLanes;
        Value mainEndValue = b_.create<arith::ConstantIndexOp>(loc, mainEnd);
        Value laneCount = b_.create<arith::ConstantIndexOp>(loc, kRowLanes);
        SmallVector<SmallVector<Value>> trees(members);
        // Values built in the loop do not dominate the remainder loop.
        auto inLoop = [&](Block *body, llvm::function_ref<void()> build) {
          std::map<std::vector<void *>, Value> outerCache = cache_;
          llvm::DenseMap<int64_t, Value> outerConstants = indexConstants_;
          auto restore = llvm::make_scope_exit([&] {
            cache_ = std::move(outerCache);
            indexConstants_ = std::move(outerConstants);
          });
          OpBuilder::InsertionGuard inner(b_);
          b_.setInsertionPointToStart(body);
          build();
        };
        SmallVector<Value> partials;
        for (size_t i = 0; i < members; ++i)
          if (Value array = hooks_.partialResults(b_, loc, accs[i], kRowLanes))
            partials.push_back(array);
        if (partials.size() == members) {
          // Lane k's partial result in partials[k]; per step of the row, a
          // loop over the lanes (the same order of combination as below).
          for (size_t i = 0; i < members; ++i)
            for (int64_t k = 0; k < kRowLanes; ++k)
              b_.create<memref::StoreOp>(
                  loc, inits[i], partials[i],
                  ValueRange{b_.create<arith::ConstantIndexOp>(loc, k)});
          auto main = b_.create<scf::ForOp>(loc, zero, mainEndValue, laneCount);
          inLoop(main.getBody(), [&] {
            auto lanesLoop = b_.create<scf::ForOp>(loc, zero, laneCount, one);
            b_.setInsertionPointToStart(lanesLoop.getBody());
            Value lane = lanesLoop.getInductionVar();
            combined[rank - 1] =
                b_.create<arith::AddIOp>(loc, main.getInductionVar(), lane);
            for (size_t i = 0; i < members; ++i) {
              Value x = element(i);
              Value partial = b_.create<memref::LoadOp>(loc, partials[i], lane);
              b_.create<memref::StoreOp>(
                  loc, combineAccumulated(b_, loc, kinds[i], partial, x),
                  partials[i], lane);
            }
          });
          for (size_t i = 0; i < members; ++i)
            for (int64_t k = 0; k < kRowLanes; ++k)
              trees[i].push_back(b_.create<memref::LoadOp>(
                  loc, partials[i],
                  ValueRange{b_.create<arith::ConstantIndexOp>(loc, k)}));
        } else {
          SmallVector<Value> laneInits;
          for (size_t i = 0; i < members; ++i)
            laneInits.append(kRowLanes, inits[i]);
          auto main = b_.create<scf::ForOp>(loc, zero, mainEndValue, laneCount,
                                            laneInits);
          inLoop(main.getBody(), [&] {
            SmallVector<Value> partial(members * kRowLanes);
            for (int64_t k = 0; k < kRowLanes; ++k) {
              combined[rank - 1] = b_.create<arith::AddIOp>(
                  loc, main.getInductionVar(),
                  b_.create<arith::ConstantIndexOp>(loc, k));
              for (size_t i = 0; i < members; ++i)
                partial[i * kRowLanes + k] = combineAccumulated(
                    b_, loc, kinds[i],
                    main.getRegionIterArgs()[i * kRowLanes + k], element(i));
            }
            b_.create<scf::YieldOp>(loc, partial);
          });
          for (size_t i = 0; i < members; ++i)
            trees[i].assign(main.getResults().begin() + i * kRowLanes,
                            main.getResults().begin() + (i + 1) * kRowLanes);
        }
        SmallVector<Value> rowValues;
        for (size_t i = 0; i < members; ++i)
          rowValues.push_back(combinePairwise(b_, loc, kinds[i], trees[i]));
        if (mainEnd < lastExtent) {
          auto rest = b_.create<scf::ForOp>(
              loc, b_.create<arith::ConstantIndexOp>(loc, mainEnd),
              b_.create<arith::ConstantIndexOp>(loc, lastExtent), one,
              rowValues);
          std::map<std::vector<void *>, Value> outerCache = cache_;
          llvm::DenseMap<int64_t, Value> outerConstants = indexConstants_;
          auto restore = llvm::make_scope_exit([&] {
            cache_ = std::move(outerCache);
            indexConstants_ = std::move(outerConstants);
          });
          OpBuilder::InsertionGuard inner(b_);
          b_.setInsertionPointToStart(rest.getBody());
          combined[rank - 1] = rest.getInductionVar();
          SmallVector<Value> sums;
          for (size_t i = 0; i < members; ++i)
            sums.push_back(combineAccumulated(
                b_, loc, kinds[i], rest.getRegionIterArgs()[i], element(i)));
          b_.create<scf::YieldOp>(loc, sums);
          rowValues.assign(rest.getResults().begin(), rest.getResults().end());
        }
        for (size_t i = 0; i < members; ++i)
          next[i] = loops.empty()
                        ? rowValues[i]
                        : combineAccumulated(b_, loc, kinds[i], carried[i],
                                             rowValues[i]);
      }
      for (size_t l = loops.size(); l-- > 0;) {
        b_.setInsertionPointToEnd(loops[l].getBody());
        b_.create<scf::YieldOp>(loc, next);
        next.assign(loops[l].getResults().begin(), loops[l].getResults().end());
      }
      results = next;
    }
    // After the loops: the chunk partials' pairwise combination, in a fixed
    // order as the rows' (so the result is the same on every run, part and
    // machine).
    if (!chunkPartialsOut.empty())
      for (size_t i = 0; i < members; ++i) {
        SmallVector<Value> tree;
        for (int64_t k = 0; k < kRowLanes; ++k)
          tree.push_back(b_.create<memref::LoadOp>(
              loc, chunkPartialsOut[i],
              ValueRange{b_.create<arith::ConstantIndexOp>(loc, k)}));
        results[i] = combinePairwise(b_, loc, kinds[i], tree);
      }
    if (coop)
      for (size_t i = 0; i < members; ++i)
        results[i] = hooks_.combineLanes(b_, loc, kinds[i], results[i]);
    cache_ = std::move(savedCache);
    indexConstants_ = std::move(savedConstants);
  }

  for (size_t i = 0; i < members; ++i)
    results[i] = finishReduce(b_, loc, ReduceOp(group[i]), results[i], count);
  return results;
}

bool ElementEmitter::isColumnReduction(ReduceOp reduce) {
  auto operandType = cast<RankedTensorType>(reduce.getOperand().getType());
  int64_t rank = operandType.getRank();
  return rank >= 2 && !reduce.getDimensions().empty() &&
         !llvm::is_contained(reduce.getDimensions(), rank - 1);
}

mlir::Type ElementEmitter::reductionAccumulatorType(ReduceOp reduce,
                                                    bool wideSums) {
  auto operandType = cast<RankedTensorType>(reduce.getOperand().getType());
  Type acc = accumulatorType(operandType.getElementType());
  if (!wideSums || !acc.isF32() ||
      (reduce.getKind() != ReduceKind::sum && reduce.getKind() != ReduceKind::mean))
    return acc;
  // The elements one accumulator adds: all of them, or a sixteenth where a
  // reduction over the contiguous last dimension keeps kRowLanes partial
  // sums (emitReduceHere).
  int64_t count = 1;
  for (int64_t d : reduce.getDimensions())
    count *= operandType.getDimSize(d);
  if (keepsRowLanes(reduce)) {
    count /= kRowLanes;
  } else if (keepsChunkLanes(reduce)) {
    // Partial 0 takes ceil(W / kRowLanes) elements of each row.
    int64_t last = operandType.getDimSize(operandType.getRank() - 1);
    count = count / last * ((last + kRowLanes - 1) / kRowLanes);
  }
  return count >= kWideSumCount ? Float64Type::get(acc.getContext()) : acc;
}

void ElementEmitter::emitReductionTile(ReduceOp reduce, ValueRange outer,
                                       Value tileStart, Value tileSize,
                                       LaneLoad load, LaneStore store,
                                       ElementVisit visit) {
  Location loc = reduce.getLoc();
  auto operandType = cast<RankedTensorType>(reduce.getOperand().getType());
  Type acc = reductionAccumulatorType(reduce, hooks_.wideSums());
  ReduceKind kind = reduce.getKind();
  ArrayRef<int64_t> dims = reduce.getDimensions();
  int64_t rank = operandType.getRank();
  // Values built inside the loops do not dominate what follows them.
  std::map<std::vector<void *>, Value> savedCache = cache_;
  llvm::DenseMap<int64_t, Value> savedConstants = indexConstants_;
  {
    OpBuilder::InsertionGuard guard(b_);
    Value zero = indexConstant(loc, 0), one = indexConstant(loc, 1);
    auto lanes = [&](function_ref<void(Value)> body) {
      auto loop = b_.create<scf::ForOp>(loc, zero, tileSize, one);
      OpBuilder::InsertionGuard inner(b_);
      b_.setInsertionPoint(loop.getBody()->getTerminator());
      body(loop.getInductionVar());
    };
    lanes([&](Value lane) {
      store(b_, loc, lane, initialValue(b_, loc, kind, acc));
    });
    SmallVector<Value, 4> combined(rank);
    for (int64_t d = 0, r = 0; d < rank; ++d) {
      if (llvm::is_contained(dims, d))
        continue;
      if (d < rank - 1)
        combined[d] = outer[r++];
    }
    // Reduced dimensions outermost first, in operand order, as
    // emitReduceHere loops over them: every element sums in the same order
    // as the untiled kernel.
    for (int64_t d = 0; d < rank; ++d) {
      if (!llvm::is_contained(dims, d))
        continue;
      int64_t extent = operandType.getDimSize(d);
      if (extent == 1) {
        combined[d] = indexConstant(loc, 0);
        continue;
      }
      auto loop = b_.create<scf::ForOp>(
          loc, zero, b_.create<arith::ConstantIndexOp>(loc, extent), one);
      b_.setInsertionPoint(loop.getBody()->getTerminator());
      combined[d] = loop.getInductionVar();
    }
    lanes([&](Value lane) {
      combined[rank - 1] = b_.create<arith::AddIOp>(loc, tileStart, lane);
      Value element = convertScalar(b_, loc, emit(reduce.getOperand(), combined), acc);
      store(b_, loc, lane,
            combineAccumulated(b_, loc, kind, load(b_, loc, lane), element));
      if (visit)
        visit(combined);
    });
  }
  cache_ = std::move(savedCache);
  indexConstants_ = std::move(savedConstants);
}

void ElementEmitter::setLaneColumns(ArrayRef<Value> columns,
                                    ArrayRef<Value> valid, int64_t extent) {
  assert(columns.size() == valid.size());
  laneColumns_.assign(columns.begin(), columns.end());
  laneColumnsValid_.assign(valid.begin(), valid.end());
  laneColumnsExtent_ = extent;
}

void ElementEmitter::seedReduction(ReduceOp reduce, ValueRange indices,
                                   Value lane, LaneLoad load) {
  Location loc = reduce.getLoc();
  auto operandType = cast<RankedTensorType>(reduce.getOperand().getType());
  int64_t count = 1;
  for (int64_t d : reduce.getDimensions())
    count *= operandType.getDimSize(d);
  Value value = finishReduce(b_, loc, reduce, load(b_, loc, lane), count);
  std::vector<void *> key;
  key.push_back(reduce.getResult().getAsOpaquePointer());
  for (Value index : indices)
    key.push_back(index.getAsOpaquePointer());
  cache_[key] = value;
}

} // namespace kiln
