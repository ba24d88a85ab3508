// RUN: kiln-opt %s -split-input-file -verify-diagnostics
//
// Verifier messages of kiln.attention and kiln.attention_grad (and of
// their packed forms kiln.attention_qkv and kiln.attention_qkv_grad)
// (ir/ShapeRules.cpp and ir/KilnOps.cpp). Both infer their result types, so
// a shape rule's message is followed by MLIR's "failed to infer returned
// types", as in invalid-linalg.mlir. Each case opens with a line saying what
// it tests.

// q is rank 4.
func.func @q_rank(%q: tensor<3x5x4xf32>, %k: tensor<2x3x7x4xf32>, %v: tensor<2x3x7x4xf32>) {
  // expected-error@+2 {{'kiln.attention' op q must be rank 4 [B, H, Tq, D], but has rank 3}}
  // expected-error@+1 {{'kiln.attention' op failed to infer returned types}}
  %o, %l = kiln.attention %q, %k, %v {scale = 0.5 : f64, causal = false} : (tensor<3x5x4xf32>, tensor<2x3x7x4xf32>, tensor<2x3x7x4xf32>) -> (tensor<2x3x5x4xf32>, tensor<2x3x5xf32>)
  return
}

// -----

// k is rank 4.
func.func @k_rank(%q: tensor<2x3x5x4xf32>, %k: tensor<2x3x7x4x1xf32>, %v: tensor<2x3x7x4xf32>) {
  // expected-error@+2 {{'kiln.attention' op k must be rank 4 [B, H, Tk, D], but has rank 5}}
  // expected-error@+1 {{'kiln.attention' op failed to infer returned types}}
  %o, %l = kiln.attention %q, %k, %v {scale = 0.5 : f64, causal = false} : (tensor<2x3x5x4xf32>, tensor<2x3x7x4x1xf32>, tensor<2x3x7x4xf32>) -> (tensor<2x3x5x4xf32>, tensor<2x3x5xf32>)
  return
}

// -----

// v is rank 4.
func.func @v_rank(%q: tensor<2x3x5x4xf32>, %k: tensor<2x3x7x4xf32>, %v: tensor<7x4xf32>) {
  // expected-error@+2 {{'kiln.attention' op v must be rank 4 [B, H, Tk, Dv], but has rank 2}}
  // expected-error@+1 {{'kiln.attention' op failed to infer returned types}}
  %o, %l = kiln.attention %q, %k, %v {scale = 0.5 : f64, causal = false} : (tensor<2x3x5x4xf32>, tensor<2x3x7x4xf32>, tensor<7x4xf32>) -> (tensor<2x3x5x4xf32>, tensor<2x3x5xf32>)
  return
}

// -----

// k's head size matches q's.
func.func @k_head_dim(%q: tensor<2x3x5x4xf32>, %k: tensor<2x3x7x8xf32>, %v: tensor<2x3x7x4xf32>) {
  // expected-error@+2 {{'kiln.attention' op k must have q's batch, heads and head size [2, 3, Tk, 4], but has shape [2, 3, 7, 8]}}
  // expected-error@+1 {{'kiln.attention' op failed to infer returned types}}
  %o, %l = kiln.attention %q, %k, %v {scale = 0.5 : f64, causal = false} : (tensor<2x3x5x4xf32>, tensor<2x3x7x8xf32>, tensor<2x3x7x4xf32>) -> (tensor<2x3x5x4xf32>, tensor<2x3x5xf32>)
  return
}

// -----

// k's batch matches q's.
func.func @k_batch(%q: tensor<2x3x5x4xf32>, %k: tensor<1x3x7x4xf32>, %v: tensor<2x3x7x4xf32>) {
  // expected-error@+2 {{'kiln.attention' op k must have q's batch, heads and head size [2, 3, Tk, 4], but has shape [1, 3, 7, 4]}}
  // expected-error@+1 {{'kiln.attention' op failed to infer returned types}}
  %o, %l = kiln.attention %q, %k, %v {scale = 0.5 : f64, causal = false} : (tensor<2x3x5x4xf32>, tensor<1x3x7x4xf32>, tensor<2x3x7x4xf32>) -> (tensor<2x3x5x4xf32>, tensor<2x3x5xf32>)
  return
}

// -----

// v has k's length.
func.func @v_length(%q: tensor<2x3x5x4xf32>, %k: tensor<2x3x7x4xf32>, %v: tensor<2x3x6x4xf32>) {
  // expected-error@+2 {{'kiln.attention' op v must have q's batch and heads and k's length [2, 3, 7, Dv], but has shape [2, 3, 6, 4]}}
  // expected-error@+1 {{'kiln.attention' op failed to infer returned types}}
  %o, %l = kiln.attention %q, %k, %v {scale = 0.5 : f64, causal = false} : (tensor<2x3x5x4xf32>, tensor<2x3x7x4xf32>, tensor<2x3x6x4xf32>) -> (tensor<2x3x5x4xf32>, tensor<2x3x5xf32>)
  return
}

// -----

// v has q's heads.
func.func @v_heads(%q: tensor<2x3x5x4xf32>, %k: tensor<2x3x7x4xf32>, %v: tensor<2x2x7x4xf32>) {
  // expected-error@+2 {{'kiln.attention' op v must have q's batch and heads and k's length [2, 3, 7, Dv], but has shape [2, 2, 7, 4]}}
  // expected-error@+1 {{'kiln.attention' op failed to infer returned types}}
  %o, %l = kiln.attention %q, %k, %v {scale = 0.5 : f64, causal = false} : (tensor<2x3x5x4xf32>, tensor<2x3x7x4xf32>, tensor<2x2x7x4xf32>) -> (tensor<2x3x5x4xf32>, tensor<2x3x5xf32>)
  return
}

// -----

// At least one key.
func.func @no_keys(%q: tensor<2x3x5x4xf32>, %k: tensor<2x3x0x4xf32>, %v: tensor<2x3x0x4xf32>) {
  // expected-error@+2 {{'kiln.attention' op k and v must hold at least one key, but Tk is 0}}
  // expected-error@+1 {{'kiln.attention' op failed to infer returned types}}
  %o, %l = kiln.attention %q, %k, %v {scale = 0.5 : f64, causal = false} : (tensor<2x3x5x4xf32>, tensor<2x3x0x4xf32>, tensor<2x3x0x4xf32>) -> (tensor<2x3x5x4xf32>, tensor<2x3x5xf32>)
  return
}

// -----

// q, k and v share one element type.
func.func @element_types(%q: tensor<2x3x5x4xbf16>, %k: tensor<2x3x7x4xf32>, %v: tensor<2x3x7x4xbf16>) {
  // expected-error@+2 {{'kiln.attention' op requires q and k to have the same element type, but they are 'bf16' and 'f32'}}
  // expected-error@+1 {{'kiln.attention' op failed to infer returned types}}
  %o, %l = kiln.attention %q, %k, %v {scale = 0.5 : f64, causal = false} : (tensor<2x3x5x4xbf16>, tensor<2x3x7x4xf32>, tensor<2x3x7x4xbf16>) -> (tensor<2x3x5x4xbf16>, tensor<2x3x5xf32>)
  return
}

// -----

// Integer operands are refused.
func.func @integer(%q: tensor<2x3x5x4xi32>, %k: tensor<2x3x7x4xi32>, %v: tensor<2x3x7x4xi32>) {
  // expected-error@+1 {{'kiln.attention' op operand #0 must be statically shaped tensor of 64-bit float or 32-bit float or 16-bit float or bfloat16 type values, but got 'tensor<2x3x5x4xi32>'}}
  %o, %l = kiln.attention %q, %k, %v {scale = 0.5 : f64, causal = false} : (tensor<2x3x5x4xi32>, tensor<2x3x7x4xi32>, tensor<2x3x7x4xi32>) -> (tensor<2x3x5x4xi32>, tensor<2x3x5xf32>)
  return
}

// -----

// lse is f32 for bf16 operands.
func.func @lse_type(%q: tensor<2x3x5x4xbf16>, %k: tensor<2x3x7x4xbf16>, %v: tensor<2x3x7x4xbf16>) {
  // expected-error@+2 {{'kiln.attention' op inferred type(s) 'tensor<2x3x5x4xbf16>', 'tensor<2x3x5xf32>' are incompatible with return type(s) of operation 'tensor<2x3x5x4xbf16>', 'tensor<2x3x5xbf16>'}}
  // expected-error@+1 {{'kiln.attention' op failed to infer returned types}}
  %o, %l = kiln.attention %q, %k, %v {scale = 0.5 : f64, causal = false} : (tensor<2x3x5x4xbf16>, tensor<2x3x7x4xbf16>, tensor<2x3x7x4xbf16>) -> (tensor<2x3x5x4xbf16>, tensor<2x3x5xbf16>)
  return
}

// -----

// out has v's last dimension.
func.func @out_shape(%q: tensor<2x3x5x4xf64>, %k: tensor<2x3x7x4xf64>, %v: tensor<2x3x7x6xf64>) {
  // expected-error@+2 {{'kiln.attention' op inferred type(s) 'tensor<2x3x5x6xf64>', 'tensor<2x3x5xf64>' are incompatible with return type(s) of operation 'tensor<2x3x5x4xf64>', 'tensor<2x3x5xf64>'}}
  // expected-error@+1 {{'kiln.attention' op failed to infer returned types}}
  %o, %l = kiln.attention %q, %k, %v {scale = 0.5 : f64, causal = false} : (tensor<2x3x5x4xf64>, tensor<2x3x7x4xf64>, tensor<2x3x7x6xf64>) -> (tensor<2x3x5x4xf64>, tensor<2x3x5xf64>)
  return
}

// -----

// scale and causal are required.
func.func @missing_causal(%q: tensor<2x3x5x4xf32>, %k: tensor<2x3x7x4xf32>, %v: tensor<2x3x7x4xf32>) {
  // expected-error@+1 {{'kiln.attention' op requires attribute 'causal'}}
  %o, %l = kiln.attention %q, %k, %v {scale = 0.5 : f64} : (tensor<2x3x5x4xf32>, tensor<2x3x7x4xf32>, tensor<2x3x7x4xf32>) -> (tensor<2x3x5x4xf32>, tensor<2x3x5xf32>)
  return
}

// -----

// scale is finite.
func.func @scale_nan(%q: tensor<2x3x5x4xf32>, %k: tensor<2x3x7x4xf32>, %v: tensor<2x3x7x4xf32>) {
  // expected-error@+1 {{'kiln.attention' op scale must be finite, but is nan}}
  %o, %l = kiln.attention %q, %k, %v {scale = 0x7FF8000000000000 : f64, causal = false} : (tensor<2x3x5x4xf32>, tensor<2x3x7x4xf32>, tensor<2x3x7x4xf32>) -> (tensor<2x3x5x4xf32>, tensor<2x3x5xf32>)
  return
}

// -----

// attention_grad checks q, k and v like the forward op.
func.func @grad_v_length(%q: tensor<2x3x5x4xf32>, %k: tensor<2x3x7x4xf32>, %v: tensor<2x3x6x4xf32>, %o: tensor<2x3x5x4xf32>, %l: tensor<2x3x5xf32>) {
  // expected-error@+1 {{'kiln.attention_grad' op v must have q's batch and heads and k's length [2, 3, 7, Dv], but has shape [2, 3, 6, 4]}}
  %dq, %dk, %dv = kiln.attention_grad %q, %k, %v, %o, %l, %o {scale = 0.5 : f64, causal = true} : (tensor<2x3x5x4xf32>, tensor<2x3x7x4xf32>, tensor<2x3x6x4xf32>, tensor<2x3x5x4xf32>, tensor<2x3x5xf32>, tensor<2x3x5x4xf32>) -> (tensor<2x3x5x4xf32>, tensor<2x3x7x4xf32>, tensor<2x3x6x4xf32>)
  return
}

// -----

// attention_grad's out is the forward result.
func.func @grad_out(%q: tensor<2x3x5x4xf32>, %k: tensor<2x3x7x4xf32>, %v: tensor<2x3x7x6xf32>, %o: tensor<2x3x5x4xf32>, %l: tensor<2x3x5xf32>, %g: tensor<2x3x5x6xf32>) {
  // expected-error@+1 {{'kiln.attention_grad' op out must be the forward result 'tensor<2x3x5x6xf32>', but is 'tensor<2x3x5x4xf32>'}}
  %dq, %dk, %dv = kiln.attention_grad %q, %k, %v, %o, %l, %g {scale = 0.5 : f64, causal = true} : (tensor<2x3x5x4xf32>, tensor<2x3x7x4xf32>, tensor<2x3x7x6xf32>, tensor<2x3x5x4xf32>, tensor<2x3x5xf32>, tensor<2x3x5x6xf32>) -> (tensor<2x3x5x4xf32>, tensor<2x3x7x4xf32>, tensor<2x3x7x6xf32>)
  return
}

// -----

// attention_grad's lse is f64 for f64 operands.
func.func @grad_lse(%q: tensor<2x3x5x4xf64>, %k: tensor<2x3x7x4xf64>, %v: tensor<2x3x7x4xf64>, %o: tensor<2x3x5x4xf64>, %l: tensor<2x3x5xf32>) {
  // expected-error@+1 {{'kiln.attention_grad' op lse must be the forward result 'tensor<2x3x5xf64>', but is 'tensor<2x3x5xf32>'}}
  %dq, %dk, %dv = kiln.attention_grad %q, %k, %v, %o, %l, %o {scale = 0.5 : f64, causal = true} : (tensor<2x3x5x4xf64>, tensor<2x3x7x4xf64>, tensor<2x3x7x4xf64>, tensor<2x3x5x4xf64>, tensor<2x3x5xf32>, tensor<2x3x5x4xf64>) -> (tensor<2x3x5x4xf64>, tensor<2x3x7x4xf64>, tensor<2x3x7x4xf64>)
  return
}

// -----

// attention_grad's dout has out's type.
func.func @grad_dout(%q: tensor<2x3x5x4xbf16>, %k: tensor<2x3x7x4xbf16>, %v: tensor<2x3x7x4xbf16>, %o: tensor<2x3x5x4xbf16>, %l: tensor<2x3x5xf32>, %g: tensor<2x3x5x4xf32>) {
  // expected-error@+1 {{'kiln.attention_grad' op dout must have out's type 'tensor<2x3x5x4xbf16>', but is 'tensor<2x3x5x4xf32>'}}
  %dq, %dk, %dv = kiln.attention_grad %q, %k, %v, %o, %l, %g {scale = 0.5 : f64, causal = true} : (tensor<2x3x5x4xbf16>, tensor<2x3x7x4xbf16>, tensor<2x3x7x4xbf16>, tensor<2x3x5x4xbf16>, tensor<2x3x5xf32>, tensor<2x3x5x4xf32>) -> (tensor<2x3x5x4xbf16>, tensor<2x3x7x4xbf16>, tensor<2x3x7x4xbf16>)
  return
}

// -----

// attention_grad's results have q's, k's and v's types.
func.func @grad_results(%q: tensor<2x3x5x4xf32>, %k: tensor<2x3x7x4xf32>, %v: tensor<2x3x7x4xf32>, %o: tensor<2x3x5x4xf32>, %l: tensor<2x3x5xf32>) {
  // expected-error@+2 {{'kiln.attention_grad' op inferred type(s) 'tensor<2x3x5x4xf32>', 'tensor<2x3x7x4xf32>', 'tensor<2x3x7x4xf32>' are incompatible with return type(s) of operation 'tensor<2x3x5x4xf32>', 'tensor<2x3x5x4xf32>', 'tensor<2x3x7x4xf32>'}}
  // expected-error@+1 {{'kiln.attention_grad' op failed to infer returned types}}
  %dq, %dk, %dv = kiln.attention_grad %q, %k, %v, %o, %l, %o {scale = 0.5 : f64, causal = true} : (tensor<2x3x5x4xf32>, tensor<2x3x7x4xf32>, tensor<2x3x7x4xf32>, tensor<2x3x5x4xf32>, tensor<2x3x5xf32>, tensor<2x3x5x4xf32>) -> (tensor<2x3x5x4xf32>, tensor<2x3x5x4xf32>, tensor<2x3x7x4xf32>)
  return
}

// -----

// attention_qkv's operand packs q, k and v along dimension 2.
func.func @qkv_not_packed(%qkv: tensor<2x5x4x4x8xf32>) {
  // expected-error@+2 {{'kiln.attention_qkv' op qkv must be [B, T, 3, H, D] (q, k and v packed along dimension 2), but is 'tensor<2x5x4x4x8xf32>'}}
  // expected-error@+1 {{'kiln.attention_qkv' op failed to infer returned types}}
  %o, %l = kiln.attention_qkv %qkv {scale = 0.5 : f64, causal = true} : (tensor<2x5x4x4x8xf32>) -> (tensor<2x5x4x8xf32>, tensor<2x4x5xf32>)
  return
}

// -----

// attention_qkv's operand is rank 5.
func.func @qkv_rank(%qkv: tensor<2x5x3x32xf32>) {
  // expected-error@+2 {{'kiln.attention_qkv' op qkv must be [B, T, 3, H, D] (q, k and v packed along dimension 2), but is 'tensor<2x5x3x32xf32>'}}
  // expected-error@+1 {{'kiln.attention_qkv' op failed to infer returned types}}
  %o, %l = kiln.attention_qkv %qkv {scale = 0.5 : f64, causal = true} : (tensor<2x5x3x32xf32>) -> (tensor<2x5x4x8xf32>, tensor<2x4x5xf32>)
  return
}

// -----

// attention_qkv's scale is finite.
func.func @qkv_scale(%qkv: tensor<2x5x3x4x8xf32>) {
  // expected-error@+1 {{'kiln.attention_qkv' op scale must be finite, but is INF}}
  %o, %l = kiln.attention_qkv %qkv {scale = 0x7FF0000000000000 : f64, causal = true} : (tensor<2x5x3x4x8xf32>) -> (tensor<2x5x4x8xf32>, tensor<2x4x5xf32>)
  return
}

// -----

// attention_qkv_grad's lse is the forward's [B, H, T].
func.func @qkv_grad_lse(%qkv: tensor<2x5x3x4x8xbf16>, %o: tensor<2x5x4x8xbf16>, %l: tensor<2x5x4xf32>) {
  // expected-error@+1 {{'kiln.attention_qkv_grad' op lse must be the forward result 'tensor<2x4x5xf32>', but is 'tensor<2x5x4xf32>'}}
  %d = kiln.attention_qkv_grad %qkv, %o, %l, %o {scale = 0.5 : f64, causal = true} : (tensor<2x5x3x4x8xbf16>, tensor<2x5x4x8xbf16>, tensor<2x5x4xf32>, tensor<2x5x4x8xbf16>) -> tensor<2x5x3x4x8xbf16>
  return
}

// -----

// attention_qkv_grad's dout has out's type.
func.func @qkv_grad_dout(%qkv: tensor<2x5x3x4x8xbf16>, %o: tensor<2x5x4x8xbf16>, %l: tensor<2x4x5xf32>, %g: tensor<2x5x4x8xf32>) {
  // expected-error@+1 {{'kiln.attention_qkv_grad' op dout must have out's type 'tensor<2x5x4x8xbf16>', but is 'tensor<2x5x4x8xf32>'}}
  %d = kiln.attention_qkv_grad %qkv, %o, %l, %g {scale = 0.5 : f64, causal = true} : (tensor<2x5x3x4x8xbf16>, tensor<2x5x4x8xbf16>, tensor<2x4x5xf32>, tensor<2x5x4x8xf32>) -> tensor<2x5x3x4x8xbf16>
  return
}
