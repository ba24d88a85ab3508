//===- FashionMnist.cpp - the Fashion-MNIST IDX files ---------------------===//

#include "runtime/data/FashionMnist.h"

#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <sys/stat.h>

namespace kiln::runtime {
namespace {

// Reads a whole gzip (or plain) file.
StatusOr<std::vector<uint8_t>> readGzip(const std::string &path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    return Status::error(path + ": " + std::strerror(errno));
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f)
    return Status::error(path + ": cannot open: " + std::strerror(errno));
  std::vector<uint8_t> out;
  uint8_t buffer[1 << 16];
  while (true) {
    int n = gzread(f, buffer, sizeof(buffer));
    if (n < 0) {
      int code;
      std::string message = gzerror(f, &code);
      gzclose(f);
      return Status::error(path + ": not a readable gzip file: " + message);
    }
    if (n == 0)
      break;
    out.insert(out.end(), buffer, buffer + n);
  }
  gzclose(f);
  return out;
}

uint32_t bigEndian32(const uint8_t *p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) |
         uint32_t(p[3]);
}

} // namespace

StatusOr<ImageDataset> loadFashionMnist(const std::string &dir,
                                        const std::string &split) {
  std::string prefix;
  if (split == "train")
    prefix = "train";
  else if (split == "test")
    prefix = "t10k";
  else
    return Status::error("fashion-mnist: unknown split '" + split +
                         "' (expected train or test)");
  std::string imagesPath = dir + "/" + prefix + "-images-idx3-ubyte.gz";
  std::string labelsPath = dir + "/" + prefix + "-labels-idx1-ubyte.gz";
  StatusOr<std::vector<uint8_t>> images = readGzip(imagesPath);
  if (!images.isOk())
    return Status::error("fashion-mnist: " + images.status().message());
  StatusOr<std::vector<uint8_t>> labels = readGzip(labelsPath);
  if (!labels.isOk())
    return Status::error("fashion-mnist: " + labels.status().message());

  const std::vector<uint8_t> &img = images.value();
  const std::vector<uint8_t> &lab = labels.value();
  if (img.size() < 16 || bigEndian32(img.data()) != 0x00000803)
    return Status::error("fashion-mnist: " + imagesPath +
                         ": expected an IDX3 image file (magic 0x00000803)");
  if (lab.size() < 8 || bigEndian32(lab.data()) != 0x00000801)
    return Status::error("fashion-mnist: " + labelsPath +
                         ": expected an IDX1 label file (magic 0x00000801)");
  ImageDataset ds;
  ds.count = bigEndian32(img.data() + 4);
  ds.rows = bigEndian32(img.data() + 8);
  ds.cols = bigEndian32(img.data() + 12);
  int64_t labelCount = bigEndian32(lab.data() + 4);
  if (labelCount != ds.count)
    return Status::error("fashion-mnist: " + labelsPath + " holds " +
                         std::to_string(labelCount) + " labels but " + imagesPath +
                         " holds " + std::to_string(ds.count) + " images");
  uint64_t expected = 16 + uint64_t(ds.count) * uint64_t(ds.rows) * uint64_t(ds.cols);
  if (img.size() != expected)
    return Status::error("fashion-mnist: " + imagesPath + ": expected " +
                         std::to_string(expected) + " bytes, found " +
                         std::to_string(img.size()));
  if (lab.size() != 8 + uint64_t(ds.count))
    return Status::error("fashion-mnist: " + labelsPath + ": expected " +
                         std::to_string(8 + ds.count) + " bytes, found " +
                         std::to_string(lab.size()));
  ds.pixels.assign(img.begin() + 16, img.end());
  ds.labels.assign(lab.begin() + 8, lab.end());
  for (int64_t i = 0; i < ds.count; ++i)
    if (ds.labels[i] >= ds.classes)
      return Status::error("fashion-mnist: " + labelsPath + ": label " +
                           std::to_string(i) + " is " + std::to_string(ds.labels[i]) +
                           ", expected a class in [0, 10)");
  return ds;
}

} // namespace kiln::runtime
