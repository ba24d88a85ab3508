//===- Fuse.cpp - kernels as kiln.fusion regions, by priority -------------===//
//
// kiln-fuse decides which ops run together as one kernel and writes each
// kernel as a `kiln.fusion` region. It follows XLA's priority fusion: start
// from one kernel per op, price every possible merge with the cost model
// (passes/FusionCostModel.h: a launch plus the bytes a kernel moves), apply
// the merge that saves the most modelled time, reprice its neighbourhood,
// and stop when no merge saves anything. Three phases:
//
//   1. GEMM epilogues: a dot_general takes the bias add, residual add and
//      relu/gelu after it, in the order cuBLASLt epilogues apply them, and
//      (gelu-grad-epilogues, CUDA) a tanh gelu_grad whose dy it is (DGELU).
//   2. Priority fusion of the generated kernels: producer into consumer
//      (loop and reduction fusion, multi-output when the producer has other
//      users), a copy of a cheap producer into its consumers, and siblings
//      that read the same large input. A scatter_add fuses with its
//      elementwise consumers and a splat operand only
//      (FusionPlan::legalScatter), and is never copied.
//   3. Horizontal fusion: independent loop kernels that feed the same
//      consumer (the optimizer updates, feeding the return) share a launch,
//      and so do the kernels that only cast the step's arguments (the
//      parameter casts of mixed precision). With `horizontal-reductions`
//      (CUDA), so do independent small reduction kernels that the CUDA
//      emitter builds with a warp per result (a layer norm's scale and
//      bias gradients, second stage of kiln-split-reductions, with their
//      Adam updates): only with each other, when their reduces have one
//      operand shape and reduced dimensions and their results are the
//      reduced shape; the emitter gives each packed kernel units of its
//      own (codegen/cuda/CudaEmitter.h, cudaResultGroups).
//
// The plan (passes/FusionPlan.h) is a set of clusters of ops over the
// unchanged body; merges are priced by applying them to the plan,
// measuring, and rolling back. A merge that would give the cluster graph a
// cycle is refused, which also keeps every kernel on one side of every
// collective. At the end each cluster becomes one kiln.fusion, and the body
// is put back in an order where every value is defined before its uses.
//
// What keeps the work near linear in the model's depth: every change, the
// GEMM epilogues' merges too, is a committed move, and the plan keeps each
// kernel's successors and modelled time until a committed move may have
// changed them; each move's price is kept with the kernels its trial
// read and reused while none of them has changed (Fuser::price); the plan
// keeps a topological order of the kernels through every merge, so a
// cycle check walks only the kernels numbered below its target, nearest
// first; siblings joined by a path are never priced, and a joined pair is
// kept as joined; a kernel with many successors is not listed whole to
// learn that it has more than a few (moreSuccessorsThan); and kernels that
// read a broadcast of a small value are not siblings (expandsSmallInput).
// And what keeps a trial's cost from growing with its kernels' size: each
// kernel keeps a summary of its op list (what it reads, its flops, its
// reduces, its copied-in ops; FusionPlan.h, ClusterSummary), worked out
// for a merge or a copy from the two summaries; a merge's results are its
// two kernels' kept results less those it now reads alone; a merge on
// trial leaves its ops' homes and memberships as they were, read through
// the merge (FusionPlan::effective), until a commit writes them; and the
// kernels' predecessors are kept between changes.
// The kept answers and the order change no plan (verify-caches recomputes
// every kept answer and checks the order after each move; tests/unit/
// passes/FusionCostModelTest.cpp). Leaving out the joined siblings, and
// the readers of a broadcast, changed in some of the zoo's steps which of
// equally priced moves won: the same kernel count and modelled time (and
// bytes within 0.01%).
//
//===----------------------------------------------------------------------===//

#include "passes/FusionPlan.h"

#include "codegen/cuda/CudaEmitter.h"
#include "ir/KilnOps.h"
#include "passes/Passes.h"
#include "passes/Rematerialize.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <functional>
#include <optional>
#include <queue>
#include <set>
#include <tuple>

#define DEBUG_TYPE "kiln-fuse"

namespace kiln {
#define GEN_PASS_DEF_KILNFUSE
#include "passes/Passes.h.inc"

namespace {

using namespace mlir;
using namespace fusion;

// A merge must save more than this (microseconds) to be applied.
constexpr double kMinSavingUs = 1e-9;

enum class Move { Merge, Duplicate, DuplicateAll, Sibling };

struct Candidate {
  double saving;
  Move move;
  int a, b; // b is -1 for DuplicateAll
};

struct CandidateOrder {
  bool operator()(const Candidate &x, const Candidate &y) const {
    if (x.saving != y.saving)
      return x.saving < y.saving;
    return std::make_pair(x.a, x.b) > std::make_pair(y.a, y.b);
  }
};

ArrayRef<int64_t> shapeOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getShape();
}

class Fuser : public FusionPlan {
public:
  using FusionPlan::FusionPlan;

  void formGemmEpilogues(bool geluGrad);
  void formBiasGradients();
  void priorityFusion();
  void horizontalFusion(bool reductions);
  LogicalResult materialize();
  // Moves applied on trial, and prices answered from kept ones instead
  // (kiln-fuse's report).
  int64_t trials() const { return trials_; }
  int64_t keptPrices() const { return keptPrices_; }

private:
  std::optional<std::vector<int64_t>> warpReductionLayout(int c) const;
  // |read|, when given, receives the clusters the price depends on.
  std::optional<double> trial(Move move, int a, int b, bool keep,
                              SmallVectorImpl<int> *read = nullptr);
  std::optional<double> price(Move move, int a, int b);
  void push(Move move, int a, int b);
  // Whether a path leads from |a| to |b| or from |b| to |a| (kept once
  // true: joined_).
  bool joined(int a, int b);
  void addJoined(int a, int b);
  // |s| merged |a| and |b|: a path between either and another kernel is
  // one between |s| and it.
  void inheritJoined(int a, int b, int s);
  bool expandsSmallInput(Operation *def) const;
  void enqueueAround(int c);

  // Neighbours with more edges than this are not repriced after a change
  // next to them (only their merges with the changed cluster are): a value
  // read by every parameter update would otherwise be repriced once per
  // merge inside any of them.
  static constexpr size_t kMaxRepricedEdges = 32;
  bool fresh_ = false;
  int64_t trials_ = 0;
  // A move's price, kept with the clusters it read (price): it holds
  // while none of them has changed (FusionPlan::unchangedSince).
  struct KeptPrice {
    uint64_t commit;
    SmallVector<int, 8> read;
    std::optional<double> saving;
  };
  DenseMap<std::tuple<int, int, int>, KeptPrice> prices_;
  int64_t keptPrices_ = 0;
  std::priority_queue<Candidate, std::vector<Candidate>, CandidateOrder> queue_;
  std::set<std::tuple<int, int, int>> queued_;
  // The pairs (lower number first) found joined by a path, and each
  // kernel's partners in them (for inheritJoined).
  DenseSet<std::pair<int, int>> joined_;
  DenseMap<int, SmallVector<int>> joinedWith_;
};

//===----------------------------------------------------------------------===//
// Phase 1: GEMM epilogues
//===----------------------------------------------------------------------===//

void Fuser::formGemmEpilogues(bool geluGrad) {
  startOrder();
  for (Operation *node : nodes_) {
    auto dot = dyn_cast<DotGeneralOp>(node);
    if (!dot || clusters_[home_.lookup(node)].cls != ClusterClass::Gemm ||
        !isa<FloatType>(dot.getType().getElementType()))
      continue;
    int gemm = home_.lookup(node);
    Operation *current = node;
    bool bias = false, residual = false;
    while (true) {
      Value value = current->getResult(0);
      auto type = cast<RankedTensorType>(value.getType());
      SmallVector<Operation *> directUsers(value.getUsers());
      Operation *next = nullptr, *biasBroadcast = nullptr;
      bool activation = false;
      if (directUsers.size() == 1 && isa<AddOp>(directUsers.front())) {
        Operation *add = directUsers.front();
        Value other = add->getOperand(0) == value ? add->getOperand(1) : add->getOperand(0);
        auto broadcast = other.getDefiningOp<BroadcastInDimOp>();
        if (other == value) {
          // x + x is no epilogue.
        } else if (broadcast && !bias && type.getRank() >= 1 &&
                   shapeOf(broadcast.getOperand()).size() == 1 &&
                   shapeOf(broadcast.getOperand())[0] == type.getShape().back() &&
                   broadcast.getBroadcastDimensions() ==
                       ArrayRef<int64_t>{type.getRank() - 1} &&
                   isNode(broadcast) &&
                   clusters_[home_.lookup(broadcast)].cls == ClusterClass::Fusible &&
                   clusters_[home_.lookup(broadcast)].ops.size() == 1 &&
                   llvm::none_of(broadcast->getUsers(), [&](Operation *user) {
                     // A bias the GEMM or its epilogue so far also reads
                     // (dot(x, b) + b) would come before the dot_general in
                     // the fusion, which a GEMM and epilogue cannot be.
                     return user != add && isNode(user) &&
                            home_.lookup(user) == gemm;
                   })) {
          next = add;
          biasBroadcast = broadcast;
          bias = true;
        } else if (!broadcast && !residual && other.getType() == value.getType()) {
          next = add;
          residual = true;
        }
      }
      if (!next) {
        for (Operation *user : directUsers) {
          // Not kiln-autodiff's recomputed clone of the activation after a
          // forward GEMM: it would be computed here, in the forward pass,
          // and kept (the rule FusionPlan::legal keeps for the other
          // merges). A recomputed GEMM takes its recomputed activation.
          if (user->hasAttr(kRematAttrName) && !node->hasAttr(kRematAttrName))
            continue;
          auto gelu = dyn_cast<GeluOp>(user);
          if (isa<ReluOp>(user) ||
              (gelu && gelu.getApproximate() == GeluApproximation::tanh)) {
            next = user;
            activation = true;
            break;
          }
        }
      }
      // The backward of a GELU after a GEMM: dx = gelu_grad(x, dot), the
      // dot being dY (W^T) with no other user and x the forward's
      // pre-activation, read as a fusion input (cuBLASLt's DGELU epilogue
      // reads it as AUX). Only straight after the dot, for tanh-GELU, and
      // not in f64 (cuBLASLt has no f64 epilogues).
      if (!next && geluGrad && current == node && directUsers.size() == 1 &&
          !type.getElementType().isF64()) {
        auto grad = dyn_cast<GeluGradOp>(directUsers.front());
        if (grad && grad.getApproximate() == GeluApproximation::tanh &&
            grad.getDy() == value && grad.getX() != value) {
          next = grad;
          activation = true;
        }
      }
      if (!next || clusters_[home_.lookup(next)].cls != ClusterClass::Fusible ||
          clusters_[home_.lookup(next)].ops.size() != 1)
        break;
      int nextCluster = home_.lookup(next);
      if (reaches(gemm, nextCluster, /*skipDirect=*/true))
        break;
      if (biasBroadcast && reaches(gemm, home_.lookup(biasBroadcast), /*skipDirect=*/false))
        break;
      // One commit per merge, for orderMerge.
      if (biasBroadcast) {
        int b = home_.lookup(biasBroadcast);
        begin();
        if (users_.lookup(biasBroadcast).size() == 1)
          gemm = merge(gemm, b);
        else
          duplicate(b, gemm);
        commit();
      }
      begin();
      gemm = merge(gemm, nextCluster);
      commit();
      current = next;
      if (activation)
        break;
    }
  }
}

// A weight gradient dW = dot(X, dY) contracting the rows of both, with dY
// as the rhs [rows..., n], takes the reduce-sum of dY over those rows (the
// bias gradient) into its gemm cluster: cuBLASLt's BGRADA epilogue writes
// it beside the product (the fusion then has two results). Only for
// targets whose GEMM library has that epilogue (`bias-gradient-epilogues`).
void Fuser::formBiasGradients() {
  startOrder();
  DenseSet<Operation *> taken;
  for (Operation *node : nodes_) {
    auto dot = dyn_cast<DotGeneralOp>(node);
    if (!dot || !dot.getRhsBatchingDimensions().empty() ||
        clusters_[home_.lookup(node)].cls != ClusterClass::Gemm ||
        clusters_[home_.lookup(node)].ops.size() != 1)
      continue;
    Value rhs = dot.getRhs();
    auto rhsType = cast<RankedTensorType>(rhs.getType());
    auto dotType = cast<RankedTensorType>(dot.getType());
    int64_t rank = rhsType.getRank();
    // The contracting dimensions are the leading ones, n is the last.
    SmallVector<int64_t> contract(dot.getRhsContractingDimensions());
    llvm::sort(contract);
    if (rank < 2 || static_cast<int64_t>(contract.size()) != rank - 1 ||
        contract.back() != rank - 2 ||
        !isa<FloatType>(dotType.getElementType()) ||
        dotType.getElementType().isF64()) // cuBLASLt: no f64 epilogues
      continue;
    for (Operation *user : rhs.getUsers()) {
      auto reduce = dyn_cast<ReduceOp>(user);
      if (!reduce || taken.contains(reduce) || !isNode(reduce) ||
          reduce.getKind() != ReduceKind::sum)
        continue;
      SmallVector<int64_t> dims(reduce.getDimensions());
      llvm::sort(dims);
      auto type = cast<RankedTensorType>(reduce.getType());
      if (dims != contract || type.getRank() != 1 ||
          type.getDimSize(0) != rhsType.getShape().back() ||
          type.getElementType() != dotType.getElementType())
        continue;
      int gemm = home_.lookup(node), r = home_.lookup(reduce);
      if (clusters_[r].cls != ClusterClass::Fusible ||
          clusters_[r].ops.size() != 1 || reaches(gemm, r, /*skipDirect=*/false) ||
          reaches(r, gemm, /*skipDirect=*/false))
        continue;
      begin();
      merge(gemm, r);
      commit();
      taken.insert(reduce);
      break;
    }
  }
}

//===----------------------------------------------------------------------===//
// Phase 2: priority fusion
//===----------------------------------------------------------------------===//

// Applies |move| to the plan and returns the modelled time it saves, or
// nothing when it is not allowed. Rolls back unless |keep|.
std::optional<double> Fuser::trial(Move move, int a, int b, bool keep,
                                   SmallVectorImpl<int> *read) {
  ++trials_;
  // Clusters whose time can change: the ones involved and, for merges, the
  // producers they read (a copy inside may now cover what a producer
  // exported).
  SmallVector<int> involved;
  if (move == Move::DuplicateAll) {
    involved.push_back(a);
    for (int d : successors(a))
      if (fusible(d))
        involved.push_back(d);
  } else {
    involved = {a, b};
  }
  SmallVector<int> watched = involved;
  if (move == Move::Merge || move == Move::Sibling)
    for (int c : {a, b})
      for (int p : predecessors(c))
        if (!llvm::is_contained(watched, p))
          watched.push_back(p);
  if (read) {
    // What it prices, and every consumer of a copy into all of them (their
    // classes decide its targets).
    read->assign(watched.begin(), watched.end());
    if (move == Move::DuplicateAll)
      llvm::append_range(*read, successors(a));
  }
  double before = 0;
  SmallVector<double> watchedTimes;
  for (int c : watched) {
    watchedTimes.push_back(timeOf(c));
    before += watchedTimes.back();
  }
  // A producer of a merge's two kernels exports the same values after it
  // unless one of them holds a copy of an op at home in the producer (its
  // user in the other kernel then reads the copy; FusionPlan::needsExport):
  // only then can the producer's time change. The others keep the time
  // measured here, the same number their pricing would give.
  // (What they write now is kept for what they write after the move:
  // FusionPlan::exportsOf.)
  for (int c : involved)
    exportsOf(c);
  SmallVector<int> copiedFrom;
  if (move == Move::Merge || move == Move::Sibling)
    for (int c : {a, b}) {
      for (Operation *op : summaryOf(c).guests)
        if (int home = homeOf(op); home >= 0 && home != a && home != b &&
                                   !llvm::is_contained(copiedFrom, home))
          copiedFrom.push_back(home);
    }

  // For a copy into every consumer, only the consumers that can take it.
  SmallVector<int> targets;
  if (move == Move::DuplicateAll) {
    for (int d : ArrayRef<int>(involved).drop_front()) {
      begin();
      duplicate(a, d);
      bool ok = legal(d);
      rollback();
      if (ok)
        targets.push_back(d);
    }
    if (targets.empty())
      return std::nullopt;
  }

  begin();
  bool ok = true;
  SmallVector<int> after;
  switch (move) {
  case Move::Merge:
  case Move::Sibling: {
    int s = merge(a, b);
    if (move == Move::Sibling)
      clusters_[s].sibling = true;
    ok = legal(s);
    after.push_back(s);
    break;
  }
  case Move::Duplicate:
    duplicate(a, b);
    ok = legal(b);
    dropIfUnneeded(a);
    after = {a, b};
    break;
  case Move::DuplicateAll:
    for (int d : targets)
      duplicate(a, d);
    dropIfUnneeded(a);
    after = involved;
    break;
  }
  for (int c : watched)
    if (!llvm::is_contained(after, c) && !llvm::is_contained(involved, c))
      after.push_back(c);
  std::optional<double> saving;
  if (ok) {
    double now = 0;
    for (int c : after) {
      if (!clusters_[c].alive)
        continue;
      const int *w = llvm::find(watched, c);
      if (w != watched.end() && !llvm::is_contained(involved, c) &&
          !llvm::is_contained(copiedFrom, c)) {
        double kept = watchedTimes[w - watched.begin()];
        if (verifyCaches_ && cacheMismatch_.empty() && timeOf(c) != kept)
          cacheMismatch_ =
              llvm::formatv("a merge of kernels {0} and {1} changed the "
                            "time of their producer {2}",
                            a, b, c)
                  .str();
        now += kept;
      } else {
        now += timeOf(c);
      }
    }
    saving = before - now;
  }
  if (keep && ok)
    commit();
  else
    rollback();
  return saving;
}

// What trial(move, a, b, /*keep=*/false) returns, without the trial when
// the clusters it read last time (trial's |read|) are unchanged.
std::optional<double> Fuser::price(Move move, int a, int b) {
  auto key = std::make_tuple(static_cast<int>(move), a, b);
  auto it = prices_.find(key);
  if (it != prices_.end() &&
      llvm::all_of(it->second.read,
                   [&](int c) { return unchangedSince(c, it->second.commit); })) {
    ++keptPrices_;
    if (!verifyCaches_)
      return it->second.saving;
    std::optional<double> fresh = trial(move, a, b, /*keep=*/false);
    if (fresh != it->second.saving && cacheMismatch_.empty())
      cacheMismatch_ = llvm::formatv("the price kept for move {0} of kernels {1} and "
                                     "{2} differs from its price now",
                                     static_cast<int>(move), a, b)
                           .str();
    return fresh;
  }
  KeptPrice &kept = prices_[key];
  kept.commit = commits();
  kept.saving = trial(move, a, b, /*keep=*/false, &kept.read);
  return kept.saving;
}

bool Fuser::joined(int a, int b) {
  // A path between two kernels survives every later move: a merge keeps
  // the edges of what it joins, and a copy into consumers gives each the
  // producer's inputs (a producer goes only when none reads it). So a
  // joined pair is kept, which spares walking again between the readers
  // of a causal mask each time one of them changes; and a merged kernel
  // inherits the pairs of the two it joins (inheritJoined).
  auto walk = [&] {
    return reaches(a, b, /*skipDirect=*/false) || reaches(b, a, /*skipDirect=*/false);
  };
  if (joined_.contains({std::min(a, b), std::max(a, b)})) {
    if (verifyCaches_ && cacheMismatch_.empty() && !walk())
      cacheMismatch_ = llvm::formatv("kernels {0} and {1} were joined by a path and "
                                     "are no longer",
                                     a, b)
                           .str();
    return true;
  }
  if (!walk())
    return false;
  addJoined(a, b);
  return true;
}

void Fuser::addJoined(int a, int b) {
  if (joined_.insert({std::min(a, b), std::max(a, b)}).second) {
    joinedWith_[a].push_back(b);
    joinedWith_[b].push_back(a);
  }
}

void Fuser::inheritJoined(int a, int b, int s) {
  SmallVector<int> partners;
  for (int c : {a, b}) {
    auto it = joinedWith_.find(c);
    if (it == joinedWith_.end())
      continue;
    llvm::append_range(partners, it->second);
    joinedWith_.erase(it);
  }
  for (int p : partners)
    if (p != a && p != b && p != s && clusters_[p].alive)
      addJoined(p, s);
}

void Fuser::push(Move move, int a, int b) {
  // A queued candidate is repriced when it comes out, so one entry per
  // merge is enough, unless its neighbourhood just changed (|fresh_|): then
  // it is queued again at its new price.
  // A copy into every consumer of a cluster that has many (a scalar that
  // every parameter's update reads) keeps its queued price until it comes
  // out: priced again whenever one of its consumers changes, it would cost
  // the square of their number (12 s of kiln-fuse's 12.1 on GPT-2 124M).
  bool many = move == Move::DuplicateAll && moreSuccessorsThan(a, kMaxRepricedEdges);
  auto key = std::make_tuple(static_cast<int>(move), a, b);
  if ((!fresh_ || many) && queued_.count(key))
    return;
  // Siblings joined by a path would make a cycle: most kernels that read
  // one large value are (a layer's forward and backward reading its
  // activations, every block reading a mask), and pricing them anyway
  // would price them again each time one of them changed. With the order
  // one direction is free and the other walk stays between the two.
  if (move == Move::Sibling && joined(a, b))
    return;
  std::optional<double> saving = price(move, a, b);
  if (!saving || *saving <= kMinSavingUs)
    return;
  queued_.insert(key);
  queue_.push(Candidate{*saving, move, a, b});
}

// Whether |def| computes its (large) result from small inputs alone: a
// broadcast of a small value, an iota, random numbers (the same wherever a
// kernel computes them). Kernels that read it share no large
// read: each computes it itself once the producer is copied in (a scalar
// such as a learning-rate factor, broadcast to each parameter's shape and
// read by that shape's update in every block).
bool Fuser::expandsSmallInput(Operation *def) const {
  if (isa<IotaOp, RandomUniformOp>(def))
    return true;
  if (!isa<BroadcastInDimOp>(def))
    return false;
  return tensorBytes(traceReshapes(def->getOperand(0)).getType()) < limits_.siblingMinBytes;
}

void Fuser::enqueueAround(int c) {
  if (!fusible(c))
    return;
  SmallVector<int> consumers(successors(c));
  bool anyConsumer = false;
  for (int d : consumers) {
    if (!fusible(d))
      continue;
    anyConsumer = true;
    push(Move::Merge, c, d);
    if (cheap(c))
      push(Move::Duplicate, c, d);
  }
  if (anyConsumer && cheap(c) && consumers.size() > 1)
    push(Move::DuplicateAll, c, -1);
  for (int p : predecessors(c)) {
    if (!fusible(p))
      continue;
    push(Move::Merge, p, c);
    if (cheap(p)) {
      push(Move::Duplicate, p, c);
      if (moreSuccessorsThan(p, 1))
        push(Move::DuplicateAll, p, -1);
    }
  }
  // Siblings: other kernels that read one of this kernel's large inputs,
  // not one computed from small inputs (expandsSmallInput).
  // (Copies: trials grow clusters_ and rewrite member lists.)
  DenseSet<int> siblings;
  SmallVector<Operation *> ops(clusters_[c].ops);
  for (Operation *op : ops) {
    for (Value v : op->getOperands()) {
      if (internal(v, c))
        continue;
      Value source = traceReshapes(v);
      if (tensorBytes(source.getType()) < limits_.siblingMinBytes)
        continue;
      Operation *def = nodeOf(source);
      if (def && expandsSmallInput(def))
        continue;
      ArrayRef<Operation *> readers =
          def ? ArrayRef<Operation *>(users_[def])
              : ArrayRef<Operation *>(argUsers_[source]);
      for (Operation *reader : readers) {
        SmallVector<int, 2> readerClusters = member_.lookup(reader);
        for (int d : readerClusters)
          if (d != c && fusible(d) && !(def && contains(def, d)) &&
              siblings.insert(d).second)
            push(Move::Sibling, std::min(c, d), std::max(c, d));
      }
    }
  }
}

void Fuser::priorityFusion() {
  startOrder();
  for (int c = 0, e = clusters_.size(); c < e; ++c)
    enqueueAround(c);
  while (!queue_.empty()) {
    Candidate candidate = queue_.top();
    queue_.pop();
    queued_.erase(std::make_tuple(static_cast<int>(candidate.move), candidate.a,
                                  candidate.b));
    int a = candidate.a, b = candidate.b;
    if (!clusters_[a].alive || (b >= 0 && !clusters_[b].alive))
      continue;
    // Never a cycle: no other path between the two may exist.
    if (candidate.move == Move::Merge && reaches(a, b, /*skipDirect=*/true))
      continue;
    if (candidate.move == Move::Sibling && joined(a, b))
      continue;
    // Reprice: the neighbourhood may have changed since it was queued.
    std::optional<double> saving = price(candidate.move, a, b);
    if (!saving || *saving <= kMinSavingUs)
      continue;
    if (!queue_.empty() && *saving < queue_.top().saving) {
      candidate.saving = *saving;
      queued_.insert(std::make_tuple(static_cast<int>(candidate.move), a, b));
      queue_.push(std::move(candidate));
      continue;
    }
    // Apply it, then queue the merges the changed clusters now offer.
    SmallVector<int> touched;
    if (candidate.move == Move::DuplicateAll)
      touched = successors(a);
    size_t firstNew = clusters_.size();
    trial(candidate.move, a, b, /*keep=*/true);
    if ((candidate.move == Move::Merge || candidate.move == Move::Sibling) &&
        clusters_.size() > firstNew && clusters_[firstNew].alive)
      inheritJoined(a, b, firstNew);
    for (int c = firstNew, e = clusters_.size(); c < e; ++c)
      touched.push_back(c);
    for (int c : {a, b})
      if (c >= 0)
        touched.push_back(c);
    // Their neighbours' merges are priced again too: the change moved what
    // the neighbours read and write.
    SmallVector<int> around;
    auto fewEdges = [&](int n) {
      size_t in = predecessors(n).size();
      return in <= kMaxRepricedEdges && !moreSuccessorsThan(n, kMaxRepricedEdges - in);
    };
    for (int c : touched) {
      if (!clusters_[c].alive)
        continue;
      around.push_back(c);
      for (int n : successors(c))
        if (fewEdges(n))
          around.push_back(n);
      for (int n : predecessors(c))
        if (fewEdges(n))
          around.push_back(n);
    }
    llvm::sort(around);
    around.erase(std::unique(around.begin(), around.end()), around.end());
    fresh_ = true;
    for (int c : around)
      enqueueAround(c);
    fresh_ = false;
  }
}

//===----------------------------------------------------------------------===//
// Phase 3: horizontal fusion
//===----------------------------------------------------------------------===//

// For a reduction cluster whose CUDA kernel is one element nest with a
// warp per result (CudaEmitter.h: a reduction over the last dimension of
// fewer than kBlockRowElements elements, or a column reduction that
// cudaColumnReductionLanes gives a warp), with every result of the reduced
// shape: its reduces' operand shape, -1, and their reduced dimensions.
// Clusters with the same layout can share a horizontal kernel (one nest).
std::optional<std::vector<int64_t>> Fuser::warpReductionLayout(int c) const {
  SmallVector<ReduceOp> reduces;
  for (Operation *op : clusters_[c].ops)
    if (auto reduce = dyn_cast<ReduceOp>(op))
      reduces.push_back(reduce);
  if (reduces.empty())
    return std::nullopt;
  ArrayRef<int64_t> full = shapeOf(reduces.front().getOperand());
  SmallVector<int64_t> dims(reduces.front().getDimensions());
  llvm::sort(dims);
  for (ReduceOp reduce : reduces) {
    SmallVector<int64_t> other(reduce.getDimensions());
    llvm::sort(other);
    if (shapeOf(reduce.getOperand()) != full || other != dims)
      return std::nullopt;
  }
  SmallVector<int64_t> kept;
  int64_t reduced = 1, results = 1;
  for (int64_t d = 0, e = full.size(); d < e; ++d) {
    if (llvm::is_contained(dims, d)) {
      reduced *= full[d];
    } else {
      kept.push_back(full[d]);
      results *= full[d];
    }
  }
  if (full.empty() || llvm::any_of(exportsOf(c), [&](Value v) {
        return shapeOf(v) != ArrayRef<int64_t>(kept);
      }))
    return std::nullopt;
  int64_t rank = full.size();
  bool lastReduced = llvm::is_contained(dims, rank - 1) && full.back() > 1;
  bool warp = lastReduced ? reduced < kBlockRowElements
                          : cudaColumnReductionLanes(results, reduced) > 1;
  if (!warp)
    return std::nullopt;
  std::vector<int64_t> layout(full.begin(), full.end());
  layout.push_back(-1);
  layout.insert(layout.end(), dims.begin(), dims.end());
  return layout;
}

void Fuser::horizontalFusion(bool reductions) {
  // Kernels are grouped by their one consumer (-1: the return), in block
  // order; a kernel joins the last open group of its consumer while the
  // operand limits allow. Two kernels whose results only feed the same
  // consumer cannot reach each other, so no cycle can form. With
  // |reductions|, warp-per-result reduction kernels form groups of their
  // own, one per consumer and reduction layout; loop kernels have the
  // empty layout. (A scatter_add's kernel stays apart: a nest of its shape
  // in the same kernel would take its row-by-row layout.)
  SmallVector<int> order;
  for (int c = 0, e = clusters_.size(); c < e; ++c)
    if (fusible(c) && !hasScatter(c) &&
        (!hasReduce(c) || (reductions && warpReductionLayout(c))))
      order.push_back(c);
  auto firstPos = [&](int c) { return pos_[clusters_[c].ops.front()]; };
  llvm::stable_sort(order, [&](int x, int y) { return firstPos(x) < firstPos(y); });
  std::map<std::pair<int, std::vector<int64_t>>, int> openGroup;
  for (int c : order) {
    if (!clusters_[c].alive)
      continue;
    std::vector<int64_t> layout;
    if (hasReduce(c))
      layout = *warpReductionLayout(c);
    std::optional<int> key;
    bool single = true;
    for (Value v : exportsOf(c)) {
      for (Operation *user : users_.lookup(v.getDefiningOp())) {
        SmallVector<int, 2> consumers;
        if (!isNode(user))
          consumers.push_back(-1);
        else
          for (int d : member_.lookup(user))
            if (d != c && !contains(v.getDefiningOp(), d))
              consumers.push_back(d);
        for (int d : consumers) {
          if (key && *key != d)
            single = false;
          key = d;
        }
      }
    }
    if (!key || !single)
      continue;
    auto group = std::make_pair(*key, std::move(layout));
    auto it = openGroup.find(group);
    if (it == openGroup.end() || !clusters_[it->second].alive) {
      openGroup[group] = c;
      continue;
    }
    begin();
    int s = merge(it->second, c);
    clusters_[s].horizontal = true;
    if (legal(s)) {
      commit();
      openGroup[group] = s;
    } else {
      rollback();
      openGroup[group] = c;
    }
  }

  // Kernels that only cast the step's arguments (mixed precision's casts of
  // the parameters and inputs) depend on no other kernel, whatever they
  // feed: they share one launch at the start. (Other independent kernels
  // keep the rule above: one feeding a collective, say, stays apart.)
  auto onlyCasts = [&](int c) {
    return llvm::all_of(clusters_[c].ops,
                        [](Operation *op) { return isa<ConvertOp>(op); });
  };
  SmallVector<int> sources;
  for (int c = 0, e = clusters_.size(); c < e; ++c)
    if (fusible(c) && !hasReduce(c) && onlyCasts(c) && predecessors(c).empty())
      sources.push_back(c);
  llvm::stable_sort(sources,
                    [&](int x, int y) { return firstPos(x) < firstPos(y); });
  std::optional<int> group;
  for (int c : sources) {
    if (!clusters_[c].alive)
      continue;
    if (!group || !clusters_[*group].alive) {
      group = c;
      continue;
    }
    begin();
    int s = merge(*group, c);
    clusters_[s].horizontal = true;
    if (legal(s)) {
      commit();
      group = s;
    } else {
      // The group is full (operand limits): the next casts start another.
      rollback();
      group = c;
    }
  }
}

//===----------------------------------------------------------------------===//
// Rewriting the body
//===----------------------------------------------------------------------===//

LogicalResult Fuser::materialize() {
  Operation *terminator = block_.getTerminator();
  OpBuilder builder(terminator);
  SmallVector<std::pair<Value, Value>> replacements;
  DenseMap<Operation *, int64_t> keys;
  DenseSet<Operation *> rewritten; // original ops whose kernels are now fusions

  for (int c = 0, e = clusters_.size(); c < e; ++c) {
    Cluster &cluster = clusters_[c];
    if (!cluster.alive || cluster.cls == ClusterClass::Opaque ||
        (cluster.cls == ClusterClass::Gemm && cluster.ops.size() == 1))
      continue;
    for (Operation *op : cluster.ops)
      rewritten.insert(op);
    SmallVector<Value> exports = exportsOf(c);
    if (exports.empty())
      continue;
    SmallVector<Operation *> ops(cluster.ops);
    if (cluster.cls == ClusterClass::Gemm)
      std::stable_partition(ops.begin(), ops.end(),
                            [](Operation *op) { return isa<DotGeneralOp>(op); });

    llvm::SetVector<Value> inputs;
    SmallVector<Location> locations;
    bool reduction = false;
    int64_t key = INT64_MAX;
    for (Operation *op : ops) {
      locations.push_back(op->getLoc());
      reduction |= isa<ReduceOp>(op);
      if (home_.lookup(op) == c && home_.count(op))
        key = std::min(key, pos_[op]);
      // A GEMM's operands are the fusion's inputs even when they are
      // small constants (a zero initial state times a weight): the body
      // starts with the kiln.dot_general, and cuBLASLt or OpenBLAS reads
      // its operands from buffers.
      bool gemmOperands = cluster.cls == ClusterClass::Gemm && isa<DotGeneralOp>(op);
      for (Value v : op->getOperands())
        if (gemmOperands || !internal(v, c))
          inputs.insert(v);
    }
    if (key == INT64_MAX)
      key = pos_[ops.front()];
    FusionKind kind = cluster.cls == ClusterClass::Gemm ? FusionKind::gemm
                      : cluster.horizontal             ? FusionKind::horizontal
                      : cluster.sibling                ? FusionKind::multi_output
                      : reduction                      ? FusionKind::reduction
                                                       : FusionKind::loop;
    SmallVector<Type> resultTypes;
    for (Value v : exports)
      resultTypes.push_back(v.getType());
    auto fusion = builder.create<FusionOp>(builder.getFusedLoc(locations),
                                           resultTypes, kind, inputs.getArrayRef());
    keys[fusion] = key;
    Block *body = new Block();
    fusion.getBody().push_back(body);
    IRMapping map;
    for (Value v : inputs)
      map.map(v, body->addArgument(v.getType(), v.getLoc()));
    OpBuilder inner = OpBuilder::atBlockEnd(body);
    // Reshape chains and constants are copied in on first use.
    std::function<void(Value)> provide = [&](Value v) {
      if (map.contains(v))
        return;
      Operation *def = v.getDefiningOp();
      for (Value operand : def->getOperands())
        provide(operand);
      inner.clone(*def, map);
    };
    for (Operation *op : ops) {
      for (Value v : op->getOperands())
        provide(v);
      inner.clone(*op, map);
    }
    SmallVector<Value> yielded;
    for (Value v : exports)
      yielded.push_back(map.lookup(v));
    inner.create<YieldOp>(fusion.getLoc(), yielded);
    for (auto [original, result] : llvm::zip(exports, fusion.getResults()))
      replacements.push_back({original, result});
  }

  for (auto [original, result] : replacements)
    original.replaceAllUsesWith(result);

  // Erase the originals, and the reshapes and constants nothing uses any
  // more, users before producers.
  SmallVector<Operation *> order;
  for (Operation &op : block_.without_terminator())
    order.push_back(&op);
  for (Operation *op : llvm::reverse(order)) {
    if (isFreeOp(op) && op->use_empty()) {
      op->erase();
      continue;
    }
    bool homeless = isNode(op) && !home_.count(op) && !isa<FusionOp>(op);
    if (!rewritten.contains(op) && !homeless)
      continue;
    if (!op->use_empty()) {
      Operation *user = *op->getUsers().begin();
      return op->emitError() << "kiln-fuse: internal error: the value of this op ("
                             << op->getName() << ") is still used after fusion, by "
                             << user->getName() << " at " << user->getLoc();
    }
    op->erase();
  }

  // Put every op after its operands again, keeping the order of
  // side-effecting ops and otherwise the original order as far as possible.
  SmallVector<Operation *> ops;
  for (Operation &op : block_.without_terminator()) {
    ops.push_back(&op);
    if (!keys.count(&op))
      keys[&op] = pos_.lookup(&op);
  }
  DenseMap<Operation *, SmallVector<Operation *, 4>> dependents;
  DenseMap<Operation *, int> waiting;
  Operation *lastEffect = nullptr;
  SmallVector<Operation *> effects;
  for (Operation *op : ops)
    if (!isMemoryEffectFree(op))
      effects.push_back(op);
  llvm::stable_sort(effects, [&](Operation *x, Operation *y) { return keys[x] < keys[y]; });
  auto addEdge = [&](Operation *from, Operation *to) {
    auto &list = dependents[from];
    if (llvm::is_contained(list, to))
      return;
    list.push_back(to);
    ++waiting[to];
  };
  for (Operation *op : effects) {
    if (lastEffect)
      addEdge(lastEffect, op);
    lastEffect = op;
  }
  for (Operation *op : ops)
    for (Value v : op->getOperands())
      if (Operation *def = v.getDefiningOp(); def && def->getBlock() == &block_)
        addEdge(def, op);
  auto later = [&](Operation *x, Operation *y) { return keys[x] > keys[y]; };
  std::priority_queue<Operation *, std::vector<Operation *>, decltype(later)> ready(later);
  for (Operation *op : ops)
    if (!waiting.lookup(op))
      ready.push(op);
  size_t emitted = 0;
  while (!ready.empty()) {
    Operation *op = ready.top();
    ready.pop();
    op->moveBefore(terminator);
    ++emitted;
    for (Operation *next : dependents.lookup(op))
      if (--waiting[next] == 0)
        ready.push(next);
  }
  if (emitted != ops.size())
    return terminator->emitError() << "kiln-fuse: internal error: the fused "
                                      "body has a cycle";
  return success();
}

struct FusePass : impl::KilnFuseBase<FusePass> {
  using Base::Base;
  void runOnOperation() override {
    CostModelOptions costOptions;
    costOptions.bandwidthGBps = bandwidthGBps;
    costOptions.launchUs = launchUs;
    costOptions.peakGflops = peakGflops;
    if (bandwidthGBps <= 0 || peakGflops <= 0 || launchUs < 0) {
      getOperation().emitError() << "kiln-fuse expects bandwidth-gbps > 0, "
                                    "peak-gflops > 0 and launch-us >= 0, but "
                                    "got "
                                 << static_cast<double>(bandwidthGBps) << ", "
                                 << static_cast<double>(peakGflops) << " and "
                                 << static_cast<double>(launchUs);
      return signalPassFailure();
    }
    if (maxInputs < 1 || maxOutputs < 1) {
      getOperation().emitError() << "kiln-fuse expects max-inputs and "
                                    "max-outputs of at least 1, but got "
                                 << static_cast<int64_t>(maxInputs) << " and "
                                 << static_cast<int64_t>(maxOutputs);
      return signalPassFailure();
    }
    FusionCostModel model(costOptions);
    Limits limits;
    limits.maxInputs = maxInputs;
    limits.maxOutputs = maxOutputs;
    limits.sharedMemoryBytes = sharedMemoryBytes;
    limits.siblingMinBytes = siblingMinBytes;
    limits.rowGroupPartials = rowGroupPartials;
    for (auto func : getOperation().getOps<func::FuncOp>()) {
      if (func.isExternal() || !func.getBody().hasOneBlock())
        continue;
      Fuser planner(func.getBody().front(), limits, model);
      planner.setVerifyCaches(verifyCaches);
      if (gemmEpilogues)
        planner.formGemmEpilogues(geluGradEpilogues);
      if (biasGradientEpilogues)
        planner.formBiasGradients();
      planner.priorityFusion();
      if (horizontal)
        planner.horizontalFusion(horizontalReductions);
      if (!planner.cacheMismatch().empty()) {
        func.emitError() << "kiln-fuse: " << planner.cacheMismatch();
        return signalPassFailure();
      }
      if (failed(planner.materialize()))
        return signalPassFailure();
      if (report) {
        KernelStats stats = countKernels(func, costOptions);
        // On the location, not the op: a remark on an op prints all of it.
        InFlightDiagnostic remark = mlir::emitRemark(func.getLoc());
        remark << "kiln-fuse: " << stats.kernels << " kernels (" << stats.fusions
               << " fusions:";
        for (unsigned k = 0; k < 5; ++k)
          remark << (k ? ", " : " ") << stats.fusionsByKind[k] << " "
                 << stringifyFusionKind(static_cast<FusionKind>(k));
        remark << "; " << stats.libraryCalls << " library calls; "
               << stats.unfusedOps << " other ops), " << stats.collectives
               << " collectives, " << stats.bytesRead << " bytes read, "
               << stats.bytesWritten << " bytes written, "
               << llvm::formatv("{0:f1}", stats.modeledUs).str()
               << " us modelled; planned in " << planner.trials() << " trials ("
               << planner.keptPrices() << " prices kept), "
               << planner.pricings() << " kernels priced, "
               << planner.listings() << " successor lists ("
               << planner.listedSuccessors() << " successors), "
               << planner.examined() << " ops examined";
      }
    }
    // kiln-autodiff's recomputed clones were marked so that CSE kept them
    // apart from the forward ops and the plan out of forward kernels;
    // nothing after this pass merges ops, and the mark would make otherwise
    // equal kernels differ (fusionKey).
    getOperation().walk(
        [](mlir::Operation *op) { op->removeAttr(kRematAttrName); });
  }
};

} // namespace
} // namespace kiln
