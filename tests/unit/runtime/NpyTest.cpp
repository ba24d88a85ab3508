//===- NpyTest.cpp - the .npy reader and the npy:DIR dataset ---------------===//
//
// Files are written byte by byte in the test, so the expected values are
// known without NumPy; one test also reads a file NumPy itself wrote, when
// python3 with numpy is available.
//
//===----------------------------------------------------------------------===//

#include "runtime/data/Npy.h"
#include "runtime/data/Sampler.h"
#include "tests/unit/runtime/TestFiles.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>

using namespace kiln::runtime;
using kiln::testing::ScratchDir;
using kiln::testing::writeBytes;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

namespace {

// A .npy file: magic, version, header length, |dict| padded with spaces
// and a newline to a multiple of 64 bytes (as NumPy does), then |data|.
std::vector<uint8_t> makeNpy(const std::string &dict,
                             const std::vector<uint8_t> &data,
                             int major = 1) {
  size_t prefix = major == 1 ? 10 : 12;
  std::string header = dict;
  while ((prefix + header.size() + 1) % 64 != 0)
    header += ' ';
  header += '\n';
  std::vector<uint8_t> out = {0x93, 'N', 'U', 'M', 'P', 'Y', uint8_t(major), 0};
  size_t n = header.size();
  out.push_back(uint8_t(n));
  out.push_back(uint8_t(n >> 8));
  if (major != 1) {
    out.push_back(uint8_t(n >> 16));
    out.push_back(uint8_t(n >> 24));
  }
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

template <typename T>
std::vector<uint8_t> le(const std::vector<T> &values) {
  std::vector<uint8_t> out(values.size() * sizeof(T));
  std::memcpy(out.data(), values.data(), out.size()); // host is little-endian
  return out;
}

std::string dict(const std::string &descr, const std::string &shape,
                 bool fortran = false) {
  return "{'descr': '" + descr + "', 'fortran_order': " +
         (fortran ? "True" : "False") + ", 'shape': " + shape + ", }";
}

} // namespace

TEST(Npy, ReadsFloat32Version1) {
  auto a = parseNpy(makeNpy(dict("<f4", "(2, 3)"),
                            le<float>({1, 2, 3, 4.5f, -5, 6})),
                    "x.npy");
  ASSERT_TRUE(a.isOk()) << a.status().message();
  EXPECT_THAT(a->shape, ElementsAre(2, 3));
  EXPECT_EQ(a->descr, "<f4");
  EXPECT_EQ(a->asDouble(3), 4.5);
  EXPECT_EQ(a->asDouble(4), -5.0);
}

TEST(Npy, ReadsVersion2HeaderAndEveryDtype) {
  auto i8 = parseNpy(makeNpy(dict("<i8", "(3,)"), le<int64_t>({7, -2, 40}), 2),
                     "v2.npy");
  ASSERT_TRUE(i8.isOk()) << i8.status().message();
  EXPECT_THAT(i8->shape, ElementsAre(3));
  EXPECT_EQ(i8->asInt32(1).value(), -2);

  auto f8 = parseNpy(makeNpy(dict("<f8", "(2,)"), le<double>({0.25, 1e10})),
                     "f8.npy");
  ASSERT_TRUE(f8.isOk());
  EXPECT_EQ(f8->asDouble(1), 1e10);

  auto i4 = parseNpy(makeNpy(dict("<i4", "(1,)"), le<int32_t>({-123456})),
                     "i4.npy");
  ASSERT_TRUE(i4.isOk());
  EXPECT_EQ(i4->asInt32(0).value(), -123456);

  auto u1 = parseNpy(makeNpy(dict("|u1", "(2,)"), {200, 3}), "u1.npy");
  ASSERT_TRUE(u1.isOk());
  EXPECT_EQ(u1->asInt32(0).value(), 200);

  auto u2 = parseNpy(makeNpy(dict("<u2", "(2,)"), le<uint16_t>({65535, 9})),
                     "u2.npy");
  ASSERT_TRUE(u2.isOk());
  EXPECT_EQ(u2->asInt32(0).value(), 65535);

  auto scalar = parseNpy(makeNpy(dict("<f4", "()"), le<float>({3})), "s.npy");
  ASSERT_TRUE(scalar.isOk());
  EXPECT_TRUE(scalar->shape.empty());
  EXPECT_EQ(scalar->elementCount(), 1);
}

TEST(Npy, Int64OutsideInt32IsAnError) {
  auto a = parseNpy(makeNpy(dict("<i8", "(1,)"), le<int64_t>({int64_t(1) << 40})),
                    "big.npy");
  ASSERT_TRUE(a.isOk());
  EXPECT_FALSE(a->asInt32(0).isOk());
}

TEST(Npy, RejectsFortranOrder) {
  auto a = parseNpy(makeNpy(dict("<f4", "(2, 2)", true), le<float>({1, 2, 3, 4})),
                    "f.npy");
  ASSERT_FALSE(a.isOk());
  EXPECT_THAT(a.status().message(), HasSubstr("f.npy"));
  EXPECT_THAT(a.status().message(), HasSubstr("fortran_order"));
}

TEST(Npy, RejectsBadMagic) {
  std::vector<uint8_t> bytes = makeNpy(dict("<f4", "(1,)"), le<float>({1}));
  bytes[1] = 'X';
  auto a = parseNpy(bytes, "m.npy");
  ASSERT_FALSE(a.isOk());
  EXPECT_THAT(a.status().message(), HasSubstr("magic"));
  EXPECT_FALSE(parseNpy({0x93, 'N'}, "short.npy").isOk());
}

TEST(Npy, RejectsTruncation) {
  std::vector<uint8_t> bytes =
      makeNpy(dict("<f4", "(4,)"), le<float>({1, 2, 3, 4}));
  std::vector<uint8_t> shortData(bytes.begin(), bytes.end() - 3);
  auto a = parseNpy(shortData, "t.npy");
  ASSERT_FALSE(a.isOk());
  EXPECT_THAT(a.status().message(), HasSubstr("truncated"));
  EXPECT_THAT(a.status().message(), HasSubstr("expected 16 data bytes"));

  std::vector<uint8_t> shortHeader(bytes.begin(), bytes.begin() + 30);
  auto h = parseNpy(shortHeader, "h.npy");
  ASSERT_FALSE(h.isOk());
  EXPECT_THAT(h.status().message(), HasSubstr("truncated"));

  std::vector<uint8_t> extra = bytes;
  extra.push_back(0);
  EXPECT_FALSE(parseNpy(extra, "e.npy").isOk());
}

TEST(Npy, RejectsUnsupportedDtypeAndMalformedHeader) {
  auto big = parseNpy(makeNpy(dict(">f4", "(1,)"), le<float>({1})), "b.npy");
  ASSERT_FALSE(big.isOk());
  EXPECT_THAT(big.status().message(), HasSubstr("'>f4'"));
  EXPECT_FALSE(parseNpy(makeNpy("{'descr': '<f4', 'shape': (1,)}",
                                le<float>({1})),
                        "n.npy")
                   .isOk());
  EXPECT_FALSE(parseNpy(makeNpy("not a dict", {}), "x.npy").isOk());
  EXPECT_FALSE(parseNpy(makeNpy(dict("<f4", "(a,)"), {}), "x.npy").isOk());
  EXPECT_FALSE(parseNpy(makeNpy(dict("<f4", "(1,)"), le<float>({1}), 9),
                        "v9.npy")
                   .isOk());
}

TEST(NpyDataset, OneFilePerInputWithSharedLeadingDimension) {
  ScratchDir dir;
  writeBytes(dir.file("x.npy"),
             makeNpy(dict("<f4", "(3, 2)"), le<float>({0, 1, 10, 11, 20, 21})));
  writeBytes(dir.file("y.npy"), makeNpy(dict("|u1", "(3,)"), {5, 6, 7}));
  auto ds = NpyDataset::open(dir.path());
  ASSERT_TRUE(ds.isOk()) << ds.status().message();
  const Dataset &d = *ds.value();
  EXPECT_EQ(d.size(), 3);
  ASSERT_EQ(d.specs().size(), 2u);
  EXPECT_EQ(d.specs()[0].name, "x");
  EXPECT_EQ(d.specs()[0].type, ElementType::f32);
  EXPECT_THAT(d.specs()[0].shape, ElementsAre(2));
  EXPECT_EQ(d.specs()[1].type, ElementType::i32);
  float x[2];
  ASSERT_TRUE(d.copySample(2, 0, x).isOk());
  EXPECT_THAT(x, ElementsAre(20.0f, 21.0f));
  int32_t y;
  ASSERT_TRUE(d.copySample(1, 1, &y).isOk());
  EXPECT_EQ(y, 6);
  EXPECT_FALSE(d.copySample(3, 0, x).isOk());

  // Named inputs with requested types: integer data may feed f32 inputs.
  auto typed = NpyDataset::open(
      dir.path(), {{"y", ElementType::f32}, {"x", ElementType::f32}});
  ASSERT_TRUE(typed.isOk()) << typed.status().message();
  float yf;
  ASSERT_TRUE(typed.value()->copySample(0, 0, &yf).isOk());
  EXPECT_EQ(yf, 5.0f);
  auto wrong = NpyDataset::open(dir.path(), {{"x", ElementType::i32}});
  ASSERT_FALSE(wrong.isOk());
  EXPECT_THAT(wrong.status().message(), HasSubstr("integer dtype"));
}

// An f64 input (a model trained in f64) reads float64 files unrounded and
// float32 and integer files exactly; its batches hold doubles.
TEST(NpyDataset, F64InputsKeepFloat64Values) {
  ScratchDir dir;
  double fine = 1.0 + 0x1p-40;
  writeBytes(dir.file("x.npy"), makeNpy(dict("<f8", "(2, 2)"),
                                        le<double>({fine, 0.1, -3, 1e-300})));
  writeBytes(dir.file("n.npy"),
             makeNpy(dict("<i4", "(2,)"), le<int32_t>({7, -8})));
  auto ds = NpyDataset::open(
      dir.path(), {{"x", ElementType::f64}, {"n", ElementType::f64}});
  ASSERT_TRUE(ds.isOk()) << ds.status().message();
  double x[2];
  ASSERT_TRUE(ds.value()->copySample(0, 0, x).isOk());
  EXPECT_THAT(x, ElementsAre(fine, 0.1));
  auto batch = assembleBatch(*ds.value(), {1, 0});
  ASSERT_TRUE(batch.isOk()) << batch.status().message();
  const BatchTensor &bx = batch->tensors[0];
  EXPECT_EQ(bx.type, ElementType::f64);
  EXPECT_THAT(bx.f64, ElementsAre(-3, 1e-300, fine, 0.1));
  EXPECT_EQ(bx.elementCount(), 4);
  EXPECT_EQ(bx.element(2), fine);
  EXPECT_THAT(batch->tensors[1].f64, ElementsAre(-8, 7));
  // The same file for an f32 input rounds.
  auto narrow = NpyDataset::open(dir.path(), {{"x", ElementType::f32}});
  ASSERT_TRUE(narrow.isOk());
  float xf[2];
  ASSERT_TRUE(narrow.value()->copySample(0, 0, xf).isOk());
  EXPECT_THAT(xf, ElementsAre(1.0f, 0.1f));
}

TEST(NpyDataset, ErrorsNameTheFile) {
  ScratchDir dir;
  writeBytes(dir.file("a.npy"), makeNpy(dict("<f4", "(2,)"), le<float>({1, 2})));
  writeBytes(dir.file("b.npy"), makeNpy(dict("<f4", "(3,)"), le<float>({1, 2, 3})));
  auto mismatch = NpyDataset::open(dir.path());
  ASSERT_FALSE(mismatch.isOk());
  EXPECT_THAT(mismatch.status().message(), HasSubstr("b.npy: 3 samples"));
  auto missing = NpyDataset::open(dir.path(), {{"label", ElementType::i32}});
  ASSERT_FALSE(missing.isOk());
  EXPECT_THAT(missing.status().message(), HasSubstr("label.npy"));
  ScratchDir empty;
  EXPECT_FALSE(NpyDataset::open(empty.path()).isOk());
}

TEST(Npy, ReadsWhatNumpyWrites) {
  if (!kiln::testing::hasPythonModule("numpy"))
    GTEST_SKIP() << "python3 with numpy is not available";
  ScratchDir dir;
  std::string cmd =
      "python3 -c \"import numpy as np; "
      "np.save('" + dir.file("f.npy") + "', np.arange(12, dtype='<f4').reshape(3, 4) / 4); "
      "np.save('" + dir.file("g.npy") + "', np.array([[1, -2], [3, 2**31 - 1]], dtype='<i8'))\"";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  auto f = readNpy(dir.file("f.npy"));
  ASSERT_TRUE(f.isOk()) << f.status().message();
  EXPECT_THAT(f->shape, ElementsAre(3, 4));
  for (int i = 0; i < 12; ++i)
    EXPECT_EQ(f->asDouble(i), i / 4.0);
  auto g = readNpy(dir.file("g.npy"));
  ASSERT_TRUE(g.isOk()) << g.status().message();
  EXPECT_EQ(g->asInt32(3).value(), INT32_MAX);
  EXPECT_EQ(g->asInt32(1).value(), -2);
}
