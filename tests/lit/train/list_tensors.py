"""Prints the names of a `kiln train` checkpoint's tensors, one per line,
sorted; with --dtypes, each followed by its dtype. Used by amp.test to show
that checkpoints hold no parameter copy, and by f64-checkpoint.test to show
that an f64 model's checkpoint holds f64.

usage: list_tensors.py [--dtypes] CHECKPOINT"""
import sys

from safetensors.numpy import load_file

dtypes = sys.argv[1] == "--dtypes"
for name, value in sorted(load_file(sys.argv[-1]).items()):
    print(f"{name} {value.dtype}" if dtypes else name)
