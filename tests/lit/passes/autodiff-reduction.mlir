// RUN: kiln-opt %s -split-input-file -verify-diagnostics -kiln-autodiff -canonicalize -cse | FileCheck %s
//
// kiln-autodiff on reductions (ir/gradients/Reduction.cpp). %G is the incoming
// gradient, a broadcast of the seed 1.0.

// reduce sum: the gradient is broadcast back over the reduced dimensions.
// CHECK-LABEL: func.func @reduce_sum
// CHECK: %[[G:.*]] = kiln.broadcast_in_dim %{{.*}}, dims = [] : tensor<f32> -> tensor<3xf32>
// CHECK: %[[DX:.*]] = kiln.broadcast_in_dim %[[G]], dims = [1] : tensor<3xf32> -> tensor<2x3x4xf32>
// CHECK: return %{{.*}}, %[[DX]]
func.func @reduce_sum(%x: tensor<2x3x4xf32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %y = kiln.reduce sum %x, dims = [0, 2] : tensor<2x3x4xf32> -> tensor<3xf32>
  %l = kiln.reduce sum %y, dims = [0] : tensor<3xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// reduce mean: broadcast back and divided by the 3 reduced elements.
// CHECK-LABEL: func.func @reduce_mean
// CHECK-DAG: %[[THIRD:.*]] = kiln.constant dense<0.333333343> : tensor<2x3xf32>
// CHECK: %[[G:.*]] = kiln.broadcast_in_dim %{{.*}}, dims = [] : tensor<f32> -> tensor<2xf32>
// CHECK: %[[B:.*]] = kiln.broadcast_in_dim %[[G]], dims = [0] : tensor<2xf32> -> tensor<2x3xf32>
// CHECK: %[[DX:.*]] = kiln.mul %[[B]], %[[THIRD]]
// CHECK: return %{{.*}}, %[[DX]]
func.func @reduce_mean(%x: tensor<2x3xf32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %y = kiln.reduce mean %x, dims = [1] : tensor<2x3xf32> -> tensor<2xf32>
  %l = kiln.reduce sum %y, dims = [0] : tensor<2xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// reduce max: the gradient goes to the elements equal to the maximum, split
// evenly among ties.
// CHECK-LABEL: func.func @reduce_max
// CHECK: %[[Y:.*]] = kiln.reduce max %arg0, dims = [1]
// CHECK: %[[G:.*]] = kiln.broadcast_in_dim %{{.*}}, dims = [] : tensor<f32> -> tensor<2xf32>
// CHECK: %[[YB:.*]] = kiln.broadcast_in_dim %[[Y]], dims = [0] : tensor<2xf32> -> tensor<2x3xf32>
// CHECK: %[[HIT:.*]] = kiln.compare eq, %arg0, %[[YB]]
// CHECK: %[[HITF:.*]] = kiln.convert %[[HIT]] : tensor<2x3xi1> -> tensor<2x3xf32>
// CHECK: %[[COUNT:.*]] = kiln.reduce sum %[[HITF]], dims = [1]
// CHECK: %[[SHARE:.*]] = kiln.div %[[G]], %[[COUNT]]
// CHECK: %[[SB:.*]] = kiln.broadcast_in_dim %[[SHARE]], dims = [0]
// CHECK: %[[DX:.*]] = kiln.mul %[[HITF]], %[[SB]]
// CHECK: return %{{.*}}, %[[DX]]
func.func @reduce_max(%x: tensor<2x3xf32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %y = kiln.reduce max %x, dims = [1] : tensor<2x3xf32> -> tensor<2xf32>
  %l = kiln.reduce sum %y, dims = [0] : tensor<2xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// reduce min: the gradient goes to the elements equal to the minimum, split
// evenly among ties.
// CHECK-LABEL: func.func @reduce_min
// CHECK: %[[Y:.*]] = kiln.reduce min %arg0, dims = [0]
// CHECK: %[[G:.*]] = kiln.broadcast_in_dim %{{.*}}, dims = [] : tensor<f32> -> tensor<3xf32>
// CHECK: %[[YB:.*]] = kiln.broadcast_in_dim %[[Y]], dims = [1] : tensor<3xf32> -> tensor<2x3xf32>
// CHECK: %[[HIT:.*]] = kiln.compare eq, %arg0, %[[YB]]
// CHECK: %[[HITF:.*]] = kiln.convert %[[HIT]] : tensor<2x3xi1> -> tensor<2x3xf32>
// CHECK: %[[COUNT:.*]] = kiln.reduce sum %[[HITF]], dims = [0]
// CHECK: %[[SHARE:.*]] = kiln.div %[[G]], %[[COUNT]]
// CHECK: %[[SB:.*]] = kiln.broadcast_in_dim %[[SHARE]], dims = [1]
// CHECK: %[[DX:.*]] = kiln.mul %[[HITF]], %[[SB]]
// CHECK: return %{{.*}}, %[[DX]]
func.func @reduce_min(%x: tensor<2x3xf32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %y = kiln.reduce min %x, dims = [0] : tensor<2x3xf32> -> tensor<3xf32>
  %l = kiln.reduce sum %y, dims = [0] : tensor<3xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// argmax: the index result carries no gradient.
// CHECK-LABEL: func.func @argmax
// CHECK: %[[ZERO:.*]] = kiln.constant dense<0.000000e+00> : tensor<2x3xf32>
// CHECK: return %{{.*}}, %[[ZERO]]
// expected-warning@+1 {{parameter argument 0 of @argmax receives no gradient from the loss; its gradient is zero}}
func.func @argmax(%x: tensor<2x3xf32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %i = kiln.argmax %x, dim = 1 : tensor<2x3xf32> -> tensor<2xi64>
  %y = kiln.convert %i : tensor<2xi64> -> tensor<2xf32>
  %l = kiln.reduce sum %y, dims = [0] : tensor<2xf32> -> tensor<f32>
  return %l : tensor<f32>
}
