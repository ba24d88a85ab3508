//===- IndexedEmitter.cpp - gather, scatter_add and max pooling elements ----===//
//
// Elements of the kernel model's ops that read at data-dependent or windowed
// indices, each written as a gather over its result so that every output
// element is computed on its own (a kernel's parts stay independent, see
// codegen/cpu/LowerToLLVM.h):
//
// - kiln.gather: result[s, d] = table[indices[s], d]; the index is clamped
//   to the table's rows (the interpreter reports an out-of-range index; a
//   kernel cannot, so it stays in bounds instead).
// - kiln.scatter_add: result[v, d] = operand[v, d] plus updates[s, d] for
//   every s (row-major) with indices[s] == v, accumulated in the compute
//   type (integers in i64); an out-of-range index matches no row. With
//   combine = max or min, their max or min instead (a NaN wins). Alone, an
//   element scans all of `indices`; a target that tiles rows of the result
//   (emitScatterTile, as the CPU does for a rank >= 2 result) scans them
//   once per tile of consecutive row elements, adding each matching
//   update's lanes, in the same order.
// - kiln.max_pool2d: the window's maximum; NaN wins (the first NaN), ties
//   go to the first element in row-major order, an empty window is -inf.
// - kiln.max_pool2d_grad: at input position (h, w), the sum over the
//   windows containing it (in row-major window order, as the interpreter
//   adds them) of grad_output where that window's argmax (as above) is
//   (h, w).
//
// Values built inside the loops are dropped from the emitter's caches
// afterwards, as in ReductionEmitter.cpp.
//
//===----------------------------------------------------------------------===//

#include "codegen/KernelModel.h"

#include "ir/ScalarSemantics.h"
#include "ir/reference/Philox.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "llvm/ADT/APFloat.h"

using namespace mlir;

namespace kiln {

// Restores the emitter's caches when it goes out of scope, so values built
// inside loops are not reused after them.
struct ElementEmitter::CacheScope {
  explicit CacheScope(ElementEmitter &e)
      : emitter(e), cache(e.cache_), constants(e.indexConstants_) {}
  ~CacheScope() {
    emitter.cache_ = std::move(cache);
    emitter.indexConstants_ = std::move(constants);
  }
  ElementEmitter &emitter;
  std::map<std::vector<void *>, Value> cache;
  llvm::DenseMap<int64_t, Value> constants;
};

Value ElementEmitter::toIndex(Location loc, Value integer) {
  return b_.create<arith::IndexCastOp>(loc, b_.getIndexType(), integer);
}

Value ElementEmitter::emitGather(GatherOp gather, ValueRange indices) {
  Location loc = gather.getLoc();
  auto tableType = cast<RankedTensorType>(gather.getTable().getType());
  int64_t indexRank =
      cast<RankedTensorType>(gather.getIndices().getType()).getRank();
  Value row = toIndex(loc, emit(gather.getIndices(), indices.take_front(indexRank)));
  SmallVector<Value, 4> mapped;
  mapped.push_back(clamp(loc, row, tableType.getDimSize(0)));
  for (Value index : indices.drop_front(indexRank))
    mapped.push_back(index);
  return emit(gather.getTable(), mapped);
}

Value ElementEmitter::emitScatterAdd(ScatterAddOp scatter, ValueRange indices) {
  Location loc = scatter.getLoc();
  auto indicesType = cast<RankedTensorType>(scatter.getIndices().getType());
  Type element = cast<RankedTensorType>(scatter.getType()).getElementType();
  Type acc = accumulatorType(element);
  Value init = convertScalar(b_, loc, emit(scatter.getOperand(), indices), acc);
  if (indicesType.getNumElements() == 0)
    return convertScalar(b_, loc, init, element);
  Value result;
  {
    CacheScope scope(*this);
    OpBuilder::InsertionGuard guard(b_);
    Value zero = indexConstant(loc, 0), one = indexConstant(loc, 1);
    Value row = indices.front();
    SmallVector<scf::ForOp, 4> loops;
    SmallVector<Value, 4> position;
    Value carried = init;
    for (int64_t extent : indicesType.getShape()) {
      auto loop = b_.create<scf::ForOp>(
          loc, zero, b_.create<arith::ConstantIndexOp>(loc, extent), one,
          ValueRange{carried});
      loops.push_back(loop);
      position.push_back(loop.getInductionVar());
      carried = loop.getRegionIterArgs()[0];
      b_.setInsertionPointToStart(loop.getBody());
    }
    Value target = toIndex(loc, emit(scatter.getIndices(), position));
    Value match =
        b_.create<arith::CmpIOp>(loc, arith::CmpIPredicate::eq, target, row);
    auto ifOp = b_.create<scf::IfOp>(loc, TypeRange{acc}, match,
                                     /*withElseRegion=*/true);
    Value next;
    {
      OpBuilder::InsertionGuard inner(b_);
      b_.setInsertionPointToStart(ifOp.thenBlock());
      SmallVector<Value, 4> updateIndex(position);
      updateIndex.append(indices.begin() + 1, indices.end());
      Value update =
          convertScalar(b_, loc, emit(scatter.getUpdates(), updateIndex), acc);
      b_.create<scf::YieldOp>(loc, combineAccumulated(b_, loc,
                                                      scatter.getCombineKind(),
                                                      carried, update));
      b_.setInsertionPointToStart(ifOp.elseBlock());
      b_.create<scf::YieldOp>(loc, carried);
    }
    next = ifOp.getResult(0);
    for (size_t i = loops.size(); i-- > 0;) {
      b_.setInsertionPointToEnd(loops[i].getBody());
      b_.create<scf::YieldOp>(loc, next);
      next = loops[i].getResult(0);
    }
    result = next;
  }
  return convertScalar(b_, loc, result, element);
}

bool ElementEmitter::isTiledScatter(ScatterAddOp scatter) {
  return cast<RankedTensorType>(scatter.getType()).getRank() >= 2;
}

void ElementEmitter::emitScatterTile(ScatterAddOp scatter, ValueRange outer,
                                     Value tileStart, Value tileSize,
                                     LaneLoad load, LaneStore store) {
  Location loc = scatter.getLoc();
  auto indicesType = cast<RankedTensorType>(scatter.getIndices().getType());
  Type acc = accumulatorType(
      cast<RankedTensorType>(scatter.getType()).getElementType());
  CacheScope scope(*this);
  OpBuilder::InsertionGuard guard(b_);
  Value zero = indexConstant(loc, 0), one = indexConstant(loc, 1);
  auto lanes = [&](function_ref<void(Value, Value)> body) {
    auto loop = b_.create<scf::ForOp>(loc, zero, tileSize, one);
    OpBuilder::InsertionGuard inner(b_);
    b_.setInsertionPoint(loop.getBody()->getTerminator());
    Value lane = loop.getInductionVar();
    body(lane, b_.create<arith::AddIOp>(loc, tileStart, lane));
  };
  // The operand's elements first.
  lanes([&](Value lane, Value last) {
    SmallVector<Value, 4> at(outer.begin(), outer.end());
    at.push_back(last);
    store(b_, loc, lane, convertScalar(b_, loc, emit(scatter.getOperand(), at), acc));
  });
  // Then, for every index (row-major) naming this row, its update's lanes.
  SmallVector<Value, 4> position;
  for (int64_t extent : indicesType.getShape()) {
    auto loop = b_.create<scf::ForOp>(
        loc, zero, b_.create<arith::ConstantIndexOp>(loc, extent), one);
    b_.setInsertionPoint(loop.getBody()->getTerminator());
    position.push_back(loop.getInductionVar());
  }
  Value target = toIndex(loc, emit(scatter.getIndices(), position));
  Value match = b_.create<arith::CmpIOp>(loc, arith::CmpIPredicate::eq, target,
                                         outer.front());
  auto ifOp = b_.create<scf::IfOp>(loc, match, /*withElseRegion=*/false);
  b_.setInsertionPoint(ifOp.thenBlock()->getTerminator());
  lanes([&](Value lane, Value last) {
    SmallVector<Value, 4> at(position);
    at.append(outer.begin() + 1, outer.end());
    at.push_back(last);
    Value update = convertScalar(b_, loc, emit(scatter.getUpdates(), at), acc);
    store(b_, loc, lane,
          combineAccumulated(b_, loc, scatter.getCombineKind(),
                             load(b_, loc, lane), update));
  });
}

void ElementEmitter::seedScatter(ScatterAddOp scatter, ValueRange indices,
                                 Value lane, LaneLoad load) {
  seedScatterValue(scatter, indices, load(b_, scatter.getLoc(), lane));
}

SmallVector<Value, 4>
ElementEmitter::emitScatterRows(ScatterAddOp scatter, ValueRange outer,
                                ArrayRef<Value> columns, Value chunkStep,
                                ScatterCollect collect, ScatterCollect match) {
  Location loc = scatter.getLoc();
  auto indicesType = cast<RankedTensorType>(scatter.getIndices().getType());
  Type acc = accumulatorType(
      cast<RankedTensorType>(scatter.getType()).getElementType());
  auto at = [&](ValueRange front, Value column) {
    SmallVector<Value, 4> indices(front.begin(), front.end());
    indices.push_back(column);
    return indices;
  };
  // The operand's elements, built where the caller is.
  SmallVector<Value, 4> init;
  for (Value column : columns)
    init.push_back(
        convertScalar(b_, loc, emit(scatter.getOperand(), at(outer, column)), acc));
  if (indicesType.getNumElements() == 0)
    return init;
  CacheScope scope(*this);
  OpBuilder::InsertionGuard guard(b_);
  Value zero = indexConstant(loc, 0), one = indexConstant(loc, 1);
  auto chunks = b_.create<scf::ForOp>(
      loc, zero,
      b_.create<arith::ConstantIndexOp>(loc, indicesType.getNumElements()),
      chunkStep, init);
  b_.setInsertionPointToStart(chunks.getBody());
  Value count = collect(b_, loc, chunks.getInductionVar());
  auto matches = b_.create<scf::ForOp>(loc, zero, count, one,
                                       chunks.getRegionIterArgs());
  b_.setInsertionPointToStart(matches.getBody());
  Value flat = match(b_, loc, matches.getInductionVar());
  // The position's indices (row-major over the indices' shape).
  SmallVector<Value, 4> position =
      delinearizeIndex(b_, loc, flat, indicesType.getShape());
  SmallVector<Value, 4> sums;
  for (auto [column, carried] :
       llvm::zip(columns, matches.getRegionIterArgs())) {
    SmallVector<Value, 4> front(position);
    front.append(outer.begin() + 1, outer.end());
    Value update =
        convertScalar(b_, loc, emit(scatter.getUpdates(), at(front, column)), acc);
    sums.push_back(
        combineAccumulated(b_, loc, scatter.getCombineKind(), carried, update));
  }
  b_.create<scf::YieldOp>(loc, sums);
  b_.setInsertionPointToEnd(chunks.getBody());
  b_.create<scf::YieldOp>(loc, matches.getResults());
  return SmallVector<Value, 4>(chunks.getResults());
}

void ElementEmitter::seedScatterValue(ScatterAddOp scatter, ValueRange indices,
                                      Value accumulator) {
  Value value = convertScalar(
      b_, scatter.getLoc(), accumulator,
      cast<RankedTensorType>(scatter.getType()).getElementType());
  std::vector<void *> key;
  key.push_back(scatter.getResult().getAsOpaquePointer());
  for (Value index : indices)
    key.push_back(index.getAsOpaquePointer());
  cache_[key] = value;
}

mlir::Type ElementEmitter::tileAccumulatorType(Operation *op, bool wideSums) {
  if (auto reduce = dyn_cast<ReduceOp>(op))
    return reductionAccumulatorType(reduce, wideSums);
  return accumulatorType(
      cast<RankedTensorType>(op->getResult(0).getType()).getElementType());
}

void ElementEmitter::emitTile(Operation *op, ValueRange outer, Value tileStart,
                              Value tileSize, LaneLoad load, LaneStore store,
                              ElementVisit visit) {
  if (auto reduce = dyn_cast<ReduceOp>(op))
    return emitReductionTile(reduce, outer, tileStart, tileSize, load, store,
                             visit);
  assert(!visit && "a scatter tile visits no operand elements");
  emitScatterTile(cast<ScatterAddOp>(op), outer, tileStart, tileSize, load,
                  store);
}

void ElementEmitter::seedTile(Operation *op, ValueRange indices, Value lane,
                              LaneLoad load) {
  if (auto reduce = dyn_cast<ReduceOp>(op))
    return seedReduction(reduce, indices, lane, load);
  seedScatter(cast<ScatterAddOp>(op), indices, lane, load);
}

// Whether each of |out| windows of |window| elements |stride| apart, the
// first starting |padLow| before the input, lies inside an input of
// |extent|: then no element of any window needs a bounds check.
static bool windowsInside(int64_t extent, int64_t out, int64_t window,
                          int64_t stride, int64_t padLow) {
  return padLow == 0 && (out == 0 || (out - 1) * stride + window <= extent);
}

// Windows this small are written out element by element when they need no
// bounds checks: straight-line loads, compares and selects, which LLVM
// vectorizes across the output row, instead of two loops whose first
// iteration is special.
static constexpr int64_t kUnrolledWindowElements = 16;

ElementEmitter::WindowArgmax
ElementEmitter::emitWindowArgmax(Location loc, Value input, Value n, Value c,
                                 Value oh, Value ow, ArrayRef<int64_t> window,
                                 ArrayRef<int64_t> strides,
                                 ArrayRef<int64_t> padding,
                                 ArrayRef<int64_t> outShape) {
  auto inputType = cast<RankedTensorType>(input.getType());
  int64_t h = inputType.getDimSize(2), w = inputType.getDimSize(3);
  Type acc = computeType(inputType.getElementType());
  if (windowsInside(h, outShape[2], window[0], strides[0], padding[0]) &&
      windowsInside(w, outShape[3], window[1], strides[1], padding[2]) &&
      window[0] * window[1] <= kUnrolledWindowElements &&
      window[0] * window[1] > 0) {
    // The same choice as the loops below make: the first element, then an
    // element replaces the best when the best is not NaN and the element is
    // NaN or greater (ugt), in row-major order.
    Value hBase = b_.create<arith::MulIOp>(loc, oh, indexConstant(loc, strides[0]));
    Value wBase = b_.create<arith::MulIOp>(loc, ow, indexConstant(loc, strides[1]));
    WindowArgmax best;
    for (int64_t i = 0; i < window[0]; ++i)
      for (int64_t j = 0; j < window[1]; ++j) {
        Value ih = i ? b_.create<arith::AddIOp>(loc, hBase, indexConstant(loc, i))
                           .getResult()
                     : hBase;
        Value iw = j ? b_.create<arith::AddIOp>(loc, wBase, indexConstant(loc, j))
                           .getResult()
                     : wBase;
        Value x = convertScalar(b_, loc, emit(input, {n, c, ih, iw}), acc);
        Value here = b_.create<arith::AddIOp>(
            loc, b_.create<arith::MulIOp>(loc, ih, indexConstant(loc, w)), iw);
        if (!best.value) {
          best.value = x;
          best.position = here;
          continue;
        }
        Value take = b_.create<arith::AndIOp>(
            loc,
            b_.create<arith::CmpFOp>(loc, arith::CmpFPredicate::ORD, best.value,
                                     best.value),
            b_.create<arith::CmpFOp>(loc, arith::CmpFPredicate::UGT, x, best.value));
        best.value = b_.create<arith::SelectOp>(loc, take, x, best.value);
        best.position = b_.create<arith::SelectOp>(loc, take, here, best.position);
      }
    return best;
  }
  auto floatType = cast<FloatType>(acc);
  Value negInf = b_.create<arith::ConstantOp>(
      loc, b_.getFloatAttr(acc, llvm::APFloat::getInf(floatType.getFloatSemantics(),
                                                     /*Negative=*/true)));
  Value none = indexConstant(loc, -1);
  Value zero = indexConstant(loc, 0), one = indexConstant(loc, 1);
  auto scaled = [&](Value i, int64_t stride, int64_t pad) {
    Value v = b_.create<arith::MulIOp>(loc, i, indexConstant(loc, stride));
    return b_.create<arith::SubIOp>(loc, v, indexConstant(loc, pad)).getResult();
  };
  Value hBase = scaled(oh, strides[0], padding[0]);
  Value wBase = scaled(ow, strides[1], padding[2]);
  WindowArgmax best;
  {
    CacheScope scope(*this);
    OpBuilder::InsertionGuard guard(b_);
    auto rows = b_.create<scf::ForOp>(
        loc, zero, b_.create<arith::ConstantIndexOp>(loc, window[0]), one,
        ValueRange{negInf, none});
    b_.setInsertionPointToStart(rows.getBody());
    Value ih = b_.create<arith::AddIOp>(loc, hBase, rows.getInductionVar());
    Value hInside = b_.create<arith::AndIOp>(
        loc,
        b_.create<arith::CmpIOp>(loc, arith::CmpIPredicate::sge, ih, zero),
        b_.create<arith::CmpIOp>(loc, arith::CmpIPredicate::slt, ih,
                                 indexConstant(loc, h)));
    auto cols = b_.create<scf::ForOp>(
        loc, zero, b_.create<arith::ConstantIndexOp>(loc, window[1]), one,
        rows.getRegionIterArgs());
    b_.setInsertionPointToStart(cols.getBody());
    Value iw = b_.create<arith::AddIOp>(loc, wBase, cols.getInductionVar());
    Value inside = b_.create<arith::AndIOp>(
        loc, hInside,
        b_.create<arith::AndIOp>(
            loc, b_.create<arith::CmpIOp>(loc, arith::CmpIPredicate::sge, iw, zero),
            b_.create<arith::CmpIOp>(loc, arith::CmpIPredicate::slt, iw,
                                     indexConstant(loc, w))));
    Value value = cols.getRegionIterArgs()[0];
    Value position = cols.getRegionIterArgs()[1];
    Value x = convertScalar(
        b_, loc, emit(input, {n, c, clamp(loc, ih, h), clamp(loc, iw, w)}), acc);
    // Take x when nothing is taken yet, or when the best is not NaN and x is
    // NaN or greater (ugt: unordered or greater).
    Value empty =
        b_.create<arith::CmpIOp>(loc, arith::CmpIPredicate::slt, position, zero);
    Value bestIsNumber =
        b_.create<arith::CmpFOp>(loc, arith::CmpFPredicate::ORD, value, value);
    Value better =
        b_.create<arith::CmpFOp>(loc, arith::CmpFPredicate::UGT, x, value);
    Value take = b_.create<arith::AndIOp>(
        loc, inside,
        b_.create<arith::OrIOp>(loc, empty,
                                b_.create<arith::AndIOp>(loc, bestIsNumber, better)));
    Value here = b_.create<arith::AddIOp>(
        loc, b_.create<arith::MulIOp>(loc, ih, indexConstant(loc, w)), iw);
    Value nextValue = b_.create<arith::SelectOp>(loc, take, x, value);
    Value nextPosition = b_.create<arith::SelectOp>(loc, take, here, position);
    b_.create<scf::YieldOp>(loc, ValueRange{nextValue, nextPosition});
    b_.setInsertionPointToEnd(rows.getBody());
    b_.create<scf::YieldOp>(loc, cols.getResults());
    best.value = rows.getResult(0);
    best.position = rows.getResult(1);
  }
  return best;
}

Value ElementEmitter::emitMaxPool(MaxPool2DOp pool, ValueRange indices) {
  Location loc = pool.getLoc();
  WindowArgmax best = emitWindowArgmax(
      loc, pool.getInput(), indices[0], indices[1], indices[2], indices[3],
      pool.getWindow(), pool.getStrides(), pool.getPadding(),
      cast<RankedTensorType>(pool.getType()).getShape());
  return convertScalar(b_, loc, best.value,
                       cast<RankedTensorType>(pool.getType()).getElementType());
}

Value ElementEmitter::emitUniform(Location loc, RankedTensorType type,
                                  Value counterTensor, uint64_t seed,
                                  ValueRange indices) {
  Type i32 = b_.getI32Type(), i64 = b_.getI64Type(), f64 = b_.getF64Type();
  auto word = [&](uint32_t v) {
    return b_.create<arith::ConstantOp>(loc, b_.getIntegerAttr(i32, v)).getResult();
  };
  auto low = [&](Value v) { return b_.create<arith::TruncIOp>(loc, i32, v).getResult(); };
  auto high = [&](Value v) {
    Value shifted = b_.create<arith::ShRUIOp>(
        loc, v, b_.create<arith::ConstantOp>(loc, b_.getIntegerAttr(i64, 32)));
    return low(shifted);
  };
  // The element's row-major index in the result.
  Value flat = indexConstant(loc, 0);
  for (auto [d, index] : llvm::enumerate(indices)) {
    if (d > 0)
      flat = b_.create<arith::MulIOp>(loc, flat, indexConstant(loc, type.getDimSize(d)));
    flat = b_.create<arith::AddIOp>(loc, flat, index);
  }
  Value i = b_.create<arith::IndexCastOp>(loc, i64, flat);
  Value counter = convertScalar(b_, loc, emit(counterTensor, {}), i64);
  // Counter (low and high words of the counter, then of the index); the
  // key's words come from the seed, bumped by the Weyl constants each
  // round, and are constants here.
  Value c[4] = {low(counter), high(counter), low(i), high(i)};
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += philox::kW0;
      k1 += philox::kW1;
    }
    auto p0 = b_.create<arith::MulUIExtendedOp>(loc, word(philox::kM0), c[0]);
    auto p1 = b_.create<arith::MulUIExtendedOp>(loc, word(philox::kM1), c[2]);
    Value n0 = b_.create<arith::XOrIOp>(
        loc, b_.create<arith::XOrIOp>(loc, p1.getHigh(), c[1]), word(k0));
    Value n2 = b_.create<arith::XOrIOp>(
        loc, b_.create<arith::XOrIOp>(loc, p0.getHigh(), c[3]), word(k1));
    c[0] = n0;
    c[1] = p1.getLow();
    c[2] = n2;
    c[3] = p0.getLow();
  }
  // u = (word >> 8) 2^-24.
  Value bits = b_.create<arith::ShRUIOp>(loc, c[0], word(8));
  return b_.create<arith::MulFOp>(
      loc, b_.create<arith::UIToFPOp>(loc, f64, bits),
      b_.create<arith::ConstantOp>(loc, b_.getFloatAttr(f64, 0x1.0p-24)));
}

Value ElementEmitter::emitDropout(DropoutOp dropout, ValueRange indices) {
  Location loc = dropout.getLoc();
  auto type = cast<RankedTensorType>(dropout.getType());
  Type f64 = b_.getF64Type();
  Value u = emitUniform(loc, type, dropout.getCounter(),
                        static_cast<uint64_t>(dropout.getSeed()), indices);
  // Keep when u >= rate; the kept element times 1 / (1 - rate) in f64,
  // rounded to the element type once (bf16 and f16 by the CPU lowering's
  // TruncF64ToHalfThroughOdd, CUDA's __double2*).
  double rate = dropout.getRate().convertToDouble();
  Value keep = b_.create<arith::CmpFOp>(
      loc, arith::CmpFPredicate::OGE, u,
      b_.create<arith::ConstantOp>(loc, b_.getFloatAttr(f64, rate)));
  Value x = convertScalar(b_, loc, emit(dropout.getOperand(), indices), f64);
  Value scaled = b_.create<arith::MulFOp>(
      loc, x, b_.create<arith::ConstantOp>(loc, b_.getFloatAttr(f64, 1.0 / (1.0 - rate))));
  Type element = type.getElementType();
  Value kept = convertScalar(b_, loc, scaled, element);
  Value zero = convertScalar(
      b_, loc, b_.create<arith::ConstantOp>(loc, b_.getFloatAttr(f64, 0.0)), element);
  return b_.create<arith::SelectOp>(loc, keep, kept, zero);
}

Value ElementEmitter::emitRandomUniform(RandomUniformOp random,
                                        ValueRange indices) {
  auto type = cast<RankedTensorType>(random.getType());
  Value u = emitUniform(random.getLoc(), type, random.getCounter(),
                        static_cast<uint64_t>(random.getSeed()), indices);
  // Rounded to the element type once, as the reference rounds it.
  return convertScalar(b_, random.getLoc(), u, type.getElementType());
}

std::pair<Value, Value>
ElementEmitter::emitWindowGradient(MaxPool2DGradOp grad, Value n, Value c,
                                   Value oh, Value ow, Value here) {
  Location loc = grad.getLoc();
  auto inputType = cast<RankedTensorType>(grad.getInput().getType());
  auto outType = cast<RankedTensorType>(grad.getGradOutput().getType());
  WindowArgmax best = emitWindowArgmax(loc, grad.getInput(), n, c, oh, ow,
                                       grad.getWindow(), grad.getStrides(),
                                       grad.getPadding(), outType.getShape());
  Value hit =
      b_.create<arith::CmpIOp>(loc, arith::CmpIPredicate::eq, best.position, here);
  Value dy = convertScalar(b_, loc, emit(grad.getGradOutput(), {n, c, oh, ow}),
                           computeType(inputType.getElementType()));
  return {hit, dy};
}

Value ElementEmitter::emitMaxPoolGrad(MaxPool2DGradOp grad, ValueRange indices) {
  Location loc = grad.getLoc();
  auto inputType = cast<RankedTensorType>(grad.getInput().getType());
  auto outType = cast<RankedTensorType>(grad.getGradOutput().getType());
  Type element = inputType.getElementType();
  Type acc = computeType(element);
  ArrayRef<int64_t> window = grad.getWindow(), strides = grad.getStrides(),
                    padding = grad.getPadding();
  int64_t w = inputType.getDimSize(3);
  Value n = indices[0], c = indices[1], h = indices[2], x = indices[3];
  Value init = b_.create<arith::ConstantOp>(loc, b_.getFloatAttr(acc, 0.0));
  if (window[0] == strides[0] && window[1] == strides[1]) {
    // Windows that tile the input without overlap: (h, w) lies in exactly
    // one window, ((h + top) / stride_h, (w + left) / stride_w), or in none
    // past the last one. No loop over candidate windows.
    Value oh = b_.create<arith::DivUIOp>(
        loc, b_.create<arith::AddIOp>(loc, h, indexConstant(loc, padding[0])),
        indexConstant(loc, strides[0]));
    Value ow = b_.create<arith::DivUIOp>(
        loc, b_.create<arith::AddIOp>(loc, x, indexConstant(loc, padding[2])),
        indexConstant(loc, strides[1]));
    Value here = b_.create<arith::AddIOp>(
        loc, b_.create<arith::MulIOp>(loc, h, indexConstant(loc, w)), x);
    // Window (oh, ow)'s gradient where (h, x) is its maximum, else 0.
    auto gradientHere = [&]() -> Value {
      auto [hit, dy] = emitWindowGradient(grad, n, c, oh, ow, here);
      return b_.create<arith::SelectOp>(loc, hit, dy, init);
    };
    // Every input element in some window (the windows reach the input's
    // last row and column): no branch.
    if ((inputType.getDimSize(2) - 1 + padding[0]) / strides[0] <
            outType.getDimSize(2) &&
        (w - 1 + padding[2]) / strides[1] < outType.getDimSize(3))
      return convertScalar(b_, loc, gradientHere(), element);
    Value ok = b_.create<arith::AndIOp>(
        loc,
        b_.create<arith::CmpIOp>(loc, arith::CmpIPredicate::slt, oh,
                                 indexConstant(loc, outType.getDimSize(2))),
        b_.create<arith::CmpIOp>(loc, arith::CmpIPredicate::slt, ow,
                                 indexConstant(loc, outType.getDimSize(3))));
    auto ifOp = b_.create<scf::IfOp>(loc, TypeRange{acc}, ok,
                                     /*withElseRegion=*/true);
    {
      CacheScope scope(*this);
      OpBuilder::InsertionGuard guard(b_);
      b_.setInsertionPointToStart(ifOp.thenBlock());
      b_.create<scf::YieldOp>(loc, gradientHere());
      b_.setInsertionPointToStart(ifOp.elseBlock());
      b_.create<scf::YieldOp>(loc, init);
    }
    return convertScalar(b_, loc, ifOp.getResult(0), element);
  }
  Value result;
  {
    CacheScope scope(*this);
    OpBuilder::InsertionGuard guard(b_);
    Value zero = indexConstant(loc, 0), one = indexConstant(loc, 1);
    Value here = b_.create<arith::AddIOp>(
        loc, b_.create<arith::MulIOp>(loc, h, indexConstant(loc, w)), x);
    // The window index o covering input index i at window offset k is
    // (i + pad - k) / stride when that divides exactly and lies in
    // [0, extent). Walking k downwards walks o upwards, the interpreter's
    // order of adding.
    auto windowIndex = [&](Value i, Value j, int64_t k, int64_t stride,
                           int64_t pad, int64_t extent, Value &ok) {
      Value offset = b_.create<arith::SubIOp>(loc, indexConstant(loc, k - 1), j);
      Value t = b_.create<arith::SubIOp>(
          loc, b_.create<arith::AddIOp>(loc, i, indexConstant(loc, pad)), offset);
      Value s = indexConstant(loc, stride);
      Value o = b_.create<arith::DivSIOp>(loc, t, s);
      Value exact = b_.create<arith::CmpIOp>(
          loc, arith::CmpIPredicate::eq, b_.create<arith::RemSIOp>(loc, t, s), zero);
      Value nonNegative =
          b_.create<arith::CmpIOp>(loc, arith::CmpIPredicate::sge, t, zero);
      Value below = b_.create<arith::CmpIOp>(loc, arith::CmpIPredicate::slt, o,
                                             indexConstant(loc, extent));
      ok = b_.create<arith::AndIOp>(
          loc, exact, b_.create<arith::AndIOp>(loc, nonNegative, below));
      return o;
    };
    auto rows = b_.create<scf::ForOp>(
        loc, zero, b_.create<arith::ConstantIndexOp>(loc, window[0]), one,
        ValueRange{init});
    b_.setInsertionPointToStart(rows.getBody());
    Value rowOk;
    Value oh = windowIndex(h, rows.getInductionVar(), window[0], strides[0],
                           padding[0], outType.getDimSize(2), rowOk);
    auto cols = b_.create<scf::ForOp>(
        loc, zero, b_.create<arith::ConstantIndexOp>(loc, window[1]), one,
        rows.getRegionIterArgs());
    b_.setInsertionPointToStart(cols.getBody());
    Value colOk;
    Value ow = windowIndex(x, cols.getInductionVar(), window[1], strides[1],
                           padding[2], outType.getDimSize(3), colOk);
    Value carried = cols.getRegionIterArgs()[0];
    Value ok = b_.create<arith::AndIOp>(loc, rowOk, colOk);
    auto ifOp = b_.create<scf::IfOp>(loc, TypeRange{acc}, ok,
                                     /*withElseRegion=*/true);
    {
      OpBuilder::InsertionGuard inner(b_);
      CacheScope innerScope(*this);
      b_.setInsertionPointToStart(ifOp.thenBlock());
      auto [hit, dy] = emitWindowGradient(grad, n, c, oh, ow, here);
      Value sum = b_.create<arith::AddFOp>(loc, carried, dy);
      b_.create<scf::YieldOp>(
          loc, ValueRange{b_.create<arith::SelectOp>(loc, hit, sum, carried)});
      b_.setInsertionPointToStart(ifOp.elseBlock());
      b_.create<scf::YieldOp>(loc, carried);
    }
    b_.create<scf::YieldOp>(loc, ifOp.getResults());
    b_.setInsertionPointToEnd(rows.getBody());
    b_.create<scf::YieldOp>(loc, cols.getResults());
    result = rows.getResult(0);
  }
  return convertScalar(b_, loc, result, element);
}

} // namespace kiln
