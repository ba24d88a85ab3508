// RUN: kiln-opt %s -split-input-file -verify-diagnostics -kiln-autodiff -canonicalize -cse | FileCheck %s
//
// kiln-autodiff on data-movement ops (ir/gradients/DataMovement.cpp): each
// gradient is the op's adjoint. %G is the incoming gradient, a broadcast of
// the seed 1.0.

// broadcast_in_dim: the gradient is summed over the new dimension 0 and the
// stretched size-1 dimension (result dim 2), then reshaped to put the 1 back.
// CHECK-LABEL: func.func @broadcast_in_dim
// CHECK: %[[G:.*]] = kiln.broadcast_in_dim %{{.*}}, dims = [] : tensor<f32> -> tensor<2x3x4xf32>
// CHECK: %[[S:.*]] = kiln.reduce sum %[[G]], dims = [0, 2] : tensor<2x3x4xf32> -> tensor<3xf32>
// CHECK: %[[DX:.*]] = kiln.reshape %[[S]] : tensor<3xf32> -> tensor<3x1xf32>
// CHECK: return %{{.*}}, %[[DX]]
func.func @broadcast_in_dim(%x: tensor<3x1xf32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %y = kiln.broadcast_in_dim %x, dims = [1, 2] : tensor<3x1xf32> -> tensor<2x3x4xf32>
  %l = kiln.reduce sum %y, dims = [0, 1, 2] : tensor<2x3x4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// reshape: the gradient is reshaped back.
// CHECK-LABEL: func.func @reshape
// CHECK: %[[G:.*]] = kiln.broadcast_in_dim %{{.*}}, dims = [] : tensor<f32> -> tensor<6xf32>
// CHECK: %[[DX:.*]] = kiln.reshape %[[G]] : tensor<6xf32> -> tensor<2x3xf32>
// CHECK: return %{{.*}}, %[[DX]]
func.func @reshape(%x: tensor<2x3xf32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %y = kiln.reshape %x : tensor<2x3xf32> -> tensor<6xf32>
  %l = kiln.reduce sum %y, dims = [0] : tensor<6xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// transpose: the gradient takes the inverse permutation.
// CHECK-LABEL: func.func @transpose
// CHECK: %[[G:.*]] = kiln.broadcast_in_dim %{{.*}}, dims = [] : tensor<f32> -> tensor<4x2x3xf32>
// CHECK: %[[DX:.*]] = kiln.transpose %[[G]], permutation = [1, 2, 0] : tensor<4x2x3xf32> -> tensor<2x3x4xf32>
// CHECK: return %{{.*}}, %[[DX]]
func.func @transpose(%x: tensor<2x3x4xf32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %y = kiln.transpose %x, permutation = [2, 0, 1] : tensor<2x3x4xf32> -> tensor<4x2x3xf32>
  %l = kiln.reduce sum %y, dims = [0, 1, 2] : tensor<4x2x3xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// slice: the gradient is padded with zeros back to the operand shape.
// CHECK-LABEL: func.func @slice
// CHECK: %[[G:.*]] = kiln.broadcast_in_dim %{{.*}}, dims = [] : tensor<f32> -> tensor<2x3xf32>
// CHECK: %[[DX:.*]] = kiln.pad %[[G]], low = [1, 2], high = [1, 1], value = 0.000000e+00 : tensor<2x3xf32> -> tensor<4x6xf32>
// CHECK: return %{{.*}}, %[[DX]]
func.func @slice(%x: tensor<4x6xf32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %y = kiln.slice %x, start = [1, 2], limit = [3, 5], strides = [1, 1] : tensor<4x6xf32> -> tensor<2x3xf32>
  %l = kiln.reduce sum %y, dims = [0, 1] : tensor<2x3xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A strided slice: [3] is spread to every second element by reshape to
// [3, 1], pad to [3, 2], reshape to [6] and dropping the trailing zero, then
// padded to the operand (x[1], x[3], x[5] get the gradient).
// CHECK-LABEL: func.func @slice_strided
// CHECK: %[[G:.*]] = kiln.broadcast_in_dim %{{.*}}, dims = [] : tensor<f32> -> tensor<3xf32>
// CHECK: %[[A:.*]] = kiln.reshape %[[G]] : tensor<3xf32> -> tensor<3x1xf32>
// CHECK: %[[B:.*]] = kiln.pad %[[A]], low = [0, 0], high = [0, 1], value = 0.000000e+00 : tensor<3x1xf32> -> tensor<3x2xf32>
// CHECK: %[[C:.*]] = kiln.reshape %[[B]] : tensor<3x2xf32> -> tensor<6xf32>
// CHECK: %[[D:.*]] = kiln.slice %[[C]], start = [0], limit = [5], strides = [1] : tensor<6xf32> -> tensor<5xf32>
// CHECK: %[[DX:.*]] = kiln.pad %[[D]], low = [1], high = [1], value = 0.000000e+00 : tensor<5xf32> -> tensor<7xf32>
// CHECK: return %{{.*}}, %[[DX]]
func.func @slice_strided(%x: tensor<7xf32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %y = kiln.slice %x, start = [1], limit = [7], strides = [2] : tensor<7xf32> -> tensor<3xf32>
  %l = kiln.reduce sum %y, dims = [0] : tensor<3xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// concatenate: each input gets its slice of the gradient.
// CHECK-LABEL: func.func @concatenate
// CHECK: %[[G:.*]] = kiln.broadcast_in_dim %{{.*}}, dims = [] : tensor<f32> -> tensor<3x3xf32>
// CHECK: %[[DA:.*]] = kiln.slice %[[G]], start = [0, 0], limit = [1, 3], strides = [1, 1] : tensor<3x3xf32> -> tensor<1x3xf32>
// CHECK: %[[DB:.*]] = kiln.slice %[[G]], start = [1, 0], limit = [3, 3], strides = [1, 1] : tensor<3x3xf32> -> tensor<2x3xf32>
// CHECK: return %{{.*}}, %[[DA]], %[[DB]]
func.func @concatenate(%a: tensor<1x3xf32> {kiln.role = #kiln.role<parameter>}, %b: tensor<2x3xf32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %y = kiln.concatenate(%a, %b), dim = 0 : (tensor<1x3xf32>, tensor<2x3xf32>) -> tensor<3x3xf32>
  %l = kiln.reduce sum %y, dims = [0, 1] : tensor<3x3xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// pad: the gradient is the interior slice; the padding value gets none.
// CHECK-LABEL: func.func @pad
// CHECK: %[[G:.*]] = kiln.broadcast_in_dim %{{.*}}, dims = [] : tensor<f32> -> tensor<3x5xf32>
// CHECK: %[[DX:.*]] = kiln.slice %[[G]], start = [0, 1], limit = [2, 3], strides = [1, 1] : tensor<3x5xf32> -> tensor<2x2xf32>
// CHECK: return %{{.*}}, %[[DX]]
func.func @pad(%x: tensor<2x2xf32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %y = kiln.pad %x, low = [0, 1], high = [1, 2], value = 3.0 : tensor<2x2xf32> -> tensor<3x5xf32>
  %l = kiln.reduce sum %y, dims = [0, 1] : tensor<3x5xf32> -> tensor<f32>
  return %l : tensor<f32>
}
