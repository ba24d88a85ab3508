//===- PassTestSupport.h - a fixture for tests that run kiln's passes -*- C++ -*-===//
//
// What the pass tests that compare modules (FuseEquivalenceTest,
// PlanBuffersTest) share: a context with kiln's dialects whose diagnostics
// are collected into |diagnostics| for failure messages, cloning a module,
// running a list of passes on one, the pass lists they both use, printing
// an op, and the seed of a run (fresh, or the one a variable names).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TESTS_UNIT_PASSES_PASSTESTSUPPORT_H
#define KILN_TESTS_UNIT_PASSES_PASSTESTSUPPORT_H

#include "tests/unit/CollectDiagnostics.h"
#include "tests/unit/TestSeed.h"

#include "ir/KilnDialect.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <random>
#include <string>

namespace kiln::test {

// The first seed of a run: |variable| (KILN_FUSE_SEED, ...) when set, else
// fresh.
inline uint64_t baseSeed(const char *variable) { return seedFrom(variable); }

class PassTestBase : public ::testing::Test {
protected:
  PassTestBase() {
    context.loadDialect<KilnDialect, mlir::func::FuncDialect>();
    handler = test::collectDiagnostics(context, diagnostics);
  }

  mlir::OwningOpRef<mlir::ModuleOp> cloneModule(mlir::ModuleOp module) {
    return mlir::OwningOpRef<mlir::ModuleOp>(
        mlir::cast<mlir::ModuleOp>(module->clone()));
  }

  // Runs the passes |fill| adds on |module|.
  bool run(mlir::ModuleOp module,
           const std::function<void(mlir::PassManager &)> &fill) {
    mlir::PassManager pm(&context);
    fill(pm);
    return mlir::succeeded(pm.run(module));
  }

  // The training step of a model: autodiff, the optimizer, cleanup.
  static void trainingStep(mlir::PassManager &pm) {
    pm.addPass(createKilnAutodiff());
    pm.addPass(createKilnApplyOptimizer());
    pm.addPass(mlir::createCanonicalizerPass());
    pm.addPass(mlir::createCSEPass());
  }
  // kiln-decompose and cleanup, then kiln-fuse.
  static void decomposeAndFuse(mlir::PassManager &pm) {
    pm.addPass(createKilnDecompose());
    pm.addPass(mlir::createCanonicalizerPass());
    pm.addPass(mlir::createCSEPass());
    pm.addPass(createKilnFuse());
  }

  std::string print(mlir::Operation *op) {
    std::string text;
    llvm::raw_string_ostream os(text);
    op->print(os);
    return text;
  }

  mlir::MLIRContext context;
  std::string diagnostics;
  std::unique_ptr<mlir::ScopedDiagnosticHandler> handler;
};

} // namespace kiln::test

#endif // KILN_TESTS_UNIT_PASSES_PASSTESTSUPPORT_H
