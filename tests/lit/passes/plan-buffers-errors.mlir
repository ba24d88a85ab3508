// RUN: kiln-opt %s -split-input-file -verify-diagnostics --kiln-plan-buffers
// RUN: not kiln-opt %s -split-input-file --kiln-plan-buffers=alignment=48 2>&1 | FileCheck %s --check-prefix=ALIGN

// ALIGN: kiln-plan-buffers: alignment must be a power of two, but is 48

// An argument whose size is unknown cannot be planned.
// expected-error@+1 {{kiln-plan-buffers cannot size argument 0 of @dynamic: expected a statically shaped tensor of integers or floats, but it is 'tensor<?xf32>'}}
func.func @dynamic(%a: tensor<?xf32>) -> tensor<?xf32> {
  return %a : tensor<?xf32>
}

// -----

// The plan's attributes are checked where they appear: one offset per
// result.
func.func @offsets(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'kiln.buffer_offsets' must be an array<i64> with one entry per result (1), but is array<i64: 0, 64>}}
  %0 = kiln.exp %a {kiln.buffer_offsets = array<i64: 0, 64>} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// Argument indices and offsets are -1 or more.
func.func @aliases(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'kiln.aliases' entries must be -1 or more, but one is -2}}
  %0 = kiln.exp %a {kiln.aliases = array<i64: -2>, kiln.buffer_offsets = array<i64: -1>} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// Byte counts belong on the function.
func.func @arena(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'kiln.arena_bytes' must be a non-negative integer on a function, but is 16 : i64 on a 'kiln.exp' op}}
  %0 = kiln.exp %a {kiln.arena_bytes = 16 : i64} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// expected-error@+1 {{'kiln.peak_bytes' must be a non-negative integer on a function, but is -1 : i64 on a 'func.func' op}}
func.func @peak(%a: tensor<4xf32>) -> tensor<4xf32> attributes {kiln.peak_bytes = -1 : i64} {
  return %a : tensor<4xf32>
}
