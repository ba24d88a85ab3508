// RUN: kiln-opt %s -split-input-file --kiln-apply-optimizer | FileCheck %s
// RUN: kiln-opt %s -split-input-file --kiln-apply-optimizer="optimizer=sgd lr=0.5" | FileCheck %s --check-prefix=OVERRIDE

// Adam adds two moments per parameter and a step, and returns the updated
// parameter, moments and step, each naming the argument it replaces.
// CHECK-LABEL: func.func @adam
// CHECK-SAME: %[[P:.*]]: tensor<3xf32> {{{.*}}kiln.name = "w", kiln.role = #kiln.role<parameter>}
// CHECK-SAME: %[[STEP:.*]]: tensor<i64> {kiln.init = #kiln.init<kind = zeros>, kiln.name = "step", kiln.role = #kiln.role<step>}
// CHECK-SAME: %[[M:.*]]: tensor<3xf32> {kiln.init = #kiln.init<kind = zeros>, kiln.name = "w.exp_avg", kiln.role = #kiln.role<optimizer_state>}
// CHECK-SAME: %[[V:.*]]: tensor<3xf32> {kiln.init = #kiln.init<kind = zeros>, kiln.name = "w.exp_avg_sq", kiln.role = #kiln.role<optimizer_state>}
// CHECK-SAME: -> (tensor<f32> {kiln.role = #kiln.role<loss>},
// CHECK-SAME: tensor<3xf32> {kiln.name = "w", kiln.role = #kiln.role<parameter>, kiln.updates = 0 : i64},
// CHECK-SAME: tensor<3xf32> {kiln.name = "w.exp_avg", kiln.role = #kiln.role<optimizer_state>, kiln.updates = 2 : i64},
// CHECK-SAME: tensor<3xf32> {kiln.name = "w.exp_avg_sq", kiln.role = #kiln.role<optimizer_state>, kiln.updates = 3 : i64},
// CHECK-SAME: tensor<i64> {kiln.name = "step", kiln.role = #kiln.role<step>, kiln.updates = 1 : i64})
// Bias corrections are computed from the step in f64.
// CHECK: %[[T:.*]] = kiln.convert %[[STEP]] : tensor<i64> -> tensor<f64>
// CHECK: kiln.pow
// CHECK: kiln.sqrt
// CHECK: %[[NEXT:.*]] = kiln.add %[[STEP]]
// CHECK: return {{.*}}, %[[NEXT]] : tensor<f32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<i64>
// OVERRIDE-LABEL: func.func @adam
// OVERRIDE-NOT: exp_avg
// OVERRIDE: return
module attributes {kiln.training = #kiln.training<optimizer = adam, learning_rate = 1.000000e-03>} {
  func.func @adam(%w: tensor<3xf32> {kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = zeros>, kiln.name = "w"}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}, tensor<3xf32> {kiln.role = #kiln.role<gradient>, kiln.grad_of = 0 : i64}) {
    %l = kiln.constant dense<0.0> : tensor<f32>
    return %l, %w : tensor<f32>, tensor<3xf32>
  }
}
// The pass writes the hyper-parameters it used back to the module.
// OVERRIDE: kiln.training = #kiln.training<optimizer = sgd, learning_rate = 5.000000e-01>

// -----

// An existing step argument is reused rather than a second one added.
// CHECK-LABEL: func.func @reuse_step
// CHECK-SAME: (%{{.*}}: tensor<2xf32> {{.*}}, %{{.*}}: tensor<i64> {{{.*}}kiln.role = #kiln.role<step>})
// CHECK-SAME: -> (tensor<f32> {kiln.role = #kiln.role<loss>}, tensor<2xf32> {{.*}}kiln.updates = 0 : i64}, tensor<i64> {{.*}}kiln.updates = 1 : i64})
module attributes {kiln.training = #kiln.training<optimizer = sgd, learning_rate = 1.000000e-01>} {
  func.func @reuse_step(%w: tensor<2xf32> {kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = zeros>}, %s: tensor<i64> {kiln.role = #kiln.role<step>}) -> (tensor<f32> {kiln.role = #kiln.role<loss>}, tensor<2xf32> {kiln.role = #kiln.role<gradient>, kiln.grad_of = 0 : i64}) {
    %l = kiln.constant dense<0.0> : tensor<f32>
    return %l, %w : tensor<f32>, tensor<2xf32>
  }
}

// -----

// A function without gradients is left alone.
// CHECK-LABEL: func.func @no_gradients(%{{.*}}: tensor<2xf32>) -> tensor<2xf32>
module {
  func.func @no_gradients(%x: tensor<2xf32>) -> tensor<2xf32> {
    return %x : tensor<2xf32>
  }
}
