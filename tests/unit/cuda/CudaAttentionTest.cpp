//===- CudaAttentionTest.cpp - the fused attention kernels without a GPU --===//
//
// runtime/cuda/CudaAttention.h through CudaExecutable on FakeCudaApi.h: the
// kernels' CUDA C++ (attentionKernelSource(90)) is compiled for the host
// under codegen/cuda/CudaEmulation.h (nvcuda::wmma, ldmatrix and mma.sync
// included) and runs on the host (a block's threads as fibers) with the
// runtime's launch shapes. A package with an Attention thunk then an
// AttentionGrad thunk (AttentionPackage.h) runs two steps (plain launches,
// then the captured graph's replay; both give the same bits) on B=2, H=2
// and sequence lengths that are not multiples of the tiles (5, 33, 70;
// Tq != Tk), causal and not, head dims 16 and 64 on the tensor-core path
// (f16, bf16: the mma.sync kernels, head dim 128 with the wmma backward;
// sm_75's wmma kernels for f16 too) and 12 and 24 on the CUDA-core path
// (f32, f64, f16, bf16), against the definition in double precision
// (the backward from the step's own out and lse). Errors are normwise:
// max |got - want| / max |want| per tensor, within the dtype's bound.
// The packed layout (qkv [B,T,3,H,D], out and dout [B,T,H,D], dqkv) runs
// the same way, f32, bf16 and f16, head dims 20 (CUDA cores) and 64
// (tensor cores for the 16-bit types), causal and not; its results,
// rearranged to [B,H,T,D] here, are checked against the definition on the
// rearranged inputs and bit for bit against the BHTD package's run on them.
// With the CUDA toolkit, every kernel compiles through NVRTC and assembles
// with ptxas for sm_90; registers and spills are printed and recorded.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudaAttention.h"
#include "runtime/cuda/CudaExecutable.h"
#include "tests/unit/cuda/AddressSanitizer.h"
#include "tests/unit/cuda/AttentionPackage.h"
#include "tests/unit/cuda/FakeCudaApi.h"
#include "tests/unit/cuda/RuntimeHostKernels.h"
#include "tests/unit/cuda/ScopedEnv.h"
#include "tests/unit/cuda/Sm90Kernels.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <array>
#include <functional>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <cctype>

namespace {

using namespace kiln::runtime;

using namespace kiln::runtime::cuda;
namespace ct = kiln::runtime::cuda::testing;
using ct::FakeCudaApi;
using ct::HostKernel;
using ct::ScopedEnv;

// Whether the entry point |entry| ends with |suffix| (a variant's mark:
// "s2", "q128", "q128b2", ...).
bool endsWith(const std::string &entry, const std::string &suffix) {
  return entry.size() >= suffix.size() &&
         entry.compare(entry.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Normwise bounds: f32 and f64 compute in their own precision; f16 and
// bf16 round P and dS to the dtype before the tensor-core products and
// round every result once.
double bound(PkgDType dtype) {
  switch (dtype) {
  case PkgDType::F64: return 1e-12;
  case PkgDType::F32: return 2e-6;
  case PkgDType::F16: return 2e-3;
  default: return 1.6e-2; // bf16
  }
}

// The kernels' path.
const char *pathOf(const AttentionConfig &c) {
  return c.dqPairs        ? "mma, dK/dV and dQ on warp pairs"
         : c.dkdvPairs    ? "mma, dK/dV on warp pairs"
         : c.storedScores ? "mma, dQ from stored dS"
         : c.backwardMma ? "mma"
         : c.tensorCores ? "wmma"
                         : "simt";
}

class CudaAttentionTest : public ::testing::Test {
protected:
  void SetUp() override {
    std::string error;
    kernels = &ct::hostAttentionKernels(error);
    ASSERT_TRUE(error.empty()) << error;
  }

  // Runs |pkg| (CudaExecutable on |api|) for two steps on |in|, its
  // inputs' bytes: plain launches, then the captured graph's replay, which
  // gives the same bits; the outputs start poisoned each step. Returns the
  // first step's outputs, in the package's output order.
  std::vector<std::vector<uint8_t>> run(const LoadedPackage &package,
                                        FakeCudaApi &api,
                                        const std::vector<std::vector<uint8_t>> &in) {
    CudaOptions options;
    options.log = [](const std::string &) {};
    // The autotuner runs only where the fake is given times (prefer):
    // once per variant after the warm-up, nothing cached.
    options.autotuneCache = "off";
    options.autotuneRuns = options.autotuneTrials = 1;
    // The attention kernels run on copies of the buffers they point into
    // (FakeCudaApi::kernelArgs).
    api.learnPackage(package);
    StatusOr<std::unique_ptr<CudaExecutable>> made =
        CudaExecutable::create(package, api, options);
    EXPECT_TRUE(made.isOk()) << made.status().message();
    if (!made.isOk())
      return {};
    CudaExecutable &exec = *made.value();
    const LoadedPackage &pkg = exec.package();
    for (size_t i = 0; i < in.size(); ++i)
      EXPECT_TRUE(exec.writeInput(i, in[i].data()).isOk());
    std::vector<std::vector<uint8_t>> first;
    for (int step = 0; step < 2; ++step) {
      for (const SignatureEntry &o : pkg.outputs) {
        std::vector<uint8_t> poison(pkg.buffers[o.buffer].size, 0xcd);
        EXPECT_TRUE(exec.writeBuffer(o.buffer, poison.data()).isOk());
      }
      Status s = exec.run();
      EXPECT_TRUE(s.isOk()) << s.message();
      std::vector<std::vector<uint8_t>> got(pkg.outputs.size());
      for (size_t o = 0; o < got.size(); ++o) {
        got[o].resize(pkg.buffers[pkg.outputs[o].buffer].size);
        EXPECT_TRUE(exec.readOutput(o, got[o].data()).isOk());
      }
      if (step == 0) {
        first = got;
        continue;
      }
      for (size_t o = 0; o < got.size(); ++o)
        EXPECT_EQ(got[o], first[o]) << "output " << pkg.outputs[o].name;
    }
    EXPECT_TRUE(exec.usingGraph()) << exec.graphFallbackReason();
    return first;
  }

  // The step's errors against the definition, printed and checked against
  // the dtype's bounds: |got| holds out, lse, dq, dk, dv as [B,H,T,D] (lse
  // [B,H,T]), |in| q, k, v, dout likewise.
  void expectDefinition(PkgDType dtype, const AttentionParams &a,
                        const std::string &what, const char *path,
                        const std::vector<std::vector<uint8_t>> &in,
                        const std::vector<std::vector<uint8_t>> &got) {
    std::vector<double> q = ct::typedValues(dtype, in[0]), k = ct::typedValues(dtype, in[1]),
                        v = ct::typedValues(dtype, in[2]), dout = ct::typedValues(dtype, in[3]);
    PkgDType lseType = dtype == PkgDType::F64 ? PkgDType::F64 : PkgDType::F32;
    std::vector<double> out = ct::typedValues(dtype, got[0]),
                        lse = ct::typedValues(lseType, got[1]);
    ct::AttentionReference want =
        ct::attentionReference(a, q, k, v, dout, &out, &lse);
    double errOut = ct::relativeError(out, want.out);
    double errLse = 0;
    for (size_t i = 0; i < want.lse.size(); ++i)
      errLse = std::max(errLse, std::fabs(lse[i] - want.lse[i]) / (1 + std::fabs(want.lse[i])));
    double errDq = ct::relativeError(ct::typedValues(dtype, got[2]), want.dq);
    double errDk = ct::relativeError(ct::typedValues(dtype, got[3]), want.dk);
    double errDv = ct::relativeError(ct::typedValues(dtype, got[4]), want.dv);
    std::printf("%-40s %s: out %.2e lse %.2e dq %.2e dk %.2e dv %.2e\n",
                what.c_str(), path, errOut, errLse, errDq, errDk, errDv);
    double b = bound(dtype);
    double lseBound = dtype == PkgDType::F64 ? 1e-12 : 1e-5;
    EXPECT_LE(errOut, b);
    EXPECT_LE(errLse, lseBound);
    EXPECT_LE(errDq, b);
    EXPECT_LE(errDk, b);
    EXPECT_LE(errDv, b);
  }

  void check(PkgDType dtype, const AttentionParams &a, bool expectWmma) {
    std::string what = std::string(pkgDTypeName(dtype)) + " Tq=" +
                       std::to_string(a.qLen) + " Tk=" + std::to_string(a.kvLen) +
                       " D=" + std::to_string(a.headDim) + " Dv=" +
                       std::to_string(a.valueDim) +
                       (a.causal ? " causal" : "");
    SCOPED_TRACE(what);
    StatusOr<AttentionConfig> config =
        attentionConfig(dtype, a.headDim, a.valueDim, arch, mma);
    ASSERT_TRUE(config.isOk()) << config.status().message();
    EXPECT_EQ(config.value().tensorCores, expectWmma);
    EXPECT_EQ(config.value().forwardMma, expectWmma && arch >= 80 && mma);
    EXPECT_EQ(config.value().backwardMma, expectWmma && arch >= 80 && mma);
    EXPECT_EQ(config.value().dkdvPairs, config.value().backwardMma && config.value().dmax > 64);
    EXPECT_EQ(config.value().dqPairs, config.value().backwardMma && config.value().dmax > 128);

    FakeCudaApi api;
    api.device.multiprocessors = 2;
    api.device.major = int(arch / 10), api.device.minor = int(arch % 10);
    api.hostKernels = *kernels;
    // The variants (attentionConfigVariants): with |prefer| set, the
    // fake's launch times make the kernels it names faster (1 ms against
    // 2), so the autotuner picks, per thunk, the variant whose kernels it
    // prefers most: the forward's own, the backward's dK/dV and dQ.
    StatusOr<std::vector<AttentionConfig>> variants = attentionConfigVariants(
        dtype, a.headDim, a.valueDim, arch, mma,
        api.device.maxSharedMemoryPerBlockOptin);
    ASSERT_TRUE(variants.isOk());
    auto ms = [&](const std::string &entry) {
      return prefer && prefer(entry) ? 1.0 : 2.0;
    };
    if (prefer)
      api.launchMs = ms;
    // The forward variants and the backward ones, each distinct.
    // KILN_CUDA_ATTENTION=pairs, =stages or =q128 keeps only the variants
    // it names, where there are such.
    const std::vector<AttentionConfig> &vs = variants.value();
    const AttentionRequest request = attentionRequestFromEnv().value();
    auto forcedForward = [&](const AttentionConfig &v) {
      return attentionVariantRequested(request, v, false);
    };
    auto forcedBackward = [&](const AttentionConfig &v) {
      return attentionVariantRequested(request, v, true);
    };
    bool anyForward = std::any_of(vs.begin(), vs.end(), forcedForward);
    bool anyBackward = std::any_of(vs.begin(), vs.end(), forcedBackward);
    std::vector<AttentionConfig> forwards, backwards;
    for (const AttentionConfig &v : vs) {
      if ((!anyForward || forcedForward(v)) &&
          std::none_of(forwards.begin(), forwards.end(),
                       [&](const AttentionConfig &f) { return f.forward == v.forward; }))
        forwards.push_back(v);
      if ((!anyBackward || forcedBackward(v)) &&
          std::none_of(backwards.begin(), backwards.end(), [&](const AttentionConfig &b) {
            return b.dkdv == v.dkdv && b.dq == v.dq;
          }))
        backwards.push_back(v);
    }
    size_t f = 0, b = 0;
    if (prefer) {
      for (size_t i = 1; i < forwards.size(); ++i)
        if (ms(forwards[i].forward) < ms(forwards[f].forward))
          f = i;
      auto cost = [&](const AttentionConfig &c) { return ms(c.dkdv) + ms(c.dq); };
      for (size_t i = 1; i < backwards.size(); ++i)
        if (cost(backwards[i]) < cost(backwards[b]))
          b = i;
      ASSERT_TRUE(f > 0 || b > 0) << "no preferred variant for this shape";
    }
    LoadedPackage pkg = ct::attentionPackage(a, dtype);
    std::vector<std::vector<uint8_t>> in(4);
    for (int i = 0; i < 4; ++i)
      in[i] = ct::randomTyped(dtype, pkg.buffers[i].size / pkgBytesPerElement(dtype), gen);
    std::vector<std::vector<uint8_t>> got = run(pkg, api, in);
    ASSERT_EQ(got.size(), 5u);
    AttentionConfig c = backwards[b];
    c.forward = forwards[f].forward;
    c.forwardBlockQ = forwards[f].forwardBlockQ;
    c.forwardThreads = forwards[f].forwardThreads;
    c.forwardMinBlocks = forwards[f].forwardMinBlocks;
    c.forwardDynamic = forwards[f].forwardDynamic;
    std::string path = pathOf(c), staged;
    for (auto [bytes, kernel] : {std::pair<int, const char *>{c.forwardDynamic, "forward"},
                                 {c.dkdvDynamic, "dK/dV"},
                                 {c.dqDynamic, "dQ"}})
      if (bytes)
        staged += (staged.empty() ? "" : ", ") + std::string(kernel);
    if (!staged.empty())
      path += ", two stages (" + staged + ")";
    if (c.forwardBlockQ == 128 || (c.backwardMma && c.blockQ == 128))
      path += std::string(", 128 query rows (") +
              (c.forwardBlockQ == 128 ? "forward" : "") +
              (c.forwardBlockQ == 128 && c.blockQ == 128 ? ", " : "") +
              (c.blockQ == 128 ? "dQ" : "") + ")";
    if (c.forwardMinBlocks > 1 || c.dqMinBlocks > 1)
      path += ", " + std::to_string(c.forwardMinBlocks) + "/" +
              std::to_string(c.dqMinBlocks) + " blocks per SM (forward/dQ)";
    if (prefer)
      path += " (tuned)";
    expectDefinition(dtype, a, what, path.c_str(), in, got);

    // One forward launch and three backward launches per step, 128 threads
    // (256 for dK/dV and dQ on warp pairs, and for the forward and dQ on
    // 128 query rows: a warp per 16), the dynamic shared memory of
    // the two-stage kernels; before them, when tuned, each thunk once per
    // variant for the warm-up and once timed.
    std::vector<std::string> expected = {c.forward, c.dot, c.dkdv, c.dq};
    std::vector<uint32_t> dynamic = {uint32_t(c.forwardDynamic), 0,
                                     uint32_t(c.dkdvDynamic),
                                     uint32_t(c.dqDynamic)};
    size_t tuning = 0;
    if (prefer)
      tuning = (forwards.size() > 1 ? 2 * forwards.size() : 0) +
               (backwards.size() > 1 ? 2 * 3 * backwards.size() : 0);
    ASSERT_EQ(api.launches.size(), tuning + 8u);
    for (size_t i = 0; i < 8; ++i) {
      const auto &l = api.launches[tuning + i];
      EXPECT_EQ(l.entry, expected[i % 4]);
      EXPECT_EQ(l.sharedMemoryBytes, dynamic[i % 4]) << l.entry;
      bool pairs = (i % 4 == 2 && c.dkdvPairs) || (i % 4 == 3 && c.dqPairs);
      uint32_t rows = i % 4 == 0 ? uint32_t(c.forwardBlockQ)
                      : i % 4 == 3 && c.backwardMma ? uint32_t(c.blockQ)
                                                    : 0u;
      EXPECT_EQ(l.block[0], pairs || rows == 128 ? 2 * kAttentionThreads
                                                 : kAttentionThreads)
          << l.entry;
    }
    // Kernels past 48 KiB opted in to their dynamic shared memory.
    for (size_t i = 0; i < 4; ++i)
      if (dynamic[i] > 49152)
        EXPECT_GE(api.maxDynamicShared[expected[i]], dynamic[i]) << expected[i];
    int64_t bh = a.batch * a.heads;
    EXPECT_EQ(api.launches[tuning].grid[0],
              bh * ((a.qLen + c.forwardBlockQ - 1) / c.forwardBlockQ));
    EXPECT_EQ(api.launches[tuning + 3].grid[0],
              bh * ((a.qLen + c.blockQ - 1) / c.blockQ));
    EXPECT_EQ(api.launches[tuning + 2].grid[0],
              bh * ((a.kvLen + c.blockK - 1) / c.blockK));
  }

  // The packed layout on |a| (Tq == Tk, D == Dv): the definition on the
  // inputs rearranged to [B,H,T,D], and the BHTD package on them gives the
  // same bits (the same tiles in the same order).
  void checkPacked(PkgDType dtype, const AttentionParams &a, bool expectWmma) {
    std::string what = std::string("packed ") + pkgDTypeName(dtype) + " T=" +
                       std::to_string(a.qLen) + " H=" + std::to_string(a.heads) +
                       " D=" + std::to_string(a.headDim) +
                       (a.causal ? " causal" : "");
    SCOPED_TRACE(what);
    StatusOr<AttentionConfig> config =
        attentionConfig(dtype, a.headDim, a.valueDim, arch, mma);
    ASSERT_TRUE(config.isOk()) << config.status().message();
    EXPECT_EQ(config.value().tensorCores, expectWmma);
    EXPECT_EQ(config.value().forwardMma, expectWmma && arch >= 80 && mma);
    EXPECT_EQ(config.value().backwardMma, expectWmma && arch >= 80 && mma);
    EXPECT_EQ(config.value().dkdvPairs, config.value().backwardMma && config.value().dmax > 64);
    EXPECT_EQ(config.value().dqPairs, config.value().backwardMma && config.value().dmax > 128);

    LoadedPackage pkg = ct::packedAttentionPackage(a, dtype);
    std::vector<std::vector<uint8_t>> in(2);
    for (int i = 0; i < 2; ++i)
      in[i] = ct::randomTyped(dtype, pkg.buffers[i].size / pkgBytesPerElement(dtype), gen);
    FakeCudaApi api;
    api.device.multiprocessors = 2;
    api.hostKernels = *kernels;
    std::vector<std::vector<uint8_t>> packed = run(pkg, api, in);
    ASSERT_EQ(packed.size(), 3u);
    // One forward and three backward launches per step, as BHTD's.
    const AttentionConfig &c = config.value();
    std::vector<std::string> expected = {c.forward, c.dot, c.dkdv, c.dq};
    ASSERT_EQ(api.launches.size(), 8u);
    for (size_t i = 0; i < api.launches.size(); ++i)
      EXPECT_EQ(api.launches[i].entry, expected[i % 4]);

    // Everything as [B,H,T,D]: the inputs q, k, v, dout; the results out,
    // lse (already [B,H,T]), dq, dk, dv.
    std::vector<std::vector<uint8_t>> heads = {
        ct::unpackQkv(a, dtype, in[0], 0), ct::unpackQkv(a, dtype, in[0], 1),
        ct::unpackQkv(a, dtype, in[0], 2), ct::unpackRows(a, dtype, in[1])};
    std::vector<std::vector<uint8_t>> got = {
        ct::unpackRows(a, dtype, packed[0]), packed[1],
        ct::unpackQkv(a, dtype, packed[2], 0), ct::unpackQkv(a, dtype, packed[2], 1),
        ct::unpackQkv(a, dtype, packed[2], 2)};
    expectDefinition(dtype, a, what, pathOf(config.value()), heads, got);

    FakeCudaApi bhtdApi;
    bhtdApi.device.multiprocessors = 2;
    bhtdApi.hostKernels = *kernels;
    std::vector<std::vector<uint8_t>> bhtd =
        run(ct::attentionPackage(a, dtype), bhtdApi, heads);
    ASSERT_EQ(bhtd.size(), 5u);
    const char *names[5] = {"out", "lse", "dq", "dk", "dv"};
    for (int o = 0; o < 5; ++o)
      EXPECT_TRUE(got[o] == bhtd[o]) << names[o] << " differs from the BHTD run's";
  }

  // Steps |a|'s package twice on the same random inputs, each time on a
  // fresh fake table (2 SMs) that |setUp|(run, table) may change, with
  // KILN_CUDA_ATTENTION set to |env|[run] where that is not null; after
  // each, |ran|(run, table). The two runs' five outputs must be the same
  // bits (|what| says where they differ).
  void expectSameBits(PkgDType dtype, const AttentionParams &a,
                      const std::string &what,
                      const std::function<void(int, FakeCudaApi &)> &setUp,
                      const std::function<void(int, const FakeCudaApi &)> &ran,
                      std::array<const char *, 2> env = {nullptr, nullptr}) {
    LoadedPackage pkg = ct::attentionPackage(a, dtype);
    std::vector<std::vector<uint8_t>> in(4);
    for (int i = 0; i < 4; ++i)
      in[i] = ct::randomTyped(dtype, pkg.buffers[i].size / pkgBytesPerElement(dtype), gen);
    std::vector<std::vector<uint8_t>> outs[2];
    for (int r = 0; r < 2; ++r) {
      std::optional<ScopedEnv> scoped;
      if (env[r])
        scoped.emplace("KILN_CUDA_ATTENTION", env[r]);
      FakeCudaApi api;
      api.device.multiprocessors = 2;
      api.hostKernels = *kernels;
      setUp(r, api);
      outs[r] = run(pkg, api, in);
      ran(r, api);
    }
    ASSERT_EQ(outs[0].size(), 5u);
    const char *names[5] = {"out", "lse", "dq", "dk", "dv"};
    for (int o = 0; o < 5; ++o)
      EXPECT_TRUE(outs[0][o] == outs[1][o]) << names[o] << " " << what;
  }

  void sweep(PkgDType dtype, std::vector<int64_t> dims, bool wmma) {
    const int64_t lengths[][2] = {{5, 5}, {33, 70}, {70, 33}};
    for (int64_t d : dims)
      for (const auto &len : lengths)
        for (bool causal : {false, true})
          check(dtype, ct::attentionParams(2, 2, len[0], len[1], d, d, causal), wmma);
  }

  // The kernels one untimed step of |a| launches on a fresh fake table
  // (forward, D_i, dK/dV, dQ), or fewer where it failed.
  std::vector<std::string> stepEntries(PkgDType dtype, const AttentionParams &a) {
    FakeCudaApi api;
    api.device.multiprocessors = 2;
    api.hostKernels = *kernels;
    LoadedPackage pkg = ct::attentionPackage(a, dtype);
    std::vector<std::vector<uint8_t>> in(4);
    for (int i = 0; i < 4; ++i)
      in[i] = ct::randomTyped(dtype, pkg.buffers[i].size / pkgBytesPerElement(dtype), gen);
    run(pkg, api, in);
    std::vector<std::string> entries;
    for (size_t i = 0; i < api.launches.size() && i < 4; ++i)
      entries.push_back(api.launches[i].entry);
    EXPECT_EQ(api.launches.size(), 8u); // two steps, nothing tuned
    return entries;
  }

  // Why CudaExecutable::create refuses |pkg| on the fake table (a failure,
  // and "", when it loads).
  std::string loadError(const LoadedPackage &pkg) {
    FakeCudaApi api;
    api.hostKernels = *kernels;
    StatusOr<std::unique_ptr<CudaExecutable>> e = CudaExecutable::create(pkg, api);
    if (e.isOk()) {
      ADD_FAILURE() << "the package loaded";
      return "";
    }
    return e.status().message();
  }

  std::mt19937_64 gen{20261130};
  // The device's architecture and its kernels (SetUp: sm_90's), and
  // whether they are the mma.sync ones where the architecture has them.
  unsigned arch = 90;
  bool mma = true;
  // check() with the variants whose kernels this names picked by the
  // autotuner (the fake's launch times favour them).
  std::function<bool(const std::string &)> prefer;
  const std::map<std::string, HostKernel> *kernels = nullptr;
};

// Head dims that are multiples of 8 but not of 16 (40, 24) run on the mma
// kernels too, their last k step half zeros. They run after head dim 64,
// whose tiles (the same kernels' shared memory: statics on the emulated
// device) leave values past their width: a kernel that did not clear them
// would multiply those.
TEST_F(CudaAttentionTest, TensorCoresF16) { sweep(PkgDType::F16, {16, 64, 40}, true); }
TEST_F(CudaAttentionTest, TensorCoresBF16) { sweep(PkgDType::BF16, {16, 64, 24}, true); }

// Up to head dim 64 dK/dV may also run on warp pairs (the autotuner times
// both; here the fake's launch times make the pairs faster): the same
// definition holds, for both types, causal or not, odd lengths, head dims
// that are multiples of 8 only, and Dv != D.
// Past head dim 64 the forward, and dQ up to 128, may also walk two stages
// of tiles in dynamic shared memory (over 48 KiB: the kernels opt in; the
// emulation fills it with NaN bytes first): the autotuner picks them here
// (the fake's launch times favour them) and the same definition holds,
// head dims multiples of 8 only (cleared first) and Dv != D included.
TEST_F(CudaAttentionTest, TwoStagesInDynamicSharedMemory) {
  prefer = [](const std::string &entry) {
    return endsWith(entry, "s2");
  };
  check(PkgDType::F16, ct::attentionParams(1, 2, 70, 130, 128, 128, false), true);
  check(PkgDType::BF16, ct::attentionParams(1, 1, 150, 150, 128, 128, true), true);
  check(PkgDType::F16, ct::attentionParams(1, 1, 70, 70, 120, 72, true), true);
  check(PkgDType::BF16, ct::attentionParams(1, 1, 40, 70, 256, 256, true), true);
  check(PkgDType::F16, ct::attentionParams(1, 1, 33, 40, 160, 200, false), true);
}

// Two stages or one, the same tiles are multiplied in the same order: the
// same bits, forward and backward, at 128 and 256.
TEST_F(CudaAttentionTest, TwoStagesGiveTheSameBitsAsOne) {
  for (auto [dtype, d] : {std::pair<PkgDType, int>{PkgDType::BF16, 128},
                          {PkgDType::F16, 256}}) {
    const int dim = d;
    expectSameBits(
        dtype, ct::attentionParams(1, 2, 70, 100, dim, dim, true),
        "at head dim " + std::to_string(dim),
        [](int staged, FakeCudaApi &api) {
          if (staged)
            api.launchMs = [](const std::string &entry) {
              return endsWith(entry, "s2") ? 1.0 : 2.0;
            };
        },
        [&](int staged, const FakeCudaApi &api) {
          size_t s2 = 0;
          for (const auto &l : api.launches)
            s2 += endsWith(l.entry, "s2");
          // Two-stage kernels ran in the steps (and the tuning) or none did.
          EXPECT_EQ(s2 > 0, staged == 1) << dim;
        });
  }
}

TEST_F(CudaAttentionTest, DkdvOnWarpPairsUpToHeadDim64) {
  prefer = [](const std::string &entry) { return entry.back() == 'p'; };
  check(PkgDType::F16, ct::attentionParams(2, 2, 70, 33, 64, 64, false), true);
  check(PkgDType::BF16, ct::attentionParams(1, 2, 130, 130, 64, 64, true), true);
  check(PkgDType::F16, ct::attentionParams(2, 1, 33, 70, 40, 40, true), true);
  check(PkgDType::BF16, ct::attentionParams(1, 2, 45, 70, 64, 32, false), true);
  check(PkgDType::F16, ct::attentionParams(1, 1, 5, 5, 16, 48, true), true);
}
// Up to head dim 64 the forward and dQ may also keep 128 query rows per
// block (8 warps, "q128"; the fake's launch times favour them here): the
// same definition holds, with rows past Tq in the last block (130, 70),
// fewer rows than one block (33), causal (a block's first 64 rows walk a
// key tile past their diagonal, all masked), Dv != D and head dims that
// are multiples of 8 only.
TEST_F(CudaAttentionTest, ForwardAndDqOn128QueryRows) {
  auto q128 = [](const std::string &entry) { return endsWith(entry, "q128"); };
  prefer = q128;
  check(PkgDType::BF16, ct::attentionParams(1, 2, 130, 130, 64, 64, true), true);
  check(PkgDType::F16, ct::attentionParams(2, 2, 70, 33, 64, 64, false), true);
  check(PkgDType::F16, ct::attentionParams(2, 1, 33, 70, 40, 40, true), true);
  check(PkgDType::BF16, ct::attentionParams(1, 2, 200, 150, 64, 32, false), true);
  check(PkgDType::BF16, ct::attentionParams(1, 1, 5, 5, 16, 48, true), true);
  // And with dK/dV on warp pairs: the tuner picks both.
  prefer = [&](const std::string &entry) { return q128(entry) || entry.back() == 'p'; };
  check(PkgDType::F16, ct::attentionParams(1, 2, 150, 150, 64, 64, true), true);
}

// 128 query rows per block or 64, each row walks the same key tiles in
// the same order (a causal block's extra tile is all masked: it adds
// zeros): the same bits, forward and backward.
TEST_F(CudaAttentionTest, Q128GivesTheSameBitsAsQ64) {
  auto isWide = [](const std::string &entry) { return endsWith(entry, "q128"); };
  for (auto [dtype, causal] : {std::pair<PkgDType, bool>{PkgDType::BF16, true},
                               {PkgDType::F16, false}}) {
    expectSameBits(
        dtype, ct::attentionParams(1, 2, 150, 100, 64, 64, causal),
        causal ? "causal" : "",
        [&](int wide, FakeCudaApi &api) {
          if (wide)
            api.launchMs = [&](const std::string &entry) { return isWide(entry) ? 1.0 : 2.0; };
        },
        [&](int wide, const FakeCudaApi &api) {
          // The step's last four launches (forward, D_i, dK/dV, dQ): the
          // forward and dQ on 128 rows, 256 threads, or neither.
          ASSERT_GE(api.launches.size(), 4u);
          const auto *last = &api.launches[api.launches.size() - 4];
          EXPECT_EQ(isWide(last[0].entry), wide == 1) << last[0].entry;
          EXPECT_EQ(isWide(last[3].entry), wide == 1) << last[3].entry;
          EXPECT_EQ(last[0].block[0], wide ? 256u : 128u);
          EXPECT_EQ(last[3].block[0], wide ? 256u : 128u);
          EXPECT_EQ(last[0].grid[0], uint32_t(2 * (wide ? 2 : 3)));
        });
  }
}

// Up to head dim 64 the forward and dQ on 64 rows are also compiled for
// more blocks per SM (fewer registers; "b4", "b2", "b3"; the fake's launch
// times favour them here): the same definition holds. The host emulation
// runs the same source; ptxas's allocation is checked (no spills) in
// KernelsAssembleForSm90, and the GPU runs them in check.sh.
TEST_F(CudaAttentionTest, MoreBlocksPerSm) {
  prefer = [](const std::string &entry) {
    return entry.size() > 2 && entry[entry.size() - 2] == 'b' &&
           std::isdigit(static_cast<unsigned char>(entry.back()));
  };
  check(PkgDType::BF16, ct::attentionParams(1, 2, 130, 130, 64, 64, true), true);
  check(PkgDType::F16, ct::attentionParams(2, 1, 33, 70, 40, 24, false), true);
  // With 128 query rows: the forward for two blocks of 8 warps.
  prefer = [](const std::string &entry) {
    return endsWith(entry, "q128b2");
  };
  check(PkgDType::BF16, ct::attentionParams(1, 2, 150, 70, 64, 64, true), true);
}

TEST_F(CudaAttentionTest, CudaCoresF32) { sweep(PkgDType::F32, {12, 24}, false); }
TEST_F(CudaAttentionTest, CudaCoresHalf) {
  sweep(PkgDType::F16, {12, 20}, false);
  sweep(PkgDType::BF16, {20}, false);
}
TEST_F(CudaAttentionTest, CudaCoresF64) { sweep(PkgDType::F64, {24}, false); }

// Before sm_80 there is no m16n8k16 mma.sync: f16 keeps the wmma kernels
// there (sm_75's kernels on an sm_75 device), and bf16 the CUDA cores.
TEST_F(CudaAttentionTest, WmmaForwardBeforeSm80) {
  std::string error;
  kernels = &ct::hostAttentionKernels(
      error, 75, /*mma=*/true,
      {"kiln_attn_fwd_f16_wmma64", "kiln_attn_fwd_bf16_simt64", "kiln_attn_fwd_f16_simt64"});
  ASSERT_TRUE(error.empty()) << error;
  arch = 75;
  for (bool causal : {false, true}) {
    check(PkgDType::F16, ct::attentionParams(2, 2, 33, 70, 64, 64, causal), true);
    check(PkgDType::F16, ct::attentionParams(1, 2, 70, 33, 16, 16, causal), true);
  }
  check(PkgDType::BF16, ct::attentionParams(1, 2, 33, 40, 64, 64, true), false);
  // No mma.sync: head dim 40 (no multiple of 16) on the CUDA cores.
  check(PkgDType::F16, ct::attentionParams(1, 2, 33, 40, 40, 40, true), false);
}

// KILN_CUDA_ATTENTION=wmma: the wmma kernels at sm_90 (to compare them
// with the mma kernels on a GPU, or to step past a problem in one).
TEST_F(CudaAttentionTest, WmmaKernelsOnRequest) {
  std::string error;
  kernels = &ct::hostAttentionKernels(error, 90, /*mma=*/false,
                                      {"kiln_attn_fwd_bf16_wmma64", "kiln_attn_fwd_bf16_simt64"});
  ASSERT_TRUE(error.empty()) << error;
  mma = false;
  ScopedEnv env("KILN_CUDA_ATTENTION", "wmma");
  for (bool causal : {false, true})
    check(PkgDType::BF16, ct::attentionParams(2, 2, 33, 70, 64, 64, causal), true);
  // wmma needs multiples of 16: head dim 40 goes to the CUDA cores.
  check(PkgDType::BF16, ct::attentionParams(1, 2, 33, 40, 40, 40, true), false);
}

// KILN_CUDA_ATTENTION=pairs: dK/dV on warp pairs wherever that is a
// variant, nothing tuned (to check those kernels on a GPU).
TEST_F(CudaAttentionTest, WarpPairsOnRequest) {
  ScopedEnv env("KILN_CUDA_ATTENTION", "pairs");
  check(PkgDType::BF16, ct::attentionParams(2, 2, 33, 70, 64, 64, true), true);
  check(PkgDType::F16, ct::attentionParams(1, 2, 33, 40, 40, 24, false), true);
  check(PkgDType::BF16, ct::attentionParams(1, 1, 40, 40, 128, 128, true), true);
}

// KILN_CUDA_ATTENTION=stages: two stages in dynamic shared memory wherever
// that is a variant, nothing tuned.
TEST_F(CudaAttentionTest, TwoStagesOnRequest) {
  ScopedEnv env("KILN_CUDA_ATTENTION", "stages");
  check(PkgDType::BF16, ct::attentionParams(1, 2, 40, 70, 128, 128, true), true);
  check(PkgDType::F16, ct::attentionParams(1, 1, 33, 40, 256, 256, false), true);
  // Head dim 64 has no such variant: its defaults.
  check(PkgDType::F16, ct::attentionParams(1, 1, 33, 40, 64, 64, true), true);
}

// KILN_CUDA_ATTENTION=q128: the forward and dQ on 128 query rows per
// block wherever that is a variant (dK/dV on one warp), nothing tuned.
TEST_F(CudaAttentionTest, Q128OnRequest) {
  ScopedEnv env("KILN_CUDA_ATTENTION", "q128");
  for (bool causal : {false, true}) {
    AttentionParams a = ct::attentionParams(1, 2, 140, 70, 64, 64, causal);
    check(PkgDType::BF16, a, true);
    // The package's forward and dQ are the q128 kernels.
    std::vector<std::string> entries = stepEntries(PkgDType::BF16, a);
    ASSERT_EQ(entries.size(), 4u);
    EXPECT_EQ(entries[0], "kiln_attn_fwd_bf16_mma64q128");
    EXPECT_EQ(entries[2], "kiln_attn_bwd_dkdv_bf16_mma64");
    EXPECT_EQ(entries[3], "kiln_attn_bwd_dq_bf16_mma64q128");
  }
  // Past head dim 64 there is no such variant: the defaults.
  check(PkgDType::F16, ct::attentionParams(1, 1, 33, 40, 128, 128, true), true);
}

// Up to head dim 64, dK/dV may also store dS tile by tile and dQ read it
// ("ds"; the fake's launch times favour them here): the same definition
// holds, causal or not, with fewer query tiles than key tiles and more
// (the tile index's two branches), odd lengths, Dv != D and head dims that
// are multiples of 8 only. The workspace holds D_i and the tiles; the fake
// refuses a store or a read outside it.
TEST_F(CudaAttentionTest, DqFromStoredScores) {
  prefer = [](const std::string &entry) { return endsWith(entry, "ds"); };
  check(PkgDType::BF16, ct::attentionParams(1, 2, 130, 130, 64, 64, true), true);
  check(PkgDType::F16, ct::attentionParams(2, 2, 70, 33, 64, 64, false), true);
  check(PkgDType::F16, ct::attentionParams(2, 1, 33, 70, 40, 40, true), true);
  check(PkgDType::BF16, ct::attentionParams(1, 2, 200, 70, 64, 64, true), true);
  check(PkgDType::BF16, ct::attentionParams(1, 2, 45, 70, 64, 32, false), true);
  check(PkgDType::F16, ct::attentionParams(1, 1, 5, 5, 16, 48, true), true);
}

// dQ from the stored dS or computed again: dK/dV's S^T = K Q^T and dP^T
// = V dO^T are dQ's S and dP transposed, each element the same products
// summed in the same order, so dS rounds to the same bits, and dQ
// multiplies the same A fragments in the same order: the same bits.
TEST_F(CudaAttentionTest, StoredScoresGiveTheSameBitsAsRecomputed) {
  for (auto [dtype, causal] : {std::pair<PkgDType, bool>{PkgDType::BF16, true},
                               {PkgDType::F16, false}}) {
    // Unforced, the candidates time alike and the tuner keeps the first.
    expectSameBits(
        dtype, ct::attentionParams(1, 2, 150, 100, 64, 64, causal),
        causal ? "causal" : "", [](int, FakeCudaApi &) {},
        [](int stored, const FakeCudaApi &api) {
          // The step's last two launches: dK/dV and dQ, storing and
          // reading dS or not.
          ASSERT_GE(api.launches.size(), 4u);
          const auto *last = &api.launches[api.launches.size() - 2];
          EXPECT_EQ(endsWith(last[0].entry, "ds"), stored == 1) << last[0].entry;
          EXPECT_EQ(endsWith(last[1].entry, "ds"), stored == 1) << last[1].entry;
        },
        {nullptr, "stored"});
  }
}

// KILN_CUDA_ATTENTION=stored: dK/dV storing dS and dQ reading it wherever
// that is a variant, nothing tuned; the forward keeps its default.
TEST_F(CudaAttentionTest, StoredScoresOnRequest) {
  ScopedEnv env("KILN_CUDA_ATTENTION", "stored");
  AttentionParams a = ct::attentionParams(1, 2, 140, 70, 64, 64, true);
  check(PkgDType::BF16, a, true);
  std::vector<std::string> entries = stepEntries(PkgDType::BF16, a);
  ASSERT_EQ(entries.size(), 4u);
  EXPECT_EQ(entries[0], "kiln_attn_fwd_bf16_mma64");
  EXPECT_EQ(entries[2], "kiln_attn_bwd_dkdv_bf16_mma64ds");
  EXPECT_EQ(entries[3], "kiln_attn_bwd_dq_bf16_mma64ds");
  // Past head dim 64 there is no such variant: the defaults.
  check(PkgDType::F16, ct::attentionParams(1, 1, 33, 40, 128, 128, true), true);
}

// The workspace: D_i (an f32 per query row and head) rounded up to 256
// bytes, then one 64 x 64 tile of dS per tile the kernels visit, counted
// here by hand. A shape whose tiles would pass the cap has no "ds"
// variant; asked for one, the load says why.
TEST_F(CudaAttentionTest, StoredScoresWorkspace) {
  AttentionConfig ds;
  StatusOr<std::vector<AttentionConfig>> variants =
      attentionConfigVariants(PkgDType::BF16, 64, 64, 90);
  ASSERT_TRUE(variants.isOk()) << variants.status().message();
  for (const AttentionConfig &c : variants.value())
    if (c.storedScores)
      ds = c;
  ASSERT_TRUE(ds.storedScores);
  const uint64_t tile = 64 * 64 * 2;
  struct Case {
    int64_t b, h, tq, tk;
    bool causal;
    uint64_t tiles; // per head
  } cases[] = {{1, 2, 130, 130, true, 1 + 2 + 3},
               {1, 2, 130, 130, false, 9},
               {2, 1, 200, 70, true, 1 + 2 + 2 + 2},
               {1, 1, 33, 70, true, 1},
               {3, 1, 45, 70, false, 2}};
  for (const Case &k : cases) {
    AttentionParams a = ct::attentionParams(k.b, k.h, k.tq, k.tk, 64, 64, k.causal);
    uint64_t di = uint64_t(k.b * k.h * k.tq) * 4;
    EXPECT_EQ(attentionWorkspaceBytes(ds, a, PkgDType::BF16),
              (di + 255) / 256 * 256 + uint64_t(k.b * k.h) * k.tiles * tile)
        << k.tq << " x " << k.tk;
    EXPECT_EQ(attentionStoredScoresBytes(ds, a, PkgDType::BF16),
              uint64_t(k.b * k.h) * k.tiles * tile);
    EXPECT_EQ(attentionWorkspaceBytes(AttentionConfig(), a, PkgDType::BF16), di);
    EXPECT_EQ(attentionStoredScoresBytes(AttentionConfig(), a, PkgDType::BF16), 0u);
  }
  // 131072 rows of one head: 2048 x 2049 / 2 tiles, 17 GB.
  ScopedEnv env("KILN_CUDA_ATTENTION", "stored");
  std::string message = loadError(ct::attentionPackage(
      ct::attentionParams(1, 1, 131072, 131072, 64, 64, true), PkgDType::BF16));
  EXPECT_NE(message.find("asks for the \"ds\" variant, whose dS tiles would take "
                         "more than 1073741824 bytes of workspace"),
            std::string::npos)
      << message;
}

// KILN_CUDA_ATTENTION=occupancy, and with q128: the kernels compiled for
// more blocks per SM wherever that is a variant, nothing tuned (q128's dQ
// has none: the backward keeps every variant, untimed here, so the first).
TEST_F(CudaAttentionTest, OccupancyOnRequest) {
  for (auto [value, forward, dq] :
       {std::tuple<const char *, const char *, const char *>{
            "occupancy", "kiln_attn_fwd_f16_mma64b4", "kiln_attn_bwd_dq_f16_mma64b3"},
        {"q128,occupancy", "kiln_attn_fwd_f16_mma64q128b2", "kiln_attn_bwd_dq_f16_mma64"}}) {
    ScopedEnv env("KILN_CUDA_ATTENTION", value);
    AttentionParams a = ct::attentionParams(1, 2, 140, 70, 64, 64, true);
    check(PkgDType::F16, a, true);
    std::vector<std::string> entries = stepEntries(PkgDType::F16, a);
    ASSERT_EQ(entries.size(), 4u);
    EXPECT_EQ(entries[0], forward) << value;
    EXPECT_EQ(entries[3], dq) << value;
  }
}

// An executable says where its attention kernels came from (kiln-cuda-run
// prints it): NVRTC with its time, or this process's cache (the fake's
// NVRTC has no identity, so nothing goes to the disk cache here).
TEST_F(CudaAttentionTest, KernelOriginsSayWhereTheKernelsCameFrom) {
  FakeCudaApi api;
  api.device.multiprocessors = 2;
  api.hostKernels = *kernels;
  CudaOptions options;
  options.autotuneCache = "off";
  StatusOr<std::unique_ptr<CudaExecutable>> made = CudaExecutable::create(
      ct::attentionPackage(ct::attentionParams(1, 1, 20, 20, 16, 16, false),
                           PkgDType::F16),
      api, options);
  ASSERT_TRUE(made.isOk()) << made.status().message();
  std::vector<std::string> origins = made.value()->kernelOrigins();
  ASSERT_EQ(origins.size(), 1u);
  const std::string &o = origins[0];
  EXPECT_TRUE(o == "attention kernels compiled earlier in this process" ||
              (o.rfind("attention kernels compiled by NVRTC in ", 0) == 0 &&
               endsWith(o, " s")))
      << o;
}

TEST_F(CudaAttentionTest, UnknownKernelChoiceIsRefusedAtLoad) {
  ScopedEnv env("KILN_CUDA_ATTENTION", "fast");
  std::string message = loadError(ct::attentionPackage(
      ct::attentionParams(1, 1, 4, 4, 16, 16, false), PkgDType::BF16));
  EXPECT_NE(message.find("KILN_CUDA_ATTENTION=fast: expected mma, wmma, or a comma-separated "
                         "list of pairs, stages, q128, occupancy and stored"),
            std::string::npos)
      << message;
}

// Head dims past the first bucket, and value dims other than the head dim.
TEST_F(CudaAttentionTest, OtherHeadDims) {
  check(PkgDType::BF16, ct::attentionParams(1, 2, 33, 40, 128, 128, true), true);
  // Head dim 128's forward holds one stage of K and V: three key tiles.
  // Its dK/dV (warp pairs) walks three 32-row query tiles, the last partial,
  // through both stages.
  check(PkgDType::F16, ct::attentionParams(1, 1, 70, 130, 128, 128, false), true);
  // Causal over three key blocks: each starts at its own query tile.
  check(PkgDType::BF16, ct::attentionParams(1, 1, 150, 150, 128, 128, true), true);
  // Value and head dims differ in the 128 bucket (the pairs' sides use
  // different widths: K and Q d, V and dO dv).
  check(PkgDType::BF16, ct::attentionParams(1, 2, 45, 100, 128, 96, true), true);
  check(PkgDType::F16, ct::attentionParams(1, 1, 37, 37, 80, 128, false), true);
  // Multiples of 8 in the 128 bucket, after the 128s (see TensorCoresF16);
  // then with value dims of another width, where the pairs' K and V staging
  // crosses tiles of both widths.
  check(PkgDType::BF16, ct::attentionParams(1, 1, 40, 50, 120, 120, true), true);
  check(PkgDType::BF16, ct::attentionParams(1, 2, 45, 100, 120, 72, true), true);
  check(PkgDType::F16, ct::attentionParams(1, 1, 70, 37, 72, 120, false), true);
  check(PkgDType::F16, ct::attentionParams(2, 1, 20, 17, 16, 48, false), true);
  // Past 128: the mma kernels with dQ on warp pairs too, 32-key tiles; D
  // 256 with Dv 64 (dO's fragments narrower than Q's), and D 64 with Dv 256
  // (the second half of dQ's columns empty).
  check(PkgDType::BF16, ct::attentionParams(1, 2, 70, 90, 256, 256, true), true);
  check(PkgDType::F16, ct::attentionParams(1, 1, 40, 33, 160, 200, false), true);
  check(PkgDType::BF16, ct::attentionParams(1, 1, 37, 50, 256, 64, true), true);
  check(PkgDType::F16, ct::attentionParams(1, 1, 33, 33, 64, 256, true), true);
  check(PkgDType::F32, ct::attentionParams(1, 2, 19, 21, 64, 64, true), false);
  check(PkgDType::F32, ct::attentionParams(1, 1, 9, 11, 100, 36, false), false);
  check(PkgDType::F32, ct::attentionParams(1, 1, 9, 6, 200, 256, true), false);
}

// The packed layout: CUDA-core head dim 20 and tensor-core head dim 64 (f32
// stays on CUDA cores), causal and not, a length that is no multiple of
// the tiles, three heads (so b and h strides differ from BHTD's).
TEST_F(CudaAttentionTest, PackedLayout) {
  for (PkgDType dtype : {PkgDType::F32, PkgDType::BF16, PkgDType::F16})
    for (int64_t d : {20, 64})
      for (bool causal : {false, true})
        checkPacked(dtype, ct::attentionParams(2, 3, 37, 37, d, d, causal),
                    dtype != PkgDType::F32 && d == 64);
  checkPacked(PkgDType::F64, ct::attentionParams(1, 2, 5, 5, 24, 24, true), false);
}

// A packed package whose buffers do not fit its layout is refused at load.
TEST_F(CudaAttentionTest, PackedLayoutBadShapeIsRefused) {
  LoadedPackage pkg = ct::packedAttentionPackage(
      ct::attentionParams(1, 2, 8, 8, 16, 16, false), PkgDType::BF16);
  pkg.thunks[1].results = {4, 4, 4}; // dq, dk, dv as if BHTD
  std::string message = loadError(pkg);
  EXPECT_NE(message.find("thunk 1: attention_grad (layout packed_bthd) needs 4 "
                         "operands and 1 results, found 4 and 3"),
            std::string::npos)
      << message;
}

// Every configuration fits in 48 KiB of static shared memory.
// attentionTilePairs in closed form against a walk over the tiles as the
// kernels walk them (kiln_attn_key_blocks), for every tile shape the
// kernels use and lengths around the tiles' edges; lengths no package
// could hold come back at once, as large as they are.
TEST(CudaAttentionConfigTest, TilePairsAsTheKernelsWalkThem) {
  const int shapes[][2] = {{64, 64}, {128, 64}, {32, 64}, {64, 32},
                           {32, 16}, {16, 8},   {8, 4},   {4, 2}};
  for (const auto &shape : shapes)
    for (int64_t tq : {1, 2, 15, 16, 17, 63, 64, 65, 127, 200, 1024, 1030})
      for (int64_t tk : {1, 3, 31, 32, 33, 64, 70, 129, 1024})
        for (bool causal : {false, true}) {
          const int64_t bq = shape[0], bk = shape[1];
          const int64_t nk = (tk + bk - 1) / bk;
          double tiles = 0;
          for (int64_t q0 = 0; q0 < tq; q0 += bq)
            tiles += causal ? std::min(nk, (q0 + bq - 1) / bk + 1) : nk;
          EXPECT_EQ(attentionTilePairs({shape[0], shape[1]}, tq, tk, causal),
                    tiles * double(bq * bk))
              << bq << "x" << bk << " tiles, " << tq << " x " << tk
              << (causal ? " causal" : "");
        }
  // 2^62 query rows of 64 and as many keys: 2^56 tiles a side, causal
  // 2^56 (2^56 + 1) / 2.
  const double side = std::ldexp(1.0, 56);
  EXPECT_EQ(attentionTilePairs({64, 64}, int64_t(1) << 62, int64_t(1) << 62, true),
            side * (side + 1) / 2 * 64 * 64);
  EXPECT_EQ(attentionTilePairs({64, 64}, 0, 5, true), 0.0);
}

TEST(CudaAttentionConfigTest, TilesFitSharedMemory) {
  for (PkgDType dtype : {PkgDType::F32, PkgDType::F64, PkgDType::F16, PkgDType::BF16})
    for (int64_t d : {8, 16, 24, 64, 96, 128, 160, 256}) {
      StatusOr<AttentionConfig> c = attentionConfig(dtype, d, d, 90);
      ASSERT_TRUE(c.isOk()) << c.status().message();
      const AttentionConfig &x = c.value();
      std::printf("%-5s D=%-3lld %s, bucket %d, tiles %dx%d (backward), shared fwd %d dkdv %d dq %d\n",
                  pkgDTypeName(dtype), (long long)d,
                  pathOf(x),
                  x.dmax, x.blockQ, x.blockK,
                  x.forwardShared, x.dkdvShared, x.dqShared);
      EXPECT_LE(std::max({x.forwardShared, x.dkdvShared, x.dqShared}), 49152);
      EXPECT_GE(x.dmax, d);
      bool half = dtype == PkgDType::F16 || dtype == PkgDType::BF16;
      EXPECT_EQ(x.tensorCores, half && d % 8 == 0);
      // sm_90: the register-fragment kernels wherever the tensor cores
      // are, with their 64-row tiles; dK/dV on warp pairs past head dim 64.
      EXPECT_EQ(x.forwardMma, x.tensorCores);
      EXPECT_EQ(x.backwardMma, x.tensorCores);
      EXPECT_EQ(x.dkdvPairs, x.tensorCores && d > 64);
      EXPECT_EQ(x.dkdvThreads, x.dkdvPairs ? 256 : 128);
      EXPECT_EQ(x.dqPairs, x.tensorCores && d > 128);
      EXPECT_EQ(x.dqThreads, x.dqPairs ? 256 : 128);
      if (x.forwardMma)
        EXPECT_EQ(x.forwardBlockQ, 64);
      if (x.backwardMma)
        EXPECT_TRUE(x.blockQ == 64 && x.blockK == 64);
    }
  // bf16 needs sm_80 for tensor cores, f16 sm_70; mma.sync m16n8k16 sm_80.
  EXPECT_FALSE(attentionConfig(PkgDType::BF16, 64, 64, 75).value().tensorCores);
  EXPECT_TRUE(attentionConfig(PkgDType::F16, 64, 64, 75).value().tensorCores);
  EXPECT_FALSE(attentionConfig(PkgDType::F16, 64, 64, 75).value().forwardMma);
  EXPECT_TRUE(attentionConfig(PkgDType::F16, 64, 64, 80).value().backwardMma);
  // A package's sets alone: GPT-2's bf16 head dim 64 is five kernels (dK/dV
  // twice: one warp or warp pairs), each instantiated once.
  std::string gpt = attentionKernelSource(90, {"kiln_attn_fwd_bf16_mma64"});
  for (const char *entry : {"kiln_attn_fwd_bf16_mma64", "kiln_attn_bwd_dot_bf16",
                            "kiln_attn_bwd_dkdv_bf16_mma64", "kiln_attn_bwd_dq_bf16_mma64"}) {
    std::string line = std::string("KILN_ATTN_KERNEL(") + entry + ",";
    EXPECT_NE(gpt.find(line), std::string::npos) << entry;
    EXPECT_EQ(gpt.find(line), gpt.rfind(line)) << entry << " twice";
  }
  EXPECT_NE(gpt.find("KILN_ATTN_KERNEL_N(kiln_attn_bwd_dkdv_bf16_mma64p, 256, "
                     "kiln_attn_bwd_dkdv_mma_pairs, __nv_bfloat16, 64, 32, 64)"),
            std::string::npos);
  // The variants: up to head dim 64 on mma.sync, dK/dV on one warp then on
  // warp pairs, each with the forward and dQ on 64 query rows then on 128,
  // those for more blocks per SM, then dQ from stored dS; past it, or on
  // wmma, one way.
  for (PkgDType dtype : {PkgDType::F16, PkgDType::BF16}) {
    std::vector<AttentionConfig> v =
        attentionConfigVariants(dtype, 64, 40, 90).value();
    ASSERT_EQ(v.size(), 9u);
    EXPECT_FALSE(v[0].dkdvPairs);
    EXPECT_TRUE(v[1].dkdvPairs);
    EXPECT_EQ(v[1].dkdv, v[0].dkdv + "p");
    EXPECT_EQ(v[1].dkdvThreads, 2 * int(kAttentionThreads));
    EXPECT_LE(v[1].dkdvShared, 49152);
    EXPECT_EQ(v[1].forward, v[0].forward);
    EXPECT_EQ(v[1].dq, v[0].dq);
    for (int i : {2, 3}) {
      const AttentionConfig &n = v[i - 2], &w = v[i];
      EXPECT_TRUE(w.wideRows && !n.wideRows);
      EXPECT_EQ(w.forward, n.forward + "q128");
      EXPECT_EQ(w.dq, n.dq + "q128");
      EXPECT_EQ(w.dkdv, n.dkdv);
      EXPECT_EQ(w.forwardBlockQ, 128);
      EXPECT_EQ(w.blockQ, 128);
      EXPECT_EQ(w.blockK, 64);
      EXPECT_EQ(w.forwardThreads, 256);
      EXPECT_EQ(w.dqThreads, 256);
      EXPECT_EQ(w.forwardShared, n.forwardShared);
      EXPECT_EQ(w.dqShared, n.dqShared);
    }
    // Then each of those compiled for more blocks per SM: the forward for
    // 16 warps, dQ on 64 rows for 12 (on 128 it stays at one block).
    for (int i = 4; i < 8; ++i) {
      const AttentionConfig &n = v[i - 4], &o = v[i];
      int blocks = n.wideRows ? 2 : 4;
      EXPECT_EQ(o.forwardMinBlocks, blocks);
      EXPECT_EQ(o.forward, n.forward + "b" + std::to_string(blocks));
      EXPECT_EQ(o.dqMinBlocks, n.wideRows ? 1 : 3);
      EXPECT_EQ(o.dq, n.wideRows ? n.dq : n.dq + "b3");
      EXPECT_EQ(o.dkdv, n.dkdv);
      EXPECT_EQ(o.forwardThreads * o.forwardMinBlocks, 16 * 32);
      EXPECT_EQ(n.forwardMinBlocks, 1);
      EXPECT_EQ(n.dqMinBlocks, 1);
    }
    // The last: dK/dV on one warp storing dS, dQ on 64 rows reading it;
    // the forward is the first's. dQ's shared memory: two stages of a K
    // tile and a dS^T tile, rows padded by 8.
    const AttentionConfig &ds = v[8];
    EXPECT_TRUE(ds.storedScores);
    for (int i = 0; i < 8; ++i)
      EXPECT_FALSE(v[i].storedScores) << i;
    EXPECT_EQ(ds.forward, v[0].forward);
    EXPECT_EQ(ds.dkdv, v[0].dkdv + "ds");
    EXPECT_EQ(ds.dq, v[0].dq + "ds");
    EXPECT_FALSE(ds.dkdvPairs || ds.dqPairs || ds.wideRows);
    EXPECT_EQ(ds.dqMinBlocks, 1);
    EXPECT_EQ(ds.dqThreads, int(kAttentionThreads));
    EXPECT_EQ(ds.dqShared, 2 * 2 * 64 * (64 + 8) * 2);
    EXPECT_EQ(ds.dqDynamic, 0);
    // KILN_CUDA_ATTENTION's requests pick one forward and one backward.
    auto requested = [&](const char *value, bool grad) {
      ScopedEnv env("KILN_CUDA_ATTENTION", value);
      StatusOr<AttentionRequest> r = attentionRequestFromEnv();
      EXPECT_TRUE(r.isOk()) << value;
      std::vector<int> ids;
      for (int i = 0; i < int(v.size()); ++i)
        if (attentionVariantRequested(r.value(), v[i], grad))
          ids.push_back(i);
      return ids;
    };
    EXPECT_EQ(requested("pairs", false), (std::vector<int>{0, 1, 8}));
    EXPECT_EQ(requested("stored", true), (std::vector<int>{8}));
    EXPECT_EQ(requested("stored", false), (std::vector<int>{0, 1, 8}));
    EXPECT_TRUE(requested("stored,pairs", true).empty());
    EXPECT_EQ(requested("pairs", true), (std::vector<int>{1}));
    EXPECT_EQ(requested("q128", false), (std::vector<int>{2, 3}));
    // (6's backward kernels are 2's: dQ on 128 rows has one occupancy.)
    EXPECT_EQ(requested("q128", true), (std::vector<int>{2, 6}));
    EXPECT_EQ(requested("occupancy", false), (std::vector<int>{4, 5}));
    EXPECT_EQ(requested("occupancy", true), (std::vector<int>{4}));
    EXPECT_EQ(requested("q128,occupancy", false), (std::vector<int>{6, 7}));
    EXPECT_EQ(requested("pairs,occupancy", true), (std::vector<int>{5}));
    // dQ on 128 rows has no occupancy variant: none (all are kept).
    EXPECT_TRUE(requested("q128,occupancy", true).empty());
    EXPECT_TRUE(requested("stages", true).empty());
    EXPECT_EQ(requested("mma", true).size(), 9u);
    ScopedEnv bad("KILN_CUDA_ATTENTION", "pairs,,q128");
    EXPECT_FALSE(attentionRequestFromEnv().isOk());
    EXPECT_EQ(attentionConfigVariants(dtype, 64, 64, 90, false).value().size(), 1u);
    // Past 64: two stages in dynamic shared memory, the forward and dQ,
    // and dK/dV past 128 (at 128 it has two stages already); the warp
    // pairs' hand-over stays once. None where a block may not take more
    // than 48 KiB.
    for (int d : {128, 256}) {
      std::vector<AttentionConfig> w = attentionConfigVariants(dtype, d, d, 90).value();
      ASSERT_EQ(w.size(), 2u) << d;
      EXPECT_EQ(w[1].forward, w[0].forward + "s2");
      EXPECT_EQ(w[1].forwardDynamic, 2 * w[0].forwardShared);
      EXPECT_GT(w[1].forwardDynamic, 49152);
      EXPECT_EQ(w[1].dq, w[0].dq + "s2");
      EXPECT_EQ(w[1].dqDynamic, d == 128 ? 2 * w[0].dqShared
                                         : 2 * w[0].dqShared - 64 * 32 * 4);
      EXPECT_EQ(w[1].dkdv, d == 128 ? w[0].dkdv : w[0].dkdv + "s2");
      EXPECT_EQ(w[1].dkdvDynamic, d == 128 ? 0 : 2 * w[0].dkdvShared - 64 * 32 * 4);
      for (int bytes : {w[1].forwardDynamic, w[1].dkdvDynamic, w[1].dqDynamic})
        EXPECT_LE(bytes, 232448);
      EXPECT_EQ(attentionConfigVariants(dtype, d, d, 90, true, 0).value().size(), 1u);
    }
  }
  EXPECT_EQ(attentionConfigVariants(PkgDType::F32, 64, 64, 90).value().size(), 1u);
  EXPECT_EQ(gpt.find("KILN_ATTN_KERNEL(kiln_attn_fwd_f32"), std::string::npos);
  EXPECT_EQ(gpt.find("KILN_ATTN_KERNEL(kiln_attn_fwd_bf16_simt"), std::string::npos);
  // The mma.sync templates come only with a set that runs on them.
  EXPECT_NE(gpt.find("kiln_attn_bwd_dkdv_mma_pairs(KILN_ATTN_PARAMS)"), std::string::npos);
  std::string f32 = attentionKernelSource(90, {"kiln_attn_fwd_f32_simt64"});
  EXPECT_NE(f32.find("KILN_ATTN_KERNEL(kiln_attn_fwd_f32_simt64,"), std::string::npos);
  EXPECT_EQ(f32.find("kiln_attn_ldsm_x4"), std::string::npos);
  EXPECT_EQ(attentionKernelSource(75).find("kiln_attn_ldsm_x4"), std::string::npos);
  StatusOr<AttentionConfig> big = attentionConfig(PkgDType::F32, 300, 64, 90);
  ASSERT_FALSE(big.isOk());
  EXPECT_NE(big.status().message().find("head dims 300 and 64: expected 1 to 256"),
            std::string::npos)
      << big.status().message();
}

// A head dim the kernels lack is refused at load, naming the thunk.
TEST_F(CudaAttentionTest, UnsupportedHeadDimIsRefusedAtLoad) {
  std::string message = loadError(ct::attentionPackage(
      ct::attentionParams(1, 1, 4, 4, 320, 16, false), PkgDType::F32));
  EXPECT_NE(message.find("thunk 0 (attention)"), std::string::npos) << message;
  EXPECT_NE(message.find("expected 1 to 256"), std::string::npos) << message;
}

// Every kernel compiles through NVRTC and assembles with ptxas for sm_90,
// without spills. Not under AddressSanitizer (scripts/sanitize.sh, after
// ctest ran it): NVRTC and ptxas are not instrumented, so the two minutes
// they take there check nothing of Kiln's memory.
TEST(CudaAttentionNvrtcTest, KernelsAssembleForSm90) {
  if (KILN_TEST_HAS_ASAN)
    GTEST_SKIP() << "not assembled for sm_90 under AddressSanitizer (ctest's "
                    "run assembles them)";
  std::string skip;
  ct::expectSm90WithoutSpills(attentionKernelSource(90), "kiln_attention",
                              attentionKernelEntryPoints(90), skip);
  if (!skip.empty())
    GTEST_SKIP() << skip;
}

// The runtime's own path: the real table's NVRTC (no driver needed)
// compiles the source as CudaAttention::create does, to an sm_90 cubin:
// GPT-2's set as CudaAttention::create compiles it (bf16, head dim 64,
// every variant: dK/dV both ways, the forward and dQ on 64 and 128 query
// rows, each for one block per SM and for more), the time printed. (Every
// kernel compiles and assembles in KernelsAssembleForSm90; compiling all
// of them again here would add most of a minute to the suite.)
TEST(CudaAttentionNvrtcTest, TheRealTableCompilesTheKernels) {
  std::string skip;
  std::set<std::string> forwards;
  StatusOr<std::vector<AttentionConfig>> variants =
      attentionConfigVariants(PkgDType::BF16, 64, 64, 90);
  ASSERT_TRUE(variants.isOk());
  for (const AttentionConfig &c : variants.value())
    forwards.insert(c.forward);
  EXPECT_EQ(forwards.size(), 4u);
  std::vector<std::string> entries = attentionKernelEntryPoints(90, true, forwards);
  auto start = std::chrono::steady_clock::now();
  ct::expectRealTableCompiles(attentionKernelSource(90, forwards), "kiln_attention", skip);
  if (!skip.empty())
    GTEST_SKIP() << skip;
  ASSERT_FALSE(HasFatalFailure());
  std::printf("NVRTC sm_90, the bf16 head-dim-64 set (%zu kernels): %.1f s\n", entries.size(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

} // namespace
