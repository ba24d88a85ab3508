// kiln-gather-shards needs the optimizer's update of each shard whose
// parameters are still arguments.
// RUN: not kiln-opt %s --kiln-autodiff --kiln-distribute="strategy=zero1 world-size=2" --kiln-gather-shards 2>&1 | FileCheck %s
// CHECK: error: 'func.func' op kiln-gather-shards: shard argument 2 has no update result (run kiln-apply-optimizer first)
//
// Under zero3 the parameters are not arguments: nothing to gather, no error.
// RUN: kiln-opt %s --kiln-autodiff --kiln-distribute="strategy=zero3 world-size=2" --kiln-gather-shards | FileCheck %s --check-prefix=ZERO3
// ZERO3: kiln.all_gather
// ZERO3-NOT: kiln.all_gather
// ZERO3: return
func.func @step(
    %x: tensor<3xf32> {kiln.role = #kiln.role<input>},
    %w: tensor<3xf32> {kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = ones>, kiln.name = "w"})
    -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %p = kiln.mul %x, %w : tensor<3xf32>
  %s = kiln.reduce sum %p, dims = [0] : tensor<3xf32> -> tensor<f32>
  return %s : tensor<f32>
}
