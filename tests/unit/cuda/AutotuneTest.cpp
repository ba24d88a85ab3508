//===- AutotuneTest.cpp - timing cuBLASLt's algorithms, on a fake ---------===//
//
// runtime/cuda/Autotune.h through CudaExecutable on FakeCudaApi.h,
// whose GEMM plans hold several algorithms and whose events read a clock
// that each GEMM run advances by its algorithm's time: the fastest is
// chosen per shape (the heuristic's first kept within 2%), the step runs
// it and still computes the right values, the choice is read back from the
// cache without timing, a cache whose key or algorithm no longer matches is
// timed again, an algorithm that fails is skipped, and --autotune=off
// and one-algorithm plans time nothing. Links no LLVM or MLIR.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudaExecutable.h"
#include "runtime/cuda/Autotune.h"
#include "tests/unit/cuda/FakeCudaApi.h"
#include "tests/unit/cuda/PkgBuffers.h"
#include "tests/unit/cuda/ScopedEnv.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <unistd.h>

namespace {

using namespace kiln::runtime;
using namespace kiln::runtime::cuda;
using kiln::runtime::cuda::testing::f32Buffer;
using kiln::runtime::cuda::testing::gemmThunk;
using kiln::runtime::cuda::testing::ScopedEnv;
using kiln::runtime::cuda::testing::signatureEntry;
using kiln::runtime::cuda::testing::FakeCudaApi;
using kiln::runtime::cuda::testing::randomFloats;

constexpr int M = 4, K = 8, N = 16;

// h = x . w [M, N]; y = h . v [M, N]; h2 = x . w again (h's shape: two
// thunks share a plan).
LoadedPackage twoShapes() {
  LoadedPackage p;
  p.target.kind = TargetKind::Cuda;
  p.target.smArchs = {90};
  p.buffers = {f32Buffer("x", PkgRole::Input, {M, K}, 0),
               f32Buffer("w", PkgRole::Parameter, {K, N}, 256),
               f32Buffer("v", PkgRole::Parameter, {N, N}, 1024),
               f32Buffer("h", PkgRole::Output, {M, N}, 2048),
               f32Buffer("y", PkgRole::Output, {M, N}, 2560),
               f32Buffer("h2", PkgRole::Output, {M, N}, 3072)};
  p.arenaSize = 3584;
  p.thunks = {gemmThunk(M, N, K, 0, 1, 3), gemmThunk(M, N, N, 3, 2, 4),
              gemmThunk(M, N, K, 0, 1, 5)};
  auto entry = [&](const char *name, PkgRole role, uint32_t id) {
    return signatureEntry(p, name, role, id);
  };
  p.inputs = {entry("x", PkgRole::Input, 0), entry("w", PkgRole::Parameter, 1),
              entry("v", PkgRole::Parameter, 2)};
  p.outputs = {entry("h", PkgRole::Output, 3), entry("y", PkgRole::Output, 4),
               entry("h2", PkgRole::Output, 5)};
  return p;
}

std::vector<float> product(const std::vector<float> &a,
                           const std::vector<float> &b, int m, int k, int n) {
  std::vector<float> out(size_t(m) * n);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double acc = 0;
      for (int l = 0; l < k; ++l)
        acc += double(a[i * k + l]) * b[l * n + j];
      out[i * n + j] = float(acc);
    }
  return out;
}

// Algorithm times by shape: the x . w GEMMs (k = K) and h . v (k = N).
double timeOf(const GemmDesc &desc, int algorithm) {
  static const double byK8[] = {1.0, 0.6, 0.8, 0.9};
  static const double byK16[] = {1.0, 0.99, 1.2, 1.5};
  return desc.params.k == K ? byK8[algorithm] : byK16[algorithm];
}

class AutotuneTest : public ::testing::Test {
protected:
  FakeCudaApi api;
  std::vector<std::string> notes;
  CudaOptions options;
  std::string cacheDir;

  void SetUp() override {
    api.gemmAlgorithms = 4;
    api.gemmAlgorithmMs = timeOf;
    options.graphs = false;
    options.log = [this](const std::string &n) { notes.push_back(n); };
    char pattern[] = "/tmp/kiln-autotune-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    cacheDir = pattern;
    options.autotuneCache = cacheDir;
  }
  void TearDown() override {
    std::string command = "rm -rf '" + cacheDir + "'";
    EXPECT_EQ(std::system(command.c_str()), 0);
  }

  std::unique_ptr<CudaExecutable> make(LoadedPackage p = twoShapes()) {
    StatusOr<std::unique_ptr<CudaExecutable>> e =
        CudaExecutable::create(std::move(p), api, options);
    EXPECT_TRUE(e.isOk()) << e.status().message();
    return e.isOk() ? std::move(e.value()) : nullptr;
  }

  // cublasLtMatmul calls (not the heuristic's, which count() would match).
  size_t runs() const { return runs(api); }
  static size_t runs(const FakeCudaApi &fake) {
    return size_t(std::count(fake.calls.begin(), fake.calls.end(),
                             std::string("cublasLtMatmul")));
  }

  std::vector<std::string> cacheFiles() const {
    std::vector<std::string> files;
    std::string command = "ls '" + cacheDir + "' 2>/dev/null";
    if (FILE *ls = popen(command.c_str(), "r")) {
      char line[512];
      while (std::fgets(line, sizeof(line), ls)) {
        std::string name(line);
        name.erase(name.find_last_not_of('\n') + 1);
        files.push_back(name);
      }
      pclose(ls);
    }
    return files;
  }

  // Runs one step on random inputs and checks h, y and h2 against the
  // host; returns the algorithms the step's GEMMs ran.
  std::vector<int> stepAndCheck(CudaExecutable &exec) {
    EXPECT_TRUE(exec.initialize().isOk());
    std::vector<float> x = randomFloats(M * K, 1), w = randomFloats(K * N, 2),
                       v = randomFloats(N * N, 3);
    EXPECT_TRUE(exec.writeInput(0, x.data()).isOk());
    EXPECT_TRUE(exec.writeInput(1, w.data()).isOk());
    EXPECT_TRUE(exec.writeInput(2, v.data()).isOk());
    size_t before = api.gemms.size();
    EXPECT_TRUE(exec.run().isOk());
    EXPECT_TRUE(exec.synchronize().isOk());
    std::vector<float> h(M * N), y(M * N), h2(M * N);
    EXPECT_TRUE(exec.readOutput(0, h.data()).isOk());
    EXPECT_TRUE(exec.readOutput(1, y.data()).isOk());
    EXPECT_TRUE(exec.readOutput(2, h2.data()).isOk());
    std::vector<float> wantH = product(x, w, M, K, N);
    std::vector<float> wantY = product(h, v, M, N, N);
    for (int i = 0; i < M * N; ++i) {
      EXPECT_NEAR(h[i], wantH[i], 1e-5) << i;
      EXPECT_NEAR(y[i], wantY[i], 1e-5) << i;
      EXPECT_EQ(h2[i], h[i]) << i;
    }
    std::vector<int> ran;
    for (size_t i = before; i < api.gemms.size(); ++i)
      ran.push_back(api.gemms[i].algorithm);
    return ran;
  }
};

TEST_F(AutotuneTest, TheFastestAlgorithmRunsInTheStep) {
  auto exec = make();
  ASSERT_TRUE(exec);
  // Each plan asked for 8 and holds the fake's 4.
  ASSERT_EQ(api.plans.size(), 2u);
  for (const GemmDesc &d : api.plans)
    EXPECT_EQ(d.algorithms, 8);
  const std::vector<Tuning> &tuning = exec->tuning();
  ASSERT_EQ(tuning.size(), 2u);
  // x . w: algorithm 1 is 40% faster than the heuristic's first.
  EXPECT_EQ(tuning[0].thunks, (std::vector<size_t>{0, 2}));
  EXPECT_EQ(tuning[0].candidates, 4);
  EXPECT_EQ(tuning[0].chosen, 1);
  EXPECT_FALSE(tuning[0].cached);
  EXPECT_EQ(tuning[0].description, "fake algorithm 1");
  ASSERT_EQ(tuning[0].ms.size(), 4u);
  for (int i = 0; i < 4; ++i)
    EXPECT_NEAR(tuning[0].ms[i], timeOf(api.plans[0], i), 1e-6) << i;
  EXPECT_NE(tuning[0].shape.find("f32 m=4 n=16 k=8"), std::string::npos)
      << tuning[0].shape;
  // h . v: algorithm 1 is 1% faster, within 2%: the first stays.
  EXPECT_EQ(tuning[1].thunks, (std::vector<size_t>{1}));
  EXPECT_EQ(tuning[1].chosen, 0);
  EXPECT_NEAR(tuning[1].ms[1], 0.99, 1e-6);
  // Each algorithm: a warm-up and 3 trials of 3 runs.
  EXPECT_EQ(runs(), 2u * 4u * 10u);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("autotuning: 2 GEMM shape(s) (up to 8 cuBLASLt "
                          "algorithms each), 0 attention shape(s); 2 timed, 0 "
                          "from the cache"),
            std::string::npos)
      << notes[0];
  // Saved: (1.0 - 0.6) ms for each of x . w's two thunks.
  EXPECT_NE(notes[0].find("1 run another candidate than the first, 0.800 "
                          "ms less per step"),
            std::string::npos)
      << notes[0];
  // The step runs the choices and its values are right (the tuning's runs
  // wrote the result buffers before initialize()).
  EXPECT_EQ(stepAndCheck(*exec), (std::vector<int>{1, 0, 1}));
  EXPECT_EQ(cacheFiles().size(), 2u);
}

TEST_F(AutotuneTest, TheCacheSkipsTimingAndMatchesItsKey) {
  { auto first = make(); ASSERT_TRUE(first); }
  ASSERT_EQ(cacheFiles().size(), 2u);
  size_t timedRuns = runs();
  notes.clear();
  auto second = make();
  ASSERT_TRUE(second);
  // Nothing timed: the choices came from the files.
  EXPECT_EQ(runs(), timedRuns);
  const std::vector<Tuning> &tuning = second->tuning();
  ASSERT_EQ(tuning.size(), 2u);
  EXPECT_TRUE(tuning[0].cached);
  EXPECT_TRUE(tuning[0].ms.empty());
  EXPECT_EQ(tuning[0].chosen, 1);
  EXPECT_EQ(tuning[1].chosen, 0);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("0 timed, 2 from the cache"), std::string::npos)
      << notes[0];
  EXPECT_EQ(stepAndCheck(*second), (std::vector<int>{1, 0, 1}));

  // Another library version is another key: timed again, two more files.
  api.library = "fake cuBLASLt 2";
  size_t before = runs();
  { auto third = make(); ASSERT_TRUE(third); EXPECT_FALSE(third->tuning()[0].cached); }
  EXPECT_EQ(runs(), before + 80u);
  EXPECT_EQ(cacheFiles().size(), 4u);

  // A file whose algorithm the plan no longer holds is timed again and
  // rewritten.
  api.library = "fake cuBLASLt 1";
  for (const std::string &name : cacheFiles()) {
    std::string path = cacheDir + "/" + name;
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    std::string content = text.str();
    size_t at = content.find("chosen fake-1");
    if (at == std::string::npos)
      continue;
    content.replace(at, 13, "chosen fake-9");
    std::ofstream(path, std::ios::trunc) << content;
  }
  before = runs();
  auto fourth = make();
  ASSERT_TRUE(fourth);
  EXPECT_FALSE(fourth->tuning()[0].cached);
  EXPECT_EQ(fourth->tuning()[0].chosen, 1);
  EXPECT_TRUE(fourth->tuning()[1].cached);
  EXPECT_EQ(runs(), before + 40u);
  bool rewritten = false;
  for (const std::string &name : cacheFiles()) {
    std::ifstream in(cacheDir + "/" + name);
    std::stringstream text;
    text << in.rdbuf();
    rewritten = rewritten || (text.str().find("library fake cuBLASLt 1") !=
                                  std::string::npos &&
                              text.str().find("chosen fake-1") != std::string::npos);
  }
  EXPECT_TRUE(rewritten);
}

TEST_F(AutotuneTest, AnAlgorithmThatFailsIsSkipped) {
  api.failAlgorithms = {1}; // the fastest for x . w
  auto exec = make();
  ASSERT_TRUE(exec);
  const Tuning &t = exec->tuning()[0];
  EXPECT_EQ(t.ms[1], -1);
  EXPECT_EQ(t.chosen, 2); // 0.8 against the first's 1.0
  EXPECT_NE(t.error.find("candidate 1: cublasLtMatmul failed"), std::string::npos)
      << t.error;
  EXPECT_EQ(stepAndCheck(*exec), (std::vector<int>{2, 0, 2}));
}

TEST_F(AutotuneTest, FailuresThatLeaveNoAlgorithmFailTheLoadByName) {
  // Every algorithm fails to queue.
  api.failAlgorithms = {0, 1, 2, 3};
  StatusOr<std::unique_ptr<CudaExecutable>> e =
      CudaExecutable::create(twoShapes(), api, options);
  ASSERT_FALSE(e.isOk());
  EXPECT_NE(e.status().message().find(
                "thunk 0 (gemm m=4 n=16 k=8 batch=1): autotuning the gemm f32 "
                "m=4 n=16 k=8"),
            std::string::npos)
      << e.status().message();
  EXPECT_NE(e.status().message().find(
                "every candidate failed (candidate 0: cublasLtMatmul failed"),
            std::string::npos)
      << e.status().message();

  // The device reports an error while timing: sticky, so the load fails.
  FakeCudaApi other;
  other.gemmAlgorithms = 4;
  other.gemmAlgorithmMs = timeOf;
  other.failCall = "cudaEventSynchronize";
  e = CudaExecutable::create(twoShapes(), other, options);
  ASSERT_FALSE(e.isOk());
  EXPECT_NE(e.status().message().find(
                "autotuning the gemm f32 m=4 n=16 k=8 batch=1 alpha=1 beta=0 "
                "epilogue=none align="),
            std::string::npos)
      << e.status().message();
  EXPECT_NE(e.status().message().find(
                "candidate 0: cudaEventSynchronize failed"),
            std::string::npos)
      << e.status().message();
}

TEST_F(AutotuneTest, OffAndSingleAlgorithmPlansTimeNothing) {
  options.autotune = false;
  auto off = make();
  ASSERT_TRUE(off);
  for (const GemmDesc &d : api.plans)
    EXPECT_EQ(d.algorithms, 1);
  EXPECT_TRUE(off->tuning().empty());
  EXPECT_EQ(runs(), 0u);
  EXPECT_EQ(api.count("cudaMemsetAsync"), 0u);
  EXPECT_TRUE(notes.empty());
  EXPECT_EQ(stepAndCheck(*off), (std::vector<int>{0, 0, 0}));

  // On, but the library offers one algorithm per GEMM: nothing to time,
  // the arena untouched, no note.
  options.autotune = true;
  api.gemmAlgorithms = 1;
  size_t before = runs();
  auto one = make();
  ASSERT_TRUE(one);
  EXPECT_TRUE(one->tuning().empty());
  EXPECT_EQ(runs(), before);
  EXPECT_EQ(api.count("cudaMemsetAsync"), 0u);
  EXPECT_TRUE(notes.empty());
  EXPECT_TRUE(cacheFiles().empty());
}

TEST_F(AutotuneTest, CacheOffWritesNothing) {
  options.autotuneCache = "off";
  auto exec = make();
  ASSERT_TRUE(exec);
  EXPECT_EQ(exec->tuning()[0].chosen, 1);
  EXPECT_TRUE(cacheFiles().empty());
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0].find(cacheDir), std::string::npos) << notes[0];
}

TEST(AutotuneCacheDirectory, FollowsKilnCacheDir) {
  ScopedEnv cacheDir("KILN_CACHE_DIR", "off");
  EXPECT_EQ(autotuneCacheDirectory(), "");
  char pattern[] = "/tmp/kiln-gemm-cache-XXXXXX";
  ASSERT_NE(mkdtemp(pattern), nullptr);
  setenv("KILN_CACHE_DIR", (std::string(pattern) + "/a/b").c_str(), 1);
  EXPECT_EQ(autotuneCacheDirectory(),
            std::string(pattern) + "/a/b/autotune");
  std::string command = std::string("test -d '") + pattern +
                        "/a/b/autotune' && rm -rf '" + pattern + "'";
  EXPECT_EQ(std::system(command.c_str()), 0);
}

} // namespace
