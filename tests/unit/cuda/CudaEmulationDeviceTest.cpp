//===- CudaEmulationDeviceTest.cpp - the emulated device itself ------------===//
//
// codegen/cuda/CudaEmulation.h is the device every CUDA kernel test without
// a GPU runs on, so its own behaviour is checked here with hand-written
// kernels built for the host (HostKernels.h): block barriers order shared
// memory, a missing barrier shows in one of the two thread orders, warp
// shuffles exchange lanes as on a GPU, a block deadlocked at a barrier and
// a block size a GPU refuses end the process with a message instead of
// hanging, and the 16-bit conversions agree with runtime/Half.h (an
// independent implementation) on every half and bfloat16 and on floats
// around every rounding boundary. The warp-wide matrix instructions
// (ldmatrix .x4 with and without .trans, mma.sync m16n8k16 in f16 and
// bf16) give each lane the registers the PTX ISA's fragment layouts name:
// fragments built element by element from those layouts equal ldmatrix's
// from shared memory, and the product of random matrices equals A B + C
// computed here in double precision; cp.async and ldmatrix refuse
// misaligned addresses, as a GPU does.
//
//===----------------------------------------------------------------------===//

#include "runtime/Half.h"
#include "tests/unit/cuda/AddressSanitizer.h"
#include "tests/unit/cuda/HostKernels.h"

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <set>

namespace {

using kiln::runtime::cuda::testing::buildHostKernels;
using kiln::runtime::cuda::testing::HostKernel;

const char *kSource = R"(
// Each thread stores its value in shared memory, waits (or not) and reads
// its neighbour's: |step| 1 reads thread t + 1, |step| -1 thread t - 1.
__global__ void exchange(float *out, int barrier, int step) {
  __shared__ float tile[1024];
  unsigned n = blockDim.x, t = threadIdx.x;
  tile[t] = float(blockIdx.x * 10000 + t);
  if (barrier)
    __syncthreads();
  out[blockIdx.x * n + t] = tile[(t + n + step) % n];
}
extern "C" void exchange_host(void **buffers, unsigned grid, unsigned block) {
  kiln_emulate(grid, block, [&] {
    exchange((float *)buffers[0], *(int *)buffers[1], *(int *)buffers[2]);
  });
}

// Per warp: the butterfly sum of the lanes' values and the inclusive scan.
__global__ void lanes(const float *in, float *sum, float *scan) {
  unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
  float v = in[t], s = v;
  for (int mask = 16; mask > 0; mask /= 2)
    s += __shfl_xor_sync(0xffffffffu, s, mask);
  sum[t] = s;
  float p = v;
  for (unsigned delta = 1; delta < 32; delta *= 2) {
    float other = __shfl_up_sync(0xffffffffu, p, delta);
    if ((threadIdx.x & 31u) >= delta)
      p += other;
  }
  scan[t] = p;
}
extern "C" void lanes_host(void **buffers, unsigned grid, unsigned block) {
  kiln_emulate(grid, block, [&] {
    lanes((const float *)buffers[0], (float *)buffers[1], (float *)buffers[2]);
  });
}

// Thread 0 leaves before the barrier the others wait at.
__global__ void early(float *out) {
  if (threadIdx.x == 0)
    return;
  __syncthreads();
  out[threadIdx.x] = 1.0f;
}
extern "C" void early_host(void **buffers, unsigned grid, unsigned block) {
  kiln_emulate(grid, block, [&] { early((float *)buffers[0]); });
}

// A shuffle among the warp's lower half only: the emulation, which
// exchanges whole warps, refuses it.
__global__ void halfwarp(float *out) {
  out[threadIdx.x] = __shfl_xor_sync(0x0000ffffu, float(threadIdx.x), 1);
}
extern "C" void halfwarp_host(void **buffers, unsigned grid, unsigned block) {
  kiln_emulate(grid, block, [&] { halfwarp((float *)buffers[0]); });
}

// cp.async of 16 bytes and ldmatrix from addresses |offset| bytes past
// 16-byte aligned ones (a GPU faults on any offset but 0).
__global__ void misaligned(const unsigned short *in, unsigned *out, int offset, int ldmatrix) {
  __shared__ __align__(16) unsigned short tile[32 * 8 + 8];
  const char *src = (const char *)in + (ldmatrix ? 0 : offset);
  kiln_emulation_cp_async(tile + threadIdx.x * 8, src + threadIdx.x * 16, 16, 16);
  kiln_emulation_cp_async_commit();
  kiln_emulation_cp_async_wait(0);
  __syncthreads();
  unsigned r[4];
  kiln_emulation_ldmatrix_x4(r, (const char *)(tile + threadIdx.x * 8) + (ldmatrix ? offset : 0), false);
  for (int i = 0; i < 4; ++i)
    out[threadIdx.x * 4 + i] = r[i];
}
extern "C" void misaligned_host(void **buffers, unsigned grid, unsigned block) {
  kiln_emulate(grid, block, [&] {
    misaligned((const unsigned short *)buffers[0], (unsigned *)buffers[1],
               *(int *)buffers[2], *(int *)buffers[3]);
  });
}

// A grid-stride loop one element too long (i <= n): it reads in[n], which a
// GPU may well not fault on.
__global__ void overread(const float *in, float *out, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i <= n;
       i += gridDim.x * blockDim.x) {
    float v = in[i];
    if (i < n)
      out[i] = v;
  }
}
extern "C" void overread_host(void **buffers, unsigned grid, unsigned block) {
  kiln_emulate(grid, block, [&] {
    overread((const float *)buffers[0], (float *)buffers[1], *(int *)buffers[2]);
  });
}

// Conversions: |count| halves, bfloat16s and floats, a thread per element
// in a grid-stride loop.
__global__ void convert(const unsigned short *halves, const unsigned short *bf16s,
                        const float *floats, float *fromHalf, float *fromBf16,
                        unsigned short *toHalf, unsigned short *toBf16,
                        unsigned count) {
  for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < count;
       i += gridDim.x * blockDim.x) {
    __half h;
    h.x = halves[i];
    fromHalf[i] = __half2float(h);
    __nv_bfloat16 b;
    b.x = bf16s[i];
    fromBf16[i] = __bfloat162float(b);
    toHalf[i] = __float2half_rn(floats[i]).x;
    toBf16[i] = __float2bfloat16_rn(floats[i]).x;
  }
}
// One warp: A (16 x 16), B (16 x 8, [k][n]) and C (16 x 8, f32) from
// memory. Each lane builds its fragments from the documented layouts
// (g = lane / 4, c = 2 (lane % 4): A's pairs (g, c), (g + 8, c), (g, c + 8),
// (g + 8, c + 8); B's (c, g) and (c + 8, g), as [k][n]; C's and D's (g, c),
// (g, c + 1), (g + 8, c), (g + 8, c + 1)), loads A, B ([k][n], .trans) and
// B^T ([n][k]) with ldmatrix from shared memory, and computes D = A B + C
// with the built fragments. regs[lane * 12 + i]: the built A (i < 4) and B
// (4, 5), ldmatrix's A (6 to 9) and B (10, 11); regs[384 + lane * 2 + i]:
// ldmatrix's B from B^T.
template <class T>
__global__ void matrix(const unsigned short *a, const unsigned short *b,
                       const float *c, float *d, unsigned *regs) {
  __shared__ __align__(16) unsigned short sA[16 * 16], sB[16 * 8], sBt[8 * 16];
  unsigned l = threadIdx.x, g = l / 4, q = 2 * (l % 4);
  for (unsigned i = l; i < 256; i += 32)
    sA[i] = a[i];
  for (unsigned i = l; i < 128; i += 32) {
    sB[i] = b[i];
    sBt[(i % 8) * 16 + i / 8] = b[i];
  }
  __syncthreads();
  auto pair = [](unsigned short lo, unsigned short hi) {
    return unsigned(lo) | unsigned(hi) << 16;
  };
  unsigned fa[4] = {pair(a[g * 16 + q], a[g * 16 + q + 1]),
                    pair(a[(g + 8) * 16 + q], a[(g + 8) * 16 + q + 1]),
                    pair(a[g * 16 + q + 8], a[g * 16 + q + 9]),
                    pair(a[(g + 8) * 16 + q + 8], a[(g + 8) * 16 + q + 9])};
  unsigned fb[2] = {pair(b[q * 8 + g], b[(q + 1) * 8 + g]),
                    pair(b[(q + 8) * 8 + g], b[(q + 9) * 8 + g])};
  unsigned la[4], lb[4], lbt[4];
  kiln_emulation_ldmatrix_x4(la, &sA[((l / 8) % 2 * 8 + l % 8) * 16 + l / 16 * 8], false);
  kiln_emulation_ldmatrix_x4(lb, &sB[((l / 8) % 2 * 8 + l % 8) * 8], true);
  kiln_emulation_ldmatrix_x4(lbt, &sBt[(l % 8) * 16 + (l / 8) % 2 * 8], false);
  unsigned *r = regs + l * 12;
  for (int i = 0; i < 4; ++i)
    r[i] = fa[i], r[6 + i] = la[i];
  r[4] = fb[0], r[5] = fb[1];
  r[10] = lb[0], r[11] = lb[1];
  regs[32 * 12 + l * 2] = lbt[0], regs[32 * 12 + l * 2 + 1] = lbt[1];
  float cf[4] = {c[g * 8 + q], c[g * 8 + q + 1], c[(g + 8) * 8 + q],
                 c[(g + 8) * 8 + q + 1]};
  float out[4];
  kiln_emulation_mma_m16n8k16<T>(out, fa, fb, cf);
  d[g * 8 + q] = out[0], d[g * 8 + q + 1] = out[1];
  d[(g + 8) * 8 + q] = out[2], d[(g + 8) * 8 + q + 1] = out[3];
}
extern "C" void matrix_f16_host(void **buffers, unsigned grid, unsigned block) {
  kiln_emulate(grid, block, [&] {
    matrix<__half>((const unsigned short *)buffers[0], (const unsigned short *)buffers[1],
                   (const float *)buffers[2], (float *)buffers[3], (unsigned *)buffers[4]);
  });
}
extern "C" void matrix_bf16_host(void **buffers, unsigned grid, unsigned block) {
  kiln_emulate(grid, block, [&] {
    matrix<__nv_bfloat16>((const unsigned short *)buffers[0], (const unsigned short *)buffers[1],
                          (const float *)buffers[2], (float *)buffers[3], (unsigned *)buffers[4]);
  });
}

// Thread |deep| of the block takes |kib| KiB of its stack (a local array
// it writes whole); the others a little.
__global__ void stack(int deep, int kib, int *out) {
  volatile char local[64];
  local[0] = 1;
  if ((int)threadIdx.x == deep) {
    volatile char *big = (volatile char *)__builtin_alloca(size_t(kib) << 10);
    for (int i = 0; i < kib << 10; ++i)
      big[i] = char(i);
    out[threadIdx.x] = big[(kib << 10) - 1];
  } else {
    out[threadIdx.x] = local[0];
  }
}
extern "C" void stack_host(void **buffers, unsigned grid, unsigned block) {
  kiln_emulate(grid, block, [&] {
    stack(*(int *)buffers[0], *(int *)buffers[1], (int *)buffers[2]);
  });
}

extern "C" void convert_host(void **buffers, unsigned grid, unsigned block) {
  kiln_emulate(grid, block, [&] {
    convert((const unsigned short *)buffers[0], (const unsigned short *)buffers[1],
            (const float *)buffers[2], (float *)buffers[3], (float *)buffers[4],
            (unsigned short *)buffers[5], (unsigned short *)buffers[6],
            *(unsigned *)buffers[7]);
  });
}
)";

class CudaEmulationDeviceTest : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    std::string error;
    kernels = new std::map<std::string, HostKernel>(buildHostKernels(
        kSource,
        {"exchange", "lanes", "early", "halfwarp", "convert", "matrix_f16",
         "matrix_bf16", "stack", "overread", "misaligned"},
        "device", error));
    ASSERT_TRUE(error.empty()) << error;
  }
  static void TearDownTestSuite() {
    delete kernels;
    kernels = nullptr;
  }

  // exchange on |grid| blocks of |block| threads: out[b * block + t].
  static std::vector<float> exchange(unsigned grid, unsigned block, int barrier,
                                     int step) {
    std::vector<float> out(size_t(grid) * block, -1.0f);
    void *buffers[] = {out.data(), &barrier, &step};
    kernels->at("exchange")(buffers, grid, block);
    return out;
  }

  static std::map<std::string, HostKernel> *kernels;
};

std::map<std::string, HostKernel> *CudaEmulationDeviceTest::kernels = nullptr;

TEST_F(CudaEmulationDeviceTest, BarriersOrderSharedMemory) {
  for (unsigned block : {32u, 256u, 1024u})
    for (int step : {1, -1}) {
      std::vector<float> out = exchange(3, block, /*barrier=*/1, step);
      for (unsigned b = 0; b < 3; ++b)
        for (unsigned t = 0; t < block; ++t)
          ASSERT_EQ(out[b * block + t],
                    float(b * 10000 + (t + block + step) % block))
              << "block " << b << " of " << block << " threads, thread " << t
              << ", step " << step;
    }
}

// Without the barrier, threads that read a neighbour not yet run get the
// previous block's value: reading thread t + 1 fails in the ascending
// (even) blocks, reading thread t - 1 in the descending (odd) ones, so a
// kernel missing a barrier fails in one of the two whichever neighbour it
// reads. (In each, the thread that runs first also reads the one that
// wraps around, which runs last.)
TEST_F(CudaEmulationDeviceTest, MissingBarrierShowsInOneOrder) {
  const unsigned block = 64;
  for (int step : {1, -1}) {
    std::vector<float> out = exchange(2, block, /*barrier=*/0, step);
    int wrong[2] = {0, 0};
    for (unsigned b = 0; b < 2; ++b)
      for (unsigned t = 0; t < block; ++t)
        wrong[b] += out[b * block + t] != float(b * 10000 + (t + block + step) % block);
    // All but the thread whose neighbour wraps around to one already run;
    // in the other order only the first thread.
    EXPECT_EQ(wrong[step == 1 ? 0 : 1], int(block) - 1) << "step " << step;
    EXPECT_EQ(wrong[step == 1 ? 1 : 0], 1) << "step " << step;
  }
}

TEST_F(CudaEmulationDeviceTest, ShufflesExchangeLanes) {
  const unsigned grid = 2, block = 96;
  std::vector<float> in(grid * block), sum(in.size()), scan(in.size());
  std::mt19937 rng(7);
  for (float &v : in)
    v = float(std::uniform_int_distribution<int>(-50, 50)(rng));
  void *buffers[] = {in.data(), sum.data(), scan.data()};
  kernels->at("lanes")(buffers, grid, block);
  for (size_t warp = 0; warp < in.size() / 32; ++warp) {
    float total = 0, prefix = 0;
    for (size_t lane = 0; lane < 32; ++lane)
      total += in[warp * 32 + lane];
    for (size_t lane = 0; lane < 32; ++lane) {
      prefix += in[warp * 32 + lane];
      EXPECT_EQ(sum[warp * 32 + lane], total) << "warp " << warp << " lane " << lane;
      EXPECT_EQ(scan[warp * 32 + lane], prefix) << "warp " << warp << " lane " << lane;
    }
  }
}

TEST_F(CudaEmulationDeviceTest, DeadlockedBlockEndsWithAMessage) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::vector<float> out(64);
  void *buffers[] = {out.data()};
  EXPECT_DEATH(kernels->at("early")(buffers, 1, 64),
               "block 0: all 63 live threads wait at barriers that cannot "
               "complete");
}

// Every shuffle the emitter and the runtime's kernels write names the
// whole warp; one that names fewer lanes would be emulated as if it named
// all, so the emulation stops instead.
TEST_F(CudaEmulationDeviceTest, PartialWarpShuffleEndsWithAMessage) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::vector<float> out(32);
  void *buffers[] = {out.data()};
  EXPECT_DEATH(kernels->at("halfwarp")(buffers, 1, 32),
               "__shfl_xor_sync with mask 0x0000ffff: only whole warps "
               "\\(0xffffffff\\) are emulated");
}

TEST_F(CudaEmulationDeviceTest, BlockSizeAGpuRefusesEndsWithAMessage) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::vector<float> out(2048);
  int barrier = 1, step = 1;
  void *buffers[] = {out.data(), &barrier, &step};
  EXPECT_DEATH(kernels->at("exchange")(buffers, 1, 48),
               "a block of 48 threads \\(expected a multiple of 32, at most 1024\\)");
  EXPECT_DEATH(kernels->at("exchange")(buffers, 1, 2048), "a block of 2048 threads");
}

// cp.async and ldmatrix take only aligned addresses (cp.async: the copy's
// size; ldmatrix: each row's 16 bytes), as on a GPU, which faults with a
// misaligned address; aligned, the copies land and ldmatrix reads them.
TEST_F(CudaEmulationDeviceTest, MisalignedMatrixAccessesEndWithAMessage) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  alignas(16) unsigned short in[32 * 8 + 16];
  for (int i = 0; i < 32 * 8 + 16; ++i)
    in[i] = (unsigned short)(i * 7 + 1);
  std::vector<unsigned> out(32 * 4);
  int offset = 0, ldmatrix = 0;
  void *buffers[] = {in, out.data(), &offset, &ldmatrix};
  kernels->at("misaligned")(buffers, 1, 32);
  // Lane 0's first register: matrix 0's row 0, elements 0 and 1.
  EXPECT_EQ(out[0], unsigned(in[0]) | unsigned(in[1]) << 16);
  offset = 8;
  EXPECT_DEATH(kernels->at("misaligned")(buffers, 1, 32),
               "thread 0: cp.async global \\(source\\) address .* is not "
               "16-byte aligned \\(a GPU faults: misaligned address\\)");
  ldmatrix = 1;
  EXPECT_DEATH(kernels->at("misaligned")(buffers, 1, 32),
               "ldmatrix row address .* is not 16-byte aligned");
}

// A thread that runs past its 256 KiB stack into the next one's is named
// (each stack has a canary below it, checked after every block); one that
// stays within it runs.
TEST_F(CudaEmulationDeviceTest, StackOverflowEndsWithAMessage) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::vector<int> out(64);
  int deep = 5, kib = 200;
  void *buffers[] = {&deep, &kib, out.data()};
  kernels->at("stack")(buffers, 2, 64);
  EXPECT_EQ(out[5], char((200 << 10) - 1));
  kib = 300;
  // Under AddressSanitizer (scripts/sanitize.sh builds the kernels with it
  // too) the first store into the neighbouring stack's frames is a report
  // before the canary is checked.
  const char *expected =
      KILN_TEST_HAS_ASAN ? "block 0: thread 5 overflowed its 256 KiB stack|"
                           "AddressSanitizer: stack-buffer-(underflow|overflow)"
                         : "block 0: thread 5 overflowed its 256 KiB stack";
  EXPECT_DEATH(kernels->at("stack")(buffers, 1, 64), expected);
}

// Every host-kernel library (its own copy of CudaEmulation.h) keeps a set
// of fiber stacks per launching thread. A set is one mapping (and its
// guard page), sized for the largest block: loading and running many
// libraries stays far from the kernel's limit on a process's mappings
// (vm.max_map_count, 65530), which a guard page per stack (2048 mappings
// a set) reached after some 30 libraries.
TEST(CudaEmulationStacks, ManyLibrariesTakeFewMappings) {
  auto mappings = [] {
    std::ifstream maps("/proc/self/maps");
    return std::count(std::istreambuf_iterator<char>(maps),
                      std::istreambuf_iterator<char>(), '\n');
  };
  const int libraries = 6;
  std::vector<std::map<std::string, HostKernel>> built;
  for (int i = 0; i < libraries; ++i) {
    std::string error;
    // A distinct source each, so each is its own library.
    built.push_back(buildHostKernels(std::string(kSource) + "\n// copy " +
                                         std::to_string(i) + "\n",
                                     {"exchange"}, "stacks" + std::to_string(i),
                                     error));
    ASSERT_TRUE(error.empty()) << error;
  }
  long before = mappings();
  std::vector<float> out(2 * 1024);
  int barrier = 1, step = 1;
  void *buffers[] = {out.data(), &barrier, &step};
  for (auto &kernels : built)
    kernels.at("exchange")(buffers, 2, 1024);
  long added = mappings() - before;
  EXPECT_LE(added, 4 * libraries) << added << " mappings for " << libraries
                                  << " libraries' stacks";
}

// Every 16-bit pattern to float, and floats around every f16 and bf16
// rounding boundary (the midpoints between neighbours and one float step
// either side) back, against runtime/Half.h.
TEST_F(CudaEmulationDeviceTest, SixteenBitConversionsMatchTheRuntime) {
  std::vector<uint16_t> halves(65536), bf16s(65536);
  std::vector<float> floats;
  for (uint32_t i = 0; i < 65536; ++i) {
    halves[i] = bf16s[i] = static_cast<uint16_t>(i);
    float h = kiln::runtime::f16ToFloat(uint16_t(i));
    float next = kiln::runtime::f16ToFloat(uint16_t(i + 1));
    if (std::isfinite(h) && std::isfinite(next) && (i & 0x7fff) < 0x7bff) {
      float mid = h + (next - h) / 2;
      floats.insert(floats.end(), {h, mid, std::nextafter(mid, h),
                                   std::nextafter(mid, next)});
    }
    float b = kiln::runtime::bf16ToFloat(uint16_t(i));
    float bnext = kiln::runtime::bf16ToFloat(uint16_t(i + 1));
    if (std::isfinite(b) && std::isfinite(bnext) && (i & 0x7fff) < 0x7f7f) {
      float mid = b + (bnext - b) / 2;
      floats.insert(floats.end(), {mid, std::nextafter(mid, b),
                                   std::nextafter(mid, bnext)});
    }
  }
  floats.insert(floats.end(), {INFINITY, -INFINITY, 65504.0f, 65520.0f, 1e30f,
                               -1e30f, std::nanf(""), 0.0f, -0.0f});
  halves.resize(floats.size());
  bf16s.resize(floats.size());
  unsigned count = static_cast<unsigned>(floats.size());
  std::vector<float> fromHalf(count), fromBf16(count);
  std::vector<uint16_t> toHalf(count), toBf16(count);
  void *buffers[] = {halves.data(),   bf16s.data(),  floats.data(),
                     fromHalf.data(), fromBf16.data(), toHalf.data(),
                     toBf16.data(),   &count};
  kernels->at("convert")(buffers, 4, 256);
  auto same = [](float a, float b) {
    uint32_t x, y;
    std::memcpy(&x, &a, 4);
    std::memcpy(&y, &b, 4);
    return x == y || (std::isnan(a) && std::isnan(b));
  };
  int bad = 0;
  for (uint32_t i = 0; i < 65536 && bad < 10; ++i) {
    if (!same(fromHalf[i], kiln::runtime::f16ToFloat(uint16_t(i))))
      ADD_FAILURE() << "half 0x" << std::hex << i << ": " << fromHalf[i], ++bad;
    if (!same(fromBf16[i], kiln::runtime::bf16ToFloat(uint16_t(i))))
      ADD_FAILURE() << "bf16 0x" << std::hex << i << ": " << fromBf16[i], ++bad;
  }
  for (unsigned i = 0; i < count && bad < 10; ++i) {
    float f = floats[i];
    uint16_t h = kiln::runtime::floatToF16(f), b = kiln::runtime::floatToBf16(f);
    bool nan = std::isnan(f);
    if (nan ? (toHalf[i] & 0x7fff) <= 0x7c00 : toHalf[i] != h)
      ADD_FAILURE() << "float " << f << " to half: 0x" << std::hex << toHalf[i]
                    << ", runtime 0x" << h,
          ++bad;
    if (nan ? (toBf16[i] & 0x7fff) <= 0x7f80 : toBf16[i] != b)
      ADD_FAILURE() << "float " << f << " to bf16: 0x" << std::hex << toBf16[i]
                    << ", runtime 0x" << b,
          ++bad;
  }
}

// ldmatrix's registers are the documented fragments, and mma.sync's
// product is A B + C, in f16 and bf16 (random values whose products are
// exact in f32; the sum's rounding is bounded by 2^-22 of the terms).
TEST_F(CudaEmulationDeviceTest, MatrixInstructionsFollowTheFragmentLayouts) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> value(-2.0f, 2.0f);
  for (bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "bf16" : "f16");
    std::vector<uint16_t> a(256), b(128);
    std::vector<float> c(128), d(128, NAN);
    std::vector<double> fa(256), fb(128);
    for (size_t i = 0; i < a.size(); ++i) {
      float v = value(rng);
      a[i] = bf16 ? kiln::runtime::floatToBf16(v) : kiln::runtime::floatToF16(v);
      fa[i] = bf16 ? kiln::runtime::bf16ToFloat(a[i]) : kiln::runtime::f16ToFloat(a[i]);
    }
    for (size_t i = 0; i < b.size(); ++i) {
      float v = value(rng);
      b[i] = bf16 ? kiln::runtime::floatToBf16(v) : kiln::runtime::floatToF16(v);
      fb[i] = bf16 ? kiln::runtime::bf16ToFloat(b[i]) : kiln::runtime::f16ToFloat(b[i]);
    }
    for (float &v : c)
      v = value(rng);
    std::vector<uint32_t> regs(32 * 12 + 32 * 2, 0);
    void *buffers[] = {a.data(), b.data(), c.data(), d.data(), regs.data()};
    kernels->at(bf16 ? "matrix_bf16" : "matrix_f16")(buffers, 1, 32);
    for (unsigned lane = 0; lane < 32; ++lane) {
      const uint32_t *r = &regs[lane * 12];
      for (int i = 0; i < 4; ++i)
        EXPECT_EQ(r[6 + i], r[i]) << "lane " << lane << ": ldmatrix A register " << i;
      for (int i = 0; i < 2; ++i) {
        EXPECT_EQ(r[10 + i], r[4 + i]) << "lane " << lane << ": ldmatrix.trans B register " << i;
        EXPECT_EQ(regs[32 * 12 + lane * 2 + i], r[4 + i])
            << "lane " << lane << ": ldmatrix B^T register " << i;
      }
    }
    for (int m = 0; m < 16; ++m)
      for (int n = 0; n < 8; ++n) {
        double want = c[m * 8 + n], magnitude = std::fabs(want);
        for (int k = 0; k < 16; ++k) {
          want += fa[m * 16 + k] * fb[k * 8 + n];
          magnitude += std::fabs(fa[m * 16 + k] * fb[k * 8 + n]);
        }
        EXPECT_NEAR(d[m * 8 + n], want, magnitude * 0x1p-22) << "D[" << m << "][" << n << "]";
      }
  }
}

// Built with AddressSanitizer (scripts/sanitize.sh builds the kernels with
// the test's sanitizers), an emulated kernel's read past its buffer is a
// report where it happens, on the fibers' stacks as anywhere.
TEST_F(CudaEmulationDeviceTest, ReadPastABufferIsAnAddressSanitizerReport) {
  if (!KILN_TEST_HAS_ASAN)
    GTEST_SKIP() << "needs the kernels built with AddressSanitizer "
                    "(scripts/sanitize.sh)";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::vector<float> in(100, 1.0f), out(100);
  int n = 100;
  void *buffers[] = {in.data(), out.data(), &n};
  EXPECT_DEATH(kernels->at("overread")(buffers, 2, 64),
               "AddressSanitizer: heap-buffer-overflow.*\n.*READ of size 4");
  // The same kernel within bounds (one element fewer) runs.
  n = 99;
  kernels->at("overread")(buffers, 2, 64);
  EXPECT_EQ(out[98], 1.0f);
}

#ifdef KILN_HOST_KERNEL_CACHE
// The host-kernel cache (HostKernels.h): one source is one library, under
// whatever name a test builds it and however many processes build it at
// once (ctest and scripts/sanitize.sh run suites side by side). Three
// processes build a source no other test has, together; then this one
// builds it under a fourth name. Each runs it; the cache gains exactly one
// library and keeps no partial copy.
TEST(HostKernelCache, OneSourceIsOneLibraryWhoeverBuildsIt) {
  namespace fs = std::filesystem;
  auto libraries = [] {
    std::set<std::string> names;
    std::error_code ec;
    for (const auto &entry : fs::directory_iterator(KILN_HOST_KERNEL_CACHE, ec))
      names.insert(entry.path().filename().string());
    return names;
  };
  // Unique to this run (the cache outlives the test), and kept in the
  // library, so that its file can be told from those of tests running
  // beside this one.
  std::string nonce =
      "kiln-cache-test-" + std::to_string(getpid()) + "-" +
      std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
  std::string source = "extern \"C\" const char twice_nonce[] = \"" + nonce +
                       "\";\n" + R"(
__global__ void twice(const float *in, float *out) {
  unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
  out[t] = 2.0f * in[t];
}
extern "C" void twice_host(void **buffers, unsigned grid, unsigned block) {
  kiln_emulate(grid, block, [&] { twice((const float *)buffers[0], (float *)buffers[1]); });
}
)";
  auto buildAndRun = [&](const std::string &name, std::string &error) {
    std::map<std::string, HostKernel> built =
        buildHostKernels(source, {"twice"}, name, error);
    if (!error.empty())
      return false;
    std::vector<float> in(64), out(64, 0.0f);
    for (int i = 0; i < 64; ++i)
      in[i] = float(i) - 20.5f;
    void *buffers[] = {in.data(), out.data()};
    built.at("twice")(buffers, 2, 32);
    for (int i = 0; i < 64; ++i)
      if (out[i] != 2.0f * in[i]) {
        error = "element " + std::to_string(i) + " is " + std::to_string(out[i]);
        return false;
      }
    return true;
  };

  std::set<std::string> before = libraries();
  std::vector<pid_t> children;
  for (int i = 0; i < 3; ++i) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0) << std::strerror(errno);
    if (pid == 0) {
      std::string error;
      bool ok = buildAndRun("together" + std::to_string(i), error);
      if (!ok)
        std::fprintf(stderr, "child %d: %s\n", i, error.c_str());
      _exit(ok ? 0 : 1);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "a building process failed (status " << status << ")";
  }
  std::string error;
  EXPECT_TRUE(buildAndRun("afterwards", error)) << error;

  // The files the cache gained that hold this source's library.
  std::vector<std::string> ours;
  for (const std::string &name : libraries()) {
    if (before.count(name))
      continue;
    std::ifstream file(std::string(KILN_HOST_KERNEL_CACHE) + "/" + name,
                       std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(file)),
                      std::istreambuf_iterator<char>());
    if (bytes.find(nonce) != std::string::npos)
      ours.push_back(name);
  }
  ASSERT_EQ(ours.size(), 1u) << ::testing::PrintToString(ours);
  EXPECT_EQ(fs::path(ours[0]).extension(), ".so") << ours[0];
}
#endif

} // namespace
