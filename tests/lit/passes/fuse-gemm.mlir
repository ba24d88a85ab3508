// RUN: kiln-opt %s -split-input-file --kiln-fuse | FileCheck %s
// RUN: kiln-opt %s -split-input-file --kiln-fuse=gemm-epilogues=false | FileCheck %s --check-prefix=OFF

// GEMM epilogue: the bias add and relu after a matmul join it (dot_general first); the pre-activation is a second result (cuBLASLt's AUX output) because the compare reads it.
// CHECK-LABEL: func.func @bias_relu
// CHECK-SAME: (%[[X:.*]]: tensor<128x784xf32>, %[[W:.*]]: tensor<784x512xf32>, %[[B:.*]]: tensor<512xf32>)
// CHECK: %[[G:.*]]:2 = kiln.fusion gemm(%[[X]], %[[W]], %[[B]])
// CHECK-NEXT: ^bb0(%[[XA:.*]]: tensor<128x784xf32>, %[[WA:.*]]: tensor<784x512xf32>, %[[BA:.*]]: tensor<512xf32>):
// CHECK-NEXT: %[[D:.*]] = kiln.dot_general %[[XA]], %[[WA]]
// CHECK-NEXT: %[[BB:.*]] = kiln.broadcast_in_dim %[[BA]], dims = [1]
// CHECK-NEXT: %[[A:.*]] = kiln.add %[[D]], %[[BB]]
// CHECK-NEXT: %[[R:.*]] = kiln.relu %[[A]]
// CHECK-NEXT: kiln.yield %[[A]], %[[R]]
// CHECK: kiln.fusion loop(%[[G]]#0)
// CHECK: kiln.compare gt
// OFF-LABEL: func.func @bias_relu
// OFF: kiln.dot_general
// OFF-NOT: kiln.fusion gemm
func.func @bias_relu(%x: tensor<128x784xf32>, %w: tensor<784x512xf32>, %b: tensor<512xf32>) -> (tensor<128x512xf32>, tensor<128x512xi1>) {
  %d = kiln.dot_general %x, %w, batch = [] x [], contract = [1] x [0] : (tensor<128x784xf32>, tensor<784x512xf32>) -> tensor<128x512xf32>
  %bb = kiln.broadcast_in_dim %b, dims = [1] : tensor<512xf32> -> tensor<128x512xf32>
  %a = kiln.add %d, %bb : tensor<128x512xf32>
  %r = kiln.relu %a : tensor<128x512xf32>
  %z = kiln.constant dense<0.0> : tensor<128x512xf32>
  %m = kiln.compare gt, %a, %z : tensor<128x512xf32>
  return %r, %m : tensor<128x512xf32>, tensor<128x512xi1>
}

// -----

// GEMM epilogue: a matmul with bias, a residual add (cuBLASLt's C matrix) and tanh-gelu, all one library call.
// CHECK-LABEL: func.func @bias_residual_gelu
// CHECK-SAME: (%[[X:.*]]: tensor<8x64x128xf32>, %[[W:.*]]: tensor<128x128xf32>, %[[B:.*]]: tensor<128xf32>, %[[H:.*]]: tensor<8x64x128xf32>)
// CHECK: %[[G:.*]] = kiln.fusion gemm(%[[X]], %[[W]], %[[B]], %[[H]])
// CHECK-NEXT: ^bb0
// CHECK-NEXT: kiln.dot_general
// CHECK-NEXT: kiln.broadcast_in_dim %{{.*}}, dims = [2]
// CHECK-NEXT: kiln.add
// CHECK-NEXT: kiln.add
// CHECK-NEXT: kiln.gelu tanh
// CHECK-NEXT: kiln.yield
// CHECK-NEXT: }
// CHECK-NEXT: return %[[G]]
func.func @bias_residual_gelu(%x: tensor<8x64x128xf32>, %w: tensor<128x128xf32>, %b: tensor<128xf32>, %h: tensor<8x64x128xf32>) -> tensor<8x64x128xf32> {
  %d = kiln.dot_general %x, %w, batch = [] x [], contract = [2] x [0] : (tensor<8x64x128xf32>, tensor<128x128xf32>) -> tensor<8x64x128xf32>
  %bb = kiln.broadcast_in_dim %b, dims = [2] : tensor<128xf32> -> tensor<8x64x128xf32>
  %a = kiln.add %d, %bb : tensor<8x64x128xf32>
  %r = kiln.add %h, %a : tensor<8x64x128xf32>
  %g = kiln.gelu tanh, %r : tensor<8x64x128xf32>
  return %g : tensor<8x64x128xf32>
}

// -----

// Not epilogues: a bias along the rows, erf-gelu and a multiply are nothing cuBLASLt applies, so the three matmuls stay plain library calls.
// CHECK-LABEL: func.func @not_epilogues
// CHECK-COUNT-3: kiln.dot_general
// CHECK-NOT: kiln.fusion gemm
// CHECK: return
func.func @not_epilogues(%x: tensor<64x32xf32>, %w: tensor<32x16xf32>, %c: tensor<64xf32>) -> (tensor<64x16xf32>, tensor<64x16xf32>, tensor<64x16xf32>) {
  %d1 = kiln.dot_general %x, %w, batch = [] x [], contract = [1] x [0] : (tensor<64x32xf32>, tensor<32x16xf32>) -> tensor<64x16xf32>
  %cb = kiln.broadcast_in_dim %c, dims = [0] : tensor<64xf32> -> tensor<64x16xf32>
  %a = kiln.add %d1, %cb : tensor<64x16xf32>
  %d2 = kiln.dot_general %x, %w, batch = [] x [], contract = [1] x [0] : (tensor<64x32xf32>, tensor<32x16xf32>) -> tensor<64x16xf32>
  %g = kiln.gelu erf, %d2 : tensor<64x16xf32>
  %d3 = kiln.dot_general %x, %w, batch = [] x [], contract = [1] x [0] : (tensor<64x32xf32>, tensor<32x16xf32>) -> tensor<64x16xf32>
  %m = kiln.mul %d3, %d3 : tensor<64x16xf32>
  return %a, %g, %m : tensor<64x16xf32>, tensor<64x16xf32>, tensor<64x16xf32>
}

// -----

// Never duplicated: a matmul read by two ops is not copied into both kernels; it stays one library call whose result both read.
// CHECK-LABEL: func.func @no_duplicate
// CHECK: %[[D:.*]] = kiln.dot_general
// CHECK-NOT: kiln.dot_general
// CHECK: kiln.fusion multi_output(%{{.*}}, %[[D]])
// CHECK-NOT: kiln.dot_general
// CHECK: return
func.func @no_duplicate(%x: tensor<64x32xf32>, %w: tensor<32x16xf32>, %b: tensor<16xf32>) -> (tensor<64x16xf32>, tensor<64x16xf32>) {
  %d = kiln.dot_general %x, %w, batch = [] x [], contract = [1] x [0] : (tensor<64x32xf32>, tensor<32x16xf32>) -> tensor<64x16xf32>
  %bb = kiln.broadcast_in_dim %b, dims = [1] : tensor<16xf32> -> tensor<64x16xf32>
  %a = kiln.add %d, %bb : tensor<64x16xf32>
  %t = kiln.tanh %d : tensor<64x16xf32>
  return %a, %t : tensor<64x16xf32>, tensor<64x16xf32>
}

// -----

// A bias the matmul itself reads (dot(x, b) + b, found by a random graph)
// is no epilogue: the broadcast would come before the dot_general in the
// gemm fusion. The add stays out of it.
// CHECK-LABEL: func.func @bias_read_by_the_dot
// CHECK: %[[B:.*]] = kiln.fusion loop
// CHECK-NEXT: ^bb0
// CHECK-NEXT: kiln.broadcast_in_dim
// CHECK: kiln.dot_general %{{.*}}, %[[B]]
// CHECK-NOT: kiln.fusion gemm
// CHECK: kiln.add
// CHECK: return
func.func @bias_read_by_the_dot(%x: tensor<1x1xf32>, %b: tensor<5xf32>) -> tensor<1x5xf32> {
  %bb = kiln.broadcast_in_dim %b, dims = [1] : tensor<5xf32> -> tensor<1x5xf32>
  %d = kiln.dot_general %x, %bb, batch = [] x [], contract = [1] x [0] : (tensor<1x1xf32>, tensor<1x5xf32>) -> tensor<1x5xf32>
  %a = kiln.add %bb, %d : tensor<1x5xf32>
  return %a : tensor<1x5xf32>
}

// -----

// A GEMM whose operand is a small constant (an RNN's zero initial state
// times its recurrent weight, reshaped): the constant and its reshape stay
// outside, so the fusion's body still starts with the dot_general (which
// reads its operands from buffers); the bias add joins as the epilogue.
// CHECK-LABEL: func.func @constant_operand
// CHECK: %[[Z:.*]] = kiln.constant dense<0.000000e+00> : tensor<1x4x4xf32>
// CHECK: %[[ZR:.*]] = kiln.reshape %[[Z]]
// CHECK: kiln.fusion gemm(%[[ZR]], %{{.*}}, %{{.*}})
// CHECK-NEXT: ^bb0
// CHECK-NEXT: kiln.dot_general
// CHECK-NEXT: kiln.broadcast_in_dim
// CHECK-NEXT: kiln.add
func.func @constant_operand(%r: tensor<12x4xf32>, %b: tensor<12xf32>) -> tensor<4x12xf32> {
  %z = kiln.constant dense<0.0> : tensor<1x4x4xf32>
  %h = kiln.reshape %z : tensor<1x4x4xf32> -> tensor<4x4xf32>
  %d = kiln.dot_general %h, %r, batch = [] x [], contract = [1] x [1] : (tensor<4x4xf32>, tensor<12x4xf32>) -> tensor<4x12xf32>
  %bb = kiln.broadcast_in_dim %b, dims = [1] : tensor<12xf32> -> tensor<4x12xf32>
  %a = kiln.add %d, %bb : tensor<4x12xf32>
  return %a : tensor<4x12xf32>
}

// -----

// kiln-autodiff's recomputed clone of the GELU (kiln.remat, --remat=dots)
// reads the same pre-activation as the forward GELU, in the backward pass.
// The epilogue takes the forward GELU; the clone stays a kernel of its own
// before its backward reader, or it would be computed in the forward pass
// and kept, which is what recomputing it saves (the mark is dropped).
// CHECK-LABEL: func.func @remat_gelu
// CHECK: %[[G:.*]]:2 = kiln.fusion gemm
// CHECK: kiln.add
// CHECK-NEXT: %[[FWD:.*]] = kiln.gelu tanh, %{{[0-9]+}} : tensor<64x128xf32>
// CHECK-NEXT: kiln.yield %{{.*}}, %[[FWD]]
// CHECK: kiln.dot_general %[[G]]#1, %arg3
// CHECK: %[[CLONE:.*]] = kiln.fusion loop(%[[G]]#0)
// CHECK-NEXT: ^bb0
// CHECK-NEXT: kiln.gelu tanh, %{{[a-z0-9]+}} : tensor<64x128xf32>
// CHECK: kiln.dot_general %[[CLONE]], %arg4
// CHECK: return
func.func @remat_gelu(%x: tensor<64x128xf32>, %w: tensor<128x128xf32>, %b: tensor<128xf32>, %w2: tensor<128x128xf32>, %dy: tensor<64x128xf32>) -> (tensor<64x128xf32>, tensor<128x128xf32>) {
  %d = kiln.dot_general %x, %w, batch = [] x [], contract = [1] x [0] : (tensor<64x128xf32>, tensor<128x128xf32>) -> tensor<64x128xf32>
  %bb = kiln.broadcast_in_dim %b, dims = [1] : tensor<128xf32> -> tensor<64x128xf32>
  %a = kiln.add %d, %bb : tensor<64x128xf32>
  %g = kiln.gelu tanh, %a : tensor<64x128xf32>
  %y = kiln.dot_general %g, %w2, batch = [] x [], contract = [1] x [0] : (tensor<64x128xf32>, tensor<128x128xf32>) -> tensor<64x128xf32>
  %g2 = kiln.gelu tanh, %a {kiln.remat} : tensor<64x128xf32>
  %dw = kiln.dot_general %g2, %dy, batch = [] x [], contract = [0] x [0] : (tensor<64x128xf32>, tensor<64x128xf32>) -> tensor<128x128xf32>
  return %y, %dw : tensor<64x128xf32>, tensor<128x128xf32>
}

// -----

// Under --remat=full the GEMM itself is a recomputed clone: its recomputed
// bias add and GELU are its epilogue, as a forward GEMM's are.
// CHECK-LABEL: func.func @remat_gemm
// CHECK: kiln.fusion gemm
// CHECK-NEXT: ^bb0
// CHECK-NEXT: kiln.dot_general
// CHECK-NEXT: kiln.broadcast_in_dim
// CHECK-NEXT: kiln.add
// CHECK-NEXT: kiln.gelu tanh
// CHECK-NEXT: kiln.yield
// CHECK-NOT: kiln.remat
// CHECK: return
func.func @remat_gemm(%x: tensor<64x128xf32>, %w: tensor<128x128xf32>, %b: tensor<128xf32>, %dy: tensor<64x128xf32>) -> tensor<128x128xf32> {
  %d = kiln.dot_general %x, %w, batch = [] x [], contract = [1] x [0] {kiln.remat} : (tensor<64x128xf32>, tensor<128x128xf32>) -> tensor<64x128xf32>
  %bb = kiln.broadcast_in_dim %b, dims = [1] {kiln.remat} : tensor<128xf32> -> tensor<64x128xf32>
  %a = kiln.add %d, %bb {kiln.remat} : tensor<64x128xf32>
  %g = kiln.gelu tanh, %a {kiln.remat} : tensor<64x128xf32>
  %dw = kiln.dot_general %g, %dy, batch = [] x [], contract = [0] x [0] : (tensor<64x128xf32>, tensor<64x128xf32>) -> tensor<128x128xf32>
  return %dw : tensor<128x128xf32>
}
