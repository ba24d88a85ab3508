"""The zoo's gpt, differentiated by kiln-autodiff and run on the reference
interpreter in f32, against the same model written in JAX and
differentiated by jax.grad, on the same random weights and tokens. Each
parameter's gradient must agree within 1e-5 relative to its largest
element (f32 arithmetic in different orders differs by a few ulps of the
largest terms). Random data each run; the seed is printed."""

import os
import re
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from kilntest import dense, function_results, kiln_opt  # noqa: E402

jax.config.update("jax_default_matmul_precision", "highest")

seed = int.from_bytes(os.urandom(4), "little")
print(f"seed {seed}")
rng = np.random.default_rng(seed)

model = open(sys.argv[1]).read()
grad_module = kiln_opt(model, "--kiln-autodiff", "--canonicalize", "--cse")

sig = re.search(r"func\.func @main\((.*?)\) -> \((.*?)\) \{", grad_module, re.S)
args = re.findall(r"%arg\d+: (tensor<[^>]*>) \{([^}]*)\}", sig.group(1))
names = [re.search(r'kiln.name = "([^"]*)"', attrs).group(1) for _, attrs in args]
types = [t for t, _ in args]
shapes = [[int(d) for d in re.match(r"tensor<((?:\d+x)*)", t).group(1).split("x") if d]
          for t in types]
result_types = re.findall(r"(tensor<[^>]*>)", sig.group(2))
grad_of = [int(g) for g in re.findall(r"kiln\.grad_of = (\d+)", sig.group(2))]

vocab = shapes[names.index("wte.weight")][0]
values = {}
for name, shape in zip(names, shapes):
    if name in ("tokens", "targets"):
        values[name] = rng.integers(0, vocab, size=shape).astype(np.int32)
    elif name.endswith(".weight") and len(shape) == 1:   # layer-norm scales
        values[name] = (1 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
    elif name.endswith(".bias"):
        values[name] = (0.1 * rng.standard_normal(shape)).astype(np.float32)
    else:
        values[name] = (0.2 * rng.standard_normal(shape)).astype(np.float32)

# Kiln: call @main with constants, inline, interpret.
lines = ["func.func @test() -> (" + ", ".join(result_types) + ") {"]
for i, (name, t) in enumerate(zip(names, types)):
    dtype = "i32" if name in ("tokens", "targets") else "f32"
    lines.append(f"  %c{i} = kiln.constant {dense(values[name], dtype)}")
lines.append(f"  %r:{len(result_types)} = func.call @main(" +
             ", ".join(f"%c{i}" for i in range(len(names))) + ") : (" + ", ".join(types) +
             ") -> (" + ", ".join(result_types) + ")")
lines.append("  return " + ", ".join(f"%r#{i}" for i in range(len(result_types))) + " : " +
             ", ".join(result_types))
lines.append("}")
text = grad_module.rstrip()
text = text[:text.rfind("}")] + "\n".join(lines) + "\n}\n"
results = function_results(kiln_opt(text, "--inline", "--kiln-test-interpret"), "test")
kiln_loss = float(results[0])
kiln_grads = {names[a]: results[1 + k] for k, a in enumerate(grad_of)}

# JAX: the same architecture (tools/kiln/lib/Zoo.cpp's gpt).
layers = len([n for n in names if n.endswith(".ln1.weight")])
hidden = shapes[names.index("wte.weight")][1]
heads = int(sys.argv[2])
head_dim = hidden // heads


def layer_norm(x, w, b):
    m = jnp.mean(x, axis=-1, keepdims=True)
    v = jnp.mean((x - m) ** 2, axis=-1, keepdims=True)
    return (x - m) / jnp.sqrt(v + 1e-5) * w + b


def loss_fn(p, tokens, targets):
    bsz, seq = tokens.shape
    x = p["wte.weight"][tokens] + p["wpe.weight"][None, :seq]
    mask = jnp.tril(jnp.ones((seq, seq), dtype=bool))
    for i in range(layers):
        pre = f"blocks.{i}."
        h = layer_norm(x, p[pre + "ln1.weight"], p[pre + "ln1.bias"])
        qkv = h @ p[pre + "attn.qkv.weight"] + p[pre + "attn.qkv.bias"]
        q, k, v = jnp.split(qkv, 3, axis=-1)
        split = lambda t: t.reshape(bsz, seq, heads, head_dim).transpose(0, 2, 1, 3)
        q, k, v = split(q), split(k), split(v)
        scores = (q @ k.transpose(0, 1, 3, 2)) * (1.0 / np.sqrt(head_dim))
        scores = jnp.where(mask, scores, -jnp.inf)
        att = jax.nn.softmax(scores, axis=-1) @ v
        att = att.transpose(0, 2, 1, 3).reshape(bsz, seq, hidden)
        x = x + att @ p[pre + "attn.proj.weight"] + p[pre + "attn.proj.bias"]
        h = layer_norm(x, p[pre + "ln2.weight"], p[pre + "ln2.bias"])
        h = jax.nn.gelu(h @ p[pre + "mlp.fc.weight"] + p[pre + "mlp.fc.bias"], approximate=True)
        x = x + h @ p[pre + "mlp.proj.weight"] + p[pre + "mlp.proj.bias"]
    x = layer_norm(x, p["ln_f.weight"], p["ln_f.bias"])
    logits = (x @ p["wte.weight"].T).reshape(bsz * seq, -1)
    labels = targets.reshape(-1)
    lse = jax.nn.logsumexp(logits, axis=-1)
    return jnp.mean(lse - logits[jnp.arange(labels.size), labels])


params = {n: jnp.asarray(v) for n, v in values.items() if n not in ("tokens", "targets")}
jax_loss, jax_grads = jax.value_and_grad(loss_fn)(params, jnp.asarray(values["tokens"]),
                                                  jnp.asarray(values["targets"]))
if abs(kiln_loss - float(jax_loss)) > 1e-5 * abs(float(jax_loss)):
    raise SystemExit(f"loss: kiln {kiln_loss!r} vs jax {float(jax_loss)!r}")
for name, g in kiln_grads.items():
    want = np.asarray(jax_grads[name], dtype=np.float64)
    err = np.max(np.abs(np.asarray(g, dtype=np.float64) - want))
    scale = np.max(np.abs(want))
    if err > 1e-5 * scale:
        raise SystemExit(f"{name}: max |kiln - jax| = {err:.3g}, 1e-5 of max |jax| = "
                         f"{1e-5 * scale:.3g}")
    print(f"{name}: ok (max err / max |g| = {err / scale:.2e})")
print(f"{len(kiln_grads)} gradients match jax.grad")
