// A model with parameters and a loss but no input or label: nothing to
// feed, for the runners' checks.
func.func @main(%w: tensor<4xf32> {kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = ones>, kiln.name = "w"})
    -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %r = kiln.reduce sum %w, dims = [0] : tensor<4xf32> -> tensor<f32>
  return %r : tensor<f32>
}
