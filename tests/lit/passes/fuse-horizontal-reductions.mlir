// RUN: kiln-opt %s -split-input-file --kiln-fuse=horizontal-reductions=true | FileCheck %s
// RUN: kiln-opt %s -split-input-file --kiln-fuse | FileCheck %s --check-prefix=OFF
// RUN: kiln-opt %s -split-input-file --kiln-fuse="horizontal-reductions=true max-inputs=6" | FileCheck %s --check-prefix=LIMIT

// Three independent column reductions (second stages of split scale
// gradients: 64 partials of 32 results, a warp per result on CUDA), each
// with an optimizer-like update as epilogue, all feeding the return: one
// horizontal fusion of the three reduction kernels (six results).
// CHECK-LABEL: func.func @updates
// CHECK: %[[F:.*]]:6 = kiln.fusion horizontal({{.*}}) : (tensor<64x32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<64x32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<64x32xf32>, tensor<32xf32>, tensor<32xf32>) -> (tensor<32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32xf32>)
// CHECK-COUNT-3: kiln.reduce sum %{{.*}}, dims = [0] : tensor<64x32xf32> -> tensor<32xf32>
// CHECK: kiln.yield
// CHECK-NOT: kiln.fusion
// CHECK: return %[[F]]#0, %[[F]]#1, %[[F]]#2, %[[F]]#3, %[[F]]#4, %[[F]]#5
// Without the option (the CPU pipeline's default) each stays a kernel.
// OFF-LABEL: func.func @updates
// OFF-COUNT-3: kiln.fusion reduction
// OFF-NOT: horizontal
// OFF: return
// The operand limit (6 inputs) packs two and leaves the third alone.
// LIMIT-LABEL: func.func @updates
// LIMIT: kiln.fusion horizontal({{.*}}) : (tensor<64x32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<64x32xf32>, tensor<32xf32>, tensor<32xf32>) -> (tensor<32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32xf32>)
// LIMIT: kiln.fusion reduction({{.*}}) : (tensor<64x32xf32>, tensor<32xf32>, tensor<32xf32>) -> (tensor<32xf32>, tensor<32xf32>)
// LIMIT-NOT: kiln.fusion
// LIMIT: return
func.func @updates(%p1: tensor<64x32xf32>, %m1: tensor<32xf32>, %w1: tensor<32xf32>,
                   %p2: tensor<64x32xf32>, %m2: tensor<32xf32>, %w2: tensor<32xf32>,
                   %p3: tensor<64x32xf32>, %m3: tensor<32xf32>, %w3: tensor<32xf32>)
    -> (tensor<32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32xf32>) {
  %beta = kiln.constant dense<0.9> : tensor<32xf32>
  %lr = kiln.constant dense<0.01> : tensor<32xf32>
  %g1 = kiln.reduce sum %p1, dims = [0] : tensor<64x32xf32> -> tensor<32xf32>
  %a1 = kiln.mul %m1, %beta : tensor<32xf32>
  %n1 = kiln.add %a1, %g1 : tensor<32xf32>
  %s1 = kiln.mul %n1, %lr : tensor<32xf32>
  %v1 = kiln.sub %w1, %s1 : tensor<32xf32>
  %g2 = kiln.reduce sum %p2, dims = [0] : tensor<64x32xf32> -> tensor<32xf32>
  %a2 = kiln.mul %m2, %beta : tensor<32xf32>
  %n2 = kiln.add %a2, %g2 : tensor<32xf32>
  %s2 = kiln.mul %n2, %lr : tensor<32xf32>
  %v2 = kiln.sub %w2, %s2 : tensor<32xf32>
  %g3 = kiln.reduce sum %p3, dims = [0] : tensor<64x32xf32> -> tensor<32xf32>
  %a3 = kiln.mul %m3, %beta : tensor<32xf32>
  %n3 = kiln.add %a3, %g3 : tensor<32xf32>
  %s3 = kiln.mul %n3, %lr : tensor<32xf32>
  %v3 = kiln.sub %w3, %s3 : tensor<32xf32>
  return %n1, %v1, %n2, %v2, %n3, %v3 : tensor<32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32xf32>
}

// -----

// Only reductions of one layout share a kernel: the two column reductions
// of 64 rows pack together, the two row reductions of 100 elements
// together, and a column reduction of 4096 rows (a thread per result on
// CUDA, not a warp) stays alone; no loop kernel joins a reduction group.
// CHECK-LABEL: func.func @layouts
// CHECK-DAG: kiln.fusion horizontal({{.*}}) : (tensor<64x32xf32>, tensor<64x32xf32>) -> (tensor<32xf32>, tensor<32xf32>)
// CHECK-DAG: kiln.fusion horizontal({{.*}}) : (tensor<32x100xf32>, tensor<32x100xf32>) -> (tensor<32xf32>, tensor<32xf32>)
// CHECK-DAG: kiln.fusion reduction({{.*}}) : (tensor<4096x32xf32>) -> tensor<32xf32>
// CHECK-DAG: kiln.fusion loop({{.*}}) : (tensor<32xf32>) -> tensor<32xf32>
// CHECK: return
func.func @layouts(%c1: tensor<64x32xf32>, %c2: tensor<64x32xf32>, %r1: tensor<32x100xf32>,
                   %r2: tensor<32x100xf32>, %long: tensor<4096x32xf32>, %x: tensor<32xf32>)
    -> (tensor<32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32xf32>) {
  %a = kiln.reduce sum %c1, dims = [0] : tensor<64x32xf32> -> tensor<32xf32>
  %b = kiln.reduce max %c2, dims = [0] : tensor<64x32xf32> -> tensor<32xf32>
  %c = kiln.reduce sum %r1, dims = [1] : tensor<32x100xf32> -> tensor<32xf32>
  %d = kiln.reduce max %r2, dims = [1] : tensor<32x100xf32> -> tensor<32xf32>
  %e = kiln.reduce sum %long, dims = [0] : tensor<4096x32xf32> -> tensor<32xf32>
  %f = kiln.exp %x : tensor<32xf32>
  return %a, %b, %c, %d, %e, %f : tensor<32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32xf32>
}

// -----

// A reduction whose result feeds another kernel (here an all_reduce) is
// grouped with that consumer's other producers, never with the kernels
// that feed the return: %g1 stays its own kernel before the all_reduce,
// %g2 and %g3 share one.
// CHECK-LABEL: func.func @feeds_collective
// CHECK: %[[R:.*]] = kiln.fusion reduction(%arg0) : (tensor<64x32xf32>) -> tensor<32xf32>
// CHECK: kiln.all_reduce sum %[[R]]
// CHECK: kiln.fusion horizontal(%arg1, %arg2) : (tensor<64x32xf32>, tensor<64x32xf32>) -> (tensor<32xf32>, tensor<32xf32>)
// CHECK-NOT: kiln.fusion
// CHECK: return
func.func @feeds_collective(%p1: tensor<64x32xf32>, %p2: tensor<64x32xf32>, %p3: tensor<64x32xf32>)
    -> (tensor<32xf32>, tensor<32xf32>, tensor<32xf32>) {
  %g1 = kiln.reduce sum %p1, dims = [0] : tensor<64x32xf32> -> tensor<32xf32>
  %s = kiln.all_reduce sum %g1 : tensor<32xf32>
  %g2 = kiln.reduce sum %p2, dims = [0] : tensor<64x32xf32> -> tensor<32xf32>
  %g3 = kiln.reduce sum %p3, dims = [0] : tensor<64x32xf32> -> tensor<32xf32>
  return %s, %g2, %g3 : tensor<32xf32>, tensor<32xf32>, tensor<32xf32>
}
