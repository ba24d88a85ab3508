//===- PackageCorruptionTest.cpp - truncated and corrupted packages
//--------===//
//
// Every truncation of a valid package and every single-byte corruption (each
// position, each of the 255 other values) must either load or give an
// error, never crash or read out of bounds. A corrupted package that does
// load must be self-consistent: it passes the semantic checks again and
// survives its own write/load round trip unchanged. Truncations must all be
// refused (the builder leaves no slack at the end of the buffer).
//
//===----------------------------------------------------------------------===//

#include "serialize/PackageWriter.h"
#include "tests/unit/package/PackageTestUtil.h"

#include <gtest/gtest.h>

using namespace kiln::runtime;
using kiln::runtime::testing::makeSamplePackage;

namespace {

std::vector<uint8_t> sampleBytes() {
  StatusOr<std::vector<uint8_t>> bytes =
      kiln::serialize::writePackage(makeSamplePackage());
  return bytes.isOk() ? bytes.value() : std::vector<uint8_t>();
}

TEST(PackageCorruption, EveryTruncationIsRefused) {
  std::vector<uint8_t> bytes = sampleBytes();
  ASSERT_FALSE(bytes.empty());
  for (size_t len = 0; len < bytes.size(); ++len) {
    // A fresh allocation of exactly |len| bytes, so a read past the end is
    // a read past the allocation (visible under a sanitizer build).
    std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + len);
    StatusOr<LoadedPackage> loaded = loadPackageFromBytes(cut.data(), len);
    EXPECT_FALSE(loaded.isOk()) << "truncated to " << len << " bytes loaded";
    if (!loaded.isOk())
      EXPECT_FALSE(loaded.status().message().empty());
  }
}

TEST(PackageCorruption, EverySingleByteCorruptionLoadsOrFails) {
  std::vector<uint8_t> bytes = sampleBytes();
  ASSERT_FALSE(bytes.empty());
  LoadedPackage original = makeSamplePackage();
  size_t refused = 0, identical = 0, changed = 0;
  for (size_t pos = 0; pos < bytes.size(); ++pos) {
    for (unsigned v = 0; v < 256; ++v) {
      if (v == bytes[pos])
        continue;
      std::vector<uint8_t> bad = bytes;
      bad[pos] = static_cast<uint8_t>(v);
      StatusOr<LoadedPackage> loaded =
          loadPackageFromBytes(bad.data(), bad.size());
      if (!loaded.isOk()) {
        ++refused;
        ASSERT_FALSE(loaded.status().message().empty());
        continue;
      }
      if (loaded.value() == original) {
        ++identical;
        continue;
      }
      ++changed;
      // A package that loads differently must still be one the writer
      // accepts and the loader reads back unchanged.
      StatusOr<std::vector<uint8_t>> again =
          kiln::serialize::writePackage(loaded.value());
      ASSERT_TRUE(again.isOk())
          << "byte " << pos << " = " << v << ": " << again.status().message();
      StatusOr<LoadedPackage> reloaded =
          loadPackageFromBytes(again->data(), again->size());
      ASSERT_TRUE(reloaded.isOk()) << reloaded.status().message();
      ASSERT_TRUE(reloaded.value() == loaded.value())
          << "byte " << pos << " = " << v;
    }
  }
  EXPECT_EQ(refused + identical + changed, bytes.size() * 255);
  // The file identifier alone gives 4 * 255 refusals.
  EXPECT_GE(refused, 4u * 255u);
  RecordProperty("refused", static_cast<int>(refused));
  RecordProperty("identical", static_cast<int>(identical));
  RecordProperty("changed", static_cast<int>(changed));
  std::printf("corruptions: %zu refused, %zu identical, %zu loaded changed\n",
              refused, identical, changed);
}

} // namespace
