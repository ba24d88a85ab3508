//===- Passes.h - kiln passes -------------------------------------*- C++ -*-===//

#ifndef KILN_PASSES_PASSES_H
#define KILN_PASSES_PASSES_H

#include "ir/KilnDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace kiln {

// Scheduling rules kiln-distribute puts on collectives for kiln-schedule
// (passes/Schedule.cpp; docs/distributed.md, "Scheduling the collectives").
// Without either, a collective is issued as soon as its inputs exist.
//  - kiln.prefetch = D (i64, on an all_gather): among the collectives that
//    carry it, in order, the k-th is issued only after every use of the
//    (k-1-D)-th: at most D + 1 gathered buffers in use or in flight.
//  - kiln.issue_together (unit): the collectives that carry it are issued
//    only once the inputs of all of them exist (zero1's reduce-scatters
//    after the whole backward pass).
inline constexpr llvm::StringLiteral kPrefetchAttrName = "kiln.prefetch";
inline constexpr llvm::StringLiteral kIssueTogetherAttrName =
    "kiln.issue_together";

// The bound argument |argIndex| of |func| is read under as indices (the
// smallest of its uses' table rows, scatter slices and cross-entropy
// classes; see kiln-mark-index-bounds), or nullopt when no use bounds it.
std::optional<int64_t> indexBound(mlir::func::FuncOp func, unsigned argIndex);
// The bound argument |argIndex| of |func| is checked against, as
// kiln-mark-index-bounds leaves its kiln.index_bound: indexBound when it is
// at least 1, or a smaller kiln.index_bound the model states; a stated one
// alone; nullopt when neither bounds it.
std::optional<int64_t> argumentIndexBound(mlir::func::FuncOp func,
                                          unsigned argIndex);
// Sets kiln.index_bound to argumentIndexBound on each integer input and
// label argument of |func| that has one: what kiln-mark-index-bounds does to
// every public function.
void markIndexBounds(mlir::func::FuncOp func);

// The value of every element of |v| when it is a float constant with all
// elements equal, seen through broadcasts and reshapes (a splat as the
// graph builders write it: a 0-d constant broadcast); nullopt otherwise.
// Defined in passes/FuseAttention.cpp.
std::optional<double> splatOf(mlir::Value v);

#define GEN_PASS_DECL
#include "passes/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Passes.h.inc"

} // namespace kiln

#endif // KILN_PASSES_PASSES_H
