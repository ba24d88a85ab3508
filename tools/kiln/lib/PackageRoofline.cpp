//===- PackageRoofline.cpp - what a compiled step costs on a GPU ----------===//

#include "tools/kiln/lib/PackageRoofline.h"

#include "tools/kiln/lib/StepSignature.h"

#include "runtime/metrics/ThunkProfile.h"
#include "runtime/package/PackageData.h"

#include "runtime/cuda/CudaAttention.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Format.h"

#include <algorithm>
#include <map>
#include <set>

namespace kiln::cli {

using namespace kiln::runtime;

namespace {

bool isInteger(PkgDType dtype) {
  return dtype == PkgDType::I64 || dtype == PkgDType::I32 ||
         dtype == PkgDType::I8 || dtype == PkgDType::I1;
}

// What the fused attention's kernels multiply on |d| (the runtime's
// default configuration for the shape, runtime/cuda/CudaAttention.h), 2
// FLOPs per multiply-add. The forward: S = Q K^T and O += P V over its
// tiles. The backward: dK/dV's kernel S, dP = dO V^T, dV += P^T dO and
// dK += dS^T Q over its tiles, and dQ's kernel S and dP again (dQ has a
// kernel of its own, summed without atomics) and dQ += dS K over its: 4
// products of the head dim and 3 of the value dim, where a backward with
// atomics (FlashAttention-2's) does 3 and 2. A causal mask skips whole
// tiles only. A shape the runtime has no kernels for counts its visible
// pairs exactly.
//
// With RooflineDevice::attentionStoredScores, a backward the runtime
// offers the "ds" variant for is priced as that variant: dQ multiplies
// only dQ += dS K, over the dS tiles dK/dV stores; |dqFlops| is then dQ's
// share and |scoresBytes| the tiles' bytes (each written once and read
// once), else both 0.
struct AttentionWork {
  double flops = 0, dqFlops = 0, scoresBytes = 0;
};

AttentionWork attentionKernelWork(const AttentionParams &a, bool grad,
                                  PkgDType dtype, const RooflineDevice &d) {
  AttentionWork w;
  const double bh = double(a.batch) * double(a.heads);
  const double dk = double(a.headDim), dv = double(a.valueDim);
  StatusOr<cuda::AttentionConfig> config =
      cuda::attentionConfig(dtype, a.headDim, a.valueDim, d.smArch);
  if (!config.isOk()) {
    // Tiles of one pair: the visible pairs (key j <= query i when causal).
    double pairs = bh * cuda::attentionTilePairs({1, 1}, a.qLen, a.kvLen, a.causal);
    w.flops = 2.0 * pairs * (grad ? 4.0 * dk + 3.0 * dv : dk + dv);
    return w;
  }
  cuda::AttentionConfig c = config.value();
  if (grad && d.attentionStoredScores) {
    StatusOr<std::vector<cuda::AttentionConfig>> variants =
        cuda::attentionConfigVariants(dtype, a.headDim, a.valueDim, d.smArch);
    if (variants.isOk())
      for (const cuda::AttentionConfig &v : variants.value())
        if (v.storedScores && cuda::attentionVariantFits(v, a, dtype)) {
          c = v;
          w.scoresBytes = double(cuda::attentionStoredScoresBytes(v, a, dtype));
        }
  }
  cuda::AttentionTiles tiles = cuda::attentionTiles(c);
  auto pairs = [&](cuda::AttentionTile tile) {
    return bh * cuda::attentionTilePairs(tile, a.qLen, a.kvLen, a.causal);
  };
  if (!grad) {
    w.flops = 2.0 * pairs(tiles.forward) * (dk + dv);
    return w;
  }
  double dq = 2.0 * pairs(tiles.dq) * (c.storedScores ? dk : 2.0 * dk + dv);
  w.flops = 2.0 * pairs(tiles.dkdv) * (2.0 * dk + 2.0 * dv) + dq;
  if (c.storedScores)
    w.dqFlops = dq;
  return w;
}

// Tensor-core (or CUDA-core) peak in FLOP/s for a GEMM in |dtype|.
double gemmPeak(PkgDType dtype, const RooflineDevice &d) {
  switch (dtype) {
  case PkgDType::BF16:
  case PkgDType::F16:
    return d.bf16Tflops * 1e12;
  case PkgDType::F32:
    return (d.allowTf32 ? d.tf32Tflops : d.f32Tflops) * 1e12;
  default:
    return d.f64Tflops * 1e12;
  }
}

// "blocks.11.mlp.fc" -> "blocks.*.mlp.fc": a layer's thunks and the same
// thunks of every other layer fall into one group.
std::string foldLayers(llvm::StringRef name) {
  // "blocks.3.mlp.fc +2": the node, then what the kernel fuses besides.
  auto [node, rest] = name.split(' ');
  if (!rest.empty())
    return foldLayers(node) + " " + rest.str();
  llvm::SmallVector<llvm::StringRef> parts;
  name.split(parts, '.');
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i)
      out += '.';
    bool digits = !parts[i].empty() &&
                  llvm::all_of(parts[i], [](char c) { return llvm::isDigit(c); });
    out += digits ? std::string("*") : parts[i].str();
  }
  return out;
}

std::string humanBytes(double bytes) {
  std::string s;
  llvm::raw_string_ostream(s) << llvm::format("%.2f GB", bytes / 1e9);
  return s;
}

// |flops| in the largest unit that keeps a digit before the point.
std::string humanFlops(double flops) {
  static const char *units[] = {"FLOP", "kFLOP", "MFLOP", "GFLOP", "TFLOP"};
  int u = 0;
  while (u < 4 && flops >= 1000.0) {
    flops /= 1000.0;
    ++u;
  }
  std::string s;
  llvm::raw_string_ostream(s) << llvm::format("%.1f ", flops) << units[u];
  return s;
}

} // namespace

std::string libraryCallKind(const PackageThunk &t) {
  if (t.hasGemm)
    return t.gemm.epilogue == PkgGemmEpilogue::None
               ? "gemm"
               : std::string("gemm+") + pkgGemmEpilogueName(t.gemm.epilogue);
  return pkgLibraryKindName(t.library);
}

int64_t parameterCount(const LoadedPackage &p) {
  int64_t n = 0;
  for (const PackageBuffer &b : p.buffers)
    if (b.role == PkgRole::Parameter)
      n += runtime::elementCount(b.shape);
  return n;
}

PackageRooflineResult predictPackageRoofline(const LoadedPackage &p,
                                             const RooflineDevice &d) {
  PackageRooflineResult result;
  double forwardAttention = 0, gradAttention = 0;
  const double bandwidth = d.bandwidthGBps * 1e9 * d.memoryEfficiency;
  auto bufferBytes = [&](uint32_t b) -> uint64_t {
    return b < p.buffers.size() ? p.buffers[b].size : 0;
  };
  auto bufferName = [&](uint32_t b) -> std::string {
    return b < p.buffers.size() ? p.buffers[b].name : std::string();
  };
  // Kernels by name, for the source nodes of a library call whose result
  // buffer is named after its fusion ("fusion10.dot" -> kernel "fusion10").
  std::map<std::string, const PackageKernel *> kernelsByName;
  for (const PackageKernel &k : p.kernels)
    kernelsByName[k.name] = &k;
  // The kernel's first graph node, and how many other nodes it fuses. A
  // node the compiler made (named after its op, "kiln.constant": an
  // optimizer's constants, a pass's converts) names the kernel only when
  // it holds no node of the graph's own.
  auto sourceName = [](const PackageKernel &k) {
    if (k.sourceNodes.empty())
      return k.name;
    auto named = llvm::find_if(k.sourceNodes, [](const std::string &n) {
      return !llvm::StringRef(n).starts_with("kiln.");
    });
    std::string name =
        named != k.sourceNodes.end() ? *named : k.sourceNodes.front();
    std::set<std::string> others(k.sourceNodes.begin(), k.sourceNodes.end());
    others.erase(name);
    if (!others.empty())
      name += " +" + std::to_string(others.size());
    return name;
  };

  for (size_t i = 0; i < p.thunks.size(); ++i) {
    const PackageThunk &t = p.thunks[i];
    if (t.kind == ThunkKind::Collective) {
      ++result.collectives;
      continue;
    }
    ThunkCost cost;
    cost.thunk = i;
    std::set<uint32_t> read(t.operands.begin(), t.operands.end());
    for (uint32_t b : read)
      cost.bytes += bufferBytes(b);
    for (uint32_t b : t.results)
      cost.bytes += bufferBytes(b);
    double peak = 0, efficiency = 1.0, serialS = 0;
    AttentionWork attention; // a fused attention's

    PkgDType dtype = !t.results.empty() && t.results[0] < p.buffers.size()
                         ? p.buffers[t.results[0]].dtype
                         : PkgDType::F32;
    std::string resultName = t.results.empty() ? "" : bufferName(t.results[0]);
    llvm::StringRef owner = llvm::StringRef(resultName).split('.').first;
    auto ownerKernel = kernelsByName.find(owner.str());
    cost.name = ownerKernel != kernelsByName.end()
                    ? sourceName(*ownerKernel->second)
                    : resultName;
    std::string detail;
    llvm::raw_string_ostream os(detail);
    switch (t.kind) {
    case ThunkKind::KernelLaunch: {
      // Each operand once is what a generated kernel reads from HBM: a
      // row it reads in several passes (a softmax's max, sum and outputs)
      // is in its row cache in shared memory after the first
      // (sharedMemoryBytes; codegen/cuda/CudaEmitter.h).
      cost.kind = "kernel";
      if (t.kernel >= 0 && size_t(t.kernel) < p.kernels.size()) {
        const PackageKernel &k = p.kernels[t.kernel];
        cost.name = sourceName(k);
        os << k.name;
        // A gather reads only the table rows its indices name.
        if (k.readBytes > 0) {
          cost.bytes = k.readBytes;
          for (uint32_t b : t.results)
            cost.bytes += bufferBytes(b);
        }
        // Threads that each load a long chain in order wait on latency.
        if (k.serialSteps > 0) {
          double resident = double(std::max<int64_t>(d.multiprocessors, 1)) *
                            double(std::max<int64_t>(d.threadsPerMultiprocessor, 1));
          double waves = std::ceil(double(std::max<uint64_t>(k.serialThreads, 1)) /
                                   resident);
          serialS = double(k.serialSteps) * d.latencyUs * 1e-6 /
                    std::max(d.loadsInFlight, 1.0) * waves;
        }
      }
      break;
    }
    case ThunkKind::Copy:
      cost.kind = "copy";
      os << cost.bytes / 2 << " bytes";
      break;
    case ThunkKind::LibraryCall:
      cost.kind = libraryCallKind(t);
      if (t.hasGemm) {
        const GemmParams &g = t.gemm;
        cost.flops = 2.0 * double(g.m) * double(g.n) * double(g.k) *
                     double(std::max<int64_t>(g.batch, 1));
        // A GEMM that accumulates into its output reads it too (with a
        // residual epilogue, beta scales C, an operand already counted).
        if (g.beta != 0.0 && !pkgGemmEpilogueBuffers(g.epilogue).c)
          for (uint32_t b : t.results)
            if (!read.count(b))
              cost.bytes += bufferBytes(b);
        peak = gemmPeak(dtype, d);
        efficiency = d.gemmEfficiency;
        os << pkgDTypeName(dtype) << " " << g.m << "x" << g.n << "x" << g.k;
        if (g.batch > 1)
          os << " batch " << g.batch;
      } else if (t.hasAttention) {
        const AttentionParams &a = t.attention;
        bool grad = t.library == LibraryKind::AttentionGrad;
        // The attention's dtype is its inputs' (the lse is f32).
        if (!t.operands.empty() && t.operands[0] < p.buffers.size())
          dtype = p.buffers[t.operands[0]].dtype;
        attention = attentionKernelWork(a, grad, dtype, d);
        cost.flops = attention.flops;
        cost.bytes += uint64_t(2 * attention.scoresBytes);
        // Counted once per attention of the model: at its gradient, since
        // --remat=full runs the forward twice (at the forward when no
        // thunk is a gradient).
        (grad ? gradAttention : forwardAttention) +=
            3.0 * 2.0 * double(a.batch) * double(a.heads) * double(a.qLen) *
            double(a.kvLen) * double(a.headDim + a.valueDim);
        peak = gemmPeak(dtype, d);
        efficiency = d.attentionEfficiency;
        // Either layout: the FLOPs are the parameters'; the bytes the
        // buffers' (packed: one qkv buffer for q, k and v, one dqkv).
        os << pkgDTypeName(dtype) << " B" << a.batch << " H" << a.heads << " T"
           << a.qLen << "x" << a.kvLen << " D" << a.headDim
           << (a.causal ? " causal" : "")
           << (a.layout == AttentionLayout::PackedBTHD ? " packed" : "");
      } else if (t.hasConv) {
        const ConvParams &c = t.conv;
        int64_t perOutput = c.filterShape.size() == 4
                                ? c.filterShape[1] * c.filterShape[2] *
                                      c.filterShape[3]
                                : 0;
        cost.flops = 2.0 * double(runtime::elementCount(c.outputShape)) *
                     double(perOutput);
        if (!t.operands.empty() && t.operands[0] < p.buffers.size())
          dtype = p.buffers[t.operands[0]].dtype;
        peak = gemmPeak(dtype, d);
        efficiency = d.gemmEfficiency;
        os << pkgDTypeName(dtype) << " out";
        for (int64_t v : c.outputShape)
          os << " " << v;
      }
      break;
    case ThunkKind::Collective:
      break;
    }
    cost.detail = os.str();
    double computeS = peak > 0 ? cost.flops / (peak * efficiency) : 0.0;
    double memoryS = double(cost.bytes) / bandwidth;
    cost.latencyBound = serialS > std::max(computeS, memoryS);
    if (attention.scoresBytes > 0) {
      // The "ds" backward: dK/dV (and D_i's kernel) with the thunk's own
      // bytes and the dS tiles written, then dQ reading the tiles.
      double dqComputeS = attention.dqFlops / (peak * efficiency);
      double scoresS = attention.scoresBytes / bandwidth;
      double dkdvS = std::max(computeS - dqComputeS, memoryS - scoresS);
      cost.us = d.launchUs + 1e6 * (dkdvS + std::max(dqComputeS, scoresS));
      cost.computeBound = computeS - dqComputeS >= memoryS - scoresS &&
                          dqComputeS >= scoresS;
    } else {
      cost.us = d.launchUs + 1e6 * std::max({computeS, memoryS, serialS});
      cost.computeBound = computeS > memoryS && computeS >= serialS;
    }
    result.totalUs += cost.us;
    result.flops += cost.flops;
    result.bytes += cost.bytes;
    result.thunks.push_back(std::move(cost));
  }

  // An output that updates an input but was planned in another buffer is
  // copied over the input after the step (CudaExecutable's update copies).
  for (const PkgUpdateCopy &u : pkgUpdateCopies(p)) {
    ThunkCost cost;
    cost.thunk = p.thunks.size();
    cost.kind = "update_copy";
    cost.name = p.buffers[u.from].name;
    cost.detail = std::to_string(u.bytes) + " bytes";
    cost.bytes = 2 * u.bytes;
    cost.us = d.launchUs + 1e6 * double(cost.bytes) / bandwidth;
    result.totalUs += cost.us;
    result.bytes += cost.bytes;
    result.thunks.push_back(std::move(cost));
  }

  result.attentionModelFlops = gradAttention > 0 ? gradAttention : forwardAttention;
  result.parameters = parameterCount(p);
  int64_t integerInputs = 0, tokens = 0;
  for (const SignatureEntry &e : p.inputs)
    if (e.role == PkgRole::Input && isInteger(e.dtype)) {
      ++integerInputs;
      tokens = runtime::elementCount(e.shape);
    }
  bool otherInputs = llvm::any_of(p.inputs, [](const SignatureEntry &e) {
    return e.role == PkgRole::Input && !isInteger(e.dtype);
  });
  result.tokens = integerInputs == 1 && !otherInputs ? tokens : 0;
  return result;
}

namespace {
const char *boundName(bool compute, bool latency) {
  return latency ? "latency" : compute ? "compute" : "memory";
}
} // namespace

void printPackageRoofline(const PackageRooflineResult &r,
                          const RooflineDevice &d, size_t top,
                          llvm::raw_ostream &os) {
  double peak = d.bf16Tflops * 1e12;
  double stepS = r.totalUs * 1e-6;
  int64_t bound = llvm::count_if(
      r.thunks, [](const ThunkCost &c) { return c.computeBound; });
  int64_t latencyBound = llvm::count_if(
      r.thunks, [](const ThunkCost &c) { return c.latencyBound; });
  os << "roofline on one " << d.name << " (PREDICTED, not measured): "
     << llvm::format("%.0f", d.bf16Tflops) << " TFLOP/s bf16 x "
     << llvm::format("%.2f", d.gemmEfficiency) << " for GEMMs, x "
     << llvm::format("%.2f", d.attentionEfficiency) << " for attention"
     << (d.attentionStoredScores ? " (dQ from stored dS where offered)" : "")
     << ", "
     << llvm::format("%.1f", d.bandwidthGBps / 1000) << " TB/s x "
     << llvm::format("%.2f", d.memoryEfficiency) << ", "
     << llvm::format("%.1f", d.launchUs) << " us per launch, "
     << llvm::format("%.2f", d.latencyUs) << " us per dependent load ("
     << llvm::format("%.0f", d.loadsInFlight) << " in flight)\n";
  int64_t copies = llvm::count_if(
      r.thunks, [](const ThunkCost &c) { return c.kind == "update_copy"; });
  os << "  thunks:           " << int64_t(r.thunks.size()) - copies << " ("
     << bound << " compute-bound, " << latencyBound << " latency-bound), "
     << copies
     << " update copies after the step; " << r.collectives
     << " collectives not counted\n";
  os << "  work:             " << llvm::format("%.3f", r.flops / 1e12)
     << " TFLOP, " << humanBytes(double(r.bytes)) << " moved\n";
  os << "  step:             " << llvm::format("%.2f", r.totalUs / 1000)
     << " ms (thunks one after another)\n";
  if (stepS > 0)
    os << "  FLOPs utilization: "
       << llvm::format("%.1f", 100.0 * r.flops / (stepS * peak))
       << "% of bf16 peak (the thunks' own FLOPs)\n";
  double measured = 0, predictedThere = 0;
  int64_t measuredThunks = 0;
  for (const ThunkCost &c : r.thunks)
    if (c.measuredUs >= 0) {
      measured += c.measuredUs;
      predictedThere += c.us;
      ++measuredThunks;
    }
  if (measuredThunks)
    os << "  measured:         " << llvm::format("%.2f", measured / 1000)
       << " ms over " << measuredThunks << " thunks on the GPU, predicted "
       << llvm::format("%.2f", predictedThere / 1000)
       << " ms for them (measured / predicted "
       << llvm::format("%.2f", predictedThere > 0 ? measured / predictedThere
                                                  : 0.0)
       << ")\n";
  if (r.tokens > 0 && stepS > 0) {
    // bench/gpu/peers.py's formula, which check.sh gives the measured step
    // too: 6 N tokens, plus the attention's 12 L H T tokens.
    double dense = 6.0 * double(r.parameters) * double(r.tokens);
    double modelFlops = dense + r.attentionModelFlops;
    os << "  tokens/s:         " << llvm::format("%.0f", r.tokens / stepS)
       << " (" << r.tokens << " tokens per step)\n";
    os << "  model FLOPs utilization: "
       << llvm::format("%.1f", 100.0 * modelFlops / (stepS * peak))
       << "% (6 x " << r.parameters << " parameters x tokens";
    if (r.attentionModelFlops > 0)
      os << " + " << humanFlops(r.attentionModelFlops)
         << " of attention, 12 x layers x hidden x sequence x tokens: "
            "bench/gpu/peers.py's formula); "
         << llvm::format("%.1f", 100.0 * dense / (stepS * peak))
         << "% by 6 x parameters x tokens alone\n";
    else
      os << ")\n";
  }

  // Alike thunks (same kind, detail and layer-folded name) summed.
  struct Group {
    std::string kind, name, detail;
    size_t count = 0;
    double flops = 0, us = 0, measuredUs = 0;
    uint64_t bytes = 0;
    bool computeBound = false, latencyBound = false, measured = false;
  };
  std::map<std::string, Group> groups;
  for (const ThunkCost &c : r.thunks) {
    std::string name = foldLayers(c.name);
    // Library calls of one shape are alike whatever their nodes; kernels
    // (their names are unique) are alike when they come from the same
    // nodes of different layers and move the same bytes.
    bool kernel = c.kind == "kernel";
    std::string detail = kernel ? "" : c.detail;
    std::string key = c.kind + "|" +
                      (kernel ? name + "|" + std::to_string(c.bytes) : detail);
    Group &g = groups[key];
    if (g.count && g.name != name)
      name = g.name; // the first member names a group of library calls
    g.kind = c.kind;
    g.name = name;
    g.detail = detail;
    ++g.count;
    g.flops += c.flops;
    g.us += c.us;
    g.bytes += c.bytes;
    g.computeBound = c.computeBound;
    g.latencyBound = c.latencyBound;
    if (c.measuredUs >= 0) {
      g.measured = true;
      g.measuredUs += c.measuredUs;
    }
  }
  std::vector<const Group *> sorted;
  for (auto &[key, g] : groups)
    sorted.push_back(&g);
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const Group *a, const Group *b) { return a->us > b->us; });
  os << "  | thunk | nodes | launches | GFLOP | MB | predicted us | share | bound |"
     << (measuredThunks ? " measured us |" : "") << "\n";
  os << "  |--|--|--|--|--|--|--|--|" << (measuredThunks ? "--|" : "") << "\n";
  for (size_t i = 0; i < sorted.size() && i < top; ++i) {
    const Group &g = *sorted[i];
    os << "  | " << g.kind << (g.detail.empty() ? "" : " " + g.detail) << " | "
       << g.name << " | " << g.count << " | "
       << llvm::format("%.1f", g.flops / 1e9) << " | "
       << llvm::format("%.1f", double(g.bytes) / 1e6) << " | "
       << llvm::format("%.1f", g.us) << " | "
       << llvm::format("%.1f%%", r.totalUs > 0 ? 100.0 * g.us / r.totalUs : 0)
       << " | " << boundName(g.computeBound, g.latencyBound) << " |";
    if (measuredThunks) {
      if (g.measured)
        os << " " << llvm::format("%.1f", g.measuredUs) << " |";
      else
        os << " - |";
    }
    os << "\n";
  }
  if (sorted.size() > top)
    os << "  (" << sorted.size() - top << " more groups; --csv lists every thunk)\n";
}

std::string applyMeasuredProfile(PackageRooflineResult &r,
                                 llvm::StringRef text) {
  std::map<size_t, ThunkCost *> byThunk;
  for (ThunkCost &c : r.thunks)
    if (c.kind != "update_copy")
      byThunk[c.thunk] = &c;
  // kiln-cuda-run's or kiln train's --profile: CSV or a Chrome trace.
  runtime::StatusOr<std::vector<std::pair<size_t, double>>> times =
      runtime::readThunkProfile(text.str());
  if (!times.isOk())
    return times.status().message();
  for (auto [thunk, ms] : times.value()) {
    auto it = byThunk.find(thunk);
    if (it == byThunk.end())
      return "thunk " + std::to_string(thunk) +
             ": the package has no such thunk (a profile of another "
             "package?)";
    it->second->measuredUs = ms * 1000;
  }
  if (times->empty())
    return "no thunk times in it";
  return "";
}

void printPackageRooflineCsv(const PackageRooflineResult &r,
                             llvm::raw_ostream &os) {
  auto quoted = [](llvm::StringRef s) {
    std::string out = "\"";
    for (char c : s)
      out += c == '"' ? std::string("\"\"") : std::string(1, c);
    return out + "\"";
  };
  os << "thunk,kind,name,detail,flops,bytes,us,bound\n";
  for (const ThunkCost &c : r.thunks)
    os << c.thunk << "," << c.kind << "," << quoted(c.name) << ","
       << quoted(c.detail) << "," << llvm::format("%.0f", c.flops) << ","
       << c.bytes << "," << llvm::format("%.3f", c.us) << ","
       << boundName(c.computeBound, c.latencyBound) << "\n";
}

} // namespace kiln::cli
