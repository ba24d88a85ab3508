#!/usr/bin/env python3
"""Runs a command, passes its stderr and stdout through, then prints
"exit code: N" (or "signal: N" for a crash), so a lit test can check the
exact exit code of a tool."""
import subprocess
import sys

result = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
sys.stdout.write(result.stdout.decode("utf-8", "replace"))
if result.returncode < 0:
    print("signal: %d" % -result.returncode)
else:
    print("exit code: %d" % result.returncode)
