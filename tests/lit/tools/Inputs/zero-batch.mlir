// A model whose data input has a batch dimension of 0 (valid IR: a tensor
// may be empty), for the runners' batch checks.
func.func @main(%x: tensor<0x4xf32> {kiln.role = #kiln.role<input>, kiln.name = "x"},
                %w: tensor<4xf32> {kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = ones>, kiln.name = "w"})
    -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %b = kiln.broadcast_in_dim %w, dims = [1] : tensor<4xf32> -> tensor<0x4xf32>
  %p = kiln.mul %x, %b : tensor<0x4xf32>
  %r = kiln.reduce sum %p, dims = [0, 1] : tensor<0x4xf32> -> tensor<f32>
  return %r : tensor<f32>
}
