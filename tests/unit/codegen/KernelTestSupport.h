//===- KernelTestSupport.h - shared parts of the CPU kernel tests -*- C++ -*-===//
//
// Random inputs, the seed, and a fixture that compiles a fusion, runs it and
// the reference interpreter on the same inputs and compares the results:
// one fusion, a run of random fusions from a builder, or the fusions of a
// zoo model's compiled training step. Each test file supplies its own
// comparison (its tolerance differs: sums reorder more arithmetic than
// elementwise chains).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TESTS_UNIT_CODEGEN_KERNELTESTSUPPORT_H
#define KILN_TESTS_UNIT_CODEGEN_KERNELTESTSUPPORT_H

#include "codegen/cpu/LowerToLLVM.h"
#include "tests/unit/CollectDiagnostics.h"

#include "ir/Interpreter.h"
#include "ir/KilnDialect.h"
#include "ir/KilnOps.h"
#include "passes/Pipelines.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace kiln::codegen_test {

// The first seed of a run: KILN_CODEGEN_SEED when set, else fresh.
inline uint64_t baseSeed() {
  if (const char *fixed = std::getenv("KILN_CODEGEN_SEED"))
    return std::strtoull(fixed, nullptr, 10);
  return std::random_device{}();
}

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

class KernelTestBase : public ::testing::Test {
protected:
  KernelTestBase() {
    context.loadDialect<KilnDialect, mlir::func::FuncDialect>();
    handler = test::collectDiagnostics(context, diagnostics);
  }

  // "" when |actual| matches |expected|, else the first mismatch.
  virtual std::string compare(const HostTensor &expected,
                              const HostTensor &actual) = 0;

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
    ASSERT_TRUE(mlir::succeeded(runCompilePipeline(*model, options)))
        << diagnostics;
  }

  mlir::MLIRContext context;
  std::unique_ptr<mlir::ScopedDiagnosticHandler> handler;
  std::string diagnostics;
};

} // namespace kiln::codegen_test

#endif // KILN_TESTS_UNIT_CODEGEN_KERNELTESTSUPPORT_H
