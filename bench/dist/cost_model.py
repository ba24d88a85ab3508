#!/usr/bin/env python3
"""Predicts the GPT training step on H200s at scale: an alpha-beta model of
the collectives and per-kernel times of one GPU's step, for data-parallel
(bucketed all-reduce overlapped with the backward pass) and ZeRO-2/ZeRO-3
communication volumes, at 8, 64 and 512 GPUs (8 per node).

Kernel times are MEASURED when --profile gives a per-kernel profile of one
step (bench/gpu/check.sh's, CSV: kernel,microseconds[,phase], phase one of
forward/backward/optimizer), otherwise PREDICTED by a roofline over each
kernel's FLOPs and bytes (H200: 989 TFLOP/s dense bf16, 4.8 TB/s HBM3e;
see kernels() for the list, which follows the zoo gpt's graph). Every
output line says which. --report takes `kiln compile --report`'s output
for the same model and prints the compiler's own modelled bytes beside the
roofline's, as a cross-check; --buckets takes the bucket plan of the compiled
data-parallel step (the IR of `kiln compile --strategy=data-parallel
--emit=mlir`, whose kiln.all_reduce ops are the buckets in order, or bytes
one per line) instead of the DDP rule applied per layer here (first bucket
1 MB, then 25 MB, in the order the backward pass completes the gradients).

Collectives (ring algorithms, p ranks, n bytes, bus bandwidth bw, per-hop
latency alpha):
  all-reduce       2 (p-1)/p * n / bw + 2 (p-1) alpha
  reduce-scatter   (p-1)/p * n / bw + (p-1) alpha
  all-gather       (p-1)/p * n / bw + (p-1) alpha
Within a node (p <= 8) bw and alpha are NVLink's; across nodes the ring's
slowest link is a GPU's NIC (one 400 Gb/s NIC per GPU), so bw and alpha
are the network's. The constants and their sources are in LINKS below.

--attention=fused models the attention as the compiler's CUDA target runs it
since kiln-fuse-attention (one FlashAttention-style kernel forward and one
backward per layer, reading q, k, v, out and lse, never the [T, T] scores; at
ATTENTION_EFFICIENCY of peak, causal half); --attention=materialized models
the scores, softmax and context GEMMs as separate kernels (kiln before it, or
--fuse-attention=off). The step's model FLOPs utilization (6 N tokens over
step time x peak) is printed for the one-GPU step.

usage: cost_model.py [--profile CSV] [--report FILE] [--buckets FILE]
                     [--batch B] [--gpus 8,64,512]
                     [--attention fused|materialized]
       cost_model.py --self-test
"""
import argparse
import re
import sys

# Bus bandwidth (bytes/s) and per-hop latency (s) of a ring step.
LINKS = {
    # H200 NVLink 4: 900 GB/s per GPU in both directions together, 450 GB/s
    # each way (NVIDIA's H200 datasheet). nccl-tests all_reduce_perf on 8
    # H100/H200 SXM reports a bus bandwidth of about 360-480 GB/s for large
    # messages; 360 GB/s (80% of one direction) is used. Latency: 8-GPU
    # all-reduces of a few bytes take ~20-30 us in nccl-tests, ~14 ring
    # steps: ~2 us per step.
    "nvlink": {"bw": 360e9, "alpha": 2e-6},
    # One ConnectX-7 400 Gb/s NIC per GPU (InfiniBand NDR or RoCE): 50 GB/s,
    # nccl-tests' cross-node bus bandwidth reaches ~90% of it: 45 GB/s.
    # Latency per ring step across nodes: ~5 us (RDMA write + NCCL's
    # proxy), the order of nccl-tests' small-message times on 2 nodes.
    "network": {"bw": 45e9, "alpha": 5e-6},
}
GPUS_PER_NODE = 8
# H200 SXM: 989 TFLOP/s dense bf16 (tensor cores), 4.8 TB/s HBM3e. A
# roofline kernel reaches neither; the efficiencies below are typical
# cuBLAS GEMM and memory-bound kernel fractions (stated, not measured).
PEAK_FLOPS = 989e12
PEAK_BYTES = 4.8e12
GEMM_EFFICIENCY = 0.70
MEMORY_EFFICIENCY = 0.80
LAUNCH_S = 3e-6  # per kernel, CUDA launch and tail
# A fused attention kernel reaches less of the peak than a cuBLAS GEMM (its
# softmax runs on the CUDA cores between two tensor-core products):
# FlashAttention-2 reports 50-73% of peak on A100 and ~35% on H100 (without
# Hopper's wgmma/TMA); 0.35 is used (stated, not measured for Kiln's kernel).
ATTENTION_EFFICIENCY = 0.35


def link_for(p):
    return LINKS["nvlink"] if p <= GPUS_PER_NODE else LINKS["network"]


def all_reduce_s(n, p, link=None):
    if p <= 1 or n == 0:
        return 0.0
    link = link or link_for(p)
    return 2 * (p - 1) / p * n / link["bw"] + 2 * (p - 1) * link["alpha"]


def reduce_scatter_s(n, p, link=None):
    if p <= 1 or n == 0:
        return 0.0
    link = link or link_for(p)
    return (p - 1) / p * n / link["bw"] + (p - 1) * link["alpha"]


all_gather_s = reduce_scatter_s


def roofline_s(flops, nbytes, efficiency=GEMM_EFFICIENCY):
    return LAUNCH_S + max(flops / (PEAK_FLOPS * efficiency),
                          nbytes / (PEAK_BYTES * MEMORY_EFFICIENCY))


def kernel_s(k):
    # (name, phase, layer, flops, bytes[, compute efficiency])
    return roofline_s(k[3], k[4], *k[5:])


class Gpt:
    def __init__(self, layers=12, hidden=768, heads=12, seq=1024,
                 vocab=50304, batch=8):
        self.L, self.H, self.NH, self.T, self.V, self.B = (
            layers, hidden, heads, seq, vocab, batch)

    def layer_params(self):
        H = self.H
        # ln1, qkv, proj, ln2, fc, proj (weights and biases)
        return 2 * H + (H * 3 * H + 3 * H) + (H * H + H) + 2 * H + \
            (H * 4 * H + 4 * H) + (4 * H * H + H)

    def params(self):
        # wte (tied with the output projection), wpe, layers, final norm
        return self.V * self.H + self.T * self.H + \
            self.L * self.layer_params() + 2 * self.H


def kernels(m, attention="materialized"):
    """One GPU's step as (name, phase, layer, flops, bytes): bf16
    activations (2 bytes), f32 master parameters and gradients (4 bytes).
    Backward GEMMs are two GEMMs of the forward's size (input and weight
    gradients); elementwise backward kernels read about twice what the
    forward did. layer -1: outside the blocks."""
    B, T, H, NH, V = m.B, m.T, m.H, m.NH, m.V
    a = 2  # bytes per activation element
    tok = B * T
    out = []

    def gemm(name, layer, M, K, N, phase="forward"):
        flops = 2 * M * K * N
        nbytes = a * (M * K + K * N + M * N)
        out.append((name, phase, layer, flops, nbytes))
        if phase == "forward":
            out.append((name + ".grad", "backward", layer, 2 * flops, 2 * nbytes))

    def flash(name, layer):
        # Causal: half of the T x T products. Forward: q k^T and p v;
        # backward: recomputed q k^T, dout v^T, p^T dout, ds k, ds^T q
        # (2.5 x the forward). Bytes: q, k, v, out (and lse), backward
        # also their gradients and dout.
        HD = H // NH
        flops = 2 * 2 * B * NH * T * T * HD // 2
        act = a * B * T * H
        out.append((name, "forward", layer, flops, 4 * act + 4 * B * NH * T,
                    ATTENTION_EFFICIENCY))
        out.append((name + ".grad", "backward", layer, 5 * flops // 2,
                    9 * act + 8 * B * NH * T, ATTENTION_EFFICIENCY))

    def pointwise(name, layer, elems, reads=1, writes=1):
        nbytes = a * elems * (reads + writes)
        out.append((name, "forward", layer, 0, nbytes))
        out.append((name + ".grad", "backward", layer, 0, 2 * nbytes))

    pointwise("embed", -1, tok * H, reads=2)
    for l in range(m.L):
        pointwise("ln1", l, tok * H)
        gemm("attn.qkv", l, tok, H, 3 * H)
        if attention == "fused":
            flash("attn.flash", l)
        else:
            gemm("attn.scores", l, B * NH * T, H // NH, T)
            pointwise("attn.softmax", l, B * NH * T * T)
            gemm("attn.context", l, B * NH * T, T, H // NH)
        gemm("attn.proj", l, tok, H, H)
        pointwise("attn.residual", l, tok * H, reads=2)
        pointwise("ln2", l, tok * H)
        gemm("mlp.fc", l, tok, H, 4 * H)
        pointwise("mlp.gelu", l, tok * 4 * H)
        gemm("mlp.proj", l, tok, 4 * H, H)
        pointwise("mlp.residual", l, tok * H, reads=2)
    pointwise("ln_f", -1, tok * H)
    gemm("logits", -1, tok, H, V)
    pointwise("cross_entropy", -1, tok * V)
    # Adam on f32 master weights: read p, g, m, v; write p, m, v.
    out.append(("adam", "optimizer", -1, 10 * m.params(), 4 * 7 * m.params()))
    return out


def read_profile(path):
    """CSV kernel,microseconds[,phase] -> {phase: seconds}."""
    phases = {"forward": 0.0, "backward": 0.0, "optimizer": 0.0}
    for line in open(path):
        line = line.strip()
        if not line or line.startswith("#") or line.lower().startswith("kernel,"):
            continue
        fields = [f.strip() for f in line.split(",")]
        name, us = fields[0], float(fields[1])
        phase = fields[2] if len(fields) > 2 else (
            "optimizer" if "adam" in name or "sgd" in name else
            "backward" if "grad" in name else "forward")
        phases[phase] = phases.get(phase, 0.0) + us * 1e-6
    return phases


def ddp_buckets(m, first=1 << 20, cap=25 << 20):
    """The DDP rule on f32 gradients in the order the backward pass
    completes them (last layer first, the tied wte last: its gradient is
    complete only after the embedding's backward): (bytes, layer whose
    backward completes it)."""
    grads = [(4 * (m.H * 2), -1)]  # ln_f
    for l in reversed(range(m.L)):
        grads.append((4 * m.layer_params(), l))
    grads.append((4 * m.T * m.H, -2))  # wpe
    grads.append((4 * m.V * m.H, -2))  # wte
    buckets, size, last, limit = [], 0, None, first
    for nbytes, layer in grads:
        size += nbytes
        last = layer
        if size >= limit:
            buckets.append((size, last))
            size, limit = 0, cap
    if size:
        buckets.append((size, last))
    return buckets


def predict(m, p, times, bucket_sizes=None, attention="fused"):
    """Step time (s) per strategy at p GPUs, with |times| = {phase: s} and
    per-layer backward times from the roofline's shares."""
    fwd, bwd, opt = times["forward"], times["backward"], times["optimizer"]
    grad_bytes = 4 * m.params()
    # When each bucket's gradients are complete: the backward runs from the
    # head down to layer 0, then the embeddings; shares by roofline time.
    ks = kernels(m, attention)
    share = {}
    for k in ks:
        if k[1] == "backward":
            share[k[2]] = share.get(k[2], 0.0) + kernel_s(k)
    order = [-1] + list(reversed(range(m.L))) + [-2]
    share.setdefault(-2, 0.0)
    total = sum(share.values())
    done, t = {}, 0.0
    for layer in order:
        t += share.get(layer, 0.0) / total * bwd
        done[layer] = t
    buckets = ddp_buckets(m)
    if bucket_sizes:
        # Sizes from the package; completion times by cumulative bytes.
        cum, buckets = 0, []
        rule = ddp_buckets(m, first=1, cap=1)  # one per gradient group
        for size in bucket_sizes:
            cum += size
            acc, layer = 0, rule[-1][1]
            for nbytes, l in rule:
                acc += nbytes
                if acc >= cum:
                    layer = l
                    break
            buckets.append((size, layer))
    # Data-parallel: one all-reduce at a time on the comm stream, each
    # started when its bucket is complete.
    end = 0.0
    for size, layer in buckets:
        end = max(end, done[layer]) + all_reduce_s(size, p)
    ddp = fwd + max(bwd, end) + opt
    # ZeRO-2: reduce-scatter per bucket overlapped the same way; the
    # optimizer updates 1/p of the parameters; the updated f32 shards are
    # all-gathered before the next forward (not overlapped).
    end = 0.0
    for size, layer in buckets:
        end = max(end, done[layer]) + reduce_scatter_s(size, p)
    zero2 = fwd + max(bwd, end) + opt / p + all_gather_s(grad_bytes, p)
    # ZeRO-3: bf16 parameters all-gathered per layer before its forward
    # and again before its backward (prefetched one layer ahead: each
    # layer costs max(compute, gather)), gradients reduce-scattered as in
    # ZeRO-2; the optimizer updates 1/p.
    param_bytes = {l: 2 * m.layer_params() for l in range(m.L)}
    param_bytes[-1] = 2 * (2 * m.H)
    param_bytes[-2] = 2 * (m.V * m.H + m.T * m.H)
    fshare = {}
    for k in ks:
        if k[1] == "forward":
            fshare[k[2]] = fshare.get(k[2], 0.0) + kernel_s(k)
    ftotal = sum(fshare.values())
    f3 = sum(max(fshare.get(l, 0.0) / ftotal * fwd, all_gather_s(param_bytes[l], p))
             for l in param_bytes)
    b3 = sum(max(share.get(l, 0.0) / total * bwd, all_gather_s(param_bytes[l], p))
             for l in param_bytes)
    end = 0.0
    for size, layer in buckets:
        end = max(end, done[layer] * b3 / bwd) + reduce_scatter_s(size, p)
    zero3 = f3 + max(b3, end) + opt / p
    volume = {
        "data-parallel": 2 * (p - 1) / p * grad_bytes,
        "zero2": 2 * (p - 1) / p * grad_bytes,
        "zero3": (p - 1) / p * (grad_bytes + 2 * 2 * m.params()),
    }
    return {"data-parallel": ddp, "zero2": zero2, "zero3": zero3}, volume, len(buckets)


def read_buckets(path):
    """Bucket sizes in bytes, in the order they are reduced: from the
    compiled step's IR (`kiln compile --strategy=data-parallel --emit=mlir`:
    every kiln.all_reduce's tensor<N x dtype>), or one number per line."""
    text = open(path).read()
    if "kiln.all_reduce" not in text:
        return [int(l) for l in text.split() if l.strip()]
    size = {"f32": 4, "bf16": 2, "f16": 2, "f64": 8}
    out = []
    for line in text.splitlines():
        m = re.search(r"kiln\.all_reduce .*: tensor<(\d+)x(\w+)>", line)
        if m:
            out.append(int(m.group(1)) * size[m.group(2)])
    return out


def read_report(path):
    out = {}
    for line in open(path):
        if "modelled bytes:" in line:
            out["bytes"] = int(line.split(":")[1].split()[0])
        if "kernels per step:" in line:
            out["kernels"] = int(line.split(":")[1].split()[0])
        if "modelled time:" in line:
            out["us"] = float(line.split(":")[1].split()[0])
    return out


def self_test():
    # Hand-checkable: 4 ranks, 1 GB/s, 1 us per hop, 1 MB.
    link = {"bw": 1e9, "alpha": 1e-6}
    n = 1_000_000
    assert abs(all_reduce_s(n, 4, link) - (2 * 3 / 4 * 1e-3 + 6e-6)) < 1e-15
    assert abs(reduce_scatter_s(n, 4, link) - (3 / 4 * 1e-3 + 3e-6)) < 1e-15
    assert abs(all_gather_s(n, 4, link) - reduce_scatter_s(n, 4, link)) < 1e-18
    # reduce-scatter + all-gather is an all-reduce.
    assert abs(reduce_scatter_s(n, 4, link) + all_gather_s(n, 4, link)
               - all_reduce_s(n, 4, link)) < 1e-15
    assert all_reduce_s(n, 1, link) == 0.0
    # The links: 8 GPUs are one node (NVLink), 9 span two (network).
    assert link_for(8) is LINKS["nvlink"] and link_for(9) is LINKS["network"]
    # 8 GPUs, 100 MB over NVLink: 2*7/8*1e8/360e9 + 14*2e-6 = 486.1 + 28 us.
    assert abs(all_reduce_s(1e8, 8) - (486.111e-6 + 28e-6)) < 1e-9
    # The GPT's parameter count (tied embeddings): 124,475,904.
    assert Gpt().params() == 124_475_904, Gpt().params()
    # Roofline: a 4096^3 bf16 GEMM is compute-bound: 2*4096^3 / (989e12*0.7).
    t = roofline_s(2 * 4096 ** 3, 2 * 3 * 4096 ** 2)
    assert abs(t - (LAUNCH_S + 2 * 4096 ** 3 / (989e12 * 0.7))) < 1e-12
    # Buckets: the DDP rule covers every gradient byte once, the first
    # bucket closes past 1 MB and no later one exceeds 25 MB + one group.
    m = Gpt()
    b = ddp_buckets(m)
    assert sum(s for s, _ in b) == 4 * m.params()
    assert b[0][0] >= 1 << 20
    # Overlap: with no communication cost (p=1) every strategy's step is
    # forward + backward + optimizer.
    times = {"forward": 0.01, "backward": 0.02, "optimizer": 0.001}
    steps, _, _ = predict(m, 1, times)
    for k, v in steps.items():
        assert abs(v - 0.031) < 1e-12, (k, v)
    # A communication-bound case: backward 0 -> the step is forward + all
    # the buckets' all-reduces back to back + optimizer.
    times0 = {"forward": 0.0, "backward": 1e-12, "optimizer": 0.0}
    steps, _, _ = predict(m, 8, times0)
    want = sum(all_reduce_s(s, 8) for s, _ in b)
    assert abs(steps["data-parallel"] - want) < 1e-9, (steps, want)
    # The bucket plan read from a compiled step's IR, in order.
    import tempfile
    with tempfile.NamedTemporaryFile("w", suffix=".mlir", delete=False) as f:
        f.write("%1 = kiln.all_reduce mean %0 {kiln.buffer_offsets = "
                "array<i64: 0>} : tensor<1000xf32>\n  %2 = kiln.add %1\n"
                "%3 = kiln.all_reduce mean %2 : tensor<500xbf16>\n")
    assert read_buckets(f.name) == [4000, 1000], read_buckets(f.name)
    # Fused attention: no [T, T] traffic, so it moves fewer bytes than the
    # materialized scores/softmax/context and predicts a faster step.
    mat = kernels(Gpt(), "materialized")
    fused = kernels(Gpt(), "fused")
    assert sum(k[4] for k in fused) < sum(k[4] for k in mat)
    assert sum(kernel_s(k) for k in fused) < sum(kernel_s(k) for k in mat)
    f = [k for k in fused if k[0] == "attn.flash"][0]
    # 2 * 2 * B * NH * T^2 * HD / 2 (causal) for one layer.
    assert f[3] == 2 * 8 * 12 * 1024 * 1024 * 64, f
    print("cost_model self-test: ok")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--profile")
    ap.add_argument("--report")
    ap.add_argument("--buckets")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--gpus", default="8,64,512")
    ap.add_argument("--kernels", action="store_true",
                    help="list the roofline's kernels, summed over layers")
    ap.add_argument("--attention", choices=["fused", "materialized"],
                    default="fused")
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    m = Gpt(batch=args.batch)
    ks = kernels(m, args.attention)
    if args.profile:
        times = read_profile(args.profile)
        source = "MEASURED kernel times (%s)" % args.profile
    else:
        times = {"forward": 0.0, "backward": 0.0, "optimizer": 0.0}
        for k in ks:
            times[k[1]] += kernel_s(k)
        source = ("PREDICTED kernel times (roofline: %.0f TFLOP/s x %.2f, "
                  "%.1f TB/s x %.2f, %.0f us launch; no GPU measurement)"
                  % (PEAK_FLOPS / 1e12, GEMM_EFFICIENCY, PEAK_BYTES / 1e12,
                     MEMORY_EFFICIENCY, LAUNCH_S * 1e6))
    buckets = None
    if args.buckets:
        buckets = read_buckets(args.buckets)
    print("GPT %d layers, hidden %d, %d heads, seq %d, vocab %d, batch %d per "
          "GPU, bf16 activations, f32 gradients: %d parameters, %.1f MB of "
          "gradients" % (m.L, m.H, m.NH, m.T, m.V, m.B, m.params(),
                         4 * m.params() / 1e6))
    flops = sum(k[3] for k in ks)
    nbytes = sum(k[4] for k in ks)
    print("step on one GPU: %s" % source)
    print("  forward %.2f ms, backward %.2f ms, optimizer %.2f ms; %.1f TFLOP, "
          "%.2f GB moved (roofline's count, %d kernels)"
          % (times["forward"] * 1e3, times["backward"] * 1e3,
             times["optimizer"] * 1e3, flops / 1e12, nbytes / 1e9, len(ks)))
    if args.kernels:
        # Per kernel, summed over the 12 layers: what bounds it and its time.
        rows = {}
        for k in ks:
            name, phase, layer, f, b = k[:5]
            r = rows.setdefault(name, [phase, 0, 0, 0.0, 0, k[5:]])
            r[1] += f
            r[2] += b
            r[3] += kernel_s(k)
            r[4] += 1
        print("  | kernel | phase | launches | GFLOP | MB | predicted us | bound |")
        print("  |--|--|--|--|--|--|--|")
        for name, (phase, f, b, t, n, eff) in sorted(
                rows.items(), key=lambda kv: -kv[1][3]):
            efficiency = eff[0] if eff else GEMM_EFFICIENCY
            bound = ("compute" if f / (PEAK_FLOPS * efficiency) >
                     b / (PEAK_BYTES * MEMORY_EFFICIENCY) else "memory")
            print("  | %s | %s | %d | %.1f | %.1f | %.1f | %s |"
                  % (name, phase, n, f / 1e9, b / 1e6, t * 1e6, bound))
    if args.report:
        r = read_report(args.report)
        print("  kiln compile --report: %s kernels, %.2f GB modelled bytes, "
              "%.1f us modelled (its CPU-flavoured cost model)"
              % (r.get("kernels", "?"), r.get("bytes", 0) / 1e9, r.get("us", 0)))
    print("links: NVLink %.0f GB/s, %.1f us/hop within a node of %d; network "
          "%.0f GB/s, %.1f us/hop across nodes"
          % (LINKS["nvlink"]["bw"] / 1e9, LINKS["nvlink"]["alpha"] * 1e6,
             GPUS_PER_NODE, LINKS["network"]["bw"] / 1e9,
             LINKS["network"]["alpha"] * 1e6))
    one = times["forward"] + times["backward"] + times["optimizer"]
    tokens = m.B * m.T
    print("  attention %s; one GPU: %.2f ms per step, %.0f tokens/s, model "
          "FLOPs utilization %.1f%% (6 N tokens / (step x %.0f TFLOP/s))"
          % (args.attention, one * 1e3, tokens / one,
             100 * 6 * m.params() * tokens / (one * PEAK_FLOPS),
             PEAK_FLOPS / 1e12))
    print()
    print("| GPUs | strategy | bytes sent per GPU per step | step ms | "
          "scaling efficiency | tokens/s |")
    print("|--|--|--|--|--|--|")
    for p in [int(x) for x in args.gpus.split(",")]:
        steps, volume, nb = predict(m, p, times, buckets, args.attention)
        for strategy in ("data-parallel", "zero2", "zero3"):
            t = steps[strategy]
            print("| %d | %s%s | %.0f MB | %.2f | %.1f%% | %.0f |"
                  % (p, strategy, " (%d buckets)" % nb if strategy ==
                     "data-parallel" else "", volume[strategy] / 1e6, t * 1e3,
                     100 * one / t, p * m.B * m.T / t))
    print()
    print("(efficiency: one GPU's step time over the step time at p GPUs, "
          "same per-GPU batch; every number above is a prediction)")
    for p in [int(x) for x in args.gpus.split(",")]:
        if p > 1:
            link = link_for(p)
            print("ring latency at %d GPUs: 2(p-1) alpha = %.2f ms per "
                  "all-reduce, %.2f ms per reduce-scatter or all-gather"
                  % (p, 2 * (p - 1) * link["alpha"] * 1e3,
                     (p - 1) * link["alpha"] * 1e3))


if __name__ == "__main__":
    sys.exit(main())
