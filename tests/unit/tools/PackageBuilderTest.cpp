//===- PackageBuilderTest.cpp - kernels finished on threads ----------------===//
//
// buildStepPackage compiles a step's kernels in two phases
// (tools/kiln/lib/PackageBuilder.h): what needs MLIR while it walks the
// step, then each kernel's finish (LLVM's -O3 for the CPU; NVRTC and
// ptxas for CUDA) on PackageBuildOptions::jobs threads. Here: the CPU
// package of a small GPT is the same, kernel for kernel, on one thread and
// on four, and every repeated fusion carries its first kernel's bitcode;
// with a target's hooks, finishes do run at once, a repeat gets the code
// its first kernel's finish wrote, a failure reports the first kernel
// that failed in kernel order, whichever thread failed first, and each
// distinct kernel's finish is timed for kiln compile --timing.
//
//===----------------------------------------------------------------------===//

#include "tools/kiln/lib/PackageBuilder.h"
#include "tools/kiln/lib/ModuleLoader.h"
#include "tools/kiln/lib/StepSignature.h"
#include "tools/kiln/lib/TrainBackend.h"
#include "tools/kiln/lib/Zoo.h"

#include "passes/Pipelines.h"

#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>

namespace kiln::cli {
namespace {

namespace rt = kiln::runtime;

class PackageBuilderTest : public ::testing::Test {
protected:
  PackageBuilderTest() {
    mlir::DialectRegistry registry;
    registerKilnDialects(registry);
    context.appendDialectRegistry(registry);
    // Two blocks: the second block's fusions repeat the first's.
    GptOptions gpt;
    gpt.layers = 2;
    gpt.hidden = 32;
    gpt.heads = 2;
    gpt.seq = 8;
    gpt.vocab = 64;
    gpt.batch = 2;
    module = buildGpt(&context, gpt);
    EXPECT_TRUE(module);
    if (module)
      EXPECT_TRUE(mlir::succeeded(runCompilePipeline(*module, PipelineOptions())));
  }

  // The package of |module| built with |options|; |errors| holds what the
  // builder printed.
  bool build(const PackageBuildOptions &options, rt::LoadedPackage &pkg,
             std::string &errors) {
    llvm::raw_string_ostream errs(errors);
    return mlir::succeeded(buildStepPackage(*module, "gpt", "", {}, "test",
                                            errs, pkg, options));
  }

  mlir::MLIRContext context;
  mlir::OwningOpRef<mlir::ModuleOp> module;
};

// The package records the bound each integer input is read under as
// indices (kiln-mark-index-bounds: the vocabulary for the tokens through
// the embedding, and for the targets through the cross-entropy), and kiln
// train's data specs check data files against it and draw synthetic
// integers below it. Floats and parameters have none.
TEST_F(PackageBuilderTest, IntegerInputsCarryTheBoundTheyAreReadUnder) {
  ASSERT_TRUE(module);
  rt::LoadedPackage pkg;
  std::string errors;
  ASSERT_TRUE(build({nullptr, 1, nullptr}, pkg, errors)) << errors;
  std::map<std::string, int64_t> bounds;
  for (const rt::SignatureEntry &e : pkg.inputs)
    if (e.indexBound != 0)
      bounds[e.name] = e.indexBound;
  EXPECT_EQ(bounds, (std::map<std::string, int64_t>{{"targets", 64}, {"tokens", 64}}));
  for (const rt::SignatureEntry &e : pkg.outputs)
    EXPECT_EQ(e.indexBound, 0) << e.name;

  StepSignature signature;
  signature.describe(pkg);
  ASSERT_EQ(signature.data.size(), 2u);
  std::vector<rt::TensorSpec> specs;
  int64_t batch = 0;
  std::string specErrors;
  llvm::raw_string_ostream errs(specErrors);
  ASSERT_TRUE(dataSpecsOf(signature.data, "gpt.kpkg", "test", specs, batch, errs))
      << specErrors;
  EXPECT_EQ(batch, 2);
  for (const rt::TensorSpec &spec : specs) {
    EXPECT_EQ(spec.indexLimit, 64) << spec.name;
    EXPECT_EQ(spec.classes, 64) << spec.name;
  }
}

TEST_F(PackageBuilderTest, CpuPackageIsTheSameOnOneThreadAndOnFour) {
  ASSERT_TRUE(module);
  rt::LoadedPackage one, four;
  std::string errors;
  ASSERT_TRUE(build({nullptr, 1, nullptr}, one, errors)) << errors;
  ASSERT_TRUE(build({nullptr, 4, nullptr}, four, errors)) << errors;
  ASSERT_EQ(one.kernels.size(), four.kernels.size());
  ASSERT_GT(one.kernels.size(), 10u);
  for (size_t i = 0; i < one.kernels.size(); ++i)
    EXPECT_TRUE(one.kernels[i] == four.kernels[i]) << one.kernels[i].name;
  EXPECT_TRUE(one.thunks == four.thunks);
  EXPECT_TRUE(one.buffers == four.buffers);
  // Every kernel has its bitcode, a repeat its first kernel's: the second
  // block's kernels are the first block's.
  std::map<std::vector<uint8_t>, int> seen;
  int repeats = 0;
  for (const rt::PackageKernel &k : four.kernels) {
    EXPECT_EQ(k.kind, rt::KernelKind::LlvmBitcode) << k.name;
    EXPECT_GT(k.object.size(), 100u) << k.name;
    repeats += seen[k.object]++ > 0;
  }
  EXPECT_GT(repeats, 5);
}

// A target's hooks: every kernel's finish writes its code ("code of NAME"),
// after |wait| (if any) has returned; the finish of the kernels named in
// |failing| fails instead, naming its kernel.
struct FakeTarget {
  PackageTargetHooks hooks;
  std::vector<std::string> compiled;
  std::map<std::string, std::string> reused; // kernel -> the one it repeats
  std::vector<std::string> failing;
  std::function<void()> wait;
  std::string slow; // this kernel's finish takes at least 30 ms

  FakeTarget() {
    hooks.target.kind = rt::TargetKind::Cuda;
    hooks.compileKernel = [this](FusionOp, const std::string &name,
                                 rt::PackageKernel &kernel, KernelFinish &finish,
                                 std::string &) {
      compiled.push_back(name);
      kernel.kind = rt::KernelKind::Cuda;
      kernel.entryPoint = "kiln_" + name;
      bool fails = std::find(failing.begin(), failing.end(), name) != failing.end();
      finish = [this, name, fails](rt::PackageKernel &kernel, std::string &error) {
        if (wait)
          wait();
        if (name == slow)
          for (auto start = std::chrono::steady_clock::now();
               std::chrono::steady_clock::now() - start < std::chrono::milliseconds(30);)
            ;
        if (fails) {
          error = "kernel " + name + " failed";
          return false;
        }
        kernel.source = "code of " + name;
        return true;
      };
      return true;
    };
    hooks.reuseKernel = [this](const std::string &name, const std::string &sameAs) {
      reused[name] = sameAs;
    };
  }
};

TEST_F(PackageBuilderTest, RepeatsTakeTheCodeTheirFirstKernelFinished) {
  ASSERT_TRUE(module);
  FakeTarget target;
  rt::LoadedPackage pkg;
  std::string errors;
  ASSERT_TRUE(build({&target.hooks, 3, nullptr}, pkg, errors)) << errors;
  EXPECT_GT(target.reused.size(), 5u);
  EXPECT_EQ(target.compiled.size() + target.reused.size(), pkg.kernels.size());
  std::map<std::string, const rt::PackageKernel *> byName;
  for (const rt::PackageKernel &k : pkg.kernels)
    byName[k.name] = &k;
  for (const rt::PackageKernel &k : pkg.kernels) {
    auto repeat = target.reused.find(k.name);
    std::string first = repeat == target.reused.end() ? k.name : repeat->second;
    EXPECT_EQ(k.source, "code of " + first) << k.name;
    EXPECT_EQ(k.entryPoint, "kiln_" + first) << k.name;
    // A repeat keeps its own name and the graph nodes of its own fusion.
    if (repeat != target.reused.end()) {
      ASSERT_TRUE(byName.count(first));
      EXPECT_FALSE(k.sourceNodes.empty());
      EXPECT_NE(k.sourceNodes, byName[first]->sourceNodes) << k.name;
    }
  }
}

// PackageBuildOptions::finishTimes (kiln compile --timing's slowest
// kernels): one entry per distinct kernel, in kernel order, with the graph
// nodes it computes by name and its finish's wall time (a finish made to
// take 30 ms is timed at least that).
TEST_F(PackageBuilderTest, FinishTimesNameEachDistinctKernelOnce) {
  ASSERT_TRUE(module);
  FakeTarget target;
  rt::LoadedPackage first;
  std::string errors;
  ASSERT_TRUE(build({&target.hooks, 1, nullptr}, first, errors)) << errors;
  ASSERT_GT(target.compiled.size(), 3u);
  FakeTarget timed;
  timed.slow = target.compiled[2];
  std::vector<KernelFinishTime> times;
  rt::LoadedPackage pkg;
  ASSERT_TRUE(build({&timed.hooks, 2, nullptr, &times}, pkg, errors)) << errors;
  ASSERT_EQ(times.size(), timed.compiled.size());
  for (size_t i = 0; i < times.size(); ++i) {
    EXPECT_EQ(times[i].kernel, timed.compiled[i]);
    EXPECT_GE(times[i].seconds, 0.0);
    EXPECT_FALSE(times[i].nodes.empty()) << times[i].kernel;
    EXPECT_EQ(times[i].nodes.find("kiln."), std::string::npos) << times[i].nodes;
  }
  EXPECT_GE(times[2].seconds, 0.030);
  // Without finishTimes nothing is timed, and the package is the same.
  EXPECT_TRUE(first.kernels == pkg.kernels);
}

// Two finishes meet: each waits until another has started (up to a
// deadline, so that a builder that ran them one after another fails here
// instead of hanging).
TEST_F(PackageBuilderTest, FinishesRunAtOnce) {
  ASSERT_TRUE(module);
  FakeTarget target;
  std::mutex mutex;
  std::condition_variable changed;
  int active = 0, mostActive = 0;
  bool met = false;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  target.wait = [&] {
    std::unique_lock<std::mutex> lock(mutex);
    ++active;
    mostActive = std::max(mostActive, active);
    met = met || active >= 2;
    changed.notify_all();
    changed.wait_until(lock, deadline, [&] { return met; });
    --active;
  };
  rt::LoadedPackage pkg;
  std::string errors;
  ASSERT_TRUE(build({&target.hooks, 2, nullptr}, pkg, errors)) << errors;
  EXPECT_TRUE(met);
  EXPECT_EQ(mostActive, 2);
}

TEST_F(PackageBuilderTest, OneJobRunsTheFinishesOneAtATimeInOrder) {
  ASSERT_TRUE(module);
  FakeTarget target;
  std::vector<std::string> order;
  std::mutex mutex;
  int active = 0, mostActive = 0;
  target.wait = [&] {
    std::lock_guard<std::mutex> lock(mutex);
    mostActive = std::max(mostActive, ++active);
    --active;
  };
  rt::LoadedPackage pkg;
  std::string errors;
  ASSERT_TRUE(build({&target.hooks, 1, nullptr}, pkg, errors)) << errors;
  EXPECT_EQ(mostActive, 1);
  std::vector<std::string> sources;
  for (const rt::PackageKernel &k : pkg.kernels)
    if (!target.reused.count(k.name))
      sources.push_back(k.source);
  ASSERT_EQ(sources.size(), target.compiled.size());
  for (size_t i = 0; i < sources.size(); ++i)
    EXPECT_EQ(sources[i], "code of " + target.compiled[i]);
}

TEST_F(PackageBuilderTest, AFailureNamesTheFirstKernelThatFailedInKernelOrder) {
  ASSERT_TRUE(module);
  // Which kernels there are: a first build that fails nothing.
  std::vector<std::string> names;
  {
    FakeTarget probe;
    rt::LoadedPackage pkg;
    std::string errors;
    ASSERT_TRUE(build({&probe.hooks, 1, nullptr}, pkg, errors)) << errors;
    names = probe.compiled;
  }
  ASSERT_GT(names.size(), 8u);
  // Every kernel from the fourth on fails; on four threads the later ones
  // may well fail first. Several runs, since the threads' order varies.
  for (int run = 0; run < 5; ++run) {
    FakeTarget target;
    target.failing.assign(names.begin() + 3, names.end());
    rt::LoadedPackage pkg;
    std::string errors;
    EXPECT_FALSE(build({&target.hooks, 4, nullptr}, pkg, errors));
    EXPECT_NE(errors.find("test: error: --emit=package: kernel " + names[3] +
                          " failed"),
              std::string::npos)
        << errors;
    // One problem: the first.
    EXPECT_EQ(errors.find(names[4] + " failed"), std::string::npos) << errors;
  }
}

} // namespace
} // namespace kiln::cli
