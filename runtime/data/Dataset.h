//===- Dataset.h - sample sources for training --------------------*- C++ -*-===//
//
// A Dataset is an indexed collection of samples; each sample holds one
// tensor per graph input (images, labels, tokens, ...), as float32 or int32,
// with a fixed per-sample shape. The samplers and the batcher
// (runtime/data/Sampler.h) only see this interface, so every --data=SPEC
// (fashion-mnist, npy:DIR, tokens:FILE, synthetic) batches, shards and
// prefetches the same way. copySample must be safe to call from several
// threads at once: the prefetcher calls it from its worker.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_DATA_DATASET_H
#define KILN_RUNTIME_DATA_DATASET_H

#include "runtime/Status.h"
#include "runtime/data/FashionMnist.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kiln::runtime {

// f64 only where the step reads the tensor in f64 (a model trained in
// f64): data files are read at that precision.
enum class ElementType { f32, i32, f64 };

// Bytes one element takes.
inline int64_t elementTypeBytes(ElementType type) {
  return type == ElementType::f64 ? 8 : 4;
}

const char *elementTypeName(ElementType type);

// One tensor of a sample: its graph input name, element type and shape
// (without the batch dimension).
struct TensorSpec {
  std::string name;
  ElementType type = ElementType::f32;
  std::vector<int64_t> shape;
  // For synthetic int32 tensors: values are drawn from [0, classes).
  int64_t classes = 0;
  // The step reads this int32 tensor as indices below this limit (a
  // gather's table rows, a cross-entropy's classes). openDataset checks
  // every sample of a data file against it: a kernel clamps an index it
  // cannot use, so a token past the vocabulary would train silently on the
  // last row. 0: not known (a package before format 1.6 does not record
  // it: SignatureEntry::indexBound).
  int64_t indexLimit = 0;

  int64_t elementCount() const;
};

class Dataset {
public:
  virtual ~Dataset() = default;
  // Number of samples.
  virtual int64_t size() const = 0;
  // The tensors every sample has, in a fixed order.
  virtual const std::vector<TensorSpec> &specs() const = 0;
  // Writes tensor |tensor| of sample |index| to |dst|, which holds
  // specs()[tensor].elementCount() elements of specs()[tensor].type.
  virtual Status copySample(int64_t index, size_t tensor, void *dst) const = 0;
};

// Deterministic random samples of the given shapes: sample i depends only
// on (seed, i), so shuffling and sharding see the same data on every rank.
// Floats are uniform in [-1, 1); int32 tensors uniform in [0, classes).
class SyntheticDataset : public Dataset {
public:
  static StatusOr<std::unique_ptr<SyntheticDataset>>
  create(std::vector<TensorSpec> specs, int64_t size, uint64_t seed);
  int64_t size() const override { return size_; }
  const std::vector<TensorSpec> &specs() const override { return specs_; }
  Status copySample(int64_t index, size_t tensor, void *dst) const override;

private:
  std::vector<TensorSpec> specs_;
  int64_t size_ = 0;
  uint64_t seed_ = 0;
};

// A file of little-endian uint16 tokens cut into non-overlapping windows of
// seqLen + 1 tokens: window i starts at token i * seqLen; the input is its
// first seqLen tokens and the target the last seqLen (next-token labels).
class TokenDataset : public Dataset {
public:
  static StatusOr<std::unique_ptr<TokenDataset>>
  open(const std::string &path, int64_t seqLen,
       const std::string &inputName = "tokens",
       const std::string &targetName = "targets");
  int64_t size() const override { return windows_; }
  const std::vector<TensorSpec> &specs() const override { return specs_; }
  Status copySample(int64_t index, size_t tensor, void *dst) const override;
  int64_t tokenCount() const { return static_cast<int64_t>(tokens_.size()); }

private:
  std::vector<TensorSpec> specs_;
  std::vector<uint16_t> tokens_;
  int64_t seqLen_ = 0;
  int64_t windows_ = 0;
};

// Fashion-MNIST (runtime/data/FashionMnist.h) as a Dataset: the image as
// float32 pixels / 255 in |imageShape| (whose product must be rows*cols;
// empty means [rows, cols]) and the label as an int32 scalar.
class ImageClassificationDataset : public Dataset {
public:
  static StatusOr<std::unique_ptr<ImageClassificationDataset>>
  // The images as |imageType| (f32, or f64 for a model in f64) in [0, 1].
  create(ImageDataset images, std::vector<int64_t> imageShape = {},
         const std::string &imageName = "image",
         const std::string &labelName = "label",
         ElementType imageType = ElementType::f32);
  int64_t size() const override { return images_.count; }
  const std::vector<TensorSpec> &specs() const override { return specs_; }
  Status copySample(int64_t index, size_t tensor, void *dst) const override;

private:
  ImageDataset images_;
  std::vector<TensorSpec> specs_;
};

} // namespace kiln::runtime

#endif // KILN_RUNTIME_DATA_DATASET_H
