// func.call has no kiln::CostInterface: inspect lists it instead of guessing.
module {
  func.func private @helper(%a: tensor<2xf32>) -> tensor<2xf32> {
    %b = kiln.exp %a : tensor<2xf32>
    return %b : tensor<2xf32>
  }
  func.func @main(%a: tensor<2xf32> {kiln.role = #kiln.role<input>}) -> tensor<2xf32> {
    %b = kiln.neg %a : tensor<2xf32>
    %c = func.call @helper(%b) : (tensor<2xf32>) -> tensor<2xf32>
    return %c : tensor<2xf32>
  }
}
