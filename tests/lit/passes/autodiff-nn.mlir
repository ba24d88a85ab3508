// RUN: kiln-opt %s -split-input-file -verify-diagnostics -kiln-autodiff -canonicalize -cse | FileCheck %s
//
// kiln-autodiff on the neural-network composites (ir/gradients/NN.cpp), whose
// gradients are written with primitive kiln ops. %G is a broadcast of the
// seed 1.0.

// softmax: dx = y * (g - sum(g * y)) along the softmax dimension.
// The op is squared before the sum, so its incoming gradient %GS = 2 s g is
// not a constant (s * s fans out: the two products are added).
// CHECK-LABEL: func.func @softmax
// CHECK: %[[Y:.*]] = kiln.softmax %arg0, dim = 1
// CHECK: %[[G:.*]] = kiln.broadcast_in_dim
// CHECK: %[[GY:.*]] = kiln.mul %[[G]], %[[Y]]
// CHECK: %[[GS:.*]] = kiln.add %[[GY]], %[[GY]]
// CHECK: %[[P:.*]] = kiln.mul %[[GS]], %[[Y]]
// CHECK: %[[T:.*]] = kiln.reduce sum %[[P]], dims = [1] : tensor<2x3xf32> -> tensor<2xf32>
// CHECK: %[[TB:.*]] = kiln.broadcast_in_dim %[[T]], dims = [0] : tensor<2xf32> -> tensor<2x3xf32>
// CHECK: %[[D:.*]] = kiln.sub %[[GS]], %[[TB]]
// CHECK: %[[DX:.*]] = kiln.mul %[[Y]], %[[D]]
// CHECK: return %{{.*}}, %[[DX]]
func.func @softmax(%x: tensor<2x3xf32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %s = kiln.softmax %x, dim = 1 : tensor<2x3xf32>
  %y = kiln.mul %s, %s : tensor<2x3xf32>
  %l = kiln.reduce sum %y, dims = [0, 1] : tensor<2x3xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// log_softmax: dx = g - exp(y) * sum(g) along the dimension.
// The op is squared before the sum, so its incoming gradient %GS = 2 s g is
// not a constant (s * s fans out: the two products are added).
// CHECK-LABEL: func.func @log_softmax
// CHECK: %[[Y:.*]] = kiln.log_softmax %arg0, dim = 0
// CHECK: %[[GS:.*]] = kiln.add
// CHECK: %[[E:.*]] = kiln.exp %[[Y]]
// CHECK: %[[T:.*]] = kiln.reduce sum %[[GS]], dims = [0] : tensor<2x3xf32> -> tensor<3xf32>
// CHECK: %[[TB:.*]] = kiln.broadcast_in_dim %[[T]], dims = [1] : tensor<3xf32> -> tensor<2x3xf32>
// CHECK: %[[P:.*]] = kiln.mul %[[E]], %[[TB]]
// CHECK: %[[DX:.*]] = kiln.sub %[[GS]], %[[P]]
// CHECK: return %{{.*}}, %[[DX]]
func.func @log_softmax(%x: tensor<2x3xf32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %s = kiln.log_softmax %x, dim = 0 : tensor<2x3xf32>
  %y = kiln.mul %s, %s : tensor<2x3xf32>
  %l = kiln.reduce sum %y, dims = [0, 1] : tensor<2x3xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// layer_norm, written with primitive ops: the statistics are recomputed,
// xhat = (x - mean) * rsqrt(var + eps); dbias = sum(g), dscale = sum(g * xhat)
// over the leading dims; dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))
// with dxhat = g * scale.
// The op is squared before the sum, so its incoming gradient %GS = 2 s g is
// not a constant (s * s fans out: the two products are added).
// CHECK-LABEL: func.func @layer_norm
// CHECK-DAG: %[[EPS:.*]] = kiln.constant dense<9.99999974E-6> : tensor<2x3xf32>
// CHECK: %[[GS:.*]] = kiln.add
// CHECK: %[[M:.*]] = kiln.reduce mean %arg0, dims = [2] : tensor<2x3x4xf32> -> tensor<2x3xf32>
// CHECK: %[[MB:.*]] = kiln.broadcast_in_dim %[[M]], dims = [0, 1]
// CHECK: %[[XC:.*]] = kiln.sub %arg0, %[[MB]]
// CHECK: %[[SQ:.*]] = kiln.mul %[[XC]], %[[XC]]
// CHECK: %[[V:.*]] = kiln.reduce mean %[[SQ]], dims = [2]
// CHECK: %[[VE:.*]] = kiln.add %[[V]], %[[EPS]]
// CHECK: %[[R:.*]] = kiln.rsqrt %[[VE]]
// CHECK: %[[RB:.*]] = kiln.broadcast_in_dim %[[R]], dims = [0, 1] : tensor<2x3xf32> -> tensor<2x3x4xf32>
// CHECK: %[[XHAT:.*]] = kiln.mul %[[XC]], %[[RB]]
// CHECK: %[[DB:.*]] = kiln.reduce sum %[[GS]], dims = [0, 1] : tensor<2x3x4xf32> -> tensor<4xf32>
// CHECK: %[[GX:.*]] = kiln.mul %[[GS]], %[[XHAT]]
// CHECK: %[[DG:.*]] = kiln.reduce sum %[[GX]], dims = [0, 1] : tensor<2x3x4xf32> -> tensor<4xf32>
// CHECK: %[[SB:.*]] = kiln.broadcast_in_dim %arg1, dims = [2] : tensor<4xf32> -> tensor<2x3x4xf32>
// CHECK: %[[DXHAT:.*]] = kiln.mul %[[GS]], %[[SB]]
// CHECK: %[[M1:.*]] = kiln.reduce mean %[[DXHAT]], dims = [2]
// CHECK: %[[M1B:.*]] = kiln.broadcast_in_dim %[[M1]]
// CHECK: %[[DX2:.*]] = kiln.mul %[[DXHAT]], %[[XHAT]]
// CHECK: %[[M2:.*]] = kiln.reduce mean %[[DX2]], dims = [2]
// CHECK: %[[M2B:.*]] = kiln.broadcast_in_dim %[[M2]]
// CHECK: %[[A:.*]] = kiln.sub %[[DXHAT]], %[[M1B]]
// CHECK: %[[B:.*]] = kiln.mul %[[XHAT]], %[[M2B]]
// CHECK: %[[C:.*]] = kiln.sub %[[A]], %[[B]]
// CHECK: %[[DX:.*]] = kiln.mul %[[RB]], %[[C]]
// CHECK: return %{{.*}}, %[[DX]], %[[DG]], %[[DB]]
func.func @layer_norm(%x: tensor<2x3x4xf32> {kiln.role = #kiln.role<parameter>}, %g: tensor<4xf32> {kiln.role = #kiln.role<parameter>}, %b: tensor<4xf32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %s = kiln.layer_norm %x, %g, %b, axis = 2, epsilon = 1.0e-05 : tensor<2x3x4xf32>, tensor<4xf32>
  %y = kiln.mul %s, %s : tensor<2x3x4xf32>
  %l = kiln.reduce sum %y, dims = [0, 1, 2] : tensor<2x3x4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// gather: the gradient is scattered (added) into zeros of the table shape;
// the indices are an input.
// CHECK-LABEL: func.func @gather
// CHECK-DAG: %[[ZERO:.*]] = kiln.constant dense<0.000000e+00> : tensor<10x4xf32>
// CHECK: %[[G:.*]] = kiln.broadcast_in_dim %{{.*}}, dims = [] : tensor<f32> -> tensor<2x3x4xf32>
// CHECK: %[[DT:.*]] = kiln.scatter_add %[[ZERO]], %arg1, %[[G]] : (tensor<10x4xf32>, tensor<2x3xi32>, tensor<2x3x4xf32>) -> tensor<10x4xf32>
// CHECK: return %{{.*}}, %[[DT]]
func.func @gather(%t: tensor<10x4xf32> {kiln.role = #kiln.role<parameter>}, %i: tensor<2x3xi32> {kiln.role = #kiln.role<input>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %y = kiln.gather %t, %i : (tensor<10x4xf32>, tensor<2x3xi32>) -> tensor<2x3x4xf32>
  %l = kiln.reduce sum %y, dims = [0, 1, 2] : tensor<2x3x4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// scatter_add: the operand gets g, the updates gather g by the indices.
// The op is squared before the sum, so its incoming gradient %GS = 2 s g is
// not a constant (s * s fans out: the two products are added).
// CHECK-LABEL: func.func @scatter_add
// CHECK: %[[GS:.*]] = kiln.add
// CHECK: %[[DU:.*]] = kiln.gather %[[GS]], %arg1 : (tensor<10x4xf32>, tensor<3xi64>) -> tensor<3x4xf32>
// CHECK: return %{{.*}}, %[[GS]], %[[DU]]
func.func @scatter_add(%t: tensor<10x4xf32> {kiln.role = #kiln.role<parameter>}, %i: tensor<3xi64> {kiln.role = #kiln.role<input>}, %u: tensor<3x4xf32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %s = kiln.scatter_add %t, %i, %u : (tensor<10x4xf32>, tensor<3xi64>, tensor<3x4xf32>) -> tensor<10x4xf32>
  %y = kiln.mul %s, %s : tensor<10x4xf32>
  %l = kiln.reduce sum %y, dims = [0, 1] : tensor<10x4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// dropout: the gradient is dropped out with the same counter, rate and seed,
// so the mask and the scale match the forward op.
// CHECK-LABEL: func.func @dropout
// CHECK: %[[G:.*]] = kiln.broadcast_in_dim %{{.*}}, dims = [] : tensor<f32> -> tensor<8xf32>
// CHECK: %[[DX:.*]] = kiln.dropout %[[G]], %arg1, rate = 2.500000e-01, seed = 7 : tensor<8xf32>
// CHECK: return %{{.*}}, %[[DX]]
func.func @dropout(%x: tensor<8xf32> {kiln.role = #kiln.role<parameter>}, %step: tensor<i64> {kiln.role = #kiln.role<input>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %y = kiln.dropout %x, %step, rate = 0.25, seed = 7 : tensor<8xf32>
  %l = kiln.reduce sum %y, dims = [0] : tensor<8xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// softmax_cross_entropy: (softmax(logits) - one_hot(labels)) * g, one_hot made
// with iota, compare and convert; the labels get no gradient.
// CHECK-LABEL: func.func @softmax_cross_entropy
// CHECK: %[[G:.*]] = kiln.broadcast_in_dim %{{.*}}, dims = [] : tensor<f32> -> tensor<4xf32>
// CHECK: %[[P:.*]] = kiln.softmax %arg0, dim = 1 : tensor<4x3xf32>
// CHECK: %[[I:.*]] = kiln.iota dim = 1 : tensor<4x3xi32>
// CHECK: %[[LB:.*]] = kiln.broadcast_in_dim %arg1, dims = [0] : tensor<4xi32> -> tensor<4x3xi32>
// CHECK: %[[EQ:.*]] = kiln.compare eq, %[[I]], %[[LB]] : tensor<4x3xi32>
// CHECK: %[[OH:.*]] = kiln.convert %[[EQ]] : tensor<4x3xi1> -> tensor<4x3xf32>
// CHECK: %[[GB:.*]] = kiln.broadcast_in_dim %[[G]], dims = [0] : tensor<4xf32> -> tensor<4x3xf32>
// CHECK: %[[D:.*]] = kiln.sub %[[P]], %[[OH]]
// CHECK: %[[DZ:.*]] = kiln.mul %[[D]], %[[GB]]
// CHECK: return %{{.*}}, %[[DZ]]
func.func @softmax_cross_entropy(%z: tensor<4x3xf32> {kiln.role = #kiln.role<parameter>}, %labels: tensor<4xi32> {kiln.role = #kiln.role<input>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %y = kiln.softmax_cross_entropy %z, %labels : (tensor<4x3xf32>, tensor<4xi32>) -> tensor<4xf32>
  %l = kiln.reduce sum %y, dims = [0] : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// attention: one kiln.attention_grad of q, k, v, the forward out and lse and
// out's gradient, with the forward scale and causal; k and v share an
// operand (%arg1), so their gradients are added.
// CHECK-LABEL: func.func @attention
// CHECK: %[[OUT:.*]], %[[LSE:.*]] = kiln.attention %arg0, %arg1, %arg1 {causal = true, scale = 2.500000e-01 : f64}
// CHECK: %[[G:.*]] = kiln.broadcast_in_dim %{{.*}}, dims = [] : tensor<f32> -> tensor<2x3x4x8xf32>
// CHECK: %[[DQ:.*]], %[[DK:.*]], %[[DV:.*]] = kiln.attention_grad %arg0, %arg1, %arg1, %[[OUT]], %[[LSE]], %[[G]] {causal = true, scale = 2.500000e-01 : f64}
// CHECK: %[[DKV:.*]] = kiln.add %[[DK]], %[[DV]]
// CHECK: return %{{.*}}, %[[DQ]], %[[DKV]]
func.func @attention(%q: tensor<2x3x4x8xf32> {kiln.role = #kiln.role<parameter>}, %kv: tensor<2x3x4x8xf32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %o, %l = kiln.attention %q, %kv, %kv {scale = 0.25 : f64, causal = true} : (tensor<2x3x4x8xf32>, tensor<2x3x4x8xf32>, tensor<2x3x4x8xf32>) -> (tensor<2x3x4x8xf32>, tensor<2x3x4xf32>)
  %s = kiln.reduce sum %o, dims = [0, 1, 2, 3] : tensor<2x3x4x8xf32> -> tensor<f32>
  return %s : tensor<f32>
}
