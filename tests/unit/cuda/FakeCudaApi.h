//===- FakeCudaApi.h - a CUDA table without a GPU, for tests -------*- C++ -*-===//
//
// A CudaApi (runtime/cuda/CudaApi.h) on the host: device memory is host
// memory (256-byte aligned), every stream is synchronous, and every call is
// appended to |calls| ("cuLaunchKernel kiln_relu grid=3 block=256",
// "cublasLtMatmul", "cudaMemcpyAsync D2D 512", "cudaGraphLaunch", ...). While
// a stream is being captured, work is recorded into the graph instead of
// run, and cudaGraphLaunch replays it, as CUDA does. Kernels run when the
// test registers a host function for their entry point (a kernel compiled
// for the host under codegen/cuda/CudaEmulation.h); GEMMs run on the host
// as cuBLASLt computes them (HostGemm.h: f32 compute for f32, f16 and bf16,
// the epilogue in f32, one rounding to the output type; f64 in double).
// failCall/failAt make the failAt-th call (0-based) of that name fail.
// cuFuncSetAttribute's dynamic shared memory opt-in is recorded per entry
// point, and a launch with more than 48 KiB of it beyond the opt-in fails
// (CUDA_ERROR_INVALID_VALUE), as on a GPU; the device (a fake H200) allows
// 232448 bytes per block.
// refusedEpilogues makes gemmPlan answer as cuBLASLt does when its
// heuristic has no algorithm for a GemmDesc (CUBLAS_STATUS_NOT_SUPPORTED,
// reported as unsupported) for a GEMM with one of those epilogues; a desc
// that cuBLASLt refuses on every device (gemmLtRefusal: an aux leading
// dimension that is no multiple of 8) is refused the same way.
// A GEMM plan holds min(desc.algorithms, gemmAlgorithms) algorithms (ids
// "fake-N"); with gemmAlgorithmMs set, each cublasLtMatmul advances a
// clock by its selected algorithm's time, eventRecord notes the clock and
// eventElapsedMs subtracts (else every elapsed time is 0.5 ms); runs of
// the algorithms in failAlgorithms fail to queue; with launchMs set, each
// kernel launch advances it by launchMs(entry point). timesWork() says
// whether either is set (the autotuner times nothing otherwise).
// Copies, memsets and GEMMs are checked against the allocation their
// device pointer starts in: one that runs past it fails and is noted in
// outOfBounds. Allocations are exactly the size asked for (under
// AddressSanitizer, an access past it is reported). Kernels whose
// arguments the fake knows run on copies of them, checked after the run
// (kernelArgs, kernelFaults). The device has 2 GiB (kDeviceMemoryBytes); a larger
// cudaMalloc fails with out-of-memory. cuFuncGetParamInfo
// (funcParamSizes) answers from paramSizes, or from the kernel's
// signature in the source NVRTC compiled.
//
// Stream order. Every stream is ordered as CUDA orders it, with a vector
// clock per stream and one for the host: work queued on a stream comes
// after the stream's earlier work and after whatever the host has waited
// for; cudaStreamWaitEvent orders a stream after the event's record;
// cudaStreamSynchronize, cudaEventSynchronize, cudaFree and cudaFreeHost
// order the host after the work they wait for. Each copy, memset, GEMM and
// kernel notes the device and pinned bytes it reads and writes (a copy its
// ranges; a GEMM its operands, results and workspace; a kernel its
// arguments' extents once learnPackage has told the fake its package (see
// kernelArgs), else one byte at each pointer argument, taken as written).
// Two accesses of one allocation from different streams
// that overlap, where one writes and neither is ordered before the other,
// are a race on a GPU: the second call fails and |races| says which two.
// A captured graph's work is checked when it is launched. With
// asyncStreams the work also runs as late as CUDA allows: a stream's work
// is queued and runs only when the host waits for it (a synchronize, or a
// cudaFree), a waited-for event's stream running first up to its record,
// so a host that reads a result or refills a pinned buffer without
// waiting sees the old bytes, as it may on a GPU. dropSync makes the
// synchronizations it names do nothing (to show that a test notices).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TESTS_UNIT_CUDA_FAKECUDAAPI_H
#define KILN_TESTS_UNIT_CUDA_FAKECUDAAPI_H

#include "runtime/Half.h"
#include "runtime/cuda/CudaApi.h"
#include "tests/unit/cuda/AddressSanitizer.h"
#include "tests/unit/cuda/HostGemm.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace kiln::runtime::cuda::testing {

// A kernel on the host: the emulation's NAME_host(buffers, grid, block).
using HostKernel = void (*)(void **buffers, unsigned grid, unsigned block);

class FakeCudaApi : public CudaApi {
public:
  CudaDeviceInfo device{0, "Fake H200", 9, 0, 132, 232448};
  // The fake device's memory: allocations past it fail (out of memory).
  static constexpr size_t kDeviceMemoryBytes = size_t(2) << 30;
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
  // Bytes a call reads or writes (what: "cudaMemcpyAsync H2D destination").
  struct Access {
    std::string what;
    const void *at;
    uint64_t bytes;
    bool write;
  };
  // Work on a stream, as a captured graph holds it.
  struct Work {
    std::function<void()> fn;
    std::vector<Access> accesses;
  };
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
  // What each pointer argument of a kernel may touch, by entry point: its
  // bytes, and whether the kernel may write it. learnPackage fills it
  // from a package's kernel thunks (one pointer per operand, read, then
  // per result, written, as CudaExecutable launches them). The runtime's
  // own kernels (attention, convolutions, epilogue fallbacks: library
  // calls, whose parameters are pointers and integers in an order of the
  // runtime's) get theirs from the learned package's buffers instead: a
  // parameter that points into an arena of the learned size may touch up
  // to the end of the buffer(s) it points into, one into another
  // allocation (a workspace) up to its end, both taken as written; other
  // values are integers. A launch of such a
  // kernel accesses those whole extents (for the race check) and, with
  // isolateKernels, runs on copies of them: each set of overlapping
  // arguments its own allocation of exactly their bytes, between guard
  // bytes. A kernel that writes outside its arguments, or into one it may
  // only read, is a fault: |kernelFaults| says where, and that call and
  // every later one fail, as CUDA's sticky cudaErrorIllegalAddress does.
  // Under AddressSanitizer (scripts/sanitize.sh builds the host kernels
  // with it), which sees the copies' exact ends, so is a read outside them.
  struct KernelArg {
    size_t bytes = 0;
    bool written = false;
  };
  std::map<std::string, std::vector<KernelArg>> kernelArgs;
  bool isolateKernels = true;
  // "kiln_fusion3 wrote 4 byte(s) after argument 2 (1024 bytes)".
  std::vector<std::string> kernelFaults;
  // Learns |pkg|'s kernels' arguments (kernelArgs; a kernel that several
  // thunks launch gets the larger extent of each argument) and its arena's
  // buffers.
  void learnPackage(const LoadedPackage &pkg) {
    std::vector<std::pair<uint64_t, uint64_t>> &spans =
        arenas_[std::max<uint64_t>(pkg.arenaSize, 1)];
    for (const PackageBuffer &b : pkg.buffers)
      if (b.size)
        spans.push_back({b.offset, b.offset + b.size});
    for (const PackageThunk &t : pkg.thunks) {
      if (t.kind != ThunkKind::KernelLaunch || t.kernel < 0 ||
          size_t(t.kernel) >= pkg.kernels.size())
        continue;
      std::vector<KernelArg> &args = kernelArgs[pkg.kernels[t.kernel].entryPoint];
      size_t n = t.operands.size() + t.results.size();
      if (args.size() < n)
        args.resize(n);
      for (size_t i = 0; i < n; ++i) {
        uint32_t id = i < t.operands.size() ? t.operands[i]
                                            : t.results[i - t.operands.size()];
        if (id >= pkg.buffers.size())
          continue;
        args[i].bytes = std::max<size_t>(args[i].bytes, pkg.buffers[id].size);
        args[i].written |= i >= t.operands.size();
      }
    }
  }

  // Defined in FakeCudaApi.cpp: the class's key function, so that its
  // vtable, and with it every CUDA call the fake overrides, is compiled
  // once there rather than in each of the dozen test sources that include
  // this header (8 s each at -O3, 19 s under ASan).
  ~FakeCudaApi() override;

  std::string describe() const override { return "fake"; }
  StatusOr<CudaDeviceInfo> deviceInfo(int index) override {
    if (Status s = enter("cudaGetDeviceProperties"); !s.isOk())
      return s;
    if (index != 0)
      return Status::error("fake: no device " + std::to_string(index));
    return device;
  }
  Status setDevice(int) override { return enter("cudaSetDevice"); }
  Status malloc(void **ptr, size_t bytes) override {
    if (Status s = enter("cudaMalloc " + std::to_string(bytes)); !s.isOk())
      return s;
    // More than the fake H200 has (or than the host gives) fails as on a GPU.
    *ptr = allocate(bytes);
    if (!*ptr)
      return Status::error("cudaMalloc failed: cudaErrorMemoryAllocation (2): "
                           "out of memory (" + std::to_string(bytes) + " bytes)");
    std::memset(*ptr, 0xcd, bytes); // uninitialised device memory
    live_[static_cast<const char *>(*ptr)] = bytes;
    return Status::ok();
  }
  Status free(void *ptr) override {
    // cudaFree waits for the device's work.
    synchronizeAll();
    forget(ptr);
    std::free(ptr);
    return enter("cudaFree");
  }
  Status mallocHost(void **ptr, size_t bytes) override {
    if (Status s = enter("cudaMallocHost " + std::to_string(bytes)); !s.isOk())
      return s;
    *ptr = allocate(bytes);
    if (!*ptr)
      return Status::error("cudaMallocHost failed: cudaErrorMemoryAllocation "
                           "(2): out of memory (" + std::to_string(bytes) +
                           " bytes)");
    live_[static_cast<const char *>(*ptr)] = bytes;
    return Status::ok();
  }
  Status freeHost(void *ptr) override {
    synchronizeAll();
    forget(ptr);
    std::free(ptr);
    return enter("cudaFreeHost");
  }
  Status memcpyAsync(void *dst, const void *src, size_t bytes, CopyKind kind,
                     CudaStream stream) override {
    const char *k = kind == CopyKind::HostToDevice   ? "H2D"
                    : kind == CopyKind::DeviceToHost ? "D2H"
                                                     : "D2D";
    if (Status s = enter(std::string("cudaMemcpyAsync ") + k + " " +
                         std::to_string(bytes));
        !s.isOk())
      return s;
    if (Status s = inBounds(std::string("cudaMemcpyAsync ") + k, kind,
                            dst, src, bytes);
        !s.isOk())
      return s;
    std::string call = std::string("cudaMemcpyAsync ") + k;
    return work(stream,
                {{call + " source", src, bytes, false},
                 {call + " destination", dst, bytes, true}},
                [=] { std::memmove(dst, src, bytes); });
  }
  Status memsetAsync(void *dst, int value, size_t bytes,
                     CudaStream stream) override {
    if (Status s = enter("cudaMemsetAsync"); !s.isOk())
      return s;
    if (Status s = inBounds("cudaMemsetAsync", dst, bytes); !s.isOk())
      return s;
    return work(stream, {{"cudaMemsetAsync", dst, bytes, true}},
                [=] { std::memset(dst, value, bytes); });
  }
  Status streamCreate(CudaStream *stream) override {
    *stream = reinterpret_cast<CudaStream>(++handles_);
    agent(*stream);
    return enter("cudaStreamCreateWithFlags");
  }
  Status streamDestroy(CudaStream) override { return enter("cudaStreamDestroy"); }
  Status streamSynchronize(CudaStream stream) override {
    if (dropped("cudaStreamSynchronize"))
      return Status::ok();
    if (Status s = enter("cudaStreamSynchronize"); !s.isOk())
      return s;
    join(clock(0), clock(agent(stream)));
    drain(stream, queues_[stream].issued);
    return faulted();
  }
  Status streamWaitEvent(CudaStream stream, CudaEvent event) override {
    if (dropped("cudaStreamWaitEvent"))
      return Status::ok();
    if (Status s = enter("cudaStreamWaitEvent"); !s.isOk())
      return s;
    auto recorded = records_.find(event);
    if (recorded == records_.end()) // never recorded: nothing to wait for
      return Status::ok();
    join(clock(agent(stream)), recorded->second.clock);
    if (asyncStreams) {
      Queue &q = queues_[stream];
      q.ops.push_back({nullptr, recorded->second.stream, recorded->second.at});
      ++q.issued;
    }
    return Status::ok();
  }
  Status eventCreate(CudaEvent *event) override {
    *event = reinterpret_cast<CudaEvent>(++handles_);
    return enter("cudaEventCreate");
  }
  Status eventDestroy(CudaEvent) override { return enter("cudaEventDestroy"); }
  Status eventRecord(CudaEvent event, CudaStream stream) override {
    eventClock_[event] = clock_;
    if (Status s = enter("cudaEventRecord"); !s.isOk())
      return s;
    Clock &c = clock(agent(stream));
    join(c, clock(0));
    records_[event] = {c, stream, queues_[stream].issued};
    return Status::ok();
  }
  Status eventSynchronize(CudaEvent event) override {
    if (dropped("cudaEventSynchronize"))
      return Status::ok();
    if (Status s = enter("cudaEventSynchronize"); !s.isOk())
      return s;
    auto recorded = records_.find(event);
    if (recorded == records_.end())
      return Status::ok();
    join(clock(0), recorded->second.clock);
    drain(recorded->second.stream, recorded->second.at);
    return faulted();
  }
  Status eventElapsedMs(float *ms, CudaEvent start, CudaEvent end) override {
    *ms = timesWork() ? float(eventClock_[end] - eventClock_[start]) : 0.5f;
    return enter("cudaEventElapsedTime");
  }
  Status streamBeginCapture(CudaStream stream) override {
    if (Status s = enter("cudaStreamBeginCapture"); !s.isOk())
      return s;
    capturing = true;
    captureStream_ = stream;
    captured_.clear();
    return Status::ok();
  }
  Status streamEndCapture(CudaStream, CudaGraph *graph) override {
    capturing = false;
    if (Status s = enter("cudaStreamEndCapture"); !s.isOk()) {
      *graph = nullptr;
      return s;
    }
    graphs_.push_back(std::move(captured_));
    *graph = reinterpret_cast<CudaGraph>(graphs_.size());
    return Status::ok();
  }
  Status graphInstantiate(CudaGraphExec *exec, CudaGraph graph) override {
    *exec = graph;
    return enter("cudaGraphInstantiate");
  }
  Status graphLaunch(CudaGraphExec exec, CudaStream stream) override {
    if (Status s = enter("cudaGraphLaunch"); !s.isOk())
      return s;
    size_t index = reinterpret_cast<size_t>(exec) - 1;
    const std::vector<Work> &graph = graphs_[index];
    // The graph's nodes run in capture order on |stream|: each is ordered
    // (and checked) as that work queued there.
    for (const Work &w : graph)
      if (Status s = order(stream, w.accesses); !s.isOk())
        return s;
    if (!execute)
      return Status::ok();
    return dispatch(stream, [this, index] {
      for (const Work &w : graphs_[index])
        w.fn();
    });
  }
  Status graphDestroy(CudaGraph) override { return enter("cudaGraphDestroy"); }
  Status graphExecDestroy(CudaGraphExec) override {
    return enter("cudaGraphExecDestroy");
  }
  Status moduleLoadData(CudaModule *module, const void *image,
                        size_t bytes) override {
    std::string text(static_cast<const char *>(image),
                     strnlen(static_cast<const char *>(image), bytes));
    if (Status s = enter("cuModuleLoadData " + text); !s.isOk())
      return s;
    loadedImages.push_back(text);
    *module = reinterpret_cast<CudaModule>(loadedImages.size());
    return Status::ok();
  }
  Status moduleUnload(CudaModule) override { return enter("cuModuleUnload"); }
  Status moduleGetFunction(CudaFunction *function, CudaModule module,
                           const char *name) override {
    if (Status s = enter(std::string("cuModuleGetFunction ") + name); !s.isOk())
      return s;
    functions_.push_back(name);
    const std::string &image =
        loadedImages[reinterpret_cast<size_t>(module) - 1];
    functionImages_.push_back(image);
    auto byImage = hostKernelsByImage.find(image);
    auto byName = hostKernels.find(name);
    functionHosts_.push_back(byImage != hostKernelsByImage.end() ? byImage->second
                             : byName != hostKernels.end()       ? byName->second
                                                                 : nullptr);
    *function = reinterpret_cast<CudaFunction>(functions_.size());
    return Status::ok();
  }
  Status funcSetMaxDynamicSharedMemory(CudaFunction function,
                                       uint32_t bytes) override {
    const std::string &entry =
        functions_[reinterpret_cast<size_t>(function) - 1];
    if (Status s = enter("cuFuncSetAttribute " + entry +
                         " MAX_DYNAMIC_SHARED_SIZE_BYTES=" +
                         std::to_string(bytes));
        !s.isOk())
      return s;
    if (device.maxSharedMemoryPerBlockOptin > 0 &&
        bytes > uint32_t(device.maxSharedMemoryPerBlockOptin))
      return Status::error("cuFuncSetAttribute failed: "
                           "CUDA_ERROR_INVALID_VALUE (1): invalid argument");
    maxDynamicShared[entry] = bytes;
    return Status::ok();
  }
  Status funcParamSizes(CudaFunction function, std::vector<size_t> &sizes,
                        bool &known) override {
    size_t i = reinterpret_cast<size_t>(function) - 1;
    const std::string &entry = functions_[i];
    if (Status s = enter("cuFuncGetParamInfo " + entry); !s.isOk())
      return s;
    auto set = paramSizes.find(entry);
    auto image = sourceParams_.find(functionImages_[i]);
    const std::vector<size_t> *found =
        set != paramSizes.end() ? &set->second : nullptr;
    if (!found && image != sourceParams_.end()) {
      auto parsed = image->second.find(entry);
      if (parsed != image->second.end())
        found = &parsed->second;
    }
    known = found != nullptr;
    paramSizesKnown += known;
    sizes = found ? *found : std::vector<size_t>();
    return Status::ok();
  }
  Status launchKernel(CudaFunction function, const std::array<uint32_t, 3> &grid,
                      const std::array<uint32_t, 3> &block,
                      uint32_t sharedMemoryBytes, CudaStream stream,
                      void **params, size_t paramCount) override {
    const std::string &entry =
        functions_[reinterpret_cast<size_t>(function) - 1];
    bool programmatic = programmatic_;
    programmatic_ = false;
    if (Status s = enter((programmatic ? "cuLaunchKernelEx " : "cuLaunchKernel ") +
                         entry + " grid=" +
                         std::to_string(grid[0]) + " block=" +
                         std::to_string(block[0]));
        !s.isOk())
      return s;
    if (sharedMemoryBytes > 48 * 1024 &&
        sharedMemoryBytes > maxDynamicShared[entry])
      return Status::error("cuLaunchKernel failed: CUDA_ERROR_INVALID_VALUE "
                           "(1): invalid argument (" +
                           std::to_string(sharedMemoryBytes) +
                           " bytes of dynamic shared memory, the function "
                           "allows " + std::to_string(maxDynamicShared[entry]) +
                           ")");
    Launch l{entry, grid, block, {}, sharedMemoryBytes, programmatic};
    if (launchMs)
      clock_ += launchMs(entry);
    // cuLaunchKernel reads the parameters at the call: so does the fake.
    for (size_t i = 0; i < paramCount; ++i)
      l.args.push_back(*static_cast<void **>(params[i]));
    launches.push_back(l);
    std::vector<KernelArg> extents;
    if (auto known = kernelArgs.find(entry);
        known != kernelArgs.end() && known->second.size() == l.args.size())
      extents = known->second;
    else
      extents = extentsByAddress(l.args);
    // Without a host function the launch only takes its place in the
    // stream.
    std::function<void()> run = [] {};
    if (HostKernel fn =
            functionHosts_[reinterpret_cast<size_t>(function) - 1]) {
      std::vector<void *> args = l.args;
      unsigned g = grid[0], b = block[0];
      std::mutex *lock = kernelLock;
      bool isolate = isolateKernels && !extents.empty();
      FakeCudaApi *self = this;
      run = [=]() mutable {
        std::unique_lock<std::mutex> held;
        if (lock)
          held = std::unique_lock<std::mutex>(*lock);
        if (isolate)
          self->runIsolated(entry, fn, args, extents, g, b);
        else
          fn(args.data(), g, b);
      };
    }
    if (Status s = work(stream, kernelAccesses(entry, l.args, extents), std::move(run));
        !s.isOk())
      return s;
    return faulted();
  }
  Status launchKernelProgrammatic(CudaFunction function,
                                  const std::array<uint32_t, 3> &grid,
                                  const std::array<uint32_t, 3> &block,
                                  uint32_t sharedMemoryBytes, CudaStream stream,
                                  void **params, size_t paramCount) override {
    programmatic_ = true;
    return launchKernel(function, grid, block, sharedMemoryBytes, stream,
                        params, paramCount);
  }
  // The NVRTC this fake claims to be (nvrtcIdentityText): "" by default,
  // so nothing is cached on disk (CubinCache.h) unless a test asks.
  std::string nvrtcIdentity() override { return nvrtcIdentityText; }
  std::string nvrtcIdentityText;
  Status nvrtcCompile(const std::string &source, const std::string &name,
                      unsigned arch, std::vector<uint8_t> &cubin,
                      std::string &log) override {
    if (Status s = enter("nvrtcCompileProgram " + name); !s.isOk())
      return s;
    nvrtcArchs.push_back(arch);
    std::string image = "NVRTC sm_" + std::to_string(arch) + " " + name +
                        " from " + std::to_string(source.size()) + " bytes";
    sourceParams_[image] = kernelSignatures(source);
    cubin.assign(image.begin(), image.end());
    cubin.push_back(0);
    log.clear();
    return Status::ok();
  }

  using CudaApi::gemmPlan;
  Status gemmPlan(GemmPlan *plan, const GemmDesc &desc, size_t,
                  bool *unsupported) override {
    if (unsupported)
      *unsupported = false;
    if (Status s = enter("cublasLtMatmulAlgoGetHeuristic"); !s.isOk())
      return s;
    if (Status s = checkGemmDesc(desc); !s.isOk())
      return s;
    std::string why = gemmLtRefusal(desc);
    if (refusedEpilogues.count(desc.epilogue) || !why.empty()) {
      if (unsupported)
        *unsupported = true;
      return Status::error(
          std::string("cublasLtMatmulAlgoGetHeuristic (") +
          pkgDTypeName(desc.dtype) + " GEMM, epilogue " +
          gemmEpilogueName(desc.epilogue) + ") failed: " +
          (why.empty() ? std::string("CUBLAS_STATUS_NOT_SUPPORTED (15): the "
                                     "functionality requested is not "
                                     "supported")
                       : why));
    }
    plans.push_back(desc);
    selected_.push_back(0);
    *plan = reinterpret_cast<GemmPlan>(plans.size());
    return Status::ok();
  }
  int gemmAlgorithmCount(GemmPlan plan) override {
    return std::max(1, std::min(plans[index(plan)].algorithms, gemmAlgorithms));
  }
  int gemmSelectedAlgorithm(GemmPlan plan) override {
    return selected_[index(plan)];
  }
  Status gemmSelectAlgorithm(GemmPlan plan, int algorithm) override {
    if (algorithm < 0 || algorithm >= gemmAlgorithmCount(plan))
      return Status::error("gemm: algorithm " + std::to_string(algorithm) +
                           " of a plan that holds " +
                           std::to_string(gemmAlgorithmCount(plan)));
    selected_[index(plan)] = algorithm;
    return Status::ok();
  }
  StatusOr<GemmAlgorithm> gemmAlgorithm(GemmPlan plan, int algorithm) override {
    if (algorithm < 0 || algorithm >= gemmAlgorithmCount(plan))
      return Status::error("gemm: no algorithm " + std::to_string(algorithm));
    return GemmAlgorithm{"fake-" + std::to_string(algorithm),
                         "fake algorithm " + std::to_string(algorithm), 0};
  }
  std::string gemmLibraryVersion() override { return library; }
  std::string library = "fake cuBLASLt 1";
  using CudaApi::gemmRun;
  Status gemmRun(GemmPlan plan, const void *lhs, const void *rhs, void *out,
                 const void *bias, void *biasGrad, const void *c, void *aux,
                 void *workspace, size_t workspaceBytes,
                 CudaStream stream) override {
    if (Status s = enter("cublasLtMatmul"); !s.isOk())
      return s;
    GemmDesc desc = plans[index(plan)];
    int algorithm = selected_[index(plan)];
    if (failAlgorithms.count(algorithm))
      return Status::error("cublasLtMatmul failed: CUBLAS_STATUS_NOT_SUPPORTED "
                           "(15): algorithm " + std::to_string(algorithm));
    if (gemmAlgorithmMs)
      clock_ += gemmAlgorithmMs(desc, algorithm);
    // What cuBLASLt needs a pointer for (the real table's checks).
    if (desc.residual && !c)
      return Status::error("gemm: a residual GEMM needs a C pointer");
    if ((gemmEpilogueWritesAux(desc.epilogue) ||
         gemmEpilogueReadsAux(desc.epilogue)) &&
        !aux)
      return Status::error(std::string("gemm: the ") +
                           gemmEpilogueName(desc.epilogue) +
                           " epilogue needs an aux pointer");
    if ((gemmEpilogueReadsBias(desc.epilogue) && !bias) ||
        (desc.epilogue == GemmEpilogue::BiasGradient && !biasGrad))
      return Status::error(std::string("gemm: the ") +
                           gemmEpilogueName(desc.epilogue) +
                           " epilogue needs a bias pointer");
    // The bytes each operand spans, as hostGemm reads and writes them.
    // (A size past 64 bits is past every allocation.)
    const GemmParams &g = desc.params;
    auto span = [&](const std::vector<int64_t> &shape) {
      return pkgShapeBytes(desc.dtype, shape).value_or(UINT64_MAX);
    };
    uint64_t outBytes = span({g.batch, g.m, g.n}), nBytes = span({g.n});
    std::vector<Access> accesses;
    for (Access a :
         {Access{"lhs", lhs, span({g.batch, g.m, g.k}), false},
          {"rhs", rhs, span({g.batch, g.k, g.n}), false},
          {"result", out, outBytes, true},
          {"C", desc.residual ? c : nullptr, outBytes, false},
          {"aux", aux, outBytes, gemmEpilogueWritesAux(desc.epilogue)},
          {"bias", gemmEpilogueReadsBias(desc.epilogue) ? bias : nullptr,
           nBytes, false},
          {"bias gradient", biasGrad, nBytes, true}}) {
      if (!a.at)
        continue;
      a.what = "cublasLtMatmul " + a.what;
      if (Status s = inBounds(a.what, a.at, a.bytes); !s.isOk())
        return s;
      accesses.push_back(std::move(a));
    }
    gemms.push_back({desc, lhs, rhs, out, c, aux, algorithm});
    // cuBLASLt's scratch (not bounds-checked: the fake's GEMM never
    // touches it).
    if (workspace && workspaceBytes)
      accesses.push_back(
          {"cublasLtMatmul workspace", workspace, workspaceBytes, true});
    return work(stream, std::move(accesses), [=] {
      hostGemm(desc, lhs, rhs, out, bias, biasGrad, c, aux);
    });
  }
  Status gemmDestroy(GemmPlan) override { return Status::ok(); }

  // Host work on |stream| from outside the table (FakeNccl's collectives on
  // an executable's stream): queued as the stream's other work, or
  // recorded while it is captured.
  void hostWork(CudaStream stream, std::function<void()> fn) {
    work(stream, {}, std::move(fn));
  }

  size_t count(const std::string &prefix) const {
    size_t n = 0;
    for (const std::string &c : calls)
      n += c.rfind(prefix, 0) == 0;
    return n;
  }

private:
  // The parameter sizes of each `extern "C" __global__ void NAME(...)` in
  // |source|.
  static std::map<std::string, std::vector<size_t>>
  kernelSignatures(const std::string &source) {
    std::map<std::string, std::vector<size_t>> out;
    const std::string marker = "extern \"C\" __global__ void";
    for (size_t at = source.find(marker); at != std::string::npos;
         at = source.find(marker, at + 1)) {
      size_t open = source.find('(', at + marker.size());
      // Past __launch_bounds__(...) to the entry point's own parenthesis.
      while (open != std::string::npos &&
             source.compare(open - 17, 17, "__launch_bounds__") == 0)
        open = source.find('(', source.find(')', open) + 1);
      if (open == std::string::npos)
        break;
      size_t nameEnd = open;
      while (nameEnd > 0 && source[nameEnd - 1] == ' ')
        --nameEnd;
      size_t nameBegin = nameEnd;
      while (nameBegin > 0 && (std::isalnum(static_cast<unsigned char>(
                                   source[nameBegin - 1])) ||
                               source[nameBegin - 1] == '_'))
        --nameBegin;
      std::string name = source.substr(nameBegin, nameEnd - nameBegin);
      size_t close = source.find(')', open);
      std::string params = source.substr(open + 1, close - open - 1);
      std::vector<size_t> sizes;
      size_t begin = 0;
      while (params.find_first_not_of(' ') != std::string::npos &&
             begin <= params.size()) {
        size_t comma = params.find(',', begin);
        std::string p = params.substr(begin, comma == std::string::npos
                                                 ? std::string::npos
                                                 : comma - begin);
        size_t first = p.find_first_not_of(' ');
        p = first == std::string::npos ? "" : p.substr(first);
        bool narrow = p.rfind("int ", 0) == 0 || p.rfind("unsigned ", 0) == 0 ||
                      p.rfind("float ", 0) == 0 || p.rfind("const int ", 0) == 0;
        sizes.push_back(p.find('*') != std::string::npos ? 8 : narrow ? 4 : 8);
        if (comma == std::string::npos)
          break;
        begin = comma + 1;
      }
      out[name] = sizes;
    }
    return out;
  }
  // Fails (and notes in outOfBounds) unless [p, p + bytes) lies in one
  // live allocation.
  // The live allocation |p| points into, or live_.end().
  std::map<const char *, size_t>::const_iterator allocationOf(const void *p) const {
    const char *at = static_cast<const char *>(p);
    auto it = live_.upper_bound(at);
    if (it == live_.begin() || (--it, at >= it->first + it->second))
      return live_.end();
    return it;
  }
  Status inBounds(const std::string &what, const void *p, uint64_t bytes) {
    const char *at = static_cast<const char *>(p);
    auto it = allocationOf(p);
    std::string why;
    if (it == live_.end())
      why = what + ": " + std::to_string(bytes) +
            " bytes at an address outside every allocation";
    else if (bytes > it->second - size_t(at - it->first))
      why = what + ": " + std::to_string(bytes) + " bytes at offset " +
            std::to_string(at - it->first) + " of a " +
            std::to_string(it->second) + "-byte allocation";
    if (why.empty())
      return Status::ok();
    outOfBounds.push_back(why);
    return Status::error("fake: out of bounds: " + why);
  }
  // A copy's device side(s): the destination of H2D, the source of D2H,
  // both of D2D.
  Status inBounds(const std::string &what, CopyKind kind, const void *dst,
                  const void *src, uint64_t bytes) {
    if (kind != CopyKind::DeviceToHost)
      if (Status s = inBounds(what + " destination", dst, bytes); !s.isOk())
        return s;
    if (kind != CopyKind::HostToDevice)
      return inBounds(what + " source", src, bytes);
    return Status::ok();
  }
  static size_t index(GemmPlan plan) { return reinterpret_cast<size_t>(plan) - 1; }
  Status enter(const std::string &call) {
    calls.push_back(call);
    if (Status s = faulted(); !s.isOk())
      return s;
    std::string name = call.substr(0, call.find(' '));
    if (!failCall.empty() && name == failCall && seen_[name]++ == failAt)
      return Status::error(name +
                           " failed: CUDA_ERROR_LAUNCH_FAILED (719): unspecified "
                           "launch failure");
    return Status::ok();
  }
  // Work queued on |stream| that reads and writes |accesses|: recorded
  // while the stream is captured, else ordered (and checked for races)
  // and run (or queued, with asyncStreams).
  Status work(CudaStream stream, std::vector<Access> accesses,
              std::function<void()> fn) {
    if (capturing && stream == captureStream_) {
      captured_.push_back({std::move(fn), std::move(accesses)});
      return Status::ok();
    }
    if (Status s = order(stream, accesses); !s.isOk())
      return s;
    return dispatch(stream, std::move(fn));
  }
  Status dispatch(CudaStream stream, std::function<void()> fn) {
    if (!asyncStreams) {
      fn();
      return Status::ok();
    }
    Queue &q = queues_[stream];
    q.ops.push_back({std::move(fn), nullptr, 0});
    ++q.issued;
    return Status::ok();
  }
  // Runs |stream|'s queued work up to (not including) its |until|-th
  // operation, a wait first running the waited-for stream to its record.
  void drain(CudaStream stream, uint64_t until) {
    Queue &q = queues_[stream];
    while (q.done < until && !q.ops.empty()) {
      Pending p = std::move(q.ops.front());
      q.ops.pop_front();
      if (p.fn)
        p.fn();
      else
        drain(p.after, p.until);
      ++q.done;
    }
  }
  // The host waits for every stream (cudaFree, cudaFreeHost).
  void synchronizeAll() {
    for (auto &[stream, id] : agents_) {
      join(clock(0), clock(id));
      drain(stream, queues_[stream].issued);
    }
  }
  bool dropped(const std::string &call) {
    if (!dropSync || !dropSync(call, syncCalls_[call]++))
      return false;
    calls.push_back(call + " (dropped)");
    return true;
  }

  // The vector clocks: by agent, 0 the host and then each stream.
  using Clock = std::vector<uint64_t>;
  static void join(Clock &into, const Clock &from) {
    if (into.size() < from.size())
      into.resize(from.size(), 0);
    for (size_t i = 0; i < from.size(); ++i)
      into[i] = std::max(into[i], from[i]);
  }
  size_t agent(CudaStream stream) {
    auto [it, added] = agents_.try_emplace(stream, agents_.size() + 1);
    return it->second;
  }
  // (A deque: growing it keeps the references clock() gave out.)
  Clock &clock(size_t agent) {
    if (clocks_.size() <= agent)
      clocks_.resize(agent + 1);
    Clock &c = clocks_[agent];
    if (c.size() <= agent)
      c.resize(agent + 1, 0); // its own entry, at least
    return c;
  }
  // One access as the history keeps it: bytes [begin, end) of the
  // allocation, by |agent| at its clock |epoch|.
  struct Touch {
    uint64_t begin, end;
    size_t agent;
    uint64_t epoch;
    bool write;
    std::string what;
  };
  // Orders work on |stream| after the stream's earlier work and what the
  // host has waited for, and checks each of its accesses against the
  // earlier accesses of the same allocation.
  Status order(CudaStream stream, const std::vector<Access> &accesses) {
    size_t me = agent(stream);
    Clock &c = clock(me);
    join(c, clock(0));
    uint64_t epoch = ++c[me];
    // Whether |t| happened before this work (so cannot race it).
    auto before = [&](const Touch &t) {
      return t.agent < c.size() && c[t.agent] >= t.epoch;
    };
    for (const Access &a : accesses) {
      auto it = allocationOf(a.at);
      if (!a.at || !a.bytes || it == live_.end())
        continue; // pageable host memory, or nothing
      uint64_t begin = uint64_t(static_cast<const char *>(a.at) - it->first);
      uint64_t end = std::min<uint64_t>(begin + a.bytes, it->second);
      std::vector<Touch> &history = history_[it->first];
      for (const Touch &t : history) {
        if (before(t) || t.end <= begin || end <= t.begin ||
            !(t.write || a.write))
          continue;
        std::string race =
            t.what + " on stream " + std::to_string(t.agent) + " and " +
            a.what + " on stream " + std::to_string(me) + ", bytes " +
            std::to_string(std::max(begin, t.begin)) + ".." +
            std::to_string(std::min(end, t.end)) + " of a " +
            std::to_string(it->second) + "-byte allocation: nothing orders them";
        races.push_back(race);
        return Status::error("fake: a race: " + race);
      }
      // What this access covers and follows needs no keeping: a later
      // access unordered with it is unordered with this one too.
      history.erase(
          std::remove_if(history.begin(), history.end(),
                         [&](const Touch &t) {
                           return before(t) && begin <= t.begin &&
                                  t.end <= end && (a.write || !t.write);
                         }),
          history.end());
      history.push_back({begin, end, me, epoch, a.write, a.what});
    }
    return Status::ok();
  }
  // A kernel's accesses: each argument's |extents| where known
  // (kernelArgs), else one byte at each argument, taken as written.
  static std::vector<Access> kernelAccesses(const std::string &entry,
                                            const std::vector<void *> &args,
                                            const std::vector<KernelArg> &extents) {
    std::vector<Access> out;
    for (size_t i = 0; i < args.size(); ++i) {
      KernelArg a = extents.empty() ? KernelArg{1, true} : extents[i];
      if (a.bytes)
        out.push_back({"cuLaunchKernel " + entry + " argument " +
                           std::to_string(i),
                       args[i], a.bytes, a.written});
    }
    return out;
  }

  // A runtime kernel's parameters' extents from where they point (see
  // kernelArgs); none when no parameter points into a learned arena.
  std::vector<KernelArg> extentsByAddress(const std::vector<void *> &args) const {
    std::vector<KernelArg> out(args.size());
    bool inArena = false;
    for (size_t i = 0; i < args.size(); ++i) {
      auto it = allocationOf(args[i]);
      if (it == live_.end())
        continue; // an integer
      uint64_t at = uint64_t(static_cast<const char *>(args[i]) - it->first);
      uint64_t end = it->second;
      if (auto arena = arenas_.find(it->second); arena != arenas_.end()) {
        uint64_t bufferEnd = 0;
        for (const auto &[begin, stop] : arena->second)
          if (begin <= at && at < stop)
            bufferEnd = std::max(bufferEnd, stop);
        if (bufferEnd) {
          end = bufferEnd;
          inArena = true;
        }
      }
      out[i] = {size_t(end - at), true};
    }
    return inArena ? out : std::vector<KernelArg>();
  }

  // After a kernel wrote outside its arguments: the error every call
  // returns from then on, as CUDA's does after an illegal access.
  Status faulted() const {
    if (kernelFaults.empty())
      return Status::ok();
    return Status::error("cudaErrorIllegalAddress (700): an illegal memory "
                         "access was encountered (fake: " +
                         kernelFaults.front() + ")");
  }

  // Runs host kernel |fn| on copies of its arguments (isolateKernels):
  // arguments whose extents overlap (an update in place passes one buffer
  // as an operand and a result) share one copy. Each copy keeps its
  // original's alignment (up to 256 bytes) and sits between guard bytes
  // (none under AddressSanitizer, whose redzones are exact); after the
  // kernel, a changed guard or a changed read-only copy is a fault, and
  // the written copies go back.
  void runIsolated(const std::string &entry, HostKernel fn,
                   const std::vector<void *> &args,
                   const std::vector<KernelArg> &extents, unsigned grid,
                   unsigned block) {
    constexpr size_t kGuard = KILN_TEST_HAS_ASAN ? 0 : 256;
    constexpr unsigned char kGuardByte = 0xa5;
    struct Region {
      char *begin, *end;
      bool written;
      std::vector<size_t> args;
      void *block = nullptr;
      char *copy = nullptr;
    };
    std::vector<size_t> order;
    for (size_t i = 0; i < args.size(); ++i)
      if (extents[i].bytes)
        order.push_back(i);
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return args[a] < args[b]; });
    std::vector<Region> regions;
    for (size_t i : order) {
      char *b = static_cast<char *>(args[i]), *e = b + extents[i].bytes;
      if (regions.empty() || b >= regions.back().end) {
        regions.push_back({b, e, extents[i].written, {i}});
        continue;
      }
      Region &r = regions.back();
      r.end = std::max(r.end, e);
      r.written |= extents[i].written;
      r.args.push_back(i);
    }
    std::vector<void *> copies = args;
    for (Region &r : regions) {
      auto at = reinterpret_cast<uintptr_t>(r.begin);
      size_t align = std::max<size_t>(sizeof(void *),
                                      std::min<size_t>(256, at & (~at + 1)));
      size_t slack = at % align, bytes = size_t(r.end - r.begin);
      if (posix_memalign(&r.block, align, kGuard + slack + bytes + kGuard) != 0) {
        r.block = nullptr;
        for (Region &allocated : regions)
          std::free(allocated.block);
        kernelFaults.push_back("no host memory to copy " + std::to_string(bytes) +
                               " bytes of " + entry + "'s arguments");
        return;
      }
      auto *block8 = static_cast<char *>(r.block);
      std::memset(block8, kGuardByte, kGuard + slack);
      r.copy = block8 + kGuard + slack;
      std::memcpy(r.copy, r.begin, bytes);
      std::memset(r.copy + bytes, kGuardByte, kGuard);
      for (size_t i : r.args)
        copies[i] = r.copy + (static_cast<char *>(args[i]) - r.begin);
    }
    fn(copies.data(), grid, block);
    for (Region &r : regions) {
      size_t bytes = size_t(r.end - r.begin);
      auto *block8 = static_cast<const unsigned char *>(r.block);
      size_t before = 0, after = 0;
      for (const unsigned char *p = block8;
           p < reinterpret_cast<const unsigned char *>(r.copy); ++p)
        before += *p != kGuardByte;
      for (size_t k = 0; k < kGuard; ++k)
        after += static_cast<unsigned char>(r.copy[bytes + k]) != kGuardByte;
      std::string what = "argument" + std::string(r.args.size() > 1 ? "s" : "");
      for (size_t i : r.args)
        what += " " + std::to_string(i);
      what += " (" + std::to_string(bytes) + " bytes)";
      if (before)
        kernelFaults.push_back(entry + " wrote " + std::to_string(before) +
                               " byte(s) before " + what);
      if (after)
        kernelFaults.push_back(entry + " wrote " + std::to_string(after) +
                               " byte(s) after " + what);
      if (r.written)
        std::memcpy(r.begin, r.copy, bytes);
      else if (std::memcmp(r.begin, r.copy, bytes) != 0)
        kernelFaults.push_back(entry + " wrote " + what +
                               ", which it only reads");
      std::free(r.block);
    }
  }
  // |bytes| of host memory, 256-byte aligned as cudaMalloc's; null past
  // the fake H200's memory. Exactly |bytes|, not rounded up as a GPU's
  // allocator rounds: under AddressSanitizer (scripts/sanitize.sh) an access
  // past what was asked for is reported, even where a GPU would not fault.
  static void *allocate(size_t bytes) {
    void *p = nullptr;
    if (bytes > kDeviceMemoryBytes ||
        posix_memalign(&p, 256, std::max<size_t>(bytes, 1)) != 0)
      return nullptr;
    return p;
  }
  void forget(void *ptr) {
    history_.erase(static_cast<const char *>(ptr));
    live_.erase(static_cast<const char *>(ptr));
  }

  bool programmatic_ = false; // the launch in progress is programmatic
  // Learned packages' arenas: by size, their buffers' [offset, end).
  std::map<uint64_t, std::vector<std::pair<uint64_t, uint64_t>>> arenas_;
  // Live allocations (device and pinned host): start -> bytes asked for.
  std::map<const char *, size_t> live_;
  std::vector<int> selected_;
  double clock_ = 0;
  std::map<CudaEvent, double> eventClock_;
  std::map<std::string, int> seen_;
  std::vector<std::string> functions_;
  std::vector<std::string> functionImages_; // the image each was loaded from
  // By NVRTC image text: the parameter sizes of each kernel in its source.
  std::map<std::string, std::map<std::string, std::vector<size_t>>>
      sourceParams_;
  std::vector<HostKernel> functionHosts_;
  uintptr_t handles_ = 0x1000;
  CudaStream captureStream_ = nullptr;
  std::vector<Work> captured_;
  std::vector<std::vector<Work>> graphs_;
  // Stream order: each agent's clock, the streams' agents, each event's
  // last record (its clock, stream and place in that stream's queue),
  // each allocation's accesses that may still race, and with
  // asyncStreams each stream's queued work.
  std::deque<Clock> clocks_{Clock(1, 0)};
  std::map<CudaStream, size_t> agents_;
  struct Record {
    Clock clock;
    CudaStream stream;
    uint64_t at;
  };
  std::map<CudaEvent, Record> records_;
  std::map<const char *, std::vector<Touch>> history_;
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
