//===- CudaConv.cpp - convolution library calls on the GPU, without cuDNN --===//
//
// See CudaConv.h. The kernels' source is below (kSource); the plan of each
// thunk is a few launches before a batched GEMM and a few after, all made
// at load, so a step only queues them.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudaConv.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <optional>

namespace kiln::runtime::cuda {

namespace {

// Every kernel: one element per iteration of a grid-stride loop; loads
// widen to f32 (f64 for f64), stores round once (a half element copied
// through f32 is the same element).
const char *kSource = R"cuda(// Kiln convolution kernels (runtime/cuda/CudaConv.cpp).
#ifndef KILN_CUDA_EMULATION
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#endif
typedef long long kiln_index;

static __device__ __forceinline__ float kiln_conv_load(const float *p, kiln_index i) { return p[i]; }
static __device__ __forceinline__ double kiln_conv_load(const double *p, kiln_index i) { return p[i]; }
static __device__ __forceinline__ float kiln_conv_load(const __half *p, kiln_index i) { return __half2float(p[i]); }
static __device__ __forceinline__ float kiln_conv_load(const __nv_bfloat16 *p, kiln_index i) { return __bfloat162float(p[i]); }
static __device__ __forceinline__ void kiln_conv_store(float *p, kiln_index i, float v) { p[i] = v; }
static __device__ __forceinline__ void kiln_conv_store(double *p, kiln_index i, double v) { p[i] = v; }
static __device__ __forceinline__ void kiln_conv_store(__half *p, kiln_index i, float v) { p[i] = __float2half_rn(v); }
static __device__ __forceinline__ void kiln_conv_store(__nv_bfloat16 *p, kiln_index i, float v) { p[i] = __float2bfloat16_rn(v); }

#define KILN_CONV_GEOMETRY                                                     \
  kiln_index N, kiln_index C, kiln_index H, kiln_index W, kiln_index G,        \
      kiln_index KH, kiln_index KW, kiln_index OH, kiln_index OW,              \
      kiln_index SH, kiln_index SW, kiln_index PT, kiln_index PL,              \
      kiln_index DH, kiln_index DW
#define KILN_CONV_GEOMETRY_ARGS N, C, H, W, G, KH, KW, OH, OW, SH, SW, PT, PL, DH, DW
#define KILN_CONV_LOOP(i, total)                                               \
  for (kiln_index i = (kiln_index)blockIdx.x * blockDim.x + threadIdx.x;       \
       i < (total); i += (kiln_index)gridDim.x * blockDim.x)

// col[g, (c, ki, kj), n, (y, x)] = x[n, g * C/G + c, y * SH - PT + ki * DH,
// x * SW - PL + kj * DW], zero outside the image (col in the GEMM's
// operand type: x's own for f16 and bf16).
template <class T, class A>
static __device__ __forceinline__ void kiln_conv_im2col(const T *in, A *col, KILN_CONV_GEOMETRY) {
  kiln_index cg = C / G, P = OH * OW, rows = cg * KH * KW;
  kiln_index total = G * rows * N * P;
  KILN_CONV_LOOP(i, total) {
    kiln_index p = i % P, t = i / P;
    kiln_index n = t % N;
    t /= N;
    kiln_index r = t % rows, g = t / rows;
    kiln_index c = r / (KH * KW), kk = r % (KH * KW);
    kiln_index iy = (p / OW) * SH - PT + (kk / KW) * DH;
    kiln_index ix = (p % OW) * SW - PL + (kk % KW) * DW;
    decltype(kiln_conv_load(in, 0)) v = 0;
    if (iy >= 0 && iy < H && ix >= 0 && ix < W)
      v = kiln_conv_load(in, ((n * C + g * cg + c) * H + iy) * W + ix);
    kiln_conv_store(col, i, v);
  }
}

// The adjoint of im2col as a gather: dx[n, c, iy, ix] is the sum of the
// column entries that read it (no atomics, the same order every run).
template <class A, class T>
static __device__ __forceinline__ void kiln_conv_col2im(const A *col, T *out, KILN_CONV_GEOMETRY) {
  kiln_index cg = C / G, P = OH * OW, rows = cg * KH * KW;
  kiln_index total = N * C * H * W;
  KILN_CONV_LOOP(i, total) {
    kiln_index ix = i % W, t = i / W;
    kiln_index iy = t % H;
    t /= H;
    kiln_index c = t % C, n = t / C;
    kiln_index g = c / cg, cl = c % cg;
    A sum = 0;
    for (kiln_index ki = 0; ki < KH; ++ki) {
      kiln_index ny = iy + PT - ki * DH;
      if (ny < 0 || ny % SH)
        continue;
      kiln_index y = ny / SH;
      if (y >= OH)
        continue;
      for (kiln_index kj = 0; kj < KW; ++kj) {
        kiln_index nx = ix + PL - kj * DW;
        if (nx < 0 || nx % SW)
          continue;
        kiln_index x = nx / SW;
        if (x >= OW)
          continue;
        kiln_index r = (cl * KH + ki) * KW + kj;
        sum += col[((g * rows + r) * N + n) * P + y * OW + x];
      }
    }
    kiln_conv_store(out, i, sum);
  }
}

// dst[b, a, p] = src[a, b, p] (src [A, B, P]), converting S to D; with
// A = 1 a plain conversion.
template <class S, class D>
static __device__ __forceinline__ void kiln_conv_swap(const S *src, D *dst, kiln_index A, kiln_index B, kiln_index P) {
  kiln_index total = A * B * P;
  KILN_CONV_LOOP(i, total) {
    kiln_index p = i % P, t = i / P;
    kiln_index a = t % A, b = t / A;
    kiln_conv_store(dst, i, kiln_conv_load(src, (a * B + b) * P + p));
  }
}

#ifdef KILN_CUDA_EMULATION
#define KILN_CONV_HOST_ARG(k) ((kiln_index)buffers[k])
#define KILN_CONV_HOST_GEOMETRY                                                \
  KILN_CONV_HOST_ARG(2), KILN_CONV_HOST_ARG(3), KILN_CONV_HOST_ARG(4),         \
      KILN_CONV_HOST_ARG(5), KILN_CONV_HOST_ARG(6), KILN_CONV_HOST_ARG(7),     \
      KILN_CONV_HOST_ARG(8), KILN_CONV_HOST_ARG(9), KILN_CONV_HOST_ARG(10),    \
      KILN_CONV_HOST_ARG(11), KILN_CONV_HOST_ARG(12), KILN_CONV_HOST_ARG(13),  \
      KILN_CONV_HOST_ARG(14), KILN_CONV_HOST_ARG(15), KILN_CONV_HOST_ARG(16)
#define KILN_CONV_HOST(name, call)                                             \
  extern "C" void name##_host(void **buffers, unsigned grid, unsigned block) { \
    kiln_emulate(grid, block, [&] { call; });                                  \
  }
#else
#define KILN_CONV_HOST(name, call)
#endif

// im2col from T into C (the GEMM's operand type), col2im from A (its f32
// or f64 result) into T.
#define KILN_CONV_TYPE(suffix, T, C, A)                                        \
  extern "C" __global__ void __launch_bounds__(256)                            \
      kiln_conv_im2col_##suffix(const T *in, C *col, KILN_CONV_GEOMETRY) {     \
    kiln_conv_im2col<T, C>(in, col, KILN_CONV_GEOMETRY_ARGS);                  \
  }                                                                            \
  extern "C" __global__ void __launch_bounds__(256)                            \
      kiln_conv_col2im_##suffix(const A *col, T *out, KILN_CONV_GEOMETRY) {    \
    kiln_conv_col2im<A, T>(col, out, KILN_CONV_GEOMETRY_ARGS);                 \
  }                                                                            \
  KILN_CONV_HOST(kiln_conv_im2col_##suffix,                                    \
                 kiln_conv_im2col_##suffix((const T *)buffers[0],              \
                                           (C *)buffers[1],                    \
                                           KILN_CONV_HOST_GEOMETRY))           \
  KILN_CONV_HOST(kiln_conv_col2im_##suffix,                                    \
                 kiln_conv_col2im_##suffix((const A *)buffers[0],              \
                                           (T *)buffers[1],                    \
                                           KILN_CONV_HOST_GEOMETRY))

#define KILN_CONV_SWAP(suffix, S, D)                                           \
  extern "C" __global__ void __launch_bounds__(256) kiln_conv_swap_##suffix(   \
      const S *src, D *dst, kiln_index A, kiln_index B, kiln_index P) {        \
    kiln_conv_swap<S, D>(src, dst, A, B, P);                                   \
  }                                                                            \
  KILN_CONV_HOST(kiln_conv_swap_##suffix,                                      \
                 kiln_conv_swap_##suffix((const S *)buffers[0],                \
                                         (D *)buffers[1],                      \
                                         KILN_CONV_HOST_ARG(2),                \
                                         KILN_CONV_HOST_ARG(3),                \
                                         KILN_CONV_HOST_ARG(4)))

KILN_CONV_TYPE(f32, float, float, float)
KILN_CONV_TYPE(f64, double, double, double)
KILN_CONV_TYPE(f16, __half, __half, float)
KILN_CONV_TYPE(bf16, __nv_bfloat16, __nv_bfloat16, float)
KILN_CONV_SWAP(f32_f32, float, float)
KILN_CONV_SWAP(f64_f64, double, double)
KILN_CONV_SWAP(f16_f16, __half, __half)
KILN_CONV_SWAP(f32_f16, float, __half)
KILN_CONV_SWAP(bf16_bf16, __nv_bfloat16, __nv_bfloat16)
KILN_CONV_SWAP(f32_bf16, float, __nv_bfloat16)
)cuda";

constexpr uint32_t kBlock = 256;

const char *suffix(PkgDType dtype) {
  switch (dtype) {
  case PkgDType::F32: return "f32";
  case PkgDType::F64: return "f64";
  case PkgDType::F16: return "f16";
  case PkgDType::BF16: return "bf16";
  default: return nullptr;
  }
}

// The accumulation type of |dtype|: f64 for f64, else f32.
PkgDType accumulation(PkgDType dtype) {
  return dtype == PkgDType::F64 ? PkgDType::F64 : PkgDType::F32;
}

std::string list(const std::vector<int64_t> &v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i)
    s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

struct Geometry {
  int64_t n, c, h, w, groups, kh, kw, oh, ow, sh, sw, pt, pl, dh, dw, o;
  int64_t cg() const { return c / groups; }
  int64_t og() const { return o / groups; }
  int64_t rows() const { return cg() * kh * kw; } // CKK
  int64_t p() const { return oh * ow; }
  // The workspace regions, in accumulation-type elements.
  int64_t colElements() const { return groups * rows() * n * p(); }
  int64_t midElements() const { return o * n * p(); }
  int64_t filterElements() const { return o * rows(); }
};

Geometry geometryOf(const ConvParams &p) {
  Geometry g;
  g.n = p.inputShape[0], g.c = p.inputShape[1], g.h = p.inputShape[2];
  g.w = p.inputShape[3], g.o = p.filterShape[0], g.kh = p.filterShape[2];
  g.kw = p.filterShape[3], g.oh = p.outputShape[2], g.ow = p.outputShape[3];
  g.groups = p.groups, g.sh = p.strides[0], g.sw = p.strides[1];
  g.pt = p.padding[0], g.pl = p.padding[2], g.dh = p.dilation[0];
  g.dw = p.dilation[1];
  return g;
}

uint64_t roundUp(uint64_t bytes) { return (bytes + 255) / 256 * 256; }

// The workspace one convolution needs, each region 256-byte aligned and
// sized in the accumulation type, which is what it holds in the widest
// case: col (the input gradient's GEMM result), mid (the forward's) and,
// for half inputs, the filter gradient's f32 sum.
uint64_t workspaceFor(const Geometry &g, PkgDType dtype) {
  uint64_t e = pkgBytesPerElement(accumulation(dtype));
  uint64_t bytes = roundUp(g.colElements() * e) + roundUp(g.midElements() * e);
  if (accumulation(dtype) != dtype)
    bytes += roundUp(g.filterElements() * e);
  return bytes;
}

std::atomic<size_t> columnLimit{size_t(256) << 20};

// How many images one pass takes: as many as keep the column buffer and
// the swapped operand (per image CKK x P + O x P elements) within the
// limit, at least one.
int64_t chunkImages(const Geometry &g, PkgDType dtype) {
  if (g.n <= 0)
    return 1;
  uint64_t e = pkgBytesPerElement(accumulation(dtype));
  uint64_t perImage = uint64_t(g.groups * g.rows() + g.o) * g.p() * e;
  uint64_t fit = perImage ? columnLimit.load() / perImage : uint64_t(g.n);
  return std::max<int64_t>(1, std::min<int64_t>(g.n, int64_t(fit)));
}

// The operand and result shapes of convolution |t|: (x, w) -> y,
// (dy, w) -> dx, (x, dy) -> dw.
std::array<std::vector<int64_t>, 3> convBufferShapes(const PackageThunk &t) {
  const ConvParams &c = t.conv;
  switch (t.library) {
  case LibraryKind::Conv2D: return {c.inputShape, c.filterShape, c.outputShape};
  case LibraryKind::Conv2DInputGrad:
    return {c.outputShape, c.filterShape, c.inputShape};
  default: return {c.inputShape, c.outputShape, c.filterShape};
  }
}

// That convolution |t| (its shapes checked by pkgCheckConvParams) has two
// operands and a result of one float dtype, each holding its shape; and
// that one image's column buffer (CKK x P + O x P accumulation elements,
// chunkImages) has a 64-bit size. Every size is multiplied with overflow
// checks: the shapes are the package's word.
Status checkConvBuffers(const LoadedPackage &package, const PackageThunk &t) {
  if (t.operands.size() != 2 || t.results.size() != 1)
    return Status::error(std::string("expected a ") + pkgLibraryKindName(t.library) +
                         " with two operands and one result, found " +
                         std::to_string(t.operands.size()) + " and " +
                         std::to_string(t.results.size()));
  PkgDType dtype = package.buffers[t.results[0]].dtype;
  if (!suffix(dtype))
    return Status::error(std::string(pkgLibraryKindName(t.library)) +
                         ": expected f32, f64, f16 or bf16, found " +
                         pkgDTypeName(dtype));
  std::array<std::vector<int64_t>, 3> shapes = convBufferShapes(t);
  const char *names[3] = {"operand 0", "operand 1", "the result"};
  for (int i = 0; i < 3; ++i) {
    const PackageBuffer &b =
        package.buffers[i < 2 ? t.operands[i] : t.results[0]];
    std::optional<uint64_t> need = pkgShapeBytes(dtype, shapes[i]);
    if (b.dtype != dtype || !need || b.size < *need)
      return Status::error(
          std::string(pkgLibraryKindName(t.library)) + ": " + names[i] + " '" +
          b.name + "' is " + pkgDTypeName(b.dtype) + " of " +
          std::to_string(b.size) + " bytes, expected " + pkgDTypeName(dtype) +
          " " + list(shapes[i]) + " (" +
          (need ? std::to_string(*need) + " bytes" : "over 2^64 bytes") + ")");
  }
  const ConvParams &c = t.conv;
  std::optional<uint64_t> rows = pkgElementCount(
      {c.groups, c.filterShape[1], c.filterShape[2], c.filterShape[3]});
  uint64_t perImageRows = 0;
  if (!rows ||
      __builtin_add_overflow(*rows, uint64_t(c.filterShape[0]), &perImageRows) ||
      perImageRows > uint64_t(INT64_MAX) ||
      !pkgShapeBytes(accumulation(dtype),
                     {int64_t(perImageRows), c.outputShape[2], c.outputShape[3]}))
    return Status::error(std::string(pkgLibraryKindName(t.library)) +
                         ": the column buffer of one image (filter " +
                         list(c.filterShape) + ", output " + list(c.outputShape) +
                         ", groups " + std::to_string(c.groups) +
                         ") overflows 64-bit sizes");
  return Status::ok();
}

} // namespace

bool isConvThunk(const PackageThunk &t) {
  return t.kind == ThunkKind::LibraryCall &&
         (t.library == LibraryKind::Conv2D ||
          t.library == LibraryKind::Conv2DInputGrad ||
          t.library == LibraryKind::Conv2DFilterGrad);
}

void setConvColumnLimit(size_t bytes) { columnLimit.store(bytes); }
size_t convColumnLimit() { return columnLimit.load(); }

const std::string &convKernelSource() {
  static const std::string source = kSource;
  return source;
}

std::vector<std::string> convKernelEntryPoints() {
  std::vector<std::string> entries;
  for (const char *t : {"f32", "f64", "f16", "bf16"}) {
    entries.push_back(std::string("kiln_conv_im2col_") + t);
    entries.push_back(std::string("kiln_conv_col2im_") + t);
  }
  for (const char *s : {"f32_f32", "f64_f64", "f16_f16", "f32_f16", "bf16_bf16",
                        "f32_bf16"})
    entries.push_back(std::string("kiln_conv_swap_") + s);
  return entries;
}

uint64_t convWorkspaceBytes(const LoadedPackage &package) {
  uint64_t bytes = 0;
  for (const PackageThunk &t : package.thunks) {
    // Sized from the shapes only once they are checked.
    if (!isConvThunk(t) || !t.hasConv || t.results.empty() ||
        !pkgCheckConvParams(t.conv).isOk() ||
        !checkConvBuffers(package, t).isOk())
      continue;
    PkgDType dtype = package.buffers[t.results[0]].dtype;
    Geometry g = geometryOf(t.conv);
    g.n = chunkImages(g, dtype);
    bytes = std::max(bytes, workspaceFor(g, dtype));
  }
  return bytes;
}

StatusOr<std::unique_ptr<CudaConv>>
CudaConv::create(const LoadedPackage &package, CudaApi &api,
                 const CudaDeviceInfo &device, bool allowTf32,
                 int gemmAlgorithms, void *workspace, uint64_t workspaceBytes) {
  std::unique_ptr<CudaConv> conv(new CudaConv(package, api, device, allowTf32,
                                              std::max(gemmAlgorithms, 1)));
  for (size_t i = 0; i < package.thunks.size(); ++i) {
    const PackageThunk &t = package.thunks[i];
    if (!isConvThunk(t))
      continue;
    if (!t.hasConv || t.results.empty())
      return Status::error("thunk " + std::to_string(i) +
                           ": expected a convolution with parameters and a "
                           "result");
    if (Status s = pkgCheckConvParams(t.conv); !s.isOk())
      return Status::error("thunk " + std::to_string(i) + " (" +
                           pkgLibraryKindName(t.library) + "): " + s.message());
    if (Status s = checkConvBuffers(package, t); !s.isOk())
      return Status::error("thunk " + std::to_string(i) + ": " + s.message());
  }
  uint64_t bytes = convWorkspaceBytes(package);
  if (Status s = conv->kernels_.load(convKernelSource(), device.smArch());
      !s.isOk())
    return s;
  if (bytes && workspace && workspaceBytes >= bytes) {
    conv->workspace_ = workspace;
    conv->workspaceBytes_ = workspaceBytes;
    conv->ownsWorkspace_ = false;
  } else if (bytes) {
    if (Status s = api.malloc(&conv->workspace_, bytes); !s.isOk())
      return Status::error("the convolution workspace (" + std::to_string(bytes) +
                           " bytes): " + s.message());
    conv->workspaceBytes_ = bytes;
  }
  return conv;
}

CudaConv::~CudaConv() {
  for (auto &[key, plan] : gemmPlans_)
    api_.gemmDestroy(plan);
  if (workspace_ && ownsWorkspace_)
    api_.free(workspace_);
}

std::vector<CudaConv::GemmShape> CudaConv::gemmShapes() const {
  return gemmShapes_;
}

Status CudaConv::plan(size_t index, const std::vector<void *> &args,
                      size_t gemmWorkspaceBytes) {
  const PackageThunk &t = package_.thunks[index];
  if (args.size() != 3)
    return Status::error(std::string("expected a ") + pkgLibraryKindName(t.library) +
                         " with two operands and one result");
  // create() checked this; repeated for a caller that planned without it.
  if (Status s = checkConvBuffers(package_, t); !s.isOk())
    return s;
  PkgDType dtype = package_.buffers[t.results[0]].dtype;
  const char *type = suffix(dtype);
  const ConvParams &c = t.conv;
  std::array<std::vector<int64_t>, 3> shapes = convBufferShapes(t);

  Geometry g = geometryOf(c);
  Plan p;
  if (g.n == 0 || g.o == 0 || g.c == 0 || g.p() == 0) {
    // Nothing to multiply: the gradients are zero, the output empty.
    p.zeroFill = args[2];
    p.zeroBytes = *pkgShapeBytes(dtype, shapes[2]);
    plans_[index] = std::move(p);
    return Status::ok();
  }
  PkgDType acc = accumulation(dtype);
  // The GEMMs multiply |dtype| operands (f16 and bf16 on tensor cores)
  // into |acc| results: f32 for half inputs (GemmDesc::f32Output), so the
  // forward rounds once in its swap, the input gradient's col2im sums
  // unrounded products and the filter gradient's chunks add in f32.
  bool half = acc != dtype;
  uint64_t e = pkgBytesPerElement(acc), te = pkgBytesPerElement(dtype);
  int64_t chunk = chunkImages(g, dtype);
  Geometry full = g;
  full.n = chunk; // the workspace's layout: the largest chunk
  auto *base = static_cast<uint8_t *>(workspace_);
  void *col = base;
  void *mid = base + roundUp(full.colElements() * e);
  void *wacc = base + roundUp(full.colElements() * e) + roundUp(full.midElements() * e);
  std::string accName = suffix(acc);
  Status failed = Status::ok();

  auto launch = [&](const std::string &entry, int64_t total,
                    std::vector<void *> launchArgs) {
    StatusOr<CudaFunction> fn = kernels_.function(entry);
    if (!fn.isOk()) {
      if (failed.isOk())
        failed = fn.status();
      return;
    }
    Step step;
    step.launch.function = fn.value();
    step.launch.entry = entry;
    uint64_t cap = uint64_t(std::max(device_.multiprocessors, 1)) * (2048 / kBlock);
    uint64_t blocks = (uint64_t(total) + kBlock - 1) / kBlock;
    step.launch.grid =
        static_cast<uint32_t>(std::max<uint64_t>(std::min(blocks, cap), 1));
    step.launch.block = kBlock;
    step.launch.args = std::move(launchArgs);
    p.steps.push_back(std::move(step));
  };
  auto scalar = [](int64_t v) { return reinterpret_cast<void *>(v); };
  auto geometryArgs = [&](const Geometry &q, void *a, void *b) {
    return std::vector<void *>{a, b, scalar(q.n), scalar(q.c), scalar(q.h),
                               scalar(q.w), scalar(q.groups), scalar(q.kh),
                               scalar(q.kw), scalar(q.oh), scalar(q.ow),
                               scalar(q.sh), scalar(q.sw), scalar(q.pt),
                               scalar(q.pl), scalar(q.dh), scalar(q.dw)};
  };
  // src [a, b, rest] -> dst [b, a, rest], from |from| to |to| elements.
  auto swap = [&](void *src, void *dst, const std::string &from,
                  const std::string &to, int64_t a, int64_t b, int64_t rest) {
    launch("kiln_conv_swap_" + from + "_" + to, a * b * rest,
           {src, dst, scalar(a), scalar(b), scalar(rest)});
  };
  auto gemm = [&](GemmParams gp, const void *lhs, const void *rhs, void *out) {
    if (!failed.isOk())
      return;
    GemmDesc desc;
    desc.dtype = dtype;
    desc.f32Output = half;
    desc.params = gp;
    desc.allowTf32 = allowTf32_;
    desc.algorithms = gemmAlgorithms_;
    desc.alignmentBytes =
        std::min({gemmAlignmentOf(lhs), gemmAlignmentOf(rhs), gemmAlignmentOf(out)});
    if (Status s = checkGemmDesc(desc); !s.isOk()) {
      failed = s;
      return;
    }
    std::string key = gemmDescKey(desc, gemmWorkspaceBytes);
    Step step;
    step.isGemm = true;
    auto found = gemmPlans_.find(key);
    if (found != gemmPlans_.end()) {
      step.gemm = found->second;
    } else {
      if (Status s = api_.gemmPlan(&step.gemm, desc, gemmWorkspaceBytes);
          !s.isOk()) {
        failed = s;
        return;
      }
      gemmPlans_[key] = step.gemm;
      gemmShapes_.push_back({key, step.gemm, index});
    }
    step.lhs = lhs, step.rhs = rhs, step.out = out;
    p.steps.push_back(std::move(step));
  };
  auto at = [](void *buffer, int64_t elements, uint64_t bytes) -> void * {
    return static_cast<uint8_t *>(buffer) + elements * bytes;
  };

  // The filter is a GEMM operand as it is; its gradient is summed in
  // |acc| (wacc for half inputs, rounded into dW at the end).
  void *w = args[1];
  void *dwAcc = half ? wacc : args[2];
  // Images [first, first + q.n) at a time: the column buffer holds a chunk.
  for (int64_t first = 0; first < g.n; first += chunk) {
    Geometry q = g;
    q.n = std::min(chunk, g.n - first);
    int64_t image = g.c * g.h * g.w, outImage = g.o * g.p();
    GemmParams gp;
    gp.batch = g.groups;
    switch (t.library) {
    case LibraryKind::Conv2D:
      launch(std::string("kiln_conv_im2col_") + type, q.colElements(),
             geometryArgs(q, at(args[0], first * image, te), col));
      gp.m = g.og(), gp.n = q.n * g.p(), gp.k = g.rows();
      gemm(gp, w, col, mid);
      swap(mid, at(args[2], first * outImage, te), accName, type, g.o, q.n, g.p());
      break;
    case LibraryKind::Conv2DInputGrad:
      swap(at(args[0], first * outImage, te), mid, type, type, q.n, g.o, g.p());
      gp.m = g.rows(), gp.n = q.n * g.p(), gp.k = g.og();
      gp.transposeLhs = true;
      gemm(gp, w, mid, col);
      launch(std::string("kiln_conv_col2im_") + type, q.n * image,
             geometryArgs(q, col, at(args[2], first * image, te)));
      break;
    default:
      launch(std::string("kiln_conv_im2col_") + type, q.colElements(),
             geometryArgs(q, at(args[0], first * image, te), col));
      swap(at(args[1], first * outImage, te), mid, type, type, q.n, g.o, g.p());
      // dW accumulates over the chunks.
      gp.m = g.og(), gp.n = g.rows(), gp.k = q.n * g.p();
      gp.transposeRhs = true;
      gp.beta = first == 0 ? 0.0 : 1.0;
      gemm(gp, mid, col, dwAcc);
      break;
    }
  }
  if (t.library == LibraryKind::Conv2DFilterGrad && half)
    swap(wacc, args[2], accName, type, 1, 1, g.filterElements());
  if (!failed.isOk())
    return failed;
  plans_[index] = std::move(p);
  return Status::ok();
}

Status CudaConv::run(size_t index, CudaStream stream, void *gemmWorkspace,
                     size_t gemmWorkspaceBytes) {
  auto found = plans_.find(index);
  if (found == plans_.end())
    return Status::error("the convolution was not planned");
  Plan &p = found->second;
  if (p.zeroFill)
    return p.zeroBytes ? api_.memsetAsync(p.zeroFill, 0, p.zeroBytes, stream)
                       : Status::ok();
  auto enqueue = [&](const KernelLaunch &l) {
    Status s = kernels_.launch(l, stream);
    if (!s.isOk())
      return Status::error("kernel " + l.entry + ": " + s.message());
    return Status::ok();
  };
  for (Step &step : p.steps) {
    if (!step.isGemm) {
      if (Status s = enqueue(step.launch); !s.isOk())
        return s;
      continue;
    }
    if (Status s = api_.gemmRun(step.gemm, step.lhs, step.rhs, step.out,
                                nullptr, nullptr, gemmWorkspace,
                                gemmWorkspaceBytes, stream);
        !s.isOk())
      return s;
  }
  return Status::ok();
}

} // namespace kiln::runtime::cuda
