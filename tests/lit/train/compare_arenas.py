"""Compares the planned arenas of two `kiln compile --report` outputs:
compare_arenas.py BEFORE AFTER MAX_RATIO prints "planned arena B -> A bytes
(ratio R)" and exits non-zero unless A <= MAX_RATIO * B."""

import re
import sys


def arena(path):
    match = re.search(r"planned arena:\s+(\d+) bytes", open(path).read())
    if not match:
        sys.exit(f"{path}: no 'planned arena' line")
    return int(match.group(1))


before, after, limit = arena(sys.argv[1]), arena(sys.argv[2]), float(sys.argv[3])
ratio = after / before
print(f"planned arena {before} -> {after} bytes (ratio {ratio:.3f})")
if ratio > limit:
    sys.exit(f"the arena shrank to {ratio:.3f} of its size, not to {limit} or less")
