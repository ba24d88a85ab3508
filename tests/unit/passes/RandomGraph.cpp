//===- RandomGraph.cpp - random kiln functions for pass tests -------------===//
//
// See RandomGraph.h. Values are drawn from a pool that favours recent ones
// (chains) but reaches back (diamonds, values with many users); an operand
// of a needed shape that the pool lacks becomes a new argument.
//
//===----------------------------------------------------------------------===//

#include "tests/unit/passes/RandomGraph.h"

#include "ir/Interpreter.h"
#include "ir/KilnDialect.h"
#include "ir/KilnOps.h"

#include "mlir/IR/Builders.h"

#include <algorithm>
#include <cmath>
#include <random>

using namespace mlir;

namespace kiln::test {

namespace {

class Generator {
public:
  Generator(MLIRContext *context, uint64_t seed, const RandomGraphOptions &options)
      : rng_(seed), options_(options), b_(context), loc_(b_.getUnknownLoc()),
        float_(options.floatType == DType::f32 ? Type(b_.getF32Type())
                                             : Type(b_.getF64Type())) {}

  OwningOpRef<ModuleOp> build();

private:
  int64_t pick(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng_);
  }
  bool chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
  RankedTensorType tensor(ArrayRef<int64_t> shape, Type element = nullptr) {
    return RankedTensorType::get(shape, element ? element : float_);
  }
  ArrayRef<int64_t> shapeOf(Value v) { return cast<RankedTensorType>(v.getType()).getShape(); }
  int64_t rankOf(Value v) { return shapeOf(v).size(); }
  static int64_t elements(ArrayRef<int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    return n;
  }

  SmallVector<int64_t> randomShape(int64_t minRank, int64_t maxRank) {
    SmallVector<int64_t> shape;
    int64_t count = 1;
    for (int64_t i = 0, r = pick(minRank, maxRank); i < r; ++i) {
      int64_t extent = pick(2, 5);
      if (options_.longExtent > 5 && chance(options_.longChance)) {
        // Log-uniform: as many rows of 6 to 60 as of 60 to 600.
        std::uniform_real_distribution<double> log(std::log(6.0),
                                                   std::log(options_.longExtent + 1.0));
        int64_t wide = std::min<int64_t>(std::exp(log(rng_)), options_.longExtent);
        // The other dimensions take at least 2 each.
        if (count * wide * (int64_t(1) << (r - 1 - i)) <= options_.maxElements)
          extent = wide;
      }
      count *= extent;
      shape.push_back(extent);
    }
    return shape;
  }
  Value argument(RankedTensorType type) {
    Value v = block_->addArgument(type, loc_);
    pool_.push_back(v);
    return v;
  }
  // A pool value, usually a recent one.
  Value any() {
    if (chance(0.6)) {
      size_t recent = std::min<size_t>(pool_.size(), 4);
      return pool_[pool_.size() - 1 - pick(0, recent - 1)];
    }
    return pool_[pick(0, pool_.size() - 1)];
  }
  Value anyWithRank(int64_t minRank) {
    for (int tries = 0; tries < 8; ++tries) {
      Value v = any();
      if (rankOf(v) >= minRank)
        return v;
    }
    return argument(tensor(randomShape(minRank, std::max<int64_t>(minRank, 3))));
  }
  // A value of |shape|: a pool value, a broadcast of a smaller one, or a
  // new argument.
  Value ofShape(ArrayRef<int64_t> shape) {
    SmallVector<Value> matches;
    for (Value v : pool_)
      if (shapeOf(v) == shape)
        matches.push_back(v);
    if (!matches.empty() && chance(0.8))
      return matches[pick(0, matches.size() - 1)];
    if (!shape.empty() && chance(0.5)) {
      // Broadcast a vector along the last dimension or a scalar.
      SmallVector<int64_t> dims;
      SmallVector<int64_t> small;
      if (chance(0.5)) {
        dims.push_back(shape.size() - 1);
        small.push_back(shape.back());
      }
      Value source = argument(tensor(small));
      return push(b_.create<BroadcastInDimOp>(loc_, tensor(shape), source, dims));
    }
    return argument(tensor(shape));
  }
  Value push(Value v) {
    pool_.push_back(v);
    return v;
  }
  // Whether |v| is known to be the same at every index of its dimensions
  // from |axis| on: a splat, a broadcast that maps none of them (or only
  // extent-1 ones, or ones its operand is constant along), a reshape of
  // such runs, or elementwise ops of such values. A layer norm over
  // such rows divides their rounding noise (the mean of a constant rounds)
  // by the root of eps: no two orders of summation agree, and no model
  // normalizes a constant.
  bool constantAlong(Value v, int64_t axis) {
    Operation *def = v.getDefiningOp();
    if (!def)
      return false;
    if (auto constant = dyn_cast<ConstantOp>(def))
      return isa<SplatElementsAttr>(constant.getValue());
    if (auto broadcast = dyn_cast<BroadcastInDimOp>(def)) {
      ArrayRef<int64_t> dims = broadcast.getBroadcastDimensions();
      ArrayRef<int64_t> from = shapeOf(broadcast.getOperand());
      bool mapsNone = true;
      int64_t first = dims.size(); // the first operand dimension mapped there
      for (auto [i, d] : llvm::enumerate(dims)) {
        if (d < axis)
          continue;
        first = std::min<int64_t>(first, i);
        mapsNone &= from[i] == 1;
      }
      // Or the operand is constant along the dimensions it maps there (a
      // suffix of them when the mapping is in order).
      return mapsNone ||
             (llvm::is_sorted(dims) && constantAlong(broadcast.getOperand(), first));
    }
    if (auto reshape = dyn_cast<ReshapeOp>(def)) {
      // A row of |v| (its R elements from |axis| on) is a run of R
      // elements of the operand in row-major order: constant when the
      // operand is constant on its runs from some dimension on and those
      // runs' length is a multiple of R (a broadcast row reshaped, as in
      // reshape(broadcast([3] -> [3, 233, 2])) -> [3, 466]).
      ArrayRef<int64_t> from = shapeOf(reshape.getOperand());
      int64_t row = 1;
      for (int64_t d : shapeOf(v).drop_front(axis))
        row *= d;
      int64_t run = 1;
      for (int64_t a = from.size(); a >= 0; --a) {
        if (a < static_cast<int64_t>(from.size()))
          run *= from[a];
        if (run % row == 0 && constantAlong(reshape.getOperand(), a))
          return true;
      }
      return false;
    }
    return def->hasTrait<OpTrait::Elementwise>() && def->getNumOperands() > 0 &&
           llvm::all_of(def->getOperands(),
                        [&](Value operand) { return constantAlong(operand, axis); });
  }

  void step();
  void gather();
  Value unary(Value x);
  Value binary(Value x);

  std::mt19937_64 rng_;
  RandomGraphOptions options_;
  OpBuilder b_;
  Location loc_;
  Type float_;
  Block *block_ = nullptr;
  std::vector<Value> pool_;
};

Value Generator::unary(Value x) {
  switch (pick(0, 7)) {
  case 0: return push(b_.create<NegOp>(loc_, x));
  case 1: return push(b_.create<AbsOp>(loc_, x));
  case 2: return push(b_.create<ExpOp>(loc_, b_.create<TanhOp>(loc_, x)));
  case 3: return push(b_.create<TanhOp>(loc_, x));
  case 4: return push(b_.create<SigmoidOp>(loc_, x));
  case 5: return push(b_.create<ReluOp>(loc_, x));
  case 6: return push(b_.create<SqrtOp>(loc_, b_.create<AbsOp>(loc_, x)));
  default: {
    if (!options_.roundingSteps)
      return push(b_.create<TanhOp>(loc_, x));
    // Through f32 (from f32: bf16) and back: a rounding step.
    Type narrowType = float_.isF32() ? Type(b_.getBF16Type()) : Type(b_.getF32Type());
    Value narrow = b_.create<ConvertOp>(loc_, tensor(shapeOf(x), narrowType), x);
    return push(b_.create<ConvertOp>(loc_, x.getType(), narrow));
  }
  }
}

Value Generator::binary(Value x) {
  Value y = chance(0.1) ? x : ofShape(shapeOf(x));
  switch (pick(0, 6)) {
  case 0: return push(b_.create<AddOp>(loc_, x, y));
  case 1: return push(b_.create<SubOp>(loc_, x, y));
  case 2: return push(b_.create<MulOp>(loc_, x, y));
  case 3: return push(b_.create<MaxOp>(loc_, x, y));
  case 4: return push(b_.create<MinOp>(loc_, x, y));
  case 5: {
    Value isLess = b_.create<CompareOp>(loc_, CompareDirection::lt, x, y);
    return push(b_.create<SelectOp>(loc_, isLess, x, y));
  }
  default: {
    auto type = cast<RankedTensorType>(x.getType());
    auto one = DenseElementsAttr::get(type, b_.getFloatAttr(float_, 1.0));
    Value c = b_.create<ConstantOp>(loc_, type, one);
    return push(b_.create<DivOp>(loc_, x, b_.create<AddOp>(loc_, c, b_.create<AbsOp>(loc_, y))));
  }
  }
}

void Generator::gather() {
  // A table of at least 4 rows (the indices' bound), a pool value when one
  // fits.
  Value table;
  for (int tries = 0; tries < 8 && !table; ++tries) {
    Value v = any();
    if (rankOf(v) >= 2 && shapeOf(v)[0] >= 4)
      table = v;
  }
  if (!table) {
    SmallVector<int64_t> shape = randomShape(2, 3);
    shape[0] = pick(4, 12);
    table = argument(tensor(shape));
  }
  // The result (the indices' shape, then a row's) within rank 4.
  SmallVector<int64_t> indicesShape = randomShape(1, std::min<int64_t>(2, 5 - rankOf(table)));
  if (options_.longExtent > 5 &&
      elements(indicesShape) * elements(shapeOf(table).drop_front()) >
          options_.maxElements) {
    unary(table);
    return;
  }
  Value indices = block_->addArgument(
      RankedTensorType::get(indicesShape, b_.getIntegerType(32)), loc_);
  push(b_.create<GatherOp>(loc_, table, indices));
}

void Generator::step() {
  if (options_.gathers && chance(0.08)) {
    gather();
    return;
  }
  int choice = pick(0, 15);
  if (!options_.composites && choice >= 12 && choice <= 14)
    choice = 0;
  if (!options_.collectives && choice == 15)
    choice = 1;
  switch (choice) {
  case 0:
  case 1:
    unary(any());
    return;
  case 2:
  case 3:
  case 4:
    binary(any());
    return;
  case 5: { // broadcast_in_dim into a higher rank
    Value x = any();
    int64_t rank = std::min<int64_t>(rankOf(x) + pick(0, 2), 4);
    // With long extents, the result stays within maxElements too.
    if (options_.longExtent > 5)
      while (rank > rankOf(x) &&
             (elements(shapeOf(x)) << (rank - rankOf(x))) > options_.maxElements)
        --rank;
    SmallVector<int64_t> dims(rank);
    for (int64_t i = 0; i < rank; ++i)
      dims[i] = i;
    std::shuffle(dims.begin(), dims.end(), rng_);
    dims.resize(rankOf(x));
    llvm::sort(dims);
    SmallVector<int64_t> shape = randomShape(rank, rank);
    for (auto [i, d] : llvm::enumerate(dims))
      shape[d] = shapeOf(x)[i];
    if (options_.longExtent > 5 && elements(shape) > options_.maxElements)
      for (int64_t d = 0; d < rank; ++d)
        if (!llvm::is_contained(dims, d))
          shape[d] = 2;
    push(b_.create<BroadcastInDimOp>(loc_, tensor(shape), x, dims));
    return;
  }
  case 6: { // reshape: flatten, or merge two neighbouring dimensions
    Value x = anyWithRank(2);
    SmallVector<int64_t> shape(shapeOf(x));
    int64_t i = pick(0, shape.size() - 2);
    if (chance(0.3)) {
      shape = {elements(shape)};
    } else {
      shape[i] *= shape[i + 1];
      shape.erase(shape.begin() + i + 1);
    }
    push(b_.create<ReshapeOp>(loc_, tensor(shape), x));
    return;
  }
  case 7: { // transpose
    Value x = anyWithRank(2);
    SmallVector<int64_t> perm;
    for (int64_t i = 0; i < rankOf(x); ++i)
      perm.push_back(i);
    std::shuffle(perm.begin(), perm.end(), rng_);
    push(b_.create<TransposeOp>(loc_, x, perm));
    return;
  }
  case 8: { // slice or pad
    Value x = anyWithRank(1);
    SmallVector<int64_t> start, limit, strides, low, high;
    for (int64_t d : shapeOf(x)) {
      start.push_back(pick(0, std::min<int64_t>(1, d - 1)));
      limit.push_back(pick(start.back() + 1, d));
      strides.push_back(pick(1, 2));
      low.push_back(pick(0, 1));
      high.push_back(pick(0, 1));
    }
    if (chance(0.6))
      push(b_.create<SliceOp>(loc_, x, start, limit, strides));
    else
      push(b_.create<PadOp>(loc_, x, b_.getDenseI64ArrayAttr(low),
                            b_.getDenseI64ArrayAttr(high), b_.getF64FloatAttr(0.5)));
    return;
  }
  case 9:
  case 10: { // reduce
    Value x = anyWithRank(1);
    SmallVector<int64_t> dims;
    for (int64_t d = 0; d < rankOf(x); ++d)
      if (chance(0.5))
        dims.push_back(d);
    if (dims.empty())
      dims.push_back(pick(0, rankOf(x) - 1));
    ReduceKind kinds[] = {ReduceKind::sum, ReduceKind::max, ReduceKind::min,
                          ReduceKind::mean, ReduceKind::prod};
    ReduceKind kind = kinds[pick(0, 4)];
    int64_t count = 1;
    for (int64_t d : dims)
      count *= shapeOf(x)[d];
    if (kind == ReduceKind::prod) {
      // A product of at most 256 factors in (0.875, 1.125), 1 + tanh(x) / 8:
      // the interpreter multiplies in f64, a kernel in f32 partial products
      // in its own order, and factors of any size could overflow one
      // partial and underflow another (inf * 0) where the whole product is
      // finite.
      if (count > 256) {
        kind = ReduceKind::sum;
      } else {
        auto type = cast<RankedTensorType>(x.getType());
        auto splat = [&](double v) -> Value {
          return b_.create<ConstantOp>(
              loc_, type,
              DenseElementsAttr::get(type, b_.getFloatAttr(float_, v)));
        };
        x = b_.create<AddOp>(
            loc_, splat(1.0),
            b_.create<MulOp>(loc_, b_.create<TanhOp>(loc_, x), splat(0.125)));
      }
    }
    push(b_.create<ReduceOp>(loc_, kind, x, dims));
    return;
  }
  case 11: { // dot_general: a matmul, sometimes batched
    Value x = anyWithRank(2);
    if (rankOf(x) > 3)
      x = push(b_.create<ReshapeOp>(
          loc_, tensor({shapeOf(x)[0] * shapeOf(x)[1], shapeOf(x)[2], shapeOf(x)[3]}), x));
    ArrayRef<int64_t> s = shapeOf(x);
    SmallVector<int64_t> yShape;
    if (s.size() == 3)
      yShape = {s[0], s[2], pick(2, 5)};
    else
      yShape = {s[1], pick(2, 5)};
    Value y = ofShape(yShape);
    if (s.size() == 3)
      push(b_.create<DotGeneralOp>(loc_, x, y, ArrayRef<int64_t>{0}, ArrayRef<int64_t>{0},
                                   ArrayRef<int64_t>{2}, ArrayRef<int64_t>{1}));
    else
      push(b_.create<DotGeneralOp>(loc_, x, y, ArrayRef<int64_t>{}, ArrayRef<int64_t>{},
                                   ArrayRef<int64_t>{1}, ArrayRef<int64_t>{0}));
    return;
  }
  case 12: { // softmax or log_softmax
    Value x = anyWithRank(1);
    int64_t dim = pick(0, rankOf(x) - 1);
    if (chance(0.5))
      push(b_.create<SoftmaxOp>(loc_, x, dim));
    else
      push(b_.create<LogSoftmaxOp>(loc_, x, dim));
    return;
  }
  case 13: { // layer_norm or gelu
    Value x = anyWithRank(1);
    if (chance(0.4)) {
      auto form = chance(0.5) ? GeluApproximation::tanh : GeluApproximation::erf;
      push(b_.create<GeluOp>(loc_, form, x));
      return;
    }
    int64_t axis = pick(0, rankOf(x) - 1);
    if (constantAlong(x, axis))
      x = argument(cast<RankedTensorType>(x.getType()));
    auto paramType = tensor(shapeOf(x).drop_front(axis));
    Value scale = argument(paramType), bias = argument(paramType);
    push(b_.create<LayerNormOp>(loc_, x.getType(), x, scale, bias,
                                static_cast<uint64_t>(axis), APFloat(1e-5)));
    return;
  }
  case 14: { // softmax_cross_entropy on [N, C] logits, then a mean
    Value x = anyWithRank(2);
    if (rankOf(x) != 2) {
      int64_t rest = 1;
      for (int64_t d : shapeOf(x).drop_front())
        rest *= d;
      x = push(b_.create<ReshapeOp>(loc_, tensor({shapeOf(x)[0], rest}), x));
    }
    if (shapeOf(x)[1] < 2) {
      unary(x);
      return;
    }
    Value labels = block_->addArgument(
        tensor({shapeOf(x)[0]}, b_.getIntegerType(32)), loc_);
    Value loss = push(b_.create<SoftmaxCrossEntropyOp>(loc_, x, labels));
    push(b_.create<ReduceOp>(loc_, ReduceKind::mean, loss, ArrayRef<int64_t>{0}));
    return;
  }
  default: { // an all_reduce between two parts of the graph
    Value x = any();
    push(b_.create<AllReduceOp>(loc_, x.getType(), ReduceKind::sum, x,
                                DenseIntElementsAttr()));
    return;
  }
  }
}

OwningOpRef<ModuleOp> Generator::build() {
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc_);
  b_.setInsertionPointToEnd(module->getBody());
  auto func = b_.create<func::FuncOp>(loc_, "main", b_.getFunctionType({}, {}));
  block_ = func.addEntryBlock();
  b_.setInsertionPointToEnd(block_);
  argument(tensor(randomShape(1, 3)));
  argument(tensor(randomShape(2, 3)));
  for (int i = 0, n = pick(options_.minOps, options_.maxOps); i < n; ++i)
    step();
  // Return every value nobody uses, and a few that are used.
  SmallVector<Value> results;
  for (Value v : pool_)
    if (v.use_empty() || (!isa<BlockArgument>(v) && chance(0.1)))
      results.push_back(v);
  b_.create<func::ReturnOp>(loc_, results);
  func.setType(b_.getFunctionType(block_->getArgumentTypes(), ValueRange(results).getTypes()));
  return module;
}

} // namespace

OwningOpRef<ModuleOp> buildRandomGraph(MLIRContext *context, uint64_t seed,
                                       const RandomGraphOptions &options) {
  return Generator(context, seed, options).build();
}

void makeRandomModel(ModuleOp module, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto func = module.lookupSymbol<func::FuncOp>("main");
  MLIRContext *context = module.getContext();
  Block &body = func.front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  OpBuilder b(ret);
  Location loc = ret.getLoc();
  auto f32 = RankedTensorType::get({}, b.getF32Type());
  Value loss;
  auto addTerm = [&](Value v) {
    auto type = cast<RankedTensorType>(v.getType());
    SmallVector<int64_t> dims;
    for (int64_t d = 0; d < type.getRank(); ++d)
      dims.push_back(d);
    Value term = dims.empty() ? v : b.create<ReduceOp>(loc, ReduceKind::mean, v, dims);
    if (cast<RankedTensorType>(term.getType()).getElementType() != b.getF32Type())
      term = b.create<ConvertOp>(loc, f32, term);
    loss = loss ? b.create<AddOp>(loc, loss, term).getResult() : term;
  };
  for (Value v : ret.getOperands())
    if (isa<FloatType>(cast<RankedTensorType>(v.getType()).getElementType()))
      addTerm(v);
  if (!loss)
    for (BlockArgument a : body.getArguments())
      if (!loss && isa<FloatType>(cast<RankedTensorType>(a.getType()).getElementType()))
        addTerm(a);
  b.create<func::ReturnOp>(loc, loss);
  ret.erase();
  func.setType(b.getFunctionType(body.getArgumentTypes(), {loss.getType()}));
  func.setResultAttr(0, KilnDialect::kRoleAttrName, RoleAttr::get(context, Role::loss));
  int64_t initSeed = 1;
  for (BlockArgument a : body.getArguments()) {
    auto type = cast<RankedTensorType>(a.getType());
    Role role = isa<FloatType>(type.getElementType()) ? Role::input : Role::label;
    if (role == Role::input && type.getRank() >= 1 &&
        std::uniform_int_distribution<int>(0, 1)(rng)) {
      role = Role::parameter;
      func.setArgAttr(a.getArgNumber(), KilnDialect::kInitAttrName,
                      InitializerAttr::get(context, InitKind::uniform, APFloat(0.0),
                                           APFloat(1.0), initSeed++));
    }
    func.setArgAttr(a.getArgNumber(), KilnDialect::kRoleAttrName,
                    RoleAttr::get(context, role));
  }
}

std::vector<HostTensor> randomArguments(func::FuncOp func, uint64_t seed,
                                        int64_t intBound) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> real(-2.0, 2.0);
  std::uniform_int_distribution<int64_t> integer(0, std::max<int64_t>(1, intBound) - 1);
  std::vector<HostTensor> args;
  for (Type type : func.getArgumentTypes()) {
    auto tensorType = cast<RankedTensorType>(type);
    // The argument's own element type (f64 where the interpreter has none).
    DType dtype = DType::f64;
    if (!dtypeOfTensor(tensorType, dtype))
      dtype = DType::f64;
    HostTensor t(dtype, tensorType.getShape());
    for (double &v : t.values()) {
      if (isFloat(dtype))
        v = real(rng);
      else
        v = tensorType.getRank() == 0 ? 3.0 : static_cast<double>(integer(rng));
    }
    t.roundAll();
    args.push_back(std::move(t));
  }
  return args;
}

} // namespace kiln::test
