//===- Flops.h - FLOP counts of kiln ops --------------------------*- C++ -*-===//
//
// The counting rules behind CostInterface::getFlops, on plain shapes so they
// can be checked against hand-computed values. A multiply-add counts as 2.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_IR_FLOPS_H
#define KILN_IR_FLOPS_H

#include "llvm/ADT/ArrayRef.h"

#include <cstdint>

namespace kiln::flops {

// 2 * (result elements) * (product of the contracted sizes).
int64_t dotGeneral(llvm::ArrayRef<int64_t> lhs,
                   llvm::ArrayRef<int64_t> lhsContracting,
                   llvm::ArrayRef<int64_t> result);
// 2 * N * O * OH * OW * (C / groups) * KH * KW, from the filter and output.
int64_t conv2d(llvm::ArrayRef<int64_t> filter, llvm::ArrayRef<int64_t> output);
// One comparison or addition per window element per output.
int64_t pool2d(llvm::ArrayRef<int64_t> window, llvm::ArrayRef<int64_t> output);
// One operation per input element.
int64_t reduce(int64_t inputElements);
// max, subtract, exp, sum, divide (or log): 5 per element.
int64_t softmax(int64_t elements);
// mean, centre, square, sum, rsqrt-scale, scale, shift: 7 per element.
int64_t layerNorm(int64_t elements);
// compare and scale: 2 per element.
int64_t dropout(int64_t elements);

} // namespace kiln::flops

#endif // KILN_IR_FLOPS_H
