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
// A limit (`remat-limit`, K >= 0) recomputes only K of the values the policy
// would (its candidates: those the backward pass reads), in the order XLA's
// rematerialization takes them, as PyTorch's activation memory budget
// trades runtime against memory: a value's price is the modelled time
// (FusionCostModel's roofline, no launches) of the ops that recompute it
// from values kept anyway, the other candidates counted as kept, over its
// bytes; greedily on a memory profile of the step, the next one is the
// cheapest of those kept across the profile's current peak. So a layer
// norm's or a GELU's output goes before a matmul's, and the logits, which
// the loss reads right before its gradient does, come last: recomputing
// them frees nothing at the peak. The function records its candidates in
// `kiln.remat_candidates`; `--memory-budget` (runCompilePipeline,
// passes/Pipelines.cpp) searches the least K whose planned step fits.
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

#include "ir/KilnDialect.h"
#include "ir/KilnOps.h"
#include "passes/FusionCostModel.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/Support/Regex.h"

#include <algorithm>
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

// Modelled microseconds of |op| on its own: the longer of moving its
// operands and results and doing its arithmetic.
double opTimeUs(Operation *op, const FusionCostModel &model) {
  int64_t bytes = 0;
  for (Value v : op->getOperands())
    bytes += tensorBytes(v.getType());
  for (Value v : op->getResults())
    bytes += tensorBytes(v.getType());
  int64_t flops = 0;
  if (auto cost = dyn_cast<CostInterface>(op))
    flops = cost.getFlops();
  return std::max(model.transferUs(bytes),
                  static_cast<double>(flops) /
                      (model.options().peakGflops * 1e3));
}

// Keeps in |chain| the |limit| candidates (forward values in it the backward
// pass reads, in program order) that come first in the order XLA's
// rematerialization would take them; the others leave it (kept).
// That order is greedy on a memory profile of |body| in program order
// (every op result live from its op to its last reader, which is the
// step before fusion): at the profile's peak, of the candidates kept
// across it (made before it, read again by the backward pass after it),
// the one cheapest to recompute per byte, whose recomputation then lets it
// die at its last forward use and live again from its first backward
// reader; then the new peak, and so on. A candidate kept across no peak
// (the logits, read by the loss and at once by its gradient) frees
// nothing there, so it comes after those that do, by price.
void limitCandidates(Block &body, llvm::ArrayRef<Value> candidates, int64_t limit,
                  const llvm::DenseSet<Operation *> &isForward,
                  llvm::DenseMap<Value, int> &chain) {
  llvm::DenseSet<Value> isCandidate(candidates.begin(), candidates.end());
  FusionCostModel model;

  // Positions, and each result's span.
  llvm::DenseMap<Operation *, int64_t> position;
  for (Operation &op : body)
    position[&op] = static_cast<int64_t>(position.size());
  int64_t steps = static_cast<int64_t>(position.size());
  struct Span {
    int64_t bytes, def, last;
  };
  std::vector<Span> spans;
  for (Operation &op : body)
    for (Value result : op.getResults()) {
      int64_t last = position[&op];
      for (Operation *user : result.getUsers())
        if (Operation *at = body.findAncestorOpInBlock(*user))
          last = std::max(last, position[at]);
      if (!isCandidate.contains(result))
        spans.push_back({tensorBytes(result.getType()), position[&op], last});
    }

  struct Candidate {
    Value value;
    int64_t bytes, def, lastForward, firstBackward, last;
    double usPerByte;
    bool taken = false;
  };
  std::vector<Candidate> all;
  for (Value v : candidates) {
    Candidate c{v, tensorBytes(v.getType()), position[v.getDefiningOp()], 0,
                steps, 0, 0.0};
    c.lastForward = c.def;
    for (Operation *user : v.getUsers()) {
      Operation *at = body.findAncestorOpInBlock(*user);
      if (!at)
        continue;
      int64_t pos = position[at];
      c.last = std::max(c.last, pos);
      if (isForward.contains(at))
        c.lastForward = std::max(c.lastForward, pos);
      else
        c.firstBackward = std::min(c.firstBackward, pos);
    }
    // The ops that recompute v alone: its chain back to kept values and to
    // the other candidates (counted as kept).
    double us = 0;
    llvm::DenseSet<Operation *> seen;
    llvm::SmallVector<Value> work{v};
    while (!work.empty()) {
      Value at = work.pop_back_val();
      Operation *op = at.getDefiningOp();
      if (!op || !seen.insert(op).second)
        continue;
      us += opTimeUs(op, model);
      for (Value operand : op->getOperands())
        if (chain.count(operand) && !isCandidate.contains(operand))
          work.push_back(operand);
    }
    c.usPerByte = us / static_cast<double>(std::max<int64_t>(c.bytes, 1));
    all.push_back(c);
  }

  // The profile of the non-candidates, then each step's peak with the
  // candidates taken so far recomputed.
  std::vector<int64_t> base(steps + 1, 0);
  for (const Span &s : spans) {
    base[s.def] += s.bytes;
    base[s.last + 1] -= s.bytes;
  }
  auto cheaper = [&](int a, int b) {
    return all[a].usPerByte < all[b].usPerByte ||
           (all[a].usPerByte == all[b].usPerByte && a < b);
  };
  int64_t taken = 0;
  std::vector<int64_t> delta(steps + 1);
  while (taken < limit) {
    delta = base;
    for (const Candidate &c : all) {
      if (c.taken) {
        delta[c.def] += c.bytes;
        delta[c.lastForward + 1] -= c.bytes;
        delta[std::min(c.firstBackward, c.last)] += c.bytes;
      } else {
        delta[c.def] += c.bytes;
      }
      delta[c.last + 1] -= c.bytes;
    }
    int64_t live = 0, peak = -1, peakAt = 0;
    for (int64_t p = 0; p < steps; ++p) {
      live += delta[p];
      if (live > peak) {
        peak = live;
        peakAt = p;
      }
    }
    int best = -1;
    for (int i = 0, e = static_cast<int>(all.size()); i < e; ++i) {
      const Candidate &c = all[i];
      if (!c.taken && c.lastForward < peakAt && peakAt < c.firstBackward &&
          (best < 0 || cheaper(i, best)))
        best = i;
    }
    if (best < 0)
      break; // nothing left frees memory at the peak
    all[best].taken = true;
    ++taken;
  }
  // Past the peaks: the rest by price.
  std::vector<int> rest;
  for (int i = 0, e = static_cast<int>(all.size()); i < e; ++i)
    if (!all[i].taken)
      rest.push_back(i);
  std::stable_sort(rest.begin(), rest.end(), cheaper);
  for (int i : llvm::drop_begin(rest, limit - taken))
    chain.erase(all[i].value);
}

} // namespace

FailureOr<RematStats> rematerialize(func::FuncOp func,
                                    ArrayRef<Operation *> forward,
                                    llvm::StringRef policy,
                                    llvm::StringRef scopeText, int64_t limit) {
  RematStats stats;
  if (policy == "off") {
    if (!scopeText.empty() || limit >= 0) {
      func.emitError() << "kiln-autodiff: "
                       << (scopeText.empty()
                               ? "remat-limit=" + std::to_string(limit)
                               : "remat-scope=" + scopeText.str())
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

  Block &body = func.getBody().front();
  llvm::SetVector<Operation *> backward; // in program order; no terminator
  for (Operation &op : body.without_terminator())
    if (!isForward.contains(&op))
      backward.insert(&op);

  // The candidates: what the backward pass reads of the recomputable
  // values, in program order. Under a limit, only the cheapest stay.
  llvm::SetVector<Value> candidates;
  for (Operation *op : forward)
    for (Value result : op->getResults())
      if (chain.count(result) &&
          llvm::any_of(result.getUsers(), [&](Operation *user) {
            return backward.contains(user);
          }))
        candidates.insert(result);
  stats.candidates = candidates.size();
  func->setAttr(kRematCandidatesAttrName,
                IntegerAttr::get(IntegerType::get(func.getContext(), 64),
                                 stats.candidates));
  if (limit >= 0 && limit < static_cast<int64_t>(candidates.size()))
    limitCandidates(body, candidates.getArrayRef(), limit, isForward, chain);

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
