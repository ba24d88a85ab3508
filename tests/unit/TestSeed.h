//===- TestSeed.h - the seed of a randomized test ---------------*- C++ -*-===//
//
// Randomized suites draw a fresh seed on each run, so that CI keeps trying
// new inputs, and take a fixed one from an environment variable, so that a
// failure reruns: each suite names its variable (KILN_CODEGEN_SEED,
// KILN_FUSE_SEED, ...) in its failure messages or prints it with
// announcedSeed.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TESTS_UNIT_TESTSEED_H
#define KILN_TESTS_UNIT_TESTSEED_H

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>

namespace kiln::test {

// |variable|'s value when it is set, else 64 fresh bits.
inline uint64_t seedFrom(const char *variable) {
  if (const char *fixed = std::getenv(variable))
    return std::strtoull(fixed, nullptr, 10);
  std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) ^ device();
}

// seedFrom(|variable|), printed as "[ seed     ] VARIABLE=N" (the line
// ctest keeps in a failing test's output).
inline uint64_t announcedSeed(const char *variable) {
  uint64_t seed = seedFrom(variable);
  std::printf("[ seed     ] %s=%llu\n", variable,
              static_cast<unsigned long long>(seed));
  std::fflush(stdout);
  return seed;
}

} // namespace kiln::test

#endif // KILN_TESTS_UNIT_TESTSEED_H
