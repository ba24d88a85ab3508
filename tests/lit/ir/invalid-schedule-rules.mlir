// RUN: kiln-opt %s -split-input-file -verify-diagnostics
//
// The scheduling rules kiln-distribute puts on collectives for
// kiln-schedule: kiln.prefetch (an integer of at least 0 on an all_gather)
// and kiln.issue_together (unit, on a collective).

func.func @prefetch_on_all_reduce(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'kiln.prefetch' must be an integer of at least 0 on a 'kiln.all_gather', but is 1 : i64 on a 'kiln.all_reduce' op}}
  %r = kiln.all_reduce sum %x {kiln.prefetch = 1 : i64} : tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

func.func @negative_prefetch(%x: tensor<4xf32>) -> tensor<8xf32> {
  // expected-error@+1 {{'kiln.prefetch' must be an integer of at least 0 on a 'kiln.all_gather', but is -1 : i64 on a 'kiln.all_gather' op}}
  %r = kiln.all_gather %x, dim = 0 {kiln.prefetch = -1 : i64} : tensor<4xf32> -> tensor<8xf32>
  return %r : tensor<8xf32>
}

// -----

func.func @together_not_unit(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'kiln.issue_together' must be a unit attribute on a collective, but is 1 : i64 on a 'kiln.all_reduce' op}}
  %r = kiln.all_reduce sum %x {kiln.issue_together = 1 : i64} : tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

func.func @together_on_compute(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'kiln.issue_together' must be a unit attribute on a collective, but is unit on a 'kiln.exp' op}}
  %r = kiln.exp %x {kiln.issue_together} : tensor<4xf32>
  return %r : tensor<4xf32>
}
