//===- KernelTestSupport.h - shared parts of the CPU kernel tests -*- C++ -*-===//
//
// Random inputs, the seed, and a fixture that compiles a fusion, runs it and
// the reference interpreter on the same inputs and compares the results:
// one fusion, a run of random fusions from a builder, or the fusions of a
// zoo model's compiled training step. Each fixture sets its Tolerance (they
// differ: sums reorder more arithmetic than elementwise chains, and a GPU
// kernel's lanes reorder them more than a CPU loop does).
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
// of addition (the CPU BLAS tests' bound, relative to sum |a| |b|).
inline std::string compareWithin(const HostTensor &expected,
                                 const HostTensor &actual,
                                 const Tolerance &tolerance,
                                 const HostTensor *absoluteSums = nullptr) {
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

class KernelTestBase : public ::testing::Test {
protected:
  KernelTestBase() {
    context.loadDialect<KilnDialect, mlir::func::FuncDialect>();
    handler = test::collectDiagnostics(context, diagnostics);
  }

  // "" when |actual| matches |expected| within |tolerance|, else the first
  // mismatch.
  virtual std::string compare(const HostTensor &expected,
                              const HostTensor &actual) {
    return compareWithin(expected, actual, tolerance);
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
      std::string mismatch = compare(expected[i], actual[i]);
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
