// RUN: kiln-opt %s -split-input-file -verify-diagnostics
//
// Verifier messages of the neural-network composites: softmax, log_softmax,
// layer_norm, gather, scatter_add, dropout, softmax_cross_entropy
// (ir/ShapeRules.cpp and ir/KilnOps.cpp). Each case opens with a line saying
// what it tests.

// kiln.softmax's dimension exists.
func.func @softmax_dimension(%a: tensor<4x10xf32>) -> tensor<4x10xf32> {
  // expected-error@+1 {{'kiln.softmax' op dimension must lie in [0, 2), but is 2}}
  %0 = kiln.softmax %a, dim = 2 : tensor<4x10xf32>
  return %0 : tensor<4x10xf32>
}

// -----

// kiln.log_softmax's dimension exists.
func.func @log_softmax_dimension(%a: tensor<4x10xf32>) -> tensor<4x10xf32> {
  // expected-error@+1 {{'kiln.log_softmax' op dimension must lie in [0, 2), but is -1}}
  %0 = kiln.log_softmax %a, dim = -1 : tensor<4x10xf32>
  return %0 : tensor<4x10xf32>
}

// -----

// kiln.softmax keeps its operand's type.
func.func @softmax_type(%a: tensor<4x10xf32>) -> tensor<4x10xf16> {
  // expected-error@+1 {{'kiln.softmax' op requires the same type for all operands and results}}
  %0 = "kiln.softmax"(%a) {dimension = 1 : i64} : (tensor<4x10xf32>) -> tensor<4x10xf16>
  return %0 : tensor<4x10xf16>
}

// -----

// kiln.layer_norm's input and scale share the element type.
func.func @layer_norm_element(%x: tensor<4x64xf32>, %g: tensor<64xf16>) -> tensor<4x64xf32> {
  // expected-error@+1 {{'kiln.layer_norm' op requires input and scale to have the same element type, but they are 'f32' and 'f16'}}
  %0 = kiln.layer_norm %x, %g, %g, axis = 1, epsilon = 1.0e-5 : tensor<4x64xf32>, tensor<64xf16>
  return %0 : tensor<4x64xf32>
}

// -----

// kiln.layer_norm's scale and bias have one type.
func.func @layer_norm_bias(%x: tensor<4x64xf32>, %g: tensor<64xf32>, %b: tensor<4x64xf32>) -> tensor<4x64xf32> {
  // expected-error@+1 {{'kiln.layer_norm' op failed to verify that all of {scale, bias} have same type}}
  %0 = "kiln.layer_norm"(%x, %g, %b) {axis = 1 : i64, epsilon = 1.0e-5 : f64} : (tensor<4x64xf32>, tensor<64xf32>, tensor<4x64xf32>) -> tensor<4x64xf32>
  return %0 : tensor<4x64xf32>
}

// -----

// kiln.layer_norm's epsilon is non-negative.
func.func @layer_norm_epsilon(%x: tensor<4x64xf32>, %g: tensor<64xf32>) -> tensor<4x64xf32> {
  // expected-error@+1 {{'kiln.layer_norm' op epsilon must be non-negative, but is -1.000000e-05}}
  %0 = kiln.layer_norm %x, %g, %g, axis = 1, epsilon = -1.0e-5 : tensor<4x64xf32>, tensor<64xf32>
  return %0 : tensor<4x64xf32>
}

// -----

// kiln.layer_norm's epsilon is a number.
func.func @layer_norm_epsilon_nan(%x: tensor<4x64xf32>, %g: tensor<64xf32>) -> tensor<4x64xf32> {
  // expected-error@+1 {{'kiln.layer_norm' op epsilon must be non-negative, but is nan}}
  %0 = kiln.layer_norm %x, %g, %g, axis = 1, epsilon = 0x7FF8000000000000 : tensor<4x64xf32>, tensor<64xf32>
  return %0 : tensor<4x64xf32>
}

// -----

// kiln.layer_norm's axis exists.
func.func @layer_norm_axis(%x: tensor<4x64xf32>, %g: tensor<64xf32>) -> tensor<4x64xf32> {
  // expected-error@+1 {{'kiln.layer_norm' op axis must lie in [0, 2), but is 2}}
  %0 = kiln.layer_norm %x, %g, %g, axis = 2, epsilon = 1.0e-5 : tensor<4x64xf32>, tensor<64xf32>
  return %0 : tensor<4x64xf32>
}

// -----

// kiln.layer_norm's scale has the normalized shape.
func.func @layer_norm_scale(%x: tensor<4x16x64xf32>, %g: tensor<64xf32>) -> tensor<4x16x64xf32> {
  // expected-error@+1 {{'kiln.layer_norm' op scale and bias must have the normalized shape [16, 64], but have [64]}}
  %0 = kiln.layer_norm %x, %g, %g, axis = 1, epsilon = 1.0e-5 : tensor<4x16x64xf32>, tensor<64xf32>
  return %0 : tensor<4x16x64xf32>
}

// -----

// kiln.gather's table has rows.
func.func @gather_scalar(%t: tensor<f32>, %i: tensor<3xi32>) -> tensor<3xf32> {
  // expected-error@+2 {{'kiln.gather' op table must have rank at least 1, but is a scalar}}
  // expected-error@+1 {{'kiln.gather' op failed to infer returned types}}
  %0 = kiln.gather %t, %i : (tensor<f32>, tensor<3xi32>) -> tensor<3xf32>
  return %0 : tensor<3xf32>
}

// -----

// kiln.scatter_add's operand and updates share the element type.
func.func @scatter_element(%t: tensor<10x4xf32>, %i: tensor<3xi32>, %u: tensor<3x4xf16>) -> tensor<10x4xf32> {
  // expected-error@+2 {{'kiln.scatter_add' op requires operand and updates to have the same element type, but they are 'f32' and 'f16'}}
  // expected-error@+1 {{'kiln.scatter_add' op failed to infer returned types}}
  %0 = kiln.scatter_add %t, %i, %u : (tensor<10x4xf32>, tensor<3xi32>, tensor<3x4xf16>) -> tensor<10x4xf32>
  return %0 : tensor<10x4xf32>
}

// -----

// kiln.scatter_add's updates add, multiply, or keep the max or the min.
func.func @scatter_mean(%t: tensor<10x4xf32>, %i: tensor<3xi32>, %u: tensor<3x4xf32>) -> tensor<10x4xf32> {
  // expected-error@+1 {{'kiln.scatter_add' op combine must be sum, max, min or prod, not mean}}
  %0 = kiln.scatter_add %t, %i, %u combine = mean : (tensor<10x4xf32>, tensor<3xi32>, tensor<3x4xf32>) -> tensor<10x4xf32>
  return %0 : tensor<10x4xf32>
}

// -----

// kiln.scatter_add's operand has rows.
func.func @scatter_scalar(%t: tensor<f32>, %i: tensor<3xi32>, %u: tensor<3xf32>) -> tensor<f32> {
  // expected-error@+2 {{'kiln.scatter_add' op operand must have rank at least 1, but is a scalar}}
  // expected-error@+1 {{'kiln.scatter_add' op failed to infer returned types}}
  %0 = kiln.scatter_add %t, %i, %u : (tensor<f32>, tensor<3xi32>, tensor<3xf32>) -> tensor<f32>
  return %0 : tensor<f32>
}

// -----

// kiln.scatter_add's updates are indices ++ operand rows.
func.func @scatter_updates(%t: tensor<10x4xf32>, %i: tensor<3xi32>, %u: tensor<4x3xf32>) -> tensor<10x4xf32> {
  // expected-error@+2 {{'kiln.scatter_add' op updates must have shape indices ++ operand[1:] = [3, 4], but have [4, 3]}}
  // expected-error@+1 {{'kiln.scatter_add' op failed to infer returned types}}
  %0 = kiln.scatter_add %t, %i, %u : (tensor<10x4xf32>, tensor<3xi32>, tensor<4x3xf32>) -> tensor<10x4xf32>
  return %0 : tensor<10x4xf32>
}

// -----

// kiln.dropout's rate is not negative.
func.func @dropout_negative(%a: tensor<4xf32>, %c: tensor<i64>) -> tensor<4xf32> {
  // expected-error@+1 {{'kiln.dropout' op rate must lie in [0, 1), but is -1.000000e-01}}
  %0 = kiln.dropout %a, %c, rate = -0.1, seed = 1 : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// kiln.dropout's rate is below 1 (a rate of 1 would divide by zero).
func.func @dropout_one(%a: tensor<4xf32>, %c: tensor<i64>) -> tensor<4xf32> {
  // expected-error@+1 {{'kiln.dropout' op rate must lie in [0, 1), but is 1.000000e+00}}
  %0 = kiln.dropout %a, %c, rate = 1.0, seed = 1 : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// kiln.dropout keeps its operand's type.
func.func @dropout_type(%a: tensor<4xf32>, %c: tensor<i64>) -> tensor<4xf16> {
  // expected-error@+1 {{'kiln.dropout' op failed to verify that all of {operand, result} have same type}}
  %0 = "kiln.dropout"(%a, %c) {rate = 0.5 : f64, seed = 1 : i64} : (tensor<4xf32>, tensor<i64>) -> tensor<4xf16>
  return %0 : tensor<4xf16>
}

// -----

// kiln.softmax_cross_entropy's logits are [N, C].
func.func @sce_logits_rank(%l: tensor<8xf32>, %y: tensor<8xi32>) -> tensor<8xf32> {
  // expected-error@+2 {{'kiln.softmax_cross_entropy' op logits must be rank 2 [N, C], but have rank 1}}
  // expected-error@+1 {{'kiln.softmax_cross_entropy' op failed to infer returned types}}
  %0 = kiln.softmax_cross_entropy %l, %y : (tensor<8xf32>, tensor<8xi32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// kiln.softmax_cross_entropy has one label per example.
func.func @sce_labels(%l: tensor<8x10xf32>, %y: tensor<4xi32>) -> tensor<8xf32> {
  // expected-error@+2 {{'kiln.softmax_cross_entropy' op labels must have shape [8], but have [4]}}
  // expected-error@+1 {{'kiln.softmax_cross_entropy' op failed to infer returned types}}
  %0 = kiln.softmax_cross_entropy %l, %y : (tensor<8x10xf32>, tensor<4xi32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// kiln.softmax_cross_entropy's labels are a vector, not one-hot.
func.func @sce_one_hot(%l: tensor<8x10xf32>, %y: tensor<8x10xi32>) -> tensor<8xf32> {
  // expected-error@+2 {{'kiln.softmax_cross_entropy' op labels must have shape [8], but have [8, 10]}}
  // expected-error@+1 {{'kiln.softmax_cross_entropy' op failed to infer returned types}}
  %0 = kiln.softmax_cross_entropy %l, %y : (tensor<8x10xf32>, tensor<8x10xi32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// kiln.softmax_cross_entropy needs a class.
func.func @sce_no_class(%l: tensor<8x0xf32>, %y: tensor<8xi32>) -> tensor<8xf32> {
  // expected-error@+2 {{'kiln.softmax_cross_entropy' op logits must have at least one class, but dimension 1 has size 0}}
  // expected-error@+1 {{'kiln.softmax_cross_entropy' op failed to infer returned types}}
  %0 = kiln.softmax_cross_entropy %l, %y : (tensor<8x0xf32>, tensor<8xi32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}
