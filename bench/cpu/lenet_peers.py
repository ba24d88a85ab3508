"""The peers' side of the CPU LeNet-5 training-step comparison
(bench/cpu/lenet.sh; --model resnet: the zoo's ResNet-8, width 16, batch
128, Adam 1e-3, its batch norms in train mode, in PyTorch eager,
torch.compile and JAX): milliseconds per step of the zoo's lenet5
(tools/kiln/lib/Zoo.cpp buildLeNet5: conv 6@5x5 pad 2, bias, ReLU, 2x2 max
pool; conv 16@5x5, bias, ReLU, 2x2 max pool; flatten; fc 400-120-84-10 with
ReLUs; mean softmax cross-entropy; Adam 1e-3; f32, batch 128) in PyTorch
eager, torch.compile and JAX (jax.jit on XLA:CPU), on --threads threads.
One fixed batch of random normal inputs and uniform labels in [0, 10); no
data loading is timed. Initial parameters: PyTorch's defaults (uniform in
+-1/sqrt(fan_in)), drawn once in numpy from the seed and loaded into each
peer. JAX's loss and Adam are bench/cpu/peers.py's.

Usage: python3 bench/cpu/lenet_peers.py [--threads 2] [--steps 50]
       [--warmup 5] [--peers torch,compile,jax] [--model lenet5|resnet] [--json]
Each peer runs in its own process (pinned to the first --threads allowed
CPUs before its library starts a thread; XLA sizes its pool from that).
Prints, per peer, the median and minimum ms per step and the first and last
loss; both peers start from the same parameters and data, so their first
losses agree (checked to 1e-4; exit 1 otherwise). With --json, one JSON line
per peer.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

# The MLP benchmark's peers (this directory): the same Adam and loss in JAX.
from peers import jax_adam_step, jax_mean_cross_entropy, torch_adam_step

BATCH = 128
# name: shape (PyTorch's layouts: conv [O, I, KH, KW], linear [out, in])
SHAPES = {"conv1.weight": (6, 1, 5, 5), "conv1.bias": (6,),
          "conv2.weight": (16, 6, 5, 5), "conv2.bias": (16,),
          "fc1.weight": (120, 400), "fc1.bias": (120,),
          "fc2.weight": (84, 120), "fc2.bias": (84,),
          "fc3.weight": (10, 84), "fc3.bias": (10,)}
FAN_IN = {"conv1": 25, "conv2": 150, "fc1": 400, "fc2": 120, "fc3": 84}


def initial_state(seed, batch):
    rng = np.random.default_rng(seed)
    params = {}
    for name, shape in SHAPES.items():
        bound = 1.0 / np.sqrt(FAN_IN[name.split(".")[0]])
        params[name] = rng.uniform(-bound, bound, shape).astype(np.float32)
    x = rng.standard_normal((batch, 1, 28, 28)).astype(np.float32)
    y = rng.integers(0, 10, batch).astype(np.int32)
    return params, x, y


def timed(step, args):
    losses, times = [], []
    for _ in range(args.warmup):
        losses.append(float(step()))
    for _ in range(args.steps):
        t0 = time.perf_counter()
        loss = step()
        loss = float(loss)  # waits for the step (JAX: block until ready)
        times.append((time.perf_counter() - t0) * 1e3)
        losses.append(loss)
    return dict(median_ms=statistics.median(times), min_ms=min(times),
                first_loss=losses[0], last_loss=losses[-1])


def resnet(args):
    """The zoo's resnet with its defaults (ResNet-8, width 16): the PyTorch
    module of tests/lit/train/resnet_torch.py, which that test trains
    against kiln's."""
    import torch
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                    "..", "..", "tests", "lit", "train"))
    from resnet_torch import ResNet
    torch.manual_seed(args.seed)
    return ResNet(1, 16).train()


def run_torch(args, params, x, y, compiled):
    import torch
    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    if args.model == "resnet":
        step = torch_adam_step(resnet(args), x, y)
        run = torch.compile(step) if compiled else step
        return dict(peer="torch.compile" if compiled else "torch",
                    version=torch.__version__, **timed(run, args))
    model = torch.nn.Sequential(
        torch.nn.Conv2d(1, 6, 5, padding=2), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(6, 16, 5), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(),
        torch.nn.Linear(400, 120), torch.nn.ReLU(),
        torch.nn.Linear(120, 84), torch.nn.ReLU(),
        torch.nn.Linear(84, 10))
    layers = {"conv1": model[0], "conv2": model[3], "fc1": model[7],
              "fc2": model[9], "fc3": model[11]}
    with torch.no_grad():
        for name, value in params.items():
            layer, kind = name.split(".")
            getattr(layers[layer], kind).copy_(torch.from_numpy(value))
    step = torch_adam_step(model, x, y)
    run = torch.compile(step) if compiled else step
    return dict(peer="torch.compile" if compiled else "torch",
                version=torch.__version__, **timed(run, args))


def run_jax(args, params, x, y):
    import jax
    import jax.numpy as jnp
    from jax import lax

    def conv(h, w, b, pad):
        h = lax.conv_general_dilated(h, w, (1, 1), [(pad, pad), (pad, pad)],
                                     dimension_numbers=("NCHW", "OIHW", "NCHW"))
        return jax.nn.relu(h + b[None, :, None, None])

    def pool(h):
        return lax.reduce_window(h, -jnp.inf, lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")

    def loss_fn(p, x, y):
        h = pool(conv(x, p["conv1.weight"], p["conv1.bias"], 2))
        h = pool(conv(h, p["conv2.weight"], p["conv2.bias"], 0))
        h = h.reshape(h.shape[0], -1)
        h = jax.nn.relu(h @ p["fc1.weight"].T + p["fc1.bias"])
        h = jax.nn.relu(h @ p["fc2.weight"].T + p["fc2.bias"])
        h = h @ p["fc3.weight"].T + p["fc3.bias"]
        return jax_mean_cross_entropy(h, y)

    step = jax_adam_step(loss_fn)

    cpu = jax.devices("cpu")[0]
    state = {"p": {k: jax.device_put(a, cpu) for k, a in params.items()}}
    state["m"] = {k: jnp.zeros_like(a) for k, a in state["p"].items()}
    state["v"] = {k: jnp.zeros_like(a) for k, a in state["p"].items()}
    state["t"] = jnp.zeros((), jnp.int32)
    xs, ys = jax.device_put(x, cpu), jax.device_put(y, cpu)
    compiled = jax.jit(step, donate_argnums=(0, 1, 2)).lower(
        state["p"], state["m"], state["v"], state["t"], xs, ys).compile()

    def one():
        loss, state["p"], state["m"], state["v"], state["t"] = compiled(
            state["p"], state["m"], state["v"], state["t"], xs, ys)
        return loss.block_until_ready()

    return dict(peer="jax", version=jax.__version__, **timed(one, args))


def run_jax_resnet(args, x, y):
    """The same ResNet-8 in JAX: PyTorch's weights and running statistics
    (resnet(args)), batch norms in train mode (batch statistics, the
    running statistics updated as PyTorch does: momentum 0.1, unbiased
    variance) and Adam, as one jax.jit step."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    state = {k: v.detach().numpy() for k, v in resnet(args).state_dict().items()
             if not k.endswith("num_batches_tracked")}
    stats = {k: v for k, v in state.items() if k.endswith(("running_mean", "running_var"))}
    params = {k: v for k, v in state.items() if k not in stats}

    def conv(h, w, stride, pad):
        return lax.conv_general_dilated(h, w, (stride, stride), [(pad, pad), (pad, pad)],
                                        dimension_numbers=("NCHW", "OIHW", "NCHW"))

    def bn(h, p, s, name, new):
        mean = h.mean(axis=(0, 2, 3))
        var = jnp.square(h - mean[None, :, None, None]).mean(axis=(0, 2, 3))
        n = h.shape[0] * h.shape[2] * h.shape[3]
        new[name + ".running_mean"] = 0.9 * s[name + ".running_mean"] + 0.1 * mean
        new[name + ".running_var"] = 0.9 * s[name + ".running_var"] + 0.1 * var * n / (n - 1)
        scale = lax.rsqrt(var + 1e-5) * p[name + ".weight"]
        return ((h - mean[None, :, None, None]) * scale[None, :, None, None]
                + p[name + ".bias"][None, :, None, None])

    def loss_fn(p, s, x, y):
        new = {}
        h = jax.nn.relu(bn(conv(x, p["conv1.weight"], 1, 1), p, s, "bn1", new))
        channels = 16
        for stage in range(3):
            width, stride = 16 << stage, 2 if stage > 0 else 1
            b = f"layer{stage + 1}.0"
            o = jax.nn.relu(bn(conv(h, p[b + ".conv1.weight"], stride, 1), p, s, b + ".bn1", new))
            o = bn(conv(o, p[b + ".conv2.weight"], 1, 1), p, s, b + ".bn2", new)
            if stride != 1 or channels != width:
                h = bn(conv(h, p[b + ".downsample.0.weight"], stride, 0), p, s,
                       b + ".downsample.1", new)
            h = jax.nn.relu(o + h)
            channels = width
        logits = h.mean(axis=(2, 3)) @ p["fc.weight"].T + p["fc.bias"]
        return jax_mean_cross_entropy(logits, y), new

    step = jax_adam_step(loss_fn, with_state=True)
    cpu = jax.devices("cpu")[0]
    st = {"p": {k: jax.device_put(a, cpu) for k, a in params.items()},
          "s": {k: jax.device_put(a, cpu) for k, a in stats.items()}}
    st["m"] = {k: jnp.zeros_like(a) for k, a in st["p"].items()}
    st["v"] = {k: jnp.zeros_like(a) for k, a in st["p"].items()}
    st["t"] = jnp.zeros((), jnp.int32)
    xs, ys = jax.device_put(x, cpu), jax.device_put(y, cpu)
    compiled = jax.jit(step, donate_argnums=(0, 1, 2, 4)).lower(
        st["p"], st["m"], st["v"], st["t"], st["s"], xs, ys).compile()

    def one():
        loss, st["p"], st["m"], st["v"], st["t"], st["s"] = compiled(
            st["p"], st["m"], st["v"], st["t"], st["s"], xs, ys)
        return loss.block_until_ready()

    return dict(peer="jax", version=jax.__version__, **timed(one, args))


def worker(args):
    allowed = sorted(os.sched_getaffinity(0))
    if args.threads > len(allowed):
        sys.exit(f"lenet_peers.py: --threads {args.threads} but only {len(allowed)} "
                 f"CPUs are allowed")
    os.sched_setaffinity(0, allowed[:args.threads])
    if args.worker == "jax":
        os.environ["JAX_PLATFORMS"] = "cpu"
    params, x, y = initial_state(args.seed, BATCH)
    if args.worker == "jax":
        result = (run_jax_resnet(args, x, y) if args.model == "resnet"
                  else run_jax(args, params, x, y))
    else:
        result = run_torch(args, params, x, y, compiled=args.worker == "compile")
    result.update(threads=args.threads, steps=args.steps, batch=BATCH)
    print(json.dumps(result), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--peers", default=None,
                    help="default torch,compile,jax")
    ap.add_argument("--model", choices=("lenet5", "resnet"), default="lenet5")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--worker", choices=("torch", "compile", "jax"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.threads < 1 or args.steps < 1 or args.warmup < 1:
        ap.error("--threads, --steps and --warmup must be at least 1")
    if args.worker:
        return worker(args)
    if args.peers is None:
        args.peers = "torch,compile,jax"
    results, failed = [], False
    for peer in [p for p in args.peers.split(",") if p]:
        if peer not in ("torch", "compile", "jax"):
            ap.error(f"--peers: unknown peer '{peer}' (torch, compile, jax)")
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", peer,
               "--threads", str(args.threads), "--steps", str(args.steps),
               "--warmup", str(args.warmup), "--seed", str(args.seed),
               "--model", args.model]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        lines = [l for l in proc.stdout.splitlines() if l.startswith("{")]
        if proc.returncode != 0 or not lines:
            print(f"lenet_peers.py: {peer} failed (exit {proc.returncode}):\n"
                  f"{proc.stderr[-2000:]}", file=sys.stderr)
            failed = True
            continue
        results.append(json.loads(lines[-1]))
    for r in results:
        print(f"{r['peer']:<14} {r['version']:<16} median {r['median_ms']:8.2f} ms  "
              f"min {r['min_ms']:8.2f} ms  loss {r['first_loss']:.5f} -> {r['last_loss']:.5f}")
        if args.json:
            print(json.dumps(r))
    firsts = [r["first_loss"] for r in results]
    if firsts and max(firsts) - min(firsts) > 1e-4:
        print(f"lenet_peers.py: the peers' first losses differ: {firsts}", file=sys.stderr)
        failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
