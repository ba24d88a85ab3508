// A step with only loop and reduction fusions (no dot, no convolution):
// the package test's model. loss = sum((x * w - y)^2) over a 4x3 tensor.
module attributes {kiln.training = #kiln.training<optimizer = sgd, learning_rate = 1.0e-2>} {
func.func @main(%x: tensor<4x3xf32> {kiln.role = #kiln.role<input>, kiln.name = "x"}, %w: tensor<4x3xf32> {kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = glorot_uniform, seed = 3>, kiln.name = "w"}, %y: tensor<4x3xf32> {kiln.role = #kiln.role<label>, kiln.name = "y"}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %p = kiln.mul %x, %w : tensor<4x3xf32>
  %d = kiln.sub %p, %y : tensor<4x3xf32>
  %s = kiln.mul %d, %d : tensor<4x3xf32>
  %l = kiln.reduce sum %s, dims = [0, 1] : tensor<4x3xf32> -> tensor<f32>
  return %l : tensor<f32>
}
}
