//===- FashionMnist.h - the Fashion-MNIST IDX files ---------------*- C++ -*-===//
//
// Reads the data set as Debian's dataset-fashion-mnist package installs it
// (/usr/share/datasets/fashion-mnist/{train,t10k}-{images-idx3,labels-idx1}-
// ubyte.gz), gzip through zlib. Every header field is checked (magic
// number, counts, image size, labels in range) and a bad file is an error
// naming it and what was expected.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_DATA_FASHIONMNIST_H
#define KILN_RUNTIME_DATA_FASHIONMNIST_H

#include "runtime/Status.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::runtime {

constexpr const char *kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

struct ImageDataset {
  int64_t count = 0;
  int64_t rows = 0, cols = 0;
  std::vector<uint8_t> pixels; // count * rows * cols, row-major
  std::vector<uint8_t> labels; // count, each in [0, classes)
  int64_t classes = 10;

  int64_t imageSize() const { return rows * cols; }
};

// Loads the "train" or "test" split from |dir|.
StatusOr<ImageDataset> loadFashionMnist(const std::string &dir,
                                        const std::string &split);

} // namespace kiln::runtime

#endif // KILN_RUNTIME_DATA_FASHIONMNIST_H
