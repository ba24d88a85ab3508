//===- Distribute.cpp - a distribution strategy as collectives ------------===//
//
// Runs between kiln-autodiff and kiln-apply-optimizer, where every
// parameter's gradient is a result of its function (kiln.grad_of) and the
// optimizer has not read it yet: whatever the strategy does to a gradient
// (all-reduce it, shard it) the optimizer then applies to the reduced value,
// so clipping by the global norm, fp16 loss-scale checks and weight decay
// all see the same numbers on every rank, as in PyTorch DDP.
//
// data-parallel (PyTorch DDP): each rank runs the step on its own batch and
// the gradients are averaged (all_reduce mean) before the update, so every
// rank applies the same update and the replicas stay equal. As DDP does, the
// gradients are packed into buckets, in the order the backward pass
// completes them (their producers' order in the block, which kiln-autodiff
// emits in reverse order of the forward pass): the first bucket closes at
// 1 MB, the others at `bucket-mb` MB (a bucket closes when it reaches its
// cap; a gradient is never split). A bucket is one 1-D buffer: each
// gradient is reshaped to 1-D, the bucket's gradients are concatenated, one
// kiln.all_reduce mean runs on the buffer, and slices of its result,
// reshaped back, replace the gradients. The pack, the collective and the
// unpack are inserted right after the bucket's last gradient is produced,
// so the collective can run while the rest of the backward pass computes
// (kiln-schedule keeps collectives as early as their inputs allow; kiln-fuse
// never fuses one). The loss (a role-loss result) joins the last bucket of
// its element type, so each rank reports the mean loss of the global batch
// without a collective of its own. Buckets hold one element type each (a
// concatenation needs one). With `grad-compression=bf16|fp16` each f32 (or
// f64) bucket is converted to the low precision before its all-reduce and
// back after it (PyTorch's bf16/fp16 compress hooks): half the bytes on the
// wire; the optimizer, and the accumulation of the gradients themselves,
// stay in f32. The loss then has its own f32 all-reduce so the reported loss
// is not rounded. Everything depends only on the IR, so every
// rank builds the same collectives in the same order.
//
// The module records the strategy and world size (kiln.strategy,
// kiln.world_size) for the package metadata. The IR itself does not depend
// on the world size: a mean divides by the world the job has at run time.
//
//===----------------------------------------------------------------------===//

#include "ir/KilnOps.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/MapVector.h"

#define DEBUG_TYPE "kiln-distribute"

namespace kiln {
#define GEN_PASS_DEF_KILNDISTRIBUTE
#include "passes/Passes.h.inc"

namespace {

using mlir::Value;

constexpr int64_t kFirstBucketBytes = 1 << 20;

// A returned value to be reduced: the result index and the value.
struct Reduced {
  unsigned result;
  Value value;
};

// Where |value| becomes available: its defining top-level op, or null for a
// block argument (available from the start).
mlir::Operation *producerIn(mlir::Block &block, Value value) {
  mlir::Operation *def = value.getDefiningOp();
  return def ? block.findAncestorOpInBlock(*def) : nullptr;
}

bool before(mlir::Operation *a, mlir::Operation *b) {
  if (!a)
    return b != nullptr;
  if (!b)
    return false;
  return a->isBeforeInBlock(b);
}

int64_t bytesOf(Value v) {
  auto type = llvm::cast<mlir::RankedTensorType>(v.getType());
  return type.getNumElements() *
         std::max<int64_t>(1, type.getElementTypeBitWidth() / 8);
}

class Distribute : public impl::KilnDistributeBase<Distribute> {
public:
  using KilnDistributeBase::KilnDistributeBase;

  void runOnOperation() override {
    mlir::ModuleOp module = getOperation();
    if (mlir::failed(checkOptions(module)))
      return signalPassFailure();
    if (strategy == "none")
      return;
    mlir::Builder b(module.getContext());
    module->setAttr("kiln.strategy", b.getStringAttr(strategy));
    module->setAttr("kiln.world_size", b.getI64IntegerAttr(worldSize));
    for (auto func : module.getOps<mlir::func::FuncOp>())
      if (!func.isExternal() && mlir::failed(dataParallel(func)))
        return signalPassFailure();
  }

private:
  mlir::LogicalResult checkOptions(mlir::ModuleOp module) {
    if (worldSize < 1)
      return module.emitError() << "kiln-distribute: world-size must be at "
                                   "least 1, got "
                                << static_cast<int64_t>(worldSize);
    if (strategy == "none")
      return mlir::success();
    if (strategy == "zero1" || strategy == "zero2" || strategy == "zero3")
      return module.emitError()
             << "kiln-distribute: strategy " << static_cast<std::string>(strategy)
             << " is not supported yet (sharded gradients, optimizer state "
                "and parameters are not implemented); use data-parallel";
    // mirrored (several devices of one process, one rank each) reduces the
    // gradients exactly as data-parallel does; only the runtime differs.
    if (strategy != "data-parallel" && strategy != "mirrored")
      return module.emitError()
             << "kiln-distribute: strategy " << static_cast<std::string>(strategy)
             << " is not supported yet (expected none or data-parallel)";
    if (bucketMb <= 0)
      return module.emitError()
             << "kiln-distribute: bucket-mb must be positive, got "
             << static_cast<double>(bucketMb);
    // grad-accum: kiln-accumulate-gradients (before this pass) has summed
    // the micro-batches' gradients, so the buckets reduce them once.
    if (gradAccum < 1)
      return module.emitError()
             << "kiln-distribute: grad-accum=" << static_cast<int64_t>(gradAccum)
             << ": expected at least 1 micro-batch per step";
    if (gradCompression != "none" && gradCompression != "bf16" &&
        gradCompression != "fp16")
      return module.emitError()
             << "kiln-distribute: grad-compression="
             << static_cast<std::string>(gradCompression)
             << ": expected none, bf16 or fp16";
    return mlir::success();
  }

  mlir::LogicalResult dataParallel(mlir::func::FuncOp func) {
    mlir::Block &block = func.getBody().front();
    mlir::Operation *ret = block.getTerminator();
    if (ret->getNumOperands() != func.getNumResults())
      return func.emitOpError("kiln-distribute: expected the terminator to "
                              "return every result");
    llvm::SmallVector<Reduced> grads;
    std::optional<Reduced> loss;
    unsigned lossResult = ~0u;
    for (unsigned i = 0, e = func.getNumResults(); i < e; ++i) {
      auto role =
          func.getResultAttrOfType<RoleAttr>(i, KilnDialect::kRoleAttrName);
      if (!role)
        continue;
      Value v = ret->getOperand(i);
      if (!llvm::isa<mlir::RankedTensorType>(v.getType()))
        return func.emitOpError() << "kiln-distribute: result " << i
                                  << " is not a ranked tensor";
      if (role.getValue() == Role::gradient)
        grads.push_back({i, v});
      else if (role.getValue() == Role::loss && !loss) {
        loss = Reduced{i, v};
        lossResult = i;
      }
    }
    if (grads.empty())
      return mlir::success(); // a forward function: nothing to reduce
    // In the order the backward pass completes them; ties (one producer,
    // or arguments and constants) keep the result order.
    std::stable_sort(grads.begin(), grads.end(),
                     [&](const Reduced &x, const Reduced &y) {
                       return before(producerIn(block, x.value),
                                     producerIn(block, y.value));
                     });

    // Buckets, one open per element type, closed when they reach their cap.
    llvm::SmallVector<llvm::SmallVector<Reduced>> buckets;
    llvm::MapVector<mlir::Type, std::pair<size_t, int64_t>> open;
    int64_t laterCap =
        std::max<int64_t>(1, static_cast<int64_t>(bucketMb * (1 << 20)));
    int64_t cap = std::min(kFirstBucketBytes, laterCap);
    for (const Reduced &g : grads) {
      mlir::Type element =
          llvm::cast<mlir::RankedTensorType>(g.value.getType()).getElementType();
      auto it = open.find(element);
      if (it == open.end()) {
        buckets.emplace_back();
        it = open.insert({element, {buckets.size() - 1, 0}}).first;
      }
      buckets[it->second.first].push_back(g);
      it->second.second += bytesOf(g.value);
      if (it->second.second >= cap) {
        open.erase(it);
        cap = laterCap;
      }
    }
    // Compressed buckets would round the reported loss: it gets its own
    // (f32, one element) all-reduce then.
    bool compress = gradCompression != "none";
    if (loss && compress) {
      buckets.push_back({*loss});
      loss.reset();
    }
    if (loss) {
      mlir::Type element =
          llvm::cast<mlir::RankedTensorType>(loss->value.getType())
              .getElementType();
      // The last bucket of its type (open or closed).
      int target = -1;
      for (int k = buckets.size() - 1; k >= 0 && target < 0; --k)
        if (llvm::cast<mlir::RankedTensorType>(
                buckets[k].front().value.getType())
                .getElementType() == element)
          target = k;
      if (target >= 0)
        buckets[target].push_back(*loss);
      else
        buckets.push_back({*loss});
    }

    for (auto [index, bucket] : llvm::enumerate(buckets))
      emitBucket(func, block, ret, bucket, index,
                 compress && !llvm::any_of(bucket, [&](const Reduced &r) {
                   return r.result == lossResult;
                 }));
    return mlir::success();
  }

  // Pack |bucket| into one buffer right after its last producer, all-reduce
  // it, and unpack; the terminator then returns the reduced values.
  void emitBucket(mlir::func::FuncOp func, mlir::Block &block,
                  mlir::Operation *ret, llvm::ArrayRef<Reduced> bucket,
                  size_t index, bool compress) {
    mlir::Operation *last = nullptr;
    for (const Reduced &r : bucket) {
      mlir::Operation *p = producerIn(block, r.value);
      if (before(last, p))
        last = p;
    }
    mlir::OpBuilder b(func.getContext());
    if (last)
      b.setInsertionPointAfter(last);
    else
      b.setInsertionPointToStart(&block);
    mlir::Location loc = mlir::NameLoc::get(
        b.getStringAttr("bucket" + std::to_string(index)), func.getLoc());
    mlir::Type element =
        llvm::cast<mlir::RankedTensorType>(bucket.front().value.getType())
            .getElementType();
    llvm::SmallVector<Value> flat;
    llvm::SmallVector<int64_t> sizes;
    int64_t total = 0;
    for (const Reduced &r : bucket) {
      auto type = llvm::cast<mlir::RankedTensorType>(r.value.getType());
      int64_t n = type.getNumElements();
      auto flatType = mlir::RankedTensorType::get({n}, element);
      flat.push_back(type == flatType
                         ? r.value
                         : b.create<ReshapeOp>(loc, flatType, r.value)
                               .getResult());
      sizes.push_back(n);
      total += n;
    }
    auto bufferType = mlir::RankedTensorType::get({total}, element);
    Value buffer =
        flat.size() == 1
            ? flat.front()
            : b.create<ConcatenateOp>(loc, bufferType, flat, /*dimension=*/0)
                  .getResult();
    // grad-compression: the buffer travels (and is summed by the
    // communicator, pairwise in f32 and rounded) in bf16 or f16, and comes
    // back to its own type for the optimizer, as PyTorch's
    // bf16_compress_hook / fp16_compress_hook do.
    mlir::Type low;
    if (compress && llvm::isa<mlir::FloatType>(element) &&
        element.getIntOrFloatBitWidth() > 16)
      low = gradCompression == "bf16" ? mlir::Type(b.getBF16Type())
                                      : mlir::Type(b.getF16Type());
    if (low) {
      auto lowType = mlir::RankedTensorType::get({total}, low);
      buffer = b.create<ConvertOp>(loc, lowType, buffer);
      Value sum = b.create<AllReduceOp>(loc, lowType, ReduceKind::mean, buffer,
                                        /*groups=*/nullptr);
      buffer = b.create<ConvertOp>(loc, bufferType, sum);
    }
    Value reduced =
        low ? buffer
            : b.create<AllReduceOp>(loc, bufferType, ReduceKind::mean, buffer,
                                    /*groups=*/nullptr)
                  .getResult();
    // The unpacking takes each gradient's location, so kernels that fuse a
    // slice (the optimizer's) are named after the model, not the bucket.
    int64_t offset = 0;
    for (auto [r, n] : llvm::zip(bucket, sizes)) {
      auto type = llvm::cast<mlir::RankedTensorType>(r.value.getType());
      Value part = reduced;
      if (bucket.size() > 1)
        part = b.create<SliceOp>(r.value.getLoc(), reduced,
                                 b.getDenseI64ArrayAttr({offset}),
                                 b.getDenseI64ArrayAttr({offset + n}),
                                 b.getDenseI64ArrayAttr({1}));
      if (part.getType() != type)
        part = b.create<ReshapeOp>(r.value.getLoc(), type, part);
      ret->setOperand(r.result, part);
      offset += n;
    }
  }
};

} // namespace
} // namespace kiln
