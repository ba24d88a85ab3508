//===- Weights.cpp - parameter values to start training from --------------===//

#include "runtime/checkpoint/Weights.h"

#include "runtime/Half.h"
#include "runtime/checkpoint/Sharded.h"

namespace kiln::runtime {
namespace {

uint64_t readLittleEndian(const uint8_t *p, int bytes) {
  uint64_t v = 0;
  for (int b = 0; b < bytes; ++b)
    v |= uint64_t(p[b]) << (8 * b);
  return v;
}

bool isFloat(DType dtype) {
  return dtype == DType::F32 || dtype == DType::F64 || dtype == DType::F16 ||
         dtype == DType::BF16;
}

} // namespace

StatusOr<TensorValues> floatValues(const SafeTensor &tensor) {
  if (!isFloat(tensor.dtype))
    return Status::error("tensor " + tensor.name + " has dtype " +
                         dtypeName(tensor.dtype) +
                         ": expected F32, F64, F16 or BF16");
  // The dtype is checked: the decoders cannot fail.
  if (tensor.dtype == DType::F64)
    return TensorValues(tensor.toF64().value());
  if (tensor.dtype == DType::F32)
    return TensorValues(tensor.toF32().value());
  // F16 and BF16, widened to f32.
  std::vector<float> out(tensor.data.size() / 2);
  const uint8_t *p = tensor.data.data();
  for (size_t i = 0; i < out.size(); ++i, p += 2) {
    uint16_t bits = static_cast<uint16_t>(readLittleEndian(p, 2));
    out[i] = tensor.dtype == DType::F16 ? f16ToFloat(bits) : bf16ToFloat(bits);
  }
  return TensorValues(std::move(out));
}

StatusOr<WeightsFile> loadWeights(const std::string &path) {
  WeightsFile weights;
  if (isShardIndexName(path)) {
    StatusOr<TrainingState> state = loadShardedCheckpoint(path);
    if (!state.isOk())
      return state.status();
    weights.tensors = std::move(state.value().parameters);
    weights.kind = "ZeRO checkpoint of step " + std::to_string(state.value().step);
    return weights;
  }
  StatusOr<SafetensorsFile> file = readSafetensors(path);
  if (!file.isOk())
    return file.status();
  auto format = file.value().metadata.find("format");
  if (format != file.value().metadata.end() &&
      format->second == kCheckpointFormat) {
    // A kiln checkpoint, verified as --resume verifies it: its parameters.
    StatusOr<TrainingState> state = loadCheckpoint(path);
    if (!state.isOk())
      return state.status();
    weights.tensors = std::move(state.value().parameters);
    weights.kind = "kiln checkpoint of step " + std::to_string(state.value().step);
    return weights;
  }
  weights.kind = "safetensors file";
  for (const SafeTensor &t : file.value().tensors) {
    if (!isFloat(t.dtype)) {
      weights.otherDtypes[t.name] = dtypeName(t.dtype);
      continue;
    }
    StatusOr<TensorValues> values = floatValues(t);
    if (!values.isOk())
      return Status::error(path + ": " + values.status().message());
    weights.tensors.push_back({t.name, t.shape, std::move(values.value())});
  }
  return weights;
}

} // namespace kiln::runtime
