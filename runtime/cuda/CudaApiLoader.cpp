//===- CudaApiLoader.cpp - the CUDA table through dlopen ------------------===//
//
// See CudaApi.h. The toolkit's headers give the types, enum values and
// signatures (decltype of a declared function needs no library); every
// entry point is found at run time: cudart and cuBLASLt and NVRTC by dlsym,
// the driver's through cudaGetDriverEntryPointByVersion (ABI of CUDA 12.0),
// so nothing links libcudart, libcublasLt, libnvrtc or libcuda. Every
// return code is checked and turned into a Status naming the call.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudaApi.h"

#include "runtime/DynamicLibrary.h"

#include <cublasLt.h>
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <nvrtc.h>

#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace kiln::runtime::cuda {

namespace {

using kiln::runtime::DynamicLibrary;

// The driver ABI the entry points are requested at.
constexpr unsigned kDriverAbiVersion = 12000;

std::string includeDirectory() {
  if (const char *dir = std::getenv("KILN_CUDA_INCLUDE_DIR"))
    return dir;
#ifdef KILN_CUDA_INCLUDE_DIR
  return KILN_CUDA_INCLUDE_DIR;
#else
  return "/usr/local/cuda/include";
#endif
}

#define KILN_CUDA_FN(name) decltype(&::name) name = nullptr

class RealCudaApi final : public CudaApi {
public:
  Status load(bool requireDriver);
  ~RealCudaApi() override {
    if (lt_ && ltHandle_)
      lt_.cublasLtDestroy(ltHandle_);
  }

  std::string describe() const override {
    return cudartPath_ + (ltPath_.empty() ? "" : ", " + ltPath_) +
           (nvrtcPath_.empty() ? "" : ", " + nvrtcPath_);
  }

  StatusOr<CudaDeviceInfo> deviceInfo(int device) override {
    StatusOr<CudaRuntimeInfo> info = discoverCudaDevices();
    if (!info.isOk())
      return info.status();
    if (device < 0 || device >= static_cast<int>(info->devices.size()))
      return Status::error("CUDA device " + std::to_string(device) +
                           ": expected 0.." +
                           std::to_string(info->devices.size()) +
                           " (exclusive); " + describeCudaDevices());
    return info->devices[device];
  }

  Status setDevice(int device) override {
    if (Status s = rt(rt_.cudaSetDevice(device), "cudaSetDevice"); !s.isOk())
      return s;
    return rt(rt_.cudaFree(nullptr), "cudaFree(0) (creating the context)");
  }

  Status malloc(void **ptr, size_t bytes) override {
    return rt(rt_.cudaMalloc(ptr, bytes),
              "cudaMalloc of " + std::to_string(bytes) + " bytes");
  }
  Status memGetInfo(size_t *freeBytes, size_t *totalBytes) override {
    return rt(rt_.cudaMemGetInfo(freeBytes, totalBytes), "cudaMemGetInfo");
  }
  Status free(void *ptr) override { return rt(rt_.cudaFree(ptr), "cudaFree"); }
  Status mallocHost(void **ptr, size_t bytes) override {
    return rt(rt_.cudaMallocHost(ptr, bytes),
              "cudaMallocHost of " + std::to_string(bytes) + " bytes");
  }
  Status freeHost(void *ptr) override {
    return rt(rt_.cudaFreeHost(ptr), "cudaFreeHost");
  }
  Status memcpyAsync(void *dst, const void *src, size_t bytes, CopyKind kind,
                     CudaStream stream) override {
    cudaMemcpyKind k = kind == CopyKind::HostToDevice   ? cudaMemcpyHostToDevice
                       : kind == CopyKind::DeviceToHost ? cudaMemcpyDeviceToHost
                                                        : cudaMemcpyDeviceToDevice;
    return rt(rt_.cudaMemcpyAsync(dst, src, bytes, k, cudaStream_t(stream)),
              "cudaMemcpyAsync");
  }
  Status memsetAsync(void *dst, int value, size_t bytes,
                     CudaStream stream) override {
    return rt(rt_.cudaMemsetAsync(dst, value, bytes, cudaStream_t(stream)),
              "cudaMemsetAsync");
  }

  Status streamCreate(CudaStream *stream) override {
    cudaStream_t s = nullptr;
    Status st = rt(rt_.cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking),
                   "cudaStreamCreateWithFlags");
    *stream = s;
    return st;
  }
  Status streamDestroy(CudaStream stream) override {
    return rt(rt_.cudaStreamDestroy(cudaStream_t(stream)), "cudaStreamDestroy");
  }
  Status streamSynchronize(CudaStream stream) override {
    return rt(rt_.cudaStreamSynchronize(cudaStream_t(stream)),
              "cudaStreamSynchronize");
  }
  Status streamWaitEvent(CudaStream stream, CudaEvent event) override {
    return rt(rt_.cudaStreamWaitEvent(cudaStream_t(stream), cudaEvent_t(event), 0),
              "cudaStreamWaitEvent");
  }
  Status eventCreate(CudaEvent *event) override {
    cudaEvent_t e = nullptr;
    Status s = rt(rt_.cudaEventCreate(&e), "cudaEventCreate");
    *event = e;
    return s;
  }
  Status eventDestroy(CudaEvent event) override {
    return rt(rt_.cudaEventDestroy(cudaEvent_t(event)), "cudaEventDestroy");
  }
  Status eventRecord(CudaEvent event, CudaStream stream) override {
    return rt(rt_.cudaEventRecord(cudaEvent_t(event), cudaStream_t(stream)),
              "cudaEventRecord");
  }
  Status eventSynchronize(CudaEvent event) override {
    return rt(rt_.cudaEventSynchronize(cudaEvent_t(event)),
              "cudaEventSynchronize");
  }
  Status eventElapsedMs(float *ms, CudaEvent start, CudaEvent end) override {
    return rt(rt_.cudaEventElapsedTime(ms, cudaEvent_t(start), cudaEvent_t(end)),
              "cudaEventElapsedTime");
  }

  Status streamBeginCapture(CudaStream stream) override {
    return rt(rt_.cudaStreamBeginCapture(cudaStream_t(stream),
                                         cudaStreamCaptureModeThreadLocal),
              "cudaStreamBeginCapture");
  }
  Status streamEndCapture(CudaStream stream, CudaGraph *graph) override {
    cudaGraph_t g = nullptr;
    Status s = rt(rt_.cudaStreamEndCapture(cudaStream_t(stream), &g),
                  "cudaStreamEndCapture");
    *graph = g;
    return s;
  }
  Status graphInstantiate(CudaGraphExec *exec, CudaGraph graph) override {
    cudaGraphExec_t e = nullptr;
    Status s = rt(rt_.cudaGraphInstantiate(&e, cudaGraph_t(graph), 0),
                  "cudaGraphInstantiate");
    *exec = e;
    return s;
  }
  Status graphLaunch(CudaGraphExec exec, CudaStream stream) override {
    return rt(rt_.cudaGraphLaunch(cudaGraphExec_t(exec), cudaStream_t(stream)),
              "cudaGraphLaunch");
  }
  Status graphDestroy(CudaGraph graph) override {
    return rt(rt_.cudaGraphDestroy(cudaGraph_t(graph)), "cudaGraphDestroy");
  }
  Status graphExecDestroy(CudaGraphExec exec) override {
    return rt(rt_.cudaGraphExecDestroy(cudaGraphExec_t(exec)),
              "cudaGraphExecDestroy");
  }

  Status moduleLoadData(CudaModule *module, const void *image,
                        size_t) override {
    if (!drv_.cuModuleLoadData)
      return noDriver("cuModuleLoadData");
    CUmodule m = nullptr;
    Status s = drv(drv_.cuModuleLoadData(&m, image), "cuModuleLoadData");
    *module = m;
    return s;
  }
  Status moduleUnload(CudaModule module) override {
    if (!drv_.cuModuleUnload)
      return noDriver("cuModuleUnload");
    return drv(drv_.cuModuleUnload(CUmodule(module)), "cuModuleUnload");
  }
  Status moduleGetFunction(CudaFunction *function, CudaModule module,
                           const char *name) override {
    if (!drv_.cuModuleGetFunction)
      return noDriver("cuModuleGetFunction");
    CUfunction f = nullptr;
    Status s = drv(drv_.cuModuleGetFunction(&f, CUmodule(module), name),
                   std::string("cuModuleGetFunction(") + name + ")");
    *function = f;
    return s;
  }
  Status funcSetMaxDynamicSharedMemory(CudaFunction function,
                                       uint32_t bytes) override {
    if (!drv_.cuFuncSetAttribute)
      return noDriver("cuFuncSetAttribute");
    return drv(drv_.cuFuncSetAttribute(
                   CUfunction(function),
                   CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, int(bytes)),
               "cuFuncSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_"
               "BYTES, " + std::to_string(bytes) + ")");
  }
  Status funcParamSizes(CudaFunction function, std::vector<size_t> &sizes,
                        bool &known) override {
    sizes.clear();
    known = false;
    if (!drv_.cuFuncGetParamInfo)
      return Status::ok();
    // Index by index until the driver says there is no such parameter
    // (CUDA_ERROR_INVALID_VALUE); a kernel takes at most 32764 bytes of them.
    for (size_t i = 0; i < 32768; ++i) {
      size_t offset = 0, size = 0;
      CUresult code = drv_.cuFuncGetParamInfo(CUfunction(function), i, &offset,
                                              &size);
      if (code == CUDA_ERROR_INVALID_VALUE) {
        known = true;
        return Status::ok();
      }
      if (code != CUDA_SUCCESS) {
        // Any other answer (a function kind the query does not cover):
        // the driver cannot say, and the launch goes unchecked as on a
        // driver without the query.
        sizes.clear();
        return Status::ok();
      }
      sizes.push_back(size);
    }
    sizes.clear();
    return Status::ok();
  }
  Status launchKernel(CudaFunction function, const std::array<uint32_t, 3> &grid,
                      const std::array<uint32_t, 3> &block,
                      uint32_t sharedMemoryBytes, CudaStream stream,
                      void **params, size_t) override {
    if (!drv_.cuLaunchKernel)
      return noDriver("cuLaunchKernel");
    return drv(drv_.cuLaunchKernel(CUfunction(function), grid[0], grid[1],
                                   grid[2], block[0], block[1], block[2],
                                   sharedMemoryBytes, CUstream(stream), params,
                                   nullptr),
               "cuLaunchKernel");
  }
  Status launchKernelProgrammatic(CudaFunction function,
                                  const std::array<uint32_t, 3> &grid,
                                  const std::array<uint32_t, 3> &block,
                                  uint32_t sharedMemoryBytes, CudaStream stream,
                                  void **params, size_t count) override {
    if (!drv_.cuLaunchKernelEx)
      return launchKernel(function, grid, block, sharedMemoryBytes, stream,
                          params, count);
    CUlaunchAttribute attribute{};
    attribute.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attribute.value.programmaticStreamSerializationAllowed = 1;
    CUlaunchConfig config{};
    config.gridDimX = grid[0], config.gridDimY = grid[1], config.gridDimZ = grid[2];
    config.blockDimX = block[0], config.blockDimY = block[1],
    config.blockDimZ = block[2];
    config.sharedMemBytes = sharedMemoryBytes;
    config.hStream = CUstream(stream);
    config.attrs = &attribute;
    config.numAttrs = 1;
    return drv(drv_.cuLaunchKernelEx(&config, CUfunction(function), params,
                                     nullptr),
               "cuLaunchKernelEx(PROGRAMMATIC_STREAM_SERIALIZATION)");
  }

  Status nvrtcCompile(const std::string &source, const std::string &name,
                      unsigned arch, std::vector<uint8_t> &cubin,
                      std::string &log) override;

  std::string nvrtcIdentity() override {
    int major = 0, minor = 0;
    if (!nvrtc_ || !nvrtc_.nvrtcVersion ||
        nvrtc_.nvrtcVersion(&major, &minor) != NVRTC_SUCCESS)
      return "";
    // What a compile depends on besides the source and the architecture:
    // the version, the library and the headers it includes.
    return "NVRTC " + std::to_string(major) + "." + std::to_string(minor) +
           " (" + nvrtcPath_ + ") -std=c++17 -default-device -I" +
           includeDirectory();
  }

  Status gemmPlan(GemmPlan *plan, const GemmDesc &desc, size_t workspaceBytes,
                  bool *unsupported) override;
  using CudaApi::gemmRun;
  Status gemmRun(GemmPlan plan, const void *lhs, const void *rhs, void *out,
                 const void *bias, void *biasGrad, const void *c, void *aux,
                 void *workspace, size_t workspaceBytes,
                 CudaStream stream) override;
  Status gemmDestroy(GemmPlan plan) override;
  int gemmAlgorithmCount(GemmPlan plan) override;
  int gemmSelectedAlgorithm(GemmPlan plan) override;
  Status gemmSelectAlgorithm(GemmPlan plan, int index) override;
  StatusOr<GemmAlgorithm> gemmAlgorithm(GemmPlan plan, int index) override;
  std::string gemmLibraryVersion() override {
    if (!lt_)
      return "no cuBLASLt";
    // Optional symbols: older libraries may lack them.
    return "cuBLASLt " + (lt_.cublasLtGetVersion
                              ? std::to_string(lt_.cublasLtGetVersion())
                              : std::string("unknown")) +
           " (" + ltPath_ + ")";
  }

private:
  Status rt(cudaError_t code, const std::string &call) const {
    if (code == cudaSuccess)
      return Status::ok();
    // The error is reported here; cudart would also keep it as the
    // thread's last error, where a library that checks cudaGetLastError
    // after its own launches (cuBLASLt, NCCL) would take it for its own:
    // after a capture that failed and fell back to plain launches, say.
    // (A sticky error stays: every later call returns it anyway.)
    (void)rt_.cudaGetLastError();
    return Status::error(call + " failed: " + rt_.cudaGetErrorName(code) + " (" +
                         std::to_string(int(code)) +
                         "): " + rt_.cudaGetErrorString(code));
  }
  Status noDriver(const std::string &call) const {
    return Status::error(call + ": no CUDA driver (" + driverError_ + ")");
  }
  Status drv(CUresult code, const std::string &call) const {
    if (code == CUDA_SUCCESS)
      return Status::ok();
    const char *name = "unknown", *text = "unknown";
    if (drv_.cuGetErrorName)
      drv_.cuGetErrorName(code, &name);
    if (drv_.cuGetErrorString)
      drv_.cuGetErrorString(code, &text);
    return Status::error(call + " failed: " + name + " (" +
                         std::to_string(int(code)) + "): " + text);
  }
  Status blas(cublasStatus_t code, const std::string &call) const {
    if (code == CUBLAS_STATUS_SUCCESS)
      return Status::ok();
    return Status::error(call + " failed: " + lt_.cublasLtGetStatusName(code) +
                         " (" + std::to_string(int(code)) +
                         "): " + lt_.cublasLtGetStatusString(code));
  }
  Status nv(nvrtcResult code, const std::string &call) const {
    if (code == NVRTC_SUCCESS)
      return Status::ok();
    return Status::error(call + " failed: " + nvrtc_.nvrtcGetErrorString(code) +
                         " (" + std::to_string(int(code)) + ")");
  }
  Status needLt() {
    if (lt_)
      return Status::ok();
    return Status::error("cuBLASLt is not available (tried " + ltTried_ +
                         "; set KILN_CUBLASLT to its path)");
  }

  struct Runtime {
    KILN_CUDA_FN(cudaGetErrorName);
    KILN_CUDA_FN(cudaGetErrorString);
    KILN_CUDA_FN(cudaGetLastError);
    KILN_CUDA_FN(cudaSetDevice);
    KILN_CUDA_FN(cudaMalloc);
    KILN_CUDA_FN(cudaMemGetInfo);
    KILN_CUDA_FN(cudaFree);
    KILN_CUDA_FN(cudaMallocHost);
    KILN_CUDA_FN(cudaFreeHost);
    KILN_CUDA_FN(cudaMemcpyAsync);
    KILN_CUDA_FN(cudaMemsetAsync);
    KILN_CUDA_FN(cudaStreamCreateWithFlags);
    KILN_CUDA_FN(cudaStreamDestroy);
    KILN_CUDA_FN(cudaStreamSynchronize);
    KILN_CUDA_FN(cudaStreamWaitEvent);
    KILN_CUDA_FN(cudaEventCreate);
    KILN_CUDA_FN(cudaEventDestroy);
    KILN_CUDA_FN(cudaEventRecord);
    KILN_CUDA_FN(cudaEventSynchronize);
    KILN_CUDA_FN(cudaEventElapsedTime);
    KILN_CUDA_FN(cudaStreamBeginCapture);
    KILN_CUDA_FN(cudaStreamEndCapture);
    KILN_CUDA_FN(cudaGraphInstantiate);
    KILN_CUDA_FN(cudaGraphLaunch);
    KILN_CUDA_FN(cudaGraphDestroy);
    KILN_CUDA_FN(cudaGraphExecDestroy);
    KILN_CUDA_FN(cudaGetDriverEntryPointByVersion);
  } rt_;
  struct Driver {
    KILN_CUDA_FN(cuGetErrorName);
    KILN_CUDA_FN(cuGetErrorString);
    KILN_CUDA_FN(cuModuleLoadData);
    KILN_CUDA_FN(cuModuleUnload);
    KILN_CUDA_FN(cuModuleGetFunction);
    KILN_CUDA_FN(cuFuncSetAttribute);
    KILN_CUDA_FN(cuLaunchKernel);
    // Optional (CUDA 12): launches with attributes, for programmatic
    // dependent launch; without it such launches are plain ones.
    KILN_CUDA_FN(cuLaunchKernelEx);
    // Optional (CUDA 12.4): a kernel's parameter sizes, checked against
    // the buffers a package's thunk passes it.
    KILN_CUDA_FN(cuFuncGetParamInfo);
  } drv_;
  struct Lt {
    explicit operator bool() const { return cublasLtMatmul != nullptr; }
    KILN_CUDA_FN(cublasLtCreate);
    KILN_CUDA_FN(cublasLtDestroy);
    KILN_CUDA_FN(cublasLtGetStatusName);
    KILN_CUDA_FN(cublasLtGetStatusString);
    KILN_CUDA_FN(cublasLtMatmulDescCreate);
    KILN_CUDA_FN(cublasLtMatmulDescDestroy);
    KILN_CUDA_FN(cublasLtMatmulDescSetAttribute);
    KILN_CUDA_FN(cublasLtMatrixLayoutCreate);
    KILN_CUDA_FN(cublasLtMatrixLayoutDestroy);
    KILN_CUDA_FN(cublasLtMatrixLayoutSetAttribute);
    KILN_CUDA_FN(cublasLtMatmulPreferenceCreate);
    KILN_CUDA_FN(cublasLtMatmulPreferenceDestroy);
    KILN_CUDA_FN(cublasLtMatmulPreferenceSetAttribute);
    KILN_CUDA_FN(cublasLtMatmulAlgoGetHeuristic);
    KILN_CUDA_FN(cublasLtMatmul);
    // Optional: for the autotuner's descriptions and cache keys.
    KILN_CUDA_FN(cublasLtGetVersion);
    KILN_CUDA_FN(cublasLtMatmulAlgoConfigGetAttribute);
  } lt_;
  struct Nvrtc {
    explicit operator bool() const { return nvrtcCompileProgram != nullptr; }
    KILN_CUDA_FN(nvrtcGetErrorString);
    KILN_CUDA_FN(nvrtcCreateProgram);
    KILN_CUDA_FN(nvrtcCompileProgram);
    KILN_CUDA_FN(nvrtcGetProgramLogSize);
    KILN_CUDA_FN(nvrtcGetProgramLog);
    KILN_CUDA_FN(nvrtcGetCUBINSize);
    KILN_CUDA_FN(nvrtcGetCUBIN);
    KILN_CUDA_FN(nvrtcDestroyProgram);
    // Optional: for the cubin cache's key.
    KILN_CUDA_FN(nvrtcVersion);
  } nvrtc_;

  std::string cudartPath_, ltPath_, nvrtcPath_, ltTried_, nvrtcTried_;
  std::string driverError_;
  cublasLtHandle_t ltHandle_ = nullptr;
};

// Looks up every listed symbol in |handle|; false with |missing| naming the
// first absent one.
#define KILN_DLSYM(table, handle, name)                                        \
  (table.name = reinterpret_cast<decltype(table.name)>(dlsym(handle, #name)),  \
   table.name != nullptr || (missing = #name, false))

Status RealCudaApi::load(bool requireDriver) {
  std::string missing;
  DynamicLibrary cudartLibrary = openCudaLibrary("libcudart", "KILN_CUDART");
  void *cudart = cudartLibrary.handle;
  cudartPath_ = cudartLibrary.path;
  if (!cudart)
    return Status::error("no CUDA runtime library found: " +
                         describeLoadFailure(cudartLibrary, "KILN_CUDART"));
  bool ok = KILN_DLSYM(rt_, cudart, cudaGetErrorName) &&
            KILN_DLSYM(rt_, cudart, cudaGetErrorString) &&
            KILN_DLSYM(rt_, cudart, cudaGetLastError) &&
            KILN_DLSYM(rt_, cudart, cudaSetDevice) &&
            KILN_DLSYM(rt_, cudart, cudaMalloc) &&
            KILN_DLSYM(rt_, cudart, cudaMemGetInfo) &&
            KILN_DLSYM(rt_, cudart, cudaFree) &&
            KILN_DLSYM(rt_, cudart, cudaMallocHost) &&
            KILN_DLSYM(rt_, cudart, cudaFreeHost) &&
            KILN_DLSYM(rt_, cudart, cudaMemcpyAsync) &&
            KILN_DLSYM(rt_, cudart, cudaMemsetAsync) &&
            KILN_DLSYM(rt_, cudart, cudaStreamCreateWithFlags) &&
            KILN_DLSYM(rt_, cudart, cudaStreamDestroy) &&
            KILN_DLSYM(rt_, cudart, cudaStreamSynchronize) &&
            KILN_DLSYM(rt_, cudart, cudaStreamWaitEvent) &&
            KILN_DLSYM(rt_, cudart, cudaEventCreate) &&
            KILN_DLSYM(rt_, cudart, cudaEventDestroy) &&
            KILN_DLSYM(rt_, cudart, cudaEventRecord) &&
            KILN_DLSYM(rt_, cudart, cudaEventSynchronize) &&
            KILN_DLSYM(rt_, cudart, cudaEventElapsedTime) &&
            KILN_DLSYM(rt_, cudart, cudaStreamBeginCapture) &&
            KILN_DLSYM(rt_, cudart, cudaStreamEndCapture) &&
            KILN_DLSYM(rt_, cudart, cudaGraphInstantiate) &&
            KILN_DLSYM(rt_, cudart, cudaGraphLaunch) &&
            KILN_DLSYM(rt_, cudart, cudaGraphDestroy) &&
            KILN_DLSYM(rt_, cudart, cudaGraphExecDestroy) &&
            KILN_DLSYM(rt_, cudart, cudaGetDriverEntryPointByVersion);
  if (!ok)
    return Status::error(cudartPath_ + ": expected the symbol " + missing +
                         ", found none (cudart 12.5 or newer is needed)");

  // cuBLASLt and NVRTC: optional until used.
  DynamicLibrary ltLibrary = openCudaLibrary("libcublasLt", "KILN_CUBLASLT");
  ltPath_ = ltLibrary.path;
  ltTried_ = ltLibrary.tried;
  if (void *lt = ltLibrary.handle) {
    Lt table;
    bool ltOk = KILN_DLSYM(table, lt, cublasLtCreate) &&
                KILN_DLSYM(table, lt, cublasLtDestroy) &&
                KILN_DLSYM(table, lt, cublasLtGetStatusName) &&
                KILN_DLSYM(table, lt, cublasLtGetStatusString) &&
                KILN_DLSYM(table, lt, cublasLtMatmulDescCreate) &&
                KILN_DLSYM(table, lt, cublasLtMatmulDescDestroy) &&
                KILN_DLSYM(table, lt, cublasLtMatmulDescSetAttribute) &&
                KILN_DLSYM(table, lt, cublasLtMatrixLayoutCreate) &&
                KILN_DLSYM(table, lt, cublasLtMatrixLayoutDestroy) &&
                KILN_DLSYM(table, lt, cublasLtMatrixLayoutSetAttribute) &&
                KILN_DLSYM(table, lt, cublasLtMatmulPreferenceCreate) &&
                KILN_DLSYM(table, lt, cublasLtMatmulPreferenceDestroy) &&
                KILN_DLSYM(table, lt, cublasLtMatmulPreferenceSetAttribute) &&
                KILN_DLSYM(table, lt, cublasLtMatmulAlgoGetHeuristic) &&
                KILN_DLSYM(table, lt, cublasLtMatmul);
    table.cublasLtGetVersion = reinterpret_cast<decltype(
        table.cublasLtGetVersion)>(dlsym(lt, "cublasLtGetVersion"));
    table.cublasLtMatmulAlgoConfigGetAttribute =
        reinterpret_cast<decltype(table.cublasLtMatmulAlgoConfigGetAttribute)>(
            dlsym(lt, "cublasLtMatmulAlgoConfigGetAttribute"));
    if (ltOk)
      lt_ = table;
    else
      ltTried_ = ltPath_ + " (lacks " + missing + ")";
  }
  DynamicLibrary nvrtcLibrary = openCudaLibrary("libnvrtc", "KILN_NVRTC");
  nvrtcPath_ = nvrtcLibrary.path;
  nvrtcTried_ = nvrtcLibrary.tried;
  if (void *nv = nvrtcLibrary.handle) {
    Nvrtc table;
    bool nvOk = KILN_DLSYM(table, nv, nvrtcGetErrorString) &&
                KILN_DLSYM(table, nv, nvrtcCreateProgram) &&
                KILN_DLSYM(table, nv, nvrtcCompileProgram) &&
                KILN_DLSYM(table, nv, nvrtcGetProgramLogSize) &&
                KILN_DLSYM(table, nv, nvrtcGetProgramLog) &&
                KILN_DLSYM(table, nv, nvrtcGetCUBINSize) &&
                KILN_DLSYM(table, nv, nvrtcGetCUBIN) &&
                KILN_DLSYM(table, nv, nvrtcDestroyProgram);
    table.nvrtcVersion = reinterpret_cast<decltype(table.nvrtcVersion)>(
        dlsym(nv, "nvrtcVersion"));
    if (nvOk)
      nvrtc_ = table;
    else
      nvrtcTried_ = nvrtcPath_ + " (lacks " + missing + ")";
  }
  // The driver's entry points; a machine without a driver fails here.
  auto entry = [&](const char *symbol, void **fn) -> Status {
    cudaDriverEntryPointQueryResult query = cudaDriverEntryPointSuccess;
    cudaError_t code = rt_.cudaGetDriverEntryPointByVersion(
        symbol, fn, kDriverAbiVersion, cudaEnableDefault, &query);
    if (code != cudaSuccess)
      return rt(code, std::string("cudaGetDriverEntryPointByVersion(") +
                          symbol + ")");
    if (query != cudaDriverEntryPointSuccess || !*fn)
      return Status::error(std::string("cudaGetDriverEntryPointByVersion(") +
                           symbol + "): the driver has no such entry point "
                           "for CUDA " + std::to_string(kDriverAbiVersion / 1000) +
                           " (query result " + std::to_string(int(query)) + ")");
    return Status::ok();
  };
#define KILN_DRIVER(name)                                                      \
  if (Status s = entry(#name, reinterpret_cast<void **>(&drv_.name));         \
      !s.isOk()) {                                                             \
    drv_ = Driver();                                                           \
    driverError_ = s.message();                                                \
    return requireDriver ? s : Status::ok();                                   \
  }
  KILN_DRIVER(cuGetErrorName)
  KILN_DRIVER(cuGetErrorString)
  KILN_DRIVER(cuModuleLoadData)
  KILN_DRIVER(cuModuleUnload)
  KILN_DRIVER(cuModuleGetFunction)
  KILN_DRIVER(cuFuncSetAttribute)
  KILN_DRIVER(cuLaunchKernel)
#undef KILN_DRIVER
  if (!entry("cuLaunchKernelEx", reinterpret_cast<void **>(&drv_.cuLaunchKernelEx))
           .isOk())
    drv_.cuLaunchKernelEx = nullptr;
  // Since CUDA 12.4, so asked for by that version.
  {
    cudaDriverEntryPointQueryResult query = cudaDriverEntryPointSuccess;
    if (rt_.cudaGetDriverEntryPointByVersion(
            "cuFuncGetParamInfo",
            reinterpret_cast<void **>(&drv_.cuFuncGetParamInfo), 12040,
            cudaEnableDefault, &query) != cudaSuccess ||
        query != cudaDriverEntryPointSuccess)
      drv_.cuFuncGetParamInfo = nullptr;
  }

  return Status::ok();
}

Status RealCudaApi::nvrtcCompile(const std::string &source,
                                 const std::string &name, unsigned arch,
                                 std::vector<uint8_t> &cubin, std::string &log) {
  if (!nvrtc_)
    return Status::error("NVRTC is not available (tried " + nvrtcTried_ +
                         "; set KILN_NVRTC to its path)");
  nvrtcProgram program = nullptr;
  if (Status s = nv(nvrtc_.nvrtcCreateProgram(&program, source.c_str(),
                                               (name + ".cu").c_str(), 0,
                                               nullptr, nullptr),
                    "nvrtcCreateProgram");
      !s.isOk())
    return s;
  std::vector<std::string> options = {
      "--gpu-architecture=sm_" + std::to_string(arch), "-std=c++17",
      "-default-device", "-I" + includeDirectory()};
  std::vector<const char *> argv;
  for (const std::string &o : options)
    argv.push_back(o.c_str());
  nvrtcResult compiled = nvrtc_.nvrtcCompileProgram(
      program, static_cast<int>(argv.size()), argv.data());
  size_t logSize = 0;
  log.clear();
  if (nvrtc_.nvrtcGetProgramLogSize(program, &logSize) == NVRTC_SUCCESS &&
      logSize > 1) {
    log.resize(logSize);
    nvrtc_.nvrtcGetProgramLog(program, &log[0]);
    log.resize(logSize - 1);
  }
  Status s = nv(compiled, "nvrtcCompileProgram for sm_" + std::to_string(arch));
  size_t size = 0;
  if (s.isOk())
    s = nv(nvrtc_.nvrtcGetCUBINSize(program, &size), "nvrtcGetCUBINSize");
  if (s.isOk()) {
    cubin.resize(size);
    s = nv(nvrtc_.nvrtcGetCUBIN(program, reinterpret_cast<char *>(cubin.data())),
           "nvrtcGetCUBIN");
  }
  nvrtc_.nvrtcDestroyProgram(&program);
  if (!s.isOk() && !log.empty())
    return Status::error(s.message() + "\n" + log);
  return s;
}

// A planned GEMM: cuBLASLt's descriptors and the algorithms the heuristic
// offered (best first, at most desc.algorithms), kept for every run, which
// uses algos[selected].
struct LtPlan {
  GemmDesc desc;
  cublasLtMatmulDesc_t matmul = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  std::vector<cublasLtMatmulHeuristicResult_t> algos;
  int selected = 0;
  size_t workspaceBytes = 0;
  float alpha32 = 1, beta32 = 0;
  double alpha64 = 1, beta64 = 0;
};

cudaDataType_t dataType(PkgDType dtype) {
  switch (dtype) {
  case PkgDType::F64: return CUDA_R_64F;
  case PkgDType::F16: return CUDA_R_16F;
  case PkgDType::BF16: return CUDA_R_16BF;
  default: return CUDA_R_32F;
  }
}

cublasLtEpilogue_t ltEpilogue(GemmEpilogue e) {
  switch (e) {
  case GemmEpilogue::None: return CUBLASLT_EPILOGUE_DEFAULT;
  case GemmEpilogue::Bias: return CUBLASLT_EPILOGUE_BIAS;
  case GemmEpilogue::Relu: return CUBLASLT_EPILOGUE_RELU;
  case GemmEpilogue::BiasRelu: return CUBLASLT_EPILOGUE_RELU_BIAS;
  case GemmEpilogue::Gelu: return CUBLASLT_EPILOGUE_GELU;
  case GemmEpilogue::BiasGelu: return CUBLASLT_EPILOGUE_GELU_BIAS;
  // Row-major rhs is cuBLASLt's A (CudaApi.h's LtGemm).
  case GemmEpilogue::BiasGradient: return CUBLASLT_EPILOGUE_BGRADA;
  case GemmEpilogue::GeluAux: return CUBLASLT_EPILOGUE_GELU_AUX;
  case GemmEpilogue::BiasGeluAux: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  case GemmEpilogue::DGelu: return CUBLASLT_EPILOGUE_DGELU;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

Status RealCudaApi::gemmPlan(GemmPlan *result, const GemmDesc &desc,
                             size_t workspaceBytes, bool *unsupported) {
  *result = nullptr;
  bool refused = false; // cuBLASLt has no algorithm for this GEMM
  if (unsupported)
    *unsupported = false;
  if (Status s = needLt(); !s.isOk())
    return s;
  if (Status s = checkGemmDesc(desc); !s.isOk())
    return s;
  if (std::string why = gemmLtRefusal(desc); !why.empty()) {
    if (unsupported)
      *unsupported = true;
    return Status::error("cublasLtMatmulAlgoGetHeuristic (" +
                         std::string(pkgDTypeName(desc.dtype)) +
                         " GEMM, epilogue " + gemmEpilogueName(desc.epilogue) +
                         "): " + why);
  }
  if (!ltHandle_)
    if (Status s = blas(lt_.cublasLtCreate(&ltHandle_), "cublasLtCreate");
        !s.isOk())
      return s;
  auto plan = std::make_unique<LtPlan>();
  plan->desc = desc;
  plan->workspaceBytes = workspaceBytes;
  plan->alpha32 = static_cast<float>(desc.params.alpha);
  plan->beta32 = static_cast<float>(desc.params.beta);
  plan->alpha64 = desc.params.alpha;
  plan->beta64 = desc.params.beta;
  LtGemm lt = lowerGemmToLt(desc.params);
  bool f64 = desc.dtype == PkgDType::F64;
  cublasComputeType_t compute =
      f64 ? CUBLAS_COMPUTE_64F
          : (desc.dtype == PkgDType::F32 && desc.allowTf32
                 ? CUBLAS_COMPUTE_32F_FAST_TF32
                 : CUBLAS_COMPUTE_32F);
  cudaDataType_t type = dataType(desc.dtype);
  auto cleanup = [&](Status s) {
    if (!s.isOk()) {
      gemmDestroy(plan.release());
      if (unsupported)
        *unsupported = refused;
    }
    return s;
  };
  if (Status s = blas(lt_.cublasLtMatmulDescCreate(&plan->matmul, compute,
                                                   f64 ? CUDA_R_64F : CUDA_R_32F),
                      "cublasLtMatmulDescCreate");
      !s.isOk())
    return cleanup(s);
  cublasOperation_t transA = lt.transA ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t transB = lt.transB ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasLtEpilogue_t epilogue = ltEpilogue(desc.epilogue);
  auto setDesc = [&](cublasLtMatmulDescAttributes_t attr, const void *value,
                     size_t size, const char *what) {
    return blas(lt_.cublasLtMatmulDescSetAttribute(plan->matmul, attr, value,
                                                   size),
                std::string("cublasLtMatmulDescSetAttribute(") + what + ")");
  };
  for (Status s :
       {setDesc(CUBLASLT_MATMUL_DESC_TRANSA, &transA, sizeof(transA), "TRANSA"),
        setDesc(CUBLASLT_MATMUL_DESC_TRANSB, &transB, sizeof(transB), "TRANSB")})
    if (!s.isOk())
      return cleanup(s);
  // A cuBLASLt that does not know the epilogue refuses the attribute.
  cublasStatus_t epilogueCode = lt_.cublasLtMatmulDescSetAttribute(
      plan->matmul, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue));
  if (epilogueCode != CUBLAS_STATUS_SUCCESS) {
    refused = epilogueCode == CUBLAS_STATUS_NOT_SUPPORTED &&
              desc.epilogue != GemmEpilogue::None;
    return cleanup(blas(epilogueCode, std::string("cublasLtMatmulDescSetAttribute"
                                                  "(EPILOGUE ") +
                                          gemmEpilogueName(desc.epilogue) + ")"));
  }
  // The aux matrix has D's layout: column-major rows x cols, ld = rows (n);
  // its pointer is set per run, like the bias's.
  if (gemmEpilogueWritesAux(desc.epilogue) ||
      gemmEpilogueReadsAux(desc.epilogue)) {
    int64_t auxLd = static_cast<int64_t>(lt.ldd);
    if (Status s = setDesc(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &auxLd,
                           sizeof(auxLd), "EPILOGUE_AUX_LD");
        !s.isOk())
      return cleanup(s);
  }
  // D (and C, which shares its layout) in the result's type: f32 for a
  // half GEMM with f32Output (A and B 16-bit, compute and scale f32).
  auto layout = [&](cublasLtMatrixLayout_t &out, cudaDataType_t type,
                    uint64_t rows, uint64_t cols, uint64_t ld, int64_t stride,
                    const char *which) -> Status {
    std::string call = std::string("cublasLtMatrixLayoutCreate(") + which + ")";
    if (Status s = blas(lt_.cublasLtMatrixLayoutCreate(&out, type, rows, cols, ld),
                        call);
        !s.isOk())
      return s;
    if (lt.batch == 1)
      return Status::ok();
    int32_t count = lt.batch;
    if (Status s = blas(lt_.cublasLtMatrixLayoutSetAttribute(
                            out, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                            sizeof(count)),
                        call + " batch count");
        !s.isOk())
      return s;
    return blas(lt_.cublasLtMatrixLayoutSetAttribute(
                    out, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                    sizeof(stride)),
                call + " batch stride");
  };
  cudaDataType_t outType = dataType(gemmOutputDType(desc));
  for (Status s :
       {layout(plan->a, type, lt.aRows, lt.aCols, lt.lda, lt.strideA, "A"),
        layout(plan->b, type, lt.bRows, lt.bCols, lt.ldb, lt.strideB, "B"),
        layout(plan->d, outType, lt.rows, lt.cols, lt.ldd, lt.strideD, "D")})
    if (!s.isOk())
      return cleanup(s);

  cublasLtMatmulPreference_t pref = nullptr;
  if (Status s = blas(lt_.cublasLtMatmulPreferenceCreate(&pref),
                      "cublasLtMatmulPreferenceCreate");
      !s.isOk())
    return cleanup(s);
  uint64_t ws = workspaceBytes;
  uint32_t align = desc.alignmentBytes;
  Status ps = blas(lt_.cublasLtMatmulPreferenceSetAttribute(
                       pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                       sizeof(ws)),
                   "cublasLtMatmulPreferenceSetAttribute(MAX_WORKSPACE_BYTES)");
  if (ps.isOk() && desc.auxIsOutput) {
    // No split-K reduction in D, which is aux here (GemmDesc::auxIsOutput).
    uint32_t schemes =
        CUBLASLT_REDUCTION_SCHEME_MASK & ~uint32_t(CUBLASLT_REDUCTION_SCHEME_INPLACE);
    ps = blas(lt_.cublasLtMatmulPreferenceSetAttribute(
                  pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes,
                  sizeof(schemes)),
              "cublasLtMatmulPreferenceSetAttribute(REDUCTION_SCHEME_MASK)");
  }
  for (cublasLtMatmulPreferenceAttributes_t attr :
       {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    if (ps.isOk())
      ps = blas(lt_.cublasLtMatmulPreferenceSetAttribute(pref, attr, &align,
                                                         sizeof(align)),
                "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT)");
  std::vector<cublasLtMatmulHeuristicResult_t> heuristic(
      std::max(desc.algorithms, 1));
  int found = 0;
  if (ps.isOk()) {
    cublasStatus_t code = lt_.cublasLtMatmulAlgoGetHeuristic(
        ltHandle_, plan->matmul, plan->a, plan->b, plan->d, plan->d, pref,
        int(heuristic.size()), heuristic.data(), &found);
    // NOT_SUPPORTED: no algorithm for this configuration.
    refused = code == CUBLAS_STATUS_NOT_SUPPORTED;
    ps = blas(code, std::string("cublasLtMatmulAlgoGetHeuristic (") +
                        pkgDTypeName(desc.dtype) + " GEMM, epilogue " +
                        gemmEpilogueName(desc.epilogue) + ")");
  }
  lt_.cublasLtMatmulPreferenceDestroy(pref);
  if (!ps.isOk())
    return cleanup(ps);
  for (int i = 0; i < found; ++i)
    if (heuristic[i].state == CUBLAS_STATUS_SUCCESS)
      plan->algos.push_back(heuristic[i]);
  found = int(plan->algos.size());
  refused = found < 1;
  if (found < 1)
    return cleanup(Status::error(
        "cublasLtMatmulAlgoGetHeuristic found no algorithm for a " +
        std::string(pkgDTypeName(desc.dtype)) + " GEMM m=" +
        std::to_string(desc.params.m) + " n=" + std::to_string(desc.params.n) +
        " k=" + std::to_string(desc.params.k) + " batch=" +
        std::to_string(desc.params.batch) + " epilogue " +
        gemmEpilogueName(desc.epilogue)));
  *result = plan.release();
  return Status::ok();
}

Status RealCudaApi::gemmRun(GemmPlan handle, const void *lhs, const void *rhs,
                            void *out, const void *bias, void *biasGrad,
                            const void *c, void *aux, void *workspace,
                            size_t workspaceBytes, CudaStream stream) {
  auto *plan = static_cast<LtPlan *>(handle);
  GemmEpilogue e = plan->desc.epilogue;
  if (plan->desc.residual && !c)
    return Status::error("gemm: a residual GEMM needs a C pointer");
  if (gemmEpilogueWritesAux(e) || gemmEpilogueReadsAux(e)) {
    if (!aux)
      return Status::error(std::string("gemm: the ") + gemmEpilogueName(e) +
                           " epilogue needs an aux pointer");
    if (Status s = blas(lt_.cublasLtMatmulDescSetAttribute(
                            plan->matmul, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                            &aux, sizeof(aux)),
                        "cublasLtMatmulDescSetAttribute(EPILOGUE_AUX_POINTER)");
        !s.isOk())
      return s;
  }
  const void *biasPointer = e == GemmEpilogue::BiasGradient ? biasGrad : bias;
  if (gemmEpilogueReadsBias(e) || e == GemmEpilogue::BiasGradient) {
    if (!biasPointer)
      return Status::error(std::string("gemm: the ") + gemmEpilogueName(e) +
                           " epilogue needs a bias pointer");
    if (Status s = blas(lt_.cublasLtMatmulDescSetAttribute(
                            plan->matmul, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                            &biasPointer, sizeof(biasPointer)),
                        "cublasLtMatmulDescSetAttribute(BIAS_POINTER)");
        !s.isOk())
      return s;
  }
  bool f64 = plan->desc.dtype == PkgDType::F64;
  const void *alpha = f64 ? static_cast<const void *>(&plan->alpha64)
                          : static_cast<const void *>(&plan->alpha32);
  const void *beta = f64 ? static_cast<const void *>(&plan->beta64)
                         : static_cast<const void *>(&plan->beta32);
  // D^T = A . B with A the rhs and B the lhs (lowerGemmToLt); C has D's
  // layout (a residual's own buffer, else D itself).
  const void *cPointer = plan->desc.residual ? c : out;
  return blas(lt_.cublasLtMatmul(ltHandle_, plan->matmul, alpha, rhs, plan->a,
                                 lhs, plan->b, beta, cPointer, plan->d, out,
                                 plan->d,
                                 &plan->algos[plan->selected].algo, workspace,
                                 std::min(workspaceBytes, plan->workspaceBytes),
                                 cudaStream_t(stream)),
              "cublasLtMatmul");
}

Status RealCudaApi::gemmDestroy(GemmPlan handle) {
  auto *plan = static_cast<LtPlan *>(handle);
  if (!plan)
    return Status::ok();
  if (plan->a)
    lt_.cublasLtMatrixLayoutDestroy(plan->a);
  if (plan->b)
    lt_.cublasLtMatrixLayoutDestroy(plan->b);
  if (plan->d)
    lt_.cublasLtMatrixLayoutDestroy(plan->d);
  if (plan->matmul)
    lt_.cublasLtMatmulDescDestroy(plan->matmul);
  delete plan;
  return Status::ok();
}

int RealCudaApi::gemmAlgorithmCount(GemmPlan handle) {
  return int(static_cast<LtPlan *>(handle)->algos.size());
}

int RealCudaApi::gemmSelectedAlgorithm(GemmPlan handle) {
  return static_cast<LtPlan *>(handle)->selected;
}

Status RealCudaApi::gemmSelectAlgorithm(GemmPlan handle, int index) {
  auto *plan = static_cast<LtPlan *>(handle);
  if (index < 0 || index >= int(plan->algos.size()))
    return Status::error("gemm: algorithm " + std::to_string(index) +
                         " of a plan that holds " +
                         std::to_string(plan->algos.size()));
  plan->selected = index;
  return Status::ok();
}

StatusOr<GemmAlgorithm> RealCudaApi::gemmAlgorithm(GemmPlan handle, int index) {
  auto *plan = static_cast<LtPlan *>(handle);
  if (index < 0 || index >= int(plan->algos.size()))
    return Status::error("gemm: algorithm " + std::to_string(index) +
                         " of a plan that holds " +
                         std::to_string(plan->algos.size()));
  const cublasLtMatmulHeuristicResult_t &r = plan->algos[index];
  GemmAlgorithm out;
  static const char *hex = "0123456789abcdef";
  for (uint64_t word : r.algo.data)
    for (int shift = 60; shift >= 0; shift -= 4)
      out.id += hex[(word >> shift) & 15];
  out.workspaceBytes = r.workspaceSize;
  if (lt_.cublasLtMatmulAlgoConfigGetAttribute) {
    // Each attribute is a 16- or 32-bit integer, and the call wants the
    // buffer's size to match the attribute's exactly: ask for the size
    // first (sizeInBytes 0), then read it into a zeroed 64-bit word
    // (little-endian).
    auto attr = [&](cublasLtMatmulAlgoConfigAttributes_t which) {
      size_t need = 0, written = 0;
      uint64_t value = 0;
      if (lt_.cublasLtMatmulAlgoConfigGetAttribute(&r.algo, which, nullptr, 0,
                                                   &need) !=
              CUBLAS_STATUS_SUCCESS ||
          need == 0 || need > sizeof(value) ||
          lt_.cublasLtMatmulAlgoConfigGetAttribute(&r.algo, which, &value,
                                                   need, &written) !=
              CUBLAS_STATUS_SUCCESS)
        return std::string("?");
      if (need == 4)
        return std::to_string(int32_t(uint32_t(value)));
      return std::to_string(value);
    };
    out.description =
        "algo " + attr(CUBLASLT_ALGO_CONFIG_ID) + ", tile " +
        attr(CUBLASLT_ALGO_CONFIG_TILE_ID) + ", stages " +
        attr(CUBLASLT_ALGO_CONFIG_STAGES_ID) + ", split-k " +
        attr(CUBLASLT_ALGO_CONFIG_SPLITK_NUM) + ", reduction " +
        attr(CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME) + ", swizzle " +
        attr(CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING) + ", cluster " +
        attr(CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID) + ", option " +
        attr(CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION);
  } else {
    out.description = "algorithm " + std::to_string(index);
  }
  char waves[32];
  std::snprintf(waves, sizeof(waves), "%.2f", r.wavesCount);
  out.description +=
      ", workspace " + std::to_string(r.workspaceSize) + ", waves " + waves;
  return out;
}

} // namespace

StatusOr<std::unique_ptr<CudaApi>> loadCudaApi(bool requireDriver) {
  auto api = std::make_unique<RealCudaApi>();
  if (Status s = api->load(requireDriver); !s.isOk())
    return s;
  return std::unique_ptr<CudaApi>(std::move(api));
}

} // namespace kiln::runtime::cuda
