//===- GraphTestUtil.h - graph files built in memory for tests ----*- C++ -*-===//
//
// A small builder for graph files in tests: tensors and nodes are described
// with plain structs, anything may be set to a bad value, and bytes() writes
// the FlatBuffer. Plus a diagnostic collector, so tests can check what the
// importer said.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TESTS_UNIT_SERIALIZE_GRAPHTESTUTIL_H
#define KILN_TESTS_UNIT_SERIALIZE_GRAPHTESTUTIL_H

#include "serialize/GraphSchema.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"

#include <string>
#include <vector>

namespace kiln::test {

struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  fbs::DType dtype = fbs::DType::F32;
  fbs::Role role = fbs::Role::None;
  int64_t indexBound = 0; // Tensor.index_bound (format 1.5)
};

struct NodeSpec {
  std::string name;
  fbs::OpCode op;
  std::vector<uint32_t> inputs;
  std::vector<uint32_t> outputs;
  // Writes the node's attribute table; returns {Attrs::NONE, 0} by default.
  std::function<std::pair<fbs::Attrs, flatbuffers::Offset<void>>(
      flatbuffers::FlatBufferBuilder &)>
      attrs;
};

struct GraphSpec {
  uint16_t major = 1, minor = 0;
  std::string name = "g";
  std::vector<TensorSpec> tensors;
  std::vector<NodeSpec> nodes;
  std::vector<uint32_t> inputs, outputs;
  int32_t loss = -1;

  std::string bytes() const {
    flatbuffers::FlatBufferBuilder fbb;
    std::vector<flatbuffers::Offset<fbs::Tensor>> ts;
    for (const TensorSpec &t : tensors)
      ts.push_back(fbs::CreateTensor(fbb, fbb.CreateString(t.name),
                                     fbb.CreateVector(t.shape), t.dtype, t.role,
                                     /*init=*/0, /*grad_of=*/-1, /*updates=*/-1,
                                     /*copy_of=*/-1, t.indexBound));
    std::vector<flatbuffers::Offset<fbs::Node>> ns;
    for (const NodeSpec &n : nodes) {
      std::pair<fbs::Attrs, flatbuffers::Offset<void>> attrs{fbs::Attrs::NONE, 0};
      if (n.attrs)
        attrs = n.attrs(fbb);
      auto name = fbb.CreateString(n.name);
      auto ins = fbb.CreateVector(n.inputs);
      auto outs = fbb.CreateVector(n.outputs);
      ns.push_back(fbs::CreateNode(fbb, name, n.op, ins, outs, attrs.first,
                                   attrs.second));
    }
    fbs::Version version(major, minor);
    auto nameOffset = fbb.CreateString(name);
    auto tv = fbb.CreateVector(ts);
    auto nv = fbb.CreateVector(ns);
    auto iv = fbb.CreateVector(inputs);
    auto ov = fbb.CreateVector(outputs);
    auto root = fbs::CreateGraph(fbb, &version, nameOffset, tv, nv, iv, ov, loss);
    fbs::FinishGraphBuffer(fbb, root);
    return std::string(reinterpret_cast<const char *>(fbb.GetBufferPointer()),
                       fbb.GetSize());
  }
};

// y = relu(neg(x)) on 2x3 f32: the graph most tests start from and break.
inline GraphSpec tinyGraph() {
  GraphSpec g;
  g.name = "tiny";
  g.tensors = {{"x", {2, 3}, fbs::DType::F32, fbs::Role::Input},
               {"", {2, 3}, fbs::DType::F32, fbs::Role::None},
               {"y", {2, 3}, fbs::DType::F32, fbs::Role::Output}};
  g.nodes = {{"neg", fbs::OpCode::Neg, {0}, {1}, nullptr},
             {"relu", fbs::OpCode::Relu, {1}, {2}, nullptr}};
  g.inputs = {0};
  g.outputs = {2};
  return g;
}

// Collects every diagnostic emitted while it lives.
class DiagnosticCollector {
public:
  explicit DiagnosticCollector(mlir::MLIRContext *context)
      : handler(context, [this](mlir::Diagnostic &diag) {
          messages.push_back(diag.str());
          return mlir::success();
        }) {}
  std::string all() const {
    std::string text;
    for (const std::string &m : messages)
      text += m + "\n";
    return text;
  }
  std::vector<std::string> messages;

private:
  mlir::ScopedDiagnosticHandler handler;
};

} // namespace kiln::test

#endif // KILN_TESTS_UNIT_SERIALIZE_GRAPHTESTUTIL_H
