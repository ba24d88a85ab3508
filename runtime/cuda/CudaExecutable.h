//===- CudaExecutable.h - a CUDA package, ready to run steps on a GPU -*- C++ -*-===//
//
// The GPU counterpart of runtime/cpu/Executable.h. A CudaExecutable owns one
// LoadedPackage of target kind Cuda and, on one device, everything a step
// needs, all made once by create():
//
//   - the arena: one device allocation of the package's arena size; buffer
//     i lives at arena + buffers[i].offset (the buffer plan as it is); or,
//     with CudaOptions::shareMemoryWith, another executable's arena, its
//     stream and its cuBLASLt workspace, each buffer where
//     runtime/package/SharedArena.h places it (kiln train's eval step);
//   - one module per kernel: the package's cubin for the device's sm_NN,
//     else its PTX through the driver's JIT (when the PTX's .target is not
//     newer than the device), else the kernel's source compiled by NVRTC for
//     the device (KernelCode says which, per kernel); a kernel whose
//     sharedMemoryBytes (its row cache's dynamic shared memory) exceed
//     48 KiB opts in with cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES),
//     after checking the device allows that much per block (an error
//     naming the kernel otherwise); kernels whose code is the same (the
//     same entry point, cubins, PTX, source and shared memory: the
//     compiler gives a repeated fusion its first kernel's code) share the
//     first one's module and function, so a GPT-2's 78 kernels load 23
//     modules and a re-JIT runs once per distinct kernel;
//   - per thunk, its launch: KernelLaunch -> cuLaunchKernel with
//     block = kernel.block and grid.x = min(kernel.grid.x, multiprocessors
//     * (2048 / block.x)) (CudaCompile.h's rule: every kernel loops
//     grid-stride) and the kernel's sharedMemoryBytes of dynamic shared
//     memory, parameters the thunk's operands then results;
//     LibraryCall Gemm -> cuBLASLt with the thunk's epilogue (bias, ReLU,
//     GELU, bias gradient: the package's GemmParams), planned at load
//     (one plan per distinct GEMM shape, holding the heuristic's first
//     algorithms; with CudaOptions::autotune each shape's are timed
//     at the end of create() and the fastest kept, Autotune.h) with
//     one workspace for all GEMMs; an epilogue cuBLASLt offers no algorithm
//     for on the device runs as the plain GEMM then CudaEpilogue.h's
//     kernel on the same stream (one note per executable lists them);
//     Copy -> cudaMemcpyAsync;
//     Collective -> with a communicator that has DeviceCollectives (NCCL),
//     enqueued on the step's stream on the arena's device pointers (and
//     captured into the step's graph with the kernels around it); with a
//     host communicator (Gloo), through host staging, graphs off; refused
//     by create() without one; Conv2D* -> im2col / col2im kernels and a
//     batched cuBLASLt GEMM (CudaConv.h), planned at load; Attention /
//     AttentionGrad -> the fused attention kernels (CudaAttention.h),
//     planned at load;
//   - streams: one for the step, one for input copies; events for the
//     profile and for the input hand-over;
//   - pinned host staging for the data inputs, two slots: the host fills
//     one (hostInput) while the previous batch's copy may still run;
//     submitInputs() queues the copy on the copy stream after the previous
//     step, and the next run() waits for it on the GPU, not the host.
//
// run() queues one step: the thunks, then the updates copies (outputs into
// the inputs they update, so the next step reads the new parameters). The
// first step runs as plain launches (the warm-up: cuBLASLt and the modules
// are exercised once); with CudaOptions::graphs the second step is
// captured into a CUDA Graph and every later step is one graph launch. A
// capture that fails falls back to plain launches for good, and
// graphFallbackReason() (also handed to CudaOptions::log) says why.
// run() does not wait for the GPU; readBuffer, readOutput and
// synchronize() do.
//
// Every CUDA call goes through the CudaApi table (CudaApi.h), so tests run
// all of this with a fake table and no GPU. A failure comes back as a
// Status naming the thunk, its kernel and the failed call.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_CUDA_CUDAEXECUTABLE_H
#define KILN_RUNTIME_CUDA_CUDAEXECUTABLE_H

#include "runtime/Status.h"
#include "runtime/cuda/Autotune.h"
#include "runtime/cuda/CudaApi.h"
#include "runtime/cuda/CudaMemory.h"
#include "runtime/metrics/Nvtx.h"
#include "runtime/metrics/ThunkProfile.h"
#include "runtime/package/Package.h"
#include "runtime/package/SharedArena.h"

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace kiln::runtime::dist {
class Communicator;
class DeviceCollectives;
} // namespace kiln::runtime::dist

namespace kiln::runtime::cuda {

class CudaAttention;
class CudaExecutable;
class CudaConv;
class CudaEpilogue;

struct CudaOptions {
  int device = 0;
  // CUDA Graph capture of the whole step after the warm-up step.
  bool graphs = true;
  // Programmatic dependent launch (sm_90 on): a kernel whose loaded code
  // waits for the kernel before it (PackageKernel::programmaticLaunch, code
  // for sm_90 or newer) and that follows a kernel, a GEMM or an attention
  // thunk is launched with programmatic stream serialization, so its
  // blocks start while that one finishes (not while profiling).
  bool programmaticLaunch = true;
  // f32 GEMMs on TF32 tensor cores (f16 and bf16 always accumulate in f32).
  bool allowTf32 = false;
  // cuBLASLt's workspace, allocated once (32 MiB suits Hopper).
  size_t gemmWorkspaceBytes = 32u << 20;
  // Times, at load, cuBLASLt's first |gemmAlgorithms| algorithms for each
  // GEMM shape (the convolutions' too) and the attention's kernel variants
  // for each attention shape, forward and backward, and runs the fastest (Autotune.h); the choices are kept in
  // |autotuneCache| ("": autotuneCacheDirectory(), from $KILN_CACHE_DIR;
  // "off": not kept).
  bool autotune = true;
  int gemmAlgorithms = 8;
  std::string autotuneCache;
  // Each candidate's timing: |autotuneTrials| trials of |autotuneRuns|
  // runs after a warm-up (AutotuneOptions).
  int autotuneRuns = 3, autotuneTrials = 3;
  // Runs the Collective thunks (not owned): on device pointers on the
  // step's stream when it has deviceCollectives() (NCCL; waits for the
  // stream are then bounded by its timeout), else on host copies. Null: a
  // package with collectives is refused.
  dist::Communicator *communicator = nullptr;
  // Where notes go (the graph fallback's reason); null: stderr.
  std::function<void(const std::string &)> log;
  // Runs this step in another executable's memory (runtime/package/
  // SharedArena.h), as kiln train runs its eval step in the training
  // step's: |shareMemoryWith| (not owned; on the same device; its arena,
  // stream and workspace stay while either executable does) lends the
  // free space of its arena between its steps, its step stream (so the two
  // steps' work runs in the order of their run() calls) and its cuBLASLt
  // workspace; each of |boundInputs| (this
  // step's input, its input) is read in place from its buffer and is not
  // written by initialize() or writeBuffer(). A step with collectives
  // cannot share.
  CudaExecutable *shareMemoryWith = nullptr;
  std::vector<InputBinding> boundInputs;
};

// How a kernel's code reached the device.
enum class KernelCode { Cubin, Ptx, Nvrtc };
const char *kernelCodeName(KernelCode code);

// One recorded thunk's time over the profiled steps (events around it),
// and in the last of them when it started after the step's first thunk
// started and how long it took (a timeline of that step).
struct CudaThunkProfile {
  double totalMs = 0;
  uint64_t calls = 0;
  double lastStartMs = 0, lastMs = 0;
};

class CudaExecutable {
public:
  // |api| must outlive the executable.
  static StatusOr<std::unique_ptr<CudaExecutable>>
  create(LoadedPackage package, CudaApi &api, CudaOptions options = {});
  ~CudaExecutable();
  CudaExecutable(const CudaExecutable &) = delete;
  CudaExecutable &operator=(const CudaExecutable &) = delete;

  const LoadedPackage &package() const { return package_; }
  const CudaDeviceInfo &device() const { return device_; }
  // What the step takes on the device, by part (CudaMemory.h); running in
  // another step's memory, the arena part is its own memory alone.
  const CudaStepMemory &memory() const { return memory_; }
  // The step's device as cudaMemGetInfo sees it: the bytes in use (by every
  // process: the step's, the CUDA context's, the modules', the libraries'
  // state, NCCL's) and the device's total.
  StatusOr<std::pair<uint64_t, uint64_t>> deviceMemoryInUse();
  // Where the buffers went in the memory of CudaOptions::shareMemoryWith
  // (null without it).
  const SharedArenaPlan *sharedArena() const {
    return sharedPlan_ ? &*sharedPlan_ : nullptr;
  }

  // The device address of buffer |id| (null when out of range).
  void *deviceBuffer(uint32_t id) const;
  // The launch shape and code source of each kernel, for reports and tests.
  const std::vector<KernelCode> &kernelCode() const { return kernelCode_; }
  // Whether thunk |index| is launched with programmatic stream
  // serialization (CudaOptions::programmaticLaunch), and why such
  // launches stopped: the first one that failed falls back to a plain
  // launch, and so do all later ones ("" while they go on).
  bool programmaticLaunch(size_t index) const {
    return index < thunks_.size() && thunks_[index].programmatic &&
           pdlFallback_.empty();
  }
  const std::string &programmaticFallbackReason() const { return pdlFallback_; }
  uint32_t gridFor(const PackageKernel &kernel) const;

  size_t numInputs() const { return package_.inputs.size(); }
  size_t numOutputs() const { return package_.outputs.size(); }
  int findInput(const std::string &name) const;
  int findOutput(const std::string &name) const;

  // Gives every input its first value (the package's initializers and
  // parameter copies, as the CPU Executable does), computed on the host and
  // copied in.
  Status initialize();

  // Synchronous copies between the host and buffer |id| (all of it).
  // Where two executables share memory, a buffer the other's last run may
  // have written over (an output other than an update) cannot be read
  // until this one runs again: an error says so.
  Status readBuffer(uint32_t id, void *host);
  Status writeBuffer(uint32_t id, const void *host);
  Status readOutput(size_t i, void *host);
  Status writeInput(size_t i, const void *host);
  // Buffer |fromId| of |from| (an executable on the same device and API)
  // into buffer |id|, device to device, once |from|'s enqueued work is
  // done; synchronous. The two buffers hold the same bytes; |id| may not
  // be a bound input, nor |fromId| a buffer |from| cannot read (above).
  Status copyBuffer(uint32_t id, CudaExecutable &from, uint32_t fromId);

  // Pinned staging for signature input |i| (the current slot); valid until
  // submitInputs(). Waits until the slot's previous copy is done.
  StatusOr<void *> hostInput(size_t i);
  // Queues the copies of the inputs written through hostInput since the
  // last submit, after the previous step; the next run() waits for them.
  Status submitInputs();

  // Queues one step (see above).
  Status run();
  Status synchronize();

  // Whether steps now run as one graph launch, and why not when capture
  // failed ("" otherwise).
  bool usingGraph() const { return graphExec_ != nullptr; }
  const std::string &graphFallbackReason() const { return graphFallback_; }
  uint64_t steps() const { return steps_; }

  // Per-thunk times (an event pair around each thunk; turning it on
  // clears them and stops graph launches while it is on).
  void setProfiling(bool enabled);
  bool profiling() const { return profiling_; } // off if events failed
  Status collectProfile(); // waits for the step and adds its times
  const std::vector<CudaThunkProfile> &profile() const { return profile_; }
  // The same, each thunk named (ThunkProfile.h: what --profile writes).
  std::vector<ThunkTime> thunkTimes() const;
  // When, on the host's steady clock, the last profiled step's first
  // thunk was enqueued (its timeline's zero; the device may start it
  // later).
  std::chrono::steady_clock::time_point profileStepStart() const {
    return profileStepStart_;
  }

  // Each tuned shape (empty when autotuning was off, or when nothing had
  // two candidates or could be timed): the GEMM shapes in the order of
  // their first thunks ("gemm ..."), then the attention shapes
  // ("attention ...").
  const std::vector<Tuning> &tuning() const { return tuning_; }

  // Where the runtime's own kernel sets this executable loaded came from,
  // one line each: "attention kernels compiled by NVRTC in 5.43 s (kept in
  // DIR)", "... read from the cubin cache (DIR)", "... compiled earlier in
  // this process" (RuntimeKernels::origin; the attention, convolution and
  // GEMM epilogue sets, those it has).
  std::vector<std::string> kernelOrigins() const;

  // How many of the package's loaded kernels had their parameters checked
  // against their thunks' buffers (the driver said them), and how many
  // were loaded.
  std::pair<size_t, size_t> checkedKernelParameters() const;

private:
  CudaExecutable(LoadedPackage package, CudaApi &api, CudaOptions options);
  Status prepare();
  Status loadKernel(size_t index);
  Status planThunk(size_t index);
  // A GEMM thunk's cuBLASLt plan (CudaExecutableGemm.cpp).
  Status planGemm(size_t index);
  Status enqueueStep();
  Status enqueueThunk(size_t index);
  // Queues thunk |index|'s cuBLASLt call (a GEMM thunk's, without an
  // epilogue kernel that follows it) on |stream|.
  Status queueGemm(size_t index, CudaStream stream);
  // Autotune.h over every GEMM plan (the convolutions' too) and attention
  // thunk, at the end of prepare().
  Status autotune();
  Status runCollective(size_t index);
  // cudaStreamSynchronize of the step's stream, after the communicator's
  // bounded wait when the step has device collectives.
  Status waitForStream();
  std::string thunkName(size_t index) const;
  void note(const std::string &text);
  // Makes the device current on a thread other than create()'s (driver
  // calls need the context current on the calling thread).
  Status onThisThread();

  // Runs in options_.shareMemoryWith's memory (prepare()).
  Status shareMemory();
  // Whether buffer |id|'s bytes may have been written over by the run of
  // another executable sharing this one's memory, and whether it is a
  // bound input's (or within one).
  bool overwritten(uint32_t id) const;
  bool bound(uint32_t id) const;

  LoadedPackage package_;
  CudaApi &api_;
  CudaOptions options_;
  CudaDeviceInfo device_;
  CudaStepMemory memory_;
  uint8_t *arena_ = nullptr;
  void *workspace_ = nullptr;
  size_t workspaceBytes_ = 0;
  // Each buffer's device address: arena_ + its offset, or where
  // SharedArena.h placed it.
  std::vector<uint8_t *> bufferAddress_;
  // Running in another executable's memory: the placement, this step's own
  // memory and what it borrowed (not freed here).
  std::optional<SharedArenaPlan> sharedPlan_;
  uint8_t *ownMemory_ = nullptr;
  bool ownsWorkspace_ = true;
  // The arena, step stream and (once planned) cuBLASLt workspace of the
  // executable that allocated them, shared with those that run in its
  // memory: the last of them to go frees them.
  struct Lent;
  std::shared_ptr<Lent> lent_;
  // What a run of the executable sharing this one's memory may write over,
  // and which of the two ran last.
  SharedArenaRuns runs_;
  CudaStream stream_ = nullptr, copyStream_ = nullptr;
  CudaEvent stepDone_ = nullptr, inputsReady_ = nullptr;
  std::vector<CudaModule> modules_;
  std::vector<CudaFunction> functions_;
  // Each loaded kernel's parameter sizes, when the driver says them
  // (CudaApi::funcParamSizes): a launch must pass one pointer for each.
  std::vector<std::optional<std::vector<size_t>>> paramSizes_;
  std::vector<KernelCode> kernelCode_;
  // The architecture each loaded kernel's code was compiled for (its
  // cubin's, its PTX's .target, the device's for NVRTC).
  std::vector<unsigned> codeArch_;
  struct ThunkPlan {
    std::vector<void *> args;       // device pointers: operands, results
    std::vector<void *> params;     // &args[i], for cuLaunchKernel
    std::array<uint32_t, 3> grid{}; // kernel launches
    bool programmatic = false;      // launched with PDL (above)
    GemmPlan gemm = nullptr;
    // A GEMM's result (the aux buffer when an aux epilogue runs as a
    // kernel) and its epilogue's bias / bias gradient / C / aux (or null).
    void *gemmOut = nullptr, *bias = nullptr, *biasGrad = nullptr;
    void *c = nullptr, *aux = nullptr;
    std::string gemmKey; // its plan's shape (gemmPlans_'s key)
    // The epilogue runs as a kernel after the plain GEMM (cuBLASLt had no
    // algorithm for it): CudaEpilogue's plan of this thunk.
    bool epilogueKernel = false;
    size_t copyBytes = 0;
    // A collective of a step compiled for one rank: a copy of copyBytes
    // (none in place), with no communicator.
    bool identity = false;
    std::vector<uint8_t> hostScratch; // collectives' staging
  };
  std::vector<ThunkPlan> thunks_;
  // cuBLASLt plans by GEMM shape: thunks with the same GemmDesc share one
  // (the GPT's 12 blocks repeat a handful of shapes).
  std::map<std::string, GemmPlan> gemmPlans_;
  std::vector<Tuning> tuning_;
  // GEMM shapes whose epilogue cuBLASLt refused, with its message, and the
  // thunks (by shape and epilogue) that run it as a kernel instead.
  std::map<std::string, std::string> unsupportedGemms_;
  std::map<std::string, std::vector<size_t>> epilogueFallbacks_;
  std::unique_ptr<CudaEpilogue> epilogue_;
  // The convolutions' kernels, workspace and plans (made by the first).
  std::unique_ptr<CudaConv> conv_;
  // The fused attention's kernels, workspace and plans (made by the first).
  std::unique_ptr<CudaAttention> attention_;
  struct UpdateCopy {
    const void *from;
    void *to;
    size_t bytes;
  };
  std::vector<UpdateCopy> updates_;
  // Input staging: two pinned slots per input, allocated on first use.
  struct Staging {
    void *slot[2] = {nullptr, nullptr};
    bool dirty = false;
  };
  std::vector<Staging> staging_;
  CudaEvent slotFree_[2] = {nullptr, nullptr};
  int slot_ = 0;
  bool inputsPending_ = false;
  bool hasCollectives_ = false;
  dist::DeviceCollectives *deviceCollectives_ = nullptr;
  // Graphs.
  CudaGraph graph_ = nullptr;
  CudaGraphExec graphExec_ = nullptr;
  std::string graphFallback_;
  // Why programmatic launches stopped ("" while they go on).
  std::string pdlFallback_;
  uint64_t steps_ = 0;
  std::thread::id current_ = std::this_thread::get_id();
  // Profiling.
  bool profiling_ = false;
  std::vector<CudaEvent> profileEvents_; // one before each thunk, one after
  std::vector<CudaThunkProfile> profile_;
  bool profilePending_ = false;
  std::chrono::steady_clock::time_point profileStepStart_;
  // NVTX ranges (Nvtx.h): each thunk's as it is enqueued, and a graph
  // launch's.
  std::vector<nvtx::Message> nvtxNames_;
  nvtx::Message nvtxGraphLaunch_;
};

} // namespace kiln::runtime::cuda

#endif // KILN_RUNTIME_CUDA_CUDAEXECUTABLE_H
