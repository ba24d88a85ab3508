#!/usr/bin/env python3
"""Runs a command with stderr merged into stdout, passes the output through
and then prints "exit code: N" (or "signal: N" after a crash), so a test can
check the exact exit code: 1 for a bad value or file, 2 for a usage error."""
import subprocess
import sys

result = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
sys.stdout.write(result.stdout.decode("utf-8", "replace"))
if result.returncode < 0:
    print("signal: %d" % -result.returncode)
else:
    print("exit code: %d" % result.returncode)
