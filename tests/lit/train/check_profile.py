"""Checks a kiln train --profile CSV: usage check_profile.py FILE THUNKS STEPS.
Every thunk 0..THUNKS-1 has a row, in order, timed STEPS times, with a
non-negative time; prints the count by kind. Exits 1 with the reason."""
import csv
import sys
from collections import Counter

path, thunks, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
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
