"""kiln-apply-optimizer against torch.optim: the same parameters and
gradients, three steps, every optimizer variant; parameters and state must
match within 1e-6 relative in f32. Random data each run; the seed is printed."""

import os
import re
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from kilntest import dense, function_results, check_close, kiln_opt, tensor_type  # noqa: E402

seed = int.from_bytes(os.urandom(4), "little")
print(f"seed {seed}")
rng = np.random.default_rng(seed)
SHAPES = [(4, 3), (5,)]
STEPS = 3

CONFIGS = [
    ("sgd", dict(optimizer="sgd", learning_rate=0.1), lambda ps: torch.optim.SGD(ps, lr=0.1)),
    ("sgd_wd", dict(optimizer="sgd", learning_rate=0.05, weight_decay=0.01),
     lambda ps: torch.optim.SGD(ps, lr=0.05, weight_decay=0.01)),
    ("momentum", dict(optimizer="momentum", learning_rate=0.1, momentum=0.9),
     lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9)),
    ("nesterov", dict(optimizer="momentum", learning_rate=0.1, momentum=0.9, nesterov="true"),
     lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True)),
    ("adam", dict(optimizer="adam", learning_rate=1e-3),
     lambda ps: torch.optim.Adam(ps, lr=1e-3)),
    ("adam_wd", dict(optimizer="adam", learning_rate=1e-2, weight_decay=0.1, beta1=0.8,
                     beta2=0.99, epsilon=1e-6),
     lambda ps: torch.optim.Adam(ps, lr=1e-2, weight_decay=0.1, betas=(0.8, 0.99), eps=1e-6)),
    ("adamw", dict(optimizer="adamw", learning_rate=1e-2, weight_decay=0.05),
     lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.05)),
    ("adamw_clip", dict(optimizer="adamw", learning_rate=1e-2, weight_decay=0.05, clip_norm=0.5),
     lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.05)),
    ("sgd_clip", dict(optimizer="sgd", learning_rate=0.1, clip_norm=0.3),
     lambda ps: torch.optim.SGD(ps, lr=0.1)),
    ("adam_cosine", dict(optimizer="adam", learning_rate=1e-2, schedule="warmup_cosine",
                         warmup_steps=1, total_steps=3),
     lambda ps: torch.optim.Adam(ps, lr=1e-2)),
    ("sgd_linear", dict(optimizer="sgd", learning_rate=0.1, schedule="warmup_linear",
                        warmup_steps=2, total_steps=4),
     lambda ps: torch.optim.SGD(ps, lr=0.1)),
    ("momentum_wd", dict(optimizer="momentum", learning_rate=0.1, momentum=0.5, weight_decay=0.1),
     lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.5, weight_decay=0.1)),
]


def scheduled_lr(fields, step):
    """The learning rate at |step| as the pass documents it."""
    import math
    peak = fields["learning_rate"]
    sched = fields.get("schedule", "constant")
    if sched == "constant":
        return peak
    warmup, total = fields["warmup_steps"], fields["total_steps"]
    warm = min(1.0, (step + 1) / warmup) if warmup > 0 else 1.0
    progress = min(1.0, max(0.0, (step - warmup) / (total - warmup)))
    decay = 0.5 * (1 + math.cos(math.pi * progress)) if sched == "warmup_cosine" else 1 - progress
    return peak * warm * decay


def training_attr(fields):
    parts = []
    for k, v in fields.items():
        if isinstance(v, int) and not isinstance(v, bool):
            parts.append(f"{k} = {v}")
            continue
        parts.append(f"{k} = {v if isinstance(v, str) else format(float(v), '.17e')}")
    return "#kiln.training<" + ", ".join(parts) + ">"


def run_config(name, fields, make_torch):
    params = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    grads = [[rng.standard_normal(s).astype(np.float32) for s in SHAPES] for _ in range(STEPS)]
    # Adam with coupled weight decay normalizes g = grad + wd * p, which f32
    # rounds (by ~1e-7 of |grad| + wd |p|). Where g nearly cancels, within a
    # few hundred eps of 0, g / (|g| + eps) turns that rounding into a
    # difference of 1e-6 or more in the parameter between any two correct
    # f32 implementations (seen once in some hundreds of runs: 2.6e-5).
    # Such draws test rounding, not the optimizer: each is drawn again until
    # |grad + wd * p| >= 0.01, which still holds after three steps (Adam
    # moves p by at most about lr per step).
    wd = fields.get("weight_decay", 0.0)
    if fields["optimizer"] == "adam" and wd:
        for step_grads in grads:
            for g, p in zip(step_grads, params):
                while True:
                    bad = np.abs(g + np.float32(wd) * p) < 0.01
                    if not bad.any():
                        break
                    g[bad] = rng.standard_normal(int(bad.sum())).astype(np.float32)

    # Kiln: the step function returns constant gradients; one step function
    # per step (gradients differ), optimizer applied to each.
    funcs = []
    for k in range(STEPS):
        args = ", ".join(
            f"%p{i}: {tensor_type(s, 'f32')} {{kiln.role = #kiln.role<parameter>, "
            f"kiln.init = #kiln.init<kind = zeros>, kiln.name = \"p{i}\"}}"
            for i, s in enumerate(SHAPES))
        results = ", ".join(["tensor<f32> {kiln.role = #kiln.role<loss>}"] + [
            f"{tensor_type(s, 'f32')} {{kiln.role = #kiln.role<gradient>, kiln.grad_of = {i} : i64}}"
            for i, s in enumerate(SHAPES)])
        body = ["  %l = kiln.constant dense<0.0> : tensor<f32>"]
        for i, g in enumerate(grads[k]):
            body.append(f"  %g{i} = kiln.constant {dense(g, 'f32')}")
        ret_types = ", ".join(["tensor<f32>"] + [tensor_type(s, "f32") for s in SHAPES])
        body.append("  return %l, " + ", ".join(f"%g{i}" for i in range(len(SHAPES))) +
                    f" : {ret_types}")
        funcs.append(f"func.func @step{k}({args}) -> ({results}) {{\n" + "\n".join(body) + "\n}")
    module = f"module attributes {{kiln.training = {training_attr(fields)}}} {{\n" + \
        "\n".join(funcs) + "\n}"
    optimized = kiln_opt(module, "--kiln-apply-optimizer")

    # Read the new signature of @step0: argument types and, per result,
    # which argument it updates.
    sig = re.search(r"func\.func @step0\((.*?)\) -> \((.*?)\) \{", optimized, re.S)
    arg_types = re.findall(r"%arg\d+: (tensor<[^>]*>)", sig.group(1))
    updates = [int(u) for u in re.findall(r"kiln\.updates = (\d+)", sig.group(2))]
    n_args = len(arg_types)

    # @test chains the step functions, starting from the parameters and
    # zero state, and returns the final values of every argument.
    lines = ["func.func @test() -> (" + ", ".join(arg_types) + ") {"]
    cur = []
    for i, t in enumerate(arg_types):
        init = params[i] if i < len(SHAPES) else None
        if init is not None:
            lines.append(f"  %init{i} = kiln.constant {dense(init, 'f32')}")
        else:
            lines.append(f"  %init{i} = kiln.constant dense<0> : {t}" if "i64" in t
                         else f"  %init{i} = kiln.constant dense<0.0> : {t}")
        cur.append(f"%init{i}")
    result_types = re.findall(r"(tensor<[^>]*>)", sig.group(2))
    for k in range(STEPS):
        lines.append(f"  %r{k}:{len(result_types)} = func.call @step{k}(" + ", ".join(cur) +
                     ") : (" + ", ".join(arg_types) + ") -> (" + ", ".join(result_types) + ")")
        nxt = list(cur)
        for j, a in enumerate(updates):
            nxt[a] = f"%r{k}#{j + 1}"  # result 0 is the loss
        cur = nxt
    lines.append("  return " + ", ".join(cur) + " : " + ", ".join(arg_types))
    lines.append("}")
    test_module = optimized.rstrip()
    test_module = test_module[:test_module.rfind("}")] + "\n".join(lines) + "\n}\n"
    out = function_results(kiln_opt(test_module, "--inline", "--kiln-test-interpret"), "test")

    # torch.optim on the same numbers.
    tparams = [torch.nn.Parameter(torch.tensor(p)) for p in params]
    opt = make_torch(tparams)
    clip = fields.get("clip_norm")
    for k in range(STEPS):
        for p, g in zip(tparams, grads[k]):
            p.grad = torch.tensor(g)
        if clip:
            torch.nn.utils.clip_grad_norm_(tparams, clip)
        for group in opt.param_groups:
            group["lr"] = scheduled_lr(fields, k)
        opt.step()
    for i, p in enumerate(tparams):
        check_close(f"{name} p{i}", out[i], p.detach().numpy(), rtol=1e-6, atol=1e-7)
    step_arg = [i for i, t in enumerate(arg_types) if "i64" in t][0]
    assert int(out[step_arg]) == STEPS, f"{name}: step is {out[step_arg]}, expected {STEPS}"


for name, fields, make_torch in CONFIGS:
    run_config(name, fields, make_torch)
print("all optimizers match torch.optim")
