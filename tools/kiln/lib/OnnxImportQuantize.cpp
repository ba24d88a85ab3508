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
// integers (exact: |q| < 2^16) that only a DequantizeLinear may read. Its
// gradient is PyTorch's straight-through estimate: dy/dx is 1 where
// round(x / scale) + zero_point lies within [qmin, qmax] and 0 where the
// clamp binds. q is built as t + stop_gradient(q - t) with t = mask * x /
// scale, so the value is q and dq/dx = mask / scale.
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
  mlir::Type t = x.getType(), e = element(x),
             flags = type(shape(x), b_.getI1Type());
  mlir::Value scaled = div(x, scale, ".scaled");
  mlir::Value rounded =
      add(b_.create<kiln::RoundOp>(loc(".round"), t, scaled), zero, ".shifted");
  mlir::Value low = splat(q.low, e, shape(x)),
              high = splat(q.high, e, shape(x));
  mlir::Value clamped = b_.create<kiln::MinOp>(
      loc(".clamp_high"), t,
      b_.create<kiln::MaxOp>(loc(".clamp_low"), t, rounded, low), high);
  // The straight-through mask: 1 where the clamp does not bind.
  mlir::Value zeros = splat(0.0, e, shape(x)), ones = splat(1.0, e, shape(x));
  mlir::Value aboveLow = b_.create<kiln::CompareOp>(
      loc(".above_low"), flags, kiln::CompareDirection::ge, rounded, low);
  mlir::Value belowHigh = b_.create<kiln::CompareOp>(
      loc(".below_high"), flags, kiln::CompareDirection::le, rounded, high);
  mlir::Value mask = b_.create<kiln::SelectOp>(
      loc(".mask"), t, aboveLow,
      b_.create<kiln::SelectOp>(loc(".mask_high"), t, belowHigh, ones, zeros),
      zeros);
  mlir::Value through = mul(scaled, mask, ".through");
  mlir::Value rest = b_.create<kiln::StopGradientOp>(
      loc(".rest"), t, sub(clamped, through, ".difference"));
  return add(through, rest, "");
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
    std::vector<float> values;
    for (size_t i = 0; i < x.values.size(); ++i) {
      size_t k = q.channel(i);
      values.push_back(
          static_cast<float>((x.values[i] - q.zeroPoint[k]) * q.scale[k]));
    }
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
    return fail("dequantizes '" + name +
                "' with another scale or zero point than an earlier "
                "DequantizeLinear: kiln import trains one float parameter "
                "per quantized initializer (--quantized-weights=fixed keeps "
                "each dequantization a constant)");
  }
  // An INT32 bias (scaled by the input's and the weight's scales) trains in
  // float, as PyTorch's quantization-aware training keeps it.
  if (q.dataType == int32_t(DataType::Int32)) {
    setOutput(0, p.value);
    return true;
  }
  mlir::Value integers = quantize(p.value, q);
  mlir::Value y = integers ? dequantize(integers, q) : nullptr;
  if (!y)
    return false;
  setOutput(0, y);
  return true;
}

} // namespace kiln::cli::onnx_import
