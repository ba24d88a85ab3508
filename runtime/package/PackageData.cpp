//===- PackageData.cpp - data in a package's buffers ----------------------===//
//
// See PackageData.h.
//
//===----------------------------------------------------------------------===//

#include "runtime/package/PackageData.h"

#include "runtime/Half.h"

#include <cstring>

namespace kiln::runtime {

ElementType dataElementType(PkgDType dtype) {
  if (dtype == PkgDType::F64)
    return ElementType::f64;
  return isFloatDType(dtype) ? ElementType::f32 : ElementType::i32;
}

double readElement(const void *data, PkgDType dtype, int64_t i) {
  switch (dtype) {
  case PkgDType::F64:
    return static_cast<const double *>(data)[i];
  case PkgDType::F32:
    return static_cast<const float *>(data)[i];
  case PkgDType::F16:
    return f16ToFloat(static_cast<const uint16_t *>(data)[i]);
  case PkgDType::BF16:
    return bf16ToFloat(static_cast<const uint16_t *>(data)[i]);
  case PkgDType::I64:
    return static_cast<double>(static_cast<const int64_t *>(data)[i]);
  case PkgDType::I32:
    return static_cast<const int32_t *>(data)[i];
  case PkgDType::I8:
    return static_cast<const int8_t *>(data)[i];
  case PkgDType::I1:
    return static_cast<const uint8_t *>(data)[i] != 0;
  }
  return 0;
}

void writeElement(void *data, PkgDType dtype, int64_t i, double v) {
  switch (dtype) {
  case PkgDType::F64:
    static_cast<double *>(data)[i] = v;
    break;
  case PkgDType::F32:
    static_cast<float *>(data)[i] = static_cast<float>(v);
    break;
  case PkgDType::F16:
    static_cast<uint16_t *>(data)[i] = floatToF16(static_cast<float>(v));
    break;
  case PkgDType::BF16:
    static_cast<uint16_t *>(data)[i] = floatToBf16(static_cast<float>(v));
    break;
  case PkgDType::I64:
    static_cast<int64_t *>(data)[i] = static_cast<int64_t>(v);
    break;
  case PkgDType::I32:
    static_cast<int32_t *>(data)[i] = static_cast<int32_t>(v);
    break;
  case PkgDType::I8:
    static_cast<int8_t *>(data)[i] = static_cast<int8_t>(v);
    break;
  case PkgDType::I1:
    static_cast<uint8_t *>(data)[i] = v != 0;
    break;
  }
}

int64_t elementCount(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

TensorValues readValues(const void *data, PkgDType dtype, int64_t n) {
  TensorValues out = TensorValues::zeros(dtype == PkgDType::F64, n);
  if (dtype == PkgDType::F64 || dtype == PkgDType::F32) {
    std::memcpy(out.data(), data, n * out.elementBytes());
    return out;
  }
  for (int64_t i = 0; i < n; ++i)
    out.set(i, readElement(data, dtype, i));
  return out;
}

void writeValues(void *data, PkgDType dtype, const TensorValues &values) {
  if ((dtype == PkgDType::F64 && values.wide()) ||
      (dtype == PkgDType::F32 && !values.wide())) {
    std::memcpy(data, values.data(), values.size() * values.elementBytes());
    return;
  }
  for (int64_t i = 0; i < values.size(); ++i)
    writeElement(data, dtype, i, values[i]);
}

bool copyBatchTensor(const BatchTensor &src, const SignatureEntry &e, void *dst,
                     std::string &error) {
  int64_t n = elementCount(e.shape);
  int64_t have = src.elementCount();
  if (have != n) {
    error = "input '" + e.name + "': the batch holds " + std::to_string(have) +
            " values, expected " + std::to_string(n);
    return false;
  }
  if (n == 0) // an empty input: no bytes, and no buffer to copy from
    return true;
  bool same = (src.type == ElementType::f32 && e.dtype == PkgDType::F32) ||
              (src.type == ElementType::f64 && e.dtype == PkgDType::F64) ||
              (src.type == ElementType::i32 && e.dtype == PkgDType::I32);
  if (same)
    std::memcpy(dst, src.data(), n * elementTypeBytes(src.type));
  else
    for (int64_t i = 0; i < n; ++i)
      writeElement(dst, e.dtype, i, src.element(i));
  return true;
}

} // namespace kiln::runtime
