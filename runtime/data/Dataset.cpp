//===- Dataset.cpp - synthetic, token and image datasets -------------------===//
//
// The in-memory Dataset implementations. Random numbers come from
// std::mt19937_64 (whose sequence the standard fixes) turned into values by
// explicit formulas, so a seed gives the same samples with any standard
// library, as in runtime/Initializers.cpp.
//
//===----------------------------------------------------------------------===//

#include "runtime/data/Dataset.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>

namespace kiln::runtime {

const char *elementTypeName(ElementType type) {
  switch (type) {
  case ElementType::f32:
    return "f32";
  case ElementType::f64:
    return "f64";
  case ElementType::i32:
    return "i32";
  }
  return "?";
}

int64_t TensorSpec::elementCount() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

namespace {

std::string outOfRange(const char *what, int64_t index, int64_t size) {
  return std::string(what) + ": sample " + std::to_string(index) +
         " out of range: expected an index in [0, " + std::to_string(size) +
         ")";
}

// SplitMix64: decorrelates the per-sample seeds (seed, index, tensor).
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

Status checkShape(const std::string &what, const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0)
      return Status::error(what + ": dimension " + std::to_string(d) +
                           " is negative: expected sizes >= 0");
    if (d != 0 && n > (int64_t(1) << 40) / d)
      return Status::error(what + ": shape is too large");
    n *= d;
  }
  return Status::ok();
}

} // namespace

StatusOr<std::unique_ptr<SyntheticDataset>>
SyntheticDataset::create(std::vector<TensorSpec> specs, int64_t size,
                         uint64_t seed) {
  if (size < 0)
    return Status::error("synthetic: size " + std::to_string(size) +
                         " is negative: expected >= 0");
  for (const TensorSpec &spec : specs) {
    Status s = checkShape("synthetic: " + spec.name, spec.shape);
    if (!s.isOk())
      return s;
    if (spec.type == ElementType::i32 && spec.classes <= 0)
      return Status::error("synthetic: " + spec.name + ": int32 tensor has " +
                           std::to_string(spec.classes) +
                           " classes: expected at least 1");
    if (spec.classes > INT32_MAX)
      return Status::error("synthetic: " + spec.name +
                           ": classes exceed the int32 range");
  }
  auto ds = std::unique_ptr<SyntheticDataset>(new SyntheticDataset());
  ds->specs_ = std::move(specs);
  ds->size_ = size;
  ds->seed_ = seed;
  return ds;
}

Status SyntheticDataset::copySample(int64_t index, size_t tensor,
                                    void *dst) const {
  if (index < 0 || index >= size_)
    return Status::error(outOfRange("synthetic", index, size_));
  if (tensor >= specs_.size())
    return Status::error("synthetic: tensor " + std::to_string(tensor) +
                         " out of range");
  const TensorSpec &spec = specs_[tensor];
  std::mt19937_64 rng(mix(mix(seed_) ^ mix(uint64_t(index) * 2 + 1) ^
                          mix(uint64_t(tensor) + 0x51ed2701ULL)));
  int64_t n = spec.elementCount();
  if (spec.type == ElementType::f32) {
    float *out = static_cast<float *>(dst);
    for (int64_t i = 0; i < n; ++i) {
      double u = double(rng() >> 11) * 0x1.0p-53; // [0, 1)
      out[i] = float(2.0 * u - 1.0);
    }
  } else if (spec.type == ElementType::f64) {
    double *out = static_cast<double *>(dst);
    for (int64_t i = 0; i < n; ++i) {
      double u = double(rng() >> 11) * 0x1.0p-53; // [0, 1)
      out[i] = 2.0 * u - 1.0;
    }
  } else {
    int32_t *out = static_cast<int32_t *>(dst);
    for (int64_t i = 0; i < n; ++i)
      out[i] = int32_t(rng() % uint64_t(spec.classes));
  }
  return Status::ok();
}

StatusOr<std::unique_ptr<TokenDataset>>
TokenDataset::open(const std::string &path, int64_t seqLen,
                   const std::string &inputName,
                   const std::string &targetName) {
  if (seqLen <= 0)
    return Status::error("tokens: " + path + ": sequence length " +
                         std::to_string(seqLen) + ": expected at least 1");
  FILE *f = std::fopen(path.c_str(), "rb");
  if (!f)
    return Status::error("tokens: " + path + ": " + std::strerror(errno));
  std::vector<uint8_t> bytes;
  uint8_t buffer[1 << 16];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), f)) > 0)
    bytes.insert(bytes.end(), buffer, buffer + n);
  bool failed = std::ferror(f);
  std::fclose(f);
  if (failed)
    return Status::error("tokens: " + path + ": read failed");
  if (bytes.size() % 2 != 0)
    return Status::error("tokens: " + path + ": size " +
                         std::to_string(bytes.size()) +
                         " bytes is odd: expected uint16 tokens");
  auto ds = std::unique_ptr<TokenDataset>(new TokenDataset());
  ds->tokens_.resize(bytes.size() / 2);
  for (size_t i = 0; i < ds->tokens_.size(); ++i)
    ds->tokens_[i] = uint16_t(bytes[2 * i] | (bytes[2 * i + 1] << 8));
  int64_t count = static_cast<int64_t>(ds->tokens_.size());
  if (count < seqLen + 1)
    return Status::error("tokens: " + path + ": " + std::to_string(count) +
                         " tokens: expected at least seq+1 = " +
                         std::to_string(seqLen + 1));
  ds->seqLen_ = seqLen;
  ds->windows_ = (count - 1) / seqLen;
  ds->specs_ = {{inputName, ElementType::i32, {seqLen}, 65536},
                {targetName, ElementType::i32, {seqLen}, 65536}};
  return ds;
}

Status TokenDataset::copySample(int64_t index, size_t tensor,
                                void *dst) const {
  if (index < 0 || index >= windows_)
    return Status::error(outOfRange("tokens", index, windows_));
  if (tensor > 1)
    return Status::error("tokens: tensor " + std::to_string(tensor) +
                         " out of range");
  const uint16_t *src = tokens_.data() + index * seqLen_ + int64_t(tensor);
  int32_t *out = static_cast<int32_t *>(dst);
  for (int64_t i = 0; i < seqLen_; ++i)
    out[i] = src[i];
  return Status::ok();
}

StatusOr<std::unique_ptr<ImageClassificationDataset>>
ImageClassificationDataset::create(ImageDataset images,
                                   std::vector<int64_t> imageShape,
                                   const std::string &imageName,
                                   const std::string &labelName,
                                   ElementType imageType) {
  if (imageShape.empty())
    imageShape = {images.rows, images.cols};
  if (imageType == ElementType::i32)
    return Status::error("images: " + imageName +
                         " is an integer input: expected f32 or f64 pixels");
  TensorSpec image{imageName, imageType, imageShape, 0};
  Status s = checkShape("images: " + imageName, imageShape);
  if (!s.isOk())
    return s;
  if (image.elementCount() != images.imageSize())
    return Status::error("images: shape for " + imageName + " has " +
                         std::to_string(image.elementCount()) +
                         " elements: expected rows*cols = " +
                         std::to_string(images.imageSize()));
  if (int64_t(images.pixels.size()) != images.count * images.imageSize() ||
      int64_t(images.labels.size()) != images.count)
    return Status::error("images: pixel or label count does not match " +
                         std::to_string(images.count) + " images");
  auto ds = std::unique_ptr<ImageClassificationDataset>(
      new ImageClassificationDataset());
  ds->specs_ = {image, {labelName, ElementType::i32, {}, images.classes}};
  ds->images_ = std::move(images);
  return ds;
}

Status ImageClassificationDataset::copySample(int64_t index, size_t tensor,
                                              void *dst) const {
  if (index < 0 || index >= images_.count)
    return Status::error(outOfRange("images", index, images_.count));
  if (tensor == 0) {
    const uint8_t *src = images_.pixels.data() + index * images_.imageSize();
    if (specs_[0].type == ElementType::f64) {
      double *out = static_cast<double *>(dst);
      for (int64_t i = 0; i < images_.imageSize(); ++i)
        out[i] = double(src[i]) / 255.0;
      return Status::ok();
    }
    float *out = static_cast<float *>(dst);
    for (int64_t i = 0; i < images_.imageSize(); ++i)
      out[i] = float(src[i]) / 255.0f;
    return Status::ok();
  }
  if (tensor == 1) {
    *static_cast<int32_t *>(dst) = images_.labels[index];
    return Status::ok();
  }
  return Status::error("images: tensor " + std::to_string(tensor) +
                       " out of range");
}

} // namespace kiln::runtime
