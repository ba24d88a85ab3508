//===- LowerToLLVM.cpp - CPU kernels for loop fusions
//-----------------------===//
//
// The CPU side of the kernel model: hooks that read inputs and constants
// with memref.load, the scf.for loop nests, the upstream lowering to the LLVM
// dialect and the JIT (see LowerToLLVM.h).
//
// f32 math (exp, expm1, log, log1p, log2, tanh, erf, ...;
// f16 and bf16 compute in f32; sin, cos and atan by Kiln's own reductions
// below) is first rewritten into MLIR's polynomial approximations, plain arith
// that vectorizes (a libm call, or an LLVM intrinsic such as llvm.exp without a
// vector math library, is called once per lane); they agree with the
// interpreter's std:: functions to a few ulp. What remains (f64, and f32 ops
// without an approximation) lowers to LLVM intrinsics where LLVM has them
// (sqrt, exp, log, ...), so loops with sqrt vectorize; log1p and expm1 (which
// math-to-llvm would rewrite through log/exp, losing precision near 0) and the
// ops LLVM has no intrinsic for become libm calls. bf16 conversions are
// expanded to integer ops (arith-expand) because the JIT has no runtime library
// for them.
//
//===----------------------------------------------------------------------===//

#include "codegen/cpu/LowerToLLVM.h"

#include "codegen/KernelModel.h"
#include "runtime/cpu/jit/Bf16Libcall.h"
#include "ir/Interpreter.h"

#include "mlir/Conversion/ArithToLLVM/ArithToLLVM.h"
#include "mlir/Conversion/ControlFlowToLLVM/ControlFlowToLLVM.h"
#include "mlir/Conversion/FuncToLLVM/ConvertFuncToLLVMPass.h"
#include "mlir/Conversion/MathToLLVM/MathToLLVM.h"
#include "mlir/Conversion/MathToLibm/MathToLibm.h"
#include "mlir/Conversion/MemRefToLLVM/MemRefToLLVM.h"
#include "mlir/Conversion/ReconcileUnrealizedCasts/ReconcileUnrealizedCasts.h"
#include "mlir/Conversion/SCFToControlFlow/SCFToControlFlow.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Arith/Transforms/Passes.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlow.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Math/Transforms/Passes.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/MemRef/Transforms/Passes.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/ExecutionEngine/ExecutionEngine.h"
#include "mlir/ExecutionEngine/OptUtils.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVMIR/Export.h"
#include "mlir/Transforms/DialectConversion.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "llvm/ADT/SetVector.h"

#include <functional>
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "llvm/ADT/APFloat.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/Analysis/LoopInfo.h"
#include "llvm/IR/Dominators.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/InstIterator.h"
#include "llvm/IR/Metadata.h"
#include "llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h"
#include "llvm/Support/TargetSelect.h"

#include <cstring>
#include <mutex>

using namespace mlir;

namespace kiln {

namespace {

constexpr llvm::StringLiteral kKernelName = "kernel";

// Adds the C entry point `void kiln_kernel(void **buffers, int64_t part,
// int64_t parts)` to a module lowered to the LLVM dialect: it loads the
// buffer pointers and calls @kernel (bare pointers, then part and parts),
// doing nothing unless 0 <= part < parts. @kernel becomes internal, so -O3
// inlines it into the entry point and drops it.
LogicalResult addEntryPoint(ModuleOp module) {
  auto kernel = module.lookupSymbol<LLVM::LLVMFuncOp>(kKernelName);
  if (!kernel)
    return module.emitError() << "expected a lowered @" << kKernelName;
  LLVM::LLVMFunctionType kernelType = kernel.getFunctionType();
  MLIRContext *context = module.getContext();
  auto ptrType = LLVM::LLVMPointerType::get(context);
  auto i64 = IntegerType::get(context, 64);
  unsigned numParams = kernelType.getNumParams();
  if (numParams < 2 || kernelType.getParamType(numParams - 1) != i64 ||
      kernelType.getParamType(numParams - 2) != i64)
    return kernel.emitError()
           << "expected @" << kKernelName
           << " to end with two i64 (part, parts) parameters, found "
           << kernelType;
  kernel.setLinkage(LLVM::Linkage::Internal);

  Location loc = kernel.getLoc();
  OpBuilder b(context);
  b.setInsertionPointToEnd(module.getBody());
  auto entryType = LLVM::LLVMFunctionType::get(
      LLVM::LLVMVoidType::get(context), {ptrType, i64, i64});
  auto entry = b.create<LLVM::LLVMFuncOp>(loc, kCpuKernelEntryPoint, entryType);
  Block *check = entry.addEntryBlock(b);
  Block *call = b.createBlock(&entry.getBody());
  Block *done = b.createBlock(&entry.getBody());
  Value buffers = check->getArgument(0);
  Value part = check->getArgument(1);
  Value parts = check->getArgument(2);

  b.setInsertionPointToEnd(check);
  Value zero = b.create<LLVM::ConstantOp>(loc, i64, b.getI64IntegerAttr(0));
  Value notNegative =
      b.create<LLVM::ICmpOp>(loc, LLVM::ICmpPredicate::sge, part, zero);
  Value belowParts =
      b.create<LLVM::ICmpOp>(loc, LLVM::ICmpPredicate::slt, part, parts);
  Value valid = b.create<LLVM::AndOp>(loc, notNegative, belowParts);
  b.create<LLVM::CondBrOp>(loc, valid, call, done);

  b.setInsertionPointToEnd(call);
  SmallVector<Value> operands;
  for (unsigned i = 0; i + 2 < numParams; ++i) {
    if (kernelType.getParamType(i) != ptrType)
      return kernel.emitError() << "expected parameter " << i << " of @"
                                << kKernelName << " to be a pointer, found "
                                << kernelType.getParamType(i);
    Value slot = b.create<LLVM::GEPOp>(loc, ptrType, ptrType, buffers,
                                       ArrayRef<LLVM::GEPArg>{int32_t(i)});
    operands.push_back(b.create<LLVM::LoadOp>(loc, ptrType, slot));
  }
  operands.push_back(part);
  operands.push_back(parts);
  b.create<LLVM::CallOp>(loc, kernel, operands);
  b.create<LLVM::BrOp>(loc, ValueRange{}, done);

  b.setInsertionPointToEnd(done);
  b.create<LLVM::ReturnOp>(loc, ValueRange{});
  return success();
}

// CPU hooks: inputs are the kernel's memref arguments; non-splat constants
// become private memref.globals.
// A kernel buffer's memref: i1 elements as i8 (the kernel ABI's one byte
// holding 0 or 1). As i1 memory LLVM loads and stores them one at a time
// (a vector of i1 in memory is packed bits), which kept a batch norm's
// ReLU masks out of the vectorized loops.
MemRefType memrefOf(RankedTensorType type) {
  Type element = type.getElementType();
  if (element.isInteger(1))
    element = IntegerType::get(type.getContext(), 8);
  return MemRefType::get(type.getShape(), element);
}

// A loaded element as the fusion's value of |type| (i8 -> i1: nonzero).
Value fromStorage(OpBuilder &b, Location loc, Value loaded, Type type) {
  if (!type.isInteger(1))
    return loaded;
  Value zero = b.create<arith::ConstantIntOp>(loc, 0, 8);
  return b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ne, loaded, zero);
}

// Stores the fusion's value |v| as an element of |buffer| (i1 -> i8).
void storeElement(OpBuilder &b, Location loc, Value v, Value buffer,
                  ValueRange indices) {
  if (v.getType().isInteger(1) &&
      cast<MemRefType>(buffer.getType()).getElementType().isInteger(8))
    v = b.create<arith::ExtUIOp>(loc, b.getI8Type(), v);
  b.create<memref::StoreOp>(loc, v, buffer, indices);
}

class CpuHooks : public KernelHooks {
public:
  CpuHooks(ModuleOp module, ValueRange inputs,
           ArrayRef<RankedTensorType> inputTypes)
      : inputs_(inputs.begin(), inputs.end()),
        inputTypes_(inputTypes.begin(), inputTypes.end()), constants_(module) {}

  Value loadInput(OpBuilder &b, Location loc, unsigned input,
                  ValueRange indices) override {
    Value v = b.create<memref::LoadOp>(loc, inputs_[input], indices);
    return fromStorage(b, loc, v, inputTypes_[input].getElementType());
  }

  // One thread sums a reduction's elements in order (KernelHooks says why).
  bool wideSums() const override { return true; }
  bool hoistLoopInvariants() const override { return true; }

  Value loadConstant(OpBuilder &b, Location loc, ConstantOp constant,
                     ValueRange indices) override {
    return constants_.load(b, loc, constant, indices);
  }

  // A stack array at the kernel function's entry (an alloca inside the
  // row loops would take more stack each row).
  Value partialResults(OpBuilder &b, Location loc, Type type,
                       int64_t count) override {
    auto func = b.getInsertionBlock()->getParent()->getParentOfType<func::FuncOp>();
    OpBuilder entry = OpBuilder::atBlockBegin(&func.getBody().front());
    return entry.create<memref::AllocaOp>(loc, MemRefType::get({count}, type));
  }

private:
  SmallVector<Value> inputs_;
  SmallVector<RankedTensorType> inputTypes_;
  ConstantGlobals constants_;
};

void loadKernelDialects(MLIRContext *context) {
  DialectRegistry registry;
  registerBuiltinDialectTranslation(registry);
  registerLLVMDialectTranslation(registry);
  context->appendDialectRegistry(registry);
  context->loadDialect<arith::ArithDialect, math::MathDialect,
                       memref::MemRefDialect, scf::SCFDialect,
                       func::FuncDialect, cf::ControlFlowDialect,
                       LLVM::LLVMDialect>();
}

bool signatureOf(RankedTensorType type, BufferSignature &signature) {
  if (!dtypeOfTensor(type, signature.dtype))
    return false;
  signature.shape.assign(type.getShape().begin(), type.getShape().end());
  return true;
}

std::string describe(const BufferSignature &s) {
  std::string text = "tensor<";
  for (int64_t d : s.shape)
    text += std::to_string(d) + "x";
  return text + dtypeName(s.dtype) + ">";
}

std::string describe(const HostTensor &t) {
  return describe(BufferSignature{t.dtype(), llvm::SmallVector<int64_t, 4>(t.shape())});
}

bool matches(const BufferSignature &s, const HostTensor &t) {
  return s.dtype == t.dtype() && llvm::ArrayRef<int64_t>(s.shape) == t.shape();
}

// Lanes per column-reduction tile: the reduced loops read this many
// consecutive elements of each row.
constexpr int64_t kColumnTile = 128;

// Calls |visit| on each op that |nest|'s results are computed from (once
// each) until it returns false; false then.
bool walkNestOps(const LoopNest &nest, YieldOp yield,
                 llvm::function_ref<bool(Operation *)> visit) {
  llvm::SmallPtrSet<Operation *, 16> seen;
  SmallVector<Value> work;
  for (unsigned result : nest.results)
    work.push_back(yield.getOperand(result));
  while (!work.empty()) {
    Operation *op = work.pop_back_val().getDefiningOp();
    if (!op || !seen.insert(op).second)
      continue;
    if (!visit(op))
      return false;
    work.append(op->operand_begin(), op->operand_end());
  }
  return true;
}

// The column reductions (ElementEmitter::isColumnReduction) and scatter_adds
// with a rank >= 2 result that nest |nest|'s results reach and whose result
// has the nest's shape, so the nest asks for them at exactly its own
// indices.
SmallVector<Operation *> columnReductionsOf(const LoopNest &nest,
                                            YieldOp yield) {
  SmallVector<Operation *> found;
  walkNestOps(nest, yield, [&](Operation *op) {
    auto reduce = dyn_cast<ReduceOp>(op);
    auto scatter = dyn_cast<ScatterAddOp>(op);
    if (((reduce && ElementEmitter::isColumnReduction(reduce)) ||
         (scatter && ElementEmitter::isTiledScatter(scatter))) &&
        cast<RankedTensorType>(op->getResult(0).getType()).getShape() ==
            ArrayRef<int64_t>(nest.shape))
      found.push_back(op);
    return true;
  });
  return found;
}

// Whether the elements of |nest|'s results can each be built alone at their
// indices inside another loop: no reduction, scatter or pooling (which
// build loops of their own) reaches them.
bool elementwiseOnly(const LoopNest &nest, YieldOp yield) {
  return walkNestOps(nest, yield, [](Operation *op) {
    return !isa<ReduceOp, ScatterAddOp, MaxPool2DOp, MaxPool2DGradOp>(op);
  });
}

// The nests that ride on a column reduction of another nest: a nest of
// the reduction's operand shape whose results are elementwiseOnly (the
// gradient [N, C] beside its bias gradient, the sum over N). Its elements
// are stored where the reduction's tile builds each operand element, from
// the same values, so the fusion's inputs are read once for both results
// instead of once per nest. The tiles visit every operand element once
// (the reduced loops run whole in each tile), and a part's tiles visit
// the elements of its own rows. Map: the column reduction to its rider.
llvm::DenseMap<Operation *, const LoopNest *>
columnRiders(const KernelModel &model, YieldOp yield,
             ArrayRef<SmallVector<Operation *>> columns) {
  llvm::DenseMap<Operation *, const LoopNest *> riders;
  llvm::SmallPtrSet<const LoopNest *, 4> taken;
  for (auto [r, nest] : llvm::enumerate(model.nests))
    for (Operation *op : columns[r]) {
      auto reduce = dyn_cast<ReduceOp>(op);
      if (!reduce)
        continue;
      ArrayRef<int64_t> operand =
          cast<RankedTensorType>(reduce.getOperand().getType()).getShape();
      for (auto [e, rider] : llvm::enumerate(model.nests))
        if (e != r && columns[e].empty() && !taken.count(&rider) &&
            ArrayRef<int64_t>(rider.shape) == operand &&
            elementwiseOnly(rider, yield)) {
          riders[op] = &rider;
          taken.insert(&rider);
          break;
        }
    }
  return riders;
}

// A nest whose results use column reductions: the outer dimensions loop as
// usual (the outermost split into parts; for a rank-1 nest the tiles cover
// the part's range), the last dimension walks tiles of kColumnTile elements.
// Per tile, each column reduction accumulates all its lanes into a stack
// buffer (rows outside, lanes inside: contiguous reads that vectorize),
// storing its rider's results (columnRiders) at each element, and each
// scatter_add scans its indices once, adding matching updates' lanes; then
// a loop over the lanes emits the results with those values.
void buildColumnTiledNest(
    OpBuilder &b, Location loc, const KernelModel &model, const LoopNest &nest,
    ArrayRef<Operation *> columns,
    const llvm::DenseMap<Operation *, const LoopNest *> &riders,
    KernelHooks &hooks, YieldOp yield, ValueRange args, unsigned numInputs,
    Value part, Value parts) {
  SmallVector<Value> buffers;
  for (Operation *op : columns)
    buffers.push_back(b.create<memref::AllocaOp>(
        loc, MemRefType::get({kColumnTile},
                             ElementEmitter::tileAccumulatorType(
                                 op, hooks.wideSums()))));
  Value zero = b.create<arith::ConstantIndexOp>(loc, 0);
  Value one = b.create<arith::ConstantIndexOp>(loc, 1);
  auto range = [&](int64_t extent, Value &lo, Value &hi) {
    Value e = b.create<arith::ConstantIndexOp>(loc, extent);
    lo = b.create<arith::DivUIOp>(loc, b.create<arith::MulIOp>(loc, e, part),
                                  parts);
    hi = b.create<arith::DivUIOp>(
        loc,
        b.create<arith::MulIOp>(loc, e,
                                b.create<arith::AddIOp>(loc, part, one)),
        parts);
  };
  SmallVector<Value> lbs, ubs, steps;
  ArrayRef<int64_t> shape = nest.shape;
  for (int64_t extent : shape.drop_back()) {
    lbs.push_back(zero);
    ubs.push_back(b.create<arith::ConstantIndexOp>(loc, extent));
    steps.push_back(one);
  }
  Value lastLo = zero;
  Value lastHi = b.create<arith::ConstantIndexOp>(loc, shape.back());
  if (shape.size() == 1)
    range(shape.back(), lastLo, lastHi);
  else
    range(shape.front(), lbs.front(), ubs.front());
  scf::buildLoopNest(
      b, loc, lbs, ubs, steps, [&](OpBuilder &nb, Location nloc, ValueRange outer) {
        Value tile = nb.create<arith::ConstantIndexOp>(nloc, kColumnTile);
        auto tiles = nb.create<scf::ForOp>(nloc, lastLo, lastHi, tile);
        OpBuilder::InsertionGuard guard(nb);
        nb.setInsertionPoint(tiles.getBody()->getTerminator());
        Value start = tiles.getInductionVar();
        Value size = nb.create<arith::MinSIOp>(
            nloc, tile, nb.create<arith::SubIOp>(nloc, lastHi, start));
        auto loadFrom = [](Value buffer) {
          return [buffer](OpBuilder &lb, Location l, Value lane) -> Value {
            return lb.create<memref::LoadOp>(l, buffer, lane);
          };
        };
        {
          ElementEmitter tileEmitter(model, hooks, nb);
          for (auto [reduce, buffer] : llvm::zip(columns, buffers)) {
            auto load = loadFrom(buffer);
            auto store = [buffer = buffer](OpBuilder &sb, Location l, Value lane,
                                           Value v) {
              sb.create<memref::StoreOp>(l, v, buffer, lane);
            };
            const LoopNest *rider = riders.lookup(reduce);
            auto visit = [&](ValueRange indices) {
              for (unsigned result : rider->results)
                storeElement(
                    nb, nloc,
                    tileEmitter.emit(yield.getOperand(result), indices),
                    args[numInputs + result], indices);
            };
            tileEmitter.emitTile(reduce, outer, start, size, load, store,
                                 rider ? ElementEmitter::ElementVisit(visit)
                                       : nullptr);
          }
        }
        Value laneZero = nb.create<arith::ConstantIndexOp>(nloc, 0);
        Value laneOne = nb.create<arith::ConstantIndexOp>(nloc, 1);
        auto lanes = nb.create<scf::ForOp>(nloc, laneZero, size, laneOne);
        nb.setInsertionPoint(lanes.getBody()->getTerminator());
        Value lane = lanes.getInductionVar();
        SmallVector<Value> ivs(outer.begin(), outer.end());
        ivs.push_back(nb.create<arith::AddIOp>(nloc, start, lane));
        ElementEmitter emitter(model, hooks, nb);
        for (auto [reduce, buffer] : llvm::zip(columns, buffers))
          emitter.seedTile(reduce, ivs, lane, loadFrom(buffer));
        for (unsigned result : nest.results) {
          Value v = emitter.emit(yield.getOperand(result), ivs);
          storeElement(nb, nloc, v, args[numInputs + result], ivs);
        }
      });
}

} // namespace

// The dimensions of |nest| that index a reduction's result in its elements:
// the dims of each nest-shaped kiln.broadcast_in_dim of a value computed
// from a kiln.reduce (a batch norm's per-channel mean spread over [N, C, H,
// W]: dimension 1). Looping over them outermost builds each reduction once
// per element of them: ElementEmitter hoists a reduction out of every loop
// its indices do not depend on, so under a loop over N it would be built
// again for each of the N images.
SmallVector<int64_t> reductionIndexDims(const LoopNest &nest, YieldOp yield) {
  llvm::DenseMap<Value, bool> fromReduce;
  std::function<bool(Value)> reaches = [&](Value v) -> bool {
    auto it = fromReduce.find(v);
    if (it != fromReduce.end())
      return it->second;
    Operation *def = v.getDefiningOp();
    bool found = def && (isa<ReduceOp>(def) ||
                         llvm::any_of(def->getOperands(), reaches));
    fromReduce[v] = found;
    return found;
  };
  llvm::SmallSetVector<int64_t, 4> dims;
  llvm::DenseSet<Operation *> seen;
  SmallVector<Value> work;
  for (unsigned result : nest.results)
    work.push_back(yield.getOperand(result));
  while (!work.empty()) {
    Operation *def = work.pop_back_val().getDefiningOp();
    if (!def || isa<ReduceOp>(def) || !seen.insert(def).second)
      continue;
    if (auto broadcast = dyn_cast<BroadcastInDimOp>(def)) {
      auto type = cast<RankedTensorType>(broadcast.getType());
      if (type.getShape() == ArrayRef<int64_t>(nest.shape) &&
          reaches(broadcast.getOperand()))
        for (int64_t d : broadcast.getBroadcastDimensions())
          dims.insert(d);
    }
    work.append(def->operand_begin(), def->operand_end());
  }
  SmallVector<int64_t> sorted(dims.begin(), dims.end());
  llvm::sort(sorted);
  return sorted;
}

FailureOr<OwningOpRef<ModuleOp>> buildLoopKernelModule(FusionOp fusion) {
  FailureOr<KernelModel> model = buildKernelModel(fusion);
  if (failed(model))
    return failure();
  MLIRContext *context = fusion.getContext();
  loadKernelDialects(context);
  Location loc = fusion.getLoc();
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  OpBuilder b(context);
  b.setInsertionPointToEnd(module->getBody());

  SmallVector<Type> argTypes;
  for (RankedTensorType type : model->inputs)
    argTypes.push_back(memrefOf(type));
  for (RankedTensorType type : model->outputs)
    argTypes.push_back(memrefOf(type));
  argTypes.push_back(b.getIndexType()); // part
  argTypes.push_back(b.getIndexType()); // parts
  auto func = b.create<func::FuncOp>(loc, kKernelName,
                                     b.getFunctionType(argTypes, {}));
  Block *entry = func.addEntryBlock();
  b.setInsertionPointToStart(entry);
  ValueRange args = entry->getArguments();
  unsigned numInputs = model->inputs.size();
  CpuHooks hooks(*module, args.take_front(numInputs), model->inputs);
  auto yield = cast<YieldOp>(fusion.getBody().front().getTerminator());

  // Threading: the nests only read the fusion's inputs (and constants); no
  // nest reads another's outputs, since ElementEmitter recomputes every body
  // value from the block arguments (KernelModel.h). So every element of every
  // output can be computed by any part independently, and each nest's
  // outermost loop is split into |parts| contiguous ranges, part |part|
  // running [extent * part / parts, extent * (part + 1) / parts). A rank-0
  // nest runs in part 0 only.
  Value part = args[args.size() - 2];
  Value parts = args[args.size() - 1];
  Value zero = b.create<arith::ConstantIndexOp>(loc, 0);
  Value one = b.create<arith::ConstantIndexOp>(loc, 1);
  SmallVector<SmallVector<Operation *>> columns;
  for (const LoopNest &nest : model->nests)
    columns.push_back(nest.shape.empty() ? SmallVector<Operation *>()
                                         : columnReductionsOf(nest, yield));
  llvm::DenseMap<Operation *, const LoopNest *> riders =
      columnRiders(*model, yield, columns);
  llvm::SmallPtrSet<const LoopNest *, 4> riding;
  for (auto &[reduce, rider] : riders)
    riding.insert(rider);
  for (size_t nestIndex = 0; nestIndex < model->nests.size(); ++nestIndex) {
    const LoopNest &nest = model->nests[nestIndex];
    if (riding.count(&nest))
      continue; // stored by the column reduction it rides on
    auto buildBody = [&](OpBuilder &nb, Location nloc, ValueRange ivs) {
      ElementEmitter emitter(*model, hooks, nb);
      emitter.enableSiblingReductions(nest.results);
      for (unsigned result : nest.results) {
        Value v = emitter.emit(yield.getOperand(result), ivs);
        storeElement(nb, nloc, v, args[numInputs + result], ivs);
      }
    };
    if (nest.shape.empty()) {
      Value first = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::eq,
                                            part, zero);
      auto ifOp = b.create<scf::IfOp>(loc, first, /*withElseRegion=*/false);
      OpBuilder nb = ifOp.getThenBodyBuilder();
      buildBody(nb, loc, {});
      continue;
    }
    if (!columns[nestIndex].empty()) {
      buildColumnTiledNest(b, loc, *model, nest, columns[nestIndex], riders,
                           hooks, yield, args, numInputs, part, parts);
      continue;
    }
    // Loop order: the dimensions that index a reduction first
    // (reductionIndexDims), then the others in order; order[k] is the nest
    // dimension of loop k.
    SmallVector<int64_t> order = reductionIndexDims(nest, yield);
    for (int64_t d = 0, e = nest.shape.size(); d < e; ++d)
      if (!llvm::is_contained(order, d))
        order.push_back(d);
    SmallVector<Value> lbs, ubs, steps;
    for (int64_t d : order) {
      lbs.push_back(zero);
      ubs.push_back(b.create<arith::ConstantIndexOp>(loc, nest.shape[d]));
      steps.push_back(one);
    }
    // The outermost range of this part (extents and part counts are far
    // below 2^31, so extent * (part + 1) does not overflow 64 bits).
    Value extent = ubs.front();
    Value partEnd = b.create<arith::AddIOp>(loc, part, one);
    lbs.front() = b.create<arith::DivUIOp>(
        loc, b.create<arith::MulIOp>(loc, extent, part), parts);
    ubs.front() = b.create<arith::DivUIOp>(
        loc, b.create<arith::MulIOp>(loc, extent, partEnd), parts);
    scf::buildLoopNest(b, loc, lbs, ubs, steps,
                       [&](OpBuilder &nb, Location nloc, ValueRange loopIvs) {
                         SmallVector<Value, 4> ivs(loopIvs.size());
                         for (auto [k, d] : llvm::enumerate(order))
                           ivs[d] = loopIvs[k];
                         buildBody(nb, nloc, ivs);
                       });
  }
  b.create<func::ReturnOp>(loc);
  if (failed(func.verify()))
    return failure();
  return module;
}

namespace {

// |value| (a scalar attribute) as a constant of |type|, splat when |type|
// is a vector or tensor.
Value splatConstant(PatternRewriter &r, Location loc, Type type,
                    TypedAttr value) {
  Attribute a = value;
  if (auto shaped = dyn_cast<ShapedType>(type))
    a = DenseElementsAttr::get(shaped, a);
  return r.create<arith::ConstantOp>(loc, type, cast<TypedAttr>(a));
}

// f32 sin and cos, vectorizable and accurate to a few ulp relative to the
// result for |x| up to ~2^13 pi: MLIR's polynomial approximation reduces x
// by floor(x / (pi/2)) with one f32 constant, so sin of a small negative x
// (reduced to near pi/2 and taken as -cos) and every result near a zero
// other than 0 keep only an absolute error of ~1e-7 (sqrt(|sin x|) of
// x = -2.8e-4 was off by 1.2e-4 relative). Here, as Cephes' sinf/cosf: k =
// round(x / (pi/2)) and y = x - k pi/2 with pi/2 in three parts (Cody-Waite;
// k pi/2's first two parts are exact in f32), |y| <= pi/4, then sin or cos
// of y by the quadrant k mod 4 (cos x = sin(x + pi/2): quadrant k + 1).
template <typename Op, bool isCos>
struct AccurateSinCos : OpRewritePattern<Op> {
  using OpRewritePattern<Op>::OpRewritePattern;
  LogicalResult matchAndRewrite(Op op, PatternRewriter &r) const override {
    Type type = op.getType();
    if (!getElementTypeOrSelf(type).isF32())
      return r.notifyMatchFailure(op, "f32 only");
    Location loc = op.getLoc();
    Type intType = r.getI32Type();
    if (auto shaped = dyn_cast<ShapedType>(type))
      intType = shaped.clone(intType);
    auto f = [&](double v) {
      return splatConstant(r, loc, type, r.getF32FloatAttr(v));
    };
    auto i = [&](int32_t v) {
      return splatConstant(r, loc, intType, r.getI32IntegerAttr(v));
    };
    auto fma = [&](Value a, Value b, Value c) -> Value {
      return r.create<math::FmaOp>(loc, a, b, c);
    };
    Value x = op.getOperand();
    Value k = r.create<math::RoundEvenOp>(
        loc, r.create<arith::MulFOp>(loc, x, f(0.63661977236758134308)));
    Value negK = r.create<arith::NegFOp>(loc, k);
    Value y = fma(negK, f(1.5703125), x);
    y = fma(negK, f(4.837512969970703125e-4), y);
    y = fma(negK, f(7.54978995489188216e-8), y);
    Value z = r.create<arith::MulFOp>(loc, y, y);
    // sin(y) = y + y z (s1 + z (s2 + z s3)); cos(y) = 1 - z/2 + z^2 (c1 +
    // z (c2 + z c3)) on |y| <= pi/4 (Cephes sinf.c's coefficients).
    Value sinP = fma(fma(f(-1.9515295891e-4), z, f(8.3321608736e-3)), z,
                     f(-1.6666654611e-1));
    Value sinY = fma(r.create<arith::MulFOp>(loc, y, z), sinP, y);
    Value cosP = fma(fma(f(2.443315711809948e-5), z, f(-1.388731625493765e-3)),
                     z, f(4.166664568298827e-2));
    Value cosY = fma(r.create<arith::MulFOp>(loc, z, z), cosP,
                     fma(f(-0.5), z, f(1.0)));
    // The quadrant: k mod 4 (k + 1 for cos) from k's integer value.
    Value q = r.create<arith::FPToSIOp>(loc, intType, k);
    if (isCos)
      q = r.create<arith::AddIOp>(loc, q, i(1));
    Value useCos = r.create<arith::CmpIOp>(
        loc, arith::CmpIPredicate::ne, r.create<arith::AndIOp>(loc, q, i(1)),
        i(0));
    Value negate = r.create<arith::CmpIOp>(
        loc, arith::CmpIPredicate::ne, r.create<arith::AndIOp>(loc, q, i(2)),
        i(0));
    Value v = r.create<arith::SelectOp>(loc, useCos, cosY, sinY);
    v = r.create<arith::SelectOp>(loc, negate, r.create<arith::NegFOp>(loc, v),
                                  v);
    r.replaceOp(op, v);
    return success();
  }
};

// f32 atan to about 2 ulp (MLIR's polynomial approximation is 6 ulp off
// near 0.55): |x| reduced to [0, tan(pi/8)] by atan(a) = pi/4 +
// atan((a - 1) / (a + 1)) above tan(pi/8) and pi/2 - atan(1/a) above
// tan(3 pi/8), then an odd polynomial (Cephes atanf.c's coefficients) and
// the sign copied back (zeros keep theirs; +-infinity gives +-pi/2; NaN
// passes through the selects and the arithmetic).
struct AccurateAtan : OpRewritePattern<math::AtanOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(math::AtanOp op,
                                PatternRewriter &r) const override {
    Type type = op.getType();
    if (!getElementTypeOrSelf(type).isF32())
      return r.notifyMatchFailure(op, "f32 only");
    Location loc = op.getLoc();
    auto f = [&](double v) {
      return splatConstant(r, loc, type, r.getF32FloatAttr(v));
    };
    auto fma = [&](Value a, Value b, Value c) -> Value {
      return r.create<math::FmaOp>(loc, a, b, c);
    };
    auto above = [&](Value a, double v) -> Value {
      return r.create<arith::CmpFOp>(loc, arith::CmpFPredicate::OGT, a, f(v));
    };
    Value x = op.getOperand();
    Value a = r.create<math::AbsFOp>(loc, x);
    Value far = above(a, 2.414213562373095),
          middle = above(a, 0.4142135623730950);
    Value one = f(1.0);
    Value inverse =
        r.create<arith::NegFOp>(loc, r.create<arith::DivFOp>(loc, one, a));
    Value shifted =
        r.create<arith::DivFOp>(loc, r.create<arith::SubFOp>(loc, a, one),
                                r.create<arith::AddFOp>(loc, a, one));
    Value t = r.create<arith::SelectOp>(
        loc, far, inverse, r.create<arith::SelectOp>(loc, middle, shifted, a));
    Value base = r.create<arith::SelectOp>(
        loc, far, f(1.5707963267948966),
        r.create<arith::SelectOp>(loc, middle, f(0.78539816339744831), f(0.0)));
    Value z = r.create<arith::MulFOp>(loc, t, t);
    Value p = fma(fma(fma(f(8.05374449538e-2), z, f(-1.38776856032e-1)), z,
                      f(1.99777106478e-1)),
                  z, f(-3.33329491539e-1));
    Value v = r.create<arith::AddFOp>(
        loc, base, fma(r.create<arith::MulFOp>(loc, p, z), t, t));
    r.replaceOpWithNewOp<math::CopySignOp>(op, v, x);
    return success();
  }
};

// f64 -> bf16 or f16 in one rounding. LLVM lowers that truncation to a
// libcall (__truncdfbf2, __truncdfhf2) the kernels cannot link, and going
// through f32 by round to nearest would round twice. Rounded to f32 to
// odd (the magnitude truncated, its last bit set when inexact), the value
// then rounds to the 8- or 11-bit significand as the f64 itself would;
// arith-expand and LLVM take that f32 truncation.
struct TruncF64ToHalfThroughOdd : OpRewritePattern<arith::TruncFOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(arith::TruncFOp op, PatternRewriter &r) const override {
    Type in = op.getIn().getType(), out = op.getType();
    Type outElement = getElementTypeOrSelf(out);
    if (!getElementTypeOrSelf(in).isF64() || !(outElement.isBF16() || outElement.isF16()))
      return r.notifyMatchFailure(op, "not f64 to bf16 or f16");
    Location loc = op.getLoc();
    auto like = [&](Type element) -> Type {
      if (auto shaped = dyn_cast<ShapedType>(in))
        return shaped.clone(element);
      return element;
    };
    Type f32 = like(r.getF32Type()), i32 = like(r.getI32Type());
    auto constant = [&](Type type, TypedAttr scalar) -> Value {
      Attribute a = scalar;
      if (auto shaped = dyn_cast<ShapedType>(type))
        a = DenseElementsAttr::get(shaped, scalar);
      return r.create<arith::ConstantOp>(loc, type, cast<TypedAttr>(a));
    };
    Value v = op.getIn();
    Value nearest = r.create<arith::TruncFOp>(loc, f32, v);
    Value back = r.create<arith::ExtFOp>(loc, in, nearest);
    Value inexact = r.create<arith::CmpFOp>(loc, arith::CmpFPredicate::ONE, back, v);
    Value positive = r.create<arith::CmpFOp>(loc, arith::CmpFPredicate::OGE, v,
                                             constant(in, r.getF64FloatAttr(0.0)));
    Value up = r.create<arith::SelectOp>(
        loc, positive, r.create<arith::CmpFOp>(loc, arith::CmpFPredicate::OGT, back, v),
        r.create<arith::CmpFOp>(loc, arith::CmpFPredicate::OLT, back, v));
    Value one = constant(i32, r.getI32IntegerAttr(1));
    Value bits = r.create<arith::BitcastOp>(loc, i32, nearest);
    bits = r.create<arith::SelectOp>(loc, up, r.create<arith::SubIOp>(loc, bits, one), bits);
    bits = r.create<arith::SelectOp>(loc, inexact, r.create<arith::OrIOp>(loc, bits, one),
                                     bits);
    Value odd = r.create<arith::BitcastOp>(loc, f32, bits);
    r.replaceOpWithNewOp<arith::TruncFOp>(op, out, odd);
    return success();
  }
};

} // namespace

LogicalResult lowerKernelModuleToLLVM(ModuleOp module) {
  // f32 sin, cos and atan first (AccurateSinCos, AccurateAtan above) and f64 ->
  // bf16/f16 through f32 rounded to odd (TruncF64ToHalfThroughOdd), then the
  // other f32 transcendentals (exp, log, tanh, erf, ...) as MLIR's polynomial
  // approximations: plain arith that LLVM vectorizes, where a libm call or
  // an LLVM intrinsic without a vector math library would be scalarized.
  {
    RewritePatternSet patterns(module.getContext());
    patterns.add<AccurateSinCos<math::SinOp, false>,
                 AccurateSinCos<math::CosOp, true>, AccurateAtan,
                 TruncF64ToHalfThroughOdd>(module.getContext());
    if (failed(applyPatternsAndFoldGreedily(module, std::move(patterns))))
      return failure();
  }
  {
    RewritePatternSet patterns(module.getContext());
    populateMathPolynomialApproximationPatterns(patterns);
    if (failed(applyPatternsAndFoldGreedily(module, std::move(patterns))))
      return failure();
  }
  // f64 log1p and expm1 to libm, before math-to-llvm can take them.
  {
    ConversionTarget target(*module.getContext());
    target.markUnknownOpDynamicallyLegal([](Operation *) { return true; });
    target.addIllegalOp<math::Log1pOp, math::ExpM1Op>();
    RewritePatternSet patterns(module.getContext());
    populateMathToLibmConversionPatterns(patterns);
    if (failed(applyPartialConversion(module, target, std::move(patterns))))
      return failure();
  }
  PassManager pm(module.getContext());
  arith::ArithExpandOpsPassOptions expand;
  expand.includeBf16 = true;
  pm.addPass(arith::createArithExpandOpsPass(expand));
  pm.addPass(createConvertSCFToCFPass());
  pm.addPass(memref::createExpandStridedMetadataPass());
  pm.addPass(createFinalizeMemRefToLLVMConversionPass());
  pm.addPass(createConvertMathToLLVMPass());
  pm.addPass(createConvertMathToLibmPass());
  pm.addPass(createArithToLLVMConversionPass());
  pm.addPass(createConvertControlFlowToLLVMPass());
  ConvertFuncToLLVMPassOptions funcOptions;
  funcOptions.useBarePtrCallConv = true;
  pm.addPass(createConvertFuncToLLVMPass(funcOptions));
  pm.addPass(createReconcileUnrealizedCastsPass());
  if (failed(pm.run(module)))
    return failure();
  return addEntryPoint(module);
}

namespace {

void initializeNativeTarget() {
  static std::once_flag targetsReady;
  std::call_once(targetsReady, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
  });
}

// Marks every innermost loop's memory accesses as free of loop-carried
// dependences (llvm.loop.parallel_accesses), so the vectorizer needs no
// runtime alias checks. True of every loop the kernel builder makes: an
// innermost loop either only reads (reductions, windows, scatter scans) or
// writes its iteration's own elements (a nest's last dimension, a tile's
// lanes, a row reduction's partial results), and an output that shares an
// input's buffer (an in-place update) reads that input only at the element
// it writes (kiln-plan-buffers' rule, which the part/parts split relies on
// too). Without this, LLVM's checks see an in-place update's input and
// output overlap and take the scalar loop.
//
// Each innermost loop is also kept whole until the vectorizer has seen it
// (llvm.loop.unroll.disable, lifted from the loops it makes by
// llvm.loop.vectorize.followup_all). -O3 fully unrolls a short loop before
// it vectorizes: a head transpose's 64-element rows (tensor<8x12x1024x64>
// to <8x1024x12x64>) became 64 scalar copies, and the loop around them,
// now innermost, strides by 64 elements; the vectorizer spent 2.5 s on
// that loop's interleave groups and left 768 scalar loads and stores (one
// kernel took half of GPT-2's CPU package). Kept whole, the row loop
// vectorizes (four 16-lane copies; 0.23 -> 0.07 ms a call) in 12 ms. A
// loop the vectorizer leaves alone (an ordered reduction's partial sums)
// stays rolled, which made the logits' row maximum faster too (84 -> 47
// ms; bench/RESULTS.md).
void markInnermostLoopsParallel(llvm::Module &module) {
  llvm::LLVMContext &context = module.getContext();
  for (llvm::Function &function : module) {
    if (function.isDeclaration())
      continue;
    llvm::DominatorTree dominators(function);
    llvm::LoopInfo loops(dominators);
    for (llvm::Loop *loop : loops.getLoopsInPreorder()) {
      if (!loop->isInnermost())
        continue;
      llvm::MDNode *group = llvm::MDNode::getDistinct(context, {});
      for (llvm::BasicBlock *block : loop->blocks())
        for (llvm::Instruction &inst : *block)
          if (inst.mayReadOrWriteMemory())
            inst.setMetadata(llvm::LLVMContext::MD_access_group, group);
      llvm::SmallVector<llvm::Metadata *, 4> operands = {nullptr};
      if (llvm::MDNode *old = loop->getLoopID())
        for (unsigned i = 1; i < old->getNumOperands(); ++i)
          operands.push_back(old->getOperand(i));
      llvm::MDNode *parallel = llvm::MDNode::get(
          context, {llvm::MDString::get(context, "llvm.loop.parallel_accesses"),
                    group});
      operands.push_back(parallel);
      operands.push_back(llvm::MDNode::get(
          context, {llvm::MDString::get(context, "llvm.loop.unroll.disable")}));
      operands.push_back(llvm::MDNode::get(
          context,
          {llvm::MDString::get(context, "llvm.loop.vectorize.followup_all"),
           parallel}));
      llvm::MDNode *id = llvm::MDNode::getDistinct(context, operands);
      id->replaceOperandWith(0, id);
      loop->setLoopID(id);
    }
  }
}

// bf16 values as their i16 bits: loads, stores and selects of bf16 (scalar
// or vector) become loads, stores and selects of i16. arith-expand leaves
// no bf16 arithmetic, but a bf16 copied from an input to an output is
// loaded and stored as bf16, and InstCombine turns the expanded truncf's
// select of two bit patterns (a quiet NaN or the rounded bits) back into a
// select of bf16 values. x86 without AVX512-BF16 holds a bf16 value as an
// f32 and stores it through a __truncsfbf2 libcall, which no JIT here can
// resolve. The bits are the same value on every host, and nothing is
// converted.
void bf16AsBits(llvm::Module &module) {
  auto isBf16 = [](llvm::Type *type) {
    return type->getScalarType()->isBFloatTy();
  };
  auto bitsOf = [](llvm::Type *type) -> llvm::Type * {
    llvm::Type *bits = llvm::Type::getInt16Ty(type->getContext());
    if (auto *vector = llvm::dyn_cast<llvm::VectorType>(type))
      return llvm::VectorType::get(bits, vector->getElementCount());
    return bits;
  };
  // |v|'s bits: the operand of a bitcast from them, else a new bitcast.
  auto asBits = [&](llvm::IRBuilder<> &b, llvm::Value *v) -> llvm::Value * {
    if (auto *cast = llvm::dyn_cast<llvm::BitCastInst>(v))
      if (cast->getSrcTy() == bitsOf(v->getType()))
        return cast->getOperand(0);
    return b.CreateBitCast(v, bitsOf(v->getType()));
  };
  llvm::SmallVector<llvm::Instruction *> work;
  for (llvm::Function &f : module)
    for (llvm::Instruction &inst : llvm::instructions(f))
      if ((llvm::isa<llvm::LoadInst, llvm::SelectInst>(inst) &&
           isBf16(inst.getType())) ||
          (llvm::isa<llvm::StoreInst>(inst) &&
           isBf16(inst.getOperand(0)->getType())))
        work.push_back(&inst);
  for (llvm::Instruction *inst : work) {
    llvm::IRBuilder<> b(inst);
    if (auto *load = llvm::dyn_cast<llvm::LoadInst>(inst)) {
      llvm::LoadInst *bits = b.CreateAlignedLoad(
          bitsOf(load->getType()), load->getPointerOperand(), load->getAlign(),
          load->isVolatile());
      bits->copyMetadata(*load);
      load->replaceAllUsesWith(b.CreateBitCast(bits, load->getType()));
    } else if (auto *store = llvm::dyn_cast<llvm::StoreInst>(inst)) {
      llvm::StoreInst *bits = b.CreateAlignedStore(
          asBits(b, store->getValueOperand()), store->getPointerOperand(),
          store->getAlign(), store->isVolatile());
      bits->copyMetadata(*store);
    } else {
      auto *select = llvm::cast<llvm::SelectInst>(inst);
      llvm::Value *chosen =
          b.CreateSelect(select->getCondition(),
                         asBits(b, select->getTrueValue()),
                         asBits(b, select->getFalseValue()));
      select->replaceAllUsesWith(b.CreateBitCast(chosen, select->getType()));
    }
    inst->eraseFromParent();
  }
  // Bits cast to bf16 and back: the bits. Users before what they use
  // (blocks and instructions in reverse), so a cast whose last user goes
  // is dead when it is reached.
  for (llvm::Function &f : module)
    for (llvm::BasicBlock &block : llvm::reverse(f))
      for (llvm::Instruction &inst :
           llvm::make_early_inc_range(llvm::reverse(block))) {
        auto *cast = llvm::dyn_cast<llvm::BitCastInst>(&inst);
        if (!cast)
          continue;
        if (auto *inner = llvm::dyn_cast<llvm::BitCastInst>(cast->getOperand(0)))
          if (inner->getSrcTy() == cast->getDestTy())
            cast->replaceAllUsesWith(inner->getOperand(0));
        if (cast->use_empty())
          cast->eraseFromParent();
      }
}

// -O3 for |machine|, after marking the loops parallel and with bf16 values
// as their bits (before -O3, so that no pass makes a bf16 argument of a
// loaded element, and again after it, should a pass make bf16 values
// again).
std::function<llvm::Error(llvm::Module *)>
kernelTransformer(llvm::TargetMachine *machine) {
  auto optimize = makeOptimizingTransformer(3, 0, machine);
  return [optimize](llvm::Module *module) -> llvm::Error {
    markInnermostLoopsParallel(*module);
    bf16AsBits(*module);
    if (llvm::Error error = optimize(module))
      return error;
    bf16AsBits(*module);
    return llvm::Error::success();
  };
}

// A new target machine for the host CPU (one per caller: a TargetMachine
// is not shared between threads).
llvm::Expected<std::unique_ptr<llvm::TargetMachine>> createHostMachine() {
  initializeNativeTarget();
  auto builder = llvm::orc::JITTargetMachineBuilder::detectHost();
  if (!builder)
    return llvm::createStringError("cannot target the host CPU: " +
                                   llvm::toString(builder.takeError()));
  auto machine = builder->createTargetMachine();
  if (!machine)
    return llvm::createStringError("cannot create a target machine: " +
                                   llvm::toString(machine.takeError()));
  return std::move(*machine);
}

FailureOr<std::unique_ptr<llvm::TargetMachine>> hostTargetMachine(FusionOp fusion) {
  auto machine = createHostMachine();
  if (!machine)
    return fusion.emitOpError() << llvm::toString(machine.takeError());
  return std::move(*machine);
}

} // namespace

FailureOr<std::unique_ptr<llvm::Module>>
kernelIR(FusionOp fusion, llvm::LLVMContext &llvmContext) {
  FailureOr<OwningOpRef<ModuleOp>> module = buildLoopKernelModule(fusion);
  if (failed(module))
    return failure();
  if (failed(lowerKernelModuleToLLVM(**module)))
    return fusion.emitOpError() << "failed to lower its CPU kernel to LLVM";
  auto machine = hostTargetMachine(fusion);
  if (failed(machine))
    return failure();
  std::unique_ptr<llvm::Module> llvmModule =
      translateModuleToLLVMIR(**module, llvmContext, "kernel");
  if (!llvmModule)
    return fusion.emitOpError() << "failed to translate its CPU kernel to LLVM IR";
  llvmModule->setTargetTriple((*machine)->getTargetTriple().str());
  llvmModule->setDataLayout((*machine)->createDataLayout());
  return llvmModule;
}

llvm::Error optimizeKernelIR(llvm::Module &module) {
  auto machine = createHostMachine();
  if (!machine)
    return machine.takeError();
  return kernelTransformer(machine->get())(&module);
}

FailureOr<std::unique_ptr<llvm::Module>>
optimizedKernelIR(FusionOp fusion, llvm::LLVMContext &llvmContext) {
  FailureOr<std::unique_ptr<llvm::Module>> llvmModule =
      kernelIR(fusion, llvmContext);
  if (failed(llvmModule))
    return failure();
  if (llvm::Error error = optimizeKernelIR(**llvmModule))
    return fusion.emitOpError() << "LLVM optimization failed: "
                                << llvm::toString(std::move(error));
  return llvmModule;
}

CompiledKernel::CompiledKernel() = default;
CompiledKernel::CompiledKernel(CompiledKernel &&) = default;
CompiledKernel &CompiledKernel::operator=(CompiledKernel &&) = default;
CompiledKernel::~CompiledKernel() = default;

FailureOr<CompiledKernel> compileLoopFusion(FusionOp fusion) {
  CompiledKernel kernel;
  for (Value input : fusion.getInputs()) {
    auto type = dyn_cast<RankedTensorType>(input.getType());
    kernel.inputs_.emplace_back();
    if (!type || !signatureOf(type, kernel.inputs_.back()))
      return fusion.emitOpError()
             << "expected inputs of a supported element type, found "
             << input.getType();
  }
  for (Type result : fusion.getResultTypes()) {
    auto type = dyn_cast<RankedTensorType>(result);
    kernel.outputs_.emplace_back();
    if (!type || !signatureOf(type, kernel.outputs_.back()))
      return fusion.emitOpError()
             << "expected results of a supported element type, found " << result;
  }

  FailureOr<OwningOpRef<ModuleOp>> module = buildLoopKernelModule(fusion);
  if (failed(module))
    return failure();
  if (failed(lowerKernelModuleToLLVM(**module)))
    return fusion.emitOpError() << "failed to lower its CPU kernel to LLVM";

  auto machine = hostTargetMachine(fusion);
  if (failed(machine))
    return failure();
  ExecutionEngineOptions options;
  // ExecutionEngineOptions::transformer is a function_ref: the function it
  // refers to must outlive create().
  std::function<llvm::Error(llvm::Module *)> transformer =
      kernelTransformer(machine->get());
  options.transformer = transformer;
  options.jitCodeGenOptLevel = llvm::CodeGenOptLevel::Aggressive;
  options.enableGDBNotificationListener = false;
  auto engine = ExecutionEngine::create(**module, options, std::move(*machine));
  if (!engine)
    return fusion.emitOpError() << "JIT compilation failed: "
                                << llvm::toString(engine.takeError());
  kernel.engine_ = std::move(*engine);
  kernel.engine_->registerSymbols(runtime::cpu::bf16Libcalls);
  llvm::Expected<void *> entry = kernel.engine_->lookup(kCpuKernelEntryPoint);
  if (!entry)
    return fusion.emitOpError() << "JIT compilation lost the entry point: "
                                << llvm::toString(entry.takeError());
  kernel.entry_ = reinterpret_cast<CompiledKernel::EntryPoint>(*entry);
  return kernel;
}

void CompiledKernel::runRaw(llvm::ArrayRef<void *> buffers) const {
  runRaw(buffers, 0, 1);
}

void CompiledKernel::runRaw(llvm::ArrayRef<void *> buffers, int64_t part,
                            int64_t parts) const {
  SmallVector<void *> pointers(buffers.begin(), buffers.end());
  entry_(pointers.data(), part, parts);
}

void storeNativeElement(DType dtype, double v, uint8_t *out) {
  switch (dtype) {
  case DType::f64: std::memcpy(out, &v, 8); break;
  case DType::f32: { float f = v; std::memcpy(out, &f, 4); break; }
  case DType::f16:
  case DType::bf16: {
    llvm::APFloat value(v);
    bool lost;
    value.convert(dtype == DType::f16 ? llvm::APFloat::IEEEhalf()
                                      : llvm::APFloat::BFloat(),
                  llvm::APFloat::rmNearestTiesToEven, &lost);
    uint16_t bits = value.bitcastToAPInt().getZExtValue();
    std::memcpy(out, &bits, 2);
    break;
  }
  case DType::i64: { int64_t x = v; std::memcpy(out, &x, 8); break; }
  case DType::i32: { int32_t x = v; std::memcpy(out, &x, 4); break; }
  case DType::i8: { int8_t x = v; std::memcpy(out, &x, 1); break; }
  case DType::i1: *out = v != 0.0; break;
  }
}

double loadNativeElement(DType dtype, const uint8_t *in) {
  switch (dtype) {
  case DType::f64: { double v; std::memcpy(&v, in, 8); return v; }
  case DType::f32: { float f; std::memcpy(&f, in, 4); return f; }
  case DType::f16:
  case DType::bf16: {
    uint16_t bits;
    std::memcpy(&bits, in, 2);
    llvm::APFloat value(dtype == DType::f16 ? llvm::APFloat::IEEEhalf()
                                            : llvm::APFloat::BFloat(),
                        llvm::APInt(16, bits));
    bool lost;
    value.convert(llvm::APFloat::IEEEdouble(),
                  llvm::APFloat::rmNearestTiesToEven, &lost);
    return value.convertToDouble();
  }
  case DType::i64: { int64_t x; std::memcpy(&x, in, 8); return x; }
  case DType::i32: { int32_t x; std::memcpy(&x, in, 4); return x; }
  case DType::i8: { int8_t x; std::memcpy(&x, in, 1); return x; }
  case DType::i1: return *in != 0;
  }
  return 0;
}

void toNativeBuffer(const HostTensor &tensor, std::vector<uint8_t> &buffer) {
  int64_t width = byteWidth(tensor.dtype());
  buffer.assign(tensor.size() * width, 0);
  for (int64_t i = 0; i < tensor.size(); ++i)
    storeNativeElement(tensor.dtype(), tensor[i], buffer.data() + i * width);
}

void fromNativeBuffer(const std::vector<uint8_t> &buffer, HostTensor &tensor) {
  int64_t width = byteWidth(tensor.dtype());
  for (int64_t i = 0; i < tensor.size(); ++i)
    tensor[i] = loadNativeElement(tensor.dtype(), buffer.data() + i * width);
}

LogicalResult CompiledKernel::run(llvm::ArrayRef<const HostTensor *> inputs,
                                  llvm::ArrayRef<HostTensor *> outputs,
                                  std::string *error) const {
  auto fail = [&](std::string message) {
    if (error)
      *error = std::move(message);
    return failure();
  };
  if (inputs.size() != inputs_.size() || outputs.size() != outputs_.size())
    return fail("expected " + std::to_string(inputs_.size()) + " inputs and " +
                std::to_string(outputs_.size()) + " outputs, found " +
                std::to_string(inputs.size()) + " and " +
                std::to_string(outputs.size()));
  std::vector<std::vector<uint8_t>> buffers(inputs.size() + outputs.size());
  SmallVector<void *> pointers;
  for (auto [i, input] : llvm::enumerate(inputs)) {
    if (!matches(inputs_[i], *input))
      return fail("input " + std::to_string(i) + ": expected " +
                  describe(inputs_[i]) + ", found " + describe(*input));
    toNativeBuffer(*input, buffers[i]);
  }
  for (auto [i, output] : llvm::enumerate(outputs)) {
    if (!matches(outputs_[i], *output))
      return fail("output " + std::to_string(i) + ": expected " +
                  describe(outputs_[i]) + ", found " + describe(*output));
    buffers[inputs.size() + i].assign(output->size() * byteWidth(output->dtype()), 0);
  }
  for (std::vector<uint8_t> &buffer : buffers)
    pointers.push_back(buffer.data());
  runRaw(pointers);
  for (auto [i, output] : llvm::enumerate(outputs))
    fromNativeBuffer(buffers[inputs.size() + i], *output);
  return success();
}

} // namespace kiln
