// RUN: kiln-opt %s -split-input-file -verify-diagnostics
//
// The type constraints of ir/KilnDialect.td (static shapes, the element
// types of each tensor class), the same-type traits, and the "inferred
// type(s) ... incompatible" check of every op with result-type inference.
// Each case opens with a line saying what it tests.

// Dynamic shapes are rejected (Kiln_NumericTensor, on kiln.add).
func.func @dynamic_shape(%a: tensor<?xf32>) -> tensor<?xf32> {
  // expected-error@+1 {{'kiln.add' op operand #0 must be statically shaped tensor of 64-bit float or 32-bit float or 16-bit float or bfloat16 type or 64-bit signless integer or 32-bit signless integer or 8-bit signless integer values, but got 'tensor<?xf32>'}}
  %0 = kiln.add %a, %a : tensor<?xf32>
  return %0 : tensor<?xf32>
}

// -----

// Dynamic shapes are rejected on results too (Kiln_Tensor, on kiln.recv).
func.func @dynamic_result() -> tensor<4x?xf32> {
  // expected-error@+1 {{'kiln.recv' op result #0 must be statically shaped tensor of 64-bit float or 32-bit float or 16-bit float or bfloat16 type or 64-bit signless integer or 32-bit signless integer or 8-bit signless integer or 1-bit signless integer values, but got 'tensor<4x?xf32>'}}
  %0 = kiln.recv peer = 0, channel = 0 : tensor<4x?xf32>
  return %0 : tensor<4x?xf32>
}

// -----

// Unranked tensors are rejected: by the custom parser, which wants a ranked
// tensor type...
func.func @unranked(%a: tensor<*xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{custom op 'kiln.reshape' invalid kind of type specified}}
  %0 = kiln.reshape %a : tensor<*xf32> -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// ... and by the verifier in the generic form (kiln.reshape's operand).
func.func @unranked_generic(%a: tensor<*xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'kiln.reshape' op operand #0 must be statically shaped tensor of 64-bit float or 32-bit float or 16-bit float or bfloat16 type or 64-bit signless integer or 32-bit signless integer or 8-bit signless integer or 1-bit signless integer values, but got 'tensor<*xf32>'}}
  %0 = "kiln.reshape"(%a) : (tensor<*xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// Element types outside f64, f32, f16, bf16, i64, i32, i8, i1 are rejected
// (i16 on kiln.add).
func.func @unsupported_integer(%a: tensor<4xi16>) -> tensor<4xi16> {
  // expected-error@+1 {{'kiln.add' op operand #0 must be statically shaped tensor of 64-bit float or 32-bit float or 16-bit float or bfloat16 type or 64-bit signless integer or 32-bit signless integer or 8-bit signless integer values, but got 'tensor<4xi16>'}}
  %0 = kiln.add %a, %a : tensor<4xi16>
  return %0 : tensor<4xi16>
}

// -----

// Unsigned integers are rejected too (ui8 on kiln.convert).
func.func @unsigned(%a: tensor<4xui8>) -> tensor<4xf32> {
  // expected-error@+1 {{'kiln.convert' op operand #0 must be statically shaped tensor of 64-bit float or 32-bit float or 16-bit float or bfloat16 type or 64-bit signless integer or 32-bit signless integer or 8-bit signless integer or 1-bit signless integer values, but got 'tensor<4xui8>'}}
  %0 = kiln.convert %a : tensor<4xui8> -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// Float types outside the four are rejected (f8E4M3FN on kiln.exp).
func.func @unsupported_float(%a: tensor<4xf8E4M3FN>) -> tensor<4xf8E4M3FN> {
  // expected-error@+1 {{'kiln.exp' op operand #0 must be statically shaped tensor of 64-bit float or 32-bit float or 16-bit float or bfloat16 type values, but got 'tensor<4xf8E4M3FN>'}}
  %0 = kiln.exp %a : tensor<4xf8E4M3FN>
  return %0 : tensor<4xf8E4M3FN>
}

// -----

// i1 into a float-only op (Kiln_FloatTensor, on kiln.exp).
func.func @i1_float_only(%a: tensor<4xi1>) -> tensor<4xi1> {
  // expected-error@+1 {{'kiln.exp' op operand #0 must be statically shaped tensor of 64-bit float or 32-bit float or 16-bit float or bfloat16 type values, but got 'tensor<4xi1>'}}
  %0 = kiln.exp %a : tensor<4xi1>
  return %0 : tensor<4xi1>
}

// -----

// An integer into a float-only op (kiln.pow).
func.func @int_float_only(%a: tensor<4xi32>) -> tensor<4xi32> {
  // expected-error@+1 {{'kiln.pow' op operand #0 must be statically shaped tensor of 64-bit float or 32-bit float or 16-bit float or bfloat16 type values, but got 'tensor<4xi32>'}}
  %0 = kiln.pow %a, %a : tensor<4xi32>
  return %0 : tensor<4xi32>
}

// -----

// i1 into a numeric op (Kiln_NumericTensor, on kiln.reduce).
func.func @i1_numeric(%a: tensor<4xi1>) -> tensor<i1> {
  // expected-error@+1 {{'kiln.reduce' op operand #0 must be statically shaped tensor of 64-bit float or 32-bit float or 16-bit float or bfloat16 type or 64-bit signless integer or 32-bit signless integer or 8-bit signless integer values, but got 'tensor<4xi1>'}}
  %0 = kiln.reduce sum %a, dims = [0] : tensor<4xi1> -> tensor<i1>
  return %0 : tensor<i1>
}

// -----

// Index tensors are i32 or i64 (Kiln_IndexTensor, on kiln.gather).
func.func @float_indices(%t: tensor<10x4xf32>, %i: tensor<3xf32>) -> tensor<3x4xf32> {
  // expected-error@+1 {{'kiln.gather' op operand #1 must be statically shaped tensor of 64-bit signless integer or 32-bit signless integer values, but got 'tensor<3xf32>'}}
  %0 = kiln.gather %t, %i : (tensor<10x4xf32>, tensor<3xf32>) -> tensor<3x4xf32>
  return %0 : tensor<3x4xf32>
}

// -----

// i8 is not an index type either (kiln.argmax's result).
func.func @i8_index(%a: tensor<4x5xf32>) -> tensor<4xi8> {
  // expected-error@+1 {{'kiln.argmax' op result #0 must be statically shaped tensor of 64-bit signless integer or 32-bit signless integer values, but got 'tensor<4xi8>'}}
  %0 = kiln.argmax %a, dim = 1 : tensor<4x5xf32> -> tensor<4xi8>
  return %0 : tensor<4xi8>
}

// -----

// Predicates are i1 (Kiln_PredTensor, on kiln.select).
func.func @int_predicate(%p: tensor<4xi32>, %a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'kiln.select' op operand #0 must be statically shaped tensor of 1-bit signless integer values, but got 'tensor<4xi32>'}}
  %0 = kiln.select %p, %a, %a : tensor<4xi32>, tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// kiln.random_uniform makes floats.
func.func @random_integers(%c: tensor<i64>) -> tensor<4xi32> {
  // expected-error@+1 {{'kiln.random_uniform' op result #0 must be statically shaped tensor of 64-bit float or 32-bit float or 16-bit float or bfloat16 type values, but got 'tensor<4xi32>'}}
  %0 = kiln.random_uniform %c, seed = 1 : tensor<4xi32>
  return %0 : tensor<4xi32>
}

// -----

// The dropout counter is a 0-d i64 tensor (Kiln_I64Scalar). The custom form
// does not spell its type, so this is written in the generic form.
func.func @dropout_counter(%a: tensor<4xf32>, %c: tensor<1xi64>) -> tensor<4xf32> {
  // expected-error@+1 {{'kiln.dropout' op operand #1 must be 0D tensor of 64-bit signless integer values, but got 'tensor<1xi64>'}}
  %0 = "kiln.dropout"(%a, %c) {rate = 0.5 : f64, seed = 1 : i64} : (tensor<4xf32>, tensor<1xi64>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// Binary ops take one type for both operands and the result.
func.func @binary_mixed(%a: tensor<4xf32>, %b: tensor<4xf16>) -> tensor<4xf32> {
  // expected-error@+1 {{'kiln.add' op requires the same type for all operands and results}}
  %0 = "kiln.add"(%a, %b) : (tensor<4xf32>, tensor<4xf16>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// kiln.gelu_grad takes one type for x, dy and the result.
func.func @gelu_grad_mixed(%x: tensor<4xf32>, %dy: tensor<4xbf16>) -> tensor<4xf32> {
  // expected-error@+1 {{'kiln.gelu_grad' op requires the same type for all operands and results}}
  %0 = "kiln.gelu_grad"(%x, %dy) <{approximate = 1 : i32}> : (tensor<4xf32>, tensor<4xbf16>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// kiln.gelu_grad is float-only (Kiln_FloatTensor).
func.func @gelu_grad_int(%x: tensor<4xi32>) -> tensor<4xi32> {
  // expected-error@+1 {{'kiln.gelu_grad' op operand #0 must be statically shaped tensor of 64-bit float or 32-bit float or 16-bit float or bfloat16 type values, but got 'tensor<4xi32>'}}
  %0 = kiln.gelu_grad tanh, %x, %x : tensor<4xi32>
  return %0 : tensor<4xi32>
}

// -----

// Unary ops keep the operand's type.
func.func @unary_type(%a: tensor<4xf32>) -> tensor<4xf16> {
  // expected-error@+1 {{'kiln.neg' op requires the same type for all operands and results}}
  %0 = "kiln.neg"(%a) : (tensor<4xf32>) -> tensor<4xf16>
  return %0 : tensor<4xf16>
}

// -----

// Elementwise ops keep the shape (the Elementwise trait speaks first).
func.func @unary_shape(%a: tensor<4xf32>) -> tensor<5xf32> {
  // expected-error@+1 {{'kiln.neg' op all non-scalar operands/results must have the same shape and base type}}
  %0 = "kiln.neg"(%a) : (tensor<4xf32>) -> tensor<5xf32>
  return %0 : tensor<5xf32>
}

// -----

// kiln.convert keeps the shape.
func.func @convert_shape(%a: tensor<4xf32>) -> tensor<2x2xf16> {
  // expected-error@+1 {{'kiln.convert' op all non-scalar operands/results must have the same shape and base type}}
  %0 = kiln.convert %a : tensor<4xf32> -> tensor<2x2xf16>
  return %0 : tensor<2x2xf16>
}

// -----

// kiln.select's predicate has the shape of its other operands.
func.func @select_pred_shape(%p: tensor<3xi1>, %a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'kiln.select' op all non-scalar operands/results must have the same shape and base type}}
  %0 = kiln.select %p, %a, %a : tensor<3xi1>, tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// kiln.select's branches have one type.
func.func @select_branches(%p: tensor<4xi1>, %a: tensor<4xf32>, %b: tensor<4xf16>) -> tensor<4xf32> {
  // expected-error@+1 {{'kiln.select' op failed to verify that all of {on_true, on_false, result} have same type}}
  %0 = "kiln.select"(%p, %a, %b) : (tensor<4xi1>, tensor<4xf32>, tensor<4xf16>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// kiln.compare's operands have one type.
func.func @compare_operands(%a: tensor<4xf32>, %b: tensor<4xf16>) -> tensor<4xi1> {
  // expected-error@+1 {{'kiln.compare' op failed to verify that all of {lhs, rhs} have same type}}
  %0 = "kiln.compare"(%a, %b) {direction = 2 : i32} : (tensor<4xf32>, tensor<4xf16>) -> tensor<4xi1>
  return %0 : tensor<4xi1>
}

// -----

// kiln.compare's result is i1.
func.func @compare_result(%a: tensor<4xf32>) -> tensor<4xi32> {
  // expected-error@+1 {{'kiln.compare' op result #0 must be statically shaped tensor of 1-bit signless integer values, but got 'tensor<4xi32>'}}
  %0 = "kiln.compare"(%a, %a) {direction = 2 : i32} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi32>
  return %0 : tensor<4xi32>
}

// -----

// Collectives that keep the type say so (kiln.all_reduce).
func.func @all_reduce_type(%a: tensor<4xf32>) -> tensor<4xf16> {
  // expected-error@+1 {{'kiln.all_reduce' op failed to verify that all of {operand, result} have same type}}
  %0 = "kiln.all_reduce"(%a) {reduction = 0 : i32} : (tensor<4xf32>) -> tensor<4xf16>
  return %0 : tensor<4xf16>
}

// -----

// An enum keyword outside the enum is rejected when parsed.
func.func @bad_direction(%a: tensor<4xf32>) -> tensor<4xi1> {
  // expected-error@+1 {{custom op 'kiln.compare' expected string or keyword containing one of the following enum values for attribute 'direction' [eq, ne, lt, le, gt, ge]}}
  %0 = kiln.compare lesser, %a, %a : tensor<4xf32>
  return %0 : tensor<4xi1>
}

// -----

// An enum value outside the enum is rejected by the verifier (generic form).
func.func @bad_reduce_kind(%a: tensor<4xf32>) -> tensor<f32> {
  // expected-error@+1 {{'kiln.reduce' op attribute 'kind' failed to satisfy constraint: reduction kind}}
  %0 = "kiln.reduce"(%a) {kind = 9 : i32, dimensions = array<i64: 0>} : (tensor<4xf32>) -> tensor<f32>
  return %0 : tensor<f32>
}

// -----
//===----------------------------------------------------------------------===//
// Result types that disagree with the inferred ones, for every op with
// result-type inference. MLIR follows its "inferred type(s) ... are
// incompatible" error with "failed to infer returned types".
//===----------------------------------------------------------------------===//

// kiln.constant's result type is the value's type.
func.func @infer_constant() -> tensor<3xf32> {
  // expected-error@+2 {{'kiln.constant' op inferred type(s) 'tensor<2xf32>' are incompatible with return type(s) of operation 'tensor<3xf32>'}}
  // expected-error@+1 {{'kiln.constant' op failed to infer returned types}}
  %0 = "kiln.constant"() {value = dense<[1.0, 2.0]> : tensor<2xf32>} : () -> tensor<3xf32>
  return %0 : tensor<3xf32>
}

// -----

// kiln.compare's result has the operand shape; the Elementwise trait reports
// a different one before the inference is compared.
func.func @infer_compare(%a: tensor<4xf32>) -> tensor<2x2xi1> {
  // expected-error@+1 {{'kiln.compare' op all non-scalar operands/results must have the same shape and base type}}
  %0 = "kiln.compare"(%a, %a) {direction = 0 : i32} : (tensor<4xf32>, tensor<4xf32>) -> tensor<2x2xi1>
  return %0 : tensor<2x2xi1>
}

// -----

// kiln.transpose permutes the shape.
func.func @infer_transpose(%a: tensor<2x3xf32>) -> tensor<2x3xf32> {
  // expected-error@+2 {{'kiln.transpose' op inferred type(s) 'tensor<3x2xf32>' are incompatible with return type(s) of operation 'tensor<2x3xf32>'}}
  // expected-error@+1 {{'kiln.transpose' op failed to infer returned types}}
  %0 = kiln.transpose %a, permutation = [1, 0] : tensor<2x3xf32> -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// -----

// kiln.slice rounds the strided extent up.
func.func @infer_slice(%a: tensor<5xf32>) -> tensor<2xf32> {
  // expected-error@+2 {{'kiln.slice' op inferred type(s) 'tensor<3xf32>' are incompatible with return type(s) of operation 'tensor<2xf32>'}}
  // expected-error@+1 {{'kiln.slice' op failed to infer returned types}}
  %0 = kiln.slice %a, start = [0], limit = [5], strides = [2] : tensor<5xf32> -> tensor<2xf32>
  return %0 : tensor<2xf32>
}

// -----

// kiln.concatenate sums the sizes along its dimension.
func.func @infer_concatenate(%a: tensor<2x3xf32>, %b: tensor<4x3xf32>) -> tensor<5x3xf32> {
  // expected-error@+2 {{'kiln.concatenate' op inferred type(s) 'tensor<6x3xf32>' are incompatible with return type(s) of operation 'tensor<5x3xf32>'}}
  // expected-error@+1 {{'kiln.concatenate' op failed to infer returned types}}
  %0 = "kiln.concatenate"(%a, %b) {dimension = 0 : i64} : (tensor<2x3xf32>, tensor<4x3xf32>) -> tensor<5x3xf32>
  return %0 : tensor<5x3xf32>
}

// -----

// kiln.pad adds both edges.
func.func @infer_pad(%a: tensor<2x3xf32>) -> tensor<3x3xf32> {
  // expected-error@+2 {{'kiln.pad' op inferred type(s) 'tensor<4x3xf32>' are incompatible with return type(s) of operation 'tensor<3x3xf32>'}}
  // expected-error@+1 {{'kiln.pad' op failed to infer returned types}}
  %0 = kiln.pad %a, low = [1, 0], high = [1, 0], value = 0.0 : tensor<2x3xf32> -> tensor<3x3xf32>
  return %0 : tensor<3x3xf32>
}

// -----

// kiln.reduce drops the reduced dimensions and keeps the element type.
func.func @infer_reduce(%a: tensor<4x5xf32>) -> tensor<4x1xf32> {
  // expected-error@+2 {{'kiln.reduce' op inferred type(s) 'tensor<4xf32>' are incompatible with return type(s) of operation 'tensor<4x1xf32>'}}
  // expected-error@+1 {{'kiln.reduce' op failed to infer returned types}}
  %0 = kiln.reduce sum %a, dims = [1] : tensor<4x5xf32> -> tensor<4x1xf32>
  return %0 : tensor<4x1xf32>
}

// -----

// kiln.reduce keeps the element type.
func.func @infer_reduce_element(%a: tensor<4x5xf16>) -> tensor<4xf32> {
  // expected-error@+2 {{'kiln.reduce' op inferred type(s) 'tensor<4xf16>' are incompatible with return type(s) of operation 'tensor<4xf32>'}}
  // expected-error@+1 {{'kiln.reduce' op failed to infer returned types}}
  %0 = kiln.reduce sum %a, dims = [1] : tensor<4x5xf16> -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// kiln.dot_general: batch, lhs free, rhs free.
func.func @infer_dot_general(%a: tensor<2x4x8xf32>, %b: tensor<2x8x5xf32>) -> tensor<2x5x4xf32> {
  // expected-error@+2 {{'kiln.dot_general' op inferred type(s) 'tensor<2x4x5xf32>' are incompatible with return type(s) of operation 'tensor<2x5x4xf32>'}}
  // expected-error@+1 {{'kiln.dot_general' op failed to infer returned types}}
  %0 = kiln.dot_general %a, %b, batch = [0] x [0], contract = [2] x [1] : (tensor<2x4x8xf32>, tensor<2x8x5xf32>) -> tensor<2x5x4xf32>
  return %0 : tensor<2x5x4xf32>
}

// -----

// kiln.conv2d's output size.
func.func @infer_conv2d(%x: tensor<1x1x8x8xf32>, %w: tensor<2x1x3x3xf32>) -> tensor<1x2x8x8xf32> {
  // expected-error@+2 {{'kiln.conv2d' op inferred type(s) 'tensor<1x2x6x6xf32>' are incompatible with return type(s) of operation 'tensor<1x2x8x8xf32>'}}
  // expected-error@+1 {{'kiln.conv2d' op failed to infer returned types}}
  %0 = kiln.conv2d %x, %w, strides = [1, 1], padding = [0, 0, 0, 0], dilation = [1, 1], groups = 1
         : (tensor<1x1x8x8xf32>, tensor<2x1x3x3xf32>) -> tensor<1x2x8x8xf32>
  return %0 : tensor<1x2x8x8xf32>
}

// -----

// kiln.max_pool2d's output size.
func.func @infer_max_pool(%x: tensor<1x3x8x8xf32>) -> tensor<1x3x3x3xf32> {
  // expected-error@+2 {{'kiln.max_pool2d' op inferred type(s) 'tensor<1x3x4x4xf32>' are incompatible with return type(s) of operation 'tensor<1x3x3x3xf32>'}}
  // expected-error@+1 {{'kiln.max_pool2d' op failed to infer returned types}}
  %0 = kiln.max_pool2d %x, window = [2, 2], strides = [2, 2], padding = [0, 0, 0, 0] : tensor<1x3x8x8xf32> -> tensor<1x3x3x3xf32>
  return %0 : tensor<1x3x3x3xf32>
}

// -----

// kiln.avg_pool2d keeps the element type.
func.func @infer_avg_pool(%x: tensor<1x3x8x8xf32>) -> tensor<1x3x4x4xf16> {
  // expected-error@+2 {{'kiln.avg_pool2d' op inferred type(s) 'tensor<1x3x4x4xf32>' are incompatible with return type(s) of operation 'tensor<1x3x4x4xf16>'}}
  // expected-error@+1 {{'kiln.avg_pool2d' op failed to infer returned types}}
  %0 = kiln.avg_pool2d %x, window = [2, 2], strides = [2, 2], padding = [0, 0, 0, 0] : tensor<1x3x8x8xf32> -> tensor<1x3x4x4xf16>
  return %0 : tensor<1x3x4x4xf16>
}

// -----

// kiln.gather: index shape, then the table's row shape.
func.func @infer_gather(%t: tensor<10x4xf32>, %i: tensor<2x3xi32>) -> tensor<6x4xf32> {
  // expected-error@+2 {{'kiln.gather' op inferred type(s) 'tensor<2x3x4xf32>' are incompatible with return type(s) of operation 'tensor<6x4xf32>'}}
  // expected-error@+1 {{'kiln.gather' op failed to infer returned types}}
  %0 = kiln.gather %t, %i : (tensor<10x4xf32>, tensor<2x3xi32>) -> tensor<6x4xf32>
  return %0 : tensor<6x4xf32>
}

// -----

// kiln.scatter_add has the operand's type.
func.func @infer_scatter_add(%t: tensor<10x4xf32>, %i: tensor<3xi32>, %u: tensor<3x4xf32>) -> tensor<3x4xf32> {
  // expected-error@+2 {{'kiln.scatter_add' op inferred type(s) 'tensor<10x4xf32>' are incompatible with return type(s) of operation 'tensor<3x4xf32>'}}
  // expected-error@+1 {{'kiln.scatter_add' op failed to infer returned types}}
  %0 = kiln.scatter_add %t, %i, %u : (tensor<10x4xf32>, tensor<3xi32>, tensor<3x4xf32>) -> tensor<3x4xf32>
  return %0 : tensor<3x4xf32>
}

// -----

// kiln.softmax_cross_entropy gives one loss per example.
func.func @infer_sce(%l: tensor<8x10xf32>, %y: tensor<8xi64>) -> tensor<f32> {
  // expected-error@+2 {{'kiln.softmax_cross_entropy' op inferred type(s) 'tensor<8xf32>' are incompatible with return type(s) of operation 'tensor<f32>'}}
  // expected-error@+1 {{'kiln.softmax_cross_entropy' op failed to infer returned types}}
  %0 = kiln.softmax_cross_entropy %l, %y : (tensor<8x10xf32>, tensor<8xi64>) -> tensor<f32>
  return %0 : tensor<f32>
}

// -----

// kiln.compare infers its result while parsing, so a dynamic operand is
// reported there, by the inference.
func.func @infer_compare_dynamic(%a: tensor<?xf32>) {
  // expected-error@+1 {{'kiln.compare' op operand #0 must be a statically shaped tensor, but is 'tensor<?xf32>'}}
  %0 = kiln.compare lt, %a, %a : tensor<?xf32>
  return
}
