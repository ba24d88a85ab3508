"""Checks a `kiln train --metrics-file` JSON-lines file: N records with the
fields the issue names, steps and epochs increasing, accuracies in [0, 1],
and the last test accuracy at least the target. Prints
'N evals, final test accuracy A >= T' or exits non-zero saying what failed."""
import json
import sys

path, count, target = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
records = [json.loads(line) for line in open(path)]
if len(records) != count:
    sys.exit("expected %d records, found %d" % (count, len(records)))
for r in records:
    for key in ("step", "epoch", "loss", "test_accuracy", "samples_per_second"):
        if key not in r or r[key] is None:
            sys.exit("record %s: missing %s" % (r, key))
    if not 0 <= r["test_accuracy"] <= 1 or r["samples_per_second"] <= 0:
        sys.exit("record %s: out of range" % r)
steps = [r["step"] for r in records]
epochs = [r["epoch"] for r in records]
if steps != sorted(steps) or epochs != list(range(1, count + 1)):
    sys.exit("steps %s / epochs %s not increasing" % (steps, epochs))
final = records[-1]["test_accuracy"]
if final < target:
    sys.exit("final test accuracy %.4f < %.2f" % (final, target))
print("%d evals, final test accuracy %.4f >= %.2f" % (count, final, target))
