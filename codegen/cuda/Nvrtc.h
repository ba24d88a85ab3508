//===- Nvrtc.h - CUDA C++ to PTX and cubins through NVRTC ----------*- C++ -*-===//
//
// Compiles one kernel's CUDA C++ (codegen/cuda/CudaEmitter.h) with NVRTC for
// each requested SM architecture (`--gpu-architecture=sm_NN`, C++17, -O3,
// the toolkit's include directory for cuda_fp16.h / cuda_bf16.h, and
// `--ptxas-options=-v` so that ptxas reports registers and spills). One
// compilation per architecture yields both its PTX and its cubin; the
// result keeps the cubin of every architecture and the PTX of the lowest
// (PTX is forward compatible, so a driver can JIT it for a newer GPU).
//
// Persistent cache: each (source, architecture) compilation is stored under
// DIR/nvrtc/KEY.{ptx,cubin,log}, DIR being $KILN_CACHE_DIR, else
// $HOME/.cache/kiln; KEY is the SHA-256 of the NVRTC version, the
// architecture, the options and the source. Files are written to a
// temporary name and renamed, so concurrent compilers never see half a
// file; an unreadable or partial entry is recompiled. KILN_CACHE_DIR=off
// (or an unwritable directory) disables the cache.
//
// Only built when the CUDA toolkit is found (KILN_ENABLE_CUDA): it links
// libnvrtc, which needs no GPU and no driver.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_CODEGEN_CUDA_NVRTC_H
#define KILN_CODEGEN_CUDA_NVRTC_H

#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

struct CubinResult {
  unsigned arch = 0;  // 90 for sm_90
  std::vector<uint8_t> image;
  // From ptxas's info log (-1 when ptxas did not say).
  int registers = -1;
  int spillStoreBytes = -1, spillLoadBytes = -1;
  int stackFrameBytes = -1;
  bool fromCache = false;
  std::string log; // NVRTC's program log (ptxas info lines)
};

struct NvrtcResult {
  std::string ptx; // for the lowest architecture
  unsigned ptxArch = 0;
  std::vector<CubinResult> cubins;
};

// NVRTC's version as "MAJOR.MINOR".
std::string nvrtcVersionString();

// The cache directory in use ("" when disabled).
std::string nvrtcCacheDirectory();

// Compiles |source| (|name| names it in messages) for |archs| (e.g. {90}).
// Returns false with |error| holding the NVRTC log on failure.
bool compileCudaSource(const std::string &source, const std::string &name,
                       const std::vector<unsigned> &archs, NvrtcResult &result,
                       std::string &error);

// Parses "sm_80,sm_90" or "80,90" ("" gives {90}); false on a bad entry.
bool parseCudaArchs(const std::string &text, std::vector<unsigned> &archs,
                    std::string &error);

} // namespace kiln

#endif // KILN_CODEGEN_CUDA_NVRTC_H
