"""kiln import's random ops (and Multinomial) against their distributions.

  random_ops.py DIR

ONNX leaves the generator unspecified, so kiln's numbers (Philox, through
kiln.random_uniform) cannot equal onnx.reference's; what they must have is
the distribution. Each case is a model whose output, imported with
--loss=output, is one statistic of a random op's numbers over a batch of
8 x 4096 (plus 0 times the trained scale's input, so that it has a
parameter); `kiln train --data=synthetic` prints it for four steps, each
with new numbers, on the reference interpreter and on the CPU backend. The
CPU backend's losses must equal the interpreter's (relative 1e-5), the
four steps must not all be equal, and their mean must lie within five
standard errors of the distribution's value. The import seed is random and printed;
KILN_RANDOM_SEED=N reruns one."""

import os
import re
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SHAPE = (8, 4096)
N = SHAPE[0] * SHAPE[1]
STEPS = 4


def model(path, nodes, inits=()):
    """x [8, 4096] times the parameter 'scale' into 'h'; the nodes write
    the statistic 's' (a scalar); y = s + 0 * mean(h)."""
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "scale"], ["h"])] + nodes
        + [helper.make_node("ReduceMean", ["h"], ["hm"], keepdims=0),
           helper.make_node("Mul", ["hm", "zero"], ["hz"]),
           helper.make_node("Add", ["s", "hz"], ["y"])],
        "random", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(SHAPE))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])],
        [numpy_helper.from_array(np.ones(SHAPE[1], np.float32), "scale"),
         numpy_helper.from_array(np.zeros((), np.float32), "zero")] + list(inits))
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)


def mean_of(source):
    return [helper.make_node("ReduceMean", [source], ["s"], keepdims=0)]


def cases(rng):
    """(name, nodes, initializers, expected value, standard error of one
    step's statistic, and a bound the statistic must never cross: (lo, hi))."""
    out = []
    out.append(("normal-like-mean",
                [helper.make_node("RandomNormalLike", ["h"], ["n"], mean=1.0, scale=2.0)]
                + mean_of("n"), [], 1.0, 2.0 / np.sqrt(N), None))
    # E (n - mean)^2 = scale^2; its variance 2 scale^4.
    out.append(("normal-variance",
                [helper.make_node("RandomNormal", [], ["n"], shape=list(SHAPE), mean=-3.0,
                                  scale=0.5),
                 helper.make_node("Sub", ["n", "mean"], ["d"]),
                 helper.make_node("Mul", ["d", "d"], ["d2"])] + mean_of("d2"),
                [numpy_helper.from_array(np.float32(-3.0), "mean")],
                0.25, 0.25 * np.sqrt(2.0 / N), None))
    # The fourth moment of a standard normal, 3 (variance 105 - 9): a
    # Gaussian's tails, which Box-Muller gives and a sum of uniforms not.
    out.append(("normal-fourth-moment",
                [helper.make_node("RandomNormalLike", ["h"], ["n"]),
                 helper.make_node("Mul", ["n", "n"], ["n2"]),
                 helper.make_node("Mul", ["n2", "n2"], ["n4"])] + mean_of("n4"),
                [], 3.0, np.sqrt(96.0 / N), None))
    # U(-1, 3): mean 1, standard deviation 4 / sqrt(12); never outside.
    uniform = helper.make_node("RandomUniform", [], ["u"], shape=list(SHAPE), low=-1.0,
                               high=3.0)
    out.append(("uniform-mean", [uniform] + mean_of("u"), [], 1.0,
                4.0 / np.sqrt(12.0 * N), None))
    # Its extremes: 4 E / N from the ends, E exponential; a bound of 40 / N
    # from them for the mean of four.
    out.append(("uniform-max", [uniform, helper.make_node("ReduceMax", ["u"], ["s"],
                                                          keepdims=0)],
                [], 3.0, 16.0 / N, (-1.0, 3.0)))
    out.append(("uniform-min", [uniform, helper.make_node("ReduceMin", ["u"], ["s"],
                                                          keepdims=0)],
                [], -1.0, 16.0 / N, (-1.0, 3.0)))
    out.append(("uniform-like-mean",
                [helper.make_node("RandomUniformLike", ["h"], ["u"], low=2.0, high=2.5)]
                + mean_of("u"), [], 2.25, 0.5 / np.sqrt(12.0 * N), (2.0, 2.5)))
    # Bernoulli of per-element probabilities p: the hits' mean is mean(p),
    # and mean(hit * p) is mean(p^2), which a hit drawn against the wrong
    # element's p would miss.
    # (A Constant node: a float initializer would be a parameter.)
    p = (1 / (1 + np.exp(-3 * rng.standard_normal(SHAPE)))).astype(np.float32)
    prob = helper.make_node("Constant", [], ["p"], value=numpy_helper.from_array(p, "p"))
    bern = helper.make_node("Bernoulli", ["p"], ["b"])
    out.append(("bernoulli-mean", [prob, bern] + mean_of("b"), [], float(p.mean()),
                float(np.sqrt((p * (1 - p)).mean() / N)), (0.0, 1.0)))
    out.append(("bernoulli-per-element",
                [prob, bern, helper.make_node("Mul", ["b", "p"], ["bp"])] + mean_of("bp"),
                [], float((p * p).mean()), float(np.sqrt((p ** 3 * (1 - p)).mean() / N)),
                None))
    # Multinomial: 4096 draws from each of 8 rows of log-probabilities over
    # 6 classes (softmax(logits) the probabilities). The mean class; the
    # share of class 0 (softmax, not the logits taken as probabilities);
    # the mean of the class times its row's number (rows kept apart).
    logits = (1.5 * rng.standard_normal((SHAPE[0], 6))).astype(np.float32)
    probs = np.exp(logits - logits.max(1, keepdims=True))
    probs /= probs.sum(1, keepdims=True)
    classes = np.arange(6)
    rows = np.arange(1, SHAPE[0] + 1, dtype=np.float64)[:, None]
    draw = [helper.make_node("Constant", [], ["l"],
                             value=numpy_helper.from_array(logits, "l")),
            helper.make_node("Multinomial", ["l"], ["m"], sample_size=SHAPE[1]),
            helper.make_node("Cast", ["m"], ["mf"], to=TensorProto.FLOAT)]

    def moments(values):
        """The mean over rows and draws of values[row, class] and its
        standard error."""
        mean = (probs * values).sum(1)
        var = (probs * values ** 2).sum(1) - mean ** 2
        return float(mean.mean()), float(np.sqrt(var.mean() / N))

    out.append(("multinomial-mean", draw + mean_of("mf"), [])
               + moments(classes[None, :] + 0.0 * rows) + ((0.0, 5.0),))
    zero = [helper.make_node("Constant", [], ["zero_class"],
                             value=numpy_helper.from_array(np.int32(0), "zero_class")),
            helper.make_node("Equal", ["m", "zero_class"], ["is0"]),
            helper.make_node("Cast", ["is0"], ["z"], to=TensorProto.FLOAT)]
    out.append(("multinomial-class-0", draw + zero + mean_of("z"), [])
               + moments((classes[None, :] == 0) + 0.0 * rows) + ((0.0, 1.0),))
    row_number = [helper.make_node("Constant", [], ["row"], value=numpy_helper.from_array(
                      rows.astype(np.float32), "row")),
                  helper.make_node("Mul", ["mf", "row"], ["mr"])]
    out.append(("multinomial-rows", draw + row_number + mean_of("mr"), [])
               + moments(classes[None, :] * rows) + (None,))
    return out


def losses(text):
    return [float(v) for v in re.findall(r"^step \d+ loss (\S+)$", text, re.M)]


def run(*args):
    r = subprocess.run(list(args), capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("failed: %s\n%s" % (" ".join(args), r.stderr))
    return r.stdout


def main(directory):
    seed = int(os.environ.get("KILN_RANDOM_SEED", np.random.SeedSequence().entropy % 10 ** 6))
    print("seed %d (KILN_RANDOM_SEED=%d reruns it)" % (seed, seed))
    rng = np.random.default_rng(seed)
    failed = 0
    for name, nodes, inits, expected, error, bounds in cases(rng):
        path = os.path.join(directory, name + ".onnx")
        kiln = path.replace(".onnx", ".kiln")
        model(path, nodes, inits)
        run("kiln", "import", path, "-o", kiln, "--loss=output", "--seed=%d" % seed)
        common = [kiln, "--data=synthetic", "--max-steps=%d" % STEPS]
        ref = losses(run("kiln", "train", *common, "--backend=reference"))
        cpu = losses(run("kiln", "train", *common, "--backend=cpu"))
        problems = []
        if len(ref) != STEPS or len(cpu) != STEPS:
            problems.append("expected %d losses, got %d and %d" % (STEPS, len(ref), len(cpu)))
        else:
            if any(abs(a - b) > 1e-5 * max(abs(a), 1e-3) for a, b in zip(ref, cpu)):
                problems.append("the CPU backend's %s differ from the interpreter's %s"
                                % (cpu, ref))
            # Every step the same: the counter did not advance. (Two steps
            # may agree by chance: a Bernoulli mean is a count over N, and
            # the losses print with 7 digits; all four almost never do.)
            if len(set(ref)) == 1:
                problems.append("every step drew the same numbers: %s" % ref)
            mean = float(np.mean(ref))
            if abs(mean - expected) > 5 * error / np.sqrt(STEPS):
                problems.append("mean %.6g, expected %.6g +- %.3g"
                                % (mean, expected, 5 * error / np.sqrt(STEPS)))
            if bounds and not all(bounds[0] <= v <= bounds[1] for v in ref):
                problems.append("%s outside [%g, %g]" % (ref, *bounds))
        if problems:
            failed += 1
            print("%s: FAILED: %s" % (name, "; ".join(problems)))
        else:
            print("%s: matches its distribution (%.6g, expected %.6g)"
                  % (name, float(np.mean(ref)), expected))
    return 1 if failed else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    os.makedirs(sys.argv[1], exist_ok=True)
    sys.exit(main(sys.argv[1]))
