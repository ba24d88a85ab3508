// The model of eval.test: a mean squared distance to a learned vector.
module attributes {kiln.training = #kiln.training<optimizer = sgd, learning_rate = 1.000000e-01>} {
  func.func @main(%x: tensor<4x3xf32> {kiln.name = "x", kiln.role = #kiln.role<input>}, %w: tensor<3xf32> {kiln.name = "w", kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = zeros>}) -> (tensor<f32> {kiln.name = "loss", kiln.role = #kiln.role<loss>}) {
    %b = kiln.broadcast_in_dim %w, dims = [1] : tensor<3xf32> -> tensor<4x3xf32>
    %d = kiln.sub %x, %b : tensor<4x3xf32>
    %s = kiln.mul %d, %d : tensor<4x3xf32>
    %l = kiln.reduce mean %s, dims = [0, 1] : tensor<4x3xf32> -> tensor<f32>
    return %l : tensor<f32>
  }
}
