//===- CheckpointTest.cpp - training state round trip and resume -----------===//

#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/checkpoint/Safetensors.h"
#include "runtime/data/Sampler.h"
#include "tests/unit/runtime/TestFiles.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

using namespace kiln::runtime;
using kiln::testing::ScratchDir;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

namespace {

TrainingState sampleState() {
  TrainingState s;
  s.parameters = {{"fc1.weight", {2, 2}, {1, 2, 3, 4}},
                  {"fc1.bias", {2}, {-0.5f, 0.25f}}};
  s.optimizer["adam.m"] = {{"fc1.weight", {2, 2}, {0.1f, 0.2f, 0.3f, 0.4f}},
                           {"fc1.bias", {2}, {0, 1}}};
  s.optimizer["adam.v"] = {{"fc1.weight", {2, 2}, {1, 1, 1, 1}}};
  s.rngState = {0xdeadbeefcafef00dULL, 1, 2};
  s.step = 1234;
  s.seed = 0xffffffffffffffffULL;
  s.epoch = 5;
  s.position = 17;
  return s;
}

const NamedTensor *findTensor(const std::vector<NamedTensor> &v,
                              const std::string &name) {
  for (const NamedTensor &t : v)
    if (t.name == name)
      return &t;
  return nullptr;
}

} // namespace

TEST(Checkpoint, RoundTripsTheTrainingState) {
  ScratchDir dir;
  std::string path = dir.file("step.safetensors");
  ASSERT_TRUE(saveCheckpoint(path, sampleState()).isOk());
  auto s = loadCheckpoint(path);
  ASSERT_TRUE(s.isOk()) << s.status().message();
  EXPECT_EQ(s->step, 1234);
  EXPECT_EQ(s->seed, 0xffffffffffffffffULL);
  EXPECT_EQ(s->epoch, 5);
  EXPECT_EQ(s->position, 17);
  EXPECT_THAT(s->rngState, ElementsAre(0xdeadbeefcafef00dULL, 1u, 2u));
  ASSERT_EQ(s->parameters.size(), 2u);
  const NamedTensor *w = findTensor(s->parameters, "fc1.weight");
  ASSERT_NE(w, nullptr);
  EXPECT_THAT(w->shape, ElementsAre(2, 2));
  EXPECT_THAT(w->values.toDoubles(), ElementsAre(1, 2, 3, 4));
  ASSERT_EQ(s->optimizer.size(), 2u);
  const NamedTensor *m = findTensor(s->optimizer["adam.m"], "fc1.bias");
  ASSERT_NE(m, nullptr);
  EXPECT_THAT(m->values.toDoubles(), ElementsAre(0, 1));
  EXPECT_EQ(s->optimizer["adam.v"].size(), 1u);

  // The step and data position are plain metadata in the file.
  auto raw = readSafetensors(path);
  ASSERT_TRUE(raw.isOk());
  EXPECT_EQ(raw->metadata.at("step"), "1234");
  EXPECT_EQ(raw->metadata.at("position"), "17");
  EXPECT_NE(raw->find("optimizer/adam.m/fc1.weight"), nullptr);
}

// f64 state (a model that trains in f64) is saved as F64 and read back
// bit for bit; f32 state stays F32. Values below f32's precision show a
// narrowing anywhere on the way.
TEST(Checkpoint, F64StateKeepsItsPrecision) {
  ScratchDir dir;
  TrainingState s = sampleState();
  std::vector<double> fine = {0.1, 1.0 + 0x1p-40, -1e-300, 3.0};
  s.parameters.push_back({"wide.weight", {2, 2}, fine});
  s.optimizer["adam.m"].push_back(
      {"wide.weight", {2, 2}, std::vector<double>{0.2, 1e-45, 0, 1}});
  std::string path = dir.file("wide.safetensors");
  ASSERT_TRUE(saveCheckpoint(path, s).isOk());
  auto raw = readSafetensors(path);
  ASSERT_TRUE(raw.isOk()) << raw.status().message();
  ASSERT_NE(raw->find("wide.weight"), nullptr);
  EXPECT_EQ(raw->find("wide.weight")->dtype, DType::F64);
  EXPECT_EQ(raw->find("optimizer/adam.m/wide.weight")->dtype, DType::F64);
  EXPECT_EQ(raw->find("fc1.weight")->dtype, DType::F32);
  auto back = loadCheckpoint(path);
  ASSERT_TRUE(back.isOk()) << back.status().message();
  const NamedTensor *w = findTensor(back->parameters, "wide.weight");
  ASSERT_NE(w, nullptr);
  EXPECT_TRUE(w->values.wide());
  EXPECT_THAT(w->values.f64(), ElementsAre(0.1, 1.0 + 0x1p-40, -1e-300, 3.0));
  const NamedTensor *m = findTensor(back->optimizer["adam.m"], "wide.weight");
  ASSERT_NE(m, nullptr);
  EXPECT_THAT(m->values.f64(), ElementsAre(0.2, 1e-45, 0, 1));
  EXPECT_FALSE(findTensor(back->parameters, "fc1.weight")->values.wide());

  // Other dtypes are no checkpoint state.
  SafetensorsFile half = raw.value();
  for (SafeTensor &t : half.tensors)
    if (t.name == "fc1.bias") {
      t.dtype = DType::F16;
      t.data.resize(4);
    }
  ASSERT_TRUE(writeSafetensors(dir.file("half.safetensors"), half).isOk());
  auto refused = loadCheckpoint(dir.file("half.safetensors"));
  ASSERT_FALSE(refused.isOk());
  EXPECT_THAT(refused.status().message(),
              HasSubstr("tensor fc1.bias has dtype F16: expected F32 or F64"));
}

// Values copy between precisions by rounding; slices keep theirs.
TEST(Checkpoint, TensorValuesConvertOnCopy) {
  TensorValues wide(std::vector<double>{1.0 + 0x1p-40, 2, 3});
  TensorValues narrow = TensorValues::zeros(false, 3);
  narrow.copyFrom(wide, 0, 3, 0);
  EXPECT_THAT(narrow.f32(), ElementsAre(1.0f, 2.0f, 3.0f));
  TensorValues back = TensorValues::zeros(true, 4);
  back.copyFrom(wide, 1, 2, 2);
  EXPECT_THAT(back.f64(), ElementsAre(0, 0, 2, 3));
  EXPECT_TRUE(wide.slice(0, 1).wide());
  EXPECT_THAT(wide.slice(0, 1).f64(), ElementsAre(1.0 + 0x1p-40));
}

TEST(Checkpoint, SaveRejectsInconsistentState) {
  ScratchDir dir;
  TrainingState s = sampleState();
  s.parameters[0].values = TensorValues{1, 2, 3}; // its shape is [2, 2]
  Status bad = saveCheckpoint(dir.file("a.safetensors"), s);
  ASSERT_FALSE(bad.isOk());
  EXPECT_THAT(bad.message(), HasSubstr("fc1.weight has 3 values"));
  TrainingState r = sampleState();
  r.parameters.push_back({"optimizer/x", {1}, {0}});
  EXPECT_FALSE(saveCheckpoint(dir.file("b.safetensors"), r).isOk());
  TrainingState slot = sampleState();
  slot.optimizer["a/b"] = {};
  EXPECT_FALSE(saveCheckpoint(dir.file("c.safetensors"), slot).isOk());
}

TEST(Checkpoint, LoadRejectsForeignOrIncompleteFiles) {
  ScratchDir dir;
  SafetensorsFile plain;
  plain.tensors.push_back(SafeTensor::fromF32("w", {1}, {1}));
  ASSERT_TRUE(writeSafetensors(dir.file("plain.safetensors"), plain).isOk());
  auto foreign = loadCheckpoint(dir.file("plain.safetensors"));
  ASSERT_FALSE(foreign.isOk());
  EXPECT_THAT(foreign.status().message(), HasSubstr("format is missing"));

  plain.metadata = {{"format", kCheckpointFormat}, {"step", "12x"},
                    {"seed", "1"}, {"epoch", "0"}, {"position", "0"}};
  plain.tensors.push_back(SafeTensor::fromI64("rng/state", {1}, {3}));
  ASSERT_TRUE(writeSafetensors(dir.file("junk.safetensors"), plain).isOk());
  auto junk = loadCheckpoint(dir.file("junk.safetensors"));
  ASSERT_FALSE(junk.isOk());
  EXPECT_THAT(junk.status().message(),
              HasSubstr("\"step\" is \"12x\": expected a non-negative integer"));

  plain.metadata.erase("step");
  ASSERT_TRUE(writeSafetensors(dir.file("nostep.safetensors"), plain).isOk());
  EXPECT_FALSE(loadCheckpoint(dir.file("nostep.safetensors")).isOk());
  EXPECT_FALSE(loadCheckpoint(dir.file("absent.safetensors")).isOk());
}

// Resuming from a checkpoint's epoch and position visits exactly the
// batches an uninterrupted run would have.
TEST(Checkpoint, ResumeFromDataPositionContinuesTheEpoch) {
  auto ds = SyntheticDataset::create({{"y", ElementType::i32, {}, 5}}, 23, 9);
  ASSERT_TRUE(ds.isOk());
  auto sampler = DistributedSampler::create(23, {1, 2, true, 11, false});
  ASSERT_TRUE(sampler.isOk());
  auto runFrom = [&](int64_t epoch, int64_t first) {
    std::vector<std::vector<int64_t>> out;
    Prefetcher p(*ds.value(), sampler->indices(epoch), 4, false, 2, first);
    Batch b;
    while (p.next(b).value())
      out.push_back(b.samples);
    return out;
  };
  auto full = runFrom(3, 0);
  ASSERT_EQ(full.size(), 3u); // 12 samples per rank, batches of 4

  ScratchDir dir;
  TrainingState s = sampleState();
  s.epoch = 3;
  s.position = 1; // one batch consumed
  ASSERT_TRUE(saveCheckpoint(dir.file("c.safetensors"), s).isOk());
  auto loaded = loadCheckpoint(dir.file("c.safetensors"));
  ASSERT_TRUE(loaded.isOk());
  auto resumed = runFrom(loaded->epoch, loaded->position);
  EXPECT_EQ(resumed, std::vector<std::vector<int64_t>>(full.begin() + 1,
                                                        full.end()));
}
