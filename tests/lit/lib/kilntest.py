"""Helpers for Python-driven lit tests: write tensors as MLIR, run kiln-opt,
read results back. Used by tests that compare Kiln with numpy, JAX or
PyTorch on the same numbers."""

import os
import re
import struct
import subprocess
import sys

import numpy as np

MLIR_DTYPES = {"f64": np.float64, "f32": np.float32, "f16": np.float16,
               "i64": np.int64, "i32": np.int32, "i8": np.int8, "i1": np.bool_}


def tensor_type(shape, dtype):
    dims = "x".join(str(d) for d in shape)
    return f"tensor<{dims}x{dtype}>" if dims else f"tensor<{dtype}>"


def _fmt(v, dtype):
    if dtype == "i1":
        return "true" if v else "false"
    if dtype.startswith("i"):
        return str(int(v))
    v = float(v)
    if np.isnan(v):
        return "0x7FF8000000000000" if dtype == "f64" else "0x7FC00000"
    return repr(v)


def dense(array, dtype):
    """An MLIR dense attribute literal for |array| viewed as |dtype|."""
    a = np.asarray(array)

    def nest(x):
        if x.ndim == 0:
            return _fmt(x.item(), dtype)
        return "[" + ", ".join(nest(e) for e in x) + "]"

    return f"dense<{nest(a)}> : {tensor_type(a.shape, dtype)}"


def tools_dir():
    return os.environ.get("KILN_TOOLS_DIR", "")


def kiln_opt(text, *args):
    """Runs kiln-opt on |text| with |args|; returns its output or exits with
    kiln-opt's error output."""
    exe = os.path.join(tools_dir(), "kiln-opt") if tools_dir() else "kiln-opt"
    proc = subprocess.run([exe, "-", *args], input=text, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(text + "\n" + proc.stderr)
        raise SystemExit(f"kiln-opt {' '.join(args)} failed")
    return proc.stdout


_HEX_FLOAT = {"f64": ("<Q", "<d", 16), "f32": ("<I", "<f", 8), "f16": ("<H", "<e", 4)}


def _parse_scalar(tok, dtype):
    tok = tok.strip()
    if dtype == "i1":
        return tok == "true"
    if tok.startswith("0x") and dtype in _HEX_FLOAT:
        ipack, fpack, _ = _HEX_FLOAT[dtype]
        return struct.unpack(fpack, struct.pack(ipack, int(tok, 16)))[0]
    if dtype == "bf16" and tok.startswith("0x"):
        return struct.unpack("<f", struct.pack("<I", int(tok, 16) << 16))[0]
    return float(tok) if not dtype.startswith("i") else int(tok)


def parse_dense(body, shape, dtype):
    """Parses the inside of dense<...> into a numpy array of |shape|."""
    body = body.strip()
    np_dtype = np.float64 if dtype == "bf16" else MLIR_DTYPES[dtype]
    count = int(np.prod(shape)) if shape else 1
    if body.startswith('"0x'):
        raw = bytes.fromhex(body[3:-1])
        width = {"f64": 8, "f32": 4, "f16": 2, "bf16": 2, "i64": 8, "i32": 4,
                 "i8": 1, "i1": 1}[dtype]
        if dtype == "bf16":
            words = np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16
            vals = words.view(np.float32).astype(np.float64)
        else:
            vals = np.frombuffer(raw, dtype=MLIR_DTYPES[dtype])
        if len(vals) == 1 and count > 1:
            vals = np.repeat(vals, count)
        return np.array(vals, dtype=np_dtype).reshape(shape)
    toks = [t for t in re.split(r"[\[\],\s]+", body) if t]
    vals = [_parse_scalar(t, dtype) for t in toks]
    if len(vals) == 1 and count > 1:
        vals = vals * count
    return np.array(vals, dtype=np_dtype).reshape(shape)


_TYPE_RE = re.compile(r"tensor<((?:\d+x)*)(\w+)>")


def parse_type(t):
    m = _TYPE_RE.fullmatch(t.strip())
    dims = [int(d) for d in m.group(1).split("x") if d]
    return dims, m.group(2)


def function_results(text, name):
    """The constants returned by function @name after kiln-test-interpret."""
    start = text.index(f"func.func @{name}(")
    end = text.index("\n  }", start)
    body = text[start:end]
    consts = {}
    for m in re.finditer(r"(%\w+) = kiln\.constant dense<(.*?)> : (tensor<[^>]*>)", body):
        consts[m.group(1)] = (m.group(2), m.group(3))
    ret = re.search(r"return (.*?) : (.*)", body)
    names = [n.strip() for n in ret.group(1).split(",")]
    out = []
    for n in names:
        dense_body, ttype = consts[n]
        shape, dtype = parse_type(ttype)
        out.append(parse_dense(dense_body, shape, dtype))
    return out


def check_close(name, got, want, rtol, atol=0.0):
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        raise SystemExit(f"{name}: shape {got.shape} != expected {want.shape}")
    err = np.abs(got - want)
    tol = atol + rtol * np.abs(want)
    if not np.all(err <= tol):
        i = int(np.argmax(err - tol))
        raise SystemExit(f"{name}: element {i}: got {got.flat[i]!r}, expected "
                         f"{want.flat[i]!r} (rtol {rtol}, atol {atol})")
    print(f"{name}: ok (max abs err {err.max() if err.size else 0:.3g})")


def logged_values(log, pattern, text=False):
    """{K: X} for each line of the file |log| that |pattern| (a regular
    expression with two groups, an integer K and a number X) matches; with
    |text|, X as printed."""
    values = {}
    with open(log) as f:
        for line in f:
            m = re.match(pattern, line)
            if m:
                values[int(m.group(1))] = m.group(2) if text else float(m.group(2))
    return values


# Losses below this are compared absolutely, as if they were this large: a
# cross-entropy near 0 is log(1 + e) for a tiny e, computed in f32 from
# terms near 1, so two correct implementations differ there by a few f32
# ulps of 1 (about 1e-7), not by a fraction of the loss.
LOSS_FLOOR = 1e-2


def printed_error(printed, theirs):
    """How far the loss |printed| (a log's text, such as kiln train's "%.6f")
    is from |theirs|, relative to |theirs| (at least LOSS_FLOOR), beyond the
    half unit of its last printed digit: a loss of 1.1e-5 printed as
    0.000011 is known only to 5e-7."""
    digits = printed.split(".")[1] if "." in printed and "e" not in printed.lower() else None
    resolution = 0.5 * 10.0 ** -len(digits) if digits is not None else 0.0
    return max(0.0, abs(float(printed) - theirs) - resolution) / max(abs(theirs), LOSS_FLOOR)


def randomize_batch_norms(module, mean_std=1.0):
    """Moves every BatchNorm2d of the PyTorch |module| away from its fresh
    state (running mean 0 and variance 1, scale 1 and shift 0), so that a
    model that ignored any of them would train or evaluate differently:
    running means normal(0, mean_std), variances uniform on [0.5, 2], scales
    uniform on [0.5, 1.5], shifts normal(0, 0.1)."""
    import torch
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.normal_(0, mean_std)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_(0, 0.1)


def check_losses(log, peer_loss, tolerance, peer="torch"):
    """Compares the "step K loss X" lines of the kiln train log |log| with
    a peer's losses: peer_loss(K) trains the peer's step K (called for K =
    1, 2, ... up to the last logged step, so the peer takes every step) and
    returns its loss. Exits naming the first step off by more than
    |tolerance| (relative, see printed_error); else prints how many steps
    matched."""
    kiln = logged_values(log, r"step (\d+) loss (\S+)", text=True)
    if not kiln:
        sys.exit(f"{log}: no 'step K loss' lines")
    worst = 0.0
    for step in range(1, max(kiln) + 1):
        theirs = peer_loss(step)
        if step not in kiln:
            continue
        error = printed_error(kiln[step], theirs)
        worst = max(worst, error)
        if error > tolerance:
            sys.exit(f"step {step}: kiln {kiln[step]}, {peer} {theirs:.6f} "
                     f"(relative error {error:.2e} > {tolerance}, beyond the printed digits)")
    print(f"losses match {peer}: {len(kiln)} steps, worst relative error {worst:.1e}")


def micro_batches(k, batch, samples, accum=1, ranks=1, sync_batch_norm=False):
    """The forward and backward passes of training step |k| (from 1) as
    check_torch_training takes them for kiln's run with |accum| micro-batches
    of |batch| rows on |ranks| ranks: a list of (rows, divisor), each loss
    divided by its divisor before its gradient is added. Data parallel: each
    rank's micro-batch (rank r takes rows r, r + N, ... of the global batch);
    sync_batch_norm: each micro-batch of the N ranks' rows together."""
    if sync_batch_norm:
        return [([((k - 1) * batch * ranks * accum + m * batch * ranks + j) % samples
                  for j in range(batch * ranks)], accum) for m in range(accum)]
    parts = accum * ranks
    out = []
    for m in range(parts):
        if ranks > 1:
            rows = [((k - 1) * batch * ranks + m + ranks * i) % samples for i in range(batch)]
        else:
            b = ((k - 1) * accum + m) % (samples // batch)
            rows = list(range(b * batch, (b + 1) * batch))
        out.append((rows, parts))
    return out


def check_torch_training(log, net, loss_fn, x, y, batch, optimizer, tolerance,
                         train=None, checkpoint=None, accum=1, ranks=1,
                         kiln_layout=None, sync_batch_norm=False):
    """Trains the PyTorch module |net| (in its training mode; |train|()
    restores that mode after an eval, default net.train()) with |optimizer|
    on the samples |x|, |y| in order, |batch| rows per step, and compares it
    with the kiln train log |log| (check_losses): every "step K loss" line;
    every "eval epoch E step K loss L" line with PyTorch's eval() loss after
    step K, the mean of loss_fn over the batches of the same samples (the
    eval data is the training data); and, with |checkpoint| (a kiln
    checkpoint), every tensor of the final state dict but PyTorch's
    num_batches_tracked counters, through kiln_layout(name, tensor) when
    kiln keeps it in another layout. accum=K: K micro-batches per step, the
    gradients averaged (kiln's --grad-accum). ranks=N: data parallel over N
    ranks (rank r takes rows r, r + N, ... of each global batch, as kiln's
    sampler deals them), rank 0's running statistics kept as DDP's
    broadcast_buffers keeps them. sync_batch_norm (with ranks=N): kiln's
    --sync-batch-norm, PyTorch's SyncBatchNorm, whose definition is a batch
    norm over the global batch: one forward pass over the N ranks' rows
    together, which also updates the running statistics."""
    import torch
    from safetensors.torch import load_file

    samples = x.shape[0]
    evals = logged_values(log, r"eval epoch \d+ step (\d+) loss (\S+)", text=True)
    checked = []
    restore = train or net.train

    def evaluate():
        net.eval()
        with torch.no_grad():
            losses = [loss_fn(net(x[b:b + batch]), y[b:b + batch]).item()
                      for b in range(0, samples, batch)]
        restore()
        return sum(losses) / len(losses)

    buffers = [b for b in net.buffers() if b.is_floating_point()]

    def step(k):
        optimizer.zero_grad()
        total = 0.0
        kept = None
        for m, (rows, parts) in enumerate(
                micro_batches(k, batch, samples, accum, ranks, sync_batch_norm)):
            if m == 1 and ranks > 1 and not sync_batch_norm:
                # The other ranks' batches do not move rank 0's statistics.
                kept = [b.clone() for b in buffers]
            loss = loss_fn(net(x[rows]), y[rows]) / parts
            loss.backward()
            total += loss.item()
        if kept is not None:
            with torch.no_grad():
                for b, v in zip(buffers, kept):
                    b.copy_(v)
        optimizer.step()
        if k in evals:
            theirs = evaluate()
            error = printed_error(evals[k], theirs)
            if error > tolerance:
                sys.exit(f"eval after step {k}: kiln {evals[k]}, torch {theirs:.6f} "
                         f"(relative error {error:.2e} > {tolerance}, beyond the printed digits)")
            checked.append(k)
        return total

    check_losses(log, step, tolerance)
    if evals:
        print(f"evals match torch's eval(): {len(checked)} of {len(evals)}")
    if not checkpoint:
        return
    saved = load_file(checkpoint)
    worst, compared = 0.0, 0
    for name, theirs in net.state_dict().items():
        if name.endswith("num_batches_tracked"):
            continue
        if kiln_layout:
            theirs = kiln_layout(name, theirs)
        compared += 1
        if name not in saved:
            sys.exit(f"{checkpoint}: no tensor '{name}'")
        mine = saved[name]
        if mine.shape != theirs.shape:
            sys.exit(f"{name}: kiln's is {list(mine.shape)}, torch's {list(theirs.shape)}")
        scale = max(theirs.abs().max().item(), 1e-6)
        error = (mine - theirs).abs().max().item() / scale
        worst = max(worst, error)
        if error > tolerance:
            sys.exit(f"{name}: kiln and torch differ by {error:.2e} of its scale "
                     f"(> {tolerance})")
    print(f"checkpoint matches torch's state dict: {compared} tensors, "
          f"worst relative error {worst:.1e}")


def split_parts(args, separator="+"):
    """|args| cut at each |separator|: "A B + C D" is [[A, B], [C, D]]."""
    parts = [[]]
    for a in args:
        if a == separator:
            parts.append([])
        else:
            parts[-1].append(a)
    return [p for p in parts if p]


def run_parts(parts, run, label):
    """Runs run(args) for each of |parts| in this one process (importing
    PyTorch is most of a small check's time: about 2 s of 3 here, once per
    process), each part's output lines prefixed with "[label(args)] ". A
    part that fails (sys.exit with a message, or an exception) prints
    "[label] FAILED: why" and the rest still run; the process then exits
    with a non-zero status naming how many failed."""
    import contextlib
    import io
    import traceback

    failed = 0
    for args in parts:
        name = label(args)
        out = io.StringIO()
        why = None
        try:
            with contextlib.redirect_stdout(out):
                run(args)
        except SystemExit as e:
            if e.code not in (None, 0):
                why = e.code if isinstance(e.code, str) else f"exit status {e.code}"
        except Exception as e:  # noqa: BLE001 - reported, then counted
            traceback.print_exc()
            why = f"{type(e).__name__}: {e}"
        for line in out.getvalue().splitlines():
            print(f"[{name}] {line}")
        if why is not None:
            failed += 1
            print(f"[{name}] FAILED: {why}")
        sys.stdout.flush()
    if failed:
        sys.exit(f"{failed} of {len(parts)} failed")


def parse_options(args, known):
    """|args|, each "--NAME=VALUE" or "--NAME" (value ""), as a dict; None
    when one is not of that form or its name is not in |known|."""
    if not all(a.startswith("--") for a in args):
        return None
    options = dict(a[2:].partition("=")[::2] for a in args)
    return None if set(options) - set(known) else options


def run_command_line(argv, run_command, label):
    """The command line of a peer script whose commands may share one
    process: "COMMAND ARGS [+ COMMAND ARGS ...]" runs each with
    run_command(args) (run_parts, prefixed by label(args), when there are
    several); "checks FILE" runs "check" with each line of FILE as its
    arguments (a test appends a line after each run it trains, and checks
    them all at its end)."""
    parts = split_parts(argv)
    if len(parts) == 1 and parts[0][0] == "checks" and len(parts[0]) == 2:
        with open(parts[0][1]) as f:
            parts = [["check"] + line.split() for line in f if line.strip()]
        if not parts:
            sys.exit(f"{argv[1]}: no checks in it")
        run_parts(parts, run_command, label)
    elif len(parts) > 1:
        run_parts(parts, run_command, label)
    elif parts:
        run_command(parts[0])
    else:
        sys.exit("expected a command")


def run_check(run, differs=False, peer="torch"):
    """Runs |run|(), a check of a kiln log against |peer|. With |differs|
    the check must fail at a step's loss (check_losses' "step K: ..."): any
    other failure is still one, and so is a match (a peer script's
    --differs)."""
    if not differs:
        run()
        return
    try:
        run()
    except SystemExit as e:
        if isinstance(e.code, str) and e.code.startswith("step "):
            print(f"losses differ from {peer}, as expected: {e.code}")
            return
        raise
    sys.exit(f"losses match {peer}; expected them to differ")
