//===- OnnxImportConv.cpp - convolutions and pooling ----------------------===//
//
// The importer's window ops (OnnxImporter.h): Conv, ConvTranspose,
// MaxPool, AveragePool and the global pools, over 1, 2 or 3 spatial axes;
// Col2Im.
// Kiln's window ops are 2-D. A 1-D op is the 2-D one over [N, C, 1, W]. A
// 3-D op is 2-D ones over the (height, width) planes of every depth
// position, batched with N, combined along the depth: a convolution sums
// the planes' convolutions with each depth slice of the kernel over the
// depth positions that slice meets; a transposed convolution places each
// slice's result at its depth positions, strided, and sums them; a pool
// takes the max (or sum) of the planes' pools over each depth window.
//
//===----------------------------------------------------------------------===//

#include "tools/kiln/lib/OnnxImporter.h"

#include "llvm/ADT/STLExtras.h"

#include <algorithm>
#include <limits>

namespace kiln::cli::onnx_import {

namespace {

std::vector<int64_t> ones(size_t n) { return std::vector<int64_t>(n, 1); }

// ONNX's 2-D pads [begin H, begin W, end H, end W] as kiln's [top, bottom,
// left, right].
std::vector<int64_t> kilnPadding(llvm::ArrayRef<int64_t> pads) {
  return {pads[0], pads[2], pads[1], pads[3]};
}

// SAME padding of |total| elements along spatial axis |i| of |pads|
// ([begins..., ends...] over |rank| axes): split in half, the odd element
// at the end for SAME_UPPER and at the beginning for SAME_LOWER.
void splitSame(const std::string &autoPad, int64_t total, size_t i, size_t rank,
               std::vector<int64_t> &pads) {
  int64_t half = total / 2;
  pads[i] = autoPad == "SAME_UPPER" ? half : total - half;
  pads[rank + i] = total - pads[i];
}

// [N, X, C, ...] from [N, C, X, ...] and back: the depth next to the batch.
constexpr int64_t kDepthFirst[] = {0, 2, 1, 3, 4};

} // namespace

// Conv and ConvTranspose read X [N, C, spatial...] and W; their attributes,
// one per spatial axis (pads: the begins, then the ends).
struct ConvAttributes {
  std::vector<int64_t> strides, pads, dilations;
  int64_t groups = 1;
  size_t rank() const { return strides.size(); }
  // A 1-D op's attributes as those of the 2-D op over [N, C, 1, W].
  ConvAttributes lifted() const {
    return {
        {1, strides[0]}, {0, pads[0], 0, pads[1]}, {1, dilations[0]}, groups};
  }
  // A 3-D op's attributes over the (height, width) planes.
  ConvAttributes planes() const {
    return {{strides[1], strides[2]},
            {pads[1], pads[2], pads[4], pads[5]},
            {dilations[1], dilations[2]},
            groups};
  }
};

// The pads of a window op over the spatial extents |in| with windows
// |extent| wide (dilation included) at |strides|, from its auto_pad:
// NOTSET reads the pads attribute, VALID pads nothing, and SAME_UPPER and
// SAME_LOWER pad so that the output is ceil(in / stride), the total split
// in half and the odd element at the end (UPPER) or the beginning (LOWER).
bool Importer::windowPads(llvm::ArrayRef<int64_t> in,
                          llvm::ArrayRef<int64_t> extent,
                          llvm::ArrayRef<int64_t> strides,
                          std::vector<int64_t> &pads) {
  size_t rank = in.size();
  std::string autoPad = stringAttr("auto_pad", "NOTSET");
  if (autoPad == "NOTSET") {
    pads = intsAttr("pads").value_or(std::vector<int64_t>(2 * rank, 0));
    if (pads.size() != 2 * rank)
      return fail("pads is " + shapeText(pads) + ": expected " +
                  std::to_string(2 * rank) + " values for a " +
                  std::to_string(rank) + "-D window");
    if (llvm::any_of(pads, [](int64_t p) { return p < 0; }))
      return fail("pads " + shapeText(pads) + " are negative");
    return true;
  }
  pads.assign(2 * rank, 0);
  if (autoPad == "VALID")
    return true;
  if (autoPad != "SAME_UPPER" && autoPad != "SAME_LOWER")
    return fail("auto_pad is " + autoPad +
                ": expected NOTSET, VALID, SAME_UPPER or SAME_LOWER");
  for (size_t i = 0; i < rank; ++i) {
    int64_t out = (in[i] + strides[i] - 1) / strides[i];
    splitSame(autoPad,
              std::max<int64_t>(0, (out - 1) * strides[i] + extent[i] - in[i]),
              i, rank, pads);
  }
  return true;
}

bool Importer::convInputs(bool transposed, mlir::Value &x, mlir::Value &w,
                          ConvAttributes &a) {
  if (hasInput(1)) {
    // PyTorch's fan-in for both: the weight's dimensions past the first
    // (for a transposed convolution, its output channels per group).
    const std::string &name = node_->inputs[1];
    if (auto it = parameterTensors_.find(name); it != parameterTensors_.end() &&
                                                it->second->dims.size() >= 3 &&
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
  if (sx.size() < 3 || sx.size() > 5 || sw.size() != sx.size())
    return fail("X is " + shapeText(sx) + " and W " + shapeText(sw) +
                ": kiln import reads 1-D, 2-D and 3-D " + what +
                "s (NCW, NCHW, NCDHW)");
  size_t rank = sx.size() - 2;
  a.strides = intsAttr("strides").value_or(ones(rank));
  a.dilations = intsAttr("dilations").value_or(ones(rank));
  a.groups = intAttr("group", 1);
  if (a.strides.size() != rank || a.dilations.size() != rank)
    return fail("strides or dilations are not those of a " +
                std::to_string(rank) + "-D " + what);
  if (llvm::any_of(a.strides, [](int64_t v) { return v < 1; }) ||
      llvm::any_of(a.dilations, [](int64_t v) { return v < 1; }))
    return fail("strides and dilations must be positive");
  std::vector<int64_t> extent;
  for (size_t i = 0; i < rank; ++i)
    extent.push_back(a.dilations[i] * (sw[2 + i] - 1) + 1);
  // A transposed convolution's SAME pads follow from its output's size
  // (convTranspose); a convolution's from its input's.
  std::string autoPad = stringAttr("auto_pad", "NOTSET");
  if (transposed && (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER"))
    a.pads.assign(2 * rank, 0);
  else if (!windowPads(sx.drop_front(2), extent, a.strides, a.pads))
    return false;
  if (auto kernel = intsAttr("kernel_shape");
      kernel && llvm::ArrayRef<int64_t>(*kernel) != sw.drop_front(2))
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

llvm::SmallVector<int64_t> Importer::axisLastOrder(int64_t rank, int64_t axis) {
  llvm::SmallVector<int64_t> order;
  for (int64_t d = 0; d < rank; ++d)
    if (d != axis)
      order.push_back(d);
  order.push_back(axis);
  return order;
}

mlir::Value Importer::permute(mlir::Value x, llvm::ArrayRef<int64_t> perm,
                              const std::string &suffix) {
  llvm::SmallVector<int64_t> dims;
  for (int64_t p : perm)
    dims.push_back(shape(x)[p]);
  return b_.create<kiln::TransposeOp>(loc(suffix), type(dims, element(x)), x,
                                      arr(perm));
}

mlir::Value Importer::withUnitHeight(mlir::Value v, const std::string &suffix) {
  llvm::ArrayRef<int64_t> s = shape(v);
  return g_.reshape(nodeName_ + suffix, v, {s[0], s[1], 1, s[2]});
}

mlir::Value Importer::conv2d(mlir::Value x, mlir::Value w,
                             const ConvAttributes &a,
                             const std::string &suffix) {
  llvm::ArrayRef<int64_t> sx = shape(x), sw = shape(w);
  llvm::SmallVector<int64_t> dims = {sx[0], sw[0]};
  for (int i = 0; i < 2; ++i)
    dims.push_back((sx[2 + i] + a.pads[i] + a.pads[2 + i] -
                    a.dilations[i] * (sw[2 + i] - 1) - 1) /
                       a.strides[i] +
                   1);
  return b_.create<kiln::Conv2DOp>(loc(suffix), type(dims, element(x)), x, w,
                                   arr(a.strides), arr(kilnPadding(a.pads)),
                                   arr(a.dilations),
                                   b_.getI64IntegerAttr(a.groups));
}

mlir::Value Importer::depthFirst(mlir::Value x, int64_t low, int64_t high,
                                 double fill) {
  llvm::ArrayRef<int64_t> sx = shape(x);
  mlir::Value padded = x;
  if (low || high)
    padded = b_.create<kiln::PadOp>(
        loc(".depth_pad"),
        type({sx[0], sx[1], sx[2] + low + high, sx[3], sx[4]}, element(x)), x,
        arr({0, 0, low, 0, 0}), arr({0, 0, high, 0, 0}),
        b_.getF64FloatAttr(fill));
  return permute(padded, kDepthFirst, ".depth_first");
}

mlir::Value Importer::kernelSlice(mlir::Value w, int64_t kd,
                                  const std::string &at) {
  llvm::ArrayRef<int64_t> sw = shape(w);
  return g_.reshape(nodeName_ + at + ".weight",
                    sliceAxis(w, 2, kd, kd + 1, 1, at + ".weight_slice"),
                    {sw[0], sw[1], sw[3], sw[4]});
}

// A 3-D convolution: for each depth kd of the kernel, the planes of the
// (padded) input at depths kd * dilation + o * stride, batched as [N *
// D_out, C, H, W], convolved with W[:, :, kd]; the sum over kd, as [N,
// C_out, D_out, H_out, W_out].
mlir::Value Importer::convOverDepth(mlir::Value x, mlir::Value w,
                                    const ConvAttributes &a,
                                    llvm::ArrayRef<int64_t> dims) {
  llvm::ArrayRef<int64_t> sx = shape(x), sw = shape(w);
  int64_t n = sx[0], depthOut = dims[2];
  mlir::Value moved = depthFirst(x, a.pads[0], a.pads[3], 0.0);
  ConvAttributes plane = a.planes();
  mlir::Value sum;
  for (int64_t kd = 0; kd < sw[2]; ++kd) {
    std::string at = ".depth" + std::to_string(kd);
    int64_t start = kd * a.dilations[0];
    mlir::Value taps =
        sliceAxis(moved, 1, start, start + (depthOut - 1) * a.strides[0] + 1,
                  a.strides[0], at + ".taps");
    mlir::Value flat = g_.reshape(nodeName_ + at + ".batch", taps,
                                  {n * depthOut, sx[1], sx[3], sx[4]});
    mlir::Value y = conv2d(flat, kernelSlice(w, kd, at), plane, at);
    sum = sum ? add(sum, y, at + ".sum") : y;
  }
  mlir::Value grouped = g_.reshape(nodeName_ + ".depth_planes", sum,
                                   {n, depthOut, dims[1], dims[3], dims[4]});
  return permute(grouped, kDepthFirst, "");
}

bool Importer::conv() {
  mlir::Value x, w;
  ConvAttributes a;
  if (!convInputs(/*transposed=*/false, x, w, a))
    return false;
  llvm::ArrayRef<int64_t> sx = shape(x), sw = shape(w);
  size_t rank = a.rank();
  llvm::SmallVector<int64_t> dims = {sx[0], sw[0]};
  for (size_t i = 0; i < rank; ++i) {
    int64_t extent = sx[2 + i] + a.pads[i] + a.pads[rank + i] -
                     a.dilations[i] * (sw[2 + i] - 1) - 1;
    if (extent < 0)
      return fail("the kernel " + shapeText(sw) + " does not fit X " +
                  shapeText(sx));
    dims.push_back(extent / a.strides[i] + 1);
  }
  mlir::Value y;
  if (rank == 2)
    y = conv2d(x, w, a, "");
  else if (rank == 1)
    y = g_.reshape(nodeName_,
                   conv2d(withUnitHeight(x, ".x_2d"),
                          withUnitHeight(w, ".w_2d"), a.lifted(), ".2d"),
                   dims);
  else
    y = convOverDepth(x, w, a, dims);
  if (!addChannelBias(y))
    return false;
  setOutput(0, y);
  return true;
}

// A 3-D transposed convolution: for each depth kd of the kernel, every
// input plane [N * D, C, H, W] through the 2-D transposed convolution
// with W[:, :, kd], each result placed at output depth d * stride + kd *
// dilation - pad_begin (zeros between, for a stride above 1; those
// outside the output dropped); the sum over kd.
mlir::Value Importer::convTransposeOverDepth(mlir::Value x, mlir::Value w,
                                             const ConvAttributes &a,
                                             llvm::ArrayRef<int64_t> dims) {
  llvm::ArrayRef<int64_t> sx = shape(x), sw = shape(w);
  mlir::Type e = element(x);
  int64_t n = sx[0], depth = sx[2], stride = a.strides[0];
  int64_t outDepth = dims[2], plane = dims[1] * dims[3] * dims[4];
  mlir::Value flat = g_.reshape(nodeName_ + ".batch", depthFirst(x, 0, 0, 0.0),
                                {n * depth, sx[1], sx[3], sx[4]});
  ConvAttributes planes = a.planes();
  // Positions j of (depth - 1) * stride + 1 once strided.
  int64_t strided = (depth - 1) * stride + 1;
  mlir::Value sum;
  for (int64_t kd = 0; kd < sw[2]; ++kd) {
    std::string at = ".depth" + std::to_string(kd);
    // Position j lands at output depth j + offset; those in [0, outDepth).
    int64_t offset = kd * a.dilations[0] - a.pads[0];
    int64_t first = std::max<int64_t>(0, -offset);
    int64_t last = std::min<int64_t>(strided, outDepth - offset);
    if (first >= last)
      continue;
    mlir::Value y = b_.create<kiln::Conv2DInputGradOp>(
        loc(at), type({n * depth, dims[1], dims[3], dims[4]}, e), flat,
        kernelSlice(w, kd, at), arr(planes.strides),
        arr(kilnPadding(planes.pads)), arr(planes.dilations),
        b_.getI64IntegerAttr(a.groups));
    mlir::Value rows =
        g_.reshape(nodeName_ + at + ".rows", y, {n, depth, 1, plane});
    if (stride > 1) {
      mlir::Value zeros = splat(0.0, e, {n, depth, stride - 1, plane});
      rows = b_.create<kiln::ConcatenateOp>(
          loc(at + ".strided"), type({n, depth, stride, plane}, e),
          mlir::ValueRange{rows, zeros}, static_cast<uint64_t>(2));
    }
    mlir::Value placed = sliceAxis(g_.reshape(nodeName_ + at + ".positions",
                                              rows, {n, depth * stride, plane}),
                                   1, first, last, 1, at + ".kept");
    int64_t low = first + offset, high = outDepth - (last + offset);
    if (low || high)
      placed = b_.create<kiln::PadOp>(
          loc(at + ".placed"), type({n, outDepth, plane}, e), placed,
          arr({0, low, 0}), arr({0, high, 0}), b_.getF64FloatAttr(0.0));
    sum = sum ? add(sum, placed, at + ".sum") : placed;
  }
  if (!sum)
    sum = splat(0.0, e, {n, outDepth, plane});
  mlir::Value grouped = g_.reshape(nodeName_ + ".depth_planes", sum,
                                   {n, outDepth, dims[1], dims[3], dims[4]});
  return permute(grouped, kDepthFirst, "");
}

// ConvTranspose: the gradient of a convolution with respect to its input,
// which is what a transposed convolution computes. W is [C_in, C_out /
// group, k...], the filter of the convolution that maps the result back
// to X; the result's size along each spatial axis is (in - 1) * stride -
// pads + dilation * (k - 1) + 1 + output_padding. With auto_pad
// SAME_UPPER or SAME_LOWER the size is given (output_shape, else in *
// stride) and the pads follow from it; otherwise output_shape must be the
// size the pads give.
bool Importer::convTranspose() {
  mlir::Value x, w;
  ConvAttributes a;
  if (!convInputs(/*transposed=*/true, x, w, a))
    return false;
  size_t rank = a.rank();
  std::string axes = std::to_string(rank) + "-D";
  std::vector<int64_t> outputPadding =
      intsAttr("output_padding").value_or(std::vector<int64_t>(rank, 0));
  if (outputPadding.size() != rank)
    return fail("output_padding is not that of a " + axes +
                " transposed convolution");
  llvm::ArrayRef<int64_t> sx = shape(x), sw = shape(w);
  std::optional<std::vector<int64_t>> given = intsAttr("output_shape");
  if (given && given->size() != rank)
    return fail("output_shape " + shapeText(*given) + " is not that of a " +
                axes + " transposed convolution");
  std::string autoPad = stringAttr("auto_pad", "NOTSET");
  bool same = autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER";
  llvm::SmallVector<int64_t> dims = {sx[0], sw[1] * a.groups};
  for (size_t i = 0; i < rank; ++i) {
    if (outputPadding[i] < 0 || outputPadding[i] >= a.strides[i])
      return fail("output_padding " + shapeText(outputPadding) +
                  " is not below the strides " + shapeText(a.strides) +
                  ": the convolution it reverses would not reach the padded "
                  "elements");
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
      splitSame(autoPad, full - out, i, rank, a.pads);
    }
    int64_t extent = (sx[2 + i] - 1) * a.strides[i] - a.pads[i] -
                     a.pads[rank + i] + a.dilations[i] * (sw[2 + i] - 1) + 1 +
                     outputPadding[i];
    if (extent < 1)
      return fail("the pads " + shapeText(a.pads) + " leave no output");
    dims.push_back(extent);
  }
  if (given && !same) {
    llvm::ArrayRef<int64_t> spatial = llvm::ArrayRef(dims).drop_front(2);
    if (llvm::ArrayRef<int64_t>(*given) != spatial)
      return fail("output_shape " + shapeText(*given) + " differs from the " +
                  shapeText(spatial) +
                  " its pads and output_padding give: export with explicit "
                  "pads");
  }
  mlir::Type e = element(x);
  mlir::Value y;
  if (rank == 2) {
    y = b_.create<kiln::Conv2DInputGradOp>(
        loc(), type(dims, e), x, w, arr(a.strides), arr(kilnPadding(a.pads)),
        arr(a.dilations), b_.getI64IntegerAttr(a.groups));
  } else if (rank == 1) {
    ConvAttributes lifted = a.lifted();
    y = b_.create<kiln::Conv2DInputGradOp>(
        loc(".2d"), type({dims[0], dims[1], 1, dims[2]}, e),
        withUnitHeight(x, ".x_2d"), withUnitHeight(w, ".w_2d"),
        arr(lifted.strides), arr(kilnPadding(lifted.pads)),
        arr(lifted.dilations), b_.getI64IntegerAttr(a.groups));
    y = g_.reshape(nodeName_, y, dims);
  } else {
    y = convTransposeOverDepth(x, w, a, dims);
  }
  if (!addChannelBias(y))
    return false;
  setOutput(0, y);
  return true;
}

mlir::Value Importer::pool2d(bool max, mlir::Value x,
                             llvm::ArrayRef<int64_t> kernel,
                             llvm::ArrayRef<int64_t> strides,
                             llvm::ArrayRef<int64_t> padding,
                             llvm::ArrayRef<int64_t> dims,
                             const std::string &suffix) {
  mlir::Type t = type(dims, element(x));
  if (max)
    return b_.create<kiln::MaxPool2DOp>(loc(suffix), t, x, arr(kernel),
                                        arr(strides), arr(padding));
  return b_.create<kiln::AvgPool2DOp>(loc(suffix), t, x, arr(kernel),
                                      arr(strides), arr(padding));
}

// MaxPool and AveragePool (1-D, 2-D or 3-D). ceil_mode rounds the output
// size up, as PyTorch does: a last window that would start past the input
// and its leading pad is dropped, and the windows that overhang the end
// read kiln padding there (-infinity for the max; zeros for the average).
// kiln's average divides by the whole window; where PyTorch's divisor
// differs (count_include_pad 0: the input elements the window covers; 1:
// the window cut at the end of the declared pads, which ceil_mode can
// overhang), the result is multiplied by a constant of the output's
// spatial shape holding window size over divisor.
bool Importer::pool(bool max, bool lp) {
  mlir::Value x;
  if (!value(0, x))
    return false;
  // LpPool: (the sum of |x|^p over the window)^(1/p), the sum kiln's
  // average (zeros padded, divided by the whole window) times the window.
  double power = 0;
  if (lp) {
    if (!lpPower(x, power))
      return false;
    x = absPower(x, power);
  }
  bool indices = node_->outputs.size() > 1 && !node_->outputs[1].empty();
  if (indices && !max)
    return fail("it has an Indices output, which only MaxPool gives");
  llvm::ArrayRef<int64_t> sx = shape(x);
  if (indices && sx.size() == 5)
    return fail("its Indices output is of a 3-D pool: kiln import reads "
                "the indices of 1-D and 2-D max pools");
  if (sx.size() < 3 || sx.size() > 5)
    return fail("X is " + shapeText(sx) +
                ": kiln import reads 1-D, 2-D and 3-D pooling (NCW, NCHW, "
                "NCDHW)");
  size_t rank = sx.size() - 2;
  std::string axes = std::to_string(rank) + "-D";
  std::optional<std::vector<int64_t>> kernel = intsAttr("kernel_shape");
  if (!kernel || kernel->size() != rank)
    return fail("kernel_shape is missing or not " + axes);
  if (llvm::any_of(*kernel, [](int64_t k) { return k < 1; }))
    return fail("kernel_shape " + shapeText(*kernel) + " is not positive");
  std::vector<int64_t> strides = intsAttr("strides").value_or(ones(rank));
  if (strides.size() != rank ||
      llvm::any_of(strides, [](int64_t v) { return v < 1; }))
    return fail("strides " + shapeText(strides) + " are not " +
                std::to_string(rank) + " positive values");
  std::vector<int64_t> dilations = intsAttr("dilations").value_or(ones(rank));
  if (dilations != ones(rank))
    return fail("dilations are not 1: kiln pools take dense windows");
  std::vector<int64_t> pads;
  if (!windowPads(sx.drop_front(2), *kernel, strides, pads))
    return false;
  for (size_t i = 0; i < rank; ++i)
    if (pads[i] >= (*kernel)[i] || pads[rank + i] >= (*kernel)[i])
      return fail("pads " + shapeText(pads) +
                  " are not smaller than the window " + shapeText(*kernel) +
                  ": a window would read only padding");
  bool ceil = intAttr("ceil_mode", 0) != 0;
  bool includePad = intAttr("count_include_pad", 0) != 0;
  llvm::SmallVector<int64_t> dims = {sx[0], sx[1]};
  // Kiln's end padding: the declared pads and the ceil_mode overhang.
  std::vector<int64_t> ends(pads.begin() + rank, pads.end());
  // Per axis, each output position's divisor along that axis.
  std::vector<std::vector<int64_t>> counts(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t in = sx[2 + i], k = (*kernel)[i], s = strides[i];
    int64_t padded = in + pads[i] + pads[rank + i];
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
      int64_t end = std::min(start + k, in + pads[rank + i]);
      // Every window starts before the input's end (the ceil_mode rule;
      // with floor, since the pads are below the window) and ends past
      // its start, so both counts are at least 1.
      counts[i].push_back(includePad ? end - start
                                     : std::min(end, in) -
                                           std::max<int64_t>(start, 0));
    }
  }
  mlir::Type e = element(x);
  mlir::Value y;
  if (rank == 2) {
    y = pool2d(max, x, *kernel, strides, {pads[0], ends[0], pads[1], ends[1]},
               dims, "");
  } else if (rank == 1) {
    y = pool2d(max, withUnitHeight(x, ".x_2d"), {1, (*kernel)[0]},
               {1, strides[0]}, {0, 0, pads[0], ends[0]},
               {dims[0], dims[1], 1, dims[2]}, ".2d");
    y = g_.reshape(nodeName_, y, dims);
  } else {
    // The planes of every (padded) depth position pooled, batched as [N *
    // D, C, H, W]; then the max, or the mean, of each depth window's.
    int64_t n = sx[0], c = sx[1], depth = sx[2] + pads[0] + ends[0];
    mlir::Value flat = g_.reshape(
        nodeName_ + ".batch",
        depthFirst(x, pads[0], ends[0],
                   max ? -std::numeric_limits<double>::infinity() : 0.0),
        {n * depth, c, sx[3], sx[4]});
    mlir::Value planes = g_.reshape(
        nodeName_ + ".planes",
        pool2d(max, flat, {(*kernel)[1], (*kernel)[2]},
               {strides[1], strides[2]}, {pads[1], ends[1], pads[2], ends[2]},
               {n * depth, c, dims[3], dims[4]}, ".2d"),
        {n, depth, c, dims[3], dims[4]});
    for (int64_t kd = 0; kd < (*kernel)[0]; ++kd) {
      std::string at = ".depth" + std::to_string(kd);
      mlir::Value taps =
          sliceAxis(planes, 1, kd, kd + (dims[2] - 1) * strides[0] + 1,
                    strides[0], at + ".taps");
      if (!y)
        y = taps;
      else if (max)
        y = b_.create<kiln::MaxOp>(loc(at + ".max"), y.getType(), y, taps);
      else
        y = add(y, taps, at + ".sum");
    }
    if (!max)
      y = mul(y, splat(1.0 / double((*kernel)[0]), e, shape(y)), ".mean");
    y = permute(y, kDepthFirst, "");
  }
  if (max) {
    setOutput(0, y);
    if (indices) {
      int64_t order = intAttr("storage_order", 0);
      if (order != 0 && order != 1)
        return fail("storage_order is " + std::to_string(order) +
                    ": expected 0 (row-major) or 1 (column-major)");
      // A 1-D pool's indices are a 2-D pool's over a unit height.
      bool flat = rank == 1;
      setOutput(1, maxPoolIndices(
                       flat ? withUnitHeight(x, ".x_2d_indices") : x,
                       flat ? std::vector<int64_t>{1, (*kernel)[0]} : *kernel,
                       flat ? std::vector<int64_t>{1, strides[0]} : strides,
                       flat ? std::vector<int64_t>{0, pads[0]}
                            : std::vector<int64_t>{pads[0], pads[1]},
                       flat ? std::vector<int64_t>{1, dims[2]}
                            : std::vector<int64_t>{dims[2], dims[3]},
                       order == 1, dims));
    }
    return true;
  }
  int64_t window = product(*kernel);
  if (lp) {
    y = mul(y, splat(double(window), e, dims), ".sum");
    if (power != 1)
      y = b_.create<kiln::PowOp>(loc(), y.getType(), y,
                                 splat(1.0 / power, e, dims));
    setOutput(0, y);
    return true;
  }
  Static factors;
  factors.dataType = int32_t(DataType::Float);
  factors.dims.assign(dims.begin() + 2, dims.end());
  factors.values.assign(1, 1.0);
  bool uniform = true;
  for (size_t i = 0; i < rank; ++i) {
    std::vector<double> next;
    for (double f : factors.values)
      for (int64_t count : counts[i])
        next.push_back(f * double(count));
    factors.values = std::move(next);
  }
  for (double &f : factors.values) {
    uniform = uniform && f == double(window);
    f = double(window) / f;
  }
  if (!uniform) {
    mlir::Value wide = broadcastTo(
        constant(factors, nodeName_ + ".divisors", element(y)), dims);
    y = b_.create<kiln::MulOp>(loc(".divisors"), y.getType(), y, wide);
  }
  setOutput(0, y);
  return true;
}

mlir::Value Importer::maxPoolIndices(mlir::Value x,
                                     llvm::ArrayRef<int64_t> kernel,
                                     llvm::ArrayRef<int64_t> strides,
                                     llvm::ArrayRef<int64_t> leading,
                                     llvm::ArrayRef<int64_t> out,
                                     bool columnMajor,
                                     llvm::ArrayRef<int64_t> resultDims) {
  // Every window's taps gathered from X's planes as [N * C, windows, taps],
  // a tap in the padding reading an extra element of -infinity; the first
  // largest tap by kiln.argmax (the reference's strict > keeps the first);
  // its position from the window's and the tap's coordinates.
  llvm::ArrayRef<int64_t> sx = shape(x);
  int64_t planes = sx[0] * sx[1], height = sx[2], width = sx[3];
  int64_t taps = kernel[0] * kernel[1], windows = out[0] * out[1];
  mlir::Type e = element(x), i64 = b_.getI64Type();
  mlir::Value rows =
      g_.reshape(nodeName_ + ".index_planes", x, {planes, height * width});
  mlir::Value outside =
      splat(-std::numeric_limits<double>::infinity(), e, {planes, 1});
  rows = b_.create<kiln::ConcatenateOp>(
      loc(".index_padding"), type({planes, height * width + 1}, e),
      mlir::ValueRange{rows, outside}, b_.getI64IntegerAttr(1));
  Static at;
  at.dataType = int32_t(DataType::Int32);
  at.dims = {windows * taps};
  for (int64_t oh = 0; oh < out[0]; ++oh)
    for (int64_t ow = 0; ow < out[1]; ++ow)
      for (int64_t kh = 0; kh < kernel[0]; ++kh)
        for (int64_t kw = 0; kw < kernel[1]; ++kw) {
          int64_t h = oh * strides[0] - leading[0] + kh;
          int64_t w = ow * strides[1] - leading[1] + kw;
          bool inside = h >= 0 && h < height && w >= 0 && w < width;
          at.values.push_back(double(inside ? h * width + w : height * width));
        }
  mlir::Value gathered =
      gatherAlong(rows, 1, constant(at, nodeName_ + ".taps"), ".tap_values");
  gathered =
      g_.reshape(nodeName_ + ".windows", gathered, {planes, windows, taps});
  mlir::Value best =
      b_.create<kiln::ArgmaxOp>(loc(".best_tap"), type({planes, windows}, i64),
                                gathered, b_.getI64IntegerAttr(2));
  // The tap's row and column, and the window's: h = oh * sh - pt + j / kw,
  // w = ow * sw - pl + j % kw.
  llvm::SmallVector<int64_t> grid = {planes, out[0], out[1]};
  best = g_.reshape(nodeName_ + ".best_grid", best, grid);
  auto iota = [&](int64_t d, const std::string &suffix) {
    return b_
        .create<kiln::IotaOp>(loc(suffix), type(grid, i64),
                              b_.getI64IntegerAttr(d))
        .getResult();
  };
  auto number = [&](double v) { return splat(v, i64, grid); };
  mlir::Value tapRow = b_.create<kiln::DivOp>(loc(".tap_row"), best.getType(),
                                              best, number(double(kernel[1])));
  mlir::Value tapColumn = b_.create<kiln::RemOp>(
      loc(".tap_column"), best.getType(), best, number(double(kernel[1])));
  mlir::Value h = add(
      sub(mul(iota(1, ".window_row"), number(double(strides[0])), ".row_start"),
          number(double(leading[0])), ".row_padded"),
      tapRow, ".row");
  mlir::Value w = add(sub(mul(iota(2, ".window_column"),
                              number(double(strides[1])), ".column_start"),
                          number(double(leading[1])), ".column_padded"),
                      tapColumn, ".column");
  // ONNX counts the batch and channels too: plane * H * W, then h * W + w
  // (storage_order 0) or h + w * H (1).
  mlir::Value within =
      columnMajor
          ? add(h, mul(w, number(double(height)), ".w_major"), ".in_plane")
          : add(mul(h, number(double(width)), ".h_major"), w, ".in_plane");
  mlir::Value index = add(
      mul(iota(0, ".plane"), number(double(height * width)), ".plane_start"),
      within, ".index");
  return g_.reshape(nodeName_ + ".indices", index, resultDims);
}

// Col2Im (2-D; torch.nn.functional.fold): the columns [N, C * kH * kW,
// L] of the image [N, C, H, W], each block's elements added back where
// im2col read them (pads, strides and dilations as a convolution's). It
// is the transposed convolution of the columns, as [N, C * kH * kW, L_h,
// L_w], with a constant one-hot filter per channel (group C): the
// convolution with that filter is im2col, so its input gradient is
// col2im, and X's gradient is im2col of the output's.
bool Importer::col2im() {
  mlir::Value x;
  if (!value(0, x))
    return false;
  const Static *image = staticInput(1), *block = staticInput(2);
  if (!image || !block)
    return false;
  llvm::ArrayRef<int64_t> sx = shape(x);
  if (image->values.size() != 2 || block->values.size() != 2)
    return fail("image_shape and block_shape have " +
                std::to_string(image->values.size()) + " and " +
                std::to_string(block->values.size()) +
                " values: kiln import reads 2-D Col2Im");
  int64_t size[2] = {toIndex(image->values[0]), toIndex(image->values[1])};
  int64_t k[2] = {toIndex(block->values[0]), toIndex(block->values[1])};
  if (size[0] < 1 || size[1] < 1 || k[0] < 1 || k[1] < 1)
    return fail("image_shape and block_shape must be positive");
  ConvAttributes a;
  a.strides = intsAttr("strides").value_or(ones(2));
  a.dilations = intsAttr("dilations").value_or(ones(2));
  a.pads = intsAttr("pads").value_or(std::vector<int64_t>(4, 0));
  if (a.strides.size() != 2 || a.dilations.size() != 2 || a.pads.size() != 4 ||
      llvm::any_of(a.strides, [](int64_t v) { return v < 1; }) ||
      llvm::any_of(a.dilations, [](int64_t v) { return v < 1; }) ||
      llvm::any_of(a.pads, [](int64_t v) { return v < 0; }))
    return fail("strides, dilations and pads are not those of a 2-D window");
  int64_t blocks[2];
  for (int i = 0; i < 2; ++i) {
    int64_t extent =
        size[i] + a.pads[i] + a.pads[2 + i] - a.dilations[i] * (k[i] - 1) - 1;
    if (extent < 0)
      return fail("the block " + shapeText({k[0], k[1]}) +
                  " does not fit the image " + shapeText({size[0], size[1]}));
    blocks[i] = extent / a.strides[i] + 1;
  }
  int64_t window = k[0] * k[1];
  if (sx.size() != 3 || sx[1] % window != 0 || sx[2] != blocks[0] * blocks[1])
    return fail("the input is " + shapeText(sx) + ": expected [N, C * " +
                std::to_string(window) + ", " +
                std::to_string(blocks[0] * blocks[1]) + "]");
  int64_t channels = sx[1] / window;
  a.groups = channels;
  if (!staticFits({sx[1], window}, "its filter of " + std::to_string(sx[1]) +
                                       " x " + std::to_string(window) +
                                       " values"))
    return false;
  Static filter;
  filter.dataType = int32_t(DataType::Float);
  filter.dims = {sx[1], 1, k[0], k[1]};
  filter.values.assign(sx[1] * window, 0.0);
  for (int64_t row = 0; row < sx[1]; ++row)
    filter.values[row * window + row % window] = 1.0;
  mlir::Value columns = g_.reshape(nodeName_ + ".columns", x,
                                   {sx[0], sx[1], blocks[0], blocks[1]});
  mlir::Value w = constant(filter, nodeName_ + ".filter");
  if (element(w) != element(x))
    w = b_.create<kiln::ConvertOp>(loc(".filter_type"),
                                   type(filter.dims, element(x)), w);
  setOutput(0, b_.create<kiln::Conv2DInputGradOp>(
                   loc(), type({sx[0], channels, size[0], size[1]}, element(x)),
                   columns, w, arr(a.strides), arr(kilnPadding(a.pads)),
                   arr(a.dilations), b_.getI64IntegerAttr(a.groups)));
  return true;
}

bool Importer::globalPool(bool max, bool lp) {
  mlir::Value x;
  if (!value(0, x))
    return false;
  llvm::ArrayRef<int64_t> sx = shape(x);
  if (sx.size() < 3)
    return fail("X is " + shapeText(sx) + ": expected [N, C, spatial...]");
  // GlobalLpPool: (the sum of |x|^p over the spatial axes)^(1/p).
  double power = 0;
  if (lp && !lpPower(x, power))
    return false;
  llvm::SmallVector<int64_t> spatial, reduced = {sx[0], sx[1]},
                                      kept = {sx[0], sx[1]};
  for (size_t d = 2; d < sx.size(); ++d) {
    spatial.push_back(d);
    kept.push_back(1);
  }
  kiln::ReduceKind kind = lp    ? kiln::ReduceKind::sum
                          : max ? kiln::ReduceKind::max
                                : kiln::ReduceKind::mean;
  mlir::Value y = b_.create<kiln::ReduceOp>(
      loc(lp ? ".sum" : ".reduce"), type(reduced, element(x)), kind,
      lp ? absPower(x, power) : x, arr(spatial));
  if (lp && power != 1)
    y = b_.create<kiln::PowOp>(loc(".root"), y.getType(), y,
                               splat(1.0 / power, element(x), reduced));
  setOutput(0, g_.reshape(nodeName_, y, kept));
  return true;
}

bool Importer::lpPower(mlir::Value x, double &power) {
  power = double(intAttr("p", 2));
  if (power < 1)
    return fail("p is " + std::to_string(int64_t(power)) +
                ": expected 1 or more");
  if (!llvm::isa<mlir::FloatType>(element(x)))
    return fail("X is not floating-point");
  return true;
}

mlir::Value Importer::absPower(mlir::Value x, double power) {
  mlir::Value magnitude = b_.create<kiln::AbsOp>(loc(".abs"), x.getType(), x);
  if (power == 1)
    return magnitude;
  return b_.create<kiln::PowOp>(loc(".power"), x.getType(), magnitude,
                                splat(power, element(x), shape(x)));
}

// MaxUnpool: X's elements written into zeros of output_shape, or without
// it the inferred shape ((in - 1) * stride - pads + kernel per axis), at
// the flat positions Indices gives: a MaxPool's over the tensor it pooled,
// which output_shape names where the inferred shape is smaller (as ONNX
// Runtime and PyTorch's max_unpool with output_size compute it;
// onnx.reference writes into the inferred shape and pads). A position written
// twice (overlapping windows sharing their maximum, so the writes are equal)
// holds the mean of its writes: the value, and a gradient that, through the
// pool before it, reaches that maximum once, as finite differences say (ONNX
// leaves repeated writes unordered; onnx.reference keeps the last).
bool Importer::maxUnpool() {
  mlir::Value x, indices;
  if (!value(0, x) || !value(1, indices))
    return false;
  llvm::ArrayRef<int64_t> sx = shape(x);
  mlir::Type e = element(x);
  if (!llvm::isa<mlir::FloatType>(e))
    return fail("X is not floating-point");
  if (shape(indices) != sx || !element(indices).isInteger(64))
    return fail("I is " + shapeText(shape(indices)) +
                ": expected INT64 of X's shape " + shapeText(sx));
  size_t rank = sx.size() < 3 ? 0 : sx.size() - 2;
  std::optional<std::vector<int64_t>> kernel = intsAttr("kernel_shape");
  if (rank == 0 || !kernel || kernel->size() != rank)
    return fail(
        "X is " + shapeText(sx) + " and kernel_shape " +
        (kernel ? shapeText(*kernel) : std::string("missing")) +
        ": expected [N, C, spatial...] and one kernel size per spatial axis");
  std::vector<int64_t> strides =
      intsAttr("strides").value_or(std::vector<int64_t>(rank, 1));
  std::vector<int64_t> pads =
      intsAttr("pads").value_or(std::vector<int64_t>(2 * rank, 0));
  if (strides.size() != rank || pads.size() != 2 * rank)
    return fail("strides or pads do not match the " + std::to_string(rank) +
                " spatial axes");
  llvm::SmallVector<int64_t> inferred = {sx[0], sx[1]};
  for (size_t i = 0; i < rank; ++i)
    inferred.push_back((sx[2 + i] - 1) * strides[i] - pads[i] - pads[rank + i] +
                       (*kernel)[i]);
  if (llvm::any_of(inferred, [](int64_t d) { return d < 1; }))
    return fail("its output would be " + shapeText(inferred));
  llvm::SmallVector<int64_t> dims(inferred);
  if (hasInput(2)) {
    const Static *out = staticInput(2);
    if (!out)
      return false;
    if (out->values.size() != sx.size())
      return fail("output_shape has " + std::to_string(out->values.size()) +
                  " values: expected " + std::to_string(sx.size()));
    for (size_t d = 0; d < sx.size(); ++d) {
      dims[d] = toIndex(out->values[d]);
      if (dims[d] < inferred[d] || (d < 2 && dims[d] != inferred[d]))
        return fail("output_shape is " + shapeText(dims) +
                    ": expected at least " + shapeText(inferred) +
                    " (N and C equal)");
    }
  }
  int64_t total = product(dims), count = product(sx);
  mlir::Value rows = g_.reshape(nodeName_ + ".positions", indices, {count});
  mlir::Value values = g_.reshape(nodeName_ + ".values", x, {count});
  mlir::Value sum = b_.create<kiln::ScatterAddOp>(
      loc(".scatter"), type({total}, e), splat(0.0, e, {total}), rows, values);
  mlir::Value writes = b_.create<kiln::ScatterAddOp>(
      loc(".writes"), type({total}, e), splat(0.0, e, {total}), rows,
      splat(1.0, e, {count}));
  mlir::Value mean =
      div(sum,
          b_.create<kiln::MaxOp>(loc(".divisor"), writes.getType(), writes,
                                 splat(1.0, e, {total})),
          ".mean");
  setOutput(0, g_.reshape(nodeName_, mean, dims));
  return true;
}

} // namespace kiln::cli::onnx_import
