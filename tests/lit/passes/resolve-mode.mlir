// RUN: kiln-opt %s -kiln-resolve-mode=mode=train | FileCheck %s --check-prefix=TRAIN
// RUN: kiln-opt %s -kiln-resolve-mode=mode=eval | FileCheck %s --check-prefix=EVAL
// RUN: not kiln-opt %s -kiln-resolve-mode=mode=test 2>&1 | FileCheck %s --check-prefix=BAD
//
// kiln-resolve-mode (passes/ResolveMode.cpp) on a batch norm without scale
// and bias, followed by dropout: the training step normalizes with the
// batch's mean and updates the running mean; the eval step normalizes with
// the running mean, drops nothing and updates nothing.

// TRAIN-LABEL: func.func @norm
// TRAIN-NOT: kiln.mode_select
// TRAIN: %[[MEAN:.*]] = kiln.reduce mean %arg0
// TRAIN: %[[WIDE:.*]] = kiln.broadcast_in_dim %[[MEAN]]
// TRAIN: %[[C:.*]] = kiln.sub %arg0, %[[WIDE]]
// TRAIN: kiln.dropout %[[C]], %arg2
// TRAIN: %[[NEW:.*]] = kiln.add
// TRAIN: return %{{.*}}, %[[NEW]] : tensor<f32>, tensor<3xf32>

// EVAL-LABEL: func.func @norm
// EVAL-SAME: -> (tensor<f32> {kiln.role = #kiln.role<loss>})
// EVAL-NOT: kiln.reduce mean %arg0
// EVAL: %[[WIDE:.*]] = kiln.broadcast_in_dim %arg1
// EVAL: %[[C:.*]] = kiln.sub %arg0, %[[WIDE]]
// EVAL-NOT: kiln.dropout
// EVAL-NOT: kiln.mode_select
// EVAL: %[[L:.*]] = kiln.reduce sum %[[C]]
// EVAL-NEXT: return %[[L]] : tensor<f32>

// BAD: kiln-resolve-mode: mode=test: expected train or eval

func.func @norm(%x: tensor<4x3xf32> {kiln.role = #kiln.role<input>},
                %running: tensor<3xf32> {kiln.role = #kiln.role<model_state>, kiln.init = #kiln.init<kind = zeros>},
                %step: tensor<i64> {kiln.role = #kiln.role<step>, kiln.init = #kiln.init<kind = zeros>})
    -> (tensor<f32> {kiln.role = #kiln.role<loss>},
        tensor<3xf32> {kiln.role = #kiln.role<model_state>, kiln.updates = 1 : i64}) {
  %batch = kiln.reduce mean %x, dims = [0] : tensor<4x3xf32> -> tensor<3xf32>
  %mean = kiln.mode_select %batch, %running : tensor<3xf32>
  %wide = kiln.broadcast_in_dim %mean, dims = [1] : tensor<3xf32> -> tensor<4x3xf32>
  %c = kiln.sub %x, %wide : tensor<4x3xf32>
  %d = kiln.dropout %c, %step, rate = 5.000000e-01, seed = 3 : tensor<4x3xf32>
  %l = kiln.reduce sum %d, dims = [0, 1] : tensor<4x3xf32> -> tensor<f32>
  %keep = kiln.constant dense<0.9> : tensor<3xf32>
  %take = kiln.constant dense<0.1> : tensor<3xf32>
  %old = kiln.mul %running, %keep : tensor<3xf32>
  %part = kiln.mul %batch, %take : tensor<3xf32>
  %new = kiln.add %old, %part : tensor<3xf32>
  return %l, %new : tensor<f32>, tensor<3xf32>
}
