//===- BufferPlanner.cpp - arena offsets for buffers with known lifetimes -===//
//
// Three parts: grouping buffers that share memory into blocks (views, and
// in-place reuse where the operand's memory is free at the handover), placing
// the blocks with two heap algorithms, and the overlap checker, which works
// on the buffers and their declared relations only, by a sweep over time.
//
//===----------------------------------------------------------------------===//

#include "passes/BufferPlanner.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <queue>
#include <set>
#include <sstream>

namespace kiln::planner {

namespace {

int64_t alignUp(int64_t value, int64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

bool isPowerOfTwo(int64_t value) {
  return value > 0 && (value & (value - 1)) == 0;
}

std::string describe(const std::vector<Buffer> &buffers, int64_t index) {
  std::ostringstream os;
  os << "buffer " << index;
  if (!buffers[index].name.empty())
    os << " '" << buffers[index].name << "'";
  return os.str();
}

// The buffer whose bytes |index| names, following mustAlias to its end.
// Requires an acyclic input.
int64_t viewRoot(const std::vector<Buffer> &buffers, int64_t index) {
  while (buffers[index].mustAlias != kNoBuffer)
    index = buffers[index].mustAlias;
  return index;
}

struct UnionFind {
  std::vector<int64_t> parent;
  explicit UnionFind(size_t n) : parent(n) {
    std::iota(parent.begin(), parent.end(), 0);
  }
  int64_t find(int64_t x) {
    while (parent[x] != x)
      x = parent[x] = parent[parent[x]];
    return x;
  }
  // Makes |into|'s root the root of both; returns it.
  int64_t merge(int64_t into, int64_t from) {
    int64_t a = find(into), b = find(from);
    parent[b] = a;
    return a;
  }
};

// A set of buffers placed at one offset: their lifetimes chain into one.
struct Block {
  int64_t start = 0, end = 0, size = 0, alignment = 1;
  int64_t firstMember = 0;
  int64_t offset = 0;
  std::vector<int64_t> members;
};

// Groups |buffers| into blocks: every view with its target, then each
// in-place candidate with its operand's block when that block is free by the
// candidate's first step. Sets |reused| and |blockOf|.
std::vector<Block> buildBlocks(const std::vector<Buffer> &buffers,
                               std::vector<bool> &reused,
                               std::vector<int64_t> &blockOf) {
  size_t n = buffers.size();
  UnionFind uf(n);
  std::vector<int64_t> roots(n);
  for (size_t i = 0; i < n; ++i) {
    roots[i] = viewRoot(buffers, i);
    uf.merge(roots[i], i);
  }
  // Members per union-find root, kept up to date on each merge.
  std::vector<std::vector<int64_t>> members(n);
  for (size_t i = 0; i < n; ++i)
    members[uf.find(i)].push_back(i);

  std::vector<int64_t> order;
  for (size_t i = 0; i < n; ++i)
    if (buffers[i].mayReuse != kNoBuffer)
      order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return buffers[a].start < buffers[b].start;
  });
  reused.assign(n, false);
  for (int64_t c : order) {
    const Buffer &buf = buffers[c];
    int64_t b = buf.mayReuse;
    if (buffers[b].size != buf.size || buf.size == 0)
      continue;
    int64_t target = uf.find(b), own = uf.find(c);
    if (target == own)
      continue;
    // The operand's block must be read for the last time no later than this
    // step, and only through the operand's own bytes at this step.
    bool free = true;
    for (int64_t m : members[target]) {
      const Buffer &other = buffers[m];
      if (other.start >= buf.start || other.end > buf.start ||
          (other.end == buf.start && roots[m] != roots[b])) {
        free = false;
        break;
      }
    }
    // The candidate's views must start after it, when the operand is gone.
    for (int64_t m : members[own])
      if (m != c && buffers[m].start <= buf.start)
        free = false;
    if (!free)
      continue;
    int64_t root = uf.merge(target, own);
    int64_t other = root == target ? own : target;
    members[root].insert(members[root].end(), members[other].begin(),
                         members[other].end());
    members[other].clear();
    reused[c] = true;
  }

  std::vector<Block> blocks;
  blockOf.assign(n, -1);
  for (size_t i = 0; i < n; ++i) {
    int64_t root = uf.find(i);
    if (blockOf[root] == -1) {
      blockOf[root] = blocks.size();
      Block block;
      block.start = buffers[i].start;
      block.end = buffers[i].end;
      block.firstMember = i;
      blocks.push_back(block);
    }
    Block &block = blocks[blockOf[root]];
    blockOf[i] = blockOf[root];
    block.start = std::min(block.start, buffers[i].start);
    block.end = std::max(block.end, buffers[i].end);
    block.size = std::max(block.size, buffers[i].size);
    block.alignment = std::max(block.alignment, buffers[i].alignment);
    block.members.push_back(i);
  }
  return blocks;
}

// Allocation order: the blocks in order of their first step, each into the
// best-fitting free gap at that time (smallest waste, then lowest offset),
// else at the end of the arena, growing it.
int64_t placeInAllocationOrder(std::vector<Block> &blocks) {
  std::vector<size_t> order(blocks.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (blocks[a].start != blocks[b].start)
      return blocks[a].start < blocks[b].start;
    return blocks[a].size > blocks[b].size;
  });
  std::map<int64_t, int64_t> gaps; // offset -> size, coalesced
  int64_t arenaEnd = 0;
  // Live blocks by the step after which they are freed.
  using Live = std::pair<int64_t, size_t>;
  std::priority_queue<Live, std::vector<Live>, std::greater<Live>> live;

  auto release = [&](int64_t offset, int64_t size) {
    auto next = gaps.lower_bound(offset);
    if (next != gaps.end() && next->first == offset + size) {
      size += next->second;
      next = gaps.erase(next);
    }
    if (next != gaps.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == offset) {
        prev->second += size;
        return;
      }
    }
    gaps[offset] = size;
  };

  for (size_t index : order) {
    Block &block = blocks[index];
    while (!live.empty() && live.top().first < block.start) {
      const Block &done = blocks[live.top().second];
      release(done.offset, done.size);
      live.pop();
    }
    if (block.size == 0) {
      block.offset = 0;
      continue;
    }
    int64_t best = -1, bestWaste = 0, bestGap = 0;
    for (auto [offset, size] : gaps) {
      int64_t aligned = alignUp(offset, block.alignment);
      if (aligned + block.size > offset + size)
        continue;
      int64_t waste = size - block.size;
      if (best == -1 || waste < bestWaste) {
        best = aligned;
        bestWaste = waste;
        bestGap = offset;
      }
    }
    if (best == -1) {
      // Grow the arena, starting inside the last gap when it reaches the end.
      int64_t from = arenaEnd;
      if (!gaps.empty()) {
        auto last = std::prev(gaps.end());
        if (last->first + last->second == arenaEnd) {
          from = last->first;
          gaps.erase(last);
        }
      }
      best = alignUp(from, block.alignment);
      if (best > from)
        gaps[from] = best - from;
      arenaEnd = best + block.size;
    } else {
      int64_t gapSize = gaps[bestGap];
      gaps.erase(bestGap);
      if (best > bestGap)
        gaps[bestGap] = best - bestGap;
      int64_t tail = bestGap + gapSize - (best + block.size);
      if (tail > 0)
        gaps[best + block.size] = tail;
    }
    block.offset = best;
    live.push({block.end, index});
  }
  return arenaEnd;
}

// Decreasing size: the largest blocks first, each into the best-fitting gap
// between the placed blocks whose lifetimes overlap its own, else above them.
int64_t placeInDecreasingSize(std::vector<Block> &blocks) {
  std::vector<size_t> order(blocks.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (blocks[a].size != blocks[b].size)
      return blocks[a].size > blocks[b].size;
    return blocks[a].start < blocks[b].start;
  });
  std::vector<size_t> placed;
  int64_t arenaEnd = 0;
  std::vector<std::pair<int64_t, int64_t>> taken; // offset, end
  for (size_t index : order) {
    Block &block = blocks[index];
    if (block.size == 0) {
      block.offset = 0;
      continue;
    }
    taken.clear();
    for (size_t other : placed) {
      const Block &o = blocks[other];
      if (o.start <= block.end && block.start <= o.end)
        taken.push_back({o.offset, o.offset + o.size});
    }
    std::sort(taken.begin(), taken.end());
    int64_t cursor = 0, best = -1, bestWaste = 0;
    for (auto [from, to] : taken) {
      int64_t aligned = alignUp(cursor, block.alignment);
      if (from > cursor && aligned + block.size <= from) {
        int64_t waste = from - cursor - block.size;
        if (best == -1 || waste < bestWaste) {
          best = aligned;
          bestWaste = waste;
        }
      }
      cursor = std::max(cursor, to);
    }
    if (best == -1)
      best = alignUp(cursor, block.alignment);
    block.offset = best;
    arenaEnd = std::max(arenaEnd, best + block.size);
    placed.push_back(index);
  }
  return arenaEnd;
}

} // namespace

const char *strategyName(Strategy strategy) {
  switch (strategy) {
  case Strategy::Best:
    return "best";
  case Strategy::AllocationOrder:
    return "allocation-order";
  case Strategy::DecreasingSize:
    return "decreasing-size";
  }
  return "unknown";
}

std::string validateBuffers(const std::vector<Buffer> &buffers) {
  int64_t n = buffers.size();
  for (int64_t i = 0; i < n; ++i) {
    const Buffer &b = buffers[i];
    std::string what = describe(buffers, i);
    if (b.size < 0)
      return what + " has a negative size (" + std::to_string(b.size) + ")";
    if (!isPowerOfTwo(b.alignment))
      return what + " has alignment " + std::to_string(b.alignment) +
             ", expected a power of two";
    if (b.start > b.end)
      return what + " starts at step " + std::to_string(b.start) +
             " after its last use at step " + std::to_string(b.end);
    for (int64_t target : {b.mustAlias, b.mayReuse}) {
      if (target == kNoBuffer)
        continue;
      if (target < 0 || target >= n)
        return what + " aliases buffer " + std::to_string(target) +
               ", expected an index below " + std::to_string(n);
      if (target == i)
        return what + " aliases itself";
    }
    if (b.mustAlias != kNoBuffer && b.mayReuse != kNoBuffer)
      return what + " both must alias and may reuse a buffer; expected one";
    if (b.mustAlias != kNoBuffer && b.size > buffers[b.mustAlias].size)
      return what + " (" + std::to_string(b.size) + " bytes) must alias " +
             describe(buffers, b.mustAlias) + ", which has only " +
             std::to_string(buffers[b.mustAlias].size) + " bytes";
  }
  // mustAlias gives each buffer at most one successor: a cycle shows as a
  // walk longer than the number of buffers.
  std::vector<int8_t> state(n, 0); // 0 unvisited, 1 on the walk, 2 done
  for (int64_t i = 0; i < n; ++i) {
    std::vector<int64_t> walk;
    int64_t at = i;
    while (at != kNoBuffer && state[at] == 0) {
      state[at] = 1;
      walk.push_back(at);
      at = buffers[at].mustAlias;
    }
    if (at != kNoBuffer && state[at] == 1)
      return describe(buffers, at) + " is on a cycle of mustAlias";
    for (int64_t w : walk)
      state[w] = 2;
  }
  return "";
}

bool planBuffers(const std::vector<Buffer> &buffers, Plan &plan,
                 std::string &error, Strategy strategy) {
  error = validateBuffers(buffers);
  if (!error.empty())
    return false;
  std::vector<int64_t> blockOf;
  std::vector<Block> blocks = buildBlocks(buffers, plan.reused, blockOf);

  std::vector<Block> byOrder = blocks, bySize = blocks;
  int64_t orderBytes = -1, sizeBytes = -1;
  if (strategy != Strategy::DecreasingSize)
    orderBytes = placeInAllocationOrder(byOrder);
  if (strategy != Strategy::AllocationOrder)
    sizeBytes = placeInDecreasingSize(bySize);
  bool useSize = orderBytes < 0 || (sizeBytes >= 0 && sizeBytes < orderBytes);
  const std::vector<Block> &chosen = useSize ? bySize : byOrder;
  plan.strategy =
      useSize ? Strategy::DecreasingSize : Strategy::AllocationOrder;
  plan.arenaBytes = useSize ? sizeBytes : orderBytes;
  plan.offsets.assign(buffers.size(), 0);
  for (size_t i = 0; i < buffers.size(); ++i)
    plan.offsets[i] = chosen[blockOf[i]].offset;
  return true;
}

int64_t lowerBound(const std::vector<Buffer> &buffers) {
  // Buffers that some valid plan could put at one offset count once while
  // they are live together: views with their targets, and an operand with a
  // result of its size that may reuse it, from the step it hands over.
  size_t n = buffers.size();
  UnionFind uf(n);
  for (size_t i = 0; i < n; ++i) {
    const Buffer &b = buffers[i];
    if (b.mustAlias != kNoBuffer)
      uf.merge(b.mustAlias, i);
    if (b.mayReuse != kNoBuffer) {
      const Buffer &operand = buffers[b.mayReuse];
      if (operand.size == b.size && operand.start < b.start &&
          operand.end <= b.start)
        uf.merge(b.mayReuse, i);
    }
  }
  // A sweep over steps: each class contributes its largest live member.
  std::vector<size_t> byStart(n), byEnd(n);
  std::iota(byStart.begin(), byStart.end(), 0);
  std::iota(byEnd.begin(), byEnd.end(), 0);
  std::sort(byStart.begin(), byStart.end(), [&](size_t a, size_t b) {
    return buffers[a].start < buffers[b].start;
  });
  std::sort(byEnd.begin(), byEnd.end(), [&](size_t a, size_t b) {
    return buffers[a].end < buffers[b].end;
  });
  std::map<int64_t, std::multiset<int64_t>> liveSizes; // class -> sizes
  int64_t total = 0, best = 0;
  auto classMax = [&](int64_t cls) -> int64_t {
    auto it = liveSizes.find(cls);
    return it == liveSizes.end() || it->second.empty() ? 0
                                                       : *it->second.rbegin();
  };
  size_t s = 0, e = 0;
  while (s < n) {
    int64_t step = buffers[byStart[s]].start;
    for (; e < n && buffers[byEnd[e]].end < step; ++e) {
      int64_t i = byEnd[e], cls = uf.find(i);
      int64_t before = classMax(cls);
      auto &set = liveSizes[cls];
      auto found = set.find(buffers[i].size);
      if (found != set.end())
        set.erase(found);
      total += classMax(cls) - before;
    }
    for (; s < n && buffers[byStart[s]].start == step; ++s) {
      int64_t i = byStart[s], cls = uf.find(i);
      int64_t before = classMax(cls);
      liveSizes[cls].insert(buffers[i].size);
      total += classMax(cls) - before;
    }
    best = std::max(best, total);
  }
  return best;
}

CheckResult checkNoOverlap(const std::vector<Buffer> &buffers,
                           const std::vector<int64_t> &offsets,
                           int64_t arenaBytes) {
  CheckResult result;
  auto fail = [&](int64_t first, int64_t second, int64_t step,
                  const std::string &message) {
    result.ok = false;
    result.first = first;
    result.second = second;
    result.step = step;
    result.message = message;
    return result;
  };
  int64_t n = buffers.size();
  if ((int64_t)offsets.size() != n)
    return fail(kNoBuffer, kNoBuffer, 0,
                "expected " + std::to_string(n) + " offsets, found " +
                    std::to_string(offsets.size()));
  std::string invalid = validateBuffers(buffers);
  if (!invalid.empty())
    return fail(kNoBuffer, kNoBuffer, 0, invalid);

  auto range = [&](int64_t i) {
    return "[" + std::to_string(offsets[i]) + ", " +
           std::to_string(offsets[i] + buffers[i].size) + ")";
  };
  // One buffer at a time: placement and the views' offsets.
  for (int64_t i = 0; i < n; ++i) {
    const Buffer &b = buffers[i];
    if (offsets[i] < 0 || offsets[i] % b.alignment != 0)
      return fail(i, kNoBuffer, b.start,
                  describe(buffers, i) + " is at offset " +
                      std::to_string(offsets[i]) +
                      ", expected a non-negative multiple of " +
                      std::to_string(b.alignment));
    if (arenaBytes >= 0 && offsets[i] + b.size > arenaBytes)
      return fail(i, kNoBuffer, b.start,
                  describe(buffers, i) + " at " + range(i) +
                      " ends past the arena of " + std::to_string(arenaBytes) +
                      " bytes");
    if (b.mustAlias != kNoBuffer && offsets[i] != offsets[b.mustAlias])
      return fail(i, b.mustAlias, b.start,
                  describe(buffers, i) + " must alias " +
                      describe(buffers, b.mustAlias) + " but is at offset " +
                      std::to_string(offsets[i]) + ", not " +
                      std::to_string(offsets[b.mustAlias]));
  }

  std::vector<int64_t> roots(n);
  for (int64_t i = 0; i < n; ++i)
    roots[i] = viewRoot(buffers, i);
  // |later| writes at its first step over |earlier|, which that step reads
  // for the last time: allowed when |later| declared that it may reuse a
  // buffer with |earlier|'s bytes and sits exactly on it.
  auto handsOver = [&](int64_t earlier, int64_t later) {
    const Buffer &e = buffers[earlier], &l = buffers[later];
    if (l.mayReuse == kNoBuffer || roots[l.mayReuse] != roots[earlier])
      return false;
    const Buffer &operand = buffers[l.mayReuse];
    return e.end == l.start && e.start < l.start && operand.size == l.size &&
           offsets[later] == offsets[l.mayReuse] &&
           offsets[later] == offsets[earlier];
  };
  auto allowed = [&](int64_t a, int64_t b) {
    if (roots[a] == roots[b] && offsets[a] == offsets[b])
      return true;
    return handsOver(a, b) || handsOver(b, a);
  };

  // The sweep: live buffers in an interval set ordered by offset; each
  // buffer is checked against it when it becomes live.
  std::vector<int64_t> order;
  int64_t maxSize = 0;
  for (int64_t i = 0; i < n; ++i)
    if (buffers[i].size > 0) {
      order.push_back(i);
      maxSize = std::max(maxSize, buffers[i].size);
    }
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return buffers[a].start < buffers[b].start;
  });
  std::multimap<int64_t, int64_t> live;      // offset -> buffer
  using Death = std::pair<int64_t, int64_t>; // end, buffer
  std::priority_queue<Death, std::vector<Death>, std::greater<Death>> deaths;
  for (int64_t i : order) {
    const Buffer &b = buffers[i];
    while (!deaths.empty() && deaths.top().first < b.start) {
      int64_t dead = deaths.top().second;
      deaths.pop();
      auto [lo, hi] = live.equal_range(offsets[dead]);
      for (auto it = lo; it != hi; ++it)
        if (it->second == dead) {
          live.erase(it);
          break;
        }
    }
    int64_t from = offsets[i], to = offsets[i] + b.size;
    // Anything overlapping [from, to) starts after from - maxSize.
    for (auto it = live.upper_bound(from - maxSize);
         it != live.end() && it->first < to; ++it) {
      int64_t other = it->second;
      int64_t otherEnd = offsets[other] + buffers[other].size;
      if (otherEnd <= from || allowed(other, i))
        continue;
      return fail(
          other, i, b.start,
          describe(buffers, other) + " at " + range(other) +
              ", live over steps [" + std::to_string(buffers[other].start) +
              ", " + std::to_string(buffers[other].end) + "], overlaps " +
              describe(buffers, i) + " at " + range(i) + ", live over steps [" +
              std::to_string(b.start) + ", " + std::to_string(b.end) +
              "], at step " + std::to_string(b.start));
    }
    live.insert({from, i});
    deaths.push({b.end, i});
  }
  return result;
}

} // namespace kiln::planner
