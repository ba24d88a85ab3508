//===- OnnxImportIndexed.cpp - ops that read or write at indices ----------===//
//
// The importer's indexed ops (OnnxImporter.h): Gather, GatherElements,
// ScatterElements, GatherND and ScatterND (with the index checks and the
// row computation they share), OneHot; the ops that find indices (ArgMax,
// ArgMin, Hardmax, TopK); and the class-index losses
// (SoftmaxCrossEntropyLoss, NegativeLogLikelihoodLoss).
//
//===----------------------------------------------------------------------===//

#include "tools/kiln/lib/OnnxImporter.h"

#include "mlir/Dialect/Utils/IndexingUtils.h"

#include "llvm/ADT/STLExtras.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace kiln::cli::onnx_import {

// Gather along any axis: data.shape[:axis] ++ indices.shape ++
// data.shape[axis + 1:] (gatherAlong; along axis 0, an embedding's rows,
// one kiln.gather). A static scalar index (x[:, 0]) is a slice.
bool Importer::gather() {
  mlir::Value table, indices;
  if (!value(0, table))
    return false;
  int64_t rank = shape(table).size(), axis;
  if (rank == 0)
    return fail("its data is a scalar");
  if (!axisOf(table, 0, axis))
    return false;
  llvm::ArrayRef<int64_t> st = shape(table);
  if (hasInput(1) && statics_.count(node_->inputs[1])) {
    Static idx = statics_[node_->inputs[1]];
    for (double &v : idx.values) {
      int64_t i = static_cast<int64_t>(v);
      if (i < -st[axis] || i >= st[axis])
        return fail("index " + std::to_string(i) +
                    " is out of range for axis " + std::to_string(axis) +
                    " of size " + std::to_string(st[axis]));
      v = double(i < 0 ? i + st[axis] : i);
    }
    if (idx.dims.empty()) {
      int64_t i = static_cast<int64_t>(idx.values[0]);
      llvm::SmallVector<int64_t> dims;
      for (int64_t d = 0; d < rank; ++d)
        if (d != axis)
          dims.push_back(st[d]);
      setOutput(0, g_.reshape(nodeName_,
                              sliceAxis(table, axis, i, i + 1, 1, ".slice"),
                              dims));
      return true;
    }
    idx.dataType = int32_t(DataType::Int64);
    indices = constant(idx, nodeName_ + ".indices");
  } else if (!value(1, indices)) {
    return false;
  }
  if (!element(indices).isInteger(64) && !element(indices).isInteger(32))
    return fail("the indices are not INT64 or INT32");
  setOutput(0, gatherAlong(table, axis, indices, ""));
  return true;
}

// GatherElements (torch.gather): out[i..] = data[i.. with index[i..] along
// axis]. The data as a column of its elements and one kiln.gather at the
// flat positions, sum over d of (d == axis ? index : iota_d) * stride_d
// (negative indices count from the end), reshaped to the indices' shape.
// The gradient scatters back into those elements.
bool Importer::gatherElements() {
  mlir::Value data, indices;
  if (!value(0, data) || !value(1, indices))
    return false;
  int64_t axis;
  mlir::Value index;
  if (!elementIndices(data, indices, axis, index))
    return false;
  setOutput(0, gatherElementsAt(data, index, axis));
  return true;
}

bool Importer::elementIndices(mlir::Value data, mlir::Value indices,
                              int64_t &axis, mlir::Value &index) {
  llvm::ArrayRef<int64_t> sd = shape(data), si = shape(indices);
  int64_t rank = sd.size();
  if (static_cast<int64_t>(si.size()) != rank || rank == 0)
    return fail("data is " + shapeText(sd) + " and indices " + shapeText(si) +
                ": expected the same rank");
  if (!axisOf(data, 0, axis))
    return false;
  for (int64_t d = 0; d < rank; ++d)
    if (d != axis && si[d] > sd[d])
      return fail("indices " + shapeText(si) + " are larger than data " +
                  shapeText(sd) + " in dimension " + std::to_string(d));
  return nonNegative(indices, sd[axis], ".index", index);
}

bool Importer::nonNegative(mlir::Value indices, int64_t extent,
                           const std::string &suffix, mlir::Value &out) {
  mlir::Type e = element(indices), t = indices.getType();
  if (!e.isInteger(64) && !e.isInteger(32))
    return fail("the indices are not INT64 or INT32");
  llvm::ArrayRef<int64_t> si = shape(indices);
  mlir::Value negative = b_.create<kiln::CompareOp>(
      loc(suffix + ".negative"), type(si, b_.getI1Type()),
      kiln::CompareDirection::lt, indices, splat(0.0, e, si));
  out = b_.create<kiln::SelectOp>(
      loc(suffix), t, negative,
      b_.create<kiln::AddOp>(loc(suffix + ".from_end"), t, indices,
                             splat(double(extent), e, si)),
      indices);
  return true;
}

mlir::Value Importer::flatPositions(mlir::Value index,
                                    llvm::ArrayRef<int64_t> sd, int64_t axis) {
  llvm::ArrayRef<int64_t> si = shape(index);
  int64_t rank = sd.size();
  mlir::Type e = element(index), t = index.getType();
  mlir::Value flat;
  for (int64_t d = rank - 1, stride = 1; d >= 0; stride *= sd[d--]) {
    mlir::Value along =
        d == axis ? index
                  : b_.create<kiln::IotaOp>(loc(".iota" + std::to_string(d)), t,
                                            b_.getI64IntegerAttr(d))
                        .getResult();
    if (stride != 1)
      along = b_.create<kiln::MulOp>(loc(".stride" + std::to_string(d)), t,
                                     along, splat(double(stride), e, si));
    flat = flat ? b_.create<kiln::AddOp>(loc(".flat" + std::to_string(d)), t,
                                         flat, along)
                      .getResult()
                : along;
  }
  return flat;
}

mlir::Value Importer::gatherElementsAt(mlir::Value data, mlir::Value index,
                                       int64_t axis) {
  llvm::ArrayRef<int64_t> sd = shape(data), si = shape(index);
  mlir::Value flat = flatPositions(index, sd, axis);
  mlir::Value column =
      g_.reshape(nodeName_ + ".column", data, {product(sd), 1});
  llvm::SmallVector<int64_t> gathered(si.begin(), si.end());
  gathered.push_back(1);
  mlir::Value y = b_.create<kiln::GatherOp>(
      loc(".gather"), type(gathered, element(data)), column, flat);
  return g_.reshape(nodeName_, y, si);
}

// |table| [V, ...] with the rows |updates| [S..., ...] written (no
// |combine|) or combined (added, or their max or min kept) at rows |rows|
// (S, in [0, V)): kiln.scatter_add into the table (with its combine), or
// for writes into zeros chosen where a count of the writes (a scatter_add
// of ones) is nonzero. Writes to one row add up. The gradient gathers the
// same rows back (for max and min to the elements that won).
mlir::Value Importer::scatterRows(mlir::Value table, mlir::Value rows,
                                  mlir::Value updates,
                                  std::optional<kiln::ReduceKind> combine) {
  mlir::Type t = table.getType();
  llvm::ArrayRef<int64_t> st = shape(table);
  if (combine)
    return b_.create<kiln::ScatterAddOp>(loc(".scatter"), t, table, rows,
                                         updates, *combine);
  mlir::Value written = b_.create<kiln::ScatterAddOp>(
      loc(".scatter"), t, splat(0.0, element(table), st), rows, updates);
  mlir::Type f32 = b_.getF32Type();
  mlir::Value counts = b_.create<kiln::ScatterAddOp>(
      loc(".writes"), type({st[0]}, f32), splat(0.0, f32, {st[0]}), rows,
      splat(1.0, f32, shape(rows)));
  mlir::Value hit = b_.create<kiln::CompareOp>(
      loc(".written"), type({st[0]}, b_.getI1Type()),
      kiln::CompareDirection::gt, counts, splat(0.0, f32, {st[0]}));
  return b_.create<kiln::SelectOp>(
      loc(".select"), t,
      g_.broadcast(nodeName_ + ".written_broadcast", hit, {0}, st), written,
      table);
}

// The reduction attribute of ScatterElements and ScatterND: none (a
// write), add, mul, max or min (opset 18).
bool Importer::scatterReduction(std::optional<kiln::ReduceKind> &combine) {
  std::string reduction = stringAttr("reduction", "none");
  if (reduction == "none")
    combine = std::nullopt;
  else if (reduction == "add")
    combine = kiln::ReduceKind::sum;
  else if (reduction == "max")
    combine = kiln::ReduceKind::max;
  else if (reduction == "min")
    combine = kiln::ReduceKind::min;
  else if (reduction == "mul")
    combine = kiln::ReduceKind::prod;
  else
    return fail("reduction is " + reduction +
                ": kiln import reads none, add, mul, max and min");
  return true;
}

// ScatterElements (torch.scatter, scatter_add; Scatter before opset 11):
// data with updates[i..] written or added at data[i.. with indices[i..]
// along axis] (negative indices count from the end): the data as a column
// of its elements, and scatterRows at GatherElements' flat positions.
bool Importer::scatterElements() {
  mlir::Value data, indices, updates;
  if (!value(0, data) || !value(1, indices) || !value(2, updates))
    return false;
  llvm::ArrayRef<int64_t> sd = shape(data), si = shape(indices);
  if (shape(updates) != si)
    return fail("updates are " + shapeText(shape(updates)) +
                ": expected the indices' " + shapeText(si));
  if (element(updates) != element(data))
    return fail("updates and data have different element types");
  int64_t axis;
  std::optional<kiln::ReduceKind> combine;
  mlir::Value index;
  if (!scatterReduction(combine) || !elementIndices(data, indices, axis, index))
    return false;
  mlir::Value rows = flatPositions(index, sd, axis);
  llvm::SmallVector<int64_t> column(si.begin(), si.end());
  column.push_back(1);
  mlir::Value y = scatterRows(
      g_.reshape(nodeName_ + ".column", data, {product(sd), 1}), rows,
      g_.reshape(nodeName_ + ".updates", updates, column), combine);
  setOutput(0, g_.reshape(nodeName_, y, sd));
  return true;
}

// The rows of ScatterND's and GatherND's indices [B..., L..., k] into data
// [B..., D..., R...] (B: |batch| dimensions, D: k of them): for each index
// the row of its batch and D dimensions among prod(B) * prod(D) rows
// (negative values count from the end of their dimension), of the
// indices' leading shape [B..., L...] (a single index [k]: [1]).
bool Importer::ndRows(llvm::ArrayRef<int64_t> sd, mlir::Value indices,
                      int64_t batch, mlir::Value &rows) {
  llvm::ArrayRef<int64_t> si = shape(indices);
  int64_t rank = sd.size();
  if (si.empty() || si.back() < 1 || si.back() > rank - batch)
    return fail("indices are " + shapeText(si) +
                ": expected a last dimension of 1 to " +
                std::to_string(rank - batch) + " (data is " + shapeText(sd) +
                ")");
  int64_t k = si.back();
  llvm::SmallVector<int64_t> lead(si.begin(), si.end() - 1);
  if (lead.empty())
    lead.push_back(1);
  // nonNegative refuses indices that are not INT64 or INT32.
  mlir::Type e = element(indices), t = type(lead, e);
  rows = {};
  int64_t stride = 1;
  for (int64_t j = batch + k - 1; j >= 0; stride *= sd[j--]) {
    std::string at = ".index" + std::to_string(j);
    mlir::Value index;
    if (j >= batch) {
      mlir::Value part = sliceAxis(indices, si.size() - 1, j - batch,
                                   j - batch + 1, 1, at + ".slice");
      if (!nonNegative(g_.reshape(nodeName_ + at, part, lead), sd[j], at,
                       index))
        return false;
    } else { // a batch dimension: the index's own position along it
      index = b_.create<kiln::IotaOp>(loc(at), t, b_.getI64IntegerAttr(j));
    }
    if (stride != 1)
      index = b_.create<kiln::MulOp>(loc(at + ".stride"), t, index,
                                     splat(double(stride), e, lead));
    rows = rows ? b_.create<kiln::AddOp>(loc(at + ".row"), t, rows, index)
                      .getResult()
                : index;
  }
  return true;
}

// ScatterND: indices [..., k] address data's first k dimensions (negative
// values count from the end) and updates are indices' leading dimensions
// followed by data's past k. Data becomes a table of its first k
// dimensions' rows, and scatterRows writes or adds the updates at the
// rows the indices name.
bool Importer::scatterNd() {
  mlir::Value data, indices, updates;
  if (!value(0, data) || !value(1, indices) || !value(2, updates))
    return false;
  llvm::ArrayRef<int64_t> sd = shape(data), si = shape(indices);
  mlir::Value rows;
  if (!ndRows(sd, indices, 0, rows))
    return false;
  int64_t k = si.back();
  llvm::SmallVector<int64_t> lead(si.begin(), si.end() - 1), expected = lead;
  expected.append(sd.begin() + k, sd.end());
  if (shape(updates) != llvm::ArrayRef<int64_t>(expected))
    return fail("updates are " + shapeText(shape(updates)) + ": expected " +
                shapeText(expected) + " for data " + shapeText(sd) +
                " and indices " + shapeText(si));
  if (element(updates) != element(data))
    return fail("updates and data have different element types");
  std::optional<kiln::ReduceKind> combine;
  if (!scatterReduction(combine))
    return false;
  // Rows of at least one index, so that a single index [k] is a row too.
  llvm::SmallVector<int64_t> table = {product(sd.take_front(k))},
                             written(shape(rows).begin(), shape(rows).end());
  table.append(sd.begin() + k, sd.end());
  written.append(sd.begin() + k, sd.end());
  mlir::Value y = scatterRows(
      g_.reshape(nodeName_ + ".table", data, table), rows,
      g_.reshape(nodeName_ + ".updates", updates, written), combine);
  setOutput(0, g_.reshape(nodeName_, y, sd));
  return true;
}

// GatherND (batch_dims b): indices [B..., L..., k] address data's k
// dimensions past its b batch ones, within each index's own batch; the
// result is [B..., L..., data's dimensions past b + k]. Data becomes a
// table of rows (ndRows) and kiln.gather reads them; its gradient adds
// the result's back into the rows read.
bool Importer::gatherNd() {
  mlir::Value data, indices;
  if (!value(0, data) || !value(1, indices))
    return false;
  llvm::ArrayRef<int64_t> sd = shape(data), si = shape(indices);
  int64_t batch = intAttr("batch_dims", 0);
  if (batch < 0 || batch >= int64_t(si.size()) || batch >= int64_t(sd.size()) ||
      sd.take_front(batch) != si.take_front(batch))
    return fail("batch_dims " + std::to_string(batch) + " with data " +
                shapeText(sd) + " and indices " + shapeText(si) +
                ": expected the first batch_dims dimensions of both to agree, "
                "below the indices' rank");
  mlir::Value rows;
  if (!ndRows(sd, indices, batch, rows))
    return false;
  int64_t k = si.back();
  llvm::SmallVector<int64_t> table = {product(sd.take_front(batch + k))},
                             gathered(shape(rows).begin(), shape(rows).end()),
                             result(si.begin(), si.end() - 1);
  table.append(sd.begin() + batch + k, sd.end());
  gathered.append(sd.begin() + batch + k, sd.end());
  result.append(sd.begin() + batch + k, sd.end());
  mlir::Value y = b_.create<kiln::GatherOp>(
      loc(".gather"), type(gathered, element(data)),
      g_.reshape(nodeName_ + ".table", data, table), rows);
  setOutput(0, g_.reshape(nodeName_, y, result));
  return true;
}

// OneHot: indices of any shape (negative ones count from the end of
// depth; one outside [-depth, depth) sets no element), depth a constant,
// values [off, on]; the result has depth inserted at axis, on where the
// position along it equals the index.
bool Importer::oneHot() {
  mlir::Value indices, values;
  if (!value(0, indices) || !value(2, values))
    return false;
  int64_t depth;
  if (!staticIndex(1, "depth", depth))
    return false;
  if (depth < 1)
    return fail("depth is " + std::to_string(depth) + ": expected at least 1");
  if (shape(values) != llvm::ArrayRef<int64_t>{2})
    return fail("values are " + shapeText(shape(values)) +
                ": expected [off, on]");
  llvm::ArrayRef<int64_t> si = shape(indices);
  int64_t rank = si.size() + 1, axis = intAttr("axis", -1);
  if (!normalizeAxis(axis, rank, "axis"))
    return false;
  // The indices as i64 (ONNX allows any numeric type; a float index is
  // truncated), counted from the end where negative.
  mlir::Type i64 = b_.getI64Type();
  mlir::Value index = indices;
  if (element(index) != i64)
    index = b_.create<kiln::ConvertOp>(loc(".index"), type(si, i64), index);
  if (!nonNegative(index, depth, ".from_end", index))
    return false;
  llvm::SmallVector<int64_t> out(si.begin(), si.end()), kept;
  out.insert(out.begin() + axis, depth);
  for (int64_t d = 0; d < rank; ++d)
    if (d != axis)
      kept.push_back(d);
  mlir::Value position = b_.create<kiln::IotaOp>(
      loc(".position"), type(out, i64), b_.getI64IntegerAttr(axis));
  mlir::Value hit = b_.create<kiln::CompareOp>(
      loc(".hit"), type(out, b_.getI1Type()), kiln::CompareDirection::eq,
      position, g_.broadcast(nodeName_ + ".index_broadcast", index, kept, out));
  auto pick = [&](int64_t i, const std::string &at) {
    return g_.broadcast(
        nodeName_ + at + "_broadcast",
        g_.reshape(nodeName_ + at, sliceAxis(values, 0, i, i + 1, 1, at), {}),
        {}, out);
  };
  setOutput(0, b_.create<kiln::SelectOp>(loc(), type(out, element(values)), hit,
                                         pick(1, ".on"), pick(0, ".off")));
  return true;
}

// ArgMax and ArgMin along an axis (keepdims, select_last_index) of a
// floating-point or integer (INT32, INT64) X: INT64 indices through
// kiln.argmax, for ArgMin of -X (of -1 - X for integers, which reverses
// their order without overflowing at the most negative); the last extreme
// is the first of the reversed axis, counted from the end.
bool Importer::argExtreme(bool max) {
  mlir::Value x;
  if (!value(0, x))
    return false;
  if (element(x).isInteger(1))
    return fail("its input is BOOL: expected numbers");
  int64_t rank = shape(x).size(), axis;
  if (!axisOf(x, 0, axis))
    return false;
  bool last = intAttr("select_last_index", 0) != 0;
  int64_t n = shape(x)[axis];
  mlir::Value operand = x;
  if (!max && llvm::isa<mlir::FloatType>(element(x)))
    operand = b_.create<kiln::NegOp>(loc(".neg"), x.getType(), x);
  else if (!max)
    operand = b_.create<kiln::SubOp>(loc(".reverse_order"), x.getType(),
                                     splat(-1.0, element(x), shape(x)), x);
  if (last)
    operand = reverseAxis(operand, axis, ".reverse");
  llvm::SmallVector<int64_t> dims, kept;
  for (int64_t d = 0; d < rank; ++d) {
    if (d != axis)
      dims.push_back(shape(x)[d]);
    kept.push_back(d == axis ? 1 : shape(x)[d]);
  }
  mlir::Type i64 = b_.getI64Type();
  mlir::Value y = b_.create<kiln::ArgmaxOp>(
      loc(".argmax"), type(dims, i64), operand, b_.getI64IntegerAttr(axis));
  if (last)
    y = b_.create<kiln::SubOp>(loc(".from_end"), y.getType(),
                               splat(double(n - 1), i64, dims), y);
  if (intAttr("keepdims", 1))
    y = g_.reshape(nodeName_, y, kept);
  setOutput(0, y);
  return true;
}

// Hardmax: 1 at the first largest element along axis, 0 elsewhere (from
// opset 13; before it X is taken as the matrix [dimensions before axis,
// the rest], axis 1 by default): an iota along the axis compared with
// kiln.argmax's index. No gradient flows through it.
bool Importer::hardmax() {
  mlir::Value x;
  if (!value(0, x))
    return false;
  if (!llvm::isa<mlir::FloatType>(element(x)))
    return fail("its input is not a float tensor");
  llvm::ArrayRef<int64_t> sx = shape(x);
  int64_t axis;
  if (!axisOf(x, opset_ >= 13 ? -1 : 1, axis))
    return false;
  mlir::Value rows = x;
  llvm::SmallVector<int64_t> work(sx.begin(), sx.end());
  if (opset_ < 13) {
    work = {product(sx.take_front(axis)), product(sx.drop_front(axis))};
    rows = g_.reshape(nodeName_ + ".matrix", x, work);
    axis = 1;
  }
  int64_t rank = work.size();
  llvm::SmallVector<int64_t> reduced, kept;
  for (int64_t d = 0; d < rank; ++d)
    if (d != axis) {
      reduced.push_back(work[d]);
      kept.push_back(d);
    }
  mlir::Type i64 = b_.getI64Type();
  mlir::Value best = b_.create<kiln::ArgmaxOp>(
      loc(".argmax"), type(reduced, i64), rows, b_.getI64IntegerAttr(axis));
  mlir::Value hit = b_.create<kiln::CompareOp>(
      loc(".hit"), type(work, b_.getI1Type()), kiln::CompareDirection::eq,
      b_.create<kiln::IotaOp>(loc(".position"), type(work, i64),
                              b_.getI64IntegerAttr(axis)),
      g_.broadcast(nodeName_ + ".argmax_broadcast", best, kept, work));
  mlir::Value y = b_.create<kiln::SelectOp>(
      loc(opset_ < 13 ? ".select" : ""), type(work, element(x)), hit,
      splat(1.0, element(x), work), splat(0.0, element(x), work));
  setOutput(0, opset_ < 13 ? g_.reshape(nodeName_, y, sx) : y);
  return true;
}

// SoftmaxCrossEntropyLoss (|softmax|) and NegativeLogLikelihoodLoss:
// scores or log-probabilities [N, C, D...] and labels [N, D...]; each
// element's loss is minus the log-probability of its label, times the
// label's weight (input 2, else 1); an element whose label is
// ignore_index counts nothing. reduction none keeps them, sum adds them,
// mean divides the sum by the weights counted. The label's log-probability
// and weight are picked by comparing an iota over C with the label (no
// gather, so a label such as -100 reads nothing); softmax's log-
// probabilities are its second output.
bool Importer::classLoss(bool softmax) {
  mlir::Value scores, labels, weights;
  if (!value(0, scores) || !value(1, labels))
    return false;
  if (hasInput(2) && !value(2, weights))
    return false;
  llvm::ArrayRef<int64_t> ss = shape(scores), sl = shape(labels);
  mlir::Type e = element(scores);
  if (!llvm::isa<mlir::FloatType>(e))
    return fail("its input is not a float tensor");
  if (ss.size() < 2)
    return fail("the input is " + shapeText(ss) + ": expected [N, C, D...]");
  llvm::SmallVector<int64_t> expected = {ss[0]}, kept = {0};
  for (int64_t d = 2; d < int64_t(ss.size()); ++d) {
    expected.push_back(ss[d]);
    kept.push_back(d);
  }
  if (sl != llvm::ArrayRef<int64_t>(expected))
    return fail("the labels are " + shapeText(sl) + ": expected " +
                shapeText(expected) + " for an input " + shapeText(ss));
  if (!element(labels).isInteger(64) && !element(labels).isInteger(32))
    return fail("the labels are not INT64 or INT32");
  if (weights && shape(weights) != llvm::ArrayRef<int64_t>{ss[1]})
    return fail("the weights are " + shapeText(shape(weights)) +
                ": expected [" + std::to_string(ss[1]) + "], one per class");
  std::string reduction = stringAttr("reduction", "mean");
  if (reduction != "mean" && reduction != "sum" && reduction != "none")
    return fail("reduction is '" + reduction + "': expected mean, sum or none");
  mlir::Value logProb = scores;
  if (softmax)
    logProb = b_.create<kiln::LogSoftmaxOp>(loc(".log_prob"), scores.getType(),
                                            scores, b_.getI64IntegerAttr(1));
  mlir::Type i64 = b_.getI64Type(), flags = type(ss, b_.getI1Type());
  mlir::Value label = labels;
  if (!element(label).isInteger(64))
    label = b_.create<kiln::ConvertOp>(loc(".label"), type(sl, i64), label);
  mlir::Value hit = b_.create<kiln::CompareOp>(
      loc(".hit"), flags, kiln::CompareDirection::eq,
      b_.create<kiln::IotaOp>(loc(".class"), type(ss, i64),
                              b_.getI64IntegerAttr(1)),
      g_.broadcast(nodeName_ + ".label_broadcast", label, kept, ss));
  auto picked = [&](mlir::Value v, const std::string &at) -> mlir::Value {
    mlir::Value chosen = b_.create<kiln::SelectOp>(
        loc(at + ".chosen"), v.getType(), hit, v, splat(0.0, e, ss));
    return b_.create<kiln::ReduceOp>(loc(at), type(sl, e),
                                     kiln::ReduceKind::sum, chosen, arr({1}));
  };
  // Each element's weight: its label's, or 1; 0 where the label is ignored.
  mlir::Value weight =
      weights ? picked(g_.broadcast(nodeName_ + ".weight_broadcast", weights,
                                    {1}, ss),
                       ".weight")
              : splat(1.0, e, sl);
  if (const onnx::Attribute *ignore = node_->attribute("ignore_index")) {
    mlir::Value counted = b_.create<kiln::CompareOp>(
        loc(".counted"), type(sl, b_.getI1Type()), kiln::CompareDirection::ne,
        label, splat(double(ignore->i), i64, sl));
    weight = b_.create<kiln::SelectOp>(loc(".counted_weight"), weight.getType(),
                                       counted, weight, splat(0.0, e, sl));
  }
  mlir::Value loss = b_.create<kiln::MulOp>(
      loc(".weighted"), weight.getType(),
      b_.create<kiln::NegOp>(loc(".negative"), weight.getType(),
                             picked(logProb, ".picked")),
      weight);
  if (reduction != "none") {
    llvm::SmallVector<int64_t> all;
    for (int64_t d = 0; d < int64_t(sl.size()); ++d)
      all.push_back(d);
    mlir::Type scalar = type({}, e);
    mlir::Value total = b_.create<kiln::ReduceOp>(
        reduction == "sum" ? loc() : loc(".sum"), scalar, kiln::ReduceKind::sum,
        loss, arr(all));
    if (reduction == "mean")
      total = b_.create<kiln::DivOp>(
          loc(), scalar, total,
          b_.create<kiln::ReduceOp>(loc(".weights"), scalar,
                                    kiln::ReduceKind::sum, weight, arr(all)));
    loss = total;
  }
  setOutput(0, loss);
  if (softmax && node_->outputs.size() > 1 && !node_->outputs[1].empty())
    setOutput(1, logProb);
  return true;
}

// TopK (K a constant, axis, largest, sorted). A small K is K rounds of
// kiln.argmax along the axis, each over X (or -X for the smallest) with
// the elements taken so far at -infinity. A round whose best is -infinity
// (only -infinity is left untaken, or X holds NaN, which argmax counts as
// largest, ...) takes the first untaken element instead, so ties come out
// in index order, as ONNX says. A larger K (torch.sort and argsort export
// TopK with K the whole axis) takes the elements' ranks (topKByRank),
// which compares every pair along the axis, where there are at most
// kMaxRankPairs pairs in all; else rounds again, up to kMaxRounds. The
// indices (INT64) are the rounds' results side by side; the values are X
// gathered at them (GatherElements' gather), so the gradient reaches X at
// the chosen elements. Always sorted.
bool Importer::topK() {
  static constexpr int64_t kRoundsBeforeRanks = 16;
  static constexpr int64_t kMaxRankPairs = int64_t(1) << 24;
  static constexpr int64_t kMaxRounds = 256;
  mlir::Value x;
  if (!floatValue(0, x))
    return false;
  int64_t rank = shape(x).size(), axis, k;
  if (!axisOf(x, -1, axis))
    return false;
  if (opset_ >= 10) {
    if (!staticIndex(1, "K", k))
      return false;
  } else {
    k = intAttr("k", 0);
  }
  int64_t n = shape(x)[axis];
  if (k < 1 || k > n)
    return fail("K is " + std::to_string(k) + " along axis " +
                std::to_string(axis) + " of size " + std::to_string(n) +
                ": expected 1 to " + std::to_string(n));
  bool largest = intAttr("largest", 1) != 0;
  llvm::ArrayRef<int64_t> dims = shape(x);
  mlir::Type t = x.getType();
  mlir::Value key =
      largest ? x : b_.create<kiln::NegOp>(loc(".neg"), t, x).getResult();
  // The pairs to rank, saturated at kMaxRankPairs + 1 (no overflow).
  int64_t elements = product(dims);
  int64_t pairs =
      n > kMaxRankPairs / elements ? kMaxRankPairs + 1 : elements * n;
  if (k > kRoundsBeforeRanks && pairs <= kMaxRankPairs) {
    mlir::Value indices = topKByRank(key, axis, k);
    setOutput(0, gatherElementsAt(x, indices, axis));
    if (node_->outputs.size() > 1)
      setOutput(1, indices);
    return true;
  }
  if (k > kMaxRounds)
    return fail("K is " + std::to_string(k) + " along an axis of " +
                std::to_string(n) + " in " + shapeText(dims) +
                ": kiln import takes TopK as K argmax rounds, at most " +
                std::to_string(kMaxRounds) + ", or by ranking every pair " +
                "along the axis, at most " + std::to_string(kMaxRankPairs) +
                " pairs (" +
                (n > std::numeric_limits<int64_t>::max() / elements
                     ? std::string("more than 2^63")
                     : std::to_string(elements * n)) +
                " here)");
  llvm::SmallVector<int64_t> reduced, kept;
  for (int64_t d = 0; d < rank; ++d)
    if (d != axis) {
      reduced.push_back(dims[d]);
      kept.push_back(d);
    }
  mlir::Type f = element(x), i64 = b_.getI64Type(), i1 = b_.getI1Type();
  mlir::Type flags = type(dims, i1);
  mlir::Value lowest = splat(-INFINITY, f, dims);
  mlir::Value iota = b_.create<kiln::IotaOp>(loc(".iota"), type(dims, i64),
                                             b_.getI64IntegerAttr(axis));
  mlir::Value untakenKey = splat(1.0, f, dims), takenKey = splat(0.0, f, dims);
  mlir::Value taken;
  llvm::SmallVector<mlir::Value> picked;
  for (int64_t r = 0; r < k; ++r) {
    std::string at = ".round" + std::to_string(r);
    mlir::Value masked = taken
                             ? b_.create<kiln::SelectOp>(loc(at + ".masked"), t,
                                                         taken, lowest, key)
                                   .getResult()
                             : key;
    mlir::Value index =
        b_.create<kiln::ArgmaxOp>(loc(at + ".argmax"), type(reduced, i64),
                                  masked, b_.getI64IntegerAttr(axis));
    if (taken) {
      mlir::Value best =
          b_.create<kiln::ReduceOp>(loc(at + ".best"), type(reduced, f),
                                    kiln::ReduceKind::max, masked, arr({axis}));
      mlir::Value none = b_.create<kiln::CompareOp>(
          loc(at + ".none"), type(reduced, i1), kiln::CompareDirection::eq,
          best, splat(-INFINITY, f, reduced));
      mlir::Value open = b_.create<kiln::SelectOp>(loc(at + ".open"), t, taken,
                                                   takenKey, untakenKey);
      mlir::Value first =
          b_.create<kiln::ArgmaxOp>(loc(at + ".first"), type(reduced, i64),
                                    open, b_.getI64IntegerAttr(axis));
      index = b_.create<kiln::SelectOp>(loc(at + ".index"), type(reduced, i64),
                                        none, first, index);
    }
    picked.push_back(index);
    if (r + 1 == k)
      break;
    mlir::Value hit = b_.create<kiln::CompareOp>(
        loc(at + ".hit"), flags, kiln::CompareDirection::eq, iota,
        g_.broadcast(nodeName_ + at + ".spread", index, kept, dims));
    taken = taken ? b_.create<kiln::SelectOp>(loc(at + ".taken"), flags, hit,
                                              hit, taken)
                        .getResult()
                  : hit;
  }
  llvm::SmallVector<int64_t> one(dims.begin(), dims.end()),
      out(dims.begin(), dims.end());
  one[axis] = 1;
  out[axis] = k;
  llvm::SmallVector<mlir::Value> columns;
  for (size_t r = 0; r < picked.size(); ++r)
    columns.push_back(g_.reshape(
        nodeName_ + ".round" + std::to_string(r) + ".column", picked[r], one));
  mlir::Value indices =
      k == 1
          ? columns.front()
          : b_.create<kiln::ConcatenateOp>(loc(".indices"), type(out, i64),
                                           columns, b_.getI64IntegerAttr(axis))
                .getResult();
  setOutput(0, gatherElementsAt(x, indices, axis));
  if (node_->outputs.size() > 1)
    setOutput(1, indices);
  return true;
}

mlir::Value Importer::topKByRank(mlir::Value key, int64_t axis, int64_t k) {
  llvm::ArrayRef<int64_t> dims = shape(key);
  int64_t rank = dims.size(), n = dims[axis], rows = 1;
  // The axis last, the others flattened into rows: [R, N].
  llvm::SmallVector<int64_t> perm = axisLastOrder(rank, axis), others;
  for (int64_t d = 0; d < rank; ++d)
    if (d != axis) {
      others.push_back(dims[d]);
      rows *= dims[d];
    }
  mlir::Value v = axis == rank - 1 ? key : permute(key, perm, ".rank_last");
  v = g_.reshape(nodeName_ + ".rank_rows", v, {rows, n});
  mlir::Type f = element(key), i64 = b_.getI64Type(), i1 = b_.getI1Type();
  llvm::SmallVector<int64_t> pairs = {rows, n, n};
  mlir::Type pairFlags = type(pairs, i1);
  // NaN keys as +infinity, with a flag that puts them first.
  mlir::Value nan = b_.create<kiln::CompareOp>(
      loc(".rank_nan"), type({rows, n}, i1), kiln::CompareDirection::ne, v, v);
  mlir::Value finite = b_.create<kiln::SelectOp>(
      loc(".rank_key"), v.getType(), nan, splat(INFINITY, f, {rows, n}), v);
  // Element j (axis 1) against element i (axis 2).
  auto spread = [&](mlir::Value x, int64_t along, const std::string &name) {
    return g_.broadcast(nodeName_ + name, x, {0, along}, pairs);
  };
  mlir::Value kj = spread(finite, 1, ".rank_kj"),
              ki = spread(finite, 2, ".rank_ki");
  mlir::Value nj = spread(nan, 1, ".rank_nj"), ni = spread(nan, 2, ".rank_ni");
  auto compare = [&](kiln::CompareDirection d, mlir::Value a, mlir::Value b,
                     const std::string &name) -> mlir::Value {
    return b_.create<kiln::CompareOp>(loc(name), pairFlags, d, a, b);
  };
  auto select = [&](mlir::Value c, mlir::Value a, mlir::Value b,
                    const std::string &name) -> mlir::Value {
    return b_.create<kiln::SelectOp>(loc(name), pairFlags, c, a, b);
  };
  mlir::Value j = b_.create<kiln::IotaOp>(loc(".rank_j"), type(pairs, i64),
                                          b_.getI64IntegerAttr(1));
  mlir::Value i = b_.create<kiln::IotaOp>(loc(".rank_i"), type(pairs, i64),
                                          b_.getI64IntegerAttr(2));
  mlir::Value lower = compare(kiln::CompareDirection::lt, j, i, ".rank_lower");
  mlir::Value greater = compare(kiln::CompareDirection::gt, kj, ki, ".rank_gt");
  mlir::Value equal = compare(kiln::CompareDirection::eq, kj, ki, ".rank_eq");
  // j before i: a larger key, or an equal one at a lower index; a NaN
  // before any other key, NaNs in index order.
  mlir::Value byValue =
      select(greater, greater, select(equal, lower, greater, ".rank_tie"),
             ".rank_value");
  mlir::Value before =
      select(nj, select(ni, lower, nj, ".rank_both_nan"),
             select(ni, nj, byValue, ".rank_not_nan"), ".rank_before");
  mlir::Value ranks = b_.create<kiln::ReduceOp>(
      loc(".ranks"), type({rows, n}, i64), kiln::ReduceKind::sum,
      b_.create<kiln::ConvertOp>(loc(".rank_count"), type(pairs, i64), before),
      arr({1}));
  // Position p takes the element whose rank is p: [R, K, N] -> [R, K].
  llvm::SmallVector<int64_t> slots = {rows, k, n};
  mlir::Value atSlot = b_.create<kiln::CompareOp>(
      loc(".rank_at"), type(slots, i1), kiln::CompareDirection::eq,
      g_.broadcast(nodeName_ + ".rank_spread", ranks, {0, 2}, slots),
      b_.create<kiln::IotaOp>(loc(".rank_slot"), type(slots, i64),
                              b_.getI64IntegerAttr(1)));
  mlir::Value element = b_.create<kiln::IotaOp>(
      loc(".rank_element"), type(slots, i64), b_.getI64IntegerAttr(2));
  mlir::Value chosen = b_.create<kiln::ReduceOp>(
      loc(".rank_indices"), type({rows, k}, i64), kiln::ReduceKind::sum,
      b_.create<kiln::SelectOp>(loc(".rank_pick"), type(slots, i64), atSlot,
                                element, splat(0, i64, slots)),
      arr({2}));
  // Back to the input's layout, K along |axis|.
  others.push_back(k);
  mlir::Value out = g_.reshape(nodeName_ + ".rank_unrows", chosen, others);
  if (axis == rank - 1)
    return out;
  return permute(out, mlir::invertPermutationVector(perm), ".rank_back");
}

} // namespace kiln::cli::onnx_import
