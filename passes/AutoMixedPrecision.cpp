//===- AutoMixedPrecision.cpp - bf16/fp16 compute, f32 master weights -----===//
//
// Rewrites a model's forward graph so that its matrix work runs in bf16 or
// fp16 while everything numerically delicate stays in f32, in the spirit of
// TensorFlow's auto_mixed_precision graph rewrite. Ops fall in four lists:
//
//   allow  matmuls, convolutions and fused attention: always low precision
//          (their libraries accumulate in f32 and round the result once;
//          kiln.attention's log-sum-exp result stays f32, as the op
//          requires);
//   deny   exp, log, pow, softmax, log_softmax, softmax_cross_entropy,
//          layer_norm and every reduce (sums and means feed the loss and
//          norms' statistics): always f32;
//   infer  elementwise ops (kiln.gelu and its backward kiln.gelu_grad among
//          them: a GELU's gradient runs in the GELU's precision, as one op
//          that computes in f32 inside) and data movement: follow their
//          inputs: f32 when an input comes from a deny op (an f32 decision
//          propagates, as TensorFlow's "infer after deny" does), low
//          precision when an input is low precision, otherwise untouched;
//   other  everything else: f32.
//
// Each list is an op-name list the user can override (`allow=`, `deny=`,
// `infer=`), which is why they are names and not interfaces: the user's flag
// speaks in op names, as TensorFlow's lists do.
//
// Where it runs: on the forward graph, before kiln-autodiff. Casts are
// kiln.convert ops, whose gradient is a convert back, so autodiff builds the
// backward pass in the same precisions (a bf16 matmul's gradient matmuls are
// bf16), and every parameter gradient comes out in the parameter's type,
// f32: parameters stay f32 arguments (master weights), each use converts
// them, and kiln-apply-optimizer updates them and the f32 optimizer state as
// before. A value read in low precision by several ops gets one convert per
// use, so their gradients are converted to f32 before autodiff adds them
// up: gradients accumulate in f32 (a GEMM accumulates in f32 internally and
// rounds each weight gradient once; so does the reduce that sums a
// broadcast bias's gradient, the broadcast being converted at its input so
// that the bias stays a GEMM epilogue's 1-D vector). CSE after autodiff merges the duplicate
// forward converts, and every convert is elementwise, so kiln-fuse puts it
// into its producer's or its consumer's kernel.
//
// fp16 (not bf16, whose range is f32's) also gets dynamic loss scaling:
// the pass adds the scale and its counters as optimizer-state arguments
// (passes/LossScale.h); kiln-autodiff seeds the backward pass with the scale
// and kiln-apply-optimizer unscales, checks, skips and updates.
//
//===----------------------------------------------------------------------===//

#include "ir/KilnOps.h"
#include "passes/LossScale.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringMap.h"

#define DEBUG_TYPE "kiln-auto-mixed-precision"

namespace kiln {
#define GEN_PASS_DEF_KILNAUTOMIXEDPRECISION
#include "passes/Passes.h.inc"

namespace {

using namespace mlir;

enum class Category { allow, deny, infer, other };
// What a value's precision was decided by: nothing (arguments, constants,
// f32 work on them), a low-precision op, or an f32 (deny) decision.
enum class Precision { neutral, low, high };

constexpr llvm::StringLiteral kDefaultAllow[] = {
    "dot_general", "conv2d", "conv2d_input_grad", "conv2d_filter_grad",
    "attention"};
constexpr llvm::StringLiteral kDefaultDeny[] = {
    "exp",         "log",        "log1p",
    "pow",         "softmax",    "log_softmax",
    "softmax_cross_entropy",     "layer_norm",
    "reduce"};
// Besides every op with the Elementwise trait.
constexpr llvm::StringLiteral kDefaultInfer[] = {
    "reshape", "transpose", "broadcast_in_dim", "slice",      "concatenate",
    "pad",     "gather",    "max_pool2d",       "avg_pool2d", "dropout"};

bool isF32Tensor(Type type) {
  auto t = dyn_cast<RankedTensorType>(type);
  return t && t.getElementType().isF32();
}

bool isFloatTensor(Type type) {
  auto t = dyn_cast<RankedTensorType>(type);
  return t && isa<FloatType>(t.getElementType());
}

Type withElement(Type type, Type element) {
  return cast<RankedTensorType>(type).clone(element);
}

// Attention's row statistics (the log-sum-exp) are f32 whatever the
// precision of q, k and v: kiln.attention's lse result and
// kiln.attention_grad's lse operand keep their type when the op goes low.
bool keepsF32(Operation *op, Value v) {
  if (auto attention = dyn_cast<AttentionOp>(op))
    return v == attention.getLse();
  if (auto grad = dyn_cast<AttentionGradOp>(op))
    return v == grad.getLse();
  if (auto packed = dyn_cast<AttentionQkvOp>(op))
    return v == packed.getLse();
  if (auto packedGrad = dyn_cast<AttentionQkvGradOp>(op))
    return v == packedGrad.getLse();
  return false;
}

struct AutoMixedPrecisionPass
    : impl::KilnAutoMixedPrecisionBase<AutoMixedPrecisionPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    MLIRContext *ctx = &getContext();
    Type low;
    if (amp == "bf16")
      low = BFloat16Type::get(ctx);
    else if (amp == "fp16")
      low = Float16Type::get(ctx);
    else {
      module.emitError() << "kiln-auto-mixed-precision: amp=" << amp
                         << ": expected bf16 or fp16";
      return signalPassFailure();
    }
    if (failed(readOverrides(module)))
      return signalPassFailure();
    for (auto func : module.getOps<func::FuncOp>()) {
      if (func.isExternal())
        continue;
      if (!func.getBody().hasOneBlock()) {
        func.emitError() << "kiln-auto-mixed-precision: @" << func.getName()
                         << " has " << func.getBlocks().size()
                         << " blocks; expected one";
        return signalPassFailure();
      }
      rewrite(func, low);
      if (lossScaling && low.isF16() && hasLoss(func))
        addLossScaleState(func);
    }
  }

  // Reads the allow=, deny= and infer= lists into |overrides|.
  LogicalResult readOverrides(ModuleOp module) {
    struct List {
      const ListOption<std::string> &names;
      Category category;
      llvm::StringLiteral flag;
    };
    List lists[] = {{allow, Category::allow, "allow"},
                    {deny, Category::deny, "deny"},
                    {infer, Category::infer, "infer"}};
    for (const List &list : lists) {
      for (const std::string &raw : list.names) {
        llvm::StringRef name = llvm::StringRef(raw).trim();
        name.consume_front("kiln.");
        if (!RegisteredOperationName::lookup(("kiln." + name).str(),
                                             module.getContext()))
          return module.emitError()
                 << "kiln-auto-mixed-precision: " << list.flag << "=" << raw
                 << ": expected the name of a kiln op (such as dot_general "
                    "or exp), found '"
                 << raw << "'";
        auto [it, inserted] = overrides.try_emplace(name, list.category);
        if (!inserted && it->second != list.category)
          return module.emitError() << "kiln-auto-mixed-precision: '" << name
                                    << "' is named in two lists; expected "
                                       "each op in at most one";
      }
    }
    return success();
  }

  Category categoryOf(Operation *op) const {
    llvm::StringRef name = op->getName().stripDialect();
    if (auto it = overrides.find(name); it != overrides.end())
      return it->second;
    if (llvm::is_contained(kDefaultAllow, name))
      return Category::allow;
    if (llvm::is_contained(kDefaultDeny, name))
      return Category::deny;
    if (op->hasTrait<OpTrait::Elementwise>() ||
        llvm::is_contained(kDefaultInfer, name))
      return Category::infer;
    return Category::other;
  }

  static bool hasLoss(func::FuncOp func) {
    for (unsigned i = 0, e = func.getNumResults(); i < e; ++i) {
      auto role = func.getResultAttrOfType<RoleAttr>(i, KilnDialect::kRoleAttrName);
      if (role && role.getValue() == Role::loss)
        return true;
    }
    return false;
  }

  void rewrite(func::FuncOp func, Type low) {
    Block &body = func.getBody().front();
    llvm::DenseMap<Value, Precision> precision;
    auto precisionOf = [&](Value v) { return precision.lookup(v); };
    OpBuilder b(func.getContext());
    // One convert per use (see the file comment): gradients of the uses are
    // then converted before they are added up.
    auto convertUse = [&](Operation *op, OpOperand &use, Type element) {
      b.setInsertionPoint(op);
      Value v = use.get();
      use.set(b.create<ConvertOp>(op->getLoc(), withElement(v.getType(), element), v));
    };
    Type f32 = b.getF32Type();

    SmallVector<Operation *> ops;
    for (Operation &op : body.without_terminator())
      ops.push_back(&op);
    for (Operation *op : ops) {
      // A convert the model wrote keeps its result type; it reads any type.
      if (isa<ConvertOp>(op))
        continue;
      bool anyLow = false, anyHigh = false;
      // Only f32 work (and values this pass made low) is retyped; an op
      // with other float types, or with regions, keeps its types.
      bool retypable = op->getNumRegions() == 0;
      for (Value v : op->getOperands()) {
        Precision p = precisionOf(v);
        anyLow |= p == Precision::low;
        anyHigh |= p == Precision::high;
        if (isFloatTensor(v.getType()) && !isF32Tensor(v.getType()) &&
            p != Precision::low)
          retypable = false;
      }
      for (Type t : op->getResultTypes())
        if (isFloatTensor(t) && !isF32Tensor(t))
          retypable = false;

      Precision target = Precision::neutral;
      switch (categoryOf(op)) {
      case Category::allow:
        target = Precision::low;
        break;
      case Category::deny:
        target = Precision::high;
        break;
      case Category::infer:
        target = anyHigh  ? Precision::high
                 : anyLow ? Precision::low
                          : Precision::neutral;
        break;
      case Category::other:
        target = Precision::neutral;
        break;
      }
      bool hasFloat = llvm::any_of(op->getOperandTypes(), isFloatTensor) ||
                      llvm::any_of(op->getResultTypes(), isFloatTensor);
      if (target == Precision::low && retypable && hasFloat) {
        for (OpOperand &use : op->getOpOperands()) {
          if (!isF32Tensor(use.get().getType()) || keepsF32(op, use.get()))
            continue;
          // Broadcasting (or reshaping) an f32 value only for this op:
          // convert its input instead, so the cast touches the small tensor
          // and the broadcast stays visible (a GEMM epilogue's bias). The
          // op's own sum accumulates at least in f32 (kiln.reduce), so the
          // gradient is still summed in f32 and rounded once.
          Operation *def = use.get().getDefiningOp();
          if (def && isa<BroadcastInDimOp, ReshapeOp>(def) &&
              use.get().hasOneUse() &&
              precisionOf(use.get()) == Precision::neutral &&
              isF32Tensor(def->getOperand(0).getType())) {
            convertUse(def, def->getOpOperand(0), low);
            use.get().setType(withElement(use.get().getType(), low));
            precision[use.get()] = Precision::low;
            continue;
          }
          convertUse(op, use, low);
        }
        for (Value result : op->getResults())
          if (isF32Tensor(result.getType()) && !keepsF32(op, result)) {
            result.setType(withElement(result.getType(), low));
            precision[result] = Precision::low;
          }
        continue;
      }
      // Computed in f32 (or in the model's own types): low inputs go back.
      for (OpOperand &use : op->getOpOperands())
        if (precisionOf(use.get()) == Precision::low)
          convertUse(op, use, f32);
      if (target == Precision::high)
        for (Value result : op->getResults())
          if (isFloatTensor(result.getType()))
            precision[result] = Precision::high;
    }
    // The function's results keep their types (the loss, logits, ...).
    Operation *ret = body.getTerminator();
    for (OpOperand &use : ret->getOpOperands())
      if (precisionOf(use.get()) == Precision::low)
        convertUse(ret, use, f32);
  }

  // Adds the fp16 loss scale and its counters as optimizer state.
  void addLossScaleState(func::FuncOp func) {
    MLIRContext *ctx = func.getContext();
    if (findStateArgument(func, kLossScaleName) >= 0)
      return; // already scaled (the pass ran before)
    auto scalar = RankedTensorType::get({}, Float32Type::get(ctx));
    auto add = [&](llvm::StringRef name, InitKind kind, double value) {
      NamedAttrList attrs;
      attrs.set(KilnDialect::kRoleAttrName, RoleAttr::get(ctx, Role::optimizer_state));
      attrs.set(KilnDialect::kInitAttrName,
                InitializerAttr::get(ctx, kind, llvm::APFloat(value),
                                     llvm::APFloat(1.0), 0));
      attrs.set(KilnDialect::kNameAttrName, StringAttr::get(ctx, name));
      func.insertArgument(func.getNumArguments(), scalar,
                          attrs.getDictionary(ctx), func.getLoc());
    };
    add(kLossScaleName, InitKind::constant, kInitialLossScale);
    add(kLossScaleGoodStepsName, InitKind::zeros, 0.0);
    add(kLossScaleSkippedStepsName, InitKind::zeros, 0.0);
  }

  llvm::StringMap<Category> overrides;
};

} // namespace
} // namespace kiln
