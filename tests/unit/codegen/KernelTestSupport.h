//===- KernelTestSupport.h - shared parts of the CPU kernel tests -*- C++ -*-===//
//
// Random inputs, the seed, and a fixture that compiles a fusion, runs it and
// the reference interpreter on the same inputs and compares the results:
// one fusion, a run of random fusions from a builder, or the fusions of a
// zoo model's compiled training step. Each fixture sets its Tolerance (they
// differ: sums reorder more arithmetic than elementwise chains, and a GPU
// kernel's lanes reorder them more than a CPU loop does); on top of it
// each element may be off by its rounding spread (roundingSpread: how far
// the interpreter's result moves when each op's rounding does).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TESTS_UNIT_CODEGEN_KERNELTESTSUPPORT_H
#define KILN_TESTS_UNIT_CODEGEN_KERNELTESTSUPPORT_H

#include "codegen/cpu/LowerToLLVM.h"
#include "tests/unit/CollectDiagnostics.h"
#include "tests/unit/TestSeed.h"

#include "ir/Interpreter.h"
#include "ir/KilnDialect.h"
#include "ir/KilnOps.h"
#include "passes/Pipelines.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace kiln::codegen_test {

// The first seed of a run: KILN_CODEGEN_SEED when set, else fresh.
inline uint64_t baseSeed() { return kiln::test::seedFrom("KILN_CODEGEN_SEED"); }

// |op| as text, for failure messages.
inline std::string printed(mlir::Operation *op) {
  std::string text;
  llvm::raw_string_ostream os(text);
  op->print(os);
  return text;
}

// Random inputs: floats uniform on [-2, 2], integers on [0, intBound),
// booleans 0 or 1.
inline HostTensor randomTensor(mlir::RankedTensorType type, std::mt19937_64 &rng,
                               int64_t intBound) {
  DType dtype;
  EXPECT_TRUE(dtypeOfTensor(type, dtype)) << "unsupported type";
  HostTensor t(dtype, type.getShape());
  std::uniform_real_distribution<double> real(-2.0, 2.0);
  std::uniform_int_distribution<int64_t> integer(0, std::max<int64_t>(intBound, 1) - 1);
  for (double &v : t.values()) {
    if (dtype == DType::i1)
      v = integer(rng) % 2;
    else if (isFloat(dtype))
      v = real(rng);
    else
      v = integer(rng);
  }
  t.roundAll();
  return t;
}

// How far a kernel's result may be from the interpreter's: a float element
// within |relative| (per dtype) of max(1, |expected|, |found|), or within
// |normwise| (per dtype) of the expected tensor's largest magnitude: a sum
// reordered across lanes is off by rounding errors of its terms, which can
// be far larger than the element itself when they cancel (a layer norm's
// dx subtracts two sums of products). Integers and booleans exactly.
struct Tolerance {
  double f64 = 1e-12, f32 = 1e-5, half = 1e-2;
  double f64Normwise = 0, f32Normwise = 0;

  double relative(DType dtype) const {
    return dtype == DType::f64   ? f64
           : dtype == DType::f32 ? f32
           : isFloat(dtype)      ? half
                                 : 0.0;
  }
  double normwise(DType dtype) const {
    return dtype == DType::f64   ? f64Normwise
           : dtype == DType::f32 ? f32Normwise
                                 : 0.0;
  }
  // The bound for an element expected |e| and found |a| in a tensor of
  // |dtype| whose largest finite magnitude is |magnitude|.
  double bound(DType dtype, double e, double a, double magnitude) const {
    return std::max(relative(dtype) * std::max({1.0, std::fabs(e), std::fabs(a)}),
                    normwise(dtype) * magnitude);
  }
};

inline double largestMagnitude(const HostTensor &t) {
  double magnitude = 0;
  for (int64_t i = 0; i < t.size(); ++i)
    if (std::isfinite(t[i]))
      magnitude = std::max(magnitude, std::fabs(t[i]));
  return magnitude;
}

// "" when |actual| matches |expected| within |tolerance| (NaN where NaN is
// expected, the same infinity), else the first mismatch. With
// |absoluteSums| (for a reduce sum's or mean's result: the same reduction
// of its terms' absolute values) an element may also be off by the
// normwise fraction of that: the terms' rounding errors in another order
// of addition (the CPU BLAS tests' bound, relative to sum |a| |b|). With
// |spread| (roundingSpread's, for the result) an element may also be off
// by its spread, and one whose spread is infinite is not compared.
inline std::string compareWithin(const HostTensor &expected,
                                 const HostTensor &actual,
                                 const Tolerance &tolerance,
                                 const HostTensor *absoluteSums = nullptr,
                                 const HostTensor *spread = nullptr) {
  if (expected.shape() != actual.shape() || expected.dtype() != actual.dtype())
    return "expected " + expected.str() + ", found " + actual.str();
  DType dtype = expected.dtype();
  double magnitude = tolerance.normwise(dtype) > 0 ? largestMagnitude(expected) : 0;
  for (int64_t i = 0; i < expected.size(); ++i) {
    double e = expected[i], a = actual[i];
    if ((std::isnan(e) && std::isnan(a)) || e == a)
      continue;
    double tol = tolerance.bound(dtype, e, a, magnitude);
    if (absoluteSums)
      tol = std::max(tol, tolerance.normwise(dtype) * std::fabs((*absoluteSums)[i]));
    if (spread) {
      if (std::isinf((*spread)[i]))
        continue;
      tol = std::max(tol, (*spread)[i]);
    }
    if (!(std::fabs(e - a) <= tol)) {
      std::string what = "element " + std::to_string(i) + ": expected " +
                         std::to_string(e) + ", found " + std::to_string(a) +
                         " (tolerance " + std::to_string(tol);
      if (magnitude > 0)
        what += ", largest magnitude " + std::to_string(magnitude);
      return what + ")";
    }
  }
  return "";
}

// The unit roundoff of the arithmetic that computes |dtype|'s floats: 2^-53
// for f64, 2^-24 for f32 and for f16 and bf16 (the interpreter and the
// kernels compute those in f32 and round each result to its width; that
// last rounding is the same in both); 0 for integers.
inline double computeRoundoff(DType dtype) {
  return dtype == DType::f64 ? std::ldexp(1.0, -53)
         : isFloat(dtype)    ? std::ldexp(1.0, -24)
                             : 0.0;
}

// Whether the interpreter rounds |op|'s results where a kernel may round
// them differently: elementwise arithmetic and functions (a kernel's exp or
// tanh is another implementation, within a few ulps) and float converts
// that narrow. Negation, abs, relu, max, min, selects, compares, widening
// converts and data movement are exact everywhere.
inline bool roundsElementwise(mlir::Operation *op) {
  if (llvm::isa<NegOp, AbsOp, ReluOp, StopGradientOp, MaxOp, MinOp, SelectOp,
                CompareOp>(op))
    return false;
  if (auto convert = llvm::dyn_cast<ConvertOp>(op)) {
    DType from, to;
    if (!dtypeOfTensor(convert.getOperand().getType(), from) ||
        !dtypeOfTensor(convert.getType(), to) || !isFloat(from) || !isFloat(to))
      return false;
    // Narrowing, or between f16 and bf16.
    return from != to && byteWidth(to) <= byteWidth(from);
  }
  return llvm::isa<ScalarSemantics>(op);
}

// How far each result of |body| moves from |expected| (the interpreter's
// results on |inputs|) when the results of the ops that round move by
// their rounding errors, with random signs: an elementwise op's
// (roundsElementwise) by 8 unit roundoffs (computeRoundoff) of each
// element, a float reduce sum's or mean's by (terms - 1) unit roundoffs of
// the same reduction of its terms' absolute values (capped at
// |tolerance|'s normwise fraction where it has one): any order of
// addition is within that; a float reduce prod's by (terms - 1) unit
// roundoffs of itself, as any order of multiplication is. The moved values are
// not rounded to the result's type: later ops read them as they would a
// kernel's differently rounded ones. Runs the block |runs| times, on signs from
// |seed|, and keeps each element's largest move; an element that comes out
// non-finite in a run where it was finite (or the other way) gets an
// infinite spread.
//
// compareWithin allows an element its spread: a kernel rounds each op
// within an ulp or two of the interpreter and adds its sums in an order
// within the worst case, both well inside these moves, and where a result
// cancels (Adam's v = 0.999 v + 0.001 g^2 on a v drawn near -0.001 g^2,
// then divided into m) the spread grows with what the cancellation
// amplifies, which a bound relative to the result alone does not.
inline std::string
roundingSpread(mlir::Block &body, llvm::ArrayRef<HostTensor> inputs,
               llvm::ArrayRef<HostTensor> expected, const Tolerance &tolerance,
               uint64_t seed, std::vector<HostTensor> &spread, int runs = 4) {
  spread.clear();
  for (const HostTensor &e : expected)
    spread.emplace_back(DType::f64, e.shape(), 0.0);
  Interpreter interpreter;
  std::mt19937_64 rng;
  std::string problem;
  interpreter.onResults = [&](mlir::Operation *op,
                              llvm::ArrayRef<HostTensor> operands,
                              llvm::MutableArrayRef<HostTensor> results) {
    auto reduce = llvm::dyn_cast<ReduceOp>(op);
    bool sums = reduce && (reduce.getKind() == ReduceKind::sum ||
                           reduce.getKind() == ReduceKind::mean);
    bool products = reduce && reduce.getKind() == ReduceKind::prod;
    if (!sums && !products && !roundsElementwise(op))
      return;
    for (HostTensor &result : results) {
      double u = computeRoundoff(result.dtype());
      if (u == 0)
        continue;
      HostTensor scale = result;
      if (products) {
        double terms = double(operands.front().size()) /
                       std::max<int64_t>(result.size(), 1);
        for (double &v : scale.values())
          v = std::max(terms - 1, 1.0) * u * std::fabs(v);
      } else if (!sums) {
        for (double &v : scale.values())
          v = 8 * u * std::fabs(v);
      } else {
        HostTensor absolute = operands.front();
        for (double &v : absolute.values())
          v = std::fabs(v);
        llvm::SmallVector<HostTensor> totals;
        if (mlir::failed(interpreter.evaluate(op, absolute, totals))) {
          problem = "the interpreter failed on |terms| of " + printed(op);
          return;
        }
        double terms =
            double(absolute.size()) / std::max<int64_t>(result.size(), 1);
        double fraction = std::max(terms - 1, 1.0) * u;
        if (tolerance.normwise(result.dtype()) > 0)
          fraction = std::min(fraction, tolerance.normwise(result.dtype()));
        for (int64_t e = 0; e < result.size(); ++e)
          scale[e] = fraction * totals.front()[e];
      }
      for (int64_t e = 0; e < result.size(); ++e)
        result[e] += (rng() & 1 ? 1.0 : -1.0) * scale[e];
    }
  };
  for (int run = 0; run < runs; ++run) {
    rng.seed(seed * 0x9E3779B97F4A7C15ull + run + 1);
    llvm::SmallVector<HostTensor> moved;
    if (mlir::failed(interpreter.runBlock(body, inputs, moved)) ||
        !problem.empty())
      return problem.empty() ? std::string("the interpreter failed") : problem;
    for (size_t i = 0; i < expected.size(); ++i)
      for (int64_t e = 0; e < expected[i].size(); ++e) {
        double x = expected[i][e], y = moved[i][e];
        if (x == y || (std::isnan(x) && std::isnan(y)))
          continue;
        spread[i][e] = std::isfinite(x) && std::isfinite(y)
                           ? std::max(spread[i][e], std::fabs(x - y))
                           : std::numeric_limits<double>::infinity();
      }
  }
  return "";
}

class KernelTestBase : public ::testing::Test {
protected:
  KernelTestBase() {
    context.loadDialect<KilnDialect, mlir::func::FuncDialect>();
    handler = test::collectDiagnostics(context, diagnostics);
  }

  // "" when |actual| matches |expected| within |tolerance| or within
  // |spread| (roundingSpread's, when given), else the first mismatch.
  virtual std::string compare(const HostTensor &expected,
                              const HostTensor &actual,
                              const HostTensor *spread = nullptr) {
    return compareWithin(expected, actual, tolerance, nullptr, spread);
  }

  // The last kiln.fusion of the module |text| holds, which the fixture
  // keeps alive until the next call; null when the text does not parse (the
  // reason is in |diagnostics|).
  FusionOp parseFusion(llvm::StringRef text) {
    parsed = mlir::parseSourceString<mlir::ModuleOp>(text, &context);
    FusionOp fusion;
    if (parsed)
      parsed->walk([&](FusionOp f) { fusion = f; });
    return fusion;
  }

  // The -O3 LLVM IR of |fusion|'s CPU kernel (optimizedKernelIR) as text;
  // "" (and a recorded failure) when it does not compile.
  std::string optimizedKernelText(FusionOp fusion) {
    llvm::LLVMContext llvmContext;
    mlir::FailureOr<std::unique_ptr<llvm::Module>> ir =
        optimizedKernelIR(fusion, llvmContext);
    if (mlir::failed(ir)) {
      ADD_FAILURE() << "compilation failed: " << diagnostics;
      return "";
    }
    std::string text;
    llvm::raw_string_ostream os(text);
    (*ir)->print(os, nullptr);
    return text;
  }

  // Compiles |fusion|, runs it and the interpreter on random inputs; returns
  // "" or what went wrong.
  std::string check(FusionOp fusion, uint64_t seed, int64_t intBound) {
    std::mt19937_64 rng(seed);
    std::vector<HostTensor> inputs;
    for (mlir::Value input : fusion.getInputs())
      inputs.push_back(
          randomTensor(llvm::cast<mlir::RankedTensorType>(input.getType()), rng, intBound));
    llvm::SmallVector<HostTensor> expected;
    Interpreter interpreter;
    if (mlir::failed(interpreter.evaluate(fusion, inputs, expected)))
      return "the interpreter failed: " + diagnostics;
    std::vector<HostTensor> spread;
    if (std::string problem = roundingSpread(fusion.getBody().front(), inputs,
                                             expected, tolerance, seed, spread);
        !problem.empty())
      return problem + ": " + diagnostics;
    mlir::FailureOr<CompiledKernel> kernel = compileLoopFusion(fusion);
    if (mlir::failed(kernel))
      return "compilation failed: " + diagnostics;
    std::vector<HostTensor> actual;
    for (const HostTensor &e : expected)
      actual.emplace_back(e.dtype(), e.shape(), std::nan(""));
    llvm::SmallVector<const HostTensor *> inputPtrs;
    for (const HostTensor &t : inputs)
      inputPtrs.push_back(&t);
    llvm::SmallVector<HostTensor *> outputPtrs;
    for (HostTensor &t : actual)
      outputPtrs.push_back(&t);
    std::string error;
    if (mlir::failed(kernel->run(inputPtrs, outputPtrs, &error)))
      return "run failed: " + error;
    for (size_t i = 0; i < expected.size(); ++i) {
      std::string mismatch = compare(expected[i], actual[i], &spread[i]);
      if (!mismatch.empty())
        return "result " + std::to_string(i) + ": " + mismatch;
    }
    return "";
  }

  // check(), recording a failure that names the seed (and how to rerun it)
  // and the fusion. Returns whether the results matched.
  bool expectMatches(FusionOp fusion, uint64_t seed, int64_t intBound) {
    diagnostics.clear();
    std::string result = check(fusion, seed, intBound);
    if (result.empty())
      return true;
    ADD_FAILURE() << "seed " << seed << " (KILN_CODEGEN_SEED=" << seed
                  << "): " << result << "\n" << printed(fusion);
    return false;
  }

  // Checks |count| random fusions of element type |element|, each built by
  // Builder(&context, seed, element).build() (a module whose @main holds
  // one fusion), on seeds from baseSeed() on; stops at the first mismatch.
  template <typename Builder>
  void checkRandomFusions(mlir::Type element, int count, int64_t intBound) {
    uint64_t seed = baseSeed();
    std::cout << "[ seed     ] KILN_CODEGEN_SEED=" << seed << "\n";
    for (int i = 0; i < count; ++i, ++seed) {
      diagnostics.clear();
      mlir::OwningOpRef<mlir::ModuleOp> module =
          Builder(&context, seed, element).build();
      ASSERT_TRUE(mlir::succeeded(mlir::verify(*module)))
          << "seed " << seed << " built invalid IR: " << diagnostics;
      FusionOp fusion;
      module->walk([&](FusionOp f) { fusion = f; });
      if (!expectMatches(fusion, seed, intBound))
        return;
    }
  }

  // Compiles |model| (a zoo model) with the default pipeline, in place.
  void compileModel(mlir::OwningOpRef<mlir::ModuleOp> &model) {
    ASSERT_TRUE(model) << diagnostics;
    PipelineOptions options;
    options.gradAccum = gradAccum;
    ASSERT_TRUE(mlir::succeeded(runCompilePipeline(*model, options)))
        << diagnostics;
  }

  // Compiles |model| (a zoo model) and checks every fusion |select| takes,
  // all on one seed; |minFusions| guards against a pipeline change that
  // silently leaves nothing to check. Prints how many fusions of each kind
  // the step has.
  template <typename Select>
  void checkZooFusions(mlir::OwningOpRef<mlir::ModuleOp> model, int64_t intBound,
                       size_t minFusions, Select select) {
    ASSERT_NO_FATAL_FAILURE(compileModel(model));
    llvm::SmallVector<FusionOp> fusions;
    std::map<std::string, int> kinds;
    model->walk([&](FusionOp f) {
      ++kinds[stringifyFusionKind(f.getKind()).str()];
      if (select(f))
        fusions.push_back(f);
    });
    for (auto &[kind, n] : kinds)
      std::cout << "[ fusions  ] " << kind << ": " << n << "\n";
    EXPECT_GE(fusions.size(), minFusions);
    RecordProperty("checked_fusions", static_cast<int>(fusions.size()));
    uint64_t seed = baseSeed();
    for (FusionOp fusion : fusions)
      expectMatches(fusion, seed, intBound);
  }

  Tolerance tolerance;
  // The micro-batches per step checkZooFusions compiles the model with.
  int64_t gradAccum = 1;
  mlir::MLIRContext context;
  std::unique_ptr<mlir::ScopedDiagnosticHandler> handler;
  std::string diagnostics;
  // parseFusion's module (after |context|, so destroyed before it).
  mlir::OwningOpRef<mlir::ModuleOp> parsed;
};

} // namespace kiln::codegen_test

#endif // KILN_TESTS_UNIT_CODEGEN_KERNELTESTSUPPORT_H
