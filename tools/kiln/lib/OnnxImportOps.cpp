//===- OnnxImportOps.cpp - each ONNX op as kiln ops -----------------------===//
//
// The importer's lowering of the ONNX ops it reads (OnnxImporter.h): each
// works out its result type from ONNX's rules, checks what kiln cannot
// honor, and builds the kiln ops with the node's name as their location.
// Activations are in OnnxImportActivations.cpp; convolutions and pools in
// OnnxImportConv.cpp; gathers, scatters, the index-finding ops and the
// class losses in OnnxImportIndexed.cpp.
//
//===----------------------------------------------------------------------===//

#include "tools/kiln/lib/OnnxImporter.h"

#include "llvm/ADT/STLExtras.h"

#include <algorithm>
#include <cmath>

namespace kiln::cli::onnx_import {

// Sum and Mean of one or more inputs, broadcast together.
bool Importer::variadic(const std::string &op) {
  llvm::SmallVector<mlir::Value> inputs;
  llvm::SmallVector<int64_t> dims;
  for (size_t i = 0; i < node_->inputs.size(); ++i) {
    mlir::Value v;
    if (!value(i, v))
      return false;
    llvm::SmallVector<int64_t> next;
    if (!broadcastShapes(dims, shape(v), next))
      return false;
    dims = next;
    inputs.push_back(v);
  }
  if (inputs.empty())
    return fail("has no inputs");
  if (!oneElementType(inputs))
    return false;
  mlir::Value y = broadcastTo(inputs[0], dims);
  for (size_t i = 1; i < inputs.size(); ++i)
    y = b_.create<kiln::AddOp>(loc(i + 1 == inputs.size() && op == "Sum" ? ""
                                                                          : ".sum"),
                               y.getType(), y, broadcastTo(inputs[i], dims));
  if (op == "Mean" && inputs.size() > 1)
    y = b_.create<kiln::MulOp>(loc(), y.getType(), y,
                               splat(1.0 / inputs.size(), element(y), dims));
  setOutput(0, y);
  return true;
}

bool Importer::oneElementType(llvm::MutableArrayRef<mlir::Value> values) {
  mlir::Type target;
  for (auto [i, v] : llvm::enumerate(values))
    if (!statics_.count(node_->inputs[i])) {
      target = element(v);
      break;
    }
  for (auto [i, v] : llvm::enumerate(values)) {
    if (target && element(v) != target && statics_.count(node_->inputs[i]) &&
        llvm::isa<mlir::FloatType>(element(v)) &&
        llvm::isa<mlir::FloatType>(target)) {
      v = constant(statics_[node_->inputs[i]],
                   nodeName_ + ".constant_" + std::to_string(i), target);
      if (!v)
        return false;
    }
    if (element(v) != element(values[0])) {
      std::string first, other;
      llvm::raw_string_ostream(first) << element(values[0]);
      llvm::raw_string_ostream(other) << element(v);
      return fail("its inputs have different element types: input 0 ('" +
                  node_->inputs[0] + "') is " + first + ", input " +
                  std::to_string(i) + " ('" + node_->inputs[i] + "') " + other);
    }
  }
  return true;
}

bool Importer::operandPair(mlir::Value &a, mlir::Value &c) {
  mlir::Value pair[2];
  if (!value(0, pair[0]) || !value(1, pair[1]) || !oneElementType(pair))
    return false;
  a = pair[0];
  c = pair[1];
  llvm::SmallVector<int64_t> dims;
  if (!broadcastShapes(shape(a), shape(c), dims))
    return false;
  a = broadcastTo(a, dims);
  c = broadcastTo(c, dims);
  return true;
}

// Mod of data (of values known at import: foldStaticData). fmod 1 is
// kiln.rem, the remainder with the dividend's sign (C's fmod, exact, and
// %); fmod 0, which ONNX allows only for integers, is Python's %: a
// nonzero remainder whose sign differs from the divisor's gets the
// divisor added.
bool Importer::mod() {
  mlir::Value a, c;
  if (!operandPair(a, c))
    return false;
  bool fmod = intAttr("fmod", 0) != 0;
  mlir::Type e = element(a);
  if (!fmod && llvm::isa<mlir::FloatType>(e))
    return fail("fmod is 0 on floating-point inputs (ONNX requires 1)");
  mlir::Type t = a.getType();
  mlir::Value r = b_.create<kiln::RemOp>(fmod ? loc() : loc(".rem"), t, a, c);
  if (fmod) {
    setOutput(0, r);
    return true;
  }
  mlir::Type flags = type(shape(a), b_.getI1Type());
  mlir::Value zero = splat(0.0, e, shape(a));
  using Direction = kiln::CompareDirection;
  auto is = [&](mlir::Value v, Direction d, const std::string &at) {
    return b_.create<kiln::CompareOp>(loc(at), flags, d, v, zero).getResult();
  };
  // r < 0 < c, or r > 0 > c (where r > 0, c < 0; elsewhere r > 0: false).
  mlir::Value positive = is(r, Direction::gt, ".rem_positive");
  mlir::Value differ = b_.create<kiln::SelectOp>(
      loc(".signs_differ"), flags, is(r, Direction::lt, ".rem_negative"),
      is(c, Direction::gt, ".divisor_positive"),
      b_.create<kiln::SelectOp>(loc(".positive_differs"), flags, positive,
                                is(c, Direction::lt, ".divisor_negative"),
                                positive));
  setOutput(0, b_.create<kiln::SelectOp>(
                   loc(), t, differ,
                   b_.create<kiln::AddOp>(loc(".wrapped"), t, r, c), r));
  return true;
}

bool Importer::binary(const std::string &op) {
  if (node_->inputs.size() != 2)
    return fail("has " + std::to_string(node_->inputs.size()) +
                " inputs: kiln import reads " + op + " of two");
  mlir::Value a, c;
  if (!operandPair(a, c))
    return false;
  mlir::Location l = loc();
  mlir::Type t = a.getType();
  mlir::Value y;
  if (op == "Add")
    y = b_.create<kiln::AddOp>(l, t, a, c);
  else if (op == "Sub")
    y = b_.create<kiln::SubOp>(l, t, a, c);
  else if (op == "Mul")
    y = b_.create<kiln::MulOp>(l, t, a, c);
  else if (op == "Div")
    y = b_.create<kiln::DivOp>(l, t, a, c);
  else if (op == "Pow")
    y = b_.create<kiln::PowOp>(l, t, a, c);
  else if (op == "Max")
    y = b_.create<kiln::MaxOp>(l, t, a, c);
  else
    y = b_.create<kiln::MinOp>(l, t, a, c);
  setOutput(0, y);
  return true;
}

bool Importer::gemm() {
  mlir::Value a, w;
  int64_t transA = intAttr("transA", 0), transB = intAttr("transB", 0);
  if (hasInput(1) && !node_->inputs[1].empty()) {
    const std::string &name = node_->inputs[1];
    if (auto it = parameterTensors_.find(name);
        it != parameterTensors_.end() && it->second->dims.size() == 2 &&
        !fanIn_.count(name))
      fanIn_[name] = it->second->dims[transB ? 1 : 0];
    if (hasInput(2) && parameterTensors_.count(node_->inputs[2]) &&
        fanIn_.count(name) && !fanIn_.count(node_->inputs[2]))
      fanIn_[node_->inputs[2]] = fanIn_[name];
  }
  if (!value(0, a) || !value(1, w))
    return false;
  if (shape(a).size() != 2 || shape(w).size() != 2)
    return fail("A is " + shapeText(shape(a)) + " and B " + shapeText(shape(w)) +
                ": Gemm takes two matrices");
  int64_t m = shape(a)[transA ? 1 : 0], k = shape(a)[transA ? 0 : 1];
  int64_t kb = shape(w)[transB ? 1 : 0], n = shape(w)[transB ? 0 : 1];
  if (k != kb)
    return fail("A is " + shapeText(shape(a)) + " and B " + shapeText(shape(w)) +
                " (transA " + std::to_string(transA) + ", transB " +
                std::to_string(transB) + "): the inner dimensions differ");
  mlir::Type e = element(a);
  mlir::Value y = b_.create<kiln::DotGeneralOp>(
      loc(".matmul"), type({m, n}, e), a, w, arr({}), arr({}),
      arr({transA ? 0 : 1}), arr({transB ? 1 : 0}));
  double alpha = floatAttr("alpha", 1.0), beta = floatAttr("beta", 1.0);
  if (alpha != 1.0f)
    y = b_.create<kiln::MulOp>(loc(".alpha"), y.getType(), y,
                               splat(alpha, e, {m, n}));
  if (hasInput(2)) {
    mlir::Value c;
    if (!value(2, c))
      return false;
    llvm::SmallVector<int64_t> dims;
    if (!broadcastShapes({m, n}, shape(c), dims))
      return false;
    if (dims != llvm::ArrayRef<int64_t>{m, n})
      return fail("C " + shapeText(shape(c)) + " does not broadcast to " +
                  shapeText({m, n}));
    c = broadcastTo(c, dims);
    if (beta != 1.0f)
      c = b_.create<kiln::MulOp>(loc(".beta"), c.getType(), c, splat(beta, e, {m, n}));
    y = b_.create<kiln::AddOp>(loc(), y.getType(), y, c);
  }
  setOutput(0, y);
  return true;
}

bool Importer::matmul() {
  if (hasInput(1)) {
    const std::string &name = node_->inputs[1];
    if (auto it = parameterTensors_.find(name);
        it != parameterTensors_.end() && it->second->dims.size() >= 2 &&
        !fanIn_.count(name))
      fanIn_[name] = it->second->dims[it->second->dims.size() - 2];
  }
  mlir::Value a, w;
  if (!value(0, a) || !value(1, w))
    return false;
  llvm::ArrayRef<int64_t> sa = shape(a), sb = shape(w);
  if (sa.size() < 2 || sb.size() < 2)
    return fail("A is " + shapeText(sa) + " and B " + shapeText(sb) +
                ": kiln import reads MatMul of rank 2 or more");
  int64_t ra = sa.size(), rb = sb.size();
  if (sa[ra - 1] != sb[rb - 2])
    return fail("A is " + shapeText(sa) + " and B " + shapeText(sb) +
                ": the inner dimensions differ");
  llvm::SmallVector<int64_t> dims;
  mlir::Value y;
  if (rb == 2) {
    // [..., M, K] x [K, N]: contract the last dimension of A.
    dims.assign(sa.begin(), sa.end() - 1);
    dims.push_back(sb[1]);
    y = b_.create<kiln::DotGeneralOp>(loc(), type(dims, element(a)), a, w, arr({}),
                                      arr({}), arr({ra - 1}), arr({0}));
  } else {
    if (ra != rb || sa.drop_back(2) != sb.drop_back(2))
      return fail("A is " + shapeText(sa) + " and B " + shapeText(sb) +
                  ": kiln import reads batched MatMul with equal batch "
                  "dimensions");
    llvm::SmallVector<int64_t> batch;
    for (int64_t i = 0; i < ra - 2; ++i)
      batch.push_back(i);
    dims.assign(sa.begin(), sa.end() - 1);
    dims.push_back(sb[rb - 1]);
    y = b_.create<kiln::DotGeneralOp>(loc(), type(dims, element(a)), a, w,
                                      arr(batch), arr(batch), arr({ra - 1}),
                                      arr({rb - 2}));
  }
  setOutput(0, y);
  return true;
}

bool Importer::axes(int64_t inputOpset, std::optional<std::vector<int64_t>> &out) {
  out = intsAttr("axes");
  if (!out && opset_ >= inputOpset && hasInput(1)) {
    const Static *s = staticInput(1);
    if (!s)
      return false;
    out.emplace();
    for (double v : s->values)
      out->push_back(static_cast<int64_t>(v));
  }
  return true;
}

// Reshape, Flatten, Squeeze and Unsqueeze: a new shape for the same data.
bool Importer::reshapeLike(const std::string &op) {
  mlir::Value x;
  bool isStatic = hasInput(0) && statics_.count(node_->inputs[0]);
  std::vector<int64_t> in;
  if (isStatic)
    in = statics_[node_->inputs[0]].dims;
  else if (!value(0, x))
    return false;
  else
    in.assign(shape(x).begin(), shape(x).end());
  int64_t rank = in.size();
  std::vector<int64_t> dims;
  if (op == "Flatten") {
    int64_t axis = intAttr("axis", 1);
    if (!normalizeAxis(axis, rank + 1, "axis"))
      return false;
    dims = {product(llvm::ArrayRef(in).take_front(axis)),
            product(llvm::ArrayRef(in).drop_front(axis))};
  } else if (op == "Reshape") {
    const Static *s = staticInput(1);
    if (!s)
      return false;
    bool allowZero = intAttr("allowzero", 0) != 0;
    int64_t infer = -1, known = 1;
    for (size_t i = 0; i < s->values.size(); ++i) {
      int64_t d = static_cast<int64_t>(s->values[i]);
      if (d == 0 && !allowZero) {
        if (static_cast<int64_t>(i) >= rank)
          return fail("shape copies dimension " + std::to_string(i) +
                      " of a rank-" + std::to_string(rank) + " input");
        d = in[i];
      }
      if (d == -1) {
        if (infer >= 0)
          return fail("shape has two -1 dimensions");
        infer = i;
        dims.push_back(1);
        continue;
      }
      if (d < 0)
        return fail("shape has dimension " + std::to_string(d));
      dims.push_back(d);
      known *= d;
    }
    if (infer >= 0) {
      if (known == 0 || product(in) % known != 0)
        return fail("cannot infer the -1 of shape for " + std::to_string(product(in)) +
                    " elements");
      dims[infer] = product(in) / known;
    }
  } else {
    std::optional<std::vector<int64_t>> list;
    if (!axes(13, list))
      return false;
    if (op == "Squeeze") {
      std::set<int64_t> drop;
      for (int64_t a : list.value_or(std::vector<int64_t>{})) {
        if (!normalizeAxis(a, rank, "axis"))
          return false;
        if (in[a] != 1)
          return fail("squeezes dimension " + std::to_string(a) + " of size " +
                      std::to_string(in[a]));
        drop.insert(a);
      }
      for (int64_t d = 0; d < rank; ++d)
        if (list ? !drop.count(d) : in[d] != 1)
          dims.push_back(in[d]);
    } else {
      if (!list)
        return fail("has no axes");
      int64_t out = rank + list->size();
      std::set<int64_t> add;
      for (int64_t a : *list) {
        if (!normalizeAxis(a, out, "axis"))
          return false;
        if (!add.insert(a).second)
          return fail("axes names axis " + std::to_string(a) + " twice");
      }
      for (int64_t d = 0, next = 0; d < out; ++d)
        dims.push_back(add.count(d) ? 1 : in[next++]);
    }
  }
  if (product(dims) != product(in))
    return fail("reshapes " + shapeText(in) + " (" + std::to_string(product(in)) +
                " elements) to " + shapeText(dims));
  if (isStatic) {
    Static s = statics_[node_->inputs[0]];
    s.dims = dims;
    setStatic(0, std::move(s));
    return true;
  }
  setOutput(0, dims == in ? x : g_.reshape(nodeName_, x, dims));
  return true;
}

bool Importer::transpose() {
  mlir::Value x;
  if (!value(0, x))
    return false;
  int64_t rank = shape(x).size();
  std::vector<int64_t> perm;
  if (std::optional<std::vector<int64_t>> p = intsAttr("perm")) {
    perm = *p;
  } else {
    for (int64_t d = rank - 1; d >= 0; --d)
      perm.push_back(d);
  }
  std::vector<int64_t> sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t d = 0; d < rank; ++d)
    if (static_cast<int64_t>(sorted.size()) != rank || sorted[d] != d)
      return fail("perm is not a permutation of the " + std::to_string(rank) +
                  " dimensions");
  llvm::SmallVector<int64_t> dims;
  for (int64_t p : perm)
    dims.push_back(shape(x)[p]);
  setOutput(0, b_.create<kiln::TransposeOp>(loc(), type(dims, element(x)), x, arr(perm)));
  return true;
}

bool Importer::concat() {
  llvm::SmallVector<mlir::Value> inputs;
  for (size_t i = 0; i < node_->inputs.size(); ++i) {
    mlir::Value v;
    if (!value(i, v))
      return false;
    inputs.push_back(v);
  }
  if (inputs.empty())
    return fail("has no inputs");
  int64_t rank = shape(inputs[0]).size(), axis;
  if (!axisOf(inputs[0], 0, axis))
    return false;
  llvm::SmallVector<int64_t> dims(shape(inputs[0]).begin(), shape(inputs[0]).end());
  dims[axis] = 0;
  for (mlir::Value v : inputs) {
    if (static_cast<int64_t>(shape(v).size()) != rank)
      return fail("its inputs have different ranks");
    dims[axis] += shape(v)[axis];
  }
  setOutput(0, b_.create<kiln::ConcatenateOp>(loc(), type(dims, element(inputs[0])),
                                              inputs, b_.getI64IntegerAttr(axis)));
  return true;
}

bool Importer::softmax(bool log) {
  mlir::Value x;
  if (!value(0, x))
    return false;
  int64_t rank = shape(x).size(), axis;
  if (!axisOf(x, opset_ >= 13 ? -1 : 1, axis))
    return false;
  // Before opset 13 the input was flattened to 2-D at axis: the same as
  // one dimension only when axis is the last.
  if (opset_ < 13 && axis != rank - 1)
    return fail("opset " + std::to_string(opset_) + " softmax over dimensions " +
                std::to_string(axis) + ".. of a rank-" + std::to_string(rank) +
                " input: export with opset 13 or later");
  mlir::Value y =
      log ? b_.create<kiln::LogSoftmaxOp>(loc(), x.getType(), x, b_.getI64IntegerAttr(axis))
                .getResult()
          : b_.create<kiln::SoftmaxOp>(loc(), x.getType(), x, b_.getI64IntegerAttr(axis))
                .getResult();
  setOutput(0, y);
  return true;
}

// ReduceMean, ReduceSum, ReduceMax, ReduceMin, ReduceProd, and the
// composite ones:
// ReduceL1 (sum of |x|), ReduceL2 (sqrt of the sum of squares),
// ReduceSumSquare, ReduceLogSum (log of the sum) and ReduceLogSumExp
// (log(sum(exp(x - m))) + m with m the maximum, held constant for the
// gradient, which is then the softmax).
bool Importer::reduce(const std::string &op) {
  mlir::Value x;
  if (!value(0, x))
    return false;
  int64_t rank = shape(x).size();
  kiln::ReduceKind kind = op == "ReduceMean"   ? kiln::ReduceKind::mean
                          : op == "ReduceMax"  ? kiln::ReduceKind::max
                          : op == "ReduceMin"  ? kiln::ReduceKind::min
                          : op == "ReduceProd" ? kiln::ReduceKind::prod
                                               : kiln::ReduceKind::sum;
  std::optional<std::vector<int64_t>> list;
  // Axes became an input in opset 13 for ReduceSum, 18 for the others.
  if (!axes(op == "ReduceSum" ? 13 : 18, list))
    return false;
  std::set<int64_t> reduced;
  if (!list || list->empty()) {
    if (intAttr("noop_with_empty_axes", 0)) {
      setOutput(0, x);
      return true;
    }
    for (int64_t d = 0; d < rank; ++d)
      reduced.insert(d);
  }
  for (int64_t a : list.value_or(std::vector<int64_t>{})) {
    if (!normalizeAxis(a, rank, "axis"))
      return false;
    reduced.insert(a);
  }
  llvm::SmallVector<int64_t> dims, kept, dimsList(reduced.begin(), reduced.end());
  for (int64_t d = 0; d < rank; ++d) {
    if (!reduced.count(d))
      dims.push_back(shape(x)[d]);
    kept.push_back(reduced.count(d) ? 1 : shape(x)[d]);
  }
  bool composite = kind == kiln::ReduceKind::sum && op != "ReduceSum";
  if (composite && !llvm::isa<mlir::FloatType>(element(x)))
    return fail("its input is not floating-point");
  mlir::Type t = x.getType();
  mlir::Value terms = x, shift;
  if (op == "ReduceL1") {
    terms = b_.create<kiln::AbsOp>(loc(".abs"), t, x);
  } else if (op == "ReduceL2" || op == "ReduceSumSquare") {
    terms = b_.create<kiln::MulOp>(loc(".square"), t, x, x);
  } else if (op == "ReduceLogSumExp") {
    mlir::Value max = b_.create<kiln::ReduceOp>(loc(".max"), type(dims, element(x)),
                                                kiln::ReduceKind::max, x, arr(dimsList));
    shift = b_.create<kiln::StopGradientOp>(loc(".max_constant"), max.getType(), max);
    llvm::SmallVector<int64_t> keptDims;
    for (int64_t d = 0; d < rank; ++d)
      if (!reduced.count(d))
        keptDims.push_back(d);
    mlir::Value wide = g_.broadcast(nodeName_ + ".max_broadcast", shift, keptDims, shape(x));
    terms = b_.create<kiln::ExpOp>(
        loc(".exp"), t, b_.create<kiln::SubOp>(loc(".shifted"), t, x, wide));
  }
  mlir::Value y = b_.create<kiln::ReduceOp>(composite ? loc(".sum") : loc(".reduce"),
                                            type(dims, element(x)), kind, terms,
                                            arr(dimsList));
  mlir::Type rt = y.getType();
  if (op == "ReduceL2")
    y = b_.create<kiln::SqrtOp>(loc(".reduce"), rt, y);
  else if (op == "ReduceLogSum")
    y = b_.create<kiln::LogOp>(loc(".reduce"), rt, y);
  else if (op == "ReduceLogSumExp")
    y = b_.create<kiln::AddOp>(loc(".reduce"), rt, b_.create<kiln::LogOp>(loc(".log"), rt, y),
                               shift);
  if (intAttr("keepdims", 1))
    y = g_.reshape(nodeName_, y, kept);
  setOutput(0, y);
  return true;
}

// LpNormalization: X divided by its L1 or L2 norm along an axis.
bool Importer::lpNormalization() {
  mlir::Value x;
  if (!value(0, x))
    return false;
  int64_t rank = shape(x).size(), axis, p = intAttr("p", 2);
  if (!axisOf(x, -1, axis))
    return false;
  if (p != 1 && p != 2)
    return fail("p is " + std::to_string(p) + ": expected 1 or 2");
  mlir::Type t = x.getType();
  mlir::Value terms = p == 1 ? b_.create<kiln::AbsOp>(loc(".abs"), t, x).getResult()
                             : b_.create<kiln::MulOp>(loc(".square"), t, x, x).getResult();
  llvm::SmallVector<int64_t> dims, keptDims;
  for (int64_t d = 0; d < rank; ++d)
    if (d != axis) {
      dims.push_back(shape(x)[d]);
      keptDims.push_back(d);
    }
  mlir::Value norm = b_.create<kiln::ReduceOp>(loc(".sum"), type(dims, element(x)),
                                               kiln::ReduceKind::sum, terms, arr({axis}));
  if (p == 2)
    norm = b_.create<kiln::SqrtOp>(loc(".norm"), norm.getType(), norm);
  setOutput(0, b_.create<kiln::DivOp>(
                   loc(), t, x, g_.broadcast(nodeName_ + ".norm_broadcast", norm, keptDims,
                                             shape(x))));
  return true;
}

bool Importer::layerNorm() {
  mlir::Value x, scale, bias;
  if (!value(0, x) || !value(1, scale))
    return false;
  int64_t axis;
  if (!axisOf(x, -1, axis))
    return false;
  llvm::ArrayRef<int64_t> normalized = shape(x).drop_front(axis);
  if (node_->outputs.size() > 1 &&
      llvm::any_of(llvm::ArrayRef(node_->outputs).drop_front(),
                   [](const std::string &o) { return !o.empty(); }))
    return fail("its Mean and InvStdDev outputs are not supported");
  if (shape(scale) != normalized)
    return fail("Scale is " + shapeText(shape(scale)) + ": expected " +
                shapeText(normalized));
  if (hasInput(2)) {
    if (!value(2, bias))
      return false;
  } else {
    bias = splat(0.0, element(x), normalized);
  }
  if (shape(bias) != normalized)
    return fail("B is " + shapeText(shape(bias)) + ": expected " + shapeText(normalized));
  setOutput(0,
            b_.create<kiln::LayerNormOp>(
                loc(), x.getType(), x, scale, bias, b_.getI64IntegerAttr(axis),
                b_.getF64FloatAttr(floatAttr("epsilon", 1e-5))));
  return true;
}

bool Importer::constantValue(size_t i, mlir::Value &out) {
  if (hasInput(i)) {
    const std::string &name = node_->inputs[i];
    if (auto it = parameterTensors_.find(name);
        it != parameterTensors_.end() && !values_.count(name)) {
      Static s;
      s.dims = it->second->dims;
      s.dataType = it->second->dataType;
      s.values = it->second->toDoubles();
      out = constant(s, name);
      return static_cast<bool>(out);
    }
  }
  return value(i, out);
}

bool Importer::runningStatistic(size_t i, int64_t channels, mlir::Type e,
                                double initial, mlir::Value &out) {
  if (!hasInput(i))
    return fail("input " + std::to_string(i) + " (the running " +
                (i == 3 ? "mean" : "variance") + ") is missing");
  const std::string &name = node_->inputs[i];
  auto it = parameterTensors_.find(name);
  if (it == parameterTensors_.end())
    return fail("input " + std::to_string(i) + " ('" + name +
                "') must be a floating-point initializer: the running " +
                (i == 3 ? "mean" : "variance") + " a batch norm in training mode keeps");
  if (it->second->dims != std::vector<int64_t>{channels})
    return fail("input_mean and input_var must be [" + std::to_string(channels) + "]");
  if (!e.isF32() && !e.isF64())
    return fail(
        "X is not FLOAT or DOUBLE: kiln import keeps running statistics in "
        "f32 (f64 for a model in float64) only");
  if (values_.count(name)) {
    // Fresh statistics (zeros, ones) that the exporter merged: each batch
    // norm gets its own, as for parameters (value()).
    if (!sharedUniform(name))
      return fail("reads the running statistic '" + name +
                  "', which another node reads too: each batch norm needs its own");
    std::string as = copyName(name);
    usedNames_.insert(as);
    out = g_.addModelState(as, {channels}, initial, e);
    copyTensors_.push_back({as, it->second});
    modelStateNames_.insert(as);
    return true;
  }
  out = g_.addModelState(name, {channels}, initial, e);
  values_[name] = out;
  usedNames_.insert(name);
  modelStateNames_.insert(name);
  return true;
}

// BatchNormalization over dimension 1 (the channels) of X [N, C, ...].
// training_mode 1 (an export with TrainingMode.PRESERVE of a batch norm in
// train mode): a training step normalizes with each batch's mean and biased
// variance and updates the running statistics (inputs 3 and 4, which become
// model state) as PyTorch does, running = momentum * running + (1 -
// momentum) * batch with the unbiased batch variance (the ONNX reference
// implementation takes the biased one; the file's models come from
// PyTorch); an eval step normalizes with the running statistics
// (kiln.mode_select). training_mode 0: the running statistics as constants,
// a frozen batch norm. Scale and B are parameters in both.
bool Importer::batchNorm() {
  mlir::Value x, scale, bias;
  if (!value(0, x) || !value(1, scale) || !value(2, bias))
    return false;
  llvm::ArrayRef<int64_t> sx = shape(x);
  if (sx.size() < 2)
    return fail("X is " + shapeText(sx) + ": expected [N, C, ...]");
  int64_t channels = sx[1];
  for (mlir::Value v : {scale, bias})
    if (shape(v) != llvm::ArrayRef<int64_t>{channels})
      return fail("scale and B must be [" + std::to_string(channels) + "], found " +
                  shapeText(shape(v)));
  bool training = intAttr("training_mode", 0) != 0 ||
                  (opset_ < 14 && node_->outputs.size() > 1 &&
                   !node_->outputs[1].empty());
  double epsilon = floatAttr("epsilon", 1e-5);
  if (training) {
    if (product(sx) / channels < 2)
      return fail("X is " + shapeText(sx) + ": a batch norm in training mode "
                  "needs more than one value per channel (PyTorch refuses it too)");
    mlir::Value runningMean, runningVar;
    if (!runningStatistic(3, channels, element(x), 0.0, runningMean) ||
        !runningStatistic(4, channels, element(x), 1.0, runningVar))
      return false;
    // ONNX's momentum is the running statistics' share, PyTorch's the
    // batch's: 0.9 in the file is PyTorch's 0.1.
    double momentum = 1.0 - floatAttr("momentum", 0.9);
    setOutput(0, g_.batchNorm(nodeName_, x, scale, bias, runningMean, runningVar,
                              epsilon, momentum));
    return true;
  }
  mlir::Value mean, var;
  if (!constantValue(3, mean) || !constantValue(4, var))
    return false;
  if (shape(mean) != llvm::ArrayRef<int64_t>{channels} ||
      shape(var) != llvm::ArrayRef<int64_t>{channels})
    return fail("input_mean and input_var must be [" + std::to_string(channels) + "]");
  setOutput(0, g_.normalizeChannels(nodeName_, x, mean, var, scale, bias, epsilon));
  return true;
}

// Dropout in training mode (input 2 a true constant; opset 12 and later)
// is kiln.dropout with the ratio (input 1, else attribute "ratio" before
// opset 12, else 0.5), reading the step counter, each node with its own
// seed. Otherwise, as at inference, the identity. The mask output (a
// training export names it) is not made: a node reading it fails as
// reading a tensor nothing gives.
bool Importer::dropout() {
  bool training = false;
  if (hasInput(2)) {
    const Static *mode = staticInput(2);
    if (!mode)
      return false;
    training = llvm::any_of(mode->values, [](double v) { return v != 0; });
  }
  double ratio = floatAttr("ratio", 0.5);
  if (hasInput(1)) {
    const Static *r = staticInput(1);
    if (!r)
      return false;
    if (r->values.size() != 1)
      return fail("ratio is not a scalar");
    ratio = r->values[0];
  }
  mlir::Value x;
  if (!value(0, x))
    return false;
  if (!training || ratio == 0) {
    setOutput(0, x);
    return true;
  }
  if (!(ratio > 0 && ratio < 1))
    return fail("ratio is " + std::to_string(ratio) + ": expected [0, 1)");
  if (!llvm::isa<mlir::FloatType>(element(x)))
    return fail("its input is not floating-point");
  if (!step_)
    step_ = g_.addStepCounter("step");
  setOutput(0, b_.create<kiln::DropoutOp>(loc(), x.getType(), x, step_,
                                          b_.getF64FloatAttr(ratio),
                                          b_.getI64IntegerAttr(nextDropoutSeed_++)));
  return true;
}

mlir::Value Importer::randomUniform(llvm::ArrayRef<int64_t> dims, mlir::Type e,
                                    const std::string &suffix) {
  if (!step_)
    step_ = g_.addStepCounter("step");
  return b_.create<kiln::RandomUniformOp>(
      loc(suffix), type(dims, e), step_,
      b_.getI64IntegerAttr(nextDropoutSeed_++));
}

// Multinomial: sample_size draws per row of X [batch, classes] (unnormalized
// log-probabilities) by the Gumbel-max trick: the argmax over the classes
// of X + g, g = -log(-log u) with u a kiln.random_uniform number per draw
// and class, is class c with probability softmax(X)_c. Integers (dtype
// INT32, the default, or INT64); no gradient reaches X.
bool Importer::multinomial() {
  mlir::Value x;
  if (!floatValue(0, x))
    return false;
  if (shape(x).size() != 2)
    return fail("its input is " + shapeText(shape(x)) +
                ": expected [batch, classes] log-probabilities");
  int64_t batch = shape(x)[0], classes = shape(x)[1];
  int64_t samples = intAttr("sample_size", 1);
  if (samples < 1)
    return fail("sample_size is " + std::to_string(samples) +
                ": expected 1 or more");
  mlir::Type out;
  if (!elementType(
          static_cast<int32_t>(intAttr("dtype", int64_t(DataType::Int32))), out,
          "its dtype"))
    return false;
  if (!out.isInteger(32) && !out.isInteger(64))
    return fail("its dtype is not INT32 or INT64");
  mlir::Type draw = element(x).isF64() ? b_.getF64Type() : b_.getF32Type();
  llvm::SmallVector<int64_t> dims = {batch, samples, classes};
  mlir::Type t = type(dims, draw);
  mlir::Value u = randomUniform(dims, draw, ".uniform");
  mlir::Value e = b_.create<kiln::NegOp>(
      loc(".exponential"), t, b_.create<kiln::LogOp>(loc(".log_u"), t, u));
  mlir::Value gumbel = b_.create<kiln::NegOp>(
      loc(".gumbel"), t, b_.create<kiln::LogOp>(loc(".log_exponential"), t, e));
  if (element(x) != draw)
    x = b_.create<kiln::ConvertOp>(loc(".logits"), type(shape(x), draw), x);
  mlir::Value logits =
      b_.create<kiln::StopGradientOp>(loc(".no_gradient"), x.getType(), x);
  mlir::Value scores =
      add(g_.broadcast(nodeName_ + ".rows", logits, {0, 2}, dims), gumbel,
          ".scores");
  setOutput(0, b_.create<kiln::ArgmaxOp>(loc(), type({batch, samples}, out),
                                         scores, b_.getI64IntegerAttr(2)));
  return true;
}

// RandomUniform, RandomNormal (a static shape), RandomUniformLike,
// RandomNormalLike (input 0's shape and, without dtype, type) and
// Bernoulli (1 where u < p). Each draws kiln.random_uniform numbers at the
// step counter (new numbers every step, as PyTorch's generator gives) with
// the next of the import's seeds, as dropout does: ONNX leaves the
// generator unspecified, so the seed attribute does not pick kiln's
// stream. A normal is Box-Muller of two uniforms, sqrt(-2 ln(1 - u1))
// cos(2 pi u2), in f32 (f64 for DOUBLE), then mean + scale times it. No
// gradient flows to the input of a Like op or to Bernoulli's p.
bool Importer::random(const std::string &op) {
  bool like = op == "RandomUniformLike" || op == "RandomNormalLike";
  bool bernoulli = op == "Bernoulli";
  bool normal = op == "RandomNormal" || op == "RandomNormalLike";
  llvm::SmallVector<int64_t> dims;
  mlir::Value input;
  mlir::Type e = b_.getF32Type();
  if (like || bernoulli) {
    if (!value(0, input))
      return false;
    dims.assign(shape(input).begin(), shape(input).end());
    e = element(input);
  } else {
    std::optional<std::vector<int64_t>> s = intsAttr("shape");
    if (!s)
      return fail("it has no shape attribute");
    if (s->empty() || llvm::any_of(*s, [](int64_t d) { return d < 1; }))
      return fail("its shape is " + shapeText(*s) +
                  ": expected one or more dimensions of 1 or more");
    dims.assign(s->begin(), s->end());
  }
  if (const onnx::Attribute *a = node_->attribute("dtype"))
    if (!elementType(int32_t(a->i), e, "its dtype"))
      return false;
  if (bernoulli && !llvm::isa<mlir::FloatType>(element(input)))
    return fail("its input (the probabilities) is not floating-point");
  if (!bernoulli && !llvm::isa<mlir::FloatType>(e))
    return fail("its dtype is not floating-point");
  // The numbers in f64 for DOUBLE, else f32 (whose largest number below
  // 1, 1 - 2^-24, keeps 1 - u above 0 for the logarithm).
  mlir::Type draw = bernoulli ? element(input) : e;
  if (!draw.isF64())
    draw = b_.getF32Type();
  mlir::Value u = randomUniform(dims, draw, ".uniform");
  mlir::Value y;
  if (bernoulli) {
    mlir::Value p = input;
    if (element(p) != draw)
      p = b_.create<kiln::ConvertOp>(loc(".probability"), type(dims, draw), p);
    mlir::Value hit =
        b_.create<kiln::CompareOp>(loc(".hit"), type(dims, b_.getI1Type()),
                                   kiln::CompareDirection::lt, u, p);
    setOutput(0, e.isInteger(1)
                     ? hit
                     : b_.create<kiln::ConvertOp>(loc(), type(dims, e), hit)
                           .getResult());
    return true;
  }
  if (normal) {
    mlir::Value u2 = randomUniform(dims, draw, ".uniform2");
    mlir::Value open = sub(splat(1.0, draw, dims), u, ".open");
    mlir::Value log = b_.create<kiln::LogOp>(loc(".log"), open.getType(), open);
    mlir::Value radius =
        b_.create<kiln::SqrtOp>(loc(".radius"), open.getType(),
                                mul(log, splat(-2.0, draw, dims), ".squared"));
    mlir::Value angle = mul(u2, splat(2.0 * M_PI, draw, dims), ".angle");
    mlir::Value cos =
        b_.create<kiln::CosOp>(loc(".cos"), angle.getType(), angle);
    y = mul(radius, cos, ".standard");
    double scale = floatAttr("scale", 1.0), mean = floatAttr("mean", 0.0);
    if (scale != 1.0)
      y = mul(y, splat(scale, draw, dims), ".scaled");
    if (mean != 0.0)
      y = add(y, splat(mean, draw, dims), ".shifted");
  } else {
    double low = floatAttr("low", 0.0), high = floatAttr("high", 1.0);
    if (!(high > low))
      return fail("high is " + std::to_string(high) + " and low " +
                  std::to_string(low) + ": expected high above low");
    y = u;
    if (high - low != 1.0)
      y = mul(y, splat(high - low, draw, dims), ".scaled");
    if (low != 0.0)
      y = add(y, splat(low, draw, dims), ".shifted");
  }
  if (draw != e)
    y = b_.create<kiln::ConvertOp>(loc(".type"), type(dims, e), y);
  setOutput(0, y);
  return true;
}

} // namespace kiln::cli::onnx_import
