"""Checks `kiln compile --memory-budget` (runCompilePipeline's search,
passes/Pipelines.cpp) on MODEL against the plans it chooses between.

memory_budget.py MODEL DIR [--train] [FLAGS...] compiles MODEL with --report under
FLAGS without recomputation and with --remat=full and --remat=dots (the
least of which is the least memory the budget's search reaches: it
tries dots' values when all of full's do not fit), then under budgets
chosen from those plans. What a budget bounds is --report's planned peak,
or for a CUDA target its device memory (the planned peak and the
runtime's workspaces); "plan" below means that:

- above the plan without recomputation: nothing is recomputed and the
  plan is that plan;
- halfway between the two: some but not all values are recomputed, the
  planned peak is within the budget and the line kiln prints states it;
- at the least: the plan fits;
- below it: a non-zero exit and an error saying what the step needs.

With --train, `kiln train` under the halfway budget also runs four steps
on synthetic data and its checkpoint must be byte for byte the one
without recomputation (the recomputation is the forward's arithmetic).

It prints one line per case for FileCheck and exits non-zero on the first
failed check. The budgets are exact byte counts ("123456B")."""

import os
import re
import subprocess
import sys

model, out, flags = sys.argv[1], sys.argv[2], sys.argv[3:]
train = "--train" in flags
flags = [f for f in flags if f != "--train"]


def compile_step(name, extra):
    """Runs kiln compile; returns (exit code, stdout + stderr text)."""
    run = subprocess.run(
        ["kiln", "compile", model, *flags, *extra, "--report", "-o",
         os.path.join(out, name + ".kpkg")],
        capture_output=True, text=True)
    return run.returncode, run.stdout + run.stderr


def peak(text, what):
    """What the budget bounds, from --report: a CUDA step's device memory
    (the planned peak and the runtime's workspaces), else the planned peak."""
    match = re.search(r"device memory:\s+(\d+) bytes", text) or \
        re.search(r"planned peak:\s+(\d+) bytes", text)
    if not match:
        sys.exit(f"{what}: no 'planned peak' line in:\n{text}")
    return int(match.group(1))


def check(ok, message):
    if not ok:
        sys.exit("FAILED: " + message)


code, text = compile_step("off", [])
check(code == 0, "the compile without recomputation failed:\n" + text)
without = peak(text, "without recomputation")
code, text = compile_step("full", ["--remat=full"])
check(code == 0, "the --remat=full compile failed:\n" + text)
least = peak(text, "--remat=full")
code, text = compile_step("dots", ["--remat=dots"])
check(code == 0, "the --remat=dots compile failed:\n" + text)
least = min(least, peak(text, "--remat=dots"))
check(least < without, f"recomputation plans {least} bytes, not less than {without}")

line = re.compile(r"--memory-budget=[^:]+: --remat=(\w+) recomputes (\d+) of "
                  r"its (\d+) values, the cheapest per byte freed at the peak first; planned peak")

# Above the plan without recomputation.
code, text = compile_step("roomy", [f"--memory-budget={without + 4096}B"])
check(code == 0, "a budget above the plan failed:\n" + text)
check("the step fits without recomputing anything" in text,
      "a roomy budget recomputed something:\n" + text)
check(peak(text, "roomy") == without, "a roomy budget changed the plan")
print(f"roomy: nothing recomputed, {without} bytes")

# Halfway.
budget = (without + least) // 2
code, text = compile_step("half", [f"--memory-budget={budget}B"])
check(code == 0, f"a budget of {budget} bytes failed:\n" + text)
match = line.search(text)
check(match is not None, "no --memory-budget line:\n" + text)
recomputed, candidates = int(match.group(2)), int(match.group(3))
planned = peak(text, "half")
check(planned <= budget, f"planned {planned} bytes over the budget {budget}")
check(0 < recomputed < candidates,
      f"recomputed {recomputed} of {candidates}: expected some, not all")
print(f"half: recomputes {recomputed} of {candidates} values, "
      f"{planned} <= {budget} bytes")

if train:
    def train_step(name, extra):
        run = subprocess.run(
            ["kiln", "train", model, *flags, *extra, "--data=synthetic",
             "--max-steps=4", "--checkpoint-dir=" + os.path.join(out, name)],
            capture_output=True, text=True)
        check(run.returncode == 0, f"kiln train {' '.join(extra)} failed:\n"
              + run.stdout + run.stderr)
        return run.stdout, open(os.path.join(out, name, "step-4.safetensors"),
                                "rb").read()
    _, plain = train_step("train-off", [])
    log, budgeted = train_step("train-half", [f"--memory-budget={budget}B"])
    check(line.search(log) is not None,
          "kiln train printed no --memory-budget line:\n" + log)
    check(plain == budgeted,
          "the checkpoint under the budget differs from the one without")
    print("train: the same checkpoint")

# At the least.
code, text = compile_step("tight", [f"--memory-budget={least}B"])
check(code == 0, f"a budget of {least} bytes (the least plan) failed:\n" + text)
check(peak(text, "tight") <= least, "the tight plan is over its budget")
print("tight: fits")

# Below the least.
code, text = compile_step("short", [f"--memory-budget={least - 1}B"])
check(code != 0, "a budget below the least plan compiled:\n" + text)
check("error: --memory-budget=" in text and "and at least" in text,
      "no error saying what the step needs:\n" + text)
check(not os.path.exists(os.path.join(out, "short.kpkg")),
      "a package was written for a step over its budget")
print("short: refused")
