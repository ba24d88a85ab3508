// RUN: kiln-opt %s -split-input-file --kiln-schedule | FileCheck %s
// RUN: kiln-opt %s -split-input-file --kiln-schedule=report-peaks -verify-diagnostics -mlir-print-op-on-diagnostic=false > /dev/null
// RUN: kiln-opt %s -split-input-file --kiln-schedule --kiln-schedule | FileCheck %s

// Two chains that each make a big value and reduce it: reducing each one
// before making the next halves the peak.
// CHECK-LABEL: func.func @chains
// CHECK-NEXT: %[[A:.*]] = kiln.exp %arg0
// CHECK-NEXT: kiln.reduce sum %[[A]]
// CHECK-NEXT: %[[B:.*]] = kiln.exp %arg1
// CHECK-NEXT: kiln.reduce sum %[[B]]
// CHECK-NEXT: kiln.add
// expected-remark@+1 {{kiln-schedule: @chains estimated peak 4104 bytes with the list order, was 8196 (with collectives moved up: original 8196 list 4104 reverse-list 4104 dfs 4104)}}
func.func @chains(%x: tensor<1024xf32>, %y: tensor<1024xf32>) -> tensor<f32> {
  %a = kiln.exp %x : tensor<1024xf32>
  %b = kiln.exp %y : tensor<1024xf32>
  %ra = kiln.reduce sum %a, dims = [0] : tensor<1024xf32> -> tensor<f32>
  %rb = kiln.reduce sum %b, dims = [0] : tensor<1024xf32> -> tensor<f32>
  %r = kiln.add %ra, %rb : tensor<f32>
  return %r : tensor<f32>
}

// -----

// An order that is already best is kept as it is.
// CHECK-LABEL: func.func @kept
// CHECK-NEXT: kiln.exp %arg0
// CHECK-NEXT: kiln.tanh
// CHECK-NEXT: kiln.exp %arg1
// CHECK-NEXT: kiln.add
// expected-remark@+1 {{kiln-schedule: @kept estimated peak 128 bytes with the original order, was 128 }}
func.func @kept(%x: tensor<16xf32>, %y: tensor<16xf32>) -> tensor<16xf32> {
  %a = kiln.exp %x : tensor<16xf32>
  %b = kiln.tanh %a : tensor<16xf32>
  %c = kiln.exp %y : tensor<16xf32>
  %d = kiln.add %b, %c : tensor<16xf32>
  return %d : tensor<16xf32>
}

// -----

// A collective starts as soon as its input exists, to overlap with the
// compute after it.
// CHECK-LABEL: func.func @collective_early
// CHECK-NEXT: %[[G:.*]] = kiln.exp %arg0
// CHECK-NEXT: kiln.all_reduce sum %[[G]]
// CHECK-NEXT: kiln.tanh %arg1
// CHECK-NEXT: kiln.sin
// CHECK-NEXT: kiln.add
// expected-remark@+1 {{kiln-schedule: @collective_early estimated peak 128 bytes with the original order, was 128 }}
func.func @collective_early(%x: tensor<16xf32>, %y: tensor<16xf32>) -> tensor<16xf32> {
  %g = kiln.exp %x : tensor<16xf32>
  %h = kiln.tanh %y : tensor<16xf32>
  %k = kiln.sin %h : tensor<16xf32>
  %ar = kiln.all_reduce sum %g : tensor<16xf32>
  %o = kiln.add %ar, %k : tensor<16xf32>
  return %o : tensor<16xf32>
}

// -----

// Collectives keep their relative order (every rank issues them in the
// same order), even when a later one's input is ready first.
// CHECK-LABEL: func.func @collective_order
// CHECK: kiln.all_reduce sum %{{.*}} {groups = dense<{{\[\[}}0, 1]]>
// CHECK-NEXT: kiln.exp %arg1
// CHECK-NEXT: kiln.all_reduce max
// expected-remark@+1 {{kiln-schedule: @collective_order}}
func.func @collective_order(%x: tensor<16xf32>, %y: tensor<16xf32>) -> (tensor<16xf32>, tensor<16xf32>) {
  %a = kiln.exp %x : tensor<16xf32>
  %b = kiln.tanh %a : tensor<16xf32>
  %c = kiln.exp %y : tensor<16xf32>
  %r1 = kiln.all_reduce sum %b {groups = dense<[[0, 1]]> : tensor<1x2xi64>} : tensor<16xf32>
  %r2 = kiln.all_reduce max %c : tensor<16xf32>
  return %r1, %r2 : tensor<16xf32>, tensor<16xf32>
}

// -----

// A collective moves up with the ops that exist only to feed it (a
// gradient bucket's producers and packing), even when the order put them
// late: here the exp and reshape that make the all-reduce's operand come
// before the tanh/sin chain, so the all-reduce overlaps it. (The tanh is
// returned too, so it is no feeder of anything.)
// CHECK-LABEL: func.func @collective_feeders
// CHECK-NEXT: %[[G:.*]] = kiln.exp %arg0
// CHECK-NEXT: %[[F:.*]] = kiln.reshape %[[G]]
// CHECK-NEXT: kiln.all_reduce mean %[[F]]
// CHECK-NEXT: kiln.tanh %arg1
// CHECK-NEXT: kiln.sin
// CHECK-NEXT: kiln.add
// expected-remark@+1 {{kiln-schedule: @collective_feeders}}
func.func @collective_feeders(%x: tensor<4x4xf32>, %y: tensor<16xf32>) -> (tensor<16xf32>, tensor<16xf32>) {
  %h = kiln.tanh %y : tensor<16xf32>
  %k = kiln.sin %h : tensor<16xf32>
  %g = kiln.exp %x : tensor<4x4xf32>
  %f = kiln.reshape %g : tensor<4x4xf32> -> tensor<16xf32>
  %ar = kiln.all_reduce mean %f : tensor<16xf32>
  %o = kiln.add %ar, %k : tensor<16xf32>
  return %o, %h : tensor<16xf32>, tensor<16xf32>
}

// -----

// Fusions move as whole kernels, their bodies untouched.
// CHECK-LABEL: func.func @fusions
// CHECK: %[[A:.*]] = kiln.fusion loop(%arg0)
// CHECK-NEXT: ^bb0
// CHECK-NEXT: kiln.exp
// CHECK-NEXT: kiln.yield
// CHECK-NEXT: }
// CHECK-NEXT: kiln.reduce sum %[[A]]
// CHECK-NEXT: %[[B:.*]] = kiln.fusion loop(%arg1)
// CHECK: kiln.reduce sum %[[B]]
// expected-remark@+1 {{kiln-schedule: @fusions estimated peak 4104 bytes}}
func.func @fusions(%x: tensor<1024xf32>, %y: tensor<1024xf32>) -> tensor<f32> {
  %a = kiln.fusion loop (%x) : (tensor<1024xf32>) -> tensor<1024xf32> {
  ^bb0(%p: tensor<1024xf32>):
    %e = kiln.exp %p : tensor<1024xf32>
    kiln.yield %e : tensor<1024xf32>
  }
  %b = kiln.fusion loop (%y) : (tensor<1024xf32>) -> tensor<1024xf32> {
  ^bb0(%p: tensor<1024xf32>):
    %e = kiln.exp %p : tensor<1024xf32>
    kiln.yield %e : tensor<1024xf32>
  }
  %ra = kiln.reduce sum %a, dims = [0] : tensor<1024xf32> -> tensor<f32>
  %rb = kiln.reduce sum %b, dims = [0] : tensor<1024xf32> -> tensor<f32>
  %r = kiln.add %ra, %rb : tensor<f32>
  return %r : tensor<f32>
}

// -----

// An update returned for its argument is written in place, so computing it
// early costs nothing and frees its inputs: the update of %w runs before
// the big activation %h is made.
// CHECK-LABEL: func.func @early_update
// CHECK: kiln.sub %arg0
// CHECK: kiln.exp %arg2
// expected-remark@+1 {{kiln-schedule: @early_update}}
func.func @early_update(%w: tensor<256xf32>, %g: tensor<256xf32>, %x: tensor<4096xf32>)
    -> (tensor<256xf32> {kiln.updates = 0 : i64}, tensor<f32>) {
  %s = kiln.mul %g, %g : tensor<256xf32>
  %h = kiln.exp %x : tensor<4096xf32>
  %r = kiln.reduce sum %h, dims = [0] : tensor<4096xf32> -> tensor<f32>
  %u = kiln.sub %w, %s : tensor<256xf32>
  return %u, %r : tensor<256xf32>, tensor<f32>
}

// -----

// A function with no body is left alone.
// CHECK-LABEL: func.func private @external
func.func private @external(tensor<4xf32>) -> tensor<4xf32>

// -----

// Reordering drops a buffer plan made for the old order.
// CHECK-LABEL: func.func @stale_plan
// CHECK-NOT: kiln.arena_bytes
// CHECK-NOT: kiln.buffer_offsets
// CHECK: return
// expected-remark@+1 {{kiln-schedule: @stale_plan estimated peak 4104 bytes with the list order, was 8196}}
func.func @stale_plan(%x: tensor<1024xf32>, %y: tensor<1024xf32>) -> tensor<f32>
    attributes {kiln.arena_bytes = 8196 : i64, kiln.lower_bound_bytes = 8196 : i64, kiln.peak_bytes = 8196 : i64} {
  %a = kiln.exp %x {kiln.buffer_offsets = array<i64: 0>} : tensor<1024xf32>
  %b = kiln.exp %y {kiln.buffer_offsets = array<i64: 4096>} : tensor<1024xf32>
  %ra = kiln.reduce sum %a, dims = [0] {kiln.buffer_offsets = array<i64: 8192>} : tensor<1024xf32> -> tensor<f32>
  %rb = kiln.reduce sum %b, dims = [0] {kiln.buffer_offsets = array<i64: 8196>} : tensor<1024xf32> -> tensor<f32>
  %r = kiln.add %ra, %rb {kiln.buffer_offsets = array<i64: 8192>} : tensor<f32>
  return %r : tensor<f32>
}
