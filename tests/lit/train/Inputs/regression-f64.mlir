// A two-layer regression in f64: parameters, Adam's moments and the loss
// are all f64.
module attributes {kiln.training = #kiln.training<optimizer = adam, learning_rate = 1.000000e-02>} {
  func.func @main(%x: tensor<4x3xf64> {kiln.name = "x", kiln.role = #kiln.role<input>},
                  %w1: tensor<3x6xf64> {kiln.init = #kiln.init<kind = uniform, scale = 0.5>, kiln.name = "fc1.weight", kiln.role = #kiln.role<parameter>},
                  %w2: tensor<6x2xf64> {kiln.init = #kiln.init<kind = uniform, scale = 0.5>, kiln.name = "fc2.weight", kiln.role = #kiln.role<parameter>},
                  %t: tensor<4x2xf64> {kiln.name = "target", kiln.role = #kiln.role<label>})
      -> (tensor<f64> {kiln.name = "loss", kiln.role = #kiln.role<loss>}) {
    %h = kiln.dot_general %x, %w1, batch = [] x [], contract = [1] x [0] : (tensor<4x3xf64>, tensor<3x6xf64>) -> tensor<4x6xf64>
    %a = kiln.tanh %h : tensor<4x6xf64>
    %y = kiln.dot_general %a, %w2, batch = [] x [], contract = [1] x [0] : (tensor<4x6xf64>, tensor<6x2xf64>) -> tensor<4x2xf64>
    %d = kiln.sub %y, %t : tensor<4x2xf64>
    %s = kiln.mul %d, %d : tensor<4x2xf64>
    %l = kiln.reduce mean %s, dims = [0, 1] : tensor<4x2xf64> -> tensor<f64>
    return %l : tensor<f64>
  }
}
