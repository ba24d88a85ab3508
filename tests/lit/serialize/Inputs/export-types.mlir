// Types a graph file cannot hold: a dynamic shape, an unsupported element.
func.func @main(%a: tensor<?xf32>, %b: tensor<4xui8>, %c: memref<4xf32>) -> tensor<?xf32> {
  return %a : tensor<?xf32>
}
