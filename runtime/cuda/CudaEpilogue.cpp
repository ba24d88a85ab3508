//===- CudaEpilogue.cpp - GEMM epilogues cuBLASLt refuses, as kernels ------===//
//
// See CudaEpilogue.h. The kernels' source is below (kSource); a thunk's
// plan is one launch (bias / activation) or two (the bias gradient's
// partial sums, then their total), made at load. The aux epilogues' kernel
// reads the plain GEMM's product from the aux buffer and writes both.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudaEpilogue.h"

#include <algorithm>

namespace kiln::runtime::cuda {

namespace {

// Every kernel runs in blocks of 256 threads (the bias gradient's block
// layout depends on it: 8 warps of 32 lanes).
const char *kSource = R"cuda(// Kiln GEMM epilogue kernels (runtime/cuda/CudaEpilogue.cpp).
#ifndef KILN_CUDA_EMULATION
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#endif
typedef long long kiln_index;

static __device__ __forceinline__ float kiln_epi_load(const float *p, kiln_index i) { return p[i]; }
static __device__ __forceinline__ float kiln_epi_load(const __half *p, kiln_index i) { return __half2float(p[i]); }
static __device__ __forceinline__ float kiln_epi_load(const __nv_bfloat16 *p, kiln_index i) { return __bfloat162float(p[i]); }
static __device__ __forceinline__ void kiln_epi_store(float *p, kiln_index i, float v) { p[i] = v; }
static __device__ __forceinline__ void kiln_epi_store(__half *p, kiln_index i, float v) { p[i] = __float2half_rn(v); }
static __device__ __forceinline__ void kiln_epi_store(__nv_bfloat16 *p, kiln_index i, float v) { p[i] = __float2bfloat16_rn(v); }

#define KILN_EPI_LOOP(i, total)                                                \
  for (kiln_index i = (kiln_index)blockIdx.x * blockDim.x + threadIdx.x;       \
       i < (total); i += (kiln_index)gridDim.x * blockDim.x)

// out[r, j] = act(out[r, j] (+ bias[j])) over [rows, n], in f32, rounded
// once. ACT: 0 none, 1 ReLU, 2 GELU (tanh approximation, as cuBLASLt's).
template <class T, int BIAS, int ACT>
static __device__ __forceinline__ void kiln_epi_apply(T *out, const T *bias, kiln_index rows, kiln_index n) {
  kiln_index total = rows * n;
  KILN_EPI_LOOP(i, total) {
    float v = kiln_epi_load(out, i);
    if (BIAS)
      v += kiln_epi_load(bias, i % n);
    if (ACT == 1)
      v = v > 0.0f ? v : 0.0f;
    if (ACT == 2)
      v = 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
    kiln_epi_store(out, i, v);
  }
}

// The aux epilogues: pre = aux[r, j] (+ bias[j]) in f32 over [rows, n],
// the plain GEMM's product being in |aux|; aux = pre and out = gelu(pre)
// (tanh approximation), each rounded once.
template <class T, int BIAS>
static __device__ __forceinline__ void kiln_epi_gelu_aux(T *out, T *aux, const T *bias, kiln_index rows, kiln_index n) {
  kiln_index total = rows * n;
  KILN_EPI_LOOP(i, total) {
    float v = kiln_epi_load(aux, i);
    if (BIAS)
      v += kiln_epi_load(bias, i % n);
    kiln_epi_store(aux, i, v);
    kiln_epi_store(out, i, 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v))));
  }
}

// DGELU: out[i] = product[i] * gelu'(aux[i]) (tanh approximation: u = k (x
// + c x^3), t = tanh(u), gelu'(x) = 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 c
// x^2)), in f32, rounded once. |product| may be |out| and |aux| may be
// |out| (each element is read before it is written), not both.
template <class T>
static __device__ __forceinline__ void kiln_epi_dgelu(T *out, const T *product, const T *aux, kiln_index rows, kiln_index n) {
  kiln_index total = rows * n;
  KILN_EPI_LOOP(i, total) {
    float x = kiln_epi_load(aux, i);
    const float k = 0.7978845608028654f, c = 0.044715f;
    float t = tanhf(k * (x + c * x * x * x));
    float d = 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * k * (1.0f + 3.0f * c * x * x);
    kiln_epi_store(out, i, kiln_epi_load(product, i) * d);
  }
}

// The bias gradient's first pass: partial[c, j] = the sum of rhs[l, j] over
// the rows l of chunk c (256 rows), in f32. rhs is [k, n], or [n, k] when
// |transposed|. A block (8 warps) takes one tile of columns of one chunk:
// 32 columns, a lane each, the warps taking every 8th row (rows read
// whole by a warp), or, transposed, 8 columns, a warp each, the lanes
// taking every 32nd row (a column's rows are contiguous). The 256 sums
// are combined in shared memory in a fixed order: no atomics, the same
// bits every run.
template <class T>
static __device__ __forceinline__ void kiln_epi_bgrad_partial(const T *rhs, float *partial, kiln_index k, kiln_index n, kiln_index transposed) {
  __shared__ float part[8][33];
  unsigned warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  kiln_index width = transposed ? 8 : 32;
  kiln_index tiles = (n + width - 1) / width, chunks = (k + 255) / 256;
  for (kiln_index b = blockIdx.x; b < tiles * chunks; b += gridDim.x) {
    kiln_index tile = b % tiles, chunk = b / tiles;
    kiln_index first = chunk * 256, last = first + 256 < k ? first + 256 : k;
    float sum = 0.0f;
    if (!transposed) {
      kiln_index j = tile * 32 + lane;
      if (j < n)
        for (kiln_index l = first + warp; l < last; l += 8)
          sum += kiln_epi_load(rhs, l * n + j);
    } else {
      kiln_index j = tile * 8 + warp;
      if (j < n)
        for (kiln_index l = first + lane; l < last; l += 32)
          sum += kiln_epi_load(rhs, j * k + l);
    }
    part[warp][lane] = sum;
    __syncthreads();
    if (!transposed) {
      kiln_index j = tile * 32 + threadIdx.x;
      if (threadIdx.x < 32 && j < n) {
        float total = 0.0f;
        for (int w = 0; w < 8; ++w)
          total += part[w][threadIdx.x];
        partial[chunk * n + j] = total;
      }
    } else {
      kiln_index j = tile * 8 + threadIdx.x;
      if (threadIdx.x < 8 && j < n) {
        float total = 0.0f;
        for (int l = 0; l < 32; ++l)
          total += part[threadIdx.x][l];
        partial[chunk * n + j] = total;
      }
    }
    __syncthreads(); // |part| is reused by the block's next tile
  }
}

// The second pass: grad[j] = the sum of partial[c, j] over the chunks, in
// order, rounded once.
template <class T>
static __device__ __forceinline__ void kiln_epi_bgrad_final(const float *partial, T *grad, kiln_index chunks, kiln_index n) {
  KILN_EPI_LOOP(j, n) {
    float total = 0.0f;
    for (kiln_index c = 0; c < chunks; ++c)
      total += partial[c * n + j];
    kiln_epi_store(grad, j, total);
  }
}

#ifdef KILN_CUDA_EMULATION
#define KILN_EPI_ARG(k) ((kiln_index)buffers[k])
#define KILN_EPI_HOST(name, call)                                              \
  extern "C" void name##_host(void **buffers, unsigned grid, unsigned block) { \
    kiln_emulate(grid, block, [&] { call; });                                  \
  }
#else
#define KILN_EPI_HOST(name, call)
#endif

#define KILN_EPI_APPLY(mode, suffix, T, BIAS, ACT)                             \
  extern "C" __global__ void __launch_bounds__(256)                            \
      kiln_epilogue_##mode##_##suffix(T *out, const T *bias, kiln_index rows,  \
                                      kiln_index n) {                          \
    kiln_epi_apply<T, BIAS, ACT>(out, bias, rows, n);                          \
  }                                                                            \
  KILN_EPI_HOST(kiln_epilogue_##mode##_##suffix,                               \
                kiln_epilogue_##mode##_##suffix((T *)buffers[0],               \
                                                (const T *)buffers[1],         \
                                                KILN_EPI_ARG(2),               \
                                                KILN_EPI_ARG(3)))

#define KILN_EPI_AUX(mode, suffix, T, BIAS)                                    \
  extern "C" __global__ void __launch_bounds__(256)                            \
      kiln_epilogue_##mode##_##suffix(T *out, T *aux, const T *bias,           \
                                      kiln_index rows, kiln_index n) {         \
    kiln_epi_gelu_aux<T, BIAS>(out, aux, bias, rows, n);                       \
  }                                                                            \
  KILN_EPI_HOST(kiln_epilogue_##mode##_##suffix,                               \
                kiln_epilogue_##mode##_##suffix((T *)buffers[0],               \
                                                (T *)buffers[1],               \
                                                (const T *)buffers[2],         \
                                                KILN_EPI_ARG(3),               \
                                                KILN_EPI_ARG(4)))

#define KILN_EPI_TYPE(suffix, T)                                               \
  KILN_EPI_APPLY(bias, suffix, T, 1, 0)                                        \
  KILN_EPI_APPLY(relu, suffix, T, 0, 1)                                        \
  KILN_EPI_APPLY(bias_relu, suffix, T, 1, 1)                                   \
  KILN_EPI_APPLY(gelu, suffix, T, 0, 2)                                        \
  KILN_EPI_APPLY(bias_gelu, suffix, T, 1, 2)                                   \
  KILN_EPI_AUX(gelu_aux, suffix, T, 0)                                         \
  KILN_EPI_AUX(bias_gelu_aux, suffix, T, 1)                                    \
  extern "C" __global__ void __launch_bounds__(256)                            \
      kiln_epilogue_dgelu_##suffix(T *out, const T *product, const T *aux,     \
                                   kiln_index rows, kiln_index n) {            \
    kiln_epi_dgelu<T>(out, product, aux, rows, n);                             \
  }                                                                            \
  KILN_EPI_HOST(kiln_epilogue_dgelu_##suffix,                                  \
                kiln_epilogue_dgelu_##suffix((T *)buffers[0],                  \
                                             (const T *)buffers[1],            \
                                             (const T *)buffers[2],            \
                                             KILN_EPI_ARG(3), KILN_EPI_ARG(4)))  \
  extern "C" __global__ void __launch_bounds__(256)                            \
      kiln_epilogue_bgrad_partial_##suffix(const T *rhs, float *partial,       \
                                           kiln_index k, kiln_index n,         \
                                           kiln_index transposed) {            \
    kiln_epi_bgrad_partial<T>(rhs, partial, k, n, transposed);                 \
  }                                                                            \
  extern "C" __global__ void __launch_bounds__(256)                            \
      kiln_epilogue_bgrad_final_##suffix(const float *partial, T *grad,        \
                                         kiln_index chunks, kiln_index n) {    \
    kiln_epi_bgrad_final<T>(partial, grad, chunks, n);                         \
  }                                                                            \
  KILN_EPI_HOST(kiln_epilogue_bgrad_partial_##suffix,                          \
                kiln_epilogue_bgrad_partial_##suffix(                          \
                    (const T *)buffers[0], (float *)buffers[1],                \
                    KILN_EPI_ARG(2), KILN_EPI_ARG(3), KILN_EPI_ARG(4)))        \
  KILN_EPI_HOST(kiln_epilogue_bgrad_final_##suffix,                            \
                kiln_epilogue_bgrad_final_##suffix((const float *)buffers[0],  \
                                                   (T *)buffers[1],            \
                                                   KILN_EPI_ARG(2),            \
                                                   KILN_EPI_ARG(3)))

KILN_EPI_TYPE(f32, float)
KILN_EPI_TYPE(f16, __half)
KILN_EPI_TYPE(bf16, __nv_bfloat16)
)cuda";

constexpr uint32_t kBlock = 256;
constexpr int64_t kChunkRows = 256; // the bias gradient's rows per block

const char *suffix(PkgDType dtype) {
  switch (dtype) {
  case PkgDType::F32: return "f32";
  case PkgDType::F16: return "f16";
  case PkgDType::BF16: return "bf16";
  default: return nullptr;
  }
}

// The apply kernels' mode, or null for None and BiasGradient.
const char *applyMode(GemmEpilogue e) {
  switch (e) {
  case GemmEpilogue::Bias: return "bias";
  case GemmEpilogue::Relu: return "relu";
  case GemmEpilogue::BiasRelu: return "bias_relu";
  case GemmEpilogue::Gelu: return "gelu";
  case GemmEpilogue::BiasGelu: return "bias_gelu";
  default: return nullptr;
  }
}

// The aux kernels' mode, or null.
const char *auxMode(GemmEpilogue e) {
  switch (e) {
  case GemmEpilogue::GeluAux: return "gelu_aux";
  case GemmEpilogue::BiasGeluAux: return "bias_gelu_aux";
  default: return nullptr;
  }
}

} // namespace

const std::string &epilogueKernelSource() {
  static const std::string source = kSource;
  return source;
}

std::vector<std::string> epilogueKernelEntryPoints() {
  std::vector<std::string> out;
  for (const char *type : {"f32", "f16", "bf16"}) {
    for (const char *mode : {"bias", "relu", "bias_relu", "gelu", "bias_gelu",
                             "gelu_aux", "bias_gelu_aux", "dgelu"})
      out.push_back(std::string("kiln_epilogue_") + mode + "_" + type);
    out.push_back(std::string("kiln_epilogue_bgrad_partial_") + type);
    out.push_back(std::string("kiln_epilogue_bgrad_final_") + type);
  }
  return out;
}

uint64_t epilogueWorkspaceBytes(GemmEpilogue epilogue, const GemmParams &params,
                                PkgDType dtype) {
  if (epilogue == GemmEpilogue::DGelu && params.m > 0 && params.n > 0)
    return uint64_t(params.m) * uint64_t(params.n) * pkgBytesPerElement(dtype);
  if (epilogue != GemmEpilogue::BiasGradient || params.k < 1 || params.n < 1)
    return 0;
  uint64_t chunks = (uint64_t(params.k) + kChunkRows - 1) / kChunkRows;
  return chunks * uint64_t(params.n) * sizeof(float);
}

uint64_t epilogueWorkspaceBytes(const LoadedPackage &package) {
  uint64_t bytes = 0;
  for (const PackageThunk &t : package.thunks)
    if (t.kind == ThunkKind::LibraryCall && t.hasGemm && !t.results.empty())
      bytes = std::max(
          bytes, epilogueWorkspaceBytes(gemmEpilogueOf(t.gemm.epilogue), t.gemm,
                                        package.buffers[t.results[0]].dtype));
  return bytes;
}

StatusOr<std::unique_ptr<CudaEpilogue>>
CudaEpilogue::create(CudaApi &api, const CudaDeviceInfo &device,
                     uint64_t workspaceBytes) {
  std::unique_ptr<CudaEpilogue> epilogue(new CudaEpilogue(api, device));
  if (Status s = epilogue->kernels_.load(epilogueKernelSource(), device.smArch());
      !s.isOk())
    return s;
  if (workspaceBytes) {
    if (Status s = api.malloc(&epilogue->workspace_, workspaceBytes); !s.isOk())
      return Status::error("the GEMM epilogue workspace (" +
                           std::to_string(workspaceBytes) +
                           " bytes): " + s.message());
    epilogue->workspaceBytes_ = workspaceBytes;
  }
  return epilogue;
}

CudaEpilogue::~CudaEpilogue() {
  if (workspace_)
    api_.free(workspace_);
}

Status CudaEpilogue::plan(size_t index, GemmEpilogue epilogue, PkgDType dtype,
                          const GemmParams &params, void *out,
                          const void *bias, const void *rhs, void *biasGrad,
                          void *aux) {
  const char *type = suffix(dtype);
  if (!type)
    return Status::error(std::string("the ") + gemmEpilogueName(epilogue) +
                         " epilogue kernel: expected f32, f16 or bf16, found " +
                         pkgDTypeName(dtype));
  if (params.batch != 1 || params.m < 1 || params.n < 1 || params.k < 1)
    return Status::error(std::string("the ") + gemmEpilogueName(epilogue) +
                         " epilogue kernel: expected a GEMM of batch 1 and "
                         "positive m, n, k");
  std::vector<KernelLaunch> launches;
  // Where the plain GEMM writes its product.
  void *target = gemmEpilogueWritesAux(epilogue) ? aux : out;
  uint64_t cap = uint64_t(std::max(device_.multiprocessors, 1)) * (2048 / kBlock);
  auto grid = [&](uint64_t blocks) {
    return static_cast<uint32_t>(std::max<uint64_t>(std::min(blocks, cap), 1));
  };
  auto add = [&](const std::string &entry, uint32_t blocks,
                 std::vector<void *> args) -> Status {
    StatusOr<CudaFunction> fn = kernels_.function(entry);
    if (!fn.isOk())
      return fn.status();
    KernelLaunch l;
    l.function = fn.value();
    l.entry = entry;
    l.grid = blocks;
    l.block = kBlock;
    l.args = std::move(args);
    launches.push_back(std::move(l));
    return Status::ok();
  };
  auto scalar = [](int64_t v) { return reinterpret_cast<void *>(v); };
  if (gemmEpilogueReadsBias(epilogue) && !bias)
    return Status::error(std::string("the ") + gemmEpilogueName(epilogue) +
                         " epilogue kernel needs a bias");
  if (const char *mode = auxMode(epilogue)) {
    if (!aux)
      return Status::error(std::string("the ") + gemmEpilogueName(epilogue) +
                           " epilogue kernel needs an aux buffer");
    uint64_t total = uint64_t(params.m) * uint64_t(params.n);
    if (Status s = add(std::string("kiln_epilogue_") + mode + "_" + type,
                       grid((total + kBlock - 1) / kBlock),
                       {out, aux, const_cast<void *>(bias), scalar(params.m),
                        scalar(params.n)});
        !s.isOk())
      return s;
  } else if (epilogue == GemmEpilogue::DGelu) {
    if (!aux)
      return Status::error("the dgelu epilogue kernel needs the aux input "
                           "(the pre-activation)");
    uint64_t total = uint64_t(params.m) * uint64_t(params.n);
    uint64_t bytes = total * pkgBytesPerElement(dtype);
    auto *o = static_cast<uint8_t *>(out);
    auto *a = static_cast<uint8_t *>(aux);
    bool overlap = o < a + bytes && a < o + bytes;
    if (overlap && bytes > workspaceBytes_)
      return Status::error("the dgelu epilogue kernel needs " +
                           std::to_string(bytes) +
                           " bytes of workspace for the product (its aux is "
                           "the result's buffer), found " +
                           std::to_string(workspaceBytes_));
    target = overlap ? workspace_ : out;
    if (Status s = add(std::string("kiln_epilogue_dgelu_") + type,
                       grid((total + kBlock - 1) / kBlock),
                       {out, target, aux, scalar(params.m), scalar(params.n)});
        !s.isOk())
      return s;
  } else if (const char *mode = applyMode(epilogue)) {
    uint64_t total = uint64_t(params.m) * uint64_t(params.n);
    if (Status s = add(std::string("kiln_epilogue_") + mode + "_" + type,
                       grid((total + kBlock - 1) / kBlock),
                       {out, const_cast<void *>(bias), scalar(params.m),
                        scalar(params.n)});
        !s.isOk())
      return s;
  } else if (epilogue == GemmEpilogue::BiasGradient) {
    uint64_t need = epilogueWorkspaceBytes(epilogue, params, dtype);
    if (!rhs || !biasGrad)
      return Status::error("the bias-gradient epilogue kernel needs the rhs "
                           "and a bias gradient");
    if (need > workspaceBytes_)
      return Status::error("the bias-gradient epilogue kernel needs " +
                           std::to_string(need) + " bytes of workspace, found " +
                           std::to_string(workspaceBytes_));
    int64_t chunks = (params.k + kChunkRows - 1) / kChunkRows;
    int64_t width = params.transposeRhs ? 8 : 32;
    int64_t tiles = (params.n + width - 1) / width;
    if (Status s = add(std::string("kiln_epilogue_bgrad_partial_") + type,
                       grid(uint64_t(tiles * chunks)),
                       {const_cast<void *>(rhs), workspace_, scalar(params.k),
                        scalar(params.n), scalar(params.transposeRhs ? 1 : 0)});
        !s.isOk())
      return s;
    if (Status s = add(std::string("kiln_epilogue_bgrad_final_") + type,
                       grid((uint64_t(params.n) + kBlock - 1) / kBlock),
                       {workspace_, biasGrad, scalar(chunks), scalar(params.n)});
        !s.isOk())
      return s;
  } else {
    return Status::error("no epilogue kernel for epilogue " +
                         std::string(gemmEpilogueName(epilogue)));
  }
  plans_[index] = std::move(launches);
  gemmTargets_[index] = target;
  return Status::ok();
}

void *CudaEpilogue::gemmTarget(size_t index) const {
  auto found = gemmTargets_.find(index);
  return found == gemmTargets_.end() ? nullptr : found->second;
}

Status CudaEpilogue::run(size_t index, CudaStream stream) {
  auto found = plans_.find(index);
  if (found == plans_.end())
    return Status::error("the GEMM epilogue was not planned");
  for (const KernelLaunch &l : found->second) {
    Status s = kernels_.launch(l, stream);
    if (!s.isOk())
      return Status::error("the epilogue kernel " + l.entry + ": " +
                           s.message());
  }
  return Status::ok();
}

std::vector<std::string> CudaEpilogue::entries(size_t index) const {
  std::vector<std::string> out;
  auto found = plans_.find(index);
  if (found != plans_.end())
    for (const KernelLaunch &l : found->second)
      out.push_back(l.entry);
  return out;
}

} // namespace kiln::runtime::cuda
