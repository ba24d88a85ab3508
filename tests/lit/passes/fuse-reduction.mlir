// RUN: kiln-opt %s -split-input-file --kiln-fuse="shared-memory-bytes=4096" | FileCheck %s

// Reduction fusion: a softmax (as kiln-decompose writes it) with its scaling producer and its consumer is one kernel; the row is broadcast back inside it.
// CHECK-LABEL: func.func @softmax
// CHECK: %[[F:.*]] = kiln.fusion reduction(%{{.*}}, %{{.*}}) : (tensor<8x64xf32>, tensor<8x64xf32>) -> tensor<8x64xf32> {
// CHECK: kiln.mul
// CHECK: kiln.reduce max
// CHECK: kiln.broadcast_in_dim
// CHECK: kiln.exp
// CHECK: kiln.reduce sum
// CHECK: kiln.div
// CHECK: kiln.mul
// CHECK: kiln.yield
// CHECK-NEXT: }
// CHECK-NEXT: return %[[F]]
func.func @softmax(%x: tensor<8x64xf32>, %y: tensor<8x64xf32>) -> tensor<8x64xf32> {
  %c = kiln.constant dense<0.125> : tensor<8x64xf32>
  %s = kiln.mul %x, %c : tensor<8x64xf32>
  %m = kiln.reduce max %s, dims = [1] : tensor<8x64xf32> -> tensor<8xf32>
  %mb = kiln.broadcast_in_dim %m, dims = [0] : tensor<8xf32> -> tensor<8x64xf32>
  %d = kiln.sub %s, %mb : tensor<8x64xf32>
  %e = kiln.exp %d : tensor<8x64xf32>
  %sum = kiln.reduce sum %e, dims = [1] : tensor<8x64xf32> -> tensor<8xf32>
  %sb = kiln.broadcast_in_dim %sum, dims = [0] : tensor<8xf32> -> tensor<8x64xf32>
  %p = kiln.div %e, %sb : tensor<8x64xf32>
  %o = kiln.mul %p, %y : tensor<8x64xf32>
  return %o : tensor<8x64xf32>
}

// -----

// Reduction fusion of a column reduction (a bias gradient) with its elementwise producers and the elementwise update after it.
// CHECK-LABEL: func.func @bias_grad
// CHECK: %[[F:.*]] = kiln.fusion reduction({{.*}}) : (tensor<256x32xf32>, tensor<256x32xf32>, tensor<32xf32>) -> tensor<32xf32> {
// CHECK: kiln.compare gt
// CHECK: kiln.select
// CHECK: kiln.reduce sum %{{.*}}, dims = [0]
// CHECK: kiln.mul
// CHECK: kiln.sub
// CHECK: }
// CHECK-NEXT: return %[[F]]
func.func @bias_grad(%g: tensor<256x32xf32>, %pre: tensor<256x32xf32>, %b: tensor<32xf32>) -> tensor<32xf32> {
  %z = kiln.constant dense<0.0> : tensor<256x32xf32>
  %p = kiln.compare gt, %pre, %z : tensor<256x32xf32>
  %m = kiln.select %p, %g, %z : tensor<256x32xi1>, tensor<256x32xf32>
  %s = kiln.reduce sum %m, dims = [0] : tensor<256x32xf32> -> tensor<32xf32>
  %lr = kiln.constant dense<0.01> : tensor<32xf32>
  %u = kiln.mul %s, %lr : tensor<32xf32>
  %n = kiln.sub %b, %u : tensor<32xf32>
  return %n : tensor<32xf32>
}

// -----

// Not one kernel: reductions over different dimensions of the same tensor (rows and columns) need different kernels; the cheap exp is copied into both.
// CHECK-LABEL: func.func @different_dims
// CHECK: kiln.fusion reduction
// CHECK: kiln.exp
// CHECK: kiln.reduce sum %{{.*}}, dims = [1]
// CHECK-NOT: kiln.reduce
// CHECK: }
// CHECK: kiln.fusion reduction
// CHECK: kiln.exp
// CHECK: kiln.reduce sum %{{.*}}, dims = [0]
// CHECK-NOT: kiln.reduce
// CHECK: return
func.func @different_dims(%x: tensor<64x32xf32>) -> (tensor<64xf32>, tensor<32xf32>) {
  %e = kiln.exp %x : tensor<64x32xf32>
  %r = kiln.reduce sum %e, dims = [1] : tensor<64x32xf32> -> tensor<64xf32>
  %c = kiln.reduce sum %e, dims = [0] : tensor<64x32xf32> -> tensor<32xf32>
  return %r, %c : tensor<64xf32>, tensor<32xf32>
}

// -----

// Not one kernel: a 16 KiB row does not fit the 4 KiB shared-memory budget, so the row maximum is not broadcast back in the reducing kernel.
// CHECK-LABEL: func.func @row_too_long
// CHECK: %[[M:.*]] = kiln.fusion reduction(%{{.*}}) : (tensor<4x4096xf32>) -> tensor<4xf32>
// CHECK: kiln.reduce max
// CHECK-NOT: kiln.sub
// CHECK: %[[D:.*]] = kiln.fusion loop(%[[M]], %{{.*}}) : (tensor<4xf32>, tensor<4x4096xf32>) -> tensor<4x4096xf32>
// CHECK: kiln.broadcast_in_dim
// CHECK: kiln.sub
// CHECK: return %[[D]]
func.func @row_too_long(%x: tensor<4x4096xf32>) -> tensor<4x4096xf32> {
  %m = kiln.reduce max %x, dims = [1] : tensor<4x4096xf32> -> tensor<4xf32>
  %mb = kiln.broadcast_in_dim %m, dims = [0] : tensor<4xf32> -> tensor<4x4096xf32>
  %d = kiln.sub %x, %mb : tensor<4x4096xf32>
  return %d : tensor<4x4096xf32>
}

// -----

// One kernel: the budget counts the row as the kernel reads it, in the
// input's stored type (a bf16 row of 1536 is 3 KiB, within 4 KiB; the f32
// values the reduction works on would be 6 KiB).
// CHECK-LABEL: func.func @bf16_row_in_stored_bytes
// CHECK: %[[R:.*]] = kiln.fusion reduction(%{{.*}}) : (tensor<4x1536xbf16>) -> tensor<4x1536xf32>
// CHECK: kiln.reduce max
// CHECK: kiln.broadcast_in_dim
// CHECK: kiln.sub
// CHECK: return %[[R]]
func.func @bf16_row_in_stored_bytes(%x: tensor<4x1536xbf16>) -> tensor<4x1536xf32> {
  %c = kiln.convert %x : tensor<4x1536xbf16> -> tensor<4x1536xf32>
  %m = kiln.reduce max %c, dims = [1] : tensor<4x1536xf32> -> tensor<4xf32>
  %mb = kiln.broadcast_in_dim %m, dims = [0] : tensor<4xf32> -> tensor<4x1536xf32>
  %d = kiln.sub %c, %mb : tensor<4x1536xf32>
  return %d : tensor<4x1536xf32>
}

// -----

// Not one kernel: each input's row is 3 KiB, and a kernel reading both
// would hold both rows (6 KiB) to reuse them after the reduction; the add
// is a kernel of its own, and the reducing kernel holds its one row.
// CHECK-LABEL: func.func @two_rows_over_budget
// CHECK: %[[S:.*]] = kiln.fusion loop(%{{.*}}, %{{.*}}) : (tensor<4x768xf32>, tensor<4x768xf32>) -> tensor<4x768xf32>
// CHECK: kiln.add
// CHECK: %[[D:.*]] = kiln.fusion reduction(%[[S]]) : (tensor<4x768xf32>) -> tensor<4x768xf32>
// CHECK: kiln.reduce max
// CHECK: kiln.sub
// CHECK: return %[[D]]
func.func @two_rows_over_budget(%x: tensor<4x768xf32>, %y: tensor<4x768xf32>) -> tensor<4x768xf32> {
  %s = kiln.add %x, %y : tensor<4x768xf32>
  %m = kiln.reduce max %s, dims = [1] : tensor<4x768xf32> -> tensor<4xf32>
  %mb = kiln.broadcast_in_dim %m, dims = [0] : tensor<4xf32> -> tensor<4x768xf32>
  %d = kiln.sub %s, %mb : tensor<4x768xf32>
  return %d : tensor<4x768xf32>
}
