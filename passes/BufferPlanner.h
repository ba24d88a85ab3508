//===- BufferPlanner.h - arena offsets for buffers with known lifetimes ---===//
//
// The memory planner behind kiln-plan-buffers, free of MLIR so that it can be
// tested on hand-made and random interval sets. Input: buffers with a size,
// an alignment and a lifetime in schedule steps (written at `start`, last
// read at `end`, both inclusive), some of which must share another buffer's
// memory (a view) or may take over an operand's memory when it dies at the op
// that writes them (in-place elementwise). Output: one offset per buffer in a
// single arena.
//
// The planner first groups buffers that will share memory (views always;
// in-place reuse when the operand's memory is free by then) into blocks, then
// places the blocks as XLA's and TFLite's heap simulators do and keeps the
// smaller arena of two algorithms (XLA's ChooseBestHeapAlgorithm):
//   - allocation order: blocks in order of their first step, each into the
//     best-fitting free gap of the arena at that time, else at the end;
//   - decreasing size: the largest blocks first, each into the best-fitting
//     gap left by already placed blocks whose lifetimes overlap it.
//
// checkNoOverlap is an independent proof of the result: a sweep over time
// that keeps the live buffers in an interval set ordered by offset and
// checks every newly live buffer against it, using only the declared
// relations, never the planner's blocks.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_PASSES_BUFFERPLANNER_H
#define KILN_PASSES_BUFFERPLANNER_H

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::planner {

/// Marks "no buffer" in Buffer::mustAlias and Buffer::mayReuse.
constexpr int64_t kNoBuffer = -1;

struct Buffer {
  /// Names the buffer in messages.
  std::string name;
  /// Bytes; 0 is allowed (never overlaps anything).
  int64_t size = 0;
  /// A power of two; the offset is a multiple of it.
  int64_t alignment = 1;
  /// The step that writes the buffer and the last step that reads it
  /// (inclusive; start <= end).
  int64_t start = 0;
  int64_t end = 0;
  /// Index of a buffer whose memory this one must share at the same offset
  /// (a view such as a reshape): both name the same bytes, so they may be
  /// live together. The size must not exceed the target's.
  int64_t mustAlias = kNoBuffer;
  /// Index of an operand buffer whose memory this one may take over when the
  /// operand (and every view of it) is read for the last time at this
  /// buffer's `start`, by an op that reads it elementwise. Only taken for
  /// buffers of equal size.
  int64_t mayReuse = kNoBuffer;
};

enum class Strategy {
  /// Try both and keep the smaller arena (allocation order on a tie).
  Best,
  AllocationOrder,
  DecreasingSize,
};

struct Plan {
  /// One offset per buffer.
  std::vector<int64_t> offsets;
  /// The arena's size: the largest offset + size.
  int64_t arenaBytes = 0;
  /// Per buffer: whether its mayReuse was honoured.
  std::vector<bool> reused;
  /// The algorithm that produced the offsets.
  Strategy strategy = Strategy::AllocationOrder;
};

/// Returns an empty string when |buffers| is a valid planner input, else a
/// message naming the first bad buffer (negative size, start after end,
/// alignment not a power of two, alias index out of range or to itself, a
/// cycle of mustAlias, a view larger than its target, or both relations on
/// one buffer).
std::string validateBuffers(const std::vector<Buffer> &buffers);

/// Plans |buffers| into one arena. Returns false with |error| set when the
/// input is not valid (see validateBuffers).
bool planBuffers(const std::vector<Buffer> &buffers, Plan &plan,
                 std::string &error, Strategy strategy = Strategy::Best);

/// The largest sum of simultaneously live bytes: at each step, the bytes of
/// the live buffers, where a view and what it aliases count once, and so do
/// an operand and a result that may reuse it at the step where one hands
/// over to the other. No valid plan's arena is smaller. Requires a valid
/// input.
int64_t lowerBound(const std::vector<Buffer> &buffers);

struct CheckResult {
  bool ok = true;
  /// The two buffers in conflict (kNoBuffer for a check on one buffer) and
  /// the step at which both are live.
  int64_t first = kNoBuffer;
  int64_t second = kNoBuffer;
  int64_t step = 0;
  /// Says what is wrong, naming the buffers.
  std::string message;
};

/// Proves that no two buffers live at the same step overlap in memory,
/// except where the declared relations allow it: views of one buffer at its
/// offset, and a buffer that took over an operand's memory (same offset and
/// size) at the one step where the operand is last read. Also checks that
/// offsets are aligned and non-negative, that every mustAlias is honoured,
/// and, when |arenaBytes| >= 0, that every buffer lies inside the arena.
/// Returns the first conflict found in time order.
CheckResult checkNoOverlap(const std::vector<Buffer> &buffers,
                           const std::vector<int64_t> &offsets,
                           int64_t arenaBytes = -1);

/// The name of |strategy| for reports: "best", "allocation-order" or
/// "decreasing-size".
const char *strategyName(Strategy strategy);

} // namespace kiln::planner

#endif // KILN_PASSES_BUFFERPLANNER_H
