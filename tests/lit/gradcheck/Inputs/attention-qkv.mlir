// A model with kiln.attention_qkv (causal, B 2, T 4, two heads of 3): the
// packed q, k and v are the input scaled per (part, head, feature) by a
// learned tensor plus a learned bias; the loss is the mean squared
// attention output. Gradients reach both parameters through
// kiln.attention_qkv_grad.
module attributes {kiln.training = #kiln.training<optimizer = sgd, learning_rate = 2.000000e-01>} {
  func.func @main(%x: tensor<2x4x3x2x3xf32> {kiln.name = "x", kiln.role = #kiln.role<input>},
                  %w: tensor<3x2x3xf32> {kiln.name = "w", kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = normal, scale = 1.000000e+00>},
                  %b: tensor<3x2x3xf32> {kiln.name = "b", kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = normal, scale = 5.000000e-01, seed = 1>})
      -> (tensor<f32> {kiln.name = "loss", kiln.role = #kiln.role<loss>}) {
    %wb = kiln.broadcast_in_dim %w, dims = [2, 3, 4] : tensor<3x2x3xf32> -> tensor<2x4x3x2x3xf32>
    %bb = kiln.broadcast_in_dim %b, dims = [2, 3, 4] : tensor<3x2x3xf32> -> tensor<2x4x3x2x3xf32>
    %xw = kiln.mul %x, %wb : tensor<2x4x3x2x3xf32>
    %qkv = kiln.add %xw, %bb : tensor<2x4x3x2x3xf32>
    %o, %lse = kiln.attention_qkv %qkv {scale = 0.57735026918962584 : f64, causal = true}
        : (tensor<2x4x3x2x3xf32>) -> (tensor<2x4x2x3xf32>, tensor<2x2x4xf32>)
    %s = kiln.mul %o, %o : tensor<2x4x2x3xf32>
    %l = kiln.reduce mean %s, dims = [0, 1, 2, 3] : tensor<2x4x2x3xf32> -> tensor<f32>
    return %l : tensor<f32>
  }
}
