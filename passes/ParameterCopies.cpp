//===- ParameterCopies.cpp - low-precision parameter copies as step state -===//
//
// After kiln-auto-mixed-precision, the forward and backward passes read each
// f32 parameter through a kiln.convert to bf16 or f16 (master weights,
// passes/AutoMixedPrecision.cpp). A training step makes that convert anew
// every step: per parameter element a 4-byte read and a 2-byte write in a
// kernel of its own, 0.75 GB for GPT-2 small. This pass keeps the converted
// value instead, as Megatron-LM and DeepSpeed's bf16 optimizer keep bf16
// parameters beside their f32 master copies:
//
//   - a new argument, the copy (#kiln.role<parameter_copy>, named
//     "<parameter>.bf16" or ".f16", kiln.copy_of = the parameter's argument
//     index), replaces every convert of the parameter to its type;
//   - a new result returns the convert of the updated parameter
//     (kiln.updates = the copy), so the optimizer update's kernel writes the
//     copy beside the new parameter (kiln-fuse puts the convert in it).
//
// The step computes exactly what it did before: the copy always equals the
// convert of the parameter it is read beside. The runtime keeps it so: it
// fills a copy from its parameter at initialization and whenever it sets the
// parameter (a checkpoint resume, a broadcast), and never checkpoints it
// (runtime/package/Package.h, pkgFillParameterCopy).
//
// Runs after kiln-apply-optimizer (and kiln-gather-shards), on each function
// that returns updated parameters. A parameter gets copies only when it is
// f32 and replicated (not a ZeRO shard, kiln.shard), has a kiln.updates
// result and is converted to a narrower float type; other parameters are
// untouched.
//
//===----------------------------------------------------------------------===//

#include "ir/KilnOps.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/MapVector.h"

#define DEBUG_TYPE "kiln-parameter-copies"

namespace kiln {

#define GEN_PASS_DEF_KILNPARAMETERCOPIES
#include "passes/Passes.h.inc"

namespace {

using mlir::Value;

// The suffix of a copy's name: its element type.
std::string typeSuffix(mlir::Type element) {
  if (element.isBF16())
    return "bf16";
  if (element.isF16())
    return "f16";
  std::string text;
  llvm::raw_string_ostream os(text);
  element.print(os);
  return text;
}

struct KilnParameterCopies
    : public impl::KilnParameterCopiesBase<KilnParameterCopies> {
  using KilnParameterCopiesBase::KilnParameterCopiesBase;

  void runOnOperation() override {
    for (auto func : getOperation().getOps<mlir::func::FuncOp>())
      if (!func.isExternal())
        addCopies(func);
  }

  void addCopies(mlir::func::FuncOp func) {
    mlir::MLIRContext *ctx = func.getContext();
    auto ret = llvm::cast<mlir::func::ReturnOp>(
        func.getBody().front().getTerminator());
    // The result that updates each argument.
    llvm::DenseMap<unsigned, unsigned> updateOf;
    for (unsigned r = 0, e = func.getNumResults(); r < e; ++r)
      if (auto up = func.getResultAttrOfType<mlir::IntegerAttr>(
              r, KilnDialect::kUpdatesAttrName))
        updateOf[up.getInt()] = r;
    // Each argument's converts to narrower floats, by type, in program
    // order (so copies are added in the order the step first reads them).
    llvm::DenseMap<unsigned, llvm::MapVector<mlir::Type, llvm::SmallVector<ConvertOp>>>
        convertsOf;
    for (mlir::Operation &op : func.getBody().front())
      if (auto convert = llvm::dyn_cast<ConvertOp>(op)) {
        auto arg = llvm::dyn_cast<mlir::BlockArgument>(convert.getOperand());
        mlir::Type to = convert.getType().getElementType();
        if (arg && llvm::isa<mlir::FloatType>(to) &&
            to.getIntOrFloatBitWidth() < 32)
          convertsOf[arg.getArgNumber()][to].push_back(convert);
      }

    // The arguments the step had (the copies added below come after them).
    unsigned numArgs = func.getNumArguments();
    for (unsigned arg = 0; arg < numArgs; ++arg) {
      auto role =
          func.getArgAttrOfType<RoleAttr>(arg, KilnDialect::kRoleAttrName);
      auto type =
          llvm::dyn_cast<mlir::RankedTensorType>(func.getArgument(arg).getType());
      auto update = updateOf.find(arg);
      auto converts = convertsOf.find(arg);
      if (!role || role.getValue() != Role::parameter || !type ||
          !type.getElementType().isF32() || update == updateOf.end() ||
          converts == convertsOf.end() || func.getArgAttr(arg, "kiln.shard"))
        continue;
      std::string name = "param";
      if (auto n = func.getArgAttrOfType<mlir::StringAttr>(
              arg, KilnDialect::kNameAttrName))
        name = n.str();
      for (auto &[element, uses] : converts->second) {
        auto copyType = type.clone(element);
        std::string copyName = name + "." + typeSuffix(element);
        // The copy's role and name, and |key| = |index| (the argument it
        // copies, or the argument a result updates).
        auto copyAttrs = [&](llvm::StringRef key, int64_t index) {
          mlir::NamedAttrList attrs;
          attrs.set(KilnDialect::kRoleAttrName,
                    RoleAttr::get(ctx, Role::parameter_copy));
          attrs.set(KilnDialect::kNameAttrName,
                    mlir::StringAttr::get(ctx, copyName));
          attrs.set(key, mlir::IntegerAttr::get(
                             mlir::IntegerType::get(ctx, 64), index));
          return attrs.getDictionary(ctx);
        };
        unsigned copyArg = func.getNumArguments();
        func.insertArgument(copyArg, copyType,
                            copyAttrs(KilnDialect::kCopyOfAttrName, arg),
                            func.getArgument(arg).getLoc());
        Value copy = func.getArgument(copyArg);
        for (ConvertOp convert : uses) {
          convert.getResult().replaceAllUsesWith(copy);
          convert.erase();
        }
        // The updated copy: the convert of the updated parameter.
        mlir::OpBuilder b(ret);
        Value updated = ret.getOperand(update->second);
        Value newCopy = b.create<ConvertOp>(updated.getLoc(), copyType, updated);
        unsigned result = func.getNumResults();
        func.insertResult(result, copyType,
                          copyAttrs(KilnDialect::kUpdatesAttrName, copyArg));
        ret->insertOperands(result, newCopy);
      }
    }
  }
};

} // namespace
} // namespace kiln
