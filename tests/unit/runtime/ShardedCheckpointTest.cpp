//===- ShardedCheckpointTest.cpp - ZeRO checkpoints: index and resharding ---===//

#include "runtime/checkpoint/Sharded.h"
#include "runtime/Files.h"
#include "tests/unit/runtime/TestFiles.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <map>

using namespace kiln::runtime;
using kiln::testing::ScratchDir;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

namespace {

// Two parameters, 5 + 2 = 7 elements: over 2 ranks a shard holds 4 (one
// element of padding), over 3 ranks 3 (two of padding).
ShardedBucket sampleBucket() {
  ShardedBucket b;
  b.name = "zero.bucket0";
  b.length = 7;
  b.params = {{"w", 0, {5}}, {"b", 5, {2}}};
  return b;
}

std::map<std::string, NamedTensor> fullTensors() {
  return {{"w", {"w", {5}, {1, 2, 3, 4, 5}}}, {"b", {"b", {2}, {6, 7}}}};
}

TensorValues block(const ShardedBucket &b, int rank, int world,
                   const std::map<std::string, NamedTensor> &full) {
  auto out = shardBlock(
      b, rank, world,
      [&](const std::string &name) -> const NamedTensor * {
        auto it = full.find(name);
        return it == full.end() ? nullptr : &it->second;
      },
      "test");
  EXPECT_TRUE(out.isOk()) << out.status().message();
  return out.isOk() ? out.value() : TensorValues();
}

// Rank r's state of a ZeRO run: its parameter block and an optimizer slot
// "exp_avg" holding the block times 10; rank 0 also a replicated tensor.
TrainingState rankState(const ShardedBucket &b, int rank, int world) {
  TrainingState s;
  TensorValues p = block(b, rank, world, fullTensors());
  TensorValues m = p;
  for (int64_t i = 0; i < m.size(); ++i)
    m.set(i, p[i] * 10);
  int64_t per = shardLength(b.length, world);
  s.parameters.push_back({b.name, {per}, p});
  s.optimizer["exp_avg"].push_back({b.name, {per}, m});
  if (rank == 0)
    s.parameters.push_back({"other", {1}, {42}});
  s.step = 10;
  return s;
}

} // namespace

TEST(ShardedCheckpoint, BlocksArePaddedSlicesOfTheFlatBucket) {
  ShardedBucket b = sampleBucket();
  EXPECT_THAT(block(b, 0, 2, fullTensors()).toDoubles(),
              ElementsAre(1, 2, 3, 4));
  EXPECT_THAT(block(b, 1, 2, fullTensors()).toDoubles(),
              ElementsAre(5, 6, 7, 0));
  EXPECT_THAT(block(b, 2, 3, fullTensors()).toDoubles(), ElementsAre(7, 0, 0));
  EXPECT_THAT(block(b, 0, 1, fullTensors()).toDoubles(),
              ElementsAre(1, 2, 3, 4, 5, 6, 7));
}

TEST(ShardedCheckpoint, MissingOrWrongSizedParameterIsNamed) {
  ShardedBucket b = sampleBucket();
  auto full = fullTensors();
  full.erase("b");
  auto none = shardBlock(
      b, 0, 2,
      [&](const std::string &name) -> const NamedTensor * {
        auto it = full.find(name);
        return it == full.end() ? nullptr : &it->second;
      },
      "ckpt");
  ASSERT_FALSE(none.isOk());
  EXPECT_THAT(none.status().message(), HasSubstr("ckpt: no 'b'"));
  NamedTensor shortW{"w", {4}, {1, 2, 3, 4}};
  auto wrong = shardBlock(
      b, 0, 2, [&](const std::string &) { return &shortW; }, "ckpt");
  ASSERT_FALSE(wrong.isOk());
  EXPECT_THAT(wrong.status().message(),
              HasSubstr("'w' holds 4 values, expected 5"));
}

TEST(ShardedCheckpoint, IndexRoundTrips) {
  ShardedIndex index;
  index.step = 10;
  index.worldSize = 2;
  index.files = {shardFileName(10, 0, 2), shardFileName(10, 1, 2)};
  index.buckets = {sampleBucket()};
  EXPECT_EQ(index.files[1], "step-10.rank-1-of-2.safetensors");
  EXPECT_EQ(shardIndexFileName(10), "step-10.index.json");
  EXPECT_TRUE(isShardIndexName("step-10.index.json"));
  EXPECT_FALSE(isShardIndexName("step-10.safetensors"));
  auto parsed = parseShardIndex(writeShardIndex(index), "i.json");
  ASSERT_TRUE(parsed.isOk()) << parsed.status().message();
  EXPECT_EQ(parsed->step, 10);
  EXPECT_EQ(parsed->worldSize, 2);
  EXPECT_EQ(parsed->files, index.files);
  ASSERT_EQ(parsed->buckets.size(), 1u);
  EXPECT_EQ(parsed->buckets[0].length, 7);
  ASSERT_EQ(parsed->buckets[0].params.size(), 2u);
  EXPECT_EQ(parsed->buckets[0].params[1].name, "b");
  EXPECT_EQ(parsed->buckets[0].params[1].offset, 5);
  EXPECT_THAT(parsed->buckets[0].params[1].shape, ElementsAre(2));
}

TEST(ShardedCheckpoint, MismatchedIndexIsRefused) {
  ShardedIndex index;
  index.worldSize = 2;
  index.files = {"a.safetensors"}; // one file for two ranks
  auto few = parseShardIndex(writeShardIndex(index), "i.json");
  ASSERT_FALSE(few.isOk());
  EXPECT_THAT(few.status().message(),
              HasSubstr("i.json: expected \"files\": one file name per rank (2)"));
  index.files = {"a", "b"};
  ShardedBucket b = sampleBucket();
  b.length = 8; // the parameters hold 7
  index.buckets = {b};
  auto len = parseShardIndex(writeShardIndex(index), "i.json");
  ASSERT_FALSE(len.isOk());
  EXPECT_THAT(len.status().message(),
              HasSubstr("bucket 'zero.bucket0' to hold 8 elements, its "
                        "parameters hold 7"));
  EXPECT_FALSE(parseShardIndex("{}", "i.json").isOk());
}

// Saved by 2 ranks, consolidated, and resharded for 3: the blocks are those
// of the original full tensors.
TEST(ShardedCheckpoint, ConsolidatesAndReshards) {
  ShardedBucket b = sampleBucket();
  ShardedIndex index;
  index.step = 10;
  index.worldSize = 2;
  index.files = {"r0", "r1"};
  index.buckets = {b};
  auto full = consolidateShards(index, {rankState(b, 0, 2), rankState(b, 1, 2)},
                                "i.json");
  ASSERT_TRUE(full.isOk()) << full.status().message();
  std::map<std::string, NamedTensor> params;
  for (const NamedTensor &t : full->parameters)
    params[t.name] = t;
  ASSERT_EQ(params.size(), 3u); // other, w, b
  EXPECT_THAT(params["w"].values.toDoubles(), ElementsAre(1, 2, 3, 4, 5));
  EXPECT_THAT(params["w"].shape, ElementsAre(5));
  EXPECT_THAT(params["b"].values.toDoubles(), ElementsAre(6, 7));
  EXPECT_THAT(params["other"].values.toDoubles(), ElementsAre(42));
  ASSERT_EQ(full->optimizer["exp_avg"].size(), 2u);
  std::map<std::string, NamedTensor> m;
  for (const NamedTensor &t : full->optimizer["exp_avg"])
    m[t.name] = t;
  EXPECT_THAT(m["b"].values.toDoubles(), ElementsAre(60, 70));
  EXPECT_EQ(full->step, 10);
  EXPECT_THAT(block(b, 1, 3, params).toDoubles(), ElementsAre(4, 5, 6));
  EXPECT_THAT(block(b, 1, 3, m).toDoubles(), ElementsAre(40, 50, 60));
}

// Over a base block (--init-from with --init-strict=off), a parameter the
// lookup lacks keeps the base's values; the others are cut in as usual.
TEST(ShardedCheckpoint, ABaseBlockKeepsWhatTheLookupLacks) {
  ShardedBucket b = sampleBucket();
  std::map<std::string, NamedTensor> onlyW = {{"w", fullTensors()["w"]}};
  // Over 2 ranks, rank 1 holds w[4], b[0], b[1] and one element of padding.
  TensorValues base = {-1, -2, -3, -4};
  auto out = shardBlock(
      b, 1, 2,
      [&](const std::string &name) -> const NamedTensor * {
        auto it = onlyW.find(name);
        return it == onlyW.end() ? nullptr : &it->second;
      },
      "test", &base);
  ASSERT_TRUE(out.isOk()) << out.status().message();
  EXPECT_THAT(out.value().toDoubles(), ElementsAre(5, -2, -3, -4));
  TensorValues wrong = {0};
  auto bad = shardBlock(
      b, 1, 2, [&](const std::string &) -> const NamedTensor * { return nullptr; },
      "test", &wrong);
  ASSERT_FALSE(bad.isOk());
  EXPECT_THAT(bad.status().message(),
              HasSubstr("test: the block of zero.bucket0 holds 1 values, expected 4"));
}

// f64 state keeps its precision through blocks and their consolidation.
TEST(ShardedCheckpoint, F64BlocksStayF64) {
  ShardedBucket b = sampleBucket();
  double tiny = 0x1p-40;
  std::map<std::string, NamedTensor> wide = {
      {"w", {"w", {5}, std::vector<double>{1 + tiny, 2, 3, 4, 5 + tiny}}},
      {"b", {"b", {2}, std::vector<double>{6, 7 + 4 * tiny}}}};
  TensorValues r0 = block(b, 0, 2, wide), r1 = block(b, 1, 2, wide);
  ASSERT_TRUE(r0.wide() && r1.wide());
  EXPECT_THAT(r1.f64(), ElementsAre(5 + tiny, 6, 7 + 4 * tiny, 0));
  ShardedIndex index;
  index.step = 10;
  index.worldSize = 2;
  index.files = {"r0", "r1"};
  index.buckets = {b};
  TrainingState s0, s1;
  s0.parameters.push_back({b.name, {4}, r0});
  s1.parameters.push_back({b.name, {4}, r1});
  auto full = consolidateShards(index, {s0, s1}, "i.json");
  ASSERT_TRUE(full.isOk()) << full.status().message();
  for (const NamedTensor &t : full->parameters) {
    ASSERT_TRUE(t.values.wide()) << t.name;
    EXPECT_EQ(t.values.f64(), wide[t.name].values.f64()) << t.name;
  }
  // One f64 parameter makes the block f64; the f32 one is widened exactly.
  wide["b"].values = TensorValues{6, 7};
  TensorValues mixed = block(b, 1, 2, wide);
  EXPECT_TRUE(mixed.wide());
  EXPECT_THAT(mixed.f64(), ElementsAre(5 + tiny, 6, 7, 0));
}

TEST(ShardedCheckpoint, MissingShardIsNamed) {
  ShardedBucket b = sampleBucket();
  ShardedIndex index;
  index.worldSize = 2;
  index.files = {"r0.safetensors", "r1.safetensors"};
  index.buckets = {b};
  TrainingState r1 = rankState(b, 1, 2);
  r1.optimizer.clear();
  auto full = consolidateShards(index, {rankState(b, 0, 2), r1}, "i.json");
  ASSERT_FALSE(full.isOk());
  EXPECT_THAT(full.status().message(),
              HasSubstr("i.json: r1.safetensors has no optimizer state "
                        "'exp_avg' of shard 'zero.bucket0'"));
}

TEST(ShardedCheckpoint, MissingRankFileIsNamed) {
  ScratchDir dir;
  ShardedBucket b = sampleBucket();
  ShardedIndex index;
  index.step = 10;
  index.worldSize = 2;
  index.files = {shardFileName(10, 0, 2), shardFileName(10, 1, 2)};
  index.buckets = {b};
  ASSERT_TRUE(saveCheckpoint(dir.file(index.files[0]), rankState(b, 0, 2)).isOk());
  std::string indexPath = dir.file(shardIndexFileName(10));
  ASSERT_TRUE(writeFileAtomically(indexPath, writeShardIndex(index)).isOk());
  auto missing = loadShardedCheckpoint(indexPath);
  ASSERT_FALSE(missing.isOk());
  EXPECT_THAT(missing.status().message(), HasSubstr("rank 1 of 2"));
  EXPECT_THAT(missing.status().message(),
              HasSubstr("step-10.rank-1-of-2.safetensors"));
  ASSERT_TRUE(saveCheckpoint(dir.file(index.files[1]), rankState(b, 1, 2)).isOk());
  auto loaded = loadShardedCheckpoint(indexPath);
  ASSERT_TRUE(loaded.isOk()) << loaded.status().message();
  EXPECT_EQ(loaded->parameters.size(), 3u);
}
