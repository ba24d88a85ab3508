// RUN: kiln-opt %s -split-input-file --kiln-test-interpret -verify-diagnostics
// RUN: not kiln-opt %s -split-input-file --kiln-test-interpret 2>&1 | FileCheck %s
//
// Errors of the reference interpreter that depend on values or on the one
// rank it runs: each names the op, says what was expected and what was
// found, and points at the op's location (checked exactly by
// -verify-diagnostics; the FileCheck run checks the full messages).

// A gather index outside [0, rows).
// CHECK: error: 'kiln.gather' op index 7 at position [1] of indices is out of range: the table has 2 rows, so indices must lie in [0, 2)
func.func @gather_index() -> tensor<2x2xf32> {
  %t = kiln.constant dense<[[1.0, 2.0], [3.0, 4.0]]> : tensor<2x2xf32>
  %i = kiln.constant dense<[1, 7]> : tensor<2xi32>
  // expected-error@+1 {{'kiln.gather' op index 7 at position [1] of indices is out of range: the table has 2 rows, so indices must lie in [0, 2)}}
  %r = kiln.gather %t, %i : (tensor<2x2xf32>, tensor<2xi32>) -> tensor<2x2xf32>
  return %r : tensor<2x2xf32>
}

// -----

// A negative scatter_add index, at a 2-D position.
// CHECK: error: 'kiln.scatter_add' op index -1 at position [1, 0] of indices is out of range: the operand has 3 rows, so indices must lie in [0, 3)
func.func @scatter_index() -> tensor<3xf32> {
  %z = kiln.constant dense<0.0> : tensor<3xf32>
  %i = kiln.constant dense<[[0], [-1]]> : tensor<2x1xi64>
  %u = kiln.constant dense<1.0> : tensor<2x1xf32>
  // expected-error@+1 {{'kiln.scatter_add' op index -1 at position [1, 0] of indices is out of range: the operand has 3 rows, so indices must lie in [0, 3)}}
  %r = kiln.scatter_add %z, %i, %u : (tensor<3xf32>, tensor<2x1xi64>, tensor<2x1xf32>) -> tensor<3xf32>
  return %r : tensor<3xf32>
}

// -----

// A label outside [0, classes).
// CHECK: error: 'kiln.softmax_cross_entropy' op label 10 at position [0] is out of range: the logits have 10 classes, so labels must lie in [0, 10)
func.func @label() -> tensor<1xf32> {
  %l = kiln.constant dense<0.0> : tensor<1x10xf32>
  %y = kiln.constant dense<10> : tensor<1xi32>
  // expected-error@+1 {{'kiln.softmax_cross_entropy' op label 10 at position [0] is out of range: the logits have 10 classes, so labels must lie in [0, 10)}}
  %r = kiln.softmax_cross_entropy %l, %y : (tensor<1x10xf32>, tensor<1xi32>) -> tensor<1xf32>
  return %r : tensor<1xf32>
}

// -----

// An error inside a fusion is reported on the inner op.
// CHECK: error: 'kiln.gather' op index 5 at position [0] of indices is out of range: the table has 4 rows, so indices must lie in [0, 4)
func.func @inside_fusion() -> tensor<1xf32> {
  %t = kiln.constant dense<1.0> : tensor<4xf32>
  %i = kiln.constant dense<5> : tensor<1xi32>
  %r = kiln.fusion loop (%t, %i) : (tensor<4xf32>, tensor<1xi32>) -> tensor<1xf32> {
  ^bb0(%a: tensor<4xf32>, %b: tensor<1xi32>):
    // expected-error@+1 {{'kiln.gather' op index 5 at position [0] of indices is out of range}}
    %g = kiln.gather %a, %b : (tensor<4xf32>, tensor<1xi32>) -> tensor<1xf32>
    kiln.yield %g : tensor<1xf32>
  }
  return %r : tensor<1xf32>
}

// -----

// An all_reduce over a group of two ranks.
// CHECK: error: 'kiln.all_reduce' op has groups naming ranks [0, 1], but the reference interpreter runs one rank (rank 0 of a world of size 1)
func.func @all_reduce_two_ranks() -> tensor<4xf32> {
  %t = kiln.constant dense<1.0> : tensor<4xf32>
  // expected-error@+1 {{'kiln.all_reduce' op has groups naming ranks [0, 1], but the reference interpreter runs one rank}}
  %r = kiln.all_reduce sum %t {groups = dense<[[0, 1]]> : tensor<1x2xi64>} : tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

// An all_gather that gathers two shards.
// CHECK: error: 'kiln.all_gather' op has result shape [4] but operand shape [2], which takes more than one rank; the reference interpreter runs one rank (rank 0 of a world of size 1)
func.func @all_gather_two_ranks() -> tensor<4xf32> {
  %t = kiln.constant dense<1.0> : tensor<2xf32>
  // expected-error@+1 {{'kiln.all_gather' op has result shape [4] but operand shape [2], which takes more than one rank}}
  %r = kiln.all_gather %t, dim = 0 : tensor<2xf32> -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

// A reduce_scatter into two shards.
// CHECK: error: 'kiln.reduce_scatter' op has result shape [2] but operand shape [4], which takes more than one rank
func.func @reduce_scatter_two_ranks() -> tensor<2xf32> {
  %t = kiln.constant dense<1.0> : tensor<4xf32>
  // expected-error@+1 {{'kiln.reduce_scatter' op has result shape [2] but operand shape [4], which takes more than one rank}}
  %r = kiln.reduce_scatter sum %t, dim = 0 : tensor<4xf32> -> tensor<2xf32>
  return %r : tensor<2xf32>
}

// -----

// A broadcast from a root that is not rank 0.
// CHECK: error: 'kiln.collective_broadcast' op broadcasts from root rank 1, but the reference interpreter runs one rank (rank 0 of a world of size 1)
func.func @broadcast_root() -> tensor<2xf32> {
  %t = kiln.constant dense<1.0> : tensor<2xf32>
  // expected-error@+1 {{'kiln.collective_broadcast' op broadcasts from root rank 1, but the reference interpreter runs one rank}}
  %r = kiln.collective_broadcast %t, root = 1 : tensor<2xf32>
  return %r : tensor<2xf32>
}

// -----

// send and recv need a peer.
// CHECK: error: 'kiln.send' op needs a peer rank (1), but the reference interpreter runs one rank (rank 0 of a world of size 1)
func.func @send() -> tensor<2xf32> {
  %t = kiln.constant dense<1.0> : tensor<2xf32>
  // expected-error@+1 {{'kiln.send' op needs a peer rank (1), but the reference interpreter runs one rank}}
  kiln.send %t, peer = 1, channel = 0 : tensor<2xf32>
  return %t : tensor<2xf32>
}

// -----

// CHECK: error: 'kiln.recv' op needs a peer rank (0), but the reference interpreter runs one rank (rank 0 of a world of size 1)
func.func @recv() -> tensor<2xf32> {
  // expected-error@+1 {{'kiln.recv' op needs a peer rank (0), but the reference interpreter runs one rank}}
  %r = kiln.recv peer = 0, channel = 0 : tensor<2xf32>
  return %r : tensor<2xf32>
}
