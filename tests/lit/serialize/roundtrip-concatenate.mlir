// Graph file round trip of kiln.concatenate (one, two and three inputs).
// RUN: kiln-translate --mlir-to-kiln %s -o %t.1.kiln
// RUN: kiln-translate --kiln-to-mlir %t.1.kiln -o %t.1.mlir
// RUN: kiln-translate --mlir-to-kiln %t.1.mlir -o %t.2.kiln
// RUN: kiln-translate --kiln-to-mlir %t.2.kiln -o %t.2.mlir
// RUN: diff %t.1.mlir %t.2.mlir
// RUN: cmp %t.1.kiln %t.2.kiln
// RUN: FileCheck %s --input-file %t.2.mlir

// CHECK-LABEL: func.func @concat
// CHECK: kiln.concatenate(%{{.+}}, %{{.+}}, %{{.+}}), dim = 1 : (tensor<2x3xf32>, tensor<2x4xf32>, tensor<2x3xf32>) -> tensor<2x10xf32>
// CHECK: kiln.concatenate(%{{.+}}), dim = 0 : (tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK: kiln.concatenate(%{{.+}}, %{{.+}}), dim = 0 : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
func.func @concat(%x: tensor<2x3xf32>, %y: tensor<2x4xf32>) -> (tensor<2x10xf32>, tensor<2x3xf32>, tensor<4x3xf32>) {
  %0 = kiln.concatenate(%x, %y, %x), dim = 1 : (tensor<2x3xf32>, tensor<2x4xf32>, tensor<2x3xf32>) -> tensor<2x10xf32>
  %1 = kiln.concatenate(%x), dim = 0 : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %2 = kiln.concatenate(%x, %x), dim = 0 : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
  return %0, %1, %2 : tensor<2x10xf32>, tensor<2x3xf32>, tensor<4x3xf32>
}
