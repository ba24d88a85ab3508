//===- GraphImport.cpp - .kiln graph file -> kiln module ------------------===//
//
// The importer trusts nothing in the file. It runs in stages and stops at
// the first stage that fails, so no stage sees input an earlier one rejected:
//
//   1. the buffer: size, file identifier, the FlatBuffers verifier (before any
//      field is read), the format version;
//   2. the tensor table: element types, roles, shapes, initializers;
//   3. the graph: every id in range, op codes and attribute tables known and
//      matching, every tensor produced once, graph inputs and outputs;
//   4. the order: a topological sort (nodes may be stored in any order) that
//      names the nodes of a cycle;
//   5. the module: each node becomes its op with the result types the tensor
//      table states, and the MLIR verifier checks it (so shapes and dtypes
//      must agree with the op's shape rule).
//
// Every diagnostic is an error at NameLoc(node or tensor name, file) whose
// message starts with "node 'NAME': " (or "tensor ...", "graph: "), so it
// names the node whatever handler prints it. Stages 2 to 5 report up to
// kMaxErrors problems before giving up.
//
//===----------------------------------------------------------------------===//

#include "serialize/GraphImport.h"

#include "ir/KilnOps.h"
#include "ir/ShapeRules.h"
#include "serialize/GraphEnums.h"
#include "serialize/GraphOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/MathExtras.h"

#include <queue>

using namespace mlir;

namespace kiln {
namespace {

using graph::isKnown;

constexpr unsigned kMaxErrors = 20;
// Producer markers besides node indices.
constexpr int64_t kNoProducer = -1;
constexpr int64_t kGraphInput = -2;

std::string quoted(const flatbuffers::String *s) {
  return "'" + (s ? s->str() : std::string()) + "'";
}

class Importer {
public:
  Importer(StringRef filename, MLIRContext *context)
      : context(context), filename(filename.str()),
        fileLoc(FileLineColLoc::get(context, filename, 0, 0)) {}

  OwningOpRef<ModuleOp> run(StringRef bytes);

private:
  LogicalResult checkBuffer(StringRef bytes);
  LogicalResult checkTensors();
  LogicalResult checkGraph();
  LogicalResult sortNodes();
  OwningOpRef<ModuleOp> buildModule();
  LogicalResult buildNode(OpBuilder &b, uint32_t index,
                          std::vector<Value> &values);
  DictionaryAttr boundaryAttrs(uint32_t tensor, bool withInit);

  uint32_t numTensors() const { return tensors ? tensors->size() : 0; }
  uint32_t numNodes() const { return nodes ? nodes->size() : 0; }
  const fbs::Node &node(uint32_t i) const { return *nodes->Get(i); }
  const fbs::Tensor &tensor(uint32_t t) const { return *tensors->Get(t); }

  // "'fc1'" or "#3" when the node has no name.
  std::string nodeLabel(uint32_t i) const {
    const flatbuffers::String *name = node(i).name();
    return name && name->size() ? quoted(name) : "#" + std::to_string(i);
  }
  // "tensor 5 ('h1')" or "tensor 5".
  std::string tensorLabel(uint32_t t) const {
    const flatbuffers::String *name = tensor(t).name();
    std::string label = "tensor " + std::to_string(t);
    return name && name->size() ? label + " (" + quoted(name) + ")" : label;
  }
  Location nodeLoc(uint32_t i) const {
    const flatbuffers::String *name = node(i).name();
    std::string text = name && name->size() ? name->str() : "#" + std::to_string(i);
    return NameLoc::get(StringAttr::get(context, text), fileLoc);
  }
  Location tensorLoc(uint32_t t) const {
    const flatbuffers::String *name = tensor(t).name();
    if (!name || !name->size())
      return fileLoc;
    return NameLoc::get(StringAttr::get(context, name->str()), fileLoc);
  }

  InFlightDiagnostic error(Location loc, const std::string &prefix) {
    ++errors;
    InFlightDiagnostic diag = emitError(loc);
    diag << prefix;
    return diag;
  }
  InFlightDiagnostic graphError() { return error(fileLoc, "graph: "); }
  InFlightDiagnostic nodeError(uint32_t i) {
    return error(nodeLoc(i), "node " + nodeLabel(i) + ": ");
  }
  InFlightDiagnostic tensorError(uint32_t t) {
    return error(tensorLoc(t), tensorLabel(t) + ": ");
  }
  bool tooManyErrors() const { return errors >= kMaxErrors; }

  MLIRContext *context;
  std::string filename;
  Location fileLoc;
  unsigned errors = 0;

  // Aligned copy of the input when the caller's bytes are not 8-aligned.
  std::vector<uint64_t> alignedCopy;
  const fbs::Graph *graph = nullptr;
  const flatbuffers::Vector<flatbuffers::Offset<fbs::Tensor>> *tensors = nullptr;
  const flatbuffers::Vector<flatbuffers::Offset<fbs::Node>> *nodes = nullptr;

  std::vector<Type> types;        // per tensor
  std::vector<int64_t> producers; // per tensor: node index or a marker
  std::vector<uint32_t> order;    // nodes, topologically sorted
};

//===----------------------------------------------------------------------===//
// Stage 1: the buffer
//===----------------------------------------------------------------------===//

LogicalResult Importer::checkBuffer(StringRef bytes) {
  constexpr size_t kHeader = sizeof(flatbuffers::uoffset_t) +
                             flatbuffers::kFileIdentifierLength;
  if (bytes.size() < kHeader)
    return graphError() << "the file is " << bytes.size()
                        << " bytes long, too short for a graph file (at least "
                        << kHeader << " bytes); is it truncated?";
  if (bytes.size() >= FLATBUFFERS_MAX_BUFFER_SIZE)
    return graphError() << "the file is " << bytes.size()
                        << " bytes long, more than FlatBuffers can address";

  const uint8_t *data = reinterpret_cast<const uint8_t *>(bytes.data());
  if (reinterpret_cast<uintptr_t>(data) % alignof(uint64_t) != 0) {
    alignedCopy.resize((bytes.size() + 7) / 8);
    memcpy(alignedCopy.data(), bytes.data(), bytes.size());
    data = reinterpret_cast<const uint8_t *>(alignedCopy.data());
  }

  if (!flatbuffers::BufferHasIdentifier(data, fbs::GraphIdentifier())) {
    std::string found;
    for (size_t i = 4; i < kHeader; ++i) {
      char c = static_cast<char>(data[i]);
      if (llvm::isPrint(c) && c != '\'' && c != '\\')
        found += c;
      else {
        char hex[5];
        snprintf(hex, sizeof(hex), "\\x%02x", unsigned(data[i]));
        found += hex;
      }
    }
    return graphError() << "not a kiln graph file: the file identifier (bytes "
                           "4 to 7) is '"
                        << found << "', expected '" << fbs::GraphIdentifier()
                        << "'";
  }

  flatbuffers::Verifier verifier(data, bytes.size(), /*max_depth=*/64,
                                 /*max_tables=*/1u << 24);
  if (!fbs::VerifyGraphBuffer(verifier))
    return graphError() << "the file is truncated or corrupt: the FlatBuffers "
                           "verifier rejected its "
                        << bytes.size() << " bytes";

  graph = fbs::GetGraph(data);
  const fbs::Version *version = graph->version();
  if (version->major_version() != graph::kFormatMajor ||
      version->minor_version() > graph::kFormatMinor)
    return graphError() << "unsupported graph format version "
                        << version->major_version() << "."
                        << version->minor_version()
                        << ": this reader reads version " << graph::kFormatMajor
                        << "." << graph::kFormatMinor << " (major "
                        << graph::kFormatMajor << ", minor up to "
                        << graph::kFormatMinor << ")";
  tensors = graph->tensors();
  nodes = graph->nodes();
  return success();
}

//===----------------------------------------------------------------------===//
// Stage 2: the tensor table
//===----------------------------------------------------------------------===//

LogicalResult Importer::checkTensors() {
  types.assign(numTensors(), Type());
  for (uint32_t t = 0; t < numTensors() && !tooManyErrors(); ++t) {
    const fbs::Tensor &ten = tensor(t);
    if (!isKnown(ten.dtype())) {
      tensorError(t) << "unknown element type " << unsigned(ten.dtype())
                     << " (expected 0.." << unsigned(fbs::DType::MAX) << ")";
      continue;
    }
    if (!isKnown(ten.role()))
      tensorError(t) << "unknown role " << unsigned(ten.role()) << " (expected 0.."
                     << unsigned(fbs::Role::MAX) << ")";
    int64_t numInputs = graph->inputs() ? graph->inputs()->size() : 0;
    if (ten.grad_of() < -1 || ten.grad_of() >= numInputs)
      tensorError(t) << "grad_of is " << ten.grad_of() << ", but the graph has "
                     << numInputs << " inputs (-1 means none)";
    if (ten.updates() < -1 || ten.updates() >= numInputs)
      tensorError(t) << "updates is " << ten.updates() << ", but the graph has "
                     << numInputs << " inputs (-1 means none)";
    if (ten.copy_of() < -1 || ten.copy_of() >= numInputs)
      tensorError(t) << "copy_of is " << ten.copy_of() << ", but the graph has "
                     << numInputs << " inputs (-1 means none)";
    bool integer = ten.dtype() == fbs::DType::I64 || ten.dtype() == fbs::DType::I32 ||
                   ten.dtype() == fbs::DType::I8 || ten.dtype() == fbs::DType::I1;
    bool data = ten.role() == fbs::Role::Input || ten.role() == fbs::Role::Label;
    if (ten.index_bound() < 0 || (ten.index_bound() > 0 && (!integer || !data)))
      tensorError(t) << "index_bound is " << ten.index_bound()
                     << ", but only an integer input or label has one, of at "
                        "least 1 (0 means none)";
    if (const fbs::Initializer *init = ten.init()) {
      if (!isKnown(init->kind()))
        tensorError(t) << "unknown initializer kind " << unsigned(init->kind())
                       << " (expected 0.." << unsigned(fbs::InitKind::MAX) << ")";
      if (init->data())
        tensorError(t) << "inline initializer data is not supported by this "
                          "reader: #kiln.init holds a distribution (kind, "
                          "value, scale, seed) only";
    }
    SmallVector<int64_t> shape;
    if (const flatbuffers::Vector<int64_t> *dims = ten.shape())
      shape.assign(dims->begin(), dims->end());
    // The dialect's limits (ir/ShapeRules.h), checked before any type is
    // made: no kiln op needs more, and shape rules need not cope with more.
    if (std::string e = shape::checkLimits(shape, graph::bytesPerElement(ten.dtype()));
        !e.empty()) {
      tensorError(t) << e;
      continue;
    }
    types[t] = RankedTensorType::get(shape, graph::toKiln(ten.dtype(), context));
  }
  return success(errors == 0);
}

//===----------------------------------------------------------------------===//
// Stage 3: ids, op codes, producers, graph inputs and outputs
//===----------------------------------------------------------------------===//

LogicalResult Importer::checkGraph() {
  producers.assign(numTensors(), kNoProducer);
  auto inRange = [&](uint32_t id) { return id < numTensors(); };

  if (const flatbuffers::Vector<uint32_t> *inputs = graph->inputs()) {
    for (auto [k, id] : llvm::enumerate(*inputs)) {
      if (tooManyErrors())
        return failure();
      if (!inRange(id)) {
        graphError() << "graph input " << k << " is tensor " << id
                     << ", but the graph has " << numTensors() << " tensors";
        continue;
      }
      if (producers[id] == kGraphInput) {
        graphError() << "graph input " << k << " (" << tensorLabel(id)
                     << ") is listed twice";
        continue;
      }
      producers[id] = kGraphInput;
    }
  }

  for (uint32_t i = 0; i < numNodes() && !tooManyErrors(); ++i) {
    const fbs::Node &n = node(i);
    if (!isKnown(n.op())) {
      nodeError(i) << "unknown op code " << unsigned(n.op()) << " (this reader knows 0.."
                   << unsigned(fbs::OpCode::MAX) << ")";
      continue;
    }
    StringRef opName = graph::opNameOf(n.op());
    fbs::Attrs expected = graph::attrsTableOf(n.op());
    if (!isKnown(n.attrs_type())) {
      nodeError(i) << "unknown attribute table type " << unsigned(n.attrs_type())
                   << " for '" << opName << "' (expected "
                   << fbs::EnumNameAttrs(expected) << ")";
    } else if (n.attrs_type() != expected &&
               !(n.attrs_type() == fbs::Attrs::NONE &&
                 graph::attrsTableOptional(n.op()))) {
      auto describe = [](fbs::Attrs a) {
        return a == fbs::Attrs::NONE ? std::string("no attribute table")
                                     : std::string(fbs::EnumNameAttrs(a));
      };
      nodeError(i) << "'" << opName << "' takes " << describe(expected)
                   << ", but the node has " << describe(n.attrs_type());
    }
    if (const flatbuffers::Vector<uint32_t> *ins = n.inputs())
      for (auto [k, id] : llvm::enumerate(*ins))
        if (!inRange(id))
          nodeError(i) << "input " << k << " is tensor " << id
                       << ", but the graph has " << numTensors() << " tensors";
    if (const flatbuffers::Vector<uint32_t> *outs = n.outputs()) {
      for (auto [k, id] : llvm::enumerate(*outs)) {
        if (!inRange(id)) {
          nodeError(i) << "output " << k << " is tensor " << id
                       << ", but the graph has " << numTensors() << " tensors";
          continue;
        }
        if (producers[id] == kGraphInput) {
          nodeError(i) << "output " << k << " (" << tensorLabel(id)
                       << ") is a graph input; a tensor is produced once";
          continue;
        }
        if (producers[id] >= 0) {
          nodeError(i) << "output " << k << " (" << tensorLabel(id)
                       << ") is already produced by node "
                       << nodeLabel(uint32_t(producers[id]))
                       << "; a tensor is produced once";
          continue;
        }
        producers[id] = i;
      }
    }
  }
  if (errors)
    return failure();

  // Every value used has a producer.
  for (uint32_t i = 0; i < numNodes() && !tooManyErrors(); ++i)
    if (const flatbuffers::Vector<uint32_t> *ins = node(i).inputs())
      for (auto [k, id] : llvm::enumerate(*ins))
        if (producers[id] == kNoProducer)
          nodeError(i) << "input " << k << " (" << tensorLabel(id)
                       << ") is neither a graph input nor produced by a node";

  bool lossIsOutput = false;
  if (const flatbuffers::Vector<uint32_t> *outputs = graph->outputs()) {
    for (auto [k, id] : llvm::enumerate(*outputs)) {
      if (tooManyErrors())
        return failure();
      if (!inRange(id)) {
        graphError() << "graph output " << k << " is tensor " << id
                     << ", but the graph has " << numTensors() << " tensors";
        continue;
      }
      if (producers[id] == kNoProducer)
        graphError() << "graph output " << k << " (" << tensorLabel(id)
                     << ") is neither a graph input nor produced by a node";
      if (int64_t(id) == graph->loss())
        lossIsOutput = true;
      else if (tensor(id).role() == fbs::Role::Loss)
        graphError() << "graph output " << k << " (" << tensorLabel(id)
                     << ") has role Loss, but the graph's loss is "
                     << (graph->loss() < 0 ? std::string("unset")
                                           : "tensor " + std::to_string(graph->loss()));
    }
  }
  if (graph->loss() != -1) {
    if (graph->loss() < -1 || graph->loss() >= int64_t(numTensors()))
      graphError() << "the loss is tensor " << graph->loss()
                   << ", but the graph has " << numTensors()
                   << " tensors (-1 means no loss)";
    else if (!lossIsOutput)
      graphError() << "the loss (" << tensorLabel(uint32_t(graph->loss()))
                   << ") is not one of the graph outputs";
    else if (tensor(uint32_t(graph->loss())).role() != fbs::Role::Loss)
      graphError() << "the loss (" << tensorLabel(uint32_t(graph->loss()))
                   << ") must have role Loss, but has role "
                   << fbs::EnumNameRole(tensor(uint32_t(graph->loss())).role());
  }
  return success(errors == 0);
}

//===----------------------------------------------------------------------===//
// Stage 4: topological order
//===----------------------------------------------------------------------===//

LogicalResult Importer::sortNodes() {
  uint32_t n = numNodes();
  std::vector<uint32_t> pending(n, 0);
  std::vector<std::vector<uint32_t>> consumers(n);
  for (uint32_t i = 0; i < n; ++i)
    if (const flatbuffers::Vector<uint32_t> *ins = node(i).inputs())
      for (uint32_t id : *ins)
        if (producers[id] >= 0) {
          ++pending[i];
          consumers[producers[id]].push_back(i);
        }

  // Among the ready nodes, the one stored first goes first: a file already
  // in order keeps its order.
  std::priority_queue<uint32_t, std::vector<uint32_t>, std::greater<uint32_t>> ready;
  for (uint32_t i = 0; i < n; ++i)
    if (pending[i] == 0)
      ready.push(i);
  order.clear();
  order.reserve(n);
  while (!ready.empty()) {
    uint32_t i = ready.top();
    ready.pop();
    order.push_back(i);
    for (uint32_t c : consumers[i])
      if (--pending[c] == 0)
        ready.push(c);
  }
  if (order.size() == n)
    return success();

  // Walk from the first node left over to a producer that is also left over
  // until a node repeats: that loop is a cycle.
  uint32_t start = 0;
  while (pending[start] == 0)
    ++start;
  std::vector<uint32_t> path;
  std::vector<int64_t> position(n, -1);
  uint32_t current = start;
  while (position[current] < 0) {
    position[current] = int64_t(path.size());
    path.push_back(current);
    for (uint32_t id : *node(current).inputs()) {
      int64_t p = producers[id];
      if (p >= 0 && pending[p] != 0) {
        current = uint32_t(p);
        break;
      }
    }
  }
  std::vector<uint32_t> cycle(path.begin() + position[current], path.end());
  std::reverse(cycle.begin(), cycle.end()); // producer before consumer
  // Start at the node stored first, so the message does not depend on where
  // the walk entered the cycle.
  std::rotate(cycle.begin(), std::min_element(cycle.begin(), cycle.end()),
              cycle.end());
  InFlightDiagnostic diag = nodeError(cycle.front());
  diag << "the graph has a cycle: ";
  for (uint32_t i : cycle)
    diag << "node " << nodeLabel(i) << " feeds ";
  diag << "node " << nodeLabel(cycle.front());
  return failure();
}

//===----------------------------------------------------------------------===//
// Stage 5: the module
//===----------------------------------------------------------------------===//

// The kiln.* attributes of a function argument or result for tensor |t|;
// results carry no initializer.
DictionaryAttr Importer::boundaryAttrs(uint32_t t, bool withInit) {
  const fbs::Tensor &ten = tensor(t);
  Builder b(context);
  NamedAttrList attrs;
  if (std::optional<Role> role = graph::toKiln(ten.role()))
    attrs.append(KilnDialect::kRoleAttrName, RoleAttr::get(context, *role));
  if (const fbs::Initializer *init = ten.init(); init && withInit)
    attrs.append(KilnDialect::kInitAttrName,
                 InitializerAttr::get(context, *graph::toKiln(init->kind()),
                                      APFloat(init->value()), APFloat(init->scale()),
                                      init->seed()));
  if (ten.name() && ten.name()->size())
    attrs.append(KilnDialect::kNameAttrName, b.getStringAttr(ten.name()->str()));
  if (ten.grad_of() >= 0)
    attrs.append(KilnDialect::kGradOfAttrName, b.getI64IntegerAttr(ten.grad_of()));
  if (ten.updates() >= 0)
    attrs.append(KilnDialect::kUpdatesAttrName, b.getI64IntegerAttr(ten.updates()));
  if (ten.copy_of() >= 0)
    attrs.append(KilnDialect::kCopyOfAttrName, b.getI64IntegerAttr(ten.copy_of()));
  if (ten.index_bound() > 0 && withInit) // arguments only
    attrs.append(KilnDialect::kIndexBoundAttrName,
                 b.getI64IntegerAttr(ten.index_bound()));
  return attrs.getDictionary(context);
}

LogicalResult Importer::buildNode(OpBuilder &b, uint32_t i,
                                  std::vector<Value> &values) {
  const fbs::Node &n = node(i);
  OperationState state(nodeLoc(i), graph::opNameOf(n.op()));
  if (const flatbuffers::Vector<uint32_t> *ins = n.inputs())
    for (uint32_t id : *ins)
      state.operands.push_back(values[id]);
  if (const flatbuffers::Vector<uint32_t> *outs = n.outputs())
    for (uint32_t id : *outs)
      state.types.push_back(types[id]);
  Operation *op = b.create(state);
  if (const flatbuffers::Vector<uint32_t> *outs = n.outputs())
    for (auto [k, id] : llvm::enumerate(*outs))
      values[id] = op->getResult(k);

  if (failed(graph::importNodeAttrs(n.op(), n, op, [&] { return nodeError(i); })))
    return failure();

  // Verify the op now, while we know which node it came from, and restate
  // the verifier's messages with the node's name in front.
  std::vector<std::string> messages;
  LogicalResult verified = success();
  {
    ScopedDiagnosticHandler capture(context, [&](Diagnostic &diag) {
      std::string text = diag.str();
      // The verifier's "see current operation: ..." note prints the op in
      // generic form; the node's name says more to the reader of a file.
      for (Diagnostic &note : diag.getNotes())
        if (!StringRef(note.str()).starts_with("see current operation"))
          text += " (" + note.str() + ")";
      messages.push_back(std::move(text));
      return success();
    });
    verified = mlir::verify(op, /*verifyRecursively=*/false);
  }
  for (const std::string &text : messages)
    nodeError(i) << text;
  if (failed(verified) && messages.empty())
    nodeError(i) << "'" << op->getName() << "' failed to verify";
  return verified;
}

OwningOpRef<ModuleOp> Importer::buildModule() {
  OpBuilder b(context);
  OwningOpRef<ModuleOp> module = ModuleOp::create(fileLoc);

  std::string name = graph->name() && graph->name()->size()
                         ? graph->name()->str()
                         : std::string("main");
  SmallVector<uint32_t> inputs, outputs;
  if (graph->inputs())
    inputs.assign(graph->inputs()->begin(), graph->inputs()->end());
  if (graph->outputs())
    outputs.assign(graph->outputs()->begin(), graph->outputs()->end());
  SmallVector<Type> argTypes, resultTypes;
  for (uint32_t id : inputs)
    argTypes.push_back(types[id]);
  for (uint32_t id : outputs)
    resultTypes.push_back(types[id]);

  b.setInsertionPointToEnd(module->getBody());
  auto func = b.create<func::FuncOp>(
      NameLoc::get(b.getStringAttr(name), fileLoc), name,
      b.getFunctionType(argTypes, resultTypes));
  for (auto [k, id] : llvm::enumerate(inputs))
    func.setArgAttrs(k, boundaryAttrs(id, /*withInit=*/true));
  for (auto [k, id] : llvm::enumerate(outputs))
    func.setResultAttrs(k, boundaryAttrs(id, /*withInit=*/false));

  Block *body = func.addEntryBlock();
  std::vector<Value> values(numTensors());
  for (auto [k, id] : llvm::enumerate(inputs)) {
    body->getArgument(k).setLoc(tensorLoc(id));
    values[id] = body->getArgument(k);
  }
  b.setInsertionPointToEnd(body);
  for (uint32_t i : order) {
    if (tooManyErrors())
      break;
    (void)buildNode(b, i, values);
  }
  if (errors)
    return nullptr;

  SmallVector<Value> results;
  for (uint32_t id : outputs)
    results.push_back(values[id]);
  b.create<func::ReturnOp>(fileLoc, results);

  if (const fbs::Training *t = graph->training()) {
    std::optional<OptimizerKind> optimizer = graph::toKiln(t->optimizer());
    std::optional<LrSchedule> schedule = graph::toKiln(t->schedule());
    if (!optimizer)
      graphError() << "training: unknown optimizer " << unsigned(t->optimizer())
                   << " (expected 0.." << unsigned(fbs::Optimizer::MAX) << ")";
    if (!schedule)
      graphError() << "training: unknown learning-rate schedule "
                   << unsigned(t->schedule()) << " (expected 0.."
                   << unsigned(fbs::Schedule::MAX) << ")";
    if (errors)
      return nullptr;
    (*module)->setAttr(
        KilnDialect::kTrainingAttrName,
        TrainingAttr::get(context, *optimizer, APFloat(t->learning_rate()),
                          APFloat(t->momentum()), t->nesterov(),
                          APFloat(t->beta1()), APFloat(t->beta2()),
                          APFloat(t->epsilon()), APFloat(t->weight_decay()),
                          APFloat(t->clip_norm()), *schedule,
                          t->warmup_steps(), t->total_steps()));
  }

  // Every op has been verified; this checks the function and module around
  // them (argument and result attributes, the return).
  std::vector<std::string> messages;
  LogicalResult verified = success();
  {
    ScopedDiagnosticHandler capture(context, [&](Diagnostic &diag) {
      messages.push_back(diag.str());
      return success();
    });
    verified = mlir::verify(*module);
  }
  for (const std::string &text : messages)
    graphError() << text;
  if (failed(verified))
    return nullptr;
  return module;
}

OwningOpRef<ModuleOp> Importer::run(StringRef bytes) {
  context->loadDialect<KilnDialect, func::FuncDialect>();
  if (failed(checkBuffer(bytes)) || failed(checkTensors()) ||
      failed(checkGraph()) || failed(sortNodes()))
    return nullptr;
  return buildModule();
}

} // namespace

OwningOpRef<ModuleOp> importGraph(StringRef bytes, StringRef filename,
                                  MLIRContext *context) {
  return Importer(filename, context).run(bytes);
}

bool looksLikeGraphFile(StringRef bytes) {
  return bytes.size() >= 8 &&
         bytes.substr(4, 4) == StringRef(fbs::GraphIdentifier());
}

} // namespace kiln
