// RUN: kiln-opt %s -split-input-file --kiln-autodiff --kiln-accumulate-gradients="grad-accum=2" | FileCheck %s
// RUN: kiln-opt %s -split-input-file --kiln-autodiff --kiln-accumulate-gradients="grad-accum=2" --kiln-distribute="strategy=data-parallel world-size=2" | FileCheck %s --check-prefix=DIST
// RUN: kiln-opt %s -split-input-file --kiln-autodiff --kiln-accumulate-gradients="grad-accum=2" --kiln-distribute="strategy=data-parallel world-size=2 bucket-mb=0.0001" | FileCheck %s --check-prefix=SMALL
// RUN: kiln-opt %s -split-input-file --kiln-autodiff --kiln-accumulate-gradients="grad-accum=1" | FileCheck %s --check-prefix=ONE
//
// kiln-accumulate-gradients (passes/AccumulateGradients.cpp): with K = 2 the
// batch arguments take 2*B rows, the forward and backward computation runs
// once per micro-batch (rows [0, B), then [B, 2B)), each gradient is added
// to its running sum as soon as the second micro-batch produces it, and the
// sums and the loss are divided by K.

// Two micro-batches of 4 rows: clone 0 computes everything (its loss and
// all four gradients) before clone 1 reads its slice; the loss and every
// gradient are summed right after clone 1 produces them, then divided by 2.
// Each slice and each running-sum step is a kernel of its own (a
// kiln.fusion, which kiln-fuse leaves alone).
// CHECK-LABEL: func.func @mlp2
// CHECK-SAME: %arg0: tensor<8x8xf32> {kiln.role = #kiln.role<input>}
// CHECK-SAME: %arg5: tensor<8xi32> {kiln.role = #kiln.role<label>}
// CHECK: %[[X0:.*]] = kiln.fusion loop(%arg0) : (tensor<8x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: ^bb0
// CHECK-NEXT: kiln.slice %{{.*}}, start = [0, 0], limit = [4, 8], strides = [1, 1] : tensor<8x8xf32> -> tensor<4x8xf32>
// CHECK: kiln.fusion loop(%arg5) : (tensor<8xi32>) -> tensor<4xi32>
// CHECK-NEXT: ^bb0
// CHECK-NEXT: kiln.slice %{{.*}}, start = [0], limit = [4], strides = [1] : tensor<8xi32> -> tensor<4xi32>
// CHECK: kiln.dot_general %[[X0]], %arg1
// CHECK: %[[L0:.*]] = kiln.reduce mean
// CHECK: %[[DB2_0:.*]] = kiln.reduce sum {{.*}} -> tensor<3xf32>
// CHECK: %[[DW2_0:.*]] = kiln.dot_general {{.*}} -> tensor<6x3xf32>
// CHECK: %[[DB1_0:.*]] = kiln.reduce sum {{.*}} -> tensor<6xf32>
// CHECK: %[[DW1_0:.*]] = kiln.dot_general %[[X0]], {{.*}} -> tensor<8x6xf32>
// CHECK-NEXT: %[[X1:.*]] = kiln.fusion loop(%arg0) : (tensor<8x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: ^bb0
// CHECK-NEXT: kiln.slice %{{.*}}, start = [4, 0], limit = [8, 8], strides = [1, 1] : tensor<8x8xf32> -> tensor<4x8xf32>
// CHECK: kiln.dot_general %[[X1]], %arg1
// CHECK: %[[L1:.*]] = kiln.reduce mean
// CHECK-NEXT: %[[LOSS:.*]] = kiln.fusion loop(%[[L0]], %[[L1]]) : (tensor<f32>, tensor<f32>) -> tensor<f32>
// CHECK-NEXT: ^bb0(%[[A:.*]]: tensor<f32>, %[[B:.*]]: tensor<f32>):
// CHECK-NEXT: %[[S:.*]] = kiln.add %[[A]], %[[B]] : tensor<f32>
// CHECK-NEXT: %[[K:.*]] = kiln.constant dense<2.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[M:.*]] = kiln.div %[[S]], %[[K]] : tensor<f32>
// CHECK-NEXT: kiln.yield %[[M]] : tensor<f32>
// CHECK: %[[DB2_1:.*]] = kiln.reduce sum {{.*}} -> tensor<3xf32>
// CHECK-NEXT: %[[GB2:.*]] = kiln.fusion loop(%[[DB2_0]], %[[DB2_1]]) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
// CHECK: %[[DW2_1:.*]] = kiln.dot_general {{.*}} -> tensor<6x3xf32>
// CHECK-NEXT: %[[GW2:.*]] = kiln.fusion loop(%[[DW2_0]], %[[DW2_1]])
// CHECK: %[[DB1_1:.*]] = kiln.reduce sum {{.*}} -> tensor<6xf32>
// CHECK-NEXT: %[[GB1:.*]] = kiln.fusion loop(%[[DB1_0]], %[[DB1_1]])
// CHECK: %[[DW1_1:.*]] = kiln.dot_general %[[X1]], {{.*}} -> tensor<8x6xf32>
// CHECK-NEXT: %[[GW1:.*]] = kiln.fusion loop(%[[DW1_0]], %[[DW1_1]]) : (tensor<8x6xf32>, tensor<8x6xf32>) -> tensor<8x6xf32>
// CHECK-NEXT: ^bb0
// CHECK-NEXT: kiln.add
// CHECK-NEXT: kiln.constant dense<2.000000e+00> : tensor<8x6xf32>
// CHECK-NEXT: kiln.div
// CHECK-NEXT: kiln.yield
// CHECK-NEXT: }
// CHECK-NEXT: return %[[LOSS]], %[[GW1]], %[[GB1]], %[[GW2]], %[[GB2]] : tensor<f32>, tensor<8x6xf32>, tensor<6xf32>, tensor<6x3xf32>, tensor<3xf32>
//
// Under data-parallel the one bucket (default size) is packed and
// all-reduced once, after the last micro-batch's last gradient: no
// collective before it.
// DIST-LABEL: func.func @mlp2
// DIST-NOT: kiln.all_reduce
// DIST: kiln.slice %{{.*}}, start = [4, 0], limit = [8, 8]
// DIST-NOT: kiln.all_reduce
// DIST: %[[GW1:.*]] = kiln.fusion loop({{.*}}) : (tensor<8x6xf32>, tensor<8x6xf32>) -> tensor<8x6xf32>
// DIST: %[[FW1:.*]] = kiln.reshape %[[GW1]] : tensor<8x6xf32> -> tensor<48xf32>
// DIST: %[[BUF:.*]] = kiln.concatenate({{.*}}, %[[FW1]], {{.*}} -> tensor<76xf32>
// DIST-NEXT: kiln.all_reduce mean %[[BUF]] : tensor<76xf32>
// DIST-NOT: kiln.all_reduce
// DIST: return
//
// With small buckets the first bucket (b2, w2, b1 of the accumulated
// gradients) is reduced inside the last micro-batch's backward pass, before
// its first-layer weight gradient; still nothing during micro-batch 0.
// SMALL-LABEL: func.func @mlp2
// SMALL-NOT: kiln.all_reduce
// SMALL: kiln.slice %{{.*}}, start = [4, 0], limit = [8, 8]
// SMALL-NOT: kiln.all_reduce
// SMALL: %[[B0:.*]] = kiln.concatenate({{.*}} -> tensor<27xf32>
// SMALL-NEXT: kiln.all_reduce mean %[[B0]] : tensor<27xf32>
// SMALL: kiln.dot_general %{{.*}}, {{.*}} -> tensor<8x6xf32>
// SMALL: %[[B1:.*]] = kiln.concatenate({{.*}} -> tensor<49xf32>
// SMALL-NEXT: kiln.all_reduce mean %[[B1]] : tensor<49xf32>
// SMALL-NOT: kiln.all_reduce
//
// K = 1 leaves the step as it is.
// ONE-LABEL: func.func @mlp2
// ONE-SAME: %arg0: tensor<4x8xf32>
// ONE-NOT: kiln.slice
func.func @mlp2(
    %x: tensor<4x8xf32> {kiln.role = #kiln.role<input>},
    %w1: tensor<8x6xf32> {kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = glorot_uniform, seed = 1>, kiln.name = "w1"},
    %b1: tensor<6xf32> {kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = zeros>, kiln.name = "b1"},
    %w2: tensor<6x3xf32> {kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = glorot_uniform, seed = 2>, kiln.name = "w2"},
    %b2: tensor<3xf32> {kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = zeros>, kiln.name = "b2"},
    %y: tensor<4xi32> {kiln.role = #kiln.role<label>})
    -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %d1 = kiln.dot_general %x, %w1, batch = [] x [], contract = [1] x [0] : (tensor<4x8xf32>, tensor<8x6xf32>) -> tensor<4x6xf32>
  %bb1 = kiln.broadcast_in_dim %b1, dims = [1] : tensor<6xf32> -> tensor<4x6xf32>
  %z1 = kiln.add %d1, %bb1 : tensor<4x6xf32>
  %h = kiln.relu %z1 : tensor<4x6xf32>
  %d2 = kiln.dot_general %h, %w2, batch = [] x [], contract = [1] x [0] : (tensor<4x6xf32>, tensor<6x3xf32>) -> tensor<4x3xf32>
  %bb2 = kiln.broadcast_in_dim %b2, dims = [1] : tensor<3xf32> -> tensor<4x3xf32>
  %z2 = kiln.add %d2, %bb2 : tensor<4x3xf32>
  %l = kiln.softmax_cross_entropy %z2, %y : (tensor<4x3xf32>, tensor<4xi32>) -> tensor<4xf32>
  %m = kiln.reduce mean %l, dims = [0] : tensor<4xf32> -> tensor<f32>
  return %m : tensor<f32>
}

// -----

// Other results: an output with the batch dimension first is concatenated
// (the 2*B rows in order), a float output without one is averaged like the
// loss, and a forward function (no gradients) is left as it is.
// CHECK-LABEL: func.func @outputs
// CHECK-SAME: %arg0: tensor<4x2xf32>
// CHECK-SAME: -> (tensor<f32> {kiln.role = #kiln.role<loss>}, tensor<4x2xf32> {kiln.role = #kiln.role<output>}, tensor<f32> {kiln.role = #kiln.role<output>}, tensor<2xf32>
// CHECK: %[[X0:.*]] = kiln.fusion loop(%arg0) : (tensor<4x2xf32>) -> tensor<2x2xf32>
// CHECK: %[[P0:.*]] = kiln.mul %[[X0]],
// CHECK: %[[M0:.*]] = kiln.reduce max %[[P0]]
// CHECK: %[[X1:.*]] = kiln.fusion loop(%arg0) : (tensor<4x2xf32>) -> tensor<2x2xf32>
// CHECK: %[[P1:.*]] = kiln.mul %[[X1]],
// CHECK: %[[M1:.*]] = kiln.reduce max %[[P1]]
// CHECK-NEXT: %[[MAX:.*]] = kiln.fusion loop(%[[M0]], %[[M1]]) : (tensor<f32>, tensor<f32>) -> tensor<f32>
// CHECK: %[[ROWS:.*]] = kiln.concatenate(%[[P0]], %[[P1]]), dim = 0 : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<4x2xf32>
// CHECK-NEXT: return %{{.*}}, %[[ROWS]], %[[MAX]], %{{.*}} : tensor<f32>, tensor<4x2xf32>, tensor<f32>, tensor<2xf32>
// DIST-LABEL: func.func @outputs
// SMALL-LABEL: func.func @outputs
// CHECK-LABEL: func.func @forward
// CHECK-SAME: %arg0: tensor<2x2xf32>
// CHECK-NOT: kiln.slice
func.func @outputs(
    %x: tensor<2x2xf32> {kiln.role = #kiln.role<input>},
    %w: tensor<2xf32> {kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = ones>, kiln.name = "w"})
    -> (tensor<f32> {kiln.role = #kiln.role<loss>}, tensor<2x2xf32> {kiln.role = #kiln.role<output>},
        tensor<f32> {kiln.role = #kiln.role<output>}) {
  %wb = kiln.broadcast_in_dim %w, dims = [1] : tensor<2xf32> -> tensor<2x2xf32>
  %p = kiln.mul %x, %wb : tensor<2x2xf32>
  %m = kiln.reduce mean %p, dims = [0, 1] : tensor<2x2xf32> -> tensor<f32>
  %s = kiln.reduce max %p, dims = [0, 1] : tensor<2x2xf32> -> tensor<f32>
  return %m, %p, %s : tensor<f32>, tensor<2x2xf32>, tensor<f32>
}
func.func @forward(%x: tensor<2x2xf32> {kiln.role = #kiln.role<input>}) -> (tensor<2x2xf32> {kiln.role = #kiln.role<output>}) {
  return %x : tensor<2x2xf32>
}

// -----

// Dropout and random numbers: each micro-batch draws its own masks and
// numbers (micro-batch 1's seeds are 7 and 9 plus the stride
// 0x9E3779B97F4A7C15, as a signed i64), and its backward pass reuses its
// forward pass's seed.
// CHECK-LABEL: func.func @dropout
// CHECK: kiln.random_uniform %arg2, seed = 9 :
// CHECK: kiln.dropout %{{.*}}, %arg2, rate = 5.000000e-01, seed = 7 :
// CHECK: kiln.dropout %{{.*}}, %arg2, rate = 5.000000e-01, seed = 7 :
// CHECK: kiln.random_uniform %arg2, seed = -7046029254386353122 :
// CHECK: kiln.dropout %{{.*}}, %arg2, rate = 5.000000e-01, seed = -7046029254386353124 :
// CHECK: kiln.dropout %{{.*}}, %arg2, rate = 5.000000e-01, seed = -7046029254386353124 :
// CHECK-NOT: kiln.dropout
// CHECK-NOT: kiln.random_uniform
// DIST-LABEL: func.func @dropout
// SMALL-LABEL: func.func @dropout
func.func @dropout(
    %x: tensor<2x3xf32> {kiln.role = #kiln.role<input>},
    %w: tensor<3xf32> {kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = ones>, kiln.name = "w"},
    %step: tensor<i64> {kiln.role = #kiln.role<step>})
    -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %wb = kiln.broadcast_in_dim %w, dims = [1] : tensor<3xf32> -> tensor<2x3xf32>
  %p = kiln.mul %x, %wb : tensor<2x3xf32>
  %u = kiln.random_uniform %step, seed = 9 : tensor<2x3xf32>
  %n = kiln.add %p, %u : tensor<2x3xf32>
  %d = kiln.dropout %n, %step, rate = 5.000000e-01, seed = 7 : tensor<2x3xf32>
  %m = kiln.reduce mean %d, dims = [0, 1] : tensor<2x3xf32> -> tensor<f32>
  return %m : tensor<f32>
}

// -----

// Model state (a running mean) is updated once per micro-batch, in order, as
// two forward passes would: micro-batch 1 reads what micro-batch 0 wrote, and
// the step returns micro-batch 1's value.
// CHECK-LABEL: func.func @running_mean
// CHECK: %[[OLD0:.*]] = kiln.mul %arg2, %{{.*}} : tensor<3xf32>
// CHECK: %[[NEW0:.*]] = kiln.add %[[OLD0]], %{{.*}} : tensor<3xf32>
// CHECK: %[[OLD1:.*]] = kiln.mul %[[NEW0]], %{{.*}} : tensor<3xf32>
// CHECK: %[[NEW1:.*]] = kiln.add %[[OLD1]], %{{.*}} : tensor<3xf32>
// CHECK: return %{{.*}}, %[[NEW1]], %{{.*}} : tensor<f32>, tensor<3xf32>, tensor<3xf32>
func.func @running_mean(%x: tensor<4x3xf32> {kiln.role = #kiln.role<input>},
                        %w: tensor<3xf32> {kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = ones>},
                        %run: tensor<3xf32> {kiln.role = #kiln.role<model_state>, kiln.init = #kiln.init<kind = zeros>})
    -> (tensor<f32> {kiln.role = #kiln.role<loss>},
        tensor<3xf32> {kiln.role = #kiln.role<model_state>, kiln.updates = 2 : i64}) {
  %m = kiln.reduce mean %x, dims = [0] : tensor<4x3xf32> -> tensor<3xf32>
  %half = kiln.constant dense<5.000000e-01> : tensor<3xf32>
  %old = kiln.mul %run, %half : tensor<3xf32>
  %new = kiln.add %old, %m : tensor<3xf32>
  %p = kiln.mul %m, %w : tensor<3xf32>
  %l = kiln.reduce sum %p, dims = [0] : tensor<3xf32> -> tensor<f32>
  return %l, %new : tensor<f32>, tensor<3xf32>
}
