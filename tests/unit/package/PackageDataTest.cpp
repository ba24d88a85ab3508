//===- PackageDataTest.cpp - data into and out of a package's buffers -----===//
//
// runtime/package/PackageData.h: the element type a data input's batches
// hold (one mapping for kiln train and kiln-cuda-run), batch tensors copied
// into each dtype, and elements read back. Values are checked against
// their own definitions: C++ casts and runtime/Half.h's roundings.
//
//===----------------------------------------------------------------------===//

#include "runtime/package/PackageData.h"

#include "runtime/Half.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

using namespace kiln::runtime;

namespace {

SignatureEntry entry(PkgDType dtype, std::vector<int64_t> shape) {
  SignatureEntry e;
  e.name = "x";
  e.role = PkgRole::Input;
  e.dtype = dtype;
  e.shape = std::move(shape);
  return e;
}

TEST(PackageData, DataElementTypeFollowsTheInputsKind) {
  EXPECT_EQ(dataElementType(PkgDType::F64), ElementType::f64);
  for (PkgDType dtype : {PkgDType::F32, PkgDType::F16, PkgDType::BF16})
    EXPECT_EQ(dataElementType(dtype), ElementType::f32);
  // Indices, token ids and masks are drawn and read as integers, whatever
  // width the step holds them in (kiln-cuda-run once fed I8 and I1
  // inputs f32 data).
  for (PkgDType dtype :
       {PkgDType::I64, PkgDType::I32, PkgDType::I8, PkgDType::I1})
    EXPECT_EQ(dataElementType(dtype), ElementType::i32);
}

TEST(PackageData, IntegerBatchesNarrowToEachIntegerDtype) {
  BatchTensor src;
  src.type = ElementType::i32;
  src.shape = {2, 3};
  src.i32 = {0, 1, -1, 127, 2, 0};
  std::string error;

  int8_t i8[6];
  ASSERT_TRUE(copyBatchTensor(src, entry(PkgDType::I8, {2, 3}), i8, error));
  uint8_t i1[6];
  ASSERT_TRUE(copyBatchTensor(src, entry(PkgDType::I1, {2, 3}), i1, error));
  int64_t i64[6];
  ASSERT_TRUE(copyBatchTensor(src, entry(PkgDType::I64, {2, 3}), i64, error));
  int32_t i32[6];
  ASSERT_TRUE(copyBatchTensor(src, entry(PkgDType::I32, {2, 3}), i32, error));
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(i8[i], static_cast<int8_t>(src.i32[i])) << i;
    EXPECT_EQ(i1[i], src.i32[i] != 0 ? 1 : 0) << i;
    EXPECT_EQ(i64[i], src.i32[i]) << i;
    EXPECT_EQ(i32[i], src.i32[i]) << i;
    EXPECT_EQ(readElement(i8, PkgDType::I8, i), src.i32[i]) << i;
    EXPECT_EQ(readElement(i1, PkgDType::I1, i), src.i32[i] != 0) << i;
  }
}

TEST(PackageData, FloatBatchesRoundToHalvesAndKeepF64) {
  BatchTensor src;
  src.type = ElementType::f32;
  src.shape = {4};
  src.f32 = {0.1f, -3.14159f, 65504.f, 1e-7f};
  std::string error;
  uint16_t bf16[4], f16[4];
  float f32[4];
  ASSERT_TRUE(copyBatchTensor(src, entry(PkgDType::BF16, {4}), bf16, error));
  ASSERT_TRUE(copyBatchTensor(src, entry(PkgDType::F16, {4}), f16, error));
  ASSERT_TRUE(copyBatchTensor(src, entry(PkgDType::F32, {4}), f32, error));
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(bf16[i], floatToBf16(src.f32[i])) << i;
    EXPECT_EQ(f16[i], floatToF16(src.f32[i])) << i;
    EXPECT_EQ(f32[i], src.f32[i]) << i;
    EXPECT_EQ(readElement(bf16, PkgDType::BF16, i), bf16ToFloat(bf16[i]));
  }

  BatchTensor wide;
  wide.type = ElementType::f64;
  wide.shape = {2};
  wide.f64 = {0.1, 1.0 / 3.0};
  double f64[2];
  ASSERT_TRUE(copyBatchTensor(wide, entry(PkgDType::F64, {2}), f64, error));
  EXPECT_EQ(std::memcmp(f64, wide.f64.data(), sizeof f64), 0);
}

TEST(PackageData, ACountThatDiffersNamesTheInput) {
  BatchTensor src;
  src.type = ElementType::i32;
  src.shape = {2, 2};
  src.i32 = {1, 2, 3, 4};
  int32_t dst[6] = {7, 7, 7, 7, 7, 7};
  std::string error;
  EXPECT_FALSE(copyBatchTensor(src, entry(PkgDType::I32, {2, 3}), dst, error));
  EXPECT_EQ(error, "input 'x': the batch holds 4 values, expected 6");
  EXPECT_EQ(dst[0], 7); // nothing written
}

TEST(PackageData, ValuesRoundTripAtTheirPrecision) {
  TensorValues narrow = std::vector<float>{0.5f, -2.25f, 3.0f};
  uint16_t f16[3];
  writeValues(f16, PkgDType::F16, narrow);
  TensorValues back = readValues(f16, PkgDType::F16, 3);
  EXPECT_FALSE(back.wide());
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(back[i], narrow[i]) << i; // exact in f16

  TensorValues wide = std::vector<double>{0.1, 1.0 / 3.0};
  double f64[2];
  writeValues(f64, PkgDType::F64, wide);
  TensorValues wideBack = readValues(f64, PkgDType::F64, 2);
  ASSERT_TRUE(wideBack.wide());
  EXPECT_EQ(wideBack[0], 0.1);
  EXPECT_EQ(wideBack[1], 1.0 / 3.0);
}

} // namespace

// A parameter's initial value in f16 or bf16 is its initializer's f64 value
// rounded once. 1 + 2^-8 + 2^-30 is just above the bf16 tie between 1 and
// 1 + 2^-7 (so it rounds up), but in f32 it is the tie itself (2^-30 is
// under f32's half ulp at 1), which rounds to even, down: rounding through
// f32 gave 1. Likewise 1 + 2^-11 + 2^-30 for f16. The CUDA runtime did
// round through f32, so a CUDA step could start from other bits than the
// CPU's; both now write the initial values with writeInitialValue.
TEST(PackageData, InitialValuesRoundOnceFromTheInitializer) {
  auto initial = [](PkgDType dtype, double value) {
    PackageBuffer b;
    b.dtype = dtype;
    b.shape = {3};
    b.size = 6;
    ParameterInit init;
    init.kind = PkgInitKind::Constant;
    init.value = value;
    std::vector<uint16_t> out(3, 0xdead);
    writeInitialValue(b, init, out.data());
    EXPECT_EQ(out[0], out[2]);
    return out[0];
  };
  double tiny = std::ldexp(1.0, -30);
  EXPECT_EQ(initial(PkgDType::BF16, 1 + std::ldexp(1.0, -8) + tiny), 0x3f81);
  EXPECT_EQ(floatToBf16(float(1 + std::ldexp(1.0, -8) + tiny)), 0x3f80);
  EXPECT_EQ(initial(PkgDType::F16, 1 + std::ldexp(1.0, -11) + tiny), 0x3c01);
  EXPECT_EQ(floatToF16(float(1 + std::ldexp(1.0, -11) + tiny)), 0x3c00);
  // Exactly at the tie: to even, either way.
  EXPECT_EQ(initial(PkgDType::BF16, 1 + std::ldexp(1.0, -8)), 0x3f80);
  EXPECT_EQ(initial(PkgDType::F16, 1 + std::ldexp(1.0, -11)), 0x3c00);

  // Data is copied as it is.
  PackageBuffer b;
  b.dtype = PkgDType::F32;
  b.shape = {2};
  b.size = 8;
  ParameterInit init;
  init.hasData = true;
  float data[2] = {1.5f, -2.25f};
  init.data.assign(reinterpret_cast<uint8_t *>(data),
                   reinterpret_cast<uint8_t *>(data) + 8);
  float out[2] = {0, 0};
  writeInitialValue(b, init, out);
  EXPECT_EQ(out[0], 1.5f);
  EXPECT_EQ(out[1], -2.25f);
}
