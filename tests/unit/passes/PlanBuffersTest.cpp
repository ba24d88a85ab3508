//===- PlanBuffersTest.cpp - plans run in a simulated arena ---------------===//
//
// kiln-schedule and kiln-plan-buffers end to end. The strongest check runs
// a planned step the way a runtime would: one byte arena and one buffer per
// argument, each kernel reading its operands from where the plan put them
// and writing its results there (an in-place update over its argument), in
// the scheduled order. Any buffer overwritten while still needed changes
// the results, which must equal the reference interpreter's on the module
// before scheduling, bit for bit. Random graphs (a fresh seed every run,
// printed; KILN_PLAN_SEED=N reruns one) and the zoo's training steps, fused
// and unfused. Then: the zoo steps at their benchmark sizes stay within 10%
// of the lower bound, the schedule is deterministic and no worse than the
// original order, and the buffer-assignment report names its buffers.
//
//===----------------------------------------------------------------------===//

#include "tests/unit/passes/PassTestSupport.h"
#include "tests/unit/passes/RandomGraph.h"

#include "codegen/cpu/LowerToLLVM.h"

#include "ir/Interpreter.h"
#include "ir/KilnOps.h"
#include "passes/BufferReport.h"
#include "passes/Passes.h"
#include "tools/kiln/lib/Zoo.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/ADT/APFloat.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <random>

namespace {

using namespace mlir;
using namespace kiln;
using ::testing::HasSubstr;

// Element |i| of a tensor goes to memory through storeNativeElement
// (LowerToLLVM.h, the kernels' layout). Loads are this file's own: an i1
// byte is read as it is, so one that no kernel wrote (the arena is filled
// with 0xCD) reads as -51, neither false nor true.
double loadElement(DType dtype, const uint8_t *at) {
  switch (dtype) {
  case DType::f64: {
    double v;
    std::memcpy(&v, at, 8);
    return v;
  }
  case DType::f32: {
    float f;
    std::memcpy(&f, at, 4);
    return f;
  }
  case DType::f16:
  case DType::bf16: {
    uint16_t bits;
    std::memcpy(&bits, at, 2);
    llvm::APFloat value(dtype == DType::f16 ? llvm::APFloat::IEEEhalf()
                                            : llvm::APFloat::BFloat(),
                        llvm::APInt(16, bits));
    bool lost;
    value.convert(llvm::APFloat::IEEEdouble(),
                  llvm::APFloat::rmNearestTiesToEven, &lost);
    return value.convertToDouble();
  }
  case DType::i64: {
    int64_t x;
    std::memcpy(&x, at, 8);
    return x;
  }
  case DType::i32: {
    int32_t x;
    std::memcpy(&x, at, 4);
    return x;
  }
  case DType::i8:
  case DType::i1: {
    int8_t x;
    std::memcpy(&x, at, 1);
    return x;
  }
  }
  return 0;
}

// Runs @main of a planned module in simulated memory (see the file comment).
// Returns "" and sets |results|, or says what went wrong.
std::string runPlanned(func::FuncOp func, ArrayRef<HostTensor> args,
                       SmallVectorImpl<HostTensor> &results) {
  auto arenaAttr = func->getAttrOfType<IntegerAttr>("kiln.arena_bytes");
  if (!arenaAttr)
    return "no kiln.arena_bytes on @" + func.getName().str();
  std::vector<uint8_t> arena(arenaAttr.getInt(), 0xCD);
  std::vector<std::vector<uint8_t>> argMemory;
  Block &block = func.front();
  struct Place {
    int64_t arg = -1, offset = 0;
  };
  DenseMap<Value, Place> places;
  for (BlockArgument arg : block.getArguments()) {
    const HostTensor &tensor = args[arg.getArgNumber()];
    std::vector<uint8_t> &memory = argMemory.emplace_back(
        std::max<int64_t>(1, tensor.size() * byteWidth(tensor.dtype())));
    for (int64_t i = 0; i < tensor.size(); ++i)
      storeNativeElement(tensor.dtype(), tensor[i], memory.data() + i * byteWidth(tensor.dtype()));
    places[arg] = {arg.getArgNumber(), 0};
  }
  auto memoryOf = [&](Place place, int64_t bytes) -> uint8_t * {
    if (place.arg >= 0)
      return (int64_t)argMemory[place.arg].size() >= bytes
                 ? argMemory[place.arg].data()
                 : nullptr;
    return place.offset + bytes <= (int64_t)arena.size()
               ? arena.data() + place.offset
               : nullptr;
  };
  auto load = [&](Value value, HostTensor &tensor) -> std::string {
    auto type = cast<RankedTensorType>(value.getType());
    DType dtype;
    if (!dtypeOfTensor(type, dtype))
      return "unsupported type";
    tensor = HostTensor(dtype, type.getShape());
    uint8_t *at =
        memoryOf(places.lookup(value), tensor.size() * byteWidth(dtype));
    if (!at)
      return "a buffer lies outside its memory";
    for (int64_t i = 0; i < tensor.size(); ++i)
      tensor[i] = loadElement(dtype, at + i * byteWidth(dtype));
    return "";
  };
  Interpreter interpreter;
  for (Operation &op : block.without_terminator()) {
    auto offsets = op.getAttrOfType<DenseI64ArrayAttr>("kiln.buffer_offsets");
    auto aliases = op.getAttrOfType<DenseI64ArrayAttr>("kiln.aliases");
    if (!offsets)
      return "an op without kiln.buffer_offsets";
    SmallVector<HostTensor> operands(op.getNumOperands()), outputs;
    for (auto [i, operand] : llvm::enumerate(op.getOperands()))
      if (std::string error = load(operand, operands[i]); !error.empty())
        return error;
    if (failed(interpreter.evaluate(&op, operands, outputs)))
      return "the interpreter failed on " + op.getName().getStringRef().str();
    for (auto [k, result] : llvm::enumerate(op.getResults())) {
      Place place;
      if (offsets[k] >= 0)
        place.offset = offsets[k];
      else if (aliases && aliases[k] >= 0)
        place.arg = aliases[k];
      else
        return "a result at offset -1 without kiln.aliases";
      places[result] = place;
      const HostTensor &tensor = outputs[k];
      uint8_t *at = memoryOf(place, tensor.size() * byteWidth(tensor.dtype()));
      if (!at)
        return "a result lies outside its memory";
      for (int64_t i = 0; i < tensor.size(); ++i)
        storeNativeElement(tensor.dtype(), tensor[i], at + i * byteWidth(tensor.dtype()));
    }
  }
  for (Value value : block.getTerminator()->getOperands())
    if (std::string error = load(value, results.emplace_back()); !error.empty())
      return error;
  return "";
}

class PlanBuffersTest : public test::PassTestBase {
protected:
  static void schedulePlan(PassManager &pm) {
    pm.addPass(createKilnSchedule());
    pm.addPass(createKilnPlanBuffers());
  }

  // "" when the planned @main of |planned| run in simulated memory gives
  // what the interpreter gives for |reference|, bit for bit.
  std::string compare(ModuleOp reference, ModuleOp planned,
                      ArrayRef<HostTensor> args) {
    Interpreter interpreter;
    auto want =
        interpreter.run(reference.lookupSymbol<func::FuncOp>("main"), args);
    if (failed(want))
      return "the reference module does not run: " + diagnostics;
    SmallVector<HostTensor> got;
    std::string error =
        runPlanned(planned.lookupSymbol<func::FuncOp>("main"), args, got);
    if (!error.empty())
      return error;
    if (want->size() != got.size())
      return "result counts differ";
    for (size_t r = 0; r < got.size(); ++r) {
      const HostTensor &a = (*want)[r], &b = got[r];
      for (int64_t i = 0; i < a.size(); ++i)
        if (!(std::isnan(a[i]) && std::isnan(b[i])) && a[i] != b[i])
          return "result " + std::to_string(r) + " element " +
                 std::to_string(i) + ": expected " + std::to_string(a[i]) +
                 ", got " + std::to_string(b[i]);
    }
    return "";
  }

  // Plans |step| (unfused, then fused) and runs both plans in memory.
  void checkPlannedStep(OwningOpRef<ModuleOp> step, int64_t intBound) {
    ASSERT_TRUE(step) << diagnostics;
    uint64_t seed = test::baseSeed("KILN_PLAN_SEED");
    SCOPED_TRACE("argument seed " + std::to_string(seed));
    std::vector<HostTensor> args = test::randomArguments(
        step->lookupSymbol<func::FuncOp>("main"), seed, intBound);
    OwningOpRef<ModuleOp> planned = cloneModule(*step);
    ASSERT_TRUE(run(*planned, schedulePlan)) << diagnostics;
    ASSERT_TRUE(succeeded(verify(*planned)));
    EXPECT_EQ(compare(*step, *planned, args), "");
    OwningOpRef<ModuleOp> fused = cloneModule(*step);
    ASSERT_TRUE(run(*fused, decomposeAndFuse)) << diagnostics;
    OwningOpRef<ModuleOp> fusedPlanned = cloneModule(*fused);
    ASSERT_TRUE(run(*fusedPlanned, schedulePlan)) << diagnostics;
    ASSERT_TRUE(succeeded(verify(*fusedPlanned)));
    EXPECT_EQ(compare(*fused, *fusedPlanned, args), "");
  }
};

//===----------------------------------------------------------------------===//
// Plans run in memory
//===----------------------------------------------------------------------===//

TEST_F(PlanBuffersTest, RandomGraphsRunInTheirPlannedMemory) {
  uint64_t seed = test::baseSeed("KILN_PLAN_SEED");
  std::cout << "[ seed     ] KILN_PLAN_SEED=" << seed << "\n";
  for (uint64_t i = 0; i < 120; ++i) {
    uint64_t s = seed + i;
    SCOPED_TRACE("random graph seed " + std::to_string(s) +
                 " (rerun it with KILN_PLAN_SEED=" + std::to_string(s) + ")");
    diagnostics.clear();
    OwningOpRef<ModuleOp> original = test::buildRandomGraph(&context, s);
    std::vector<HostTensor> args = test::randomArguments(
        original->lookupSymbol<func::FuncOp>("main"), s, /*intBound=*/2);
    OwningOpRef<ModuleOp> planned = cloneModule(*original);
    ASSERT_TRUE(run(*planned, schedulePlan)) << diagnostics << print(*original);
    EXPECT_EQ(compare(*original, *planned, args), "") << print(*planned);
    // Fused: whole fusions are kernels, some writing over a dying input.
    OwningOpRef<ModuleOp> fused = cloneModule(*original);
    ASSERT_TRUE(run(*fused, decomposeAndFuse)) << diagnostics;
    OwningOpRef<ModuleOp> fusedPlanned = cloneModule(*fused);
    ASSERT_TRUE(run(*fusedPlanned, schedulePlan))
        << diagnostics << print(*fused);
    EXPECT_EQ(compare(*fused, *fusedPlanned, args), "") << print(*fusedPlanned);
    if (HasFailure())
      return;
  }
}

TEST_F(PlanBuffersTest, MlpStepRunsInItsPlannedMemory) {
  cli::MlpOptions options;
  options.layers = {12, 8, 6, 4};
  options.batch = 5;
  OwningOpRef<ModuleOp> step = cli::buildMlp(&context, options);
  ASSERT_TRUE(step && run(*step, trainingStep)) << diagnostics;
  checkPlannedStep(std::move(step), 4);
}

TEST_F(PlanBuffersTest, LeNet5StepRunsInItsPlannedMemory) {
  cli::LeNet5Options options;
  options.batch = 2;
  OwningOpRef<ModuleOp> step = cli::buildLeNet5(&context, options);
  ASSERT_TRUE(step && run(*step, trainingStep)) << diagnostics;
  checkPlannedStep(std::move(step), 10);
}

TEST_F(PlanBuffersTest, GptStepRunsInItsPlannedMemory) {
  cli::GptOptions options;
  options.layers = 2;
  options.hidden = 16;
  options.heads = 2;
  options.seq = 6;
  options.vocab = 20;
  options.batch = 2;
  OwningOpRef<ModuleOp> step = cli::buildGpt(&context, options);
  ASSERT_TRUE(step && run(*step, trainingStep)) << diagnostics;
  checkPlannedStep(std::move(step), 20);
}

//===----------------------------------------------------------------------===//
// The zoo at benchmark sizes: planned peak against the lower bound
//===----------------------------------------------------------------------===//

class ZooPeakTest : public PlanBuffersTest {
protected:
  // Plans |model|'s training step, unfused and fused, and checks the arena
  // against the lower bound; prints both for the record.
  void checkPeaks(const char *name, OwningOpRef<ModuleOp> model) {
    ASSERT_TRUE(model && run(*model, trainingStep)) << diagnostics;
    for (bool fused : {false, true}) {
      OwningOpRef<ModuleOp> step = cloneModule(*model);
      if (fused)
        ASSERT_TRUE(run(*step, decomposeAndFuse)) << diagnostics;
      // The lower bound over the original order, for comparison.
      OwningOpRef<ModuleOp> unscheduled = cloneModule(*step);
      ASSERT_TRUE(run(*unscheduled, [](PassManager &pm) {
        pm.addPass(createKilnPlanBuffers());
      })) << diagnostics;
      ASSERT_TRUE(run(*step, schedulePlan)) << diagnostics;
      auto func = step->lookupSymbol<func::FuncOp>("main");
      auto original = unscheduled->lookupSymbol<func::FuncOp>("main");
      int64_t arena =
          func->getAttrOfType<IntegerAttr>("kiln.arena_bytes").getInt();
      int64_t peak =
          func->getAttrOfType<IntegerAttr>("kiln.peak_bytes").getInt();
      int64_t lower =
          func->getAttrOfType<IntegerAttr>("kiln.lower_bound_bytes").getInt();
      int64_t arguments = peak - arena;
      int64_t arenaLower = lower - arguments;
      int64_t originalLower =
          original->getAttrOfType<IntegerAttr>("kiln.lower_bound_bytes")
              .getInt() -
          arguments;
      std::cout << "[ peak     ] " << name << (fused ? " fused" : " unfused")
                << ": arena " << arena << " bytes, lower bound " << arenaLower
                << " (" << double(arena) / arenaLower << "x; original order "
                << originalLower << "), with arguments " << peak << " / "
                << lower << "\n";
      EXPECT_GE(arena, arenaLower);
      EXPECT_LE(arena, arenaLower * 1.10) << name << (fused ? " fused" : "");
      EXPECT_LE(arenaLower, originalLower)
          << "the schedule raised the peak of " << name;
    }
  }
};

TEST_F(ZooPeakTest, Mlp) {
  cli::MlpOptions options; // 784-512-256-10, batch 128
  checkPeaks("mlp", cli::buildMlp(&context, options));
}

TEST_F(ZooPeakTest, LeNet5) {
  cli::LeNet5Options options; // batch 128
  checkPeaks("lenet5", cli::buildLeNet5(&context, options));
}

TEST_F(ZooPeakTest, Gpt) {
  cli::GptOptions options;
  options.layers = 2;
  options.hidden = 128;
  options.heads = 4;
  options.seq = 64;
  options.vocab = 512;
  options.batch = 8;
  checkPeaks("gpt", cli::buildGpt(&context, options));
}

//===----------------------------------------------------------------------===//
// Schedule and report
//===----------------------------------------------------------------------===//

TEST_F(PlanBuffersTest, ScheduleIsDeterministic) {
  cli::GptOptions options;
  options.layers = 1;
  options.hidden = 16;
  options.heads = 2;
  options.seq = 6;
  options.vocab = 20;
  options.batch = 2;
  OwningOpRef<ModuleOp> step = cli::buildGpt(&context, options);
  ASSERT_TRUE(step && run(*step, trainingStep)) << diagnostics;
  OwningOpRef<ModuleOp> first = cloneModule(*step), second = cloneModule(*step);
  ASSERT_TRUE(run(*first, schedulePlan));
  ASSERT_TRUE(run(*second, schedulePlan));
  EXPECT_EQ(print(*first), print(*second));
  EXPECT_NE(print(*first), print(*step));
}

constexpr const char *kReportModule = R"mlir(
func.func @main(%a: tensor<256xf32>, %w: tensor<256xf32>)
    -> (tensor<256xf32> {kiln.updates = 1 : i64}, tensor<f32>) {
  %0 = kiln.exp %a : tensor<256xf32> loc("first.exp")
  %1 = kiln.mul %0, %a : tensor<256xf32> loc(fused["grad.mul", "second"("f.py":3:1)])
  %2 = kiln.sub %w, %1 : tensor<256xf32> loc("update")
  %3 = kiln.reduce sum %0, dims = [0] : tensor<256xf32> -> tensor<f32> loc("loss")
  return %2, %3 : tensor<256xf32>, tensor<f32>
}
)mlir";

TEST_F(PlanBuffersTest, ReportNamesBuffersByOpAndSourceNode) {
  OwningOpRef<ModuleOp> module =
      parseSourceString<ModuleOp>(kReportModule, &context);
  ASSERT_TRUE(module) << diagnostics;
  auto func = module->lookupSymbol<func::FuncOp>("main");
  std::string before;
  llvm::raw_string_ostream beforeOs(before);
  writeBufferReport(func, beforeOs);
  EXPECT_THAT(before, HasSubstr("no buffer plan"));

  ASSERT_TRUE(run(*module, schedulePlan)) << diagnostics;
  std::string report;
  llvm::raw_string_ostream os(report);
  writeBufferReport(func, os);
  // The update %2 goes over %w; the rest are arena buffers.
  int64_t arena = func->getAttrOfType<IntegerAttr>("kiln.arena_bytes").getInt();
  EXPECT_THAT(report, HasSubstr("arena: " + std::to_string(arena) + " bytes"));
  EXPECT_THAT(report, HasSubstr("updates in place: 1 of 1"));
  EXPECT_THAT(report, HasSubstr("kiln.exp #0: first.exp"));
  EXPECT_THAT(report, HasSubstr("kiln.mul #0: grad.mul, second"));
  EXPECT_THAT(report, HasSubstr("arguments: 2 buffers, 2048 bytes"));
  EXPECT_THAT(report, HasSubstr("peak / lower bound = "));
  EXPECT_EQ(report.find("update\n"), std::string::npos)
      << "the in-place update is not an arena buffer";
}

} // namespace
