"""A floor for the CPU training-step benchmark: the time of the matrix
products alone in one training step of the zoo's mlp (784-512-256-10,
batch 128), measured with PyTorch's GEMM (MKL) on T threads pinned to the
first T CPUs, with the rate they reach.

A step has 8 products: forward x@W1, h1@W2, h2@W3; weight gradients
x^T@d1, h1^T@d2, h2^T@d3; input gradients d3@W3^T, d2@W2^T (the input x
needs none). That is 308 MFLOP; everything else in the step (bias, ReLU,
softmax cross entropy, Adam over 535,818 parameters) is memory-bound and
small. A step that runs these products at MKL's speed cannot be faster than
this, which puts the issue's "0.6x the faster peer" target in proportion for
the machine at hand. others_util is the CPU time other processes used during
the timed loop (as in peers.py); near 0 means a clean measurement.

Usage: python3 bench/cpu/gemm_floor.py [--threads T] [--reps N]
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peers import Timer  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--reps", type=int, default=200)
    args = ap.parse_args()
    allowed = sorted(os.sched_getaffinity(0))
    if not 1 <= args.threads <= len(allowed) or args.reps < 1:
        ap.error(f"--threads must be in 1..{len(allowed)}, --reps at least 1")
    os.sched_setaffinity(0, allowed[:args.threads])
    import torch
    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)

    b, sizes = 128, (784, 512, 256, 10)
    g = torch.Generator().manual_seed(0)
    r = lambda *s: torch.randn(*s, generator=g)
    acts = [r(b, n) for n in sizes]            # x, h1, h2, logits
    grads = [r(b, n) for n in sizes]           # d(logits), d1, d2 at index 1..3
    weights = [r(sizes[i], sizes[i + 1]) for i in range(3)]
    products = []
    for i in range(3):                          # forward
        products.append((acts[i], weights[i]))
    for i in range(3):                          # weight gradients
        products.append((acts[i].t(), grads[i + 1]))
    for i in (1, 2):                            # input gradients of h1, h2
        products.append((grads[i + 1], weights[i].t()))
    flops = sum(2 * a.shape[0] * a.shape[1] * w.shape[1] for a, w in products)

    def step():
        for a, w in products:
            torch.mm(a, w)

    for _ in range(max(3, args.reps // 10)):
        step()
    timer = Timer()
    timer.start_loop()
    for _ in range(args.reps):
        t0 = time.perf_counter()
        step()
        timer.times.append(time.perf_counter() - t0)
    timer.end_loop()
    s = timer.summary()
    others = "n/a" if s["others_util"] is None else f"{s['others_util']:.2f}"
    print(f"{args.threads} thread(s) on CPUs {allowed[:args.threads]}, torch {torch.__version__}: "
          f"the step's 8 GEMMs ({flops / 1e6:.1f} MFLOP) min {s['min_ms']:.3f} ms, "
          f"median {s['median_ms']:.3f} ms ({flops / s['min_ms'] / 1e6:.1f} GFLOP/s at the "
          f"min); cpu_util {s['cpu_util']:.2f}, others_util {others}")


if __name__ == "__main__":
    main()
