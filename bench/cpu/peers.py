"""The peers' side of the CPU training-step benchmark (issue 5): milliseconds
per training step of the zoo's mlp (784-512-256-10, ReLU, mean softmax cross
entropy, Adam lr 1e-3, batch 128, f32) in PyTorch (eager) and JAX (jax.jit on
XLA:CPU), with the same initial parameters, the same data and the same thread
count.

The model is tools/kiln/lib/Zoo.cpp's buildMlp: weights [in, out] and biases
both uniform in +-1/sqrt(fan_in) (PyTorch's nn.Linear default), drawn once in
numpy from --seed and loaded into both peers (PyTorch's nn.Linear gets the
transposed weight). Adam is torch.optim.Adam with its defaults (betas 0.9 and
0.999, eps 1e-8, no weight decay); the JAX step writes the same update by hand
(no optax): m = b1 m + (1-b1) g, v = b2 v + (1-b2) g^2,
p -= (lr / (1 - b1^t)) m / (sqrt(v) / sqrt(1 - b2^t) + eps).

Data: one fixed batch, random normal inputs and uniform labels in [0, 10)
(--data random, the default) or the first 128 Fashion-MNIST training images
scaled to [0, 1] (--data fashion-mnist, from the Debian package's IDX files).
Every timed step trains on it; no data loading is timed.

Each peer runs in its own subprocess, so that its thread settings are made
before its library starts any thread and neither library's thread pool
competes with the other's:
  - PyTorch: torch.set_num_threads(T), torch.set_num_interop_threads(1); a
    standard loop (forward, loss, zero_grad(set_to_none=True), backward,
    step). Eager mode has no compile step.
  - JAX: one jitted function does forward, gradient and Adam update, with the
    parameters and optimizer state donated. XLA:CPU has no thread-count
    flag: it sizes its thread pool from the CPUs the process may run on, so
    the limit is the affinity mask. With --pin (the default) each worker is
    pinned to the first T CPUs of its allowed set before JAX or PyTorch is
    imported. XLA_FLAGS also gets --xla_cpu_multi_thread_eigen=false when T
    is 1, the usual recipe, but measured alone (2 CPUs allowed) it still kept
    1.8 CPUs busy; "intra_op_parallelism_threads=T" is not an XLA flag (XLA
    aborts, taking it for a flag file name).
    Each step waits for the loss (block_until_ready). The compile time is
    jax.jit(step).lower(...).compile(), timed once in a fresh process.
The measured CPU time / wall time of the timed loop (cpu_util) shows how many
threads each peer really kept busy; others_util is the CPU time the rest of
the machine used meanwhile (from /proc/stat): a clean measurement has it near
0, and a multi-threaded PyTorch step slows down many times over when another
process holds one of its cores.

Usage:
  python3 bench/cpu/peers.py --threads T --steps N --warmup W [--json]
      [--peers torch,jax] [--data random|fashion-mnist] [--seed S] [--no-pin]
      [--retries K] [--max-others X]
Prints a table (min and median ms per step over the N timed steps, compile
time, losses at the first and last step) and, with --json, one JSON line per
peer. With --retries K a peer whose timed loop shared the machine with more
than --max-others (0.1) CPUs of other work is rerun, up to K times; a peer
still not clean gets a WARNING line. Exits non-zero when a peer is missing or fails, or when the two peers'
losses disagree by more than --tolerance (1e-4) in the first --check-steps
(10) steps. Later steps are printed but not checked: the two libraries sum in
different orders, and Adam, which divides each gradient by its own running
magnitude, amplifies those last-bit differences once gradients get small (on
Fashion-MNIST the losses agree to 7e-6 over 10 steps and drift to ~2e-4 by
step 20, while both keep falling alike).
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

SIZES = (784, 512, 256, 10)
BATCH = 128
LR, BETA1, BETA2, EPS = 1e-3, 0.9, 0.999, 1e-8
FASHION_MNIST = "/usr/share/datasets/fashion-mnist"


def initial_state(seed, data):
    """The parameters (Zoo.cpp's layout: weight [in, out]) and the batch."""
    import numpy as np
    rng = np.random.default_rng(seed)
    params = {}
    for i in range(1, len(SIZES)):
        bound = 1.0 / np.sqrt(SIZES[i - 1])
        params[f"fc{i}.weight"] = rng.uniform(
            -bound, bound, (SIZES[i - 1], SIZES[i])).astype(np.float32)
        params[f"fc{i}.bias"] = rng.uniform(-bound, bound, (SIZES[i],)).astype(np.float32)
    if data == "random":
        x = rng.standard_normal((BATCH, SIZES[0])).astype(np.float32)
        y = rng.integers(0, SIZES[-1], (BATCH,)).astype(np.int32)
    else:
        x, y = fashion_mnist_batch()
    return params, x, y


def fashion_mnist_batch():
    import gzip
    import numpy as np
    images_path = os.path.join(FASHION_MNIST, "train-images-idx3-ubyte.gz")
    labels_path = os.path.join(FASHION_MNIST, "train-labels-idx1-ubyte.gz")
    for path in (images_path, labels_path):
        if not os.path.exists(path):
            sys.exit(f"peers.py: {path} not found (apt-get install "
                     "dataset-fashion-mnist, or use --data random)")
    with gzip.open(images_path, "rb") as f:
        raw = f.read(16 + BATCH * 784)
    with gzip.open(labels_path, "rb") as f:
        labels = f.read(8 + BATCH)
    if int.from_bytes(raw[:4], "big") != 2051 or int.from_bytes(labels[:4], "big") != 2049:
        sys.exit(f"peers.py: {FASHION_MNIST}: not IDX image/label files")
    x = np.frombuffer(raw[16:], np.uint8).reshape(BATCH, 784).astype(np.float32) / 255.0
    y = np.frombuffer(labels[8:], np.uint8).astype(np.int32)
    return x, y


def system_busy_seconds():
    """CPU seconds all processes have spent busy (/proc/stat), or None."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
    except OSError:
        return None
    user, nice, system, idle, iowait, irq, softirq, steal = map(int, fields[1:9])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


class Timer:
    """Wall time per step; over the whole timed loop, this process's CPU time
    (cpu_util, in CPUs) and everybody else's (others_util: the machine's busy
    time less ours, which should be near 0 for a clean measurement)."""

    def __init__(self):
        self.times = []

    def start_loop(self):
        usage = resource.getrusage(resource.RUSAGE_SELF)
        self.cpu0 = usage.ru_utime + usage.ru_stime
        self.busy0 = system_busy_seconds()
        self.wall0 = time.perf_counter()

    def end_loop(self):
        wall = time.perf_counter() - self.wall0
        usage = resource.getrusage(resource.RUSAGE_SELF)
        busy = system_busy_seconds()
        ours = usage.ru_utime + usage.ru_stime - self.cpu0
        self.cpu_util = ours / wall
        self.others_util = (None if busy is None or self.busy0 is None
                            else max(0.0, (busy - self.busy0 - ours) / wall))

    def summary(self):
        ms = [t * 1e3 for t in self.times]
        return {"min_ms": min(ms), "median_ms": statistics.median(ms),
                "mean_ms": statistics.fmean(ms), "cpu_util": self.cpu_util,
                "others_util": self.others_util}


def run_torch(args, params, x, y):
    import torch
    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    model = torch.nn.Sequential()
    for i in range(1, len(SIZES)):
        linear = torch.nn.Linear(SIZES[i - 1], SIZES[i])
        with torch.no_grad():
            linear.weight.copy_(torch.from_numpy(params[f"fc{i}.weight"].T.copy()))
            linear.bias.copy_(torch.from_numpy(params[f"fc{i}.bias"]))
        model.append(linear)
        if i < len(SIZES) - 1:
            model.append(torch.nn.ReLU())
    step = torch_adam_step(model, x, y)

    losses = []
    for _ in range(args.warmup):
        losses.append(step().item())
    timer = Timer()
    timer.start_loop()
    for _ in range(args.steps):
        t0 = time.perf_counter()
        loss = step()
        timer.times.append(time.perf_counter() - t0)
        losses.append(loss.detach())
    timer.end_loop()
    losses = [float(l) for l in losses]
    return dict(peer="torch", version=torch.__version__, mode="eager",
                compile_s=0.0, intra_threads=torch.get_num_threads(),
                losses=losses, **timer.summary())


def torch_adam_step(model, x, y):
    """One training step of |model| (PyTorch) on the [B, ...] inputs |x|
    and [B] labels |y| (numpy): mean cross-entropy and Adam with the
    benchmarks' hyper-parameters; returns the step, which returns the loss
    (detached: torch.compile may wrap it)."""
    import torch
    opt = torch.optim.Adam(model.parameters(), lr=LR, betas=(BETA1, BETA2), eps=EPS)
    xs, ys = torch.from_numpy(x), torch.from_numpy(y).long()

    def step():
        loss = torch.nn.functional.cross_entropy(model(xs), ys)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.detach()

    return step


def jax_mean_cross_entropy(logits, labels):
    """Mean softmax cross-entropy of [B, C] logits against [B] labels (JAX),
    as torch.nn.functional.cross_entropy computes it."""
    import jax
    import jax.numpy as jnp
    lse = jax.nn.logsumexp(logits, axis=-1)
    return jnp.mean(lse - jnp.take_along_axis(logits, labels[:, None], axis=-1)[:, 0])


def jax_adam_step(loss_fn, with_state=False):
    """The training step for jax.jit: (p, m, v, t, x, y) -> (loss, p, m, v, t),
    the gradient of loss_fn(p, x, y) and Adam written out as
    torch.optim.Adam computes it (the module docstring's formula). With
    with_state, model state (a batch norm's running statistics) goes
    through: loss_fn(p, s, x, y) -> (loss, new s), and the step is
    (p, m, v, t, s, x, y) -> (loss, p, m, v, t, s)."""
    import jax
    import jax.numpy as jnp

    def step(p, m, v, t, *rest):
        if with_state:
            s, x, y = rest
            (loss, s), g = jax.value_and_grad(loss_fn, has_aux=True)(p, s, x, y)
        else:
            x, y = rest
            loss, g = jax.value_and_grad(loss_fn)(p, x, y)
        t = t + 1
        tf = t.astype(jnp.float32)
        step_size = LR / (1 - BETA1 ** tf)
        bc2_sqrt = jnp.sqrt(1 - BETA2 ** tf)
        tm = jax.tree_util.tree_map
        m = tm(lambda m, g: BETA1 * m + (1 - BETA1) * g, m, g)
        v = tm(lambda v, g: BETA2 * v + (1 - BETA2) * g * g, v, g)
        p = tm(lambda p, m, v: p - step_size * m / (jnp.sqrt(v) / bc2_sqrt + EPS), p, m, v)
        if with_state:
            return loss, p, m, v, t, s
        return loss, p, m, v, t

    return step


def run_jax(args, params, x, y):
    import jax
    import jax.numpy as jnp

    def loss_fn(p, x, y):
        h = x
        for i in range(1, len(SIZES)):
            h = h @ p[f"fc{i}.weight"] + p[f"fc{i}.bias"]
            if i < len(SIZES) - 1:
                h = jax.nn.relu(h)
        return jax_mean_cross_entropy(h, y)

    step = jax_adam_step(loss_fn)

    cpu = jax.devices("cpu")[0]
    p = {k: jax.device_put(a, cpu) for k, a in params.items()}
    m = {k: jnp.zeros_like(a) for k, a in p.items()}
    v = {k: jnp.zeros_like(a) for k, a in p.items()}
    t = jnp.zeros((), jnp.int32)
    xs, ys = jax.device_put(x, cpu), jax.device_put(y, cpu)

    t0 = time.perf_counter()
    lowered = jax.jit(step, donate_argnums=(0, 1, 2)).lower(p, m, v, t, xs, ys)
    t1 = time.perf_counter()
    compiled = lowered.compile()
    t2 = time.perf_counter()

    losses = []
    for _ in range(args.warmup):
        loss, p, m, v, t = compiled(p, m, v, t, xs, ys)
        losses.append(float(loss.block_until_ready()))
    timer = Timer()
    timer.start_loop()
    for _ in range(args.steps):
        s0 = time.perf_counter()
        loss, p, m, v, t = compiled(p, m, v, t, xs, ys)
        loss.block_until_ready()
        timer.times.append(time.perf_counter() - s0)
        losses.append(loss)
    timer.end_loop()
    losses = [float(l) for l in losses]
    return dict(peer="jax", version=jax.__version__, mode="jit (XLA:CPU)",
                compile_s=t2 - t0, lower_s=t1 - t0, xla_compile_s=t2 - t1,
                xla_flags=os.environ.get("XLA_FLAGS", ""), losses=losses,
                **timer.summary())


def worker(args):
    if args.pin:
        allowed = sorted(os.sched_getaffinity(0))
        if args.threads > len(allowed):
            sys.exit(f"peers.py: --threads {args.threads} but only {len(allowed)} "
                     f"CPUs are allowed ({allowed}); use --no-pin to oversubscribe")
        os.sched_setaffinity(0, allowed[:args.threads])
    if args.worker == "jax":
        os.environ["JAX_PLATFORMS"] = "cpu"
        if args.threads == 1:
            flags = os.environ.get("XLA_FLAGS", "")
            os.environ["XLA_FLAGS"] = (flags + " --xla_cpu_multi_thread_eigen=false").strip()
    params, x, y = initial_state(args.seed, args.data)
    run = run_torch if args.worker == "torch" else run_jax
    result = run(args, params, x, y)
    result.update(threads=args.threads, steps=args.steps, warmup=args.warmup,
                  batch=BATCH, data=args.data, seed=args.seed,
                  cpus=sorted(os.sched_getaffinity(0)),
                  os_threads=len(os.listdir("/proc/self/task")))
    print(json.dumps(result), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--json", action="store_true", help="also print one JSON line per peer")
    ap.add_argument("--peers", default="torch,jax")
    ap.add_argument("--data", choices=("random", "fashion-mnist"), default="random")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-pin", dest="pin", action="store_false",
                    help="do not pin each peer to the first T allowed CPUs")
    ap.add_argument("--tolerance", type=float, default=1e-4,
                    help="largest |loss_torch - loss_jax| accepted over the first "
                         "--check-steps steps")
    ap.add_argument("--check-steps", type=int, default=10)
    ap.add_argument("--retries", type=int, default=0,
                    help="rerun a peer up to this many times while other processes "
                         "used more than --max-others CPUs during its timed loop")
    ap.add_argument("--max-others", type=float, default=0.1)
    ap.add_argument("--worker", choices=("torch", "jax"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if (args.threads < 1 or args.steps < 1 or args.warmup < 0 or args.retries < 0
            or args.check_steps < 1):
        ap.error("--threads, --steps and --check-steps must be at least 1, --warmup "
                 "and --retries at least 0")
    if args.worker:
        return worker(args)

    peers = [p for p in args.peers.split(",") if p]
    for p in peers:
        if p not in ("torch", "jax"):
            ap.error(f"--peers: unknown peer '{p}' (expected torch and/or jax)")
    results, failed = [], False
    for peer in peers:
        module = "torch" if peer == "torch" else "jax"
        if subprocess.run([sys.executable, "-c", f"import {module}"],
                          capture_output=True).returncode != 0:
            print(f"peers.py: {module} is not installed (scripts/install-peers.sh "
                  "installs it)", file=sys.stderr)
            failed = True
            continue
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", peer,
               "--threads", str(args.threads), "--steps", str(args.steps),
               "--warmup", str(args.warmup), "--data", args.data, "--seed", str(args.seed)]
        if not args.pin:
            cmd.append("--no-pin")
        for attempt in range(args.retries + 1):
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                break
            result = json.loads(proc.stdout.strip().splitlines()[-1])
            result["attempts"] = attempt + 1
            others = result["others_util"]
            if others is None or others <= args.max_others:
                break
        if proc.returncode != 0:
            print(f"peers.py: the {peer} run failed (exit {proc.returncode}):\n"
                  f"{proc.stderr.strip()}", file=sys.stderr)
            failed = True
            continue
        results.append(result)

    print(f"mlp 784-512-256-10, batch {BATCH}, Adam {LR:g}, f32, data {args.data}; "
          f"{args.threads} thread(s), {args.steps} timed steps after {args.warmup} warm-up; "
          f"load average {os.getloadavg()[0]:.2f}")
    print(f"{'peer':<6} {'version':<14} {'min ms':>8} {'median ms':>10} {'cpu_util':>9} "
          f"{'others':>7} {'compile s':>10} {'loss@1':>10} {'loss@last':>10}")
    for r in results:
        compile_s = "eager" if r["peer"] == "torch" else f"{r['compile_s']:.3f}"
        others = "n/a" if r["others_util"] is None else f"{r['others_util']:.2f}"
        print(f"{r['peer']:<6} {r['version']:<14} {r['min_ms']:>8.3f} {r['median_ms']:>10.3f} "
              f"{r['cpu_util']:>9.2f} {others:>7} {compile_s:>10} {r['losses'][0]:>10.6f} "
              f"{r['losses'][-1]:>10.6f}")
    for r in results:
        if r["others_util"] is not None and r["others_util"] > args.max_others:
            print(f"WARNING: other processes used {r['others_util']:.2f} CPUs while "
                  f"{r['peer']} was timed (after {r['attempts']} attempt(s)): its "
                  "numbers are not clean")
    if len(results) == 2:
        a, b = results[0]["losses"], results[1]["losses"]
        d_first, d_last = abs(a[0] - b[0]), abs(a[-1] - b[-1])
        d_max = max(abs(p - q) for p, q in zip(a, b))
        k = min(args.check_steps, len(a))
        d_check = max(abs(p - q) for p, q in zip(a[:k], b[:k]))
        ok = d_check <= args.tolerance
        print(f"loss agreement torch vs jax: max |diff| over steps 1-{k} {d_check:.2e} "
              f"({'ok' if ok else 'FAILED'}, tolerance {args.tolerance:g}); "
              f"|diff| at step 1 {d_first:.2e}, at step {len(a)} {d_last:.2e}, "
              f"largest {d_max:.2e}")
        failed = failed or not ok
    if args.json:
        for r in results:
            r = dict(r, loss_first=r["losses"][0], loss_last=r["losses"][-1])
            del r["losses"]
            print(json.dumps(r))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
