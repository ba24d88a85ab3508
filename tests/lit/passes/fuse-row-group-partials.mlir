// RUN: kiln-opt %s -split-input-file --kiln-fuse=row-group-partials=true | FileCheck %s
// RUN: kiln-opt %s -split-input-file --kiln-fuse | FileCheck %s --check-prefix=OFF

// A layer norm's backward: dx (two row reductions over the 96 columns)
// and its scale and bias gradients' first stage after
// kiln-split-reductions (sums over groups of 32 rows: reshape to
// [8, 32, 96], reduce over dimension 1). Siblings reading x and dy: with
// row-group-partials (the CUDA pipeline) one kernel, whose CUDA layout
// (rowgroup.block) reads each element once for both; without it (the CPU
// pipeline's default) the partials' reduces differ in operand shape and
// reduced dimensions from the rows', so they stay a kernel of their own.
// CHECK-LABEL: func.func @layer_norm_grad
// CHECK: %[[F:.*]]:3 = kiln.fusion multi_output({{.*}}) : ({{.*}}) -> (tensor<4x64x96xf32>, tensor<8x96xf32>, tensor<8x96xf32>)
// CHECK-COUNT-2: kiln.reduce sum %{{.*}}, dims = [2] : tensor<4x64x96xf32> -> tensor<4x64xf32>
// CHECK-COUNT-2: kiln.reduce sum %{{.*}}, dims = [1] : tensor<8x32x96xf32> -> tensor<8x96xf32>
// CHECK: kiln.yield
// CHECK-NOT: kiln.fusion
// CHECK: return %[[F]]#0, %[[F]]#1, %[[F]]#2
// OFF-LABEL: func.func @layer_norm_grad
// OFF: kiln.fusion reduction({{.*}}) -> tensor<4x64x96xf32>
// OFF: kiln.fusion multi_output({{.*}}) -> (tensor<8x96xf32>, tensor<8x96xf32>)
// OFF-NOT: kiln.fusion
// OFF: return
func.func @layer_norm_grad(%x: tensor<4x64x96xf32>, %mean: tensor<4x64xf32>, %rstd: tensor<4x64xf32>, %w: tensor<96xf32>, %dy: tensor<4x64x96xf32>)
    -> (tensor<4x64x96xf32>, tensor<8x96xf32>, tensor<8x96xf32>) {
  %mb = kiln.broadcast_in_dim %mean, dims = [0, 1] : tensor<4x64xf32> -> tensor<4x64x96xf32>
  %xc = kiln.sub %x, %mb : tensor<4x64x96xf32>
  %rb = kiln.broadcast_in_dim %rstd, dims = [0, 1] : tensor<4x64xf32> -> tensor<4x64x96xf32>
  %xh = kiln.mul %xc, %rb : tensor<4x64x96xf32>
  %wb = kiln.broadcast_in_dim %w, dims = [2] : tensor<96xf32> -> tensor<4x64x96xf32>
  %g = kiln.mul %dy, %wb : tensor<4x64x96xf32>
  %s1 = kiln.reduce sum %g, dims = [2] : tensor<4x64x96xf32> -> tensor<4x64xf32>
  %s1b = kiln.broadcast_in_dim %s1, dims = [0, 1] : tensor<4x64xf32> -> tensor<4x64x96xf32>
  %gx = kiln.mul %g, %xh : tensor<4x64x96xf32>
  %s2 = kiln.reduce sum %gx, dims = [2] : tensor<4x64x96xf32> -> tensor<4x64xf32>
  %s2b = kiln.broadcast_in_dim %s2, dims = [0, 1] : tensor<4x64xf32> -> tensor<4x64x96xf32>
  %d1 = kiln.sub %g, %s1b : tensor<4x64x96xf32>
  %d2 = kiln.mul %xh, %s2b : tensor<4x64x96xf32>
  %d3 = kiln.sub %d1, %d2 : tensor<4x64x96xf32>
  %dx = kiln.mul %rb, %d3 : tensor<4x64x96xf32>
  %gr = kiln.reshape %dy : tensor<4x64x96xf32> -> tensor<8x32x96xf32>
  %pb = kiln.reduce sum %gr, dims = [1] : tensor<8x32x96xf32> -> tensor<8x96xf32>
  %dxh = kiln.mul %dy, %xh : tensor<4x64x96xf32>
  %gw = kiln.reshape %dxh : tensor<4x64x96xf32> -> tensor<8x32x96xf32>
  %pw = kiln.reduce sum %gw, dims = [1] : tensor<8x32x96xf32> -> tensor<8x96xf32>
  return %dx, %pb, %pw : tensor<4x64x96xf32>, tensor<8x96xf32>, tensor<8x96xf32>
}

// -----

// Groups of 64 rows are more than kiln-split-reductions makes (32): not
// partials, so the reduces' shapes differ and the kernels stay apart.
// CHECK-LABEL: func.func @groups_over_32_rows
// CHECK: kiln.fusion reduction({{.*}}) -> tensor<4x64x96xf32>
// CHECK: kiln.fusion multi_output({{.*}}) -> (tensor<4x96xf32>, tensor<4x96xf32>)
// CHECK-NOT: kiln.fusion
// CHECK: return

func.func @groups_over_32_rows(%x: tensor<4x64x96xf32>, %mean: tensor<4x64xf32>, %rstd: tensor<4x64xf32>, %w: tensor<96xf32>, %dy: tensor<4x64x96xf32>)
    -> (tensor<4x64x96xf32>, tensor<4x96xf32>, tensor<4x96xf32>) {
  %mb = kiln.broadcast_in_dim %mean, dims = [0, 1] : tensor<4x64xf32> -> tensor<4x64x96xf32>
  %xc = kiln.sub %x, %mb : tensor<4x64x96xf32>
  %rb = kiln.broadcast_in_dim %rstd, dims = [0, 1] : tensor<4x64xf32> -> tensor<4x64x96xf32>
  %xh = kiln.mul %xc, %rb : tensor<4x64x96xf32>
  %wb = kiln.broadcast_in_dim %w, dims = [2] : tensor<96xf32> -> tensor<4x64x96xf32>
  %g = kiln.mul %dy, %wb : tensor<4x64x96xf32>
  %s1 = kiln.reduce sum %g, dims = [2] : tensor<4x64x96xf32> -> tensor<4x64xf32>
  %s1b = kiln.broadcast_in_dim %s1, dims = [0, 1] : tensor<4x64xf32> -> tensor<4x64x96xf32>
  %gx = kiln.mul %g, %xh : tensor<4x64x96xf32>
  %s2 = kiln.reduce sum %gx, dims = [2] : tensor<4x64x96xf32> -> tensor<4x64xf32>
  %s2b = kiln.broadcast_in_dim %s2, dims = [0, 1] : tensor<4x64xf32> -> tensor<4x64x96xf32>
  %d1 = kiln.sub %g, %s1b : tensor<4x64x96xf32>
  %d2 = kiln.mul %xh, %s2b : tensor<4x64x96xf32>
  %d3 = kiln.sub %d1, %d2 : tensor<4x64x96xf32>
  %dx = kiln.mul %rb, %d3 : tensor<4x64x96xf32>
  %gr = kiln.reshape %dy : tensor<4x64x96xf32> -> tensor<4x64x96xf32>
  %pb = kiln.reduce sum %gr, dims = [1] : tensor<4x64x96xf32> -> tensor<4x96xf32>
  %dxh = kiln.mul %dy, %xh : tensor<4x64x96xf32>
  %gw = kiln.reshape %dxh : tensor<4x64x96xf32> -> tensor<4x64x96xf32>
  %pw = kiln.reduce sum %gw, dims = [1] : tensor<4x64x96xf32> -> tensor<4x96xf32>
  return %dx, %pb, %pw : tensor<4x64x96xf32>, tensor<4x96xf32>, tensor<4x96xf32>
}

// -----

// A column reduction over all rows (dims [0, 1]) is neither a row reduce
// nor a partial: it stays a kernel of its own, while dx and the partials
// still merge.
// CHECK-LABEL: func.func @other_reduce_shape
// CHECK: kiln.fusion multi_output({{.*}}) -> (tensor<4x64x96xf32>, tensor<8x96xf32>, tensor<4x64x96xf32>, tensor<8x96xf32>)
// CHECK: kiln.fusion reduction({{.*}}) : (tensor<4x64x96xf32>) -> tensor<96xf32>
// CHECK-NOT: kiln.fusion
// CHECK: return

func.func @other_reduce_shape(%x: tensor<4x64x96xf32>, %mean: tensor<4x64xf32>, %rstd: tensor<4x64xf32>, %w: tensor<96xf32>, %dy: tensor<4x64x96xf32>)
    -> (tensor<4x64x96xf32>, tensor<8x96xf32>, tensor<8x96xf32>, tensor<96xf32>) {
  %mb = kiln.broadcast_in_dim %mean, dims = [0, 1] : tensor<4x64xf32> -> tensor<4x64x96xf32>
  %xc = kiln.sub %x, %mb : tensor<4x64x96xf32>
  %rb = kiln.broadcast_in_dim %rstd, dims = [0, 1] : tensor<4x64xf32> -> tensor<4x64x96xf32>
  %xh = kiln.mul %xc, %rb : tensor<4x64x96xf32>
  %wb = kiln.broadcast_in_dim %w, dims = [2] : tensor<96xf32> -> tensor<4x64x96xf32>
  %g = kiln.mul %dy, %wb : tensor<4x64x96xf32>
  %s1 = kiln.reduce sum %g, dims = [2] : tensor<4x64x96xf32> -> tensor<4x64xf32>
  %s1b = kiln.broadcast_in_dim %s1, dims = [0, 1] : tensor<4x64xf32> -> tensor<4x64x96xf32>
  %gx = kiln.mul %g, %xh : tensor<4x64x96xf32>
  %s2 = kiln.reduce sum %gx, dims = [2] : tensor<4x64x96xf32> -> tensor<4x64xf32>
  %s2b = kiln.broadcast_in_dim %s2, dims = [0, 1] : tensor<4x64xf32> -> tensor<4x64x96xf32>
  %d1 = kiln.sub %g, %s1b : tensor<4x64x96xf32>
  %d2 = kiln.mul %xh, %s2b : tensor<4x64x96xf32>
  %d3 = kiln.sub %d1, %d2 : tensor<4x64x96xf32>
  %dx = kiln.mul %rb, %d3 : tensor<4x64x96xf32>
  %gr = kiln.reshape %dy : tensor<4x64x96xf32> -> tensor<8x32x96xf32>
  %pb = kiln.reduce sum %gr, dims = [1] : tensor<8x32x96xf32> -> tensor<8x96xf32>
  %dxh = kiln.mul %dy, %xh : tensor<4x64x96xf32>
  %gw = kiln.reshape %dxh : tensor<4x64x96xf32> -> tensor<8x32x96xf32>
  %pw = kiln.reduce sum %gw, dims = [1] : tensor<8x32x96xf32> -> tensor<8x96xf32>
  %cs = kiln.reduce sum %dxh, dims = [0, 1] : tensor<4x64x96xf32> -> tensor<96xf32>
  return %dx, %pb, %pw, %cs : tensor<4x64x96xf32>, tensor<8x96xf32>, tensor<8x96xf32>, tensor<96xf32>
}


// -----

// Rows [4, 32, 96] are the groups themselves (G = 4 of S = 32):
// kiln-split-reductions' reshape to [4, 32, 96] folds away, and the
// partials sum the row-shaped values over dimension 1 directly. Still
// partials: one kernel with the rows (and two without row-group-partials).
// CHECK-LABEL: func.func @rows_are_the_groups
// CHECK: %[[F:.*]]:3 = kiln.fusion multi_output({{.*}}) : ({{.*}}) -> (tensor<4x32x96xf32>, tensor<4x96xf32>, tensor<4x96xf32>)
// CHECK-COUNT-2: kiln.reduce sum %{{.*}}, dims = [2] : tensor<4x32x96xf32> -> tensor<4x32xf32>
// CHECK-COUNT-2: kiln.reduce sum %{{.*}}, dims = [1] : tensor<4x32x96xf32> -> tensor<4x96xf32>
// CHECK-NOT: kiln.fusion
// CHECK: return %[[F]]#0, %[[F]]#1, %[[F]]#2
// OFF-LABEL: func.func @rows_are_the_groups
// OFF: kiln.fusion reduction({{.*}}) -> tensor<4x32x96xf32>
// OFF: kiln.fusion multi_output({{.*}}) -> (tensor<4x96xf32>, tensor<4x96xf32>)
// OFF-NOT: kiln.fusion
// OFF: return

func.func @rows_are_the_groups(%x: tensor<4x32x96xf32>, %mean: tensor<4x32xf32>, %rstd: tensor<4x32xf32>, %w: tensor<96xf32>, %dy: tensor<4x32x96xf32>)
    -> (tensor<4x32x96xf32>, tensor<4x96xf32>, tensor<4x96xf32>) {
  %mb = kiln.broadcast_in_dim %mean, dims = [0, 1] : tensor<4x32xf32> -> tensor<4x32x96xf32>
  %xc = kiln.sub %x, %mb : tensor<4x32x96xf32>
  %rb = kiln.broadcast_in_dim %rstd, dims = [0, 1] : tensor<4x32xf32> -> tensor<4x32x96xf32>
  %xh = kiln.mul %xc, %rb : tensor<4x32x96xf32>
  %wb = kiln.broadcast_in_dim %w, dims = [2] : tensor<96xf32> -> tensor<4x32x96xf32>
  %g = kiln.mul %dy, %wb : tensor<4x32x96xf32>
  %s1 = kiln.reduce sum %g, dims = [2] : tensor<4x32x96xf32> -> tensor<4x32xf32>
  %s1b = kiln.broadcast_in_dim %s1, dims = [0, 1] : tensor<4x32xf32> -> tensor<4x32x96xf32>
  %gx = kiln.mul %g, %xh : tensor<4x32x96xf32>
  %s2 = kiln.reduce sum %gx, dims = [2] : tensor<4x32x96xf32> -> tensor<4x32xf32>
  %s2b = kiln.broadcast_in_dim %s2, dims = [0, 1] : tensor<4x32xf32> -> tensor<4x32x96xf32>
  %d1 = kiln.sub %g, %s1b : tensor<4x32x96xf32>
  %d2 = kiln.mul %xh, %s2b : tensor<4x32x96xf32>
  %d3 = kiln.sub %d1, %d2 : tensor<4x32x96xf32>
  %dx = kiln.mul %rb, %d3 : tensor<4x32x96xf32>
  %pb = kiln.reduce sum %dy, dims = [1] : tensor<4x32x96xf32> -> tensor<4x96xf32>
  %dxh = kiln.mul %dy, %xh : tensor<4x32x96xf32>
  %pw = kiln.reduce sum %dxh, dims = [1] : tensor<4x32x96xf32> -> tensor<4x96xf32>
  return %dx, %pb, %pw : tensor<4x32x96xf32>, tensor<4x96xf32>, tensor<4x96xf32>
}
