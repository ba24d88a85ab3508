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
// by the fake device's multiprocessors) on host threads, GEMMs run as the
// LibraryCall thunks say, and the updates copies feed the next step. Two
// steps (the second captured as a CUDA Graph and replayed by the fake) are
// compared with the reference interpreter running the same step function
// twice, every output within the dtype's bound.
//
// With KILN_CUDA_GOLDEN_DIR set, each case also writes NAME.kpkg (kernels as
// source: a GPU loads them through NVRTC), NAME.inputs (the first step's
// input buffers, in signature order) and NAME.expected (the interpreter's
// outputs of that step, in the outputs' dtypes) there, for CudaGpuTest's
// golden test on a GPU machine without MLIR (bench/gpu/prepare.sh).
//
//===----------------------------------------------------------------------===//

#include "codegen/cuda/CudaEmitter.h"
#include "tests/unit/cuda/FakeCudaApi.h"
#include "tests/unit/cuda/RuntimeHostKernels.h"

#include "ir/Interpreter.h"
#include "passes/Pipelines.h"
#include "runtime/Half.h"
#include "runtime/cuda/CudaConv.h"
#include "runtime/cuda/CudaExecutable.h"
#include "tools/kiln/lib/ModuleLoader.h"
#include "tools/kiln/lib/PackageBuilder.h"
#include "tools/kiln/lib/ReferenceStep.h"
#include "tools/kiln/lib/Zoo.h"
#include "serialize/PackageWriter.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

#include <dlfcn.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

namespace {

using namespace mlir;
using namespace kiln;
namespace rt = kiln::runtime;
using rt::cuda::testing::FakeCudaApi;

std::vector<uint8_t> toNative(const HostTensor &t) {
  int64_t width = byteWidth(t.dtype());
  std::vector<uint8_t> out(t.size() * width);
  for (int64_t i = 0; i < t.size(); ++i) {
    uint8_t *p = out.data() + i * width;
    double v = t[i];
    switch (t.dtype()) {
    case DType::f64: std::memcpy(p, &v, 8); break;
    case DType::f32: { float f = v; std::memcpy(p, &f, 4); break; }
    case DType::f16: { uint16_t h = rt::floatToF16(v); std::memcpy(p, &h, 2); break; }
    case DType::bf16: { uint16_t h = rt::floatToBf16(v); std::memcpy(p, &h, 2); break; }
    case DType::i64: { int64_t x = v; std::memcpy(p, &x, 8); break; }
    case DType::i32: { int32_t x = v; std::memcpy(p, &x, 4); break; }
    case DType::i8: { int8_t x = v; std::memcpy(p, &x, 1); break; }
    case DType::i1: *p = v != 0; break;
    }
  }
  return out;
}

double nativeAt(const std::vector<uint8_t> &b, DType dtype, int64_t i) {
  const uint8_t *p = b.data() + i * byteWidth(dtype);
  switch (dtype) {
  case DType::f64: { double v; std::memcpy(&v, p, 8); return v; }
  case DType::f32: { float v; std::memcpy(&v, p, 4); return v; }
  case DType::f16: { uint16_t h; std::memcpy(&h, p, 2); return rt::f16ToFloat(h); }
  case DType::bf16: { uint16_t h; std::memcpy(&h, p, 2); return rt::bf16ToFloat(h); }
  case DType::i64: { int64_t v; std::memcpy(&v, p, 8); return double(v); }
  case DType::i32: { int32_t v; std::memcpy(&v, p, 4); return v; }
  case DType::i8: { int8_t v; std::memcpy(&v, p, 1); return v; }
  case DType::i1: return *p != 0;
  }
  return 0;
}

class CudaStepEmulationTest : public ::testing::Test {
protected:
  CudaStepEmulationTest() {
    DialectRegistry registry;
    cli::registerKilnDialects(registry);
    context.appendDialectRegistry(registry);
    context.loadAllAvailableDialects();
    context.getDiagEngine().registerHandler([this](Diagnostic &d) {
      diagnostics += d.str() + "\n";
      return success();
    });
  }

  // Compiles |model| for CUDA, runs two steps through CudaExecutable on
  // the fake and compares them with the interpreter.
  void check(OwningOpRef<ModuleOp> model, AmpMode amp, const std::string &name,
             bool fuseAttention = true) {
    ASSERT_TRUE(model) << diagnostics;
    PipelineOptions options;
    options.amp = amp;
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

    // The package, as CudaCompile.cpp builds it (sources only: the fake's
    // NVRTC hands them to the host build below).
    cli::PackageTargetHooks hooks;
    hooks.target.kind = rt::TargetKind::Cuda;
    hooks.target.smArchs = {90};
    std::string sources;
    hooks.compileKernel = [&](FusionOp fusion, const std::string &name,
                              rt::PackageKernel &kernel, std::string &error) {
      std::string entry = "kiln_k" + std::to_string(sourcesCount++);
      FailureOr<CudaKernelSource> source = emitCudaKernel(fusion, entry);
      if (failed(source)) {
        error = name + ": " + diagnostics;
        return false;
      }
      kernel.kind = rt::KernelKind::Cuda;
      kernel.entryPoint = entry;
      kernel.source = source->source;
      kernel.block = {source->launch.blockThreads, 1, 1};
      kernel.grid = {static_cast<uint32_t>(source->launch.maxBlocks), 1, 1};
      sources += source->source + "\n";
      return true;
    };
    rt::LoadedPackage pkg;
    std::string errors;
    llvm::raw_string_ostream errs(errors);
    ASSERT_TRUE(succeeded(cli::buildStepPackage(*model, "model", "", {}, "test",
                                                errs, pkg, &hooks)))
        << errs.str() << diagnostics;

    // The kernels for the host.
    // The convolutions' kernels (runtime/cuda/CudaConv.h) join them.
    sources += rt::cuda::convKernelSource() + "\n";
    llvm::SmallString<128> dir;
    ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("kiln-cuda-step", dir));
    std::string cu = (dir + "/kernels.cpp").str(), so = (dir + "/kernels.so").str(),
                log = (dir + "/clang.log").str();
    {
      std::error_code ec;
      llvm::raw_fd_ostream os(cu, ec);
      ASSERT_FALSE(ec) << ec.message();
      os << sources;
    }
    std::vector<llvm::StringRef> argv = {
        KILN_HOST_CXX, "-std=c++20", "-O1", "-w", "-shared", "-fPIC",
        "-DKILN_CUDA_EMULATION", "-include", KILN_CUDA_EMULATION_HEADER,
        "-x", "c++", cu, "-o", so, "-lpthread"};
    std::optional<llvm::StringRef> redirects[] = {std::nullopt, llvm::StringRef(log),
                                                  llvm::StringRef(log)};
    ASSERT_EQ(llvm::sys::ExecuteAndWait(KILN_HOST_CXX, argv, std::nullopt,
                                        redirects),
              0)
        << "host build of the kernels failed; see " << log;
    void *library = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
    ASSERT_TRUE(library) << dlerror();
    FakeCudaApi api;
    api.device.multiprocessors = 2; // grids of at most 16 blocks
    for (const rt::PackageKernel &k : pkg.kernels) {
      void *fn = dlsym(library, (k.entryPoint + "_host").c_str());
      ASSERT_TRUE(fn) << k.entryPoint;
      api.hostKernels[k.entryPoint] =
          reinterpret_cast<rt::cuda::testing::HostKernel>(fn);
    }
    std::string attentionError;
    for (const auto &[entry, fn] :
         rt::cuda::testing::hostAttentionKernels(attentionError))
      api.hostKernels[entry] = fn;
    ASSERT_TRUE(attentionError.empty()) << attentionError;
    for (const std::string &entry : rt::cuda::convKernelEntryPoints()) {
      void *fn = dlsym(library, (entry + "_host").c_str());
      ASSERT_TRUE(fn) << entry;
      api.hostKernels[entry] = reinterpret_cast<rt::cuda::testing::HostKernel>(fn);
    }

    std::vector<std::string> notes;
    rt::cuda::CudaOptions cudaOptions;
    cudaOptions.log = [&](const std::string &n) { notes.push_back(n); };
    rt::StatusOr<std::unique_ptr<rt::cuda::CudaExecutable>> made =
        rt::cuda::CudaExecutable::create(pkg, api, cudaOptions);
    ASSERT_TRUE(made.isOk()) << made.status().message();
    rt::cuda::CudaExecutable &exec = *made.value();
    for (rt::cuda::KernelCode code : exec.kernelCode())
      EXPECT_EQ(code, rt::cuda::KernelCode::Nvrtc);

    // The same arguments for both: parameters from their initializers,
    // data random.
    std::vector<cli::ArgumentInfo> args = cli::describeArguments(func);
    std::vector<cli::ResultInfo> results = cli::describeResults(func);
    ASSERT_EQ(args.size(), pkg.inputs.size());
    ASSERT_EQ(results.size(), pkg.outputs.size());
    std::mt19937_64 rng(5);
    std::vector<HostTensor> values;
    for (const cli::ArgumentInfo &a : args) {
      bool data = a.role == Role::input || a.role == Role::label;
      values.push_back(data ? cli::randomData(func, a, rng) : cli::initialValue(a));
      std::vector<uint8_t> native = toNative(values.back());
      ASSERT_EQ(native.size(), pkg.buffers[pkg.inputs[a.index].buffer].size)
          << a.name;
      ASSERT_TRUE(exec.writeInput(a.index, native.data()).isOk());
    }

    Interpreter interpreter;
    for (int step = 0; step < 2; ++step) {
      FailureOr<SmallVector<HostTensor>> expected = interpreter.run(func, values);
      ASSERT_TRUE(succeeded(expected)) << diagnostics;
      const char *golden = std::getenv("KILN_CUDA_GOLDEN_DIR");
      if (golden && step == 0) {
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
        dump(base + ".expected", *expected);
      }
      rt::Status s = exec.run();
      ASSERT_TRUE(s.isOk()) << s.message();
      for (const cli::ResultInfo &r : results) {
        const HostTensor &e = (*expected)[r.index];
        std::vector<uint8_t> got(pkg.buffers[pkg.outputs[r.index].buffer].size);
        ASSERT_TRUE(exec.readOutput(r.index, got.data()).isOk());
        // Relative to the output's magnitude (its largest element): the
        // steps differ by the order of f32 sums and, for bf16 and fp16, by
        // cuBLASLt's single rounding after a GEMM's epilogue where the
        // interpreter rounds the product first (docs/cuda.md), which the
        // backward and the optimizer carry into every output.
        double magnitude = 0;
        for (int64_t i = 0; i < e.size(); ++i)
          magnitude = std::max(magnitude, std::fabs(e[i]));
        double rel = relativeBound(amp);
        // Adam divides each gradient by its own RMS, so an element whose
        // gradient is rounding noise (a key bias's gradient is zero in exact
        // arithmetic: softmax ignores a constant added to every key) moves
        // by up to the learning rate either way on each side. Parameters
        // get that allowance per step taken; the gradients themselves are
        // checked through the optimizer state (Adam's m and v), which gets
        // none.
        double allowance =
            r.role == Role::parameter ? 2 * kLearningRate * (step + 1) : 0;
        int bad = 0;
        double worst = 0;
        for (int64_t i = 0; i < e.size(); ++i) {
          double want = e[i], have = nativeAt(got, e.dtype(), i);
          double error = std::max(std::fabs(want - have) - allowance, 0.0) /
                         std::max(magnitude, 1e-30);
          worst = std::max(worst, error == error ? error : HUGE_VAL);
          if (!(error <= rel) && bad < 3) {
            ADD_FAILURE() << "step " << step << " output '" << r.name
                          << "' element " << i << ": interpreter " << want
                          << ", CudaExecutable " << have << " (output magnitude "
                          << magnitude << ", bound " << rel << " of it plus "
                          << allowance << ")";
            ++bad;
          }
        }
        worstError = std::max(worstError, worst);
      }
      // The next step reads the updated parameters and state.
      for (const cli::ResultInfo &r : results)
        if (r.updates)
          values[*r.updates] = (*expected)[r.index];
    }
    EXPECT_TRUE(exec.usingGraph()) << exec.graphFallbackReason();
    EXPECT_EQ(api.count("cudaGraphLaunch"), 1u);
    EXPECT_TRUE(notes.empty());
    biasGradients = 0;
    for (const rt::PackageThunk &t : pkg.thunks)
      biasGradients += t.hasGemm &&
                       t.gemm.epilogue == rt::PkgGemmEpilogue::BiasGradient;
    RecordProperty("bias_gradients", biasGradients);
    attentionCalls = 0;
    for (const rt::PackageThunk &t : pkg.thunks)
      attentionCalls += t.kind == rt::ThunkKind::LibraryCall &&
                        (t.library == rt::LibraryKind::Attention ||
                         t.library == rt::LibraryKind::AttentionGrad);
    RecordProperty("attention_calls", attentionCalls);
    RecordProperty("worst_relative_error", std::to_string(worstError));
    std::printf("%s: worst error %.3g of the output's magnitude (bound %.3g)\n",
                name.c_str(), worstError, relativeBound(amp));
    RecordProperty("kernels", static_cast<int>(pkg.kernels.size()));
    RecordProperty("gemms", static_cast<int>(api.gemms.size()));
    EXPECT_GT(api.gemms.size(), 0u);
    dlclose(library);
    llvm::sys::fs::remove_directories(dir);
  }

  // The bound on |interpreter - CudaExecutable| over the output's largest
  // magnitude: f32 2^-16; bf16 and fp16 4 ulps of 1 (2^-5 and 2^-8: a
  // rounding of the output type is half an ulp, 2^-8 and 2^-11).
  static constexpr double kLearningRate = 1e-3;

  static double relativeBound(AmpMode amp) {
    switch (amp) {
    case AmpMode::off: return std::ldexp(1.0, -16);
    case AmpMode::bf16: return 4 * std::ldexp(1.0, -7);
    case AmpMode::fp16: return 4 * std::ldexp(1.0, -10);
    }
    return 0;
  }

  MLIRContext context;
  std::string diagnostics;
  int sourcesCount = 0;
  // Of the last check(): GEMMs run with the BiasGradient epilogue (per
  // step, two steps) and the worst error over the output's magnitude.
  int biasGradients = 0;
  // Attention and AttentionGrad library calls in the last check's package.
  int attentionCalls = 0;
  double worstError = 0;
};

TEST_F(CudaStepEmulationTest, MlpF32TwoStepsMatchTheInterpreter) {
  cli::MlpOptions options;
  options.layers = {40, 24, 10};
  options.batch = 37;
  check(cli::buildMlp(&context, options), AmpMode::off, "mlp-f32");
  EXPECT_EQ(biasGradients, 2);
}

TEST_F(CudaStepEmulationTest, MlpBF16TwoStepsMatchTheInterpreter) {
  cli::MlpOptions options;
  options.layers = {40, 24, 10};
  options.batch = 16;
  check(cli::buildMlp(&context, options), AmpMode::bf16, "mlp-bf16");
  EXPECT_EQ(biasGradients, 2); // one per layer
}

TEST_F(CudaStepEmulationTest, MlpFP16TwoStepsMatchTheInterpreter) {
  cli::MlpOptions options;
  options.layers = {40, 24, 10};
  options.batch = 16;
  check(cli::buildMlp(&context, options), AmpMode::fp16, "mlp-fp16");
  EXPECT_EQ(biasGradients, 2);
}

cli::GptOptions smallGpt() {
  cli::GptOptions options;
  options.layers = 1;
  options.hidden = 40; // layer-norm rows longer than a warp
  options.heads = 2;
  options.seq = 6;
  options.vocab = 36;
  options.batch = 2;
  return options;
}

// The GPT steps run their attention through the fused kernels (one
// Attention and one AttentionGrad call per block; head dim 20: the
// CUDA-core path), except the one compiled with --fuse-attention=off.
TEST_F(CudaStepEmulationTest, SmallGptF32TwoStepsMatchTheInterpreter) {
  check(cli::buildGpt(&context, smallGpt()), AmpMode::off, "gpt-f32");
  EXPECT_GT(biasGradients, 0);
  EXPECT_EQ(attentionCalls, 2);
}

TEST_F(CudaStepEmulationTest, SmallGptF32MaterializedAttention) {
  check(cli::buildGpt(&context, smallGpt()), AmpMode::off, "gpt-f32-unfused",
        /*fuseAttention=*/false);
  EXPECT_EQ(attentionCalls, 0);
}

TEST_F(CudaStepEmulationTest, SmallGptBF16TwoStepsMatchTheInterpreter) {
  check(cli::buildGpt(&context, smallGpt()), AmpMode::bf16, "gpt-bf16");
  EXPECT_GT(biasGradients, 0);
  EXPECT_EQ(attentionCalls, 2);
}

TEST_F(CudaStepEmulationTest, SmallGptFP16TwoStepsMatchTheInterpreter) {
  check(cli::buildGpt(&context, smallGpt()), AmpMode::fp16, "gpt-fp16");
  EXPECT_GT(biasGradients, 0);
  EXPECT_EQ(attentionCalls, 2);
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

} // namespace
