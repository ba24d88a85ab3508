// kiln-parameter-copies: each updated, replicated f32 parameter that the
// step converts to a narrower float gets a copy per type (an argument,
// #kiln.role<parameter_copy>, kiln.copy_of the parameter) that replaces the
// converts, and a result, the convert of the updated parameter, that updates
// the copy. The dump is valid IR (kiln-opt reads it back).
// RUN: kiln-opt --kiln-parameter-copies %s | FileCheck %s
// RUN: kiln-opt --kiln-parameter-copies %s | kiln-opt --kiln-parameter-copies | FileCheck %s --check-prefix=AGAIN

// CHECK-LABEL: func.func @step(
// CHECK-SAME: %[[X:[a-z0-9]+]]: tensor<4x8xbf16>
// CHECK-SAME: %[[W:[a-z0-9]+]]: tensor<8x2xf32> {{{[^}]*}}kiln.name = "w", kiln.role = #kiln.role<parameter>}
// The frozen parameter (no update), the f64 one, the shard and the one
// read only in f32 get no copy.
// CHECK-SAME: %[[FROZEN:[a-z0-9]+]]: tensor<8x2xf32> {{{[^}]*}}kiln.name = "frozen"
// CHECK-SAME: %[[WIDE:[a-z0-9]+]]: tensor<8x2xf64> {{{[^}]*}}kiln.name = "wide"
// CHECK-SAME: %[[SHARD:[a-z0-9]+]]: tensor<16xf32> {{{[^}]*}}kiln.name = "shard"
// CHECK-SAME: %[[PLAIN:[a-z0-9]+]]: tensor<8x2xf32> {{{[^}]*}}kiln.name = "plain"
// CHECK-SAME: %[[WBF:[a-z0-9]+]]: tensor<8x2xbf16> {kiln.copy_of = 1 : i64, kiln.name = "w.bf16", kiln.role = #kiln.role<parameter_copy>}
// CHECK-SAME: %[[WF16:[a-z0-9]+]]: tensor<8x2xf16> {kiln.copy_of = 1 : i64, kiln.name = "w.f16", kiln.role = #kiln.role<parameter_copy>})
// CHECK-SAME: -> (tensor<f32> {kiln.role = #kiln.role<loss>},
// CHECK-SAME: tensor<8x2xbf16> {kiln.name = "w.bf16", kiln.role = #kiln.role<parameter_copy>, kiln.updates = 6 : i64},
// CHECK-SAME: tensor<8x2xf16> {kiln.name = "w.f16", kiln.role = #kiln.role<parameter_copy>, kiln.updates = 7 : i64})
// Both bf16 converts read the copy; the f16 one reads the other copy.
// CHECK-NOT: kiln.convert %[[W]]
// CHECK: kiln.dot_general %[[X]], %[[WBF]]
// CHECK: kiln.dot_general %[[X]], %[[WBF]]
// CHECK: kiln.convert %[[WF16]] : tensor<8x2xf16> -> tensor<8x2xbf16>
// The others keep their converts.
// CHECK: kiln.convert %[[FROZEN]] : tensor<8x2xf32> -> tensor<8x2xbf16>
// CHECK: kiln.convert %[[WIDE]] : tensor<8x2xf64> -> tensor<8x2xbf16>
// CHECK: kiln.convert %[[SHARD]] : tensor<16xf32> -> tensor<16xbf16>
// CHECK: %[[NEWW:[0-9]+]] = kiln.sub %[[W]]
// The new copies are the converts of the updated parameter.
// CHECK: %[[NEWBF:[0-9]+]] = kiln.convert %[[NEWW]] : tensor<8x2xf32> -> tensor<8x2xbf16>
// CHECK: %[[NEWF16:[0-9]+]] = kiln.convert %[[NEWW]] : tensor<8x2xf32> -> tensor<8x2xf16>
// CHECK: return %{{[0-9]+}}, %[[NEWW]], %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %[[NEWBF]], %[[NEWF16]] :

// A second run finds no parameter converted any more: nothing changes.
// AGAIN-COUNT-2: #kiln.role<parameter_copy>}
// AGAIN-NOT: #kiln.role<parameter_copy>}
// AGAIN: return
func.func @step(
    %x: tensor<4x8xbf16> {kiln.role = #kiln.role<input>},
    %w: tensor<8x2xf32> {kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = ones>, kiln.name = "w"},
    %frozen: tensor<8x2xf32> {kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = ones>, kiln.name = "frozen"},
    %wide: tensor<8x2xf64> {kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = ones>, kiln.name = "wide"},
    %shard: tensor<16xf32> {kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = ones>, kiln.name = "shard",
                            kiln.shard = {bucket = 0 : i64, length = 32 : i64, params = [{init = #kiln.init<kind = ones>, name = "v", offset = 0 : i64, shape = array<i64: 32>}], world_size = 2 : i64}},
    %plain: tensor<8x2xf32> {kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = ones>, kiln.name = "plain"})
    -> (tensor<f32> {kiln.role = #kiln.role<loss>},
        tensor<8x2xf32> {kiln.role = #kiln.role<parameter>, kiln.name = "w", kiln.updates = 1 : i64},
        tensor<8x2xf64> {kiln.role = #kiln.role<parameter>, kiln.name = "wide", kiln.updates = 3 : i64},
        tensor<16xf32> {kiln.role = #kiln.role<parameter>, kiln.name = "shard", kiln.updates = 4 : i64},
        tensor<8x2xf32> {kiln.role = #kiln.role<parameter>, kiln.name = "plain", kiln.updates = 5 : i64}) {
  %wb = kiln.convert %w : tensor<8x2xf32> -> tensor<8x2xbf16>
  %wb2 = kiln.convert %w : tensor<8x2xf32> -> tensor<8x2xbf16>
  %wh = kiln.convert %w : tensor<8x2xf32> -> tensor<8x2xf16>
  %y1 = kiln.dot_general %x, %wb, batch = [] x [], contract = [1] x [0] : (tensor<4x8xbf16>, tensor<8x2xbf16>) -> tensor<4x2xbf16>
  %y2 = kiln.dot_general %x, %wb2, batch = [] x [], contract = [1] x [0] : (tensor<4x8xbf16>, tensor<8x2xbf16>) -> tensor<4x2xbf16>
  %whb = kiln.convert %wh : tensor<8x2xf16> -> tensor<8x2xbf16>
  %fb = kiln.convert %frozen : tensor<8x2xf32> -> tensor<8x2xbf16>
  %db = kiln.convert %wide : tensor<8x2xf64> -> tensor<8x2xbf16>
  %sb = kiln.convert %shard : tensor<16xf32> -> tensor<16xbf16>
  %s1 = kiln.add %y1, %y2 : tensor<4x2xbf16>
  %s2 = kiln.reduce sum %s1, dims = [0, 1] : tensor<4x2xbf16> -> tensor<bf16>
  %s3 = kiln.reduce sum %whb, dims = [0, 1] : tensor<8x2xbf16> -> tensor<bf16>
  %s4 = kiln.reduce sum %fb, dims = [0, 1] : tensor<8x2xbf16> -> tensor<bf16>
  %s5 = kiln.reduce sum %db, dims = [0, 1] : tensor<8x2xbf16> -> tensor<bf16>
  %s6 = kiln.reduce sum %sb, dims = [0] : tensor<16xbf16> -> tensor<bf16>
  %t1 = kiln.add %s2, %s3 : tensor<bf16>
  %t2 = kiln.add %t1, %s4 : tensor<bf16>
  %t3 = kiln.add %t2, %s5 : tensor<bf16>
  %t4 = kiln.add %t3, %s6 : tensor<bf16>
  %loss = kiln.convert %t4 : tensor<bf16> -> tensor<f32>
  %nw = kiln.sub %w, %plain : tensor<8x2xf32>
  %nd = kiln.add %wide, %wide : tensor<8x2xf64>
  %ns = kiln.add %shard, %shard : tensor<16xf32>
  %np = kiln.add %plain, %plain : tensor<8x2xf32>
  return %loss, %nw, %nd, %ns, %np : tensor<f32>, tensor<8x2xf32>, tensor<8x2xf64>, tensor<16xf32>, tensor<8x2xf32>
}
