// RUN: kiln-opt %s -split-input-file --kiln-fuse=gelu-grad-epilogues=true | FileCheck %s --check-prefix=CUDA
// RUN: kiln-opt %s -split-input-file --kiln-fuse | FileCheck %s --check-prefix=CPU

// The backward of a GEMM then tanh-GELU: dH = dY . W^T, dA = gelu_grad(A, dH).
// With gelu-grad-epilogues (the CUDA pipeline) the gelu_grad joins the
// matmul's gemm fusion, the pre-activation A a fusion input (cuBLASLt's
// DGELU epilogue reads it as AUX); without (the CPU pipeline) the matmul is
// a plain library call and gelu_grad a loop kernel.
// CUDA-LABEL: func.func @dgelu
// CUDA-SAME: (%[[DY:.*]]: tensor<64x32xf32>, %[[W:.*]]: tensor<128x32xf32>, %[[A:.*]]: tensor<64x128xf32>)
// CUDA: %[[G:.*]] = kiln.fusion gemm(%[[DY]], %[[W]], %[[A]])
// CUDA-NEXT: ^bb0(%[[DYA:.*]]: tensor<64x32xf32>, %[[WA:.*]]: tensor<128x32xf32>, %[[AA:.*]]: tensor<64x128xf32>):
// CUDA-NEXT: %[[D:.*]] = kiln.dot_general %[[DYA]], %[[WA]]
// CUDA-NEXT: %[[R:.*]] = kiln.gelu_grad tanh, %[[AA]], %[[D]] : tensor<64x128xf32>
// CUDA-NEXT: kiln.yield %[[R]]
// CUDA-NEXT: }
// CUDA-NEXT: return %[[G]]
// CPU-LABEL: func.func @dgelu
// CPU: %[[D:.*]] = kiln.dot_general
// CPU-NOT: kiln.fusion gemm
// CPU: kiln.fusion loop(%{{.*}}, %[[D]])
// CPU: kiln.gelu_grad tanh
func.func @dgelu(%dy: tensor<64x32xf32>, %w: tensor<128x32xf32>, %a: tensor<64x128xf32>) -> tensor<64x128xf32> {
  %dh = kiln.dot_general %dy, %w, batch = [] x [], contract = [1] x [1] : (tensor<64x32xf32>, tensor<128x32xf32>) -> tensor<64x128xf32>
  %da = kiln.gelu_grad tanh, %a, %dh : tensor<64x128xf32>
  return %da : tensor<64x128xf32>
}

// -----

// The same in bf16 (mixed precision), the usual case.
// CUDA-LABEL: func.func @dgelu_bf16
// CUDA: kiln.fusion gemm(
// CUDA: kiln.dot_general
// CUDA-NEXT: kiln.gelu_grad tanh, %{{.*}}, %{{.*}} : tensor<2x16x64xbf16>
// CUDA-NEXT: kiln.yield
func.func @dgelu_bf16(%dy: tensor<2x16x32xbf16>, %w: tensor<64x32xbf16>, %a: tensor<2x16x64xbf16>) -> tensor<2x16x64xbf16> {
  %dh = kiln.dot_general %dy, %w, batch = [] x [], contract = [2] x [1] : (tensor<2x16x32xbf16>, tensor<64x32xbf16>) -> tensor<2x16x64xbf16>
  %da = kiln.gelu_grad tanh, %a, %dh : tensor<2x16x64xbf16>
  return %da : tensor<2x16x64xbf16>
}

// -----

// Not DGELU: the erf form, the product read as x rather than dy, a product
// with a second user, and f64 (cuBLASLt has no f64 epilogues). Each matmul
// stays a plain library call.
// CUDA-LABEL: func.func @not_dgelu
// CUDA-COUNT-4: kiln.dot_general
// CUDA-NOT: kiln.fusion gemm
// CUDA: return
func.func @not_dgelu(%x: tensor<64x32xf32>, %w: tensor<32x16xf32>, %a: tensor<64x16xf32>, %x64: tensor<64x32xf64>, %w64: tensor<32x16xf64>, %a64: tensor<64x16xf64>) -> (tensor<64x16xf32>, tensor<64x16xf32>, tensor<64x16xf32>, tensor<64x16xf32>, tensor<64x16xf64>) {
  %d1 = kiln.dot_general %x, %w, batch = [] x [], contract = [1] x [0] : (tensor<64x32xf32>, tensor<32x16xf32>) -> tensor<64x16xf32>
  %g1 = kiln.gelu_grad erf, %a, %d1 : tensor<64x16xf32>
  %d2 = kiln.dot_general %x, %w, batch = [] x [], contract = [1] x [0] : (tensor<64x32xf32>, tensor<32x16xf32>) -> tensor<64x16xf32>
  %g2 = kiln.gelu_grad tanh, %d2, %a : tensor<64x16xf32>
  %d3 = kiln.dot_general %x, %w, batch = [] x [], contract = [1] x [0] : (tensor<64x32xf32>, tensor<32x16xf32>) -> tensor<64x16xf32>
  %g3 = kiln.gelu_grad tanh, %a, %d3 : tensor<64x16xf32>
  %d4 = kiln.dot_general %x64, %w64, batch = [] x [], contract = [1] x [0] : (tensor<64x32xf64>, tensor<32x16xf64>) -> tensor<64x16xf64>
  %g4 = kiln.gelu_grad tanh, %a64, %d4 : tensor<64x16xf64>
  return %g1, %g2, %g3, %d3, %g4 : tensor<64x16xf32>, tensor<64x16xf32>, tensor<64x16xf32>, tensor<64x16xf32>, tensor<64x16xf64>
}
