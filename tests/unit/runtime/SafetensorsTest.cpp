//===- SafetensorsTest.cpp - checkpoint files: round trip, atomicity, and
//                          verification of malformed files ---------------===//
//
// Malformed files are built byte by byte: each class the loader must catch
// (truncated header, huge header length, bad JSON, unknown dtype, offsets
// out of range or overlapping, size mismatches) gives an error naming the
// file, and random corruptions of a good file never crash the loader.
//
//===----------------------------------------------------------------------===//

#include "runtime/checkpoint/Safetensors.h"
#include "tests/unit/runtime/TestFiles.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>
#include <sys/stat.h>
#include <unistd.h>

using namespace kiln::runtime;
using kiln::testing::readBytes;
using kiln::testing::ScratchDir;
using kiln::testing::writeBytes;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

namespace {

SafetensorsFile sample() {
  SafetensorsFile f;
  f.tensors.push_back(
      SafeTensor::fromF32("fc1.weight", {2, 3}, {1, -2, 3.5f, 0, 1e-8f, -7}));
  f.tensors.push_back(SafeTensor::fromI64("step", {}, {123456789012LL}));
  SafeTensor bf16;
  bf16.name = "adam.m/fc1.bias";
  bf16.dtype = DType::BF16;
  bf16.shape = {2};
  bf16.data = {0x80, 0x3f, 0x00, 0xc0}; // 1.0, -2.0
  f.tensors.push_back(bf16);
  SafeTensor empty;
  empty.name = "empty";
  empty.dtype = DType::BOOL;
  empty.shape = {0, 4};
  f.tensors.push_back(empty);
  f.metadata["step"] = "42";
  f.metadata["seed"] = "7";
  f.metadata["epoch"] = "3";
  f.metadata["position"] = "17";
  f.metadata["note"] = "quote \" backslash \\ newline \n tab \t é";
  return f;
}

// A file with |header| as its JSON and |dataSize| zero bytes of data.
std::vector<uint8_t> rawFile(const std::string &header, size_t dataSize,
                             uint64_t headerLen = UINT64_MAX) {
  uint64_t n = headerLen == UINT64_MAX ? header.size() : headerLen;
  std::vector<uint8_t> out;
  for (int b = 0; b < 8; ++b)
    out.push_back(uint8_t(n >> (8 * b)));
  out.insert(out.end(), header.begin(), header.end());
  out.resize(out.size() + dataSize, 0);
  return out;
}

std::string decodeError(const std::vector<uint8_t> &bytes) {
  auto f = decodeSafetensors(bytes, "ckpt.safetensors");
  if (f.isOk())
    return "(no error)";
  EXPECT_THAT(f.status().message(), HasSubstr("ckpt.safetensors: "));
  return f.status().message();
}

std::string tensor(const std::string &name, const std::string &dtype,
                   const std::string &shape, const std::string &offsets) {
  return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape +
         ",\"data_offsets\":" + offsets + "}";
}

} // namespace

TEST(Safetensors, RoundTripKeepsTensorsAndMetadata) {
  ScratchDir dir;
  std::string path = dir.file("ckpt.safetensors");
  SafetensorsFile in = sample();
  ASSERT_TRUE(writeSafetensors(path, in).isOk());
  auto out = readSafetensors(path);
  ASSERT_TRUE(out.isOk()) << out.status().message();
  EXPECT_EQ(out->metadata, in.metadata);
  ASSERT_EQ(out->tensors.size(), in.tensors.size());
  for (size_t i = 0; i < in.tensors.size(); ++i) {
    const SafeTensor *t = out->find(in.tensors[i].name);
    ASSERT_NE(t, nullptr) << in.tensors[i].name;
    EXPECT_EQ(t->dtype, in.tensors[i].dtype);
    EXPECT_EQ(t->shape, in.tensors[i].shape);
    EXPECT_EQ(t->data, in.tensors[i].data);
  }
  EXPECT_THAT(out->find("fc1.weight")->toF32().value(),
              ElementsAre(1, -2, 3.5f, 0, 1e-8f, -7));
  EXPECT_THAT(out->find("step")->toI64().value(), ElementsAre(123456789012LL));
  EXPECT_FALSE(out->find("step")->toF32().isOk());
  // No temporary file is left behind.
  EXPECT_NE(::access(safetensorsTempPath(path).c_str(), F_OK), 0);
}

TEST(Safetensors, LayoutIsLengthHeaderData) {
  SafetensorsFile f;
  f.tensors.push_back(SafeTensor::fromF32("a", {2}, {1.0f, -2.0f}));
  auto bytes = encodeSafetensors(f);
  ASSERT_TRUE(bytes.isOk());
  const std::vector<uint8_t> &b = bytes.value();
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i)
    n |= uint64_t(b[i]) << (8 * i);
  EXPECT_EQ(n % 8, 0u); // padded like the Python library
  ASSERT_EQ(b.size(), 8 + n + 8);
  std::string header(b.begin() + 8, b.begin() + 8 + n);
  EXPECT_THAT(header, HasSubstr(
      "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}"));
  // 1.0f and -2.0f little-endian.
  EXPECT_THAT(std::vector<uint8_t>(b.end() - 8, b.end()),
              ElementsAre(0, 0, 0x80, 0x3f, 0, 0, 0, 0xc0));
}

TEST(Safetensors, ReadsAHandWrittenFile) {
  std::string header = "{\"__metadata__\":{\"format\":\"pt\"}, " +
                       tensor("b", "I32", "[1]", "[4,8]") + "," +
                       tensor("a", "I8", "[2,2]", "[0,4]") + "}";
  std::vector<uint8_t> bytes = rawFile(header, 0);
  for (uint8_t v : {1, 2, 3, 0xff, 0x10, 0x20, 0, 0})
    bytes.push_back(v);
  auto f = decodeSafetensors(bytes, "hand");
  ASSERT_TRUE(f.isOk()) << f.status().message();
  EXPECT_EQ(f->metadata.at("format"), "pt");
  ASSERT_EQ(f->tensors.size(), 2u);
  EXPECT_EQ(f->tensors[0].name, "a"); // in data order
  EXPECT_THAT(f->find("a")->data, ElementsAre(1, 2, 3, 0xff));
  EXPECT_THAT(f->find("b")->data, ElementsAre(0x10, 0x20, 0, 0));
}

TEST(Safetensors, RejectsEveryMalformedClass) {
  EXPECT_THAT(decodeError({1, 0, 0}), HasSubstr("truncated"));
  // Header length beyond the file.
  EXPECT_THAT(decodeError(rawFile("{}", 0, 64)),
              HasSubstr("header length 64 exceeds the 2 bytes"));
  // Huge header length: refused before allocating.
  EXPECT_THAT(decodeError(rawFile("{}", 0, uint64_t(1) << 62)),
              HasSubstr("exceeds the limit"));
  EXPECT_THAT(decodeError(rawFile("{}", 0, UINT64_MAX - 1)),
              HasSubstr("exceeds the limit"));
  // Bad JSON of several kinds.
  for (const char *bad : {"{\"a\":", "{\"a\" 1}", "{a:1}", "[1,2", "{}}",
                          "{\"a\":tru}", "{\"a\":\"\\q\"}", "",
                          "{\"a\":1,\"a\":2}", "{\"x\":\"\x01\"}"})
    EXPECT_THAT(decodeError(rawFile(bad, 0)), HasSubstr("malformed JSON"))
        << bad;
  EXPECT_THAT(decodeError(rawFile(std::string(200, '[') + std::string(200, ']'), 0)),
              HasSubstr("nesting"));
  EXPECT_THAT(decodeError(rawFile("[]", 0)), HasSubstr("expected a JSON object"));
  // Unknown dtype, or not a string.
  EXPECT_THAT(decodeError(rawFile("{" + tensor("w", "F8", "[1]", "[0,1]") + "}", 1)),
              HasSubstr("unknown dtype \"F8\""));
  EXPECT_THAT(decodeError(rawFile(
                  "{\"w\":{\"dtype\":3,\"shape\":[1],\"data_offsets\":[0,4]}}", 4)),
              HasSubstr("unknown dtype"));
  // Missing fields, bad shapes.
  EXPECT_THAT(decodeError(rawFile("{\"w\":{\"dtype\":\"F32\"}}", 0)),
              HasSubstr("expected dtype, shape and data_offsets"));
  EXPECT_THAT(decodeError(rawFile("{" + tensor("w", "F32", "[-1]", "[0,4]") + "}", 4)),
              HasSubstr("non-negative"));
  EXPECT_THAT(decodeError(rawFile("{" + tensor("w", "F32", "[1.5]", "[0,4]") + "}", 4)),
              HasSubstr("non-negative"));
  // Offsets out of range, reversed, malformed.
  EXPECT_THAT(decodeError(rawFile("{" + tensor("w", "F32", "[2]", "[0,8]") + "}", 4)),
              HasSubstr("out of range: the data holds 4 bytes"));
  EXPECT_THAT(decodeError(rawFile("{" + tensor("w", "F32", "[0]", "[8,4]") + "}", 8)),
              HasSubstr("begin after end"));
  EXPECT_THAT(decodeError(rawFile("{" + tensor("w", "F32", "[1]", "[0]") + "}", 4)),
              HasSubstr("data_offsets"));
  EXPECT_THAT(decodeError(rawFile("{" + tensor("w", "F32", "[1]",
                                               "[0,99999999999999999999]") + "}", 4)),
              HasSubstr("data_offsets"));
  // Size not matching shape * dtype size, including overflow.
  EXPECT_THAT(decodeError(rawFile("{" + tensor("w", "F32", "[3]", "[0,8]") + "}", 8)),
              HasSubstr("expected shape * dtype size = 12"));
  EXPECT_THAT(decodeError(rawFile("{" + tensor("w", "F64",
                                               "[4611686018427387904,4]", "[0,8]") + "}", 8)),
              HasSubstr("overflow"));
  // Overlapping tensors.
  EXPECT_THAT(decodeError(rawFile("{" + tensor("a", "F32", "[2]", "[0,8]") + "," +
                                  tensor("b", "F32", "[2]", "[4,12]") + "}", 12)),
              HasSubstr("\"a\" and \"b\" overlap"));
  // Metadata must be a map of strings.
  EXPECT_THAT(decodeError(rawFile("{\"__metadata__\":{\"step\":3}}", 0)),
              HasSubstr("not a string"));
  EXPECT_THAT(decodeError(rawFile("{\"__metadata__\":[]}", 0)),
              HasSubstr("__metadata__"));
}

TEST(Safetensors, CorruptedFilesNeverCrash) {
  auto good = encodeSafetensors(sample());
  ASSERT_TRUE(good.isOk());
  const std::vector<uint8_t> &bytes = good.value();
  // Every truncation.
  int accepted = 0;
  for (size_t n = 0; n < bytes.size(); ++n) {
    std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + n);
    accepted += decodeSafetensors(cut, "cut").isOk();
  }
  EXPECT_EQ(accepted, 0);
  // Random byte flips, mostly in the header.
  std::mt19937_64 rng(1);
  for (int i = 0; i < 3000; ++i) {
    std::vector<uint8_t> bad = bytes;
    int flips = 1 + int(rng() % 4);
    for (int f = 0; f < flips; ++f)
      bad[rng() % std::min<size_t>(bad.size(), 300)] = uint8_t(rng());
    auto r = decodeSafetensors(bad, "flip");
    if (!r.isOk())
      EXPECT_THAT(r.status().message(), HasSubstr("flip: "));
  }
}

TEST(Safetensors, EncodeRejectsInconsistentTensors) {
  SafetensorsFile f;
  f.tensors.push_back(SafeTensor::fromF32("a", {3}, {1, 2}));
  EXPECT_FALSE(encodeSafetensors(f).isOk());
  SafetensorsFile dup;
  dup.tensors.push_back(SafeTensor::fromF32("a", {1}, {1}));
  dup.tensors.push_back(SafeTensor::fromF32("a", {1}, {2}));
  EXPECT_FALSE(encodeSafetensors(dup).isOk());
}

TEST(SafetensorsAtomic, FailedTempFileKeepsTheOldCheckpoint) {
  ScratchDir dir;
  std::string path = dir.file("ckpt.safetensors");
  ASSERT_TRUE(writeSafetensors(path, sample()).isOk());
  std::vector<uint8_t> before = readBytes(path);
  // Make the temporary path impossible: a directory sits there.
  ASSERT_EQ(::mkdir(safetensorsTempPath(path).c_str(), 0755), 0);
  SafetensorsFile next;
  next.tensors.push_back(SafeTensor::fromF32("other", {1}, {9}));
  Status s = writeSafetensors(path, next);
  ASSERT_FALSE(s.isOk());
  EXPECT_THAT(s.message(), HasSubstr("ckpt.safetensors"));
  EXPECT_THAT(s.message(), HasSubstr("temporary file"));
  EXPECT_EQ(readBytes(path), before);
  EXPECT_TRUE(readSafetensors(path).isOk());
}

TEST(SafetensorsAtomic, FullDiskKeepsTheOldCheckpoint) {
  if (::access("/dev/full", W_OK) != 0)
    GTEST_SKIP() << "/dev/full is not available to simulate a full disk";
  ScratchDir dir;
  std::string path = dir.file("ckpt.safetensors");
  ASSERT_TRUE(writeSafetensors(path, sample()).isOk());
  std::vector<uint8_t> before = readBytes(path);
  // Writes through the temporary path land on /dev/full: ENOSPC.
  ASSERT_EQ(::symlink("/dev/full", safetensorsTempPath(path).c_str()), 0);
  Status s = writeSafetensors(path, sample());
  ASSERT_FALSE(s.isOk());
  EXPECT_THAT(s.message(), HasSubstr("write to"));
  EXPECT_EQ(readBytes(path), before);
  // The failed temporary file is cleaned up.
  struct stat st;
  EXPECT_NE(::lstat(safetensorsTempPath(path).c_str(), &st), 0);
}

TEST(SafetensorsAtomic, UnwritableDirectoryKeepsTheOldCheckpoint) {
  if (::geteuid() == 0)
    GTEST_SKIP() << "running as root: directory permissions do not apply";
  ScratchDir dir;
  std::string path = dir.file("ckpt.safetensors");
  ASSERT_TRUE(writeSafetensors(path, sample()).isOk());
  std::vector<uint8_t> before = readBytes(path);
  ASSERT_EQ(::chmod(dir.path().c_str(), 0555), 0);
  Status s = writeSafetensors(path, SafetensorsFile());
  ::chmod(dir.path().c_str(), 0755);
  ASSERT_FALSE(s.isOk());
  EXPECT_EQ(readBytes(path), before);
}

TEST(SafetensorsAtomic, MissingDirectoryAndMissingFileAreErrors) {
  ScratchDir dir;
  Status s = writeSafetensors(dir.file("no/such/dir/c.safetensors"), sample());
  ASSERT_FALSE(s.isOk());
  EXPECT_THAT(s.message(), HasSubstr("no/such/dir/c.safetensors"));
  auto r = readSafetensors(dir.file("absent.safetensors"));
  ASSERT_FALSE(r.isOk());
  EXPECT_THAT(r.status().message(), HasSubstr("absent.safetensors"));
  EXPECT_FALSE(readSafetensors(dir.path()).isOk()); // a directory
}

// An independent reader: Python's json module and NumPy parse our file.
TEST(SafetensorsInterop, PythonJsonAndNumpyReadOurFile) {
  if (!kiln::testing::hasPythonModule("numpy"))
    GTEST_SKIP() << "python3 with numpy is not available";
  ScratchDir dir;
  std::string path = dir.file("c.safetensors");
  ASSERT_TRUE(writeSafetensors(path, sample()).isOk());
  std::string script = dir.file("check.py");
  std::string py =
      "import json, struct, sys, numpy as np\n"
      "b = open(sys.argv[1], 'rb').read()\n"
      "n = struct.unpack('<Q', b[:8])[0]\n"
      "h = json.loads(b[8:8 + n])\n"
      "d = b[8 + n:]\n"
      "w = h['fc1.weight']; s, e = w['data_offsets']\n"
      "a = np.frombuffer(d[s:e], '<f4').reshape(w['shape'])\n"
      "assert a.shape == (2, 3), a.shape\n"
      "assert a.tolist() == np.array([[1, -2, 3.5], [0, 1e-8, -7]], 'f4').tolist(), a\n"
      "t = h['step']; s, e = t['data_offsets']\n"
      "assert np.frombuffer(d[s:e], '<i8')[0] == 123456789012\n"
      "m = h['__metadata__']\n"
      "assert m['step'] == '42' and m['position'] == '17', m\n"
      "assert m['note'] == 'quote \" backslash \\\\ newline \\n tab \\t \\u00e9', m['note']\n";
  std::ofstream(script) << py;
  EXPECT_EQ(std::system(("python3 " + script + " " + path).c_str()), 0);
}

// The reference reader, when the safetensors package is installed.
TEST(SafetensorsInterop, PythonSafetensorsReadsOurFile) {
  if (!kiln::testing::hasPythonModule("safetensors.numpy"))
    GTEST_SKIP() << "python3 -c 'import safetensors' fails: the safetensors "
                    "package is not installed";
  ScratchDir dir;
  std::string path = dir.file("c.safetensors");
  ASSERT_TRUE(writeSafetensors(path, sample()).isOk());
  // numpy has no bfloat16, so the reader opens the file lazily and loads
  // the tensors numpy can hold; the bf16 one is checked by its header.
  std::string cmd =
      "python3 -c \"import sys, numpy as np; "
      "from safetensors import safe_open; "
      "f = safe_open(sys.argv[1], 'np'); "
      "assert f.get_tensor('fc1.weight').tolist() == np.array([[1, -2, 3.5], [0, 1e-8, -7]], 'f4').tolist(); "
      "assert int(f.get_tensor('step')) == 123456789012; "
      "assert f.get_tensor('empty').shape == (0, 4); "
      "assert len(list(f.keys())) >= 3; "
      "assert f.metadata()['epoch'] == '3'\" " + path;
  EXPECT_EQ(std::system(cmd.c_str()), 0);
}
