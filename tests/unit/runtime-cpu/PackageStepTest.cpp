//===- PackageStepTest.cpp - compiled packages against the interpreter ----===//
//
// End to end: a model goes through the kiln compile pipeline and the
// package builder (what `kiln compile -o step.kpkg` does), the package is
// loaded from its file, its kernels compiled by the ORC loader and its steps
// run by the Executable on two threads; the same model's training step
// (the pipeline without decompose/fuse/plan) runs on the reference
// interpreter from the same initial values and data. Every output of every
// step must agree to about 1e-5 relative, and the updated parameters and
// optimizer state carry over from step to step on both sides.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Executable.h"
#include "runtime/cpu/jit/OrcKernelLoader.h"

#include "ir/Interpreter.h"
#include "passes/Pipelines.h"
#include "tools/kiln/lib/ModuleLoader.h"
#include "tools/kiln/lib/PackageBuilder.h"
#include "tools/kiln/lib/ReferenceStep.h"
#include "tools/kiln/lib/Zoo.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>

namespace kiln::runtime::cpu {
namespace {

// Elementwise chains, a broadcast bias, row reductions (a log-sum-exp) and
// tanh/exp/log, on 256x256 tensors (large enough to split kernels in two),
// trained with Adam.
const char *kModel = R"mlir(
module attributes {kiln.training = #kiln.training<optimizer = adam, learning_rate = 1.0e-2>} {
func.func @main(%x: tensor<256x256xf32> {kiln.role = #kiln.role<input>, kiln.name = "x"},
                %w: tensor<256x256xf32> {kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = glorot_uniform, seed = 3>, kiln.name = "w"},
                %b: tensor<256xf32> {kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = normal, scale = 0.1, seed = 4>, kiln.name = "b"},
                %y: tensor<256x256xf32> {kiln.role = #kiln.role<label>, kiln.name = "y"})
    -> (tensor<f32> {kiln.role = #kiln.role<loss>, kiln.name = "loss"}) {
  %bb = kiln.broadcast_in_dim %b, dims = [1] : tensor<256xf32> -> tensor<256x256xf32>
  %p = kiln.mul %x, %w : tensor<256x256xf32>
  %q = kiln.add %p, %bb : tensor<256x256xf32>
  %t = kiln.tanh %q : tensor<256x256xf32>
  %d = kiln.sub %t, %y : tensor<256x256xf32>
  %s = kiln.mul %d, %d : tensor<256x256xf32>
  %l1 = kiln.reduce mean %s, dims = [0, 1] : tensor<256x256xf32> -> tensor<f32>
  %e = kiln.exp %q : tensor<256x256xf32>
  %r = kiln.reduce sum %e, dims = [1] : tensor<256x256xf32> -> tensor<256xf32>
  %g = kiln.log %r : tensor<256xf32>
  %l2 = kiln.reduce mean %g, dims = [0] : tensor<256xf32> -> tensor<f32>
  %l = kiln.add %l1, %l2 : tensor<f32>
  return %l : tensor<f32>
}
}
)mlir";

class PackageStepTest : public ::testing::Test {
protected:
  PackageStepTest() : context(registry()) {
    handler = std::make_unique<mlir::ScopedDiagnosticHandler>(
        &context, [this](mlir::Diagnostic &d) {
          diagnostics += d.str() + "\n";
          return mlir::success();
        });
  }

  static mlir::DialectRegistry registry() {
    mlir::DialectRegistry r;
    cli::registerKilnDialects(r);
    return r;
  }

  // Compiles |model| to a package file and loads it.
  StatusOr<LoadedPackage> compilePackage(mlir::ModuleOp model,
                                         const std::string &name) {
    PipelineOptions options;
    if (mlir::failed(runCompilePipeline(model, options)))
      return Status::error("the compile pipeline failed: " + diagnostics);
    llvm::SmallString<128> path;
    llvm::sys::fs::createTemporaryFile(name, "kpkg", path);
    std::string errors;
    llvm::raw_string_ostream errs(errors);
    if (mlir::failed(cli::writeStepPackage(model, name, "source", {},
                                           path.str().str(), "test", errs)))
      return Status::error("the package builder failed: " + errs.str() +
                           diagnostics);
    StatusOr<LoadedPackage> package = loadPackage(path.str().str());
    llvm::sys::fs::remove(path);
    return package;
  }

  // Writes |t| into |out| as |dtype|.
  static void store(const HostTensor &t, PkgDType dtype, void *out) {
    for (int64_t i = 0; i < t.size(); ++i) {
      switch (dtype) {
      case PkgDType::F32: static_cast<float *>(out)[i] = float(t[i]); break;
      case PkgDType::F64: static_cast<double *>(out)[i] = t[i]; break;
      case PkgDType::I32: static_cast<int32_t *>(out)[i] = int32_t(t[i]); break;
      case PkgDType::I64: static_cast<int64_t *>(out)[i] = int64_t(t[i]); break;
      default: FAIL() << "unexpected dtype in the test model";
      }
    }
  }
  static double load(const void *in, PkgDType dtype, int64_t i) {
    switch (dtype) {
    case PkgDType::F32: return static_cast<const float *>(in)[i];
    case PkgDType::F64: return static_cast<const double *>(in)[i];
    case PkgDType::I32: return static_cast<const int32_t *>(in)[i];
    case PkgDType::I64: return static_cast<const int64_t *>(in)[i];
    default: return NAN;
    }
  }

  // Runs |steps| steps of |makeModel|'s model both ways and compares them.
  void checkSteps(const std::function<mlir::OwningOpRef<mlir::ModuleOp>()> &makeModel,
                  const std::string &name, int steps, int threads,
                  size_t minKernelLaunches, double tolerance) {
    mlir::OwningOpRef<mlir::ModuleOp> compiled = makeModel();
    mlir::OwningOpRef<mlir::ModuleOp> reference = makeModel();
    ASSERT_TRUE(compiled && reference) << diagnostics;

    StatusOr<LoadedPackage> package = compilePackage(*compiled, name);
    ASSERT_TRUE(package.isOk()) << package.status().message();
    size_t launches = 0;
    for (const PackageThunk &t : package->thunks)
      launches += t.kind == ThunkKind::KernelLaunch;
    EXPECT_GE(launches, minKernelLaunches);
    auto loader = createOrcKernelLoader();
    ASSERT_TRUE(loader.isOk()) << loader.status().message();
    ExecutableOptions options;
    options.threads = threads;
    auto exe = Executable::create(std::move(package.value()), *loader.value(),
                                  options);
    ASSERT_TRUE(exe.isOk()) << exe.status().message();
    Executable &step = *exe.value();
    ASSERT_TRUE(step.initialize().isOk());

    PipelineOptions stepOnly;
    stepOnly.optimize = false;
    ASSERT_TRUE(mlir::succeeded(runCompilePipeline(*reference, stepOnly)))
        << diagnostics;
    mlir::func::FuncOp func = cli::findModelFunction(*reference);
    ASSERT_TRUE(func) << diagnostics;
    std::vector<cli::ArgumentInfo> args = cli::describeArguments(func);
    std::vector<cli::ResultInfo> results = cli::describeResults(func);
    ASSERT_EQ(step.numOutputs(), results.size());

    // Every argument is a package input of the same name; parameters start
    // equal on both sides.
    std::vector<int> inputOf(args.size());
    std::vector<HostTensor> values;
    for (const cli::ArgumentInfo &arg : args) {
      inputOf[arg.index] = step.findInput(arg.name);
      ASSERT_GE(inputOf[arg.index], 0) << "no package input " << arg.name;
      values.push_back(cli::initialValue(arg));
    }
    // Parameter copies (kiln-parameter-copies, with amp) start as their
    // parameters' values.
    cli::fillParameterCopies(args, values);
    for (const cli::ArgumentInfo &arg : args) {
      const SignatureEntry &in = step.package().inputs[inputOf[arg.index]];
      for (int64_t i = 0; i < values[arg.index].size(); ++i)
        ASSERT_EQ(load(step.input(inputOf[arg.index]), in.dtype, i),
                  values[arg.index][i])
            << arg.name << " element " << i << " after initialize()";
    }

    std::mt19937_64 rng(42);
    Interpreter interpreter;
    for (int s = 0; s < steps; ++s) {
      for (const cli::ArgumentInfo &arg : args) {
        if (arg.role != Role::input && arg.role != Role::label)
          continue;
        values[arg.index] = cli::randomData(func, arg, rng);
        store(values[arg.index],
              step.package().inputs[inputOf[arg.index]].dtype,
              step.input(inputOf[arg.index]));
      }
      auto expected = interpreter.run(func, values);
      ASSERT_TRUE(mlir::succeeded(expected)) << diagnostics;
      Status status = step.run();
      ASSERT_TRUE(status.isOk()) << status.message();
      for (const cli::ResultInfo &result : results) {
        const HostTensor &e = (*expected)[result.index];
        const SignatureEntry &out = step.package().outputs[result.index];
        ASSERT_EQ(e.size(), out.shape.empty() ? 1 : [&] {
          int64_t n = 1;
          for (int64_t d : out.shape)
            n *= d;
          return n;
        }()) << "output " << result.index;
        // Errors relative to the output's largest magnitude: an element
        // near zero (a parameter crossing it) has no relative precision.
        double scale = 0;
        for (int64_t i = 0; i < e.size(); ++i)
          scale = std::max(scale, std::fabs(e[i]));
        double worst = 0;
        int64_t worstAt = 0;
        for (int64_t i = 0; i < e.size(); ++i) {
          double a = load(step.output(result.index), out.dtype, i);
          double err = std::fabs(a - e[i]) / std::max(scale, 1e-30);
          if (!(err <= worst)) {
            worst = err;
            worstAt = i;
          }
        }
        if (std::getenv("KILN_TEST_VERBOSE"))
          std::fprintf(stderr,
                       "step %d output %u (%s): max error %.3g of scale %.3g "
                       "(element %lld: expected %.9g, found %.9g)\n",
                       s, result.index, out.name.c_str(), worst, scale,
                       (long long)worstAt, e[worstAt],
                       load(step.output(result.index), out.dtype, worstAt));
        EXPECT_LE(worst, tolerance)
            << "step " << s << " output " << result.index << " ("
            << out.name << ") element " << worstAt << ": expected "
            << e[worstAt] << ", found "
            << load(step.output(result.index), out.dtype, worstAt);
        if (result.updates)
          values[*result.updates] = e;
      }
    }
  }

  mlir::MLIRContext context;
  std::unique_ptr<mlir::ScopedDiagnosticHandler> handler;
  std::string diagnostics;
};

TEST_F(PackageStepTest, ElementwiseAndReductionModelWithSgd) {
  std::string text = kModel;
  text.replace(text.find("adam"), 4, "sgd");
  checkSteps(
      [&] {
        return mlir::parseSourceString<mlir::ModuleOp>(text, &context);
      },
      "e2e-model-sgd", /*steps=*/4, /*threads=*/2, /*minKernelLaunches=*/3,
      /*tolerance=*/1e-5);
}

// Adam's update m/(sqrt(v) + eps) is ill-conditioned where a gradient
// element is near eps (1e-8): here some are, as the two loss terms' gradients
// cancel, so an f32 rounding difference in such an element moves its update
// by up to ~1e-3 of the learning rate, ~1e-4 of w's scale. The loss and the
// optimizer state still agree to ~1e-6; SGD above is the tight check.
TEST_F(PackageStepTest, ElementwiseAndReductionModelWithAdam) {
  for (int threads : {1, 2}) {
    checkSteps(
        [&] {
          return mlir::parseSourceString<mlir::ModuleOp>(kModel, &context);
        },
        "e2e-model", /*steps=*/4, threads, /*minKernelLaunches=*/3,
        /*tolerance=*/3e-4);
  }
}

// The zoo MLP (GEMM library calls with epilogue kernels, ReLU, softmax
// cross-entropy with integer labels): a small one on one and two threads,
// and one whose GEMMs are large enough to be split over the pool.
TEST_F(PackageStepTest, ZooMlpWithSgd) {
  struct Case {
    llvm::SmallVector<int64_t> layers;
    int64_t batch;
    int threads;
  };
  for (const Case &c : {Case{{16, 8, 4}, 4, 1}, Case{{16, 8, 4}, 4, 2},
                        Case{{512, 256, 10}, 128, 2}}) {
    cli::MlpOptions options;
    options.layers = c.layers;
    options.batch = c.batch;
    options.training.optimizer = OptimizerKind::sgd;
    options.training.learningRate = 0.1;
    checkSteps([&] { return cli::buildMlp(&context, options); }, "mlp-sgd",
               /*steps=*/3, c.threads, /*minKernelLaunches=*/2,
               /*tolerance=*/1e-5);
  }
}

// Adam: see ElementwiseAndReductionModelWithAdam for the tolerance.
TEST_F(PackageStepTest, ZooMlpWithAdam) {
  cli::MlpOptions options;
  options.layers = {64, 32, 10};
  options.batch = 16;
  checkSteps([&] { return cli::buildMlp(&context, options); }, "mlp-adam",
             /*steps=*/3, /*threads=*/2, /*minKernelLaunches=*/2,
             /*tolerance=*/3e-4);
}

} // namespace
} // namespace kiln::runtime::cpu
