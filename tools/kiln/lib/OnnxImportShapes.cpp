//===- OnnxImportShapes.cpp - slicing, padding, selection ------------------===//
//
// The importer's data-movement and selection ops (OnnxImporter.h): Slice,
// Split, Pad, Expand, Where and the comparisons, on kiln values; and their
// static forms (with ConstantOfShape, Range and Transpose), evaluated at
// import, which the TorchScript exporter writes to compute a Pad's pads or
// an Expand's shape.
//
//===----------------------------------------------------------------------===//

#include "tools/kiln/lib/OnnxImporter.h"

#include "mlir/Dialect/Utils/IndexingUtils.h"

#include "llvm/ADT/STLExtras.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>

namespace kiln::cli::onnx_import {

namespace {

std::vector<int64_t> rowMajorStrides(llvm::ArrayRef<int64_t> dims) {
  std::vector<int64_t> strides(dims.size(), 1);
  for (int64_t d = static_cast<int64_t>(dims.size()) - 2; d >= 0; --d)
    strides[d] = strides[d + 1] * dims[d + 1];
  return strides;
}

// |s| read as broadcast to |dims|: the element output index |index|
// reads, through s's stride for each output dimension (0 where s has no
// such dimension or has it at size 1), computed once.
class BroadcastReader {
public:
  BroadcastReader(const Static &s, llvm::ArrayRef<int64_t> dims)
      : s_(s), strides_(dims.size(), 0) {
    std::vector<int64_t> own = rowMajorStrides(s.dims);
    size_t offset = dims.size() - s.dims.size();
    for (size_t d = 0; d < s.dims.size(); ++d)
      strides_[offset + d] = s.dims[d] == 1 ? 0 : own[d];
  }
  double operator()(llvm::ArrayRef<int64_t> index) const {
    int64_t flat = 0;
    for (size_t d = 0; d < strides_.size(); ++d)
      flat += index[d] * strides_[d];
    return s_.values[flat];
  }

private:
  const Static &s_;
  std::vector<int64_t> strides_;
};

// Calls |f| with each multi-index of |dims| in row-major order.
void forEachIndex(llvm::ArrayRef<int64_t> dims,
                  const std::function<void(llvm::ArrayRef<int64_t>)> &f) {
  int64_t n = product(dims);
  std::vector<int64_t> index(dims.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    f(index);
    for (int64_t d = static_cast<int64_t>(dims.size()) - 1; d >= 0; --d) {
      if (++index[d] < dims[d])
        break;
      index[d] = 0;
    }
  }
}

// One axis of an ONNX Slice, its starts and ends clamped as the operator
// says: the result takes start, start + step, ... while before end.
struct SliceAxis {
  int64_t start = 0, step = 1, count = 0;
};

SliceAxis clampSlice(int64_t dim, double startValue, double endValue, int64_t step) {
  int64_t start = toIndex(startValue), end = toIndex(endValue);
  if (start < 0)
    start += dim;
  if (end < 0)
    end += dim;
  SliceAxis axis;
  axis.step = step;
  if (step > 0) {
    start = std::clamp<int64_t>(start, 0, dim);
    end = std::clamp<int64_t>(end, 0, dim);
    axis.count = end > start ? (end - start + step - 1) / step : 0;
  } else {
    start = std::clamp<int64_t>(start, 0, dim - 1);
    end = std::clamp<int64_t>(end, -1, dim - 1);
    axis.count = start > end ? (start - end - step - 1) / -step : 0;
  }
  axis.start = start;
  return axis;
}

} // namespace

mlir::Value Importer::sliceAxis(mlir::Value x, int64_t axis, int64_t start,
                                int64_t limit, int64_t stride,
                                const std::string &suffix) {
  int64_t rank = shape(x).size();
  llvm::SmallVector<int64_t> starts(rank, 0), limits(shape(x).begin(), shape(x).end()),
      strides(rank, 1), dims(shape(x).begin(), shape(x).end());
  starts[axis] = start;
  limits[axis] = limit;
  strides[axis] = stride;
  dims[axis] = (limit - start + stride - 1) / stride;
  if (start == 0 && limit == shape(x)[axis] && stride == 1)
    return x;
  return b_.create<kiln::SliceOp>(loc(suffix), type(dims, element(x)), x, arr(starts),
                                  arr(limits), arr(strides));
}

mlir::Value Importer::gatherAlong(mlir::Value table, int64_t axis, mlir::Value indices,
                                  const std::string &suffix) {
  // Move |axis| to the front, gather, and put the indices' dimensions where
  // |axis| was. The gather's gradient is a scatter-add of the same rows.
  llvm::ArrayRef<int64_t> st = shape(table);
  int64_t rank = st.size();
  llvm::SmallVector<int64_t> perm = {axis}, front = {st[axis]};
  for (int64_t d = 0; d < rank; ++d)
    if (d != axis) {
      perm.push_back(d);
      front.push_back(st[d]);
    }
  mlir::Value moved = table;
  if (axis != 0)
    moved = b_.create<kiln::TransposeOp>(loc(suffix + ".front"),
                                         type(front, element(table)), table, arr(perm));
  llvm::SmallVector<int64_t> dims(shape(indices).begin(), shape(indices).end());
  dims.append(front.begin() + 1, front.end());
  mlir::Value y = b_.create<kiln::GatherOp>(loc(axis ? suffix + ".gather" : suffix),
                                            type(dims, element(table)), moved, indices);
  if (axis == 0)
    return y;
  // y is [indices..., data before axis..., data after axis...].
  int64_t k = shape(indices).size();
  llvm::SmallVector<int64_t> order, result;
  for (int64_t d = 0; d < axis; ++d)
    order.push_back(k + d);
  for (int64_t d = 0; d < k; ++d)
    order.push_back(d);
  for (int64_t d = axis; d < rank - 1; ++d)
    order.push_back(k + d);
  for (int64_t o : order)
    result.push_back(dims[o]);
  return b_.create<kiln::TransposeOp>(loc(suffix), type(result, element(table)), y,
                                      arr(order));
}

mlir::Value Importer::gatherAxis(mlir::Value x, int64_t axis,
                                 llvm::ArrayRef<int64_t> rows, const std::string &suffix) {
  Static order;
  order.dataType = int32_t(DataType::Int32);
  order.dims = {int64_t(rows.size())};
  order.values.assign(rows.begin(), rows.end());
  return gatherAlong(x, axis, constant(order, nodeName_ + suffix + ".rows"), suffix);
}

mlir::Value Importer::reverseAxis(mlir::Value x, int64_t axis, const std::string &suffix) {
  llvm::SmallVector<int64_t> rows;
  for (int64_t i = shape(x)[axis] - 1; i >= 0; --i)
    rows.push_back(i);
  return gatherAxis(x, axis, rows, suffix);
}

// Slice: starts, ends, axes and steps are inputs 1 to 4 from opset 10,
// attributes before (no steps). A negative step takes the elements in
// reverse order.
bool Importer::slice() {
  mlir::Value x;
  if (!value(0, x))
    return false;
  int64_t rank = shape(x).size();
  std::vector<double> starts, ends, axes, steps;
  if (opset_ >= 10) {
    for (size_t i = 1; i <= 4; ++i) {
      if (!hasInput(i))
        continue;
      const Static *s = staticInput(i);
      if (!s)
        return false;
      (i == 1 ? starts : i == 2 ? ends : i == 3 ? axes : steps) = s->values;
    }
  } else {
    for (const char *name : {"starts", "ends", "axes"})
      if (std::optional<std::vector<int64_t>> v = intsAttr(name))
        (name[0] == 's' ? starts : name[0] == 'e' ? ends : axes).assign(v->begin(),
                                                                          v->end());
  }
  if (starts.size() != ends.size())
    return fail("starts has " + std::to_string(starts.size()) + " values and ends " +
                std::to_string(ends.size()));
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i)
      axes.push_back(double(i));
  if (steps.empty())
    steps.assign(starts.size(), 1.0);
  if (axes.size() != starts.size() || steps.size() != starts.size())
    return fail("starts, ends, axes and steps have different lengths");
  mlir::Value y = x;
  std::set<int64_t> seen;
  for (size_t i = 0; i < starts.size(); ++i) {
    int64_t axis = toIndex(axes[i]), step = toIndex(steps[i]);
    if (!normalizeAxis(axis, rank, "axis"))
      return false;
    if (!seen.insert(axis).second)
      return fail("slices axis " + std::to_string(axis) + " twice");
    if (step == 0)
      return fail("step is 0 on axis " + std::to_string(axis));
    int64_t dim = shape(x)[axis];
    SliceAxis s = clampSlice(dim, starts[i], ends[i], step);
    if (s.count == 0)
      return fail("takes no elements of axis " + std::to_string(axis) + " (size " +
                  std::to_string(dim) + "): kiln tensors are not empty");
    std::string suffix = ".axis" + std::to_string(axis);
    if (step > 0) {
      y = sliceAxis(y, axis, s.start, s.start + (s.count - 1) * step + 1, step, suffix);
    } else {
      int64_t low = s.start + (s.count - 1) * step;
      y = sliceAxis(y, axis, low, s.start + 1, -step, suffix);
      y = reverseAxis(y, axis, suffix + ".reverse");
    }
  }
  setOutput(0, y);
  return true;
}

// Split along an axis into parts of the sizes input 1 gives (opset 13
// on; attribute 'split' before), or into equal parts, one per output
// (opset 18: num_outputs parts of ceil(size / num_outputs), the last
// smaller).
bool Importer::split() {
  mlir::Value x;
  if (!value(0, x))
    return false;
  int64_t axis;
  if (!axisOf(x, 0, axis))
    return false;
  int64_t dim = shape(x)[axis];
  int64_t outputs = node_->outputs.size();
  std::vector<int64_t> sizes;
  if (opset_ >= 13 && hasInput(1)) {
    const Static *s = staticInput(1);
    if (!s)
      return false;
    for (double v : s->values)
      sizes.push_back(toIndex(v));
  } else if (std::optional<std::vector<int64_t>> v = intsAttr("split")) {
    sizes = *v;
  } else {
    int64_t parts = intAttr("num_outputs", outputs);
    if (parts != outputs)
      return fail("num_outputs is " + std::to_string(parts) + " but it has " +
                  std::to_string(outputs) + " outputs");
    int64_t size = (dim + parts - 1) / parts;
    for (int64_t i = 0, left = dim; i < parts; ++i, left -= size)
      sizes.push_back(std::min(size, left));
  }
  if (static_cast<int64_t>(sizes.size()) != outputs)
    return fail("splits into " + std::to_string(sizes.size()) + " parts but has " +
                std::to_string(outputs) + " outputs");
  std::vector<mlir::Value> parts;
  if (!splitParts(x, axis, sizes, parts))
    return false;
  for (int64_t i = 0; i < outputs; ++i)
    setOutput(i, parts[i]);
  return true;
}

bool Importer::splitParts(mlir::Value x, int64_t axis, const std::vector<int64_t> &sizes,
                          std::vector<mlir::Value> &parts) {
  int64_t dim = shape(x)[axis];
  if (std::accumulate(sizes.begin(), sizes.end(), int64_t(0)) != dim ||
      llvm::any_of(sizes, [](int64_t s) { return s <= 0; }))
    return fail("split sizes " + shapeText(sizes) + " do not cover axis " +
                std::to_string(axis) + " of size " + std::to_string(dim) +
                " with parts of at least one element");
  for (int64_t i = 0, start = 0; i < static_cast<int64_t>(sizes.size()); start += sizes[i++])
    parts.push_back(sliceAxis(x, axis, start, start + sizes[i], 1, "." + std::to_string(i)));
  return true;
}

// SplitToSequence: the parts of Split (sizes from input 1, a scalar for
// equal parts of that size with a smaller last one, or none for parts of
// one element, dropped when keepdims is 0) kept as a sequence that
// SequenceAt reads with a static index.
bool Importer::splitToSequence() {
  mlir::Value x;
  if (!value(0, x))
    return false;
  int64_t axis;
  if (!axisOf(x, 0, axis))
    return false;
  int64_t dim = shape(x)[axis];
  std::vector<int64_t> sizes;
  bool keep = true;
  if (hasInput(1)) {
    const Static *s = staticInput(1);
    if (!s)
      return false;
    if (s->dims.empty()) {
      int64_t size = toIndex(s->values.at(0));
      if (size <= 0)
        return fail("split is " + std::to_string(size) + ": expected a positive size");
      for (int64_t left = dim; left > 0; left -= size)
        sizes.push_back(std::min(size, left));
    } else {
      for (double v : s->values)
        sizes.push_back(toIndex(v));
    }
  } else {
    sizes.assign(dim, 1);
    keep = intAttr("keepdims", 1) != 0;
  }
  std::vector<mlir::Value> parts;
  if (!splitParts(x, axis, sizes, parts))
    return false;
  if (!keep)
    for (size_t i = 0; i < parts.size(); ++i) {
      llvm::SmallVector<int64_t> dims(shape(parts[i]).begin(), shape(parts[i]).end());
      dims.erase(dims.begin() + axis);
      parts[i] = g_.reshape(nodeName_ + "." + std::to_string(i) + ".squeeze", parts[i], dims);
    }
  sequences_[node_->outputs[0]] = std::move(parts);
  return true;
}

bool Importer::sequenceAt() {
  std::vector<mlir::Value> seq;
  int64_t i;
  if (!sequenceInput(0, seq))
    return false;
  if (!hasInput(1))
    return fail("input 1 (the position) is missing");
  if (!sequencePosition(1, seq.size(), /*end=*/false, 0, i))
    return false;
  setOutput(0, seq[i]);
  return true;
}

// Pad: pads (begins of each axis, then ends) and constant_value are inputs
// 1 and 2 from opset 11 (axes, input 3, from opset 18), attributes before.
// Negative pads crop. Modes constant, reflect (mirror without the edge),
// edge (repeat it) and wrap (the other end's elements).
bool Importer::pad() {
  mlir::Value x;
  if (!value(0, x))
    return false;
  int64_t rank = shape(x).size();
  std::string mode = stringAttr("mode", "constant");
  if (mode != "constant" && mode != "reflect" && mode != "edge" && mode != "wrap")
    return fail("mode is '" + mode + "': expected constant, reflect, edge or wrap");
  std::vector<int64_t> pads;
  double fill = 0.0;
  std::vector<int64_t> axes;
  if (opset_ >= 11) {
    const Static *p = staticInput(1);
    if (!p)
      return false;
    for (double v : p->values)
      pads.push_back(toIndex(v));
    if (hasInput(2)) {
      const Static *c = staticInput(2);
      if (!c)
        return false;
      if (c->values.size() != 1)
        return fail("constant_value is not a scalar");
      fill = c->values[0];
    }
    if (hasInput(3)) {
      const Static *a = staticInput(3);
      if (!a)
        return false;
      for (double v : a->values) {
        int64_t axis = toIndex(v);
        if (!normalizeAxis(axis, rank, "axis"))
          return false;
        axes.push_back(axis);
      }
    }
  } else {
    pads = intsAttr("pads").value_or(std::vector<int64_t>{});
    fill = floatAttr("value", 0.0);
  }
  if (axes.empty())
    for (int64_t d = 0; d < rank; ++d)
      axes.push_back(d);
  int64_t n = axes.size();
  if (static_cast<int64_t>(pads.size()) != 2 * n)
    return fail("pads has " + std::to_string(pads.size()) + " values: expected " +
                std::to_string(2 * n) + " (a begin and an end for each of " +
                std::to_string(n) + " axes)");
  llvm::SmallVector<int64_t> low(rank, 0), high(rank, 0);
  for (int64_t i = 0; i < n; ++i) {
    low[axes[i]] = pads[i];
    high[axes[i]] = pads[n + i];
  }
  for (int64_t d = 0; d < rank; ++d)
    if (std::abs(low[d]) > kMaxExtent || std::abs(high[d]) > kMaxExtent ||
        shape(x)[d] + low[d] + high[d] > kMaxExtent)
      return fail("pads axis " + std::to_string(d) + " by " +
                  std::to_string(low[d]) + " and " + std::to_string(high[d]) +
                  ": expected a padded extent of at most 2^31");
  mlir::Value y = x;
  // Crops first.
  for (int64_t d = 0; d < rank; ++d) {
    int64_t from = std::max<int64_t>(0, -low[d]);
    int64_t to = shape(y)[d] - std::max<int64_t>(0, -high[d]);
    if (to <= from)
      return fail("crops all of axis " + std::to_string(d));
    y = sliceAxis(y, d, from, to, 1, ".crop" + std::to_string(d));
    low[d] = std::max<int64_t>(0, low[d]);
    high[d] = std::max<int64_t>(0, high[d]);
  }
  if (mode == "constant") {
    if (llvm::any_of(low, [](int64_t p) { return p > 0; }) ||
        llvm::any_of(high, [](int64_t p) { return p > 0; })) {
      llvm::SmallVector<int64_t> dims(shape(y).begin(), shape(y).end());
      for (int64_t d = 0; d < rank; ++d)
        dims[d] += low[d] + high[d];
      y = b_.create<kiln::PadOp>(loc(), type(dims, element(y)), y, arr(low), arr(high),
                                 b_.getF64FloatAttr(fill));
    }
    setOutput(0, y);
    return true;
  }
  // The other modes: along each axis, the pieces in order, concatenated.
  for (int64_t d = 0; d < rank; ++d) {
    if (low[d] == 0 && high[d] == 0)
      continue;
    int64_t dim = shape(y)[d];
    if (mode == "reflect" && (low[d] >= dim || high[d] >= dim))
      return fail("reflects " + std::to_string(std::max(low[d], high[d])) +
                  " elements of axis " + std::to_string(d) + " of size " +
                  std::to_string(dim) + ": expected fewer than the size");
    if (mode == "wrap" && (low[d] > dim || high[d] > dim))
      return fail("wraps more elements than axis " + std::to_string(d) + " has");
    std::string axisName = ".pad" + std::to_string(d);
    llvm::SmallVector<mlir::Value> pieces;
    auto row = [&](int64_t i, const std::string &side) {
      return sliceAxis(y, d, i, i + 1, 1, axisName + side + std::to_string(i));
    };
    // Edge: the edge row broadcast to |count| rows (one op however wide
    // the pad).
    auto edge = [&](int64_t i, int64_t count, const std::string &side) {
      mlir::Value r = row(i, side);
      if (count == 1)
        return r;
      llvm::SmallVector<int64_t> rowShape, kept,
          out(shape(y).begin(), shape(y).end());
      for (int64_t k = 0; k < rank; ++k)
        if (k != d) {
          rowShape.push_back(shape(y)[k]);
          kept.push_back(k);
        }
      out[d] = count;
      mlir::Value flat =
          g_.reshape(nodeName_ + axisName + side + ".row", r, rowShape);
      return g_.broadcast(nodeName_ + axisName + side, flat, kept, out);
    };
    if (mode == "wrap") {
      if (low[d])
        pieces.push_back(sliceAxis(y, d, dim - low[d], dim, 1, axisName + ".low"));
      pieces.push_back(y);
      if (high[d])
        pieces.push_back(sliceAxis(y, d, 0, high[d], 1, axisName + ".high"));
    } else if (mode == "edge") {
      if (low[d])
        pieces.push_back(edge(0, low[d], ".low"));
      pieces.push_back(y);
      if (high[d])
        pieces.push_back(edge(dim - 1, high[d], ".high"));
    } else {
      for (int64_t i = low[d]; i >= 1; --i)
        pieces.push_back(row(i, ".low"));
      pieces.push_back(y);
      for (int64_t i = 1; i <= high[d]; ++i)
        pieces.push_back(row(dim - 1 - i, ".high"));
    }
    llvm::SmallVector<int64_t> dims(shape(y).begin(), shape(y).end());
    dims[d] += low[d] + high[d];
    y = b_.create<kiln::ConcatenateOp>(loc(axisName), type(dims, element(y)), pieces,
                                       b_.getI64IntegerAttr(d));
  }
  setOutput(0, y);
  return true;
}

// Expand: X broadcast with the static shape (NumPy rules: either may have
// the larger rank, a 1 in the shape keeps X's dimension).
bool Importer::expand() {
  mlir::Value x;
  if (!value(0, x))
    return false;
  const Static *s = staticInput(1);
  if (!s)
    return false;
  std::vector<int64_t> target;
  for (double v : s->values)
    target.push_back(toIndex(v));
  llvm::SmallVector<int64_t> dims;
  if (!broadcastShapes(shape(x), target, dims))
    return false;
  setOutput(0, broadcastTo(x, dims));
  return true;
}

// Where: X where the condition holds, else Y, the three broadcast together.
bool Importer::where() {
  mlir::Value c, a, y;
  if (!value(0, c) || !value(1, a) || !value(2, y))
    return false;
  if (!element(c).isInteger(1))
    return fail("its condition is not BOOL");
  if (element(a) != element(y))
    return fail("X and Y have different element types");
  llvm::SmallVector<int64_t> dims, both;
  if (!broadcastShapes(shape(a), shape(y), both) ||
      !broadcastShapes(shape(c), both, dims))
    return false;
  setOutput(0, b_.create<kiln::SelectOp>(loc(), type(dims, element(a)),
                                         broadcastTo(c, dims), broadcastTo(a, dims),
                                         broadcastTo(y, dims)));
  return true;
}

static kiln::CompareDirection compareDirection(const std::string &op) {
  return op == "Equal"          ? kiln::CompareDirection::eq
         : op == "Less"         ? kiln::CompareDirection::lt
         : op == "Greater"      ? kiln::CompareDirection::gt
         : op == "LessOrEqual"  ? kiln::CompareDirection::le
                                : kiln::CompareDirection::ge;
}

bool Importer::compare(const std::string &op) {
  mlir::Value a, c;
  if (!value(0, a) || !value(1, c))
    return false;
  if (element(a) != element(c))
    return fail("its inputs have different element types");
  llvm::SmallVector<int64_t> dims;
  if (!broadcastShapes(shape(a), shape(c), dims))
    return false;
  setOutput(0, b_.create<kiln::CompareOp>(loc(), type(dims, b_.getI1Type()),
                                          compareDirection(op), broadcastTo(a, dims),
                                          broadcastTo(c, dims)));
  return true;
}

// Trilu of a kiln value: the kept triangle through a select with a
// constant mask (the diagonal |k|, input 1, static).
bool Importer::trilu() {
  mlir::Value x;
  if (!value(0, x))
    return false;
  int64_t rank = shape(x).size();
  if (rank < 2)
    return fail("its input has rank " + std::to_string(rank) + ": expected 2 or more");
  int64_t k = 0;
  if (hasInput(1)) {
    const Static *kv = staticInput(1);
    if (!kv)
      return false;
    k = toIndex(kv->values.at(0));
  }
  bool upper = intAttr("upper", 1) != 0;
  int64_t rows = shape(x)[rank - 2], cols = shape(x)[rank - 1];
  Static mask;
  mask.dataType = int32_t(DataType::Bool);
  mask.dims = {rows, cols};
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      mask.values.push_back((upper ? c - r >= k : c - r <= k) ? 1.0 : 0.0);
  mlir::Value kept = broadcastTo(constant(mask, nodeName_ + ".mask"), shape(x));
  setOutput(0, b_.create<kiln::SelectOp>(loc(), x.getType(), kept, x,
                                         splat(0.0, element(x), shape(x))));
  return true;
}

// Not, And, Or and Xor of BOOL tensors (broadcast): a compare or a select.
bool Importer::logical(const std::string &op) {
  mlir::Value a, c;
  if (!value(0, a) || (op != "Not" && !value(1, c)))
    return false;
  if (!element(a).isInteger(1) || (c && !element(c).isInteger(1)))
    return fail("its inputs are not BOOL");
  auto boolean = [&](bool v, llvm::ArrayRef<int64_t> dims) {
    Static s;
    s.dataType = int32_t(DataType::Bool);
    s.values = {v ? 1.0 : 0.0};
    return broadcastTo(constant(s, nodeName_ + (v ? ".true" : ".false")), dims);
  };
  llvm::SmallVector<int64_t> dims(shape(a).begin(), shape(a).end());
  if (c && !broadcastShapes(shape(a), shape(c), dims))
    return false;
  a = broadcastTo(a, dims);
  mlir::Type predicate = type(dims, b_.getI1Type());
  mlir::Value y;
  if (op == "Not") {
    y = b_.create<kiln::CompareOp>(loc(), predicate, kiln::CompareDirection::eq, a,
                                   boolean(false, dims));
  } else {
    c = broadcastTo(c, dims);
    if (op == "And")
      y = b_.create<kiln::SelectOp>(loc(), predicate, a, c, boolean(false, dims));
    else if (op == "Or")
      y = b_.create<kiln::SelectOp>(loc(), predicate, a, boolean(true, dims), c);
    else
      y = b_.create<kiln::CompareOp>(loc(), predicate, kiln::CompareDirection::ne, a, c);
  }
  setOutput(0, y);
  return true;
}

// Tile: each axis repeated whole (static repeats), as a broadcast over a
// new axis before it and a reshape.
bool Importer::tile() {
  mlir::Value x;
  if (!value(0, x))
    return false;
  const Static *r = staticInput(1);
  if (!r)
    return false;
  int64_t rank = shape(x).size();
  if (static_cast<int64_t>(r->values.size()) != rank)
    return fail("repeats has " + std::to_string(r->values.size()) + " values for rank " +
                std::to_string(rank));
  mlir::Value y = x;
  for (int64_t d = 0; d < rank; ++d) {
    int64_t repeats = toIndex(r->values[d]);
    if (repeats < 1)
      return fail("repeats " + std::to_string(repeats) + " on axis " + std::to_string(d) +
                  ": kiln tensors are not empty");
    if (repeats == 1)
      continue;
    llvm::SmallVector<int64_t> inserted(shape(y).begin(), shape(y).end());
    inserted.insert(inserted.begin() + d, 1);
    llvm::SmallVector<int64_t> wide = inserted, map;
    wide[d] = repeats;
    for (int64_t i = 0; i <= rank; ++i)
      map.push_back(i);
    std::string axis = ".axis" + std::to_string(d);
    mlir::Value spread = g_.broadcast(nodeName_ + axis,
                                      g_.reshape(nodeName_ + axis + ".insert", y, inserted),
                                      map, wide);
    llvm::SmallVector<int64_t> dims(shape(y).begin(), shape(y).end());
    dims[d] *= repeats;
    y = g_.reshape(nodeName_ + axis + ".merge", spread, dims);
  }
  setOutput(0, y);
  return true;
}

// DepthToSpace (mode DCR, or CRD: PyTorch's pixel_shuffle) and
// SpaceToDepth, blocksize b, on NCHW.
bool Importer::depthSpace(bool toSpace) {
  mlir::Value x;
  if (!value(0, x))
    return false;
  llvm::ArrayRef<int64_t> sx = shape(x);
  if (sx.size() != 4)
    return fail("X is " + shapeText(sx) + ": expected [N, C, H, W]");
  int64_t b = intAttr("blocksize", 0);
  if (b < 1)
    return fail("blocksize is missing or not positive");
  int64_t n = sx[0], c = sx[1], h = sx[2], w = sx[3];
  llvm::SmallVector<int64_t> split, perm, out;
  if (toSpace) {
    if (c % (b * b) != 0)
      return fail("X has " + std::to_string(c) + " channels: expected a multiple of " +
                  std::to_string(b * b));
    std::string mode = stringAttr("mode", "DCR");
    if (mode != "DCR" && mode != "CRD")
      return fail("mode is '" + mode + "': expected DCR or CRD");
    if (mode == "DCR") {
      split = {n, b, b, c / (b * b), h, w};
      perm = {0, 3, 4, 1, 5, 2};
    } else {
      split = {n, c / (b * b), b, b, h, w};
      perm = {0, 1, 4, 2, 5, 3};
    }
    out = {n, c / (b * b), h * b, w * b};
  } else {
    if (h % b != 0 || w % b != 0)
      return fail("X is " + shapeText(sx) + ": H and W must be multiples of blocksize " +
                  std::to_string(b));
    split = {n, c, h / b, b, w / b, b};
    perm = {0, 3, 5, 1, 2, 4};
    out = {n, c * b * b, h / b, w / b};
  }
  llvm::SmallVector<int64_t> moved;
  for (int64_t p : perm)
    moved.push_back(split[p]);
  mlir::Value y = b_.create<kiln::TransposeOp>(
      loc(".transpose"), type(moved, element(x)), g_.reshape(nodeName_ + ".split", x, split),
      arr(perm));
  setOutput(0, g_.reshape(nodeName_, y, out));
  return true;
}

// CumSum along a static axis (exclusive, reverse): a kiln.dot_general with
// the constant [n, n] matrix of ones where output i sums input j, then the
// axis moved back.
bool Importer::cumSum() {
  mlir::Value x;
  if (!value(0, x))
    return false;
  if (!llvm::isa<mlir::FloatType>(element(x)))
    return fail("its input is not floating-point: kiln import reads CumSum of floats");
  const Static *a = staticInput(1);
  if (!a)
    return false;
  int64_t rank = shape(x).size();
  int64_t axis = toIndex(a->values.at(0));
  if (!normalizeAxis(axis, rank, "axis"))
    return false;
  bool exclusive = intAttr("exclusive", 0) != 0, reverse = intAttr("reverse", 0) != 0;
  int64_t n = shape(x)[axis];
  Static m;
  m.dataType = int32_t(DataType::Float);
  m.dims = {n, n};
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      bool summed = reverse ? (exclusive ? j > i : j >= i) : (exclusive ? j < i : j <= i);
      m.values.push_back(summed ? 1.0 : 0.0);
    }
  mlir::Value matrix = constant(m, nodeName_ + ".triangle");
  if (element(x) != b_.getF32Type())
    matrix = b_.create<kiln::ConvertOp>(loc(".triangle_type"), type({n, n}, element(x)), matrix);
  llvm::SmallVector<int64_t> dims, perm(rank);
  for (int64_t d = 0; d < rank; ++d)
    if (d != axis)
      dims.push_back(shape(x)[d]);
  dims.push_back(n);
  mlir::Value y = b_.create<kiln::DotGeneralOp>(
      axis == rank - 1 ? loc() : loc(".sum"), type(dims, element(x)), x, matrix, arr({}),
      arr({}), arr({axis}), arr({1}));
  if (axis != rank - 1) {
    // y holds the axis last: put it back at |axis|.
    for (int64_t d = 0, next = 0; d < rank; ++d)
      perm[d] = d == axis ? rank - 1 : next++;
    y = b_.create<kiln::TransposeOp>(loc(), x.getType(), y, arr(perm));
  }
  setOutput(0, y);
  return true;
}

// CumProd (opset 26): element i along the axis is the product of the
// elements up to it (exclusive: before it; reverse: from the end). The
// axis moved last and broadcast to [..., n, n], the factors each product
// skips made 1 by a select with a constant mask, and one kiln.reduce prod
// over the last axis, whose gradient counts zeros (O(n^2) per row).
bool Importer::cumProd() {
  mlir::Value x;
  if (!value(0, x))
    return false;
  mlir::Type e = element(x);
  if (!llvm::isa<mlir::FloatType>(e))
    return fail(
        "its input is not floating-point: kiln import reads CumProd of floats");
  int64_t rank = shape(x).size(), axis = 0;
  if (!staticIndex(1, "axis", axis) || !normalizeAxis(axis, rank, "axis"))
    return false;
  bool exclusive = intAttr("exclusive", 0) != 0,
       reverse = intAttr("reverse", 0) != 0;
  int64_t n = shape(x)[axis];
  llvm::SmallVector<int64_t> perm = axisLastOrder(rank, axis);
  mlir::Value last = axis == rank - 1 ? x : permute(x, perm, ".axis_last");
  llvm::SmallVector<int64_t> rows(shape(last).begin(), shape(last).end());
  llvm::SmallVector<int64_t> square(rows);
  square.push_back(n);
  llvm::SmallVector<int64_t> map;
  for (int64_t d = 0; d < rank - 1; ++d)
    map.push_back(d);
  map.push_back(rank); // factor j along the new last axis
  mlir::Value factors = g_.broadcast(nodeName_ + ".factors", last, map, square);
  Static mask;
  mask.dataType = int32_t(DataType::Bool);
  mask.dims = {n, n};
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      bool taken =
          reverse ? (exclusive ? j > i : j >= i) : (exclusive ? j < i : j <= i);
      mask.values.push_back(taken ? 1.0 : 0.0);
    }
  llvm::SmallVector<int64_t> maskMap = {rank - 1, rank};
  mlir::Value taken =
      g_.broadcast(nodeName_ + ".taken", constant(mask, nodeName_ + ".mask"),
                   maskMap, square);
  mlir::Value kept = b_.create<kiln::SelectOp>(
      loc(".kept"), factors.getType(), taken, factors, splat(1.0, e, square));
  mlir::Value y = b_.create<kiln::ReduceOp>(
      loc(axis == rank - 1 ? "" : ".products"), last.getType(),
      kiln::ReduceKind::prod, kept, arr({rank}));
  setOutput(0, axis == rank - 1
                   ? y
                   : permute(y, mlir::invertPermutationVector(perm), ""));
  return true;
}

// ReverseSequence: along time_axis (default 0), batch element b's first
// sequence_lens[b] elements reversed, the rest as they are. Each element
// reads time index len - 1 - t where t < len, else t, computed from an
// iota and the lengths (constant or from data): one gather of X's
// elements, whose gradient scatters back.
bool Importer::reverseSequence() {
  mlir::Value x, lens;
  if (!value(0, x) || !value(1, lens))
    return false;
  llvm::ArrayRef<int64_t> sx = shape(x);
  int64_t rank = sx.size();
  int64_t batchAxis = intAttr("batch_axis", 1),
          timeAxis = intAttr("time_axis", 0);
  if (rank < 2)
    return fail("its input is " + shapeText(sx) + ": expected rank 2 or more");
  if (!normalizeAxis(batchAxis, rank, "batch_axis") ||
      !normalizeAxis(timeAxis, rank, "time_axis"))
    return false;
  if (batchAxis == timeAxis || (batchAxis > 1 || timeAxis > 1))
    return fail("batch_axis and time_axis are " + std::to_string(batchAxis) +
                " and " + std::to_string(timeAxis) +
                ": expected 0 and 1, or 1 and 0");
  if (shape(lens) != llvm::ArrayRef<int64_t>{sx[batchAxis]} ||
      !element(lens).isInteger(64))
    return fail("sequence_lens is " + shapeText(shape(lens)) +
                ": expected INT64 [" + std::to_string(sx[batchAxis]) +
                "], the batch");
  mlir::Type i64 = b_.getI64Type();
  llvm::SmallVector<int64_t> full(sx.begin(), sx.end());
  mlir::Value t = b_.create<kiln::IotaOp>(loc(".time"), type(full, i64),
                                          b_.getI64IntegerAttr(timeAxis));
  mlir::Value len =
      g_.broadcast(nodeName_ + ".lengths", lens, {batchAxis}, full);
  mlir::Value inside =
      b_.create<kiln::CompareOp>(loc(".inside"), type(full, b_.getI1Type()),
                                 kiln::CompareDirection::lt, t, len);
  mlir::Value mirrored =
      sub(sub(len, splat(1.0, i64, full), ".last"), t, ".mirrored");
  mlir::Value index = b_.create<kiln::SelectOp>(loc(".index"), t.getType(),
                                                inside, mirrored, t);
  setOutput(0, gatherElementsAt(x, index, timeAxis));
  return true;
}

// CenterCropPad (opset 18): each of `axes` (default all) cropped or padded
// with zeros to the static shape, centered (the odd element at the end).
bool Importer::centerCropPad() {
  mlir::Value x;
  if (!value(0, x))
    return false;
  const Static *target = staticInput(1);
  if (!target)
    return false;
  int64_t rank = shape(x).size();
  std::vector<int64_t> axes;
  if (std::optional<std::vector<int64_t>> a = intsAttr("axes"))
    axes = *a;
  else
    for (int64_t d = 0; d < rank; ++d)
      axes.push_back(d);
  if (target->values.size() != axes.size())
    return fail("shape has " + std::to_string(target->values.size()) +
                " values for " + std::to_string(axes.size()) + " axes");
  llvm::SmallVector<int64_t> low(rank, 0), high(rank, 0);
  bool pads = false;
  for (size_t i = 0; i < axes.size(); ++i) {
    int64_t d = axes[i];
    if (!normalizeAxis(d, rank, "axes"))
      return false;
    int64_t size = toIndex(target->values[i]), dim = shape(x)[d];
    if (size < 1)
      return fail("shape " + std::to_string(size) + " of axis " +
                  std::to_string(d) +
                  " is below 1: kiln tensors are not empty");
    if (size < dim) {
      int64_t start = (dim - size) / 2;
      x = sliceAxis(x, d, start, start + size, 1, ".crop" + std::to_string(d));
    } else if (size > dim) {
      low[d] = (size - dim) / 2;
      high[d] = size - dim - low[d];
      pads = true;
    }
  }
  if (pads) {
    llvm::SmallVector<int64_t> dims(shape(x).begin(), shape(x).end());
    for (int64_t d = 0; d < rank; ++d)
      dims[d] += low[d] + high[d];
    x = b_.create<kiln::PadOp>(loc(".pad"), type(dims, element(x)), x, arr(low),
                               arr(high), b_.getF64FloatAttr(0.0));
  }
  setOutput(0, x);
  return true;
}

bool Importer::foldStaticData(const std::string &op, bool &folded) {
  folded = false;
  static const std::set<std::string> kFolded = {
      "ConstantOfShape", "Range", "Equal", "Less", "Greater", "LessOrEqual",
      "GreaterOrEqual", "Not", "Where", "Slice", "Transpose", "Expand", "Trilu",
      "Mod"};
  if (!kFolded.count(op))
    return true;
  for (const std::string &in : node_->inputs)
    if (!in.empty() && !statics_.count(in))
      return true;
  // The inputs each op needs: without them the op's own reader names what
  // is missing.
  size_t needed = op == "Range" || op == "Where" || op == "Slice" ? 3
                  : op == "ConstantOfShape" || op == "Not" ||
                          op == "Transpose" || op == "Trilu"
                      ? 1
                      : 2;
  for (size_t i = 0; i < needed; ++i)
    if (!hasInput(i))
      return true;
  static const Static kMissing;
  auto input = [&](size_t i) -> const Static & {
    return hasInput(i) ? statics_[node_->inputs[i]] : kMissing;
  };
  // The one value of input |i|.
  auto scalar = [&](size_t i, const char *what, double &out) {
    if (input(i).values.size() != 1)
      return fail(std::string(what) + " has " +
                  std::to_string(input(i).values.size()) +
                  " values: expected one");
    out = input(i).values[0];
    return true;
  };
  // A result of |dims| small enough to evaluate here.
  auto fits = [&](llvm::ArrayRef<int64_t> dims) {
    return staticFits(dims, "makes a constant of shape " + shapeText(dims));
  };
  Static s;
  if (op == "ConstantOfShape") {
    for (double v : input(0).values)
      s.dims.push_back(toIndex(v));
    if (llvm::any_of(s.dims, [](int64_t d) { return d < 0; }))
      return fail("makes a tensor of shape " + shapeText(s.dims));
    if (!fits(s.dims))
      return false;
    double fill = 0.0;
    s.dataType = int32_t(DataType::Float);
    if (const onnx::Attribute *a = node_->attribute("value"); a && a->t) {
      std::vector<double> v = a->t->toDoubles();
      if (v.size() != 1)
        return fail("value is not one element");
      fill = v[0];
      s.dataType = a->t->dataType;
    }
    s.values.assign(product(s.dims), fill);
  } else if (op == "Range") {
    double start, limit, delta;
    if (!scalar(0, "start", start) || !scalar(1, "limit", limit) ||
        !scalar(2, "delta", delta))
      return false;
    if (delta == 0)
      return fail("delta is 0");
    double count = std::ceil((limit - start) / delta);
    if (!(count <= double(kMaxStaticElements)))
      return fail("makes " + std::to_string(count) +
                  " values: kiln import evaluates constants of at most 2^25 "
                  "elements");
    int64_t n = std::max<int64_t>(0, int64_t(count));
    s.dataType = input(0).dataType;
    s.dims = {n};
    for (int64_t i = 0; i < n; ++i)
      s.values.push_back(start + i * delta);
  } else if (op == "Trilu") {
    const Static &a = input(0);
    if (a.dims.size() < 2)
      return fail("its input has rank " + std::to_string(a.dims.size()) +
                  ": expected 2 or more");
    double kValue = 0;
    if (hasInput(1) && !scalar(1, "k", kValue))
      return false;
    int64_t k = toIndex(kValue);
    bool upper = intAttr("upper", 1) != 0;
    s = a;
    int64_t rows = a.dims[a.dims.size() - 2], cols = a.dims.back();
    for (size_t i = 0; i < s.values.size(); ++i) {
      int64_t col = i % cols, row = (i / cols) % rows;
      if (upper ? col - row < k : col - row > k)
        s.values[i] = 0;
    }
  } else if (op == "Mod") {
    const Static &a = input(0), &c = input(1);
    bool fmod = intAttr("fmod", 0) != 0;
    if (!fmod && (isFloatType(a.dataType) || isFloatType(c.dataType)))
      return fail("fmod is 0 on floating-point inputs (ONNX requires 1)");
    llvm::SmallVector<int64_t> dims;
    if (!broadcastShapes(a.dims, c.dims, dims) || !fits(dims))
      return false;
    s.dataType = a.dataType;
    s.dims.assign(dims.begin(), dims.end());
    bool zero = false;
    BroadcastReader readA(a, dims), readC(c, dims);
    forEachIndex(dims, [&](llvm::ArrayRef<int64_t> index) {
      double x = readA(index), y = readC(index);
      zero |= y == 0;
      double r = y == 0 ? 0 : std::fmod(x, y);
      // fmod 0: the remainder takes the divisor's sign (Python's %).
      if (!fmod && r != 0 && (r < 0) != (y < 0))
        r += y;
      s.values.push_back(r);
    });
    if (zero)
      return fail("divides by zero");
  } else if (op == "Not") {
    s = input(0);
    for (double &v : s.values)
      v = v == 0 ? 1 : 0;
  } else if (op == "Transpose") {
    const Static &a = input(0);
    int64_t rank = a.dims.size();
    std::vector<int64_t> perm;
    if (std::optional<std::vector<int64_t>> p = intsAttr("perm"))
      perm = *p;
    else
      for (int64_t d = rank - 1; d >= 0; --d)
        perm.push_back(d);
    if (static_cast<int64_t>(perm.size()) != rank)
      return fail("perm has " + std::to_string(perm.size()) + " values for rank " +
                  std::to_string(rank));
    s.dataType = a.dataType;
    std::vector<bool> used(rank, false);
    for (int64_t p : perm) {
      if (p < 0 || p >= rank || used[p])
        return fail("perm is not a permutation");
      used[p] = true;
      s.dims.push_back(a.dims[p]);
    }
    std::vector<int64_t> strides = rowMajorStrides(a.dims);
    forEachIndex(s.dims, [&](llvm::ArrayRef<int64_t> index) {
      int64_t flat = 0;
      for (int64_t d = 0; d < rank; ++d)
        flat += index[d] * strides[perm[d]];
      s.values.push_back(a.values[flat]);
    });
  } else if (op == "Slice") {
    if (opset_ < 10)
      return true; // attributes: the kiln path reads them
    const Static &a = input(0);
    int64_t rank = a.dims.size();
    std::vector<double> starts = input(1).values, ends = input(2).values, axes, steps;
    if (hasInput(3))
      axes = input(3).values;
    else
      for (size_t i = 0; i < starts.size(); ++i)
        axes.push_back(double(i));
    steps = hasInput(4) ? input(4).values : std::vector<double>(starts.size(), 1.0);
    if (starts.size() != ends.size() || axes.size() != starts.size() ||
        steps.size() != starts.size())
      return fail("starts, ends, axes and steps have different lengths");
    std::vector<SliceAxis> plan(rank);
    for (int64_t d = 0; d < rank; ++d)
      plan[d].count = a.dims[d];
    for (size_t i = 0; i < starts.size(); ++i) {
      int64_t axis = toIndex(axes[i]), step = toIndex(steps[i]);
      if (!normalizeAxis(axis, rank, "axis"))
        return false;
      if (step == 0)
        return fail("step is 0");
      plan[axis] = clampSlice(a.dims[axis], starts[i], ends[i], step);
    }
    // An empty result is fine for a shape computation (the TorchScript
    // exporter slices a shape past its end); a kiln op cannot read one.
    s.dataType = a.dataType;
    for (const SliceAxis &p : plan)
      s.dims.push_back(p.count);
    std::vector<int64_t> strides = rowMajorStrides(a.dims);
    forEachIndex(s.dims, [&](llvm::ArrayRef<int64_t> index) {
      int64_t flat = 0;
      for (int64_t d = 0; d < rank; ++d)
        flat += (plan[d].start + index[d] * plan[d].step) * strides[d];
      s.values.push_back(a.values[flat]);
    });
  } else if (op == "Expand") {
    const Static &a = input(0);
    std::vector<int64_t> target;
    for (double v : input(1).values)
      target.push_back(toIndex(v));
    llvm::SmallVector<int64_t> dims;
    if (!broadcastShapes(a.dims, target, dims) || !fits(dims))
      return false;
    s.dataType = a.dataType;
    s.dims.assign(dims.begin(), dims.end());
    BroadcastReader read(a, dims);
    forEachIndex(dims, [&](llvm::ArrayRef<int64_t> index) { s.values.push_back(read(index)); });
  } else {
    // The comparisons and Where: elementwise, broadcast.
    llvm::SmallVector<int64_t> dims;
    for (size_t i = 0; i < node_->inputs.size(); ++i) {
      llvm::SmallVector<int64_t> next;
      if (!broadcastShapes(dims, input(i).dims, next))
        return false;
      dims = next;
    }
    if (!fits(dims))
      return false;
    s.dims.assign(dims.begin(), dims.end());
    bool where = op == "Where";
    s.dataType = where ? input(1).dataType : int32_t(DataType::Bool);
    BroadcastReader first(input(0), dims), second(input(1), dims);
    std::optional<BroadcastReader> third;
    if (where)
      third.emplace(input(2), dims);
    kiln::CompareDirection direction = compareDirection(where ? "Equal" : op);
    forEachIndex(dims, [&](llvm::ArrayRef<int64_t> index) {
      double x = first(index), y = second(index);
      if (where) {
        s.values.push_back(x != 0 ? y : (*third)(index));
        return;
      }
      using Direction = kiln::CompareDirection;
      s.values.push_back(direction == Direction::eq   ? x == y
                         : direction == Direction::lt ? x < y
                         : direction == Direction::gt ? x > y
                         : direction == Direction::le ? x <= y
                                                      : x >= y);
    });
  }
  setStatic(0, std::move(s));
  folded = true;
  return true;
}

} // namespace kiln::cli::onnx_import
