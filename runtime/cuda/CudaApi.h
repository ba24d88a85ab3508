//===- CudaApi.h - the CUDA entry points the GPU runtime calls ------*- C++ -*-===//
//
// Every call the GPU runtime (runtime/cuda/CudaExecutable.h) makes to CUDA
// goes through one CudaApi object: cudart (memory, streams, events, CUDA
// Graphs), the driver (module load and kernel launch, reached through
// cudaGetDriverEntryPointByVersion, never by linking libcuda), NVRTC (the
// re-JIT of a kernel's source for an architecture the package lacks) and
// cuBLASLt (GEMMs with epilogues). The real table, loadCudaApi(), dlopens
// libcudart, libcublasLt and libnvrtc at run time, so a binary built with
// the toolkit starts on a machine without it, and checks every return code:
// a failure comes back as a Status naming the call, the error's name and
// number and its text ("cuLaunchKernel failed: CUDA_ERROR_INVALID_VALUE
// (1): invalid argument"); the executable adds the thunk and kernel.
//
// The interface is virtual and uses no CUDA header, so a test installs a
// fake (tests/unit/cuda/FakeCudaApi.h): host memory for device memory,
// recorded launches, copies and graph calls, injected failures. The calls
// mirror CUDA's one for one, except cuBLASLt, which is one level up: a
// GemmDesc in the package's row-major terms is planned once (layouts,
// matmul descriptor, heuristic, workspace size) and run many times, so the
// fake can compute the same GEMM on the host. How a row-major GEMM maps
// onto cuBLASLt's column-major one is the pure function lowerGemmToLt,
// tested without a GPU.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_CUDA_CUDAAPI_H
#define KILN_RUNTIME_CUDA_CUDAAPI_H

#include "runtime/Status.h"
#include "runtime/cuda/CudaDevice.h"
#include "runtime/package/Package.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kiln::runtime::cuda {

// CUDA's handle types are pointers to opaque structs.
using CudaStream = void *;
using CudaEvent = void *;
using CudaGraph = void *;
using CudaGraphExec = void *;
using CudaModule = void *;
using CudaFunction = void *;
using GemmPlan = void *;

enum class CopyKind { HostToDevice, DeviceToHost, DeviceToDevice };

// The cuBLASLt epilogues the runtime uses (GemmEpilogue.h's fusions):
// Bias adds bias[n] to every row of the result; Gelu is the tanh
// approximation; BiasGradient also writes biasGrad[n] = the sum over k of
// the rhs (a dense layer's bias gradient, when the rhs is dY and k runs
// over the batch); GeluAux and BiasGeluAux (CUBLASLT_EPILOGUE_GELU_AUX,
// _GELU_AUX_BIAS) also write aux[m, n] = the pre-activation (the product,
// plus the bias), which training keeps for the backward; DGelu
// (CUBLASLT_EPILOGUE_DGELU) reads aux[m, n], the forward's pre-activation,
// and writes the product times gelu'(aux) (tanh approximation).
enum class GemmEpilogue {
  None,
  Bias,
  Relu,
  BiasRelu,
  Gelu,
  BiasGelu,
  BiasGradient,
  GeluAux,
  BiasGeluAux,
  DGelu
};

const char *gemmEpilogueName(GemmEpilogue epilogue);
// A package GEMM's epilogue as cuBLASLt's: a residual adds its C through the
// GEMM's beta (GemmDesc::residual), so Residual is None and BiasResidual
// is Bias here.
GemmEpilogue gemmEpilogueOf(PkgGemmEpilogue epilogue);

// out[b] = alpha * op(lhs[b]) . op(rhs[b]) + beta * out[b] (+ epilogue),
// row-major: lhs [batch, m, k] (transposeLhs: [batch, k, m]), rhs [batch,
// k, n] (transposeRhs: [batch, n, k]), out [batch, m, n], all of |dtype|;
// f16 and bf16 accumulate in f32; f32 uses TF32 tensor cores only when
// |allowTf32|. With |residual|, beta scales a separate C input of out's
// layout (cuBLASLt's C; it may be out itself) instead of out: out =
// epilogue(alpha * op(lhs) . op(rhs) + beta * C), the bias added after C.
// With |f32Output| (f16 and bf16 only, no epilogue, no residual), out is
// f32 instead: the f32 sum itself, unrounded, for a consumer that adds
// more to it (the convolutions' col2im and their filter gradient's
// chunks, CudaConv.h).
struct GemmDesc {
  PkgDType dtype = PkgDType::F32;
  GemmParams params;
  GemmEpilogue epilogue = GemmEpilogue::None;
  bool residual = false;
  bool allowTf32 = false;
  // The alignment every pointer passed to gemmRun has (cuBLASLt assumes
  // 256 bytes unless told; the arena's buffers are 64-byte aligned).
  uint32_t alignmentBytes = 256;
  // How many of cuBLASLt's heuristic algorithms the plan keeps, best
  // first (the autotuner times them; Autotune.h). gemmRun uses the
  // first until gemmSelectAlgorithm picks another.
  int algorithms = 1;
  // DGelu's aux is D itself (the buffer planner put the result over its
  // dying aux). An element of aux is then read only where that element of
  // D is written, except by split-K algorithms that reduce their partial
  // sums in D (CUBLASLT_REDUCTION_SCHEME_INPLACE), which would overwrite
  // aux before the epilogue reads it: the plan excludes those.
  bool auxIsOutput = false;
  bool f32Output = false;
};

// The type of a GEMM's result (and C): f32 with |f32Output|, else dtype.
PkgDType gemmOutputDType(const GemmDesc &desc);

// One algorithm a GEMM plan holds: |id| identifies it across processes
// (the bytes of cuBLASLt's cublasLtMatmulAlgo_t, in hex), |description|
// names its configuration for people ("algo 66, tile 21, stages 19,
// split-k 1, ..."), |workspaceBytes| is what it needs.
struct GemmAlgorithm {
  std::string id, description;
  size_t workspaceBytes = 0;
};

// A GemmDesc as cuBLASLt's column-major D = op(A) op(B): a row-major
// [m, n] matrix is a column-major [n, m] one, so the product is computed
// transposed, D^T = op(rhs)^T op(lhs)^T, A being the rhs and B the lhs.
struct LtGemm {
  bool transA = false, transB = false;
  uint64_t rows = 0, cols = 0, inner = 0; // D is rows x cols
  uint64_t aRows = 0, aCols = 0, lda = 0; // A as stored (column-major)
  uint64_t bRows = 0, bCols = 0, ldb = 0;
  uint64_t ldd = 0;
  int64_t strideA = 0, strideB = 0, strideD = 0; // between batch entries
  int batch = 1;
};
LtGemm lowerGemmToLt(const GemmParams &params);

// Checks what a GemmDesc promises (sizes, dtype, epilogue) before any
// library sees it.
Status checkGemmDesc(const GemmDesc &desc);

// The largest power of two up to 256 dividing |address|: what a GEMM
// operand there promises for GemmDesc::alignmentBytes.
uint32_t gemmAlignmentOf(const void *address);

// Everything a plan of |desc| with |workspaceBytes| of workspace depends
// on, as text (alpha and beta to the last bit: two GEMMs whose alphas
// differ past six digits need two plans): the key under which
// CudaExecutable and CudaConv share plans, and the autotuner's shape.
std::string gemmDescKey(const GemmDesc &desc, size_t workspaceBytes);

// Whether |epilogue| reads a bias / writes an aux matrix / reads one.
bool gemmEpilogueReadsBias(GemmEpilogue epilogue);
bool gemmEpilogueWritesAux(GemmEpilogue epilogue);
bool gemmEpilogueReadsAux(GemmEpilogue epilogue);

// Why cuBLASLt has no algorithm for a valid |desc| whatever the device, or
// an empty string: an aux matrix's leading dimension (n, its rows being
// the result's) must be a multiple of 8 elements
// (CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD). gemmPlan reports such a desc as
// unsupported, so the executable runs its epilogue as a kernel instead.
std::string gemmLtRefusal(const GemmDesc &desc);

class CudaApi {
public:
  virtual ~CudaApi();

  // Which libraries the table came from, for messages.
  virtual std::string describe() const = 0;

  virtual StatusOr<CudaDeviceInfo> deviceInfo(int device) = 0;
  // cudaSetDevice, and the primary context made current (cudaFree(0)), so
  // the driver calls below find it.
  virtual Status setDevice(int device) = 0;

  virtual Status malloc(void **ptr, size_t bytes) = 0;     // cudaMalloc
  // cudaMemGetInfo on the current device. The default, for a table that
  // lacks it, fails: callers then skip what they would check with it.
  virtual Status memGetInfo(size_t *freeBytes, size_t *totalBytes);
  virtual Status free(void *ptr) = 0;                       // cudaFree
  virtual Status mallocHost(void **ptr, size_t bytes) = 0; // cudaMallocHost
  virtual Status freeHost(void *ptr) = 0;                   // cudaFreeHost
  virtual Status memcpyAsync(void *dst, const void *src, size_t bytes,
                             CopyKind kind, CudaStream stream) = 0;
  virtual Status memsetAsync(void *dst, int value, size_t bytes,
                             CudaStream stream) = 0;

  virtual Status streamCreate(CudaStream *stream) = 0; // non-blocking
  virtual Status streamDestroy(CudaStream stream) = 0;
  virtual Status streamSynchronize(CudaStream stream) = 0;
  virtual Status streamWaitEvent(CudaStream stream, CudaEvent event) = 0;
  virtual Status eventCreate(CudaEvent *event) = 0;
  virtual Status eventDestroy(CudaEvent event) = 0;
  virtual Status eventRecord(CudaEvent event, CudaStream stream) = 0;
  virtual Status eventSynchronize(CudaEvent event) = 0;
  virtual Status eventElapsedMs(float *ms, CudaEvent start, CudaEvent end) = 0;

  // CUDA Graphs: stream capture (thread-local mode: other threads, such
  // as a data loader, may call CUDA meanwhile), instantiate, launch.
  virtual Status streamBeginCapture(CudaStream stream) = 0;
  virtual Status streamEndCapture(CudaStream stream, CudaGraph *graph) = 0;
  virtual Status graphInstantiate(CudaGraphExec *exec, CudaGraph graph) = 0;
  virtual Status graphLaunch(CudaGraphExec exec, CudaStream stream) = 0;
  virtual Status graphDestroy(CudaGraph graph) = 0;
  virtual Status graphExecDestroy(CudaGraphExec exec) = 0;

  // The driver: a cubin, or PTX the driver JIT-compiles (|bytes| is the
  // image's size; PTX is NUL-terminated).
  virtual Status moduleLoadData(CudaModule *module, const void *image,
                                size_t bytes) = 0;
  virtual Status moduleUnload(CudaModule module) = 0;
  virtual Status moduleGetFunction(CudaFunction *function, CudaModule module,
                                   const char *name) = 0;
  // cuFuncSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES):
  // lets |function| launch with up to |bytes| of dynamic shared memory
  // (more than 48 KiB needs it).
  virtual Status funcSetMaxDynamicSharedMemory(CudaFunction function,
                                               uint32_t bytes) = 0;
  // The byte sizes of |function|'s parameters in order
  // (cuFuncGetParamInfo, drivers of CUDA 12.4 on). |known| is false, and
  // |sizes| empty, where the driver or the table cannot say.
  virtual Status funcParamSizes(CudaFunction function,
                                std::vector<size_t> &sizes, bool &known) {
    sizes.clear();
    known = false;
    return Status::ok();
  }
  virtual Status launchKernel(CudaFunction function,
                              const std::array<uint32_t, 3> &grid,
                              const std::array<uint32_t, 3> &block,
                              uint32_t sharedMemoryBytes, CudaStream stream,
                              void **params, size_t paramCount) = 0;
  // cuLaunchKernelEx with CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
  // (programmatic dependent launch, sm_90 on): the kernel's blocks may
  // start before the previous kernel on |stream| has finished, so the
  // kernel must wait for it (griddepcontrol.wait) before touching global
  // memory. A table without cuLaunchKernelEx launches plainly.
  virtual Status launchKernelProgrammatic(CudaFunction function,
                                          const std::array<uint32_t, 3> &grid,
                                          const std::array<uint32_t, 3> &block,
                                          uint32_t sharedMemoryBytes,
                                          CudaStream stream, void **params,
                                          size_t paramCount) {
    return launchKernel(function, grid, block, sharedMemoryBytes, stream,
                        params, paramCount);
  }

  // NVRTC: |source| to a cubin for sm_|arch|; |log| gets NVRTC's log.
  virtual Status nvrtcCompile(const std::string &source, const std::string &name,
                              unsigned arch, std::vector<uint8_t> &cubin,
                              std::string &log) = 0;
  // What nvrtcCompile's cubin depends on besides the source, the name and
  // the architecture (NVRTC's version, its options and headers), for
  // CubinCache.h's key; "" where that is unknown, and then nothing is
  // cached on disk.
  virtual std::string nvrtcIdentity() { return ""; }

  // cuBLASLt. gemmPlan picks the algorithm (cublasLtMatmulAlgoGetHeuristic)
  // for at most |workspaceBytes| of workspace; gemmRun runs it on |stream|.
  // |bias| is read by the Bias* epilogues, |biasGrad| written by
  // BiasGradient, |c| read by a residual desc (cuBLASLt's C), |aux|
  // written by the *Aux epilogues or read by DGelu (else null). When the plan fails because cuBLASLt offers
  // no algorithm for the GemmDesc on this device (CUBLAS_STATUS_NOT_SUPPORTED
  // from the heuristic or the epilogue attribute, or no heuristic result),
  // *|unsupported| (when given) is set to true, so a caller can plan the
  // GEMM without its epilogue and run the epilogue itself
  // (CudaEpilogue.h); every other failure leaves it false.
  virtual Status gemmPlan(GemmPlan *plan, const GemmDesc &desc,
                          size_t workspaceBytes, bool *unsupported) = 0;
  Status gemmPlan(GemmPlan *plan, const GemmDesc &desc, size_t workspaceBytes) {
    return gemmPlan(plan, desc, workspaceBytes, nullptr);
  }
  virtual Status gemmRun(GemmPlan plan, const void *lhs, const void *rhs,
                         void *out, const void *bias, void *biasGrad,
                         const void *c, void *aux, void *workspace,
                         size_t workspaceBytes, CudaStream stream) = 0;
  // A GEMM that reads no C and writes no aux.
  Status gemmRun(GemmPlan plan, const void *lhs, const void *rhs, void *out,
                 const void *bias, void *biasGrad, void *workspace,
                 size_t workspaceBytes, CudaStream stream) {
    return gemmRun(plan, lhs, rhs, out, bias, biasGrad, nullptr, nullptr,
                   workspace, workspaceBytes, stream);
  }
  virtual Status gemmDestroy(GemmPlan plan) = 0;
  // The algorithms |plan| holds (at least one; at most its desc's
  // |algorithms|), the one its runs use (0 until selected) and what each
  // is; gemmSelectAlgorithm fails for an index out of range.
  virtual int gemmAlgorithmCount(GemmPlan plan) = 0;
  virtual int gemmSelectedAlgorithm(GemmPlan plan) = 0;
  virtual Status gemmSelectAlgorithm(GemmPlan plan, int index) = 0;
  virtual StatusOr<GemmAlgorithm> gemmAlgorithm(GemmPlan plan, int index) = 0;
  // The GEMM library and its version ("cuBLASLt 130100"), for the
  // autotuning cache's keys: another version may offer other algorithms.
  virtual std::string gemmLibraryVersion() = 0;
  // Whether events time the work between them (a GPU does; a fake table
  // only when a test gives it times): the autotuner times nothing
  // otherwise.
  virtual bool timesWork() const { return true; }
};

// The real table: dlopens libcudart (as CudaDevice.h), then the driver's
// entry points through cudaGetDriverEntryPointByVersion, libcublasLt and
// libnvrtc ($KILN_CUBLASLT and $KILN_NVRTC name other files). Fails with a
// message naming the library or symbol that is missing; a build without
// the CUDA toolkit says so. cuBLASLt and NVRTC are optional at load: a
// missing one fails the first call that needs it, naming it. With
// |requireDriver| false a machine without a driver still gets the table
// (NVRTC needs none; the driver calls then fail naming why), for tools and
// tests that only compile.
StatusOr<std::unique_ptr<CudaApi>> loadCudaApi(bool requireDriver = true);

} // namespace kiln::runtime::cuda

#endif // KILN_RUNTIME_CUDA_CUDAAPI_H
