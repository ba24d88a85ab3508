// The model of dropout.test: dropout on the input (rate 0.5) and on the
// hidden layer (rate 0.2), each with its own seed, both reading the step
// counter that kiln-apply-optimizer advances.
module attributes {kiln.training = #kiln.training<optimizer = adam, learning_rate = 1.000000e-02>} {
  func.func @main(%x: tensor<4x8xf32> {kiln.name = "x", kiln.role = #kiln.role<input>},
                  %labels: tensor<4xi32> {kiln.name = "labels", kiln.role = #kiln.role<label>},
                  %w1: tensor<8x6xf32> {kiln.name = "fc1.weight", kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = uniform, scale = 0.35>},
                  %w2: tensor<6x3xf32> {kiln.name = "fc2.weight", kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = uniform, scale = 0.4, seed = 1>},
                  %step: tensor<i64> {kiln.name = "step", kiln.role = #kiln.role<step>, kiln.init = #kiln.init<kind = zeros>})
      -> (tensor<f32> {kiln.name = "loss", kiln.role = #kiln.role<loss>}) {
    %d = kiln.dropout %x, %step, rate = 5.000000e-01, seed = 7 : tensor<4x8xf32>
    %h = kiln.dot_general %d, %w1, batch = [] x [], contract = [1] x [0] : (tensor<4x8xf32>, tensor<8x6xf32>) -> tensor<4x6xf32>
    %r = kiln.relu %h : tensor<4x6xf32>
    %e = kiln.dropout %r, %step, rate = 2.000000e-01, seed = 8 : tensor<4x6xf32>
    %y = kiln.dot_general %e, %w2, batch = [] x [], contract = [1] x [0] : (tensor<4x6xf32>, tensor<6x3xf32>) -> tensor<4x3xf32>
    %c = kiln.softmax_cross_entropy %y, %labels : (tensor<4x3xf32>, tensor<4xi32>) -> tensor<4xf32>
    %l = kiln.reduce mean %c, dims = [0] : tensor<4xf32> -> tensor<f32>
    return %l : tensor<f32>
  }
}
