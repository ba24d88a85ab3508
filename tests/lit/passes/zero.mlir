// RUN: kiln-opt %s --kiln-autodiff --kiln-distribute="strategy=zero2 world-size=4 bucket-mb=0.0001" | FileCheck %s --check-prefix=ZERO2
// RUN: kiln-opt %s --kiln-autodiff --kiln-distribute="strategy=zero1 world-size=4 bucket-mb=0.0001" | FileCheck %s --check-prefix=ZERO1
// RUN: kiln-opt %s --kiln-autodiff --kiln-distribute="strategy=zero3 world-size=4 bucket-mb=0.0001" | FileCheck %s --check-prefix=ZERO3
// RUN: kiln-opt %s --kiln-autodiff --kiln-distribute="strategy=zero2 world-size=2 bucket-mb=0.0001" --kiln-apply-optimizer="optimizer=adam clip-norm=1.0" --kiln-gather-shards | FileCheck %s --check-prefix=STEP
// RUN: kiln-opt %s --kiln-autodiff --kiln-distribute="strategy=zero3 world-size=2 bucket-mb=0.0001" --kiln-apply-optimizer="optimizer=adam" --kiln-gather-shards | FileCheck %s --check-prefix=STEP3
//
// kiln-distribute's ZeRO stages (passes/Distribute.cpp). With
// bucket-mb=0.0001 the gradients make data-parallel's two buckets: b2, w2,
// b1 (27 floats) and w1 (48). Over 4 ranks each bucket is padded to a
// multiple of 4 (28 and 48) and a rank's shard holds 7 and 12 elements;
// the shards are new parameter arguments whose kiln.shard says what they
// hold, and their gradients (the reduce-scattered buckets) replace the
// parameters' gradients as results.

// ZERO2: module attributes {kiln.strategy = "zero2", kiln.world_size = 4 : i64}
// ZERO2-LABEL: func.func @mlp2
// ZERO2-SAME: %arg6: tensor<7xf32> {kiln.name = "zero.bucket0", kiln.role = #kiln.role<parameter>, kiln.shard = {bucket = 0 : i64, length = 27 : i64, params = [{init = #kiln.init<kind = zeros>, name = "b2", offset = 0 : i64, shape = array<i64: 3>}, {init = #kiln.init<kind = glorot_uniform, seed = 2>, name = "w2", offset = 3 : i64, shape = array<i64: 6, 3>}, {init = #kiln.init<kind = zeros>, name = "b1", offset = 21 : i64, shape = array<i64: 6>}], world_size = 4 : i64}}
// ZERO2-SAME: %arg7: tensor<12xf32> {kiln.name = "zero.bucket1", kiln.role = #kiln.role<parameter>, kiln.shard = {bucket = 1 : i64, length = 48 : i64, params = [{init = #kiln.init<kind = glorot_uniform, seed = 1>, name = "w1", offset = 0 : i64, shape = array<i64: 8, 6>}], world_size = 4 : i64}}
// ZERO2-SAME: -> (tensor<f32> {kiln.role = #kiln.role<loss>}, tensor<7xf32> {kiln.grad_of = 6 : i64, kiln.name = "zero.bucket0", kiln.role = #kiln.role<gradient>}, tensor<12xf32> {kiln.grad_of = 7 : i64, kiln.name = "zero.bucket1", kiln.role = #kiln.role<gradient>})
// The loss has its own all-reduce right after it.
// ZERO2: %[[LOSS:.*]] = kiln.reduce mean
// ZERO2-NEXT: %[[MEAN:.*]] = kiln.all_reduce mean %[[LOSS]] : tensor<f32>
// zero2: the first bucket (one zero of padding) is reduce-scattered inside
// the backward pass, right after b1's gradient and before the first
// layer's weight gradient is computed.
// ZERO2: %[[DB2:.*]] = kiln.reduce sum {{.*}} -> tensor<3xf32>
// ZERO2: %[[DW2:.*]] = kiln.dot_general {{.*}} -> tensor<6x3xf32>
// ZERO2: %[[DB1:.*]] = kiln.reduce sum {{.*}} -> tensor<6xf32>
// ZERO2-NEXT: %[[FW2:.*]] = kiln.reshape %[[DW2]] : tensor<6x3xf32> -> tensor<18xf32>
// ZERO2-NEXT: %[[PAD:.*]] = kiln.constant dense<0.000000e+00> : tensor<1xf32>
// ZERO2-NEXT: %[[B0:.*]] = kiln.concatenate(%[[DB2]], %[[FW2]], %[[DB1]], %[[PAD]]), dim = 0 : {{.*}} -> tensor<28xf32>
// ZERO2-NEXT: %[[S0:.*]] = kiln.reduce_scatter mean %[[B0]], dim = 0 : tensor<28xf32> -> tensor<7xf32>
// ZERO2-NEXT: kiln.dot_general
// ZERO2-NEXT: %[[DW1:.*]] = kiln.dot_general %arg0, {{.*}} -> tensor<8x6xf32>
// ZERO2-NEXT: %[[FW1:.*]] = kiln.reshape %[[DW1]] : tensor<8x6xf32> -> tensor<48xf32>
// ZERO2-NEXT: %[[S1:.*]] = kiln.reduce_scatter mean %[[FW1]], dim = 0 : tensor<48xf32> -> tensor<12xf32>
// ZERO2-NEXT: return %[[MEAN]], %[[S0]], %[[S1]]
// ZERO2-NOT: kiln.all_gather
//
// zero1: both buckets after the whole backward pass, marked to be issued
// together (kiln-schedule keeps them there).
// ZERO1: module attributes {kiln.strategy = "zero1", kiln.world_size = 4 : i64}
// ZERO1: kiln.dot_general %arg0, {{.*}} -> tensor<8x6xf32>
// ZERO1: kiln.reduce_scatter mean {{.*}} {kiln.issue_together} : tensor<28xf32> -> tensor<7xf32>
// ZERO1-NOT: kiln.dot_general
// ZERO1: kiln.reduce_scatter mean {{.*}} {kiln.issue_together} : tensor<48xf32> -> tensor<12xf32>
// ZERO1-NEXT: return
//
// After kiln-schedule, zero1's first reduce-scatter still waits for the
// last gradient (w1's), where zero2's is issued before it is computed.
// RUN: kiln-opt %s --kiln-autodiff --kiln-distribute="strategy=zero1 world-size=4 bucket-mb=0.0001" --canonicalize --kiln-schedule | FileCheck %s --check-prefix=SCHED1
// SCHED1: kiln.dot_general %arg0, {{.*}} -> tensor<8x6xf32>
// SCHED1: kiln.reduce_scatter mean {{.*}} : tensor<28xf32> -> tensor<7xf32>
// SCHED1: kiln.reduce_scatter mean {{.*}} : tensor<48xf32> -> tensor<12xf32>
// RUN: kiln-opt %s --kiln-autodiff --kiln-distribute="strategy=zero2 world-size=4 bucket-mb=0.0001" --canonicalize --kiln-schedule | FileCheck %s --check-prefix=SCHED2
// SCHED2: kiln.reduce_scatter mean {{.*}} : tensor<28xf32> -> tensor<7xf32>
// SCHED2: kiln.dot_general %arg0, {{.*}} -> tensor<8x6xf32>
// SCHED2: kiln.reduce_scatter mean {{.*}} : tensor<48xf32> -> tensor<12xf32>
//
// zero3 (FSDP, parameters resharded after the forward pass): the parameter
// arguments are gone; each bucket is all-gathered right before the forward
// pass first reads it (w1's bucket first, then b2, w2, b1's) and sliced
// into the parameters, and gathered again right before the backward pass
// first reads it, for w2 alone (the backward pass reads no other
// parameter: the gradient of x is dead). Each gather carries
// kiln.prefetch = 1 for kiln-schedule.
// ZERO3-LABEL: func.func @mlp2
// ZERO3-SAME: (%arg0: tensor<4x8xf32> {kiln.role = #kiln.role<input>}, %arg1: tensor<4xi32> {kiln.role = #kiln.role<label>}, %arg2: tensor<7xf32> {kiln.name = "zero.bucket0"
// ZERO3-SAME: %arg3: tensor<12xf32> {kiln.name = "zero.bucket1"
// ZERO3-SAME: tensor<7xf32> {kiln.grad_of = 2 : i64
// ZERO3-SAME: tensor<12xf32> {kiln.grad_of = 3 : i64
// ZERO3-NEXT: %[[G1:.*]] = kiln.all_gather %arg3, dim = 0 {kiln.prefetch = 1 : i64} : tensor<12xf32> -> tensor<48xf32>
// ZERO3-NEXT: %[[W1:.*]] = kiln.reshape %[[G1]] : tensor<48xf32> -> tensor<8x6xf32>
// ZERO3-NEXT: kiln.dot_general %arg0, %[[W1]]
// ZERO3-NEXT: %[[G0:.*]] = kiln.all_gather %arg2, dim = 0 {kiln.prefetch = 1 : i64} : tensor<7xf32> -> tensor<28xf32>
// ZERO3-NEXT: %[[B2:.*]] = kiln.slice %[[G0]], start = [0], limit = [3], strides = [1]
// ZERO3-NEXT: %[[W2F:.*]] = kiln.slice %[[G0]], start = [3], limit = [21], strides = [1]
// ZERO3-NEXT: %[[W2:.*]] = kiln.reshape %[[W2F]] : tensor<18xf32> -> tensor<6x3xf32>
// ZERO3-NEXT: %[[B1:.*]] = kiln.slice %[[G0]], start = [21], limit = [27], strides = [1]
// ZERO3-NEXT: kiln.broadcast_in_dim %[[B1]]
// ZERO3: kiln.dot_general {{.*}}, %[[W2]], {{.*}} -> tensor<4x3xf32>
// ZERO3: kiln.broadcast_in_dim %[[B2]]
// ZERO3: %[[LOSS:.*]] = kiln.reduce mean
// ZERO3-NEXT: kiln.all_reduce mean %[[LOSS]] : tensor<f32>
// ZERO3: %[[BG0:.*]] = kiln.all_gather %arg2, dim = 0 {kiln.prefetch = 1 : i64} : tensor<7xf32> -> tensor<28xf32>
// ZERO3-NEXT: %[[BW2F:.*]] = kiln.slice %[[BG0]], start = [3], limit = [21], strides = [1]
// ZERO3-NEXT: %[[BW2:.*]] = kiln.reshape %[[BW2F]] : tensor<18xf32> -> tensor<6x3xf32>
// ZERO3-NEXT: kiln.dot_general {{.*}}, %[[BW2]], {{.*}} -> tensor<4x6xf32>
// ZERO3-NOT: %[[W2]]
// ZERO3: kiln.reduce_scatter mean {{.*}} : tensor<28xf32> -> tensor<7xf32>
// ZERO3-NOT: kiln.all_gather
// ZERO3: kiln.reduce_scatter mean {{.*}} : tensor<48xf32> -> tensor<12xf32>
// ZERO3-NEXT: return
//
// With gradient accumulation (two micro-batches, forward 0, backward 0,
// forward 1, backward 1 in one step) each micro-batch gathers again, as
// FSDP reshards per micro-batch.
// RUN: kiln-opt %s --kiln-autodiff --kiln-accumulate-gradients="grad-accum=2" --kiln-distribute="strategy=zero3 world-size=4 bucket-mb=0.0001" | FileCheck %s --check-prefix=ACCUM3
// ACCUM3: kiln.all_gather %arg3, {{.*}} -> tensor<48xf32>
// ACCUM3: kiln.all_gather %arg2, {{.*}} -> tensor<28xf32>
// ACCUM3: kiln.all_gather %arg2, {{.*}} -> tensor<28xf32>
// ACCUM3: kiln.dot_general {{.*}} -> tensor<8x6xf32>
// ACCUM3: kiln.all_gather %arg3, {{.*}} -> tensor<48xf32>
// ACCUM3: kiln.all_gather %arg2, {{.*}} -> tensor<28xf32>
// ACCUM3: kiln.all_reduce mean
// ACCUM3: kiln.all_gather %arg2, {{.*}} -> tensor<28xf32>
// ACCUM3-NOT: kiln.all_gather
// ACCUM3: kiln.reduce_scatter
//
// kiln-schedule: the gathers are not all hoisted to the start. The first
// two (nothing to wait for) open the step; the third, the backward pass's,
// waits for every use of the first (w1's GEMM): one bucket ahead.
// RUN: kiln-opt %s --kiln-autodiff --kiln-distribute="strategy=zero3 world-size=4 bucket-mb=0.0001" --kiln-schedule | FileCheck %s --check-prefix=SCHED3
// SCHED3: kiln.all_gather %arg3, {{.*}} -> tensor<48xf32>
// SCHED3-NEXT: kiln.all_gather %arg2, {{.*}} -> tensor<28xf32>
// SCHED3: kiln.dot_general %arg0, {{.*}} -> tensor<4x6xf32>
// SCHED3: kiln.all_gather %arg2, {{.*}} -> tensor<28xf32>
// SCHED3: kiln.reduce_scatter mean {{.*}} : tensor<28xf32> -> tensor<7xf32>
// SCHED3: kiln.reduce_scatter mean {{.*}} : tensor<48xf32> -> tensor<12xf32>
//
// After kiln-apply-optimizer: Adam's state is shard-sized (the sharded
// optimizer state), the global norm for clipping is summed over the ranks,
// and kiln-gather-shards all-gathers each updated shard into the
// parameters it holds, which become update results.
// STEP-LABEL: func.func @mlp2
// STEP-SAME: tensor<14xf32> {kiln.init = #kiln.init<kind = zeros>, kiln.name = "zero.bucket0.exp_avg", kiln.role = #kiln.role<optimizer_state>}
// STEP-SAME: tensor<14xf32> {kiln.init = #kiln.init<kind = zeros>, kiln.name = "zero.bucket0.exp_avg_sq", kiln.role = #kiln.role<optimizer_state>}
// STEP-SAME: tensor<24xf32> {kiln.init = #kiln.init<kind = zeros>, kiln.name = "zero.bucket1.exp_avg", kiln.role = #kiln.role<optimizer_state>}
// STEP-SAME: tensor<3xf32> {kiln.name = "b2", kiln.role = #kiln.role<parameter>, kiln.updates = 4 : i64}
// STEP-SAME: tensor<8x6xf32> {kiln.name = "w1", kiln.role = #kiln.role<parameter>, kiln.updates = 1 : i64})
// STEP: kiln.reduce_scatter mean {{.*}} -> tensor<14xf32>
// STEP: kiln.reduce_scatter mean {{.*}} -> tensor<24xf32>
// STEP: kiln.all_reduce sum {{.*}} : tensor<f64>
// STEP: kiln.sqrt
// STEP: %[[G0:.*]] = kiln.all_gather %{{.*}}, dim = 0 : tensor<14xf32> -> tensor<28xf32>
// STEP-NEXT: %[[B2:.*]] = kiln.slice %[[G0]], start = [0], limit = [3]
// STEP: %[[G1:.*]] = kiln.all_gather %{{.*}}, dim = 0 : tensor<24xf32> -> tensor<48xf32>
// STEP-NEXT: %[[W1:.*]] = kiln.reshape %[[G1]] : tensor<48xf32> -> tensor<8x6xf32>
// STEP-NEXT: return
//
// Under zero3 kiln-gather-shards has nothing to gather after the update.
// STEP3: kiln.all_gather {{.*}} -> tensor<48xf32>
// STEP3: kiln.all_gather {{.*}} -> tensor<28xf32>
// STEP3: kiln.all_gather {{.*}} -> tensor<28xf32>
// STEP3-NOT: kiln.all_gather
// STEP3: return

func.func @mlp2(
    %x: tensor<4x8xf32> {kiln.role = #kiln.role<input>},
    %w1: tensor<8x6xf32> {kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = glorot_uniform, seed = 1>, kiln.name = "w1"},
    %b1: tensor<6xf32> {kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = zeros>, kiln.name = "b1"},
    %w2: tensor<6x3xf32> {kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = glorot_uniform, seed = 2>, kiln.name = "w2"},
    %b2: tensor<3xf32> {kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = zeros>, kiln.name = "b2"},
    %y: tensor<4xi32> {kiln.role = #kiln.role<label>})
    -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %d1 = kiln.dot_general %x, %w1, batch = [] x [], contract = [1] x [0] : (tensor<4x8xf32>, tensor<8x6xf32>) -> tensor<4x6xf32>
  %bb1 = kiln.broadcast_in_dim %b1, dims = [1] : tensor<6xf32> -> tensor<4x6xf32>
  %z1 = kiln.add %d1, %bb1 : tensor<4x6xf32>
  %h = kiln.relu %z1 : tensor<4x6xf32>
  %d2 = kiln.dot_general %h, %w2, batch = [] x [], contract = [1] x [0] : (tensor<4x6xf32>, tensor<6x3xf32>) -> tensor<4x3xf32>
  %bb2 = kiln.broadcast_in_dim %b2, dims = [1] : tensor<3xf32> -> tensor<4x3xf32>
  %z2 = kiln.add %d2, %bb2 : tensor<4x3xf32>
  %l = kiln.softmax_cross_entropy %z2, %y : (tensor<4x3xf32>, tensor<4xi32>) -> tensor<4xf32>
  %m = kiln.reduce mean %l, dims = [0] : tensor<4xf32> -> tensor<f32>
  return %m : tensor<f32>
}
