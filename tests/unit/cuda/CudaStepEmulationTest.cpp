//===- CudaStepEmulationTest.cpp - whole steps through CudaExecutable -----===//
//
// The strongest proof of the GPU path without a GPU: a zoo model's training
// step is compiled exactly as `kiln compile --target=cuda` compiles it
// (PackageBuilder.h with CUDA hooks: emitted kernel source, block and grid),
// the package's kernels are compiled for the host under
// codegen/cuda/CudaEmulation.h, and the step runs through
// runtime/cuda/CudaExecutable.h on FakeCudaApi.h: the kernels reach the
// executable through its NVRTC path (the package holds source only), are
// launched with the runtime's launch shapes (256-thread blocks, grid capped
// by the fake device's multiprocessors) on the host (fibers), GEMMs run as the
// LibraryCall thunks say, and the updates copies feed the next step. Two
// steps (the second captured as a CUDA Graph and replayed by the fake) are
// compared with the reference interpreter running the same step function
// twice, every output within the dtype's bound. The GPT steps' GEMMs carry
// every epilogue the package has for them (bias, the residual as
// cuBLASLt's C, GELU with its pre-activation as aux, the bias gradient),
// which the fake computes as cuBLASLt does.
//
// With KILN_CUDA_GOLDEN_DIR set, each case also writes NAME.kpkg (kernels as
// source: a GPU loads them through NVRTC), NAME.inputs (the first step's
// input buffers, in signature order) and NAME.expected (the interpreter's
// outputs of that step, in the outputs' dtypes) there, for CudaGpuTest's
// golden test on a GPU machine without MLIR (bench/gpu/prepare.sh).
//
//===----------------------------------------------------------------------===//

#include "tests/unit/cuda/CudaMutantBackend.h"
#include "tests/unit/cuda/FakeCudaApi.h"
#include "tests/unit/cuda/HostKernels.h"
#include "tests/unit/cuda/RuntimeHostKernels.h"
#include "tests/unit/cuda/StepPackage.h"

#include "serialize/PackageWriter.h"
#include "tools/kiln/lib/CudaCompile.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <set>
#include <tuple>
#include <cstdlib>

namespace {

using namespace mlir;
using namespace kiln;
using namespace kiln::cuda_step_test;
using rt::cuda::testing::FakeCudaApi;

class CudaStepEmulationTest : public StepTest {
protected:
  // Compiles |model| for CUDA, runs two steps through CudaExecutable on
  // the fake and compares them with the interpreter.
  void check(OwningOpRef<ModuleOp> model, AmpMode amp, const std::string &name,
             bool fuseAttention = true, const std::string &remat = "off") {
    ASSERT_TRUE(model) << diagnostics;
    PipelineOptions options;
    options.amp = amp;
    options.remat = remat;
    // As `kiln compile --target=cuda` compiles it: attention fused into
    // kiln.attention / kiln.attention_grad library calls (unless asked not
    // to, as --fuse-attention=off), run by runtime/cuda/CudaAttention.h.
    options.target = kiln::TargetKind::cuda;
    options.fuseAttention = fuseAttention;
    // As `kiln compile --target=cuda` compiles it: weight gradients carry
    // their bias gradients (cuBLASLt BGRADA).
    options.gemmBiasGradients = true;
    options.optimizer.learningRate = kLearningRate; // the zoo's default
    ASSERT_TRUE(succeeded(runCompilePipeline(*model, options))) << diagnostics;
    func::FuncOp func = cli::findModelFunction(*model);
    ASSERT_TRUE(func) << diagnostics;
    // First stages of split column reductions (kiln-split-reductions):
    // [R1, R2, K...] summed over dimension 1, inside the kernels.
    splitStages = 0;
    func.walk([&](ReduceOp reduce) {
      auto type = cast<RankedTensorType>(reduce.getOperand().getType());
      splitStages += type.getRank() == 3 &&
                     reduce.getDimensions() == ArrayRef<int64_t>{1};
    });
    // Reductions inside horizontal fusions (kiln-fuse's
    // horizontal-reductions: the split second stages with their updates).
    packedReductions = 0;
    func.walk([&](FusionOp fusion) {
      if (fusion.getKind() == FusionKind::horizontal)
        fusion.walk([&](ReduceOp) { ++packedReductions; });
    });
    // Kernels of a layer norm's dx beside its split first stages
    // (kiln-fuse's row-group-partials; the rowgroup.block layout).
    rowGroupKernels = 0;
    func.walk([&](FusionOp fusion) {
      if (fusion.getKind() != FusionKind::reduction &&
          fusion.getKind() != FusionKind::multi_output)
        return;
      FailureOr<CudaKernelSource> source = emitCudaKernel(fusion, "probe");
      if (succeeded(source) &&
          llvm::is_contained(source->layouts, "rowgroup.block"))
        ++rowGroupKernels;
    });

    // The package, as CudaCompile.cpp builds it (sources only: the fake's
    // NVRTC hands them to the host build below).
    std::string sources;
    cli::PackageTargetHooks hooks = cudaPackageHooks(diagnostics, &sources);
    rt::LoadedPackage pkg;
    std::string errors;
    ASSERT_TRUE(packageStep(*model, &hooks, pkg, errors)) << errors << diagnostics;

    // The kernels for the host; the attention (runtime/cuda/CudaAttention.h)
    // and convolution (runtime/cuda/CudaConv.h) kernels join them when the
    // step calls them (the runtime compiles only those it calls: a step
    // without attention that asked for the attention kernels would fail).
    FakeCudaApi api;
    api.device.multiprocessors = 2; // grids of at most 16 blocks
    std::string error;
    api.hostKernels = rt::cuda::testing::buildHostKernels(
        sources, kernelEntries(pkg), "kernels", error);
    ASSERT_TRUE(error.empty()) << error;
    bool attention = false, conv = false;
    for (const rt::PackageThunk &thunk : pkg.thunks) {
      attention |= thunk.hasAttention;
      conv |= thunk.hasConv;
    }
    if (attention) {
      const auto &kernels = rt::cuda::testing::hostAttentionKernels(error);
      ASSERT_TRUE(error.empty()) << error;
      api.hostKernels.insert(kernels.begin(), kernels.end());
    }
    if (conv) {
      const auto &kernels = rt::cuda::testing::hostConvKernels(error);
      ASSERT_TRUE(error.empty()) << error;
      api.hostKernels.insert(kernels.begin(), kernels.end());
    }

    // Every kernel runs on copies of its arguments' extents, so one that
    // strays outside them is caught (FakeCudaApi::kernelArgs).
    api.learnPackage(pkg);
    std::vector<std::string> notes;
    rt::StatusOr<std::unique_ptr<rt::cuda::CudaExecutable>> made =
        createExecutable(pkg, api, notes);
    ASSERT_TRUE(made.isOk()) << made.status().message();
    // Every kernel's parameters (read from its emitted signature, as
    // cuFuncGetParamInfo would give them) are the thunk's buffers.
    EXPECT_GT(api.paramSizesKnown, 0);
    EXPECT_EQ(api.paramSizesKnown, int(api.count("cuFuncGetParamInfo")));
    rt::cuda::CudaExecutable &exec = *made.value();
    for (rt::cuda::KernelCode code : exec.kernelCode())
      EXPECT_EQ(code, rt::cuda::KernelCode::Nvrtc);

    // The same arguments for both: parameters from their initializers,
    // data random.
    StepHooks stepHooks;
    stepHooks.after = [&](int step, const std::vector<HostTensor> &values,
                          llvm::ArrayRef<HostTensor> expected) {
      const char *golden = std::getenv("KILN_CUDA_GOLDEN_DIR");
      if (!golden || step != 0)
        return;
      ASSERT_FALSE(llvm::sys::fs::create_directories(golden));
      std::string base = std::string(golden) + "/" + name;
      rt::Status written = serialize::writePackageFile(pkg, base + ".kpkg");
      ASSERT_TRUE(written.isOk()) << written.message();
      auto dump = [&](const std::string &path, llvm::ArrayRef<HostTensor> tensors) {
        std::error_code ec;
        llvm::raw_fd_ostream os(path, ec);
        EXPECT_FALSE(ec) << ec.message();
        for (const HostTensor &t : tensors) {
          std::vector<uint8_t> native = toNative(t);
          os.write(reinterpret_cast<const char *>(native.data()), native.size());
        }
      };
      dump(base + ".inputs", values);
      dump(base + ".expected", expected);
    };
    worstError = 0;
    runStepsAgainstInterpreter(func, pkg, exec, amp, name, diagnostics,
                               worstError, stepHooks);
    if (HasFatalFailure())
      return;
    EXPECT_TRUE(exec.usingGraph()) << exec.graphFallbackReason();
    EXPECT_EQ(api.count("cudaGraphLaunch"), 1u);
    EXPECT_TRUE(notes.empty());
    // The device memory the executable counted (and checked against what
    // was free before allocating) is what it allocated over two steps, and
    // what `kiln inspect` and --memory-budget count for sm_90 without a
    // device (cudaPackageMemory: the same parts for the same device).
    uint64_t allocated = 0;
    for (llvm::StringRef call : api.calls)
      if (call.consume_front("cudaMalloc ")) {
        uint64_t bytes = 0;
        EXPECT_FALSE(call.getAsInteger(10, bytes)) << call.str();
        allocated += bytes;
      }
    const rt::cuda::CudaStepMemory &memory = exec.memory();
    EXPECT_EQ(allocated, memory.total());
    EXPECT_EQ(memory.arena, pkg.arenaSize);
    EXPECT_GT(memory.gemmWorkspace, 0u);
    EXPECT_EQ(memory.attention > 0, attention);
    EXPECT_EQ(memory.convolution > 0, conv);
    rt::cuda::CudaStepMemory estimate = cli::cudaPackageMemory(pkg);
    EXPECT_EQ(estimate.total(), memory.total());
    EXPECT_EQ(estimate.attention, memory.attention);
    EXPECT_EQ(estimate.convolution, memory.convolution);
    EXPECT_EQ(estimate.epilogueFallback, memory.epilogueFallback);
    RecordProperty("device_memory", std::to_string(memory.total()));
    biasGradients = countThunks(pkg, [](const rt::PackageThunk &t) {
      return t.hasGemm && t.gemm.epilogue == rt::PkgGemmEpilogue::BiasGradient;
    });
    RecordProperty("bias_gradients", biasGradients);
    // The residual adds and GELU's kept pre-activation on the GEMMs, and
    // the GEMMs cuBLASLt ran with a C or an aux (per step).
    residuals = countThunks(pkg, [](const rt::PackageThunk &t) {
      return t.hasGemm && rt::pkgGemmEpilogueBuffers(t.gemm.epilogue).c;
    });
    geluAux = countThunks(pkg, [](const rt::PackageThunk &t) {
      return t.hasGemm && rt::pkgGemmEpilogueBuffers(t.gemm.epilogue).aux;
    });
    int withC = 0, withAux = 0;
    for (const FakeCudaApi::Gemm &g : api.gemms) {
      withC += g.desc.residual && g.c;
      withAux += rt::cuda::gemmEpilogueWritesAux(g.desc.epilogue) && g.aux;
    }
    // Both steps: the first run directly, the second captured and replayed.
    EXPECT_EQ(withC, 2 * residuals);
    EXPECT_EQ(withAux, 2 * geluAux);
    RecordProperty("residual_gemms", residuals);
    RecordProperty("gelu_aux_gemms", geluAux);
    // DGelu GEMMs whose result is their own aux (the buffer planner's in
    // place), and that every one was planned as such (GemmDesc::
    // auxIsOutput: no split-K reduction in D on cuBLASLt).
    dgeluInPlace = countThunks(pkg, [&](const rt::PackageThunk &t) {
      return t.hasGemm && t.gemm.epilogue == rt::PkgGemmEpilogue::DGelu &&
             pkg.buffers[t.operands[2]].offset ==
                 pkg.buffers[t.results[0]].offset;
    });
    int dgeluPlannedInPlace = 0, dgeluInPlaceRuns = 0;
    for (const rt::cuda::GemmDesc &d : api.plans)
      dgeluPlannedInPlace += d.auxIsOutput;
    for (const FakeCudaApi::Gemm &g : api.gemms)
      if (g.desc.epilogue == rt::cuda::GemmEpilogue::DGelu) {
        EXPECT_EQ(g.desc.auxIsOutput, g.aux == g.out);
        dgeluInPlaceRuns += g.aux == g.out;
      }
    EXPECT_EQ(dgeluInPlaceRuns, 2 * dgeluInPlace);
    EXPECT_EQ(dgeluPlannedInPlace > 0, dgeluInPlace > 0);
    attentionCalls = countThunks(pkg, [](const rt::PackageThunk &t) {
      return t.kind == rt::ThunkKind::LibraryCall &&
             (t.library == rt::LibraryKind::Attention ||
              t.library == rt::LibraryKind::AttentionGrad);
    });
    RecordProperty("attention_calls", attentionCalls);
    packedAttentionCalls = countThunks(pkg, [](const rt::PackageThunk &t) {
      return t.kind == rt::ThunkKind::LibraryCall && t.hasAttention &&
             t.attention.layout == rt::AttentionLayout::PackedBTHD;
    });
    RecordProperty("worst_relative_error", std::to_string(worstError));
    std::printf("%s: worst error %.3g of the output's magnitude (bound %.3g)\n",
                name.c_str(), worstError, relativeBound(amp));
    RecordProperty("kernels", static_cast<int>(pkg.kernels.size()));
    RecordProperty("gemms", static_cast<int>(api.gemms.size()));
    EXPECT_GT(api.gemms.size(), 0u);
  }

  // Of the last check(): GEMMs run with the BiasGradient epilogue (per
  // step, two steps) and the worst error over the output's magnitude.
  int biasGradients = 0;
  // GEMMs with a residual C (Residual, BiasResidual) and with GELU's aux
  // (GeluAux, BiasGeluAux) in the last check's package.
  int residuals = 0, geluAux = 0;
  // DGelu GEMMs whose result is their own aux, in the last check's package.
  int dgeluInPlace = 0;
  // Attention and AttentionGrad library calls in the last check's package,
  // and those of them in the packed layout (kiln-pack-attention: q, k, v
  // read from the qkv projection in place).
  int attentionCalls = 0, packedAttentionCalls = 0;
  // Split column reductions' first stages in the last check's step.
  int splitStages = 0;
  // Reduces inside horizontal fusions in the last check's step.
  int packedReductions = 0;
  // Kernels in the rowgroup.block layout in the last check's step.
  int rowGroupKernels = 0;
  double worstError = 0;
};

TEST_F(CudaStepEmulationTest, MlpF32TwoStepsMatchTheInterpreter) {
  check(cli::buildMlp(&context, smallMlp(37)), AmpMode::off, "mlp-f32");
  EXPECT_EQ(biasGradients, 2);
}

TEST_F(CudaStepEmulationTest, MlpBF16TwoStepsMatchTheInterpreter) {
  check(cli::buildMlp(&context, smallMlp(16)), AmpMode::bf16, "mlp-bf16");
  EXPECT_EQ(biasGradients, 2); // one per layer
}

TEST_F(CudaStepEmulationTest, MlpFP16TwoStepsMatchTheInterpreter) {
  check(cli::buildMlp(&context, smallMlp(16)), AmpMode::fp16, "mlp-fp16");
  EXPECT_EQ(biasGradients, 2);
}

// The GPT steps run their attention through the fused kernels (one
// Attention and one AttentionGrad call per block; head dim 20: the
// CUDA-core path), reading and writing the qkv projection in place (the
// packed layout), except the one compiled with --fuse-attention=off.
TEST_F(CudaStepEmulationTest, SmallGptF32TwoStepsMatchTheInterpreter) {
  check(cli::buildGpt(&context, smallGpt()), AmpMode::off, "gpt-f32");
  EXPECT_GT(biasGradients, 0);
  EXPECT_EQ(attentionCalls, 2);
  EXPECT_EQ(packedAttentionCalls, 2);
  // One block: the attention and MLP projections add the residual, the
  // MLP's first layer keeps its pre-GELU value; in f32 the tied embedding's
  // gradient (the lm head's dW plus the lookup's scatter-add, in place) is
  // a third residual GEMM.
  EXPECT_EQ(residuals, 3);
  EXPECT_EQ(geluAux, 1);
}

TEST_F(CudaStepEmulationTest, SmallGptF32MaterializedAttention) {
  check(cli::buildGpt(&context, smallGpt()), AmpMode::off, "gpt-f32-unfused",
        /*fuseAttention=*/false);
  EXPECT_EQ(attentionCalls, 0);
}

TEST_F(CudaStepEmulationTest, SmallGptBF16TwoStepsMatchTheInterpreter) {
  check(cli::buildGpt(&context, smallGpt()), AmpMode::bf16, "gpt-bf16");
  EXPECT_GT(biasGradients, 0);
  EXPECT_GT(dgeluInPlace, 0); // the planner's in place, planned as such
  EXPECT_EQ(attentionCalls, 2);
  EXPECT_EQ(packedAttentionCalls, 2);
  EXPECT_EQ(residuals, 2);
  EXPECT_EQ(geluAux, 1);
}

// Activation checkpointing (--remat=dots): the backward pass's recomputed
// layer norms, GELU and dropout-free bias adds run in kernels of their own
// or inside the backward kernels, and the step still matches.
TEST_F(CudaStepEmulationTest, SmallGptBF16Rematerialized) {
  check(cli::buildGpt(&context, smallGpt()), AmpMode::bf16, "gpt-bf16-remat",
        /*fuseAttention=*/true, "dots");
  EXPECT_EQ(packedAttentionCalls, 2);
  EXPECT_EQ(geluAux, 1);
}

// 4 x 256 = 1024 rows: the layer norms' scale and shift gradients are
// column reductions long enough for kiln-split-reductions (64 groups of 16
// rows, then the 64 partials), in f32 inside bf16 kernels.
TEST_F(CudaStepEmulationTest, GptBF16SplitColumnReductions) {
  cli::GptOptions options = smallGpt();
  options.hidden = 32;
  options.seq = 256;
  options.batch = 4;
  check(cli::buildGpt(&context, options), AmpMode::bf16, "gpt-bf16-split");
  // ln1, ln2 and ln_f: a scale and a shift gradient each; their second
  // stages, each with its Adam update, share one horizontal kernel (a
  // warp per result and group), run in place on the optimizer state.
  EXPECT_EQ(splitStages, 6);
  EXPECT_EQ(packedReductions, 6);
  EXPECT_EQ(packedAttentionCalls, 2);
  // The first stages sit beside their layer norm's dx (kiln-fuse's
  // row-group-partials): ln2's and ln_f's backward in the rowgroup.block
  // layout, matching the interpreter above. ln1's dx joins the kernel
  // that adds the embeddings' gradient, so its partials go beside its row
  // sums instead (a third nest: the row sums' element.warp and the
  // partials' thread per result).
  EXPECT_EQ(rowGroupKernels, 2);
}

TEST_F(CudaStepEmulationTest, SmallGptFP16TwoStepsMatchTheInterpreter) {
  check(cli::buildGpt(&context, smallGpt()), AmpMode::fp16, "gpt-fp16");
  EXPECT_GT(biasGradients, 0);
  EXPECT_EQ(attentionCalls, 2);
  EXPECT_EQ(packedAttentionCalls, 2);
  EXPECT_EQ(residuals, 2);
  EXPECT_EQ(geluAux, 1);
}

// Head dim 32 in bf16: the tensor-core (wmma) attention kernels, two
// blocks, a sequence longer than one 32-row tile.
TEST_F(CudaStepEmulationTest, GptBF16TensorCoreAttention) {
  cli::GptOptions options = smallGpt();
  options.layers = 2;
  options.hidden = 64;
  options.heads = 2;
  options.seq = 40;
  check(cli::buildGpt(&context, options), AmpMode::bf16, "gpt-bf16-wmma");
  EXPECT_EQ(attentionCalls, 4);
  EXPECT_EQ(packedAttentionCalls, 4);
  EXPECT_EQ(residuals, 4);
  EXPECT_EQ(geluAux, 2);
}

// The small bf16 GPT's step as `kiln compile --target=cuda` packages it,
// its library calls mutated one field at a time
// (tests/unit/package/PackageMutants.h): one call of each kind, epilogue
// and layout (the packed attention and its gradient, the GEMMs with their
// residual C, GELU aux, DGelu aux in place, bias gradients). Each mutant
// is refused with a message or runs in bounds on the fake table, as for
// the hand-built packages of CudaPackageMutationTest, but with the
// compiler's buffer plan and every other thunk of the step around it.
TEST_F(CudaStepEmulationTest, CompiledGptLibraryCallMutantsStayInTheirBuffers) {
  cli::GptOptions gpt = smallGpt();
  gpt.layers = 1;
  OwningOpRef<ModuleOp> model = cli::buildGpt(&context, gpt);
  ASSERT_TRUE(model) << diagnostics;
  PipelineOptions options;
  options.amp = AmpMode::bf16;
  options.target = kiln::TargetKind::cuda;
  options.gemmBiasGradients = true;
  ASSERT_TRUE(succeeded(runCompilePipeline(*model, options))) << diagnostics;
  cli::PackageTargetHooks hooks = cudaPackageHooks(diagnostics);
  rt::LoadedPackage pkg;
  std::string errors;
  ASSERT_TRUE(packageStep(*model, &hooks, pkg, errors)) << errors << diagnostics;
  // The first library call of each kind, epilogue and layout.
  std::vector<size_t> chosen;
  std::set<std::tuple<int, int, int>> seen;
  for (size_t i = 0; i < pkg.thunks.size(); ++i) {
    const rt::PackageThunk &t = pkg.thunks[i];
    if (t.kind == rt::ThunkKind::LibraryCall &&
        seen.insert({int(t.library), t.hasGemm ? int(t.gemm.epilogue) : -1,
                     t.hasAttention ? int(t.attention.layout) : -1})
            .second)
      chosen.push_back(i);
  }
  ASSERT_GE(chosen.size(), 6u); // attention, its gradient, 4+ epilogues
  rt::cuda::testing::CudaBackend backend;
  rt::testing::expectEveryOutcome(
      rt::testing::checkMutants("compiled gpt bf16", pkg, backend, &chosen));
}

// LeNet-5 (two convolutions, forward and both gradients, through
// CudaConv.h's kernels and batched GEMMs) at a small batch.
TEST_F(CudaStepEmulationTest, LeNet5F32TwoStepsMatchTheInterpreter) {
  cli::LeNet5Options options;
  options.batch = 3;
  check(cli::buildLeNet5(&context, options), AmpMode::off, "lenet5-f32");
}

TEST_F(CudaStepEmulationTest, LeNet5BF16TwoStepsMatchTheInterpreter) {
  cli::LeNet5Options options;
  options.batch = 2;
  check(cli::buildLeNet5(&context, options), AmpMode::bf16, "lenet5-bf16");
}

// --remat=full: the backward pass runs the forward GEMMs and the fused
// attention again.
TEST_F(CudaStepEmulationTest, SmallGptBF16FullyRematerialized) {
  check(cli::buildGpt(&context, smallGpt()), AmpMode::bf16, "gpt-bf16-remat-full",
        /*fuseAttention=*/true, "full");
  EXPECT_EQ(attentionCalls, 3); // the block's forward, again, and backward
}

TEST_F(CudaStepEmulationTest, LeNet5F32Rematerialized) {
  cli::LeNet5Options options;
  options.batch = 3;
  check(cli::buildLeNet5(&context, options), AmpMode::off, "lenet5-f32-remat",
        /*fuseAttention=*/true, "dots");
}

} // namespace
