// A step with one convolution and its filter gradient as library calls:
// the package test's ConvParams case. loss = sum(conv2d(x, w)).
module attributes {kiln.training = #kiln.training<optimizer = sgd, learning_rate = 1.0e-2>} {
func.func @main(%x: tensor<2x3x8x8xf32> {kiln.role = #kiln.role<input>, kiln.name = "x"}, %w: tensor<4x3x3x3xf32> {kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = glorot_uniform, seed = 3>, kiln.name = "w"}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %y = kiln.conv2d %x, %w, strides = [2, 1], padding = [1, 1, 0, 0], dilation = [1, 1], groups = 1 : (tensor<2x3x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<2x4x4x6xf32>
  %l = kiln.reduce sum %y, dims = [0, 1, 2, 3] : tensor<2x4x4x6xf32> -> tensor<f32>
  return %l : tensor<f32>
}
}
