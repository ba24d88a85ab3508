// RUN: kiln-opt %s -split-input-file --kiln-autodiff --kiln-distribute="strategy=data-parallel world-size=2" | FileCheck %s
// RUN: kiln-opt %s -split-input-file --kiln-autodiff --kiln-distribute="strategy=data-parallel world-size=2 bucket-mb=0.0001" | FileCheck %s --check-prefix=SMALL
// RUN: kiln-opt %s -split-input-file --kiln-autodiff --kiln-distribute="strategy=none" | FileCheck %s --check-prefix=NONE
// RUN: kiln-opt %s -split-input-file --kiln-autodiff --kiln-distribute="strategy=data-parallel grad-compression=bf16" | FileCheck %s --check-prefix=BF16
// mirrored inserts the same collectives as data-parallel (only the module's
// strategy attribute differs):
// RUN: kiln-opt %s -split-input-file --kiln-autodiff --kiln-distribute="strategy=data-parallel world-size=2 bucket-mb=0.0001" > %t.dp
// RUN: kiln-opt %s -split-input-file --kiln-autodiff --kiln-distribute="strategy=mirrored world-size=2 bucket-mb=0.0001" > %t.mirrored
// RUN: grep -c 'kiln.strategy = "mirrored"' %t.mirrored
// RUN: sed 's/kiln.strategy = "mirrored"/kiln.strategy = "data-parallel"/' %t.mirrored | diff %t.dp -
//
// kiln-distribute (passes/Distribute.cpp), data-parallel: the gradients are
// packed into buckets in the order the backward pass produces them, each
// bucket flattened, concatenated, all-reduced (mean) once and sliced back,
// right after its last gradient; the loss joins the last bucket.

// Default buckets (the first closes at 1 MB): all four gradients, in the
// order the backward pass produces them (b2, w2, b1, w1), and the loss fit
// in one, reduced after the last gradient (w1's) is computed; the optimizer
// (a later pass) sees the slices.
// CHECK: module attributes {kiln.strategy = "data-parallel", kiln.world_size = 2 : i64}
// CHECK-LABEL: func.func @mlp2
// CHECK: %[[LOSS:.*]] = kiln.reduce mean
// CHECK: %[[DB2:.*]] = kiln.reduce sum {{.*}} -> tensor<3xf32>
// CHECK: %[[DW2:.*]] = kiln.dot_general {{.*}} -> tensor<6x3xf32>
// CHECK: %[[DB1:.*]] = kiln.reduce sum {{.*}} -> tensor<6xf32>
// CHECK: %[[DW1:.*]] = kiln.dot_general %arg0, {{.*}} -> tensor<8x6xf32>
// CHECK-NEXT: %[[FW2:.*]] = kiln.reshape %[[DW2]] : tensor<6x3xf32> -> tensor<18xf32>
// CHECK-NEXT: %[[FW1:.*]] = kiln.reshape %[[DW1]] : tensor<8x6xf32> -> tensor<48xf32>
// CHECK-NEXT: %[[FL:.*]] = kiln.reshape %[[LOSS]] : tensor<f32> -> tensor<1xf32>
// CHECK-NEXT: %[[BUF:.*]] = kiln.concatenate(%[[DB2]], %[[FW2]], %[[DB1]], %[[FW1]], %[[FL]]), dim = 0 : {{.*}} -> tensor<76xf32>
// CHECK-NEXT: %[[SUM:.*]] = kiln.all_reduce mean %[[BUF]] : tensor<76xf32>
// CHECK-NEXT: %[[RB2:.*]] = kiln.slice %[[SUM]], start = [0], limit = [3], strides = [1]
// CHECK-NEXT: %[[S2:.*]] = kiln.slice %[[SUM]], start = [3], limit = [21], strides = [1]
// CHECK-NEXT: %[[RW2:.*]] = kiln.reshape %[[S2]] : tensor<18xf32> -> tensor<6x3xf32>
// CHECK-NEXT: %[[RB1:.*]] = kiln.slice %[[SUM]], start = [21], limit = [27], strides = [1]
// CHECK-NEXT: %[[S1:.*]] = kiln.slice %[[SUM]], start = [27], limit = [75], strides = [1]
// CHECK-NEXT: %[[RW1:.*]] = kiln.reshape %[[S1]] : tensor<48xf32> -> tensor<8x6xf32>
// CHECK-NEXT: %[[SL:.*]] = kiln.slice %[[SUM]], start = [75], limit = [76], strides = [1]
// CHECK-NEXT: %[[RL:.*]] = kiln.reshape %[[SL]] : tensor<1xf32> -> tensor<f32>
// CHECK-NEXT: return %[[RL]], %[[RW1]], %[[RB1]], %[[RW2]], %[[RB2]]
// CHECK-NOT: kiln.all_reduce
//
// With bucket-mb=0.0001 (104 bytes) the backward pass is split: b2, w2 and
// b1 (27 floats, 108 bytes) close the first bucket, whose all-reduce comes
// before the first layer's weight gradient is computed; w1 and the loss
// make the second.
// SMALL-LABEL: func.func @mlp2
// SMALL: %[[B0:.*]] = kiln.concatenate({{.*}} -> tensor<27xf32>
// SMALL-NEXT: kiln.all_reduce mean %[[B0]] : tensor<27xf32>
// SMALL: kiln.dot_general %arg0, {{.*}} -> tensor<8x6xf32>
// SMALL: %[[B1:.*]] = kiln.concatenate({{.*}} -> tensor<49xf32>
// SMALL-NEXT: kiln.all_reduce mean %[[B1]] : tensor<49xf32>
// SMALL-NOT: kiln.all_reduce
// SMALL: return
//
// NONE-NOT: kiln.all_reduce
// NONE-NOT: kiln.strategy
//
// grad-compression=bf16: the bucket travels in bf16 and comes back to f32
// before the slices; the loss gets its own f32 all-reduce (right after it
// is computed), so the reported loss is not rounded.
// BF16-LABEL: func.func @mlp2
// BF16: %[[LOSS:.*]] = kiln.reduce mean
// BF16: %[[L1:.*]] = kiln.reshape %[[LOSS]] : tensor<f32> -> tensor<1xf32>
// BF16-NEXT: kiln.all_reduce mean %[[L1]] : tensor<1xf32>
// BF16: %[[BUF:.*]] = kiln.concatenate({{.*}} -> tensor<75xf32>
// BF16-NEXT: %[[LOW:.*]] = kiln.convert %[[BUF]] : tensor<75xf32> -> tensor<75xbf16>
// BF16-NEXT: %[[SUM:.*]] = kiln.all_reduce mean %[[LOW]] : tensor<75xbf16>
// BF16-NEXT: %[[BACK:.*]] = kiln.convert %[[SUM]] : tensor<75xbf16> -> tensor<75xf32>
// BF16-NEXT: kiln.slice %[[BACK]], start = [0], limit = [3]
// BF16-NOT: kiln.all_reduce
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

// A function without gradients (a forward model) is left alone; the module
// still records the strategy.
// CHECK-LABEL: func.func @forward
// CHECK-NOT: kiln.all_reduce
// SMALL-LABEL: func.func @forward
// SMALL-NOT: kiln.all_reduce
func.func @forward(%x: tensor<4xf32> {kiln.role = #kiln.role<input>}) -> (tensor<4xf32> {kiln.role = #kiln.role<output>}) {
  %y = kiln.relu %x : tensor<4xf32>
  return %y : tensor<4xf32>
}
