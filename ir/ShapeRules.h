//===- ShapeRules.h - shape rules of kiln ops ---------------------*- C++ -*-===//
//
// The shape rule of every kiln op that has one, as a free function on plain
// shapes. Verifiers, result-type inference, the graph-file importer and the
// model builders all call these, so a rule is written once. Each returns the
// result shape, or a message that says what was expected and what was found.
// No MLIR types here: the rules are unit-tested on their own.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_IR_SHAPERULES_H
#define KILN_IR_SHAPERULES_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"

#include <cstdint>
#include <string>

namespace kiln::shape {

using Shape = llvm::SmallVector<int64_t, 4>;

// A result shape or the reason there is none.
class ShapeOr {
public:
  ShapeOr(Shape shape) : shape_(std::move(shape)) {}
  static ShapeOr error(std::string message) {
    ShapeOr r{Shape{}};
    r.error_ = std::move(message);
    r.ok_ = false;
    return r;
  }
  bool ok() const { return ok_; }
  const Shape &shape() const { return shape_; }
  const std::string &error() const { return error_; }

private:
  Shape shape_;
  std::string error_;
  bool ok_ = true;
};

// Formats |dims| as "[a, b, c]".
std::string str(llvm::ArrayRef<int64_t> dims);

// The limits of a kiln tensor, which the dialect's tensor types and the
// graph-file importer keep: at most kMaxRank dimensions, and its nonzero
// dimensions multiplied together, times the bytes of an element, at most
// kMaxTensorBytes (256 TiB). Within them every element count and byte size
// fits in int64_t many times over, whichever order the dimensions are
// multiplied in.
constexpr size_t kMaxRank = 64;
constexpr int64_t kMaxTensorBytes = int64_t(1) << 48;

// Why a tensor of |shape| with elements of |elementBytes| bytes breaks those
// limits (or has a negative dimension); empty when it keeps them.
std::string checkLimits(llvm::ArrayRef<int64_t> shape, int64_t elementBytes);

// Number of elements of |shape| (1 for a scalar); |shape| within the limits.
int64_t numElements(llvm::ArrayRef<int64_t> shape);

ShapeOr iota(llvm::ArrayRef<int64_t> result, int64_t dimension);
ShapeOr broadcastInDim(llvm::ArrayRef<int64_t> operand,
                       llvm::ArrayRef<int64_t> dims,
                       llvm::ArrayRef<int64_t> result);
ShapeOr reshape(llvm::ArrayRef<int64_t> operand, llvm::ArrayRef<int64_t> result);
ShapeOr transpose(llvm::ArrayRef<int64_t> operand,
                  llvm::ArrayRef<int64_t> permutation);
ShapeOr slice(llvm::ArrayRef<int64_t> operand, llvm::ArrayRef<int64_t> start,
              llvm::ArrayRef<int64_t> limit, llvm::ArrayRef<int64_t> strides);
ShapeOr concatenate(llvm::ArrayRef<llvm::ArrayRef<int64_t>> inputs,
                    int64_t dimension);
ShapeOr pad(llvm::ArrayRef<int64_t> operand, llvm::ArrayRef<int64_t> low,
            llvm::ArrayRef<int64_t> high);
ShapeOr reduce(llvm::ArrayRef<int64_t> operand, llvm::ArrayRef<int64_t> dims);
ShapeOr argmax(llvm::ArrayRef<int64_t> operand, int64_t dimension);
ShapeOr dotGeneral(llvm::ArrayRef<int64_t> lhs, llvm::ArrayRef<int64_t> rhs,
                   llvm::ArrayRef<int64_t> lhsBatch,
                   llvm::ArrayRef<int64_t> rhsBatch,
                   llvm::ArrayRef<int64_t> lhsContract,
                   llvm::ArrayRef<int64_t> rhsContract);
ShapeOr conv2d(llvm::ArrayRef<int64_t> input, llvm::ArrayRef<int64_t> filter,
               llvm::ArrayRef<int64_t> strides, llvm::ArrayRef<int64_t> padding,
               llvm::ArrayRef<int64_t> dilation, int64_t groups);
ShapeOr pool2d(llvm::ArrayRef<int64_t> input, llvm::ArrayRef<int64_t> window,
               llvm::ArrayRef<int64_t> strides, llvm::ArrayRef<int64_t> padding);
ShapeOr alongDimension(llvm::ArrayRef<int64_t> operand, int64_t dimension);
ShapeOr layerNorm(llvm::ArrayRef<int64_t> input, llvm::ArrayRef<int64_t> scale,
                  int64_t axis);
ShapeOr gather(llvm::ArrayRef<int64_t> table, llvm::ArrayRef<int64_t> indices);
ShapeOr scatterAdd(llvm::ArrayRef<int64_t> operand,
                   llvm::ArrayRef<int64_t> indices,
                   llvm::ArrayRef<int64_t> updates);
ShapeOr softmaxCrossEntropy(llvm::ArrayRef<int64_t> logits,
                            llvm::ArrayRef<int64_t> labels);
// kiln.attention: q [B, H, Tq, D], k [B, H, Tk, D] and v [B, H, Tk, Dv] with
// Tk >= 1 give out [B, H, Tq, Dv] (lse is out's shape without the last
// dimension).
ShapeOr attention(llvm::ArrayRef<int64_t> q, llvm::ArrayRef<int64_t> k,
                  llvm::ArrayRef<int64_t> v);
// |result| is one of several equal shards of |operand| along |dimension|.
ShapeOr shardOf(llvm::ArrayRef<int64_t> operand, llvm::ArrayRef<int64_t> result,
                int64_t dimension);
// |groups| is a [G, S] matrix of distinct non-negative ranks.
ShapeOr rankGroups(llvm::ArrayRef<int64_t> groupsShape,
                   llvm::ArrayRef<int64_t> ranks);

} // namespace kiln::shape

#endif // KILN_IR_SHAPERULES_H
