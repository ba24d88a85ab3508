"""Checks --checkpoint-best: usage check_best.py DIR LOG [LOG ...].

The logs are kiln train's (or its ranks' under a launcher) in the order
the runs went; their "eval epoch E step S loss L" lines are every eval.
DIR/best.json must name the step whose eval loss is the lowest (the first
such), with that loss to the printed digits, and a checkpoint file of that
step that exists. Prints it; exits 1 with the reason."""
import json
import os
import re
import sys

directory, logs = sys.argv[1], sys.argv[2:]
evals = []
for log in logs:
    evals += [(int(s), float(l)) for s, l in
              re.findall(r"eval epoch \d+ step (\d+) loss (\S+)", open(log).read())]
if not evals:
    sys.exit("no eval lines")
step, loss = min(evals, key=lambda e: e[1])
best = json.load(open(os.path.join(directory, "best.json")))
if best["step"] != step or abs(best["eval_loss"] - loss) > 5e-7:
    sys.exit(f"best.json names step {best['step']} (eval loss {best['eval_loss']}); "
             f"the lowest of {len(evals)} evals is step {step}'s, {loss}")
if not re.fullmatch(rf"step-{step}\.(safetensors|index\.json)", best["checkpoint"]):
    sys.exit(f"best.json names {best['checkpoint']} for step {step}")
if not os.path.exists(os.path.join(directory, best["checkpoint"])):
    sys.exit(f"{best['checkpoint']} is not in {directory}")
print(f"best: step {step}, eval loss {loss} (the lowest of {len(evals)} evals), "
      f"{best['checkpoint']} is there")
