//===- OnnxModelTest.cpp - the ONNX wire-format reader on hand-encoded bytes -===//
//
// Messages are encoded here field by field from onnx.proto's numbers, in
// both forms a writer may use for repeated scalars (packed and one per
// key), so the reader is checked against the wire format itself rather
// than against one writer's habits. The lit tests in tests/lit/import read
// files that the onnx package and torch.onnx.export wrote.
//
//===----------------------------------------------------------------------===//

#include "serialize/OnnxModel.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>

using namespace kiln::onnx;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

namespace {

std::string varint(uint64_t v) {
  std::string out;
  do {
    uint8_t byte = v & 0x7f;
    v >>= 7;
    out.push_back(static_cast<char>(byte | (v ? 0x80 : 0)));
  } while (v);
  return out;
}

std::string key(uint32_t field, int wire) { return varint(uint64_t(field) << 3 | wire); }
std::string intField(uint32_t field, uint64_t v) { return key(field, 0) + varint(v); }
std::string bytesField(uint32_t field, const std::string &bytes) {
  return key(field, 2) + varint(bytes.size()) + bytes;
}
std::string fixed32(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  std::string out;
  for (int b = 0; b < 4; ++b)
    out.push_back(static_cast<char>(bits >> (8 * b)));
  return out;
}

// A model around |graph|, importing opset 17.
std::string model(const std::string &graph) {
  std::string opset = bytesField(1, "") + intField(2, 17);
  return intField(1, 8) + bytesField(2, "pytorch") + bytesField(7, graph) +
         bytesField(8, opset);
}

TEST(OnnxModel, ReadsNodesAttributesInitializersAndShapes) {
  // Initializer "w": FLOAT [2, 2], dims one per key, float_data packed.
  std::string w = intField(1, 2) + intField(1, 2) + intField(2, 1) +
                  bytesField(4, fixed32(1.5f) + fixed32(-2) + fixed32(0.25f) + fixed32(8)) +
                  bytesField(8, "w");
  // Initializer "shape": INT64 [2], int64_data packed, a negative value.
  std::string shape = bytesField(1, varint(2)) + intField(2, 7) +
                      bytesField(7, varint(4) + varint(uint64_t(-1))) +
                      bytesField(8, "shape");
  // Initializer "h": FLOAT16 [2] in int32_data: 1.0 and -2.0.
  std::string h = intField(1, 2) + intField(2, 10) + intField(5, 0x3c00) +
                  intField(5, 0xc000) + bytesField(8, "h");
  // Node Gemm(x, w) -> y with alpha (f, fixed32), transB (i) and an
  // unknown field (99) that is skipped.
  std::string alpha = bytesField(1, "alpha") + key(2, 5) + fixed32(0.5f) + intField(20, 1);
  std::string transB = bytesField(1, "transB") + intField(3, 1) + intField(20, 2);
  std::string pads = bytesField(1, "pads") + bytesField(8, varint(1) + varint(2)) +
                     intField(20, 7);
  // A list of strings (an LSTM's activations): field 9, one per key.
  std::string activations = bytesField(1, "activations") + bytesField(9, "Sigmoid") +
                            bytesField(9, "Tanh") + intField(20, 8);
  std::string node = bytesField(1, "x") + bytesField(1, "w") + bytesField(2, "y") +
                     bytesField(3, "fc") + bytesField(4, "Gemm") + bytesField(5, alpha) +
                     bytesField(5, transB) + bytesField(5, pads) +
                     bytesField(5, activations) + intField(99, 5);
  // Input x: FLOAT ["batch", 2].
  std::string dims = bytesField(1, bytesField(2, "batch")) + bytesField(1, intField(1, 2));
  std::string tensorType = intField(1, 1) + bytesField(2, dims);
  std::string x = bytesField(1, "x") + bytesField(2, bytesField(1, tensorType));
  std::string graph = bytesField(1, node) + bytesField(2, "g") + bytesField(5, w) +
                      bytesField(5, shape) + bytesField(5, h) + bytesField(11, x);
  std::string error;
  std::optional<Model> m = parseModel(model(graph), error);
  ASSERT_TRUE(m) << error;
  EXPECT_EQ(m->irVersion, 8);
  EXPECT_EQ(m->producerName, "pytorch");
  EXPECT_EQ(m->defaultOpset(), 17);
  ASSERT_EQ(m->graph.nodes.size(), 1u);
  const Node &n = m->graph.nodes[0];
  EXPECT_EQ(n.opType, "Gemm");
  EXPECT_EQ(n.name, "fc");
  EXPECT_THAT(n.inputs, ElementsAre("x", "w"));
  EXPECT_THAT(n.outputs, ElementsAre("y"));
  ASSERT_TRUE(n.attribute("alpha"));
  EXPECT_EQ(n.attribute("alpha")->f, 0.5f);
  EXPECT_EQ(n.attribute("transB")->i, 1);
  EXPECT_THAT(n.attribute("pads")->ints, ElementsAre(1, 2));
  ASSERT_TRUE(n.attribute("activations"));
  EXPECT_THAT(n.attribute("activations")->strings, ElementsAre("Sigmoid", "Tanh"));
  EXPECT_EQ(n.attribute("missing"), nullptr);
  ASSERT_EQ(m->graph.initializers.size(), 3u);
  EXPECT_THAT(m->graph.initializers[0].dims, ElementsAre(2, 2));
  EXPECT_THAT(m->graph.initializers[0].toDoubles(), ElementsAre(1.5, -2, 0.25, 8));
  EXPECT_THAT(m->graph.initializers[1].toIntegers(), ElementsAre(4, -1));
  EXPECT_THAT(m->graph.initializers[2].toDoubles(), ElementsAre(1.0, -2.0));
  ASSERT_EQ(m->graph.inputs.size(), 1u);
  const ValueInfo &in = m->graph.inputs[0];
  EXPECT_EQ(in.elemType, 1);
  ASSERT_TRUE(in.hasShape);
  ASSERT_EQ(in.dims.size(), 2u);
  EXPECT_FALSE(in.dims[0].value);
  EXPECT_EQ(in.dims[0].param, "batch");
  EXPECT_EQ(in.dims[1].value, 2);
}

// A graph attribute (field 6, type GRAPH = 5) holding |graph|.
std::string graphAttribute(const std::string &name, const std::string &graph) {
  return bytesField(1, name) + bytesField(6, graph) + intField(20, 5);
}

TEST(OnnxModel, ReadsSubgraphsAndRefusesDeepNesting) {
  // If(c) whose then_branch holds a Loop whose body holds a Tanh; the
  // else_branch an Identity.
  std::string tanh =
      bytesField(1, "s") + bytesField(2, "t") + bytesField(4, "Tanh");
  std::string body = bytesField(1, tanh) + bytesField(2, "body") +
                     bytesField(11, bytesField(1, "s")) +
                     bytesField(12, bytesField(1, "t"));
  std::string loop = bytesField(1, "m") + bytesField(2, "l") +
                     bytesField(4, "Loop") +
                     bytesField(5, graphAttribute("body", body));
  std::string then = bytesField(1, loop) + bytesField(2, "then") +
                     bytesField(12, bytesField(1, "l"));
  std::string identity =
      bytesField(1, "x") + bytesField(2, "e") + bytesField(4, "Identity");
  std::string otherwise = bytesField(1, identity) + bytesField(2, "else") +
                          bytesField(12, bytesField(1, "e"));
  std::string node = bytesField(1, "c") + bytesField(2, "y") +
                     bytesField(4, "If") +
                     bytesField(5, graphAttribute("then_branch", then)) +
                     bytesField(5, graphAttribute("else_branch", otherwise));
  std::string error;
  std::optional<Model> m = parseModel(model(bytesField(1, node)), error);
  ASSERT_TRUE(m) << error;
  const Node &n = m->graph.nodes[0];
  ASSERT_TRUE(n.attribute("then_branch") && n.attribute("then_branch")->g);
  EXPECT_EQ(n.attribute("then_branch")->type, 5);
  const Graph &t = *n.attribute("then_branch")->g;
  EXPECT_EQ(t.name, "then");
  ASSERT_EQ(t.nodes.size(), 1u);
  EXPECT_EQ(t.nodes[0].opType, "Loop");
  ASSERT_TRUE(t.nodes[0].attribute("body") && t.nodes[0].attribute("body")->g);
  const Graph &b = *t.nodes[0].attribute("body")->g;
  ASSERT_EQ(b.nodes.size(), 1u);
  EXPECT_EQ(b.nodes[0].opType, "Tanh");
  ASSERT_EQ(b.inputs.size(), 1u);
  EXPECT_EQ(b.inputs[0].name, "s");
  ASSERT_EQ(b.outputs.size(), 1u);
  EXPECT_EQ(b.outputs[0].name, "t");
  const Graph &e = *n.attribute("else_branch")->g;
  ASSERT_EQ(e.nodes.size(), 1u);
  EXPECT_EQ(e.nodes[0].opType, "Identity");
  EXPECT_EQ(n.attribute("pads"), nullptr);

  // Subgraphs nested 16 deep are read; 17 deep are refused (a file made
  // to exhaust the stack gets an error, not a crash).
  auto nested = [](int depth) {
    std::string graph = bytesField(2, "leaf");
    for (int d = 0; d < depth; ++d)
      graph = bytesField(
          1, bytesField(4, "If") +
                 bytesField(5, graphAttribute("then_branch", graph)));
    return graph;
  };
  EXPECT_TRUE(parseModel(model(nested(16)), error)) << error;
  EXPECT_FALSE(parseModel(model(nested(17)), error));
  EXPECT_THAT(error, HasSubstr("subgraphs nest more than 16 deep"));
}

TEST(OnnxModel, RawDataIsTakenAsItIs) {
  std::string raw = fixed32(3) + fixed32(-1);
  std::string t = intField(1, 2) + intField(2, 1) + bytesField(9, raw) + bytesField(8, "b");
  std::string error;
  std::optional<Model> m = parseModel(model(bytesField(5, t)), error);
  ASSERT_TRUE(m) << error;
  EXPECT_THAT(m->graph.initializers[0].toDoubles(), ElementsAre(3, -1));
}

TEST(OnnxModel, MalformedBytesNameTheOffset) {
  std::string error;
  // A length past the end.
  std::string cut = model(bytesField(2, "g"));
  cut = cut.substr(0, cut.size() - 3);
  EXPECT_FALSE(parseModel(cut, error));
  EXPECT_THAT(error, HasSubstr("runs past the end"));
  EXPECT_THAT(error, HasSubstr("at byte"));
  // A group (wire type 3).
  EXPECT_FALSE(parseModel(key(5, 3), error));
  EXPECT_THAT(error, HasSubstr("wire type 3"));
  // An 11-byte varint.
  EXPECT_FALSE(parseModel(key(1, 0) + std::string(10, '\xff') + "\x01", error));
  EXPECT_THAT(error, HasSubstr("longer than 10 bytes"));
  // Data that does not fill the shape.
  std::string t = intField(1, 3) + intField(2, 1) + bytesField(9, fixed32(1)) +
                  bytesField(8, "short");
  EXPECT_FALSE(parseModel(model(bytesField(5, t)), error));
  EXPECT_THAT(error, HasSubstr("tensor 'short' holds 4 bytes of data; its shape and "
                               "FLOAT need 12"));
  // No graph at all.
  EXPECT_FALSE(parseModel(intField(1, 8), error));
  EXPECT_THAT(error, HasSubstr("no graph"));
}

// Dimensions [-1, -1] once matched one element of data (their product is
// 1), and [2^62, 4] none (its byte count wraps to 0): both reached the
// importer with shapes no tensor has.
TEST(OnnxModel, DimensionsMustBeSizesWithinInt64) {
  std::string error;
  std::string negative = intField(1, uint64_t(-1)) + intField(1, uint64_t(-1)) +
                         intField(2, 1) + bytesField(9, fixed32(7)) +
                         bytesField(8, "neg");
  EXPECT_FALSE(parseModel(model(bytesField(5, negative)), error));
  EXPECT_THAT(error, HasSubstr("tensor 'neg' has the dimension -1: expected "
                               "sizes of 0 or more"));
  std::string wrapped = intField(1, uint64_t(1) << 62) + intField(1, 4) +
                        intField(2, 1) + bytesField(9, "") +
                        bytesField(8, "wrap");
  EXPECT_FALSE(parseModel(model(bytesField(5, wrapped)), error));
  EXPECT_THAT(error, HasSubstr("tensor 'wrap' has the dimension"));
  EXPECT_THAT(error, HasSubstr("past int64 in bytes"));
}

} // namespace
