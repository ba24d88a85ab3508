//===- Json.h - the JSON subset safetensors headers use -----------*- C++ -*-===//
//
// A small JSON value, writer and parser, enough for a safetensors header
// (objects, arrays, strings, integers; true/false/null and fractions are
// parsed too so a foreign header does not confuse us). The runtime carries
// no JSON library. The parser rejects duplicate keys, limits nesting depth
// and reports the byte offset of the first problem; it never throws.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_CHECKPOINT_JSON_H
#define KILN_RUNTIME_CHECKPOINT_JSON_H

#include "runtime/Status.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace kiln::runtime::json {

struct Value {
  enum class Kind { null, boolean, integer, number, string, array, object };
  Kind kind = Kind::null;
  bool boolean = false;
  int64_t integer = 0; // also set for numbers that are whole and in range
  double number = 0;
  std::string string;
  std::vector<Value> array;
  std::vector<std::pair<std::string, Value>> object; // in file order

  const Value *find(const std::string &key) const;
};

StatusOr<Value> parse(const std::string &text);

// Appends |s| as a quoted JSON string.
void writeString(std::string &out, const std::string &s);

} // namespace kiln::runtime::json

#endif // KILN_RUNTIME_CHECKPOINT_JSON_H
