#!/usr/bin/env python3
"""The GPT training step of issue 7 in PyTorch (eager and torch.compile) and JAX.

GPT-2 small shape: 12 layers, hidden 768, 12 heads, sequence 1024, vocabulary
50304 (tied embedding), batch 8, pre-norm blocks, tanh GELU, AdamW 3e-4,
bf16 autocast with f32 master weights. Prints tokens/s and model FLOPs
utilization: 6 * parameters * tokens plus 12 * layers * hidden * sequence
* tokens for attention, over the bf16 dense peak (--peak-tflops, 989 for an
H200). JAX: jax.jit of the same step (bf16 compute from f32 master weights,
the same AdamW written out, jax.nn.dot_product_attention when present).
--flops prints the step's tokens and model FLOPs for bench/gpu/check.sh, which
gives Kiln's step the same MFU formula. Each peer that fails says why, and
the others still run. Not yet run on a GPU; with KILN_PEERS_ANY_DEVICE=1 it
runs on the CPU too (tests/lit/peers/bench-gpu-peers.test runs a tiny GPT
through every peer, so an API the script uses that has gone shows there).
"""
import argparse
import os
import sys
import time


def gpt_params(a):
    """Parameters of the GPT below (tied embedding, biases, layer norms)."""
    h = a.hidden
    block = 2 * 2 * h + (3 * h * h + 3 * h) + (h * h + h) + (4 * h * h + 4 * h) + (4 * h * h + h)
    return a.vocab * h + a.seq * h + a.layers * block + 2 * h


def step_flops(a, params):
    tok = a.batch * a.seq
    return tok, 6 * params * tok + 12 * a.layers * a.hidden * a.seq * tok


def run_jax(a):
    # PyTorch's allocator may hold memory already: JAX takes what it needs
    # instead of 75% of the device up front.
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        print("jax            not installed")
        return
    # KILN_PEERS_ANY_DEVICE=1 lets a CPU-only machine check the code.
    if not any(d.platform == "gpu" for d in jax.devices()) and \
            os.environ.get("KILN_PEERS_ANY_DEVICE") != "1":
        print("jax            sees no GPU")
        return
    f32, bf16 = jnp.float32, jnp.bfloat16
    h, L, V, S, B, nh = a.hidden, a.layers, a.vocab, a.seq, a.batch, a.heads

    def init(key):
        keys = iter(jax.random.split(key, 2 + 4 * L))
        n = lambda shape: 0.02 * jax.random.normal(next(keys), shape, f32)
        ln = lambda: (jnp.ones(h, f32), jnp.zeros(h, f32))
        lin = lambda i, o: (n((i, o)), jnp.zeros(o, f32))
        blocks = [dict(ln1=ln(), ln2=ln(), qkv=lin(h, 3 * h), proj=lin(h, h),
                       fc=lin(h, 4 * h), out=lin(4 * h, h)) for _ in range(L)]
        return dict(wte=n((V, h)), wpe=n((S, h)), lnf=ln(), blocks=blocks)

    def layernorm(x, g, b):
        x32 = x.astype(f32)
        m = x32.mean(-1, keepdims=True)
        v = ((x32 - m) ** 2).mean(-1, keepdims=True)
        return ((x32 - m) * jax.lax.rsqrt(v + 1e-5) * g + b).astype(bf16)

    def dense(x, wb):
        return x @ wb[0].astype(bf16) + wb[1].astype(bf16)

    def attention(q, k, v):
        if hasattr(jax.nn, "dot_product_attention"):
            return jax.nn.dot_product_attention(q, k, v, is_causal=True)
        s = jnp.einsum("bqhd,bkhd->bhqk", q, k).astype(f32) / (q.shape[-1] ** 0.5)
        s = jnp.where(jnp.tril(jnp.ones((S, S), bool)), s, -1e30)
        return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s).astype(bf16), v)

    def loss_fn(p, tokens, targets):
        x = (p["wte"][tokens] + p["wpe"][None, :S]).astype(bf16)
        for blk in p["blocks"]:
            q, k, v = jnp.split(dense(layernorm(x, *blk["ln1"]), blk["qkv"]), 3, -1)
            q, k, v = (z.reshape(B, S, nh, h // nh) for z in (q, k, v))
            x = x + dense(attention(q, k, v).reshape(B, S, h), blk["proj"])
            y = jax.nn.gelu(dense(layernorm(x, *blk["ln2"]), blk["fc"]), approximate=True)
            x = x + dense(y, blk["out"])
        logits = (layernorm(x, *p["lnf"]) @ p["wte"].astype(bf16).T).astype(f32)
        logp = jax.nn.log_softmax(logits)
        return -jnp.take_along_axis(logp, targets[..., None], -1).mean()

    lr, b1, b2, eps, wd = 3e-4, 0.9, 0.999, 1e-8, 0.01

    def step(p, m, v, t, tokens, targets):
        loss, g = jax.value_and_grad(loss_fn)(p, tokens, targets)
        t = t + 1
        m = jax.tree_util.tree_map(lambda m, g: b1 * m + (1 - b1) * g, m, g)
        v = jax.tree_util.tree_map(lambda v, g: b2 * v + (1 - b2) * g * g, v, g)
        c1, c2 = 1 - b1 ** t, 1 - b2 ** t
        p = jax.tree_util.tree_map(
            lambda p, m, v: p - lr * (m / c1 / (jnp.sqrt(v / c2) + eps) + wd * p), p, m, v)
        return p, m, v, t, loss

    jstep = jax.jit(step, donate_argnums=(0, 1, 2))
    p = init(jax.random.PRNGKey(0))
    params = sum(x.size for x in jax.tree_util.tree_leaves(p))
    m = jax.tree_util.tree_map(jnp.zeros_like, p)
    v = jax.tree_util.tree_map(jnp.zeros_like, p)
    t = jnp.zeros((), f32)
    tokens = jax.random.randint(jax.random.PRNGKey(1), (B, S), 0, V)
    targets = jax.random.randint(jax.random.PRNGKey(2), (B, S), 0, V)
    for _ in range(a.warmup):
        p, m, v, t, loss = jstep(p, m, v, t, tokens, targets)
    loss.block_until_ready()
    start = time.perf_counter()
    for _ in range(a.steps):
        p, m, v, t, loss = jstep(p, m, v, t, tokens, targets)
    loss.block_until_ready()
    seconds = (time.perf_counter() - start) / a.steps
    tok, flops = step_flops(a, params)
    mfu = flops / seconds / (a.peak_tflops * 1e12)
    print(f"{'jax.jit':14s} {seconds * 1e3:8.2f} ms/step {tok / seconds:10.0f} tokens/s "
          f"MFU {100 * mfu:5.1f}%  loss {float(loss):.3f}  params {params / 1e6:.1f}M",
          flush=True)


def guarded(name, fn, *args):
    """Runs one peer; a peer that fails says why, and the others still run.
    Returns whether it ran."""
    try:
        fn(*args)
        return True
    except Exception as e:  # a peer's failure is a result to print
        print(f"{name:14s} failed: {type(e).__name__}: {str(e).splitlines()[0][:300]}",
              flush=True)
        return False


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--hidden", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--vocab", type=int, default=50304)
    p.add_argument("--peak-tflops", type=float, default=989.0)
    p.add_argument("--flops", action="store_true",
                   help="print 'TOKENS FLOPS' per step and exit")
    p.add_argument("--only", choices=["torch", "jax", "all"], default="all")
    p.add_argument("--compile-backend", default="inductor",
                   help="torch.compile's backend; the lit test's CPU run takes aot_eager "
                        "(Dynamo and AOTAutograd without Inductor's C++ build, 40 s of a "
                        "cold cache here)")
    a = p.parse_args()
    if a.flops:
        tok, flops = step_flops(a, gpt_params(a))
        print(tok, flops)
        return 0
    if a.only == "jax":
        return 0 if guarded("jax.jit", run_jax, a) else 1
    try:
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
    except ImportError:
        print("peers: PyTorch is not installed")
        return 1
    # KILN_PEERS_ANY_DEVICE=1 lets a CPU-only machine check this code too.
    if torch.cuda.is_available():
        dev = "cuda"
    elif os.environ.get("KILN_PEERS_ANY_DEVICE") == "1":
        dev = "cpu"
    else:
        print("peers: torch sees no CUDA device")
        return 1

    def sync():
        if dev == "cuda":
            torch.cuda.synchronize()

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            h = a.hidden
            self.ln1, self.ln2 = nn.LayerNorm(h), nn.LayerNorm(h)
            self.qkv, self.proj = nn.Linear(h, 3 * h), nn.Linear(h, h)
            self.fc, self.out = nn.Linear(h, 4 * h), nn.Linear(4 * h, h)

        def forward(self, x):
            b, t, h = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(h, dim=2)
            shape = (b, t, a.heads, h // a.heads)
            q, k, v = (z.view(shape).transpose(1, 2) for z in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).reshape(b, t, h))
            return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class Gpt(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(a.vocab, a.hidden)
            self.wpe = nn.Embedding(a.seq, a.hidden)
            self.blocks = nn.ModuleList(Block() for _ in range(a.layers))
            self.ln = nn.LayerNorm(a.hidden)
            # GPT-2's initialization, as the JAX step's: weights N(0, 0.02),
            # biases 0 (PyTorch's defaults, N(0, 1) embeddings tied to the
            # output, start the loss near 22 instead of ln(vocab)).
            for m in self.modules():
                if isinstance(m, (nn.Linear, nn.Embedding)):
                    nn.init.normal_(m.weight, std=0.02)
                if isinstance(m, nn.Linear):
                    nn.init.zeros_(m.bias)

        def forward(self, tokens, targets):
            pos = torch.arange(tokens.shape[1], device=tokens.device)
            x = self.wte(tokens) + self.wpe(pos)
            for blk in self.blocks:
                x = blk(x)
            logits = self.ln(x) @ self.wte.weight.t()
            return F.cross_entropy(logits.view(-1, a.vocab).float(), targets.view(-1))

    def run(compiled):
        torch.manual_seed(0)
        model = Gpt().to(dev)
        params = sum(p.numel() for p in model.parameters())
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
        step_model = torch.compile(model, backend=a.compile_backend) if compiled else model
        tokens = torch.randint(0, a.vocab, (a.batch, a.seq), device=dev)
        targets = torch.randint(0, a.vocab, (a.batch, a.seq), device=dev)

        def step():
            with torch.autocast(dev, dtype=torch.bfloat16):
                loss = step_model(tokens, targets)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss

        for _ in range(a.warmup):
            step()
        sync()
        start = time.perf_counter()
        for _ in range(a.steps):
            loss = step()
        sync()
        seconds = (time.perf_counter() - start) / a.steps
        tok, flops = step_flops(a, params)
        mfu = flops / seconds / (a.peak_tflops * 1e12)
        name = "pytorch eager"
        if compiled:
            name = "torch.compile" + ("" if a.compile_backend == "inductor"
                                      else f" ({a.compile_backend})")
        print(f"{name:14s} {seconds * 1e3:8.2f} ms/step {tok / seconds:10.0f} tokens/s "
              f"MFU {100 * mfu:5.1f}%  loss {loss.item():.3f}  params {params / 1e6:.1f}M",
              flush=True)

    print(f"gpt {a.layers}x{a.hidden}, {a.heads} heads, seq {a.seq}, batch {a.batch}, bf16 "
          f"on {torch.cuda.get_device_name() if dev == 'cuda' else 'the CPU'}", flush=True)
    ok = guarded("pytorch eager", run, False)
    ok = guarded("torch.compile", run, True) and ok
    if a.only == "all":
        if dev == "cuda":
            torch.cuda.empty_cache()
        ok = guarded("jax.jit", run_jax, a) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
