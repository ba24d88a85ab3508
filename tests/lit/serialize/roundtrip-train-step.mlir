// Graph file round trip of a training step's boundary: gradient results
// (kiln.grad_of) and updated parameters and step (kiln.updates) name the
// argument they belong to, and so does a parameter copy (kiln.copy_of); an
// integer label keeps the bound the model reads it under (kiln.index_bound).
// RUN: kiln-translate --mlir-to-kiln %s -o %t.1.kiln
// RUN: kiln-translate --kiln-to-mlir %t.1.kiln -o %t.1.mlir
// RUN: kiln-translate --mlir-to-kiln %t.1.mlir -o %t.2.kiln
// RUN: kiln-translate --kiln-to-mlir %t.2.kiln -o %t.2.mlir
// RUN: diff %t.1.mlir %t.2.mlir
// RUN: cmp %t.1.kiln %t.2.kiln
// RUN: FileCheck %s --input-file %t.2.mlir

// CHECK-LABEL: func.func @train_step
// CHECK-SAME: tensor<3xbf16> {kiln.copy_of = 1 : i64, kiln.role = #kiln.role<parameter_copy>}
// CHECK-SAME: tensor<3xi32> {kiln.index_bound = 5 : i64, kiln.role = #kiln.role<label>})
// CHECK-SAME: -> (tensor<f32> {kiln.role = #kiln.role<loss>}, tensor<3xf32> {kiln.grad_of = 1 : i64, kiln.role = #kiln.role<gradient>}, tensor<3xf32> {kiln.role = #kiln.role<parameter>, kiln.updates = 1 : i64}, tensor<i64> {kiln.role = #kiln.role<step>, kiln.updates = 2 : i64}, tensor<3xbf16> {kiln.role = #kiln.role<parameter_copy>, kiln.updates = 3 : i64})
func.func @train_step(%x: tensor<3xf32> {kiln.role = #kiln.role<input>},
                      %w: tensor<3xf32> {kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = zeros>},
                      %step: tensor<i64> {kiln.role = #kiln.role<step>},
                      %wc: tensor<3xbf16> {kiln.role = #kiln.role<parameter_copy>, kiln.copy_of = 1 : i64},
                      %y: tensor<3xi32> {kiln.role = #kiln.role<label>, kiln.index_bound = 5 : i64})
    -> (tensor<f32> {kiln.role = #kiln.role<loss>},
        tensor<3xf32> {kiln.role = #kiln.role<gradient>, kiln.grad_of = 1 : i64},
        tensor<3xf32> {kiln.role = #kiln.role<parameter>, kiln.updates = 1 : i64},
        tensor<i64> {kiln.role = #kiln.role<step>, kiln.updates = 2 : i64},
        tensor<3xbf16> {kiln.role = #kiln.role<parameter_copy>, kiln.updates = 3 : i64}) {
  %wx = kiln.convert %wc : tensor<3xbf16> -> tensor<3xf32>
  %p = kiln.mul %x, %wx : tensor<3xf32>
  %l = kiln.reduce sum %p, dims = [0] : tensor<3xf32> -> tensor<f32>
  %lr = kiln.constant dense<0.5> : tensor<3xf32>
  %d = kiln.mul %x, %lr : tensor<3xf32>
  %nw = kiln.sub %w, %d : tensor<3xf32>
  %one = kiln.constant dense<1> : tensor<i64>
  %ns = kiln.add %step, %one : tensor<i64>
  %nc = kiln.convert %nw : tensor<3xf32> -> tensor<3xbf16>
  return %l, %p, %nw, %ns, %nc : tensor<f32>, tensor<3xf32>, tensor<3xf32>, tensor<i64>, tensor<3xbf16>
}
