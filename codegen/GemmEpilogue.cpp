//===- GemmEpilogue.cpp - GEMM fusions as a library GEMM plus a kernel -----===//
//
// The epilogue is the gemm fusion's body without its first op, cloned into
// a new fusion whose extra last input stands for the dot's result; the
// packing kernel is a one-op transpose fusion (see GemmEpilogue.h).
//
//===----------------------------------------------------------------------===//

#include "codegen/GemmEpilogue.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/Verifier.h"

using namespace mlir;

namespace kiln {

FailureOr<GemmFusionSplit> splitGemmFusion(FusionOp fusion) {
  if (fusion.getKind() != FusionKind::gemm)
    return fusion.emitOpError() << "expected a `gemm` fusion to split, found `"
                                << stringifyFusionKind(fusion.getKind()) << "`";
  Block &body = fusion.getBody().front();
  auto dot = dyn_cast<DotGeneralOp>(&body.front());
  if (!dot)
    return fusion.emitOpError()
           << "expected the body of a gemm fusion to start with "
              "kiln.dot_general, found '"
           << body.front().getName() << "'";
  auto lhs = dyn_cast<BlockArgument>(dot.getLhs());
  auto rhs = dyn_cast<BlockArgument>(dot.getRhs());
  if (!lhs || !rhs || lhs.getOwner() != &body || rhs.getOwner() != &body)
    return fusion.emitOpError()
           << "expected the dot_general of a gemm fusion to read two of the "
              "fusion's inputs directly";
  for (Operation &op : llvm::drop_begin(body))
    if (isa<DotGeneralOp>(op))
      return op.emitOpError() << "is a second dot_general in a gemm fusion "
                                 "(expected one, the body's first op)";

  GemmFusionSplit split;
  split.dot = dot;
  split.lhsInput = lhs.getArgNumber();
  split.rhsInput = rhs.getArgNumber();
  for (BlockArgument arg : body.getArguments())
    if (llvm::any_of(arg.getUsers(), [&](Operation *user) { return user != dot; }))
      split.inputSources.push_back(arg.getArgNumber());
  split.inputSources.push_back(-1);

  MLIRContext *context = fusion.getContext();
  context->getOrLoadDialect<func::FuncDialect>();
  Location loc = fusion.getLoc();
  SmallVector<Type> inputTypes;
  SmallVector<Location> inputLocs;
  for (int64_t source : split.inputSources) {
    inputTypes.push_back(source < 0 ? dot.getType()
                                    : fusion.getInputs()[source].getType());
    inputLocs.push_back(loc);
  }
  split.module = ModuleOp::create(loc);
  OpBuilder b(context);
  b.setInsertionPointToEnd(split.module->getBody());
  auto func = b.create<func::FuncOp>(
      loc, "epilogue", b.getFunctionType(inputTypes, fusion.getResultTypes()));
  Block *entry = func.addEntryBlock();
  b.setInsertionPointToStart(entry);
  FusionKind kind = fusion.getNumResults() == 1 ? FusionKind::loop
                                                : FusionKind::multi_output;
  auto epilogue = b.create<FusionOp>(loc, fusion.getResultTypes(), kind,
                                     entry->getArguments());
  Block *inner =
      b.createBlock(&epilogue.getBody(), {}, inputTypes, inputLocs);
  IRMapping mapping;
  for (auto [i, source] : llvm::enumerate(split.inputSources))
    mapping.map(source < 0 ? Value(dot.getResult())
                           : Value(body.getArgument(source)),
                inner->getArgument(i));
  for (Operation &op : llvm::drop_begin(body))
    b.clone(op, mapping);
  b.setInsertionPointToEnd(entry);
  b.create<func::ReturnOp>(loc, epilogue.getResults());
  if (failed(verify(*split.module)))
    return fusion.emitOpError() << "its epilogue does not verify on its own";
  split.epilogue = epilogue;
  return split;
}

FailureOr<OwningOpRef<ModuleOp>>
buildTransposeFusion(Location loc, RankedTensorType operand,
                     ArrayRef<int64_t> permutation, FusionOp &fusion) {
  int64_t rank = operand.getRank();
  SmallVector<bool> seen(rank, false);
  bool valid = static_cast<int64_t>(permutation.size()) == rank;
  for (int64_t p : permutation) {
    valid = valid && p >= 0 && p < rank && !seen[p];
    if (valid)
      seen[p] = true;
  }
  if (!valid) {
    InFlightDiagnostic d = emitError(loc)
                           << "expected a permutation of the dimensions of "
                           << operand << ", found [";
    llvm::interleaveComma(permutation, d);
    return d << "]";
  }
  SmallVector<int64_t> shape;
  for (int64_t p : permutation)
    shape.push_back(operand.getDimSize(p));
  auto resultType = RankedTensorType::get(shape, operand.getElementType());

  MLIRContext *context = operand.getContext();
  context->getOrLoadDialect<func::FuncDialect>();
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  OpBuilder b(context);
  b.setInsertionPointToEnd(module->getBody());
  auto func = b.create<func::FuncOp>(
      loc, "transpose", b.getFunctionType({operand}, {resultType}));
  Block *entry = func.addEntryBlock();
  b.setInsertionPointToStart(entry);
  fusion = b.create<FusionOp>(loc, TypeRange{resultType}, FusionKind::loop,
                              entry->getArguments());
  Block *inner = b.createBlock(&fusion.getBody(), {}, {operand}, {loc});
  Value transposed = b.create<TransposeOp>(loc, resultType, inner->getArgument(0),
                                           b.getDenseI64ArrayAttr(permutation));
  b.create<YieldOp>(loc, ValueRange{transposed});
  b.setInsertionPointToEnd(entry);
  b.create<func::ReturnOp>(loc, fusion.getResults());
  if (failed(verify(*module)))
    return emitError(loc) << "the transpose fusion does not verify";
  return module;
}

FailureOr<OwningOpRef<ModuleOp>> buildSingleOpFusion(Operation *op,
                                                     FusionOp &fusion) {
  if (op->getNumRegions() != 0)
    return op->emitOpError() << "has regions: expected a single op to wrap "
                                "into a fusion";
  auto isTensor = [](Type type) { return isa<RankedTensorType>(type); };
  if (!llvm::all_of(op->getOperandTypes(), isTensor) ||
      !llvm::all_of(op->getResultTypes(), isTensor) || op->getNumResults() == 0)
    return op->emitOpError()
           << "expected ranked tensor operands and results to wrap into a "
              "fusion";
  MLIRContext *context = op->getContext();
  context->getOrLoadDialect<func::FuncDialect>();
  Location loc = op->getLoc();
  SmallVector<Type> inputTypes(op->getOperandTypes());
  SmallVector<Type> resultTypes(op->getResultTypes());
  SmallVector<Location> inputLocs(inputTypes.size(), loc);
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  OpBuilder b(context);
  b.setInsertionPointToEnd(module->getBody());
  auto func = b.create<func::FuncOp>(
      loc, "single", b.getFunctionType(inputTypes, resultTypes));
  Block *entry = func.addEntryBlock();
  b.setInsertionPointToStart(entry);
  FusionKind kind = resultTypes.size() == 1 ? FusionKind::loop
                                            : FusionKind::multi_output;
  fusion = b.create<FusionOp>(loc, resultTypes, kind, entry->getArguments());
  Block *inner = b.createBlock(&fusion.getBody(), {}, inputTypes, inputLocs);
  IRMapping mapping;
  for (auto [operand, arg] : llvm::zip(op->getOperands(), inner->getArguments()))
    mapping.map(operand, arg);
  Operation *copy = b.clone(*op, mapping);
  // Planning attributes (kiln.buffer_offsets, ...) do not belong inside.
  copy->setDiscardableAttrs(DictionaryAttr::get(context, {}));
  b.create<YieldOp>(loc, copy->getResults());
  b.setInsertionPointToEnd(entry);
  b.create<func::ReturnOp>(loc, fusion.getResults());
  if (failed(verify(*module)))
    return op->emitOpError() << "does not verify when wrapped into a fusion";
  return module;
}

} // namespace kiln
