// RUN: kiln-opt %s -split-input-file --kiln-auto-mixed-precision="amp=bf16" | FileCheck %s
// RUN: kiln-opt %s -split-input-file --kiln-auto-mixed-precision="amp=fp16" | FileCheck %s --check-prefix=FP16
// RUN: kiln-opt %s -split-input-file --kiln-auto-mixed-precision="amp=bf16 deny=dot_general allow=exp infer=reduce" | FileCheck %s --check-prefix=OVERRIDE
// RUN: kiln-opt %s -split-input-file --kiln-auto-mixed-precision="amp=fp16 loss-scaling=false" | FileCheck %s --check-prefix=NOSCALE
// RUN: kiln-opt %s -split-input-file --kiln-auto-mixed-precision="amp=bf16 infer=kiln.reduce" | FileCheck %s --check-prefix=INFER
// RUN: not kiln-opt %s -split-input-file --kiln-auto-mixed-precision="amp=bf16 deny=exp allow=exp" 2>&1 | FileCheck %s --check-prefix=TWICE
// RUN: not kiln-opt %s -split-input-file --kiln-auto-mixed-precision="amp=fp8" 2>&1 | FileCheck %s --check-prefix=BADAMP
// TWICE: error: kiln-auto-mixed-precision: 'exp' is named in two lists; expected each op in at most one
// BADAMP: error: kiln-auto-mixed-precision: amp=fp8: expected bf16 or fp16

// Allow list: a dense layer's matmul runs in bf16 on converted operands; the
// bias add and relu follow it (infer list); the parameters stay f32
// arguments; the softmax cross-entropy and the mean (deny list) take f32
// logits, so the loss stays f32.
// CHECK-LABEL: func.func @dense
// CHECK-SAME: %[[X:[a-z0-9]+]]: tensor<4x3xf32>
// CHECK-SAME: %[[W:[a-z0-9]+]]: tensor<3x2xf32>
// CHECK-SAME: %[[B:[a-z0-9]+]]: tensor<2xf32>
// CHECK-DAG: %[[XH:.*]] = kiln.convert %[[X]] : tensor<4x3xf32> -> tensor<4x3xbf16>
// CHECK-DAG: %[[WH:.*]] = kiln.convert %[[W]] : tensor<3x2xf32> -> tensor<3x2xbf16>
// CHECK: %[[D:.*]] = kiln.dot_general %[[XH]], %[[WH]], {{.*}} : (tensor<4x3xbf16>, tensor<3x2xbf16>) -> tensor<4x2xbf16>
// The bias is converted before it is broadcast: the cast touches 2
// elements, and the add stays a GEMM epilogue's bias.
// CHECK: %[[BC:.*]] = kiln.convert %[[B]] : tensor<2xf32> -> tensor<2xbf16>
// CHECK: %[[BH:.*]] = kiln.broadcast_in_dim %[[BC]], dims = [1] : tensor<2xbf16> -> tensor<4x2xbf16>
// CHECK: %[[A:.*]] = kiln.add %[[D]], %[[BH]] : tensor<4x2xbf16>
// CHECK: %[[R:.*]] = kiln.relu %[[A]] : tensor<4x2xbf16>
// CHECK: %[[RF:.*]] = kiln.convert %[[R]] : tensor<4x2xbf16> -> tensor<4x2xf32>
// CHECK: %[[CE:.*]] = kiln.softmax_cross_entropy %[[RF]], %{{.*}} : (tensor<4x2xf32>, tensor<4xi32>) -> tensor<4xf32>
// CHECK: %[[L:.*]] = kiln.reduce mean %[[CE]], dims = [0] : tensor<4xf32> -> tensor<f32>
// CHECK: return %[[L]] : tensor<f32>
// bf16 has f32's range: no loss scale.
// CHECK-NOT: loss_scale
// fp16 gets the loss scale as optimizer state.
// FP16-LABEL: func.func @dense
// FP16-SAME: tensor<f32> {kiln.init = #kiln.init<kind = constant, value = 6.553600e+04>, kiln.name = "loss_scale", kiln.role = #kiln.role<optimizer_state>}
// FP16-SAME: tensor<f32> {kiln.init = #kiln.init<kind = zeros>, kiln.name = "loss_scale.good_steps", kiln.role = #kiln.role<optimizer_state>}
// FP16-SAME: tensor<f32> {kiln.init = #kiln.init<kind = zeros>, kiln.name = "loss_scale.skipped_steps", kiln.role = #kiln.role<optimizer_state>}
// FP16: kiln.dot_general {{.*}} -> tensor<4x2xf16>
// NOSCALE-LABEL: func.func @dense
// NOSCALE-NOT: loss_scale
// NOSCALE: kiln.dot_general {{.*}} -> tensor<4x2xf16>
// Overrides: the matmul is denied, so nothing is low precision.
// OVERRIDE-LABEL: func.func @dense
// OVERRIDE-NOT: bf16
// OVERRIDE: return
module {
  func.func @dense(%x: tensor<4x3xf32> {kiln.role = #kiln.role<input>},
                   %w: tensor<3x2xf32> {kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = zeros>},
                   %b: tensor<2xf32> {kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = zeros>},
                   %y: tensor<4xi32> {kiln.role = #kiln.role<label>})
      -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
    %d = kiln.dot_general %x, %w, batch = [] x [], contract = [1] x [0] : (tensor<4x3xf32>, tensor<3x2xf32>) -> tensor<4x2xf32>
    %bb = kiln.broadcast_in_dim %b, dims = [1] : tensor<2xf32> -> tensor<4x2xf32>
    %a = kiln.add %d, %bb : tensor<4x2xf32>
    %r = kiln.relu %a : tensor<4x2xf32>
    %ce = kiln.softmax_cross_entropy %r, %y : (tensor<4x2xf32>, tensor<4xi32>) -> tensor<4xf32>
    %l = kiln.reduce mean %ce, dims = [0] : tensor<4xf32> -> tensor<f32>
    return %l : tensor<f32>
  }
}

// -----

// Deny list and infer-after-deny: exp of a bf16 matmul runs in f32, and the
// elementwise op after it stays f32 (it follows the deny decision); the
// next matmul converts its input back. A value read by two matmuls gets one
// convert per use, so autodiff adds the two gradients in f32.
// CHECK-LABEL: func.func @deny
// CHECK-SAME: %[[X:[a-z0-9]+]]: tensor<2x2xf32>
// CHECK: %[[X1:.*]] = kiln.convert %[[X]] : tensor<2x2xf32> -> tensor<2x2xbf16>
// CHECK: %[[X2:.*]] = kiln.convert %[[X]] : tensor<2x2xf32> -> tensor<2x2xbf16>
// CHECK: %[[D:.*]] = kiln.dot_general %[[X1]], %[[X2]], {{.*}} -> tensor<2x2xbf16>
// CHECK: %[[DF:.*]] = kiln.convert %[[D]] : tensor<2x2xbf16> -> tensor<2x2xf32>
// CHECK: %[[E:.*]] = kiln.exp %[[DF]] : tensor<2x2xf32>
// CHECK: %[[N:.*]] = kiln.neg %[[E]] : tensor<2x2xf32>
// CHECK: %[[NH:.*]] = kiln.convert %[[N]] : tensor<2x2xf32> -> tensor<2x2xbf16>
// CHECK: kiln.dot_general %[[NH]], {{.*}} -> tensor<2x2xbf16>
// The function's result keeps its f32 type.
// CHECK: %[[OUT:.*]] = kiln.convert %{{.*}} : tensor<2x2xbf16> -> tensor<2x2xf32>
// CHECK: return %[[OUT]] : tensor<2x2xf32>
// Overrides: exp is allowed (bf16), the matmuls are denied (f32), and the
// neg follows exp into bf16.
// OVERRIDE-LABEL: func.func @deny
// OVERRIDE: kiln.dot_general {{.*}} -> tensor<2x2xf32>
// OVERRIDE: kiln.exp %{{.*}} : tensor<2x2xbf16>
// OVERRIDE: kiln.neg %{{.*}} : tensor<2x2xbf16>
// OVERRIDE: kiln.dot_general {{.*}} : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
module {
  func.func @deny(%x: tensor<2x2xf32> {kiln.role = #kiln.role<input>}) -> tensor<2x2xf32> {
    %d = kiln.dot_general %x, %x, batch = [] x [], contract = [1] x [0] : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
    %e = kiln.exp %d : tensor<2x2xf32>
    %n = kiln.neg %e : tensor<2x2xf32>
    %o = kiln.dot_general %n, %x, batch = [] x [], contract = [1] x [0] : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
    return %o : tensor<2x2xf32>
  }
}

// -----

// Infer list: elementwise ops and data movement on f32 inputs alone are left
// alone (no cast is placed for nothing); an op on other float types (f64)
// keeps its types.
// CHECK-LABEL: func.func @infer_untouched
// CHECK-NOT: kiln.convert
// CHECK: kiln.tanh %{{.*}} : tensor<3xf32>
// CHECK: kiln.transpose
// CHECK: kiln.dot_general {{.*}} -> tensor<f64>
// CHECK-NOT: kiln.convert
// CHECK: return
module {
  func.func @infer_untouched(%x: tensor<3xf32>, %y: tensor<3xf64>) -> (tensor<3xf32>, tensor<f64>) {
    %t = kiln.tanh %x : tensor<3xf32>
    %r = kiln.reshape %t : tensor<3xf32> -> tensor<3x1xf32>
    %p = kiln.transpose %r, permutation = [1, 0] : tensor<3x1xf32> -> tensor<1x3xf32>
    %q = kiln.reshape %p : tensor<1x3xf32> -> tensor<3xf32>
    %d = kiln.dot_general %y, %y, batch = [] x [], contract = [0] x [0] : (tensor<3xf64>, tensor<3xf64>) -> tensor<f64>
    return %q, %d : tensor<3xf32>, tensor<f64>
  }
}

// -----

// A reduce (deny list) reads a bf16 matmul result through a convert back to
// f32; with infer=reduce it follows its input and stays bf16.
// CHECK-LABEL: func.func @reduce
// CHECK: %[[D:.*]] = kiln.dot_general {{.*}} -> tensor<2x2xbf16>
// CHECK: %[[DF:.*]] = kiln.convert %[[D]] : tensor<2x2xbf16> -> tensor<2x2xf32>
// CHECK: kiln.reduce sum %[[DF]], dims = [1] : tensor<2x2xf32> -> tensor<2xf32>
// INFER-LABEL: func.func @reduce
// INFER: %[[D:.*]] = kiln.dot_general {{.*}} -> tensor<2x2xbf16>
// INFER: %[[S:.*]] = kiln.reduce sum %[[D]], dims = [1] : tensor<2x2xbf16> -> tensor<2xbf16>
// INFER: %[[SF:.*]] = kiln.convert %[[S]] : tensor<2xbf16> -> tensor<2xf32>
// INFER: return %[[SF]]
module {
  func.func @reduce(%x: tensor<2x2xf32>) -> tensor<2xf32> {
    %d = kiln.dot_general %x, %x, batch = [] x [], contract = [1] x [0] : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
    %s = kiln.reduce sum %d, dims = [1] : tensor<2x2xf32> -> tensor<2xf32>
    return %s : tensor<2xf32>
  }
}

// -----

// Gradients accumulate in f32: a parameter read by two bf16 matmuls gets one
// convert per use, so after kiln-autodiff each use's bf16 gradient is
// converted to f32 before the two are added, and the gradient result is f32.
// RUN: kiln-opt %s -split-input-file --kiln-auto-mixed-precision="amp=bf16" --kiln-autodiff | FileCheck %s --check-prefix=GRAD
// GRAD-LABEL: func.func @shared
// GRAD-SAME: -> (tensor<f32> {kiln.role = #kiln.role<loss>}, tensor<2x2xf32> {kiln.grad_of = 1 : i64, kiln.role = #kiln.role<gradient>})
// GRAD: kiln.reduce sum
// GRAD: %[[G1:.*]] = kiln.convert %{{.*}} : tensor<2x2xbf16> -> tensor<2x2xf32>
// GRAD: %[[G2:.*]] = kiln.convert %{{.*}} : tensor<2x2xbf16> -> tensor<2x2xf32>
// GRAD: %[[SUM:.*]] = kiln.add %[[G1]], %[[G2]] : tensor<2x2xf32>
// GRAD: return %{{.*}}, %[[SUM]] : tensor<f32>, tensor<2x2xf32>
module {
  func.func @shared(%x: tensor<2x2xf32> {kiln.role = #kiln.role<input>},
                    %w: tensor<2x2xf32> {kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = zeros>})
      -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
    %a = kiln.dot_general %x, %w, batch = [] x [], contract = [1] x [0] : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
    %b = kiln.dot_general %a, %w, batch = [] x [], contract = [1] x [0] : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
    %l = kiln.reduce sum %b, dims = [0, 1] : tensor<2x2xf32> -> tensor<f32>
    return %l : tensor<f32>
  }
}
