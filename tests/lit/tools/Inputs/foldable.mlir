// A reshape to its own type and an identity transpose: canonicalize folds
// both away.
module {
  func.func @main(%x: tensor<2x3xf32> {kiln.role = #kiln.role<input>})
      -> (tensor<2x3xf32> {kiln.role = #kiln.role<output>}) {
    %r = kiln.reshape %x : tensor<2x3xf32> -> tensor<2x3xf32>
    %t = kiln.transpose %r, permutation = [0, 1] : tensor<2x3xf32> -> tensor<2x3xf32>
    %n = kiln.neg %t : tensor<2x3xf32>
    return %n : tensor<2x3xf32>
  }
}
