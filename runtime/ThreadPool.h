//===- ThreadPool.h - a fixed pool for the step's parallel loops --*- C++ -*-===//
//
// The runtime runs a training step of a few milliseconds as a sequence of
// thunks, and each parallel kernel splits its outermost loop into a handful
// of parts; so the pool is called some twenty times per step and the cost of
// one call (waking the workers, waiting for the last part) matters more than
// its throughput. A pool of N threads is N-1 workers plus the calling thread,
// which runs parts too. Workers that just finished spin briefly on an atomic
// generation counter before they block on a condition variable, so a call
// that follows soon after the previous one wakes them without a system call;
// the caller likewise spins briefly before it blocks waiting for the last
// part. Nothing sleeps for a fixed time.
//
// One parallelFor runs at a time (concurrent callers take turns); a
// parallelFor called from inside a part runs inline, in the calling part.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_THREADPOOL_H
#define KILN_RUNTIME_THREADPOOL_H

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kiln::runtime {

class ThreadPool {
public:
  // A pool of |threads| threads in all, the caller included (so |threads|-1
  // workers); 0 or less means std::thread::hardware_concurrency().
  explicit ThreadPool(int threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool &) = delete;
  ThreadPool &operator=(const ThreadPool &) = delete;

  // Threads in all, the caller included.
  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls |fn|(i) once for every i in [0, |n|), spread over the pool's
  // threads and the caller, and returns when all calls have returned.
  void parallelFor(int64_t n, const std::function<void(int64_t)> &fn);

private:
  void workerLoop();
  // Takes indices of the current call until none are left.
  void runParts();

  std::vector<std::thread> workers_;
  std::mutex callMutex_; // one parallelFor at a time

  std::mutex mutex_; // guards sleeping_ and stop_, and the waits below
  std::condition_variable wake_; // workers wait here for a new generation
  std::condition_variable done_; // the caller waits here for pending_ == 0
  int sleeping_ = 0;             // workers blocked on wake_
  bool stop_ = false;
  bool callerSleeping_ = false;

  // The current call: written by the caller before generation_ is bumped.
  const std::function<void(int64_t)> *fn_ = nullptr;
  int64_t n_ = 0;
  std::atomic<int64_t> next_{0};
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0}; // workers not yet done with this generation
};

} // namespace kiln::runtime

#endif // KILN_RUNTIME_THREADPOOL_H
