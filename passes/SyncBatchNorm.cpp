//===- SyncBatchNorm.cpp - batch norm statistics of the global batch ------===//
//
// Under a data-parallel strategy each rank normalizes with the statistics
// of its own batch (PyTorch DDP's default). With `--sync-batch-norm`
// (PyTorch's SyncBatchNorm, tf.keras BatchNormalization(synchronized=True),
// Flax's BatchNorm(axis_name=...)) every rank normalizes with the
// statistics of the global batch, so N ranks of batch B compute what one
// rank of batch N*B computes: the losses, the gradients and the running
// statistics.
//
// What a batch statistic is: the training value of a kiln.mode_select whose
// eval value is a model-state argument (a running mean or variance: the way
// kiln's builders, `kiln import` and the zoo write a batch norm,
// docs/training.md). It must be a kiln.reduce mean (or sum) whose dimensions
// include 0, the batch dimension; anything else is an error naming the op,
// since the user asked for global statistics and would silently get local
// ones.
//
// A batch norm's pair, mean m = mean(x) and variance v = mean((x - m)^2),
// takes one collective, as SyncBatchNorm's forward does: each rank computes
// its own m_r and v_r (two passes, about its own mean), all-gathers
// [m_r, v_r] from the N ranks, and combines them (Chan et al.'s parallel
// variance; every rank has B samples):
//
//   m = mean_r(m_r)        v = mean_r(v_r) + mean_r((m_r - m)^2)
//
// which is exact, with no E[x^2] - E[x]^2 cancellation. Every use of the
// pair (the normalization, the running-statistic updates) reads m and v. A
// statistic outside such a pair becomes `kiln.all_reduce` of its own kind
// (exact too: a mean over the global batch of a per-sample function of x
// and of global statistics is the mean over ranks of each rank's mean). A
// statistic computed from another reduction over the batch that is not
// itself a statistic (a local mean centring it) would not be global; that is
// refused.
//
// Backward: the pass runs before kiln-autodiff, which differentiates the
// all-gather into a reduce-scatter sum (and an all-reduce into the same
// all-reduce: ir/gradients/Collectives.cpp), so each rank's backward pass
// gets every rank's contribution to the statistics' gradients in one
// collective per batch norm, as SyncBatchNorm's backward all-reduces sum(dy)
// and sum(dy * xmu).
//
// Running variance: PyTorch updates it with the unbiased batch variance,
// v * n / (n - 1) with n the number of values per channel, which kiln's
// builders bake into the update's constant (momentum * n / (n - 1), with the
// rank's own n). The global n is N times the rank's (`world-size`, which a
// data-parallel package is compiled for), so the constant becomes momentum
// times the global n / (n - 1). The update is recognized as
// `variance * constant` feeding only model state: when its constant is the
// mean's update's times n / (n - 1) it is corrected; when the two are equal
// (a biased update, as Keras writes it) it is left alone; otherwise a
// warning says the correction keeps the rank's own n.
//
// Runs on the model graph, before kiln-resolve-mode: kiln.mode_select is
// what identifies the statistics. The eval step (running statistics) has no
// collective, so rank 0 can evaluate alone.
//
//===----------------------------------------------------------------------===//

#include "ir/KilnOps.h"
#include "ir/gradients/GradientUtils.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/MapVector.h"

#include <cmath>

#define DEBUG_TYPE "kiln-sync-batch-norm"

namespace kiln {
#define GEN_PASS_DEF_KILNSYNCBATCHNORM
#include "passes/Passes.h.inc"

namespace {

using mlir::Value;

// One batch statistic: its local reduction and the number of values per
// element the rank reduces.
struct BatchStatistic {
  ReduceOp reduce;
  int64_t count = 1;
  // A running-statistic update read as `statistic * constant`.
  MulOp update;
  double constant = 0;
  // For a variance about a batch mean, that mean; for that mean, the
  // variance.
  std::optional<unsigned> meanOf, varianceOf;
  // For a variance about a batch mean that could not be paired with it
  // (each is all-reduced), that mean.
  std::optional<unsigned> centredBy;
  // What the statistic's uses read after the pass.
  Value global;
};

bool isModelStateArgument(mlir::func::FuncOp func, Value value) {
  auto arg = llvm::dyn_cast<mlir::BlockArgument>(value);
  if (!arg || arg.getOwner() != &func.getBody().front())
    return false;
  auto role = func.getArgAttrOfType<RoleAttr>(arg.getArgNumber(),
                                              KilnDialect::kRoleAttrName);
  return role && role.getValue() == Role::model_state;
}

// Whether every path from |value| ends in a model-state result of |func|.
bool feedsOnlyModelState(mlir::func::FuncOp func, Value value) {
  llvm::SmallVector<Value> work{value};
  llvm::DenseSet<Value> seen;
  while (!work.empty()) {
    Value v = work.pop_back_val();
    if (!seen.insert(v).second)
      continue;
    for (mlir::OpOperand &use : v.getUses()) {
      mlir::Operation *user = use.getOwner();
      if (llvm::isa<mlir::func::ReturnOp>(user)) {
        auto role = func.getResultAttrOfType<RoleAttr>(
            use.getOperandNumber(), KilnDialect::kRoleAttrName);
        if (!role || role.getValue() != Role::model_state)
          return false;
        continue;
      }
      if (user->getNumResults() == 0)
        return false;
      for (Value result : user->getResults())
        work.push_back(result);
    }
  }
  return true;
}

bool closeTo(double a, double b) {
  return std::abs(a - b) <= 1e-6 * std::max(std::abs(a), std::abs(b));
}

struct SyncBatchNormPass : impl::KilnSyncBatchNormBase<SyncBatchNormPass> {
  using KilnSyncBatchNormBase::KilnSyncBatchNormBase;

  void runOnOperation() override {
    if (worldSize < 1) {
      getOperation().emitError()
          << "kiln-sync-batch-norm: world-size="
          << static_cast<int64_t>(worldSize)
          << ": expected at least 1";
      return signalPassFailure();
    }
    for (auto func : getOperation().getOps<mlir::func::FuncOp>()) {
      if (func.isExternal())
        continue;
      if (mlir::failed(synchronize(func)))
        return signalPassFailure();
    }
  }

  mlir::LogicalResult synchronize(mlir::func::FuncOp func) {
    // The batch statistics, in program order.
    llvm::MapVector<mlir::Operation *, BatchStatistic> found;
    mlir::WalkResult walk = func.walk([&](ModeSelectOp select) {
      if (!isModelStateArgument(func, select.getEval()))
        return mlir::WalkResult::advance();
      auto reduce = select.getTraining().getDefiningOp<ReduceOp>();
      bool overBatch = reduce && llvm::is_contained(reduce.getDimensions(), 0);
      bool average = reduce && (reduce.getKind() == ReduceKind::mean ||
                                reduce.getKind() == ReduceKind::sum);
      if (!reduce || !overBatch || !average ||
          !grad::isFloatTensor(reduce.getResult())) {
        mlir::InFlightDiagnostic diag = select.emitError();
        diag << "kiln-sync-batch-norm: this kiln.mode_select pairs a running "
                "statistic with a training value that is not a float "
                "kiln.reduce mean or sum over the batch dimension (0), so it "
                "cannot be computed over the global batch; found ";
        if (mlir::Operation *def = select.getTraining().getDefiningOp())
          diag << def->getName() << " at " << def->getLoc();
        else
          diag << "an argument";
        return mlir::WalkResult::interrupt();
      }
      if (!found.count(reduce)) {
        BatchStatistic stat;
        stat.reduce = reduce;
        auto operandType = llvm::cast<mlir::RankedTensorType>(
            reduce.getOperand().getType());
        for (int64_t d : reduce.getDimensions())
          stat.count *= operandType.getDimSize(d);
        found[reduce] = stat;
      }
      return mlir::WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return mlir::failure();
    if (found.empty()) {
      if (func.isPublic())
        mlir::emitWarning(func.getLoc())
            << "kiln-sync-batch-norm: @" << func.getName()
            << " has no batch norm (no kiln.mode_select beside a running "
               "statistic), so there is nothing to synchronize";
      return mlir::success();
    }
    llvm::SmallVector<BatchStatistic> stats;
    llvm::DenseMap<mlir::Operation *, unsigned> index;
    for (auto &[op, stat] : found) {
      index[op] = stats.size();
      stats.push_back(stat);
    }

    // A statistic may read others (a variance reads the mean), never a
    // reduction over the batch that stays local: each value is marked with
    // the local batch reduction it is computed from, in program order.
    llvm::DenseMap<Value, ReduceOp> localFrom;
    for (mlir::Operation &op : func.getBody().front().without_terminator()) {
      auto reduce = llvm::dyn_cast<ReduceOp>(op);
      ReduceOp from;
      for (Value operand : op.getOperands())
        if (ReduceOp r = localFrom.lookup(operand)) {
          from = r;
          break;
        }
      if (reduce && index.count(reduce)) {
        if (from)
          return from.emitError()
                 << "kiln-sync-batch-norm: this reduction over the batch "
                    "dimension (0) feeds the batch statistic at "
                 << reduce.getLoc()
                 << " but is not itself a batch statistic (the training "
                    "value of a kiln.mode_select with a running statistic), "
                    "so the statistic would not be the global batch's";
        continue;
      }
      if (reduce && llvm::is_contained(reduce.getDimensions(), 0))
        from = reduce;
      if (from)
        for (Value result : op.getResults())
          localFrom[result] = from;
    }

    // Batch norms' pairs: v = mean((x - broadcast(m))^2), m = mean(x), over
    // the same dimensions, as PyTorch defines a batch norm's variance.
    for (unsigned i = 0, e = stats.size(); i < e; ++i) {
      BatchStatistic &stat = stats[i];
      auto square = stat.reduce.getOperand().getDefiningOp<MulOp>();
      if (!square || square.getLhs() != square.getRhs())
        continue;
      auto centred = square.getLhs().getDefiningOp<SubOp>();
      auto spread = centred ? centred.getRhs().getDefiningOp<BroadcastInDimOp>()
                            : BroadcastInDimOp();
      auto it = spread ? index.find(spread.getOperand().getDefiningOp())
                       : index.end();
      if (it == index.end())
        continue;
      BatchStatistic &mean = stats[it->second];
      if (mean.reduce.getOperand() != centred.getLhs() ||
          mean.reduce.getKind() != ReduceKind::mean ||
          stat.reduce.getKind() != ReduceKind::mean || mean.varianceOf ||
          mean.reduce.getDimensions() != stat.reduce.getDimensions() ||
          mean.reduce.getType() != stat.reduce.getType())
        continue;
      stat.meanOf = it->second;
      // One all-gather for the pair when the variance's ops feed nothing
      // but the variance (so they can read the local mean) and the mean's
      // other uses come after the variance (the global pair is built
      // there); otherwise each statistic gets its own all-reduce, the
      // variance's about the global mean.
      bool exclusive = spread->hasOneUse() && square->hasOneUse() &&
                       llvm::all_of(centred->getUsers(), [&](mlir::Operation *u) {
                         return u == square.getOperation();
                       });
      bool after = llvm::all_of(mean.reduce->getUsers(), [&](mlir::Operation *u) {
        return u == spread.getOperation() || stats[i].reduce->isBeforeInBlock(u);
      });
      if (exclusive && after)
        mean.varianceOf = i;
      else
        stat.meanOf.reset(), stat.centredBy = it->second;
    }

    // The running statistics' updates, `statistic * constant`.
    for (BatchStatistic &stat : stats)
      for (mlir::Operation *user : stat.reduce.getResult().getUsers()) {
        auto mul = llvm::dyn_cast<MulOp>(user);
        if (!mul)
          continue;
        Value other = mul.getLhs() == stat.reduce.getResult() ? mul.getRhs()
                                                              : mul.getLhs();
        std::optional<double> c = splatOf(other);
        if (!c || !feedsOnlyModelState(func, mul.getResult()))
          continue;
        stat.update = mul;
        stat.constant = *c;
        break;
      }

    mlir::OpBuilder b(func.getContext());
    unsigned pairs = 0, alone = 0;
    for (BatchStatistic &stat : stats) {
      if (stat.meanOf)
        continue; // built with its mean
      // A statistic alone is all-reduced right after it is reduced; a
      // variance's ops then read its mean's all-reduce.
      mlir::Location loc = stat.reduce.getLoc();
      Value local = stat.reduce.getResult();
      if (!stat.varianceOf) {
        b.setInsertionPointAfter(stat.reduce);
        auto reduced = b.create<AllReduceOp>(loc, local.getType(),
                                             stat.reduce.getKind(), local,
                                             /*groups=*/nullptr);
        localUses.insert(reduced);
        stat.global = reduced.getResult();
        ++alone;
        continue;
      }
      BatchStatistic &var = stats[*stat.varianceOf];
      stat.global = gatherPair(b, stat, var);
      ++pairs;
    }
    // Every use reads the global statistic: the mode_selects, the running
    // updates, the normalization (the pair's own local ops excepted).
    for (BatchStatistic &stat : stats) {
      Value local = stat.reduce.getResult();
      local.replaceUsesWithIf(stat.global, [&](mlir::OpOperand &use) {
        return !localUses.contains(use.getOwner());
      });
    }

    // Unbiased running variances: momentum * n / (n - 1) with the global n.
    unsigned corrected = 0;
    for (unsigned i = 0, e = stats.size(); i < e; ++i) {
      BatchStatistic &stat = stats[i];
      std::optional<unsigned> meanIndex =
          stat.meanOf ? stat.meanOf : stat.centredBy;
      bool isMean = stat.varianceOf ||
                    llvm::any_of(stats, [&](const BatchStatistic &other) {
                      return other.centredBy == i;
                    });
      if (!meanIndex && !isMean && stat.update)
        mlir::emitWarning(stat.reduce.getLoc())
            << "kiln-sync-batch-norm: this batch statistic updates model "
               "state but is neither the mean of a batch norm's variance nor "
               "that variance (mean((x - mean(x))^2)); if its update is an "
               "unbiased variance, its n / (n - 1) keeps the rank's own n ("
            << stat.count << ")";
      if (!meanIndex || !stat.update)
        continue;
      BatchStatistic &mean = stats[*meanIndex];
      double n = static_cast<double>(stat.count);
      double local = stat.count > 1 ? n / (n - 1) : 1.0;
      double global = n * static_cast<double>(worldSize);
      double unbiased = global > 1 ? global / (global - 1) : 1.0;
      if (!mean.update) {
        mlir::emitWarning(stat.reduce.getLoc())
            << "kiln-sync-batch-norm: the running update of this batch "
               "variance is not recognized beside its mean's; if it is "
               "unbiased, its n / (n - 1) keeps the rank's own n ("
            << stat.count << ")";
        continue;
      }
      if (closeTo(stat.constant, mean.constant))
        continue; // a biased update: the global variance as it is
      if (!closeTo(stat.constant, mean.constant * local)) {
        mlir::emitWarning(stat.reduce.getLoc())
            << "kiln-sync-batch-norm: the running update of this batch "
               "statistic scales it by "
            << stat.constant << ", neither its mean's " << mean.constant
            << " nor that times n / (n - 1) (n = " << stat.count
            << "); it keeps the rank's own n";
        continue;
      }
      b.setInsertionPoint(stat.update);
      Value factor = grad::splatLike(b, stat.update.getLoc(), stat.global,
                                     stat.constant / local * unbiased);
      unsigned operand = stat.update.getLhs() == stat.global ? 1 : 0;
      stat.update->setOperand(operand, factor);
      ++corrected;
    }
    func.emitRemark() << "kiln-sync-batch-norm: " << stats.size()
                      << " batch statistics of @" << func.getName()
                      << " computed over the global batch of "
                      << static_cast<int64_t>(worldSize)
                      << " ranks (" << pairs << " mean/variance pairs, one "
                      << "all_gather each; " << alone << " all_reduce), "
                      << corrected
                      << " running variance update(s) unbiased by the global "
                         "count";
    return mlir::success();
  }

  // A batch norm's mean and variance of the global batch from one
  // all-gather of every rank's [m_r, v_r], the variance about the rank's
  // own mean. Returns the mean; sets |var|.global.
  Value gatherPair(mlir::OpBuilder &b, BatchStatistic &mean,
                   BatchStatistic &var) {
    mlir::Location loc = var.reduce.getLoc();
    auto statType = llvm::cast<mlir::RankedTensorType>(mean.reduce.getType());
    int64_t channels = statType.getNumElements();
    int64_t world = worldSize;
    mlir::Type element = statType.getElementType();
    auto flatType = mlir::RankedTensorType::get({channels}, element);
    auto packedType = mlir::RankedTensorType::get({2 * channels}, element);
    auto gatheredType = mlir::RankedTensorType::get({world * 2 * channels}, element);
    auto tableType = mlir::RankedTensorType::get({world, 2 * channels}, element);
    auto perRankType = mlir::RankedTensorType::get({world, channels}, element);

    // The variance's own ops read the local mean: var.reduce is the rank's
    // variance about its own mean (they feed nothing else: pairable).
    localUses.insert(var.reduce.getOperand()
                         .getDefiningOp<MulOp>()
                         .getLhs()
                         .getDefiningOp<SubOp>()
                         .getRhs()
                         .getDefiningOp());
    b.setInsertionPointAfter(var.reduce);
    Value localVar = var.reduce.getResult();
    Value localMean = mean.reduce.getResult();
    llvm::SmallVector<Value, 2> parts;
    for (Value v : {localMean, localVar}) {
      Value flat = grad::reshape(b, loc, v, flatType);
      if (mlir::Operation *op = flat.getDefiningOp())
        localUses.insert(op);
      parts.push_back(flat);
    }
    auto packed = b.create<ConcatenateOp>(loc, packedType, parts, /*dimension=*/0);
    localUses.insert(packed);
    Value gathered = b.create<AllGatherOp>(loc, gatheredType, packed.getResult(),
                                           /*dimension=*/0, /*groups=*/nullptr);
    Value table = grad::reshape(b, loc, gathered, tableType);
    Value means = grad::slice(b, loc, table, {0, 0}, {world, channels}, {1, 1});
    Value vars =
        grad::slice(b, loc, table, {0, channels}, {world, 2 * channels}, {1, 1});
    assert(means.getType() == perRankType && vars.getType() == perRankType);
    (void)perRankType;
    // m = mean_r(m_r); v = mean_r(v_r) + mean_r((m_r - m)^2).
    Value globalMean = grad::reduce(b, loc, ReduceKind::mean, means, {0});
    Value apart = grad::sub(b, loc, means,
                            grad::broadcast(b, loc, globalMean, {1},
                                            llvm::cast<mlir::RankedTensorType>(
                                                means.getType())));
    Value spreadOfMeans = grad::reduce(b, loc, ReduceKind::mean,
                                       grad::mul(b, loc, apart, apart), {0});
    Value globalVar = grad::add(
        b, loc, grad::reduce(b, loc, ReduceKind::mean, vars, {0}), spreadOfMeans);
    var.global = grad::reshape(b, loc, globalVar, statType);
    return grad::reshape(b, loc, globalMean, statType);
  }

  // Ops that read a statistic's local value on purpose.
  llvm::DenseSet<mlir::Operation *> localUses;
};

} // namespace
} // namespace kiln
