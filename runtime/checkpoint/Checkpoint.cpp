//===- Checkpoint.cpp - training state in a safetensors file ---------------===//

#include "runtime/checkpoint/Checkpoint.h"

#include "runtime/checkpoint/Safetensors.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace kiln::runtime {
namespace {

constexpr const char *kOptimizerPrefix = "optimizer/";
constexpr const char *kRngName = "rng/state";

bool startsWith(const std::string &s, const char *prefix) {
  return s.rfind(prefix, 0) == 0;
}

StatusOr<SafeTensor> toSafeTensor(const std::string &name,
                                  const NamedTensor &t) {
  int64_t n = 1;
  for (int64_t d : t.shape)
    n *= d;
  if (n != t.values.size())
    return Status::error("tensor " + name + " has " +
                         std::to_string(t.values.size()) +
                         " values: expected " + std::to_string(n) +
                         " for its shape");
  return t.values.wide() ? SafeTensor::fromF64(name, t.shape, t.values.f64())
                         : SafeTensor::fromF32(name, t.shape, t.values.f32());
}

// Parses a whole decimal string; false on junk or overflow.
bool parseInteger(const std::string &s, bool isUnsigned, int64_t &out,
                  uint64_t &uout) {
  if (s.empty() || (isUnsigned && s[0] == '-'))
    return false;
  errno = 0;
  char *end = nullptr;
  if (isUnsigned)
    uout = std::strtoull(s.c_str(), &end, 10);
  else
    out = std::strtoll(s.c_str(), &end, 10);
  return errno == 0 && end && *end == '\0';
}

} // namespace

TensorValues TensorValues::zeros(bool wide, int64_t n) {
  if (wide)
    return TensorValues(std::vector<double>(n, 0.0));
  return TensorValues(std::vector<float>(n, 0.0f));
}

std::vector<double> TensorValues::toDoubles() const {
  if (wide_)
    return f64_;
  return std::vector<double>(f32_.begin(), f32_.end());
}

TensorValues TensorValues::slice(int64_t begin, int64_t count) const {
  if (wide_)
    return TensorValues(std::vector<double>(f64_.begin() + begin,
                                            f64_.begin() + begin + count));
  return TensorValues(
      std::vector<float>(f32_.begin() + begin, f32_.begin() + begin + count));
}

void TensorValues::copyFrom(const TensorValues &source, int64_t from,
                            int64_t count, int64_t at) {
  if (wide_ == source.wide_) {
    std::memcpy(static_cast<char *>(data()) + at * elementBytes(),
                static_cast<const char *>(source.data()) +
                    from * elementBytes(),
                count * elementBytes());
    return;
  }
  for (int64_t i = 0; i < count; ++i)
    set(at + i, source[from + i]);
}

Status saveCheckpoint(const std::string &path, const TrainingState &state) {
  SafetensorsFile file;
  for (const NamedTensor &p : state.parameters) {
    if (startsWith(p.name, kOptimizerPrefix) || p.name == kRngName ||
        p.name == "__metadata__")
      return Status::error(path + ": parameter name " + p.name +
                           " is reserved for the checkpoint's own entries");
    auto t = toSafeTensor(p.name, p);
    if (!t.isOk())
      return Status::error(path + ": " + t.status().message());
    file.tensors.push_back(std::move(t.value()));
  }
  for (const auto &[slot, tensors] : state.optimizer) {
    if (slot.empty() || slot.find('/') != std::string::npos)
      return Status::error(path + ": optimizer slot \"" + slot +
                           "\": expected a non-empty name without '/'");
    for (const NamedTensor &s : tensors) {
      auto t = toSafeTensor(kOptimizerPrefix + slot + "/" + s.name, s);
      if (!t.isOk())
        return Status::error(path + ": " + t.status().message());
      file.tensors.push_back(std::move(t.value()));
    }
  }
  std::vector<int64_t> rng(state.rngState.begin(), state.rngState.end());
  file.tensors.push_back(
      SafeTensor::fromI64(kRngName, {int64_t(rng.size())}, rng));
  file.metadata["format"] = kCheckpointFormat;
  file.metadata["step"] = std::to_string(state.step);
  file.metadata["seed"] = std::to_string(state.seed);
  file.metadata["epoch"] = std::to_string(state.epoch);
  file.metadata["position"] = std::to_string(state.position);
  return writeSafetensors(path, file);
}

StatusOr<TrainingState> loadCheckpoint(const std::string &path) {
  auto file = readSafetensors(path);
  if (!file.isOk())
    return file.status();
  auto fail = [&](const std::string &what) {
    return Status::error(path + ": " + what);
  };
  const auto &meta = file->metadata;
  auto format = meta.find("format");
  if (format == meta.end() || format->second != kCheckpointFormat)
    return fail(std::string("__metadata__ format is ") +
                (format == meta.end() ? "missing"
                                      : "\"" + format->second + "\"") +
                ": expected \"" + kCheckpointFormat + "\"");
  TrainingState state;
  struct Field {
    const char *key;
    int64_t *value;
    uint64_t *uvalue;
  } fields[] = {{"step", &state.step, nullptr},
                {"seed", nullptr, &state.seed},
                {"epoch", &state.epoch, nullptr},
                {"position", &state.position, nullptr}};
  for (Field &f : fields) {
    auto it = meta.find(f.key);
    if (it == meta.end())
      return fail(std::string("__metadata__ lacks \"") + f.key + "\"");
    int64_t v = 0;
    uint64_t u = 0;
    if (!parseInteger(it->second, f.uvalue != nullptr, v, u) ||
        (f.value && v < 0))
      return fail(std::string("__metadata__ \"") + f.key + "\" is \"" +
                  it->second + "\": expected a non-negative integer");
    if (f.value)
      *f.value = v;
    else
      *f.uvalue = u;
  }
  bool haveRng = false;
  for (const SafeTensor &t : file->tensors) {
    if (t.name == kRngName) {
      auto values = t.toI64();
      if (!values.isOk() || t.shape.size() != 1)
        return fail(std::string(kRngName) + ": expected a rank-1 I64 tensor");
      state.rngState.assign(values->begin(), values->end());
      haveRng = true;
      continue;
    }
    NamedTensor named{t.name, t.shape, {}};
    if (t.dtype == DType::F64) {
      auto values = t.toF64();
      if (!values.isOk())
        return fail(values.status().message());
      named.values = std::move(values.value());
    } else {
      auto values = t.toF32();
      if (!values.isOk())
        return fail(values.status().message() + " or F64");
      named.values = std::move(values.value());
    }
    if (startsWith(t.name, kOptimizerPrefix)) {
      std::string rest = t.name.substr(std::string(kOptimizerPrefix).size());
      size_t slash = rest.find('/');
      if (slash == std::string::npos || slash == 0 || slash + 1 == rest.size())
        return fail("tensor " + t.name +
                    ": expected optimizer/<slot>/<parameter>");
      named.name = rest.substr(slash + 1);
      state.optimizer[rest.substr(0, slash)].push_back(std::move(named));
    } else {
      state.parameters.push_back(std::move(named));
    }
  }
  if (!haveRng)
    return fail(std::string("missing the tensor ") + kRngName);
  return state;
}

} // namespace kiln::runtime
