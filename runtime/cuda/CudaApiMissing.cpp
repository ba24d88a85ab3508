//===- CudaApiMissing.cpp - the CUDA table in a build without CUDA --------===//
//
// See CudaApi.h. Built instead of CudaApiLoader.cpp when CMake found no CUDA
// toolkit: the GPU runtime is there (and testable with a fake table), but
// loading the real table says why it cannot.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudaApi.h"

namespace kiln::runtime::cuda {

StatusOr<std::unique_ptr<CudaApi>> loadCudaApi(bool) {
  return Status::error("this kiln was built without the CUDA toolkit "
                       "(KILN_ENABLE_CUDA is off): no CUDA runtime");
}

} // namespace kiln::runtime::cuda
