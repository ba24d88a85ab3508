"""XLA's side of the fusion benchmark: the training steps of the zoo's mlp,
lenet5 and gpt written in JAX (same architectures as tools/kiln/lib/Zoo.cpp,
Adam as the optimizer), compiled by jax.jit for the CPU, and the kernels of
the optimized HLO counted.

A kernel is a top-level instruction of the ENTRY computation that does work:
a fusion, a library call (dot, convolution, custom-call) or an unfused
compute op. Parameters, constants, tuples, get-tuple-element, bitcasts and
copies of parameters are not kernels. Prints one JSON object per model.

With --gpt L,H,N,S,V,B the gpt has L blocks, hidden H, N heads, sequence S,
vocabulary V and batch B; with --time each object also has "compile_s", the
wall time of jax.jit's lower and compile (XLA's passes and its LLVM code
generation for the CPU), for bench/fusion/compile_time.sh.

Usage: python3 bench/fusion/xla_hlo.py [--model mlp|lenet5|gpt] [--gpt L,H,N,S,V,B] [--time]
"""

import argparse
import json
import os
import re
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

NOT_KERNELS = {"parameter", "constant", "tuple", "get-tuple-element", "bitcast",
               "after-all", "partition-id", "replica-id"}


def adam_step(loss_fn):
    b1, b2, eps, lr = 0.9, 0.999, 1e-8, 1e-3

    def step(params, m, v, t, *data):
        loss, grads = jax.value_and_grad(loss_fn)(params, *data)
        t1 = t + 1
        bc1 = 1 - b1 ** t1.astype(jnp.float32)
        bc2 = 1 - b2 ** t1.astype(jnp.float32)
        m = jax.tree_util.tree_map(lambda m, g: b1 * m + (1 - b1) * g, m, grads)
        v = jax.tree_util.tree_map(lambda v, g: b2 * v + (1 - b2) * g * g, v, grads)
        params = jax.tree_util.tree_map(
            lambda p, m, v: p - (lr / bc1) * m / (jnp.sqrt(v) / jnp.sqrt(bc2) + eps),
            params, m, v)
        return loss, params, m, v, t1
    return step


def xent(logits, labels):
    lse = jax.nn.logsumexp(logits, axis=-1)
    return jnp.mean(lse - jnp.take_along_axis(logits, labels[:, None], axis=-1)[:, 0])


def mlp(batch=128, sizes=(784, 512, 256, 10)):
    params = {}
    for i in range(1, len(sizes)):
        params[f"fc{i}.weight"] = jnp.zeros((sizes[i - 1], sizes[i]), jnp.float32)
        params[f"fc{i}.bias"] = jnp.zeros((sizes[i],), jnp.float32)

    def loss(p, x, y):
        h = x
        for i in range(1, len(sizes)):
            h = h @ p[f"fc{i}.weight"] + p[f"fc{i}.bias"]
            if i < len(sizes) - 1:
                h = jax.nn.relu(h)
        return xent(h, y)
    data = (jnp.zeros((batch, 784), jnp.float32), jnp.zeros((batch,), jnp.int32))
    return params, loss, data


def lenet5(batch=128):
    params = {"conv1.weight": jnp.zeros((6, 1, 5, 5)), "conv1.bias": jnp.zeros((6,)),
              "conv2.weight": jnp.zeros((16, 6, 5, 5)), "conv2.bias": jnp.zeros((16,))}
    sizes = (400, 120, 84, 10)
    for i in range(1, 4):
        params[f"fc{i}.weight"] = jnp.zeros((sizes[i - 1], sizes[i]))
        params[f"fc{i}.bias"] = jnp.zeros((sizes[i],))

    def stage(h, w, b, pad):
        h = jax.lax.conv_general_dilated(h, w, (1, 1), [(pad, pad), (pad, pad)],
                                         dimension_numbers=("NCHW", "OIHW", "NCHW"))
        h = jax.nn.relu(h + b[None, :, None, None])
        return jax.lax.reduce_window(h, -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")

    def loss(p, x, y):
        h = stage(x, p["conv1.weight"], p["conv1.bias"], 2)
        h = stage(h, p["conv2.weight"], p["conv2.bias"], 0)
        h = h.reshape(h.shape[0], -1)
        for i in range(1, 4):
            h = h @ p[f"fc{i}.weight"] + p[f"fc{i}.bias"]
            if i < 3:
                h = jax.nn.relu(h)
        return xent(h, y)
    data = (jnp.zeros((batch, 1, 28, 28)), jnp.zeros((batch,), jnp.int32))
    return params, loss, data


def gpt(layers=2, hidden=128, heads=4, seq=64, vocab=512, batch=8):
    p = {"wte.weight": jnp.zeros((vocab, hidden)), "wpe.weight": jnp.zeros((seq, hidden)),
         "ln_f.weight": jnp.ones((hidden,)), "ln_f.bias": jnp.zeros((hidden,))}
    for i in range(layers):
        pre = f"blocks.{i}."
        p.update({pre + "ln1.weight": jnp.ones((hidden,)), pre + "ln1.bias": jnp.zeros((hidden,)),
                  pre + "attn.qkv.weight": jnp.zeros((hidden, 3 * hidden)),
                  pre + "attn.qkv.bias": jnp.zeros((3 * hidden,)),
                  pre + "attn.proj.weight": jnp.zeros((hidden, hidden)),
                  pre + "attn.proj.bias": jnp.zeros((hidden,)),
                  pre + "ln2.weight": jnp.ones((hidden,)), pre + "ln2.bias": jnp.zeros((hidden,)),
                  pre + "mlp.fc.weight": jnp.zeros((hidden, 4 * hidden)),
                  pre + "mlp.fc.bias": jnp.zeros((4 * hidden,)),
                  pre + "mlp.proj.weight": jnp.zeros((4 * hidden, hidden)),
                  pre + "mlp.proj.bias": jnp.zeros((hidden,))})
    hd = hidden // heads

    def ln(x, w, b):
        m = jnp.mean(x, -1, keepdims=True)
        v = jnp.mean((x - m) ** 2, -1, keepdims=True)
        return (x - m) / jnp.sqrt(v + 1e-5) * w + b

    def loss(p, tokens, targets):
        x = p["wte.weight"][tokens] + p["wpe.weight"][None]
        mask = jnp.tril(jnp.ones((seq, seq), bool))
        for i in range(layers):
            pre = f"blocks.{i}."
            h = ln(x, p[pre + "ln1.weight"], p[pre + "ln1.bias"])
            q, k, v = jnp.split(h @ p[pre + "attn.qkv.weight"] + p[pre + "attn.qkv.bias"], 3, -1)
            sp = lambda t: t.reshape(batch, seq, heads, hd).transpose(0, 2, 1, 3)
            q, k, v = sp(q), sp(k), sp(v)
            s = jnp.where(mask, (q @ k.transpose(0, 1, 3, 2)) / jnp.sqrt(hd), -jnp.inf)
            a = (jax.nn.softmax(s, -1) @ v).transpose(0, 2, 1, 3).reshape(batch, seq, hidden)
            x = x + a @ p[pre + "attn.proj.weight"] + p[pre + "attn.proj.bias"]
            h = ln(x, p[pre + "ln2.weight"], p[pre + "ln2.bias"])
            h = jax.nn.gelu(h @ p[pre + "mlp.fc.weight"] + p[pre + "mlp.fc.bias"], approximate=True)
            x = x + h @ p[pre + "mlp.proj.weight"] + p[pre + "mlp.proj.bias"]
        x = ln(x, p["ln_f.weight"], p["ln_f.bias"])
        return xent((x @ p["wte.weight"].T).reshape(batch * seq, vocab), targets.reshape(-1))
    data = (jnp.zeros((batch, seq), jnp.int32), jnp.zeros((batch, seq), jnp.int32))
    return p, loss, data


def count_kernels(hlo_text):
    entry = hlo_text[hlo_text.index("\nENTRY"):]
    entry = entry[:entry.index("\n}")]
    counts = {}
    for line in entry.splitlines()[1:]:
        m = re.match(r"\s*(?:ROOT )?%?[\w.\-]+ = [^=]*? ([a-z][\w\-]*)\(", line)
        if not m:
            continue
        op = m.group(1)
        if op in NOT_KERNELS:
            continue
        counts[op] = counts.get(op, 0) + 1
    return counts


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=["mlp", "lenet5", "gpt"], action="append")
    ap.add_argument("--gpt", help="L,H,N,S,V,B: the gpt's blocks, hidden, heads, "
                    "sequence, vocabulary and batch")
    ap.add_argument("--time", action="store_true", help="also time the compile")
    args = ap.parse_args()
    sizes = {}
    if args.gpt:
        names = ("layers", "hidden", "heads", "seq", "vocab", "batch")
        values = [int(x) for x in args.gpt.split(",")]
        if len(values) != len(names):
            ap.error("--gpt expects 6 comma-separated integers: L,H,N,S,V,B")
        sizes = dict(zip(names, values))
    for name in args.model or ["mlp", "lenet5", "gpt"]:
        params, loss, data = {"mlp": mlp, "lenet5": lenet5,
                              "gpt": lambda: gpt(**sizes)}[name]()
        zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
        step = jax.jit(adam_step(loss), donate_argnums=(0, 1, 2))
        start = time.perf_counter()
        compiled = step.lower(params, zeros, zeros, jnp.zeros((), jnp.int32), *data).compile()
        seconds = time.perf_counter() - start
        counts = count_kernels(compiled.as_text())
        fusions = counts.get("fusion", 0)
        library = sum(counts.get(k, 0) for k in ("dot", "convolution", "custom-call"))
        result = {"model": name, "jax": jax.__version__, "kernels": sum(counts.values()),
                  "fusions": fusions, "library_calls": library, "by_op": counts}
        if args.time:
            result["compile_s"] = round(seconds, 2)
        print(json.dumps(result))


if __name__ == "__main__":
    main()
