//===- AccumulateGradients.cpp - K micro-batches in one training step -----===//
//
// Gradient accumulation as a rewrite of the step: after kiln-autodiff, a
// function that returns gradients is turned into one that takes K times the
// rows on each batch argument (its `input` and `label` arguments, batch
// first), runs its whole forward and backward computation K times, once per
// slice of B rows (micro-batch k reads rows [k*B, (k+1)*B)), and returns
// the mean of the K gradients and of the K losses. So each step consumes
// K*B samples per rank while activations are only ever held for B.
//
// Why the mean: with a loss that is a mean over the batch (every loss the
// zoo builds: kiln.reduce mean, softmax_cross_entropy's mean), the gradient
// of one batch of K*B rows is the mean of the K micro-batches' gradients,
// (1/KB) * sum over rows = (1/K) * sum_k (1/B) * sum over micro-batch k, so
// the step equals one step on the batch of K*B, up to rounding. A loss that
// is a sum over the batch would need the sum of the gradients instead: the
// mean then equals the gradient of the K*B batch divided by K (as if the
// learning rate were divided by K). PyTorch leaves that choice to the user
// (loss / K before backward); here the step is always the mean.
//
// Why a rewrite of the function rather than a loop: every later pass sees
// plain IR. kiln-distribute then finds the accumulated gradients (produced
// in the last micro-batch's backward order) and buckets them, so the
// collectives run once per step, after the last micro-batch's gradients;
// kiln-apply-optimizer updates once with the mean.
//
// Memory: the clones are emitted one after the other, and each gradient is
// added to its running sum right after micro-batch k produces it, so
// micro-batch k's activations and gradients die before micro-batch k + 1
// starts; only the running sums (one buffer per parameter, as the gradients
// themselves) cross micro-batches. Two things would undo that, so each
// running-sum step and each row slice is made its own kernel here (a
// kiln.fusion, which kiln-fuse leaves alone): kiln-fuse would merge the
// chain of adds into one kernel that reads all K parts (keeping every
// micro-batch's gradients alive until the last), and would merge the K
// slices of an argument into one multi-output kernel (they read the same
// input), which makes every micro-batch's rows live from the start.
// kiln-schedule then keeps the micro-batches in order unless it finds an
// order with a lower peak.
//
// Other results: a result with role `output` and the batch dimension first
// is concatenated (the K*B rows in order); any other float output is
// averaged; an integer output without a batch dimension is refused. Model
// state (a batch norm's running statistics, #kiln.role<model_state>) is
// updated once per micro-batch, in order, as K forward passes in PyTorch
// update it K times: micro-batch k reads what micro-batch k - 1 wrote, and
// the step returns the last micro-batch's update.
// Randomness: micro-batch k's kiln.dropout and kiln.random_uniform ops
// (forward and backward, which must agree) get seed + k * kSeedStride, so
// the micro-batches draw different masks and numbers (with the same seed
// they would all drop the same elements); micro-batch 0 keeps the model's
// seeds.
//
//===----------------------------------------------------------------------===//

#include "ir/KilnOps.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"

#define DEBUG_TYPE "kiln-accumulate-gradients"

namespace kiln {
#define GEN_PASS_DEF_KILNACCUMULATEGRADIENTS
#include "passes/Passes.h.inc"

namespace {

using mlir::Operation;
using mlir::Value;

std::optional<Role> roleOf(mlir::func::FuncOp func, unsigned result) {
  auto role =
      func.getResultAttrOfType<RoleAttr>(result, KilnDialect::kRoleAttrName);
  if (!role)
    return std::nullopt;
  return role.getValue();
}

// Far apart seeds for the micro-batches' dropout masks (the 64-bit golden
// ratio, as splitmix64 steps its state).
constexpr uint64_t kSeedStride = 0x9E3779B97F4A7C15ull;

// How one result of the step combines its K values.
enum class Combine { sum, mean, concat, chain };

// A kernel of its own: a kiln.fusion (kind loop) over |inputs| with one
// result of |type|, which |build| makes from the body's arguments.
Value ownKernel(mlir::OpBuilder &b, mlir::Location loc, mlir::Type type,
                mlir::ValueRange inputs,
                llvm::function_ref<Value(mlir::OpBuilder &, mlir::ValueRange)>
                    build) {
  auto fusion =
      b.create<FusionOp>(loc, mlir::TypeRange{type}, FusionKind::loop, inputs);
  mlir::Block *body = new mlir::Block();
  fusion.getBody().push_back(body);
  for (Value input : inputs)
    body->addArgument(input.getType(), loc);
  mlir::OpBuilder inner = mlir::OpBuilder::atBlockEnd(body);
  inner.create<YieldOp>(loc, build(inner, body->getArguments()));
  return fusion.getResult(0);
}

class AccumulateGradients
    : public impl::KilnAccumulateGradientsBase<AccumulateGradients> {
public:
  using KilnAccumulateGradientsBase::KilnAccumulateGradientsBase;

  void runOnOperation() override {
    mlir::ModuleOp module = getOperation();
    if (gradAccum < 1) {
      module.emitError() << "kiln-accumulate-gradients: grad-accum="
                         << static_cast<int64_t>(gradAccum)
                         << ": expected at least 1 micro-batch per step";
      return signalPassFailure();
    }
    if (gradAccum == 1)
      return;
    for (auto func : module.getOps<mlir::func::FuncOp>())
      if (!func.isExternal() && mlir::failed(accumulate(func)))
        return signalPassFailure();
  }

private:
  mlir::LogicalResult accumulate(mlir::func::FuncOp func) {
    const int64_t k = gradAccum;
    bool hasGradients = false;
    for (unsigned i = 0, e = func.getNumResults(); i < e; ++i)
      hasGradients |= roleOf(func, i) == Role::gradient;
    if (!hasGradients)
      return mlir::success(); // a forward function: one batch as it is
    if (!func.getBody().hasOneBlock())
      return func.emitOpError() << "kiln-accumulate-gradients: expected a "
                                   "body of one block, found "
                                << func.getBody().getBlocks().size();
    mlir::Block &block = func.getBody().front();
    auto ret = mlir::dyn_cast<mlir::func::ReturnOp>(block.getTerminator());
    if (!ret || ret->getNumOperands() != func.getNumResults())
      return func.emitOpError() << "kiln-accumulate-gradients: expected the "
                                   "body to end in a func.return of every "
                                   "result";

    // The batch arguments and their common batch size B.
    llvm::SmallVector<unsigned> batchArgs;
    int64_t batch = -1;
    for (unsigned i = 0, e = func.getNumArguments(); i < e; ++i) {
      auto role =
          func.getArgAttrOfType<RoleAttr>(i, KilnDialect::kRoleAttrName);
      if (!role ||
          (role.getValue() != Role::input && role.getValue() != Role::label))
        continue;
      auto type =
          llvm::dyn_cast<mlir::RankedTensorType>(func.getArgument(i).getType());
      if (!type || type.getRank() == 0 || type.isDynamicDim(0))
        return func.emitOpError()
               << "kiln-accumulate-gradients: batch argument " << i
               << " must be a tensor with a static batch dimension first, but "
                  "is "
               << func.getArgument(i).getType();
      if (batch >= 0 && type.getDimSize(0) != batch)
        return func.emitOpError()
               << "kiln-accumulate-gradients: batch argument " << i
               << " has " << type.getDimSize(0) << " rows, expected " << batch
               << " (the batch dimension of the other batch arguments)";
      batch = type.getDimSize(0);
      batchArgs.push_back(i);
    }
    if (batchArgs.empty())
      return func.emitOpError()
             << "kiln-accumulate-gradients: grad-accum=" << k
             << " needs a batch to split, but @" << func.getName()
             << " has no input or label argument";

    // How each result combines; for model state, (result, the argument it
    // updates).
    llvm::SmallVector<Combine> combine;
    llvm::SmallVector<std::pair<unsigned, Value>> chained;
    for (unsigned i = 0, e = func.getNumResults(); i < e; ++i) {
      auto type =
          llvm::dyn_cast<mlir::RankedTensorType>(func.getResultTypes()[i]);
      if (!type)
        return func.emitOpError() << "kiln-accumulate-gradients: result " << i
                                  << " is not a ranked tensor";
      std::optional<Role> role = roleOf(func, i);
      bool isFloat = llvm::isa<mlir::FloatType>(type.getElementType());
      if (role == Role::gradient)
        combine.push_back(Combine::sum);
      else if (role == Role::model_state) {
        auto updates = func.getResultAttrOfType<mlir::IntegerAttr>(
            i, KilnDialect::kUpdatesAttrName);
        if (!updates || updates.getInt() < 0 ||
            updates.getInt() >= func.getNumArguments() ||
            func.getArgument(updates.getInt()).getType() != type)
          return func.emitOpError()
                 << "kiln-accumulate-gradients: model_state result " << i
                 << " needs kiln.updates naming an argument of its type";
        combine.push_back(Combine::chain);
        chained.push_back({i, func.getArgument(updates.getInt())});
      } else if (role == Role::loss)
        combine.push_back(Combine::mean);
      else if (type.getRank() > 0 && type.getDimSize(0) == batch)
        combine.push_back(Combine::concat);
      else if (isFloat)
        combine.push_back(Combine::mean);
      else
        return func.emitOpError()
               << "kiln-accumulate-gradients: result " << i << " ("
               << type << ") has no batch dimension of " << batch
               << " rows to concatenate and is not a float to average over "
                  "the micro-batches";
    }

    llvm::SmallVector<Operation *> body;
    for (Operation &op : block.without_terminator())
      body.push_back(&op);

    // The batch arguments take K*B rows.
    for (unsigned i : batchArgs) {
      Value arg = func.getArgument(i);
      auto type = llvm::cast<mlir::RankedTensorType>(arg.getType());
      llvm::SmallVector<int64_t> shape(type.getShape());
      shape[0] = batch * k;
      arg.setType(type.clone(shape));
    }

    mlir::OpBuilder b(ret);
    // Per result: its running value (sum) or the K values (concat).
    llvm::SmallVector<Value> running(func.getNumResults());
    llvm::SmallVector<llvm::SmallVector<Value>> parts(func.getNumResults());
    for (int64_t m = 0; m < k; ++m) {
      b.setInsertionPoint(ret);
      mlir::IRMapping map;
      // Model state: what the micro-batch before wrote.
      if (m > 0)
        for (auto [result, arg] : chained)
          map.map(arg, running[result]);
      for (unsigned i : batchArgs) {
        Value arg = func.getArgument(i);
        auto type = llvm::cast<mlir::RankedTensorType>(arg.getType());
        llvm::SmallVector<int64_t> start(type.getRank(), 0);
        llvm::SmallVector<int64_t> limit(type.getShape());
        llvm::SmallVector<int64_t> strides(type.getRank(), 1);
        start[0] = m * batch;
        limit[0] = (m + 1) * batch;
        llvm::SmallVector<int64_t> rows(type.getShape());
        rows[0] = batch;
        map.map(arg, ownKernel(b, arg.getLoc(), type.clone(rows), arg,
                               [&](mlir::OpBuilder &in, mlir::ValueRange v) {
                                 return in.create<SliceOp>(
                                     arg.getLoc(), v[0],
                                     in.getDenseI64ArrayAttr(start),
                                     in.getDenseI64ArrayAttr(limit),
                                     in.getDenseI64ArrayAttr(strides));
                               }));
      }
      Operation *firstOfClone = nullptr;
      for (Operation *op : body) {
        Operation *copy = b.clone(*op, map);
        if (!firstOfClone)
          firstOfClone = copy;
        if (m > 0)
          copy->walk([&](Operation *random) {
            auto reseed = [&](auto op) {
              uint64_t seed = static_cast<uint64_t>(op.getSeed()) +
                              static_cast<uint64_t>(m) * kSeedStride;
              op.setSeedAttr(b.getI64IntegerAttr(static_cast<int64_t>(seed)));
            };
            if (auto dropout = dyn_cast<DropoutOp>(random))
              reseed(dropout);
            else if (auto uniform = dyn_cast<RandomUniformOp>(random))
              reseed(uniform);
          });
      }
      // Each sum grows right after micro-batch m produces its part, so the
      // part dies at once (and the last micro-batch's sums complete in its
      // backward order, which kiln-distribute's buckets follow).
      for (unsigned i = 0, e = func.getNumResults(); i < e; ++i) {
        Value part = map.lookupOrDefault(ret->getOperand(i));
        if (combine[i] == Combine::concat) {
          parts[i].push_back(part);
          continue;
        }
        if (m == 0 || combine[i] == Combine::chain) {
          running[i] = part;
          continue;
        }
        Operation *def = part.getDefiningOp();
        if (def && def->getBlock() == &block &&
            !def->isBeforeInBlock(firstOfClone ? firstOfClone : def))
          b.setInsertionPointAfter(def);
        else
          b.setInsertionPoint(ret);
        // The last one also divides by K: the mean of the K parts.
        bool last = m + 1 == k;
        running[i] = ownKernel(
            b, part.getLoc(), part.getType(), {running[i], part},
            [&](mlir::OpBuilder &in, mlir::ValueRange v) -> Value {
              auto type = llvm::cast<mlir::RankedTensorType>(part.getType());
              Value sum = in.create<AddOp>(part.getLoc(), type, v[0], v[1]);
              if (!last)
                return sum;
              mlir::Attribute count = in.getFloatAttr(type.getElementType(),
                                                      static_cast<double>(k));
              Value divisor = in.create<ConstantOp>(
                  part.getLoc(), type, mlir::DenseElementsAttr::get(type, count));
              return in.create<DivOp>(part.getLoc(), type, sum, divisor);
            });
      }
    }

    // The combined results; the result types follow (concatenated outputs
    // have K*B rows).
    b.setInsertionPoint(ret);
    llvm::SmallVector<Value> results;
    for (unsigned i = 0, e = func.getNumResults(); i < e; ++i) {
      if (combine[i] != Combine::concat) {
        results.push_back(running[i]);
        continue;
      }
      auto type = llvm::cast<mlir::RankedTensorType>(parts[i].front().getType());
      llvm::SmallVector<int64_t> shape(type.getShape());
      shape[0] = batch * k;
      results.push_back(b.create<ConcatenateOp>(ret.getLoc(), type.clone(shape),
                                                parts[i], /*dimension=*/0));
    }
    ret->setOperands(results);
    for (Operation *op : llvm::reverse(body))
      op->erase();
    func.setFunctionType(mlir::FunctionType::get(
        func.getContext(), block.getArgumentTypes(), ret->getOperandTypes()));
    return mlir::success();
  }
};

} // namespace
} // namespace kiln
