//===- PackageRoundTripTest.cpp - writer -> loader with every field
//--------===//
//
// The sample package sets every field away from its default; writing it and
// loading it back must give an equal LoadedPackage, in memory and through a
// file, and the bytes must carry the "KPKG" identifier.
//
//===----------------------------------------------------------------------===//

#include "serialize/PackageWriter.h"
#include "tests/unit/package/PackageTestUtil.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <unistd.h>

using namespace kiln::runtime;
using kiln::runtime::testing::makeSamplePackage;

namespace {

// |original| written by the package writer and read back by the loader.
void roundTrip(const LoadedPackage &original, LoadedPackage &loaded) {
  StatusOr<std::vector<uint8_t>> bytes =
      kiln::serialize::writePackage(original);
  ASSERT_TRUE(bytes.isOk()) << bytes.status().message();
  StatusOr<LoadedPackage> read =
      loadPackageFromBytes(bytes->data(), bytes->size());
  ASSERT_TRUE(read.isOk()) << read.status().message();
  loaded = std::move(read.value());
}

TEST(PackageRoundTrip, EveryFieldSurvives) {
  LoadedPackage original = makeSamplePackage();
  StatusOr<std::vector<uint8_t>> bytes =
      kiln::serialize::writePackage(original);
  ASSERT_TRUE(bytes.isOk()) << bytes.status().message();
  ASSERT_GE(bytes->size(), 8u);
  EXPECT_EQ(std::string(reinterpret_cast<const char *>(bytes->data()) + 4, 4),
            "KPKG");
  StatusOr<LoadedPackage> loaded =
      loadPackageFromBytes(bytes->data(), bytes->size());
  ASSERT_TRUE(loaded.isOk()) << loaded.status().message();
  const LoadedPackage &p = loaded.value();
  // Spot checks on top of the whole-struct comparison, so a broken
  // operator== cannot hide a dropped field.
  EXPECT_EQ(p.majorVersion, 1);
  EXPECT_EQ(p.minorVersion, 7);
  EXPECT_EQ(p.target.kind, TargetKind::Cuda);
  EXPECT_THAT(p.target.smArchs, ::testing::ElementsAre(80u, 90u));
  EXPECT_EQ(p.target.cpuFeatures, "+avx2,+fma");
  EXPECT_EQ(p.arenaSize, 1024u);
  ASSERT_EQ(p.buffers.size(), 11u);
  EXPECT_EQ(p.buffers[2].name, "fc.weight.next");
  EXPECT_EQ(p.buffers[2].updates, 1);
  EXPECT_EQ(p.buffers[1].aliases, 1);
  EXPECT_EQ(p.buffers[3].dtype, PkgDType::BF16);
  EXPECT_THAT(p.buffers[0].shape, ::testing::ElementsAre(4, 8));
  ASSERT_EQ(p.kernels.size(), 2u);
  EXPECT_EQ(p.kernels[1].cubins.size(), 2u);
  EXPECT_EQ(p.kernels[1].cubins[1].arch, 90u);
  EXPECT_THAT(p.kernels[1].cubins[1].image, ::testing::ElementsAre(4, 5, 6, 7));
  EXPECT_EQ(p.kernels[1].ptx, ".version 8.0\n.target sm_80\n");
  EXPECT_EQ(p.kernels[1].sharedMemoryBytes, 1024u);
  EXPECT_EQ(p.kernels[1].serialSteps, 128u);
  EXPECT_EQ(p.kernels[1].serialThreads, 768u);
  EXPECT_EQ(p.kernels[1].readBytes, 4096u);
  EXPECT_TRUE(p.kernels[1].programmaticLaunch);
  EXPECT_FALSE(p.kernels[0].programmaticLaunch);
  EXPECT_EQ(p.kernels[0].object.size(), 8u);
  EXPECT_EQ(p.kernels[0].grid, (std::array<uint32_t, 3>{2, 3, 1}));
  EXPECT_THAT(p.kernels[0].sourceNodes,
              ::testing::ElementsAre("relu_1", "add_2"));
  ASSERT_EQ(p.thunks.size(), 6u);
  EXPECT_TRUE(p.thunks[0].hasGemm);
  EXPECT_FALSE(p.thunks[0].hasConv);
  EXPECT_EQ(p.thunks[0].gemm.batch, 3);
  EXPECT_EQ(p.thunks[0].gemm.alpha, 0.5);
  EXPECT_TRUE(p.thunks[0].gemm.transposeRhs);
  EXPECT_EQ(p.thunks[1].kernel, 1);
  EXPECT_EQ(p.thunks[2].collective.kind, CollectiveKind::ReduceScatter);
  EXPECT_THAT(p.thunks[2].collective.groupsShape, ::testing::ElementsAre(2, 2));
  EXPECT_EQ(p.thunks[4].conv.groups, 2);
  EXPECT_THAT(p.thunks[4].conv.padding, ::testing::ElementsAre(0, 1, 0, 1));
  EXPECT_EQ(p.thunks[5].library, LibraryKind::Attention);
  EXPECT_TRUE(p.thunks[5].hasAttention);
  EXPECT_FALSE(p.thunks[5].hasGemm);
  EXPECT_EQ(p.thunks[5].attention.kvLen, 5);
  EXPECT_EQ(p.thunks[5].attention.valueDim, 2);
  EXPECT_EQ(p.thunks[5].attention.scale, 0.5);
  EXPECT_TRUE(p.thunks[5].attention.causal);
  EXPECT_EQ(p.thunks[5].attention.layout, AttentionLayout::BHTD);
  ASSERT_EQ(p.parameterInits.size(), 2u);
  EXPECT_EQ(p.parameterInits[0].seed, 3);
  EXPECT_FALSE(p.parameterInits[0].hasData);
  EXPECT_TRUE(p.parameterInits[1].hasData);
  EXPECT_EQ(p.parameterInits[1].data[5], 35);
  ASSERT_EQ(p.inputs.size(), 2u);
  EXPECT_EQ(p.outputs[0].role, PkgRole::Loss);
  EXPECT_EQ(p.metadata.strategy, Strategy::DataParallel);
  EXPECT_EQ(p.metadata.worldSize, 2u);
  EXPECT_THAT(p.metadata.compileFlags,
              ::testing::ElementsAre("--target=cuda:sm_90", "--amp=bf16"));
  EXPECT_EQ(p.metadata.graphHash.size(), 32u);
  EXPECT_TRUE(p == original);
}

// Version 1.1's GEMM epilogues: the residual's C operand and GELU's aux
// result come back in their places, with the epilogue.
TEST(PackageRoundTrip, GemmEpilogueBuffersSurvive) {
  using kiln::runtime::testing::setGemmEpilogue;
  for (PkgGemmEpilogue e :
       {PkgGemmEpilogue::Residual, PkgGemmEpilogue::BiasResidual,
        PkgGemmEpilogue::GeluAux, PkgGemmEpilogue::BiasGeluAux,
        PkgGemmEpilogue::DGelu}) {
    SCOPED_TRACE(pkgGemmEpilogueName(e));
    LoadedPackage original = makeSamplePackage();
    setGemmEpilogue(original, e);
    LoadedPackage loaded;
    ASSERT_NO_FATAL_FAILURE(roundTrip(original, loaded));
    const PackageThunk &t = loaded.thunks[0];
    EXPECT_EQ(t.gemm.epilogue, e);
    PkgGemmEpilogueBuffers extra = pkgGemmEpilogueBuffers(e);
    EXPECT_EQ(t.operands.size(), extra.operands());
    EXPECT_EQ(t.results.size(), extra.results());
    if (extra.c)
      EXPECT_EQ(t.operands.back(), 12u);
    if (extra.bias)
      EXPECT_EQ(t.operands[2], 11u);
    if (extra.aux)
      EXPECT_THAT(t.results, ::testing::ElementsAre(3u, 13u));
    if (extra.auxInput)
      EXPECT_THAT(t.operands, ::testing::ElementsAre(0u, 1u, 13u));
    EXPECT_TRUE(loaded == original);
  }
}

// Version 1.2's attention layout: packed thunks come back packed, with
// their one qkv operand and one dqkv result; BHTD (the default, so not
// written) comes back BHTD.
TEST(PackageRoundTrip, AttentionLayoutSurvives) {
  LoadedPackage original = makeSamplePackage();
  kiln::runtime::testing::addPackedAttention(original);
  LoadedPackage loaded;
  ASSERT_NO_FATAL_FAILURE(roundTrip(original, loaded));
  ASSERT_EQ(loaded.thunks.size(), 8u);
  EXPECT_EQ(loaded.thunks[5].attention.layout, AttentionLayout::BHTD);
  for (size_t i : {6, 7}) {
    const PackageThunk &t = loaded.thunks[i];
    EXPECT_EQ(t.attention.layout, AttentionLayout::PackedBTHD);
    EXPECT_EQ(t.attention.qLen, 3);
    EXPECT_EQ(t.attention.headDim, 4);
  }
  EXPECT_THAT(loaded.thunks[6].operands, ::testing::ElementsAre(11u));
  EXPECT_THAT(loaded.thunks[6].results, ::testing::ElementsAre(12u, 13u));
  EXPECT_THAT(loaded.thunks[7].operands,
              ::testing::ElementsAre(11u, 12u, 13u, 14u));
  EXPECT_THAT(loaded.thunks[7].results, ::testing::ElementsAre(15u));
  EXPECT_TRUE(loaded == original);
  // The field takes part in the comparison.
  loaded.thunks[6].attention.layout = AttentionLayout::BHTD;
  EXPECT_FALSE(loaded == original);
}

TEST(PackageRoundTrip, EmptyPackageLoads) {
  LoadedPackage empty, loaded;
  ASSERT_NO_FATAL_FAILURE(roundTrip(empty, loaded));
  EXPECT_TRUE(loaded == empty);
}

TEST(PackageRoundTrip, UnalignedBytesLoad) {
  LoadedPackage original = makeSamplePackage();
  StatusOr<std::vector<uint8_t>> bytes =
      kiln::serialize::writePackage(original);
  ASSERT_TRUE(bytes.isOk()) << bytes.status().message();
  std::vector<uint8_t> shifted(bytes->size() + 1);
  std::copy(bytes->begin(), bytes->end(), shifted.begin() + 1);
  StatusOr<LoadedPackage> loaded =
      loadPackageFromBytes(shifted.data() + 1, bytes->size());
  ASSERT_TRUE(loaded.isOk()) << loaded.status().message();
  EXPECT_TRUE(loaded.value() == original);
}

TEST(PackageRoundTrip, ThroughAFile) {
  std::string path =
      ::testing::TempDir() + "roundtrip_" + std::to_string(getpid()) + ".kpkg";
  LoadedPackage original = makeSamplePackage();
  Status written = kiln::serialize::writePackageFile(original, path);
  ASSERT_TRUE(written.isOk()) << written.message();
  StatusOr<LoadedPackage> loaded = loadPackage(path);
  ASSERT_TRUE(loaded.isOk()) << loaded.status().message();
  EXPECT_TRUE(loaded.value() == original);
  std::remove(path.c_str());
}

TEST(PackageRoundTrip, WriterRefusesAnInvalidPackage) {
  LoadedPackage p = makeSamplePackage();
  p.thunks[1].operands[0] = 41;
  StatusOr<std::vector<uint8_t>> bytes = kiln::serialize::writePackage(p);
  ASSERT_FALSE(bytes.isOk());
  EXPECT_EQ(bytes.status().message(),
            "refusing to write an invalid package: thunk 1: operand 0 names "
            "buffer 41, but the package has 11 buffers");
}

// ZeRO shard layouts (kiln-distribute zero1/2/3): the sample's parameter
// becomes a 16-element shard input of a 31-element bucket over 2 ranks.
LoadedPackage withShards() {
  LoadedPackage p = makeSamplePackage();
  p.buffers[1].shape = p.buffers[2].shape = {16};
  p.inputs[1].shape = p.outputs[1].shape = {16};
  ShardLayout l;
  l.name = "fc.weight";
  l.length = 31;
  l.worldSize = 2;
  ShardSlot w{"w", 0, {5, 5}, {}};
  w.init.kind = PkgInitKind::GlorotUniform;
  w.init.scale = 1.5;
  w.init.seed = 7;
  l.slots = {w, ShardSlot{"b", 25, {6}, {}}};
  p.metadata.strategy = Strategy::Zero3;
  p.metadata.shards = {l};
  return p;
}

TEST(PackageRoundTrip, ShardLayoutsSurvive) {
  LoadedPackage original = withShards();
  LoadedPackage loaded;
  ASSERT_NO_FATAL_FAILURE(roundTrip(original, loaded));
  EXPECT_TRUE(loaded == original);
  const std::vector<ShardLayout> &shards = loaded.metadata.shards;
  ASSERT_EQ(shards.size(), 1u);
  EXPECT_EQ(shards[0].shardLength(), 16);
  ASSERT_EQ(shards[0].slots.size(), 2u);
  EXPECT_EQ(shards[0].slots[0].init.kind, PkgInitKind::GlorotUniform);
  EXPECT_EQ(shards[0].slots[0].init.seed, 7);
  EXPECT_EQ(shards[0].slots[1].offset, 25);
  EXPECT_THAT(shards[0].slots[1].shape, ::testing::ElementsAre(6));
}

TEST(PackageRoundTrip, BadShardLayoutsAreRefused) {
  LoadedPackage p = withShards();
  p.metadata.shards[0].worldSize = 4; // shards of 8, the input holds 16
  EXPECT_EQ(checkPackage(p).message(),
            "metadata: shard layout 'fc.weight' (31 elements over 4 ranks) "
            "needs an input of that name with shape [8]");
  p = withShards();
  p.metadata.shards[0].name = "nope";
  EXPECT_FALSE(checkPackage(p).isOk());
  p = withShards();
  p.metadata.shards[0].slots[1].offset = 24;
  EXPECT_EQ(checkPackage(p).message(),
            "metadata: shard layout 'fc.weight': slot 'b' starts at 24, "
            "expected 25");
  p = withShards();
  p.metadata.shards[0].slots[1].shape = {5};
  EXPECT_EQ(checkPackage(p).message(),
            "metadata: shard layout 'fc.weight': its slots hold 30 elements, "
            "expected 31");
}

TEST(PackageRoundTrip, FailedFileWriteKeepsTheOldFile) {
  std::string path =
      ::testing::TempDir() + "keep_" + std::to_string(getpid()) + ".kpkg";
  LoadedPackage original = makeSamplePackage();
  ASSERT_TRUE(kiln::serialize::writePackageFile(original, path).isOk());
  LoadedPackage bad = original;
  bad.metadata.worldSize = 0;
  Status s = kiln::serialize::writePackageFile(bad, path);
  ASSERT_FALSE(s.isOk());
  EXPECT_EQ(s.message(), path + ": refusing to write an invalid package: "
                                "metadata: world size is 0, expected >= 1");
  StatusOr<LoadedPackage> loaded = loadPackage(path);
  ASSERT_TRUE(loaded.isOk()) << loaded.status().message();
  EXPECT_TRUE(loaded.value() == original);
  std::remove(path.c_str());
}

} // namespace
