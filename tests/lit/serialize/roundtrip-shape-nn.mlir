// Graph file round trip of the shape, reduction, linear-algebra, convolution,
// pooling and neural-network ops and kiln.mode_select, with parameters,
// model state, initializers, a loss and a training section.
// RUN: kiln-translate --mlir-to-kiln %s -o %t.1.kiln
// RUN: kiln-translate --kiln-to-mlir %t.1.kiln -o %t.1.mlir
// RUN: kiln-translate --mlir-to-kiln %t.1.mlir -o %t.2.kiln
// RUN: kiln-translate --kiln-to-mlir %t.2.kiln -o %t.2.mlir
// RUN: diff %t.1.mlir %t.2.mlir
// RUN: cmp %t.1.kiln %t.2.kiln
// RUN: FileCheck %s --input-file %t.2.mlir

// CHECK: module attributes {kiln.training = #kiln.training<optimizer = adamw, learning_rate = 3.000000e-04, momentum = 5.000000e-01, nesterov = true, beta1 = 8.000000e-01, beta2 = 8.750000e-01, epsilon = 6.250000e-02, weight_decay = 1.000000e-02, clip_norm = 1.000000e+00, schedule = warmup_cosine, warmup_steps = 100, total_steps = 1000>}
module attributes {kiln.training = #kiln.training<optimizer = adamw, learning_rate = 3.0e-4, momentum = 0.5, nesterov = true, beta1 = 0.8, beta2 = 0.875, epsilon = 0.0625, weight_decay = 0.01, clip_norm = 1.0, schedule = warmup_cosine, warmup_steps = 100, total_steps = 1000>} {
// CHECK-LABEL: func.func @net
// CHECK-SAME: %[[IMG:[^:]+]]: tensor<2x1x8x8xf32> {kiln.name = "image", kiln.role = #kiln.role<input>}
// CHECK-SAME: %[[W:[^:]+]]: tensor<4x1x3x3xf32> {kiln.init = #kiln.init<kind = kaiming_normal, scale = 2.000000e+00, seed = 11>, kiln.name = "conv.weight", kiln.role = #kiln.role<parameter>}
// CHECK-SAME: tensor<16x8xf32> {kiln.init = #kiln.init<kind = normal, value = 5.000000e-01, scale = 2.000000e-02, seed = 1>, kiln.name = "embed", kiln.role = #kiln.role<parameter>}
// CHECK-SAME: tensor<8xf32> {kiln.init = #kiln.init<kind = ones>, kiln.name = "ln.scale", kiln.role = #kiln.role<parameter>}
// CHECK-SAME: tensor<8xf32> {kiln.init = #kiln.init<kind = zeros>, kiln.name = "ln.bias", kiln.role = #kiln.role<parameter>}
// CHECK-SAME: tensor<2x3xi64> {kiln.name = "tokens", kiln.role = #kiln.role<input>}
// CHECK-SAME: tensor<2xi32> {kiln.name = "labels", kiln.role = #kiln.role<label>}
// CHECK-SAME: tensor<i64> {kiln.role = #kiln.role<step>}
// CHECK-SAME: tensor<4xf32> {kiln.init = #kiln.init<kind = constant, value = 2.500000e-01>, kiln.role = #kiln.role<parameter>}
// CHECK-SAME: tensor<4x4xf32> {kiln.init = #kiln.init<kind = uniform, value = -1.000000e+00, scale = 3.000000e+00, seed = 5>, kiln.role = #kiln.role<optimizer_state>}
// CHECK-SAME: tensor<4x4xf32> {kiln.init = #kiln.init<kind = glorot_uniform, seed = 3>, kiln.role = #kiln.role<gradient>}
// CHECK-SAME: %[[STATE:[^:]+]]: tensor<8xf32> {kiln.init = #kiln.init<kind = zeros>, kiln.name = "ln.running_mean", kiln.role = #kiln.role<model_state>}
// CHECK-SAME: -> (tensor<f32> {kiln.name = "loss", kiln.role = #kiln.role<loss>}, tensor<2xi64>, tensor<2x3x8xf32> {kiln.role = #kiln.role<output>}, tensor<8xf32> {kiln.name = "ln.running_mean", kiln.role = #kiln.role<model_state>, kiln.updates = 11 : i64})
func.func @net(%img: tensor<2x1x8x8xf32> {kiln.role = #kiln.role<input>, kiln.name = "image"},
               %w: tensor<4x1x3x3xf32> {kiln.role = #kiln.role<parameter>, kiln.name = "conv.weight", kiln.init = #kiln.init<kind = kaiming_normal, scale = 2.0, seed = 11>},
               %table: tensor<16x8xf32> {kiln.role = #kiln.role<parameter>, kiln.name = "embed", kiln.init = #kiln.init<kind = normal, value = 0.5, scale = 0.02, seed = 1>},
               %g: tensor<8xf32> {kiln.role = #kiln.role<parameter>, kiln.name = "ln.scale", kiln.init = #kiln.init<kind = ones>},
               %b: tensor<8xf32> {kiln.role = #kiln.role<parameter>, kiln.name = "ln.bias", kiln.init = #kiln.init<kind = zeros>},
               %tok: tensor<2x3xi64> {kiln.role = #kiln.role<input>, kiln.name = "tokens"},
               %lab: tensor<2xi32> {kiln.role = #kiln.role<label>, kiln.name = "labels"},
               %step: tensor<i64> {kiln.role = #kiln.role<step>},
               %bias: tensor<4xf32> {kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = constant, value = 0.25>},
               %m: tensor<4x4xf32> {kiln.role = #kiln.role<optimizer_state>, kiln.init = #kiln.init<kind = uniform, value = -1.0, scale = 3.0, seed = 5>},
               %gr: tensor<4x4xf32> {kiln.role = #kiln.role<gradient>, kiln.init = #kiln.init<kind = glorot_uniform, seed = 3>},
               %run: tensor<8xf32> {kiln.role = #kiln.role<model_state>, kiln.name = "ln.running_mean", kiln.init = #kiln.init<kind = zeros>})
    -> (tensor<f32> {kiln.role = #kiln.role<loss>, kiln.name = "loss"}, tensor<2xi64>, tensor<2x3x8xf32> {kiln.role = #kiln.role<output>},
        tensor<8xf32> {kiln.role = #kiln.role<model_state>, kiln.name = "ln.running_mean", kiln.updates = 11 : i64}) {
  // CHECK: %[[CONV:.+]] = kiln.conv2d %[[IMG]], %[[W]], strides = [1, 1], padding = [1, 1, 1, 1], dilation = [1, 1], groups = 1 : (tensor<2x1x8x8xf32>, tensor<4x1x3x3xf32>) -> tensor<2x4x8x8xf32>
  %conv = kiln.conv2d %img, %w, strides = [1, 1], padding = [1, 1, 1, 1], dilation = [1, 1], groups = 1
      : (tensor<2x1x8x8xf32>, tensor<4x1x3x3xf32>) -> tensor<2x4x8x8xf32>
  // CHECK: kiln.conv2d_input_grad %[[CONV]], %[[W]], strides = [1, 1], padding = [1, 1, 1, 1], dilation = [1, 1], groups = 1 : (tensor<2x4x8x8xf32>, tensor<4x1x3x3xf32>) -> tensor<2x1x8x8xf32>
  %dx = kiln.conv2d_input_grad %conv, %w, strides = [1, 1], padding = [1, 1, 1, 1], dilation = [1, 1], groups = 1
      : (tensor<2x4x8x8xf32>, tensor<4x1x3x3xf32>) -> tensor<2x1x8x8xf32>
  // CHECK: kiln.conv2d_filter_grad %[[IMG]], %[[CONV]], strides = [1, 1], padding = [1, 1, 1, 1], dilation = [1, 1], groups = 1 : (tensor<2x1x8x8xf32>, tensor<2x4x8x8xf32>) -> tensor<4x1x3x3xf32>
  %dw = kiln.conv2d_filter_grad %img, %conv, strides = [1, 1], padding = [1, 1, 1, 1], dilation = [1, 1], groups = 1
      : (tensor<2x1x8x8xf32>, tensor<2x4x8x8xf32>) -> tensor<4x1x3x3xf32>
  // CHECK: %[[MP:.+]] = kiln.max_pool2d %[[CONV]], window = [2, 2], strides = [2, 2], padding = [0, 0, 0, 0] : tensor<2x4x8x8xf32> -> tensor<2x4x4x4xf32>
  %mp = kiln.max_pool2d %conv, window = [2, 2], strides = [2, 2], padding = [0, 0, 0, 0] : tensor<2x4x8x8xf32> -> tensor<2x4x4x4xf32>
  // CHECK: kiln.avg_pool2d %[[CONV]], window = [3, 3], strides = [2, 2], padding = [1, 0, 1, 0] : tensor<2x4x8x8xf32> -> tensor<2x4x4x4xf32>
  %ap = kiln.avg_pool2d %conv, window = [3, 3], strides = [2, 2], padding = [1, 0, 1, 0] : tensor<2x4x8x8xf32> -> tensor<2x4x4x4xf32>
  // CHECK: kiln.max_pool2d_grad %[[CONV]], %[[MP]], window = [2, 2], strides = [2, 2], padding = [0, 0, 0, 0] : tensor<2x4x8x8xf32>, tensor<2x4x4x4xf32>
  %mpg = kiln.max_pool2d_grad %conv, %mp, window = [2, 2], strides = [2, 2], padding = [0, 0, 0, 0] : tensor<2x4x8x8xf32>, tensor<2x4x4x4xf32>
  // CHECK: kiln.avg_pool2d_grad %[[MP]], window = [2, 2], strides = [2, 2], padding = [0, 0, 0, 0] : tensor<2x4x4x4xf32> -> tensor<2x4x8x8xf32>
  %apg = kiln.avg_pool2d_grad %mp, window = [2, 2], strides = [2, 2], padding = [0, 0, 0, 0] : tensor<2x4x4x4xf32> -> tensor<2x4x8x8xf32>
  // CHECK: %[[R:.+]] = kiln.reshape %{{.+}} : tensor<2x4x4x4xf32> -> tensor<2x64xf32>
  %r = kiln.reshape %mp : tensor<2x4x4x4xf32> -> tensor<2x64xf32>
  // CHECK: kiln.transpose %[[R]], permutation = [1, 0] : tensor<2x64xf32> -> tensor<64x2xf32>
  %t = kiln.transpose %r, permutation = [1, 0] : tensor<2x64xf32> -> tensor<64x2xf32>
  // CHECK: kiln.slice %[[R]], start = [0, 1], limit = [2, 9], strides = [1, 2] : tensor<2x64xf32> -> tensor<2x4xf32>
  %sl = kiln.slice %r, start = [0, 1], limit = [2, 9], strides = [1, 2] : tensor<2x64xf32> -> tensor<2x4xf32>
  // CHECK: kiln.pad %{{.+}}, low = [0, 1], high = [1, 0], value = -1.500000e+00 : tensor<2x4xf32> -> tensor<3x5xf32>
  %pad = kiln.pad %sl, low = [0, 1], high = [1, 0], value = -1.5 : tensor<2x4xf32> -> tensor<3x5xf32>
  // CHECK: kiln.broadcast_in_dim %{{.+}}, dims = [1] : tensor<4xf32> -> tensor<2x4xf32>
  %bb = kiln.broadcast_in_dim %bias, dims = [1] : tensor<4xf32> -> tensor<2x4xf32>
  // CHECK: %[[DOT:.+]] = kiln.dot_general %{{.+}}, %{{.+}}, batch = [] x [], contract = [1] x [0] : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %dot = kiln.dot_general %bb, %m, batch = [] x [], contract = [1] x [0] : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  // CHECK: kiln.dot_general %{{.+}}, %{{.+}}, batch = [0] x [0], contract = [2] x [1] : (tensor<2x3x8xf32>, tensor<2x8x3xf32>) -> tensor<2x3x3xf32>
  // CHECK: kiln.reduce sum %{{.+}}, dims = [0, 1] : tensor<2x3x3xf32> -> tensor<3xf32>
  // CHECK: kiln.reduce max %{{.+}}, dims = [1] : tensor<2x4xf32> -> tensor<2xf32>
  // CHECK: kiln.reduce min %{{.+}}, dims = [] : tensor<2x4xf32> -> tensor<2x4xf32>
  // CHECK: kiln.reduce prod %{{.+}}, dims = [0] : tensor<2x4xf32> -> tensor<4xf32>
  // CHECK: %[[AM:.+]] = kiln.argmax %[[DOT]], dim = 1 : tensor<2x4xf32> -> tensor<2xi64>
  // CHECK: kiln.softmax %[[DOT]], dim = 1 : tensor<2x4xf32>
  // CHECK: %[[LS:.+]] = kiln.log_softmax %[[DOT]], dim = 0 : tensor<2x4xf32>
  // CHECK: %[[E:.+]] = kiln.gather %{{.+}}, %{{.+}} : (tensor<16x8xf32>, tensor<2x3xi64>) -> tensor<2x3x8xf32>
  // CHECK: kiln.scatter_add %{{.+}}, %{{.+}}, %[[E]] : (tensor<16x8xf32>, tensor<2x3xi64>, tensor<2x3x8xf32>) -> tensor<16x8xf32>
  // CHECK: kiln.scatter_add %{{.+}}, %{{.+}}, %[[E]] combine = max : (tensor<16x8xf32>, tensor<2x3xi64>, tensor<2x3x8xf32>) -> tensor<16x8xf32>
  // CHECK: kiln.scatter_add %{{.+}}, %{{.+}}, %[[E]] combine = min : (tensor<16x8xf32>, tensor<2x3xi64>, tensor<2x3x8xf32>) -> tensor<16x8xf32>
  // CHECK: kiln.scatter_add %{{.+}}, %{{.+}}, %[[E]] combine = prod : (tensor<16x8xf32>, tensor<2x3xi64>, tensor<2x3x8xf32>) -> tensor<16x8xf32>
  // CHECK: %[[LN:.+]] = kiln.layer_norm %[[E]], %{{.+}}, %{{.+}}, axis = 2, epsilon = 1.000000e-05 : tensor<2x3x8xf32>, tensor<8xf32>
  // CHECK: %[[DR:.+]] = kiln.dropout %[[LN]], %{{.+}}, rate = 2.500000e-01, seed = -3 : tensor<2x3x8xf32>
  // CHECK: kiln.random_uniform %{{.+}}, seed = -5 : tensor<2x3x8xbf16>
  // CHECK: %[[CE:.+]] = kiln.softmax_cross_entropy %[[LS]], %{{.+}} : (tensor<2x4xf32>, tensor<2xi32>) -> tensor<2xf32>
  // CHECK: %[[L:.+]] = kiln.reduce mean %[[CE]], dims = [0] : tensor<2xf32> -> tensor<f32>
  // CHECK: %[[BM:.+]] = kiln.reduce mean %[[LN]], dims = [0, 1] : tensor<2x3x8xf32> -> tensor<8xf32>
  // CHECK: %[[MS:.+]] = kiln.mode_select %[[BM]], %[[STATE]] : tensor<8xf32>
  // CHECK: return %[[L]], %[[AM]], %[[DR]], %[[MS]] : tensor<f32>, tensor<2xi64>, tensor<2x3x8xf32>, tensor<8xf32>
  %emb3 = kiln.gather %table, %tok : (tensor<16x8xf32>, tensor<2x3xi64>) -> tensor<2x3x8xf32>
  %embt = kiln.transpose %emb3, permutation = [0, 2, 1] : tensor<2x3x8xf32> -> tensor<2x8x3xf32>
  %bmm = kiln.dot_general %emb3, %embt, batch = [0] x [0], contract = [2] x [1] : (tensor<2x3x8xf32>, tensor<2x8x3xf32>) -> tensor<2x3x3xf32>
  %rs = kiln.reduce sum %bmm, dims = [0, 1] : tensor<2x3x3xf32> -> tensor<3xf32>
  %rx = kiln.reduce max %dot, dims = [1] : tensor<2x4xf32> -> tensor<2xf32>
  %rn = kiln.reduce min %dot, dims = [] : tensor<2x4xf32> -> tensor<2x4xf32>
  %rp = kiln.reduce prod %dot, dims = [0] : tensor<2x4xf32> -> tensor<4xf32>
  %am = kiln.argmax %dot, dim = 1 : tensor<2x4xf32> -> tensor<2xi64>
  %sm = kiln.softmax %dot, dim = 1 : tensor<2x4xf32>
  %ls = kiln.log_softmax %dot, dim = 0 : tensor<2x4xf32>
  %emb = kiln.gather %table, %tok : (tensor<16x8xf32>, tensor<2x3xi64>) -> tensor<2x3x8xf32>
  %sa = kiln.scatter_add %table, %tok, %emb : (tensor<16x8xf32>, tensor<2x3xi64>, tensor<2x3x8xf32>) -> tensor<16x8xf32>
  %sx = kiln.scatter_add %table, %tok, %emb combine = max : (tensor<16x8xf32>, tensor<2x3xi64>, tensor<2x3x8xf32>) -> tensor<16x8xf32>
  %sn = kiln.scatter_add %table, %tok, %emb combine = min : (tensor<16x8xf32>, tensor<2x3xi64>, tensor<2x3x8xf32>) -> tensor<16x8xf32>
  %sp = kiln.scatter_add %table, %tok, %emb combine = prod : (tensor<16x8xf32>, tensor<2x3xi64>, tensor<2x3x8xf32>) -> tensor<16x8xf32>
  %ln = kiln.layer_norm %emb, %g, %b, axis = 2, epsilon = 1.0e-05 : tensor<2x3x8xf32>, tensor<8xf32>
  %dr = kiln.dropout %ln, %step, rate = 0.25, seed = -3 : tensor<2x3x8xf32>
  %ru = kiln.random_uniform %step, seed = -5 : tensor<2x3x8xbf16>
  %ce = kiln.softmax_cross_entropy %ls, %lab : (tensor<2x4xf32>, tensor<2xi32>) -> tensor<2xf32>
  %loss = kiln.reduce mean %ce, dims = [0] : tensor<2xf32> -> tensor<f32>
  %bm = kiln.reduce mean %ln, dims = [0, 1] : tensor<2x3x8xf32> -> tensor<8xf32>
  %ms = kiln.mode_select %bm, %run : tensor<8xf32>
  return %loss, %am, %dr, %ms : tensor<f32>, tensor<2xi64>, tensor<2x3x8xf32>, tensor<8xf32>
}
}
