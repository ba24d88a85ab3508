//===- Flops.h - FLOP counts of kiln ops --------------------------*- C++ -*-===//
//
// The counting rules behind CostInterface::getFlops, on plain shapes so they
// can be checked against hand-computed values. A multiply-add counts as 2.
// Counts saturate at INT64_MAX instead of overflowing: tensors within the
// dialect's limits (ir/ShapeRules.h) can still ask for more than 2^63
// operations (a dot of two 2^23 x 2^23 f32 matrices), and such a count only
// has to compare as huge.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_IR_FLOPS_H
#define KILN_IR_FLOPS_H

#include "llvm/ADT/ArrayRef.h"

#include <cstdint>

namespace kiln::flops {

// a + b and a * b for counts (>= 0), saturating at INT64_MAX.
int64_t add(int64_t a, int64_t b);
int64_t mul(int64_t a, int64_t b);

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
// kiln.gelu_grad: the operations of its scalar formula per element
// (ir/ScalarSemantics.cpp; a transcendental counts as one): 18 for the tanh
// form, 11 for the erf form.
int64_t geluGrad(int64_t elements, bool tanh);
// kiln.attention: 2 * B * H * pairs * (D + Dv), the two GEMMs, where pairs
// is Tq * Tk, halved with a causal mask (the usual accounting).
int64_t attention(int64_t batch, int64_t heads, int64_t qLen, int64_t kvLen,
                  int64_t headDim, int64_t valueDim, bool causal);
// kiln.attention_grad: 2 * B * H * pairs * (3 D + 2 Dv), the five GEMMs of
// the backward pass (recomputed scores, dV, dP, dQ, dK); 2.5x the forward
// when D = Dv.
int64_t attentionGrad(int64_t batch, int64_t heads, int64_t qLen, int64_t kvLen,
                      int64_t headDim, int64_t valueDim, bool causal);

} // namespace kiln::flops

#endif // KILN_IR_FLOPS_H
