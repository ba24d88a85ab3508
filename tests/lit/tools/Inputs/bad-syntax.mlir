// A syntax error: the argument list is not closed.
module {
  func.func @main(%a: tensor<2xf32> -> tensor<2xf32> {
    return %a : tensor<2xf32>
  }
}
