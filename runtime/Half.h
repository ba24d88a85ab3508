//===- Half.h - f16 and bf16 to and from f32 ------------------------*- C++ -*-===//
//
// The narrow float formats the runtime stores: IEEE binary16 (f16) and
// bfloat16 (bf16), as raw uint16_t bits. Narrowing rounds to nearest, ties
// to even, as the reference interpreter and the generated kernels do;
// NaN stays NaN (quiet), infinities and signed zeros are kept, f16
// overflow becomes infinity and f16 subnormals are produced exactly.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_HALF_H
#define KILN_RUNTIME_HALF_H

#include <cstdint>
#include <cstring>

namespace kiln::runtime {

inline uint32_t floatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float bitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float bf16ToFloat(uint16_t h) { return bitsFloat(uint32_t(h) << 16); }

inline uint16_t floatToBf16(float f) {
  uint32_t u = floatBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) // NaN: keep it quiet
    return static_cast<uint16_t>((u >> 16) | 0x40);
  uint32_t lsb = (u >> 16) & 1;
  u += 0x7fff + lsb;
  return static_cast<uint16_t>(u >> 16);
}

inline float f16ToFloat(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exponent = (h >> 10) & 0x1f;
  uint32_t mantissa = h & 0x3ff;
  if (exponent == 0x1f) // inf or NaN
    return bitsFloat(sign | 0x7f800000u | (mantissa << 13));
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24, exact in float.
    float v = static_cast<float>(mantissa) * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  return bitsFloat(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

inline uint16_t floatToF16(float f) {
  uint32_t u = floatBits(f);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000);
  uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) // NaN
    return sign | 0x7e00;
  if (abs >= 0x477ff000u) // rounds to a value >= 65520: infinity
    return sign | 0x7c00;
  if (abs < 0x38800000u) { // below 2^-14: subnormal or zero
    // Scale so the f16 subnormal step (2^-24) is one unit, rounding to
    // nearest even in the float addition.
    float scaled = bitsFloat(abs) + 0.5f; // 0.5 = 2^-1 makes ulp 2^-24
    uint32_t bits = floatBits(scaled) - floatBits(0.5f);
    return sign | static_cast<uint16_t>(bits);
  }
  uint32_t lsb = (abs >> 13) & 1;
  abs += 0xfff + lsb;
  return sign | static_cast<uint16_t>((abs - 0x38000000u) >> 13);
}

} // namespace kiln::runtime

#endif // KILN_RUNTIME_HALF_H
