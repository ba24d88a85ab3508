//===- PackageBuilder.cpp - a planned step as a .kpkg package -------------===//
//
// Buffers: every function argument gets its own region after the planned
// arena (each 64-byte aligned, starting at kiln.arena_bytes rounded up to
// 64), so the package's arena size is the planned arena plus the arguments;
// every op result with an offset in kiln.buffer_offsets is a buffer at that
// offset; a result with offset -1 reuses the buffer of the argument its
// kiln.aliases entry names. Kernels are the fusion's -O3 LLVM module
// (codegen/cpu/LowerToLLVM.h) as bitcode, entry point
// `void kiln_kernel(void **buffers, int64_t part, int64_t parts)`, buffers
// being its inputs then its outputs; a call runs part |part| of |parts| of
// every loop nest (LowerToLLVM.h's kernel ABI), so the runtime may split a
// KernelLaunch over threads. A dot_general is a Gemm LibraryCall with
// planGemm's parameters (operands lhs, rhs; result out); an operand that
// planGemm wants packed is first transposed by a kernel (a one-op transpose
// fusion, codegen/GemmEpilogue.h) into a scratch buffer "NAME.lhs_packed" or
// "NAME.rhs_packed", which the Gemm then reads. A gemm fusion is split
// (codegen/GemmEpilogue.h): its dot_general becomes such a Gemm writing a
// scratch buffer "NAME.dot", then a KernelLaunch of the epilogue kernel
// reads the fusion inputs the epilogue uses and that buffer (last) and
// writes the fusion's results. For CUDA, a gemm fusion whose epilogue
// cuBLASLt has (GemmEpilogueMatch.h's matchGemmEpilogue: bias, ReLU, GELU,
// a residual added as cuBLASLt's C, GELU keeping its pre-activation as
// aux) or that is a weight gradient plus its bias gradient
// (matchBiasGradient: kiln-fuse's bias-gradient-epilogues) is one Gemm
// thunk with that epilogue instead.
// Any other top-level op becomes the kernel of a one-op fusion
// (codegen/GemmEpilogue.h's buildSingleOpFusion) when the kernel model
// expresses it (max_pool2d, max_pool2d_grad, gather,
// scatter_add, a constant, a reshape copy), named after the op; a reshape
// planned on its operand's bytes is a view and has no thunk; a collective
// (all_reduce, reduce_scatter, all_gather, collective_broadcast; never
// fused) is a Collective thunk with its CollectiveParams, operand 0 into
// result 0 (the same buffer when the planner put an all_reduce in place);
// kiln.attention and kiln.attention_grad (CUDA targets only; kiln-decompose
// expands them elsewhere) are Attention and AttentionGrad LibraryCalls with
// AttentionParams, operands and results in the op's order (q, k, v -> out,
// lse; q, k, v, out, lse, dout -> dq, dk, dv); their packed forms
// kiln.attention_qkv and kiln.attention_qkv_grad too, with layout
// PackedBTHD (qkv -> out, lse; qkv, out, lse, dout -> dqkv);
// anything else (avg_pool2d, send/recv, ...) is refused with an error
// naming it. The metadata's strategy and world size are the module's
// kiln.strategy and kiln.world_size (set by kiln-distribute), else none
// and 1.
//
// Scratch buffers (role None) live after the arguments' regions. They are
// shared: every top-level op places its scratch buffers from the same start
// (dot result, then packed lhs, then packed rhs), and the arena grows by the
// largest such sum. That is safe because the runtime runs the thunks in
// order and each scratch value is dead once the op's last thunk (the Gemm or
// the epilogue) has run; a runtime that overlaps thunks of different ops
// must not overlap two that use scratch. The metadata's
// graph hash is FNV-1a 64 of the input file's bytes, stored little-endian
// in 8 bytes.
//
// Kernels compile in two phases. The walk above reads the MLIR: a CPU
// kernel's fusion becomes unoptimized LLVM IR in an LLVMContext of its own
// (a CUDA target's hook emits CUDA C++); a fusion whose fusionKey an
// earlier one had is recorded as a repeat. Then finishKernels runs what
// is left of each distinct kernel (-O3 and the bitcode; NVRTC and ptxas),
// several at once on the runtime's ThreadPool, each writing only its own
// PackageKernel, and copies each repeat's code from its first kernel. The
// bytes do not depend on the threads: every kernel's code comes from its
// own inputs, and failures are reported in kernel order.
//
//===----------------------------------------------------------------------===//

#include "tools/kiln/lib/PackageBuilder.h"

#include "tools/kiln/lib/Flags.h"
#include "tools/kiln/lib/GemmEpilogueMatch.h"

#include "codegen/GemmEpilogue.h"
#include "codegen/KernelModel.h"
#include "codegen/cpu/BitcodeCache.h"
#include "codegen/cpu/LowerToLLVM.h"
#include "ir/Interpreter.h"
#include "ir/KilnOps.h"
#include "runtime/Files.h"
#include "runtime/ThreadPool.h"
#include "runtime/cpu/Blas.h"
#include "serialize/PackageWriter.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h"
#include "llvm/TargetParser/Host.h"

#include <chrono>
#include <map>
#include <thread>

namespace kiln::cli {

namespace {

using namespace kiln::runtime;

constexpr uint64_t kAlignment = 64;

uint64_t alignUp(uint64_t v) {
  return (v + kAlignment - 1) / kAlignment * kAlignment;
}

std::string describe(mlir::Operation *op) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << "'" << op->getName() << "' at ";
  op->getLoc().print(os);
  return s;
}

struct Builder {
  LoadedPackage pkg;
  // A non-CPU target's kernel compiler (PackageBuilder.h), or null.
  const PackageTargetHooks *targetHooks = nullptr;
  llvm::DenseMap<mlir::Value, uint32_t> bufferOf;
  std::string error;
  // The kernels compiled so far, by fusionKey: a fusion that computes what
  // an earlier one did (a GPT's blocks repeat theirs) takes its code
  // instead of going through the code generator again (MLIR and LLVM's -O3
  // on the CPU; emission, NVRTC and ptxas for CUDA), as XLA's kernel reuse
  // cache does.
  std::map<std::string, uint32_t> kernelByKey;

  bool bufferFor(mlir::Value v, std::string name, uint64_t offset,
                 PkgRole role) {
    auto type = mlir::dyn_cast<mlir::RankedTensorType>(v.getType());
    DType dtype;
    if (!type || !dtypeOfTensor(type, dtype)) {
      error = "buffer '" + name + "': expected a ranked tensor of a kiln dtype";
      return false;
    }
    PackageBuffer b;
    b.name = std::move(name);
    b.dtype = static_cast<PkgDType>(dtype);
    b.shape.assign(type.getShape().begin(), type.getShape().end());
    b.size = type.getNumElements() * pkgBytesPerElement(b.dtype);
    b.offset = offset;
    b.role = role;
    bufferOf[v] = pkg.buffers.size();
    pkg.buffers.push_back(std::move(b));
    return true;
  }

  // Scratch: buffers that live only within one top-level op's thunks (a
  // GEMM's packed operands and a gemm fusion's dot result), placed from
  // |scratchBase| on; every op starts again at |scratchBase|.
  uint64_t scratchBase = 0, scratchNext = 0, scratchEnd = 0;

  // A scratch buffer of |type|; returns its index.
  bool scratchBuffer(mlir::RankedTensorType type, std::string name,
                     uint32_t &index) {
    DType dtype;
    if (!dtypeOfTensor(type, dtype)) {
      error = "buffer '" + name + "': expected a tensor of a kiln dtype";
      return false;
    }
    PackageBuffer b;
    b.name = std::move(name);
    b.dtype = static_cast<PkgDType>(dtype);
    b.shape.assign(type.getShape().begin(), type.getShape().end());
    b.size = type.getNumElements() * pkgBytesPerElement(b.dtype);
    b.offset = scratchNext;
    scratchNext = alignUp(scratchNext + b.size);
    scratchEnd = std::max(scratchEnd, scratchNext);
    index = pkg.buffers.size();
    pkg.buffers.push_back(std::move(b));
    return true;
  }

  // A kernel whose compilation the walk left to finish (KernelFinish in
  // PackageBuilder.h): its index in pkg.kernels and how it went.
  struct Pending {
    uint32_t kernel = 0;
    KernelFinish finish;
    bool ok = false;
    std::string error;
    double seconds = 0; // the finish's wall time
    // Set by a CPU kernel's finish: its bitcode came from the cache
    // (codegen/cpu/BitcodeCache.h).
    std::shared_ptr<bool> fromCache;
  };
  std::vector<Pending> pending;
  // Kernels that take an earlier kernel's code once every kernel is
  // finished: (kernel, the kernel whose code it takes).
  std::vector<std::pair<uint32_t, uint32_t>> repeats;

  // Compiles |fusion| (not of kind gemm) into a kernel named |name| and
  // appends its KernelLaunch on |operands| and |results|. The kernel's code
  // may only be there once finishKernels has run.
  bool addKernel(FusionOp fusion, const std::string &name,
                 std::vector<uint32_t> operands, std::vector<uint32_t> results) {
    PackageKernel kernel;
    kernel.name = name;
    std::string key = fusionKey(fusion);
    if (auto it = kernelByKey.find(key); it != kernelByKey.end()) {
      if (targetHooks && targetHooks->reuseKernel)
        targetHooks->reuseKernel(name, pkg.kernels[it->second].name);
      repeats.emplace_back(pkg.kernels.size(), it->second);
    } else {
      KernelFinish finish;
      std::shared_ptr<bool> fromCache;
      if (targetHooks) {
        if (!targetHooks->compileKernel(fusion, name, kernel, finish, error))
          return false;
      } else if (!compileCpuKernel(fusion, kernel, finish, fromCache)) {
        return false;
      }
      if (finish) {
        Pending &p = pending.emplace_back();
        p.kernel = static_cast<uint32_t>(pkg.kernels.size());
        p.finish = std::move(finish);
        p.fromCache = std::move(fromCache);
      }
      kernelByKey.emplace(std::move(key), pkg.kernels.size());
    }
    // The graph node each fused op came from (package.fbs source_nodes);
    // an op without a node name (one a pass made up) by its op name.
    for (mlir::Operation &inner : fusion.getBody().front()) {
      if (mlir::isa<YieldOp>(inner))
        continue;
      auto node = inner.getLoc()->findInstanceOf<mlir::NameLoc>();
      kernel.sourceNodes.push_back(node ? node.getName().str()
                                        : inner.getName().getStringRef().str());
    }
    PackageThunk thunk;
    thunk.kind = ThunkKind::KernelLaunch;
    thunk.kernel = pkg.kernels.size();
    thunk.operands = std::move(operands);
    thunk.results = std::move(results);
    pkg.kernels.push_back(std::move(kernel));
    pkg.thunks.push_back(std::move(thunk));
    return true;
  }

  // The CPU kernel of |fusion|: its LLVM IR now (MLIR's part), -O3 and the
  // bitcode in |finish|, through the bitcode cache (|fromCache| says
  // whether it was read from there once |finish| has run). Each kernel's
  // IR lives in an LLVMContext of its own, so finishes may run side by
  // side.
  bool compileCpuKernel(FusionOp fusion, PackageKernel &kernel,
                        KernelFinish &finish, std::shared_ptr<bool> &fromCache) {
    struct KernelIR {
      std::unique_ptr<llvm::LLVMContext> context;
      std::unique_ptr<llvm::Module> module; // destroyed before its context
    };
    auto ir = std::make_shared<KernelIR>();
    ir->context = std::make_unique<llvm::LLVMContext>();
    mlir::FailureOr<std::unique_ptr<llvm::Module>> module =
        kernelIR(fusion, *ir->context);
    if (mlir::failed(module)) {
      error = "fusion " + describe(fusion) +
              ": the CPU code generator could not compile it";
      return false;
    }
    ir->module = std::move(*module);
    kernel.kind = KernelKind::LlvmBitcode;
    kernel.entryPoint = kCpuKernelEntryPoint;
    fromCache = std::make_shared<bool>(false);
    finish = [ir, fromCache, where = "fusion " + describe(fusion)](
                 PackageKernel &kernel, std::string &error) {
      if (!ir->module->getFunction(kCpuKernelEntryPoint)) {
        error = where + ": expected its LLVM module to define @" +
                kCpuKernelEntryPoint + ", found none";
        return false;
      }
      llvm::Expected<OptimizedKernelBitcode> optimized =
          optimizeKernelBitcode(*ir->module);
      if (!optimized) {
        error = where + ": LLVM optimization failed: " +
                llvm::toString(optimized.takeError());
        return false;
      }
      *fromCache = optimized->fromCache;
      kernel.object.assign(optimized->bitcode.begin(),
                           optimized->bitcode.end());
      ir->module.reset();
      ir->context.reset();
      return true;
    };
    return true;
  }

  // Runs every pending finish, up to |jobs| at once (0: one per hardware
  // thread), then gives each repeat its kernel's code. False with |error|
  // set to the first failure in kernel order.
  bool finishKernels(unsigned jobs, mlir::TimingScope *timing,
                     std::vector<KernelFinishTime> *finishTimes) {
    unsigned threads = jobs ? jobs : std::max(1u, std::thread::hardware_concurrency());
    threads = static_cast<unsigned>(
        std::max<size_t>(1, std::min<size_t>(threads, pending.size())));
    mlir::TimingScope scope;
    if (timing)
      scope = timing->nest("kernels finished, " + std::to_string(pending.size()) +
                           " on " + std::to_string(threads) +
                           (threads > 1 ? " threads" : " thread"));
    auto run = [this](Pending &p) {
      auto start = std::chrono::steady_clock::now();
      p.ok = p.finish(pkg.kernels[p.kernel], p.error);
      p.seconds = std::chrono::duration<double>(
                      std::chrono::steady_clock::now() - start)
                      .count();
      p.finish = nullptr; // its code and IR go now
    };
    if (threads == 1) {
      for (Pending &p : pending)
        run(p);
    } else {
      // pkg.kernels does not change while the finishes run; each writes
      // its own kernel. (The runtime's pool, not llvm::StdThreadPool: its
      // std::async instantiations in Kiln's code would meet libMLIR's
      // uninstrumented ones, which ThreadSanitizer reports as races.)
      runtime::ThreadPool pool(static_cast<int>(threads));
      pool.parallelFor(static_cast<int64_t>(pending.size()),
                       [&](int64_t i) { run(pending[i]); });
    }
    for (Pending &p : pending)
      if (!p.ok) {
        error = std::move(p.error);
        return false;
      }
    if (finishTimes)
      for (const Pending &p : pending) {
        // The graph nodes by name, each once, leaving out the ops no node
        // named (an op's name, or the function's for what a pass made).
        const PackageKernel &kernel = pkg.kernels[p.kernel];
        llvm::SetVector<llvm::StringRef> named;
        for (const std::string &node : kernel.sourceNodes)
          if (node != "main" && !llvm::StringRef(node).starts_with("kiln."))
            named.insert(node);
        std::string nodes;
        for (size_t i = 0; i < std::min<size_t>(2, named.size()); ++i)
          nodes += (i ? ", " : "") + named[i].str();
        if (named.size() > 2)
          nodes += " and " + std::to_string(named.size() - 2) +
                   (named.size() == 3 ? " more node" : " more nodes");
        if (named.empty())
          nodes = std::to_string(kernel.sourceNodes.size()) +
                  " ops without node names";
        finishTimes->push_back({kernel.name, std::move(nodes), p.seconds,
                                p.fromCache && *p.fromCache});
      }
    pending.clear();
    for (auto [kernel, sameAs] : repeats) {
      PackageKernel code = pkg.kernels[sameAs];
      code.name = std::move(pkg.kernels[kernel].name);
      code.sourceNodes = std::move(pkg.kernels[kernel].sourceNodes);
      pkg.kernels[kernel] = std::move(code);
    }
    repeats.clear();
    return true;
  }

  // Appends the thunks of |dot| reading buffers |lhs| and |rhs| and writing
  // |result|: a Gemm LibraryCall with planGemm's parameters, preceded by a
  // transpose kernel into a scratch buffer for each operand that planGemm
  // wants packed. |name| prefixes the packed buffers' and kernels' names.
  bool addGemm(DotGeneralOp dot, uint32_t lhs, uint32_t rhs, uint32_t result,
               const std::string &name,
               PkgGemmEpilogue epilogue = PkgGemmEpilogue::None,
               std::optional<uint32_t> bias = std::nullopt,
               std::optional<uint32_t> biasGradient = std::nullopt,
               std::optional<uint32_t> c = std::nullopt,
               std::optional<uint32_t> aux = std::nullopt,
               std::optional<uint32_t> auxInput = std::nullopt) {
    runtime::cpu::GemmSpec spec;
    auto lhsType = mlir::cast<mlir::RankedTensorType>(dot.getLhs().getType());
    auto rhsType = mlir::cast<mlir::RankedTensorType>(dot.getRhs().getType());
    spec.dtype = pkg.buffers[result].dtype;
    spec.lhsShape.assign(lhsType.getShape().begin(), lhsType.getShape().end());
    spec.rhsShape.assign(rhsType.getShape().begin(), rhsType.getShape().end());
    auto copy = [](llvm::ArrayRef<int64_t> a) {
      return std::vector<int64_t>(a.begin(), a.end());
    };
    spec.lhsBatch = copy(dot.getLhsBatchingDimensions());
    spec.rhsBatch = copy(dot.getRhsBatchingDimensions());
    spec.lhsContract = copy(dot.getLhsContractingDimensions());
    spec.rhsContract = copy(dot.getRhsContractingDimensions());
    StatusOr<runtime::cpu::GemmPlan> plan = runtime::cpu::planGemm(spec);
    if (!plan.isOk()) {
      error = "op " + describe(dot) + ": " + plan.status().message();
      return false;
    }
    auto pack = [&](mlir::RankedTensorType type,
                    const std::vector<int64_t> &permutation, uint32_t &buffer,
                    const char *operand) {
      if (permutation.empty())
        return true;
      FusionOp transpose;
      mlir::FailureOr<mlir::OwningOpRef<mlir::ModuleOp>> module =
          buildTransposeFusion(dot.getLoc(), type, permutation, transpose);
      if (mlir::failed(module)) {
        error = "op " + describe(dot) + ": cannot build the packing kernel "
                "of its " + operand;
        return false;
      }
      uint32_t packed;
      if (!scratchBuffer(mlir::cast<mlir::RankedTensorType>(
                             transpose.getResult(0).getType()),
                         name + "." + operand + "_packed", packed))
        return false;
      if (!addKernel(transpose, name + "." + operand + "_pack", {buffer},
                     {packed}))
        return false;
      buffer = packed;
      return true;
    };
    // BGRADA sums cuBLASLt's A over k: the row-major rhs as [k, n].
    if (biasGradient && (plan->params.transposeRhs || plan->params.batch != 1)) {
      error = "op " + describe(dot) + ": a bias-gradient GEMM needs its rhs "
              "as [k, n] and no batch";
      return false;
    }
    if (!pack(lhsType, plan->lhsPermutation, lhs, "lhs") ||
        !pack(rhsType, plan->rhsPermutation, rhs, "rhs"))
      return false;
    PackageThunk thunk;
    thunk.kind = ThunkKind::LibraryCall;
    thunk.library = LibraryKind::Gemm;
    thunk.hasGemm = true;
    thunk.gemm = plan->params;
    thunk.gemm.epilogue = epilogue;
    thunk.operands = {lhs, rhs};
    if (bias)
      thunk.operands.push_back(*bias);
    // DGelu's aux: the forward's pre-activation, read.
    if (auxInput)
      thunk.operands.push_back(*auxInput);
    // A residual is cuBLASLt's C, scaled by beta.
    if (c) {
      thunk.operands.push_back(*c);
      thunk.gemm.beta = 1.0;
    }
    thunk.results = {result};
    if (biasGradient)
      thunk.results.push_back(*biasGradient);
    if (aux)
      thunk.results.push_back(*aux);
    pkg.thunks.push_back(std::move(thunk));
    return true;
  }
};

PkgRole roleOf(mlir::Attribute attr) {
  if (auto role = mlir::dyn_cast_or_null<RoleAttr>(attr))
    return static_cast<PkgRole>(static_cast<uint8_t>(role.getValue()) + 1);
  return PkgRole::None;
}

bool isCollective(mlir::Operation *op) {
  return mlir::isa<AllReduceOp, ReduceScatterOp, AllGatherOp,
                   CollectiveBroadcastOp, SendOp, RecvOp>(op);
}

PkgReduceKind reduceKindOf(ReduceKind kind) {
  switch (kind) {
  case ReduceKind::sum:
    return PkgReduceKind::Sum;
  case ReduceKind::max:
    return PkgReduceKind::Max;
  case ReduceKind::min:
    return PkgReduceKind::Min;
  case ReduceKind::mean:
    return PkgReduceKind::Mean;
  case ReduceKind::prod:
    break; // kiln.all_reduce and kiln.reduce_scatter's verifiers refuse it
  }
  llvm_unreachable("a collective reduction kind that the verifier refuses");
}

// A top-level collective as a Collective thunk's parameters (operands and
// results are filled by the caller). send and recv are refused: the CPU
// runtime has no point-to-point thunks yet.
bool collectiveThunk(mlir::Operation *op, PackageThunk &thunk,
                     std::string &error) {
  thunk.kind = ThunkKind::Collective;
  thunk.hasCollective = true;
  CollectiveParams &c = thunk.collective;
  std::optional<mlir::DenseIntElementsAttr> groups;
  if (auto r = mlir::dyn_cast<AllReduceOp>(op)) {
    c.kind = CollectiveKind::AllReduce;
    c.reduction = reduceKindOf(r.getReduction());
    groups = r.getGroups();
  } else if (auto r = mlir::dyn_cast<ReduceScatterOp>(op)) {
    c.kind = CollectiveKind::ReduceScatter;
    c.reduction = reduceKindOf(r.getReduction());
    c.dimension = r.getDimension();
    groups = r.getGroups();
  } else if (auto g = mlir::dyn_cast<AllGatherOp>(op)) {
    c.kind = CollectiveKind::AllGather;
    c.dimension = g.getDimension();
    groups = g.getGroups();
  } else if (auto bc = mlir::dyn_cast<CollectiveBroadcastOp>(op)) {
    c.kind = CollectiveKind::Broadcast;
    c.root = bc.getRoot();
    groups = bc.getGroups();
  } else {
    error = "op " + describe(op) +
            " is not supported by the CPU package yet (no point-to-point "
            "thunks; collectives all-reduce, reduce-scatter, all-gather and "
            "broadcast are)";
    return false;
  }
  if (groups) {
    auto type = mlir::cast<mlir::ShapedType>(groups->getType());
    c.groupsShape.assign(type.getShape().begin(), type.getShape().end());
    for (const llvm::APInt &v : groups->getValues<llvm::APInt>())
      c.groups.push_back(v.getSExtValue());
  }
  return true;
}

// A top-level kiln.attention or kiln.attention_grad (or their packed
// forms kiln.attention_qkv, kiln.attention_qkv_grad) as an Attention or
// AttentionGrad LibraryCall's parameters (operands and results are filled
// by the caller). Only a CUDA package runs them.
bool attentionThunk(mlir::Operation *op, TargetKind target,
                    PackageThunk &thunk, std::string &error) {
  if (target != TargetKind::Cuda) {
    error = "op " + describe(op) +
            " is a CUDA library call: a CPU package has no attention thunks "
            "(kiln-decompose expands kiln.attention into primitives for the "
            "CPU; compile with --target=cuda or run kiln-decompose)";
    return false;
  }
  auto shape = [](mlir::Value x) {
    return mlir::cast<mlir::RankedTensorType>(x.getType()).getShape();
  };
  // The packed forms: one [B, T, 3, H, D] qkv operand (AttentionLayout
  // PackedBTHD; runtime/package/Package.h).
  mlir::Value qkv;
  mlir::FloatAttr packedScale;
  bool packedCausal = false;
  if (auto a = mlir::dyn_cast<AttentionQkvOp>(op)) {
    thunk.library = LibraryKind::Attention;
    qkv = a.getQkv(), packedScale = a.getScaleAttr(), packedCausal = a.getCausal();
  } else if (auto g = mlir::dyn_cast<AttentionQkvGradOp>(op)) {
    thunk.library = LibraryKind::AttentionGrad;
    qkv = g.getQkv(), packedScale = g.getScaleAttr(), packedCausal = g.getCausal();
  }
  if (qkv) {
    thunk.kind = ThunkKind::LibraryCall;
    thunk.hasAttention = true;
    AttentionParams &p = thunk.attention;
    llvm::ArrayRef<int64_t> s = shape(qkv);
    p.batch = s[0], p.qLen = p.kvLen = s[1], p.heads = s[3];
    p.headDim = p.valueDim = s[4];
    p.scale = packedScale.getValueAsDouble();
    p.causal = packedCausal;
    p.layout = AttentionLayout::PackedBTHD;
    return true;
  }
  mlir::Value q, k, v;
  double scale;
  bool causal;
  if (auto a = mlir::dyn_cast<AttentionOp>(op)) {
    thunk.library = LibraryKind::Attention;
    q = a.getQ(), k = a.getK(), v = a.getV();
    scale = a.getScale().convertToDouble();
    causal = a.getCausal();
  } else {
    auto g = mlir::cast<AttentionGradOp>(op);
    thunk.library = LibraryKind::AttentionGrad;
    q = g.getQ(), k = g.getK(), v = g.getV();
    scale = g.getScale().convertToDouble();
    causal = g.getCausal();
  }
  thunk.kind = ThunkKind::LibraryCall;
  thunk.hasAttention = true;
  AttentionParams &p = thunk.attention;
  p.batch = shape(q)[0];
  p.heads = shape(q)[1];
  p.qLen = shape(q)[2];
  p.headDim = shape(q)[3];
  p.kvLen = shape(k)[2];
  p.valueDim = shape(v)[3];
  p.scale = scale;
  p.causal = causal;
  return true;
}

runtime::Strategy packageStrategy(llvm::StringRef name) {
  if (name == "mirrored")
    return runtime::Strategy::Mirrored;
  if (name == "data-parallel")
    return runtime::Strategy::DataParallel;
  if (name == "zero1")
    return runtime::Strategy::Zero1;
  if (name == "zero2")
    return runtime::Strategy::Zero2;
  if (name == "zero3")
    return runtime::Strategy::Zero3;
  if (name == "parameter-server")
    return runtime::Strategy::ParameterServer;
  if (name == "pipeline")
    return runtime::Strategy::Pipeline;
  if (name == "tensor-parallel")
    return runtime::Strategy::TensorParallel;
  return runtime::Strategy::None;
}

// The package's graph hash: FNV-1a (64 bits) of the source graph file's
// bytes, little-endian. (Until the sixteenth session the offset basis had
// lost its last digit, 1469598103934665603 for 14695981039346656037, so
// the hash was no FNV-1a anyone could recompute.)
std::vector<uint8_t> graphHash(llvm::StringRef bytes) {
  uint64_t h = runtime::fnv1a(bytes.str());
  std::vector<uint8_t> out(8);
  for (int i = 0; i < 8; ++i)
    out[i] = static_cast<uint8_t>(h >> (8 * i));
  return out;
}

} // namespace

mlir::LogicalResult
writeStepPackage(mlir::ModuleOp module, llvm::StringRef modelName,
                 llvm::StringRef sourceBytes, llvm::ArrayRef<std::string> flags,
                 const std::string &outputPath, llvm::StringRef command,
                 llvm::raw_ostream &errs, const PackageBuildOptions &options) {
  LoadedPackage pkg;
  if (mlir::failed(buildStepPackage(module, modelName, sourceBytes, flags,
                                    command, errs, pkg, options)))
    return mlir::failure();
  runtime::Status status = serialize::writePackageFile(pkg, outputPath);
  if (!status.isOk()) {
    printError(errs, command, "--emit=package: " + status.message());
    return mlir::failure();
  }
  return mlir::success();
}

mlir::LogicalResult
buildStepPackage(mlir::ModuleOp module, llvm::StringRef modelName,
                 llvm::StringRef sourceBytes, llvm::ArrayRef<std::string> flags,
                 llvm::StringRef command, llvm::raw_ostream &errs,
                 runtime::LoadedPackage &result,
                 const PackageBuildOptions &options) {
  const PackageTargetHooks *targetHooks = options.targetHooks;
  auto fail = [&](const std::string &message) {
    printError(errs, command, "--emit=package: " + message);
    return mlir::failure();
  };
  auto func = module.lookupSymbol<mlir::func::FuncOp>("main");
  if (!func)
    return fail("expected a function @main in the compiled module, found none");
  auto arenaAttr = func->getAttrOfType<mlir::IntegerAttr>("kiln.arena_bytes");
  if (!arenaAttr)
    return fail("@main has no kiln.arena_bytes: expected a planned step "
                "(do not pass --forward-only or --no-optimize)");

  Builder b;
  LoadedPackage &pkg = b.pkg;
  pkg.target.kind = TargetKind::Cpu;
  // What the kernels were optimized for (the host); the runtime compiles
  // them for whatever CPU of the same architecture it runs on.
  if (auto host = llvm::orc::JITTargetMachineBuilder::detectHost()) {
    pkg.target.triple = host->getTargetTriple().str();
    pkg.target.cpuFeatures = host->getCPU() + ":" + host->getFeatures().getString();
  } else {
    llvm::consumeError(host.takeError());
    pkg.target.triple = llvm::sys::getProcessTriple();
  }
  pkg.arenaAlignment = kAlignment;
  b.targetHooks = targetHooks;
  if (targetHooks)
    pkg.target = targetHooks->target;

  // Arguments: their own regions after the planned arena.
  uint64_t next = alignUp(arenaAttr.getInt());
  for (unsigned i = 0; i < func.getNumArguments(); ++i) {
    mlir::Value arg = func.getArgument(i);
    auto nameAttr = func.getArgAttrOfType<mlir::StringAttr>(i, "kiln.name");
    std::string name = nameAttr ? nameAttr.str() : "arg" + std::to_string(i);
    PkgRole role = roleOf(func.getArgAttr(i, "kiln.role"));
    if (!b.bufferFor(arg, name, next, role))
      return fail(b.error);
    next = alignUp(next + pkg.buffers.back().size);
    SignatureEntry entry;
    entry.name = name;
    entry.role = role;
    entry.dtype = pkg.buffers.back().dtype;
    entry.shape = pkg.buffers.back().shape;
    entry.buffer = b.bufferOf[arg];
    // Inputs are the arguments in order, so the index is the input's too.
    if (auto of = func.getArgAttrOfType<mlir::IntegerAttr>(
            i, KilnDialect::kCopyOfAttrName))
      entry.copyOf = static_cast<int32_t>(of.getInt());
    // The bound the model reads an integer input as indices under
    // (kiln-mark-index-bounds), for the runtime's check of the data.
    if (auto bound = func.getArgAttrOfType<mlir::IntegerAttr>(
            i, KilnDialect::kIndexBoundAttrName))
      entry.indexBound = bound.getInt();
    pkg.inputs.push_back(entry);
    if (auto init = func.getArgAttrOfType<InitializerAttr>(i, "kiln.init")) {
      ParameterInit p;
      p.buffer = entry.buffer;
      p.kind = static_cast<PkgInitKind>(static_cast<uint8_t>(init.getKind()));
      p.value = init.getValue().convertToDouble();
      p.scale = init.getScale().convertToDouble();
      p.seed = init.getSeed();
      pkg.parameterInits.push_back(p);
    }
  }
  b.scratchBase = b.scratchEnd = next;

  // Top-level ops: buffers for their results, a kernel and a thunk each
  // (the kernels' code once finishKernels has run).
  mlir::TimingScope walkScope;
  if (options.timing)
    walkScope = options.timing->nest("kernels from the step's ops");
  unsigned opIndex = 0;
  for (mlir::Operation &op : func.getBody().front()) {
    if (mlir::isa<mlir::func::ReturnOp>(op))
      continue;
    auto fusion = mlir::dyn_cast<FusionOp>(op);
    auto dot = mlir::dyn_cast<DotGeneralOp>(op);
    bool conv = mlir::isa<Conv2DOp, Conv2DInputGradOp, Conv2DFilterGradOp>(op);
    bool attention =
        mlir::isa<AttentionOp, AttentionGradOp, AttentionQkvOp, AttentionQkvGradOp>(op);
    auto offsets =
        op.getAttrOfType<mlir::DenseI64ArrayAttr>("kiln.buffer_offsets");
    if (!offsets || offsets.size() != static_cast<int64_t>(op.getNumResults()))
      return fail("op " + describe(&op) +
                  ": expected kiln.buffer_offsets with one entry per result");
    auto aliases = op.getAttrOfType<mlir::DenseI64ArrayAttr>("kiln.aliases");
    b.scratchNext = b.scratchBase;
    std::string opName = (fusion ? "fusion"
                          : dot  ? "dot"
                          : conv ? "conv"
                                 : op.getName().stripDialect().str()) +
                         std::to_string(opIndex++);
    for (unsigned r = 0; r < op.getNumResults(); ++r) {
      int64_t offset = offsets[r];
      if (offset >= 0) {
        if (!b.bufferFor(op.getResult(r), opName + "." + std::to_string(r),
                         offset, PkgRole::None))
          return fail(b.error);
        continue;
      }
      // kiln.aliases has one entry per result (-1 where the result has an
      // arena offset).
      if (!aliases || r >= static_cast<unsigned>(aliases.size()) ||
          aliases[r] < 0 || aliases[r] >= func.getNumArguments())
        return fail("op " + describe(&op) + ": result " + std::to_string(r) +
                    " has offset -1 but no valid kiln.aliases entry");
      b.bufferOf[op.getResult(r)] =
          b.bufferOf[func.getArgument(aliases[r])];
    }

    if (conv) {
      // A LibraryCall on the forward convolution's NCHW input, OIHW filter
      // and NCHW output shapes; operands and result in the op's order.
      auto shapeOf = [](mlir::Value v) {
        auto t = mlir::cast<mlir::RankedTensorType>(v.getType());
        return std::vector<int64_t>(t.getShape().begin(), t.getShape().end());
      };
      auto copy = [](llvm::ArrayRef<int64_t> a) {
        return std::vector<int64_t>(a.begin(), a.end());
      };
      PackageThunk thunk;
      thunk.kind = ThunkKind::LibraryCall;
      thunk.hasConv = true;
      ConvParams &c = thunk.conv;
      if (auto f = mlir::dyn_cast<Conv2DOp>(op)) {
        thunk.library = LibraryKind::Conv2D;
        c.inputShape = shapeOf(f.getInput());
        c.filterShape = shapeOf(f.getFilter());
        c.outputShape = shapeOf(f.getResult());
        c.strides = copy(f.getStrides());
        c.padding = copy(f.getPadding());
        c.dilation = copy(f.getDilation());
        c.groups = f.getGroups();
      } else if (auto g = mlir::dyn_cast<Conv2DInputGradOp>(op)) {
        thunk.library = LibraryKind::Conv2DInputGrad;
        c.inputShape = shapeOf(g.getResult());
        c.filterShape = shapeOf(g.getFilter());
        c.outputShape = shapeOf(g.getGradOutput());
        c.strides = copy(g.getStrides());
        c.padding = copy(g.getPadding());
        c.dilation = copy(g.getDilation());
        c.groups = g.getGroups();
      } else {
        auto w = mlir::cast<Conv2DFilterGradOp>(op);
        thunk.library = LibraryKind::Conv2DFilterGrad;
        c.inputShape = shapeOf(w.getInput());
        c.filterShape = shapeOf(w.getResult());
        c.outputShape = shapeOf(w.getGradOutput());
        c.strides = copy(w.getStrides());
        c.padding = copy(w.getPadding());
        c.dilation = copy(w.getDilation());
        c.groups = w.getGroups();
      }
      if (runtime::Status s = runtime::pkgCheckConvParams(c); !s.isOk())
        return fail("op " + describe(&op) + ": " + s.message());
      for (mlir::Value operand : op.getOperands()) {
        auto it = b.bufferOf.find(operand);
        if (it == b.bufferOf.end())
          return fail("op " + describe(&op) +
                      ": an operand is not a planned buffer");
        thunk.operands.push_back(it->second);
      }
      thunk.results.push_back(b.bufferOf[op.getResult(0)]);
      pkg.thunks.push_back(std::move(thunk));
      continue;
    }
    std::vector<uint32_t> operands, results;
    for (mlir::Value operand : op.getOperands()) {
      auto it = b.bufferOf.find(operand);
      if (it == b.bufferOf.end())
        return fail("op " + describe(&op) +
                    ": an operand is not a planned buffer");
      operands.push_back(it->second);
    }
    for (mlir::Value result : op.getResults())
      results.push_back(b.bufferOf[result]);
    if (dot) {
      if (!b.addGemm(dot, operands[0], operands[1], results[0], opName))
        return fail(b.error);
      continue;
    }
    if (attention) {
      PackageThunk thunk;
      if (!attentionThunk(&op, pkg.target.kind, thunk, b.error))
        return fail(b.error);
      thunk.operands = std::move(operands);
      thunk.results = std::move(results);
      pkg.thunks.push_back(std::move(thunk));
      continue;
    }
    if (isCollective(&op)) {
      PackageThunk thunk;
      if (!collectiveThunk(&op, thunk, b.error))
        return fail(b.error);
      thunk.operands = std::move(operands);
      thunk.results = std::move(results);
      pkg.thunks.push_back(std::move(thunk));
      continue;
    }
    if (!fusion) {
      // A reshape whose result the planner put on its operand's bytes is a
      // view: no thunk.
      if (mlir::isa<ReshapeOp>(op) &&
          pkg.buffers[results[0]].offset == pkg.buffers[operands[0]].offset)
        continue;
      // Any other op the kernel model can express becomes a kernel of a
      // one-op fusion.
      FusionOp single;
      mlir::FailureOr<mlir::OwningOpRef<mlir::ModuleOp>> module =
          buildSingleOpFusion(&op, single);
      if (mlir::failed(module) ||
          !b.addKernel(single, opName, std::move(operands), std::move(results)))
        return fail("op " + describe(&op) +
                    " is not supported by the CPU package yet (the CPU "
                    "kernel model cannot express it)");
      continue;
    }
    if (fusion.getKind() == FusionKind::gemm) {
      // The dot into a scratch buffer, then the epilogue kernel reading it.
      mlir::FailureOr<GemmFusionSplit> split = splitGemmFusion(fusion);
      if (mlir::failed(split))
        return fail("gemm fusion " + describe(&op) +
                    ": cannot split it into a GEMM and an epilogue");
      // CUDA: an epilogue cuBLASLt has goes on the GEMM, writing the
      // fusion's result(s), and no kernel is emitted for it.
      std::optional<GemmEpilogueMatch> epilogue;
      if (pkg.target.kind == TargetKind::Cuda)
        epilogue = matchGemmEpilogue(fusion, split->dot);
      unsigned dotResult = 0, gradResult = 0;
      if (pkg.target.kind == TargetKind::Cuda &&
          matchBiasGradient(fusion, split->dot, dotResult, gradResult)) {
        if (!b.addGemm(split->dot, operands[split->lhsInput],
                       operands[split->rhsInput], results[dotResult], opName,
                       PkgGemmEpilogue::BiasGradient,
                       std::nullopt, results[gradResult]))
          return fail(b.error);
        continue;
      }
      if (epilogue) {
        auto buffer = [](const std::vector<uint32_t> &from,
                         std::optional<unsigned> i) -> std::optional<uint32_t> {
          if (i)
            return from[*i];
          return std::nullopt;
        };
        if (!b.addGemm(split->dot, operands[split->lhsInput],
                       operands[split->rhsInput], results[epilogue->outResult],
                       opName, epilogue->kind,
                       buffer(operands, epilogue->biasInput), std::nullopt,
                       buffer(operands, epilogue->cInput),
                       buffer(results, epilogue->auxResult),
                       buffer(operands, epilogue->auxInput)))
          return fail(b.error);
        continue;
      }
      uint32_t dotBuffer;
      if (!b.scratchBuffer(split->dot.getType(), opName + ".dot", dotBuffer) ||
          !b.addGemm(split->dot, operands[split->lhsInput],
                     operands[split->rhsInput], dotBuffer, opName))
        return fail(b.error);
      std::vector<uint32_t> epilogueOperands;
      for (int64_t source : split->inputSources)
        epilogueOperands.push_back(source < 0 ? dotBuffer : operands[source]);
      if (!b.addKernel(split->epilogue, opName, std::move(epilogueOperands),
                       std::move(results)))
        return fail(b.error);
      continue;
    }
    if (!b.addKernel(fusion, opName, std::move(operands), std::move(results)))
      return fail(b.error);
  }
  walkScope.stop();
  if (!b.finishKernels(options.jobs, options.timing, options.finishTimes))
    return fail(b.error);
  pkg.arenaSize = b.scratchEnd;

  // Outputs: the returned values, with kiln.updates on their buffers.
  auto ret =
      mlir::cast<mlir::func::ReturnOp>(func.getBody().front().getTerminator());
  for (unsigned i = 0; i < ret.getNumOperands(); ++i) {
    auto it = b.bufferOf.find(ret.getOperand(i));
    if (it == b.bufferOf.end())
      return fail("result " + std::to_string(i) +
                  " of @main is not a planned buffer");
    PackageBuffer &buffer = pkg.buffers[it->second];
    SignatureEntry entry;
    auto nameAttr = func.getResultAttrOfType<mlir::StringAttr>(i, "kiln.name");
    entry.name = nameAttr ? nameAttr.str() : "result" + std::to_string(i);
    entry.role = roleOf(func.getResultAttr(i, "kiln.role"));
    entry.dtype = buffer.dtype;
    entry.shape = buffer.shape;
    entry.buffer = it->second;
    if (auto updates =
            func.getResultAttrOfType<mlir::IntegerAttr>(i, "kiln.updates"))
      buffer.updates = updates.getInt();
    pkg.outputs.push_back(entry);
  }

  pkg.metadata.modelName = modelName.str();
  // kiln-distribute records the strategy and world size on the module.
  if (auto strategy = module->getAttrOfType<mlir::StringAttr>("kiln.strategy"))
    pkg.metadata.strategy = packageStrategy(strategy.getValue());
  if (auto world = module->getAttrOfType<mlir::IntegerAttr>("kiln.world_size"))
    pkg.metadata.worldSize = static_cast<uint32_t>(world.getInt());
  pkg.metadata.compileFlags.assign(flags.begin(), flags.end());
  pkg.metadata.graphHash = graphHash(sourceBytes);
  // ZeRO: the layout of every shard argument (kiln-distribute's kiln.shard),
  // so the runtime can initialize, checkpoint and reshard it.
  for (unsigned i = 0; i < func.getNumArguments(); ++i) {
    auto shard = func.getArgAttrOfType<mlir::DictionaryAttr>(i, "kiln.shard");
    if (!shard)
      continue;
    ShardLayout layout;
    layout.name = pkg.inputs[i].name;
    layout.length = shard.getAs<mlir::IntegerAttr>("length").getInt();
    layout.worldSize = static_cast<uint32_t>(
        shard.getAs<mlir::IntegerAttr>("world_size").getInt());
    for (mlir::Attribute a : shard.getAs<mlir::ArrayAttr>("params")) {
      auto d = llvm::dyn_cast<mlir::DictionaryAttr>(a);
      auto name = d ? d.getAs<mlir::StringAttr>("name") : nullptr;
      auto offset = d ? d.getAs<mlir::IntegerAttr>("offset") : nullptr;
      auto shape = d ? d.getAs<mlir::DenseI64ArrayAttr>("shape") : nullptr;
      if (!name || !offset || !shape)
        return fail("argument " + std::to_string(i) +
                    ": kiln.shard params need a name, offset and shape");
      ShardSlot slot;
      slot.name = name.str();
      slot.offset = offset.getInt();
      slot.shape.assign(shape.asArrayRef().begin(), shape.asArrayRef().end());
      if (auto init = d.getAs<InitializerAttr>("init")) {
        slot.init.kind =
            static_cast<PkgInitKind>(static_cast<uint8_t>(init.getKind()));
        slot.init.value = init.getValue().convertToDouble();
        slot.init.scale = init.getScale().convertToDouble();
        slot.init.seed = init.getSeed();
      }
      layout.slots.push_back(std::move(slot));
    }
    pkg.metadata.shards.push_back(std::move(layout));
  }

  result = std::move(pkg);
  return mlir::success();
}

} // namespace kiln::cli
