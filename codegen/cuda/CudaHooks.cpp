//===- CudaHooks.cpp - the CUDA side of the kernel model's hooks ----------===//
//
// See CudaHooks.h.
//
//===----------------------------------------------------------------------===//

#include "codegen/cuda/CudaHooks.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;

namespace kiln::cuda_emitter {

SmallVector<Value> Intrinsics::call(OpBuilder &b, Location loc, StringRef name,
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

Value CudaHooks::loadInput(OpBuilder &b, Location loc, unsigned input,
                           ValueRange indices) {
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

Value CudaHooks::loadConstant(OpBuilder &b, Location loc, ConstantOp constant,
                              ValueRange indices) {
  return constants_.load(b, loc, constant, indices);
}

std::optional<CudaHooks::ReductionLanes> CudaHooks::reductionLanes(OpBuilder &b) {
  if (!coopBlock_ || b.getInsertionBlock() != coopBlock_)
    return std::nullopt;
  return ReductionLanes{lane_, laneCount_};
}

Value CudaHooks::combineLanes(OpBuilder &b, Location loc, ReduceKind kind,
                              Value value) {
  std::string name =
      std::string("kiln.allreduce.") + (blockScope_ ? "block." : "warp.") +
      // kiln_sum, kiln_max, kiln_min, kiln_prod (CudaPrinter);
      // a mean sums, then divides.
      (kind == ReduceKind::mean ? StringRef("sum") : stringifyReduceKind(kind))
          .str();
  return intrinsics_.call(b, loc, name, {value}, {value.getType()})[0];
}

} // namespace kiln::cuda_emitter
