// RUN: kiln-opt %s | kiln-opt | FileCheck %s
// RUN: kiln-opt %s -mlir-print-op-generic | kiln-opt | FileCheck %s
//
// Parse/print round trip of every op in ir/KilnOps.td, with every form of its
// attributes, and of the role, initializer, name and training attributes.
// The second RUN line goes through the generic form, so the custom parsers
// and printers are checked against the generic ones. One function per
// family; each opens with a comment saying what it covers.

// The module-level training section, with every field set away from its
// default, so none is elided. Doubles print exactly: 0.99 and 1e-6 come back
// in their long forms, which read back to the same bits.
// CHECK: module attributes {kiln.training = #kiln.training<optimizer = adamw, learning_rate = 3.000000e-04, momentum = 5.000000e-01, nesterov = true, beta1 = 8.000000e-01, beta2 = 0.98999999999999999, epsilon = 9.9999999999999995E-7, weight_decay = 1.000000e-02, clip_norm = 1.000000e+00, schedule = warmup_cosine, warmup_steps = 100, total_steps = 1000>}
module attributes {kiln.training = #kiln.training<optimizer = adamw, learning_rate = 3.0e-4, momentum = 0.5, nesterov = true, beta1 = 0.8, beta2 = 0.99, epsilon = 1.0e-6, weight_decay = 0.01, clip_norm = 1.0, schedule = warmup_cosine, warmup_steps = 100, total_steps = 1000>} {

// Every role on arguments and results, every initializer kind (with value,
// scale and seed where they matter), and kiln.name.
// CHECK-LABEL: func.func @roles
// CHECK-SAME: %arg0: tensor<4x8xf32> {kiln.name = "x", kiln.role = #kiln.role<input>}
// CHECK-SAME: %arg1: tensor<4xi32> {kiln.role = #kiln.role<label>}
// CHECK-SAME: %arg2: tensor<8xf32> {kiln.init = #kiln.init<kind = zeros>, kiln.name = "fc.bias", kiln.role = #kiln.role<parameter>}
// CHECK-SAME: %arg3: tensor<8xf32> {kiln.init = #kiln.init<kind = ones>, kiln.role = #kiln.role<parameter>}
// CHECK-SAME: %arg4: tensor<8xf32> {kiln.init = #kiln.init<kind = constant, value = 2.500000e-01>, kiln.role = #kiln.role<parameter>}
// CHECK-SAME: %arg5: tensor<8x8xf32> {kiln.init = #kiln.init<kind = normal, value = 1.000000e-01, scale = 2.000000e-02, seed = 11>, kiln.role = #kiln.role<parameter>}
// CHECK-SAME: %arg6: tensor<8x8xf32> {kiln.init = #kiln.init<kind = uniform, scale = 5.000000e-02, seed = 12>, kiln.role = #kiln.role<parameter>}
// CHECK-SAME: %arg7: tensor<8x8xf32> {kiln.init = #kiln.init<kind = glorot_uniform, seed = 3>, kiln.name = "fc.weight", kiln.role = #kiln.role<parameter>}
// CHECK-SAME: %arg8: tensor<8x8xf32> {kiln.init = #kiln.init<kind = kaiming_normal, scale = 1.414000e+00, seed = 4>, kiln.role = #kiln.role<parameter>}
// CHECK-SAME: %arg9: tensor<8x8xf32> {kiln.init = #kiln.init<kind = zeros>, kiln.role = #kiln.role<optimizer_state>}
// CHECK-SAME: %arg10: tensor<i64> {kiln.role = #kiln.role<step>}
// CHECK-SAME: -> (tensor<f32> {kiln.role = #kiln.role<loss>}, tensor<4x8xf32> {kiln.role = #kiln.role<output>}, tensor<8x8xf32> {kiln.role = #kiln.role<gradient>})
func.func @roles(
    %x: tensor<4x8xf32> {kiln.role = #kiln.role<input>, kiln.name = "x"},
    %y: tensor<4xi32> {kiln.role = #kiln.role<label>},
    %b: tensor<8xf32> {kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = zeros>, kiln.name = "fc.bias"},
    %p1: tensor<8xf32> {kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = ones>},
    %p2: tensor<8xf32> {kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = constant, value = 0.25>},
    %p3: tensor<8x8xf32> {kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = normal, value = 0.1, scale = 0.02, seed = 11>},
    %p4: tensor<8x8xf32> {kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = uniform, scale = 0.05, seed = 12>},
    %w: tensor<8x8xf32> {kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = glorot_uniform, seed = 3>, kiln.name = "fc.weight"},
    %p5: tensor<8x8xf32> {kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = kaiming_normal, scale = 1.414, seed = 4>},
    %m: tensor<8x8xf32> {kiln.role = #kiln.role<optimizer_state>, kiln.init = #kiln.init<kind = zeros>},
    %step: tensor<i64> {kiln.role = #kiln.role<step>})
    -> (tensor<f32> {kiln.role = #kiln.role<loss>},
        tensor<4x8xf32> {kiln.role = #kiln.role<output>},
        tensor<8x8xf32> {kiln.role = #kiln.role<gradient>}) {
  %l = kiln.constant dense<0.0> : tensor<f32>
  return %l, %x, %w : tensor<f32>, tensor<4x8xf32>, tensor<8x8xf32>
}

// kiln.constant (float, integer, boolean, scalar) and kiln.iota.
// CHECK-LABEL: func.func @generators
func.func @generators() -> (tensor<2xf32>, tensor<2x2xi64>, tensor<3xi1>, tensor<bf16>, tensor<2x3xi32>) {
  // CHECK: kiln.constant dense<[1.000000e+00, 2.000000e+00]> : tensor<2xf32>
  %0 = kiln.constant dense<[1.0, 2.0]> : tensor<2xf32>
  // CHECK: kiln.constant dense<{{\[\[}}1, 2], [3, 4]]> : tensor<2x2xi64>
  %1 = kiln.constant dense<[[1, 2], [3, 4]]> : tensor<2x2xi64>
  // CHECK: kiln.constant dense<[true, false, true]> : tensor<3xi1>
  %2 = kiln.constant dense<[true, false, true]> : tensor<3xi1>
  // CHECK: kiln.constant dense<5.000000e-01> : tensor<bf16>
  %3 = kiln.constant dense<0.5> : tensor<bf16>
  // CHECK: kiln.iota dim = 1 : tensor<2x3xi32>
  %4 = kiln.iota dim = 1 : tensor<2x3xi32>
  return %0, %1, %2, %3, %4 : tensor<2xf32>, tensor<2x2xi64>, tensor<3xi1>, tensor<bf16>, tensor<2x3xi32>
}

// Every elementwise unary op, gelu and gelu_grad in both forms, and stop_gradient.
// CHECK-LABEL: func.func @unary
func.func @unary(%x: tensor<4xf32>, %i: tensor<4xi32>, %h: tensor<2x2xf16>) {
  // CHECK: kiln.neg %{{.*}} : tensor<4xf32>
  %0 = kiln.neg %x : tensor<4xf32>
  // CHECK: kiln.neg %{{.*}} : tensor<4xi32>
  %1 = kiln.neg %i : tensor<4xi32>
  // CHECK: kiln.abs %{{.*}} : tensor<4xi32>
  %2 = kiln.abs %i : tensor<4xi32>
  // CHECK: kiln.exp %{{.*}} : tensor<4xf32>
  %3 = kiln.exp %x : tensor<4xf32>
  // CHECK: kiln.log %{{.*}} : tensor<4xf32>
  %4 = kiln.log %x : tensor<4xf32>
  // CHECK: kiln.log1p %{{.*}} : tensor<4xf32>
  %5 = kiln.log1p %x : tensor<4xf32>
  // CHECK: kiln.sqrt %{{.*}} : tensor<4xf32>
  %6 = kiln.sqrt %x : tensor<4xf32>
  // CHECK: kiln.rsqrt %{{.*}} : tensor<2x2xf16>
  %7 = kiln.rsqrt %h : tensor<2x2xf16>
  // CHECK: kiln.tanh %{{.*}} : tensor<4xf32>
  %8 = kiln.tanh %x : tensor<4xf32>
  // CHECK: kiln.sigmoid %{{.*}} : tensor<4xf32>
  %9 = kiln.sigmoid %x : tensor<4xf32>
  // CHECK: kiln.relu %{{.*}} : tensor<4xi32>
  %10 = kiln.relu %i : tensor<4xi32>
  // CHECK: kiln.erf %{{.*}} : tensor<4xf32>
  %11 = kiln.erf %x : tensor<4xf32>
  // CHECK: kiln.sin %{{.*}} : tensor<4xf32>
  %12 = kiln.sin %x : tensor<4xf32>
  // CHECK: kiln.cos %{{.*}} : tensor<4xf32>
  %13 = kiln.cos %x : tensor<4xf32>
  // CHECK: kiln.reciprocal %{{.*}} : tensor<4xf32>
  %14 = kiln.reciprocal %x : tensor<4xf32>
  // CHECK: kiln.floor %{{.*}} : tensor<4xf32>
  %floor = kiln.floor %x : tensor<4xf32>
  // CHECK: kiln.ceil %{{.*}} : tensor<4xf32>
  %ceil = kiln.ceil %x : tensor<4xf32>
  // CHECK: kiln.round %{{.*}} : tensor<4xf32>
  %round = kiln.round %x : tensor<4xf32>
  // CHECK: kiln.atan %{{.*}} : tensor<4xf32>
  %atan = kiln.atan %x : tensor<4xf32>
  // CHECK: kiln.gelu erf, %{{.*}} : tensor<4xf32>
  %15 = kiln.gelu erf, %x : tensor<4xf32>
  // CHECK: kiln.gelu tanh, %{{.*}} : tensor<2x2xf16>
  %16 = kiln.gelu tanh, %h : tensor<2x2xf16>
  // CHECK: kiln.stop_gradient %{{.*}} : tensor<4xi32>
  %17 = kiln.stop_gradient %i : tensor<4xi32>
  // CHECK: kiln.gelu_grad tanh, %{{.*}}, %{{.*}} : tensor<2x2xf16>
  %18 = kiln.gelu_grad tanh, %h, %16 : tensor<2x2xf16>
  // CHECK: kiln.gelu_grad erf, %{{.*}}, %{{.*}} : tensor<4xf32>
  %19 = kiln.gelu_grad erf, %x, %15 : tensor<4xf32>
  return
}

// kiln.convert between float widths, float and integer, and to i1.
// CHECK-LABEL: func.func @convert
func.func @convert(%x: tensor<4xf32>, %i: tensor<4xi8>) {
  // CHECK: kiln.convert %{{.*}} : tensor<4xf32> -> tensor<4xbf16>
  %0 = kiln.convert %x : tensor<4xf32> -> tensor<4xbf16>
  // CHECK: kiln.convert %{{.*}} : tensor<4xf32> -> tensor<4xi64>
  %1 = kiln.convert %x : tensor<4xf32> -> tensor<4xi64>
  // CHECK: kiln.convert %{{.*}} : tensor<4xi8> -> tensor<4xf64>
  %2 = kiln.convert %i : tensor<4xi8> -> tensor<4xf64>
  // CHECK: kiln.convert %{{.*}} : tensor<4xi8> -> tensor<4xi1>
  %3 = kiln.convert %i : tensor<4xi8> -> tensor<4xi1>
  return
}

// Every elementwise binary op.
// CHECK-LABEL: func.func @binary
func.func @binary(%a: tensor<2x3xf32>, %b: tensor<2x3xf32>, %i: tensor<5xi64>, %j: tensor<5xi64>) {
  // CHECK: kiln.add %{{.*}}, %{{.*}} : tensor<2x3xf32>
  %0 = kiln.add %a, %b : tensor<2x3xf32>
  // CHECK: kiln.sub %{{.*}}, %{{.*}} : tensor<2x3xf32>
  %1 = kiln.sub %a, %b : tensor<2x3xf32>
  // CHECK: kiln.mul %{{.*}}, %{{.*}} : tensor<5xi64>
  %2 = kiln.mul %i, %j : tensor<5xi64>
  // CHECK: kiln.div %{{.*}}, %{{.*}} : tensor<5xi64>
  %3 = kiln.div %i, %j : tensor<5xi64>
  // CHECK: kiln.max %{{.*}}, %{{.*}} : tensor<2x3xf32>
  %4 = kiln.max %a, %b : tensor<2x3xf32>
  // CHECK: kiln.min %{{.*}}, %{{.*}} : tensor<2x3xf32>
  %5 = kiln.min %a, %b : tensor<2x3xf32>
  // CHECK: kiln.pow %{{.*}}, %{{.*}} : tensor<2x3xf32>
  %6 = kiln.pow %a, %b : tensor<2x3xf32>
  // CHECK: kiln.rem %{{.*}}, %{{.*}} : tensor<2x3xf32>
  %rem = kiln.rem %a, %b : tensor<2x3xf32>
  // CHECK: kiln.rem %{{.*}}, %{{.*}} : tensor<5xi64>
  %remi = kiln.rem %i, %j : tensor<5xi64>
  return
}

// kiln.compare in every direction (its i1 result type is inferred), and
// kiln.select.
// CHECK-LABEL: func.func @compare_select
func.func @compare_select(%a: tensor<4xf32>, %b: tensor<4xf32>, %i: tensor<4xi32>) -> tensor<4xf32> {
  // CHECK: kiln.compare eq, %{{.*}}, %{{.*}} : tensor<4xf32>
  %0 = kiln.compare eq, %a, %b : tensor<4xf32>
  // CHECK: kiln.compare ne, %{{.*}}, %{{.*}} : tensor<4xf32>
  %1 = kiln.compare ne, %a, %b : tensor<4xf32>
  // CHECK: kiln.compare lt, %{{.*}}, %{{.*}} : tensor<4xf32>
  %2 = kiln.compare lt, %a, %b : tensor<4xf32>
  // CHECK: kiln.compare le, %{{.*}}, %{{.*}} : tensor<4xi32>
  %3 = kiln.compare le, %i, %i : tensor<4xi32>
  // CHECK: kiln.compare gt, %{{.*}}, %{{.*}} : tensor<4xf32>
  %4 = kiln.compare gt, %a, %b : tensor<4xf32>
  // CHECK: %[[P:.*]] = kiln.compare ge, %{{.*}}, %{{.*}} : tensor<4xf32>
  %5 = kiln.compare ge, %a, %b : tensor<4xf32>
  // CHECK: kiln.select %[[P]], %{{.*}}, %{{.*}} : tensor<4xi1>, tensor<4xf32>
  %6 = kiln.select %5, %a, %b : tensor<4xi1>, tensor<4xf32>
  return %6 : tensor<4xf32>
}

// Shape manipulation: broadcast_in_dim, reshape, transpose, slice (unit and
// larger strides) and pad (kiln.concatenate has its own file,
// concatenate.mlir).
// CHECK-LABEL: func.func @shapes
func.func @shapes(%v: tensor<10xf32>, %x: tensor<2x3xf32>, %y: tensor<2x4xf32>, %z: tensor<1x3xf32>) {
  // CHECK: kiln.broadcast_in_dim %{{.*}}, dims = [1] : tensor<10xf32> -> tensor<32x10xf32>
  %0 = kiln.broadcast_in_dim %v, dims = [1] : tensor<10xf32> -> tensor<32x10xf32>
  // CHECK: kiln.broadcast_in_dim %{{.*}}, dims = [0, 2] : tensor<1x3xf32> -> tensor<4x5x3xf32>
  %1 = kiln.broadcast_in_dim %z, dims = [0, 2] : tensor<1x3xf32> -> tensor<4x5x3xf32>
  // CHECK: kiln.reshape %{{.*}} : tensor<2x3xf32> -> tensor<6xf32>
  %2 = kiln.reshape %x : tensor<2x3xf32> -> tensor<6xf32>
  // CHECK: kiln.transpose %{{.*}}, permutation = [1, 0] : tensor<2x3xf32> -> tensor<3x2xf32>
  %3 = kiln.transpose %x, permutation = [1, 0] : tensor<2x3xf32> -> tensor<3x2xf32>
  // CHECK: kiln.slice %{{.*}}, start = [0, 1], limit = [2, 3], strides = [1, 1] : tensor<2x4xf32> -> tensor<2x2xf32>
  %4 = kiln.slice %y, start = [0, 1], limit = [2, 3], strides = [1, 1] : tensor<2x4xf32> -> tensor<2x2xf32>
  // CHECK: kiln.slice %{{.*}}, start = [0, 0], limit = [2, 4], strides = [2, 3] : tensor<2x4xf32> -> tensor<1x2xf32>
  %5 = kiln.slice %y, start = [0, 0], limit = [2, 4], strides = [2, 3] : tensor<2x4xf32> -> tensor<1x2xf32>
  // CHECK: kiln.pad %{{.*}}, low = [0, 1], high = [2, 1], value = -1.500000e+00 : tensor<2x3xf32> -> tensor<4x5xf32>
  %6 = kiln.pad %x, low = [0, 1], high = [2, 1], value = -1.5 : tensor<2x3xf32> -> tensor<4x5xf32>
  return
}

// kiln.reduce with every kind (and an empty list: the identity), argmax
// with both index types.
// CHECK-LABEL: func.func @reductions
func.func @reductions(%x: tensor<4x5xf32>, %i: tensor<4x5xi32>) {
  // CHECK: kiln.reduce sum %{{.*}}, dims = [1] : tensor<4x5xf32> -> tensor<4xf32>
  %0 = kiln.reduce sum %x, dims = [1] : tensor<4x5xf32> -> tensor<4xf32>
  // CHECK: kiln.reduce max %{{.*}}, dims = [0] : tensor<4x5xf32> -> tensor<5xf32>
  %1 = kiln.reduce max %x, dims = [0] : tensor<4x5xf32> -> tensor<5xf32>
  // CHECK: kiln.reduce min %{{.*}}, dims = [0, 1] : tensor<4x5xi32> -> tensor<i32>
  %2 = kiln.reduce min %i, dims = [0, 1] : tensor<4x5xi32> -> tensor<i32>
  // CHECK: kiln.reduce mean %{{.*}}, dims = [1, 0] : tensor<4x5xf32> -> tensor<f32>
  %3 = kiln.reduce mean %x, dims = [1, 0] : tensor<4x5xf32> -> tensor<f32>
  // CHECK: kiln.reduce sum %{{.*}}, dims = [] : tensor<4x5xf32> -> tensor<4x5xf32>
  %4 = kiln.reduce sum %x, dims = [] : tensor<4x5xf32> -> tensor<4x5xf32>
  // CHECK: kiln.reduce prod %{{.*}}, dims = [1] : tensor<4x5xi32> -> tensor<4xi32>
  %7 = kiln.reduce prod %i, dims = [1] : tensor<4x5xi32> -> tensor<4xi32>
  // CHECK: kiln.argmax %{{.*}}, dim = 1 : tensor<4x5xf32> -> tensor<4xi64>
  %5 = kiln.argmax %x, dim = 1 : tensor<4x5xf32> -> tensor<4xi64>
  // CHECK: kiln.argmax %{{.*}}, dim = 0 : tensor<4x5xi32> -> tensor<5xi32>
  %6 = kiln.argmax %i, dim = 0 : tensor<4x5xi32> -> tensor<5xi32>
  return
}

// kiln.dot_general: a plain matmul, a batched matmul, a matrix-vector
// product and a full contraction to a scalar.
// CHECK-LABEL: func.func @dot_general
func.func @dot_general(%a: tensor<4x8xf32>, %b: tensor<8x3xf32>, %c: tensor<2x4x8xbf16>, %d: tensor<2x8x5xbf16>, %v: tensor<8xf32>) {
  // CHECK: kiln.dot_general %{{.*}}, %{{.*}}, batch = [] x [], contract = [1] x [0] : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
  %0 = kiln.dot_general %a, %b, batch = [] x [], contract = [1] x [0] : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
  // CHECK: kiln.dot_general %{{.*}}, %{{.*}}, batch = [0] x [0], contract = [2] x [1] : (tensor<2x4x8xbf16>, tensor<2x8x5xbf16>) -> tensor<2x4x5xbf16>
  %1 = kiln.dot_general %c, %d, batch = [0] x [0], contract = [2] x [1] : (tensor<2x4x8xbf16>, tensor<2x8x5xbf16>) -> tensor<2x4x5xbf16>
  // CHECK: kiln.dot_general %{{.*}}, %{{.*}}, batch = [] x [], contract = [1] x [0] : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4xf32>
  %2 = kiln.dot_general %a, %v, batch = [] x [], contract = [1] x [0] : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4xf32>
  // CHECK: kiln.dot_general %{{.*}}, %{{.*}}, batch = [] x [], contract = [0, 1] x [0, 1] : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<f32>
  %3 = kiln.dot_general %a, %a, batch = [] x [], contract = [0, 1] x [0, 1] : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<f32>
  return
}

// kiln.conv2d (plain, and strided, dilated and grouped) and both of its
// gradients.
// CHECK-LABEL: func.func @conv
func.func @conv(%x: tensor<8x1x28x28xf32>, %w: tensor<6x1x5x5xf32>, %dy: tensor<8x6x28x28xf32>,
                %x4: tensor<2x4x9x9xf32>, %w2: tensor<6x2x3x3xf32>) {
  // CHECK: kiln.conv2d %{{.*}}, %{{.*}}, strides = [1, 1], padding = [2, 2, 2, 2], dilation = [1, 1], groups = 1 : (tensor<8x1x28x28xf32>, tensor<6x1x5x5xf32>) -> tensor<8x6x28x28xf32>
  %0 = kiln.conv2d %x, %w, strides = [1, 1], padding = [2, 2, 2, 2], dilation = [1, 1], groups = 1
         : (tensor<8x1x28x28xf32>, tensor<6x1x5x5xf32>) -> tensor<8x6x28x28xf32>
  // (9 + 1 + 0 - 2 * 2 - 1) / 2 + 1 = 3 rows, (9 + 0 + 1 - 5) / 2 + 1 = 3 columns.
  // CHECK: kiln.conv2d %{{.*}}, %{{.*}}, strides = [2, 2], padding = [1, 0, 0, 1], dilation = [2, 2], groups = 2 : (tensor<2x4x9x9xf32>, tensor<6x2x3x3xf32>) -> tensor<2x6x3x3xf32>
  %1 = kiln.conv2d %x4, %w2, strides = [2, 2], padding = [1, 0, 0, 1], dilation = [2, 2], groups = 2
         : (tensor<2x4x9x9xf32>, tensor<6x2x3x3xf32>) -> tensor<2x6x3x3xf32>
  // CHECK: kiln.conv2d_input_grad %{{.*}}, %{{.*}}, strides = [1, 1], padding = [2, 2, 2, 2], dilation = [1, 1], groups = 1 : (tensor<8x6x28x28xf32>, tensor<6x1x5x5xf32>) -> tensor<8x1x28x28xf32>
  %2 = kiln.conv2d_input_grad %dy, %w, strides = [1, 1], padding = [2, 2, 2, 2], dilation = [1, 1], groups = 1
         : (tensor<8x6x28x28xf32>, tensor<6x1x5x5xf32>) -> tensor<8x1x28x28xf32>
  // CHECK: kiln.conv2d_filter_grad %{{.*}}, %{{.*}}, strides = [1, 1], padding = [2, 2, 2, 2], dilation = [1, 1], groups = 1 : (tensor<8x1x28x28xf32>, tensor<8x6x28x28xf32>) -> tensor<6x1x5x5xf32>
  %3 = kiln.conv2d_filter_grad %x, %dy, strides = [1, 1], padding = [2, 2, 2, 2], dilation = [1, 1], groups = 1
         : (tensor<8x1x28x28xf32>, tensor<8x6x28x28xf32>) -> tensor<6x1x5x5xf32>
  return
}

// Both poolings (with and without padding) and their gradients.
// CHECK-LABEL: func.func @pool
func.func @pool(%x: tensor<8x6x28x28xf32>, %dy: tensor<8x6x14x14xf32>, %z: tensor<1x2x5x5xf16>) {
  // CHECK: kiln.max_pool2d %{{.*}}, window = [2, 2], strides = [2, 2], padding = [0, 0, 0, 0] : tensor<8x6x28x28xf32> -> tensor<8x6x14x14xf32>
  %0 = kiln.max_pool2d %x, window = [2, 2], strides = [2, 2], padding = [0, 0, 0, 0] : tensor<8x6x28x28xf32> -> tensor<8x6x14x14xf32>
  // (5 + 1 + 1 - 3) / 2 + 1 = 3 in both directions.
  // CHECK: kiln.max_pool2d %{{.*}}, window = [3, 3], strides = [2, 2], padding = [1, 1, 1, 1] : tensor<1x2x5x5xf16> -> tensor<1x2x3x3xf16>
  %1 = kiln.max_pool2d %z, window = [3, 3], strides = [2, 2], padding = [1, 1, 1, 1] : tensor<1x2x5x5xf16> -> tensor<1x2x3x3xf16>
  // CHECK: kiln.avg_pool2d %{{.*}}, window = [2, 2], strides = [2, 2], padding = [0, 0, 0, 0] : tensor<8x6x28x28xf32> -> tensor<8x6x14x14xf32>
  %2 = kiln.avg_pool2d %x, window = [2, 2], strides = [2, 2], padding = [0, 0, 0, 0] : tensor<8x6x28x28xf32> -> tensor<8x6x14x14xf32>
  // CHECK: kiln.max_pool2d_grad %{{.*}}, %{{.*}}, window = [2, 2], strides = [2, 2], padding = [0, 0, 0, 0] : tensor<8x6x28x28xf32>, tensor<8x6x14x14xf32>
  %3 = kiln.max_pool2d_grad %x, %dy, window = [2, 2], strides = [2, 2], padding = [0, 0, 0, 0] : tensor<8x6x28x28xf32>, tensor<8x6x14x14xf32>
  // CHECK: kiln.avg_pool2d_grad %{{.*}}, window = [2, 2], strides = [2, 2], padding = [0, 0, 0, 0] : tensor<8x6x14x14xf32> -> tensor<8x6x28x28xf32>
  %4 = kiln.avg_pool2d_grad %dy, window = [2, 2], strides = [2, 2], padding = [0, 0, 0, 0] : tensor<8x6x14x14xf32> -> tensor<8x6x28x28xf32>
  return
}

// The neural-network composites: softmax, log_softmax, layer_norm, gather,
// scatter_add, dropout, random_uniform and softmax_cross_entropy.
// CHECK-LABEL: func.func @composites
func.func @composites(%logits: tensor<32x10xf32>, %labels: tensor<32xi32>, %h: tensor<4x16x64xf32>,
                      %g: tensor<64xf32>, %b: tensor<64xf32>, %table: tensor<1000x64xf32>,
                      %tokens: tensor<4x16xi64>, %step: tensor<i64>) {
  // CHECK: kiln.softmax %{{.*}}, dim = 1 : tensor<32x10xf32>
  %0 = kiln.softmax %logits, dim = 1 : tensor<32x10xf32>
  // CHECK: kiln.log_softmax %{{.*}}, dim = 0 : tensor<32x10xf32>
  %1 = kiln.log_softmax %logits, dim = 0 : tensor<32x10xf32>
  // CHECK: kiln.layer_norm %{{.*}}, %{{.*}}, %{{.*}}, axis = 2, epsilon = 1.000000e-05 : tensor<4x16x64xf32>, tensor<64xf32>
  %2 = kiln.layer_norm %h, %g, %b, axis = 2, epsilon = 1.0e-05 : tensor<4x16x64xf32>, tensor<64xf32>
  // CHECK: %[[E:.*]] = kiln.gather %{{.*}}, %[[TOK:.*]] : (tensor<1000x64xf32>, tensor<4x16xi64>) -> tensor<4x16x64xf32>
  %3 = kiln.gather %table, %tokens : (tensor<1000x64xf32>, tensor<4x16xi64>) -> tensor<4x16x64xf32>
  // CHECK: kiln.scatter_add %{{.*}}, %[[TOK]], %[[E]] : (tensor<1000x64xf32>, tensor<4x16xi64>, tensor<4x16x64xf32>) -> tensor<1000x64xf32>
  %4 = kiln.scatter_add %table, %tokens, %3 : (tensor<1000x64xf32>, tensor<4x16xi64>, tensor<4x16x64xf32>) -> tensor<1000x64xf32>
  // CHECK: kiln.dropout %{{.*}}, %{{.*}}, rate = 1.000000e-01, seed = 7 : tensor<32x10xf32>
  %5 = kiln.dropout %logits, %step, rate = 0.1, seed = 7 : tensor<32x10xf32>
  // CHECK: kiln.random_uniform %{{.*}}, seed = -2 : tensor<4x16xf16>
  %u = kiln.random_uniform %step, seed = -2 : tensor<4x16xf16>
  // CHECK: kiln.softmax_cross_entropy %{{.*}}, %{{.*}} : (tensor<32x10xf32>, tensor<32xi32>) -> tensor<32xf32>
  %6 = kiln.softmax_cross_entropy %logits, %labels : (tensor<32x10xf32>, tensor<32xi32>) -> tensor<32xf32>
  return
}

// Attention and its gradient: causal and not, Tq != Tk and Dv != D, bf16
// operands with an f32 lse and f64 operands with an f64 lse.
// CHECK-LABEL: func.func @attention
func.func @attention(%q: tensor<2x3x5x4xbf16>, %k: tensor<2x3x7x4xbf16>, %v: tensor<2x3x7x6xbf16>,
                     %dout: tensor<2x3x5x6xbf16>, %x: tensor<1x2x8x16xf64>) {
  // CHECK: %[[OUT:.*]], %[[LSE:.*]] = kiln.attention %{{.*}}, %{{.*}}, %{{.*}} {causal = true, scale = 1.250000e-01 : f64} : (tensor<2x3x5x4xbf16>, tensor<2x3x7x4xbf16>, tensor<2x3x7x6xbf16>) -> (tensor<2x3x5x6xbf16>, tensor<2x3x5xf32>)
  %out, %lse = kiln.attention %q, %k, %v {scale = 0.125 : f64, causal = true} : (tensor<2x3x5x4xbf16>, tensor<2x3x7x4xbf16>, tensor<2x3x7x6xbf16>) -> (tensor<2x3x5x6xbf16>, tensor<2x3x5xf32>)
  // CHECK: kiln.attention_grad %{{.*}}, %{{.*}}, %{{.*}}, %[[OUT]], %[[LSE]], %{{.*}} {causal = true, scale = 1.250000e-01 : f64} : (tensor<2x3x5x4xbf16>, tensor<2x3x7x4xbf16>, tensor<2x3x7x6xbf16>, tensor<2x3x5x6xbf16>, tensor<2x3x5xf32>, tensor<2x3x5x6xbf16>) -> (tensor<2x3x5x4xbf16>, tensor<2x3x7x4xbf16>, tensor<2x3x7x6xbf16>)
  %dq, %dk, %dv = kiln.attention_grad %q, %k, %v, %out, %lse, %dout {scale = 0.125 : f64, causal = true} : (tensor<2x3x5x4xbf16>, tensor<2x3x7x4xbf16>, tensor<2x3x7x6xbf16>, tensor<2x3x5x6xbf16>, tensor<2x3x5xf32>, tensor<2x3x5x6xbf16>) -> (tensor<2x3x5x4xbf16>, tensor<2x3x7x4xbf16>, tensor<2x3x7x6xbf16>)
  // CHECK: kiln.attention %{{.*}}, %{{.*}}, %{{.*}} {causal = false, scale = 2.500000e-01 : f64} : (tensor<1x2x8x16xf64>, tensor<1x2x8x16xf64>, tensor<1x2x8x16xf64>) -> (tensor<1x2x8x16xf64>, tensor<1x2x8xf64>)
  %o2, %l2 = kiln.attention %x, %x, %x {scale = 0.25 : f64, causal = false} : (tensor<1x2x8x16xf64>, tensor<1x2x8x16xf64>, tensor<1x2x8x16xf64>) -> (tensor<1x2x8x16xf64>, tensor<1x2x8xf64>)
  return
}

// The packed forms: qkv [B, T, 3, H, D], out and dout [B, T, H, D], lse
// [B, H, T] (f32 for bf16, f64 for f64).
// CHECK-LABEL: func.func @attention_qkv
func.func @attention_qkv(%qkv: tensor<2x5x3x4x8xbf16>, %dout: tensor<2x5x4x8xbf16>, %x: tensor<1x3x3x2x16xf64>) {
  // CHECK: %[[OUT:.*]], %[[LSE:.*]] = kiln.attention_qkv %{{.*}} {causal = true, scale = 1.250000e-01 : f64} : (tensor<2x5x3x4x8xbf16>) -> (tensor<2x5x4x8xbf16>, tensor<2x4x5xf32>)
  %out, %lse = kiln.attention_qkv %qkv {scale = 0.125 : f64, causal = true} : (tensor<2x5x3x4x8xbf16>) -> (tensor<2x5x4x8xbf16>, tensor<2x4x5xf32>)
  // CHECK: kiln.attention_qkv_grad %{{.*}}, %[[OUT]], %[[LSE]], %{{.*}} {causal = true, scale = 1.250000e-01 : f64} : (tensor<2x5x3x4x8xbf16>, tensor<2x5x4x8xbf16>, tensor<2x4x5xf32>, tensor<2x5x4x8xbf16>) -> tensor<2x5x3x4x8xbf16>
  %dqkv = kiln.attention_qkv_grad %qkv, %out, %lse, %dout {scale = 0.125 : f64, causal = true} : (tensor<2x5x3x4x8xbf16>, tensor<2x5x4x8xbf16>, tensor<2x4x5xf32>, tensor<2x5x4x8xbf16>) -> tensor<2x5x3x4x8xbf16>
  // CHECK: kiln.attention_qkv %{{.*}} {causal = false, scale = 2.500000e-01 : f64} : (tensor<1x3x3x2x16xf64>) -> (tensor<1x3x2x16xf64>, tensor<1x2x3xf64>)
  %o2, %l2 = kiln.attention_qkv %x {scale = 0.25 : f64, causal = false} : (tensor<1x3x3x2x16xf64>) -> (tensor<1x3x2x16xf64>, tensor<1x2x3xf64>)
  return
}

// Collectives, each without and with rank groups, every all_reduce kind,
// and send/recv.
// CHECK-LABEL: func.func @collectives
func.func @collectives(%g: tensor<512xf32>, %full: tensor<4x1024xf32>, %w: tensor<16x16xbf16>) {
  // CHECK: kiln.all_reduce sum %{{.*}} : tensor<512xf32>
  %0 = kiln.all_reduce sum %g : tensor<512xf32>
  // CHECK: kiln.all_reduce max %{{.*}} : tensor<512xf32>
  %1 = kiln.all_reduce max %g : tensor<512xf32>
  // CHECK: kiln.all_reduce min %{{.*}} : tensor<512xf32>
  %2 = kiln.all_reduce min %g : tensor<512xf32>
  // CHECK: kiln.all_reduce mean %{{.*}} {groups = dense<{{\[\[}}0, 1], [2, 3]]> : tensor<2x2xi64>} : tensor<512xf32>
  %3 = kiln.all_reduce mean %g {groups = dense<[[0, 1], [2, 3]]> : tensor<2x2xi64>} : tensor<512xf32>
  // CHECK: kiln.reduce_scatter sum %{{.*}}, dim = 1 : tensor<4x1024xf32> -> tensor<4x256xf32>
  %4 = kiln.reduce_scatter sum %full, dim = 1 : tensor<4x1024xf32> -> tensor<4x256xf32>
  // CHECK: kiln.reduce_scatter mean %{{.*}}, dim = 0 {groups = dense<{{\[\[}}0, 2], [1, 3]]> : tensor<2x2xi64>} : tensor<4x1024xf32> -> tensor<2x1024xf32>
  %5 = kiln.reduce_scatter mean %full, dim = 0 {groups = dense<[[0, 2], [1, 3]]> : tensor<2x2xi64>} : tensor<4x1024xf32> -> tensor<2x1024xf32>
  // CHECK: kiln.all_gather %{{.*}}, dim = 0 : tensor<512xf32> -> tensor<2048xf32>
  %6 = kiln.all_gather %g, dim = 0 : tensor<512xf32> -> tensor<2048xf32>
  // CHECK: kiln.all_gather %{{.*}}, dim = 0 {groups = dense<{{\[\[}}0, 1, 2, 3]]> : tensor<1x4xi64>} : tensor<512xf32> -> tensor<2048xf32>
  %7 = kiln.all_gather %g, dim = 0 {groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>} : tensor<512xf32> -> tensor<2048xf32>
  // CHECK: kiln.collective_broadcast %{{.*}}, root = 0 : tensor<16x16xbf16>
  %8 = kiln.collective_broadcast %w, root = 0 : tensor<16x16xbf16>
  // CHECK: kiln.collective_broadcast %{{.*}}, root = 1 {groups = dense<{{\[\[}}1, 0]]> : tensor<1x2xi64>} : tensor<16x16xbf16>
  %9 = kiln.collective_broadcast %w, root = 1 {groups = dense<[[1, 0]]> : tensor<1x2xi64>} : tensor<16x16xbf16>
  // CHECK: kiln.send %{{.*}}, peer = 1, channel = 0 : tensor<512xf32>
  kiln.send %g, peer = 1, channel = 0 : tensor<512xf32>
  // CHECK: kiln.recv peer = 0, channel = 3 : tensor<4x1024xf32>
  %10 = kiln.recv peer = 0, channel = 3 : tensor<4x1024xf32>
  return
}

// kiln.fusion of every kind: one result, several results, and none (the
// printer elides the empty kiln.yield).
// CHECK-LABEL: func.func @fusion
func.func @fusion(%a: tensor<4xf32>, %b: tensor<4xf32>, %m: tensor<4x8xf32>, %n: tensor<8x2xf32>) {
  // CHECK: kiln.fusion loop(%{{.*}}, %{{.*}}) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32> {
  // CHECK-NEXT: ^bb0(%[[X:.*]]: tensor<4xf32>, %[[Y:.*]]: tensor<4xf32>):
  // CHECK-NEXT: %[[S:.*]] = kiln.add %[[X]], %[[Y]] : tensor<4xf32>
  // CHECK-NEXT: %[[T:.*]] = kiln.relu %[[S]] : tensor<4xf32>
  // CHECK-NEXT: kiln.yield %[[T]] : tensor<4xf32>
  // CHECK-NEXT: }
  %0 = kiln.fusion loop (%a, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%x: tensor<4xf32>, %y: tensor<4xf32>):
    %s = kiln.add %x, %y : tensor<4xf32>
    %t = kiln.relu %s : tensor<4xf32>
    kiln.yield %t : tensor<4xf32>
  }
  // CHECK: kiln.fusion reduction(%{{.*}}) : (tensor<4x8xf32>) -> tensor<4xf32>
  %1 = kiln.fusion reduction (%m) : (tensor<4x8xf32>) -> tensor<4xf32> {
  ^bb0(%x: tensor<4x8xf32>):
    %e = kiln.exp %x : tensor<4x8xf32>
    %r = kiln.reduce sum %e, dims = [1] : tensor<4x8xf32> -> tensor<4xf32>
    kiln.yield %r : tensor<4xf32>
  }
  // CHECK: kiln.fusion multi_output(%{{.*}}) : (tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
  // CHECK: kiln.yield %{{.*}}, %{{.*}} : tensor<4xf32>, tensor<4xf32>
  %2:2 = kiln.fusion multi_output (%a) : (tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  ^bb0(%x: tensor<4xf32>):
    %e = kiln.exp %x : tensor<4xf32>
    %l = kiln.log %x : tensor<4xf32>
    kiln.yield %e, %l : tensor<4xf32>, tensor<4xf32>
  }
  // CHECK: kiln.fusion horizontal(%{{.*}}, %{{.*}}) : (tensor<4xf32>, tensor<4x8xf32>) -> (tensor<4xf32>, tensor<4x8xf32>)
  %3:2 = kiln.fusion horizontal (%a, %m) : (tensor<4xf32>, tensor<4x8xf32>) -> (tensor<4xf32>, tensor<4x8xf32>) {
  ^bb0(%x: tensor<4xf32>, %y: tensor<4x8xf32>):
    %u = kiln.neg %x : tensor<4xf32>
    %v = kiln.neg %y : tensor<4x8xf32>
    kiln.yield %u, %v : tensor<4xf32>, tensor<4x8xf32>
  }
  // CHECK: kiln.fusion gemm(%{{.*}}, %{{.*}}) : (tensor<4x8xf32>, tensor<8x2xf32>) -> tensor<4x2xf32>
  // CHECK: kiln.dot_general
  // CHECK: kiln.gelu tanh
  %4 = kiln.fusion gemm (%m, %n) : (tensor<4x8xf32>, tensor<8x2xf32>) -> tensor<4x2xf32> {
  ^bb0(%x: tensor<4x8xf32>, %y: tensor<8x2xf32>):
    %d = kiln.dot_general %x, %y, batch = [] x [], contract = [1] x [0] : (tensor<4x8xf32>, tensor<8x2xf32>) -> tensor<4x2xf32>
    %r = kiln.gelu tanh, %d : tensor<4x2xf32>
    kiln.yield %r : tensor<4x2xf32>
  }
  // CHECK: kiln.fusion loop(%{{.*}}) : (tensor<4xf32>) -> () {
  // CHECK-NEXT: ^bb0(%[[Z:.*]]: tensor<4xf32>):
  // CHECK-NEXT: kiln.send %[[Z]], peer = 2, channel = 1 : tensor<4xf32>
  // CHECK-NEXT: }
  kiln.fusion loop (%a) : (tensor<4xf32>) -> () {
  ^bb0(%x: tensor<4xf32>):
    kiln.send %x, peer = 2, channel = 1 : tensor<4xf32>
    kiln.yield
  }
  return
}

}
