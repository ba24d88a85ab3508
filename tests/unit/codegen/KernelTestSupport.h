//===- KernelTestSupport.h - shared parts of the CPU kernel tests -*- C++ -*-===//
//
// Random inputs, the seed, and a fixture that compiles a fusion, runs it and
// the reference interpreter on the same inputs and compares the results.
// Each test file supplies its own comparison (its tolerance differs: sums
// reorder more arithmetic than elementwise chains).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TESTS_UNIT_CODEGEN_KERNELTESTSUPPORT_H
#define KILN_TESTS_UNIT_CODEGEN_KERNELTESTSUPPORT_H

#include "codegen/cpu/LowerToLLVM.h"

#include "ir/Interpreter.h"
#include "ir/KilnDialect.h"
#include "ir/KilnOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
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
    handler = std::make_unique<mlir::ScopedDiagnosticHandler>(
        &context, [this](mlir::Diagnostic &d) {
          std::string text;
          llvm::raw_string_ostream os(text);
          os << d.getLocation() << ": " << d;
          diagnostics += os.str() + "\n";
          return mlir::success();
        });
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

  mlir::MLIRContext context;
  std::unique_ptr<mlir::ScopedDiagnosticHandler> handler;
  std::string diagnostics;
};

} // namespace kiln::codegen_test

#endif // KILN_TESTS_UNIT_CODEGEN_KERNELTESTSUPPORT_H
