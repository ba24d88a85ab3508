"""kiln train stopped by a signal, then resumed: usage
stop_signal.py SIGNAL DIR [--no-dir] -- COMMAND...

COMMAND is a kiln train (or trainer) command without --max-steps and
--checkpoint-dir. It runs with a step budget it cannot finish soon and
--checkpoint-dir=DIR/stopped; once it has printed its third step's loss it
gets SIGNAL (TERM or INT). The run must end by itself within 120 s. Then,
for the N it stopped after, the same command with --resume runs to N + 4,
and once more without a stop from the start to N + 4 in DIR/whole; the two
step-(N+4) checkpoints must be equal byte for byte. Prints what it saw;
exits 1 with the reason. --no-dir: the first run only, without
--checkpoint-dir."""
import filecmp
import os
import re
import signal
import subprocess
import sys

sig = getattr(signal, "SIG" + sys.argv[1])
out = sys.argv[2]
no_dir = "--no-dir" in sys.argv[3:sys.argv.index("--")]
command = sys.argv[sys.argv.index("--") + 1:]
stopped = os.path.join(out, "stopped")
first = command + ["--max-steps=100000000", "--log-every=1"]
if not no_dir:
    first.append(f"--checkpoint-dir={stopped}")
proc = subprocess.Popen(first, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
lines, sent = [], False
for line in proc.stdout:
    lines.append(line.rstrip("\n"))
    if not sent and re.match(r"step 3 loss", line):
        proc.send_signal(sig)
        sent = True
try:
    code = proc.wait(timeout=120)
except subprocess.TimeoutExpired:
    proc.kill()
    sys.exit("the run did not stop within 120 s of the signal")
if not sent:
    sys.exit("the run ended before its third step:\n" + "\n".join(lines[-5:]))
print(f"exit {code}")
for line in lines:
    if ": stopped by" in line or ": checkpoint" in line:
        print(line.replace(out, "DIR"))
if no_dir:
    sys.exit(0)
m = next((re.search(r"stopped by \S+ after step (\d+)", l) for l in lines
          if "stopped by" in l), None)
if not m:
    sys.exit("no 'stopped by' line")
n = int(m.group(1))
latest = open(os.path.join(stopped, "latest")).read().strip()
print(f"latest: {latest} (step {n})" if latest == f"step-{n}.safetensors"
      else f"latest: {latest}, expected step-{n}.safetensors")
end = n + 4
for args in (["--resume", f"--checkpoint-dir={stopped}"],
             [f"--checkpoint-dir={os.path.join(out, 'whole')}"]):
    run = subprocess.run(command + [f"--max-steps={end}"] + args,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if run.returncode != 0:
        sys.exit(f"{' '.join(args)}: exit {run.returncode}\n{run.stdout}")
a = os.path.join(stopped, f"step-{end}.safetensors")
b = os.path.join(out, "whole", f"step-{end}.safetensors")
if not filecmp.cmp(a, b, shallow=False):
    sys.exit(f"resumed to step {end}: {a} differs from the uninterrupted run's {b}")
print("resumed 4 steps further: the checkpoint is the uninterrupted run's, byte for byte")
