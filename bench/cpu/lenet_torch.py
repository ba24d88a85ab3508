"""PyTorch's side of the CPU LeNet-5 training-step comparison: milliseconds
per step of the zoo's lenet5 (tools/kiln/lib/Zoo.cpp buildLeNet5: conv 6@5x5
pad 2, bias, ReLU, 2x2 max pool; conv 16@5x5, bias, ReLU, 2x2 max pool;
flatten; fc 400-120-84-10 with ReLUs; mean softmax cross-entropy; Adam 1e-3;
f32, batch 128) in PyTorch eager and torch.compile, on --threads threads,
random normal inputs and uniform labels in [0, 10), one fixed batch, no data
loading timed. Kiln's side of the same run:

    kiln models lenet5 -o lenet.kiln && kiln compile lenet.kiln -o lenet.kpkg
    kiln-bench-step lenet.kpkg --steps 50 --warmup 5 --threads 2

Usage: python3 bench/cpu/lenet_torch.py [--threads 2] [--steps 50]
       [--warmup 5] [--modes eager,compile]
Prints, per mode, the median and minimum ms per step and the first and last
loss (both must fall: the losses are the check that each step trains).
"""
import argparse
import statistics
import time

import torch


def lenet5():
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 6, 5, padding=2), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(6, 16, 5), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(),
        torch.nn.Linear(400, 120), torch.nn.ReLU(),
        torch.nn.Linear(120, 84), torch.nn.ReLU(),
        torch.nn.Linear(84, 10))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--modes", default="eager,compile")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    torch.manual_seed(0)
    x = torch.randn(args.batch, 1, 28, 28)
    y = torch.randint(0, 10, (args.batch,))
    for mode in args.modes.split(","):
        torch.manual_seed(0)
        model = lenet5()
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)

        def step():
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            return loss

        run = torch.compile(step) if mode == "compile" else step
        losses, times = [], []
        for _ in range(args.warmup):
            losses.append(float(run()))
        for _ in range(args.steps):
            t0 = time.perf_counter()
            loss = run()
            times.append((time.perf_counter() - t0) * 1e3)
            losses.append(float(loss))
        print(f"torch {torch.__version__} {mode}: median {statistics.median(times):.2f} ms, "
              f"min {min(times):.2f} ms per step ({args.threads} threads, batch "
              f"{args.batch}); loss {losses[0]:.4f} -> {losses[-1]:.4f}", flush=True)


if __name__ == "__main__":
    main()
