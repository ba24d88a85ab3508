//===- GraphExportTest.cpp - exportGraph and the format's op table --------===//
//
// The format covers the dialect (every kiln op but kiln.fusion and
// kiln.yield has an op code, every dialect enum value a graph enum partner),
// export is deterministic, and export -> import gives back the module.
//
//===----------------------------------------------------------------------===//

#include "serialize/GraphExport.h"
#include "serialize/GraphImport.h"

#include "ir/KilnOps.h"
#include "serialize/GraphEnums.h"
#include "serialize/GraphOps.h"
#include "tests/unit/serialize/GraphTestUtil.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <set>

namespace {

using namespace kiln;
using namespace kiln::test;

class GraphExportTest : public ::testing::Test {
protected:
  GraphExportTest() { context.loadDialect<KilnDialect, mlir::func::FuncDialect>(); }

  std::string print(mlir::ModuleOp module) {
    std::string text;
    llvm::raw_string_ostream os(text);
    module.print(os);
    return text;
  }

  // |bytes| (the export of |original|) imported as |name|: a valid module
  // that prints as |original| does, and exports to the same bytes again
  // (the writer is deterministic).
  void expectRoundTrip(mlir::ModuleOp original, const std::vector<uint8_t> &bytes,
                       llvm::StringRef name) {
    mlir::OwningOpRef<mlir::ModuleOp> imported = importGraph(
        llvm::StringRef(reinterpret_cast<const char *>(bytes.data()), bytes.size()),
        name, &context);
    ASSERT_TRUE(imported);
    EXPECT_TRUE(mlir::succeeded(mlir::verify(*imported)));
    EXPECT_EQ(print(*imported), print(original));
    std::vector<uint8_t> again;
    ASSERT_TRUE(mlir::succeeded(exportGraph(*imported, again)));
    EXPECT_EQ(again, bytes);
  }

  mlir::MLIRContext context;
};

constexpr const char *kModel = R"mlir(
module attributes {kiln.training = #kiln.training<optimizer = momentum, learning_rate = 0.5, momentum = 0.9>} {
  func.func @mlp(%x: tensor<4x8xf32> {kiln.role = #kiln.role<input>, kiln.name = "x"},
                 %w: tensor<8x3xf32> {kiln.role = #kiln.role<parameter>, kiln.name = "w",
                                      kiln.init = #kiln.init<kind = glorot_uniform, seed = 3>},
                 %y: tensor<4xi32> {kiln.role = #kiln.role<label>})
      -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
    %d = kiln.dot_general %x, %w, batch = [] x [], contract = [1] x [0]
        : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
    %c = kiln.constant dense<[1.0, 2.0, 3.0]> : tensor<3xf32>
    %b = kiln.broadcast_in_dim %c, dims = [1] : tensor<3xf32> -> tensor<4x3xf32>
    %e = kiln.add %d, %b : tensor<4x3xf32>
    %l = kiln.softmax_cross_entropy %e, %y : (tensor<4x3xf32>, tensor<4xi32>) -> tensor<4xf32>
    %m = kiln.reduce mean %l, dims = [0] : tensor<4xf32> -> tensor<f32>
    return %m : tensor<f32>
  }
}
)mlir";

TEST_F(GraphExportTest, EveryKilnOpHasAnOpCode) {
  std::set<std::string> covered;
  for (fbs::OpCode code : graph::allOpCodes()) {
    llvm::StringRef name = graph::opNameOf(code);
    ASSERT_FALSE(name.empty()) << "op code " << unsigned(code) << " has no op";
    EXPECT_TRUE(covered.insert(name.str()).second) << name.str() << " twice";
  }
  // The codes are dense and the enum has no more values than the table.
  EXPECT_EQ(graph::allOpCodes().size(), size_t(fbs::OpCode::MAX) + 1);
  for (size_t i = 0; i < graph::allOpCodes().size(); ++i)
    EXPECT_EQ(size_t(graph::allOpCodes()[i]), i);

  std::set<std::string> registered;
  for (mlir::RegisteredOperationName op : context.getRegisteredOperations())
    if (op.getDialectNamespace() == KilnDialect::getDialectNamespace())
      registered.insert(op.getStringRef().str());
  registered.erase(FusionOp::getOperationName().str());
  registered.erase(YieldOp::getOperationName().str());
  EXPECT_EQ(covered, registered)
      << "every kiln op but fusion and yield needs an OpCode in graph.fbs and "
         "a line in serialize/GraphOps.cpp";
}

template <typename K, typename F>
void expectEnumRoundTrip(unsigned maxValue, std::optional<K> (*symbolize)(uint32_t)) {
  std::set<unsigned> seen;
  for (unsigned v = 0; v <= maxValue; ++v) {
    std::optional<K> value = symbolize(v);
    ASSERT_TRUE(value);
    F file = graph::toFbs(*value);
    EXPECT_TRUE(graph::isKnown(file));
    EXPECT_TRUE(seen.insert(unsigned(file)).second) << "two values map to one";
    std::optional<K> back = graph::toKiln(file);
    ASSERT_TRUE(back);
    EXPECT_EQ(*back, *value);
  }
}

TEST_F(GraphExportTest, EveryDialectEnumValueHasAPartner) {
  expectEnumRoundTrip<Role, fbs::Role>(getMaxEnumValForRole(), symbolizeRole);
  expectEnumRoundTrip<InitKind, fbs::InitKind>(getMaxEnumValForInitKind(),
                                               symbolizeInitKind);
  expectEnumRoundTrip<CompareDirection, fbs::CompareDirection>(
      getMaxEnumValForCompareDirection(), symbolizeCompareDirection);
  expectEnumRoundTrip<ReduceKind, fbs::ReduceKind>(getMaxEnumValForReduceKind(),
                                                   symbolizeReduceKind);
  expectEnumRoundTrip<GeluApproximation, fbs::GeluApproximation>(
      getMaxEnumValForGeluApproximation(), symbolizeGeluApproximation);
  expectEnumRoundTrip<OptimizerKind, fbs::Optimizer>(getMaxEnumValForOptimizerKind(),
                                                     symbolizeOptimizerKind);
  expectEnumRoundTrip<LrSchedule, fbs::Schedule>(getMaxEnumValForLrSchedule(),
                                                 symbolizeLrSchedule);
  // Role::None is the file's "no role".
  EXPECT_FALSE(graph::toKiln(fbs::Role::None));
}

TEST_F(GraphExportTest, DTypesRoundTrip) {
  for (unsigned v = 0; v <= unsigned(fbs::DType::MAX); ++v) {
    auto dtype = static_cast<fbs::DType>(v);
    mlir::Type type = graph::toKiln(dtype, &context);
    ASSERT_TRUE(type);
    EXPECT_EQ(graph::toFbs(type), dtype);
    EXPECT_GT(graph::bytesPerElement(dtype), 0u);
  }
  EXPECT_FALSE(graph::toFbs(mlir::IntegerType::get(&context, 16)));
}

TEST_F(GraphExportTest, ExportImportGivesTheModuleBack) {
  mlir::OwningOpRef<mlir::ModuleOp> original =
      mlir::parseSourceString<mlir::ModuleOp>(kModel, &context);
  ASSERT_TRUE(original);
  std::vector<uint8_t> bytes;
  ASSERT_TRUE(mlir::succeeded(exportGraph(*original, bytes)));
  EXPECT_TRUE(looksLikeGraphFile(
      llvm::StringRef(reinterpret_cast<const char *>(bytes.data()), bytes.size())));

  // Exporting the import gives the same bytes: the writer is deterministic.
  expectRoundTrip(*original, bytes, "mlp.kiln");
}

TEST_F(GraphExportTest, NodeNamesComeFromNameLocs) {
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceString<mlir::ModuleOp>(kModel, &context);
  ASSERT_TRUE(module);
  auto func = module->lookupSymbol<mlir::func::FuncOp>("mlp");
  mlir::Operation &dot = func.getBody().front().front();
  dot.setLoc(mlir::NameLoc::get(mlir::StringAttr::get(&context, "fc1.matmul")));
  std::vector<uint8_t> bytes;
  ASSERT_TRUE(mlir::succeeded(exportGraph(*module, bytes)));
  const fbs::Graph *graph = fbs::GetGraph(bytes.data());
  EXPECT_EQ(graph->nodes()->Get(0)->name()->str(), "fc1.matmul");
  EXPECT_EQ(graph->nodes()->Get(1)->name()->str(), "constant_1");
  EXPECT_EQ(graph->loss(), int32_t(graph->outputs()->Get(0)));
  EXPECT_EQ(graph->tensors()->Get(graph->loss())->role(), fbs::Role::Loss);
  ASSERT_TRUE(graph->training());
  EXPECT_EQ(graph->training()->optimizer(), fbs::Optimizer::Momentum);
  EXPECT_EQ(graph->training()->momentum(), 0.9);
}

// FlatBuffers omits scalars equal to their default, and -0.0 == 0.0: the
// writer must keep the sign (a fuzzer finding).
TEST_F(GraphExportTest, NegativeZeroSurvives) {
  mlir::OwningOpRef<mlir::ModuleOp> original = mlir::parseSourceString<mlir::ModuleOp>(R"mlir(
    module attributes {kiln.training = #kiln.training<optimizer = sgd, momentum = -0.0, weight_decay = -0.0>} {
      func.func @f(%a: tensor<2xf32> {kiln.init = #kiln.init<kind = constant, value = -0.0>}) -> tensor<4xf32> {
        %p = kiln.pad %a, low = [1], high = [1], value = -0.0 : tensor<2xf32> -> tensor<4xf32>
        return %p : tensor<4xf32>
      }
    })mlir", &context);
  ASSERT_TRUE(original);
  std::string text = print(*original);
  ASSERT_THAT(text, ::testing::HasSubstr("momentum = -0.000000e+00"));
  std::vector<uint8_t> bytes;
  ASSERT_TRUE(mlir::succeeded(exportGraph(*original, bytes)));
  mlir::OwningOpRef<mlir::ModuleOp> imported = importGraph(
      llvm::StringRef(reinterpret_cast<const char *>(bytes.data()), bytes.size()),
      "zero.kiln", &context);
  ASSERT_TRUE(imported);
  EXPECT_EQ(print(*imported), text);
}

// kiln.attention and kiln.attention_grad carry scale and causal in an
// AttentionAttrs table and keep both results' and all three results' types.
TEST_F(GraphExportTest, AttentionRoundTrips) {
  mlir::OwningOpRef<mlir::ModuleOp> original = mlir::parseSourceString<mlir::ModuleOp>(R"mlir(
    func.func @attn(%q: tensor<2x3x5x4xbf16>, %k: tensor<2x3x7x4xbf16>, %v: tensor<2x3x7x6xbf16>,
                    %g: tensor<2x3x5x6xbf16>)
        -> (tensor<2x3x5x6xbf16>, tensor<2x3x5xf32>, tensor<2x3x5x4xbf16>, tensor<2x3x7x4xbf16>, tensor<2x3x7x6xbf16>) {
      %out, %lse = kiln.attention %q, %k, %v {scale = 0.125 : f64, causal = true}
          : (tensor<2x3x5x4xbf16>, tensor<2x3x7x4xbf16>, tensor<2x3x7x6xbf16>)
          -> (tensor<2x3x5x6xbf16>, tensor<2x3x5xf32>)
      %dq, %dk, %dv = kiln.attention_grad %q, %k, %v, %out, %lse, %g {scale = -0.0 : f64, causal = false}
          : (tensor<2x3x5x4xbf16>, tensor<2x3x7x4xbf16>, tensor<2x3x7x6xbf16>, tensor<2x3x5x6xbf16>,
             tensor<2x3x5xf32>, tensor<2x3x5x6xbf16>)
          -> (tensor<2x3x5x4xbf16>, tensor<2x3x7x4xbf16>, tensor<2x3x7x6xbf16>)
      return %out, %lse, %dq, %dk, %dv : tensor<2x3x5x6xbf16>, tensor<2x3x5xf32>, tensor<2x3x5x4xbf16>, tensor<2x3x7x4xbf16>, tensor<2x3x7x6xbf16>
    })mlir", &context);
  ASSERT_TRUE(original);
  std::vector<uint8_t> bytes;
  ASSERT_TRUE(mlir::succeeded(exportGraph(*original, bytes)));

  const fbs::Graph *graph = fbs::GetGraph(bytes.data());
  EXPECT_EQ(graph->version()->minor_version(), graph::kFormatMinor);
  ASSERT_EQ(graph->nodes()->size(), 2u);
  const fbs::Node *fwd = graph->nodes()->Get(0), *bwd = graph->nodes()->Get(1);
  EXPECT_EQ(fwd->op(), fbs::OpCode::Attention);
  EXPECT_EQ(fwd->outputs()->size(), 2u);
  ASSERT_EQ(fwd->attrs_type(), fbs::Attrs::AttentionAttrs);
  EXPECT_EQ(fwd->attrs_as_AttentionAttrs()->scale(), 0.125);
  EXPECT_TRUE(fwd->attrs_as_AttentionAttrs()->causal());
  EXPECT_EQ(bwd->op(), fbs::OpCode::AttentionGrad);
  EXPECT_EQ(bwd->inputs()->size(), 6u);
  EXPECT_EQ(bwd->outputs()->size(), 3u);
  ASSERT_EQ(bwd->attrs_type(), fbs::Attrs::AttentionAttrs);
  EXPECT_FALSE(bwd->attrs_as_AttentionAttrs()->causal());
  EXPECT_TRUE(std::signbit(bwd->attrs_as_AttentionAttrs()->scale()));

  expectRoundTrip(*original, bytes, "attn.kiln");
}

// kiln.attention_qkv and kiln.attention_qkv_grad (format 1.3, op codes 60
// and 61) take AttentionAttrs; operands stay in order.
TEST_F(GraphExportTest, PackedAttentionRoundTrips) {
  mlir::OwningOpRef<mlir::ModuleOp> original = mlir::parseSourceString<mlir::ModuleOp>(R"mlir(
    func.func @packed(%qkv: tensor<2x5x3x4x8xbf16>, %dout: tensor<2x5x4x8xbf16>) -> (tensor<2x5x4x8xbf16>, tensor<2x5x3x4x8xbf16>) {
      %out, %lse = kiln.attention_qkv %qkv {scale = 0.125 : f64, causal = true} : (tensor<2x5x3x4x8xbf16>) -> (tensor<2x5x4x8xbf16>, tensor<2x4x5xf32>)
      %d = kiln.attention_qkv_grad %qkv, %out, %lse, %dout {scale = 0.125 : f64, causal = true} : (tensor<2x5x3x4x8xbf16>, tensor<2x5x4x8xbf16>, tensor<2x4x5xf32>, tensor<2x5x4x8xbf16>) -> tensor<2x5x3x4x8xbf16>
      return %out, %d : tensor<2x5x4x8xbf16>, tensor<2x5x3x4x8xbf16>
    })mlir", &context);
  ASSERT_TRUE(original);
  std::vector<uint8_t> bytes;
  ASSERT_TRUE(mlir::succeeded(exportGraph(*original, bytes)));

  const fbs::Graph *graph = fbs::GetGraph(bytes.data());
  EXPECT_EQ(graph->version()->minor_version(), graph::kFormatMinor);
  EXPECT_EQ(static_cast<int>(fbs::OpCode::AttentionQkv), 60);
  EXPECT_EQ(static_cast<int>(fbs::OpCode::AttentionQkvGrad), 61);
  ASSERT_EQ(graph->nodes()->size(), 2u);
  const fbs::Node *fwd = graph->nodes()->Get(0), *bwd = graph->nodes()->Get(1);
  EXPECT_EQ(fwd->op(), fbs::OpCode::AttentionQkv);
  EXPECT_EQ(fwd->inputs()->size(), 1u);
  EXPECT_EQ(fwd->outputs()->size(), 2u);
  ASSERT_EQ(fwd->attrs_type(), fbs::Attrs::AttentionAttrs);
  EXPECT_EQ(fwd->attrs_as_AttentionAttrs()->scale(), 0.125);
  EXPECT_TRUE(fwd->attrs_as_AttentionAttrs()->causal());
  EXPECT_EQ(bwd->op(), fbs::OpCode::AttentionQkvGrad);
  EXPECT_EQ(bwd->inputs()->size(), 4u);
  EXPECT_EQ(bwd->outputs()->size(), 1u);
  ASSERT_EQ(bwd->attrs_type(), fbs::Attrs::AttentionAttrs);

  expectRoundTrip(*original, bytes, "packed.kiln");
}

// kiln.gelu_grad (format 1.2, op code 59) takes GeluAttrs, as kiln.gelu does;
// x and dy stay in order and both forms survive.
TEST_F(GraphExportTest, GeluGradRoundTrips) {
  mlir::OwningOpRef<mlir::ModuleOp> original = mlir::parseSourceString<mlir::ModuleOp>(R"mlir(
    func.func @dgelu(%x: tensor<4x6xbf16>, %dy: tensor<4x6xbf16>) -> (tensor<4x6xbf16>, tensor<4x6xbf16>) {
      %a = kiln.gelu_grad tanh, %x, %dy : tensor<4x6xbf16>
      %b = kiln.gelu_grad erf, %dy, %x : tensor<4x6xbf16>
      return %a, %b : tensor<4x6xbf16>, tensor<4x6xbf16>
    })mlir", &context);
  ASSERT_TRUE(original);
  std::vector<uint8_t> bytes;
  ASSERT_TRUE(mlir::succeeded(exportGraph(*original, bytes)));

  const fbs::Graph *graph = fbs::GetGraph(bytes.data());
  EXPECT_EQ(graph->version()->minor_version(), graph::kFormatMinor);
  EXPECT_EQ(static_cast<int>(fbs::OpCode::GeluGrad), 59);
  ASSERT_EQ(graph->nodes()->size(), 2u);
  const fbs::Node *a = graph->nodes()->Get(0), *b = graph->nodes()->Get(1);
  EXPECT_EQ(a->op(), fbs::OpCode::GeluGrad);
  ASSERT_EQ(a->inputs()->size(), 2u);
  EXPECT_EQ(a->outputs()->size(), 1u);
  ASSERT_EQ(a->attrs_type(), fbs::Attrs::GeluAttrs);
  EXPECT_EQ(a->attrs_as_GeluAttrs()->approximate(), fbs::GeluApproximation::Tanh);
  EXPECT_EQ(b->op(), fbs::OpCode::GeluGrad);
  ASSERT_EQ(b->attrs_type(), fbs::Attrs::GeluAttrs);
  EXPECT_EQ(b->attrs_as_GeluAttrs()->approximate(), fbs::GeluApproximation::Erf);
  // b reads (dy, x): the operands keep their order.
  ASSERT_EQ(b->inputs()->size(), 2u);
  EXPECT_EQ(a->inputs()->Get(0), b->inputs()->Get(1));
  EXPECT_EQ(a->inputs()->Get(1), b->inputs()->Get(0));

  expectRoundTrip(*original, bytes, "dgelu.kiln");
}

TEST_F(GraphExportTest, FusionIsRefused) {
  mlir::OwningOpRef<mlir::ModuleOp> module = mlir::parseSourceString<mlir::ModuleOp>(R"mlir(
    func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {
      %f = kiln.fusion loop (%a) : (tensor<4xf32>) -> tensor<4xf32> {
      ^bb0(%x: tensor<4xf32>):
        %s = kiln.neg %x : tensor<4xf32>
        kiln.yield %s : tensor<4xf32>
      }
      return %f : tensor<4xf32>
    })mlir", &context);
  ASSERT_TRUE(module);
  DiagnosticCollector collector(&context);
  std::vector<uint8_t> bytes;
  EXPECT_TRUE(mlir::failed(exportGraph(*module, bytes)));
  EXPECT_THAT(collector.all(), ::testing::HasSubstr("'kiln.fusion' cannot be stored"));
}

} // namespace
