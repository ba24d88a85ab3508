//===- GraphOps.cpp - graph file op codes and attribute tables ------------===//
//
// KILN_GRAPH_OPS is the format's op table: op code, op class, attribute
// family. A family is a struct that reads its FlatBuffers table into an op's
// attributes and writes it back; ops of one family share attribute names
// (all three convolutions have strides, padding, dilation and groups), so a
// family is a template over the op class. Attribute names come from the ODS
// accessors (OpT::getStridesAttrName), never from strings.
//
// A new kiln op needs one line here and an OpCode at the end of the enum in
// graph.fbs; the unit tests fail until every registered kiln op except
// kiln.fusion and kiln.yield has one.
//
//===----------------------------------------------------------------------===//

#include "serialize/GraphOps.h"

#include "ir/KilnOps.h"
#include "serialize/GraphEnums.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/Support/Endian.h"

#include <type_traits>

using namespace mlir;
using flatbuffers::FlatBufferBuilder;
using flatbuffers::Offset;

// X(op code, op class, attribute family)
#define KILN_GRAPH_OPS(X)                                                      \
  X(Constant, ConstantOp, Constant)                                            \
  X(Iota, IotaOp, Axis)                                                        \
  X(Neg, NegOp, None)                                                          \
  X(Abs, AbsOp, None)                                                          \
  X(Exp, ExpOp, None)                                                          \
  X(Log, LogOp, None)                                                          \
  X(Log1p, Log1pOp, None)                                                      \
  X(Sqrt, SqrtOp, None)                                                        \
  X(Rsqrt, RsqrtOp, None)                                                      \
  X(Tanh, TanhOp, None)                                                        \
  X(Sigmoid, SigmoidOp, None)                                                  \
  X(Relu, ReluOp, None)                                                        \
  X(Erf, ErfOp, None)                                                          \
  X(Sin, SinOp, None)                                                          \
  X(Cos, CosOp, None)                                                          \
  X(Reciprocal, ReciprocalOp, None)                                            \
  X(StopGradient, StopGradientOp, None)                                        \
  X(Gelu, GeluOp, Gelu)                                                        \
  X(Convert, ConvertOp, None)                                                  \
  X(Add, AddOp, None)                                                          \
  X(Sub, SubOp, None)                                                          \
  X(Mul, MulOp, None)                                                          \
  X(Div, DivOp, None)                                                          \
  X(Max, MaxOp, None)                                                          \
  X(Min, MinOp, None)                                                          \
  X(Pow, PowOp, None)                                                          \
  X(Compare, CompareOp, Compare)                                               \
  X(Select, SelectOp, None)                                                    \
  X(BroadcastInDim, BroadcastInDimOp, Broadcast)                               \
  X(Reshape, ReshapeOp, None)                                                  \
  X(Transpose, TransposeOp, Transpose)                                         \
  X(Slice, SliceOp, Slice)                                                     \
  X(Concatenate, ConcatenateOp, Axis)                                          \
  X(Pad, PadOp, Pad)                                                           \
  X(Reduce, ReduceOp, Reduce)                                                  \
  X(Argmax, ArgmaxOp, Axis)                                                    \
  X(DotGeneral, DotGeneralOp, DotGeneral)                                      \
  X(Conv2D, Conv2DOp, Conv2D)                                                  \
  X(Conv2DInputGrad, Conv2DInputGradOp, Conv2D)                                \
  X(Conv2DFilterGrad, Conv2DFilterGradOp, Conv2D)                              \
  X(MaxPool2D, MaxPool2DOp, Pool)                                              \
  X(AvgPool2D, AvgPool2DOp, Pool)                                              \
  X(MaxPool2DGrad, MaxPool2DGradOp, Pool)                                      \
  X(AvgPool2DGrad, AvgPool2DGradOp, Pool)                                      \
  X(Softmax, SoftmaxOp, Axis)                                                  \
  X(LogSoftmax, LogSoftmaxOp, Axis)                                            \
  X(LayerNorm, LayerNormOp, LayerNorm)                                         \
  X(Gather, GatherOp, None)                                                    \
  X(ScatterAdd, ScatterAddOp, Scatter)                                         \
  X(Dropout, DropoutOp, Dropout)                                               \
  X(SoftmaxCrossEntropy, SoftmaxCrossEntropyOp, None)                          \
  X(AllReduce, AllReduceOp, Collective)                                        \
  X(ReduceScatter, ReduceScatterOp, Collective)                                \
  X(AllGather, AllGatherOp, Collective)                                        \
  X(CollectiveBroadcast, CollectiveBroadcastOp, Collective)                    \
  X(Send, SendOp, Peer)                                                        \
  X(Recv, RecvOp, Peer)                                                        \
  X(Attention, AttentionOp, Attention)                                         \
  X(AttentionGrad, AttentionGradOp, Attention)                                 \
  X(GeluGrad, GeluGradOp, Gelu)                                                \
  X(AttentionQkv, AttentionQkvOp, Attention)                                   \
  X(AttentionQkvGrad, AttentionQkvGradOp, Attention)                           \
  X(ModeSelect, ModeSelectOp, None)                                            \
  X(Floor, FloorOp, None)                                                      \
  X(Ceil, CeilOp, None)                                                        \
  X(Round, RoundOp, None)                                                      \
  X(Atan, AtanOp, None)                                                        \
  X(Rem, RemOp, None)                                                          \
  X(RandomUniform, RandomUniformOp, Random)

namespace kiln::graph {
namespace {

using Longs = flatbuffers::Vector<int64_t>;

ArrayRef<int64_t> longs(const Longs *v) {
  return v ? ArrayRef<int64_t>(v->data(), v->size()) : ArrayRef<int64_t>();
}

Offset<Longs> longs(FlatBufferBuilder &fbb, ArrayRef<int64_t> values) {
  return fbb.CreateVector(values.data(), values.size());
}

// What a family's reader works with: the op being built and the way to
// report an error against its node.
struct Reader {
  Operation *op;
  Builder b;
  function_ref<InFlightDiagnostic()> error;

  OperationName name() const { return op->getName(); }
  void set(StringAttr attrName, Attribute value) { op->setAttr(attrName, value); }
  void setLongs(StringAttr attrName, const Longs *v) {
    set(attrName, b.getDenseI64ArrayAttr(longs(v)));
  }
  void setLong(StringAttr attrName, int64_t v) {
    set(attrName, b.getI64IntegerAttr(v));
  }
  void setDouble(StringAttr attrName, double v) {
    set(attrName, b.getF64FloatAttr(v));
  }
};

using Written = FailureOr<Offset<void>>;

double toDouble(const APFloat &v) { return v.convertToDouble(); }

//===----------------------------------------------------------------------===//
// Attribute families
//===----------------------------------------------------------------------===//

struct NoneFamily {
  static constexpr fbs::Attrs kTable = fbs::Attrs::NONE;
};

// Raw little-endian data; i1 is one byte (0 or 1) per element.
struct ConstantFamily {
  static constexpr fbs::Attrs kTable = fbs::Attrs::ConstantAttrs;
  using Table = fbs::ConstantAttrs;

  template <typename OpT>
  static LogicalResult read(Reader &r, const Table &t) {
    if (r.op->getNumResults() != 1)
      return r.error() << "kiln.constant has one result, but the node lists "
                       << r.op->getNumResults() << " outputs";
    auto type = cast<RankedTensorType>(r.op->getResult(0).getType());
    std::optional<fbs::DType> dtype = toFbs(type.getElementType());
    if (!dtype)
      return r.error() << "constant of element type " << type.getElementType()
                       << " cannot be held";
    int64_t count = type.getNumElements();
    size_t width = bytesPerElement(*dtype);
    ArrayRef<uint8_t> data;
    if (t.data())
      data = ArrayRef<uint8_t>(t.data()->data(), t.data()->size());
    size_t expected = t.splat() ? width : size_t(count) * width;
    if (t.splat() && count == 0)
      return r.error() << "constant data is a splat, but the tensor " << type
                       << " has no elements";
    if (data.size() != expected)
      return r.error() << "constant data has " << data.size()
                       << " bytes, but " << type << " needs " << expected
                       << (t.splat() ? " (one element, splat)" : "");
    DenseElementsAttr value;
    if (*dtype == fbs::DType::I1) {
      SmallVector<bool> bits;
      bits.reserve(data.size());
      for (auto [i, byte] : llvm::enumerate(data)) {
        if (byte > 1)
          return r.error() << "constant i1 element " << i << " is " << int(byte)
                           << ", expected 0 or 1";
        bits.push_back(byte != 0);
      }
      value = DenseElementsAttr::get(type, bits);
    } else {
      static_assert(llvm::endianness::native == llvm::endianness::little,
                    "constant data is copied as is: little-endian hosts only");
      ArrayRef<char> raw(reinterpret_cast<const char *>(data.data()), data.size());
      bool detectedSplat = false;
      if (!DenseElementsAttr::isValidRawBuffer(type, raw, detectedSplat))
        return r.error() << "constant data does not fit " << type;
      value = DenseElementsAttr::getFromRawBuffer(type, raw);
    }
    r.set(OpT::getValueAttrName(r.name()), value);
    return success();
  }

  template <typename OpT>
  static Written write(FlatBufferBuilder &fbb, OpT op) {
    DenseIntOrFPElementsAttr dense =
        dyn_cast<DenseIntOrFPElementsAttr>(op.getValue());
    if (!dense)
      return op.emitError() << "constant value " << op.getValue()
                            << " cannot be stored in a graph file: only dense "
                               "integer or float elements can";
    ShapedType type = dense.getType();
    std::optional<fbs::DType> dtype = toFbs(type.getElementType());
    if (!dtype || !type.hasStaticShape())
      return op.emitError() << "constant of type " << type
                            << " cannot be stored in a graph file";
    bool splat = dense.isSplat() && type.getNumElements() > 0;
    std::vector<uint8_t> bytes;
    if (*dtype == fbs::DType::I1) {
      if (splat)
        bytes.push_back(dense.getSplatValue<bool>() ? 1 : 0);
      else
        for (bool v : dense.getValues<bool>())
          bytes.push_back(v ? 1 : 0);
    } else {
      ArrayRef<char> raw = dense.getRawData();
      bytes.assign(raw.begin(), raw.end());
    }
    return fbs::CreateConstantAttrs(fbb, fbb.CreateVector(bytes), splat).Union();
  }
};

// iota, concatenate, argmax, softmax, log_softmax.
struct AxisFamily {
  static constexpr fbs::Attrs kTable = fbs::Attrs::AxisAttrs;
  using Table = fbs::AxisAttrs;
  template <typename OpT>
  static LogicalResult read(Reader &r, const Table &t) {
    r.setLong(OpT::getDimensionAttrName(r.name()), t.dimension());
    return success();
  }
  template <typename OpT>
  static Written write(FlatBufferBuilder &fbb, OpT op) {
    return fbs::CreateAxisAttrs(fbb, int64_t(op.getDimension())).Union();
  }
};

struct GeluFamily {
  static constexpr fbs::Attrs kTable = fbs::Attrs::GeluAttrs;
  using Table = fbs::GeluAttrs;
  template <typename OpT>
  static LogicalResult read(Reader &r, const Table &t) {
    std::optional<GeluApproximation> form = toKiln(t.approximate());
    if (!form)
      return r.error() << "unknown GELU approximation "
                       << unsigned(t.approximate()) << " (expected 0..1)";
    r.set(OpT::getApproximateAttrName(r.name()),
          GeluApproximationAttr::get(r.b.getContext(), *form));
    return success();
  }
  template <typename OpT>
  static Written write(FlatBufferBuilder &fbb, OpT op) {
    return fbs::CreateGeluAttrs(fbb, toFbs(op.getApproximate())).Union();
  }
};

struct CompareFamily {
  static constexpr fbs::Attrs kTable = fbs::Attrs::CompareAttrs;
  using Table = fbs::CompareAttrs;
  template <typename OpT>
  static LogicalResult read(Reader &r, const Table &t) {
    std::optional<CompareDirection> dir = toKiln(t.direction());
    if (!dir)
      return r.error() << "unknown comparison direction "
                       << unsigned(t.direction()) << " (expected 0..5)";
    r.set(OpT::getDirectionAttrName(r.name()),
          CompareDirectionAttr::get(r.b.getContext(), *dir));
    return success();
  }
  template <typename OpT>
  static Written write(FlatBufferBuilder &fbb, OpT op) {
    return fbs::CreateCompareAttrs(fbb, toFbs(op.getDirection())).Union();
  }
};

struct BroadcastFamily {
  static constexpr fbs::Attrs kTable = fbs::Attrs::BroadcastAttrs;
  using Table = fbs::BroadcastAttrs;
  template <typename OpT>
  static LogicalResult read(Reader &r, const Table &t) {
    r.setLongs(OpT::getBroadcastDimensionsAttrName(r.name()), t.dims());
    return success();
  }
  template <typename OpT>
  static Written write(FlatBufferBuilder &fbb, OpT op) {
    return fbs::CreateBroadcastAttrs(fbb, longs(fbb, op.getBroadcastDimensions()))
        .Union();
  }
};

struct TransposeFamily {
  static constexpr fbs::Attrs kTable = fbs::Attrs::TransposeAttrs;
  using Table = fbs::TransposeAttrs;
  template <typename OpT>
  static LogicalResult read(Reader &r, const Table &t) {
    r.setLongs(OpT::getPermutationAttrName(r.name()), t.permutation());
    return success();
  }
  template <typename OpT>
  static Written write(FlatBufferBuilder &fbb, OpT op) {
    return fbs::CreateTransposeAttrs(fbb, longs(fbb, op.getPermutation())).Union();
  }
};

struct SliceFamily {
  static constexpr fbs::Attrs kTable = fbs::Attrs::SliceAttrs;
  using Table = fbs::SliceAttrs;
  template <typename OpT>
  static LogicalResult read(Reader &r, const Table &t) {
    r.setLongs(OpT::getStartIndicesAttrName(r.name()), t.start());
    r.setLongs(OpT::getLimitIndicesAttrName(r.name()), t.limit());
    r.setLongs(OpT::getStridesAttrName(r.name()), t.strides());
    return success();
  }
  template <typename OpT>
  static Written write(FlatBufferBuilder &fbb, OpT op) {
    auto start = longs(fbb, op.getStartIndices());
    auto limit = longs(fbb, op.getLimitIndices());
    auto strides = longs(fbb, op.getStrides());
    return fbs::CreateSliceAttrs(fbb, start, limit, strides).Union();
  }
};

struct PadFamily {
  static constexpr fbs::Attrs kTable = fbs::Attrs::PadAttrs;
  using Table = fbs::PadAttrs;
  template <typename OpT>
  static LogicalResult read(Reader &r, const Table &t) {
    r.setLongs(OpT::getEdgePaddingLowAttrName(r.name()), t.low());
    r.setLongs(OpT::getEdgePaddingHighAttrName(r.name()), t.high());
    r.setDouble(OpT::getPaddingValueAttrName(r.name()), t.value());
    return success();
  }
  template <typename OpT>
  static Written write(FlatBufferBuilder &fbb, OpT op) {
    auto low = longs(fbb, op.getEdgePaddingLow());
    auto high = longs(fbb, op.getEdgePaddingHigh());
    return fbs::CreatePadAttrs(fbb, low, high, toDouble(op.getPaddingValue()))
        .Union();
  }
};

struct ReduceFamily {
  static constexpr fbs::Attrs kTable = fbs::Attrs::ReduceAttrs;
  using Table = fbs::ReduceAttrs;
  template <typename OpT>
  static LogicalResult read(Reader &r, const Table &t) {
    std::optional<ReduceKind> kind = toKiln(t.kind());
    if (!kind)
      return r.error() << "unknown reduction kind " << unsigned(t.kind())
                       << " (expected 0..4: sum, max, min, mean, prod)";
    r.set(OpT::getKindAttrName(r.name()),
          ReduceKindAttr::get(r.b.getContext(), *kind));
    r.setLongs(OpT::getDimensionsAttrName(r.name()), t.dims());
    return success();
  }
  template <typename OpT>
  static Written write(FlatBufferBuilder &fbb, OpT op) {
    auto dims = longs(fbb, op.getDimensions());
    return fbs::CreateReduceAttrs(fbb, toFbs(op.getKind()), dims).Union();
  }
};

// scatter_add's combine. Written only for max and min, so that a file
// whose scatters all add is what format 1.6 wrote; a node without the
// table adds (readNode).
struct ScatterFamily {
  static constexpr fbs::Attrs kTable = fbs::Attrs::ScatterAttrs;
  using Table = fbs::ScatterAttrs;
  static constexpr bool kOptional = true;
  template <typename OpT> static LogicalResult read(Reader &r, const Table &t) {
    std::optional<ReduceKind> kind = toKiln(t.combine());
    if (!kind || *kind == ReduceKind::mean)
      return r.error() << "unknown scatter combine " << unsigned(t.combine())
                       << " (expected 0..2 or 4: sum, max, min, prod)";
    if (*kind != ReduceKind::sum)
      r.set(OpT::getCombineAttrName(r.name()),
            ReduceKindAttr::get(r.b.getContext(), *kind));
    return success();
  }
  template <typename OpT> static bool needed(OpT op) {
    return op.getCombineKind() != ReduceKind::sum;
  }
  template <typename OpT> static Written write(FlatBufferBuilder &fbb, OpT op) {
    return fbs::CreateScatterAttrs(fbb, toFbs(op.getCombineKind())).Union();
  }
};

// Whether |Family|'s table may be absent (only ScatterFamily's).
template <typename Family, typename = void>
struct OptionalTable : std::false_type {};
template <typename Family>
struct OptionalTable<Family, std::void_t<decltype(Family::kOptional)>>
    : std::bool_constant<Family::kOptional> {};

struct DotGeneralFamily {
  static constexpr fbs::Attrs kTable = fbs::Attrs::DotGeneralAttrs;
  using Table = fbs::DotGeneralAttrs;
  template <typename OpT>
  static LogicalResult read(Reader &r, const Table &t) {
    r.setLongs(OpT::getLhsBatchingDimensionsAttrName(r.name()), t.lhs_batch());
    r.setLongs(OpT::getRhsBatchingDimensionsAttrName(r.name()), t.rhs_batch());
    r.setLongs(OpT::getLhsContractingDimensionsAttrName(r.name()), t.lhs_contract());
    r.setLongs(OpT::getRhsContractingDimensionsAttrName(r.name()), t.rhs_contract());
    return success();
  }
  template <typename OpT>
  static Written write(FlatBufferBuilder &fbb, OpT op) {
    auto lb = longs(fbb, op.getLhsBatchingDimensions());
    auto rb = longs(fbb, op.getRhsBatchingDimensions());
    auto lc = longs(fbb, op.getLhsContractingDimensions());
    auto rc = longs(fbb, op.getRhsContractingDimensions());
    return fbs::CreateDotGeneralAttrs(fbb, lb, rb, lc, rc).Union();
  }
};

// conv2d, conv2d_input_grad, conv2d_filter_grad.
struct Conv2DFamily {
  static constexpr fbs::Attrs kTable = fbs::Attrs::Conv2DAttrs;
  using Table = fbs::Conv2DAttrs;
  template <typename OpT>
  static LogicalResult read(Reader &r, const Table &t) {
    r.setLongs(OpT::getStridesAttrName(r.name()), t.strides());
    r.setLongs(OpT::getPaddingAttrName(r.name()), t.padding());
    r.setLongs(OpT::getDilationAttrName(r.name()), t.dilation());
    r.setLong(OpT::getGroupsAttrName(r.name()), t.groups());
    return success();
  }
  template <typename OpT>
  static Written write(FlatBufferBuilder &fbb, OpT op) {
    auto strides = longs(fbb, op.getStrides());
    auto padding = longs(fbb, op.getPadding());
    auto dilation = longs(fbb, op.getDilation());
    return fbs::CreateConv2DAttrs(fbb, strides, padding, dilation,
                                  int64_t(op.getGroups()))
        .Union();
  }
};

// max_pool2d, avg_pool2d and their gradients.
struct PoolFamily {
  static constexpr fbs::Attrs kTable = fbs::Attrs::PoolAttrs;
  using Table = fbs::PoolAttrs;
  template <typename OpT>
  static LogicalResult read(Reader &r, const Table &t) {
    r.setLongs(OpT::getWindowAttrName(r.name()), t.window());
    r.setLongs(OpT::getStridesAttrName(r.name()), t.strides());
    r.setLongs(OpT::getPaddingAttrName(r.name()), t.padding());
    return success();
  }
  template <typename OpT>
  static Written write(FlatBufferBuilder &fbb, OpT op) {
    auto window = longs(fbb, op.getWindow());
    auto strides = longs(fbb, op.getStrides());
    auto padding = longs(fbb, op.getPadding());
    return fbs::CreatePoolAttrs(fbb, window, strides, padding).Union();
  }
};

struct LayerNormFamily {
  static constexpr fbs::Attrs kTable = fbs::Attrs::LayerNormAttrs;
  using Table = fbs::LayerNormAttrs;
  template <typename OpT>
  static LogicalResult read(Reader &r, const Table &t) {
    r.setLong(OpT::getAxisAttrName(r.name()), t.axis());
    r.setDouble(OpT::getEpsilonAttrName(r.name()), t.epsilon());
    return success();
  }
  template <typename OpT>
  static Written write(FlatBufferBuilder &fbb, OpT op) {
    return fbs::CreateLayerNormAttrs(fbb, int64_t(op.getAxis()),
                                     toDouble(op.getEpsilon()))
        .Union();
  }
};

struct DropoutFamily {
  static constexpr fbs::Attrs kTable = fbs::Attrs::DropoutAttrs;
  using Table = fbs::DropoutAttrs;
  template <typename OpT>
  static LogicalResult read(Reader &r, const Table &t) {
    r.setDouble(OpT::getRateAttrName(r.name()), t.rate());
    r.setLong(OpT::getSeedAttrName(r.name()), t.seed());
    return success();
  }
  template <typename OpT>
  static Written write(FlatBufferBuilder &fbb, OpT op) {
    return fbs::CreateDropoutAttrs(fbb, toDouble(op.getRate()),
                                   int64_t(op.getSeed()))
        .Union();
  }
};

struct RandomFamily {
  static constexpr fbs::Attrs kTable = fbs::Attrs::RandomAttrs;
  using Table = fbs::RandomAttrs;
  template <typename OpT> static LogicalResult read(Reader &r, const Table &t) {
    r.setLong(OpT::getSeedAttrName(r.name()), t.seed());
    return success();
  }
  template <typename OpT> static Written write(FlatBufferBuilder &fbb, OpT op) {
    return fbs::CreateRandomAttrs(fbb, int64_t(op.getSeed())).Union();
  }
};

// all_reduce, reduce_scatter, all_gather, collective_broadcast: each reads
// and writes the fields it has.
struct CollectiveFamily {
  static constexpr fbs::Attrs kTable = fbs::Attrs::CollectiveAttrs;
  using Table = fbs::CollectiveAttrs;

  template <typename OpT>
  static constexpr bool kHasReduction =
      std::is_same_v<OpT, AllReduceOp> || std::is_same_v<OpT, ReduceScatterOp>;
  template <typename OpT>
  static constexpr bool kHasDimension =
      std::is_same_v<OpT, ReduceScatterOp> || std::is_same_v<OpT, AllGatherOp>;
  template <typename OpT>
  static constexpr bool kHasRoot = std::is_same_v<OpT, CollectiveBroadcastOp>;

  template <typename OpT>
  static LogicalResult read(Reader &r, const Table &t) {
    if constexpr (kHasReduction<OpT>) {
      std::optional<ReduceKind> kind = toKiln(t.reduction());
      if (!kind || *kind == ReduceKind::prod)
        return r.error() << "unknown reduction kind " << unsigned(t.reduction())
                         << " (expected 0..3: sum, max, min, mean)";
      r.set(OpT::getReductionAttrName(r.name()),
            ReduceKindAttr::get(r.b.getContext(), *kind));
    }
    if constexpr (kHasDimension<OpT>)
      r.setLong(OpT::getDimensionAttrName(r.name()), t.dimension());
    if constexpr (kHasRoot<OpT>)
      r.setLong(OpT::getRootAttrName(r.name()), t.root());
    if (!t.groups() && !t.groups_shape())
      return success();
    if (!t.groups() || !t.groups_shape())
      return r.error() << "rank groups need both 'groups' and 'groups_shape', "
                          "but only one is present";
    ArrayRef<int64_t> shape = longs(t.groups_shape());
    int64_t count = 1;
    for (int64_t d : shape) {
      if (d < 0 || (d > 0 && count > INT32_MAX / d))
        return r.error() << "rank groups shape has a bad dimension " << d;
      count *= d;
    }
    if (count != int64_t(t.groups()->size()))
      return r.error() << "rank groups shape holds " << count
                       << " ranks, but 'groups' lists " << t.groups()->size();
    auto type = RankedTensorType::get(shape, r.b.getI64Type());
    r.set(OpT::getGroupsAttrName(r.name()),
          DenseIntElementsAttr::get(type, longs(t.groups())));
    return success();
  }

  template <typename OpT>
  static Written write(FlatBufferBuilder &fbb, OpT op) {
    Offset<Longs> groups, shape;
    if (DenseIntElementsAttr g = op.getGroupsAttr()) {
      SmallVector<int64_t> ranks;
      for (const APInt &v : g.template getValues<APInt>())
        ranks.push_back(v.getSExtValue());
      groups = longs(fbb, ranks);
      shape = longs(fbb, g.getType().getShape());
    }
    fbs::CollectiveAttrsBuilder builder(fbb);
    if constexpr (kHasReduction<OpT>)
      builder.add_reduction(toFbs(op.getReduction()));
    if constexpr (kHasDimension<OpT>)
      builder.add_dimension(int64_t(op.getDimension()));
    if constexpr (kHasRoot<OpT>)
      builder.add_root(int64_t(op.getRoot()));
    if (!groups.IsNull()) {
      builder.add_groups(groups);
      builder.add_groups_shape(shape);
    }
    return builder.Finish().Union();
  }
};

// send and recv.
struct PeerFamily {
  static constexpr fbs::Attrs kTable = fbs::Attrs::PeerAttrs;
  using Table = fbs::PeerAttrs;
  template <typename OpT>
  static LogicalResult read(Reader &r, const Table &t) {
    r.setLong(OpT::getPeerAttrName(r.name()), t.peer());
    r.setLong(OpT::getChannelAttrName(r.name()), t.channel());
    return success();
  }
  template <typename OpT>
  static Written write(FlatBufferBuilder &fbb, OpT op) {
    return fbs::CreatePeerAttrs(fbb, int64_t(op.getPeer()), int64_t(op.getChannel()))
        .Union();
  }
};

// attention, attention_grad and their packed forms.
struct AttentionFamily {
  static constexpr fbs::Attrs kTable = fbs::Attrs::AttentionAttrs;
  using Table = fbs::AttentionAttrs;
  template <typename OpT>
  static LogicalResult read(Reader &r, const Table &t) {
    r.setDouble(OpT::getScaleAttrName(r.name()), t.scale());
    r.set(OpT::getCausalAttrName(r.name()), r.b.getBoolAttr(t.causal()));
    return success();
  }
  template <typename OpT>
  static Written write(FlatBufferBuilder &fbb, OpT op) {
    return fbs::CreateAttentionAttrs(fbb, toDouble(op.getScale()), op.getCausal())
        .Union();
  }
};

//===----------------------------------------------------------------------===//
// Dispatch
//===----------------------------------------------------------------------===//

template <typename OpT, typename Family>
LogicalResult readNode(Reader &r, const fbs::Node &node) {
  if constexpr (Family::kTable == fbs::Attrs::NONE) {
    return success();
  } else {
    const auto *table = static_cast<const typename Family::Table *>(node.attrs());
    if (!table && OptionalTable<Family>::value)
      return success();
    if (!table)
      return r.error() << "the attribute table "
                       << fbs::EnumNameAttrs(Family::kTable) << " is missing";
    return Family::template read<OpT>(r, *table);
  }
}

template <typename OpT, typename Family>
FailureOr<ExportedOp> writeOp(fbs::OpCode code, OpT op, FlatBufferBuilder &fbb) {
  if constexpr (Family::kTable == fbs::Attrs::NONE) {
    return ExportedOp{code, fbs::Attrs::NONE, 0};
  } else {
    if constexpr (OptionalTable<Family>::value)
      if (!Family::needed(op))
        return ExportedOp{code, fbs::Attrs::NONE, 0};
    Written attrs = Family::write(fbb, op);
    if (failed(attrs))
      return failure();
    return ExportedOp{code, Family::kTable, *attrs};
  }
}

} // namespace

StringRef opNameOf(fbs::OpCode code) {
  switch (code) {
#define X(CODE, OP, FAMILY)                                                    \
  case fbs::OpCode::CODE:                                                      \
    return OP::getOperationName();
    KILN_GRAPH_OPS(X)
#undef X
  }
  return {};
}

fbs::Attrs attrsTableOf(fbs::OpCode code) {
  switch (code) {
#define X(CODE, OP, FAMILY)                                                    \
  case fbs::OpCode::CODE:                                                      \
    return FAMILY##Family::kTable;
    KILN_GRAPH_OPS(X)
#undef X
  }
  return fbs::Attrs::NONE;
}

bool attrsTableOptional(fbs::OpCode code) {
  switch (code) {
#define X(CODE, OP, FAMILY)                                                    \
  case fbs::OpCode::CODE:                                                      \
    return OptionalTable<FAMILY##Family>::value;
    KILN_GRAPH_OPS(X)
#undef X
  }
  return false;
}

std::vector<fbs::OpCode> allOpCodes() {
  return {
#define X(CODE, OP, FAMILY) fbs::OpCode::CODE,
      KILN_GRAPH_OPS(X)
#undef X
  };
}

LogicalResult importNodeAttrs(fbs::OpCode code, const fbs::Node &node,
                              Operation *op,
                              function_ref<InFlightDiagnostic()> error) {
  Reader r{op, Builder(op->getContext()), error};
  switch (code) {
#define X(CODE, OP, FAMILY)                                                    \
  case fbs::OpCode::CODE:                                                      \
    return readNode<OP, FAMILY##Family>(r, node);
    KILN_GRAPH_OPS(X)
#undef X
  }
  return error() << "unknown op code " << unsigned(code);
}

FailureOr<ExportedOp> exportOp(Operation *op, FlatBufferBuilder &fbb) {
#define X(CODE, OP, FAMILY)                                                    \
  if (auto typed = dyn_cast<OP>(op))                                           \
    return writeOp<OP, FAMILY##Family>(fbs::OpCode::CODE, typed, fbb);
  KILN_GRAPH_OPS(X)
#undef X
  if (isa<FusionOp>(op))
    return op->emitError()
           << "'" << op->getName()
           << "' cannot be stored in a graph file: fusions exist only inside "
              "the compiler (export the graph before fusion)";
  return op->emitError() << "'" << op->getName()
                         << "' cannot be stored in a graph file: the format "
                            "holds kiln ops only (kiln.fusion excepted)";
}

} // namespace kiln::graph
