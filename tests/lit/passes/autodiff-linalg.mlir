// RUN: kiln-opt %s -split-input-file -verify-diagnostics -kiln-autodiff -canonicalize -cse | FileCheck %s
//
// kiln-autodiff on contractions, convolutions and pools
// (ir/gradients/Linalg.cpp), including the gradients of the gradient ops
// (second order). %G is the incoming gradient, a broadcast of the seed 1.0.

// A matmul: dx = g w^T and dw = x^T g, both without a transpose.
// CHECK-LABEL: func.func @matmul
// CHECK: %[[G:.*]] = kiln.broadcast_in_dim %{{.*}}, dims = [] : tensor<f32> -> tensor<4x3xf32>
// CHECK: %[[DX:.*]] = kiln.dot_general %[[G]], %arg1, batch = [] x [], contract = [1] x [1] : (tensor<4x3xf32>, tensor<8x3xf32>) -> tensor<4x8xf32>
// CHECK: %[[DW:.*]] = kiln.dot_general %arg0, %[[G]], batch = [] x [], contract = [0] x [0] : (tensor<4x8xf32>, tensor<4x3xf32>) -> tensor<8x3xf32>
// CHECK-NOT: kiln.transpose
// CHECK: return %{{.*}}, %[[DX]], %[[DW]]
func.func @matmul(%x: tensor<4x8xf32> {kiln.role = #kiln.role<parameter>}, %w: tensor<8x3xf32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %y = kiln.dot_general %x, %w, batch = [] x [], contract = [1] x [0] : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
  %l = kiln.reduce sum %y, dims = [0, 1] : tensor<4x3xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A batched dot_general with the rhs batch dimension last: the lhs gradient
// comes out in layout; the rhs one needs a transpose.
// CHECK-LABEL: func.func @batched
// CHECK: %[[G:.*]] = kiln.broadcast_in_dim %{{.*}}, dims = [] : tensor<f32> -> tensor<2x4x3xf32>
// CHECK: %[[DA:.*]] = kiln.dot_general %arg1, %[[G]], batch = [2] x [0], contract = [0] x [2] : (tensor<3x5x2xf32>, tensor<2x4x3xf32>) -> tensor<2x5x4xf32>
// CHECK: %[[P:.*]] = kiln.dot_general %[[G]], %arg0, batch = [0] x [0], contract = [1] x [2] : (tensor<2x4x3xf32>, tensor<2x5x4xf32>) -> tensor<2x3x5xf32>
// CHECK: %[[DB:.*]] = kiln.transpose %[[P]], permutation = [1, 2, 0] : tensor<2x3x5xf32> -> tensor<3x5x2xf32>
// CHECK: return %{{.*}}, %[[DA]], %[[DB]]
func.func @batched(%a: tensor<2x5x4xf32> {kiln.role = #kiln.role<parameter>}, %b: tensor<3x5x2xf32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %y = kiln.dot_general %a, %b, batch = [0] x [2], contract = [1] x [1] : (tensor<2x5x4xf32>, tensor<3x5x2xf32>) -> tensor<2x4x3xf32>
  %l = kiln.reduce sum %y, dims = [0, 1, 2] : tensor<2x4x3xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// conv2d: the input and filter gradients are the dedicated gradient ops with
// the forward attributes.
// CHECK-LABEL: func.func @conv2d
// CHECK: %[[G:.*]] = kiln.broadcast_in_dim %{{.*}}, dims = [] : tensor<f32> -> tensor<2x6x4x4xf32>
// CHECK: %[[DX:.*]] = kiln.conv2d_input_grad %[[G]], %arg1, strides = [2, 2], padding = [1, 1, 1, 1], dilation = [1, 1], groups = 2 : (tensor<2x6x4x4xf32>, tensor<6x2x3x3xf32>) -> tensor<2x4x8x8xf32>
// CHECK: %[[DK:.*]] = kiln.conv2d_filter_grad %arg0, %[[G]], strides = [2, 2], padding = [1, 1, 1, 1], dilation = [1, 1], groups = 2 : (tensor<2x4x8x8xf32>, tensor<2x6x4x4xf32>) -> tensor<6x2x3x3xf32>
// CHECK: return %{{.*}}, %[[DX]], %[[DK]]
func.func @conv2d(%x: tensor<2x4x8x8xf32> {kiln.role = #kiln.role<parameter>}, %k: tensor<6x2x3x3xf32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %y = kiln.conv2d %x, %k, strides = [2, 2], padding = [1, 1, 1, 1], dilation = [1, 1], groups = 2 : (tensor<2x4x8x8xf32>, tensor<6x2x3x3xf32>) -> tensor<2x6x4x4xf32>
  %l = kiln.reduce sum %y, dims = [0, 1, 2, 3] : tensor<2x6x4x4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Second order, conv2d_input_grad(dy, k) is linear in both: d dy = conv2d(G, k)
// and d k = conv2d_filter_grad(G, dy).
// CHECK-LABEL: func.func @conv2d_input_grad
// CHECK: %[[G:.*]] = kiln.broadcast_in_dim %{{.*}}, dims = [] : tensor<f32> -> tensor<2x4x8x8xf32>
// CHECK: %[[DDY:.*]] = kiln.conv2d %[[G]], %arg1, strides = [2, 2], padding = [1, 1, 1, 1], dilation = [1, 1], groups = 2 : (tensor<2x4x8x8xf32>, tensor<6x2x3x3xf32>) -> tensor<2x6x4x4xf32>
// CHECK: %[[DK:.*]] = kiln.conv2d_filter_grad %[[G]], %arg0, strides = [2, 2], padding = [1, 1, 1, 1], dilation = [1, 1], groups = 2 : (tensor<2x4x8x8xf32>, tensor<2x6x4x4xf32>) -> tensor<6x2x3x3xf32>
// CHECK: return %{{.*}}, %[[DDY]], %[[DK]]
func.func @conv2d_input_grad(%dy: tensor<2x6x4x4xf32> {kiln.role = #kiln.role<parameter>}, %k: tensor<6x2x3x3xf32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %y = kiln.conv2d_input_grad %dy, %k, strides = [2, 2], padding = [1, 1, 1, 1], dilation = [1, 1], groups = 2 : (tensor<2x6x4x4xf32>, tensor<6x2x3x3xf32>) -> tensor<2x4x8x8xf32>
  %l = kiln.reduce sum %y, dims = [0, 1, 2, 3] : tensor<2x4x8x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Second order, conv2d_filter_grad(x, dy): d x = conv2d_input_grad(dy, G) and
// d dy = conv2d(x, G).
// CHECK-LABEL: func.func @conv2d_filter_grad
// CHECK: %[[G:.*]] = kiln.broadcast_in_dim %{{.*}}, dims = [] : tensor<f32> -> tensor<6x2x3x3xf32>
// CHECK: %[[DX:.*]] = kiln.conv2d_input_grad %arg1, %[[G]], strides = [2, 2], padding = [1, 1, 1, 1], dilation = [1, 1], groups = 2 : (tensor<2x6x4x4xf32>, tensor<6x2x3x3xf32>) -> tensor<2x4x8x8xf32>
// CHECK: %[[DDY:.*]] = kiln.conv2d %arg0, %[[G]], strides = [2, 2], padding = [1, 1, 1, 1], dilation = [1, 1], groups = 2 : (tensor<2x4x8x8xf32>, tensor<6x2x3x3xf32>) -> tensor<2x6x4x4xf32>
// CHECK: return %{{.*}}, %[[DX]], %[[DDY]]
func.func @conv2d_filter_grad(%x: tensor<2x4x8x8xf32> {kiln.role = #kiln.role<parameter>}, %dy: tensor<2x6x4x4xf32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %y = kiln.conv2d_filter_grad %x, %dy, strides = [2, 2], padding = [1, 1, 1, 1], dilation = [1, 1], groups = 2 : (tensor<2x4x8x8xf32>, tensor<2x6x4x4xf32>) -> tensor<6x2x3x3xf32>
  %l = kiln.reduce sum %y, dims = [0, 1, 2, 3] : tensor<6x2x3x3xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// max_pool2d: kiln.max_pool2d_grad routes g to each window's maximum.
// CHECK-LABEL: func.func @max_pool2d
// CHECK: %[[G:.*]] = kiln.broadcast_in_dim %{{.*}}, dims = [] : tensor<f32> -> tensor<1x2x2x2xf32>
// CHECK: %[[DX:.*]] = kiln.max_pool2d_grad %arg0, %[[G]], window = [2, 2], strides = [2, 2], padding = [0, 0, 0, 0] : tensor<1x2x4x4xf32>, tensor<1x2x2x2xf32>
// CHECK: return %{{.*}}, %[[DX]]
func.func @max_pool2d(%x: tensor<1x2x4x4xf32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %y = kiln.max_pool2d %x, window = [2, 2], strides = [2, 2], padding = [0, 0, 0, 0] : tensor<1x2x4x4xf32> -> tensor<1x2x2x2xf32>
  %l = kiln.reduce sum %y, dims = [0, 1, 2, 3] : tensor<1x2x2x2xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// avg_pool2d: kiln.avg_pool2d_grad spreads g over each window.
// CHECK-LABEL: func.func @avg_pool2d
// CHECK: %[[G:.*]] = kiln.broadcast_in_dim %{{.*}}, dims = [] : tensor<f32> -> tensor<1x2x2x2xf32>
// CHECK: %[[DX:.*]] = kiln.avg_pool2d_grad %[[G]], window = [2, 2], strides = [2, 2], padding = [0, 0, 0, 0] : tensor<1x2x2x2xf32> -> tensor<1x2x4x4xf32>
// CHECK: return %{{.*}}, %[[DX]]
func.func @avg_pool2d(%x: tensor<1x2x4x4xf32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %y = kiln.avg_pool2d %x, window = [2, 2], strides = [2, 2], padding = [0, 0, 0, 0] : tensor<1x2x4x4xf32> -> tensor<1x2x2x2xf32>
  %l = kiln.reduce sum %y, dims = [0, 1, 2, 3] : tensor<1x2x2x2xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Second order, avg_pool2d_grad is linear; its adjoint is avg_pool2d.
// CHECK-LABEL: func.func @avg_pool2d_grad
// CHECK: %[[G:.*]] = kiln.broadcast_in_dim %{{.*}}, dims = [] : tensor<f32> -> tensor<1x2x4x4xf32>
// CHECK: %[[DDY:.*]] = kiln.avg_pool2d %[[G]], window = [2, 2], strides = [2, 2], padding = [0, 0, 0, 0] : tensor<1x2x4x4xf32> -> tensor<1x2x2x2xf32>
// CHECK: return %{{.*}}, %[[DDY]]
func.func @avg_pool2d_grad(%dy: tensor<1x2x2x2xf32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %y = kiln.avg_pool2d_grad %dy, window = [2, 2], strides = [2, 2], padding = [0, 0, 0, 0] : tensor<1x2x2x2xf32> -> tensor<1x2x4x4xf32>
  %l = kiln.reduce sum %y, dims = [0, 1, 2, 3] : tensor<1x2x4x4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Second order, max_pool2d_grad: dy gets G at each window's first maximum,
// found offset by offset (here two: (0, 0) and (0, 1)) with strided slices;
// x gets none (the routing is piecewise constant).
// CHECK-LABEL: func.func @max_pool2d_grad
// CHECK-DAG: %[[ZX:.*]] = kiln.constant dense<0.000000e+00> : tensor<1x1x3x3xf32>
// CHECK-DAG: %[[FALSE:.*]] = kiln.constant dense<false> : tensor<1x1x2x2xi1>
// CHECK-DAG: %[[ZERO:.*]] = kiln.constant dense<0.000000e+00> : tensor<1x1x2x2xf32>
// CHECK: %[[G:.*]] = kiln.broadcast_in_dim %{{.*}}, dims = [] : tensor<f32> -> tensor<1x1x3x3xf32>
// CHECK: %[[MAX:.*]] = kiln.max_pool2d %arg0, window = [1, 2], strides = [2, 1], padding = [0, 0, 0, 0]
// CHECK: %[[X0:.*]] = kiln.slice %arg0, start = [0, 0, 0, 0], limit = [1, 1, 3, 2], strides = [1, 1, 2, 1]
// CHECK: %[[G0:.*]] = kiln.slice %[[G]], start = [0, 0, 0, 0], limit = [1, 1, 3, 2], strides = [1, 1, 2, 1]
// CHECK: %[[HIT0:.*]] = kiln.compare eq, %[[X0]], %[[MAX]]
// CHECK: %[[S0:.*]] = kiln.select %[[HIT0]], %[[G0]], %[[ZERO]]
// CHECK: %[[X1:.*]] = kiln.slice %arg0, start = [0, 0, 0, 1], limit = [1, 1, 3, 3], strides = [1, 1, 2, 1]
// CHECK: %[[G1:.*]] = kiln.slice %[[G]], start = [0, 0, 0, 1], limit = [1, 1, 3, 3], strides = [1, 1, 2, 1]
// CHECK: %[[HIT1:.*]] = kiln.compare eq, %[[X1]], %[[MAX]]
// CHECK: %[[FIRST1:.*]] = kiln.select %[[HIT0]], %[[FALSE]], %[[HIT1]]
// CHECK: %[[S1:.*]] = kiln.select %[[FIRST1]], %[[G1]], %[[ZERO]]
// CHECK: %[[DDY:.*]] = kiln.add %[[S0]], %[[S1]]
// CHECK: return %{{.*}}, %[[ZX]], %[[DDY]]
// expected-warning@+1 {{parameter argument 0 of @max_pool2d_grad receives no gradient from the loss; its gradient is zero}}
func.func @max_pool2d_grad(%x: tensor<1x1x3x3xf32> {kiln.role = #kiln.role<parameter>}, %dy: tensor<1x1x2x2xf32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %y = kiln.max_pool2d_grad %x, %dy, window = [1, 2], strides = [2, 1], padding = [0, 0, 0, 0] : tensor<1x1x3x3xf32>, tensor<1x1x2x2xf32>
  %l = kiln.reduce sum %y, dims = [0, 1, 2, 3] : tensor<1x1x3x3xf32> -> tensor<f32>
  return %l : tensor<f32>
}
