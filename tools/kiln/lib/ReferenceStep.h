//===- ReferenceStep.h - run a model's step on the reference interpreter -*- C++ -*-===//
//
// What `kiln gradcheck` and `kiln train --backend=reference` share: finding
// the model function, describing its arguments by role, making their
// initial values (parameters from their #kiln.init, optimizer state and the
// step from zeros, data from a generator) and running the step.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TOOLS_KILN_LIB_REFERENCESTEP_H
#define KILN_TOOLS_KILN_LIB_REFERENCESTEP_H

#include "ir/HostTensor.h"
#include "ir/KilnOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"

#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace kiln::cli {

struct ArgumentInfo {
  unsigned index = 0;
  Role role = Role::input;
  std::string name;
  mlir::RankedTensorType type;
  InitializerAttr init; // null when absent
  std::optional<unsigned> copyOf; // kiln.copy_of (a parameter copy)
};

struct ResultInfo {
  unsigned index = 0;
  std::optional<Role> role;
  std::string name;
  std::optional<unsigned> gradOf;  // kiln.grad_of
  std::optional<unsigned> updates; // kiln.updates
};

// The public function that returns a loss; emits an error naming the module
// when there is none or more than one.
mlir::func::FuncOp findModelFunction(mlir::ModuleOp module);

// Whether this machine's memory can hold what the reference interpreter
// needs at least for |func|: every argument, plus its largest value, each
// as f64 (the interpreter's element, 8 bytes whatever the type). Past that
// the first allocation that fails stops the process ("LLVM ERROR: out of
// memory"); here the error names the function, both sizes and the memory.
mlir::LogicalResult checkInterpreterMemory(mlir::func::FuncOp func);

std::vector<ArgumentInfo> describeArguments(mlir::func::FuncOp func);
std::vector<ResultInfo> describeResults(mlir::func::FuncOp func);

// The host tensor of |arg|'s type holding its initial value: the
// initializer's values for parameters, zeros for everything else.
HostTensor initialValue(const ArgumentInfo &arg);

// A parameter copy argument's value (ArgumentInfo::copyOf): |parameter|'s
// values rounded to the copy's element type, as the step's convert would.
HostTensor parameterCopyValue(const ArgumentInfo &copy, const HostTensor &parameter);

// Sets every parameter copy in |values| (one per argument of |args|) from
// its parameter's value there: after initialValue, which leaves copies zero.
void fillParameterCopies(llvm::ArrayRef<ArgumentInfo> args,
                         llvm::MutableArrayRef<HostTensor> values);

// For an integer argument: the exclusive upper bound of valid values, as
// the compiled backends check it (kiln::argumentIndexBound in
// passes/Passes.h: its uses' bound or a smaller stated kiln.index_bound);
// 2 when neither bounds it.
int64_t integerRange(mlir::func::FuncOp func, unsigned argIndex);

// The integerRange of every integer argument of |module|'s model function
// that has a bound, by argument name. Call it on the graph as written or on
// a step compiled from it (which keeps kiln.index_bound): fusion hides the
// uses kiln::indexBound follows.
std::map<std::string, int64_t> labelRanges(mlir::ModuleOp module);

// A tensor of |arg|'s type with random data: normal(0, 1) for floats,
// uniform over [0, integerRange) for integers.
HostTensor randomData(mlir::func::FuncOp func, const ArgumentInfo &arg,
                      std::mt19937_64 &rng);

// When result |lossIndex| of |func| comes from a kiln.softmax_cross_entropy
// (directly or through a few ops that reduce it), appends its predictions
// as a new result, the kiln.argmax of its rank-2 logits' rows (i32, one per
// row: per sample for a classifier, per position for a sequence model),
// and returns that result's index. The eval step computes them where it
// runs, so an eval copies out a row's class, not its logits (a GPT-2's
// 50304 per position).
std::optional<unsigned> exposeCrossEntropyPredictions(mlir::func::FuncOp func,
                                                      unsigned lossIndex);

} // namespace kiln::cli

#endif // KILN_TOOLS_KILN_LIB_REFERENCESTEP_H
