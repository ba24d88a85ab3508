//===- Decompose.h - composite ops into primitives ----------------*- C++ -*-===//
//
// The rewrite patterns of kiln-decompose, for passes that want them in their
// own pattern sets.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_PASSES_DECOMPOSE_H
#define KILN_PASSES_DECOMPOSE_H

#include "mlir/IR/PatternMatch.h"

namespace kiln {

struct DecomposeOptions {
  // kiln.gelu is already elementwise: it fuses as it is, and the GEMM
  // epilogue fusion needs it whole (cuBLASLt's GELU epilogues). Decompose it
  // only for a backend without it.
  bool gelu = false;
  // kiln.attention and kiln.attention_grad into dot_general, a softmax and
  // (causal) an iota/compare/select mask. Kept whole where a fused attention
  // kernel runs them (CUDA), unless their head dims are past the kernels'
  // (kMaxFusedAttentionHeadDim, ir/KilnOps.h): those decompose anyway.
  bool attention = true;
};

// softmax, log_softmax, layer_norm, softmax_cross_entropy and reduce mean
// (and gelu and attention as |options| asks) into elementwise ops,
// broadcasts, reduce sum/max (and dot_general for attention). Every result is what the op's reference semantics
// compute, in the same order of operations.
// Part |part| (0 q, 1 k, 2 v) of a packed [B, T, 3, H, D] tensor as
// [B, H, T, D]: slice, reshape, transpose (the inverse of
// kiln.attention_qkv's packing; kiln-decompose and kiln-pack-attention).
mlir::Value packedAttentionPart(mlir::OpBuilder &b, mlir::Location loc,
                                mlir::Value qkv, int64_t part);

void populateDecomposePatterns(mlir::RewritePatternSet &patterns,
                               const DecomposeOptions &options = {});

} // namespace kiln

#endif // KILN_PASSES_DECOMPOSE_H
