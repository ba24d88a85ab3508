// A step with kiln.argmax of integers, which the CPU kernel model does not
// express (kiln-decompose expands a float argmax only): the package test's
// refusal case. loss = sum(x * w * argmax(int(x * w))).
module attributes {kiln.training = #kiln.training<optimizer = sgd, learning_rate = 1.0e-2>} {
func.func @main(%x: tensor<2x3xf32> {kiln.role = #kiln.role<input>, kiln.name = "x"}, %w: tensor<2x3xf32> {kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = ones>, kiln.name = "w"}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %m = kiln.mul %x, %w : tensor<2x3xf32>
  %n = kiln.convert %m : tensor<2x3xf32> -> tensor<2x3xi32>
  %i = kiln.argmax %n, dim = 1 : tensor<2x3xi32> -> tensor<2xi32>
  %f = kiln.convert %i : tensor<2xi32> -> tensor<2xf32>
  %b = kiln.broadcast_in_dim %f, dims = [0] : tensor<2xf32> -> tensor<2x3xf32>
  %p = kiln.mul %m, %b : tensor<2x3xf32>
  %l = kiln.reduce sum %p, dims = [0, 1] : tensor<2x3xf32> -> tensor<f32>
  return %l : tensor<f32>
}
}
