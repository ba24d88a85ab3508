// A step with a kiln.send, which the CPU package has no thunk for (it runs
// collectives, not point-to-point transfers): the package test's refusal
// case. loss = sum(x * w), with x * w also sent to rank 1.
module attributes {kiln.training = #kiln.training<optimizer = sgd, learning_rate = 1.0e-2>} {
func.func @main(%x: tensor<2x3xf32> {kiln.role = #kiln.role<input>, kiln.name = "x"}, %w: tensor<2x3xf32> {kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = ones>, kiln.name = "w"}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %m = kiln.mul %x, %w : tensor<2x3xf32>
  kiln.send %m, peer = 1, channel = 0 : tensor<2x3xf32>
  %l = kiln.reduce sum %m, dims = [0, 1] : tensor<2x3xf32> -> tensor<f32>
  return %l : tensor<f32>
}
}
