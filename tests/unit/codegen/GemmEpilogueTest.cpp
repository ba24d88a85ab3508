//===- GemmEpilogueTest.cpp - GEMM fusions as library GEMM plus kernel
//-----===//
//
// What a CPU package runs for a dot_general and a gemm fusion, against the
// reference interpreter: the dot as runtime/cpu/Blas.h's planned strided
// GEMM (after transpose kernels from buildTransposeFusion for operands the
// plan packs), and the gemm fusion's epilogue (splitGemmFusion) as a CPU
// kernel reading the GEMM's result. Covered: every gemm fusion of the zoo
// MLP's and a small GPT's compiled steps, every top-level dot_general of
// those steps, and dot_generals whose operands must be packed. f32 and f64
// on random inputs. The GEMM is checked within BlasTest's bound (1e-5 for
// f32, 1e-12 for f64, of the dot of the operands' absolute values: it sums
// in f32 in its own order, the interpreter in f64); the epilogue kernel on
// the GEMM's own result, to 1e-5 (f32) or 1e-12 (f64) relative scaled by
// max(1, |x|); and the split, the epilogue on the exact dot against the
// whole fusion. Set KILN_CODEGEN_SEED to rerun one seed.
//
//===----------------------------------------------------------------------===//

#include "codegen/GemmEpilogue.h"
#include "codegen/KernelModel.h"
#include "codegen/cpu/LowerToLLVM.h"
#include "tests/unit/codegen/KernelTestSupport.h"

#include "ir/Interpreter.h"
#include "ir/KilnOps.h"
#include "passes/Pipelines.h"
#include "runtime/cpu/Blas.h"
#include "tools/kiln/lib/Zoo.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Parser/Parser.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>

namespace {

using namespace mlir;
using namespace kiln;
using codegen_test::baseSeed;
using codegen_test::printed;
using codegen_test::randomTensor;

std::vector<int64_t> vec(ArrayRef<int64_t> a) { return {a.begin(), a.end()}; }

class GemmEpilogueTest : public codegen_test::KernelTestBase {
protected:
  // Runs a compiled kernel on host tensors; "" or the error.
  std::string runKernel(FusionOp fusion, llvm::ArrayRef<const HostTensor *> in,
                        llvm::SmallVectorImpl<HostTensor> &out) {
    FailureOr<CompiledKernel> kernel = compileLoopFusion(fusion);
    if (failed(kernel))
      return "compilation failed: " + diagnostics;
    out.clear();
    for (Type type : fusion.getResultTypes()) {
      auto t = cast<RankedTensorType>(type);
      DType dtype;
      dtypeOfTensor(t, dtype);
      out.emplace_back(dtype, t.getShape(), std::nan(""));
    }
    llvm::SmallVector<HostTensor *> outPtrs;
    for (HostTensor &t : out)
      outPtrs.push_back(&t);
    std::string error;
    if (failed(kernel->run(in, outPtrs, &error)))
      return "run failed: " + error;
    return "";
  }

  // The dot as a package runs it: packing kernels, then the strided GEMM.
  // Counts the packed operands in |packs|.
  std::string runDot(DotGeneralOp dot, const HostTensor &lhs,
                     const HostTensor &rhs, HostTensor &out, int &packs) {
    runtime::cpu::GemmSpec spec;
    spec.dtype = lhs.dtype() == DType::f64 ? runtime::PkgDType::F64
                                           : runtime::PkgDType::F32;
    spec.lhsShape = vec(lhs.shape());
    spec.rhsShape = vec(rhs.shape());
    spec.lhsBatch = vec(dot.getLhsBatchingDimensions());
    spec.rhsBatch = vec(dot.getRhsBatchingDimensions());
    spec.lhsContract = vec(dot.getLhsContractingDimensions());
    spec.rhsContract = vec(dot.getRhsContractingDimensions());
    runtime::StatusOr<runtime::cpu::GemmPlan> plan = runtime::cpu::planGemm(spec);
    if (!plan.isOk())
      return "planGemm: " + plan.status().message();
    HostTensor operands[2] = {lhs, rhs};
    const std::vector<int64_t> *perms[2] = {&plan->lhsPermutation,
                                            &plan->rhsPermutation};
    for (int i = 0; i < 2; ++i) {
      if (perms[i]->empty())
        continue;
      ++packs;
      auto type = cast<RankedTensorType>(dot->getOperand(i).getType());
      FusionOp transpose;
      auto module = buildTransposeFusion(dot.getLoc(), type, *perms[i], transpose);
      if (failed(module))
        return "buildTransposeFusion failed: " + diagnostics;
      llvm::SmallVector<HostTensor> packed;
      std::string error = runKernel(transpose, {&operands[i]}, packed);
      if (!error.empty())
        return "packing kernel: " + error;
      operands[i] = packed.front();
    }
    auto toNative = [&](const HostTensor &t) {
      std::vector<double> d(t.values().begin(), t.values().end());
      std::vector<float> f(d.begin(), d.end());
      return std::make_pair(d, f);
    };
    auto [l64, l32] = toNative(operands[0]);
    auto [r64, r32] = toNative(operands[1]);
    std::vector<double> o64(out.size());
    std::vector<float> o32(out.size());
    bool f64 = spec.dtype == runtime::PkgDType::F64;
    runtime::Status status =
        f64 ? runtime::cpu::gemm(spec.dtype, plan->params, l64.data(),
                                 r64.data(), o64.data())
            : runtime::cpu::gemm(spec.dtype, plan->params, l32.data(),
                                 r32.data(), o32.data());
    if (!status.isOk())
      return "gemm: " + status.message();
    for (int64_t i = 0; i < out.size(); ++i)
      out[i] = f64 ? o64[i] : o32[i];
    return "";
  }

  // |dot| on |lhs| and |rhs| as a package runs it (|actual|) against the
  // interpreter (|expected|). The GEMM sums in f32 in its own order, the
  // interpreter in f64: an element may be off by 1e-5 of the same dot on
  // the operands' absolute values (sum |a| |b|, BlasTest's bound), since
  // terms that cancel leave the rounding errors of the larger ones.
  std::string checkDotValues(DotGeneralOp dot, const HostTensor &lhs,
                             const HostTensor &rhs, HostTensor &expected,
                             HostTensor &actual, int &packs) {
    llvm::SmallVector<HostTensor> results, absResults;
    Interpreter interpreter;
    if (failed(interpreter.evaluate(dot, {lhs, rhs}, results)))
      return "the interpreter failed: " + diagnostics;
    HostTensor absLhs = lhs, absRhs = rhs;
    for (HostTensor *t : {&absLhs, &absRhs})
      for (double &v : t->values())
        v = std::fabs(v);
    if (failed(interpreter.evaluate(dot, {absLhs, absRhs}, absResults)))
      return "the interpreter failed on absolute values: " + diagnostics;
    expected = results.front();
    actual = HostTensor(expected.dtype(), expected.shape(), std::nan(""));
    std::string error = runDot(dot, lhs, rhs, actual, packs);
    if (!error.empty())
      return error;
    codegen_test::Tolerance bound = tolerance;
    bound.f32Normwise = 1e-5;
    bound.f64Normwise = 1e-12;
    return compareWithin(expected, actual, bound, &absResults.front());
  }

  // A top-level dot_general against the interpreter.
  std::string checkDot(DotGeneralOp dot, uint64_t seed, int &packs) {
    std::mt19937_64 rng(seed);
    HostTensor lhs =
        randomTensor(cast<RankedTensorType>(dot.getLhs().getType()), rng, 4);
    HostTensor rhs =
        randomTensor(cast<RankedTensorType>(dot.getRhs().getType()), rng, 4);
    HostTensor expected, actual;
    return checkDotValues(dot, lhs, rhs, expected, actual, packs);
  }

  // Compares the results |expected| and |actual| of |what|.
  std::string compareAll(llvm::StringRef what,
                         llvm::ArrayRef<HostTensor> expected,
                         llvm::ArrayRef<HostTensor> actual) {
    if (actual.size() != expected.size())
      return (what + ": expected " + std::to_string(expected.size()) +
              " results, found " + std::to_string(actual.size()))
          .str();
    for (size_t i = 0; i < expected.size(); ++i) {
      std::string mismatch = compare(expected[i], actual[i]);
      if (!mismatch.empty())
        return (what + ": result " + std::to_string(i) + ": " + mismatch).str();
    }
    return "";
  }

  // A gemm fusion, as a package runs it: the GEMM into a scratch tensor,
  // then the epilogue kernel. Three checks, each against the interpreter:
  // the split (the epilogue on the dot's exact result gives the fusion's
  // results), the GEMM (within its bound, checkDotValues), and the epilogue
  // kernel on the GEMM's own result. The epilogue is compared on the same
  // dot values, so its tolerance need not absorb the GEMM's rounding, which
  // an epilogue can magnify.
  std::string checkGemmFusion(FusionOp fusion, uint64_t seed, int &packs) {
    std::mt19937_64 rng(seed);
    std::vector<HostTensor> inputs;
    for (Value input : fusion.getInputs())
      inputs.push_back(randomTensor(cast<RankedTensorType>(input.getType()), rng, 4));
    llvm::SmallVector<HostTensor> expected;
    Interpreter interpreter;
    if (failed(interpreter.evaluate(fusion, inputs, expected)))
      return "the interpreter failed: " + diagnostics;
    FailureOr<GemmFusionSplit> split = splitGemmFusion(fusion);
    if (failed(split))
      return "splitGemmFusion failed: " + diagnostics;
    HostTensor exactDot, dot;
    std::string error =
        checkDotValues(split->dot, inputs[split->lhsInput],
                       inputs[split->rhsInput], exactDot, dot, packs);
    if (!error.empty())
      return "GEMM: " + error;
    auto epilogueInputs = [&](const HostTensor &dotValues) {
      llvm::SmallVector<HostTensor> values;
      for (int64_t source : split->inputSources)
        values.push_back(source < 0 ? dotValues : inputs[source]);
      return values;
    };
    llvm::SmallVector<HostTensor> splitExpected;
    if (failed(interpreter.evaluate(split->epilogue, epilogueInputs(exactDot),
                                    splitExpected)))
      return "the interpreter failed on the epilogue: " + diagnostics;
    error = compareAll("the split", expected, splitExpected);
    if (!error.empty())
      return error;
    llvm::SmallVector<HostTensor> onGemm = epilogueInputs(dot);
    llvm::SmallVector<HostTensor> epilogueExpected;
    if (failed(interpreter.evaluate(split->epilogue, onGemm, epilogueExpected)))
      return "the interpreter failed on the epilogue: " + diagnostics;
    llvm::SmallVector<const HostTensor *> onGemmPtrs;
    for (const HostTensor &t : onGemm)
      onGemmPtrs.push_back(&t);
    llvm::SmallVector<HostTensor> actual;
    error = runKernel(split->epilogue, onGemmPtrs, actual);
    if (!error.empty())
      return "epilogue: " + error;
    return compareAll("the epilogue kernel", epilogueExpected, actual);
  }

  // Every gemm fusion and top-level dot_general of |model|'s compiled step.
  void checkModel(OwningOpRef<ModuleOp> model, size_t minGemmFusions,
                  size_t minDots) {
    ASSERT_NO_FATAL_FAILURE(compileModel(model));
    SmallVector<FusionOp> fusions;
    SmallVector<DotGeneralOp> dots;
    model->walk([&](Operation *op) {
      if (auto f = dyn_cast<FusionOp>(op); f && f.getKind() == FusionKind::gemm)
        fusions.push_back(f);
      if (auto d = dyn_cast<DotGeneralOp>(op); d && !isa<FusionOp>(d->getParentOp()))
        dots.push_back(d);
    });
    EXPECT_GE(fusions.size(), minGemmFusions);
    EXPECT_GE(dots.size(), minDots);
    uint64_t seed = baseSeed();
    int packs = 0;
    for (FusionOp fusion : fusions) {
      diagnostics.clear();
      std::string result = checkGemmFusion(fusion, seed, packs);
      if (!result.empty())
        ADD_FAILURE() << "seed " << seed << " (KILN_CODEGEN_SEED=" << seed
                      << "): " << result << "\n" << printed(fusion);
    }
    for (DotGeneralOp dot : dots) {
      diagnostics.clear();
      std::string result = checkDot(dot, seed, packs);
      if (!result.empty())
        ADD_FAILURE() << "seed " << seed << " (KILN_CODEGEN_SEED=" << seed
                      << "): " << result << "\n" << printed(dot);
    }
    std::cout << "[ gemms    ] " << fusions.size() << " gemm fusions, "
              << dots.size() << " dot_generals, " << packs
              << " packed operands\n";
  }
};

TEST_F(GemmEpilogueTest, ZooMlp) {
  cli::MlpOptions options;
  options.layers = {96, 64, 32, 10};
  options.batch = 16;
  checkModel(cli::buildMlp(&context, options), 3, 5);
}

TEST_F(GemmEpilogueTest, ZooSmallGpt) {
  cli::GptOptions options;
  options.layers = 2;
  options.hidden = 16;
  options.heads = 2;
  options.seq = 6;
  options.vocab = 20;
  options.batch = 2;
  checkModel(cli::buildGpt(&context, options), 1, 1);
}

// Dots whose operands are in neither [batch, rows, contract] nor [batch,
// contract, rows] order: the plan packs them, and the transpose kernels plus
// the GEMM still give the interpreter's result.
TEST_F(GemmEpilogueTest, PackedOperands) {
  const char *text = R"mlir(
    func.func @main(%a: tensor<5x3x4xf32>, %b: tensor<4x3x6xf32>, %c: tensor<2x7x3xf64>, %d: tensor<3x2x5xf64>)
        -> (tensor<3x5x6xf32>, tensor<2x7x5xf64>) {
      %x = kiln.dot_general %a, %b, batch = [1] x [1], contract = [2] x [0] : (tensor<5x3x4xf32>, tensor<4x3x6xf32>) -> tensor<3x5x6xf32>
      %y = kiln.dot_general %c, %d, batch = [0] x [1], contract = [2] x [0] : (tensor<2x7x3xf64>, tensor<3x2x5xf64>) -> tensor<2x7x5xf64>
      return %x, %y : tensor<3x5x6xf32>, tensor<2x7x5xf64>
    })mlir";
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(text, &context);
  ASSERT_TRUE(module) << diagnostics;
  int packs = 0, dots = 0;
  uint64_t seed = baseSeed();
  module->walk([&](DotGeneralOp dot) {
    ++dots;
    EXPECT_EQ(checkDot(dot, seed, packs), "") << "seed " << seed << "\n"
                                               << printed(dot);
  });
  EXPECT_EQ(dots, 2);
  EXPECT_GE(packs, 2);
}

// A gemm fusion whose dot needs a packed operand, with a residual add and
// the dot's own value as a second result.
TEST_F(GemmEpilogueTest, PackedGemmFusionWithTwoResults) {
  const char *text = R"mlir(
    func.func @main(%a: tensor<5x3x4xf32>, %b: tensor<4x3x6xf32>, %r: tensor<3x5x6xf32>)
        -> (tensor<3x5x6xf32>, tensor<3x5x6xf32>) {
      %f:2 = kiln.fusion gemm (%a, %b, %r) : (tensor<5x3x4xf32>, tensor<4x3x6xf32>, tensor<3x5x6xf32>)
          -> (tensor<3x5x6xf32>, tensor<3x5x6xf32>) {
      ^bb0(%x: tensor<5x3x4xf32>, %y: tensor<4x3x6xf32>, %z: tensor<3x5x6xf32>):
        %d = kiln.dot_general %x, %y, batch = [1] x [1], contract = [2] x [0] : (tensor<5x3x4xf32>, tensor<4x3x6xf32>) -> tensor<3x5x6xf32>
        %s = kiln.add %d, %z : tensor<3x5x6xf32>
        %t = kiln.relu %s : tensor<3x5x6xf32>
        kiln.yield %d, %t : tensor<3x5x6xf32>, tensor<3x5x6xf32>
      }
      return %f#0, %f#1 : tensor<3x5x6xf32>, tensor<3x5x6xf32>
    })mlir";
  FusionOp fusion = parseFusion(text);
  ASSERT_TRUE(fusion) << diagnostics;
  FailureOr<GemmFusionSplit> split = splitGemmFusion(fusion);
  ASSERT_TRUE(succeeded(split)) << diagnostics;
  EXPECT_EQ(split->epilogue.getKind(), FusionKind::multi_output);
  // The epilogue reads %r (input 2) and the dot's result, not %a or %b.
  EXPECT_EQ(split->inputSources, (SmallVector<int64_t>{2, -1}));
  int packs = 0;
  uint64_t seed = baseSeed();
  EXPECT_EQ(checkGemmFusion(fusion, seed, packs), "") << "seed " << seed;
  EXPECT_GE(packs, 1);
}

// The zoo MLP at its default sizes: every gemm epilogue and every optimizer
// (Adam) update kernel with an output of at least 1024 elements, in rows
// of at least 16, is vectorized for the host (LLVM vector types in the -O3 IR), and the Adam
// bias corrections (pow of the step) are computed once per loop nest, not
// per element: at most two pow calls per nest. KILN_KERNEL_IR_DIR=DIR
// writes each kernel's IR there.
TEST_F(GemmEpilogueTest, ZooMlpKernelsVectorize) {
  OwningOpRef<ModuleOp> model = cli::buildMlp(&context, cli::MlpOptions());
  ASSERT_TRUE(model) << diagnostics;
  PipelineOptions options;
  ASSERT_TRUE(succeeded(runCompilePipeline(*model, options))) << diagnostics;
  SmallVector<std::pair<std::string, FusionOp>> kernels;
  SmallVector<GemmFusionSplit> splits;
  int index = 0;
  model->walk([&](FusionOp f) {
    std::string name = "fusion" + std::to_string(index++);
    if (f.getKind() == FusionKind::gemm) {
      FailureOr<GemmFusionSplit> split = splitGemmFusion(f);
      ASSERT_TRUE(succeeded(split)) << diagnostics;
      kernels.push_back({name + ".epilogue", split->epilogue});
      splits.push_back(std::move(*split));
    } else if (llvm::all_of(f.getResultTypes(), [](Type t) {
                 return cast<RankedTensorType>(t).getNumElements() < 1024;
               })) {
      // Too small to matter (the last layer's bias: 10 elements).
    } else if (f.getKind() == FusionKind::horizontal ||
               llvm::any_of(f->getAttrOfType<DenseI64ArrayAttr>("kiln.aliases")
                                ? f->getAttrOfType<DenseI64ArrayAttr>("kiln.aliases")
                                      .asArrayRef()
                                : ArrayRef<int64_t>(),
                            [](int64_t a) { return a >= 0; })) {
      // Kernels that update parameters or optimizer state in place.
      kernels.push_back({name + ".update", f});
    }
  });
  EXPECT_EQ(splits.size(), 3u);
  EXPECT_GE(kernels.size(), 5u);
  const char *dumpDir = std::getenv("KILN_KERNEL_IR_DIR");
  for (auto &[name, fusion] : kernels) {
    llvm::LLVMContext llvmContext;
    FailureOr<std::unique_ptr<llvm::Module>> ir =
        optimizedKernelIR(fusion, llvmContext);
    ASSERT_TRUE(succeeded(ir)) << diagnostics;
    std::string text;
    llvm::raw_string_ostream os(text);
    (*ir)->print(os, nullptr);
    if (dumpDir) {
      std::error_code ec;
      llvm::raw_fd_ostream file(std::string(dumpDir) + "/" + name + ".ll", ec);
      file << text;
    }
    // Rows narrower than an AVX-512 vector (the output layer's 10 logits)
    // vectorize across rows on some hosts only (AVX-512 yes, AVX2 no).
    bool narrow = llvm::any_of(fusion->getResultTypes(), [](Type t) {
      auto type = cast<RankedTensorType>(t);
      return type.getRank() > 0 && type.getShape().back() < 16;
    });
    if (!narrow)
      EXPECT_NE(text.find(" x float>"), std::string::npos)
          << name << " is not vectorized:\n" << printed(fusion);
    size_t pows = 0;
    for (size_t at = text.find("call double @llvm.pow"); at != std::string::npos;
         at = text.find("call double @llvm.pow", at + 1))
      ++pows;
    FailureOr<KernelModel> kernelModel = buildKernelModel(fusion);
    ASSERT_TRUE(succeeded(kernelModel));
    EXPECT_LE(pows, 2 * kernelModel->nests.size()) << name << ":\n" << text;
    EXPECT_EQ(text.find("x double> @llvm.pow"), std::string::npos)
        << name << " calls pow per element:\n" << text;
  }
}

TEST_F(GemmEpilogueTest, RefusesOtherFusions) {
  const char *text = R"mlir(
    func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {
      %f = kiln.fusion loop (%a) : (tensor<4xf32>) -> tensor<4xf32> {
      ^bb0(%x: tensor<4xf32>):
        %n = kiln.neg %x : tensor<4xf32>
        kiln.yield %n : tensor<4xf32>
      }
      return %f : tensor<4xf32>
    })mlir";
  FusionOp fusion = parseFusion(text);
  ASSERT_TRUE(fusion) << diagnostics;
  EXPECT_TRUE(failed(splitGemmFusion(fusion)));
  EXPECT_NE(diagnostics.find("expected a `gemm` fusion to split, found `loop`"),
            std::string::npos)
      << diagnostics;
  FusionOp transpose;
  EXPECT_TRUE(failed(buildTransposeFusion(
      fusion.getLoc(), cast<RankedTensorType>(fusion.getType(0)), {1}, transpose)));
  EXPECT_NE(diagnostics.find("expected a permutation of the dimensions"),
            std::string::npos)
      << diagnostics;
}

} // namespace
