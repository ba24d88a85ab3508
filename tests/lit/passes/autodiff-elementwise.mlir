// RUN: kiln-opt %s -split-input-file -verify-diagnostics -kiln-autodiff -canonicalize -cse | FileCheck %s
//
// kiln-autodiff on elementwise ops (ir/gradients/Elementwise.cpp): one case per
// op, each a parameter through the op and a sum to the loss, so the incoming
// gradient %G is a broadcast of the seed 1.0. Cases whose gradient is zero
// check the remark kiln-autodiff gives for a parameter that does not reach the
// loss.

// neg: the gradient is negated.
// CHECK-LABEL: func.func @neg
// CHECK: %[[G:.*]] = kiln.broadcast_in_dim %{{.*}}, dims = [] : tensor<f32> -> tensor<4xf32>
// CHECK: %[[DX:.*]] = kiln.neg %[[G]]
// CHECK: return %{{.*}}, %[[DX]]
func.func @neg(%x: tensor<4xf32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %y = kiln.neg %x : tensor<4xf32>
  %l = kiln.reduce sum %y, dims = [0] : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// abs: g * sign(x), taken as 0 at x = 0.
// CHECK-LABEL: func.func @abs
// CHECK-DAG: %[[ZERO:.*]] = kiln.constant dense<0.000000e+00> : tensor<4xf32>
// CHECK: %[[G:.*]] = kiln.broadcast_in_dim %{{.*}}, dims = [] : tensor<f32> -> tensor<4xf32>
// CHECK: %[[NEG:.*]] = kiln.compare lt, %arg0, %[[ZERO]]
// CHECK: %[[MG:.*]] = kiln.neg %[[G]]
// CHECK: %[[A:.*]] = kiln.select %[[NEG]], %[[MG]], %[[ZERO]]
// CHECK: %[[POS:.*]] = kiln.compare gt, %arg0, %[[ZERO]]
// CHECK: %[[DX:.*]] = kiln.select %[[POS]], %[[G]], %[[A]]
// CHECK: return %{{.*}}, %[[DX]]
func.func @abs(%x: tensor<4xf32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %y = kiln.abs %x : tensor<4xf32>
  %l = kiln.reduce sum %y, dims = [0] : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// exp: the rule reuses the result, dx = g * y.
// CHECK-LABEL: func.func @exp
// CHECK: %[[Y:.*]] = kiln.exp %arg0
// CHECK: %[[G:.*]] = kiln.broadcast_in_dim %{{.*}}, dims = [] : tensor<f32> -> tensor<4xf32>
// CHECK: %[[DX:.*]] = kiln.mul %[[G]], %[[Y]]
// CHECK: return %{{.*}}, %[[DX]]
func.func @exp(%x: tensor<4xf32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %y = kiln.exp %x : tensor<4xf32>
  %l = kiln.reduce sum %y, dims = [0] : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// log: dx = g / x.
// CHECK-LABEL: func.func @log
// CHECK: %[[G:.*]] = kiln.broadcast_in_dim %{{.*}}, dims = [] : tensor<f32> -> tensor<4xf32>
// CHECK: %[[DX:.*]] = kiln.div %[[G]], %arg0
// CHECK: return %{{.*}}, %[[DX]]
func.func @log(%x: tensor<4xf32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %y = kiln.log %x : tensor<4xf32>
  %l = kiln.reduce sum %y, dims = [0] : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// log1p: dx = g / (x + 1).
// CHECK-LABEL: func.func @log1p
// CHECK-DAG: %[[ONE:.*]] = kiln.constant dense<1.000000e+00> : tensor<4xf32>
// CHECK: %[[G:.*]] = kiln.broadcast_in_dim %{{.*}}, dims = [] : tensor<f32> -> tensor<4xf32>
// CHECK: %[[D:.*]] = kiln.add %arg0, %[[ONE]]
// CHECK: %[[DX:.*]] = kiln.div %[[G]], %[[D]]
// CHECK: return %{{.*}}, %[[DX]]
func.func @log1p(%x: tensor<4xf32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %y = kiln.log1p %x : tensor<4xf32>
  %l = kiln.reduce sum %y, dims = [0] : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// sqrt: the rule reuses the result, dx = (g * 0.5) / y.
// CHECK-LABEL: func.func @sqrt
// CHECK-DAG: %[[HALF:.*]] = kiln.constant dense<5.000000e-01> : tensor<4xf32>
// CHECK: %[[Y:.*]] = kiln.sqrt %arg0
// CHECK: %[[G:.*]] = kiln.broadcast_in_dim %{{.*}}, dims = [] : tensor<f32> -> tensor<4xf32>
// CHECK: %[[H:.*]] = kiln.mul %[[G]], %[[HALF]]
// CHECK: %[[DX:.*]] = kiln.div %[[H]], %[[Y]]
// CHECK: return %{{.*}}, %[[DX]]
func.func @sqrt(%x: tensor<4xf32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %y = kiln.sqrt %x : tensor<4xf32>
  %l = kiln.reduce sum %y, dims = [0] : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// rsqrt: dx = (g * -0.5) * (y / x).
// CHECK-LABEL: func.func @rsqrt
// CHECK-DAG: %[[C:.*]] = kiln.constant dense<-5.000000e-01> : tensor<4xf32>
// CHECK: %[[Y:.*]] = kiln.rsqrt %arg0
// CHECK: %[[G:.*]] = kiln.broadcast_in_dim %{{.*}}, dims = [] : tensor<f32> -> tensor<4xf32>
// CHECK: %[[R:.*]] = kiln.div %[[Y]], %arg0
// CHECK: %[[S:.*]] = kiln.mul %[[G]], %[[C]]
// CHECK: %[[DX:.*]] = kiln.mul %[[S]], %[[R]]
// CHECK: return %{{.*}}, %[[DX]]
func.func @rsqrt(%x: tensor<4xf32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %y = kiln.rsqrt %x : tensor<4xf32>
  %l = kiln.reduce sum %y, dims = [0] : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// tanh: dx = g * (1 - y * y).
// CHECK-LABEL: func.func @tanh
// CHECK-DAG: %[[ONE:.*]] = kiln.constant dense<1.000000e+00> : tensor<4xf32>
// CHECK: %[[Y:.*]] = kiln.tanh %arg0
// CHECK: %[[G:.*]] = kiln.broadcast_in_dim %{{.*}}, dims = [] : tensor<f32> -> tensor<4xf32>
// CHECK: %[[Y2:.*]] = kiln.mul %[[Y]], %[[Y]]
// CHECK: %[[D:.*]] = kiln.sub %[[ONE]], %[[Y2]]
// CHECK: %[[DX:.*]] = kiln.mul %[[G]], %[[D]]
// CHECK: return %{{.*}}, %[[DX]]
func.func @tanh(%x: tensor<4xf32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %y = kiln.tanh %x : tensor<4xf32>
  %l = kiln.reduce sum %y, dims = [0] : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// sigmoid: dx = g * (y * (1 - y)).
// CHECK-LABEL: func.func @sigmoid
// CHECK-DAG: %[[ONE:.*]] = kiln.constant dense<1.000000e+00> : tensor<4xf32>
// CHECK: %[[Y:.*]] = kiln.sigmoid %arg0
// CHECK: %[[G:.*]] = kiln.broadcast_in_dim %{{.*}}, dims = [] : tensor<f32> -> tensor<4xf32>
// CHECK: %[[OMY:.*]] = kiln.sub %[[ONE]], %[[Y]]
// CHECK: %[[D:.*]] = kiln.mul %[[Y]], %[[OMY]]
// CHECK: %[[DX:.*]] = kiln.mul %[[G]], %[[D]]
// CHECK: return %{{.*}}, %[[DX]]
func.func @sigmoid(%x: tensor<4xf32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %y = kiln.sigmoid %x : tensor<4xf32>
  %l = kiln.reduce sum %y, dims = [0] : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// relu: the gradient flows where x > 0.
// CHECK-LABEL: func.func @relu
// CHECK-DAG: %[[ZERO:.*]] = kiln.constant dense<0.000000e+00> : tensor<4xf32>
// CHECK: %[[G:.*]] = kiln.broadcast_in_dim %{{.*}}, dims = [] : tensor<f32> -> tensor<4xf32>
// CHECK: %[[P:.*]] = kiln.compare gt, %arg0, %[[ZERO]]
// CHECK: %[[DX:.*]] = kiln.select %[[P]], %[[G]], %[[ZERO]]
// CHECK: return %{{.*}}, %[[DX]]
func.func @relu(%x: tensor<4xf32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %y = kiln.relu %x : tensor<4xf32>
  %l = kiln.reduce sum %y, dims = [0] : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// erf: dx = g * 2/sqrt(pi) * exp(-x * x).
// CHECK-LABEL: func.func @erf
// CHECK-DAG: %[[C:.*]] = kiln.constant dense<1.12837923> : tensor<4xf32>
// CHECK: %[[G:.*]] = kiln.broadcast_in_dim %{{.*}}, dims = [] : tensor<f32> -> tensor<4xf32>
// CHECK: %[[X2:.*]] = kiln.mul %arg0, %arg0
// CHECK: %[[N:.*]] = kiln.neg %[[X2]]
// CHECK: %[[E:.*]] = kiln.exp %[[N]]
// CHECK: %[[S:.*]] = kiln.mul %[[G]], %[[C]]
// CHECK: %[[DX:.*]] = kiln.mul %[[S]], %[[E]]
// CHECK: return %{{.*}}, %[[DX]]
func.func @erf(%x: tensor<4xf32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %y = kiln.erf %x : tensor<4xf32>
  %l = kiln.reduce sum %y, dims = [0] : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// sin: dx = g * cos(x).
// CHECK-LABEL: func.func @sin
// CHECK: %[[G:.*]] = kiln.broadcast_in_dim %{{.*}}, dims = [] : tensor<f32> -> tensor<4xf32>
// CHECK: %[[C:.*]] = kiln.cos %arg0
// CHECK: %[[DX:.*]] = kiln.mul %[[G]], %[[C]]
// CHECK: return %{{.*}}, %[[DX]]
func.func @sin(%x: tensor<4xf32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %y = kiln.sin %x : tensor<4xf32>
  %l = kiln.reduce sum %y, dims = [0] : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// cos: dx = -(g * sin(x)).
// CHECK-LABEL: func.func @cos
// CHECK: %[[G:.*]] = kiln.broadcast_in_dim %{{.*}}, dims = [] : tensor<f32> -> tensor<4xf32>
// CHECK: %[[S:.*]] = kiln.sin %arg0
// CHECK: %[[M:.*]] = kiln.mul %[[G]], %[[S]]
// CHECK: %[[DX:.*]] = kiln.neg %[[M]]
// CHECK: return %{{.*}}, %[[DX]]
func.func @cos(%x: tensor<4xf32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %y = kiln.cos %x : tensor<4xf32>
  %l = kiln.reduce sum %y, dims = [0] : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// reciprocal: dx = -(g * (y * y)).
// CHECK-LABEL: func.func @reciprocal
// CHECK: %[[Y:.*]] = kiln.reciprocal %arg0
// CHECK: %[[G:.*]] = kiln.broadcast_in_dim %{{.*}}, dims = [] : tensor<f32> -> tensor<4xf32>
// CHECK: %[[Y2:.*]] = kiln.mul %[[Y]], %[[Y]]
// CHECK: %[[M:.*]] = kiln.mul %[[G]], %[[Y2]]
// CHECK: %[[DX:.*]] = kiln.neg %[[M]]
// CHECK: return %{{.*}}, %[[DX]]
func.func @reciprocal(%x: tensor<4xf32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %y = kiln.reciprocal %x : tensor<4xf32>
  %l = kiln.reduce sum %y, dims = [0] : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// stop_gradient: nothing flows back, so the parameter gets zeros and a remark.
// CHECK-LABEL: func.func @stop_gradient
// CHECK: %[[ZERO:.*]] = kiln.constant dense<0.000000e+00> : tensor<4xf32>
// CHECK-NOT: kiln.broadcast_in_dim
// CHECK: return %{{.*}}, %[[ZERO]]
// expected-warning@+1 {{parameter argument 0 of @stop_gradient receives no gradient from the loss; its gradient is zero}}
func.func @stop_gradient(%x: tensor<4xf32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %y = kiln.stop_gradient %x : tensor<4xf32>
  %l = kiln.reduce sum %y, dims = [0] : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// gelu (erf): one kiln.gelu_grad of the operand and the incoming gradient,
// dx = g * gelu'(x), not the derivative's expansion into primitives.
// CHECK-LABEL: func.func @gelu_erf
// CHECK: %[[G:.*]] = kiln.broadcast_in_dim %{{.*}}, dims = [] : tensor<f32> -> tensor<4xf32>
// CHECK-NEXT: %[[DX:.*]] = kiln.gelu_grad erf, %arg0, %[[G]] : tensor<4xf32>
// CHECK-NEXT: return %{{.*}}, %[[DX]]
func.func @gelu_erf(%x: tensor<4xf32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %y = kiln.gelu erf, %x : tensor<4xf32>
  %l = kiln.reduce sum %y, dims = [0] : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// gelu (tanh): likewise one kiln.gelu_grad tanh.
// CHECK-LABEL: func.func @gelu_tanh
// CHECK: %[[G:.*]] = kiln.broadcast_in_dim %{{.*}}, dims = [] : tensor<f32> -> tensor<4xf32>
// CHECK-NEXT: %[[DX:.*]] = kiln.gelu_grad tanh, %arg0, %[[G]] : tensor<4xf32>
// CHECK-NEXT: return %{{.*}}, %[[DX]]
func.func @gelu_tanh(%x: tensor<4xf32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %y = kiln.gelu tanh, %x : tensor<4xf32>
  %l = kiln.reduce sum %y, dims = [0] : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// gelu_grad (erf), its own gradient: d/d(dy) = gelu_grad(x, g) and
// d/dx = g * dy * gelu''(x) with gelu''(x) = phi(x) (2 - x^2).
// CHECK-LABEL: func.func @gelu_grad_erf
// CHECK-DAG: %[[INV_SQRT_2PI:.*]] = kiln.constant dense<0.398942292> : tensor<4xf32>
// CHECK-DAG: %[[TWO:.*]] = kiln.constant dense<2.000000e+00> : tensor<4xf32>
// CHECK: %[[G:.*]] = kiln.broadcast_in_dim %{{.*}}, dims = [] : tensor<f32> -> tensor<4xf32>
// CHECK: %[[X2:.*]] = kiln.mul %arg0, %arg0
// CHECK: %[[E:.*]] = kiln.exp
// CHECK: %[[PDF:.*]] = kiln.mul %[[E]], %[[INV_SQRT_2PI]]
// CHECK: %[[S:.*]] = kiln.sub %[[TWO]], %[[X2]]
// CHECK: %[[D2:.*]] = kiln.mul %[[PDF]], %[[S]]
// CHECK: %[[GD:.*]] = kiln.mul %[[G]], %arg1
// CHECK: %[[DX:.*]] = kiln.mul %[[GD]], %[[D2]]
// CHECK: %[[DDY:.*]] = kiln.gelu_grad erf, %arg0, %[[G]] : tensor<4xf32>
// CHECK: return %{{.*}}, %[[DX]], %[[DDY]]
func.func @gelu_grad_erf(%x: tensor<4xf32> {kiln.role = #kiln.role<parameter>}, %dy: tensor<4xf32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %y = kiln.gelu_grad erf, %x, %dy : tensor<4xf32>
  %l = kiln.reduce sum %y, dims = [0] : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// gelu_grad (tanh): t = tanh(c (x + k x^3)), u' = c (1 + 3 k x^2),
// d/dx = g * dy * (1 - t^2) (u' + 3 c k x^2 - x t u'^2).
// CHECK-LABEL: func.func @gelu_grad_tanh
// CHECK: %[[G:.*]] = kiln.broadcast_in_dim %{{.*}}, dims = [] : tensor<f32> -> tensor<4xf32>
// CHECK: %[[T:.*]] = kiln.tanh
// CHECK: kiln.mul %[[T]], %[[T]]
// CHECK: kiln.mul %arg0, %[[T]]
// CHECK: %[[GD:.*]] = kiln.mul %[[G]], %arg1
// CHECK: %[[DX:.*]] = kiln.mul %[[GD]], %{{.*}}
// CHECK: %[[DDY:.*]] = kiln.gelu_grad tanh, %arg0, %[[G]] : tensor<4xf32>
// CHECK: return %{{.*}}, %[[DX]], %[[DDY]]
func.func @gelu_grad_tanh(%x: tensor<4xf32> {kiln.role = #kiln.role<parameter>}, %dy: tensor<4xf32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %y = kiln.gelu_grad tanh, %x, %dy : tensor<4xf32>
  %l = kiln.reduce sum %y, dims = [0] : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// convert between floats: the gradient is converted back to the operand type.
// CHECK-LABEL: func.func @convert
// CHECK-SAME: tensor<4xbf16> {kiln.grad_of = 0 : i64, kiln.role = #kiln.role<gradient>}
// CHECK: %[[G:.*]] = kiln.broadcast_in_dim %{{.*}}, dims = [] : tensor<f32> -> tensor<4xf32>
// CHECK: %[[DX:.*]] = kiln.convert %[[G]] : tensor<4xf32> -> tensor<4xbf16>
// CHECK: return %{{.*}}, %[[DX]]
func.func @convert(%x: tensor<4xbf16> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %y = kiln.convert %x : tensor<4xbf16> -> tensor<4xf32>
  %l = kiln.reduce sum %y, dims = [0] : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// convert through an integer: integers carry no gradient.
// CHECK-LABEL: func.func @convert_int
// CHECK: %[[ZERO:.*]] = kiln.constant dense<0.000000e+00> : tensor<4xf32>
// CHECK: return %{{.*}}, %[[ZERO]]
// expected-warning@+1 {{parameter argument 0 of @convert_int receives no gradient from the loss; its gradient is zero}}
func.func @convert_int(%x: tensor<4xf32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %i = kiln.convert %x : tensor<4xf32> -> tensor<4xi32>
  %y = kiln.convert %i : tensor<4xi32> -> tensor<4xf32>
  %l = kiln.reduce sum %y, dims = [0] : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// add: both operands get g.
// CHECK-LABEL: func.func @add
// CHECK: %[[G:.*]] = kiln.broadcast_in_dim %{{.*}}, dims = [] : tensor<f32> -> tensor<4xf32>
// CHECK: return %{{.*}}, %[[G]], %[[G]]
func.func @add(%a: tensor<4xf32> {kiln.role = #kiln.role<parameter>}, %b: tensor<4xf32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %y = kiln.add %a, %b : tensor<4xf32>
  %l = kiln.reduce sum %y, dims = [0] : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// sub: g and -g.
// CHECK-LABEL: func.func @sub
// CHECK: %[[G:.*]] = kiln.broadcast_in_dim %{{.*}}, dims = [] : tensor<f32> -> tensor<4xf32>
// CHECK: %[[DB:.*]] = kiln.neg %[[G]]
// CHECK: return %{{.*}}, %[[G]], %[[DB]]
func.func @sub(%a: tensor<4xf32> {kiln.role = #kiln.role<parameter>}, %b: tensor<4xf32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %y = kiln.sub %a, %b : tensor<4xf32>
  %l = kiln.reduce sum %y, dims = [0] : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// mul: g * rhs and g * lhs.
// CHECK-LABEL: func.func @mul
// CHECK: %[[G:.*]] = kiln.broadcast_in_dim %{{.*}}, dims = [] : tensor<f32> -> tensor<4xf32>
// CHECK: %[[DA:.*]] = kiln.mul %[[G]], %arg1
// CHECK: %[[DB:.*]] = kiln.mul %[[G]], %arg0
// CHECK: return %{{.*}}, %[[DA]], %[[DB]]
func.func @mul(%a: tensor<4xf32> {kiln.role = #kiln.role<parameter>}, %b: tensor<4xf32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %y = kiln.mul %a, %b : tensor<4xf32>
  %l = kiln.reduce sum %y, dims = [0] : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// div: g / rhs, and -(g / rhs * y) for rhs.
// CHECK-LABEL: func.func @div
// CHECK: %[[Y:.*]] = kiln.div %arg0, %arg1
// CHECK: %[[G:.*]] = kiln.broadcast_in_dim %{{.*}}, dims = [] : tensor<f32> -> tensor<4xf32>
// CHECK: %[[DA:.*]] = kiln.div %[[G]], %arg1
// CHECK: %[[M:.*]] = kiln.mul %[[DA]], %[[Y]]
// CHECK: %[[DB:.*]] = kiln.neg %[[M]]
// CHECK: return %{{.*}}, %[[DA]], %[[DB]]
func.func @div(%a: tensor<4xf32> {kiln.role = #kiln.role<parameter>}, %b: tensor<4xf32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %y = kiln.div %a, %b : tensor<4xf32>
  %l = kiln.reduce sum %y, dims = [0] : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// max: the gradient goes to lhs where lhs >= rhs (ties included), else to rhs.
// CHECK-LABEL: func.func @max
// CHECK-DAG: %[[ZERO:.*]] = kiln.constant dense<0.000000e+00> : tensor<4xf32>
// CHECK: %[[G:.*]] = kiln.broadcast_in_dim %{{.*}}, dims = [] : tensor<f32> -> tensor<4xf32>
// CHECK: %[[P:.*]] = kiln.compare ge, %arg0, %arg1
// CHECK: %[[DA:.*]] = kiln.select %[[P]], %[[G]], %[[ZERO]]
// CHECK: %[[DB:.*]] = kiln.select %[[P]], %[[ZERO]], %[[G]]
// CHECK: return %{{.*}}, %[[DA]], %[[DB]]
func.func @max(%a: tensor<4xf32> {kiln.role = #kiln.role<parameter>}, %b: tensor<4xf32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %y = kiln.max %a, %b : tensor<4xf32>
  %l = kiln.reduce sum %y, dims = [0] : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// min: the gradient goes to lhs where lhs <= rhs (ties included), else to rhs.
// CHECK-LABEL: func.func @min
// CHECK-DAG: %[[ZERO:.*]] = kiln.constant dense<0.000000e+00> : tensor<4xf32>
// CHECK: %[[G:.*]] = kiln.broadcast_in_dim %{{.*}}, dims = [] : tensor<f32> -> tensor<4xf32>
// CHECK: %[[P:.*]] = kiln.compare le, %arg0, %arg1
// CHECK: %[[DA:.*]] = kiln.select %[[P]], %[[G]], %[[ZERO]]
// CHECK: %[[DB:.*]] = kiln.select %[[P]], %[[ZERO]], %[[G]]
// CHECK: return %{{.*}}, %[[DA]], %[[DB]]
func.func @min(%a: tensor<4xf32> {kiln.role = #kiln.role<parameter>}, %b: tensor<4xf32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %y = kiln.min %a, %b : tensor<4xf32>
  %l = kiln.reduce sum %y, dims = [0] : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// pow: g * rhs * lhs^(rhs - 1) for lhs; g * y * log(lhs) for rhs, with log(0) taken as 0.
// CHECK-LABEL: func.func @pow
// CHECK-DAG: %[[ZERO:.*]] = kiln.constant dense<0.000000e+00> : tensor<4xf32>
// CHECK-DAG: %[[ONE:.*]] = kiln.constant dense<1.000000e+00> : tensor<4xf32>
// CHECK: %[[Y:.*]] = kiln.pow %arg0, %arg1
// CHECK: %[[G:.*]] = kiln.broadcast_in_dim %{{.*}}, dims = [] : tensor<f32> -> tensor<4xf32>
// CHECK: %[[E:.*]] = kiln.sub %arg1, %[[ONE]]
// CHECK: %[[P:.*]] = kiln.pow %arg0, %[[E]]
// CHECK: %[[RP:.*]] = kiln.mul %arg1, %[[P]]
// CHECK: %[[DA:.*]] = kiln.mul %[[G]], %[[RP]]
// CHECK: %[[IS0:.*]] = kiln.compare eq, %arg0, %[[ZERO]]
// CHECK: %[[SAFE:.*]] = kiln.select %[[IS0]], %[[ONE]], %arg0
// CHECK: %[[LOG:.*]] = kiln.log %[[SAFE]]
// CHECK: %[[YL:.*]] = kiln.mul %[[Y]], %[[LOG]]
// CHECK: %[[DB:.*]] = kiln.mul %[[G]], %[[YL]]
// CHECK: return %{{.*}}, %[[DA]], %[[DB]]
func.func @pow(%a: tensor<4xf32> {kiln.role = #kiln.role<parameter>}, %b: tensor<4xf32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %y = kiln.pow %a, %b : tensor<4xf32>
  %l = kiln.reduce sum %y, dims = [0] : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// compare: the i1 result carries no gradient, so both parameters get zeros.
// CHECK-LABEL: func.func @compare
// CHECK: %[[ZERO:.*]] = kiln.constant dense<0.000000e+00> : tensor<4xf32>
// CHECK: return %{{.*}}, %[[ZERO]], %[[ZERO]]
// expected-warning@+2 {{parameter argument 0 of @compare receives no gradient from the loss; its gradient is zero}}
// expected-warning@+1 {{parameter argument 1 of @compare receives no gradient from the loss; its gradient is zero}}
func.func @compare(%a: tensor<4xf32> {kiln.role = #kiln.role<parameter>}, %b: tensor<4xf32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %p = kiln.compare lt, %a, %b : tensor<4xf32>
  %y = kiln.convert %p : tensor<4xi1> -> tensor<4xf32>
  %l = kiln.reduce sum %y, dims = [0] : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// select: on_true gets g where pred holds, on_false elsewhere; pred is an input.
// CHECK-LABEL: func.func @select
// CHECK-DAG: %[[ZERO:.*]] = kiln.constant dense<0.000000e+00> : tensor<4xf32>
// CHECK: %[[G:.*]] = kiln.broadcast_in_dim %{{.*}}, dims = [] : tensor<f32> -> tensor<4xf32>
// CHECK: %[[DA:.*]] = kiln.select %arg0, %[[G]], %[[ZERO]]
// CHECK: %[[DB:.*]] = kiln.select %arg0, %[[ZERO]], %[[G]]
// CHECK: return %{{.*}}, %[[DA]], %[[DB]]
func.func @select(%p: tensor<4xi1> {kiln.role = #kiln.role<input>}, %a: tensor<4xf32> {kiln.role = #kiln.role<parameter>}, %b: tensor<4xf32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %y = kiln.select %p, %a, %b : tensor<4xi1>, tensor<4xf32>
  %l = kiln.reduce sum %y, dims = [0] : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// iota and constant have no operands: the gradient stops at them.
// CHECK-LABEL: func.func @iota_constant
// CHECK-DAG: %[[K:.*]] = kiln.constant dense<2.000000e+00> : tensor<4xf32>
// CHECK: %[[G:.*]] = kiln.broadcast_in_dim %{{.*}}, dims = [] : tensor<f32> -> tensor<4xf32>
// CHECK: %[[DX:.*]] = kiln.mul %[[G]], %[[K]]
// CHECK: return %{{.*}}, %[[DX]]
func.func @iota_constant(%x: tensor<4xf32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %i = kiln.iota dim = 0 : tensor<4xf32>
  %k = kiln.constant dense<2.0> : tensor<4xf32>
  %s = kiln.add %x, %i : tensor<4xf32>
  %y = kiln.mul %s, %k : tensor<4xf32>
  %l = kiln.reduce sum %y, dims = [0] : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}
