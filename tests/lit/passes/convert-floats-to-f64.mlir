// RUN: kiln-opt %s --kiln-convert-floats-to-f64 | FileCheck %s

// Every float tensor becomes f64 (arguments, results, ops, constants,
// fusion bodies); integer and i1 tensors stay as they are.
// CHECK-LABEL: func.func @mixed
// CHECK-SAME: (%[[X:.*]]: tensor<4xf64>, %[[H:.*]]: tensor<4xf64>, %[[I:.*]]: tensor<4xi32>) -> (tensor<4xf64>, tensor<4xi1>)
// CHECK: kiln.constant dense<1.500000e+00> : tensor<4xf64>
// CHECK: kiln.convert %[[H]] : tensor<4xf64> -> tensor<4xf64>
// CHECK: kiln.convert %[[I]] : tensor<4xi32> -> tensor<4xf64>
// CHECK: kiln.compare lt, {{.*}} : tensor<4xf64>
// CHECK: kiln.fusion loop({{.*}}) : (tensor<4xf64>) -> tensor<4xf64>
// CHECK: ^bb0(%{{.*}}: tensor<4xf64>):
func.func @mixed(%x: tensor<4xf32>, %h: tensor<4xbf16>, %i: tensor<4xi32>) -> (tensor<4xf32>, tensor<4xi1>) {
  %c = kiln.constant dense<1.5> : tensor<4xf32>
  %hx = kiln.convert %h : tensor<4xbf16> -> tensor<4xf32>
  %ix = kiln.convert %i : tensor<4xi32> -> tensor<4xf32>
  %s = kiln.add %x, %c : tensor<4xf32>
  %t = kiln.add %s, %hx : tensor<4xf32>
  %u = kiln.add %t, %ix : tensor<4xf32>
  %p = kiln.compare lt, %u, %c : tensor<4xf32>
  %f = kiln.fusion loop (%u) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    %r = kiln.relu %a : tensor<4xf32>
    kiln.yield %r : tensor<4xf32>
  }
  return %f, %p : tensor<4xf32>, tensor<4xi1>
}

// A splat stays a splat, whatever its size (spelled out, this one would be
// 2^40 doubles: `kiln gradcheck` of a compiled large model stopped with
// "LLVM ERROR: out of memory" here); a bf16 value widens exactly, and a
// constant that is not a splat keeps its values.
// CHECK-LABEL: func.func @splats
// CHECK: kiln.constant dense<0.000000e+00> : tensor<1048576x1048576xf64>
// CHECK: kiln.constant dense<1.015625> : tensor<8xf64>
// CHECK: kiln.constant dense<[1.000000e+00, 2.500000e+00]> : tensor<2xf64>
func.func @splats() -> (tensor<1048576x1048576xf32>, tensor<8xbf16>, tensor<2xf16>) {
  %z = kiln.constant dense<0.0> : tensor<1048576x1048576xf32>
  %b = kiln.constant dense<1.015625> : tensor<8xbf16>
  %h = kiln.constant dense<[1.0, 2.5]> : tensor<2xf16>
  return %z, %b, %h : tensor<1048576x1048576xf32>, tensor<8xbf16>, tensor<2xf16>
}
