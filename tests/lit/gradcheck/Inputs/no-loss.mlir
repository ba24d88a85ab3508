func.func @main(%w: tensor<3xf32> {kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = zeros>}) -> tensor<3xf32> {
  return %w : tensor<3xf32>
}
