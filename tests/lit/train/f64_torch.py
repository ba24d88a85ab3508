"""An f64 model against PyTorch in f64 (f64-checkpoint.test): the model of
Inputs/regression-f64.mlir (x @ fc1.weight, tanh, @ fc2.weight, mean
squared error; Adam at learning rate 0.01), trained from the same state on
the same batches in file order.

  f64_torch.py make DIR
      writes DIR/init.safetensors (the two weights, F64, from a random
      seed that is printed) and the data DIR/data/{x,target}.npy (16
      samples, float64: an f64 input reads them unrounded)
  f64_torch.py check DIR CHECKPOINT
      trains PyTorch in f64 from DIR/init.safetensors for as many steps as
      CHECKPOINT (a kiln checkpoint) records, and compares every tensor of
      CHECKPOINT with PyTorch's parameters and Adam state. Each must be
      F64 and agree to 1e-10 relative (of the tensor's largest value): f32
      anywhere on the way would leave differences near 1e-7."""

import os
import sys

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import save_file

BATCH = 4
SAMPLES = 16
LR = 0.01
TOLERANCE = 1e-10


def make(out):
    seed = int.from_bytes(os.urandom(4), "little")
    print(f"seed {seed}")
    g = torch.Generator().manual_seed(seed)
    state = {"fc1.weight": torch.rand(3, 6, generator=g, dtype=torch.float64) - 0.5,
             "fc2.weight": torch.rand(6, 2, generator=g, dtype=torch.float64) - 0.5}
    save_file(state, os.path.join(out, "init.safetensors"))
    os.makedirs(os.path.join(out, "data"), exist_ok=True)
    rng = np.random.default_rng(seed)
    np.save(os.path.join(out, "data", "x.npy"), rng.standard_normal((SAMPLES, 3)))
    np.save(os.path.join(out, "data", "target.npy"), rng.standard_normal((SAMPLES, 2)))
    print(f"wrote {len(state)} tensors")


def check(out, checkpoint):
    with safe_open(os.path.join(out, "init.safetensors"), "pt") as f:
        w1 = f.get_tensor("fc1.weight").requires_grad_()
        w2 = f.get_tensor("fc2.weight").requires_grad_()
    x = torch.from_numpy(np.load(os.path.join(out, "data", "x.npy")))
    t = torch.from_numpy(np.load(os.path.join(out, "data", "target.npy")))
    with safe_open(checkpoint, "np") as f:
        steps = int(f.metadata()["step"])
        saved = {k: f.get_tensor(k) for k in f.keys() if k != "rng/state"}
    optimizer = torch.optim.Adam([w1, w2], lr=LR)
    for k in range(steps):
        b = k % (SAMPLES // BATCH)
        optimizer.zero_grad()
        y = torch.tanh(x[b * BATCH:(b + 1) * BATCH] @ w1) @ w2
        torch.nn.functional.mse_loss(y, t[b * BATCH:(b + 1) * BATCH]).backward()
        optimizer.step()
    ours = {"fc1.weight": w1, "fc2.weight": w2}
    for name, p in list(ours.items()):
        ours[f"optimizer/exp_avg/{name}"] = optimizer.state[p]["exp_avg"]
        ours[f"optimizer/exp_avg_sq/{name}"] = optimizer.state[p]["exp_avg_sq"]
    if sorted(saved) != sorted(ours):
        sys.exit(f"{checkpoint}: tensors {sorted(saved)}, expected {sorted(ours)}")
    worst = 0.0
    for name, want in ours.items():
        got = saved[name]
        if got.dtype != np.float64:
            sys.exit(f"{checkpoint}: {name} is {got.dtype}, expected float64")
        want = want.detach().numpy()
        error = np.abs(got - want).max() / np.abs(want).max()
        if not error <= TOLERANCE:
            sys.exit(f"{checkpoint}: {name} differs from PyTorch by {error:.3g} "
                     f"relative, more than {TOLERANCE}")
        worst = max(worst, error)
    print(f"{len(ours)} f64 tensors match torch after {steps} steps "
          f"(largest relative difference {worst:.2g})")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "make":
        make(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "check":
        check(sys.argv[2], sys.argv[3])
    else:
        sys.exit("expected: f64_torch.py make DIR | check DIR CHECKPOINT")
