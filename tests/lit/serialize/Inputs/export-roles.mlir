// Two losses, and a result whose role differs from the argument it returns.
func.func @main(%a: tensor<f32> {kiln.role = #kiln.role<input>}, %b: tensor<f32>)
    -> (tensor<f32> {kiln.role = #kiln.role<loss>}, tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %n = kiln.neg %b : tensor<f32>
  return %a, %n : tensor<f32>, tensor<f32>
}
