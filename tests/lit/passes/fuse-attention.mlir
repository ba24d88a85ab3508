// RUN: kiln-opt %s -split-input-file --kiln-fuse-attention | FileCheck %s
// RUN: kiln-opt %s -split-input-file --kiln-fuse-attention --mlir-print-debuginfo --mlir-print-local-scope | FileCheck %s --check-prefix=LOC
// RUN: kiln-opt %s -split-input-file --kiln-fuse-attention --kiln-fuse | FileCheck %s --check-prefix=FUSE

// The GPT block's causal attention: scores, a splat scale, a causal mask built from iota/compare/broadcast, softmax, context. One kiln.attention replaces it, its location fuses the five ops', and the mask, fill and scale (dead now) go.
// CHECK-LABEL: func.func @causal
// CHECK-SAME: (%[[Q:.*]]: tensor<2x2x4x8xf32>, %[[K:.*]]: tensor<2x2x4x8xf32>, %[[V:.*]]: tensor<2x2x4x6xf32>)
// CHECK-NEXT: %[[A:[a-z0-9_]+]], %{{[a-z0-9_]+}} = kiln.attention %[[Q]], %[[K]], %[[V]] {causal = true, scale = 0.35355338{{[0-9]*}} : f64} : (tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>, tensor<2x2x4x6xf32>) -> (tensor<2x2x4x6xf32>, tensor<2x2x4xf32>)
// CHECK-NEXT: return %[[A]] :
// CHECK-NOT: kiln.iota
// LOC-LABEL: func.func @causal
// LOC: kiln.attention {{.*}} loc(fused["scores", "scale", "mask", "softmax", "context"])
func.func @causal(%q: tensor<2x2x4x8xf32>, %k: tensor<2x2x4x8xf32>, %v: tensor<2x2x4x6xf32>) -> tensor<2x2x4x6xf32> {
  %query = kiln.iota dim = 0 : tensor<4x4xi32>
  %key = kiln.iota dim = 1 : tensor<4x4xi32>
  %visible = kiln.compare ge, %query, %key : tensor<4x4xi32>
  %mask = kiln.broadcast_in_dim %visible, dims = [2, 3] : tensor<4x4xi1> -> tensor<2x2x4x4xi1>
  %scalar = kiln.constant dense<0.353553385> : tensor<f32>
  %scale = kiln.broadcast_in_dim %scalar, dims = [] : tensor<f32> -> tensor<2x2x4x4xf32>
  %fill = kiln.constant dense<0xFF800000> : tensor<2x2x4x4xf32>
  %s = kiln.dot_general %q, %k, batch = [0, 1] x [0, 1], contract = [3] x [3] : (tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>) -> tensor<2x2x4x4xf32> loc("scores")
  %ss = kiln.mul %s, %scale : tensor<2x2x4x4xf32> loc("scale")
  %m = kiln.select %mask, %ss, %fill : tensor<2x2x4x4xi1>, tensor<2x2x4x4xf32> loc("mask")
  %p = kiln.softmax %m, dim = 3 : tensor<2x2x4x4xf32> loc("softmax")
  %o = kiln.dot_general %p, %v, batch = [0, 1] x [0, 1], contract = [3] x [2] : (tensor<2x2x4x4xf32>, tensor<2x2x4x6xf32>) -> tensor<2x2x4x6xf32> loc("context")
  return %o : tensor<2x2x4x6xf32>
}

// -----

// The scale as the first operand of the mul, no mask: causal = false; the mask-free form in bf16.
// CHECK-LABEL: func.func @scale_first_no_mask
// CHECK: kiln.attention %{{.*}}, %{{.*}}, %{{.*}} {causal = false, scale = 1.250000e-01 : f64} : (tensor<1x3x5x8xbf16>, tensor<1x3x7x8xbf16>, tensor<1x3x7x4xbf16>) -> (tensor<1x3x5x4xbf16>, tensor<1x3x5xf32>)
// CHECK-NOT: kiln.softmax
func.func @scale_first_no_mask(%q: tensor<1x3x5x8xbf16>, %k: tensor<1x3x7x8xbf16>, %v: tensor<1x3x7x4xbf16>) -> tensor<1x3x5x4xbf16> {
  %scale = kiln.constant dense<0.125> : tensor<1x3x5x7xbf16>
  %s = kiln.dot_general %q, %k, batch = [0, 1] x [0, 1], contract = [3] x [3] : (tensor<1x3x5x8xbf16>, tensor<1x3x7x8xbf16>) -> tensor<1x3x5x7xbf16>
  %ss = kiln.mul %scale, %s : tensor<1x3x5x7xbf16>
  %p = kiln.softmax %ss, dim = 3 : tensor<1x3x5x7xbf16>
  %o = kiln.dot_general %p, %v, batch = [0, 1] x [0, 1], contract = [3] x [2] : (tensor<1x3x5x7xbf16>, tensor<1x3x7x4xbf16>) -> tensor<1x3x5x4xbf16>
  return %o : tensor<1x3x5x4xbf16>
}

// -----

// No scale either: scale = 1. A causal mask given as a constant (rank 4, size 1 over batch and heads) is proven by evaluating it.
// CHECK-LABEL: func.func @constant_mask_no_scale
// CHECK: kiln.attention %{{.*}} {causal = true, scale = 1.000000e+00 : f64}
// CHECK-NOT: kiln.softmax
func.func @constant_mask_no_scale(%q: tensor<2x1x3x2xf64>, %k: tensor<2x1x3x2xf64>, %v: tensor<2x1x3x2xf64>) -> tensor<2x1x3x2xf64> {
  %visible = kiln.constant dense<[[[[true, false, false], [true, true, false], [true, true, true]]]]> : tensor<1x1x3x3xi1>
  %mask = kiln.broadcast_in_dim %visible, dims = [0, 1, 2, 3] : tensor<1x1x3x3xi1> -> tensor<2x1x3x3xi1>
  %fill = kiln.constant dense<0xFFF0000000000000> : tensor<2x1x3x3xf64>
  %s = kiln.dot_general %q, %k, batch = [0, 1] x [0, 1], contract = [3] x [3] : (tensor<2x1x3x2xf64>, tensor<2x1x3x2xf64>) -> tensor<2x1x3x3xf64>
  %m = kiln.select %mask, %s, %fill : tensor<2x1x3x3xi1>, tensor<2x1x3x3xf64>
  %p = kiln.softmax %m, dim = 3 : tensor<2x1x3x3xf64>
  %o = kiln.dot_general %p, %v, batch = [0, 1] x [0, 1], contract = [3] x [2] : (tensor<2x1x3x3xf64>, tensor<2x1x3x2xf64>) -> tensor<2x1x3x2xf64>
  return %o : tensor<2x1x3x2xf64>
}

// -----

// Two blocks share one mask, fill and scale (as the GPT's layers do): both are rewritten, and the shared values go once nothing reads them.
// CHECK-LABEL: func.func @shared_mask
// CHECK: kiln.attention {{.*}}causal = true
// CHECK: kiln.attention {{.*}}causal = true
// CHECK-NOT: kiln.compare
// CHECK: return
func.func @shared_mask(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %query = kiln.iota dim = 0 : tensor<4x4xi32>
  %key = kiln.iota dim = 1 : tensor<4x4xi32>
  %visible = kiln.compare le, %key, %query : tensor<4x4xi32>
  %mask = kiln.broadcast_in_dim %visible, dims = [2, 3] : tensor<4x4xi1> -> tensor<1x2x4x4xi1>
  %fill = kiln.constant dense<0xFF800000> : tensor<1x2x4x4xf32>
  %scale = kiln.constant dense<0.5> : tensor<1x2x4x4xf32>
  %s = kiln.dot_general %q, %k, batch = [0, 1] x [0, 1], contract = [3] x [3] : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x4xf32>
  %ss = kiln.mul %s, %scale : tensor<1x2x4x4xf32>
  %m = kiln.select %mask, %ss, %fill : tensor<1x2x4x4xi1>, tensor<1x2x4x4xf32>
  %p = kiln.softmax %m, dim = 3 : tensor<1x2x4x4xf32>
  %o = kiln.dot_general %p, %v, batch = [0, 1] x [0, 1], contract = [3] x [2] : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  %s2 = kiln.dot_general %o, %k, batch = [0, 1] x [0, 1], contract = [3] x [3] : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x4xf32>
  %ss2 = kiln.mul %s2, %scale : tensor<1x2x4x4xf32>
  %m2 = kiln.select %mask, %ss2, %fill : tensor<1x2x4x4xi1>, tensor<1x2x4x4xf32>
  %p2 = kiln.softmax %m2, dim = 3 : tensor<1x2x4x4xf32>
  %o2 = kiln.dot_general %p2, %v, batch = [0, 1] x [0, 1], contract = [3] x [2] : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o2 : tensor<1x2x4x8xf32>
}

// -----

// Not matched: the mask is an argument (a padding mask, say); nothing proves it causal.
// CHECK-LABEL: func.func @mask_argument
// CHECK-NOT: kiln.attention
// CHECK: kiln.softmax
func.func @mask_argument(%q: tensor<1x1x4x8xf32>, %k: tensor<1x1x4x8xf32>, %v: tensor<1x1x4x8xf32>, %mask: tensor<1x1x4x4xi1>) -> tensor<1x1x4x8xf32> {
  %fill = kiln.constant dense<0xFF800000> : tensor<1x1x4x4xf32>
  %s = kiln.dot_general %q, %k, batch = [0, 1] x [0, 1], contract = [3] x [3] : (tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>) -> tensor<1x1x4x4xf32>
  %m = kiln.select %mask, %s, %fill : tensor<1x1x4x4xi1>, tensor<1x1x4x4xf32>
  %p = kiln.softmax %m, dim = 3 : tensor<1x1x4x4xf32>
  %o = kiln.dot_general %p, %v, batch = [0, 1] x [0, 1], contract = [3] x [2] : (tensor<1x1x4x4xf32>, tensor<1x1x4x8xf32>) -> tensor<1x1x4x8xf32>
  return %o : tensor<1x1x4x8xf32>
}

// -----

// Not matched: masks built from constants that are not the top-left causal mask: keys at or after the query (le), strictly before it (gt: the first query sees nothing), and every key (all true: equivalent to no mask, but not what the pattern states).
// CHECK-LABEL: func.func @wrong_masks
// CHECK-NOT: kiln.attention
// CHECK-COUNT-3: kiln.softmax
func.func @wrong_masks(%q: tensor<1x1x4x8xf32>, %k: tensor<1x1x4x8xf32>, %v: tensor<1x1x4x8xf32>) -> (tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>) {
  %query = kiln.iota dim = 0 : tensor<4x4xi32>
  %key = kiln.iota dim = 1 : tensor<4x4xi32>
  %later = kiln.compare le, %query, %key : tensor<4x4xi32>
  %before = kiln.compare gt, %query, %key : tensor<4x4xi32>
  %all = kiln.compare ge, %query, %query : tensor<4x4xi32>
  %mask1 = kiln.broadcast_in_dim %later, dims = [2, 3] : tensor<4x4xi1> -> tensor<1x1x4x4xi1>
  %mask2 = kiln.broadcast_in_dim %before, dims = [2, 3] : tensor<4x4xi1> -> tensor<1x1x4x4xi1>
  %mask3 = kiln.broadcast_in_dim %all, dims = [2, 3] : tensor<4x4xi1> -> tensor<1x1x4x4xi1>
  %fill = kiln.constant dense<0xFF800000> : tensor<1x1x4x4xf32>
  %s1 = kiln.dot_general %q, %k, batch = [0, 1] x [0, 1], contract = [3] x [3] : (tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>) -> tensor<1x1x4x4xf32>
  %m1 = kiln.select %mask1, %s1, %fill : tensor<1x1x4x4xi1>, tensor<1x1x4x4xf32>
  %p1 = kiln.softmax %m1, dim = 3 : tensor<1x1x4x4xf32>
  %o1 = kiln.dot_general %p1, %v, batch = [0, 1] x [0, 1], contract = [3] x [2] : (tensor<1x1x4x4xf32>, tensor<1x1x4x8xf32>) -> tensor<1x1x4x8xf32>
  %s2 = kiln.dot_general %q, %k, batch = [0, 1] x [0, 1], contract = [3] x [3] : (tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>) -> tensor<1x1x4x4xf32>
  %m2 = kiln.select %mask2, %s2, %fill : tensor<1x1x4x4xi1>, tensor<1x1x4x4xf32>
  %p2 = kiln.softmax %m2, dim = 3 : tensor<1x1x4x4xf32>
  %o2 = kiln.dot_general %p2, %v, batch = [0, 1] x [0, 1], contract = [3] x [2] : (tensor<1x1x4x4xf32>, tensor<1x1x4x8xf32>) -> tensor<1x1x4x8xf32>
  %s3 = kiln.dot_general %q, %k, batch = [0, 1] x [0, 1], contract = [3] x [3] : (tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>) -> tensor<1x1x4x4xf32>
  %m3 = kiln.select %mask3, %s3, %fill : tensor<1x1x4x4xi1>, tensor<1x1x4x4xf32>
  %p3 = kiln.softmax %m3, dim = 3 : tensor<1x1x4x4xf32>
  %o3 = kiln.dot_general %p3, %v, batch = [0, 1] x [0, 1], contract = [3] x [2] : (tensor<1x1x4x4xf32>, tensor<1x1x4x8xf32>) -> tensor<1x1x4x8xf32>
  return %o1, %o2, %o3 : tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>
}

// -----

// Not matched: the fill is a large negative number, not -inf (a query whose keys were all masked would differ).
// CHECK-LABEL: func.func @finite_fill
// CHECK-NOT: kiln.attention
// CHECK: kiln.softmax
func.func @finite_fill(%q: tensor<1x1x4x8xf32>, %k: tensor<1x1x4x8xf32>, %v: tensor<1x1x4x8xf32>) -> tensor<1x1x4x8xf32> {
  %query = kiln.iota dim = 0 : tensor<4x4xi32>
  %key = kiln.iota dim = 1 : tensor<4x4xi32>
  %causal = kiln.compare ge, %query, %key : tensor<4x4xi32>
  %mask = kiln.broadcast_in_dim %causal, dims = [2, 3] : tensor<4x4xi1> -> tensor<1x1x4x4xi1>
  %fill = kiln.constant dense<-1.0e9> : tensor<1x1x4x4xf32>
  %s = kiln.dot_general %q, %k, batch = [0, 1] x [0, 1], contract = [3] x [3] : (tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>) -> tensor<1x1x4x4xf32>
  %m = kiln.select %mask, %s, %fill : tensor<1x1x4x4xi1>, tensor<1x1x4x4xf32>
  %p = kiln.softmax %m, dim = 3 : tensor<1x1x4x4xf32>
  %o = kiln.dot_general %p, %v, batch = [0, 1] x [0, 1], contract = [3] x [2] : (tensor<1x1x4x4xf32>, tensor<1x1x4x8xf32>) -> tensor<1x1x4x8xf32>
  return %o : tensor<1x1x4x8xf32>
}

// -----

// Not matched: an intermediate with a second use (the probabilities are returned too, the scaled scores read twice).
// CHECK-LABEL: func.func @two_uses
// CHECK-NOT: kiln.attention
// CHECK-COUNT-2: kiln.softmax
func.func @two_uses(%q: tensor<1x1x4x8xf32>, %k: tensor<1x1x4x8xf32>, %v: tensor<1x1x4x8xf32>) -> (tensor<1x1x4x8xf32>, tensor<1x1x4x4xf32>, tensor<1x1x4x8xf32>, tensor<1x1x4x4xf32>) {
  %scale = kiln.constant dense<0.5> : tensor<1x1x4x4xf32>
  %s = kiln.dot_general %q, %k, batch = [0, 1] x [0, 1], contract = [3] x [3] : (tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>) -> tensor<1x1x4x4xf32>
  %p = kiln.softmax %s, dim = 3 : tensor<1x1x4x4xf32>
  %o = kiln.dot_general %p, %v, batch = [0, 1] x [0, 1], contract = [3] x [2] : (tensor<1x1x4x4xf32>, tensor<1x1x4x8xf32>) -> tensor<1x1x4x8xf32>
  %s2 = kiln.dot_general %q, %k, batch = [0, 1] x [0, 1], contract = [3] x [3] : (tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>) -> tensor<1x1x4x4xf32>
  %ss2 = kiln.mul %s2, %scale : tensor<1x1x4x4xf32>
  %p2 = kiln.softmax %ss2, dim = 3 : tensor<1x1x4x4xf32>
  %o2 = kiln.dot_general %p2, %v, batch = [0, 1] x [0, 1], contract = [3] x [2] : (tensor<1x1x4x4xf32>, tensor<1x1x4x8xf32>) -> tensor<1x1x4x8xf32>
  return %o, %p, %o2, %ss2 : tensor<1x1x4x8xf32>, tensor<1x1x4x4xf32>, tensor<1x1x4x8xf32>, tensor<1x1x4x4xf32>
}

// -----

// q against k's dimension 2 is attention with the keys given transposed (kT [B, H, D, Tk], as PyTorch's ONNX exporters write it): fused, with k = transpose(kT). Not matched: the probabilities against v's dimension 3, and a softmax over the queries.
// CHECK-LABEL: func.func @wrong_contraction
// CHECK: %[[K:.*]] = kiln.transpose %arg1, permutation = [0, 1, 3, 2]
// CHECK-NEXT: kiln.attention %arg0, %[[K]], %arg2 {causal = false, scale = 1.000000e+00 : f64}
// CHECK-NOT: kiln.attention
// CHECK-COUNT-2: kiln.softmax
func.func @wrong_contraction(%q: tensor<1x1x4x4xf32>, %k: tensor<1x1x4x4xf32>, %v: tensor<1x1x4x4xf32>) -> (tensor<1x1x4x4xf32>, tensor<1x1x4x4xf32>, tensor<1x1x4x4xf32>) {
  %s1 = kiln.dot_general %q, %k, batch = [0, 1] x [0, 1], contract = [3] x [2] : (tensor<1x1x4x4xf32>, tensor<1x1x4x4xf32>) -> tensor<1x1x4x4xf32>
  %p1 = kiln.softmax %s1, dim = 3 : tensor<1x1x4x4xf32>
  %o1 = kiln.dot_general %p1, %v, batch = [0, 1] x [0, 1], contract = [3] x [2] : (tensor<1x1x4x4xf32>, tensor<1x1x4x4xf32>) -> tensor<1x1x4x4xf32>
  %s2 = kiln.dot_general %q, %k, batch = [0, 1] x [0, 1], contract = [3] x [3] : (tensor<1x1x4x4xf32>, tensor<1x1x4x4xf32>) -> tensor<1x1x4x4xf32>
  %p2 = kiln.softmax %s2, dim = 3 : tensor<1x1x4x4xf32>
  %o2 = kiln.dot_general %p2, %v, batch = [0, 1] x [0, 1], contract = [3] x [3] : (tensor<1x1x4x4xf32>, tensor<1x1x4x4xf32>) -> tensor<1x1x4x4xf32>
  %s3 = kiln.dot_general %q, %k, batch = [0, 1] x [0, 1], contract = [3] x [3] : (tensor<1x1x4x4xf32>, tensor<1x1x4x4xf32>) -> tensor<1x1x4x4xf32>
  %p3 = kiln.softmax %s3, dim = 2 : tensor<1x1x4x4xf32>
  %o3 = kiln.dot_general %p3, %v, batch = [0, 1] x [0, 1], contract = [3] x [2] : (tensor<1x1x4x4xf32>, tensor<1x1x4x4xf32>) -> tensor<1x1x4x4xf32>
  return %o1, %o2, %o3 : tensor<1x1x4x4xf32>, tensor<1x1x4x4xf32>, tensor<1x1x4x4xf32>
}

// -----

// After kiln-fuse: kiln.attention is a library call of its own, never inside a fusion; the elementwise ops around it form loop kernels.
// FUSE-LABEL: func.func @library_call
// FUSE: %[[Q:.*]] = kiln.fusion loop
// FUSE-NOT: kiln.attention
// FUSE: kiln.yield
// FUSE: %[[A:[a-z0-9_]+]], %{{[a-z0-9_]+}} = kiln.attention %[[Q]],
// FUSE: kiln.fusion loop(%[[A]])
// FUSE-NOT: kiln.attention
// FUSE: return
func.func @library_call(%x: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %q = kiln.neg %x : tensor<1x2x4x8xf32>
  %s = kiln.dot_general %q, %k, batch = [0, 1] x [0, 1], contract = [3] x [3] : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x4xf32>
  %p = kiln.softmax %s, dim = 3 : tensor<1x2x4x4xf32>
  %o = kiln.dot_general %p, %v, batch = [0, 1] x [0, 1], contract = [3] x [2] : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  %r = kiln.relu %o : tensor<1x2x4x8xf32>
  return %r : tensor<1x2x4x8xf32>
}

// -----

// A head dim past the fused kernels' 256 (kMaxFusedAttentionHeadDim): left
// in primitives, which the CUDA target runs as GEMMs and a softmax; 256
// itself fuses.
// CHECK-LABEL: func.func @head_dim_too_wide
// CHECK-NOT: kiln.attention
// CHECK: kiln.softmax
func.func @head_dim_too_wide(%q: tensor<1x1x4x320xf32>, %k: tensor<1x1x4x320xf32>, %v: tensor<1x1x4x8xf32>) -> tensor<1x1x4x8xf32> {
  %s = kiln.dot_general %q, %k, batch = [0, 1] x [0, 1], contract = [3] x [3] : (tensor<1x1x4x320xf32>, tensor<1x1x4x320xf32>) -> tensor<1x1x4x4xf32>
  %p = kiln.softmax %s, dim = 3 : tensor<1x1x4x4xf32>
  %o = kiln.dot_general %p, %v, batch = [0, 1] x [0, 1], contract = [3] x [2] : (tensor<1x1x4x4xf32>, tensor<1x1x4x8xf32>) -> tensor<1x1x4x8xf32>
  return %o : tensor<1x1x4x8xf32>
}
// CHECK-LABEL: func.func @value_dim_too_wide
// CHECK-NOT: kiln.attention
// CHECK: kiln.softmax
func.func @value_dim_too_wide(%q: tensor<1x1x4x8xf32>, %k: tensor<1x1x4x8xf32>, %v: tensor<1x1x4x264xf32>) -> tensor<1x1x4x264xf32> {
  %s = kiln.dot_general %q, %k, batch = [0, 1] x [0, 1], contract = [3] x [3] : (tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>) -> tensor<1x1x4x4xf32>
  %p = kiln.softmax %s, dim = 3 : tensor<1x1x4x4xf32>
  %o = kiln.dot_general %p, %v, batch = [0, 1] x [0, 1], contract = [3] x [2] : (tensor<1x1x4x4xf32>, tensor<1x1x4x264xf32>) -> tensor<1x1x4x264xf32>
  return %o : tensor<1x1x4x264xf32>
}
// CHECK-LABEL: func.func @head_dim_256
// CHECK: kiln.attention
// CHECK-NOT: kiln.softmax
func.func @head_dim_256(%q: tensor<1x1x4x256xf32>, %k: tensor<1x1x4x256xf32>, %v: tensor<1x1x4x256xf32>) -> tensor<1x1x4x256xf32> {
  %s = kiln.dot_general %q, %k, batch = [0, 1] x [0, 1], contract = [3] x [3] : (tensor<1x1x4x256xf32>, tensor<1x1x4x256xf32>) -> tensor<1x1x4x4xf32>
  %p = kiln.softmax %s, dim = 3 : tensor<1x1x4x4xf32>
  %o = kiln.dot_general %p, %v, batch = [0, 1] x [0, 1], contract = [3] x [2] : (tensor<1x1x4x4xf32>, tensor<1x1x4x256xf32>) -> tensor<1x1x4x256xf32>
  return %o : tensor<1x1x4x256xf32>
}

// -----

// PyTorch's ONNX exporters (kiln import): sqrt(scale) computed from constants on q and on the transposed keys, and a causal mask added to the scores (the float's lowest value above the diagonal). One kiln.attention with scale 0.5 * 0.5, k transposed back; the scale's arithmetic and the mask go.
// CHECK-LABEL: func.func @exported
// CHECK: %[[K:.*]] = kiln.transpose %arg1, permutation = [0, 1, 3, 2]
// CHECK-NEXT: kiln.attention %arg0, %[[K]], %arg2 {causal = true, scale = 2.500000e-01 : f64}
// CHECK-NOT: kiln.sqrt
// CHECK-NOT: kiln.softmax
func.func @exported(%q: tensor<1x2x3x4xf32>, %kt: tensor<1x2x4x3xf32>, %v: tensor<1x2x3x4xf32>) -> tensor<1x2x3x4xf32> {
  %d = kiln.constant dense<16.0> : tensor<1xf32>
  %sd = kiln.sqrt %d : tensor<1xf32>
  %one = kiln.constant dense<1.0> : tensor<1xf32>
  %inv = kiln.div %one, %sd : tensor<1xf32>
  %c = kiln.sqrt %inv : tensor<1xf32>
  %cq = kiln.broadcast_in_dim %c, dims = [3] : tensor<1xf32> -> tensor<1x2x3x4xf32>
  %qs = kiln.mul %q, %cq : tensor<1x2x3x4xf32>
  %ck = kiln.broadcast_in_dim %c, dims = [3] : tensor<1xf32> -> tensor<1x2x4x3xf32>
  %ks = kiln.mul %kt, %ck : tensor<1x2x4x3xf32>
  %s = kiln.dot_general %qs, %ks, batch = [0, 1] x [0, 1], contract = [3] x [2] : (tensor<1x2x3x4xf32>, tensor<1x2x4x3xf32>) -> tensor<1x2x3x3xf32>
  %m = kiln.constant dense<[[0.0, -3.40282347E+38, -3.40282347E+38], [0.0, 0.0, -3.40282347E+38], [0.0, 0.0, 0.0]]> : tensor<3x3xf32>
  %mb = kiln.broadcast_in_dim %m, dims = [2, 3] : tensor<3x3xf32> -> tensor<1x2x3x3xf32>
  %sm = kiln.add %s, %mb : tensor<1x2x3x3xf32>
  %p = kiln.softmax %sm, dim = 3 : tensor<1x2x3x3xf32>
  %o = kiln.dot_general %p, %v, batch = [0, 1] x [0, 1], contract = [3] x [2] : (tensor<1x2x3x3xf32>, tensor<1x2x3x4xf32>) -> tensor<1x2x3x4xf32>
  return %o : tensor<1x2x3x4xf32>
}

// -----

// An additive mask that is not causal (a bias of 1 on a visible element) is a bias, not a mask: nothing fused.
// CHECK-LABEL: func.func @additive_bias
// CHECK-NOT: kiln.attention
// CHECK: kiln.softmax
func.func @additive_bias(%q: tensor<1x1x2x4xf32>, %k: tensor<1x1x2x4xf32>, %v: tensor<1x1x2x4xf32>) -> tensor<1x1x2x4xf32> {
  %s = kiln.dot_general %q, %k, batch = [0, 1] x [0, 1], contract = [3] x [3] : (tensor<1x1x2x4xf32>, tensor<1x1x2x4xf32>) -> tensor<1x1x2x2xf32>
  %m = kiln.constant dense<[[[[0.0, 0xFF800000], [1.0, 0.0]]]]> : tensor<1x1x2x2xf32>
  %sm = kiln.add %m, %s : tensor<1x1x2x2xf32>
  %p = kiln.softmax %sm, dim = 3 : tensor<1x1x2x2xf32>
  %o = kiln.dot_general %p, %v, batch = [0, 1] x [0, 1], contract = [3] x [2] : (tensor<1x1x2x2xf32>, tensor<1x1x2x4xf32>) -> tensor<1x1x2x4xf32>
  return %o : tensor<1x1x2x4xf32>
}
