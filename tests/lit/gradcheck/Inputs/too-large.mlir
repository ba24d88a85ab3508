// A model within the dialect's limits (a 2^44-element f32 parameter is 64
// TiB) whose values the reference interpreter, at 8 bytes an element,
// cannot hold on any machine the tests run on.
module attributes {kiln.training = #kiln.training<optimizer = sgd, learning_rate = 1.000000e-01>} {
  func.func @main(%x: tensor<2xf32> {kiln.name = "x", kiln.role = #kiln.role<input>},
                  %w: tensor<17592186044416xf32> {kiln.name = "w", kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = zeros>})
      -> (tensor<f32> {kiln.name = "loss", kiln.role = #kiln.role<loss>}) {
    %0 = kiln.reduce sum %w, dims = [0] : tensor<17592186044416xf32> -> tensor<f32>
    %1 = kiln.reduce sum %x, dims = [0] : tensor<2xf32> -> tensor<f32>
    %2 = kiln.mul %0, %1 : tensor<f32>
    return %2 : tensor<f32>
  }
}
