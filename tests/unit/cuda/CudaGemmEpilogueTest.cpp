//===- CudaGemmEpilogueTest.cpp - GEMM epilogues on CUDA packages' thunks --===//
//
// A CUDA package records a gemm fusion whose epilogue is exactly one that
// cuBLASLt has (bias, ReLU, tanh-GELU, a bias then one of them) on the GEMM
// thunk (package.fbs GemmParams.epilogue, the bias as operand 2) instead of
// emitting an epilogue kernel; a CPU package of the same step keeps the
// kernel. Checked on the MLP and small GPT steps (f32, bf16, fp16): the
// CUDA package has one kernel fewer per epilogue GEMM and no scratch buffer
// for its product; the epilogue survives the writer and the loader;
// checkPackage refuses an epilogue on a CPU package and one with the wrong
// operands. With kiln-fuse's bias-gradient-epilogues, each weight gradient
// is a BiasGradient GEMM writing the bias gradient as its result 1. A GPT
// block's projections that add the residual are BiasResidual GEMMs (the
// residual as cuBLASLt's C, the last operand) and its MLP's first layer a
// BiasGeluAux GEMM (the pre-activation as result 1); checkPackage refuses
// a C or aux of another layout. (That
// the steps still compute what the interpreter does, within the dtype's
// bound, is CudaStepEmulationTest's, whose packages carry these epilogues.)
//
//===----------------------------------------------------------------------===//

#include "tests/unit/cuda/StepPackage.h"

#include "codegen/cpu/LowerToLLVM.h"
#include "runtime/package/Package.h"
#include "serialize/PackageWriter.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>

namespace {

using namespace mlir;
using namespace kiln;
namespace rt = kiln::runtime;
using ::testing::HasSubstr;

class CudaGemmEpilogueTest : public cuda_step_test::StepTest {
protected:
  // The step of |build()| packaged for CUDA (|cuda|) or the CPU.
  // With |amp| and, when |biasGradients|, kiln-fuse's
  // bias-gradient-epilogues (as `kiln compile --target=cuda` runs it).
  // The CPU package's thunks, buffers and kernels are the package
  // builder's, its kernels not compiled: these tests count and compare
  // them, and LLVM at -O3 took half of their time.
  rt::LoadedPackage package(const std::function<OwningOpRef<ModuleOp>()> &build,
                            bool cuda, AmpMode amp = AmpMode::off,
                            bool biasGradients = false) {
    OwningOpRef<ModuleOp> model = build();
    EXPECT_TRUE(model) << diagnostics;
    PipelineOptions options;
    options.amp = amp;
    options.gemmBiasGradients = biasGradients;
    EXPECT_TRUE(succeeded(runCompilePipeline(*model, options))) << diagnostics;
    cli::PackageTargetHooks hooks = cuda_step_test::cudaPackageHooks(diagnostics);
    if (!cuda) {
      hooks.target = rt::PackageTarget{};
      hooks.target.kind = rt::TargetKind::Cpu;
      hooks.compileKernel = [](FusionOp, const std::string &,
                               rt::PackageKernel &kernel, cli::KernelFinish &,
                               std::string &) {
        kernel.kind = rt::KernelKind::LlvmBitcode;
        kernel.entryPoint = kCpuKernelEntryPoint;
        return true;
      };
    }
    rt::LoadedPackage pkg;
    std::string errors;
    EXPECT_TRUE(cuda_step_test::packageStep(*model, &hooks, pkg, errors))
        << errors << diagnostics;
    EXPECT_EQ(pkg.target.kind, cuda ? rt::TargetKind::Cuda : rt::TargetKind::Cpu);
    return pkg;
  }

  static std::map<rt::PkgGemmEpilogue, int>
  epilogues(const rt::LoadedPackage &pkg) {
    std::map<rt::PkgGemmEpilogue, int> out;
    for (const rt::PackageThunk &t : pkg.thunks)
      if (t.kind == rt::ThunkKind::LibraryCall && t.hasGemm)
        ++out[t.gemm.epilogue];
    return out;
  }

  // |pkg| through the writer and the loader: the same thunks.
  static void roundTrip(const rt::LoadedPackage &pkg, rt::LoadedPackage &loaded) {
    rt::StatusOr<std::vector<uint8_t>> bytes = serialize::writePackage(pkg);
    ASSERT_TRUE(bytes.isOk()) << bytes.status().message();
    rt::StatusOr<rt::LoadedPackage> read =
        rt::loadPackageFromBytes(bytes.value().data(), bytes.value().size());
    ASSERT_TRUE(read.isOk()) << read.status().message();
    loaded = std::move(read.value());
    EXPECT_TRUE(loaded.thunks == pkg.thunks);
  }

  // Two blocks of a small GPT.
  static cli::GptOptions gpt() {
    cli::GptOptions options;
    options.layers = 2;
    options.hidden = 32;
    options.heads = 2;
    options.seq = 8;
    options.vocab = 40;
    options.batch = 2;
    return options;
  }

  static size_t launches(const rt::LoadedPackage &pkg) {
    size_t n = 0;
    for (const rt::PackageThunk &t : pkg.thunks)
      n += t.kind == rt::ThunkKind::KernelLaunch;
    return n;
  }

};

TEST_F(CudaGemmEpilogueTest, MlpBiasGoesOnTheGemmOnCudaOnly) {
  cli::MlpOptions options;
  options.layers = {40, 24, 10};
  options.batch = 16;
  auto build = [&] { return cli::buildMlp(&context, options); };
  rt::LoadedPackage cuda = package(build, true), cpu = package(build, false);
  // Training keeps the hidden layers' pre-activation for the backward, so
  // only the last layer's gemm fusion is exactly a bias.
  std::map<rt::PkgGemmEpilogue, int> e = epilogues(cuda);
  EXPECT_EQ(e[rt::PkgGemmEpilogue::Bias], 1);
  EXPECT_EQ(epilogues(cpu).count(rt::PkgGemmEpilogue::Bias), 0u);
  EXPECT_EQ(epilogues(cpu).size(), 1u); // None only
  EXPECT_EQ(cuda.kernels.size() + 1, cpu.kernels.size());
  EXPECT_EQ(launches(cuda) + 1, launches(cpu));
  for (const rt::PackageThunk &t : cuda.thunks) {
    if (!t.hasGemm || t.gemm.epilogue != rt::PkgGemmEpilogue::Bias)
      continue;
    ASSERT_EQ(t.operands.size(), 3u);
    const rt::PackageBuffer &bias = cuda.buffers[t.operands[2]];
    EXPECT_EQ(bias.shape, std::vector<int64_t>{t.gemm.n});
    EXPECT_EQ(bias.dtype, rt::PkgDType::F32);
    // The GEMM writes the fusion's result, the logits, directly.
    EXPECT_EQ(cuda.buffers[t.results[0]].shape,
              (std::vector<int64_t>{16, 10}));
  }

  // The epilogue survives the writer and the loader.
  rt::LoadedPackage loaded;
  roundTrip(cuda, loaded);
  ASSERT_FALSE(HasFatalFailure());
  EXPECT_EQ(epilogues(loaded), e);
}

TEST_F(CudaGemmEpilogueTest, GptHasFewerKernelsOnCuda) {
  cli::GptOptions options = gpt();
  auto build = [&] { return cli::buildGpt(&context, options); };
  rt::LoadedPackage cuda = package(build, true), cpu = package(build, false);
  std::map<rt::PkgGemmEpilogue, int> e = epilogues(cuda);
  int fused = 0;
  for (auto [kind, n] : e)
    if (kind != rt::PkgGemmEpilogue::None)
      fused += n;
  // Every block has a projection that is a GEMM plus a bias only (the
  // others add the residual or keep the pre-GELU value for the backward).
  EXPECT_EQ(e[rt::PkgGemmEpilogue::Bias], options.layers);
  EXPECT_GE(fused, options.layers);
  EXPECT_EQ(cuda.kernels.size() + fused, cpu.kernels.size());
  EXPECT_EQ(launches(cuda) + fused, launches(cpu));
}

// bf16 and fp16 GEMMs take their epilogues too (cuBLASLt rounds once,
// after the epilogue: CudaStepEmulationTest bounds the difference).
TEST_F(CudaGemmEpilogueTest, HalfPrecisionBiasGoesOnTheGemm) {
  cli::MlpOptions options;
  options.layers = {40, 24, 10};
  options.batch = 16;
  auto build = [&] { return cli::buildMlp(&context, options); };
  for (auto [amp, dtype] : {std::pair(AmpMode::bf16, rt::PkgDType::BF16),
                            std::pair(AmpMode::fp16, rt::PkgDType::F16)}) {
    rt::LoadedPackage cuda = package(build, true, amp),
                      cpu = package(build, false, amp);
    EXPECT_EQ(epilogues(cuda)[rt::PkgGemmEpilogue::Bias], 1);
    EXPECT_EQ(epilogues(cpu).size(), 1u); // None only
    EXPECT_EQ(cuda.kernels.size() + 1, cpu.kernels.size());
    for (const rt::PackageThunk &t : cuda.thunks)
      if (t.hasGemm && t.gemm.epilogue == rt::PkgGemmEpilogue::Bias) {
        EXPECT_EQ(cuda.buffers[t.operands[2]].dtype, dtype);
        EXPECT_EQ(cuda.buffers[t.results[0]].dtype, dtype);
      }
    EXPECT_TRUE(rt::checkPackage(cuda).isOk());
  }
}

// kiln-fuse's bias-gradient-epilogues: each dense layer's weight gradient
// dW = X^T dY is one GEMM thunk that also writes the bias gradient (the
// sum of dY over the batch) as its result 1; the optimizer reads that.
TEST_F(CudaGemmEpilogueTest, MlpBiasGradientsGoOnTheWeightGradients) {
  cli::MlpOptions options;
  options.layers = {40, 24, 10};
  options.batch = 16;
  auto build = [&] { return cli::buildMlp(&context, options); };
  for (AmpMode amp : {AmpMode::off, AmpMode::bf16}) {
    rt::LoadedPackage with = package(build, true, amp, true),
                      without = package(build, true, amp, false);
    ASSERT_TRUE(rt::checkPackage(with).isOk());
    EXPECT_EQ(epilogues(with)[rt::PkgGemmEpilogue::BiasGradient], 2);
    EXPECT_EQ(epilogues(without).count(rt::PkgGemmEpilogue::BiasGradient), 0u);
    // One reduction over the batch fewer per layer: never more kernels.
    EXPECT_LE(with.kernels.size(), without.kernels.size());
    std::set<int64_t> widths;
    for (const rt::PackageThunk &t : with.thunks) {
      if (!t.hasGemm || t.gemm.epilogue != rt::PkgGemmEpilogue::BiasGradient)
        continue;
      ASSERT_EQ(t.operands.size(), 2u);
      ASSERT_EQ(t.results.size(), 2u);
      const rt::PackageBuffer &dy = with.buffers[t.operands[1]];
      const rt::PackageBuffer &db = with.buffers[t.results[1]];
      // rhs dY [batch, n], contracted over the batch; db [n].
      EXPECT_FALSE(t.gemm.transposeRhs);
      EXPECT_EQ(t.gemm.k, options.batch);
      EXPECT_EQ(dy.shape, (std::vector<int64_t>{options.batch, t.gemm.n}));
      EXPECT_EQ(db.shape, std::vector<int64_t>{t.gemm.n});
      EXPECT_EQ(db.dtype, with.buffers[t.results[0]].dtype);
      widths.insert(t.gemm.n);
    }
    EXPECT_EQ(widths, (std::set<int64_t>{24, 10}));
    rt::LoadedPackage loaded;
    roundTrip(with, loaded);
    ASSERT_FALSE(HasFatalFailure());
  }
}

TEST_F(CudaGemmEpilogueTest, GptBiasGradientsGoOnTheWeightGradients) {
  cli::GptOptions options = gpt();
  auto build = [&] { return cli::buildGpt(&context, options); };
  rt::LoadedPackage with = package(build, true, AmpMode::bf16, true);
  ASSERT_TRUE(rt::checkPackage(with).isOk());
  int n = epilogues(with)[rt::PkgGemmEpilogue::BiasGradient];
  RecordProperty("bias_gradient_gemms", n);
  // Every block's dense layers with a bias (qkv, the attention output, the
  // two MLP layers) at least.
  EXPECT_GE(n, 4 * options.layers);
}

// Each GPT block's attention and MLP projections add the residual stream
// to their product plus bias: one BiasResidual GEMM reading the residual
// as cuBLASLt's C (the result's dtype and shape, beta 1); the MLP's first
// layer keeps its pre-GELU value for the backward: one BiasGeluAux GEMM
// writing it as result 1. Neither has an epilogue kernel or a scratch
// product, on f32, bf16 and fp16; CPU packages keep the kernels.
TEST_F(CudaGemmEpilogueTest, GptResidualAndGeluAuxGoOnTheGemm) {
  cli::GptOptions options = gpt();
  auto build = [&] { return cli::buildGpt(&context, options); };
  for (AmpMode amp : {AmpMode::off, AmpMode::bf16, AmpMode::fp16}) {
    SCOPED_TRACE(static_cast<int>(amp));
    rt::LoadedPackage cuda = package(build, true, amp),
                      cpu = package(build, false, amp);
    std::map<rt::PkgGemmEpilogue, int> e = epilogues(cuda);
    EXPECT_EQ(e[rt::PkgGemmEpilogue::BiasResidual], 2 * options.layers);
    EXPECT_EQ(e[rt::PkgGemmEpilogue::BiasGeluAux], options.layers);
    // The tied embedding's gradient in f32: the lm head's dW plus the
    // lookup's scatter-add, dW = dot + C with C the result's own buffer
    // (in bf16 and fp16 a conversion sits between them).
    EXPECT_EQ(e.count(rt::PkgGemmEpilogue::Residual) == 1 &&
                  e[rt::PkgGemmEpilogue::Residual] == 1,
              amp == AmpMode::off);
    EXPECT_EQ(e.count(rt::PkgGemmEpilogue::GeluAux), 0u);
    EXPECT_EQ(epilogues(cpu).size(), 1u); // None only
    ASSERT_TRUE(rt::checkPackage(cuda).isOk());
    std::set<uint32_t> products; // the GEMMs' results
    for (const rt::PackageThunk &t : cuda.thunks) {
      if (!t.hasGemm)
        continue;
      const rt::PackageBuffer &out = cuda.buffers[t.results[0]];
      EXPECT_EQ(out.name.find(".dot"), std::string::npos) << out.name;
      if (t.gemm.epilogue == rt::PkgGemmEpilogue::Residual) {
        ASSERT_EQ(t.operands.size(), 3u);
        EXPECT_EQ(cuda.buffers[t.operands[2]].offset, out.offset);
        EXPECT_EQ(t.gemm.beta, 1.0);
      }
      if (t.gemm.epilogue == rt::PkgGemmEpilogue::BiasResidual) {
        ASSERT_EQ(t.operands.size(), 4u);
        ASSERT_EQ(t.results.size(), 1u);
        const rt::PackageBuffer &bias = cuda.buffers[t.operands[2]];
        const rt::PackageBuffer &c = cuda.buffers[t.operands[3]];
        EXPECT_EQ(bias.shape, std::vector<int64_t>{t.gemm.n});
        EXPECT_EQ(c.shape, out.shape);
        EXPECT_EQ(c.dtype, out.dtype);
        EXPECT_EQ(c.size, out.size);
        EXPECT_EQ(t.gemm.beta, 1.0);
        EXPECT_EQ(t.gemm.alpha, 1.0);
        EXPECT_EQ(t.gemm.batch, 1);
        // [batch, seq, hidden] = [m, n]; the residual stream is hidden wide.
        EXPECT_EQ(t.gemm.n, options.hidden);
        EXPECT_EQ(t.gemm.m, options.batch * options.seq);
      }
      if (t.gemm.epilogue == rt::PkgGemmEpilogue::BiasGeluAux) {
        ASSERT_EQ(t.operands.size(), 3u);
        ASSERT_EQ(t.results.size(), 2u);
        const rt::PackageBuffer &aux = cuda.buffers[t.results[1]];
        EXPECT_EQ(aux.shape, out.shape);
        EXPECT_EQ(aux.dtype, out.dtype);
        EXPECT_NE(t.results[0], t.results[1]);
        EXPECT_EQ(t.gemm.n, 4 * options.hidden);
        EXPECT_EQ(t.gemm.beta, 0.0);
        // The backward reads the pre-activation: some later thunk does.
        bool read = false;
        for (const rt::PackageThunk &later : cuda.thunks)
          for (uint32_t o : later.operands)
            read = read || o == t.results[1];
        EXPECT_TRUE(read);
      }
    }
    // One kernel and one launch fewer per fused GEMM than on the CPU.
    int fused = 0;
    for (auto [kind, n] : e)
      if (kind != rt::PkgGemmEpilogue::None)
        fused += n;
    EXPECT_EQ(cuda.kernels.size() + fused, cpu.kernels.size());
    EXPECT_EQ(launches(cuda) + fused, launches(cpu));
    rt::LoadedPackage loaded;
    roundTrip(cuda, loaded);
    ASSERT_FALSE(HasFatalFailure());
    // Written at the current minor version (epilogues need 1.1 or later).
    EXPECT_EQ(loaded.minorVersion, rt::kPackageMinorVersion);
    EXPECT_GE(loaded.minorVersion, 1);
    EXPECT_EQ(epilogues(loaded), e);
  }
}

TEST_F(CudaGemmEpilogueTest, CheckPackageRefusesMisplacedEpilogues) {
  cli::MlpOptions options;
  options.layers = {8, 4};
  options.batch = 4;
  rt::LoadedPackage cuda =
      package([&] { return cli::buildMlp(&context, options); }, true);
  ASSERT_TRUE(rt::checkPackage(cuda).isOk());
  size_t index = cuda.thunks.size();
  for (size_t i = 0; i < cuda.thunks.size(); ++i)
    if (cuda.thunks[i].hasGemm &&
        cuda.thunks[i].gemm.epilogue == rt::PkgGemmEpilogue::Bias)
      index = i;
  ASSERT_LT(index, cuda.thunks.size());

  rt::LoadedPackage onCpu = cuda;
  onCpu.target.kind = rt::TargetKind::Cpu;
  rt::Status s = rt::checkPackage(onCpu);
  ASSERT_FALSE(s.isOk());
  EXPECT_THAT(s.message(), HasSubstr("thunk " + std::to_string(index)));
  EXPECT_THAT(s.message(), HasSubstr("only CUDA packages carry GEMM epilogues"));

  rt::LoadedPackage noBias = cuda;
  noBias.thunks[index].operands.pop_back();
  s = rt::checkPackage(noBias);
  ASSERT_FALSE(s.isOk());
  EXPECT_THAT(s.message(), HasSubstr("gemm epilogue bias needs 3 operands"));

  rt::LoadedPackage gradient = cuda;
  gradient.thunks[index].gemm.epilogue = rt::PkgGemmEpilogue::BiasGradient;
  s = rt::checkPackage(gradient);
  ASSERT_FALSE(s.isOk());
  EXPECT_THAT(s.message(), HasSubstr("bias_gradient needs 2 operands and 2"));

  // A residual whose C is the bias: the wrong shape, named.
  rt::LoadedPackage residual = cuda;
  residual.thunks[index].gemm.epilogue = rt::PkgGemmEpilogue::BiasResidual;
  residual.thunks[index].operands.push_back(residual.thunks[index].operands[2]);
  s = rt::checkPackage(residual);
  ASSERT_FALSE(s.isOk());
  EXPECT_THAT(s.message(), HasSubstr("gemm epilogue bias_residual C (buffer"));
  EXPECT_THAT(s.message(), HasSubstr("expected the result's [4x4] f32"));

  // GELU's aux written over the bias: the wrong shape, named.
  rt::LoadedPackage aux = cuda;
  aux.thunks[index].gemm.epilogue = rt::PkgGemmEpilogue::BiasGeluAux;
  aux.thunks[index].results.push_back(aux.thunks[index].operands[2]);
  s = rt::checkPackage(aux);
  ASSERT_FALSE(s.isOk());
  EXPECT_THAT(s.message(), HasSubstr("gemm epilogue bias_gelu_aux aux (buffer"));
}

} // namespace
