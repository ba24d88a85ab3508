// Graph file round trip of the generators and every elementwise op:
// MLIR -> graph -> MLIR -> graph -> MLIR prints identically, the two graph
// files are byte-identical, and every op and attribute survives.
// RUN: kiln-translate --mlir-to-kiln %s -o %t.1.kiln
// RUN: kiln-translate --kiln-to-mlir %t.1.kiln -o %t.1.mlir
// RUN: kiln-translate --mlir-to-kiln %t.1.mlir -o %t.2.kiln
// RUN: kiln-translate --kiln-to-mlir %t.2.kiln -o %t.2.mlir
// RUN: diff %t.1.mlir %t.2.mlir
// RUN: cmp %t.1.kiln %t.2.kiln
// RUN: FileCheck %s --input-file %t.2.mlir

// CHECK-LABEL: func.func @elementwise
// CHECK-SAME: (%[[X:.+]]: tensor<2x3xf32> {kiln.name = "x", kiln.role = #kiln.role<input>}, %[[Y:.+]]: tensor<2x3xf32> {kiln.name = "y", kiln.role = #kiln.role<input>}, %[[I:.+]]: tensor<2x3xi32> {kiln.role = #kiln.role<input>})
// A result that returns an argument takes the argument's name and role: a
// graph file keeps one name and role per tensor.
// CHECK-SAME: -> (tensor<2x3xf32> {kiln.name = "sum", kiln.role = #kiln.role<output>}, tensor<2x3xi32>, tensor<2x3xf32> {kiln.name = "x", kiln.role = #kiln.role<input>})
func.func @elementwise(%x: tensor<2x3xf32> {kiln.role = #kiln.role<input>, kiln.name = "x"},
                       %y: tensor<2x3xf32> {kiln.role = #kiln.role<input>, kiln.name = "y"},
                       %i: tensor<2x3xi32> {kiln.role = #kiln.role<input>})
    -> (tensor<2x3xf32> {kiln.role = #kiln.role<output>, kiln.name = "sum"}, tensor<2x3xi32>, tensor<2x3xf32>) {
  // CHECK: %[[C:.+]] = kiln.constant dense<{{\[\[}}1.000000e+00, 2.000000e+00, 3.000000e+00], [4.000000e+00, 5.000000e+00, 6.000000e+00]]> : tensor<2x3xf32>
  %c = kiln.constant dense<[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]> : tensor<2x3xf32>
  // CHECK: kiln.constant dense<7> : tensor<2x3xi32>
  %ci = kiln.constant dense<7> : tensor<2x3xi32>
  // CHECK: kiln.constant dense<[true, false, true]> : tensor<3xi1>
  %cb = kiln.constant dense<[true, false, true]> : tensor<3xi1>
  // CHECK: kiln.constant dense<true> : tensor<2x3xi1>
  %cs = kiln.constant dense<true> : tensor<2x3xi1>
  // CHECK: kiln.constant dense<[1.500000e+00, -2.000000e+00]> : tensor<2xbf16>
  %cbf = kiln.constant dense<[1.5, -2.0]> : tensor<2xbf16>
  // CHECK: kiln.constant dense<[1.000000e-01, 0x7FF8000000000000]> : tensor<2xf64>
  %cd = kiln.constant dense<[0.1, 0x7FF8000000000000]> : tensor<2xf64>
  // CHECK: kiln.constant dense<[-1, 127]> : tensor<2xi8>
  %c8 = kiln.constant dense<[-1, 127]> : tensor<2xi8>
  // CHECK: kiln.constant dense<-9223372036854775808> : tensor<i64>
  %c64 = kiln.constant dense<-9223372036854775808> : tensor<i64>
  // CHECK: kiln.constant dense<> : tensor<0x3xf16>
  %ce = kiln.constant dense<> : tensor<0x3xf16>
  // CHECK: kiln.iota dim = 1 : tensor<2x3xi32>
  %io = kiln.iota dim = 1 : tensor<2x3xi32>
  // CHECK: kiln.neg %[[X]] : tensor<2x3xf32>
  %0 = kiln.neg %x : tensor<2x3xf32>
  // CHECK: kiln.abs
  %1 = kiln.abs %0 : tensor<2x3xf32>
  // CHECK: kiln.exp
  %2 = kiln.exp %1 : tensor<2x3xf32>
  // CHECK: kiln.log
  %3 = kiln.log %2 : tensor<2x3xf32>
  // CHECK: kiln.log1p
  %4 = kiln.log1p %3 : tensor<2x3xf32>
  // CHECK: kiln.sqrt
  %5 = kiln.sqrt %4 : tensor<2x3xf32>
  // CHECK: kiln.rsqrt
  %6 = kiln.rsqrt %5 : tensor<2x3xf32>
  // CHECK: kiln.tanh
  %7 = kiln.tanh %6 : tensor<2x3xf32>
  // CHECK: kiln.sigmoid
  %8 = kiln.sigmoid %7 : tensor<2x3xf32>
  // CHECK: kiln.relu
  %9 = kiln.relu %8 : tensor<2x3xf32>
  // CHECK: kiln.erf
  %10 = kiln.erf %9 : tensor<2x3xf32>
  // CHECK: kiln.sin
  %11 = kiln.sin %10 : tensor<2x3xf32>
  // CHECK: kiln.cos
  %12 = kiln.cos %11 : tensor<2x3xf32>
  // CHECK: kiln.reciprocal
  %13 = kiln.reciprocal %12 : tensor<2x3xf32>
  // CHECK: kiln.floor
  %floor = kiln.floor %13 : tensor<2x3xf32>
  // CHECK: kiln.ceil
  %ceil = kiln.ceil %floor : tensor<2x3xf32>
  // CHECK: kiln.round
  %round = kiln.round %ceil : tensor<2x3xf32>
  // CHECK: kiln.atan
  %atan = kiln.atan %round : tensor<2x3xf32>
  // CHECK: kiln.stop_gradient
  %14 = kiln.stop_gradient %atan : tensor<2x3xf32>
  // CHECK: kiln.gelu erf,
  %15 = kiln.gelu erf, %14 : tensor<2x3xf32>
  // CHECK: kiln.gelu tanh,
  %16 = kiln.gelu tanh, %15 : tensor<2x3xf32>
  // CHECK: kiln.gelu_grad tanh, %{{.+}}, %{{.+}} : tensor<2x3xf32>
  %ga = kiln.gelu_grad tanh, %15, %16 : tensor<2x3xf32>
  // CHECK: kiln.gelu_grad erf, %{{.+}}, %{{.+}} : tensor<2x3xf32>
  %gb = kiln.gelu_grad erf, %ga, %15 : tensor<2x3xf32>
  // CHECK: kiln.convert %{{.+}} : tensor<2x3xf32> -> tensor<2x3xbf16>
  %17 = kiln.convert %gb : tensor<2x3xf32> -> tensor<2x3xbf16>
  // CHECK: kiln.convert %{{.+}} : tensor<2x3xbf16> -> tensor<2x3xf32>
  %18 = kiln.convert %17 : tensor<2x3xbf16> -> tensor<2x3xf32>
  // CHECK: %[[SUM:.+]] = kiln.add %{{.+}}, %[[Y]] : tensor<2x3xf32>
  %19 = kiln.add %18, %y : tensor<2x3xf32>
  // CHECK: kiln.sub
  %20 = kiln.sub %19, %c : tensor<2x3xf32>
  // CHECK: kiln.mul
  %21 = kiln.mul %20, %c : tensor<2x3xf32>
  // CHECK: kiln.div
  %22 = kiln.div %21, %c : tensor<2x3xf32>
  // CHECK: kiln.max
  %23 = kiln.max %22, %c : tensor<2x3xf32>
  // CHECK: kiln.min
  %24 = kiln.min %23, %c : tensor<2x3xf32>
  // CHECK: kiln.rem
  %rem = kiln.rem %24, %c : tensor<2x3xf32>
  // CHECK: kiln.pow
  %25 = kiln.pow %rem, %c : tensor<2x3xf32>
  // CHECK: kiln.compare eq,
  %p0 = kiln.compare eq, %25, %c : tensor<2x3xf32>
  // CHECK: kiln.compare ne,
  %p1 = kiln.compare ne, %25, %c : tensor<2x3xf32>
  // CHECK: kiln.compare lt,
  %p2 = kiln.compare lt, %25, %c : tensor<2x3xf32>
  // CHECK: kiln.compare le,
  %p3 = kiln.compare le, %25, %c : tensor<2x3xf32>
  // CHECK: kiln.compare gt,
  %p4 = kiln.compare gt, %25, %c : tensor<2x3xf32>
  // CHECK: %[[P:.+]] = kiln.compare ge, %{{.+}}, %{{.+}} : tensor<2x3xi32>
  %p5 = kiln.compare ge, %i, %io : tensor<2x3xi32>
  // CHECK: %[[SEL:.+]] = kiln.select %[[P]], %{{.+}}, %{{.+}} : tensor<2x3xi1>, tensor<2x3xi32>
  %s = kiln.select %p5, %i, %ci : tensor<2x3xi1>, tensor<2x3xi32>
  // CHECK: return %[[SUM]], %[[SEL]], %[[X]] : tensor<2x3xf32>, tensor<2x3xi32>, tensor<2x3xf32>
  return %19, %s, %x : tensor<2x3xf32>, tensor<2x3xi32>, tensor<2x3xf32>
}
