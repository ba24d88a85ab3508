#!/usr/bin/env python3
"""Runs `kiln launch ARGS...` (its ranks print "ready" once they wait for a
signal), sends SIGNAL to the launcher when NPROC ranks are ready, and prints
the launcher's output and exit code.

Usage: launch-send-signal.py SIGNAL NPROC kiln launch ..."""
import signal
import subprocess
import sys

sig = getattr(signal, sys.argv[1])
nproc = int(sys.argv[2])
proc = subprocess.Popen(sys.argv[3:], stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT, text=True)
lines = []
ready = 0
for line in proc.stdout:
    lines.append(line)
    if line.rstrip().endswith("] ready"):
        ready += 1
        if ready == nproc:
            proc.send_signal(sig)
            break
rest, _ = proc.communicate(timeout=60)
lines.extend(rest.splitlines(keepends=True))
sys.stdout.write("".join(sorted(l for l in lines if l.startswith("[rank"))))
sys.stdout.write("".join(l for l in lines if not l.startswith("[rank")))
print("exit code: %d" % proc.returncode)
