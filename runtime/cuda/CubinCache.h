//===- CubinCache.h - NVRTC's cubins for the runtime, kept on disk -------===//
//
// The runtime compiles kernels of its own through NVRTC when an executable
// is made: the attention, convolution and epilogue kernel sets
// (RuntimeKernels.h) and, for a device a package has no code for, the
// package's kernel source (CudaExecutable). GPT-2's attention set alone is
// 10 kernels, seconds of NVRTC in every process. nvrtcCompileCached keeps
// each cubin on disk, as `kiln compile`'s own cache does for the
// generated kernels (codegen/cuda/Nvrtc.h), so a second process loads it:
//
//   $KILN_CACHE_DIR/cubin/HASH.cubin (default ~/.cache/kiln/cubin;
//   KILN_CACHE_DIR=off disables it, as it does the autotuner's cache)
//
// Each file holds its whole key (CudaApi::nvrtcIdentity(): NVRTC's
// version, options and headers; the program's name; the architecture) and
// the source, both compared in full on read: a hash collision, another
// NVRTC or a changed source compiles again and rewrites the file. Files
// are written under a name unique to the writer, then renamed, so
// processes may share the directory. Nothing is cached where the table
// cannot say which NVRTC it has (nvrtcIdentity() ""). The cache is an
// optimization: a directory that cannot be written, or a file that cannot
// be read, is a miss, never an error.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_CUDA_CUBINCACHE_H
#define KILN_RUNTIME_CUDA_CUBINCACHE_H

#include "runtime/Status.h"
#include "runtime/Files.h"
#include "runtime/cuda/CudaApi.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace kiln::runtime::cuda {

// Where nvrtcCompileCached's cubin came from.
struct CubinOrigin {
  bool fromDisk = false;     // read from the cache, not compiled
  std::string directory;     // the cache read or written ("": none)
  double compileSeconds = 0; // NVRTC's time (0 when read)
};

// |api|'s NVRTC compile of |source| (program |name|) for sm_|arch|, taken
// from the disk cache when it holds it; *|origin| says which. |refresh|:
// compile whatever the cache holds and rewrite its entry. |log| gets
// NVRTC's log when it compiled.
Status nvrtcCompileCached(CudaApi &api, const std::string &source,
                          const std::string &name, unsigned arch,
                          std::vector<uint8_t> &cubin, std::string &log,
                          CubinOrigin *origin = nullptr, bool refresh = false);

// nvrtcCompileCached, its cubin handed to |load| (true: it loaded). A
// cubin from the disk that |load| refuses (a damaged file, a driver that
// refuses it) is compiled again, once, its entry rewritten, and handed
// over. Fails only when NVRTC does; a refusal of NVRTC's own cubin is
// |load|'s to report. *|origin| describes the cubin handed over last.
Status nvrtcCompileAndLoad(CudaApi &api, const std::string &source,
                           const std::string &name, unsigned arch,
                           std::string &log,
                           const std::function<bool(const std::vector<uint8_t> &)> &load,
                           CubinOrigin *origin = nullptr);

// The directory nvrtcCompileCached uses ("" when it caches nothing).
std::string cubinCacheDirectory();

} // namespace kiln::runtime::cuda

#endif // KILN_RUNTIME_CUDA_CUBINCACHE_H
