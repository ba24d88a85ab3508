//===- AmpFlags.h - mixed-precision flags shared by compile and train -*- C++ -*-===//
//
// `kiln compile`, `kiln train` and `kiln pack` take the same --amp flags,
// and --remat (the other trade of the step's numbers' form for memory);
// they are declared and checked here once and become PipelineOptions'
// amp fields (kiln-auto-mixed-precision's options) and remat
// (kiln-autodiff's).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TOOLS_KILN_LIB_AMPFLAGS_H
#define KILN_TOOLS_KILN_LIB_AMPFLAGS_H

#include "tools/kiln/lib/Flags.h"

#include "passes/Pipelines.h"

namespace kiln::cli {

// The flags' raw text; empty means "not given".
struct AmpFlags {
  std::string amp, allow, deny, infer, paramCopies, remat, rematScope,
      memoryBudget;
};

// Declares --amp, --amp-allow, --amp-deny, --amp-infer,
// --amp-param-copies, --remat, --remat-scope and --memory-budget on
// |parser|.
void addAmpFlags(FlagParser &parser, AmpFlags &flags);

// Checks the values and stores them in |options|. Prints the first bad
// value ("<command>: error: --amp=x: expected ...") and returns false.
bool parseAmpFlags(llvm::StringRef command, const AmpFlags &flags,
                   PipelineOptions &options, llvm::raw_ostream &errs);

// What the compile under --memory-budget chose, a line without its
// command ("--memory-budget=2.00 GiB: ..."); "" when no budget applied.
std::string describeMemoryBudget(const PipelineOptions &options,
                                 const MemoryBudgetOutcome &outcome);

} // namespace kiln::cli

#endif // KILN_TOOLS_KILN_LIB_AMPFLAGS_H
