// Decomposed composites give the reference interpreter's values bit for bit
// in f64: the same arithmetic in the same order. MLIR prints f64 constants
// so that they read back exactly, so equal text is equal bits.
// RUN: kiln-opt %s --kiln-test-interpret > %t.whole
// RUN: kiln-opt %s --kiln-decompose=gelu=true | FileCheck %s --check-prefix=DECOMPOSED
// RUN: kiln-opt %s --kiln-decompose=gelu=true --kiln-test-interpret > %t.decomposed
// RUN: diff %t.whole %t.decomposed
// RUN: FileCheck %s --input-file=%t.decomposed

// DECOMPOSED-NOT: kiln.softmax
// DECOMPOSED-NOT: kiln.log_softmax
// DECOMPOSED-NOT: kiln.layer_norm
// DECOMPOSED-NOT: kiln.gelu
// DECOMPOSED-NOT: kiln.reduce mean

// Large logits: without the maximum subtracted first, exp would overflow.
// CHECK-LABEL: func.func @softmax
// CHECK: kiln.constant dense<{{\[\[}}0.090030573170380462, 0.24472847105479764, 0.66524095577482178], [0.33333333333333331, 0.33333333333333331, 0.33333333333333331]]>
func.func @softmax() -> (tensor<2x3xf64>, tensor<2x3xf64>) {
  %x = kiln.constant dense<[[1000.0, 1001.0, 1002.0], [-3.5, -3.5, -3.5]]> : tensor<2x3xf64>
  %y = kiln.softmax %x, dim = 1 : tensor<2x3xf64>
  %z = kiln.log_softmax %x, dim = 0 : tensor<2x3xf64>
  return %y, %z : tensor<2x3xf64>, tensor<2x3xf64>
}

// CHECK-LABEL: func.func @layer_norm
func.func @layer_norm() -> tensor<2x2x3xf64> {
  %x = kiln.constant dense<[[[0.5, -1.25, 3.0], [2.0, 7.5, -0.125]], [[1.0e3, 1.0e3, 1.001e3], [4.0, 4.0, 4.0]]]> : tensor<2x2x3xf64>
  %g = kiln.constant dense<[[1.5, 0.5, -2.0], [1.0, 1.0, 3.0]]> : tensor<2x3xf64>
  %b = kiln.constant dense<[[0.0, 0.25, -0.5], [1.0, 2.0, 3.0]]> : tensor<2x3xf64>
  %y = kiln.layer_norm %x, %g, %b, axis = 1, epsilon = 1.0e-05 : tensor<2x2x3xf64>, tensor<2x3xf64>
  return %y : tensor<2x2x3xf64>
}

// CHECK-LABEL: func.func @cross_entropy
func.func @cross_entropy() -> (tensor<3xf64>, tensor<f64>) {
  %l = kiln.constant dense<[[2.0, -1.0, 0.5, 3.25], [100.0, 0.0, -100.0, 50.0], [0.1, 0.2, 0.3, 0.4]]> : tensor<3x4xf64>
  %t = kiln.constant dense<[3, 2, 0]> : tensor<3xi32>
  %y = kiln.softmax_cross_entropy %l, %t : (tensor<3x4xf64>, tensor<3xi32>) -> tensor<3xf64>
  %m = kiln.reduce mean %y, dims = [0] : tensor<3xf64> -> tensor<f64>
  return %y, %m : tensor<3xf64>, tensor<f64>
}

// CHECK-LABEL: func.func @gelu
func.func @gelu() -> (tensor<5xf64>, tensor<5xf64>) {
  %x = kiln.constant dense<[-3.0, -0.5, 0.0, 0.75, 4.0]> : tensor<5xf64>
  %a = kiln.gelu tanh, %x : tensor<5xf64>
  %b = kiln.gelu erf, %x : tensor<5xf64>
  return %a, %b : tensor<5xf64>, tensor<5xf64>
}

// CHECK-LABEL: func.func @mean
func.func @mean() -> (tensor<2xf64>, tensor<2xi32>) {
  %x = kiln.constant dense<[[0.1, 0.2], [0.7, -0.3], [1.0e-3, 5.0]]> : tensor<3x2xf64>
  %i = kiln.constant dense<[[7, -7], [2, -2], [0, 0]]> : tensor<3x2xi32>
  %m = kiln.reduce mean %x, dims = [0] : tensor<3x2xf64> -> tensor<2xf64>
  %n = kiln.reduce mean %i, dims = [0] : tensor<3x2xi32> -> tensor<2xi32>
  return %m, %n : tensor<2xf64>, tensor<2xi32>
}
