//===- DistFlags.cpp - distribution flags shared by compile and train -----===//

#include "tools/kiln/lib/DistFlags.h"

namespace kiln::cli {

void addDistFlags(FlagParser &parser, DistFlags &f,
                  llvm::StringRef worldSizeHelp) {
  parser.addValue("strategy", &f.strategy, "NAME",
                  "none (default), data-parallel or mirrored (kiln train: "
                  "--devices replicas in one process); zero1 (sharded "
                  "optimizer state), zero2 (+ gradients), zero3 (+ "
                  "parameters; docs/distributed.md has the memory per "
                  "rank); parameter-server, pipeline, tensor-parallel: not "
                  "supported yet");
  parser.addValue("world-size", &f.worldSize, "N", worldSizeHelp);
  parser.addValue("bucket-mb", &f.bucketMb, "MB",
                  "data-parallel: all-reduce gradients in buckets of MB "
                  "megabytes after a first 1 MB bucket (default 25); zero1-3 "
                  "shard the same buckets");
  parser.addValue("grad-accum", &f.gradAccum, "K",
                  "gradient accumulation: each step runs K micro-batches "
                  "of the model's batch (K*B samples per rank), averages "
                  "their gradients and reduces them across ranks once "
                  "(default 1)");
  parser.addValue("grad-compression", &f.gradCompression, "P",
                  "data-parallel: all-reduce the gradients in bf16 or fp16 "
                  "(default none: their own precision)");
  parser.addSwitch("sync-batch-norm", &f.syncBatchNorm,
                   "with a --strategy: batch norms normalize with the "
                   "global batch's statistics, gathered across ranks "
                   "(PyTorch's SyncBatchNorm; default: each rank's own)");
}

bool parseDistFlags(llvm::StringRef command, const DistFlags &f,
                    PipelineOptions &options, llvm::raw_ostream &errs) {
  if (!f.strategy.empty()) {
    std::optional<Strategy> strategy = parseStrategy(f.strategy);
    if (!strategy) {
      printError(errs, command,
                 "--strategy=" + f.strategy +
                     ": expected none, mirrored, data-parallel, zero1, zero2, "
                     "zero3, parameter-server, pipeline or tensor-parallel, "
                     "found '" + f.strategy + "'");
      return false;
    }
    options.strategy = *strategy;
  }
  if (!f.worldSize.empty()) {
    std::optional<int64_t> n =
        parseInteger(command, "world-size", f.worldSize, 1, errs);
    if (!n)
      return false;
    options.worldSize = *n;
  }
  if (!f.bucketMb.empty()) {
    std::optional<double> mb =
        parsePositiveReal(command, "bucket-mb", f.bucketMb, errs);
    if (!mb)
      return false;
    options.bucketMb = *mb;
  }
  if (!f.gradAccum.empty()) {
    std::optional<int64_t> k =
        parseInteger(command, "grad-accum", f.gradAccum, 1, errs);
    if (!k)
      return false;
    options.gradAccum = *k;
  }
  if (!f.gradCompression.empty()) {
    if (f.gradCompression != "none" && f.gradCompression != "bf16" &&
        f.gradCompression != "fp16") {
      printError(errs, command,
                 "--grad-compression=" + f.gradCompression +
                     ": expected none, bf16 or fp16, found '" +
                     f.gradCompression + "'");
      return false;
    }
    options.gradCompression = f.gradCompression;
  }
  options.syncBatchNorm = f.syncBatchNorm;
  return true;
}

} // namespace kiln::cli
