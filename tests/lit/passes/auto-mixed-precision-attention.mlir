// RUN: kiln-opt %s --kiln-auto-mixed-precision="amp=bf16" | FileCheck %s
// RUN: kiln-opt %s --kiln-auto-mixed-precision="amp=fp16 loss-scaling=false" --kiln-autodiff | FileCheck %s --check-prefix=GRAD
// RUN: kiln-opt %s --kiln-auto-mixed-precision="amp=bf16 deny=attention" | FileCheck %s --check-prefix=DENY

// kiln.attention is in the allow list with dot_general: q, k and v are
// converted, out is bf16 and the log-sum-exp stays f32 (the op requires it);
// the result is converted back for the f32 reduce.
// CHECK-LABEL: func.func @attention
// CHECK: %[[Q:.*]] = kiln.convert %arg0 : tensor<1x2x4x8xf32> -> tensor<1x2x4x8xbf16>
// CHECK: %[[K:.*]] = kiln.convert %arg1 : tensor<1x2x4x8xf32> -> tensor<1x2x4x8xbf16>
// CHECK: %[[V:.*]] = kiln.convert %arg2 : tensor<1x2x4x8xf32> -> tensor<1x2x4x8xbf16>
// CHECK: %[[O:.*]], %{{.*}} = kiln.attention %[[Q]], %[[K]], %[[V]] {causal = true, scale = 5.000000e-01 : f64} : (tensor<1x2x4x8xbf16>, tensor<1x2x4x8xbf16>, tensor<1x2x4x8xbf16>) -> (tensor<1x2x4x8xbf16>, tensor<1x2x4xf32>)
// CHECK: kiln.convert %[[O]] : tensor<1x2x4x8xbf16> -> tensor<1x2x4x8xf32>
// Autodiff then writes kiln.attention_grad on the fp16 tensors and the f32
// lse; dq, dk and dv are fp16 and converted to f32 for the parameters.
// GRAD-LABEL: func.func @attention
// GRAD: kiln.attention_grad %{{.*}} : (tensor<1x2x4x8xf16>, tensor<1x2x4x8xf16>, tensor<1x2x4x8xf16>, tensor<1x2x4x8xf16>, tensor<1x2x4xf32>, tensor<1x2x4x8xf16>) -> (tensor<1x2x4x8xf16>, tensor<1x2x4x8xf16>, tensor<1x2x4x8xf16>)
// GRAD: kiln.convert %{{.*}} : tensor<1x2x4x8xf16> -> tensor<1x2x4x8xf32>
// With attention denied it stays f32.
// DENY-LABEL: func.func @attention
// DENY-NOT: kiln.convert
// DENY: kiln.attention %arg0, %arg1, %arg2 {{.*}} -> (tensor<1x2x4x8xf32>, tensor<1x2x4xf32>)
func.func @attention(%q: tensor<1x2x4x8xf32> {kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = zeros>},
                     %k: tensor<1x2x4x8xf32> {kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = zeros>},
                     %v: tensor<1x2x4x8xf32> {kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = zeros>})
    -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %o, %lse = kiln.attention %q, %k, %v {causal = true, scale = 0.5 : f64} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> (tensor<1x2x4x8xf32>, tensor<1x2x4xf32>)
  %l = kiln.reduce sum %o, dims = [0, 1, 2, 3] : tensor<1x2x4x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}
