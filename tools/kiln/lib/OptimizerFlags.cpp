//===- OptimizerFlags.cpp - optimizer flags shared by compile and train ---===//

#include "tools/kiln/lib/OptimizerFlags.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace kiln::cli {
namespace {

// A real number >= |min| (> 0 when |positive|).
bool parseReal(llvm::StringRef command, llvm::StringRef flag,
               const std::string &text, bool positive, double &out,
               llvm::raw_ostream &errs) {
  if (text.empty())
    return true;
  char *end = nullptr;
  errno = 0;
  double v = std::strtod(text.c_str(), &end);
  bool ok = errno == 0 && *end == '\0' && std::isfinite(v) &&
            (positive ? v > 0 : v >= 0);
  if (!ok) {
    printError(errs, command,
               "--" + flag + "=" + text + ": expected a " +
                   (positive ? "positive" : "non-negative") +
                   " real number, found '" + text + "'");
    return false;
  }
  out = v;
  return true;
}

bool parseBeta(llvm::StringRef command, llvm::StringRef flag,
               const std::string &text, double &out, llvm::raw_ostream &errs) {
  if (!parseReal(command, flag, text, false, out, errs))
    return false;
  if (!text.empty() && out >= 1.0) {
    printError(errs, command,
               "--" + flag + "=" + text + ": expected a number in [0, 1), found '" +
                   text + "'");
    return false;
  }
  return true;
}

} // namespace

std::optional<kiln::OptimizerKind> parseOptimizerKind(llvm::StringRef command,
                                                      const std::string &text,
                                                      llvm::raw_ostream &errs) {
  std::optional<kiln::OptimizerKind> kind = symbolizeOptimizerKind(text);
  if (!kind)
    printError(errs, command,
               "--optimizer=" + text +
                   ": expected sgd, momentum, adam or adamw, found '" + text + "'");
  return kind;
}

void addOptimizerFlags(FlagParser &parser, OptimizerFlags &f) {
  parser.addGroup("Optimizer (each flag overrides the model's training section)");
  parser.addValue("optimizer", &f.optimizer, "NAME", "sgd, momentum, adam or adamw");
  parser.addValue("lr", &f.lr, "RATE", "learning rate (the peak, with a schedule)");
  parser.addValue("momentum", &f.momentum, "M",
                  "momentum factor (momentum optimizer; default 0.9)");
  parser.addValue("nesterov", &f.nesterov, "BOOL", "Nesterov momentum: true or false");
  parser.addValue("weight-decay", &f.weightDecay, "WD",
                  "weight decay (decoupled for adamw, L2 otherwise)");
  parser.addValue("clip-norm", &f.clipNorm, "C",
                  "clip the global gradient norm to C (0: off)");
  parser.addValue("beta1", &f.beta1, "B", "Adam's first-moment decay");
  parser.addValue("beta2", &f.beta2, "B", "Adam's second-moment decay");
  parser.addValue("eps", &f.epsilon, "E", "Adam's epsilon");
  parser.addValue("schedule", &f.schedule, "NAME",
                  "learning-rate schedule: constant, warmup_cosine, warmup_linear");
  parser.addValue("warmup-steps", &f.warmupSteps, "N", "linear warm-up steps");
  parser.addValue("total-steps", &f.totalSteps, "N",
                  "steps until the schedule's decay reaches zero");
}

bool parseOptimizerFlags(llvm::StringRef command, const OptimizerFlags &f,
                         KilnApplyOptimizerOptions &o, llvm::raw_ostream &errs) {
  if (!f.optimizer.empty()) {
    if (!parseOptimizerKind(command, f.optimizer, errs))
      return false;
    o.optimizer = f.optimizer;
  }
  if (!f.schedule.empty()) {
    if (!symbolizeLrSchedule(f.schedule)) {
      printError(errs, command,
                 "--schedule=" + f.schedule +
                     ": expected constant, warmup_cosine or warmup_linear, "
                     "found '" + f.schedule + "'");
      return false;
    }
    o.schedule = f.schedule;
  }
  if (!f.nesterov.empty()) {
    if (f.nesterov != "true" && f.nesterov != "false") {
      printError(errs, command,
                 "--nesterov=" + f.nesterov + ": expected true or false, found '" +
                     f.nesterov + "'");
      return false;
    }
    o.nesterov = f.nesterov == "true" ? 1 : 0;
  }
  double lr = o.learningRate, momentum = o.momentum, wd = o.weightDecay,
         clip = o.clipNorm, beta1 = o.beta1, beta2 = o.beta2, eps = o.epsilon;
  if (!parseReal(command, "lr", f.lr, true, lr, errs) ||
      !parseReal(command, "momentum", f.momentum, false, momentum, errs) ||
      !parseReal(command, "weight-decay", f.weightDecay, false, wd, errs) ||
      !parseReal(command, "clip-norm", f.clipNorm, false, clip, errs) ||
      !parseBeta(command, "beta1", f.beta1, beta1, errs) ||
      !parseBeta(command, "beta2", f.beta2, beta2, errs) ||
      !parseReal(command, "eps", f.epsilon, true, eps, errs))
    return false;
  o.learningRate = lr;
  o.momentum = momentum;
  o.weightDecay = wd;
  o.clipNorm = clip;
  o.beta1 = beta1;
  o.beta2 = beta2;
  o.epsilon = eps;
  for (auto [flag, text, out] :
       {std::tuple{"warmup-steps", &f.warmupSteps, &o.warmupSteps},
        std::tuple{"total-steps", &f.totalSteps, &o.totalSteps}}) {
    if (text->empty())
      continue;
    std::optional<int64_t> n = parseInteger(command, flag, *text, 0, errs);
    if (!n)
      return false;
    *out = *n;
  }
  return true;
}

} // namespace kiln::cli
