//===- OnnxImportImage.cpp - instance norm and resize ---------------------===//
//
// The importer's image ops (OnnxImporter.h): InstanceNormalization (also
// the group norm the exporters write as one), and Resize as interpolation
// matrices (linear, cubic) or a gather of rows (nearest) along each
// resized axis. (Conv and ConvTranspose are in OnnxImportOps.cpp.)
//
//===----------------------------------------------------------------------===//

#include "tools/kiln/lib/OnnxImporter.h"

#include "llvm/ADT/STLExtras.h"

#include <algorithm>
#include <array>
#include <cmath>

namespace kiln::cli::onnx_import {

static bool allEqual(const Static &s, double v) {
  return llvm::all_of(s.values, [v](double x) { return x == v; });
}

// InstanceNormalization of X [N, C, D...]: each (n, c) normalized over D
// with its mean and biased variance, then scale[c] and B[c]. Built as a
// kiln.layer_norm over the dimensions past C (its own scale and bias ones
// and zeros) and a per-channel affine.
//
// Both PyTorch exporters write nn.GroupNorm as a Reshape to [N, G, -1], an
// InstanceNormalization whose scale and B are ones and zeros (G of each,
// constants of the export, not parameters of the model), a Reshape back
// and the group norm's own affine. Those ones and zeros are read as
// constants here even where the torch.export exporter stores them as
// initializers, which would otherwise become parameters PyTorch lacks.
bool Importer::instanceNorm() {
  mlir::Value x;
  if (!value(0, x))
    return false;
  llvm::ArrayRef<int64_t> sx = shape(x);
  if (sx.size() < 3)
    return fail("X is " + shapeText(sx) + ": expected [N, C, D...]");
  int64_t channels = sx[1];
  mlir::Type e = element(x);
  bool grouped = false;
  if (auto it = producers_.find(node_->inputs[0]);
      it != producers_.end() && it->second->opType == "Reshape" && sx.size() == 3) {
    const Static *scale = constInput(1), *bias = constInput(2);
    grouped = scale && bias && allEqual(*scale, 1.0) && allEqual(*bias, 0.0);
  }
  if (grouped) {
    // The group norm's own affine after the Reshape back: a Mul by its
    // weight (ones in PyTorch) and an Add of its bias (zeros).
    auto only = [&](const std::string &tensor, const char *op) -> const onnx::Node * {
      auto it = consumers_.find(tensor);
      if (it == consumers_.end() || it->second.size() != 1 || it->second[0]->opType != op)
        return nullptr;
      return it->second[0];
    };
    auto otherInput = [](const onnx::Node *n, const std::string &tensor) {
      return n->inputs.size() == 2 ? n->inputs[n->inputs[0] == tensor ? 1 : 0] : "";
    };
    if (const onnx::Node *back = only(node_->outputs[0], "Reshape"))
      if (const onnx::Node *scaleNode = only(back->outputs[0], "Mul")) {
        initializeAs(otherInput(scaleNode, back->outputs[0]), kiln::InitKind::ones);
        if (const onnx::Node *shift = only(scaleNode->outputs[0], "Add"))
          initializeAs(otherInput(shift, scaleNode->outputs[0]), kiln::InitKind::zeros);
      }
  }
  bool affine = !grouped;
  if (affine && hasInput(1) && hasInput(2) && statics_.count(node_->inputs[1]) &&
      statics_.count(node_->inputs[2]))
    affine = !(allEqual(statics_[node_->inputs[1]], 1.0) &&
               allEqual(statics_[node_->inputs[2]], 0.0));
  llvm::ArrayRef<int64_t> normalized = sx.drop_front(2);
  mlir::Value y = b_.create<kiln::LayerNormOp>(
      affine ? loc(".normalize") : loc(), x.getType(), x, splat(1.0, e, normalized),
      splat(0.0, e, normalized), b_.getI64IntegerAttr(2),
      b_.getF64FloatAttr(floatAttr("epsilon", 1e-5f)));
  if (affine) {
    mlir::Value scale, bias;
    if (!value(1, scale) || !value(2, bias))
      return false;
    for (mlir::Value v : {scale, bias})
      if (shape(v) != llvm::ArrayRef<int64_t>{channels})
        return fail("scale and B must be [" + std::to_string(channels) + "], found " +
                    shapeText(shape(v)));
    y = b_.create<kiln::MulOp>(loc(".scale"), y.getType(), y,
                               g_.broadcast(nodeName_ + ".scale_broadcast", scale, {1}, sx));
    y = b_.create<kiln::AddOp>(loc(), y.getType(), y,
                               g_.broadcast(nodeName_ + ".bias_broadcast", bias, {1}, sx));
  }
  setOutput(0, y);
  return true;
}

namespace {

// Where output element |o| of a resized axis reads the input, in input
// coordinates, for ONNX's coordinate_transformation_mode.
double sourceCoordinate(const std::string &mode, int64_t o, int64_t in, int64_t out,
                        double scale) {
  if (mode == "align_corners")
    return out == 1 ? 0.0 : double(o) * double(in - 1) / double(out - 1);
  if (mode == "asymmetric")
    return double(o) / scale;
  if (mode == "pytorch_half_pixel")
    return out > 1 ? (o + 0.5) / scale - 0.5 : 0.0;
  if (mode == "half_pixel_symmetric") {
    double adjustment = double(out) / (scale * double(in));
    double center = double(in) / 2.0;
    return center * (1.0 - adjustment) + (o + 0.5) / scale - 0.5;
  }
  return (o + 0.5) / scale - 0.5; // half_pixel
}

int64_t nearestIndex(const std::string &mode, double x) {
  if (mode == "floor")
    return int64_t(std::floor(x));
  if (mode == "ceil")
    return int64_t(std::ceil(x));
  double lower = std::floor(x);
  if (x - lower == 0.5)
    return int64_t(mode == "round_prefer_ceil" ? lower + 1 : lower);
  return int64_t(std::round(x));
}

// Cubic convolution weights of the four neighbors floor(x) - 1 ..
// floor(x) + 2 at fraction t (Keys, with coefficient a; ONNX's and
// PyTorch's bicubic).
std::array<double, 4> cubicWeights(double t, double a) {
  auto near = [a](double d) { return ((a + 2) * d - (a + 3)) * d * d + 1; };
  auto far = [a](double d) { return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a; };
  return {far(t + 1), near(t), near(1 - t), far(2 - t)};
}

} // namespace

// Resize: inputs X, roi, scales, sizes (opset 11 on; X and scales in opset
// 10). Each axis whose size or scale changes is resized on its own, which
// is what ONNX's separable interpolation does: nearest as a gather of
// input rows, linear and cubic as a product with a constant [out, in]
// interpolation matrix (a kiln.dot_general, so the gradient is the
// transposed product).
bool Importer::resize() {
  mlir::Value x;
  if (!value(0, x))
    return false;
  llvm::ArrayRef<int64_t> sx = shape(x);
  int64_t rank = sx.size();
  std::string mode = stringAttr("mode", "nearest");
  std::string transform = opset_ >= 11
                              ? stringAttr("coordinate_transformation_mode", "half_pixel")
                              : "asymmetric";
  std::string nearestMode = stringAttr("nearest_mode", "round_prefer_floor");
  if (mode != "nearest" && mode != "linear" && mode != "cubic")
    return fail("mode is '" + mode + "': expected nearest, linear or cubic");
  static const std::set<std::string> kTransforms = {
      "half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
      "half_pixel_symmetric"};
  if (!kTransforms.count(transform))
    return fail("coordinate_transformation_mode is '" + transform +
                "': kiln import reads half_pixel, pytorch_half_pixel, "
                "align_corners, asymmetric and half_pixel_symmetric");
  if (nearestMode != "round_prefer_floor" && nearestMode != "round_prefer_ceil" &&
      nearestMode != "floor" && nearestMode != "ceil")
    return fail("nearest_mode is '" + nearestMode + "'");
  if (stringAttr("keep_aspect_ratio_policy", "stretch") != "stretch")
    return fail("keep_aspect_ratio_policy is not stretch");
  std::vector<int64_t> axes;
  if (std::optional<std::vector<int64_t>> a = intsAttr("axes")) {
    for (int64_t axis : *a) {
      if (!normalizeAxis(axis, rank, "axis"))
        return false;
      axes.push_back(axis);
    }
  } else {
    for (int64_t d = 0; d < rank; ++d)
      axes.push_back(d);
  }
  size_t scalesInput = opset_ >= 11 ? 2 : 1;
  const Static *scales = nullptr, *sizes = nullptr;
  if (hasInput(scalesInput)) {
    scales = constInput(scalesInput);
    if (!scales)
      return false;
    if (scales->values.empty())
      scales = nullptr;
  }
  if (opset_ >= 11 && hasInput(3)) {
    sizes = constInput(3);
    if (!sizes)
      return false;
    if (sizes->values.empty())
      sizes = nullptr;
  }
  if (!scales == !sizes)
    return fail("give one of scales and sizes (it has " +
                std::string(scales ? "both" : "neither") + ")");
  const Static &given = scales ? *scales : *sizes;
  if (given.values.size() != axes.size())
    return fail(std::string(scales ? "scales" : "sizes") + " has " +
                std::to_string(given.values.size()) + " values for " +
                std::to_string(axes.size()) + " axes");
  llvm::SmallVector<int64_t> outDims(sx.begin(), sx.end());
  llvm::SmallVector<double> axisScale(rank, 1.0);
  for (size_t i = 0; i < axes.size(); ++i) {
    int64_t d = axes[i];
    double v = given.values[i];
    if (!(v > 0))
      return fail(std::string(scales ? "scale " : "size ") + std::to_string(v) +
                  " of axis " + std::to_string(d) + " is not positive");
    if (scales) {
      axisScale[d] = v;
      outDims[d] = int64_t(std::floor(sx[d] * v));
      if (outDims[d] < 1)
        return fail("scale " + std::to_string(v) + " leaves axis " + std::to_string(d) +
                    " empty");
    } else {
      outDims[d] = int64_t(v);
      axisScale[d] = double(outDims[d]) / double(sx[d]);
    }
  }
  if (intAttr("antialias", 0) != 0 &&
      llvm::any_of(axisScale, [](double s) { return s < 1.0; }))
    return fail("antialias is 1 and an axis shrinks: kiln import does not read "
                "antialiased downsampling");
  double cubicA = floatAttr("cubic_coeff_a", -0.75f);
  bool excludeOutside = intAttr("exclude_outside", 0) != 0;

  // The axes to resize, in order. Each matrix product moves its axis to
  // the end, so after them the resized axes are last, in order; a final
  // transpose puts them back where they belong (none for NCHW's H and W).
  mlir::Value y = x;
  llvm::SmallVector<int64_t> layout; // layout[i]: the axis of x at position i
  for (int64_t d = 0; d < rank; ++d)
    layout.push_back(d);
  for (int64_t d = 0; d < rank; ++d) {
    if (outDims[d] == sx[d] && axisScale[d] == 1.0)
      continue;
    int64_t in = sx[d], out = outDims[d];
    std::string suffix = ".axis" + std::to_string(d);
    if (mode == "nearest") {
      llvm::SmallVector<int64_t> rows;
      for (int64_t o = 0; o < out; ++o) {
        double source = sourceCoordinate(transform, o, in, out, axisScale[d]);
        rows.push_back(std::clamp<int64_t>(nearestIndex(nearestMode, source), 0, in - 1));
      }
      int64_t position = llvm::find(layout, d) - layout.begin();
      y = gatherAxis(y, position, rows, suffix);
      continue;
    }
    // The [out, in] interpolation matrix.
    Static m;
    m.dataType = int32_t(DataType::Float);
    m.dims = {out, in};
    m.values.assign(out * in, 0.0);
    for (int64_t o = 0; o < out; ++o) {
      double source = sourceCoordinate(transform, o, in, out, axisScale[d]);
      double *rowWeights = &m.values[o * in];
      if (mode == "linear") {
        double c = std::clamp(source, 0.0, double(in - 1));
        int64_t low = int64_t(std::floor(c));
        int64_t high = std::min(low + 1, in - 1);
        double t = c - low;
        rowWeights[low] += 1.0 - t;
        rowWeights[high] += t;
      } else {
        double lower = std::floor(source);
        std::array<double, 4> w = cubicWeights(source - lower, cubicA);
        double kept = 0.0;
        for (int k = 0; k < 4; ++k) {
          int64_t i = int64_t(lower) - 1 + k;
          if (excludeOutside && (i < 0 || i >= in))
            w[k] = 0.0;
          kept += w[k];
        }
        for (int k = 0; k < 4; ++k) {
          int64_t i = std::clamp<int64_t>(int64_t(lower) - 1 + k, 0, in - 1);
          rowWeights[i] += excludeOutside ? w[k] / kept : w[k];
        }
      }
    }
    mlir::Value matrix = constant(m, nodeName_ + suffix + ".weights");
    int64_t position = llvm::find(layout, d) - layout.begin();
    llvm::SmallVector<int64_t> dims;
    llvm::SmallVector<int64_t> next;
    for (int64_t i = 0; i < rank; ++i)
      if (i != position) {
        dims.push_back(shape(y)[i]);
        next.push_back(layout[i]);
      }
    dims.push_back(out);
    next.push_back(d);
    y = b_.create<kiln::DotGeneralOp>(loc(suffix), type(dims, element(x)), y, matrix,
                                      arr({}), arr({}), arr({position}), arr({1}));
    layout = next;
  }
  bool ordered = true;
  for (int64_t i = 0; i < rank; ++i)
    ordered &= layout[i] == i;
  if (!ordered) {
    llvm::SmallVector<int64_t> perm(rank);
    for (int64_t i = 0; i < rank; ++i)
      perm[i] = llvm::find(layout, i) - layout.begin();
    y = b_.create<kiln::TransposeOp>(loc(".order"), type(outDims, element(x)), y,
                                     arr(perm));
  }
  setOutput(0, y);
  return true;
}

} // namespace kiln::cli::onnx_import
