// A step with kiln.avg_pool2d, which the CPU kernel model does not express:
// the package test's refusal case. loss = sum(avg_pool2d(x * w)).
module attributes {kiln.training = #kiln.training<optimizer = sgd, learning_rate = 1.0e-2>} {
func.func @main(%x: tensor<2x3x4x4xf32> {kiln.role = #kiln.role<input>, kiln.name = "x"}, %w: tensor<2x3x4x4xf32> {kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = ones>, kiln.name = "w"}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %m = kiln.mul %x, %w : tensor<2x3x4x4xf32>
  %p = kiln.avg_pool2d %m, window = [2, 2], strides = [2, 2], padding = [0, 0, 0, 0] : tensor<2x3x4x4xf32> -> tensor<2x3x2x2xf32>
  %l = kiln.reduce sum %p, dims = [0, 1, 2, 3] : tensor<2x3x2x2xf32> -> tensor<f32>
  return %l : tensor<f32>
}
}
