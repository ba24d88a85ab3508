//===- Schedule.cpp - an op order with a lower peak of live memory --------===//
//
// Orders the top-level ops (kernels) of each function body so that fewer
// bytes are live at once, as XLA's memory schedulers do: it builds a few
// topological orders of the dependence graph, measures the peak of live
// bytes of each as kiln-plan-buffers will plan it (passes/BufferModel.h:
// in-place updates, views and reuse included), and keeps the lowest (the
// original order on a tie, so a module that is already good is left alone):
//   - list: a greedy list scheduler that, among the ready ops, runs the one
//     that frees the most bytes net of what it allocates;
//   - reverse-list: the same from the return backwards, which places each
//     op right before its results are needed, so ops that allocate big
//     buffers whose users are far away are delayed;
//   - dfs: a post-order walk from the returned values that evaluates the
//     operand with the larger subgraph first (Sethi-Ullman style).
// In every order, each collective is then moved up to start as soon as its
// inputs exist (and after the collective before it: every rank issues the
// same collectives in the same order), together with the ops that only feed
// it (a gradient bucket's producers and packing), so communication overlaps
// compute. Two rules, put on collectives by kiln-distribute, hold them
// back (as extra dependences, so every order respects them):
//   - kiln.prefetch = D (zero3's all-gathers): the k-th such collective
//     waits for every use of the (k-1-D)-th, so a bucket's parameters are
//     gathered while the bucket D before it computes, and at most D + 1
//     gathered buckets are in use or in flight (PyTorch FSDP's forward and
//     backward prefetch with D = 1). A use is an op that reads the
//     gathered buffer (or a slice, reshape or copy of it alone) together
//     with anything else;
//   - kiln.issue_together (zero1's reduce-scatters): none starts before
//     the inputs of all of them exist (their own packing aside), so stage
//     1 reduces the gradients after the whole backward pass.
// A third rule keeps in-place updates in place: the op producing an
// argument's update (an optimizer step, returned for the argument it
// replaces) runs after every other op that reads the argument, since
// kiln-plan-buffers writes the update over the argument only then.
// A rule's dependence that would close a cycle is left out.
//
// Dependences: an op depends on the top-level ops defining the values it or
// any op nested in it reads; ops with side effects (collectives, calls)
// keep their relative order. Every order is topological, so dominance holds;
// the pass checks it again before moving anything. Reordering drops a buffer
// plan made for the old order (kiln-plan-buffers' attributes).
//
//===----------------------------------------------------------------------===//

#include "ir/KilnOps.h"
#include "passes/BufferModel.h"
#include "passes/FusionCostModel.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SetVector.h"

#include <algorithm>
#include <numeric>
#include <set>

#define DEBUG_TYPE "kiln-schedule"

namespace kiln {
#define GEN_PASS_DEF_KILNSCHEDULE
#include "passes/Passes.h.inc"

namespace {

using mlir::Operation;
using mlir::Value;

// The dependence graph of one block's top-level ops, with the sizes of the
// values they define.
struct Graph {
  llvm::SmallVector<Operation *> ops;
  // preds[i]: the ops that must run before op i, without repeats.
  std::vector<std::vector<int>> preds, succs;
  // Per op, its operand values defined by top-level ops: (defining op,
  // bytes, whether the terminator reads it too).
  struct Input {
    Value value;
    int producer;
  };
  std::vector<std::vector<Input>> inputs;
  // Per op, the bytes its results take.
  std::vector<int64_t> definedBytes;
  llvm::DenseMap<Value, int64_t> valueBytes;
  llvm::DenseMap<Value, int> valueUsers; // distinct top-level readers
  llvm::DenseSet<Value> liveOut;
  std::vector<bool> collective;
  // Whether the op (or an op nested in it) reads an argument of the block.
  std::vector<bool> readsArgument;
  // The ops reading each argument of the block (by number), in order.
  llvm::DenseMap<unsigned, llvm::SmallVector<int>> argumentReaders;

  explicit Graph(mlir::Block &block) {
    BlockLiveness liveness(block);
    for (Operation *op : liveness.getOps())
      ops.push_back(op);
    int n = ops.size();
    llvm::DenseMap<Operation *, int> index;
    for (int i = 0; i < n; ++i)
      index[ops[i]] = i;
    preds.resize(n);
    succs.resize(n);
    inputs.resize(n);
    definedBytes.assign(n, 0);
    collective.assign(n, false);
    readsArgument.assign(n, false);
    int lastEffect = -1;
    for (int i = 0; i < n; ++i) {
      llvm::SetVector<Value> read;
      ops[i]->walk([&](Operation *nested) {
        for (Value operand : nested->getOperands())
          read.insert(operand);
      });
      readsArgument[i] = llvm::any_of(read, [&](Value value) {
        return llvm::isa<mlir::BlockArgument>(value) &&
               !ops[i]->isAncestor(value.getParentBlock()->getParentOp());
      });
      for (Value value : read)
        if (auto arg = llvm::dyn_cast<mlir::BlockArgument>(value);
            arg && arg.getOwner() == &block)
          argumentReaders[arg.getArgNumber()].push_back(i);
      llvm::SetVector<int> from;
      for (Value value : read) {
        Operation *def = value.getDefiningOp();
        Operation *top = def ? block.findAncestorOpInBlock(*def) : nullptr;
        if (!top || top == ops[i])
          continue;
        int producer = index.lookup(top);
        from.insert(producer);
        inputs[i].push_back({value, producer});
        ++valueUsers[value];
      }
      if (!mlir::isMemoryEffectFree(ops[i])) {
        if (lastEffect >= 0)
          from.insert(lastEffect);
        lastEffect = i;
      }
      preds[i].assign(from.begin(), from.end());
      for (int p : preds[i])
        succs[p].push_back(i);
      collective[i] = isCollectiveOp(ops[i]);
      for (Value result : ops[i]->getResults()) {
        int64_t bytes = getTensorBytes(result.getType()).value_or(0);
        valueBytes[result] = bytes;
        definedBytes[i] += bytes;
      }
    }
    for (Value value : block.getTerminator()->getOperands())
      liveOut.insert(value);
    addPrefetchEdges();
    addTogetherEdges();
    // An update returned for an argument of its size will be written in
    // place (kiln-plan-buffers), so it takes no new memory: counting it
    // would make early updates look expensive.
    auto func = mlir::dyn_cast<mlir::func::FuncOp>(block.getParentOp());
    if (!func ||
        func.getNumResults() != block.getTerminator()->getNumOperands())
      return;
    for (unsigned j = 0, e = func.getNumResults(); j < e; ++j) {
      auto updates = func.getResultAttrOfType<mlir::IntegerAttr>(
          j, KilnDialect::kUpdatesAttrName);
      Value value = block.getTerminator()->getOperand(j);
      if (!updates || updates.getInt() < 0 ||
          updates.getInt() >= block.getNumArguments() ||
          !valueBytes.count(value) ||
          valueBytes.lookup(value) !=
              getTensorBytes(block.getArgument(updates.getInt()).getType()))
        continue;
      int producer =
          index.lookup(block.findAncestorOpInBlock(*value.getDefiningOp()));
      definedBytes[producer] -= valueBytes.lookup(value);
      valueBytes[value] = 0;
      // Written in place only once the argument's other readers are done
      // (else kiln-plan-buffers gives the update a buffer of its own and a
      // copy after the step): they run before the update's producer.
      // Only readers not already before it (an edge implied by others
      // would only perturb the orders' tie-breaking).
      std::vector<bool> before = reachable(producer, preds);
      llvm::SmallVector<int> readers;
      for (int reader : argumentReaders.lookup(updates.getInt()))
        if (reader != producer && !before[reader] &&
            !llvm::is_contained(readers, reader))
          readers.push_back(reader);
      if (!readers.empty())
        addEdges(readers, producer);
    }
  }

  // Bytes op |i| can write over an operand that dies there (an elementwise
  // kernel writing a result of the operand's size), given the values still
  // to be read.
  int64_t reusableBytes(int i,
                        const llvm::DenseMap<Value, int> &remaining) const {
    Operation *op = ops[i];
    if (!op->hasTrait<mlir::OpTrait::Elementwise>() && !mlir::isa<FusionOp>(op))
      return 0;
    int64_t best = 0;
    for (const Input &input : inputs[i]) {
      int64_t bytes = valueBytes.lookup(input.value);
      if (remaining.lookup(input.value) != 1 || liveOut.contains(input.value))
        continue;
      for (Value result : op->getResults())
        if (valueBytes.lookup(result) == bytes)
          best = std::max(best, bytes);
    }
    return best;
  }

  int size() const { return ops.size(); }

  // Adds the dependences from each of |from| -> |to|, but for those there
  // already or that would close a cycle (|to| already comes before that
  // op: the rule then yields).
  // The ops reachable from |start| through |edges| (preds or succs),
  // |start| itself included.
  std::vector<bool> reachable(int start,
                              const std::vector<std::vector<int>> &edges) const {
    std::vector<bool> seen(size(), false);
    std::vector<int> stack = {start};
    seen[start] = true;
    while (!stack.empty()) {
      int i = stack.back();
      stack.pop_back();
      for (int next : edges[i])
        if (!seen[next]) {
          seen[next] = true;
          stack.push_back(next);
        }
    }
    return seen;
  }

  void addEdges(llvm::ArrayRef<int> from, int to) {
    std::vector<bool> after = reachable(to, succs); // what depends on |to|
    for (int f : from) {
      if (after[f] || llvm::is_contained(preds[to], f))
        continue;
      preds[to].push_back(f);
      succs[f].push_back(to);
    }
  }

  // The ops that use what collective |c| returns: starting from |c|, an op
  // all of whose operands come from |c| or such ops (a slice, reshape or
  // copy of the gathered buffer alone) only rearranges it; the uses are
  // the ops reading one of those values together with anything else (the
  // layer's GEMM reading the parameters and the activations).
  std::vector<int> usersOf(int c) const {
    std::vector<bool> derived(size(), false);
    derived[c] = true;
    std::vector<int> users;
    for (int i = c + 1; i < size(); ++i) {
      bool any = false, all = !inputs[i].empty() && !readsArgument[i] &&
                             !collective[i] &&
                             mlir::isMemoryEffectFree(ops[i]);
      for (const Input &input : inputs[i]) {
        any |= derived[input.producer];
        all &= derived[input.producer];
      }
      if (!any)
        continue;
      if (all)
        derived[i] = true;
      else
        users.push_back(i);
    }
    return users;
  }

  // Prefetch (the all-gathers of zero3, PyTorch FSDP's forward and backward
  // prefetch): the collectives carrying kiln.prefetch = D, in their order
  // P0, P1, ..., are not issued as early as their inputs allow (a shard
  // argument is there from the start) but each Pi only after every use of
  // P(i-1-D): so at most D + 1 gathered buffers are in use or in flight,
  // and a bucket's parameters are gathered while the one before it
  // computes (D = 1).
  void addPrefetchEdges() {
    std::vector<std::pair<int, int64_t>> prefetched;
    for (int i = 0; i < size(); ++i)
      if (auto depth = ops[i]->getAttrOfType<mlir::IntegerAttr>(
              kPrefetchAttrName);
          depth && collective[i])
        prefetched.push_back({i, std::max<int64_t>(0, depth.getInt())});
    for (size_t k = 0; k < prefetched.size(); ++k) {
      auto [c, depth] = prefetched[k];
      if (static_cast<int64_t>(k) < depth + 1)
        continue;
      addEdges(usersOf(prefetched[k - 1 - depth].first), c);
    }
  }

  // Whether op |i| only packs values for a collective: reshapes,
  // concatenations, slices, conversions and constants (or a fusion of
  // them), no arithmetic.
  bool packs(int i) const {
    auto isPacking = [](Operation *op) {
      return mlir::isa<ReshapeOp, ConcatenateOp, SliceOp, ConvertOp,
                       ConstantOp>(op);
    };
    Operation *op = ops[i];
    if (auto fusion = mlir::dyn_cast<FusionOp>(op)) {
      bool only = true;
      fusion.getBody().walk([&](Operation *nested) {
        only &= nested->hasTrait<mlir::OpTrait::IsTerminator>() ||
                isPacking(nested);
      });
      return only;
    }
    return isPacking(op);
  }

  // Issued together (zero1's reduce-scatters, DeepSpeed stage 1: gradients
  // reduced after the whole backward pass): no collective carrying
  // kiln.issue_together starts before the inputs of all of them exist,
  // their own packing aside (the reshapes and concatenation only it reads:
  // they move with it).
  void addTogetherEdges() {
    std::vector<int> members;
    for (int i = 0; i < size(); ++i)
      if (collective[i] &&
          ops[i]->hasAttr(kIssueTogetherAttrName))
        members.push_back(i);
    if (members.size() < 2)
      return;
    std::vector<bool> group(size(), false);
    for (int c : members) {
      group[c] = true;
      std::vector<bool> feeds(size(), false);
      feeds[c] = true;
      for (int i = c - 1; i >= 0; --i) {
        if (collective[i] || !mlir::isMemoryEffectFree(ops[i]) ||
            succs[i].empty() || !packs(i) ||
            llvm::any_of(ops[i]->getResults(),
                         [&](Value v) { return liveOut.contains(v); }))
          continue;
        feeds[i] = llvm::all_of(succs[i], [&](int s) { return feeds[s]; });
        if (feeds[i])
          group[i] = true;
      }
    }
    llvm::SetVector<int> anchors;
    for (int i = 0; i < size(); ++i)
      if (group[i])
        for (int p : preds[i])
          if (!group[p])
            anchors.insert(p);
    for (int c : members)
      addEdges(anchors.getArrayRef(), c);
  }
};

// The peak of live bytes when the ops run in |order|: each op's results are
// allocated while its operands are still live; a value is freed after its
// last reader unless it is returned; results nobody reads are freed at once.
int64_t estimatePeak(const Graph &graph, llvm::ArrayRef<int> order) {
  llvm::DenseMap<Value, int> remaining;
  for (auto &entry : graph.valueUsers)
    remaining[entry.first] = entry.second;
  int64_t live = 0, peak = 0;
  for (int i : order) {
    peak = std::max(peak, live + graph.definedBytes[i] -
                              graph.reusableBytes(i, remaining));
    live += graph.definedBytes[i];
    for (const Graph::Input &input : graph.inputs[i])
      if (--remaining[input.value] == 0 && !graph.liveOut.contains(input.value))
        live -= graph.valueBytes.lookup(input.value);
    for (Value result : graph.ops[i]->getResults())
      if (!graph.valueUsers.count(result) && !graph.liveOut.contains(result))
        live -= graph.valueBytes.lookup(result);
  }
  return peak;
}

// The peak of live bytes of |order| as kiln-plan-buffers will see it: the
// lower bound of the buffers it would plan for that order (in-place updates,
// views and reuse included). Falls back to estimatePeak when some value
// cannot be sized.
int64_t measurePeak(const Graph &graph, mlir::Block &block,
                    mlir::func::FuncOp func, llvm::ArrayRef<int> order) {
  llvm::SmallVector<Operation *> ops;
  for (int i : order)
    ops.push_back(graph.ops[i]);
  BlockLiveness liveness(block, ops);
  mlir::FailureOr<BufferModel> model =
      buildBufferModel(func, liveness, /*alignment=*/1, /*diagnose=*/false);
  if (mlir::failed(model))
    return estimatePeak(graph, order);
  return planner::lowerBound(model->buffers);
}

// Greedy list scheduling: a ready collective first, else the ready op with
// the most bytes freed minus bytes allocated, the earliest on a tie.
std::vector<int> listSchedule(const Graph &graph) {
  int n = graph.size();
  std::vector<int> waiting(n);
  for (int i = 0; i < n; ++i)
    waiting[i] = graph.preds[i].size();
  llvm::DenseMap<Value, int> remaining;
  for (auto &entry : graph.valueUsers)
    remaining[entry.first] = entry.second;
  std::set<int> ready;
  for (int i = 0; i < n; ++i)
    if (waiting[i] == 0)
      ready.insert(i);
  auto score = [&](int i) {
    int64_t freed = 0;
    for (const Graph::Input &input : graph.inputs[i])
      if (remaining.lookup(input.value) == 1 &&
          !graph.liveOut.contains(input.value))
        freed += graph.valueBytes.lookup(input.value);
    return freed - graph.definedBytes[i];
  };
  std::vector<int> order;
  while (!ready.empty()) {
    int pick = -1;
    for (int i : ready)
      if (graph.collective[i]) {
        pick = i;
        break;
      }
    if (pick < 0) {
      int64_t best = 0;
      for (int i : ready) {
        int64_t s = score(i);
        if (pick < 0 || s > best) {
          pick = i;
          best = s;
        }
      }
    }
    ready.erase(pick);
    order.push_back(pick);
    for (const Graph::Input &input : graph.inputs[pick])
      --remaining[input.value];
    for (int s : graph.succs[pick])
      if (--waiting[s] == 0)
        ready.insert(s);
  }
  return order;
}

// Greedy list scheduling bottom-up, from the return: among the ops whose
// users are all placed, place (before them) the one whose results, live
// until now, die there, net of the operands it makes live; the latest on a
// tie. An op is so placed right before its results are needed, which keeps
// cheap producers of big values (a broadcast feeding an optimizer update)
// next to their users.
std::vector<int> reverseListSchedule(const Graph &graph) {
  int n = graph.size();
  std::vector<int> waiting(n);
  for (int i = 0; i < n; ++i)
    waiting[i] = graph.succs[i].size();
  llvm::DenseSet<Value> live;
  for (Value value : graph.liveOut)
    if (graph.valueBytes.count(value))
      live.insert(value);
  std::set<int> ready;
  for (int i = 0; i < n; ++i)
    if (waiting[i] == 0)
      ready.insert(i);
  auto score = [&](int i) {
    int64_t freed = 0, made = 0;
    for (Value result : graph.ops[i]->getResults())
      if (live.contains(result))
        freed += graph.valueBytes.lookup(result);
    for (const Graph::Input &input : graph.inputs[i])
      if (!live.contains(input.value))
        made += graph.valueBytes.lookup(input.value);
    return freed - made;
  };
  std::vector<int> order;
  while (!ready.empty()) {
    int pick = -1;
    int64_t best = 0;
    for (auto it = ready.rbegin(); it != ready.rend(); ++it) {
      int64_t s = score(*it);
      if (pick < 0 || s > best) {
        pick = *it;
        best = s;
      }
    }
    ready.erase(pick);
    order.push_back(pick);
    for (Value result : graph.ops[pick]->getResults())
      live.erase(result);
    for (const Graph::Input &input : graph.inputs[pick])
      live.insert(input.value);
    for (int p : graph.preds[pick])
      if (--waiting[p] == 0)
        ready.insert(p);
  }
  std::reverse(order.begin(), order.end());
  return order;
}

// Post-order from the returned values (then from any op left over, in
// order), visiting the predecessor with the larger subgraph first.
std::vector<int> dfsSchedule(const Graph &graph, mlir::Block &block) {
  int n = graph.size();
  // Bytes defined by an op and everything before it (shared parts counted
  // once per path, as XLA's DFS scheduler does).
  std::vector<int64_t> subgraph(n, 0);
  for (int i = 0; i < n; ++i) {
    subgraph[i] = graph.definedBytes[i];
    for (int p : graph.preds[i])
      subgraph[i] = std::min<int64_t>(subgraph[i] + subgraph[p], INT64_MAX / 4);
  }
  llvm::DenseMap<Operation *, int> index;
  for (int i = 0; i < n; ++i)
    index[graph.ops[i]] = i;
  std::vector<bool> visited(n, false);
  std::vector<int> order;
  // Iterative post-order: (op, next predecessor to look at).
  auto visit = [&](int root) {
    if (visited[root])
      return;
    std::vector<std::pair<int, std::vector<int>>> stack;
    auto push = [&](int i) {
      visited[i] = true;
      std::vector<int> preds = graph.preds[i];
      std::stable_sort(preds.begin(), preds.end(),
                       [&](int a, int b) { return subgraph[a] > subgraph[b]; });
      std::reverse(preds.begin(), preds.end()); // popped from the back
      stack.push_back({i, std::move(preds)});
    };
    push(root);
    while (!stack.empty()) {
      auto &[i, preds] = stack.back();
      while (!preds.empty() && visited[preds.back()])
        preds.pop_back();
      if (preds.empty()) {
        order.push_back(i);
        stack.pop_back();
        continue;
      }
      int next = preds.back();
      preds.pop_back();
      push(next);
    }
  };
  for (Value value : block.getTerminator()->getOperands())
    if (Operation *def = value.getDefiningOp())
      if (Operation *top = block.findAncestorOpInBlock(*def))
        visit(index.lookup(top));
  for (int i = 0; i < n; ++i)
    visit(i);
  return order;
}

// Whether op |i| may move with a collective it feeds: no side effects and
// no result returned by the function.
bool movableFeeder(const Graph &graph, int i) {
  if (graph.collective[i] || !mlir::isMemoryEffectFree(graph.ops[i]))
    return false;
  for (Value result : graph.ops[i]->getResults())
    if (graph.liveOut.contains(result))
      return false;
  return !graph.succs[i].empty();
}

// Moves each collective up to just after the last op it depends on, with
// the ops that exist only to feed it: its transitive predecessors whose
// results nothing else reads (a data-parallel bucket's gradients computed
// for it alone, their reshapes and the concatenation that packs them). So
// a bucket's all-reduce is issued as soon as the backward pass has produced
// what it holds, however late the memory order put its producers; the ops
// that stay (and the order among the moved ones) keep their order.
void hoistCollectives(const Graph &graph, std::vector<int> &order) {
  int n = graph.size();
  for (size_t k = 0; k < order.size(); ++k) {
    int c = order[k];
    if (!graph.collective[c])
      continue;
    std::vector<int> position(n);
    for (size_t p = 0; p < order.size(); ++p)
      position[order[p]] = p;
    // The feeders, found from the collective backwards: an op qualifies
    // when all its users are the collective or feeders (users come later
    // in a topological order, so they are decided first).
    std::vector<bool> moved(n, false);
    moved[c] = true;
    for (int p = static_cast<int>(k) - 1; p >= 0; --p) {
      int i = order[p];
      if (!movableFeeder(graph, i))
        continue;
      bool only = true;
      for (int user : graph.succs[i])
        only &= moved[user];
      moved[i] = only;
    }
    // Everything moved goes right after the last op outside the group it
    // depends on.
    int last = -1;
    for (int i = 0; i < n; ++i)
      if (moved[i])
        for (int pred : graph.preds[i])
          if (!moved[pred])
            last = std::max(last, position[pred]);
    std::vector<int> group, rest;
    for (size_t p = 0; p < order.size(); ++p)
      (moved[order[p]] ? group : rest).push_back(order[p]);
    std::vector<int> result;
    result.reserve(order.size());
    size_t r = 0;
    for (; r < rest.size() && position[rest[r]] <= last; ++r)
      result.push_back(rest[r]);
    result.insert(result.end(), group.begin(), group.end());
    result.insert(result.end(), rest.begin() + r, rest.end());
    order = std::move(result);
    // The collective now sits at a position no later than before; carry on
    // after it.
    k = std::find(order.begin(), order.end(), c) - order.begin();
  }
}

// The original order, with the ops a scheduling rule holds back (and what
// depends on them) moved down just enough to respect it: a topological
// order that runs the ready op that came first. The original order itself
// when it is already topological.
std::vector<int> stableSchedule(const Graph &graph) {
  int n = graph.size();
  std::vector<int> waiting(n);
  for (int i = 0; i < n; ++i)
    waiting[i] = graph.preds[i].size();
  std::set<int> ready;
  for (int i = 0; i < n; ++i)
    if (waiting[i] == 0)
      ready.insert(i);
  std::vector<int> order;
  while (!ready.empty()) {
    int pick = *ready.begin();
    ready.erase(ready.begin());
    order.push_back(pick);
    for (int s : graph.succs[pick])
      if (--waiting[s] == 0)
        ready.insert(s);
  }
  return order;
}

bool isTopological(const Graph &graph, llvm::ArrayRef<int> order) {
  if ((int)order.size() != graph.size())
    return false;
  std::vector<int> position(graph.size(), -1);
  for (size_t p = 0; p < order.size(); ++p) {
    if (position[order[p]] != -1)
      return false;
    position[order[p]] = p;
  }
  for (int i = 0; i < graph.size(); ++i)
    for (int pred : graph.preds[i])
      if (position[pred] >= position[i])
        return false;
  return true;
}

struct SchedulePass : impl::KilnScheduleBase<SchedulePass> {
  using KilnScheduleBase::KilnScheduleBase;

  void runOnOperation() override {
    for (auto func : getOperation().getOps<mlir::func::FuncOp>()) {
      if (func.isExternal())
        continue;
      if (!func.getBody().hasOneBlock()) {
        func.emitRemark() << "kiln-schedule leaves @" << func.getName()
                          << " alone: expected a body of one block, found "
                          << func.getBody().getBlocks().size();
        continue;
      }
      if (mlir::failed(scheduleBlock(func, func.front())))
        return signalPassFailure();
    }
  }

  mlir::LogicalResult scheduleBlock(mlir::func::FuncOp func,
                                    mlir::Block &block) {
    Graph graph(block);
    std::vector<int> identity(graph.size());
    std::iota(identity.begin(), identity.end(), 0);
    std::vector<int> original = stableSchedule(graph);
    struct Candidate {
      const char *name;
      std::vector<int> order;
      int64_t peak = 0;
    };
    Candidate candidates[] = {{"original", original},
                              {"list", listSchedule(graph)},
                              {"reverse-list", reverseListSchedule(graph)},
                              {"dfs", dfsSchedule(graph, block)}};
    int64_t originalPeak = measurePeak(graph, block, func, original);
    Candidate *best = nullptr;
    for (Candidate &candidate : candidates) {
      hoistCollectives(graph, candidate.order);
      if (!isTopological(graph, candidate.order))
        return func.emitError()
               << "internal error: kiln-schedule built a " << candidate.name
               << " order of @" << func.getName()
               << " that breaks a dependence";
      candidate.peak = measurePeak(graph, block, func, candidate.order);
      if (!best || candidate.peak < best->peak)
        best = &candidate;
    }
    if (reportPeaks) {
      auto remark = func.emitRemark();
      remark << "kiln-schedule: @" << func.getName() << " estimated peak "
             << best->peak << " bytes with the " << best->name << " order, was "
             << originalPeak << " (with collectives moved up:";
      for (Candidate &candidate : candidates)
        remark << " " << candidate.name << " " << candidate.peak;
      remark << ")";
    }
    if (best->order == identity)
      return mlir::success();
    // A buffer plan made for the old order no longer holds.
    for (llvm::StringRef name :
         {KilnDialect::kArenaBytesAttrName, KilnDialect::kPeakBytesAttrName,
          KilnDialect::kLowerBoundBytesAttrName})
      func->removeAttr(name);
    mlir::Operation *terminator = block.getTerminator();
    for (int i : best->order) {
      graph.ops[i]->removeAttr(KilnDialect::kBufferOffsetsAttrName);
      graph.ops[i]->removeAttr(KilnDialect::kAliasesAttrName);
      graph.ops[i]->moveBefore(terminator);
    }
    return mlir::success();
  }
};

} // namespace
} // namespace kiln
