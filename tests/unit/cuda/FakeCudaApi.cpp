//===- FakeCudaApi.cpp - the fake CUDA table's key function ----------------===//
//
// FakeCudaApi's destructor, its one member defined out of line: the vtable
// goes where the key function is, so this file alone compiles the fake's
// overrides (FakeCudaApi.h).
//
//===----------------------------------------------------------------------===//

#include "tests/unit/cuda/FakeCudaApi.h"

namespace kiln::runtime::cuda::testing {

FakeCudaApi::~FakeCudaApi() {
  for (auto &[p, bytes] : live_)
    std::free(const_cast<char *>(p));
}

} // namespace kiln::runtime::cuda::testing
