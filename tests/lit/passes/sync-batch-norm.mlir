// RUN: kiln-opt %s -split-input-file -verify-diagnostics --kiln-sync-batch-norm=world-size=2 | FileCheck %s
// RUN: kiln-opt %s -split-input-file -verify-diagnostics --kiln-sync-batch-norm=world-size=2 --kiln-resolve-mode --kiln-autodiff | FileCheck %s --check-prefix=GRAD
// RUN: not kiln-opt %s -split-input-file --kiln-sync-batch-norm=world-size=0 2>&1 | FileCheck %s --check-prefix=WORLD
//
// kiln-sync-batch-norm (passes/SyncBatchNorm.cpp) for 2 ranks: a batch
// norm's mean m and variance mean((x - m)^2) (the training values of
// kiln.mode_select ops beside running statistics) take one all-gather of
// every rank's [m_r, v_r], combined as m = mean_r(m_r) and
// v = mean_r(v_r) + mean_r((m_r - m)^2); every use reads those. The
// unbiased running-variance update (its constant the mean's times
// n / (n - 1), n = 4 rows here) gets the global n = 8. kiln-autodiff then
// differentiates the all-gather into a reduce-scatter sum.

// A batch norm as GraphBuilder::batchNorm writes it (momentum 0.1), on
// x * p so that the statistics depend on a parameter.
// CHECK-LABEL: func.func @bn
// CHECK: %[[H:.*]] = kiln.mul %arg0, %arg4
// CHECK-NEXT: %[[LMEAN:.*]] = kiln.reduce mean %[[H]], dims = [0]
// The rank's variance about its own mean:
// CHECK-NEXT: %[[WIDE:.*]] = kiln.broadcast_in_dim %[[LMEAN]]
// CHECK-NEXT: %[[C:.*]] = kiln.sub %[[H]], %[[WIDE]]
// CHECK-NEXT: %[[SQ:.*]] = kiln.mul %[[C]], %[[C]]
// CHECK-NEXT: %[[LVAR:.*]] = kiln.reduce mean %[[SQ]], dims = [0]
// CHECK-NEXT: %[[PACK:.*]] = kiln.concatenate(%[[LMEAN]], %[[LVAR]]), dim = 0 : (tensor<3xf32>, tensor<3xf32>) -> tensor<6xf32>
// CHECK-NEXT: %[[ALL:.*]] = kiln.all_gather %[[PACK]], dim = 0 : tensor<6xf32> -> tensor<12xf32>
// CHECK-NEXT: %[[TABLE:.*]] = kiln.reshape %[[ALL]] : tensor<12xf32> -> tensor<2x6xf32>
// CHECK-NEXT: %[[MS:.*]] = kiln.slice %[[TABLE]], start = [0, 0], limit = [2, 3]
// CHECK-NEXT: %[[VS:.*]] = kiln.slice %[[TABLE]], start = [0, 3], limit = [2, 6]
// CHECK-NEXT: %[[MEAN:.*]] = kiln.reduce mean %[[MS]], dims = [0] : tensor<2x3xf32> -> tensor<3xf32>
// CHECK-NEXT: %[[MW:.*]] = kiln.broadcast_in_dim %[[MEAN]], dims = [1] : tensor<3xf32> -> tensor<2x3xf32>
// CHECK-NEXT: %[[APART:.*]] = kiln.sub %[[MS]], %[[MW]]
// CHECK-NEXT: %[[APART2:.*]] = kiln.mul %[[APART]], %[[APART]]
// CHECK-NEXT: %[[SPREAD:.*]] = kiln.reduce mean %[[APART2]], dims = [0]
// CHECK-NEXT: %[[MV:.*]] = kiln.reduce mean %[[VS]], dims = [0]
// CHECK-NEXT: %[[VAR:.*]] = kiln.add %[[MV]], %[[SPREAD]]
// CHECK-NEXT: kiln.mode_select %[[MEAN]], %arg1
// CHECK-NEXT: kiln.mode_select %[[VAR]], %arg2
// The running mean takes the global mean; the running variance momentum
// (0.1 = 0.1333 * 3 / 4) times the global 8 / 7.
// CHECK: kiln.mul %[[MEAN]], %{{.*}} : tensor<3xf32>
// CHECK: %[[M:.*]] = kiln.constant dense<0.1142857{{[0-9]*}}> : tensor<3xf32>
// CHECK-NEXT: kiln.mul %[[VAR]], %[[M]]
// CHECK-NOT: kiln.all_reduce
// CHECK: return
//
// The backward pass: one reduce-scatter sum of the gradient of the gathered
// statistics, spread back to each rank's own mean and variance.
// GRAD-LABEL: func.func @bn
// GRAD: kiln.all_gather
// GRAD: %[[D:.*]] = kiln.reduce_scatter sum %{{.*}}, dim = 0 : tensor<12xf32> -> tensor<6xf32>
// GRAD-NEXT: kiln.slice %[[D]], start = [0], limit = [3]
// GRAD-NEXT: kiln.slice %[[D]], start = [3], limit = [6]
// GRAD-NOT: kiln.all_gather
// GRAD-NOT: kiln.reduce_scatter
// GRAD-NOT: kiln.all_reduce
// GRAD: return

// WORLD: kiln-sync-batch-norm: world-size=0: expected at least 1

// expected-remark @below {{kiln-sync-batch-norm: 2 batch statistics of @bn computed over the global batch of 2 ranks (1 mean/variance pairs, one all_gather each; 0 all_reduce), 1 running variance update(s) unbiased by the global count}}
func.func @bn(%x: tensor<4x3xf32> {kiln.role = #kiln.role<input>},
              %rmean: tensor<3xf32> {kiln.role = #kiln.role<model_state>, kiln.init = #kiln.init<kind = zeros>},
              %rvar: tensor<3xf32> {kiln.role = #kiln.role<model_state>, kiln.init = #kiln.init<kind = ones>},
              %w: tensor<3xf32> {kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = ones>},
              %p: tensor<4x3xf32> {kiln.role = #kiln.role<parameter>, kiln.init = #kiln.init<kind = ones>})
    -> (tensor<f32> {kiln.role = #kiln.role<loss>},
        tensor<3xf32> {kiln.role = #kiln.role<model_state>, kiln.updates = 1 : i64},
        tensor<3xf32> {kiln.role = #kiln.role<model_state>, kiln.updates = 2 : i64}) {
  %h = kiln.mul %x, %p : tensor<4x3xf32>
  %bmean = kiln.reduce mean %h, dims = [0] : tensor<4x3xf32> -> tensor<3xf32>
  %bmeanw = kiln.broadcast_in_dim %bmean, dims = [1] : tensor<3xf32> -> tensor<4x3xf32>
  %bc = kiln.sub %h, %bmeanw : tensor<4x3xf32>
  %sq = kiln.mul %bc, %bc : tensor<4x3xf32>
  %bvar = kiln.reduce mean %sq, dims = [0] : tensor<4x3xf32> -> tensor<3xf32>
  %mean = kiln.mode_select %bmean, %rmean : tensor<3xf32>
  %var = kiln.mode_select %bvar, %rvar : tensor<3xf32>
  %keep0 = kiln.constant dense<0.9> : tensor<f32>
  %keep = kiln.broadcast_in_dim %keep0, dims = [] : tensor<f32> -> tensor<3xf32>
  %take0 = kiln.constant dense<0.1> : tensor<f32>
  %take = kiln.broadcast_in_dim %take0, dims = [] : tensor<f32> -> tensor<3xf32>
  %takev0 = kiln.constant dense<0.13333333333> : tensor<f32>
  %takev = kiln.broadcast_in_dim %takev0, dims = [] : tensor<f32> -> tensor<3xf32>
  %m0 = kiln.mul %rmean, %keep : tensor<3xf32>
  %m1 = kiln.mul %bmean, %take : tensor<3xf32>
  %nmean = kiln.add %m0, %m1 : tensor<3xf32>
  %v0 = kiln.mul %rvar, %keep : tensor<3xf32>
  %v1 = kiln.mul %bvar, %takev : tensor<3xf32>
  %nvar = kiln.add %v0, %v1 : tensor<3xf32>
  %eps0 = kiln.constant dense<1.0e-5> : tensor<f32>
  %eps = kiln.broadcast_in_dim %eps0, dims = [] : tensor<f32> -> tensor<3xf32>
  %ve = kiln.add %var, %eps : tensor<3xf32>
  %rstd = kiln.rsqrt %ve : tensor<3xf32>
  %scale = kiln.mul %rstd, %w : tensor<3xf32>
  %meanw = kiln.broadcast_in_dim %mean, dims = [1] : tensor<3xf32> -> tensor<4x3xf32>
  %scalew = kiln.broadcast_in_dim %scale, dims = [1] : tensor<3xf32> -> tensor<4x3xf32>
  %c = kiln.sub %h, %meanw : tensor<4x3xf32>
  %y = kiln.mul %c, %scalew : tensor<4x3xf32>
  %y2 = kiln.mul %y, %y : tensor<4x3xf32>
  %l = kiln.reduce mean %y2, dims = [0, 1] : tensor<4x3xf32> -> tensor<f32>
  return %l, %nmean, %nvar : tensor<f32>, tensor<3xf32>, tensor<3xf32>
}

// -----

// A biased running variance (as Keras updates it: the same constant as the
// mean's) is the global variance as it is.
// CHECK-LABEL: func.func @biased
// CHECK: kiln.all_gather
// CHECK: %[[TAKE:.*]] = kiln.constant dense<0.00999999977> : tensor<3xf32>
// CHECK: kiln.mul %[[TAKE]], %{{.*}} : tensor<3xf32>
// CHECK: return

// expected-remark @below {{2 batch statistics of @biased computed over the global batch of 2 ranks (1 mean/variance pairs, one all_gather each; 0 all_reduce), 0 running variance update(s)}}
func.func @biased(%x: tensor<4x3xf32> {kiln.role = #kiln.role<input>},
                  %rmean: tensor<3xf32> {kiln.role = #kiln.role<model_state>, kiln.init = #kiln.init<kind = zeros>},
                  %rvar: tensor<3xf32> {kiln.role = #kiln.role<model_state>, kiln.init = #kiln.init<kind = ones>})
    -> (tensor<f32> {kiln.role = #kiln.role<loss>},
        tensor<3xf32> {kiln.role = #kiln.role<model_state>, kiln.updates = 1 : i64},
        tensor<3xf32> {kiln.role = #kiln.role<model_state>, kiln.updates = 2 : i64}) {
  %bmean = kiln.reduce mean %x, dims = [0] : tensor<4x3xf32> -> tensor<3xf32>
  %bmeanw = kiln.broadcast_in_dim %bmean, dims = [1] : tensor<3xf32> -> tensor<4x3xf32>
  %bc = kiln.sub %x, %bmeanw : tensor<4x3xf32>
  %sq = kiln.mul %bc, %bc : tensor<4x3xf32>
  %bvar = kiln.reduce mean %sq, dims = [0] : tensor<4x3xf32> -> tensor<3xf32>
  %mean = kiln.mode_select %bmean, %rmean : tensor<3xf32>
  %var = kiln.mode_select %bvar, %rvar : tensor<3xf32>
  %take = kiln.constant dense<0.01> : tensor<3xf32>
  %m1 = kiln.mul %bmean, %take : tensor<3xf32>
  %v1 = kiln.mul %take, %bvar : tensor<3xf32>
  %s = kiln.add %mean, %var : tensor<3xf32>
  %l = kiln.reduce sum %s, dims = [0] : tensor<3xf32> -> tensor<f32>
  return %l, %m1, %v1 : tensor<f32>, tensor<3xf32>, tensor<3xf32>
}

// -----

// A running variance update kiln does not recognize keeps the rank's own
// n / (n - 1), and says so.
// expected-remark @below {{0 running variance update(s)}}
func.func @unknown(%x: tensor<4x3xf32> {kiln.role = #kiln.role<input>},
                   %rmean: tensor<3xf32> {kiln.role = #kiln.role<model_state>, kiln.init = #kiln.init<kind = zeros>},
                   %rvar: tensor<3xf32> {kiln.role = #kiln.role<model_state>, kiln.init = #kiln.init<kind = ones>})
    -> (tensor<f32> {kiln.role = #kiln.role<loss>},
        tensor<3xf32> {kiln.role = #kiln.role<model_state>, kiln.updates = 1 : i64},
        tensor<3xf32> {kiln.role = #kiln.role<model_state>, kiln.updates = 2 : i64}) {
  %bmean = kiln.reduce mean %x, dims = [0] : tensor<4x3xf32> -> tensor<3xf32>
  %bmeanw = kiln.broadcast_in_dim %bmean, dims = [1] : tensor<3xf32> -> tensor<4x3xf32>
  %bc = kiln.sub %x, %bmeanw : tensor<4x3xf32>
  %sq = kiln.mul %bc, %bc : tensor<4x3xf32>
  // expected-warning @below {{the running update of this batch statistic scales it by 5.000000e-02, neither its mean's 1.000000e-02 nor that times n / (n - 1) (n = 4); it keeps the rank's own n}}
  %bvar = kiln.reduce mean %sq, dims = [0] : tensor<4x3xf32> -> tensor<3xf32>
  %mean = kiln.mode_select %bmean, %rmean : tensor<3xf32>
  %var = kiln.mode_select %bvar, %rvar : tensor<3xf32>
  %take = kiln.constant dense<0.01> : tensor<3xf32>
  %takev = kiln.constant dense<0.05> : tensor<3xf32>
  %m1 = kiln.mul %bmean, %take : tensor<3xf32>
  %v1 = kiln.mul %bvar, %takev : tensor<3xf32>
  %s = kiln.add %mean, %var : tensor<3xf32>
  %l = kiln.reduce sum %s, dims = [0] : tensor<3xf32> -> tensor<f32>
  return %l, %m1, %v1 : tensor<f32>, tensor<3xf32>, tensor<3xf32>
}

// -----

// The centred values feed the normalization too, so the variance's ops
// cannot read a local mean: each statistic gets its own all-reduce, the
// variance's about the global mean (exact as well, one more collective).
// CHECK-LABEL: func.func @shared
// CHECK: %[[LM:.*]] = kiln.reduce mean %arg0, dims = [0]
// CHECK-NEXT: %[[M:.*]] = kiln.all_reduce mean %[[LM]] : tensor<3xf32>
// CHECK-NEXT: %[[W:.*]] = kiln.broadcast_in_dim %[[M]]
// CHECK-NEXT: %[[C:.*]] = kiln.sub %arg0, %[[W]]
// CHECK-NEXT: %[[SQ:.*]] = kiln.mul %[[C]], %[[C]]
// CHECK-NEXT: %[[LV:.*]] = kiln.reduce mean %[[SQ]], dims = [0]
// CHECK-NEXT: %[[V:.*]] = kiln.all_reduce mean %[[LV]] : tensor<3xf32>
// CHECK-NOT: kiln.all_gather
// CHECK: kiln.constant dense<0.1142857{{[0-9]*}}> : tensor<3xf32>
// CHECK: return

// expected-remark @below {{2 batch statistics of @shared computed over the global batch of 2 ranks (0 mean/variance pairs, one all_gather each; 2 all_reduce), 1 running variance update(s)}}
func.func @shared(%x: tensor<4x3xf32> {kiln.role = #kiln.role<input>},
                  %rmean: tensor<3xf32> {kiln.role = #kiln.role<model_state>, kiln.init = #kiln.init<kind = zeros>},
                  %rvar: tensor<3xf32> {kiln.role = #kiln.role<model_state>, kiln.init = #kiln.init<kind = ones>})
    -> (tensor<f32> {kiln.role = #kiln.role<loss>},
        tensor<3xf32> {kiln.role = #kiln.role<model_state>, kiln.updates = 1 : i64},
        tensor<3xf32> {kiln.role = #kiln.role<model_state>, kiln.updates = 2 : i64}) {
  %bmean = kiln.reduce mean %x, dims = [0] : tensor<4x3xf32> -> tensor<3xf32>
  %bmeanw = kiln.broadcast_in_dim %bmean, dims = [1] : tensor<3xf32> -> tensor<4x3xf32>
  %bc = kiln.sub %x, %bmeanw : tensor<4x3xf32>
  %sq = kiln.mul %bc, %bc : tensor<4x3xf32>
  %bvar = kiln.reduce mean %sq, dims = [0] : tensor<4x3xf32> -> tensor<3xf32>
  %mean = kiln.mode_select %bmean, %rmean : tensor<3xf32>
  %var = kiln.mode_select %bvar, %rvar : tensor<3xf32>
  %take = kiln.constant dense<0.1> : tensor<3xf32>
  %takev = kiln.constant dense<0.13333333333> : tensor<3xf32>
  %m1 = kiln.mul %bmean, %take : tensor<3xf32>
  %v1 = kiln.mul %bvar, %takev : tensor<3xf32>
  %varw = kiln.broadcast_in_dim %var, dims = [1] : tensor<3xf32> -> tensor<4x3xf32>
  %y = kiln.mul %bc, %varw : tensor<4x3xf32>
  %l = kiln.reduce sum %y, dims = [0, 1] : tensor<4x3xf32> -> tensor<f32>
  return %l, %m1, %v1 : tensor<f32>, tensor<3xf32>, tensor<3xf32>
}

// -----

// A variance written as E[x^2] - E[x]^2 is not a reduction: refused, since
// --sync-batch-norm promised global statistics.
func.func @moments(%x: tensor<4x3xf32> {kiln.role = #kiln.role<input>},
                   %rvar: tensor<3xf32> {kiln.role = #kiln.role<model_state>, kiln.init = #kiln.init<kind = ones>})
    -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %m = kiln.reduce mean %x, dims = [0] : tensor<4x3xf32> -> tensor<3xf32>
  %sq = kiln.mul %x, %x : tensor<4x3xf32>
  %m2 = kiln.reduce mean %sq, dims = [0] : tensor<4x3xf32> -> tensor<3xf32>
  %mm = kiln.mul %m, %m : tensor<3xf32>
  %bvar = kiln.sub %m2, %mm : tensor<3xf32>
  // expected-error @below {{kiln-sync-batch-norm: this kiln.mode_select pairs a running statistic with a training value that is not a float kiln.reduce mean or sum over the batch dimension (0), so it cannot be computed over the global batch; found kiln.sub at}}
  %var = kiln.mode_select %bvar, %rvar : tensor<3xf32>
  %l = kiln.reduce sum %var, dims = [0] : tensor<3xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A statistic over the channels rather than the batch is not a batch norm's.
func.func @layer(%x: tensor<4x3xf32> {kiln.role = #kiln.role<input>},
                 %r: tensor<4xf32> {kiln.role = #kiln.role<model_state>, kiln.init = #kiln.init<kind = zeros>})
    -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  %m = kiln.reduce mean %x, dims = [1] : tensor<4x3xf32> -> tensor<4xf32>
  // expected-error @below {{not a float kiln.reduce mean or sum over the batch dimension (0)}}
  %s = kiln.mode_select %m, %r : tensor<4xf32>
  %l = kiln.reduce sum %s, dims = [0] : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A variance centred by a mean that stays local would not be the global
// batch's variance: refused at that mean.
func.func @localmean(%x: tensor<4x3xf32> {kiln.role = #kiln.role<input>},
                     %rvar: tensor<3xf32> {kiln.role = #kiln.role<model_state>, kiln.init = #kiln.init<kind = ones>})
    -> (tensor<f32> {kiln.role = #kiln.role<loss>}) {
  // expected-error @below {{kiln-sync-batch-norm: this reduction over the batch dimension (0) feeds the batch statistic at}}
  %m = kiln.reduce mean %x, dims = [0] : tensor<4x3xf32> -> tensor<3xf32>
  %mw = kiln.broadcast_in_dim %m, dims = [1] : tensor<3xf32> -> tensor<4x3xf32>
  %c = kiln.sub %x, %mw : tensor<4x3xf32>
  %sq = kiln.mul %c, %c : tensor<4x3xf32>
  %bvar = kiln.reduce mean %sq, dims = [0] : tensor<4x3xf32> -> tensor<3xf32>
  %var = kiln.mode_select %bvar, %rvar : tensor<3xf32>
  %l = kiln.reduce sum %var, dims = [0] : tensor<3xf32> -> tensor<f32>
  return %l : tensor<f32>
}
