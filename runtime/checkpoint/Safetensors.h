//===- Safetensors.h - safetensors files, written atomically ------*- C++ -*-===//
//
// The checkpoint format (DESIGN.md): an 8-byte little-endian header length,
// a JSON header mapping each tensor name to {dtype, shape, data_offsets}
// plus an optional "__metadata__" string map, then the raw little-endian
// data. Offsets are relative to the end of the header.
//
// Writing goes to a temporary file in the target's directory, is fsync'ed,
// renamed over the target and the directory fsync'ed, so a failure at any
// point (full disk, unwritable directory) leaves an earlier checkpoint
// untouched. Reading verifies everything before trusting it: header length
// within the file, well-formed JSON, known dtypes, offsets in range,
// non-overlapping and matching shape * dtype size. A bad file is an error
// naming the file and the problem.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_CHECKPOINT_SAFETENSORS_H
#define KILN_RUNTIME_CHECKPOINT_SAFETENSORS_H

#include "runtime/Status.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace kiln::runtime {

enum class DType { F64, F32, F16, BF16, I64, I32, I8, BOOL };

const char *dtypeName(DType dtype);
int64_t dtypeSize(DType dtype);
// Parses a safetensors dtype name; false if unknown.
bool parseDType(const std::string &name, DType &out);

struct SafeTensor {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data; // little-endian elements, C order

  static SafeTensor fromF32(std::string name, std::vector<int64_t> shape,
                            const std::vector<float> &values);
  static SafeTensor fromF64(std::string name, std::vector<int64_t> shape,
                            const std::vector<double> &values);
  static SafeTensor fromI64(std::string name, std::vector<int64_t> shape,
                            const std::vector<int64_t> &values);
  int64_t elementCount() const;
  // The values as floats; an error unless dtype is F32.
  StatusOr<std::vector<float>> toF32() const;
  // The values as doubles; an error unless dtype is F64.
  StatusOr<std::vector<double>> toF64() const;
  StatusOr<std::vector<int64_t>> toI64() const;
};

struct SafetensorsFile {
  std::vector<SafeTensor> tensors; // in the order of their data
  std::map<std::string, std::string> metadata;

  const SafeTensor *find(const std::string &name) const;
};

// Serializes |file| (header padded with spaces to 8 bytes, as the Python
// library does); an error for duplicate names or a data size that does
// not match the shape.
StatusOr<std::vector<uint8_t>> encodeSafetensors(const SafetensorsFile &file);
// Verifies and decodes |bytes|; |name| is used in error messages.
StatusOr<SafetensorsFile> decodeSafetensors(const std::vector<uint8_t> &bytes,
                                            const std::string &name);

// Atomic write: temp file |path|.tmp.<pid> beside |path|, fsync, rename.
Status writeSafetensors(const std::string &path, const SafetensorsFile &file);
StatusOr<SafetensorsFile> readSafetensors(const std::string &path);

// The temporary path writeSafetensors uses for |path| in this process.
std::string safetensorsTempPath(const std::string &path);

} // namespace kiln::runtime

#endif // KILN_RUNTIME_CHECKPOINT_SAFETENSORS_H
