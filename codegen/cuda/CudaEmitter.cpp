//===- CudaEmitter.cpp - CUDA C++ kernels for loop fusions ------------------===//
//
// CudaHooks and the nest layouts (building the kernel as MLIR with the
// kernel model), then the printer of that MLIR as CUDA C++ (see
// CudaEmitter.h).
//
//===----------------------------------------------------------------------===//

#include "codegen/cuda/CudaEmitter.h"

#include "codegen/KernelModel.h"
#include "ir/HostTensor.h"
#include "ir/ScalarSemantics.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <cinttypes>
#include <cstring>

using namespace mlir;

namespace kiln {

namespace {

constexpr llvm::StringLiteral kKernelName = "kernel";

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

// The intrinsic's name without the declaration's ".N" suffix.
StringRef intrinsicName(StringRef symbol) {
  return symbol.rsplit('.').first;
}

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

// |flat| as indices into |shape| (row-major); unit dimensions get 0.
SmallVector<Value, 4> delinearize(OpBuilder &b, Location loc, Value flat,
                                  ArrayRef<int64_t> shape) {
  SmallVector<Value, 4> ivs(shape.size());
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] == 1) {
      ivs[i] = b.create<arith::ConstantIndexOp>(loc, 0);
      continue;
    }
    if (i == 0) {
      ivs[i] = flat;
      break;
    }
    Value extent = b.create<arith::ConstantIndexOp>(loc, shape[i]);
    ivs[i] = b.create<arith::RemUIOp>(loc, flat, extent);
    flat = b.create<arith::DivUIOp>(loc, flat, extent);
  }
  return ivs;
}

uint64_t ceilDiv(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

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

constexpr int64_t kRowGroupMaxColumnsPerThread = 4;

// Merges, in |body| (its own ops, not nested ones), consecutive pairs of
// block allreduces of one kind and type where the second's operand does
// not depend on the first's result into one kiln.allreduce_pair call at
// the second's place (one pair of barriers for both; each value reduced
// exactly as kiln_block_allreduce reduces it); what used the first's
// result before the second moves after the pair. Returns the block
// allreduce calls left.
int64_t pairBlockAllreduces(Block *body, Intrinsics &intrinsics) {
  constexpr StringLiteral prefix = "kiln.allreduce.block.";
  SmallVector<func::CallOp> calls;
  for (Operation &op : *body)
    if (auto call = dyn_cast<func::CallOp>(op))
      if (intrinsicName(call.getCallee()).starts_with(prefix))
        calls.push_back(call);
  int64_t left = calls.size();
  for (size_t i = 0; i + 1 < calls.size(); ++i) {
    func::CallOp first = calls[i], second = calls[i + 1];
    StringRef kind = intrinsicName(first.getCallee()).drop_front(prefix.size());
    Type type = first.getResult(0).getType();
    if (kind != intrinsicName(second.getCallee()).drop_front(prefix.size()) ||
        type != second.getResult(0).getType())
      continue;
    // The ops between that depend on the first's result.
    DenseSet<Operation *> dependent{first.getOperation()};
    SmallVector<Operation *> moved;
    for (Operation *op = first->getNextNode(); op != second.getOperation();
         op = op->getNextNode()) {
      bool uses = false;
      op->walk([&](Operation *inner) {
        for (Value v : inner->getOperands()) {
          Operation *def = v.getDefiningOp();
          Operation *top = def ? body->findAncestorOpInBlock(*def) : nullptr;
          if (top && dependent.contains(top))
            uses = true;
        }
      });
      if (uses) {
        dependent.insert(op);
        moved.push_back(op);
      }
    }
    Operation *def = second.getOperand(0).getDefiningOp();
    Operation *top = def ? body->findAncestorOpInBlock(*def) : nullptr;
    if (top && dependent.contains(top))
      continue;
    OpBuilder b(second);
    SmallVector<Value> pair = intrinsics.call(
        b, second.getLoc(), ("kiln.allreduce_pair.block." + kind).str(),
        {first.getOperand(0), second.getOperand(0)}, {type, type});
    first.getResult(0).replaceAllUsesWith(pair[0]);
    second.getResult(0).replaceAllUsesWith(pair[1]);
    Operation *after = pair[1].getDefiningOp();
    for (Operation *op : moved) {
      op->moveAfter(after);
      after = op;
    }
    first.erase();
    second.erase();
    --left;
    ++i; // both are taken
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
            uint64_t(kRowGroupMaxColumnsPerThread))
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
  auto func = b.create<func::FuncOp>(loc, kKernelName,
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
          ceilDiv(columns, blockThreads), 1, kRowGroupMaxColumnsPerThread);
      auto constant = [&](OpBuilder &cb, int64_t v) -> Value {
        return cb.create<arith::ConstantIndexOp>(loc, v);
      };
      Value unit = intrinsics.index(b, loc, "kiln.block");
      Value unitCount = intrinsics.index(b, loc, "kiln.blocks");
      Value tid = intrinsics.index(b, loc, "kiln.tid");
      Value threads = intrinsics.index(b, loc, "kiln.block_threads");
      auto loop =
          b.create<scf::ForOp>(loc, unit, constant(b, plan.groups), unitCount);
      OpBuilder gb = OpBuilder::atBlockTerminator(loop.getBody());
      Value group = loop.getInductionVar();
      // Every thread makes the same passes and rows (the barriers).
      auto pass = gb.create<scf::ForOp>(
          loc, constant(gb, 0), constant(gb, columns),
          gb.create<arith::MulIOp>(loc, threads, constant(gb, perThread)));
      OpBuilder pb = OpBuilder::atBlockTerminator(pass.getBody());
      SmallVector<Value, 4> cols, inRange;
      for (int64_t l = 0; l < perThread; ++l) {
        Value column = pb.create<arith::AddIOp>(
            loc, pass.getInductionVar(),
            pb.create<arith::AddIOp>(
                loc, pb.create<arith::MulIOp>(loc, threads, constant(pb, l)),
                tid));
        inRange.push_back(pb.create<arith::CmpIOp>(
            loc, arith::CmpIPredicate::slt, column, constant(pb, columns)));
        cols.push_back(
            pb.create<arith::MinSIOp>(loc, column, constant(pb, columns - 1)));
      }
      // Accumulators: partial p's column l at p * perThread + l.
      SmallVector<Value> init;
      for (ReduceOp partial : plan.partials) {
        Type acc = ElementEmitter::reductionAccumulatorType(partial);
        for (int64_t l = 0; l < perThread; ++l)
          init.push_back(pb.create<arith::ConstantOp>(
              loc, pb.getFloatAttr(acc, 0.0)));
      }
      auto rowLoop = pb.create<scf::ForOp>(
          loc, constant(pb, 0), constant(pb, plan.rowsPerGroup),
          constant(pb, 1), init);
      int64_t allreduces = 0; // block allreduce calls per row
      {
        Block *rowBody = rowLoop.getBody();
        OpBuilder rb = OpBuilder::atBlockEnd(rowBody);
        hooks.setCooperative(rowBody, tid, threads, /*blockScope=*/true);
        Value row = rb.create<arith::AddIOp>(
            loc,
            rb.create<arith::MulIOp>(loc, group,
                                     constant(rb, plan.rowsPerGroup)),
            rowLoop.getInductionVar());
        SmallVector<Value, 4> outer = delinearize(rb, loc, row, rowShape);
        ElementEmitter emitter(*model, hooks, rb);
        SmallVector<Value> next;
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
              reshape && cast<RankedTensorType>(reshape.getOperand().getType())
                                 .getShape() == ArrayRef<int64_t>(shape);
          Type acc = ElementEmitter::reductionAccumulatorType(partial);
          for (int64_t l = 0; l < perThread; ++l) {
            SmallVector<Value, 3> grouped = {group, rowLoop.getInductionVar(),
                                             cols[l]};
            Value element = convertScalar(
                rb, loc,
                rowShaped ? emitter.emit(reshape.getOperand(), ivsOf[l])
                          : emitter.emit(partial.getOperand(), grouped),
                acc);
            next.push_back(rb.create<arith::AddFOp>(
                loc, rowBody->getArgument(1 + p * perThread + l), element));
          }
        }
        for (int64_t l = 0; l < perThread; ++l) {
          SmallVector<Value> values;
          for (unsigned result : nest.results)
            values.push_back(emitter.emit(yield.getOperand(result), ivsOf[l]));
          auto ifOp =
              rb.create<scf::IfOp>(loc, inRange[l], /*withElseRegion=*/false);
          OpBuilder ib = ifOp.getThenBodyBuilder();
          for (auto [result, v] : llvm::zip(nest.results, values))
            store(ib, loc, result, v, ivsOf[l]);
        }
        rb.create<scf::YieldOp>(loc, next);
        allreduces = pairBlockAllreduces(rowBody, intrinsics);
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
      // A block makes its group's rows in order; a row's chain is each row
      // reduction's share per thread plus two barriers per block allreduce
      // (a pair of reductions shares one).
      uint64_t perRow =
          uint64_t(plan.rowReduces) * ceilDiv(columns, blockThreads) +
          2 * uint64_t(allreduces);
      uint64_t steps = ceilDiv(columns, uint64_t(blockThreads) * perThread) *
                       uint64_t(plan.rowsPerGroup) * perRow;
      if (steps > kernel.serialSteps) {
        kernel.serialSteps = steps;
        kernel.serialThreads = uint64_t(plan.groups) * blockThreads;
      }
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
          ceilDiv(columns, kCudaBlockThreads), 1, 4);
      auto constant = [&](OpBuilder &cb, int64_t v) -> Value {
        return cb.create<arith::ConstantIndexOp>(loc, v);
      };
      Value unit = intrinsics.index(b, loc, "kiln.block");
      Value unitCount = intrinsics.index(b, loc, "kiln.blocks");
      Value tid = intrinsics.index(b, loc, "kiln.tid");
      Value threads = intrinsics.index(b, loc, "kiln.block_threads");
      auto loop =
          b.create<scf::ForOp>(loc, unit, constant(b, units), unitCount);
      OpBuilder ub = OpBuilder::atBlockTerminator(loop.getBody());
      SmallVector<Value, 4> outer =
          delinearize(ub, loc, loop.getInductionVar(), unitShape);
      // Every thread makes the same passes (the chunk loop's barriers).
      auto pass = ub.create<scf::ForOp>(
          loc, constant(ub, 0), constant(ub, columns),
          ub.create<arith::MulIOp>(loc, threads, constant(ub, perThread)));
      OpBuilder nb = OpBuilder::atBlockTerminator(pass.getBody());
      SmallVector<Value, 4> cols, inRange;
      for (int64_t l = 0; l < perThread; ++l) {
        Value column = nb.create<arith::AddIOp>(
            loc, pass.getInductionVar(),
            nb.create<arith::AddIOp>(
                loc, nb.create<arith::MulIOp>(loc, threads, constant(nb, l)),
                tid));
        inRange.push_back(nb.create<arith::CmpIOp>(
            loc, arith::CmpIPredicate::slt, column, constant(nb, columns)));
        cols.push_back(
            nb.create<arith::MinSIOp>(loc, column, constant(nb, columns - 1)));
      }
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
      uint64_t steps = 2 * ceilDiv(positions, chunk) +
                       ceilDiv(positions, std::max<int64_t>(shape.front(), 1));
      if (steps > kernel.serialSteps) {
        kernel.serialSteps = steps;
        kernel.serialThreads = uint64_t(units) * kCudaBlockThreads;
      }
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
        outer = delinearize(nb, loc, loop.getInductionVar(), unitShape);
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
          SmallVector<Value, 4> at = delinearize(gb, loc, element, unitShape);
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
      elementIvs.push_back(delinearize(nb, loc, flat, shape));
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
    // A scatter_add element scans every index position in order.
    for (ScatterAddOp scatter : uses.scatters) {
      uint64_t steps = cast<RankedTensorType>(scatter.getIndices().getType())
                           .getNumElements();
      if (steps > kernel.serialSteps) {
        kernel.serialSteps = steps;
        kernel.serialThreads = uint64_t(total);
      }
    }
    launch.maxBlocks = std::max<uint64_t>(
        launch.maxBlocks, ceilDiv(ceilDiv(total, width), kCudaBlockThreads));
  }
  b.create<func::ReturnOp>(loc);
  if (failed(func.verify()))
    return failure();
  return module;
}

//===----------------------------------------------------------------------===//
// The printer
//===----------------------------------------------------------------------===//

namespace {

const char *kPrelude = R"cuda(#ifndef KILN_CUDA_PRELUDE
#define KILN_CUDA_PRELUDE
// Kiln CUDA kernel prelude: element types, NaN-propagating min/max, vector
// accesses and warp/block reductions used by the generated kernels.
#ifndef KILN_CUDA_EMULATION
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#endif
typedef long long kiln_index;
static __device__ __forceinline__ float kiln_f32(__half x) { return __half2float(x); }
static __device__ __forceinline__ float kiln_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
static __device__ __forceinline__ __half kiln_f16_bits(unsigned short bits) {
  __half_raw r; r.x = bits; return __half(r);
}
static __device__ __forceinline__ __nv_bfloat16 kiln_bf16_bits(unsigned short bits) {
  __nv_bfloat16_raw r; r.x = bits; return __nv_bfloat16(r);
}
static __device__ __forceinline__ float kiln_bits_f32(unsigned bits) { return __int_as_float((int)bits); }
static __device__ __forceinline__ double kiln_bits_f64(unsigned long long bits) { return __longlong_as_double((long long)bits); }
static __device__ __forceinline__ float kiln_maximumf(float a, float b) { return a != a ? a : b != b ? b : fmaxf(a, b); }
static __device__ __forceinline__ float kiln_minimumf(float a, float b) { return a != a ? a : b != b ? b : fminf(a, b); }
static __device__ __forceinline__ double kiln_maximumf(double a, double b) { return a != a ? a : b != b ? b : fmax(a, b); }
static __device__ __forceinline__ double kiln_minimumf(double a, double b) { return a != a ? a : b != b ? b : fmin(a, b); }
template <class T, int N> struct alignas(sizeof(T) * N) kiln_vec { T v[N]; };
struct kiln_sum { template <class T> __device__ T operator()(T a, T b) const { return a + b; } };
struct kiln_max {
  __device__ float operator()(float a, float b) const { return kiln_maximumf(a, b); }
  __device__ double operator()(double a, double b) const { return kiln_maximumf(a, b); }
  __device__ long long operator()(long long a, long long b) const { return a > b ? a : b; }
};
struct kiln_min {
  __device__ float operator()(float a, float b) const { return kiln_minimumf(a, b); }
  __device__ double operator()(double a, double b) const { return kiln_minimumf(a, b); }
  __device__ long long operator()(long long a, long long b) const { return a < b ? a : b; }
};
// Every lane of the warp gets op over the warp's values (butterfly: each
// pair computes the same commutative result, so all lanes agree bitwise).
template <class T, class Op> static __device__ __forceinline__ T kiln_warp_allreduce(T v, Op op) {
  for (int offset = 16; offset > 0; offset >>= 1)
    v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}
// Every thread of the block gets op over the block's values: warps reduce,
// then every thread combines the warps' results in warp order.
template <class T, class Op> static __device__ T kiln_block_allreduce(T v, Op op) {
  __shared__ T partial[32];
  v = kiln_warp_allreduce(v, op);
  __syncthreads();
  if ((threadIdx.x & 31u) == 0)
    partial[threadIdx.x >> 5] = v;
  __syncthreads();
  T r = partial[0];
  for (unsigned w = 1; w < (blockDim.x + 31u) / 32u; ++w)
    r = op(r, partial[w]);
  return r;
}
// The row cache (CudaEmitter.h): the block copies a row of n elements
// from global memory into its dynamic shared memory, 16-byte vectors when
// both ends are 16-byte aligned, then the rest element by element. The
// barrier before lets the block's threads finish reading the previous
// row; the one after makes every column visible to every thread.
// Two values reduced over the block, each exactly as kiln_block_allreduce
// reduces it, behind one pair of barriers.
template <class T> struct kiln_pair { T a, b; };
template <class T, class Op> static __device__ kiln_pair<T> kiln_block_allreduce_pair(T a, T b, Op op) {
  __shared__ T partial[2][32];
  a = kiln_warp_allreduce(a, op);
  b = kiln_warp_allreduce(b, op);
  __syncthreads();
  if ((threadIdx.x & 31u) == 0) {
    partial[0][threadIdx.x >> 5] = a;
    partial[1][threadIdx.x >> 5] = b;
  }
  __syncthreads();
  kiln_pair<T> r{partial[0][0], partial[1][0]};
  for (unsigned w = 1; w < (blockDim.x + 31u) / 32u; ++w) {
    r.a = op(r.a, partial[0][w]);
    r.b = op(r.b, partial[1][w]);
  }
  return r;
}
template <class T> static __device__ void kiln_stage_row(T *dst, const T *src, kiln_index n) {
  constexpr int V = 16 / sizeof(T);
  __syncthreads();
  kiln_index done = 0;
  if (V > 1 && reinterpret_cast<unsigned long long>(src) % 16 == 0 &&
      reinterpret_cast<unsigned long long>(dst) % 16 == 0) {
    done = n / V * V;
#pragma unroll 4
    for (kiln_index i = (kiln_index)threadIdx.x * V; i < done; i += (kiln_index)blockDim.x * V)
      *reinterpret_cast<kiln_vec<T, V> *>(dst + i) = *reinterpret_cast<const kiln_vec<T, V> *>(src + i);
  }
  for (kiln_index i = done + threadIdx.x; i < n; i += blockDim.x)
    dst[i] = src[i];
  __syncthreads();
}
// Scatter rows (CudaEmitter.h): the block lists, in kiln_scatter_list and
// in increasing order, the positions p in [begin, begin + blockDim.x *
// KILN_SCATTER_PER_THREAD) below n whose index idx[p] names |row|, and
// every thread gets their count. Each thread tests KILN_SCATTER_PER_THREAD
// consecutive positions; a warp scan of the hit counts and the warps'
// totals (in warp order) give each hit its slot. The barrier before lets
// the block finish reading the previous chunk's list; the one after
// publishes this one.
#define KILN_SCATTER_PER_THREAD 8
#define KILN_SCATTER_LIST (256 * KILN_SCATTER_PER_THREAD)
template <class I>
static __device__ __forceinline__ kiln_index kiln_scatter_collect(const I *idx, kiln_index begin, kiln_index n,
                                                  kiln_index row, unsigned *list) {
  __shared__ unsigned warp_hits[32];
  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
  const kiln_index first = begin + (kiln_index)threadIdx.x * KILN_SCATTER_PER_THREAD;
  unsigned mine = 0, hits = 0;
  for (int j = 0; j < KILN_SCATTER_PER_THREAD; ++j)
    if (first + j < n && (kiln_index)idx[first + j] == row) {
      mine |= 1u << j;
      ++hits;
    }
  unsigned scan = hits;
  for (unsigned d = 1; d < 32; d <<= 1) {
    unsigned other = __shfl_up_sync(0xffffffffu, scan, d);
    if (lane >= d)
      scan += other;
  }
  __syncthreads();
  if (lane == 31u)
    warp_hits[warp] = scan;
  __syncthreads();
  unsigned slot = scan - hits, total = 0;
  for (unsigned w = 0; w < (blockDim.x + 31u) / 32u; ++w) {
    slot += w < warp ? warp_hits[w] : 0u;
    total += warp_hits[w];
  }
  for (int j = 0; j < KILN_SCATTER_PER_THREAD; ++j)
    if (mine >> j & 1u)
      list[slot++] = (unsigned)(first + j);
  __syncthreads();
  return (kiln_index)total;
}
#endif // KILN_CUDA_PRELUDE
)cuda";

class Printer {
public:
  explicit Printer(llvm::raw_ostream &os, std::string prefix)
      : os_(os), prefix_(std::move(prefix)) {}

  LogicalResult printModule(ModuleOp module, StringRef name) {
    for (auto global : module.getOps<memref::GlobalOp>())
      if (failed(printGlobal(global)))
        return failure();
    auto func = module.lookupSymbol<func::FuncOp>(kKernelName);
    std::string params;
    std::vector<std::string> casts;
    unsigned numArgs = func.getNumArguments();
    unsigned numInputs = numArgs - numOutputs_;
    for (unsigned i = 0; i < numArgs; ++i) {
      auto type = cast<MemRefType>(func.getArgument(i).getType());
      std::string elem = cType(type.getElementType());
      if (elem.empty())
        return func.emitError() << "CUDA: unsupported element type "
                                << type.getElementType();
      std::string argName = i < numInputs ? "in" + std::to_string(i)
                                          : "out" + std::to_string(i - numInputs);
      names_[func.getArgument(i)] = argName;
      std::string qualified = (i < numInputs ? "const " : "") + elem + " *";
      params += (i ? ", " : "") + qualified + argName;
      casts.push_back("(" + qualified + ")buffers[" + std::to_string(i) + "]");
    }
    os_ << "extern \"C\" __global__ void __launch_bounds__(" << blockThreads_
        << ") " << name << "(" << params << ") {\n";
    indent_ = 1;
    if (dynamicSharedBytes_) {
      // The row cache (CudaEmitter.h); the emulation gives each block its
      // own array of the launch's size.
      line("// " + std::to_string(dynamicSharedBytes_) +
           " bytes of dynamic shared memory: the row cache");
      os_ << "#ifndef KILN_CUDA_EMULATION\n";
      line("extern __shared__ __align__(16) unsigned char kiln_shared[];");
      os_ << "#else\n";
      line("unsigned char *const kiln_shared = kiln_emulation_dynamic_shared();");
      os_ << "#endif\n";
    }
    bool scatterRows = llvm::any_of(module.getOps<func::FuncOp>(), [](func::FuncOp f) {
      return intrinsicName(f.getSymName()) == "kiln.scatter_collect";
    });
    if (scatterRows)
      line("__shared__ unsigned kiln_scatter_list[KILN_SCATTER_LIST];");
    if (failed(printBlock(func.getBody().front())))
      return failure();
    os_ << "}\n";
    os_ << "#ifdef KILN_CUDA_EMULATION\nextern \"C\" void " << name
        << "_host(void **buffers, unsigned grid, unsigned block) {\n"
        << "  (void)buffers;\n  kiln_emulate(grid, block, [&] { " << name << "(";
    for (size_t i = 0; i < casts.size(); ++i)
      os_ << (i ? ", " : "") << casts[i];
    os_ << "); }";
    if (dynamicSharedBytes_)
      os_ << ", " << dynamicSharedBytes_ << "u";
    os_ << ");\n}\n#endif\n";
    return success();
  }

  void setNumOutputs(unsigned n) { numOutputs_ = n; }
  void setDynamicSharedBytes(uint32_t n) { dynamicSharedBytes_ = n; }
  void setBlockThreads(unsigned n) { blockThreads_ = n; }

private:
  static std::string cType(Type type) {
    if (type.isF32())
      return "float";
    if (type.isF64())
      return "double";
    if (type.isF16())
      return "__half";
    if (type.isBF16())
      return "__nv_bfloat16";
    if (type.isIndex())
      return "kiln_index";
    if (type.isInteger(1))
      return "bool";
    if (type.isInteger(8))
      return "signed char";
    if (type.isInteger(16))
      return "short";
    if (type.isInteger(32))
      return "int";
    if (type.isInteger(64))
      return "long long";
    return "";
  }
  static bool isHalf(Type type) { return type.isF16() || type.isBF16(); }
  static std::string unsignedType(Type type) {
    if (type.isInteger(1))
      return "bool";
    if (type.isInteger(8))
      return "unsigned char";
    if (type.isInteger(16))
      return "unsigned short";
    if (type.isInteger(32))
      return "unsigned";
    return "unsigned long long";
  }

  void line(const std::string &text) {
    for (unsigned i = 0; i < indent_; ++i)
      os_ << "  ";
    os_ << text << "\n";
  }

  std::string fresh() { return "v" + std::to_string(next_++); }

  // The value's expression; f16/bf16 values as f32 when |asF32|.
  std::string ref(Value v, bool asF32 = false) {
    std::string name = names_.lookup(v);
    if (asF32 && isHalf(v.getType()))
      return "kiln_f32(" + name + ")";
    return name;
  }

  // Declares |result| = |expr| (an f32 expression when the result is
  // f16/bf16 and |fromF32|).
  void define(Value result, const std::string &expr, bool fromF32 = false) {
    std::string name = fresh();
    names_[result] = name;
    Type type = result.getType();
    std::string value = expr;
    if (fromF32 && isHalf(type))
      value = std::string(type.isF16() ? "__float2half_rn" : "__float2bfloat16_rn") +
              "(" + expr + ")";
    line("const " + cType(type) + " " + name + " = " + value + ";");
  }

  std::string floatLiteral(Type type, const llvm::APFloat &value) {
    uint64_t bits = value.bitcastToAPInt().getZExtValue();
    if (type.isF16() || type.isBF16())
      return std::string(type.isF16() ? "kiln_f16_bits" : "kiln_bf16_bits") +
             "(0x" + llvm::utohexstr(bits) + ")";
    if (!value.isFinite())
      return type.isF64() ? "kiln_bits_f64(0x" + llvm::utohexstr(bits) + "ull)"
                          : "kiln_bits_f32(0x" + llvm::utohexstr(bits) + "u)";
    char buffer[64];
    if (type.isF64())
      std::snprintf(buffer, sizeof buffer, "%a", value.convertToDouble());
    else
      std::snprintf(buffer, sizeof buffer, "%af", double(value.convertToFloat()));
    return buffer;
  }

  std::string intLiteral(Type type, const llvm::APInt &value) {
    if (type.isInteger(1))
      return value.isZero() ? "false" : "true";
    int64_t v = value.getSExtValue();
    if (v == INT64_MIN)
      return "(-9223372036854775807LL - 1)";
    return "(" + cType(type) + ")" + std::to_string(v) + "LL";
  }

  LogicalResult printGlobal(memref::GlobalOp global) {
    auto type = global.getType();
    Type element = type.getElementType();
    auto value = dyn_cast_or_null<DenseElementsAttr>(global.getInitialValueAttr());
    if (!value)
      return global.emitError() << "CUDA: expected a dense constant";
    std::string name = prefix_ + global.getSymName().str();
    globals_[global.getSymName()] = name;
    std::string elementType = isHalf(element) ? "unsigned short" : cType(element);
    std::string text = "static __device__ const " + elementType + " " + name +
                       "[" + std::to_string(std::max<int64_t>(type.getNumElements(), 1)) +
                       "] = {";
    int64_t n = type.getNumElements();
    for (int64_t i = 0; i < n; ++i) {
      if (i)
        text += ", ";
      if (isa<FloatType>(element)) {
        llvm::APFloat v = value.getValues<llvm::APFloat>()[value.isSplat() ? 0 : i];
        if (isHalf(element))
          text += "0x" + llvm::utohexstr(v.bitcastToAPInt().getZExtValue());
        else
          text += floatLiteral(element, v);
      } else {
        text += intLiteral(element, value.getValues<llvm::APInt>()[value.isSplat() ? 0 : i]);
      }
    }
    os_ << text << "};\n";
    return success();
  }

  std::string linear(Value memref, ValueRange indices) {
    auto type = cast<MemRefType>(memref.getType());
    if (indices.empty())
      return "0";
    std::string expr = ref(indices[0]);
    for (size_t i = 1; i < indices.size(); ++i)
      expr = "(" + expr + ") * " + std::to_string(type.getDimSize(i)) + " + " +
             ref(indices[i]);
    return expr;
  }

  LogicalResult printBlock(Block &block) {
    for (Operation &op : block)
      if (failed(printOp(&op)))
        return failure();
    return success();
  }

  LogicalResult printRegionBody(Region &region) {
    ++indent_;
    LogicalResult result = printBlock(region.front());
    --indent_;
    return result;
  }

  LogicalResult printOp(Operation *op);
  LogicalResult printArith(Operation *op, bool &handled);
  LogicalResult printMath(Operation *op, bool &handled);
  LogicalResult printCall(func::CallOp call);

  llvm::raw_ostream &os_;
  std::string prefix_;
  unsigned indent_ = 0, next_ = 0, numOutputs_ = 0;
  uint32_t dynamicSharedBytes_ = 0;
  unsigned blockThreads_ = kCudaBlockThreads;
  llvm::DenseMap<Value, std::string> names_;
  llvm::StringMap<std::string> globals_;
  // Variables that scf.yield assigns: per scf op, its result variables.
  llvm::DenseMap<Operation *, SmallVector<std::string>> carried_;
};

std::string cmpfExpr(arith::CmpFPredicate p, const std::string &a,
                     const std::string &b) {
  using P = arith::CmpFPredicate;
  std::string unord = "(" + a + " != " + a + " || " + b + " != " + b + ")";
  switch (p) {
  case P::AlwaysFalse: return "false";
  case P::AlwaysTrue: return "true";
  case P::OEQ: return "(" + a + " == " + b + ")";
  case P::OGT: return "(" + a + " > " + b + ")";
  case P::OGE: return "(" + a + " >= " + b + ")";
  case P::OLT: return "(" + a + " < " + b + ")";
  case P::OLE: return "(" + a + " <= " + b + ")";
  case P::ONE: return "(" + a + " < " + b + " || " + a + " > " + b + ")";
  case P::ORD: return "!" + unord;
  case P::UEQ: return "!(" + a + " < " + b + " || " + a + " > " + b + ")";
  case P::UGT: return "!(" + a + " <= " + b + ")";
  case P::UGE: return "!(" + a + " < " + b + ")";
  case P::ULT: return "!(" + a + " >= " + b + ")";
  case P::ULE: return "!(" + a + " > " + b + ")";
  case P::UNE: return "(" + a + " != " + b + ")";
  case P::UNO: return unord;
  }
  return "false";
}

LogicalResult Printer::printArith(Operation *op, bool &handled) {
  handled = true;
  auto binary = [&](const char *symbol) {
    bool isFloat = isa<FloatType>(op->getResult(0).getType());
    define(op->getResult(0),
           ref(op->getOperand(0), isFloat) + " " + symbol + " " +
               ref(op->getOperand(1), isFloat),
           isFloat);
  };
  auto unsignedBinary = [&](const char *symbol) {
    Type t = op->getResult(0).getType();
    std::string u = unsignedType(t);
    define(op->getResult(0), "(" + cType(t) + ")((" + u + ")" +
                                 ref(op->getOperand(0)) + " " + symbol + " (" +
                                 u + ")" + ref(op->getOperand(1)) + ")");
  };
  auto call2 = [&](const std::string &fn) {
    bool isFloat = isa<FloatType>(op->getResult(0).getType());
    define(op->getResult(0),
           fn + "(" + ref(op->getOperand(0), isFloat) + ", " +
               ref(op->getOperand(1), isFloat) + ")",
           isFloat);
  };
  auto ternary = [&](const char *cmp) {
    std::string a = ref(op->getOperand(0)), b = ref(op->getOperand(1));
    define(op->getResult(0), "(" + a + " " + cmp + " " + b + " ? " + a + " : " + b + ")");
  };
  if (auto c = dyn_cast<arith::ConstantOp>(op)) {
    Type type = c.getType();
    if (auto f = dyn_cast<FloatAttr>(c.getValue()))
      names_[c.getResult()] = floatLiteral(type, f.getValue());
    else if (auto i = dyn_cast<IntegerAttr>(c.getValue()))
      names_[c.getResult()] =
          type.isIndex() ? "(kiln_index)" + std::to_string(i.getInt()) + "LL"
                         : intLiteral(type, i.getValue());
    else
      return op->emitError() << "CUDA: unsupported constant " << c.getValue();
    return success();
  }
  if (isa<arith::AddFOp, arith::AddIOp>(op)) { binary("+"); return success(); }
  if (isa<arith::SubFOp, arith::SubIOp>(op)) { binary("-"); return success(); }
  if (isa<arith::MulFOp, arith::MulIOp>(op)) { binary("*"); return success(); }
  if (isa<arith::DivFOp, arith::DivSIOp>(op)) { binary("/"); return success(); }
  if (isa<arith::RemSIOp>(op)) { binary("%"); return success(); }
  if (isa<arith::AndIOp>(op)) { binary("&"); return success(); }
  if (isa<arith::OrIOp>(op)) { binary("|"); return success(); }
  if (isa<arith::XOrIOp>(op)) { binary("^"); return success(); }
  if (isa<arith::ShLIOp>(op)) { binary("<<"); return success(); }
  if (isa<arith::ShRSIOp>(op)) { binary(">>"); return success(); }
  if (isa<arith::DivUIOp>(op)) { unsignedBinary("/"); return success(); }
  if (isa<arith::RemUIOp>(op)) { unsignedBinary("%"); return success(); }
  if (isa<arith::ShRUIOp>(op)) { unsignedBinary(">>"); return success(); }
  if (isa<arith::RemFOp>(op)) {
    call2(op->getResult(0).getType().isF64() ? "fmod" : "fmodf");
    return success();
  }
  if (isa<arith::MaximumFOp>(op)) { call2("kiln_maximumf"); return success(); }
  if (isa<arith::MinimumFOp>(op)) { call2("kiln_minimumf"); return success(); }
  if (isa<arith::MaxNumFOp>(op)) {
    call2(op->getResult(0).getType().isF64() ? "fmax" : "fmaxf");
    return success();
  }
  if (isa<arith::MinNumFOp>(op)) {
    call2(op->getResult(0).getType().isF64() ? "fmin" : "fminf");
    return success();
  }
  if (isa<arith::MaxSIOp>(op)) { ternary(">"); return success(); }
  if (isa<arith::MinSIOp>(op)) { ternary("<"); return success(); }
  if (auto neg = dyn_cast<arith::NegFOp>(op)) {
    define(neg.getResult(), "-" + ref(neg.getOperand(), true), true);
    return success();
  }
  if (auto cmp = dyn_cast<arith::CmpFOp>(op)) {
    define(cmp.getResult(), cmpfExpr(cmp.getPredicate(), ref(cmp.getLhs(), true),
                                     ref(cmp.getRhs(), true)));
    return success();
  }
  if (auto cmp = dyn_cast<arith::CmpIOp>(op)) {
    using P = arith::CmpIPredicate;
    std::string a = ref(cmp.getLhs()), b = ref(cmp.getRhs());
    std::string u = "(" + unsignedType(cmp.getLhs().getType()) + ")";
    std::string expr;
    switch (cmp.getPredicate()) {
    case P::eq: expr = a + " == " + b; break;
    case P::ne: expr = a + " != " + b; break;
    case P::slt: expr = a + " < " + b; break;
    case P::sle: expr = a + " <= " + b; break;
    case P::sgt: expr = a + " > " + b; break;
    case P::sge: expr = a + " >= " + b; break;
    case P::ult: expr = u + a + " < " + u + b; break;
    case P::ule: expr = u + a + " <= " + u + b; break;
    case P::ugt: expr = u + a + " > " + u + b; break;
    case P::uge: expr = u + a + " >= " + u + b; break;
    }
    define(cmp.getResult(), "(" + expr + ")");
    return success();
  }
  if (auto select = dyn_cast<arith::SelectOp>(op)) {
    define(select.getResult(), ref(select.getCondition()) + " ? " +
                                   ref(select.getTrueValue()) + " : " +
                                   ref(select.getFalseValue()));
    return success();
  }
  if (auto ext = dyn_cast<arith::ExtFOp>(op)) {
    Type to = ext.getType();
    define(ext.getResult(), "(" + cType(to) + ")" + ref(ext.getIn(), true));
    return success();
  }
  if (auto trunc = dyn_cast<arith::TruncFOp>(op)) {
    Type from = trunc.getIn().getType(), to = trunc.getType();
    std::string in = ref(trunc.getIn(), true);
    if (to.isF32())
      define(trunc.getResult(), "(float)" + in);
    else if (from.isF64())
      define(trunc.getResult(), std::string(to.isF16() ? "__double2half" : "__double2bfloat16") +
                                    "(" + in + ")");
    else
      define(trunc.getResult(), in, /*fromF32=*/true);
    return success();
  }
  if (isa<arith::SIToFPOp, arith::UIToFPOp>(op)) {
    Value in = op->getOperand(0);
    Type to = op->getResult(0).getType();
    std::string src = isa<arith::UIToFPOp>(op)
                          ? "(" + unsignedType(in.getType()) + ")" + ref(in)
                          : ref(in);
    if (isHalf(to))
      define(op->getResult(0), "(float)" + src, true);
    else
      define(op->getResult(0), "(" + cType(to) + ")" + src);
    return success();
  }
  if (isa<arith::FPToSIOp, arith::FPToUIOp>(op)) {
    Type to = op->getResult(0).getType();
    std::string cast = isa<arith::FPToUIOp>(op) ? unsignedType(to) : cType(to);
    define(op->getResult(0),
           "(" + cType(to) + ")(" + cast + ")" + ref(op->getOperand(0), true));
    return success();
  }
  if (isa<arith::ExtSIOp, arith::TruncIOp, arith::IndexCastOp>(op)) {
    Type to = op->getResult(0).getType();
    if (to.isInteger(1))
      define(op->getResult(0), "(bool)(" + ref(op->getOperand(0)) + " & 1)");
    else
      define(op->getResult(0), "(" + cType(to) + ")" + ref(op->getOperand(0)));
    return success();
  }
  if (isa<arith::ExtUIOp, arith::IndexCastUIOp>(op)) {
    Value in = op->getOperand(0);
    define(op->getResult(0), "(" + cType(op->getResult(0).getType()) + ")(" +
                                 unsignedType(in.getType()) + ")" + ref(in));
    return success();
  }
  if (auto bitcast = dyn_cast<arith::BitcastOp>(op)) {
    Type to = bitcast.getType();
    std::string name = fresh();
    names_[bitcast.getResult()] = name;
    line(cType(to) + " " + name + ";");
    line("memcpy(&" + name + ", &" + ref(bitcast.getIn()) + ", sizeof " + name + ");");
    return success();
  }
  handled = false;
  return success();
}

LogicalResult Printer::printMath(Operation *op, bool &handled) {
  handled = true;
  Type type = op->getResult(0).getType();
  bool f64 = type.isF64();
  auto unary = [&](const std::string &fn) {
    define(op->getResult(0),
           fn + (f64 ? "" : "f") + "(" + ref(op->getOperand(0), true) + ")", true);
  };
  auto binary = [&](const std::string &fn) {
    define(op->getResult(0),
           fn + (f64 ? "" : "f") + "(" + ref(op->getOperand(0), true) + ", " +
               ref(op->getOperand(1), true) + ")",
           true);
  };
  if (isa<math::ExpOp>(op)) unary("exp");
  else if (isa<math::Exp2Op>(op)) unary("exp2");
  else if (isa<math::ExpM1Op>(op)) unary("expm1");
  else if (isa<math::LogOp>(op)) unary("log");
  else if (isa<math::Log1pOp>(op)) unary("log1p");
  else if (isa<math::Log2Op>(op)) unary("log2");
  else if (isa<math::Log10Op>(op)) unary("log10");
  else if (isa<math::SqrtOp>(op)) unary("sqrt");
  else if (isa<math::RsqrtOp>(op)) unary("rsqrt");
  else if (isa<math::TanhOp>(op)) unary("tanh");
  else if (isa<math::ErfOp>(op)) unary("erf");
  else if (isa<math::SinOp>(op)) unary("sin");
  else if (isa<math::CosOp>(op)) unary("cos");
  else if (isa<math::TanOp>(op)) unary("tan");
  else if (isa<math::AtanOp>(op)) unary("atan");
  else if (isa<math::AbsFOp>(op)) unary("fabs");
  else if (isa<math::FloorOp>(op)) unary("floor");
  else if (isa<math::CeilOp>(op)) unary("ceil");
  else if (isa<math::RoundOp>(op)) unary("round");
  else if (isa<math::RoundEvenOp>(op)) unary("rint");
  else if (isa<math::TruncOp>(op)) unary("trunc");
  else if (isa<math::PowFOp>(op)) binary("pow");
  else if (isa<math::Atan2Op>(op)) binary("atan2");
  else if (isa<math::CopySignOp>(op)) binary("copysign");
  else if (auto abs = dyn_cast<math::AbsIOp>(op)) {
    std::string a = ref(abs.getOperand());
    define(abs.getResult(), "(" + a + " < 0 ? -" + a + " : " + a + ")");
  } else
    handled = false;
  return success();
}

LogicalResult Printer::printCall(func::CallOp call) {
  StringRef name = intrinsicName(call.getCallee());
  auto defineIndex = [&](const std::string &expr) {
    define(call.getResult(0), expr);
    return success();
  };
  if (name == "kiln.thread")
    return defineIndex("(kiln_index)blockIdx.x * blockDim.x + threadIdx.x");
  if (name == "kiln.threads")
    return defineIndex("(kiln_index)gridDim.x * blockDim.x");
  if (name == "kiln.warp")
    return defineIndex("((kiln_index)blockIdx.x * blockDim.x + threadIdx.x) / 32");
  if (name == "kiln.warps")
    return defineIndex("(kiln_index)gridDim.x * (blockDim.x / 32)");
  if (name == "kiln.lane")
    return defineIndex("(kiln_index)(threadIdx.x & 31u)");
  if (name == "kiln.block")
    return defineIndex("(kiln_index)blockIdx.x");
  if (name == "kiln.blocks")
    return defineIndex("(kiln_index)gridDim.x");
  if (name == "kiln.tid")
    return defineIndex("(kiln_index)threadIdx.x");
  if (name == "kiln.block_threads")
    return defineIndex("(kiln_index)blockDim.x");
  if (name.starts_with("kiln.allreduce_pair.")) {
    auto [scope, kind] =
        name.drop_front(strlen("kiln.allreduce_pair.")).split('.');
    std::string pair = fresh();
    line("const kiln_pair<" + cType(call.getResult(0).getType()) + "> " + pair +
         " = kiln_" + scope.str() + "_allreduce_pair(" +
         ref(call.getOperand(0)) + ", " + ref(call.getOperand(1)) + ", kiln_" +
         kind.str() + "());");
    names_[call.getResult(0)] = pair + ".a";
    names_[call.getResult(1)] = pair + ".b";
    return success();
  }
  if (name.starts_with("kiln.allreduce.")) {
    auto [scope, kind] = name.drop_front(strlen("kiln.allreduce.")).split('.');
    define(call.getResult(0), "kiln_" + scope.str() + "_allreduce(" +
                                  ref(call.getOperand(0)) + ", kiln_" +
                                  kind.str() + "())");
    return success();
  }
  if (name == "kiln.scatter_chunk")
    return defineIndex("(kiln_index)blockDim.x * KILN_SCATTER_PER_THREAD");
  if (name == "kiln.scatter_collect")
    // Barriers inside: every thread of the block calls it.
    return defineIndex("kiln_scatter_collect(" + ref(call.getOperand(0)) + ", " +
                       ref(call.getOperand(1)) + ", " + ref(call.getOperand(2)) +
                       ", " + ref(call.getOperand(3)) + ", kiln_scatter_list)");
  if (name == "kiln.scatter_match")
    return defineIndex("(kiln_index)kiln_scatter_list[" +
                       ref(call.getOperand(0)) + "]");
  if (name == "kiln.shared_row") {
    // A row-cache slot: a typed pointer into the dynamic shared memory.
    Type element = cast<MemRefType>(call.getResult(0).getType()).getElementType();
    std::string slot = fresh();
    names_[call.getResult(0)] = slot;
    line(cType(element) + " *const " + slot + " = reinterpret_cast<" +
         cType(element) + " *>(kiln_shared + " + ref(call.getOperand(0)) + ");");
    return success();
  }
  if (name == "kiln.stage_row") {
    // The row cache's staging (barriers inside: every thread calls it).
    line("kiln_stage_row(" + ref(call.getOperand(0)) + ", " +
         ref(call.getOperand(1)) + " + " + ref(call.getOperand(2)) + ", " +
         ref(call.getOperand(3)) + ");");
    return success();
  }
  if (name == "kiln.vload") {
    Value memref = call.getOperand(0);
    Type element = cast<MemRefType>(memref.getType()).getElementType();
    std::string vec = "kiln_vec<" + cType(element) + ", " +
                      std::to_string(call.getNumResults()) + ">";
    std::string name = fresh();
    line("const " + vec + " " + name + " = *reinterpret_cast<const " + vec +
         " *>(" + ref(memref) + " + " + ref(call.getOperand(1)) + ");");
    for (unsigned k = 0; k < call.getNumResults(); ++k)
      names_[call.getResult(k)] = name + ".v[" + std::to_string(k) + "]";
    return success();
  }
  if (name == "kiln.vstore") {
    Value memref = call.getOperand(0);
    Type element = cast<MemRefType>(memref.getType()).getElementType();
    unsigned width = call.getNumOperands() - 2;
    std::string vec = "kiln_vec<" + cType(element) + ", " + std::to_string(width) + ">";
    std::string name = fresh();
    line("{");
    ++indent_;
    line(vec + " " + name + ";");
    for (unsigned k = 0; k < width; ++k)
      line(name + ".v[" + std::to_string(k) + "] = " + ref(call.getOperand(2 + k)) + ";");
    line("*reinterpret_cast<" + vec + " *>(" + ref(memref) + " + " +
         ref(call.getOperand(1)) + ") = " + name + ";");
    --indent_;
    line("}");
    return success();
  }
  return call.emitError() << "CUDA: unknown intrinsic " << call.getCallee();
}

LogicalResult Printer::printOp(Operation *op) {
  bool handled = false;
  if (op->getDialect() && op->getDialect()->getNamespace() == "arith") {
    if (failed(printArith(op, handled)))
      return failure();
    if (handled)
      return success();
  }
  if (op->getDialect() && op->getDialect()->getNamespace() == "math") {
    if (failed(printMath(op, handled)))
      return failure();
    if (handled)
      return success();
  }
  if (auto load = dyn_cast<memref::LoadOp>(op)) {
    std::string expr = ref(load.getMemRef()) + "[" +
                       linear(load.getMemRef(), load.getIndices()) + "]";
    Type element = load.getType();
    if (load.getMemRef().getDefiningOp<memref::GetGlobalOp>() && isHalf(element))
      expr = std::string(element.isF16() ? "kiln_f16_bits" : "kiln_bf16_bits") +
             "(" + expr + ")";
    define(load.getResult(), expr);
    return success();
  }
  if (auto store = dyn_cast<memref::StoreOp>(op)) {
    line(ref(store.getMemRef()) + "[" +
         linear(store.getMemRef(), store.getIndices()) +
         "] = " + ref(store.getValueToStore()) + ";");
    return success();
  }
  if (auto get = dyn_cast<memref::GetGlobalOp>(op)) {
    names_[get.getResult()] = globals_.lookup(get.getName());
    return success();
  }
  if (auto call = dyn_cast<func::CallOp>(op))
    return printCall(call);
  if (isa<func::ReturnOp>(op))
    return success();
  if (auto loop = dyn_cast<scf::ForOp>(op)) {
    SmallVector<std::string> vars;
    for (auto [init, arg, result] : llvm::zip(loop.getInitArgs(),
                                              loop.getRegionIterArgs(),
                                              loop.getResults())) {
      std::string var = fresh();
      line(cType(arg.getType()) + " " + var + " = " + ref(init) + ";");
      names_[arg] = var;
      names_[result] = var;
      vars.push_back(var);
    }
    carried_[op] = vars;
    std::string iv = fresh();
    names_[loop.getInductionVar()] = iv;
    line("for (kiln_index " + iv + " = " + ref(loop.getLowerBound()) + "; " + iv +
         " < " + ref(loop.getUpperBound()) + "; " + iv + " += " +
         ref(loop.getStep()) + ") {");
    if (failed(printRegionBody(loop.getRegion())))
      return failure();
    line("}");
    return success();
  }
  if (auto ifOp = dyn_cast<scf::IfOp>(op)) {
    SmallVector<std::string> vars;
    for (Value result : ifOp.getResults()) {
      std::string var = fresh();
      line(cType(result.getType()) + " " + var + ";");
      names_[result] = var;
      vars.push_back(var);
    }
    carried_[op] = vars;
    line("if (" + ref(ifOp.getCondition()) + ") {");
    if (failed(printRegionBody(ifOp.getThenRegion())))
      return failure();
    if (!ifOp.getElseRegion().empty()) {
      line("} else {");
      if (failed(printRegionBody(ifOp.getElseRegion())))
        return failure();
    }
    line("}");
    return success();
  }
  if (auto region = dyn_cast<scf::ExecuteRegionOp>(op)) {
    if (region.getNumResults() != 0)
      return op->emitError() << "CUDA: expected an scf.execute_region without results";
    line("{");
    if (failed(printRegionBody(region.getRegion())))
      return failure();
    line("}");
    return success();
  }
  if (auto yield = dyn_cast<scf::YieldOp>(op)) {
    SmallVector<std::string> &vars = carried_[op->getParentOp()];
    // Through temporaries: a yielded value may read another carried one.
    SmallVector<std::string> temps;
    for (Value v : yield.getOperands()) {
      std::string t = fresh();
      line("const " + cType(v.getType()) + " " + t + " = " + ref(v) + ";");
      temps.push_back(t);
    }
    for (size_t i = 0; i < temps.size(); ++i)
      line(vars[i] + " = " + temps[i] + ";");
    return success();
  }
  return op->emitError() << "CUDA: the source printer does not support this op";
}

} // namespace

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
  os << kPrelude;
  Printer printer(os, name.str() + "_");
  printer.setNumOutputs(fusion.getNumResults());
  printer.setDynamicSharedBytes(kernel.dynamicSharedBytes);
  printer.setBlockThreads(kernel.launch.blockThreads);
  if (failed(printer.printModule(**module, name)))
    return fusion.emitOpError() << "cannot print its CUDA kernel";
  kernel.source = std::move(os.str());
  return kernel;
}

} // namespace kiln
