// Attributes the format has no field for: on the module, an op, an
// argument and a result.
module attributes {my.note = "hello"} {
func.func @main(%a: tensor<4xf32> {my.tag = 1 : i64}) -> (tensor<4xf32> {my.out = true}) {
  %n = kiln.neg %a {my.hint = "fast"} : tensor<4xf32>
  return %n : tensor<4xf32>
}
}
