//===- ScopedEnv.h - an environment variable set for a scope ---*- C++ -*-===//
//
// For the CUDA tests that steer the runtime through its environment
// (KILN_CACHE_DIR, KILN_CUDA_ATTENTION): set on construction, the old value
// (or its absence) restored on destruction. Setting the variable again
// inside the scope is fine; the first value seen is what comes back.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TESTS_UNIT_CUDA_SCOPEDENV_H
#define KILN_TESTS_UNIT_CUDA_SCOPEDENV_H

#include <cstdlib>
#include <string>

namespace kiln::runtime::cuda::testing {

struct ScopedEnv {
  ScopedEnv(const char *name, const std::string &value) : name(name) {
    if (const char *old = std::getenv(name))
      previous = old, had = true;
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (had)
      setenv(name, previous.c_str(), 1);
    else
      unsetenv(name);
  }
  ScopedEnv(const ScopedEnv &) = delete;
  ScopedEnv &operator=(const ScopedEnv &) = delete;

  const char *name;
  std::string previous;
  bool had = false;
};

} // namespace kiln::runtime::cuda::testing

#endif // KILN_TESTS_UNIT_CUDA_SCOPEDENV_H
