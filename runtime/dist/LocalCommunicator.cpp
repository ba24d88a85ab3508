//===- LocalCommunicator.cpp - ranks that are threads of one process ------===//
//
// A Group holds what the ranks share: each rank's posted collective (its
// buffers and parameters), how far each rank got, which ranks left, and one
// scratch buffer for results. A collective is two meetings:
//
//   1. arrive: the rank posts its collective and waits for every rank to
//      post the same one (the last to arrive checks that they agree and
//      sizes the scratch). Nobody posts the next collective before every
//      rank has passed meeting 2 of this one, so the posts stay put.
//   2. computed: each rank has written its part of the result into the
//      scratch, reading only the posted inputs; after this meeting every
//      rank copies the scratch into its own output. Inputs may alias
//      outputs: no output is written before every input has been read.
//
// The next collective's meeting 1 is also the end of this one's copies, so
// the scratch is never overwritten while a rank still reads it.
//
//===----------------------------------------------------------------------===//

#include "runtime/dist/LocalCommunicator.h"

#include "runtime/dist/CollectiveCall.h"
#include "runtime/dist/Reduce.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace kiln::runtime::dist {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

enum class Kind { AllReduce, ReduceScatter, AllGather, Broadcast, Barrier };

// One rank's side of a collective.
struct Post {
  Kind kind = Kind::Barrier;
  const void *in = nullptr;
  void *out = nullptr;
  int64_t count = 0; // all-reduce, broadcast: elements; the others: per rank
  PkgDType dtype = PkgDType::F32;
  PkgReduceKind op = PkgReduceKind::Sum;
  int root = 0;
  std::string what;

  bool sameAs(const Post &o) const {
    return kind == o.kind && count == o.count && dtype == o.dtype &&
           op == o.op && root == o.root;
  }
};

size_t roundUp(size_t x, size_t to) { return (x + to - 1) / to * to; }

// The byte range [begin, end) of the buffer whose reduction Gloo's ring
// all-reduce completes on rank |j| (its allreduce.cc: at least two
// segments per rank, segments of at most 1 MiB, whole elements).
std::pair<size_t, size_t> ringPart(size_t totalBytes, size_t elementSize,
                                   int world, int j) {
  const size_t kMaxSegmentSize = 1024 * 1024; // AllreduceOptionsImpl's
  size_t maxSegmentBytes =
      elementSize * std::max<size_t>(1, kMaxSegmentSize / elementSize);
  size_t numSegments =
      roundUp(std::max((totalBytes + maxSegmentBytes - 1) / maxSegmentBytes,
                       static_cast<size_t>(world) * 2),
              world);
  size_t perRank = numSegments / world;
  size_t segmentBytes =
      roundUp((totalBytes + numSegments - 1) / numSegments, elementSize);
  size_t begin = std::min(totalBytes, j * perRank * segmentBytes);
  size_t end = std::min(totalBytes, (j + 1) * perRank * segmentBytes);
  return {begin, end};
}

class Group {
public:
  Group(int world, milliseconds timeout)
      : world_(world), timeout_(timeout), posts_(world), arrived_(world, 0),
        computed_(world, 0), left_(world, false) {}

  int world() const { return world_; }

  // Meeting 1 for collective |seq| of |rank|: ok when every rank posted the
  // same collective.
  Status arrive(int rank, uint64_t seq, Post post) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!broken_.empty())
      return failedEarlier(rank, post.what);
    posts_[rank] = std::move(post);
    arrived_[rank] = seq;
    if (std::all_of(arrived_.begin(), arrived_.end(),
                    [&](uint64_t s) { return s >= seq; })) {
      // The last to arrive checks the posts and sizes the scratch.
      std::string mismatch;
      for (int r = 1; r < world_ && mismatch.empty(); ++r)
        if (!posts_[r].sameAs(posts_[0]))
          mismatch = "rank 0 issued " + posts_[0].what + " but rank " +
                     std::to_string(r) + " issued " + posts_[r].what;
      if (!mismatch.empty()) {
        broken_ = "collective #" + std::to_string(seq) +
                  ": the ranks disagree: " + mismatch;
      } else {
        const Post &p = posts_[0];
        size_t bytes = p.count * pkgBytesPerElement(p.dtype);
        if (p.kind == Kind::ReduceScatter || p.kind == Kind::AllGather)
          bytes *= world_;
        if (scratch_.size() < bytes)
          scratch_.resize(bytes);
      }
      ready_ = seq;
      changed_.notify_all();
    }
    return waitFor(lock, rank, seq, posts_[rank].what, /*computing=*/false);
  }

  // Meeting 2: every rank has written its part of the scratch.
  Status computed(int rank, uint64_t seq) {
    std::unique_lock<std::mutex> lock(mutex_);
    computed_[rank] = seq;
    changed_.notify_all();
    return waitFor(lock, rank, seq, posts_[rank].what, /*computing=*/true);
  }

  void leave(int rank) {
    std::lock_guard<std::mutex> lock(mutex_);
    left_[rank] = true;
    changed_.notify_all();
  }

  const Post &post(int rank) const { return posts_[rank]; }
  uint8_t *scratch() { return scratch_.data(); }

private:
  Status failedEarlier(int rank, const std::string &what) {
    return Status::error("rank " + std::to_string(rank) + ": " + what +
                         ": the ranks failed earlier: " + broken_);
  }

  Status waitFor(std::unique_lock<std::mutex> &lock, int rank, uint64_t seq,
                 const std::string &what, bool computing) {
    std::vector<uint64_t> &progress = computing ? computed_ : arrived_;
    Clock::time_point start = Clock::now(), deadline = start + timeout_;
    auto missingLeft = [&] {
      for (int r = 0; r < world_; ++r)
        if (progress[r] < seq && left_[r])
          return true;
      return false;
    };
    auto done = [&] {
      return std::all_of(progress.begin(), progress.end(),
                         [&](uint64_t s) { return s >= seq; }) &&
             (computing || ready_ >= seq);
    };
    while (!done() && broken_.empty() && !missingLeft())
      if (changed_.wait_until(lock, deadline) == std::cv_status::timeout)
        break;
    if (done() && broken_.empty())
      return Status::ok();
    // Who is missing: ranks that left, then ranks that did not get here.
    std::string head = "rank " + std::to_string(rank) + ": " + what +
                       " (collective #" + std::to_string(seq) +
                       ") failed after " + formatSeconds(Clock::now() - start);
    std::vector<std::string> gone, absent;
    for (int r = 0; r < world_; ++r) {
      if (r == rank || progress[r] >= seq)
        continue;
      std::string last = arrived_[r] ? " after collective #" +
                                           std::to_string(arrived_[r])
                                     : std::string(" before any collective");
      if (left_[r])
        gone.push_back("rank " + std::to_string(r) +
                       " left (its communicator was destroyed)" + last);
      else if (!computing)
        absent.push_back("rank " + std::to_string(r) +
                         " did not reach it (its last collective was " +
                         (arrived_[r] ? "#" + std::to_string(arrived_[r])
                                      : std::string("none")) +
                         ")");
      else
        absent.push_back("rank " + std::to_string(r) +
                         " did not finish its part");
    }
    // A rank that left is the cause; others not there yet may just be
    // slower (and would have arrived).
    if (gone.empty())
      gone = absent;
    std::string list;
    for (size_t i = 0; i < gone.size(); ++i)
      list += (i ? "; " : "") + gone[i];
    if (list.empty())
      list = broken_.empty() ? "every rank reached it" : broken_;
    std::string message = head + ": " + list;
    if (broken_.empty())
      broken_ = message;
    changed_.notify_all();
    return Status::error(message);
  }

  const int world_;
  const milliseconds timeout_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<Post> posts_;
  std::vector<uint64_t> arrived_, computed_; // per rank: last collective
  std::vector<bool> left_;
  uint64_t ready_ = 0; // the last collective whose posts were checked
  std::string broken_; // the first failure; every later call fails
  std::vector<uint8_t> scratch_;
};

class InProcessCommunicator final : public Communicator {
public:
  InProcessCommunicator(std::shared_ptr<Group> group, int rank)
      : group_(std::move(group)), rank_(rank),
        failAt_(faultInjectionPoint("KILN_DIST_FAIL_AT", rank)) {}
  ~InProcessCommunicator() override { group_->leave(rank_); }

  int rank() const override { return rank_; }
  int worldSize() const override { return group_->world(); }

  Status allReduce(const void *in, void *out, int64_t count, PkgDType dtype,
                   PkgReduceKind op) override {
    Post p{Kind::AllReduce, in, out, count, dtype, op, 0,
           describeAllReduce(count, dtype, op)};
    if (Status s = checkCount(p.what, count); !s.isOk())
      return s;
    ReduceFn fn;
    if (Status s = checkReduction(p.what, dtype, op, fn); !s.isOk())
      return s;
    size_t e = pkgBytesPerElement(dtype), bytes = count * e;
    int world = worldSize();
    if (world == 1 || count == 0) {
      if (in != out)
        std::memmove(out, in, bytes);
      return Status::ok();
    }
    return run(std::move(p), [&](uint8_t *scratch) {
      // This rank's part of Gloo's ring, combined in the ring's order.
      std::pair<size_t, size_t> range = ringPart(bytes, e, world, rank_);
      size_t begin = range.first, end = range.second;
      if (begin < end) {
        size_t n = (end - begin) / e;
        uint8_t *acc = scratch + begin;
        auto input = [&](int r) {
          return static_cast<const uint8_t *>(group_->post(r).in) + begin;
        };
        int first = (rank_ + world - 1) % world;
        std::memcpy(acc, input(first), end - begin);
        for (int t = 2; t <= world; ++t) {
          int r = (rank_ + world - t) % world;
          fn(acc, input(r), acc, n); // the local value, then the received
        }
        if (op == PkgReduceKind::Mean)
          divideBy(dtype, acc, n, world);
      }
    }, [&](const uint8_t *scratch) { std::memcpy(out, scratch, bytes); });
  }

  Status reduceScatter(const void *in, void *out, int64_t countPerRank,
                       PkgDType dtype, PkgReduceKind op) override {
    Post p{Kind::ReduceScatter, in, out, countPerRank, dtype, op, 0,
           describeReduceScatter(countPerRank, dtype, op)};
    if (Status s = checkCount(p.what, countPerRank); !s.isOk())
      return s;
    ReduceFn fn;
    if (Status s = checkReduction(p.what, dtype, op, fn); !s.isOk())
      return s;
    size_t block = countPerRank * pkgBytesPerElement(dtype);
    int world = worldSize();
    if (world == 1 || countPerRank == 0) {
      if (in != out)
        std::memmove(out, in, block);
      return Status::ok();
    }
    return run(std::move(p), [&](uint8_t *scratch) {
      // Block |rank| of every rank's input, in rank order (as Gloo's
      // reduce-scatter reduces the blocks it received).
      uint8_t *acc = scratch + rank_ * block;
      auto input = [&](int r) {
        return static_cast<const uint8_t *>(group_->post(r).in) + rank_ * block;
      };
      std::memcpy(acc, input(0), block);
      for (int r = 1; r < world; ++r)
        fn(acc, acc, input(r), countPerRank);
      if (op == PkgReduceKind::Mean)
        divideBy(dtype, acc, countPerRank, world);
    }, [&](const uint8_t *scratch) {
      std::memcpy(out, scratch + rank_ * block, block);
    });
  }

  Status allGather(const void *in, void *out, int64_t countPerRank,
                   PkgDType dtype) override {
    Post p{Kind::AllGather, in, out, countPerRank, dtype, PkgReduceKind::Sum, 0,
           describeAllGather(countPerRank, dtype)};
    if (Status s = checkCount(p.what, countPerRank); !s.isOk())
      return s;
    size_t block = countPerRank * pkgBytesPerElement(dtype);
    int world = worldSize();
    if (world == 1 || countPerRank == 0) {
      uint8_t *mine = static_cast<uint8_t *>(out) + rank_ * block;
      if (in != mine)
        std::memmove(mine, in, block);
      return Status::ok();
    }
    return run(std::move(p), [&](uint8_t *scratch) {
      std::memcpy(scratch + rank_ * block, in, block);
    }, [&](const uint8_t *scratch) {
      std::memcpy(out, scratch, block * world);
    });
  }

  Status broadcast(const void *in, void *out, int64_t count, PkgDType dtype,
                   int root) override {
    Post p{Kind::Broadcast, in, out, count, dtype, PkgReduceKind::Sum, root,
           describeBroadcast(count, dtype, root)};
    if (Status s = checkCount(p.what, count); !s.isOk())
      return s;
    int world = worldSize();
    if (Status s = checkRoot(p.what, root, world); !s.isOk())
      return s;
    size_t bytes = count * pkgBytesPerElement(dtype);
    if (world == 1 || count == 0) {
      if (rank_ == root && in != out)
        std::memmove(out, in, bytes);
      return Status::ok();
    }
    return run(std::move(p), [&](uint8_t *scratch) {
      if (rank_ == root)
        std::memcpy(scratch, in, bytes);
    }, [&](const uint8_t *scratch) { std::memcpy(out, scratch, bytes); });
  }

  Status barrier() override {
    if (worldSize() == 1)
      return Status::ok();
    Post p;
    p.what = "barrier";
    return run(std::move(p), [](uint8_t *) {}, [](const uint8_t *) {});
  }

private:
  // Collective number seq_ + 1: meet, write this rank's part, meet, copy.
  template <typename Part, typename CopyOut>
  Status run(Post post, Part &&part, CopyOut &&copyOut) {
    uint64_t seq = ++seq_;
    if (seq == failAt_)
      return Status::error("rank " + std::to_string(rank_) + ": " + post.what +
                           " (collective #" + std::to_string(seq) +
                           "): failed on purpose (KILN_DIST_FAIL_AT)");
    if (Status s = group_->arrive(rank_, seq, std::move(post)); !s.isOk())
      return s;
    part(group_->scratch());
    if (Status s = group_->computed(rank_, seq); !s.isOk())
      return s;
    copyOut(group_->scratch());
    return Status::ok();
  }

  std::shared_ptr<Group> group_;
  int rank_;
  uint64_t seq_ = 0;
  // KILN_DIST_FAIL_AT=RANK:N: rank RANK's collective N fails without
  // meeting the others (fault injection for tests, as KILN_DIST_KILL_AT for
  // processes: a thread cannot be killed).
  uint64_t failAt_ = 0;
};

} // namespace

StatusOr<std::vector<std::unique_ptr<Communicator>>>
createLocalCommunicators(int worldSize, const CommOptions &options) {
  if (worldSize < 1)
    return Status::error("world size " + std::to_string(worldSize) +
                         ": expected at least 1 device");
  StatusOr<milliseconds> timeout = collectiveTimeout(options);
  if (!timeout.isOk())
    return timeout.status();
  auto group = std::make_shared<Group>(worldSize, timeout.value());
  std::vector<std::unique_ptr<Communicator>> comms;
  for (int r = 0; r < worldSize; ++r)
    comms.push_back(std::make_unique<InProcessCommunicator>(group, r));
  return comms;
}

} // namespace kiln::runtime::dist
