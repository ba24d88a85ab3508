// A hand-written model with hand-computable numbers for inspect.test:
// FLOPs = dot 2*4*3*8 = 192, fusion (add + tanh) 12 + 12 = 24,
// cross-entropy 5*4*3 = 60, mean 4: 280 in all.
module attributes {kiln.training = #kiln.training<optimizer = sgd, learning_rate = 1.0e-01>} {
  func.func @main(%x: tensor<4x8xf32> {kiln.role = #kiln.role<input>, kiln.name = "x"},
                  %y: tensor<4xi32> {kiln.role = #kiln.role<label>},
                  %w: tensor<8x3xf32> {kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = zeros>, kiln.name = "w"},
                  %s: tensor<3xf16> {kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = ones>, kiln.name = "s"})
      -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
    %d = kiln.dot_general %x, %w, batch = [] x [], contract = [1] x [0] : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
    %e = kiln.fusion loop (%d, %d) : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32> {
    ^bb0(%a: tensor<4x3xf32>, %c: tensor<4x3xf32>):
      %t = kiln.add %a, %c : tensor<4x3xf32>
      %u = kiln.tanh %t : tensor<4x3xf32>
      kiln.yield %u : tensor<4x3xf32>
    }
    %l = kiln.softmax_cross_entropy %e, %y : (tensor<4x3xf32>, tensor<4xi32>) -> tensor<4xf32>
    %m = kiln.reduce mean %l, dims = [0] : tensor<4xf32> -> tensor<f32>
    return %m : tensor<f32>
  }
}
