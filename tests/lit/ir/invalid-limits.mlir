// RUN: kiln-opt %s -split-input-file -verify-diagnostics
//
// The limits of a kiln tensor (ir/ShapeRules.h: rank at most 64, at most
// 2^48 bytes counting its nonzero dimensions), and shape rules whose
// attributes may be as large as int64_t goes. Past the limits, element
// counts and byte sizes would overflow int64_t (UBSan found `kiln compile`
// multiplying a 2^62 batch by 784 in the verifier and the FLOP counts).
// Each case opens with a line saying what it tests.

// An op's result past 2^48 bytes.
func.func @result_too_large(%a: tensor<f32>) -> tensor<f32> {
  // expected-error@+1 {{'kiln.broadcast_in_dim' op result #0: shape [1099511627776, 1099511627776] of 4-byte elements holds more than 2^48 bytes (256 TiB), the most a kiln tensor may hold}}
  %0 = kiln.broadcast_in_dim %a, dims = [] : tensor<f32> -> tensor<1099511627776x1099511627776xf32>
  %1 = kiln.reduce sum %0, dims = [0, 1] : tensor<1099511627776x1099511627776xf32> -> tensor<f32>
  return %1 : tensor<f32>
}

// -----

// Exactly 2^48 bytes is allowed: 2^46 f32 values.
func.func @at_the_limit(%a: tensor<f32>) -> tensor<70368744177664xf32> {
  %0 = kiln.broadcast_in_dim %a, dims = [] : tensor<f32> -> tensor<70368744177664xf32>
  return %0 : tensor<70368744177664xf32>
}

// -----

// One element more is not, for an operand either (a function argument
// without a role: no op makes it).
func.func @operand_too_large(%a: tensor<70368744177665xf32>) -> tensor<f32> {
  // expected-error@+1 {{'kiln.reduce' op operand #0: shape [70368744177665] of 4-byte elements holds more than 2^48 bytes (256 TiB), the most a kiln tensor may hold}}
  %0 = kiln.reduce sum %a, dims = [0] : tensor<70368744177665xf32> -> tensor<f32>
  return %0 : tensor<f32>
}

// -----

// A zero dimension does not hide the others: their product still counts.
func.func @zero_dimension(%a: tensor<f32>) -> tensor<f32> {
  // expected-error@+1 {{'kiln.broadcast_in_dim' op result #0: shape [0, 4611686018427387904, 4] of 1-byte elements holds more than 2^48 bytes (256 TiB), the most a kiln tensor may hold}}
  %0 = kiln.broadcast_in_dim %a, dims = [] : tensor<f32> -> tensor<0x4611686018427387904x4xi8>
  return %a : tensor<f32>
}

// -----

// Empty tensors within the limits are fine.
func.func @empty(%a: tensor<f32>) -> tensor<0x1024xf32> {
  %0 = kiln.broadcast_in_dim %a, dims = [] : tensor<f32> -> tensor<0x1024xf32>
  return %0 : tensor<0x1024xf32>
}

// -----

// At most 64 dimensions.
func.func @rank(%a: tensor<f32>) -> tensor<f32> {
  // expected-error@+1 {{'kiln.broadcast_in_dim' op result #0: rank 65 is above the limit of 64}}
  %0 = kiln.broadcast_in_dim %a, dims = [] : tensor<f32> -> tensor<1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1xf32>
  return %a : tensor<f32>
}

// -----

// A model's argument that no op reads is checked through its role.
func.func @argument(%x: tensor<2x4611686018427387904xf32> {kiln.name = "x", kiln.role = #kiln.role<input>},
                    %w: tensor<f32> {kiln.name = "w", kiln.role = #kiln.role<parameter>})
    -> (tensor<f32> {kiln.name = "loss", kiln.role = #kiln.role<loss>}) {
  return %w : tensor<f32>
}
// expected-error@-5 {{argument 0 of @argument: shape [2, 4611686018427387904] of 4-byte elements holds more than 2^48 bytes (256 TiB), the most a kiln tensor may hold}}

// -----

// kiln.slice with a stride as large as int64_t goes takes one element.
func.func @slice_huge_stride(%a: tensor<8xf32>) -> tensor<1xf32> {
  %0 = kiln.slice %a, start = [2], limit = [8], strides = [9223372036854775807] : tensor<8xf32> -> tensor<1xf32>
  return %0 : tensor<1xf32>
}

// -----

// kiln.pad's padding is bounded like a dimension.
func.func @pad_huge(%a: tensor<2xf32>) -> tensor<4xf32> {
  // expected-error@+2 {{'kiln.pad' op padding must be at most 2^48, but dimension 0 has low 1 and high 9223372036854775807}}
  // expected-error@+1 {{'kiln.pad' op failed to infer returned types}}
  %0 = kiln.pad %a, low = [1], high = [9223372036854775807], value = 0.0 : tensor<2xf32> -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// kiln.conv2d with a dilation as large as int64_t goes: the window does not
// fit (its span is computed without overflowing).
func.func @conv_huge_dilation(%x: tensor<1x1x8x8xf32>, %w: tensor<2x1x3x3xf32>) -> tensor<1x2x6x6xf32> {
  // expected-error@+2 {{'kiln.conv2d' op the filter window [3, 3] (dilation [9223372036854775807, 1]) must fit the padded input [8, 8] with padding [0, 0, 0, 0]}}
  // expected-error@+1 {{'kiln.conv2d' op failed to infer returned types}}
  %0 = kiln.conv2d %x, %w, strides = [1, 1], padding = [0, 0, 0, 0], dilation = [9223372036854775807, 1], groups = 1
         : (tensor<1x1x8x8xf32>, tensor<2x1x3x3xf32>) -> tensor<1x2x6x6xf32>
  return %0 : tensor<1x2x6x6xf32>
}

// -----

// kiln.conv2d with padding as large as int64_t goes: an output far past the
// limits, which no result type can match.
func.func @conv_huge_padding(%x: tensor<1x1x8x8xf32>, %w: tensor<2x1x3x3xf32>) -> tensor<1x2x6x6xf32> {
  // expected-error@+2 {{'kiln.conv2d' op inferred type(s) 'tensor<1x2x281474976710657x6xf32>' are incompatible with return type(s) of operation 'tensor<1x2x6x6xf32>'}}
  // expected-error@+1 {{'kiln.conv2d' op failed to infer returned types}}
  %0 = kiln.conv2d %x, %w, strides = [1, 1], padding = [9223372036854775807, 9223372036854775807, 0, 0], dilation = [1, 1], groups = 1
         : (tensor<1x1x8x8xf32>, tensor<2x1x3x3xf32>) -> tensor<1x2x6x6xf32>
  return %0 : tensor<1x2x6x6xf32>
}

// -----

// kiln.conv2d with groups as large as int64_t goes.
func.func @conv_huge_groups(%x: tensor<1x1x8x8xf32>, %w: tensor<2x1x3x3xf32>) -> tensor<1x2x6x6xf32> {
  // expected-error@+2 {{'kiln.conv2d' op input channels (1) and output channels (2) must be divisible by groups (9223372036854775807)}}
  // expected-error@+1 {{'kiln.conv2d' op failed to infer returned types}}
  %0 = kiln.conv2d %x, %w, strides = [1, 1], padding = [0, 0, 0, 0], dilation = [1, 1], groups = 9223372036854775807
         : (tensor<1x1x8x8xf32>, tensor<2x1x3x3xf32>) -> tensor<1x2x6x6xf32>
  return %0 : tensor<1x2x6x6xf32>
}

// -----

// kiln.max_pool2d with a window and padding as large as int64_t goes.
func.func @pool_huge_window(%x: tensor<1x1x8x8xf32>) -> tensor<1x1x4x4xf32> {
  // expected-error@+2 {{'kiln.max_pool2d' op inferred type(s) 'tensor<1x1x281474976710657x4xf32>' are incompatible with return type(s) of operation 'tensor<1x1x4x4xf32>'}}
  // expected-error@+1 {{'kiln.max_pool2d' op failed to infer returned types}}
  %0 = kiln.max_pool2d %x, window = [9223372036854775807, 2], strides = [1, 2], padding = [9223372036854775806, 9223372036854775806, 0, 0] : tensor<1x1x8x8xf32> -> tensor<1x1x4x4xf32>
  return %0 : tensor<1x1x4x4xf32>
}
