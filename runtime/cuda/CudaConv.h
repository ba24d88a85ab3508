//===- CudaConv.h - convolution library calls on the GPU, without cuDNN -*- C++ -*-===//
//
// The GPU counterpart of the convolutions in runtime/cpu/Blas.cpp: the
// three LibraryCall thunks Conv2D, Conv2DInputGrad and Conv2DFilterGrad
// (NCHW input, OIHW filter, strides, padding, dilation, groups) as
// im2col / col2im / layout kernels plus one batched cuBLASLt GEMM (batch =
// groups) over every image at once (or a chunk of images, below), the
// CPU path's product made one big GEMM:
//
//   conv2d:             col = im2col(x)               [G, CKK, N*P]
//                       Y' = W[g] . col[g]            [G, Og, N*P] = [O, N, P]
//                       y = swap(Y')                  [N, O, P]
//   conv2d_input_grad:  dY' = swap(dy)                [O, N, P]
//                       col[g] = W[g]^T . dY'[g]      [G, CKK, N*P]
//                       dx = col2im(col)              (a gather: no atomics)
//   conv2d_filter_grad: col = im2col(x), dY' = swap(dy)
//                       dW[g] = dY'[g] . col[g]^T     [G, Og, CKK]
//
// (CKK = C/G * KH * KW, P = OH * OW.) The column buffer and the transposed
// operands are in the convolution's own type (a copy), so f16 and bf16
// convolutions multiply on tensor cores; every GEMM sums in f32 (f64 for
// f64) and, for half inputs, writes its result in f32
// (GemmDesc::f32Output): the forward rounds it once in its swap, col2im
// sums the input gradient's unrounded columns, the filter gradient's
// chunks add in f32 and round once at the end. So a half-precision
// convolution is still the f32 convolution of its inputs rounded once, as
// on the CPU (products of 16-bit values are exact in f32). The kernels are CUDA C++ kept as
// source here (convKernelSource()), compiled once per process and
// architecture through the CudaApi table's NVRTC (cached) and loaded per
// executable; every kernel loops grid-stride, takes pointers and 64-bit
// integers only (so tests run it on the host under
// codegen/cuda/CudaEmulation.h: each NAME has a NAME_host wrapper there).
// One device workspace, sized at load for the largest convolution of the
// package, holds the column buffer and the transposed operands; the GEMMs
// share the executable's cuBLASLt workspace.
//
// The column buffer holds as many images as fit in convColumnLimit() (256
// MiB by default; at least one image): a larger convolution runs as a few
// chunks of images, each im2col / GEMM / swap (the filter gradient's GEMMs
// accumulating into dW), so the workspace stays bounded.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_CUDA_CUDACONV_H
#define KILN_RUNTIME_CUDA_CUDACONV_H

#include "runtime/Status.h"
#include "runtime/cuda/CudaApi.h"
#include "runtime/cuda/RuntimeKernels.h"
#include "runtime/package/Package.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace kiln::runtime::cuda {

// The kernels' CUDA C++ (all of them, one translation unit).
const std::string &convKernelSource();
// Every entry point convKernelSource() defines.
std::vector<std::string> convKernelEntryPoints();

// The most bytes a convolution's column buffer and swapped operand take
// (256 MiB unless set): larger convolutions run a chunk of images at a time
// (the filter gradient accumulating over the chunks, beta = 1). Applies to
// executables created afterwards; tests lower it.
void setConvColumnLimit(size_t bytes);
size_t convColumnLimit();

// Whether |t| is a convolution's library call (Conv2D, its input or its
// filter gradient), which CudaConv runs.
bool isConvThunk(const PackageThunk &t);

// The workspace CudaConv::create allocates for |package|: its largest
// convolution's column buffer and swapped operands, one chunk of images
// under convColumnLimit(); 0 without convolutions. A convolution thunk
// whose parameters or buffers are wrong counts nothing here (create()
// refuses it).
uint64_t convWorkspaceBytes(const LoadedPackage &package);

class CudaConv {
public:
  // Compiles (or takes from the process cache) and loads the kernels for
  // |device| and allocates the workspace for the largest convolution
  // thunk of |package|.
  // Its GEMM plans keep |gemmAlgorithms| of cuBLASLt's heuristic choices
  // for the autotuner (1: the heuristic's first).
  // |workspace| (not owned), when it is given and holds the workspace
  // (|workspaceBytes|), is used instead of an allocation of its own: the
  // executable lends its own to an eval step that runs in its memory.
  static StatusOr<std::unique_ptr<CudaConv>>
  create(const LoadedPackage &package, CudaApi &api,
         const CudaDeviceInfo &device, bool allowTf32, int gemmAlgorithms = 1,
         void *workspace = nullptr, uint64_t workspaceBytes = 0);
  ~CudaConv();
  CudaConv(const CudaConv &) = delete;
  CudaConv &operator=(const CudaConv &) = delete;

  // Plans thunk |index| of the package (a Conv2D* library call) with
  // |args|, its operands' then its result's device addresses; its GEMM is
  // planned for |gemmWorkspaceBytes| of cuBLASLt workspace.
  Status plan(size_t index, const std::vector<void *> &args,
              size_t gemmWorkspaceBytes);
  // Queues thunk |index| on |stream|; the GEMM uses |gemmWorkspace| (of
  // the size plan() was given).
  Status run(size_t index, CudaStream stream, void *gemmWorkspace,
             size_t gemmWorkspaceBytes);

  size_t workspaceBytes() const { return workspaceBytes_; }

  // Its kernel set and where the cubin came from (RuntimeKernels::origin).
  const RuntimeKernels &kernels() const { return kernels_; }

  // The GEMM plans planned so far, one per shape (thunks of one shape
  // share it), each with its key and the first thunk that runs it: what
  // CudaExecutable's autotuner times, by running that thunk.
  struct GemmShape {
    std::string key;
    GemmPlan plan = nullptr;
    size_t thunk = 0;
  };
  std::vector<GemmShape> gemmShapes() const;

private:
  CudaConv(const LoadedPackage &package, CudaApi &api,
           const CudaDeviceInfo &device, bool allowTf32, int gemmAlgorithms)
      : package_(package), api_(api), device_(device), allowTf32_(allowTf32),
        gemmAlgorithms_(gemmAlgorithms),
        kernels_(api, "kiln_conv", "convolution") {}

  // A kernel launch (pointers and 64-bit integers) or a GEMM, in the order
  // they run.
  struct Step {
    bool isGemm = false;
    KernelLaunch launch;
    GemmPlan gemm = nullptr;
    const void *lhs = nullptr, *rhs = nullptr;
    void *out = nullptr;
  };
  struct Plan {
    std::vector<Step> steps;
    void *zeroFill = nullptr; // an empty convolution: memset the result
    size_t zeroBytes = 0;
  };

  const LoadedPackage &package_;
  CudaApi &api_;
  CudaDeviceInfo device_;
  bool allowTf32_;
  int gemmAlgorithms_ = 1;
  RuntimeKernels kernels_;
  void *workspace_ = nullptr;
  size_t workspaceBytes_ = 0;
  bool ownsWorkspace_ = true;
  std::map<size_t, Plan> plans_;
  std::map<std::string, GemmPlan> gemmPlans_;
  std::vector<GemmShape> gemmShapes_; // in the order they were planned
};

} // namespace kiln::runtime::cuda

#endif // KILN_RUNTIME_CUDA_CUDACONV_H
