// A model that also returns its parameter: the step returns the old w (an
// output) and its update, so the update cannot overwrite w in place.
module attributes {kiln.training = #kiln.training<optimizer = sgd, learning_rate = 1.0e-2>} {
func.func @main(%x: tensor<4x3xf32> {kiln.role = #kiln.role<input>, kiln.name = "x"}, %w: tensor<4x3xf32> {kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = glorot_uniform, seed = 3>, kiln.name = "w"}, %y: tensor<4x3xf32> {kiln.role = #kiln.role<label>, kiln.name = "y"}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}, tensor<4x3xf32> {kiln.role = #kiln.role<output>}) {
  %p = kiln.mul %x, %w : tensor<4x3xf32>
  %d = kiln.sub %p, %y : tensor<4x3xf32>
  %s = kiln.mul %d, %d : tensor<4x3xf32>
  %l = kiln.reduce sum %s, dims = [0, 1] : tensor<4x3xf32> -> tensor<f32>
  return %l, %w : tensor<f32>, tensor<4x3xf32>
}
}
