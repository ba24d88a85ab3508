//===- AmpFlags.cpp - mixed-precision flags shared by compile and train ---===//

#include "tools/kiln/lib/AmpFlags.h"

#include "runtime/Units.h"

#include "llvm/ADT/SmallVector.h"

namespace kiln::cli {

using runtime::formatBytes;

void addAmpFlags(FlagParser &parser, AmpFlags &f) {
  parser.addValue("amp", &f.amp, "MODE",
                  "mixed precision: off (default), bf16 or fp16 (fp16 adds "
                  "dynamic loss scaling)");
  parser.addValue("amp-allow", &f.allow, "OPS",
                  "with --amp: also compute these ops (comma-separated kiln op "
                  "names) in low precision");
  parser.addValue("amp-deny", &f.deny, "OPS",
                  "with --amp: compute these ops in f32");
  parser.addValue("amp-infer", &f.infer, "OPS",
                  "with --amp: these ops follow their inputs' precision");
  parser.addValue("amp-param-copies", &f.paramCopies, "on|off",
                  "with --amp: keep each f32 parameter's bf16/fp16 copy as "
                  "step state that the optimizer writes, instead of "
                  "converting the parameters every step (default on)");
  parser.addValue("remat", &f.remat, "POLICY",
                  "activation checkpointing: off (default), dots (the "
                  "backward pass recomputes the values it reads but matmul, "
                  "convolution and attention outputs and values several ops "
                  "read) or full (the matmuls too: only values several ops "
                  "read are kept)");
  parser.addValue("remat-scope", &f.rematScope, "REGEX",
                  "with --remat: recompute only values made by ops whose "
                  "node name matches REGEX (say 'blocks\\.[0-5]\\.'; "
                  "default: every op)");
  parser.addValue("memory-budget", &f.memoryBudget, "SIZE",
                  "plan the training step in SIZE (24GiB, 1.5GB: parameters, "
                  "optimizer state, batch and activations, the planned peak "
                  "--report prints) by recomputing the fewest activations, "
                  "the cheapest per byte freed at the peak first, from the "
                  "--remat policy's (full unless given); an error says what "
                  "the step needs when even that does not fit");
}

bool parseAmpFlags(llvm::StringRef command, const AmpFlags &f,
                   PipelineOptions &options, llvm::raw_ostream &errs) {
  if (!f.amp.empty()) {
    std::optional<AmpMode> amp = parseAmp(f.amp);
    if (!amp) {
      printError(errs, command,
                 "--amp=" + f.amp + ": expected off, bf16 or fp16, found '" +
                     f.amp + "'");
      return false;
    }
    options.amp = *amp;
  }
  if (!f.memoryBudget.empty()) {
    std::optional<int64_t> bytes =
        parseByteSize(command, "memory-budget", f.memoryBudget, errs);
    if (!bytes)
      return false;
    if (f.remat == "off") {
      printError(errs, command,
                 "--memory-budget needs a --remat policy to choose what to "
                 "recompute from (dots or full, the default with a budget), "
                 "not --remat=off");
      return false;
    }
    options.memoryBudget = *bytes;
    if (f.remat.empty() && options.remat == "off")
      options.remat = "full";
  }
  llvm::StringRef remat = f.remat.empty() ? llvm::StringRef(options.remat) : f.remat;
  if (std::string problem = checkRematOptions(remat, f.rematScope);
      !problem.empty()) {
    printError(errs, command, problem);
    return false;
  }
  options.remat = remat.str();
  options.rematScope = f.rematScope;
  if (!applyOnOff(command, "amp-param-copies", f.paramCopies,
                  options.parameterCopies, errs))
    return false;
  auto split = [&](const std::string &text, llvm::StringRef flag,
                   std::vector<std::string> &out) {
    out.clear();
    if (text.empty())
      return true;
    llvm::SmallVector<llvm::StringRef> parts;
    llvm::StringRef(text).split(parts, ',');
    for (llvm::StringRef part : parts) {
      part = part.trim();
      if (part.empty()) {
        printError(errs, command,
                   "--" + flag + "=" + text +
                       ": expected comma-separated op names, found an empty one");
        return false;
      }
      out.push_back(part.str());
    }
    return true;
  };
  return split(f.allow, "amp-allow", options.ampAllow) &&
         split(f.deny, "amp-deny", options.ampDeny) &&
         split(f.infer, "amp-infer", options.ampInfer);
}

std::string describeMemoryBudget(const PipelineOptions &options,
                                 const MemoryBudgetOutcome &outcome) {
  if (!outcome.searched)
    return "";
  std::string text = "--memory-budget=" + formatBytes(options.memoryBudget) +
                     ": ";
  // The plan chosen, and the runtime's workspaces, which the budget holds
  // too.
  std::string peak = "planned peak " + formatBytes(outcome.peak);
  if (outcome.workspaces > 0)
    peak += " beside " + formatBytes(outcome.workspaces) +
            " of the runtime's workspaces";
  if (outcome.recomputed == 0)
    return text + "the step fits without recomputing anything (" + peak + ")";
  return text + "--remat=" + outcome.policy + " recomputes " +
         std::to_string(outcome.recomputed) + " of its " +
         std::to_string(outcome.candidates) +
         " values, the cheapest per byte freed at the peak first; " + peak +
         " (" + formatBytes(outcome.peakWithout) + " without; " +
         std::to_string(outcome.compiles) + " compiles)";
}

} // namespace kiln::cli
