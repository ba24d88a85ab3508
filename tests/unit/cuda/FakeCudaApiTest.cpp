//===- FakeCudaApiTest.cpp - the fake CUDA table itself -------------------===//
//
// tests/unit/cuda/FakeCudaApi.h is the GPU every runtime test runs on, so
// its own rules are tested against their definitions: its streams order
// work as CUDA does (events, host waits, races named, work that runs only
// once waited for), its cuBLASLt rounds as cuBLASLt does, and a kernel whose
// arguments it knows cannot touch memory outside them unnoticed.
//
//===----------------------------------------------------------------------===//

#include "runtime/Half.h"
#include "runtime/cuda/CudaApi.h"
#include "tests/unit/cuda/AddressSanitizer.h"
#include "tests/unit/cuda/CudaRules.h"
#include "tests/unit/cuda/FakeCudaApi.h"
#include "tests/unit/cuda/PkgBuffers.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstring>

namespace {

using namespace kiln::runtime;
using namespace kiln::runtime::cuda;
using kiln::runtime::cuda::testing::CaptureRule;
using kiln::runtime::cuda::testing::captureRules;
using kiln::runtime::cuda::testing::checkCaptureRule;
using kiln::runtime::cuda::testing::FakeCudaApi;
using kiln::runtime::cuda::testing::LaunchShape;
using kiln::runtime::cuda::testing::refusedLaunchShapes;
using kiln::runtime::cuda::testing::HostKernel;
using kiln::runtime::cuda::testing::randomFloats;

// The fake's stream order itself: unordered accesses on two streams
// race when one writes, an event or a host synchronization orders them,
// and work runs only once the host waits for it.
TEST(FakeStreams, OrderAsCudaDoes) {
  FakeCudaApi api;
  void *dev = nullptr, *pinned = nullptr;
  ASSERT_TRUE(api.malloc(&dev, 1024).isOk());
  ASSERT_TRUE(api.mallocHost(&pinned, 1024).isOk());
  std::memset(pinned, 7, 1024);
  CudaStream a = nullptr, b = nullptr;
  CudaEvent e = nullptr;
  ASSERT_TRUE(api.streamCreate(&a).isOk());
  ASSERT_TRUE(api.streamCreate(&b).isOk());
  ASSERT_TRUE(api.eventCreate(&e).isOk());
  char *d = static_cast<char *>(dev);
  ASSERT_TRUE(api.memcpyAsync(d, pinned, 512, CopyKind::HostToDevice, a).isOk());
  // Reading what stream a writes, unordered: a race (the call fails).
  EXPECT_FALSE(
      api.memcpyAsync(d + 512, d + 256, 256, CopyKind::DeviceToDevice, b).isOk());
  ASSERT_EQ(api.races.size(), 1u);
  EXPECT_EQ(api.races[0],
            "cudaMemcpyAsync H2D destination on stream 1 and cudaMemcpyAsync "
            "D2D source on stream 2, bytes 256..512 of a 1024-byte "
            "allocation: nothing orders them");
  // Other bytes do not race.
  EXPECT_TRUE(api.memsetAsync(d + 512, 0, 512, b).isOk());
  // An event orders stream b after a's work so far.
  ASSERT_TRUE(api.eventRecord(e, a).isOk());
  ASSERT_TRUE(api.streamWaitEvent(b, e).isOk());
  EXPECT_TRUE(api.memcpyAsync(d + 256, d, 256, CopyKind::DeviceToDevice, b).isOk());
  // Two streams reading the same bytes do not race.
  EXPECT_TRUE(api.memcpyAsync(pinned, d, 16, CopyKind::DeviceToHost, a).isOk());
  EXPECT_EQ(api.races.size(), 1u);
  // Nothing has run yet: the host has not waited.
  EXPECT_NE(d[0], 7);
  // Waiting for b runs a's work up to the event first, then b's.
  ASSERT_TRUE(api.streamSynchronize(b).isOk());
  EXPECT_EQ(d[0], 7);
  EXPECT_EQ(d[300], 7);
  EXPECT_EQ(d[600], 0);
  // The host has waited for b: new work on a is ordered after b's.
  EXPECT_TRUE(api.memsetAsync(d + 512, 1, 512, a).isOk());
  // Without that wait, b's write would race a's.
  EXPECT_FALSE(api.memsetAsync(d + 512, 2, 16, b).isOk());
  ASSERT_EQ(api.races.size(), 2u);
  EXPECT_EQ(api.races[1].find("cudaMemsetAsync on stream 1 and cudaMemsetAsync "
                              "on stream 2, bytes 512..528"),
            0u)
      << api.races[1];
  ASSERT_TRUE(api.free(dev).isOk()); // waits for everything
  EXPECT_EQ(static_cast<char *>(pinned)[0], 7);
  ASSERT_TRUE(api.freeHost(pinned).isOk());
}

// Freeing as CUDA frees: only an allocation's start, once (a second
// cudaFree of a pointer is cudaErrorInvalidValue, where a host free would
// corrupt the heap); null is nothing to free. Freed memory is outside
// every allocation. cudaFree waits for all work first, so a new
// allocation, wherever it lands, may be written by any stream at once.
TEST(FakeMemory, FreesAsCudaDoes) {
  FakeCudaApi api;
  void *dev = nullptr;
  ASSERT_TRUE(api.malloc(&dev, 256).isOk());
  CudaStream a = nullptr, b = nullptr;
  ASSERT_TRUE(api.streamCreate(&a).isOk());
  ASSERT_TRUE(api.streamCreate(&b).isOk());
  ASSERT_TRUE(api.memsetAsync(dev, 1, 256, a).isOk());
  Status interior = api.free(static_cast<char *>(dev) + 16);
  ASSERT_FALSE(interior.isOk());
  EXPECT_NE(interior.message().find("cudaFree failed: cudaErrorInvalidValue"),
            std::string::npos)
      << interior.message();
  EXPECT_TRUE(api.free(nullptr).isOk());
  ASSERT_TRUE(api.free(dev).isOk());
  Status twice = api.free(dev);
  ASSERT_FALSE(twice.isOk());
  EXPECT_NE(twice.message().find("cudaErrorInvalidValue"), std::string::npos);
  // (Before any new allocation, which may land where |dev| was: freeing
  // that address again would then be right, as on a GPU.)
  Status pinnedTwice = api.freeHost(dev);
  EXPECT_FALSE(pinnedTwice.isOk());
  EXPECT_NE(pinnedTwice.message().find("cudaFreeHost failed"), std::string::npos);
  EXPECT_FALSE(api.memsetAsync(dev, 0, 1, b).isOk());
  ASSERT_EQ(api.outOfBounds.size(), 1u);
  EXPECT_EQ(api.outOfBounds[0], "cudaMemsetAsync: 1 bytes at an address "
                                "outside every allocation");
  void *again = nullptr;
  ASSERT_TRUE(api.malloc(&again, 256).isOk());
  EXPECT_TRUE(api.memsetAsync(again, 2, 256, b).isOk());
  EXPECT_TRUE(api.races.empty()) << api.races[0];
  ASSERT_TRUE(api.free(again).isOk());
}

// Capture's rules, as a GPU applies them to a thread-local capture
// (CudaRules.h; CudaGpuTest runs the same scenario on the real table):
// each forbidden call fails with CUDA's code and invalidates the capture,
// so later work on the stream fails and cudaStreamEndCapture returns no
// graph, saying (here) which call broke it; what the rules allow still
// records a graph that replays.
TEST(FakeStreams, CaptureRefusesWhatCudaRefuses) {
  for (const CaptureRule &rule : captureRules()) {
    SCOPED_TRACE(rule.forbidden);
    FakeCudaApi api;
    std::string ended = checkCaptureRule(api, rule);
    if (std::string(rule.forbidden) != "nothing")
      EXPECT_NE(ended.find(std::string("(") + rule.forbidden + ": " + rule.code + ")"),
                std::string::npos)
          << ended;
    EXPECT_TRUE(api.races.empty()) << api.races[0];
  }
}

// The fake's cuBLASLt as cuBLASLt defines it, on bf16: BGRADA writes, for
// each row r of D (row-major: each column n of the result), the sum over
// k of A(r, k), A being the column-major view of the rhs (lowerGemmToLt),
// accumulated in f32 and rounded once to bf16; a bias+ReLU result is the
// f32 product plus the bias, then ReLU, rounded once.
TEST(FakeCublasLt, BgradaAndEpiloguesRoundOnceFromF32) {
  GemmDesc desc;
  desc.dtype = PkgDType::BF16;
  desc.params.m = 6;
  desc.params.n = 5;
  desc.params.k = 9;
  desc.params.transposeLhs = true; // dW = X^T dY: lhs X [k, m], rhs dY [k, n]
  auto toBf16 = [](const std::vector<float> &v) {
    std::vector<uint16_t> out;
    for (float x : v)
      out.push_back(floatToBf16(x));
    return out;
  };
  std::vector<uint16_t> lhs = toBf16(randomFloats(9 * 6, 11));
  std::vector<uint16_t> rhs = toBf16(randomFloats(9 * 5, 12));
  std::vector<uint16_t> bias = toBf16(randomFloats(5, 13));
  LtGemm lt = lowerGemmToLt(desc.params);
  ASSERT_FALSE(lt.transA);
  ASSERT_EQ(lt.rows, 5u);

  desc.epilogue = GemmEpilogue::BiasGradient;
  std::vector<uint16_t> out(6 * 5), grad(5, 0xffff);
  kiln::runtime::cuda::testing::hostGemm(desc, lhs.data(), rhs.data(),
                                         out.data(), nullptr, grad.data());
  for (uint64_t r = 0; r < lt.rows; ++r) {
    float sum = 0;
    for (uint64_t l = 0; l < lt.inner; ++l)
      sum += bf16ToFloat(rhs[r + l * lt.lda]);
    EXPECT_EQ(grad[r], floatToBf16(sum)) << "bias gradient " << r;
  }

  desc.epilogue = GemmEpilogue::BiasRelu;
  kiln::runtime::cuda::testing::hostGemm(desc, lhs.data(), rhs.data(),
                                         out.data(), bias.data(), nullptr);
  int roundedTwiceDiffers = 0;
  for (int64_t i = 0; i < 6; ++i)
    for (int64_t j = 0; j < 5; ++j) {
      float acc = 0;
      for (int64_t l = 0; l < 9; ++l)
        acc += bf16ToFloat(lhs[l * 6 + i]) * bf16ToFloat(rhs[l * 5 + j]);
      float once = std::max(acc + bf16ToFloat(bias[j]), 0.0f);
      EXPECT_EQ(out[i * 5 + j], floatToBf16(once)) << i << ", " << j;
      // What the step's IR computes: the product rounded, then the sum.
      float twice = std::max(
          bf16ToFloat(floatToBf16(bf16ToFloat(floatToBf16(acc)) +
                                  bf16ToFloat(bias[j]))),
          0.0f);
      roundedTwiceDiffers += floatToBf16(twice) != floatToBf16(once);
    }
  // The data is such that the two roundings show (the test would not see
  // a fake that rounds the product first otherwise).
  EXPECT_GT(roundedTwiceDiffers, 0);
}

// A GEMM's pointers as aligned as its plan promised cuBLASLt
// (GemmDesc::alignmentBytes, the MIN_ALIGNMENT preferences its algorithms
// were chosen for): an operand 128 bytes past a 256-byte boundary fails a
// plan made for 256, and runs under one made for 128.
TEST(FakeCublasLt, PointersAsAlignedAsThePlanPromised) {
  FakeCudaApi api;
  void *dev = nullptr;
  ASSERT_TRUE(api.malloc(&dev, 4096).isOk());
  char *d = static_cast<char *>(dev);
  GemmDesc desc;
  desc.dtype = PkgDType::F32;
  desc.params.m = 4;
  desc.params.n = 4;
  desc.params.k = 4;
  for (uint32_t align : {256u, 128u}) {
    SCOPED_TRACE(align);
    desc.alignmentBytes = align;
    GemmPlan plan = nullptr;
    ASSERT_TRUE(api.gemmPlan(&plan, desc, 0, nullptr).isOk());
    Status s = api.gemmRun(plan, d, d + 128, d + 256, nullptr, nullptr,
                           nullptr, nullptr, nullptr, 0, nullptr);
    if (align == 256) {
      ASSERT_FALSE(s.isOk());
      EXPECT_EQ(s.message().find("cublasLtMatmul rhs: the pointer is 128 "
                                 "bytes past a 256-byte boundary, and the "
                                 "plan's algorithm was chosen for 256-byte "
                                 "alignment"),
                0u)
          << s.message();
    } else {
      EXPECT_TRUE(s.isOk()) << s.message();
    }
  }
}

// A GEMM given as much workspace as its plan allowed its algorithms
// (cuBLASLt's MAX_WORKSPACE_BYTES preference): with less, or none, the
// call fails as cuBLASLt fails an algorithm that needs more.
TEST(FakeCublasLt, WorkspaceAsLargeAsThePlanAllowed) {
  FakeCudaApi api;
  void *dev = nullptr, *workspace = nullptr;
  ASSERT_TRUE(api.malloc(&dev, 4096).isOk());
  ASSERT_TRUE(api.malloc(&workspace, 1024).isOk());
  char *d = static_cast<char *>(dev);
  GemmDesc desc;
  desc.dtype = PkgDType::F32;
  desc.params.m = desc.params.n = desc.params.k = 4;
  GemmPlan plan = nullptr;
  ASSERT_TRUE(api.gemmPlan(&plan, desc, 1024, nullptr).isOk());
  auto run = [&](void *ws, size_t bytes) {
    return api.gemmRun(plan, d, d + 256, d + 512, nullptr, nullptr, nullptr,
                       nullptr, ws, bytes, nullptr);
  };
  EXPECT_TRUE(run(workspace, 1024).isOk());
  Status less = run(workspace, 512);
  EXPECT_EQ(less.message(), "cublasLtMatmul failed: CUBLAS_STATUS_INVALID_VALUE "
                            "(7): 512 bytes of workspace, and the plan's "
                            "algorithms were chosen for 1024 (fake)");
  EXPECT_FALSE(run(nullptr, 1024).isOk());
  // A plan made for no workspace runs without one.
  ASSERT_TRUE(api.gemmPlan(&plan, desc, 0, nullptr).isOk());
  EXPECT_TRUE(run(nullptr, 0).isOk());
}

// Host kernels for the isolation tests: out[i] = in[i] + 1 over
// isolationCount elements, and the same with an extra store one element
// past |out|, or before it, or into |in|.
int isolationCount = 0;
void addOne(void **b, unsigned, unsigned) {
  for (int i = 0; i < isolationCount; ++i)
    static_cast<float *>(b[1])[i] = static_cast<const float *>(b[0])[i] + 1;
}
void addOnePastTheEnd(void **b, unsigned g, unsigned t) {
  addOne(b, g, t);
  static_cast<float *>(b[1])[isolationCount] = -1;
}
void addOneBeforeTheStart(void **b, unsigned g, unsigned t) {
  addOne(b, g, t);
  static_cast<float *>(b[1])[-1] = -1;
}
void addOneIntoTheOperand(void **b, unsigned g, unsigned t) {
  addOne(b, g, t);
  static_cast<float *>(b[0])[0] = -1;
}
// In place: b[0] and b[1] are one buffer.
void incrementInPlace(void **b, unsigned, unsigned) {
  for (int i = 0; i < isolationCount; ++i)
    static_cast<float *>(b[1])[i] = static_cast<const float *>(b[0])[i] + 1;
}
// Reads one element past |in| (into |out|, which the arena puts next).
[[maybe_unused]] void addOneReadingPastTheEnd(void **b, unsigned g, unsigned t) {
  addOne(b, g, t);
  static_cast<float *>(b[1])[0] = static_cast<const float *>(b[0])[isolationCount];
}

// A package of one kernel thunk, |entry|(in, out), over an arena holding
// in (n floats) then out (n floats).
LoadedPackage isolationPackage(const std::string &entry, int n) {
  LoadedPackage p;
  p.target.kind = TargetKind::Cuda;
  p.arenaSize = 2 * n * 4;
  PackageBuffer in, out;
  in.name = "in";
  in.offset = 0;
  in.size = n * 4;
  out.name = "out";
  out.offset = n * 4;
  out.size = n * 4;
  p.buffers = {in, out};
  PackageKernel k;
  k.entryPoint = entry;
  p.kernels = {k};
  PackageThunk t;
  t.kind = ThunkKind::KernelLaunch;
  t.kernel = 0;
  t.operands = {0};
  t.results = {1};
  p.thunks = {t};
  return p;
}

// Launches host kernel |entry| (in api.hostKernels) on the default stream,
// one block of 32 threads, with parameters |values|.
Status launch(FakeCudaApi &api, const std::string &entry, std::vector<void *> values) {
  CudaModule module = nullptr;
  CudaFunction function = nullptr;
  const char image[] = "host kernels";
  if (Status s = api.moduleLoadData(&module, image, sizeof(image)); !s.isOk())
    return s;
  if (Status s = api.moduleGetFunction(&function, module, entry.c_str()); !s.isOk())
    return s;
  std::vector<void *> params;
  for (void *&v : values)
    params.push_back(&v);
  return api.launchKernel(function, {1, 1, 1}, {32, 1, 1}, 0, nullptr,
                          params.data(), params.size());
}

// Launch shapes within CUDA's limits: 1024 threads a block (64 in z),
// 2^31 - 1 blocks in x, 65535 in y and z, none 0. A GPU refuses the
// rest; so does the fake, naming the kernel and the shape.
TEST(FakeKernels, LaunchShapesWithinCudasLimits) {
  std::vector<std::pair<LaunchShape, bool>> cases = {
      {{{0x7fffffffu, 65535, 65535}, {1024, 1, 1}}, true},
      {{{1, 1, 1}, {16, 1, 64}}, true}};
  for (const LaunchShape &refused : refusedLaunchShapes())
    cases.push_back({refused, false});
  for (const auto &[shape, ok] : cases) {
    SCOPED_TRACE(shape.text());
    FakeCudaApi api; // no host kernel: a launch only takes its place
    CudaModule module = nullptr;
    CudaFunction function = nullptr;
    const char image[] = "host kernels";
    ASSERT_TRUE(api.moduleLoadData(&module, image, sizeof(image)).isOk());
    ASSERT_TRUE(api.moduleGetFunction(&function, module, "k").isOk());
    Status s = api.launchKernel(function, shape.grid, shape.block, 0, nullptr,
                                nullptr, 0);
    EXPECT_EQ(s.isOk(), ok) << s.message();
    if (!ok)
      EXPECT_EQ(s.message(), "cuLaunchKernel failed: CUDA_ERROR_INVALID_VALUE "
                             "(1): invalid argument (k: " + shape.text() +
                             " outside CUDA's limits)");
  }
}

// Launches |entry| on the fake, its arguments learned from
// isolationPackage: |in| and |out| adjacent in one allocation, as in an
// arena. Returns the launch's status, then the synchronization's.
std::pair<Status, Status> launchIsolated(FakeCudaApi &api, const std::string &entry,
                                         char *arena, int n, bool inPlace = false) {
  api.learnPackage(isolationPackage(entry, n));
  Status launched = launch(api, entry, {arena, inPlace ? arena : arena + n * 4});
  return {launched, api.streamSynchronize(nullptr)};
}

// A kernel whose arguments the fake knows runs on copies of them: what it
// writes inside its results comes back; a store past a result's end or
// before its start, or into an operand, is a fault that names the kernel
// and the argument, and the synchronization and every later call fail
// as after CUDA's illegal address - even where, in the arena, the stray
// store lands in another buffer and no GPU would fault.
TEST(FakeKernelIsolation, StrayStoresAreFaults) {
  constexpr int n = 8;
  isolationCount = n;
  auto fill = [](char *arena) {
    for (int i = 0; i < 2 * n; ++i)
      reinterpret_cast<float *>(arena)[i] = float(100 + i);
  };
  {
    FakeCudaApi api;
    api.hostKernels["add_one"] = addOne;
    void *arena = nullptr;
    ASSERT_TRUE(api.malloc(&arena, 2 * n * 4).isOk());
    fill(static_cast<char *>(arena));
    auto [launched, synced] = launchIsolated(api, "add_one", static_cast<char *>(arena), n);
    EXPECT_TRUE(launched.isOk()) << launched.message();
    EXPECT_TRUE(synced.isOk()) << synced.message();
    EXPECT_TRUE(api.kernelFaults.empty());
    const float *f = static_cast<const float *>(arena);
    for (int i = 0; i < n; ++i) {
      EXPECT_EQ(f[i], float(100 + i));     // the operand, untouched
      EXPECT_EQ(f[n + i], float(101 + i)); // the result, copied back
    }
    // Its whole extents take part in the race check: a copy on another
    // stream into the operand's last element races the kernel's read.
    CudaStream other = nullptr;
    ASSERT_TRUE(api.streamCreate(&other).isOk());
    ASSERT_TRUE(launch(api, "add_one", {arena, static_cast<char *>(arena) + n * 4}).isOk());
    EXPECT_FALSE(api.memsetAsync(static_cast<char *>(arena) + (n - 1) * 4, 0, 4,
                                 other)
                     .isOk());
    ASSERT_EQ(api.races.size(), 1u);
    EXPECT_NE(api.races[0].find("cuLaunchKernel add_one argument 0"),
              std::string::npos)
        << api.races[0];
    ASSERT_TRUE(api.free(arena).isOk());
  }
  struct Case {
    const char *entry;
    HostKernel fn;
    bool inPlace;
    const char *fault; // empty: none
  };
  const Case cases[] = {
      {"past_end", addOnePastTheEnd, false,
       "past_end wrote 4 byte(s) after argument 1 (32 bytes)"},
      {"before_start", addOneBeforeTheStart, false,
       "before_start wrote 4 byte(s) before argument 1 (32 bytes)"},
      {"into_operand", addOneIntoTheOperand, false,
       "into_operand wrote argument 0 (32 bytes), which it only reads"},
      {"in_place", incrementInPlace, true, ""},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.entry);
#if KILN_TEST_HAS_ASAN
    // Under AddressSanitizer the copies have no guard bytes: a stray store
    // is its report (FakeKernelIsolation.AStrayReadIsAnAddressSanitizerReport).
    if (*c.fault)
      continue;
#endif
    FakeCudaApi api;
    api.hostKernels[c.entry] = c.fn;
    void *arena = nullptr;
    ASSERT_TRUE(api.malloc(&arena, 2 * n * 4).isOk());
    fill(static_cast<char *>(arena));
    auto [launched, synced] =
        launchIsolated(api, c.entry, static_cast<char *>(arena), n, c.inPlace);
    EXPECT_TRUE(launched.isOk()) << launched.message(); // it ran at the sync
    const float *f = static_cast<const float *>(arena);
    if (!*c.fault) {
      EXPECT_TRUE(synced.isOk()) << synced.message();
      EXPECT_TRUE(api.kernelFaults.empty());
      for (int i = 0; i < n; ++i)
        EXPECT_EQ(f[i], float(101 + i));
      EXPECT_EQ(f[n], float(100 + n)); // the next buffer, untouched
    } else {
      ASSERT_EQ(api.kernelFaults.size(), 1u);
      EXPECT_EQ(api.kernelFaults[0], c.fault);
      EXPECT_FALSE(synced.isOk());
      EXPECT_NE(synced.message().find("cudaErrorIllegalAddress (700)"),
                std::string::npos)
          << synced.message();
      EXPECT_NE(synced.message().find(c.fault), std::string::npos);
      // Sticky: every later call fails too.
      void *more = nullptr;
      EXPECT_FALSE(api.malloc(&more, 16).isOk());
      // The stray stores never reached the arena: the operand is as it
      // was (before_start's store fell on its last element, into_operand's
      // on its first), the result as the kernel computed it.
      for (int i = 0; i < n; ++i) {
        EXPECT_EQ(f[i], float(100 + i));
        EXPECT_EQ(f[n + i], float(101 + i));
      }
    }
    api.free(arena);
  }
}

// A training step and its eval package both have a kiln_fusion0, each
// with its own buffers: a kernel loaded from one package's code is held to
// that package's extents, not to the larger of the two. Here package A's
// add_one writes 8 floats, package B's 16; A's kernel writing 16 is a
// fault, though B's add_one may. The code arrives as the runtime finds it:
// compiled by NVRTC from the package's source, or ahead of time as a cubin
// (two cubins alike up to their ELF header's first NUL, as real ones are)
// or as PTX.
void holdsToOwnExtents(const std::string &code) {
  isolationCount = 16;
  FakeCudaApi api;
  api.hostKernels["add_one"] = addOne;
  LoadedPackage a = isolationPackage("add_one", 8),
                b = isolationPackage("add_one", 16);
  for (auto [p, tag] : {std::pair{&a, 'A'}, std::pair{&b, 'B'}}) {
    PackageKernel &k = p->kernels[0];
    if (code == "source") {
      k.source = "extern \"C\" __global__ void add_one(const float *in, "
                 "float *out) {} // " +
                 std::string(1, tag);
    } else if (code == "cubin") {
      const char header[] = "\x7f"
                            "ELF\x02\x01\x01\0\0 add_one sm_90 ";
      std::string elf(header, sizeof header - 1);
      elf += tag;
      k.cubins.push_back({90, std::vector<uint8_t>(elf.begin(), elf.end())});
    } else {
      k.ptx = ".version 9.0\n.target sm_90\n// add_one " + std::string(1, tag);
    }
  }
  // Loads add_one as CudaExecutable does after the package is learned.
  auto load = [&](const PackageKernel &k, CudaFunction &function) {
    std::vector<uint8_t> image;
    std::string log;
    if (!k.source.empty())
      ASSERT_TRUE(api.nvrtcCompile(k.source, "add_one", 90, image, log).isOk());
    else if (!k.cubins.empty())
      image = k.cubins[0].image;
    else
      image.assign(k.ptx.c_str(), k.ptx.c_str() + k.ptx.size() + 1);
    CudaModule module = nullptr;
    ASSERT_TRUE(api.moduleLoadData(&module, image.data(), image.size()).isOk());
    ASSERT_TRUE(api.moduleGetFunction(&function, module, "add_one").isOk());
  };
  CudaFunction fa = nullptr, fb = nullptr;
  api.learnPackage(a);
  ASSERT_NO_FATAL_FAILURE(load(a.kernels[0], fa));
  api.learnPackage(b);
  ASSERT_NO_FATAL_FAILURE(load(b.kernels[0], fb));
  // Both arenas 128 bytes: A's out (bytes 32..64) has room for 16
  // floats in the allocation, so only A's own extents can tell.
  void *arenaA = nullptr, *arenaB = nullptr;
  ASSERT_TRUE(api.malloc(&arenaA, 128).isOk());
  ASSERT_TRUE(api.malloc(&arenaB, 128).isOk());
  auto run = [&](CudaFunction f, void *arena, int n) {
    std::vector<void *> values = {arena, static_cast<char *>(arena) + n * 4};
    std::vector<void *> params = {&values[0], &values[1]};
    Status s = api.launchKernel(f, {1, 1, 1}, {32, 1, 1}, 0, nullptr,
                                params.data(), params.size());
    return s.isOk() ? api.streamSynchronize(nullptr) : s;
  };
  Status sb = run(fb, arenaB, 16);
  EXPECT_TRUE(sb.isOk()) << sb.message();
  EXPECT_TRUE(api.kernelFaults.empty());
#if !KILN_TEST_HAS_ASAN
  // (Under AddressSanitizer the copies have no guard bytes, and the
  // store past A's out is ASan's report, as
  // AStrayReadIsAnAddressSanitizerReport shows for another kernel.)
  Status sa = run(fa, arenaA, 8);
  EXPECT_FALSE(sa.isOk());
  ASSERT_EQ(api.kernelFaults.size(), 1u);
  EXPECT_EQ(api.kernelFaults[0],
            "add_one wrote 32 byte(s) after argument 1 (32 bytes)");
#endif
  // By name alone, add_one's merged extents are B's.
  ASSERT_EQ(api.kernelArgs["add_one"].size(), 2u);
  EXPECT_EQ(api.kernelArgs["add_one"][1].bytes, 64u);
}

TEST(FakeKernelIsolation, EachPackageHoldsItsKernelsToItsOwnExtents) {
  for (const char *code : {"source", "cubin", "ptx"}) {
    SCOPED_TRACE(code);
    holdsToOwnExtents(code);
  }
}

// A kernel of the runtime's own (a library call's: pointers and integers
// in an order of the runtime's) gets its extents from the learned
// package's buffers: a pointer into a buffer may touch up to its end.
// Here the parameters are (pointer to element 4 of in, the arena's first
// buffer; a count as an integer): writeCount writes count floats there, and a
// fifth would land on out's first element, where no GPU would fault.
void writeCount(void **b, unsigned, unsigned) {
  auto count = reinterpret_cast<uintptr_t>(b[1]);
  for (uintptr_t i = 0; i < count; ++i)
    static_cast<float *>(b[0])[i] = -2;
}

TEST(FakeKernelIsolation, RuntimeKernelsStayInTheBuffersTheyPointInto) {
  constexpr int n = 8;
  for (uintptr_t count : {4, 5}) {
    SCOPED_TRACE(count);
#if KILN_TEST_HAS_ASAN
    if (count == 5)
      continue; // a report, not a fault (AStrayReadIsAnAddressSanitizerReport)
#endif
    FakeCudaApi api;
    api.hostKernels["write_count"] = writeCount;
    api.learnPackage(isolationPackage("some_fusion", n));
    void *arena = nullptr;
    ASSERT_TRUE(api.malloc(&arena, 2 * n * 4).isOk());
    std::fill_n(static_cast<float *>(arena), 2 * n, 1.0f);
    ASSERT_TRUE(launch(api, "write_count",
                       {static_cast<float *>(arena) + 4, reinterpret_cast<void *>(count)})
                    .isOk());
    Status synced = api.streamSynchronize(nullptr);
    const float *f = static_cast<const float *>(arena);
    if (count == 4) {
      EXPECT_TRUE(synced.isOk()) << synced.message();
      for (int i = 0; i < 2 * n; ++i)
        EXPECT_EQ(f[i], i >= 4 && i < n ? -2.0f : 1.0f) << i;
    } else {
      ASSERT_EQ(api.kernelFaults.size(), 1u);
      EXPECT_EQ(api.kernelFaults[0],
                "write_count wrote 4 byte(s) after argument 0 (16 bytes)");
      EXPECT_FALSE(synced.isOk());
      EXPECT_EQ(f[n], 1.0f); // out, untouched
    }
    api.free(arena);
  }
}

#if KILN_TEST_HAS_ASAN
// Under AddressSanitizer, each copy is an allocation of exactly its bytes:
// a read one element past an operand is reported where it happens, though
// in the arena it would read the next buffer.
TEST(FakeKernelIsolation, AStrayReadIsAnAddressSanitizerReport) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  constexpr int n = 8;
  isolationCount = n;
  const std::pair<const char *, HostKernel> kernels[] = {
      {"read_past_end", addOneReadingPastTheEnd}, {"past_end", addOnePastTheEnd}};
  for (const auto &[entry, fn] : kernels) {
    SCOPED_TRACE(entry);
    FakeCudaApi api;
    api.hostKernels[entry] = fn;
    void *arena = nullptr;
    ASSERT_TRUE(api.malloc(&arena, 2 * n * 4).isOk());
    EXPECT_DEATH(launchIsolated(api, entry, static_cast<char *>(arena), n),
                 "AddressSanitizer: heap-buffer-overflow");
    api.free(arena);
  }
}
#endif

} // namespace
