"""Prints the names of a `kiln train` checkpoint's tensors, one per line,
sorted. Used by amp.test to show that checkpoints hold no parameter copy.

usage: list_tensors.py CHECKPOINT"""
import sys

from safetensors.numpy import load_file

for name in sorted(load_file(sys.argv[1])):
    print(name)
