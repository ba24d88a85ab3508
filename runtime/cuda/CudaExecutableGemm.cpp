//===- CudaExecutableGemm.cpp - a CUDA executable's GEMMs and autotuning --===//
//
// The part of CudaExecutable (CudaExecutable.h) that plans GEMM thunks
// through cuBLASLt (one plan per shape; an epilogue cuBLASLt refuses runs
// as the plain GEMM then CudaEpilogue.h's kernel), queues them, and times
// the candidates of each GEMM and attention shape at load (Autotune.h).
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudaExecutable.h"

#include "runtime/cuda/CudaAttention.h"
#include "runtime/cuda/CudaConv.h"
#include "runtime/cuda/CudaEpilogue.h"

#include <algorithm>
#include <cstdio>
#include <functional>

namespace kiln::runtime::cuda {

Status CudaExecutable::planGemm(size_t index) {
  const PackageThunk &t = package_.thunks[index];
  ThunkPlan &plan = thunks_[index];
  auto fail = [&](const std::string &what) {
    return Status::error(thunkName(index) + ": " + what);
  };
  // The epilogue's extra buffers: a bias operand (Bias*), a C operand
  // (*Residual, last), an aux operand (DGelu, operand 2), a bias-gradient
  // or aux result (result 1);
  // checkPackage has checked the counts.
  PkgGemmEpilogue epilogue = t.hasGemm ? t.gemm.epilogue : PkgGemmEpilogue::None;
  PkgGemmEpilogueBuffers extra = pkgGemmEpilogueBuffers(epilogue);
  if (!t.hasGemm || t.operands.size() != extra.operands() ||
      t.results.size() != extra.results())
    return fail("expected a gemm with " + std::to_string(extra.operands()) +
                " operands (lhs, rhs" + (extra.bias ? ", bias" : "") +
                (extra.c ? ", C" : "") + ") and " +
                std::to_string(extra.results()) + " result(s) for epilogue " +
                pkgGemmEpilogueName(epilogue));
  GemmDesc desc;
  desc.dtype = package_.buffers[t.results[0]].dtype;
  desc.params = t.gemm;
  desc.residual = extra.c;
  desc.epilogue = gemmEpilogueOf(epilogue);
  size_t resultArg = t.operands.size();
  plan.bias = extra.bias ? plan.args[2] : nullptr;
  plan.c = extra.c ? plan.args[resultArg - 1] : nullptr;
  plan.biasGrad = extra.biasGradient ? plan.args[resultArg + 1] : nullptr;
  plan.aux = extra.aux        ? plan.args[resultArg + 1]
             : extra.auxInput ? plan.args[2]
                              : nullptr;
  plan.gemmOut = plan.args[resultArg];
  desc.auxIsOutput = extra.auxInput && plan.aux == plan.gemmOut;
  desc.allowTf32 = options_.allowTf32;
  desc.algorithms = options_.autotune ? std::max(options_.gemmAlgorithms, 1) : 1;
  uint32_t align = 256;
  for (void *p : plan.args)
    align = std::min(align, gemmAlignmentOf(p));
  desc.alignmentBytes = align;
  if (Status s = checkGemmDesc(desc); !s.isOk())
    return fail(s.message());
  const GemmParams &g = t.gemm;
  // What each buffer must hold, [batch, rows, columns] or [n]: the sizes
  // are the package's word, so they are multiplied with overflow checks
  // (a wrapped product would let cuBLASLt run past the buffer).
  auto holds = [&](uint32_t id, const std::vector<int64_t> &shape,
                   const char *what) {
    const PackageBuffer &b = package_.buffers[id];
    if (b.dtype != desc.dtype)
      return fail(std::string(what) + " is " + pkgDTypeName(b.dtype) +
                  ", expected " + pkgDTypeName(desc.dtype));
    std::optional<uint64_t> need = pkgShapeBytes(desc.dtype, shape);
    if (!need)
      return fail(std::string(what) + " would span more than 2^64 bytes "
                  "(its size overflows)");
    if (b.size < *need)
      return fail(std::string(what) + " holds " + std::to_string(b.size) +
                  " bytes, expected " + std::to_string(*need));
    return Status::ok();
  };
  const std::vector<int64_t> outShape{g.batch, g.m, g.n};
  for (Status s : {holds(t.operands[0], {g.batch, g.m, g.k}, "lhs"),
                   holds(t.operands[1], {g.batch, g.k, g.n}, "rhs"),
                   holds(t.results[0], outShape, "result")})
    if (!s.isOk())
      return s;
  if (extra.bias)
    if (Status s = holds(t.operands[2], {g.n}, "bias"); !s.isOk())
      return s;
  if (extra.c)
    if (Status s = holds(t.operands.back(), outShape, "C (residual)");
        !s.isOk())
      return s;
  if (extra.biasGradient)
    if (Status s = holds(t.results[1], {g.n}, "bias gradient"); !s.isOk())
      return s;
  if (extra.aux)
    if (Status s = holds(t.results[1], outShape, "aux"); !s.isOk())
      return s;
  if (extra.auxInput)
    if (Status s = holds(t.operands[2], outShape, "aux"); !s.isOk())
      return s;
  if (!workspace_ && options_.gemmWorkspaceBytes) {
    if (Status s = api_.malloc(&workspace_, options_.gemmWorkspaceBytes);
        !s.isOk())
      return Status::error("the cuBLASLt workspace: " + s.message());
    workspaceBytes_ = options_.gemmWorkspaceBytes;
  }
  // The shape's key: everything its plan depends on (gemmDescKey).
  auto keyOf = [&](const GemmDesc &d) { return gemmDescKey(d, workspaceBytes_); };
  // The plan of |d| (shared by the thunks of its shape); |unsupported|
  // says whether a failure is cuBLASLt offering no algorithm for it.
  auto planned = [&](const GemmDesc &d, GemmPlan &out,
                     bool &unsupported) -> Status {
    std::string key = keyOf(d);
    unsupported = false;
    auto refused = unsupportedGemms_.find(key);
    if (refused != unsupportedGemms_.end()) {
      unsupported = true;
      return Status::error(refused->second);
    }
    plan.gemmKey = key;
    auto found = gemmPlans_.find(key);
    if (found != gemmPlans_.end()) {
      out = found->second;
      return Status::ok();
    }
    Status s = api_.gemmPlan(&out, d, workspaceBytes_, &unsupported);
    if (s.isOk())
      gemmPlans_[key] = out;
    else if (unsupported)
      unsupportedGemms_[key] = s.message();
    return s;
  };
  bool unsupported = false;
  Status s = planned(desc, plan.gemm, unsupported);
  if (s.isOk())
    return Status::ok();
  if (!unsupported || desc.epilogue == GemmEpilogue::None)
    return fail(s.message());

  // cuBLASLt has no algorithm for this epilogue here: the plain GEMM, then
  // the epilogue as a kernel on the same stream (CudaEpilogue.h). A
  // residual GEMM stays one (its C is read by cuBLASLt, so a C that is the
  // result's own buffer is read before it is written) and the kernel adds
  // the bias; an aux epilogue's plain GEMM writes the aux buffer, which
  // the kernel turns into the pre-activation and the result; DGelu's plain
  // GEMM writes the result, which the kernel scales by gelu'(aux).
  GemmDesc plain = desc;
  plain.epilogue = GemmEpilogue::None;
  if (Status p = planned(plain, plan.gemm, unsupported); !p.isOk())
    return fail("cuBLASLt refused the " +
                std::string(gemmEpilogueName(desc.epilogue)) +
                " epilogue (" + s.message() + ") and the plain GEMM: " +
                p.message());
  if (!epilogue_) {
    // One workspace for every bias gradient's partial sums and every
    // DGELU product that cannot go to its result (the largest).
    StatusOr<std::unique_ptr<CudaEpilogue>> made =
        CudaEpilogue::create(api_, device_, epilogueWorkspaceBytes(package_));
    if (!made.isOk())
      return fail(made.status().message());
    epilogue_ = std::move(made.value());
  }
  if (Status p = epilogue_->plan(index, desc.epilogue, desc.dtype, g,
                                 plan.gemmOut, plan.bias, plan.args[1],
                                 plan.biasGrad, plan.aux);
      !p.isOk())
    return fail(p.message());
  plan.epilogueKernel = true;
  // Where the plain GEMM writes: the result, the aux buffer, or (DGELU
  // with its aux on the result's bytes) the epilogue's workspace.
  plan.gemmOut = epilogue_->gemmTarget(index);
  epilogueFallbacks_[std::string(gemmEpilogueName(desc.epilogue)) + ", " +
                     pkgDTypeName(desc.dtype) + ", m=" + std::to_string(g.m) +
                     " n=" + std::to_string(g.n) + " k=" + std::to_string(g.k) +
                     (g.transposeLhs ? " lhs^T" : "") +
                     (g.transposeRhs ? " rhs^T" : "")]
      .push_back(index);
  return Status::ok();
}

Status CudaExecutable::queueGemm(size_t index, CudaStream stream) {
  const ThunkPlan &plan = thunks_[index];
  if (plan.epilogueKernel)
    return api_.gemmRun(plan.gemm, plan.args[0], plan.args[1], plan.gemmOut,
                        nullptr, nullptr, plan.c, nullptr, workspace_,
                        workspaceBytes_, stream);
  return api_.gemmRun(plan.gemm, plan.args[0], plan.args[1], plan.gemmOut,
                      plan.bias, plan.biasGrad, plan.c, plan.aux, workspace_,
                      workspaceBytes_, stream);
}

Status CudaExecutable::autotune() {
  if (!options_.autotune || !api_.timesWork())
    return Status::ok();
  // What to tune: each shape with two or more candidates, in the order of
  // its first thunk, with its thunks; GEMMs first, then the convolutions'
  // GEMMs (each timed by running a thunk that uses it: its im2col and
  // swaps too, the same for every candidate), then the attention shapes.
  enum class Kind { Gemm, ConvGemm, Attention };
  struct Shape {
    std::string key;
    std::vector<size_t> thunks;
    Kind kind = Kind::Gemm;
    GemmPlan plan = nullptr;
  };
  std::vector<Shape> shapes;
  std::map<std::string, size_t> shapeOf;
  auto add = [&](const std::string &key, size_t thunk, Kind kind,
                 GemmPlan plan = nullptr) {
    auto [it, added] = shapeOf.emplace(key, shapes.size());
    if (added)
      shapes.push_back({key, {}, kind, plan});
    shapes[it->second].thunks.push_back(thunk);
  };
  for (size_t i = 0; i < thunks_.size(); ++i) {
    const PackageThunk &t = package_.thunks[i];
    if (t.kind != ThunkKind::LibraryCall)
      continue;
    if (t.library == LibraryKind::Gemm && thunks_[i].gemm &&
        api_.gemmAlgorithmCount(thunks_[i].gemm) > 1)
      add("gemm " + thunks_[i].gemmKey, i, Kind::Gemm, thunks_[i].gemm);
  }
  if (conv_)
    for (const CudaConv::GemmShape &g : conv_->gemmShapes())
      if (api_.gemmAlgorithmCount(g.plan) > 1)
        add("gemm " + g.key + " (convolution)", g.thunk, Kind::ConvGemm, g.plan);
  for (size_t i = 0; i < thunks_.size(); ++i) {
    const PackageThunk &t = package_.thunks[i];
    if (t.kind == ThunkKind::LibraryCall &&
        (t.library == LibraryKind::Attention ||
         t.library == LibraryKind::AttentionGrad) &&
        attention_ && attention_->variantCount(i) > 1)
      add(attention_->shapeKey(i), i, Kind::Attention);
  }
  if (shapes.empty())
    return Status::ok();
  // The runs read and write the arena's buffers before initialize(): give
  // them finite values (0x3c bytes: about 0.011 in bf16, 1.06 in f16,
  // 0.0115 in f32) rather than whatever the allocation held.
  // In another step's memory, only the bytes this step's own buffers take
  // (never the bound inputs, which are that step's parameters).
  std::vector<std::pair<void *, uint64_t>> fill;
  if (sharedPlan_) {
    for (auto [offset, bytes] : sharedPlan_->hostRanges)
      fill.push_back({arena_ + offset, bytes});
    for (auto [offset, bytes] : sharedPlan_->ownRanges)
      fill.push_back({ownMemory_ + offset, bytes});
  } else {
    fill.push_back({arena_, std::max<uint64_t>(package_.arenaSize, 1)});
  }
  for (auto [at, bytes] : fill)
    if (Status s = api_.memsetAsync(at, 0x3c, bytes, stream_); !s.isOk())
      return Status::error("autotuning: " + s.message());
  AutotuneOptions tuneOptions;
  tuneOptions.runs = options_.autotuneRuns;
  tuneOptions.trials = options_.autotuneTrials;
  tuneOptions.cacheDir = options_.autotuneCache.empty()  ? autotuneCacheDirectory()
                         : options_.autotuneCache == "off" ? std::string()
                                                           : options_.autotuneCache;
  Autotuner tuner(api_, device_, tuneOptions);
  for (Shape &shape : shapes) {
    size_t first = shape.thunks.front();
    AutotuneCandidates candidates;
    std::function<Status(CudaStream)> run;
    std::string library;
    if (shape.kind == Kind::Gemm) {
      candidates = gemmCandidates(api_, shape.plan);
      run = [&](CudaStream stream) { return queueGemm(first, stream); };
      library = api_.gemmLibraryVersion();
    } else if (shape.kind == Kind::ConvGemm) {
      candidates = gemmCandidates(api_, shape.plan);
      run = [&](CudaStream stream) {
        return conv_->run(first, stream, workspace_, workspaceBytes_);
      };
      library = api_.gemmLibraryVersion();
    } else {
      CudaAttention &attention = *attention_;
      candidates.count = attention.variantCount(first);
      const std::vector<size_t> &all = shape.thunks;
      candidates.select = [&attention, &all](int v) {
        for (size_t i : all)
          if (Status s = attention.selectVariant(i, v); !s.isOk())
            return s;
        return Status::ok();
      };
      candidates.id = [&attention, first](int v) -> StatusOr<std::string> {
        return attention.variantName(first, v);
      };
      candidates.description = [&attention, first](int v) {
        return attention.variantName(first, v);
      };
      run = [&](CudaStream stream) { return attention.run(first, stream); };
      library = attention.library();
    }
    StatusOr<Tuning> tuned =
        tuner.tune(shape.key, library, candidates, run, stream_);
    if (!tuned.isOk())
      return Status::error(thunkName(first) + ": " + tuned.status().message());
    tuning_.push_back(std::move(tuned.value()));
    tuning_.back().thunks = shape.thunks;
  }
  if (Status s = api_.streamSynchronize(stream_); !s.isOk())
    return Status::error("autotuning: " + s.message());

  // One note: what was timed, what changed and what it saves a step by
  // these timings.
  size_t timed = 0, cached = 0, moved = 0, gemms = 0;
  double saved = 0;
  for (const Tuning &t : tuning_) {
    gemms += t.shape.rfind("gemm ", 0) == 0;
    (t.cached ? cached : timed) += 1;
    if (t.chosen != 0)
      ++moved;
    if (!t.cached && t.chosen != 0)
      saved += (t.ms[0] - t.ms[t.chosen]) * double(t.thunks.size());
  }
  char savedText[64];
  std::snprintf(savedText, sizeof(savedText), "%.3f", saved);
  note("kiln cuda: autotuning: " + std::to_string(gemms) +
       " GEMM shape(s) (up to " + std::to_string(options_.gemmAlgorithms) +
       " cuBLASLt algorithms each), " + std::to_string(tuning_.size() - gemms) +
       " attention shape(s); " + std::to_string(timed) + " timed, " +
       std::to_string(cached) + " from the cache" +
       (tuneOptions.cacheDir.empty() ? "" : " (" + tuneOptions.cacheDir + ")") +
       "; " + std::to_string(moved) + " run another candidate than the first" +
       (timed ? std::string(", ") + savedText +
                    " ms less per step by these timings"
              : std::string()));
  return Status::ok();
}

} // namespace kiln::runtime::cuda
