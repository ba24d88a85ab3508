//===- CudaConvTest.cpp - the GPU convolutions without a GPU --------------===//
//
// runtime/cuda/CudaConv.h through CudaExecutable on FakeCudaApi.h: the
// convolution kernels' CUDA C++ (convKernelSource()) is compiled for the
// host under codegen/cuda/CudaEmulation.h and runs on the host (fibers) with
// the runtime's launch shapes, the GEMMs on the fake's host cuBLASLt; each
// of conv2d, conv2d_input_grad and conv2d_filter_grad (strides, padding,
// dilation, groups, several shapes; f32, bf16, f16) is compared with the
// reference interpreter's kiln op on random data. Per element the bound is
// relative to sum |a| |b| over its terms (the interpreter on the operands'
// absolute values): 1e-5 for f32; for bf16 and f16 (16-bit GEMM operands,
// as on tensor cores, summed in f32 and rounded once) one unit in the last
// place of the result besides. With
// the CUDA toolkit, the same source compiles through NVRTC and ptxas for
// sm_90; registers and spills are printed and recorded, and no kernel
// spills; and the runtime's real table (loadCudaApi without a driver)
// compiles it with NVRTC as CudaConv does.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudaConv.h"
#include "runtime/cuda/CudaExecutable.h"
#include "tests/unit/cuda/ConvPackage.h"
#include "tests/unit/cuda/FakeCudaApi.h"
#include "tests/unit/cuda/NativeTensor.h"
#include "tests/unit/cuda/RuntimeHostKernels.h"
#include "tests/unit/cuda/Sm90Kernels.h"

#include "ir/Interpreter.h"
#include "ir/KilnOps.h"
#include "runtime/Half.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>

namespace {

using namespace kiln::runtime;
using namespace kiln::runtime::cuda;
using kiln::DType;
using kiln::HostTensor;
namespace ct = kiln::runtime::cuda::testing;
using ct::FakeCudaApi;
using ct::HostKernel;

std::string listStr(const std::vector<int64_t> &v) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < v.size(); ++i)
    os << (i ? ", " : "") << v[i];
  os << "]";
  return os.str();
}

std::string typeStr(const std::vector<int64_t> &shape, DType dtype) {
  std::ostringstream os;
  os << "tensor<";
  for (int64_t d : shape)
    os << d << "x";
  os << kiln::dtypeName(dtype) << ">";
  return os.str();
}

PkgDType pkgDtype(DType dtype) {
  switch (dtype) {
  case DType::f64: return PkgDType::F64;
  case DType::f16: return PkgDType::F16;
  case DType::bf16: return PkgDType::BF16;
  default: return PkgDType::F32;
  }
}

using kiln::cuda_step_test::nativeAt;
using kiln::cuda_step_test::toNative;

class CudaConvTest : public ::testing::Test {
protected:
  CudaConvTest() : gen(20261130) {
    context.loadDialect<kiln::KilnDialect, mlir::func::FuncDialect>();
    handler = std::make_unique<mlir::ScopedDiagnosticHandler>(
        &context, [this](mlir::Diagnostic &d) {
          diagnostics += d.str() + "\n";
          return mlir::success();
        });
  }

  void SetUp() override {
    std::string error;
    kernels = &ct::hostConvKernels(error);
    ASSERT_TRUE(error.empty()) << error;
  }

  HostTensor random(DType dtype, const std::vector<int64_t> &shape) {
    std::uniform_real_distribution<double> dist(-1, 1);
    HostTensor t(dtype, shape);
    for (double &v : t.values())
      v = kiln::roundTo(dtype, dist(gen));
    return t;
  }

  // The interpreter's |op| on |args| and on their absolute values.
  std::pair<HostTensor, HostTensor> reference(const std::string &op,
                                              const ConvParams &p,
                                              const std::vector<std::vector<int64_t>> &shapes,
                                              DType dtype, std::vector<HostTensor> args) {
    std::string attrs = "strides = " + listStr(p.strides) + ", padding = " +
                        listStr(p.padding) + ", dilation = " + listStr(p.dilation) +
                        ", groups = " + std::to_string(p.groups);
    std::string a = typeStr(shapes[0], dtype), b = typeStr(shapes[1], dtype),
                r = typeStr(shapes[2], dtype);
    std::string source = "func.func @f(%a: " + a + ", %b: " + b + ") -> " + r +
                         " {\n  %r = kiln." + op + " %a, %b, " + attrs + " : (" +
                         a + ", " + b + ") -> " + r + "\n  return %r : " + r +
                         "\n}\n";
    mlir::OwningOpRef<mlir::ModuleOp> module =
        mlir::parseSourceString<mlir::ModuleOp>(source, &context, "conv.mlir");
    EXPECT_TRUE(module) << source << diagnostics;
    if (!module)
      return {};
    auto f = module->lookupSymbol<mlir::func::FuncOp>("f");
    kiln::Interpreter interpreter;
    auto results = interpreter.run(f, args);
    EXPECT_TRUE(mlir::succeeded(results)) << source << diagnostics;
    // The bound's scale: the same op on absolute values, in f64.
    std::vector<HostTensor> absArgs;
    for (HostTensor &t : args) {
      HostTensor x(DType::f64, t.shape());
      for (int64_t i = 0; i < t.size(); ++i)
        x.values()[i] = std::fabs(t[i]);
      absArgs.push_back(x);
    }
    std::string a64 = typeStr(shapes[0], DType::f64), b64 = typeStr(shapes[1], DType::f64),
                r64 = typeStr(shapes[2], DType::f64);
    std::string absSource = "func.func @f(%a: " + a64 + ", %b: " + b64 + ") -> " +
                            r64 + " {\n  %r = kiln." + op + " %a, %b, " + attrs +
                            " : (" + a64 + ", " + b64 + ") -> " + r64 +
                            "\n  return %r : " + r64 + "\n}\n";
    mlir::OwningOpRef<mlir::ModuleOp> absModule =
        mlir::parseSourceString<mlir::ModuleOp>(absSource, &context, "conv.mlir");
    EXPECT_TRUE(absModule) << absSource << diagnostics;
    if (!absModule || !mlir::succeeded(results))
      return {};
    auto absResults = interpreter.run(
        absModule->lookupSymbol<mlir::func::FuncOp>("f"), absArgs);
    EXPECT_TRUE(mlir::succeeded(absResults)) << absSource << diagnostics;
    if (!mlir::succeeded(absResults))
      return {};
    return {(*results)[0], (*absResults)[0]};
  }

  // Runs |kind| of |p| through CudaExecutable and compares it with the
  // interpreter; returns the fake for call checks. |tuned|: the fake's
  // GEMM plans hold 4 algorithms and its clock makes the third the
  // fastest, so the autotuner picks it for each convolution GEMM and the
  // steps run it.
  void check(LibraryKind kind, const ConvParams &p, DType dtype,
             bool tuned = false) {
    const char *op = kind == LibraryKind::Conv2D            ? "conv2d"
                     : kind == LibraryKind::Conv2DInputGrad ? "conv2d_input_grad"
                                                            : "conv2d_filter_grad";
    SCOPED_TRACE(std::string(op) + " " + kiln::dtypeName(dtype) + " input " +
                 listStr(p.inputShape) + " filter " + listStr(p.filterShape) +
                 " strides " + listStr(p.strides) + " padding " +
                 listStr(p.padding) + " dilation " + listStr(p.dilation) +
                 " groups " + std::to_string(p.groups));
    std::vector<std::vector<int64_t>> shapes = ct::convShapes(kind, p);
    HostTensor a = random(dtype, shapes[0]), b = random(dtype, shapes[1]);
    auto [want, scale] = reference(op, p, shapes, dtype, {a, b});
    ASSERT_EQ(want.size(), ct::numel(shapes[2]));

    FakeCudaApi api;
    api.device.multiprocessors = 2; // grids of at most 16 blocks of 256
    api.hostKernels = *kernels;
    CudaOptions options;
    options.log = [](const std::string &) {};
    if (tuned) {
      api.gemmAlgorithms = 4;
      api.gemmAlgorithmMs = [](const GemmDesc &, int algorithm) {
        return algorithm == 2 ? 1.0 : 2.0;
      };
      options.autotuneCache = "off";
      options.autotuneRuns = options.autotuneTrials = 1;
    }
    LoadedPackage package = ct::convPackage(kind, p, pkgDtype(dtype));
    // The convolution kernels run on copies of the buffers they point into
    // (FakeCudaApi::kernelArgs).
    api.learnPackage(package);
    StatusOr<std::unique_ptr<CudaExecutable>> made =
        CudaExecutable::create(std::move(package), api, options);
    ASSERT_TRUE(made.isOk()) << made.status().message();
    CudaExecutable &exec = *made.value();
    size_t tuningGemms = api.gemms.size();
    if (tuned) {
      // One GEMM shape per chunk size, each tuned to the third algorithm.
      ASSERT_FALSE(exec.tuning().empty());
      for (const Tuning &t : exec.tuning()) {
        EXPECT_NE(t.shape.find(" (convolution)"), std::string::npos) << t.shape;
        EXPECT_EQ(t.chosen, 2) << t.shape;
        EXPECT_EQ(t.ms.size(), 4u) << t.shape;
      }
    } else {
      EXPECT_EQ(tuningGemms, 0u);
    }
    ASSERT_TRUE(exec.writeInput(0, toNative(a).data()).isOk());
    ASSERT_TRUE(exec.writeInput(1, toNative(b).data()).isOk());
    // Two steps: plain launches, then the captured graph's replay.
    for (int step = 0; step < 2; ++step) {
      std::vector<uint8_t> poison(exec.package().buffers[2].size, 0xcd);
      ASSERT_TRUE(exec.writeBuffer(2, poison.data()).isOk());
      Status s = exec.run();
      ASSERT_TRUE(s.isOk()) << s.message();
      std::vector<uint8_t> got(exec.package().buffers[2].size);
      ASSERT_TRUE(exec.readOutput(0, got.data()).isOk());
      double rel = dtype == DType::f32   ? 0
                   : dtype == DType::bf16 ? 0x1p-7
                                          : 0x1p-10;
      int bad = 0;
      for (int64_t i = 0; i < want.size() && bad < 5; ++i) {
        double w = want[i], h = nativeAt(got, dtype, i);
        double bound = 1e-5 * scale[i] + rel * std::fabs(w) + 1e-30;
        if (!(std::fabs(w - h) <= bound)) {
          ADD_FAILURE() << "step " << step << " element " << i
                        << ": interpreter " << w << ", GPU path " << h
                        << " (bound " << bound << ")";
          ++bad;
        }
      }
    }
    EXPECT_TRUE(exec.usingGraph()) << exec.graphFallbackReason();
    // One batched GEMM per step and chunk of images (batch = groups), on
    // the convolution's own type (f16 and bf16 on tensor cores), with an
    // f32 result for half inputs.
    int64_t chunks = (p.inputShape[0] + imagesPerChunk - 1) / imagesPerChunk;
    ASSERT_EQ(api.gemms.size() - tuningGemms, size_t(2 * chunks));
    bool half = dtype == DType::bf16 || dtype == DType::f16;
    for (size_t i = tuningGemms; i < api.gemms.size(); ++i) {
      EXPECT_EQ(api.gemms[i].desc.params.batch, p.groups);
      EXPECT_EQ(api.gemms[i].desc.dtype, pkgDtype(dtype)) << "step GEMM " << i;
      EXPECT_EQ(api.gemms[i].desc.f32Output, half) << "step GEMM " << i;
    }
    for (size_t i = tuningGemms; i < api.gemms.size(); ++i)
      EXPECT_EQ(api.gemms[i].algorithm, tuned ? 2 : 0) << "step GEMM " << i;
    for (const FakeCudaApi::Launch &l : api.launches) {
      EXPECT_EQ(l.entry.rfind("kiln_conv_", 0), 0u) << l.entry;
      EXPECT_EQ(l.block[0], 256u);
      EXPECT_LE(l.grid[0], 16u);
    }
  }

  void checkAll(const ConvParams &p, DType dtype) {
    for (LibraryKind kind : {LibraryKind::Conv2D, LibraryKind::Conv2DInputGrad,
                             LibraryKind::Conv2DFilterGrad})
      check(kind, p, dtype);
  }

  mlir::MLIRContext context;
  std::unique_ptr<mlir::ScopedDiagnosticHandler> handler;
  std::string diagnostics;
  std::mt19937_64 gen;
  const std::map<std::string, HostKernel> *kernels = nullptr;
  int64_t imagesPerChunk = 1 << 30; // as setConvColumnLimit makes them
};

using ct::convParams;

// LeNet-5's two convolutions (padding 2, then none), small batches.
TEST_F(CudaConvTest, LeNetShapesF32) {
  checkAll(convParams({3, 1, 28, 28}, {6, 1, 5, 5}, {1, 1}, {2, 2, 2, 2}, {1, 1}, 1),
           DType::f32);
  checkAll(convParams({2, 6, 14, 14}, {16, 6, 5, 5}, {1, 1}, {0, 0, 0, 0}, {1, 1}, 1),
           DType::f32);
}

// Strides, asymmetric padding, dilation and groups, and a 1x1 filter.
TEST_F(CudaConvTest, StridedPaddedDilatedGroupedF32) {
  checkAll(convParams({3, 4, 12, 11}, {6, 2, 3, 2}, {2, 1}, {1, 0, 2, 1}, {2, 1}, 2),
           DType::f32);
  checkAll(convParams({2, 3, 9, 7}, {4, 3, 3, 3}, {2, 3}, {1, 1, 0, 2}, {1, 1}, 1),
           DType::f32);
  checkAll(convParams({2, 6, 5, 5}, {6, 2, 1, 1}, {1, 1}, {0, 0, 0, 0}, {1, 1}, 3),
           DType::f32);
}

// Half precision: the column buffer and the GEMM's operands in the input
// type (a copy: exact), products summed in f32 and rounded once.
TEST_F(CudaConvTest, HalfPrecisionAccumulatesInF32) {
  for (DType dtype : {DType::bf16, DType::f16}) {
    checkAll(convParams({2, 1, 28, 28}, {6, 1, 5, 5}, {1, 1}, {2, 2, 2, 2}, {1, 1}, 1),
             dtype);
    checkAll(convParams({3, 4, 12, 11}, {6, 2, 3, 2}, {2, 1}, {1, 0, 2, 1}, {2, 1}, 2),
             dtype);
  }
}

// A column limit of one image's worth: each convolution runs image by
// image (im2col, GEMM, swap per image; the filter gradient accumulating
// over them with beta = 1) and still matches.
TEST_F(CudaConvTest, ChunksOfImagesMatchTheWholeBatch) {
  size_t before = convColumnLimit();
  ConvParams p = convParams({3, 4, 12, 11}, {6, 2, 3, 2}, {2, 1}, {1, 0, 2, 1}, {2, 1}, 2);
  // One image: C x KH x KW x P + O x P f32 elements (P = 5 x 13).
  setConvColumnLimit((4 * 3 * 2 + 6) * 5 * 13 * 4);
  imagesPerChunk = 1;
  checkAll(p, DType::f32);
  checkAll(p, DType::bf16);
  // Two images per chunk: chunks of 2 and 1.
  setConvColumnLimit(2 * (4 * 3 * 2 + 6) * 5 * 13 * 4 + 100);
  imagesPerChunk = 2;
  checkAll(p, DType::f32);
  setConvColumnLimit(before);
}

// The autotuner times the convolutions' GEMMs too (each by running a
// thunk that uses it); the steps run its choice and still match the
// interpreter: every kind, and half precision.
TEST_F(CudaConvTest, ConvolutionGemmsAreTuned) {
  ConvParams lenet =
      convParams({3, 1, 28, 28}, {6, 1, 5, 5}, {1, 1}, {2, 2, 2, 2}, {1, 1}, 1);
  for (LibraryKind kind : {LibraryKind::Conv2D, LibraryKind::Conv2DInputGrad,
                           LibraryKind::Conv2DFilterGrad})
    check(kind, lenet, DType::f32, /*tuned=*/true);
  check(LibraryKind::Conv2D, lenet, DType::bf16, /*tuned=*/true);
}

TEST_F(CudaConvTest, F64StaysF64) {
  checkAll(convParams({2, 3, 9, 7}, {4, 3, 3, 3}, {2, 3}, {1, 1, 0, 2}, {1, 1}, 1),
           DType::f64);
}

// A shape the parameters do not imply, and an integer convolution, are
// refused at load, naming the thunk and what was expected.
TEST_F(CudaConvTest, BadConvolutionsAreRefusedAtLoad) {
  FakeCudaApi api;
  api.hostKernels = *kernels;
  ConvParams p = convParams({2, 3, 9, 7}, {4, 3, 3, 3}, {1, 1}, {0, 0, 0, 0}, {1, 1}, 1);
  ConvParams wrong = p;
  wrong.outputShape[3] += 1;
  StatusOr<std::unique_ptr<CudaExecutable>> e = CudaExecutable::create(
      ct::convPackage(LibraryKind::Conv2DFilterGrad, wrong, PkgDType::F32), api);
  ASSERT_FALSE(e.isOk());
  EXPECT_NE(e.status().message().find("conv2d_filter_grad"), std::string::npos)
      << e.status().message();
  EXPECT_NE(e.status().message().find("output shape must be [2, 4, 7, 5]"),
            std::string::npos)
      << e.status().message();
  e = CudaExecutable::create(
      ct::convPackage(LibraryKind::Conv2D, p, PkgDType::I32), api);
  ASSERT_FALSE(e.isOk());
  EXPECT_NE(e.status().message().find("expected f32, f64, f16 or bf16, found i32"),
            std::string::npos)
      << e.status().message();
}

// The kernels compile through NVRTC and assemble with ptxas for sm_90.
TEST(CudaConvNvrtcTest, KernelsAssembleForSm90WithoutSpills) {
  std::string skip;
  ct::expectSm90WithoutSpills(convKernelSource(), "kiln_conv",
                              convKernelEntryPoints(), skip);
  if (!skip.empty())
    GTEST_SKIP() << skip;
}

// The runtime's own path: the real table's NVRTC (no driver needed)
// compiles the source as CudaConv::create does, to an sm_90 ELF cubin.
TEST(CudaConvNvrtcTest, TheRealTableCompilesTheKernels) {
  std::string skip;
  ct::expectRealTableCompiles(convKernelSource(), "kiln_conv", skip);
  if (!skip.empty())
    GTEST_SKIP() << skip;
}

} // namespace
