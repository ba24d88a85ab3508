//===- OnnxModel.cpp - reading ONNX model files ----------------------------===//
//
// The protocol-buffer wire format: each field is a varint key (field number
// << 3 | wire type) and a value: a varint (0), 8 bytes (1), a length and
// that many bytes (2: strings, messages and packed repeated scalars) or 4
// bytes (5). Field numbers are onnx.proto's.
//
//===----------------------------------------------------------------------===//

#include "serialize/OnnxModel.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace kiln::onnx {
namespace {

enum Wire { kVarint = 0, kFixed64 = 1, kBytes = 2, kFixed32 = 5 };

class Reader {
public:
  Reader(const uint8_t *begin, const uint8_t *end, size_t base, std::string *error)
      : begin_(begin), p_(begin), end_(end), base_(base), error_(error) {}

  bool atEnd() const { return p_ == end_; }
  size_t offset() const { return base_ + static_cast<size_t>(p_ - begin_); }

  bool fail(const std::string &what) {
    if (error_->empty())
      *error_ = what + " at byte " + std::to_string(offset());
    return false;
  }

  bool varint(uint64_t &v) {
    v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
      if (p_ == end_)
        return fail("a varint runs past the end of its message");
      uint8_t byte = *p_++;
      v |= uint64_t(byte & 0x7f) << shift;
      if (!(byte & 0x80))
        return true;
    }
    return fail("a varint longer than 10 bytes");
  }

  bool key(uint32_t &field, int &wire) {
    uint64_t k;
    if (!varint(k))
      return false;
    field = static_cast<uint32_t>(k >> 3);
    wire = static_cast<int>(k & 7);
    if (field == 0)
      return fail("field number 0");
    return true;
  }

  bool fixed(int bytes, uint64_t &v) {
    if (end_ - p_ < bytes)
      return fail("a " + std::to_string(bytes) + "-byte value runs past the end");
    v = 0;
    for (int b = 0; b < bytes; ++b)
      v |= uint64_t(p_[b]) << (8 * b);
    p_ += bytes;
    return true;
  }

  // A length-delimited value as a reader of its own.
  bool sub(Reader &out) {
    uint64_t n;
    if (!varint(n))
      return false;
    if (n > static_cast<uint64_t>(end_ - p_))
      return fail("a length of " + std::to_string(n) + " bytes runs past the end (" +
                  std::to_string(end_ - p_) + " left)");
    out = Reader(p_, p_ + n, offset(), error_);
    p_ += n;
    return true;
  }

  bool string(std::string &s) {
    Reader r(nullptr, nullptr, 0, error_);
    if (!sub(r))
      return false;
    s.assign(reinterpret_cast<const char *>(r.p_), r.end_ - r.p_);
    return true;
  }

  bool skip(int wire) {
    uint64_t v;
    Reader r(nullptr, nullptr, 0, error_);
    switch (wire) {
    case kVarint:
      return varint(v);
    case kFixed64:
      return fixed(8, v);
    case kBytes:
      return sub(r);
    case kFixed32:
      return fixed(4, v);
    default:
      return fail("wire type " + std::to_string(wire) + " (groups are not read)");
    }
  }

  // A repeated integer field: one varint, or a packed run of them.
  bool ints(int wire, std::vector<int64_t> &out) {
    uint64_t v;
    if (wire == kVarint) {
      if (!varint(v))
        return false;
      out.push_back(static_cast<int64_t>(v));
      return true;
    }
    if (wire != kBytes)
      return fail("an integer field of wire type " + std::to_string(wire));
    Reader r(nullptr, nullptr, 0, error_);
    if (!sub(r))
      return false;
    while (!r.atEnd()) {
      if (!r.varint(v))
        return false;
      out.push_back(static_cast<int64_t>(v));
    }
    return true;
  }

  // A repeated fixed-width field (4 or 8 bytes): one value, or packed.
  bool fixedRun(int wire, int bytes, std::vector<uint64_t> &out) {
    uint64_t v;
    if (wire == (bytes == 4 ? kFixed32 : kFixed64)) {
      if (!fixed(bytes, v))
        return false;
      out.push_back(v);
      return true;
    }
    if (wire != kBytes)
      return fail("a " + std::to_string(bytes * 8) + "-bit field of wire type " +
                  std::to_string(wire));
    Reader r(nullptr, nullptr, 0, error_);
    if (!sub(r))
      return false;
    while (!r.atEnd()) {
      if (!r.fixed(bytes, v))
        return false;
      out.push_back(v);
    }
    return true;
  }

  bool scalar(int wire, uint64_t &v) {
    if (wire != kVarint)
      return fail("an integer field of wire type " + std::to_string(wire));
    return varint(v);
  }

private:
  const uint8_t *begin_, *p_, *end_;
  size_t base_;
  std::string *error_;
};

float floatFromBits(uint64_t bits) {
  uint32_t b = static_cast<uint32_t>(bits);
  float f;
  std::memcpy(&f, &b, sizeof(f));
  return f;
}

void appendLittleEndian(std::vector<uint8_t> &out, uint64_t v, int64_t bytes) {
  for (int64_t b = 0; b < bytes; ++b)
    out.push_back(static_cast<uint8_t>(v >> (8 * b)));
}

// Calls |each|(field, wire) for every field of the message |r|, which
// reads the field's value from |r| (or skips it) and says whether that
// worked.
template <typename Each>
bool forEachField(Reader &r, Each each) {
  while (!r.atEnd()) {
    uint32_t field;
    int wire;
    if (!r.key(field, wire) || !each(field, wire))
      return false;
  }
  return true;
}

// Reads the message at |r|'s next length-delimited value with |parse|.
template <typename Parse>
bool message(Reader &r, int wire, Parse parse) {
  if (wire != kBytes)
    return r.fail("a message field of wire type " + std::to_string(wire));
  Reader sub(nullptr, nullptr, 0, nullptr);
  return r.sub(sub) && parse(sub);
}

bool parseTensor(Reader r, Tensor &t);

bool parseStringEntry(Reader r, std::pair<std::string, std::string> &kv) {
  return forEachField(r, [&](uint32_t field, int wire) {
    return field == 1 ? r.string(kv.first)
         : field == 2 ? r.string(kv.second)
                      : r.skip(wire);
  });
}

bool parseTensor(Reader r, Tensor &t) {
  std::vector<int64_t> int32Data, int64Data;
  std::vector<uint64_t> floatData, doubleData;
  std::string raw;
  bool haveRaw = false;
  uint64_t v;
  bool ok = forEachField(r, [&](uint32_t field, int wire) {
    switch (field) {
    case 1:
      return r.ints(wire, t.dims);
    case 2:
      if (!r.scalar(wire, v))
        return false;
      t.dataType = static_cast<int32_t>(v);
      return true;
    case 4:
      return r.fixedRun(wire, 4, floatData);
    case 5:
      return r.ints(wire, int32Data);
    case 6:
      return r.fail("tensor '" + t.name + "' holds strings");
    case 7:
    case 11: // uint64_data: the same varints
      return r.ints(wire, int64Data);
    case 8:
      return r.string(t.name);
    case 9:
      haveRaw = true;
      return r.string(raw);
    case 10:
      return r.fixedRun(wire, 8, doubleData);
    case 13:
      t.externalData.emplace_back();
      return message(r, wire, [&](Reader entry) {
        return parseStringEntry(entry, t.externalData.back());
      });
    case 14:
      if (!r.scalar(wire, v))
        return false;
      t.external = v == 1;
      return true;
    default:
      return r.skip(wire);
    }
  });
  if (!ok)
    return false;
  if (t.external)
    return true;
  int64_t size = dataTypeSize(t.dataType);
  if (size == 0)
    return r.fail("tensor '" + t.name + "' has element type " +
                  dataTypeName(t.dataType));
  if (haveRaw) {
    t.data.assign(raw.begin(), raw.end());
  } else {
    switch (static_cast<DataType>(t.dataType)) {
    case DataType::Float:
      for (uint64_t bits : floatData)
        appendLittleEndian(t.data, bits, 4);
      break;
    case DataType::Double:
      for (uint64_t bits : doubleData)
        appendLittleEndian(t.data, bits, 8);
      break;
    case DataType::Int64:
    case DataType::Uint64:
    case DataType::Uint32:
      for (int64_t x : int64Data)
        appendLittleEndian(t.data, static_cast<uint64_t>(x), size);
      break;
    default:
      // int32_data holds the narrower integer types, bool, and float16 and
      // bfloat16 as their 16-bit patterns.
      for (int64_t x : int32Data)
        appendLittleEndian(t.data, static_cast<uint64_t>(x), size);
    }
  }
  // Each dimension non-negative and the byte count within int64 (a
  // wrapped product would match a few bytes of data).
  int64_t expected = size;
  for (int64_t d : t.dims)
    if (d < 0 || __builtin_mul_overflow(expected, d, &expected))
      return r.fail("tensor '" + t.name + "' has the dimension " +
                    std::to_string(d) + (d < 0 ? "" : ", past int64 in bytes") +
                    ": expected sizes of 0 or more");
  if (static_cast<int64_t>(t.data.size()) != expected)
    return r.fail("tensor '" + t.name + "' holds " + std::to_string(t.data.size()) +
                  " bytes of data; its shape and " + dataTypeName(t.dataType) +
                  " need " + std::to_string(expected));
  return true;
}

bool parseGraph(Reader r, Graph &g, int depth);

// How deeply subgraphs (If's branches, Loop's and Scan's bodies) may nest.
constexpr int kMaxGraphDepth = 16;

bool parseAttribute(Reader r, Attribute &a, int depth) {
  uint64_t v;
  return forEachField(r, [&](uint32_t field, int wire) {
    switch (field) {
    case 1:
      return r.string(a.name);
    case 2:
      if (wire != kFixed32)
        return r.fail("attribute field f of wire type " + std::to_string(wire));
      if (!r.fixed(4, v))
        return false;
      a.f = floatFromBits(v);
      return true;
    case 3:
      if (!r.scalar(wire, v))
        return false;
      a.i = static_cast<int64_t>(v);
      return true;
    case 4:
      return r.string(a.s);
    case 5:
      a.t.emplace();
      return message(r, wire, [&](Reader sub) { return parseTensor(sub, *a.t); });
    case 6:
      if (depth >= kMaxGraphDepth)
        return r.fail("subgraphs nest more than " +
                      std::to_string(kMaxGraphDepth) + " deep");
      a.g = std::make_shared<Graph>();
      return message(r, wire, [&](Reader sub) {
        return parseGraph(sub, *a.g, depth + 1);
      });
    case 7: {
      std::vector<uint64_t> bits;
      if (!r.fixedRun(wire, 4, bits))
        return false;
      for (uint64_t b : bits)
        a.floats.push_back(floatFromBits(b));
      return true;
    }
    case 8:
      return r.ints(wire, a.ints);
    case 9:
      a.strings.emplace_back();
      return r.string(a.strings.back());
    case 20:
      if (!r.scalar(wire, v))
        return false;
      a.type = static_cast<int32_t>(v);
      return true;
    default:
      return r.skip(wire);
    }
  });
}

bool parseNode(Reader r, Node &n, int depth) {
  return forEachField(r, [&](uint32_t field, int wire) {
    switch (field) {
    case 1:
      n.inputs.emplace_back();
      return r.string(n.inputs.back());
    case 2:
      n.outputs.emplace_back();
      return r.string(n.outputs.back());
    case 3:
      return r.string(n.name);
    case 4:
      return r.string(n.opType);
    case 5:
      n.attributes.emplace_back();
      return message(r, wire, [&](Reader sub) {
        return parseAttribute(sub, n.attributes.back(), depth);
      });
    case 7:
      return r.string(n.domain);
    default:
      return r.skip(wire);
    }
  });
}

// TensorShapeProto.Dimension: dim_value (1) or dim_param (2).
bool parseDimension(Reader r, Dimension &d) {
  uint64_t v;
  return forEachField(r, [&](uint32_t field, int wire) {
    if (field == 1) {
      if (!r.scalar(wire, v))
        return false;
      d.value = static_cast<int64_t>(v);
      return true;
    }
    return field == 2 ? r.string(d.param) : r.skip(wire);
  });
}

// TypeProto.Tensor: elem_type (1) and shape (2), a TensorShapeProto of
// dims (1).
bool parseTensorType(Reader r, ValueInfo &info) {
  uint64_t v;
  return forEachField(r, [&](uint32_t field, int wire) {
    if (field == 1) {
      if (!r.scalar(wire, v))
        return false;
      info.elemType = static_cast<int32_t>(v);
      return true;
    }
    if (field != 2)
      return r.skip(wire);
    info.hasShape = true;
    return message(r, wire, [&](Reader shape) {
      return forEachField(shape, [&](uint32_t f, int w) {
        if (f != 1)
          return shape.skip(w);
        info.dims.emplace_back();
        return message(shape, w,
                       [&](Reader dim) { return parseDimension(dim, info.dims.back()); });
      });
    });
  });
}

// ValueInfoProto: name (1), type (2), a TypeProto whose tensor_type is
// field 1, and metadata_props (4).
bool parseValueInfo(Reader r, ValueInfo &info) {
  return forEachField(r, [&](uint32_t field, int wire) {
    if (field == 1)
      return r.string(info.name);
    if (field == 4) {
      info.metadata.emplace_back();
      return message(
          r, wire, [&](Reader entry) { return parseStringEntry(entry, info.metadata.back()); });
    }
    if (field != 2)
      return r.skip(wire);
    return message(r, wire, [&](Reader type) {
      return forEachField(type, [&](uint32_t f, int w) {
        return f == 1 ? message(type, w,
                                [&](Reader tensor) { return parseTensorType(tensor, info); })
                      : type.skip(w);
      });
    });
  });
}

bool parseGraph(Reader r, Graph &g, int depth) {
  return forEachField(r, [&](uint32_t field, int wire) {
    switch (field) {
    case 1:
      g.nodes.emplace_back();
      return message(r, wire, [&](Reader sub) {
        return parseNode(sub, g.nodes.back(), depth);
      });
    case 2:
      return r.string(g.name);
    case 5:
      g.initializers.emplace_back();
      return message(r, wire,
                     [&](Reader sub) { return parseTensor(sub, g.initializers.back()); });
    case 11:
      g.inputs.emplace_back();
      return message(r, wire,
                     [&](Reader sub) { return parseValueInfo(sub, g.inputs.back()); });
    case 12:
      g.outputs.emplace_back();
      return message(r, wire,
                     [&](Reader sub) { return parseValueInfo(sub, g.outputs.back()); });
    case 13:
      g.valueInfos.emplace_back();
      return message(r, wire,
                     [&](Reader sub) { return parseValueInfo(sub, g.valueInfos.back()); });
    case 15:
      return r.fail("the graph has sparse initializers");
    case 16:
      g.metadata.emplace_back();
      return message(r, wire,
                     [&](Reader entry) { return parseStringEntry(entry, g.metadata.back()); });
    default:
      return r.skip(wire);
    }
  });
}

// OperatorSetIdProto: domain (1), version (2).
bool parseOpset(Reader r, std::pair<std::string, int64_t> &opset) {
  uint64_t v;
  return forEachField(r, [&](uint32_t field, int wire) {
    if (field == 1)
      return r.string(opset.first);
    if (field != 2)
      return r.skip(wire);
    if (!r.scalar(wire, v))
      return false;
    opset.second = static_cast<int64_t>(v);
    return true;
  });
}

} // namespace

std::string dataTypeName(int32_t type) {
  switch (static_cast<DataType>(type)) {
  case DataType::Float: return "FLOAT";
  case DataType::Uint8: return "UINT8";
  case DataType::Int8: return "INT8";
  case DataType::Uint16: return "UINT16";
  case DataType::Int16: return "INT16";
  case DataType::Int32: return "INT32";
  case DataType::Int64: return "INT64";
  case DataType::String: return "STRING";
  case DataType::Bool: return "BOOL";
  case DataType::Float16: return "FLOAT16";
  case DataType::Double: return "DOUBLE";
  case DataType::Uint32: return "UINT32";
  case DataType::Uint64: return "UINT64";
  case DataType::BFloat16: return "BFLOAT16";
  default: return "type " + std::to_string(type);
  }
}

int64_t dataTypeSize(int32_t type) {
  switch (static_cast<DataType>(type)) {
  case DataType::Uint8:
  case DataType::Int8:
  case DataType::Bool:
    return 1;
  case DataType::Uint16:
  case DataType::Int16:
  case DataType::Float16:
  case DataType::BFloat16:
    return 2;
  case DataType::Float:
  case DataType::Int32:
  case DataType::Uint32:
    return 4;
  case DataType::Int64:
  case DataType::Double:
  case DataType::Uint64:
    return 8;
  default:
    return 0;
  }
}

int64_t Tensor::elementCount() const {
  int64_t n = 1;
  for (int64_t d : dims)
    n *= d;
  return n;
}

std::vector<double> Tensor::toDoubles() const {
  int64_t size = dataTypeSize(dataType), n = elementCount();
  std::vector<double> out(n);
  for (int64_t i = 0; i < n; ++i) {
    uint64_t bits = 0;
    for (int64_t b = 0; b < size; ++b)
      bits |= uint64_t(data[i * size + b]) << (8 * b);
    switch (static_cast<DataType>(dataType)) {
    case DataType::Float:
      out[i] = floatFromBits(bits);
      break;
    case DataType::Double: {
      double d;
      std::memcpy(&d, &bits, sizeof(d));
      out[i] = d;
      break;
    }
    case DataType::BFloat16:
      out[i] = floatFromBits(bits << 16);
      break;
    case DataType::Float16: {
      // IEEE half: sign, 5 exponent bits, 10 fraction bits.
      uint32_t sign = (bits >> 15) & 1, exp = (bits >> 10) & 0x1f,
               frac = bits & 0x3ff;
      double v = exp == 0    ? std::ldexp(double(frac), -24)
                 : exp == 31 ? (frac ? NAN : INFINITY)
                             : std::ldexp(double(frac | 0x400), int(exp) - 25);
      out[i] = sign ? -v : v;
      break;
    }
    case DataType::Int8:
      out[i] = static_cast<int8_t>(bits);
      break;
    case DataType::Int16:
      out[i] = static_cast<int16_t>(bits);
      break;
    case DataType::Int32:
      out[i] = static_cast<int32_t>(bits);
      break;
    case DataType::Int64:
      out[i] = static_cast<double>(static_cast<int64_t>(bits));
      break;
    default:
      out[i] = static_cast<double>(bits);
    }
  }
  return out;
}

std::vector<int64_t> Tensor::toIntegers() const {
  std::vector<double> d = toDoubles();
  std::vector<int64_t> out(d.size());
  int64_t size = dataTypeSize(dataType);
  for (size_t i = 0; i < d.size(); ++i) {
    if (dataType == int32_t(DataType::Int64) || dataType == int32_t(DataType::Uint64)) {
      uint64_t bits = 0;
      for (int64_t b = 0; b < size; ++b)
        bits |= uint64_t(data[i * size + b]) << (8 * b);
      out[i] = static_cast<int64_t>(bits);
    } else {
      out[i] = static_cast<int64_t>(d[i]);
    }
  }
  return out;
}

const Attribute *Node::attribute(const std::string &name) const {
  for (const Attribute &a : attributes)
    if (a.name == name)
      return &a;
  return nullptr;
}

int64_t Model::defaultOpset() const {
  for (const auto &[domain, version] : opsets)
    if (domain.empty() || domain == "ai.onnx")
      return version;
  return 0;
}

bool loadExternalData(Model &model, const std::string &directory,
                      std::string &error) {
  for (Tensor &t : model.graph.initializers) {
    if (!t.external)
      continue;
    std::string location;
    int64_t offset = 0, length = -1;
    for (const auto &[key, value] : t.externalData) {
      if (key == "location") {
        location = value;
        continue;
      }
      if (key != "offset" && key != "length")
        continue;
      char *end = nullptr;
      long long v = std::strtoll(value.c_str(), &end, 10);
      if (value.empty() || *end != '\0' || v < 0) {
        error = "initializer '" + t.name + "': external_data " + key + " is '" +
                value + "'";
        return false;
      }
      (key == "offset" ? offset : length) = v;
    }
    if (location.empty() || location[0] == '/' ||
        location.find("..") != std::string::npos) {
      error = "initializer '" + t.name + "': external_data location '" +
              location + "' is not a file name inside the model's directory";
      return false;
    }
    int64_t expected = t.elementCount() * dataTypeSize(t.dataType);
    if (length >= 0 && length != expected) {
      error = "initializer '" + t.name + "': external_data length " +
              std::to_string(length) + ", but its shape and " +
              dataTypeName(t.dataType) + " need " + std::to_string(expected);
      return false;
    }
    std::string path = directory.empty() ? location : directory + "/" + location;
    std::FILE *file = std::fopen(path.c_str(), "rb");
    if (!file) {
      error = "initializer '" + t.name + "': cannot open its data file " + path +
              ": " + std::strerror(errno);
      return false;
    }
    t.data.resize(expected);
    bool read = std::fseek(file, static_cast<long>(offset), SEEK_SET) == 0 &&
                std::fread(t.data.data(), 1, t.data.size(), file) == t.data.size();
    std::fclose(file);
    if (!read) {
      error = "initializer '" + t.name + "': " + path + " holds no " +
              std::to_string(expected) + " bytes at offset " + std::to_string(offset);
      return false;
    }
    t.external = false;
  }
  return true;
}

std::optional<Model> parseModel(const std::string &bytes, std::string &error) {
  error.clear();
  const uint8_t *data = reinterpret_cast<const uint8_t *>(bytes.data());
  Reader r(data, data + bytes.size(), 0, &error);
  Model m;
  bool haveGraph = false;
  uint64_t v;
  bool ok = forEachField(r, [&](uint32_t field, int wire) {
    switch (field) {
    case 1:
      if (!r.scalar(wire, v))
        return false;
      m.irVersion = static_cast<int64_t>(v);
      return true;
    case 2:
      return r.string(m.producerName);
    case 3:
      return r.string(m.producerVersion);
    case 7:
      haveGraph = true;
      return message(r, wire,
                     [&](Reader sub) { return parseGraph(sub, m.graph, 0); });
    case 8:
      m.opsets.emplace_back();
      return message(r, wire, [&](Reader sub) { return parseOpset(sub, m.opsets.back()); });
    default:
      return r.skip(wire);
    }
  });
  if (!ok)
    return std::nullopt;
  if (!haveGraph) {
    error = "no graph (ModelProto field 7): not an ONNX model";
    return std::nullopt;
  }
  return m;
}

} // namespace kiln::onnx
