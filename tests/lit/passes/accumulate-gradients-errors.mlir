// kiln-accumulate-gradients refuses a bad K and steps it cannot split.
// RUN: not kiln-opt %s --kiln-accumulate-gradients="grad-accum=0" 2>&1 | FileCheck %s --check-prefix=ZERO
// ZERO: error: kiln-accumulate-gradients: grad-accum=0: expected at least 1 micro-batch per step
// RUN: not kiln-opt %s -split-input-file --kiln-autodiff --kiln-accumulate-gradients="grad-accum=2" 2>&1 | FileCheck %s

// A step without batch arguments has nothing to split.
// CHECK: error: 'func.func' op kiln-accumulate-gradients: grad-accum=2 needs a batch to split, but @nobatch has no input or label argument
func.func @nobatch(%w: tensor<3xf32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %l = kiln.reduce sum %w, dims = [0] : tensor<3xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Batch arguments must agree on the batch dimension.
// CHECK: error: 'func.func' op kiln-accumulate-gradients: batch argument 2 has 5 rows, expected 4 (the batch dimension of the other batch arguments)
func.func @mismatch(%x: tensor<4x3xf32> {kiln.role = #kiln.role<input>},
                    %w: tensor<3xf32> {kiln.role = #kiln.role<parameter>},
                    %y: tensor<5xi32> {kiln.role = #kiln.role<label>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %wb = kiln.broadcast_in_dim %w, dims = [1] : tensor<3xf32> -> tensor<4x3xf32>
  %p = kiln.mul %x, %wb : tensor<4x3xf32>
  %l = kiln.reduce sum %p, dims = [0, 1] : tensor<4x3xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A scalar batch argument has no rows.
// CHECK: error: 'func.func' op kiln-accumulate-gradients: batch argument 0 must be a tensor with a static batch dimension first, but is 'tensor<f32>'
func.func @scalar(%x: tensor<f32> {kiln.role = #kiln.role<input>},
                  %w: tensor<f32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %p = kiln.mul %x, %w : tensor<f32>
  return %p : tensor<f32>
}

// -----

// An integer output without the batch dimension can be neither
// concatenated nor averaged.
// CHECK: error: 'func.func' op kiln-accumulate-gradients: result 1 ('tensor<i32>') has no batch dimension of 4 rows to concatenate and is not a float to average over the micro-batches
func.func @count(%x: tensor<4xf32> {kiln.role = #kiln.role<input>},
                 %w: tensor<4xf32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}, tensor<i32> {kiln.role = #kiln.role<output>}) {
  %p = kiln.mul %x, %w : tensor<4xf32>
  %l = kiln.reduce sum %p, dims = [0] : tensor<4xf32> -> tensor<f32>
  %i = kiln.argmax %p, dim = 0 : tensor<4xf32> -> tensor<i32>
  return %l, %i : tensor<f32>, tensor<i32>
}
