// RUN: kiln-opt %s --kiln-test-interpret | FileCheck %s
//
// Small, hand-checked values for the reductions, contractions, windows,
// neural-network composites, collectives and fusions on the reference
// interpreter. The random checks against NumPy are in check_*.py.

// reduce: sum and mean over one dimension, max over all (a 0-d result),
// integer mean truncating toward zero, products of floats and of integers
// (65536 * 65536 * 3 wraps to 0 in i32; 1000^3 * 7 = 7e9 keeps its low 32
// bits, -1589934592; 1000003 * 1000033 * 1000037 * 7 = 7000511010017025641,
// past 2^53, whose low 32 bits are 1581686377: cut before the product
// becomes a double, which would round them away).
// CHECK-LABEL: func.func @reduce
// CHECK: dense<[6.000000e+00, 1.500000e+01]> : tensor<2xf32>
// CHECK: dense<[2.500000e+00, 3.500000e+00, 4.500000e+00]> : tensor<3xf32>
// CHECK: dense<6.000000e+00> : tensor<f32>
// CHECK: dense<[1, 4]> : tensor<2xi32>
// CHECK: dense<[4.000000e+00, 1.000000e+01, 1.800000e+01]> : tensor<3xf32>
// CHECK: dense<[0, -1589934592, 1581686377]> : tensor<3xi32>
func.func @reduce() -> (tensor<2xf32>, tensor<3xf32>, tensor<f32>, tensor<2xi32>, tensor<3xf32>, tensor<3xi32>) {
  %x = kiln.constant dense<[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]> : tensor<2x3xf32>
  %i = kiln.constant dense<[[1, 2], [3, 5]]> : tensor<2x2xi32>
  %0 = kiln.reduce sum %x, dims = [1] : tensor<2x3xf32> -> tensor<2xf32>
  %1 = kiln.reduce mean %x, dims = [0] : tensor<2x3xf32> -> tensor<3xf32>
  %2 = kiln.reduce max %x, dims = [0, 1] : tensor<2x3xf32> -> tensor<f32>
  %3 = kiln.reduce mean %i, dims = [1] : tensor<2x2xi32> -> tensor<2xi32>
  %4 = kiln.reduce prod %x, dims = [0] : tensor<2x3xf32> -> tensor<3xf32>
  %w = kiln.constant dense<[[65536, 65536, 3, 1], [1000, 1000, 1000, 7], [1000003, 1000033, 1000037, 7]]> : tensor<3x4xi32>
  %5 = kiln.reduce prod %w, dims = [1] : tensor<3x4xi32> -> tensor<3xi32>
  return %0, %1, %2, %3, %4, %5 : tensor<2xf32>, tensor<3xf32>, tensor<f32>, tensor<2xi32>, tensor<3xf32>, tensor<3xi32>
}

// argmax: the first maximum on ties; NaN counts as the largest.
// CHECK-LABEL: func.func @argmax
// CHECK: dense<[1, 0]> : tensor<2xi64>
func.func @argmax() -> tensor<2xi64> {
  %x = kiln.constant dense<[[1.0, 3.0, 3.0], [0x7FC00000, 5.0, 0x7FC00000]]> : tensor<2x3xf32>
  %0 = kiln.argmax %x, dim = 1 : tensor<2x3xf32> -> tensor<2xi64>
  return %0 : tensor<2xi64>
}

// dot_general: a batched matmul, and a contraction over both leading
// dimensions (a^T b).
// CHECK-LABEL: func.func @dot_general
// CHECK: dense<{{\[\[\[}}1.900000e+01, 2.200000e+01], [4.300000e+01, 5.000000e+01]]]> : tensor<1x2x2xf32>
// CHECK: dense<{{\[\[}}2.600000e+01, 3.000000e+01], [3.800000e+01, 4.400000e+01]]> : tensor<2x2xf32>
func.func @dot_general() -> (tensor<1x2x2xf32>, tensor<2x2xf32>) {
  %a = kiln.constant dense<[[[1.0, 2.0], [3.0, 4.0]]]> : tensor<1x2x2xf32>
  %b = kiln.constant dense<[[[5.0, 6.0], [7.0, 8.0]]]> : tensor<1x2x2xf32>
  %c = kiln.constant dense<[[1.0, 2.0], [3.0, 4.0]]> : tensor<2x2xf32>
  %d = kiln.constant dense<[[5.0, 6.0], [7.0, 8.0]]> : tensor<2x2xf32>
  %0 = kiln.dot_general %a, %b, batch = [0] x [0], contract = [2] x [1] : (tensor<1x2x2xf32>, tensor<1x2x2xf32>) -> tensor<1x2x2xf32>
  %1 = kiln.dot_general %c, %d, batch = [] x [], contract = [0] x [0] : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
  return %0, %1 : tensor<1x2x2xf32>, tensor<2x2xf32>
}

// conv2d with the filter [[1, 0], [0, 1]] on 1..9: plain, and padded by one
// with stride 2; then both gradients of the plain one with grad_output ones.
// CHECK-LABEL: func.func @conv2d
// CHECK: dense<{{\[\[\[\[}}6.000000e+00, 8.000000e+00], [1.200000e+01, 1.400000e+01]]]]> : tensor<1x1x2x2xf32>
// CHECK: dense<{{\[\[\[\[}}1.000000e+00, 3.000000e+00], [7.000000e+00, 1.400000e+01]]]]> : tensor<1x1x2x2xf32>
// CHECK: dense<{{\[\[\[\[}}1.000000e+00, 1.000000e+00, 0.000000e+00], [1.000000e+00, 2.000000e+00, 1.000000e+00], [0.000000e+00, 1.000000e+00, 1.000000e+00]]]]> : tensor<1x1x3x3xf32>
// CHECK: dense<{{\[\[\[\[}}1.200000e+01, 1.600000e+01], [2.400000e+01, 2.800000e+01]]]]> : tensor<1x1x2x2xf32>
func.func @conv2d() -> (tensor<1x1x2x2xf32>, tensor<1x1x2x2xf32>, tensor<1x1x3x3xf32>, tensor<1x1x2x2xf32>) {
  %x = kiln.constant dense<[[[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]]]]> : tensor<1x1x3x3xf32>
  %w = kiln.constant dense<[[[[1.0, 0.0], [0.0, 1.0]]]]> : tensor<1x1x2x2xf32>
  %dy = kiln.constant dense<1.0> : tensor<1x1x2x2xf32>
  %0 = kiln.conv2d %x, %w, strides = [1, 1], padding = [0, 0, 0, 0], dilation = [1, 1], groups = 1 : (tensor<1x1x3x3xf32>, tensor<1x1x2x2xf32>) -> tensor<1x1x2x2xf32>
  %1 = kiln.conv2d %x, %w, strides = [2, 2], padding = [1, 1, 1, 1], dilation = [1, 1], groups = 1 : (tensor<1x1x3x3xf32>, tensor<1x1x2x2xf32>) -> tensor<1x1x2x2xf32>
  %2 = kiln.conv2d_input_grad %dy, %w, strides = [1, 1], padding = [0, 0, 0, 0], dilation = [1, 1], groups = 1 : (tensor<1x1x2x2xf32>, tensor<1x1x2x2xf32>) -> tensor<1x1x3x3xf32>
  %3 = kiln.conv2d_filter_grad %x, %dy, strides = [1, 1], padding = [0, 0, 0, 0], dilation = [1, 1], groups = 1 : (tensor<1x1x3x3xf32>, tensor<1x1x2x2xf32>) -> tensor<1x1x2x2xf32>
  return %0, %1, %2, %3 : tensor<1x1x2x2xf32>, tensor<1x1x2x2xf32>, tensor<1x1x3x3xf32>, tensor<1x1x2x2xf32>
}

// Pooling 1..9 with 2x2 windows, stride 2, one row and column of padding at
// the bottom and right: max ignores the padding, avg counts it as zeros.
// Gradients: a window of ties sends its gradient to the first element; an
// overlapping average spreads a quarter per covering window.
// CHECK-LABEL: func.func @pooling
// CHECK: dense<{{\[\[\[\[}}5.000000e+00, 6.000000e+00], [8.000000e+00, 9.000000e+00]]]]> : tensor<1x1x2x2xf32>
// CHECK: dense<{{\[\[\[\[}}3.000000e+00, 2.250000e+00], [3.750000e+00, 2.250000e+00]]]]> : tensor<1x1x2x2xf32>
// CHECK: dense<{{\[\[\[\[}}5.000000e+00, 0.000000e+00], [0.000000e+00, 0.000000e+00]]]]> : tensor<1x1x2x2xf32>
// CHECK: dense<{{\[\[\[\[}}2.500000e-01, 5.000000e-01, 2.500000e-01], [5.000000e-01, 1.000000e+00, 5.000000e-01], [2.500000e-01, 5.000000e-01, 2.500000e-01]]]]> : tensor<1x1x3x3xf32>
func.func @pooling() -> (tensor<1x1x2x2xf32>, tensor<1x1x2x2xf32>, tensor<1x1x2x2xf32>, tensor<1x1x3x3xf32>) {
  %x = kiln.constant dense<[[[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]]]]> : tensor<1x1x3x3xf32>
  %ties = kiln.constant dense<1.0> : tensor<1x1x2x2xf32>
  %five = kiln.constant dense<5.0> : tensor<1x1x1x1xf32>
  %ones = kiln.constant dense<1.0> : tensor<1x1x2x2xf32>
  %0 = kiln.max_pool2d %x, window = [2, 2], strides = [2, 2], padding = [0, 1, 0, 1] : tensor<1x1x3x3xf32> -> tensor<1x1x2x2xf32>
  %1 = kiln.avg_pool2d %x, window = [2, 2], strides = [2, 2], padding = [0, 1, 0, 1] : tensor<1x1x3x3xf32> -> tensor<1x1x2x2xf32>
  %2 = kiln.max_pool2d_grad %ties, %five, window = [2, 2], strides = [1, 1], padding = [0, 0, 0, 0] : tensor<1x1x2x2xf32>, tensor<1x1x1x1xf32>
  %3 = kiln.avg_pool2d_grad %ones, window = [2, 2], strides = [1, 1], padding = [0, 0, 0, 0] : tensor<1x1x2x2xf32> -> tensor<1x1x3x3xf32>
  return %0, %1, %2, %3 : tensor<1x1x2x2xf32>, tensor<1x1x2x2xf32>, tensor<1x1x2x2xf32>, tensor<1x1x3x3xf32>
}

// softmax and log_softmax subtract the maximum first: logits of 1000 give
// 0.5 each instead of NaN. log_softmax of four equal logits is -log 4.
// CHECK-LABEL: func.func @softmax
// CHECK: dense<5.000000e-01> : tensor<2xf32>
// CHECK: dense<-1.38629436111989{{[0-9]*}}> : tensor<4xf64>
func.func @softmax() -> (tensor<2xf32>, tensor<4xf64>) {
  %big = kiln.constant dense<1000.0> : tensor<2xf32>
  %eq = kiln.constant dense<1.0> : tensor<4xf64>
  %0 = kiln.softmax %big, dim = 0 : tensor<2xf32>
  %1 = kiln.log_softmax %eq, dim = 0 : tensor<4xf64>
  return %0, %1 : tensor<2xf32>, tensor<4xf64>
}

// layer_norm of [1, 2, 3] with epsilon 0: (x - 2) / sqrt(2/3), then the
// bias [0, 10, 0].
// CHECK-LABEL: func.func @layer_norm
// CHECK: dense<{{\[\[}}-1.22474487139158{{[0-9]*}}, 1.000000e+01, 1.22474487139158{{[0-9]*}}]]> : tensor<1x3xf64>
func.func @layer_norm() -> tensor<1x3xf64> {
  %x = kiln.constant dense<[[1.0, 2.0, 3.0]]> : tensor<1x3xf64>
  %g = kiln.constant dense<1.0> : tensor<3xf64>
  %b = kiln.constant dense<[0.0, 10.0, 0.0]> : tensor<3xf64>
  %0 = kiln.layer_norm %x, %g, %b, axis = 1, epsilon = 0.0 : tensor<1x3xf64>, tensor<3xf64>
  return %0 : tensor<1x3xf64>
}

// softmax_cross_entropy: uniform logits cost log C; a confident right
// answer costs 0 and a confident wrong one the logit gap, without overflow.
// CHECK-LABEL: func.func @cross_entropy
// CHECK: dense<1.38629436111989{{[0-9]*}}> : tensor<1xf64>
// CHECK: dense<[0.000000e+00, 1.000000e+03]> : tensor<2xf32>
func.func @cross_entropy() -> (tensor<1xf64>, tensor<2xf32>) {
  %u = kiln.constant dense<0.0> : tensor<1x4xf64>
  %l = kiln.constant dense<2> : tensor<1xi32>
  %c = kiln.constant dense<[[1000.0, 0.0], [1000.0, 0.0]]> : tensor<2x2xf32>
  %k = kiln.constant dense<[0, 1]> : tensor<2xi64>
  %0 = kiln.softmax_cross_entropy %u, %l : (tensor<1x4xf64>, tensor<1xi32>) -> tensor<1xf64>
  %1 = kiln.softmax_cross_entropy %c, %k : (tensor<2x2xf32>, tensor<2xi64>) -> tensor<2xf32>
  return %0, %1 : tensor<1xf64>, tensor<2xf32>
}

// scatter_add accumulates repeated indices; with combine = prod a row is
// its own element times its updates (row 0: 2 * 2, row 1 untouched, row 2:
// 3 * 1 * 3).
// CHECK-LABEL: func.func @scatter_add
// CHECK: dense<{{\[\[}}2.000000e+00, 2.000000e+00], [0.000000e+00, 0.000000e+00], [4.000000e+00, 4.000000e+00]]> : tensor<3x2xf32>
// CHECK: dense<{{\[\[}}4.000000e+00, -4.000000e+00], [3.000000e+00, 3.000000e+00], [9.000000e+00, 9.000000e+00]]> : tensor<3x2xf32>
func.func @scatter_add() -> (tensor<3x2xf32>, tensor<3x2xf32>) {
  %z = kiln.constant dense<0.0> : tensor<3x2xf32>
  %i = kiln.constant dense<[2, 0, 2]> : tensor<3xi32>
  %u = kiln.constant dense<[[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]]> : tensor<3x2xf32>
  %0 = kiln.scatter_add %z, %i, %u : (tensor<3x2xf32>, tensor<3xi32>, tensor<3x2xf32>) -> tensor<3x2xf32>
  %t = kiln.constant dense<[[2.0, -2.0], [3.0, 3.0], [3.0, 3.0]]> : tensor<3x2xf32>
  %1 = kiln.scatter_add %t, %i, %u combine = prod : (tensor<3x2xf32>, tensor<3xi32>, tensor<3x2xf32>) -> tensor<3x2xf32>
  return %0, %1 : tensor<3x2xf32>, tensor<3x2xf32>
}

// dropout pins the Philox recipe of ir/reference/Philox.h: seed 7, rate
// 0.5, counters 0 and 1 (masks computed by tests/lit/reference/support/
// philox.py, an independent implementation). Every backend must match.
// CHECK-LABEL: func.func @dropout
// CHECK: dense<[2.000000e+00, 0.000000e+00, 2.000000e+00, 2.000000e+00, 2.000000e+00, 0.000000e+00, 2.000000e+00, 0.000000e+00]> : tensor<8xf32>
// CHECK: dense<[0.000000e+00, 2.000000e+00, 2.000000e+00, 2.000000e+00, 0.000000e+00, 2.000000e+00, 0.000000e+00, 2.000000e+00]> : tensor<8xf32>
func.func @dropout() -> (tensor<8xf32>, tensor<8xf32>) {
  %x = kiln.constant dense<1.0> : tensor<8xf32>
  %c0 = kiln.constant dense<0> : tensor<i64>
  %c1 = kiln.constant dense<1> : tensor<i64>
  %0 = kiln.dropout %x, %c0, rate = 5.000000e-01, seed = 7 : tensor<8xf32>
  %1 = kiln.dropout %x, %c1, rate = 5.000000e-01, seed = 7 : tensor<8xf32>
  return %0, %1 : tensor<8xf32>, tensor<8xf32>
}

// On the interpreter's single rank, collectives of unchanged shape return
// their operand.
// CHECK-LABEL: func.func @collectives
// CHECK: dense<[1.000000e+00, 2.000000e+00]> : tensor<2xf32>
// CHECK: dense<[1.000000e+00, 2.000000e+00]> : tensor<2xf32>
// CHECK: dense<[1.000000e+00, 2.000000e+00]> : tensor<2xf32>
func.func @collectives() -> (tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) {
  %x = kiln.constant dense<[1.0, 2.0]> : tensor<2xf32>
  %0 = kiln.all_reduce mean %x : tensor<2xf32>
  %1 = kiln.all_gather %x, dim = 0 : tensor<2xf32> -> tensor<2xf32>
  %2 = kiln.collective_broadcast %x, root = 0 : tensor<2xf32>
  return %0, %1, %2 : tensor<2xf32>, tensor<2xf32>, tensor<2xf32>
}

// A fusion evaluates its body.
// CHECK-LABEL: func.func @fusion
// CHECK: dense<[0.000000e+00, 5.000000e+00]> : tensor<2xf32>
func.func @fusion() -> tensor<2xf32> {
  %a = kiln.constant dense<[-4.0, 2.0]> : tensor<2xf32>
  %b = kiln.constant dense<[1.0, 3.0]> : tensor<2xf32>
  %0 = kiln.fusion loop (%a, %b) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32> {
  ^bb0(%x: tensor<2xf32>, %y: tensor<2xf32>):
    %s = kiln.add %x, %y : tensor<2xf32>
    %t = kiln.relu %s : tensor<2xf32>
    kiln.yield %t : tensor<2xf32>
  }
  return %0 : tensor<2xf32>
}
