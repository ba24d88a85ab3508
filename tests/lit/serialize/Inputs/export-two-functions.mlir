// Two functions: a graph file holds one.
func.func @first(%a: tensor<4xf32>) -> tensor<4xf32> {
  return %a : tensor<4xf32>
}
func.func @second(%a: tensor<4xf32>) -> tensor<4xf32> {
  return %a : tensor<4xf32>
}
