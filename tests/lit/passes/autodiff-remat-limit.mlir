// RUN: kiln-opt %s -verify-diagnostics "-kiln-autodiff=remat=full remat-limit=1" | FileCheck %s
// RUN: kiln-opt %s "-kiln-autodiff=remat=full remat-limit=0" 2>/dev/null | FileCheck %s --check-prefix=NONE
// RUN: kiln-opt %s "-kiln-autodiff=remat=full remat-limit=2" 2>/dev/null | FileCheck %s --check-prefix=ALL
// RUN: kiln-opt %s "-kiln-autodiff=remat=full" 2>/dev/null | FileCheck %s --check-prefix=ALL
// RUN: not kiln-opt %s "-kiln-autodiff=remat-limit=1" 2>&1 | FileCheck %s --check-prefix=NOPOLICY
// NOPOLICY: kiln-autodiff: remat-limit=1 needs remat=dots or remat=full
//
// kiln-autodiff's remat-limit (passes/Rematerialize.cpp): of the values the
// policy would recompute that the backward pass reads (its candidates),
// only the K cheapest to recompute per byte they free are; the function
// records how many candidates there were. `kiln compile --memory-budget`
// searches K (tests/lit/tools/compile-memory-budget.test).
//
// h = x + gelu(x W1 + b) W2 under remat=full: the backward pass reads the
// pre-activation p = x W1 + b (gelu's gradient) and g = gelu(p) (W2's
// gradient); x and h are read by two forward ops each and kept. Recomputing
// g costs one GELU from the kept p; recomputing p costs a matmul and an
// add. With K = 1 only g is recomputed, from the forward p.
// CHECK-LABEL: func.func @block
// CHECK-SAME: kiln.remat_candidates = 2
// CHECK: %[[PRE:.*]] = kiln.add %{{.*}}, %{{.*}} : tensor<4x8xf32>
// CHECK: %[[G2:.*]] = kiln.gelu tanh, %[[PRE]] {kiln.remat}
// CHECK-NEXT: kiln.dot_general %[[G2]], %{{.*}}
// CHECK-NOT: kiln.remat
// CHECK: return
//
// K = 0: the candidates are counted, none is recomputed.
// NONE-LABEL: func.func @block
// NONE-SAME: kiln.remat_candidates = 2
// NONE-NOT: kiln.remat}
// NONE: return
//
// K = 2 (every candidate) is remat=full: the matmul and add are recomputed
// for gelu's gradient too.
// ALL-LABEL: func.func @block
// ALL: kiln.dot_general %arg0, %arg1{{.*}} {kiln.remat}
// ALL: kiln.add %{{.*}} {kiln.remat}
// ALL: kiln.gelu tanh, %{{.*}} {kiln.remat}
// ALL: return

// expected-remark @below {{kiln-autodiff: remat=full: the backward pass of @block recomputes 1 forward values (1 ops) of 2 candidates (remat-limit=1)}}
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
