//===- KernelModel.cpp - target-neutral model of a fusion kernel ------------===//
//
// Builds the KernelModel of a fusion and the element values of its body (see
// KernelModel.h; kiln.reduce elements are in ReductionEmitter.cpp). Index
// arithmetic is built on `index` values with arith; elementwise computations
// come from buildStoredScalar.
//
//===----------------------------------------------------------------------===//

#include "codegen/KernelModel.h"

#include "ir/ScalarSemantics.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/raw_ostream.h"

#include <atomic>

using namespace mlir;

namespace kiln {

KernelHooks::~KernelHooks() = default;

namespace {

RankedTensorType staticTensor(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor || !tensor.hasStaticShape())
    return {};
  return tensor;
}

bool isModeled(Operation *op) {
  if (isa<ScalarSemantics>(op))
    return true;
  return isa<BroadcastInDimOp, ReshapeOp, TransposeOp, SliceOp, PadOp,
             ConcatenateOp, ConstantOp, IotaOp, ReduceOp, GatherOp,
             ScatterAddOp, MaxPool2DOp, MaxPool2DGradOp, DropoutOp,
             RandomUniformOp, YieldOp>(op);
}

} // namespace

SmallVector<Value, 4> delinearizeIndex(OpBuilder &b, Location loc, Value flat,
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

std::string fusionKey(FusionOp fusion) {
  std::string key;
  llvm::raw_string_ostream os(key);
  // Not the fusion's address: a fusion built and erased (a packing
  // transpose's) may leave it to the next.
  auto unique = [&] {
    static std::atomic<uint64_t> next{0};
    os << "\nunique " << next++;
    return key;
  };
  // The fusion's own discardable attributes (kiln-plan-buffers' offsets)
  // place its buffers; no code generator reads them.
  os << fusion->getName() << ' ' << fusion.getKindAttr();
  DenseMap<Value, unsigned> number;
  Block &body = fusion.getBody().front();
  for (BlockArgument arg : body.getArguments()) {
    number.try_emplace(arg, number.size());
    os << ' ' << arg.getType();
  }
  for (Operation &op : body) {
    if (op.getNumRegions())
      return unique();
    os << '\n' << op.getName() << ' ' << op.getAttrDictionary();
    for (Value operand : op.getOperands()) {
      auto it = number.find(operand);
      if (it == number.end())
        return unique();
      os << " %" << it->second;
    }
    for (Value result : op.getResults()) {
      number.try_emplace(result, number.size());
      os << ' ' << result.getType();
    }
  }
  return key;
}

FailureOr<KernelModel> buildKernelModel(FusionOp fusion) {
  if (fusion.getKind() == FusionKind::gemm)
    return fusion.emitOpError()
           << "expected a `loop`, `reduction`, `multi_output` or `horizontal` "
              "fusion for the CPU kernel model, found `gemm` (GEMM fusions "
              "are not generated as loop kernels)";
  KernelModel model;
  model.fusion = fusion;
  for (Value input : fusion.getInputs()) {
    RankedTensorType type = staticTensor(input.getType());
    if (!type)
      return fusion.emitOpError() << "expected statically shaped inputs, found "
                                  << input.getType();
    model.inputs.push_back(type);
  }
  for (Type result : fusion.getResultTypes()) {
    RankedTensorType type = staticTensor(result);
    if (!type)
      return fusion.emitOpError()
             << "expected statically shaped results, found " << result;
    model.outputs.push_back(type);
  }
  for (Operation &op : fusion.getBody().front()) {
    if (!isModeled(&op))
      return op.emitOpError()
             << "is not supported in a CPU loop kernel (expected an "
                "elementwise op, broadcast_in_dim, reshape, transpose, "
                "slice, pad, concatenate, constant, iota, reduce, gather, "
                "scatter_add, max_pool2d or max_pool2d_grad)";
    for (Type type : op.getResultTypes())
      if (!staticTensor(type))
        return op.emitOpError()
               << "expected a statically shaped result, found " << type;
  }
  for (unsigned i = 0; i < model.outputs.size(); ++i) {
    RankedTensorType type = model.outputs[i];
    auto it = llvm::find_if(model.nests, [&](const LoopNest &nest) {
      return llvm::ArrayRef<int64_t>(nest.shape) == type.getShape();
    });
    if (it == model.nests.end()) {
      model.nests.push_back(LoopNest{});
      it = std::prev(model.nests.end());
      it->shape.assign(type.getShape().begin(), type.getShape().end());
    }
    it->results.push_back(i);
  }
  return model;
}

Value ElementEmitter::indexConstant(Location loc, int64_t v) {
  Value &slot = indexConstants_[v];
  if (!slot)
    slot = b_.create<arith::ConstantIndexOp>(loc, v);
  return slot;
}

Operation *ElementEmitter::hoistPoint(ValueRange indices) {
  Operation *hoistBefore = nullptr;
  for (auto loop = dyn_cast_or_null<scf::ForOp>(b_.getInsertionBlock()->getParentOp());
       loop; loop = dyn_cast_or_null<scf::ForOp>(loop->getParentOp())) {
    if (llvm::any_of(indices, [&](Value index) {
          return !index.getDefiningOp<arith::ConstantIndexOp>() &&
                 loop.getRegion().isAncestor(index.getParentRegion());
        }))
      break;
    hoistBefore = loop;
  }
  return hoistBefore;
}

void ElementEmitter::buildBefore(Operation *hoistBefore, ValueRange indices,
                                 function_ref<void(ValueRange)> build) {
  OpBuilder::InsertionGuard guard(b_);
  b_.setInsertionPoint(hoistBefore);
  // Cached values built inside |hoistBefore| are set aside while building
  // before it, then come back; values built there dominate both places.
  auto inside = [&](Value v) {
    return hoistBefore->isAncestor(v.getParentRegion()->getParentOp());
  };
  std::map<std::vector<void *>, Value> insideCache;
  for (auto it = cache_.begin(); it != cache_.end();) {
    if (inside(it->second)) {
      insideCache.insert(*it);
      it = cache_.erase(it);
    } else {
      ++it;
    }
  }
  llvm::DenseMap<int64_t, Value> insideConstants;
  for (auto [v, c] : indexConstants_)
    if (inside(c))
      insideConstants[v] = c;
  for (auto [v, c] : insideConstants)
    indexConstants_.erase(v);
  // Constant indices are rebuilt at the hoisted point.
  SmallVector<Value, 4> hoisted;
  for (Value index : indices) {
    auto constant = index.getDefiningOp<arith::ConstantIndexOp>();
    hoisted.push_back(constant ? indexConstant(hoistBefore->getLoc(), constant.value())
                               : index);
  }
  build(hoisted);
  cache_.insert(insideCache.begin(), insideCache.end());
  for (auto [v, c] : insideConstants)
    indexConstants_.try_emplace(v, c);
}

Value ElementEmitter::emit(Value value, ValueRange indices) {
  std::vector<void *> key;
  key.push_back(value.getAsOpaquePointer());
  for (Value index : indices)
    key.push_back(index.getAsOpaquePointer());
  auto it = cache_.find(key);
  if (it != cache_.end())
    return it->second;
  // A rank-0 value does not depend on any loop: build it once, before the
  // nest's outermost loop, rather than once per element (an optimizer's
  // bias corrections are pow and sqrt of the step; LLVM cannot hoist their
  // loads itself, since the kernel's output stores may alias any input as
  // far as it knows). Reading it early keeps the fusion's meaning: every
  // read sees the inputs as they were before the kernel.
  if (indices.empty()) {
    Operation *outermost = nullptr;
    for (Operation *op = b_.getInsertionBlock()->getParentOp();
         op && isa<scf::ForOp, scf::IfOp>(op); op = op->getParentOp())
      if (isa<scf::ForOp>(op))
        outermost = op;
    if (outermost) {
      OpBuilder::InsertionGuard guard(b_);
      b_.setInsertionPoint(outermost);
      // Index constants cached inside the loops do not dominate this point.
      llvm::DenseMap<int64_t, Value> constants = std::move(indexConstants_);
      indexConstants_.clear();
      Value result = emitUncached(value, indices);
      indexConstants_ = std::move(constants);
      cache_[key] = result;
      return result;
    }
  }
  // A value that the innermost loops do not index is built before them
  // where the target asks (KernelHooks::hoistLoopInvariants): a batch
  // norm's per-channel scale once per channel. Reading an input earlier
  // keeps the fusion's meaning, as above.
  if (!indices.empty() && hooks_.hoistLoopInvariants() &&
      !value.getDefiningOp<ConstantOp>()) {
    if (Operation *hoistBefore = hoistPoint(indices)) {
      Value result;
      buildBefore(hoistBefore, indices, [&](ValueRange hoisted) {
        result = emitUncached(value, hoisted);
      });
      cache_[key] = result;
      return result;
    }
  }
  Value result = emitUncached(value, indices);
  cache_[key] = result;
  return result;
}

// Maps result |indices| of a reshape (shape |toShape|) to operand indices
// (shape |fromShape|): dimensions shared at the front and at the back pass
// through; the middle is linearized and delinearized.
SmallVector<Value, 4>
ElementEmitter::reshapeIndices(Location loc, ArrayRef<int64_t> fromShape,
                               ArrayRef<int64_t> toShape, ValueRange indices) {
  size_t prefix = 0;
  while (prefix < fromShape.size() && prefix < toShape.size() &&
         fromShape[prefix] == toShape[prefix])
    ++prefix;
  size_t suffix = 0;
  while (suffix + prefix < fromShape.size() && suffix + prefix < toShape.size() &&
         fromShape[fromShape.size() - 1 - suffix] ==
             toShape[toShape.size() - 1 - suffix])
    ++suffix;
  SmallVector<Value, 4> mapped(indices.begin(), indices.begin() + prefix);
  // Linearize the middle of the result indices.
  Value linear = indexConstant(loc, 0);
  for (size_t d = prefix; d + suffix < toShape.size(); ++d) {
    if (toShape[d] == 1)
      continue;
    Value scaled = b_.create<arith::MulIOp>(loc, linear,
                                            indexConstant(loc, toShape[d]));
    linear = b_.create<arith::AddIOp>(loc, scaled, indices[d]);
  }
  // Delinearize over the middle of the operand shape, innermost first.
  size_t middleEnd = fromShape.size() - suffix;
  SmallVector<Value, 4> middle(middleEnd - prefix);
  for (size_t d = middleEnd; d-- > prefix;) {
    if (fromShape[d] == 1) {
      middle[d - prefix] = indexConstant(loc, 0);
      continue;
    }
    Value extent = indexConstant(loc, fromShape[d]);
    bool outermost = true;
    for (size_t e = prefix; e < d; ++e)
      outermost &= fromShape[e] == 1;
    if (outermost) {
      middle[d - prefix] = linear;
      continue;
    }
    middle[d - prefix] = b_.create<arith::RemUIOp>(loc, linear, extent);
    linear = b_.create<arith::DivUIOp>(loc, linear, extent);
  }
  mapped.append(middle.begin(), middle.end());
  for (Value index : indices.drop_front(indices.size() - suffix))
    mapped.push_back(index);
  return mapped;
}

Value ElementEmitter::clamp(Location loc, Value index, int64_t extent) {
  Value low = b_.create<arith::MaxSIOp>(loc, index, indexConstant(loc, 0));
  return b_.create<arith::MinSIOp>(loc, low, indexConstant(loc, extent - 1));
}

Value ElementEmitter::emitUncached(Value value, ValueRange indices) {
  if (auto arg = dyn_cast<BlockArgument>(value))
    return hooks_.loadInput(b_, arg.getLoc(), arg.getArgNumber(), indices);
  Operation *op = value.getDefiningOp();
  Location loc = op->getLoc();
  if (auto scalar = dyn_cast<ScalarSemantics>(op)) {
    SmallVector<Value> operands;
    for (Value operand : op->getOperands())
      operands.push_back(emit(operand, indices));
    return buildStoredScalar(scalar, b_, loc, operands);
  }
  return llvm::TypeSwitch<Operation *, Value>(op)
      .Case([&](ReduceOp reduce) { return emitReduce(reduce, indices); })
      .Case([&](GatherOp gather) { return emitGather(gather, indices); })
      .Case([&](ScatterAddOp scatter) { return emitScatterAdd(scatter, indices); })
      .Case([&](MaxPool2DOp pool) { return emitMaxPool(pool, indices); })
      .Case([&](DropoutOp dropout) { return emitDropout(dropout, indices); })
      .Case([&](RandomUniformOp random) { return emitRandomUniform(random, indices); })
      .Case([&](MaxPool2DGradOp grad) { return emitMaxPoolGrad(grad, indices); })
      .Case([&](BroadcastInDimOp broadcast) {
        auto operandType = cast<RankedTensorType>(broadcast.getOperand().getType());
        SmallVector<Value, 4> mapped;
        for (auto [i, dim] : llvm::enumerate(broadcast.getBroadcastDimensions()))
          mapped.push_back(operandType.getDimSize(i) == 1 ? indexConstant(loc, 0)
                                                          : indices[dim]);
        return emit(broadcast.getOperand(), mapped);
      })
      .Case([&](TransposeOp transpose) {
        ArrayRef<int64_t> permutation = transpose.getPermutation();
        SmallVector<Value, 4> mapped(permutation.size());
        for (auto [i, p] : llvm::enumerate(permutation))
          mapped[p] = indices[i];
        return emit(transpose.getOperand(), mapped);
      })
      .Case([&](SliceOp slice) {
        // o[d] = start[d] + r[d] * stride[d].
        SmallVector<Value, 4> mapped;
        for (auto [d, index] : llvm::enumerate(indices)) {
          int64_t start = slice.getStartIndices()[d];
          int64_t stride = slice.getStrides()[d];
          Value o = index;
          if (stride != 1)
            o = b_.create<arith::MulIOp>(loc, o, indexConstant(loc, stride));
          if (start != 0)
            o = b_.create<arith::AddIOp>(loc, o, indexConstant(loc, start));
          mapped.push_back(o);
        }
        return emit(slice.getOperand(), mapped);
      })
      .Case([&](PadOp pad) {
        // o[d] = r[d] - low[d]; outside the operand, the padding value. The
        // operand is read at clamped indices so every read is in bounds.
        auto operandType = cast<RankedTensorType>(pad.getOperand().getType());
        SmallVector<Value, 4> mapped;
        Value inside;
        for (auto [d, index] : llvm::enumerate(indices)) {
          int64_t low = pad.getEdgePaddingLow()[d];
          int64_t high = pad.getEdgePaddingHigh()[d];
          int64_t extent = operandType.getDimSize(d);
          if (low == 0 && high == 0) {
            mapped.push_back(index);
            continue;
          }
          Value o = low == 0 ? index
                             : b_.create<arith::SubIOp>(loc, index,
                                                        indexConstant(loc, low));
          Value above = b_.create<arith::CmpIOp>(loc, arith::CmpIPredicate::sge, o,
                                                 indexConstant(loc, 0));
          Value below = b_.create<arith::CmpIOp>(loc, arith::CmpIPredicate::slt, o,
                                                 indexConstant(loc, extent));
          Value here = b_.create<arith::AndIOp>(loc, above, below);
          inside = inside ? b_.create<arith::AndIOp>(loc, inside, here) : here;
          mapped.push_back(extent == 0 ? indexConstant(loc, 0) : clamp(loc, o, extent));
        }
        Type element = operandType.getElementType();
        Value padding = convertScalar(
            b_, loc, b_.create<arith::ConstantOp>(loc, pad.getPaddingValueAttr()),
            element);
        if (!inside)
          return emit(pad.getOperand(), mapped);
        if (operandType.getNumElements() == 0)
          return padding;
        Value value = emit(pad.getOperand(), mapped);
        return b_.create<arith::SelectOp>(loc, inside, value, padding).getResult();
      })
      .Case([&](ConcatenateOp concat) {
        // Each input at its clamped local index; the last input whose
        // offset is not above r[dim] wins.
        int64_t dim = concat.getDimension();
        Value acc;
        int64_t offset = 0;
        for (Value input : concat.getInputs()) {
          int64_t extent = cast<RankedTensorType>(input.getType()).getDimSize(dim);
          if (extent == 0)
            continue;
          SmallVector<Value, 4> mapped(indices.begin(), indices.end());
          Value local = offset == 0 ? indices[dim]
                                    : b_.create<arith::SubIOp>(
                                          loc, indices[dim], indexConstant(loc, offset));
          mapped[dim] = clamp(loc, local, extent);
          Value value = emit(input, mapped);
          if (!acc) {
            acc = value;
          } else {
            Value past = b_.create<arith::CmpIOp>(loc, arith::CmpIPredicate::sge,
                                                  indices[dim],
                                                  indexConstant(loc, offset));
            acc = b_.create<arith::SelectOp>(loc, past, value, acc);
          }
          offset += extent;
        }
        if (!acc) // An empty result: the loop never reads this.
          acc = convertScalar(
              b_, loc, b_.create<arith::ConstantOp>(loc, b_.getF64FloatAttr(0.0)),
              cast<RankedTensorType>(concat.getType()).getElementType());
        return acc;
      })
      .Case([&](ReshapeOp reshape) {
        auto from = cast<RankedTensorType>(reshape.getOperand().getType());
        auto to = cast<RankedTensorType>(reshape.getType());
        return emit(reshape.getOperand(),
                    reshapeIndices(loc, from.getShape(), to.getShape(), indices));
      })
      .Case([&](ConstantOp constant) -> Value {
        auto attr = dyn_cast<DenseElementsAttr>(constant.getValue());
        if (attr && attr.isSplat())
          return b_.create<arith::ConstantOp>(
              loc, cast<TypedAttr>(attr.getSplatValue<Attribute>()));
        return hooks_.loadConstant(b_, loc, constant, indices);
      })
      .Case([&](IotaOp iota) {
        Value index = indices[iota.getDimension()];
        Value i64 = b_.create<arith::IndexCastOp>(loc, b_.getI64Type(), index);
        return convertScalar(b_, loc, i64,
                             cast<ShapedType>(iota.getType()).getElementType());
      })
      .Default([](Operation *) { return Value(); });
}

Value ConstantGlobals::load(OpBuilder &b, Location loc, ConstantOp constant,
                            ValueRange indices) {
  auto type = cast<RankedTensorType>(constant.getType());
  auto memrefType = MemRefType::get(type.getShape(), type.getElementType());
  std::string &name = names_[constant.getOperation()];
  if (name.empty()) {
    name = "constant_" + std::to_string(names_.size() - 1);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(module_.getBody());
    b.create<memref::GlobalOp>(loc, name, b.getStringAttr("private"),
                               memrefType, constant.getValue(),
                               /*constant=*/true, IntegerAttr());
  }
  Value global = b.create<memref::GetGlobalOp>(loc, memrefType, name);
  return b.create<memref::LoadOp>(loc, global, indices);
}

} // namespace kiln
