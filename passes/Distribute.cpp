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
// zero1/zero2/zero3 (DeepSpeed ZeRO, PyTorch FSDP) shard the same buckets
// over the ranks: reduce-scatter instead of all-reduce, one shard argument
// per bucket that the optimizer updates, and the parameters all-gathered
// from the shards (zero() below says how). Where a collective must not be
// issued as early as its inputs allow (zero3's gathers, zero1's
// reduce-scatters), it carries a scheduling rule for kiln-schedule
// (kiln.prefetch, kiln.issue_together: passes/Passes.h).
//
// The module records the strategy and world size (kiln.strategy,
// kiln.world_size) for the package metadata. Data-parallel IR does not
// depend on the world size (a mean divides by the world the job has at run
// time); ZeRO's does (the shard sizes).
//
//===----------------------------------------------------------------------===//

#include "ir/KilnOps.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/BitVector.h"
#include "llvm/ADT/MapVector.h"

#define DEBUG_TYPE "kiln-distribute"

namespace kiln {
#define GEN_PASS_DEF_KILNDISTRIBUTE
#include "passes/Passes.h.inc"

namespace {

using mlir::Value;

constexpr int64_t kFirstBucketBytes = 1 << 20;
constexpr llvm::StringLiteral kShardAttrName = "kiln.shard";

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
      if (!func.isExternal() &&
          mlir::failed(isZero() ? zero(func) : dataParallel(func)))
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
    // mirrored (several devices of one process, one rank each) reduces the
    // gradients exactly as data-parallel does; only the runtime differs.
    // zero1/2/3 shard the gradients, the optimizer state and (zero3) the
    // parameters over the ranks (zero() below).
    if (strategy != "data-parallel" && strategy != "mirrored" && !isZero())
      return module.emitError()
             << "kiln-distribute: strategy " << static_cast<std::string>(strategy)
             << " is not supported yet (expected none, data-parallel, "
                "mirrored, zero1, zero2 or zero3)";
    if (isZero() && gradCompression != "none")
      return module.emitError()
             << "kiln-distribute: grad-compression="
             << static_cast<std::string>(gradCompression)
             << " is not supported with " << static_cast<std::string>(strategy)
             << " (only with data-parallel)";
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
    llvm::SmallVector<llvm::SmallVector<Reduced>> buckets =
        planBuckets(block, grads);
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

  bool isZero() const {
    return strategy == "zero1" || strategy == "zero2" || strategy == "zero3";
  }

  // The gradients in the order the backward pass completes them (ties: one
  // producer, or arguments and constants, keep the result order), packed
  // into buckets: one open per element type, closed when it reaches its
  // cap (the first at kFirstBucketBytes, the others at bucket-mb).
  llvm::SmallVector<llvm::SmallVector<Reduced>>
  planBuckets(mlir::Block &block, llvm::SmallVector<Reduced> &grads) {
    std::stable_sort(grads.begin(), grads.end(),
                     [&](const Reduced &x, const Reduced &y) {
                       return before(producerIn(block, x.value),
                                     producerIn(block, y.value));
                     });
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
    return buckets;
  }

  // ZeRO stages 1-3 (DeepSpeed ZeRO; PyTorch FSDP). The buckets are
  // data-parallel's (same order, same caps); each is one flat buffer padded
  // with zeros to a multiple of the world size N, and rank r owns block r of
  // it, its shard. Every bucket gives the function a new argument, the shard
  // (role parameter, named zero.bucketK; `kiln.shard` records the bucket,
  // world size, unpadded length and each parameter's name, offset, shape and
  // initializer, for the package and the runtime), and the shard's gradient
  // result is the reduce_scatter (mean) of the flat gradient bucket. So
  // kiln-apply-optimizer, unchanged, updates the shards and creates
  // shard-sized optimizer state: that is the sharded optimizer state. The
  // full parameters stop being optimizer parameters (their gradients are no
  // longer results):
  //  - zero1: every bucket is reduce-scattered after the whole backward pass
  //    (the full gradients live until then, as in stage 1); the
  //    reduce-scatters carry kiln.issue_together so that kiln-schedule
  //    keeps them there instead of moving each up to its last gradient;
  //  - zero2: each bucket's reduce_scatter comes right after its last
  //    gradient, interleaved with the backward pass, so the gradient
  //    buffers die early;
  //  - both keep the full parameters as state; kiln-gather-shards (after the
  //    optimizer) replaces them by the all-gathered updated shards;
  //  - zero3 (FSDP, resharded after the forward pass): the full parameters
  //    are not state; the parameter arguments are removed. Each bucket is
  //    all-gathered from its shard right before the forward pass first
  //    reads it (the forward pass: the ops the loss depends on) and sliced
  //    and reshaped into the parameters the forward pass reads, and
  //    gathered again right before the backward pass first reads it, for
  //    the parameters the backward pass reads (none: no second gather);
  //    under gradient accumulation, once per micro-batch and pass. So the
  //    forward copy dies after its last forward use. The gathers
  //    carry kiln.prefetch = 1: kiln-schedule issues each only after the
  //    uses of the gather two before it, i.e. while the bucket before it
  //    computes (FSDP's forward and backward prefetch), instead of moving
  //    them all to the start of the step.
  // The loss gets its own all_reduce mean right after it is computed.
  mlir::LogicalResult zero(mlir::func::FuncOp func) {
    mlir::MLIRContext *ctx = func.getContext();
    mlir::Block &block = func.getBody().front();
    mlir::Operation *ret = block.getTerminator();
    if (ret->getNumOperands() != func.getNumResults())
      return func.emitOpError("kiln-distribute: expected the terminator to "
                              "return every result");
    llvm::SmallVector<Reduced> grads;
    llvm::DenseMap<unsigned, unsigned> argOf; // gradient result -> argument
    std::optional<Reduced> loss;
    for (unsigned i = 0, e = func.getNumResults(); i < e; ++i) {
      auto role =
          func.getResultAttrOfType<RoleAttr>(i, KilnDialect::kRoleAttrName);
      if (!role)
        continue;
      Value v = ret->getOperand(i);
      if (!llvm::isa<mlir::RankedTensorType>(v.getType()))
        return func.emitOpError() << "kiln-distribute: result " << i
                                  << " is not a ranked tensor";
      if (role.getValue() == Role::loss && !loss)
        loss = Reduced{i, v};
      if (role.getValue() != Role::gradient)
        continue;
      auto of = func.getResultAttrOfType<mlir::IntegerAttr>(
          i, KilnDialect::kGradOfAttrName);
      if (!of || of.getInt() < 0 ||
          of.getInt() >= static_cast<int64_t>(func.getNumArguments()))
        return func.emitOpError()
               << "kiln-distribute: " << static_cast<std::string>(strategy)
               << " needs gradient result " << i
               << " to name its parameter (kiln.grad_of)";
      if (v.getType() != func.getArgument(of.getInt()).getType())
        return func.emitOpError() << "kiln-distribute: gradient result " << i
                                  << " differs in type from its parameter";
      grads.push_back({i, v});
      argOf[i] = static_cast<unsigned>(of.getInt());
    }
    if (grads.empty())
      return mlir::success(); // a forward function: nothing to shard
    llvm::SmallVector<llvm::SmallVector<Reduced>> buckets =
        planBuckets(block, grads);
    bool zero3 = strategy == "zero3";
    int64_t world = worldSize;
    mlir::OpBuilder b(ctx);
    auto i64 = [&](int64_t v) { return b.getI64IntegerAttr(v); };

    // The loss: one all_reduce mean of its own, right after it.
    if (loss) {
      mlir::Operation *p = producerIn(block, loss->value);
      if (p)
        b.setInsertionPointAfter(p);
      else
        b.setInsertionPointToStart(&block);
      Value mean = b.create<AllReduceOp>(loss->value.getLoc(),
                                         loss->value.getType(),
                                         ReduceKind::mean, loss->value,
                                         /*groups=*/nullptr);
      ret->setOperand(loss->result, mean);
    }

    // The shard arguments, and (zero3) the gathered parameters.
    unsigned originalArgs = func.getNumArguments();
    llvm::BitVector eraseArgs(originalArgs);
    llvm::SmallVector<mlir::BlockArgument> shards;
    llvm::SmallVector<int64_t> lengths;
    // zero3 gathers each bucket for the forward pass (the ops the loss
    // depends on) and again for the backward pass (the rest); without a
    // loss, every use counts as the forward pass's. |position| is an op's
    // segment of one pass.
    llvm::DenseSet<mlir::Operation *> forward;
    llvm::DenseMap<mlir::Operation *, unsigned> position;
    if (zero3) {
      // Ops nothing reads (kiln-autodiff's gradient of an input) would
      // count as uses and cost a gather that canonicalize leaves behind.
      for (mlir::Operation &op :
           llvm::make_early_inc_range(llvm::reverse(block)))
        if (mlir::isOpTriviallyDead(&op))
          op.erase();
      llvm::SmallVector<mlir::Operation *> work;
      auto reach = [&](Value v) {
        if (mlir::Operation *p = producerIn(block, v))
          if (forward.insert(p).second)
            work.push_back(p);
      };
      if (loss)
        reach(loss->value);
      else
        for (mlir::Operation &op : block.without_terminator())
          forward.insert(&op);
      while (!work.empty()) {
        mlir::Operation *op = work.pop_back_val();
        op->walk([&](mlir::Operation *nested) {
          for (Value operand : nested->getOperands())
            reach(operand);
        });
      }
      // The block in segments of the forward and backward passes (forward
      // 0, backward 0, forward 1, ... under gradient accumulation), as the
      // ops that read parameters see them (an op of neither pass, such as
      // a metric on the logits, starts no segment).
      llvm::DenseSet<mlir::Operation *> readers;
      for (const Reduced &g : grads)
        for (mlir::Operation *user : block.getArgument(argOf[g.result]).getUsers())
          readers.insert(block.findAncestorOpInBlock(*user));
      bool inForward = true;
      unsigned segment = 0;
      for (mlir::Operation &op : block) {
        if (readers.contains(&op) && forward.contains(&op) != inForward) {
          inForward = !inForward;
          ++segment;
        }
        position[&op] = segment;
      }
    }
    for (auto [k, bucket] : llvm::enumerate(buckets)) {
      auto firstType =
          llvm::cast<mlir::RankedTensorType>(bucket.front().value.getType());
      mlir::Type element = firstType.getElementType();
      mlir::Location loc = mlir::NameLoc::get(
          b.getStringAttr("bucket" + std::to_string(k)), func.getLoc());
      llvm::SmallVector<mlir::Attribute> params;
      int64_t total = 0;
      for (const Reduced &r : bucket) {
        unsigned arg = argOf[r.result];
        auto type = llvm::cast<mlir::RankedTensorType>(r.value.getType());
        auto name = func.getArgAttrOfType<mlir::StringAttr>(
            arg, KilnDialect::kNameAttrName);
        if (!name) {
          // The package's name for it; the shard and kiln-gather-shards
          // find the parameter by name.
          name = b.getStringAttr("arg" + std::to_string(arg));
          func.setArgAttr(arg, KilnDialect::kNameAttrName, name);
        }
        mlir::NamedAttrList p;
        p.set("name", name);
        p.set("offset", i64(total));
        p.set("shape", b.getDenseI64ArrayAttr(type.getShape()));
        if (auto init = func.getArgAttrOfType<InitializerAttr>(
                arg, KilnDialect::kInitAttrName))
          p.set("init", init);
        params.push_back(p.getDictionary(ctx));
        total += type.getNumElements();
      }
      int64_t shardLength = (total + world - 1) / world;
      mlir::NamedAttrList shardInfo;
      shardInfo.set("bucket", i64(k));
      shardInfo.set("world_size", i64(world));
      shardInfo.set("length", i64(total));
      shardInfo.set("params", b.getArrayAttr(params));
      mlir::NamedAttrList attrs;
      attrs.set(KilnDialect::kRoleAttrName, RoleAttr::get(ctx, Role::parameter));
      attrs.set(KilnDialect::kNameAttrName,
                b.getStringAttr("zero.bucket" + std::to_string(k)));
      attrs.set(kShardAttrName, shardInfo.getDictionary(ctx));
      auto shardType = mlir::RankedTensorType::get({shardLength}, element);
      func.insertArgument(func.getNumArguments(), shardType,
                          attrs.getDictionary(ctx), loc);
      mlir::BlockArgument shard = block.getArguments().back();
      shards.push_back(shard);
      lengths.push_back(total);
      if (!zero3)
        continue;
      // The full bucket, gathered for each run of uses of one pass: once
      // for the forward pass and once more for the backward pass (each just
      // before its first use there), or per micro-batch and pass under
      // gradient accumulation (forward 0, backward 0, forward 1, ...). So a
      // forward copy dies after the forward pass's last use.
      llvm::SmallVector<std::pair<unsigned, mlir::OpOperand *>> sorted;
      for (const Reduced &r : bucket)
        for (mlir::OpOperand &use :
             block.getArgument(argOf[r.result]).getUses())
          sorted.push_back(
              {position.lookup(block.findAncestorOpInBlock(*use.getOwner())),
               &use});
      llvm::stable_sort(sorted, [](auto &x, auto &y) {
        return x.first < y.first;
      });
      for (size_t next = 0; next < sorted.size();) {
        size_t end = next + 1;
        while (end < sorted.size() && sorted[end].first == sorted[next].first)
          ++end;
        llvm::SmallVector<mlir::OpOperand *> uses;
        mlir::Operation *first = nullptr;
        for (size_t u = next; u < end; ++u) {
          uses.push_back(sorted[u].second);
          mlir::Operation *user =
              block.findAncestorOpInBlock(*sorted[u].second->getOwner());
          if (!first || user->isBeforeInBlock(first))
            first = user;
        }
        next = end;
        b.setInsertionPoint(first);
        auto fullType =
            mlir::RankedTensorType::get({shardLength * world}, element);
        auto gather = b.create<AllGatherOp>(loc, fullType, shard,
                                            /*dimension=*/0,
                                            /*groups=*/nullptr);
        // kiln-schedule issues it while the bucket before it computes
        // (prefetch one ahead), not at the start of the step.
        gather->setAttr(kPrefetchAttrName, i64(1));
        llvm::DenseMap<unsigned, Value> parts;
        for (mlir::OpOperand *use : uses)
          parts[llvm::cast<mlir::BlockArgument>(use->get()).getArgNumber()] =
              nullptr;
        int64_t offset = 0;
        for (const Reduced &r : bucket) {
          unsigned arg = argOf[r.result];
          mlir::BlockArgument param = block.getArgument(arg);
          auto type = llvm::cast<mlir::RankedTensorType>(param.getType());
          int64_t n = type.getNumElements();
          if (!parts.count(arg)) { // not read in this pass
            offset += n;
            continue;
          }
          Value part = gather;
          if (n != shardLength * world)
            part = b.create<SliceOp>(param.getLoc(), part,
                                     b.getDenseI64ArrayAttr({offset}),
                                     b.getDenseI64ArrayAttr({offset + n}),
                                     b.getDenseI64ArrayAttr({1}));
          if (part.getType() != type)
            part = b.create<ReshapeOp>(param.getLoc(), type, part);
          parts[arg] = part;
          offset += n;
        }
        for (mlir::OpOperand *use : uses)
          use->set(parts.lookup(
              llvm::cast<mlir::BlockArgument>(use->get()).getArgNumber()));
      }
      for (const Reduced &r : bucket)
        eraseArgs.set(argOf[r.result]);
    }

    // Each bucket's gradient, reduce-scattered: right after its last
    // producer (zero2, zero3) or after the whole backward pass (zero1).
    llvm::BitVector eraseResults(func.getNumResults());
    llvm::SmallVector<Value> shardGrads;
    for (auto [k, bucket] : llvm::enumerate(buckets)) {
      mlir::Operation *last = nullptr;
      for (const Reduced &r : bucket) {
        mlir::Operation *p = producerIn(block, r.value);
        if (before(last, p))
          last = p;
        eraseResults.set(r.result);
      }
      if (strategy == "zero1")
        b.setInsertionPoint(ret);
      else if (last)
        b.setInsertionPointAfter(last);
      else
        b.setInsertionPointToStart(&block);
      mlir::Location loc = mlir::NameLoc::get(
          b.getStringAttr("bucket" + std::to_string(k)), func.getLoc());
      auto shardType =
          llvm::cast<mlir::RankedTensorType>(shards[k].getType());
      mlir::Type element = shardType.getElementType();
      llvm::SmallVector<Value> flat;
      for (const Reduced &r : bucket) {
        auto type = llvm::cast<mlir::RankedTensorType>(r.value.getType());
        auto flatType =
            mlir::RankedTensorType::get({type.getNumElements()}, element);
        flat.push_back(type == flatType
                           ? r.value
                           : b.create<ReshapeOp>(loc, flatType, r.value)
                                 .getResult());
      }
      int64_t padded = shardType.getDimSize(0) * world;
      if (padded > lengths[k]) {
        auto padType =
            mlir::RankedTensorType::get({padded - lengths[k]}, element);
        flat.push_back(b.create<ConstantOp>(
            loc, llvm::cast<mlir::ElementsAttr>(mlir::DenseElementsAttr::get(
                     padType, b.getZeroAttr(element)))));
      }
      auto bufferType = mlir::RankedTensorType::get({padded}, element);
      Value buffer =
          flat.size() == 1
              ? flat.front()
              : b.create<ConcatenateOp>(loc, bufferType, flat, /*dimension=*/0)
                    .getResult();
      auto scatter = b.create<ReduceScatterOp>(
          loc, shardType, ReduceKind::mean, buffer, /*dimension=*/0,
          /*groups=*/nullptr);
      // Stage 1 reduces the gradients after the whole backward pass:
      // kiln-schedule keeps them there (their full buffers live until then).
      if (strategy == "zero1")
        scatter->setAttr(kIssueTogetherAttrName, b.getUnitAttr());
      shardGrads.push_back(scatter);
    }

    // The results: the others as they were, then one gradient per shard.
    llvm::SmallVector<Value> results;
    llvm::SmallVector<mlir::DictionaryAttr> resultAttrs;
    for (unsigned i = 0, e = func.getNumResults(); i < e; ++i) {
      if (eraseResults.test(i))
        continue;
      results.push_back(ret->getOperand(i));
      resultAttrs.push_back(func.getResultAttrDict(i));
    }
    eraseArgs.resize(func.getNumArguments());
    // The results kept refer to arguments by index (kiln.updates of model
    // state, kiln.grad_of): renumbered past the erased parameters.
    llvm::SmallVector<int64_t> newIndex(func.getNumArguments(), -1);
    for (unsigned i = 0, next = 0, e = func.getNumArguments(); i < e; ++i)
      if (!eraseArgs.test(i))
        newIndex[i] = next++;
    for (mlir::DictionaryAttr &dict : resultAttrs) {
      mlir::NamedAttrList attrs(dict);
      for (llvm::StringLiteral key :
           {KilnDialect::kUpdatesAttrName, KilnDialect::kGradOfAttrName})
        if (auto index = llvm::dyn_cast_or_null<mlir::IntegerAttr>(attrs.get(key));
            index && index.getInt() >= 0 &&
            index.getInt() < static_cast<int64_t>(newIndex.size()))
          attrs.set(key, i64(newIndex[index.getInt()]));
      dict = attrs.getDictionary(ctx);
    }
    func.eraseArguments(eraseArgs);
    for (auto [shard, grad] : llvm::zip(shards, shardGrads)) {
      results.push_back(grad);
      mlir::NamedAttrList attrs;
      attrs.set(KilnDialect::kRoleAttrName, RoleAttr::get(ctx, Role::gradient));
      attrs.set(KilnDialect::kNameAttrName,
                func.getArgAttrOfType<mlir::StringAttr>(
                    shard.getArgNumber(), KilnDialect::kNameAttrName));
      attrs.set(KilnDialect::kGradOfAttrName, i64(shard.getArgNumber()));
      resultAttrs.push_back(attrs.getDictionary(ctx));
    }
    ret->setOperands(results);
    llvm::SmallVector<mlir::Type> resultTypes;
    for (Value v : results)
      resultTypes.push_back(v.getType());
    func.setFunctionType(mlir::FunctionType::get(
        ctx, block.getArgumentTypes(), resultTypes));
    func.setAllResultAttrs(resultAttrs);
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
