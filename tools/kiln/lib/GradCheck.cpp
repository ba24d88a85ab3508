//===- GradCheck.cpp - `kiln gradcheck` -----------------------------------===//
//
// For each parameter, a random sample of elements: the autodiff gradient
// against central differences D(h) = (L(p + h) - L(p - h)) / 2h, improved
// by Richardson extrapolation (4 D(h/2) - D(h)) / 3, which cancels the h^2
// error term; h = 1e-5 * max(1, |p|) keeps rounding error near 1e-11 while
// staying small enough that a perturbation rarely crosses a ReLU kink. The
// relative error is |a - n| / max(|a|, |n|, s). The floor s is the larger
// of 1e-3 * rms(gradient of that parameter) and 1e6 times the resolution
// of the difference quotient itself, 10 * eps * (|L| + 1) / h: an
// element whose gradient is below what finite differences can resolve
// (a dead ReLU, an attention score at initialization) is then judged by its
// absolute error against that resolution instead of reporting rounding
// noise as a relative error.
//
//===----------------------------------------------------------------------===//

#include "tools/kiln/lib/GradCheck.h"

#include "tools/kiln/lib/Diagnostics.h"
#include "tools/kiln/lib/Driver.h"
#include "tools/kiln/lib/Flags.h"
#include "tools/kiln/lib/ModuleLoader.h"
#include "tools/kiln/lib/ReferenceStep.h"

#include "ir/Interpreter.h"
#include "passes/Passes.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/Support/Format.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

using namespace mlir;

namespace kiln::cli {

namespace {

constexpr llvm::StringLiteral kCommand = "kiln gradcheck";

LogicalResult runPasses(ModuleOp module, bool autodiff) {
  PassManager pm(module.getContext());
  pm.addPass(createKilnVerifyRoles());
  pm.addPass(createKilnConvertFloatsToF64());
  if (autodiff) {
    pm.addPass(createKilnAutodiff());
    pm.addPass(createCanonicalizerPass());
    pm.addPass(createCSEPass());
  }
  return pm.run(module);
}

// Index of the loss among |func|'s results.
unsigned lossResult(func::FuncOp func) {
  for (const ResultInfo &r : describeResults(func))
    if (r.role == Role::loss)
      return r.index;
  return 0;
}

} // namespace

FailureOr<std::vector<ParameterCheck>> gradCheck(ModuleOp module,
                                                 const GradCheckOptions &options) {
  // The model as given, before its floats become f64: a value that fits as
  // f32 but not as f64 would otherwise fail the dialect's size limits in
  // the f64 copy, whose message speaks of 8-byte elements the model never
  // had. (The backward step, which holds more, is checked again below.)
  func::FuncOp given = findModelFunction(module);
  if (!given || failed(checkInterpreterMemory(given)))
    return failure();
  OwningOpRef<ModuleOp> forward = module.clone();
  if (failed(runPasses(*forward, /*autodiff=*/false)))
    return failure();
  OwningOpRef<ModuleOp> backward = forward->clone();
  if (failed(runPasses(*backward, /*autodiff=*/true)))
    return failure();
  func::FuncOp fwd = findModelFunction(*forward);
  func::FuncOp bwd = findModelFunction(*backward);
  if (!fwd || !bwd || failed(checkInterpreterMemory(bwd)))
    return failure();

  // Inputs: parameters from their initializers (plus noise where the
  // initializer is a constant, so biases and norm scales are not
  // degenerate), data at random.
  std::mt19937_64 rng(options.seed);
  std::vector<ArgumentInfo> args = describeArguments(fwd);
  llvm::SmallVector<HostTensor> values;
  for (const ArgumentInfo &arg : args) {
    if (arg.role == Role::parameter) {
      HostTensor t = initialValue(arg);
      InitKind kind = arg.init ? arg.init.getKind() : InitKind::zeros;
      if (kind == InitKind::zeros || kind == InitKind::ones ||
          kind == InitKind::constant) {
        HostTensor noise = randomData(fwd, arg, rng);
        for (int64_t i = 0; i < t.size(); ++i)
          t[i] += 0.1 * noise[i];
      }
      values.push_back(std::move(t));
    } else if (arg.role == Role::input || arg.role == Role::label) {
      values.push_back(randomData(fwd, arg, rng));
    } else {
      values.push_back(initialValue(arg));
    }
  }

  Interpreter interpreter;
  FailureOr<SmallVector<HostTensor>> gradients = interpreter.run(bwd, values);
  if (failed(gradients))
    return failure();
  unsigned loss = lossResult(fwd);
  double lossScale = std::fabs((*gradients)[lossResult(bwd)][0]) + 1.0;
  auto lossAt = [&](llvm::ArrayRef<HostTensor> at) -> FailureOr<double> {
    FailureOr<SmallVector<HostTensor>> r = interpreter.run(fwd, at);
    if (failed(r))
      return failure();
    return (*r)[loss][0];
  };

  std::vector<ParameterCheck> report;
  for (const ResultInfo &result : describeResults(bwd)) {
    if (!result.gradOf)
      continue;
    unsigned p = *result.gradOf;
    const HostTensor &grad = (*gradients)[result.index];
    ParameterCheck check;
    check.name = args[p].name;
    double sumSquares = 0;
    for (double g : grad.values())
      sumSquares += g * g;
    double floor = 1e-3 * std::sqrt(sumSquares / std::max<int64_t>(1, grad.size())) + 1e-12;

    // A random sample of distinct elements.
    std::vector<int64_t> indices(grad.size());
    for (int64_t i = 0; i < grad.size(); ++i)
      indices[i] = i;
    std::shuffle(indices.begin(), indices.end(), rng);
    indices.resize(std::min<int64_t>(options.samples, grad.size()));

    for (int64_t i : indices) {
      double x = values[p][i];
      auto central = [&](double h) -> FailureOr<double> {
        values[p][i] = x + h;
        FailureOr<double> plus = lossAt(values);
        values[p][i] = x - h;
        FailureOr<double> minus = lossAt(values);
        values[p][i] = x;
        if (failed(plus) || failed(minus))
          return failure();
        return (*plus - *minus) / (2 * h);
      };
      double h = 1e-5 * std::max(1.0, std::fabs(x));
      FailureOr<double> coarse = central(h), fine = central(h / 2);
      if (failed(coarse) || failed(fine))
        return failure();
      double numeric = (4 * *fine - *coarse) / 3;
      double analytic = grad[i];
      double resolution =
          1e7 * std::numeric_limits<double>::epsilon() * lossScale / h;
      double denom =
          std::max({std::fabs(analytic), std::fabs(numeric), floor, resolution});
      check.maxRelativeError =
          std::max(check.maxRelativeError, std::fabs(analytic - numeric) / denom);
      ++check.checked;
    }
    report.push_back(check);
  }
  return report;
}

int runGradcheck(llvm::ArrayRef<std::string> args, llvm::raw_ostream &outs,
                 llvm::raw_ostream &errs) {
  std::string input, seedText, samplesText, toleranceText;
  FlagParser parser(
      kCommand.str(), "FILE [--seed=S] [--samples=N] [--tolerance=T]",
      "Builds the training step's gradients (kiln-autodiff), runs the step in\n"
      "f64 on the reference interpreter with random inputs and parameters, and\n"
      "compares a random sample of every parameter's gradient with central\n"
      "finite differences. Prints one line per parameter (the largest relative\n"
      "error) and a verdict; exits 1 when any error exceeds the tolerance.");
  parser.addPositional("FILE", &input, "a graph file (.kiln) or MLIR text (.mlir)");
  parser.addValue("seed", &seedText, "S", "random seed (default: 0)");
  parser.addValue("samples", &samplesText, "N",
                  "elements checked per parameter (default: 8)");
  parser.addValue("tolerance", &toleranceText, "T",
                  "largest accepted relative error (default: 1e-6)");
  if (std::optional<int> exit = parser.parseOrExit(args, outs, errs))
    return *exit;
  GradCheckOptions options;
  if (!seedText.empty()) {
    std::optional<int64_t> seed = parseInteger(kCommand, "seed", seedText, 0, errs);
    if (!seed)
      return kExitError;
    options.seed = static_cast<uint64_t>(*seed);
  }
  if (!samplesText.empty()) {
    std::optional<int64_t> n = parseInteger(kCommand, "samples", samplesText, 1, errs);
    if (!n)
      return kExitError;
    options.samples = *n;
  }
  if (!toleranceText.empty()) {
    std::optional<double> t =
        parsePositiveReal(kCommand, "tolerance", toleranceText, errs);
    if (!t)
      return kExitError;
    options.tolerance = *t;
  }

  DialectRegistry registry;
  registerKilnDialects(registry);
  MLIRContext context(registry);
  DiagnosticPrinter diagnostics(&context, errs);
  OwningOpRef<ModuleOp> module = loadModule(input, &context, diagnostics);
  if (!module)
    return kExitError;
  FailureOr<std::vector<ParameterCheck>> report = gradCheck(*module, options);
  if (failed(report))
    return kExitError;

  size_t width = 9;
  for (const ParameterCheck &c : *report)
    width = std::max(width, c.name.size());
  outs << llvm::left_justify("parameter", width) << "  checked  max relative error\n";
  bool ok = true;
  for (const ParameterCheck &c : *report) {
    bool pass = c.maxRelativeError <= options.tolerance;
    ok &= pass;
    outs << llvm::left_justify(c.name, width) << "  "
         << llvm::format("%7lld", static_cast<long long>(c.checked)) << "  "
         << llvm::format("%.3e", c.maxRelativeError) << (pass ? "" : "  FAIL") << "\n";
  }
  outs << (ok ? "gradcheck: PASS" : "gradcheck: FAIL") << " (" << report->size()
       << " parameters, tolerance " << llvm::format("%g", options.tolerance)
       << ", seed " << options.seed << ")\n";
  return ok ? kExitOk : kExitError;
}

} // namespace kiln::cli
