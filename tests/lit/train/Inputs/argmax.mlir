// A classifier whose loss weights each sample by whether the prediction
// (kiln.argmax of the logits) is right: correct samples count half.
module attributes {kiln.training = #kiln.training<optimizer = momentum, learning_rate = 1.000000e-01, momentum = 9.000000e-01>} {
  func.func @main(%x: tensor<8x12xf32> {kiln.name = "x", kiln.role = #kiln.role<input>},
                  %w: tensor<12x5xf32> {kiln.init = #kiln.init<kind = uniform, scale = 0.3>, kiln.name = "w", kiln.role = #kiln.role<parameter>},
                  %y: tensor<8xi32> {kiln.index_bound = 5 : i64, kiln.name = "labels", kiln.role = #kiln.role<label>})
      -> (tensor<f32> {kiln.name = "loss", kiln.role = #kiln.role<loss>}) {
    %logits = kiln.dot_general %x, %w, batch = [] x [], contract = [1] x [0] : (tensor<8x12xf32>, tensor<12x5xf32>) -> tensor<8x5xf32>
    %ce = kiln.softmax_cross_entropy %logits, %y : (tensor<8x5xf32>, tensor<8xi32>) -> tensor<8xf32>
    %pred = kiln.argmax %logits, dim = 1 : tensor<8x5xf32> -> tensor<8xi32>
    %right = kiln.compare eq, %pred, %y : tensor<8xi32>
    %half = kiln.constant dense<0.5> : tensor<8xf32>
    %one = kiln.constant dense<1.0> : tensor<8xf32>
    %weight = kiln.select %right, %half, %one : tensor<8xi1>, tensor<8xf32>
    %weighted = kiln.mul %ce, %weight : tensor<8xf32>
    %loss = kiln.reduce mean %weighted, dims = [0] : tensor<8xf32> -> tensor<f32>
    return %loss : tensor<f32>
  }
}
