// A step whose dots stay unfused (dot_general feeding a reduction): the
// package test's LibraryCall case. loss = sum(x . w).
module attributes {kiln.training = #kiln.training<optimizer = sgd, learning_rate = 1.0e-2>} {
func.func @main(%x: tensor<4x8xf32> {kiln.role = #kiln.role<input>, kiln.name = "x"}, %w: tensor<8x3xf32> {kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = glorot_uniform, seed = 3>, kiln.name = "w"}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %d = kiln.dot_general %x, %w, batch = [] x [], contract = [1] x [0] : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
  %l = kiln.reduce sum %d, dims = [0, 1] : tensor<4x3xf32> -> tensor<f32>
  return %l : tensor<f32>
}
}
