// RUN: kiln-opt %s --kiln-auto-mixed-precision="amp=bf16" --kiln-autodiff | FileCheck %s
// RUN: kiln-opt %s --kiln-auto-mixed-precision="amp=bf16 deny=gelu,gelu_grad" --kiln-autodiff | FileCheck %s --check-prefix=DENY

// kiln.gelu and kiln.gelu_grad are on the infer list (every elementwise op
// is): under bf16 the GELU after a bf16 matmul runs in bf16, and so does
// its gradient, one kiln.gelu_grad (computing in f32 inside, rounding once)
// rather than ~20 bf16 ops with their constants rounded to bf16.
// CHECK-LABEL: func.func @mlp
// CHECK: %[[H:.*]] = kiln.dot_general {{.*}} -> tensor<4x8xbf16>
// CHECK: kiln.gelu tanh, %[[H]] : tensor<4x8xbf16>
// CHECK: %[[DG:.*]] = kiln.dot_general {{.*}} -> tensor<4x8xbf16>
// CHECK: kiln.gelu_grad tanh, %[[H]], %[[DG]] : tensor<4x8xbf16>
// CHECK-NOT: kiln.tanh
// CHECK: return
// Denied, both run in f32 on converted operands.
// DENY-LABEL: func.func @mlp
// DENY: kiln.gelu tanh, %{{.*}} : tensor<4x8xf32>
// DENY: kiln.gelu_grad tanh, %{{.*}}, %{{.*}} : tensor<4x8xf32>
func.func @mlp(%x: tensor<4x3xf32> {kiln.role = #kiln.role<input>},
               %w: tensor<3x8xf32> {kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = zeros>},
               %w2: tensor<8x2xf32> {kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = zeros>},
               %y: tensor<4xi32> {kiln.role = #kiln.role<label>})
    -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %h = kiln.dot_general %x, %w, batch = [] x [], contract = [1] x [0] : (tensor<4x3xf32>, tensor<3x8xf32>) -> tensor<4x8xf32>
  %g = kiln.gelu tanh, %h : tensor<4x8xf32>
  %o = kiln.dot_general %g, %w2, batch = [] x [], contract = [1] x [0] : (tensor<4x8xf32>, tensor<8x2xf32>) -> tensor<4x2xf32>
  %ce = kiln.softmax_cross_entropy %o, %y : (tensor<4x2xf32>, tensor<4xi32>) -> tensor<4xf32>
  %l = kiln.reduce mean %ce, dims = [0] : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}
