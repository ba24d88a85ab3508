//===- OnnxImportControl.cpp - If, Loop and Scan as straight-line code ----===//
//
// kiln graphs are static, so ONNX's control flow is taken apart at import,
// as XLA's tracing takes a Python loop apart:
// - If whose condition is known at import (a constant or a computation on
//   shapes) imports the branch it takes in its place. A condition that
//   depends on data imports both branches and selects each output
//   (kiln.select, jnp.where's semantics): both run, the gradient reaches
//   only the branch taken, and the branches must give one shape.
// - Loop whose trip count and conditions are known at import is unrolled:
//   its body is imported once per iteration with the iteration number a
//   constant (so shapes and indices computed from it fold), the carried
//   values passed on, and each scan output stacked along a new axis 0.
// - Scan (opset 9 and later) is unrolled over its sequence: each scan
//   input's slice along its axis (from the end for direction 1), the
//   states passed on, each scan output stacked along its axis.
// A parameter a body reads is one parameter, shared by every iteration.
// Names a body defines are forgotten before it is imported again.
//
//===----------------------------------------------------------------------===//

#include "tools/kiln/lib/OnnxImporter.h"

namespace kiln::cli::onnx_import {

// Loops are unrolled into the step; longer ones would rather be a
// recurrent op (LSTM, GRU, RNN) or a smaller model.
static constexpr int64_t kMaxIterations = 1024;

bool Importer::hold(const std::string &name, Held &out) {
  out = Held();
  if (auto it = statics_.find(name); it != statics_.end()) {
    out.s = it->second;
    return true;
  }
  if (auto it = sequences_.find(name); it != sequences_.end()) {
    out.seq = it->second;
    return true;
  }
  return named(name, out.v);
}

void Importer::put(const std::string &name, const Held &h) {
  values_.erase(name);
  statics_.erase(name);
  sequences_.erase(name);
  if (h.s)
    statics_[name] = *h.s;
  else if (h.seq)
    sequences_[name] = *h.seq;
  else
    values_[name] = h.v;
}

bool Importer::materialize(const Held &h, const std::string &name,
                           mlir::Value &out) {
  if (h.seq)
    return fail("'" + name + "' is a sequence where a tensor is needed");
  out = h.s ? constant(*h.s, name) : h.v;
  return static_cast<bool>(out);
}

void Importer::forget(const onnx::Graph &g) {
  auto erase = [&](const std::string &name) {
    values_.erase(name);
    statics_.erase(name);
    sequences_.erase(name);
  };
  for (const onnx::ValueInfo &in : g.inputs)
    erase(in.name);
  for (const onnx::Tensor &t : g.initializers)
    erase(t.name);
  for (const onnx::Node &n : g.nodes) {
    for (const std::string &o : n.outputs)
      erase(o);
    for (const onnx::Attribute &a : n.attributes)
      if (a.g)
        forget(*a.g);
  }
}

void Importer::index(const onnx::Graph &g) {
  for (const onnx::Node &n : g.nodes) {
    allNodes_.push_back(&n);
    for (const std::string &o : n.outputs)
      producers_[o] = &n;
    for (const std::string &in : n.inputs)
      consumers_[in].push_back(&n);
    for (const onnx::Attribute &a : n.attributes)
      if (a.g)
        index(*a.g);
  }
}

const onnx::Graph *Importer::graphAttr(const char *name) {
  const onnx::Attribute *a = node_->attribute(name);
  if (!a || !a->g) {
    fail(std::string("has no ") + name + " (a graph attribute)");
    return nullptr;
  }
  return a->g.get();
}

bool Importer::subgraph(const onnx::Graph &g, const std::string &scope,
                        const std::string &prefix,
                        const std::vector<Held> &inputs,
                        std::vector<Held> &outputs) {
  std::string what = "its subgraph '" + g.name + "'";
  if (g.inputs.size() != inputs.size())
    return fail(what + " has " + std::to_string(g.inputs.size()) +
                " inputs: expected " + std::to_string(inputs.size()));
  forget(g);
  for (size_t i = 0; i < inputs.size(); ++i)
    put(g.inputs[i].name, inputs[i]);
  for (const onnx::Tensor &t : g.initializers) {
    // A body's own initializers are constants (not parameters).
    if (t.external)
      return fail(what + " has initializer '" + t.name +
                  "' in an external file");
    Static s;
    s.dims = t.dims;
    s.dataType = t.dataType;
    s.values = t.toDoubles();
    statics_[t.name] = std::move(s);
  }
  if (!nodesWithin(g.nodes, scope, prefix))
    return false;
  outputs.assign(g.outputs.size(), Held());
  for (size_t i = 0; i < g.outputs.size(); ++i)
    if (!hold(g.outputs[i].name, outputs[i]))
      return false;
  return true;
}

bool Importer::nodesWithin(const std::vector<onnx::Node> &nodes,
                           const std::string &scope,
                           const std::string &prefix) {
  const onnx::Node *outer = node_;
  std::string name = nodeName_, where = where_, outerScope = scope_,
              outerPrefix = prefix_;
  scope_ = scope + scope_;
  prefix_ = prefix;
  bool ok = true;
  for (const onnx::Node &n : nodes)
    if (!(ok = node(n)))
      break;
  node_ = outer;
  nodeName_ = name;
  where_ = where;
  scope_ = outerScope;
  prefix_ = outerPrefix;
  return ok;
}

mlir::Value Importer::stack(llvm::ArrayRef<mlir::Value> parts, int64_t axis,
                            const std::string &suffix) {
  llvm::SmallVector<int64_t> one(shape(parts[0]).begin(),
                                 shape(parts[0]).end());
  one.insert(one.begin() + axis, 1);
  llvm::SmallVector<mlir::Value> wide;
  for (size_t i = 0; i < parts.size(); ++i)
    wide.push_back(g_.reshape(nodeName_ + suffix + "." + std::to_string(i),
                              parts[i], one));
  if (wide.size() == 1)
    return wide[0];
  llvm::SmallVector<int64_t> dims = one;
  dims[axis] = static_cast<int64_t>(parts.size());
  return b_.create<kiln::ConcatenateOp>(loc(suffix),
                                        type(dims, element(parts[0])), wide,
                                        b_.getI64IntegerAttr(axis));
}

bool Importer::collectScans(const onnx::Graph &body,
                            const std::vector<Held> &outputs, size_t first,
                            const std::string &step,
                            std::vector<std::vector<mlir::Value>> &scanned) {
  for (size_t k = 0; k < scanned.size(); ++k) {
    mlir::Value v;
    if (!materialize(outputs[first + k], body.outputs[first + k].name, v))
      return false;
    if (!scanned[k].empty() && shape(v) != shape(scanned[k][0]))
      return fail("scan output " + std::to_string(k) + " is " +
                  shapeText(shape(scanned[k][0])) + " at first and " +
                  shapeText(shape(v)) + " in " + step +
                  ": expected one shape to stack");
    scanned[k].push_back(v);
  }
  return true;
}

static bool sameStatic(const Static &a, const Static &b) {
  return a.dims == b.dims && a.values == b.values && a.dataType == b.dataType;
}

// If: then_branch and else_branch, no inputs; their outputs are If's.
bool Importer::ifNode() {
  const onnx::Graph *branches[2] = {graphAttr("then_branch"), nullptr};
  if (!branches[0] || !(branches[1] = graphAttr("else_branch")))
    return false;
  for (int b = 0; b < 2; ++b)
    if (branches[b]->outputs.size() != node_->outputs.size())
      return fail(std::string(b ? "else_branch" : "then_branch") + " has " +
                  std::to_string(branches[b]->outputs.size()) +
                  " outputs: expected " +
                  std::to_string(node_->outputs.size()) + ", the If's");
  std::string self = " of node '" + nodeName_.substr(prefix_.size()) + "' (If)";
  const char *kBranch[2] = {"then_branch", "else_branch"};
  if (hasInput(0) && statics_.count(node_->inputs[0])) {
    const Static &c = statics_[node_->inputs[0]];
    if (c.values.size() != 1)
      return fail("the condition is " + shapeText(c.dims) +
                  ": expected one element");
    int taken = c.values[0] != 0 ? 0 : 1;
    std::vector<Held> outputs;
    if (!subgraph(*branches[taken],
                  std::string(" in the ") + kBranch[taken] + self,
                  nodeName_ + "." + kBranch[taken] + "/", {}, outputs))
      return false;
    for (size_t i = 0; i < outputs.size(); ++i)
      put(node_->outputs[i], outputs[i]);
    return true;
  }
  // A condition that depends on data: both branches, then a select.
  mlir::Value c;
  if (!value(0, c))
    return false;
  if (!element(c).isInteger(1) || product(shape(c)) != 1)
    return fail("the condition is " + shapeText(shape(c)) +
                (element(c).isInteger(1) ? "" : " and not BOOL") +
                ": expected one BOOL element");
  std::vector<Held> outputs[2];
  for (int b = 0; b < 2; ++b)
    if (!subgraph(*branches[b], std::string(" in the ") + kBranch[b] + self,
                  nodeName_ + "." + kBranch[b] + "/", {}, outputs[b]))
      return false;
  for (size_t i = 0; i < node_->outputs.size(); ++i) {
    const Held &t = outputs[0][i], &e = outputs[1][i];
    if (t.s && e.s && sameStatic(*t.s, *e.s)) {
      put(node_->outputs[i], t);
      continue;
    }
    if (t.seq || e.seq)
      return fail("output " + std::to_string(i) +
                  " is a sequence and the condition depends on data");
    mlir::Value a, z;
    if (!materialize(t, branches[0]->outputs[i].name, a) ||
        !materialize(e, branches[1]->outputs[i].name, z))
      return false;
    if (shape(a) != shape(z) || element(a) != element(z))
      return fail(
          "output " + std::to_string(i) + " is " + shapeText(shape(a)) +
          " in the then_branch and " + shapeText(shape(z)) +
          (element(a) != element(z) ? " of another element type" : "") +
          " in the else_branch: with a condition that depends on data "
          "kiln computes both branches and selects, so they must agree");
    std::string at = ".select" + std::to_string(i);
    mlir::Value y = b_.create<kiln::SelectOp>(loc(at), a.getType(),
                                              broadcastTo(c, shape(a)), a, z);
    put(node_->outputs[i], Held{std::nullopt, y, std::nullopt});
  }
  return true;
}

// Loop (M, cond, v_initial...): body (iteration_num, cond, v...) ->
// (cond, v..., scan outputs...); Loop's outputs are the last v... and the
// scan outputs stacked along a new axis 0.
bool Importer::loop() {
  const onnx::Graph *body = graphAttr("body");
  if (!body)
    return false;
  size_t carried = node_->inputs.size() < 2 ? 0 : node_->inputs.size() - 2;
  if (node_->inputs.size() < 2 || body->inputs.size() != carried + 2 ||
      body->outputs.size() < carried + 1 ||
      node_->outputs.size() != body->outputs.size() - 1)
    return fail("has " + std::to_string(node_->inputs.size()) + " inputs and " +
                std::to_string(node_->outputs.size()) +
                " outputs and its body " + std::to_string(body->inputs.size()) +
                " inputs and " + std::to_string(body->outputs.size()) +
                " outputs: expected (M, cond, N values) -> (N values, K scan "
                "outputs) and a body (iteration, cond, N values) -> (cond, N "
                "values, K scan outputs)");
  size_t scans = body->outputs.size() - 1 - carried;
  const std::string notKnown =
      ": kiln import unrolls a Loop whose iterations are known at import";
  int64_t trips = -1;
  if (hasInput(0)) {
    auto m = statics_.find(node_->inputs[0]);
    if (m == statics_.end())
      return fail("its trip count M ('" + node_->inputs[0] +
                  "') depends on data" + notKnown);
    if (m->second.values.size() != 1)
      return fail("its trip count M is " + shapeText(m->second.dims) +
                  ": expected one element");
    trips = std::max<int64_t>(0, toIndex(m->second.values[0]));
  }
  bool go = true;
  if (hasInput(1)) {
    auto c = statics_.find(node_->inputs[1]);
    if (c == statics_.end())
      return fail("its condition ('" + node_->inputs[1] + "') depends on data" +
                  notKnown);
    if (c->second.values.size() != 1)
      return fail("its condition is " + shapeText(c->second.dims) +
                  ": expected one element");
    go = c->second.values[0] != 0;
  }
  if (trips < 0 && !hasInput(1))
    return fail("has neither a trip count nor a condition: it would never end");
  std::vector<Held> state(carried);
  for (size_t i = 0; i < carried; ++i)
    if (!hold(node_->inputs[2 + i], state[i]))
      return false;
  std::vector<std::vector<mlir::Value>> scanned(scans);
  std::string self =
      " of node '" + nodeName_.substr(prefix_.size()) + "' (Loop)";
  int64_t i = 0;
  for (; go && (trips < 0 || i < trips); ++i) {
    if (i == kMaxIterations)
      return fail(
          "runs more than " + std::to_string(kMaxIterations) +
          " iterations: kiln import unrolls a Loop into the step, at most " +
          std::to_string(kMaxIterations));
    std::vector<Held> inputs = {
        Held{Static{{}, {double(i)}, int32_t(DataType::Int64)},
             {},
             std::nullopt},
        Held{Static{{}, {1.0}, int32_t(DataType::Bool)}, {}, std::nullopt}};
    inputs.insert(inputs.end(), state.begin(), state.end());
    std::vector<Held> outputs;
    std::string iteration = std::to_string(i);
    if (!subgraph(*body, " in iteration " + iteration + " of the body" + self,
                  nodeName_ + "/" + iteration + "/", inputs, outputs))
      return false;
    const Held &cond = outputs[0];
    if (!cond.s)
      return fail("its body's condition output ('" + body->outputs[0].name +
                  "') depends on data in iteration " + iteration + notKnown);
    if (cond.s->values.size() != 1)
      return fail("its body's condition output is " + shapeText(cond.s->dims) +
                  ": expected one element");
    go = cond.s->values[0] != 0;
    std::copy(outputs.begin() + 1, outputs.begin() + 1 + carried,
              state.begin());
    if (!collectScans(*body, outputs, 1 + carried, "iteration " + iteration,
                      scanned))
      return false;
  }
  if (scans && i == 0)
    return fail("runs no iteration, so its scan outputs would be empty: kiln "
                "tensors are not empty");
  for (size_t k = 0; k < carried; ++k)
    put(node_->outputs[k], state[k]);
  for (size_t k = 0; k < scans; ++k)
    put(node_->outputs[carried + k],
        Held{std::nullopt, stack(scanned[k], 0, ".scan" + std::to_string(k)),
             std::nullopt});
  return true;
}

// Scan (opset 9 and later): N initial states then num_scan_inputs scan
// inputs; body (N states, a slice of each scan input) -> (N states, K scan
// outputs); Scan's outputs are the last states and the scan outputs stacked
// along scan_output_axes (reversed where scan_output_directions is 1).
bool Importer::scan() {
  if (opset_ < 9)
    return fail("opset " + std::to_string(opset_) +
                "'s Scan (with sequence_lens and a batch axis) is not read: "
                "export with opset 9 or later");
  const onnx::Graph *body = graphAttr("body");
  if (!body)
    return false;
  int64_t m = intAttr("num_scan_inputs", 0);
  int64_t n = static_cast<int64_t>(node_->inputs.size()) - m;
  int64_t k = static_cast<int64_t>(body->outputs.size()) - n;
  if (m < 1 || n < 0 || k < 0 || body->inputs.size() != node_->inputs.size() ||
      node_->outputs.size() != body->outputs.size())
    return fail("has " + std::to_string(node_->inputs.size()) + " inputs (" +
                std::to_string(m) + " scanned) and " +
                std::to_string(node_->outputs.size()) +
                " outputs and its body " + std::to_string(body->inputs.size()) +
                " inputs and " + std::to_string(body->outputs.size()) +
                " outputs: expected one or more scan inputs and a body with as "
                "many inputs and outputs as the Scan");
  auto attr = [&](const char *name, int64_t count, std::vector<int64_t> &out) {
    out = intsAttr(name).value_or(std::vector<int64_t>(count, 0));
    if (static_cast<int64_t>(out.size()) != count)
      return fail(std::string(name) + " has " + std::to_string(out.size()) +
                  " values: expected " + std::to_string(count));
    return true;
  };
  std::vector<int64_t> inAxes, inDirections, outAxes, outDirections;
  if (!attr("scan_input_axes", m, inAxes) ||
      !attr("scan_input_directions", m, inDirections) ||
      !attr("scan_output_axes", k, outAxes) ||
      !attr("scan_output_directions", k, outDirections))
    return false;
  std::vector<mlir::Value> sequences(m);
  int64_t length = -1;
  for (int64_t j = 0; j < m; ++j) {
    if (!value(n + j, sequences[j]))
      return false;
    if (!normalizeAxis(inAxes[j], shape(sequences[j]).size(),
                       "scan_input_axes"))
      return false;
    int64_t extent = shape(sequences[j])[inAxes[j]];
    if (length >= 0 && extent != length)
      return fail("scan input " + std::to_string(j) + " has " +
                  std::to_string(extent) + " steps along axis " +
                  std::to_string(inAxes[j]) + " and scan input 0 " +
                  std::to_string(length) + ": expected one length");
    length = extent;
  }
  if (length > kMaxIterations)
    return fail("scans " + std::to_string(length) +
                " steps: kiln import unrolls a Scan into the step, at most " +
                std::to_string(kMaxIterations));
  std::vector<Held> state(n);
  for (int64_t i = 0; i < n; ++i)
    if (!hold(node_->inputs[i], state[i]))
      return false;
  std::vector<std::vector<mlir::Value>> scanned(k);
  std::string self =
      " of node '" + nodeName_.substr(prefix_.size()) + "' (Scan)";
  for (int64_t t = 0; t < length; ++t) {
    std::string step = std::to_string(t);
    std::vector<Held> inputs = state;
    for (int64_t j = 0; j < m; ++j) {
      int64_t at = inDirections[j] ? length - 1 - t : t, axis = inAxes[j];
      std::string suffix = "/" + step + ".input" + std::to_string(j);
      mlir::Value slice = sliceAxis(sequences[j], axis, at, at + 1, 1, suffix);
      llvm::SmallVector<int64_t> dims(shape(slice).begin(), shape(slice).end());
      dims.erase(dims.begin() + axis);
      inputs.push_back(Held{std::nullopt,
                            g_.reshape(nodeName_ + suffix, slice, dims),
                            std::nullopt});
    }
    std::vector<Held> outputs;
    if (!subgraph(*body, " in step " + step + " of the body" + self,
                  nodeName_ + "/" + step + "/", inputs, outputs))
      return false;
    std::copy(outputs.begin(), outputs.begin() + n, state.begin());
    if (!collectScans(*body, outputs, n, "step " + step, scanned))
      return false;
  }
  for (int64_t i = 0; i < n; ++i)
    put(node_->outputs[i], state[i]);
  for (int64_t o = 0; o < k; ++o) {
    if (scanned[o].empty())
      return fail("scans no step, so scan output " + std::to_string(o) +
                  " would be empty: kiln tensors are not empty");
    int64_t axis = outAxes[o];
    if (!normalizeAxis(axis, shape(scanned[o][0]).size() + 1,
                       "scan_output_axes"))
      return false;
    if (outDirections[o])
      std::reverse(scanned[o].begin(), scanned[o].end());
    put(node_->outputs[n + o],
        Held{std::nullopt, stack(scanned[o], axis, ".scan" + std::to_string(o)),
             std::nullopt});
  }
  return true;
}

// Sequences are lists of kiln values known at import: what SplitToSequence
// makes, and what an unrolled Loop builds (TorchScript's list append is a
// SequenceInsert carried through the Loop, its torch.stack a
// ConcatFromSequence after it).
bool Importer::sequenceInput(size_t i, std::vector<mlir::Value> &out) {
  auto it = hasInput(i) ? sequences_.find(node_->inputs[i]) : sequences_.end();
  if (it == sequences_.end())
    return fail("input " + std::to_string(i) +
                " is not a sequence (SequenceEmpty, SequenceConstruct, "
                "SequenceInsert, SequenceErase or SplitToSequence make them)");
  out = it->second;
  return true;
}

// A position in a sequence of |n| (input |i|; |fallback| when absent):
// negative ones count from the end, and up to |n| itself where |end| (an
// insertion after the last).
bool Importer::sequencePosition(size_t i, int64_t n, bool end, int64_t fallback,
                                int64_t &out) {
  out = fallback;
  if (hasInput(i)) {
    const Static *s = staticInput(i);
    if (!s)
      return false;
    if (s->values.size() != 1)
      return fail("the position is " + shapeText(s->dims) +
                  ": expected one value");
    out = toIndex(s->values[0]);
  }
  int64_t limit = end ? n : n - 1;
  if (out < -n || out > limit)
    return fail("position " + std::to_string(out) +
                " is outside the sequence of " + std::to_string(n) +
                (end ? " (insertion may name its end)" : ""));
  if (out < 0)
    out += n;
  return true;
}

bool Importer::sequenceOp(const std::string &op) {
  std::vector<mlir::Value> seq;
  if (op == "SequenceEmpty") {
    sequences_[node_->outputs[0]] = {};
    return true;
  }
  if (op == "SequenceConstruct") {
    for (size_t i = 0; i < node_->inputs.size(); ++i) {
      mlir::Value v;
      if (!value(i, v))
        return false;
      if (!seq.empty() && element(v) != element(seq[0]))
        return fail("its inputs have different element types");
      seq.push_back(v);
    }
    sequences_[node_->outputs[0]] = std::move(seq);
    return true;
  }
  if (!sequenceInput(0, seq))
    return false;
  int64_t n = static_cast<int64_t>(seq.size()), at;
  if (op == "SequenceLength") {
    setStatic(0, Static{{}, {double(n)}, int32_t(DataType::Int64)});
    return true;
  }
  if (op == "SequenceInsert") {
    mlir::Value v;
    if (!value(1, v) || !sequencePosition(2, n, /*end=*/true, n, at))
      return false;
    if (!seq.empty() && element(v) != element(seq[0]))
      return fail("the tensor's element type differs from the sequence's");
    seq.insert(seq.begin() + at, v);
    sequences_[node_->outputs[0]] = std::move(seq);
    return true;
  }
  if (op == "SequenceErase") {
    if (n == 0)
      return fail("erases from an empty sequence");
    if (!sequencePosition(1, n, /*end=*/false, n - 1, at))
      return false;
    seq.erase(seq.begin() + at);
    sequences_[node_->outputs[0]] = std::move(seq);
    return true;
  }
  // ConcatFromSequence: along axis, or stacked along a new one.
  if (seq.empty())
    return fail("concatenates an empty sequence: kiln tensors are not empty");
  bool stacked = intAttr("new_axis", 0) != 0;
  int64_t rank = shape(seq[0]).size(), axis = intAttr("axis", 0);
  if (!normalizeAxis(axis, stacked ? rank + 1 : rank, "axis"))
    return false;
  llvm::SmallVector<int64_t> dims(shape(seq[0]).begin(), shape(seq[0]).end());
  if (!stacked)
    dims[axis] = 0;
  for (int64_t i = 0; i < n; ++i) {
    llvm::ArrayRef<int64_t> si = shape(seq[i]);
    bool fits = static_cast<int64_t>(si.size()) == rank &&
                element(seq[i]) == element(seq[0]);
    for (int64_t d = 0; fits && d < rank; ++d)
      fits = si[d] == shape(seq[0])[d] || (!stacked && d == axis);
    if (!fits)
      return fail("element " + std::to_string(i) + " is " + shapeText(si) +
                  " and element 0 " + shapeText(shape(seq[0])) +
                  (stacked ? ": stacking needs one shape"
                           : ": they must agree off the axis"));
    if (!stacked)
      dims[axis] += si[axis];
  }
  if (stacked) {
    setOutput(0, stack(seq, axis, ".stack"));
    return true;
  }
  setOutput(0, n == 1 ? seq[0]
                      : b_.create<kiln::ConcatenateOp>(
                              loc(), type(dims, element(seq[0])), seq,
                              b_.getI64IntegerAttr(axis))
                            .getResult());
  return true;
}

} // namespace kiln::cli::onnx_import
