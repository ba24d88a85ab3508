//===- OnnxImportSpectral.cpp - DFT and STFT as products with constants ---===//
//
// The importer's DFT and STFT (OnnxImporter.h). A discrete Fourier
// transform of static length is linear in its input: the transform along
// one axis is a kiln.dot_general of the input (its real and imaginary parts
// side by side, ONNX's trailing [.., 2]) with a constant matrix of cosines
// and sines, computed here in double. Onesided and inverse transforms,
// zero padding and truncation to dft_length are rows and columns of that
// matrix; an STFT gathers its overlapping frames and folds a constant
// window into the matrix. It is O(n^2) per transform where an FFT is
// O(n log n), but a GEMM on either target, and differentiable as one; the
// matrix is bounded (kMaxMatrixEntries) so that a long transform is
// refused rather than written as a huge constant.
//
//===----------------------------------------------------------------------===//

#include "tools/kiln/lib/OnnxImporter.h"

#include "mlir/Dialect/Utils/IndexingUtils.h"

#include <cmath>

namespace kiln::cli::onnx_import {

// What one transform along an axis computes.
struct SpectralTransform {
  int64_t inLength = 0;  // input elements along the axis
  int64_t inParts = 1;   // 1: real input; 2: real and imaginary
  int64_t length = 0;    // the DFT's length (dft_length)
  int64_t outLength = 0; // output elements along the axis
  int64_t outParts = 2;  // 2: complex output; 1: real (an inverse onesided)
  bool inverse = false;
  bool onesided = false;
};

namespace {

// The matrix [inLength * inParts, outLength * outParts] that maps a row of
// input (element n, part c at n * inParts + c) to a row of output, each
// input element scaled by window[n] (none: 1). The angle of element n at
// frequency k is 2 pi (k n mod length) / length, reduced in integers so
// that it stays exact for long transforms.
std::vector<double> transformMatrix(const SpectralTransform &t,
                                    const std::vector<double> *window) {
  int64_t rows = t.inLength * t.inParts, cols = t.outLength * t.outParts;
  std::vector<double> m(rows * cols, 0.0);
  double scale = t.inverse ? 1.0 / double(t.length) : 1.0;
  for (int64_t n = 0; n < t.inLength; ++n) {
    // Elements past the DFT's length are cut off (a forward transform or a
    // full inverse reads the first `length`; an inverse onesided one reads
    // the first length / 2 + 1 bins).
    int64_t used = t.inverse && t.onesided ? t.length / 2 + 1 : t.length;
    if (n >= used)
      break;
    double w = window ? (*window)[n] : 1.0;
    for (int64_t k = 0; k < t.outLength; ++k) {
      int64_t turn = (k * n) % t.length;
      double angle = 2.0 * M_PI * double(turn) / double(t.length);
      double c = std::cos(angle) * w * scale, s = std::sin(angle) * w * scale;
      auto at = [&](int64_t part, int64_t outPart) -> double & {
        return m[(n * t.inParts + part) * cols + k * t.outParts + outPart];
      };
      if (t.inverse && t.onesided) {
        // A real signal from the first half of a Hermitian spectrum: bin n
        // stands for itself and its mirror L - n, except bin 0 and (even
        // L) bin L / 2. Re(X e^{i angle}) = Xr cos - Xi sin.
        bool single = n == 0 || (t.length % 2 == 0 && n == t.length / 2);
        double twice = single ? 1.0 : 2.0;
        at(0, 0) = twice * c;
        if (t.inParts == 2)
          at(1, 0) = -twice * s;
        continue;
      }
      // (xr + i xi)(cos -+ i sin): the forward transform's sign is -1, the
      // inverse's +1.
      double sign = t.inverse ? 1.0 : -1.0;
      at(0, 0) = c;
      at(0, 1) = sign * s;
      if (t.inParts == 2) {
        at(1, 0) = -sign * s;
        at(1, 1) = c;
      }
    }
  }
  return m;
}

} // namespace

mlir::Value Importer::spectralProduct(mlir::Value x, int64_t axis,
                                      const SpectralTransform &t,
                                      const std::vector<double> *window,
                                      const std::string &suffix) {
  // x [..., inLength (at axis), ..., inParts] with the axis moved next to
  // the parts, flattened with them, times the matrix, and unflattened.
  int64_t rank = shape(x).size();
  mlir::Type e = element(x);
  llvm::SmallVector<int64_t> perm;
  for (int64_t d = 0; d < rank - 1; ++d)
    if (d != axis)
      perm.push_back(d);
  perm.push_back(axis);
  perm.push_back(rank - 1);
  bool moved = axis != rank - 2;
  if (moved)
    x = permute(x, perm, suffix + ".axis_last");
  llvm::SmallVector<int64_t> outer(shape(x).begin(), shape(x).end() - 2);
  llvm::SmallVector<int64_t> flat(outer), result(outer);
  flat.push_back(t.inLength * t.inParts);
  x = g_.reshape(nodeName_ + suffix + ".rows", x, flat);

  Static m;
  m.dataType = int32_t(e.isF64() ? DataType::Double : DataType::Float);
  m.dims = {t.inLength * t.inParts, t.outLength * t.outParts};
  m.values = transformMatrix(t, window);
  mlir::Value matrix = constant(m, nodeName_ + suffix + ".matrix");
  if (element(matrix) != e)
    matrix = b_.create<kiln::ConvertOp>(loc(suffix + ".matrix_type"),
                                        type(m.dims, e), matrix);
  result.push_back(t.outLength * t.outParts);
  mlir::Value y = b_.create<kiln::DotGeneralOp>(
      loc(suffix + ".product"), type(result, e), x, matrix, arr({}), arr({}),
      arr({int64_t(flat.size()) - 1}), arr({0}));
  result.back() = t.outLength;
  result.push_back(t.outParts);
  y = g_.reshape(nodeName_ + suffix + ".parts", y, result);
  if (moved)
    y = permute(y, mlir::invertPermutationVector(perm), suffix);
  return y;
}

bool Importer::spectralSize(const SpectralTransform &t) {
  int64_t entries = t.inLength * t.inParts * t.outLength * t.outParts;
  if (t.inLength > kMaxMatrixEntries || t.outLength > kMaxMatrixEntries ||
      entries > kMaxMatrixEntries)
    return fail("its transform of length " + std::to_string(t.length) +
                " would be a matrix of " +
                std::to_string(t.inLength * t.inParts) + " x " +
                std::to_string(t.outLength * t.outParts) +
                " entries: kiln import computes a DFT as a product with a "
                "constant matrix of at most 2^24 entries");
  return true;
}

// DFT (opset 17: axis an attribute, default 1; 20: input 2, default -2).
// Input [..., n, 1 or 2]; dft_length (input 1) pads with zeros or cuts;
// onesided keeps frequencies 0 .. length / 2 of a forward transform, and
// makes an inverse one real from the first half of a Hermitian spectrum
// (NumPy's irfft, as onnx.reference computes it).
bool Importer::dft() {
  mlir::Value x;
  if (!floatValue(0, x))
    return false;
  int64_t rank = shape(x).size();
  if (rank < 2 || (shape(x).back() != 1 && shape(x).back() != 2))
    return fail("its input is " + shapeText(shape(x)) +
                ": expected [..., n, 1] (real) or [..., n, 2] (complex)");
  int64_t axis = opset_ >= 20 ? -2 : intAttr("axis", 1);
  if (opset_ >= 20 && hasInput(2) && !staticIndex(2, "axis", axis))
    return false;
  if (!normalizeAxis(axis, rank, "axis"))
    return false;
  if (axis == rank - 1)
    return fail("axis is the last dimension, which holds the real and "
                "imaginary parts: expected one before it");
  SpectralTransform t;
  t.inverse = intAttr("inverse", 0) != 0;
  t.onesided = intAttr("onesided", 0) != 0;
  t.inLength = shape(x)[axis];
  t.inParts = shape(x).back();
  t.length = t.inverse && t.onesided ? 2 * (t.inLength - 1) : t.inLength;
  if (hasInput(1) && !staticIndex(1, "dft_length", t.length))
    return false;
  if (t.length < 1)
    return fail("the transform's length is " + std::to_string(t.length) +
                ": expected 1 or more");
  if (t.inverse && t.onesided) {
    t.outLength = t.length;
    t.outParts = 1;
  } else {
    t.outLength = t.onesided ? t.length / 2 + 1 : t.length;
  }
  if (!spectralSize(t))
    return false;
  setOutput(0, spectralProduct(x, axis, t, nullptr, ""));
  return true;
}

// STFT (opset 17): signal [batch, length, 1 or 2] or [batch, length];
// frame_step (input 1);
// window (input 2, optional) and frame_length (input 3, optional), one of
// which gives the frame's length when both are absent the whole signal is
// one frame; onesided (default 1). Output [batch, frames, bins, 2] with
// frames = 1 + (length - frame_length) / frame_step. The frames are a
// gather of the signal at constant positions; a constant window (an
// initializer, as torch.stft's hann_window is exported) is folded into the
// matrix, a computed one multiplies the frames.
bool Importer::stft() {
  mlir::Value x;
  if (!value(0, x))
    return false;
  if (!llvm::isa<mlir::FloatType>(element(x)))
    return fail("its signal is not floating-point");
  // [batch, length] is real too: PyTorch's TorchScript exporter writes it
  // so, and ONNX Runtime reads it.
  if (shape(x).size() == 2)
    x = g_.reshape(nodeName_ + ".real", x, {shape(x)[0], shape(x)[1], 1});
  if (shape(x).size() != 3 || (shape(x)[2] != 1 && shape(x)[2] != 2))
    return fail("its signal is " + shapeText(shape(x)) +
                ": expected [batch, length, 1] (real), [batch, length, 2] "
                "(complex) or [batch, length] (real)");
  int64_t step = 0;
  if (!staticIndex(1, "frame_step", step))
    return false;
  if (step < 1)
    return fail("frame_step is " + std::to_string(step) +
                ": expected 1 or more");
  int64_t signal = shape(x)[1];
  int64_t frameLength = -1;
  if (hasInput(3) && !staticIndex(3, "frame_length", frameLength))
    return false;
  std::vector<double> windowValues;
  mlir::Value windowValue;
  if (hasInput(2)) {
    const std::string &name = node_->inputs[2];
    if (statics_.count(name) || parameterTensors_.count(name)) {
      const Static *w = constInput(2);
      if (!w)
        return false;
      if (w->dims.size() != 1)
        return fail("its window is " + shapeText(w->dims) +
                    ": expected one dimension");
      windowValues = w->values;
    } else {
      if (!value(2, windowValue))
        return false;
      if (shape(windowValue).size() != 1 || element(windowValue) != element(x))
        return fail("its window is " + shapeText(shape(windowValue)) +
                    ": expected one dimension, of the signal's type");
    }
    int64_t windowLength =
        windowValue ? shape(windowValue)[0] : windowValues.size();
    if (frameLength >= 0 && frameLength != windowLength)
      return fail("frame_length is " + std::to_string(frameLength) +
                  " and the window has " + std::to_string(windowLength) +
                  " elements: expected them equal");
    frameLength = windowLength;
  }
  if (frameLength < 0)
    frameLength = signal;
  if (frameLength < 1 || frameLength > signal)
    return fail("its frames are " + std::to_string(frameLength) +
                " long and the signal " + std::to_string(signal) +
                ": expected frames of 1 to " + std::to_string(signal));
  SpectralTransform t;
  t.onesided = intAttr("onesided", 1) != 0;
  t.inLength = t.length = frameLength;
  t.inParts = shape(x)[2];
  t.outLength = t.onesided ? t.length / 2 + 1 : t.length;
  if (!spectralSize(t))
    return false;
  int64_t frames = 1 + (signal - frameLength) / step;
  // The frames: [batch, frames, frameLength, parts], gathered at
  // f * step + j.
  Static positions;
  positions.dataType = int32_t(DataType::Int32);
  positions.dims = {frames, frameLength};
  for (int64_t f = 0; f < frames; ++f)
    for (int64_t j = 0; j < frameLength; ++j)
      positions.values.push_back(double(f * step + j));
  mlir::Value framed = gatherAlong(
      x, 1, constant(positions, nodeName_ + ".frame_positions"), ".frames");
  if (windowValue) {
    mlir::Value w =
        g_.reshape(nodeName_ + ".window", windowValue, {1, 1, frameLength, 1});
    w = broadcastTo(w, shape(framed));
    framed = mul(framed, w, ".windowed");
  }
  setOutput(0, spectralProduct(framed, 2, t,
                               windowValues.empty() ? nullptr : &windowValues,
                               ""));
  return true;
}

// HannWindow, HammingWindow and BlackmanWindow (opset 17): a static
// size, `periodic` (default 1: the window of size + 1 points without its
// last) and `output_datatype` (default FLOAT), evaluated at import as
// onnx.reference computes them (Hamming with ONNX's 25/46).
bool Importer::window(const std::string &op) {
  int64_t size = 0;
  if (!staticIndex(0, "size", size))
    return false;
  if (size < 1)
    return fail("size is " + std::to_string(size) +
                ": kiln tensors are not empty");
  if (!staticFits({size}, "size is " + std::to_string(size)))
    return false;
  bool periodic = intAttr("periodic", 1) != 0;
  Static s;
  s.dataType = int32_t(intAttr("output_datatype", int64_t(DataType::Float)));
  mlir::Type check;
  if (!elementType(s.dataType, check, "its output_datatype"))
    return false;
  s.dims = {size};
  double n = double(periodic ? size : size - 1);
  for (int64_t i = 0; i < size; ++i) {
    double t = n > 0 ? 2.0 * M_PI * double(i) / n : 0.0;
    double v;
    if (op == "HannWindow")
      v = 0.5 - 0.5 * std::cos(t);
    else if (op == "HammingWindow")
      v = 25.0 / 46.0 - (1.0 - 25.0 / 46.0) * std::cos(t);
    else
      v = 0.42 - 0.5 * std::cos(t) + 0.08 * std::cos(2.0 * t);
    s.values.push_back(v);
  }
  setStatic(0, std::move(s));
  return true;
}

// MelWeightMatrix (opset 17): the [dft_length / 2 + 1, num_mel_bins]
// triangular filters from static inputs, evaluated at import as ONNX's
// function body and onnx.reference compute them (the mel step divides the
// range by num_mel_bins + 2 points; bin edges rounded down).
bool Importer::melWeightMatrix() {
  int64_t bins = 0, dftLength = 0, sampleRate = 0;
  if (!staticIndex(0, "num_mel_bins", bins) ||
      !staticIndex(1, "dft_length", dftLength) ||
      !staticIndex(2, "sample_rate", sampleRate))
    return false;
  const Static *lowIn = staticInput(3), *highIn = staticInput(4);
  if (!lowIn || !highIn)
    return false;
  if (lowIn->values.size() != 1 || highIn->values.size() != 1)
    return fail("lower_edge_hertz and upper_edge_hertz are not one value each");
  if (bins < 1 || dftLength < 1 || sampleRate < 1)
    return fail("num_mel_bins, dft_length and sample_rate are " +
                std::to_string(bins) + ", " + std::to_string(dftLength) +
                " and " + std::to_string(sampleRate) + ": expected 1 or more");
  double low = lowIn->values[0], high = highIn->values[0];
  int64_t spectrum = dftLength / 2 + 1;
  // The [spectrum, bins] matrix is a constant.
  if (!staticFits({spectrum, bins}, "a matrix of " + std::to_string(spectrum) +
                                        " x " + std::to_string(bins)))
    return false;
  auto mel = [](double hz) {
    return 2595.0 * std::log1p(hz / 700.0) / std::log(10.0);
  };
  double lowMel = mel(low), step = (mel(high) - lowMel) / double(bins + 2);
  std::vector<int64_t> edges;
  for (int64_t i = 0; i < bins + 2; ++i) {
    double hz = 700.0 * std::expm1((double(i) * step + lowMel) / 2595.0 *
                                   std::log(10.0));
    edges.push_back(
        int64_t(std::floor(double(dftLength + 1) * hz / double(sampleRate))));
  }
  Static s;
  s.dataType = int32_t(intAttr("output_datatype", int64_t(DataType::Float)));
  mlir::Type check;
  if (!elementType(s.dataType, check, "its output_datatype"))
    return false;
  s.dims = {spectrum, bins};
  s.values.assign(spectrum * bins, 0.0);
  bool inside = true;
  auto set = [&](int64_t j, int64_t i, double v) {
    if (j < 0 || j >= spectrum)
      inside = false;
    else
      s.values[j * bins + i] = v;
  };
  for (int64_t i = 0; i < bins; ++i) {
    int64_t left = edges[i], center = edges[i + 1], right = edges[i + 2];
    if (center == left)
      set(center, i, 1.0);
    else
      for (int64_t j = left; j <= center; ++j)
        set(j, i, double(j - left) / double(center - left));
    for (int64_t j = center; j < right; ++j)
      set(j, i, double(right - j) / double(right - center));
  }
  if (!inside)
    return fail("its filters reach past the " + std::to_string(spectrum) +
                " bins of a DFT of " + std::to_string(dftLength) +
                ": expected edges from 0 to at most sample_rate / 2");
  setStatic(0, std::move(s));
  return true;
}

} // namespace kiln::cli::onnx_import
