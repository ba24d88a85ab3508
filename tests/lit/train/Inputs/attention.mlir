// A model with kiln.attention (causal, Tq = Tk = 4, two heads): q and k are
// the input scaled per feature by learned vectors, v the input plus a
// learned bias; the loss is the mean squared distance of the attention
// output to the input. Gradients reach all three parameters through
// kiln.attention_grad.
module attributes {kiln.training = #kiln.training<optimizer = sgd, learning_rate = 2.000000e-01>} {
  func.func @main(%x: tensor<2x2x4x3xf32> {kiln.name = "x", kiln.role = #kiln.role<input>},
                  %wq: tensor<3xf32> {kiln.name = "wq", kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = constant, value = 1.000000e+00>},
                  %wk: tensor<3xf32> {kiln.name = "wk", kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = constant, value = 5.000000e-01>},
                  %bv: tensor<3xf32> {kiln.name = "bv", kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = constant, value = 2.500000e-01>})
      -> (tensor<f32> {kiln.name = "loss", kiln.role = #kiln.role<loss>}) {
    %wqb = kiln.broadcast_in_dim %wq, dims = [3] : tensor<3xf32> -> tensor<2x2x4x3xf32>
    %wkb = kiln.broadcast_in_dim %wk, dims = [3] : tensor<3xf32> -> tensor<2x2x4x3xf32>
    %bvb = kiln.broadcast_in_dim %bv, dims = [3] : tensor<3xf32> -> tensor<2x2x4x3xf32>
    %q = kiln.mul %x, %wqb : tensor<2x2x4x3xf32>
    %k = kiln.mul %x, %wkb : tensor<2x2x4x3xf32>
    %v = kiln.add %x, %bvb : tensor<2x2x4x3xf32>
    %o, %lse = kiln.attention %q, %k, %v {scale = 0.57735026918962584 : f64, causal = true}
        : (tensor<2x2x4x3xf32>, tensor<2x2x4x3xf32>, tensor<2x2x4x3xf32>) -> (tensor<2x2x4x3xf32>, tensor<2x2x4xf32>)
    %d = kiln.sub %o, %x : tensor<2x2x4x3xf32>
    %s = kiln.mul %d, %d : tensor<2x2x4x3xf32>
    %l = kiln.reduce mean %s, dims = [0, 1, 2, 3] : tensor<2x2x4x3xf32> -> tensor<f32>
    return %l : tensor<f32>
  }
}
