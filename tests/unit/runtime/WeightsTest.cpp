//===- WeightsTest.cpp - parameter values for --init-from ------------------===//

#include "runtime/checkpoint/Weights.h"
#include "tests/unit/runtime/TestFiles.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>

using namespace kiln::runtime;
using kiln::testing::ScratchDir;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

namespace {

SafeTensor raw(const std::string &name, DType dtype, std::vector<int64_t> shape,
               std::vector<uint8_t> data) {
  SafeTensor t;
  t.name = name;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.data = std::move(data);
  return t;
}

// |words| as little-endian 16-bit elements.
std::vector<uint8_t> halves(std::vector<uint16_t> words) {
  std::vector<uint8_t> out;
  for (uint16_t w : words) {
    out.push_back(w & 0xff);
    out.push_back(w >> 8);
  }
  return out;
}

// F32, F16 and BF16 are read as f32; F64 keeps its double values.
TEST(Weights, FloatDtypesAreReadAsF32OrF64) {
  // Bit patterns from the IEEE 754 and bfloat16 tables: 1, -2, 1/3 rounded.
  auto f16 = floatValues(raw("h", DType::F16, {3}, halves({0x3c00, 0xc000, 0x3555})));
  ASSERT_TRUE(f16.isOk()) << f16.status().message();
  EXPECT_FALSE(f16->wide());
  EXPECT_THAT(f16->f32(), ElementsAre(1.0f, -2.0f, 0.333251953125f));
  auto bf16 = floatValues(raw("b", DType::BF16, {3}, halves({0x3f80, 0xc040, 0x3eab})));
  ASSERT_TRUE(bf16.isOk()) << bf16.status().message();
  EXPECT_THAT(bf16->f32(), ElementsAre(1.0f, -3.0f, 0.333984375f));
  double d[2] = {0.1, -1e30};
  std::vector<uint8_t> bytes(sizeof(d));
  std::memcpy(bytes.data(), d, sizeof(d));
  auto f64 = floatValues(raw("d", DType::F64, {2}, bytes));
  ASSERT_TRUE(f64.isOk()) << f64.status().message();
  EXPECT_TRUE(f64->wide());
  EXPECT_THAT(f64->f64(), ElementsAre(0.1, -1e30));
  auto f32 = floatValues(SafeTensor::fromF32("f", {2}, {1.5f, -0.25f}));
  ASSERT_TRUE(f32.isOk());
  EXPECT_THAT(f32->f32(), ElementsAre(1.5f, -0.25f));
  auto i64 = floatValues(SafeTensor::fromI64("n", {1}, {7}));
  ASSERT_FALSE(i64.isOk());
  EXPECT_THAT(i64.status().message(),
              HasSubstr("tensor n has dtype I64: expected F32, F64, F16 or BF16"));
}

TEST(Weights, ASafetensorsFileGivesEveryFloatTensor) {
  ScratchDir dir;
  SafetensorsFile file;
  file.tensors.push_back(SafeTensor::fromF32("fc.weight", {2, 1}, {1, 2}));
  file.tensors.push_back(raw("fc.bias", DType::BF16, {1}, halves({0x4040})));
  file.tensors.push_back(SafeTensor::fromI64("num_batches_tracked", {}, {3}));
  file.metadata["format"] = "pt";
  ASSERT_TRUE(writeSafetensors(dir.file("w.safetensors"), file).isOk());
  auto weights = loadWeights(dir.file("w.safetensors"));
  ASSERT_TRUE(weights.isOk()) << weights.status().message();
  EXPECT_EQ(weights->kind, "safetensors file");
  ASSERT_EQ(weights->tensors.size(), 2u);
  EXPECT_EQ(weights->tensors[0].name, "fc.weight");
  EXPECT_THAT(weights->tensors[0].shape, ElementsAre(2, 1));
  EXPECT_THAT(weights->tensors[0].values.toDoubles(), ElementsAre(1.0f, 2.0f));
  EXPECT_EQ(weights->tensors[1].name, "fc.bias");
  EXPECT_THAT(weights->tensors[1].values.toDoubles(), ElementsAre(3.0f));
  ASSERT_EQ(weights->otherDtypes.size(), 1u);
  EXPECT_EQ(weights->otherDtypes.at("num_batches_tracked"), "I64");
}

TEST(Weights, AKilnCheckpointGivesItsParametersOnly) {
  ScratchDir dir;
  TrainingState state;
  state.parameters.push_back({"w", {2}, {0.5f, -0.5f}});
  state.optimizer["adam.m"].push_back({"w", {2}, {9, 9}});
  state.rngState = {1, 2};
  state.step = 12;
  ASSERT_TRUE(saveCheckpoint(dir.file("step-12.safetensors"), state).isOk());
  auto weights = loadWeights(dir.file("step-12.safetensors"));
  ASSERT_TRUE(weights.isOk()) << weights.status().message();
  EXPECT_EQ(weights->kind, "kiln checkpoint of step 12");
  ASSERT_EQ(weights->tensors.size(), 1u);
  EXPECT_EQ(weights->tensors[0].name, "w");
  EXPECT_THAT(weights->tensors[0].values.toDoubles(), ElementsAre(0.5f, -0.5f));
  EXPECT_TRUE(weights->otherDtypes.empty());
}

TEST(Weights, BadFilesAreNamed) {
  ScratchDir dir;
  auto missing = loadWeights(dir.file("none.safetensors"));
  ASSERT_FALSE(missing.isOk());
  EXPECT_THAT(missing.status().message(), HasSubstr("none.safetensors"));
  kiln::testing::writeBytes(dir.file("cut.safetensors"), {8, 0, 0, 0, 0, 0, 0, 0, '{'});
  auto cut = loadWeights(dir.file("cut.safetensors"));
  ASSERT_FALSE(cut.isOk());
  EXPECT_THAT(cut.status().message(), HasSubstr("cut.safetensors"));
  // A kiln checkpoint is verified as --resume verifies it.
  SafetensorsFile file;
  file.tensors.push_back(SafeTensor::fromF32("w", {1}, {1}));
  file.metadata["format"] = kCheckpointFormat;
  ASSERT_TRUE(writeSafetensors(dir.file("bad.safetensors"), file).isOk());
  auto bad = loadWeights(dir.file("bad.safetensors"));
  ASSERT_FALSE(bad.isOk());
  EXPECT_THAT(bad.status().message(), HasSubstr("__metadata__ lacks \"step\""));
  auto index = loadWeights(dir.file("step-3.index.json"));
  ASSERT_FALSE(index.isOk());
  EXPECT_THAT(index.status().message(), HasSubstr("step-3.index.json"));
}

} // namespace
