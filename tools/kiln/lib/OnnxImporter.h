//===- OnnxImporter.h - the ONNX importer's state (private) -----*- C++ -*-===//
//
// The class behind importOnnx (OnnxImport.h), shared by its files:
// OnnxImport.cpp holds the walk over the graph (inputs, initializers,
// values and constants, shape computations evaluated at import, the loss)
// and the OnnxImport*.cpp beside it the lowering of each ONNX op to kiln
// ops (Ops, Activations, Conv, Shapes, Indexed, Image, Einsum,
// Recurrent, Control). Only they include it.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TOOLS_KILN_LIB_ONNXIMPORTER_H
#define KILN_TOOLS_KILN_LIB_ONNXIMPORTER_H

#include "tools/kiln/lib/Flags.h"
#include "tools/kiln/lib/GraphBuilder.h"
#include "tools/kiln/lib/OnnxImport.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace kiln::cli::onnx_import {

using onnx::DataType;

struct ConvAttributes;
struct SpectralTransform;

struct Static {
  std::vector<int64_t> dims;
  std::vector<double> values;
  int32_t dataType = 0;
};

inline bool isFloatType(int32_t t) {
  return t == int32_t(DataType::Float) || t == int32_t(DataType::Double) ||
         t == int32_t(DataType::Float16) || t == int32_t(DataType::BFloat16);
}

// An index read from a double, clamped so that INT64_MAX and INT64_MIN
// (the exporters' "to the end") do not overflow the conversion.
inline int64_t toIndex(double v) {
  constexpr double kLimit = 4611686018427387904.0; // 2^62
  return static_cast<int64_t>(std::clamp(v, -kLimit, kLimit));
}

// The longest axis a computed shape may have (a pad, a resize, a tiling):
// past it, a model is malformed, and refused before any arithmetic on it
// can overflow or any table of it is allocated.
constexpr int64_t kMaxExtent = int64_t(1) << 31;
// The most elements a constant evaluated at import (ConstantOfShape,
// Range, Expand of constants, ...) may have: 2^25 (256 MiB of doubles).
constexpr int64_t kMaxStaticElements = int64_t(1) << 25;
// The most entries a constant matrix that an op is computed through may
// have (a DFT's, a Resize's interpolation, an AffineGrid's base grid):
// 2^24 (64 MiB in f32).
constexpr int64_t kMaxMatrixEntries = int64_t(1) << 24;

inline int64_t product(llvm::ArrayRef<int64_t> dims) {
  int64_t n = 1;
  for (int64_t d : dims)
    n *= d;
  return n;
}

// |v| as the shortest decimal that reads back as |v| in f32, read as a
// double. ONNX keeps float attributes (a LeakyRelu's alpha, a norm's
// epsilon) in f32, so a float64 model's 0.1 arrives as 0.100000001490116;
// its decimal is what the model said. An f32 computation rounds it back to
// the same float.
inline double decimalOf(float v) {
  char text[32];
  auto [end, error] = std::to_chars(text, text + sizeof(text), v);
  double out = v;
  if (error == std::errc())
    std::from_chars(text, end, out);
  return out;
}

inline std::string shapeText(llvm::ArrayRef<int64_t> dims) {
  std::string out = "[";
  for (size_t i = 0; i < dims.size(); ++i)
    out += (i ? ", " : "") + std::to_string(dims[i]);
  return out + "]";
}

class Importer {
public:
  Importer(const onnx::Model &model, const std::string &path,
           const OnnxImportOptions &options, mlir::MLIRContext *context,
           llvm::StringRef command, llvm::raw_ostream &errs)
      : model_(model), path_(path), options_(options), g_(context, "main", options.training.seed),
        b_(g_.builder()), command_(command), errs_(errs) {}

  bool run(OnnxImport &out);
  // The op types readers() holds, sorted case-insensitively and
  // comma-separated (for --help and errors).
  static const std::string &supportedOps();

private:
  // Reads the current node, whose op type is |op|.
  using OpReader = bool (*)(Importer &, const std::string &op);
  // Every op type kiln import reads and what reads it: the node dispatch
  // and the list supportedOps() prints.
  static const std::map<std::string, OpReader> &readers();
  // An op evaluated at import only (Range of constants): fails naming it.
  bool staticOnly(const std::string &op);
  // Cast and CastLike of a value (of constants: foldStatic).
  bool cast(const std::string &op);

  // Prints |what| about |node| and fails.
  bool fail(const std::string &what) {
    printError(errs_, command_, path_ + ": " + where_ + what);
    return false;
  }

  mlir::Location loc(const std::string &suffix = "") {
    return g_.loc(nodeName_ + suffix);
  }
  static llvm::ArrayRef<int64_t> shape(mlir::Value v) {
    return GraphBuilder::shapeOf(v);
  }
  static mlir::Type element(mlir::Value v) {
    return llvm::cast<mlir::RankedTensorType>(v.getType()).getElementType();
  }
  static mlir::RankedTensorType type(llvm::ArrayRef<int64_t> dims, mlir::Type e) {
    return mlir::RankedTensorType::get(dims, e);
  }
  mlir::DenseI64ArrayAttr arr(llvm::ArrayRef<int64_t> v) {
    return b_.getDenseI64ArrayAttr(v);
  }

  bool elementType(int32_t onnxType, mlir::Type &out, const std::string &what);
  bool readInputs();
  bool readInitializers();
  bool node(const onnx::Node &n);
  bool finish(OnnxImport &out);
  static runtime::SafeTensor weightTensor(const std::string &name,
                                          const onnx::Tensor &t);
  void warnFoldedParameters();
  // The parameters the torch.export exporter's graph signature lists (their
  // state-dict keys) in its order; none without a signature.
  std::vector<std::string> signatureParameters() const;

  // The kiln value of input |i| of the current node.
  bool value(size_t i, mlir::Value &out);
  // Input |i| as value() gives it, which must be floating-point ("its
  // input is not floating-point" otherwise).
  bool floatValue(size_t i, mlir::Value &out);
  // The kiln value of the tensor |name| as the current node reads it.
  bool named(const std::string &name, mlir::Value &out);
  // Whether the initializer |name| has all elements equal and several
  // readers: a parameter per reader (value()).
  bool sharedUniform(const std::string &name);
  // The name of the current node's copy of the shared initializer |name|.
  std::string copyName(const std::string &name);
  // A parameter of |t|'s shape named |as|, initialized as |name| would be.
  mlir::Value makeParameter(const std::string &name, const onnx::Tensor &t,
                            const std::string &as);
  // PyTorch's default uniform bound's fan-in for the initializer |name| of
  // |dims|: what the first Gemm, MatMul or Conv reading it says, else
  // the product of the dimensions after the first.
  int64_t fanInOf(const std::string &name, llvm::ArrayRef<int64_t> dims);
  // Whether a constant of |dims| is small enough to evaluate at import
  // (kMaxStaticElements, no dimension negative, no overflow); else fails
  // with |what| ("makes a constant of shape [...]") and the bound.
  bool staticFits(llvm::ArrayRef<int64_t> dims, const std::string &what);
  bool hasInput(size_t i) const {
    return i < node_->inputs.size() && !node_->inputs[i].empty();
  }
  // Input |i| as a static tensor (an initializer or Constant).
  const Static *staticInput(size_t i);
  // Input |i| as a constant of one element, an integer (|what| names it
  // in the error): TopK's K, OneHot's depth.
  bool staticIndex(size_t i, const std::string &what, int64_t &out);
  // Input |i| as a static tensor, also when it is a floating-point
  // initializer of rank 1 or more (which value() would make a parameter):
  // a Resize's scales, the ones and zeros of a group norm. Reading it so
  // makes no parameter.
  const Static *constInput(size_t i);
  // The initializer |t| (named |name|) as a static tensor, made once.
  const Static &initializerStatic(const std::string &name,
                                  const onnx::Tensor &t);
  // The initializer |name|, if not yet made a parameter, starts as |kind|
  // (ones, zeros, or constant |value|) when trained from scratch. run()
  // sets the norms' and PReLU's before the first node; the group norm's
  // affine is known only at its InstanceNormalization.
  void initializeAs(const std::string &name, kiln::InitKind kind, double value = 0.0);
  void setOutput(size_t i, mlir::Value v) { values_[node_->outputs[i]] = v; }
  void setStatic(size_t i, Static s) { statics_[node_->outputs[i]] = std::move(s); }

  int64_t intAttr(const char *name, int64_t fallback) {
    const onnx::Attribute *a = node_->attribute(name);
    return a ? a->i : fallback;
  }
  // A FLOAT attribute as decimalOf reads it.
  double floatAttr(const char *name, double fallback) {
    const onnx::Attribute *a = node_->attribute(name);
    return a ? decimalOf(a->f) : fallback;
  }
  std::optional<std::vector<int64_t>> intsAttr(const char *name) {
    const onnx::Attribute *a = node_->attribute(name);
    if (!a)
      return std::nullopt;
    return a->ints;
  }
  std::string stringAttr(const char *name, const std::string &fallback) {
    const onnx::Attribute *a = node_->attribute(name);
    return a ? a->s : fallback;
  }
  // |axis| of a rank-|rank| tensor (negative counts from the end).
  bool normalizeAxis(int64_t &axis, int64_t rank, const char *what);
  // The node's attribute "axis" (|fallback| when absent) as an axis of |x|,
  // which must have one (a scalar has none; an ArgMax of a Size's scalar
  // read past its shape).
  bool axisOf(mlir::Value x, int64_t fallback, int64_t &axis) {
    if (shape(x).empty())
      return fail("its input is a scalar: expected a tensor with an axis");
    axis = intAttr("axis", fallback);
    return normalizeAxis(axis, shape(x).size(), "axis");
  }
  // The axes of a reduction, squeeze or unsqueeze: attribute "axes" or,
  // from |inputOpset| on, input 1.
  bool axes(int64_t inputOpset, std::optional<std::vector<int64_t>> &out);

  mlir::Value broadcastTo(mlir::Value v, llvm::ArrayRef<int64_t> dims);
  bool broadcastShapes(llvm::ArrayRef<int64_t> a, llvm::ArrayRef<int64_t> b,
                       llvm::SmallVectorImpl<int64_t> &out);
  mlir::Value splat(double v, mlir::Type element, llvm::ArrayRef<int64_t> dims);
  // |a| plus, minus, times or over |b| (of |a|'s type: operands of one
  // shape), at the node's location plus |suffix|.
  mlir::Value add(mlir::Value a, mlir::Value b, const std::string &suffix) {
    return b_.create<kiln::AddOp>(loc(suffix), a.getType(), a, b);
  }
  mlir::Value sub(mlir::Value a, mlir::Value b, const std::string &suffix) {
    return b_.create<kiln::SubOp>(loc(suffix), a.getType(), a, b);
  }
  mlir::Value mul(mlir::Value a, mlir::Value b, const std::string &suffix) {
    return b_.create<kiln::MulOp>(loc(suffix), a.getType(), a, b);
  }
  mlir::Value div(mlir::Value a, mlir::Value b, const std::string &suffix) {
    return b_.create<kiln::DivOp>(loc(suffix), a.getType(), a, b);
  }
  // |s| as a kiln constant: a float one in |floatType| (unless given: f64
  // for DOUBLE data, else f32).
  mlir::Value constant(const Static &s, const std::string &name,
                       mlir::Type floatType = {});
  // |x| where x > 0, else |otherwise| (of x's type), the select at |at|: the
  // piecewise activations (LeakyRelu, Elu, Selu, PRelu).
  mlir::Value positiveElse(mlir::Value x, mlir::Value otherwise, mlir::Location at);
  // Tan, Asin, Acos, Sinh, Cosh, Asinh, Acosh or Atanh of |x| (a float
  // tensor).
  mlir::Value hyperbolic(const std::string &op, mlir::Value x);

  // Op groups.
  bool unary(const std::string &op);
  bool binary(const std::string &op);
  // |values|, the node's inputs 0.., of one element type: a float constant
  // (made f32) beside a value of another float type, as a DOUBLE one
  // after a Cast, is made in that type; otherwise different types fail.
  bool oneElementType(llvm::MutableArrayRef<mlir::Value> values);
  // Inputs 0 and 1 of one element type (oneElementType), broadcast
  // together.
  bool operandPair(mlir::Value &a, mlir::Value &c);
  bool mod();
  bool gemm();
  bool matmul();
  bool reshapeLike(const std::string &op);
  bool transpose();
  bool concat();
  bool softmax(bool log);
  bool reduce(const std::string &op);
  bool lpNormalization();
  bool layerNorm();
  bool batchNorm();
  // Input |i| as a constant, also when it is a floating-point initializer
  // (which value() makes a parameter): running statistics.
  bool constantValue(size_t i, mlir::Value &out);
  // Input |i|, a floating-point initializer of [channels], as model state
  // starting at |initial| (its values go to the weights file).
  bool runningStatistic(size_t i, int64_t channels, mlir::Type e,
                        double initial, mlir::Value &out);
  bool dropout();
  // RandomUniform(Like), RandomNormal(Like) and Bernoulli.
  bool random(const std::string &op);
  bool multinomial();
  // kiln.random_uniform of |dims| and |e| at the step counter, with the
  // import's next seed.
  mlir::Value randomUniform(llvm::ArrayRef<int64_t> dims, mlir::Type e,
                            const std::string &suffix);
  bool constantNode();
  bool foldStatic(const std::string &op, bool &folded);
  bool eyeLike(bool &folded);

  // Convolutions and pools (OnnxImportConv.cpp).
  bool conv();
  // Conv and ConvTranspose: X, W and the attributes both read, checked.
  bool windowPads(llvm::ArrayRef<int64_t> in, llvm::ArrayRef<int64_t> extent,
                  llvm::ArrayRef<int64_t> strides, std::vector<int64_t> &pads);
  bool convInputs(bool transposed, mlir::Value &x, mlir::Value &w,
                  ConvAttributes &a);
  // Adds input 2, a [C] bias, along dimension 1 of |y| (if present).
  bool addChannelBias(mlir::Value &y);
  bool convTranspose();
  // MaxPool, AveragePool and (|lp|) LpPool.
  bool pool(bool max, bool lp = false);
  // MaxPool's Indices (INT64, |resultDims|) of a 2-D pool of |x| [N, C, H,
  // W] with |kernel|, |strides|, top and left pads |leading| and output
  // [|out|]: the flat position in X of each window's first largest
  // element, row-major (or column-major) within its plane.
  mlir::Value maxPoolIndices(mlir::Value x, llvm::ArrayRef<int64_t> kernel,
                             llvm::ArrayRef<int64_t> strides,
                             llvm::ArrayRef<int64_t> leading,
                             llvm::ArrayRef<int64_t> out, bool columnMajor,
                             llvm::ArrayRef<int64_t> resultDims);
  // GlobalAveragePool, GlobalMaxPool and (|lp|) GlobalLpPool.
  bool globalPool(bool max, bool lp = false);
  // LpPool's and GlobalLpPool's p (at least 1), for a floating-point |x|.
  bool lpPower(mlir::Value x, double &power);
  // |x|^power (|x| for power 1).
  mlir::Value absPower(mlir::Value x, double power);
  bool maxUnpool();
  bool col2im();
  // The order of a rank-|rank| tensor's dimensions with |axis| moved last,
  // the others in order (back: mlir::invertPermutationVector).
  static llvm::SmallVector<int64_t> axisLastOrder(int64_t rank, int64_t axis);
  // |x| with its dimensions in the order |perm|.
  mlir::Value permute(mlir::Value x, llvm::ArrayRef<int64_t> perm,
                      const std::string &suffix);
  // |v| [A, B, W] as [A, B, 1, W]: a 1-D window op's operand for the 2-D op.
  mlir::Value withUnitHeight(mlir::Value v, const std::string &suffix);
  // kiln.conv2d of |x| [N, C, H, W] and |w| with |a|'s 2-D attributes.
  mlir::Value conv2d(mlir::Value x, mlir::Value w, const ConvAttributes &a,
                     const std::string &suffix);
  // |x| [N, C, D, H, W] padded along D by |low| and |high| elements of
  // |fill|, as [N, D', C, H, W]: the depth positions' planes by the batch.
  mlir::Value depthFirst(mlir::Value x, int64_t low, int64_t high, double fill);
  // W[:, :, kd] of a 3-D kernel |w|, as a 2-D kernel [O, I, kH, kW].
  mlir::Value kernelSlice(mlir::Value w, int64_t kd, const std::string &at);
  // A 3-D convolution and transposed convolution of result shape |dims|
  // from 2-D ones over the depth positions' planes.
  mlir::Value convOverDepth(mlir::Value x, mlir::Value w,
                            const ConvAttributes &a,
                            llvm::ArrayRef<int64_t> dims);
  mlir::Value convTransposeOverDepth(mlir::Value x, mlir::Value w,
                                     const ConvAttributes &a,
                                     llvm::ArrayRef<int64_t> dims);
  // kiln.max_pool2d or kiln.avg_pool2d (kiln's [top, bottom, left, right]
  // |padding|) of result shape |dims|.
  mlir::Value pool2d(bool max, mlir::Value x, llvm::ArrayRef<int64_t> kernel,
                     llvm::ArrayRef<int64_t> strides,
                     llvm::ArrayRef<int64_t> padding,
                     llvm::ArrayRef<int64_t> dims, const std::string &suffix);

  // Indexed ops (OnnxImportIndexed.cpp).
  bool gather();
  bool gatherElements();
  // |indices| with the negative ones counted from the end of an axis of
  // |extent| (fails unless they are INT64 or INT32).
  bool nonNegative(mlir::Value indices, int64_t extent,
                   const std::string &suffix, mlir::Value &out);
  // GatherElements' and ScatterElements' indices checked against |data|
  // (the same rank, no larger off the node's axis), that axis, and the
  // indices with negative ones counted from its end.
  bool elementIndices(mlir::Value data, mlir::Value indices, int64_t &axis,
                      mlir::Value &index);
  // The flat positions in a row-major tensor of shape |dataShape| of
  // [i.. with index[i..] along |axis|], of index's shape.
  mlir::Value flatPositions(mlir::Value index,
                            llvm::ArrayRef<int64_t> dataShape, int64_t axis);
  // data[i.. with index[i..] along |axis|] (indices in [0, extent)), of
  // index's shape: GatherElements' gather, differentiable in |data|.
  mlir::Value gatherElementsAt(mlir::Value data, mlir::Value index,
                               int64_t axis);
  mlir::Value scatterRows(mlir::Value table, mlir::Value rows,
                          mlir::Value updates,
                          std::optional<kiln::ReduceKind> combine);
  bool scatterReduction(std::optional<kiln::ReduceKind> &combine);
  bool scatterElements();
  // The table rows ScatterND's and GatherND's |indices| name in data of
  // shape |dataShape| with |batch| batch dimensions.
  bool ndRows(llvm::ArrayRef<int64_t> dataShape, mlir::Value indices,
              int64_t batch, mlir::Value &rows);
  bool scatterNd();
  bool gatherNd();
  bool oneHot();
  bool topK();
  // TopK's indices (INT64, |x|'s shape with K along |axis|) from each
  // element's rank: how many elements come before it (a larger key, or an
  // equal one at a lower index; NaN keys first, in index order), counted
  // over all pairs of the axis; position p takes the element of rank p.
  mlir::Value topKByRank(mlir::Value key, int64_t axis, int64_t k);
  bool hardmax();
  bool classLoss(bool softmax);
  bool argExtreme(bool max);

  // Activations with parameters or several inputs (OnnxImportOps.cpp).
  bool clip();
  bool prelu();
  // Sum and Mean of any number of inputs.
  bool variadic(const std::string &op);

  // Data movement and selection (OnnxImportShapes.cpp).
  bool slice();
  bool split();
  bool splitToSequence();
  // |x| cut along |axis| into parts of |sizes|, which must cover it.
  bool splitParts(mlir::Value x, int64_t axis,
                  const std::vector<int64_t> &sizes,
                  std::vector<mlir::Value> &parts);
  bool sequenceAt();
  bool pad();
  bool expand();
  bool where();
  bool compare(const std::string &op);
  bool trilu();
  // Not, And, Or, Xor of BOOL tensors.
  bool logical(const std::string &op);
  bool tile();
  // DepthToSpace and SpaceToDepth: reshape, transpose, reshape.
  bool depthSpace(bool toSpace);
  // CumSum: a product with a constant triangular matrix along the axis.
  bool cumSum();
  bool cumProd();
  bool reverseSequence();
  bool centerCropPad();
  // ConstantOfShape, Range, comparisons, Where, Slice, Transpose and Expand
  // when every input is static, evaluated here.
  bool foldStaticData(const std::string &op, bool &folded);
  // |x|[start:limit:stride] along |axis|.
  mlir::Value sliceAxis(mlir::Value x, int64_t axis, int64_t start, int64_t limit,
                        int64_t stride, const std::string &suffix);
  // |table| gathered along |axis| at |indices| (any shape, integer): the
  // indices' dimensions in place of |axis|. A transpose, a kiln.gather and
  // a transpose back (just the gather along axis 0).
  mlir::Value gatherAlong(mlir::Value table, int64_t axis, mlir::Value indices,
                          const std::string &suffix);
  // Rows |rows| of |x| along |axis| (gatherAlong at constant indices).
  mlir::Value gatherAxis(mlir::Value x, int64_t axis, llvm::ArrayRef<int64_t> rows,
                         const std::string &suffix);
  // |x| with |axis| reversed.
  mlir::Value reverseAxis(mlir::Value x, int64_t axis, const std::string &suffix);

  // Normalization and resizing (OnnxImportImage.cpp).
  bool instanceNorm();
  bool lrn();
  bool meanVarianceNormalization();
  // |y| times |scale| plus |bias| (each [y's dimension 1], broadcast along
  // it), the add at |at|: the norms' per-channel (or per-group) affine.
  mlir::Value affineAlongDim1(mlir::Value y, mlir::Value scale,
                              mlir::Value bias, mlir::Location at);
  // GroupNormalization (opset 18: scale and bias per group; 21: per
  // channel) and RMSNormalization (opset 23).
  bool groupNorm();
  bool rmsNorm();
  // Resize, and Upsample (opsets 7 to 9: scales an attribute, then input
  // 1; nearest or linear, asymmetric coordinates, nearest rounding down).
  bool resize(bool upsample);
  bool affineGrid();
  bool gridSample();

  // Einsum as transposes, sums and dot_generals (OnnxImportEinsum.cpp).
  bool einsum();
  bool diagonal(size_t i, mlir::Value &value, std::vector<int> &labels);

  // QuantizeLinear and DequantizeLinear: fake quantization with PyTorch's
  // straight-through gradient, or constants (OnnxImportQuantize.cpp).
  struct Quantization {
    std::vector<double> scale, zeroPoint; // one, or one per index along axis
    int64_t axis = -1;                    // -1: one scale for the tensor
    int64_t inner = 1;                    // elements after axis's index
    int32_t dataType = 0;                 // the integers' ONNX type
    double low = 0, high = 0;             // its range
    // The index into scale and zeroPoint of row-major element |element|.
    size_t channel(size_t element) const {
      return axis < 0 ? 0 : (element / inner) % scale.size();
    }
    // |integers| (row-major) dequantized, each rounded to f32.
    std::vector<float> dequantized(const std::vector<double> &integers) const {
      std::vector<float> out;
      out.reserve(integers.size());
      for (size_t e = 0; e < integers.size(); ++e) {
        size_t k = channel(e);
        out.push_back(
            static_cast<float>((integers[e] - zeroPoint[k]) * scale[k]));
      }
      return out;
    }
  };
  // Inputs 1 and 2 (scale, zero point) of the current node for a tensor of
  // |dims| whose integers are of |dataType| (QuantizeLinear: unless the
  // zero point gives its type).
  bool quantization(llvm::ArrayRef<int64_t> dims, int32_t dataType,
                    bool dequantize, Quantization &out);
  // |values| (q's scales or zero points) as a tensor like |like|.
  mlir::Value quantizationTensor(const Quantization &q,
                                 const std::vector<double> &values,
                                 mlir::Value like, const std::string &what);
  // x's fake quantization by |q|: the integers as a float tensor, with
  // the straight-through gradient; and such integers dequantized.
  mlir::Value quantize(mlir::Value x, const Quantization &q);
  // The same with |scale| and |zero| tensors of x's shape (computed ones:
  // DynamicQuantizeLinear's) and the range [|low|, |high|].
  mlir::Value quantizeBy(mlir::Value x, mlir::Value scale, mlir::Value zero,
                         double low, double high);
  mlir::Value dequantize(mlir::Value x, const Quantization &q);
  bool quantizeLinear();
  bool dequantizeLinear();
  // QLinearMatMul and QLinearConv: by their definition, the float op of
  // the dequantized inputs, quantized, as the nodes DequantizeLinear (each
  // input; an INT32 bias by x_scale x w_scale), MatMul or Conv and
  // QuantizeLinear (importParts), so the weights train as a DequantizeLinear
  // of an initializer does.
  bool qlinear(const std::string &op);
  // QLinearConv's B and QGemm's C: the INT32 input |bias|, zero point 0, in
  // units of |factor| x the per-tensor scale input |first| (|firstName|, of
  // the tensor |quantized|) x the scale input |second|, dequantized as a
  // part (along |axis|) appended to |parts|, its tensor to |operands|.
  bool int32Bias(size_t bias, size_t first, const char *firstName,
                 const char *quantized, size_t second, double factor,
                 const std::string &what, int64_t axis,
                 std::vector<onnx::Node> &parts,
                 std::vector<std::string> &operands);
  // The rank of input |i| (a value or a constant; 0 when it is neither),
  // to place a per-row or per-column scale or zero point.
  int64_t inputRank(size_t i);
  // ONNX Runtime's ops of domain com.microsoft (kMicrosoftOps in
  // OnnxImport.cpp: QGemm, QLinearAdd, QLinearAveragePool, ...): the same,
  // the float op of the dequantized inputs, quantized by the output's scale
  // and zero point (QGemm without y_scale: float).
  bool qlinearMicrosoft(const std::string &op);
  // MatMulInteger and ConvInteger: the float op of the inputs less their
  // zero points (constant, or DynamicQuantizeLinear's), its INT32 result
  // kept as a float tensor of integers that a Cast to a float type reads.
  // An integer initializer stays a constant (the op has no scale for it),
  // but MatMulInteger's B where trainedIntegers finds its scale.
  bool integerOp(const std::string &op);
  // Input |i| of an integer op less the zero point input |zero| (absent:
  // 0), a scalar or one per index along |axis|.
  bool centered(size_t i, size_t zero, int64_t axis, mlir::Value &out);
  // ONNX Runtime's dynamic quantization scales a MatMulInteger's product
  // after it: MatMulInteger -> Cast -> Mul(., Mul(A's scale, B's scale)).
  // B's scale (a float initializer) when the current node's output is
  // read so, else null.
  const Static *scaleAppliedAfter();
  // Input |i|, an integer initializer (B of a MatMulInteger whose scale
  // scaleAppliedAfter finds), as a float parameter under
  // --quantized-weights=train (starting from its dequantized values, named
  // without ONNX Runtime's `_quantized`), fake-quantized by that scale and
  // the zero point input |zero| (per column: along |axis|), less the zero
  // point: |out|. Leaves |out| null where that does not apply; fails only
  // on an error.
  bool trainedIntegers(size_t i, size_t zero, int64_t axis, mlir::Value &out);
  // DynamicQuantizeLinear: x's UINT8 fake quantization by the scale and
  // zero point of its range (with 0), computed in the step; the scale and
  // zero point are constants to the gradient.
  bool dynamicQuantizeLinear();
  // Reads the current node with |read|. Ops that only move or select
  // elements (Reshape, MaxPool, Concat, ...) read quantized integers as they
  // are (a QOperator model keeps UINT8 tensors through its reshapes and max
  // pools), and their results are integers of the same type.
  bool readMovingQuantized(const std::string &op, OpReader read);
  // Imports |parts| (ops that make up the current node, reading its inputs
  // and writing its outputs) as if the graph held them; their errors name
  // the node too.
  bool importParts(const std::vector<onnx::Node> &parts);
  // A tensor name for the current node's part |what|.
  std::string partName(const std::string &what) const {
    return "kiln:" + nodeName_ + ":" + what;
  }
  // A DequantizeLinear of the integer initializer |name| (|values|
  // dequantized) under --quantized-weights=train: a float parameter
  // starting from |values|, fake-quantized by |q| (an INT32 bias: the
  // parameter itself).
  bool trainQuantized(const std::string &name, const Quantization &q,
                      std::vector<float> values);
  // The float parameter trained in place of the quantized initializer
  // |name| starting from |values| (made once; null, failing, when an
  // earlier reader dequantized it otherwise).
  mlir::Value quantizedParameter(const std::string &name,
                                 std::vector<float> values);

  // DFT and STFT as products with constant matrices
  // (OnnxImportSpectral.cpp).
  bool dft();
  bool stft();
  // HannWindow, HammingWindow, BlackmanWindow: constants.
  bool window(const std::string &op);
  bool melWeightMatrix();
  // |x| [..., n at |axis|, ..., parts] transformed along |axis| as |t|
  // says, each input element weighted by |window| (if any): a dot_general
  // with the transform's matrix, the axis moved next to the parts and back.
  mlir::Value spectralProduct(mlir::Value x, int64_t axis,
                              const SpectralTransform &t,
                              const std::vector<double> *window,
                              const std::string &suffix);
  // Fails unless |t|'s matrix is small enough to write.
  bool spectralSize(const SpectralTransform &t);

  // Attention (opsets 23 to 25; OnnxImportAttention.cpp): kiln.attention
  // where it is plain, else decomposed.
  bool attention();
  bool rotaryEmbedding();

  // Det by an LU factorization unrolled over the columns
  // (OnnxImportLinalg.cpp).
  bool det();

  // LSTM, GRU and RNN unrolled over the sequence (OnnxImportRecurrent.cpp).
  bool recurrent(const std::string &op);

  // Control flow (OnnxImportControl.cpp): If's branch chosen at import or
  // both selected, Loop and Scan unrolled.
  // What a tensor name holds: a static tensor, a kiln value or a sequence.
  struct Held {
    std::optional<Static> s;
    mlir::Value v;
    std::optional<std::vector<mlir::Value>> seq;
  };
  bool hold(const std::string &name, Held &out);
  void put(const std::string &name, const Held &h);
  // |h| as a kiln value (a static tensor becomes a constant).
  bool materialize(const Held &h, const std::string &name, mlir::Value &out);
  // Every name |g| defines (its inputs, initializers and node outputs,
  // nested subgraphs' too) forgotten, before a body is imported again.
  void forget(const onnx::Graph &g);
  // Records each node's outputs and inputs (producers_, consumers_),
  // subgraphs' included.
  void index(const onnx::Graph &g);
  // The subgraph attribute |name| of the current node.
  const onnx::Graph *graphAttr(const char *name);
  // Imports |nodes| (a subgraph's, or the parts of the current node) with
  // |scope| before the current scope in their errors and |prefix| before
  // their names, then makes the current node current again.
  bool nodesWithin(const std::vector<onnx::Node> &nodes,
                   const std::string &scope, const std::string &prefix);
  // Imports the nodes of |g| with its inputs bound to |inputs| and returns
  // its outputs; |scope| says where in error messages ("in the body of
  // node 'loop' (Loop), iteration 3"), |prefix| names its ops.
  bool subgraph(const onnx::Graph &g, const std::string &scope,
                const std::string &prefix, const std::vector<Held> &inputs,
                std::vector<Held> &outputs);
  bool ifNode();
  bool loop();
  bool scan();
  // SequenceEmpty, SequenceConstruct, SequenceInsert, SequenceErase,
  // SequenceLength and ConcatFromSequence on sequences known at import.
  bool sequenceOp(const std::string &op);
  bool sequenceInput(size_t i, std::vector<mlir::Value> &out);
  bool sequencePosition(size_t i, int64_t n, bool end, int64_t fallback,
                        int64_t &out);
  // Appends each scan output of a body's |outputs| (from |first| on) to
  // |scanned|, which they must match in shape; |step| names the iteration.
  bool collectScans(const onnx::Graph &body, const std::vector<Held> &outputs,
                    size_t first, const std::string &step,
                    std::vector<std::vector<mlir::Value>> &scanned);
  // |parts| (one shape) stacked along a new axis |axis|.
  mlir::Value stack(llvm::ArrayRef<mlir::Value> parts, int64_t axis,
                    const std::string &suffix);

  const onnx::Model &model_;
  const std::string &path_;
  const OnnxImportOptions &options_;
  GraphBuilder g_;
  mlir::OpBuilder &b_;
  llvm::StringRef command_;
  llvm::raw_ostream &errs_;

  std::map<std::string, mlir::Value> values_;
  std::map<std::string, Static> statics_;
  // Quantized integers (float tensors of integers: QuantizeLinear's,
  // the QLinear ops', DynamicQuantizeLinear's, the integer ops' and what
  // ops that move elements make of them) and their ONNX integer types.
  std::map<std::string, int32_t> quantized_;
  // While an op that moves elements reads quantized integers
  // (readMovingQuantized).
  bool readingQuantized_ = false;
  // The float parameters trained in place of quantized initializers
  // (--quantized-weights=train), by initializer.
  struct QuantizedParameter {
    std::string name;
    std::vector<int64_t> dims;
    std::vector<float> values; // dequantized: where training starts
    mlir::Value value;
  };
  std::map<std::string, QuantizedParameter> quantizedParameters_;
  // Whether a quantized initializer was kept a constant
  // (--quantized-weights=fixed).
  bool fixedQuantizedWeights_ = false;
  // Sequences (SplitToSequence's result), element by element.
  std::map<std::string, std::vector<mlir::Value>> sequences_;
  // Floating-point initializers read as static tensors (constInput).
  std::map<std::string, Static> initializerStatics_;
  // The node that gives each output, for patterns that look one node back.
  std::map<std::string, const onnx::Node *> producers_;
  std::set<std::string> initializerNames_;
  std::map<std::string, const onnx::Tensor *> parameterTensors_;
  // The initializers that became model state (running statistics).
  std::set<std::string> modelStateNames_;
  // The torch.export exporter's graph signature (graph metadata), which
  // lists the model's parameters; empty for other exporters.
  std::string signature_;
  // Registered buffers (the torch.export exporter's BUFFER kind): running
  // statistics where a batch norm reads them, constants elsewhere.
  std::set<std::string> buffers_;
  // Each parameter's fan-in, from the first Gemm, MatMul or Conv reading it.
  std::map<std::string, int64_t> fanIn_;
  // Parameters whose PyTorch initializer is a constant rather than the
  // fan-in's uniform: a norm's scale (ones) and shift (zeros), a PReLU's
  // slope (0.25).
  std::map<std::string, std::pair<kiln::InitKind, double>> initOverrides_;
  // Every node, subgraphs' included (index()).
  std::vector<const onnx::Node *> allNodes_;
  // The nodes that read each tensor.
  std::map<std::string, std::vector<const onnx::Node *>> consumers_;
  // Initializers of equal elements that several nodes read (merged by the
  // exporter): the first reader's node, and a parameter for each other
  // reader with the tensor it starts from.
  std::map<std::string, const onnx::Node *> firstReader_;
  std::map<std::pair<std::string, const onnx::Node *>, mlir::Value> copies_;
  std::vector<std::pair<std::string, const onnx::Tensor *>> copyTensors_;
  std::set<std::string> usedNames_;
  // Whether each initializer asked about has all elements equal.
  std::map<std::string, bool> uniform_;
  const onnx::Node *node_ = nullptr;
  // The step counter, made for the first dropout; each dropout's seed.
  mlir::Value step_;
  int64_t nextDropoutSeed_ = 0;
  std::string nodeName_, where_;
  // Inside a subgraph: where it is, for error messages, and the prefix of
  // its ops' names.
  std::string scope_, prefix_;
  int64_t opset_ = 0;
};

} // namespace kiln::cli::onnx_import

#endif // KILN_TOOLS_KILN_LIB_ONNXIMPORTER_H
