//===- DistFlags.h - distribution flags shared by compile and train -*- C++ -*-===//
//
// `kiln compile` and `kiln train` take the same distribution flags
// (--strategy, --world-size, --bucket-mb, --grad-accum, --grad-compression,
// --sync-batch-norm);
// they are declared and checked here once and become PipelineOptions'
// strategy fields (kiln-distribute's options). What the pipeline cannot do
// yet is refused later, by checkPipelineOptions, naming the flag.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TOOLS_KILN_LIB_DISTFLAGS_H
#define KILN_TOOLS_KILN_LIB_DISTFLAGS_H

#include "tools/kiln/lib/Flags.h"

#include "passes/Pipelines.h"

namespace kiln::cli {

// The flags' raw text; empty means "not given".
struct DistFlags {
  std::string strategy, worldSize, bucketMb, gradAccum, gradCompression;
  bool syncBatchNorm = false;
};

// Declares the flags on |parser|; |worldSizeHelp| says what the default is.
void addDistFlags(FlagParser &parser, DistFlags &flags,
                  llvm::StringRef worldSizeHelp);

// Checks the values and stores them in |options|. Prints the first bad
// value ("<command>: error: --strategy=x: expected ...") and returns false.
bool parseDistFlags(llvm::StringRef command, const DistFlags &flags,
                    PipelineOptions &options, llvm::raw_ostream &errs);

} // namespace kiln::cli

#endif // KILN_TOOLS_KILN_LIB_DISTFLAGS_H
