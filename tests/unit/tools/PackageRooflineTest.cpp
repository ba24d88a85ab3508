//===- PackageRooflineTest.cpp - the predicted cost of a package's thunks -===//
//
// Hand-built packages whose thunks' FLOPs, bytes and roofline times are
// computed here from the formulas (closed forms, not the implementation's
// loops), and the printed summary's folding of layers.
//
//===----------------------------------------------------------------------===//

#include "tools/kiln/lib/PackageRoofline.h"

#include "llvm/Support/Format.h"

#include "gtest/gtest.h"

#include <string>

namespace kiln::cli {
namespace {

using namespace kiln::runtime;

uint32_t addBuffer(LoadedPackage &p, std::string name, PkgDType dtype,
                   std::vector<int64_t> shape, PkgRole role = PkgRole::None) {
  PackageBuffer b;
  b.name = std::move(name);
  b.dtype = dtype;
  b.shape = std::move(shape);
  uint64_t n = 1;
  for (int64_t d : b.shape)
    n *= uint64_t(d);
  b.size = n * pkgBytesPerElement(dtype);
  b.role = role;
  p.buffers.push_back(b);
  return uint32_t(p.buffers.size() - 1);
}

PackageThunk &addThunk(LoadedPackage &p, ThunkKind kind,
                       std::vector<uint32_t> operands,
                       std::vector<uint32_t> results) {
  PackageThunk &t = p.thunks.emplace_back();
  t.kind = kind;
  t.operands = std::move(operands);
  t.results = std::move(results);
  return t;
}

// A BHTD attention with |a| (q, k, v -> o, lse) and its gradient (q, k,
// v, o, lse, dout -> dq, dk, dv), each thunk with |grad| among |which|.
void addAttention(LoadedPackage &p, const AttentionParams &a, uint32_t q,
                  uint32_t k, uint32_t v, uint32_t o, uint32_t lse,
                  uint32_t dout, uint32_t dq, uint32_t dk, uint32_t dv,
                  std::initializer_list<bool> which = {false, true}) {
  for (bool grad : which) {
    PackageThunk &t =
        grad ? addThunk(p, ThunkKind::LibraryCall, {q, k, v, o, lse, dout},
                        {dq, dk, dv})
             : addThunk(p, ThunkKind::LibraryCall, {q, k, v}, {o, lse});
    t.library = grad ? LibraryKind::AttentionGrad : LibraryKind::Attention;
    t.hasAttention = true;
    t.attention = a;
  }
}

// A causal packed attention (qkv [B,T,3,H,D] -> out [B,T,H,D], lse) and
// its gradient (qkv, out, lse, dout -> dqkv), named attentionN.*.
void addPackedAttention(LoadedPackage &p, const std::string &name, int64_t B,
                        int64_t H, int64_t T, int64_t D) {
  uint32_t qkv = addBuffer(p, "qkv", PkgDType::BF16, {B, T, 3, H, D});
  uint32_t o = addBuffer(p, name + ".0", PkgDType::BF16, {B, T, H, D});
  uint32_t lse = addBuffer(p, name + ".1", PkgDType::F32, {B, H, T});
  uint32_t dout = addBuffer(p, "dout", PkgDType::BF16, {B, T, H, D});
  uint32_t dqkv = addBuffer(p, "dqkv", PkgDType::BF16, {B, T, 3, H, D});
  for (bool grad : {false, true}) {
    PackageThunk &t =
        grad ? addThunk(p, ThunkKind::LibraryCall, {qkv, o, lse, dout}, {dqkv})
             : addThunk(p, ThunkKind::LibraryCall, {qkv}, {o, lse});
    t.library = grad ? LibraryKind::AttentionGrad : LibraryKind::Attention;
    t.hasAttention = true;
    t.attention = {B, H, T, T, D, D, 0.125, true, AttentionLayout::PackedBTHD};
  }
}

double seconds(const RooflineDevice &d, double flops, double peak,
               double efficiency, double bytes) {
  return std::max(flops / (peak * efficiency),
                  bytes / (d.bandwidthGBps * 1e9 * d.memoryEfficiency));
}

TEST(PackageRooflineTest, GemmAttentionKernelAndCopyCosts) {
  LoadedPackage p;
  p.target.kind = TargetKind::Cuda;
  const int64_t m = 4096, n = 3072, k = 768;
  uint32_t a = addBuffer(p, "fusion3.lhs", PkgDType::BF16, {m, k});
  uint32_t w = addBuffer(p, "w", PkgDType::BF16, {k, n}, PkgRole::Parameter);
  uint32_t bias = addBuffer(p, "b", PkgDType::BF16, {n}, PkgRole::Parameter);
  uint32_t out = addBuffer(p, "fusion3.0", PkgDType::BF16, {m, n});
  PackageThunk &gemm =
      addThunk(p, ThunkKind::LibraryCall, {a, w, bias}, {out});
  gemm.library = LibraryKind::Gemm;
  gemm.hasGemm = true;
  gemm.gemm.m = m;
  gemm.gemm.n = n;
  gemm.gemm.k = k;
  gemm.gemm.epilogue = PkgGemmEpilogue::BiasGelu;

  // A kernel reading the GEMM's result twice (counted once) and writing one.
  PackageKernel kernel;
  kernel.kind = KernelKind::Cuda;
  kernel.name = "fusion3";
  kernel.sourceNodes = {"blocks.3.mlp.fc.matmul", "blocks.3.mlp.gelu"};
  p.kernels.push_back(kernel);
  uint32_t act = addBuffer(p, "fusion4.0", PkgDType::BF16, {m, n});
  addThunk(p, ThunkKind::KernelLaunch, {out, out}, {act}).kernel = 0;

  // Causal attention, B 2, H 4, T 256, D 64, and its gradient.
  const int64_t B = 2, H = 4, T = 256, D = 64;
  uint32_t q = addBuffer(p, "q", PkgDType::BF16, {B, H, T, D});
  uint32_t kk = addBuffer(p, "k", PkgDType::BF16, {B, H, T, D});
  uint32_t v = addBuffer(p, "v", PkgDType::BF16, {B, H, T, D});
  uint32_t o = addBuffer(p, "attention7.0", PkgDType::BF16, {B, H, T, D});
  uint32_t lse = addBuffer(p, "attention7.1", PkgDType::F32, {B, H, T});
  uint32_t dq = addBuffer(p, "dq", PkgDType::BF16, {B, H, T, D});
  uint32_t dk = addBuffer(p, "dk", PkgDType::BF16, {B, H, T, D});
  uint32_t dv = addBuffer(p, "dv", PkgDType::BF16, {B, H, T, D});
  addAttention(p, {B, H, T, T, D, D, 0.125, true}, q, kk, v, o, lse, act, dq,
               dk, dv);

  addThunk(p, ThunkKind::Copy, {q}, {dq});
  addThunk(p, ThunkKind::Collective, {dq}, {dq}).hasCollective = true;

  RooflineDevice d;
  PackageRooflineResult r = predictPackageRoofline(p, d);
  ASSERT_EQ(r.thunks.size(), 5u);
  EXPECT_EQ(r.collectives, 1);
  const double tc = d.bf16Tflops * 1e12;

  const ThunkCost &g = r.thunks[0];
  EXPECT_EQ(g.kind, "gemm+bias_gelu");
  EXPECT_EQ(g.name, "blocks.3.mlp.fc.matmul +1"); // fusion3's kernel
  EXPECT_DOUBLE_EQ(g.flops, 2.0 * m * n * k);
  EXPECT_EQ(g.bytes, uint64_t(2 * (m * k + k * n + n + m * n)));
  EXPECT_NEAR(g.us,
              d.launchUs + 1e6 * seconds(d, g.flops, tc, d.gemmEfficiency,
                                         double(g.bytes)),
              1e-9);
  EXPECT_TRUE(g.computeBound);

  const ThunkCost &l = r.thunks[1];
  EXPECT_EQ(l.kind, "kernel");
  EXPECT_EQ(l.flops, 0.0);
  EXPECT_EQ(l.bytes, uint64_t(2 * 2 * m * n));
  EXPECT_NEAR(l.us, d.launchUs + 1e6 * double(l.bytes) /
                                     (d.bandwidthGBps * 1e9 * d.memoryEfficiency),
              1e-9);
  EXPECT_FALSE(l.computeBound);

  // What sm_90's bf16 kernels at head dim 64 multiply: 64 x 64 tiles
  // (query x key), under the causal mask those on or below the diagonal,
  // 1 + 2 + 3 + 4 of the 4 x 4 at T = 256.
  double pairs = double(B * H) * (1 + 2 + 3 + 4) * 64 * 64;
  const ThunkCost &f = r.thunks[2];
  EXPECT_EQ(f.kind, "attention");
  EXPECT_DOUBLE_EQ(f.flops, 2.0 * pairs * (D + D));
  EXPECT_EQ(f.bytes, uint64_t(4 * 2 * B * H * T * D + 4 * B * H * T));
  EXPECT_NEAR(f.us,
              d.launchUs + 1e6 * seconds(d, f.flops, tc, d.attentionEfficiency,
                                         double(f.bytes)),
              1e-9);
  // The backward: dK/dV's S, dP, dV and dK (4 products of D) and dQ's S
  // and dP again and dQ (3), over the same tiles.
  const ThunkCost &b = r.thunks[3];
  EXPECT_EQ(b.kind, "attention_grad");
  EXPECT_DOUBLE_EQ(b.flops, 2.0 * pairs * (4 * D + 3 * D));

  const ThunkCost &c = r.thunks[4];
  EXPECT_EQ(c.kind, "copy");
  EXPECT_EQ(c.bytes, uint64_t(2 * 2 * B * H * T * D));

  double total = 0, flops = 0;
  for (const ThunkCost &t : r.thunks) {
    total += t.us;
    flops += t.flops;
  }
  EXPECT_NEAR(r.totalUs, total, 1e-9);
  EXPECT_DOUBLE_EQ(r.flops, flops);
  EXPECT_EQ(r.parameters, k * n + n);
  EXPECT_EQ(r.tokens, 0); // no integer input
  // Model FLOPs of the attention (PaLM's 12 x layers x hidden x sequence
  // per token): the forward thunk's whole T x T scores, causal or not,
  // three times (forward and backward); the gradient thunk adds nothing.
  EXPECT_DOUBLE_EQ(r.attentionModelFlops, 12.0 * (H * D) * T * (B * T));
}

// The packed attention layout (qkv [B,T,3,H,D] -> out [B,T,H,D], lse; its
// gradient qkv, out, lse, dout -> dqkv): the FLOPs of its parameters, the
// bytes of its buffers (one qkv, one dqkv), the same as BHTD's thunks of
// the same shape.
// A kernel whose threads each walk a chain of loads in order (a column
// reduction: 768 threads over 8192 rows) is priced by latency, steps x
// latency / loads in flight per wave of resident threads, when that is
// longer than its bytes; a short chain stays memory-bound.
// A kernel is named after its first node of the graph's own, not a node
// the compiler made ("kiln.constant": an optimizer's constants), unless it
// holds no other.
TEST(PackageRooflineTest, KernelsAreNamedAfterTheGraphsNodes) {
  LoadedPackage p;
  p.target.kind = TargetKind::Cuda;
  uint32_t x = addBuffer(p, "x", PkgDType::F32, {1024});
  uint32_t y = addBuffer(p, "y", PkgDType::F32, {1024});
  for (std::vector<std::string> nodes :
       {std::vector<std::string>{"kiln.constant", "kiln.convert", "relu1",
                                 "conv1.bias"},
        std::vector<std::string>{"kiln.constant", "kiln.convert"}}) {
    PackageKernel kernel;
    kernel.kind = KernelKind::Cuda;
    kernel.name = "fusion" + std::to_string(p.kernels.size());
    kernel.sourceNodes = nodes;
    p.kernels.push_back(kernel);
    addThunk(p, ThunkKind::KernelLaunch, {x}, {y}).kernel =
        uint32_t(p.kernels.size() - 1);
  }
  PackageRooflineResult r = predictPackageRoofline(p, RooflineDevice());
  ASSERT_EQ(r.thunks.size(), 2u);
  EXPECT_EQ(r.thunks[0].name, "relu1 +3");
  EXPECT_EQ(r.thunks[1].name, "kiln.constant +1");
}

TEST(PackageRooflineTest, SerialChainsCostLatency) {
  LoadedPackage p;
  p.target.kind = TargetKind::Cuda;
  uint32_t x = addBuffer(p, "x", PkgDType::BF16, {8192, 768});
  uint32_t y = addBuffer(p, "fusion1.0", PkgDType::F32, {768});
  uint32_t z = addBuffer(p, "fusion2.0", PkgDType::F32, {64, 768});
  PackageKernel column;
  column.kind = KernelKind::Cuda;
  column.name = "fusion1";
  column.serialSteps = 8192;
  column.serialThreads = 768;
  PackageKernel partials = column;
  partials.name = "fusion2";
  partials.serialSteps = 128;
  partials.serialThreads = 64 * 768;
  p.kernels = {column, partials};
  addThunk(p, ThunkKind::KernelLaunch, {x}, {y}).kernel = 0;
  addThunk(p, ThunkKind::KernelLaunch, {x}, {z}).kernel = 1;

  RooflineDevice d;
  PackageRooflineResult r = predictPackageRoofline(p, d);
  ASSERT_EQ(r.thunks.size(), 2u);
  const ThunkCost &slow = r.thunks[0];
  EXPECT_TRUE(slow.latencyBound);
  EXPECT_FALSE(slow.computeBound);
  EXPECT_NEAR(slow.us, d.launchUs + 8192 * d.latencyUs / d.loadsInFlight, 1e-6);
  // 128 steps: 19.2 us against the 12.6 MB read at 3.84 TB/s, 3.3 us.
  const ThunkCost &split = r.thunks[1];
  EXPECT_TRUE(split.latencyBound);
  EXPECT_NEAR(split.us, d.launchUs + 128 * d.latencyUs / d.loadsInFlight, 1e-6);
  // More threads than the GPU holds at once run in waves.
  p.kernels[1].serialThreads = uint64_t(3) * d.multiprocessors *
                                   d.threadsPerMultiprocessor;
  r = predictPackageRoofline(p, d);
  EXPECT_NEAR(r.thunks[1].us, d.launchUs + 3 * 128 * d.latencyUs / d.loadsInFlight,
              1e-6);
  // A short chain: the bytes decide.
  p.kernels[1].serialSteps = 4;
  p.kernels[1].serialThreads = 64 * 768;
  r = predictPackageRoofline(p, d);
  EXPECT_FALSE(r.thunks[1].latencyBound);
  double bytes = double(p.buffers[x].size + p.buffers[z].size);
  EXPECT_NEAR(r.thunks[1].us,
              d.launchUs + 1e6 * bytes / (d.bandwidthGBps * 1e9 * d.memoryEfficiency),
              1e-6);
  // The table says which bound.
  std::string table;
  llvm::raw_string_ostream os(table);
  printPackageRoofline(predictPackageRoofline(p, d), d, 10, os);
  EXPECT_NE(table.find("| latency |"), std::string::npos) << table;
  EXPECT_NE(table.find("1 latency-bound"), std::string::npos) << table;
}

// A gather reads only the table rows its indices name (the kernel's
// readBytes, set by kiln compile --target=cuda): the embedding lookup's
// 8192 rows of a 50304-row f32 table, not the table.
TEST(PackageRooflineTest, GatherReadsItsRowsNotItsTable) {
  LoadedPackage p;
  p.target.kind = TargetKind::Cuda;
  uint32_t table = addBuffer(p, "wte", PkgDType::F32, {50304, 768});
  uint32_t ids = addBuffer(p, "tokens", PkgDType::I32, {8, 1024});
  uint32_t rows = addBuffer(p, "gather0.0", PkgDType::F32, {8, 1024, 768});
  PackageKernel gather;
  gather.kind = KernelKind::Cuda;
  gather.name = "gather0";
  uint64_t read = uint64_t(8192) * 768 * 4 + 8192 * 4;
  gather.readBytes = read;
  p.kernels = {gather};
  addThunk(p, ThunkKind::KernelLaunch, {table, ids}, {rows}).kernel = 0;
  RooflineDevice d;
  PackageRooflineResult r = predictPackageRoofline(p, d);
  ASSERT_EQ(r.thunks.size(), 1u);
  EXPECT_EQ(r.thunks[0].bytes, read + p.buffers[rows].size);
  // Without it (a package before 1.3, or a kernel that reads its operands
  // whole) every operand counts whole.
  p.kernels[0].readBytes = 0;
  r = predictPackageRoofline(p, d);
  EXPECT_EQ(r.thunks[0].bytes,
            p.buffers[table].size + p.buffers[ids].size + p.buffers[rows].size);
}

TEST(PackageRooflineTest, PackedAttentionCosts) {
  LoadedPackage p;
  p.target.kind = TargetKind::Cuda;
  const int64_t B = 4, H = 12, T = 1024, D = 64;
  addPackedAttention(p, "attention3", B, H, T, D);
  RooflineDevice d;
  PackageRooflineResult r = predictPackageRoofline(p, d);
  ASSERT_EQ(r.thunks.size(), 2u);
  const double tc = d.bf16Tflops * 1e12;
  // 16 x 16 tiles of 64 x 64 at T = 1024, 136 on or below the diagonal.
  const double pairs = double(B * H) * 136 * 64 * 64, n = double(B * T * H * D);
  const ThunkCost &f = r.thunks[0];
  EXPECT_EQ(f.kind, "attention");
  EXPECT_EQ(f.detail, "bf16 B4 H12 T1024x1024 D64 causal packed");
  EXPECT_DOUBLE_EQ(f.flops, 2.0 * pairs * (D + D));
  // qkv (3 n) and out (n) in bf16, lse in f32.
  EXPECT_EQ(f.bytes, uint64_t(2 * (3 * n + n) + 4 * B * H * T));
  EXPECT_NEAR(f.us,
              d.launchUs + 1e6 * seconds(d, f.flops, tc, d.attentionEfficiency,
                                         double(f.bytes)),
              1e-9);
  const ThunkCost &b = r.thunks[1];
  EXPECT_EQ(b.kind, "attention_grad");
  EXPECT_DOUBLE_EQ(b.flops, 2.0 * pairs * (4 * D + 3 * D));
  // Reads qkv, out, dout and lse; writes dqkv.
  EXPECT_EQ(b.bytes, uint64_t(2 * (3 * n + n + n + 3 * n) + 4 * B * H * T));
  EXPECT_TRUE(b.computeBound);
}

// Attention counts what the kernels multiply: their whole tiles (the
// last ones padded past the lengths), the backward's dQ recomputing S and
// dP. Tiles counted by hand for sm_90's kernels: bf16 at head dim 64 on
// 64 x 64, f32 on the CUDA cores at 32 x 16; a head dim the kernels do not
// take counts its visible pairs exactly.
TEST(PackageRooflineTest, AttentionCountsTheKernelsTiles) {
  struct Case {
    PkgDType dtype;
    int64_t t, d;
    bool causal;
    double pairs; // per head, forward and backward alike
  } cases[] = {
      // T = 100: 2 x 2 tiles, causal 1 + 2.
      {PkgDType::BF16, 100, 64, true, 3.0 * 64 * 64},
      {PkgDType::BF16, 100, 64, false, 4.0 * 64 * 64},
      // 4 query tiles of 32 x 7 key tiles of 16.
      {PkgDType::F32, 100, 24, false, 28.0 * 32 * 16},
      // Query tile i sees key tiles up to row 32 i + 31: 2, 4, 6, 7.
      {PkgDType::F32, 100, 24, true, 19.0 * 32 * 16},
      // No kernels past head dim 256: T (T + 1) / 2 pairs.
      {PkgDType::BF16, 100, 320, true, 5050.0},
  };
  for (const Case &c : cases) {
    LoadedPackage p;
    p.target.kind = TargetKind::Cuda;
    const int64_t B = 2, H = 3;
    uint32_t q = addBuffer(p, "q", c.dtype, {B, H, c.t, c.d});
    uint32_t o = addBuffer(p, "attention1.0", c.dtype, {B, H, c.t, c.d});
    uint32_t lse = addBuffer(p, "attention1.1", PkgDType::F32, {B, H, c.t});
    addAttention(p, {B, H, c.t, c.t, c.d, c.d, 0.125, c.causal}, q, q, q, o,
                 lse, o, q, q, q);
    PackageRooflineResult r = predictPackageRoofline(p, RooflineDevice());
    ASSERT_EQ(r.thunks.size(), 2u);
    const double pairs = double(B * H) * c.pairs, d = double(c.d);
    EXPECT_DOUBLE_EQ(r.thunks[0].flops, 2.0 * pairs * 2 * d)
        << pkgDTypeName(c.dtype) << " T" << c.t << " D" << c.d;
    EXPECT_DOUBLE_EQ(r.thunks[1].flops, 2.0 * pairs * 7 * d)
        << pkgDTypeName(c.dtype) << " T" << c.t << " D" << c.d;
  }
}

// --assume=attention-dq=stored: the backward as its "ds" variant where
// the runtime offers one (bf16, head dim 64): dK/dV's four products and
// the dS tiles written, then dQ's one product over the tiles read, each
// kernel at the longer of its products and its bytes. f32 has no such
// variant: priced as before.
TEST(PackageRooflineTest, StoredScoresPricesTheDsBackward) {
  for (PkgDType dtype : {PkgDType::BF16, PkgDType::F32}) {
    LoadedPackage p;
    p.target.kind = TargetKind::Cuda;
    const int64_t B = 2, H = 4, T = 256, D = 64;
    uint32_t q = addBuffer(p, "q", dtype, {B, H, T, D});
    uint32_t o = addBuffer(p, "o", dtype, {B, H, T, D});
    uint32_t lse = addBuffer(p, "lse", PkgDType::F32, {B, H, T});
    addAttention(p, {B, H, T, T, D, D, 0.125, true}, q, q, q, o, lse, o, q, q,
                 q, {true});
    RooflineDevice recompute, stored;
    stored.attentionStoredScores = true;
    const ThunkCost plain = predictPackageRoofline(p, recompute).thunks.at(0);
    const ThunkCost ds = predictPackageRoofline(p, stored).thunks.at(0);
    if (dtype == PkgDType::F32) {
      EXPECT_DOUBLE_EQ(ds.flops, plain.flops);
      EXPECT_EQ(ds.bytes, plain.bytes);
      EXPECT_DOUBLE_EQ(ds.us, plain.us);
      continue;
    }
    // 1 + 2 + 3 + 4 tiles of 64 x 64 a head; dS in bf16.
    const double pairs = double(B * H) * 10 * 64 * 64;
    const double scores = double(B * H) * 10 * 64 * 64 * 2;
    EXPECT_DOUBLE_EQ(ds.flops, 2.0 * pairs * (4 * D + D));
    EXPECT_EQ(ds.bytes, plain.bytes + uint64_t(2 * scores));
    const double tc = stored.bf16Tflops * 1e12 * stored.attentionEfficiency;
    const double bw = stored.bandwidthGBps * 1e9 * stored.memoryEfficiency;
    double dkdv = std::max(2.0 * pairs * 4 * D / tc, (plain.bytes + scores) / bw);
    double dq = std::max(2.0 * pairs * D / tc, scores / bw);
    EXPECT_NEAR(ds.us, stored.launchUs + 1e6 * (dkdv + dq), 1e-9);
    EXPECT_LT(ds.us, plain.us);
  }
}

TEST(PackageRooflineTest, F32GemmsUseTheCudaCorePeakUnlessTf32) {
  LoadedPackage p;
  uint32_t a = addBuffer(p, "a", PkgDType::F32, {512, 512});
  uint32_t out = addBuffer(p, "dot0.0", PkgDType::F32, {512, 512});
  PackageThunk &gemm = addThunk(p, ThunkKind::LibraryCall, {a, a}, {out});
  gemm.hasGemm = true;
  gemm.gemm.m = gemm.gemm.n = gemm.gemm.k = 512;
  gemm.gemm.beta = 1.0; // accumulates: reads its output too
  RooflineDevice d;
  PackageRooflineResult r = predictPackageRoofline(p, d);
  ASSERT_EQ(r.thunks.size(), 1u);
  EXPECT_EQ(r.thunks[0].bytes, uint64_t(3 * 512 * 512 * 4));
  double flops = 2.0 * 512 * 512 * 512;
  EXPECT_NEAR(r.thunks[0].us,
              d.launchUs + 1e6 * seconds(d, flops, d.f32Tflops * 1e12,
                                         d.gemmEfficiency, 3.0 * 512 * 512 * 4),
              1e-9);
  d.allowTf32 = true;
  PackageRooflineResult tf32 = predictPackageRoofline(p, d);
  EXPECT_NEAR(tf32.thunks[0].us,
              d.launchUs + 1e6 * seconds(d, flops, d.tf32Tflops * 1e12,
                                         d.gemmEfficiency, 3.0 * 512 * 512 * 4),
              1e-9);
  EXPECT_LT(tf32.totalUs, r.totalUs);
}

// A residual GEMM (cuBLASLt's C, beta 1) reads C, an operand, and writes
// its result: the result is not read as well.
TEST(PackageRooflineTest, ResidualGemmReadsCNotItsResult) {
  LoadedPackage p;
  const int64_t m = 256, n = 128, k = 64;
  uint32_t a = addBuffer(p, "a", PkgDType::BF16, {m, k});
  uint32_t w = addBuffer(p, "w", PkgDType::BF16, {k, n});
  uint32_t bias = addBuffer(p, "b", PkgDType::BF16, {n});
  uint32_t c = addBuffer(p, "c", PkgDType::BF16, {m, n});
  uint32_t out = addBuffer(p, "fusion0.0", PkgDType::BF16, {m, n});
  PackageThunk &gemm =
      addThunk(p, ThunkKind::LibraryCall, {a, w, bias, c}, {out});
  gemm.hasGemm = true;
  gemm.gemm.m = m, gemm.gemm.n = n, gemm.gemm.k = k;
  gemm.gemm.beta = 1.0;
  gemm.gemm.epilogue = PkgGemmEpilogue::BiasResidual;
  PackageRooflineResult r = predictPackageRoofline(p);
  ASSERT_EQ(r.thunks.size(), 1u);
  EXPECT_EQ(r.thunks[0].kind, "gemm+bias_residual");
  EXPECT_EQ(r.thunks[0].bytes, uint64_t(2 * (m * k + k * n + n + 2 * m * n)));
}

// Updates planned outside their input's buffer are copied over it after
// the step; those planned in place cost nothing.
TEST(PackageRooflineTest, UpdatesNotInPlaceAreCopies) {
  LoadedPackage p;
  uint32_t w = addBuffer(p, "w", PkgDType::F32, {256, 256}, PkgRole::Parameter);
  uint32_t b = addBuffer(p, "b", PkgDType::F32, {256}, PkgRole::Parameter);
  uint32_t newW = addBuffer(p, "fusion3.0", PkgDType::F32, {256, 256});
  uint32_t newB = addBuffer(p, "fusion3.1", PkgDType::F32, {256});
  p.buffers[w].offset = 0;
  p.buffers[newW].offset = 1 << 20;
  p.buffers[b].offset = 4096;
  p.buffers[newB].offset = 4096; // planned in place
  for (auto [name, buffer] : {std::pair<const char *, uint32_t>{"w", w}, {"b", b}}) {
    SignatureEntry in;
    in.name = name;
    in.role = PkgRole::Parameter;
    in.buffer = buffer;
    p.inputs.push_back(in);
  }
  p.buffers[newW].updates = 0;
  p.buffers[newB].updates = 1;
  for (uint32_t buffer : {newW, newB}) {
    SignatureEntry out;
    out.name = p.buffers[buffer].name;
    out.buffer = buffer;
    p.outputs.push_back(out);
  }
  addThunk(p, ThunkKind::KernelLaunch, {w, b}, {newW, newB});
  RooflineDevice d;
  PackageRooflineResult r = predictPackageRoofline(p, d);
  ASSERT_EQ(r.thunks.size(), 2u);
  const ThunkCost &copy = r.thunks[1];
  EXPECT_EQ(copy.kind, "update_copy");
  EXPECT_EQ(copy.name, "fusion3.0");
  EXPECT_EQ(copy.bytes, uint64_t(2 * 256 * 256 * 4));
  EXPECT_NEAR(copy.us, d.launchUs + 1e6 * 2.0 * 256 * 256 * 4 /
                                        (d.bandwidthGBps * 1e9 * d.memoryEfficiency),
              1e-9);
  EXPECT_NEAR(r.totalUs, r.thunks[0].us + copy.us, 1e-9);
}

// kiln-cuda-run --profile's CSV fills the thunks' measured times; the
// summary adds them up beside the prediction for the same thunks.
TEST(PackageRooflineTest, MeasuredProfileBesideThePrediction) {
  LoadedPackage p;
  uint32_t a = addBuffer(p, "a", PkgDType::BF16, {1024, 1024});
  uint32_t b = addBuffer(p, "fusion0.0", PkgDType::BF16, {1024, 1024});
  uint32_t c = addBuffer(p, "fusion1.0", PkgDType::BF16, {1024, 1024});
  addThunk(p, ThunkKind::KernelLaunch, {a}, {b}).kernel = -1;
  addThunk(p, ThunkKind::KernelLaunch, {b}, {c}).kernel = -1;
  RooflineDevice d;
  PackageRooflineResult r = predictPackageRoofline(p, d);
  EXPECT_EQ(applyMeasuredProfile(r, "thunk,ms\n1,0.25\n"), "");
  EXPECT_EQ(r.thunks[0].measuredUs, -1);
  EXPECT_DOUBLE_EQ(r.thunks[1].measuredUs, 250);
  std::string text;
  llvm::raw_string_ostream os(text);
  printPackageRoofline(r, d, 10, os);
  std::string expected;
  llvm::raw_string_ostream es(expected);
  es << "measured:         0.25 ms over 1 thunks on the GPU, predicted "
     << llvm::format("%.2f", r.thunks[1].us / 1000)
     << " ms for them (measured / predicted "
     << llvm::format("%.2f", 250 / r.thunks[1].us) << ")";
  EXPECT_NE(text.find(expected), std::string::npos) << text;
  EXPECT_EQ(applyMeasuredProfile(r, "thunk,ms\n2,1\n"),
            "thunk 2: the package has no such thunk (a profile of another "
            "package?)");
  EXPECT_NE(applyMeasuredProfile(r, "thunk,ms\n0,-1\n")
                .find("expected THUNK,MILLISECONDS"),
            std::string::npos);
  EXPECT_EQ(applyMeasuredProfile(r, "thunk,ms\n"), "no thunk times in it");
}

TEST(PackageRooflineTest, TokensAndLayersFoldedInTheSummary) {
  LoadedPackage p;
  uint32_t tokens = addBuffer(p, "tokens", PkgDType::I32, {8, 1024});
  addBuffer(p, "w", PkgDType::F32, {1000, 10}, PkgRole::Parameter);
  SignatureEntry in;
  in.name = "tokens";
  in.role = PkgRole::Input;
  in.dtype = PkgDType::I32;
  in.shape = {8, 1024};
  in.buffer = tokens;
  p.inputs.push_back(in);
  for (int layer = 0; layer < 3; ++layer) {
    PackageKernel k;
    k.kind = KernelKind::Cuda;
    k.name = "fusion" + std::to_string(layer);
    k.sourceNodes = {"blocks." + std::to_string(layer) + ".ln1"};
    p.kernels.push_back(k);
    uint32_t out = addBuffer(p, k.name + ".0", PkgDType::BF16, {8, 1024, 768});
    addThunk(p, ThunkKind::KernelLaunch, {tokens}, {out}).kernel = layer;
  }
  RooflineDevice d;
  PackageRooflineResult r = predictPackageRoofline(p, d);
  EXPECT_EQ(r.tokens, 8 * 1024);
  EXPECT_EQ(r.parameters, 10000);
  std::string text;
  llvm::raw_string_ostream os(text);
  printPackageRoofline(r, d, 10, os);
  // One group for the three layers' kernels, three launches.
  EXPECT_NE(text.find("| kernel | blocks.*.ln1 | 3 |"), std::string::npos)
      << text;
  EXPECT_NE(text.find("tokens/s:"), std::string::npos) << text;
  // No attention: model FLOPs are 6 x parameters x tokens.
  double stepS = r.totalUs * 1e-6, peak = d.bf16Tflops * 1e12;
  std::string mfu;
  llvm::raw_string_ostream(mfu)
      << "model FLOPs utilization: "
      << llvm::format("%.1f", 100.0 * 6 * 10000 * 8192 / (stepS * peak))
      << "% (6 x 10000 parameters x tokens)\n";
  EXPECT_NE(text.find(mfu), std::string::npos) << text;
  std::string csv;
  llvm::raw_string_ostream cs(csv);
  printPackageRooflineCsv(r, cs);
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 4) << csv;
  EXPECT_EQ(csv.rfind("thunk,kind,name,detail,flops,bytes,us,bound\n", 0), 0u);
}

// A language model with fused attention: model FLOPs utilization by
// bench/gpu/peers.py's formula (which check.sh gives the measured step),
// 6 x parameters x tokens plus the attention's 12 x layers x hidden x
// sequence x tokens, and by 6 N tokens alone.
TEST(PackageRooflineTest, ModelFlopsCountTheAttentionAsPeersDo) {
  LoadedPackage p;
  p.target.kind = TargetKind::Cuda;
  const int64_t B = 2, H = 4, T = 128, D = 32, layers = 2;
  uint32_t tokens = addBuffer(p, "tokens", PkgDType::I32, {B, T});
  addBuffer(p, "w", PkgDType::F32, {1000, 10}, PkgRole::Parameter);
  SignatureEntry in;
  in.name = "tokens";
  in.role = PkgRole::Input;
  in.dtype = PkgDType::I32;
  in.shape = {B, T};
  in.buffer = tokens;
  p.inputs.push_back(in);
  for (int layer = 0; layer < layers; ++layer)
    addPackedAttention(p, "attention" + std::to_string(layer), B, H, T, D);
  RooflineDevice d;
  PackageRooflineResult r = predictPackageRoofline(p, d);
  const double n = B * T; // tokens
  const double attention = 12.0 * layers * (H * D) * T * n;
  EXPECT_DOUBLE_EQ(r.attentionModelFlops, attention);
  std::string text;
  llvm::raw_string_ostream os(text);
  printPackageRoofline(r, d, 10, os);
  double stepS = r.totalUs * 1e-6, peak = d.bf16Tflops * 1e12;
  std::string mfu;
  llvm::raw_string_ostream(mfu)
      << "model FLOPs utilization: "
      << llvm::format("%.1f", 100.0 * (6 * 10000 * n + attention) / (stepS * peak))
      << "% (6 x 10000 parameters x tokens + 100.7 MFLOP of attention, 12 x "
         "layers x hidden x sequence x tokens: bench/gpu/peers.py's formula); "
      << llvm::format("%.1f", 100.0 * 6 * 10000 * n / (stepS * peak))
      << "% by 6 x parameters x tokens alone\n";
  EXPECT_NE(text.find(mfu), std::string::npos) << mfu << "\n" << text;
}

} // namespace
} // namespace kiln::cli
