// RUN: kiln-opt %s -split-input-file -kiln-verify-roles -verify-diagnostics | FileCheck %s
//
// kiln-verify-roles (passes/VerifyRoles.cpp): every public function argument
// has a role, parameters have an initializer and others do not, and a loss
// result is a 0-d float tensor. Each case opens with a line saying what it
// tests; the well-formed ones are printed and checked.

// A well-formed model passes unchanged: input, label, parameter with its
// initializer, optimizer state, and a 0-d f32 loss next to another output.
// CHECK-LABEL: func.func @well_formed
// CHECK-SAME: kiln.role = #kiln.role<parameter>
// CHECK-SAME: -> (tensor<f32> {kiln.role = #kiln.role<loss>}, tensor<4x3xf32> {kiln.role = #kiln.role<output>})
func.func @well_formed(
    %x: tensor<4x8xf32> {kiln.role = #kiln.role<input>},
    %y: tensor<4xi32> {kiln.role = #kiln.role<label>},
    %w: tensor<8x3xf32> {kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = glorot_uniform, seed = 1>},
    %m: tensor<8x3xf32> {kiln.role = #kiln.role<optimizer_state>, kiln.init = #kiln.init<kind = zeros>})
    -> (tensor<f32> {kiln.role = #kiln.role<loss>}, tensor<4x3xf32> {kiln.role = #kiln.role<output>}) {
  %d = kiln.dot_general %x, %w, batch = [] x [], contract = [1] x [0] : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
  %l = kiln.softmax_cross_entropy %d, %y : (tensor<4x3xf32>, tensor<4xi32>) -> tensor<4xf32>
  %r = kiln.reduce mean %l, dims = [0] : tensor<4xf32> -> tensor<f32>
  return %r, %d : tensor<f32>, tensor<4x3xf32>
}

// -----

// Private functions (helpers) are not models: their arguments need no roles.
// CHECK-LABEL: func.func private @helper
func.func private @helper(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = kiln.relu %x : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// External declarations are skipped too.
// CHECK-LABEL: func.func private @external
func.func private @external(%x: tensor<4xf32>) -> tensor<4xf32>

// -----

// A public function's argument without a role.
// expected-error@+1 {{argument 1 of @no_role needs a kiln.role (input, label, parameter, ...)}}
func.func @no_role(%x: tensor<4xf32> {kiln.role = #kiln.role<input>}, %w: tensor<4xf32>) -> tensor<4xf32> {
  %0 = kiln.mul %x, %w : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// A parameter without an initializer.
// expected-error@+1 {{parameter argument 0 of @no_init needs a kiln.init}}
func.func @no_init(%w: tensor<4xf32> {kiln.role = #kiln.role<parameter>}) -> tensor<4xf32> {
  return %w : tensor<4xf32>
}

// -----

// An initializer on a data input.
// expected-error@+1 {{argument 0 of @init_on_input has a kiln.init but its role is input}}
func.func @init_on_input(%x: tensor<4xf32> {kiln.role = #kiln.role<input>, kiln.init = #kiln.init<kind = zeros>}) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}

// -----

// Model state (a batch norm's running mean): an initialized argument, and a
// result that updates it.
// CHECK-LABEL: func.func @model_state
// CHECK-SAME: kiln.role = #kiln.role<model_state>
// CHECK-SAME: tensor<3xf32> {kiln.role = #kiln.role<model_state>, kiln.updates = 1 : i64}
func.func @model_state(%x: tensor<4x3xf32> {kiln.role = #kiln.role<input>},
                       %s: tensor<3xf32> {kiln.role = #kiln.role<model_state>, kiln.init = #kiln.init<kind = zeros>})
    -> (tensor<f32> {kiln.role = #kiln.role<loss>}, tensor<3xf32> {kiln.role = #kiln.role<model_state>, kiln.updates = 1 : i64}) {
  %m = kiln.reduce mean %x, dims = [0] : tensor<4x3xf32> -> tensor<3xf32>
  %l = kiln.reduce sum %m, dims = [0] : tensor<3xf32> -> tensor<f32>
  return %l, %m : tensor<f32>, tensor<3xf32>
}

// -----

// Model state without an initializer.
// expected-error@+1 {{model_state argument 1 of @state_no_init needs a kiln.init}}
func.func @state_no_init(%x: tensor<3xf32> {kiln.role = #kiln.role<input>},
                         %s: tensor<3xf32> {kiln.role = #kiln.role<model_state>}) -> tensor<3xf32> {
  return %x : tensor<3xf32>
}

// -----

// A model_state result without kiln.updates.
// expected-error@+1 {{model_state result 0 of @state_no_updates needs kiln.updates, the index of the model_state argument it updates}}
func.func @state_no_updates(%s: tensor<3xf32> {kiln.role = #kiln.role<model_state>, kiln.init = #kiln.init<kind = zeros>})
    -> (tensor<3xf32> {kiln.role = #kiln.role<model_state>}) {
  return %s : tensor<3xf32>
}

// -----

// A model_state result that updates an input.
// expected-error@+1 {{model_state result 0 of @state_updates_input updates argument 0, which is not a model_state argument}}
func.func @state_updates_input(%x: tensor<3xf32> {kiln.role = #kiln.role<input>})
    -> (tensor<3xf32> {kiln.role = #kiln.role<model_state>, kiln.updates = 0 : i64}) {
  return %x : tensor<3xf32>
}

// -----

// A model_state result of another type than its argument.
// expected-error@+1 {{model_state result 0 of @state_type is 'tensor<3xf64>', but the argument 0 it updates is 'tensor<3xf32>'}}
func.func @state_type(%s: tensor<3xf32> {kiln.role = #kiln.role<model_state>, kiln.init = #kiln.init<kind = zeros>})
    -> (tensor<3xf64> {kiln.role = #kiln.role<model_state>, kiln.updates = 0 : i64}) {
  %d = kiln.convert %s : tensor<3xf32> -> tensor<3xf64>
  return %d : tensor<3xf64>
}

// -----

// Two updates of one model_state argument.
// expected-error@+1 {{model_state argument 0 of @state_twice is updated by results 0 and 1}}
func.func @state_twice(%s: tensor<3xf32> {kiln.role = #kiln.role<model_state>, kiln.init = #kiln.init<kind = zeros>})
    -> (tensor<3xf32> {kiln.role = #kiln.role<model_state>, kiln.updates = 0 : i64},
        tensor<3xf32> {kiln.role = #kiln.role<model_state>, kiln.updates = 0 : i64}) {
  return %s, %s : tensor<3xf32>, tensor<3xf32>
}

// -----

// An initializer on a label.
// expected-error@+1 {{argument 1 of @init_on_label has a kiln.init but its role is label}}
func.func @init_on_label(%x: tensor<4xf32> {kiln.role = #kiln.role<input>},
                         %y: tensor<4xi32> {kiln.role = #kiln.role<label>, kiln.init = #kiln.init<kind = ones>}) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}

// -----

// A loss that is not a scalar.
// expected-error@+1 {{loss result 0 of @loss_vector must be a 0-d float tensor, but is 'tensor<4xf32>'}}
func.func @loss_vector(%x: tensor<4xf32> {kiln.role = #kiln.role<input>}) -> (tensor<4xf32> {kiln.role = #kiln.role<loss>}) {
  return %x : tensor<4xf32>
}

// -----

// A loss that is not a float.
// expected-error@+1 {{loss result 1 of @loss_int must be a 0-d float tensor, but is 'tensor<i32>'}}
func.func @loss_int(%x: tensor<4xi32> {kiln.role = #kiln.role<input>})
    -> (tensor<4xi32> {kiln.role = #kiln.role<output>}, tensor<i32> {kiln.role = #kiln.role<loss>}) {
  %s = kiln.reduce sum %x, dims = [0] : tensor<4xi32> -> tensor<i32>
  return %x, %s : tensor<4xi32>, tensor<i32>
}

// -----

// Every public function is checked, not only the first: the error names the
// second one. (A failed pass prints nothing, so there is no CHECK here.)
func.func @fine(%x: tensor<4xf32> {kiln.role = #kiln.role<input>}) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}
// expected-error@+1 {{argument 0 of @second needs a kiln.role (input, label, parameter, ...)}}
func.func @second(%x: tensor<4xf32>) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}
