//===- GraphImportTest.cpp - importGraph on in-memory buffers -------------===//
//
// Valid graphs import into verified modules; every class of malformed file
// (short, truncated at every length, random bytes, bit flips, wrong
// identifier, future version, ids out of range, cycles, shape and dtype
// mismatches, unknown enums) returns null with an error that names the node
// or the problem, and never crashes.
//
//===----------------------------------------------------------------------===//

#include "serialize/GraphImport.h"
#include "serialize/GraphEnums.h"

#include "ir/KilnOps.h"
#include "tests/unit/serialize/GraphTestUtil.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Verifier.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

namespace {

using namespace kiln;
using namespace kiln::test;
using ::testing::HasSubstr;

class GraphImportTest : public ::testing::Test {
protected:
  GraphImportTest() { context.loadDialect<KilnDialect, mlir::func::FuncDialect>(); }

  // Imports |bytes|; returns the module (or null) and keeps the messages.
  mlir::OwningOpRef<mlir::ModuleOp> import(const std::string &bytes) {
    DiagnosticCollector collector(&context);
    mlir::OwningOpRef<mlir::ModuleOp> module =
        importGraph(bytes, "test.kiln", &context);
    messages = collector.all();
    return module;
  }

  // Expects |bytes| to be refused with a message containing |expected|.
  void expectRefused(const std::string &bytes, const std::string &expected) {
    mlir::OwningOpRef<mlir::ModuleOp> module = import(bytes);
    EXPECT_FALSE(module) << "imported a malformed graph";
    EXPECT_THAT(messages, HasSubstr(expected));
  }

  mlir::MLIRContext context;
  std::string messages;
};

TEST_F(GraphImportTest, TinyGraphImports) {
  mlir::OwningOpRef<mlir::ModuleOp> module = import(tinyGraph().bytes());
  ASSERT_TRUE(module) << messages;
  EXPECT_TRUE(mlir::succeeded(mlir::verify(*module)));
  auto func = module->lookupSymbol<mlir::func::FuncOp>("tiny");
  ASSERT_TRUE(func);
  EXPECT_EQ(func.getNumArguments(), 1u);
  EXPECT_EQ(func.getNumResults(), 1u);
  auto role = func.getArgAttrOfType<RoleAttr>(0, KilnDialect::kRoleAttrName);
  ASSERT_TRUE(role);
  EXPECT_EQ(role.getValue(), Role::input);
  auto name = func.getResultAttrOfType<mlir::StringAttr>(0, KilnDialect::kNameAttrName);
  ASSERT_TRUE(name);
  EXPECT_EQ(name.getValue(), "y");

  // The ops come in order, and their locations carry the node names.
  std::vector<std::string> names;
  for (mlir::Operation &op : func.getBody().front().without_terminator()) {
    auto loc = mlir::dyn_cast<mlir::NameLoc>(op.getLoc());
    ASSERT_TRUE(loc);
    names.push_back(loc.getName().str());
    auto file = mlir::dyn_cast<mlir::FileLineColLoc>(loc.getChildLoc());
    ASSERT_TRUE(file);
    EXPECT_EQ(file.getFilename().getValue(), "test.kiln");
  }
  EXPECT_THAT(names, ::testing::ElementsAre("neg", "relu"));
}

TEST_F(GraphImportTest, EmptyNameBecomesMain) {
  GraphSpec g = tinyGraph();
  g.name = "";
  mlir::OwningOpRef<mlir::ModuleOp> module = import(g.bytes());
  ASSERT_TRUE(module) << messages;
  EXPECT_TRUE(module->lookupSymbol<mlir::func::FuncOp>("main"));
}

TEST_F(GraphImportTest, NodesOutOfOrderAreSorted) {
  GraphSpec g = tinyGraph();
  std::swap(g.nodes[0], g.nodes[1]);
  mlir::OwningOpRef<mlir::ModuleOp> module = import(g.bytes());
  ASSERT_TRUE(module) << messages;
  auto func = module->lookupSymbol<mlir::func::FuncOp>("tiny");
  mlir::Block &body = func.getBody().front();
  EXPECT_TRUE(mlir::isa<NegOp>(body.front()));
  EXPECT_TRUE(mlir::isa<ReluOp>(*std::next(body.begin())));
}

TEST_F(GraphImportTest, UnalignedBufferImports) {
  std::string bytes = tinyGraph().bytes();
  std::string shifted = " " + bytes;
  mlir::OwningOpRef<mlir::ModuleOp> module =
      importGraph(llvm::StringRef(shifted).drop_front(1), "test.kiln", &context);
  EXPECT_TRUE(module);
}

TEST_F(GraphImportTest, LooksLikeGraphFile) {
  EXPECT_TRUE(looksLikeGraphFile(tinyGraph().bytes()));
  EXPECT_FALSE(looksLikeGraphFile("module {}"));
  EXPECT_FALSE(looksLikeGraphFile("1234KIL"));
  EXPECT_FALSE(looksLikeGraphFile(""));
}

//===----------------------------------------------------------------------===//
// Malformed buffers
//===----------------------------------------------------------------------===//

TEST_F(GraphImportTest, EmptyAndShortFiles) {
  expectRefused("", "the file is 0 bytes long, too short for a graph file");
  expectRefused("1234KIL", "the file is 7 bytes long");
}

TEST_F(GraphImportTest, EveryTruncationIsRefused) {
  std::string bytes = tinyGraph().bytes();
  // The last few bytes may be alignment padding nothing points into; losing
  // them leaves a valid graph. Any shorter prefix is refused.
  size_t refused = 0;
  for (size_t n = 0; n < bytes.size(); ++n) {
    mlir::OwningOpRef<mlir::ModuleOp> module = import(bytes.substr(0, n));
    if (module) {
      EXPECT_GE(n + 8, bytes.size()) << "a prefix of " << n << " bytes imported";
      EXPECT_TRUE(mlir::succeeded(mlir::verify(*module)));
      continue;
    }
    ++refused;
    EXPECT_THAT(messages, HasSubstr("graph: the file ")) << "prefix " << n;
  }
  EXPECT_GE(refused + 8, bytes.size());
}

TEST_F(GraphImportTest, RandomBytesAreRefused) {
  std::mt19937 rng(42);
  for (int round = 0; round < 200; ++round) {
    std::string bytes(8 + rng() % 2048, '\0');
    for (char &c : bytes)
      c = char(rng());
    if (round % 2)
      bytes.replace(4, 4, "KILN"); // get past the identifier check
    mlir::OwningOpRef<mlir::ModuleOp> module = import(bytes);
    EXPECT_FALSE(module);
    EXPECT_THAT(messages, ::testing::AnyOf(HasSubstr("not a kiln graph file"),
                                           HasSubstr("truncated or corrupt")));
  }
}

// Flipping any bit of a valid file either leaves a graph that imports into a
// module that verifies, or gives an error; it never crashes.
TEST_F(GraphImportTest, BitFlipsNeverCrash) {
  GraphSpec g = tinyGraph();
  g.nodes[1].op = fbs::OpCode::Compare;
  g.nodes[1].attrs = [](flatbuffers::FlatBufferBuilder &fbb) {
    return std::make_pair(fbs::Attrs::CompareAttrs,
                          fbs::CreateCompareAttrs(fbb, fbs::CompareDirection::Lt).Union());
  };
  g.nodes[1].inputs = {1, 1};
  g.tensors[2].dtype = fbs::DType::I1;
  std::string bytes = g.bytes();
  ASSERT_TRUE(import(bytes)) << messages;
  int imported = 0, refused = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string flipped = bytes;
      flipped[i] = char(flipped[i] ^ (1 << bit));
      mlir::OwningOpRef<mlir::ModuleOp> module = import(flipped);
      if (module) {
        ++imported;
        EXPECT_TRUE(mlir::succeeded(mlir::verify(*module)));
      } else {
        ++refused;
        EXPECT_FALSE(messages.empty()) << "refused without a message";
      }
    }
  }
  EXPECT_GT(refused, 0);
  EXPECT_GT(imported, 0); // names and padding bytes can change harmlessly
}

TEST_F(GraphImportTest, WrongIdentifier) {
  std::string bytes = tinyGraph().bytes();
  bytes.replace(4, 4, "TFL3");
  expectRefused(bytes, "not a kiln graph file: the file identifier (bytes 4 to "
                       "7) is 'TFL3', expected 'KILN'");
}

TEST_F(GraphImportTest, FutureVersions) {
  GraphSpec g = tinyGraph();
  std::string current = "1." + std::to_string(graph::kFormatMinor);
  g.major = 2;
  expectRefused(g.bytes(), "unsupported graph format version 2.0: this reader "
                           "reads version " +
                               current + " ");
  g.major = 1;
  g.minor = graph::kFormatMinor + 1;
  expectRefused(g.bytes(), "unsupported graph format version 1." +
                               std::to_string(graph::kFormatMinor + 1));
  g.major = 0;
  g.minor = 0;
  expectRefused(g.bytes(), "unsupported graph format version 0.0");
}

//===----------------------------------------------------------------------===//
// Malformed graphs
//===----------------------------------------------------------------------===//

TEST_F(GraphImportTest, IdsOutOfRange) {
  GraphSpec g = tinyGraph();
  g.nodes[0].inputs = {17};
  expectRefused(g.bytes(), "node 'neg': input 0 is tensor 17, but the graph has 3 tensors");
  g = tinyGraph();
  g.nodes[1].outputs = {3};
  expectRefused(g.bytes(), "node 'relu': output 0 is tensor 3");
  g = tinyGraph();
  g.inputs = {4000000000u};
  expectRefused(g.bytes(), "graph input 0 is tensor 4000000000");
  g = tinyGraph();
  g.outputs = {9};
  expectRefused(g.bytes(), "graph output 0 is tensor 9");
  g = tinyGraph();
  g.loss = 3;
  expectRefused(g.bytes(), "the loss is tensor 3, but the graph has 3 tensors");
  g.loss = -2;
  expectRefused(g.bytes(), "the loss is tensor -2");
}

TEST_F(GraphImportTest, Cycles) {
  GraphSpec g = tinyGraph();
  g.nodes[0].inputs = {2}; // neg reads relu's output
  expectRefused(g.bytes(), "node 'neg': the graph has a cycle: node 'neg' feeds "
                           "node 'relu' feeds node 'neg'");
  g = tinyGraph();
  g.nodes[1].inputs = {2};
  g.nodes[1].outputs = {2};
  g.nodes[0].outputs = {1};
  expectRefused(g.bytes(), "node 'relu': the graph has a cycle: node 'relu' feeds node 'relu'");
}

TEST_F(GraphImportTest, ProducedTwiceOrNever) {
  GraphSpec g = tinyGraph();
  g.nodes[1].outputs = {1};
  expectRefused(g.bytes(), "node 'relu': output 0 (tensor 1) is already produced by node 'neg'");
  g = tinyGraph();
  g.nodes[0].outputs = {0};
  expectRefused(g.bytes(), "node 'neg': output 0 (tensor 0 ('x')) is a graph input");
  g = tinyGraph();
  g.nodes.erase(g.nodes.begin());
  expectRefused(g.bytes(), "node 'relu': input 0 (tensor 1) is neither a graph "
                           "input nor produced by a node");
  g = tinyGraph();
  g.inputs = {0, 0};
  expectRefused(g.bytes(), "graph input 1 (tensor 0 ('x')) is listed twice");
}

TEST_F(GraphImportTest, ShapeAndDtypeMismatches) {
  GraphSpec g = tinyGraph();
  g.tensors[1].shape = {3, 2};
  expectRefused(g.bytes(), "node 'neg': 'kiln.neg' op");
  g = tinyGraph();
  g.tensors[2].dtype = fbs::DType::I32;
  expectRefused(g.bytes(), "node 'relu': 'kiln.relu' op");
  g = tinyGraph();
  g.nodes[0].op = fbs::OpCode::Exp;
  g.tensors[0].dtype = g.tensors[1].dtype = g.tensors[2].dtype = fbs::DType::I32;
  expectRefused(g.bytes(), "node 'neg': 'kiln.exp' op operand #0 must be");
  // A reduce whose stated result keeps the reduced dimension.
  g = tinyGraph();
  g.nodes[1].op = fbs::OpCode::Reduce;
  g.nodes[1].attrs = [](flatbuffers::FlatBufferBuilder &fbb) {
    std::vector<int64_t> dims = {1};
    return std::make_pair(fbs::Attrs::ReduceAttrs,
                          fbs::CreateReduceAttrs(fbb, fbs::ReduceKind::Sum,
                                                 fbb.CreateVector(dims))
                              .Union());
  };
  expectRefused(g.bytes(), "node 'relu': 'kiln.reduce' op inferred type(s) "
                           "'tensor<2xf32>' are incompatible with return type(s)");
}

TEST_F(GraphImportTest, WrongOperandAndResultCounts) {
  GraphSpec g = tinyGraph();
  g.nodes[1].op = fbs::OpCode::Add;
  expectRefused(g.bytes(), "node 'relu': 'kiln.add' op expected 2 operands, but found 1");
  g = tinyGraph();
  g.nodes[1].outputs = {};
  g.outputs = {1};
  expectRefused(g.bytes(), "node 'relu': 'kiln.relu' op requires one result");
  g = tinyGraph();
  g.nodes[0].op = fbs::OpCode::Constant;
  g.nodes[0].attrs = [](flatbuffers::FlatBufferBuilder &fbb) {
    std::vector<uint8_t> data(24, 0);
    return std::make_pair(fbs::Attrs::ConstantAttrs,
                          fbs::CreateConstantAttrs(fbb, fbb.CreateVector(data)).Union());
  };
  g.nodes[0].outputs = {1, 2};
  g.nodes.pop_back();
  expectRefused(g.bytes(), "node 'neg': kiln.constant has one result, but the node lists 2 outputs");
}

TEST_F(GraphImportTest, UnknownEnums) {
  GraphSpec g = tinyGraph();
  g.nodes[0].op = static_cast<fbs::OpCode>(999);
  expectRefused(g.bytes(), "node 'neg': unknown op code 999");
  g = tinyGraph();
  g.tensors[1].dtype = static_cast<fbs::DType>(200);
  expectRefused(g.bytes(), "tensor 1: unknown element type 200");
  g = tinyGraph();
  g.tensors[0].role = static_cast<fbs::Role>(11);
  expectRefused(g.bytes(), "tensor 0 ('x'): unknown role 11");
  g = tinyGraph();
  g.nodes[0].attrs = [](flatbuffers::FlatBufferBuilder &fbb) {
    return std::make_pair(static_cast<fbs::Attrs>(77),
                          fbs::CreateAxisAttrs(fbb, 1).Union());
  };
  expectRefused(g.bytes(), "node 'neg': unknown attribute table type 77 for 'kiln.neg'");
  g = tinyGraph();
  g.nodes[1].op = fbs::OpCode::Compare;
  g.nodes[1].attrs = [](flatbuffers::FlatBufferBuilder &fbb) {
    return std::make_pair(fbs::Attrs::CompareAttrs,
                          fbs::CreateCompareAttrs(fbb, static_cast<fbs::CompareDirection>(6))
                              .Union());
  };
  expectRefused(g.bytes(), "node 'relu': unknown comparison direction 6");
}

TEST_F(GraphImportTest, AttributeTableMismatch) {
  GraphSpec g = tinyGraph();
  g.nodes[0].attrs = [](flatbuffers::FlatBufferBuilder &fbb) {
    return std::make_pair(fbs::Attrs::AxisAttrs, fbs::CreateAxisAttrs(fbb, 1).Union());
  };
  expectRefused(g.bytes(), "node 'neg': 'kiln.neg' takes no attribute table, but "
                           "the node has AxisAttrs");
  g = tinyGraph();
  g.nodes[1].op = fbs::OpCode::Softmax;
  expectRefused(g.bytes(), "node 'relu': 'kiln.softmax' takes AxisAttrs, but the "
                           "node has no attribute table");
  // The union type says AxisAttrs, but the table itself is absent.
  g = tinyGraph();
  g.nodes[1].op = fbs::OpCode::Softmax;
  g.nodes[1].attrs = [](flatbuffers::FlatBufferBuilder &) {
    return std::make_pair(fbs::Attrs::AxisAttrs, flatbuffers::Offset<void>());
  };
  expectRefused(g.bytes(), "node 'relu': the attribute table AxisAttrs is missing");
}

TEST_F(GraphImportTest, ImpossibleTensors) {
  GraphSpec g = tinyGraph();
  g.tensors[0].shape = {2, -1};
  expectRefused(g.bytes(), "tensor 0 ('x'): dimension 1 is -1, expected a size >= 0");
  g.tensors[0].shape = {INT64_MAX, INT64_MAX};
  expectRefused(g.bytes(), "holds more than 2^48 bytes (256 TiB)");
  g.tensors[0].shape = std::vector<int64_t>(65, 1);
  expectRefused(g.bytes(), "tensor 0 ('x'): rank 65 is above the limit of 64");
}

// Format 1.5: an integer input's index_bound becomes its kiln.index_bound;
// on anything but an integer input or label, or negative, it is refused.
TEST_F(GraphImportTest, IndexBound) {
  GraphSpec g = tinyGraph();
  for (TensorSpec &t : g.tensors)
    t.dtype = fbs::DType::I32;
  g.tensors[0].indexBound = 10;
  mlir::OwningOpRef<mlir::ModuleOp> module = import(g.bytes());
  ASSERT_TRUE(module) << messages;
  auto func = module->lookupSymbol<mlir::func::FuncOp>("tiny");
  ASSERT_TRUE(func);
  auto bound = func.getArgAttrOfType<mlir::IntegerAttr>(
      0, KilnDialect::kIndexBoundAttrName);
  ASSERT_TRUE(bound);
  EXPECT_EQ(bound.getInt(), 10);

  g.tensors[0].indexBound = -1;
  expectRefused(g.bytes(), "tensor 0 ('x'): index_bound is -1, but only an "
                           "integer input or label has one, of at least 1 (0 "
                           "means none)");
  g.tensors[0].indexBound = 0;
  g.tensors[2].indexBound = 4;
  expectRefused(g.bytes(), "tensor 2 ('y'): index_bound is 4, but only an "
                           "integer input or label has one");
  g = tinyGraph();
  g.tensors[0].indexBound = 4;
  expectRefused(g.bytes(), "tensor 0 ('x'): index_bound is 4, but only an "
                           "integer input or label has one");
}

TEST_F(GraphImportTest, ErrorsAreCappedAndEachNamesItsNode) {
  GraphSpec g = tinyGraph();
  for (int i = 0; i < 100; ++i)
    g.nodes.push_back({"bad" + std::to_string(i), fbs::OpCode::Neg, {99}, {}, nullptr});
  DiagnosticCollector collector(&context);
  EXPECT_FALSE(importGraph(g.bytes(), "test.kiln", &context));
  EXPECT_EQ(collector.messages.size(), 20u);
  for (const std::string &m : collector.messages)
    EXPECT_THAT(m, ::testing::StartsWith("node 'bad"));
}

} // namespace
