"""Checks a kiln train --profile file: usage check_profile.py FILE THUNKS STEPS.

A CSV: every thunk 0..THUNKS-1 has a row, in order, timed STEPS times, with
a non-negative time; prints the count by kind. A Chrome trace (.json): one
complete event per thunk, the thunks' args and calls as above, the
events of the compute row in thunk order, each starting after the one
before it ended (they run one after another), and the host's row: the
batch, then the step's call holding every thunk; prints the same line. Exits 1
with the reason."""
import csv
import json
import sys
from collections import Counter

path, thunks, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
if path.endswith(".json"):
    every = [e for e in json.load(open(path))["traceEvents"] if e["ph"] == "X"]
    host = [e for e in every if e["cat"] == "host"]
    events = [e for e in every if e["cat"] != "host"]
    # The host's row: waiting for the batch, then the step's call, which
    # holds every thunk (one clock on the CPU).
    if [e["name"].split()[0] for e in host] != ["batch", "step"] or \
            any(e["tid"] != 2 for e in host):
        sys.exit(f"{path}: host spans {[e['name'] for e in host]}, expected batch, step N")
    batch, step = host
    if abs(batch["ts"] + batch["dur"] - step["ts"]) > 1e-3:
        sys.exit(f"{path}: the step starts at {step['ts']} us, not where the batch ends")
    for e in events:
        if e["ts"] < step["ts"] - 1e-3 or \
                e["ts"] + e["dur"] > step["ts"] + step["dur"] + 1e-3:
            sys.exit(f"{path}: thunk {e['args']['thunk']} ({e['ts']} + {e['dur']} us) "
                     f"outside the step ({step['ts']} + {step['dur']} us)")
    rows = [{"thunk": str(e["args"]["thunk"]), "calls": e["args"]["calls"],
             "ms": e["args"]["mean_ms"], "kind": e["cat"], "what": e["name"]}
            for e in events]
    compute = [e for e in events if e["tid"] == 0]
    for a, b in zip(compute, compute[1:]):
        if b["ts"] < a["ts"] + a["dur"] - 1e-3:
            sys.exit(f"{path}: thunk {b['args']['thunk']} starts at {b['ts']} us, "
                     f"before thunk {a['args']['thunk']} ends ({a['ts']} + {a['dur']})")
    if any(e["ts"] < 0 or e["dur"] < 0 for e in events):
        sys.exit(f"{path}: a negative time")
else:
    rows = list(csv.DictReader(open(path)))
if [r["thunk"] for r in rows] != [str(i) for i in range(thunks)]:
    sys.exit(f"{path}: rows for thunks {[r['thunk'] for r in rows]}, expected 0..{thunks - 1}")
for r in rows:
    if int(r["calls"]) != steps:
        sys.exit(f"{path}: thunk {r['thunk']} timed {r['calls']} times, expected {steps}")
    if not float(r["ms"]) >= 0:
        sys.exit(f"{path}: thunk {r['thunk']}: {r['ms']} ms")
    if not r["what"].startswith(r["kind"]):
        sys.exit(f"{path}: thunk {r['thunk']}: kind {r['kind']}, what {r['what']}")
kinds = Counter(r["kind"] for r in rows)
print(f"{thunks} thunks, each timed {steps} times: " +
      ", ".join(f"{n} {k}" for k, n in kinds.most_common()))
