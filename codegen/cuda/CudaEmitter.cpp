//===- CudaEmitter.cpp - CUDA C++ kernels for loop fusions ------------------===//
//
// CudaHooks and the nest layouts: the kernel built as MLIR with the
// kernel model (see CudaEmitter.h); CudaPrinter.cpp writes it as CUDA C++.
//
//===----------------------------------------------------------------------===//

#include "codegen/cuda/CudaEmitter.h"
#include "codegen/cuda/CudaPrinter.h"

#include "codegen/KernelModel.h"
#include "ir/ScalarSemantics.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/Support/raw_ostream.h"


using namespace mlir;

namespace kiln {

namespace {

MemRefType memrefOf(RankedTensorType type) {
  return MemRefType::get(type.getShape(), type.getElementType());
}

int64_t product(ArrayRef<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

// Bytes of one stored element (i1 as one byte).
int64_t storedBytes(Type type) {
  if (type.isInteger(1))
    return 1;
  return (type.getIntOrFloatBitWidth() + 7) / 8;
}

// Calls of `kiln.*` intrinsics (the printer maps them to CUDA builtins and
// prelude functions).
class Intrinsics {
public:
  explicit Intrinsics(ModuleOp module) : module_(module) {}

  SmallVector<Value> call(OpBuilder &b, Location loc, StringRef name,
                          ValueRange args, TypeRange results) {
    std::string symbol = name.str();
    // One declaration per name and signature.
    std::string key;
    llvm::raw_string_ostream os(key);
    os << symbol;
    for (Type t : args.getTypes())
      os << "," << t;
    os << "->";
    for (Type t : results)
      os << "," << t;
    std::string &declared = declared_[os.str()];
    if (declared.empty()) {
      declared = symbol + "." + std::to_string(declared_.size());
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(module_.getBody());
      auto decl = b.create<func::FuncOp>(
          loc, declared, b.getFunctionType(args.getTypes(), results));
      decl.setPrivate();
    }
    auto op = b.create<func::CallOp>(loc, declared, results, args);
    return SmallVector<Value>(op.getResults());
  }

  Value index(OpBuilder &b, Location loc, StringRef name) {
    return call(b, loc, name, {}, {b.getIndexType()})[0];
  }

private:
  ModuleOp module_;
  std::map<std::string, std::string> declared_;
};


class CudaHooks : public KernelHooks {
public:
  CudaHooks(ModuleOp module, const KernelModel &model, ValueRange inputs,
            Intrinsics &intrinsics)
      : module_(module), model_(model),
        inputs_(inputs.begin(), inputs.end()), intrinsics_(intrinsics) {}

  Value loadInput(OpBuilder &b, Location loc, unsigned input,
                  ValueRange indices) override {
    if (vectorWidth_ > 1 &&
        model_.inputs[input].getShape() == ArrayRef<int64_t>(vectorShape_)) {
      for (unsigned k = 0; k < vectorIndices_.size(); ++k) {
        if (!llvm::equal(vectorIndices_[k], indices))
          continue;
        SmallVector<Value> &lanes = vectorLoads_[input];
        if (lanes.empty()) {
          OpBuilder::InsertionGuard guard(b);
          b.setInsertionPointToStart(vectorBody_);
          Type element = model_.inputs[input].getElementType();
          SmallVector<Type> types(vectorWidth_, element);
          lanes = intrinsics_.call(b, loc, "kiln.vload",
                                   {inputs_[input], vectorBase_}, types);
        }
        return lanes[k];
      }
    }
    return b.create<memref::LoadOp>(loc, inputs_[input], indices);
  }

  Value loadConstant(OpBuilder &b, Location loc, ConstantOp constant,
                     ValueRange indices) override {
    auto type = cast<RankedTensorType>(constant.getType());
    auto memrefType = memrefOf(type);
    std::string &name = globals_[constant.getOperation()];
    if (name.empty()) {
      name = "constant_" + std::to_string(globals_.size() - 1);
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(module_.getBody());
      b.create<memref::GlobalOp>(loc, name, b.getStringAttr("private"),
                                 memrefType, constant.getValue(),
                                 /*constant=*/true, IntegerAttr());
    }
    Value global = b.create<memref::GetGlobalOp>(loc, memrefType, name);
    return b.create<memref::LoadOp>(loc, global, indices);
  }

  std::optional<ReductionLanes> reductionLanes(OpBuilder &b) override {
    if (!coopBlock_ || b.getInsertionBlock() != coopBlock_)
      return std::nullopt;
    return ReductionLanes{lane_, laneCount_};
  }

  Value combineLanes(OpBuilder &b, Location loc, ReduceKind kind,
                     Value value) override {
    std::string name = std::string("kiln.allreduce.") +
                       (blockScope_ ? "block." : "warp.") +
                       (kind == ReduceKind::max   ? "max"
                        : kind == ReduceKind::min ? "min"
                                                  : "sum");
    return intrinsics_.call(b, loc, name, {value}, {value.getType()})[0];
  }

  // Cooperative reductions built directly in |block| use these lanes.
  void setCooperative(Block *block, Value lane, Value count, bool blockScope) {
    coopBlock_ = block;
    lane_ = lane;
    laneCount_ = count;
    blockScope_ = blockScope;
  }
  // Vector loads for the elementwise layout: inputs of |shape| read at
  // |indices|[k] come from one kiln.vload at |base|, built at the start of
  // |body|.
  void setVector(unsigned width, ArrayRef<int64_t> shape, Block *body,
                 Value base, std::vector<SmallVector<Value, 4>> indices) {
    vectorWidth_ = width;
    vectorShape_.assign(shape.begin(), shape.end());
    vectorBody_ = body;
    vectorBase_ = base;
    vectorIndices_ = std::move(indices);
    vectorLoads_.clear();
  }
  void reset() {
    coopBlock_ = nullptr;
    vectorWidth_ = 0;
    vectorLoads_.clear();
    vectorIndices_.clear();
  }

private:
  ModuleOp module_;
  const KernelModel &model_;
  SmallVector<Value> inputs_;
  Intrinsics &intrinsics_;
  llvm::DenseMap<Operation *, std::string> globals_;
  Block *coopBlock_ = nullptr;
  Value lane_, laneCount_;
  bool blockScope_ = false;
  unsigned vectorWidth_ = 0;
  SmallVector<int64_t, 4> vectorShape_;
  Block *vectorBody_ = nullptr;
  Value vectorBase_;
  std::vector<SmallVector<Value, 4>> vectorIndices_;
  std::map<unsigned, SmallVector<Value>> vectorLoads_;
};

// What a nest's results reach in the fusion body.
struct NestUses {
  // Largest element count of a reduction over its operand's last
  // dimension whose result is the nest's shape (element layout) or the
  // nest's shape without its last dimension (row layout); 0 if none.
  int64_t elementReduce = 0, rowReduce = 0;
  bool loops = false; // any reduce, scatter_add or pooling op
  // The most elements any reduce it reaches sums (what one thread walks
  // where the layout does not share the reduce among lanes).
  int64_t reduced = 0;
  // The scatter_adds it reaches (the scatter-rows layout takes one).
  SmallVector<ScatterAddOp, 1> scatters;
};

NestUses usesOf(const LoopNest &nest, YieldOp yield) {
  NestUses uses;
  llvm::SmallPtrSet<Operation *, 16> seen;
  SmallVector<Value> work;
  for (unsigned result : nest.results)
    work.push_back(yield.getOperand(result));
  ArrayRef<int64_t> shape = nest.shape;
  while (!work.empty()) {
    Operation *op = work.pop_back_val().getDefiningOp();
    if (!op || !seen.insert(op).second)
      continue;
    if (isa<ReduceOp, ScatterAddOp, MaxPool2DOp, MaxPool2DGradOp>(op))
      uses.loops = true;
    if (auto scatter = dyn_cast<ScatterAddOp>(op))
      uses.scatters.push_back(scatter);
    if (auto reduce = dyn_cast<ReduceOp>(op)) {
      auto operand = cast<RankedTensorType>(reduce.getOperand().getType());
      int64_t rank = operand.getRank();
      ArrayRef<int64_t> result =
          cast<RankedTensorType>(reduce.getType()).getShape();
      int64_t count = 1;
      for (int64_t d : reduce.getDimensions())
        count *= operand.getDimSize(d);
      uses.reduced = std::max(uses.reduced, count);
      if (rank > 0 && llvm::is_contained(reduce.getDimensions(), rank - 1) &&
          operand.getDimSize(rank - 1) > 1) {
        if (result == shape)
          uses.elementReduce = std::max(uses.elementReduce, count);
        else if (!shape.empty() && result == shape.drop_back())
          uses.rowReduce = std::max(uses.rowReduce, count);
      } else if (rank > 0 && result == shape &&
                 cudaColumnReductionLanes(product(shape), count) > 1) {
        // Few results with a column each: a warp per result, the lanes
        // splitting the rows (the element layout).
        uses.elementReduce = std::max(uses.elementReduce, count);
      }
    }
    for (Value operand : op->getOperands())
      work.push_back(operand);
  }
  return uses;
}


uint64_t ceilDiv(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

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
// dynamic shared memory at |kernel|.dynamicSharedBytes (while the slots fit
// |rowCacheBytes|): before the first pass the block stages the input's row
// into the slot (`kiln.stage_row`: 16-byte vector copies between two
// barriers), and every pass loads from the slot. A slot is a
// `kiln.shared_row` call (the printer's typed pointer into the kernel's
// dynamic shared memory).
void cacheRows(Block *unitBody, ArrayRef<int64_t> unitShape,
               ArrayRef<Value> outer, Value lane, Value laneCount,
               const KernelModel &model, ValueRange inputs, Block *entry,
               Intrinsics &intrinsics, int64_t rowCacheBytes,
               CudaKernelSource &kernel) {
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
      if (!arg || arg.getOwner() != entry || arg.getArgNumber() >= inputs.size())
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
    if (end > rowCacheBytes)
      continue;
    kernel.dynamicSharedBytes = static_cast<uint32_t>(end);
    if (!llvm::is_contained(kernel.cachedInputs, input))
      kernel.cachedInputs.push_back(input);
    Location loc = passes.front().getLoc();
    OpBuilder b = OpBuilder::atBlockBegin(entry);
    Value slot = intrinsics.call(
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
    intrinsics.call(b, loc, "kiln.stage_row",
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

// The scatter_add a nest builds in the scatter-rows layout (CudaEmitter.h),
// and the fusion input holding its indices; null when the nest takes
// another layout: it must reach exactly one scatter_add, of rank >= 2 and
// of the nest's shape, and no reduction the element or row layout would
// take; the indices must be a fusion input of integers (the block scans
// them in memory), fewer than 2^32 of them (list slots are 32-bit).
std::pair<ScatterAddOp, unsigned> scatterRowsOf(const LoopNest &nest,
                                                const NestUses &uses,
                                                FusionOp fusion) {
  if (uses.scatters.size() != 1 || uses.elementReduce || uses.rowReduce)
    return {};
  ScatterAddOp scatter = uses.scatters.front();
  auto type = cast<RankedTensorType>(scatter.getType());
  auto indices = dyn_cast<BlockArgument>(scatter.getIndices());
  if (!ElementEmitter::isTiledScatter(scatter) ||
      type.getShape() != ArrayRef<int64_t>(nest.shape) || !indices ||
      indices.getOwner() != &fusion.getBody().front() ||
      cast<RankedTensorType>(indices.getType()).getNumElements() >= (int64_t(1) << 32))
    return {};
  return {scatter, indices.getArgNumber()};
}

int64_t cudaRowCacheBytes(unsigned arch) {
  int64_t optIn = 48 * 1024;
  if (arch >= 90 && arch < 100)
    optIn = 227 * 1024; // sm_90
  else if (arch == 100 || arch == 101 || arch == 103)
    optIn = 227 * 1024; // sm_100 class
  else if (arch == 80 || arch == 87)
    optIn = 163 * 1024;
  else if (arch == 86 || arch == 89 || arch >= 110)
    optIn = 99 * 1024;
  else if (arch == 75)
    optIn = 64 * 1024;
  else if (arch >= 70 && arch < 75)
    optIn = 96 * 1024;
  return optIn - kCudaStaticSharedReserve;
}

int64_t cudaRowCacheBytes(ArrayRef<unsigned> archs) {
  int64_t bytes = cudaRowCacheBytes(90u);
  for (unsigned arch : archs)
    bytes = std::min(bytes, cudaRowCacheBytes(arch));
  return bytes;
}

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

namespace {

// The row-group layout's plan (CudaEmitter.h): a kernel of two nests, the
// rows [R..., C] of row reductions over C and the partials [G, C], whose
// results reach only reduce sums of reshape(v, [G, S, C]) over S (v of the
// row shape) and elementwise ops of [G, C].
struct RowGroupPlan {
  unsigned rowNest = 0, partialNest = 0;
  int64_t groups = 0, rowsPerGroup = 0, columns = 0;
  int64_t rowReduces = 0; // the row reductions the row nest builds per row
  SmallVector<ReduceOp, 2> partials;
};

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
        auto reshape = reduce.getOperand().getDefiningOp<ReshapeOp>();
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
        // A reshape of a value of the row shape is built at the rows'
        // indices; any other operand (a fusion input, the reshape of an
        // argument kiln-fuse left outside) at the group's.
        if (reshape && cast<RankedTensorType>(reshape.getOperand().getType())
                               .getShape() == ArrayRef<int64_t>(rows.shape))
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
        ++plan.rowReduces;
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

} // namespace

FailureOr<OwningOpRef<ModuleOp>>
buildCudaKernelModule(FusionOp fusion, CudaKernelSource &kernel,
                      int64_t rowCacheBytes) {
  CudaLaunchRule &launch = kernel.launch;
  SmallVectorImpl<std::string> &layouts = kernel.layouts;
  layouts.clear();
  kernel.dynamicSharedBytes = 0;
  kernel.cachedInputs.clear();
  kernel.serialSteps = kernel.serialThreads = 0;
  // The kernel's longest chain of dependent loads per thread (the longest
  // of its nests'; on a tie, the one fewer threads make).
  auto recordChain = [&](uint64_t steps, uint64_t threads) {
    if (steps > kernel.serialSteps ||
        (steps == kernel.serialSteps && steps && threads < kernel.serialThreads)) {
      kernel.serialSteps = steps;
      kernel.serialThreads = threads;
    }
  };
  FailureOr<KernelModel> model = buildKernelModel(fusion);
  if (failed(model))
    return failure();
  MLIRContext *context = fusion.getContext();
  context->loadDialect<arith::ArithDialect, math::MathDialect,
                       memref::MemRefDialect, scf::SCFDialect,
                       func::FuncDialect>();
  Location loc = fusion.getLoc();
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  OpBuilder b(context);
  b.setInsertionPointToEnd(module->getBody());

  SmallVector<Type> argTypes;
  for (RankedTensorType type : model->inputs)
    argTypes.push_back(memrefOf(type));
  for (RankedTensorType type : model->outputs)
    argTypes.push_back(memrefOf(type));
  auto func = b.create<func::FuncOp>(loc, kCudaKernelFunc,
                                     b.getFunctionType(argTypes, {}));
  Block *entry = func.addEntryBlock();
  b.setInsertionPointToStart(entry);
  ValueRange args = entry->getArguments();
  unsigned numInputs = model->inputs.size();
  Intrinsics intrinsics(*module);
  CudaHooks hooks(*module, *model, args.take_front(numInputs), intrinsics);
  auto yield = cast<YieldOp>(fusion.getBody().front().getTerminator());

  launch = CudaLaunchRule();
  launch.maxBlocks = 1;
  const unsigned warpsPerBlock = kCudaBlockThreads / 32;
  // A block-scope element nest whose units are the rows of a block-scope
  // row nest (a loss per row beside the row's gradient) is built in that
  // row nest's unit body, before its lane loop: the reductions both need
  // are built once and every pass over the row (both nests') shares one
  // row cache, so the row is read from global memory once.
  SmallVector<NestUses> nestUses;
  for (const LoopNest &nest : model->nests)
    nestUses.push_back(usesOf(nest, yield));
  SmallVector<int> partner(model->nests.size(), -1); // row nest -> element nest
  SmallVector<bool> merged(model->nests.size(), false);
  for (auto [r, row] : llvm::enumerate(model->nests)) {
    const NestUses &ru = nestUses[r];
    if (ru.elementReduce || ru.rowReduce < kBlockRowElements)
      continue;
    for (auto [e, element] : llvm::enumerate(model->nests)) {
      const NestUses &eu = nestUses[e];
      if (merged[e] || eu.elementReduce != ru.rowReduce || eu.rowReduce ||
          ArrayRef<int64_t>(element.shape) != ArrayRef<int64_t>(row.shape).drop_back())
        continue;
      partner[r] = e;
      merged[e] = true;
      break;
    }
  }
  std::optional<RowGroupPlan> rowGroups =
      rowGroupPlanOf(*model, nestUses, yield);
  for (auto [nestIndex, nest] : llvm::enumerate(model->nests)) {
    if (merged[nestIndex])
      continue; // built with its row nest
    if (rowGroups && nestIndex == rowGroups->partialNest)
      continue; // built with the rows
    hooks.reset();
    NestUses uses = nestUses[nestIndex];
    ArrayRef<int64_t> shape = nest.shape;
    int64_t total = product(shape);
    auto store = [&](OpBuilder &nb, Location nloc, unsigned result, Value v,
                     ValueRange ivs) {
      nb.create<memref::StoreOp>(nloc, v, args[numInputs + result], ivs);
    };

    if (rowGroups && nestIndex == rowGroups->rowNest) {
      // Row groups: a block per group g of S rows; per pass over the
      // columns each thread keeps |perThread| columns (clamped to the last,
      // stored only in range) and an accumulator per (partial, column); for
      // each row of the group in order, the row reductions (block-scope,
      // cooperative), then the row's results at the thread's columns and
      // the partials' operand elements there, one emitter for both so each
      // input element is loaded once; after the rows, the partial nest's
      // results from the accumulators.
      const RowGroupPlan &plan = *rowGroups;
      const LoopNest &parts = model->nests[plan.partialNest];
      ArrayRef<int64_t> rowShape = ArrayRef<int64_t>(shape).drop_back();
      int64_t columns = plan.columns;
      // Blocks as wide as the row (up to 1024 threads, the most a block
      // has): one column per thread, a block's share of each row reduction
      // one element per thread, and G blocks fill the device (GPT-2: 256
      // blocks of 768 threads).
      unsigned blockThreads = rowGroupBlockThreads(columns);
      launch.blockThreads = blockThreads;
      launch.blocksPerSm = std::max(1u, 2048u / blockThreads);
      int64_t perThread = std::clamp<int64_t>(
          ceilDiv(columns, blockThreads), 1, kBlockMaxColumnsPerThread);
      auto constant = [&](OpBuilder &cb, int64_t v) -> Value {
        return cb.create<arith::ConstantIndexOp>(loc, v);
      };
      BlockUnits groups = buildBlockUnits(b, loc, intrinsics, plan.groups);
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
          init.push_back(pb.create<arith::ConstantOp>(
              loc, pb.getFloatAttr(acc, 0.0)));
      }
      // Rows per iteration: two when the group's rows pair up, so both
      // rows' reductions share one allreduce (one pair of barriers for two
      // rows) and the chain per row is shorter.
      int64_t unroll = plan.rowsPerGroup % kRowGroupRowsPerStep == 0
                           ? kRowGroupRowsPerStep
                           : 1;
      auto rowLoop = pb.create<scf::ForOp>(
          loc, constant(pb, 0), constant(pb, plan.rowsPerGroup),
          constant(pb, unroll), init);
      int64_t allreduces = 0; // block allreduce calls per iteration
      {
        Block *rowBody = rowLoop.getBody();
        OpBuilder rb = OpBuilder::atBlockEnd(rowBody);
        hooks.setCooperative(rowBody, tid, threads, /*blockScope=*/true);
        // The accumulators, each row's element added in row order (the
        // interpreter's sum order).
        SmallVector<Value> acc(rowBody->getArguments().drop_front());
        for (int64_t u = 0; u < unroll; ++u) {
          Value inGroup = rb.create<arith::AddIOp>(
              loc, rowLoop.getInductionVar(), constant(rb, u));
          Value row = rb.create<arith::AddIOp>(
              loc,
              rb.create<arith::MulIOp>(loc, group,
                                       constant(rb, plan.rowsPerGroup)),
              inGroup);
          SmallVector<Value, 4> outer =
              delinearizeIndex(rb, loc, row, rowShape);
          ElementEmitter emitter(*model, hooks, rb);
          SmallVector<SmallVector<Value, 4>> ivsOf;
          for (int64_t l = 0; l < perThread; ++l) {
            SmallVector<Value, 4> ivs(outer);
            ivs.push_back(cols[l]);
            ivsOf.push_back(ivs);
          }
          for (auto [p, constPartial] : llvm::enumerate(plan.partials)) {
            ReduceOp partial = constPartial;
            auto reshape = partial.getOperand().getDefiningOp<ReshapeOp>();
            bool rowShaped =
                reshape &&
                cast<RankedTensorType>(reshape.getOperand().getType())
                        .getShape() == ArrayRef<int64_t>(shape);
            Type accType = ElementEmitter::reductionAccumulatorType(partial);
            for (int64_t l = 0; l < perThread; ++l) {
              SmallVector<Value, 3> grouped = {group, inGroup, cols[l]};
              Value element = convertScalar(
                  rb, loc,
                  rowShaped ? emitter.emit(reshape.getOperand(), ivsOf[l])
                            : emitter.emit(partial.getOperand(), grouped),
                  accType);
              Value &sum = acc[p * perThread + l];
              sum = rb.create<arith::AddFOp>(loc, sum, element);
            }
          }
          for (int64_t l = 0; l < perThread; ++l) {
            SmallVector<Value> values;
            for (unsigned result : nest.results)
              values.push_back(
                  emitter.emit(yield.getOperand(result), ivsOf[l]));
            auto ifOp =
                rb.create<scf::IfOp>(loc, inRange[l], /*withElseRegion=*/false);
            OpBuilder ib = ifOp.getThenBodyBuilder();
            for (auto [result, v] : llvm::zip(nest.results, values))
              store(ib, loc, result, v, ivsOf[l]);
          }
        }
        rb.create<scf::YieldOp>(loc, acc);
        allreduces = mergeBlockAllreduces(rowBody, intrinsics);
      }
      hooks.reset();
      {
        ElementEmitter emitter(*model, hooks, pb);
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
            values.push_back(emitter.emit(yield.getOperand(result), ivs));
          auto ifOp =
              pb.create<scf::IfOp>(loc, inRange[l], /*withElseRegion=*/false);
          OpBuilder ib = ifOp.getThenBodyBuilder();
          for (auto [result, v] : llvm::zip(parts.results, values))
            store(ib, loc, result, v, ivs);
        }
      }
      layouts.push_back("rowgroup.block");
      launch.maxBlocks = std::max<uint64_t>(launch.maxBlocks, plan.groups);
      // A block makes its group's rows in order, |unroll| per iteration;
      // an iteration's chain is each of its rows' reductions' share per
      // thread (one reduction's loop after another) plus two barriers per
      // block allreduce (independent reductions share one).
      uint64_t perIteration = uint64_t(unroll) * uint64_t(plan.rowReduces) *
                                  ceilDiv(columns, blockThreads) +
                              2 * uint64_t(allreduces);
      uint64_t steps = ceilDiv(columns, uint64_t(blockThreads) * perThread) *
                       uint64_t(plan.rowsPerGroup / unroll) * perIteration;
      recordChain(steps, uint64_t(plan.groups) * blockThreads);
      continue;
    }

    if (auto [scatter, indicesInput] = scatterRowsOf(nest, uses, fusion);
        scatter) {
      // Scatter rows: a block per row of the result (all but its last
      // dimension); per pass over the row's columns, each thread keeps
      // |perThread| columns (clamped to the last; stores only in range) and
      // the block lists, chunk by chunk, the index positions naming the row
      // (kiln.scatter_collect), whose updates every thread adds.
      ArrayRef<int64_t> unitShape = shape.drop_back();
      int64_t units = product(unitShape), columns = shape.back();
      int64_t perThread = std::clamp<int64_t>(
          ceilDiv(columns, kCudaBlockThreads), 1, kBlockMaxColumnsPerThread);
      auto constant = [&](OpBuilder &cb, int64_t v) -> Value {
        return cb.create<arith::ConstantIndexOp>(loc, v);
      };
      BlockUnits rows = buildBlockUnits(b, loc, intrinsics, units);
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
      Value indicesBuffer = args[indicesInput];
      ElementEmitter emitter(*model, hooks, nb);
      SmallVector<Value, 4> sums = emitter.emitScatterRows(
          scatter, outer, cols, intrinsics.index(nb, loc, "kiln.scatter_chunk"),
          [&](OpBuilder &cb, Location cl, Value chunk) {
            return intrinsics.call(
                cb, cl, "kiln.scatter_collect",
                {indicesBuffer, chunk, constant(cb, positions), target},
                {cb.getIndexType()})[0];
          },
          [&](OpBuilder &cb, Location cl, Value k) {
            return intrinsics.call(cb, cl, "kiln.scatter_match", {k},
                                   {cb.getIndexType()})[0];
          });
      for (int64_t l = 0; l < perThread; ++l) {
        SmallVector<Value, 4> ivs(outer);
        ivs.push_back(cols[l]);
        emitter.seedScatterValue(scatter, ivs, sums[l]);
        SmallVector<Value> values;
        for (unsigned result : nest.results)
          values.push_back(emitter.emit(yield.getOperand(result), ivs));
        auto ifOp = nb.create<scf::IfOp>(loc, inRange[l], /*withElseRegion=*/false);
        OpBuilder ib = ifOp.getThenBodyBuilder();
        for (auto [result, v] : llvm::zip(nest.results, values))
          store(ib, loc, result, v, ivs);
      }
      layouts.push_back("scatter.block");
      launch.maxBlocks = std::max<uint64_t>(launch.maxBlocks, units);
      // A row's chain: per chunk of positions, the index loads, then the
      // matches' update loads (on average positions / rows per row).
      uint64_t chunk = uint64_t(kCudaBlockThreads) * 8;
      recordChain(2 * ceilDiv(positions, chunk) +
                      ceilDiv(positions, std::max<int64_t>(shape.front(), 1)),
                  uint64_t(units) * kCudaBlockThreads);
      continue;
    }

    if (uses.elementReduce || uses.rowReduce) {
      // A warp or a block per unit (an output element, or a row).
      bool perElement = uses.elementReduce != 0;
      int64_t count = std::max(uses.elementReduce, uses.rowReduce);
      bool blockScope = count >= kBlockRowElements;
      ArrayRef<int64_t> unitShape = perElement ? shape : shape.drop_back();
      int64_t units = product(unitShape);
      // Independent groups of results (a horizontal fusion's reductions):
      // unit u builds group u / units at element u % units.
      SmallVector<SmallVector<unsigned, 2>> groups =
          perElement ? cudaResultGroups(fusion, nest.results)
                     : SmallVector<SmallVector<unsigned, 2>>{
                           SmallVector<unsigned, 2>(nest.results)};
      int64_t numGroups = groups.size();
      Value unit = intrinsics.index(b, loc, blockScope ? "kiln.block" : "kiln.warp");
      Value unitCount =
          intrinsics.index(b, loc, blockScope ? "kiln.blocks" : "kiln.warps");
      Value lane = intrinsics.index(b, loc, blockScope ? "kiln.tid" : "kiln.lane");
      Value laneCount = blockScope ? intrinsics.index(b, loc, "kiln.block_threads")
                                   : b.create<arith::ConstantIndexOp>(loc, 32).getResult();
      auto loop = b.create<scf::ForOp>(
          loc, unit, b.create<arith::ConstantIndexOp>(loc, units * numGroups),
          unitCount);
      Block *unitBody = loop.getBody();
      if (unitShape.empty()) {
        // No index depends on the unit loop, so the emitter would hoist
        // rank-0 values and reductions out of it (and out of the lanes'
        // cooperation): it hoists only through scf.for and scf.if, so an
        // scf.execute_region (a plain block in the source) stops it.
        OpBuilder ub = OpBuilder::atBlockTerminator(unitBody);
        auto region = ub.create<scf::ExecuteRegionOp>(loc, TypeRange{});
        unitBody = &region.getRegion().emplaceBlock();
        OpBuilder::atBlockEnd(unitBody).create<scf::YieldOp>(loc);
      }
      OpBuilder nb = OpBuilder::atBlockTerminator(unitBody);
      hooks.setCooperative(unitBody, lane, laneCount, blockScope);
      SmallVector<Value, 4> outer;
      if (numGroups == 1)
        outer = delinearizeIndex(nb, loc, loop.getInductionVar(), unitShape);
      ElementEmitter emitter(*model, hooks, nb);
      // |results| built by every lane with |eb| at |at|; lane 0 stores.
      auto storeFromLaneZero = [&](OpBuilder &sb, ElementEmitter &eb,
                                   ArrayRef<Value> at,
                                   ArrayRef<unsigned> results) {
        SmallVector<Value> values;
        for (unsigned result : results)
          values.push_back(eb.emit(yield.getOperand(result), at));
        Value first = sb.create<arith::CmpIOp>(
            loc, arith::CmpIPredicate::eq, lane,
            sb.create<arith::ConstantIndexOp>(loc, 0));
        auto ifOp = sb.create<scf::IfOp>(loc, first, /*withElseRegion=*/false);
        OpBuilder ib = ifOp.getThenBodyBuilder();
        for (auto [result, v] : llvm::zip(results, values))
          store(ib, loc, result, v, at);
      };
      if (perElement && numGroups > 1) {
        // One scf.if per group; the warp's (block's) lanes share the unit,
        // so they take the same branch and their shuffles stay converged.
        // Each group has its own emitter: values built in one branch do not
        // dominate the next (the reductions are not hoisted out of an
        // scf.if; rank-0 values go before the unit loop as usual).
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
          hooks.setCooperative(branch.thenBlock(), lane, laneCount, blockScope);
          SmallVector<Value, 4> at = delinearizeIndex(gb, loc, element, unitShape);
          ElementEmitter groupEmitter(*model, hooks, gb);
          storeFromLaneZero(gb, groupEmitter, at, results);
        }
      } else if (perElement) {
        storeFromLaneZero(nb, emitter, outer, nest.results);
      } else {
        // The element nest's results at the row's indices.
        if (partner[nestIndex] >= 0)
          storeFromLaneZero(nb, emitter, outer,
                            model->nests[partner[nestIndex]].results);
        auto lanes = nb.create<scf::ForOp>(
            loc, lane, nb.create<arith::ConstantIndexOp>(loc, shape.back()),
            laneCount);
        SmallVector<Value, 4> ivs(outer);
        ivs.push_back(lanes.getInductionVar());
        // The emitter builds at the lane loop; reductions that do not
        // depend on its variable are hoisted before it (into the row),
        // where those the element nest built are found in its cache.
        OpBuilder::InsertionGuard guard(nb);
        nb.setInsertionPoint(lanes.getBody()->getTerminator());
        for (unsigned result : nest.results)
          store(nb, loc, result, emitter.emit(yield.getOperand(result), ivs),
                ivs);
      }
      if (blockScope)
        cacheRows(unitBody, unitShape, outer, lane, laneCount, *model,
                  args.take_front(numInputs), entry, intrinsics,
                  rowCacheBytes, kernel);
      layouts.push_back(std::string(perElement ? "element." : "row.") +
                        (blockScope ? "block" : "warp") +
                        (numGroups > 1
                             ? ".groups=" + std::to_string(numGroups)
                             : ""));
      if (partner[nestIndex] >= 0)
        layouts.push_back("element.block.in-row");
      launch.maxBlocks = std::max<uint64_t>(
          launch.maxBlocks, blockScope ? units * numGroups
                                       : ceilDiv(units * numGroups, warpsPerBlock));
      // Each unit's lanes share its reductions: a lane walks its share.
      uint64_t lanes = blockScope ? kCudaBlockThreads : 32;
      recordChain(ceilDiv(count, lanes), uint64_t(units * numGroups) * lanes);
      continue;
    }

    // Elementwise: V consecutive elements per thread and step.
    int64_t widest = 1;
    for (unsigned result : nest.results)
      widest = std::max(widest,
                        storedBytes(model->outputs[result].getElementType()));
    int64_t width = 16 / widest;
    if (uses.loops || total % width != 0 || shape.empty())
      width = 1;
    Value thread = intrinsics.index(b, loc, "kiln.thread");
    Value threads = intrinsics.index(b, loc, "kiln.threads");
    Value w = b.create<arith::ConstantIndexOp>(loc, width);
    Value start = width > 1 ? b.create<arith::MulIOp>(loc, thread, w).getResult()
                            : thread;
    Value step = width > 1 ? b.create<arith::MulIOp>(loc, threads, w).getResult()
                           : threads;
    auto loop = b.create<scf::ForOp>(
        loc, start, b.create<arith::ConstantIndexOp>(loc, total), step);
    OpBuilder nb = OpBuilder::atBlockTerminator(loop.getBody());
    Value base = loop.getInductionVar();
    std::vector<SmallVector<Value, 4>> elementIvs;
    for (int64_t k = 0; k < width; ++k) {
      Value flat = k == 0 ? base
                          : nb.create<arith::AddIOp>(
                                  loc, base,
                                  nb.create<arith::ConstantIndexOp>(loc, k))
                                .getResult();
      elementIvs.push_back(delinearizeIndex(nb, loc, flat, shape));
    }
    if (width > 1)
      hooks.setVector(width, shape, loop.getBody(), base, elementIvs);
    ElementEmitter emitter(*model, hooks, nb);
    for (unsigned result : nest.results) {
      SmallVector<Value> values;
      for (int64_t k = 0; k < width; ++k)
        values.push_back(emitter.emit(yield.getOperand(result), elementIvs[k]));
      if (width == 1) {
        store(nb, loc, result, values[0], elementIvs[0]);
        continue;
      }
      SmallVector<Value> operands = {args[numInputs + result], base};
      operands.append(values.begin(), values.end());
      intrinsics.call(nb, loc, "kiln.vstore", operands, {});
    }
    layouts.push_back(width > 1 ? "elementwise.v" + std::to_string(width)
                                : "elementwise");
    // A thread builds its elements' reductions alone (a column reduction
    // walks its rows), and a scatter_add element scans every position.
    if (uses.reduced > 0)
      recordChain(uint64_t(uses.reduced), uint64_t(total));
    for (ScatterAddOp scatter : uses.scatters)
      recordChain(cast<RankedTensorType>(scatter.getIndices().getType())
                      .getNumElements(),
                  uint64_t(total));
    launch.maxBlocks = std::max<uint64_t>(
        launch.maxBlocks, ceilDiv(ceilDiv(total, width), kCudaBlockThreads));
  }
  b.create<func::ReturnOp>(loc);
  if (failed(func.verify()))
    return failure();
  return module;
}


FailureOr<CudaKernelSource> emitCudaKernel(FusionOp fusion, StringRef name,
                                           int64_t rowCacheBytes) {
  CudaKernelSource kernel;
  kernel.name = name.str();
  FailureOr<OwningOpRef<ModuleOp>> module =
      buildCudaKernelModule(fusion, kernel, rowCacheBytes);
  if (failed(module))
    return failure();
  std::string text;
  llvm::raw_string_ostream os(text);
  os << "// Kiln CUDA kernel " << name << " (fusion of kind "
     << stringifyFusionKind(fusion.getKind()) << "; nests:";
  for (const std::string &layout : kernel.layouts)
    os << " " << layout;
  os << "; block " << kernel.launch.blockThreads << ", up to "
     << kernel.launch.maxBlocks << " blocks, at most "
     << kernel.launch.blocksPerSm << " per SM";
  if (kernel.dynamicSharedBytes) {
    os << "; rows of";
    for (unsigned input : kernel.cachedInputs)
      os << " in" << input;
    os << " cached in " << kernel.dynamicSharedBytes
       << " bytes of dynamic shared memory";
  }
  os << ")\n";
  os << kCudaPrelude;
  if (failed(printCudaKernel(**module, name, fusion.getNumResults(),
                             kernel.dynamicSharedBytes,
                             kernel.launch.blockThreads, os)))
    return fusion.emitOpError() << "cannot print its CUDA kernel";
  kernel.source = std::move(os.str());
  return kernel;
}

} // namespace kiln
