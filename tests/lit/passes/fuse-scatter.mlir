// RUN: kiln-opt %s -split-input-file --kiln-fuse | FileCheck %s

// An embedding's gradient: the scatter_add of the rows' gradients onto
// zeros, added to a tied weight's gradient and applied by SGD. The scatter
// joins its elementwise consumers in one loop kernel, its zero operand a
// constant in the kernel (no kernel writing zeros, no gradient buffer
// between the scatter and the update); the update of another parameter
// of the same shape stays in its own kernel (a scatter kernel is not
// packed horizontally: a nest of its shape would take its row layout).
// CHECK-LABEL: func.func @embedding_gradient
// CHECK: kiln.fusion loop(%arg1, %arg2, %arg3, %arg0) : (tensor<2x3xi32>, tensor<2x3x8xf32>, tensor<10x8xf32>, tensor<10x8xf32>) -> tensor<10x8xf32> {
// CHECK: kiln.constant dense<0.000000e+00> : tensor<10x8xf32>
// CHECK-NEXT: kiln.scatter_add
// CHECK: kiln.sub
// CHECK-NEXT: kiln.yield
// CHECK: kiln.fusion loop(%arg5, %arg4) : (tensor<10x8xf32>, tensor<10x8xf32>) -> tensor<10x8xf32>
// CHECK-NOT: kiln.scatter_add
// CHECK: return
func.func @embedding_gradient(%wte: tensor<10x8xf32>, %ids: tensor<2x3xi32>,
                              %dx: tensor<2x3x8xf32>, %dw: tensor<10x8xf32>,
                              %w2: tensor<10x8xf32>, %g2: tensor<10x8xf32>)
    -> (tensor<10x8xf32>, tensor<10x8xf32>) {
  %z = kiln.constant dense<0.0> : tensor<10x8xf32>
  %s = kiln.scatter_add %z, %ids, %dx : (tensor<10x8xf32>, tensor<2x3xi32>, tensor<2x3x8xf32>) -> tensor<10x8xf32>
  %g = kiln.add %s, %dw : tensor<10x8xf32>
  %lr = kiln.constant dense<0.01> : tensor<10x8xf32>
  %u = kiln.mul %g, %lr : tensor<10x8xf32>
  %n = kiln.sub %wte, %u : tensor<10x8xf32>
  %u2 = kiln.mul %g2, %lr : tensor<10x8xf32>
  %n2 = kiln.sub %w2, %u2 : tensor<10x8xf32>
  return %n, %n2 : tensor<10x8xf32>, tensor<10x8xf32>
}

// -----

// The updates' producer (an exp here) stays out of the scatter's kernel:
// inside, it would be recomputed for every row that lists its position.
// A reduce of the scatter's result stays out too (its rows are not the
// scatter's elements at their own indices).
// CHECK-LABEL: func.func @producers_and_reductions_stay_out
// CHECK: %[[E:.*]] = kiln.fusion loop(%arg1) : (tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: ^bb0
// CHECK-NEXT: kiln.exp
// CHECK-NEXT: kiln.yield
// CHECK: %[[S:.*]] = kiln.fusion loop(%arg0, %[[E]]) : (tensor<4xi32>, tensor<4x8xf32>) -> tensor<6x8xf32>
// CHECK-NOT: kiln.reduce
// CHECK: kiln.scatter_add
// CHECK-NOT: kiln.reduce
// CHECK: kiln.yield
// CHECK: kiln.fusion reduction(%[[S]])
// CHECK: kiln.reduce sum
func.func @producers_and_reductions_stay_out(%ids: tensor<4xi32>, %x: tensor<4x8xf32>)
    -> (tensor<6x8xf32>, tensor<8xf32>) {
  %z = kiln.constant dense<0.0> : tensor<6x8xf32>
  %e = kiln.exp %x : tensor<4x8xf32>
  %s = kiln.scatter_add %z, %ids, %e : (tensor<6x8xf32>, tensor<4xi32>, tensor<4x8xf32>) -> tensor<6x8xf32>
  %r = kiln.reduce sum %s, dims = [0] : tensor<6x8xf32> -> tensor<8xf32>
  return %s, %r : tensor<6x8xf32>, tensor<8xf32>
}
