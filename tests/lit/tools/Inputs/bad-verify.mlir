// Parses, but kiln.add's operands and result disagree (the verifier's job).
module {
  func.func @main(%a: tensor<2x3xf32> {kiln.role = #kiln.role<input>},
                  %b: tensor<3x2xf32> {kiln.role = #kiln.role<input>}) -> tensor<2x3xf32> {
    %c = "kiln.add"(%a, %b) : (tensor<2x3xf32>, tensor<3x2xf32>) -> tensor<2x3xf32>
    return %c : tensor<2x3xf32>
  }
}
