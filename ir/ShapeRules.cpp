//===- ShapeRules.cpp - shape rules of kiln ops ---------------------------===//
//
// See ShapeRules.h. Messages name the attribute or operand at fault, then the
// expectation, then what was found.
//
//===----------------------------------------------------------------------===//

#include "ir/ShapeRules.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallSet.h"
#include "llvm/ADT/StringRef.h"

#include <algorithm>
#include <sstream>

namespace kiln::shape {
namespace {

// Formats a message from stream-able pieces.
template <typename... Args>
ShapeOr fail(const Args &...args) {
  std::ostringstream os;
  (os << ... << args);
  return ShapeOr::error(os.str());
}

// Checks that every entry of |dims| (named |what|) indexes a rank-|rank|
// shape and that none repeats.
std::string checkDims(llvm::StringRef what, llvm::ArrayRef<int64_t> dims,
                      int64_t rank) {
  llvm::SmallSet<int64_t, 8> seen;
  for (int64_t d : dims) {
    if (d < 0 || d >= rank) {
      std::ostringstream os;
      os << what.str() << " " << str(dims) << " must lie in [0, " << rank
         << "), but contains " << d;
      return os.str();
    }
    if (!seen.insert(d).second) {
      std::ostringstream os;
      os << what.str() << " " << str(dims) << " must not repeat a dimension, but "
         << d << " appears twice";
      return os.str();
    }
  }
  return "";
}

std::string checkSize(llvm::StringRef what, llvm::ArrayRef<int64_t> values,
                      size_t expected) {
  if (values.size() == expected)
    return "";
  std::ostringstream os;
  os << what.str() << " must have " << expected << " entries, but has "
     << values.size() << " (" << str(values) << ")";
  return os.str();
}

} // namespace

std::string str(llvm::ArrayRef<int64_t> dims) {
  std::ostringstream os;
  os << "[";
  llvm::interleave(
      dims, [&](int64_t d) { os << d; }, [&] { os << ", "; });
  os << "]";
  return os.str();
}

std::string checkLimits(llvm::ArrayRef<int64_t> shape, int64_t elementBytes) {
  if (shape.size() > kMaxRank)
    return fail("rank ", shape.size(), " is above the limit of ", kMaxRank).error();
  int64_t bytes = std::max<int64_t>(elementBytes, 1);
  for (auto [i, d] : llvm::enumerate(shape)) {
    if (d < 0)
      return fail("dimension ", i, " is ", d, ", expected a size >= 0").error();
    // bytes stays <= kMaxTensorBytes: bytes * d is only formed once it fits.
    if (d != 0 && bytes > kMaxTensorBytes / d)
      return fail("shape ", str(shape), " of ", elementBytes,
                  "-byte elements holds more than 2^48 bytes (256 TiB), the "
                  "most a kiln tensor may hold")
          .error();
    if (d != 0)
      bytes *= d;
  }
  return "";
}

int64_t numElements(llvm::ArrayRef<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

ShapeOr iota(llvm::ArrayRef<int64_t> result, int64_t dimension) {
  if (dimension < 0 || dimension >= static_cast<int64_t>(result.size()))
    return fail("dimension must lie in [0, ", result.size(),
                ") for a result of rank ", result.size(), ", but is ",
                dimension);
  return Shape(result.begin(), result.end());
}

ShapeOr broadcastInDim(llvm::ArrayRef<int64_t> operand,
                       llvm::ArrayRef<int64_t> dims,
                       llvm::ArrayRef<int64_t> result) {
  if (dims.size() != operand.size())
    return fail("broadcast_dimensions must have one entry per operand "
                "dimension (",
                operand.size(), "), but has ", dims.size());
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t d = dims[i];
    if (d < 0 || d >= static_cast<int64_t>(result.size()))
      return fail("broadcast_dimensions ", str(dims), " must lie in [0, ",
                  result.size(), "), but contains ", d);
    if (i > 0 && d <= dims[i - 1])
      return fail("broadcast_dimensions ", str(dims),
                  " must be strictly increasing, but entry ", i, " (", d,
                  ") follows ", dims[i - 1]);
    if (operand[i] != 1 && operand[i] != result[d])
      return fail("operand dimension ", i, " of size ", operand[i],
                  " must be 1 or match result dimension ", d, " of size ",
                  result[d]);
  }
  return Shape(result.begin(), result.end());
}

ShapeOr reshape(llvm::ArrayRef<int64_t> operand,
                llvm::ArrayRef<int64_t> result) {
  if (numElements(operand) != numElements(result))
    return fail("result shape ", str(result), " must have as many elements as "
                "the operand shape ", str(operand), " (", numElements(operand),
                "), but has ", numElements(result));
  return Shape(result.begin(), result.end());
}

ShapeOr transpose(llvm::ArrayRef<int64_t> operand,
                  llvm::ArrayRef<int64_t> permutation) {
  if (std::string e = checkSize("permutation", permutation, operand.size());
      !e.empty())
    return ShapeOr::error(e);
  if (std::string e = checkDims("permutation", permutation, operand.size());
      !e.empty())
    return ShapeOr::error(e);
  Shape r;
  for (int64_t p : permutation)
    r.push_back(operand[p]);
  return r;
}

ShapeOr slice(llvm::ArrayRef<int64_t> operand, llvm::ArrayRef<int64_t> start,
              llvm::ArrayRef<int64_t> limit, llvm::ArrayRef<int64_t> strides) {
  for (auto [name, v] : {std::pair{"start_indices", start},
                         std::pair{"limit_indices", limit},
                         std::pair{"strides", strides}})
    if (std::string e = checkSize(name, v, operand.size()); !e.empty())
      return ShapeOr::error(e);
  Shape r;
  for (size_t d = 0; d < operand.size(); ++d) {
    if (strides[d] < 1)
      return fail("strides must be positive, but dimension ", d, " has ",
                  strides[d]);
    if (start[d] < 0 || start[d] > limit[d] || limit[d] > operand[d])
      return fail("dimension ", d, " needs 0 <= start <= limit <= ", operand[d],
                  ", but start is ", start[d], " and limit is ", limit[d]);
    // Not limit - start + strides - 1: a huge stride would overflow.
    int64_t n = limit[d] - start[d];
    r.push_back(n == 0 ? 0 : (n - 1) / strides[d] + 1);
  }
  return r;
}

ShapeOr concatenate(llvm::ArrayRef<llvm::ArrayRef<int64_t>> inputs,
                    int64_t dimension) {
  if (inputs.empty())
    return fail("needs at least one input");
  int64_t rank = inputs[0].size();
  if (dimension < 0 || dimension >= rank)
    return fail("dimension must lie in [0, ", rank, "), but is ", dimension);
  Shape r(inputs[0].begin(), inputs[0].end());
  for (size_t i = 1; i < inputs.size(); ++i) {
    if (static_cast<int64_t>(inputs[i].size()) != rank)
      return fail("input ", i, " must have rank ", rank, " like input 0, but has "
                  "rank ", inputs[i].size());
    for (int64_t d = 0; d < rank; ++d) {
      if (d == dimension)
        continue;
      if (inputs[i][d] != r[d])
        return fail("input ", i, " must match input 0 in dimension ", d, " (",
                    r[d], "), but has ", inputs[i][d]);
    }
    r[dimension] += inputs[i][dimension];
  }
  return r;
}

ShapeOr pad(llvm::ArrayRef<int64_t> operand, llvm::ArrayRef<int64_t> low,
            llvm::ArrayRef<int64_t> high) {
  for (auto [name, v] : {std::pair{"edge_padding_low", low},
                         std::pair{"edge_padding_high", high}})
    if (std::string e = checkSize(name, v, operand.size()); !e.empty())
      return ShapeOr::error(e);
  Shape r;
  for (size_t d = 0; d < operand.size(); ++d) {
    if (low[d] < 0 || high[d] < 0)
      return fail("padding must be non-negative, but dimension ", d, " has low ",
                  low[d], " and high ", high[d]);
    // No result dimension within the limits is larger (and the sum cannot
    // overflow once both are below it).
    if (low[d] > kMaxTensorBytes || high[d] > kMaxTensorBytes)
      return fail("padding must be at most 2^48, but dimension ", d,
                  " has low ", low[d], " and high ", high[d]);
    r.push_back(operand[d] + low[d] + high[d]);
  }
  return r;
}

ShapeOr reduce(llvm::ArrayRef<int64_t> operand, llvm::ArrayRef<int64_t> dims) {
  if (std::string e = checkDims("dimensions", dims, operand.size()); !e.empty())
    return ShapeOr::error(e);
  Shape r;
  for (size_t d = 0; d < operand.size(); ++d)
    if (!llvm::is_contained(dims, static_cast<int64_t>(d)))
      r.push_back(operand[d]);
  return r;
}

ShapeOr argmax(llvm::ArrayRef<int64_t> operand, int64_t dimension) {
  if (dimension < 0 || dimension >= static_cast<int64_t>(operand.size()))
    return fail("dimension must lie in [0, ", operand.size(), "), but is ",
                dimension);
  if (operand[dimension] == 0)
    return fail("operand dimension ", dimension,
                " must have at least one element to take the argmax of, but "
                "has size 0");
  return reduce(operand, {dimension});
}

ShapeOr dotGeneral(llvm::ArrayRef<int64_t> lhs, llvm::ArrayRef<int64_t> rhs,
                   llvm::ArrayRef<int64_t> lhsBatch,
                   llvm::ArrayRef<int64_t> rhsBatch,
                   llvm::ArrayRef<int64_t> lhsContract,
                   llvm::ArrayRef<int64_t> rhsContract) {
  if (lhsBatch.size() != rhsBatch.size())
    return fail("lhs and rhs must have as many batching dimensions, but have ",
                lhsBatch.size(), " and ", rhsBatch.size());
  if (lhsContract.size() != rhsContract.size())
    return fail("lhs and rhs must have as many contracting dimensions, but "
                "have ",
                lhsContract.size(), " and ", rhsContract.size());
  llvm::SmallVector<int64_t> lhsUsed(lhsBatch), rhsUsed(rhsBatch);
  lhsUsed.append(lhsContract.begin(), lhsContract.end());
  rhsUsed.append(rhsContract.begin(), rhsContract.end());
  if (std::string e = checkDims("lhs batching and contracting dimensions",
                                lhsUsed, lhs.size());
      !e.empty())
    return ShapeOr::error(e);
  if (std::string e = checkDims("rhs batching and contracting dimensions",
                                rhsUsed, rhs.size());
      !e.empty())
    return ShapeOr::error(e);
  for (size_t i = 0; i < lhsBatch.size(); ++i)
    if (lhs[lhsBatch[i]] != rhs[rhsBatch[i]])
      return fail("batching dimension pair ", i, " must have equal sizes, but "
                  "lhs dimension ", lhsBatch[i], " is ", lhs[lhsBatch[i]],
                  " and rhs dimension ", rhsBatch[i], " is ", rhs[rhsBatch[i]]);
  for (size_t i = 0; i < lhsContract.size(); ++i)
    if (lhs[lhsContract[i]] != rhs[rhsContract[i]])
      return fail("contracting dimension pair ", i, " must have equal sizes, "
                  "but lhs dimension ", lhsContract[i], " is ",
                  lhs[lhsContract[i]], " and rhs dimension ", rhsContract[i],
                  " is ", rhs[rhsContract[i]]);
  Shape r;
  for (int64_t d : lhsBatch)
    r.push_back(lhs[d]);
  for (size_t d = 0; d < lhs.size(); ++d)
    if (!llvm::is_contained(lhsUsed, static_cast<int64_t>(d)))
      r.push_back(lhs[d]);
  for (size_t d = 0; d < rhs.size(); ++d)
    if (!llvm::is_contained(rhsUsed, static_cast<int64_t>(d)))
      r.push_back(rhs[d]);
  return r;
}

namespace {
// Output size of a sliding window along one dimension, or -1 when the
// window does not fit; kMaxTensorBytes + 1 stands for any size past the
// limits (no result type can match it).
int64_t windowOutput(int64_t size, int64_t padLow, int64_t padHigh,
                     int64_t window, int64_t stride, int64_t dilation) {
  // In 128 bits: the attributes may be as large as int64_t goes.
  __int128 span = static_cast<__int128>(dilation) * (window - 1) + 1;
  __int128 padded = static_cast<__int128>(size) + padLow + padHigh;
  if (padded < span)
    return -1;
  __int128 out = (padded - span) / stride + 1;
  return out > kMaxTensorBytes ? kMaxTensorBytes + 1 : static_cast<int64_t>(out);
}

std::string checkWindowAttrs(llvm::ArrayRef<int64_t> strides,
                             llvm::ArrayRef<int64_t> padding,
                             llvm::ArrayRef<int64_t> dilation) {
  if (std::string e = checkSize("strides", strides, 2); !e.empty())
    return e;
  if (std::string e = checkSize("padding ([top, bottom, left, right])", padding, 4);
      !e.empty())
    return e;
  if (std::string e = checkSize("dilation", dilation, 2); !e.empty())
    return e;
  for (int64_t s : strides)
    if (s < 1)
      return "strides must be positive, but are " + str(strides);
  for (int64_t d : dilation)
    if (d < 1)
      return "dilation must be positive, but is " + str(dilation);
  for (int64_t p : padding)
    if (p < 0)
      return "padding must be non-negative, but is " + str(padding);
  return "";
}
} // namespace

ShapeOr conv2d(llvm::ArrayRef<int64_t> input, llvm::ArrayRef<int64_t> filter,
               llvm::ArrayRef<int64_t> strides, llvm::ArrayRef<int64_t> padding,
               llvm::ArrayRef<int64_t> dilation, int64_t groups) {
  if (input.size() != 4)
    return fail("input must be rank 4 [N, C, H, W], but has rank ",
                input.size());
  if (filter.size() != 4)
    return fail("filter must be rank 4 [O, C/groups, KH, KW], but has rank ",
                filter.size());
  if (std::string e = checkWindowAttrs(strides, padding, dilation); !e.empty())
    return ShapeOr::error(e);
  if (groups < 1)
    return fail("groups must be positive, but is ", groups);
  if (input[1] % groups != 0 || filter[0] % groups != 0)
    return fail("input channels (", input[1], ") and output channels (",
                filter[0], ") must be divisible by groups (", groups, ")");
  if (input[1] / groups != filter[1])
    return fail("filter dimension 1 must be input channels / groups (",
                input[1] / groups, "), but is ", filter[1]);
  // A zero-sized kernel would give an output larger than the input.
  if (filter[2] < 1 || filter[3] < 1)
    return fail("the filter window must be at least 1x1, but is ",
                str(filter.drop_front(2)));
  int64_t oh = windowOutput(input[2], padding[0], padding[1], filter[2],
                            strides[0], dilation[0]);
  int64_t ow = windowOutput(input[3], padding[2], padding[3], filter[3],
                            strides[1], dilation[1]);
  if (oh < 1 || ow < 1)
    return fail("the filter window ", str(filter.drop_front(2)),
                " (dilation ", str(dilation), ") must fit the padded input ",
                str(input.drop_front(2)), " with padding ", str(padding));
  return Shape{input[0], filter[0], oh, ow};
}

ShapeOr pool2d(llvm::ArrayRef<int64_t> input, llvm::ArrayRef<int64_t> window,
               llvm::ArrayRef<int64_t> strides, llvm::ArrayRef<int64_t> padding) {
  if (input.size() != 4)
    return fail("input must be rank 4 [N, C, H, W], but has rank ",
                input.size());
  if (std::string e = checkSize("window", window, 2); !e.empty())
    return ShapeOr::error(e);
  int64_t one[2] = {1, 1};
  if (std::string e = checkWindowAttrs(strides, padding, one); !e.empty())
    return ShapeOr::error(e);
  for (int64_t w : window)
    if (w < 1)
      return fail("window must be positive, but is ", str(window));
  if (padding[0] >= window[0] || padding[1] >= window[0] ||
      padding[2] >= window[1] || padding[3] >= window[1])
    return fail("padding ", str(padding), " must be smaller than the window ",
                str(window));
  int64_t oh = windowOutput(input[2], padding[0], padding[1], window[0],
                            strides[0], 1);
  int64_t ow = windowOutput(input[3], padding[2], padding[3], window[1],
                            strides[1], 1);
  if (oh < 1 || ow < 1)
    return fail("the window ", str(window), " must fit the padded input ",
                str(input.drop_front(2)));
  return Shape{input[0], input[1], oh, ow};
}

ShapeOr alongDimension(llvm::ArrayRef<int64_t> operand, int64_t dimension) {
  if (dimension < 0 || dimension >= static_cast<int64_t>(operand.size()))
    return fail("dimension must lie in [0, ", operand.size(), "), but is ",
                dimension);
  return Shape(operand.begin(), operand.end());
}

ShapeOr layerNorm(llvm::ArrayRef<int64_t> input, llvm::ArrayRef<int64_t> scale,
                  int64_t axis) {
  if (axis < 0 || axis >= static_cast<int64_t>(input.size()))
    return fail("axis must lie in [0, ", input.size(), "), but is ", axis);
  llvm::ArrayRef<int64_t> normalized = input.drop_front(axis);
  if (scale != normalized)
    return fail("scale and bias must have the normalized shape ",
                str(normalized), ", but have ", str(scale));
  return Shape(input.begin(), input.end());
}

ShapeOr gather(llvm::ArrayRef<int64_t> table, llvm::ArrayRef<int64_t> indices) {
  if (table.empty())
    return fail("table must have rank at least 1, but is a scalar");
  Shape r(indices.begin(), indices.end());
  r.append(table.begin() + 1, table.end());
  return r;
}

ShapeOr scatterAdd(llvm::ArrayRef<int64_t> operand,
                   llvm::ArrayRef<int64_t> indices,
                   llvm::ArrayRef<int64_t> updates) {
  if (operand.empty())
    return fail("operand must have rank at least 1, but is a scalar");
  ShapeOr expected = gather(operand, indices);
  if (updates != llvm::ArrayRef<int64_t>(expected.shape()))
    return fail("updates must have shape indices ++ operand[1:] = ",
                str(expected.shape()), ", but have ", str(updates));
  return Shape(operand.begin(), operand.end());
}

ShapeOr softmaxCrossEntropy(llvm::ArrayRef<int64_t> logits,
                            llvm::ArrayRef<int64_t> labels) {
  if (logits.size() != 2)
    return fail("logits must be rank 2 [N, C], but have rank ", logits.size());
  if (labels.size() != 1 || labels[0] != logits[0])
    return fail("labels must have shape [", logits[0], "], but have ",
                str(labels));
  if (logits[1] == 0)
    return fail("logits must have at least one class, but dimension 1 has "
                "size 0");
  return Shape{logits[0]};
}

ShapeOr attention(llvm::ArrayRef<int64_t> q, llvm::ArrayRef<int64_t> k,
                  llvm::ArrayRef<int64_t> v) {
  if (q.size() != 4)
    return fail("q must be rank 4 [B, H, Tq, D], but has rank ", q.size());
  if (k.size() != 4)
    return fail("k must be rank 4 [B, H, Tk, D], but has rank ", k.size());
  if (v.size() != 4)
    return fail("v must be rank 4 [B, H, Tk, Dv], but has rank ", v.size());
  if (k[0] != q[0] || k[1] != q[1] || k[3] != q[3])
    return fail("k must have q's batch, heads and head size [", q[0], ", ",
                q[1], ", Tk, ", q[3], "], but has shape ", str(k));
  if (v[0] != q[0] || v[1] != q[1] || v[2] != k[2])
    return fail("v must have q's batch and heads and k's length [", q[0], ", ",
                q[1], ", ", k[2], ", Dv], but has shape ", str(v));
  if (k[2] == 0)
    return fail("k and v must hold at least one key, but Tk is 0");
  return Shape{q[0], q[1], q[2], v[3]};
}

ShapeOr shardOf(llvm::ArrayRef<int64_t> operand, llvm::ArrayRef<int64_t> result,
                int64_t dimension) {
  if (dimension < 0 || dimension >= static_cast<int64_t>(operand.size()))
    return fail("dimension must lie in [0, ", operand.size(), "), but is ",
                dimension);
  if (operand.size() != result.size())
    return fail("the full and shard shapes must have the same rank, but are ",
                str(operand), " and ", str(result));
  for (size_t d = 0; d < operand.size(); ++d) {
    if (static_cast<int64_t>(d) == dimension) {
      if (result[d] == 0 || operand[d] % result[d] != 0)
        return fail("the shard size along dimension ", d, " (", result[d],
                    ") must divide the full size (", operand[d], ")");
    } else if (operand[d] != result[d]) {
      return fail("the full and shard shapes must agree outside dimension ",
                  dimension, ", but are ", str(operand), " and ", str(result));
    }
  }
  return Shape(result.begin(), result.end());
}

ShapeOr rankGroups(llvm::ArrayRef<int64_t> groupsShape,
                   llvm::ArrayRef<int64_t> ranks) {
  if (groupsShape.size() != 2)
    return fail("groups must be a 2-D tensor [groups, ranks per group], but "
                "has shape ",
                str(groupsShape));
  llvm::SmallSet<int64_t, 16> seen;
  for (int64_t r : ranks) {
    if (r < 0)
      return fail("groups must hold non-negative ranks, but hold ", r);
    if (!seen.insert(r).second)
      return fail("groups must name each rank at most once, but rank ", r,
                  " appears twice");
  }
  return Shape(groupsShape.begin(), groupsShape.end());
}

} // namespace kiln::shape
