//===- DynamicLibraryTest.cpp - where CUDA's libraries are looked for -----===//
//
// runtime/DynamicLibrary.h: the candidate names (an environment override is
// the only name; otherwise each version, then the toolkit directory), a
// failed search that lists every name with dlerror's reason, and a library
// that loads (zlib, which the runtime links anyway) with its symbols.
//
//===----------------------------------------------------------------------===//

#include "runtime/DynamicLibrary.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace {

using namespace kiln::runtime;

TEST(DynamicLibrary, CandidatesWithoutOverride) {
  unsetenv("KILN_TEST_LIBRARY");
  std::vector<std::string> names =
      cudaLibraryCandidates("libfoo", "KILN_TEST_LIBRARY", {".so.3", ".so"});
  ASSERT_GE(names.size(), 2u);
  EXPECT_EQ(names[0], "libfoo.so.3");
  EXPECT_EQ(names[1], "libfoo.so");
  // Then, when the build found a toolkit, the same names in its directory.
  ASSERT_TRUE(names.size() == 2 || names.size() == 4) << names.size();
  if (names.size() == 4) {
    EXPECT_EQ(names[2].substr(names[2].size() - 12), "/libfoo.so.3");
    EXPECT_EQ(names[3].substr(names[3].size() - 10), "/libfoo.so");
  }
}

TEST(DynamicLibrary, OverrideIsTheOnlyCandidate) {
  setenv("KILN_TEST_LIBRARY", "/opt/x/libfoo.so.7", 1);
  EXPECT_EQ(cudaLibraryCandidates("libfoo", "KILN_TEST_LIBRARY"),
            std::vector<std::string>{"/opt/x/libfoo.so.7"});
  // An empty variable is no override.
  setenv("KILN_TEST_LIBRARY", "", 1);
  EXPECT_EQ(cudaLibraryCandidates("libfoo", "KILN_TEST_LIBRARY", {".so"})[0],
            "libfoo.so");
  unsetenv("KILN_TEST_LIBRARY");
}

TEST(DynamicLibrary, FailureListsEveryNameAndWhy) {
  DynamicLibrary none =
      openFirstLibrary({"/nonexistent/libkiln_a.so", "libkiln_b_missing.so"});
  EXPECT_EQ(none.handle, nullptr);
  EXPECT_EQ(none.symbol("anything"), nullptr);
  EXPECT_EQ(none.tried.rfind("/nonexistent/libkiln_a.so (", 0), 0u)
      << none.tried;
  EXPECT_NE(none.tried.find("; libkiln_b_missing.so ("), std::string::npos)
      << none.tried;
  EXPECT_NE(none.tried.find("No such file"), std::string::npos) << none.tried;
  EXPECT_EQ(describeLoadFailure(none, "KILN_X"),
            "tried " + none.tried + " (set KILN_X to the library's path)");
}

TEST(DynamicLibrary, LoadsTheFirstThatExists) {
  DynamicLibrary z =
      openFirstLibrary({"/nonexistent/libz.so.1", "libz.so.1", "libz.so"});
  ASSERT_NE(z.handle, nullptr) << z.tried;
  EXPECT_EQ(z.path, "libz.so.1");
  EXPECT_NE(z.symbol("zlibVersion"), nullptr);
  EXPECT_EQ(z.symbol("kiln_no_such_symbol"), nullptr);
}

} // namespace
