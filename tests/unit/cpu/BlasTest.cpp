//===- BlasTest.cpp - OpenBLAS GEMMs and convolutions against the oracle --===//
//
// runtime/cpu/Blas against the reference interpreter's evaluation of the
// same kiln op: random dot_general dimension configurations (in place and
// packed layouts), the MLP's and LeNet's shapes, attention-style batched
// contractions, and convolutions with groups, strides, dilation and
// asymmetric padding, forward and both gradients. The error bound of each
// element is relative to sum |a| |b| over its terms (the interpreter on the
// operands' absolute values), 1e-12 for f64 and 1e-5 for f32; f16 and
// bf16 (computed in f32, rounded once) within one ulp and mostly exact. A
// fresh seed is printed each run; KILN_BLAS_SEED=N reruns one.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Blas.h"
#include "runtime/cpu/DirectConv.h"
#include "tests/unit/TestSeed.h"

#include "runtime/Half.h"

#include "ir/Interpreter.h"
#include "ir/KilnOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>

namespace {

using namespace kiln::runtime;
using namespace kiln::runtime::cpu;
using kiln::DType;
using kiln::HostTensor;
using ::testing::HasSubstr;

uint64_t testSeed() {
  static uint64_t seed = kiln::test::announcedSeed("KILN_BLAS_SEED");
  return seed;
}

std::string typeStr(const std::vector<int64_t> &shape, DType dtype) {
  std::ostringstream os;
  os << "tensor<";
  for (int64_t d : shape)
    os << d << "x";
  os << kiln::dtypeName(dtype) << ">";
  return os.str();
}

std::string listStr(const std::vector<int64_t> &v) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < v.size(); ++i)
    os << (i ? ", " : "") << v[i];
  os << "]";
  return os.str();
}

class BlasTest : public ::testing::Test {
protected:
  BlasTest() : gen(testSeed() + std::hash<std::string>()(currentTestName())) {
    context.loadDialect<kiln::KilnDialect, mlir::func::FuncDialect>();
    handler = std::make_unique<mlir::ScopedDiagnosticHandler>(&context, [this](mlir::Diagnostic &d) {
      std::string text;
      llvm::raw_string_ostream os(text);
      os << d;
      diagnostics += os.str() + "\n";
      return mlir::success();
    });
  }

  static std::string currentTestName() {
    const ::testing::TestInfo *info = ::testing::UnitTest::GetInstance()->current_test_info();
    return info ? info->name() : "";
  }

  HostTensor random(DType dtype, const std::vector<int64_t> &shape) {
    std::uniform_real_distribution<double> dist(-1, 1);
    HostTensor t(dtype, shape);
    for (double &v : t.values())
      v = kiln::roundTo(dtype, dist(gen));
    return t;
  }

  // Runs the one-op function |body| (its result %r of |resultType|) on
  // |args| and on their absolute values; returns both results.
  std::pair<HostTensor, HostTensor> reference(const std::string &signature,
                                              const std::string &body,
                                              const std::string &resultType,
                                              std::vector<HostTensor> args) {
    std::string source = "func.func @f(" + signature + ") -> " + resultType + " {\n  " + body +
                         "\n  return %r : " + resultType + "\n}\n";
    mlir::OwningOpRef<mlir::ModuleOp> module =
        mlir::parseSourceString<mlir::ModuleOp>(source, &context, "blas.mlir");
    EXPECT_TRUE(module) << source << diagnostics;
    if (!module)
      return {};
    auto f = module->lookupSymbol<mlir::func::FuncOp>("f");
    kiln::Interpreter interpreter;
    auto results = interpreter.run(f, args);
    EXPECT_TRUE(mlir::succeeded(results)) << source << diagnostics;
    for (HostTensor &a : args)
      for (double &v : a.values())
        v = std::fabs(v);
    auto absResults = interpreter.run(f, args);
    EXPECT_TRUE(mlir::succeeded(absResults)) << source << diagnostics;
    if (mlir::failed(results) || mlir::failed(absResults))
      return {};
    return {(*results)[0], (*absResults)[0]};
  }

  // Expects |got| (|dtype| elements) to match |ref| within the bound.
  void expectClose(const std::vector<double> &got, const HostTensor &ref,
                   const HostTensor &absRef, const std::string &what) {
    ASSERT_EQ(int64_t(got.size()), ref.size()) << what;
    // f16 and bf16 results are rounded once from an f32 accumulation: one
    // ulp of the format (relative to sum |a| |b|) on top of f32's error.
    double rel = ref.dtype() == DType::f64   ? 1e-12
                 : ref.dtype() == DType::f32 ? 1e-5
                 : ref.dtype() == DType::f16 ? std::ldexp(1.0, -10) + 1e-5
                                             : std::ldexp(1.0, -7) + 1e-5;
    int reported = 0;
    // Rounding once to nearest, as the interpreter does, gives the same
    // value unless the f32 sum lies within its error of a rounding
    // boundary: nearly every element matches exactly (truncating would
    // miss about half).
    int64_t exact = 0;
    for (int64_t i = 0; i < ref.size(); ++i)
      exact += got[i] == ref[i];
    if (ref.dtype() == DType::f16 || ref.dtype() == DType::bf16)
      EXPECT_GE(exact, ref.size() * 0.95) << what << ": only " << exact << " of "
                                          << ref.size() << " elements are exact";
    for (int64_t i = 0; i < ref.size(); ++i) {
      double bound = rel * absRef[i] + 1e-300;
      if (!(std::fabs(got[i] - ref[i]) <= bound)) {
        ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", the interpreter gives "
                      << ref[i] << " (bound " << bound << ")";
        if (++reported == 5)
          return;
      }
    }
  }

  mlir::MLIRContext context;
  std::unique_ptr<mlir::ScopedDiagnosticHandler> handler;
  std::string diagnostics;
  std::mt19937_64 gen;
};

// Packs host tensor values as |dtype| bytes and back.
std::vector<char> toBytes(const HostTensor &t) {
  std::vector<char> bytes;
  if (t.dtype() == DType::f16 || t.dtype() == DType::bf16) {
    std::vector<uint16_t> v;
    for (double x : t.values())
      v.push_back(t.dtype() == DType::f16 ? floatToF16(float(x)) : floatToBf16(float(x)));
    bytes.assign(reinterpret_cast<char *>(v.data()), reinterpret_cast<char *>(v.data() + v.size()));
  } else if (t.dtype() == DType::f32) {
    std::vector<float> v(t.values().begin(), t.values().end());
    bytes.assign(reinterpret_cast<char *>(v.data()), reinterpret_cast<char *>(v.data() + v.size()));
  } else {
    bytes.assign(reinterpret_cast<const char *>(t.values().data()),
                 reinterpret_cast<const char *>(t.values().data() + t.size()));
  }
  return bytes;
}

std::vector<double> fromBytes(const std::vector<char> &bytes, DType dtype) {
  if (dtype == DType::f16 || dtype == DType::bf16) {
    const uint16_t *p = reinterpret_cast<const uint16_t *>(bytes.data());
    std::vector<double> v;
    for (size_t i = 0; i < bytes.size() / 2; ++i)
      v.push_back(dtype == DType::f16 ? f16ToFloat(p[i]) : bf16ToFloat(p[i]));
    return v;
  }
  if (dtype == DType::f32) {
    const float *p = reinterpret_cast<const float *>(bytes.data());
    return std::vector<double>(p, p + bytes.size() / sizeof(float));
  }
  const double *p = reinterpret_cast<const double *>(bytes.data());
  return std::vector<double>(p, p + bytes.size() / sizeof(double));
}

PkgDType pkgDtype(DType dtype) {
  switch (dtype) {
  case DType::f32: return PkgDType::F32;
  case DType::f16: return PkgDType::F16;
  case DType::bf16: return PkgDType::BF16;
  default: return PkgDType::F64;
  }
}
size_t bytesOf(DType dtype) { return kiln::byteWidth(dtype); }
int64_t numel(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

//===----------------------------------------------------------------------===//
// dot_general
//===----------------------------------------------------------------------===//

class GemmTest : public BlasTest {
protected:
  // Checks gemm on |spec| against kiln.dot_general; returns the plan.
  GemmPlan check(GemmSpec spec, DType dtype) {
    spec.dtype = pkgDtype(dtype);
    std::vector<int64_t> resultShape;
    for (int64_t d : spec.lhsBatch)
      resultShape.push_back(spec.lhsShape[d]);
    for (size_t d = 0; d < spec.lhsShape.size(); ++d)
      if (std::count(spec.lhsBatch.begin(), spec.lhsBatch.end(), d) +
              std::count(spec.lhsContract.begin(), spec.lhsContract.end(), d) ==
          0)
        resultShape.push_back(spec.lhsShape[d]);
    for (size_t d = 0; d < spec.rhsShape.size(); ++d)
      if (std::count(spec.rhsBatch.begin(), spec.rhsBatch.end(), d) +
              std::count(spec.rhsContract.begin(), spec.rhsContract.end(), d) ==
          0)
        resultShape.push_back(spec.rhsShape[d]);
    HostTensor lhs = random(dtype, spec.lhsShape), rhs = random(dtype, spec.rhsShape);
    std::string lt = typeStr(spec.lhsShape, dtype), rt = typeStr(spec.rhsShape, dtype),
                ot = typeStr(resultShape, dtype);
    std::string body = "%r = kiln.dot_general %a, %b, batch = " + listStr(spec.lhsBatch) + " x " +
                       listStr(spec.rhsBatch) + ", contract = " + listStr(spec.lhsContract) +
                       " x " + listStr(spec.rhsContract) + " : (" + lt + ", " + rt + ") -> " + ot;
    auto [ref, absRef] = reference("%a: " + lt + ", %b: " + rt, body, ot, {lhs, rhs});
    std::vector<char> a = toBytes(lhs), b = toBytes(rhs);
    std::vector<char> out(numel(resultShape) * bytesOf(dtype), 0);
    Status s = gemm(spec, a.data(), b.data(), out.data());
    EXPECT_TRUE(s.isOk()) << s.message();
    expectClose(fromBytes(out, dtype), ref, absRef, body);
    StatusOr<GemmPlan> plan = planGemm(spec);
    EXPECT_TRUE(plan.isOk());
    return plan.isOk() ? plan.value() : GemmPlan();
  }

  GemmSpec spec(std::vector<int64_t> l, std::vector<int64_t> r, std::vector<int64_t> lb,
                std::vector<int64_t> rb, std::vector<int64_t> lc, std::vector<int64_t> rc) {
    GemmSpec s;
    s.lhsShape = l, s.rhsShape = r, s.lhsBatch = lb, s.rhsBatch = rb;
    s.lhsContract = lc, s.rhsContract = rc;
    return s;
  }
};

bool inPlace(const GemmPlan &p) { return p.lhsPermutation.empty() && p.rhsPermutation.empty(); }

// Random dimension configurations: batch dims 0-2, contracting 1-3, free
// 0-2 per side, dims placed canonically (batch leading, contraction at the
// front or back) half the time and anywhere otherwise.
TEST_F(GemmTest, RandomConfigurationsMatchTheInterpreter) {
  int inPlaceCount = 0, packedCount = 0;
  for (int trial = 0; trial < 60; ++trial) {
    std::uniform_int_distribution<int> nb(0, 2), nc(1, 3), nf(0, 2), size(1, 7), coin(0, 1);
    int batches = nb(gen), contracts = nc(gen), lf = nf(gen), rf = nf(gen);
    std::vector<int64_t> batchSizes, contractSizes;
    for (int i = 0; i < batches; ++i)
      batchSizes.push_back(size(gen));
    for (int i = 0; i < contracts; ++i)
      contractSizes.push_back(size(gen));
    // Roles: 'b' i, 'c' i, 'f' i, placed in an order.
    auto place = [&](int free, bool contractFirst, std::vector<int64_t> &shape,
                     std::vector<int64_t> &bdims, std::vector<int64_t> &cdims) {
      std::vector<std::pair<char, int>> roles;
      for (int i = 0; i < batches; ++i)
        roles.push_back({'b', i});
      std::vector<std::pair<char, int>> rest;
      for (int i = 0; i < free; ++i)
        rest.push_back({'f', i});
      std::vector<std::pair<char, int>> cs;
      for (int i = 0; i < contracts; ++i)
        cs.push_back({'c', i});
      if (contractFirst)
        rest.insert(rest.begin(), cs.begin(), cs.end());
      else
        rest.insert(rest.end(), cs.begin(), cs.end());
      roles.insert(roles.end(), rest.begin(), rest.end());
      if (coin(gen))
        std::shuffle(roles.begin(), roles.end(), gen);
      bdims.assign(batches, 0);
      cdims.assign(contracts, 0);
      for (size_t d = 0; d < roles.size(); ++d) {
        auto [role, i] = roles[d];
        if (role == 'b') {
          bdims[i] = d;
          shape.push_back(batchSizes[i]);
        } else if (role == 'c') {
          cdims[i] = d;
          shape.push_back(contractSizes[i]);
        } else {
          shape.push_back(size(gen));
        }
      }
    };
    GemmSpec s;
    place(lf, coin(gen), s.lhsShape, s.lhsBatch, s.lhsContract);
    place(rf, coin(gen), s.rhsShape, s.rhsBatch, s.rhsContract);
    DType dtype = coin(gen) ? DType::f32 : DType::f64;
    GemmPlan plan = check(s, dtype);
    (inPlace(plan) ? inPlaceCount : packedCount)++;
    if (HasFailure())
      return;
  }
  // Both paths were exercised (each has probability > 1/4 per trial).
  EXPECT_GT(inPlaceCount, 0);
  EXPECT_GT(packedCount, 0);
}

// Mixed precision: f16 and bf16 GEMMs (operands widened to f32, the result
// rounded once) on the MLP's layer, a packed layout and a batched
// contraction, with beta = 1 reading the half-precision output.
TEST_F(GemmTest, HalfPrecisionMatchesTheInterpreter) {
  for (DType dtype : {DType::bf16, DType::f16}) {
    EXPECT_TRUE(inPlace(check(spec({128, 784}, {784, 64}, {}, {}, {1}, {0}), dtype)));
    check(spec({128, 64}, {128, 32}, {}, {}, {0}, {0}), dtype);
    EXPECT_FALSE(inPlace(check(spec({5, 3, 4, 2}, {4, 3, 6}, {1}, {1}, {2}, {0}), dtype)));
    check(spec({4, 8, 16}, {4, 16, 8}, {0}, {0}, {2}, {1}), dtype);
  }
  GemmSpec s = spec({2, 3}, {3, 2}, {}, {}, {1}, {0});
  s.dtype = PkgDType::BF16;
  s.beta = 1.0;
  std::vector<uint16_t> a(6, floatToBf16(1.0f)), b(6, floatToBf16(0.5f)),
      c(4, floatToBf16(2.0f));
  ASSERT_TRUE(gemm(s, a.data(), b.data(), c.data()).isOk());
  for (uint16_t v : c)
    EXPECT_EQ(bf16ToFloat(v), 3.5f); // 2 + 3 * 0.5
}

// The MLP's first layer, forward and both gradients' contractions, f32 and
// f64; all run in place with the right transpose flags.
TEST_F(GemmTest, MlpLayerShapes) {
  for (DType dtype : {DType::f32, DType::f64}) {
    GemmPlan fwd = check(spec({128, 784}, {784, 512}, {}, {}, {1}, {0}), dtype);
    EXPECT_TRUE(inPlace(fwd));
    EXPECT_FALSE(fwd.params.transposeLhs);
    EXPECT_FALSE(fwd.params.transposeRhs);
    EXPECT_EQ(fwd.params.m, 128);
    EXPECT_EQ(fwd.params.n, 512);
    EXPECT_EQ(fwd.params.k, 784);
    // dW = x^T dy: contract the batch rows.
    GemmPlan dw = check(spec({128, 784}, {128, 512}, {}, {}, {0}, {0}), dtype);
    EXPECT_TRUE(inPlace(dw));
    EXPECT_TRUE(dw.params.transposeLhs);
    // dx = dy W^T.
    GemmPlan dx = check(spec({128, 512}, {784, 512}, {}, {}, {1}, {1}), dtype);
    EXPECT_TRUE(inPlace(dx));
    EXPECT_TRUE(dx.params.transposeRhs);
  }
}

// Attention: Q K^T (contract D), the S-contraction, P V; batch [B, H].
TEST_F(GemmTest, AttentionStyleBatches) {
  for (DType dtype : {DType::f32, DType::f64}) {
    std::vector<int64_t> qkv = {2, 3, 10, 8};
    GemmPlan qk = check(spec(qkv, qkv, {0, 1}, {0, 1}, {3}, {3}), dtype);
    EXPECT_TRUE(inPlace(qk));
    EXPECT_EQ(qk.params.batch, 6);
    GemmPlan ss = check(spec(qkv, qkv, {0, 1}, {0, 1}, {2}, {2}), dtype);
    EXPECT_TRUE(inPlace(ss));
    EXPECT_TRUE(ss.params.transposeLhs);
    GemmPlan pv = check(spec({2, 3, 10, 10}, qkv, {0, 1}, {0, 1}, {3}, {2}), dtype);
    EXPECT_TRUE(inPlace(pv));
    // Heads not leading ([B, S, H, D]) needs packing.
    GemmPlan bshd = check(spec({2, 10, 3, 8}, {2, 10, 3, 8}, {0, 2}, {0, 2}, {3}, {3}), dtype);
    EXPECT_FALSE(inPlace(bshd));
  }
}

// Contracting pairs listed out of memory order still run in place.
TEST_F(GemmTest, ContractingPairsInAnyOrder) {
  GemmPlan p = check(spec({4, 3, 5}, {3, 5, 6}, {}, {}, {2, 1}, {1, 0}), DType::f64);
  EXPECT_TRUE(inPlace(p));
  EXPECT_EQ(p.params.k, 15);
}

TEST_F(GemmTest, ErrorsNameTheProblem) {
  GemmSpec s = spec({2, 3}, {3, 4}, {}, {}, {1}, {0});
  s.dtype = PkgDType::I32;
  char buf[64] = {};
  Status st = gemm(s, buf, buf, buf);
  EXPECT_FALSE(st.isOk());
  EXPECT_THAT(st.message(),
              HasSubstr("element type must be f32, f64, f16 or bf16, but it is i32"));
  s.dtype = PkgDType::F32;
  s.rhsShape = {4, 4};
  st = gemm(s, buf, buf, buf);
  EXPECT_THAT(st.message(), HasSubstr("contracting dimension pair 0 has sizes 3 (lhs) and 4"));
  s = spec({2, 3}, {3, 4}, {}, {}, {1}, {1, 0});
  EXPECT_THAT(gemm(s, buf, buf, buf).message(), HasSubstr("lhs has 1 contracting dimensions but rhs has 2"));
  s = spec({2, 3}, {3, 4}, {}, {}, {2}, {0});
  EXPECT_THAT(gemm(s, buf, buf, buf).message(), HasSubstr("must lie in [0, 2), but has 2"));
  EXPECT_THAT(gemm(PkgDType::I32, GemmParams(), buf, buf, buf).message(),
              HasSubstr("but it is i32"));
}

// Times the MLP's [128, 784] x [784, 512] f32 GEMM (printed, not asserted:
// the machine is shared).
TEST_F(GemmTest, MlpGemmTiming) {
  GemmSpec s = spec({128, 784}, {784, 512}, {}, {}, {1}, {0});
  HostTensor a = random(DType::f32, s.lhsShape), b = random(DType::f32, s.rhsShape);
  std::vector<char> ab = toBytes(a), bb = toBytes(b), out(128 * 512 * 4);
  int before = blasThreads();
  for (int threads : {1, 2}) {
    setBlasThreads(threads);
    EXPECT_EQ(blasThreads(), threads);
    std::vector<double> ms;
    for (int i = 0; i < 30; ++i) {
      auto start = std::chrono::steady_clock::now();
      ASSERT_TRUE(gemm(s, ab.data(), bb.data(), out.data()).isOk());
      ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count());
    }
    std::sort(ms.begin(), ms.end());
    std::printf("[128,784]x[784,512] f32 gemm, %d thread(s): min %.3f ms, median %.3f ms "
                "(%.1f GFLOP/s at the median)\n",
                threads, ms[0], ms[ms.size() / 2], 2.0 * 128 * 784 * 512 / ms[ms.size() / 2] / 1e6);
  }
  setBlasThreads(before);
}

//===----------------------------------------------------------------------===//
// Convolutions
//===----------------------------------------------------------------------===//

class ConvTest : public BlasTest {
protected:
  // Checks conv2d and both gradients for |p| (outputShape is filled in);
  // |direct|: runtime/cpu/DirectConv's kernels (f32) whatever
  // directConvPreferred says, instead of Blas.h's choice.
  void check(ConvParams p, DType dtype, bool direct = false) {
    std::vector<int64_t> out = {p.inputShape[0], p.filterShape[0], 0, 0};
    for (int i = 0; i < 2; ++i)
      out[2 + i] = (p.inputShape[2 + i] + p.padding[2 * i] + p.padding[2 * i + 1] -
                    p.dilation[i] * (p.filterShape[2 + i] - 1) - 1) /
                       p.strides[i] +
                   1;
    p.outputShape = out;
    ASSERT_TRUE(pkgCheckConvParams(p).isOk()) << pkgCheckConvParams(p).message();
    std::string attrs = "strides = " + listStr(p.strides) + ", padding = " + listStr(p.padding) +
                        ", dilation = " + listStr(p.dilation) +
                        ", groups = " + std::to_string(p.groups);
    std::string it = typeStr(p.inputShape, dtype), ft = typeStr(p.filterShape, dtype),
                ot = typeStr(p.outputShape, dtype);
    PkgDType pd = pkgDtype(dtype);
    HostTensor x = random(dtype, p.inputShape), w = random(dtype, p.filterShape),
               dy = random(dtype, p.outputShape);
    std::vector<char> xb = toBytes(x), wb = toBytes(w), dyb = toBytes(dy);

    {
      std::string body = "%r = kiln.conv2d %x, %w, " + attrs + " : (" + it + ", " + ft +
                         ") -> " + ot;
      auto [ref, absRef] = reference("%x: " + it + ", %w: " + ft, body, ot, {x, w});
      std::vector<char> y(numel(p.outputShape) * bytesOf(dtype));
      if (direct) {
        ASSERT_TRUE(directConv2d(p, f32(xb), f32(wb), f32(y)));
      } else {
        Status s = conv2d(pd, p, xb.data(), wb.data(), y.data());
        ASSERT_TRUE(s.isOk()) << s.message();
      }
      expectClose(fromBytes(y, dtype), ref, absRef, body);
    }
    {
      std::string body = "%r = kiln.conv2d_input_grad %dy, %w, " + attrs + " : (" + ot + ", " +
                         ft + ") -> " + it;
      auto [ref, absRef] = reference("%dy: " + ot + ", %w: " + ft, body, it, {dy, w});
      std::vector<char> dx(numel(p.inputShape) * bytesOf(dtype));
      if (direct) {
        ASSERT_TRUE(directConv2dInputGrad(p, f32(dyb), f32(wb), f32(dx)));
      } else {
        Status s = conv2dInputGrad(pd, p, dyb.data(), wb.data(), dx.data());
        ASSERT_TRUE(s.isOk()) << s.message();
      }
      expectClose(fromBytes(dx, dtype), ref, absRef, body);
    }
    {
      std::string body = "%r = kiln.conv2d_filter_grad %x, %dy, " + attrs + " : (" + it + ", " +
                         ot + ") -> " + ft;
      auto [ref, absRef] = reference("%x: " + it + ", %dy: " + ot, body, ft, {x, dy});
      std::vector<char> dw(numel(p.filterShape) * bytesOf(dtype));
      if (direct) {
        ASSERT_TRUE(directConv2dFilterGrad(p, f32(xb), f32(dyb), f32(dw)));
      } else {
        Status s = conv2dFilterGrad(pd, p, xb.data(), dyb.data(), dw.data());
        ASSERT_TRUE(s.isOk()) << s.message();
      }
      expectClose(fromBytes(dw, dtype), ref, absRef, body);
    }
  }

  static float *f32(std::vector<char> &bytes) {
    return reinterpret_cast<float *>(bytes.data());
  }

  ConvParams params(std::vector<int64_t> in, std::vector<int64_t> filter,
                    std::vector<int64_t> strides, std::vector<int64_t> padding,
                    std::vector<int64_t> dilation, int64_t groups) {
    ConvParams p;
    p.inputShape = in, p.filterShape = filter, p.strides = strides;
    p.padding = padding, p.dilation = dilation, p.groups = groups;
    return p;
  }
};

// Mixed precision: f16 and bf16 convolutions (computed in f32, rounded once)
// on LeNet-5's shapes and a grouped, strided, dilated one.
TEST_F(ConvTest, HalfPrecisionMatchesTheInterpreter) {
  for (DType dtype : {DType::bf16, DType::f16}) {
    check(params({4, 1, 28, 28}, {6, 1, 5, 5}, {1, 1}, {2, 2, 2, 2}, {1, 1}, 1), dtype);
    check(params({4, 6, 14, 14}, {16, 6, 5, 5}, {1, 1}, {0, 0, 0, 0}, {1, 1}, 1), dtype);
    check(params({3, 4, 12, 11}, {6, 2, 3, 2}, {2, 1}, {1, 0, 2, 1}, {2, 1}, 2), dtype);
  }
}

// LeNet-5's two convolutions at batch 4.
TEST_F(ConvTest, LeNetShapes) {
  for (DType dtype : {DType::f32, DType::f64}) {
    check(params({4, 1, 28, 28}, {6, 1, 5, 5}, {1, 1}, {2, 2, 2, 2}, {1, 1}, 1), dtype);
    check(params({4, 6, 14, 14}, {16, 6, 5, 5}, {1, 1}, {0, 0, 0, 0}, {1, 1}, 1), dtype);
  }
}

// Groups, stride 2, dilation 2 and asymmetric padding, alone and together.
TEST_F(ConvTest, GroupsStridesDilationPadding) {
  for (DType dtype : {DType::f32, DType::f64}) {
    check(params({2, 6, 9, 8}, {9, 2, 3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 3), dtype);
    check(params({2, 3, 11, 10}, {4, 3, 3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, 1), dtype);
    check(params({2, 3, 11, 10}, {4, 3, 3, 2}, {1, 1}, {2, 2, 1, 1}, {2, 2}, 1), dtype);
    check(params({2, 4, 9, 9}, {4, 2, 3, 3}, {1, 1}, {0, 2, 1, 0}, {1, 1}, 2), dtype);
    check(params({3, 4, 12, 11}, {6, 2, 3, 2}, {2, 1}, {1, 0, 2, 1}, {2, 1}, 2), dtype);
    // Depthwise.
    check(params({2, 5, 7, 7}, {5, 1, 3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, 5), dtype);
  }
}

// Strides up to 3 and padding up to 4 (wider than some kernels: columns
// and rows that read padding only), which im2col's and col2im's column
// ranges (runtime/cpu/Blas.cpp insideColumns) must get right.
TEST_F(ConvTest, RandomConfigurationsMatchTheInterpreter) {
  std::uniform_int_distribution<int64_t> small(1, 3), few(1, 3), pad(0, 4), image(1, 9),
      coin(0, 1);
  for (int trial = 0; trial < 100; ++trial) {
    ConvParams p;
    int64_t groups = small(gen), cg = small(gen), og = small(gen);
    p.groups = groups;
    p.inputShape = {small(gen), groups * cg, image(gen), image(gen)};
    p.filterShape = {groups * og, cg, small(gen), small(gen)};
    p.strides = {few(gen), few(gen)};
    p.dilation = {few(gen), few(gen)};
    p.padding = {pad(gen), pad(gen), pad(gen), pad(gen)};
    bool fits = true;
    for (int i = 0; i < 2; ++i)
      fits &= p.inputShape[2 + i] + p.padding[2 * i] + p.padding[2 * i + 1] >=
              p.dilation[i] * (p.filterShape[2 + i] - 1) + 1;
    if (!fits) {
      --trial;
      continue;
    }
    check(p, coin(gen) ? DType::f32 : DType::f64);
    if (HasFailure())
      return;
  }
}

// f32 convolutions on an AVX-512 CPU take runtime/cpu/DirectConv (the f64
// ones above check the im2col path they fall back to). Its tails: output
// channels past a multiple of 8 (the kernel's rows) and of 16 and 48 (the
// filter gradient's vectors), GEMM columns past a multiple of 16 and 48,
// image rows wider than 16 (the transposed blocks of dy), strides 2 and 3
// (two and three phases, a 1x1 stride-2 convolution reading one), dilation,
// groups, and padding wider than the kernel (the input gradient's stride-1
// convolution then crops; a strided one has phases no tap reaches).
TEST_F(ConvTest, DirectConvolutionsMatchTheInterpreter) {
  if (!directConvEnabled())
    GTEST_SKIP() << "no AVX-512F on this CPU: f32 convolutions take the im2col "
                    "path, which the other tests check";
  struct Case {
    std::vector<int64_t> in, filter, strides, padding, dilation;
    int64_t groups;
  };
  std::vector<Case> cases = {
      {{2, 16, 28, 28}, {16, 16, 3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 1},
      {{2, 3, 17, 33}, {9, 3, 3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 1},
      {{1, 5, 7, 7}, {17, 5, 3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 1},
      {{1, 4, 7, 7}, {49, 4, 3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 1},
      {{2, 32, 14, 14}, {64, 32, 3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, 1},
      {{2, 16, 28, 28}, {32, 16, 1, 1}, {2, 2}, {0, 0, 0, 0}, {1, 1}, 1},
      {{2, 4, 16, 15}, {7, 4, 3, 3}, {3, 3}, {1, 0, 2, 1}, {1, 1}, 1},
      {{1, 6, 19, 18}, {12, 2, 3, 3}, {1, 1}, {2, 2, 2, 2}, {2, 2}, 3},
      {{2, 3, 9, 9}, {8, 3, 1, 1}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 1},
      {{2, 1, 28, 28}, {6, 1, 5, 5}, {1, 1}, {2, 2, 2, 2}, {1, 1}, 1},
      {{1, 2, 1, 1}, {33, 2, 1, 1}, {1, 1}, {0, 0, 0, 0}, {1, 1}, 1},
  };
  for (const Case &c : cases) {
    check(params(c.in, c.filter, c.strides, c.padding, c.dilation, c.groups),
          DType::f32, /*direct=*/true);
    if (HasFailure())
      return;
  }
  // Strided input gradients (a GEMM per stride phase of dx): phases that
  // no tap reaches (stride 3 with a 2-wide kernel), dilation past the
  // stride, and more padding than the kernel.
  std::vector<Case> strided = {
      {{2, 3, 11, 10}, {20, 3, 2, 2}, {3, 3}, {0, 1, 1, 0}, {1, 1}, 1},
      {{1, 4, 13, 12}, {10, 2, 3, 3}, {2, 3}, {2, 1, 0, 2}, {3, 2}, 2},
      {{2, 8, 6, 7}, {17, 8, 1, 1}, {2, 2}, {1, 1, 1, 1}, {1, 1}, 1},
  };
  for (const Case &c : strided) {
    check(params(c.in, c.filter, c.strides, c.padding, c.dilation, c.groups),
          DType::f32, /*direct=*/true);
    if (HasFailure())
      return;
  }
  ConvParams p = params({1, 2, 5, 5}, {2, 2, 3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, 1);
  p.outputShape = {1, 2, 3, 3};
  std::vector<float> buf(64);
  EXPECT_TRUE(directConv2dInputGrad(p, buf.data(), buf.data(), buf.data()));
}

// KILN_CPU_CONV=im2col: f32 takes the im2col path on any CPU (and is
// still right); unset, the direct path is back where the CPU has it.
// Which kernels a convolution takes (directConvPreferred): im2col for the
// input gradient of one with fewer than 8 input channels per group, the
// direct kernels otherwise.
TEST_F(ConvTest, DirectKernelsWhereTheyAreFaster) {
  ConvParams stem = params({2, 1, 28, 28}, {16, 1, 3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 1);
  ConvParams lenet = params({2, 6, 14, 14}, {16, 6, 5, 5}, {1, 1}, {0, 0, 0, 0}, {1, 1}, 1);
  ConvParams wide = params({2, 8, 28, 28}, {16, 8, 3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 1);
  ConvParams depthwise = params({2, 16, 28, 28}, {16, 1, 3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 16);
  stem.outputShape = {2, 16, 28, 28};
  lenet.outputShape = {2, 16, 10, 10};
  wide.outputShape = {2, 16, 28, 28};
  depthwise.outputShape = {2, 16, 28, 28};
  for (const ConvParams &p : {stem, lenet, wide, depthwise}) {
    ASSERT_TRUE(pkgCheckConvParams(p).isOk()) << pkgCheckConvParams(p).message();
    EXPECT_TRUE(directConvPreferred(ConvKind::Forward, p));
    EXPECT_TRUE(directConvPreferred(ConvKind::FilterGrad, p));
  }
  EXPECT_FALSE(directConvPreferred(ConvKind::InputGrad, stem));  // 1 channel
  EXPECT_FALSE(directConvPreferred(ConvKind::InputGrad, lenet)); // 6
  EXPECT_TRUE(directConvPreferred(ConvKind::InputGrad, wide));   // 8
  EXPECT_FALSE(directConvPreferred(ConvKind::InputGrad, depthwise)); // 1 a group
}

TEST_F(ConvTest, Im2colOnRequest) {
  ASSERT_EQ(setenv("KILN_CPU_CONV", "im2col", 1), 0);
  EXPECT_FALSE(directConvEnabled());
  ConvParams p = params({2, 3, 17, 33}, {9, 3, 3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 1);
  p.outputShape = {2, 9, 17, 33};
  std::vector<float> buf(2 * 9 * 17 * 33);
  EXPECT_FALSE(directConv2d(p, buf.data(), buf.data(), buf.data()));
  check(p, DType::f32);
  ASSERT_EQ(unsetenv("KILN_CPU_CONV"), 0);
  EXPECT_EQ(directConvEnabled(), directConvAvailable());
}

TEST_F(ConvTest, ErrorsNameTheProblem) {
  ConvParams p = params({1, 4, 5, 5}, {2, 2, 3, 3}, {1, 1}, {0, 0, 0, 0}, {1, 1}, 2);
  p.outputShape = {1, 2, 3, 3};
  EXPECT_TRUE(pkgCheckConvParams(p).isOk());
  char buf[1024] = {};
  EXPECT_THAT(conv2d(PkgDType::I8, p, buf, buf, buf).message(),
              HasSubstr("conv2d: element type must be f32, f64, f16 or bf16, but "
                        "it is i8"));
  ConvParams bad = p;
  bad.outputShape = {1, 2, 4, 4};
  EXPECT_THAT(conv2dInputGrad(PkgDType::F32, bad, buf, buf, buf).message(),
              HasSubstr("output shape must be [1, 2, 3, 3], but is [1, 2, 4, 4]"));
  bad = p;
  bad.groups = 3;
  EXPECT_THAT(conv2dFilterGrad(PkgDType::F32, bad, buf, buf, buf).message(),
              HasSubstr("groups 3 must be positive and divide"));
  bad = p;
  bad.padding = {0, 0};
  EXPECT_THAT(pkgCheckConvParams(bad).message(), HasSubstr("padding must have 4 entries"));
  bad = p;
  bad.filterShape = {2, 4, 3, 3};
  EXPECT_THAT(pkgCheckConvParams(bad).message(), HasSubstr("must have 2 input channels"));
}

// OpenBLAS's kernels for a CPU's features: AVX-512's only with the four
// extensions SkylakeX's kernels use and the OS saving the ZMM state;
// Haswell's with AVX2, FMA and the YMM state; nothing without them.
TEST(OpenBlasCore, ChosenFromTheCpusFeatures) {
  X86Features none;
  EXPECT_EQ(openBlasCoreFor(none), nullptr);
  X86Features avx2;
  avx2.avx2 = avx2.fma = avx2.ymmState = true;
  EXPECT_STREQ(openBlasCoreFor(avx2), "Haswell");
  X86Features noFma = avx2;
  noFma.fma = false;
  EXPECT_EQ(openBlasCoreFor(noFma), nullptr);
  X86Features noYmm = avx2;
  noYmm.ymmState = false;
  EXPECT_EQ(openBlasCoreFor(noYmm), nullptr);
  X86Features avx512 = avx2;
  avx512.avx512f = avx512.avx512dq = avx512.avx512bw = avx512.avx512vl = true;
  avx512.zmmState = true;
  EXPECT_STREQ(openBlasCoreFor(avx512), "SkylakeX");
  for (bool X86Features::*missing :
       {&X86Features::avx512f, &X86Features::avx512dq, &X86Features::avx512bw,
        &X86Features::avx512vl, &X86Features::zmmState}) {
    X86Features partial = avx512;
    partial.*missing = false;
    EXPECT_STREQ(openBlasCoreFor(partial), "Haswell");
  }
}

// The x86-64 levels a packed trainer's kernels are compiled for (kiln pack
// --cpu): each needs every feature of its level and the ones below, and
// the OS saving the vector state its instructions use.
TEST(X86Level, NeedsEveryFeatureOfTheLevel) {
  X86Features v4;
  for (bool X86Features::*f :
       {&X86Features::ssse3, &X86Features::sse42, &X86Features::popcnt,
        &X86Features::cx16, &X86Features::avx, &X86Features::avx2,
        &X86Features::fma, &X86Features::bmi1, &X86Features::bmi2,
        &X86Features::f16c, &X86Features::movbe, &X86Features::lzcnt,
        &X86Features::ymmState, &X86Features::avx512f, &X86Features::avx512bw,
        &X86Features::avx512cd, &X86Features::avx512dq, &X86Features::avx512vl,
        &X86Features::zmmState})
    v4.*f = true;
  for (const char *level : {"x86-64", "x86-64-v2", "x86-64-v3", "x86-64-v4"})
    EXPECT_TRUE(x86LevelSupported(v4, level)) << level;
  EXPECT_FALSE(x86LevelSupported(v4, "x86-64-v5"));
  EXPECT_FALSE(x86LevelSupported(v4, "haswell"));
  // One feature missing takes its level and those above away.
  struct Case {
    bool X86Features::*missing;
    const char *highest;
  };
  for (Case c : {Case{&X86Features::popcnt, "x86-64"},
                 Case{&X86Features::cx16, "x86-64"},
                 Case{&X86Features::movbe, "x86-64-v2"},
                 Case{&X86Features::lzcnt, "x86-64-v2"},
                 Case{&X86Features::ymmState, "x86-64-v2"},
                 Case{&X86Features::avx512cd, "x86-64-v3"},
                 Case{&X86Features::zmmState, "x86-64-v3"}}) {
    X86Features f = v4;
    f.*c.missing = false;
    bool supported = true;
    for (const char *level : {"x86-64", "x86-64-v2", "x86-64-v3", "x86-64-v4"}) {
      EXPECT_EQ(x86LevelSupported(f, level), supported) << level << " " << c.highest;
      if (std::string(level) == c.highest)
        supported = false;
    }
  }
  // This CPU, with AVX2 (as every machine Kiln is tested on), runs the
  // level kiln pack compiles for by default.
  X86Features here = x86Features();
  EXPECT_EQ(x86LevelSupported(here, "x86-64-v3"), here.avx2 && here.bmi2 && here.movbe);
}

// This process's OpenBLAS runs kernels that use this CPU's vectors: its
// own choice, or the one Kiln made it take before main (OpenBLAS 0.3.21
// takes Prescott's SSE3 kernels on a CPU model it does not know, as this
// development VM's Sapphire Rapids). A core forced by the environment
// stands.
TEST(OpenBlasCore, KernelsUseTheCpusVectors) {
  const char *wanted = openBlasCoreFor(x86Features());
  std::string core = openBlasCoreName();
  std::printf("OpenBLAS core %s; this CPU's: %s; switched at start: %s\n",
              core.c_str(), wanted ? wanted : "(OpenBLAS's choice)",
              openBlasCoreChosen() ? "yes" : "no");
  if (const char *chosen = openBlasCoreChosen()) {
    EXPECT_STREQ(chosen, wanted);
    EXPECT_EQ(core, chosen);
    EXPECT_STREQ(std::getenv("OPENBLAS_CORETYPE"), chosen);
    return;
  }
  if (!wanted)
    GTEST_SKIP() << "no AVX2 on this CPU: OpenBLAS's choice stands (" << core << ")";
  if (const char *forced = std::getenv("OPENBLAS_CORETYPE"))
    GTEST_SKIP() << "OPENBLAS_CORETYPE=" << forced << " set by the environment";
  // Kept: OpenBLAS's own choice already uses the vectors.
  if (std::string(wanted) == "SkylakeX")
    EXPECT_THAT(core, ::testing::AnyOf("SkylakeX", "Cooperlake", "SapphireRapids"));
  else
    EXPECT_THAT(core, ::testing::AnyOf("Haswell", "Zen", "SkylakeX", "Cooperlake",
                                       "SapphireRapids"));
}

} // namespace
