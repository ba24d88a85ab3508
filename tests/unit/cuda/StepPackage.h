//===- StepPackage.h - training steps packaged for CUDA, for tests -*- C++ -*-===//
//
// What the tests of whole CUDA training steps share:
//
//   - StepTest: a fixture with an MLIRContext holding Kiln's dialects and
//     its diagnostics collected in |diagnostics|;
//   - cudaPackageHooks / packageStep: a compiled step packaged as
//     CudaCompile.cpp packages it for sm_90 (each fusion's kernel emitted as
//     CUDA C++ by codegen/cuda/CudaEmitter.h, source only, with its launch
//     shape), the kernels' sources concatenated for a host build
//     (HostKernels.h);
//   - runStepsAgainstInterpreter: two steps through CudaExecutable (the
//     second captured as a CUDA Graph and replayed) against the reference
//     interpreter running the same step function twice from the same
//     arguments (parameters from their initializers, data random), every
//     output within relativeBound(amp) of its largest magnitude (plus, for
//     a parameter, Adam's allowance per step) - or, for bf16 and fp16,
//     with a one-step error from the step computed exactly (in f64, from
//     the executable's own state) within that bound of the interpreter's
//     one-step error: cuBLASLt's epilogues round once where the IR rounds
//     the product first, and Adam turns rounding noise in a gradient into
//     a full step, so after one step the two states differ by more than
//     rounding;
//   - the zoo's learning rate, the small MLP and GPT (and NativeTensor.h).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TESTS_UNIT_CUDA_STEPPACKAGE_H
#define KILN_TESTS_UNIT_CUDA_STEPPACKAGE_H

#include "tests/unit/AsF64.h"
#include "tests/unit/cuda/NativeTensor.h"

#include "codegen/cuda/CudaEmitter.h"
#include "ir/Interpreter.h"
#include "passes/Passes.h"
#include "passes/Pipelines.h"
#include "runtime/cuda/CudaExecutable.h"
#include "tools/kiln/lib/ModuleLoader.h"
#include "tools/kiln/lib/PackageBuilder.h"
#include "tools/kiln/lib/ReferenceStep.h"
#include "tools/kiln/lib/Zoo.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace kiln::cuda_step_test {

namespace rt = kiln::runtime;

// A context with Kiln's dialects; its diagnostics go to |diagnostics|.
class StepTest : public ::testing::Test {
protected:
  StepTest() {
    mlir::DialectRegistry registry;
    cli::registerKilnDialects(registry);
    context.appendDialectRegistry(registry);
    context.loadAllAvailableDialects();
    context.getDiagEngine().registerHandler([this](mlir::Diagnostic &d) {
      diagnostics += d.str() + "\n";
      return mlir::success();
    });
  }

  mlir::MLIRContext context;
  std::string diagnostics;
};

// The package hooks of `kiln compile --target=cuda` for sm_90, kernels as
// source only: kernel N's entry point is kiln_kN; its source is appended to
// |*sources| when given. An emission failure names the kernel and carries
// |diagnostics| (read when it happens).
inline cli::PackageTargetHooks cudaPackageHooks(const std::string &diagnostics,
                                                std::string *sources = nullptr) {
  cli::PackageTargetHooks hooks;
  hooks.target.kind = rt::TargetKind::Cuda;
  hooks.target.smArchs = {90};
  hooks.compileKernel = [&diagnostics, sources,
                         count = 0](FusionOp fusion, const std::string &name,
                                    rt::PackageKernel &kernel,
                                    cli::KernelFinish &,
                                    std::string &error) mutable {
    std::string entry = "kiln_k" + std::to_string(count++);
    mlir::FailureOr<CudaKernelSource> source = emitCudaKernel(fusion, entry);
    if (mlir::failed(source)) {
      error = name + ": " + diagnostics;
      return false;
    }
    kernel.kind = rt::KernelKind::Cuda;
    kernel.entryPoint = entry;
    kernel.source = source->source;
    kernel.block = {source->launch.blockThreads, 1, 1};
    kernel.grid = {static_cast<uint32_t>(source->launch.maxBlocks), 1, 1};
    kernel.sharedMemoryBytes = source->dynamicSharedBytes; // its row cache
    if (sources)
      *sources += source->source + "\n";
    return true;
  };
  return hooks;
}

// |model|'s compiled step packaged with |hooks| (the CPU's without);
// false with |errors| on failure.
inline bool packageStep(mlir::ModuleOp model, const cli::PackageTargetHooks *hooks,
                        rt::LoadedPackage &pkg, std::string &errors) {
  llvm::raw_string_ostream errs(errors);
  bool ok = mlir::succeeded(cli::buildStepPackage(model, "model", "", {}, "test",
                                                  errs, pkg, {hooks}));
  errs.flush();
  return ok;
}

// The entry points of |pkg|'s kernels.
inline std::vector<std::string> kernelEntries(const rt::LoadedPackage &pkg) {
  std::vector<std::string> entries;
  for (const rt::PackageKernel &k : pkg.kernels)
    entries.push_back(k.entryPoint);
  return entries;
}

// CudaExecutable::create(|pkg|, |api|) with the executable's notes
// appended to |notes| (which must outlive it).
inline rt::StatusOr<std::unique_ptr<rt::cuda::CudaExecutable>>
createExecutable(const rt::LoadedPackage &pkg, rt::cuda::CudaApi &api,
                 std::vector<std::string> &notes) {
  rt::cuda::CudaOptions options;
  options.log = [&notes](const std::string &n) { notes.push_back(n); };
  return rt::cuda::CudaExecutable::create(pkg, api, options);
}

// How many of |pkg|'s thunks |count| holds for.
inline int countThunks(const rt::LoadedPackage &pkg,
                       const std::function<bool(const rt::PackageThunk &)> &count) {
  int n = 0;
  for (const rt::PackageThunk &t : pkg.thunks)
    n += count(t);
  return n;
}

// The zoo's default learning rate (the steps' Adam).
constexpr double kLearningRate = 1e-3;

// The bound on |interpreter - CudaExecutable| over the output's largest
// magnitude: f32 2^-16; bf16 and fp16 4 ulps of 1 (2^-5 and 2^-8: a
// rounding of the output type is half an ulp, 2^-8 and 2^-11).
inline double relativeBound(AmpMode amp) {
  switch (amp) {
  case AmpMode::off: return std::ldexp(1.0, -16);
  case AmpMode::bf16: return 4 * std::ldexp(1.0, -7);
  case AmpMode::fp16: return 4 * std::ldexp(1.0, -10);
  }
  return 0;
}

// The MLP of the step tests: rows longer than a warp (40 features).
inline cli::MlpOptions smallMlp(int64_t batch) {
  cli::MlpOptions options;
  options.layers = {40, 24, 10};
  options.batch = batch;
  return options;
}

// One block, layer-norm rows longer than a warp, head dim 20.
inline cli::GptOptions smallGpt() {
  cli::GptOptions options;
  options.layers = 1;
  options.hidden = 40; // layer-norm rows longer than a warp
  options.heads = 2;
  options.seq = 6;
  options.vocab = 36;
  options.batch = 2;
  return options;
}

// |func| computed in f64 throughout (kiln-convert-floats-to-f64 on a copy
// of its module): the exact arithmetic a bf16 or fp16 step approximates.
inline mlir::OwningOpRef<mlir::ModuleOp> exactTwin(mlir::func::FuncOp func) {
  auto module = func->getParentOfType<mlir::ModuleOp>();
  mlir::OwningOpRef<mlir::ModuleOp> twin(module.clone());
  mlir::PassManager pm(twin->getContext());
  pm.addPass(createKilnConvertFloatsToF64());
  if (mlir::failed(pm.run(*twin)))
    return nullptr;
  return twin;
}

// Per step of runStepsAgainstInterpreter: before the interpreter runs it,
// and after the executable did (with the step's arguments and the
// interpreter's outputs).
struct StepHooks {
  std::function<void(int step)> before;
  std::function<void(int step, const std::vector<HostTensor> &arguments,
                     llvm::ArrayRef<HostTensor> expected)>
      after;
};

// Two steps of |exec| (made from |pkg|, the package of |func|) against the
// interpreter, as the file comment says; |worst| gets the largest error
// over an output's magnitude. Failures name |name|.
inline void runStepsAgainstInterpreter(mlir::func::FuncOp func,
                                       const rt::LoadedPackage &pkg,
                                       rt::cuda::CudaExecutable &exec, AmpMode amp,
                                       const std::string &name,
                                       const std::string &diagnostics,
                                       double &worst, const StepHooks &hooks = {}) {
  std::vector<cli::ArgumentInfo> args = cli::describeArguments(func);
  std::vector<cli::ResultInfo> results = cli::describeResults(func);
  // Elements past the bound from the interpreter whose one-step error from
  // exact arithmetic is within the bound of the interpreter's (printed at
  // the end, so a reader sees how many).
  int64_t closerToExact = 0;
  ASSERT_EQ(args.size(), pkg.inputs.size());
  ASSERT_EQ(results.size(), pkg.outputs.size());
  std::mt19937_64 rng(5);
  std::vector<HostTensor> values;
  for (const cli::ArgumentInfo &a : args) {
    bool data = a.role == Role::input || a.role == Role::label;
    values.push_back(data ? cli::randomData(func, a, rng) : cli::initialValue(a));
  }
  // Parameter copies (kiln-parameter-copies) hold their parameters' values.
  cli::fillParameterCopies(args, values);
  for (const cli::ArgumentInfo &a : args) {
    std::vector<uint8_t> native = toNative(values[a.index]);
    ASSERT_EQ(native.size(), pkg.buffers[pkg.inputs[a.index].buffer].size)
        << a.name;
    ASSERT_TRUE(exec.writeInput(a.index, native.data()).isOk());
  }

  Interpreter interpreter;
  std::vector<HostTensor> ownValues = values; // the executable's state
  mlir::OwningOpRef<mlir::ModuleOp> twin;
  mlir::func::FuncOp exactFunc;
  if (amp != AmpMode::off) {
    twin = exactTwin(func);
    ASSERT_TRUE(twin) << diagnostics;
    exactFunc = twin->lookupSymbol<mlir::func::FuncOp>(func.getName());
    ASSERT_TRUE(exactFunc);
  }
  for (int step = 0; step < 2; ++step) {
    if (hooks.before)
      hooks.before(step);
    mlir::FailureOr<llvm::SmallVector<HostTensor>> expected =
        interpreter.run(func, values);
    ASSERT_TRUE(mlir::succeeded(expected)) << diagnostics;
    // The exact step from the interpreter's state and from the
    // executable's (they differ after the first step), computed when an
    // element is first past the bound from the interpreter.
    std::optional<llvm::SmallVector<HostTensor>> exact, exactOwn;
    auto runExact = [&] {
      for (auto [from, to] :
           {std::pair{&values, &exact}, {&ownValues, &exactOwn}}) {
        mlir::FailureOr<llvm::SmallVector<HostTensor>> run =
            interpreter.run(exactFunc, asF64(*from));
        if (mlir::failed(run)) {
          ADD_FAILURE() << diagnostics;
          return false;
        }
        *to = std::move(*run);
      }
      return true;
    };
    rt::Status s = exec.run();
    ASSERT_TRUE(s.isOk()) << s.message();
    if (hooks.after)
      hooks.after(step, values, *expected);
    std::vector<HostTensor> outputs; // the executable's, by result
    for (const cli::ResultInfo &r : results) {
      const HostTensor &e = (*expected)[r.index];
      std::vector<uint8_t> got(pkg.buffers[pkg.outputs[r.index].buffer].size);
      rt::Status read = exec.readOutput(r.index, got.data());
      ASSERT_TRUE(read.isOk()) << read.message();
      outputs.push_back(fromNative(got, e.dtype(), e.shape()));
      const HostTensor &mine = outputs.back();
      // Relative to the output's magnitude (its largest element): the
      // steps differ by the order of f32 sums and, for bf16 and fp16, by
      // cuBLASLt's single rounding after a GEMM's epilogue where the
      // interpreter rounds the product first (docs/cuda.md), which the
      // backward and the optimizer carry into every output.
      double magnitude = 0;
      for (int64_t i = 0; i < e.size(); ++i)
        magnitude = std::max(magnitude, std::fabs(e[i]));
      double rel = relativeBound(amp);
      // Adam divides each gradient by its own RMS, so an element whose
      // gradient is rounding noise (a key bias's gradient is zero in exact
      // arithmetic: softmax ignores a constant added to every key) moves
      // by up to the learning rate either way on each side. Parameters
      // and their bf16/fp16 copies (the converts of the updated
      // parameters) get that allowance per step taken; the gradients
      // themselves are checked through the optimizer state (Adam's m and
      // v), which gets none.
      double allowance = r.role == Role::parameter || r.role == Role::parameter_copy
                             ? 2 * kLearningRate * (step + 1)
                             : 0;
      int bad = 0;
      for (int64_t i = 0; i < e.size(); ++i) {
        double want = e[i], have = mine[i];
        double scale = std::max(magnitude, 1e-30);
        double error =
            std::max(std::fabs(want - have) - allowance, 0.0) / scale;
        if (!(error <= rel) && exactFunc && (exact || runExact())) {
          // Past the bound from the interpreter: still right when this
          // step's result is no farther from the step computed exactly
          // from the executable's own state than the interpreter's is from
          // the exact step from its state (both one step of rounding).
          double beyond =
              std::max(std::fabs(have - (*exactOwn)[r.index][i]) -
                           std::fabs(want - (*exact)[r.index][i]) - allowance,
                       0.0) /
              scale;
          if (beyond <= rel) {
            ++closerToExact;
            error = beyond;
          }
        }
        worst = std::max(worst, error == error ? error : HUGE_VAL);
        if (!(error <= rel) && bad++ < 3)
          ADD_FAILURE() << name << " step " << step << " output '" << r.name
                        << "' element " << i << ": interpreter " << want
                        << ", CudaExecutable " << have
                        << (exact ? llvm::formatv(
                                        ", exact {0:e} (from its own state "
                                        "{1:e})",
                                        (*exact)[r.index][i],
                                        (*exactOwn)[r.index][i])
                                        .str()
                                  : std::string())
                        << " (output magnitude " << magnitude << ", bound "
                        << rel << " of it plus " << allowance << ")";
      }
    }
    // The next step reads the updated parameters and state: the
    // interpreter's from its outputs, the executable's from its own.
    for (size_t k = 0; k < results.size(); ++k) {
      const cli::ResultInfo &r = results[k];
      if (!r.updates)
        continue;
      values[*r.updates] = (*expected)[r.index];
      ownValues[*r.updates] = std::move(outputs[k]);
    }
  }
  if (closerToExact)
    std::printf("%s: %lld elements past the bound from the interpreter, "
                "whose one-step error from exact arithmetic is within the "
                "bound of the interpreter's\n",
                name.c_str(), static_cast<long long>(closerToExact));
}

} // namespace kiln::cuda_step_test

#endif // KILN_TESTS_UNIT_CUDA_STEPPACKAGE_H
