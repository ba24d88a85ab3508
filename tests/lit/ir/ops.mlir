// RUN: kiln-opt %s | kiln-opt | FileCheck %s
// Parse/print round trip of every kiln op.

// CHECK-LABEL: func.func @elementwise
func.func @elementwise(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
  // CHECK: kiln.add %{{.*}}, %{{.*}} : tensor<4xf32>
  %0 = kiln.add %a, %b : tensor<4xf32>
  return %0 : tensor<4xf32>
}
