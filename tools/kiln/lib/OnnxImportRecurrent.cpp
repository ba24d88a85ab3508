//===- OnnxImportRecurrent.cpp - LSTM, GRU and RNN, unrolled ---------------===//
//
// The importer's recurrent ops (OnnxImporter.h). Every shape is static, so
// a recurrence over the sequence is unrolled: the input's projection for
// all time steps is one kiln.dot_general, and each step adds the previous
// hidden state's projection (another dot_general) and applies the gates.
// Autodiff then differentiates the unrolled graph (backpropagation through
// time). Gate orders and equations are ONNX's: LSTM i, o, f, c; GRU z, r,
// h; the default activations (sigmoid and tanh) only.
//
//===----------------------------------------------------------------------===//

#include "tools/kiln/lib/OnnxImporter.h"

#include "llvm/ADT/STLExtras.h"

namespace kiln::cli::onnx_import {

namespace {

enum class Cell { lstm, gru, rnn };

int64_t gateCount(Cell cell) {
  return cell == Cell::lstm ? 4 : cell == Cell::gru ? 3 : 1;
}

} // namespace

bool Importer::recurrent(const std::string &op) {
  Cell cell = op == "LSTM" ? Cell::lstm : op == "GRU" ? Cell::gru : Cell::rnn;
  int64_t gates = gateCount(cell);
  int64_t hidden = intAttr("hidden_size", 0);
  if (hidden <= 0)
    return fail("hidden_size is missing or not positive");
  // PyTorch's initializer for recurrent layers: uniform on
  // +-1/sqrt(hidden_size), weights and biases alike.
  for (size_t i : {1, 2, 3})
    if (hasInput(i) && parameterTensors_.count(node_->inputs[i]) &&
        !fanIn_.count(node_->inputs[i]))
      fanIn_[node_->inputs[i]] = hidden;

  std::string direction = stringAttr("direction", "forward");
  if (direction != "forward" && direction != "reverse" && direction != "bidirectional")
    return fail("direction is '" + direction + "'");
  int64_t directions = direction == "bidirectional" ? 2 : 1;
  if (node_->attribute("clip"))
    return fail("clip is set: kiln import does not read clipped cells");
  if (intAttr("input_forget", 0) != 0)
    return fail("input_forget is 1: kiln import does not read coupled gates");
  if (const onnx::Attribute *a = node_->attribute("activations")) {
    std::vector<std::string> expected =
        cell == Cell::lstm ? std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"}
        : cell == Cell::gru ? std::vector<std::string>{"Sigmoid", "Tanh"}
                            : std::vector<std::string>{"Tanh"};
    for (size_t i = 0; i < a->strings.size(); ++i)
      if (a->strings[i] != expected[i % expected.size()])
        return fail("activation " + std::to_string(i) + " is " + a->strings[i] +
                    ": kiln import reads the default activations (" +
                    (cell == Cell::lstm  ? "Sigmoid, Tanh, Tanh"
                     : cell == Cell::gru ? "Sigmoid, Tanh"
                                         : "Tanh") +
                    ")");
  }
  if (cell == Cell::lstm && hasInput(7))
    return fail("it has peepholes (input P): kiln import does not read them");
  int64_t layout = intAttr("layout", 0);

  mlir::Value x, w, r;
  if (!value(0, x) || !value(1, w) || !value(2, r))
    return false;
  mlir::Type e = element(x);
  if (shape(x).size() != 3)
    return fail("X is " + shapeText(shape(x)) + ": expected [seq, batch, input]" +
                (layout ? " ([batch, seq, input] with layout 1)" : ""));
  if (layout)
    x = b_.create<kiln::TransposeOp>(loc(".time_major"),
                                     type({shape(x)[1], shape(x)[0], shape(x)[2]}, e), x,
                                     arr({1, 0, 2}));
  int64_t steps = shape(x)[0], batch = shape(x)[1], features = shape(x)[2];
  if (shape(w) != llvm::ArrayRef<int64_t>{directions, gates * hidden, features})
    return fail("W is " + shapeText(shape(w)) + ": expected " +
                shapeText({directions, gates * hidden, features}));
  if (shape(r) != llvm::ArrayRef<int64_t>{directions, gates * hidden, hidden})
    return fail("R is " + shapeText(shape(r)) + ": expected " +
                shapeText({directions, gates * hidden, hidden}));
  mlir::Value bias;
  if (hasInput(3)) {
    if (!value(3, bias))
      return false;
    if (shape(bias) != llvm::ArrayRef<int64_t>{directions, 2 * gates * hidden})
      return fail("B is " + shapeText(shape(bias)) + ": expected " +
                  shapeText({directions, 2 * gates * hidden}));
  }
  if (hasInput(4)) {
    const Static *lengths = staticInput(4);
    if (!lengths)
      return false;
    if (llvm::any_of(lengths->values, [steps](double v) { return int64_t(v) != steps; }))
      return fail("sequence_lens are not all " + std::to_string(steps) +
                  ": kiln import reads sequences of the full length");
  }
  // Initial states (inputs 5 and, for an LSTM, 6): zeros when absent. An
  // initializer of zeros (the torch.export exporter's default state) is a
  // constant, not a parameter.
  auto initialState = [&](size_t i, mlir::Value &out) {
    llvm::SmallVector<int64_t> dims = {directions, batch, hidden};
    if (layout)
      dims = {batch, directions, hidden};
    if (!hasInput(i)) {
      out = splat(0.0, e, {directions, batch, hidden});
      return true;
    }
    if (parameterTensors_.count(node_->inputs[i]) && !values_.count(node_->inputs[i])) {
      const Static *s = constInput(i);
      if (s && llvm::all_of(s->values, [](double v) { return v == 0; }))
        out = constant(*s, node_->inputs[i]);
    }
    if (!out && !value(i, out))
      return false;
    if (shape(out) != llvm::ArrayRef<int64_t>(dims))
      return fail("input " + std::to_string(i) + " (an initial state) is " +
                  shapeText(shape(out)) + ": expected " + shapeText(dims));
    if (layout)
      out = b_.create<kiln::TransposeOp>(loc(".state_time_major"),
                                         type({directions, batch, hidden}, e), out,
                                         arr({1, 0, 2}));
    return true;
  };
  mlir::Value h0, c0;
  if (!initialState(5, h0) || (cell == Cell::lstm && !initialState(6, c0)))
    return false;

  auto sigmoid = [&](mlir::Value v, const std::string &suffix) -> mlir::Value {
    return b_.create<kiln::SigmoidOp>(loc(suffix), v.getType(), v);
  };
  auto tanh = [&](mlir::Value v, const std::string &suffix) -> mlir::Value {
    return b_.create<kiln::TanhOp>(loc(suffix), v.getType(), v);
  };
  // Columns [k * hidden, (k + n) * hidden) of a [batch, gates * hidden] value.
  auto gate = [&](mlir::Value v, int64_t k, int64_t n, const std::string &suffix) {
    return sliceAxis(v, 1, k * hidden, (k + n) * hidden, 1, suffix);
  };
  // Direction |d| of a [directions, ...] value, without that dimension.
  auto ofDirection = [&](mlir::Value v, int64_t d, const std::string &suffix) {
    llvm::SmallVector<int64_t> rest(shape(v).drop_front());
    return g_.reshape(nodeName_ + suffix, sliceAxis(v, 0, d, d + 1, 1, suffix), rest);
  };
  // |v| [batch, hidden] as [1, ..., batch, hidden] for concatenation.
  auto lift = [&](mlir::Value v, int64_t ones, const std::string &suffix) {
    llvm::SmallVector<int64_t> dims(ones, 1);
    dims.append({batch, hidden});
    return g_.reshape(nodeName_ + suffix, v, dims);
  };

  llvm::SmallVector<mlir::Value> sequences, lastH, lastC;
  for (int64_t d = 0; d < directions; ++d) {
    bool reverse = direction == "reverse" || d == 1;
    std::string dir = directions > 1 ? (d ? ".backward" : ".forward") : "";
    mlir::Value wd = ofDirection(w, d, dir + ".w"), rd = ofDirection(r, d, dir + ".r");
    // The input's projection for every step: [steps, batch, gates * hidden].
    mlir::Value projected = b_.create<kiln::DotGeneralOp>(
        loc(dir + ".input_projection"), type({steps, batch, gates * hidden}, e), x, wd,
        arr({}), arr({}), arr({2}), arr({1}));
    mlir::Value recurrentBias;
    if (bias) {
      mlir::Value bd = ofDirection(bias, d, dir + ".b");
      mlir::Value inputBias = sliceAxis(bd, 0, 0, gates * hidden, 1, dir + ".wb");
      recurrentBias =
          sliceAxis(bd, 0, gates * hidden, 2 * gates * hidden, 1, dir + ".rb");
      if (cell != Cell::gru) {
        // Both biases add to every gate: one bias.
        inputBias = add(inputBias, recurrentBias, dir + ".bias");
        recurrentBias = nullptr;
      }
      projected = add(projected,
                      g_.broadcast(nodeName_ + dir + ".bias_broadcast", inputBias, {2},
                                   {steps, batch, gates * hidden}),
                      dir + ".input_bias");
    }
    mlir::Value h = ofDirection(h0, d, dir + ".h0"), c;
    if (cell == Cell::lstm)
      c = ofDirection(c0, d, dir + ".c0");
    // What every step reads, built once: the rows of R that project h
    // (a GRU with linear_before_reset 0 projects r * h by the candidate's
    // own rows, so h's projection covers z and r only) and their bias.
    bool resetFirst = cell == Cell::gru && !intAttr("linear_before_reset", 0);
    int64_t projectedRows = resetFirst ? 2 * hidden : gates * hidden;
    mlir::Value recurrence = sliceAxis(rd, 0, 0, projectedRows, 1, dir + ".r_rows");
    mlir::Value stepBias, candidateRows, candidateBias;
    if (recurrentBias)
      stepBias = g_.broadcast(nodeName_ + dir + ".rb_broadcast",
                              sliceAxis(recurrentBias, 0, 0, projectedRows, 1, dir + ".rb_rows"),
                              {1}, {batch, projectedRows});
    if (resetFirst) {
      candidateRows = sliceAxis(rd, 0, 2 * hidden, 3 * hidden, 1, dir + ".rh_rows");
      if (recurrentBias)
        candidateBias = g_.broadcast(
            nodeName_ + dir + ".rbh_broadcast",
            sliceAxis(recurrentBias, 0, 2 * hidden, 3 * hidden, 1, dir + ".rbh"), {1},
            {batch, hidden});
    }
    llvm::SmallVector<mlir::Value> outputs(steps);
    for (int64_t i = 0; i < steps; ++i) {
      int64_t t = reverse ? steps - 1 - i : i;
      std::string at = dir + ".t" + std::to_string(t);
      mlir::Value in = g_.reshape(nodeName_ + at + ".input",
                                  sliceAxis(projected, 0, t, t + 1, 1, at + ".input"),
                                  {batch, gates * hidden});
      mlir::Value fromH = b_.create<kiln::DotGeneralOp>(
          loc(at + ".recurrence"), type({batch, projectedRows}, e), h, recurrence, arr({}),
          arr({}), arr({1}), arr({1}));
      if (stepBias)
        fromH = add(fromH, stepBias, at + ".recurrent_bias");
      if (cell == Cell::lstm) {
        mlir::Value all = add(in, fromH, at + ".gates");
        mlir::Value inputGate = sigmoid(gate(all, 0, 1, at + ".i"), at + ".input_gate");
        mlir::Value outputGate = sigmoid(gate(all, 1, 1, at + ".o"), at + ".output_gate");
        mlir::Value forgetGate = sigmoid(gate(all, 2, 1, at + ".f"), at + ".forget_gate");
        mlir::Value candidate = tanh(gate(all, 3, 1, at + ".c"), at + ".candidate");
        c = add(mul(forgetGate, c, at + ".keep"), mul(inputGate, candidate, at + ".write"),
                at + ".cell");
        h = mul(outputGate, tanh(c, at + ".cell_tanh"), at + ".hidden");
      } else if (cell == Cell::gru) {
        // z and r from both projections; the candidate per
        // linear_before_reset: r scales R's projection of h (1, PyTorch's)
        // or h before it (0, a projection of its own).
        mlir::Value zr = sigmoid(add(gate(in, 0, 2, at + ".in_zr"),
                                     gate(fromH, 0, 2, at + ".h_zr"), at + ".zr_sum"),
                                 at + ".zr");
        mlir::Value z = gate(zr, 0, 1, at + ".z"), reset = gate(zr, 1, 1, at + ".r");
        mlir::Value fromReset;
        if (!resetFirst) {
          fromReset = mul(reset, gate(fromH, 2, 1, at + ".h_h"), at + ".reset");
        } else {
          fromReset = b_.create<kiln::DotGeneralOp>(
              loc(at + ".reset"), type({batch, hidden}, e), mul(reset, h, at + ".reset_h"),
              candidateRows, arr({}), arr({}), arr({1}), arr({1}));
          if (candidateBias)
            fromReset = add(fromReset, candidateBias, at + ".reset_bias");
        }
        mlir::Value candidate =
            tanh(add(gate(in, 2, 1, at + ".in_h"), fromReset, at + ".candidate_sum"),
                 at + ".candidate");
        // (1 - z) * candidate + z * h = candidate + z * (h - candidate).
        h = add(candidate,
                mul(z, b_.create<kiln::SubOp>(loc(at + ".delta"), h.getType(), h, candidate),
                    at + ".update"),
                at + ".hidden");
      } else {
        h = tanh(add(in, fromH, at + ".sum"), at + ".hidden");
      }
      outputs[t] = lift(h, 2, at + ".out");
    }
    sequences.push_back(steps == 1 ? outputs[0]
                                   : b_.create<kiln::ConcatenateOp>(
                                         loc(dir + ".sequence"),
                                         type({steps, 1, batch, hidden}, e), outputs,
                                         b_.getI64IntegerAttr(0))
                                         .getResult());
    lastH.push_back(lift(h, 1, dir + ".last_h"));
    if (cell == Cell::lstm)
      lastC.push_back(lift(c, 1, dir + ".last_c"));
  }
  auto stack = [&](llvm::ArrayRef<mlir::Value> parts, int64_t axis,
                   const std::string &suffix) -> mlir::Value {
    if (parts.size() == 1)
      return parts[0];
    llvm::SmallVector<int64_t> dims(shape(parts[0]).begin(), shape(parts[0]).end());
    dims[axis] *= parts.size();
    return b_.create<kiln::ConcatenateOp>(loc(suffix), type(dims, e), parts,
                                          b_.getI64IntegerAttr(axis));
  };
  // Y [steps, directions, batch, hidden] ([batch, steps, directions,
  // hidden] with layout 1); Y_h and Y_c [directions, batch, hidden]
  // ([batch, directions, hidden]).
  mlir::Value y = stack(sequences, 1, ".y");
  mlir::Value yh = stack(lastH, 0, ".y_h");
  mlir::Value yc = cell == Cell::lstm ? stack(lastC, 0, ".y_c") : nullptr;
  if (layout) {
    y = b_.create<kiln::TransposeOp>(loc(".y_batch_major"),
                                     type({batch, steps, directions, hidden}, e), y,
                                     arr({2, 0, 1, 3}));
    yh = b_.create<kiln::TransposeOp>(loc(".y_h_batch_major"),
                                      type({batch, directions, hidden}, e), yh,
                                      arr({1, 0, 2}));
    if (yc)
      yc = b_.create<kiln::TransposeOp>(loc(".y_c_batch_major"),
                                        type({batch, directions, hidden}, e), yc,
                                        arr({1, 0, 2}));
  }
  mlir::Value results[] = {y, yh, yc};
  for (size_t i = 0; i < node_->outputs.size() && i < 3; ++i)
    if (!node_->outputs[i].empty() && results[i])
      setOutput(i, results[i]);
  return true;
}

} // namespace kiln::cli::onnx_import
