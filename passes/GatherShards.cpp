//===- GatherShards.cpp - ZeRO-1/2: full parameters from updated shards ---===//
//
// Runs after kiln-apply-optimizer under kiln-distribute's zero1 and zero2.
// There the optimizer updates only each rank's shard of every bucket (an
// argument with `kiln.shard`), while the full parameters stay state that the
// forward pass reads. This pass gives each of them its next value: the
// updated shard is all-gathered into the full flat bucket (padding last),
// and the parameter's slice of it, reshaped, becomes a result that updates
// the parameter (`kiln.updates`), as DeepSpeed all-gathers the updated
// partitions after its step. Under zero3 the parameters are not arguments
// (the step gathers them when it starts) and nothing changes.
//
//===----------------------------------------------------------------------===//

#include "ir/KilnOps.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

#define DEBUG_TYPE "kiln-gather-shards"

namespace kiln {
#define GEN_PASS_DEF_KILNGATHERSHARDS
#include "passes/Passes.h.inc"

namespace {

using mlir::Value;

class GatherShards : public impl::KilnGatherShardsBase<GatherShards> {
public:
  using KilnGatherShardsBase::KilnGatherShardsBase;

  void runOnOperation() override {
    for (auto func : getOperation().getOps<mlir::func::FuncOp>())
      if (!func.isExternal() && mlir::failed(gather(func)))
        return signalPassFailure();
  }

private:
  mlir::LogicalResult gather(mlir::func::FuncOp func) {
    mlir::MLIRContext *ctx = func.getContext();
    mlir::Block &block = func.getBody().front();
    auto ret = llvm::cast<mlir::func::ReturnOp>(block.getTerminator());
    // Parameters by name, and which argument each result updates.
    llvm::StringMap<unsigned> parameters;
    for (unsigned i = 0, e = func.getNumArguments(); i < e; ++i) {
      auto role = func.getArgAttrOfType<RoleAttr>(i, KilnDialect::kRoleAttrName);
      auto name = func.getArgAttrOfType<mlir::StringAttr>(
          i, KilnDialect::kNameAttrName);
      if (role && role.getValue() == Role::parameter && name &&
          !func.getArgAttr(i, "kiln.shard"))
        parameters[name.getValue()] = i;
    }
    llvm::DenseMap<unsigned, unsigned> updatedBy; // argument -> result
    for (unsigned i = 0, e = func.getNumResults(); i < e; ++i)
      if (auto up = func.getResultAttrOfType<mlir::IntegerAttr>(
              i, KilnDialect::kUpdatesAttrName))
        updatedBy[static_cast<unsigned>(up.getInt())] = i;

    mlir::OpBuilder b(ret);
    llvm::SmallVector<Value> results(ret.getOperands());
    llvm::SmallVector<mlir::DictionaryAttr> resultAttrs;
    for (unsigned i = 0, e = func.getNumResults(); i < e; ++i)
      resultAttrs.push_back(func.getResultAttrDict(i));
    for (unsigned a = 0, e = func.getNumArguments(); a < e; ++a) {
      auto shard = func.getArgAttrOfType<mlir::DictionaryAttr>(a, "kiln.shard");
      if (!shard)
        continue;
      auto world = shard.getAs<mlir::IntegerAttr>("world_size");
      auto params = shard.getAs<mlir::ArrayAttr>("params");
      if (!world || !params)
        return func.emitOpError() << "kiln-gather-shards: argument " << a
                                  << " has a malformed kiln.shard";
      // Only the parameters that are still arguments (zero1, zero2).
      bool any = llvm::any_of(params, [&](mlir::Attribute p) {
        auto d = llvm::dyn_cast<mlir::DictionaryAttr>(p);
        auto name = d ? d.getAs<mlir::StringAttr>("name") : nullptr;
        return name && parameters.count(name.getValue());
      });
      if (!any)
        continue;
      auto it = updatedBy.find(a);
      if (it == updatedBy.end())
        return func.emitOpError()
               << "kiln-gather-shards: shard argument " << a
               << " has no update result (run kiln-apply-optimizer first)";
      Value updated = ret.getOperand(it->second);
      auto shardType = llvm::cast<mlir::RankedTensorType>(updated.getType());
      mlir::Location loc = func.getArgument(a).getLoc();
      auto fullType = mlir::RankedTensorType::get(
          {shardType.getDimSize(0) * world.getInt()}, shardType.getElementType());
      Value full = b.create<AllGatherOp>(loc, fullType, updated,
                                         /*dimension=*/0, /*groups=*/nullptr);
      for (mlir::Attribute p : params) {
        auto d = llvm::cast<mlir::DictionaryAttr>(p);
        auto name = d.getAs<mlir::StringAttr>("name");
        auto offset = d.getAs<mlir::IntegerAttr>("offset");
        auto pit = name ? parameters.find(name.getValue()) : parameters.end();
        if (pit == parameters.end() || !offset)
          return func.emitOpError()
                 << "kiln-gather-shards: shard argument " << a
                 << " names a parameter that is not an argument";
        mlir::BlockArgument param = func.getArgument(pit->second);
        auto type = llvm::cast<mlir::RankedTensorType>(param.getType());
        int64_t begin = offset.getInt(), n = type.getNumElements();
        Value part = full;
        if (n != fullType.getDimSize(0))
          part = b.create<SliceOp>(param.getLoc(), full,
                                   b.getDenseI64ArrayAttr({begin}),
                                   b.getDenseI64ArrayAttr({begin + n}),
                                   b.getDenseI64ArrayAttr({1}));
        if (part.getType() != type)
          part = b.create<ReshapeOp>(param.getLoc(), type, part);
        results.push_back(part);
        mlir::NamedAttrList attrs;
        attrs.set(KilnDialect::kRoleAttrName,
                  RoleAttr::get(ctx, Role::parameter));
        attrs.set(KilnDialect::kNameAttrName, name);
        attrs.set(KilnDialect::kUpdatesAttrName,
                  b.getI64IntegerAttr(pit->second));
        resultAttrs.push_back(attrs.getDictionary(ctx));
      }
    }
    if (results.size() == ret.getNumOperands())
      return mlir::success();
    ret->setOperands(results);
    llvm::SmallVector<mlir::Type> types;
    for (Value v : results)
      types.push_back(v.getType());
    func.setFunctionType(
        mlir::FunctionType::get(ctx, block.getArgumentTypes(), types));
    func.setAllResultAttrs(resultAttrs);
    return mlir::success();
  }
};

} // namespace
} // namespace kiln
