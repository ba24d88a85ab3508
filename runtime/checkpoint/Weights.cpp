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
  if (tensor.dtype == DType::F64) {
    StatusOr<std::vector<double>> wide = tensor.toF64();
    if (!wide.isOk())
      return wide.status();
    return TensorValues(std::move(wide.value()));
  }
  int64_t size = dtypeSize(tensor.dtype);
  std::vector<float> out(tensor.data.size() / size);
  const uint8_t *p = tensor.data.data();
  for (size_t i = 0; i < out.size(); ++i, p += size) {
    uint64_t bits = readLittleEndian(p, static_cast<int>(size));
    switch (tensor.dtype) {
    case DType::F32:
      out[i] = bitsFloat(static_cast<uint32_t>(bits));
      break;
    case DType::F16:
      out[i] = f16ToFloat(static_cast<uint16_t>(bits));
      break;
    default:
      out[i] = bf16ToFloat(static_cast<uint16_t>(bits));
      break;
    }
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
