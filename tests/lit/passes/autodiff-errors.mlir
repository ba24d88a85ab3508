// RUN: kiln-opt %s -split-input-file -verify-diagnostics -kiln-autodiff
//
// kiln-autodiff's errors: each names the op or the function at fault and
// says what was expected.

// A collective on the path from a parameter to the loss has no gradient
// rule, except a sum or mean all-reduce and an all-gather
// (ir/gradients/Collectives.cpp).
func.func @collective_on_path(%w: tensor<4xf32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  // expected-error@+1 {{'kiln.collective_broadcast' op is on a path from a parameter to the loss of @collective_on_path but has no gradient rule (it does not implement the Differentiable interface)}}
  %s = kiln.collective_broadcast %w, root = 0 : tensor<4xf32>
  %l = kiln.reduce sum %s, dims = [0] : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

func.func @all_reduce_max_on_path(%w: tensor<4xf32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  // expected-error@+1 {{'kiln.all_reduce' op is on a path to the loss, but only a sum or mean all-reduce has a gradient rule (found max)}}
  %s = kiln.all_reduce max %w : tensor<4xf32>
  %l = kiln.reduce sum %s, dims = [0] : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A fusion is formed after autodiff; one on the path is an error.
func.func @fusion_on_path(%w: tensor<4xf32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  // expected-error@+1 {{'kiln.fusion' op is on a path from a parameter to the loss of @fusion_on_path but has no gradient rule}}
  %f = kiln.fusion loop (%w) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    %r = kiln.relu %a : tensor<4xf32>
    kiln.yield %r : tensor<4xf32>
  }
  %l = kiln.reduce sum %f, dims = [0] : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Two results marked as the loss.
// expected-error@+1 {{@two_losses marks results 0 and 1 as the loss; expected one loss result}}
func.func @two_losses(%w: tensor<f32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}, tensor<f32> {kiln.role = #kiln.role<loss>}) {
  return %w, %w : tensor<f32>, tensor<f32>
}

// -----

// The loss must be a 0-d float tensor.
// expected-error@+1 {{loss result 0 of @vector_loss must be a 0-d float tensor, but is 'tensor<4xf32>'}}
func.func @vector_loss(%w: tensor<4xf32> {kiln.role = #kiln.role<parameter>}) -> (tensor<4xf32> {kiln.role = #kiln.role<loss>}) {
  return %w : tensor<4xf32>
}

// -----

// A function that already returns gradients is not differentiated again.
// expected-error@+1 {{@twice already returns gradients (result 1); kiln-autodiff runs once}}
func.func @twice(%w: tensor<f32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}, tensor<f32> {kiln.role = #kiln.role<gradient>, kiln.grad_of = 0 : i64}) {
  %one = kiln.constant dense<1.0> : tensor<f32>
  return %w, %one : tensor<f32>, tensor<f32>
}

// -----

// kiln.attention's lse result carries no gradient: one flowing into it is an
// error on the attention op.
func.func @attention_lse_on_path(%q: tensor<1x1x2x2xf32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  // expected-error@+1 {{'kiln.attention' op has a gradient flowing into its lse result (#1), which is not differentiable: only the out result (#0) may reach the loss}}
  %o, %l = kiln.attention %q, %q, %q {scale = 0.5 : f64, causal = true} : (tensor<1x1x2x2xf32>, tensor<1x1x2x2xf32>, tensor<1x1x2x2xf32>) -> (tensor<1x1x2x2xf32>, tensor<1x1x2xf32>)
  %s = kiln.reduce sum %l, dims = [0, 1, 2] : tensor<1x1x2xf32> -> tensor<f32>
  return %s : tensor<f32>
}

// -----

// kiln.attention_grad is not differentiable (no second-order gradients).
func.func @attention_grad_on_path(%q: tensor<1x1x2x2xf32> {kiln.role = #kiln.role<parameter>}, %o: tensor<1x1x2x2xf32>, %l: tensor<1x1x2xf32>) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  // expected-error@+1 {{'kiln.attention_grad' op is not differentiable: a gradient flows through it to the loss (second-order gradients of attention are not supported)}}
  %dq, %dk, %dv = kiln.attention_grad %q, %q, %q, %o, %l, %o {scale = 0.5 : f64, causal = false} : (tensor<1x1x2x2xf32>, tensor<1x1x2x2xf32>, tensor<1x1x2x2xf32>, tensor<1x1x2x2xf32>, tensor<1x1x2xf32>, tensor<1x1x2x2xf32>) -> (tensor<1x1x2x2xf32>, tensor<1x1x2x2xf32>, tensor<1x1x2x2xf32>)
  %s = kiln.reduce sum %dq, dims = [0, 1, 2, 3] : tensor<1x1x2x2xf32> -> tensor<f32>
  return %s : tensor<f32>
}
