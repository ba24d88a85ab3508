//===- OnnxImportQuantize.cpp - QuantizeLinear and DequantizeLinear -------===//
//
// The importer's quantization ops (OnnxImporter.h). A quantization-aware
// model exports each fake quantization (torch.fake_quantize_per_tensor_affine,
// ..._per_channel_affine, the FakeQuantize modules of torch.ao) as a
// QuantizeLinear whose integers one DequantizeLinear reads back:
//
//   q = clamp(round(x / scale) + zero_point, qmin, qmax)  (halves to even)
//   y = (q - zero_point) * scale
//
// kiln trains in floating point, so q is kept as a float tensor of those
// integers (exact: |q| < 2^16) that a DequantizeLinear reads (or ops that
// only move them: a Reshape, a MaxPool, ...). Its
// gradient is PyTorch's straight-through estimate: dy/dx is 1 where
// round(x / scale) + zero_point lies within [qmin, qmax] and 0 where the
// clamp binds. q is built as stop_gradient(q) + (t - stop_gradient(t))
// with t = x / scale where the clamp does not bind and 0 where it does, so
// the value is exactly q and dq/dx is 1 / scale or 0.
//
// Scales and zero points are constants, one per tensor or one per index
// along `axis`. Quantizing or dequantizing constants is evaluated here.
// A post-training quantized model (ONNX Runtime's QDQ format) keeps its
// weights as INT8 initializers and its biases as INT32 ones, each read by
// a DequantizeLinear. Fine-tuning it is quantization-aware training from
// that point (--quantized-weights=train, the default): each becomes a float
// parameter starting from its dequantized values, a weight fake-quantized
// by its DequantizeLinear's scale and zero point on every step (so the
// first forward pass computes what the quantized model does), a bias
// trained in float as PyTorch keeps it. --quantized-weights=fixed keeps
// them constants.
//
// ONNX Runtime's QOperator ops are defined as the float op of their
// dequantized inputs, quantized: QLinearMatMul and QLinearConv import as
// those nodes (importParts), so their weights train the same way. Dynamic
// quantization computes its scale and zero point from the data
// (DynamicQuantizeLinear) and multiplies integers (MatMulInteger,
// ConvInteger: kept as float tensors of integers, which a Cast to a float
// type reads). The scale that makes their integer weights floats is applied
// after the op; where MatMulInteger's product is read as ONNX Runtime writes
// it, that scale is found there and B trains (scaleAppliedAfter), else the
// integer weights stay constants.
//
//===----------------------------------------------------------------------===//

#include "tools/kiln/lib/OnnxImporter.h"

#include <cmath>

namespace kiln::cli::onnx_import {
namespace {

// The range of a quantized type; false for types kiln import does not
// quantize to (|dequantize|: INT32 too, which DequantizeLinear reads for
// biases and which is never clamped).
bool quantizedRange(int32_t dataType, bool dequantize, double &low,
                    double &high) {
  switch (static_cast<DataType>(dataType)) {
  case DataType::Uint8:
    low = 0, high = 255;
    return true;
  case DataType::Int8:
    low = -128, high = 127;
    return true;
  case DataType::Uint16:
    low = 0, high = 65535;
    return true;
  case DataType::Int16:
    low = -32768, high = 32767;
    return true;
  case DataType::Int32:
    low = -2147483648.0, high = 2147483647.0;
    return dequantize;
  default:
    return false;
  }
}

} // namespace

bool Importer::quantization(llvm::ArrayRef<int64_t> dims, int32_t dataType,
                            bool dequantize, Quantization &out) {
  const char *scaleName = dequantize ? "x_scale" : "y_scale";
  const char *zeroName = dequantize ? "x_zero_point" : "y_zero_point";
  if (intAttr("block_size", 0) != 0)
    return fail("block_size is " + std::to_string(intAttr("block_size", 0)) +
                ": kiln import reads per-tensor and per-axis quantization, "
                "not blocked");
  const Static *scale = constInput(1);
  if (!scale)
    return false;
  if (!isFloatType(scale->dataType))
    return fail(std::string(scaleName) + " is " +
                onnx::dataTypeName(scale->dataType) + ": expected a float");
  for (double s : scale->values)
    if (!(s > 0) || !std::isfinite(s))
      return fail(std::string(scaleName) + " holds " + std::to_string(s) +
                  ": expected positive, finite scales");
  out.scale = scale->values;
  out.zeroPoint.assign(out.scale.size(), 0.0);
  out.dataType = dataType;
  if (hasInput(2)) {
    const Static *zero = constInput(2);
    if (!zero)
      return false;
    if (zero->values.size() != out.scale.size())
      return fail(std::string(zeroName) + " has " +
                  std::to_string(zero->values.size()) + " values and " +
                  scaleName + " " + std::to_string(out.scale.size()) +
                  ": expected one zero point per scale");
    out.zeroPoint = zero->values;
    if (!dequantize)
      out.dataType = zero->dataType;
    else if (zero->dataType != dataType)
      return fail(std::string(zeroName) + " is " +
                  onnx::dataTypeName(zero->dataType) + " and x " +
                  onnx::dataTypeName(dataType) + ": expected one type");
  }
  if (!quantizedRange(out.dataType, dequantize, out.low, out.high))
    return fail(std::string(dequantize ? "x" : "y") + " is " +
                onnx::dataTypeName(out.dataType) +
                ": kiln import reads UINT8, INT8, UINT16 and INT16 "
                "quantization" +
                (dequantize ? " and INT32 values" : ""));
  for (double z : out.zeroPoint)
    if (z < out.low || z > out.high)
      return fail(std::string(zeroName) + " holds " + std::to_string(z) +
                  ": outside " + onnx::dataTypeName(out.dataType));
  // One scale: per tensor (ONNX's 1-D scale of one element too); else one
  // per index along the axis.
  out.axis = -1;
  if (scale->dims.size() > 1)
    return fail(std::string(scaleName) + " is " + shapeText(scale->dims) +
                ": expected a scalar or one scale per index along axis");
  if (out.scale.size() > 1) {
    int64_t axis = intAttr("axis", 1);
    if (!normalizeAxis(axis, dims.size(), "axis"))
      return false;
    if (dims[axis] != static_cast<int64_t>(out.scale.size()))
      return fail(std::string(scaleName) + " has " +
                  std::to_string(out.scale.size()) + " values for axis " +
                  std::to_string(axis) + " of " + shapeText(dims) +
                  ": expected " + std::to_string(dims[axis]));
    out.axis = axis;
    out.inner = product(dims.drop_front(axis + 1));
  }
  return true;
}

mlir::Value Importer::quantizationTensor(const Quantization &q,
                                         const std::vector<double> &values,
                                         mlir::Value like,
                                         const std::string &what) {
  if (q.axis < 0)
    return splat(values[0], element(like), shape(like));
  Static s;
  s.dims = {static_cast<int64_t>(values.size())};
  s.values = values;
  s.dataType = int32_t(DataType::Float);
  mlir::Value v = constant(s, nodeName_ + "." + what, element(like));
  if (!v)
    return nullptr;
  return g_.broadcast(nodeName_ + "." + what + "_broadcast", v, {q.axis},
                      shape(like));
}

mlir::Value Importer::quantize(mlir::Value x, const Quantization &q) {
  mlir::Value scale = quantizationTensor(q, q.scale, x, "scale");
  mlir::Value zero = quantizationTensor(q, q.zeroPoint, x, "zero_point");
  if (!scale || !zero)
    return nullptr;
  return quantizeBy(x, scale, zero, q.low, q.high);
}

mlir::Value Importer::quantizeBy(mlir::Value x, mlir::Value scale,
                                 mlir::Value zero, double lowest,
                                 double highest) {
  mlir::Type t = x.getType(), e = element(x),
             flags = type(shape(x), b_.getI1Type());
  mlir::Value scaled = div(x, scale, ".scaled");
  mlir::Value rounded =
      add(b_.create<kiln::RoundOp>(loc(".round"), t, scaled), zero, ".shifted");
  mlir::Value low = splat(lowest, e, shape(x)),
              high = splat(highest, e, shape(x));
  mlir::Value clamped = b_.create<kiln::MinOp>(
      loc(".clamp_high"), t,
      b_.create<kiln::MaxOp>(loc(".clamp_low"), t, rounded, low), high);
  // The straight-through estimate t: x / scale where the clamp does not
  // bind, else 0 (a select, so an x / scale that overflows to infinity
  // where the clamp binds gives 0, not inf x 0).
  mlir::Value zeros = splat(0.0, e, shape(x));
  mlir::Value aboveLow = b_.create<kiln::CompareOp>(
      loc(".above_low"), flags, kiln::CompareDirection::ge, rounded, low);
  mlir::Value belowHigh = b_.create<kiln::CompareOp>(
      loc(".below_high"), flags, kiln::CompareDirection::le, rounded, high);
  mlir::Value through = b_.create<kiln::SelectOp>(
      loc(".through"), t, aboveLow,
      b_.create<kiln::SelectOp>(loc(".through_high"), t, belowHigh, scaled,
                                zeros),
      zeros);
  // q = stop_gradient(q) + (t - stop_gradient(t)): t - t is exactly 0, so
  // the value is exactly the integer q (t + stop_gradient(q - t) was off by
  // up to an ulp of q, which moved a product of such values off a rounding
  // tie downstream: a QLinearConv's output rounded away from the
  // reference's), and the gradient is t's.
  mlir::Value none =
      sub(through,
          b_.create<kiln::StopGradientOp>(loc(".through_stopped"), t, through),
          ".zero");
  return add(b_.create<kiln::StopGradientOp>(loc(".integers"), t, clamped),
             none, "");
}

mlir::Value Importer::dequantize(mlir::Value x, const Quantization &q) {
  mlir::Value scale = quantizationTensor(q, q.scale, x, "scale");
  mlir::Value zero = quantizationTensor(q, q.zeroPoint, x, "zero_point");
  if (!scale || !zero)
    return nullptr;
  return mul(sub(x, zero, ".centered"), scale, "");
}

bool Importer::quantizeLinear() {
  // The quantized type: the zero point's, else output_dtype (opset 21),
  // else UINT8.
  int32_t dataType =
      static_cast<int32_t>(intAttr("output_dtype", int64_t(DataType::Uint8)));
  if (hasInput(0) && statics_.count(node_->inputs[0])) {
    // Quantizing a constant: integers, here.
    const Static &x = statics_[node_->inputs[0]];
    Quantization q;
    if (!quantization(x.dims, dataType, /*dequantize=*/false, q))
      return false;
    Static out;
    out.dims = x.dims;
    out.dataType = q.dataType;
    for (size_t i = 0; i < x.values.size(); ++i) {
      size_t k = q.channel(i);
      // ONNX divides in the input's type; a FLOAT input rounds to f32.
      double scaled = x.values[i] / q.scale[k];
      if (x.dataType != int32_t(DataType::Double))
        scaled = static_cast<float>(static_cast<float>(x.values[i]) /
                                    static_cast<float>(q.scale[k]));
      out.values.push_back(
          std::clamp(std::nearbyint(scaled) + q.zeroPoint[k], q.low, q.high));
    }
    setStatic(0, std::move(out));
    return true;
  }
  mlir::Value x;
  if (!floatValue(0, x))
    return false;
  Quantization q;
  if (!quantization(shape(x), dataType, /*dequantize=*/false, q))
    return false;
  mlir::Value integers = quantize(x, q);
  if (!integers)
    return false;
  setOutput(0, integers);
  quantized_[node_->outputs[0]] = q.dataType;
  return true;
}

bool Importer::dequantizeLinear() {
  if (hasInput(0) && statics_.count(node_->inputs[0])) {
    // Dequantizing constants (a post-training quantized weight or bias).
    const Static &x = statics_[node_->inputs[0]];
    Quantization q;
    if (!quantization(x.dims, x.dataType, /*dequantize=*/true, q))
      return false;
    std::vector<float> values = q.dequantized(x.values);
    const std::string &name = node_->inputs[0];
    if (initializerNames_.count(name) && !isFloatType(x.dataType)) {
      if (options_.trainQuantizedWeights)
        return trainQuantized(name, q, std::move(values));
      fixedQuantizedWeights_ = true;
    }
    Static out;
    out.dims = x.dims;
    out.dataType = int32_t(DataType::Float);
    out.values.assign(values.begin(), values.end());
    setStatic(0, std::move(out));
    return true;
  }
  if (!hasInput(0) || !quantized_.count(node_->inputs[0]))
    return fail("input 0 ('" + (hasInput(0) ? node_->inputs[0] : "") +
                "') is neither a QuantizeLinear's output nor a constant: "
                "kiln import reads the integers of a fake quantization or "
                "of an initializer");
  mlir::Value x = values_[node_->inputs[0]];
  if (hasInput(1) && !statics_.count(node_->inputs[1]) &&
      values_.count(node_->inputs[1])) {
    // A scale computed in the step (DynamicQuantizeLinear's), per tensor.
    mlir::Value scale = values_[node_->inputs[1]], zero;
    if (!shape(scale).empty() || element(scale) != element(x))
      return fail("x_scale is computed in the step and " +
                  shapeText(shape(scale)) +
                  ": expected a scalar of x's float type");
    std::string at = nodeName_ + ".";
    mlir::Value centered = x;
    if (hasInput(2)) {
      if (!quantized_.count(node_->inputs[2]) ||
          !shape(values_[node_->inputs[2]]).empty())
        return fail("x_zero_point is not a scalar computed with the scale "
                    "(DynamicQuantizeLinear's): kiln import reads a computed "
                    "scale per tensor");
      zero = values_[node_->inputs[2]];
      centered = sub(x, g_.broadcast(at + "zero_point", zero, {}, shape(x)),
                     ".centered");
    }
    setOutput(
        0, mul(centered, g_.broadcast(at + "scale", scale, {}, shape(x)), ""));
    return true;
  }
  Quantization q;
  if (!quantization(shape(x), quantized_[node_->inputs[0]],
                    /*dequantize=*/true, q))
    return false;
  mlir::Value y = dequantize(x, q);
  if (!y)
    return false;
  setOutput(0, y);
  return true;
}

bool Importer::trainQuantized(const std::string &name, const Quantization &q,
                              std::vector<float> values) {
  mlir::Value parameter = quantizedParameter(name, std::move(values));
  if (!parameter)
    return false;
  // An INT32 bias (scaled by the input's and the weight's scales) trains in
  // float, as PyTorch's quantization-aware training keeps it.
  if (q.dataType == int32_t(DataType::Int32)) {
    setOutput(0, parameter);
    return true;
  }
  mlir::Value integers = quantize(parameter, q);
  mlir::Value y = integers ? dequantize(integers, q) : nullptr;
  if (!y)
    return false;
  setOutput(0, y);
  return true;
}

mlir::Value Importer::quantizedParameter(const std::string &name,
                                         std::vector<float> values) {
  auto [it, added] = quantizedParameters_.try_emplace(name);
  QuantizedParameter &p = it->second;
  if (added) {
    // Named after the float tensor it was quantized from: ONNX Runtime's
    // quantizer writes "fc1.weight" as "fc1.weight_quantized".
    static constexpr llvm::StringLiteral kSuffix = "_quantized";
    p.name = name;
    llvm::StringRef base(name);
    if (base.consume_back(kSuffix) && !base.empty() &&
        !initializerNames_.count(base.str()) && !usedNames_.count(base.str()) &&
        !values_.count(base.str()))
      p.name = base.str();
    usedNames_.insert(p.name);
    p.dims = statics_[name].dims;
    p.values = std::move(values);
    p.value = g_.addParameter(
        p.name, p.dims, kiln::InitKind::uniform, 0.0,
        1.0 / std::sqrt(double(std::max<int64_t>(fanInOf(name, p.dims), 1))),
        b_.getF32Type());
  } else if (p.values != values) {
    fail("dequantizes '" + name +
         "' with another scale or zero point than an earlier "
         "DequantizeLinear: kiln import trains one float parameter "
         "per quantized initializer (--quantized-weights=fixed keeps "
         "each dequantization a constant)");
    return nullptr;
  }
  return p.value;
}

const Static *Importer::scaleAppliedAfter() {
  static const std::vector<const onnx::Node *> kNone;
  auto readers = [&](const std::string &tensor)
      -> const std::vector<const onnx::Node *> & {
    auto it = consumers_.find(tensor);
    return it == consumers_.end() ? kNone : it->second;
  };
  // MatMulInteger -> Cast -> Mul(., S), S = Mul(A's scale, B's scale).
  const auto &casts = readers(node_->outputs[0]);
  if (casts.size() != 1 || casts[0]->opType != "Cast" ||
      casts[0]->outputs.size() != 1)
    return nullptr;
  const auto &muls = readers(casts[0]->outputs[0]);
  if (muls.size() != 1 || muls[0]->opType != "Mul" ||
      muls[0]->inputs.size() != 2)
    return nullptr;
  const onnx::Node *mul = muls[0];
  const std::string &product =
      mul->inputs[0] == casts[0]->outputs[0] ? mul->inputs[1] : mul->inputs[0];
  auto producer = producers_.find(product);
  if (producer == producers_.end() || producer->second->opType != "Mul" ||
      producer->second->inputs.size() != 2)
    return nullptr;
  // B's scale is the factor that is a float initializer (A's is computed
  // by DynamicQuantizeLinear); two constant factors are ambiguous.
  const Static *found = nullptr;
  for (const std::string &factor : producer->second->inputs) {
    if (!initializerNames_.count(factor))
      continue;
    const Static *s = nullptr;
    if (auto it = statics_.find(factor); it != statics_.end())
      s = &it->second; // a scalar: a constant
    else if (auto tensor = parameterTensors_.find(factor);
             tensor != parameterTensors_.end())
      s = &initializerStatic(factor, *tensor->second); // per column
    if (!s || !isFloatType(s->dataType))
      continue;
    if (found)
      return nullptr;
    found = s;
  }
  return found;
}

bool Importer::importParts(const std::vector<onnx::Node> &parts) {
  // where_ is "node 'N' (Op)<scope_>: ".
  return nodesWithin(
      parts, ", part of " + where_.substr(0, where_.size() - 2 - scope_.size()),
      prefix_);
}

namespace {

onnx::Node partNode(const onnx::Node &whole, const std::string &op,
                    const std::string &what, std::vector<std::string> inputs,
                    std::vector<std::string> outputs,
                    std::optional<int64_t> axis = std::nullopt) {
  onnx::Node n;
  n.name = (whole.name.empty() ? whole.opType + "_" + whole.outputs[0]
                               : whole.name) +
           "." + what;
  n.opType = op;
  n.inputs = std::move(inputs);
  n.outputs = std::move(outputs);
  if (axis) {
    onnx::Attribute a;
    a.name = "axis";
    a.type = int32_t(onnx::AttributeType::Int);
    a.i = *axis;
    n.attributes.push_back(a);
  }
  return n;
}

} // namespace

int64_t Importer::inputRank(size_t i) {
  if (!hasInput(i))
    return 0;
  const std::string &name = node_->inputs[i];
  if (auto it = values_.find(name); it != values_.end())
    return shape(it->second).size();
  if (auto it = statics_.find(name); it != statics_.end())
    return it->second.dims.size();
  return 0;
}

bool Importer::readMovingQuantized(const std::string &op, OpReader read) {
  static const std::set<std::string> kMovesElements = {
      "Reshape",  "Flatten", "Transpose",     "Squeeze",      "Unsqueeze",
      "Identity", "MaxPool", "GlobalMaxPool", "Slice",        "Split",
      "Concat",   "Tile",    "Expand",        "DepthToSpace", "SpaceToDepth"};
  std::optional<int32_t> moved;
  if (kMovesElements.count(op))
    for (const std::string &input : node_->inputs)
      if (auto it = quantized_.find(input); it != quantized_.end()) {
        if (moved && *moved != it->second)
          return fail("reads quantized " + onnx::dataTypeName(*moved) +
                      " and " + onnx::dataTypeName(it->second) +
                      " integers: expected one type");
        moved = it->second;
      }
  if (!moved)
    return read(*this, op);
  for (const std::string &input : node_->inputs)
    if (auto it = values_.find(input);
        it != values_.end() && !quantized_.count(input) &&
        llvm::isa<mlir::FloatType>(element(it->second)))
      return fail("reads quantized " + onnx::dataTypeName(*moved) +
                  " integers and the float values '" + input +
                  "': expected integers of one quantization");
  readingQuantized_ = true;
  bool ok = read(*this, op);
  readingQuantized_ = false;
  if (ok)
    for (const std::string &output : node_->outputs)
      if (auto it = values_.find(output);
          it != values_.end() &&
          llvm::isa<mlir::FloatType>(element(it->second)))
        quantized_[output] = *moved;
  return ok;
}

bool Importer::int32Bias(size_t bias, size_t first, const char *firstName,
                         const char *quantized, size_t second, double factor,
                         const std::string &what, int64_t axis,
                         std::vector<onnx::Node> &parts,
                         std::vector<std::string> &operands) {
  const Static *a = constInput(first), *b = constInput(second);
  if (!a || !b)
    return false;
  if (a->values.size() != 1)
    return fail(std::string(firstName) + " has " +
                std::to_string(a->values.size()) + " values: expected one (" +
                node_->opType + " quantizes " + quantized + " per tensor)");
  Static scale;
  scale.dims = b->dims;
  scale.dataType = int32_t(DataType::Float);
  for (double v : b->values)
    scale.values.push_back(static_cast<float>(factor) *
                           static_cast<float>(a->values[0]) *
                           static_cast<float>(v));
  std::string scaleName = partName(what + "_scale");
  statics_[scaleName] = std::move(scale);
  parts.push_back(partNode(*node_, "DequantizeLinear", "dequantize_" + what,
                           {node_->inputs[bias], scaleName}, {partName(what)},
                           axis));
  operands.push_back(partName(what));
  return true;
}

bool Importer::qlinear(const std::string &op) {
  bool conv = op == "QLinearConv";
  static const char *const kConvInputs[] = {"x",       "x_scale", "",       "w",
                                            "w_scale", "",        "y_scale"};
  static const char *const kMatMulInputs[] = {
      "a", "a_scale", "", "b", "b_scale", "", "y_scale"};
  for (size_t i : {0, 1, 3, 4, 6})
    if (!hasInput(i))
      return fail("input " + std::to_string(i) + " (" +
                  (conv ? kConvInputs : kMatMulInputs)[i] + ") is missing");
  const std::vector<std::string> &in = node_->inputs;
  auto input = [&](size_t i) { return hasInput(i) ? in[i] : std::string(); };
  std::string x = partName("x"), w = partName("w"), y = partName("y");
  std::vector<onnx::Node> parts;
  int64_t rowAxis = std::max<int64_t>(inputRank(0) - 2, 0);
  parts.push_back(partNode(
      *node_, "DequantizeLinear", "dequantize_x", {in[0], in[1], input(2)}, {x},
      conv ? std::nullopt : std::optional<int64_t>(rowAxis)));
  // A convolution's weights per output channel; a product's B per column.
  parts.push_back(partNode(*node_, "DequantizeLinear", "dequantize_w",
                           {in[3], in[4], input(5)}, {w},
                           conv ? 0 : std::max<int64_t>(inputRank(3) - 1, 0)));
  std::vector<std::string> operands = {x, w};
  // The INT32 bias is in units of x_scale x w_scale, zero point 0.
  if (conv && hasInput(8) &&
      !int32Bias(8, 1, "x_scale", "x", 4, 1.0, "bias", 0, parts, operands))
    return false;
  onnx::Node product = partNode(*node_, conv ? "Conv" : "MatMul",
                                conv ? "conv" : "matmul", operands, {y});
  if (conv)
    product.attributes = node_->attributes;
  parts.push_back(std::move(product));
  parts.push_back(
      partNode(*node_, "QuantizeLinear", "quantize_y", {y, in[6], input(7)},
               {node_->outputs[0]},
               conv ? std::nullopt : std::optional<int64_t>(rowAxis)));
  return importParts(parts);
}

bool Importer::qlinearMicrosoft(const std::string &op) {
  const std::vector<std::string> &in = node_->inputs;
  auto input = [&](size_t i) { return hasInput(i) ? in[i] : std::string(); };
  std::vector<onnx::Node> parts;
  // DequantizeLinear of input |x| by inputs |scale| and |zero|.
  auto dequantized = [&](size_t x, size_t scale, size_t zero,
                         const std::string &what) {
    std::string out = partName(what);
    parts.push_back(partNode(*node_, "DequantizeLinear", "dequantize_" + what,
                             {input(x), input(scale), input(zero)}, {out}));
    return out;
  };
  std::string y = partName("y");
  size_t yScale = 0;
  onnx::Node body;
  if (op == "QGemm") {
    // A, a_scale, a_zero_point, B, b_scale, b_zero_point, C (INT32, scale
    // alpha x a_scale x b_scale, zero point 0), y_scale, y_zero_point
    // (without them Y is float); alpha, transA, transB.
    if (!hasInput(0) || !hasInput(1) || !hasInput(3) || !hasInput(4))
      return fail("expected inputs A, a_scale, B and b_scale");
    std::string a = dequantized(0, 1, 2, "a");
    // b_scale per column: along N, B's dimension 1 (0 when transposed).
    std::string b = partName("b");
    bool transB = intAttr("transB", 0) != 0;
    parts.push_back(partNode(*node_, "DequantizeLinear", "dequantize_b",
                             {in[3], in[4], input(5)}, {b}, transB ? 0 : 1));
    std::vector<std::string> operands = {a, b};
    // C per column of Y (its last dimension).
    if (hasInput(6) &&
        !int32Bias(6, 1, "a_scale", "A", 4, floatAttr("alpha", 1.0), "c",
                   std::max<int64_t>(inputRank(6), 1) - 1, parts, operands))
      return false;
    body = partNode(*node_, "Gemm", "gemm", operands, {y});
    body.attributes = node_->attributes; // alpha, transA, transB
    if (!hasInput(7)) {
      // A float Y: the Gemm's own output.
      body.outputs = {node_->outputs[0]};
      parts.push_back(std::move(body));
      return importParts(parts);
    }
    yScale = 7;
  } else if (op == "QLinearAdd" || op == "QLinearMul") {
    // A, A_scale, A_zero_point, B, B_scale, B_zero_point, C_scale,
    // C_zero_point.
    std::string a = dequantized(0, 1, 2, "a"), b = dequantized(3, 4, 5, "b");
    body = partNode(*node_, op == "QLinearAdd" ? "Add" : "Mul",
                    op == "QLinearAdd" ? "add" : "mul", {a, b}, {y});
    yScale = 6;
  } else if (op == "QLinearConcat") {
    // Y_scale, Y_zero_point, then X, X_scale, X_zero_point per input.
    if (in.size() < 5 || (in.size() - 2) % 3 != 0)
      return fail("has " + std::to_string(in.size()) +
                  " inputs: expected Y_scale, Y_zero_point and a triple "
                  "(X, X_scale, X_zero_point) per tensor");
    std::vector<std::string> xs;
    for (size_t i = 2; i < in.size(); i += 3)
      xs.push_back(
          dequantized(i, i + 1, i + 2, "x" + std::to_string((i - 2) / 3)));
    body = partNode(*node_, "Concat", "concat", xs, {y});
    body.attributes = node_->attributes; // axis
    yScale = 0;
  } else {
    // X, X_scale, X_zero_point, Y_scale, Y_zero_point.
    bool pool = op == "QLinearGlobalAveragePool" || op == "QLinearAveragePool";
    if (pool && intAttr("channels_last", 0))
      return fail("channels_last is 1: kiln import reads NCHW pooling");
    std::string x = dequantized(0, 1, 2, "x");
    const char *floatOp = op == "QLinearSigmoid"       ? "Sigmoid"
                          : op == "QLinearLeakyRelu"   ? "LeakyRelu"
                          : op == "QLinearAveragePool" ? "AveragePool"
                                                       : "GlobalAveragePool";
    body = partNode(*node_, floatOp, "op", {x}, {y});
    // LeakyRelu's alpha; AveragePool's window attributes (channels_last,
    // 0, is ONNX Runtime's own).
    if (op == "QLinearLeakyRelu" || op == "QLinearAveragePool")
      for (const onnx::Attribute &a : node_->attributes)
        if (a.name != "channels_last")
          body.attributes.push_back(a);
    yScale = 3;
  }
  parts.push_back(std::move(body));
  parts.push_back(partNode(*node_, "QuantizeLinear", "quantize_y",
                           {y, input(yScale), input(yScale + 1)},
                           {node_->outputs[0]}));
  return importParts(parts);
}

bool Importer::trainedIntegers(size_t i, size_t zero, int64_t axis,
                               mlir::Value &out) {
  const std::string &name = node_->inputs[i];
  auto it = statics_.find(name);
  if (!options_.trainQuantizedWeights || node_->opType != "MatMulInteger" ||
      !initializerNames_.count(name) || it == statics_.end() ||
      isFloatType(it->second.dataType))
    return true;
  const Static *scale = scaleAppliedAfter();
  if (!scale)
    return true;
  const Static &w = it->second;
  Quantization q;
  q.dataType = w.dataType;
  if (!quantizedRange(q.dataType, /*dequantize=*/false, q.low, q.high))
    return true;
  q.scale = scale->values;
  for (double v : q.scale)
    if (!(v > 0) || !std::isfinite(v))
      return true;
  q.zeroPoint.assign(q.scale.size(), 0.0);
  if (hasInput(zero)) {
    auto z = statics_.find(node_->inputs[zero]);
    if (z == statics_.end())
      return true;
    q.zeroPoint = z->second.values;
    // One scale beside per-column zero points, or the other way: per
    // column both.
    if (q.scale.size() == 1)
      q.scale.assign(q.zeroPoint.size(), q.scale[0]);
    if (q.zeroPoint.size() == 1)
      q.zeroPoint.assign(q.scale.size(), q.zeroPoint[0]);
    if (q.zeroPoint.size() != q.scale.size())
      return true;
  }
  if (q.scale.size() > 1) {
    // Per column of B [..., K, N].
    if (axis < 0 || axis >= static_cast<int64_t>(w.dims.size()) ||
        w.dims[axis] != static_cast<int64_t>(q.scale.size()))
      return true;
    q.axis = axis;
    q.inner = product(llvm::ArrayRef<int64_t>(w.dims).drop_front(axis + 1));
  }
  mlir::Value parameter = quantizedParameter(name, q.dequantized(w.values));
  if (!parameter)
    return false;
  mlir::Value integers = quantize(parameter, q);
  mlir::Value zeros =
      integers ? quantizationTensor(q, q.zeroPoint, integers, "zero_point")
               : nullptr;
  if (!zeros)
    return false;
  out = sub(integers, zeros, ".centered" + std::to_string(i));
  return true;
}

bool Importer::centered(size_t i, size_t zero, int64_t axis, mlir::Value &out) {
  if (!hasInput(i))
    return fail("input " + std::to_string(i) + " is missing");
  // B of ONNX Runtime's dynamic quantization, trained in float.
  if (!trainedIntegers(i, zero, axis, out))
    return false;
  if (out)
    return true;
  // Input |k| as integers: quantized ones, or an integer constant; null
  // (and no error yet) for anything else.
  auto integers = [&](size_t k, bool &failed) -> mlir::Value {
    const std::string &name = node_->inputs[k];
    if (quantized_.count(name))
      return values_[name];
    auto it = statics_.find(name);
    if (it == statics_.end() || isFloatType(it->second.dataType))
      return nullptr;
    // An integer initializer stays a constant unless trainedIntegers took
    // it (above).
    if (k == i && initializerNames_.count(name))
      fixedQuantizedWeights_ = true;
    Static f = it->second;
    f.dataType = int32_t(DataType::Float);
    mlir::Value v = constant(f, nodeName_ + ".input" + std::to_string(k));
    failed = !v;
    return v;
  };
  bool failed = false;
  mlir::Value x = integers(i, failed);
  if (failed)
    return false;
  if (!x)
    return fail("input " + std::to_string(i) + " ('" + node_->inputs[i] +
                "') is neither quantized integers (a QuantizeLinear's, a "
                "DynamicQuantizeLinear's or a QLinear op's output) nor an "
                "integer constant");
  if (!hasInput(zero)) {
    out = x;
    return true;
  }
  mlir::Value z = integers(zero, failed);
  if (failed)
    return false;
  if (!z)
    return fail("input " + std::to_string(zero) + " ('" + node_->inputs[zero] +
                "'), a zero point, is neither integers nor a "
                "DynamicQuantizeLinear's zero point");
  llvm::ArrayRef<int64_t> dims = shape(x), zd = shape(z);
  int64_t count = 1;
  for (int64_t d : zd)
    count *= d;
  std::string at = nodeName_ + ".zero_point" + std::to_string(i);
  if (count == 1) {
    z = g_.broadcast(at, g_.reshape(at + "_scalar", z, {}), {}, dims);
  } else if (zd.size() == 1 && axis >= 0 &&
             axis < static_cast<int64_t>(dims.size()) && dims[axis] == zd[0]) {
    z = g_.broadcast(at, z, {axis}, dims);
  } else {
    return fail("the zero point of input " + std::to_string(i) + " is " +
                shapeText(zd) + " for " + shapeText(dims) +
                ": expected a scalar or one per index along axis " +
                std::to_string(axis));
  }
  out = sub(x, z, ".centered" + std::to_string(i));
  return true;
}

bool Importer::integerOp(const std::string &op) {
  bool conv = op == "ConvInteger";
  mlir::Value a, b;
  // MatMulInteger: A's zero point per row, B's per column; ConvInteger:
  // x's per tensor, w's per output channel.
  if (!centered(0, 2, conv ? -1 : inputRank(0) - 2, a) ||
      !centered(1, 3, conv ? 0 : inputRank(1) - 1, b))
    return false;
  std::string x = partName("x"), w = partName("w"), y = partName("y");
  values_[x] = a;
  values_[w] = b;
  onnx::Node product = partNode(*node_, conv ? "Conv" : "MatMul",
                                conv ? "conv" : "matmul", {x, w}, {y});
  if (conv)
    product.attributes = node_->attributes;
  if (!importParts({product}))
    return false;
  setOutput(0, values_[y]);
  quantized_[node_->outputs[0]] = int32_t(DataType::Int32);
  return true;
}

bool Importer::dynamicQuantizeLinear() {
  mlir::Value x;
  if (!floatValue(0, x))
    return false;
  if (node_->outputs.size() != 3)
    return fail("has " + std::to_string(node_->outputs.size()) +
                " outputs: expected y, y_scale and y_zero_point");
  mlir::Type e = element(x);
  mlir::RankedTensorType scalar = type({}, e);
  llvm::SmallVector<int64_t> all;
  for (size_t d = 0; d < shape(x).size(); ++d)
    all.push_back(static_cast<int64_t>(d));
  auto extreme = [&](kiln::ReduceKind kind, const std::string &suffix) {
    mlir::Value r = b_.create<kiln::ReduceOp>(loc(suffix), kind, x, all);
    // The range includes 0, so that 0 is exact.
    mlir::Value zero = splat(0.0, e, {});
    return kind == kiln::ReduceKind::max
               ? b_.create<kiln::MaxOp>(loc(suffix + "_with_zero"), scalar, r,
                                        zero)
                     .getResult()
               : b_.create<kiln::MinOp>(loc(suffix + "_with_zero"), scalar, r,
                                        zero)
                     .getResult();
  };
  // The scale and zero point are constants to the gradient (the quantized
  // values' straight-through estimate is the same as QuantizeLinear's).
  mlir::Value high = b_.create<kiln::StopGradientOp>(
      loc(".max_stopped"), scalar, extreme(kiln::ReduceKind::max, ".max"));
  mlir::Value low = b_.create<kiln::StopGradientOp>(
      loc(".min_stopped"), scalar, extreme(kiln::ReduceKind::min, ".min"));
  // scale = (max - min) / 255, 1 when the range is empty (x all 0).
  mlir::Value range = sub(high, low, ".range");
  mlir::Value empty = b_.create<kiln::CompareOp>(
      loc(".empty"), type({}, b_.getI1Type()), kiln::CompareDirection::eq,
      range, splat(0.0, e, {}));
  mlir::Value scale = b_.create<kiln::SelectOp>(
      loc(".scale"), scalar, empty, splat(1.0, e, {}),
      div(range, splat(255.0, e, {}), ".range_over_255"));
  // zero point = round(clamp(0 - min / scale, 0, 255)).
  mlir::Value start = sub(splat(0.0, e, {}), div(low, scale, ".min_scaled"),
                          ".zero_point_exact");
  mlir::Value clamped = b_.create<kiln::MinOp>(
      loc(".zero_point_high"), scalar,
      b_.create<kiln::MaxOp>(loc(".zero_point_low"), scalar, start,
                             splat(0.0, e, {})),
      splat(255.0, e, {}));
  mlir::Value zeroPoint =
      b_.create<kiln::RoundOp>(loc(".zero_point"), scalar, clamped);
  std::string at = nodeName_ + ".";
  mlir::Value y = quantizeBy(
      x, g_.broadcast(at + "scale_broadcast", scale, {}, shape(x)),
      g_.broadcast(at + "zero_point_broadcast", zeroPoint, {}, shape(x)), 0,
      255);
  setOutput(0, y);
  quantized_[node_->outputs[0]] = int32_t(DataType::Uint8);
  if (!node_->outputs[1].empty())
    setOutput(1, scale);
  if (!node_->outputs[2].empty()) {
    setOutput(2, zeroPoint);
    quantized_[node_->outputs[2]] = int32_t(DataType::Uint8);
  }
  return true;
}

} // namespace kiln::cli::onnx_import
