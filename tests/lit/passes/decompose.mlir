// RUN: kiln-opt %s -split-input-file --kiln-decompose | FileCheck %s
// RUN: kiln-opt %s -split-input-file --kiln-decompose=gelu=true | FileCheck %s --check-prefix=GELU

// softmax: the maximum is subtracted before exp, the sum divides.
// CHECK-LABEL: func.func @softmax
// CHECK-SAME: (%[[X:.*]]: tensor<2x3xf32>)
// CHECK: %[[MAX:.*]] = kiln.reduce max %[[X]], dims = [1] : tensor<2x3xf32> -> tensor<2xf32>
// CHECK: %[[MAXB:.*]] = kiln.broadcast_in_dim %[[MAX]], dims = [0] : tensor<2xf32> -> tensor<2x3xf32>
// CHECK: %[[SHIFT:.*]] = kiln.sub %[[X]], %[[MAXB]]
// CHECK: %[[EXP:.*]] = kiln.exp %[[SHIFT]]
// CHECK: %[[SUM:.*]] = kiln.reduce sum %[[EXP]], dims = [1]
// CHECK: %[[SUMB:.*]] = kiln.broadcast_in_dim %[[SUM]], dims = [0]
// CHECK: %[[Y:.*]] = kiln.div %[[EXP]], %[[SUMB]]
// CHECK: return %[[Y]]
// CHECK-NOT: kiln.softmax
func.func @softmax(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %y = kiln.softmax %x, dim = 1 : tensor<2x3xf32>
  return %y : tensor<2x3xf32>
}

// -----

// log_softmax along dimension 0: (x - max) - log(sum(exp(x - max))).
// CHECK-LABEL: func.func @log_softmax
// CHECK: %[[MAX:.*]] = kiln.reduce max %{{.*}}, dims = [0] : tensor<2x3xf32> -> tensor<3xf32>
// CHECK: %[[SHIFT:.*]] = kiln.sub
// CHECK: %[[EXP:.*]] = kiln.exp %[[SHIFT]]
// CHECK: %[[SUM:.*]] = kiln.reduce sum %[[EXP]], dims = [0]
// CHECK: %[[LOG:.*]] = kiln.log %[[SUM]]
// CHECK: %[[LOGB:.*]] = kiln.broadcast_in_dim %[[LOG]], dims = [1] : tensor<3xf32> -> tensor<2x3xf32>
// CHECK: kiln.sub %[[SHIFT]], %[[LOGB]]
// CHECK-NOT: kiln.log_softmax
func.func @log_softmax(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %y = kiln.log_softmax %x, dim = 0 : tensor<2x3xf32>
  return %y : tensor<2x3xf32>
}

// -----

// layer_norm over the trailing two dimensions: mean, centred values, their
// biased variance, rsqrt, then scale and bias broadcast over the rows.
// CHECK-LABEL: func.func @layer_norm
// CHECK-SAME: (%[[X:.*]]: tensor<2x3x4xf32>, %[[G:.*]]: tensor<3x4xf32>, %[[B:.*]]: tensor<3x4xf32>)
// CHECK-DAG: %[[EPS:.*]] = kiln.constant dense<9.99999974E-6> : tensor<2xf32>
// CHECK-DAG: %[[N:.*]] = kiln.constant dense<1.200000e+01> : tensor<2xf32>
// CHECK: %[[SUM:.*]] = kiln.reduce sum %[[X]], dims = [1, 2]
// CHECK: %[[MEAN:.*]] = kiln.div %[[SUM]], %[[N]]
// CHECK: %[[C:.*]] = kiln.sub %[[X]]
// CHECK: %[[SQ:.*]] = kiln.mul %[[C]], %[[C]]
// CHECK: %[[SQSUM:.*]] = kiln.reduce sum %[[SQ]], dims = [1, 2]
// CHECK: %[[VAR:.*]] = kiln.div %[[SQSUM]], %[[N]]
// CHECK: %[[VE:.*]] = kiln.add %[[VAR]], %[[EPS]]
// CHECK: %[[INV:.*]] = kiln.rsqrt %[[VE]]
// CHECK: %[[INVB:.*]] = kiln.broadcast_in_dim %[[INV]], dims = [0]
// CHECK: %[[NORM:.*]] = kiln.mul %[[C]], %[[INVB]]
// CHECK-DAG: %[[GB:.*]] = kiln.broadcast_in_dim %[[G]], dims = [1, 2] : tensor<3x4xf32> -> tensor<2x3x4xf32>
// CHECK-DAG: %[[BB:.*]] = kiln.broadcast_in_dim %[[B]], dims = [1, 2] : tensor<3x4xf32> -> tensor<2x3x4xf32>
// CHECK: %[[SC:.*]] = kiln.mul %[[NORM]], %[[GB]]
// CHECK: kiln.add %[[SC]], %[[BB]]
// CHECK-NOT: kiln.layer_norm
func.func @layer_norm(%x: tensor<2x3x4xf32>, %g: tensor<3x4xf32>, %b: tensor<3x4xf32>) -> tensor<2x3x4xf32> {
  %y = kiln.layer_norm %x, %g, %b, axis = 1, epsilon = 1.0e-05 : tensor<2x3x4xf32>, tensor<3x4xf32>
  return %y : tensor<2x3x4xf32>
}

// -----

// Cross-entropy: logsumexp minus the label's logit, picked by comparing an
// iota with the broadcast labels and summing the selected logits.
// CHECK-LABEL: func.func @cross_entropy
// CHECK-SAME: (%[[L:.*]]: tensor<4x5xf32>, %[[T:.*]]: tensor<4xi64>)
// CHECK-DAG: %[[ZERO:.*]] = kiln.constant dense<0.000000e+00> : tensor<4x5xf32>
// CHECK: %[[MAX:.*]] = kiln.reduce max %[[L]], dims = [1]
// CHECK: %[[SUM:.*]] = kiln.reduce sum %{{.*}}, dims = [1]
// CHECK: %[[LOG:.*]] = kiln.log %[[SUM]]
// CHECK: %[[LSE:.*]] = kiln.add %[[MAX]], %[[LOG]]
// CHECK: %[[IOTA:.*]] = kiln.iota dim = 1 : tensor<4x5xi64>
// CHECK: %[[TB:.*]] = kiln.broadcast_in_dim %[[T]], dims = [0] : tensor<4xi64> -> tensor<4x5xi64>
// CHECK: %[[EQ:.*]] = kiln.compare eq, %[[IOTA]], %[[TB]]
// CHECK: %[[PICK:.*]] = kiln.select %[[EQ]], %[[L]], %[[ZERO]]
// CHECK: %[[PICKED:.*]] = kiln.reduce sum %[[PICK]], dims = [1]
// CHECK: kiln.sub %[[LSE]], %[[PICKED]]
// CHECK-NOT: kiln.softmax_cross_entropy
func.func @cross_entropy(%l: tensor<4x5xf32>, %t: tensor<4xi64>) -> tensor<4xf32> {
  %y = kiln.softmax_cross_entropy %l, %t : (tensor<4x5xf32>, tensor<4xi64>) -> tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// mean: a sum divided by the count (integers divide toward zero).
// CHECK-LABEL: func.func @mean
// CHECK-DAG: %[[N:.*]] = kiln.constant dense<4.000000e+00> : tensor<5xf32>
// CHECK-DAG: %[[NI:.*]] = kiln.constant dense<20> : tensor<i32>
// CHECK: %[[S:.*]] = kiln.reduce sum %{{.*}}, dims = [0] : tensor<4x5xf32> -> tensor<5xf32>
// CHECK: kiln.div %[[S]], %[[N]]
// CHECK: %[[SI:.*]] = kiln.reduce sum %{{.*}}, dims = [0, 1] : tensor<4x5xi32> -> tensor<i32>
// CHECK: kiln.div %[[SI]], %[[NI]]
// CHECK-NOT: kiln.reduce mean
func.func @mean(%x: tensor<4x5xf32>, %i: tensor<4x5xi32>) -> (tensor<5xf32>, tensor<i32>) {
  %y = kiln.reduce mean %x, dims = [0] : tensor<4x5xf32> -> tensor<5xf32>
  %z = kiln.reduce mean %i, dims = [0, 1] : tensor<4x5xi32> -> tensor<i32>
  return %y, %z : tensor<5xf32>, tensor<i32>
}

// -----

// What stays whole: GEMMs and convolutions (library calls), sum/max
// reductions, and gelu unless asked (it is elementwise already, and the
// GEMM epilogue fusion matches it).
// CHECK-LABEL: func.func @kept
// CHECK: kiln.dot_general
// CHECK: kiln.conv2d
// CHECK: kiln.reduce max
// CHECK: kiln.gelu tanh
// CHECK: kiln.gelu erf
// GELU-LABEL: func.func @kept
// GELU: kiln.dot_general
// GELU: kiln.conv2d
// GELU-NOT: kiln.gelu
// GELU: return
func.func @kept(%a: tensor<2x3xf32>, %b: tensor<3x4xf32>, %x: tensor<1x1x4x4xf32>, %w: tensor<1x1x3x3xf32>)
    -> (tensor<2x4xf32>, tensor<1x1x2x2xf32>, tensor<2xf32>, tensor<2x4xf32>, tensor<2x4xf32>) {
  %c = kiln.dot_general %a, %b, batch = [] x [], contract = [1] x [0] : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
  %y = kiln.conv2d %x, %w, strides = [1, 1], padding = [0, 0, 0, 0], dilation = [1, 1], groups = 1
         : (tensor<1x1x4x4xf32>, tensor<1x1x3x3xf32>) -> tensor<1x1x2x2xf32>
  %m = kiln.reduce max %a, dims = [1] : tensor<2x3xf32> -> tensor<2xf32>
  %g = kiln.gelu tanh, %c : tensor<2x4xf32>
  %h = kiln.gelu erf, %c : tensor<2x4xf32>
  return %c, %y, %m, %g, %h : tensor<2x4xf32>, tensor<1x1x2x2xf32>, tensor<2xf32>, tensor<2x4xf32>, tensor<2x4xf32>
}

// -----

// gelu=true writes both forms as their scalar formulas.
// GELU-LABEL: func.func @gelu
// GELU-SAME: (%[[X:.*]]: tensor<4xf32>)
// GELU-DAG: %[[HALF:.*]] = kiln.constant dense<5.000000e-01> : tensor<4xf32>
// GELU-DAG: %[[ONE:.*]] = kiln.constant dense<1.000000e+00> : tensor<4xf32>
// GELU-DAG: %[[C:.*]] = kiln.constant dense<4.471500e-02> : tensor<4xf32>
// GELU-DAG: %[[K:.*]] = kiln.constant dense<0.797884583> : tensor<4xf32>
// GELU-DAG: %[[R:.*]] = kiln.constant dense<0.707106769> : tensor<4xf32>
// GELU: %[[X2:.*]] = kiln.mul %[[X]], %[[X]]
// GELU: %[[X3:.*]] = kiln.mul %[[X2]], %[[X]]
// GELU: %[[CX3:.*]] = kiln.mul %[[X3]], %[[C]]
// GELU: %[[P:.*]] = kiln.add %[[X]], %[[CX3]]
// GELU: %[[KP:.*]] = kiln.mul %[[P]], %[[K]]
// GELU: %[[T:.*]] = kiln.tanh %[[KP]]
// GELU: %[[HX:.*]] = kiln.mul %[[X]], %[[HALF]]
// GELU: %[[OP:.*]] = kiln.add %[[T]], %[[ONE]]
// GELU: %[[A:.*]] = kiln.mul %[[HX]], %[[OP]]
// GELU: %[[S:.*]] = kiln.mul %[[X]], %[[R]]
// GELU: %[[E:.*]] = kiln.erf %[[S]]
// GELU: return %[[A]],
func.func @gelu(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %a = kiln.gelu tanh, %x : tensor<4xf32>
  %b = kiln.gelu erf, %x : tensor<4xf32>
  return %a, %b : tensor<4xf32>, tensor<4xf32>
}

// -----

// avg_pool2d: a depthwise convolution (groups = channels) with a constant
// filter of 1/(kh kw); its gradient, that convolution's input gradient.
// CHECK-LABEL: func.func @avg_pool
// CHECK-SAME: (%[[X:.*]]: tensor<2x3x6x6xf32>, %[[DY:.*]]: tensor<2x3x3x3xf32>)
// CHECK: %[[W:.*]] = kiln.constant dense<0.111111112> : tensor<3x1x3x3xf32>
// CHECK: %[[Y:.*]] = kiln.conv2d %[[X]], %[[W]], strides = [2, 2], padding = [1, 1, 1, 1], dilation = [1, 1], groups = 3 : (tensor<2x3x6x6xf32>, tensor<3x1x3x3xf32>) -> tensor<2x3x3x3xf32>
// CHECK: %[[DX:.*]] = kiln.conv2d_input_grad %[[DY]], %{{.*}}, strides = [2, 2], padding = [1, 1, 1, 1], dilation = [1, 1], groups = 3 : (tensor<2x3x3x3xf32>, tensor<3x1x3x3xf32>) -> tensor<2x3x6x6xf32>
// CHECK: return %[[Y]], %[[DX]]
// CHECK-NOT: kiln.avg_pool2d
func.func @avg_pool(%x: tensor<2x3x6x6xf32>, %dy: tensor<2x3x3x3xf32>) -> (tensor<2x3x3x3xf32>, tensor<2x3x6x6xf32>) {
  %y = kiln.avg_pool2d %x, window = [3, 3], strides = [2, 2], padding = [1, 1, 1, 1] : tensor<2x3x6x6xf32> -> tensor<2x3x3x3xf32>
  %dx = kiln.avg_pool2d_grad %dy, window = [3, 3], strides = [2, 2], padding = [1, 1, 1, 1] : tensor<2x3x3x3xf32> -> tensor<2x3x6x6xf32>
  return %y, %dx : tensor<2x3x3x3xf32>, tensor<2x3x6x6xf32>
}

// -----

// argmax: the positions holding the row's max, or where it is NaN the NaNs
// (x != x), and the least of their indices (the others stand for the size).
// CHECK-LABEL: func.func @argmax_float
// CHECK-SAME: (%[[X:.*]]: tensor<2x3xf32>)
// CHECK-DAG: %[[SIZE:.*]] = kiln.constant dense<3> : tensor<2x3xi64>
// CHECK: %[[MAX:.*]] = kiln.reduce max %[[X]], dims = [1] : tensor<2x3xf32> -> tensor<2xf32>
// CHECK: %[[MAXB:.*]] = kiln.broadcast_in_dim %[[MAX]], dims = [0]
// CHECK: %[[AT:.*]] = kiln.compare eq, %[[X]], %[[MAXB]]
// CHECK: %[[NAN:.*]] = kiln.compare ne, %[[X]], %[[X]]
// CHECK: %[[TOP:.*]] = kiln.select %[[AT]], %{{.*}}, %[[NAN]]
// CHECK: %[[IOTA:.*]] = kiln.iota dim = 1 : tensor<2x3xi64>
// CHECK: %[[CAND:.*]] = kiln.select %[[TOP]], %[[IOTA]], %[[SIZE]]
// CHECK: kiln.reduce min %[[CAND]], dims = [1] : tensor<2x3xi64> -> tensor<2xi64>
// CHECK-NOT: kiln.argmax
func.func @argmax_float(%x: tensor<2x3xf32>) -> tensor<2xi64> {
  %y = kiln.argmax %x, dim = 1 : tensor<2x3xf32> -> tensor<2xi64>
  return %y : tensor<2xi64>
}

// -----

// An integer argmax has no NaNs: the positions holding the max.
// CHECK-LABEL: func.func @argmax_int
// CHECK-SAME: (%[[X:.*]]: tensor<2x3xi32>)
// CHECK-DAG: %[[SIZE:.*]] = kiln.constant dense<2> : tensor<2x3xi64>
// CHECK: %[[MAX:.*]] = kiln.reduce max %[[X]], dims = [0] : tensor<2x3xi32> -> tensor<3xi32>
// CHECK: %[[MAXB:.*]] = kiln.broadcast_in_dim %[[MAX]], dims = [1]
// CHECK: %[[AT:.*]] = kiln.compare eq, %[[X]], %[[MAXB]]
// CHECK-NOT: kiln.compare ne
// CHECK: %[[IOTA:.*]] = kiln.iota dim = 0 : tensor<2x3xi64>
// CHECK: %[[CAND:.*]] = kiln.select %[[AT]], %[[IOTA]], %[[SIZE]]
// CHECK: kiln.reduce min %[[CAND]], dims = [0] : tensor<2x3xi64> -> tensor<3xi64>
// CHECK-NOT: kiln.argmax
func.func @argmax_int(%x: tensor<2x3xi32>) -> tensor<3xi64> {
  %y = kiln.argmax %x, dim = 0 : tensor<2x3xi32> -> tensor<3xi64>
  return %y : tensor<3xi64>
}
