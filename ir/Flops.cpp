//===- Flops.cpp - FLOP counts of kiln ops --------------------------------===//

#include "ir/Flops.h"

#include "ir/ShapeRules.h"

#include "llvm/Support/MathExtras.h"

#include <limits>

namespace kiln::flops {

int64_t add(int64_t a, int64_t b) {
  int64_t sum;
  return llvm::AddOverflow(a, b, sum) ? std::numeric_limits<int64_t>::max() : sum;
}

int64_t mul(int64_t a, int64_t b) {
  int64_t product;
  return llvm::MulOverflow(a, b, product) ? std::numeric_limits<int64_t>::max()
                                          : product;
}

int64_t dotGeneral(llvm::ArrayRef<int64_t> lhs,
                   llvm::ArrayRef<int64_t> lhsContracting,
                   llvm::ArrayRef<int64_t> result) {
  int64_t k = 1;
  for (int64_t d : lhsContracting)
    k *= lhs[d]; // at most the operand's elements
  return mul(2 * shape::numElements(result), k);
}

int64_t conv2d(llvm::ArrayRef<int64_t> filter, llvm::ArrayRef<int64_t> output) {
  // Each output element is a dot product over filter[1] * KH * KW inputs.
  return mul(2 * shape::numElements(output), filter[1] * filter[2] * filter[3]);
}

int64_t pool2d(llvm::ArrayRef<int64_t> window, llvm::ArrayRef<int64_t> output) {
  return mul(shape::numElements(output), mul(window[0], window[1]));
}

int64_t reduce(int64_t inputElements) { return inputElements; }
int64_t softmax(int64_t elements) { return 5 * elements; }
int64_t layerNorm(int64_t elements) { return 7 * elements; }
int64_t dropout(int64_t elements) { return 2 * elements; }
int64_t geluGrad(int64_t elements, bool tanh) {
  return (tanh ? 18 : 11) * elements;
}

namespace {
// Query-key pairs of one head; a causal mask keeps about half.
int64_t attentionPairs(int64_t qLen, int64_t kvLen, bool causal) {
  int64_t pairs = mul(qLen, kvLen);
  return causal ? pairs / 2 : pairs;
}
} // namespace

int64_t attention(int64_t batch, int64_t heads, int64_t qLen, int64_t kvLen,
                  int64_t headDim, int64_t valueDim, bool causal) {
  return mul(2 * batch * heads, mul(attentionPairs(qLen, kvLen, causal),
                                    headDim + valueDim));
}

int64_t attentionGrad(int64_t batch, int64_t heads, int64_t qLen, int64_t kvLen,
                      int64_t headDim, int64_t valueDim, bool causal) {
  return mul(2 * batch * heads, mul(attentionPairs(qLen, kvLen, causal),
                                    3 * headDim + 2 * valueDim));
}

} // namespace kiln::flops
