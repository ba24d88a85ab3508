// RUN: kiln-opt %s -split-input-file -verify-diagnostics --kiln-apply-optimizer="optimizer=lion"
// RUN: not kiln-opt %s --kiln-apply-optimizer="schedule=warmup_cosine warmup-steps=10 total-steps=5" 2>&1 | FileCheck %s --check-prefix=SCHED
// RUN: not kiln-opt %s --kiln-apply-optimizer="lr=0" 2>&1 | FileCheck %s --check-prefix=LR

// An unknown optimizer is named.
// expected-error@+1 {{unknown optimizer 'lion' (expected sgd, momentum, adam or adamw)}}
module {
  func.func @f(%w: tensor<2xf32>) -> tensor<2xf32> {
    return %w : tensor<2xf32>
  }
}
// SCHED: schedule warmup_cosine needs total-steps (5) greater than warmup-steps (10)
// LR: the learning rate must be positive, but is 0
