//===- Rematerialize.cpp - recompute activations in the backward pass -----===//
//
// Activation checkpointing (PyTorch's torch.utils.checkpoint, JAX's
// jax.checkpoint with a policy, DeepSpeed's activation checkpointing), as a
// rewrite of the training step that kiln-autodiff has just built: the
// backward pass reads forward values (a layer norm's output for its weight
// gradient, a GELU's output for the next matmul's), and each such value is
// live from the forward op that makes it until the backward op that reads
// it, which is what the step's peak memory is made of. Under a policy, a
// forward value that is cheap to compute again is not kept: its forward
// ops are cloned right before the first backward op that reads it, from
// values that are kept anyway, and the backward pass reads the clones. The
// forward value then dies at its last forward use.
//
// Policy `dots` (JAX's checkpoint_dots / dots_saveable with the block
// inputs saved): kept are the outputs of the ops whose work is the step's
// (dot_general, the convolutions, attention; a bias or residual add on a
// matmul's output, which becomes its GEMM's epilogue), of ops with side effects
// (collectives, calls) or regions, of ops that read nothing recomputable,
// the arguments, and every value more than one forward op reads (a
// residual stream, a block's input: recomputing it would serve several
// consumers and chain back through the whole network), and data movement
// of kept values (a transpose or slice of a kept value: often a view the
// consumer reads in place). Everything else the
// backward pass reads is recomputed: norms, activations, bias additions,
// data movement, dropout masks (a kiln.dropout draws from its seed and the
// step, so the clone drops the same elements). A value whose chain of
// recomputed ops would exceed kMaxChain is kept instead.
//
// Policy `full` (PyTorch's checkpoint of every block, JAX's
// nothing_saveable): the matmuls, convolutions and attention are
// recomputed too, so what stays is the values several forward ops read
// (the residual stream between blocks, a block's input) and what has side
// effects; chains may be 4 * kMaxChain long (a transformer block's).
//
// A scope (`remat-scope`, a regular expression) limits recomputation to ops
// one of whose node names (the graph file's, kept in their locations)
// matches it, as PyTorch users checkpoint chosen modules: the rest is kept.
//
// The clones carry `kiln.remat` so that CSE does not merge them back into
// the forward ops (they have the same operands); kiln-decompose passes it on
// to the primitives of a composite it expands; kiln-fuse puts a clone only
// in a kernel with later ops (its backward readers, other clones), never
// with the forward ops before it (a sibling reading the same kept value,
// a GEMM epilogue), which would compute it in the forward pass again, and
// then removes the mark. The arithmetic is the forward's, so the step
// computes the same numbers.
//
//===----------------------------------------------------------------------===//

#include "passes/Rematerialize.h"

#include "ir/KilnOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/Support/Regex.h"

#include <functional>

namespace kiln {

namespace {

using namespace mlir;

constexpr int kMaxChain = 8;

// Ops worth keeping the output of: the step's work is theirs.
bool isExpensive(Operation *op) {
  return isa<DotGeneralOp, Conv2DOp, Conv2DInputGradOp, Conv2DFilterGradOp,
             AttentionOp, AttentionQkvOp, AttentionGradOp, AttentionQkvGradOp>(op);
}

// A bias or residual add straight on a matmul's output that no other
// forward op reads: kiln-fuse makes it the GEMM's epilogue, which writes the sum, not
// the product; keeping the sum costs the same and keeps the epilogue (a
// clone reading the product would leave the GEMM two readers, and no
// epilogue).
bool isEpilogueAdd(Operation *op, const llvm::DenseSet<Operation *> &forward) {
  if (!isa<AddOp>(op))
    return false;
  return llvm::any_of(op->getOperands(), [&](Value v) {
    Operation *def = v.getDefiningOp();
    return def && isa<DotGeneralOp>(def) &&
           llvm::count_if(v.getUsers(), [&](Operation *user) {
             return forward.contains(user);
           }) == 1;
  });
}

bool isRecomputable(Operation *op, const llvm::DenseSet<Operation *> &forward,
                    bool full) {
  return op->getNumRegions() == 0 && isMemoryEffectFree(op) &&
         (full || (!isExpensive(op) && !isEpilogueAdd(op, forward))) &&
         !op->hasTrait<OpTrait::ConstantLike>();
}

// Whether a node name of |loc| (a name, or one of a fused location's)
// matches |scope|.
bool inScope(Location loc, const llvm::Regex &scope) {
  if (auto name = dyn_cast<NameLoc>(loc))
    return scope.match(name.getName().getValue()) ||
           inScope(name.getChildLoc(), scope);
  if (auto fused = dyn_cast<FusedLoc>(loc))
    return llvm::any_of(fused.getLocations(),
                        [&](Location l) { return inScope(l, scope); });
  return false;
}

} // namespace

FailureOr<RematStats> rematerialize(func::FuncOp func,
                                    ArrayRef<Operation *> forward,
                                    llvm::StringRef policy,
                                    llvm::StringRef scopeText) {
  RematStats stats;
  if (policy == "off") {
    if (!scopeText.empty()) {
      func.emitError() << "kiln-autodiff: remat-scope=" << scopeText
                       << " needs remat=dots or remat=full";
      return failure();
    }
    return stats;
  }
  bool full = policy == "full";
  if (policy != "dots" && !full) {
    func.emitError() << "kiln-autodiff: remat=" << policy
                     << ": expected off, dots or full";
    return failure();
  }
  llvm::Regex scope(scopeText);
  std::string regexError;
  if (!scopeText.empty() && !scope.isValid(regexError)) {
    func.emitError() << "kiln-autodiff: remat-scope=" << scopeText
                     << ": expected a regular expression over node names: "
                     << regexError;
    return failure();
  }
  llvm::DenseSet<Operation *> isForward(forward.begin(), forward.end());

  // Which forward values are kept, and the length of the chain of
  // recomputed ops behind the others, in program order.
  llvm::DenseMap<Value, int> chain; // absent: kept
  for (Operation *op : forward) {
    if (!isRecomputable(op, isForward, full) ||
        (!scopeText.empty() && !inScope(op->getLoc(), scope)))
      continue;
    // Moving kept data around again saves nothing the backward pass would
    // not read anyway, and a view the forward pass never materializes (the
    // q, k and v an attention reads from its packed projection) would
    // become a copy: kept, unless it moves a recomputed value.
    if (isa<BroadcastInDimOp, ReshapeOp, TransposeOp, SliceOp, PadOp,
            ConcatenateOp, GatherOp>(op) &&
        llvm::none_of(op->getOperands(),
                      [&](Value v) { return chain.count(v); }))
      continue;
    int length = 1;
    for (Value operand : op->getOperands())
      if (auto it = chain.find(operand); it != chain.end())
        length = std::max(length, it->second + 1);
    if (length > (full ? 4 * kMaxChain : kMaxChain))
      continue;
    for (Value result : op->getResults()) {
      unsigned forwardUses = 0;
      for (Operation *user : result.getUsers())
        forwardUses += isForward.contains(user);
      if (forwardUses <= 1)
        chain[result] = length;
    }
  }

  // Clone each recomputed value the backward pass reads before its first
  // backward reader; a clone's operands are kept values or clones.
  IRMapping clones;
  auto remat = UnitAttr::get(func.getContext());
  std::function<Value(OpBuilder &, Value)> recompute = [&](OpBuilder &b,
                                                           Value v) -> Value {
    if (!chain.count(v))
      return v;
    if (Value done = clones.lookupOrNull(v))
      return done;
    Operation *op = v.getDefiningOp();
    for (Value operand : op->getOperands())
      clones.map(operand, recompute(b, operand));
    Operation *copy = b.clone(*op, clones);
    copy->setAttr(kRematAttrName, remat);
    ++stats.ops;
    for (auto [from, to] : llvm::zip(op->getResults(), copy->getResults()))
      clones.map(from, to);
    return clones.lookup(v);
  };
  Block &body = func.getBody().front();
  llvm::SmallVector<Operation *> backward;
  for (Operation &op : body.without_terminator())
    if (!isForward.contains(&op))
      backward.push_back(&op);
  llvm::DenseSet<Value> read;
  for (Operation *op : backward) {
    OpBuilder b(op);
    for (OpOperand &use : op->getOpOperands()) {
      Value v = use.get();
      if (!chain.count(v))
        continue;
      if (read.insert(v).second)
        ++stats.values;
      use.set(recompute(b, v));
    }
  }
  return stats;
}

} // namespace kiln
