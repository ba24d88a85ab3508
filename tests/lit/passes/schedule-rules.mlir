// RUN: kiln-opt %s -split-input-file --kiln-schedule | FileCheck %s
// RUN: kiln-opt %s -split-input-file --kiln-schedule --kiln-schedule | FileCheck %s
//
// kiln-schedule's rules for collectives that must not be issued as early
// as their inputs allow (passes/Schedule.cpp; docs/distributed.md,
// "Scheduling the collectives"). Every shard argument is there from the
// start, so without kiln.prefetch all three gathers would open the step.

// kiln.prefetch = 1: the third gather waits for the use of the first (the
// GEMM reading its reshaped buffer with x), so it is issued while the
// second bucket computes; the first two have nothing to wait for.
// CHECK-LABEL: func.func @prefetch_one_ahead
// CHECK-NEXT: %[[G0:.*]] = kiln.all_gather %arg1
// CHECK-NEXT: %[[G1:.*]] = kiln.all_gather %arg2
// CHECK-NOT: kiln.all_gather
// CHECK: %[[Y0:.*]] = kiln.dot_general %arg0
// CHECK-NOT: kiln.dot_general
// CHECK: %[[G2:.*]] = kiln.all_gather %arg3
// CHECK: kiln.dot_general %[[Y0]]
// CHECK: kiln.dot_general
// CHECK-NEXT: return
func.func @prefetch_one_ahead(%x: tensor<4x4xf32>, %s0: tensor<8xf32>,
                              %s1: tensor<8xf32>, %s2: tensor<8xf32>)
    -> tensor<4x4xf32> {
  %g0 = kiln.all_gather %s0, dim = 0 {kiln.prefetch = 1 : i64} : tensor<8xf32> -> tensor<16xf32>
  %w0 = kiln.reshape %g0 : tensor<16xf32> -> tensor<4x4xf32>
  %y0 = kiln.dot_general %x, %w0, batch = [] x [], contract = [1] x [0] : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %g1 = kiln.all_gather %s1, dim = 0 {kiln.prefetch = 1 : i64} : tensor<8xf32> -> tensor<16xf32>
  %w1 = kiln.reshape %g1 : tensor<16xf32> -> tensor<4x4xf32>
  %y1 = kiln.dot_general %y0, %w1, batch = [] x [], contract = [1] x [0] : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %g2 = kiln.all_gather %s2, dim = 0 {kiln.prefetch = 1 : i64} : tensor<8xf32> -> tensor<16xf32>
  %w2 = kiln.reshape %g2 : tensor<16xf32> -> tensor<4x4xf32>
  %y2 = kiln.dot_general %y1, %w2, batch = [] x [], contract = [1] x [0] : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  return %y2 : tensor<4x4xf32>
}

// -----

// kiln.prefetch = 0: no gather ahead; each waits for every use of the one
// before it (a copy of the gathered buffer alone is no use: the exp of x
// with it is).
// CHECK-LABEL: func.func @prefetch_none_ahead
// CHECK-NEXT: kiln.all_gather %arg1
// CHECK-NOT: kiln.all_gather
// CHECK: %[[Y0:.*]] = kiln.add %arg0
// CHECK-NEXT: kiln.all_gather %arg2
// CHECK-NOT: kiln.all_gather
// CHECK: kiln.add %[[Y0]]
// CHECK-NEXT: return
func.func @prefetch_none_ahead(%x: tensor<16xf32>, %s0: tensor<8xf32>,
                               %s1: tensor<8xf32>) -> tensor<16xf32> {
  %g0 = kiln.all_gather %s0, dim = 0 {kiln.prefetch = 0 : i64} : tensor<8xf32> -> tensor<16xf32>
  %c0 = kiln.neg %g0 : tensor<16xf32>
  %y0 = kiln.add %x, %c0 : tensor<16xf32>
  %g1 = kiln.all_gather %s1, dim = 0 {kiln.prefetch = 0 : i64} : tensor<8xf32> -> tensor<16xf32>
  %y1 = kiln.add %y0, %g1 : tensor<16xf32>
  return %y1 : tensor<16xf32>
}

// -----

// kiln.issue_together: the first all-reduce would move up to right after
// %a; it waits for the input of the second (%c, after the long chain),
// whose packing (the reshape) moves with its own collective.
// CHECK-LABEL: func.func @together
// CHECK: kiln.exp %arg0
// CHECK-NEXT: %[[C:.*]] = kiln.exp
// CHECK-NEXT: kiln.all_reduce sum %{{.*}} {kiln.issue_together} : tensor<16xf32>
// CHECK-NEXT: kiln.reshape %[[C]]
// CHECK-NEXT: kiln.all_reduce sum %{{.*}} {kiln.issue_together} : tensor<4x4xf32>
func.func @together(%x: tensor<16xf32>) -> (tensor<16xf32>, tensor<4x4xf32>) {
  %a = kiln.mul %x, %x : tensor<16xf32>
  %r0 = kiln.all_reduce sum %a {kiln.issue_together} : tensor<16xf32>
  %b = kiln.exp %x : tensor<16xf32>
  %c = kiln.exp %b : tensor<16xf32>
  %p = kiln.reshape %c : tensor<16xf32> -> tensor<4x4xf32>
  %r1 = kiln.all_reduce sum %p {kiln.issue_together} : tensor<4x4xf32>
  return %r0, %r1 : tensor<16xf32>, tensor<4x4xf32>
}

// -----

// Without a rule the same all-reduce is issued right after %a.
// CHECK-LABEL: func.func @early
// CHECK-NEXT: kiln.mul
// CHECK-NEXT: kiln.all_reduce sum
func.func @early(%x: tensor<16xf32>) -> (tensor<16xf32>, tensor<4x4xf32>) {
  %a = kiln.mul %x, %x : tensor<16xf32>
  %r0 = kiln.all_reduce sum %a : tensor<16xf32>
  %b = kiln.exp %x : tensor<16xf32>
  %c = kiln.exp %b : tensor<16xf32>
  %p = kiln.reshape %c : tensor<16xf32> -> tensor<4x4xf32>
  %r1 = kiln.all_reduce sum %p : tensor<4x4xf32>
  return %r0, %r1 : tensor<16xf32>, tensor<4x4xf32>
}

// -----

// The input may already break a rule (here all three gathers open it, as
// kiln-distribute's IR under gradient accumulation can): the order kept
// when nothing beats it is the input order with the held-back gather moved
// down, never one that breaks a dependence.
// CHECK-LABEL: func.func @rule_broken_in_input
// CHECK-NEXT: kiln.all_gather %arg1
// CHECK-NEXT: kiln.all_gather %arg2
// CHECK-NOT: kiln.all_gather
// CHECK: kiln.dot_general %arg0
// CHECK-NOT: kiln.dot_general
// CHECK: kiln.all_gather %arg3
func.func @rule_broken_in_input(%x: tensor<4x4xf32>, %s0: tensor<8xf32>,
                                %s1: tensor<8xf32>, %s2: tensor<8xf32>)
    -> tensor<4x4xf32> {
  %g0 = kiln.all_gather %s0, dim = 0 {kiln.prefetch = 1 : i64} : tensor<8xf32> -> tensor<16xf32>
  %g1 = kiln.all_gather %s1, dim = 0 {kiln.prefetch = 1 : i64} : tensor<8xf32> -> tensor<16xf32>
  %g2 = kiln.all_gather %s2, dim = 0 {kiln.prefetch = 1 : i64} : tensor<8xf32> -> tensor<16xf32>
  %w0 = kiln.reshape %g0 : tensor<16xf32> -> tensor<4x4xf32>
  %y0 = kiln.dot_general %x, %w0, batch = [] x [], contract = [1] x [0] : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %w1 = kiln.reshape %g1 : tensor<16xf32> -> tensor<4x4xf32>
  %y1 = kiln.dot_general %y0, %w1, batch = [] x [], contract = [1] x [0] : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %w2 = kiln.reshape %g2 : tensor<16xf32> -> tensor<4x4xf32>
  %y2 = kiln.dot_general %y1, %w2, batch = [] x [], contract = [1] x [0] : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  return %y2 : tensor<4x4xf32>
}

// -----

// In-place updates: %u replaces %w (kiln.updates = 0), and kiln-plan-buffers
// writes it over %w only once every other reader of %w is done, so the
// reader (%r, whose reduction is returned) runs before the update even
// though the input order, which every heuristic ties with, has it after:
// otherwise the update would get a buffer of its own and a copy after
// every step.
// CHECK-LABEL: func.func @update_after_readers
// CHECK: kiln.mul %arg0, %arg1
// CHECK: kiln.sub %arg0
func.func @update_after_readers(%w: tensor<256xf32>, %x: tensor<256xf32>)
    -> (tensor<256xf32> {kiln.updates = 0 : i64}, tensor<f32>) {
  %g = kiln.exp %x : tensor<256xf32>
  %u = kiln.sub %w, %g : tensor<256xf32>
  %r = kiln.mul %w, %x : tensor<256xf32>
  %s = kiln.reduce sum %r, dims = [0] : tensor<256xf32> -> tensor<f32>
  return %u, %s : tensor<256xf32>, tensor<f32>
}
