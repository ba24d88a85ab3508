//===- DataSpec.cpp - --data=SPEC to a Dataset -----------------------------===//

#include "runtime/data/DataSpec.h"

#include "runtime/data/FashionMnist.h"
#include "runtime/data/Npy.h"

namespace kiln::runtime {
namespace {

std::string shapeText(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

// The dataset's tensors must match the step's inputs one for one.
Status checkMatches(const std::string &what, const Dataset &ds,
                    const std::vector<TensorSpec> &inputs) {
  if (ds.specs().size() != inputs.size())
    return Status::error(what + ": " + std::to_string(ds.specs().size()) +
                         " tensors per sample: expected " +
                         std::to_string(inputs.size()) + " graph inputs");
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TensorSpec &have = ds.specs()[i], &want = inputs[i];
    if (have.shape != want.shape || have.type != want.type)
      return Status::error(
          what + ": " + have.name + " is " + elementTypeName(have.type) +
          shapeText(have.shape) + " per sample: expected " +
          elementTypeName(want.type) + shapeText(want.shape) + " for input " +
          want.name);
  }
  return Status::ok();
}

// Every value of an int32 tensor the step reads as indices
// (TensorSpec::indexLimit) lies in [0, limit), in every sample.
Status checkIndices(const Dataset &ds, const std::vector<TensorSpec> &inputs) {
  for (size_t t = 0; t < inputs.size(); ++t) {
    const TensorSpec &want = inputs[t];
    if (want.indexLimit <= 0 || want.type != ElementType::i32)
      continue;
    std::vector<int32_t> values(want.elementCount());
    for (int64_t sample = 0; sample < ds.size(); ++sample) {
      Status s = ds.copySample(sample, t, values.data());
      if (!s.isOk())
        return s;
      for (size_t e = 0; e < values.size(); ++e)
        if (values[e] < 0 || values[e] >= want.indexLimit)
          return Status::error(
              "sample " + std::to_string(sample) + " of '" + want.name +
              "' holds " + std::to_string(values[e]) +
              (values.size() > 1 ? " (element " + std::to_string(e) + ")" : "") +
              ", outside [0, " + std::to_string(want.indexLimit) +
              "): the model reads '" + want.name + "' as indices below " +
              std::to_string(want.indexLimit) +
              " (a table's rows or a cross-entropy's classes)");
    }
  }
  return Status::ok();
}

template <typename T>
StatusOr<std::unique_ptr<Dataset>> checked(const std::string &what,
                                           StatusOr<std::unique_ptr<T>> ds,
                                           const std::vector<TensorSpec> &inputs) {
  if (!ds.isOk())
    return ds.status();
  Status s = checkMatches(what, *ds.value(), inputs);
  if (s.isOk())
    s = checkIndices(*ds.value(), inputs);
  if (!s.isOk())
    return s;
  return std::unique_ptr<Dataset>(std::move(ds.value()));
}

} // namespace

StatusOr<DataSpec> parseDataSpec(const std::string &spec) {
  DataSpec out;
  size_t colon = spec.find(':');
  std::string kind = spec.substr(0, colon);
  std::string arg = colon == std::string::npos ? "" : spec.substr(colon + 1);
  if (kind == "fashion-mnist") {
    out.kind = DataSpec::Kind::fashionMnist;
    out.path = arg.empty() ? kFashionMnistDir : arg;
    return out;
  }
  if (kind == "synthetic" && colon == std::string::npos)
    return out;
  if ((kind == "npy" || kind == "tokens") && !arg.empty()) {
    out.kind = kind == "npy" ? DataSpec::Kind::npy : DataSpec::Kind::tokens;
    out.path = arg;
    return out;
  }
  return Status::error("--data=" + spec +
                       ": expected fashion-mnist[:DIR], npy:DIR, tokens:FILE "
                       "or synthetic");
}

StatusOr<std::unique_ptr<Dataset>>
openDataset(const DataSpec &spec, const std::vector<TensorSpec> &inputs,
            const DataOptions &options) {
  switch (spec.kind) {
  case DataSpec::Kind::synthetic:
    return checked("synthetic",
                   SyntheticDataset::create(inputs, options.syntheticSize,
                                            options.seed),
                   inputs);
  case DataSpec::Kind::npy: {
    std::vector<std::pair<std::string, ElementType>> names;
    for (const TensorSpec &in : inputs)
      names.push_back({in.name, in.type});
    return checked("npy:" + spec.path, NpyDataset::open(spec.path, names),
                   inputs);
  }
  case DataSpec::Kind::tokens: {
    if (inputs.size() != 2 || inputs[0].shape.size() != 1)
      return Status::error("tokens:" + spec.path +
                           ": expected two inputs (tokens [seq], targets "
                           "[seq]), found " + std::to_string(inputs.size()));
    return checked("tokens:" + spec.path,
                   TokenDataset::open(spec.path, inputs[0].shape[0],
                                      inputs[0].name, inputs[1].name),
                   inputs);
  }
  case DataSpec::Kind::fashionMnist: {
    if (inputs.size() != 2)
      return Status::error("fashion-mnist: expected two inputs (image, "
                           "label), found " + std::to_string(inputs.size()));
    auto images = loadFashionMnist(spec.path, options.split);
    if (!images.isOk())
      return images.status();
    return checked("fashion-mnist",
                   ImageClassificationDataset::create(
                       std::move(images.value()), inputs[0].shape,
                       inputs[0].name, inputs[1].name, inputs[0].type),
                   inputs);
  }
  }
  return Status::error("unknown data spec kind");
}

} // namespace kiln::runtime
