//===- DatasetTest.cpp - synthetic, token and image datasets ---------------===//

#include "runtime/data/Dataset.h"
#include "tests/unit/runtime/TestFiles.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

using namespace kiln::runtime;
using kiln::testing::ScratchDir;
using kiln::testing::writeBytes;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(SyntheticDataset, DeterministicPerSeedAndIndex) {
  std::vector<TensorSpec> specs = {{"x", ElementType::f32, {2, 3}, 0},
                                   {"y", ElementType::i32, {}, 7}};
  auto a = SyntheticDataset::create(specs, 100, 42);
  auto b = SyntheticDataset::create(specs, 100, 42);
  auto c = SyntheticDataset::create(specs, 100, 43);
  ASSERT_TRUE(a.isOk() && b.isOk() && c.isOk());
  float xa[6], xb[6], xc[6], x2[6];
  ASSERT_TRUE(a.value()->copySample(5, 0, xa).isOk());
  ASSERT_TRUE(b.value()->copySample(5, 0, xb).isOk());
  ASSERT_TRUE(c.value()->copySample(5, 0, xc).isOk());
  ASSERT_TRUE(a.value()->copySample(6, 0, x2).isOk());
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(xa[i], xb[i]);
    EXPECT_GE(xa[i], -1.0f);
    EXPECT_LT(xa[i], 1.0f);
  }
  EXPECT_NE(std::vector<float>(xa, xa + 6), std::vector<float>(xc, xc + 6));
  EXPECT_NE(std::vector<float>(xa, xa + 6), std::vector<float>(x2, x2 + 6));
  for (int64_t i = 0; i < 100; ++i) {
    int32_t y;
    ASSERT_TRUE(a.value()->copySample(i, 1, &y).isOk());
    EXPECT_GE(y, 0);
    EXPECT_LT(y, 7);
  }
  EXPECT_FALSE(a.value()->copySample(100, 0, xa).isOk());
  EXPECT_FALSE(SyntheticDataset::create({{"y", ElementType::i32, {}, 0}}, 1, 0)
                   .isOk());
}

// f64 synthetic data: the f32 tensor's draws before their rounding.
TEST(SyntheticDataset, F64DrawsTheUnroundedValues) {
  auto narrow =
      SyntheticDataset::create({{"x", ElementType::f32, {5}, 0}}, 10, 7);
  auto wide =
      SyntheticDataset::create({{"x", ElementType::f64, {5}, 0}}, 10, 7);
  ASSERT_TRUE(narrow.isOk() && wide.isOk());
  float xf[5];
  double xd[5];
  ASSERT_TRUE(narrow.value()->copySample(3, 0, xf).isOk());
  ASSERT_TRUE(wide.value()->copySample(3, 0, xd).isOk());
  bool finer = false;
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(xf[i], static_cast<float>(xd[i]));
    finer |= static_cast<double>(xf[i]) != xd[i];
  }
  EXPECT_TRUE(finer);
}

TEST(TokenDataset, WindowsOfSeqPlusOne) {
  ScratchDir dir;
  std::vector<uint8_t> bytes;
  for (uint16_t t = 0; t < 11; ++t) { // tokens 1000..1010
    uint16_t v = uint16_t(1000 + t);
    bytes.push_back(uint8_t(v));
    bytes.push_back(uint8_t(v >> 8));
  }
  writeBytes(dir.file("tok.bin"), bytes);
  auto ds = TokenDataset::open(dir.file("tok.bin"), 4);
  ASSERT_TRUE(ds.isOk()) << ds.status().message();
  EXPECT_EQ(ds.value()->size(), 2); // (11 - 1) / 4
  int32_t in[4], target[4];
  ASSERT_TRUE(ds.value()->copySample(1, 0, in).isOk());
  ASSERT_TRUE(ds.value()->copySample(1, 1, target).isOk());
  EXPECT_THAT(in, ElementsAre(1004, 1005, 1006, 1007));
  EXPECT_THAT(target, ElementsAre(1005, 1006, 1007, 1008));
  EXPECT_THAT(ds.value()->specs()[0].shape, ElementsAre(4));

  bytes.push_back(0);
  writeBytes(dir.file("odd.bin"), bytes);
  auto odd = TokenDataset::open(dir.file("odd.bin"), 4);
  ASSERT_FALSE(odd.isOk());
  EXPECT_THAT(odd.status().message(), HasSubstr("odd"));
  EXPECT_FALSE(TokenDataset::open(dir.file("tok.bin"), 20).isOk());
  EXPECT_FALSE(TokenDataset::open(dir.file("missing.bin"), 4).isOk());
}

TEST(ImageClassificationDataset, ScalesPixelsAndReshapes) {
  ImageDataset images;
  images.count = 2;
  images.rows = 2;
  images.cols = 2;
  images.pixels = {0, 255, 51, 102, 1, 2, 3, 4};
  images.labels = {9, 3};
  auto ds = ImageClassificationDataset::create(images, {1, 2, 2});
  ASSERT_TRUE(ds.isOk()) << ds.status().message();
  EXPECT_THAT(ds.value()->specs()[0].shape, ElementsAre(1, 2, 2));
  float px[4];
  ASSERT_TRUE(ds.value()->copySample(0, 0, px).isOk());
  EXPECT_THAT(px, ElementsAre(0.0f, 1.0f, 0.2f, 0.4f));
  int32_t label;
  ASSERT_TRUE(ds.value()->copySample(1, 1, &label).isOk());
  EXPECT_EQ(label, 3);
  auto bad = ImageClassificationDataset::create(images, {5});
  ASSERT_FALSE(bad.isOk());
  EXPECT_THAT(bad.status().message(), HasSubstr("expected rows*cols = 4"));
  // For a model in f64: the same pixels over 255 in double.
  auto wide = ImageClassificationDataset::create(images, {1, 2, 2}, "image",
                                                 "label", ElementType::f64);
  ASSERT_TRUE(wide.isOk()) << wide.status().message();
  EXPECT_EQ(wide.value()->specs()[0].type, ElementType::f64);
  double pd[4];
  ASSERT_TRUE(wide.value()->copySample(0, 0, pd).isOk());
  EXPECT_THAT(pd, ElementsAre(0.0, 1.0, 0.2, 0.4));
  EXPECT_FALSE(ImageClassificationDataset::create(images, {1, 2, 2}, "image",
                                                  "label", ElementType::i32)
                   .isOk());
}
