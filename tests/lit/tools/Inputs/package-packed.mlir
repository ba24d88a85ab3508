// A step whose dot_general batches over the operands' middle dimension, so
// the GEMM needs transposed (packed) copies of both operands: the package
// test's packing case. loss = sum(x . w) with x [5, 3, 4] and w [4, 3, 6]
// batched over their dimension 1.
module attributes {kiln.training = #kiln.training<optimizer = sgd, learning_rate = 1.0e-2>} {
func.func @main(%x: tensor<5x3x4xf32> {kiln.role = #kiln.role<input>, kiln.name = "x"}, %w: tensor<4x3x6xf32> {kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = glorot_uniform, seed = 3>, kiln.name = "w"}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %d = kiln.dot_general %x, %w, batch = [1] x [1], contract = [2] x [0] : (tensor<5x3x4xf32>, tensor<4x3x6xf32>) -> tensor<3x5x6xf32>
  %l = kiln.reduce sum %d, dims = [0, 1, 2] : tensor<3x5x6xf32> -> tensor<f32>
  return %l : tensor<f32>
}
}
