//===- TrainEval.cpp - `kiln train`'s eval pass ----------------------------===//
//
// The eval pass over --eval-data (loss and accuracy), zero3's parameters for
// the eval step, and the --metrics-file records.
//
//===----------------------------------------------------------------------===//

#include "tools/kiln/lib/TrainEval.h"

#include "tools/kiln/lib/Diagnostics.h"
#include "tools/kiln/lib/TrainFlags.h"

#include "runtime/data/Sampler.h"

#include <algorithm>
#include <cstdio>
#include <numeric>

namespace kiln::cli {
namespace {

std::string jsonNumber(double v) {
  if (!std::isfinite(v))
    return "null";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

} // namespace

std::optional<EvalResult> evaluate(TrainBackend &model, runtime::Dataset &data,
                                   int64_t batch, int64_t subset,
                                   llvm::raw_ostream &errs) {
  EvalResult result;
  int64_t n = data.size();
  if (subset)
    n = std::min(n, subset);
  std::vector<int64_t> indices(n);
  std::iota(indices.begin(), indices.end(), 0);
  bool padLast = model.evalHasPredictions();
  runtime::Prefetcher batches(data, indices, batch,
                              /*dropPartial=*/!padLast);
  double lossSum = 0;
  int64_t correct = 0, batchesSeen = 0, samplesCounted = 0, rowsCounted = 0;
  bool counted = false; // predictions of one row per label were compared
  // The labels are the last data tensor.
  std::optional<size_t> labelTensor;
  for (size_t t = 0; t < model.evalSpecs().size(); ++t)
    if (model.evalSpecs()[t].type == runtime::ElementType::i32)
      labelTensor = t;
  runtime::Batch b;
  EvalOutput out;
  while (true) {
    runtime::StatusOr<bool> more = batches.next(b);
    if (!more.isOk()) {
      printError(errs, trainCommand(), "--eval-data: " + more.status().message());
      return std::nullopt;
    }
    if (!more.value())
      break;
    int64_t valid = static_cast<int64_t>(b.samples.size());
    if (valid < batch) {
      // Pad every tensor to |batch| rows with its last row.
      for (runtime::BatchTensor &t : b.tensors) {
        auto pad = [&](auto &v) {
          size_t rowSize = v.size() / valid;
          for (int64_t r = valid; r < batch; ++r)
            v.insert(v.end(), v.end() - rowSize, v.end());
        };
        if (t.type == runtime::ElementType::f32)
          pad(t.f32);
        else if (t.type == runtime::ElementType::f64)
          pad(t.f64);
        else
          pad(t.i32);
        t.shape[0] = batch;
      }
    }
    if (!model.evaluate(b, out, errs))
      return std::nullopt;
    if (valid == batch) {
      lossSum += out.loss;
      ++batchesSeen;
    }
    // Each sample holds rows / batch rows (one for a classifier, one per
    // position for a sequence model): a valid sample's rows all count.
    int64_t rows = static_cast<int64_t>(out.predictions.size());
    if (rows && labelTensor && rows % batch == 0) {
      const std::vector<int32_t> &labels = b.tensors[*labelTensor].i32;
      if (rows != static_cast<int64_t>(labels.size()))
        continue;
      counted = true;
      result.perToken = rows > batch;
      samplesCounted += valid;
      int64_t counting = valid * (rows / batch);
      rowsCounted += counting;
      for (int64_t r = 0; r < counting; ++r)
        correct += out.predictions[r] == labels[r];
    }
  }
  result.samples = counted ? samplesCounted : batchesSeen * batch;
  if (batchesSeen)
    result.loss = lossSum / batchesSeen;
  if (counted && rowsCounted)
    result.accuracy = static_cast<double>(correct) / rowsCounted;
  return result;
}

bool gatherEvalParameters(TrainBackend &model, TrainState &state,
                          bool evaluating, llvm::raw_ostream &errs) {
  for (size_t i = 0; i < state.size(); ++i) {
    std::vector<runtime::NamedTensor> full;
    if (!state.gatherParameters(i, full, errs))
      return false;
    for (const runtime::NamedTensor &t : full) {
      std::string error;
      if (evaluating && !model.setEvalParameter(t.name, t.values, error)) {
        printError(errs, trainCommand(), "eval: parameter '" + t.name + "' " + error);
        return false;
      }
    }
  }
  return true;
}

void writeMetricsRecord(llvm::raw_ostream &metrics, int64_t step, int64_t epoch,
                        const std::optional<EvalResult> &eval,
                        double trainLoss, double samplesPerSecond) {
  metrics << "{\"step\": " << step << ", \"epoch\": " << epoch
          << ", \"loss\": " << jsonNumber(eval ? eval->loss : trainLoss)
          << ", \"test_accuracy\": " << jsonNumber(eval ? eval->accuracy : NAN);
  if (eval && eval->perToken)
    metrics << ", \"perplexity\": " << jsonNumber(eval->perplexity());
  metrics << ", \"train_loss\": " << jsonNumber(trainLoss)
          << ", \"eval\": " << (eval ? "true" : "false")
          << ", \"samples_per_second\": " << jsonNumber(samplesPerSecond)
          << "}\n";
  metrics.flush();
}

} // namespace kiln::cli
