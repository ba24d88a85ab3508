// RUN: kiln-opt %s -split-input-file --kiln-fuse | FileCheck %s
// RUN: kiln-opt %s -split-input-file --kiln-fuse=max-inputs=4 | FileCheck %s --check-prefix=LIMIT
// RUN: kiln-opt %s -split-input-file --kiln-fuse=max-inputs=2 | FileCheck %s --check-prefix=CASTS

// Horizontal fusion: SGD updates of three parameters, independent and all feeding the return, share one launch.
// CHECK-LABEL: func.func @sgd
// CHECK: %[[F:.*]]:3 = kiln.fusion horizontal({{.*}}) : (tensor<64x32xf32>, tensor<64x32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32x10xf32>, tensor<32x10xf32>) -> (tensor<64x32xf32>, tensor<32xf32>, tensor<32x10xf32>)
// CHECK-COUNT-3: kiln.sub
// CHECK: return %[[F]]#0, %[[F]]#1, %[[F]]#2
// The operand limit (4 inputs) splits the same updates into two kernels.
// LIMIT-LABEL: func.func @sgd
// LIMIT: kiln.fusion horizontal({{.*}}) : (tensor<64x32xf32>, tensor<64x32xf32>, tensor<32xf32>, tensor<32xf32>) -> (tensor<64x32xf32>, tensor<32xf32>)
// LIMIT: kiln.fusion loop({{.*}}) : (tensor<32x10xf32>, tensor<32x10xf32>) -> tensor<32x10xf32>
func.func @sgd(%w1: tensor<64x32xf32>, %g1: tensor<64x32xf32>, %w2: tensor<32xf32>, %g2: tensor<32xf32>, %w3: tensor<32x10xf32>, %g3: tensor<32x10xf32>)
    -> (tensor<64x32xf32>, tensor<32xf32>, tensor<32x10xf32>) {
  %lr = kiln.constant dense<0.01> : tensor<f32>
  %l1 = kiln.broadcast_in_dim %lr, dims = [] : tensor<f32> -> tensor<64x32xf32>
  %u1 = kiln.mul %g1, %l1 : tensor<64x32xf32>
  %n1 = kiln.sub %w1, %u1 : tensor<64x32xf32>
  %l2 = kiln.broadcast_in_dim %lr, dims = [] : tensor<f32> -> tensor<32xf32>
  %u2 = kiln.mul %g2, %l2 : tensor<32xf32>
  %n2 = kiln.sub %w2, %u2 : tensor<32xf32>
  %l3 = kiln.broadcast_in_dim %lr, dims = [] : tensor<f32> -> tensor<32x10xf32>
  %u3 = kiln.mul %g3, %l3 : tensor<32x10xf32>
  %n3 = kiln.sub %w3, %u3 : tensor<32x10xf32>
  return %n1, %n2, %n3 : tensor<64x32xf32>, tensor<32xf32>, tensor<32x10xf32>
}

// -----

// Not packed: independent kernels with different consumers (one feeds an all_reduce, one the return) keep their own launches.
// CHECK-LABEL: func.func @different_consumers
// CHECK: kiln.fusion loop
// CHECK: kiln.fusion loop
// CHECK-NOT: horizontal
// CHECK: return
func.func @different_consumers(%a: tensor<64xf32>, %b: tensor<32xf32>) -> (tensor<64xf32>, tensor<32xf32>) {
  %x = kiln.exp %a : tensor<64xf32>
  %y = kiln.tanh %b : tensor<32xf32>
  %r = kiln.all_reduce sum %x : tensor<64xf32>
  return %r, %y : tensor<64xf32>, tensor<32xf32>
}

// -----

// Casts of the step's arguments (what mixed precision inserts before the
// matmuls) share one launch whatever they feed: here two different dots.
// CHECK-LABEL: func.func @argument_casts
// CHECK: %[[C:.*]]:3 = kiln.fusion horizontal(%arg0, %arg1, %arg2)
// CHECK-COUNT-3: kiln.convert
// CHECK-NOT: kiln.fusion loop
// CHECK: return
func.func @argument_casts(%x: tensor<8x16xf32>, %w1: tensor<16x16xf32>, %w2: tensor<16x4xf32>) -> tensor<8x4xbf16> {
  %xb = kiln.convert %x : tensor<8x16xf32> -> tensor<8x16xbf16>
  %w1b = kiln.convert %w1 : tensor<16x16xf32> -> tensor<16x16xbf16>
  %w2b = kiln.convert %w2 : tensor<16x4xf32> -> tensor<16x4xbf16>
  %h = kiln.dot_general %xb, %w1b, batch = [] x [], contract = [1] x [0] : (tensor<8x16xbf16>, tensor<16x16xbf16>) -> tensor<8x16xbf16>
  %y = kiln.dot_general %h, %w2b, batch = [] x [], contract = [1] x [0] : (tensor<8x16xbf16>, tensor<16x4xbf16>) -> tensor<8x4xbf16>
  return %y : tensor<8x4xbf16>
}

// -----

// More argument casts than one kernel may hold (max-inputs=2 here), each
// feeding its own matmul: each full group closes and the next casts start
// another, so five casts are three launches (not one of two casts and three
// single ones).
// CASTS-LABEL: func.func @many_argument_casts
// CASTS: kiln.fusion horizontal(%arg0, %arg1)
// CASTS: kiln.fusion horizontal(%arg2, %arg3)
// CASTS: kiln.fusion loop(%arg4)
// CASTS-NOT: kiln.fusion
// CASTS: return
func.func @many_argument_casts(%x: tensor<8x16xf32>, %w1: tensor<16x16xf32>, %w2: tensor<16x16xf32>, %w3: tensor<16x16xf32>, %w4: tensor<16x4xf32>) -> tensor<8x4xbf16> {
  %xb = kiln.convert %x : tensor<8x16xf32> -> tensor<8x16xbf16>
  %w1b = kiln.convert %w1 : tensor<16x16xf32> -> tensor<16x16xbf16>
  %w2b = kiln.convert %w2 : tensor<16x16xf32> -> tensor<16x16xbf16>
  %w3b = kiln.convert %w3 : tensor<16x16xf32> -> tensor<16x16xbf16>
  %w4b = kiln.convert %w4 : tensor<16x4xf32> -> tensor<16x4xbf16>
  %h1 = kiln.dot_general %xb, %w1b, batch = [] x [], contract = [1] x [0] : (tensor<8x16xbf16>, tensor<16x16xbf16>) -> tensor<8x16xbf16>
  %h2 = kiln.dot_general %h1, %w2b, batch = [] x [], contract = [1] x [0] : (tensor<8x16xbf16>, tensor<16x16xbf16>) -> tensor<8x16xbf16>
  %h3 = kiln.dot_general %h2, %w3b, batch = [] x [], contract = [1] x [0] : (tensor<8x16xbf16>, tensor<16x16xbf16>) -> tensor<8x16xbf16>
  %y = kiln.dot_general %h3, %w4b, batch = [] x [], contract = [1] x [0] : (tensor<8x16xbf16>, tensor<16x4xbf16>) -> tensor<8x4xbf16>
  return %y : tensor<8x4xbf16>
}
