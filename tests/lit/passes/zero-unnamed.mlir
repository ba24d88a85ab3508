// RUN: kiln-opt %s --kiln-autodiff --kiln-distribute="strategy=zero2 world-size=2" --kiln-apply-optimizer --kiln-gather-shards | FileCheck %s
//
// A parameter without a kiln.name gets the package's name for it (argN), so
// its shard records it and kiln-gather-shards finds it again. Its 3
// elements are padded to 4 for two ranks.
// CHECK-LABEL: func.func @unnamed
// CHECK-SAME: %arg1: tensor<3xf32> {kiln.init = #kiln.init<kind = ones>, kiln.name = "arg1", kiln.role = #kiln.role<parameter>}
// CHECK-SAME: tensor<2xf32> {kiln.name = "zero.bucket0", kiln.role = #kiln.role<parameter>, kiln.shard = {bucket = 0 : i64, length = 3 : i64, params = [{init = #kiln.init<kind = ones>, name = "arg1", offset = 0 : i64, shape = array<i64: 3>}], world_size = 2 : i64}}
// CHECK: kiln.reduce_scatter mean {{.*}} : tensor<4xf32> -> tensor<2xf32>
// CHECK: %[[FULL:.*]] = kiln.all_gather {{.*}} : tensor<2xf32> -> tensor<4xf32>
// CHECK-NEXT: kiln.slice %[[FULL]], start = [0], limit = [3], strides = [1]
// CHECK-NEXT: return
func.func @unnamed(
    %x: tensor<3xf32> {kiln.role = #kiln.role<input>},
    %w: tensor<3xf32> {kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = ones>})
    -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %p = kiln.mul %x, %w : tensor<3xf32>
  %s = kiln.reduce sum %p, dims = [0] : tensor<3xf32> -> tensor<f32>
  return %s : tensor<f32>
}
