// kiln-split-reductions (passes/SplitReductions.cpp): a column reduction
// with few results over many rows becomes two (R1 groups of R2 rows, then
// the R1 partials); f16/bf16 are summed in f32 and rounded once
// (split-reductions-values.mlir checks that the values do not change).
// RUN: kiln-opt %s -split-input-file --kiln-split-reductions | FileCheck %s

// The layer norm scale gradient's shape: [8, 1024, 768] summed over the
// 8192 rows: 256 groups of 32 rows (the default max-rows; 256 x 768 =
// 196608 partials), then 256 partials per result.
// CHECK-LABEL: func.func @layer_norm_grad
// CHECK: %[[G:.*]] = kiln.reshape %{{.*}} : tensor<8x1024x768xf32> -> tensor<256x32x768xf32>
// CHECK: %[[P:.*]] = kiln.reduce sum %[[G]], dims = [1] : tensor<256x32x768xf32> -> tensor<256x768xf32>
// CHECK: kiln.reduce sum %[[P]], dims = [0] : tensor<256x768xf32> -> tensor<768xf32>

func.func @layer_norm_grad(%x: tensor<8x1024x768xf32>) -> tensor<768xf32> {
  %r = kiln.reduce sum %x, dims = [0, 1] : tensor<8x1024x768xf32> -> tensor<768xf32>
  return %r : tensor<768xf32>
}

// -----

// Many results (16384, below target-partials) over long columns: the
// chains stay at max-rows (256 groups of 32 rows).
// CHECK-LABEL: func.func @wide
// CHECK: kiln.reshape %{{.*}} : tensor<8192x16384xf32> -> tensor<256x32x16384xf32>
func.func @wide(%x: tensor<8192x16384xf32>) -> tensor<16384xf32> {
  %r = kiln.reduce sum %x, dims = [0] : tensor<8192x16384xf32> -> tensor<16384xf32>
  return %r : tensor<16384xf32>
}

// -----

// bf16: converted to f32, summed in two stages, rounded once.
// CHECK-LABEL: func.func @bf16
// CHECK: %[[C:.*]] = kiln.convert %{{.*}} : tensor<4096x8xbf16> -> tensor<4096x8xf32>
// CHECK: kiln.reshape %[[C]] : tensor<4096x8xf32> -> tensor<256x16x8xf32>
// CHECK: kiln.reduce max {{.*}} dims = [1] : tensor<256x16x8xf32> -> tensor<256x8xf32>
// CHECK: kiln.reduce max {{.*}} dims = [0] : tensor<256x8xf32> -> tensor<8xf32>
// CHECK: kiln.convert {{.*}} : tensor<8xf32> -> tensor<8xbf16>
func.func @bf16(%x: tensor<4096x8xbf16>) -> tensor<8xbf16> {
  %r = kiln.reduce max %x, dims = [0] : tensor<4096x8xbf16> -> tensor<8xbf16>
  return %r : tensor<8xbf16>
}

// -----

// Left alone: a row reduction, too few rows, integers, a bias gradient
// (the weight gradient's cuBLASLt epilogue sums it), and enough results
// (65536) for threads enough.
// CHECK-LABEL: func.func @kept
// CHECK-NOT: kiln.reshape
// CHECK: return
func.func @kept(%a: tensor<768x8192xf32>, %b: tensor<512x8xf32>, %c: tensor<8192x8xi32>,
                %x: tensor<8192x64xf32>, %dy: tensor<8192x32xf32>, %e: tensor<2048x65536xf32>)
    -> (tensor<768xf32>, tensor<8xf32>, tensor<8xi32>, tensor<32xf32>, tensor<64x32xf32>, tensor<65536xf32>) {
  %enough = kiln.reduce sum %e, dims = [0] : tensor<2048x65536xf32> -> tensor<65536xf32>
  %rows = kiln.reduce sum %a, dims = [1] : tensor<768x8192xf32> -> tensor<768xf32>
  %few = kiln.reduce sum %b, dims = [0] : tensor<512x8xf32> -> tensor<8xf32>
  %int = kiln.reduce sum %c, dims = [0] : tensor<8192x8xi32> -> tensor<8xi32>
  %db = kiln.reduce sum %dy, dims = [0] : tensor<8192x32xf32> -> tensor<32xf32>
  %dw = kiln.dot_general %x, %dy, batch = [] x [], contract = [0] x [0] : (tensor<8192x64xf32>, tensor<8192x32xf32>) -> tensor<64x32xf32>
  return %rows, %few, %int, %db, %dw, %enough : tensor<768xf32>, tensor<8xf32>, tensor<8xi32>, tensor<32xf32>, tensor<64x32xf32>, tensor<65536xf32>
}

