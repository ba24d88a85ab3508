#!/usr/bin/env python3
"""The GPT training step of issue 7 in PyTorch (eager and torch.compile).

GPT-2 small shape: 12 layers, hidden 768, 12 heads, sequence 1024, vocabulary
50304 (tied embedding), batch 8, pre-norm blocks, tanh GELU, AdamW 3e-4,
bf16 autocast with f32 master weights. Prints tokens/s and model FLOPs
utilization: 6 * parameters * tokens plus 12 * layers * hidden * sequence
* tokens for attention, over the bf16 dense peak (--peak-tflops, 989 for an
H200). JAX is not measured yet. Written on a machine without a GPU: not yet
run.
"""
import argparse
import math
import sys
import time


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
    a = p.parse_args()
    try:
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
    except ImportError:
        print("peers: PyTorch is not installed")
        return 1
    if not torch.cuda.is_available():
        print("peers: torch sees no CUDA device")
        return 1

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

        def forward(self, tokens, targets):
            pos = torch.arange(tokens.shape[1], device=tokens.device)
            x = self.wte(tokens) + self.wpe(pos)
            for blk in self.blocks:
                x = blk(x)
            logits = self.ln(x) @ self.wte.weight.t()
            return F.cross_entropy(logits.view(-1, a.vocab).float(), targets.view(-1))

    def run(compiled):
        torch.manual_seed(0)
        model = Gpt().cuda()
        params = sum(p.numel() for p in model.parameters())
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
        step_model = torch.compile(model) if compiled else model
        tokens = torch.randint(0, a.vocab, (a.batch, a.seq), device="cuda")
        targets = torch.randint(0, a.vocab, (a.batch, a.seq), device="cuda")

        def step():
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = step_model(tokens, targets)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss

        for _ in range(a.warmup):
            step()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(a.steps):
            loss = step()
        torch.cuda.synchronize()
        seconds = (time.perf_counter() - start) / a.steps
        tok = a.batch * a.seq
        flops = 6 * params * tok + 12 * a.layers * a.hidden * a.seq * tok
        mfu = flops / seconds / (a.peak_tflops * 1e12)
        name = "torch.compile" if compiled else "pytorch eager"
        print(f"{name:14s} {seconds * 1e3:8.2f} ms/step {tok / seconds:10.0f} tokens/s "
              f"MFU {100 * mfu:5.1f}%  loss {loss.item():.3f}  params {params / 1e6:.1f}M")

    print(f"gpt {a.layers}x{a.hidden}, {a.heads} heads, seq {a.seq}, batch {a.batch}, bf16 "
          f"on {torch.cuda.get_device_name()}")
    run(False)
    run(True)
    print("jax            not measured yet")
    return 0


if __name__ == "__main__":
    sys.exit(main())
