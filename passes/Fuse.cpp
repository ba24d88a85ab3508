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
//      relu/gelu after it, in the order cuBLASLt epilogues apply them.
//   2. Priority fusion of the generated kernels: producer into consumer
//      (loop and reduction fusion, multi-output when the producer has other
//      users), a copy of a cheap producer into its consumers, and siblings
//      that read the same large input.
//   3. Horizontal fusion: independent loop kernels that feed the same
//      consumer (the optimizer updates, feeding the return) share a launch.
//
// The plan is kept as clusters of ops over the unchanged function body. An
// op has at most one home cluster, which computes it and exports its value
// to whoever needs it; cheap ops may also be copied as guests into other
// clusters, which then compute them themselves. A cluster graph edge runs
// from the home of a value to every cluster that reads that value, plus an
// edge between consecutive side-effecting ops (collectives), so that no
// merge can reorder them. A merge that would give the graph a cycle is
// refused: that also keeps every kernel on one side of every collective.
// Merges are priced by applying them to the plan, measuring, and rolling
// back (a journal of the changes).
//
// Reshapes are bitcasts, not kernels: they are edges, copied into a region
// when both ends are inside it and left outside otherwise. Splat and tiny
// constants are copied into the regions that use them.
//
//===----------------------------------------------------------------------===//

#include "passes/FusionCostModel.h"

#include "ir/KilnOps.h"
#include "passes/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <functional>
#include <queue>

#define DEBUG_TYPE "kiln-fuse"

namespace kiln {
#define GEN_PASS_DEF_KILNFUSE
#include "passes/Passes.h.inc"

namespace {

using namespace mlir;

struct Limits {
  int64_t maxInputs = 32;
  int64_t maxOutputs = 32;
  int64_t sharedMemoryBytes = 49152;
  int64_t siblingMinBytes = 4096;
};

// Clusters of at most this many ops may be copied into consumers.
constexpr size_t kMaxDuplicatedOps = 32;
// A merge must save more than this (microseconds) to be applied.
constexpr double kMinSavingUs = 1e-9;

enum class ClusterClass {
  Fusible, // a generated kernel: loop or reduction fusion
  Gemm,    // a dot_general, alone (a library call) or with its epilogue
  Opaque,  // a kernel or collective that no fusion takes
};

struct Cluster {
  SmallVector<Operation *> ops; // home and guest ops, in block order
  ClusterClass cls = ClusterClass::Opaque;
  bool alive = true;
  bool sibling = false;
  bool horizontal = false;
  unsigned version = 0;
};

enum class Move { Merge, Duplicate, DuplicateAll, Sibling };

struct Candidate {
  double saving;
  Move move;
  int a, b;
  SmallVector<std::pair<int, unsigned>, 4> versions;
};

struct CandidateOrder {
  bool operator()(const Candidate &x, const Candidate &y) const {
    if (x.saving != y.saving)
      return x.saving < y.saving;
    return std::make_pair(x.a, x.b) > std::make_pair(y.a, y.b);
  }
};

bool hasStaticShapes(Operation *op) {
  auto isStatic = [](Type t) {
    auto ranked = dyn_cast<RankedTensorType>(t);
    return ranked && ranked.hasStaticShape();
  };
  return llvm::all_of(op->getOperandTypes(), isStatic) &&
         llvm::all_of(op->getResultTypes(), isStatic);
}

ArrayRef<int64_t> shapeOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getShape();
}

int64_t elementsOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getNumElements();
}

// Follows |v| back through reshapes to the value they bitcast.
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

class Planner {
public:
  Planner(Block &block, const Limits &limits, const FusionCostModel &model)
      : block_(block), limits_(limits), model_(model) {
    buildGraph();
  }

  void formGemmEpilogues();
  void priorityFusion();
  void horizontalFusion();
  LogicalResult materialize();

private:
  // The graph.
  void buildGraph();
  bool isNode(Operation *op) const { return pos_.count(op) && !isFreeOp(op) && op != block_.getTerminator(); }
  Operation *nodeOf(Value source) const {
    Operation *def = source.getDefiningOp();
    return def && def->getBlock() == &block_ && !isFreeOp(def) ? def : nullptr;
  }
  bool contains(Operation *op, int c) const {
    auto it = member_.find(op);
    return it != member_.end() && llvm::is_contained(it->second, c);
  }
  bool fusible(int c) const { return clusters_[c].alive && clusters_[c].cls == ClusterClass::Fusible; }
  bool cheap(int c) const;
  bool hasReduce(int c) const;
  bool needsExport(Operation *x, int c) const;
  SmallVector<Value> exportsOf(int c) const;
  // Whether |v| (an operand of an op of |c|) is computed inside |c|.
  bool internal(Value v, int c) const;
  SmallVector<int> successors(int c);
  SmallVector<int> predecessors(int c) const;
  bool reaches(int from, int to, int skipDirect);

  // Costs and legality.
  double timeOf(int c) const;
  bool legal(int c) const;
  bool legalReduction(int c, ArrayRef<Operation *> reduces) const;

  // Changes to the plan, journalled so that a trial can be rolled back.
  void begin() { journal_ = Journal{}; journal_.numClusters = clusters_.size(); journalling_ = true; }
  void commit() { journalling_ = false; ++generation_; }
  void rollback();
  void saveCluster(int c);
  void setHome(Operation *op, int c);
  void setMembers(Operation *op, SmallVector<int, 2> members);
  int merge(int a, int b);
  void duplicate(int p, int d);
  void dropIfUnneeded(int p);

  // Priority fusion.
  std::optional<double> trial(Move move, int a, int b, bool keep);
  void push(Move move, int a, int b);
  void enqueueAround(int c);
  SmallVector<int> neighbourhood(int c);

  Block &block_;
  Limits limits_;
  const FusionCostModel &model_;

  DenseMap<Operation *, int64_t> pos_;
  SmallVector<Operation *> nodes_;
  // Users of a node's results through reshapes: nodes, or the terminator.
  DenseMap<Operation *, SmallVector<Operation *, 4>> users_;
  DenseMap<Value, SmallVector<Operation *, 4>> argUsers_;
  DenseMap<Operation *, Operation *> orderNext_, orderPrev_;

  std::vector<Cluster> clusters_;
  DenseMap<Operation *, int> home_;
  DenseMap<Operation *, SmallVector<int, 2>> member_;

  struct Journal {
    std::vector<std::pair<Operation *, int>> homes;
    std::vector<std::pair<Operation *, SmallVector<int, 2>>> members;
    std::vector<std::pair<int, Cluster>> clusters;
    size_t numClusters = 0;
  } journal_;
  bool journalling_ = false;

  unsigned generation_ = 0;
  DenseMap<int, std::pair<unsigned, SmallVector<int>>> successorCache_;
  std::priority_queue<Candidate, std::vector<Candidate>, CandidateOrder> queue_;
};

//===----------------------------------------------------------------------===//
// The graph
//===----------------------------------------------------------------------===//

void Planner::buildGraph() {
  int64_t i = 0;
  for (Operation &op : block_)
    pos_[&op] = i++;
  Operation *lastEffect = nullptr;
  for (Operation &op : block_.without_terminator()) {
    if (isFreeOp(&op))
      continue;
    nodes_.push_back(&op);
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
}

bool Planner::cheap(int c) const {
  const Cluster &cluster = clusters_[c];
  return cluster.alive && cluster.cls == ClusterClass::Fusible &&
         cluster.ops.size() <= kMaxDuplicatedOps && !hasReduce(c);
}

bool Planner::hasReduce(int c) const {
  return llvm::any_of(clusters_[c].ops, [](Operation *op) { return isa<ReduceOp>(op); });
}

bool Planner::needsExport(Operation *x, int c) const {
  for (Operation *user : users_.lookup(x)) {
    if (!isNode(user))
      return true; // the return
    auto it = member_.find(user);
    if (it == member_.end())
      continue;
    for (int d : it->second)
      if (d != c && !contains(x, d))
        return true;
  }
  return false;
}

SmallVector<Value> Planner::exportsOf(int c) const {
  SmallVector<Value> exports;
  for (Operation *op : clusters_[c].ops) {
    auto it = home_.find(op);
    if (it == home_.end() || it->second != c || !needsExport(op, c))
      continue;
    llvm::append_range(exports, op->getResults());
  }
  return exports;
}

bool Planner::internal(Value v, int c) const {
  Value source = traceReshapes(v);
  Operation *def = source.getDefiningOp();
  if (!def || def->getBlock() != &block_)
    return false;
  if (isSmallConstant(def))
    return true;
  return !isFreeOp(def) && contains(def, c);
}

SmallVector<int> Planner::successors(int c) {
  // Cached between changes to the plan; never while a trial is open.
  if (!journalling_) {
    auto it = successorCache_.find(c);
    if (it != successorCache_.end() && it->second.first == generation_)
      return it->second.second;
  }
  SmallVector<int> out;
  for (Operation *op : clusters_[c].ops) {
    auto it = home_.find(op);
    if (it == home_.end() || it->second != c)
      continue;
    for (Operation *user : users_.lookup(op)) {
      auto m = member_.find(user);
      if (m == member_.end())
        continue;
      for (int d : m->second)
        if (d != c && !contains(op, d) && !llvm::is_contained(out, d))
          out.push_back(d);
    }
    if (Operation *next = orderNext_.lookup(op)) {
      int d = home_.lookup(next);
      if (d != c && !llvm::is_contained(out, d))
        out.push_back(d);
    }
  }
  if (!journalling_)
    successorCache_[c] = {generation_, out};
  return out;
}

SmallVector<int> Planner::predecessors(int c) const {
  SmallVector<int> out;
  auto add = [&](int p) {
    if (p != c && !llvm::is_contained(out, p))
      out.push_back(p);
  };
  for (Operation *op : clusters_[c].ops) {
    for (Value v : op->getOperands()) {
      Operation *def = nodeOf(traceReshapes(v));
      if (!def || contains(def, c))
        continue;
      auto it = home_.find(def);
      if (it != home_.end())
        add(it->second);
    }
    if (Operation *prev = orderPrev_.lookup(op))
      if (home_.count(prev))
        add(home_.lookup(prev));
  }
  return out;
}

// Whether a path leads from |from| to |to|, not counting the direct edge
// when |skipDirect| is set.
bool Planner::reaches(int from, int to, int skipDirect) {
  SmallVector<int> work;
  DenseSet<int> seen;
  for (int s : successors(from))
    if (!(skipDirect && s == to) && seen.insert(s).second)
      work.push_back(s);
  while (!work.empty()) {
    int c = work.pop_back_val();
    if (c == to)
      return true;
    for (int s : successors(c))
      if (seen.insert(s).second)
        work.push_back(s);
  }
  return false;
}

//===----------------------------------------------------------------------===//
// Costs and legality
//===----------------------------------------------------------------------===//

double Planner::timeOf(int c) const {
  const Cluster &cluster = clusters_[c];
  // Each external input once; an input read only through slices costs the
  // slices (at most the whole input).
  struct Input {
    int64_t bytes;
    int64_t sliceBytes = 0;
    bool onlySlices = true;
  };
  llvm::MapVector<Value, Input> inputs;
  int64_t flops = 0;
  for (Operation *op : cluster.ops) {
    for (Value v : op->getOperands()) {
      if (internal(v, c))
        continue;
      Value source = traceReshapes(v);
      auto [it, inserted] = inputs.insert({source, Input{tensorBytes(source.getType())}});
      if (isa<SliceOp>(op) && v == source)
        it->second.sliceBytes += tensorBytes(op->getResult(0).getType());
      else
        it->second.onlySlices = false;
    }
    if (auto cost = dyn_cast<CostInterface>(op))
      flops += cost.getFlops();
  }
  int64_t bytes = 0;
  for (auto &[value, input] : inputs)
    bytes += input.onlySlices ? std::min(input.bytes, input.sliceBytes) : input.bytes;
  for (Value v : exportsOf(c))
    bytes += tensorBytes(v.getType());
  return model_.kernelTimeUs(bytes, flops);
}

bool Planner::legal(int c) const {
  const Cluster &cluster = clusters_[c];
  if (cluster.cls != ClusterClass::Fusible)
    return true;
  llvm::SetVector<Value> inputs;
  for (Operation *op : cluster.ops)
    for (Value v : op->getOperands())
      if (!internal(v, c))
        inputs.insert(v);
  SmallVector<Value> exports = exportsOf(c);
  if (static_cast<int64_t>(inputs.size()) > limits_.maxInputs ||
      static_cast<int64_t>(exports.size()) > limits_.maxOutputs)
    return false;
  SmallVector<Operation *> reduces;
  for (Operation *op : cluster.ops)
    if (isa<ReduceOp>(op))
      reduces.push_back(op);
  if (!reduces.empty())
    return legalReduction(c, reduces);
  // A loop kernel iterates over its results: they have one element count.
  // A horizontal kernel runs each part over its own.
  if (cluster.horizontal || exports.empty())
    return true;
  int64_t count = elementsOf(exports.front());
  return llvm::all_of(exports, [&](Value v) { return elementsOf(v) == count; });
}

// A reduction kernel works row by row: every reduce has the same operand
// shape F and reduced dimensions R, leaving the kept shape K. Ops before the
// reduces are index maps and elementwise ops of any shape; ops after them
// work on K, or on F after a broadcast of a K value along the kept
// dimensions (the row is then held on chip, within the shared-memory
// budget). Results have shape F or K.
bool Planner::legalReduction(int c, ArrayRef<Operation *> reduces) const {
  auto first = cast<ReduceOp>(reduces.front());
  SmallVector<int64_t> full(shapeOf(first.getOperand()));
  SmallVector<int64_t> dims(first.getDimensions());
  llvm::sort(dims);
  for (Operation *op : reduces.drop_front()) {
    auto reduce = cast<ReduceOp>(op);
    SmallVector<int64_t> other(reduce.getDimensions());
    llvm::sort(other);
    if (shapeOf(reduce.getOperand()) != ArrayRef<int64_t>(full) || other != dims)
      return false;
  }
  SmallVector<int64_t> kept, keptDims;
  int64_t rowElements = 1;
  for (int64_t d = 0, e = full.size(); d < e; ++d) {
    if (llvm::is_contained(dims, d)) {
      rowElements *= full[d];
    } else {
      kept.push_back(full[d]);
      keptDims.push_back(d);
    }
  }
  auto isRowShape = [&](Value v) {
    ArrayRef<int64_t> s = shapeOf(v);
    return s == ArrayRef<int64_t>(full) || s == ArrayRef<int64_t>(kept);
  };
  for (Value v : exportsOf(c))
    if (!isRowShape(v))
      return false;

  const Cluster &cluster = clusters_[c];
  DenseSet<Operation *> after; // ops that depend on a reduce in the kernel
  bool rowReused = false;
  int64_t elementBytes = 1;
  for (Operation *op : cluster.ops) {
    if (isa<ReduceOp>(op))
      elementBytes = std::max(elementBytes, tensorBytes(op->getOperand(0).getType()) /
                                                std::max<int64_t>(1, elementsOf(op->getOperand(0))));
    bool dependsOnReduce = false;
    for (Value v : op->getOperands()) {
      if (!internal(v, c))
        continue;
      Operation *def = traceReshapes(v).getDefiningOp();
      if (!isa<ReduceOp>(def) && !after.contains(def))
        continue;
      dependsOnReduce = true;
      if (v.getDefiningOp() != def) // a reshape of a reduced value
        return false;
    }
    if (!dependsOnReduce)
      continue;
    after.insert(op);
    if (isa<ReduceOp>(op))
      continue;
    if (!isRowShape(op->getResult(0)))
      return false;
    if (auto broadcast = dyn_cast<BroadcastInDimOp>(op)) {
      if (shapeOf(broadcast.getOperand()) != ArrayRef<int64_t>(kept) ||
          shapeOf(broadcast.getResult()) != ArrayRef<int64_t>(full) ||
          broadcast.getBroadcastDimensions() != ArrayRef<int64_t>(keptDims))
        return false;
      rowReused = true;
      continue;
    }
    if (!isa<ScalarSemantics>(op))
      return false;
  }
  return !rowReused || rowElements * elementBytes <= limits_.sharedMemoryBytes;
}

//===----------------------------------------------------------------------===//
// Journalled changes
//===----------------------------------------------------------------------===//

void Planner::rollback() {
  for (auto &[op, old] : llvm::reverse(journal_.members))
    member_[op] = old;
  for (auto &[op, old] : llvm::reverse(journal_.homes)) {
    if (old < 0)
      home_.erase(op);
    else
      home_[op] = old;
  }
  for (auto &[c, old] : llvm::reverse(journal_.clusters))
    clusters_[c] = old;
  clusters_.resize(journal_.numClusters);
  journalling_ = false;
}

void Planner::saveCluster(int c) {
  if (journalling_ && c < static_cast<int>(journal_.numClusters))
    journal_.clusters.push_back({c, clusters_[c]});
}

void Planner::setHome(Operation *op, int c) {
  if (journalling_) {
    auto it = home_.find(op);
    journal_.homes.push_back({op, it == home_.end() ? -1 : it->second});
  }
  if (c < 0)
    home_.erase(op);
  else
    home_[op] = c;
}

void Planner::setMembers(Operation *op, SmallVector<int, 2> members) {
  if (journalling_)
    journal_.members.push_back({op, member_.lookup(op)});
  member_[op] = std::move(members);
}

// A new cluster with the ops of |a| and |b|; both die.
int Planner::merge(int a, int b) {
  int s = clusters_.size();
  Cluster merged;
  merged.cls = clusters_[a].cls == ClusterClass::Gemm || clusters_[b].cls == ClusterClass::Gemm
                   ? ClusterClass::Gemm
                   : ClusterClass::Fusible;
  merged.sibling = clusters_[a].sibling || clusters_[b].sibling;
  merged.horizontal = clusters_[a].horizontal || clusters_[b].horizontal;
  merged.ops = clusters_[a].ops;
  for (Operation *op : clusters_[b].ops)
    if (!llvm::is_contained(merged.ops, op))
      merged.ops.push_back(op);
  llvm::sort(merged.ops, [&](Operation *x, Operation *y) { return pos_[x] < pos_[y]; });
  clusters_.push_back(std::move(merged));
  for (Operation *op : clusters_[s].ops) {
    SmallVector<int, 2> members;
    for (int m : member_.lookup(op))
      if (m != a && m != b)
        members.push_back(m);
    members.push_back(s);
    setMembers(op, members);
    auto it = home_.find(op);
    if (it != home_.end() && (it->second == a || it->second == b))
      setHome(op, s);
  }
  for (int c : {a, b}) {
    saveCluster(c);
    clusters_[c].alive = false;
  }
  return s;
}

// Copies the ops of |p| into |d| as guests.
void Planner::duplicate(int p, int d) {
  saveCluster(d);
  for (Operation *op : clusters_[p].ops) {
    if (contains(op, d))
      continue;
    SmallVector<int, 2> members = member_.lookup(op);
    members.push_back(d);
    setMembers(op, members);
    clusters_[d].ops.push_back(op);
  }
  llvm::sort(clusters_[d].ops, [&](Operation *x, Operation *y) { return pos_[x] < pos_[y]; });
}

// Removes |p| when every user of its values now computes them itself.
void Planner::dropIfUnneeded(int p) {
  if (!exportsOf(p).empty())
    return;
  saveCluster(p);
  clusters_[p].alive = false;
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

//===----------------------------------------------------------------------===//
// Phase 1: GEMM epilogues
//===----------------------------------------------------------------------===//

void Planner::formGemmEpilogues() {
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
                   clusters_[home_.lookup(broadcast)].ops.size() == 1) {
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
          auto gelu = dyn_cast<GeluOp>(user);
          if (isa<ReluOp>(user) ||
              (gelu && gelu.getApproximate() == GeluApproximation::tanh)) {
            next = user;
            activation = true;
            break;
          }
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
      if (biasBroadcast) {
        int b = home_.lookup(biasBroadcast);
        if (users_.lookup(biasBroadcast).size() == 1) {
          gemm = merge(gemm, b);
        } else {
          duplicate(b, gemm);
        }
      }
      gemm = merge(gemm, nextCluster);
      ++generation_;
      current = next;
      if (activation)
        break;
    }
  }
}

//===----------------------------------------------------------------------===//
// Phase 2: priority fusion
//===----------------------------------------------------------------------===//

// Applies |move| to the plan and returns the modelled time it saves, or
// nothing when it is not allowed. Rolls back unless |keep|.
std::optional<double> Planner::trial(Move move, int a, int b, bool keep) {
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
  double before = 0;
  for (int c : watched)
    before += timeOf(c);

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
    for (int c : after)
      if (clusters_[c].alive)
        now += timeOf(c);
    saving = before - now;
  }
  if (keep && ok)
    commit();
  else
    rollback();
  return saving;
}

void Planner::push(Move move, int a, int b) {
  std::optional<double> saving = trial(move, a, b, /*keep=*/false);
  if (!saving || *saving <= kMinSavingUs)
    return;
  Candidate candidate{*saving, move, a, b, {}};
  candidate.versions.push_back({a, clusters_[a].version});
  if (move == Move::DuplicateAll) {
    for (int d : successors(a))
      candidate.versions.push_back({d, clusters_[d].version});
  } else {
    candidate.versions.push_back({b, clusters_[b].version});
  }
  queue_.push(std::move(candidate));
}

void Planner::enqueueAround(int c) {
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
      if (successors(p).size() > 1)
        push(Move::DuplicateAll, p, -1);
    }
  }
  // Siblings: other kernels that read one of this kernel's large inputs.
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

SmallVector<int> Planner::neighbourhood(int c) {
  SmallVector<int> out{c};
  if (!clusters_[c].alive)
    return out;
  llvm::append_range(out, successors(c));
  llvm::append_range(out, predecessors(c));
  return out;
}

void Planner::priorityFusion() {
  for (int c = 0, e = clusters_.size(); c < e; ++c)
    enqueueAround(c);
  while (!queue_.empty()) {
    Candidate candidate = queue_.top();
    queue_.pop();
    bool stale = llvm::any_of(candidate.versions, [&](auto &v) {
      return !clusters_[v.first].alive || clusters_[v.first].version != v.second;
    });
    if (stale)
      continue;
    int a = candidate.a, b = candidate.b;
    // Never a cycle: no other path between the two may exist.
    if (candidate.move == Move::Merge && reaches(a, b, /*skipDirect=*/true))
      continue;
    if (candidate.move == Move::Sibling &&
        (reaches(a, b, /*skipDirect=*/false) || reaches(b, a, /*skipDirect=*/false)))
      continue;
    // Reprice: the neighbourhood may have changed since.
    std::optional<double> saving = trial(candidate.move, a, b, /*keep=*/false);
    if (!saving || *saving <= kMinSavingUs)
      continue;
    if (!queue_.empty() && *saving < queue_.top().saving) {
      candidate.saving = *saving;
      queue_.push(std::move(candidate));
      continue;
    }
    SmallVector<int> touched;
    for (int c : {a, b})
      if (c >= 0)
        llvm::append_range(touched, neighbourhood(c));
    if (candidate.move == Move::DuplicateAll)
      for (int d : successors(a))
        llvm::append_range(touched, neighbourhood(d));
    size_t firstNew = clusters_.size();
    trial(candidate.move, a, b, /*keep=*/true);
    for (size_t c = firstNew; c < clusters_.size(); ++c)
      llvm::append_range(touched, neighbourhood(c));
    for (int c : {a, b})
      if (c >= 0 && clusters_[c].alive)
        llvm::append_range(touched, neighbourhood(c));
    llvm::sort(touched);
    touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
    for (int c : touched)
      ++clusters_[c].version;
    for (int c : touched)
      enqueueAround(c);
  }
}

//===----------------------------------------------------------------------===//
// Phase 3: horizontal fusion
//===----------------------------------------------------------------------===//

void Planner::horizontalFusion() {
  // Kernels are grouped by their one consumer (-1: the return), in block
  // order; a kernel joins the last open group of its consumer while the
  // operand limits allow. Two kernels whose results only feed the same
  // consumer cannot reach each other, so no cycle can form.
  SmallVector<int> order;
  for (int c = 0, e = clusters_.size(); c < e; ++c)
    if (fusible(c) && !hasReduce(c))
      order.push_back(c);
  auto firstPos = [&](int c) { return pos_[clusters_[c].ops.front()]; };
  llvm::stable_sort(order, [&](int x, int y) { return firstPos(x) < firstPos(y); });
  DenseMap<int, int> openGroup;
  for (int c : order) {
    if (!clusters_[c].alive)
      continue;
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
    auto it = openGroup.find(*key);
    if (it == openGroup.end() || !clusters_[it->second].alive) {
      openGroup[*key] = c;
      continue;
    }
    begin();
    int s = merge(it->second, c);
    clusters_[s].horizontal = true;
    if (legal(s)) {
      commit();
      openGroup[*key] = s;
    } else {
      rollback();
      openGroup[*key] = c;
    }
  }
}

//===----------------------------------------------------------------------===//
// Rewriting the body
//===----------------------------------------------------------------------===//

LogicalResult Planner::materialize() {
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
      for (Value v : op->getOperands())
        if (!internal(v, c))
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
    for (auto func : getOperation().getOps<func::FuncOp>()) {
      if (func.isExternal() || !func.getBody().hasOneBlock())
        continue;
      Planner planner(func.getBody().front(), limits, model);
      if (gemmEpilogues)
        planner.formGemmEpilogues();
      planner.priorityFusion();
      if (horizontal)
        planner.horizontalFusion();
      if (failed(planner.materialize()))
        return signalPassFailure();
      if (report) {
        KernelStats stats = countKernels(func, costOptions);
        InFlightDiagnostic remark = func.emitRemark();
        remark << "kiln-fuse: " << stats.kernels << " kernels (" << stats.fusions
               << " fusions:";
        for (unsigned k = 0; k < 5; ++k)
          remark << (k ? ", " : " ") << stats.fusionsByKind[k] << " "
                 << stringifyFusionKind(static_cast<FusionKind>(k));
        remark << "; " << stats.libraryCalls << " library calls; "
               << stats.unfusedOps << " other ops), " << stats.collectives
               << " collectives, " << stats.bytesRead << " bytes read, "
               << stats.bytesWritten << " bytes written, "
               << llvm::formatv("{0:f1}", stats.modeledUs).str() << " us modelled";
      }
    }
  }
};

} // namespace
} // namespace kiln
