//===- EventFileTest.cpp - TensorBoard event files ------------------------===//
//
// The encoding of runtime/metrics/EventFile.h byte by byte: CRC-32C against
// its published check values and a bit-at-a-time reference, TFRecord's
// framing, the Event messages against hand-encoded protocol buffers, and
// the writer's files. (tests/lit/train/tensorboard.test reads kiln train's
// files with TensorBoard itself.)
//
//===----------------------------------------------------------------------===//

#include "runtime/metrics/EventFile.h"

#include "TestFiles.h"

#include "gtest/gtest.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace kiln::runtime {
namespace {

// CRC-32C one bit at a time (RFC 3720's definition), apart from the
// table the writer uses.
uint32_t crcByBits(const std::string &bytes) {
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char byte : bytes) {
    crc ^= byte;
    for (int bit = 0; bit < 8; ++bit)
      crc = (crc & 1) ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;
  }
  return ~crc;
}

uint32_t read32(const std::string &s, size_t at) {
  uint32_t v;
  std::memcpy(&v, s.data() + at, 4);
  return v;
}

std::string bytes(std::initializer_list<int> values) {
  std::string s;
  for (int v : values)
    s.push_back(static_cast<char>(v));
  return s;
}

std::string readFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(EventFileTest, Crc32cMatchesItsCheckValues) {
  // The check value of "123456789" and RFC 3720's test vectors.
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  std::string zeros(32, '\0'), ones(32, '\xff');
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones.data(), ones.size()), 0x62A8AB43u);
  std::string text = "brain.Event:2 and every byte value";
  for (int b = 0; b < 256; ++b)
    text.push_back(static_cast<char>(b));
  EXPECT_EQ(crc32c(text.data(), text.size()), crcByBits(text));
  uint32_t crc = crcByBits(text);
  EXPECT_EQ(maskedCrc32c(text.data(), text.size()),
            ((crc >> 15) | (crc << 17)) + 0xa282ead8u);
}

TEST(EventFileTest, TfRecordFramesItsPayload) {
  std::string payload = "an event";
  std::string record = tfRecord(payload);
  ASSERT_EQ(record.size(), 8 + 4 + payload.size() + 4);
  uint64_t length;
  std::memcpy(&length, record.data(), 8);
  EXPECT_EQ(length, payload.size());
  uint32_t lengthCrc = crcByBits(record.substr(0, 8));
  EXPECT_EQ(read32(record, 8), ((lengthCrc >> 15) | (lengthCrc << 17)) + 0xa282ead8u);
  EXPECT_EQ(record.substr(12, payload.size()), payload);
  uint32_t dataCrc = crcByBits(payload);
  EXPECT_EQ(read32(record, 12 + payload.size()),
            ((dataCrc >> 15) | (dataCrc << 17)) + 0xa282ead8u);
}

TEST(EventFileTest, EventsAreTheProtocolBuffersTensorBoardReads) {
  std::string zeroTime = bytes({0x09, 0, 0, 0, 0, 0, 0, 0, 0});
  // wall_time 0, step 3, summary { value { tag "a" simple_value 1.0 } }
  EXPECT_EQ(encodeScalarEvent(0.0, 3, "a", 1.0f),
            zeroTime + bytes({0x10, 0x03, 0x2a, 0x0a, 0x0a, 0x08, 0x0a, 0x01,
                              'a', 0x15, 0x00, 0x00, 0x80, 0x3f}));
  // Step 300 is a two-byte varint; step 0 is left out.
  EXPECT_EQ(encodeScalarEvent(0.0, 300, "a", 1.0f).substr(9, 3),
            bytes({0x10, 0xac, 0x02}));
  EXPECT_EQ(encodeScalarEvent(0.0, 0, "a", 1.0f).substr(9, 1), bytes({0x2a}));
  // wall_time 1.5, file_version "brain.Event:2"
  EXPECT_EQ(encodeFileVersionEvent(1.5),
            bytes({0x09, 0, 0, 0, 0, 0, 0, 0xf8, 0x3f, 0x1a, 13}) + "brain.Event:2");
  // session_log { status: START } at step 21
  EXPECT_EQ(encodeSessionStartEvent(0.0, 21),
            zeroTime + bytes({0x10, 21, 0x3a, 0x02, 0x08, 0x01}));
}

TEST(EventFileTest, WriterAppendsRecordsToANewFile) {
  testing::ScratchDir dir;
  std::string sub = dir.file("runs/a");
  StatusOr<std::unique_ptr<EventFileWriter>> first = EventFileWriter::create(sub);
  ASSERT_TRUE(first.isOk()) << first.status().message();
  std::string path = first.value()->path();
  EXPECT_EQ(std::filesystem::path(path).parent_path(), std::filesystem::path(sub));
  EXPECT_EQ(std::filesystem::path(path).filename().string().rfind("events.out.tfevents.", 0), 0u);
  // The file-version record is on disk at once.
  std::string before = readFile(path);
  ASSERT_EQ(before.size(), 8 + 4 + 24 + 4);
  EXPECT_EQ(before.substr(12 + 9, 15), bytes({0x1a, 13}) + "brain.Event:2");
  first.value()->addScalar("train/loss", 0.25, 7);
  EXPECT_EQ(readFile(path), before); // queued until flush
  ASSERT_TRUE(first.value()->flush().isOk());
  std::string after = readFile(path);
  ASSERT_GT(after.size(), before.size());
  std::string record = after.substr(before.size());
  uint64_t length;
  std::memcpy(&length, record.data(), 8);
  ASSERT_EQ(record.size(), 8 + 4 + length + 4);
  std::string event = record.substr(12, length);
  std::string expected = encodeScalarEvent(0.0, 7, "train/loss", 0.25f);
  EXPECT_EQ(event.substr(9), expected.substr(9)); // all but the wall time
  EXPECT_EQ(read32(record, 12 + length), maskedCrc32c(event.data(), event.size()));

  // A second writer in the directory, within the same second: its file
  // sorts after the first (TensorBoard reads files in name order).
  StatusOr<std::unique_ptr<EventFileWriter>> second = EventFileWriter::create(sub);
  ASSERT_TRUE(second.isOk()) << second.status().message();
  EXPECT_LT(std::filesystem::path(path).filename().string(),
            std::filesystem::path(second.value()->path()).filename().string());
  EXPECT_NE(path, second.value()->path());

  // Another process's file named for a later second (a clock set back
  // since): the new file still sorts after it.
  std::string later = sub + "/events.out.tfevents.1999999999.other.99999.0";
  std::ofstream(later) << "";
  StatusOr<std::unique_ptr<EventFileWriter>> third = EventFileWriter::create(sub);
  ASSERT_TRUE(third.isOk()) << third.status().message();
  EXPECT_EQ(std::filesystem::path(third.value()->path()).filename().string().rfind(
                "events.out.tfevents.2000000000.", 0),
            0u)
      << third.value()->path();
}

TEST(EventFileTest, ADirectoryThatCannotBeMadeIsAnError) {
  testing::ScratchDir dir;
  std::ofstream(dir.file("plain")) << "x";
  StatusOr<std::unique_ptr<EventFileWriter>> w =
      EventFileWriter::create(dir.file("plain/tb"));
  ASSERT_FALSE(w.isOk());
  EXPECT_NE(w.status().message().find("cannot create the directory"), std::string::npos)
      << w.status().message();
  EXPECT_NE(w.status().message().find("plain/tb"), std::string::npos);
  StatusOr<std::unique_ptr<EventFileWriter>> onFile =
      EventFileWriter::create(dir.file("plain"));
  ASSERT_FALSE(onFile.isOk());
  EXPECT_NE(onFile.status().message().find("plain"), std::string::npos)
      << onFile.status().message();
}

} // namespace
} // namespace kiln::runtime
