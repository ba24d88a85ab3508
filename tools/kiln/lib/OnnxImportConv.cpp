//===- OnnxImportConv.cpp - convolutions and pooling ----------------------===//
//
// The importer's window ops (OnnxImporter.h): Conv, ConvTranspose,
// MaxPool, AveragePool and the global pools.
//
//===----------------------------------------------------------------------===//

#include "tools/kiln/lib/OnnxImporter.h"

#include "llvm/ADT/STLExtras.h"

#include <algorithm>

namespace kiln::cli::onnx_import {

// ONNX pads are [begin of each spatial dim..., end of each...]; kiln's
// [top, bottom, left, right].
static std::vector<int64_t> kilnPadding(const std::vector<int64_t> &pads) {
  return {pads[0], pads[2], pads[1], pads[3]};
}

// SAME padding of |total| elements along spatial axis |i| of |pads|
// ([begins..., ends...]): split in half, the odd element at the end for
// SAME_UPPER and at the beginning for SAME_LOWER.
static void splitSame(const std::string &autoPad, int64_t total, int i,
                      std::vector<int64_t> &pads) {
  int64_t half = total / 2;
  pads[i] = autoPad == "SAME_UPPER" ? half : total - half;
  pads[2 + i] = total - pads[i];
}

// The pads of a 2-D window op over the spatial extents |in| with windows
// |extent| wide (dilation included) at |strides|, from its auto_pad:
// NOTSET reads the pads attribute, VALID pads nothing, and SAME_UPPER and
// SAME_LOWER pad so that the output is ceil(in / stride), the total split
// in half and the odd element at the end (UPPER) or the beginning (LOWER).
bool Importer::windowPads(llvm::ArrayRef<int64_t> in,
                          llvm::ArrayRef<int64_t> extent,
                          llvm::ArrayRef<int64_t> strides,
                          std::vector<int64_t> &pads) {
  std::string autoPad = stringAttr("auto_pad", "NOTSET");
  if (autoPad == "NOTSET") {
    pads = intsAttr("pads").value_or(std::vector<int64_t>{0, 0, 0, 0});
    if (pads.size() != 4)
      return fail("pads is " + shapeText(pads) +
                  ": expected 4 values for a 2-D window");
    if (llvm::any_of(pads, [](int64_t p) { return p < 0; }))
      return fail("pads " + shapeText(pads) + " are negative");
    return true;
  }
  pads.assign(4, 0);
  if (autoPad == "VALID")
    return true;
  if (autoPad != "SAME_UPPER" && autoPad != "SAME_LOWER")
    return fail("auto_pad is " + autoPad +
                ": expected NOTSET, VALID, SAME_UPPER or SAME_LOWER");
  for (int i = 0; i < 2; ++i) {
    int64_t out = (in[i] + strides[i] - 1) / strides[i];
    splitSame(autoPad,
              std::max<int64_t>(0, (out - 1) * strides[i] + extent[i] - in[i]),
              i, pads);
  }
  return true;
}

// Conv and ConvTranspose read X [N, C, H, W] and W; their attributes.
struct ConvAttributes {
  std::vector<int64_t> strides, pads, dilations;
  int64_t groups = 1;
};

bool Importer::convInputs(bool transposed, mlir::Value &x, mlir::Value &w,
                          ConvAttributes &a) {
  if (hasInput(1)) {
    // PyTorch's fan-in for both: the weight's dimensions past the first
    // (for a transposed convolution, its output channels per group).
    const std::string &name = node_->inputs[1];
    if (auto it = parameterTensors_.find(name); it != parameterTensors_.end() &&
                                                it->second->dims.size() == 4 &&
                                                !fanIn_.count(name)) {
      fanIn_[name] = product(llvm::ArrayRef(it->second->dims).drop_front());
      if (hasInput(2))
        fanIn_[node_->inputs[2]] = fanIn_[name];
    }
  }
  if (!value(0, x) || !value(1, w))
    return false;
  const char *what = transposed ? "transposed convolution" : "convolution";
  llvm::ArrayRef<int64_t> sx = shape(x), sw = shape(w);
  if (sx.size() != 4 || sw.size() != 4)
    return fail("X is " + shapeText(sx) + " and W " + shapeText(sw) +
                ": kiln import reads 2-D " + what + "s (NCHW)");
  a.strides = intsAttr("strides").value_or(std::vector<int64_t>{1, 1});
  a.dilations = intsAttr("dilations").value_or(std::vector<int64_t>{1, 1});
  a.groups = intAttr("group", 1);
  if (a.strides.size() != 2 || a.dilations.size() != 2)
    return fail(std::string("strides or dilations are not those of a 2-D ") +
                what);
  if (llvm::any_of(a.strides, [](int64_t v) { return v < 1; }) ||
      llvm::any_of(a.dilations, [](int64_t v) { return v < 1; }))
    return fail("strides and dilations must be positive");
  int64_t extent[2] = {a.dilations[0] * (sw[2] - 1) + 1,
                       a.dilations[1] * (sw[3] - 1) + 1};
  // A transposed convolution's SAME pads follow from its output's size
  // (convTranspose); a convolution's from its input's.
  std::string autoPad = stringAttr("auto_pad", "NOTSET");
  if (transposed && (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER"))
    a.pads.assign(4, 0);
  else if (!windowPads(sx.drop_front(2), extent, a.strides, a.pads))
    return false;
  if (auto kernel = intsAttr("kernel_shape");
      kernel &&
      (kernel->size() != 2 || (*kernel)[0] != sw[2] || (*kernel)[1] != sw[3]))
    return fail("kernel_shape does not match W " + shapeText(sw));
  bool fits = transposed ? sx[1] == sw[0] && sw[0] % a.groups == 0
                         : sx[1] == sw[1] * a.groups && sw[0] % a.groups == 0;
  if (a.groups < 1 || !fits)
    return fail(
        "X has " + std::to_string(sx[1]) + " channels, W is " + shapeText(sw) +
        " and group " + std::to_string(a.groups) +
        (transposed
             ? ": expected X's channels = W's dimension 0, a multiple of "
               "group"
             : ": expected X's channels = W's dimension 1 times group"));
  return true;
}

bool Importer::addChannelBias(mlir::Value &y) {
  if (!hasInput(2))
    return true;
  mlir::Value bias;
  if (!value(2, bias))
    return false;
  llvm::ArrayRef<int64_t> dims = shape(y);
  if (shape(bias) != llvm::ArrayRef<int64_t>{dims[1]})
    return fail("B is " + shapeText(shape(bias)) + ": expected [" +
                std::to_string(dims[1]) + "]");
  mlir::Value wide =
      g_.broadcast(nodeName_ + ".bias_broadcast", bias, {1}, dims);
  y = b_.create<kiln::AddOp>(loc(".bias_add"), y.getType(), y, wide);
  return true;
}

bool Importer::conv() {
  mlir::Value x, w;
  ConvAttributes a;
  if (!convInputs(/*transposed=*/false, x, w, a))
    return false;
  llvm::ArrayRef<int64_t> sx = shape(x), sw = shape(w);
  llvm::SmallVector<int64_t> dims = {sx[0], sw[0]};
  for (int i = 0; i < 2; ++i) {
    int64_t extent = sx[2 + i] + a.pads[i] + a.pads[2 + i] -
                     a.dilations[i] * (sw[2 + i] - 1) - 1;
    if (extent < 0)
      return fail("the kernel " + shapeText(sw) + " does not fit X " +
                  shapeText(sx));
    dims.push_back(extent / a.strides[i] + 1);
  }
  mlir::Value y = b_.create<kiln::Conv2DOp>(
      loc(), type(dims, element(x)), x, w, arr(a.strides),
      arr(kilnPadding(a.pads)), arr(a.dilations),
      b_.getI64IntegerAttr(a.groups));
  if (!addChannelBias(y))
    return false;
  setOutput(0, y);
  return true;
}

// ConvTranspose (2-D): the gradient of a convolution with respect to its
// input, which is what a transposed convolution computes. W is [C_in,
// C_out / group, kH, kW], the filter of the convolution that maps the
// result back to X; the result's size along each spatial axis is
// (in - 1) * stride - pads + dilation * (k - 1) + 1 + output_padding.
// With auto_pad SAME_UPPER or SAME_LOWER the size is given (output_shape,
// else in * stride) and the pads follow from it; otherwise output_shape
// must be the size the pads give.
bool Importer::convTranspose() {
  mlir::Value x, w;
  ConvAttributes a;
  if (!convInputs(/*transposed=*/true, x, w, a))
    return false;
  std::vector<int64_t> outputPadding =
      intsAttr("output_padding").value_or(std::vector<int64_t>{0, 0});
  if (outputPadding.size() != 2)
    return fail("output_padding is not that of a 2-D transposed convolution");
  llvm::ArrayRef<int64_t> sx = shape(x), sw = shape(w);
  std::optional<std::vector<int64_t>> given = intsAttr("output_shape");
  if (given && given->size() != 2)
    return fail("output_shape " + shapeText(*given) +
                " is not that of a 2-D transposed convolution");
  std::string autoPad = stringAttr("auto_pad", "NOTSET");
  bool same = autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER";
  llvm::SmallVector<int64_t> dims = {sx[0], sw[1] * a.groups};
  for (int i = 0; i < 2; ++i) {
    if (outputPadding[i] < 0 || outputPadding[i] >= a.strides[i])
      return fail(
          "output_padding " + shapeText(outputPadding) +
          " is not below the strides " + shapeText(a.strides) +
          ": the convolution it reverses would not reach the padded elements");
    if (same) {
      // ONNX's SAME: the output is output_shape, or the input times the
      // stride; the pads trim the full result to it, the odd element at
      // the end (SAME_UPPER) or the beginning (SAME_LOWER), which makes
      // them the SAME pads of the convolution it reverses.
      int64_t out = given ? (*given)[i] : sx[2 + i] * a.strides[i];
      int64_t full = (sx[2 + i] - 1) * a.strides[i] +
                     a.dilations[i] * (sw[2 + i] - 1) + 1 + outputPadding[i];
      if (out < 1 || out > full)
        return fail("auto_pad is " + autoPad + " and the output is " +
                    std::to_string(out) + " along axis " +
                    std::to_string(2 + i) +
                    ": expected 1 to the full transposed convolution's " +
                    std::to_string(full));
      splitSame(autoPad, full - out, i, a.pads);
    }
    int64_t extent = (sx[2 + i] - 1) * a.strides[i] - a.pads[i] -
                     a.pads[2 + i] + a.dilations[i] * (sw[2 + i] - 1) + 1 +
                     outputPadding[i];
    if (extent < 1)
      return fail("the pads " + shapeText(a.pads) + " leave no output");
    dims.push_back(extent);
  }
  if (given && !same) {
    llvm::ArrayRef<int64_t> spatial = llvm::ArrayRef(dims).drop_front(2);
    if (llvm::ArrayRef<int64_t>(*given) != spatial)
      return fail(
          "output_shape " + shapeText(*given) + " differs from the " +
          shapeText(spatial) +
          " its pads and output_padding give: export with explicit pads");
  }
  mlir::Value y = b_.create<kiln::Conv2DInputGradOp>(
      loc(), type(dims, element(x)), x, w, arr(a.strides),
      arr(kilnPadding(a.pads)), arr(a.dilations),
      b_.getI64IntegerAttr(a.groups));
  if (!addChannelBias(y))
    return false;
  setOutput(0, y);
  return true;
}

// MaxPool and AveragePool (2-D). ceil_mode rounds the output size up, as
// PyTorch does: a last window that would start past the input and its
// leading pad is dropped, and the windows that overhang the end read kiln
// padding there (-infinity for the max; zeros for the average). kiln's
// average divides by the whole window; where PyTorch's divisor differs
// (count_include_pad 0: the input elements the window covers; 1: the
// window cut at the end of the declared pads, which ceil_mode can
// overhang), the result is multiplied by a constant [out_h, out_w] of
// window size over divisor.
bool Importer::pool(bool max) {
  mlir::Value x;
  if (!value(0, x))
    return false;
  if (node_->outputs.size() > 1 && !node_->outputs[1].empty())
    return fail("its Indices output is not supported");
  if (shape(x).size() != 4)
    return fail("X is " + shapeText(shape(x)) +
                ": kiln import reads 2-D pooling (NCHW)");
  std::optional<std::vector<int64_t>> kernel = intsAttr("kernel_shape");
  if (!kernel || kernel->size() != 2)
    return fail("kernel_shape is missing or not 2-D");
  if (llvm::any_of(*kernel, [](int64_t k) { return k < 1; }))
    return fail("kernel_shape " + shapeText(*kernel) + " is not positive");
  std::vector<int64_t> strides =
      intsAttr("strides").value_or(std::vector<int64_t>{1, 1});
  if (strides.size() != 2 ||
      llvm::any_of(strides, [](int64_t v) { return v < 1; }))
    return fail("strides " + shapeText(strides) + " are not 2 positive values");
  std::vector<int64_t> dilations =
      intsAttr("dilations").value_or(std::vector<int64_t>{1, 1});
  if (dilations != std::vector<int64_t>{1, 1})
    return fail("dilations are not 1: kiln pools take dense windows");
  llvm::ArrayRef<int64_t> sx = shape(x);
  std::vector<int64_t> pads;
  if (!windowPads(sx.drop_front(2), *kernel, strides, pads))
    return false;
  for (int i = 0; i < 2; ++i)
    if (pads[i] >= (*kernel)[i] || pads[2 + i] >= (*kernel)[i])
      return fail("pads " + shapeText(pads) +
                  " are not smaller than the window " + shapeText(*kernel) +
                  ": a window would read only padding");
  bool ceil = intAttr("ceil_mode", 0) != 0;
  bool includePad = intAttr("count_include_pad", 0) != 0;
  llvm::SmallVector<int64_t> dims = {sx[0], sx[1]};
  // Kiln's end padding: the declared pads and the ceil_mode overhang.
  std::vector<int64_t> ends = {pads[2], pads[3]};
  // Per axis, each output position's divisor along that axis.
  std::vector<int64_t> counts[2];
  for (int i = 0; i < 2; ++i) {
    int64_t in = sx[2 + i], k = (*kernel)[i], s = strides[i];
    int64_t padded = in + pads[i] + pads[2 + i];
    if (padded < k)
      return fail("the window " + shapeText(*kernel) + " does not fit X " +
                  shapeText(sx) + " padded by " + shapeText(pads));
    int64_t out = (ceil ? (padded - k + s - 1) / s : (padded - k) / s) + 1;
    if (ceil && (out - 1) * s >= in + pads[i])
      --out;
    ends[i] += std::max<int64_t>(0, (out - 1) * s + k - padded);
    dims.push_back(out);
    for (int64_t o = 0; o < out; ++o) {
      int64_t start = o * s - pads[i];
      int64_t end = std::min(start + k, in + pads[2 + i]);
      // Every window starts before the input's end (the ceil_mode rule;
      // with floor, since the pads are below the window) and ends past
      // its start, so both counts are at least 1.
      counts[i].push_back(includePad ? end - start
                                     : std::min(end, in) -
                                           std::max<int64_t>(start, 0));
    }
  }
  std::vector<int64_t> padding = {pads[0], ends[0], pads[1], ends[1]};
  if (max) {
    setOutput(0, b_.create<kiln::MaxPool2DOp>(loc(), type(dims, element(x)), x,
                                              arr(*kernel), arr(strides),
                                              arr(padding)));
    return true;
  }
  mlir::Value y =
      b_.create<kiln::AvgPool2DOp>(loc(), type(dims, element(x)), x,
                                   arr(*kernel), arr(strides), arr(padding));
  int64_t window = (*kernel)[0] * (*kernel)[1];
  Static factors;
  factors.dataType = int32_t(DataType::Float);
  factors.dims = {dims[2], dims[3]};
  bool uniform = true;
  for (int64_t h : counts[0])
    for (int64_t w : counts[1]) {
      factors.values.push_back(double(window) / double(h * w));
      uniform = uniform && h * w == window;
    }
  if (!uniform) {
    mlir::Value wide =
        broadcastTo(constant(factors, nodeName_ + ".divisors"), dims);
    y = b_.create<kiln::MulOp>(loc(".divisors"), y.getType(), y, wide);
  }
  setOutput(0, y);
  return true;
}

bool Importer::globalPool(bool max) {
  mlir::Value x;
  if (!value(0, x))
    return false;
  llvm::ArrayRef<int64_t> sx = shape(x);
  if (sx.size() < 3)
    return fail("X is " + shapeText(sx) + ": expected [N, C, spatial...]");
  llvm::SmallVector<int64_t> spatial, reduced = {sx[0], sx[1]},
                                      kept = {sx[0], sx[1]};
  for (size_t d = 2; d < sx.size(); ++d) {
    spatial.push_back(d);
    kept.push_back(1);
  }
  mlir::Value y = b_.create<kiln::ReduceOp>(
      loc(".reduce"), type(reduced, element(x)),
      max ? kiln::ReduceKind::max : kiln::ReduceKind::mean, x, arr(spatial));
  setOutput(0, g_.reshape(nodeName_, y, kept));
  return true;
}

} // namespace kiln::cli::onnx_import
