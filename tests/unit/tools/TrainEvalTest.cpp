//===- TrainEvalTest.cpp - kiln train's eval pass counts every row --------===//
//
// tools/kiln/lib/TrainEval.h's evaluate() on a backend whose predictions
// are right exactly where the test says: the accuracy counts every row the
// cross-entropy scores (each position of a sequence model's samples, not
// only as many rows as there are samples), leaves out a padded last
// batch's copies, and reports samples, not rows.
//
//===----------------------------------------------------------------------===//

#include "tools/kiln/lib/TrainEval.h"

#include "runtime/data/Dataset.h"

#include <gtest/gtest.h>

namespace kiln::cli {
namespace {

// Evaluates a sequence model of |seq| positions per sample: each eval batch
// predicts its labels at positions >= |firstRight| and a wrong class
// before them; the loss is the batch's first label.
class PositionBackend : public TrainBackend {
public:
  PositionBackend(int64_t batch, int64_t seq, int64_t firstRight)
      : batch_(batch), seq_(seq), firstRight_(firstRight) {
    specs_.push_back({"tokens", runtime::ElementType::i32, {seq}, 7});
    specs_.push_back({"targets", runtime::ElementType::i32, {seq}, 7});
  }
  const char *name() const override { return "positions"; }
  int64_t batch() const override { return batch_; }
  const std::vector<runtime::TensorSpec> &dataSpecs() const override {
    return specs_;
  }
  const std::vector<runtime::TensorSpec> &evalSpecs() const override {
    return specs_;
  }
  bool hasEval() const override { return true; }
  bool evalHasPredictions() const override { return true; }
  const std::vector<StateEntry> &state() const override { return state_; }
  runtime::TensorValues readState(size_t) const override {
    return runtime::TensorValues::zeros(false, 0);
  }
  bool writeState(size_t, const runtime::TensorValues &,
                  std::string &) override {
    return true;
  }
  void setStepCounter(int64_t) override {}
  bool step(const runtime::Batch &, double &, llvm::raw_ostream &) override {
    return false;
  }
  bool evaluate(const runtime::Batch &batch, EvalOutput &out,
                llvm::raw_ostream &) override {
    const std::vector<int32_t> &labels = batch.tensors[1].i32;
    EXPECT_EQ(int64_t(labels.size()), batch_ * seq_);
    out.loss = labels[0];
    out.predictions.clear();
    for (size_t r = 0; r < labels.size(); ++r)
      out.predictions.push_back(
          int64_t(r) % seq_ >= firstRight_ ? labels[r] : (labels[r] + 1) % 7);
    ++evaluations;
    return true;
  }
  int evaluations = 0;

private:
  int64_t batch_, seq_, firstRight_;
  std::vector<runtime::TensorSpec> specs_;
  std::vector<StateEntry> state_;
};

TEST(TrainEval, AccuracyCountsEveryPositionOfEverySample) {
  // 5 samples of 4 positions in batches of 2: two whole batches and one of
  // a sample padded to 2. Right at positions 1, 2 and 3: 15 of 20 rows.
  PositionBackend model(/*batch=*/2, /*seq=*/4, /*firstRight=*/1);
  auto data = runtime::SyntheticDataset::create(model.evalSpecs(), 5, 11);
  ASSERT_TRUE(data.isOk()) << data.status().message();
  std::string errors;
  llvm::raw_string_ostream errs(errors);
  std::optional<EvalResult> result =
      evaluate(model, *data.value(), model.batch(), 0, errs);
  ASSERT_TRUE(result) << errors;
  EXPECT_EQ(model.evaluations, 3);
  EXPECT_EQ(result->samples, 5);
  EXPECT_DOUBLE_EQ(result->accuracy, 15.0 / 20.0);

  // A classifier's one row per sample (every row at position 0): all
  // wrong from position 1 on, all right from 0.
  PositionBackend wrong(2, 1, 1), right(2, 1, 0);
  auto rows = runtime::SyntheticDataset::create(wrong.evalSpecs(), 5, 12);
  ASSERT_TRUE(rows.isOk());
  result = evaluate(wrong, *rows.value(), 2, 0, errs);
  ASSERT_TRUE(result) << errors;
  EXPECT_EQ(result->samples, 5);
  EXPECT_DOUBLE_EQ(result->accuracy, 0.0);
  result = evaluate(right, *rows.value(), 2, 0, errs);
  ASSERT_TRUE(result) << errors;
  EXPECT_DOUBLE_EQ(result->accuracy, 1.0);
}

} // namespace
} // namespace kiln::cli
