//===- PackageRoofline.h - what a compiled step costs on a GPU, predicted -*- C++ -*-===//
//
// A roofline of a compiled training step, thunk by thunk: each kernel
// launch, GEMM, convolution, fused attention and copy in a package costs one
// launch plus the longer of moving its bytes through HBM and doing its
// arithmetic at the peak of its number format, scaled by the fraction of
// peak such a kernel reaches in practice. It is the package the runtime
// would run (the plain GEMM plus epilogue kernel where cuBLASLt takes no
// epilogue, the layout copies around BHTD fused attention, none around
// packed), not an idealized
// model, so a change to fusion or to the package builder shows in it.
//
// Bytes are each distinct operand buffer read once and each result written
// once (the FusionCostModel's rule). FLOPs are exact for GEMMs and
// convolutions, and for attention what its kernels multiply (whole tiles;
// the backward's dQ kernel recomputes the scores); generated kernels count
// none (they are memory-bound elementwise and reduction kernels).
// Collectives are counted apart and cost nothing here: a single device's
// step.
//
// `kiln inspect STEP.kpkg --roofline` prints it, and beside it the times
// a GPU measured (`--measured=FILE`, from kiln-cuda-run --profile).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TOOLS_KILN_LIB_PACKAGEROOFLINE_H
#define KILN_TOOLS_KILN_LIB_PACKAGEROOFLINE_H

#include "runtime/package/Package.h"

#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::cli {

// The device the roofline assumes. Defaults: one NVIDIA H200 SXM (dense
// tensor-core peaks from NVIDIA's H200 datasheet, 4.8 TB/s HBM3e), with
// the efficiencies bench/dist/cost_model.py uses: cuBLAS GEMMs at 70% of
// peak, FlashAttention-2 at 35%, streaming kernels at 80% of bandwidth, and
// 3 us per launch.
struct RooflineDevice {
  std::string name = "H200";
  double bf16Tflops = 989.4; // also fp16
  double tf32Tflops = 494.7;
  double f32Tflops = 66.9; // CUDA cores
  double f64Tflops = 66.9; // FP64 tensor cores
  double bandwidthGBps = 4800.0;
  double gemmEfficiency = 0.70;
  double attentionEfficiency = 0.35;
  double memoryEfficiency = 0.80;
  double launchUs = 3.0;
  // A generated kernel whose threads each walk a long chain of loads in
  // order (PackageKernel::serialSteps: a column reduction's rows) waits on
  // memory latency, not bandwidth: each step costs latencyUs /
  // loadsInFlight (the loads the compiler's unrolling keeps in flight), in
  // waves of multiprocessors x threadsPerMultiprocessor threads.
  double latencyUs = 0.6;
  double loadsInFlight = 4.0;
  int64_t multiprocessors = 132;
  // The architecture whose attention kernels (and their tiles) the
  // runtime would run.
  unsigned smArch = 90;
  int64_t threadsPerMultiprocessor = 2048;
  // f32 GEMMs on TF32 tensor cores (kiln train --allow-tf32).
  bool allowTf32 = false;
  // The attention backward as its "ds" variant where the runtime offers
  // it (dQ from the dS tiles dK/dV stores; CudaAttention.h), which the
  // autotuner may choose on a GPU: --assume=attention-dq=stored.
  bool attentionStoredScores = false;
};

struct ThunkCost {
  size_t thunk = 0;
  // What ran: "kernel", "gemm", "gemm+bias_gelu" (the cuBLASLt epilogue),
  // "conv2d", "attention", "attention_grad", "copy", or "update_copy" (an
  // output copied over the input it updates after the step, because it was
  // not planned in place; |thunk| is then the number of thunks).
  std::string kind;
  // The model nodes behind it: a kernel's source nodes (the first, and how
  // many more), else the buffer its first result names.
  std::string name;
  // The shape of a library call ("m x n x k", attention's B H Tq Tk D), or
  // a kernel's name; thunks with the same kind and detail are alike.
  std::string detail;
  double flops = 0;
  uint64_t bytes = 0;
  double us = 0;
  bool computeBound = false;
  // A kernel priced by its threads' chains of loads (RooflineDevice's
  // latencyUs), not by its bytes or FLOPs.
  bool latencyBound = false;
  // Microseconds measured on a GPU (kiln-cuda-run --profile), or -1.
  double measuredUs = -1;
};

struct PackageRooflineResult {
  std::vector<ThunkCost> thunks;
  double totalUs = 0;
  double flops = 0;
  uint64_t bytes = 0;
  int64_t collectives = 0;
  // Parameters (elements of Parameter buffers) and tokens (elements of the
  // single integer Input, a language model's [batch, sequence]; 0 when the
  // inputs are not one integer tensor), for model FLOPs utilization.
  int64_t parameters = 0;
  int64_t tokens = 0;
  // The attention term of model FLOPs (PaLM's, and bench/gpu/peers.py's:
  // 12 x layers x hidden x sequence per token): 3 x 2 x B x H x Tq x Tk x
  // (D + Dv) per attention of the model (per gradient thunk; per forward
  // thunk in a step without gradients: a recomputed forward does not
  // count twice), the whole score matrix even where a causal mask hides
  // half of it. 0 without fused attention.
  double attentionModelFlops = 0;
};

// A library call's kind: "gemm" or "gemm+EPILOGUE", "conv2d",
// "conv2d_input_grad", "conv2d_filter_grad", "attention", "attention_grad".
std::string libraryCallKind(const runtime::PackageThunk &thunk);

// Elements of the package's Parameter buffers.
int64_t parameterCount(const runtime::LoadedPackage &package);

PackageRooflineResult
predictPackageRoofline(const runtime::LoadedPackage &package,
                       const RooflineDevice &device = {});

// The summary: totals, the step's predicted time, FLOPs utilization, and
// the |top| costliest groups of alike thunks (layers folded together).
void printPackageRoofline(const PackageRooflineResult &roofline,
                          const RooflineDevice &device, size_t top,
                          llvm::raw_ostream &os);

// One CSV row per thunk: thunk,kind,name,detail,flops,bytes,us,bound.
// Reads kiln-cuda-run --profile's CSV (a "thunk,ms" header, then one
// "INDEX,MS" line per thunk) into the thunks' measuredUs. Returns an empty
// string, or what is wrong and on which line.
std::string applyMeasuredProfile(PackageRooflineResult &roofline,
                                 llvm::StringRef csv);

void printPackageRooflineCsv(const PackageRooflineResult &roofline,
                             llvm::raw_ostream &os);

} // namespace kiln::cli

#endif // KILN_TOOLS_KILN_LIB_PACKAGEROOFLINE_H
