// RUN: kiln-opt %s -split-input-file --kiln-fuse | FileCheck %s

// Sibling multi-output fusion: the q, k and v slices of one large tensor read it once, in one kernel with three results.
// CHECK-LABEL: func.func @qkv
// CHECK-SAME: (%[[X:.*]]: tensor<8x64x384xf32>)
// CHECK: %[[F:.*]]:3 = kiln.fusion multi_output(%[[X]]) : (tensor<8x64x384xf32>) -> (tensor<8x4x64x32xf32>, tensor<8x4x64x32xf32>, tensor<8x4x64x32xf32>)
// CHECK-COUNT-3: kiln.transpose
// CHECK: kiln.yield
// CHECK-NEXT: }
// CHECK-NEXT: return %[[F]]#0, %[[F]]#1, %[[F]]#2
func.func @qkv(%x: tensor<8x64x384xf32>) -> (tensor<8x4x64x32xf32>, tensor<8x4x64x32xf32>, tensor<8x4x64x32xf32>) {
  %q = kiln.slice %x, start = [0, 0, 0], limit = [8, 64, 128], strides = [1, 1, 1] : tensor<8x64x384xf32> -> tensor<8x64x128xf32>
  %qr = kiln.reshape %q : tensor<8x64x128xf32> -> tensor<8x64x4x32xf32>
  %qt = kiln.transpose %qr, permutation = [0, 2, 1, 3] : tensor<8x64x4x32xf32> -> tensor<8x4x64x32xf32>
  %k = kiln.slice %x, start = [0, 0, 128], limit = [8, 64, 256], strides = [1, 1, 1] : tensor<8x64x384xf32> -> tensor<8x64x128xf32>
  %kr = kiln.reshape %k : tensor<8x64x128xf32> -> tensor<8x64x4x32xf32>
  %kt = kiln.transpose %kr, permutation = [0, 2, 1, 3] : tensor<8x64x4x32xf32> -> tensor<8x4x64x32xf32>
  %v = kiln.slice %x, start = [0, 0, 256], limit = [8, 64, 384], strides = [1, 1, 1] : tensor<8x64x384xf32> -> tensor<8x64x128xf32>
  %vr = kiln.reshape %v : tensor<8x64x128xf32> -> tensor<8x64x4x32xf32>
  %vt = kiln.transpose %vr, permutation = [0, 2, 1, 3] : tensor<8x64x4x32xf32> -> tensor<8x4x64x32xf32>
  return %qt, %kt, %vt : tensor<8x4x64x32xf32>, tensor<8x4x64x32xf32>, tensor<8x4x64x32xf32>
}

// -----

// Sibling multi-output fusion of two row reductions of the same input (layer-norm backward's two sums).
// CHECK-LABEL: func.func @two_sums
// CHECK: %[[F:.*]]:2 = kiln.fusion multi_output(%{{.*}}, %{{.*}}) : (tensor<512x128xf32>, tensor<512x128xf32>) -> (tensor<512xf32>, tensor<512xf32>)
// CHECK: kiln.reduce sum
// CHECK: kiln.mul
// CHECK: kiln.reduce sum
// CHECK: return %[[F]]#0, %[[F]]#1
func.func @two_sums(%dy: tensor<512x128xf32>, %xhat: tensor<512x128xf32>) -> (tensor<512xf32>, tensor<512xf32>) {
  %a = kiln.reduce sum %dy, dims = [1] : tensor<512x128xf32> -> tensor<512xf32>
  %p = kiln.mul %dy, %xhat : tensor<512x128xf32>
  %b = kiln.reduce sum %p, dims = [1] : tensor<512x128xf32> -> tensor<512xf32>
  return %a, %b : tensor<512xf32>, tensor<512xf32>
}

// -----

// Not merged: siblings that share only a 16-byte input (below sibling-min-bytes) and read disjoint large ones stay two kernels.
// CHECK-LABEL: func.func @small_shared
// CHECK: kiln.fusion loop(%{{.*}}, %{{.*}}) : (tensor<4xf32>, tensor<64x4xf32>) -> tensor<64x4xf32>
// CHECK: kiln.all_reduce
// CHECK: kiln.fusion loop(%{{.*}}, %{{.*}}) : (tensor<4xf32>, tensor<32x4xf32>) -> tensor<32x4xf32>
// CHECK-NOT: multi_output
func.func @small_shared(%s: tensor<4xf32>, %x: tensor<64x4xf32>, %y: tensor<32x4xf32>) -> (tensor<64x4xf32>, tensor<32x4xf32>) {
  %sx = kiln.broadcast_in_dim %s, dims = [1] : tensor<4xf32> -> tensor<64x4xf32>
  %a = kiln.mul %x, %sx : tensor<64x4xf32>
  %ea = kiln.all_reduce sum %a : tensor<64x4xf32>
  %sy = kiln.broadcast_in_dim %s, dims = [1] : tensor<4xf32> -> tensor<32x4xf32>
  %b = kiln.mul %y, %sy : tensor<32x4xf32>
  %eb = kiln.all_reduce sum %b : tensor<32x4xf32>
  return %ea, %eb : tensor<64x4xf32>, tensor<32x4xf32>
}

// -----

// Not merged: two readers of %x where one depends on the other through a matmul; one kernel for both would have to wait for itself.
// CHECK-LABEL: func.func @sibling_cycle
// CHECK-SAME: (%[[X:.*]]: tensor<64x64xf32>, %[[W:.*]]: tensor<64x64xf32>)
// CHECK: %[[A:.*]] = kiln.fusion loop(%[[X]])
// CHECK: kiln.exp
// CHECK: %[[D:.*]] = kiln.dot_general %[[A]], %[[W]]
// CHECK: %[[B:.*]] = kiln.fusion loop(%[[X]], %[[D]])
// CHECK: kiln.mul
// CHECK-NOT: multi_output
func.func @sibling_cycle(%x: tensor<64x64xf32>, %w: tensor<64x64xf32>) -> (tensor<64x64xf32>, tensor<64x64xf32>) {
  %a = kiln.exp %x : tensor<64x64xf32>
  %d = kiln.dot_general %a, %w, batch = [] x [], contract = [1] x [0] : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
  %b = kiln.mul %x, %d : tensor<64x64xf32>
  %r = kiln.all_reduce sum %b : tensor<64x64xf32>
  return %d, %r : tensor<64x64xf32>, tensor<64x64xf32>
}
