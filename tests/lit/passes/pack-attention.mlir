// kiln-pack-attention (passes/PackAttention.cpp): an attention whose q, k
// and v are the transposed thirds of one projection reads the projection in
// place (kiln.attention_qkv), its gradient writes the projection's gradient
// in place (kiln.attention_qkv_grad), and the transposes, slices and pads
// around them go. The values do not change: the reference interpreter gives
// the same f64 bits before and after the pass, and after kiln-decompose
// expands the packed ops again.
// RUN: kiln-opt %s -split-input-file --kiln-pack-attention --canonicalize | FileCheck %s
// RUN: kiln-opt %s -split-input-file --kiln-test-interpret > %t.before
// RUN: kiln-opt %s -split-input-file --kiln-pack-attention --canonicalize --kiln-test-interpret > %t.packed
// RUN: diff %t.before %t.packed
// RUN: kiln-opt %s -split-input-file --kiln-pack-attention --canonicalize --kiln-decompose --kiln-test-interpret > %t.decomposed
// RUN: diff %t.before %t.decomposed
// RUN: kiln-opt %s -split-input-file --kiln-pack-attention --canonicalize --kiln-decompose | FileCheck %s --check-prefix=DECOMPOSED
// DECOMPOSED-NOT: kiln.attention_qkv

// The GPT block's shape of it (B 2, T 4, H 2, D 8): split, attention,
// merge; the gradient of the merge, attention_grad, the gradient of the
// split (three pads summed).
// CHECK-LABEL: func.func @block
// CHECK: %[[X:.*]] = kiln.reshape %{{.*}} : tensor<{{.*}}> -> tensor<2x4x3x2x8xf64>
// CHECK: %[[OUT:.*]], %[[LSE:.*]] = kiln.attention_qkv %[[X]] {causal = true, scale = 0.353553{{[0-9]*}} : f64} : (tensor<2x4x3x2x8xf64>) -> (tensor<2x4x2x8xf64>, tensor<2x2x4xf64>)
// CHECK: kiln.reshape %[[OUT]] : tensor<2x4x2x8xf64> -> tensor<2x4x16xf64>
// CHECK: %[[DOUT:.*]] = kiln.reshape %{{.*}} : tensor<{{.*}}> -> tensor<2x4x2x8xf64>
// CHECK: %[[DX:.*]] = kiln.attention_qkv_grad %[[X]], %[[OUT]], %[[LSE]], %[[DOUT]] {causal = true, scale = 0.353553{{[0-9]*}} : f64} : (tensor<2x4x3x2x8xf64>, tensor<2x4x2x8xf64>, tensor<2x2x4xf64>, tensor<2x4x2x8xf64>) -> tensor<2x4x3x2x8xf64>
// CHECK: kiln.reshape %[[DX]] : tensor<2x4x3x2x8xf64> -> tensor<2x4x48xf64>
// CHECK-NOT: kiln.transpose
// CHECK-NOT: kiln.slice
// CHECK-NOT: kiln.pad
// CHECK: return
func.func @block() -> (tensor<2x4x16xf64>, tensor<2x4x48xf64>, tensor<2x2x4xf64>) {
  %i = kiln.iota dim = 0 : tensor<384xf64>
  %c = kiln.constant dense<0.37> : tensor<384xf64>
  %a = kiln.mul %i, %c : tensor<384xf64>
  %s = kiln.sin %a : tensor<384xf64>
  %x = kiln.reshape %s : tensor<384xf64> -> tensor<2x4x48xf64>
  %j = kiln.iota dim = 0 : tensor<128xf64>
  %d = kiln.constant dense<0.91> : tensor<128xf64>
  %e = kiln.mul %j, %d : tensor<128xf64>
  %f = kiln.cos %e : tensor<128xf64>
  %dy = kiln.reshape %f : tensor<128xf64> -> tensor<2x4x16xf64>
  %q0 = kiln.slice %x, start = [0, 0, 0], limit = [2, 4, 16], strides = [1, 1, 1] : tensor<2x4x48xf64> -> tensor<2x4x16xf64>
  %q1 = kiln.reshape %q0 : tensor<2x4x16xf64> -> tensor<2x4x2x8xf64>
  %q = kiln.transpose %q1, permutation = [0, 2, 1, 3] : tensor<2x4x2x8xf64> -> tensor<2x2x4x8xf64>
  %k0 = kiln.slice %x, start = [0, 0, 16], limit = [2, 4, 32], strides = [1, 1, 1] : tensor<2x4x48xf64> -> tensor<2x4x16xf64>
  %k1 = kiln.reshape %k0 : tensor<2x4x16xf64> -> tensor<2x4x2x8xf64>
  %k = kiln.transpose %k1, permutation = [0, 2, 1, 3] : tensor<2x4x2x8xf64> -> tensor<2x2x4x8xf64>
  %v0 = kiln.slice %x, start = [0, 0, 32], limit = [2, 4, 48], strides = [1, 1, 1] : tensor<2x4x48xf64> -> tensor<2x4x16xf64>
  %v1 = kiln.reshape %v0 : tensor<2x4x16xf64> -> tensor<2x4x2x8xf64>
  %v = kiln.transpose %v1, permutation = [0, 2, 1, 3] : tensor<2x4x2x8xf64> -> tensor<2x2x4x8xf64>
  %out, %lse = kiln.attention %q, %k, %v {causal = true, scale = 0.35355339059327379 : f64} : (tensor<2x2x4x8xf64>, tensor<2x2x4x8xf64>, tensor<2x2x4x8xf64>) -> (tensor<2x2x4x8xf64>, tensor<2x2x4xf64>)
  %o1 = kiln.transpose %out, permutation = [0, 2, 1, 3] : tensor<2x2x4x8xf64> -> tensor<2x4x2x8xf64>
  %o = kiln.reshape %o1 : tensor<2x4x2x8xf64> -> tensor<2x4x16xf64>
  %dy1 = kiln.reshape %dy : tensor<2x4x16xf64> -> tensor<2x4x2x8xf64>
  %dout = kiln.transpose %dy1, permutation = [0, 2, 1, 3] : tensor<2x4x2x8xf64> -> tensor<2x2x4x8xf64>
  %dq, %dk, %dv = kiln.attention_grad %q, %k, %v, %out, %lse, %dout {causal = true, scale = 0.35355339059327379 : f64} : (tensor<2x2x4x8xf64>, tensor<2x2x4x8xf64>, tensor<2x2x4x8xf64>, tensor<2x2x4x8xf64>, tensor<2x2x4xf64>, tensor<2x2x4x8xf64>) -> (tensor<2x2x4x8xf64>, tensor<2x2x4x8xf64>, tensor<2x2x4x8xf64>)
  %gv0 = kiln.transpose %dv, permutation = [0, 2, 1, 3] : tensor<2x2x4x8xf64> -> tensor<2x4x2x8xf64>
  %gv1 = kiln.reshape %gv0 : tensor<2x4x2x8xf64> -> tensor<2x4x16xf64>
  %gv = kiln.pad %gv1, low = [0, 0, 32], high = [0, 0, 0], value = 0.000000e+00 : tensor<2x4x16xf64> -> tensor<2x4x48xf64>
  %gk0 = kiln.transpose %dk, permutation = [0, 2, 1, 3] : tensor<2x2x4x8xf64> -> tensor<2x4x2x8xf64>
  %gk1 = kiln.reshape %gk0 : tensor<2x4x2x8xf64> -> tensor<2x4x16xf64>
  %gk = kiln.pad %gk1, low = [0, 0, 16], high = [0, 0, 16], value = 0.000000e+00 : tensor<2x4x16xf64> -> tensor<2x4x48xf64>
  %g1 = kiln.add %gv, %gk : tensor<2x4x48xf64>
  %gq0 = kiln.transpose %dq, permutation = [0, 2, 1, 3] : tensor<2x2x4x8xf64> -> tensor<2x4x2x8xf64>
  %gq1 = kiln.reshape %gq0 : tensor<2x4x2x8xf64> -> tensor<2x4x16xf64>
  %gq = kiln.pad %gq1, low = [0, 0, 0], high = [0, 0, 32], value = 0.000000e+00 : tensor<2x4x16xf64> -> tensor<2x4x48xf64>
  %g = kiln.add %g1, %gq : tensor<2x4x48xf64>
  return %o, %g, %lse : tensor<2x4x16xf64>, tensor<2x4x48xf64>, tensor<2x2x4xf64>
}

// -----

// dq is also returned on its own: it becomes a slice of dqkv (the sum of
// the pads stays, reading the slices), values unchanged.
// CHECK-LABEL: func.func @extra_use
// CHECK: kiln.attention_qkv %
// CHECK: %[[DX:.*]] = kiln.attention_qkv_grad
// CHECK: kiln.slice %[[DX]], start = [0, 0, 0, 0, 0], limit = [2, 4, 1, 2, 8]
func.func @extra_use() -> (tensor<2x4x48xf64>, tensor<2x2x4x8xf64>) {
  %i = kiln.iota dim = 0 : tensor<384xf64>
  %c = kiln.constant dense<0.23> : tensor<384xf64>
  %a = kiln.mul %i, %c : tensor<384xf64>
  %s = kiln.sin %a : tensor<384xf64>
  %x = kiln.reshape %s : tensor<384xf64> -> tensor<2x4x48xf64>
  %j = kiln.iota dim = 0 : tensor<128xf64>
  %d = kiln.constant dense<0.53> : tensor<128xf64>
  %e = kiln.mul %j, %d : tensor<128xf64>
  %f = kiln.cos %e : tensor<128xf64>
  %dout = kiln.reshape %f : tensor<128xf64> -> tensor<2x2x4x8xf64>
  %q0 = kiln.slice %x, start = [0, 0, 0], limit = [2, 4, 16], strides = [1, 1, 1] : tensor<2x4x48xf64> -> tensor<2x4x16xf64>
  %q1 = kiln.reshape %q0 : tensor<2x4x16xf64> -> tensor<2x4x2x8xf64>
  %q = kiln.transpose %q1, permutation = [0, 2, 1, 3] : tensor<2x4x2x8xf64> -> tensor<2x2x4x8xf64>
  %k0 = kiln.slice %x, start = [0, 0, 16], limit = [2, 4, 32], strides = [1, 1, 1] : tensor<2x4x48xf64> -> tensor<2x4x16xf64>
  %k1 = kiln.reshape %k0 : tensor<2x4x16xf64> -> tensor<2x4x2x8xf64>
  %k = kiln.transpose %k1, permutation = [0, 2, 1, 3] : tensor<2x4x2x8xf64> -> tensor<2x2x4x8xf64>
  %v0 = kiln.slice %x, start = [0, 0, 32], limit = [2, 4, 48], strides = [1, 1, 1] : tensor<2x4x48xf64> -> tensor<2x4x16xf64>
  %v1 = kiln.reshape %v0 : tensor<2x4x16xf64> -> tensor<2x4x2x8xf64>
  %v = kiln.transpose %v1, permutation = [0, 2, 1, 3] : tensor<2x4x2x8xf64> -> tensor<2x2x4x8xf64>
  %out, %lse = kiln.attention %q, %k, %v {causal = false, scale = 0.5 : f64} : (tensor<2x2x4x8xf64>, tensor<2x2x4x8xf64>, tensor<2x2x4x8xf64>) -> (tensor<2x2x4x8xf64>, tensor<2x2x4xf64>)
  %dq, %dk, %dv = kiln.attention_grad %q, %k, %v, %out, %lse, %dout {causal = false, scale = 0.5 : f64} : (tensor<2x2x4x8xf64>, tensor<2x2x4x8xf64>, tensor<2x2x4x8xf64>, tensor<2x2x4x8xf64>, tensor<2x2x4xf64>, tensor<2x2x4x8xf64>) -> (tensor<2x2x4x8xf64>, tensor<2x2x4x8xf64>, tensor<2x2x4x8xf64>)
  %gv0 = kiln.transpose %dv, permutation = [0, 2, 1, 3] : tensor<2x2x4x8xf64> -> tensor<2x4x2x8xf64>
  %gv1 = kiln.reshape %gv0 : tensor<2x4x2x8xf64> -> tensor<2x4x16xf64>
  %gv = kiln.pad %gv1, low = [0, 0, 32], high = [0, 0, 0], value = 0.000000e+00 : tensor<2x4x16xf64> -> tensor<2x4x48xf64>
  %gk0 = kiln.transpose %dk, permutation = [0, 2, 1, 3] : tensor<2x2x4x8xf64> -> tensor<2x4x2x8xf64>
  %gk1 = kiln.reshape %gk0 : tensor<2x4x2x8xf64> -> tensor<2x4x16xf64>
  %gk = kiln.pad %gk1, low = [0, 0, 16], high = [0, 0, 16], value = 0.000000e+00 : tensor<2x4x16xf64> -> tensor<2x4x48xf64>
  %g1 = kiln.add %gv, %gk : tensor<2x4x48xf64>
  %gq0 = kiln.transpose %dq, permutation = [0, 2, 1, 3] : tensor<2x2x4x8xf64> -> tensor<2x4x2x8xf64>
  %gq1 = kiln.reshape %gq0 : tensor<2x4x2x8xf64> -> tensor<2x4x16xf64>
  %gq = kiln.pad %gq1, low = [0, 0, 0], high = [0, 0, 32], value = 0.000000e+00 : tensor<2x4x16xf64> -> tensor<2x4x48xf64>
  %g = kiln.add %g1, %gq : tensor<2x4x48xf64>
  return %g, %dq : tensor<2x4x48xf64>, tensor<2x2x4x8xf64>
}

// -----

// q, k and v not the thirds of one projection: left as it is.
// CHECK-LABEL: func.func @separate
// CHECK: kiln.attention %
// CHECK-NOT: kiln.attention_qkv
func.func @separate() -> tensor<2x2x4x8xf64> {
  %i = kiln.iota dim = 0 : tensor<128xf64>
  %c = kiln.constant dense<0.41> : tensor<128xf64>
  %a = kiln.mul %i, %c : tensor<128xf64>
  %s = kiln.sin %a : tensor<128xf64>
  %t = kiln.cos %a : tensor<128xf64>
  %q = kiln.reshape %s : tensor<128xf64> -> tensor<2x2x4x8xf64>
  %k = kiln.reshape %t : tensor<128xf64> -> tensor<2x2x4x8xf64>
  %out, %lse = kiln.attention %q, %k, %q {causal = true, scale = 0.5 : f64} : (tensor<2x2x4x8xf64>, tensor<2x2x4x8xf64>, tensor<2x2x4x8xf64>) -> (tensor<2x2x4x8xf64>, tensor<2x2x4xf64>)
  return %out : tensor<2x2x4x8xf64>
}
