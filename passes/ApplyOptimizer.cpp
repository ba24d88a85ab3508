//===- ApplyOptimizer.cpp - gradients -> parameter and state updates ------===//
//
// The optimizer is graph computation, so it is fused, scheduled and planned
// with the rest of the step, and a learning-rate schedule needs no
// recompilation: the rate is computed in the graph from the step counter.
// See the pass description in passes/Passes.td for the exact update rules;
// they follow torch.optim operation by operation so that one step matches
// it in f32.
//
//===----------------------------------------------------------------------===//

#include "ir/KilnOps.h"
#include "passes/LossScale.h"
#include "passes/Passes.h"

#include "mlir/IR/Builders.h"

#include <cmath>

#define DEBUG_TYPE "kiln-apply-optimizer"

namespace kiln {
#define GEN_PASS_DEF_KILNAPPLYOPTIMIZER
#include "passes/Passes.h.inc"

namespace {

using mlir::Value;

// Builds kiln ops on tensors of one element type; scalars are 0-d tensors
// broadcast on use.
class UpdateBuilder {
public:
  UpdateBuilder(mlir::OpBuilder &b, mlir::Location loc) : b(b), loc(loc) {}

  Value scalar(double v, mlir::Type element) {
    auto type = mlir::RankedTensorType::get({}, element);
    mlir::Attribute attr;
    if (llvm::isa<mlir::FloatType>(element))
      attr = mlir::DenseElementsAttr::get(type, b.getFloatAttr(element, v));
    else
      attr = mlir::DenseElementsAttr::get(
          type, b.getIntegerAttr(element, static_cast<int64_t>(v)));
    return b.create<ConstantOp>(loc, llvm::cast<mlir::ElementsAttr>(attr));
  }
  // Broadcasts a 0-d tensor to |like|'s type (identity if already equal).
  Value splat(Value s, Value like) {
    if (s.getType() == like.getType())
      return s;
    return b.create<BroadcastInDimOp>(loc, like.getType(), s,
                                      b.getDenseI64ArrayAttr({}));
  }
  Value splat(double v, Value like) {
    return splat(scalar(v, elementOf(like)), like);
  }
  Value convertScalar(Value s, mlir::Type element) {
    auto type = mlir::RankedTensorType::get({}, element);
    if (s.getType() == type)
      return s;
    return b.create<ConvertOp>(loc, type, s);
  }
  Value add(Value x, Value y) { return b.create<AddOp>(loc, x, y); }
  Value sub(Value x, Value y) { return b.create<SubOp>(loc, x, y); }
  Value mul(Value x, Value y) { return b.create<MulOp>(loc, x, y); }
  Value div(Value x, Value y) { return b.create<DivOp>(loc, x, y); }
  Value min(Value x, Value y) { return b.create<MinOp>(loc, x, y); }
  Value max(Value x, Value y) { return b.create<MaxOp>(loc, x, y); }
  Value sqrt(Value x) { return b.create<SqrtOp>(loc, x); }
  Value cos(Value x) { return b.create<CosOp>(loc, x); }
  Value pow(Value x, Value y) { return b.create<PowOp>(loc, x, y); }
  Value sumAll(Value x) {
    auto type = llvm::cast<mlir::RankedTensorType>(x.getType());
    llvm::SmallVector<int64_t> dims;
    for (int64_t d = 0; d < type.getRank(); ++d)
      dims.push_back(d);
    return b.create<ReduceOp>(loc, ReduceKind::sum, x, b.getDenseI64ArrayAttr(dims));
  }
  static mlir::Type elementOf(Value v) {
    return llvm::cast<mlir::ShapedType>(v.getType()).getElementType();
  }

  mlir::OpBuilder &b;
  mlir::Location loc;
};

struct ApplyOptimizerPass : impl::KilnApplyOptimizerBase<ApplyOptimizerPass> {
  using Base::Base;

  void runOnOperation() override {
    mlir::ModuleOp module = getOperation();
    mlir::FailureOr<TrainingAttr> training = resolveTraining(module);
    if (mlir::failed(training))
      return signalPassFailure();
    module->setAttr(KilnDialect::kTrainingAttrName, *training);
    for (auto func : module.getOps<mlir::func::FuncOp>())
      if (!func.isExternal() && mlir::failed(rewrite(func, *training)))
        return signalPassFailure();
  }

  // The module's kiln.training with every set pass option applied.
  mlir::FailureOr<TrainingAttr> resolveTraining(mlir::ModuleOp module) {
    mlir::MLIRContext *ctx = module.getContext();
    auto base = module->getAttrOfType<TrainingAttr>(KilnDialect::kTrainingAttrName);
    if (!base)
      base = TrainingAttr::get(ctx, OptimizerKind::sgd, llvm::APFloat(0.01),
                               llvm::APFloat(0.0), false, llvm::APFloat(0.9),
                               llvm::APFloat(0.999), llvm::APFloat(1e-8),
                               llvm::APFloat(0.0), llvm::APFloat(0.0),
                               LrSchedule::constant, 0, 0);
    OptimizerKind kind = base.getOptimizer();
    if (!optimizer.empty()) {
      auto parsed = symbolizeOptimizerKind(optimizer);
      if (!parsed)
        return module.emitError() << "unknown optimizer '" << optimizer
                                  << "' (expected sgd, momentum, adam or adamw)";
      kind = *parsed;
    }
    LrSchedule sched = base.getSchedule();
    if (!schedule.empty()) {
      auto parsed = symbolizeLrSchedule(schedule);
      if (!parsed)
        return module.emitError() << "unknown learning-rate schedule '" << schedule
                                  << "' (expected constant, warmup_cosine or "
                                     "warmup_linear)";
      sched = *parsed;
    }
    auto pick = [](double flag, llvm::APFloat value) {
      return flag >= 0 ? llvm::APFloat(flag) : value;
    };
    // Momentum SGD with a momentum of 0 would be plain SGD: choosing the
    // momentum optimizer without a factor means the usual 0.9.
    llvm::APFloat momentumValue = pick(momentum, base.getMomentum());
    if (kind == OptimizerKind::momentum && momentumValue.isZero())
      momentumValue = llvm::APFloat(0.9);
    auto attr = TrainingAttr::get(
        ctx, kind, pick(learningRate, base.getLearningRate()),
        momentumValue,
        nesterov >= 0 ? nesterov != 0 : base.getNesterov(),
        pick(beta1, base.getBeta1()), pick(beta2, base.getBeta2()),
        pick(epsilon, base.getEpsilon()), pick(weightDecay, base.getWeightDecay()),
        pick(clipNorm, base.getClipNorm()), sched,
        warmupSteps >= 0 ? warmupSteps : base.getWarmupSteps(),
        totalSteps >= 0 ? totalSteps : base.getTotalSteps());
    if (attr.getLearningRate().convertToDouble() <= 0)
      return module.emitError() << "the learning rate must be positive, but is "
                                << attr.getLearningRate().convertToDouble();
    if (attr.getSchedule() != LrSchedule::constant &&
        attr.getTotalSteps() <= attr.getWarmupSteps())
      return module.emitError()
             << "schedule " << stringifyLrSchedule(attr.getSchedule())
             << " needs total-steps (" << attr.getTotalSteps()
             << ") greater than warmup-steps (" << attr.getWarmupSteps() << ")";
    return attr;
  }

  // The learning rate at |step| (0-d i64) as a 0-d f64 tensor. Scalar
  // hyper-parameter arithmetic is done in f64, as torch.optim does it in
  // Python floats, and rounded once where it meets the parameters.
  Value buildLearningRate(UpdateBuilder &u, Value step, TrainingAttr t) {
    mlir::Type scalarType = mlir::Float64Type::get(step.getContext());
    double peak = t.getLearningRate().convertToDouble();
    if (t.getSchedule() == LrSchedule::constant)
      return u.scalar(peak, scalarType);
    double warmup = static_cast<double>(t.getWarmupSteps());
    double total = static_cast<double>(t.getTotalSteps());
    Value s = u.convertScalar(step, scalarType);
    Value one = u.scalar(1.0, scalarType), zero = u.scalar(0.0, scalarType);
    // Warm-up factor min(1, (step + 1) / warmup).
    Value warm = one;
    if (warmup > 0)
      warm = u.min(one, u.div(u.add(s, one), u.scalar(warmup, scalarType)));
    // Decay progress clamp((step - warmup) / (total - warmup), 0, 1).
    Value progress = u.div(u.sub(s, u.scalar(warmup, scalarType)),
                           u.scalar(total - warmup, scalarType));
    progress = u.max(zero, u.min(one, progress));
    Value decay;
    if (t.getSchedule() == LrSchedule::warmup_cosine)
      decay = u.mul(u.scalar(0.5, scalarType),
                    u.add(one, u.cos(u.mul(u.scalar(M_PI, scalarType), progress))));
    else
      decay = u.sub(one, progress);
    return u.mul(u.scalar(peak, scalarType), u.mul(warm, decay));
  }

  mlir::LogicalResult rewrite(mlir::func::FuncOp func, TrainingAttr t) {
    mlir::MLIRContext *ctx = func.getContext();
    mlir::Block &body = func.getBody().front();
    auto ret = llvm::cast<mlir::func::ReturnOp>(body.getTerminator());

    // Which results are gradients, and of which argument.
    struct Grad {
      unsigned result;
      unsigned arg;
    };
    llvm::SmallVector<Grad> grads;
    for (unsigned i = 0, e = func.getNumResults(); i < e; ++i) {
      auto role = func.getResultAttrOfType<RoleAttr>(i, KilnDialect::kRoleAttrName);
      if (!role || role.getValue() != Role::gradient)
        continue;
      auto of = func.getResultAttrOfType<mlir::IntegerAttr>(i, KilnDialect::kGradOfAttrName);
      if (!of || of.getInt() < 0 ||
          of.getInt() >= static_cast<int64_t>(func.getNumArguments()))
        return func.emitError() << "gradient result " << i
                                << " needs a kiln.grad_of naming an argument";
      grads.push_back({i, static_cast<unsigned>(of.getInt())});
    }
    if (grads.empty())
      return mlir::success();

    mlir::OpBuilder b(ret);
    UpdateBuilder u(b, func.getLoc());
    auto i64Scalar = mlir::RankedTensorType::get({}, mlir::IntegerType::get(ctx, 64));

    // Existing argument and result attributes, to extend.
    llvm::SmallVector<mlir::DictionaryAttr> argAttrs, resultAttrs;
    func.getAllArgAttrs(argAttrs);
    func.getAllResultAttrs(resultAttrs);
    if (argAttrs.empty())
      argAttrs.assign(func.getNumArguments(), mlir::DictionaryAttr::get(ctx));
    if (resultAttrs.empty())
      resultAttrs.assign(func.getNumResults(), mlir::DictionaryAttr::get(ctx));

    auto zerosInit = InitializerAttr::get(ctx, InitKind::zeros, llvm::APFloat(0.0),
                                          llvm::APFloat(1.0), 0);
    auto addArg = [&](mlir::Type type, Role role, llvm::StringRef name) {
      Value arg = body.addArgument(type, func.getLoc());
      mlir::NamedAttrList attrs;
      attrs.set(KilnDialect::kRoleAttrName, RoleAttr::get(ctx, role));
      attrs.set(KilnDialect::kInitAttrName, zerosInit);
      attrs.set(KilnDialect::kNameAttrName, mlir::StringAttr::get(ctx, name));
      argAttrs.push_back(attrs.getDictionary(ctx));
      return arg;
    };

    // The step counter: reuse an existing step argument, else add one.
    Value step;
    unsigned stepArg = 0;
    for (unsigned i = 0, e = func.getNumArguments(); i < e; ++i) {
      auto role = func.getArgAttrOfType<RoleAttr>(i, KilnDialect::kRoleAttrName);
      if (role && role.getValue() == Role::step) {
        step = body.getArgument(i);
        stepArg = i;
      }
    }
    if (!step) {
      stepArg = body.getNumArguments();
      step = addArg(i64Scalar, Role::step, "step");
    }

    mlir::Type scalarType = mlir::Float64Type::get(ctx); // scalar arithmetic type
    Value lr = buildLearningRate(u, step, t);
    double wd = t.getWeightDecay().convertToDouble();
    double clip = t.getClipNorm().convertToDouble();

    llvm::SmallVector<Value> gradValues;
    for (const Grad &g : grads)
      gradValues.push_back(ret.getOperand(g.result));
    // Under ZeRO (kiln-distribute zero1/2/3) the gradients are this rank's
    // shards (`kiln.shard` arguments): a sum over all gradients (the global
    // norm, the inf/NaN check) is summed over the ranks too, so every rank
    // clips and skips alike.
    bool sharded = llvm::any_of(grads, [&](const Grad &g) {
      return func.getArgAttr(g.arg, "kiln.shard") != nullptr;
    });
    auto acrossRanks = [&](Value total) -> Value {
      if (!sharded)
        return total;
      return b.create<AllReduceOp>(func.getLoc(), total.getType(),
                                   ReduceKind::sum, total, /*groups=*/nullptr);
    };
    // fp16 loss scaling (passes/LossScale.h): unscale, and note whether
    // every gradient is finite; |finite| (0-d i1) then gates the updates.
    Value finite;
    int scaleArg = findStateArgument(func, kLossScaleName);
    int goodArg = findStateArgument(func, kLossScaleGoodStepsName);
    int skippedArg = findStateArgument(func, kLossScaleSkippedStepsName);
    if (scaleArg >= 0) {
      if (goodArg < 0 || skippedArg < 0)
        return func.emitError() << "@" << func.getName() << " has a '"
                                << kLossScaleName << "' argument but no '"
                                << (goodArg < 0 ? kLossScaleGoodStepsName
                                                : kLossScaleSkippedStepsName)
                                << "' optimizer state";
      Value scale = body.getArgument(scaleArg);
      // The scale is a power of two, so multiplying by its inverse is exact.
      Value inverse = u.div(u.scalar(1.0, UpdateBuilder::elementOf(scale)), scale);
      Value total = u.scalar(0.0, scalarType);
      for (Value &g : gradValues) {
        g = u.mul(g, u.splat(u.convertScalar(inverse, UpdateBuilder::elementOf(g)), g));
        // x * 0 is 0 for a finite x and NaN for inf or NaN.
        total = u.add(total, u.convertScalar(u.sumAll(u.mul(g, u.splat(0.0, g))),
                                             scalarType));
      }
      finite = b.create<CompareOp>(func.getLoc(), CompareDirection::eq,
                                   acrossRanks(total), u.scalar(0.0, scalarType));
    }

    if (clip > 0) {
      // scale = min(1, clip / (sqrt(sum of squares) + 1e-6)).
      Value total = u.scalar(0.0, scalarType);
      for (Value g : gradValues)
        total = u.add(total, u.convertScalar(u.sumAll(u.mul(g, g)), scalarType));
      Value norm = u.sqrt(acrossRanks(total));
      Value scale = u.min(u.scalar(1.0, scalarType),
                          u.div(u.scalar(clip, scalarType), u.add(norm, u.scalar(1e-6, scalarType))));
      for (Value &g : gradValues)
        g = u.mul(g, u.splat(u.convertScalar(scale, UpdateBuilder::elementOf(g)), g));
    }

    // Bias corrections 1 - beta^(step+1), computed once.
    Value bc1, bc2;
    bool adam = t.getOptimizer() == OptimizerKind::adam ||
                t.getOptimizer() == OptimizerKind::adamw;
    double b1 = t.getBeta1().convertToDouble(), b2 = t.getBeta2().convertToDouble();
    if (adam) {
      Value t1 = u.add(u.convertScalar(step, scalarType), u.scalar(1.0, scalarType));
      bc1 = u.sub(u.scalar(1.0, scalarType), u.pow(u.scalar(b1, scalarType), t1));
      bc2 = u.sub(u.scalar(1.0, scalarType), u.pow(u.scalar(b2, scalarType), t1));
    }

    struct Update {
      Value value;
      unsigned arg;
      Role role;
    };
    // Updated parameters come first, then optimizer state, then the step.
    llvm::SmallVector<Update> paramUpdates, updates;
    for (auto [g, grad] : llvm::zip(gradValues, grads)) {
      Value p = body.getArgument(grad.arg);
      mlir::Type el = UpdateBuilder::elementOf(p);
      std::string name = "param";
      if (auto n = func.getArgAttrOfType<mlir::StringAttr>(grad.arg,
                                                           KilnDialect::kNameAttrName))
        name = n.str();
      Value lrP = u.splat(u.convertScalar(lr, el), p);
      bool decoupled = t.getOptimizer() == OptimizerKind::adamw;
      if (wd > 0 && !decoupled)
        g = u.add(g, u.mul(p, u.splat(wd, p)));
      Value newP;
      switch (t.getOptimizer()) {
      case OptimizerKind::sgd:
        newP = u.sub(p, u.mul(lrP, g));
        break;
      case OptimizerKind::momentum: {
        double mu = t.getMomentum().convertToDouble();
        unsigned bufArg = body.getNumArguments();
        Value buf = addArg(p.getType(), Role::optimizer_state, name + ".momentum_buffer");
        Value newBuf = u.add(u.mul(buf, u.splat(mu, p)), g);
        Value d = t.getNesterov() ? u.add(g, u.mul(newBuf, u.splat(mu, p))) : newBuf;
        newP = u.sub(p, u.mul(lrP, d));
        updates.push_back({newBuf, bufArg, Role::optimizer_state});
        break;
      }
      case OptimizerKind::adam:
      case OptimizerKind::adamw: {
        Value pIn = p;
        if (decoupled && wd > 0) // p *= 1 - lr * wd
          pIn = u.mul(p, u.sub(u.splat(1.0, p), u.mul(lrP, u.splat(wd, p))));
        unsigned mArg = body.getNumArguments();
        Value m = addArg(p.getType(), Role::optimizer_state, name + ".exp_avg");
        unsigned vArg = body.getNumArguments();
        Value v = addArg(p.getType(), Role::optimizer_state, name + ".exp_avg_sq");
        Value newM = u.add(u.mul(m, u.splat(b1, p)), u.mul(g, u.splat(1.0 - b1, p)));
        Value newV = u.add(u.mul(v, u.splat(b2, p)),
                           u.mul(u.mul(g, g), u.splat(1.0 - b2, p)));
        // torch: denom = sqrt(v) / sqrt(bc2) + eps; p -= (lr / bc1) * m / denom
        Value denom = u.add(
            u.div(u.sqrt(newV), u.splat(u.convertScalar(u.sqrt(bc2), el), p)),
            u.splat(t.getEpsilon().convertToDouble(), p));
        Value stepSize = u.splat(u.convertScalar(u.div(lr, bc1), el), p);
        newP = u.sub(pIn, u.mul(stepSize, u.div(newM, denom)));
        updates.push_back({newM, mArg, Role::optimizer_state});
        updates.push_back({newV, vArg, Role::optimizer_state});
        break;
      }
      }
      paramUpdates.push_back({newP, grad.arg, Role::parameter});
    }
    updates.insert(updates.begin(), paramUpdates.begin(), paramUpdates.end());
    if (finite) {
      // A step with an inf or NaN gradient keeps every parameter and all
      // optimizer state.
      for (Update &up : updates) {
        Value old = body.getArgument(up.arg);
        auto type = llvm::cast<mlir::RankedTensorType>(old.getType());
        Value pred = finite;
        if (type.getRank() != 0)
          pred = b.create<BroadcastInDimOp>(func.getLoc(),
                                            type.clone(b.getI1Type()), finite,
                                            b.getDenseI64ArrayAttr({}));
        up.value = b.create<SelectOp>(func.getLoc(), pred, up.value, old);
      }
      // Then the scale: halve it on a skip, double it after
      // kLossScaleGrowthInterval finite steps in a row (up to kMaxLossScale).
      Value scale = body.getArgument(scaleArg);
      Value good = body.getArgument(goodArg);
      Value skipped = body.getArgument(skippedArg);
      auto select = [&](Value pred, Value a, Value c) -> Value {
        return b.create<SelectOp>(func.getLoc(), pred, a, c);
      };
      mlir::Type el = UpdateBuilder::elementOf(scale);
      Value goodNext = u.add(good, u.scalar(1.0, UpdateBuilder::elementOf(good)));
      Value grow = b.create<CompareOp>(
          func.getLoc(), CompareDirection::ge, goodNext,
          u.scalar(kLossScaleGrowthInterval, UpdateBuilder::elementOf(good)));
      Value grown = u.min(u.mul(scale, u.scalar(2.0, el)), u.scalar(kMaxLossScale, el));
      Value newScale = select(finite, select(grow, grown, scale),
                              u.mul(scale, u.scalar(0.5, el)));
      Value zeroGood = u.scalar(0.0, UpdateBuilder::elementOf(good));
      Value newGood = select(finite, select(grow, zeroGood, goodNext), zeroGood);
      Value newSkipped =
          select(finite, skipped,
                 u.add(skipped, u.scalar(1.0, UpdateBuilder::elementOf(skipped))));
      updates.push_back({newScale, static_cast<unsigned>(scaleArg),
                         Role::optimizer_state});
      updates.push_back({newGood, static_cast<unsigned>(goodArg),
                         Role::optimizer_state});
      updates.push_back({newSkipped, static_cast<unsigned>(skippedArg),
                         Role::optimizer_state});
    }
    // The step counter advances even on a skipped step (as TensorFlow's
    // LossScaleOptimizer's iterations do), so it always counts the steps
    // `kiln train` ran and a resumed run sets it the same way.
    Value nextStep = u.add(step, u.scalar(1.0, i64Scalar.getElementType()));
    updates.push_back({nextStep, stepArg, Role::step});

    // New results: the non-gradient results, then every update.
    llvm::SmallVector<Value> results;
    llvm::SmallVector<mlir::DictionaryAttr> newResultAttrs;
    for (unsigned i = 0, e = ret.getNumOperands(); i < e; ++i) {
      if (llvm::any_of(grads, [&](const Grad &g) { return g.result == i; }))
        continue;
      results.push_back(ret.getOperand(i));
      newResultAttrs.push_back(resultAttrs[i]);
    }
    for (const Update &up : updates) {
      results.push_back(up.value);
      mlir::NamedAttrList attrs;
      attrs.set(KilnDialect::kRoleAttrName, RoleAttr::get(ctx, up.role));
      if (auto n = llvm::dyn_cast_or_null<mlir::StringAttr>(
              argAttrs[up.arg].get(KilnDialect::kNameAttrName)))
        attrs.set(KilnDialect::kNameAttrName, n);
      attrs.set(KilnDialect::kUpdatesAttrName, b.getI64IntegerAttr(up.arg));
      newResultAttrs.push_back(attrs.getDictionary(ctx));
    }
    b.create<mlir::func::ReturnOp>(ret.getLoc(), results);
    ret.erase();

    llvm::SmallVector<mlir::Type> resultTypes;
    for (Value v : results)
      resultTypes.push_back(v.getType());
    func.setFunctionType(mlir::FunctionType::get(ctx, body.getArgumentTypes(),
                                                 resultTypes));
    func.setAllArgAttrs(argAttrs);
    func.setAllResultAttrs(newResultAttrs);
    return mlir::success();
  }
};

} // namespace
} // namespace kiln
