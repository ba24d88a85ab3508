//===- OnnxModel.h - reading ONNX model files ---------------------*- C++ -*-===//
//
// An ONNX model (onnx.proto3: ModelProto) read from its protocol-buffer wire
// format by hand, as runtime/metrics/EventFile writes TensorBoard's: no
// protobuf library. Only what `kiln import` needs is kept: the opsets, the
// graph's nodes with their attributes, its initializers (tensor data in
// raw little-endian bytes whichever field held it), and its inputs and
// outputs with their element types and shapes (a symbolic dimension keeps
// its name). Unknown fields are skipped, as protobuf readers do. A file that
// is not a well-formed message (a length past the end, a bad wire type, a
// varint of more than 10 bytes) is an error naming the byte offset.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_SERIALIZE_ONNXMODEL_H
#define KILN_SERIALIZE_ONNXMODEL_H

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kiln::onnx {

// TensorProto.DataType.
enum class DataType : int32_t {
  Undefined = 0,
  Float = 1,
  Uint8 = 2,
  Int8 = 3,
  Uint16 = 4,
  Int16 = 5,
  Int32 = 6,
  Int64 = 7,
  String = 8,
  Bool = 9,
  Float16 = 10,
  Double = 11,
  Uint32 = 12,
  Uint64 = 13,
  BFloat16 = 16,
};

// "FLOAT", "INT64", ... or "type N".
std::string dataTypeName(int32_t type);
// Bytes per element of a numeric type; 0 for strings and unknown types.
int64_t dataTypeSize(int32_t type);

struct Tensor {
  std::string name;
  std::vector<int64_t> dims;
  int32_t dataType = 0;
  // The elements, little-endian, dataTypeSize() bytes each.
  std::vector<uint8_t> data;
  // Stored in a file beside the model (data_location = EXTERNAL), where
  // external_data says: "location" (a path relative to the model's
  // directory), "offset" and "length" in bytes.
  bool external = false;
  std::vector<std::pair<std::string, std::string>> externalData;

  int64_t elementCount() const;
  // The elements as doubles (any numeric type).
  std::vector<double> toDoubles() const;
  // The elements as integers (integer and bool types).
  std::vector<int64_t> toIntegers() const;
};

// AttributeProto.AttributeType.
enum class AttributeType : int32_t {
  Undefined = 0,
  Float = 1,
  Int = 2,
  String = 3,
  Tensor = 4,
  Graph = 5,
  Floats = 6,
  Ints = 7,
  Strings = 8,
};

struct Graph;

struct Attribute {
  std::string name;
  int32_t type = 0;
  float f = 0;
  int64_t i = 0;
  std::string s;
  std::optional<Tensor> t;
  // A subgraph (If's branches, Loop's and Scan's bodies).
  std::shared_ptr<Graph> g;
  std::vector<float> floats;
  std::vector<int64_t> ints;
  std::vector<std::string> strings;
};

struct Node {
  std::string name;
  std::string opType;
  std::string domain;
  std::vector<std::string> inputs;
  std::vector<std::string> outputs;
  std::vector<Attribute> attributes;

  const Attribute *attribute(const std::string &name) const;
};

struct Dimension {
  std::optional<int64_t> value; // dim_value
  std::string param;            // dim_param, for a symbolic dimension
};

struct ValueInfo {
  std::string name;
  int32_t elemType = 0;
  bool hasShape = false;
  std::vector<Dimension> dims;
  // metadata_props: the torch.export exporter records there what each
  // initializer was ("pkg.torch.export.graph_signature.InputSpec.kind":
  // PARAMETER, BUFFER, CONSTANT_TENSOR).
  std::vector<std::pair<std::string, std::string>> metadata;
};

struct Graph {
  std::string name;
  std::vector<Node> nodes;
  std::vector<Tensor> initializers;
  std::vector<ValueInfo> inputs;
  std::vector<ValueInfo> outputs;
  // value_info: intermediate values' (and, from the torch.export exporter,
  // initializers') types and metadata.
  std::vector<ValueInfo> valueInfos;
  // metadata_props of the graph.
  std::vector<std::pair<std::string, std::string>> metadata;
};

struct Model {
  int64_t irVersion = 0;
  std::string producerName;
  std::string producerVersion;
  // (domain, version); "" is the default ONNX domain.
  std::vector<std::pair<std::string, int64_t>> opsets;
  Graph graph;

  // The version of the default domain's opset; 0 when not imported.
  int64_t defaultOpset() const;
};

// Reads the data of |model|'s initializers stored in external files, from
// |directory| (the model file's). A location that is absolute or leaves the
// directory ("..") is refused, as the ONNX checker refuses it. On failure
// sets |error| naming the initializer and the file.
bool loadExternalData(Model &model, const std::string &directory,
                      std::string &error);

// Parses |bytes| as a ModelProto. On failure returns std::nullopt and sets
// |error| to what is wrong and where (a byte offset).
std::optional<Model> parseModel(const std::string &bytes, std::string &error);

} // namespace kiln::onnx

#endif // KILN_SERIALIZE_ONNXMODEL_H
