//===- Flops.cpp - FLOP counts of kiln ops --------------------------------===//

#include "ir/Flops.h"

#include "ir/ShapeRules.h"

namespace kiln::flops {

int64_t dotGeneral(llvm::ArrayRef<int64_t> lhs,
                   llvm::ArrayRef<int64_t> lhsContracting,
                   llvm::ArrayRef<int64_t> result) {
  int64_t k = 1;
  for (int64_t d : lhsContracting)
    k *= lhs[d];
  return 2 * shape::numElements(result) * k;
}

int64_t conv2d(llvm::ArrayRef<int64_t> filter, llvm::ArrayRef<int64_t> output) {
  // Each output element is a dot product over filter[1] * KH * KW inputs.
  return 2 * shape::numElements(output) * filter[1] * filter[2] * filter[3];
}

int64_t pool2d(llvm::ArrayRef<int64_t> window, llvm::ArrayRef<int64_t> output) {
  return shape::numElements(output) * window[0] * window[1];
}

int64_t reduce(int64_t inputElements) { return inputElements; }
int64_t softmax(int64_t elements) { return 5 * elements; }
int64_t layerNorm(int64_t elements) { return 7 * elements; }
int64_t dropout(int64_t elements) { return 2 * elements; }

} // namespace kiln::flops
