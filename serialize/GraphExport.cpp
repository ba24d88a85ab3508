//===- GraphExport.cpp - kiln module -> .kiln graph file ------------------===//
//
// Walks the module's one function in block order (a valid topological order)
// and writes a tensor for every argument and op result, a node for every op.
// Tensor ids: the arguments first, then the op results in order. Everything
// the format cannot hold is an error at its location rather than silently
// dropped: other ops beside the function, non-kiln ops, kiln.fusion, unknown
// attributes on ops, arguments, results or the module. The writer is
// deterministic, so exporting the same module twice gives the same bytes.
//
// Names: a tensor is named by kiln.name (arguments, results) and otherwise
// left unnamed (its node names it); a node is named by the NameLoc of its op
// (the importer puts node names there) or, without one, `<op>_<index>`.
//
//===----------------------------------------------------------------------===//

#include "serialize/GraphExport.h"

#include "ir/KilnOps.h"
#include "serialize/GraphEnums.h"
#include "serialize/GraphOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Location.h"
#include "llvm/ADT/DenseMap.h"

using namespace mlir;

namespace kiln {
namespace {

struct TensorInfo {
  std::string name;
  bool explicitName = false; // set from a kiln.name
  SmallVector<int64_t> shape;
  fbs::DType dtype = fbs::DType::F32;
  fbs::Role role = fbs::Role::None;
  std::optional<InitializerAttr> init;
  int32_t gradOf = -1;  // kiln.grad_of
  int32_t updates = -1; // kiln.updates
  int32_t copyOf = -1;  // kiln.copy_of
  int64_t indexBound = 0; // kiln.index_bound
};

// Reads kiln.grad_of, kiln.updates or kiln.copy_of (an argument index) into
// |info|: None when |attr| is none of them (or holds no index that fits), Conflict when |info|
// already holds a different one.
enum class IndexAttr { None, Ok, Conflict };
IndexAttr readIndexAttr(NamedAttribute attr, TensorInfo &info) {
  StringRef name = attr.getName().getValue();
  int32_t *slot = name == KilnDialect::kGradOfAttrName   ? &info.gradOf
                  : name == KilnDialect::kUpdatesAttrName ? &info.updates
                  : name == KilnDialect::kCopyOfAttrName  ? &info.copyOf
                                                          : nullptr;
  auto value = dyn_cast<IntegerAttr>(attr.getValue());
  if (!slot || !value || value.getValue().getSignificantBits() > 32 ||
      value.getInt() < 0)
    return IndexAttr::None;
  if (*slot >= 0 && *slot != value.getInt())
    return IndexAttr::Conflict;
  *slot = int32_t(value.getInt());
  return IndexAttr::Ok;
}

// The first NameLoc in |loc| (fused and call-site locations are searched).
std::optional<std::string> nodeNameOf(Location loc) {
  if (auto name = dyn_cast<NameLoc>(loc))
    return name.getName().str();
  if (auto fused = dyn_cast<FusedLoc>(loc)) {
    for (Location inner : fused.getLocations())
      if (std::optional<std::string> n = nodeNameOf(inner))
        return n;
  }
  if (auto call = dyn_cast<CallSiteLoc>(loc))
    return nodeNameOf(call.getCallee());
  return std::nullopt;
}

ArrayRef<NamedAttribute> argAttrs(func::FuncOp func, unsigned k) {
  DictionaryAttr dict = func.getArgAttrDict(k);
  return dict ? dict.getValue() : ArrayRef<NamedAttribute>();
}

ArrayRef<NamedAttribute> resultAttrs(func::FuncOp func, unsigned k) {
  DictionaryAttr dict = func.getResultAttrDict(k);
  return dict ? dict.getValue() : ArrayRef<NamedAttribute>();
}

class Exporter {
public:
  explicit Exporter(ModuleOp module) : module(module) {
    // FlatBuffers leaves out a scalar equal to its default, comparing with
    // ==, so -0.0 would be dropped for a default of 0.0 and read back as
    // +0.0 (found by the fuzzer). Writing every scalar keeps each bit.
    fbb.ForceDefaults(true);
  }
  LogicalResult run(std::vector<uint8_t> &bytes);

private:
  func::FuncOp findFunction();
  std::optional<uint32_t> addTensor(Location loc, Type type, const Twine &what);
  LogicalResult readArgument(func::FuncOp func, unsigned k);
  LogicalResult readResults(func::FuncOp func, func::ReturnOp ret);
  LogicalResult writeNode(Operation *op, unsigned index);
  flatbuffers::Offset<fbs::Training> writeTraining(TrainingAttr training);

  ModuleOp module;
  flatbuffers::FlatBufferBuilder fbb;
  std::vector<TensorInfo> tensors;
  llvm::DenseMap<Value, uint32_t> ids;
  std::vector<flatbuffers::Offset<fbs::Node>> nodes;
  std::vector<uint32_t> inputs, outputs;
  int32_t loss = -1;
};

func::FuncOp Exporter::findFunction() {
  func::FuncOp found;
  bool bad = false;
  for (Operation &op : module.getBody()->getOperations()) {
    auto func = dyn_cast<func::FuncOp>(op);
    if (!func) {
      op.emitError() << "'" << op.getName()
                     << "' cannot be stored in a graph file: the module may "
                        "hold one func.func only";
      bad = true;
    } else if (found) {
      func.emitError() << "a graph file holds one function, but the module "
                          "has another one, @"
                       << found.getSymName();
      bad = true;
    } else {
      found = func;
    }
  }
  if (bad)
    return nullptr;
  if (!found) {
    module.emitError() << "the module holds no function to store in a graph "
                          "file";
    return nullptr;
  }
  if (found.isExternal() || !llvm::hasSingleElement(found.getBody())) {
    found.emitError() << "@" << found.getSymName()
                      << " cannot be stored in a graph file: it must have a "
                         "body of one block";
    return nullptr;
  }
  return found;
}

// Adds a tensor of |type|, or reports that the format cannot hold it.
std::optional<uint32_t> Exporter::addTensor(Location loc, Type type,
                                            const Twine &what) {
  auto ranked = dyn_cast<RankedTensorType>(type);
  std::optional<fbs::DType> dtype;
  if (ranked && ranked.hasStaticShape())
    dtype = graph::toFbs(ranked.getElementType());
  if (!dtype) {
    emitError(loc) << what << " has type " << type
                   << ", which a graph file cannot hold (static-shape tensors "
                      "of f64, f32, f16, bf16, i64, i32, i8 or i1)";
    return std::nullopt;
  }
  TensorInfo info;
  info.shape.assign(ranked.getShape().begin(), ranked.getShape().end());
  info.dtype = *dtype;
  tensors.push_back(std::move(info));
  return uint32_t(tensors.size() - 1);
}

LogicalResult Exporter::readArgument(func::FuncOp func, unsigned k) {
  BlockArgument arg = func.getArgument(k);
  std::optional<uint32_t> id =
      addTensor(arg.getLoc(), arg.getType(), "argument " + Twine(k));
  if (!id)
    return failure();
  ids[arg] = *id;
  inputs.push_back(*id);
  TensorInfo &info = tensors[*id];
  bool ok = true;
  for (NamedAttribute attr : argAttrs(func, k)) {
    StringRef name = attr.getName().getValue();
    if (auto role = dyn_cast<RoleAttr>(attr.getValue());
        role && name == KilnDialect::kRoleAttrName) {
      info.role = graph::toFbs(role.getValue());
    } else if (auto init = dyn_cast<InitializerAttr>(attr.getValue());
               init && name == KilnDialect::kInitAttrName) {
      info.init = init;
    } else if (auto str = dyn_cast<StringAttr>(attr.getValue());
               str && name == KilnDialect::kNameAttrName) {
      info.name = str.str();
      info.explicitName = true;
    } else if (readIndexAttr(attr, info) == IndexAttr::Ok) {
      continue;
    } else if (auto bound = dyn_cast<IntegerAttr>(attr.getValue());
               bound && name == KilnDialect::kIndexBoundAttrName &&
               bound.getInt() > 0) {
      info.indexBound = bound.getInt();
    } else {
      func.emitError() << "argument " << k << ": attribute '" << name
                       << "' cannot be stored in a graph file";
      ok = false;
    }
  }
  return success(ok);
}

LogicalResult Exporter::readResults(func::FuncOp func, func::ReturnOp ret) {
  bool ok = true;
  for (auto [k, value] : llvm::enumerate(ret.getOperands())) {
    auto found = ids.find(value);
    if (found == ids.end()) // its producer failed and said so
      continue;
    uint32_t id = found->second;
    outputs.push_back(id);
    TensorInfo &info = tensors[id];
    for (NamedAttribute attr : resultAttrs(func, k)) {
      StringRef name = attr.getName().getValue();
      if (auto roleAttr = dyn_cast<RoleAttr>(attr.getValue());
          roleAttr && name == KilnDialect::kRoleAttrName) {
        fbs::Role role = graph::toFbs(roleAttr.getValue());
        if (info.role != fbs::Role::None && info.role != role) {
          func.emitError() << "result " << k << " has role "
                           << stringifyRole(roleAttr.getValue())
                           << ", but its value already has role "
                           << fbs::EnumNameRole(info.role)
                           << "; a graph file holds one role per tensor";
          ok = false;
          continue;
        }
        info.role = role;
        if (role == fbs::Role::Loss) {
          if (loss >= 0 && uint32_t(loss) != id) {
            func.emitError() << "result " << k
                             << " is a second loss; a graph file has one";
            ok = false;
            continue;
          }
          loss = int32_t(id);
        }
      } else if (auto str = dyn_cast<StringAttr>(attr.getValue());
                 str && name == KilnDialect::kNameAttrName) {
        if (info.explicitName && info.name != str.getValue()) {
          func.emitError() << "result " << k << " is named '" << str.getValue()
                           << "', but its value is already named '" << info.name
                           << "'; a graph file holds one name per tensor";
          ok = false;
          continue;
        }
        info.name = str.str();
        info.explicitName = true;
      } else if (IndexAttr index = readIndexAttr(attr, info);
                 index != IndexAttr::None) {
        if (index == IndexAttr::Conflict) {
          func.emitError() << "result " << k << " has " << name << " = "
                           << attr.getValue()
                           << ", but its value already has another; a graph "
                              "file holds one per tensor";
          ok = false;
        }
      } else {
        func.emitError() << "result " << k << ": attribute '" << name
                         << "' cannot be stored in a graph file";
        ok = false;
      }
    }
  }
  return success(ok);
}

LogicalResult Exporter::writeNode(Operation *op, unsigned index) {
  FailureOr<graph::ExportedOp> exported = graph::exportOp(op, fbb);
  if (failed(exported))
    return failure();
  bool ok = true;
  for (NamedAttribute attr : op->getDiscardableAttrs()) {
    op->emitError() << "attribute '" << attr.getName().getValue() << "' of '"
                    << op->getName() << "' cannot be stored in a graph file";
    ok = false;
  }

  std::string name;
  if (std::optional<std::string> n = nodeNameOf(op->getLoc()))
    name = *n;
  else
    name = op->getName().stripDialect().str() + "_" + std::to_string(index);

  std::vector<uint32_t> ins, outs;
  for (Value operand : op->getOperands())
    ins.push_back(ids.lookup(operand));
  for (OpResult result : op->getResults()) {
    std::optional<uint32_t> id = addTensor(
        op->getLoc(), result.getType(),
        "result " + Twine(result.getResultNumber()) + " of '" +
            op->getName().getStringRef() + "'");
    if (!id) {
      ok = false;
      continue;
    }
    ids[result] = *id;
    outs.push_back(*id);
  }
  if (!ok)
    return failure();
  auto nameOffset = fbb.CreateString(name);
  auto insOffset = fbb.CreateVector(ins);
  auto outsOffset = fbb.CreateVector(outs);
  nodes.push_back(fbs::CreateNode(fbb, nameOffset, exported->code, insOffset,
                                  outsOffset, exported->attrsType,
                                  exported->attrs));
  return success();
}

flatbuffers::Offset<fbs::Training> Exporter::writeTraining(TrainingAttr t) {
  return fbs::CreateTraining(
      fbb, graph::toFbs(t.getOptimizer()),
      t.getLearningRate().convertToDouble(), t.getMomentum().convertToDouble(),
      t.getNesterov(), t.getBeta1().convertToDouble(),
      t.getBeta2().convertToDouble(), t.getEpsilon().convertToDouble(),
      t.getWeightDecay().convertToDouble(), t.getClipNorm().convertToDouble(),
      graph::toFbs(t.getSchedule()), t.getWarmupSteps(), t.getTotalSteps());
}

LogicalResult Exporter::run(std::vector<uint8_t> &bytes) {
  bool ok = true;
  TrainingAttr training;
  for (NamedAttribute attr : module->getDiscardableAttrs()) {
    if (auto t = dyn_cast<TrainingAttr>(attr.getValue());
        t && attr.getName() == KilnDialect::kTrainingAttrName) {
      training = t;
      continue;
    }
    module.emitError() << "module attribute '" << attr.getName().getValue()
                       << "' cannot be stored in a graph file";
    ok = false;
  }

  func::FuncOp func = findFunction();
  if (!func)
    return failure();
  for (NamedAttribute attr : func->getDiscardableAttrs()) {
    func.emitError() << "attribute '" << attr.getName().getValue()
                     << "' of @" << func.getSymName()
                     << " cannot be stored in a graph file";
    ok = false;
  }
  // Report what the arguments and the ops cannot hold together; the ids of
  // arguments that failed are only used to write nodes that are discarded.
  for (unsigned k = 0; k < func.getNumArguments(); ++k)
    ok &= succeeded(readArgument(func, k));

  Block &body = func.getBody().front();
  func::ReturnOp ret;
  unsigned index = 0;
  for (Operation &op : body.getOperations()) {
    if (auto r = dyn_cast<func::ReturnOp>(op)) {
      ret = r;
      continue;
    }
    ok &= succeeded(writeNode(&op, index++));
  }
  if (!ret)
    return func.emitError() << "@" << func.getSymName()
                            << " does not end with func.return";
  if (failed(readResults(func, ret)) || !ok)
    return failure();

  std::vector<flatbuffers::Offset<fbs::Tensor>> tensorOffsets;
  tensorOffsets.reserve(tensors.size());
  for (const TensorInfo &t : tensors) {
    flatbuffers::Offset<fbs::Initializer> init;
    if (t.init)
      init = fbs::CreateInitializer(
          fbb, graph::toFbs(t.init->getKind()), t.init->getValue().convertToDouble(),
          t.init->getScale().convertToDouble(), t.init->getSeed());
    auto name = fbb.CreateString(t.name);
    auto shape = fbb.CreateVector(t.shape.data(), t.shape.size());
    tensorOffsets.push_back(fbs::CreateTensor(fbb, name, shape, t.dtype, t.role,
                                              init, t.gradOf, t.updates, t.copyOf,
                                              t.indexBound));
  }
  fbs::Version version(graph::kFormatMajor, graph::kFormatMinor);
  auto name = fbb.CreateString(func.getSymName().str());
  auto tensorVector = fbb.CreateVector(tensorOffsets);
  auto nodeVector = fbb.CreateVector(nodes);
  auto inputVector = fbb.CreateVector(inputs);
  auto outputVector = fbb.CreateVector(outputs);
  flatbuffers::Offset<fbs::Training> trainingOffset;
  if (training)
    trainingOffset = writeTraining(training);
  auto root = fbs::CreateGraph(fbb, &version, name, tensorVector, nodeVector,
                               inputVector, outputVector, loss, trainingOffset);
  fbs::FinishGraphBuffer(fbb, root);
  bytes.assign(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
  return success();
}

} // namespace

LogicalResult exportGraph(ModuleOp module, std::vector<uint8_t> &bytes) {
  module.getContext()->loadDialect<KilnDialect>();
  return Exporter(module).run(bytes);
}

} // namespace kiln
