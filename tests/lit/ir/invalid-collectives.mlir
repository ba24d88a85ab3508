// RUN: kiln-opt %s -split-input-file -verify-diagnostics
//
// Verifier messages of the collectives (rank groups, shards, roots, peers)
// and of kiln.fusion / kiln.yield (ir/ShapeRules.cpp and ir/KilnOps.cpp).
// Each case opens with a line saying what it tests.

// Rank groups are a 2-D [groups, ranks per group] tensor.
func.func @groups_rank(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'kiln.all_reduce' op groups must be a 2-D tensor [groups, ranks per group], but has shape [4]}}
  %0 = kiln.all_reduce sum %a {groups = dense<[0, 1, 2, 3]> : tensor<4xi64>} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// Ranks are non-negative.
func.func @groups_negative(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'kiln.all_reduce' op groups must hold non-negative ranks, but hold -1}}
  %0 = kiln.all_reduce max %a {groups = dense<[[0, -1]]> : tensor<1x2xi64>} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// A rank is in at most one group.
func.func @groups_repeat(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'kiln.all_reduce' op groups must name each rank at most once, but rank 1 appears twice}}
  %0 = kiln.all_reduce min %a {groups = dense<[[0, 1], [1, 2]]> : tensor<2x2xi64>} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// Groups are i64 (I64ElementsAttr).
func.func @groups_i32(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'kiln.all_reduce' op attribute 'groups' failed to satisfy constraint: 64-bit signless integer elements attribute}}
  %0 = kiln.all_reduce sum %a {groups = dense<[[0, 1]]> : tensor<1x2xi32>} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// A collective does not multiply.
func.func @all_reduce_prod(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'kiln.all_reduce' op reduction must be sum, max, min or mean, not prod (a collective does not multiply)}}
  %0 = kiln.all_reduce prod %a : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @reduce_scatter_prod(%a: tensor<8xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'kiln.reduce_scatter' op reduction must be sum, max, min or mean, not prod (a collective does not multiply)}}
  %0 = kiln.reduce_scatter prod %a, dim = 0 : tensor<8xf32> -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// kiln.reduce_scatter keeps the element type.
func.func @reduce_scatter_element(%a: tensor<8xf32>) -> tensor<4xbf16> {
  // expected-error@+1 {{'kiln.reduce_scatter' op requires operand and result to have the same element type, but they are 'f32' and 'bf16'}}
  %0 = kiln.reduce_scatter sum %a, dim = 0 : tensor<8xf32> -> tensor<4xbf16>
  return %0 : tensor<4xbf16>
}

// -----

// kiln.reduce_scatter's dimension exists.
func.func @reduce_scatter_dimension(%a: tensor<8xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'kiln.reduce_scatter' op dimension must lie in [0, 1), but is 1}}
  %0 = kiln.reduce_scatter sum %a, dim = 1 : tensor<8xf32> -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// kiln.reduce_scatter's shard has the operand's rank.
func.func @reduce_scatter_rank(%a: tensor<8xf32>) -> tensor<2x2xf32> {
  // expected-error@+1 {{'kiln.reduce_scatter' op the full and shard shapes must have the same rank, but are [8] and [2, 2]}}
  %0 = kiln.reduce_scatter sum %a, dim = 0 : tensor<8xf32> -> tensor<2x2xf32>
  return %0 : tensor<2x2xf32>
}

// -----

// kiln.reduce_scatter's shards are equal.
func.func @reduce_scatter_divide(%a: tensor<8xf32>) -> tensor<3xf32> {
  // expected-error@+1 {{'kiln.reduce_scatter' op the shard size along dimension 0 (3) must divide the full size (8)}}
  %0 = kiln.reduce_scatter sum %a, dim = 0 : tensor<8xf32> -> tensor<3xf32>
  return %0 : tensor<3xf32>
}

// -----

// kiln.reduce_scatter's shard is not empty.
func.func @reduce_scatter_empty(%a: tensor<8xf32>) -> tensor<0xf32> {
  // expected-error@+1 {{'kiln.reduce_scatter' op the shard size along dimension 0 (0) must divide the full size (8)}}
  %0 = kiln.reduce_scatter sum %a, dim = 0 : tensor<8xf32> -> tensor<0xf32>
  return %0 : tensor<0xf32>
}

// -----

// kiln.reduce_scatter only splits its dimension.
func.func @reduce_scatter_other(%a: tensor<4x8xf32>) -> tensor<2x4xf32> {
  // expected-error@+1 {{'kiln.reduce_scatter' op the full and shard shapes must agree outside dimension 1, but are [4, 8] and [2, 4]}}
  %0 = kiln.reduce_scatter mean %a, dim = 1 : tensor<4x8xf32> -> tensor<2x4xf32>
  return %0 : tensor<2x4xf32>
}

// -----

// kiln.reduce_scatter checks its groups.
func.func @reduce_scatter_groups(%a: tensor<8xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'kiln.reduce_scatter' op groups must name each rank at most once, but rank 0 appears twice}}
  %0 = kiln.reduce_scatter sum %a, dim = 0 {groups = dense<[[0, 0]]> : tensor<1x2xi64>} : tensor<8xf32> -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// kiln.all_gather keeps the element type.
func.func @all_gather_element(%a: tensor<4xf32>) -> tensor<8xf16> {
  // expected-error@+1 {{'kiln.all_gather' op requires operand and result to have the same element type, but they are 'f32' and 'f16'}}
  %0 = kiln.all_gather %a, dim = 0 : tensor<4xf32> -> tensor<8xf16>
  return %0 : tensor<8xf16>
}

// -----

// kiln.all_gather's dimension exists.
func.func @all_gather_dimension(%a: tensor<4xf32>) -> tensor<8xf32> {
  // expected-error@+1 {{'kiln.all_gather' op dimension must lie in [0, 1), but is -1}}
  %0 = kiln.all_gather %a, dim = -1 : tensor<4xf32> -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// kiln.all_gather's result has the operand's rank.
func.func @all_gather_rank(%a: tensor<4xf32>) -> tensor<2x4xf32> {
  // expected-error@+1 {{'kiln.all_gather' op the full and shard shapes must have the same rank, but are [2, 4] and [4]}}
  %0 = kiln.all_gather %a, dim = 0 : tensor<4xf32> -> tensor<2x4xf32>
  return %0 : tensor<2x4xf32>
}

// -----

// kiln.all_gather's result is a whole number of operands.
func.func @all_gather_divide(%a: tensor<4xf32>) -> tensor<10xf32> {
  // expected-error@+1 {{'kiln.all_gather' op the shard size along dimension 0 (4) must divide the full size (10)}}
  %0 = kiln.all_gather %a, dim = 0 : tensor<4xf32> -> tensor<10xf32>
  return %0 : tensor<10xf32>
}

// -----

// kiln.all_gather only grows its dimension.
func.func @all_gather_other(%a: tensor<4x3xf32>) -> tensor<8x6xf32> {
  // expected-error@+1 {{'kiln.all_gather' op the full and shard shapes must agree outside dimension 0, but are [8, 6] and [4, 3]}}
  %0 = kiln.all_gather %a, dim = 0 : tensor<4x3xf32> -> tensor<8x6xf32>
  return %0 : tensor<8x6xf32>
}

// -----

// kiln.all_gather checks its groups.
func.func @all_gather_groups(%a: tensor<4xf32>) -> tensor<8xf32> {
  // expected-error@+1 {{'kiln.all_gather' op groups must hold non-negative ranks, but hold -3}}
  %0 = kiln.all_gather %a, dim = 0 {groups = dense<[[-3, 1]]> : tensor<1x2xi64>} : tensor<4xf32> -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// kiln.collective_broadcast's root is a rank.
func.func @broadcast_root(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'kiln.collective_broadcast' op root must be a non-negative rank, but is -1}}
  %0 = kiln.collective_broadcast %a, root = -1 : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// kiln.collective_broadcast checks its groups.
func.func @broadcast_groups(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'kiln.collective_broadcast' op groups must be a 2-D tensor [groups, ranks per group], but has shape [1, 1, 2]}}
  %0 = kiln.collective_broadcast %a, root = 0 {groups = dense<[[[0, 1]]]> : tensor<1x1x2xi64>} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// kiln.collective_broadcast's root belongs to every group.
func.func @broadcast_root_group(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'kiln.collective_broadcast' op root 1 must be a rank of every group, but group 1 is [2, 3]}}
  %0 = kiln.collective_broadcast %a, root = 1 {groups = dense<[[0, 1], [2, 3]]> : tensor<2x2xi64>} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// kiln.send's peer is a rank.
func.func @send_peer(%a: tensor<4xf32>) {
  // expected-error@+1 {{'kiln.send' op peer and channel must be non-negative, but are -1 and 0}}
  kiln.send %a, peer = -1, channel = 0 : tensor<4xf32>
  return
}

// -----

// kiln.send's channel is non-negative.
func.func @send_channel(%a: tensor<4xf32>) {
  // expected-error@+1 {{'kiln.send' op peer and channel must be non-negative, but are 1 and -2}}
  kiln.send %a, peer = 1, channel = -2 : tensor<4xf32>
  return
}

// -----

// kiln.recv's peer is a rank.
func.func @recv_peer() -> tensor<4xf32> {
  // expected-error@+1 {{'kiln.recv' op peer and channel must be non-negative, but are -4 and 0}}
  %0 = kiln.recv peer = -4, channel = 0 : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// kiln.fusion has one body argument per input.
func.func @fusion_arguments(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'kiln.fusion' op body must have one argument per input (1), but has 2}}
  %0 = kiln.fusion loop (%a) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%x: tensor<4xf32>, %y: tensor<4xf32>):
    kiln.yield %x : tensor<4xf32>
  }
  return %0 : tensor<4xf32>
}

// -----

// kiln.fusion's body arguments have the input types.
func.func @fusion_argument_type(%a: tensor<4xf32>) -> tensor<4xf16> {
  // expected-error@+1 {{'kiln.fusion' op body argument 0 must have the type of input 0 ('tensor<4xf32>'), but has 'tensor<4xf16>'}}
  %0 = kiln.fusion loop (%a) : (tensor<4xf32>) -> tensor<4xf16> {
  ^bb0(%x: tensor<4xf16>):
    kiln.yield %x : tensor<4xf16>
  }
  return %0 : tensor<4xf16>
}

// -----

// kiln.fusion's kiln.yield returns the result types.
func.func @fusion_yield(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'kiln.fusion' op kiln.yield must return the fusion's result types ('tensor<4xf32>'), but returns 'tensor<4xf32>', 'tensor<4xf32>'}}
  %0 = kiln.fusion loop (%a) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%x: tensor<4xf32>):
    kiln.yield %x, %x : tensor<4xf32>, tensor<4xf32>
  }
  return %0 : tensor<4xf32>
}

// -----

// kiln.fusion's body is isolated: it sees only its arguments.
func.func @fusion_isolated(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-note@+1 {{required by region isolation constraints}}
  %0 = kiln.fusion loop (%a) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%x: tensor<4xf32>):
    // expected-error@+1 {{'kiln.yield' op using value defined outside the region}}
    kiln.yield %a : tensor<4xf32>
  }
  return %0 : tensor<4xf32>
}

// -----

// kiln.yield only ends a kiln.fusion body.
func.func @yield_outside(%a: tensor<4xf32>) {
  // expected-error@+1 {{'kiln.yield' op expects parent op 'kiln.fusion'}}
  kiln.yield %a : tensor<4xf32>
}
