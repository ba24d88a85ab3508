// RUN: kiln-opt %s -split-input-file --kiln-fuse | FileCheck %s

// Loop fusion: an elementwise chain with a bias broadcast, a transpose, a reshape, a slice and a convert is one kernel; only the final reshape (a bitcast) stays outside.
// CHECK-LABEL: func.func @chain
// CHECK-SAME: (%[[X:.*]]: tensor<4x8xf32>, %[[B:.*]]: tensor<8xf32>)
// CHECK: %[[F:.*]] = kiln.fusion loop(%[[B]], %[[X]]) : (tensor<8xf32>, tensor<4x8xf32>) -> tensor<32xf16> {
// CHECK-NEXT: ^bb0(%[[BA:.*]]: tensor<8xf32>, %[[XA:.*]]: tensor<4x8xf32>):
// CHECK-NEXT: %[[BB:.*]] = kiln.broadcast_in_dim %[[BA]], dims = [1]
// CHECK-NEXT: %[[A:.*]] = kiln.add %[[XA]], %[[BB]]
// CHECK-NEXT: %[[R:.*]] = kiln.relu %[[A]]
// CHECK-NEXT: %[[T:.*]] = kiln.transpose %[[R]], permutation = [1, 0]
// CHECK-NEXT: %[[S:.*]] = kiln.reshape %[[T]] : tensor<8x4xf32> -> tensor<32xf32>
// CHECK-NEXT: %[[E:.*]] = kiln.exp %[[S]]
// CHECK-NEXT: %[[SL:.*]] = kiln.slice %[[E]]
// CHECK-NEXT: %[[H:.*]] = kiln.convert %[[SL]] : tensor<32xf32> -> tensor<32xf16>
// CHECK-NEXT: kiln.yield %[[H]] : tensor<32xf16>
// CHECK-NEXT: }
// CHECK-NEXT: %[[O:.*]] = kiln.reshape %[[F]] : tensor<32xf16> -> tensor<16x2xf16>
// CHECK-NEXT: return %[[O]]
func.func @chain(%x: tensor<4x8xf32>, %b: tensor<8xf32>) -> tensor<16x2xf16> {
  %bb = kiln.broadcast_in_dim %b, dims = [1] : tensor<8xf32> -> tensor<4x8xf32>
  %a = kiln.add %x, %bb : tensor<4x8xf32>
  %r = kiln.relu %a : tensor<4x8xf32>
  %t = kiln.transpose %r, permutation = [1, 0] : tensor<4x8xf32> -> tensor<8x4xf32>
  %s = kiln.reshape %t : tensor<8x4xf32> -> tensor<32xf32>
  %e = kiln.exp %s : tensor<32xf32>
  %sl = kiln.slice %e, start = [0], limit = [32], strides = [1] : tensor<32xf32> -> tensor<32xf32>
  %h = kiln.convert %sl : tensor<32xf32> -> tensor<32xf16>
  %o = kiln.reshape %h : tensor<32xf16> -> tensor<16x2xf16>
  return %o : tensor<16x2xf16>
}

// -----

// Duplication: a cheap producer (an iota mask) read before and after an all_reduce is copied into both kernels, and the original goes away.
// CHECK-LABEL: func.func @copy
// CHECK: %[[A:.*]] = kiln.fusion loop
// CHECK: kiln.iota dim = 0
// CHECK: kiln.iota dim = 1
// CHECK: kiln.compare ge
// CHECK: kiln.select
// CHECK: %[[R:.*]] = kiln.all_reduce sum %[[A]]
// CHECK: kiln.fusion loop(%[[R]])
// CHECK: kiln.iota dim = 0
// CHECK: kiln.iota dim = 1
// CHECK: kiln.compare ge
// CHECK: kiln.select
// CHECK-NOT: kiln.iota
// CHECK: return
func.func @copy(%x: tensor<64x64xf32>) -> tensor<64x64xf32> {
  %i = kiln.iota dim = 0 : tensor<64x64xi32>
  %j = kiln.iota dim = 1 : tensor<64x64xi32>
  %m = kiln.compare ge, %i, %j : tensor<64x64xi32>
  %z = kiln.constant dense<0.0> : tensor<64x64xf32>
  %a = kiln.select %m, %x, %z : tensor<64x64xi1>, tensor<64x64xf32>
  %c = kiln.all_reduce sum %a : tensor<64x64xf32>
  %b = kiln.select %m, %z, %c : tensor<64x64xi1>, tensor<64x64xf32>
  return %b : tensor<64x64xf32>
}

// -----

// Never across a collective: the exp before an all_reduce and the ops after it are two kernels, with the all_reduce between them.
// CHECK-LABEL: func.func @collective
// CHECK: %[[A:.*]] = kiln.fusion loop(%{{.*}}) : (tensor<128xf32>) -> tensor<128xf32> {
// CHECK: kiln.exp
// CHECK-NOT: kiln.tanh
// CHECK: }
// CHECK-NEXT: %[[R:.*]] = kiln.all_reduce sum %[[A]]
// CHECK-NEXT: %[[B:.*]] = kiln.fusion loop(%[[R]], %[[A]])
// CHECK: kiln.tanh
// CHECK: kiln.add
// CHECK: return %[[B]]
func.func @collective(%x: tensor<128xf32>) -> tensor<128xf32> {
  %a = kiln.exp %x : tensor<128xf32>
  %r = kiln.all_reduce sum %a : tensor<128xf32>
  %b = kiln.tanh %r : tensor<128xf32>
  %c = kiln.add %b, %a : tensor<128xf32>
  return %c : tensor<128xf32>
}

// -----

// Never across send/recv: the exp sent before the recv and the add after it stay two kernels, even though one kernel would read the same bytes with one launch less; the send keeps its place before the recv.
// CHECK-LABEL: func.func @send_recv
// CHECK: %[[A:.*]] = kiln.fusion loop(%{{.*}})
// CHECK: kiln.exp
// CHECK-NOT: kiln.add
// CHECK: kiln.send %[[A]]
// CHECK-NEXT: %[[R:.*]] = kiln.recv
// CHECK-NEXT: %[[B:.*]] = kiln.fusion loop(%[[R]], %[[A]])
// CHECK: kiln.tanh
// CHECK: kiln.add
// CHECK: return %[[B]]
func.func @send_recv(%x: tensor<128xf32>) -> tensor<128xf32> {
  %a = kiln.exp %x : tensor<128xf32>
  kiln.send %a, peer = 1, channel = 0 : tensor<128xf32>
  %r = kiln.recv peer = 1, channel = 1 : tensor<128xf32>
  %b = kiln.tanh %r : tensor<128xf32>
  %c = kiln.add %b, %a : tensor<128xf32>
  return %c : tensor<128xf32>
}
