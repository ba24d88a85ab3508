// RUN: kiln-opt %s --kiln-test-interpret | FileCheck %s
//
// Small, hand-checked values for the data-movement ops on the reference
// interpreter. The random checks against NumPy are in check_data_movement.py.

// iota counts along the named dimension, in any element type.
// CHECK-LABEL: func.func @iota
// CHECK: dense<{{\[\[}}0, 1, 2], [0, 1, 2]]> : tensor<2x3xi32>
// CHECK: dense<{{\[\[}}0.000000e+00, 0.000000e+00, 0.000000e+00], [1.000000e+00, 1.000000e+00, 1.000000e+00]]> : tensor<2x3xf32>
func.func @iota() -> (tensor<2x3xi32>, tensor<2x3xf32>) {
  %0 = kiln.iota dim = 1 : tensor<2x3xi32>
  %1 = kiln.iota dim = 0 : tensor<2x3xf32>
  return %0, %1 : tensor<2x3xi32>, tensor<2x3xf32>
}

// broadcast_in_dim: a bias row repeated, and a size-1 dimension stretched.
// CHECK-LABEL: func.func @broadcast
// CHECK: dense<{{\[\[}}1, 2, 3], [1, 2, 3]]> : tensor<2x3xi64>
// CHECK: dense<{{\[\[}}4, 4, 4], [5, 5, 5]]> : tensor<2x3xi64>
func.func @broadcast() -> (tensor<2x3xi64>, tensor<2x3xi64>) {
  %row = kiln.constant dense<[1, 2, 3]> : tensor<3xi64>
  %col = kiln.constant dense<[[4], [5]]> : tensor<2x1xi64>
  %0 = kiln.broadcast_in_dim %row, dims = [1] : tensor<3xi64> -> tensor<2x3xi64>
  %1 = kiln.broadcast_in_dim %col, dims = [0, 1] : tensor<2x1xi64> -> tensor<2x3xi64>
  return %0, %1 : tensor<2x3xi64>, tensor<2x3xi64>
}

// reshape keeps row-major order; transpose permutes.
// CHECK-LABEL: func.func @reshape_transpose
// CHECK: dense<{{\[\[}}1, 2], [3, 4], [5, 6]]> : tensor<3x2xi32>
// CHECK: dense<{{\[\[}}1, 4], [2, 5], [3, 6]]> : tensor<3x2xi32>
func.func @reshape_transpose() -> (tensor<3x2xi32>, tensor<3x2xi32>) {
  %x = kiln.constant dense<[[1, 2, 3], [4, 5, 6]]> : tensor<2x3xi32>
  %0 = kiln.reshape %x : tensor<2x3xi32> -> tensor<3x2xi32>
  %1 = kiln.transpose %x, permutation = [1, 0] : tensor<2x3xi32> -> tensor<3x2xi32>
  return %0, %1 : tensor<3x2xi32>, tensor<3x2xi32>
}

// slice with a stride: indices 1 and 3 of 0..4 along dimension 1.
// CHECK-LABEL: func.func @slice
// CHECK: dense<{{\[\[}}1, 3], [6, 8]]> : tensor<2x2xi32>
func.func @slice() -> tensor<2x2xi32> {
  %x = kiln.constant dense<[[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]> : tensor<2x5xi32>
  %0 = kiln.slice %x, start = [0, 1], limit = [2, 5], strides = [1, 2] : tensor<2x5xi32> -> tensor<2x2xi32>
  return %0 : tensor<2x2xi32>
}

// concatenate along dimension 1.
// CHECK-LABEL: func.func @concatenate
// CHECK: dense<{{\[\[}}1, 2, 7], [3, 4, 8]]> : tensor<2x3xi32>
func.func @concatenate() -> tensor<2x3xi32> {
  %a = kiln.constant dense<[[1, 2], [3, 4]]> : tensor<2x2xi32>
  %b = kiln.constant dense<[[7], [8]]> : tensor<2x1xi32>
  %0 = kiln.concatenate(%a, %b), dim = 1 : (tensor<2x2xi32>, tensor<2x1xi32>) -> tensor<2x3xi32>
  return %0 : tensor<2x3xi32>
}

// pad: one column before, two after, filled with -1.5.
// CHECK-LABEL: func.func @pad
// CHECK: dense<{{\[\[}}-1.500000e+00, 1.000000e+00, 2.000000e+00, -1.500000e+00, -1.500000e+00]]> : tensor<1x5xf32>
func.func @pad() -> tensor<1x5xf32> {
  %x = kiln.constant dense<[[1.0, 2.0]]> : tensor<1x2xf32>
  %0 = kiln.pad %x, low = [0, 1], high = [0, 2], value = -1.5 : tensor<1x2xf32> -> tensor<1x5xf32>
  return %0 : tensor<1x5xf32>
}

// gather: rows by index, repeated indices allowed, indices of rank 2.
// CHECK-LABEL: func.func @gather
// CHECK: dense<{{\[\[\[}}3, 4], [1, 2]], {{\[\[}}3, 4], [5, 6]]]> : tensor<2x2x2xi64>
func.func @gather() -> tensor<2x2x2xi64> {
  %table = kiln.constant dense<[[1, 2], [3, 4], [5, 6]]> : tensor<3x2xi64>
  %idx = kiln.constant dense<[[1, 0], [1, 2]]> : tensor<2x2xi32>
  %0 = kiln.gather %table, %idx : (tensor<3x2xi64>, tensor<2x2xi32>) -> tensor<2x2x2xi64>
  return %0 : tensor<2x2x2xi64>
}
