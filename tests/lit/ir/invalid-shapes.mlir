// RUN: kiln-opt %s -split-input-file -verify-diagnostics
//
// Verifier messages of the generators, shape manipulation and reduction ops
// (ir/ShapeRules.cpp and ir/KilnOps.cpp). For ops with result-type inference
// the shape rule's message is followed by MLIR's "failed to infer returned
// types". Each case opens with a line saying what it tests.

// kiln.constant's value must be a statically shaped tensor.
func.func @constant_vector() -> tensor<2xf32> {
  // expected-error@+1 {{'kiln.constant' op value must be a statically shaped tensor, but has type 'vector<2xf32>'}}
  %0 = "kiln.constant"() {value = dense<1.0> : vector<2xf32>} : () -> tensor<2xf32>
  return %0 : tensor<2xf32>
}

// -----

// kiln.iota's dimension must exist.
func.func @iota_dimension() -> tensor<2x3xi32> {
  // expected-error@+1 {{'kiln.iota' op dimension must lie in [0, 2) for a result of rank 2, but is 2}}
  %0 = kiln.iota dim = 2 : tensor<2x3xi32>
  return %0 : tensor<2x3xi32>
}

// -----

// kiln.iota's dimension must not be negative.
func.func @iota_negative() -> tensor<4xf32> {
  // expected-error@+1 {{'kiln.iota' op dimension must lie in [0, 1) for a result of rank 1, but is -1}}
  %0 = kiln.iota dim = -1 : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// kiln.broadcast_in_dim keeps the element type.
func.func @broadcast_element(%a: tensor<3xf32>) -> tensor<2x3xf16> {
  // expected-error@+1 {{'kiln.broadcast_in_dim' op requires operand and result to have the same element type, but they are 'f32' and 'f16'}}
  %0 = kiln.broadcast_in_dim %a, dims = [1] : tensor<3xf32> -> tensor<2x3xf16>
  return %0 : tensor<2x3xf16>
}

// -----

// kiln.broadcast_in_dim has one dims entry per operand dimension.
func.func @broadcast_dims_count(%a: tensor<3xf32>) -> tensor<2x3xf32> {
  // expected-error@+1 {{'kiln.broadcast_in_dim' op broadcast_dimensions must have one entry per operand dimension (1), but has 2}}
  %0 = kiln.broadcast_in_dim %a, dims = [0, 1] : tensor<3xf32> -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// -----

// kiln.broadcast_in_dim's dims index the result.
func.func @broadcast_dims_range(%a: tensor<3xf32>) -> tensor<2x3xf32> {
  // expected-error@+1 {{'kiln.broadcast_in_dim' op broadcast_dimensions [2] must lie in [0, 2), but contains 2}}
  %0 = kiln.broadcast_in_dim %a, dims = [2] : tensor<3xf32> -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// -----

// kiln.broadcast_in_dim's dims increase strictly (no transposing).
func.func @broadcast_dims_order(%a: tensor<3x2xf32>) -> tensor<2x3xf32> {
  // expected-error@+1 {{'kiln.broadcast_in_dim' op broadcast_dimensions [1, 0] must be strictly increasing, but entry 1 (0) follows 1}}
  %0 = kiln.broadcast_in_dim %a, dims = [1, 0] : tensor<3x2xf32> -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// -----

// kiln.broadcast_in_dim only stretches dimensions of size 1.
func.func @broadcast_size(%a: tensor<2xf32>) -> tensor<4x3xf32> {
  // expected-error@+1 {{'kiln.broadcast_in_dim' op operand dimension 0 of size 2 must be 1 or match result dimension 1 of size 3}}
  %0 = kiln.broadcast_in_dim %a, dims = [1] : tensor<2xf32> -> tensor<4x3xf32>
  return %0 : tensor<4x3xf32>
}

// -----

// kiln.reshape keeps the element type.
func.func @reshape_element(%a: tensor<2x3xf32>) -> tensor<6xi32> {
  // expected-error@+1 {{'kiln.reshape' op requires operand and result to have the same element type, but they are 'f32' and 'i32'}}
  %0 = kiln.reshape %a : tensor<2x3xf32> -> tensor<6xi32>
  return %0 : tensor<6xi32>
}

// -----

// kiln.reshape keeps the element count.
func.func @reshape_count(%a: tensor<2x3xf32>) -> tensor<7xf32> {
  // expected-error@+1 {{'kiln.reshape' op result shape [7] must have as many elements as the operand shape [2, 3] (6), but has 7}}
  %0 = kiln.reshape %a : tensor<2x3xf32> -> tensor<7xf32>
  return %0 : tensor<7xf32>
}

// -----

// kiln.transpose's permutation has one entry per dimension.
func.func @transpose_size(%a: tensor<2x3xf32>) -> tensor<2x3xf32> {
  // expected-error@+2 {{'kiln.transpose' op permutation must have 2 entries, but has 1 ([1])}}
  // expected-error@+1 {{'kiln.transpose' op failed to infer returned types}}
  %0 = kiln.transpose %a, permutation = [1] : tensor<2x3xf32> -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// -----

// kiln.transpose's permutation indexes the operand.
func.func @transpose_range(%a: tensor<2x3xf32>) -> tensor<3x2xf32> {
  // expected-error@+2 {{'kiln.transpose' op permutation [1, 2] must lie in [0, 2), but contains 2}}
  // expected-error@+1 {{'kiln.transpose' op failed to infer returned types}}
  %0 = kiln.transpose %a, permutation = [1, 2] : tensor<2x3xf32> -> tensor<3x2xf32>
  return %0 : tensor<3x2xf32>
}

// -----

// kiln.transpose's permutation is a permutation.
func.func @transpose_repeat(%a: tensor<2x3xf32>) -> tensor<3x3xf32> {
  // expected-error@+2 {{'kiln.transpose' op permutation [1, 1] must not repeat a dimension, but 1 appears twice}}
  // expected-error@+1 {{'kiln.transpose' op failed to infer returned types}}
  %0 = kiln.transpose %a, permutation = [1, 1] : tensor<2x3xf32> -> tensor<3x3xf32>
  return %0 : tensor<3x3xf32>
}

// -----

// kiln.slice has one start index per dimension.
func.func @slice_start(%a: tensor<2x4xf32>) -> tensor<2x2xf32> {
  // expected-error@+2 {{'kiln.slice' op start_indices must have 2 entries, but has 1 ([0])}}
  // expected-error@+1 {{'kiln.slice' op failed to infer returned types}}
  %0 = kiln.slice %a, start = [0], limit = [2, 2], strides = [1, 1] : tensor<2x4xf32> -> tensor<2x2xf32>
  return %0 : tensor<2x2xf32>
}

// -----

// kiln.slice has one limit per dimension.
func.func @slice_limit(%a: tensor<2x4xf32>) -> tensor<2x2xf32> {
  // expected-error@+2 {{'kiln.slice' op limit_indices must have 2 entries, but has 3 ([2, 2, 1])}}
  // expected-error@+1 {{'kiln.slice' op failed to infer returned types}}
  %0 = kiln.slice %a, start = [0, 0], limit = [2, 2, 1], strides = [1, 1] : tensor<2x4xf32> -> tensor<2x2xf32>
  return %0 : tensor<2x2xf32>
}

// -----

// kiln.slice has one stride per dimension.
func.func @slice_strides_count(%a: tensor<2x4xf32>) -> tensor<2x2xf32> {
  // expected-error@+2 {{'kiln.slice' op strides must have 2 entries, but has 0 ([])}}
  // expected-error@+1 {{'kiln.slice' op failed to infer returned types}}
  %0 = kiln.slice %a, start = [0, 0], limit = [2, 2], strides = [] : tensor<2x4xf32> -> tensor<2x2xf32>
  return %0 : tensor<2x2xf32>
}

// -----

// kiln.slice's strides are positive.
func.func @slice_stride_zero(%a: tensor<2x4xf32>) -> tensor<2x2xf32> {
  // expected-error@+2 {{'kiln.slice' op strides must be positive, but dimension 1 has 0}}
  // expected-error@+1 {{'kiln.slice' op failed to infer returned types}}
  %0 = kiln.slice %a, start = [0, 0], limit = [2, 2], strides = [1, 0] : tensor<2x4xf32> -> tensor<2x2xf32>
  return %0 : tensor<2x2xf32>
}

// -----

// kiln.slice stays inside the operand.
func.func @slice_bounds(%a: tensor<2x4xf32>) -> tensor<2x2xf32> {
  // expected-error@+2 {{'kiln.slice' op dimension 1 needs 0 <= start <= limit <= 4, but start is 3 and limit is 5}}
  // expected-error@+1 {{'kiln.slice' op failed to infer returned types}}
  %0 = kiln.slice %a, start = [0, 3], limit = [2, 5], strides = [1, 1] : tensor<2x4xf32> -> tensor<2x2xf32>
  return %0 : tensor<2x2xf32>
}

// -----

// kiln.slice's start does not pass its limit.
func.func @slice_reversed(%a: tensor<2x4xf32>) -> tensor<2x0xf32> {
  // expected-error@+2 {{'kiln.slice' op dimension 1 needs 0 <= start <= limit <= 4, but start is 3 and limit is 1}}
  // expected-error@+1 {{'kiln.slice' op failed to infer returned types}}
  %0 = kiln.slice %a, start = [0, 3], limit = [2, 1], strides = [1, 1] : tensor<2x4xf32> -> tensor<2x0xf32>
  return %0 : tensor<2x0xf32>
}

// -----

// kiln.concatenate needs an input (generic form: see concatenate.mlir).
func.func @concatenate_none() -> tensor<2xf32> {
  // expected-error@+2 {{'kiln.concatenate' op needs at least one input}}
  // expected-error@+1 {{'kiln.concatenate' op failed to infer returned types}}
  %0 = "kiln.concatenate"() {dimension = 0 : i64} : () -> tensor<2xf32>
  return %0 : tensor<2xf32>
}

// -----

// kiln.concatenate's dimension exists.
func.func @concatenate_dimension(%a: tensor<2x3xf32>) -> tensor<4x3xf32> {
  // expected-error@+2 {{'kiln.concatenate' op dimension must lie in [0, 2), but is 2}}
  // expected-error@+1 {{'kiln.concatenate' op failed to infer returned types}}
  %0 = "kiln.concatenate"(%a, %a) {dimension = 2 : i64} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
  return %0 : tensor<4x3xf32>
}

// -----

// kiln.concatenate's inputs share the element type.
func.func @concatenate_element(%a: tensor<2x3xf32>, %b: tensor<2x3xf16>) -> tensor<4x3xf32> {
  // expected-error@+2 {{'kiln.concatenate' op input 1 must have element type 'f32' like input 0, but has 'f16'}}
  // expected-error@+1 {{'kiln.concatenate' op failed to infer returned types}}
  %0 = "kiln.concatenate"(%a, %b) {dimension = 0 : i64} : (tensor<2x3xf32>, tensor<2x3xf16>) -> tensor<4x3xf32>
  return %0 : tensor<4x3xf32>
}

// -----

// kiln.concatenate's inputs share the rank.
func.func @concatenate_rank(%a: tensor<2x3xf32>, %b: tensor<6xf32>) -> tensor<8x3xf32> {
  // expected-error@+2 {{'kiln.concatenate' op input 1 must have rank 2 like input 0, but has rank 1}}
  // expected-error@+1 {{'kiln.concatenate' op failed to infer returned types}}
  %0 = "kiln.concatenate"(%a, %b) {dimension = 0 : i64} : (tensor<2x3xf32>, tensor<6xf32>) -> tensor<8x3xf32>
  return %0 : tensor<8x3xf32>
}

// -----

// kiln.concatenate's inputs agree off the joined dimension.
func.func @concatenate_mismatch(%a: tensor<2x3xf32>, %b: tensor<2x3xf32>, %c: tensor<2x4xf32>) -> tensor<6x3xf32> {
  // expected-error@+2 {{'kiln.concatenate' op input 2 must match input 0 in dimension 1 (3), but has 4}}
  // expected-error@+1 {{'kiln.concatenate' op failed to infer returned types}}
  %0 = "kiln.concatenate"(%a, %b, %c) {dimension = 0 : i64} : (tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x4xf32>) -> tensor<6x3xf32>
  return %0 : tensor<6x3xf32>
}

// -----

// kiln.pad has one low padding per dimension.
func.func @pad_low(%a: tensor<2x3xf32>) -> tensor<4x3xf32> {
  // expected-error@+2 {{'kiln.pad' op edge_padding_low must have 2 entries, but has 1 ([1])}}
  // expected-error@+1 {{'kiln.pad' op failed to infer returned types}}
  %0 = kiln.pad %a, low = [1], high = [1, 0], value = 0.0 : tensor<2x3xf32> -> tensor<4x3xf32>
  return %0 : tensor<4x3xf32>
}

// -----

// kiln.pad has one high padding per dimension.
func.func @pad_high(%a: tensor<2x3xf32>) -> tensor<4x3xf32> {
  // expected-error@+2 {{'kiln.pad' op edge_padding_high must have 2 entries, but has 3 ([1, 0, 0])}}
  // expected-error@+1 {{'kiln.pad' op failed to infer returned types}}
  %0 = kiln.pad %a, low = [1, 0], high = [1, 0, 0], value = 0.0 : tensor<2x3xf32> -> tensor<4x3xf32>
  return %0 : tensor<4x3xf32>
}

// -----

// kiln.pad does not crop.
func.func @pad_negative(%a: tensor<2x3xf32>) -> tensor<2x2xf32> {
  // expected-error@+2 {{'kiln.pad' op padding must be non-negative, but dimension 1 has low 0 and high -1}}
  // expected-error@+1 {{'kiln.pad' op failed to infer returned types}}
  %0 = kiln.pad %a, low = [0, 0], high = [0, -1], value = 0.0 : tensor<2x3xf32> -> tensor<2x2xf32>
  return %0 : tensor<2x2xf32>
}

// -----

// kiln.reduce's dimensions exist.
func.func @reduce_range(%a: tensor<4x5xf32>) -> tensor<4xf32> {
  // expected-error@+2 {{'kiln.reduce' op dimensions [2] must lie in [0, 2), but contains 2}}
  // expected-error@+1 {{'kiln.reduce' op failed to infer returned types}}
  %0 = kiln.reduce sum %a, dims = [2] : tensor<4x5xf32> -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// kiln.reduce's dimensions do not repeat.
func.func @reduce_repeat(%a: tensor<4x5xf32>) -> tensor<4xf32> {
  // expected-error@+2 {{'kiln.reduce' op dimensions [1, 1] must not repeat a dimension, but 1 appears twice}}
  // expected-error@+1 {{'kiln.reduce' op failed to infer returned types}}
  %0 = kiln.reduce max %a, dims = [1, 1] : tensor<4x5xf32> -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// kiln.argmax's dimension exists.
func.func @argmax_dimension(%a: tensor<4x5xf32>) -> tensor<4xi64> {
  // expected-error@+1 {{'kiln.argmax' op dimension must lie in [0, 2), but is -1}}
  %0 = kiln.argmax %a, dim = -1 : tensor<4x5xf32> -> tensor<4xi64>
  return %0 : tensor<4xi64>
}

// -----

// kiln.argmax needs an element to pick.
func.func @argmax_empty(%a: tensor<4x0xf32>) -> tensor<4xi64> {
  // expected-error@+1 {{'kiln.argmax' op operand dimension 1 must have at least one element to take the argmax of, but has size 0}}
  %0 = kiln.argmax %a, dim = 1 : tensor<4x0xf32> -> tensor<4xi64>
  return %0 : tensor<4xi64>
}

// -----

// kiln.argmax's result drops the dimension.
func.func @argmax_result(%a: tensor<4x5xf32>) -> tensor<5xi32> {
  // expected-error@+1 {{'kiln.argmax' op result shape must be [4], but is [5]}}
  %0 = kiln.argmax %a, dim = 1 : tensor<4x5xf32> -> tensor<5xi32>
  return %0 : tensor<5xi32>
}
