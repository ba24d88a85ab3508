//===- ThreadPool.cpp - a fixed pool for the step's parallel loops --------===//
//
// Protocol: the caller publishes the call (fn_, n_, next_ = 0, pending_ =
// workers) and then bumps generation_ under mutex_; workers that see a new
// generation take indices from next_ until it passes n_, then decrement
// pending_. The caller takes indices too and returns once pending_ is 0. As
// the caller waits for every worker, no worker can miss a generation, and
// the call's fields are never rewritten while a worker reads them.
//
// Both sides spin for a bounded time (kSpinTime, yielding the core after
// the first microseconds) before blocking, so the calls of one step, which
// follow each other within microseconds, rarely pay for a futex wake-up. Blocking happens under mutex_ with predicates,
// so no wake-up is lost.
//
//===----------------------------------------------------------------------===//

#include "runtime/ThreadPool.h"

#include <algorithm>
#include <chrono>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace kiln::runtime {
namespace {

// Set while a thread runs parts, so a nested parallelFor runs inline rather
// than waiting on the pool it occupies.
thread_local bool tInsidePart = false;

// How long a worker waits for the next call, and the caller for the last
// part, before blocking. A step's parallel calls come tens to hundreds of
// microseconds apart, and waking a blocked thread costs some 10-30 us.
constexpr std::chrono::microseconds kSpinTime(200);
// Pure pause loops this long first; after that the spinner yields its core
// between checks, so a pool larger than the machine (or another busy thread)
// is not starved by spinners.
constexpr std::chrono::microseconds kPauseTime(5);

inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Spins until |done|() or kSpinTime has passed; returns |done|().
template <typename Pred> bool spinUntil(Pred done) {
  if (done())
    return true;
  auto start = std::chrono::steady_clock::now();
  for (;;) {
    for (int i = 0; i < 32; ++i) {
      cpuRelax();
      if (done())
        return true;
    }
    auto waited = std::chrono::steady_clock::now() - start;
    if (waited >= kSpinTime)
      return done();
    if (waited >= kPauseTime)
      std::this_thread::yield();
  }
}

} // namespace

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0)
    threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  workers_.reserve(threads - 1);
  for (int i = 1; i < threads; ++i)
    workers_.emplace_back([this] { workerLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (std::thread &worker : workers_)
    worker.join();
}

void ThreadPool::runParts() {
  bool outer = tInsidePart;
  tInsidePart = true;
  for (;;) {
    int64_t i = next_.fetch_add(1, std::memory_order_relaxed);
    if (i >= n_)
      break;
    (*fn_)(i);
  }
  tInsidePart = outer;
}

void ThreadPool::workerLoop() {
  // Generation 0 is the constructor's; a worker that starts late must still
  // take part in generation 1, so it does not read the counter here.
  uint64_t seen = 0;
  for (;;) {
    uint64_t generation = seen;
    auto changed = [&] {
      generation = generation_.load(std::memory_order_acquire);
      return generation != seen;
    };
    if (!spinUntil(changed)) {
      std::unique_lock<std::mutex> lock(mutex_);
      ++sleeping_;
      wake_.wait(lock, [&] { return stop_ || changed(); });
      --sleeping_;
      if (stop_)
        return;
    }
    seen = generation;
    runParts();
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (callerSleeping_)
        done_.notify_one();
    }
  }
}

void ThreadPool::parallelFor(int64_t n,
                             const std::function<void(int64_t)> &fn) {
  if (n <= 0)
    return;
  if (n == 1 || workers_.empty() || tInsidePart) {
    for (int64_t i = 0; i < n; ++i)
      fn(i);
    return;
  }
  std::lock_guard<std::mutex> call(callMutex_);
  fn_ = &fn;
  n_ = n;
  next_.store(0, std::memory_order_relaxed);
  pending_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    generation_.fetch_add(1, std::memory_order_release);
    if (sleeping_ > 0)
      wake_.notify_all();
  }
  runParts();
  auto finished = [&] { return pending_.load(std::memory_order_acquire) == 0; };
  if (!spinUntil(finished)) {
    std::unique_lock<std::mutex> lock(mutex_);
    callerSleeping_ = true;
    done_.wait(lock, finished);
    callerSleeping_ = false;
  }
  fn_ = nullptr;
}

} // namespace kiln::runtime
