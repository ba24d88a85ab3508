//===- OnnxImport.cpp - an ONNX model as a kiln training graph -------------===//
//
// One pass over the nodes in file order (ONNX requires them topologically
// sorted). Each tensor name maps to a kiln value, or to a static tensor
// (an integer initializer, a Constant node, or a shape computation on
// those), which becomes a kiln.constant only where a kiln op reads it.
// Result types are worked out here from ONNX's rules and given to the
// builders, so a model whose shapes do not fit fails the module's
// verification with the node's name as the location, never an assertion.
//
//===----------------------------------------------------------------------===//

#include "tools/kiln/lib/OnnxImport.h"

#include "tools/kiln/lib/Diagnostics.h"
#include "tools/kiln/lib/Flags.h"
#include "tools/kiln/lib/GraphBuilder.h"

#include "runtime/checkpoint/Safetensors.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringMap.h"

#include <cmath>
#include <map>
#include <numeric>
#include <optional>
#include <set>

namespace kiln::cli {
namespace {

using onnx::DataType;

struct Static {
  std::vector<int64_t> dims;
  std::vector<double> values;
  int32_t dataType = 0;
};

bool isFloatType(int32_t t) {
  return t == int32_t(DataType::Float) || t == int32_t(DataType::Double) ||
         t == int32_t(DataType::Float16) || t == int32_t(DataType::BFloat16);
}

int64_t product(llvm::ArrayRef<int64_t> dims) {
  int64_t n = 1;
  for (int64_t d : dims)
    n *= d;
  return n;
}

std::string shapeText(llvm::ArrayRef<int64_t> dims) {
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

private:
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

  // The kiln value of input |i| of the current node.
  bool value(size_t i, mlir::Value &out);
  bool hasInput(size_t i) const {
    return i < node_->inputs.size() && !node_->inputs[i].empty();
  }
  // Input |i| as a static tensor (an initializer or Constant).
  const Static *staticInput(size_t i);
  void setOutput(size_t i, mlir::Value v) { values_[node_->outputs[i]] = v; }
  void setStatic(size_t i, Static s) { statics_[node_->outputs[i]] = std::move(s); }

  int64_t intAttr(const char *name, int64_t fallback) {
    const onnx::Attribute *a = node_->attribute(name);
    return a ? a->i : fallback;
  }
  float floatAttr(const char *name, float fallback) {
    const onnx::Attribute *a = node_->attribute(name);
    return a ? a->f : fallback;
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
  // The axes of a reduction, squeeze or unsqueeze: attribute "axes" or,
  // from |inputOpset| on, input 1.
  bool axes(int64_t inputOpset, std::optional<std::vector<int64_t>> &out);

  mlir::Value broadcastTo(mlir::Value v, llvm::ArrayRef<int64_t> dims);
  bool broadcastShapes(llvm::ArrayRef<int64_t> a, llvm::ArrayRef<int64_t> b,
                       llvm::SmallVectorImpl<int64_t> &out);
  mlir::Value splat(double v, mlir::Type element, llvm::ArrayRef<int64_t> dims);
  mlir::Value constant(const Static &s, const std::string &name);

  // Op groups.
  bool unary(const std::string &op);
  bool binary(const std::string &op);
  bool gemm();
  bool matmul();
  bool conv();
  bool pool(bool max);
  bool globalPool(bool max);
  bool reshapeLike(const std::string &op);
  bool transpose();
  bool concat();
  bool softmax(bool log);
  bool reduce(kiln::ReduceKind kind);
  bool layerNorm();
  bool batchNorm();
  // Input |i| as a constant, also when it is a floating-point initializer
  // (which value() makes a parameter): running statistics.
  bool constantValue(size_t i, mlir::Value &out);
  bool gather();
  bool dropout();
  bool constantNode();
  bool foldStatic(const std::string &op, bool &folded);

  const onnx::Model &model_;
  const std::string &path_;
  const OnnxImportOptions &options_;
  GraphBuilder g_;
  mlir::OpBuilder &b_;
  llvm::StringRef command_;
  llvm::raw_ostream &errs_;

  std::map<std::string, mlir::Value> values_;
  std::map<std::string, Static> statics_;
  std::set<std::string> initializerNames_;
  std::map<std::string, const onnx::Tensor *> parameterTensors_;
  // Each parameter's fan-in, from the first Gemm, MatMul or Conv reading it.
  std::map<std::string, int64_t> fanIn_;
  const onnx::Node *node_ = nullptr;
  // The step counter, made for the first dropout; each dropout's seed.
  mlir::Value step_;
  int64_t nextDropoutSeed_ = 0;
  std::string nodeName_, where_;
  int64_t opset_ = 0;
};

bool Importer::elementType(int32_t onnxType, mlir::Type &out,
                           const std::string &what) {
  switch (static_cast<DataType>(onnxType)) {
  case DataType::Float:
    out = b_.getF32Type();
    return true;
  case DataType::Int64:
    out = b_.getI64Type();
    return true;
  case DataType::Int32:
    out = b_.getI32Type();
    return true;
  case DataType::Bool:
    out = b_.getI1Type();
    return true;
  default:
    return fail(what + " has element type " + onnx::dataTypeName(onnxType) +
                " (kiln import reads FLOAT, INT64, INT32 and BOOL data)");
  }
}

bool Importer::normalizeAxis(int64_t &axis, int64_t rank, const char *what) {
  if (axis < -rank || axis >= std::max<int64_t>(rank, 1))
    return fail(std::string(what) + " " + std::to_string(axis) +
                " is out of range for rank " + std::to_string(rank));
  if (axis < 0)
    axis += rank;
  return true;
}

bool Importer::readInputs() {
  for (const onnx::Tensor &t : model_.graph.initializers)
    initializerNames_.insert(t.name);
  for (const onnx::ValueInfo &in : model_.graph.inputs) {
    if (initializerNames_.count(in.name))
      continue; // IR version < 4 lists initializers as inputs too
    where_ = "input '" + in.name + "': ";
    if (!in.hasShape)
      return fail("no shape; kiln needs every input's shape (export with a "
                  "sample input of the training batch's shape)");
    llvm::SmallVector<int64_t> dims;
    for (size_t d = 0; d < in.dims.size(); ++d) {
      const onnx::Dimension &dim = in.dims[d];
      if (dim.value && *dim.value > 0) {
        dims.push_back(*dim.value);
        continue;
      }
      std::string name = dim.param.empty() ? "unknown" : "'" + dim.param + "'";
      if (d != 0)
        return fail("dimension " + std::to_string(d) + " is " + name +
                    ": only the first (the batch) may be symbolic");
      if (options_.batch == 0)
        return fail("dimension 0 is " + name +
                    " (symbolic): give the batch with --batch=N");
      dims.push_back(options_.batch);
    }
    if (options_.batch && !dims.empty() && dims[0] != options_.batch)
      return fail("the batch is " + std::to_string(dims[0]) +
                  " in the file and --batch=" + std::to_string(options_.batch) +
                  " (--batch only fixes a symbolic batch)");
    mlir::Type e;
    if (!elementType(in.elemType, e, "it"))
      return false;
    values_[in.name] = g_.addInput(in.name, dims, e);
  }
  where_.clear();
  return true;
}

bool Importer::readInitializers() {
  for (const onnx::Tensor &t : model_.graph.initializers) {
    where_ = "initializer '" + t.name + "': ";
    if (t.external)
      return fail("its data is in an external file; export with the weights "
                  "inside the model (torch.onnx.export's "
                  "external_data=False, or onnx.save without "
                  "save_as_external_data)");
    Static s;
    s.dims = t.dims;
    s.dataType = t.dataType;
    s.values = t.toDoubles();
    if (isFloatType(t.dataType) && !t.dims.empty()) {
      parameterTensors_[t.name] = &t; // made a parameter where it is read
      continue;
    }
    statics_[t.name] = std::move(s);
  }
  where_.clear();
  return true;
}

bool Importer::value(size_t i, mlir::Value &out) {
  if (!hasInput(i))
    return fail("input " + std::to_string(i) + " is missing");
  const std::string &name = node_->inputs[i];
  if (auto it = values_.find(name); it != values_.end()) {
    out = it->second;
    return true;
  }
  if (auto it = parameterTensors_.find(name); it != parameterTensors_.end()) {
    const onnx::Tensor &t = *it->second;
    int64_t fanIn = fanIn_.count(name) ? fanIn_[name]
                    : t.dims.size() > 1 ? product(llvm::ArrayRef(t.dims).drop_front())
                                        : t.dims[0];
    out = g_.addParameter(name, t.dims, kiln::InitKind::uniform, 0.0,
                          1.0 / std::sqrt(double(std::max<int64_t>(fanIn, 1))));
    values_[name] = out;
    return true;
  }
  if (auto it = statics_.find(name); it != statics_.end()) {
    out = constant(it->second, name);
    if (!out)
      return false;
    values_[name] = out;
    return true;
  }
  return fail("reads '" + name + "', which no input, initializer or earlier "
              "node gives");
}

const Static *Importer::staticInput(size_t i) {
  if (!hasInput(i)) {
    fail("input " + std::to_string(i) + " is missing");
    return nullptr;
  }
  auto it = statics_.find(node_->inputs[i]);
  if (it == statics_.end()) {
    fail("input " + std::to_string(i) + " ('" + node_->inputs[i] +
         "') must be a constant: an initializer, a Constant node or a "
         "computation on shapes");
    return nullptr;
  }
  return &it->second;
}

mlir::Value Importer::constant(const Static &s, const std::string &name) {
  mlir::Type e;
  int32_t t = s.dataType;
  if (isFloatType(t))
    t = int32_t(DataType::Float);
  if (!elementType(t, e, "constant '" + name + "'"))
    return nullptr;
  auto tt = type(s.dims, e);
  mlir::DenseElementsAttr attr;
  if (llvm::isa<mlir::FloatType>(e)) {
    llvm::SmallVector<float> v(s.values.begin(), s.values.end());
    attr = mlir::DenseElementsAttr::get(tt, llvm::ArrayRef<float>(v));
  } else {
    llvm::SmallVector<llvm::APInt> v;
    for (double d : s.values)
      v.push_back(llvm::APInt(e.getIntOrFloatBitWidth(), static_cast<int64_t>(d),
                              /*isSigned=*/true));
    attr = mlir::DenseElementsAttr::get(tt, v);
  }
  return b_.create<kiln::ConstantOp>(g_.loc(name), attr).getResult();
}

mlir::Value Importer::splat(double v, mlir::Type e, llvm::ArrayRef<int64_t> dims) {
  return g_.splat(nodeName_ + ".splat", v, type(dims, e));
}

bool Importer::broadcastShapes(llvm::ArrayRef<int64_t> a, llvm::ArrayRef<int64_t> b,
                               llvm::SmallVectorImpl<int64_t> &out) {
  size_t rank = std::max(a.size(), b.size());
  out.assign(rank, 1);
  for (size_t i = 0; i < rank; ++i) {
    int64_t x = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t y = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (x != y && x != 1 && y != 1)
      return fail("shapes " + shapeText(a) + " and " + shapeText(b) +
                  " do not broadcast (dimension " + std::to_string(i) + ")");
    out[i] = x == 1 ? y : x;
  }
  return true;
}

mlir::Value Importer::broadcastTo(mlir::Value v, llvm::ArrayRef<int64_t> dims) {
  if (shape(v) == dims)
    return v;
  int64_t offset = dims.size() - shape(v).size();
  llvm::SmallVector<int64_t> map;
  for (int64_t i = 0; i < static_cast<int64_t>(shape(v).size()); ++i)
    map.push_back(offset + i);
  return g_.broadcast(nodeName_ + ".broadcast", v, map, dims);
}

bool Importer::unary(const std::string &op) {
  mlir::Value x;
  if (!value(0, x))
    return false;
  mlir::Location l = loc();
  mlir::Type t = x.getType();
  mlir::Value y;
  if (op == "Relu")
    y = b_.create<kiln::ReluOp>(l, t, x);
  else if (op == "Tanh")
    y = b_.create<kiln::TanhOp>(l, t, x);
  else if (op == "Sigmoid")
    y = b_.create<kiln::SigmoidOp>(l, t, x);
  else if (op == "Exp")
    y = b_.create<kiln::ExpOp>(l, t, x);
  else if (op == "Log")
    y = b_.create<kiln::LogOp>(l, t, x);
  else if (op == "Neg")
    y = b_.create<kiln::NegOp>(l, t, x);
  else if (op == "Abs")
    y = b_.create<kiln::AbsOp>(l, t, x);
  else if (op == "Sqrt")
    y = b_.create<kiln::SqrtOp>(l, t, x);
  else if (op == "Reciprocal")
    y = b_.create<kiln::ReciprocalOp>(l, t, x);
  else if (op == "Erf")
    y = b_.create<kiln::ErfOp>(l, t, x);
  else if (op == "Sin")
    y = b_.create<kiln::SinOp>(l, t, x);
  else if (op == "Cos")
    y = b_.create<kiln::CosOp>(l, t, x);
  else if (op == "Gelu") {
    std::string approximate = stringAttr("approximate", "none");
    if (approximate != "none" && approximate != "tanh")
      return fail("approximate is '" + approximate + "': expected none or tanh");
    y = b_.create<kiln::GeluOp>(l, t,
                                approximate == "tanh" ? kiln::GeluApproximation::tanh
                                                      : kiln::GeluApproximation::erf,
                                x);
  } else if (op == "LeakyRelu") {
    // x if x > 0, else alpha * x.
    float alpha = floatAttr("alpha", 0.01f);
    mlir::Value zero = splat(0.0, element(x), shape(x));
    mlir::Value positive = b_.create<kiln::CompareOp>(
        loc(".positive"), type(shape(x), b_.getI1Type()),
        kiln::CompareDirection::gt, x, zero);
    mlir::Value scaled = b_.create<kiln::MulOp>(
        loc(".scaled"), t, x, splat(alpha, element(x), shape(x)));
    y = b_.create<kiln::SelectOp>(l, t, positive, x, scaled);
  } else {
    // Identity.
    y = x;
  }
  setOutput(0, y);
  return true;
}

bool Importer::binary(const std::string &op) {
  if (node_->inputs.size() != 2)
    return fail("has " + std::to_string(node_->inputs.size()) +
                " inputs: kiln import reads " + op + " of two");
  mlir::Value a, c;
  if (!value(0, a) || !value(1, c))
    return false;
  if (element(a) != element(c))
    return fail("its inputs have different element types");
  llvm::SmallVector<int64_t> dims;
  if (!broadcastShapes(shape(a), shape(c), dims))
    return false;
  a = broadcastTo(a, dims);
  c = broadcastTo(c, dims);
  mlir::Location l = loc();
  mlir::Type t = a.getType();
  mlir::Value y;
  if (op == "Add")
    y = b_.create<kiln::AddOp>(l, t, a, c);
  else if (op == "Sub")
    y = b_.create<kiln::SubOp>(l, t, a, c);
  else if (op == "Mul")
    y = b_.create<kiln::MulOp>(l, t, a, c);
  else if (op == "Div")
    y = b_.create<kiln::DivOp>(l, t, a, c);
  else if (op == "Pow")
    y = b_.create<kiln::PowOp>(l, t, a, c);
  else if (op == "Max")
    y = b_.create<kiln::MaxOp>(l, t, a, c);
  else
    y = b_.create<kiln::MinOp>(l, t, a, c);
  setOutput(0, y);
  return true;
}

bool Importer::gemm() {
  mlir::Value a, w;
  int64_t transA = intAttr("transA", 0), transB = intAttr("transB", 0);
  if (hasInput(1) && !node_->inputs[1].empty()) {
    const std::string &name = node_->inputs[1];
    if (auto it = parameterTensors_.find(name);
        it != parameterTensors_.end() && it->second->dims.size() == 2 &&
        !fanIn_.count(name))
      fanIn_[name] = it->second->dims[transB ? 1 : 0];
    if (hasInput(2) && parameterTensors_.count(node_->inputs[2]) &&
        fanIn_.count(name) && !fanIn_.count(node_->inputs[2]))
      fanIn_[node_->inputs[2]] = fanIn_[name];
  }
  if (!value(0, a) || !value(1, w))
    return false;
  if (shape(a).size() != 2 || shape(w).size() != 2)
    return fail("A is " + shapeText(shape(a)) + " and B " + shapeText(shape(w)) +
                ": Gemm takes two matrices");
  int64_t m = shape(a)[transA ? 1 : 0], k = shape(a)[transA ? 0 : 1];
  int64_t kb = shape(w)[transB ? 1 : 0], n = shape(w)[transB ? 0 : 1];
  if (k != kb)
    return fail("A is " + shapeText(shape(a)) + " and B " + shapeText(shape(w)) +
                " (transA " + std::to_string(transA) + ", transB " +
                std::to_string(transB) + "): the inner dimensions differ");
  mlir::Type e = element(a);
  mlir::Value y = b_.create<kiln::DotGeneralOp>(
      loc(".matmul"), type({m, n}, e), a, w, arr({}), arr({}),
      arr({transA ? 0 : 1}), arr({transB ? 1 : 0}));
  float alpha = floatAttr("alpha", 1.0f), beta = floatAttr("beta", 1.0f);
  if (alpha != 1.0f)
    y = b_.create<kiln::MulOp>(loc(".alpha"), y.getType(), y,
                               splat(alpha, e, {m, n}));
  if (hasInput(2)) {
    mlir::Value c;
    if (!value(2, c))
      return false;
    llvm::SmallVector<int64_t> dims;
    if (!broadcastShapes({m, n}, shape(c), dims))
      return false;
    if (dims != llvm::ArrayRef<int64_t>{m, n})
      return fail("C " + shapeText(shape(c)) + " does not broadcast to " +
                  shapeText({m, n}));
    c = broadcastTo(c, dims);
    if (beta != 1.0f)
      c = b_.create<kiln::MulOp>(loc(".beta"), c.getType(), c, splat(beta, e, {m, n}));
    y = b_.create<kiln::AddOp>(loc(), y.getType(), y, c);
  }
  setOutput(0, y);
  return true;
}

bool Importer::matmul() {
  if (hasInput(1)) {
    const std::string &name = node_->inputs[1];
    if (auto it = parameterTensors_.find(name);
        it != parameterTensors_.end() && it->second->dims.size() >= 2 &&
        !fanIn_.count(name))
      fanIn_[name] = it->second->dims[it->second->dims.size() - 2];
  }
  mlir::Value a, w;
  if (!value(0, a) || !value(1, w))
    return false;
  llvm::ArrayRef<int64_t> sa = shape(a), sb = shape(w);
  if (sa.size() < 2 || sb.size() < 2)
    return fail("A is " + shapeText(sa) + " and B " + shapeText(sb) +
                ": kiln import reads MatMul of rank 2 or more");
  int64_t ra = sa.size(), rb = sb.size();
  if (sa[ra - 1] != sb[rb - 2])
    return fail("A is " + shapeText(sa) + " and B " + shapeText(sb) +
                ": the inner dimensions differ");
  llvm::SmallVector<int64_t> dims;
  mlir::Value y;
  if (rb == 2) {
    // [..., M, K] x [K, N]: contract the last dimension of A.
    dims.assign(sa.begin(), sa.end() - 1);
    dims.push_back(sb[1]);
    y = b_.create<kiln::DotGeneralOp>(loc(), type(dims, element(a)), a, w, arr({}),
                                      arr({}), arr({ra - 1}), arr({0}));
  } else {
    if (ra != rb || sa.drop_back(2) != sb.drop_back(2))
      return fail("A is " + shapeText(sa) + " and B " + shapeText(sb) +
                  ": kiln import reads batched MatMul with equal batch "
                  "dimensions");
    llvm::SmallVector<int64_t> batch;
    for (int64_t i = 0; i < ra - 2; ++i)
      batch.push_back(i);
    dims.assign(sa.begin(), sa.end() - 1);
    dims.push_back(sb[rb - 1]);
    y = b_.create<kiln::DotGeneralOp>(loc(), type(dims, element(a)), a, w,
                                      arr(batch), arr(batch), arr({ra - 1}),
                                      arr({rb - 2}));
  }
  setOutput(0, y);
  return true;
}

// ONNX pads are [begin of each spatial dim..., end of each...]; kiln's
// [top, bottom, left, right].
static std::vector<int64_t> kilnPadding(const std::vector<int64_t> &pads) {
  return {pads[0], pads[2], pads[1], pads[3]};
}

bool Importer::conv() {
  if (hasInput(1)) {
    const std::string &name = node_->inputs[1];
    if (auto it = parameterTensors_.find(name);
        it != parameterTensors_.end() && it->second->dims.size() == 4 &&
        !fanIn_.count(name)) {
      fanIn_[name] = product(llvm::ArrayRef(it->second->dims).drop_front());
      if (hasInput(2))
        fanIn_[node_->inputs[2]] = fanIn_[name];
    }
  }
  mlir::Value x, w;
  if (!value(0, x) || !value(1, w))
    return false;
  if (shape(x).size() != 4 || shape(w).size() != 4)
    return fail("X is " + shapeText(shape(x)) + " and W " + shapeText(shape(w)) +
                ": kiln import reads 2-D convolutions (NCHW)");
  std::string autoPad = stringAttr("auto_pad", "NOTSET");
  if (autoPad != "NOTSET" && autoPad != "VALID")
    return fail("auto_pad is " + autoPad +
                ": export with explicit pads (kiln import reads NOTSET and VALID)");
  std::vector<int64_t> strides = intsAttr("strides").value_or(std::vector<int64_t>{1, 1});
  std::vector<int64_t> pads = intsAttr("pads").value_or(std::vector<int64_t>{0, 0, 0, 0});
  std::vector<int64_t> dilations =
      intsAttr("dilations").value_or(std::vector<int64_t>{1, 1});
  int64_t groups = intAttr("group", 1);
  if (strides.size() != 2 || pads.size() != 4 || dilations.size() != 2)
    return fail("strides, pads or dilations are not those of a 2-D convolution");
  llvm::ArrayRef<int64_t> sx = shape(x), sw = shape(w);
  if (auto kernel = intsAttr("kernel_shape");
      kernel && (kernel->size() != 2 || (*kernel)[0] != sw[2] || (*kernel)[1] != sw[3]))
    return fail("kernel_shape does not match W " + shapeText(sw));
  if (groups < 1 || sx[1] != sw[1] * groups || sw[0] % groups != 0)
    return fail("X has " + std::to_string(sx[1]) + " channels, W is " +
                shapeText(sw) + " and group " + std::to_string(groups) +
                ": expected X's channels = W's dimension 1 times group");
  llvm::SmallVector<int64_t> dims = {sx[0], sw[0]};
  for (int i = 0; i < 2; ++i) {
    int64_t extent = sx[2 + i] + pads[i] + pads[2 + i] - dilations[i] * (sw[2 + i] - 1) - 1;
    if (extent < 0 || strides[i] < 1)
      return fail("the kernel " + shapeText(sw) + " does not fit X " + shapeText(sx));
    dims.push_back(extent / strides[i] + 1);
  }
  mlir::Value y = b_.create<kiln::Conv2DOp>(
      loc(), type(dims, element(x)), x, w, arr(strides), arr(kilnPadding(pads)),
      arr(dilations), b_.getI64IntegerAttr(groups));
  if (hasInput(2)) {
    mlir::Value bias;
    if (!value(2, bias))
      return false;
    if (shape(bias) != llvm::ArrayRef<int64_t>{dims[1]})
      return fail("B is " + shapeText(shape(bias)) + ": expected [" +
                  std::to_string(dims[1]) + "]");
    mlir::Value wide = g_.broadcast(nodeName_ + ".bias_broadcast", bias, {1}, dims);
    y = b_.create<kiln::AddOp>(loc(".bias_add"), y.getType(), y, wide);
  }
  setOutput(0, y);
  return true;
}

bool Importer::pool(bool max) {
  mlir::Value x;
  if (!value(0, x))
    return false;
  if (node_->outputs.size() > 1 && !node_->outputs[1].empty())
    return fail("its Indices output is not supported");
  if (shape(x).size() != 4)
    return fail("X is " + shapeText(shape(x)) + ": kiln import reads 2-D pooling (NCHW)");
  std::string autoPad = stringAttr("auto_pad", "NOTSET");
  if (autoPad != "NOTSET" && autoPad != "VALID")
    return fail("auto_pad is " + autoPad + ": export with explicit pads");
  if (intAttr("ceil_mode", 0) != 0)
    return fail("ceil_mode is 1: kiln pools floor the output size (ceil_mode 0)");
  std::optional<std::vector<int64_t>> kernel = intsAttr("kernel_shape");
  if (!kernel || kernel->size() != 2)
    return fail("kernel_shape is missing or not 2-D");
  std::vector<int64_t> strides = intsAttr("strides").value_or(std::vector<int64_t>{1, 1});
  std::vector<int64_t> pads = intsAttr("pads").value_or(std::vector<int64_t>{0, 0, 0, 0});
  std::vector<int64_t> dilations =
      intsAttr("dilations").value_or(std::vector<int64_t>{1, 1});
  if (dilations != std::vector<int64_t>{1, 1})
    return fail("dilations are not 1: kiln pools take dense windows");
  bool padded = llvm::any_of(pads, [](int64_t p) { return p != 0; });
  if (!max && padded && intAttr("count_include_pad", 0) == 0)
    return fail("pads with count_include_pad 0: kiln's average counts padded "
                "elements (count_include_pad=True)");
  llvm::ArrayRef<int64_t> sx = shape(x);
  llvm::SmallVector<int64_t> dims = {sx[0], sx[1]};
  for (int i = 0; i < 2; ++i) {
    int64_t extent = sx[2 + i] + pads[i] + pads[2 + i] - (*kernel)[i];
    if (extent < 0 || strides[i] < 1)
      return fail("the window does not fit X " + shapeText(sx));
    dims.push_back(extent / strides[i] + 1);
  }
  mlir::Value y;
  if (max)
    y = b_.create<kiln::MaxPool2DOp>(loc(), type(dims, element(x)), x, arr(*kernel),
                                     arr(strides), arr(kilnPadding(pads)));
  else
    y = b_.create<kiln::AvgPool2DOp>(loc(), type(dims, element(x)), x, arr(*kernel),
                                     arr(strides), arr(kilnPadding(pads)));
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
  llvm::SmallVector<int64_t> spatial, reduced = {sx[0], sx[1]}, kept = {sx[0], sx[1]};
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

bool Importer::axes(int64_t inputOpset, std::optional<std::vector<int64_t>> &out) {
  out = intsAttr("axes");
  if (!out && opset_ >= inputOpset && hasInput(1)) {
    const Static *s = staticInput(1);
    if (!s)
      return false;
    out.emplace();
    for (double v : s->values)
      out->push_back(static_cast<int64_t>(v));
  }
  return true;
}

// Reshape, Flatten, Squeeze and Unsqueeze: a new shape for the same data.
bool Importer::reshapeLike(const std::string &op) {
  mlir::Value x;
  bool isStatic = hasInput(0) && statics_.count(node_->inputs[0]);
  std::vector<int64_t> in;
  if (isStatic)
    in = statics_[node_->inputs[0]].dims;
  else if (!value(0, x))
    return false;
  else
    in.assign(shape(x).begin(), shape(x).end());
  int64_t rank = in.size();
  std::vector<int64_t> dims;
  if (op == "Flatten") {
    int64_t axis = intAttr("axis", 1);
    if (!normalizeAxis(axis, rank + 1, "axis"))
      return false;
    dims = {product(llvm::ArrayRef(in).take_front(axis)),
            product(llvm::ArrayRef(in).drop_front(axis))};
  } else if (op == "Reshape") {
    const Static *s = staticInput(1);
    if (!s)
      return false;
    bool allowZero = intAttr("allowzero", 0) != 0;
    int64_t infer = -1, known = 1;
    for (size_t i = 0; i < s->values.size(); ++i) {
      int64_t d = static_cast<int64_t>(s->values[i]);
      if (d == 0 && !allowZero) {
        if (static_cast<int64_t>(i) >= rank)
          return fail("shape copies dimension " + std::to_string(i) +
                      " of a rank-" + std::to_string(rank) + " input");
        d = in[i];
      }
      if (d == -1) {
        if (infer >= 0)
          return fail("shape has two -1 dimensions");
        infer = i;
        dims.push_back(1);
        continue;
      }
      if (d < 0)
        return fail("shape has dimension " + std::to_string(d));
      dims.push_back(d);
      known *= d;
    }
    if (infer >= 0) {
      if (known == 0 || product(in) % known != 0)
        return fail("cannot infer the -1 of shape for " + std::to_string(product(in)) +
                    " elements");
      dims[infer] = product(in) / known;
    }
  } else {
    std::optional<std::vector<int64_t>> list;
    if (!axes(13, list))
      return false;
    if (op == "Squeeze") {
      std::set<int64_t> drop;
      for (int64_t a : list.value_or(std::vector<int64_t>{})) {
        if (!normalizeAxis(a, rank, "axis"))
          return false;
        if (in[a] != 1)
          return fail("squeezes dimension " + std::to_string(a) + " of size " +
                      std::to_string(in[a]));
        drop.insert(a);
      }
      for (int64_t d = 0; d < rank; ++d)
        if (list ? !drop.count(d) : in[d] != 1)
          dims.push_back(in[d]);
    } else {
      if (!list)
        return fail("has no axes");
      int64_t out = rank + list->size();
      std::set<int64_t> add;
      for (int64_t a : *list) {
        if (!normalizeAxis(a, out, "axis"))
          return false;
        add.insert(a);
      }
      for (int64_t d = 0, next = 0; d < out; ++d)
        dims.push_back(add.count(d) ? 1 : in[next++]);
    }
  }
  if (product(dims) != product(in))
    return fail("reshapes " + shapeText(in) + " (" + std::to_string(product(in)) +
                " elements) to " + shapeText(dims));
  if (isStatic) {
    Static s = statics_[node_->inputs[0]];
    s.dims = dims;
    setStatic(0, std::move(s));
    return true;
  }
  setOutput(0, dims == in ? x : g_.reshape(nodeName_, x, dims));
  return true;
}

bool Importer::transpose() {
  mlir::Value x;
  if (!value(0, x))
    return false;
  int64_t rank = shape(x).size();
  std::vector<int64_t> perm;
  if (std::optional<std::vector<int64_t>> p = intsAttr("perm")) {
    perm = *p;
  } else {
    for (int64_t d = rank - 1; d >= 0; --d)
      perm.push_back(d);
  }
  std::vector<int64_t> sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t d = 0; d < rank; ++d)
    if (static_cast<int64_t>(sorted.size()) != rank || sorted[d] != d)
      return fail("perm is not a permutation of the " + std::to_string(rank) +
                  " dimensions");
  llvm::SmallVector<int64_t> dims;
  for (int64_t p : perm)
    dims.push_back(shape(x)[p]);
  setOutput(0, b_.create<kiln::TransposeOp>(loc(), type(dims, element(x)), x, arr(perm)));
  return true;
}

bool Importer::concat() {
  llvm::SmallVector<mlir::Value> inputs;
  for (size_t i = 0; i < node_->inputs.size(); ++i) {
    mlir::Value v;
    if (!value(i, v))
      return false;
    inputs.push_back(v);
  }
  if (inputs.empty())
    return fail("has no inputs");
  int64_t rank = shape(inputs[0]).size();
  int64_t axis = intAttr("axis", 0);
  if (!normalizeAxis(axis, rank, "axis"))
    return false;
  llvm::SmallVector<int64_t> dims(shape(inputs[0]).begin(), shape(inputs[0]).end());
  dims[axis] = 0;
  for (mlir::Value v : inputs) {
    if (static_cast<int64_t>(shape(v).size()) != rank)
      return fail("its inputs have different ranks");
    dims[axis] += shape(v)[axis];
  }
  setOutput(0, b_.create<kiln::ConcatenateOp>(loc(), type(dims, element(inputs[0])),
                                              inputs, b_.getI64IntegerAttr(axis)));
  return true;
}

bool Importer::softmax(bool log) {
  mlir::Value x;
  if (!value(0, x))
    return false;
  int64_t rank = shape(x).size();
  int64_t axis = intAttr("axis", opset_ >= 13 ? -1 : 1);
  if (!normalizeAxis(axis, rank, "axis"))
    return false;
  // Before opset 13 the input was flattened to 2-D at axis: the same as
  // one dimension only when axis is the last.
  if (opset_ < 13 && axis != rank - 1)
    return fail("opset " + std::to_string(opset_) + " softmax over dimensions " +
                std::to_string(axis) + ".. of a rank-" + std::to_string(rank) +
                " input: export with opset 13 or later");
  mlir::Value y =
      log ? b_.create<kiln::LogSoftmaxOp>(loc(), x.getType(), x, b_.getI64IntegerAttr(axis))
                .getResult()
          : b_.create<kiln::SoftmaxOp>(loc(), x.getType(), x, b_.getI64IntegerAttr(axis))
                .getResult();
  setOutput(0, y);
  return true;
}

bool Importer::reduce(kiln::ReduceKind kind) {
  mlir::Value x;
  if (!value(0, x))
    return false;
  int64_t rank = shape(x).size();
  std::optional<std::vector<int64_t>> list;
  // Axes became an input in opset 13 for ReduceSum, 18 for the others.
  if (!axes(kind == kiln::ReduceKind::sum ? 13 : 18, list))
    return false;
  std::set<int64_t> reduced;
  if (!list || list->empty()) {
    if (intAttr("noop_with_empty_axes", 0)) {
      setOutput(0, x);
      return true;
    }
    for (int64_t d = 0; d < rank; ++d)
      reduced.insert(d);
  }
  for (int64_t a : list.value_or(std::vector<int64_t>{})) {
    if (!normalizeAxis(a, rank, "axis"))
      return false;
    reduced.insert(a);
  }
  llvm::SmallVector<int64_t> dims, kept, dimsList(reduced.begin(), reduced.end());
  for (int64_t d = 0; d < rank; ++d) {
    if (!reduced.count(d))
      dims.push_back(shape(x)[d]);
    kept.push_back(reduced.count(d) ? 1 : shape(x)[d]);
  }
  mlir::Value y = b_.create<kiln::ReduceOp>(loc(".reduce"), type(dims, element(x)), kind,
                                            x, arr(dimsList));
  if (intAttr("keepdims", 1))
    y = g_.reshape(nodeName_, y, kept);
  setOutput(0, y);
  return true;
}

bool Importer::layerNorm() {
  mlir::Value x, scale, bias;
  if (!value(0, x) || !value(1, scale))
    return false;
  int64_t rank = shape(x).size();
  int64_t axis = intAttr("axis", -1);
  if (!normalizeAxis(axis, rank, "axis"))
    return false;
  llvm::ArrayRef<int64_t> normalized = shape(x).drop_front(axis);
  if (node_->outputs.size() > 1 &&
      llvm::any_of(llvm::ArrayRef(node_->outputs).drop_front(),
                   [](const std::string &o) { return !o.empty(); }))
    return fail("its Mean and InvStdDev outputs are not supported");
  if (shape(scale) != normalized)
    return fail("Scale is " + shapeText(shape(scale)) + ": expected " +
                shapeText(normalized));
  if (hasInput(2)) {
    if (!value(2, bias))
      return false;
  } else {
    bias = splat(0.0, element(x), normalized);
  }
  if (shape(bias) != normalized)
    return fail("B is " + shapeText(shape(bias)) + ": expected " + shapeText(normalized));
  setOutput(0, b_.create<kiln::LayerNormOp>(loc(), x.getType(), x, scale, bias,
                                            b_.getI64IntegerAttr(axis),
                                            b_.getF64FloatAttr(floatAttr("epsilon", 1e-5f))));
  return true;
}

bool Importer::constantValue(size_t i, mlir::Value &out) {
  if (hasInput(i)) {
    const std::string &name = node_->inputs[i];
    if (auto it = parameterTensors_.find(name);
        it != parameterTensors_.end() && !values_.count(name)) {
      Static s;
      s.dims = it->second->dims;
      s.dataType = it->second->dataType;
      s.values = it->second->toDoubles();
      out = constant(s, name);
      return static_cast<bool>(out);
    }
  }
  return value(i, out);
}

// BatchNormalization over dimension 1 (the channels) of X [N, C, ...].
// training_mode 1 (an export with TrainingMode.TRAINING, PyTorch's train
// mode): each batch's mean and biased variance, the running statistics
// neither read nor kept. training_mode 0: the running statistics (inputs 3
// and 4) as constants, a frozen batch norm. Scale and B are parameters in
// both.
bool Importer::batchNorm() {
  mlir::Value x, scale, bias;
  if (!value(0, x) || !value(1, scale) || !value(2, bias))
    return false;
  llvm::ArrayRef<int64_t> sx = shape(x);
  if (sx.size() < 2)
    return fail("X is " + shapeText(sx) + ": expected [N, C, ...]");
  int64_t channels = sx[1];
  for (mlir::Value v : {scale, bias})
    if (shape(v) != llvm::ArrayRef<int64_t>{channels})
      return fail("scale and B must be [" + std::to_string(channels) + "], found " +
                  shapeText(shape(v)));
  bool training = intAttr("training_mode", 0) != 0 ||
                  (opset_ < 14 && node_->outputs.size() > 1 &&
                   !node_->outputs[1].empty());
  double epsilon = floatAttr("epsilon", 1e-5f);
  llvm::SmallVector<int64_t> others;
  for (int64_t d = 0; d < static_cast<int64_t>(sx.size()); ++d)
    if (d != 1)
      others.push_back(d);
  mlir::Type e = element(x);
  auto perChannel = [&](const std::string &name, mlir::Value v) {
    return g_.broadcast(nodeName_ + name, v, {1}, sx);
  };
  auto channelType = type({channels}, e);
  mlir::Value mean, var;
  if (training) {
    mean = b_.create<kiln::ReduceOp>(loc(".mean"), channelType, kiln::ReduceKind::mean, x,
                                     arr(others));
  } else if (!constantValue(3, mean) || !constantValue(4, var)) {
    return false;
  }
  if (shape(mean) != llvm::ArrayRef<int64_t>{channels} ||
      (var && shape(var) != llvm::ArrayRef<int64_t>{channels}))
    return fail("input_mean and input_var must be [" + std::to_string(channels) + "]");
  mlir::Value centered =
      b_.create<kiln::SubOp>(loc(".centered"), x.getType(), x, perChannel(".mean_b", mean));
  if (training) {
    mlir::Value square =
        b_.create<kiln::MulOp>(loc(".square"), x.getType(), centered, centered);
    var = b_.create<kiln::ReduceOp>(loc(".var"), channelType, kiln::ReduceKind::mean,
                                    square, arr(others));
  }
  mlir::Value shifted = b_.create<kiln::AddOp>(loc(".var_eps"), channelType, var,
                                               splat(epsilon, e, {channels}));
  mlir::Value inverse = b_.create<kiln::RsqrtOp>(loc(".rsqrt"), channelType, shifted);
  mlir::Value gain = b_.create<kiln::MulOp>(loc(".gain"), channelType, inverse, scale);
  mlir::Value y = b_.create<kiln::MulOp>(loc(".scale"), x.getType(), centered,
                                         perChannel(".gain_b", gain));
  y = b_.create<kiln::AddOp>(loc(), x.getType(), y, perChannel(".bias_b", bias));
  setOutput(0, y);
  return true;
}

// Dropout in training mode (input 2 a true constant; opset 12 and later)
// is kiln.dropout with the ratio (input 1, else attribute "ratio" before
// opset 12, else 0.5), reading the step counter, each node with its own
// seed. Otherwise, as at inference, the identity. The mask output (a
// training export names it) is not made: a node reading it fails as
// reading a tensor nothing gives.
bool Importer::dropout() {
  bool training = false;
  if (hasInput(2)) {
    const Static *mode = staticInput(2);
    if (!mode)
      return false;
    training = llvm::any_of(mode->values, [](double v) { return v != 0; });
  }
  double ratio = floatAttr("ratio", 0.5f);
  if (hasInput(1)) {
    const Static *r = staticInput(1);
    if (!r)
      return false;
    if (r->values.size() != 1)
      return fail("ratio is not a scalar");
    ratio = r->values[0];
  }
  mlir::Value x;
  if (!value(0, x))
    return false;
  if (!training || ratio == 0) {
    setOutput(0, x);
    return true;
  }
  if (!(ratio > 0 && ratio < 1))
    return fail("ratio is " + std::to_string(ratio) + ": expected [0, 1)");
  if (!llvm::isa<mlir::FloatType>(element(x)))
    return fail("its input is not floating-point");
  if (!step_)
    step_ = g_.addStepCounter("step");
  setOutput(0, b_.create<kiln::DropoutOp>(loc(), x.getType(), x, step_,
                                          b_.getF64FloatAttr(ratio),
                                          b_.getI64IntegerAttr(nextDropoutSeed_++)));
  return true;
}

bool Importer::gather() {
  // An embedding: rows of a table (axis 0) at integer indices.
  if (intAttr("axis", 0) != 0)
    return fail("axis is not 0: kiln import reads Gather of rows (an embedding)");
  mlir::Value table, indices;
  if (!value(0, table) || !value(1, indices))
    return false;
  if (!element(indices).isInteger(64) && !element(indices).isInteger(32))
    return fail("the indices are not INT64 or INT32");
  llvm::SmallVector<int64_t> dims(shape(indices).begin(), shape(indices).end());
  dims.append(shape(table).begin() + 1, shape(table).end());
  setOutput(0, b_.create<kiln::GatherOp>(loc(), type(dims, element(table)), table, indices));
  return true;
}

bool Importer::constantNode() {
  Static s;
  if (const onnx::Attribute *a = node_->attribute("value"); a && a->t) {
    if (a->t->external)
      return fail("its value is in an external file");
    s.dims = a->t->dims;
    s.dataType = a->t->dataType;
    s.values = a->t->toDoubles();
  } else if ((a = node_->attribute("value_float"))) {
    s.dataType = int32_t(DataType::Float);
    s.values = {a->f};
  } else if ((a = node_->attribute("value_int"))) {
    s.dataType = int32_t(DataType::Int64);
    s.values = {double(a->i)};
  } else if ((a = node_->attribute("value_floats"))) {
    s.dataType = int32_t(DataType::Float);
    s.dims = {int64_t(a->floats.size())};
    s.values.assign(a->floats.begin(), a->floats.end());
  } else if ((a = node_->attribute("value_ints"))) {
    s.dataType = int32_t(DataType::Int64);
    s.dims = {int64_t(a->ints.size())};
    s.values.assign(a->ints.begin(), a->ints.end());
  } else {
    return fail("has no value kiln import reads (value, value_float, "
                "value_int, value_floats or value_ints)");
  }
  setStatic(0, std::move(s));
  return true;
}

// Shape computations on static tensors, evaluated here: Shape of any value
// (every shape is static), and Gather, Concat, Cast and integer arithmetic
// when every input is static.
bool Importer::foldStatic(const std::string &op, bool &folded) {
  folded = false;
  if (op == "Shape") {
    mlir::Value x;
    std::vector<int64_t> dims;
    if (hasInput(0) && statics_.count(node_->inputs[0])) {
      dims = statics_[node_->inputs[0]].dims;
    } else {
      if (!value(0, x))
        return false;
      dims.assign(shape(x).begin(), shape(x).end());
    }
    int64_t rank = dims.size();
    int64_t start = intAttr("start", 0), end = intAttr("end", rank);
    start = std::clamp<int64_t>(start < 0 ? start + rank : start, 0, rank);
    end = std::clamp<int64_t>(end < 0 ? end + rank : end, 0, rank);
    Static s;
    s.dataType = int32_t(DataType::Int64);
    for (int64_t d = start; d < end; ++d)
      s.values.push_back(double(dims[d]));
    s.dims = {int64_t(s.values.size())};
    setStatic(0, std::move(s));
    folded = true;
    return true;
  }
  for (const std::string &in : node_->inputs)
    if (!in.empty() && !statics_.count(in))
      return true;
  if (node_->inputs.empty())
    return true;
  const Static &a = statics_[node_->inputs[0]];
  Static s;
  if (op == "Cast") {
    s = a;
    s.dataType = static_cast<int32_t>(intAttr("to", a.dataType));
    if (!isFloatType(s.dataType))
      for (double &v : s.values)
        v = std::trunc(v);
  } else if (op == "Gather") {
    const Static &idx = statics_[node_->inputs[1]];
    if (a.dims.size() != 1 || intAttr("axis", 0) != 0)
      return true; // not a shape computation: the kiln Gather
    s.dataType = a.dataType;
    s.dims = idx.dims;
    for (double i : idx.values) {
      int64_t k = static_cast<int64_t>(i);
      if (k < 0)
        k += a.values.size();
      if (k < 0 || k >= static_cast<int64_t>(a.values.size()))
        return fail("index " + std::to_string(k) + " is out of range");
      s.values.push_back(a.values[k]);
    }
  } else if (op == "Concat") {
    s.dataType = a.dataType;
    for (const std::string &in : node_->inputs) {
      const Static &part = statics_[in];
      if (part.dims.size() > 1)
        return true;
      s.values.insert(s.values.end(), part.values.begin(), part.values.end());
    }
    s.dims = {int64_t(s.values.size())};
  } else if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div") {
    const Static &c = statics_[node_->inputs[1]];
    if (isFloatType(a.dataType) || isFloatType(c.dataType))
      return true;
    size_t n = std::max(a.values.size(), c.values.size());
    if ((a.values.size() != n && a.values.size() != 1) ||
        (c.values.size() != n && c.values.size() != 1))
      return true;
    s.dataType = a.dataType;
    s.dims = a.values.size() == n ? a.dims : c.dims;
    for (size_t i = 0; i < n; ++i) {
      int64_t x = int64_t(a.values[a.values.size() == 1 ? 0 : i]);
      int64_t y = int64_t(c.values[c.values.size() == 1 ? 0 : i]);
      if (op == "Div" && y == 0)
        return fail("divides by zero");
      s.values.push_back(double(op == "Add" ? x + y
                                : op == "Sub" ? x - y
                                : op == "Mul" ? x * y
                                              : x / y));
    }
  } else {
    return true;
  }
  setStatic(0, std::move(s));
  folded = true;
  return true;
}

bool Importer::node(const onnx::Node &n) {
  node_ = &n;
  nodeName_ = n.name.empty() ? n.opType + "_" + (n.outputs.empty() ? "" : n.outputs[0])
                             : n.name;
  where_ = "node '" + nodeName_ + "' (" + n.opType + "): ";
  if (!n.domain.empty() && n.domain != "ai.onnx")
    return fail("its domain '" + n.domain + "' is not ONNX's");
  if (n.outputs.empty())
    return fail("has no outputs");
  const std::string &op = n.opType;
  bool folded = false;
  if (op == "Constant")
    return constantNode();
  if (!foldStatic(op, folded))
    return false;
  if (folded)
    return true;
  if (op == "Unsqueeze" || op == "Squeeze" || op == "Reshape" || op == "Flatten")
    return reshapeLike(op);
  static const std::set<std::string> kUnary = {
      "Relu", "Tanh", "Sigmoid", "Exp", "Log", "Neg", "Abs", "Sqrt", "Reciprocal",
      "Erf", "Sin", "Cos", "Gelu", "LeakyRelu", "Identity"};
  if (kUnary.count(op))
    return unary(op);
  if (op == "Dropout")
    return dropout();
  if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div" || op == "Pow" ||
      op == "Max" || op == "Min")
    return binary(op);
  if (op == "Gemm")
    return gemm();
  if (op == "MatMul")
    return matmul();
  if (op == "Conv")
    return conv();
  if (op == "MaxPool" || op == "AveragePool")
    return pool(op == "MaxPool");
  if (op == "GlobalAveragePool" || op == "GlobalMaxPool")
    return globalPool(op == "GlobalMaxPool");
  if (op == "Transpose")
    return transpose();
  if (op == "Concat")
    return concat();
  if (op == "Softmax" || op == "LogSoftmax")
    return softmax(op == "LogSoftmax");
  if (op == "ReduceMean")
    return reduce(kiln::ReduceKind::mean);
  if (op == "ReduceSum")
    return reduce(kiln::ReduceKind::sum);
  if (op == "ReduceMax")
    return reduce(kiln::ReduceKind::max);
  if (op == "ReduceMin")
    return reduce(kiln::ReduceKind::min);
  if (op == "LayerNormalization")
    return layerNorm();
  if (op == "BatchNormalization")
    return batchNorm();
  if (op == "Gather")
    return gather();
  if (op == "Cast") {
    mlir::Value x;
    mlir::Type e;
    if (!value(0, x) || !elementType(intAttr("to", 0), e, "its target type"))
      return false;
    setOutput(0, e == element(x) ? x
                                 : b_.create<kiln::ConvertOp>(loc(), type(shape(x), e), x)
                                       .getResult());
    return true;
  }
  return fail("kiln import does not read this op; it reads " +
              std::string(onnxSupportedOps()));
}

bool Importer::finish(OnnxImport &out) {
  where_.clear();
  const std::vector<onnx::ValueInfo> &outputs = model_.graph.outputs;
  if (outputs.size() != 1)
    return fail("the graph has " + std::to_string(outputs.size()) +
                " outputs: kiln import adds a loss to one (the logits or "
                "the prediction)");
  auto found = values_.find(outputs[0].name);
  if (found == values_.end())
    return fail("the graph's output '" + outputs[0].name +
                "' is no node's output (or a constant)");
  mlir::Value y = found->second;
  if (!llvm::isa<mlir::FloatType>(element(y)))
    return fail("the graph's output '" + outputs[0].name + "' is not FLOAT");
  mlir::Value loss;
  nodeName_ = "loss";
  if (options_.loss == OnnxLoss::crossEntropy) {
    if (shape(y).size() != 2)
      return fail("the graph's output '" + outputs[0].name + "' is " +
                  shapeText(shape(y)) +
                  ": a cross-entropy loss needs logits [batch, classes] "
                  "(--loss=mse fits any shape)");
    mlir::Value labels = g_.addLabel("labels", {shape(y)[0]}, g_.i32());
    loss = g_.meanCrossEntropy("loss", y, labels);
  } else {
    mlir::Value targets = g_.addLabel("targets", shape(y), element(y));
    mlir::Value diff = b_.create<kiln::SubOp>(g_.loc("loss.error"), y.getType(), y, targets);
    mlir::Value square =
        b_.create<kiln::MulOp>(g_.loc("loss.square"), y.getType(), diff, diff);
    llvm::SmallVector<int64_t> all;
    for (int64_t d = 0; d < static_cast<int64_t>(shape(y).size()); ++d)
      all.push_back(d);
    loss = b_.create<kiln::ReduceOp>(g_.loc("loss"), type({}, element(y)),
                                     kiln::ReduceKind::mean, square, arr(all));
  }
  // The parameters' values, as read (every one a kiln op reads).
  for (const auto &[name, tensor] : parameterTensors_) {
    if (!values_.count(name))
      continue;
    std::vector<double> d = tensor->toDoubles();
    out.weights.tensors.push_back(runtime::SafeTensor::fromF32(
        name, tensor->dims, std::vector<float>(d.begin(), d.end())));
  }
  if (out.weights.tensors.empty())
    return fail("the graph has no floating-point initializer that a node "
                "reads: there are no parameters to train");
  out.weights.metadata["format"] = "pt";
  out.module = g_.finish(loss, makeTraining(b_.getContext(), options_.training.optimizer,
                                             options_.training.learningRate));
  return static_cast<bool>(out.module);
}

bool Importer::run(OnnxImport &out) {
  opset_ = model_.defaultOpset();
  nextDropoutSeed_ = options_.training.seed * 1000 + 1;
  if (opset_ < 7)
    return fail("the model imports ONNX opset " + std::to_string(opset_) +
                ": kiln import reads opset 7 and later");
  if (!readInitializers() || !readInputs())
    return false;
  for (const onnx::Node &n : model_.graph.nodes)
    if (!node(n))
      return false;
  out.nodes = model_.graph.nodes.size();
  return finish(out);
}

} // namespace

const char *onnxSupportedOps() {
  return "Abs, Add, AveragePool, BatchNormalization, Cast, Concat, Constant, "
         "Conv, Cos, Div, "
         "Dropout, Erf, Exp, Flatten, Gather, Gelu, Gemm, GlobalAveragePool, "
         "GlobalMaxPool, Identity, LayerNormalization, LeakyRelu, Log, "
         "LogSoftmax, MatMul, Max, MaxPool, Min, Mul, Neg, Pow, Reciprocal, "
         "ReduceMax, ReduceMean, ReduceMin, ReduceSum, Relu, Reshape, Shape, "
         "Sigmoid, Sin, Softmax, Sqrt, Squeeze, Sub, Tanh, Transpose, "
         "Unsqueeze";
}

bool importOnnx(const onnx::Model &model, const std::string &path,
                const OnnxImportOptions &options, mlir::MLIRContext *context,
                OnnxImport &out, llvm::StringRef command, llvm::raw_ostream &errs) {
  Importer importer(model, path, options, context, command, errs);
  return importer.run(out);
}

} // namespace kiln::cli
