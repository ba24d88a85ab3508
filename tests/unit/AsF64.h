//===- AsF64.h - arguments for a step's exact (f64) twin ----------*- C++ -*-===//
//
// Tests compare a step with its exact twin (kiln-convert-floats-to-f64, the
// same step with every float in f64), which takes the step's arguments with
// every float tensor widened to f64.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TESTS_UNIT_ASF64_H
#define KILN_TESTS_UNIT_ASF64_H

#include "ir/HostTensor.h"

#include "llvm/ADT/ArrayRef.h"

#include <vector>

namespace kiln {

// |values| with every float tensor widened to f64 (its values are exact in
// f64); integer tensors as they are.
inline std::vector<HostTensor> asF64(llvm::ArrayRef<HostTensor> values) {
  std::vector<HostTensor> out;
  for (const HostTensor &v : values)
    out.push_back(isFloat(v.dtype())
                      ? HostTensor(DType::f64, v.shape(), v.values())
                      : v);
  return out;
}

} // namespace kiln

#endif // KILN_TESTS_UNIT_ASF64_H
