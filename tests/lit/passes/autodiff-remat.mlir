// RUN: kiln-opt %s -split-input-file -verify-diagnostics -kiln-autodiff=remat=dots | FileCheck %s
// RUN: kiln-opt %s -split-input-file -kiln-autodiff=remat=dots -canonicalize -cse | FileCheck %s --check-prefix=CSE
// RUN: kiln-opt %s -split-input-file -kiln-autodiff | FileCheck %s --check-prefix=OFF
// RUN: kiln-opt %s -split-input-file -kiln-autodiff=remat=full 2>/dev/null | FileCheck %s --check-prefix=FULL
// RUN: kiln-opt %s -split-input-file "-kiln-autodiff=remat=dots remat-scope=^second\." 2>/dev/null | FileCheck %s --check-prefix=SCOPE
// RUN: not kiln-opt %s -split-input-file -kiln-autodiff=remat=all 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: not kiln-opt %s -split-input-file "-kiln-autodiff=remat-scope=x" 2>&1 | FileCheck %s --check-prefix=NOPOLICY
// NOPOLICY: kiln-autodiff: remat-scope=x needs remat=dots or remat=full
//
// kiln-autodiff's remat=dots (passes/Rematerialize.cpp): the backward pass
// recomputes the forward values it reads, except matmul outputs and values
// several forward ops read, from clones marked kiln.remat placed right
// before their first backward reader.

// A two-layer block with a residual: h = x + gelu(x W1 + b) W2. The backward
// pass reads gelu's output (for W2's gradient): recomputed from the
// pre-activation x W1 + b, which is kept (kiln-fuse makes the bias add the
// GEMM's epilogue, so keeping it costs what keeping x W1 would) and which
// gelu's gradient reads as well. x, read by the matmul and the residual
// add, is kept.
// CHECK-LABEL: func.func @block
// CHECK: %[[XW:.*]] = kiln.dot_general %arg0, %arg1
// CHECK: %[[PRE:.*]] = kiln.add %[[XW]], %{{.*}} : tensor<4x8xf32>
// CHECK: %[[G:.*]] = kiln.gelu tanh, %[[PRE]]
// CHECK: %[[Y:.*]] = kiln.dot_general %[[G]], %arg3
// CHECK: %[[H:.*]] = kiln.add %arg0, %[[Y]]
// The backward pass's reader of gelu's output (W2's gradient):
// CHECK: %[[G2:.*]] = kiln.gelu tanh, %[[PRE]] {kiln.remat}
// CHECK-NEXT: kiln.dot_general %[[G2]], %{{.*}}
// CHECK: kiln.gelu_grad tanh, %[[PRE]]
// CHECK: return
//
// CSE keeps the clones apart from the forward ops (the kiln.remat mark).
// CSE-LABEL: func.func @block
// CSE-COUNT-2: kiln.gelu tanh, %
// CSE: return
//
// Without remat the backward pass reads the forward values.
// OFF-LABEL: func.func @block
// OFF-NOT: kiln.remat
// OFF: return
//
// remat=full recomputes the matmul and its bias add too (x, read twice,
// stays): the backward pass's first reader of the pre-activation gets a
// clone of the whole chain.
// FULL-LABEL: func.func @block
// FULL: %[[XW2:.*]] = kiln.dot_general %arg0, %arg1{{.*}} {kiln.remat}
// FULL: %[[PRE2:.*]] = kiln.add %[[XW2]], %{{.*}} {kiln.remat}
// FULL: kiln.gelu tanh, %[[PRE2]] {kiln.remat}
// FULL: return
//
// BAD: kiln-autodiff: remat=all: expected off, dots or full

// expected-remark @below {{kiln-autodiff: remat=dots: the backward pass of @block recomputes 1 forward values (1 ops)}}
func.func @block(%x: tensor<4x8xf32> {kiln.role = #kiln.role<input>},
                 %w1: tensor<8x8xf32> {kiln.role = #kiln.role<parameter>},
                 %b: tensor<8xf32> {kiln.role = #kiln.role<parameter>},
                 %w2: tensor<8x8xf32> {kiln.role = #kiln.role<parameter>})
    -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %xw = kiln.dot_general %x, %w1, batch = [] x [], contract = [1] x [0] : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %bb = kiln.broadcast_in_dim %b, dims = [1] : tensor<8xf32> -> tensor<4x8xf32>
  %pre = kiln.add %xw, %bb : tensor<4x8xf32>
  %g = kiln.gelu tanh, %pre : tensor<4x8xf32>
  %y = kiln.dot_general %g, %w2, batch = [] x [], contract = [1] x [0] : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %h = kiln.add %x, %y : tensor<4x8xf32>
  %sq = kiln.mul %h, %h : tensor<4x8xf32>
  %l = kiln.reduce mean %sq, dims = [0, 1] : tensor<4x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A chain: dW reads tanh(x * s), recomputed (tanh and the multiply, which
// only it reads) from the arguments right before the weight gradient.
// CHECK-LABEL: func.func @chain
// CHECK: %[[M:.*]] = kiln.mul %arg0, %arg1
// CHECK-NEXT: %[[T:.*]] = kiln.tanh %[[M]]
// CHECK: %[[M2:.*]] = kiln.mul %arg0, %arg1 {kiln.remat}
// CHECK-NEXT: %[[T2:.*]] = kiln.tanh %[[M2]] {kiln.remat}
// CHECK-NEXT: kiln.dot_general %[[T2]]
// CHECK: return
// expected-remark @below {{recomputes 1 forward values (2 ops)}}
func.func @chain(%x: tensor<4x8xf32> {kiln.role = #kiln.role<input>},
                 %s: tensor<4x8xf32> {kiln.role = #kiln.role<parameter>},
                 %w: tensor<8x8xf32> {kiln.role = #kiln.role<parameter>})
    -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %m = kiln.mul %x, %s : tensor<4x8xf32>
  %t = kiln.tanh %m : tensor<4x8xf32>
  %y = kiln.dot_general %t, %w, batch = [] x [], contract = [1] x [0] : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %l = kiln.reduce sum %y, dims = [0, 1] : tensor<4x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Two layers; with remat-scope=^second\. only the second's tanh (and the
// multiply behind it) is recomputed, the first's kept.
// SCOPE-LABEL: func.func @scoped
// SCOPE: kiln.mul %arg0, %arg2 {kiln.remat}
// SCOPE-NEXT: kiln.tanh %{{.*}} {kiln.remat}
// SCOPE-NOT: kiln.remat
// SCOPE: return
// expected-remark @below {{recomputes 2 forward values (4 ops)}}
func.func @scoped(%x: tensor<4x8xf32> {kiln.role = #kiln.role<input>},
                  %s1: tensor<4x8xf32> {kiln.role = #kiln.role<parameter>},
                  %s2: tensor<4x8xf32> {kiln.role = #kiln.role<parameter>},
                  %w: tensor<8x8xf32> {kiln.role = #kiln.role<parameter>})
    -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %m1 = kiln.mul %x, %s1 : tensor<4x8xf32> loc("first.mul")
  %t1 = kiln.tanh %m1 : tensor<4x8xf32> loc("first.tanh")
  %y1 = kiln.dot_general %t1, %w, batch = [] x [], contract = [1] x [0] : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %m2 = kiln.mul %x, %s2 : tensor<4x8xf32> loc("second.mul")
  %t2 = kiln.tanh %m2 : tensor<4x8xf32> loc("second.tanh")
  %y2 = kiln.dot_general %t2, %w, batch = [] x [], contract = [1] x [0] : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %y = kiln.add %y1, %y2 : tensor<4x8xf32>
  %l = kiln.reduce sum %y, dims = [0, 1] : tensor<4x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}
