//===- ExecutableTest.cpp - runtime/cpu/Executable on hand-built packages -===//
//
// Packages built as LoadedPackage structs: a GEMM library call, a kernel
// launch (a C++ function standing in for a compiled kernel), a copy and the
// updates copy after the step, checked against the same arithmetic done
// directly; initialize() against runtime/Initializers.h with the reference
// interpreter's rounding (ir/HostTensor.h's roundTo) for f16 and bf16; the
// part count of large kernels; and create()'s refusals, one per message.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Executable.h"

#include "ir/HostTensor.h"
#include "runtime/Initializers.h"
#include "runtime/Units.h"
#include "runtime/cpu/Blas.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <map>
#include <random>

namespace kiln::runtime::cpu {
namespace {

using ::testing::HasSubstr;

// A loader that hands out C++ functions by kernel name, or an error.
class MapLoader : public KernelLoader {
public:
  std::map<std::string, KernelFn> functions;
  int loads = 0;
  std::vector<std::string> prefetched; // the kernels prefetch was told of
  void prefetch(const std::vector<const PackageKernel *> &kernels) override {
    for (const PackageKernel *k : kernels)
      prefetched.push_back(k->name);
  }
  StatusOr<KernelFn> load(const PackageKernel &kernel, size_t index) override {
    ++loads;
    auto it = functions.find(kernel.name);
    if (it == functions.end())
      return Status::error("kernel " + std::to_string(index) + " (\"" +
                           kernel.name + "\"): no such test function");
    return it->second;
  }
};

// out[i] = a[i] + b[i] over kAddElements elements, this part's share.
constexpr int64_t kAddElements = 8;
void addKernel(void **buffers, int64_t part, int64_t parts) {
  auto *a = static_cast<const float *>(buffers[0]);
  auto *b = static_cast<const float *>(buffers[1]);
  auto *out = static_cast<float *>(buffers[2]);
  for (int64_t i = kAddElements * part / parts;
       i < kAddElements * (part + 1) / parts; ++i)
    out[i] = a[i] + b[i];
}

// Adds buffer 0's values to themselves plus one (a big elementwise kernel)
// and records the part counts it was called with.
constexpr int64_t kBigElements = 1 << 18;
std::atomic<int64_t> bigParts{0};
std::atomic<int64_t> bigCalls{0};
void bigKernel(void **buffers, int64_t part, int64_t parts) {
  bigParts.store(parts);
  bigCalls.fetch_add(1);
  auto *in = static_cast<const float *>(buffers[0]);
  auto *out = static_cast<float *>(buffers[1]);
  for (int64_t i = kBigElements * part / parts;
       i < kBigElements * (part + 1) / parts; ++i)
    out[i] = 2 * in[i] + 1;
}

// Appends a buffer of |dtype| and |shape| at the arena's end (64-aligned).
uint32_t addBuffer(LoadedPackage &p, const std::string &name, PkgDType dtype,
                   std::vector<int64_t> shape, PkgRole role = PkgRole::None) {
  PackageBuffer b;
  b.name = name;
  b.dtype = dtype;
  b.shape = shape;
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  b.size = n * pkgBytesPerElement(dtype);
  b.offset = (p.arenaSize + 63) / 64 * 64;
  b.role = role;
  p.arenaSize = b.offset + b.size;
  p.buffers.push_back(b);
  return p.buffers.size() - 1;
}

// Makes buffer |id| signature input |name| (returns its index).
int addInput(LoadedPackage &p, uint32_t id, const std::string &name) {
  SignatureEntry e;
  e.name = name;
  e.role = p.buffers[id].role;
  e.dtype = p.buffers[id].dtype;
  e.shape = p.buffers[id].shape;
  e.buffer = id;
  p.inputs.push_back(e);
  p.buffers[id].aliases = p.inputs.size() - 1;
  return p.inputs.size() - 1;
}

int addOutput(LoadedPackage &p, uint32_t id, const std::string &name,
              int updates = -1) {
  SignatureEntry e;
  e.name = name;
  e.role = p.buffers[id].role;
  e.dtype = p.buffers[id].dtype;
  e.shape = p.buffers[id].shape;
  e.buffer = id;
  p.outputs.push_back(e);
  p.buffers[id].updates = updates;
  return p.outputs.size() - 1;
}

// Appends y = x . w ([4, 3] x [3, 2], a GEMM) and out = y + other (the
// package's kernel 0, "add") to |p|'s thunks.
void appendGemmThenAdd(LoadedPackage &p, uint32_t x, uint32_t w, uint32_t y,
                       uint32_t other, uint32_t out) {
  PackageThunk gemm;
  gemm.kind = ThunkKind::LibraryCall;
  gemm.library = LibraryKind::Gemm;
  gemm.hasGemm = true;
  gemm.gemm.m = 4, gemm.gemm.n = 2, gemm.gemm.k = 3;
  gemm.operands = {x, w};
  gemm.results = {y};
  p.thunks.push_back(gemm);
  PackageKernel add;
  add.kind = KernelKind::LlvmBitcode;
  add.name = "add";
  add.entryPoint = "kiln_kernel";
  p.kernels.push_back(add);
  PackageThunk launch;
  launch.kind = ThunkKind::KernelLaunch;
  launch.kernel = 0;
  launch.operands = {y, other};
  launch.results = {out};
  p.thunks.push_back(launch);
}

// The step: y = x . w (GEMM); s' = y + s (kernel "add"); out = copy of s'.
// s' updates input s, so s accumulates x . w over steps.
LoadedPackage gemmAddCopyPackage() {
  LoadedPackage p;
  uint32_t x = addBuffer(p, "x", PkgDType::F32, {4, 3}, PkgRole::Input);
  uint32_t w = addBuffer(p, "w", PkgDType::F32, {3, 2}, PkgRole::Parameter);
  uint32_t s = addBuffer(p, "s", PkgDType::F32, {4, 2}, PkgRole::OptimizerState);
  uint32_t y = addBuffer(p, "y", PkgDType::F32, {4, 2});
  uint32_t s2 = addBuffer(p, "s_new", PkgDType::F32, {4, 2}, PkgRole::Output);
  uint32_t out = addBuffer(p, "out", PkgDType::F32, {4, 2}, PkgRole::Output);
  addInput(p, x, "x");
  addInput(p, w, "w");
  addInput(p, s, "s");
  ParameterInit init;
  init.buffer = w;
  init.kind = PkgInitKind::GlorotUniform;
  init.seed = 11;
  p.parameterInits.push_back(init);

  appendGemmThenAdd(p, x, w, y, s, s2);

  PackageThunk copy;
  copy.kind = ThunkKind::Copy;
  copy.operands = {s2};
  copy.results = {out};
  p.thunks.push_back(copy);

  addOutput(p, s2, "s_new", /*updates=*/2);
  addOutput(p, out, "out");
  return p;
}

std::unique_ptr<Executable> mustCreate(LoadedPackage p, KernelLoader &loader,
                                       int threads = 2) {
  ExecutableOptions options;
  options.threads = threads;
  auto exe = Executable::create(std::move(p), loader, options);
  EXPECT_TRUE(exe.isOk()) << exe.status().message();
  return exe.isOk() ? std::move(exe.value()) : nullptr;
}

std::string createError(LoadedPackage p, KernelLoader &loader) {
  auto exe = Executable::create(std::move(p), loader);
  return exe.isOk() ? "(created)" : exe.status().message();
}

TEST(Executable, GemmKernelCopyAndUpdates) {
  MapLoader loader;
  loader.functions["add"] = addKernel;
  auto exe = mustCreate(gemmAddCopyPackage(), loader);
  ASSERT_TRUE(exe);
  EXPECT_EQ(exe->numInputs(), 3u);
  EXPECT_EQ(exe->numOutputs(), 2u);
  EXPECT_EQ(exe->findInput("w"), 1);
  EXPECT_EQ(exe->findInput("nope"), -1);
  EXPECT_EQ(exe->findOutput("out"), 1);
  EXPECT_EQ(exe->findOutput("x"), -1);
  EXPECT_EQ(exe->input(0), exe->buffer(0));
  EXPECT_EQ(exe->input(3), nullptr);
  EXPECT_EQ(exe->buffer(99), nullptr);
  ASSERT_TRUE(exe->initialize().isOk());

  std::mt19937_64 rng(5);
  std::uniform_real_distribution<float> dist(-1, 1);
  auto *x = static_cast<float *>(exe->input(0));
  for (int i = 0; i < 12; ++i)
    x[i] = dist(rng);
  const auto *w = static_cast<const float *>(exe->input(1));
  const auto *s = static_cast<const float *>(exe->input(2));
  for (int i = 0; i < 8; ++i)
    ASSERT_EQ(s[i], 0.0f) << "state starts at zero";

  std::vector<double> expected(8, 0.0);
  for (int step = 0; step < 3; ++step) {
    // The state after this step: s + x . w, in float as the step computes.
    std::vector<float> want(8);
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 2; ++j) {
        double dot = 0;
        for (int k = 0; k < 3; ++k)
          dot += double(x[i * 3 + k]) * w[k * 2 + j];
        want[i * 2 + j] = float(s[i * 2 + j] + dot);
      }
    ASSERT_TRUE(exe->run().isOk());
    const auto *out = static_cast<const float *>(exe->output(1));
    const auto *sNew = static_cast<const float *>(exe->output(0));
    for (int i = 0; i < 8; ++i) {
      EXPECT_NEAR(out[i], want[i], 1e-5 * (1 + std::fabs(want[i])))
          << "step " << step << " element " << i;
      EXPECT_EQ(sNew[i], out[i]);
      EXPECT_EQ(s[i], out[i]) << "the updates copy into input 2";
    }
  }
}

// Kernels whose code is the same (the compiler gives a repeated fusion its
// first kernel's bitcode) are loaded once and share the entry point; a
// kernel with other code is loaded on its own. The step: s' = y + s
// ("add"), t = s' + y ("add_again", add's code), u = t + s' ("twice",
// other code: 2a + b).
void twiceKernel(void **buffers, int64_t part, int64_t parts) {
  auto *a = static_cast<const float *>(buffers[0]);
  auto *b = static_cast<const float *>(buffers[1]);
  auto *out = static_cast<float *>(buffers[2]);
  for (int64_t i = kAddElements * part / parts;
       i < kAddElements * (part + 1) / parts; ++i)
    out[i] = 2 * a[i] + b[i];
}

TEST(Executable, KernelsWithTheSameCodeLoadOnce) {
  LoadedPackage p = gemmAddCopyPackage();
  const std::vector<uint8_t> addCode = {'B', 'C', 0xc0, 0xde, 1};
  p.kernels[0].object = addCode;
  uint32_t y = p.thunks[0].results[0], s2 = p.thunks[1].results[0];
  uint32_t t = addBuffer(p, "t", PkgDType::F32, {4, 2}, PkgRole::Output);
  uint32_t u = addBuffer(p, "u", PkgDType::F32, {4, 2}, PkgRole::Output);
  PackageKernel again = p.kernels[0];
  again.name = "add_again";
  PackageKernel twice = p.kernels[0];
  twice.name = "twice";
  twice.object.back() = 2;
  p.kernels.push_back(again);
  p.kernels.push_back(twice);
  PackageThunk launch = p.thunks[1];
  launch.kernel = 1;
  launch.operands = {s2, y};
  launch.results = {t};
  p.thunks.push_back(launch);
  launch.kernel = 2;
  launch.operands = {t, s2};
  launch.results = {u};
  p.thunks.push_back(launch);
  int tOut = addOutput(p, t, "t"), uOut = addOutput(p, u, "u");

  MapLoader loader; // knows no "add_again": it must never be asked for it
  loader.functions["add"] = addKernel;
  loader.functions["twice"] = twiceKernel;
  auto exe = mustCreate(p, loader);
  ASSERT_TRUE(exe);
  EXPECT_EQ(loader.loads, 2);
  // Told of each code once, before the loads.
  EXPECT_EQ(loader.prefetched, (std::vector<std::string>{"add", "twice"}));
  ASSERT_TRUE(exe->initialize().isOk());
  auto *x = static_cast<float *>(exe->input(0));
  for (int i = 0; i < 12; ++i)
    x[i] = 0.25f * float(i) - 1.0f;
  ASSERT_TRUE(exe->run().isOk());
  const auto *w = static_cast<const float *>(exe->input(1));
  const auto *tv = static_cast<const float *>(exe->output(tOut));
  const auto *uv = static_cast<const float *>(exe->output(uOut));
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 2; ++j) {
      double dot = 0;
      for (int k = 0; k < 3; ++k)
        dot += double(x[i * 3 + k]) * w[k * 2 + j];
      // s starts at zero: s' = y, t = 2y, u = 2t + s' = 5y.
      EXPECT_NEAR(tv[i * 2 + j], 2 * dot, 1e-5 * (1 + std::fabs(dot)));
      EXPECT_NEAR(uv[i * 2 + j], 5 * dot, 1e-5 * (1 + std::fabs(dot)));
    }
}

// Large GEMMs split into row or column blocks on the pool give the same
// result as a direct sum, for every transpose combination, both threading
// modes and several thread counts; beta accumulates into the result.
TEST(Executable, SplitGemmsMatchADirectSum) {
  struct Shape {
    int64_t m, n, k;
    bool ta, tb;
    double alpha, beta;
  };
  for (Shape sh : {Shape{200, 96, 64, false, false, 1, 0},
                   Shape{40, 300, 50, true, false, 1, 0},
                   Shape{130, 70, 33, false, true, 0.5, 0},
                   Shape{64, 333, 128, true, true, 1, 1},
                   Shape{3, 5, 7, false, false, 1, 0}}) {
    for (GemmThreading mode : {GemmThreading::Pool, GemmThreading::Blas}) {
      for (int threads : {1, 2, 3}) {
        LoadedPackage p;
        uint32_t a = addBuffer(p, "a", PkgDType::F32, {sh.m * sh.k}, PkgRole::Input);
        uint32_t b = addBuffer(p, "b", PkgDType::F32, {sh.k * sh.n}, PkgRole::Input);
        uint32_t c = addBuffer(p, "c", PkgDType::F32, {sh.m * sh.n}, PkgRole::Input);
        addInput(p, a, "a");
        addInput(p, b, "b");
        addInput(p, c, "c");
        addOutput(p, c, "c");
        PackageThunk t;
        t.kind = ThunkKind::LibraryCall;
        t.library = LibraryKind::Gemm;
        t.hasGemm = true;
        t.gemm.m = sh.m, t.gemm.n = sh.n, t.gemm.k = sh.k;
        t.gemm.transposeLhs = sh.ta, t.gemm.transposeRhs = sh.tb;
        t.gemm.alpha = sh.alpha, t.gemm.beta = sh.beta;
        t.operands = {a, b};
        t.results = {c};
        p.thunks.push_back(t);
        MapLoader loader;
        ExecutableOptions options;
        options.threads = threads;
        options.gemmThreading = mode;
        auto created = Executable::create(p, loader, options);
        ASSERT_TRUE(created.isOk()) << created.status().message();
        Executable &exe = *created.value();
        std::mt19937_64 rng(sh.m * 1000 + sh.n);
        std::uniform_real_distribution<float> dist(-1, 1);
        float *A = static_cast<float *>(exe.input(0));
        float *B = static_cast<float *>(exe.input(1));
        float *C = static_cast<float *>(exe.input(2));
        for (int64_t i = 0; i < sh.m * sh.k; ++i)
          A[i] = dist(rng);
        for (int64_t i = 0; i < sh.k * sh.n; ++i)
          B[i] = dist(rng);
        for (int64_t i = 0; i < sh.m * sh.n; ++i)
          C[i] = dist(rng);
        std::vector<double> want(sh.m * sh.n);
        for (int64_t i = 0; i < sh.m; ++i)
          for (int64_t j = 0; j < sh.n; ++j) {
            double sum = 0;
            for (int64_t l = 0; l < sh.k; ++l)
              sum += double(sh.ta ? A[l * sh.m + i] : A[i * sh.k + l]) *
                     (sh.tb ? B[j * sh.k + l] : B[l * sh.n + j]);
            want[i * sh.n + j] = sh.alpha * sum + sh.beta * C[i * sh.n + j];
          }
        ASSERT_TRUE(exe.run().isOk());
        for (int64_t i = 0; i < sh.m * sh.n; ++i)
          ASSERT_NEAR(C[i], want[i], 1e-5 * (1 + std::fabs(want[i])))
              << "element " << i << " of " << sh.m << "x" << sh.n << "x"
              << sh.k << " with " << threads << " threads, mode "
              << int(mode);
      }
    }
  }
}

// Convolutions split by images on the pool match one unsplit call (the
// forward and input gradient exactly, as each image is computed the same
// way; the filter gradient, summed over parts, to rounding).
TEST(Executable, SplitConvolutionsMatchOneCall) {
  ConvParams c;
  // ~50 MFLOP: large enough to be split on 2 and 3 threads.
  c.inputShape = {7, 16, 28, 26};
  c.filterShape = {32, 16, 3, 3};
  c.outputShape = {7, 32, 26, 24};
  c.strides = {1, 1};
  c.padding = {0, 0, 0, 0};
  c.dilation = {1, 1};
  ASSERT_TRUE(pkgCheckConvParams(c).isOk());
  for (LibraryKind kind : {LibraryKind::Conv2D, LibraryKind::Conv2DInputGrad,
                           LibraryKind::Conv2DFilterGrad}) {
    std::vector<int64_t> x = c.inputShape, y = c.filterShape,
                         out = c.outputShape;
    if (kind == LibraryKind::Conv2DInputGrad)
      x = c.outputShape, out = c.inputShape;
    if (kind == LibraryKind::Conv2DFilterGrad)
      y = c.outputShape, out = c.filterShape;
    std::vector<std::vector<float>> results;
    for (int threads : {1, 2, 3}) {
      LoadedPackage p;
      uint32_t a = addBuffer(p, "a", PkgDType::F32, x, PkgRole::Input);
      uint32_t b = addBuffer(p, "b", PkgDType::F32, y, PkgRole::Input);
      uint32_t r = addBuffer(p, "r", PkgDType::F32, out, PkgRole::Output);
      addInput(p, a, "a");
      addInput(p, b, "b");
      addOutput(p, r, "r");
      PackageThunk t;
      t.kind = ThunkKind::LibraryCall;
      t.library = kind;
      t.hasConv = true;
      t.conv = c;
      t.operands = {a, b};
      t.results = {r};
      p.thunks.push_back(t);
      MapLoader loader;
      ExecutableOptions options;
      options.threads = threads;
      auto created = Executable::create(p, loader, options);
      ASSERT_TRUE(created.isOk()) << created.status().message();
      Executable &exe = *created.value();
      std::mt19937_64 rng(17);
      std::uniform_real_distribution<float> dist(-1, 1);
      for (int i = 0; i < 2; ++i) {
        int64_t n = 1;
        for (int64_t d : i == 0 ? x : y)
          n *= d;
        float *data = static_cast<float *>(exe.input(i));
        for (int64_t e = 0; e < n; ++e)
          data[e] = dist(rng);
      }
      ASSERT_TRUE(exe.run().isOk());
      const float *result = static_cast<const float *>(exe.output(0));
      int64_t n = 1;
      for (int64_t d : out)
        n *= d;
      results.emplace_back(result, result + n);
    }
    for (size_t k = 1; k < results.size(); ++k)
      for (size_t i = 0; i < results[0].size(); ++i) {
        if (kind == LibraryKind::Conv2DFilterGrad)
          ASSERT_NEAR(results[k][i], results[0][i],
                      1e-5 * (1 + std::fabs(results[0][i])))
              << "filter gradient element " << i << ", run " << k;
        else
          ASSERT_EQ(results[k][i], results[0][i])
              << "library " << int(kind) << " element " << i << ", run " << k;
      }
  }
}

TEST(Executable, ProfileCountsEveryThunk) {
  MapLoader loader;
  loader.functions["add"] = addKernel;
  auto exe = mustCreate(gemmAddCopyPackage(), loader);
  ASSERT_TRUE(exe);
  ASSERT_TRUE(exe->initialize().isOk());
  ASSERT_TRUE(exe->run().isOk());
  EXPECT_EQ(exe->profile()[0].calls, 0u) << "profiling is off by default";
  exe->setProfiling(true);
  for (int i = 0; i < 4; ++i)
    ASSERT_TRUE(exe->run().isOk());
  ASSERT_EQ(exe->profile().size(), 3u);
  for (const ThunkProfile &t : exe->profile()) {
    EXPECT_EQ(t.calls, 4u);
    EXPECT_GT(t.totalNs, 0u);
  }
}

TEST(Executable, LargeKernelsRunInParts) {
  for (int threads : {1, 2, 4}) {
    LoadedPackage p;
    uint32_t in = addBuffer(p, "in", PkgDType::F32, {kBigElements / 64, 64},
                            PkgRole::Input);
    uint32_t out = addBuffer(p, "out", PkgDType::F32, {kBigElements / 64, 64},
                             PkgRole::Output);
    addInput(p, in, "in");
    addOutput(p, out, "out");
    PackageKernel k;
    k.kind = KernelKind::LlvmBitcode;
    k.name = "big";
    k.entryPoint = "kiln_kernel";
    p.kernels.push_back(k);
    PackageThunk t;
    t.kind = ThunkKind::KernelLaunch;
    t.kernel = 0;
    t.operands = {in};
    t.results = {out};
    p.thunks.push_back(t);
    MapLoader loader;
    loader.functions["big"] = bigKernel;
    auto exe = mustCreate(p, loader, threads);
    ASSERT_TRUE(exe);
    EXPECT_EQ(exe->threads(), threads);
    auto *x = static_cast<float *>(exe->input(0));
    for (int64_t i = 0; i < kBigElements; ++i)
      x[i] = float(i % 1000);
    bigCalls = 0;
    ASSERT_TRUE(exe->run().isOk());
    EXPECT_EQ(bigParts.load(), threads);
    EXPECT_EQ(bigCalls.load(), threads);
    const auto *y = static_cast<const float *>(exe->output(0));
    for (int64_t i = 0; i < kBigElements; ++i)
      ASSERT_EQ(y[i], 2 * float(i % 1000) + 1) << i;
  }
}

// Decodes IEEE half and bfloat16 bits (independently of the runtime's
// encoder).
double fromF16(uint16_t h) {
  int sign = h >> 15, exponent = (h >> 10) & 31, mantissa = h & 1023;
  double v;
  if (exponent == 0)
    v = std::ldexp(mantissa, -24);
  else if (exponent == 31)
    v = mantissa ? NAN : INFINITY;
  else
    v = std::ldexp(1024 + mantissa, exponent - 25);
  return sign ? -v : v;
}
double fromBf16(uint16_t b) {
  uint32_t bits = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Dirties every input of |exe|, then initializes it: initialize() must
// overwrite all of them.
void dirtyAndInitialize(Executable &exe) {
  for (size_t i = 0; i < exe.numInputs(); ++i)
    std::memset(exe.input(i), 0x5a,
                exe.package().buffers[exe.package().inputs[i].buffer].size);
  ASSERT_TRUE(exe.initialize().isOk());
}

TEST(Executable, InitializeMatchesInitializersInEveryDtype) {
  LoadedPackage p;
  struct Param {
    PkgDType dtype;
    DType hostDtype;
    PkgInitKind kind;
    double value, scale;
  };
  std::vector<Param> params = {
      {PkgDType::F32, DType::f32, PkgInitKind::GlorotUniform, 0, 1},
      {PkgDType::F64, DType::f64, PkgInitKind::Normal, 0.5, 2},
      {PkgDType::F16, DType::f16, PkgInitKind::Normal, 0, 3},
      {PkgDType::BF16, DType::bf16, PkgInitKind::Uniform, 1, 5},
      {PkgDType::F16, DType::f16, PkgInitKind::Uniform, 0, 1e-5}, // subnormals
      {PkgDType::F16, DType::f16, PkgInitKind::Normal, 0, 1e5},   // overflow
      {PkgDType::F32, DType::f32, PkgInitKind::KaimingNormal, 0, 1},
      {PkgDType::I32, DType::i32, PkgInitKind::Constant, 7, 1},
      {PkgDType::F32, DType::f32, PkgInitKind::Ones, 0, 1},
  };
  std::vector<int64_t> shape = {16, 24};
  for (size_t i = 0; i < params.size(); ++i) {
    uint32_t b = addBuffer(p, "p" + std::to_string(i), params[i].dtype, shape,
                           PkgRole::Parameter);
    addInput(p, b, "p" + std::to_string(i));
    ParameterInit init;
    init.buffer = b;
    init.kind = params[i].kind;
    init.value = params[i].value;
    init.scale = params[i].scale;
    init.seed = 100 + i;
    p.parameterInits.push_back(init);
  }
  // An input with no init, and one whose init is exact data.
  uint32_t state =
      addBuffer(p, "state", PkgDType::F32, {5}, PkgRole::OptimizerState);
  addInput(p, state, "state");
  uint32_t table = addBuffer(p, "table", PkgDType::I64, {3}, PkgRole::Parameter);
  addInput(p, table, "table");
  ParameterInit data;
  data.buffer = table;
  data.hasData = true;
  int64_t values[3] = {-3, 1LL << 40, 9};
  data.data.resize(24);
  std::memcpy(data.data.data(), values, 24);
  p.parameterInits.push_back(data);

  MapLoader loader;
  auto exe = mustCreate(p, loader);
  ASSERT_TRUE(exe);
  dirtyAndInitialize(*exe);
  ASSERT_FALSE(HasFatalFailure());

  for (size_t i = 0; i < params.size(); ++i) {
    InitSpec spec;
    spec.kind = static_cast<InitKind>(params[i].kind);
    spec.value = params[i].value;
    spec.scale = params[i].scale;
    spec.seed = 100 + i;
    std::vector<double> want = initialize(spec, shape);
    const void *got = exe->input(i);
    int exact = 0;
    for (size_t e = 0; e < want.size(); ++e) {
      double expected = roundTo(params[i].hostDtype, want[e]);
      double actual = 0;
      switch (params[i].dtype) {
      case PkgDType::F32: actual = static_cast<const float *>(got)[e]; break;
      case PkgDType::F64: actual = static_cast<const double *>(got)[e]; break;
      case PkgDType::F16:
        actual = fromF16(static_cast<const uint16_t *>(got)[e]);
        break;
      case PkgDType::BF16:
        actual = fromBf16(static_cast<const uint16_t *>(got)[e]);
        break;
      case PkgDType::I32: actual = static_cast<const int32_t *>(got)[e]; break;
      default: FAIL();
      }
      ASSERT_EQ(actual, expected)
          << "parameter " << i << " element " << e << " from " << want[e];
      exact += actual == want[e];
    }
    if (params[i].dtype == PkgDType::F16 || params[i].dtype == PkgDType::BF16)
      EXPECT_LT(exact, 100) << "parameter " << i << " was really rounded";
  }
  const auto *s = static_cast<const float *>(exe->input(params.size()));
  for (int i = 0; i < 5; ++i)
    EXPECT_EQ(s[i], 0.0f);
  EXPECT_EQ(std::memcmp(exe->input(params.size() + 1), values, 24), 0);
}

// A parameter copy (kiln-parameter-copies) starts as its parameter's values
// rounded to its dtype, each rounded once to nearest even.
TEST(Executable, InitializeFillsParameterCopies) {
  LoadedPackage p;
  std::vector<int64_t> shape = {8, 16};
  uint32_t w = addBuffer(p, "w", PkgDType::F32, shape, PkgRole::Parameter);
  addInput(p, w, "w");
  ParameterInit init;
  init.buffer = w;
  init.kind = PkgInitKind::Normal;
  init.scale = 3;
  init.seed = 11;
  p.parameterInits.push_back(init);
  for (PkgDType dtype : {PkgDType::BF16, PkgDType::F16}) {
    uint32_t c = addBuffer(p, "w.copy", dtype, shape, PkgRole::ParameterCopy);
    addInput(p, c, "w.copy");
    p.inputs.back().copyOf = 0;
  }
  MapLoader loader;
  auto exe = mustCreate(p, loader);
  ASSERT_TRUE(exe);
  dirtyAndInitialize(*exe);
  ASSERT_FALSE(HasFatalFailure());
  const auto *param = static_cast<const float *>(exe->input(0));
  const auto *bf16 = static_cast<const uint16_t *>(exe->input(1));
  const auto *f16 = static_cast<const uint16_t *>(exe->input(2));
  int rounded = 0;
  for (int64_t e = 0; e < 8 * 16; ++e) {
    double want = param[e];
    ASSERT_EQ(fromBf16(bf16[e]), roundTo(DType::bf16, want)) << "element " << e;
    ASSERT_EQ(fromF16(f16[e]), roundTo(DType::f16, want)) << "element " << e;
    rounded += fromBf16(bf16[e]) != want;
  }
  EXPECT_GT(rounded, 100) << "the copies were really rounded";
  EXPECT_EQ(pkgParameterCopiesOf(exe->package(), 0),
            (std::vector<size_t>{1, 2}));
}

// A step whose arena passes what the machine can give (its available
// memory and free swap, runtime/HostMemory.h) is refused before anything
// is allocated, saying what would fit it, rather than left to the
// out-of-memory killer; within it, the same package loads.
TEST(Executable, ArenaOverTheAvailableMemoryIsRefusedWithWhatWouldFit) {
  MapLoader loader;
  loader.functions["add"] = addKernel;
  LoadedPackage p = gemmAddCopyPackage();
  const uint64_t arena = p.arenaSize;
  ASSERT_GT(arena, 64u);
  ExecutableOptions options;
  options.hostMemory = HostMemory{uint64_t(8) << 30, arena - 64, 0};
  auto refused = Executable::create(p, loader, options);
  ASSERT_FALSE(refused.isOk());
  EXPECT_EQ(refused.status().message(),
            "the step needs " + formatBytes(arena) +
                " of host memory for its arena (the parameters, optimizer "
                "state, batch and activations) and this machine has " +
                formatBytes(arena - 64) +
                " available of 8.00 GiB; compile the model again with "
                "--memory-budget=SIZE under what is available (kiln "
                "recomputes activations to fit), a smaller batch or "
                "--grad-accum, or a ZeRO strategy across processes");
  // Free swap counts: the step fits, slower.
  options.hostMemory = HostMemory{uint64_t(8) << 30, arena - 64, 64};
  auto withSwap = Executable::create(p, loader, options);
  EXPECT_TRUE(withSwap.isOk()) << withSwap.status().message();
  options.hostMemory = HostMemory{uint64_t(8) << 30, arena, 0};
  auto exact = Executable::create(p, loader, options);
  EXPECT_TRUE(exact.isOk()) << exact.status().message();
  // The swap is named where there is some.
  options.hostMemory = HostMemory{uint64_t(8) << 30, 16, 16};
  auto both = Executable::create(p, loader, options);
  ASSERT_FALSE(both.isOk());
  EXPECT_THAT(
      both.status().message(),
      HasSubstr("has 16 B available of 8.00 GiB, and 16 B of swap free;"));
}

// An eval step for gemmAddCopyPackage's: z = 2 (x2 . w), through the
// GEMM and the "add" kernel (y2 + y2); its own layout (x2, then w).
LoadedPackage evalPackage() {
  LoadedPackage p;
  uint32_t x2 = addBuffer(p, "x2", PkgDType::F32, {4, 3}, PkgRole::Input);
  uint32_t w = addBuffer(p, "w", PkgDType::F32, {3, 2}, PkgRole::Parameter);
  uint32_t y2 = addBuffer(p, "y2", PkgDType::F32, {4, 2});
  uint32_t z = addBuffer(p, "z", PkgDType::F32, {4, 2}, PkgRole::Output);
  addInput(p, x2, "x2");
  addInput(p, w, "w");
  ParameterInit init; // never run: w is the training step's
  init.buffer = w;
  init.kind = PkgInitKind::Constant;
  init.value = 7;
  p.parameterInits.push_back(init);
  appendGemmThenAdd(p, x2, w, y2, y2, z);
  addOutput(p, z, "z");
  return p;
}

// Expects the eval step's z to be 2 (x2 . w) within 1e-5.
void expectEvalZ(const float *z, const float *x2, const float *w,
                 const std::string &what) {
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 2; ++j) {
      double dot = 0;
      for (int k = 0; k < 3; ++k)
        dot += double(x2[i * 3 + k]) * w[k * 2 + j];
      EXPECT_NEAR(z[i * 2 + j], 2 * dot, 1e-5) << what;
    }
}

// The eval step in the training step's memory (SharedArena.h): it reads w
// in place (what the training step's user wrote there, never copied),
// keeps its batch in memory of its own and its temporaries in the
// training step's free space; initialize() leaves w alone; each step's
// outputs the other's run wrote over read as null until it runs again,
// and only those.
TEST(Executable, EvalStepRunsInTheTrainingStepsMemory) {
  MapLoader loader;
  loader.functions["add"] = addKernel;
  auto train = mustCreate(gemmAddCopyPackage(), loader);
  ASSERT_TRUE(train);
  ASSERT_TRUE(train->initialize().isOk());
  ExecutableOptions options;
  options.threads = 2;
  options.shareMemoryWith = train.get();
  options.boundInputs = {{1, 1}};
  auto made = Executable::create(evalPackage(), loader, options);
  ASSERT_TRUE(made.isOk()) << made.status().message();
  std::unique_ptr<Executable> eval = std::move(made.value());
  const SharedArenaPlan *plan = eval->sharedArena();
  ASSERT_NE(plan, nullptr);
  EXPECT_EQ(plan->ownBytes, 48u); // x2
  EXPECT_EQ(plan->boundBytes, 24u);
  EXPECT_EQ(eval->input(1), train->input(1));
  std::vector<float> w0(static_cast<const float *>(train->input(1)),
                        static_cast<const float *>(train->input(1)) + 6);
  ASSERT_TRUE(eval->initialize().isOk());
  EXPECT_EQ(std::memcmp(train->input(1), w0.data(), 24), 0)
      << "the eval step's initialize() wrote over w";
  // y2 and z: in the training step's arena, clear of its inputs.
  auto *base = static_cast<uint8_t *>(train->buffer(0));
  for (uint32_t id : {2u, 3u}) {
    ptrdiff_t at = static_cast<uint8_t *>(eval->buffer(id)) - base;
    EXPECT_GE(at, 0);
    EXPECT_LE(uint64_t(at) + 32, train->package().arenaSize);
    for (const SignatureEntry &e : train->package().inputs) {
      const PackageBuffer &b = train->package().buffers[e.buffer];
      EXPECT_FALSE(uint64_t(at) < b.offset + b.size &&
                   b.offset < uint64_t(at) + 32)
          << eval->package().buffers[id].name << " on " << b.name;
    }
  }

  std::mt19937_64 rng(9);
  std::uniform_real_distribution<float> dist(-1, 1);
  for (int round = 0; round < 3; ++round) {
    auto *x = static_cast<float *>(train->input(0));
    auto *x2 = static_cast<float *>(eval->input(0));
    auto *w = static_cast<float *>(train->input(1));
    for (int i = 0; i < 12; ++i) {
      x[i] = dist(rng);
      x2[i] = dist(rng);
    }
    // A resume writes the training step's w; the eval step sees it.
    for (int i = 0; i < 6; ++i)
      w[i] = dist(rng);
    ASSERT_TRUE(train->run().isOk());
    std::vector<float> out(static_cast<const float *>(train->output(1)),
                           static_cast<const float *>(train->output(1)) + 8);
    ASSERT_TRUE(eval->run().isOk());
    const auto *z = static_cast<const float *>(eval->output(0));
    ASSERT_NE(z, nullptr);
    expectEvalZ(z, x2, w, "round " + std::to_string(round));
    // The training step's outputs the eval step's pieces overlap are gone;
    // the rest, and its inputs, are not.
    for (size_t o = 0; o < train->numOutputs(); ++o) {
      const PackageBuffer &b =
          train->package().buffers[train->package().outputs[o].buffer];
      bool overlapped = false;
      for (auto [offset, bytes] : plan->hostRanges)
        overlapped |= b.offset < offset + bytes && offset < b.offset + b.size;
      EXPECT_EQ(train->outputOverwritten(o), overlapped) << b.name;
      EXPECT_EQ(train->output(o) == nullptr, overlapped) << b.name;
      if (!overlapped)
        EXPECT_EQ(std::memcmp(train->output(o), out.data(), 32), 0) << b.name;
    }
    ASSERT_TRUE(train->run().isOk());
    EXPECT_TRUE(eval->outputOverwritten(0));
    EXPECT_EQ(eval->output(0), nullptr);
    EXPECT_NE(train->output(0), nullptr);
  }
  bool anyOverlapped = false;
  for (size_t o = 0; o < train->numOutputs(); ++o)
    for (auto [offset, bytes] : plan->hostRanges) {
      const PackageBuffer &b =
          train->package().buffers[train->package().outputs[o].buffer];
      anyOverlapped |= b.offset < offset + bytes && offset < b.offset + b.size;
    }
  EXPECT_TRUE(anyOverlapped) << "the test should cover an overwritten output";

  // What cannot share is refused: a bound input of another shape, and a
  // collective.
  options.boundInputs = {{1, 0}};
  auto mismatched = Executable::create(evalPackage(), loader, options);
  ASSERT_FALSE(mismatched.isOk());
  EXPECT_THAT(mismatched.status().message(),
              HasSubstr("running in another step's memory: guest input 1 "
                        "('w') cannot be read from host input 0 ('x')"));
  options.boundInputs = {{1, 1}};
  LoadedPackage collective = evalPackage();
  PackageThunk ar;
  ar.kind = ThunkKind::Collective;
  ar.hasCollective = true;
  ar.operands = {3};
  ar.results = {3};
  collective.thunks.push_back(ar);
  auto refused = Executable::create(std::move(collective), loader, options);
  ASSERT_FALSE(refused.isOk());
  EXPECT_THAT(refused.status().message(),
              HasSubstr("thunk 2 is a collective: a step with collectives "
                        "runs in memory of its own"));

  // A step in the eval step's memory would be placed against the wrong
  // layout: refused.
  options.shareMemoryWith = eval.get();
  options.boundInputs = {};
  auto chained = Executable::create(evalPackage(), loader, options);
  ASSERT_FALSE(chained.isOk());
  EXPECT_THAT(chained.status().message(),
              HasSubstr("that step runs in another step's memory itself"));
  // The training step's arena outlives it while the eval step runs in it.
  std::vector<float> w(static_cast<const float *>(train->input(1)),
                       static_cast<const float *>(train->input(1)) + 6);
  train.reset();
  ASSERT_TRUE(eval->run().isOk());
  const auto *x2 = static_cast<const float *>(eval->input(0));
  const auto *z = static_cast<const float *>(eval->output(0));
  ASSERT_NE(z, nullptr);
  expectEvalZ(z, x2, w.data(), "after the training step");
}

TEST(Executable, RefusesWhatWouldCrash) {
  MapLoader loader;
  loader.functions["add"] = addKernel;
  {
    LoadedPackage p = gemmAddCopyPackage();
    p.thunks[1].kernel = 3;
    EXPECT_THAT(createError(p, loader),
                HasSubstr("thunk 1: kernel 3 is out of range"));
  }
  {
    // The kernel launched again with one buffer fewer.
    LoadedPackage p = gemmAddCopyPackage();
    PackageThunk again = p.thunks[1];
    again.operands.pop_back();
    p.thunks.push_back(again);
    EXPECT_THAT(createError(p, loader),
                HasSubstr("thunk 3: kernel 0 (\"add\") is launched with 2 "
                          "buffers, but an earlier thunk launched it with 3"));
  }
  {
    LoadedPackage p = gemmAddCopyPackage();
    p.thunks[0].gemm.k = 4;
    EXPECT_THAT(createError(p, loader),
                HasSubstr("thunk 0: the gemm's lhs (buffer 0) needs 64 bytes, "
                          "but has 48"));
  }
  {
    LoadedPackage p = gemmAddCopyPackage();
    p.thunks[0].operands.push_back(0);
    EXPECT_THAT(createError(p, loader),
                HasSubstr("thunk 0: a gemm takes 2 operands and 1 result, "
                          "found 3 and 1"));
  }
  {
    LoadedPackage p = gemmAddCopyPackage();
    p.buffers[3].dtype = PkgDType::I32;
    EXPECT_THAT(createError(p, loader),
                HasSubstr("thunk 0: a gemm's result must be f32, f64, f16 or "
                          "bf16, but buffer 3 is i32"));
  }
  {
    LoadedPackage p = gemmAddCopyPackage();
    p.metadata.worldSize = 2; // one rank's would run as identities
    PackageThunk c;
    c.kind = ThunkKind::Collective;
    c.hasCollective = true;
    c.operands = {3};
    c.results = {3};
    p.thunks.push_back(c);
    EXPECT_THAT(createError(p, loader),
                HasSubstr("thunk 3: collectives need a distributed strategy"));
  }
  {
    LoadedPackage p = gemmAddCopyPackage();
    p.kernels[0].kind = KernelKind::Cuda;
    EXPECT_THAT(createError(p, loader), HasSubstr("is a CUDA kernel"));
  }
  {
    LoadedPackage p = gemmAddCopyPackage();
    p.kernels[0].name = "missing";
    EXPECT_THAT(createError(p, loader),
                HasSubstr("kernel 0 (\"missing\"): no such test function"));
  }
  {
    LoadedPackage p = gemmAddCopyPackage();
    // Past the arena (at an aligned offset): checkPackage.
    p.buffers[0].offset = (p.arenaSize + p.arenaAlignment - 1) /
                          p.arenaAlignment * p.arenaAlignment;
    EXPECT_THAT(createError(p, loader), HasSubstr("exceeds the arena"));
  }
  {
    LoadedPackage p = gemmAddCopyPackage();
    p.target.kind = TargetKind::Cuda;
    EXPECT_THAT(createError(p, loader), HasSubstr("CUDA target"));
  }
  {
    // s_new updates input 0 (x), whose shape differs.
    LoadedPackage p = gemmAddCopyPackage();
    p.buffers[4].updates = 0;
    EXPECT_THAT(createError(p, loader),
                HasSubstr("output 0 (\"s_new\") updates input 0 (\"x\"), but "
                          "their dtypes or shapes differ"));
  }
  {
    LoadedPackage p = gemmAddCopyPackage();
    PackageThunk conv;
    conv.kind = ThunkKind::LibraryCall;
    conv.library = LibraryKind::Conv2D;
    conv.hasConv = true;
    conv.conv.inputShape = {1, 1, 4, 3};
    conv.conv.filterShape = {1, 1, 3, 3};
    conv.conv.outputShape = {1, 1, 2, 1};
    conv.conv.strides = {1, 1};
    conv.conv.padding = {0, 0, 0, 0};
    conv.conv.dilation = {1, 1};
    conv.operands = {0, 1};
    conv.results = {3};
    p.thunks.push_back(conv);
    EXPECT_THAT(createError(p, loader),
                HasSubstr("thunk 3: the convolution's filter (buffer 1) needs "
                          "36 bytes, but has 24"));
  }
}

} // namespace
} // namespace kiln::runtime::cpu
