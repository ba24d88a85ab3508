// RUN: kiln-opt %s -split-input-file -verify-diagnostics -kiln-autodiff -canonicalize -cse | FileCheck %s
//
// kiln-autodiff (passes/Autodiff.cpp): which functions it differentiates,
// the results it appends and their attributes, how gradients of a value used
// several times add up, and what a parameter that does not reach the loss
// gets. The per-op rules have their own files (autodiff-<family>.mlir).

// A model: one gradient result per parameter, appended after the existing
// results in argument order, each with the parameter's name and index;
// inputs and labels get none; the other results are kept.
// CHECK-LABEL: func.func @mlp
// CHECK-SAME: -> (tensor<f32> {kiln.role = #kiln.role<loss>}, tensor<4x3xf32> {kiln.role = #kiln.role<output>},
// CHECK-SAME: tensor<8x3xf32> {kiln.grad_of = 1 : i64, kiln.name = "fc.weight", kiln.role = #kiln.role<gradient>},
// CHECK-SAME: tensor<3xf32> {kiln.grad_of = 3 : i64, kiln.name = "fc.bias", kiln.role = #kiln.role<gradient>})
// CHECK-DAG: %[[SCALE:.*]] = kiln.constant dense<2.500000e-01> : tensor<4xf32>
// CHECK: %[[D:.*]] = kiln.dot_general %arg0, %arg1
// CHECK: %[[LOGITS:.*]] = kiln.add %[[D]], %{{.*}}
// CHECK: %[[L:.*]] = kiln.softmax_cross_entropy %[[LOGITS]], %arg2
// CHECK: %[[LOSS:.*]] = kiln.reduce mean %[[L]]
// CHECK: %[[DLOGITS:.*]] = kiln.mul %{{.*}}, %{{.*}} : tensor<4x3xf32>
// CHECK: %[[DB:.*]] = kiln.reduce sum %[[DLOGITS]], dims = [0] : tensor<4x3xf32> -> tensor<3xf32>
// CHECK: %[[DW:.*]] = kiln.dot_general %arg0, %[[DLOGITS]], batch = [] x [], contract = [0] x [0] : (tensor<4x8xf32>, tensor<4x3xf32>) -> tensor<8x3xf32>
// CHECK: return %[[LOSS]], %[[LOGITS]], %[[DW]], %[[DB]]
func.func @mlp(
    %x: tensor<4x8xf32> {kiln.role = #kiln.role<input>},
    %w: tensor<8x3xf32> {kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = glorot_uniform, seed = 1>, kiln.name = "fc.weight"},
    %y: tensor<4xi32> {kiln.role = #kiln.role<label>},
    %b: tensor<3xf32> {kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = zeros>, kiln.name = "fc.bias"})
    -> (tensor<f32> {kiln.role = #kiln.role<loss>}, tensor<4x3xf32> {kiln.role = #kiln.role<output>}) {
  %d = kiln.dot_general %x, %w, batch = [] x [], contract = [1] x [0] : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
  %bb = kiln.broadcast_in_dim %b, dims = [1] : tensor<3xf32> -> tensor<4x3xf32>
  %z = kiln.add %d, %bb : tensor<4x3xf32>
  %l = kiln.softmax_cross_entropy %z, %y : (tensor<4x3xf32>, tensor<4xi32>) -> tensor<4xf32>
  %m = kiln.reduce mean %l, dims = [0] : tensor<4xf32> -> tensor<f32>
  return %m, %z : tensor<f32>, tensor<4x3xf32>
}

// -----

// Fan-out: x feeds sin and the mul, and the mul twice; the contributions
// are added with kiln.add (g * x + g * x for the two mul operands, then the
// cos term).
// CHECK-LABEL: func.func @fan_out
// CHECK: %[[G:.*]] = kiln.broadcast_in_dim
// CHECK: %[[P:.*]] = kiln.mul %[[G]], %arg0
// CHECK: %[[TWICE:.*]] = kiln.add %[[P]], %[[P]]
// CHECK: %[[C:.*]] = kiln.cos %arg0
// CHECK: %[[SIN:.*]] = kiln.mul %[[G]], %[[C]]
// CHECK: %[[DX:.*]] = kiln.add %[[TWICE]], %[[SIN]]
// CHECK: return %{{.*}}, %[[DX]]
func.func @fan_out(%x: tensor<4xf32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %s = kiln.sin %x : tensor<4xf32>
  %q = kiln.mul %x, %x : tensor<4xf32>
  %t = kiln.add %s, %q : tensor<4xf32>
  %l = kiln.reduce sum %t, dims = [0] : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A parameter with no path to the loss gets zeros and a remark naming it.
// CHECK-LABEL: func.func @unused_parameter
// CHECK-SAME: tensor<2x2xf32> {kiln.grad_of = 1 : i64, kiln.name = "spare", kiln.role = #kiln.role<gradient>}
// CHECK: %[[ZERO:.*]] = kiln.constant dense<0.000000e+00> : tensor<2x2xf32>
// CHECK: return %{{.*}}, %{{.*}}, %[[ZERO]]
func.func @unused_parameter(%x: tensor<4xf32> {kiln.role = #kiln.role<parameter>, kiln.name = "used"},
    // expected-warning@+1 {{parameter argument 1 ('spare') of @unused_parameter receives no gradient from the loss; its gradient is zero}}
    %u: tensor<2x2xf32> {kiln.role = #kiln.role<parameter>, kiln.name = "spare"}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %l = kiln.reduce sum %x, dims = [0] : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// The loss may be a parameter itself: its gradient is the seed, 1.
// CHECK-LABEL: func.func @loss_is_parameter
// CHECK: %[[ONE:.*]] = kiln.constant dense<1.000000e+00> : tensor<f32>
// CHECK: return %arg0, %[[ONE]]
func.func @loss_is_parameter(%p: tensor<f32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  return %p : tensor<f32>
}

// -----

// Ops that read no parameter get no gradient: an all_reduce of the input
// is left alone, with no backward all-reduce.
// CHECK-LABEL: func.func @input_side_ops
// CHECK: kiln.all_reduce sum %arg0
// CHECK-NOT: kiln.all_reduce
// CHECK: return %{{.*}}, %{{.*}} : tensor<f32>, tensor<4xf32>
func.func @input_side_ops(%x: tensor<4xf32> {kiln.role = #kiln.role<input>},
    %w: tensor<4xf32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %s = kiln.all_reduce sum %x : tensor<4xf32>
  %p = kiln.mul %s, %w : tensor<4xf32>
  %l = kiln.reduce sum %p, dims = [0] : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// f64 and bf16 models: the seed and the gradients have the loss's and the
// parameters' element types.
// CHECK-LABEL: func.func @element_types
// CHECK-SAME: -> (tensor<f64> {kiln.role = #kiln.role<loss>}, tensor<3xbf16> {kiln.grad_of = 0 : i64, kiln.role = #kiln.role<gradient>})
// CHECK: kiln.constant dense<1.000000e+00> : tensor<f64>
// CHECK: %[[D:.*]] = kiln.convert %{{.*}} : tensor<3xf64> -> tensor<3xbf16>
// CHECK: return %{{.*}}, %[[D]]
func.func @element_types(%p: tensor<3xbf16> {kiln.role = #kiln.role<parameter>}) -> (tensor<f64> {kiln.role = #kiln.role<loss>}) {
  %c = kiln.convert %p : tensor<3xbf16> -> tensor<3xf64>
  %l = kiln.reduce sum %c, dims = [0] : tensor<3xf64> -> tensor<f64>
  return %l : tensor<f64>
}

// -----

// Functions without a loss result, and private functions, are left alone.
// CHECK-LABEL: func.func @no_loss
// CHECK-SAME: -> (tensor<4xf32> {kiln.role = #kiln.role<output>}) {
// CHECK-LABEL: func.func private @helper
// CHECK-SAME: -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
func.func @no_loss(%w: tensor<4xf32> {kiln.role = #kiln.role<parameter>}) -> (tensor<4xf32> {kiln.role = #kiln.role<output>}) {
  %r = kiln.relu %w : tensor<4xf32>
  return %r : tensor<4xf32>
}
func.func private @helper(%w: tensor<4xf32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %l = kiln.reduce sum %w, dims = [0] : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}
