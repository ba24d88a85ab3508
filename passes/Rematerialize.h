//===- Rematerialize.h - recompute activations in the backward pass -*- C++ -*-===//
//
// kiln-autodiff's `remat` option (passes/Rematerialize.cpp says what it
// recomputes and why).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_PASSES_REMATERIALIZE_H
#define KILN_PASSES_REMATERIALIZE_H

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace kiln {

// The attribute on the recomputed clones; kiln-decompose passes it on to the
// ops it expands a clone into, kiln-fuse removes it.
inline constexpr llvm::StringLiteral kRematAttrName = "kiln.remat";

// On the function: how many forward values the policy could recompute (the
// candidates a remat limit chooses from).
inline constexpr llvm::StringLiteral kRematCandidatesAttrName =
    "kiln.remat_candidates";

struct RematStats {
  unsigned values = 0;     // forward values the backward pass now recomputes
  unsigned ops = 0;        // ops cloned to do it
  unsigned candidates = 0; // values the policy could recompute
};

// Under |policy| ("off", "dots" or "full"), makes the backward ops of
// |func| (every top-level op not in |forward|) read recomputed clones of
// the forward values the policy does not keep; with a |scope| (a regular
// expression; empty: everything), only of values made by ops one of whose
// node names matches it; with a |limit| of 0 or more, only that many
// candidates, the cheapest to recompute per byte. Records the candidates'
// count on |func| (kiln.remat_candidates) under a policy. Fails with a
// diagnostic on an unknown policy, a bad expression, or a scope or limit
// without a policy.
mlir::FailureOr<RematStats> rematerialize(mlir::func::FuncOp func,
                                          llvm::ArrayRef<mlir::Operation *> forward,
                                          llvm::StringRef policy,
                                          llvm::StringRef scope = "",
                                          int64_t limit = -1);

} // namespace kiln

#endif // KILN_PASSES_REMATERIALIZE_H
