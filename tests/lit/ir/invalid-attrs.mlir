// RUN: kiln-opt %s -split-input-file -verify-diagnostics
//
// The kiln dialect's function and module annotations: the checks of
// ir/KilnDialect.cpp on kiln.* argument, result and operation attributes,
// and the parse errors of #kiln.role, #kiln.init and #kiln.training. Each
// case opens with a line saying what it tests.

// kiln.role on an argument is a #kiln.role.
// expected-error@+1 {{argument 0 of @role_string: 'kiln.role' must be a #kiln.role<...>, but is "input"}}
func.func @role_string(%x: tensor<4xf32> {kiln.role = "input"}) {
  return
}

// -----

// kiln.role on a result is a #kiln.role.
// expected-error@+1 {{result 0 of @role_result: 'kiln.role' must be a #kiln.role<...>, but is #kiln.init<kind = zeros>}}
func.func @role_result(%x: tensor<f32>) -> (tensor<f32> {kiln.role = #kiln.init<kind = zeros>}) {
  return %x : tensor<f32>
}

// -----

// kiln.init is a #kiln.init.
// expected-error@+1 {{argument 1 of @init_kind: 'kiln.init' must be a #kiln.init<...>, but is #kiln.role<parameter>}}
func.func @init_kind(%x: tensor<4xf32>, %w: tensor<4xf32> {kiln.init = #kiln.role<parameter>}) {
  return
}

// -----

// kiln.name is a string.
// expected-error@+1 {{argument 0 of @name_int: 'kiln.name' must be a string, but is 3 : i64}}
func.func @name_int(%x: tensor<4xf32> {kiln.name = 3}) {
  return
}

// -----

// kiln.grad_of is the index of an argument, as an integer.
// expected-error@+1 {{result 0 of @grad_of_string: 'kiln.grad_of' must be the index of an argument, but is "w"}}
func.func @grad_of_string(%w: tensor<4xf32>) -> (tensor<4xf32> {kiln.grad_of = "w"}) {
  return %w : tensor<4xf32>
}

// -----

// kiln.grad_of names an existing argument.
// expected-error@+1 {{result 0 of @grad_of_range: 'kiln.grad_of' must be the index of an argument, but is 1 : i64}}
func.func @grad_of_range(%w: tensor<4xf32>) -> (tensor<4xf32> {kiln.grad_of = 1 : i64}) {
  return %w : tensor<4xf32>
}

// -----

// kiln.updates names an existing argument.
// expected-error@+1 {{result 0 of @updates_negative: 'kiln.updates' must be the index of an argument, but is -1 : i64}}
func.func @updates_negative(%w: tensor<4xf32>) -> (tensor<4xf32> {kiln.updates = -1 : i64}) {
  return %w : tensor<4xf32>
}

// -----

// Unknown kiln.* argument attributes are rejected (a misspelt role).
// expected-error@+1 {{argument 0 of @unknown_arg: unknown attribute 'kiln.roles'}}
func.func @unknown_arg(%x: tensor<4xf32> {kiln.roles = #kiln.role<input>}) {
  return
}

// -----

// Unknown kiln.* result attributes are rejected.
// expected-error@+1 {{result 0 of @unknown_result: unknown attribute 'kiln.loss'}}
func.func @unknown_result(%x: tensor<f32>) -> (tensor<f32> {kiln.loss}) {
  return %x : tensor<f32>
}

// -----

// kiln.shard (a ZeRO shard, from kiln-distribute) is a dictionary with the
// bucket, world size, length and parameters, on an argument.
// expected-error@+1 {{argument 0 of @bad_shard: 'kiln.shard' must be a dictionary {bucket, world_size, length, params} on an argument, but is {bucket = 0 : i64}}}
func.func @bad_shard(%x: tensor<4xf32> {kiln.shard = {bucket = 0 : i64}}) {
  return
}

// -----

// expected-error@+1 {{result 0 of @shard_result: 'kiln.shard' must be a dictionary}}
func.func @shard_result(%x: tensor<4xf32>) -> (tensor<4xf32> {kiln.shard = {bucket = 0 : i64, world_size = 2 : i64, length = 7 : i64, params = []}}) {
  return %x : tensor<4xf32>
}

// -----

// kiln.training is a #kiln.training.
// expected-error@+1 {{'kiln.training' must be a #kiln.training<...>, but is "adam"}}
module attributes {kiln.training = "adam"} {
}

// -----

// kiln.training is on the module, not on a function.
// expected-error@+1 {{'kiln.training' must be on the module, but is on a 'func.func' op}}
func.func @training_on_function() attributes {kiln.training = #kiln.training<optimizer = sgd>} {
  return
}

// -----

// Unknown kiln.* attributes on the module are rejected.
// expected-error@+1 {{unknown attribute 'kiln.optimizer' on a 'builtin.module' op (the kiln dialect puts kiln.training on the module and the buffer plan, kiln.buffer_offsets, kiln.aliases, kiln.arena_bytes, kiln.peak_bytes and kiln.lower_bound_bytes, and kiln-autodiff's kiln.remat_candidates, on functions and ops)}}
module attributes {kiln.optimizer = "adam"} {
}

// -----

// Argument attributes on an op are rejected, with a hint where they go.
func.func @name_on_op(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{unknown attribute 'kiln.name' on a 'kiln.neg' op (the kiln dialect puts kiln.training on the module and the buffer plan, kiln.buffer_offsets, kiln.aliases, kiln.arena_bytes, kiln.peak_bytes and kiln.lower_bound_bytes, and kiln-autodiff's kiln.remat_candidates, on functions and ops; 'kiln.name' belongs on a function argument or result)}}
  %0 = kiln.neg %x {kiln.name = "fc1"} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// A role outside the enum does not parse.
// expected-error@+2 {{expected ::kiln::Role to be one of: input, label, parameter, optimizer_state, step, loss, output, gradient}}
// expected-error@+1 {{failed to parse Kiln_RoleAttr parameter 'value' which is to be a `::kiln::Role`}}
func.func @bad_role(%x: tensor<4xf32> {kiln.role = #kiln.role<weights>}) {
  return
}

// -----

// An initializer kind outside the enum does not parse.
// expected-error@+2 {{invalid parameter initializer specification: gaussian}}
// expected-error@+1 {{failed to parse Kiln_InitializerAttr parameter 'kind' which is to be a `::kiln::InitKind`}}
func.func @bad_init_kind(%w: tensor<4xf32> {kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = gaussian>}) {
  return
}

// -----

// An initializer needs its kind.
// expected-error@+1 {{struct is missing required parameter: kind}}
func.func @init_without_kind(%w: tensor<4xf32> {kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<seed = 3>}) {
  return
}

// -----

// The training section needs its optimizer.
// expected-error@+1 {{struct is missing required parameter: optimizer}}
module attributes {kiln.training = #kiln.training<learning_rate = 0.1>} {
}

// -----

// The training section has no unknown fields.
// expected-error@+1 {{duplicate or unknown struct parameter name: lr}}
module attributes {kiln.training = #kiln.training<optimizer = sgd, lr = 0.1>} {
}
