// kiln-decompose=attention=false (the CUDA pipeline) keeps kiln.attention
// whole for the fused kernels, but one wider than they take (head or value
// dim past 256, kMaxFusedAttentionHeadDim in ir/KilnOps.h) still decomposes;
// one at 256 stays.
// RUN: kiln-opt %s --kiln-decompose=attention=false | FileCheck %s

// CHECK-LABEL: func.func @wide
// CHECK-NOT: kiln.attention
// CHECK: kiln.reduce max
// CHECK: return
func.func @wide(%q: tensor<1x1x2x300xf32>, %k: tensor<1x1x3x300xf32>, %v: tensor<1x1x3x4xf32>, %g: tensor<1x1x2x4xf32>) -> (tensor<1x1x2x4xf32>, tensor<1x1x2x300xf32>) {
  %o, %l = kiln.attention %q, %k, %v {scale = 0.5 : f64, causal = true} : (tensor<1x1x2x300xf32>, tensor<1x1x3x300xf32>, tensor<1x1x3x4xf32>) -> (tensor<1x1x2x4xf32>, tensor<1x1x2xf32>)
  %dq, %dk, %dv = kiln.attention_grad %q, %k, %v, %o, %l, %g {scale = 0.5 : f64, causal = true} : (tensor<1x1x2x300xf32>, tensor<1x1x3x300xf32>, tensor<1x1x3x4xf32>, tensor<1x1x2x4xf32>, tensor<1x1x2xf32>, tensor<1x1x2x4xf32>) -> (tensor<1x1x2x300xf32>, tensor<1x1x3x300xf32>, tensor<1x1x3x4xf32>)
  return %o, %dq : tensor<1x1x2x4xf32>, tensor<1x1x2x300xf32>
}


// CHECK-LABEL: func.func @at_limit
// CHECK: kiln.attention
// CHECK: kiln.attention_grad
func.func @at_limit(%q: tensor<1x1x2x256xf32>, %k: tensor<1x1x3x256xf32>, %v: tensor<1x1x3x256xf32>, %g: tensor<1x1x2x256xf32>) -> (tensor<1x1x2x256xf32>, tensor<1x1x2x256xf32>) {
  %o, %l = kiln.attention %q, %k, %v {scale = 0.5 : f64, causal = false} : (tensor<1x1x2x256xf32>, tensor<1x1x3x256xf32>, tensor<1x1x3x256xf32>) -> (tensor<1x1x2x256xf32>, tensor<1x1x2xf32>)
  %dq, %dk, %dv = kiln.attention_grad %q, %k, %v, %o, %l, %g {scale = 0.5 : f64, causal = false} : (tensor<1x1x2x256xf32>, tensor<1x1x3x256xf32>, tensor<1x1x3x256xf32>, tensor<1x1x2x256xf32>, tensor<1x1x2xf32>, tensor<1x1x2x256xf32>) -> (tensor<1x1x2x256xf32>, tensor<1x1x3x256xf32>, tensor<1x1x3x256xf32>)
  return %o, %dq : tensor<1x1x2x256xf32>, tensor<1x1x2x256xf32>
}
