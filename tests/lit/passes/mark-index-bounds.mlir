// RUN: kiln-opt %s -split-input-file -kiln-mark-index-bounds -verify-diagnostics | FileCheck %s
//
// kiln-mark-index-bounds (passes/MarkIndexBounds.cpp): each integer input
// or label argument gets kiln.index_bound, the smallest bound its uses read
// it under as indices (a gather's table rows, a scatter_add's operand rows,
// a cross-entropy's classes), followed through reshape, convert, slice and
// the other ops that move indices unchanged. The package records it and
// kiln train checks the data against it. Each case opens with a line
// saying what it tests.

// Token ids through an embedding (rows 50) and labels through a
// cross-entropy (classes 7); the float input and the parameter get none.
// CHECK-LABEL: func.func @gather_and_labels
// CHECK-SAME: %{{.*}}: tensor<4xi32> {kiln.index_bound = 50 : i64, kiln.role = #kiln.role<input>}
// CHECK-SAME: %{{.*}}: tensor<4x6xf32> {kiln.role = #kiln.role<input>}
// CHECK-SAME: %{{.*}}: tensor<4xi32> {kiln.index_bound = 7 : i64, kiln.role = #kiln.role<label>}
// CHECK-SAME: %{{.*}}: tensor<50x6xf32> {kiln.init = #kiln.init<kind = zeros>, kiln.role = #kiln.role<parameter>}
func.func @gather_and_labels(
    %tok: tensor<4xi32> {kiln.role = #kiln.role<input>},
    %x: tensor<4x6xf32> {kiln.role = #kiln.role<input>},
    %y: tensor<4xi32> {kiln.role = #kiln.role<label>},
    %table: tensor<50x6xf32> {kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = zeros>},
    %w: tensor<6x7xf32> {kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = zeros>})
    -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %e = kiln.gather %table, %tok : (tensor<50x6xf32>, tensor<4xi32>) -> tensor<4x6xf32>
  %s = kiln.add %e, %x : tensor<4x6xf32>
  %d = kiln.dot_general %s, %w, batch = [] x [], contract = [1] x [0] : (tensor<4x6xf32>, tensor<6x7xf32>) -> tensor<4x7xf32>
  %l = kiln.softmax_cross_entropy %d, %y : (tensor<4x7xf32>, tensor<4xi32>) -> tensor<4xf32>
  %r = kiln.reduce mean %l, dims = [0] : tensor<4xf32> -> tensor<f32>
  return %r : tensor<f32>
}

// -----

// Two uses, through a reshape and a convert: the smaller bound wins (a
// scatter_add's 12 rows against a gather's 30), and a smaller bound the
// graph already states is kept.
// CHECK-LABEL: func.func @smallest_use
// CHECK-SAME: %{{.*}}: tensor<2x2xi32> {kiln.index_bound = 12 : i64, kiln.role = #kiln.role<input>}
// CHECK-SAME: %{{.*}}: tensor<4xi32> {kiln.index_bound = 5 : i64, kiln.role = #kiln.role<input>}
func.func @smallest_use(
    %i: tensor<2x2xi32> {kiln.role = #kiln.role<input>},
    %j: tensor<4xi32> {kiln.role = #kiln.role<input>, kiln.index_bound = 5 : i64},
    %t: tensor<30x3xf32> {kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = zeros>},
    %u: tensor<12x3xf32> {kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = zeros>})
    -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %flat = kiln.reshape %i : tensor<2x2xi32> -> tensor<4xi32>
  %wide = kiln.convert %flat : tensor<4xi32> -> tensor<4xi64>
  %g = kiln.gather %t, %wide : (tensor<30x3xf32>, tensor<4xi64>) -> tensor<4x3xf32>
  %sc = kiln.scatter_add %u, %flat, %g : (tensor<12x3xf32>, tensor<4xi32>, tensor<4x3xf32>) -> tensor<12x3xf32>
  %g2 = kiln.gather %t, %j : (tensor<30x3xf32>, tensor<4xi32>) -> tensor<4x3xf32>
  %r1 = kiln.reduce sum %sc, dims = [0, 1] : tensor<12x3xf32> -> tensor<f32>
  %r2 = kiln.reduce sum %g2, dims = [0, 1] : tensor<4x3xf32> -> tensor<f32>
  %r = kiln.add %r1, %r2 : tensor<f32>
  return %r : tensor<f32>
}

// -----

// An integer input no index use reads (a count converted to floats) and
// integer inputs nothing reads get no bound; nor do the arguments of a
// private function (a helper, not a model), whatever reads them.
// CHECK-LABEL: func.func @unbounded
// CHECK-NOT: kiln.index_bound
// CHECK: return
func.func @unbounded(
    %n: tensor<4xi32> {kiln.role = #kiln.role<input>},
    %tab: tensor<4x2xi32> {kiln.role = #kiln.role<input>},
    %k: tensor<2xi32> {kiln.role = #kiln.role<input>})
    -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %f = kiln.convert %n : tensor<4xi32> -> tensor<4xf32>
  %s = kiln.reduce sum %f, dims = [0] : tensor<4xf32> -> tensor<f32>
  return %s : tensor<f32>
}
// CHECK-LABEL: func.func private @helper
// CHECK-NOT: kiln.index_bound
func.func private @helper(%i: tensor<4xi32>, %t: tensor<9x2xf32>) -> tensor<4x2xf32> {
  %g = kiln.gather %t, %i : (tensor<9x2xf32>, tensor<4xi32>) -> tensor<4x2xf32>
  return %g : tensor<4x2xf32>
}

// -----

// The attribute is checked: an integer of at least 1, on an integer input
// or label argument.
// expected-error@+1 {{argument 0 of @zero_bound: 'kiln.index_bound' must be an integer of at least 1 on an integer input or label argument, but is 0 : i64}}
func.func @zero_bound(%i: tensor<4xi32> {kiln.role = #kiln.role<input>, kiln.index_bound = 0 : i64}) {
  return
}

// -----

// expected-error@+1 {{argument 0 of @float_bound: 'kiln.index_bound' must be an integer of at least 1 on an integer input or label argument, but is 3 : i64}}
func.func @float_bound(%x: tensor<4xf32> {kiln.role = #kiln.role<input>, kiln.index_bound = 3 : i64}) {
  return
}

// -----

// expected-error@+1 {{argument 0 of @parameter_bound: 'kiln.index_bound' must be an integer of at least 1 on an integer input or label argument, but is 3 : i64}}
func.func @parameter_bound(%p: tensor<4xi32> {kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = zeros>, kiln.index_bound = 3 : i64}) {
  return
}

// -----

// expected-error@+1 {{result 0 of @result_bound: 'kiln.index_bound' must be an integer of at least 1 on an integer input or label argument, but is 3 : i64}}
func.func @result_bound(%i: tensor<4xi32>) -> (tensor<4xi32> {kiln.index_bound = 3 : i64}) {
  return %i : tensor<4xi32>
}
