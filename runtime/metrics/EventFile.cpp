//===- EventFile.cpp - TensorBoard event files ----------------------------===//
//
// The wire format of the few protocol-buffer fields written (field number
// and wire type as the tag byte):
//
//   Event      1 wall_time double (0x09), 2 step int64 varint (0x10),
//              3 file_version string (0x1a), 5 summary (0x2a),
//              7 session_log (0x3a)
//   Summary    1 value, repeated (0x0a)
//   Value      1 tag string (0x0a), 2 simple_value float (0x15)
//   SessionLog 1 status enum varint (0x08): START = 1
//
//===----------------------------------------------------------------------===//

#include "runtime/metrics/EventFile.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <unistd.h>

namespace kiln::runtime {
namespace {

// The reflected table of CRC-32C's polynomial 0x1EDC6F41 (0x82F63B78
// reflected).
std::array<uint32_t, 256> makeCrcTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t crc = i;
    for (int bit = 0; bit < 8; ++bit)
      crc = (crc >> 1) ^ ((crc & 1) ? 0x82F63B78u : 0u);
    table[i] = crc;
  }
  return table;
}

void putVarint(std::string &out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}

template <typename T> void putLittleEndian(std::string &out, T value) {
  unsigned char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  // x86-64 and AArch64 Linux are little-endian (as the package format
  // assumes); the bytes go out in memory order.
  out.append(reinterpret_cast<const char *>(bytes), sizeof(T));
}

void putBytesField(std::string &out, uint8_t tag, const std::string &bytes) {
  out.push_back(static_cast<char>(tag));
  putVarint(out, bytes.size());
  out += bytes;
}

// An Event with |wallTime| and |step| (step 0 is the default value and is
// left out, as protobuf does), followed by |rest| (its other fields).
std::string event(double wallTime, int64_t step, const std::string &rest) {
  std::string out;
  out.push_back(0x09);
  putLittleEndian(out, wallTime);
  if (step != 0) {
    out.push_back(0x10);
    putVarint(out, static_cast<uint64_t>(step));
  }
  return out + rest;
}

double now() {
  return std::chrono::duration<double>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string hostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == 0)
    return "localhost";
  return name;
}

} // namespace

uint32_t crc32c(const void *data, size_t size) {
  static const std::array<uint32_t, 256> table = makeCrcTable();
  const auto *bytes = static_cast<const unsigned char *>(data);
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = 0; i < size; ++i)
    crc = table[(crc ^ bytes[i]) & 0xff] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

uint32_t maskedCrc32c(const void *data, size_t size) {
  uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string encodeFileVersionEvent(double wallTime) {
  std::string rest;
  putBytesField(rest, 0x1a, "brain.Event:2");
  return event(wallTime, 0, rest);
}

std::string encodeScalarEvent(double wallTime, int64_t step,
                              const std::string &tag, float value) {
  std::string v;
  putBytesField(v, 0x0a, tag);
  v.push_back(0x15);
  putLittleEndian(v, value);
  std::string summary;
  putBytesField(summary, 0x0a, v);
  std::string rest;
  putBytesField(rest, 0x2a, summary);
  return event(wallTime, step, rest);
}

std::string encodeSessionStartEvent(double wallTime, int64_t step) {
  std::string log;
  log.push_back(0x08);
  putVarint(log, 1); // SessionLog.START
  std::string rest;
  putBytesField(rest, 0x3a, log);
  return event(wallTime, step, rest);
}

std::string tfRecord(const std::string &payload) {
  std::string out, length;
  putLittleEndian(length, static_cast<uint64_t>(payload.size()));
  out += length;
  putLittleEndian(out, maskedCrc32c(length.data(), length.size()));
  out += payload;
  putLittleEndian(out, maskedCrc32c(payload.data(), payload.size()));
  return out;
}

StatusOr<std::unique_ptr<EventFileWriter>>
EventFileWriter::create(const std::string &dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    return Status::error("cannot create the directory " + dir + ": " + ec.message());
  if (!std::filesystem::is_directory(dir, ec))
    return Status::error(dir + " is not a directory");
  // PyTorch's name: the time, the host, the process and a count of the
  // writers this process opened (two runs of one second do not collide).
  // TensorBoard reads a directory's files in the order of their names, so
  // the new file's time is made later than any other file's in |dir| (a
  // run resumed within the second its predecessor started).
  static int serial = 0;
  double wallTime = now();
  int64_t seconds = static_cast<int64_t>(wallTime);
  const std::string prefix = "events.out.tfevents.";
  for (const auto &entry : std::filesystem::directory_iterator(dir, ec)) {
    std::string name = entry.path().filename().string();
    if (name.compare(0, prefix.size(), prefix) != 0)
      continue;
    size_t end = name.find('.', prefix.size());
    std::string digits = name.substr(prefix.size(), end - prefix.size());
    if (!digits.empty() && digits.size() <= 18 &&
        digits.find_first_not_of("0123456789") == std::string::npos)
      seconds = std::max<int64_t>(seconds, std::stoll(digits) + 1);
  }
  std::string path = dir + "/" + prefix + std::to_string(seconds) + "." +
                     hostName() + "." + std::to_string(getpid()) + "." +
                     std::to_string(serial++);
  std::FILE *file = std::fopen(path.c_str(), "wbx");
  if (!file)
    return Status::error("cannot create " + path + ": " + std::strerror(errno));
  std::unique_ptr<EventFileWriter> writer(new EventFileWriter(path, file));
  writer->pending_ = tfRecord(encodeFileVersionEvent(wallTime));
  if (Status s = writer->flush(); !s.isOk())
    return s;
  return writer;
}

EventFileWriter::~EventFileWriter() {
  (void)flush();
  std::fclose(file_);
}

void EventFileWriter::addScalar(const std::string &tag, double value, int64_t step) {
  pending_ += tfRecord(encodeScalarEvent(now(), step, tag, static_cast<float>(value)));
}

void EventFileWriter::addSessionStart(int64_t step) {
  pending_ += tfRecord(encodeSessionStartEvent(now(), step));
}

Status EventFileWriter::flush() {
  if (pending_.empty())
    return Status::ok();
  errno = 0;
  size_t written = std::fwrite(pending_.data(), 1, pending_.size(), file_);
  bool ok = written == pending_.size() && std::fflush(file_) == 0;
  if (!ok) {
    std::string reason = errno ? std::strerror(errno) : "short write";
    // kiln train stops on this error; the records are dropped (TensorBoard
    // reads the file up to a record the failed write cut short).
    pending_.clear();
    return Status::error("cannot write " + path_ + ": " + reason);
  }
  pending_.clear();
  return Status::ok();
}

} // namespace kiln::runtime
