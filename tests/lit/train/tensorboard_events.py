"""Checks kiln train's TensorBoard event files with TensorBoard's own reader.

Usage: tensorboard_events.py TB_DIR RUN_LOG METRICS_JSONL [RUN_LOG METRICS_JSONL ...]

The runs are given in the order they ran into TB_DIR. What TensorBoard
should show is built from their console logs ("step N loss X") and metrics
files (one record per eval) alone: a run that says "resumed at step S"
first drops every earlier value at step S + 1 and later, which is what
TensorBoard does for a session START (PyTorch's purge_step). That is
compared, tag by tag, with what tensorboard's EventAccumulator reads from
TB_DIR (it checks every record's CRC-32C as it reads).
"""

import json
import math
import re
import sys

from tensorboard.backend.event_processing import event_accumulator


def close(a, b, printed_digits=None):
    if math.isnan(a) and math.isnan(b):
        return True
    # Event files hold float32; a log line prints 6 decimals.
    slack = 0.5 * 10 ** -printed_digits if printed_digits else 0.0
    return abs(a - b) <= slack + 1e-6 * max(1.0, abs(b))


def main():
    tb_dir, runs = sys.argv[1], sys.argv[2:]
    if len(runs) % 2:
        sys.exit("usage: tensorboard_events.py TB_DIR (RUN_LOG METRICS)...")
    expected = {}  # tag -> {step: value}
    for log_path, metrics_path in zip(runs[0::2], runs[1::2]):
        log = open(log_path).read()
        resumed = re.search(r"resumed at step (\d+)", log)
        if resumed:
            start = int(resumed.group(1)) + 1
            for series in expected.values():
                for step in [s for s in series if s >= start]:
                    del series[step]
        for step, loss in re.findall(r"^step (\d+) loss (\S+)$", log, re.M):
            expected.setdefault("train/loss", {})[int(step)] = float(loss)
        for line in open(metrics_path):
            r = json.loads(line)
            step = r["step"]
            if r["eval"]:
                expected.setdefault("eval/loss", {})[step] = r["loss"]
                if r["test_accuracy"] is not None:
                    expected.setdefault("eval/accuracy", {})[step] = r["test_accuracy"]
            if r["train_loss"] is not None:
                expected.setdefault("train/epoch_loss", {})[step] = r["train_loss"]
            expected.setdefault("train/samples_per_second", {})[step] = r["samples_per_second"]

    acc = event_accumulator.EventAccumulator(tb_dir, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    tags = sorted(acc.Tags()["scalars"])
    if tags != sorted(expected):
        sys.exit("tags: TensorBoard reads %s, the runs logged %s" % (tags, sorted(expected)))
    for tag in tags:
        got = [(e.step, e.value) for e in acc.Scalars(tag)]
        want = sorted(expected[tag].items())
        if [s for s, _ in got] != [s for s, _ in want]:
            sys.exit("%s: TensorBoard reads steps %s, expected %s" %
                     (tag, [s for s, _ in got], [s for s, _ in want]))
        digits = 6 if tag == "train/loss" else None
        for (step, value), (_, ref) in zip(got, want):
            if not close(value, ref, digits):
                sys.exit("%s at step %d: TensorBoard reads %r, the run logged %r" %
                         (tag, step, value, ref))
    print("tensorboard agrees: " +
          ", ".join("%s %d" % (tag, len(expected[tag])) for tag in tags))
    print("train/loss steps %s" % sorted(expected["train/loss"]))


if __name__ == "__main__":
    main()
