// RUN: kiln-opt %s -split-input-file --kiln-fuse=bias-gradient-epilogues=true | FileCheck %s
// RUN: kiln-opt %s -split-input-file --kiln-fuse | FileCheck %s --check-prefix=OFF

// A dense layer's weight gradient dW = X^T dY and its bias gradient (dY
// summed over the batch) become one gemm fusion with two results, the
// dot_general first (cuBLASLt's BGRADA epilogue); the bias's update reads
// the second result. Off by default (CPU): the reduce joins the update.
// CHECK-LABEL: func.func @dense_grad
// CHECK-SAME: (%[[X:.*]]: tensor<32x64xbf16>, %[[DY:.*]]: tensor<32x16xbf16>, %[[B:.*]]: tensor<16xbf16>)
// CHECK: %[[G:.*]]:2 = kiln.fusion gemm(%[[X]], %[[DY]])
// CHECK-NEXT: ^bb0(%[[XA:.*]]: tensor<32x64xbf16>, %[[DA:.*]]: tensor<32x16xbf16>):
// CHECK-NEXT: %[[D:.*]] = kiln.dot_general %[[XA]], %[[DA]], batch = [] x [], contract = [0] x [0]
// CHECK-NEXT: %[[S:.*]] = kiln.reduce sum %[[DA]], dims = [0]
// CHECK-NEXT: kiln.yield %[[D]], %[[S]]
// CHECK: kiln.fusion loop(%[[B]], %[[G]]#1)
// OFF-LABEL: func.func @dense_grad
// OFF: kiln.dot_general
// OFF-NOT: kiln.fusion gemm
// OFF: kiln.fusion reduction
func.func @dense_grad(%x: tensor<32x64xbf16>, %dy: tensor<32x16xbf16>, %b: tensor<16xbf16>) -> (tensor<64x16xbf16>, tensor<16xbf16>) {
  %dw = kiln.dot_general %x, %dy, batch = [] x [], contract = [0] x [0] : (tensor<32x64xbf16>, tensor<32x16xbf16>) -> tensor<64x16xbf16>
  %db = kiln.reduce sum %dy, dims = [0] : tensor<32x16xbf16> -> tensor<16xbf16>
  %nb = kiln.sub %b, %db : tensor<16xbf16>
  return %dw, %nb : tensor<64x16xbf16>, tensor<16xbf16>
}

// -----

// Activations [batch, seq, hidden]: the rows are two dimensions.
// CHECK-LABEL: func.func @dense_grad_3d
// CHECK: kiln.fusion gemm
// CHECK: kiln.dot_general {{.*}} contract = [0, 1] x [0, 1]
// CHECK-NEXT: kiln.reduce sum {{.*}} dims = [0, 1]
func.func @dense_grad_3d(%x: tensor<2x8x64xf32>, %dy: tensor<2x8x16xf32>) -> (tensor<64x16xf32>, tensor<16xf32>) {
  %dw = kiln.dot_general %x, %dy, batch = [] x [], contract = [0, 1] x [0, 1] : (tensor<2x8x64xf32>, tensor<2x8x16xf32>) -> tensor<64x16xf32>
  %db = kiln.reduce sum %dy, dims = [0, 1] : tensor<2x8x16xf32> -> tensor<16xf32>
  return %dw, %db : tensor<64x16xf32>, tensor<16xf32>
}

// -----

// Not a bias gradient: the sum runs over the other dimension, or the rhs
// is the one reduced over its free dimension; f64 (cuBLASLt has no f64
// epilogues).
// CHECK-LABEL: func.func @not_bias_gradients
// CHECK-NOT: kiln.fusion gemm
// CHECK: return
func.func @not_bias_gradients(%x: tensor<32x64xf32>, %dy: tensor<32x16xf32>, %x64: tensor<32x64xf64>, %dy64: tensor<32x16xf64>) -> (tensor<64x16xf32>, tensor<32xf32>, tensor<64x16xf64>, tensor<16xf64>) {
  %dw = kiln.dot_general %x, %dy, batch = [] x [], contract = [0] x [0] : (tensor<32x64xf32>, tensor<32x16xf32>) -> tensor<64x16xf32>
  %rows = kiln.reduce sum %dy, dims = [1] : tensor<32x16xf32> -> tensor<32xf32>
  %dw64 = kiln.dot_general %x64, %dy64, batch = [] x [], contract = [0] x [0] : (tensor<32x64xf64>, tensor<32x16xf64>) -> tensor<64x16xf64>
  %db64 = kiln.reduce sum %dy64, dims = [0] : tensor<32x16xf64> -> tensor<16xf64>
  return %dw, %rows, %dw64, %db64 : tensor<64x16xf32>, tensor<32xf32>, tensor<64x16xf64>, tensor<16xf64>
}
