//===- KilnDialect.cpp - the kiln dialect ---------------------------------===//
//
// Registers the ops and attributes and checks the dialect's argument and
// result attributes (kiln.role, kiln.init, kiln.name) wherever they appear.
//
//===----------------------------------------------------------------------===//

#include "ir/KilnDialect.h"
#include "ir/KilnOps.h"
#include "ir/ShapeRules.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Transforms/InliningUtils.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace kiln;

#include "ir/KilnDialect.cpp.inc"
#include "ir/KilnEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "ir/KilnAttrs.cpp.inc"

namespace {
// Every kiln op is a pure function of its operands (or a collective, which
// stays in order when inlined), so calls can be inlined freely.
struct KilnInlinerInterface : public DialectInlinerInterface {
  using DialectInlinerInterface::DialectInlinerInterface;
  bool isLegalToInline(Operation *, Region *, bool, IRMapping &) const final {
    return true;
  }
  bool isLegalToInline(Region *, Region *, bool, IRMapping &) const final {
    return true;
  }
};
} // namespace

void KilnDialect::initialize() {
  addInterfaces<KilnInlinerInterface>();
  addOperations<
#define GET_OP_LIST
#include "ir/KilnOps.cpp.inc"
      >();
  registerAttributes();
}

void KilnDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "ir/KilnAttrs.cpp.inc"
      >();
}

namespace {
// Names argument or result |index| of |op| for a message: "argument 2 of
// @main" when |op| is a symbol (a function), else "argument 2".
std::string describeValue(Operation *op, StringRef kind, unsigned index) {
  std::string text = (kind + " " + Twine(index)).str();
  if (auto symbol = dyn_cast<SymbolOpInterface>(op))
    text += (" of @" + symbol.getName()).str();
  return text;
}

// Checks one kiln.* attribute of argument or result |index| of |op|.
LogicalResult verifyValueAttr(Operation *op, StringRef kindName, unsigned index,
                              NamedAttribute attr) {
  std::string kind = describeValue(op, kindName, index);
  StringRef name = attr.getName().getValue();
  if (name == KilnDialect::kRoleAttrName) {
    if (!isa<RoleAttr>(attr.getValue()))
      return op->emitError() << kind << ": '" << name
                             << "' must be a #kiln.role<...>, but is "
                             << attr.getValue();
    // Every value of a model has a role; an argument no op reads would
    // otherwise reach the runtime's size arithmetic unchecked.
    if (auto func = dyn_cast<FunctionOpInterface>(op)) {
      ArrayRef<Type> types =
          kindName == "argument" ? func.getArgumentTypes() : func.getResultTypes();
      if (index < types.size())
        if (std::string e = tensorLimitsError(types[index]); !e.empty())
          return op->emitError() << kind << ": " << e;
    }
    return success();
  }
  if (name == KilnDialect::kInitAttrName) {
    if (!isa<InitializerAttr>(attr.getValue()))
      return op->emitError() << kind << ": '" << name
                             << "' must be a #kiln.init<...>, but is "
                             << attr.getValue();
    return success();
  }
  if (name == KilnDialect::kNameAttrName) {
    if (!isa<StringAttr>(attr.getValue()))
      return op->emitError() << kind << ": '" << name
                             << "' must be a string, but is " << attr.getValue();
    return success();
  }
  if (name == KilnDialect::kGradOfAttrName || name == KilnDialect::kUpdatesAttrName ||
      name == KilnDialect::kCopyOfAttrName) {
    // All three name an argument of the function by index.
    auto target = dyn_cast<IntegerAttr>(attr.getValue());
    auto func = dyn_cast<func::FuncOp>(op);
    if (!target || (func && (target.getInt() < 0 ||
                             target.getInt() >= func.getNumArguments())))
      return op->emitError() << kind << ": '" << name
                             << "' must be the index of an argument, but is "
                             << attr.getValue();
    return success();
  }
  if (name == KilnDialect::kIndexBoundAttrName) {
    // A bound on the values of an integer data argument.
    auto bound = dyn_cast<IntegerAttr>(attr.getValue());
    Type element;
    RoleAttr role;
    if (auto func = dyn_cast<FunctionOpInterface>(op);
        func && kindName == "argument" && index < func.getNumArguments()) {
      if (auto tensor = dyn_cast<ShapedType>(func.getArgumentTypes()[index]))
        element = tensor.getElementType();
      role = func.getArgAttrOfType<RoleAttr>(index, KilnDialect::kRoleAttrName);
    }
    if (kindName != "argument" || !bound || bound.getInt() < 1 ||
        (element && !isa<IntegerType>(element)) ||
        (role && role.getValue() != Role::input && role.getValue() != Role::label))
      return op->emitError() << kind << ": '" << name
                             << "' must be an integer of at least 1 on an "
                                "integer input or label argument, but is "
                             << attr.getValue();
    return success();
  }
  if (name == "kiln.shard") {
    // A ZeRO shard (kiln-distribute zero1/2/3): bucket, world_size, length
    // and params [{name, offset, shape, init?}], on an argument.
    auto dict = dyn_cast<DictionaryAttr>(attr.getValue());
    if (kindName != "argument" || !dict || !dict.getAs<IntegerAttr>("bucket") ||
        !dict.getAs<IntegerAttr>("world_size") ||
        !dict.getAs<IntegerAttr>("length") || !dict.getAs<ArrayAttr>("params"))
      return op->emitError()
             << kind << ": '" << name
             << "' must be a dictionary {bucket, world_size, length, params} "
                "on an argument, but is "
             << attr.getValue();
    return success();
  }
  return op->emitError() << kind << ": unknown attribute '"
                         << name
                         << "' (expected kiln.role, kiln.init, kiln.name, "
                            "kiln.grad_of, kiln.updates, kiln.copy_of, "
                            "kiln.index_bound or kiln.shard)";
}
} // namespace

std::string kiln::tensorLimitsError(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor || !tensor.hasStaticShape() || !tensor.getElementType().isIntOrFloat())
    return "";
  int64_t bytes = (tensor.getElementType().getIntOrFloatBitWidth() + 7) / 8;
  return shape::checkLimits(tensor.getShape(), bytes);
}

LogicalResult kiln::verifyTensorLimits(Operation *op) {
  for (auto [i, v] : llvm::enumerate(op->getOperands()))
    if (std::string e = tensorLimitsError(v.getType()); !e.empty())
      return op->emitOpError() << "operand #" << i << ": " << e;
  for (auto [i, v] : llvm::enumerate(op->getResults()))
    if (std::string e = tensorLimitsError(v.getType()); !e.empty())
      return op->emitOpError() << "result #" << i << ": " << e;
  return success();
}

LogicalResult KilnDialect::verifyRegionArgAttribute(Operation *op, unsigned,
                                                    unsigned argIndex,
                                                    NamedAttribute attr) {
  return verifyValueAttr(op, "argument", argIndex, attr);
}

LogicalResult KilnDialect::verifyRegionResultAttribute(Operation *op, unsigned,
                                                       unsigned resultIndex,
                                                       NamedAttribute attr) {
  return verifyValueAttr(op, "result", resultIndex, attr);
}

LogicalResult KilnDialect::verifyOperationAttribute(Operation *op,
                                                    NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  if (name == kTrainingAttrName) {
    // The training section belongs to the whole model, which is the module.
    if (!isa<ModuleOp>(op))
      return op->emitError() << "'" << kTrainingAttrName
                             << "' must be on the module, but is on a '"
                             << op->getName() << "' op";
    if (!isa<TrainingAttr>(attr.getValue()))
      return op->emitError() << "'" << kTrainingAttrName
                             << "' must be a #kiln.training<...>, but is "
                             << attr.getValue();
    return success();
  }
  if (name == "kiln.strategy" || name == "kiln.world_size") {
    // Set by kiln-distribute for the package metadata, on the module.
    bool ok = isa<ModuleOp>(op) &&
              (name == "kiln.strategy"
                   ? isa<StringAttr>(attr.getValue())
                   : isa<IntegerAttr>(attr.getValue()) &&
                         cast<IntegerAttr>(attr.getValue()).getInt() >= 1);
    if (!ok)
      return op->emitError() << "'" << name << "' must be "
                             << (name == "kiln.strategy"
                                     ? "a string"
                                     : "an integer of at least 1")
                             << " on the module, but is " << attr.getValue()
                             << " on a '" << op->getName() << "' op";
    return success();
  }
  if (name == "kiln.prefetch" || name == "kiln.issue_together") {
    // Scheduling rules kiln-distribute puts on collectives for
    // kiln-schedule (passes/Passes.h): a prefetch depth of 0 or more on an
    // all_gather; issue_together (unit) on any collective.
    bool prefetch = name == "kiln.prefetch";
    auto depth = dyn_cast<IntegerAttr>(attr.getValue());
    bool ok = prefetch ? isa<AllGatherOp>(op) && depth && depth.getInt() >= 0
                       : isa<AllReduceOp, ReduceScatterOp, AllGatherOp,
                             CollectiveBroadcastOp>(op) &&
                             isa<UnitAttr>(attr.getValue());
    if (!ok)
      return op->emitError()
             << "'" << name << "' must be "
             << (prefetch ? "an integer of at least 0 on a 'kiln.all_gather'"
                          : "a unit attribute on a collective")
             << ", but is " << attr.getValue() << " on a '" << op->getName()
             << "' op";
    return success();
  }
  if (name == "kiln.remat") {
    // kiln-autodiff's recomputed clones (remat=dots; passes/Rematerialize.h),
    // until kiln-fuse: a unit attribute on a pure op.
    if (!isa<UnitAttr>(attr.getValue()) || !isMemoryEffectFree(op))
      return op->emitError() << "'kiln.remat' must be a unit attribute on an "
                                "op without side effects, but is "
                             << attr.getValue() << " on a '" << op->getName()
                             << "' op";
    return success();
  }
  if (name == kBufferOffsetsAttrName || name == kAliasesAttrName) {
    // One entry per result, -1 or more (an offset or an argument index).
    auto array = dyn_cast<DenseI64ArrayAttr>(attr.getValue());
    if (!array || array.size() != static_cast<int64_t>(op->getNumResults()))
      return op->emitError() << "'" << name << "' must be an array<i64> with one "
                             << "entry per result (" << op->getNumResults()
                             << "), but is " << attr.getValue();
    for (int64_t entry : array.asArrayRef())
      if (entry < -1)
        return op->emitError() << "'" << name << "' entries must be -1 or more, "
                               << "but one is " << entry;
    return success();
  }
  if (name == kArenaBytesAttrName || name == kPeakBytesAttrName ||
      name == kLowerBoundBytesAttrName || name == "kiln.remat_candidates") {
    auto bytes = dyn_cast<IntegerAttr>(attr.getValue());
    if (!isa<func::FuncOp>(op) || !bytes || bytes.getInt() < 0)
      return op->emitError() << "'" << name << "' must be a non-negative "
                             << "integer on a function, but is " << attr.getValue()
                             << " on a '" << op->getName() << "' op";
    return success();
  }
  InFlightDiagnostic diag = op->emitError()
                            << "unknown attribute '" << name << "' on a '"
                            << op->getName()
                            << "' op (the kiln dialect puts kiln.training on the "
                               "module and the buffer plan, kiln.buffer_offsets, "
                               "kiln.aliases, kiln.arena_bytes, kiln.peak_bytes "
                               "and kiln.lower_bound_bytes, and kiln-autodiff's "
                               "kiln.remat_candidates, on functions and ops";
  if (name == kRoleAttrName || name == kInitAttrName || name == kNameAttrName ||
      name == kGradOfAttrName || name == kUpdatesAttrName ||
      name == kCopyOfAttrName)
    diag << "; '" << name << "' belongs on a function argument or result";
  diag << ")";
  return diag;
}
