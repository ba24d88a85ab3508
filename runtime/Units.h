//===- Units.h - sizes and counts in human units -------------------*- C++ -*-===//
//
// How Kiln writes a size or a count for people ("1.23 MiB", "4.59 GiB",
// "8 B", "7.43 KFLOP"): the compiler's memory-budget lines, kiln inspect's
// summary, the reference backend's memory check and the CUDA runtime's
// arena errors all use these. Header-only, no LLVM.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_UNITS_H
#define KILN_RUNTIME_UNITS_H

#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <string>

namespace kiln::runtime {

// |value| in the largest of |units| (each |step| times the one before)
// that keeps it at least 1, with two decimals ("1.23 MiB"); below |step|,
// in the first unit as a whole number ("8 B").
inline std::string formatInUnits(double value, std::initializer_list<const char *> units,
                                 double step) {
  const char *const *unit = units.begin();
  while (value >= step && unit + 1 < units.end()) {
    value /= step;
    ++unit;
  }
  char text[64];
  std::snprintf(text, sizeof text, unit == units.begin() ? "%.0f %s" : "%.2f %s", value,
                *unit);
  return text;
}

// "2.50 GiB": |bytes| in the largest binary unit (B to TiB) under which it
// is at least 1, for messages about memory.
inline std::string formatBytes(uint64_t bytes) {
  return formatInUnits(static_cast<double>(bytes), {"B", "KiB", "MiB", "GiB", "TiB"}, 1024);
}

} // namespace kiln::runtime

#endif // KILN_RUNTIME_UNITS_H
