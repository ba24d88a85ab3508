// RUN: kiln-opt %s -split-input-file --kiln-fuse | FileCheck %s
// RUN: kiln-opt %s -split-input-file --kiln-fuse=max-inputs=2 | FileCheck %s --check-prefix=LIMIT
// RUN: kiln-opt %s -split-input-file --kiln-fuse -mlir-print-debuginfo -mlir-print-local-scope | FileCheck %s --check-prefix=LOC
// RUN: not kiln-opt %s -split-input-file --kiln-fuse=max-inputs=0 2>&1 | FileCheck %s --check-prefix=BAD

// No cycle: %a feeds the matmul and, beside it, the multiply that reads the matmul; one kernel for %a and the multiply would wait for itself.
// CHECK-LABEL: func.func @cycle
// CHECK: %[[A:.*]] = kiln.fusion loop
// CHECK: kiln.exp
// CHECK: %[[D:.*]] = kiln.dot_general %[[A]]
// CHECK: %[[B:.*]] = kiln.fusion loop(%[[A]], %[[D]])
// CHECK: kiln.mul
// CHECK: return %[[B]]
func.func @cycle(%x: tensor<64x64xf32>, %w: tensor<64x64xf32>) -> tensor<64x64xf32> {
  %a = kiln.exp %x : tensor<64x64xf32>
  %d = kiln.dot_general %a, %w, batch = [] x [], contract = [1] x [0] : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
  %b = kiln.mul %a, %d : tensor<64x64xf32>
  return %b : tensor<64x64xf32>
}

// -----

// Never duplicated: a reduce with two consumers is computed once; one consumer shares its kernel, the other reads its result.
// CHECK-LABEL: func.func @reduce_once
// CHECK: %[[R:.*]]:2 = kiln.fusion reduction
// CHECK: kiln.reduce sum
// CHECK: kiln.mul
// CHECK: kiln.all_reduce
// CHECK: kiln.fusion loop(%[[R]]#0,
// CHECK-NOT: kiln.reduce
// CHECK: return
func.func @reduce_once(%x: tensor<64x64xf32>, %y: tensor<64xf32>) -> (tensor<64xf32>, tensor<64xf32>) {
  %s = kiln.reduce sum %x, dims = [1] : tensor<64x64xf32> -> tensor<64xf32>
  %a = kiln.mul %s, %y : tensor<64xf32>
  %r = kiln.all_reduce sum %a : tensor<64xf32>
  %b = kiln.add %s, %r : tensor<64xf32>
  return %r, %b : tensor<64xf32>, tensor<64xf32>
}

// -----

// Operand limit: with max-inputs=2 a chain of adds over four inputs becomes three kernels of two inputs each (one kernel by default).
// CHECK-LABEL: func.func @operand_limit
// CHECK: kiln.fusion loop(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}})
// CHECK-NOT: kiln.fusion
// CHECK: return
// LIMIT-LABEL: func.func @operand_limit
// LIMIT: %[[A:.*]] = kiln.fusion loop(%{{[a-z0-9]*}}, %{{[a-z0-9]*}}) :
// LIMIT: %[[B:.*]] = kiln.fusion loop(%[[A]], %{{[a-z0-9]*}}) :
// LIMIT: %[[C:.*]] = kiln.fusion loop(%[[B]], %{{[a-z0-9]*}}) :
// LIMIT: return %[[C]]
func.func @operand_limit(%x1: tensor<256xf32>, %x2: tensor<256xf32>, %x3: tensor<256xf32>, %x4: tensor<256xf32>) -> tensor<256xf32> {
  %a = kiln.add %x1, %x2 : tensor<256xf32>
  %b = kiln.add %a, %x3 : tensor<256xf32>
  %c = kiln.add %b, %x4 : tensor<256xf32>
  return %c : tensor<256xf32>
}

// -----

// Locations: a fusion's location fuses its ops' locations, so a dump names the graph nodes it came from.
// LOC-LABEL: func.func @names
// LOC: kiln.fusion loop
// LOC: } loc(fused["fc1.bias_add", "fc1.relu"])
// BAD: kiln-fuse expects max-inputs and max-outputs of at least 1, but got 0 and 32
func.func @names(%x: tensor<16xf32>, %b: tensor<16xf32>) -> tensor<16xf32> {
  %a = kiln.add %x, %b : tensor<16xf32> loc("fc1.bias_add")
  %r = kiln.relu %a : tensor<16xf32> loc("fc1.relu")
  return %r : tensor<16xf32>
}
