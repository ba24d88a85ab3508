//===- FakeCudaApi.cpp - a CUDA table without a GPU, for tests ------------===//
//
// See FakeCudaApi.h. The destructor, defined here first, is the class's
// key function: its vtable, and with it every CUDA call the fake
// overrides, is compiled in this file alone.
//
//===----------------------------------------------------------------------===//

#include "tests/unit/cuda/FakeCudaApi.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <string_view>

namespace kiln::runtime::cuda::testing {
namespace {

// The parameter sizes of each `extern "C" __global__ void NAME(...)` in
// |source|: a pointer 8 bytes, an int, unsigned or float 4, else 8.
std::map<std::string, std::vector<size_t>>
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
    while (nameBegin > 0 &&
           (std::isalnum(static_cast<unsigned char>(source[nameBegin - 1])) ||
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
      std::string p = params.substr(
          begin, comma == std::string::npos ? std::string::npos : comma - begin);
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

// A kernel's accesses: each argument's |extents| where known, else one
// byte at each argument, taken as written.
std::vector<DeviceAccess> kernelAccesses(const std::string &entry,
                                         const std::vector<void *> &args,
                                         const std::vector<KernelExtent> &extents) {
  std::vector<DeviceAccess> out;
  for (size_t i = 0; i < args.size(); ++i) {
    KernelExtent a = extents.empty() ? KernelExtent{1, true} : extents[i];
    if (a.bytes)
      out.push_back({"cuLaunchKernel " + entry + " argument " + std::to_string(i),
                     args[i], a.bytes, a.written});
  }
  return out;
}

// Widens |into| to hold |args| too: each argument's larger extent, written
// if either writes it.
void mergeExtents(std::vector<KernelExtent> &into,
                  const std::vector<KernelExtent> &args) {
  if (into.size() < args.size())
    into.resize(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    into[i].bytes = std::max(into[i].bytes, args[i].bytes);
    into[i].written |= args[i].written;
  }
}

// The key learned extents are found by: |bytes| of code (a kernel's
// source, a cubin, PTX), hashed whole.
size_t codeKey(const void *code, size_t bytes) {
  return std::hash<std::string_view>()(
      std::string_view(static_cast<const char *>(code), bytes));
}

// What the fake's cuda calls answer when a capture refuses them, with
// CUDA's codes and texts.
constexpr const char *kCaptureUnsupported = "cudaErrorStreamCaptureUnsupported (900)";
constexpr const char *kCaptureUnsupportedText =
    "operation not permitted when stream is capturing";
constexpr const char *kCapturedEvent = "cudaErrorCapturedEvent (907)";
constexpr const char *kCapturedEventText =
    "operation not permitted on an event last recorded in a capturing stream";

} // namespace

FakeCudaApi::~FakeCudaApi() = default;

//===----------------------------------------------------------------------===//
// What tests call
//===----------------------------------------------------------------------===//

void FakeCudaApi::learnPackage(const LoadedPackage &pkg) {
  memory_.learnArena(pkg.arenaSize, pkg.buffers);
  // This package's kernels' extents, by entry point.
  std::map<std::string, std::vector<KernelExtent>> learned;
  for (const PackageThunk &t : pkg.thunks) {
    if (t.kind != ThunkKind::KernelLaunch || t.kernel < 0 ||
        size_t(t.kernel) >= pkg.kernels.size())
      continue;
    std::vector<KernelExtent> &args = learned[pkg.kernels[t.kernel].entryPoint];
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
  for (const auto &[entry, args] : learned)
    mergeExtents(kernelArgs[entry], args);
  // The same code in two packages (one source, one cubin) gets the larger
  // extents of the two, as by name.
  for (const PackageKernel &k : pkg.kernels) {
    auto args = learned.find(k.entryPoint);
    if (args == learned.end())
      continue;
    if (!k.source.empty())
      mergeExtents(learned_[codeKey(k.source.data(), k.source.size())]
                           [k.entryPoint],
                   args->second);
    for (const Cubin &c : k.cubins)
      mergeExtents(learned_[codeKey(c.image.data(), c.image.size())]
                           [k.entryPoint],
                   args->second);
    // CudaExecutable hands the driver the PTX with its NUL.
    if (!k.ptx.empty())
      mergeExtents(learned_[codeKey(k.ptx.c_str(), k.ptx.size() + 1)]
                           [k.entryPoint],
                   args->second);
  }
}

void FakeCudaApi::hostWork(CudaStream stream, std::function<void()> fn) {
  (void)work(stream, {}, std::move(fn));
}

size_t FakeCudaApi::count(const std::string &prefix) const {
  size_t n = 0;
  for (const std::string &c : calls)
    n += c.rfind(prefix, 0) == 0;
  return n;
}

//===----------------------------------------------------------------------===//
// Devices and memory
//===----------------------------------------------------------------------===//

StatusOr<CudaDeviceInfo> FakeCudaApi::deviceInfo(int index) {
  if (Status s = enter("cudaGetDeviceProperties"); !s.isOk())
    return s;
  if (index != 0)
    return Status::error("fake: no device " + std::to_string(index));
  return device;
}

Status FakeCudaApi::setDevice(int) { return enter("cudaSetDevice"); }

Status FakeCudaApi::malloc(void **ptr, size_t bytes) {
  if (Status s = enter("cudaMalloc " + std::to_string(bytes)); !s.isOk())
    return s;
  if (Status s = unsafeWhileCapturing("cudaMalloc"); !s.isOk())
    return s;
  // More than the fake H200 has (or than the host gives) fails as on a GPU.
  *ptr = memory_.allocate(bytes);
  if (!*ptr)
    return Status::error("cudaMalloc failed: cudaErrorMemoryAllocation (2): "
                         "out of memory (" + std::to_string(bytes) + " bytes)");
  std::memset(*ptr, 0xcd, bytes); // uninitialised device memory
  return Status::ok();
}

Status FakeCudaApi::free(void *ptr) { return release("cudaFree", ptr); }

Status FakeCudaApi::memGetInfo(size_t *freeBytes, size_t *totalBytes) {
  if (Status s = enter("cudaMemGetInfo"); !s.isOk())
    return s;
  *totalBytes = FakeDeviceMemory::kDeviceMemoryBytes;
  size_t pinned = 0;
  for (const auto &[ptr, bytes] : pinned_)
    pinned += bytes;
  size_t used =
      std::min(*totalBytes, memory_.liveBytes() - pinned + usedElsewhere);
  *freeBytes = *totalBytes - used;
  return Status::ok();
}

Status FakeCudaApi::mallocHost(void **ptr, size_t bytes) {
  if (Status s = enter("cudaMallocHost " + std::to_string(bytes)); !s.isOk())
    return s;
  if (Status s = unsafeWhileCapturing("cudaMallocHost"); !s.isOk())
    return s;
  *ptr = memory_.allocate(bytes);
  if (!*ptr)
    return Status::error("cudaMallocHost failed: cudaErrorMemoryAllocation "
                         "(2): out of memory (" + std::to_string(bytes) +
                         " bytes)");
  pinned_[*ptr] = bytes;
  return Status::ok();
}

Status FakeCudaApi::freeHost(void *ptr) {
  Status s = release("cudaFreeHost", ptr);
  if (s.isOk())
    pinned_.erase(ptr);
  return s;
}

Status FakeCudaApi::release(const std::string &call, void *ptr) {
  if (Status s = unsafeWhileCapturing(call); !s.isOk()) {
    (void)enter(call);
    return s;
  }
  // cudaFree and cudaFreeHost wait for the device's work.
  synchronizeAll();
  order_.forget(ptr);
  bool freed = memory_.release(ptr);
  if (Status s = enter(call); !s.isOk())
    return s;
  if (!freed)
    return Status::error(call + " failed: cudaErrorInvalidValue (1): invalid "
                                "argument (fake: not an allocation's start)");
  return Status::ok();
}

Status FakeCudaApi::memcpyAsync(void *dst, const void *src, size_t bytes,
                                CopyKind kind, CudaStream stream) {
  const char *k = kind == CopyKind::HostToDevice   ? "H2D"
                  : kind == CopyKind::DeviceToHost ? "D2H"
                                                   : "D2D";
  std::string call = std::string("cudaMemcpyAsync ") + k;
  if (Status s = enter(call + " " + std::to_string(bytes)); !s.isOk())
    return s;
  if (Status s = inBounds(call, kind, dst, src, bytes); !s.isOk())
    return s;
  return work(stream,
              {{call + " source", src, bytes, false},
               {call + " destination", dst, bytes, true}},
              [=] { std::memmove(dst, src, bytes); });
}

Status FakeCudaApi::memsetAsync(void *dst, int value, size_t bytes,
                                CudaStream stream) {
  if (Status s = enter("cudaMemsetAsync"); !s.isOk())
    return s;
  if (Status s = inBounds("cudaMemsetAsync", dst, bytes); !s.isOk())
    return s;
  return work(stream, {{"cudaMemsetAsync", dst, bytes, true}},
              [=] { std::memset(dst, value, bytes); });
}

//===----------------------------------------------------------------------===//
// Streams, events and graphs
//===----------------------------------------------------------------------===//

Status FakeCudaApi::streamCreate(CudaStream *stream) {
  *stream = reinterpret_cast<CudaStream>(++handles_);
  order_.stream(*stream);
  return enter("cudaStreamCreateWithFlags");
}

Status FakeCudaApi::streamDestroy(CudaStream) {
  return enter("cudaStreamDestroy");
}

Status FakeCudaApi::streamSynchronize(CudaStream stream) {
  if (dropped("cudaStreamSynchronize"))
    return Status::ok();
  if (Status s = enter("cudaStreamSynchronize"); !s.isOk())
    return s;
  if (capturing && stream == captureStream_)
    return breaksCapture("cudaStreamSynchronize", kCaptureUnsupported,
                         kCaptureUnsupportedText);
  order_.hostWaits(stream);
  drain(stream, queues_[stream].issued);
  return faulted();
}

Status FakeCudaApi::streamWaitEvent(CudaStream stream, CudaEvent event) {
  if (dropped("cudaStreamWaitEvent"))
    return Status::ok();
  if (Status s = enter("cudaStreamWaitEvent"); !s.isOk())
    return s;
  if (capturing && capturedEvents_.count(event)) {
    if (stream == captureStream_) // already in the capture's order
      return captureInvalidated("cudaStreamWaitEvent");
    return Status::error("fake: cudaStreamWaitEvent of a captured event on "
                         "another stream (a fork of the capture) is not "
                         "modelled");
  }
  if (capturing && stream == captureStream_ && records_.count(event))
    return breaksCapture("cudaStreamWaitEvent",
                         "cudaErrorStreamCaptureIsolation (905)",
                         "dependency created on uncaptured work in another "
                         "stream (an event recorded outside the capture)");
  auto recorded = records_.find(event);
  if (recorded == records_.end()) // never recorded: nothing to wait for
    return Status::ok();
  order_.streamWaits(stream, recorded->second.clock);
  if (asyncStreams) {
    Queue &q = queues_[stream];
    q.ops.push_back({nullptr, recorded->second.stream, recorded->second.at});
    ++q.issued;
  }
  return Status::ok();
}

Status FakeCudaApi::eventCreate(CudaEvent *event) {
  *event = reinterpret_cast<CudaEvent>(++handles_);
  return enter("cudaEventCreate");
}

Status FakeCudaApi::eventDestroy(CudaEvent) { return enter("cudaEventDestroy"); }

Status FakeCudaApi::eventRecord(CudaEvent event, CudaStream stream) {
  eventClock_[event] = clock_;
  if (Status s = enter("cudaEventRecord"); !s.isOk())
    return s;
  if (capturing && stream == captureStream_) {
    if (Status s = captureInvalidated("cudaEventRecord"); !s.isOk())
      return s;
    capturedEvents_.insert(event);
    return Status::ok();
  }
  capturedEvents_.erase(event);
  records_[event] = {order_.record(stream), stream, queues_[stream].issued};
  return Status::ok();
}

Status FakeCudaApi::eventSynchronize(CudaEvent event) {
  if (dropped("cudaEventSynchronize"))
    return Status::ok();
  if (Status s = enter("cudaEventSynchronize"); !s.isOk())
    return s;
  if (capturing && capturedEvents_.count(event))
    return breaksCapture("cudaEventSynchronize", kCapturedEvent,
                         kCapturedEventText);
  auto recorded = records_.find(event);
  if (recorded == records_.end())
    return Status::ok();
  order_.hostWaits(recorded->second.clock);
  drain(recorded->second.stream, recorded->second.at);
  return faulted();
}

Status FakeCudaApi::eventElapsedMs(float *ms, CudaEvent start, CudaEvent end) {
  *ms = timesWork() ? float(eventClock_[end] - eventClock_[start]) : 0.5f;
  if (Status s = enter("cudaEventElapsedTime"); !s.isOk())
    return s;
  if (capturing && (capturedEvents_.count(start) || capturedEvents_.count(end)))
    return breaksCapture("cudaEventElapsedTime", kCapturedEvent,
                         kCapturedEventText);
  return Status::ok();
}

Status FakeCudaApi::streamBeginCapture(CudaStream stream) {
  if (Status s = enter("cudaStreamBeginCapture"); !s.isOk())
    return s;
  capturing = true;
  captureStream_ = stream;
  captureThread_ = std::this_thread::get_id();
  captureBroken_.clear();
  capturedEvents_.clear();
  captured_.clear();
  return Status::ok();
}

Status FakeCudaApi::streamEndCapture(CudaStream, CudaGraph *graph) {
  capturing = false;
  capturedEvents_.clear();
  *graph = nullptr;
  if (Status s = enter("cudaStreamEndCapture"); !s.isOk())
    return s;
  if (!captureBroken_.empty()) {
    captured_.clear();
    return Status::error("cudaStreamEndCapture failed: "
                         "cudaErrorStreamCaptureInvalidated (901): operation "
                         "failed due to a previous error during capture (" +
                         captureBroken_ + ")");
  }
  graphs_.push_back(std::move(captured_));
  *graph = reinterpret_cast<CudaGraph>(graphs_.size());
  return Status::ok();
}

Status FakeCudaApi::graphInstantiate(CudaGraphExec *exec, CudaGraph graph) {
  *exec = graph;
  return enter("cudaGraphInstantiate");
}

Status FakeCudaApi::graphLaunch(CudaGraphExec exec, CudaStream stream) {
  if (Status s = enter("cudaGraphLaunch"); !s.isOk())
    return s;
  size_t index = reinterpret_cast<size_t>(exec) - 1;
  // The graph's nodes run in capture order on |stream|: each is ordered
  // (and checked) as that work queued there.
  for (const Work &w : graphs_[index])
    if (Status s = order(stream, w.accesses); !s.isOk())
      return s;
  if (!execute)
    return Status::ok();
  return dispatch(stream, [this, index] {
    for (const Work &w : graphs_[index])
      w.fn();
  });
}

Status FakeCudaApi::graphDestroy(CudaGraph) { return enter("cudaGraphDestroy"); }

Status FakeCudaApi::graphExecDestroy(CudaGraphExec) {
  return enter("cudaGraphExecDestroy");
}

//===----------------------------------------------------------------------===//
// Modules and kernels
//===----------------------------------------------------------------------===//

Status FakeCudaApi::moduleLoadData(CudaModule *module, const void *image,
                                   size_t bytes) {
  std::string text(static_cast<const char *>(image),
                   strnlen(static_cast<const char *>(image), bytes));
  if (Status s = enter("cuModuleLoadData " + text); !s.isOk())
    return s;
  loadedImages.push_back(text);
  auto compiled = compiled_.find(text);
  moduleCode_.push_back(compiled != compiled_.end() ? compiled->second.sourceKey
                                                    : codeKey(image, bytes));
  *module = reinterpret_cast<CudaModule>(loadedImages.size());
  return Status::ok();
}

Status FakeCudaApi::moduleUnload(CudaModule) { return enter("cuModuleUnload"); }

Status FakeCudaApi::moduleGetFunction(CudaFunction *function, CudaModule module,
                                      const char *name) {
  if (Status s = enter(std::string("cuModuleGetFunction ") + name); !s.isOk())
    return s;
  functions_.push_back(name);
  size_t m = reinterpret_cast<size_t>(module) - 1;
  const std::string &image = loadedImages[m];
  functionImages_.push_back(image);
  functionCode_.push_back(moduleCode_[m]);
  auto byImage = hostKernelsByImage.find(image);
  auto byName = hostKernels.find(name);
  functionHosts_.push_back(byImage != hostKernelsByImage.end() ? byImage->second
                           : byName != hostKernels.end()       ? byName->second
                                                               : nullptr);
  *function = reinterpret_cast<CudaFunction>(functions_.size());
  return Status::ok();
}

Status FakeCudaApi::funcSetMaxDynamicSharedMemory(CudaFunction function,
                                                  uint32_t bytes) {
  const std::string &entry = functions_[reinterpret_cast<size_t>(function) - 1];
  if (Status s = enter("cuFuncSetAttribute " + entry +
                       " MAX_DYNAMIC_SHARED_SIZE_BYTES=" + std::to_string(bytes));
      !s.isOk())
    return s;
  if (device.maxSharedMemoryPerBlockOptin > 0 &&
      bytes > uint32_t(device.maxSharedMemoryPerBlockOptin))
    return Status::error("cuFuncSetAttribute failed: "
                         "CUDA_ERROR_INVALID_VALUE (1): invalid argument");
  maxDynamicShared[entry] = bytes;
  return Status::ok();
}

Status FakeCudaApi::funcParamSizes(CudaFunction function,
                                   std::vector<size_t> &sizes, bool &known) {
  size_t i = reinterpret_cast<size_t>(function) - 1;
  const std::string &entry = functions_[i];
  if (Status s = enter("cuFuncGetParamInfo " + entry); !s.isOk())
    return s;
  auto set = paramSizes.find(entry);
  auto image = compiled_.find(functionImages_[i]);
  const std::vector<size_t> *found =
      set != paramSizes.end() ? &set->second : nullptr;
  if (!found && image != compiled_.end()) {
    auto parsed = image->second.params.find(entry);
    if (parsed != image->second.params.end())
      found = &parsed->second;
  }
  known = found != nullptr;
  paramSizesKnown += known;
  sizes = found ? *found : std::vector<size_t>();
  return Status::ok();
}

Status FakeCudaApi::launchKernel(CudaFunction function,
                                 const std::array<uint32_t, 3> &grid,
                                 const std::array<uint32_t, 3> &block,
                                 uint32_t sharedMemoryBytes, CudaStream stream,
                                 void **params, size_t paramCount) {
  const std::string &entry = functions_[reinterpret_cast<size_t>(function) - 1];
  bool programmatic = programmatic_;
  programmatic_ = false;
  if (Status s = enter((programmatic ? "cuLaunchKernelEx " : "cuLaunchKernel ") +
                       entry + " grid=" + std::to_string(grid[0]) +
                       " block=" + std::to_string(block[0]));
      !s.isOk())
    return s;
  // CUDA's limits on every device since sm_30: at most 1024 threads in a
  // block (64 in z), a grid of up to 2^31 - 1 blocks in x and 65535 in y
  // and z, and no dimension 0.
  uint64_t threads = uint64_t(block[0]) * block[1] * block[2];
  if (threads == 0 || threads > 1024 || block[2] > 64 || grid[0] == 0 ||
      grid[1] == 0 || grid[2] == 0 || grid[0] > 0x7fffffffu ||
      grid[1] > 65535 || grid[2] > 65535)
    return Status::error(
        "cuLaunchKernel failed: CUDA_ERROR_INVALID_VALUE (1): invalid "
        "argument (" + entry + ": grid (" + std::to_string(grid[0]) + ", " +
        std::to_string(grid[1]) + ", " + std::to_string(grid[2]) +
        "), block (" + std::to_string(block[0]) + ", " +
        std::to_string(block[1]) + ", " + std::to_string(block[2]) +
        ") outside CUDA's limits)");
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
  std::vector<KernelExtent> extents;
  const std::vector<KernelExtent> *own =
      learnedExtents(reinterpret_cast<size_t>(function) - 1);
  if (own && own->size() == l.args.size())
    extents = *own;
  else if (auto known = kernelArgs.find(entry);
           known != kernelArgs.end() && known->second.size() == l.args.size())
    extents = known->second;
  else
    extents = memory_.extentsByAddress(l.args);
  // Without a host function the launch only takes its place in the
  // stream.
  std::function<void()> run = [] {};
  if (HostKernel fn = functionHosts_[reinterpret_cast<size_t>(function) - 1]) {
    std::vector<void *> args = l.args;
    unsigned g = grid[0], b = block[0];
    std::mutex *lock = kernelLock;
    bool isolate = isolateKernels && !extents.empty();
    std::vector<std::string> *faults = &kernelFaults;
    run = [=]() mutable {
      std::unique_lock<std::mutex> held;
      if (lock)
        held = std::unique_lock<std::mutex>(*lock);
      if (isolate)
        runIsolated(entry, fn, args, extents, g, b, *faults);
      else
        fn(args.data(), g, b);
    };
  }
  if (Status s = work(stream, kernelAccesses(entry, l.args, extents),
                      std::move(run));
      !s.isOk())
    return s;
  return faulted();
}

Status FakeCudaApi::launchKernelProgrammatic(CudaFunction function,
                                             const std::array<uint32_t, 3> &grid,
                                             const std::array<uint32_t, 3> &block,
                                             uint32_t sharedMemoryBytes,
                                             CudaStream stream, void **params,
                                             size_t paramCount) {
  programmatic_ = true;
  return launchKernel(function, grid, block, sharedMemoryBytes, stream, params,
                      paramCount);
}

Status FakeCudaApi::nvrtcCompile(const std::string &source,
                                 const std::string &name, unsigned arch,
                                 std::vector<uint8_t> &cubin, std::string &log) {
  if (Status s = enter("nvrtcCompileProgram " + name); !s.isOk())
    return s;
  nvrtcArchs.push_back(arch);
  // One image per compile: two packages may compile kernels of one name.
  std::string image = "NVRTC sm_" + std::to_string(arch) + " " + name +
                      " from " + std::to_string(source.size()) + " bytes #" +
                      std::to_string(nvrtcArchs.size());
  compiled_[image] = {kernelSignatures(source), codeKey(source.data(), source.size())};
  cubin.assign(image.begin(), image.end());
  cubin.push_back(0);
  log.clear();
  return Status::ok();
}

//===----------------------------------------------------------------------===//
// cuBLASLt
//===----------------------------------------------------------------------===//

const std::vector<KernelExtent> *
FakeCudaApi::learnedExtents(size_t function) const {
  auto code = learned_.find(functionCode_[function]);
  if (code == learned_.end())
    return nullptr;
  auto entry = code->second.find(functions_[function]);
  return entry == code->second.end() ? nullptr : &entry->second;
}

size_t FakeCudaApi::planIndex(GemmPlan plan) const {
  return reinterpret_cast<size_t>(plan) - 1;
}

Status FakeCudaApi::gemmPlan(GemmPlan *plan, const GemmDesc &desc,
                             size_t workspaceBytes, bool *unsupported) {
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
  planWorkspaceBytes.push_back(workspaceBytes);
  selected_.push_back(0);
  *plan = reinterpret_cast<GemmPlan>(plans.size());
  return Status::ok();
}

int FakeCudaApi::gemmAlgorithmCount(GemmPlan plan) {
  return std::max(1, std::min(plans[planIndex(plan)].algorithms, gemmAlgorithms));
}

int FakeCudaApi::gemmSelectedAlgorithm(GemmPlan plan) {
  return selected_[planIndex(plan)];
}

Status FakeCudaApi::gemmSelectAlgorithm(GemmPlan plan, int algorithm) {
  if (algorithm < 0 || algorithm >= gemmAlgorithmCount(plan))
    return Status::error("gemm: algorithm " + std::to_string(algorithm) +
                         " of a plan that holds " +
                         std::to_string(gemmAlgorithmCount(plan)));
  selected_[planIndex(plan)] = algorithm;
  return Status::ok();
}

StatusOr<GemmAlgorithm> FakeCudaApi::gemmAlgorithm(GemmPlan plan, int algorithm) {
  if (algorithm < 0 || algorithm >= gemmAlgorithmCount(plan))
    return Status::error("gemm: no algorithm " + std::to_string(algorithm));
  return GemmAlgorithm{"fake-" + std::to_string(algorithm),
                       "fake algorithm " + std::to_string(algorithm), 0};
}

Status FakeCudaApi::gemmRun(GemmPlan plan, const void *lhs, const void *rhs,
                            void *out, const void *bias, void *biasGrad,
                            const void *c, void *aux, void *workspace,
                            size_t workspaceBytes, CudaStream stream) {
  if (Status s = enter("cublasLtMatmul"); !s.isOk())
    return s;
  GemmDesc desc = plans[planIndex(plan)];
  int algorithm = selected_[planIndex(plan)];
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
  auto span = [&](const std::vector<int64_t> &shape,
                  PkgDType type) {
    return pkgShapeBytes(type, shape).value_or(UINT64_MAX);
  };
  PkgDType in = desc.dtype, result = gemmOutputDType(desc);
  uint64_t outBytes = span({g.batch, g.m, g.n}, result),
           nBytes = span({g.n}, in);
  std::vector<DeviceAccess> accesses;
  for (DeviceAccess a :
       {DeviceAccess{"lhs", lhs, span({g.batch, g.m, g.k}, in), false},
        {"rhs", rhs, span({g.batch, g.k, g.n}, in), false},
        {"result", out, outBytes, true},
        {"C", desc.residual ? c : nullptr, outBytes, false},
        {"aux", aux, outBytes, gemmEpilogueWritesAux(desc.epilogue)},
        {"bias", gemmEpilogueReadsBias(desc.epilogue) ? bias : nullptr, nBytes,
         false},
        {"bias gradient", biasGrad, nBytes, true}}) {
    if (!a.at)
      continue;
    a.what = "cublasLtMatmul " + a.what;
    if (Status s = inBounds(a.what, a.at, a.bytes); !s.isOk())
      return s;
    accesses.push_back(std::move(a));
  }
  // The plan's algorithms were chosen for pointers aligned to
  // desc.alignmentBytes (cuBLASLt's MIN_ALIGNMENT preferences): one that
  // is less aligned may meet vector loads it cannot take.
  for (const DeviceAccess &a : accesses)
    if (desc.alignmentBytes &&
        reinterpret_cast<uintptr_t>(a.at) % desc.alignmentBytes)
      return Status::error(
          a.what + ": the pointer is " +
          std::to_string(reinterpret_cast<uintptr_t>(a.at) % 256) +
          " bytes past a 256-byte boundary, and the plan's algorithm was "
          "chosen for " + std::to_string(desc.alignmentBytes) +
          "-byte alignment (MIN_ALIGNMENT preferences): cuBLASLt may refuse "
          "it or misread it (fake)");
  // The plan's algorithms were chosen for its workspace: one that needs
  // all of it fails with less (CUBLAS_STATUS_INVALID_VALUE, cuBLASLt's
  // answer when workspaceSizeInBytes is below what the algorithm needs).
  if (size_t allowed = planWorkspaceBytes[planIndex(plan)];
      (workspace ? workspaceBytes : 0) < allowed)
    return Status::error(
        "cublasLtMatmul failed: CUBLAS_STATUS_INVALID_VALUE (7): " +
        std::to_string(workspace ? workspaceBytes : 0) +
        " bytes of workspace, and the plan's algorithms were chosen for " +
        std::to_string(allowed) + " (fake)");
  gemms.push_back({desc, lhs, rhs, out, c, aux, algorithm});
  // cuBLASLt's scratch (not bounds-checked: the fake's GEMM never touches
  // it).
  if (workspace && workspaceBytes)
    accesses.push_back(
        {"cublasLtMatmul workspace", workspace, workspaceBytes, true});
  return work(stream, std::move(accesses), [=] {
    hostGemm(desc, lhs, rhs, out, bias, biasGrad, c, aux);
  });
}

//===----------------------------------------------------------------------===//
// The fake's own machinery
//===----------------------------------------------------------------------===//

Status FakeCudaApi::enter(const std::string &call) {
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

Status FakeCudaApi::inBounds(const std::string &what, const void *p,
                             uint64_t bytes) {
  std::string why = memory_.outOfBounds(what, p, bytes);
  if (why.empty())
    return Status::ok();
  outOfBounds.push_back(why);
  return Status::error("fake: out of bounds: " + why);
}

Status FakeCudaApi::inBounds(const std::string &what, CopyKind kind,
                             const void *dst, const void *src, uint64_t bytes) {
  if (kind != CopyKind::DeviceToHost)
    if (Status s = inBounds(what + " destination", dst, bytes); !s.isOk())
      return s;
  if (kind != CopyKind::HostToDevice)
    return inBounds(what + " source", src, bytes);
  return Status::ok();
}

Status FakeCudaApi::work(CudaStream stream, std::vector<DeviceAccess> accesses,
                         std::function<void()> fn) {
  if (capturing && stream == captureStream_) {
    if (Status s = captureInvalidated("work queued on the capturing stream");
        !s.isOk())
      return s;
    captured_.push_back({std::move(fn), std::move(accesses)});
    return Status::ok();
  }
  if (Status s = order(stream, accesses); !s.isOk())
    return s;
  return dispatch(stream, std::move(fn));
}

Status FakeCudaApi::breaksCapture(const std::string &call,
                                  const std::string &code,
                                  const std::string &text) {
  if (captureBroken_.empty())
    captureBroken_ = call + ": " + code;
  return Status::error(call + " failed: " + code + ": " + text);
}

Status FakeCudaApi::unsafeWhileCapturing(const std::string &call) {
  if (!capturing || std::this_thread::get_id() != captureThread_)
    return Status::ok();
  return breaksCapture(call, kCaptureUnsupported, kCaptureUnsupportedText);
}

Status FakeCudaApi::captureInvalidated(const std::string &call) const {
  if (captureBroken_.empty())
    return Status::ok();
  return Status::error(call + " failed: cudaErrorStreamCaptureInvalidated "
                              "(901): operation failed due to a previous "
                              "error during capture");
}

Status FakeCudaApi::order(CudaStream stream,
                          const std::vector<DeviceAccess> &accesses) {
  std::string race = order_.queue(stream, accesses, memory_);
  if (race.empty())
    return Status::ok();
  races.push_back(race);
  return Status::error("fake: a race: " + race);
}

Status FakeCudaApi::dispatch(CudaStream stream, std::function<void()> fn) {
  if (!asyncStreams) {
    fn();
    return Status::ok();
  }
  Queue &q = queues_[stream];
  q.ops.push_back({std::move(fn), nullptr, 0});
  ++q.issued;
  return Status::ok();
}

void FakeCudaApi::drain(CudaStream stream, uint64_t until) {
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

void FakeCudaApi::synchronizeAll() {
  order_.hostWaitsForAll();
  for (auto &[stream, q] : queues_)
    drain(stream, q.issued);
}

bool FakeCudaApi::dropped(const std::string &call) {
  if (!dropSync || !dropSync(call, syncCalls_[call]++))
    return false;
  calls.push_back(call + " (dropped)");
  return true;
}

Status FakeCudaApi::faulted() const {
  if (kernelFaults.empty())
    return Status::ok();
  return Status::error("cudaErrorIllegalAddress (700): an illegal memory "
                       "access was encountered (fake: " +
                       kernelFaults.front() + ")");
}

} // namespace kiln::runtime::cuda::testing
