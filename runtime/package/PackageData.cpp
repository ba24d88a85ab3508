//===- PackageData.cpp - data in a package's buffers ----------------------===//
//
// See PackageData.h.
//
//===----------------------------------------------------------------------===//

#include "runtime/package/PackageData.h"

#include "runtime/Half.h"
#include "runtime/Initializers.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace kiln::runtime {

namespace {

// |v| rounded to nearest even in a binary format with |precision| bits of
// significand (the implicit bit included) and normal exponents
// [|minExp|, |maxExp|]; infinity past the largest finite value.
double roundToFormat(double v, int precision, int minExp, int maxExp) {
  if (!std::isfinite(v) || v == 0.0)
    return v;
  int e;
  std::frexp(std::fabs(v), &e); // |v| = f * 2^e, f in [0.5, 1)
  int exponent = std::max(e - 1, minExp);
  double ulp = std::ldexp(1.0, exponent - (precision - 1));
  double r = std::nearbyint(std::fabs(v) / ulp) * ulp; // exact scaling
  if (r >= std::ldexp(1.0, maxExp + 1))
    r = INFINITY;
  return std::copysign(r, v);
}

uint16_t toF16(double v) {
  uint16_t sign = std::signbit(v) ? 0x8000 : 0;
  if (std::isnan(v))
    return 0x7e00;
  double r = std::fabs(roundToFormat(v, 11, -14, 15));
  if (std::isinf(r))
    return sign | 0x7c00;
  if (r == 0.0)
    return sign;
  int e;
  std::frexp(r, &e);
  int exponent = e - 1;
  if (exponent < -14) // subnormal: r is a multiple of 2^-24
    return sign | static_cast<uint16_t>(std::ldexp(r, 24));
  uint16_t mantissa =
      static_cast<uint16_t>((std::ldexp(r, -exponent) - 1.0) * 1024.0);
  return sign | static_cast<uint16_t>((exponent + 15) << 10) | mantissa;
}

uint16_t toBf16(double v) {
  if (std::isnan(v))
    return std::signbit(v) ? 0xffc0 : 0x7fc0;
  // The rounded value is exactly a float; its top 16 bits are the bf16.
  float f = static_cast<float>(roundToFormat(v, 8, -126, 127));
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return static_cast<uint16_t>(bits >> 16);
}

// Writes |values| into |out| as |dtype| (row-major, i1 as one byte).
void storeAs(PkgDType dtype, const std::vector<double> &values, void *out) {
  size_t n = values.size();
  auto store = [&](auto convert, auto *typed) {
    for (size_t i = 0; i < n; ++i)
      typed[i] = convert(values[i]);
  };
  switch (dtype) {
  case PkgDType::F64:
    std::memcpy(out, values.data(), n * sizeof(double));
    break;
  case PkgDType::F32:
    store([](double v) { return static_cast<float>(v); },
          static_cast<float *>(out));
    break;
  case PkgDType::F16:
    store(toF16, static_cast<uint16_t *>(out));
    break;
  case PkgDType::BF16:
    store(toBf16, static_cast<uint16_t *>(out));
    break;
  case PkgDType::I64:
    store([](double v) { return static_cast<int64_t>(std::nearbyint(v)); },
          static_cast<int64_t *>(out));
    break;
  case PkgDType::I32:
    store([](double v) { return static_cast<int32_t>(std::nearbyint(v)); },
          static_cast<int32_t *>(out));
    break;
  case PkgDType::I8:
    store([](double v) { return static_cast<int8_t>(std::nearbyint(v)); },
          static_cast<int8_t *>(out));
    break;
  case PkgDType::I1:
    store([](double v) { return static_cast<uint8_t>(v != 0.0); },
          static_cast<uint8_t *>(out));
    break;
  }
}

InitKind initKind(PkgInitKind kind) {
  switch (kind) {
  case PkgInitKind::Zeros:
    return InitKind::zeros;
  case PkgInitKind::Ones:
    return InitKind::ones;
  case PkgInitKind::Constant:
    return InitKind::constant;
  case PkgInitKind::Normal:
    return InitKind::normal;
  case PkgInitKind::Uniform:
    return InitKind::uniform;
  case PkgInitKind::GlorotUniform:
    return InitKind::glorot_uniform;
  case PkgInitKind::KaimingNormal:
    return InitKind::kaiming_normal;
  }
  return InitKind::zeros;
}

} // namespace

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

void writeInitialValue(const PackageBuffer &buffer, const ParameterInit &init,
                       void *out) {
  if (init.hasData) {
    // checkPackage checked that the data is the buffer's size.
    std::memcpy(out, init.data.data(),
                std::min<size_t>(init.data.size(), buffer.size));
    return;
  }
  InitSpec spec;
  spec.kind = initKind(init.kind);
  spec.value = init.value;
  spec.scale = init.scale;
  spec.seed = static_cast<uint64_t>(init.seed);
  storeAs(buffer.dtype, initialize(spec, buffer.shape), out);
}

} // namespace kiln::runtime
