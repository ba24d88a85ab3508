// Graph file round trip of kiln.concatenate. Its custom assembly cannot be
// parsed back yet (see tests/lit/ir/concatenate.mlir), so this test reads and
// prints the generic form throughout.
// RUN: kiln-translate --mlir-to-kiln %s -o %t.1.kiln
// RUN: kiln-translate --kiln-to-mlir %t.1.kiln --mlir-print-op-generic -o %t.1.mlir
// RUN: kiln-translate --mlir-to-kiln %t.1.mlir -o %t.2.kiln
// RUN: kiln-translate --kiln-to-mlir %t.2.kiln --mlir-print-op-generic -o %t.2.mlir
// RUN: diff %t.1.mlir %t.2.mlir
// RUN: cmp %t.1.kiln %t.2.kiln
// RUN: FileCheck %s --input-file %t.2.mlir

// CHECK-LABEL: sym_name = "concat"
// CHECK: "kiln.concatenate"(%{{.+}}, %{{.+}}, %{{.+}}) <{dimension = 1 : i64}> : (tensor<2x3xf32>, tensor<2x4xf32>, tensor<2x3xf32>) -> tensor<2x10xf32>
// CHECK: "kiln.concatenate"(%{{.+}}) <{dimension = 0 : i64}> : (tensor<2x3xf32>) -> tensor<2x3xf32>
func.func @concat(%x: tensor<2x3xf32>, %y: tensor<2x4xf32>) -> (tensor<2x10xf32>, tensor<2x3xf32>) {
  %0 = "kiln.concatenate"(%x, %y, %x) {dimension = 1 : i64} : (tensor<2x3xf32>, tensor<2x4xf32>, tensor<2x3xf32>) -> tensor<2x10xf32>
  %1 = "kiln.concatenate"(%x) {dimension = 0 : i64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return %0, %1 : tensor<2x10xf32>, tensor<2x3xf32>
}
