//===- OptimizerFlags.h - optimizer flags shared by compile and train -*- C++ -*-===//
//
// `kiln compile` and `kiln train` take the same flags to override the
// model's training section (#kiln.training); they are declared and checked
// here once and become kiln-apply-optimizer's options.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TOOLS_KILN_LIB_OPTIMIZERFLAGS_H
#define KILN_TOOLS_KILN_LIB_OPTIMIZERFLAGS_H

#include "tools/kiln/lib/Flags.h"

#include "passes/Passes.h"

namespace kiln::cli {

// The flags' raw text; empty means "not given".
struct OptimizerFlags {
  std::string optimizer, lr, momentum, nesterov, weightDecay, clipNorm, beta1,
      beta2, epsilon, schedule, warmupSteps, totalSteps;
};

// Declares the flags on |parser| in a group of their own.
void addOptimizerFlags(FlagParser &parser, OptimizerFlags &flags);

// Checks every given value and stores it in |options|. Prints the first bad
// value ("<command>: error: --lr=x: expected ...") and returns false.
bool parseOptimizerFlags(llvm::StringRef command, const OptimizerFlags &flags,
                         KilnApplyOptimizerOptions &options,
                         llvm::raw_ostream &errs);

// --optimizer=|text| as an optimizer; prints "<command>: error:
// --optimizer=x: expected sgd, momentum, adam or adamw, found 'x'" and
// returns nullopt. `kiln models` and `kiln import` use it too.
std::optional<kiln::OptimizerKind> parseOptimizerKind(llvm::StringRef command,
                                                      const std::string &text,
                                                      llvm::raw_ostream &errs);

} // namespace kiln::cli

#endif // KILN_TOOLS_KILN_LIB_OPTIMIZERFLAGS_H
