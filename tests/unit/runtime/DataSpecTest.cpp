//===- DataSpecTest.cpp - --data=SPEC parsing and opening ------------------===//

#include "runtime/data/DataSpec.h"
#include "tests/unit/runtime/TestFiles.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/stat.h>

using namespace kiln::runtime;
using kiln::testing::ScratchDir;
using kiln::testing::writeBytes;
using ::testing::HasSubstr;

namespace {
DataSpec specOf(const std::string &text) {
  auto spec = parseDataSpec(text);
  EXPECT_TRUE(spec.isOk()) << spec.status().message();
  return spec.isOk() ? spec.value() : DataSpec();
}
} // namespace

TEST(DataSpec, ParsesEveryKind) {
  auto f = parseDataSpec("fashion-mnist");
  ASSERT_TRUE(f.isOk());
  EXPECT_EQ(f->kind, DataSpec::Kind::fashionMnist);
  EXPECT_EQ(f->path, kFashionMnistDir);
  EXPECT_EQ(parseDataSpec("fashion-mnist:/d")->path, "/d");
  auto n = parseDataSpec("npy:/data/x");
  ASSERT_TRUE(n.isOk());
  EXPECT_EQ(n->kind, DataSpec::Kind::npy);
  EXPECT_EQ(n->path, "/data/x");
  EXPECT_EQ(parseDataSpec("tokens:t.bin")->kind, DataSpec::Kind::tokens);
  EXPECT_EQ(parseDataSpec("synthetic")->kind, DataSpec::Kind::synthetic);
  for (const char *bad : {"", "npy", "npy:", "tokens:", "imagenet", "synthetic:3"}) {
    auto r = parseDataSpec(bad);
    ASSERT_FALSE(r.isOk()) << bad;
    EXPECT_THAT(r.status().message(), HasSubstr("expected fashion-mnist"));
  }
}

TEST(DataSpec, OpensSyntheticAndTokensForTheInputs) {
  std::vector<TensorSpec> inputs = {{"x", ElementType::f32, {3}, 0},
                                    {"y", ElementType::i32, {}, 4}};
  auto s = openDataset(specOf("synthetic"), inputs, {"train", 50, 1});
  ASSERT_TRUE(s.isOk()) << s.status().message();
  EXPECT_EQ(s.value()->size(), 50);

  ScratchDir dir;
  writeBytes(dir.file("t.bin"), std::vector<uint8_t>(2 * 17, 1));
  std::vector<TensorSpec> tok = {{"ids", ElementType::i32, {8}, 0},
                                 {"next", ElementType::i32, {8}, 0}};
  auto t = openDataset(specOf("tokens:" + dir.file("t.bin")), tok);
  ASSERT_TRUE(t.isOk()) << t.status().message();
  EXPECT_EQ(t.value()->size(), 2);
  EXPECT_EQ(t.value()->specs()[1].name, "next");
  EXPECT_FALSE(openDataset(specOf("tokens:" + dir.file("t.bin")),
                           inputs).isOk());
}

TEST(DataSpec, IndicesPastTheModelsBoundAreRefused) {
  // Tokens 0, 1, ..., 16: two windows of 8 (tokens 0-7 and 8-15 as inputs,
  // 1-8 and 9-16 as next-token targets).
  ScratchDir dir;
  std::vector<uint8_t> bytes;
  for (uint16_t t = 0; t < 17; ++t) {
    bytes.push_back(uint8_t(t));
    bytes.push_back(0);
  }
  writeBytes(dir.file("t.bin"), bytes);
  DataSpec spec = specOf("tokens:" + dir.file("t.bin"));
  auto open = [&](int64_t idsLimit, int64_t nextLimit) {
    std::vector<TensorSpec> tok = {{"ids", ElementType::i32, {8}, 0, idsLimit},
                                   {"next", ElementType::i32, {8}, 0, nextLimit}};
    return openDataset(spec, tok);
  };
  EXPECT_TRUE(open(0, 0).isOk()); // bounds not known: not checked
  EXPECT_TRUE(open(16, 17).isOk());
  auto ids = open(15, 17);
  ASSERT_FALSE(ids.isOk());
  EXPECT_EQ(ids.status().message(),
            "sample 1 of 'ids' holds 15 (element 7), outside [0, 15): the model "
            "reads 'ids' as indices below 15 (a table's rows or a "
            "cross-entropy's classes)");
  auto next = open(16, 16);
  ASSERT_FALSE(next.isOk());
  EXPECT_THAT(next.status().message(),
              HasSubstr("sample 1 of 'next' holds 16 (element 7), outside [0, 16)"));
}

TEST(DataSpec, NpyShapeMismatchNamesTheInput) {
  ScratchDir dir;
  // x.npy: '<f4' of shape (2, 3).
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  while ((10 + header.size() + 1) % 64 != 0)
    header += ' ';
  header += '\n';
  std::vector<uint8_t> bytes = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0,
                                uint8_t(header.size()), 0};
  bytes.insert(bytes.end(), header.begin(), header.end());
  bytes.resize(bytes.size() + 24, 0);
  writeBytes(dir.file("x.npy"), bytes);
  auto ok = openDataset(specOf("npy:" + dir.path()),
                        {{"x", ElementType::f32, {3}, 0}});
  ASSERT_TRUE(ok.isOk()) << ok.status().message();
  auto bad = openDataset(specOf("npy:" + dir.path()),
                         {{"x", ElementType::f32, {4}, 0}});
  ASSERT_FALSE(bad.isOk());
  EXPECT_THAT(bad.status().message(),
              HasSubstr("x is f32[3] per sample: expected f32[4] for input x"));
}

TEST(DataSpec, OpensFashionMnistWhenInstalled) {
  struct stat st;
  if (::stat(kFashionMnistDir, &st) != 0)
    GTEST_SKIP() << kFashionMnistDir << " is not installed";
  auto ds = openDataset(specOf("fashion-mnist"),
                        {{"image", ElementType::f32, {1, 28, 28}, 0},
                         {"label", ElementType::i32, {}, 10}},
                        {"test", 0, 0});
  ASSERT_TRUE(ds.isOk()) << ds.status().message();
  EXPECT_EQ(ds.value()->size(), 10000);
  int32_t label = -1;
  ASSERT_TRUE(ds.value()->copySample(0, 1, &label).isOk());
  EXPECT_EQ(label, 9); // the first test image is an ankle boot
}
