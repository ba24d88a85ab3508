// RUN: kiln-opt %s -split-input-file -verify-diagnostics
//
// Verifier messages of dot_general, conv2d, the pooling ops and their
// gradients (ir/ShapeRules.cpp and ir/KilnOps.cpp). For ops with result-type
// inference the shape rule's message is followed by MLIR's "failed to infer
// returned types". Each case opens with a line saying what it tests.

// kiln.dot_general's operands share the element type.
func.func @dot_element(%a: tensor<4x8xf32>, %b: tensor<8x3xbf16>) -> tensor<4x3xf32> {
  // expected-error@+2 {{'kiln.dot_general' op requires lhs and rhs to have the same element type, but they are 'f32' and 'bf16'}}
  // expected-error@+1 {{'kiln.dot_general' op failed to infer returned types}}
  %0 = kiln.dot_general %a, %b, batch = [] x [], contract = [1] x [0] : (tensor<4x8xf32>, tensor<8x3xbf16>) -> tensor<4x3xf32>
  return %0 : tensor<4x3xf32>
}

// -----

// kiln.dot_general pairs batching dimensions.
func.func @dot_batch_count(%a: tensor<2x4x8xf32>, %b: tensor<2x8x3xf32>) -> tensor<2x4x3xf32> {
  // expected-error@+2 {{'kiln.dot_general' op lhs and rhs must have as many batching dimensions, but have 1 and 0}}
  // expected-error@+1 {{'kiln.dot_general' op failed to infer returned types}}
  %0 = kiln.dot_general %a, %b, batch = [0] x [], contract = [2] x [1] : (tensor<2x4x8xf32>, tensor<2x8x3xf32>) -> tensor<2x4x3xf32>
  return %0 : tensor<2x4x3xf32>
}

// -----

// kiln.dot_general pairs contracting dimensions.
func.func @dot_contract_count(%a: tensor<4x8xf32>, %b: tensor<8x3xf32>) -> tensor<4x3xf32> {
  // expected-error@+2 {{'kiln.dot_general' op lhs and rhs must have as many contracting dimensions, but have 1 and 2}}
  // expected-error@+1 {{'kiln.dot_general' op failed to infer returned types}}
  %0 = kiln.dot_general %a, %b, batch = [] x [], contract = [1] x [0, 1] : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
  return %0 : tensor<4x3xf32>
}

// -----

// kiln.dot_general's lhs dimensions exist.
func.func @dot_lhs_range(%a: tensor<4x8xf32>, %b: tensor<8x3xf32>) -> tensor<4x3xf32> {
  // expected-error@+2 {{'kiln.dot_general' op lhs batching and contracting dimensions [2] must lie in [0, 2), but contains 2}}
  // expected-error@+1 {{'kiln.dot_general' op failed to infer returned types}}
  %0 = kiln.dot_general %a, %b, batch = [] x [], contract = [2] x [0] : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
  return %0 : tensor<4x3xf32>
}

// -----

// A lhs dimension is not both batching and contracting.
func.func @dot_lhs_repeat(%a: tensor<8x8xf32>, %b: tensor<8x8x3xf32>) -> tensor<8x3xf32> {
  // expected-error@+2 {{'kiln.dot_general' op lhs batching and contracting dimensions [0, 0] must not repeat a dimension, but 0 appears twice}}
  // expected-error@+1 {{'kiln.dot_general' op failed to infer returned types}}
  %0 = kiln.dot_general %a, %b, batch = [0] x [0], contract = [0] x [1] : (tensor<8x8xf32>, tensor<8x8x3xf32>) -> tensor<8x3xf32>
  return %0 : tensor<8x3xf32>
}

// -----

// kiln.dot_general's rhs dimensions exist.
func.func @dot_rhs_range(%a: tensor<4x8xf32>, %b: tensor<8x3xf32>) -> tensor<4x3xf32> {
  // expected-error@+2 {{'kiln.dot_general' op rhs batching and contracting dimensions [-1] must lie in [0, 2), but contains -1}}
  // expected-error@+1 {{'kiln.dot_general' op failed to infer returned types}}
  %0 = kiln.dot_general %a, %b, batch = [] x [], contract = [1] x [-1] : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
  return %0 : tensor<4x3xf32>
}

// -----

// A rhs dimension is contracted once.
func.func @dot_rhs_repeat(%a: tensor<8x8xf32>, %b: tensor<8x3xf32>) -> tensor<3xf32> {
  // expected-error@+2 {{'kiln.dot_general' op rhs batching and contracting dimensions [0, 0] must not repeat a dimension, but 0 appears twice}}
  // expected-error@+1 {{'kiln.dot_general' op failed to infer returned types}}
  %0 = kiln.dot_general %a, %b, batch = [] x [], contract = [0, 1] x [0, 0] : (tensor<8x8xf32>, tensor<8x3xf32>) -> tensor<3xf32>
  return %0 : tensor<3xf32>
}

// -----

// Paired batching dimensions have equal sizes.
func.func @dot_batch_size(%a: tensor<2x4x8xf32>, %b: tensor<3x8x5xf32>) -> tensor<2x4x5xf32> {
  // expected-error@+2 {{'kiln.dot_general' op batching dimension pair 0 must have equal sizes, but lhs dimension 0 is 2 and rhs dimension 0 is 3}}
  // expected-error@+1 {{'kiln.dot_general' op failed to infer returned types}}
  %0 = kiln.dot_general %a, %b, batch = [0] x [0], contract = [2] x [1] : (tensor<2x4x8xf32>, tensor<3x8x5xf32>) -> tensor<2x4x5xf32>
  return %0 : tensor<2x4x5xf32>
}

// -----

// Paired contracting dimensions have equal sizes.
func.func @dot_contract_size(%a: tensor<4x8xf32>, %b: tensor<7x3xf32>) -> tensor<4x3xf32> {
  // expected-error@+2 {{'kiln.dot_general' op contracting dimension pair 0 must have equal sizes, but lhs dimension 1 is 8 and rhs dimension 0 is 7}}
  // expected-error@+1 {{'kiln.dot_general' op failed to infer returned types}}
  %0 = kiln.dot_general %a, %b, batch = [] x [], contract = [1] x [0] : (tensor<4x8xf32>, tensor<7x3xf32>) -> tensor<4x3xf32>
  return %0 : tensor<4x3xf32>
}

// -----

// kiln.conv2d's input and filter share the element type.
func.func @conv_element(%x: tensor<1x1x8x8xf32>, %w: tensor<2x1x3x3xf16>) -> tensor<1x2x6x6xf32> {
  // expected-error@+2 {{'kiln.conv2d' op requires input and filter to have the same element type, but they are 'f32' and 'f16'}}
  // expected-error@+1 {{'kiln.conv2d' op failed to infer returned types}}
  %0 = kiln.conv2d %x, %w, strides = [1, 1], padding = [0, 0, 0, 0], dilation = [1, 1], groups = 1
         : (tensor<1x1x8x8xf32>, tensor<2x1x3x3xf16>) -> tensor<1x2x6x6xf32>
  return %0 : tensor<1x2x6x6xf32>
}

// -----

// kiln.conv2d's input is NCHW.
func.func @conv_input_rank(%x: tensor<1x8x8xf32>, %w: tensor<2x1x3x3xf32>) -> tensor<1x2x6x6xf32> {
  // expected-error@+2 {{'kiln.conv2d' op input must be rank 4 [N, C, H, W], but has rank 3}}
  // expected-error@+1 {{'kiln.conv2d' op failed to infer returned types}}
  %0 = kiln.conv2d %x, %w, strides = [1, 1], padding = [0, 0, 0, 0], dilation = [1, 1], groups = 1
         : (tensor<1x8x8xf32>, tensor<2x1x3x3xf32>) -> tensor<1x2x6x6xf32>
  return %0 : tensor<1x2x6x6xf32>
}

// -----

// kiln.conv2d's filter is OIHW.
func.func @conv_filter_rank(%x: tensor<1x1x8x8xf32>, %w: tensor<2x3x3xf32>) -> tensor<1x2x6x6xf32> {
  // expected-error@+2 {{'kiln.conv2d' op filter must be rank 4 [O, C/groups, KH, KW], but has rank 3}}
  // expected-error@+1 {{'kiln.conv2d' op failed to infer returned types}}
  %0 = kiln.conv2d %x, %w, strides = [1, 1], padding = [0, 0, 0, 0], dilation = [1, 1], groups = 1
         : (tensor<1x1x8x8xf32>, tensor<2x3x3xf32>) -> tensor<1x2x6x6xf32>
  return %0 : tensor<1x2x6x6xf32>
}

// -----

// kiln.conv2d's strides are [h, w].
func.func @conv_strides_count(%x: tensor<1x1x8x8xf32>, %w: tensor<2x1x3x3xf32>) -> tensor<1x2x6x6xf32> {
  // expected-error@+2 {{'kiln.conv2d' op strides must have 2 entries, but has 1 ([1])}}
  // expected-error@+1 {{'kiln.conv2d' op failed to infer returned types}}
  %0 = kiln.conv2d %x, %w, strides = [1], padding = [0, 0, 0, 0], dilation = [1, 1], groups = 1
         : (tensor<1x1x8x8xf32>, tensor<2x1x3x3xf32>) -> tensor<1x2x6x6xf32>
  return %0 : tensor<1x2x6x6xf32>
}

// -----

// kiln.conv2d's padding is [top, bottom, left, right].
func.func @conv_padding_count(%x: tensor<1x1x8x8xf32>, %w: tensor<2x1x3x3xf32>) -> tensor<1x2x8x8xf32> {
  // expected-error@+2 {{'kiln.conv2d' op padding ([top, bottom, left, right]) must have 4 entries, but has 2 ([1, 1])}}
  // expected-error@+1 {{'kiln.conv2d' op failed to infer returned types}}
  %0 = kiln.conv2d %x, %w, strides = [1, 1], padding = [1, 1], dilation = [1, 1], groups = 1
         : (tensor<1x1x8x8xf32>, tensor<2x1x3x3xf32>) -> tensor<1x2x8x8xf32>
  return %0 : tensor<1x2x8x8xf32>
}

// -----

// kiln.conv2d's dilation is [h, w].
func.func @conv_dilation_count(%x: tensor<1x1x8x8xf32>, %w: tensor<2x1x3x3xf32>) -> tensor<1x2x6x6xf32> {
  // expected-error@+2 {{'kiln.conv2d' op dilation must have 2 entries, but has 3 ([1, 1, 1])}}
  // expected-error@+1 {{'kiln.conv2d' op failed to infer returned types}}
  %0 = kiln.conv2d %x, %w, strides = [1, 1], padding = [0, 0, 0, 0], dilation = [1, 1, 1], groups = 1
         : (tensor<1x1x8x8xf32>, tensor<2x1x3x3xf32>) -> tensor<1x2x6x6xf32>
  return %0 : tensor<1x2x6x6xf32>
}

// -----

// kiln.conv2d's strides are positive.
func.func @conv_stride_zero(%x: tensor<1x1x8x8xf32>, %w: tensor<2x1x3x3xf32>) -> tensor<1x2x6x6xf32> {
  // expected-error@+2 {{'kiln.conv2d' op strides must be positive, but are [1, 0]}}
  // expected-error@+1 {{'kiln.conv2d' op failed to infer returned types}}
  %0 = kiln.conv2d %x, %w, strides = [1, 0], padding = [0, 0, 0, 0], dilation = [1, 1], groups = 1
         : (tensor<1x1x8x8xf32>, tensor<2x1x3x3xf32>) -> tensor<1x2x6x6xf32>
  return %0 : tensor<1x2x6x6xf32>
}

// -----

// kiln.conv2d's dilation is positive.
func.func @conv_dilation_zero(%x: tensor<1x1x8x8xf32>, %w: tensor<2x1x3x3xf32>) -> tensor<1x2x6x6xf32> {
  // expected-error@+2 {{'kiln.conv2d' op dilation must be positive, but is [0, 1]}}
  // expected-error@+1 {{'kiln.conv2d' op failed to infer returned types}}
  %0 = kiln.conv2d %x, %w, strides = [1, 1], padding = [0, 0, 0, 0], dilation = [0, 1], groups = 1
         : (tensor<1x1x8x8xf32>, tensor<2x1x3x3xf32>) -> tensor<1x2x6x6xf32>
  return %0 : tensor<1x2x6x6xf32>
}

// -----

// kiln.conv2d's padding is non-negative.
func.func @conv_padding_negative(%x: tensor<1x1x8x8xf32>, %w: tensor<2x1x3x3xf32>) -> tensor<1x2x5x6xf32> {
  // expected-error@+2 {{'kiln.conv2d' op padding must be non-negative, but is [0, -1, 0, 0]}}
  // expected-error@+1 {{'kiln.conv2d' op failed to infer returned types}}
  %0 = kiln.conv2d %x, %w, strides = [1, 1], padding = [0, -1, 0, 0], dilation = [1, 1], groups = 1
         : (tensor<1x1x8x8xf32>, tensor<2x1x3x3xf32>) -> tensor<1x2x5x6xf32>
  return %0 : tensor<1x2x5x6xf32>
}

// -----

// kiln.conv2d's groups is positive.
func.func @conv_groups_zero(%x: tensor<1x1x8x8xf32>, %w: tensor<2x1x3x3xf32>) -> tensor<1x2x6x6xf32> {
  // expected-error@+2 {{'kiln.conv2d' op groups must be positive, but is 0}}
  // expected-error@+1 {{'kiln.conv2d' op failed to infer returned types}}
  %0 = kiln.conv2d %x, %w, strides = [1, 1], padding = [0, 0, 0, 0], dilation = [1, 1], groups = 0
         : (tensor<1x1x8x8xf32>, tensor<2x1x3x3xf32>) -> tensor<1x2x6x6xf32>
  return %0 : tensor<1x2x6x6xf32>
}

// -----

// kiln.conv2d's channels divide into the groups.
func.func @conv_groups_divide(%x: tensor<1x4x8x8xf32>, %w: tensor<3x2x3x3xf32>) -> tensor<1x3x6x6xf32> {
  // expected-error@+2 {{'kiln.conv2d' op input channels (4) and output channels (3) must be divisible by groups (2)}}
  // expected-error@+1 {{'kiln.conv2d' op failed to infer returned types}}
  %0 = kiln.conv2d %x, %w, strides = [1, 1], padding = [0, 0, 0, 0], dilation = [1, 1], groups = 2
         : (tensor<1x4x8x8xf32>, tensor<3x2x3x3xf32>) -> tensor<1x3x6x6xf32>
  return %0 : tensor<1x3x6x6xf32>
}

// -----

// kiln.conv2d's filter sees C / groups input channels.
func.func @conv_filter_channels(%x: tensor<1x4x8x8xf32>, %w: tensor<2x4x3x3xf32>) -> tensor<1x2x6x6xf32> {
  // expected-error@+2 {{'kiln.conv2d' op filter dimension 1 must be input channels / groups (2), but is 4}}
  // expected-error@+1 {{'kiln.conv2d' op failed to infer returned types}}
  %0 = kiln.conv2d %x, %w, strides = [1, 1], padding = [0, 0, 0, 0], dilation = [1, 1], groups = 2
         : (tensor<1x4x8x8xf32>, tensor<2x4x3x3xf32>) -> tensor<1x2x6x6xf32>
  return %0 : tensor<1x2x6x6xf32>
}

// -----

// kiln.conv2d's filter window is not empty.
func.func @conv_empty_window(%x: tensor<1x1x8x8xf32>, %w: tensor<2x1x0x3xf32>) -> tensor<1x2x9x6xf32> {
  // expected-error@+2 {{'kiln.conv2d' op the filter window must be at least 1x1, but is [0, 3]}}
  // expected-error@+1 {{'kiln.conv2d' op failed to infer returned types}}
  %0 = kiln.conv2d %x, %w, strides = [1, 1], padding = [0, 0, 0, 0], dilation = [1, 1], groups = 1
         : (tensor<1x1x8x8xf32>, tensor<2x1x0x3xf32>) -> tensor<1x2x9x6xf32>
  return %0 : tensor<1x2x9x6xf32>
}

// -----

// kiln.conv2d's (dilated) window fits the padded input.
func.func @conv_too_large(%x: tensor<1x1x4x4xf32>, %w: tensor<2x1x3x3xf32>) -> tensor<1x2x1x1xf32> {
  // expected-error@+2 {{'kiln.conv2d' op the filter window [3, 3] (dilation [2, 2]) must fit the padded input [4, 4] with padding [0, 0, 0, 0]}}
  // expected-error@+1 {{'kiln.conv2d' op failed to infer returned types}}
  %0 = kiln.conv2d %x, %w, strides = [1, 1], padding = [0, 0, 0, 0], dilation = [2, 2], groups = 1
         : (tensor<1x1x4x4xf32>, tensor<2x1x3x3xf32>) -> tensor<1x2x1x1xf32>
  return %0 : tensor<1x2x1x1xf32>
}

// -----

// kiln.conv2d_input_grad: grad_output and filter share the element type.
func.func @conv_input_grad_filter_element(%dy: tensor<1x2x6x6xf32>, %w: tensor<2x1x3x3xf16>) -> tensor<1x1x8x8xf32> {
  // expected-error@+1 {{'kiln.conv2d_input_grad' op requires grad_output and filter to have the same element type, but they are 'f32' and 'f16'}}
  %0 = kiln.conv2d_input_grad %dy, %w, strides = [1, 1], padding = [0, 0, 0, 0], dilation = [1, 1], groups = 1
         : (tensor<1x2x6x6xf32>, tensor<2x1x3x3xf16>) -> tensor<1x1x8x8xf32>
  return %0 : tensor<1x1x8x8xf32>
}

// -----

// kiln.conv2d_input_grad: grad_output and result share the element type.
func.func @conv_input_grad_result_element(%dy: tensor<1x2x6x6xf32>, %w: tensor<2x1x3x3xf32>) -> tensor<1x1x8x8xbf16> {
  // expected-error@+1 {{'kiln.conv2d_input_grad' op requires grad_output and result to have the same element type, but they are 'f32' and 'bf16'}}
  %0 = kiln.conv2d_input_grad %dy, %w, strides = [1, 1], padding = [0, 0, 0, 0], dilation = [1, 1], groups = 1
         : (tensor<1x2x6x6xf32>, tensor<2x1x3x3xf32>) -> tensor<1x1x8x8xbf16>
  return %0 : tensor<1x1x8x8xbf16>
}

// -----

// kiln.conv2d_input_grad: the forward convolution must be valid.
func.func @conv_input_grad_forward(%dy: tensor<1x2x6x6xf32>, %w: tensor<2x1x3x3xf32>) -> tensor<1x1x8x8xf32> {
  // expected-error@+1 {{'kiln.conv2d_input_grad' op the forward conv2d of the result shape is invalid: strides must be positive, but are [0, 1]}}
  %0 = kiln.conv2d_input_grad %dy, %w, strides = [0, 1], padding = [0, 0, 0, 0], dilation = [1, 1], groups = 1
         : (tensor<1x2x6x6xf32>, tensor<2x1x3x3xf32>) -> tensor<1x1x8x8xf32>
  return %0 : tensor<1x1x8x8xf32>
}

// -----

// kiln.conv2d_input_grad: grad_output has the forward output's shape.
func.func @conv_input_grad_shape(%dy: tensor<1x2x8x8xf32>, %w: tensor<2x1x3x3xf32>) -> tensor<1x1x8x8xf32> {
  // expected-error@+1 {{'kiln.conv2d_input_grad' op grad_output must have the forward conv2d's output shape [1, 2, 6, 6], but has [1, 2, 8, 8]}}
  %0 = kiln.conv2d_input_grad %dy, %w, strides = [1, 1], padding = [0, 0, 0, 0], dilation = [1, 1], groups = 1
         : (tensor<1x2x8x8xf32>, tensor<2x1x3x3xf32>) -> tensor<1x1x8x8xf32>
  return %0 : tensor<1x1x8x8xf32>
}

// -----

// kiln.conv2d_filter_grad: input and grad_output share the element type.
func.func @conv_filter_grad_element(%x: tensor<1x1x8x8xf32>, %dy: tensor<1x2x6x6xf16>) -> tensor<2x1x3x3xf32> {
  // expected-error@+1 {{'kiln.conv2d_filter_grad' op requires input and grad_output to have the same element type, but they are 'f32' and 'f16'}}
  %0 = kiln.conv2d_filter_grad %x, %dy, strides = [1, 1], padding = [0, 0, 0, 0], dilation = [1, 1], groups = 1
         : (tensor<1x1x8x8xf32>, tensor<1x2x6x6xf16>) -> tensor<2x1x3x3xf32>
  return %0 : tensor<2x1x3x3xf32>
}

// -----

// kiln.conv2d_filter_grad: input and result share the element type.
func.func @conv_filter_grad_result_element(%x: tensor<1x1x8x8xf32>, %dy: tensor<1x2x6x6xf32>) -> tensor<2x1x3x3xf64> {
  // expected-error@+1 {{'kiln.conv2d_filter_grad' op requires input and result to have the same element type, but they are 'f32' and 'f64'}}
  %0 = kiln.conv2d_filter_grad %x, %dy, strides = [1, 1], padding = [0, 0, 0, 0], dilation = [1, 1], groups = 1
         : (tensor<1x1x8x8xf32>, tensor<1x2x6x6xf32>) -> tensor<2x1x3x3xf64>
  return %0 : tensor<2x1x3x3xf64>
}

// -----

// kiln.conv2d_filter_grad: the forward convolution must be valid.
func.func @conv_filter_grad_forward(%x: tensor<1x1x8x8xf32>, %dy: tensor<1x2x6x6xf32>) -> tensor<2x2x3x3xf32> {
  // expected-error@+1 {{'kiln.conv2d_filter_grad' op the forward conv2d with a filter of the result shape is invalid: filter dimension 1 must be input channels / groups (1), but is 2}}
  %0 = kiln.conv2d_filter_grad %x, %dy, strides = [1, 1], padding = [0, 0, 0, 0], dilation = [1, 1], groups = 1
         : (tensor<1x1x8x8xf32>, tensor<1x2x6x6xf32>) -> tensor<2x2x3x3xf32>
  return %0 : tensor<2x2x3x3xf32>
}

// -----

// kiln.conv2d_filter_grad: grad_output has the forward output's shape.
func.func @conv_filter_grad_shape(%x: tensor<1x1x8x8xf32>, %dy: tensor<1x2x6x6xf32>) -> tensor<2x1x5x5xf32> {
  // expected-error@+1 {{'kiln.conv2d_filter_grad' op grad_output must have the forward conv2d's output shape [1, 2, 4, 4], but has [1, 2, 6, 6]}}
  %0 = kiln.conv2d_filter_grad %x, %dy, strides = [1, 1], padding = [0, 0, 0, 0], dilation = [1, 1], groups = 1
         : (tensor<1x1x8x8xf32>, tensor<1x2x6x6xf32>) -> tensor<2x1x5x5xf32>
  return %0 : tensor<2x1x5x5xf32>
}

// -----

// Pooling input is NCHW (kiln.max_pool2d).
func.func @pool_rank(%x: tensor<3x8x8xf32>) -> tensor<3x4x4xf32> {
  // expected-error@+2 {{'kiln.max_pool2d' op input must be rank 4 [N, C, H, W], but has rank 3}}
  // expected-error@+1 {{'kiln.max_pool2d' op failed to infer returned types}}
  %0 = kiln.max_pool2d %x, window = [2, 2], strides = [2, 2], padding = [0, 0, 0, 0] : tensor<3x8x8xf32> -> tensor<3x4x4xf32>
  return %0 : tensor<3x4x4xf32>
}

// -----

// The pooling window is [h, w] (kiln.avg_pool2d).
func.func @pool_window_count(%x: tensor<1x3x8x8xf32>) -> tensor<1x3x4x4xf32> {
  // expected-error@+2 {{'kiln.avg_pool2d' op window must have 2 entries, but has 1 ([2])}}
  // expected-error@+1 {{'kiln.avg_pool2d' op failed to infer returned types}}
  %0 = kiln.avg_pool2d %x, window = [2], strides = [2, 2], padding = [0, 0, 0, 0] : tensor<1x3x8x8xf32> -> tensor<1x3x4x4xf32>
  return %0 : tensor<1x3x4x4xf32>
}

// -----

// The pooling strides are [h, w].
func.func @pool_strides_count(%x: tensor<1x3x8x8xf32>) -> tensor<1x3x4x4xf32> {
  // expected-error@+2 {{'kiln.max_pool2d' op strides must have 2 entries, but has 3 ([2, 2, 2])}}
  // expected-error@+1 {{'kiln.max_pool2d' op failed to infer returned types}}
  %0 = kiln.max_pool2d %x, window = [2, 2], strides = [2, 2, 2], padding = [0, 0, 0, 0] : tensor<1x3x8x8xf32> -> tensor<1x3x4x4xf32>
  return %0 : tensor<1x3x4x4xf32>
}

// -----

// The pooling padding is [top, bottom, left, right].
func.func @pool_padding_count(%x: tensor<1x3x8x8xf32>) -> tensor<1x3x4x4xf32> {
  // expected-error@+2 {{'kiln.max_pool2d' op padding ([top, bottom, left, right]) must have 4 entries, but has 2 ([0, 0])}}
  // expected-error@+1 {{'kiln.max_pool2d' op failed to infer returned types}}
  %0 = kiln.max_pool2d %x, window = [2, 2], strides = [2, 2], padding = [0, 0] : tensor<1x3x8x8xf32> -> tensor<1x3x4x4xf32>
  return %0 : tensor<1x3x4x4xf32>
}

// -----

// The pooling strides are positive.
func.func @pool_stride_zero(%x: tensor<1x3x8x8xf32>) -> tensor<1x3x4x4xf32> {
  // expected-error@+2 {{'kiln.max_pool2d' op strides must be positive, but are [0, 2]}}
  // expected-error@+1 {{'kiln.max_pool2d' op failed to infer returned types}}
  %0 = kiln.max_pool2d %x, window = [2, 2], strides = [0, 2], padding = [0, 0, 0, 0] : tensor<1x3x8x8xf32> -> tensor<1x3x4x4xf32>
  return %0 : tensor<1x3x4x4xf32>
}

// -----

// The pooling padding is non-negative.
func.func @pool_padding_negative(%x: tensor<1x3x8x8xf32>) -> tensor<1x3x4x4xf32> {
  // expected-error@+2 {{'kiln.avg_pool2d' op padding must be non-negative, but is [0, 0, -1, 0]}}
  // expected-error@+1 {{'kiln.avg_pool2d' op failed to infer returned types}}
  %0 = kiln.avg_pool2d %x, window = [2, 2], strides = [2, 2], padding = [0, 0, -1, 0] : tensor<1x3x8x8xf32> -> tensor<1x3x4x4xf32>
  return %0 : tensor<1x3x4x4xf32>
}

// -----

// The pooling window is positive.
func.func @pool_window_zero(%x: tensor<1x3x8x8xf32>) -> tensor<1x3x4x4xf32> {
  // expected-error@+2 {{'kiln.max_pool2d' op window must be positive, but is [2, 0]}}
  // expected-error@+1 {{'kiln.max_pool2d' op failed to infer returned types}}
  %0 = kiln.max_pool2d %x, window = [2, 0], strides = [2, 2], padding = [0, 0, 0, 0] : tensor<1x3x8x8xf32> -> tensor<1x3x4x4xf32>
  return %0 : tensor<1x3x4x4xf32>
}

// -----

// Pooling padding stays below the window, so no window is all padding.
func.func @pool_padding_window(%x: tensor<1x3x8x8xf32>) -> tensor<1x3x5x4xf32> {
  // expected-error@+2 {{'kiln.max_pool2d' op padding [2, 0, 0, 0] must be smaller than the window [2, 2]}}
  // expected-error@+1 {{'kiln.max_pool2d' op failed to infer returned types}}
  %0 = kiln.max_pool2d %x, window = [2, 2], strides = [2, 2], padding = [2, 0, 0, 0] : tensor<1x3x8x8xf32> -> tensor<1x3x5x4xf32>
  return %0 : tensor<1x3x5x4xf32>
}

// -----

// The pooling window fits the padded input.
func.func @pool_too_large(%x: tensor<1x3x2x8xf32>) -> tensor<1x3x1x2xf32> {
  // expected-error@+2 {{'kiln.avg_pool2d' op the window [3, 3] must fit the padded input [2, 8]}}
  // expected-error@+1 {{'kiln.avg_pool2d' op failed to infer returned types}}
  %0 = kiln.avg_pool2d %x, window = [3, 3], strides = [3, 3], padding = [0, 0, 0, 0] : tensor<1x3x2x8xf32> -> tensor<1x3x1x2xf32>
  return %0 : tensor<1x3x1x2xf32>
}

// -----

// kiln.max_pool2d_grad's result has the forward input's type.
func.func @max_pool_grad_type(%x: tensor<1x3x8x8xf32>, %dy: tensor<1x3x4x4xf32>) -> tensor<1x3x8x8xf16> {
  // expected-error@+1 {{'kiln.max_pool2d_grad' op failed to verify that all of {input, result} have same type}}
  %0 = "kiln.max_pool2d_grad"(%x, %dy) {window = array<i64: 2, 2>, strides = array<i64: 2, 2>, padding = array<i64: 0, 0, 0, 0>}
         : (tensor<1x3x8x8xf32>, tensor<1x3x4x4xf32>) -> tensor<1x3x8x8xf16>
  return %0 : tensor<1x3x8x8xf16>
}

// -----

// kiln.max_pool2d_grad: grad_output and result share the element type.
func.func @max_pool_grad_element(%x: tensor<1x3x8x8xf32>, %dy: tensor<1x3x4x4xbf16>) {
  // expected-error@+1 {{'kiln.max_pool2d_grad' op requires grad_output and result to have the same element type, but they are 'bf16' and 'f32'}}
  %0 = kiln.max_pool2d_grad %x, %dy, window = [2, 2], strides = [2, 2], padding = [0, 0, 0, 0] : tensor<1x3x8x8xf32>, tensor<1x3x4x4xbf16>
  return
}

// -----

// kiln.max_pool2d_grad: the forward pooling must be valid.
func.func @max_pool_grad_forward(%x: tensor<1x3x8x8xf32>, %dy: tensor<1x3x4x4xf32>) {
  // expected-error@+1 {{'kiln.max_pool2d_grad' op the forward pooling is invalid: window must be positive, but is [0, 2]}}
  %0 = kiln.max_pool2d_grad %x, %dy, window = [0, 2], strides = [2, 2], padding = [0, 0, 0, 0] : tensor<1x3x8x8xf32>, tensor<1x3x4x4xf32>
  return
}

// -----

// kiln.max_pool2d_grad: grad_output has the forward output's shape.
func.func @max_pool_grad_shape(%x: tensor<1x3x8x8xf32>, %dy: tensor<1x3x4x4xf32>) {
  // expected-error@+1 {{'kiln.max_pool2d_grad' op grad_output must have the forward pooling's output shape [1, 3, 7, 7], but has [1, 3, 4, 4]}}
  %0 = kiln.max_pool2d_grad %x, %dy, window = [2, 2], strides = [1, 1], padding = [0, 0, 0, 0] : tensor<1x3x8x8xf32>, tensor<1x3x4x4xf32>
  return
}

// -----

// kiln.avg_pool2d_grad: grad_output and result share the element type.
func.func @avg_pool_grad_element(%dy: tensor<1x3x4x4xf32>) -> tensor<1x3x8x8xf16> {
  // expected-error@+1 {{'kiln.avg_pool2d_grad' op requires grad_output and result to have the same element type, but they are 'f32' and 'f16'}}
  %0 = kiln.avg_pool2d_grad %dy, window = [2, 2], strides = [2, 2], padding = [0, 0, 0, 0] : tensor<1x3x4x4xf32> -> tensor<1x3x8x8xf16>
  return %0 : tensor<1x3x8x8xf16>
}

// -----

// kiln.avg_pool2d_grad: the forward pooling must be valid.
func.func @avg_pool_grad_forward(%dy: tensor<1x3x4x4xf32>) -> tensor<3x8x8xf32> {
  // expected-error@+1 {{'kiln.avg_pool2d_grad' op the forward pooling is invalid: input must be rank 4 [N, C, H, W], but has rank 3}}
  %0 = kiln.avg_pool2d_grad %dy, window = [2, 2], strides = [2, 2], padding = [0, 0, 0, 0] : tensor<1x3x4x4xf32> -> tensor<3x8x8xf32>
  return %0 : tensor<3x8x8xf32>
}

// -----

// kiln.avg_pool2d_grad: grad_output has the forward output's shape.
func.func @avg_pool_grad_shape(%dy: tensor<1x3x4x4xf32>) -> tensor<1x3x6x6xf32> {
  // expected-error@+1 {{'kiln.avg_pool2d_grad' op grad_output must have the forward pooling's output shape [1, 3, 3, 3], but has [1, 3, 4, 4]}}
  %0 = kiln.avg_pool2d_grad %dy, window = [2, 2], strides = [2, 2], padding = [0, 0, 0, 0] : tensor<1x3x4x4xf32> -> tensor<1x3x6x6xf32>
  return %0 : tensor<1x3x6x6xf32>
}
