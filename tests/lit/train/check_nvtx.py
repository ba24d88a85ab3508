"""Summarizes the NVTX ranges FakeNvtx.cpp wrote down: usage check_nvtx.py LOG.

Each line is "T push DOMAIN: MESSAGE" or "T pop DOMAIN". Checks that every
thread's ranges nest and are all popped, and that every range is in the
domain "kiln". Prints, per thread, its top-level ranges (runs of one name
counted), each with the ranges inside it counted by their first word (the
thunks' kinds: kernel, gemm, ...). Exits 1 with the reason."""
import re
import sys
from collections import Counter

path = sys.argv[1]
stacks, tops = {}, {}
for n, line in enumerate(open(path).read().splitlines(), 1):
    m = re.fullmatch(r"(\d+) (push|pop) ([^:]+)(?:: (.*))?", line)
    if not m:
        sys.exit(f"{path}:{n}: not a push or a pop: {line!r}")
    thread, op, domain, message = m.groups()
    if domain != "kiln":
        sys.exit(f"{path}:{n}: domain {domain!r}, expected 'kiln'")
    stack = stacks.setdefault(thread, [])
    if op == "push":
        if not stack:
            tops.setdefault(thread, []).append([message, Counter()])
        else:
            tops[thread][-1][1][message.split()[0]] += 1
        stack.append(message)
    elif not stack:
        sys.exit(f"{path}:{n}: thread {thread} pops a range it never pushed")
    else:
        stack.pop()
for thread, stack in stacks.items():
    if stack:
        sys.exit(f"{path}: thread {thread} never popped {stack}")
for thread, ranges in tops.items():
    print(f"thread {thread}:")
    # Consecutive top-level ranges with the same name and contents, counted.
    runs = []
    for name, inner in ranges:
        key = (re.sub(r"\d+", "N", name), tuple(sorted(inner.items())))
        if runs and runs[-1][0] == key:
            runs[-1][1] += 1
            runs[-1][2].append(name)
        else:
            runs.append([key, 1, [name]])
    for (_, inner), count, names in runs:
        what = ", ".join(f"{n} {k}" for k, n in sorted(inner, key=lambda kv: -kv[1]))
        label = names[0] if count == 1 else f"{names[0]} .. {names[-1]}"
        print(f"  {label}" + (f" x{count}" if count > 1 else "") +
              (f": {what}" if what else ""))
