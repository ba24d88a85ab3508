// kiln-split-reductions leaves the values alone: the inputs are small
// integers (every sum and mean here is exact in f64), and the reference
// interpreter gives the same bits before and after the split, with the
// default thresholds (128 groups of 16 rows) and small ones (64 and 8
// groups).
// RUN: kiln-opt %s --kiln-test-interpret > %t.before
// RUN: kiln-opt %s --kiln-split-reductions | FileCheck %s
// RUN: kiln-opt %s --kiln-split-reductions --kiln-test-interpret > %t.split
// RUN: diff %t.before %t.split
// RUN: kiln-opt %s --kiln-split-reductions="min-reduced=64 target-partials=16" | FileCheck %s --check-prefix=SMALL
// RUN: kiln-opt %s --kiln-split-reductions="min-reduced=64 target-partials=16" --kiln-test-interpret > %t.small
// RUN: diff %t.before %t.small

// The mean of columns of small integers, and a sum.
// CHECK-LABEL: func.func @values
// CHECK: kiln.reshape %{{.*}} : tensor<2048x3xf64> -> tensor<128x16x3xf64>
// CHECK-COUNT-2: kiln.reduce mean
// SMALL-LABEL: func.func @values
// SMALL: kiln.reshape %{{.*}} : tensor<2048x3xf64> -> tensor<64x32x3xf64>
// SMALL: kiln.reshape %{{.*}} : tensor<256x3xf64> -> tensor<8x32x3xf64>
func.func @values() -> (tensor<3xf64>, tensor<3xf64>) {
  %i = kiln.iota dim = 0 : tensor<2048x3xf64>
  %j = kiln.iota dim = 1 : tensor<2048x3xf64>
  %s = kiln.add %i, %j : tensor<2048x3xf64>
  %m = kiln.reduce mean %s, dims = [0] : tensor<2048x3xf64> -> tensor<3xf64>
  %k = kiln.iota dim = 0 : tensor<256x3xf64>
  %t = kiln.reduce sum %k, dims = [0] : tensor<256x3xf64> -> tensor<3xf64>
  return %m, %t : tensor<3xf64>, tensor<3xf64>
}

// A channel reduction ([N, C, H, W] over N, H and W): the mean of 16 x 32 x
// 4 small integers per channel and their sum, in two stages (H and W, then
// N); the default thresholds leave the 16-row column stage as it is.
// CHECK-LABEL: func.func @channel_values
// CHECK: kiln.reduce mean %{{.*}}, dims = [2, 3] : tensor<16x3x32x4xf64> -> tensor<16x3xf64>
// CHECK: kiln.reduce sum %{{.*}}, dims = [2, 3] : tensor<16x3x32x4xf64> -> tensor<16x3xf64>
func.func @channel_values() -> (tensor<3xf64>, tensor<3xf64>) {
  %n = kiln.iota dim = 0 : tensor<16x3x32x4xf64>
  %c = kiln.iota dim = 1 : tensor<16x3x32x4xf64>
  %h = kiln.iota dim = 2 : tensor<16x3x32x4xf64>
  %w = kiln.iota dim = 3 : tensor<16x3x32x4xf64>
  %a = kiln.add %n, %c : tensor<16x3x32x4xf64>
  %b = kiln.add %h, %w : tensor<16x3x32x4xf64>
  %s = kiln.mul %a, %b : tensor<16x3x32x4xf64>
  %m = kiln.reduce mean %s, dims = [0, 2, 3] : tensor<16x3x32x4xf64> -> tensor<3xf64>
  %t = kiln.reduce sum %s, dims = [0, 2, 3] : tensor<16x3x32x4xf64> -> tensor<3xf64>
  return %m, %t : tensor<3xf64>, tensor<3xf64>
}
