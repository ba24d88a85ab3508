//===- FakeCudaApi.h - a CUDA table without a GPU, for tests -------*- C++ -*-===//
//
// A CudaApi (runtime/cuda/CudaApi.h) on the host: device memory is host
// memory (FakeDeviceMemory.h: 256-byte aligned, exactly the size asked
// for, 2 GiB in all), and every call is appended to |calls|
// ("cuLaunchKernel kiln_relu grid=3 block=256", "cublasLtMatmul",
// "cudaMemcpyAsync D2D 512", "cudaGraphLaunch", ...). While a stream is
// being captured, work is recorded into the graph instead of run, and
// cudaGraphLaunch replays it, as CUDA does (and what CUDA refuses during a
// capture, the fake refuses: below). Kernels run when the test
// registers a host function for their entry point (a kernel compiled for
// the host under codegen/cuda/CudaEmulation.h); GEMMs run on the host as
// cuBLASLt computes them (HostGemm.h).
//
// What a GPU would do that a host run would not show:
// - Bounds. Copies, memsets and GEMMs are checked against the allocation
//   their device pointer starts in: one that runs past it fails and is
//   noted in outOfBounds. Kernels whose arguments the fake knows
//   (kernelArgs, learnPackage) run on copies of them between guard bytes
//   (KernelIsolation.h); a kernel that writes outside them, or into one it
//   only reads, is a fault (kernelFaults), and that call and every later
//   one fail, as CUDA's sticky cudaErrorIllegalAddress does.
// - Stream order (StreamOrder.h). Each copy, memset, GEMM and kernel notes
//   the device and pinned bytes it reads and writes; two unordered
//   accesses from different streams, one a write, are a race: the second
//   call fails and |races| says which two. A captured graph's work is
//   checked when it is launched. With asyncStreams the work also runs as
//   late as CUDA allows: a stream's work is queued and runs only when the
//   host waits for it (a synchronize, or a cudaFree), a waited-for event's
//   stream running first up to its record, so a host that reads a result
//   or refills a pinned buffer without waiting sees the old bytes, as it
//   may on a GPU. dropSync makes the synchronizations it names do nothing
//   (to show that a test notices).
// - Limits. A launch of more than 1024 threads a block (64 in z), of more
//   than 2^31 - 1 blocks in x or 65535 in y or z, or with a dimension 0,
//   fails (CUDA_ERROR_INVALID_VALUE), as does one with more than 48 KiB of
//   dynamic shared memory beyond its entry point's cuFuncSetAttribute
//   opt-in; the device (a fake H200) allows 232448 bytes per block. A
//   cudaMalloc past the device's memory fails with out of memory. cudaFree
//   of a pointer that is no allocation fails.
// - Capture's rules, as CUDA applies them to a capture begun in
//   cudaStreamCaptureModeThreadLocal (the runtime's mode): on the
//   capturing thread, cudaMalloc, cudaMallocHost, cudaFree and
//   cudaFreeHost fail (cudaErrorStreamCaptureUnsupported); so do
//   synchronizing the capturing stream (the same code) and synchronizing
//   or timing an event last recorded in the capture
//   (cudaErrorCapturedEvent), from any thread; the capturing stream may
//   not wait on an event recorded outside the capture
//   (cudaErrorStreamCaptureIsolation). Each of these invalidates the
//   capture: its stream's work fails (cudaErrorStreamCaptureInvalidated)
//   and cudaStreamEndCapture returns that error and no graph. A GPU would
//   refuse the call; the fake's recording would have hidden it. A second
//   stream waiting on a captured event (a fork) is not modelled and fails.
// - GEMM pointers. A cublasLtMatmul whose pointers are less aligned than
//   its plan's GemmDesc::alignmentBytes (the MIN_ALIGNMENT preferences its
//   algorithms were chosen for) fails, as does one given less workspace
//   than its plan allowed its algorithms (planWorkspaceBytes).
// - cuBLASLt's refusals. refusedEpilogues makes gemmPlan answer as
//   cuBLASLt does when its heuristic has no algorithm for a GemmDesc
//   (CUBLAS_STATUS_NOT_SUPPORTED, reported as unsupported); a desc that
//   cuBLASLt refuses on every device (gemmLtRefusal) is refused the same
//   way.
//
// Failures and timing on demand: failCall/failAt make the failAt-th call
// (0-based) of that name fail. A GEMM plan holds min(desc.algorithms,
// gemmAlgorithms) algorithms (ids "fake-N"); with gemmAlgorithmMs set,
// each cublasLtMatmul advances a clock by its selected algorithm's time,
// eventRecord notes the clock and eventElapsedMs subtracts (else every
// elapsed time is 0.5 ms); runs of the algorithms in failAlgorithms fail
// to queue; with launchMs set, each kernel launch advances it by
// launchMs(entry point). timesWork() says whether either is set (the
// autotuner times nothing otherwise). cuFuncGetParamInfo (funcParamSizes)
// answers from paramSizes, or from the kernel's signature in the source
// NVRTC compiled.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TESTS_UNIT_CUDA_FAKECUDAAPI_H
#define KILN_TESTS_UNIT_CUDA_FAKECUDAAPI_H

#include "runtime/cuda/CudaApi.h"
#include "tests/unit/cuda/FakeDeviceMemory.h"
#include "tests/unit/cuda/HostGemm.h"
#include "tests/unit/cuda/KernelIsolation.h"
#include "tests/unit/cuda/StreamOrder.h"

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace kiln::runtime::cuda::testing {

class FakeCudaApi : public CudaApi {
public:
  CudaDeviceInfo device{0, "Fake H200", 9, 0, 132, 232448};
  std::vector<std::string> calls;
  // Per launch: the entry point, shape and arguments.
  struct Launch {
    std::string entry;
    std::array<uint32_t, 3> grid, block;
    std::vector<void *> args;
    uint32_t sharedMemoryBytes = 0;
    // Launched with programmatic stream serialization (recorded as
    // "cuLaunchKernelEx ...").
    bool programmatic = false;
  };
  // Per entry point, the dynamic shared memory it opted in to
  // (cuFuncSetAttribute); a launch with more than 48 KiB beyond it fails
  // as on a GPU.
  std::map<std::string, uint32_t> maxDynamicShared;
  std::vector<Launch> launches;
  struct Gemm {
    GemmDesc desc;
    const void *lhs, *rhs;
    void *out;
    const void *c = nullptr;
    void *aux = nullptr;
    int algorithm = 0;
  };
  std::vector<Gemm> gemms;
  int gemmAlgorithms = 1;
  std::function<double(const GemmDesc &, int)> gemmAlgorithmMs;
  std::set<int> failAlgorithms;
  std::function<double(const std::string &)> launchMs;
  bool timesWork() const override { return gemmAlgorithmMs || launchMs; }
  std::vector<GemmDesc> plans;
  // The workspace each plan's algorithms may use (cuBLASLt's
  // MAX_WORKSPACE_BYTES preference): a cublasLtMatmul that passes less
  // fails, as cuBLASLt fails it when its algorithm needs more.
  std::vector<size_t> planWorkspaceBytes;
  // The images handed to cuModuleLoadData, as text up to the first NUL.
  std::vector<std::string> loadedImages;
  std::vector<unsigned> nvrtcArchs;
  std::map<std::string, HostKernel> hostKernels;
  // Host functions by the image text their module was loaded from (taken
  // before hostKernels: two packages may use the same entry point name).
  std::map<std::string, HostKernel> hostKernelsByImage;
  // Parameter sizes by entry point, as cuFuncGetParamInfo gives them: set
  // by a test, else read from the kernel's signature in the source NVRTC
  // compiled (a pointer 8 bytes, an int, unsigned or float 4, else 8);
  // unknown for other images.
  std::map<std::string, std::vector<size_t>> paramSizes;
  // How many cuFuncGetParamInfo queries had an answer.
  int paramSizesKnown = 0;
  std::string failCall;
  int failAt = 0;
  // Every copy, memset and GEMM whose device bytes run past the allocation
  // they start in (or start in none), as "cublasLtMatmul lhs: 4096 bytes at
  // offset 256 of a 2048-byte allocation"; the call also fails. A GPU
  // would fault there or silently corrupt a neighbour, so tests assert
  // that this stays empty.
  std::vector<std::string> outOfBounds;
  std::set<GemmEpilogue> refusedEpilogues;
  bool capturing = false;
  // Replays launched graphs (false: a graph launch is only recorded).
  bool execute = true;
  // Defers each stream's work until the host waits for it (see above).
  bool asyncStreams = true;
  // Each race: "cudaMemcpyAsync H2D destination on stream 2 and
  // cuLaunchKernel kiln_relu argument 0 on stream 1, bytes 0..128 of a
  // 4096-byte allocation: nothing orders them"; the second call failed.
  std::vector<std::string> races;
  // When it answers true for (a synchronization's call name, how many
  // calls of that name came before), that call does nothing: for
  // "cudaStreamWaitEvent", "cudaStreamSynchronize" and
  // "cudaEventSynchronize".
  std::function<bool(const std::string &, int)> dropSync;
  // When set, every host kernel runs under it (CudaEmulation.h runs one
  // block at a time with static shared memory: tables on several threads
  // share one lock).
  std::mutex *kernelLock = nullptr;
  // What each pointer argument of a kernel may touch, by entry point.
  // learnPackage fills it from a package's kernel thunks (one pointer per
  // operand, read, then per result, written, as CudaExecutable launches
  // them); a kernel several thunks or packages launch gets the larger
  // extent of each argument. A kernel loaded from a learned package's own
  // code (one of its cubins, its PTX, or what NVRTC compiled from its
  // source) takes that package's own extents instead, whenever the package
  // was learned (a training step and its eval package both have a
  // kiln_fusion0, and each is held to its own). The runtime's own kernels
  // (attention, convolutions, epilogue fallbacks) get theirs from where
  // their parameters point (FakeDeviceMemory::extentsByAddress, from the
  // learned packages' arenas). A launch accesses its arguments' whole extents (for the race
  // check) and, with isolateKernels, runs on copies of them
  // (KernelIsolation.h); without known extents it accesses one byte at
  // each argument, taken as written, and runs in place.
  std::map<std::string, std::vector<KernelExtent>> kernelArgs;
  bool isolateKernels = true;
  // "kiln_fusion3 wrote 4 byte(s) after argument 2 (1024 bytes)".
  std::vector<std::string> kernelFaults;
  // Learns |pkg|'s kernels' arguments (kernelArgs, and by the kernels'
  // sources, cubins and PTX) and its arena's buffers.
  void learnPackage(const LoadedPackage &pkg);
  // The NVRTC this fake claims to be (nvrtcIdentity): "" by default, so
  // nothing is cached on disk (CubinCache.h) unless a test asks.
  std::string nvrtcIdentityText;
  // What gemmLibraryVersion answers.
  std::string library = "fake cuBLASLt 1";
  // Device memory another process holds: cudaMemGetInfo reports it used.
  size_t usedElsewhere = 0;

  // Host work on |stream| from outside the table (FakeNccl's collectives on
  // an executable's stream): queued as the stream's other work, or
  // recorded while it is captured.
  void hostWork(CudaStream stream, std::function<void()> fn);
  // How many calls start with |prefix|.
  size_t count(const std::string &prefix) const;

  // The CUDA calls (FakeCudaApi.cpp). The destructor is the class's key
  // function, so that its vtable, and with it every override, is compiled
  // once there rather than in each test source that includes this header.
  ~FakeCudaApi() override;
  std::string describe() const override { return "fake"; }
  StatusOr<CudaDeviceInfo> deviceInfo(int index) override;
  Status setDevice(int) override;
  Status malloc(void **ptr, size_t bytes) override;
  // The fake H200's memory less the live device allocations (pinned host
  // memory, allocated from the same pool here, is not device memory) and
  // usedElsewhere.
  Status memGetInfo(size_t *freeBytes, size_t *totalBytes) override;
  Status free(void *ptr) override;
  Status mallocHost(void **ptr, size_t bytes) override;
  Status freeHost(void *ptr) override;
  Status memcpyAsync(void *dst, const void *src, size_t bytes, CopyKind kind,
                     CudaStream stream) override;
  Status memsetAsync(void *dst, int value, size_t bytes,
                     CudaStream stream) override;
  Status streamCreate(CudaStream *stream) override;
  Status streamDestroy(CudaStream) override;
  Status streamSynchronize(CudaStream stream) override;
  Status streamWaitEvent(CudaStream stream, CudaEvent event) override;
  Status eventCreate(CudaEvent *event) override;
  Status eventDestroy(CudaEvent) override;
  Status eventRecord(CudaEvent event, CudaStream stream) override;
  Status eventSynchronize(CudaEvent event) override;
  Status eventElapsedMs(float *ms, CudaEvent start, CudaEvent end) override;
  Status streamBeginCapture(CudaStream stream) override;
  Status streamEndCapture(CudaStream, CudaGraph *graph) override;
  Status graphInstantiate(CudaGraphExec *exec, CudaGraph graph) override;
  Status graphLaunch(CudaGraphExec exec, CudaStream stream) override;
  Status graphDestroy(CudaGraph) override;
  Status graphExecDestroy(CudaGraphExec) override;
  Status moduleLoadData(CudaModule *module, const void *image,
                        size_t bytes) override;
  Status moduleUnload(CudaModule) override;
  Status moduleGetFunction(CudaFunction *function, CudaModule module,
                           const char *name) override;
  Status funcSetMaxDynamicSharedMemory(CudaFunction function,
                                       uint32_t bytes) override;
  Status funcParamSizes(CudaFunction function, std::vector<size_t> &sizes,
                        bool &known) override;
  Status launchKernel(CudaFunction function, const std::array<uint32_t, 3> &grid,
                      const std::array<uint32_t, 3> &block,
                      uint32_t sharedMemoryBytes, CudaStream stream,
                      void **params, size_t paramCount) override;
  Status launchKernelProgrammatic(CudaFunction function,
                                  const std::array<uint32_t, 3> &grid,
                                  const std::array<uint32_t, 3> &block,
                                  uint32_t sharedMemoryBytes, CudaStream stream,
                                  void **params, size_t paramCount) override;
  std::string nvrtcIdentity() override { return nvrtcIdentityText; }
  Status nvrtcCompile(const std::string &source, const std::string &name,
                      unsigned arch, std::vector<uint8_t> &cubin,
                      std::string &log) override;
  using CudaApi::gemmPlan;
  Status gemmPlan(GemmPlan *plan, const GemmDesc &desc, size_t,
                  bool *unsupported) override;
  int gemmAlgorithmCount(GemmPlan plan) override;
  int gemmSelectedAlgorithm(GemmPlan plan) override;
  Status gemmSelectAlgorithm(GemmPlan plan, int algorithm) override;
  StatusOr<GemmAlgorithm> gemmAlgorithm(GemmPlan plan, int algorithm) override;
  std::string gemmLibraryVersion() override { return library; }
  using CudaApi::gemmRun;
  Status gemmRun(GemmPlan plan, const void *lhs, const void *rhs, void *out,
                 const void *bias, void *biasGrad, const void *c, void *aux,
                 void *workspace, size_t workspaceBytes,
                 CudaStream stream) override;
  Status gemmDestroy(GemmPlan) override { return Status::ok(); }

private:
  // Work on a stream, as a captured graph holds it.
  struct Work {
    std::function<void()> fn;
    std::vector<DeviceAccess> accesses;
  };
  // Notes |call| in |calls|; fails it after a kernel fault, or when
  // failCall/failAt ask.
  Status enter(const std::string &call);
  // Fails (and notes in outOfBounds) unless [p, p + bytes) lies in one
  // live allocation.
  Status inBounds(const std::string &what, const void *p, uint64_t bytes);
  // A copy's device side(s): the destination of H2D, the source of D2H,
  // both of D2D.
  Status inBounds(const std::string &what, CopyKind kind, const void *dst,
                  const void *src, uint64_t bytes);
  // Work queued on |stream| that reads and writes |accesses|: recorded
  // while the stream is captured, else ordered (and checked for races)
  // and run (or queued, with asyncStreams).
  Status work(CudaStream stream, std::vector<DeviceAccess> accesses,
              std::function<void()> fn);
  // Orders work on |stream| (StreamOrder::queue), noting a race.
  Status order(CudaStream stream, const std::vector<DeviceAccess> &accesses);
  // Runs |fn| now, or queues it on |stream| (asyncStreams).
  Status dispatch(CudaStream stream, std::function<void()> fn);
  // Runs |stream|'s queued work up to (not including) its |until|-th
  // operation, a wait first running the waited-for stream to its record.
  void drain(CudaStream stream, uint64_t until);
  // The host waits for every stream (cudaFree, cudaFreeHost).
  void synchronizeAll();
  // cudaFree or cudaFreeHost (|call|) of |ptr|.
  Status release(const std::string &call, void *ptr);
  // Whether dropSync drops this call of |call| (then noted as dropped).
  bool dropped(const std::string &call);
  // After a kernel wrote outside its arguments: the error every call
  // returns from then on, as CUDA's does after an illegal access.
  Status faulted() const;
  // While a capture is in progress: the error |call| meets with CUDA's
  // |code| (as "cudaErrorCapturedEvent (907)") and |text|, after which the
  // capture is invalidated.
  Status breaksCapture(const std::string &call, const std::string &code,
                       const std::string &text);
  // cudaMalloc and its kind (|call|) on the capturing thread: refused.
  Status unsafeWhileCapturing(const std::string &call);
  // The capture's error for work queued on its stream after it was
  // invalidated, else ok.
  Status captureInvalidated(const std::string &call) const;
  // The extents learned for |function|'s kernel from the package whose
  // code it was loaded from (a cubin or PTX of the package, or an NVRTC
  // image of its source), or null.
  const std::vector<KernelExtent> *learnedExtents(size_t function) const;
  size_t planIndex(GemmPlan plan) const;

  FakeDeviceMemory memory_;
  std::map<void *, size_t> pinned_; // cudaMallocHost's, by address
  StreamOrder order_;
  bool programmatic_ = false; // the launch in progress is programmatic
  std::vector<int> selected_;
  double clock_ = 0;
  std::map<CudaEvent, double> eventClock_;
  std::map<std::string, int> seen_;
  std::vector<std::string> functions_;
  std::vector<std::string> functionImages_; // the image each was loaded from
  // Each loaded module's code key, and each function's module's: for an
  // NVRTC image, the key of the source it was compiled from; else the
  // image's own bytes, hashed whole (a cubin's text would stop at its ELF
  // header's first NUL).
  std::vector<size_t> moduleCode_, functionCode_;
  std::vector<HostKernel> functionHosts_;
  // What each NVRTC image was compiled from: the parameter sizes of each
  // kernel in its source, and the source's code key.
  struct CompiledImage {
    std::map<std::string, std::vector<size_t>> params;
    size_t sourceKey;
  };
  std::map<std::string, CompiledImage> compiled_;
  // Learned kernels' extents by code key (a package kernel's source, each
  // of its cubins, and its PTX with the NUL the driver is given) and entry
  // point.
  std::map<size_t, std::map<std::string, std::vector<KernelExtent>>> learned_;
  uintptr_t handles_ = 0x1000;
  CudaStream captureStream_ = nullptr;
  std::thread::id captureThread_;
  // Why the capture in progress was invalidated ("" while it holds).
  std::string captureBroken_;
  // Events last recorded in the capture in progress.
  std::set<CudaEvent> capturedEvents_;
  std::vector<Work> captured_;
  std::vector<std::vector<Work>> graphs_;
  // Each event's last record: its clock, stream and place in that
  // stream's queue.
  struct Record {
    StreamOrder::Clock clock;
    CudaStream stream;
    uint64_t at;
  };
  std::map<CudaEvent, Record> records_;
  // With asyncStreams, each stream's queued work.
  struct Pending {
    std::function<void()> fn; // else a wait: run |after| to |until|
    CudaStream after;
    uint64_t until;
  };
  struct Queue {
    std::deque<Pending> ops;
    uint64_t issued = 0, done = 0;
  };
  std::map<CudaStream, Queue> queues_;
  std::map<std::string, int> syncCalls_;
};

} // namespace kiln::runtime::cuda::testing

#endif // KILN_TESTS_UNIT_CUDA_FAKECUDAAPI_H
