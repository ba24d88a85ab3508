//===- Philox.h - the counter-based generator behind kiln.dropout -*- C++ -*-===//
//
// Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2,
// 3", SC'11; the Random123 reference) and the exact recipe kiln.dropout
// builds its mask from. Every backend must produce the same bits, so the
// recipe is written out here once, header-only and free of MLIR, for the
// reference interpreter, the CPU and CUDA emitters and the tests:
//
//   key     = (k0, k1) = (low 32 bits of seed, high 32 bits of seed),
//             seed taken as a 64-bit two's-complement integer
//   counter = (c0, c1, c2, c3) = (low 32 of counter, high 32 of counter,
//                                 low 32 of i, high 32 of i),
//             where `counter` is the op's 0-d i64 operand and `i` the
//             row-major index of the element
//   word    = Philox4x32-10(counter, key)[0]          (the first output word)
//   u       = (word >> 8) * 2^-24                     (exact, in [0, 1))
//   keep    = u >= rate
//   result  = keep ? x * (1 / (1 - rate)) : 0, the scale computed in double
//             and the product rounded to the element type once.
//
// Philox4x32 round: (hi0, lo0) = M0 * c0, (hi1, lo1) = M1 * c2 (64-bit
// products), c = (hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0); ten rounds, the
// key bumped by the Weyl constants (W0, W1) between rounds. Checked against
// Random123's known-answer vectors in tests/unit/reference.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_IR_REFERENCE_PHILOX_H
#define KILN_IR_REFERENCE_PHILOX_H

#include <array>
#include <cstdint>

namespace kiln::philox {

constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;

using Counter = std::array<uint32_t, 4>;
using Key = std::array<uint32_t, 2>;

inline Counter philox4x32_10(Counter c, Key k) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k[0] += kW0;
      k[1] += kW1;
    }
    uint64_t p0 = static_cast<uint64_t>(kM0) * c[0];
    uint64_t p1 = static_cast<uint64_t>(kM1) * c[2];
    uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c = {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
  }
  return c;
}

// The uniform number on [0, 1) that kiln.dropout compares with its rate for
// element |index| (see the file comment).
inline double dropoutUniform(int64_t seed, int64_t counter, int64_t index) {
  uint64_t s = static_cast<uint64_t>(seed), n = static_cast<uint64_t>(counter),
           i = static_cast<uint64_t>(index);
  Key key = {static_cast<uint32_t>(s), static_cast<uint32_t>(s >> 32)};
  Counter ctr = {static_cast<uint32_t>(n), static_cast<uint32_t>(n >> 32),
                 static_cast<uint32_t>(i), static_cast<uint32_t>(i >> 32)};
  uint32_t word = philox4x32_10(ctr, key)[0];
  return static_cast<double>(word >> 8) * 0x1.0p-24;
}

} // namespace kiln::philox

#endif // KILN_IR_REFERENCE_PHILOX_H
