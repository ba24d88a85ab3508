//===- OnnxImportImage.cpp - instance norm and resize ---------------------===//
//
// The importer's image ops (OnnxImporter.h): InstanceNormalization (also
// the group norm the exporters write as one), GroupNormalization and
// RMSNormalization, and Resize as interpolation
// matrices (linear, cubic) or a gather of rows (nearest) along each
// resized axis. (Conv and ConvTranspose are in OnnxImportOps.cpp.)
//
//===----------------------------------------------------------------------===//

#include "tools/kiln/lib/OnnxImporter.h"

#include "llvm/ADT/STLExtras.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>

namespace kiln::cli::onnx_import {

static bool allEqual(const Static &s, double v) {
  return llvm::all_of(s.values, [v](double x) { return x == v; });
}

// LRN (AlexNet's local response normalization): x over (bias + alpha /
// size * the sum of squares over the `size` channels around it)^beta, the
// window from c - floor((size - 1) / 2) to c + ceil((size - 1) / 2). The
// squares, as [N, 1, C, the rest], pass through kiln.avg_pool2d over
// (size, 1) with zero channels padded at both ends: its mean is the sum
// over size, so the divisor is bias + alpha * that mean.
bool Importer::lrn() {
  mlir::Value x;
  if (!floatValue(0, x))
    return false;
  mlir::Type e = element(x);
  llvm::ArrayRef<int64_t> sx = shape(x);
  if (sx.size() < 3)
    return fail("its input is " + shapeText(sx) + ": expected [N, C, D1, ...]");
  int64_t size = intAttr("size", 0);
  if (size < 1)
    return fail("size is " + std::to_string(size) + ": expected 1 or more");
  double alpha = floatAttr("alpha", 1e-4), beta = floatAttr("beta", 0.75),
         bias = floatAttr("bias", 1.0);
  int64_t n = sx[0], c = sx[1], rest = product(sx.drop_front(2));
  mlir::Value squares =
      g_.reshape(nodeName_ + ".squares", mul(x, x, ".square"), {n, 1, c, rest});
  mlir::Value mean =
      pool2d(false, squares, {size, 1}, {1, 1},
             {(size - 1) / 2, size / 2, 0, 0}, {n, 1, c, rest}, ".window");
  mean = g_.reshape(nodeName_ + ".window_mean", mean, sx);
  mlir::Value base = add(splat(bias, e, sx),
                         mul(mean, splat(alpha, e, sx), ".alpha"), ".base");
  mlir::Value divisor = b_.create<kiln::PowOp>(loc(".divisor"), base.getType(),
                                               base, splat(beta, e, sx));
  setOutput(0, div(x, divisor, ""));
  return true;
}

// MeanVarianceNormalization: (x - mean) / sqrt(variance + 1e-9) over
// `axes` (default [0, 2, 3]), the variance the mean of the squared
// deviations (ONNX's function body).
bool Importer::meanVarianceNormalization() {
  mlir::Value x;
  if (!floatValue(0, x))
    return false;
  mlir::Type e = element(x);
  llvm::ArrayRef<int64_t> sx = shape(x);
  int64_t rank = sx.size();
  std::vector<int64_t> axes =
      intsAttr("axes").value_or(std::vector<int64_t>{0, 2, 3});
  llvm::SmallVector<int64_t> dims, kept;
  for (int64_t &a : axes)
    if (!normalizeAxis(a, rank, "axes"))
      return false;
  for (int64_t d = 0; d < rank; ++d) {
    if (llvm::is_contained(axes, d)) {
      dims.push_back(d);
    } else {
      kept.push_back(d);
    }
  }
  auto meanOver = [&](mlir::Value v, const std::string &at) {
    llvm::SmallVector<int64_t> reduced;
    for (int64_t d : kept)
      reduced.push_back(sx[d]);
    mlir::Value m = b_.create<kiln::ReduceOp>(
        loc(at), type(reduced, e), kiln::ReduceKind::mean, v, arr(dims));
    return g_.broadcast(nodeName_ + at + "_broadcast", m, kept, sx);
  };
  mlir::Value centered = sub(x, meanOver(x, ".mean"), ".centered");
  mlir::Value variance =
      meanOver(mul(centered, centered, ".squared"), ".variance");
  mlir::Value root = b_.create<kiln::SqrtOp>(
      loc(".root"), x.getType(), add(variance, splat(1e-9, e, sx), ".epsilon"));
  setOutput(0, div(centered, root, ""));
  return true;
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
      affine ? loc(".normalize") : loc(), x.getType(), x,
      splat(1.0, e, normalized), splat(0.0, e, normalized),
      b_.getI64IntegerAttr(2), b_.getF64FloatAttr(floatAttr("epsilon", 1e-5)));
  if (affine) {
    mlir::Value scale, bias;
    if (!value(1, scale) || !value(2, bias))
      return false;
    for (mlir::Value v : {scale, bias})
      if (shape(v) != llvm::ArrayRef<int64_t>{channels})
        return fail("scale and B must be [" + std::to_string(channels) + "], found " +
                    shapeText(shape(v)));
    y = affineAlongDim1(y, scale, bias, loc());
  }
  setOutput(0, y);
  return true;
}

mlir::Value Importer::affineAlongDim1(mlir::Value y, mlir::Value scale,
                                      mlir::Value bias, mlir::Location at) {
  llvm::ArrayRef<int64_t> sy = shape(y);
  y = b_.create<kiln::MulOp>(
      loc(".scale"), y.getType(), y,
      g_.broadcast(nodeName_ + ".scale_broadcast", scale, {1}, sy));
  return b_.create<kiln::AddOp>(
      at, y.getType(), y,
      g_.broadcast(nodeName_ + ".bias_broadcast", bias, {1}, sy));
}

// GroupNormalization of X [N, C, D...] in G groups: each (n, group)
// normalized over its C / G channels and D with its mean and biased
// variance (a kiln.layer_norm of X as [N, G, C / G * D]), then scale and
// bias: per group before opset 21, per channel from it.
bool Importer::groupNorm() {
  mlir::Value x, scale, bias;
  if (!value(0, x) || !value(1, scale) || !value(2, bias))
    return false;
  llvm::ArrayRef<int64_t> sx = shape(x);
  if (sx.size() < 3)
    return fail("X is " + shapeText(sx) + ": expected [N, C, D...]");
  int64_t groups = intAttr("num_groups", 0), channels = sx[1];
  if (groups < 1 || channels % groups != 0)
    return fail("num_groups is " + std::to_string(groups) +
                ": expected a divisor of the " + std::to_string(channels) +
                " channels");
  int64_t perGroup = product(sx.drop_front(1)) / groups;
  bool perChannel = opset_ >= 21;
  int64_t affine = perChannel ? channels : groups;
  for (mlir::Value v : {scale, bias})
    if (shape(v) != llvm::ArrayRef<int64_t>{affine})
      return fail(std::string("scale and bias must be [") +
                  std::to_string(affine) + "] (" +
                  (perChannel ? "a value per channel from opset 21"
                              : "a value per group") +
                  "), found " + shapeText(shape(v)));
  mlir::Type e = element(x);
  llvm::SmallVector<int64_t> grouped = {sx[0], groups, perGroup};
  mlir::Value y = b_.create<kiln::LayerNormOp>(
      loc(".normalize"), type(grouped, e),
      g_.reshape(nodeName_ + ".groups", x, grouped), splat(1.0, e, {perGroup}),
      splat(0.0, e, {perGroup}), b_.getI64IntegerAttr(2),
      b_.getF64FloatAttr(floatAttr("epsilon", 1e-5)));
  // Per group: applied to the grouped rows; per channel: to X's shape.
  if (perChannel)
    y = g_.reshape(nodeName_ + ".ungrouped", y, sx);
  y = affineAlongDim1(y, scale, bias, perChannel ? loc() : loc(".bias"));
  setOutput(0, perChannel ? y : g_.reshape(nodeName_, y, sx));
  return true;
}

// RMSNormalization: X over the root of the mean of its squares along axis
// and every dimension after it (plus epsilon), times scale (broadcast to
// X's shape, NumPy's way).
bool Importer::rmsNorm() {
  mlir::Value x, scale;
  if (!value(0, x) || !value(1, scale))
    return false;
  llvm::ArrayRef<int64_t> sx = shape(x);
  int64_t rank = sx.size(), axis;
  if (!axisOf(x, -1, axis))
    return false;
  llvm::SmallVector<int64_t> broadcast;
  if (!broadcastShapes(sx, shape(scale), broadcast) ||
      llvm::ArrayRef<int64_t>(broadcast) != sx)
    return fail("scale is " + shapeText(shape(scale)) +
                ": expected a shape that broadcasts to X's " + shapeText(sx));
  mlir::Type e = element(x), t = x.getType();
  if (!llvm::isa<mlir::FloatType>(e))
    return fail("X is not a float tensor");
  llvm::SmallVector<int64_t> reduced, kept, keptDims;
  for (int64_t d = 0; d < rank; ++d) {
    if (d >= axis) {
      reduced.push_back(d);
    } else {
      kept.push_back(sx[d]);
      keptDims.push_back(d);
    }
  }
  mlir::Value square = b_.create<kiln::MulOp>(loc(".square"), t, x, x);
  mlir::Value mean =
      b_.create<kiln::ReduceOp>(loc(".mean"), type(kept, e),
                                kiln::ReduceKind::mean, square, arr(reduced));
  mlir::Value inverse = b_.create<kiln::RsqrtOp>(
      loc(".inverse_rms"), mean.getType(),
      b_.create<kiln::AddOp>(loc(".epsilon"), mean.getType(), mean,
                             splat(floatAttr("epsilon", 1e-5), e, kept)));
  mlir::Value y = b_.create<kiln::MulOp>(
      loc(".normalize"), t, x,
      g_.broadcast(nodeName_ + ".inverse_broadcast", inverse, keptDims, sx));
  setOutput(0, b_.create<kiln::MulOp>(loc(), t, y, broadcastTo(scale, sx)));
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

// Keys' cubic convolution kernel with coefficient a at distance x (ONNX's
// and PyTorch's bicubic).
double keysCubic(double x, double a) {
  x = std::abs(x);
  if (x <= 1)
    return ((a + 2) * x - (a + 3)) * x * x + 1;
  if (x < 2)
    return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
  return 0.0;
}

// Cubic convolution weights of the four neighbors floor(x) - 1 ..
// floor(x) + 2 at fraction t.
std::array<double, 4> cubicWeights(double t, double a) {
  return {keysCubic(t + 1, a), keysCubic(t, a), keysCubic(1 - t, a),
          keysCubic(2 - t, a)};
}

// One output's weights over the |in| inputs of an axis for antialiased
// linear or cubic resizing (ONNX's antialias, which PyTorch's
// F.interpolate(antialias=True) exports with exclude_outside): the filter
// (a triangle, or Keys' cubic with |a|) stretched by 1 / |scale| where
// the axis shrinks, its taps at the pixels around |source| normalized to
// sum to 1. Taps outside the input read the edge pixel, or with
// |excludeOutside| are dropped and the rest renormalized. As ONNX's
// reference, a source on a pixel counts from the pixel before it (ratio 1).
void antialiasWeights(bool cubic, double source, double scale, double a,
                      bool excludeOutside, int64_t in, double *rowWeights) {
  double s = std::min(scale, 1.0);
  int64_t start = int64_t(std::floor((cubic ? -2.0 : -1.0) / s)) + 1;
  int64_t taps = 2 - 2 * start;
  int64_t left = int64_t(std::floor(source));
  double ratio = source - double(left);
  if (ratio == 0.0) {
    left -= 1;
    ratio = 1.0;
  }
  auto filter = [&](double x) {
    return cubic ? keysCubic(x, a) : std::max(0.0, 1.0 - std::abs(x));
  };
  std::vector<double> w(taps);
  double total = 0.0;
  for (int64_t k = 0; k < taps; ++k)
    total += w[k] = filter(s * double(start + k - ratio));
  double kept = 0.0;
  for (int64_t k = 0; k < taps; ++k) {
    w[k] /= total;
    int64_t i = left + start + k;
    if (excludeOutside && (i < 0 || i >= in))
      w[k] = 0.0;
    kept += w[k];
  }
  for (int64_t k = 0; k < taps; ++k) {
    int64_t i = std::clamp<int64_t>(left + start + k, 0, in - 1);
    rowWeights[i] += excludeOutside ? w[k] / kept : w[k];
  }
}

} // namespace

// Resize: inputs X, roi, scales, sizes (opset 11 on; X and scales in opset
// 10). Each axis whose size or scale changes is resized on its own, which
// is what ONNX's separable interpolation does: nearest as a gather of
// input rows, linear and cubic as a product with a constant [out, in]
// interpolation matrix (a kiln.dot_general, so the gradient is the
// transposed product); antialiasing only changes the matrix.
bool Importer::resize(bool upsample) {
  mlir::Value x;
  if (!value(0, x))
    return false;
  llvm::ArrayRef<int64_t> sx = shape(x);
  int64_t rank = sx.size();
  std::string mode = stringAttr("mode", "nearest");
  // Upsample (opsets 7 to 9, Resize's forerunner): asymmetric coordinates
  // (source = destination / scale) and, for nearest, the source rounded
  // down (each element repeated scale times, as onnx.reference's and ONNX
  // Runtime's); its scales are at least 1.
  std::string transform =
      upsample || opset_ < 11
          ? "asymmetric"
          : stringAttr("coordinate_transformation_mode", "half_pixel");
  std::string nearestMode =
      upsample ? "floor" : stringAttr("nearest_mode", "round_prefer_floor");
  if (upsample && mode != "nearest" && mode != "linear")
    return fail("mode is '" + mode + "': expected nearest or linear");
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
  size_t scalesInput = opset_ >= 11 && !upsample ? 2 : 1;
  const Static *scales = nullptr, *sizes = nullptr;
  Static scalesAttr;
  if (upsample && opset_ < 9) {
    const onnx::Attribute *a = node_->attribute("scales");
    if (!a)
      return fail("it has no scales attribute");
    scalesAttr.dataType = int32_t(DataType::Float);
    scalesAttr.dims = {int64_t(a->floats.size())};
    scalesAttr.values.assign(a->floats.begin(), a->floats.end());
    scales = &scalesAttr;
  } else if (hasInput(scalesInput)) {
    scales = constInput(scalesInput);
    if (!scales)
      return false;
    if (scales->values.empty())
      scales = nullptr;
  }
  if (opset_ >= 11 && !upsample && hasInput(3)) {
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
    if (upsample && v < 1)
      return fail("scale " + std::to_string(v) + " of axis " +
                  std::to_string(d) + " is below 1: Upsample only enlarges");
    double extent = scales ? std::floor(sx[d] * v) : v;
    if (!(extent <= double(kMaxExtent))) {
      char text[64];
      std::snprintf(text, sizeof text, "%.17g elements", extent);
      return fail("axis " + std::to_string(d) + " resized to " + text +
                  ": expected at most 2^31");
    }
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
  // antialias (opset 18) widens linear and cubic filters on the axes that
  // shrink; nearest ignores it, as ONNX says.
  bool antialias = intAttr("antialias", 0) != 0 && mode != "nearest";
  double cubicA = floatAttr("cubic_coeff_a", -0.75);
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
      if (out > kMaxMatrixEntries)
        return fail("resizes axis " + std::to_string(d) + " to " +
                    std::to_string(out) +
                    " elements: kiln import gathers through a constant of at "
                    "most 2^24 source positions");
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
    if (out > kMaxMatrixEntries / std::max<int64_t>(in, 1))
      return fail("resizes axis " + std::to_string(d) + " from " +
                  std::to_string(in) + " to " + std::to_string(out) +
                  " elements: kiln import interpolates through a constant "
                  "matrix of at most 2^24 entries");
    Static m;
    m.dataType = int32_t(DataType::Float);
    m.dims = {out, in};
    m.values.assign(out * in, 0.0);
    for (int64_t o = 0; o < out; ++o) {
      double source = sourceCoordinate(transform, o, in, out, axisScale[d]);
      double *rowWeights = &m.values[o * in];
      if (antialias) {
        antialiasWeights(mode == "cubic", source, axisScale[d], cubicA,
                         excludeOutside, in, rowWeights);
      } else if (mode == "linear") {
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

// AffineGrid (opset 20; F.affine_grid): theta [N, 2, 3] (or [N, 3, 4])
// applied to every output pixel's normalized coordinates (x, y, 1) (or
// (x, y, z, 1)), x along W: one kiln.dot_general with the constant grid of
// coordinates, [P, 3], and a transpose to [N, H, W, 2]. The coordinates
// are -1 + 2i / (n - 1) with align_corners (-1 for n = 1), else
// (2i + 1) / n - 1. The gradient reaches theta.
bool Importer::affineGrid() {
  mlir::Value theta;
  if (!value(0, theta))
    return false;
  const Static *size = staticInput(1);
  if (!size)
    return false;
  mlir::Type e = element(theta);
  if (!llvm::isa<mlir::FloatType>(e))
    return fail("theta is not floating-point");
  int64_t spatial = int64_t(size->values.size()) - 2;
  if (spatial != 2 && spatial != 3)
    return fail("size has " + std::to_string(size->values.size()) +
                " values: expected [N, C, H, W] or [N, C, D, H, W]");
  int64_t n = toIndex(size->values[0]);
  if (shape(theta) != llvm::ArrayRef<int64_t>{n, spatial, spatial + 1})
    return fail("theta is " + shapeText(shape(theta)) + ": expected [" +
                std::to_string(n) + ", " + std::to_string(spatial) + ", " +
                std::to_string(spatial + 1) + "]");
  bool align = intAttr("align_corners", 0) != 0;
  std::vector<int64_t> extent; // D, H, W (or H, W)
  for (int64_t d = 2; d < 2 + spatial; ++d) {
    extent.push_back(toIndex(size->values[d]));
    if (extent.back() < 1)
      return fail("size is " + shapeText(std::vector<int64_t>(extent)) +
                  ": expected spatial sizes of 1 or more");
  }
  // The base grid is a constant of (points x (spatial + 1)) values.
  int64_t limit = kMaxMatrixEntries / (spatial + 1), points = 1;
  for (int64_t x : extent) {
    if (x > limit / points)
      return fail("spatial size " + shapeText(extent) +
                  " makes a grid of more than 2^24 values: kiln import "
                  "builds the base grid as a constant");
    points *= x;
  }
  auto coordinate = [&](int64_t i, int64_t count) {
    if (align)
      return count == 1 ? -1.0 : -1.0 + 2.0 * double(i) / double(count - 1);
    return (2.0 * double(i) + 1.0) / double(count) - 1.0;
  };
  Static grid;
  grid.dataType = int32_t(e.isF64() ? DataType::Double : DataType::Float);
  grid.dims = {points, spatial + 1};
  for (int64_t p = 0; p < points; ++p) {
    // p's position, W fastest; the homogeneous row is (x, y[, z], 1).
    int64_t rest = p;
    std::vector<double> row(spatial + 1, 1.0);
    for (int64_t a = spatial - 1; a >= 0; --a) {
      int64_t i = rest % extent[a];
      rest /= extent[a];
      row[spatial - 1 - a] = coordinate(i, extent[a]);
    }
    grid.values.insert(grid.values.end(), row.begin(), row.end());
  }
  mlir::Value base = constant(grid, nodeName_ + ".base_grid");
  if (element(base) != e)
    base = b_.create<kiln::ConvertOp>(loc(".base_grid_type"),
                                      type(grid.dims, e), base);
  mlir::Value moved = b_.create<kiln::DotGeneralOp>(
      loc(".transform"), type({n, spatial, points}, e), theta, base, arr({}),
      arr({}), arr({2}), arr({1}));
  mlir::Value y = permute(moved, {0, 2, 1}, ".points");
  llvm::SmallVector<int64_t> dims = {n};
  dims.append(extent.begin(), extent.end());
  dims.push_back(spatial);
  setOutput(0, g_.reshape(nodeName_, y, dims));
  return true;
}

// GridSample (2-D and 3-D; bilinear, nearest or bicubic, padding zeros,
// border or reflection, align_corners), as PyTorch's F.grid_sample: grid
// [N, Ho, Wo, 2] holds (x, y) in [-1, 1] ([N, Do, Ho, Wo, 3] (x, y, z)),
// mapped to X's pixels ((v + 1) / 2 * (W - 1) with align_corners, else
// ((v + 1) * W - 1) / 2), clamped to the image for border, and for
// reflection first folded back into the image's span ([0, W - 1] with
// align_corners, else [-0.5, W - 0.5]) as by mirrors at its ends, then
// clamped. Bilinear reads the 2^d pixels around each point, each weighted
// by its closeness along every axis and by whether it lies in the image
// (zeros); nearest reads the pixel at the coordinates rounded half to
// even; bicubic weighs the 4^d pixels around it and pads each of them
// (below). The pixels are rows of X as a table [N * (D *) H * W, C],
// gathered at n * (D *) H * W + (z * H * W +) y * W + x, so X's gradient
// scatters back into them and the grid's comes through the weights (the
// corners' positions are held constant, as PyTorch does).
bool Importer::gridSample() {
  mlir::Value x, grid;
  if (!value(0, x) || !value(1, grid))
    return false;
  llvm::ArrayRef<int64_t> sx = shape(x), sg = shape(grid);
  int64_t spatial = int64_t(sx.size()) - 2;
  if ((spatial != 2 && spatial != 3) || sg.size() != sx.size() ||
      sg.back() != spatial || sg[0] != sx[0])
    return fail("X is " + shapeText(sx) + " and grid " + shapeText(sg) +
                ": kiln import reads 2-D and 3-D sampling, X [N, C, H, W] and "
                "grid [N, H_out, W_out, 2], or X [N, C, D, H, W] and grid [N, "
                "D_out, H_out, W_out, 3]");
  mlir::Type f = element(x);
  if (!llvm::isa<mlir::FloatType>(f) || element(grid) != f)
    return fail("X and grid are not of one floating-point type");
  std::string mode = stringAttr("mode", "bilinear");
  bool nearest = mode == "nearest";
  bool cubic = mode == "bicubic" || mode == "cubic";
  if (!nearest && !cubic && mode != "bilinear" && mode != "linear")
    return fail("mode is " + mode +
                ": kiln import reads bilinear (linear), nearest and bicubic "
                "(cubic)");
  std::string padding = stringAttr("padding_mode", "zeros");
  bool reflection = padding == "reflection";
  bool border = padding == "border" || reflection;
  if (!border && padding != "zeros")
    return fail("padding_mode is " + padding +
                ": kiln import reads zeros, border and reflection");
  bool align = intAttr("align_corners", 0) != 0;
  // Grid component k (x, y, z) addresses X's spatial axis spatial - 1 - k
  // (W, H, D), of extent[k]; a pixel's row in the table below steps by
  // stride[k] along it.
  int64_t n = sx[0], c = sx[1];
  llvm::SmallVector<int64_t> extent, stride;
  for (int64_t k = 0, step = 1; k < spatial; step *= extent[k++]) {
    extent.push_back(sx[2 + spatial - 1 - k]);
    stride.push_back(step);
  }
  int64_t pixelsPerImage = product(sx.drop_front(2));
  const char *kAxis[3] = {".x", ".y", ".z"};
  llvm::SmallVector<int64_t> points(sg.begin(), sg.end() - 1);
  mlir::Type i64 = b_.getI64Type(), i1 = b_.getI1Type();
  mlir::Type t = type(points, f), it = type(points, i64), bt = type(points, i1);
  auto scalar = [&](double v) { return splat(v, f, points); };
  auto clamp = [&](mlir::Value v, double low, double high,
                   const std::string &at) {
    mlir::Value above =
        b_.create<kiln::MaxOp>(loc(at + ".low"), t, v, scalar(low));
    return b_.create<kiln::MinOp>(loc(at), t, above, scalar(high)).getResult();
  };
  auto compare = [&](mlir::Value a, kiln::CompareDirection d, mlir::Value b,
                     const std::string &at) {
    return b_.create<kiln::CompareOp>(loc(at), bt, d, a, b).getResult();
  };
  auto both = [&](mlir::Value a, mlir::Value b, const std::string &at) {
    return b_.create<kiln::SelectOp>(loc(at), bt, a, b, a).getResult();
  };
  // floor(v) for |v| within int64: v's truncation, less 1 where that rose.
  auto floor = [&](mlir::Value v, const std::string &at) {
    mlir::Value whole = b_.create<kiln::ConvertOp>(
        loc(at + ".trunc"), t,
        b_.create<kiln::ConvertOp>(loc(at + ".int"), it, v));
    return b_
        .create<kiln::SelectOp>(
            loc(at), t,
            compare(v, kiln::CompareDirection::lt, whole, at + ".rose"),
            add(whole, scalar(-1.0), at + ".less"), whole)
        .getResult();
  };
  // floor(v), held constant: a cell's corner, whose position the grid's
  // gradient does not move.
  auto cell = [&](mlir::Value v, const std::string &at) {
    return b_.create<kiln::StopGradientOp>(loc(at), t, floor(v, at + ".floor"))
        .getResult();
  };
  // Whether whole |v| is odd.
  auto odd = [&](mlir::Value v, const std::string &at) {
    mlir::Value halfFloor =
        floor(mul(v, scalar(0.5), at + ".halve"), at + ".half");
    return compare(
        b_.create<kiln::SubOp>(loc(at + ".parity"), t, v,
                               mul(halfFloor, scalar(2.0), at + ".even")),
        kiln::CompareDirection::eq, scalar(1.0), at);
  };
  // Reflection (PyTorch's reflect_coordinates): v's distance d from the
  // span's low end, less the whole spans in it (flips), counted from the
  // high end after an odd number of them. The flips are constant where
  // they hold, so v's gradient is d's sign, negated after odd flips.
  auto reflect = [&](mlir::Value v, int64_t extent,
                     const std::string &at) -> mlir::Value {
    double low = align ? 0.0 : -0.5;
    double span = align ? double(extent - 1) : double(extent);
    if (span == 0)
      return scalar(0.0);
    mlir::Value d =
        b_.create<kiln::AbsOp>(loc(at + ".distance"), t,
                               add(v, scalar(-low), at + ".from_low"))
            .getResult();
    mlir::Value flips = b_.create<kiln::StopGradientOp>(
        loc(at + ".flips"), t,
        floor(b_.create<kiln::DivOp>(loc(at + ".spans"), t, d, scalar(span)),
              at + ".floor"));
    mlir::Value extra = b_.create<kiln::SubOp>(
        loc(at + ".extra"), t, d, mul(flips, scalar(span), at + ".whole"));
    mlir::Value back =
        b_.create<kiln::SubOp>(loc(at + ".back"), t, scalar(span), extra);
    mlir::Value folded = b_.create<kiln::SelectOp>(
        loc(at + ".fold"), t, odd(flips, at + ".odd"), back, extra);
    return add(folded, scalar(low), at + ".reflected");
  };
  // Pixel coordinates along the axis of |extent| from grid component |k|.
  auto pixels = [&](int64_t k, int64_t extent, const std::string &at) {
    mlir::Value part = g_.reshape(
        nodeName_ + at + ".grid",
        sliceAxis(grid, spatial + 1, k, k + 1, 1, at + ".slice"), points);
    mlir::Value v = align ? mul(add(part, scalar(1.0), at + ".shift"),
                                scalar(0.5 * (extent - 1)), at + ".scale")
                          : mul(add(mul(add(part, scalar(1.0), at + ".shift"),
                                        scalar(double(extent)), at + ".scale"),
                                    scalar(-1.0), at + ".center"),
                                scalar(0.5), at + ".half");
    // Bicubic pads each of its taps instead (below). Its points are kept
    // where their taps could touch the image (within 4 of the edges), or
    // for reflection, whose taps fold back from anywhere, within 2^24 (f32
    // holds its whole numbers), so that the conversions stay in range.
    if (cubic)
      return reflection ? clamp(v, -16777216.0, 16777216.0, at + ".range")
                        : clamp(v, -4.0, double(extent + 3), at + ".range");
    if (reflection)
      v = reflect(v, extent, at + ".reflect");
    // Border (and reflection) clamps to the image; zeros keeps every point
    // whose pixels could touch it (within 2 of the edges), so that the
    // conversions below stay in range.
    return border ? clamp(v, 0.0, double(extent - 1), at + ".clamp")
                  : clamp(v, -2.0, double(extent + 1), at + ".range");
  };
  llvm::SmallVector<mlir::Value> p;
  for (int64_t k = 0; k < spatial; ++k)
    p.push_back(pixels(k, extent[k], kAxis[k]));
  // The table of pixels (X channels last, [N * D * H * W, C]) and each
  // point's image offset n * D * H * W.
  llvm::SmallVector<int64_t> last = {n}, perm = {0};
  for (int64_t a = 0; a < spatial; ++a) {
    last.push_back(sx[2 + a]);
    perm.push_back(2 + a);
  }
  last.push_back(c);
  perm.push_back(1);
  mlir::Value moved = b_.create<kiln::TransposeOp>(loc(".channels_last"),
                                                   type(last, f), x, arr(perm));
  mlir::Value table =
      g_.reshape(nodeName_ + ".table", moved, {n * pixelsPerImage, c});
  mlir::Value image =
      mul(b_.create<kiln::IotaOp>(loc(".image"), it, b_.getI64IntegerAttr(0)),
          splat(double(pixelsPerImage), i64, points), ".image_offset");
  llvm::SmallVector<int64_t> rows = points, pointDims;
  rows.push_back(c);
  for (int64_t d = 0; d <= spatial; ++d)
    pointDims.push_back(d);
  // One corner at pixel coordinates |at| (x, y[, z]): its pixel's row of
  // the table times |weight| where the pixel lies in the image.
  auto corner = [&](llvm::ArrayRef<mlir::Value> coords, mlir::Value weight,
                    const std::string &at) {
    mlir::Value inside, flat = image;
    for (int64_t k = 0; k < spatial; ++k) {
      std::string axis = at + kAxis[k];
      mlir::Value in =
          both(compare(coords[k], kiln::CompareDirection::ge, scalar(0.0),
                       axis + "_low"),
               compare(coords[k], kiln::CompareDirection::le,
                       scalar(double(extent[k] - 1)), axis + "_high"),
               axis + "_in");
      inside = inside ? both(inside, in, axis + ".inside") : in;
      mlir::Value index = b_.create<kiln::ConvertOp>(
          loc(axis + ".index"), it,
          clamp(coords[k], 0.0, double(extent[k] - 1), axis + ".clamp"));
      if (stride[k] != 1)
        index =
            mul(index, splat(double(stride[k]), i64, points), axis + ".stride");
      flat = add(flat, index, axis + ".flat");
    }
    mlir::Value values = b_.create<kiln::GatherOp>(loc(at + ".gather"),
                                                   type(rows, f), table, flat);
    mlir::Value kept = b_.create<kiln::SelectOp>(loc(at + ".kept"), t, inside,
                                                 weight, scalar(0.0));
    return mul(values,
               g_.broadcast(nodeName_ + at + ".weight", kept, pointDims, rows),
               at + ".weighted");
  };
  mlir::Value y;
  if (nearest) {
    // Half to even: floor(v + 0.5), less 1 where v + 0.5 was a whole odd
    // number.
    auto rint = [&](mlir::Value v, const std::string &at) {
      mlir::Value up = floor(add(v, scalar(0.5), at + ".up"), at + ".floor");
      mlir::Value tie =
          compare(b_.create<kiln::SubOp>(loc(at + ".gap"), t, up, v),
                  kiln::CompareDirection::eq, scalar(0.5), at + ".tie");
      return b_
          .create<kiln::SelectOp>(loc(at), t,
                                  both(tie, odd(up, at + ".odd"), at + ".down"),
                                  add(up, scalar(-1.0), at + ".lower"), up)
          .getResult();
    };
    llvm::SmallVector<mlir::Value> at;
    for (int64_t k = 0; k < spatial; ++k)
      at.push_back(rint(p[k], std::string(kAxis[k]) + ".rint"));
    y = corner(at, scalar(1.0), ".nearest");
  } else if (cubic) {
    // Keys' cubic convolution (A = -0.75, PyTorch's) over the 4 x 4 (x 4)
    // pixels around the point: along each axis the taps at floor(v) - 1 ..
    // floor(v) + 2 weigh far(t + 1), near(t), near(1 - t), far(2 - t) for
    // t = v - floor(v). Each tap is padded as a bilinear point is (clamped
    // for border, folded then clamped for reflection, weighed 0 outside
    // the image for zeros); the taps' positions are held constant, so the
    // grid's gradient comes through the weights, as PyTorch's does.
    const double a = -0.75;
    auto affine = [&](mlir::Value v, double scale, double offset,
                      const std::string &at) {
      return add(mul(v, scalar(scale), at + ".times"), scalar(offset), at);
    };
    // far(s) = ((a s - 5 a) s + 8 a) s - 4 a, for s in [1, 2].
    auto far = [&](mlir::Value s, const std::string &at) {
      mlir::Value inner =
          mul(affine(s, a, -5 * a, at + ".inner"), s, at + ".by_s");
      return affine(
          mul(add(inner, scalar(8 * a), at + ".plus"), s, at + ".by_s2"), 1.0,
          -4 * a, at);
    };
    // near(s) = ((a + 2) s - (a + 3)) s s + 1, for s in [0, 1].
    auto near = [&](mlir::Value s, const std::string &at) {
      mlir::Value inner = affine(s, a + 2, -(a + 3), at + ".inner");
      return add(mul(mul(inner, s, at + ".by_s"), s, at + ".by_s2"),
                 scalar(1.0), at);
    };
    auto weights = [&](mlir::Value v, mlir::Value base, const std::string &at) {
      mlir::Value t0 = b_.create<kiln::SubOp>(loc(at + ".t"), t, v, base);
      mlir::Value u =
          b_.create<kiln::SubOp>(loc(at + ".u"), t, scalar(1.0), t0);
      return std::array<mlir::Value, 4>{
          far(add(t0, scalar(1.0), at + ".t1"), at + ".w0"),
          near(t0, at + ".w1"), near(u, at + ".w2"),
          far(add(u, scalar(1.0), at + ".u1"), at + ".w3")};
    };
    // The tap |i| - 1 past |base| along the axis of |extent|, padded.
    auto tap = [&](mlir::Value base, int i, int64_t extent,
                   const std::string &at) {
      mlir::Value v = add(base, scalar(double(i - 1)), at);
      if (reflection)
        v = reflect(v, extent, at + ".reflect");
      return border ? clamp(v, 0.0, double(extent - 1), at + ".clamp") : v;
    };
    llvm::SmallVector<std::array<mlir::Value, 4>> wk(spatial), tk(spatial);
    for (int64_t k = 0; k < spatial; ++k) {
      mlir::Value base = cell(p[k], std::string(kAxis[k]) + "0");
      wk[k] = weights(p[k], base, kAxis[k]);
      for (int i = 0; i < 4; ++i)
        tk[k][i] =
            tap(base, i, extent[k], std::string(kAxis[k]) + std::to_string(i));
    }
    // Tap (i_x, i_y[, i_z]) for each number below 4^spatial, x fastest.
    int64_t taps = int64_t(1) << (2 * spatial);
    for (int64_t m = 0; m < taps; ++m) {
      std::string at = ".c";
      llvm::SmallVector<mlir::Value> coords;
      mlir::Value weight;
      for (int64_t k = 0, rest = m; k < spatial; ++k, rest /= 4) {
        int i = int(rest % 4);
        at += std::to_string(i);
        coords.push_back(tk[k][i]);
        weight = weight ? mul(weight, wk[k][i], at + ".w") : wk[k][i];
      }
      mlir::Value term = corner(coords, weight, at);
      y = y ? add(y, term, at + ".sum") : term;
    }
  } else {
    // (Tri)linear: the 2^spatial corners of the cell around the point,
    // each weighted by its closeness along every axis.
    llvm::SmallVector<mlir::Value> low, high, fraction, rest;
    for (int64_t k = 0; k < spatial; ++k) {
      std::string axis = kAxis[k];
      low.push_back(cell(p[k], axis + "0"));
      high.push_back(add(low[k], scalar(1.0), axis + "1"));
      fraction.push_back(
          b_.create<kiln::SubOp>(loc(axis + ".f"), t, p[k], low[k]));
      rest.push_back(b_.create<kiln::SubOp>(loc(axis + ".g"), t, scalar(1.0),
                                            fraction[k]));
    }
    for (int64_t m = 0; m < (int64_t(1) << spatial); ++m) {
      std::string at = ".c";
      llvm::SmallVector<mlir::Value> coords;
      mlir::Value weight;
      for (int64_t k = 0; k < spatial; ++k) {
        bool up = (m >> k) & 1;
        at += up ? "1" : "0";
        coords.push_back(up ? high[k] : low[k]);
        mlir::Value part = up ? fraction[k] : rest[k];
        weight = weight ? mul(weight, part, at + ".w") : part;
      }
      mlir::Value term = corner(coords, weight, at);
      y = y ? add(y, term, at + ".sum") : term;
    }
  }
  llvm::SmallVector<int64_t> outDims = {n, c}, back = {0, spatial + 1};
  for (int64_t d = 1; d <= spatial; ++d) {
    outDims.push_back(points[d]);
    back.push_back(d);
  }
  setOutput(
      0, b_.create<kiln::TransposeOp>(loc(), type(outDims, f), y, arr(back)));
  return true;
}

} // namespace kiln::cli::onnx_import
