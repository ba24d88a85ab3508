//===- Json.cpp - the JSON subset safetensors headers use ------------------===//

#include "runtime/checkpoint/Json.h"

#include <cmath>
#include <cstdlib>
#include <set>

namespace kiln::runtime::json {

const Value *Value::find(const std::string &key) const {
  for (const auto &kv : object)
    if (kv.first == key)
      return &kv.second;
  return nullptr;
}

void writeString(std::string &out, const std::string &s) {
  static const char hex[] = "0123456789abcdef";
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
    case '"': out += "\\\""; break;
    case '\\': out += "\\\\"; break;
    case '\n': out += "\\n"; break;
    case '\r': out += "\\r"; break;
    case '\t': out += "\\t"; break;
    case '\b': out += "\\b"; break;
    case '\f': out += "\\f"; break;
    default:
      if (c < 0x20) {
        out += "\\u00";
        out += hex[c >> 4];
        out += hex[c & 15];
      } else {
        out += char(c);
      }
    }
  }
  out += '"';
}

namespace {

constexpr int kMaxDepth = 64;

class Parser {
public:
  explicit Parser(const std::string &text) : text_(text) {}

  StatusOr<Value> parseDocument() {
    Value v;
    if (!parseValue(v, 0))
      return Status::error(error_);
    skipSpace();
    if (pos_ != text_.size())
      return Status::error(at("unexpected text after the JSON value"));
    return v;
  }

private:
  std::string at(const std::string &what) {
    return "malformed JSON at byte " + std::to_string(pos_) + ": " + what;
  }
  bool fail(const std::string &what) {
    if (error_.empty())
      error_ = at(what);
    return false;
  }
  void skipSpace() {
    while (pos_ < text_.size() &&
           (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' ||
            text_[pos_] == '\r'))
      ++pos_;
  }
  bool literal(const char *word) {
    size_t n = std::char_traits<char>::length(word);
    if (text_.compare(pos_, n, word) != 0)
      return false;
    pos_ += n;
    return true;
  }

  bool parseValue(Value &v, int depth) {
    if (depth > kMaxDepth)
      return fail("nesting deeper than " + std::to_string(kMaxDepth));
    skipSpace();
    if (pos_ >= text_.size())
      return fail("expected a value, found the end");
    char c = text_[pos_];
    if (c == '{')
      return parseObject(v, depth);
    if (c == '[')
      return parseArray(v, depth);
    if (c == '"') {
      v.kind = Value::Kind::string;
      return parseString(v.string);
    }
    if (literal("true")) {
      v.kind = Value::Kind::boolean;
      v.boolean = true;
      return true;
    }
    if (literal("false")) {
      v.kind = Value::Kind::boolean;
      return true;
    }
    if (literal("null"))
      return true;
    if (c == '-' || (c >= '0' && c <= '9'))
      return parseNumber(v);
    return fail(std::string("expected a value, found '") + c + "'");
  }

  bool parseNumber(Value &v) {
    size_t start = pos_;
    if (text_[pos_] == '-')
      ++pos_;
    bool integral = true;
    size_t digits = 0;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9')
      ++pos_, ++digits;
    if (digits == 0)
      return fail("expected digits");
    if (pos_ < text_.size() && text_[pos_] == '.') {
      integral = false;
      ++pos_;
      while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9')
        ++pos_;
    }
    if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      integral = false;
      ++pos_;
      if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-'))
        ++pos_;
      while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9')
        ++pos_;
    }
    std::string token = text_.substr(start, pos_ - start);
    v.number = std::strtod(token.c_str(), nullptr);
    if (integral) {
      // Exact integer parse with overflow detection.
      bool negative = token[0] == '-';
      uint64_t magnitude = 0;
      for (size_t i = negative ? 1 : 0; i < token.size(); ++i) {
        uint64_t d = uint64_t(token[i] - '0');
        if (magnitude > (uint64_t(INT64_MAX) - d) / 10) {
          v.kind = Value::Kind::number; // too large for int64
          return true;
        }
        magnitude = magnitude * 10 + d;
      }
      v.kind = Value::Kind::integer;
      v.integer = negative ? -int64_t(magnitude) : int64_t(magnitude);
      return true;
    }
    v.kind = Value::Kind::number;
    return true;
  }

  static void appendUtf8(std::string &out, uint32_t cp) {
    if (cp < 0x80) {
      out += char(cp);
    } else if (cp < 0x800) {
      out += char(0xC0 | (cp >> 6));
      out += char(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += char(0xE0 | (cp >> 12));
      out += char(0x80 | ((cp >> 6) & 0x3F));
      out += char(0x80 | (cp & 0x3F));
    } else {
      out += char(0xF0 | (cp >> 18));
      out += char(0x80 | ((cp >> 12) & 0x3F));
      out += char(0x80 | ((cp >> 6) & 0x3F));
      out += char(0x80 | (cp & 0x3F));
    }
  }

  bool parseHex4(uint32_t &out) {
    if (pos_ + 4 > text_.size())
      return fail("truncated \\u escape");
    out = 0;
    for (int i = 0; i < 4; ++i) {
      char h = text_[pos_++];
      out <<= 4;
      if (h >= '0' && h <= '9') out |= uint32_t(h - '0');
      else if (h >= 'a' && h <= 'f') out |= uint32_t(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F') out |= uint32_t(h - 'A' + 10);
      else return fail("bad hex digit in \\u escape");
    }
    return true;
  }

  bool parseString(std::string &out) {
    ++pos_; // opening quote
    while (true) {
      if (pos_ >= text_.size())
        return fail("unterminated string");
      unsigned char c = text_[pos_++];
      if (c == '"')
        return true;
      if (c < 0x20)
        return fail("control character in a string");
      if (c != '\\') {
        out += char(c);
        continue;
      }
      if (pos_ >= text_.size())
        return fail("unterminated escape");
      char e = text_[pos_++];
      switch (e) {
      case '"': out += '"'; break;
      case '\\': out += '\\'; break;
      case '/': out += '/'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'u': {
        uint32_t cp;
        if (!parseHex4(cp))
          return false;
        if (cp >= 0xD800 && cp < 0xDC00) {
          uint32_t low;
          if (!literal("\\u") || !parseHex4(low) || low < 0xDC00 ||
              low >= 0xE000)
            return fail("unpaired surrogate in \\u escape");
          cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
        }
        appendUtf8(out, cp);
        break;
      }
      default:
        return fail(std::string("unknown escape '\\") + e + "'");
      }
    }
  }

  bool parseArray(Value &v, int depth) {
    v.kind = Value::Kind::array;
    ++pos_;
    skipSpace();
    if (pos_ < text_.size() && text_[pos_] == ']') {
      ++pos_;
      return true;
    }
    while (true) {
      v.array.emplace_back();
      if (!parseValue(v.array.back(), depth + 1))
        return false;
      skipSpace();
      if (pos_ < text_.size() && text_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < text_.size() && text_[pos_] == ']') {
        ++pos_;
        return true;
      }
      return fail("expected ',' or ']' in an array");
    }
  }

  bool parseObject(Value &v, int depth) {
    v.kind = Value::Kind::object;
    ++pos_;
    skipSpace();
    if (pos_ < text_.size() && text_[pos_] == '}') {
      ++pos_;
      return true;
    }
    std::set<std::string> seen;
    while (true) {
      skipSpace();
      if (pos_ >= text_.size() || text_[pos_] != '"')
        return fail("expected a string key in an object");
      std::string key;
      if (!parseString(key))
        return false;
      if (!seen.insert(key).second)
        return fail("duplicate key \"" + key + "\"");
      skipSpace();
      if (pos_ >= text_.size() || text_[pos_] != ':')
        return fail("expected ':' after a key");
      ++pos_;
      Value member;
      if (!parseValue(member, depth + 1))
        return false;
      v.object.emplace_back(std::move(key), std::move(member));
      skipSpace();
      if (pos_ < text_.size() && text_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < text_.size() && text_[pos_] == '}') {
        ++pos_;
        return true;
      }
      return fail("expected ',' or '}' in an object");
    }
  }

  const std::string &text_;
  size_t pos_ = 0;
  std::string error_;
};

} // namespace

StatusOr<Value> parse(const std::string &text) {
  return Parser(text).parseDocument();
}

} // namespace kiln::runtime::json
