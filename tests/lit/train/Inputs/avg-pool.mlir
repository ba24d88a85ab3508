// The model of avg-pool.test: a convolution, average pooling over
// overlapping padded windows (3x3, stride 2, padding 1; padded elements
// counted), a dense layer and a cross-entropy loss.
module attributes {kiln.training = #kiln.training<optimizer = sgd, learning_rate = 1.000000e-01>} {
  func.func @main(%x: tensor<4x2x6x6xf32> {kiln.name = "x", kiln.role = #kiln.role<input>},
                  %labels: tensor<4xi32> {kiln.name = "labels", kiln.role = #kiln.role<label>},
                  %w: tensor<3x2x3x3xf32> {kiln.name = "conv.weight", kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = uniform, scale = 0.3>},
                  %fc: tensor<27x5xf32> {kiln.name = "fc.weight", kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = uniform, scale = 0.3, seed = 1>})
      -> (tensor<f32> {kiln.name = "loss", kiln.role = #kiln.role<loss>}) {
    %c = kiln.conv2d %x, %w, strides = [1, 1], padding = [1, 1, 1, 1], dilation = [1, 1], groups = 1 : (tensor<4x2x6x6xf32>, tensor<3x2x3x3xf32>) -> tensor<4x3x6x6xf32>
    %p = kiln.avg_pool2d %c, window = [3, 3], strides = [2, 2], padding = [1, 1, 1, 1] : tensor<4x3x6x6xf32> -> tensor<4x3x3x3xf32>
    %f = kiln.reshape %p : tensor<4x3x3x3xf32> -> tensor<4x27xf32>
    %y = kiln.dot_general %f, %fc, batch = [] x [], contract = [1] x [0] : (tensor<4x27xf32>, tensor<27x5xf32>) -> tensor<4x5xf32>
    %e = kiln.softmax_cross_entropy %y, %labels : (tensor<4x5xf32>, tensor<4xi32>) -> tensor<4xf32>
    %l = kiln.reduce mean %e, dims = [0] : tensor<4xf32> -> tensor<f32>
    return %l : tensor<f32>
  }
}
