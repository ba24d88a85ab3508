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

// A channel reduction ([N, C, H, W] over N, H and W: a convolution's bias
// gradient): H and W first (a row reduction with N x C results), then N
// (a column reduction of C results); bf16 summed in f32, rounded once. A
// batch norm's mean over 256 x 56 x 56 elements per channel: its column
// stage (256 rows) is too short to split again; over 4096 images it is
// split as any column reduction is.
// CHECK-LABEL: func.func @channels
// CHECK: %[[C:.*]] = kiln.convert %{{.*}} : tensor<128x6x28x28xbf16> -> tensor<128x6x28x28xf32>
// CHECK: %[[R:.*]] = kiln.reduce sum %[[C]], dims = [2, 3] : tensor<128x6x28x28xf32> -> tensor<128x6xf32>
// CHECK: %[[S:.*]] = kiln.reduce sum %[[R]], dims = [0] : tensor<128x6xf32> -> tensor<6xf32>
// CHECK: kiln.convert %[[S]] : tensor<6xf32> -> tensor<6xbf16>
// CHECK: %[[M:.*]] = kiln.reduce mean %{{.*}}, dims = [2, 3] : tensor<256x64x56x56xf32> -> tensor<256x64xf32>
// CHECK: kiln.reduce mean %[[M]], dims = [0] : tensor<256x64xf32> -> tensor<64xf32>
// CHECK: %[[L:.*]] = kiln.reduce max %{{.*}}, dims = [3] : tensor<4096x2x3x5xf32> -> tensor<4096x2x3xf32>
// CHECK: %[[G:.*]] = kiln.reshape %[[L]] : tensor<4096x2x3xf32> -> tensor<256x16x2x3xf32>
// CHECK: %[[P:.*]] = kiln.reduce max %[[G]], dims = [1] : tensor<256x16x2x3xf32> -> tensor<256x2x3xf32>
// CHECK: kiln.reduce max %[[P]], dims = [0] : tensor<256x2x3xf32> -> tensor<2x3xf32>
func.func @channels(%x: tensor<128x6x28x28xbf16>, %y: tensor<256x64x56x56xf32>,
                    %z: tensor<4096x2x3x5xf32>)
    -> (tensor<6xbf16>, tensor<64xf32>, tensor<2x3xf32>) {
  %r = kiln.reduce sum %x, dims = [0, 2, 3] : tensor<128x6x28x28xbf16> -> tensor<6xbf16>
  %m = kiln.reduce mean %y, dims = [0, 2, 3] : tensor<256x64x56x56xf32> -> tensor<64xf32>
  %l = kiln.reduce max %z, dims = [0, 3] : tensor<4096x2x3x5xf32> -> tensor<2x3xf32>
  return %r, %m, %l : tensor<6xbf16>, tensor<64xf32>, tensor<2x3xf32>
}

// -----

// Left alone: a row reduction, too few rows, integers, a bias gradient
// (the weight gradient's cuBLASLt epilogue sums it), and enough results
// (65536) for threads enough; and channel reductions with a middle
// dimension reduced (the trailing ones are not all reduced), a single
// trailing element, too few elements or results enough.
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

// CHECK-LABEL: func.func @channels_kept
// CHECK-NOT: kiln.reshape
// CHECK-NOT: dims = [3]
// CHECK-NOT: dims = [2, 3]
// CHECK: return
func.func @channels_kept(%a: tensor<64x4x32x8xf32>, %b: tensor<4096x8x1xf32>,
                         %c: tensor<4x4x8x8xf32>, %d: tensor<64x40000x4x4xf32>)
    -> (tensor<4x8xf32>, tensor<8xf32>, tensor<4xf32>, tensor<40000xf32>) {
  %middle = kiln.reduce sum %a, dims = [0, 2] : tensor<64x4x32x8xf32> -> tensor<4x8xf32>
  %unit = kiln.reduce sum %b, dims = [0, 2] : tensor<4096x8x1xf32> -> tensor<8xf32>
  %small = kiln.reduce sum %c, dims = [0, 2, 3] : tensor<4x4x8x8xf32> -> tensor<4xf32>
  %many = kiln.reduce sum %d, dims = [0, 2, 3] : tensor<64x40000x4x4xf32> -> tensor<40000xf32>
  return %middle, %unit, %small, %many : tensor<4x8xf32>, tensor<8xf32>, tensor<4xf32>, tensor<40000xf32>
}

