//===- Npy.cpp - NumPy .npy files and the npy:DIR dataset ------------------===//
//
// The header is a Python dict literal; we parse exactly the subset NumPy
// writes (quoted keys, a quoted descr, True/False, a tuple of integers) and
// call anything else malformed rather than guessing.
//
//===----------------------------------------------------------------------===//

#include "runtime/data/Npy.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <dirent.h>

namespace kiln::runtime {
namespace {

StatusOr<std::vector<uint8_t>> readFile(const std::string &path) {
  FILE *f = std::fopen(path.c_str(), "rb");
  if (!f)
    return Status::error(path + ": " + std::strerror(errno));
  std::vector<uint8_t> bytes;
  uint8_t buffer[1 << 16];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), f)) > 0)
    bytes.insert(bytes.end(), buffer, buffer + n);
  bool failed = std::ferror(f);
  std::fclose(f);
  if (failed)
    return Status::error(path + ": read failed");
  return bytes;
}

// Cursor over the header's dict literal.
struct HeaderParser {
  const std::string &text;
  size_t pos = 0;

  void skipSpace() {
    while (pos < text.size() && (text[pos] == ' ' || text[pos] == '\n' ||
                                 text[pos] == '\t' || text[pos] == '\r'))
      ++pos;
  }
  bool consume(char c) {
    skipSpace();
    if (pos < text.size() && text[pos] == c) {
      ++pos;
      return true;
    }
    return false;
  }
  bool peek(char c) {
    skipSpace();
    return pos < text.size() && text[pos] == c;
  }
  bool parseString(std::string &out) {
    skipSpace();
    if (pos >= text.size() || (text[pos] != '\'' && text[pos] != '"'))
      return false;
    char quote = text[pos++];
    size_t end = text.find(quote, pos);
    if (end == std::string::npos)
      return false;
    out = text.substr(pos, end - pos);
    pos = end + 1;
    return true;
  }
  bool parseWord(const char *word) {
    skipSpace();
    size_t n = std::strlen(word);
    if (text.compare(pos, n, word) != 0)
      return false;
    pos += n;
    return true;
  }
  bool parseInt(int64_t &out) {
    skipSpace();
    size_t start = pos;
    out = 0;
    while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') {
      if (out > (INT64_MAX - 9) / 10)
        return false;
      out = out * 10 + (text[pos++] - '0');
    }
    if (pos < text.size() && text[pos] == 'L') // Python 2 longs
      ++pos;
    return pos > start;
  }
};

int64_t itemSizeOf(const std::string &descr) {
  static const std::pair<const char *, int64_t> known[] = {
      {"<f4", 4}, {"<f8", 8}, {"<i4", 4}, {"<i8", 8}, {"|u1", 1}, {"<u2", 2}};
  for (auto &k : known)
    if (descr == k.first)
      return k.second;
  return 0;
}

} // namespace

int64_t NpyArray::elementCount() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

double NpyArray::asDouble(int64_t i) const {
  const uint8_t *p = data.data() + i * itemSize;
  if (descr == "<f4") {
    float v;
    std::memcpy(&v, p, 4);
    return v;
  }
  if (descr == "<f8") {
    double v;
    std::memcpy(&v, p, 8);
    return v;
  }
  if (descr == "<i4") {
    int32_t v;
    std::memcpy(&v, p, 4);
    return v;
  }
  if (descr == "<i8") {
    int64_t v;
    std::memcpy(&v, p, 8);
    return double(v);
  }
  if (descr == "|u1")
    return p[0];
  return double(uint16_t(p[0] | (p[1] << 8)));
}

StatusOr<int32_t> NpyArray::asInt32(int64_t i) const {
  if (descr == "<i8") {
    int64_t v;
    std::memcpy(&v, data.data() + i * itemSize, 8);
    if (v < INT32_MIN || v > INT32_MAX)
      return Status::error("element " + std::to_string(i) + " = " +
                           std::to_string(v) + " is outside the int32 range");
    return int32_t(v);
  }
  return int32_t(asDouble(i));
}

StatusOr<NpyArray> parseNpy(const std::vector<uint8_t> &bytes,
                            const std::string &name) {
  auto fail = [&](const std::string &what) {
    return Status::error(name + ": " + what);
  };
  static const uint8_t magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  if (bytes.size() < 10 || std::memcmp(bytes.data(), magic, 6) != 0)
    return fail("not a .npy file: expected the magic \\x93NUMPY");
  uint8_t major = bytes[6];
  size_t headerLen, headerStart;
  if (major == 1) {
    headerLen = bytes[8] | (size_t(bytes[9]) << 8);
    headerStart = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12)
      return fail("truncated: the header length needs 12 bytes, file has " +
                  std::to_string(bytes.size()));
    headerLen = bytes[8] | (size_t(bytes[9]) << 8) |
                (size_t(bytes[10]) << 16) | (size_t(bytes[11]) << 24);
    headerStart = 12;
  } else {
    return fail("format version " + std::to_string(major) +
                ": expected 1, 2 or 3");
  }
  if (headerLen > bytes.size() - headerStart)
    return fail("truncated: header of " + std::to_string(headerLen) +
                " bytes but only " +
                std::to_string(bytes.size() - headerStart) + " follow");
  std::string header(bytes.begin() + headerStart,
                     bytes.begin() + headerStart + headerLen);

  NpyArray array;
  bool haveDescr = false, haveOrder = false, haveShape = false;
  bool fortran = false;
  HeaderParser p{header};
  if (!p.consume('{'))
    return fail("malformed header: expected '{' in \"" + header + "\"");
  while (!p.consume('}')) {
    std::string key;
    if (!p.parseString(key) || !p.consume(':'))
      return fail("malformed header: expected 'key': in \"" + header + "\"");
    if (key == "descr") {
      if (!p.parseString(array.descr))
        return fail("malformed header: descr is not a string");
      haveDescr = true;
    } else if (key == "fortran_order") {
      if (p.parseWord("True"))
        fortran = true;
      else if (!p.parseWord("False"))
        return fail("malformed header: fortran_order is not True or False");
      haveOrder = true;
    } else if (key == "shape") {
      if (!p.consume('('))
        return fail("malformed header: shape is not a tuple");
      while (!p.consume(')')) {
        int64_t d;
        if (!p.parseInt(d))
          return fail("malformed header: shape holds a non-integer");
        array.shape.push_back(d);
        if (!p.consume(',') && !p.peek(')'))
          return fail("malformed header: expected ',' or ')' in shape");
      }
      haveShape = true;
    } else {
      return fail("malformed header: unknown key '" + key + "'");
    }
    if (!p.consume(',') && !p.peek('}'))
      return fail("malformed header: expected ',' or '}' in \"" + header +
                  "\"");
  }
  if (!haveDescr || !haveOrder || !haveShape)
    return fail("malformed header: expected descr, fortran_order and shape");
  if (fortran)
    return fail("fortran_order is True: expected C order (save with "
                "np.ascontiguousarray)");
  array.itemSize = itemSizeOf(array.descr);
  if (array.itemSize == 0)
    return fail("dtype '" + array.descr +
                "' is not supported: expected one of <f4 <f8 <i4 <i8 |u1 <u2");
  int64_t count = 1;
  for (int64_t d : array.shape) {
    if (d != 0 && count > (int64_t(1) << 40) / d)
      return fail("shape is too large");
    count *= d;
  }
  size_t dataStart = headerStart + headerLen;
  uint64_t expected = uint64_t(count) * uint64_t(array.itemSize);
  uint64_t found = bytes.size() - dataStart;
  if (found != expected)
    return fail(std::string(found < expected ? "truncated" : "trailing data") +
                ": expected " + std::to_string(expected) +
                " data bytes for the shape, found " + std::to_string(found));
  array.data.assign(bytes.begin() + dataStart, bytes.end());
  return array;
}

StatusOr<NpyArray> readNpy(const std::string &path) {
  auto bytes = readFile(path);
  if (!bytes.isOk())
    return bytes.status();
  return parseNpy(bytes.value(), path);
}

StatusOr<std::unique_ptr<NpyDataset>>
NpyDataset::open(const std::string &dir,
                 const std::vector<std::pair<std::string, ElementType>> &inputs) {
  std::vector<std::pair<std::string, ElementType>> wanted = inputs;
  bool natural = wanted.empty();
  if (natural) {
    DIR *d = ::opendir(dir.c_str());
    if (!d)
      return Status::error("npy: " + dir + ": " + std::strerror(errno));
    while (struct dirent *e = ::readdir(d)) {
      std::string file = e->d_name;
      if (file.size() > 4 && file.compare(file.size() - 4, 4, ".npy") == 0)
        wanted.push_back({file.substr(0, file.size() - 4), ElementType::f32});
    }
    ::closedir(d);
    std::sort(wanted.begin(), wanted.end());
    if (wanted.empty())
      return Status::error("npy: " + dir + ": no .npy files found");
  }
  auto ds = std::unique_ptr<NpyDataset>(new NpyDataset());
  for (size_t t = 0; t < wanted.size(); ++t) {
    std::string path = dir + "/" + wanted[t].first + ".npy";
    auto array = readNpy(path);
    if (!array.isOk())
      return Status::error("npy: " + array.status().message());
    const NpyArray &a = array.value();
    if (a.shape.empty())
      return Status::error("npy: " + path +
                           ": a scalar: expected a leading sample dimension");
    if (t == 0)
      ds->count_ = a.shape[0];
    else if (a.shape[0] != ds->count_)
      return Status::error("npy: " + path + ": " + std::to_string(a.shape[0]) +
                           " samples: expected " + std::to_string(ds->count_) +
                           " like " + wanted[0].first + ".npy");
    ElementType type = natural ? (a.isFloat() ? ElementType::f32
                                              : ElementType::i32)
                               : wanted[t].second;
    if (type == ElementType::i32 && a.isFloat())
      return Status::error("npy: " + path + ": dtype " + a.descr +
                           ": expected an integer dtype for the int32 input " +
                           wanted[t].first);
    TensorSpec spec{wanted[t].first, type,
                    std::vector<int64_t>(a.shape.begin() + 1, a.shape.end()),
                    0};
    int64_t n = a.elementCount();
    ds->f32_.emplace_back();
    ds->i32_.emplace_back();
    ds->f64_.emplace_back();
    if (type == ElementType::f32) {
      ds->f32_.back().resize(n);
      for (int64_t i = 0; i < n; ++i)
        ds->f32_.back()[i] = float(a.asDouble(i));
    } else if (type == ElementType::f64) {
      ds->f64_.back().resize(n);
      for (int64_t i = 0; i < n; ++i)
        ds->f64_.back()[i] = a.asDouble(i);
    } else {
      ds->i32_.back().resize(n);
      for (int64_t i = 0; i < n; ++i) {
        auto v = a.asInt32(i);
        if (!v.isOk())
          return Status::error("npy: " + path + ": " + v.status().message());
        ds->i32_.back()[i] = v.value();
      }
    }
    ds->specs_.push_back(std::move(spec));
  }
  return ds;
}

Status NpyDataset::copySample(int64_t index, size_t tensor, void *dst) const {
  if (index < 0 || index >= count_)
    return Status::error("npy: sample " + std::to_string(index) +
                         " out of range: expected an index in [0, " +
                         std::to_string(count_) + ")");
  if (tensor >= specs_.size())
    return Status::error("npy: tensor " + std::to_string(tensor) +
                         " out of range");
  int64_t n = specs_[tensor].elementCount();
  if (specs_[tensor].type == ElementType::f32)
    std::memcpy(dst, f32_[tensor].data() + index * n, n * sizeof(float));
  else if (specs_[tensor].type == ElementType::f64)
    std::memcpy(dst, f64_[tensor].data() + index * n, n * sizeof(double));
  else
    std::memcpy(dst, i32_[tensor].data() + index * n, n * sizeof(int32_t));
  return Status::ok();
}

} // namespace kiln::runtime
