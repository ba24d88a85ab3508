"""Drives the reference interpreter from Python and compares it with NumPy.

A check script builds a module of argument-free functions whose inputs are
kiln.constant tensors, runs `kiln-opt FILE --kiln-test-interpret` (which
replaces each such function's body by constants of its results), parses the
dense<...> results and compares each with a NumPy computation:

  exact        the result equals the expected values rounded to the element
               type (data movement, max/min, argmax, integer arithmetic).
  rounded      the op computes in double and rounds once: the result must lie
               between round(ref - e) and round(ref + e), e = 1e-12 * scale,
               where ref is NumPy's float64 value and scale bounds the
               magnitude of the terms (|ref| unless the caller says more). For
               f64 that is a 1e-12 relative check; for f32, f16 and bf16 it
               says the result is NumPy's value rounded to the type.
  elementwise  the op computes in its compute type (f64 for f64, f32 for the
               rest): e = 1e-12 (|ref| + 1) for f64 and 2e-6 (|ref| + 1)
               otherwise; f32 results must lie within e of ref, f16 and bf16
               results between round(ref - e) and round(ref + e).

Every run draws a fresh seed (or takes --seed / KILN_TEST_SEED) and prints it
with any failure, so a failing run can be replayed.
"""

import argparse
import os
import re
import subprocess
import sys

import numpy as np

FLOAT_TYPES = ("f64", "f32", "f16", "bf16")
INT_TYPES = ("i64", "i32", "i8")
INT_BITS = {"i64": 64, "i32": 32, "i8": 8, "i1": 1}


# --- element types ---------------------------------------------------------

def round_bf16(values):
    """Rounds float64 values to bfloat16 (nearest even), as float64.

    Works on the float64 bit pattern directly (8 significand bits), so there
    is no double rounding through float32. Valid in bfloat16's normal range,
    which is all the checks use; infinities and NaN pass through.
    """
    v = np.asarray(values, dtype=np.float64)
    bits = v.view(np.uint64).copy()
    finite = np.isfinite(v) & (v != 0)
    drop = np.uint64(52 - 7)
    half = np.uint64(1) << (drop - np.uint64(1))
    lsb = (bits >> drop) & np.uint64(1)
    rounded = (bits + half - np.uint64(1) + lsb) & ~((np.uint64(1) << drop) - np.uint64(1))
    bits = np.where(finite, rounded, bits)
    return bits.view(np.float64)


def round_to(dtype, values):
    """NumPy's rounding of float64 |values| to |dtype|, returned as float64."""
    v = np.asarray(values, dtype=np.float64)
    if dtype == "f64":
        return v.copy()
    if dtype == "f32":
        return v.astype(np.float32).astype(np.float64)
    if dtype == "f16":
        return v.astype(np.float16).astype(np.float64)
    if dtype == "bf16":
        return round_bf16(v)
    if dtype == "i1":
        return (v != 0).astype(np.float64)
    bits = INT_BITS[dtype]
    ints = np.trunc(v).astype(np.int64)
    if bits < 64:
        ints = ints.astype({32: np.int32, 8: np.int8}[bits])
    return ints.astype(np.float64)


def float_attr(value):
    """|value| as an MLIR float literal that parses back to the same double."""
    return "%.17e" % value


def tensor_type(shape, dtype):
    return "tensor<" + "".join("%dx" % d for d in shape) + dtype + ">"


def _bits_of(dtype, values):
    """Little-endian bytes of |values| (already representable) in |dtype|."""
    v = np.asarray(values, dtype=np.float64).ravel()
    if dtype == "f64":
        return v.astype("<f8").tobytes()
    if dtype == "f32":
        return v.astype("<f4").tobytes()
    if dtype == "f16":
        return v.astype("<f2").tobytes()
    if dtype == "bf16":
        return (v.astype("<f4").view("<u4") >> 16).astype("<u2").tobytes()
    return v.astype({"i64": "<i8", "i32": "<i4", "i8": "<i1"}[dtype]).tobytes()


def _decode_hex(dtype, data, count):
    raw = bytes.fromhex(data)
    if dtype == "i1":
        bits = np.unpackbits(np.frombuffer(raw, dtype=np.uint8), bitorder="little")
        vals = bits.astype(np.float64)
        return vals[:count] if len(vals) >= count else np.resize(vals[:1], count)
    if dtype == "bf16":
        vals = (np.frombuffer(raw, dtype="<u2").astype("<u4") << 16).view("<f4")
    else:
        vals = np.frombuffer(raw, dtype={"f64": "<f8", "f32": "<f4", "f16": "<f2",
                                         "i64": "<i8", "i32": "<i4", "i8": "<i1"}[dtype])
    vals = vals.astype(np.float64)
    return vals if len(vals) == count else np.full(count, vals[0])


def _decode_token(dtype, token):
    if token == "true":
        return 1.0
    if token == "false":
        return 0.0
    if token.startswith("0x") or token.startswith("0X"):
        bits = int(token, 16)
        width = {"f64": 8, "f32": 4, "f16": 2, "bf16": 2}[dtype]
        return _decode_hex(dtype, bits.to_bytes(width, "little").hex(), 1)[0]
    return float(token)


def parse_dense(body, shape, dtype):
    """The values of `dense<body>` of the given tensor type, as float64."""
    count = int(np.prod(shape)) if shape else 1
    body = body.strip()
    if body.startswith('"'):
        return _decode_hex(dtype, body.strip('"')[2:], count).reshape(shape)
    tokens = [t for t in re.split(r"[\s,\[\]]+", body) if t]
    vals = np.array([_decode_token(dtype, t) for t in tokens], dtype=np.float64)
    if len(vals) == 1 and count != 1:
        vals = np.full(count, vals[0])
    if len(vals) != count:
        raise ValueError("expected %d values in dense<%s>" % (count, body[:80]))
    return round_to(dtype, vals).reshape(shape) if dtype in FLOAT_TYPES else vals.reshape(shape)


# --- building functions ----------------------------------------------------

class Function:
    """One argument-free function: constants, ops, and expected results."""

    def __init__(self, name):
        self.name = name
        self.lines = []
        self.results = []  # (ssa, shape, dtype, checker)
        self._next = 0

    def _fresh(self):
        self._next += 1
        return "%%v%d" % self._next

    def const(self, values, dtype):
        """Emits a kiln.constant of |values| rounded to |dtype|; returns its SSA name.

        The values are written as raw bits (hex), so what the op sees is
        exactly round_to(dtype, values).
        """
        values = np.asarray(values, dtype=np.float64)
        shape = values.shape
        exact = round_to(dtype, values)
        if dtype == "i1":
            words = ["true" if v else "false" for v in exact.ravel()]
            text = "dense<%s>" % (_nest(words, shape) if shape else words[0])
        else:
            text = 'dense<"0x%s">' % _bits_of(dtype, exact).hex().upper()
        ssa = self._fresh()
        self.lines.append("%s = kiln.constant %s : %s" % (ssa, text, tensor_type(shape, dtype)))
        return ssa

    def op(self, text):
        """Emits `<new ssa> = text` and returns the new SSA name."""
        ssa = self._fresh()
        self.lines.append("%s = %s" % (ssa, text))
        return ssa

    def raw(self, text):
        self.lines.append(text)

    def expect(self, ssa, shape, dtype, expected, mode="rounded", scale=None):
        """Checks result |ssa| against float64 |expected| (see the module doc)."""
        expected = np.broadcast_to(np.asarray(expected, dtype=np.float64), shape)
        scale_arr = None if scale is None else np.broadcast_to(
            np.asarray(scale, dtype=np.float64), shape)
        self.results.append((ssa, tuple(shape), dtype,
                             lambda got: compare(got, expected, dtype, mode, scale_arr)))

    def check(self, ssa, shape, dtype, checker):
        """Checks result |ssa| with |checker(got) -> error message or None|."""
        self.results.append((ssa, tuple(shape), dtype, checker))

    def text(self):
        types = ", ".join(tensor_type(s, d) for _, s, d, _ in self.results)
        out = ["func.func @%s() -> (%s) {" % (self.name, types)]
        out += ["  " + l for l in self.lines]
        out.append("  return %s : %s" % (", ".join(r[0] for r in self.results), types))
        out.append("}")
        return "\n".join(out)


def _nest(items, shape):
    if len(shape) == 1:
        return "[" + ", ".join(items) + "]"
    step = len(items) // shape[0]
    return "[" + ", ".join(_nest(items[i * step:(i + 1) * step], shape[1:])
                           for i in range(shape[0])) + "]"


# --- comparing -------------------------------------------------------------

def _same(a, b):
    return (a == b) | (np.isnan(a) & np.isnan(b))


def compare(got, expected, dtype, mode, scale=None):
    """None when |got| passes, else a message about the worst element."""
    if dtype not in FLOAT_TYPES or mode == "exact":
        want = round_to(dtype, expected)
        bad = ~_same(got, want)
        if bad.any():
            i = tuple(int(k) for k in np.argwhere(bad)[0])
            return "at %s: got %r, expected %r (%d of %d elements differ)" % (
                list(i), float(got[i]), float(want[i]), bad.sum(), bad.size)
        return None
    ref = expected
    if mode == "elementwise":
        e = (1e-12 if dtype == "f64" else 2e-6) * (np.abs(ref) + 1)
    else:
        mag = np.abs(ref) if scale is None else np.maximum(np.abs(ref), scale)
        e = 1e-12 * mag
    nan = np.isnan(ref)
    with np.errstate(invalid="ignore"):
        if dtype == "f64" or (mode == "elementwise" and dtype == "f32"):
            ok = np.abs(got - ref) <= e
        else:
            lo, hi = round_to(dtype, ref - e), round_to(dtype, ref + e)
            ok = (got >= lo) & (got <= hi)
        ok |= _same(got, ref)  # infinities
        ok = np.where(nan, np.isnan(got), ok)
    if not ok.all():
        bad = ~ok
        i = tuple(int(k) for k in np.argwhere(bad)[0])
        return "at %s: got %r, NumPy's value is %r (tolerance %.3g, %s mode; %d of %d elements differ)" % (
            list(i), float(got[i]), float(ref[i]), float(e[i]), mode, bad.sum(), bad.size)
    return None


# --- running ---------------------------------------------------------------

class Suite:
    """A set of functions checked in one kiln-opt run."""

    def __init__(self, title):
        parser = argparse.ArgumentParser(description=title)
        parser.add_argument("--seed", type=int, default=None)
        parser.add_argument("--keep", default=None, help="write the module here")
        parser.add_argument("--kiln-opt", default="kiln-opt")
        args = parser.parse_args()
        env_seed = os.environ.get("KILN_TEST_SEED")
        self.seed = args.seed if args.seed is not None else (
            int(env_seed) if env_seed else int.from_bytes(os.urandom(4), "little"))
        self.rng = np.random.default_rng(self.seed)
        self.title = title
        self.keep = args.keep
        self.kiln_opt = args.kiln_opt
        self.functions = []

    def function(self, name):
        f = Function(name)
        self.functions.append(f)
        return f

    def fail(self, message):
        print("FAIL %s (seed %d; rerun with --seed %d)\n%s" % (
            self.title, self.seed, self.seed, message))
        sys.exit(1)

    def run(self):
        module = "module {\n" + "\n\n".join(f.text() for f in self.functions) + "\n}\n"
        path = self.keep or os.path.join(
            os.environ.get("TMPDIR", "/tmp"), "kiln-ref-%d-%d.mlir" % (os.getpid(), self.seed))
        with open(path, "w") as out:
            out.write(module)
        proc = subprocess.run([self.kiln_opt, path, "--kiln-test-interpret"],
                              capture_output=True, text=True)
        if not self.keep:
            os.unlink(path)
        if proc.returncode != 0:
            self.fail("kiln-opt failed:\n" + proc.stderr[-4000:])
        outputs = _split_functions(proc.stdout)
        failures = []
        checked = 0
        for f in self.functions:
            consts = outputs.get(f.name)
            if consts is None or len(consts) != len(f.results):
                failures.append("@%s: expected %d constants in the output, found %s" % (
                    f.name, len(f.results), None if consts is None else len(consts)))
                continue
            for k, ((_, shape, dtype, checker), (body, type_text)) in enumerate(zip(f.results, consts)):
                if type_text != tensor_type(shape, dtype):
                    failures.append("@%s result %d: type %s, expected %s" % (
                        f.name, k, type_text, tensor_type(shape, dtype)))
                    continue
                got = parse_dense(body, shape, dtype)
                message = checker(got)
                checked += 1
                if message:
                    failures.append("@%s result %d (%s): %s" % (
                        f.name, k, tensor_type(shape, dtype), message))
        if failures:
            self.fail("\n".join(failures))
        print("%s: %d results in %d functions match (seed %d)" % (
            self.title, checked, len(self.functions), self.seed))


def _split_functions(text):
    """Maps each function name to its [(dense body, tensor type)] in order."""
    out = {}
    name = None
    for line in text.splitlines():
        m = re.match(r"\s*func\.func @(\w+)\(", line)
        if m:
            name = m.group(1)
            out[name] = []
            continue
        m = re.match(r"\s*%\S+ = kiln\.constant dense<(.*)> : (tensor<[^>]*>)\s*$", line)
        if m and name is not None:
            out[name].append((m.group(1), m.group(2)))
    return out


def random_shape(rng, rank_lo=1, rank_hi=3, dim_lo=1, dim_hi=5):
    return tuple(int(d) for d in rng.integers(dim_lo, dim_hi + 1,
                                              size=int(rng.integers(rank_lo, rank_hi + 1))))


def random_values(rng, dtype, shape, lo=-3.0, hi=3.0):
    """Random values of |dtype| (already rounded to it) in [lo, hi)."""
    if dtype in FLOAT_TYPES:
        return round_to(dtype, rng.uniform(lo, hi, size=shape))
    return rng.integers(int(lo), int(hi), size=shape).astype(np.float64)
