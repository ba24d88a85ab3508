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

#include "tools/kiln/lib/OnnxImporter.h"

#include "llvm/ADT/STLExtras.h"

#include <cmath>
#include <cstring>

namespace kiln::cli {
namespace onnx_import {

namespace {

// ONNX Runtime's quantized ops of its own domain (QOperator models), the
// only ops of a domain other than ONNX's that kiln import reads (node()),
// through Importer::qlinearMicrosoft (readers()). Sorted, as errors list
// them.
constexpr const char *kMicrosoftOps[] = {"QGemm",
                                         "QLinearAdd",
                                         "QLinearAveragePool",
                                         "QLinearConcat",
                                         "QLinearGlobalAveragePool",
                                         "QLinearLeakyRelu",
                                         "QLinearMul",
                                         "QLinearSigmoid"};

bool isMicrosoftOp(const std::string &op) {
  return llvm::is_contained(kMicrosoftOps, op);
}

} // namespace

bool Importer::elementType(int32_t onnxType, mlir::Type &out,
                           const std::string &what) {
  switch (static_cast<DataType>(onnxType)) {
  case DataType::Float:
    out = b_.getF32Type();
    return true;
  case DataType::Double:
    out = b_.getF64Type();
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
    return fail(
        what + " has element type " + onnx::dataTypeName(onnxType) +
        " (kiln import reads FLOAT, DOUBLE, INT64, INT32 and BOOL data)");
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
    // Shapes derived from an input (products, constants of its shape) stay
    // within int64: at most 2^31 along an axis and 2^40 elements.
    int64_t elements = 1;
    for (int64_t d : dims)
      if (d > kMaxExtent || __builtin_mul_overflow(elements, d, &elements) ||
          elements > (int64_t(1) << 40))
        return fail("its shape " + shapeText(dims) +
                    " is past 2^31 along an axis or 2^40 elements");
    mlir::Type e;
    if (!elementType(in.elemType, e, "it"))
      return false;
    values_[in.name] = g_.addInput(in.name, dims, e);
  }
  where_.clear();
  return true;
}

// Which floating-point initializers are parameters. ONNX does not say; the
// torch.export exporter records each original tensor's kind in its
// value_info metadata (PARAMETER, BUFFER, CONSTANT_TENSOR), but its
// constant folding also writes new initializers without it: a parameter's
// transpose (a parameter still) or a folded constant such as attention's
// 1/sqrt(head_dim) or a causal mask. So an initializer is a constant when
// its kind is CONSTANT_TENSOR, when it holds an infinity, a NaN or a
// magnitude of 1e30 or more (a mask, whose -inf PyTorch writes as the
// float's lowest value: no parameter holds one), or, in a torch.export
// model, when it has no kind and one element (a folded scalar; PyTorch's
// one-element parameters carry their kind) or when the optimizer's record
// of what it was folded from (`pkg.onnxscript.optimizer.folded_from`,
// every value a chain of folds read) names no parameter (a
// torch.zeros_like folded from an activation's shape; a weight's
// transpose names the weight); a BUFFER (a registered
// buffer) is a constant where a node reads it, and a batch norm's running
// statistic where one does. Every other is a parameter.
bool Importer::readInitializers() {
  static const char *kKind = "pkg.torch.export.graph_signature.InputSpec.kind";
  static const char *kFoldedFrom = "pkg.onnxscript.optimizer.folded_from";
  std::map<std::string, std::string> kinds, foldedFrom;
  for (const onnx::ValueInfo &info : model_.graph.valueInfos)
    for (const auto &[key, value] : info.metadata) {
      if (key == kKind)
        kinds[info.name] = value;
      if (key == kFoldedFrom)
        foldedFrom[info.name] = value;
    }
  for (const auto &[key, value] : model_.graph.metadata)
    if (key == "pkg.torch.export.ExportedProgram.graph_signature")
      signature_ = value;
  bool exported = !signature_.empty();
  std::vector<std::string> listed = signatureParameters();
  std::set<std::string> parameters(listed.begin(), listed.end());
  // Whether |name|'s folded_from record ("['act.weight', 'val_5']") names
  // a parameter; true without a record.
  auto foldedFromParameter = [&](const std::string &name) {
    auto record = foldedFrom.find(name);
    if (record == foldedFrom.end())
      return true;
    const std::string &text = record->second;
    for (size_t open = text.find('\''); open != std::string::npos;) {
      size_t close = text.find('\'', open + 1);
      if (close == std::string::npos)
        break;
      if (parameters.count(text.substr(open + 1, close - open - 1)))
        return true;
      open = text.find('\'', close + 1);
    }
    return false;
  };
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
    auto kind = kinds.find(t.name);
    // A scalar is a constant, unless it is a parameter of the model: the
    // torch.export exporter says so, and the TorchScript exporter keeps
    // only parameters and buffers as initializers under their state-dict
    // keys (its own constants are Constant nodes or onnx::-named).
    bool scalarParameter =
        t.dims.empty() && isFloatType(t.dataType) &&
        ((kind != kinds.end() && kind->second == "PARAMETER") ||
         (!exported && model_.producerName == "pytorch" &&
          t.name.find("::") == std::string::npos));
    if (isFloatType(t.dataType) && (!t.dims.empty() || scalarParameter)) {
      bool constant =
          (kind != kinds.end() && kind->second == "CONSTANT_TENSOR") ||
          llvm::any_of(s.values,
                       [](double v) {
                         return !std::isfinite(v) || std::abs(v) >= 1e30;
                       }) ||
          (exported && kind == kinds.end() &&
           (s.values.size() == 1 || !foldedFromParameter(t.name)));
      if (!constant) {
        parameterTensors_[t.name] = &t; // made a parameter where it is read
        if (kind != kinds.end() && kind->second == "BUFFER")
          buffers_.insert(t.name);
        continue;
      }
    }
    statics_[t.name] = std::move(s);
  }
  where_.clear();
  return true;
}

// Both PyTorch exporters merge initializers of equal values: a model's
// freshly initialized norms all read one tensor of ones (and one of
// zeros), where PyTorch trains a tensor per module. An initializer whose
// elements are all equal, read by more than one node, is therefore one
// parameter per node that reads it: the first keeps its name; the others
// are named after the Identity the TorchScript exporter writes for each
// merged tensor (its output is the state dict's key), or after their
// node's module where the node's name gives one ("/enc/norm1/Add" makes
// "enc.norm1.bias" of "ln1.bias"), else NAME.K.
// Tied weights (an embedding and a head sharing one random matrix) are not
// all equal and stay one parameter.
bool Importer::sharedUniform(const std::string &name) {
  auto it = parameterTensors_.find(name);
  if (it == parameterTensors_.end() || buffers_.count(name))
    return false;
  auto readers = consumers_.find(name);
  if (readers == consumers_.end() ||
      std::set<const onnx::Node *>(readers->second.begin(), readers->second.end()).size() < 2)
    return false;
  // Element by element on the stored bytes, stopping at the first that
  // differs (at once for a random weight, however large), once per tensor.
  auto [known, added] = uniform_.try_emplace(name, true);
  if (added) {
    const onnx::Tensor &t = *it->second;
    size_t width = onnx::dataTypeSize(t.dataType);
    for (size_t at = width; width && at + width <= t.data.size() && known->second; at += width)
      known->second = std::memcmp(t.data.data() + at, t.data.data(), width) == 0;
  }
  return known->second;
}

std::string Importer::copyName(const std::string &name) {
  // The TorchScript exporter writes each merged tensor as an Identity of
  // the one it kept, its output named with the state dict's key.
  if (node_->opType == "Identity" && node_->outputs.size() == 1 &&
      !parameterTensors_.count(node_->outputs[0]) && !usedNames_.count(node_->outputs[0]))
    return node_->outputs[0];
  std::string field = name.substr(name.rfind('.') == std::string::npos ? 0
                                                                        : name.rfind('.') + 1);
  const std::string &node = node_->name;
  if (node.size() > 1 && node[0] == '/' && node.rfind('/') > 0) {
    std::string module = node.substr(1, node.rfind('/') - 1);
    std::replace(module.begin(), module.end(), '/', '.');
    std::string candidate = module + "." + field;
    if (!parameterTensors_.count(candidate) && !usedNames_.count(candidate))
      return candidate;
  }
  for (int k = 1;; ++k) {
    std::string candidate = name + "." + std::to_string(k);
    if (!parameterTensors_.count(candidate) && !usedNames_.count(candidate))
      return candidate;
  }
}

mlir::Value Importer::makeParameter(const std::string &name, const onnx::Tensor &t,
                                    const std::string &as) {
  usedNames_.insert(as);
  // DOUBLE initializers (a model in float64) train in f64; the others in
  // f32 (FLOAT16 and BFLOAT16 ones too: mixed precision is kiln's).
  mlir::Type e = t.dataType == int32_t(DataType::Double) ? b_.getF64Type()
                                                         : b_.getF32Type();
  auto init = initOverrides_.find(as);
  if (init == initOverrides_.end())
    init = initOverrides_.find(name);
  if (init != initOverrides_.end())
    return g_.addParameter(as, t.dims, init->second.first, init->second.second,
                           /*scale=*/1.0, e);
  return g_.addParameter(
      as, t.dims, kiln::InitKind::uniform, 0.0,
      1.0 / std::sqrt(double(std::max<int64_t>(fanInOf(name, t.dims), 1))), e);
}

bool Importer::staticFits(llvm::ArrayRef<int64_t> dims,
                          const std::string &what) {
  int64_t n = 1;
  for (int64_t d : dims)
    if (d < 0 || __builtin_mul_overflow(n, d, &n) || n > kMaxStaticElements)
      return fail(what +
                  ": kiln import evaluates constants of at most 2^25 elements");
  return true;
}

int64_t Importer::fanInOf(const std::string &name,
                          llvm::ArrayRef<int64_t> dims) {
  if (auto it = fanIn_.find(name); it != fanIn_.end())
    return it->second;
  return dims.size() > 1 ? product(dims.drop_front())
         : dims.empty()  ? 1
                         : dims[0];
}

bool Importer::value(size_t i, mlir::Value &out) {
  if (!hasInput(i))
    return fail("input " + std::to_string(i) + " is missing");
  return named(node_->inputs[i], out);
}

bool Importer::floatValue(size_t i, mlir::Value &out) {
  if (!value(i, out))
    return false;
  if (!llvm::isa<mlir::FloatType>(element(out)))
    return fail("its input is not floating-point");
  return true;
}

bool Importer::named(const std::string &name, mlir::Value &out) {
  if (sharedUniform(name)) {
    // An Identity (the TorchScript exporter's alias of a merged tensor)
    // always reads a copy named after its output; the first other node
    // keeps the initializer's own name.
    bool alias = node_->opType == "Identity";
    auto owner = alias ? nullptr : firstReader_.try_emplace(name, node_).first->second;
    if (owner != node_) {
      auto [copy, added] = copies_.try_emplace({name, node_});
      if (added) {
        std::string as = copyName(name);
        copy->second = makeParameter(name, *parameterTensors_[name], as);
        copyTensors_.push_back({as, parameterTensors_[name]});
      }
      out = copy->second;
      return true;
    }
  }
  if (quantized_.count(name) && !readingQuantized_)
    return fail("reads '" + name + "', quantized " +
                onnx::dataTypeName(quantized_[name]) +
                " integers: kiln import reads those only through a "
                "DequantizeLinear, a QLinear or integer op, an op that "
                "moves elements (Reshape, MaxPool, Concat, ...), or a Cast "
                "to a float type");
  if (auto it = values_.find(name); it != values_.end()) {
    out = it->second;
    return true;
  }
  if (auto it = parameterTensors_.find(name);
      it != parameterTensors_.end() && buffers_.count(name)) {
    // A registered buffer read as a value: a constant.
    out = constant(initializerStatic(name, *it->second), name);
    if (!out)
      return false;
    values_[name] = out;
    return true;
  }
  if (auto it = parameterTensors_.find(name); it != parameterTensors_.end()) {
    out = makeParameter(name, *it->second, name);
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
  if (it == statics_.end() && parameterTensors_.count(node_->inputs[i]) &&
      parameterTensors_[node_->inputs[i]]->dims.empty())
    return constInput(i); // a scalar parameter read where a constant is needed
  if (it == statics_.end()) {
    fail("input " + std::to_string(i) + " ('" + node_->inputs[i] +
         "') must be a constant: an initializer, a Constant node or a "
         "computation on shapes");
    return nullptr;
  }
  return &it->second;
}

bool Importer::staticIndex(size_t i, const std::string &what, int64_t &out) {
  const Static *s = staticInput(i);
  if (!s)
    return false;
  if (s->values.size() != 1)
    return fail(what + " has " + std::to_string(s->values.size()) +
                " values: expected one");
  out = toIndex(s->values[0]);
  return true;
}

void Importer::initializeAs(const std::string &name, kiln::InitKind kind, double value) {
  if (parameterTensors_.count(name) && !values_.count(name))
    initOverrides_.try_emplace(name, kind, value);
}

const Static &Importer::initializerStatic(const std::string &name,
                                          const onnx::Tensor &t) {
  auto [cached, added] = initializerStatics_.try_emplace(name);
  if (added) {
    cached->second.dims = t.dims;
    cached->second.dataType = t.dataType;
    cached->second.values = t.toDoubles();
  }
  return cached->second;
}

const Static *Importer::constInput(size_t i) {
  if (hasInput(i)) {
    const std::string &name = node_->inputs[i];
    if (auto it = parameterTensors_.find(name);
        it != parameterTensors_.end() && !statics_.count(name))
      return &initializerStatic(name, *it->second);
  }
  return staticInput(i);
}

mlir::Value Importer::constant(const Static &s, const std::string &name,
                               mlir::Type floatType) {
  if (product(s.dims) == 0) {
    fail("'" + name + "' is empty (" + shapeText(s.dims) +
         "): kiln tensors are not empty");
    return nullptr;
  }
  mlir::Type e;
  // FLOAT16 and BFLOAT16 constants are made f32 (kiln's mixed precision
  // picks the types it computes in); a DOUBLE one keeps its type, as the
  // f64 values it meets after a Cast to DOUBLE do (torch.quantile's
  // export selects between DOUBLE constants and subtracts a Cast from it).
  int32_t t = s.dataType;
  if (isFloatType(t) && t != int32_t(DataType::Double))
    t = int32_t(DataType::Float);
  if (!elementType(t, e, "constant '" + name + "'"))
    return nullptr;
  if (floatType && llvm::isa<mlir::FloatType>(e))
    e = floatType;
  auto tt = type(s.dims, e);
  mlir::DenseElementsAttr attr;
  if (e.isF64()) {
    attr = mlir::DenseElementsAttr::get(tt, llvm::ArrayRef<double>(s.values));
  } else if (llvm::isa<mlir::FloatType>(e)) {
    llvm::SmallVector<float> v(s.values.begin(), s.values.end());
    attr = mlir::DenseElementsAttr::get(tt, llvm::ArrayRef<float>(v));
  } else {
    llvm::SmallVector<llvm::APInt> v;
    for (double d : s.values)
      v.push_back(e.isInteger(1)
                      ? llvm::APInt(1, d != 0 ? 1 : 0)
                      : llvm::APInt(e.getIntOrFloatBitWidth(), static_cast<int64_t>(d),
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
    s.values = {decimalOf(a->f)};
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

// Shape computations on static tensors, evaluated here: Shape and Size of
// any value (every shape is static), and Identity, Gather, Concat, Cast and
// integer arithmetic when every input is static.
bool Importer::foldStatic(const std::string &op, bool &folded) {
  folded = false;
  if (op == "Shape" || op == "Size") {
    std::vector<int64_t> dims;
    if (hasInput(0) && statics_.count(node_->inputs[0])) {
      dims = statics_[node_->inputs[0]].dims;
    } else {
      mlir::Value x;
      if (!value(0, x))
        return false;
      dims.assign(shape(x).begin(), shape(x).end());
    }
    folded = true;
    if (op == "Size") {
      setStatic(0,
                Static{{}, {double(product(dims))}, int32_t(DataType::Int64)});
      return true;
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
    return true;
  }
  if (op == "EyeLike")
    return eyeLike(folded);
  for (const std::string &in : node_->inputs)
    if (!in.empty() && !statics_.count(in))
      return true;
  if (node_->inputs.empty())
    return true;
  const Static &a = statics_[node_->inputs[0]];
  Static s;
  if (op == "Identity") {
    s = a; // a Loop body's condition passed through, for one
  } else if (op == "Cast" || (op == "CastLike" && node_->inputs.size() == 2)) {
    // CastLike takes its second input's type (torch.export's index
    // arithmetic inside a Loop body: CastLike of a constant one).
    s = a;
    s.dataType = op == "Cast" ? static_cast<int32_t>(intAttr("to", a.dataType))
                              : statics_[node_->inputs[1]].dataType;
    if (!isFloatType(s.dataType))
      for (double &v : s.values)
        v = std::trunc(v);
  } else if (op == "Gather") {
    if (!hasInput(1))
      return true; // the kiln Gather says what is missing
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
  } else if (op == "CumSum") {
    // Of values known at import (torch.diagonal's index arithmetic).
    if (!hasInput(1) || statics_[node_->inputs[1]].values.size() != 1)
      return fail("expected one axis (input 1)");
    int64_t rank = a.dims.size();
    int64_t axis = toIndex(statics_[node_->inputs[1]].values[0]);
    if (!normalizeAxis(axis, rank, "axis"))
      return false;
    bool exclusive = intAttr("exclusive", 0) != 0,
         reverse = intAttr("reverse", 0) != 0;
    int64_t inner = 1;
    for (int64_t d = axis + 1; d < rank; ++d)
      inner *= a.dims[d];
    int64_t extent = rank ? a.dims[axis] : 1;
    s = a;
    for (size_t base = 0; base < a.values.size(); ++base) {
      if ((base / inner) % extent != 0)
        continue; // not the first element of its line along the axis
      double sum = 0;
      for (int64_t j = 0; j < extent; ++j) {
        int64_t k = reverse ? extent - 1 - j : j;
        size_t at = base + k * inner;
        double v = a.values[at];
        s.values[at] = exclusive ? sum : sum + v;
        sum += v;
      }
    }
  } else if (op == "ReduceProd") {
    // The TorchScript exporter's element count of some axes (torch.var's
    // divisor): the product of a shape's entries.
    std::optional<std::vector<int64_t>> list;
    if (!axes(18, list))
      return false;
    int64_t rank = a.dims.size();
    std::vector<bool> reduced(rank, !list || list->empty());
    if ((!list || list->empty()) && intAttr("noop_with_empty_axes", 0))
      reduced.assign(rank, false);
    for (int64_t axis : list.value_or(std::vector<int64_t>{})) {
      if (!normalizeAxis(axis, rank, "axis"))
        return false;
      reduced[axis] = true;
    }
    bool keep = intAttr("keepdims", 1) != 0;
    // Each element's place in the result: its index along the kept axes.
    std::vector<int64_t> kept, place(a.values.size(), 0);
    for (int64_t d = 0; d < rank; ++d)
      if (!reduced[d])
        kept.push_back(d);
    int64_t count = 1;
    for (int64_t d : kept)
      count *= a.dims[d];
    for (size_t i = 0; i < a.values.size(); ++i) {
      int64_t rest = i, at = 0, scale = 1;
      for (int64_t d = rank - 1; d >= 0; --d) {
        int64_t index = rest % a.dims[d];
        rest /= a.dims[d];
        if (!reduced[d]) {
          at += index * scale;
          scale *= a.dims[d];
        }
      }
      place[i] = at;
    }
    s.dataType = a.dataType;
    s.values.assign(count, 1.0);
    for (size_t i = 0; i < a.values.size(); ++i)
      s.values[place[i]] *= a.values[i];
    for (int64_t d = 0; d < rank; ++d)
      if (!reduced[d] || keep)
        s.dims.push_back(reduced[d] ? 1 : a.dims[d]);
  } else if ((op == "Add" || op == "Sub" || op == "Mul" || op == "Div" ||
              op == "Min" || op == "Max") &&
             node_->inputs.size() == 2 && hasInput(1)) {
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
      int64_t x = toIndex(a.values[a.values.size() == 1 ? 0 : i]);
      int64_t y = toIndex(c.values[c.values.size() == 1 ? 0 : i]);
      if (op == "Div" && y == 0)
        return fail("divides by zero");
      int64_t r = 0;
      bool overflow = op == "Add"   ? __builtin_add_overflow(x, y, &r)
                      : op == "Sub" ? __builtin_sub_overflow(x, y, &r)
                      : op == "Mul" ? __builtin_mul_overflow(x, y, &r)
                                    : false;
      if (overflow)
        return fail("overflows int64 on the values " + std::to_string(x) +
                    " and " + std::to_string(y));
      if (op == "Min" || op == "Max" || op == "Div")
        r = op == "Min" ? std::min(x, y) : op == "Max" ? std::max(x, y) : x / y;
      s.values.push_back(double(r));
    }
  } else {
    return true;
  }
  setStatic(0, std::move(s));
  folded = true;
  return true;
}

// EyeLike: ones on the k-th diagonal of a matrix the input's shape, in
// dtype (else the input's type). Only the input's shape is read, which
// kiln knows at import: a static value.
bool Importer::eyeLike(bool &folded) {
  std::vector<int64_t> dims;
  int32_t dataType = int32_t(DataType::Float);
  if (hasInput(0) && statics_.count(node_->inputs[0])) {
    const Static &a = statics_[node_->inputs[0]];
    dims = a.dims;
    dataType = a.dataType;
  } else {
    mlir::Value x;
    if (!value(0, x))
      return false;
    dims.assign(shape(x).begin(), shape(x).end());
    mlir::Type e = element(x);
    dataType = int32_t(e.isInteger(64)   ? DataType::Int64
                       : e.isInteger(32) ? DataType::Int32
                       : e.isInteger(1)  ? DataType::Bool
                                         : DataType::Float);
  }
  if (dims.size() != 2)
    return fail("its input is " + shapeText(dims) + ": expected a matrix");
  if (!staticFits(dims, "its input is " + shapeText(dims)))
    return false;
  Static s;
  s.dataType = static_cast<int32_t>(intAttr("dtype", dataType));
  s.dims = dims;
  int64_t k = intAttr("k", 0);
  for (int64_t row = 0; row < dims[0]; ++row)
    for (int64_t col = 0; col < dims[1]; ++col)
      s.values.push_back(col - row == k ? 1.0 : 0.0);
  setStatic(0, std::move(s));
  folded = true;
  return true;
}

bool Importer::node(const onnx::Node &n) {
  node_ = &n;
  std::string name =
      n.name.empty() ? n.opType + "_" + (n.outputs.empty() ? "" : n.outputs[0])
                     : n.name;
  nodeName_ = prefix_ + name;
  where_ = "node '" + name + "' (" + n.opType + ")" + scope_ + ": ";
  bool microsoft = n.domain == "com.microsoft";
  if (microsoft && !isMicrosoftOp(n.opType)) {
    std::string list;
    for (const char *op : kMicrosoftOps)
      list += (list.empty() ? "" : ", ") + std::string(op);
    return fail("kiln import reads only these ops of domain 'com.microsoft': " +
                list);
  }
  if (!microsoft && !n.domain.empty() && n.domain != "ai.onnx")
    return fail("its domain '" + n.domain + "' is not ONNX's");
  if (!microsoft && isMicrosoftOp(n.opType))
    return fail("is an op of domain 'com.microsoft' (ONNX Runtime's), not "
                "ONNX's: expected domain 'com.microsoft'");
  if (n.outputs.empty())
    return fail("has no outputs");
  const std::string &op = n.opType;
  auto reader = readers().find(op);
  if (reader == readers().end())
    return fail("kiln import does not read this op; it reads " +
                supportedOps());
  bool folded = false;
  if (!foldStatic(op, folded))
    return false;
  if (!folded && !foldStaticData(op, folded))
    return false;
  if (folded)
    return true;
  return readMovingQuantized(op, reader->second);
}

bool Importer::cast(const std::string &op) {
  mlir::Value x, like;
  mlir::Type e;
  if (op == "Cast" && hasInput(0) && quantized_.count(node_->inputs[0])) {
    // Quantized integers (kept as a float tensor) to a float type: the
    // values they hold (MatMulInteger's INT32 product before its scale).
    if (!elementType(intAttr("to", 0), e, "its target type"))
      return false;
    if (!llvm::isa<mlir::FloatType>(e))
      return fail("casts quantized " +
                  onnx::dataTypeName(quantized_[node_->inputs[0]]) +
                  " integers to " +
                  onnx::dataTypeName(static_cast<int32_t>(intAttr("to", 0))) +
                  ": kiln import reads them as float values only");
    x = values_[node_->inputs[0]];
    setOutput(0, e == element(x)
                     ? x
                     : b_.create<kiln::ConvertOp>(loc(), type(shape(x), e), x)
                           .getResult());
    return true;
  }
  if (op == "CastLike") {
    if (!value(0, x) || !value(1, like))
      return false;
    e = element(like);
  } else if (!value(0, x) ||
             !elementType(intAttr("to", 0), e, "its target type")) {
    return false;
  }
  setOutput(0, e == element(x)
                   ? x
                   : b_.create<kiln::ConvertOp>(loc(), type(shape(x), e), x)
                         .getResult());
  return true;
}

bool Importer::staticOnly(const std::string &op) {
  return fail("its inputs are not known at import: kiln evaluates " + op +
              " on constants and shapes only (every kiln shape is static)");
}

const std::map<std::string, Importer::OpReader> &Importer::readers() {
  static const std::map<std::string, OpReader> table = [] {
    std::map<std::string, OpReader> t;
    auto add = [&](std::initializer_list<const char *> names, OpReader read) {
      for (const char *name : names)
        t[name] = read;
    };
    // Evaluated at import (foldStatic, foldStaticData) when their inputs
    // are known there, which Shape's, Size's and EyeLike's always are.
    add({"Shape", "Size", "EyeLike", "Range", "ConstantOfShape"},
        [](Importer &i, const std::string &op) { return i.staticOnly(op); });
    add({"Constant"},
        [](Importer &i, const std::string &) { return i.constantNode(); });
    add({"Unsqueeze", "Squeeze", "Reshape", "Flatten"},
        [](Importer &i, const std::string &op) { return i.reshapeLike(op); });
    add({"Relu",        "Tanh",      "Sigmoid",
         "Exp",         "Log",       "Neg",
         "Abs",         "Sqrt",      "Reciprocal",
         "Erf",         "Sin",       "Cos",
         "Floor",       "Ceil",      "Round",
         "Sign",        "IsNaN",     "IsInf",
         "Gelu",        "LeakyRelu", "Identity",
         "HardSigmoid", "HardSwish", "Softplus",
         "Elu",         "Mish",      "Softsign",
         "Selu",        "Celu",      "ThresholdedRelu",
         "Shrink",      "Tan",       "Sinh",
         "Cosh",        "Asinh",     "Acosh",
         "Atanh",       "Atan",      "Asin",
         "Acos",        "Swish"},
        [](Importer &i, const std::string &op) { return i.unary(op); });
    add({"Dropout"},
        [](Importer &i, const std::string &) { return i.dropout(); });
    add({"RandomUniform", "RandomNormal", "RandomUniformLike",
         "RandomNormalLike", "Bernoulli"},
        [](Importer &i, const std::string &op) { return i.random(op); });
    add({"Multinomial"},
        [](Importer &i, const std::string &) { return i.multinomial(); });
    add({"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min"},
        [](Importer &i, const std::string &op) { return i.binary(op); });
    add({"Mod"}, [](Importer &i, const std::string &) { return i.mod(); });
    add({"Sum", "Mean"},
        [](Importer &i, const std::string &op) { return i.variadic(op); });
    add({"Clip"}, [](Importer &i, const std::string &) { return i.clip(); });
    add({"PRelu"}, [](Importer &i, const std::string &) { return i.prelu(); });
    add({"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"},
        [](Importer &i, const std::string &op) { return i.compare(op); });
    add({"Where"}, [](Importer &i, const std::string &) { return i.where(); });
    add({"Trilu"}, [](Importer &i, const std::string &) { return i.trilu(); });
    add({"Slice"}, [](Importer &i, const std::string &) { return i.slice(); });
    add({"Split"}, [](Importer &i, const std::string &) { return i.split(); });
    add({"SplitToSequence"},
        [](Importer &i, const std::string &) { return i.splitToSequence(); });
    add({"SequenceAt"},
        [](Importer &i, const std::string &) { return i.sequenceAt(); });
    add({"Pad"}, [](Importer &i, const std::string &) { return i.pad(); });
    add({"Expand"},
        [](Importer &i, const std::string &) { return i.expand(); });
    add({"GroupNormalization"},
        [](Importer &i, const std::string &) { return i.groupNorm(); });
    add({"RMSNormalization"},
        [](Importer &i, const std::string &) { return i.rmsNorm(); });
    add({"GatherND"},
        [](Importer &i, const std::string &) { return i.gatherNd(); });
    add({"Hardmax"},
        [](Importer &i, const std::string &) { return i.hardmax(); });
    add({"SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss"},
        [](Importer &i, const std::string &op) {
          return i.classLoss(op == "SoftmaxCrossEntropyLoss");
        });
    add({"OneHot"},
        [](Importer &i, const std::string &) { return i.oneHot(); });
    add({"InstanceNormalization"},
        [](Importer &i, const std::string &) { return i.instanceNorm(); });
    add({"ConvTranspose"},
        [](Importer &i, const std::string &) { return i.convTranspose(); });
    add({"Resize", "Upsample"}, [](Importer &i, const std::string &op) {
      return i.resize(op == "Upsample");
    });
    add({"GridSample"},
        [](Importer &i, const std::string &) { return i.gridSample(); });
    add({"Einsum"},
        [](Importer &i, const std::string &) { return i.einsum(); });
    add({"DFT"}, [](Importer &i, const std::string &) { return i.dft(); });
    add({"STFT"}, [](Importer &i, const std::string &) { return i.stft(); });
    add({"Det"}, [](Importer &i, const std::string &) { return i.det(); });
    add({"LRN"}, [](Importer &i, const std::string &) { return i.lrn(); });
    add({"Attention"},
        [](Importer &i, const std::string &) { return i.attention(); });
    add({"RotaryEmbedding"},
        [](Importer &i, const std::string &) { return i.rotaryEmbedding(); });
    add({"MaxPool", "AveragePool", "LpPool"},
        [](Importer &i, const std::string &op) {
          return i.pool(op == "MaxPool", /*lp=*/op == "LpPool");
        });
    add({"GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"},
        [](Importer &i, const std::string &op) {
          return i.globalPool(op == "GlobalMaxPool",
                              /*lp=*/op == "GlobalLpPool");
        });
    add({"MaxUnpool"},
        [](Importer &i, const std::string &) { return i.maxUnpool(); });
    add({"CumProd"},
        [](Importer &i, const std::string &) { return i.cumProd(); });
    add({"ReverseSequence"},
        [](Importer &i, const std::string &) { return i.reverseSequence(); });
    add({"CenterCropPad"},
        [](Importer &i, const std::string &) { return i.centerCropPad(); });
    add({"AffineGrid"},
        [](Importer &i, const std::string &) { return i.affineGrid(); });
    add({"HannWindow", "HammingWindow", "BlackmanWindow"},
        [](Importer &i, const std::string &op) { return i.window(op); });
    add({"MelWeightMatrix"},
        [](Importer &i, const std::string &) { return i.melWeightMatrix(); });
    add({"MeanVarianceNormalization"}, [](Importer &i, const std::string &) {
      return i.meanVarianceNormalization();
    });
    add({"LSTM", "GRU", "RNN"},
        [](Importer &i, const std::string &op) { return i.recurrent(op); });
    add({"Gemm"}, [](Importer &i, const std::string &) { return i.gemm(); });
    add({"MatMul"},
        [](Importer &i, const std::string &) { return i.matmul(); });
    add({"Conv"}, [](Importer &i, const std::string &) { return i.conv(); });
    add({"Col2Im"},
        [](Importer &i, const std::string &) { return i.col2im(); });
    add({"Transpose"},
        [](Importer &i, const std::string &) { return i.transpose(); });
    add({"Concat"},
        [](Importer &i, const std::string &) { return i.concat(); });
    add({"Softmax", "LogSoftmax"}, [](Importer &i, const std::string &op) {
      return i.softmax(op == "LogSoftmax");
    });
    add({"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceL1",
         "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp",
         "ReduceProd"},
        [](Importer &i, const std::string &op) { return i.reduce(op); });
    add({"LpNormalization"},
        [](Importer &i, const std::string &) { return i.lpNormalization(); });
    add({"ArgMax", "ArgMin"}, [](Importer &i, const std::string &op) {
      return i.argExtreme(op == "ArgMax");
    });
    add({"Not", "And", "Or", "Xor"},
        [](Importer &i, const std::string &op) { return i.logical(op); });
    add({"Tile"}, [](Importer &i, const std::string &) { return i.tile(); });
    add({"GatherElements"},
        [](Importer &i, const std::string &) { return i.gatherElements(); });
    add({"TopK"}, [](Importer &i, const std::string &) { return i.topK(); });
    add({"ScatterElements", "Scatter"},
        [](Importer &i, const std::string &) { return i.scatterElements(); });
    add({"ScatterND"},
        [](Importer &i, const std::string &) { return i.scatterNd(); });
    add({"DepthToSpace", "SpaceToDepth"},
        [](Importer &i, const std::string &op) {
          return i.depthSpace(op == "DepthToSpace");
        });
    add({"CumSum"},
        [](Importer &i, const std::string &) { return i.cumSum(); });
    add({"LayerNormalization"},
        [](Importer &i, const std::string &) { return i.layerNorm(); });
    add({"BatchNormalization"},
        [](Importer &i, const std::string &) { return i.batchNorm(); });
    add({"Gather"},
        [](Importer &i, const std::string &) { return i.gather(); });
    add({"SequenceEmpty", "SequenceConstruct", "SequenceInsert",
         "SequenceErase", "SequenceLength", "ConcatFromSequence"},
        [](Importer &i, const std::string &op) { return i.sequenceOp(op); });
    add({"If"}, [](Importer &i, const std::string &) { return i.ifNode(); });
    add({"Loop"}, [](Importer &i, const std::string &) { return i.loop(); });
    add({"Scan"}, [](Importer &i, const std::string &) { return i.scan(); });
    add({"QuantizeLinear"},
        [](Importer &i, const std::string &) { return i.quantizeLinear(); });
    add({"DequantizeLinear"},
        [](Importer &i, const std::string &) { return i.dequantizeLinear(); });
    add({"QLinearMatMul", "QLinearConv"},
        [](Importer &i, const std::string &op) { return i.qlinear(op); });
    for (const char *name : kMicrosoftOps)
      t[name] = [](Importer &i, const std::string &op) {
        return i.qlinearMicrosoft(op);
      };
    add({"MatMulInteger", "ConvInteger"},
        [](Importer &i, const std::string &op) { return i.integerOp(op); });
    add({"DynamicQuantizeLinear"}, [](Importer &i, const std::string &) {
      return i.dynamicQuantizeLinear();
    });
    add({"Cast", "CastLike"},
        [](Importer &i, const std::string &op) { return i.cast(op); });
    return t;
  }();
  return table;
}

const std::string &Importer::supportedOps() {
  static const std::string list = [] {
    std::vector<std::string> names;
    for (const auto &entry : readers())
      names.push_back(entry.first);
    llvm::sort(names, [](const std::string &a, const std::string &b) {
      return llvm::StringRef(a).compare_insensitive(b) < 0;
    });
    return llvm::join(names, ", ");
  }();
  return list;
}

// The initializer |t| as the weights file holds it: F64 for a DOUBLE one
// (an f64 parameter, makeParameter), else F32.
runtime::SafeTensor Importer::weightTensor(const std::string &name,
                                           const onnx::Tensor &t) {
  std::vector<double> d = t.toDoubles();
  if (t.dataType == int32_t(DataType::Double))
    return runtime::SafeTensor::fromF64(name, t.dims, d);
  return runtime::SafeTensor::fromF32(name, t.dims,
                                      std::vector<float>(d.begin(), d.end()));
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
  if (quantized_.count(outputs[0].name))
    return fail("the graph's output '" + outputs[0].name +
                "' is quantized integers: kiln import adds a loss "
                "to a float output (dequantize it)");
  if (!llvm::isa<mlir::FloatType>(element(y)))
    return fail("the graph's output '" + outputs[0].name + "' is not FLOAT");
  mlir::Value loss;
  nodeName_ = "loss";
  if (options_.loss == OnnxLoss::output) {
    if (product(shape(y)) != 1)
      return fail("the graph's output '" + outputs[0].name + "' is " +
                  shapeText(shape(y)) +
                  ": --loss=output takes the loss itself, one element (a "
                  "reduction of none leaves one per sample)");
    loss = shape(y).empty() ? y : g_.reshape("loss", y, {});
  } else if (options_.loss == OnnxLoss::crossEntropy) {
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
  // The parameters' and running statistics' values, as read (every one a
  // kiln op reads).
  for (const auto &[name, tensor] : parameterTensors_) {
    if (!values_.count(name) || (buffers_.count(name) && !modelStateNames_.count(name)))
      continue;
    out.modelState += modelStateNames_.count(name);
    out.weights.tensors.push_back(weightTensor(name, *tensor));
  }
  for (const auto &[name, tensor] : copyTensors_) {
    out.modelState += modelStateNames_.count(name);
    out.weights.tensors.push_back(weightTensor(name, *tensor));
  }
  for (const auto &[name, p] : quantizedParameters_)
    out.weights.tensors.push_back(
        runtime::SafeTensor::fromF32(p.name, p.dims, p.values));
  if (out.weights.tensors.empty())
    return fail("the graph has no floating-point initializer that a node "
                "reads: there are no parameters to train" +
                std::string(fixedQuantizedWeights_
                                ? " (--quantized-weights=fixed keeps its "
                                  "quantized weights constants)"
                                : ""));
  warnFoldedParameters();
  out.weights.metadata["format"] = "pt";
  out.module = g_.finish(loss, makeTraining(b_.getContext(), options_.training.optimizer,
                                             options_.training.learningRate));
  return static_cast<bool>(out.module);
}

// The torch.export exporter's graph signature lists the model's
// parameters ("p_fc_bias: PARAMETER target='fc.bias'"). Its optimizer (on
// by default) folds some into new initializers (a weight's transpose,
// trained under its new name) and removes others (the Add of a bias that
// is still zeros, which then cannot train): say which are not parameters
// under their own names.
std::vector<std::string> Importer::signatureParameters() const {
  std::vector<std::string> targets;
  static const std::string kTarget = ": PARAMETER target='";
  for (size_t at = signature_.find(kTarget); at != std::string::npos;
       at = signature_.find(kTarget, at + 1)) {
    size_t start = at + kTarget.size(), end = signature_.find('\'', start);
    if (end == std::string::npos)
      break;
    targets.push_back(signature_.substr(start, end - start));
  }
  return targets;
}

void Importer::warnFoldedParameters() {
  std::vector<std::string> missing;
  std::vector<std::string> targets = signatureParameters();
  size_t total = targets.size();
  for (const std::string &target : targets)
    if (!usedNames_.count(target))
      missing.push_back(target);
  if (missing.empty())
    return;
  std::string list;
  for (size_t i = 0; i < missing.size() && i < 6; ++i)
    list += (i ? ", " : "") + missing[i];
  if (missing.size() > 6)
    list += ", ...";
  errs_ << command_ << ": warning: " << path_ << ": " << missing.size() << " of the model's "
        << total << " parameters are not in it under their own names (" << list
        << "): the exporter's optimizer folded them into other initializers, which train "
           "under those names, or removed them (a bias of zeros), which cannot train; "
           "export with torch.onnx.export(..., optimize=False) to keep every parameter\n";
}

bool Importer::run(OnnxImport &out) {
  opset_ = model_.defaultOpset();
  nextDropoutSeed_ = options_.training.seed * 1000 + 1;
  if (opset_ < 7)
    return fail("the model imports ONNX opset " + std::to_string(opset_) +
                ": kiln import reads opset 7 and later");
  if (!readInitializers() || !readInputs())
    return false;
  index(model_.graph);
  // The norms' scales and shifts and PReLU's slopes, by the names their
  // nodes read (an initializer's, or an Identity's output where the
  // TorchScript exporter merged equal initializers): PyTorch's constant
  // initializers, known before the Identity that makes the copy is read.
  for (const onnx::Node *n : allNodes_) {
    bool norm = n->opType == "LayerNormalization" ||
                n->opType == "BatchNormalization" ||
                n->opType == "InstanceNormalization";
    if (norm && n->inputs.size() > 2) {
      initOverrides_.try_emplace(n->inputs[1], kiln::InitKind::ones, 0.0);
      initOverrides_.try_emplace(n->inputs[2], kiln::InitKind::zeros, 0.0);
    } else if (n->opType == "PRelu" && n->inputs.size() > 1) {
      initOverrides_.try_emplace(n->inputs[1], kiln::InitKind::constant, 0.25);
    }
  }
  for (const onnx::Node &n : model_.graph.nodes)
    if (!node(n))
      return false;
  out.nodes = model_.graph.nodes.size();
  return finish(out);
}


} // namespace onnx_import

const std::string &onnxSupportedOps() {
  return onnx_import::Importer::supportedOps();
}

bool importOnnx(const onnx::Model &model, const std::string &path,
                const OnnxImportOptions &options, mlir::MLIRContext *context,
                OnnxImport &out, llvm::StringRef command, llvm::raw_ostream &errs) {
  onnx_import::Importer importer(model, path, options, context, command, errs);
  return importer.run(out);
}

} // namespace kiln::cli
