// Verifies as IR, but parameter %w has no kiln.init: kiln-verify-roles in
// the compile pipeline rejects it.
module {
  func.func @main(%x: tensor<2x3xf32> {kiln.role = #kiln.role<input>},
                  %w: tensor<3x4xf32> {kiln.role = #kiln.role<parameter>})
      -> (tensor<2x4xf32> {kiln.role = #kiln.role<output>}) {
    %y = kiln.dot_general %x, %w, batch = [] x [], contract = [1] x [0] : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
    return %y : tensor<2x4xf32>
  }
}
