//===- FusionPlan.h - kernels as clusters of ops, for kiln-fuse ---*- C++ -*-===//
//
// The plan kiln-fuse builds before it rewrites anything: clusters of ops
// over the unchanged function body, one cluster per kernel. An op has at
// most one home cluster, which computes it and exports its value to whoever
// needs it; cheap ops may also be copied as guests into other clusters,
// which then compute them themselves. A cluster graph edge runs from the
// home of a value to every cluster that reads that value, plus an edge
// between consecutive side-effecting ops (collectives), so that no merge can
// reorder them.
//
// The plan answers what a cluster reads and writes, what it costs (through
// FusionCostModel) and whether it can be one kernel, and it changes by
// merging clusters or copying one into another. Changes can be journalled
// and rolled back, so a merge is priced by applying it, measuring, and
// undoing it.
//
// Reshapes are bitcasts, not kernels: they are edges, copied into a region
// when both ends are inside it and left outside otherwise. Splat and tiny
// constants are copied into the regions that use them.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_PASSES_FUSIONPLAN_H
#define KILN_PASSES_FUSIONPLAN_H

#include "passes/FusionCostModel.h"

#include "mlir/IR/Block.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallVector.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <tuple>
#include <vector>

namespace kiln::fusion {

using mlir::Operation;
using mlir::Value;

// What one kernel may hold (the pass options).
struct Limits {
  int64_t maxInputs = 32;
  int64_t maxOutputs = 32;
  int64_t sharedMemoryBytes = 49152;
  int64_t siblingMinBytes = 4096;
  // A reduction kernel may also hold row-group partials (FusionPlan.cpp's
  // splitRowGroupPartials; kiln-fuse's row-group-partials, CUDA).
  bool rowGroupPartials = false;
};

// Clusters of at most this many ops may be copied into consumers.
constexpr size_t kMaxDuplicatedOps = 32;

enum class ClusterClass {
  Fusible, // a generated kernel: loop or reduction fusion
  Gemm,    // a dot_general, alone (a library call) or with its epilogue
  Opaque,  // a kernel or collective that no fusion takes
};

// What a kernel reads from outside: its distinct operand values (as its
// ops read them, the kernel's inputs), the bytes of their sources (each
// once, through reshapes; an input read only through slices costs the
// slices, at most the whole input), and its ops' flops.
struct KernelReads {
  int64_t values = 0, bytes = 0, flops = 0;
};

// What a kernel's op list alone decides, whatever the rest of the plan
// does: an op's operand is computed inside the kernel exactly when its
// producer is one of the kernel's ops, and the ops at home in a kernel are
// fixed while it lives (a merge or a removal ends it). So it is worked out
// once per op list, and a merge's or a copy's from the two lists' summaries
// (FusionPlan::combine) in the time of their inputs and the smaller list,
// not of the whole kernel: pricing a merge into a kernel of hundreds of ops
// (an unrolled loop, a tricubic sample's 64 taps) no longer walks it.
struct ClusterSummary {
  // One source read from outside (through reshapes).
  struct Input {
    Value source;
    Operation *node = nullptr;                // its producer, when a node
    int64_t bytes = 0;                        // tensorBytes(source)
    bool onlySlices = true;                   // read only by slices of it
    llvm::SmallVector<Value, 1> values;       // as the ops read it, each once
    llvm::SmallVector<Operation *, 1> slices; // the slices reading it
  };
  llvm::SmallVector<Input, 8> inputs;
  KernelReads reads;
  // In block order.
  llvm::SmallVector<Operation *, 1> reduces, scatters;
  // The ops copied in: not at home here.
  llvm::SmallVector<Operation *, 4> guests;
};

// One kernel of the plan. A merge makes a new cluster; the merged ones die
// (alive = false).
struct Cluster {
  llvm::SmallVector<Operation *> ops; // home and guest ops, in block order
  ClusterClass cls = ClusterClass::Opaque;
  bool alive = true;
  bool sibling = false;
  bool horizontal = false;
  // Its op list's summary, once worked out; a copy into the cluster
  // replaces it (and a rollback brings the old one back with the list).
  mutable std::shared_ptr<const ClusterSummary> summary;
};

// Follows |v| back through reshapes to the value they bitcast.
Value traceReshapes(Value v);

// Constants small enough to copy into every kernel that reads them: splats,
// and at most 16 elements.
bool isSmallConstant(Operation *op);

// Marks on kernels that a new round clears in O(1): a kernel is marked in
// a round when its entry holds the round's number.
struct Stamps {
  std::vector<uint32_t> of;
  uint32_t round = 0;
  // Starts a round over |size| kernels and returns its number.
  uint32_t next(size_t size) {
    if (of.size() < size)
      of.resize(size, 0);
    if (++round == 0) { // wrapped: no stale mark may equal a new round
      std::fill(of.begin(), of.end(), 0);
      round = 1;
    }
    return round;
  }
};

class FusionPlan {
public:
  FusionPlan(mlir::Block &block, const Limits &limits, const FusionCostModel &model)
      : block_(block), limits_(limits), model_(model) {
    buildGraph();
  }

  // The graph.
  bool isNode(Operation *op) const {
    return pos_.count(op) && !isFreeOp(op) && op != block_.getTerminator();
  }
  Operation *nodeOf(Value source) const {
    Operation *def = source.getDefiningOp();
    return def && def->getBlock() == &block_ && !isFreeOp(def) ? def : nullptr;
  }
  bool contains(Operation *op, int c) const {
    auto it = member_.find(op);
    if (it == member_.end())
      return false;
    for (int m : it->second)
      if (effective(m) == c)
        return true;
    return false;
  }
  // The cluster computing |op| and exporting its value; -1 when none does
  // (every kernel reading it computes it itself).
  int homeOf(Operation *op) const {
    auto it = home_.find(op);
    return it == home_.end() ? -1 : effective(it->second);
  }
  bool fusible(int c) const {
    return clusters_[c].alive && clusters_[c].cls == ClusterClass::Fusible;
  }
  // A fusible cluster without reduces, small enough to copy.
  bool cheap(int c) const;
  bool hasReduce(int c) const { return !summaryOf(c).reduces.empty(); }
  bool hasScatter(int c) const { return !summaryOf(c).scatters.empty(); }
  // The summary of |c|'s op list (worked out once per list).
  const ClusterSummary &summaryOf(int c) const;
  // Whether the value of |x| (at home in |c|) is needed outside |c|.
  bool needsExport(Operation *x, int c) const;
  // The values |c| writes: its results.
  llvm::SmallVector<Value> exportsOf(int c) const;
  // Whether |v| (an operand of an op of |c|) is computed inside |c|.
  bool internal(Value v, int c) const;

  // A node's operand as the plan sees it, worked out once (buildGraph):
  // the hot questions (is it computed inside a kernel, which kernel
  // computes it) then take no walk through reshapes and no lookup of
  // the defining op.
  struct Operand {
    Value value;                   // as the op reads it
    Value source;                  // traceReshapes(value)
    Operation *sourceOp = nullptr; // source's defining op, in any block
    Operation *node = nullptr;     // nodeOf(source)
    bool small = false;            // a small constant of the block: copied
    int64_t bytes = 0;             // tensorBytes(source.getType())
  };
  struct NodeInfo {
    llvm::SmallVector<Operand, 3> operands;
    bool remat = false; // kiln-autodiff's recomputed clone (kRematAttrName)
  };
  const NodeInfo &infoOf(Operation *node) const {
    return infos_[infoIndex_.find(node)->second];
  }
  // internal(operand.value, c).
  bool internal(const Operand &operand, int c) const {
    return operand.small || (operand.node && contains(operand.node, c));
  }
  llvm::SmallVector<int> successors(int c);
  // Whether |c| has more than |limit| successors; lists no more than
  // limit + 1 of them when its list is not kept (a scalar that every
  // parameter's update reads has thousands, and its list goes each time
  // one of them changes).
  bool moreSuccessorsThan(int c, size_t limit);
  llvm::SmallVector<int> predecessors(int c) const;
  // Whether a path leads from |from| to |to|, not counting the direct edge
  // when |skipDirect| is set. Once startOrder() has run, the walk only
  // visits kernels ordered before |to|.
  bool reaches(int from, int to, bool skipDirect);
  // Numbers the live kernels in a topological order (every edge runs from
  // a lower number to a higher one) and keeps it through committed changes:
  // a merge renumbers the kernels between the two it joins that must come
  // before or after it (Pearce and Kelly's dynamic topological order); a
  // copy into a consumer only adds edges that already run forwards.
  void startOrder();

  // Costs and legality.
  double timeOf(int c) const;
  bool legal(int c) const;
  // How many times timeOf and legal computed a kernel's cost or legality
  // (kiln-fuse's report; timeOf's cached answers do not count).
  int64_t pricings() const { return pricings_; }
  // How many times a kernel's successors were listed, and how many
  // successors those lists held (cached lists and verify-caches' checks do
  // not count).
  int64_t listings() const { return listings_; }
  // How many ops the plan looked at (their operands, homes or
  // memberships) while answering and changing: with each kernel's
  // summary kept, a trial looks at the two kernels' inputs and the
  // smaller one's ops, not at every op of both.
  int64_t examined() const { return examined_; }
  int64_t listedSuccessors() const { return listedSuccessors_; }

  // Every change to the plan (merge, duplicate, dropIfUnneeded) is made
  // between begin() and commit() or rollback(), in a journal: the cached
  // answers are only ever dropped by what a commit changed.
  void begin() {
    journal_.clear();
    journal_.numClusters = clusters_.size();
    journalling_ = true;
  }
  // Keeps the changes; drops the cached successors and times of the
  // clusters they may have changed (forgetChanged), not every cluster's.
  void commit() {
    materializeMerge();
    trialCopies_.clear();
    journalling_ = false;
    auto merges = std::move(journal_.merges);
    forgetChanged();
    for (auto [a, b, s] : merges)
      orderMerge(a, b, s);
    if (verifyCaches_)
      verifyCaches();
  }
  void rollback();
  // With |on|, every commit checks the answers kept from before it against
  // fresh ones, and the kept order against the edges (kiln-fuse's
  // verify-caches); the first difference is kept in cacheMismatch().
  void setVerifyCaches(bool on) { verifyCaches_ = on; }
  // Committed changes so far; whether none of them since |commit| (a
  // commits() value) may have changed what |c| reads, writes or costs:
  // its ops, their homes and memberships, those of their users, its
  // successors and predecessors (the clusters forgetChanged drops answers
  // for). Answers about a set of clusters kept at |commit| still hold
  // while this is true of each.
  uint64_t commits() const { return commits_; }
  bool unchangedSince(int c, uint64_t commit) const {
    return static_cast<size_t>(c) >= changedAt_.size() || changedAt_[c] <= commit;
  }
  const std::string &cacheMismatch() const { return cacheMismatch_; }
  // A merge on trial is a cluster of the ops of both, which own their
  // homes and memberships while the trial lasts (trialMerge_); commit()
  // writes them out.
  // A new cluster with the ops of |a| and |b|; both die.
  int merge(int a, int b);
  // Copies the ops of |p| into |d| as guests.
  void duplicate(int p, int d);
  // Removes |p| when every user of its values now computes them itself.
  void dropIfUnneeded(int p);

protected:
  void buildGraph();
  bool legalReduction(int c, llvm::ArrayRef<Operation *> allReduces) const;
  // Whether cluster |c|'s scatter_add, if any, can be its kernel's rows
  // (FusionPlan.cpp); |hasReduces|: the cluster holds a reduce.
  bool legalScatter(int c, bool hasReduces) const;
  // Ends |c| (journalled).
  void killCluster(int c);
  void forgetChanged();
  void verifyCaches();
  // Renumbers after a committed merge of |a| and |b| into |s|.
  void orderMerge(int a, int b, int s);
  // At most |limit| + 1 of them with a |limit|.
  void computeSuccessors(int c, llvm::SmallVector<int> &out,
                         size_t limit = std::numeric_limits<size_t>::max());
  // computeSuccessors, counted in the report and, outside a trial, kept.
  void listAndKeep(int c, llvm::SmallVector<int> &out, size_t limit);
  double computeTime(int c) const;
  // What cluster |c| reads from outside (KernelReads).
  using Reads = KernelReads;
  const Reads &readsOf(int c) const { return summaryOf(c).reads; }
  // summaryOf(c) by walking |c|'s ops (through their memberships as
  // written, not a merge on trial's).
  std::shared_ptr<const ClusterSummary> walkSummary(int c) const;
  // The summary of the union of the op lists of |x| and |y| (given their
  // summaries), with |guests| as the union's copied-in ops.
  std::shared_ptr<const ClusterSummary>
  combine(int x, int y, llvm::SmallVector<Operation *, 4> guests) const;
  // exportsOf(c) by walking |c|'s ops.
  void walkExports(int c, llvm::SmallVector<Value> &out) const;
  // predecessors(c), listed afresh.
  llvm::SmallVector<int> listPredecessors(int c) const;
  // The membership |m| stands for now: the merge on trial, for its two.
  int effective(int m) const {
    return trialMerge_.s >= 0 && (m == trialMerge_.a || m == trialMerge_.b)
               ? trialMerge_.s
               : m;
  }
  // As written, the merge on trial aside.
  bool rawContains(Operation *op, int c) const {
    auto it = member_.find(op);
    return it != member_.end() && llvm::is_contained(it->second, c);
  }
  int rawHome(Operation *op) const {
    auto it = home_.find(op);
    return it == home_.end() ? -1 : it->second;
  }
  // Writes out the merge on trial's homes and memberships (journalled).
  void materializeMerge();
  // successors(c) without a copy: the cached list, or (in a trial) a
  // scratch list valid until the next call.
  const llvm::SmallVector<int> &successorList(int c);
  void setHome(Operation *op, int c);
  void setMembers(Operation *op, llvm::SmallVector<int, 2> members);

  mlir::Block &block_;
  Limits limits_;
  const FusionCostModel &model_;

  llvm::DenseMap<Operation *, int64_t> pos_;
  llvm::SmallVector<Operation *> nodes_;
  // Users of a node's results through reshapes: nodes, or the terminator.
  llvm::DenseMap<Operation *, llvm::SmallVector<Operation *, 4>> users_;
  llvm::DenseMap<Value, llvm::SmallVector<Operation *, 4>> argUsers_;
  // Returned values (through reshapes) that update an argument in place
  // (the function result's kiln.updates), and that argument.
  llvm::DenseMap<Value, Value> updates_;
  llvm::DenseMap<Operation *, Operation *> orderNext_, orderPrev_;
  llvm::DenseMap<Operation *, int64_t> flops_;
  llvm::DenseMap<Operation *, unsigned> infoIndex_;
  std::vector<NodeInfo> infos_;

  std::vector<Cluster> clusters_;
  // Counts the changes to clusters, homes and memberships (exportsOf's
  // kept answer holds while it stays the same).
  uint64_t version_ = 0;
  mutable struct {
    int cluster = -1;
    uint64_t version = 0;
    llvm::SmallVector<Value> values;
  } lastExports_;
  // The merge on trial: |s| holds the ops of |a| and |b|, whose homes
  // and memberships still name them.
  struct {
    int a = -1, b = -1, s = -1;
  } trialMerge_;
  // The kernels that took copies since begin() (exportsOf).
  llvm::SmallVector<int, 4> trialCopies_;
  bool anyRemat_ = false; // a node is a recomputed clone
  llvm::DenseMap<Operation *, int> home_;
  llvm::DenseMap<Operation *, llvm::SmallVector<int, 2>> member_;

  struct Journal {
    std::vector<std::pair<Operation *, int>> homes;
    std::vector<std::pair<Operation *, llvm::SmallVector<int, 2>>> members;
    std::vector<std::pair<int, Cluster>> clusters; // changed: their old state
    std::vector<int> killed;
    std::vector<std::tuple<int, int, int>> merges; // a, b, merged
    size_t numClusters = 0;
    // Empties it and keeps its memory (a trial per move priced).
    void clear() {
      homes.clear();
      members.clear();
      clusters.clear();
      killed.clear();
      merges.clear();
      numClusters = 0;
    }
  } journal_;
  bool journalling_ = false;

  // The commit after which each cluster's answers last went stale (none
  // yet past the end).
  uint64_t commits_ = 0;
  std::vector<uint64_t> changedAt_;
  llvm::DenseMap<int, llvm::SmallVector<int>> successorCache_;
  // A lower bound on the successors of kernels whose list is not kept
  // (moreSuccessorsThan).
  llvm::DenseMap<int, size_t> successorsAtLeast_;
  mutable llvm::DenseMap<int, double> timeCache_;
  // Kept as the times are (a merge's exports are its two kernels', less
  // those it now reads itself alone).
  mutable llvm::DenseMap<int, llvm::SmallVector<Value>> exportsCache_;
  // Kept between changes; dropped for the kernels reading an op whose
  // home a commit changed, besides the changed ones (forgetChanged).
  mutable llvm::DenseMap<int, llvm::SmallVector<int>> predecessorCache_;
  mutable int64_t pricings_ = 0;
  mutable int64_t examined_ = 0;
  int64_t listings_ = 0, listedSuccessors_ = 0;
  llvm::SmallVector<int> successorScratch_, boundedScratch_, reachWork_;
  // Marks for reaches() and orderMerge()'s walks, and for
  // computeSuccessors(), which a walk may call.
  Stamps seen_, listed_;
  // startOrder()'s numbers, by kernel (live ones only); valid while
  // |ordered_|.
  std::vector<int64_t> order_;
  bool ordered_ = false;
  bool verifyCaches_ = false;
  mutable std::string cacheMismatch_;
};

} // namespace kiln::fusion

#endif // KILN_PASSES_FUSIONPLAN_H
