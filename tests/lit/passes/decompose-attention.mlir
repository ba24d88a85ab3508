// kiln-decompose's attention patterns (passes/Decompose.cpp) give the
// reference interpreter's values bit for bit in f64, forward and backward
// (the same arithmetic in the same order; masked keys add exact zeros), and
// attention=false keeps both ops whole (the CUDA pipeline).
// RUN: kiln-opt %s --kiln-test-interpret > %t.whole
// RUN: kiln-opt %s --kiln-decompose | FileCheck %s --check-prefix=DECOMPOSED
// RUN: kiln-opt %s --kiln-decompose --kiln-test-interpret > %t.decomposed
// RUN: diff %t.whole %t.decomposed
// RUN: kiln-opt %s --kiln-decompose=attention=false | FileCheck %s --check-prefix=KEPT

// DECOMPOSED-NOT: kiln.attention

// Causal, Tq < Tk (keys 3 and 4 are never visible), Dv != D.
// DECOMPOSED-LABEL: func.func @causal
// DECOMPOSED: kiln.dot_general %{{.*}}, %{{.*}}, batch = [0, 1] x [0, 1], contract = [3] x [3]
// DECOMPOSED: kiln.iota dim = 0 : tensor<3x5xi64>
// DECOMPOSED: kiln.iota dim = 1 : tensor<3x5xi64>
// DECOMPOSED: kiln.compare ge
// DECOMPOSED: kiln.select
// DECOMPOSED: kiln.reduce max
// DECOMPOSED: kiln.dot_general %{{.*}}, %{{.*}}, batch = [0, 1] x [0, 1], contract = [3] x [2]
// KEPT-LABEL: func.func @causal
// KEPT: kiln.attention %{{.*}} {causal = true
// KEPT: kiln.attention_grad %{{.*}} {causal = true
func.func @causal() -> (tensor<1x2x3x3xf64>, tensor<1x2x3xf64>, tensor<1x2x3x2xf64>, tensor<1x2x5x2xf64>, tensor<1x2x5x3xf64>) {
  %q = kiln.constant dense<[[[[-0.7, -1.4], [0.6, -1.71], [0.14, -0.54]], [[-1.77, 0.03], [-1.85, -0.27], [-1.72, -1.64]]]]> : tensor<1x2x3x2xf64>
  %k = kiln.constant dense<[[[[-0.3, 1.31], [-1.5, -1.11], [0.51, 1.79], [0.31, -0.41], [1.91, -1.81]], [[1.43, -0.84], [-1.42, -1.53], [-0.77, 1.26], [-1.28, 0.33], [0.56, -0.51]]]]> : tensor<1x2x5x2xf64>
  %v = kiln.constant dense<[[[[0.19, -1.75, -1.76], [-1.18, 0.72, -0.29], [-0.74, 0.34, -0.19], [-0.8, 1.18, 0.8], [-1.02, 0.3, 0.1]], [[1.5, 0.92, -0.85], [1.92, -1.53, -0.33], [1.03, -1.39, -0.04], [-1.84, 0.67, 1.06], [0.29, 1.5, -0.75]]]]> : tensor<1x2x5x3xf64>
  %g = kiln.constant dense<[[[[0.78, 0.38, 0.32], [-0.18, 1.36, 1.78], [-0.1, 0.66, -1.76]], [[0.81, 0.59, 1.97], [1.29, -0.86, -0.46], [0.67, -1.91, -0.15]]]]> : tensor<1x2x3x3xf64>
  %o, %l = kiln.attention %q, %k, %v {scale = 0.7 : f64, causal = true} : (tensor<1x2x3x2xf64>, tensor<1x2x5x2xf64>, tensor<1x2x5x3xf64>) -> (tensor<1x2x3x3xf64>, tensor<1x2x3xf64>)
  %dq, %dk, %dv = kiln.attention_grad %q, %k, %v, %o, %l, %g {scale = 0.7 : f64, causal = true} : (tensor<1x2x3x2xf64>, tensor<1x2x5x2xf64>, tensor<1x2x5x3xf64>, tensor<1x2x3x3xf64>, tensor<1x2x3xf64>, tensor<1x2x3x3xf64>) -> (tensor<1x2x3x2xf64>, tensor<1x2x5x2xf64>, tensor<1x2x5x3xf64>)
  return %o, %l, %dq, %dk, %dv : tensor<1x2x3x3xf64>, tensor<1x2x3xf64>, tensor<1x2x3x2xf64>, tensor<1x2x5x2xf64>, tensor<1x2x5x3xf64>
}

// Not causal, Tq > Tk, two batches: no mask.
// DECOMPOSED-LABEL: func.func @full
// DECOMPOSED-NOT: kiln.select
// DECOMPOSED: return
func.func @full() -> (tensor<2x1x4x2xf64>, tensor<2x1x4xf64>, tensor<2x1x4x3xf64>, tensor<2x1x3x3xf64>, tensor<2x1x3x2xf64>) {
  %q = kiln.constant dense<[[[[-1.33, -1.53, -1.76], [1.07, -1.48, -1.01], [-0.44, 1.49, -1.68], [-0.2, 0.2, 1.53]]], [[[1.28, 1.46, -0.89], [-0.34, -0.56, 1.54], [1.83, -1.4, -1.3], [-1.07, -1.07, -0.06]]]]> : tensor<2x1x4x3xf64>
  %k = kiln.constant dense<[[[[0.36, -0.95, -1.98], [-0.32, -0.52, 0.27], [1.81, 0.76, 0.06]]], [[[0.47, 0.7, -1.78], [1.6, 1.12, 1.5], [1.19, -0.43, -0.4]]]]> : tensor<2x1x3x3xf64>
  %v = kiln.constant dense<[[[[-1.59, 0.54], [-1.75, -1.73], [-1.16, -1.35]]], [[[-0.64, -1.79], [-2.0, -1.39], [-1.59, -0.55]]]]> : tensor<2x1x3x2xf64>
  %g = kiln.constant dense<[[[[-1.9, 1.5], [0.46, -1.41], [-0.99, -0.61], [-0.54, -1.51]]], [[[1.4, 1.97], [-0.14, -0.06], [-1.66, -1.59], [-0.63, -0.94]]]]> : tensor<2x1x4x2xf64>
  %o, %l = kiln.attention %q, %k, %v {scale = 0.5 : f64, causal = false} : (tensor<2x1x4x3xf64>, tensor<2x1x3x3xf64>, tensor<2x1x3x2xf64>) -> (tensor<2x1x4x2xf64>, tensor<2x1x4xf64>)
  %dq, %dk, %dv = kiln.attention_grad %q, %k, %v, %o, %l, %g {scale = 0.5 : f64, causal = false} : (tensor<2x1x4x3xf64>, tensor<2x1x3x3xf64>, tensor<2x1x3x2xf64>, tensor<2x1x4x2xf64>, tensor<2x1x4xf64>, tensor<2x1x4x2xf64>) -> (tensor<2x1x4x3xf64>, tensor<2x1x3x3xf64>, tensor<2x1x3x2xf64>)
  return %o, %l, %dq, %dk, %dv : tensor<2x1x4x2xf64>, tensor<2x1x4xf64>, tensor<2x1x4x3xf64>, tensor<2x1x3x3xf64>, tensor<2x1x3x2xf64>
}
