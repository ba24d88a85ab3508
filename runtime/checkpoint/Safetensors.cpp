//===- Safetensors.cpp - safetensors files, written atomically -------------===//

#include "runtime/checkpoint/Safetensors.h"

#include "runtime/checkpoint/Json.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <set>
#include <sys/stat.h>
#include <unistd.h>

namespace kiln::runtime {
namespace {

// The Python library refuses headers above 100 MB; so do we, before
// allocating anything for one.
constexpr uint64_t kMaxHeaderSize = 100'000'000;

struct DTypeInfo {
  DType dtype;
  const char *name;
  int64_t size;
};
constexpr DTypeInfo kDTypes[] = {
    {DType::F64, "F64", 8}, {DType::F32, "F32", 4}, {DType::F16, "F16", 2},
    {DType::BF16, "BF16", 2}, {DType::I64, "I64", 8}, {DType::I32, "I32", 4},
    {DType::I8, "I8", 1},   {DType::BOOL, "BOOL", 1}};

// shape product * itemSize, or -1 on a negative dimension or overflow.
int64_t byteSize(const std::vector<int64_t> &shape, int64_t itemSize) {
  uint64_t n = uint64_t(itemSize);
  for (int64_t d : shape) {
    if (d < 0)
      return -1;
    if (d != 0 && n > uint64_t(INT64_MAX) / uint64_t(d))
      return -1;
    n *= uint64_t(d);
  }
  return int64_t(n);
}

std::string errnoText() { return std::strerror(errno); }

std::string directoryOf(const std::string &path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos)
    return ".";
  if (slash == 0)
    return "/";
  return path.substr(0, slash);
}

Status writeAll(int fd, const uint8_t *data, size_t size) {
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return Status::error(errnoText());
    }
    data += n;
    size -= size_t(n);
  }
  return Status::ok();
}

} // namespace

const char *dtypeName(DType dtype) {
  for (const auto &d : kDTypes)
    if (d.dtype == dtype)
      return d.name;
  return "?";
}

int64_t dtypeSize(DType dtype) {
  for (const auto &d : kDTypes)
    if (d.dtype == dtype)
      return d.size;
  return 0;
}

bool parseDType(const std::string &name, DType &out) {
  for (const auto &d : kDTypes)
    if (name == d.name) {
      out = d.dtype;
      return true;
    }
  return false;
}

namespace {

// |values| as little-endian elements of |dtype|, sizeof(T) bytes each.
template <typename T>
SafeTensor encode(std::string name, DType dtype, std::vector<int64_t> shape,
                  const std::vector<T> &values) {
  SafeTensor t;
  t.name = std::move(name);
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.data.resize(values.size() * sizeof(T));
  for (size_t i = 0; i < values.size(); ++i) {
    uint64_t bits = 0;
    std::memcpy(&bits, &values[i], sizeof(T));
    for (size_t b = 0; b < sizeof(T); ++b)
      t.data[sizeof(T) * i + b] = uint8_t(bits >> (8 * b));
  }
  return t;
}

// The elements of |t|, which must be of |dtype|.
template <typename T>
StatusOr<std::vector<T>> decode(const SafeTensor &t, DType dtype) {
  if (t.dtype != dtype)
    return Status::error("tensor " + t.name + " has dtype " +
                         dtypeName(t.dtype) + ": expected " + dtypeName(dtype));
  std::vector<T> out(t.data.size() / sizeof(T));
  for (size_t i = 0; i < out.size(); ++i) {
    uint64_t bits = 0;
    for (size_t b = 0; b < sizeof(T); ++b)
      bits |= uint64_t(t.data[sizeof(T) * i + b]) << (8 * b);
    std::memcpy(&out[i], &bits, sizeof(T));
  }
  return out;
}

} // namespace

SafeTensor SafeTensor::fromF32(std::string name, std::vector<int64_t> shape,
                               const std::vector<float> &values) {
  return encode(std::move(name), DType::F32, std::move(shape), values);
}

SafeTensor SafeTensor::fromF64(std::string name, std::vector<int64_t> shape,
                               const std::vector<double> &values) {
  return encode(std::move(name), DType::F64, std::move(shape), values);
}

SafeTensor SafeTensor::fromI64(std::string name, std::vector<int64_t> shape,
                               const std::vector<int64_t> &values) {
  return encode(std::move(name), DType::I64, std::move(shape), values);
}

int64_t SafeTensor::elementCount() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

StatusOr<std::vector<float>> SafeTensor::toF32() const {
  return decode<float>(*this, DType::F32);
}

StatusOr<std::vector<double>> SafeTensor::toF64() const {
  return decode<double>(*this, DType::F64);
}

StatusOr<std::vector<int64_t>> SafeTensor::toI64() const {
  return decode<int64_t>(*this, DType::I64);
}

const SafeTensor *SafetensorsFile::find(const std::string &name) const {
  for (const SafeTensor &t : tensors)
    if (t.name == name)
      return &t;
  return nullptr;
}

StatusOr<std::vector<uint8_t>>
encodeSafetensors(const SafetensorsFile &file) {
  std::string header = "{";
  bool first = true;
  if (!file.metadata.empty()) {
    header += "\"__metadata__\":{";
    for (auto it = file.metadata.begin(); it != file.metadata.end(); ++it) {
      if (it != file.metadata.begin())
        header += ',';
      json::writeString(header, it->first);
      header += ':';
      json::writeString(header, it->second);
    }
    header += '}';
    first = false;
  }
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const SafeTensor &t : file.tensors) {
    if (t.name == "__metadata__")
      return Status::error("tensor name __metadata__ is reserved");
    if (!names.insert(t.name).second)
      return Status::error("duplicate tensor name " + t.name);
    int64_t expected = byteSize(t.shape, dtypeSize(t.dtype));
    if (expected < 0 || uint64_t(expected) != t.data.size())
      return Status::error("tensor " + t.name + " holds " +
                           std::to_string(t.data.size()) +
                           " bytes: expected shape * dtype size = " +
                           std::to_string(expected));
    if (!first)
      header += ',';
    first = false;
    json::writeString(header, t.name);
    header += ":{\"dtype\":\"";
    header += dtypeName(t.dtype);
    header += "\",\"shape\":[";
    for (size_t i = 0; i < t.shape.size(); ++i) {
      if (i)
        header += ',';
      header += std::to_string(t.shape[i]);
    }
    header += "],\"data_offsets\":[" + std::to_string(offset) + "," +
              std::to_string(offset + t.data.size()) + "]}";
    offset += t.data.size();
  }
  header += '}';
  while (header.size() % 8 != 0)
    header += ' ';
  std::vector<uint8_t> out;
  out.reserve(8 + header.size() + offset);
  for (int b = 0; b < 8; ++b)
    out.push_back(uint8_t(uint64_t(header.size()) >> (8 * b)));
  out.insert(out.end(), header.begin(), header.end());
  for (const SafeTensor &t : file.tensors)
    out.insert(out.end(), t.data.begin(), t.data.end());
  return out;
}

StatusOr<SafetensorsFile> decodeSafetensors(const std::vector<uint8_t> &bytes,
                                            const std::string &name) {
  auto fail = [&](const std::string &what) {
    return Status::error(name + ": " + what);
  };
  if (bytes.size() < 8)
    return fail("truncated: " + std::to_string(bytes.size()) +
                " bytes, expected at least the 8-byte header length");
  uint64_t headerLen = 0;
  for (int b = 0; b < 8; ++b)
    headerLen |= uint64_t(bytes[b]) << (8 * b);
  if (headerLen > kMaxHeaderSize)
    return fail("header length " + std::to_string(headerLen) +
                " exceeds the limit of " + std::to_string(kMaxHeaderSize) +
                " bytes");
  if (headerLen > bytes.size() - 8)
    return fail("header length " + std::to_string(headerLen) +
                " exceeds the " + std::to_string(bytes.size() - 8) +
                " bytes after it");
  std::string header(bytes.begin() + 8, bytes.begin() + 8 + headerLen);
  StatusOr<json::Value> parsed = json::parse(header);
  if (!parsed.isOk())
    return fail("header: " + parsed.status().message());
  const json::Value &root = parsed.value();
  if (root.kind != json::Value::Kind::object)
    return fail("header: expected a JSON object");

  uint64_t dataSize = bytes.size() - 8 - headerLen;
  const uint8_t *data = bytes.data() + 8 + headerLen;
  SafetensorsFile file;
  struct Range {
    uint64_t begin, end;
    std::string name;
  };
  std::vector<Range> ranges;
  std::vector<std::pair<uint64_t, SafeTensor>> found;
  for (const auto &[key, v] : root.object) {
    if (key == "__metadata__") {
      if (v.kind != json::Value::Kind::object)
        return fail("__metadata__: expected an object of strings");
      for (const auto &[mk, mv] : v.object) {
        if (mv.kind != json::Value::Kind::string)
          return fail("__metadata__: value of \"" + mk +
                      "\" is not a string");
        file.metadata[mk] = mv.string;
      }
      continue;
    }
    std::string where = "tensor \"" + key + "\": ";
    if (v.kind != json::Value::Kind::object)
      return fail(where + "expected an object with dtype, shape and "
                          "data_offsets");
    const json::Value *dtype = v.find("dtype");
    const json::Value *shape = v.find("shape");
    const json::Value *offsets = v.find("data_offsets");
    if (!dtype || !shape || !offsets)
      return fail(where + "expected dtype, shape and data_offsets");
    SafeTensor t;
    t.name = key;
    if (dtype->kind != json::Value::Kind::string ||
        !parseDType(dtype->string, t.dtype))
      return fail(where + "unknown dtype " +
                  (dtype->kind == json::Value::Kind::string
                       ? "\"" + dtype->string + "\""
                       : std::string("(not a string)")) +
                  ": expected one of F64 F32 F16 BF16 I64 I32 I8 BOOL");
    if (shape->kind != json::Value::Kind::array)
      return fail(where + "shape is not an array");
    for (const json::Value &d : shape->array) {
      if (d.kind != json::Value::Kind::integer || d.integer < 0)
        return fail(where + "shape holds a value that is not a "
                            "non-negative integer");
      t.shape.push_back(d.integer);
    }
    if (offsets->kind != json::Value::Kind::array ||
        offsets->array.size() != 2 ||
        offsets->array[0].kind != json::Value::Kind::integer ||
        offsets->array[1].kind != json::Value::Kind::integer ||
        offsets->array[0].integer < 0 || offsets->array[1].integer < 0)
      return fail(where + "data_offsets: expected [begin, end] with "
                          "non-negative integers");
    uint64_t begin = uint64_t(offsets->array[0].integer);
    uint64_t end = uint64_t(offsets->array[1].integer);
    if (begin > end)
      return fail(where + "data_offsets [" + std::to_string(begin) + ", " +
                  std::to_string(end) + "] begin after end");
    if (end > dataSize)
      return fail(where + "data_offsets [" + std::to_string(begin) + ", " +
                  std::to_string(end) + "] out of range: the data holds " +
                  std::to_string(dataSize) + " bytes");
    int64_t expected = byteSize(t.shape, dtypeSize(t.dtype));
    if (expected < 0 || uint64_t(expected) != end - begin)
      return fail(where + "data_offsets span " + std::to_string(end - begin) +
                  " bytes: expected shape * dtype size = " +
                  (expected < 0 ? std::string("(overflow)")
                                : std::to_string(expected)));
    t.data.assign(data + begin, data + end);
    ranges.push_back({begin, end, key});
    found.emplace_back(begin, std::move(t));
  }
  std::sort(ranges.begin(), ranges.end(),
            [](const Range &a, const Range &b) {
              return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
            });
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].begin < ranges[i - 1].end)
      return fail("tensors \"" + ranges[i - 1].name + "\" and \"" +
                  ranges[i].name + "\" overlap: [" +
                  std::to_string(ranges[i - 1].begin) + ", " +
                  std::to_string(ranges[i - 1].end) + ") and [" +
                  std::to_string(ranges[i].begin) + ", " +
                  std::to_string(ranges[i].end) + ")");
  std::stable_sort(found.begin(), found.end(),
                   [](const auto &a, const auto &b) { return a.first < b.first; });
  for (auto &f : found)
    file.tensors.push_back(std::move(f.second));
  return file;
}

std::string safetensorsTempPath(const std::string &path) {
  return path + ".tmp." + std::to_string(::getpid());
}

Status writeSafetensors(const std::string &path, const SafetensorsFile &file) {
  auto encoded = encodeSafetensors(file);
  if (!encoded.isOk())
    return Status::error(path + ": " + encoded.status().message());
  const std::vector<uint8_t> &bytes = encoded.value();
  std::string temp = safetensorsTempPath(path);
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return Status::error(path + ": cannot create the temporary file " + temp +
                         ": " + errnoText());
  auto abandon = [&](const std::string &what) {
    std::string message = path + ": " + what + " " + temp + ": " + errnoText();
    ::close(fd);
    ::unlink(temp.c_str());
    return Status::error(message);
  };
  Status w = writeAll(fd, bytes.data(), bytes.size());
  if (!w.isOk()) {
    std::string message = path + ": write to " + temp + " failed: " +
                          w.message();
    ::close(fd);
    ::unlink(temp.c_str());
    return Status::error(message);
  }
  if (::fsync(fd) != 0)
    return abandon("fsync failed for");
  if (::close(fd) != 0) {
    std::string message = path + ": close failed for " + temp + ": " +
                          errnoText();
    ::unlink(temp.c_str());
    return Status::error(message);
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    std::string message = path + ": rename from " + temp + " failed: " +
                          errnoText();
    ::unlink(temp.c_str());
    return Status::error(message);
  }
  // Make the rename itself durable.
  int dir = ::open(directoryOf(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
  return Status::ok();
}

StatusOr<SafetensorsFile> readSafetensors(const std::string &path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return Status::error(path + ": " + errnoText());
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::error(path + ": not a regular file");
  }
  std::vector<uint8_t> bytes(size_t(st.st_size));
  size_t got = 0;
  while (got < bytes.size()) {
    ssize_t n = ::read(fd, bytes.data() + got, bytes.size() - got);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      std::string message = path + ": read failed" +
                            (n < 0 ? ": " + errnoText() : std::string());
      ::close(fd);
      return Status::error(message);
    }
    got += size_t(n);
  }
  ::close(fd);
  return decodeSafetensors(bytes, path);
}

} // namespace kiln::runtime
