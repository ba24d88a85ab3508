// A fusion region: only the compiler makes these, a graph file has no room.
func.func @fused(%a: tensor<4xf32>) -> tensor<4xf32> {
  %f = kiln.fusion loop (%a, %a) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%x: tensor<4xf32>, %y: tensor<4xf32>):
    %s = kiln.add %x, %y : tensor<4xf32>
    kiln.yield %s : tensor<4xf32>
  }
  return %f : tensor<4xf32>
}
