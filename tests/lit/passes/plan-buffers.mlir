// RUN: kiln-opt %s -split-input-file -verify-diagnostics --kiln-plan-buffers -mlir-print-op-on-diagnostic=false | FileCheck %s

// An update written over its argument: the argument's last read is the op
// that writes the update, elementwise.
// CHECK-LABEL: func.func @update
// CHECK-SAME: attributes {kiln.arena_bytes = 1024 : i64, kiln.lower_bound_bytes = 3072 : i64, kiln.peak_bytes = 3072 : i64}
// CHECK: kiln.exp %arg1 {kiln.buffer_offsets = array<i64: 0>}
// CHECK: kiln.sub %arg0, %{{.*}} {kiln.aliases = array<i64: 0>, kiln.buffer_offsets = array<i64: -1>}
func.func @update(%w: tensor<256xf32>, %g: tensor<256xf32>)
    -> (tensor<256xf32> {kiln.updates = 0 : i64}) {
  %0 = kiln.exp %g : tensor<256xf32>
  %1 = kiln.sub %w, %0 : tensor<256xf32>
  return %1 : tensor<256xf32>
}

// -----

// Not in place: the old value is read after the update is written, so the
// update gets an arena buffer and a remark says why.
// CHECK-LABEL: func.func @read_after_update
// CHECK: kiln.sub %arg0, %arg1 {kiln.buffer_offsets = array<i64: 0>}
// CHECK: kiln.mul %arg0, %{{.*}} {kiln.buffer_offsets = array<i64: 1024>}
func.func @read_after_update(%w: tensor<256xf32> {kiln.name = "fc.weight"}, %g: tensor<256xf32>)
    -> (tensor<256xf32> {kiln.updates = 0 : i64}, tensor<256xf32>) {
  // expected-remark@+1 {{result 0 of @read_after_update (kiln.updates = 0) is not updated in place: argument 0 ('fc.weight') is still read by 'kiln.mul' at step 1, after this op writes the update at step 0}}
  %1 = kiln.sub %w, %g : tensor<256xf32>
  %2 = kiln.mul %w, %1 : tensor<256xf32>
  return %1, %2 : tensor<256xf32>, tensor<256xf32>
}

// -----

// Not in place: the op writing the update reads the argument as a matrix
// (a GEMM cannot write over its own operand).
// CHECK-LABEL: func.func @gemm_reads_argument
// CHECK: kiln.dot_general {{.*}} {kiln.buffer_offsets = array<i64: 0>}
func.func @gemm_reads_argument(%w: tensor<4x4xf32>, %x: tensor<4x4xf32>)
    -> (tensor<4x4xf32> {kiln.updates = 0 : i64}) {
  // expected-remark@+1 {{result 0 of @gemm_reads_argument (kiln.updates = 0) is not updated in place: this op reads argument 0 while it writes the update, and not only elementwise}}
  %0 = kiln.dot_general %w, %x, batch = [] x [], contract = [1] x [0] : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  return %0 : tensor<4x4xf32>
}

// -----

// One value cannot update two arguments: the first takes it in place.
// CHECK-LABEL: func.func @shared_update
// CHECK: kiln.exp %arg2 {kiln.aliases = array<i64: 0>, kiln.buffer_offsets = array<i64: -1>}
func.func @shared_update(%a: tensor<8xf32>, %b: tensor<8xf32>, %c: tensor<8xf32>)
    -> (tensor<8xf32> {kiln.updates = 0 : i64}, tensor<8xf32> {kiln.updates = 1 : i64}) {
  // expected-remark@+1 {{result 1 of @shared_update (kiln.updates = 1) is not updated in place: the same value already updates argument 0 in place}}
  %0 = kiln.exp %c : tensor<8xf32>
  return %0, %0 : tensor<8xf32>, tensor<8xf32>
}

// -----

// An update that is another argument, unchanged, cannot move that
// argument's buffer.
// CHECK-LABEL: func.func @other_argument
// expected-remark@+1 {{result 0 of @other_argument (kiln.updates = 0) is not updated in place: it is argument 1, whose buffer stays the caller's}}
func.func @other_argument(%a: tensor<8xf32>, %b: tensor<8xf32>)
    -> (tensor<8xf32> {kiln.updates = 0 : i64}) {
  return %b : tensor<8xf32>
}

// -----

// Not in place: the update is a different size from its argument.
// CHECK-LABEL: func.func @other_size
func.func @other_size(%a: tensor<8xf32>) -> (tensor<8xf64> {kiln.updates = 0 : i64}) {
  // expected-remark@+1 {{result 0 of @other_size (kiln.updates = 0) is not updated in place: its buffer has 64 bytes but argument 0 has 32}}
  %0 = kiln.convert %a : tensor<8xf32> -> tensor<8xf64>
  return %0 : tensor<8xf64>
}

// -----

// An elementwise chain writes each result over the operand that dies there.
// CHECK-LABEL: func.func @reuse
// CHECK: kiln.exp %arg0 {kiln.buffer_offsets = array<i64: [[A:[0-9]+]]>}
// CHECK: kiln.tanh %{{.*}} {kiln.buffer_offsets = array<i64: [[A]]>}
// CHECK: kiln.mul %{{.*}} {kiln.buffer_offsets = array<i64: [[A]]>}
// CHECK: kiln.reduce sum %{{.*}} {kiln.buffer_offsets = array<i64: 1024>}
func.func @reuse(%x: tensor<256xf32>) -> tensor<f32> {
  %0 = kiln.exp %x : tensor<256xf32>
  %1 = kiln.tanh %0 : tensor<256xf32>
  %2 = kiln.mul %1, %1 : tensor<256xf32>
  %3 = kiln.reduce sum %2, dims = [0] : tensor<256xf32> -> tensor<f32>
  return %3 : tensor<f32>
}

// -----

// No reuse of an operand that is read later, nor across element sizes, nor
// by an op that is not elementwise.
// CHECK-LABEL: func.func @no_reuse
// CHECK: kiln.exp %arg0 {kiln.buffer_offsets = array<i64: 0>}
// CHECK: kiln.tanh %{{.*}} {kiln.buffer_offsets = array<i64: 1024>}
// CHECK: kiln.convert %{{.*}} {kiln.buffer_offsets = array<i64: 2048>}
// CHECK: kiln.transpose %{{.*}} {kiln.buffer_offsets = array<i64: 0>}
func.func @no_reuse(%x: tensor<16x16xf32>) -> (tensor<16x16xf64>, tensor<16x16xf32>) {
  %0 = kiln.exp %x : tensor<16x16xf32>
  %1 = kiln.tanh %0 : tensor<16x16xf32>
  %2 = kiln.convert %0 : tensor<16x16xf32> -> tensor<16x16xf64>
  %3 = kiln.transpose %1, permutation = [1, 0] : tensor<16x16xf32> -> tensor<16x16xf32>
  return %2, %3 : tensor<16x16xf64>, tensor<16x16xf32>
}

// -----

// A reshape names its operand's bytes: an argument's (offset -1 and
// kiln.aliases) or an arena buffer's (its offset).
// CHECK-LABEL: func.func @views
// CHECK: kiln.reshape %arg0 {kiln.aliases = array<i64: 0>, kiln.buffer_offsets = array<i64: -1>}
// CHECK: kiln.exp %arg0 {kiln.buffer_offsets = array<i64: [[E:[0-9]+]]>}
// CHECK: kiln.reshape %{{.*}} {kiln.buffer_offsets = array<i64: [[E]]>}
// CHECK: kiln.neg %{{.*}} {kiln.buffer_offsets = array<i64: 1024>}
func.func @views(%x: tensor<4x64xf32>) -> (tensor<256xf32>, tensor<256xf32>) {
  %0 = kiln.reshape %x : tensor<4x64xf32> -> tensor<256xf32>
  %1 = kiln.exp %x : tensor<4x64xf32>
  %2 = kiln.reshape %1 : tensor<4x64xf32> -> tensor<256xf32>
  %3 = kiln.neg %0 : tensor<256xf32>
  return %2, %3 : tensor<256xf32>, tensor<256xf32>
}

// -----

// A view keeps its operand's bytes alive: %1 may not go over %0 while the
// reshape %v is still read.
// CHECK-LABEL: func.func @view_extends_life
// CHECK: kiln.exp %arg0 {kiln.buffer_offsets = array<i64: 0>}
// CHECK: kiln.reshape %{{.*}} {kiln.buffer_offsets = array<i64: 0>}
// CHECK: kiln.tanh %{{.*}} {kiln.buffer_offsets = array<i64: 1024>}
func.func @view_extends_life(%x: tensor<256xf32>) -> (tensor<16x16xf32>, tensor<256xf32>) {
  %0 = kiln.exp %x : tensor<256xf32>
  %v = kiln.reshape %0 : tensor<256xf32> -> tensor<16x16xf32>
  %1 = kiln.tanh %0 : tensor<256xf32>
  return %v, %1 : tensor<16x16xf32>, tensor<256xf32>
}

// -----

// A fusion writes over an input that reaches its result only through
// elementwise ops of its shape; not over one that feeds a reduction.
// CHECK-LABEL: func.func @fusions
// CHECK: kiln.exp %arg0 {kiln.buffer_offsets = array<i64: 0>}
// CHECK: kiln.exp %arg1 {kiln.buffer_offsets = array<i64: 256>}
// CHECK: kiln.fusion loop(%{{.*}}) {kiln.buffer_offsets = array<i64: 0>}
// CHECK: kiln.fusion reduction(%{{.*}}) {kiln.buffer_offsets = array<i64: 512>}
func.func @fusions(%x: tensor<64xf32>, %y: tensor<64xf32>) -> (tensor<64xf32>, tensor<64xf32>) {
  %0 = kiln.exp %x : tensor<64xf32>
  %1 = kiln.exp %y : tensor<64xf32>
  %2 = kiln.fusion loop (%0) : (tensor<64xf32>) -> tensor<64xf32> {
  ^bb0(%p: tensor<64xf32>):
    %e = kiln.tanh %p : tensor<64xf32>
    %f = kiln.mul %e, %p : tensor<64xf32>
    kiln.yield %f : tensor<64xf32>
  }
  %3 = kiln.fusion reduction (%1) : (tensor<64xf32>) -> tensor<64xf32> {
  ^bb0(%p: tensor<64xf32>):
    %s = kiln.reduce sum %p, dims = [0] : tensor<64xf32> -> tensor<f32>
    %b = kiln.broadcast_in_dim %s, dims = [] : tensor<f32> -> tensor<64xf32>
    %d = kiln.div %p, %b : tensor<64xf32>
    kiln.yield %d : tensor<64xf32>
  }
  return %2, %3 : tensor<64xf32>, tensor<64xf32>
}

// -----

// A horizontal optimizer kernel updates two parameters and the step in
// place; the step is read by the bias correction of both, which is
// broadcast, so it cannot be overwritten inside the same kernel.
// CHECK-LABEL: func.func @horizontal
// CHECK: kiln.fusion horizontal({{.*}}) {kiln.aliases = array<i64: 0, 1, -1>, kiln.buffer_offsets = array<i64: -1, -1, 0>}
func.func @horizontal(%w: tensor<32xf32>, %v: tensor<16xf32>, %step: tensor<i64>,
                      %gw: tensor<32xf32>, %gv: tensor<16xf32>)
    -> (tensor<32xf32> {kiln.updates = 0 : i64}, tensor<16xf32> {kiln.updates = 1 : i64},
        tensor<i64> {kiln.updates = 2 : i64}) {
  // expected-remark@+1 {{result 2 of @horizontal (kiln.updates = 2) is not updated in place: this op reads argument 2 while it writes the update, and not only elementwise}}
  %0:3 = kiln.fusion horizontal (%w, %v, %step, %gw, %gv)
      : (tensor<32xf32>, tensor<16xf32>, tensor<i64>, tensor<32xf32>, tensor<16xf32>)
      -> (tensor<32xf32>, tensor<16xf32>, tensor<i64>) {
  ^bb0(%pw: tensor<32xf32>, %pv: tensor<16xf32>, %s: tensor<i64>, %qw: tensor<32xf32>, %qv: tensor<16xf32>):
    %one = kiln.constant dense<1> : tensor<i64>
    %next = kiln.add %s, %one : tensor<i64>
    %f = kiln.convert %next : tensor<i64> -> tensor<f32>
    %bw = kiln.broadcast_in_dim %f, dims = [] : tensor<f32> -> tensor<32xf32>
    %bv = kiln.broadcast_in_dim %f, dims = [] : tensor<f32> -> tensor<16xf32>
    %dw = kiln.div %qw, %bw : tensor<32xf32>
    %dv = kiln.div %qv, %bv : tensor<16xf32>
    %nw = kiln.sub %pw, %dw : tensor<32xf32>
    %nv = kiln.sub %pv, %dv : tensor<16xf32>
    kiln.yield %nw, %nv, %next : tensor<32xf32>, tensor<16xf32>, tensor<i64>
  }
  return %0#0, %0#1, %0#2 : tensor<32xf32>, tensor<16xf32>, tensor<i64>
}

// -----

// An all-reduce runs in place over a gradient that dies there.
// CHECK-LABEL: func.func @all_reduce
// CHECK: kiln.exp %arg0 {kiln.buffer_offsets = array<i64: [[G:[0-9]+]]>}
// CHECK: kiln.all_reduce mean %{{.*}} {kiln.buffer_offsets = array<i64: [[G]]>}
func.func @all_reduce(%x: tensor<64xf32>) -> tensor<64xf32> {
  %0 = kiln.exp %x : tensor<64xf32>
  %1 = kiln.all_reduce mean %0 : tensor<64xf32>
  return %1 : tensor<64xf32>
}

// -----

// Buffers live at the same time sit side by side, 64-byte aligned. The
// lower bound is the largest sum of live bytes (4 + 4 + 40 at step 2, plus
// the 40-byte argument); placing the largest buffer first (132 bytes) beats
// allocation order (0, 64, 128: 168 bytes).
// CHECK-LABEL: func.func @aligned
// CHECK-SAME: kiln.arena_bytes = 132 : i64, kiln.lower_bound_bytes = 88 : i64, kiln.peak_bytes = 172 : i64
// CHECK: kiln.reduce sum %arg0{{.*}}{kiln.buffer_offsets = array<i64: 64>}
// CHECK: kiln.reduce max %arg0{{.*}}{kiln.buffer_offsets = array<i64: 128>}
// CHECK: kiln.broadcast_in_dim {{.*}}{kiln.buffer_offsets = array<i64: 0>}
func.func @aligned(%x: tensor<10xf32>) -> (tensor<f32>, tensor<10xf32>) {
  %0 = kiln.reduce sum %x, dims = [0] : tensor<10xf32> -> tensor<f32>
  %1 = kiln.reduce max %x, dims = [0] : tensor<10xf32> -> tensor<f32>
  %2 = kiln.broadcast_in_dim %1, dims = [] : tensor<f32> -> tensor<10xf32>
  return %0, %2 : tensor<f32>, tensor<10xf32>
}
