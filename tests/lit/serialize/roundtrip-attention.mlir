// Graph file round trip of kiln.attention (both results used) and
// kiln.attention_grad, causal and not, bf16 with an f32 lse and f64 with an
// f64 lse: text and bytes are stable after one trip.
// RUN: kiln-translate --mlir-to-kiln %s -o %t.1.kiln
// RUN: kiln-translate --kiln-to-mlir %t.1.kiln -o %t.1.mlir
// RUN: kiln-translate --mlir-to-kiln %t.1.mlir -o %t.2.kiln
// RUN: kiln-translate --kiln-to-mlir %t.2.kiln -o %t.2.mlir
// RUN: diff %t.1.mlir %t.2.mlir
// RUN: cmp %t.1.kiln %t.2.kiln
// RUN: FileCheck %s --input-file %t.2.mlir

// CHECK-LABEL: func.func @attention
// CHECK: %[[O:.*]], %[[L:.*]] = kiln.attention %{{.*}}, %{{.*}}, %{{.*}} {causal = true, scale = 1.250000e-01 : f64} : (tensor<2x3x5x4xbf16>, tensor<2x3x7x4xbf16>, tensor<2x3x7x6xbf16>) -> (tensor<2x3x5x6xbf16>, tensor<2x3x5xf32>)
// CHECK: kiln.attention_grad %{{.*}}, %{{.*}}, %{{.*}}, %[[O]], %[[L]], %{{.*}} {causal = true, scale = 1.250000e-01 : f64}
// CHECK: kiln.attention %{{.*}}, %{{.*}}, %{{.*}} {causal = false, scale = 3.000000e-01 : f64} : (tensor<1x2x3x8xf64>, tensor<1x2x3x8xf64>, tensor<1x2x3x8xf64>) -> (tensor<1x2x3x8xf64>, tensor<1x2x3xf64>)
func.func @attention(%q: tensor<2x3x5x4xbf16>, %k: tensor<2x3x7x4xbf16>, %v: tensor<2x3x7x6xbf16>,
                     %g: tensor<2x3x5x6xbf16>, %x: tensor<1x2x3x8xf64>)
    -> (tensor<2x3x5x6xbf16>, tensor<2x3x5xf32>, tensor<2x3x5x4xbf16>, tensor<2x3x7x4xbf16>, tensor<2x3x7x6xbf16>, tensor<1x2x3x8xf64>, tensor<1x2x3xf64>) {
  %o, %l = kiln.attention %q, %k, %v {scale = 0.125 : f64, causal = true} : (tensor<2x3x5x4xbf16>, tensor<2x3x7x4xbf16>, tensor<2x3x7x6xbf16>) -> (tensor<2x3x5x6xbf16>, tensor<2x3x5xf32>)
  %dq, %dk, %dv = kiln.attention_grad %q, %k, %v, %o, %l, %g {scale = 0.125 : f64, causal = true} : (tensor<2x3x5x4xbf16>, tensor<2x3x7x4xbf16>, tensor<2x3x7x6xbf16>, tensor<2x3x5x6xbf16>, tensor<2x3x5xf32>, tensor<2x3x5x6xbf16>) -> (tensor<2x3x5x4xbf16>, tensor<2x3x7x4xbf16>, tensor<2x3x7x6xbf16>)
  %o2, %l2 = kiln.attention %x, %x, %x {scale = 0.3 : f64, causal = false} : (tensor<1x2x3x8xf64>, tensor<1x2x3x8xf64>, tensor<1x2x3x8xf64>) -> (tensor<1x2x3x8xf64>, tensor<1x2x3xf64>)
  return %o, %l, %dq, %dk, %dv, %o2, %l2 : tensor<2x3x5x6xbf16>, tensor<2x3x5xf32>, tensor<2x3x5x4xbf16>, tensor<2x3x7x4xbf16>, tensor<2x3x7x6xbf16>, tensor<1x2x3x8xf64>, tensor<1x2x3xf64>
}
