//===- TrainEval.h - `kiln train`'s eval pass -----------------------*- C++ -*-===//
//
// After each epoch (and at the end) `kiln train` runs the forward model on
// --eval-data: the mean loss and, when the loss comes from
// kiln.softmax_cross_entropy, the accuracy of its predictions over every
// row it scores (a classifier's samples; each position of a sequence
// model's samples: next-token accuracy). The result is printed and
// appended to --metrics-file as one JSON object.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TOOLS_KILN_LIB_TRAINEVAL_H
#define KILN_TOOLS_KILN_LIB_TRAINEVAL_H

#include "tools/kiln/lib/TrainBackend.h"
#include "tools/kiln/lib/TrainCheckpoint.h"

#include "runtime/data/Dataset.h"

#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <cstdint>
#include <optional>

namespace kiln::cli {

struct EvalResult {
  double loss = NAN;
  double accuracy = NAN; // NaN when the model exposes no predictions
  int64_t samples = 0;
  // A sequence model (a prediction per position, as a GPT's next token):
  // the loss is the mean cross-entropy per token, and its perplexity,
  // exp(loss), is reported beside it.
  bool perToken = false;
  double perplexity() const { return perToken ? std::exp(loss) : NAN; }
};

// Runs the forward model over the first |subset| samples of |data| (0: all),
// in order, |batch| rows at a time (one micro-batch). With predictions
// every sample counts for the accuracy: a last partial batch is padded with
// copies of its last sample, whose rows are not counted. The loss is the
// mean over whole batches (the step's loss is a batch mean, which padding
// would skew), so without logits a partial batch is dropped. Prints the
// problem and returns std::nullopt.
std::optional<EvalResult> evaluate(TrainBackend &model, runtime::Dataset &data,
                                   int64_t batch, int64_t subset,
                                   llvm::raw_ostream &errs);

// zero3: every rank gathers the parameters, which the step holds as shards
// only, and the eval step of |model| gets them when |evaluating| (rank 0).
// A collective: every rank calls it. Prints the problem and fails.
bool gatherEvalParameters(TrainBackend &model, TrainState &state,
                          bool evaluating, llvm::raw_ostream &errs);

// Appends one eval's JSON line to |metrics| (the eval's loss and accuracy
// when it ran, else the train loss; null for what is not a number).
void writeMetricsRecord(llvm::raw_ostream &metrics, int64_t step, int64_t epoch,
                        const std::optional<EvalResult> &eval,
                        double trainLoss, double samplesPerSecond);

} // namespace kiln::cli

#endif // KILN_TOOLS_KILN_LIB_TRAINEVAL_H
