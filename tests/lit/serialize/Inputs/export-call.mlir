// A non-kiln op in the body.
func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {
  %r = func.call @main(%a) : (tensor<4xf32>) -> tensor<4xf32>
  return %r : tensor<4xf32>
}
