//===- EmulationHarness.h - emitted CUDA kernels run on the host -*- C++ -*-===//
//
// CudaEmulationTest's harness: a fusion's kernel emitted as CUDA C++
// (codegen/cuda/CudaEmitter.h), its inputs drawn at random and its results
// evaluated by the reference interpreter (add); or every kernel of a
// compiled step's package as buildStepPackage collects them (addPackaged).
// runAll compiles all of them for the host in one translation unit under
// codegen/cuda/CudaEmulation.h (HostKernels.h), runs each with 64-thread
// blocks and at most 3 blocks on 64-byte aligned buffers, and compares its
// results with the interpreter's within the fixture's Tolerance (a
// compare's result may differ only where its operands tie within it);
// assembleAllForSm90 takes them through NVRTC and ptxas.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TESTS_UNIT_CUDA_EMULATIONHARNESS_H
#define KILN_TESTS_UNIT_CUDA_EMULATIONHARNESS_H

#include "codegen/cuda/CudaEmitter.h"
#include "tests/unit/codegen/KernelTestSupport.h"
#include "tests/unit/cuda/HostKernels.h"
#include "tests/unit/cuda/LoopChain.h"
#include "tests/unit/cuda/Sm90Kernels.h"

#include "ir/Interpreter.h"
#include "ir/KilnOps.h"
#include "passes/Pipelines.h"
#include "tools/kiln/lib/PackageBuilder.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <new>
#include <random>
#include <string>
#include <vector>

namespace kiln::cuda_emulation {

// A kernel buffer of |tensor| (LowerToLLVM.h's layout), at least 16 bytes.
inline std::vector<uint8_t> toNative(const HostTensor &tensor) {
  std::vector<uint8_t> buffer;
  toNativeBuffer(tensor, buffer);
  if (buffer.size() < 16)
    buffer.resize(16, 0);
  return buffer;
}

// Kernel buffers start 64-byte aligned, as the runtime's do (the
// compiler's arena alignment; cudaMalloc gives 256): a kernel may take a
// 32-byte vector (16 halves) from a buffer's start, which malloc's 16-byte
// alignment would not allow (the emulation refuses it, as a GPU would).
template <class T> struct Aligned64 {
  using value_type = T;
  Aligned64() = default;
  template <class U> Aligned64(const Aligned64<U> &) {}
  T *allocate(size_t n) {
    return static_cast<T *>(::operator new(n * sizeof(T), std::align_val_t(64)));
  }
  void deallocate(T *p, size_t) { ::operator delete(p, std::align_val_t(64)); }
  bool operator==(const Aligned64 &) const { return true; }
};
using KernelBuffer = std::vector<uint8_t, Aligned64<uint8_t>>;

// A kiln.compare's result against the interpreter's, given the compare's
// operands |lhs| and |rhs| as the interpreter computed them: an element
// may come out either way where the two are equal within the bound float
// results are held to (a max's gradient mask, compare ge x, tanh(x), for
// x where tanh(x) rounds to x in the interpreter and to x's neighbour on
// the device: both within an ulp of the truth).
inline std::string compareWithTies(const HostTensor &expected,
                                   const HostTensor &actual, const HostTensor &lhs,
                                   const HostTensor &rhs,
                                   const codegen_test::Tolerance &tolerance) {
  double magnitude = std::max(codegen_test::largestMagnitude(lhs),
                              codegen_test::largestMagnitude(rhs));
  for (int64_t i = 0; i < expected.size(); ++i) {
    if (expected[i] == actual[i])
      continue;
    double l = lhs[i], r = rhs[i];
    double tol = tolerance.bound(lhs.dtype(), l, r, magnitude);
    if (!(std::fabs(l - r) <= tol))
      return "element " + std::to_string(i) + ": expected " +
             std::to_string(expected[i]) + ", found " + std::to_string(actual[i]) +
             " (the compare's operands " + std::to_string(l) + " and " +
             std::to_string(r) + " differ by more than " + std::to_string(tol) + ")";
  }
  return "";
}

// A kernel added: its source and launch grid, its inputs and the
// interpreter's results.
struct EmulatedKernel {
  std::string name, source, fusionText;
  uint64_t seed = 0;
  unsigned grid = 1;
  // The threads a block launches with: the launch rule's, as the runtime
  // launches it (a row-group kernel's threads cover its row).
  unsigned block = 64;
  std::vector<HostTensor> inputs, expected;
  // Per result written by a kiln.compare: its operands as the interpreter
  // computes them (compareWithTies).
  std::map<size_t, std::pair<HostTensor, HostTensor>> compareOperands;
  // Per result that is a float reduce sum or mean: the same reduction of
  // its terms' absolute values (compareWithin).
  std::map<size_t, HostTensor> absoluteSums;
  // Per result that counts equal floats (a reduce of a converted compare
  // eq): the same count of the pairs within the tolerance; the kernel's
  // count may differ from the interpreter's by those it found unequal.
  std::map<size_t, HostTensor> nearTies;
  // Per result: how far rounding moves it (roundingSpread).
  std::vector<HostTensor> spread;
};

// The fixture: kernels added, run on the host and compared.
class EmulationHarness : public codegen_test::KernelTestBase {
protected:
  // Within the dtype's bound: f32 and f64 relative 1e-4 and 1e-9, f16/bf16
  // 2e-2 (one rounding of the result may differ by an ulp), integers
  // exactly. A float element may also be off by 2^-16 (f32; 2^-40 for f64)
  // of the tensor's largest magnitude, the step tests' bound
  // (StepPackage.h): a sum reordered across lanes is off by rounding
  // errors of its terms, which can be far larger than the element itself
  // when they cancel (a layer norm's dx subtracts two sums of 300 products
  // of inputs on [-2, 2]). And any element may be off by its rounding
  // spread (codegen_test::roundingSpread): where a result cancels after a
  // sum (an Adam update on a second moment drawn near -0.001 g^2), the
  // sum's reordering moves it by more than either bound of the result.
  EmulationHarness() {
    tolerance.f64 = 1e-9;
    tolerance.f32 = 1e-4;
    tolerance.half = 2e-2;
    tolerance.f64Normwise = std::ldexp(1.0, -40);
    tolerance.f32Normwise = std::ldexp(1.0, -16);
  }

  // baseSeed(), printed so that a failure can be rerun with it.
  static uint64_t firstSeed() {
    uint64_t seed = codegen_test::baseSeed();
    std::cout << "[ seed     ] KILN_CODEGEN_SEED=" << seed << "\n";
    return seed;
  }

  // Emits |fusion| as kernel |name| (its row cache |rowCacheBytes|) and
  // evaluates it on random inputs from |seed| (integers below |intBound|)
  // with the interpreter; "" or what went wrong.
  std::string add(FusionOp fusion, const std::string &name, uint64_t seed,
                  int64_t intBound,
                  int64_t rowCacheBytes = cudaRowCacheBytes(90u)) {
    EmulatedKernel k;
    k.name = name;
    k.seed = seed;
    mlir::FailureOr<CudaKernelSource> source =
        emitCudaKernel(fusion, name, rowCacheBytes);
    if (mlir::failed(source))
      return "emission failed: " + diagnostics;
    k.source = source->source;
    k.grid = std::min(source->launch.maxBlocks, uint64_t(3));
    k.block = source->launch.blockThreads;
    if (checkChains) {
      CudaKernelSource probe;
      mlir::FailureOr<mlir::OwningOpRef<mlir::ModuleOp>> built =
          buildCudaKernelModule(fusion, probe, /*rowCacheBytes=*/0);
      if (mlir::failed(built))
        return "the kernel module failed: " + diagnostics;
      uint64_t walked = test::loopChain(**built, probe.launch.blockThreads);
      bool shared = test::lanesShareEveryUnit(probe.layouts);
      // (A reduction of constants or of a broadcast scalar loads nothing
      // or one value before its loops: no chain to compare it with.)
      if (walked > std::max<uint64_t>(probe.serialSteps, 1) ||
          (shared && walked > 1 && walked != probe.serialSteps))
        ADD_FAILURE() << name << ": its loops walk a chain of " << walked
                      << " loads, the roofline's is " << probe.serialSteps
                      << " (layouts " << llvm::join(probe.layouts, ",")
                      << ")\n" << codegen_test::printed(fusion);
    }
    std::mt19937_64 rng(seed);
    for (mlir::Value input : fusion.getInputs())
      k.inputs.push_back(
          codegen_test::randomTensor(llvm::cast<mlir::RankedTensorType>(input.getType()), rng, intBound));
    if (std::string problem = evaluate(fusion, k); !problem.empty())
      return problem;
    if (std::string problem =
            codegen_test::roundingSpread(fusion.getBody().front(), k.inputs,
                                         k.expected, tolerance, seed, k.spread);
        !problem.empty())
      return problem + ": " + diagnostics;
    llvm::raw_string_ostream os(k.fusionText);
    fusion.print(os);
    for (const std::string &layout : source->layouts)
      ++layouts[layout];
    kernels.push_back(std::move(k));
    return "";
  }

  // The interpreter's results of |fusion| on |k|'s inputs, and what it
  // computes besides them: the operands of the compares whose results the
  // kernel writes (compareWithTies), and for a result that is a float
  // reduce sum or mean, the same reduction of its terms' absolute values
  // (compareWithin's bound for a sum whose terms cancel: added in another
  // order, its rounding errors scale with them, not with the result). The
  // yield lists those too while the fusion's block runs, once; the ops
  // built for them are erased after.
  std::string evaluate(FusionOp fusion, EmulatedKernel &k) {
    mlir::Block &body = fusion.getBody().front();
    mlir::Operation *yield = body.getTerminator();
    unsigned results = yield->getNumOperands();
    mlir::SmallVector<std::pair<size_t, CompareOp>> compares;
    mlir::SmallVector<std::pair<size_t, mlir::Value>> sums, ties;
    mlir::SmallVector<mlir::Operation *> built;
    mlir::OpBuilder b(yield);
    for (unsigned i = 0; i < results; ++i) {
      mlir::Value v = yield->getOperand(i);
      if (auto compare = v.getDefiningOp<CompareOp>()) {
        compares.push_back({i, compare});
      } else if (auto reduce = v.getDefiningOp<ReduceOp>();
                 reduce && llvm::isa<mlir::FloatType>(reduce.getType().getElementType()) &&
                 (reduce.getKind() == ReduceKind::sum ||
                  reduce.getKind() == ReduceKind::mean)) {
        auto abs = b.create<AbsOp>(reduce.getLoc(), reduce.getOperand());
        auto total = b.create<ReduceOp>(reduce.getLoc(), reduce.getKind(), abs,
                                        reduce.getDimensions());
        built.append({total, abs});
        sums.push_back({i, total});
        // A count of equal values (min and max gradients count their
        // ties): the same reduction over the pairs within the tolerance
        // of each other, which the kernel's own rounding may find equal
        // or not.
        auto convert = reduce.getOperand().getDefiningOp<ConvertOp>();
        auto compare = convert ? convert.getOperand().getDefiningOp<CompareOp>() : nullptr;
        if (compare && compare.getDirection() == CompareDirection::eq &&
            llvm::isa<mlir::FloatType>(
                llvm::cast<mlir::RankedTensorType>(compare.getLhs().getType())
                    .getElementType())) {
          mlir::Location loc = reduce.getLoc();
          mlir::Value l = compare.getLhs(), r = compare.getRhs();
          auto type = llvm::cast<mlir::RankedTensorType>(l.getType());
          double relative = type.getElementType().isF64()   ? tolerance.f64
                            : type.getElementType().isF32() ? tolerance.f32
                                                            : tolerance.half;
          auto gap = b.create<AbsOp>(loc, b.create<SubOp>(loc, l, r));
          auto size = b.create<MaxOp>(loc, b.create<AbsOp>(loc, l), b.create<AbsOp>(loc, r));
          auto bound = b.create<MulOp>(
              loc, size,
              b.create<ConstantOp>(loc, mlir::DenseElementsAttr::get(
                                            type, mlir::FloatAttr::get(type.getElementType(),
                                                                       relative))));
          auto near = b.create<CompareOp>(loc, CompareDirection::le, gap, bound);
          auto counted = b.create<ConvertOp>(loc, reduce.getOperand().getType(), near);
          auto nearTotal = b.create<ReduceOp>(loc, reduce.getKind(), counted,
                                              reduce.getDimensions());
          built.append({nearTotal, counted, near, bound, bound.getRhs().getDefiningOp(), size,
                        size.getLhs().getDefiningOp(), size.getRhs().getDefiningOp(), gap,
                        gap.getOperand().getDefiningOp()});
          ties.push_back({i, nearTotal});
        }
      }
    }
    for (auto [i, compare] : compares)
      yield->insertOperands(yield->getNumOperands(),
                            mlir::ValueRange{compare.getLhs(), compare.getRhs()});
    for (auto [i, total] : sums)
      yield->insertOperands(yield->getNumOperands(), mlir::ValueRange{total});
    for (auto [i, near] : ties)
      yield->insertOperands(yield->getNumOperands(), mlir::ValueRange{near});
    mlir::SmallVector<HostTensor> values;
    Interpreter interpreter;
    mlir::LogicalResult evaluated = interpreter.runBlock(body, k.inputs, values);
    yield->eraseOperands(results, yield->getNumOperands() - results);
    for (mlir::Operation *op : built)
      op->erase();
    if (mlir::failed(evaluated))
      return "the interpreter failed: " + diagnostics;
    k.expected.assign(values.begin(), values.begin() + results);
    size_t next = results;
    for (auto [i, compare] : compares) {
      k.compareOperands[i] = {values[next], values[next + 1]};
      next += 2;
    }
    for (auto [i, total] : sums)
      k.absoluteSums.emplace(i, values[next++]);
    for (auto [i, near] : ties)
      k.nearTies.emplace(i, values[next++]);
    return "";
  }

  // Compiles every added kernel for the host and runs each; one failure per
  // mismatching kernel.
  void runAll() {
    ASSERT_FALSE(kernels.empty());
    std::string source, error;
    std::vector<std::string> names;
    for (const EmulatedKernel &k : kernels) {
      source += k.source + "\n";
      names.push_back(k.name);
    }
    hosts = runtime::cuda::testing::buildHostKernels(source, names, "kernels", error);
    ASSERT_TRUE(error.empty()) << error;
    for (EmulatedKernel &k : kernels) {
      runtime::cuda::testing::HostKernel host = hosts.at(k.name);
      std::vector<KernelBuffer> buffers;
      auto add = [&](const HostTensor &t) {
        std::vector<uint8_t> native = toNative(t);
        buffers.emplace_back(native.begin(), native.end());
      };
      for (const HostTensor &t : k.inputs)
        add(t);
      std::vector<HostTensor> actual;
      for (const HostTensor &e : k.expected) {
        actual.emplace_back(e.dtype(), e.shape(), std::nan(""));
        add(actual.back());
      }
      std::vector<void *> pointers;
      for (auto &b : buffers)
        pointers.push_back(b.data());
      host(pointers.data(), k.grid, k.block);
      for (size_t i = 0; i < actual.size(); ++i) {
        const KernelBuffer &out = buffers[k.inputs.size() + i];
        fromNativeBuffer(std::vector<uint8_t>(out.begin(), out.end()), actual[i]);
        auto compared = k.compareOperands.find(i);
        auto sums = k.absoluteSums.find(i);
        std::string mismatch =
            compared == k.compareOperands.end()
                ? compareWithin(k.expected[i], actual[i], tolerance,
                                sums == k.absoluteSums.end() ? nullptr
                                                             : &sums->second,
                                &k.spread[i])
                : compareWithTies(k.expected[i], actual[i],
                                  compared->second.first,
                                  compared->second.second, tolerance);
        if (auto near = k.nearTies.find(i); !mismatch.empty() && near != k.nearTies.end()) {
          bool withinTies = true;
          for (int64_t e = 0; e < actual[i].size() && withinTies; ++e)
            // The pairs within the tolerance that the interpreter found
            // unequal: each may go either way.
            withinTies = std::fabs(actual[i][e] - k.expected[i][e]) <=
                         near->second[e] - k.expected[i][e] +
                             1e-6 * std::fabs(k.expected[i][e]);
          if (withinTies)
            mismatch.clear();
        }
        if (!mismatch.empty())
          ADD_FAILURE() << k.name << " result " << i << ": " << mismatch
                        << " (inputs from seed " << k.seed
                        << "; rerun with the KILN_CODEGEN_SEED printed above)\n"
                        << k.fusionText;
      }
      ++ran;
    }
  }

  // Adds |module|'s fusions in order, the i-th as |prefix|i on seed
  // |seed| + i, its integer inputs below |intBounds|[i] (the last bound for
  // the rest).
  void addFusions(mlir::ModuleOp module, const std::string &prefix, uint64_t seed,
                  mlir::ArrayRef<int64_t> intBounds = {4}) {
    size_t i = 0;
    module->walk([&](FusionOp fusion) {
      int64_t bound = intBounds[std::min(i, intBounds.size() - 1)];
      EXPECT_EQ(add(fusion, prefix + std::to_string(i), seed + i, bound), "");
      ++i;
    });
  }

  // Compiles |model| with |options| and adds every kernel of its package
  // as buildStepPackage collects them, the i-th added on seed |seed| + i.
  void addPackaged(mlir::ModuleOp model, const PipelineOptions &options,
                   uint64_t seed, int64_t intBound) {
    ASSERT_TRUE(mlir::succeeded(runCompilePipeline(model, options))) << diagnostics;
    cli::PackageTargetHooks hooks;
    hooks.target.kind = runtime::TargetKind::Cuda;
    hooks.compileKernel = [&](FusionOp fusion, const std::string &name,
                              runtime::PackageKernel &kernel, cli::KernelFinish &,
                              std::string &error) {
      std::string entry = "k_" + std::to_string(kernels.size());
      diagnostics.clear();
      std::string problem = add(fusion, entry, seed + kernels.size(), intBound);
      if (!problem.empty()) {
        error = name + ": " + problem;
        return false;
      }
      kernel.entryPoint = entry;
      return true;
    };
    runtime::LoadedPackage pkg;
    std::string errors;
    llvm::raw_string_ostream errs(errors);
    ASSERT_TRUE(mlir::succeeded(cli::buildStepPackage(model, "model", "", {}, "test",
                                                errs, pkg, {&hooks})))
        << errs.str() << diagnostics;
  }

  // Every added kernel, in one translation unit, through NVRTC and ptxas
  // for sm_90 (skipped with a message without the toolkit); registers and
  // spills are printed, not bounded: ptxas stores registers around each
  // call to a math function's slow path (f64 exp, f32 division), so a
  // fusion of many exponentials spills a hundred bytes at 80 registers.
  void assembleAllForSm90() {
    std::string source;
    std::vector<std::string> names;
    for (const EmulatedKernel &k : kernels) {
      source += k.source + "\n";
      names.push_back(k.name);
    }
    std::string skip;
    std::vector<runtime::cuda::testing::Sm90Report> reports;
    runtime::cuda::testing::assembleForSm90(source, "random", names, reports, skip);
    if (!skip.empty()) {
      std::printf("not assembled for sm_90: %s\n", skip.c_str());
      return;
    }
    ASSERT_EQ(reports.size(), kernels.size());
    int registers = 0, spills = 0, spilling = 0;
    for (size_t i = 0; i < kernels.size(); ++i) {
      registers = std::max(registers, reports[i].registers);
      spills = std::max(spills, reports[i].spillBytes);
      spilling += reports[i].spillBytes > 0;
    }
    RecordProperty("most_registers", registers);
    RecordProperty("most_spill_bytes", spills);
    std::printf("sm_90: at most %d registers; %d of %zu kernels spill, at "
                "most %d bytes\n",
                registers, spilling, kernels.size(), spills);
  }

  // Whether add() also checks each kernel's chain (the random tests): the
  // chain its loops walk (LoopChain.h) within the one recorded for the
  // roofline, and that one exactly for the warp and block layouts, whose
  // lanes share each unit's reductions (CudaSerialChainTest's check on
  // the zoo). A row walked by every thread alone fails it.
  bool checkChains = false;
  std::vector<EmulatedKernel> kernels;
  // runAll's host build of |kernels|, by name.
  std::map<std::string, runtime::cuda::testing::HostKernel> hosts;
  std::map<std::string, int> layouts;
  size_t ran = 0;
};

} // namespace kiln::cuda_emulation

#endif // KILN_TESTS_UNIT_CUDA_EMULATIONHARNESS_H
