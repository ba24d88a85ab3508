// Graph file round trip of the collectives, with and without rank groups.
// RUN: kiln-translate --mlir-to-kiln %s -o %t.1.kiln
// RUN: kiln-translate --kiln-to-mlir %t.1.kiln -o %t.1.mlir
// RUN: kiln-translate --mlir-to-kiln %t.1.mlir -o %t.2.kiln
// RUN: kiln-translate --kiln-to-mlir %t.2.kiln -o %t.2.mlir
// RUN: diff %t.1.mlir %t.2.mlir
// RUN: cmp %t.1.kiln %t.2.kiln
// RUN: FileCheck %s --input-file %t.2.mlir

// CHECK-LABEL: func.func @collectives
func.func @collectives(%x: tensor<8x4xf32>, %n: tensor<4xi32>) -> (tensor<8x4xf32>, tensor<4x4xf32>, tensor<16x4xf32>, tensor<8x4xf32>, tensor<8x4xf32>, tensor<4xi32>) {
  // CHECK: %[[A:.+]] = kiln.all_reduce sum %{{.+}} : tensor<8x4xf32>
  %a = kiln.all_reduce sum %x : tensor<8x4xf32>
  // CHECK: kiln.all_reduce mean %[[A]] {groups = dense<{{\[\[}}0, 1], [2, 3]]> : tensor<2x2xi64>} : tensor<8x4xf32>
  %b = kiln.all_reduce mean %a {groups = dense<[[0, 1], [2, 3]]> : tensor<2x2xi64>} : tensor<8x4xf32>
  // CHECK: kiln.all_reduce max %{{.+}} {groups = dense<0> : tensor<1x1xi64>} : tensor<4xi32>
  %ni = kiln.all_reduce max %n {groups = dense<0> : tensor<1x1xi64>} : tensor<4xi32>
  // CHECK: kiln.reduce_scatter min %{{.+}}, dim = 0 {groups = dense<{{\[\[}}0, 1]]> : tensor<1x2xi64>} : tensor<8x4xf32> -> tensor<4x4xf32>
  %c = kiln.reduce_scatter min %b, dim = 0 {groups = dense<[[0, 1]]> : tensor<1x2xi64>} : tensor<8x4xf32> -> tensor<4x4xf32>
  // CHECK: kiln.all_gather %{{.+}}, dim = 0 : tensor<8x4xf32> -> tensor<16x4xf32>
  %d = kiln.all_gather %b, dim = 0 : tensor<8x4xf32> -> tensor<16x4xf32>
  // CHECK: kiln.collective_broadcast %{{.+}}, root = 1 {groups = dense<{{\[\[}}1, 0]]> : tensor<1x2xi64>} : tensor<8x4xf32>
  %e = kiln.collective_broadcast %a, root = 1 {groups = dense<[[1, 0]]> : tensor<1x2xi64>} : tensor<8x4xf32>
  // CHECK: kiln.send %{{.+}}, peer = 1, channel = 3 : tensor<8x4xf32>
  kiln.send %e, peer = 1, channel = 3 : tensor<8x4xf32>
  // CHECK: kiln.recv peer = 0, channel = 3 : tensor<8x4xf32>
  %f = kiln.recv peer = 0, channel = 3 : tensor<8x4xf32>
  return %b, %c, %d, %e, %f, %ni : tensor<8x4xf32>, tensor<4x4xf32>, tensor<16x4xf32>, tensor<8x4xf32>, tensor<8x4xf32>, tensor<4xi32>
}
