//===- CubinCacheTest.cpp - NVRTC's cubins for the runtime, on disk -------===//
//
// runtime/cuda/CubinCache.h on the fake table (its "cubin" is text naming
// the source it came from; its NVRTC counts its compiles) and on the real
// table's NVRTC, which needs no GPU: a second compile comes from the disk;
// another source, program, architecture or NVRTC compiles again; a damaged
// entry is a miss and is rewritten; an unknown NVRTC, KILN_CACHE_DIR=off
// or a cache directory that cannot be made caches nothing and is no error;
// RuntimeKernels and CudaExecutable's re-JIT read the disk cache, and
// compile again when a cached cubin does not load.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CubinCache.h"
#include "runtime/cuda/RuntimeKernels.h"
#include "tests/unit/cuda/FakeCudaApi.h"
#include "tests/unit/cuda/ScopedEnv.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace kiln::runtime::cuda {
namespace {

namespace fs = std::filesystem;
using testing::FakeCudaApi;

// KILN_CACHE_DIR set to a fresh directory (or |value|) for a test.
class CubinCacheTest : public ::testing::Test {
protected:
  void SetUp() override {
    root = fs::temp_directory_path() /
           ("kiln-cubin-cache-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root);
    fs::create_directories(root);
    cacheDir = std::make_unique<testing::ScopedEnv>("KILN_CACHE_DIR", root.string());
    api.nvrtcIdentityText = "fake NVRTC 1.0";
    RuntimeKernels::clearProcessCache();
  }
  void TearDown() override {
    cacheDir.reset();
    fs::remove_all(root);
    RuntimeKernels::clearProcessCache();
  }
  // The cache's files (temporary ones included, which must not remain).
  std::vector<fs::path> entries() const {
    std::vector<fs::path> files;
    if (fs::is_directory(root / "cubin"))
      for (const auto &e : fs::directory_iterator(root / "cubin"))
        files.push_back(e.path());
    return files;
  }
  std::vector<uint8_t> compile(FakeCudaApi &on, const std::string &source,
                               const std::string &name, unsigned arch,
                               bool *fromDisk) {
    std::vector<uint8_t> cubin;
    std::string log;
    CubinOrigin origin;
    Status s = nvrtcCompileCached(on, source, name, arch, cubin, log, &origin);
    EXPECT_TRUE(s.isOk()) << s.message();
    *fromDisk = origin.fromDisk;
    // It names the directory it read or wrote, when it caches.
    EXPECT_EQ(origin.directory, on.nvrtcIdentityText.empty() ? "" : cubinCacheDirectory());
    return cubin;
  }

  fs::path root;
  std::unique_ptr<testing::ScopedEnv> cacheDir; // KILN_CACHE_DIR=root
  FakeCudaApi api;
};

const char *kSource = "extern \"C\" __global__ void k(float *x) { x[0] = 1; }";

TEST_F(CubinCacheTest, SecondCompileComesFromTheDisk) {
  bool fromDisk = true;
  std::vector<uint8_t> first = compile(api, kSource, "kiln_k", 90, &fromDisk);
  EXPECT_FALSE(fromDisk);
  EXPECT_EQ(api.nvrtcArchs, (std::vector<unsigned>{90}));
  ASSERT_EQ(entries().size(), 1u);
  EXPECT_EQ(entries()[0].extension(), ".cubin");
  // Another process (a fresh table): no NVRTC, the same bytes.
  FakeCudaApi other;
  other.nvrtcIdentityText = api.nvrtcIdentityText;
  std::vector<uint8_t> second = compile(other, kSource, "kiln_k", 90, &fromDisk);
  EXPECT_TRUE(fromDisk);
  EXPECT_TRUE(other.nvrtcArchs.empty());
  EXPECT_EQ(second, first);
  EXPECT_EQ(cubinCacheDirectory(), (root / "cubin").string());
}

TEST_F(CubinCacheTest, AnotherSourceProgramArchitectureOrNvrtcCompilesAgain) {
  bool fromDisk = false;
  compile(api, kSource, "kiln_k", 90, &fromDisk);
  std::string changed = std::string(kSource) + " // changed";
  compile(api, changed, "kiln_k", 90, &fromDisk);
  EXPECT_FALSE(fromDisk);
  compile(api, kSource, "kiln_other", 90, &fromDisk);
  EXPECT_FALSE(fromDisk);
  compile(api, kSource, "kiln_k", 80, &fromDisk);
  EXPECT_FALSE(fromDisk);
  FakeCudaApi newer;
  newer.nvrtcIdentityText = "fake NVRTC 1.1";
  compile(newer, kSource, "kiln_k", 90, &fromDisk);
  EXPECT_FALSE(fromDisk);
  EXPECT_EQ(api.nvrtcArchs, (std::vector<unsigned>{90, 90, 90, 80}));
  EXPECT_EQ(newer.nvrtcArchs, (std::vector<unsigned>{90}));
  EXPECT_EQ(entries().size(), 5u);
  // Each is still there.
  FakeCudaApi again;
  again.nvrtcIdentityText = "fake NVRTC 1.0";
  compile(again, changed, "kiln_k", 90, &fromDisk);
  EXPECT_TRUE(fromDisk);
  compile(again, kSource, "kiln_k", 80, &fromDisk);
  EXPECT_TRUE(fromDisk);
  EXPECT_TRUE(again.nvrtcArchs.empty());
}

TEST_F(CubinCacheTest, DamagedEntryIsAMissAndIsRewritten) {
  bool fromDisk = false;
  std::vector<uint8_t> good = compile(api, kSource, "kiln_k", 90, &fromDisk);
  ASSERT_EQ(entries().size(), 1u);
  fs::path entry = entries()[0];
  std::string bytes;
  {
    std::ifstream in(entry, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  // Cut short, then one byte of the source changed, then empty: each a
  // miss, compiled and rewritten, then read back.
  std::string flipped = bytes;
  flipped[bytes.find("x[0]")] = 'y';
  for (const std::string &damaged : {bytes.substr(0, bytes.size() - 3), flipped,
                                     std::string()}) {
    {
      std::ofstream out(entry, std::ios::binary | std::ios::trunc);
      out << damaged;
    }
    FakeCudaApi fresh;
    fresh.nvrtcIdentityText = api.nvrtcIdentityText;
    EXPECT_EQ(compile(fresh, kSource, "kiln_k", 90, &fromDisk), good);
    EXPECT_FALSE(fromDisk);
    EXPECT_EQ(fresh.nvrtcArchs.size(), 1u);
    compile(fresh, kSource, "kiln_k", 90, &fromDisk);
    EXPECT_TRUE(fromDisk);
  }
  EXPECT_EQ(entries().size(), 1u); // no temporary file left behind
}

TEST_F(CubinCacheTest, NothingIsCachedWithoutAKnownNvrtcOrADirectory) {
  bool fromDisk = true;
  api.nvrtcIdentityText = "";
  compile(api, kSource, "kiln_k", 90, &fromDisk);
  compile(api, kSource, "kiln_k", 90, &fromDisk);
  EXPECT_FALSE(fromDisk);
  EXPECT_EQ(api.nvrtcArchs.size(), 2u);
  EXPECT_TRUE(entries().empty());
  api.nvrtcIdentityText = "fake NVRTC 1.0";
  setenv("KILN_CACHE_DIR", "off", 1);
  compile(api, kSource, "kiln_k", 90, &fromDisk);
  EXPECT_FALSE(fromDisk);
  EXPECT_TRUE(entries().empty());
  EXPECT_EQ(cubinCacheDirectory(), "");
  // A cache "directory" that is a file cannot be made: compiles, no error.
  std::ofstream(root / "file") << "not a directory";
  setenv("KILN_CACHE_DIR", (root / "file").c_str(), 1);
  compile(api, kSource, "kiln_k", 90, &fromDisk);
  EXPECT_FALSE(fromDisk);
  EXPECT_EQ(api.nvrtcArchs.size(), 4u);
  EXPECT_EQ(cubinCacheDirectory(), "");
}

// Ranks on one machine compile the same kernels at once on their first
// start: writers racing on one entry each succeed, the entry is whole, and
// no temporary file is left.
TEST_F(CubinCacheTest, WritersRacingOnOneEntry) {
  const int writers = 8;
  std::vector<FakeCudaApi> apis(writers);
  std::vector<std::vector<uint8_t>> cubins(writers);
  std::vector<std::thread> threads;
  for (int i = 0; i < writers; ++i) {
    apis[i].nvrtcIdentityText = api.nvrtcIdentityText;
    threads.emplace_back([&, i] {
      std::string log;
      EXPECT_TRUE(nvrtcCompileCached(apis[i], kSource, "kiln_k", 90, cubins[i], log).isOk());
    });
  }
  for (std::thread &t : threads)
    t.join();
  for (int i = 1; i < writers; ++i)
    EXPECT_EQ(cubins[i], cubins[0]);
  ASSERT_EQ(entries().size(), 1u);
  EXPECT_EQ(entries()[0].extension(), ".cubin");
  bool fromDisk = false;
  FakeCudaApi reader;
  reader.nvrtcIdentityText = api.nvrtcIdentityText;
  EXPECT_EQ(compile(reader, kSource, "kiln_k", 90, &fromDisk), cubins[0]);
  EXPECT_TRUE(fromDisk);
}

// RuntimeKernels (the attention, convolution and epilogue sets): the
// process cache first, then the disk; a cubin from the disk that the
// driver refuses is compiled again, once, and loads.
TEST_F(CubinCacheTest, RuntimeKernelsReadTheDiskCache) {
  const std::string dir = (root / "cubin").string();
  {
    RuntimeKernels k(api, "kiln_k", "test");
    EXPECT_EQ(k.origin(), "");
    ASSERT_TRUE(k.load(kSource, 90).isOk());
    EXPECT_EQ(k.origin().rfind("compiled by NVRTC in ", 0), 0u) << k.origin();
    EXPECT_NE(k.origin().find(" s (kept in " + dir + ")"), std::string::npos)
        << k.origin();
    // Again in this process: its own cache.
    RuntimeKernels again(api, "kiln_k", "test");
    ASSERT_TRUE(again.load(kSource, 90).isOk());
    EXPECT_EQ(again.origin(), "compiled earlier in this process");
  }
  EXPECT_EQ(api.nvrtcArchs.size(), 1u);
  RuntimeKernels::clearProcessCache();
  FakeCudaApi other;
  other.nvrtcIdentityText = api.nvrtcIdentityText;
  {
    RuntimeKernels k(other, "kiln_k", "test");
    ASSERT_TRUE(k.load(kSource, 90).isOk());
    EXPECT_TRUE(k.loaded());
    EXPECT_EQ(k.origin(), "read from the cubin cache (" + dir + ")");
  }
  EXPECT_TRUE(other.nvrtcArchs.empty());
  ASSERT_EQ(other.loadedImages.size(), 1u);
  EXPECT_EQ(other.loadedImages[0], api.loadedImages[0]);
  RuntimeKernels::clearProcessCache();
  FakeCudaApi refusing;
  refusing.nvrtcIdentityText = api.nvrtcIdentityText;
  refusing.failCall = "cuModuleLoadData";
  refusing.failAt = 0; // the cached cubin's load
  RuntimeKernels k(refusing, "kiln_k", "test");
  Status s = k.load(kSource, 90);
  ASSERT_TRUE(s.isOk()) << s.message();
  EXPECT_EQ(refusing.nvrtcArchs, (std::vector<unsigned>{90}));
  EXPECT_EQ(refusing.loadedImages.size(), 1u);
  EXPECT_EQ(k.origin().rfind("compiled by NVRTC in ", 0), 0u) << k.origin();
}

// The real table's NVRTC (no GPU needed): its identity names its version,
// and its cubin comes back from the disk byte for byte.
TEST_F(CubinCacheTest, RealNvrtcCubinsComeBackFromTheDisk) {
  StatusOr<std::unique_ptr<CudaApi>> loaded = loadCudaApi(/*requireDriver=*/false);
  if (!loaded.isOk())
    GTEST_SKIP() << "no CUDA runtime library: " << loaded.status().message();
  CudaApi &real = *loaded.value();
  std::string identity = real.nvrtcIdentity();
  if (identity.empty())
    GTEST_SKIP() << "NVRTC is not available here (or has no nvrtcVersion)";
  EXPECT_EQ(identity.rfind("NVRTC ", 0), 0u) << identity;
  EXPECT_NE(identity.find("-I"), std::string::npos) << identity;
  std::vector<uint8_t> first, second;
  std::string log;
  CubinOrigin origin;
  ASSERT_TRUE(nvrtcCompileCached(real, kSource, "kiln_k", 90, first, log, &origin).isOk());
  EXPECT_FALSE(origin.fromDisk);
  EXPECT_GT(origin.compileSeconds, 0);
  EXPECT_EQ(origin.directory, (root / "cubin").string());
  ASSERT_TRUE(nvrtcCompileCached(real, kSource, "kiln_k", 90, second, log, &origin).isOk());
  EXPECT_TRUE(origin.fromDisk);
  EXPECT_EQ(origin.compileSeconds, 0);
  EXPECT_EQ(second, first);
  ASSERT_GT(second.size(), 4u);
  EXPECT_EQ(std::string(second.begin(), second.begin() + 4), "\x7f" "ELF");
}

} // namespace
} // namespace kiln::runtime::cuda
