//===- CudaExecutable.cpp - a CUDA package, ready to run steps on a GPU ----===//
//
// See CudaExecutable.h. Everything that could fail at a step (a kernel
// without code for the device, a GEMM cuBLASLt cannot plan, a buffer too
// small, a library call the runtime lacks) is found by create(); a step's
// failures are CUDA's own, named with the thunk and the call. The GEMM
// thunks' planning and the autotuning are in CudaExecutableGemm.cpp.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudaExecutable.h"
#include "runtime/cuda/CubinCache.h"

#include "runtime/Half.h"
#include "runtime/Units.h"
#include "runtime/cuda/CudaAttention.h"
#include "runtime/cuda/CudaConv.h"
#include "runtime/cuda/CudaEpilogue.h"
#include "runtime/dist/Communicator.h"
#include "runtime/package/PackageData.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iterator>
#include <map>
#include <string_view>

namespace kiln::runtime::cuda {

namespace {

// Dynamic shared memory a kernel may launch with before it opts in.
constexpr uint32_t kDefaultDynamicSharedBytes = 48 * 1024;

int64_t elementCount(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

// The sm_NN of PTX's `.target sm_NN` line, or 0.
unsigned ptxTarget(const std::string &ptx) {
  size_t at = ptx.find(".target");
  if (at == std::string::npos)
    return 0;
  at = ptx.find("sm_", at);
  if (at == std::string::npos)
    return 0;
  unsigned arch = 0;
  for (size_t i = at + 3; i < ptx.size() && ptx[i] >= '0' && ptx[i] <= '9'; ++i)
    arch = arch * 10 + unsigned(ptx[i] - '0');
  return arch;
}

// Whether |a| and |b| load as the same function: the same code for every
// path loadKernel may take, and the same shared-memory opt-in.
bool sameKernelCode(const PackageKernel &a, const PackageKernel &b) {
  return a.kind == b.kind && a.entryPoint == b.entryPoint &&
         a.cubins == b.cubins && a.ptx == b.ptx && a.source == b.source &&
         a.sharedMemoryBytes == b.sharedMemoryBytes;
}

} // namespace

const char *kernelCodeName(KernelCode code) {
  switch (code) {
  case KernelCode::Cubin: return "cubin";
  case KernelCode::Ptx: return "ptx";
  case KernelCode::Nvrtc: return "nvrtc";
  }
  return "unknown";
}

struct CudaExecutable::Lent {
  CudaApi &api;
  uint8_t *arena = nullptr;
  CudaStream stream = nullptr;
  void *workspace = nullptr;
  // The convolutions' workspace (CudaConv.h), its bytes.
  void *convWorkspace = nullptr;
  uint64_t convWorkspaceBytes = 0;
  explicit Lent(CudaApi &api) : api(api) {}
  ~Lent() {
    if (stream) {
      api.streamSynchronize(stream);
      api.streamDestroy(stream);
    }
    if (workspace)
      api.free(workspace);
    if (convWorkspace)
      api.free(convWorkspace);
    if (arena)
      api.free(arena);
  }
};

CudaExecutable::CudaExecutable(LoadedPackage package, CudaApi &api,
                               CudaOptions options)
    : package_(std::move(package)), api_(api), options_(std::move(options)) {}

CudaExecutable::~CudaExecutable() {
  if (stream_)
    api_.streamSynchronize(stream_);
  if (copyStream_)
    api_.streamSynchronize(copyStream_);
  if (graphExec_)
    api_.graphExecDestroy(graphExec_);
  if (graph_)
    api_.graphDestroy(graph_);
  conv_.reset();
  attention_.reset();
  epilogue_.reset();
  for (auto &[key, plan] : gemmPlans_)
    api_.gemmDestroy(plan);
  for (CudaModule m : modules_)
    if (m)
      api_.moduleUnload(m);
  for (Staging &s : staging_)
    for (void *p : s.slot)
      if (p)
        api_.freeHost(p);
  for (CudaEvent e : profileEvents_)
    api_.eventDestroy(e);
  for (CudaEvent e : {stepDone_, inputsReady_, slotFree_[0], slotFree_[1]})
    if (e)
      api_.eventDestroy(e);
  if (workspace_ && ownsWorkspace_)
    api_.free(workspace_);
  if (ownMemory_)
    api_.free(ownMemory_);
  if (copyStream_)
    api_.streamDestroy(copyStream_);
  // The arena, the step stream and a lent workspace go with lent_.
}

StatusOr<std::unique_ptr<CudaExecutable>>
CudaExecutable::create(LoadedPackage package, CudaApi &api, CudaOptions options) {
  if (package.target.kind != TargetKind::Cuda)
    return Status::error("the package targets the CPU: expected a CUDA package "
                         "(compile it with --target=cuda)");
  if (Status s = checkPackage(package); !s.isOk())
    return s;
  std::unique_ptr<CudaExecutable> exec(
      new CudaExecutable(std::move(package), api, std::move(options)));
  if (Status s = exec->prepare(); !s.isOk())
    return s;
  return exec;
}

std::vector<std::string> CudaExecutable::kernelOrigins() const {
  std::vector<std::string> lines;
  auto add = [&](const char *what, const RuntimeKernels *k) {
    if (k && k->loaded())
      lines.push_back(std::string(what) + " kernels " + k->origin());
  };
  add("attention", attention_ ? &attention_->kernels() : nullptr);
  add("convolution", conv_ ? &conv_->kernels() : nullptr);
  add("GEMM epilogue", epilogue_ ? &epilogue_->kernels() : nullptr);
  return lines;
}

std::pair<size_t, size_t> CudaExecutable::checkedKernelParameters() const {
  size_t checked = 0, loaded = 0;
  for (size_t k = 0; k < functions_.size(); ++k) {
    loaded += functions_[k] != nullptr;
    checked += paramSizes_[k].has_value();
  }
  return {checked, loaded};
}

void CudaExecutable::note(const std::string &text) {
  if (options_.log)
    options_.log(text);
  else
    std::fprintf(stderr, "%s\n", text.c_str());
}

std::string CudaExecutable::thunkName(size_t index) const {
  return "thunk " + std::to_string(index) + " (" +
         pkgDescribeThunk(package_, index) + ")";
}

void *CudaExecutable::deviceBuffer(uint32_t id) const {
  return id < bufferAddress_.size() ? bufferAddress_[id] : nullptr;
}

bool CudaExecutable::overwritten(uint32_t id) const {
  return runs_.overwritten(this, id);
}

bool CudaExecutable::bound(uint32_t id) const {
  return sharedPlan_ && sharedPlan_->bound(id);
}

Status CudaExecutable::shareMemory() {
  CudaExecutable &host = *options_.shareMemoryWith;
  auto fail = [](const std::string &message) {
    return Status::error("running in another step's memory: " + message);
  };
  if (host.sharedPlan_)
    return fail("that step runs in another step's memory itself");
  if (host.options_.device != options_.device)
    return fail("that step is on CUDA device " +
                std::to_string(host.options_.device) + ", this one on " +
                std::to_string(options_.device));
  for (size_t i = 0; i < package_.thunks.size(); ++i)
    if (package_.thunks[i].kind == ThunkKind::Collective)
      return fail(thunkName(i) + ": a step with collectives runs in memory "
                                 "of its own");
  StatusOr<SharedArenaPlan> plan =
      planSharedArena(host.package_, package_, options_.boundInputs);
  if (!plan.isOk())
    return fail(plan.status().message());
  sharedPlan_ = std::move(plan.value());
  const SharedArenaPlan &placed = *sharedPlan_;
  // Its arena, stream and cuBLASLt workspace (when it has one as large),
  // kept while this executable lives.
  lent_ = host.lent_;
  arena_ = host.arena_;
  stream_ = host.stream_;
  if (host.workspace_ && host.workspaceBytes_ >= options_.gemmWorkspaceBytes) {
    workspace_ = host.workspace_;
    workspaceBytes_ = host.workspaceBytes_;
    ownsWorkspace_ = false;
    memory_.gemmWorkspace = 0;
  }
  // And its convolutions' workspace, when it holds this step's.
  if (memory_.convolution && lent_->convWorkspaceBytes >= memory_.convolution)
    memory_.convolution = 0;
  memory_.arena = placed.ownBytes;
  memory_.sharedArena = placed.sharedBytes;
  // Which buffers either step's runs may write over.
  SharedArenaRuns::join(host.runs_, runs_, placed);
  return Status::ok();
}

uint32_t CudaExecutable::gridFor(const PackageKernel &kernel) const {
  uint64_t perSm = 2048 / std::max<uint32_t>(kernel.block[0], 1);
  uint64_t cap =
      uint64_t(std::max(device_.multiprocessors, 1)) * std::max<uint64_t>(perSm, 1);
  uint64_t grid = std::min<uint64_t>(kernel.grid[0], cap);
  return static_cast<uint32_t>(std::max<uint64_t>(grid, 1));
}

int CudaExecutable::findInput(const std::string &name) const {
  return findSignatureEntry(package_.inputs, name);
}

int CudaExecutable::findOutput(const std::string &name) const {
  return findSignatureEntry(package_.outputs, name);
}

Status CudaExecutable::prepare() {
  StatusOr<CudaDeviceInfo> info = api_.deviceInfo(options_.device);
  if (!info.isOk())
    return info.status();
  device_ = info.value();
  if (Status s = api_.setDevice(options_.device); !s.isOk())
    return s;
  // cudaMalloc aligns to 256 bytes (at least); buffers sit at multiples of
  // the package's alignment from the base (checkPackage).
  if (package_.arenaAlignment > 256)
    return Status::error("the arena: the package asks for " +
                         std::to_string(package_.arenaAlignment) +
                         "-byte alignment, cudaMalloc gives 256");
  // A step that needs more memory than the device has free (its arena and
  // the workspaces its libraries are given at load, CudaMemory.h) is
  // refused before the allocation, with what would make it fit; so is a
  // failed one.
  StatusOr<bool> mma = attentionMmaFromEnv();
  if (!mma.isOk())
    return mma.status();
  memory_ = cudaStepMemory(package_, device_, options_.gemmWorkspaceBytes,
                           mma.value());
  if (options_.shareMemoryWith)
    if (Status s = shareMemory(); !s.isOk())
      return s;
  size_t freeBytes = 0, totalBytes = 0;
  bool knowFree = api_.memGetInfo(&freeBytes, &totalBytes).isOk();
  auto tooLarge = [&](const std::string &what) {
    std::string message =
        "the step needs " + formatBytes(memory_.total()) + " on the device (" +
        describeStepMemory(memory_) +
        "; the arena holds the parameters, optimizer state, batch and "
        "activations)";
    if (knowFree)
      message += " and CUDA device " + std::to_string(options_.device) +
                 " (" + device_.name + ") has " + formatBytes(freeBytes) +
                 " free of " + formatBytes(totalBytes);
    return Status::error(
        message + what +
        "; compile the model again with --memory-budget=SIZE under what is "
        "free (kiln recomputes activations to fit), a smaller batch or "
        "--grad-accum, --amp=bf16 or a ZeRO strategy");
  };
  if (knowFree && memory_.total() > freeBytes)
    return tooLarge("");
  bufferAddress_.resize(package_.buffers.size());
  if (sharedPlan_) {
    if (sharedPlan_->ownBytes) {
      void *own = nullptr;
      if (Status s = api_.malloc(&own, sharedPlan_->ownBytes); !s.isOk())
        return tooLarge(" (its own memory: " + s.message() + ")");
      ownMemory_ = static_cast<uint8_t *>(own);
    }
    for (size_t id = 0; id < bufferAddress_.size(); ++id) {
      const SharedArenaPlan::Location &at = sharedPlan_->buffers[id];
      bufferAddress_[id] =
          (at.memory == SharedArenaPlan::Memory::Own ? ownMemory_ : arena_) +
          at.offset;
    }
  } else {
    void *arena = nullptr;
    if (Status s =
            api_.malloc(&arena, std::max<uint64_t>(package_.arenaSize, 1));
        !s.isOk())
      return tooLarge(" (the arena: " + s.message() + ")");
    arena_ = static_cast<uint8_t *>(arena);
    lent_ = std::make_shared<Lent>(api_);
    lent_->arena = arena_;
    for (size_t id = 0; id < bufferAddress_.size(); ++id)
      bufferAddress_[id] = arena_ + package_.buffers[id].offset;
    if (Status st = api_.streamCreate(&stream_); !st.isOk())
      return st;
    lent_->stream = stream_;
  }
  if (Status st = api_.streamCreate(&copyStream_); !st.isOk())
    return st;
  for (CudaEvent *e : {&stepDone_, &inputsReady_, &slotFree_[0], &slotFree_[1]})
    if (Status st = api_.eventCreate(e); !st.isOk())
      return st;

  modules_.assign(package_.kernels.size(), nullptr);
  functions_.assign(package_.kernels.size(), nullptr);
  paramSizes_.assign(package_.kernels.size(), std::nullopt);
  kernelCode_.assign(package_.kernels.size(), KernelCode::Cubin);
  codeArch_.assign(package_.kernels.size(), 0);
  // Only kernels some thunk launches are loaded.
  std::vector<bool> used(package_.kernels.size(), false);
  for (const PackageThunk &t : package_.thunks)
    if (t.kind == ThunkKind::KernelLaunch)
      used[t.kernel] = true;
  // Kernels with the same code (the compiler gives a repeated fusion its
  // first kernel's: a GPT's blocks) share one module and function, so a
  // re-JIT (PTX or NVRTC for an architecture the package lacks) runs once
  // per distinct kernel. A repeat keeps its own launch shape.
  std::map<std::string_view, size_t> firstWithEntry;
  for (size_t k = 0; k < package_.kernels.size(); ++k) {
    if (!used[k])
      continue;
    const PackageKernel &pk = package_.kernels[k];
    auto first = firstWithEntry.find(pk.entryPoint);
    if (first != firstWithEntry.end() &&
        sameKernelCode(package_.kernels[first->second], pk)) {
      size_t j = first->second;
      functions_[k] = functions_[j];
      paramSizes_[k] = paramSizes_[j];
      kernelCode_[k] = kernelCode_[j];
      codeArch_[k] = codeArch_[j]; // modules_[k] stays null: j's unloads
      continue;
    }
    if (Status s = loadKernel(k); !s.isOk())
      return s;
    firstWithEntry.emplace(pk.entryPoint, k);
  }

  thunks_.resize(package_.thunks.size());
  for (size_t i = 0; i < package_.thunks.size(); ++i)
    nvtxNames_.push_back(nvtx::registerMessage(pkgDescribeThunk(package_, i)));
  nvtxGraphLaunch_ = nvtx::registerMessage(
      "graph launch: the step's " + std::to_string(thunks_.size()) + " thunks");
  for (size_t i = 0; i < package_.thunks.size(); ++i)
    if (Status s = planThunk(i); !s.isOk())
      return s;
  // Programmatic dependent launch: only after work that ends with a kernel
  // on the step's stream (a kernel, a cuBLASLt GEMM with or without its
  // epilogue kernel, an attention's kernels), never after a copy, a
  // collective or a convolution, nor for the step's first thunk (it
  // follows the input hand-over and the previous step's update copies).
  if (options_.programmaticLaunch && device_.smArch() >= 90)
    for (size_t i = 1; i < thunks_.size(); ++i) {
      const PackageThunk &t = package_.thunks[i], &before = package_.thunks[i - 1];
      bool afterKernel =
          before.kind == ThunkKind::KernelLaunch ||
          (before.kind == ThunkKind::LibraryCall &&
           (before.library == LibraryKind::Gemm ||
            before.library == LibraryKind::Attention ||
            before.library == LibraryKind::AttentionGrad));
      thunks_[i].programmatic = t.kind == ThunkKind::KernelLaunch && afterKernel &&
                                package_.kernels[t.kernel].programmaticLaunch &&
                                codeArch_[t.kernel] >= 90;
    }

  // The cuBLASLt workspace the thunks' plans made is lent with the arena.
  if (!sharedPlan_ && workspace_ && ownsWorkspace_) {
    lent_->workspace = workspace_;
    ownsWorkspace_ = false;
  }
  if (Status s = autotune(); !s.isOk())
    return s;

  for (const PkgUpdateCopy &u : pkgUpdateCopies(package_))
    updates_.push_back({deviceBuffer(u.from), deviceBuffer(u.to),
                        static_cast<size_t>(u.bytes)});
  if (!epilogueFallbacks_.empty()) {
    // One note per executable, not per step.
    std::string text = "kiln cuda: cuBLASLt offers no algorithm for these "
                       "GEMM epilogues on this device; each runs as the plain "
                       "GEMM then a runtime epilogue kernel:";
    const char *separator = " ";
    for (const auto &[what, indices] : epilogueFallbacks_) {
      text += separator;
      text += indices.size() == 1 ? "thunk " : "thunks ";
      for (size_t i = 0; i < indices.size(); ++i)
        text += (i ? ", " : "") + std::to_string(indices[i]);
      text += " (" + what + ")";
      separator = "; ";
    }
    text += " (cuBLASLt said: " + unsupportedGemms_.begin()->second + ")";
    note(text);
  }
  staging_.resize(package_.inputs.size());
  if (hasCollectives_ && !deviceCollectives_ && options_.graphs) {
    graphFallback_ = "the step has collectives, which run through the host "
                     "communicator: CUDA Graphs are off";
    note("kiln cuda: " + graphFallback_);
  }
  return Status::ok();
}

Status CudaExecutable::loadKernel(size_t index) {
  const PackageKernel &k = package_.kernels[index];
  std::string where = "kernel " + std::to_string(index) + " '" + k.name +
                      "' (" + k.entryPoint + ")";
  if (k.kind != KernelKind::Cuda)
    return Status::error(where + ": expected a CUDA kernel, found CPU code");
  unsigned arch = device_.smArch();
  std::string tried;
  CudaModule module = nullptr;
  auto load = [&](const void *image, size_t bytes, KernelCode code,
                  unsigned codeArch) {
    Status s = api_.moduleLoadData(&module, image, bytes);
    if (s.isOk()) {
      kernelCode_[index] = code;
      codeArch_[index] = codeArch;
      return true;
    }
    tried += std::string(tried.empty() ? "" : "; ") + kernelCodeName(code) +
             ": " + s.message();
    module = nullptr;
    return false;
  };
  bool loaded = false;
  for (const Cubin &c : k.cubins)
    if (c.arch == arch && !loaded)
      loaded = load(c.image.data(), c.image.size(), KernelCode::Cubin, c.arch);
  if (!loaded && !k.ptx.empty()) {
    unsigned target = ptxTarget(k.ptx);
    if (target && target <= arch) {
      std::string ptx = k.ptx; // NUL-terminated for the driver
      loaded = load(ptx.c_str(), ptx.size() + 1, KernelCode::Ptx, target);
    } else {
      tried += std::string(tried.empty() ? "" : "; ") + "ptx: for sm_" +
               std::to_string(target) + ", newer than the device";
    }
  }
  if (!loaded && !k.source.empty()) {
    std::string log;
    Status s = nvrtcCompileAndLoad(
        api_, k.source, k.entryPoint, arch, log,
        [&](const std::vector<uint8_t> &cubin) {
          return loaded = load(cubin.data(), cubin.size(), KernelCode::Nvrtc, arch);
        });
    if (!s.isOk())
      tried += std::string(tried.empty() ? "" : "; ") + "nvrtc: " + s.message();
  }
  if (!loaded)
    return Status::error(where + ": no code loads on device " +
                         std::to_string(device_.index) + " (sm_" +
                         std::to_string(arch) + "): the package has " +
                         std::to_string(k.cubins.size()) + " cubin(s)" +
                         (tried.empty() ? "" : " (" + tried + ")"));
  modules_[index] = module;
  if (Status s = api_.moduleGetFunction(&functions_[index], module,
                                        k.entryPoint.c_str());
      !s.isOk())
    return Status::error(where + ": " + s.message());
  std::vector<size_t> sizes;
  bool known = false;
  if (Status s = api_.funcParamSizes(functions_[index], sizes, known); !s.isOk())
    return Status::error(where + ": " + s.message());
  if (known)
    paramSizes_[index] = std::move(sizes);
  // A row cache over 48 KiB of dynamic shared memory (CudaEmitter.h): the
  // device must allow it, and the function must opt in before a launch.
  if (k.sharedMemoryBytes > kDefaultDynamicSharedBytes) {
    int optIn = device_.maxSharedMemoryPerBlockOptin;
    if (optIn > 0 && k.sharedMemoryBytes > uint32_t(optIn))
      return Status::error(
          where + ": needs " + std::to_string(k.sharedMemoryBytes) +
          " bytes of dynamic shared memory per block, and device " +
          std::to_string(device_.index) + " (sm_" + std::to_string(arch) +
          ") allows at most " + std::to_string(optIn) +
          " (cudaDevAttrMaxSharedMemoryPerBlockOptin); compile the package "
          "for this architecture (--target=cuda:sm_" + std::to_string(arch) +
          ")");
    if (Status s = api_.funcSetMaxDynamicSharedMemory(functions_[index],
                                                      k.sharedMemoryBytes);
        !s.isOk())
      return Status::error(where + ": " + s.message());
  }
  return Status::ok();
}

Status CudaExecutable::planThunk(size_t index) {
  const PackageThunk &t = package_.thunks[index];
  ThunkPlan &plan = thunks_[index];
  for (uint32_t id : t.operands)
    plan.args.push_back(deviceBuffer(id));
  for (uint32_t id : t.results)
    plan.args.push_back(deviceBuffer(id));
  auto fail = [&](const std::string &what) {
    return Status::error(thunkName(index) + ": " + what);
  };
  switch (t.kind) {
  case ThunkKind::KernelLaunch: {
    const PackageKernel &k = package_.kernels[t.kernel];
    if (k.block[0] == 0 || k.block[0] > 1024 || k.block[1] != 1 ||
        k.block[2] != 1)
      return fail("expected a block of 1 to 1024 threads in x, found (" +
                  std::to_string(k.block[0]) + ", " +
                  std::to_string(k.block[1]) + ", " +
                  std::to_string(k.block[2]) + ")");
    // Kiln's kernels loop grid-stride over x; a y or z the launch would
    // drop is refused rather than ignored.
    if (k.grid[1] != 1 || k.grid[2] != 1)
      return fail("expected a grid in x only, found (" +
                  std::to_string(k.grid[0]) + ", " + std::to_string(k.grid[1]) +
                  ", " + std::to_string(k.grid[2]) + ")");
    // A launch passes one pointer per operand and result: a kernel that
    // takes other parameters would read them from garbage.
    if (const std::optional<std::vector<size_t>> &sizes = paramSizes_[t.kernel]) {
      bool pointers = sizes->size() == plan.args.size() &&
                      std::all_of(sizes->begin(), sizes->end(), [](size_t b) {
                        return b == sizeof(void *);
                      });
      if (!pointers) {
        std::string list;
        for (size_t b : *sizes)
          list += (list.empty() ? "" : ", ") + std::to_string(b);
        return fail("the kernel takes " + std::to_string(sizes->size()) +
                    " parameter(s) of " + (list.empty() ? "no" : list) +
                    " bytes, but the thunk passes " +
                    std::to_string(plan.args.size()) + " buffer pointers (" +
                    std::to_string(t.operands.size()) + " operands, " +
                    std::to_string(t.results.size()) + " results)");
      }
    }
    plan.grid = {gridFor(k), 1, 1};
    for (void *&arg : plan.args)
      plan.params.push_back(&arg);
    return Status::ok();
  }
  case ThunkKind::Copy: {
    const PackageBuffer &from = package_.buffers[t.operands[0]];
    const PackageBuffer &to = package_.buffers[t.results[0]];
    if (from.size < to.size)
      return fail("copies " + std::to_string(to.size) + " bytes from a " +
                  std::to_string(from.size) + "-byte buffer");
    plan.copyBytes = to.size;
    return Status::ok();
  }
  case ThunkKind::Collective: {
    if (!options_.communicator && package_.metadata.worldSize == 1) {
      // A step compiled for one rank (a --strategy without --world-size):
      // each collective is the identity, a copy where it has a result
      // buffer of its own.
      if (t.operands.size() != 1 || t.results.size() != 1)
        return fail("a collective takes 1 operand and 1 result");
      const PackageBuffer &from = package_.buffers[t.operands[0]];
      const PackageBuffer &to = package_.buffers[t.results[0]];
      if (from.size != to.size)
        return fail("a collective of one rank from " +
                    std::to_string(from.size) + " bytes into " +
                    std::to_string(to.size));
      plan.identity = true;
      plan.copyBytes = t.operands[0] == t.results[0] ? 0 : to.size;
      return Status::ok();
    }
    hasCollectives_ = true;
    if (!options_.communicator)
      return fail("the package has collectives: expected a communicator "
                  "(NCCL or the host communicator), found none");
    const CollectiveKind kind = t.collective.kind;
    if (kind != CollectiveKind::AllReduce &&
        kind != CollectiveKind::ReduceScatter &&
        kind != CollectiveKind::AllGather && kind != CollectiveKind::Broadcast)
      return fail("unsupported collective");
    if (static_cast<int>(package_.metadata.worldSize) !=
        options_.communicator->worldSize())
      return fail("the package was compiled for " +
                  std::to_string(package_.metadata.worldSize) +
                  " ranks, the communicator has " +
                  std::to_string(options_.communicator->worldSize()));
    // NCCL's collectives run on the arena's device pointers, on the step's
    // stream; a host communicator's through host copies.
    deviceCollectives_ = options_.communicator->deviceCollectives();
    if (!deviceCollectives_)
      plan.hostScratch.resize(package_.buffers[t.operands[0]].size +
                              package_.buffers[t.results[0]].size);
    return Status::ok();
  }
  case ThunkKind::LibraryCall:
    break;
  }
  switch (t.library) {
  case LibraryKind::Gemm:
    break;
  case LibraryKind::Attention:
  case LibraryKind::AttentionGrad:
    // Fused attention: its own kernels (CudaAttention.h).
    if (!attention_) {
      StatusOr<std::unique_ptr<CudaAttention>> made =
          CudaAttention::create(package_, api_, device_);
      if (!made.isOk())
        return fail(made.status().message());
      attention_ = std::move(made.value());
    }
    if (Status s = attention_->plan(index, plan.args); !s.isOk())
      return fail(s.message());
    return Status::ok();
  case LibraryKind::Conv2D:
  case LibraryKind::Conv2DInputGrad:
  case LibraryKind::Conv2DFilterGrad: {
    // Convolutions: kernels plus a cuBLASLt GEMM (CudaConv.h), which
    // shares the GEMMs' workspace.
    if (!workspace_ && options_.gemmWorkspaceBytes) {
      if (Status s = api_.malloc(&workspace_, options_.gemmWorkspaceBytes);
          !s.isOk())
        return Status::error("the cuBLASLt workspace: " + s.message());
      workspaceBytes_ = options_.gemmWorkspaceBytes;
    }
    if (!conv_) {
      // Its workspace goes with the arena (lent_), so that a step running
      // in this one's memory uses it too; such a step uses the lender's.
      uint64_t bytes = convWorkspaceBytes(package_);
      if (bytes && !sharedPlan_ && !lent_->convWorkspace) {
        if (Status s = api_.malloc(&lent_->convWorkspace, bytes); !s.isOk())
          return fail("the convolution workspace (" + std::to_string(bytes) +
                      " bytes): " + s.message());
        lent_->convWorkspaceBytes = bytes;
      }
      StatusOr<std::unique_ptr<CudaConv>> made =
          CudaConv::create(package_, api_, device_, options_.allowTf32,
                           options_.autotune ? options_.gemmAlgorithms : 1,
                           lent_->convWorkspace, lent_->convWorkspaceBytes);
      if (!made.isOk())
        return fail(made.status().message());
      conv_ = std::move(made.value());
    }
    if (Status s = conv_->plan(index, plan.args, workspaceBytes_); !s.isOk())
      return fail(s.message());
    return Status::ok();
  }
  }
  return planGemm(index);
}

Status CudaExecutable::runCollective(size_t index) {
  const PackageThunk &t = package_.thunks[index];
  ThunkPlan &plan = thunks_[index];
  const PackageBuffer &in = package_.buffers[t.operands[0]];
  const PackageBuffer &out = package_.buffers[t.results[0]];
  if (deviceCollectives_) {
    // Enqueued on the step's stream between its kernels (and captured
    // with them into the step's graph); nothing waits here.
    dist::DeviceCollectives &dc = *deviceCollectives_;
    const CollectiveParams &c = t.collective;
    int64_t inCount = elementCount(in.shape), outCount = elementCount(out.shape);
    switch (c.kind) {
    case CollectiveKind::AllReduce:
      return dc.enqueueAllReduce(plan.args[0], plan.args[1], inCount, in.dtype,
                                 c.reduction, stream_);
    case CollectiveKind::ReduceScatter:
      return dc.enqueueReduceScatter(plan.args[0], plan.args[1], outCount,
                                     in.dtype, c.reduction, stream_);
    case CollectiveKind::AllGather:
      return dc.enqueueAllGather(plan.args[0], plan.args[1], inCount, in.dtype,
                                 stream_);
    default:
      return dc.enqueueBroadcast(plan.args[0], plan.args[1], inCount, in.dtype,
                                 static_cast<int>(c.root), stream_);
    }
  }
  uint8_t *hostIn = plan.hostScratch.data();
  uint8_t *hostOut = hostIn + in.size;
  if (Status s = api_.memcpyAsync(hostIn, plan.args[0], in.size,
                                  CopyKind::DeviceToHost, stream_);
      !s.isOk())
    return s;
  if (Status s = api_.streamSynchronize(stream_); !s.isOk())
    return s;
  dist::Communicator &comm = *options_.communicator;
  const CollectiveParams &c = t.collective;
  int64_t inCount = elementCount(in.shape), outCount = elementCount(out.shape);
  Status s;
  switch (c.kind) {
  case CollectiveKind::AllReduce:
    s = comm.allReduce(hostIn, hostOut, inCount, in.dtype, c.reduction);
    break;
  case CollectiveKind::ReduceScatter:
    s = comm.reduceScatter(hostIn, hostOut, outCount, in.dtype, c.reduction);
    break;
  case CollectiveKind::AllGather:
    s = comm.allGather(hostIn, hostOut, inCount, in.dtype);
    break;
  default:
    s = comm.broadcast(hostIn, hostOut, inCount, in.dtype,
                       static_cast<int>(c.root));
    break;
  }
  if (!s.isOk())
    return s;
  if (Status st = api_.memcpyAsync(plan.args[1], hostOut, out.size,
                                   CopyKind::HostToDevice, stream_);
      !st.isOk())
    return st;
  // The host buffer must stay untouched until the copy has read it.
  return api_.streamSynchronize(stream_);
}

Status CudaExecutable::enqueueThunk(size_t index) {
  const PackageThunk &t = package_.thunks[index];
  ThunkPlan &plan = thunks_[index];
  Status s;
  switch (t.kind) {
  case ThunkKind::KernelLaunch: {
    const PackageKernel &k = package_.kernels[t.kernel];
    // Not while profiling: the events between thunks would order them
    // anyway, and each thunk's time should be its own.
    if (plan.programmatic && !profiling_ && pdlFallback_.empty()) {
      s = api_.launchKernelProgrammatic(functions_[t.kernel], plan.grid,
                                        k.block, k.sharedMemoryBytes, stream_,
                                        plan.params.data(), plan.params.size());
      if (s.isOk())
        break;
      // A driver or device that refuses the attribute: plain launches
      // from now on (an error a plain launch meets too still fails).
      pdlFallback_ = "programmatic dependent launch failed at " +
                     thunkName(index) + " (" + s.message() +
                     "): plain launches from now on";
      note("kiln cuda: " + pdlFallback_);
    }
    s = api_.launchKernel(functions_[t.kernel], plan.grid, k.block,
                          k.sharedMemoryBytes, stream_, plan.params.data(),
                          plan.params.size());
    break;
  }
  case ThunkKind::LibraryCall:
    if (t.library == LibraryKind::Attention ||
        t.library == LibraryKind::AttentionGrad) {
      s = attention_->run(index, stream_);
      break;
    }
    if (t.library != LibraryKind::Gemm) {
      s = conv_->run(index, stream_, workspace_, workspaceBytes_);
      break;
    }
    s = queueGemm(index, stream_);
    // An epilogue cuBLASLt had no algorithm for: its kernel(s) after the
    // plain GEMM, on the same stream.
    if (s.isOk() && plan.epilogueKernel)
      s = epilogue_->run(index, stream_);
    break;
  case ThunkKind::Copy:
    s = api_.memcpyAsync(plan.args[1], plan.args[0], plan.copyBytes,
                         CopyKind::DeviceToDevice, stream_);
    break;
  case ThunkKind::Collective:
    if (!plan.identity)
      s = runCollective(index);
    else if (plan.copyBytes)
      s = api_.memcpyAsync(plan.args[1], plan.args[0], plan.copyBytes,
                           CopyKind::DeviceToDevice, stream_);
    break;
  }
  if (!s.isOk())
    return Status::error(thunkName(index) + ": " + s.message());
  return Status::ok();
}

Status CudaExecutable::enqueueStep() {
  if (profiling_)
    profileStepStart_ = std::chrono::steady_clock::now();
  for (size_t i = 0; i < thunks_.size(); ++i) {
    nvtx::Range range(nvtxNames_[i]);
    if (profiling_)
      if (Status s = api_.eventRecord(profileEvents_[2 * i], stream_); !s.isOk())
        return s;
    if (Status s = enqueueThunk(i); !s.isOk())
      return s;
    if (profiling_)
      if (Status s = api_.eventRecord(profileEvents_[2 * i + 1], stream_);
          !s.isOk())
        return s;
  }
  for (const UpdateCopy &u : updates_)
    if (Status s = api_.memcpyAsync(u.to, u.from, u.bytes,
                                    CopyKind::DeviceToDevice, stream_);
        !s.isOk())
      return Status::error("updates copy: " + s.message());
  return Status::ok();
}

Status CudaExecutable::onThisThread() {
  if (std::this_thread::get_id() == current_)
    return Status::ok();
  if (Status s = api_.setDevice(options_.device); !s.isOk())
    return s;
  current_ = std::this_thread::get_id();
  return Status::ok();
}

Status CudaExecutable::run() {
  if (Status s = onThisThread(); !s.isOk())
    return s;
  if (inputsPending_) {
    if (Status s = api_.streamWaitEvent(stream_, inputsReady_); !s.isOk())
      return s;
    inputsPending_ = false;
  }
  if (profiling_ && profilePending_)
    if (Status s = collectProfile(); !s.isOk())
      return s;
  // From its first thunk on, the step writes over the free space it lends
  // or borrows (CudaOptions::shareMemoryWith).
  runs_.started(this);
  Status result;
  auto launchGraph = [&] {
    nvtx::Range range(nvtxGraphLaunch_);
    return api_.graphLaunch(graphExec_, stream_);
  };
  if (graphExec_ && !profiling_) {
    result = launchGraph();
  } else if (options_.graphs && graphFallback_.empty() && steps_ >= 1 &&
             !profiling_) {
    // The second step is captured, then launched as a graph.
    std::string failure;
    nvtx::push("capturing the step into a CUDA Graph");
    if (Status s = api_.streamBeginCapture(stream_); !s.isOk()) {
      failure = s.message();
    } else {
      Status enqueued = enqueueStep();
      CudaGraph graph = nullptr;
      Status ended = api_.streamEndCapture(stream_, &graph);
      if (!enqueued.isOk())
        failure = enqueued.message();
      else if (!ended.isOk())
        failure = ended.message();
      if (graph && failure.empty()) {
        graph_ = graph;
        if (Status s = api_.graphInstantiate(&graphExec_, graph_); !s.isOk()) {
          failure = s.message();
          graphExec_ = nullptr;
        }
      } else if (graph) {
        api_.graphDestroy(graph);
      }
    }
    nvtx::pop();
    if (failure.empty()) {
      result = launchGraph();
    } else {
      graphFallback_ = "capturing the step into a CUDA Graph failed (" +
                       failure + "): plain launches from now on";
      note("kiln cuda: " + graphFallback_);
      result = enqueueStep();
    }
  } else {
    result = enqueueStep();
  }
  if (!result.isOk())
    return result;
  if (profiling_)
    profilePending_ = true;
  ++steps_;
  return api_.eventRecord(stepDone_, stream_);
}

Status CudaExecutable::waitForStream() {
  // A stream holding NCCL's collectives waits on the other ranks: poll it
  // within the communicator's timeout, naming a rank that died, before
  // cudaStreamSynchronize (which would wait for ever).
  if (deviceCollectives_)
    if (Status s = deviceCollectives_->waitStream(stream_); !s.isOk())
      return s;
  return api_.streamSynchronize(stream_);
}

Status CudaExecutable::synchronize() {
  if (Status s = api_.streamSynchronize(copyStream_); !s.isOk())
    return s;
  return waitForStream();
}

Status CudaExecutable::readBuffer(uint32_t id, void *host) {
  if (Status s = onThisThread(); !s.isOk())
    return s;
  if (id >= package_.buffers.size())
    return Status::error("buffer " + std::to_string(id) + ": out of range");
  if (overwritten(id))
    return Status::error(
        "reading buffer '" + package_.buffers[id].name +
        "': the step that shares this one's memory ran after this one's last "
        "step and wrote over it; read a step's outputs before running the "
        "other");
  if (Status s = api_.memcpyAsync(host, deviceBuffer(id),
                                  package_.buffers[id].size,
                                  CopyKind::DeviceToHost, stream_);
      !s.isOk())
    return Status::error("reading buffer '" + package_.buffers[id].name +
                         "': " + s.message());
  return waitForStream();
}

Status CudaExecutable::writeBuffer(uint32_t id, const void *host) {
  if (Status s = onThisThread(); !s.isOk())
    return s;
  if (id >= package_.buffers.size())
    return Status::error("buffer " + std::to_string(id) + ": out of range");
  if (bound(id))
    return Status::error("writing buffer '" + package_.buffers[id].name +
                         "': it is read in place from the buffer of the step "
                         "this one shares memory with; write that one");
  if (Status s = api_.memcpyAsync(deviceBuffer(id), host,
                                  package_.buffers[id].size,
                                  CopyKind::HostToDevice, stream_);
      !s.isOk())
    return Status::error("writing buffer '" + package_.buffers[id].name +
                         "': " + s.message());
  return waitForStream();
}

Status CudaExecutable::copyBuffer(uint32_t id, CudaExecutable &from,
                                  uint32_t fromId) {
  if (Status s = onThisThread(); !s.isOk())
    return s;
  if (id >= package_.buffers.size())
    return Status::error("buffer " + std::to_string(id) + ": out of range");
  if (fromId >= from.package_.buffers.size())
    return Status::error("the source's buffer " + std::to_string(fromId) +
                         ": out of range");
  const PackageBuffer &to = package_.buffers[id];
  const PackageBuffer &source = from.package_.buffers[fromId];
  std::string what =
      "copying buffer '" + source.name + "' into '" + to.name + "'";
  if (&from.api_ != &api_ || from.options_.device != options_.device)
    return Status::error(
        what + ": the source step runs on device " +
        std::to_string(from.options_.device) + ", this one on device " +
        std::to_string(options_.device) + "; copy through the host");
  if (source.size != to.size)
    return Status::error(what + ": " + std::to_string(source.size) +
                         " bytes into " + std::to_string(to.size));
  if (bound(id))
    return Status::error(what + ": '" + to.name +
                         "' is read in place from the buffer of the step this "
                         "one shares memory with; write that one");
  if (from.overwritten(fromId))
    return Status::error(what + ": the step that shares the source's memory "
                                "ran after its last step and wrote over it");
  // The source step's last run is on its own stream.
  if (from.stream_ != stream_)
    if (Status s = from.waitForStream(); !s.isOk())
      return Status::error(what + ": " + s.message());
  if (Status s = api_.memcpyAsync(deviceBuffer(id), from.deviceBuffer(fromId),
                                  to.size, CopyKind::DeviceToDevice, stream_);
      !s.isOk())
    return Status::error(what + ": " + s.message());
  return waitForStream();
}

Status CudaExecutable::readOutput(size_t i, void *host) {
  if (i >= package_.outputs.size())
    return Status::error("output " + std::to_string(i) + ": out of range");
  return readBuffer(package_.outputs[i].buffer, host);
}

Status CudaExecutable::writeInput(size_t i, const void *host) {
  if (i >= package_.inputs.size())
    return Status::error("input " + std::to_string(i) + ": out of range");
  return writeBuffer(package_.inputs[i].buffer, host);
}

Status CudaExecutable::initialize() {
  std::vector<std::vector<uint8_t>> images(package_.inputs.size());
  std::vector<int> inputOfBuffer(package_.buffers.size(), -1);
  for (size_t i = 0; i < package_.inputs.size(); ++i) {
    images[i].assign(package_.buffers[package_.inputs[i].buffer].size, 0);
    inputOfBuffer[package_.inputs[i].buffer] = static_cast<int>(i);
  }
  for (const ParameterInit &init : package_.parameterInits) {
    int input = inputOfBuffer[init.buffer];
    if (input < 0)
      return Status::error("the initializer of buffer '" +
                           package_.buffers[init.buffer].name +
                           "': expected a signature input's buffer");
    writeInitialValue(package_.buffers[init.buffer], init,
                      images[input].data());
  }
  // Parameter copies start as their parameters' values.
  for (size_t i = 0; i < package_.inputs.size(); ++i)
    if (package_.inputs[i].role == PkgRole::ParameterCopy)
      pkgFillParameterCopy(package_, i,
                           images[package_.inputs[i].copyOf].data(),
                           images[i].data());
  // A bound input is the other step's (CudaOptions::boundInputs).
  for (size_t i = 0; i < images.size(); ++i)
    if (bound(package_.inputs[i].buffer))
      continue;
    else if (Status s = writeInput(i, images[i].data()); !s.isOk())
      return s;
  return Status::ok();
}

StatusOr<void *> CudaExecutable::hostInput(size_t i) {
  if (i >= staging_.size())
    return Status::error("input " + std::to_string(i) + ": out of range");
  Staging &s = staging_[i];
  if (!s.slot[slot_]) {
    size_t bytes = package_.buffers[package_.inputs[i].buffer].size;
    for (void *&p : s.slot)
      if (Status st = api_.mallocHost(&p, std::max<size_t>(bytes, 1)); !st.isOk())
        return Status::error("staging input '" + package_.inputs[i].name +
                             "': " + st.message());
  }
  // The copy that last read this slot must be done.
  if (Status st = api_.eventSynchronize(slotFree_[slot_]); !st.isOk())
    return st;
  s.dirty = true;
  return s.slot[slot_];
}

Status CudaExecutable::submitInputs() {
  if (Status s = onThisThread(); !s.isOk())
    return s;
  bool any = false;
  for (size_t i = 0; i < staging_.size(); ++i) {
    Staging &s = staging_[i];
    if (!s.dirty)
      continue;
    if (!any) {
      // Not before the previous step has read the inputs.
      if (Status st = api_.streamWaitEvent(copyStream_, stepDone_); !st.isOk())
        return st;
      any = true;
    }
    uint32_t id = package_.inputs[i].buffer;
    if (Status st = api_.memcpyAsync(deviceBuffer(id), s.slot[slot_],
                                     package_.buffers[id].size,
                                     CopyKind::HostToDevice, copyStream_);
        !st.isOk())
      return Status::error("input '" + package_.inputs[i].name +
                           "': " + st.message());
    s.dirty = false;
  }
  if (!any)
    return Status::ok();
  if (Status st = api_.eventRecord(slotFree_[slot_], copyStream_); !st.isOk())
    return st;
  if (Status st = api_.eventRecord(inputsReady_, copyStream_); !st.isOk())
    return st;
  inputsPending_ = true;
  slot_ ^= 1;
  return Status::ok();
}

StatusOr<std::pair<uint64_t, uint64_t>> CudaExecutable::deviceMemoryInUse() {
  if (Status s = onThisThread(); !s.isOk())
    return s;
  size_t freeBytes = 0, totalBytes = 0;
  if (Status s = api_.memGetInfo(&freeBytes, &totalBytes); !s.isOk())
    return s;
  return std::make_pair(uint64_t(totalBytes - std::min(freeBytes, totalBytes)),
                        uint64_t(totalBytes));
}

void CudaExecutable::setProfiling(bool enabled) {
  profiling_ = enabled;
  profilePending_ = false;
  profile_.assign(thunks_.size(), {});
  if (enabled && profileEvents_.empty()) {
    profileEvents_.assign(2 * thunks_.size(), nullptr);
    for (CudaEvent &e : profileEvents_)
      if (!api_.eventCreate(&e).isOk()) {
        profiling_ = false;
        note("kiln cuda: cannot create profiling events: profiling is off");
        return;
      }
  }
}

std::vector<ThunkTime> CudaExecutable::thunkTimes() const {
  return runtime::thunkTimes(package_, profile_,
                             [](const CudaThunkProfile &t, ThunkTime &row) {
                               row.ms = t.totalMs;
                               row.lastStartMs = t.lastStartMs;
                               row.lastMs = t.lastMs;
                             });
}

Status CudaExecutable::collectProfile() {
  if (!profilePending_)
    return Status::ok();
  if (Status s = waitForStream(); !s.isOk())
    return s;
  for (size_t i = 0; i < thunks_.size(); ++i) {
    float ms = 0, start = 0;
    if (Status s = api_.eventElapsedMs(&ms, profileEvents_[2 * i],
                                       profileEvents_[2 * i + 1]);
        !s.isOk())
      return Status::error(thunkName(i) + ": " + s.message());
    if (i)
      if (Status s = api_.eventElapsedMs(&start, profileEvents_[0],
                                         profileEvents_[2 * i]);
          !s.isOk())
        return Status::error(thunkName(i) + ": " + s.message());
    profile_[i].totalMs += ms;
    ++profile_[i].calls;
    profile_[i].lastStartMs = start;
    profile_[i].lastMs = ms;
  }
  profilePending_ = false;
  return Status::ok();
}

} // namespace kiln::runtime::cuda
