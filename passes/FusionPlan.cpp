//===- FusionPlan.cpp - kernels as clusters of ops, for kiln-fuse ---------===//
//
// See FusionPlan.h: the plan's graph, its order, its costs and its
// journalled changes. The legality rules are in FusionLegality.cpp.
//
//===----------------------------------------------------------------------===//

#include "passes/FusionPlan.h"
#include "passes/Rematerialize.h"

#include "ir/Flops.h"
#include "ir/KilnOps.h"

#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/Sequence.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <queue>

namespace kiln::fusion {

using namespace mlir;

namespace {

bool hasStaticShapes(Operation *op) {
  auto isStatic = [](Type t) {
    auto ranked = dyn_cast<RankedTensorType>(t);
    return ranked && ranked.hasStaticShape();
  };
  return llvm::all_of(op->getOperandTypes(), isStatic) &&
         llvm::all_of(op->getResultTypes(), isStatic);
}

} // namespace

Value traceReshapes(Value v) {
  while (auto reshape = v.getDefiningOp<ReshapeOp>())
    v = reshape.getOperand();
  return v;
}

bool isSmallConstant(Operation *op) {
  auto constant = dyn_cast_or_null<ConstantOp>(op);
  if (!constant)
    return false;
  if (auto dense = dyn_cast<DenseElementsAttr>(constant.getValue()))
    if (dense.isSplat())
      return true;
  return cast<ShapedType>(constant.getType()).getNumElements() <= 16;
}

//===----------------------------------------------------------------------===//
// The graph
//===----------------------------------------------------------------------===//

void FusionPlan::buildGraph() {
  int64_t i = 0;
  for (Operation &op : block_)
    pos_[&op] = i++;
  Operation *lastEffect = nullptr;
  for (Operation &op : block_.without_terminator()) {
    if (isFreeOp(&op))
      continue;
    nodes_.push_back(&op);
    if (auto cost = dyn_cast<CostInterface>(&op))
      flops_[&op] = cost.getFlops();
    Cluster cluster;
    cluster.ops.push_back(&op);
    if (isa<DotGeneralOp>(op) && hasStaticShapes(&op))
      cluster.cls = ClusterClass::Gemm;
    else if (isFusibleOp(&op) && hasStaticShapes(&op))
      cluster.cls = ClusterClass::Fusible;
    int id = clusters_.size();
    clusters_.push_back(std::move(cluster));
    home_[&op] = id;
    member_[&op] = {id};
    if (!isMemoryEffectFree(&op)) {
      if (lastEffect) {
        orderNext_[lastEffect] = &op;
        orderPrev_[&op] = lastEffect;
      }
      lastEffect = &op;
    }
  }
  // Users through reshape chains.
  auto collect = [&](Value v, SmallVector<Operation *, 4> &out) {
    SmallVector<Value> work{v};
    while (!work.empty()) {
      Value cur = work.pop_back_val();
      for (Operation *user : cur.getUsers()) {
        if (isa<ReshapeOp>(user))
          work.push_back(user->getResult(0));
        else if (!llvm::is_contained(out, user))
          out.push_back(user);
      }
    }
  };
  for (Operation *node : nodes_) {
    auto &out = users_[node];
    for (Value r : node->getResults())
      collect(r, out);
  }
  for (BlockArgument arg : block_.getArguments())
    collect(arg, argUsers_[arg]);
  infos_.reserve(nodes_.size());
  for (Operation *node : nodes_) {
    NodeInfo info;
    info.remat = node->hasAttr(kRematAttrName);
    anyRemat_ |= info.remat;
    for (Value v : node->getOperands()) {
      Operand operand;
      operand.value = v;
      operand.source = traceReshapes(v);
      operand.sourceOp = operand.source.getDefiningOp();
      bool inBlock =
          operand.sourceOp && operand.sourceOp->getBlock() == &block_;
      operand.small = inBlock && isSmallConstant(operand.sourceOp);
      operand.node =
          inBlock && !isFreeOp(operand.sourceOp) ? operand.sourceOp : nullptr;
      operand.bytes = tensorBytes(operand.source.getType());
      info.operands.push_back(operand);
    }
    infoIndex_[node] = infos_.size();
    infos_.push_back(std::move(info));
  }
  if (auto func = dyn_cast_or_null<func::FuncOp>(block_.getParentOp())) {
    Operation *terminator = block_.getTerminator();
    for (unsigned j = 0, e = terminator->getNumOperands(); j < e; ++j)
      if (auto index = func.getResultAttrOfType<IntegerAttr>(
              j, KilnDialect::kUpdatesAttrName);
          index && index.getInt() >= 0 &&
          index.getInt() < int64_t(block_.getNumArguments()))
        updates_[traceReshapes(terminator->getOperand(j))] =
            block_.getArgument(index.getInt());
  }
}

bool FusionPlan::cheap(int c) const {
  const Cluster &cluster = clusters_[c];
  // A copied scatter_add would scan its indices once per copy.
  return cluster.alive && cluster.cls == ClusterClass::Fusible &&
         cluster.ops.size() <= kMaxDuplicatedOps && !hasReduce(c) &&
         !hasScatter(c);
}

bool FusionPlan::needsExport(Operation *x, int c) const {
  auto found = users_.find(x);
  if (found == users_.end())
    return false;
  for (Operation *user : found->second) {
    if (!isNode(user))
      return true; // the return
    auto it = member_.find(user);
    if (it == member_.end())
      continue;
    for (int m : it->second)
      if (int d = effective(m); d != c && !contains(x, d))
        return true;
  }
  return false;
}

SmallVector<Value> FusionPlan::exportsOf(int c) const {
  // legal, legalReduction and computeTime each ask in turn about the
  // cluster a trial made: the last answer is kept until the plan changes.
  if (lastExports_.cluster == c && lastExports_.version == version_)
    return lastExports_.values;
  SmallVector<Value> &exports = lastExports_.values;
  exports.clear();
  auto kept = [&](int k) -> const SmallVector<Value> * {
    auto it = exportsCache_.find(k);
    return it == exportsCache_.end() ? nullptr : &it->second;
  };
  const SmallVector<Value> *exportsA, *exportsB;
  if (!journalling_ && kept(c)) {
    exports = *kept(c);
  } else if (c == trialMerge_.s && (exportsA = kept(trialMerge_.a)) &&
             (exportsB = kept(trialMerge_.b))) {
    // A merge writes what either of its two wrote and someone else still
    // reads: a value needed outside the merge was needed outside the one
    // of the two that computed it (the memberships of its readers outside
    // the two are as before). Each list is in block order, and no op is at
    // home in both.
    auto opOf = [](Value v) { return v.getDefiningOp(); };
    SmallVector<Value> both;
    both.resize(exportsA->size() + exportsB->size());
    std::merge(exportsA->begin(), exportsA->end(), exportsB->begin(),
               exportsB->end(), both.begin(), [&](Value x, Value y) {
                 return opOf(x) != opOf(y) && opOf(x)->isBeforeInBlock(opOf(y));
               });
    for (size_t i = 0; i < both.size();) {
      Operation *op = opOf(both[i]);
      size_t j = i;
      while (j < both.size() && opOf(both[j]) == op)
        ++j;
      if (needsExport(op, c))
        exports.append(both.begin() + i, both.begin() + j);
      i = j;
    }
    if (verifyCaches_ && cacheMismatch_.empty()) {
      SmallVector<Value> fresh;
      walkExports(c, fresh);
      if (fresh != exports)
        cacheMismatch_ = "the results a merge of kernels " +
                         std::to_string(trialMerge_.a) + " and " +
                         std::to_string(trialMerge_.b) +
                         " writes differ from the ones its ops write";
    }
  } else if (llvm::is_contained(trialCopies_, c) && kept(c)) {
    // A kernel that took copies of a producer's ops on trial writes what
    // it wrote less what the copies now read themselves: a reader that
    // took a copy is still in the producer, and the kernel's own ops are
    // at home where they were.
    for (Value v : *kept(c))
      if (needsExport(v.getDefiningOp(), c))
        exports.push_back(v);
    if (verifyCaches_ && cacheMismatch_.empty()) {
      SmallVector<Value> fresh;
      walkExports(c, fresh);
      if (fresh != exports)
        cacheMismatch_ =
            "the results kernel " + std::to_string(c) +
            " writes after taking copies differ from the ones its ops write";
    }
  } else {
    walkExports(c, exports);
  }
  if (!journalling_)
    exportsCache_[c] = exports;
  lastExports_.cluster = c;
  lastExports_.version = version_;
  return exports;
}

void FusionPlan::walkExports(int c, SmallVector<Value> &out) const {
  out.clear();
  examined_ += clusters_[c].ops.size();
  for (Operation *op : clusters_[c].ops)
    if (homeOf(op) == c && needsExport(op, c))
      llvm::append_range(out, op->getResults());
}

bool FusionPlan::internal(Value v, int c) const {
  Value source = traceReshapes(v);
  Operation *def = source.getDefiningOp();
  if (!def || def->getBlock() != &block_)
    return false;
  if (isSmallConstant(def))
    return true;
  return !isFreeOp(def) && contains(def, c);
}

SmallVector<int> FusionPlan::successors(int c) { return successorList(c); }

const SmallVector<int> &FusionPlan::successorList(int c) {
  // Cached between changes to the plan; never while a trial is open.
  if (!journalling_) {
    auto it = successorCache_.find(c);
    if (it != successorCache_.end())
      return it->second;
  }
  SmallVector<int> &out = successorScratch_;
  listAndKeep(c, out, std::numeric_limits<size_t>::max());
  return journalling_ ? out : successorCache_.find(c)->second;
}

bool FusionPlan::moreSuccessorsThan(int c, size_t limit) {
  if (!journalling_) {
    if (auto it = successorCache_.find(c); it != successorCache_.end())
      return it->second.size() > limit;
    if (auto it = successorsAtLeast_.find(c);
        it != successorsAtLeast_.end() && it->second > limit)
      return true;
  }
  SmallVector<int> &out = boundedScratch_;
  listAndKeep(c, out, limit);
  return out.size() > limit;
}

void FusionPlan::listAndKeep(int c, SmallVector<int> &out, size_t limit) {
  computeSuccessors(c, out, limit);
  ++listings_;
  listedSuccessors_ += out.size();
  // Outside a trial, what it learnt is kept: the whole list, or how many
  // there are at least.
  if (journalling_)
    return;
  if (out.size() > limit)
    successorsAtLeast_[c] = out.size();
  else
    successorCache_[c] = out;
}

void FusionPlan::computeSuccessors(int c, SmallVector<int> &out, size_t limit) {
  out.clear();
  // Each successor once, in the order first found, marked in a round of
  // listed_ (a kernel read by every parameter's update has thousands of
  // successors, and reaches() may be walking with seen_).
  uint32_t round = listed_.next(clusters_.size());
  auto add = [&](int d) {
    if (d == c || listed_.of[d] == round)
      return;
    listed_.of[d] = round;
    out.push_back(d);
  };
  examined_ += clusters_[c].ops.size();
  for (Operation *op : clusters_[c].ops) {
    if (homeOf(op) != c)
      continue;
    for (Operation *user : users_.find(op)->second) {
      auto m = member_.find(user);
      if (m == member_.end())
        continue;
      for (int raw : m->second)
        if (int d = effective(raw);
            d != c && listed_.of[d] != round && !contains(op, d))
          add(d);
      if (out.size() > limit)
        return;
    }
    if (Operation *next = orderNext_.lookup(op))
      if (int home = homeOf(next); home >= 0)
        add(home);
  }
}

SmallVector<int> FusionPlan::predecessors(int c) const {
  // Kept between changes to the plan; never while a trial is open.
  if (!journalling_) {
    auto it = predecessorCache_.find(c);
    if (it != predecessorCache_.end())
      return it->second;
  }
  SmallVector<int> out = listPredecessors(c);
  if (!journalling_)
    predecessorCache_[c] = out;
  return out;
}

SmallVector<int> FusionPlan::listPredecessors(int c) const {
  SmallVector<int> out;
  auto add = [&](int p) {
    if (p != c && !llvm::is_contained(out, p))
      out.push_back(p);
  };
  examined_ += clusters_[c].ops.size();
  for (Operation *op : clusters_[c].ops) {
    for (const Operand &operand : infoOf(op).operands) {
      Operation *def = operand.node;
      if (!def || contains(def, c))
        continue;
      if (int home = homeOf(def); home >= 0)
        add(home);
    }
    if (Operation *prev = orderPrev_.lookup(op))
      if (int home = homeOf(prev); home >= 0)
        add(home);
  }
  return out;
}

bool FusionPlan::reaches(int from, int to, bool skipDirect) {
  // A depth-first walk; clusters seen carry this walk's stamp. With the
  // order, a path to |to| only passes kernels numbered below it, and the
  // walk tries the highest-numbered successor first: in a training step's
  // long chains (forward, loss, backward) that is the one closest to |to|.
  if (ordered_ && order_[from] >= order_[to])
    return false;
  int64_t limit = ordered_ ? order_[to] : 0;
  uint32_t stamp = seen_.next(clusters_.size());
  SmallVector<int> &work = reachWork_;
  work.clear();
  // Pushes |c|'s successors; true when one of them is |to|.
  auto expand = [&](int c, bool direct) {
    size_t first = work.size();
    for (int s : successorList(c)) {
      if (s == to) {
        if (direct && skipDirect)
          continue;
        return true;
      }
      if (seen_.of[s] == stamp || (ordered_ && order_[s] > limit))
        continue;
      seen_.of[s] = stamp;
      work.push_back(s);
    }
    if (ordered_)
      std::sort(work.begin() + first, work.end(),
                [&](int x, int y) { return order_[x] < order_[y]; });
    return false;
  };
  if (expand(from, /*direct=*/true))
    return true;
  while (!work.empty())
    if (expand(work.pop_back_val(), /*direct=*/false))
      return true;
  return false;
}

void FusionPlan::startOrder() {
  // Kahn's algorithm, taking the ready kernel that comes first in the
  // block, so that the numbers stay close to the block's order and a
  // merge's window (orderMerge) stays small.
  order_.assign(clusters_.size(), -1);
  std::vector<int> pending(clusters_.size(), 0);
  for (int c = 0, e = clusters_.size(); c < e; ++c)
    if (clusters_[c].alive)
      for (int s : successorList(c))
        ++pending[s];
  auto first = [&](int c) { return pos_.lookup(clusters_[c].ops.front()); };
  using Ready = std::pair<int64_t, int>;
  std::priority_queue<Ready, std::vector<Ready>, std::greater<Ready>> ready;
  for (int c = 0, e = clusters_.size(); c < e; ++c)
    if (clusters_[c].alive && pending[c] == 0)
      ready.push({first(c), c});
  int64_t next = 0;
  while (!ready.empty()) {
    int c = ready.top().second;
    ready.pop();
    order_[c] = next++;
    for (int s : successorList(c))
      if (--pending[s] == 0)
        ready.push({first(s), s});
  }
  // A cycle (never in a plan kiln-fuse built) leaves kernels unnumbered.
  ordered_ = llvm::all_of(llvm::seq<int>(0, clusters_.size()), [&](int c) {
    return !clusters_[c].alive || order_[c] >= 0;
  });
}

// |s| replaces |a| and |b|. It must come after every kernel that reaches
// it and before every kernel it reaches. Those numbered outside the
// window between |a| and |b| already are; inside it, the ones |s|
// reaches (F) and the ones that reach |s| (B) share the window's numbers
// they and |a| and |b| held: B first, then |s|, then F, each in its old
// order. F and B cannot meet (that would be a cycle through |s|).
void FusionPlan::orderMerge(int a, int b, int s) {
  if (!ordered_)
    return;
  if (!clusters_[s].alive || clusters_[a].alive || clusters_[b].alive) {
    ordered_ = false;
    return;
  }
  if (order_.size() < clusters_.size())
    order_.resize(clusters_.size(), -1);
  int64_t lo = std::min(order_[a], order_[b]), hi = std::max(order_[a], order_[b]);
  SmallVector<int> forward, backward, work;
  uint32_t reached = seen_.next(clusters_.size());
  seen_.of[s] = reached;
  work.push_back(s);
  while (!work.empty()) {
    int c = work.pop_back_val();
    for (int d : successorList(c))
      if (seen_.of[d] != reached && order_[d] < hi) {
        seen_.of[d] = reached;
        forward.push_back(d);
        work.push_back(d);
      }
  }
  uint32_t reaching = seen_.next(clusters_.size());
  seen_.of[s] = reaching;
  work.push_back(s);
  while (!work.empty()) {
    int c = work.pop_back_val();
    for (int p : predecessors(c)) {
      if (seen_.of[p] == reaching || order_[p] <= lo)
        continue;
      if (seen_.of[p] == reached) { // a cycle: no order to keep
        ordered_ = false;
        return;
      }
      seen_.of[p] = reaching;
      backward.push_back(p);
      work.push_back(p);
    }
  }
  auto byOrder = [&](int x, int y) { return order_[x] < order_[y]; };
  llvm::sort(forward, byOrder);
  llvm::sort(backward, byOrder);
  SmallVector<int64_t> slots{lo, hi};
  for (int c : backward)
    slots.push_back(order_[c]);
  for (int c : forward)
    slots.push_back(order_[c]);
  llvm::sort(slots);
  size_t k = 0;
  for (int c : backward)
    order_[c] = slots[k++];
  order_[s] = slots[k++];
  for (int c : forward)
    order_[c] = slots[k++];
}

//===----------------------------------------------------------------------===//
// Costs and legality
//===----------------------------------------------------------------------===//

double FusionPlan::timeOf(int c) const {
  // Cached between changes to the plan, as successors(); never while a
  // trial is open.
  if (!journalling_) {
    auto it = timeCache_.find(c);
    if (it != timeCache_.end())
      return it->second;
  }
  ++pricings_;
  double time = computeTime(c);
  if (!journalling_)
    timeCache_[c] = time;
  return time;
}

const ClusterSummary &FusionPlan::summaryOf(int c) const {
  const Cluster &cluster = clusters_[c];
  if (!cluster.summary)
    cluster.summary = walkSummary(c);
  else if (verifyCaches_ && cacheMismatch_.empty() && cluster.alive) {
    std::shared_ptr<const ClusterSummary> fresh = walkSummary(c);
    const ClusterSummary &kept = *cluster.summary;
    if (fresh->reads.values != kept.reads.values ||
        fresh->reads.bytes != kept.reads.bytes ||
        fresh->reads.flops != kept.reads.flops ||
        fresh->reduces != kept.reduces || fresh->scatters != kept.scatters ||
        fresh->guests != kept.guests)
      cacheMismatch_ =
          llvm::formatv(
              "the summary kept for kernel {0} differs from a walk of its ops "
              "(inputs {1} and {2}, bytes {3} and {4}, flops {5} and {6}, "
              "reduces "
              "{7} and {8}, scatters {9} and {10}, copies {11} and {12})",
              c, kept.reads.values, fresh->reads.values, kept.reads.bytes,
              fresh->reads.bytes, kept.reads.flops, fresh->reads.flops,
              kept.reduces.size(), fresh->reduces.size(), kept.scatters.size(),
              fresh->scatters.size(), kept.guests.size(), fresh->guests.size())
              .str();
  }
  return *cluster.summary;
}

// Sums an input list's reads (flops aside).
static void totalReads(ClusterSummary &summary) {
  summary.reads.values = 0;
  summary.reads.bytes = 0;
  for (const ClusterSummary::Input &input : summary.inputs) {
    summary.reads.values += input.values.size();
    int64_t sliceBytes = 0;
    for (Operation *slice : input.slices)
      sliceBytes += tensorBytes(slice->getResult(0).getType());
    summary.reads.bytes +=
        input.onlySlices ? std::min(input.bytes, sliceBytes) : input.bytes;
  }
}

std::shared_ptr<const ClusterSummary> FusionPlan::walkSummary(int c) const {
  auto summary = std::make_shared<ClusterSummary>();
  llvm::SmallDenseMap<Value, unsigned, 16> index;
  examined_ += clusters_[c].ops.size();
  for (Operation *op : clusters_[c].ops) {
    for (const Operand &operand : infoOf(op).operands) {
      if (operand.small || (operand.node && contains(operand.node, c)))
        continue;
      auto [it, inserted] =
          index.insert({operand.source, summary->inputs.size()});
      if (inserted) {
        summary->inputs.emplace_back();
        summary->inputs.back().source = operand.source;
        summary->inputs.back().node = operand.node;
        summary->inputs.back().bytes = operand.bytes;
      }
      ClusterSummary::Input &input = summary->inputs[it->second];
      if (!llvm::is_contained(input.values, operand.value))
        input.values.push_back(operand.value);
      if (isa<SliceOp>(op) && operand.value == operand.source)
        input.slices.push_back(op);
      else
        input.onlySlices = false;
    }
    summary->reads.flops = flops::add(summary->reads.flops, flops_.lookup(op));
    if (isa<ReduceOp>(op))
      summary->reduces.push_back(op);
    if (isa<ScatterAddOp>(op))
      summary->scatters.push_back(op);
    if (homeOf(op) != c)
      summary->guests.push_back(op);
  }
  totalReads(*summary);
  return summary;
}

// Merges two lists in block order, each op once.
static SmallVector<Operation *, 4> unionInBlockOrder(ArrayRef<Operation *> x,
                                                     ArrayRef<Operation *> y) {
  SmallVector<Operation *, 4> out(x.size() + y.size());
  auto end = std::merge(
      x.begin(), x.end(), y.begin(), y.end(), out.begin(),
      [](Operation *p, Operation *q) { return p->isBeforeInBlock(q); });
  out.erase(std::unique(out.begin(), end), out.end());
  return out;
}

std::shared_ptr<const ClusterSummary>
FusionPlan::combine(int x, int y, SmallVector<Operation *, 4> guests) const {
  const ClusterSummary &sx = summaryOf(x), &sy = summaryOf(y);
  auto summary = std::make_shared<ClusterSummary>();
  llvm::SmallDenseMap<Value, unsigned, 16> index;
  // An input of one that the other computes is inside the union.
  auto add = [&](const ClusterSummary::Input &input, int other) {
    if (input.node && rawContains(input.node, other))
      return;
    auto [it, inserted] = index.insert({input.source, summary->inputs.size()});
    if (inserted) {
      summary->inputs.push_back(input);
      return;
    }
    ClusterSummary::Input &to = summary->inputs[it->second];
    for (Value v : input.values)
      if (!llvm::is_contained(to.values, v))
        to.values.push_back(v);
    for (Operation *slice : input.slices)
      if (!llvm::is_contained(to.slices, slice))
        to.slices.push_back(slice);
    to.onlySlices &= input.onlySlices;
  };
  for (const ClusterSummary::Input &input : sx.inputs)
    add(input, y);
  for (const ClusterSummary::Input &input : sy.inputs)
    add(input, x);
  totalReads(*summary);
  // The flops of the larger list, and of the smaller one's ops it lacks
  // (a sum of non-negative counts saturating at the top: in any order).
  bool xLarger = clusters_[x].ops.size() >= clusters_[y].ops.size();
  int large = xLarger ? x : y, small = xLarger ? y : x;
  summary->reads.flops = summaryOf(large).reads.flops;
  examined_ += clusters_[small].ops.size();
  for (Operation *op : clusters_[small].ops)
    if (!rawContains(op, large))
      summary->reads.flops =
          flops::add(summary->reads.flops, flops_.lookup(op));
  summary->reduces = unionInBlockOrder(sx.reduces, sy.reduces);
  summary->scatters = unionInBlockOrder(sx.scatters, sy.scatters);
  summary->guests = std::move(guests);
  return summary;
}

double FusionPlan::computeTime(int c) const {
  const Reads &reads = readsOf(c);
  int64_t bytes = reads.bytes;
  for (Value v : exportsOf(c))
    bytes += tensorBytes(v.getType());
  return model_.kernelTimeUs(bytes, reads.flops);
}

//===----------------------------------------------------------------------===//
// Journalled changes
//===----------------------------------------------------------------------===//

void FusionPlan::rollback() {
  ++version_;
  trialMerge_ = {};
  trialCopies_.clear();
  for (auto &[op, old] : llvm::reverse(journal_.members))
    member_[op] = old;
  for (auto &[op, old] : llvm::reverse(journal_.homes)) {
    if (old < 0)
      home_.erase(op);
    else
      home_[op] = old;
  }
  for (auto &[c, old] : llvm::reverse(journal_.clusters))
    clusters_[c] = std::move(old);
  for (int c : journal_.killed)
    clusters_[c].alive = true;
  clusters_.resize(journal_.numClusters);
  journalling_ = false;
}

// What successors(c) and timeOf(c) read: c's ops and which are at home
// in c; the memberships of those ops and of their users; the home of the
// op ordered after each. So after a committed change, the clusters whose
// answers may differ are those the journal saved or made, and for every op
// whose home or memberships changed: its old and new home and members,
// the homes of the nodes it reads (it is their user), and the home of the
// op ordered before it. Their cached answers go; the rest stay.
void FusionPlan::forgetChanged() {
  DenseSet<int> stale(journal_.killed.begin(), journal_.killed.end());
  for (auto &[c, old] : journal_.clusters)
    stale.insert(c);
  for (int c = journal_.numClusters, e = clusters_.size(); c < e; ++c)
    stale.insert(c);
  auto around = [&](Operation *op) {
    if (auto it = home_.find(op); it != home_.end())
      stale.insert(it->second);
    for (int m : member_.lookup(op))
      stale.insert(m);
    for (const Operand &operand : infoOf(op).operands)
      if (Operation *def = operand.node)
        if (auto it = home_.find(def); it != home_.end())
          stale.insert(it->second);
    if (Operation *prev = orderPrev_.lookup(op))
      if (auto it = home_.find(prev); it != home_.end())
        stale.insert(it->second);
  };
  for (auto &[op, old] : journal_.homes) {
    if (old >= 0)
      stale.insert(old);
    around(op);
  }
  for (auto &[op, old] : journal_.members) {
    for (int m : old)
      stale.insert(m);
    around(op);
  }
  // A kernel's predecessors are the homes of what it reads: they change
  // for the kernels reading an op whose home changed (and the one ordered
  // after it), besides the changed kernels themselves.
  DenseSet<int> staleInputs(journal_.killed.begin(), journal_.killed.end());
  for (auto &[c, old] : journal_.clusters)
    staleInputs.insert(c);
  for (int c = journal_.numClusters, e = clusters_.size(); c < e; ++c)
    staleInputs.insert(c);
  for (auto &[op, old] : journal_.homes) {
    for (Operation *user : users_.lookup(op))
      for (int m : member_.lookup(user))
        staleInputs.insert(m);
    if (Operation *next = orderNext_.lookup(op))
      for (int m : member_.lookup(next))
        staleInputs.insert(m);
  }
  for (int c : staleInputs)
    predecessorCache_.erase(c);
  ++commits_;
  if (changedAt_.size() < clusters_.size())
    changedAt_.resize(clusters_.size(), 0);
  for (int c : stale) {
    successorCache_.erase(c);
    successorsAtLeast_.erase(c);
    timeCache_.erase(c);
    exportsCache_.erase(c);
    changedAt_[c] = commits_;
  }
  journal_.clear();
}

void FusionPlan::verifyCaches() {
  if (!cacheMismatch_.empty())
    return;
  SmallVector<int> fresh;
  if (ordered_)
    for (int c = 0, e = clusters_.size(); c < e; ++c) {
      if (!clusters_[c].alive)
        continue;
      computeSuccessors(c, fresh);
      for (int d : fresh)
        if (order_[d] <= order_[c]) {
          cacheMismatch_ = "kernel " + std::to_string(c) + " is numbered " +
                           std::to_string(order_[c]) + ", not before its successor " +
                           std::to_string(d) + " (" + std::to_string(order_[d]) + ")";
          return;
        }
    }
  // A kept list of each live kernel against a fresh one.
  auto listsMatch = [&](const auto &kept, auto listed, const char *what) {
    for (auto &[c, entry] : kept)
      if (clusters_[c].alive && listed(c) != entry) {
        cacheMismatch_ = std::string("the ") + what + " kept for kernel " +
                         std::to_string(c) + " differ from its " + what +
                         " now";
        return false;
      }
    return true;
  };
  if (!listsMatch(
          successorCache_,
          [&](int c) {
            computeSuccessors(c, fresh);
            return fresh;
          },
          "successors"))
    return;
  for (auto &[c, atLeast] : successorsAtLeast_) {
    if (!clusters_[c].alive)
      continue;
    computeSuccessors(c, fresh);
    if (fresh.size() < atLeast) {
      cacheMismatch_ = "kernel " + std::to_string(c) + " was kept as having at least " +
                       std::to_string(atLeast) + " successors, and has " +
                       std::to_string(fresh.size());
      return;
    }
  }
  for (auto &[c, entry] : timeCache_)
    if (clusters_[c].alive && computeTime(c) != entry) {
      cacheMismatch_ = "the modelled time kept for kernel " + std::to_string(c) +
                       " differs from its time now";
      return;
    }
  if (!listsMatch(
          exportsCache_,
          [&](int c) {
            SmallVector<Value> results;
            walkExports(c, results);
            return results;
          },
          "results") ||
      !listsMatch(
          predecessorCache_, [&](int c) { return listPredecessors(c); },
          "predecessors"))
    return;
  // (summaryOf checks a kept summary against a walk.)
  for (int c = 0, e = clusters_.size(); c < e; ++c)
    if (clusters_[c].alive && clusters_[c].summary)
      summaryOf(c);
}

void FusionPlan::killCluster(int c) {
  if (journalling_ && c < static_cast<int>(journal_.numClusters))
    journal_.killed.push_back(c);
  clusters_[c].alive = false;
}

void FusionPlan::setHome(Operation *op, int c) {
  ++version_;
  if (journalling_) {
    auto it = home_.find(op);
    journal_.homes.push_back({op, it == home_.end() ? -1 : it->second});
  }
  if (c < 0)
    home_.erase(op);
  else
    home_[op] = c;
}

void FusionPlan::setMembers(Operation *op, SmallVector<int, 2> members) {
  ++version_;
  if (journalling_)
    journal_.members.push_back({op, member_.lookup(op)});
  member_[op] = std::move(members);
}

// A new cluster with the ops of |a| and |b|; both die. Their ops keep
// their homes and memberships as written until a commit writes them out
// (materializeMerge): a trial reads them through effective().
int FusionPlan::merge(int a, int b) {
  assert(journalling_ && "kiln-fuse: a merge outside begin() and commit()");
  materializeMerge(); // a merge after another in one change
  ++version_;
  int s = clusters_.size();
  Cluster merged;
  merged.cls = clusters_[a].cls == ClusterClass::Gemm || clusters_[b].cls == ClusterClass::Gemm
                   ? ClusterClass::Gemm
                   : ClusterClass::Fusible;
  merged.sibling = clusters_[a].sibling || clusters_[b].sibling;
  merged.horizontal = clusters_[a].horizontal || clusters_[b].horizontal;
  // Both lists are in block order, and an op copied into both is in each.
  // (The block does not change while the plan is made: an op's place in
  // it is kept in the op.)
  const auto &opsA = clusters_[a].ops, &opsB = clusters_[b].ops;
  merged.ops.resize(opsA.size() + opsB.size());
  auto end = std::merge(
      opsA.begin(), opsA.end(), opsB.begin(), opsB.end(), merged.ops.begin(),
      [](Operation *x, Operation *y) { return x->isBeforeInBlock(y); });
  merged.ops.erase(std::unique(merged.ops.begin(), end), merged.ops.end());
  // Its guests: those of either whose home is neither.
  SmallVector<Operation *, 4> guests;
  for (Operation *op :
       unionInBlockOrder(summaryOf(a).guests, summaryOf(b).guests))
    if (int home = rawHome(op); home != a && home != b)
      guests.push_back(op);
  merged.summary = combine(a, b, std::move(guests));
  clusters_.push_back(std::move(merged));
  journal_.merges.push_back({a, b, s});
  killCluster(a);
  killCluster(b);
  trialMerge_ = {a, b, s};
  return s;
}

void FusionPlan::materializeMerge() {
  auto [a, b, s] = trialMerge_;
  if (s < 0)
    return;
  trialMerge_ = {};
  examined_ += clusters_[s].ops.size();
  for (Operation *op : clusters_[s].ops) {
    SmallVector<int, 2> members;
    for (int m : member_.lookup(op))
      if (m != a && m != b)
        members.push_back(m);
    members.push_back(s);
    setMembers(op, members);
    if (int home = rawHome(op); home == a || home == b)
      setHome(op, s);
  }
}

// Copies the ops of |p| into |d| as guests.
void FusionPlan::duplicate(int p, int d) {
  assert(journalling_ && "kiln-fuse: a copy outside begin() and commit()");
  materializeMerge();
  ++version_;
  if (!llvm::is_contained(trialCopies_, d))
    trialCopies_.push_back(d);
  // Every op of |p| that |d| lacks comes in as a guest (none is at home
  // in |d|: |d| would hold it).
  SmallVector<Operation *, 4> copied;
  examined_ += clusters_[p].ops.size();
  for (Operation *op : clusters_[p].ops)
    if (!rawContains(op, d))
      copied.push_back(op);
  std::shared_ptr<const ClusterSummary> summary =
      combine(d, p, unionInBlockOrder(summaryOf(d).guests, copied));
  // Both lists are in block order: merge them. The old list goes to the
  // journal as it is (a copy into a kernel of hundreds of ops is priced
  // often).
  Cluster &cluster = clusters_[d];
  SmallVector<Operation *> ops(cluster.ops.size() + copied.size());
  std::merge(cluster.ops.begin(), cluster.ops.end(), copied.begin(),
             copied.end(), ops.begin(),
             [](Operation *x, Operation *y) { return x->isBeforeInBlock(y); });
  if (journalling_ && d < static_cast<int>(journal_.numClusters))
    journal_.clusters.push_back({d, std::move(cluster)}); // (its flags stay)
  cluster.ops = std::move(ops);
  cluster.summary = std::move(summary);
  for (Operation *op : copied) {
    SmallVector<int, 2> members = member_.lookup(op);
    members.push_back(d);
    setMembers(op, members);
  }
}

// Removes |p| when every user of its values now computes them itself.
void FusionPlan::dropIfUnneeded(int p) {
  assert(journalling_ && "kiln-fuse: a removal outside begin() and commit()");
  materializeMerge();
  if (!exportsOf(p).empty())
    return;
  ++version_;
  killCluster(p);
  examined_ += clusters_[p].ops.size();
  for (Operation *op : clusters_[p].ops) {
    SmallVector<int, 2> members;
    for (int m : member_.lookup(op))
      if (m != p)
        members.push_back(m);
    setMembers(op, members);
    if (home_.lookup(op) == p && home_.count(op))
      setHome(op, -1);
  }
}


} // namespace kiln::fusion
