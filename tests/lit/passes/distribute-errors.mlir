// kiln-distribute refuses what it does not implement yet, by name, and bad
// option values.
// RUN: not kiln-opt %s --kiln-distribute="strategy=zero2 grad-compression=bf16" 2>&1 | FileCheck %s --check-prefix=ZERO
// ZERO: error: kiln-distribute: grad-compression=bf16 is not supported with zero2 (only with data-parallel)
// RUN: not kiln-opt %s --kiln-distribute="strategy=pipeline" 2>&1 | FileCheck %s --check-prefix=OTHER
// OTHER: error: kiln-distribute: strategy pipeline is not supported yet (expected none, data-parallel, mirrored, zero1, zero2 or zero3)
// RUN: not kiln-opt %s --kiln-distribute="grad-accum=0" 2>&1 | FileCheck %s --check-prefix=ACCUM
// ACCUM: error: kiln-distribute: grad-accum=0: expected at least 1 micro-batch per step
// RUN: not kiln-opt %s --kiln-distribute="grad-compression=int8" 2>&1 | FileCheck %s --check-prefix=COMPRESS
// COMPRESS: error: kiln-distribute: grad-compression=int8: expected none, bf16 or fp16
// RUN: not kiln-opt %s --kiln-distribute="world-size=0" 2>&1 | FileCheck %s --check-prefix=WORLD
// WORLD: error: kiln-distribute: world-size must be at least 1, got 0
// RUN: not kiln-opt %s --kiln-distribute="bucket-mb=-1" 2>&1 | FileCheck %s --check-prefix=BUCKET
// BUCKET: error: kiln-distribute: bucket-mb must be positive, got -1
module {
  func.func @f(%w: tensor<3xf32> {kiln.role = #kiln.role<parameter>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
    %l = kiln.reduce sum %w, dims = [0] : tensor<3xf32> -> tensor<f32>
    return %l : tensor<f32>
  }
}
