// RUN: kiln-opt %s | kiln-opt | FileCheck %s
//
// Parse/print round trip of kiln.concatenate: the inputs are parenthesized,
// so the comma before `dim` cannot be taken for another operand.

// Two and three inputs, along the first and the last dimension, and the
// generic form, which prints as the custom one.
// CHECK-LABEL: func.func @concatenate
func.func @concatenate(%x: tensor<2x3xf32>, %y: tensor<2x4xf32>, %z: tensor<1x3xf32>) {
  // CHECK: kiln.concatenate(%{{.*}}, %{{.*}}), dim = 0 : (tensor<1x3xf32>, tensor<2x3xf32>) -> tensor<3x3xf32>
  %0 = kiln.concatenate(%z, %x), dim = 0 : (tensor<1x3xf32>, tensor<2x3xf32>) -> tensor<3x3xf32>
  // CHECK: kiln.concatenate(%{{.*}}, %{{.*}}, %{{.*}}), dim = 1 : (tensor<2x3xf32>, tensor<2x4xf32>, tensor<2x3xf32>) -> tensor<2x10xf32>
  %1 = kiln.concatenate(%x, %y, %x), dim = 1 : (tensor<2x3xf32>, tensor<2x4xf32>, tensor<2x3xf32>) -> tensor<2x10xf32>
  // CHECK: kiln.concatenate(%{{.*}}), dim = 0 : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %2 = "kiln.concatenate"(%x) {dimension = 0 : i64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return
}
