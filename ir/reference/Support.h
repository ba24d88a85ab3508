//===- Support.h - shared helpers for reference semantics ---------*- C++ -*-===//
//
// What every ReferenceEvaluable::evaluate in ir/reference/ needs: checking
// that the host tensors it was handed match the op's operand types (a
// mismatch at run time is reported on the op, never asserted), making a
// result tensor from the op's result type, and walking a multi-dimensional
// index space with two strided offsets at once (enough for broadcast,
// transpose, slice, pad, concatenate and reductions without per-op index
// arithmetic).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_IR_REFERENCE_SUPPORT_H
#define KILN_IR_REFERENCE_SUPPORT_H

#include "ir/HostTensor.h"

#include "mlir/IR/Operation.h"
#include "mlir/Support/LogicalResult.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"

#include <string>

namespace kiln::reference {

// Checks that |operands| has one tensor per operand of |op|, each of the
// shape and element type of that operand's static type; otherwise emits an
// error on |op| that names the operand, the expected type and what came.
mlir::LogicalResult checkOperands(mlir::Operation *op,
                                  llvm::ArrayRef<HostTensor> operands);

// A zero tensor of the type of |op|'s result |index|; emits an error and
// fails when that type is not one the interpreter supports.
mlir::FailureOr<HostTensor> makeResult(mlir::Operation *op, unsigned index = 0);

// Row-major strides of |shape| in elements.
llvm::SmallVector<int64_t, 4> stridesOf(llvm::ArrayRef<int64_t> shape);

// An integer element as the 64 bits a wrapping product multiplies.
inline uint64_t toWrapped(double v) {
  return static_cast<uint64_t>(static_cast<int64_t>(v));
}
// An integer of |dtype| from the 64 bits of a wrapped integer product: the
// low bits the type keeps, cut before they become a double (a product past
// 2^53 rounds as a double, and its low 32 bits with it). An i64 past 2^53
// is rounded, as every i64 a HostTensor holds.
double fromWrapped(DType dtype, uint64_t bits);

// Formats |index| as "[a, b, c]".
std::string formatIndex(llvm::ArrayRef<int64_t> index);

// The multi-index of row-major offset |linear| in |shape|.
llvm::SmallVector<int64_t, 4> unravel(int64_t linear, llvm::ArrayRef<int64_t> shape);

// Calls |fn(a, b)| for every index i of |shape| in row-major order, with
// a = aBase + sum_d i[d] * aStrides[d] and b likewise. Nothing is called
// when |shape| has a zero dimension; a scalar shape calls once.
template <typename Fn>
void forEachStrided(llvm::ArrayRef<int64_t> shape, int64_t aBase,
                    llvm::ArrayRef<int64_t> aStrides, int64_t bBase,
                    llvm::ArrayRef<int64_t> bStrides, Fn fn) {
  int64_t rank = shape.size();
  for (int64_t d : shape)
    if (d == 0)
      return;
  llvm::SmallVector<int64_t, 6> index(rank, 0);
  int64_t a = aBase, b = bBase;
  while (true) {
    fn(a, b);
    // Odometer step: bump the last dimension, carry leftwards.
    int64_t d = rank - 1;
    for (; d >= 0; --d) {
      ++index[d];
      a += aStrides[d];
      b += bStrides[d];
      if (index[d] < shape[d])
        break;
      a -= aStrides[d] * shape[d];
      b -= bStrides[d] * shape[d];
      index[d] = 0;
    }
    if (d < 0)
      return;
  }
}

// Splits |shape| around dimension |dim| into (outer, size, inner) element
// counts: offset(o, k, i) = (o * size + k) * inner + i.
struct AroundDim {
  int64_t outer = 1, size = 1, inner = 1;
};
AroundDim splitAround(llvm::ArrayRef<int64_t> shape, int64_t dim);

} // namespace kiln::reference

#endif // KILN_IR_REFERENCE_SUPPORT_H
