//===- CudaEmulation.h - run generated CUDA kernels on host threads -*- C++ -*-===//
//
// Lets the generated kernels (CudaEmitter.h) compile as plain C++ (clang++
// -std=c++20 -DKILN_CUDA_EMULATION -include this file) so that tests can
// execute their arithmetic and indexing on a machine without a GPU:
// threadIdx/blockIdx/blockDim/gridDim, __syncthreads (a block barrier),
// __shfl_xor_sync and __shfl_up_sync (lanes exchange through memory
// between two warp barriers), __half and __nv_bfloat16 (16-bit storage,
// conversions rounded to nearest even), __int_as_float and friends.
// kiln_emulate(grid, block, body) runs the grid's blocks one after
// another, each block's threads (a multiple of 32, at most 1024) as fibers
// on the calling thread: a thread runs until it waits at a barrier or a
// shuffle, then the next one in thread order runs (even blocks in
// ascending order, odd ones descending: a missing barrier between a store
// to shared memory and another thread's load of it shows in one of the
// two, whichever way the data goes), so barriers and shuffles behave as on
// a GPU (a block whose live threads all wait at barriers that cannot
// complete is reported and aborts, where a GPU would hang); __shared__
// variables are statics, which is right because only one block runs at a
// time. x86-64 only (the fiber switch is assembly).
// Dynamic shared memory (a generated kernel's row cache, which reaches it
// through kiln_emulation_dynamic_shared() where the GPU source declares
// `extern __shared__`): kiln_emulate's last argument is its size per
// block, and each block gets an array of its own, filled with 0xff bytes
// (a NaN in every float type), so a kernel that reads a cached element
// before its block wrote it computes NaN instead of a stale row.
// nvcuda::wmma (mma.h) is emulated for 16x16x16 tiles: every lane holds the
// whole tile (load_matrix_sync reads it all, mma_sync multiplies it with
// f32 accumulation in k order, store_matrix_sync writes it; the 32 lanes of
// a warp write the same values), so a kernel that touches fragments only
// through the wmma calls runs as on a GPU, whatever the lane mapping. Like
// the hardware's, load_matrix_sync and store_matrix_sync are warp-wide: each
// starts at a warp barrier, so no lane stores a tile before every lane has
// loaded what it read earlier (an accumulator loaded, multiplied into and
// stored back is not added twice).
// The warp-wide matrix instructions a kernel reaches through inline PTX on
// a GPU (ldmatrix .x4 and mma.sync m16n8k16, the attention kernels'
// register-fragment path) are functions here, kiln_emulation_ldmatrix_x4 and
// kiln_emulation_mma_m16n8k16, with the PTX ISA's lane mappings: each lane
// publishes its operands, the warp meets at a barrier, each lane computes
// its own registers from every lane's operands, and the warp meets again
// before the slots are reused. A kernel whose fragments are in the wrong
// lanes computes wrong numbers here, as it would on the GPU. So are the
// asynchronous copies (cp.async with commit and wait groups), which land
// only when their thread waits for them. cp.async and ldmatrix refuse the
// misaligned addresses a GPU faults on, with a message.
// Only what the generated kernels use is provided; it is a test device, not
// a performance model.
// Built with AddressSanitizer (the sanitized tests build their kernels so,
// scripts/sanitize.sh), every switch between stacks is announced to it
// (__sanitizer_start_switch_fiber), so a kernel's memory accesses are
// checked on the fibers' stacks as on any other.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_CODEGEN_CUDA_CUDAEMULATION_H
#define KILN_CODEGEN_CUDA_CUDAEMULATION_H

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <type_traits>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KILN_EMULATION_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(KILN_EMULATION_ASAN)
#define KILN_EMULATION_ASAN 1
#endif
#ifdef KILN_EMULATION_ASAN
extern "C" void __sanitizer_start_switch_fiber(void **fakeStackSave,
                                               const void *bottom, size_t size);
extern "C" void __sanitizer_finish_switch_fiber(void *fakeStackSave,
                                                const void **bottomOld,
                                                size_t *sizeOld);
#endif

struct kiln_dim3 {
  unsigned x = 1, y = 1, z = 1;
};
inline thread_local kiln_dim3 threadIdx, blockIdx;
inline kiln_dim3 blockDim, gridDim;

namespace kiln_emulation {

// A block's threads are fibers on the calling thread: each runs until it
// waits (a barrier or a shuffle), then hands over to the next live one in
// thread order. A switch saves and restores the callee-saved registers, not
// the kernel's whole state, so a barrier costs a few nanoseconds per thread
// instead of an OS thread's wake-up.
// Each fiber's stack (Stacks).
inline constexpr size_t kFiberStackBytes = size_t(256) << 10;

struct Fiber {
  void *sp = nullptr;
  bool done = false;
  // Its stack, [stackBottom, stackBottom + kFiberStackBytes).
  const void *stackBottom = nullptr;
};

// Barrier of |expected| fibers: the last to arrive releases the others.
struct Barrier {
  unsigned expected = 0, arrived = 0;
  uint64_t generation = 0;
};

inline Barrier block;
inline std::vector<Barrier> warps;
inline uint64_t slots[1024];
// The running block's dynamic shared memory (kiln_emulate).
inline std::unique_ptr<std::max_align_t[]> dynamicShared;

// cp.async: per thread, the copies issued since its last commit and the
// committed groups not yet waited for (kiln_emulation_cp_async).
struct AsyncCopy {
  void *dst;
  const void *src;
  unsigned size, srcBytes;
};
struct AsyncCopies {
  std::vector<AsyncCopy> open;
  std::vector<std::vector<AsyncCopy>> groups;
};
inline std::vector<AsyncCopies> asyncCopies;

inline std::vector<Fiber> fibers;
inline unsigned current = 0, live = 0, blocked = 0;
inline bool descending = false;
inline void *schedulerSp = nullptr;
// The launching thread's stack (kiln_emulate's), as AddressSanitizer
// reports it on the first switch away from it.
inline const void *schedulerStackBottom = nullptr;
inline size_t schedulerStackBytes = 0;
inline bool leavingScheduler = false;
inline std::function<void()> body;

extern "C" void kiln_emulation_switch(void **saveSp, void *nextSp);
extern "C" void kiln_emulation_start();

#if defined(__x86_64__)
// rdi: where to save this context's stack pointer; rsi: the one to resume.
// The callee-saved registers, MXCSR and the x87 control word stay on the
// stack they belong to.
asm(R"(
  .text
  .p2align 4
  .hidden kiln_emulation_switch
  .globl kiln_emulation_switch
  .type kiln_emulation_switch, @function
kiln_emulation_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size kiln_emulation_switch, .-kiln_emulation_switch
)");
#else
#error "CudaEmulation.h switches fibers with x86-64 code only"
#endif

// Under AddressSanitizer: the context that has just been switched to
// (|fakeStack| is what it saved when it left, null when it starts) tells
// the sanitizer so, learning the scheduler's stack on the way out of it.
inline void switched([[maybe_unused]] void *fakeStack) {
#ifdef KILN_EMULATION_ASAN
  const void *bottom = nullptr;
  size_t bytes = 0;
  __sanitizer_finish_switch_fiber(fakeStack, &bottom, &bytes);
  if (leavingScheduler) {
    schedulerStackBottom = bottom;
    schedulerStackBytes = bytes;
    leavingScheduler = false;
  }
#endif
}

// Switches to the context saved at |nextSp|, whose stack is [bottom,
// bottom + bytes), saving the running one's stack pointer in |*saveSp|;
// |leaving| when the running context never runs again (a finished fiber).
inline void switchTo(void **saveSp, void *nextSp,
                     [[maybe_unused]] const void *bottom,
                     [[maybe_unused]] size_t bytes,
                     [[maybe_unused]] bool leaving) {
#ifdef KILN_EMULATION_ASAN
  void *fakeStack = nullptr;
  __sanitizer_start_switch_fiber(leaving ? nullptr : &fakeStack, bottom, bytes);
  kiln_emulation_switch(saveSp, nextSp);
  switched(fakeStack);
#else
  kiln_emulation_switch(saveSp, nextSp);
#endif
}

// Resumes fiber |next| (its threadIdx first), saving the running context's
// stack pointer in |*saveSp|.
inline void resume(unsigned next, void **saveSp, bool leaving = false) {
  current = next;
  threadIdx = {next, 1, 1};
  switchTo(saveSp, fibers[next].sp, fibers[next].stackBottom, kFiberStackBytes,
           leaving);
}

// The next live fiber after the current one, in thread order (reversed
// when |descending|).
inline unsigned nextLive() {
  unsigned n = static_cast<unsigned>(fibers.size());
  for (unsigned i = 1; i <= n; ++i) {
    unsigned f = descending ? (current + n - i) % n : (current + i) % n;
    if (!fibers[f].done)
      return f;
  }
  return current;
}

// The current fiber waits its turn again. When every live fiber waits at a
// barrier that has not completed, none ever will (a thread left the kernel
// before a barrier the others wait at): that is reported, not hung.
inline void yield() {
  if (blocked == live) {
    std::fprintf(stderr,
                 "kiln_emulate: block %u: all %u live threads wait at barriers "
                 "that cannot complete (a thread returned before one)\n",
                 blockIdx.x, live);
    std::abort();
  }
  unsigned from = current;
  resume(nextLive(), &fibers[from].sp);
}

inline void arriveAndWait(Barrier &b) {
  uint64_t generation = b.generation;
  if (++b.arrived == b.expected) {
    b.arrived = 0;
    ++b.generation;
    blocked -= b.expected - 1;
    return;
  }
  ++blocked;
  while (b.generation == generation)
    yield();
}

// A fiber's first frame: runs the kernel's body for its thread, then
// hands over to the next live fiber, or back to kiln_emulate after the last.
extern "C" inline void kiln_emulation_start() {
  switched(nullptr);
  body();
  fibers[current].done = true;
  --live;
  unsigned from = current;
  if (live == 0) {
    void *unused;
    switchTo(&unused, schedulerSp, schedulerStackBottom, schedulerStackBytes,
             /*leaving=*/true);
  }
  resume(nextLive(), &fibers[from].sp, /*leaving=*/true);
  __builtin_unreachable();
}

// Stacks for the fibers of a block, in one mapping: a guard page below the
// lowest, and below each stack a canary that kiln_emulate checks after
// every block (an overflow into the next stack is reported, then aborts).
// Mapped without reserving memory: a stack takes pages as its thread
// touches them. One mapping, not a guard page per stack: every host-kernel
// library has its own set per launching thread (its own copy of this
// header), and a guard page per stack cost two mappings a stack, 2048 a
// set, so a test process that loaded some 30 libraries reached the
// kernel's limit on mappings (vm.max_map_count, 65530), after which
// malloc failed and a later allocation threw std::bad_alloc.
class Stacks {
public:
  static constexpr size_t kBytes = kFiberStackBytes;
  static constexpr uint64_t kCanary = 0x6b696c6e5f737461ull; // "kiln_sta"
  static constexpr unsigned kCanaryWords = 8;
  Stacks() = default;
  ~Stacks() { unmap(); }
  Stacks(const Stacks &) = delete;
  Stacks &operator=(const Stacks &) = delete;

  // Room for |threads| fibers (mapped again, larger, when a block has more
  // threads than any before; between launches, so no fiber is running).
  void reserve(unsigned threads) {
    if (threads <= count)
      return;
    unmap();
    page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    mapped = page + kBytes * threads;
    void *m = mmap(nullptr, mapped, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) {
      std::fprintf(stderr, "kiln_emulate: cannot map %u fiber stacks\n", threads);
      std::abort();
    }
    mprotect(m, page, PROT_NONE);
    base = static_cast<unsigned char *>(m) + page;
    count = threads;
    for (unsigned i = 0; i < count; ++i)
      for (unsigned w = 0; w < kCanaryWords; ++w)
        reinterpret_cast<uint64_t *>(base + i * kBytes)[w] = kCanary;
  }

  // Fiber |i|'s first context: kiln_emulation_switch pops the registers
  // (zero), MXCSR and the x87 control word (the defaults) and returns into
  // kiln_emulation_start with the stack aligned as after a call.
  // Fiber |i|'s stack: its lowest byte (the canary's) and its size.
  const void *bottom(unsigned i) const { return base + i * kBytes; }

  void *initialSp(unsigned i) const {
    auto top = reinterpret_cast<uintptr_t>(base + (i + 1) * kBytes);
    top &= ~uintptr_t(15);
    auto *words = reinterpret_cast<uint64_t *>(top);
    *--words = 0;                                              // alignment
    *--words = reinterpret_cast<uint64_t>(&kiln_emulation_start); // ret
    for (int r = 0; r < 6; ++r)
      *--words = 0;                                            // rbp .. r15
    *--words = uint64_t(0x037f) << 32 | 0x1f80;                // fpu cw, mxcsr
    return words;
  }

  // Aborts, naming the thread, when a fiber of the first |threads| wrote
  // below its stack.
  void checkCanaries(unsigned threads, unsigned blockIndex) const {
    for (unsigned i = 0; i < threads && i < count; ++i)
      for (unsigned w = 0; w < kCanaryWords; ++w)
        if (reinterpret_cast<const uint64_t *>(base + i * kBytes)[w] != kCanary) {
          std::fprintf(stderr,
                       "kiln_emulate: block %u: thread %u overflowed its %zu "
                       "KiB stack\n",
                       blockIndex, i, kBytes >> 10);
          std::abort();
        }
  }

private:
  void unmap() {
    if (base)
      munmap(base - page, mapped);
    base = nullptr;
    count = 0;
  }
  unsigned count = 0;
  size_t page = 0, mapped = 0;
  unsigned char *base = nullptr;
};

// One set per launching thread, for the largest block so far, reused by
// every launch of every kernel.
inline Stacks &launchStacks() {
  static thread_local Stacks stacks;
  return stacks;
}

} // namespace kiln_emulation

inline unsigned char *kiln_emulation_dynamic_shared() {
  return reinterpret_cast<unsigned char *>(kiln_emulation::dynamicShared.get());
}

inline void __syncthreads() { kiln_emulation::arriveAndWait(kiln_emulation::block); }

// Every lane of the warp publishes |value|, then reads lane |source|'s
// (between two warp barriers, so no lane overwrites a slot still read).
template <class T> T kiln_emulation_shuffle(T value, unsigned source) {
  static_assert(sizeof(T) <= 8, "shuffle of at most 8 bytes");
  unsigned t = threadIdx.x;
  kiln_emulation::Barrier &warp = kiln_emulation::warps[t / 32];
  std::memcpy(&kiln_emulation::slots[t], &value, sizeof(T));
  kiln_emulation::arriveAndWait(warp);
  T result;
  std::memcpy(&result, &kiln_emulation::slots[source], sizeof(T));
  kiln_emulation::arriveAndWait(warp);
  return result;
}

// Shuffles are emulated for whole warps: every lane exchanges, and a lane
// that left the kernel before one is reported (yield()). A kernel that
// names fewer lanes (a partial mask) would run here as if it named all,
// so it is refused rather than emulated wrongly.
inline void kiln_emulation_full_mask(unsigned mask, const char *what) {
  if (mask != 0xffffffffu) {
    std::fprintf(stderr,
                 "kiln_emulate: %s with mask 0x%08x: only whole warps "
                 "(0xffffffff) are emulated\n",
                 what, mask);
    std::abort();
  }
}

template <class T> T __shfl_xor_sync(unsigned mask, T value, int laneMask) {
  kiln_emulation_full_mask(mask, "__shfl_xor_sync");
  unsigned t = threadIdx.x;
  return kiln_emulation_shuffle(value, (t & ~31u) | ((t & 31u) ^ unsigned(laneMask)));
}

// Lane t gets lane t - delta's value (its own below delta).
template <class T> T __shfl_up_sync(unsigned mask, T value, unsigned delta) {
  kiln_emulation_full_mask(mask, "__shfl_up_sync");
  unsigned t = threadIdx.x;
  return kiln_emulation_shuffle(value, (t & 31u) >= delta ? t - delta : t);
}

template <class Body>
void kiln_emulate(unsigned grid, unsigned block, Body body,
                  size_t dynamicSharedBytes = 0) {
  using namespace kiln_emulation;
  gridDim = {grid, 1, 1};
  blockDim = {block, 1, 1};
  kiln_emulation::body = body;
  if (block == 0 || block % 32 != 0 || block > 1024) {
    std::fprintf(stderr,
                 "kiln_emulate: a block of %u threads (expected a multiple of "
                 "32, at most 1024)\n",
                 block);
    std::abort();
  }
  Stacks &stacks = launchStacks();
  stacks.reserve(block);
  for (unsigned b = 0; b < grid; ++b) {
    size_t words = (dynamicSharedBytes + sizeof(std::max_align_t) - 1) /
                   sizeof(std::max_align_t);
    dynamicShared = std::make_unique<std::max_align_t[]>(words ? words : 1);
    std::memset(dynamicShared.get(), 0xff,
                (words ? words : 1) * sizeof(std::max_align_t));
    kiln_emulation::block = Barrier{block};
    asyncCopies.assign(block, AsyncCopies{});
    warps.assign(block / 32, Barrier{32});
    fibers.assign(block, Fiber{});
    for (unsigned t = 0; t < block; ++t) {
      fibers[t].sp = stacks.initialSp(t);
      fibers[t].stackBottom = stacks.bottom(t);
    }
    live = block;
    blocked = 0;
    blockIdx = {b, 1, 1};
    descending = b % 2 == 1;
    leavingScheduler = true;
    resume(descending ? block - 1 : 0, &schedulerSp);
    stacks.checkCanaries(block, b);
  }
  kiln_emulation::body = nullptr;
  threadIdx = {};
}

inline float __int_as_float(int bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
inline double __longlong_as_double(long long bits) {
  double d;
  std::memcpy(&d, &bits, 8);
  return d;
}
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
using std::erf, std::erff, std::expm1, std::log1p, std::tanh, std::fmax,
    std::fmin;

// 16-bit floats: storage plus conversions (round to nearest even).
struct __half_raw {
  unsigned short x;
};
struct __half {
  unsigned short x = 0;
  __half() = default;
  explicit __half(__half_raw r) : x(r.x) {}
};
struct __nv_bfloat16_raw {
  unsigned short x;
};
struct __nv_bfloat16 {
  unsigned short x = 0;
  __nv_bfloat16() = default;
  __nv_bfloat16(__nv_bfloat16_raw r) : x(r.x) {}
};

// IEEE binary16 by bit manipulation (not every host compiler has _Float16).
inline unsigned short kiln_emulation_to_half(double v) {
  unsigned short sign = std::signbit(v) ? 0x8000 : 0;
  double a = std::fabs(v);
  if (std::isnan(v))
    return sign | 0x7e00;
  if (std::isinf(v)) // frexp leaves the exponent of an infinity unspecified
    return sign | 0x7c00;
  if (a < 0x1p-14) // subnormal (or zero): units of 2^-24, rounded to even
    return sign | static_cast<unsigned short>(std::nearbyint(a * 0x1p24));
  int e;
  double m = std::frexp(a, &e); // a = m * 2^e, m in [0.5, 1)
  double q = std::nearbyint(m * 2048.0); // 1024..2048
  int exponent = e - 1 + 15;
  if (q == 2048.0) {
    q = 1024.0;
    ++exponent;
  }
  if (exponent >= 31)
    return sign | 0x7c00;
  return sign | static_cast<unsigned short>((exponent << 10) | (static_cast<int>(q) - 1024));
}
// Exact, by bits: a normal half's exponent rebiased, a subnormal's
// mantissa in units of 2^-24 (a power-of-two scale, exact in float).
inline float __half2float(__half h) {
  uint32_t sign = uint32_t(h.x & 0x8000) << 16;
  uint32_t exponent = (h.x >> 10) & 0x1f, mantissa = h.x & 0x3ff;
  uint32_t bits;
  if (exponent == 0) {
    float magnitude = float(mantissa) * 0x1p-24f;
    std::memcpy(&bits, &magnitude, 4);
    bits |= sign;
  } else if (exponent == 31) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
// |v| rounded to float to odd (the magnitude truncated, the last bit set
// when inexact): that float rounds to bf16 as |v| itself would, so
// __double2bfloat16 rounds once, as on a GPU.
inline float kiln_emulation_float_to_odd(double v) {
  float nearest = static_cast<float>(v);
  double back = nearest;
  if (back == v || v != v)
    return nearest;
  uint32_t bits;
  std::memcpy(&bits, &nearest, 4);
  if (v >= 0 ? back > v : back < v)
    --bits;
  bits |= 1;
  float odd;
  std::memcpy(&odd, &bits, 4);
  return odd;
}
// The high 32 bits of the 64-bit product (kiln.dropout's Philox rounds).
inline unsigned __umulhi(unsigned a, unsigned b) {
  return static_cast<unsigned>((static_cast<unsigned long long>(a) * b) >> 32);
}
inline __half __float2half_rn(float v) {
  __half h;
  h.x = kiln_emulation_to_half(v);
  return h;
}
inline __half __double2half(double v) {
  __half h;
  h.x = kiln_emulation_to_half(v);
  return h;
}
inline float __bfloat162float(__nv_bfloat16 h) {
  uint32_t bits = uint32_t(h.x) << 16;
  return __int_as_float(static_cast<int>(bits));
}
inline __nv_bfloat16 __float2bfloat16_rn(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  __nv_bfloat16 h;
  if (std::isnan(v)) {
    h.x = static_cast<unsigned short>((bits >> 16) | 0x40);
    return h;
  }
  uint32_t rounding = 0x7fff + ((bits >> 16) & 1);
  h.x = static_cast<unsigned short>((bits + rounding) >> 16);
  return h;
}
inline __nv_bfloat16 __double2bfloat16(double v) {
  return __float2bfloat16_rn(kiln_emulation_float_to_odd(v));
}

// nvcuda::wmma for 16x16x16 tiles (see the header comment).
inline float kiln_wmma_float(float v) { return v; }
inline float kiln_wmma_float(__half v) { return __half2float(v); }
inline float kiln_wmma_float(__nv_bfloat16 v) { return __bfloat162float(v); }

namespace nvcuda::wmma {
inline void kiln_wmma_sync() {
  kiln_emulation::arriveAndWait(kiln_emulation::warps[threadIdx.x / 32]);
}
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment {
  static constexpr int rows = std::is_same_v<Use, matrix_b> ? K : M;
  static constexpr int cols = std::is_same_v<Use, matrix_a> ? K : N;
  static constexpr int num_elements = rows * cols;
  T x[num_elements];
};

template <class Use, int M, int N, int K, class T, class Layout, class V>
void fill_fragment(fragment<Use, M, N, K, T, Layout> &f, const V &value) {
  for (T &e : f.x)
    e = value;
}

// matrix_a / matrix_b: the layout is the fragment's.
template <class Use, int M, int N, int K, class T, class Layout>
void load_matrix_sync(fragment<Use, M, N, K, T, Layout> &f, const T *p,
                      unsigned ldm) {
  using F = fragment<Use, M, N, K, T, Layout>;
  kiln_wmma_sync();
  for (int r = 0; r < F::rows; ++r)
    for (int c = 0; c < F::cols; ++c)
      f.x[r * F::cols + c] = std::is_same_v<Layout, col_major>
                                 ? p[size_t(c) * ldm + r]
                                 : p[size_t(r) * ldm + c];
}

template <int M, int N, int K, class T>
void load_matrix_sync(fragment<accumulator, M, N, K, T> &f, const T *p,
                      unsigned ldm, layout_t layout) {
  kiln_wmma_sync();
  for (int r = 0; r < M; ++r)
    for (int c = 0; c < N; ++c)
      f.x[r * N + c] = layout == mem_col_major ? p[size_t(c) * ldm + r]
                                               : p[size_t(r) * ldm + c];
}

template <int M, int N, int K, class T>
void store_matrix_sync(T *p, const fragment<accumulator, M, N, K, T> &f,
                       unsigned ldm, layout_t layout) {
  kiln_wmma_sync();
  for (int r = 0; r < M; ++r)
    for (int c = 0; c < N; ++c)
      (layout == mem_col_major ? p[size_t(c) * ldm + r]
                               : p[size_t(r) * ldm + c]) = f.x[r * N + c];
}

template <int M, int N, int K, class TA, class LA, class TB, class LB>
void mma_sync(fragment<accumulator, M, N, K, float> &d,
              const fragment<matrix_a, M, N, K, TA, LA> &a,
              const fragment<matrix_b, M, N, K, TB, LB> &b,
              const fragment<accumulator, M, N, K, float> &c) {
  float fa[M * K], fb[K * N], out[M * N];
  for (int i = 0; i < M * K; ++i)
    fa[i] = kiln_wmma_float(a.x[i]);
  for (int i = 0; i < K * N; ++i)
    fb[i] = kiln_wmma_float(b.x[i]);
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      float sum = c.x[i * N + j];
      for (int k = 0; k < K; ++k)
        sum += fa[i * K + k] * fb[k * N + j];
      out[i * N + j] = sum;
    }
  std::memcpy(d.x, out, sizeof(out));
}
} // namespace nvcuda::wmma


inline unsigned short __half_as_ushort(__half h) { return h.x; }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.x; }

// ldmatrix and mma.sync (see the header comment).
namespace kiln_emulation {
// Each thread's published mma operands as floats: A's 8 elements (a0 low,
// a0 high, a1 low, ...) then B's 4.
inline float fragments[1024][12];
} // namespace kiln_emulation

// cp.async.cg.shared.global [dst], [src], size, srcBytes: copies srcBytes
// bytes and zero-fills the rest of |size|, but only when the thread waits
// for its group (kiln_emulation_cp_async_wait), as late as a GPU may: a
// kernel that reads the destination before waiting (or before the barrier
// after every thread's wait) reads what was there before.
// Like the GPU, it refuses addresses that are not aligned to the copy's
// size (the PTX ISA's rule for cp.async; a GPU faults with a misaligned
// address): the emulation reports which and aborts, where x86 would copy.
inline void kiln_emulation_aligned(const void *p, unsigned bytes,
                                   const char *what, const char *which) {
  if (bytes && reinterpret_cast<uintptr_t>(p) % bytes) {
    std::fprintf(stderr,
                 "kiln_emulate: block %u thread %u: %s %s address %p is not "
                 "%u-byte aligned (a GPU faults: misaligned address)\n",
                 blockIdx.x, threadIdx.x, what, which, p, bytes);
    std::abort();
  }
}
inline void kiln_emulation_cp_async(void *dst, const void *src, unsigned size,
                                    unsigned srcBytes) {
  kiln_emulation_aligned(dst, size, "cp.async", "shared (destination)");
  kiln_emulation_aligned(src, size, "cp.async", "global (source)");
  kiln_emulation::asyncCopies[threadIdx.x].open.push_back(
      {dst, src, size, srcBytes});
}
// cp.async.commit_group: the copies issued since the last commit form a
// group.
inline void kiln_emulation_cp_async_commit() {
  kiln_emulation::AsyncCopies &mine = kiln_emulation::asyncCopies[threadIdx.x];
  mine.groups.push_back(std::move(mine.open));
  mine.open.clear();
}
// cp.async.wait_group n: completes all but the newest |newest| groups.
inline void kiln_emulation_cp_async_wait(unsigned newest) {
  kiln_emulation::AsyncCopies &mine = kiln_emulation::asyncCopies[threadIdx.x];
  size_t done = mine.groups.size() > newest ? mine.groups.size() - newest : 0;
  for (size_t i = 0; i < done; ++i)
    for (const kiln_emulation::AsyncCopy &c : mine.groups[i]) {
      std::memcpy(c.dst, c.src, c.srcBytes);
      std::memset(static_cast<char *>(c.dst) + c.srcBytes, 0,
                  c.size - c.srcBytes);
    }
  mine.groups.erase(mine.groups.begin(), mine.groups.begin() + done);
}

// ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16: lane l gives the
// address of row l % 8 of matrix l / 8 (eight 16-bit elements, 16 bytes:
// the row must be 16-byte aligned, or the GPU faults, and so does the
// emulation); with g = l / 4 and c = 2 (l % 4), r[i] gets matrix i's
// elements (g, c) and (g, c + 1), or with |trans| (c, g) and (c + 1, g),
// the first in the low half.
inline void kiln_emulation_ldmatrix_x4(unsigned r[4], const void *row,
                                       bool trans) {
  using namespace kiln_emulation;
  kiln_emulation_aligned(row, 16, "ldmatrix", "row");
  unsigned t = threadIdx.x, base = t & ~31u, lane = t & 31u;
  Barrier &warp = warps[t / 32];
  std::memcpy(&slots[t], &row, sizeof row);
  arriveAndWait(warp);
  auto rowOf = [&](unsigned matrix, unsigned index) {
    const void *p;
    std::memcpy(&p, &slots[base + matrix * 8 + index], sizeof p);
    return static_cast<const uint16_t *>(p);
  };
  unsigned g = lane / 4, c = 2 * (lane % 4);
  unsigned out[4];
  for (unsigned i = 0; i < 4; ++i) {
    uint16_t lo = trans ? rowOf(i, c)[g] : rowOf(i, g)[c];
    uint16_t hi = trans ? rowOf(i, c + 1)[g] : rowOf(i, g)[c + 1];
    out[i] = uint32_t(lo) | uint32_t(hi) << 16;
  }
  arriveAndWait(warp);
  std::memcpy(r, out, sizeof out);
}

// mma.sync.aligned.m16n8k16.row.col.f32.T.T.f32 (T __half or
// __nv_bfloat16): d = a b + c for A 16 x 16, B 16 x 8, C and D 16 x 8 in
// f32. With g = l / 4 and c = 2 (l % 4), lane l holds A's (row, col) pairs
// (g, c..c+1) in a[0], (g + 8, c..) in a[1], (g, c + 8..) in a[2] and
// (g + 8, c + 8..) in a[3]; B's (c..c+1, g) in b[0] and (c + 8.., g) in
// b[1]; C's and D's (g, c), (g, c + 1), (g + 8, c), (g + 8, c + 1) in
// [0..3]. The products (exact in f32) are added to c in k order.
template <class T>
inline void kiln_emulation_mma_m16n8k16(float d[4], const unsigned a[4],
                                        const unsigned b[2],
                                        const float c[4]) {
  using namespace kiln_emulation;
  unsigned t = threadIdx.x, base = t & ~31u, lane = t & 31u;
  Barrier &warp = warps[t / 32];
  const unsigned regs[6] = {a[0], a[1], a[2], a[3], b[0], b[1]};
  for (int i = 0; i < 12; ++i) {
    T element;
    element.x = uint16_t(regs[i / 2] >> (16 * (i % 2)));
    fragments[t][i] = kiln_wmma_float(element);
  }
  arriveAndWait(warp);
  // Element k (of the pair's two) of register |reg| of lane |owner|.
  auto element = [&](unsigned owner, unsigned reg, unsigned k) {
    return fragments[base + owner][2 * reg + k % 2];
  };
  unsigned g = lane / 4, col0 = 2 * (lane % 4);
  float out[4];
  for (unsigned e = 0; e < 4; ++e) {
    unsigned row = g + (e >= 2 ? 8 : 0), col = col0 + (e & 1);
    float sum = c[e];
    for (unsigned k = 0; k < 16; ++k) {
      float x = element((row % 8) * 4 + (k % 8) / 2,
                        (row >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0), k);
      float y = element(col * 4 + (k % 8) / 2, 4 + (k >= 8 ? 1 : 0), k);
      sum += x * y;
    }
    out[e] = sum;
  }
  arriveAndWait(warp);
  std::memcpy(d, out, sizeof out);
}

#endif // KILN_CODEGEN_CUDA_CUDAEMULATION_H
